// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * corr.c - the join: uprobe launches <-> shim callbacks by (pid, tid, time),
 * launches <-> GPU records by (pid, correlation id).
 *
 * State, all bounded by the options:
 *   launches: a FIFO ring (insertion order = eviction order) indexed by an
 *             open-addressing table keyed by (pid, corr id). An entry stays
 *             after its first join because a graph launch owns many kernels;
 *             it leaves by window, capacity or process exit.
 *   pending:  GPU records whose launch has not arrived, in a slab with a
 *             per-key chain and a FIFO list for expiry/eviction.
 *   threads:  per-thread FIFOs of uprobe launches not yet claimed by a
 *             callback (and small rings of callbacks that came before their
 *             uprobe), for the time match. A FIFO grows to cover the shim's
 *             batching delay (every launch of a thread between the agent
 *             reading a uprobe and reading its callback), within a budget.
 *   exits:    last exit time per pid, so a reused pid never joins old state.
 *   procs:    per pid, the lists of its live launches, waiting GPU records and
 *             threads, so that an exit touches only its own process's state:
 *             with thousands of short-lived processes a scan of the ring and
 *             the queues per exit made a churn quadratic (issue 18). An entry
 *             lives while one of its lists is not empty.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "jsonw.h"
#include "pidtab.h"

#define NO_IDX UINT32_MAX
#define THR_UP_MIN 16		 /* uprobe FIFO of a thread: first size, doubled when full */
#define THR_UP_MAX 8192		 /* ... up to this (~80 ms of launches at 100k/s) */
#define THR_UP_BUDGET (1u << 20) /* FIFO entries of all threads together (16 MiB) */
#define THR_CBW 8		 /* callbacks waiting for a late uprobe, per thread */
#define EXIT_CAP 4096

struct launch_ent {
	uint64_t ts;
	uint32_t pid, tid, corr, cbid;
	int32_t api;	/* name id */
	uint32_t pnext; /* next live launch of the pid (ring index), NO_IDX */
	uint8_t live;	/* in the hash table and the pid's list */
	uint8_t from_uprobe, from_cb;
};

struct pend {
	struct corr_gpu g; /* g.name unused: name_id */
	int32_t name_id;
	uint64_t key;
	uint32_t chain;	       /* next pending with the same key */
	uint32_t prev, next;   /* FIFO (arrival order) or free list (next) */
	uint32_t pprev, pnext; /* the pid's list (not with CORR_F_PID_FROM_LAUNCH) */
};

struct pt_slot {
	uint32_t idx1; /* head pend index + 1; 0: empty */
	uint32_t tag;  /* pt_tag(key): its home and a cheap compare */
};

struct thr_up {
	uint64_t ts;
	uint16_t api;
	uint8_t used;
};

struct thr_cb {
	uint64_t ts;
	uint32_t corr;
	uint8_t used;
};

struct thr {
	uint64_t key; /* pid << 32 | tid */
	uint8_t live;
	uint8_t head_cb;
	/* uprobe launches in time order (one thread calls one API at a time) */
	struct thr_up *up;
	uint32_t up_cap, up_head, up_len;
	uint64_t last_cb_ts;   /* exit of the last call a callback reported */
	uint32_t pprev, pnext; /* the pid's threads (thread indices), NO_IDX */
	struct thr_cb cbw[THR_CBW];
};

/*
 * Launch table slot: the key is kept here, next to the ring index, so probes
 * and the backward shift on delete stay inside the table instead of touching
 * a random ring entry per step (the join is memory-bound).
 */
struct lt_slot {
	uint64_t key;
	uint32_t idx;  /* ring index + 1, 0 = empty */
	uint32_t home; /* lt_home(key), so the backward shift never rehashes */
};

struct exit_ent {
	uint32_t pid;
	uint64_t ts;
};

/*
 * A process's state, found by pid (pidtab.h). Launches are listed in ring
 * order (the ring pops the oldest, always its pid's head), GPU records and
 * threads in doubly linked lists (they leave from anywhere).
 */
struct pproc {
	struct pid_slot k;
	uint32_t l_head, l_tail; /* live launches, ring indices */
	uint32_t p_head, p_tail; /* waiting GPU records, pend indices */
	uint32_t t_head;	 /* threads, thread indices */
};

struct corr {
	struct corr_opts o;
	struct corr_counters cnt;
	struct names *names;

	/* launches */
	struct launch_ent *ring;
	uint32_t ring_cap, ring_head, ring_len;
	struct lt_slot *lt; /* launch table */
	uint32_t lt_mask, lt_shift;
	uint64_t watermark; /* newest launch / advance() ts */

	/* pending GPU records */
	struct pend *pend;
	uint32_t pend_cap, pend_len, pend_free;
	uint32_t fifo_head, fifo_tail;
	struct pt_slot *pt; /* pending table: head pend index + 1, and its key's hash */
	uint32_t pt_mask;

	/* threads */
	struct thr *thr;
	uint32_t thr_cap, thr_len, thr_victim;
	uint32_t up_slots; /* FIFO entries allocated over all threads */
	uint32_t *tt;	   /* thread index + 1 */
	uint32_t tt_mask;

	struct pidtab procs;  /* struct pproc by pid */
	uint64_t exit_visits; /* entries an exit touched (corr_exit_visits) */

	struct exit_ent exits[EXIT_CAP]; /* small: direct-mapped by pid */
	int32_t last_api;		 /* name id of the last launch's API */
	const char *last_api_str;	 /* the string it was last asked for */
};

