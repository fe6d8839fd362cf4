// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * aggregate.c - per-interval summaries from the in-kernel aggregates.
 *
 * BPF keeps only growing counters (thread_stats, syscall_stats,
 * netdev_stats); every interval the agent reads them, reports the
 * difference with the previous read as "thread" and "net" records, and
 * deletes the entries of threads that are gone after their last report.
 * Totals since start are kept for the readable summary (--summary): of
 * every live thread, and of the first EXITED_LISTED threads that exited;
 * later exited threads are folded into one "not listed" line and freed, so
 * a churn of short-lived processes holds no more per-thread state than its
 * live threads (issue 18, finding 18).
 */
#include <errno.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"

#define EXITED_LISTED 256 /* exited threads listed in the summary, the rest folded */

/* what the summary shows of a thread: its counts since the digest began */
struct thread_sum {
	uint64_t launches[API_COUNT];
	uint64_t blocked_ns, preempted_ns, offcpu_count, runq_ns, runq_count;
};

struct thread_prev {
	uint32_t tid; /* tree key */
	uint32_t pid;
	char comm[TASK_COMM_LEN];
	struct thread_stats last; /* previous read */
	struct thread_sum base;	  /* its counts at `agentctl summary --reset`; zero before */
	/* intervals in which the thread launched: the summary's rates are over them */
	uint64_t first_ns, last_ns;
	bool gone;   /* found gone at the previous read: its entries go at this one */
	bool listed; /* exited, kept for the summary (one of EXITED_LISTED) */
};

struct sc_prev {
	struct syscall_key key; /* tree key */
	struct syscall_stats last;
	uint64_t slow_count, slow_ns, slow_max_ns; /* from single events, for the summary */
};

struct net_prev {
	struct netdev_key key;
	struct netdev_stats last;
	struct netdev_stats total;
};

struct agg {
	void *threads;	/* tsearch tree of thread_prev */
	void *syscalls; /* tsearch tree of sc_prev */
	void *buckets;	/* this interval's syscall deltas by thread (sc_bucket) */
	struct net_prev *nets;
	int n_nets, cap_nets;
	/* walk scratch */
	struct agent *a;
	uint64_t now, interval;
	bool final;
	/* threads to delete after the walk */
	uint32_t *dead;
	int n_dead, cap_dead;
	/* exited threads past EXITED_LISTED: freed, their totals summed here */
	bool *drop; /* per dead[i]: its entries are freed too */
	int n_listed;
	struct thread_sum folded;
	uint64_t n_folded;
	uint64_t folded_slow_count, folded_slow_ns, folded_slow_max_ns;
};

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;

	return a < b ? -1 : a > b;
}

static int cmp_sckey(const void *x, const void *y)
{
	const struct syscall_key *a = x, *b = y;

	if (a->tid != b->tid)
		return a->tid < b->tid ? -1 : 1;
	return a->nr < b->nr ? -1 : a->nr > b->nr;
}

uint64_t hist_lower_us(unsigned slot)
{
	return slot ? 1ULL << slot : 0;
}

json_t *hist_to_json(const __u64 *slots, const __u64 *prev, unsigned n)
{
	json_t *o = json_object();
	char key[24];

	for (unsigned i = 0; i < n; i++) {
		uint64_t v = slots[i] - (prev ? prev[i] : 0);

		if (!v)
			continue;
		snprintf(key, sizeof(key), "%llu", (unsigned long long)hist_lower_us(i));
		json_object_set_new(o, key, json_integer((json_int_t)v));
	}
	return o;
}

int aggregate_init(struct agent *a)
{
	struct agg *g = calloc(1, sizeof(*g));

	if (!g)
		return -ENOMEM;
	g->a = a;
	a->agg = g;
	return 0;
}

static struct thread_prev *thread_prev_get(struct agg *g, const struct thread_stats *ts)
{
	struct thread_prev key = {.tid = ts->tid}, *tp, **found;

