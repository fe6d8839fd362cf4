// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * stats.c - per-interval GPU statistics for sentinel mode.
 *
 * Records are held compactly until the interval is cut, then sorted by
 * (pid, device, start): busy time is the union of activity on a device
 * (kernels on several streams overlap), an idle gap is the time between two
 * busy periods, and percentiles are exact over the interval's samples.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct srec {
	uint64_t start, end;
	int64_t l2s; /* launch to start, -1: unmatched */
	uint32_t pid, device, stream;
	int32_t name_id;
	uint8_t kind;
	uint64_t bytes;
};

struct corr_stats {
	struct corr_stats_opts o;
	struct srec *recs;
	uint32_t n, cap;
	uint64_t dropped;
	struct names *names;
	/* scratch for one cut */
	uint64_t *l2s;
	struct {
		int32_t id;
		uint64_t dur;
	} * per_name;
};

struct corr_stats *corr_stats__new(const struct corr_stats_opts *opts)
{
	struct corr_stats *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	if (opts)
		memcpy(&st->o, opts, opts->sz < sizeof(st->o) ? opts->sz : sizeof(st->o));
	st->o.sz = sizeof(st->o);
	if (!st->o.top_n)
		st->o.top_n = 5;
	if (st->o.top_n > CORR_STATS_MAX_TOP)
		st->o.top_n = CORR_STATS_MAX_TOP;
	if (!st->o.capacity)
		st->o.capacity = 1u << 20;
	st->names = names_new(1u << 18);
	if (!st->names) {
		corr_stats__free(st);
		errno = ENOMEM;
		return NULL;
	}
	return st;
}

void corr_stats__free(struct corr_stats *st)
{
	if (!st)
		return;
	free(st->recs);
	free(st->l2s);
	free(st->per_name);
	names_free(st->names);
	free(st);
}

uint64_t corr_stats__dropped(const struct corr_stats *st)
{
	return st->dropped;
}

uint64_t corr_stats__first_ts(const struct corr_stats *st)
{
	uint64_t m = UINT64_MAX;

	for (uint32_t i = 0; i < st->n; i++)
		if (st->recs[i].start < m)
			m = st->recs[i].start;
	return m;
}