static const char *const api_names[] = {
    "cudaLaunchKernel",
    "cudaLaunchKernel_ptsz",
    "cudaLaunchKernelExC",
    "cudaLaunchKernelExC_ptsz",
    "cudaGraphLaunch",
    "cudaGraphLaunch_ptsz",
    "cudaMemcpyAsync",
    "cudaMemcpyAsync_ptsz",
    "cudaStreamSynchronize",
    "cudaStreamSynchronize_ptsz",
    "cudaDeviceSynchronize",
    "cuLaunchKernel",
    "cuLaunchKernel_ptsz",
    "cuLaunchKernelEx",
    "cuLaunchKernelEx_ptsz",
    "cuGraphLaunch",
    "cuGraphLaunch_ptsz",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "cuModuleLoadData",
    "cuModuleLoadDataEx",
};
/* must match enum cuda_api in bpf/events.h */
_Static_assert(sizeof(api_names) / sizeof(api_names[0]) == 24, "enum cuda_api");

const char *corr_api_name(uint16_t api)
{
	if (api < sizeof(api_names) / sizeof(api_names[0]))
		return api_names[api];
	return "unknown";
}

int corr_api_from_name(const char *name)
{
	for (size_t i = 0; i < sizeof(api_names) / sizeof(api_names[0]); i++)
		if (!strcmp(api_names[i], name))
			return (int)i;
	return -1;
}

/* CUDA 13.0 cbids (cupti_runtime_cbid.h / cupti_driver_cbid.h) */
static const struct {
	uint16_t domain, cbid;
	const char *name;
} cbids[] = {
    {2, 13, "cudaLaunch"},
    {2, 211, "cudaLaunchKernel"},
    {2, 213, "cudaLaunch_ptsz"},
    {2, 214, "cudaLaunchKernel_ptsz"},
    {2, 269, "cudaLaunchCooperativeKernel"},
    {2, 270, "cudaLaunchCooperativeKernel_ptsz"},
    {2, 272, "cudaLaunchCooperativeKernelMultiDevice"},
    {2, 311, "cudaGraphLaunch"},
    {2, 312, "cudaGraphLaunch_ptsz"},
    {2, 430, "cudaLaunchKernelExC"},
    {2, 431, "cudaLaunchKernelExC_ptsz"},
    {2, 505, "__cudaLaunchKernel"},
    {2, 506, "__cudaLaunchKernel_ptsz"},
    /* not launches, but their records carry correlation ids (agent/shim/cupti.c) */
    {2, 41, "cudaMemcpyAsync"},
    {2, 225, "cudaMemcpyAsync_ptsz"},
    {2, 51, "cudaMemsetAsync"},
    {2, 235, "cudaMemsetAsync_ptsz"},
    {1, 115, "cuLaunch"},
    {1, 116, "cuLaunchGrid"},
    {1, 117, "cuLaunchGridAsync"},
    {1, 307, "cuLaunchKernel"},
    {1, 442, "cuLaunchKernel_ptsz"},
    {1, 477, "cuLaunchCooperativeKernel"},
    {1, 478, "cuLaunchCooperativeKernel_ptsz"},
    {1, 480, "cuLaunchCooperativeKernelMultiDevice"},
    {1, 514, "cuGraphLaunch"},
    {1, 515, "cuGraphLaunch_ptsz"},
    {1, 652, "cuLaunchKernelEx"},
    {1, 653, "cuLaunchKernelEx_ptsz"},
};

const char *corr_cbid_name(uint32_t domain, uint32_t cbid)
{
	for (size_t i = 0; i < sizeof(cbids) / sizeof(cbids[0]); i++)
		if (cbids[i].domain == domain && cbids[i].cbid == cbid)
			return cbids[i].name;
	return NULL;
}

#define corr_log(c, ...) corr_log_forward((c)->o.log, (c)->o.log_ctx, __VA_ARGS__)

struct corr *corr__new(const struct corr_opts *opts)
{
	struct corr *c;
	uint32_t size;

	if (!opts || opts->sz < offsetof(struct corr_opts, log_ctx) + sizeof(void *) ||
	    !opts->emit) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	memcpy(&c->o, opts, sizeof(c->o));
	if (!c->o.launch_capacity)
		c->o.launch_capacity = 131072;
	if (!c->o.gpu_capacity)
		c->o.gpu_capacity = 65536;
	if (!c->o.thread_capacity)
		c->o.thread_capacity = 4096;
	if (!c->o.window_ns)
		c->o.window_ns = 10ULL * 1000000000ULL;
	if (!c->o.match_window_ns)
		c->o.match_window_ns = 100ULL * 1000000ULL;
	if (!c->o.max_skew_ns)
		c->o.max_skew_ns = 1000000ULL;

	c->names = names_new(1u << 18);
	c->ring_cap = c->o.launch_capacity;
	c->ring = malloc((size_t)c->ring_cap * sizeof(*c->ring));
	size = corr_pow2((uint64_t)c->ring_cap * 2);
	c->lt = calloc(size, sizeof(*c->lt));
	c->lt_mask = size - 1;
	c->lt_shift = 64 - (uint32_t)__builtin_ctz(size);

	c->pend_cap = c->o.gpu_capacity;
	c->pend = malloc((size_t)c->pend_cap * sizeof(*c->pend));
	size = corr_pow2((uint64_t)c->pend_cap * 2);
	c->pt = calloc(size, sizeof(*c->pt));
	c->pt_mask = size - 1;

	c->thr_cap = c->o.thread_capacity;
	c->thr = calloc(c->thr_cap, sizeof(*c->thr));
	size = corr_pow2((uint64_t)c->thr_cap * 2);
	c->tt = calloc(size, sizeof(*c->tt));
	c->tt_mask = size - 1;

	/* grown with the processes that hold state at once, not sized for the worst */
	pidtab_init(&c->procs, sizeof(struct pproc));