	found = tfind(&key, &g->threads, cmp_u32);
	if (found && (*found)->pid == ts->pid)
		return *found;
	if (found) {
		/* tid reused by another process: start over */
		tp = *found;
		tdelete(tp, &g->threads, cmp_u32);
		if (tp->listed)
			g->n_listed--;
		g->a->cnt.threads_held--;
		free(tp);
	}
	tp = calloc(1, sizeof(*tp));
	if (!tp)
		return NULL;
	tp->tid = ts->tid;
	tp->pid = ts->pid;
	thread_comm(ts->pid, ts->tid, tp->comm, sizeof(tp->comm));
	if (!tsearch(tp, &g->threads, cmp_u32)) {
		free(tp);
		return NULL;
	}
	g->a->cnt.threads_held++;
	return tp;
}

static struct sc_prev *sc_prev_get(struct agg *g, const struct syscall_key *k)
{
	struct sc_prev key = {.key = *k}, *sp, **found;

	found = tfind(&key, &g->syscalls, cmp_sckey);
	if (found)
		return *found;
	sp = calloc(1, sizeof(*sp));
	if (!sp)
		return NULL;
	sp->key = *k;
	if (!tsearch(sp, &g->syscalls, cmp_sckey)) {
		free(sp);
		return NULL;
	}
	return sp;
}

void aggregate_note_syscall(struct agent *a, uint32_t tid, uint32_t nr, uint64_t dur_ns)
{
	struct agg *g = a->agg;
	struct syscall_key k = {.tid = tid, .nr = nr};
	struct sc_prev *sp;

	if (!g || !(sp = sc_prev_get(g, &k)))
		return;
	sp->slow_count++;
	sp->slow_ns += dur_ns;
	if (dur_ns > sp->slow_max_ns)
		sp->slow_max_ns = dur_ns;
}

struct sc_bucket {
	uint32_t tid; /* tree key */
	json_t *arr;
};

static void free_bucket(void *p)
{
	struct sc_bucket *b = p;

	json_decref(b->arr);
	free(b);
}

/*
 * One pass over syscall_stats per interval: the differences since the last
 * read, grouped by thread (g->buckets), for emit_thread() to pick up.
 */
static void collect_syscalls(struct agent *a)
{
	int fd = loader_map_fd(a, LOADER_SYSCALL_STATS);
	struct agg *g = a->agg;
	struct syscall_key k, next;
	struct syscall_stats st;
	void *prevk = NULL;

	while (!bpf_map_get_next_key(fd, prevk, &next)) {
		struct sc_bucket key = {.tid = next.tid}, *bk, **found;
		struct sc_prev *sp;
		const char *name;
		json_t *o;

		k = next;
		prevk = &k;
		if (bpf_map_lookup_elem(fd, &next, &st))
			continue;
		sp = sc_prev_get(g, &next);
		if (!sp || st.count == sp->last.count)
			continue;
		found = tfind(&key, &g->buckets, cmp_u32);
		if (found) {
			bk = *found;
		} else {
			bk = calloc(1, sizeof(*bk));
			if (!bk)
				continue;
			bk->tid = next.tid;
			bk->arr = json_array();
			if (!tsearch(bk, &g->buckets, cmp_u32)) {
				free_bucket(bk);
				continue;
			}
		}
		name = syscall_name(next.nr);
		o = json_object();
		json_object_set_new(o, "nr", json_integer(next.nr));
		json_object_set_new(o, "name", name ? json_string(name) : json_null());
		json_object_set_new(o, "count",
				    json_integer((json_int_t)(st.count - sp->last.count)));
		json_object_set_new(o, "total_ns",
				    json_integer((json_int_t)(st.total_ns - sp->last.total_ns)));
		json_object_set_new(o, "hist_us", hist_to_json(st.hist, sp->last.hist, HIST_SLOTS));
		json_array_append_new(bk->arr, o);
		sp->last = st;
	}
}