int corr_stats__add(struct corr_stats *st, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct srec *r;

	if (st->n == st->cap) {
		uint32_t ncap = st->cap ? st->cap * 2 : 4096;
		struct srec *nr;

		if (st->n >= st->o.capacity) {
			st->dropped++;
			return -ENOSPC;
		}
		if (ncap > st->o.capacity)
			ncap = st->o.capacity;
		nr = realloc(st->recs, (size_t)ncap * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		st->recs = nr;
		st->cap = ncap;
	}
	r = &st->recs[st->n++];
	r->start = g->start_ns;
	r->end = g->end_ns > g->start_ns ? g->end_ns : g->start_ns;
	r->l2s = l && g->start_ns >= l->ts_ns ? (int64_t)(g->start_ns - l->ts_ns) : l ? 0 : -1;
	/* unmatched: the record's own pid when its source knew it (live shim, nsys) */
	r->pid = l ? l->pid : g->pid;
	r->device = g->device;
	r->stream = g->stream;
	r->kind = (uint8_t)g->kind;
	r->bytes = g->bytes;
	r->name_id = -1;
	if (g->kind == CORR_KIND_KERNEL && g->name) {
		int32_t id = names_intern_gpu(st->names, g);

		r->name_id = id < 0 ? -1 : id;
	}
	return 0;
}

static int cmp_rec(const void *a, const void *b)
{
	const struct srec *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->device != y->device)
		return x->device < y->device ? -1 : 1;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_name(const void *a, const void *b)
{
	const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return x < y ? -1 : x > y;
}

/* nearest-rank percentile of a sorted array */
static uint64_t pct(const uint64_t *v, uint64_t n, unsigned p)
{
	uint64_t rank;

	if (!n)
		return 0;
	rank = (n * p + 99) / 100;
	if (rank == 0)
		rank = 1;
	return v[rank - 1];
}

static void summarise(struct corr_stats *st, struct srec *r, uint32_t n, uint64_t t0, uint64_t t1,
		      corr_summary_fn fn, void *ctx)
{
	struct corr_summary s;
	uint32_t nl2s = 0, nn = 0;

	memset(&s, 0, sizeof(s));
	s.pid = r[0].pid;
	s.t0_ns = t0;
	s.t1_ns = t1;
	for (uint32_t i = 0; i < n;) {
		/* one device: records sorted by start */
		uint32_t dev = r[i].device, di;
		uint64_t busy_end = 0, busy = 0;
		bool first = true;

		di = s.n_dev < CORR_STATS_MAX_DEV ? s.n_dev++ : CORR_STATS_MAX_DEV - 1;
		s.dev[di].device = dev;
		for (; i < n && r[i].device == dev; i++) {
			struct srec *x = &r[i];
			uint32_t k;

			if (x->kind == CORR_KIND_KERNEL)
				s.kernels++;
			else if (x->kind == CORR_KIND_MEMCPY) {
				s.memcpys++;
				s.memcpy_bytes += x->bytes;
			} else
				s.memsets++;
			if (x->l2s >= 0) {
				s.matched++;
				st->l2s[nl2s++] = (uint64_t)x->l2s;
			} else {
				s.unmatched++;
			}
			if (x->kind == CORR_KIND_KERNEL && x->name_id >= 0) {
				st->per_name[nn].id = x->name_id;
				st->per_name[nn].dur = x->end - x->start;
				nn++;
			}
			/* device busy = union of intervals */
			if (first || x->start >= busy_end) {
				if (!first) {
					uint64_t gap = x->start - busy_end;

					if (gap > 0 && gap >= st->o.gap_min_ns) {
						s.dev[di].gaps++;
						s.dev[di].gap_ns += gap;
						if (gap > s.dev[di].gap_max_ns)
							s.dev[di].gap_max_ns = gap;
					}
				}
				busy += x->end - x->start;
				busy_end = x->end;
				first = false;
			} else if (x->end > busy_end) {
				busy += x->end - busy_end;
				busy_end = x->end;
			}
			/* per stream: work on a stream is serial, so the sum is its busy time */
			for (k = 0; k < s.n_streams; k++)
				if (s.streams[k].device == dev && s.streams[k].stream == x->stream)
					break;
			if (k == s.n_streams) {
				if (s.n_streams < CORR_STATS_MAX_STREAMS) {
					s.n_streams++;
					s.streams[k].device = dev;
					s.streams[k].stream = x->stream;
				} else {
					k = CORR_STATS_MAX_STREAMS -
					    1; /* overflow folds into the last */
				}
			}
			s.streams[k].busy_ns += x->end - x->start;
			s.streams[k].records++;
		}
		s.dev[di].busy_ns += busy;
	}
	if (nl2s) {
		qsort(st->l2s, nl2s, sizeof(*st->l2s), cmp_u64);
		s.l2s_count = nl2s;
		s.l2s_p50_ns = pct(st->l2s, nl2s, 50);
		s.l2s_p90_ns = pct(st->l2s, nl2s, 90);
		s.l2s_p99_ns = pct(st->l2s, nl2s, 99);
		s.l2s_max_ns = st->l2s[nl2s - 1];
	}
	if (nn) {
		/* aggregate per name, then keep the top N by total time */
		uint32_t w = 0;

		corr_sort(st->per_name, nn, sizeof(*st->per_name), cmp_name);
		for (uint32_t i = 0; i < nn;) {
			int32_t id = st->per_name[i].id;
			uint64_t tot = 0, cnt = 0;

			for (; i < nn && st->per_name[i].id == id; i++) {
				tot += st->per_name[i].dur;
				cnt++;
			}
			/* insertion into the top list */
			if (s.n_top < st->o.top_n || tot > s.top[s.n_top - 1].total_ns) {
				uint32_t k = s.n_top < st->o.top_n ? s.n_top++ : s.n_top - 1;

				while (k > 0 && s.top[k - 1].total_ns < tot) {
					s.top[k] = s.top[k - 1];
					k--;
				}
				s.top[k].name = names_str(st->names, id);
				s.top[k].count = cnt;
				s.top[k].total_ns = tot;
			}
			w++;
		}
		(void)w;
	}
	fn(ctx, &s);
}

int corr_stats__cut(struct corr_stats *st, uint64_t t0_ns, uint64_t t1_ns, corr_summary_fn fn,
		    void *ctx)
{
	uint32_t n = 0, keep = 0;
	struct srec *sel;
	void *p;

	/* partition: records of the interval to the front */
	for (uint32_t i = 0; i < st->n; i++) {
		if (st->recs[i].start < t1_ns) {
			struct srec tmp = st->recs[n];

			st->recs[n] = st->recs[i];
			st->recs[i] = tmp;
			n++;
		}
	}
	if (!n)
		return 0;
	p = realloc(st->l2s, (size_t)n * sizeof(*st->l2s));
	if (!p)
		return -ENOMEM;
	st->l2s = p;
	p = realloc(st->per_name, (size_t)n * sizeof(*st->per_name));
	if (!p)
		return -ENOMEM;
	st->per_name = p;
	sel = st->recs;
	if (n > 1)
		corr_sort(sel, n, sizeof(*sel), cmp_rec);
	for (uint32_t i = 0; i < n;) {
		uint32_t j = i;

		while (j < n && sel[j].pid == sel[i].pid)
			j++;
		summarise(st, sel + i, j - i, t0_ns, t1_ns, fn, ctx);
		i = j;
	}
	/* keep the later records */
	keep = st->n - n;
	memmove(st->recs, st->recs + n, (size_t)keep * sizeof(*st->recs));
	st->n = keep;
	return 0;
}