	if (!c->names || !c->ring || !c->lt || !c->pend || !c->pt || !c->thr || !c->tt) {
		corr__free(c);
		errno = ENOMEM;
		return NULL;
	}
	for (uint32_t i = 0; i < c->pend_cap; i++)
		c->pend[i].next = i + 1 < c->pend_cap ? i + 1 : NO_IDX;
	c->pend_free = 0;
	c->fifo_head = c->fifo_tail = NO_IDX;
	c->last_api = -1;
	return c;
}

void corr__free(struct corr *c)
{
	if (!c)
		return;
	names_free(c->names);
	for (uint32_t i = 0; c->thr && i < c->thr_cap; i++)
		free(c->thr[i].up);
	free(c->ring);
	free(c->lt);
	free(c->pend);
	free(c->pt);
	free(c->thr);
	free(c->tt);
	pidtab_free(&c->procs);
	free(c);
}

const struct corr_counters *corr__counters(const struct corr *c)
{
	return &c->cnt;
}

uint32_t corr__pending(const struct corr *c)
{
	return c->pend_len;
}

static inline uint64_t mk_key(const struct corr *c, uint32_t pid, uint32_t corr)
{
	if (c->o.flags & CORR_F_PID_FROM_LAUNCH)
		pid = 0;
	return (uint64_t)pid << 32 | corr;
}

static inline uint64_t adj(const struct corr *c, enum corr_src src, uint64_t ts)
{
	return ts + (uint64_t)c->o.clock_offset_ns[src];
}

/* ---- per-process index ---- */

/* the pid's entry or NULL; valid until the next pp_get() or pp_release() */
static inline struct pproc *pp_find(struct corr *c, uint32_t pid)
{
	return pidtab_find(&c->procs, pid);
}

/*
 * The pid's entry, made empty when missing; NULL only when the table cannot
 * grow. Callers make it before they change anything, so that a failure
 * leaves the state as it was; made again after an eviction that may have
 * dropped it, it never needs to grow (the room was taken the first time).
 */
static inline struct pproc *pp_get(struct corr *c, uint32_t pid)
{
	struct pproc *e = pp_find(c, pid);

	if (e || !(e = pidtab_add(&c->procs, pid)))
		return e;
	e->l_head = e->l_tail = NO_IDX;
	e->p_head = e->p_tail = NO_IDX;
	e->t_head = NO_IDX;
	return e;
}

/* drop the entry once its process holds nothing */
static void pp_release(struct corr *c, struct pproc *e)
{
	if (e->l_head == NO_IDX && e->p_head == NO_IDX && e->t_head == NO_IDX)
		pidtab_del(&c->procs, e);
}

/* ---- launch table ---- */

/*
 * Home slot of a launch key: Fibonacci hashing (the top bits of key * 2^64/phi).
 * Correlation ids of a process are consecutive, and this spreads consecutive
 * keys evenly over the table, so probe runs stay short at a third of the
 * cost of a full mix; the pid in the high half moves the whole sequence.
 */
static inline uint32_t lt_home(const struct corr *c, uint64_t key)
{
	return (uint32_t)((key * 0x9e3779b97f4a7c15ULL) >> c->lt_shift);
}

static uint32_t lt_find(const struct corr *c, uint64_t key, uint32_t *slot)
{
	uint32_t i = lt_home(c, key);

	for (;; i = (i + 1) & c->lt_mask) {
		const struct lt_slot *t = &c->lt[i];

		if (!t->idx || t->key == key) {
			*slot = i;
			return t->idx ? t->idx - 1 : NO_IDX;
		}
	}
}

/* remove slot i, shifting back the entries of its probe run (no tombstones) */
static void lt_delete_slot(struct corr *c, uint32_t i)
{
	uint32_t j = i;

	c->lt[i].idx = 0;
	for (;;) {
		uint32_t home;

		j = (j + 1) & c->lt_mask;
		if (!c->lt[j].idx)
			return;
		home = c->lt[j].home;
		/* move j to i unless home lies cyclically in (i, j] */
		if ((i <= j) ? (home <= i || home > j) : (home <= i && home > j)) {
			c->lt[i] = c->lt[j];
			c->lt[j].idx = 0;
			i = j;
		}
	}
}

/* out of the launch table (the pid's list is the caller's) */
static void launch_unlink(struct corr *c, struct launch_ent *e)
{
	uint32_t slot;

	if (!e->live)
		return;
	if (lt_find(c, mk_key(c, e->pid, e->corr), &slot) != NO_IDX)
		lt_delete_slot(c, slot);
	e->live = 0;
}

static void ring_pop(struct corr *c, bool expired)
{
	struct launch_ent *e = &c->ring[c->ring_head];

	if (e->live) {
		struct pproc *pp = pp_find(c, e->pid);

		if (expired) {
			c->cnt.launches_expired++;
		} else if (!c->cnt.launches_evicted++) {
			corr_log(c, CORR_LOG_WARN,
				 "launch table full (%u): evicting the oldest launches",
				 c->ring_cap);
		}
		launch_unlink(c, e);
		/* the oldest live launch of the ring is the oldest of its pid */
		if (pp && pp->l_head == c->ring_head) {
			pp->l_head = e->pnext;
			if (pp->l_head == NO_IDX) {
				pp->l_tail = NO_IDX;
				pp_release(c, pp);
			}
		}
	}
	/* no '%': a division per launch showed in the join rate */
	if (++c->ring_head == c->ring_cap)
		c->ring_head = 0;
	c->ring_len--;
}

/* ---- pending GPU records ---- */