/* this thread's syscalls since the last read (a new reference) */
static json_t *thread_syscalls(struct agent *a, uint32_t tid, bool *any)
{
	struct agg *g = a->agg;
	struct sc_bucket key = {.tid = tid}, **found = tfind(&key, &g->buckets, cmp_u32);
	json_t *arr;

	if (!found)
		return json_array();
	arr = json_incref((*found)->arr);
	*any = true;
	return arr;
}

/* an exited, unlisted thread's syscall entry: its slow ones summed, then freed */
static void sc_prev_drop(struct agg *g, const struct syscall_key *k)
{
	struct sc_prev key = {.key = *k}, *sp, **found = tfind(&key, &g->syscalls, cmp_sckey);

	if (!found)
		return;
	sp = *found;
	g->folded_slow_count += sp->slow_count;
	g->folded_slow_ns += sp->slow_ns;
	if (sp->slow_max_ns > g->folded_slow_max_ns)
		g->folded_slow_max_ns = sp->slow_max_ns;
	tdelete(sp, &g->syscalls, cmp_sckey);
	free(sp);
}

static void delete_dead_syscalls(struct agent *a)
{
	int fd = loader_map_fd(a, LOADER_SYSCALL_STATS);
	struct agg *g = a->agg;
	struct syscall_key k, next;
	void *prevk = NULL;

	while (!bpf_map_get_next_key(fd, prevk, &next)) {
		bool dead = false;
		int i;

		for (i = 0; i < g->n_dead && !dead; i++)
			dead = g->dead[i] == next.tid;
		if (dead) {
			bpf_map_delete_elem(fd, &next); /* the walk goes on from k */
			if (g->drop[i - 1])
				sc_prev_drop(g, &next);
			continue;
		}
		k = next;
		prevk = &k;
	}
}

static bool thread_alive(uint32_t pid, uint32_t tid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%u/task/%u", pid, tid);
	return !stat(path, &st);
}

static void emit_thread(struct agent *a, struct thread_prev *tp, const struct thread_stats *cur)
{
	struct agg *g = a->agg;
	const struct thread_stats *o = &tp->last;
	json_t *r, *launches = json_object();
	bool any = false;

	for (unsigned i = 0; i < API_COUNT; i++) {
		uint64_t d = cur->launches[i] - o->launches[i];

		if (d) {
			json_object_set_new(launches, corr_api_name(i),
					    json_integer((json_int_t)d));
			any = true;
		}
	}
	if (cur->offcpu_count != o->offcpu_count || cur->runq_count != o->runq_count ||
	    cur->sync_count != o->sync_count)
		any = true;
	json_t *sys = thread_syscalls(a, cur->tid, &any);

	if (!any && !g->final) {
		json_decref(launches);
		json_decref(sys);
		return;
	}
	r = rec_new(a, "thread", cur->pid, cur->tid, g->now);
	json_object_set_new(r, "comm", rec_string(tp->comm));
	json_object_set_new(r, "interval_ns", json_integer((json_int_t)g->interval));
	json_object_set_new(r, "launches", launches);
	json_object_set_new(r, "sync_count",
			    json_integer((json_int_t)(cur->sync_count - o->sync_count)));
	json_object_set_new(r, "sync_ns", json_integer((json_int_t)(cur->sync_ns - o->sync_ns)));
	json_object_set_new(
	    r, "offcpu_blocked_ns",
	    json_integer((json_int_t)(cur->offcpu_blocked_ns - o->offcpu_blocked_ns)));
	json_object_set_new(
	    r, "offcpu_preempted_ns",
	    json_integer((json_int_t)(cur->offcpu_preempted_ns - o->offcpu_preempted_ns)));
	json_object_set_new(r, "offcpu_count",
			    json_integer((json_int_t)(cur->offcpu_count - o->offcpu_count)));
	json_object_set_new(r, "offcpu_hist_us",
			    hist_to_json(cur->offcpu_hist, o->offcpu_hist, HIST_SLOTS));
	json_object_set_new(r, "runq_ns", json_integer((json_int_t)(cur->runq_ns - o->runq_ns)));
	json_object_set_new(r, "runq_count",
			    json_integer((json_int_t)(cur->runq_count - o->runq_count)));
	json_object_set_new(r, "runq_hist_us",
			    hist_to_json(cur->runq_hist, o->runq_hist, HIST_SLOTS));
	json_object_set_new(r, "stacks", json_integer((json_int_t)(cur->stacks - o->stacks)));
	json_object_set_new(r, "stacks_limited",
			    json_integer((json_int_t)(cur->stacks_limited - o->stacks_limited)));
	json_object_set_new(r, "nested_calls", json_integer((json_int_t)(cur->nested - o->nested)));
	json_object_set_new(r, "syscalls", sys);
	rec_emit(a, REC_SUMMARY, r);
}

