// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * gpusum.c - --summary's "GPU records" section: what the GPUs ran over the
 * whole run, live or replayed, from every record the join (join.c) saw,
 * sent or not: records by kind, joined to their launch or not, each
 * device's busy time and span, how long launches waited for the GPU
 * (launch to start), the copies by direction, and the kernels that took the
 * most GPU time. The gpu_summary records say the same per interval; this
 * is the run's digest for a person at a terminal.
 *
 * Bounded: GS_NAMES kernel names and GS_NAME_BYTES of them (the rest
 * summed as one), GS_DEVICES
 * devices; the launch waits in a log histogram (struct qhist, core/util.h:
 * sixteenths of an octave), so its quantiles are within 6.25% (the
 * bucket's width), said so where printed.
 *
 * Everything runs on the event loop thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "correlator.h"

#define GS_NAMES 3072		 /* kernel names kept (corr_strtab) */
#define GS_NAME_BYTES (4u << 20) /* and their text: a name is ~100 bytes, 64 KiB at most */
#define GS_DEVICES 64
#define GS_TOP 10 /* kernels printed */
#define GS_NAME_SHOWN 100

struct gs_kernel {
	const char *name; /* in gpusum.names */
	uint64_t n, ns, max_ns;
};

/*
 * A device's busy time, the union of its records' activity: records come
 * out of order (a launch joined late, the unmatched at the end), so the
 * union so far is kept as disjoint spans, sorted (a recording's idle gaps
 * can be as many as its kernels: 22,050 of 22,290 records in a real V100
 * trace, which comes in stream order); past GS_SPANS, the
 * oldest is closed (its time counted, the spans before `closed` fixed). A
 * record that ends before `closed` is counted as late, its time left out.
 */
#define GS_SPANS 65536 /* 1 MiB a device at most, grown as needed */

struct gs_span {
	uint64_t s, e;
};

struct gs_device {
	bool seen;
	uint64_t n, ns;	      /* records, sum of their durations */
	uint64_t first, last; /* earliest start, latest end */
	struct gs_span *span; /* cap_span of them; NULL after a failed growth (busy not known) */
	uint32_t nspan, cap_span;
	bool no_memory;
	uint64_t busy_closed, closed, late;
};

struct gpusum {
	uint64_t n[CORR_KIND_COUNT], ns[CORR_KIND_COUNT];
	uint64_t joined;
	uint64_t copy_n[16], copy_bytes[16], copy_ns[16]; /* by CUpti_ActivityMemcpyKind */
	struct gs_device dev[GS_DEVICES];
	uint64_t other_devices;
	struct corr_strtab *names;  /* the kernels' names, by id */
	struct gs_kernel *k;	    /* by name id, GS_NAMES */
	uint64_t other_n, other_ns; /* kernels whose name found no room, or had none */
	struct qhist wait;	    /* launch to start, ns */
	uint64_t negative_waits;
};

struct gpusum *gpusum_new(void)
{
	struct gpusum *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->k = calloc(GS_NAMES, sizeof(*s->k));
	s->names = corr_strtab_new(GS_NAMES, GS_NAME_BYTES);
	if (!s->k || !s->names) {
		gpusum_free(s);
		errno = ENOMEM;
		return NULL;
	}
	return s;
}

void gpusum_free(struct gpusum *s)
{
	if (!s)
		return;
	corr_strtab_free(s->names);
	for (unsigned d = 0; d < GS_DEVICES; d++)
		free(s->dev[d].span);
	free(s->k);
	free(s);
}

static void add_kernel(struct gpusum *s, const struct corr_gpu *g, uint64_t ns)
{
	int32_t id =
	    g->name ? corr_strtab_id(s->names, g->name, strlen(g->name), g->name_hash) : -1;
	struct gs_kernel *k;

	if (id < 0) { /* no name, or no room for it */
		s->other_n++;
		s->other_ns += ns;
		return;
	}
	k = &s->k[id];
	if (!k->name)
		k->name = corr_strtab_str(s->names, id, NULL);
	k->n++;
	k->ns += ns;
	if (ns > k->max_ns)
		k->max_ns = ns;
}

/* [st, en) into the device's union of spans */
static void busy_add(struct gs_device *d, uint64_t st, uint64_t en)
{
	uint32_t lo = 0, hi, j;

	if (d->no_memory)
		return;
	if (en <= d->closed) {
		d->late++;
		return;
	}
	if (st < d->closed)
		st = d->closed;
	/* the first span that ends at or after st: it and the ones after may merge */
	hi = d->nspan;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (d->span[mid].e < st)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (j = lo; j < d->nspan && d->span[j].s <= en; j++) {
		if (d->span[j].s < st)
			st = d->span[j].s;
		if (d->span[j].e > en)
			en = d->span[j].e;
	}
	if (j == lo) { /* overlaps none: a new span at lo */
		if (d->nspan == d->cap_span && d->cap_span < GS_SPANS) {
			uint32_t cap = d->cap_span ? 2 * d->cap_span : 256;
			struct gs_span *sp = realloc(d->span, cap * sizeof(*sp));

			if (!sp) {
				d->no_memory = true;
				return;
			}
			d->span = sp;
			d->cap_span = cap;
		}
		if (d->nspan == GS_SPANS) {
			if (lo == 0) { /* older than all kept: close it at once */
				d->busy_closed += en - st;
				d->closed = en;
				return;
			}
			d->busy_closed += d->span[0].e - d->span[0].s;
			d->closed = d->span[0].e;
			memmove(d->span, d->span + 1, (size_t)(--d->nspan) * sizeof(*d->span));
			lo--;
		}
		memmove(d->span + lo + 1, d->span + lo, (size_t)(d->nspan - lo) * sizeof(*d->span));
		d->nspan++;
	} else if (j > lo + 1) { /* spans lo..j-1 become one */
		memmove(d->span + lo + 1, d->span + j, (size_t)(d->nspan - j) * sizeof(*d->span));
		d->nspan -= j - lo - 1;
	}
	d->span[lo] = (struct gs_span){st, en};
}

static uint64_t busy_of(const struct gs_device *d)
{
	uint64_t b = d->busy_closed;

	for (uint32_t i = 0; i < d->nspan; i++)
		b += d->span[i].e - d->span[i].s;
	return b;
}

void gpusum_add(struct gpusum *s, const struct corr_gpu *g, const struct corr_launch *l)
{
	uint64_t ns = g->end_ns > g->start_ns ? g->end_ns - g->start_ns : 0;
	struct gs_device *d;

	if (!s || g->kind >= CORR_KIND_COUNT)
		return;
	s->n[g->kind]++;
	s->ns[g->kind] += ns;
	if (g->kind == CORR_KIND_KERNEL)
		add_kernel(s, g, ns);
	else if (g->kind == CORR_KIND_MEMCPY && g->copy_kind < 16) {
		s->copy_n[g->copy_kind]++;
		s->copy_bytes[g->copy_kind] += g->bytes;
		s->copy_ns[g->copy_kind] += ns;
	}
	if (l) {
		s->joined++;
		if (g->start_ns < l->ts_ns) {
			s->negative_waits++; /* clock jitter between the two sources */
		} else {
			qhist_add(&s->wait, g->start_ns - l->ts_ns);
		}
	}
	if (g->device >= GS_DEVICES) {
		s->other_devices++;
		return;
	}
	d = &s->dev[g->device];
	if (!d->seen) {
		d->seen = true;
		d->first = g->start_ns;
	}
	d->n++;
	d->ns += ns;
	if (g->start_ns < d->first)
		d->first = g->start_ns;
	if (g->end_ns > d->last)
		d->last = g->end_ns;
	if (ns)
		busy_add(d, g->start_ns, g->end_ns);
}

static const char *copy_name(unsigned k)
{
	/* CUpti_ActivityMemcpyKind (cupti_activity.h) */
	static const char *const names[] = {"?",    "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
					    "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"};

	return k < sizeof(names) / sizeof(names[0]) ? names[k] : "other";
}

static int by_ns_desc(const void *pa, const void *pb)
{
	const struct gs_kernel *a = *(const struct gs_kernel *const *)pa;
	const struct gs_kernel *b = *(const struct gs_kernel *const *)pb;

	if (a->ns != b->ns)
		return a->ns < b->ns ? 1 : -1;
	return strcmp(a->name, b->name);
}

/*
 * a kernel's name as printed: demangled where it is mangled, at most
 * GS_NAME_SHOWN bytes, control characters as '?' (a recording's names are
 * its author's: none may steer the terminal, also where gpusum_print() is
 * called without the digest's filter, term_safe_out())
 */
static void shown_name(const char *name, char *out, size_t sz)
{
	const char *d = name[0] == '_' && name[1] == 'Z' ? corr_demangle(name) : NULL;
	size_t n;

	snprintf(out, sz, "%s", d ? d : name);
	term_safe(out);
	n = strlen(out);
	if (n > GS_NAME_SHOWN) {
		size_t cut = GS_NAME_SHOWN - 3;

		while (cut > 0 && (out[cut] & 0xc0) == 0x80)
			cut--; /* never inside a UTF-8 character */
		memcpy(out + cut, "...", 4);
	}
}

void gpusum_print(const struct gpusum *s, FILE *out)
{
	uint64_t all = 0, kns = 0;
	const struct gs_kernel **top;
	char name[GS_NAME_SHOWN + 8];
	uint32_t nt;

	if (!s)
		return;
	for (int k = 0; k < CORR_KIND_COUNT; k++)
		all += s->n[k];
	if (!all)
		return;
	kns = s->ns[CORR_KIND_KERNEL];
	fprintf(out, "\nGPU records (docs/events.md, kernel and gpu_summary)\n");
	fprintf(out,
		"  records      %llu: %llu kernels (%.3f ms), %llu copies (%.3f ms), %llu sets; "
		"%llu joined to their launch\n",
		(unsigned long long)all, (unsigned long long)s->n[CORR_KIND_KERNEL],
		(double)kns / 1e6, (unsigned long long)s->n[CORR_KIND_MEMCPY],
		(double)s->ns[CORR_KIND_MEMCPY] / 1e6, (unsigned long long)s->n[CORR_KIND_MEMSET],
		(unsigned long long)s->joined);
	for (unsigned d = 0; d < GS_DEVICES; d++) {
		const struct gs_device *v = &s->dev[d];
		uint64_t span = v->last > v->first ? v->last - v->first : 0;

		if (!v->seen)
			continue;
		if (v->no_memory) {
			fprintf(
			    out,
			    "  device %-4u %llu records over %.3f ms (busy not known: no memory)\n",
			    d, (unsigned long long)v->n, (double)span / 1e6);
			continue;
		}
		fprintf(out,
			"  device %-4u %llu records over %.3f ms: busy %.3f ms (%.1f%%), their "
			"durations add to %.3f ms\n",
			d, (unsigned long long)v->n, (double)span / 1e6, (double)busy_of(v) / 1e6,
			span ? 100.0 * (double)busy_of(v) / (double)span : 0.0,
			(double)v->ns / 1e6);
		if (v->late)
			fprintf(out,
				"              %llu records came after their time was closed "
				"(%d spans kept): not in busy\n",
				(unsigned long long)v->late, GS_SPANS);
	}
	if (s->other_devices)
		fprintf(out, "  devices past %d: %llu records, not shown\n", GS_DEVICES - 1,
			(unsigned long long)s->other_devices);
	if (s->wait.n)
		fprintf(
		    out,
		    "  launch to start (the GPU's queue, within 6.25%%): p50 %.1f us, p90 %.1f us, "
		    "p99 %.1f us, max %.1f us over %llu joined records%s\n",
		    qhist_quantile(&s->wait, 0.50) / 1e3, qhist_quantile(&s->wait, 0.90) / 1e3,
		    qhist_quantile(&s->wait, 0.99) / 1e3, (double)s->wait.max / 1e3,
		    (unsigned long long)s->wait.n,
		    s->negative_waits ? " (and some that started before their launch: clock jitter)"
				      : "");
	for (unsigned k = 0; k < 16; k++)
		if (s->copy_n[k])
			fprintf(out, "  copies %-5s %llu, %.1f MiB in %.3f ms%s\n", copy_name(k),
				(unsigned long long)s->copy_n[k],
				(double)s->copy_bytes[k] / 1048576.0, (double)s->copy_ns[k] / 1e6,
				k ? "" : " (the recording does not say which way)");
	if (!s->n[CORR_KIND_KERNEL])
		return;
	nt = corr_strtab_count(s->names);
	top = malloc(nt * sizeof(*top) + 1);
	if (!top)
		return;
	for (uint32_t i = 0; i < nt; i++)
		top[i] = &s->k[i];
	qsort(top, nt, sizeof(*top), by_ns_desc);
	fprintf(out, "  kernels by GPU time (%u names):\n", nt);
	fprintf(out, "  %13s %6s %8s %11s %11s  %s\n", "GPU time", "share", "count", "mean", "max",
		"kernel");
	for (uint32_t i = 0; i < nt && i < GS_TOP; i++) {
		shown_name(top[i]->name, name, sizeof(name));
		fprintf(out, "  %10.3f ms %5.1f%% %8llu %8.1f us %8.1f us  %s\n",
			(double)top[i]->ns / 1e6,
			kns ? 100.0 * (double)top[i]->ns / (double)kns : 0.0,
			(unsigned long long)top[i]->n, (double)top[i]->ns / (double)top[i]->n / 1e3,
			(double)top[i]->max_ns / 1e3, name);
	}
	if (nt > GS_TOP || s->other_n) {
		uint64_t rn = s->other_n, rns = s->other_ns;

		for (uint32_t i = GS_TOP; i < nt; i++) {
			rn += top[i]->n;
			rns += top[i]->ns;
		}
		fprintf(out, "  %10.3f ms %5.1f%% %8llu %11s %11s  (the other kernels)\n",
			(double)rns / 1e6, kns ? 100.0 * (double)rns / (double)kns : 0.0,
			(unsigned long long)rn, "", "");
	}
	free(top);
}