/*
 * The slot keeps the low 32 bits of its key's hash: a probe and a deletion's
 * shift compare and place by it without reading the pending record, whose
 * array (65,536 records of ~150 bytes by default) is mostly out of cache
 * when the GPU outruns the launches (sentinel: most records wait their
 * whole time). bench/shim.sh measured the two at 17% of the agent's CPU.
 */
static uint32_t pt_tag(uint64_t key)
{
	return (uint32_t)corr_hash64(key);
}

/* the chain of key (tag: pt_tag(key)), or NO_IDX; *slot: where it is or would go */
static uint32_t pt_find_tag(const struct corr *c, uint64_t key, uint32_t tag, uint32_t *slot)
{
	uint32_t i = tag & c->pt_mask;

	for (;; i = (i + 1) & c->pt_mask) {
		const struct pt_slot *v = &c->pt[i];

		if (!v->idx1) {
			*slot = i;
			return NO_IDX;
		}
		if (v->tag == tag && c->pend[v->idx1 - 1].key == key) {
			*slot = i;
			return v->idx1 - 1;
		}
	}
}

static uint32_t pt_find(const struct corr *c, uint64_t key, uint32_t *slot)
{
	return pt_find_tag(c, key, pt_tag(key), slot);
}

static void pt_delete_slot(struct corr *c, uint32_t i)
{
	uint32_t j = i;

	c->pt[i].idx1 = 0;
	for (;;) {
		uint32_t home;

		j = (j + 1) & c->pt_mask;
		if (!c->pt[j].idx1)
			return;
		home = c->pt[j].tag & c->pt_mask;
		if ((i <= j) ? (home <= i || home > j) : (home <= i && home > j)) {
			c->pt[i] = c->pt[j];
			c->pt[j].idx1 = 0;
			i = j;
		}
	}
}

static void fifo_unlink(struct corr *c, uint32_t idx)
{
	struct pend *p = &c->pend[idx];

	if (p->prev != NO_IDX)
		c->pend[p->prev].next = p->next;
	else
		c->fifo_head = p->next;
	if (p->next != NO_IDX)
		c->pend[p->next].prev = p->prev;
	else
		c->fifo_tail = p->prev;
}

static void pend_release(struct corr *c, uint32_t idx)
{
	struct pend *p = &c->pend[idx];

	/* out of its pid's list: the entry is needed only at either end */
	if (!(c->o.flags & CORR_F_PID_FROM_LAUNCH)) {
		struct pproc *pp = NULL;

		if (p->pprev == NO_IDX || p->pnext == NO_IDX)
			pp = pp_find(c, p->g.pid);
		if (p->pprev != NO_IDX)
			c->pend[p->pprev].pnext = p->pnext;
		else if (pp)
			pp->p_head = p->pnext;
		if (p->pnext != NO_IDX)
			c->pend[p->pnext].pprev = p->pprev;
		else if (pp)
			pp->p_tail = p->pprev;
		if (pp && pp->p_head == NO_IDX)
			pp_release(c, pp);
	}
	c->pend[idx].next = c->pend_free;
	c->pend_free = idx;
	c->pend_len--;
}

/* detach one pending record from its key chain */
static void chain_remove(struct corr *c, uint32_t idx)
{
	uint32_t slot, head = pt_find(c, c->pend[idx].key, &slot);

	if (head == NO_IDX)
		return;
	if (head == idx) {
		if (c->pend[idx].chain != NO_IDX)
			c->pt[slot].idx1 = c->pend[idx].chain + 1;
		else
			pt_delete_slot(c, slot);
		return;
	}
	for (uint32_t i = head; c->pend[i].chain != NO_IDX; i = c->pend[i].chain) {
		if (c->pend[i].chain == idx) {
			c->pend[i].chain = c->pend[idx].chain;
			return;
		}
	}
}

static void emit_unmatched(struct corr *c, const struct corr_gpu *g)
{
	struct corr_gpu out = *g;

	if (c->o.flags & CORR_F_PID_FROM_LAUNCH)
		out.pid = 0;
	c->cnt.unmatched++;
	c->o.emit(c->o.emit_ctx, &out, NULL);
}

/* a waiting record's name back from the table (its hash was kept with it) */
static void pend_name(struct corr *c, struct pend *p)
{
	p->g.name = names_str(c->names, p->name_id);
	if (!p->g.name)
		p->g.name_hash = 0; /* the table was full: no name */
}

static void pend_emit_unmatched(struct corr *c, uint32_t idx)
{
	struct pend *p = &c->pend[idx];

	pend_name(c, p);
	fifo_unlink(c, idx);
	chain_remove(c, idx);
	emit_unmatched(c, &p->g);
	pend_release(c, idx);
}

/* ---- exits (pid reuse) ---- */

static uint64_t exit_ts(const struct corr *c, uint32_t pid)
{
	const struct exit_ent *x = &c->exits[pid % EXIT_CAP];

	return x->pid == pid ? x->ts : 0;
}

/*
 * May this launch own this GPU record? A kernel cannot start before its
 * launch (minus clock slack), and launch and kernel must lie on the same side
 * of the last exit of their pid: otherwise they belong to two processes that
 * shared a pid.
 */
static bool join_ok(struct corr *c, const struct launch_ent *e, const struct corr_gpu *g)
{
	uint64_t ex;

	if (g->start_ns && g->start_ns + c->o.max_skew_ns < e->ts)
		return false;
	if (c->o.flags & CORR_F_PID_FROM_LAUNCH)
		return true;
	ex = exit_ts(c, e->pid);
	if (ex && ((e->ts < ex) != (g->start_ns < ex)))
		return false;
	return true;
}