static void net_interval(struct agent *a)
{
	struct agg *g = a->agg;
	int fd = loader_map_fd(a, LOADER_NETDEV_STATS);
	int ncpu = libbpf_num_possible_cpus();
	struct netdev_key k, next;
	void *prevk = NULL;
	struct netdev_stats *vals;

	if (ncpu <= 0 || !(vals = calloc(ncpu, sizeof(*vals))))
		return;
	while (!bpf_map_get_next_key(fd, prevk, &next)) {
		struct netdev_stats sum = {};
		struct net_prev *np = NULL;

		k = next;
		prevk = &k;
		if (bpf_map_lookup_elem(fd, &next, vals))
			continue;
		for (int c = 0; c < ncpu; c++) {
			if (!sum.name[0] && vals[c].name[0])
				memcpy(sum.name, vals[c].name, sizeof(sum.name));
			sum.rx_bytes += vals[c].rx_bytes;
			sum.rx_packets += vals[c].rx_packets;
			sum.tx_bytes += vals[c].tx_bytes;
			sum.tx_packets += vals[c].tx_packets;
		}
		for (int i = 0; i < g->n_nets; i++)
			if (!memcmp(&g->nets[i].key, &next, sizeof(next)))
				np = &g->nets[i];
		if (!np) {
			if (g->n_nets == g->cap_nets) {
				int cap = g->cap_nets ? g->cap_nets * 2 : 16;
				struct net_prev *nn = realloc(g->nets, cap * sizeof(*nn));

				if (!nn)
					break;
				g->nets = nn;
				g->cap_nets = cap;
			}
			np = &g->nets[g->n_nets++];
			memset(np, 0, sizeof(*np));
			np->key = next;
		}
		struct netdev_stats *o = &np->last;

		if (sum.rx_packets == o->rx_packets && sum.tx_packets == o->tx_packets)
			continue;
		json_t *r = rec_new(a, "net", 0, 0, g->now);

		json_object_set_new(r, "dev", json_stringn(sum.name, strnlen(sum.name, 16)));
		json_object_set_new(r, "ifindex", json_integer(next.ifindex));
		json_object_set_new(r, "netns", json_integer(next.netns));
		json_object_set_new(r, "interval_ns", json_integer((json_int_t)g->interval));
		json_object_set_new(r, "rx_bytes",
				    json_integer((json_int_t)(sum.rx_bytes - o->rx_bytes)));
		json_object_set_new(r, "rx_packets",
				    json_integer((json_int_t)(sum.rx_packets - o->rx_packets)));
		json_object_set_new(r, "tx_bytes",
				    json_integer((json_int_t)(sum.tx_bytes - o->tx_bytes)));
		json_object_set_new(r, "tx_packets",
				    json_integer((json_int_t)(sum.tx_packets - o->tx_packets)));
		rec_emit(a, REC_SUMMARY, r);
		np->total.rx_bytes += sum.rx_bytes - o->rx_bytes;
		np->total.rx_packets += sum.rx_packets - o->rx_packets;
		np->total.tx_bytes += sum.tx_bytes - o->tx_bytes;
		np->total.tx_packets += sum.tx_packets - o->tx_packets;
		memcpy(np->total.name, sum.name, sizeof(sum.name));
		np->last = sum;
	}
	free(vals);
}

/* a thread's counts since the digest began (its last read less its base) */
static void thread_sum(const struct thread_prev *tp, struct thread_sum *o)
{
	const struct thread_stats *s = &tp->last;
	const struct thread_sum *b = &tp->base;

	for (unsigned i = 0; i < API_COUNT; i++)
		o->launches[i] = s->launches[i] - b->launches[i];
	o->blocked_ns = s->offcpu_blocked_ns - b->blocked_ns;
	o->preempted_ns = s->offcpu_preempted_ns - b->preempted_ns;
	o->offcpu_count = s->offcpu_count - b->offcpu_count;
	o->runq_ns = s->runq_ns - b->runq_ns;
	o->runq_count = s->runq_count - b->runq_count;
}

/* an exited thread past EXITED_LISTED: summed into g->folded, freed */
static void thread_drop(struct agg *g, uint32_t tid)
{
	struct thread_prev key = {.tid = tid}, *tp, **found = tfind(&key, &g->threads, cmp_u32);
	struct thread_sum *f = &g->folded, s;

	if (!found)
		return;
	tp = *found;
	thread_sum(tp, &s);
	for (unsigned i = 0; i < API_COUNT; i++)
		f->launches[i] += s.launches[i];
	f->blocked_ns += s.blocked_ns;
	f->preempted_ns += s.preempted_ns;
	f->offcpu_count += s.offcpu_count;
	f->runq_ns += s.runq_ns;
	f->runq_count += s.runq_count;
	g->n_folded++;
	tdelete(tp, &g->threads, cmp_u32);
	free(tp);
	g->a->cnt.threads_held--;
	g->a->cnt.threads_unlisted++;
}

static void push_dead(struct agg *g, uint32_t tid)
{
	if (g->n_dead == g->cap_dead) {
		int cap = g->cap_dead ? g->cap_dead * 2 : 64;
		uint32_t *nd = realloc(g->dead, cap * sizeof(*nd));
		bool *ndr;

		if (!nd)
			return;
		g->dead = nd;
		ndr = realloc(g->drop, cap * sizeof(*ndr));
		if (!ndr)
			return;
		g->drop = ndr;
		g->cap_dead = cap;
	}
	g->drop[g->n_dead] = false;
	g->dead[g->n_dead++] = tid;
}