static void emit_joined(struct corr *c, const struct launch_ent *e, const struct corr_gpu *g)
{
	struct corr_gpu out = *g;
	struct corr_launch l = {
	    .pid = e->pid,
	    .tid = e->tid,
	    .ts_ns = e->ts,
	    .corr_id = e->corr,
	    .cbid = e->cbid,
	    .api = names_str(c->names, e->api),
	    .from_uprobe = e->from_uprobe,
	    .from_callback = e->from_cb,
	};

	if (!l.api)
		l.api = "unknown";
	out.pid = e->pid;
	c->cnt.joined++;
	c->o.emit(c->o.emit_ctx, &out, &l);
}

/* retire by time: launches older than the window, GPU records waited too long */
static void retire(struct corr *c)
{
	uint64_t lim;

	if (c->o.window_ns == UINT64_MAX || c->watermark <= c->o.window_ns)
		return;
	lim = c->watermark - c->o.window_ns;
	while (c->ring_len && c->ring[c->ring_head].ts < lim)
		ring_pop(c, true);
	while (c->fifo_head != NO_IDX && c->pend[c->fifo_head].g.start_ns < lim)
		pend_emit_unmatched(c, c->fifo_head);
}

/* insert or merge a launch; then release the GPU records waiting for it */
static int launch_insert(struct corr *c, uint32_t pid, uint32_t tid, uint64_t ts, uint32_t corr,
			 uint32_t cbid, int32_t api, bool from_uprobe, bool from_cb)
{
	uint64_t key = mk_key(c, pid, corr);
	uint32_t slot, idx, head;
	struct launch_ent *e;
	struct pproc *pp;

	idx = lt_find(c, key, &slot);
	if (idx != NO_IDX) {
		/*
		 * A runtime call and its nested driver call share the id: one
		 * launch. The outer call entered first, so the earliest wins.
		 */
		e = &c->ring[idx];
		/* the same launch again (a recording repeats it per graph kernel) */
		if (ts == e->ts && tid == e->tid) {
			e->from_cb |= from_cb;
			return 0;
		}
		c->cnt.launches_nested++;
		if (ts < e->ts) {
			e->ts = ts;
			e->tid = tid;
			e->api = api;
			e->cbid = cbid;
			e->from_uprobe = from_uprobe;
		}
		e->from_cb |= from_cb;
		return 0;
	}
	pp = pp_get(c, pid);
	if (!pp)
		return -ENOMEM;
	idx = c->ring_head + c->ring_len; /* both < ring_cap */
	if (idx >= c->ring_cap)
		idx -= c->ring_cap;
	/*
	 * Claim the free slot before evicting: the eviction's backward shift
	 * then moves the new slot if it must, and no second lookup is needed.
	 * When full, idx is the oldest's ring entry; its slot still holds its
	 * own key, so ring_pop() finds that one.
	 */
	c->lt[slot] = (struct lt_slot){.key = key, .idx = idx + 1, .home = lt_home(c, key)};
	if (c->ring_len == c->ring_cap) {
		ring_pop(c, false);
		/* it may have dropped or moved the pid's entry: made again, it cannot fail */
		pp = pp_get(c, pid);
	}
	c->ring_len++;
	e = &c->ring[idx];
	*e = (struct launch_ent){
	    .ts = ts,
	    .pid = pid,
	    .tid = tid,
	    .corr = corr,
	    .cbid = cbid,
	    .api = api,
	    .pnext = NO_IDX,
	    .live = 1,
	    .from_uprobe = from_uprobe,
	    .from_cb = from_cb,
	};
	if (pp->l_tail != NO_IDX)
		c->ring[pp->l_tail].pnext = idx;
	else
		pp->l_head = idx;
	pp->l_tail = idx;
	c->cnt.launches++;
	if (ts > c->watermark)
		c->watermark = ts;
	/*
	 * The join is bound by two random table accesses per launch: this
	 * insert and the eviction of the oldest. Start both of the next
	 * launch's now: the oldest's slot, and the slot of the next
	 * correlation id (a process numbers its calls consecutively).
	 */
	if (c->ring_len == c->ring_cap)
		__builtin_prefetch(&c->lt[lt_home(c, mk_key(c, c->ring[c->ring_head].pid,
							    c->ring[c->ring_head].corr))],
				   1);
	__builtin_prefetch(&c->lt[lt_home(c, key + 1)], 1);

	/* GPU records that came first */
	if (c->pend_len && (head = pt_find(c, key, &slot)) != NO_IDX) {
		pt_delete_slot(c, slot);
		while (head != NO_IDX) {
			struct pend *p = &c->pend[head];
			uint32_t next = p->chain;

			pend_name(c, p);
			fifo_unlink(c, head);
			if (join_ok(c, e, &p->g)) {
				c->cnt.joined_late++;
				emit_joined(c, e, &p->g);
			} else {
				c->cnt.refused++;
				emit_unmatched(c, &p->g);
			}
			pend_release(c, head);
			head = next;
		}
	}
	retire(c);
	return 0;
}

static int32_t intern_api(struct corr *c, const char *api, bool is_static)
{
	const char *last;
	int32_t id;

	if (!api)
		api = "unknown";
	/*
	 * launches come in runs of one API: skip the hash for a repeat, and
	 * the compare too for the same static string (our own name tables;
	 * a caller's buffer may hold another name at the same address)
	 */
	if (api == c->last_api_str)
		return c->last_api;
	last = names_str(c->names, c->last_api);
	if (last && !strcmp(last, api)) {
		c->last_api_str = is_static ? api : NULL;
		return c->last_api;
	}
	id = names_intern(c->names, api, strlen(api));
	if (id < 0)
		return -1;
	c->last_api = id;
	c->last_api_str = is_static ? api : NULL;
	return id;
}