void aggregate_interval(struct agent *a, bool final)
{
	struct agg *g = a->agg;
	int fd = loader_map_fd(a, LOADER_THREAD_STATS);
	uint32_t k, next;
	void *prevk = NULL;
	struct thread_stats cur;

	g->now = now_ns();
	g->interval = g->now - a->last_interval_ns;
	g->final = final;
	g->n_dead = 0;
	collect_syscalls(a);
	while (!bpf_map_get_next_key(fd, prevk, &next)) {
		struct thread_prev *tp;
		struct proc *p;
		bool gone;

		k = next;
		prevk = &k;
		if (bpf_map_lookup_elem(fd, &next, &cur))
			continue;
		tp = thread_prev_get(g, &cur);
		if (!tp)
			continue;
		p = proc_find(a, cur.pid);
		gone = !p || p->start_time == PROC_GONE || !thread_alive(cur.pid, cur.tid);
		emit_thread(a, tp, &cur);
		if (memcmp(cur.launches, tp->last.launches, sizeof(cur.launches))) {
			if (!tp->first_ns)
				tp->first_ns = a->last_interval_ns;
			tp->last_ns = g->now;
		}
		tp->last = cur;
		/*
		 * Delete one interval after the thread was first found gone: a
		 * thread leaves /proc before its last context switch, which would
		 * make a new, zeroed entry behind a deletion done right away (and
		 * a negative delta at the next read).
		 */
		if (gone && tp->gone)
			push_dead(g, next);
		tp->gone = gone;
	}
	/*
	 * The kernel entries of gone threads go; their totals stay for the
	 * summary while fewer than EXITED_LISTED exited threads are kept, else
	 * they are summed and freed (with their syscall entries, below).
	 */
	for (int i = 0; i < g->n_dead; i++) {
		struct thread_prev key = {.tid = g->dead[i]}, **found;

		bpf_map_delete_elem(fd, &g->dead[i]);
		loader_thread_gone(a, g->dead[i]);
		found = tfind(&key, &g->threads, cmp_u32);
		if (!found || (*found)->listed)
			continue;
		if (g->n_listed < EXITED_LISTED) {
			(*found)->listed = true;
			g->n_listed++;
		} else {
			g->drop[i] = true;
		}
	}
	if (g->n_dead)
		delete_dead_syscalls(a);
	for (int i = 0; i < g->n_dead; i++)
		if (g->drop[i])
			thread_drop(g, g->dead[i]);
	tdestroy(g->buckets, free_bucket);
	g->buckets = NULL;
	if (!a->opts.no_net)
		net_interval(a);
	discovery_reap(a);
	a->last_interval_ns = g->now;
}

/* ---------------------------------------------------------------- summary */

/* the records the summary's header counts */
static uint64_t summary_records(const struct agent *a)
{
	return a->cnt.emitted[REC_EVENT] + a->cnt.emitted[REC_SUMMARY] + a->cnt.emitted[REC_STATS];
}

static struct agent *walk_agent;
static FILE *walk_out;
static double walk_secs;
static int walk_section;

static void print_thread(const void *node, VISIT v, int depth)
{
	const struct thread_prev *tp = *(const struct thread_prev *const *)node;
	struct thread_sum s;

	(void)depth;
	if (v != postorder && v != leaf)
		return;
	thread_sum(tp, &s);
	if (walk_section == 0) {
		/* per second of the intervals in which the thread launched */
		double secs =
		    tp->last_ns > tp->first_ns ? (tp->last_ns - tp->first_ns) / 1e9 : walk_secs;

		for (unsigned i = 0; i < API_COUNT; i++)
			if (s.launches[i])
				fprintf(walk_out, "  %-8u %-8u %-16s %-28s %10llu %12.1f\n",
					tp->pid, tp->tid, tp->comm, corr_api_name(i),
					(unsigned long long)s.launches[i], s.launches[i] / secs);
	} else if (s.offcpu_count || s.runq_count) {
		fprintf(walk_out, "  %-8u %-8u %-16s %12.1f %14.1f %10.1f %10llu\n", tp->pid,
			tp->tid, tp->comm, s.blocked_ns / 1e6, s.preempted_ns / 1e6,
			s.runq_ns / 1e6, (unsigned long long)s.offcpu_count);
	}
}

static void print_syscall(const void *node, VISIT v, int depth)
{
	const struct sc_prev *sp = *(const struct sc_prev *const *)node;
	const char *name;
	char comm[TASK_COMM_LEN] = "";
	struct thread_prev key = {.tid = sp->key.tid}, **tp;

	(void)depth;
	if ((v != postorder && v != leaf) || !sp->slow_count)
		return;
	name = syscall_name(sp->key.nr);
	tp = tfind(&key, &((struct agg *)walk_agent->agg)->threads, cmp_u32);
	if (tp)
		snprintf(comm, sizeof(comm), "%s", (*tp)->comm);
	fprintf(walk_out, "  %-8u %-16s %-16s %8llu %12.1f %10.1f\n", sp->key.tid, comm,
		name ? name : "?", (unsigned long long)sp->slow_count, sp->slow_ns / 1e6,
		sp->slow_max_ns / 1e6);
}

void aggregate_print_summary(struct agent *a, FILE *out)
{
	struct agg *g = a->agg;
	double secs = (now_ns() - a->summary_ns) / 1e9;

	if (!g)
		return;
	walk_agent = a;
	walk_out = out;
	walk_secs = secs > 0 ? secs : 1;
	fprintf(out, "\n== infertrace summary: %.1f s", secs);
	if (a->summary_ns > a->start_ns) /* agentctl summary --reset, --summary-every */
		fprintf(out, " (from %.1f s after the start: the last reset)",
			(a->summary_ns - a->start_ns) / 1e9);
	fprintf(out, ", %llu records ==\n",
		(unsigned long long)(summary_records(a) - a->summary_records));
	fprintf(
	    out,
	    "\nCUDA calls per entry point and thread (rate over the intervals it launched in)\n");
	fprintf(out, "  %-8s %-8s %-16s %-28s %10s %12s\n", "PID", "TID", "COMM", "ENTRY POINT",
		"CALLS", "PER SECOND");
	walk_section = 0;
	twalk(g->threads, print_thread);
	if (g->n_folded) {
		uint64_t n = 0;

		for (unsigned i = 0; i < API_COUNT; i++)
			n += g->folded.launches[i];
		fprintf(out, "  and %llu more threads that exited (not listed): %llu calls\n",
			(unsigned long long)g->n_folded, (unsigned long long)n);
	}
	fprintf(out, "\nOff-CPU time and run-queue wait (ms)\n");
	fprintf(out, "  %-8s %-8s %-16s %12s %14s %10s %10s\n", "PID", "TID", "COMM", "BLOCKED",
		"PREEMPTED", "RUNQ", "SWITCHES");
	walk_section = 1;
	twalk(g->threads, print_thread);
	if (g->n_folded)
		fprintf(out,
			"  and %llu more threads that exited (not listed): %.1f blocked, %.1f "
			"preempted, %.1f run queue, %llu switches\n",
			(unsigned long long)g->n_folded, g->folded.blocked_ns / 1e6,
			g->folded.preempted_ns / 1e6, g->folded.runq_ns / 1e6,
			(unsigned long long)g->folded.offcpu_count);
	fprintf(out, "\nSlow syscalls (>= %.1f ms)\n", a->opts.syscall_thresh_ns / 1e6);
	fprintf(out, "  %-8s %-16s %-16s %8s %12s %10s\n", "TID", "COMM", "SYSCALL", "COUNT",
		"TOTAL MS", "MAX MS");
	twalk(g->syscalls, print_syscall);
	if (g->folded_slow_count)
		fprintf(out,
			"  and threads that exited (not listed): %llu slow, %.1f ms, max %.1f ms\n",
			(unsigned long long)g->folded_slow_count, g->folded_slow_ns / 1e6,
			g->folded_slow_max_ns / 1e6);
	if (!a->opts.no_net) {
		fprintf(out, "\nNetwork (whole node)\n");
		fprintf(out, "  %-16s %10s %14s %12s %14s %12s\n", "DEVICE", "NETNS", "RX BYTES",
			"RX PACKETS", "TX BYTES", "TX PACKETS");
		for (int i = 0; i < g->n_nets; i++) {
			const struct net_prev *np = &g->nets[i];

			if (!np->total.rx_packets && !np->total.tx_packets)
				continue;
			fprintf(out, "  %-16.16s %10u %14llu %12llu %14llu %12llu\n",
				np->total.name, np->key.netns,
				(unsigned long long)np->total.rx_bytes,
				(unsigned long long)np->total.rx_packets,
				(unsigned long long)np->total.tx_bytes,
				(unsigned long long)np->total.tx_packets);
		}
	}
}

/* ------------------------------------------------------- summary reset */