int corr__add_launch(struct corr *c, uint32_t pid, uint32_t tid, uint64_t ts_ns, uint32_t corr_id,
		     uint32_t cbid, const char *api)
{
	return launch_insert(c, pid, tid, adj(c, CORR_SRC_TRACE, ts_ns), corr_id, cbid,
			     intern_api(c, api, false), true, false);
}

int corr_add_launch_src(struct corr *c, uint32_t pid, uint32_t tid, uint64_t ts_ns,
			uint32_t corr_id, uint32_t cbid, const char *api, bool from_uprobe,
			bool from_cb)
{
	return launch_insert(c, pid, tid, adj(c, CORR_SRC_TRACE, ts_ns), corr_id, cbid,
			     intern_api(c, api, false), from_uprobe, from_cb);
}

/* ---- threads ---- */

/* the thread table's slot that holds thread index idx */
static uint32_t tt_slot_of(const struct corr *c, uint32_t idx)
{
	uint32_t s = (uint32_t)corr_hash64(c->thr[idx].key) & c->tt_mask;

	while (c->tt[s] != idx + 1)
		s = (s + 1) & c->tt_mask;
	return s;
}

/* empty slot s, shifting back the entries its slot displaced (as the launch table) */
static void tt_delete_slot(struct corr *c, uint32_t s)
{
	uint32_t j = s;

	c->tt[s] = 0;
	for (;;) {
		uint32_t home;

		j = (j + 1) & c->tt_mask;
		if (!c->tt[j])
			break;
		home = (uint32_t)corr_hash64(c->thr[c->tt[j] - 1].key) & c->tt_mask;
		if ((s <= j) ? (home <= s || home > j) : (home <= s && home > j)) {
			c->tt[s] = c->tt[j];
			c->tt[j] = 0;
			s = j;
		}
	}
}

/* thread i out of its pid's list */
static void thr_unlink(struct corr *c, uint32_t i)
{
	struct thr *t = &c->thr[i];
	struct pproc *pp = NULL;

	if (t->pprev != NO_IDX)
		c->thr[t->pprev].pnext = t->pnext;
	else if ((pp = pp_find(c, (uint32_t)(t->key >> 32))))
		pp->t_head = t->pnext;
	if (t->pnext != NO_IDX)
		c->thr[t->pnext].pprev = t->pprev;
	if (pp && pp->t_head == NO_IDX)
		pp_release(c, pp);
	t->pprev = t->pnext = NO_IDX;
}

/* thread i at the head of its pid's list (the entry was made by the caller) */
static void thr_link(struct corr *c, uint32_t i)
{
	struct thr *t = &c->thr[i];
	struct pproc *pp = pp_get(c, (uint32_t)(t->key >> 32));

	t->pprev = NO_IDX;
	t->pnext = pp->t_head;
	if (pp->t_head != NO_IDX)
		c->thr[pp->t_head].pprev = i;
	pp->t_head = i;
}

/*
 * A thread of an exited process: out of the table, its FIFO freed, the last
 * thread moved into its place. Left in, dead threads filled the table and
 * live ones were evicted in their stead.
 */
static void thr_remove(struct corr *c, uint32_t i)
{
	uint32_t last = c->thr_len - 1;

	tt_delete_slot(c, tt_slot_of(c, i));
	thr_unlink(c, i);
	free(c->thr[i].up);
	c->up_slots -= c->thr[i].up_cap;
	if (i != last) {
		struct thr *t = &c->thr[i];

		c->tt[tt_slot_of(c, last)] = i + 1;
		*t = c->thr[last];
		/* its neighbours in its pid's list follow it */
		if (t->pprev != NO_IDX)
			c->thr[t->pprev].pnext = i;
		else
			pp_find(c, (uint32_t)(t->key >> 32))->t_head = i;
		if (t->pnext != NO_IDX)
			c->thr[t->pnext].pprev = i;
	}
	memset(&c->thr[last], 0, sizeof(c->thr[last]));
	c->thr_len--;
	c->cnt.threads_pruned++;
}

static struct thr *thr_get(struct corr *c, uint32_t pid, uint32_t tid, bool create)
{
	uint64_t key = (uint64_t)pid << 32 | tid;
	uint32_t i = (uint32_t)corr_hash64(key) & c->tt_mask;
	struct thr *t;

	for (;; i = (i + 1) & c->tt_mask) {
		uint32_t v = c->tt[i];

		if (!v)
			break;
		if (c->thr[v - 1].key == key)
			return &c->thr[v - 1];
	}
	if (!create || !pp_get(c, pid))
		return NULL;
	if (c->thr_len == c->thr_cap) {
		/* evict round-robin: threads are cheap to forget (a few launches) */
		uint32_t victim = c->thr_victim;

		c->thr_victim = (victim + 1) % c->thr_cap;
		tt_delete_slot(c, tt_slot_of(c, victim));
		thr_unlink(c, victim);
		c->cnt.threads_evicted++;
		c->thr_len--;
		t = &c->thr[victim];
		{
			/* the FIFO's memory stays with the slot */
			struct thr_up *up = t->up;
			uint32_t cap = t->up_cap;

			memset(t, 0, sizeof(*t));
			t->up = up;
			t->up_cap = cap;
		}
		i = (uint32_t)corr_hash64(key) & c->tt_mask;
		while (c->tt[i])
			i = (i + 1) & c->tt_mask;
		c->tt[i] = victim + 1;
	} else {
		t = &c->thr[c->thr_len];
		c->tt[i] = c->thr_len + 1;
	}
	c->thr_len++;
	t->key = key;
	t->live = 1;
	thr_link(c, (uint32_t)(t - c->thr));
	return t;
}