static uint32_t *reset_gone; /* exited threads freed at the reset, tids sorted */
static size_t n_reset_gone, cap_reset_gone;
static struct sc_prev **reset_sc; /* their syscall entries */
static size_t n_reset_sc, cap_reset_sc;

static bool grow(void **p, size_t *cap, size_t n, size_t size)
{
	void *np;

	if (n < *cap)
		return true;
	np = realloc(*p, (*cap ? *cap * 2 : 64) * size);
	if (!np)
		return false;
	*p = np;
	*cap = *cap ? *cap * 2 : 64;
	return true;
}

static void reset_thread(const void *node, VISIT v, int depth)
{
	struct thread_prev *tp = *(struct thread_prev *const *)node;

	(void)depth;
	if (v != postorder && v != leaf)
		return;
	tp->base = (struct thread_sum){0}; /* so that thread_sum() gives its counts now */
	thread_sum(tp, &tp->base);
	tp->first_ns = tp->last_ns = 0;
	if (tp->listed &&
	    grow((void **)&reset_gone, &cap_reset_gone, n_reset_gone, sizeof(*reset_gone)))
		reset_gone[n_reset_gone++] = tp->tid;
}

static void reset_syscall(const void *node, VISIT v, int depth)
{
	struct sc_prev *sp = *(struct sc_prev *const *)node;

	(void)depth;
	if (v != postorder && v != leaf)
		return;
	sp->slow_count = sp->slow_ns = sp->slow_max_ns = 0;
	if (bsearch(&sp->key.tid, reset_gone, n_reset_gone, sizeof(*reset_gone), cmp_u32) &&
	    grow((void **)&reset_sc, &cap_reset_sc, n_reset_sc, sizeof(*reset_sc)))
		reset_sc[n_reset_sc++] = sp;
}

/*
 * `agentctl summary --reset`: the digest starts anew. A thread's counts
 * from now are its reads less what it had counted (its base); the exited
 * threads kept for the summary, the folded totals, the slow syscalls and
 * the network totals go. The interval records are not touched.
 */
void aggregate_summary_reset(struct agent *a)
{
	struct agg *g = a->agg;

	a->summary_records = summary_records(a);
	if (!g)
		return;
	n_reset_gone = n_reset_sc = 0;
	twalk(g->threads, reset_thread); /* in tid order: reset_gone is sorted */
	twalk(g->syscalls, reset_syscall);
	for (size_t i = 0; i < n_reset_sc; i++) {
		tdelete(reset_sc[i], &g->syscalls, cmp_sckey);
		free(reset_sc[i]);
	}
	for (size_t i = 0; i < n_reset_gone; i++) {
		struct thread_prev key = {.tid = reset_gone[i]}, **found, *tp;

		found = tfind(&key, &g->threads, cmp_u32);
		if (!found)
			continue;
		tp = *found;
		tdelete(tp, &g->threads, cmp_u32);
		free(tp);
		a->cnt.threads_held--;
	}
	g->n_listed = 0;
	g->folded = (struct thread_sum){0};
	g->n_folded = 0;
	g->folded_slow_count = g->folded_slow_ns = g->folded_slow_max_ns = 0;
	for (int i = 0; i < g->n_nets; i++) {
		struct netdev_stats *t = &g->nets[i].total;

		t->rx_bytes = t->rx_packets = t->tx_bytes = t->tx_packets = 0;
	}
}

void aggregate_free(struct agent *a)
{
	struct agg *g = a->agg;

	if (!g)
		return;
	tdestroy(g->threads, free);
	tdestroy(g->syscalls, free);
	free(g->nets);
	free(g->dead);
	free(g->drop);
	free(g);
	a->agg = NULL;
	free(reset_gone);
	free(reset_sc);
	reset_gone = NULL;
	reset_sc = NULL;
	n_reset_gone = cap_reset_gone = n_reset_sc = cap_reset_sc = 0;
}