/* double a thread's uprobe FIFO within THR_UP_MAX and the budget: 0 or -ENOSPC */
static int up_grow(struct corr *c, struct thr *t)
{
	uint32_t cap = t->up_cap ? t->up_cap * 2 : THR_UP_MIN;
	struct thr_up *n;

	if (cap > THR_UP_MAX || c->up_slots + (cap - t->up_cap) > THR_UP_BUDGET)
		return -ENOSPC;
	n = malloc((size_t)cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->up_len; i++)
		n[i] = t->up[(t->up_head + i) % t->up_cap];
	free(t->up);
	c->up_slots += cap - t->up_cap;
	t->up = n;
	t->up_cap = cap;
	t->up_head = 0;
	return 0;
}

/* driver entry points (cu*) follow the runtime ones in enum cuda_api (bpf/events.h) */
bool corr_api_is_driver(uint16_t api)
{
	/* enum cuda_api, bpf/events.h: API_CU_LAUNCH_KERNEL (11) to 16, and 19 to 23 */
	return (api >= 11 && api <= 16) || (api >= 19 && api <= 23);
}

int corr__add_uprobe_launch(struct corr *c, uint32_t pid, uint32_t tid, uint64_t ts_ns,
			    uint16_t api)
{
	struct thr *t;
	struct thr_up *u;
	struct thr_cb *best = NULL;
	uint64_t ts = adj(c, CORR_SRC_UPROBE, ts_ns);

	c->cnt.uprobe_launches++;
	t = thr_get(c, pid, tid, true);
	if (!t)
		return -ENOMEM;

	/* a callback that came before this uprobe: the earliest one after it */
	for (int i = 0; i < THR_CBW; i++) {
		struct thr_cb *w = &t->cbw[i];

		if (w->used || !w->ts || w->ts < ts || w->ts - ts > c->o.match_window_ns)
			continue;
		if (!best || w->ts < best->ts)
			best = w;
	}
	if (best) {
		uint32_t slot, idx = lt_find(c, mk_key(c, pid, best->corr), &slot);

		best->used = 1;
		if (idx != NO_IDX && !c->ring[idx].from_uprobe) {
			struct launch_ent *e = &c->ring[idx];

			e->ts = ts;
			e->api = intern_api(c, corr_api_name(api), true);
			e->from_uprobe = 1;
			c->cnt.callbacks_with_uprobe++;
			c->cnt.callbacks_without_uprobe--;
		}
		return 0;
	}

	if (t->up_len == t->up_cap && up_grow(c, t)) {
		/* at its bound: the oldest launch was never claimed */
		c->cnt.uprobes_evicted++;
		if (!t->up_cap)
			return 0; /* budget spent before this thread got any */
		t->up_head = (t->up_head + 1) % t->up_cap;
		t->up_len--;
	}
	u = &t->up[(t->up_head + t->up_len) % t->up_cap];
	t->up_len++;
	*u = (struct thr_up){.ts = ts, .api = api};
	if (ts > c->watermark)
		c->watermark = ts;
	return 0;
}

int corr__add_callback(struct corr *c, uint32_t pid, uint32_t tid, uint64_t ts_ns, uint32_t corr_id,
		       uint32_t domain, uint32_t cbid)
{
	uint64_t ts = adj(c, CORR_SRC_CALLBACK, ts_ns);
	struct thr *t = thr_get(c, pid, tid, true);
	const char *name = corr_cbid_name(domain, cbid);
	struct thr_up hit = {};
	bool found = false;
	uint32_t n;

	c->cnt.callbacks++;
	if (!t)
		return -ENOMEM;
	/*
	 * One thread makes one API call at a time: this call entered after the
	 * exit of the previous reported call (last_cb_ts) and at or before this
	 * exit. Of the uprobe launches in that span, the latest of the
	 * callback's own API family wins (a runtime launch may enter the
	 * driver's probed entry point on its way; the runtime callback owns
	 * the runtime entry), else the latest. The span is consumed: none of
	 * it can belong to a later call.
	 */
	for (n = 0; n < t->up_len; n++) {
		const struct thr_up *u = &t->up[(t->up_head + n) % t->up_cap];

		if (u->ts > ts)
			break;
		if (u->ts <= t->last_cb_ts || ts - u->ts > c->o.match_window_ns)
			continue;
		/* a later one wins unless it would replace one of the right family */
		if (!found || corr_api_is_driver(u->api) == (domain == 1) ||
		    corr_api_is_driver(hit.api) != (domain == 1))
			hit = *u;
		found = true;
	}
	c->cnt.uprobes_evicted += n - (found ? 1 : 0);
	t->up_head = t->up_cap ? (t->up_head + n) % t->up_cap : 0;
	t->up_len -= n;
	if (ts > t->last_cb_ts)
		t->last_cb_ts = ts;
	if (found) {
		c->cnt.callbacks_with_uprobe++;
		return launch_insert(c, pid, tid, hit.ts, corr_id, cbid,
				     intern_api(c, corr_api_name(hit.api), true), true, true);
	}
	/* no uprobe (yet): keep the callback so a late uprobe can claim it */
	c->cnt.callbacks_without_uprobe++;
	t->cbw[t->head_cb] = (struct thr_cb){.ts = ts, .corr = corr_id};
	t->head_cb = (t->head_cb + 1) % THR_CBW;
	return launch_insert(c, pid, tid, ts, corr_id, cbid,
			     intern_api(c, name ? name : "unknown", true), false, true);
}

int corr__add_gpu(struct corr *c, const struct corr_gpu *gin)
{
	struct corr_gpu g = *gin;
	uint64_t key;
	uint32_t slot, idx, head, tag;
	struct pend *p;
	int32_t nid = -1;
	char fixed[4096];
	bool track = !(c->o.flags & CORR_F_PID_FROM_LAUNCH); /* pid lists */

	/* names are bytes from a shim or a trace: well-formed UTF-8 from here on (jsonw.h) */
	if (g.name)
		g.name = jw_utf8_clean(g.name, fixed, sizeof(fixed));
	/* hashed once (an input's hash is not trusted): sent on, and interned by here */
	g.name_hash = g.name ? corr_name_hash(g.name, strlen(g.name)) : 0;
	g.start_ns = adj(c, CORR_SRC_GPU, g.start_ns);
	g.end_ns = adj(c, CORR_SRC_GPU, g.end_ns);
	c->cnt.gpu_records++;
	if (g.kind < CORR_KIND_COUNT)
		c->cnt.kinds[g.kind]++;
	/*
	 * No launch was sent for it: waiting would only hold it back and fill
	 * the queue, and looking for its launch is a cache miss in a table of
	 * 131,072 (9% of the agent at 133 k kernels/s, bench/shim.sh, perf).
	 */
	if (g.flags & CORR_GPU_F_NO_LAUNCH) {
		c->cnt.no_launch++;
		emit_unmatched(c, &g);
		return 0;
	}
	key = mk_key(c, g.pid, g.corr_id);
	/* where it waits if no launch has come: its slot is a cache miss, taken meanwhile */
	tag = pt_tag(key);
	__builtin_prefetch(&c->pt[tag & c->pt_mask], 1);

	idx = lt_find(c, key, &slot);
	if (idx != NO_IDX) {
		if (join_ok(c, &c->ring[idx], &g)) {
			emit_joined(c, &c->ring[idx], &g);
		} else {
			c->cnt.refused++;
			emit_unmatched(c, &g);
		}
		return 0;
	}

	/* wait for the launch: queue, evicting the oldest waiter when full */
	if (track && !pp_get(c, g.pid)) {
		emit_unmatched(c, &g);
		return -ENOMEM;
	}
	if (c->pend_len == c->pend_cap) {
		if (!c->cnt.gpu_evicted++)
			corr_log(c, CORR_LOG_WARN,
				 "GPU wait queue full (%u): oldest records emitted unmatched",
				 c->pend_cap);
		pend_emit_unmatched(c, c->fifo_head);
	}
	if (g.name) {
		nid = names_intern_gpu(c->names, &g);
		if (nid < 0) {
			c->cnt.names_dropped++;
			nid = -1;
		}
	}
	idx = c->pend_free;
	c->pend_free = c->pend[idx].next;
	c->pend_len++;
	p = &c->pend[idx];
	p->g = g;
	p->g.name = NULL;
	p->name_id = nid;
	p->key = key;
	p->next = NO_IDX;
	p->prev = c->fifo_tail;
	if (c->fifo_tail != NO_IDX)
		c->pend[c->fifo_tail].next = idx;
	else
		c->fifo_head = idx;
	c->fifo_tail = idx;
	p->pprev = p->pnext = NO_IDX;
	if (track) {
		/* made above; the eviction may have dropped it: made again, it cannot fail */
		struct pproc *pp = pp_get(c, g.pid);

		p->pprev = pp->p_tail;
		if (pp->p_tail != NO_IDX)
			c->pend[pp->p_tail].pnext = idx;
		else
			pp->p_head = idx;
		pp->p_tail = idx;
	}
	/* append to the key's chain (keeps arrival order for graph kernels) */
	head = pt_find_tag(c, key, tag, &slot);
	p->chain = NO_IDX;
	if (head == NO_IDX) {
		c->pt[slot] = (struct pt_slot){.idx1 = idx + 1, .tag = tag};
	} else {
		while (c->pend[head].chain != NO_IDX)
			head = c->pend[head].chain;
		c->pend[head].chain = idx;
	}
	return 0;
}

int corr__process_exit(struct corr *c, uint32_t pid, uint64_t ts_ns)
{
	struct pproc *pp;

	c->exits[pid % EXIT_CAP] = (struct exit_ent){.pid = pid, .ts = ts_ns};
	pp = pp_find(c, pid);
	if (!pp)
		return 0;
	/* launches of the old process can no longer own anything new */
	for (uint32_t i = pp->l_head; i != NO_IDX; i = c->ring[i].pnext) {
		launch_unlink(c, &c->ring[i]);
		c->cnt.launches_dropped_exit++;
		c->exit_visits++;
	}
	pp->l_head = pp->l_tail = NO_IDX;
	pp_release(c, pp);
	/*
	 * GPU records still waiting for a launch of that process never get
	 * one (oldest first), and its threads go. Each removal may drop the
	 * entry once the process holds nothing: look it up again.
	 */
	while ((pp = pp_find(c, pid)) && pp->p_head != NO_IDX) {
		pend_emit_unmatched(c, pp->p_head);
		c->exit_visits++;
	}
	while ((pp = pp_find(c, pid)) && pp->t_head != NO_IDX) {
		thr_remove(c, pp->t_head);
		c->exit_visits++;
	}
	return 0;
}

uint64_t corr_exit_visits(const struct corr *c)
{
	return c->exit_visits;
}

uint32_t corr_procs_held(const struct corr *c)
{
	return c->procs.len;
}

int corr__advance(struct corr *c, uint64_t now_ns)
{
	if (now_ns > c->watermark)
		c->watermark = now_ns;
	retire(c);
	return 0;
}

int corr__flush(struct corr *c)
{
	while (c->fifo_head != NO_IDX)
		pend_emit_unmatched(c, c->fifo_head);
	return 0;
}
