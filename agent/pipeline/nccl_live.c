// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nccl_live.c - NCCL calls from the uprobes (bpf/nccl.bpf.c) to records.
 *
 * Communicators: ncclComm_t is a pointer, meaningful in one process only, so
 * the init's EV_NCCL_COMM maps (pid, pointer) to the communicator: the
 * FNV-1a hash of its ncclUniqueId (the same bytes on every rank, on every
 * node), its rank and size. ncclCommCount/ncclCommUserRank cannot be called
 * from BPF, and need none: the init said it. A split comm is
 * hash(parent hash, color, n-th split of the parent), the same on every rank
 * of that color. Its rank and size are derived as NCCL computes them, from
 * every parent rank's color and key (their split entries): the ranks of one
 * color ordered by key, then by parent rank (nccl.h; NVIDIA/nccl
 * src/init.cc, commGetSplitInfo), NCCL_SPLIT_NOCOLOR in none. That needs
 * every rank of the parent on this node; otherwise the split comm is
 * recorded without a rank and counted (split_rank_unknown). A comm
 * never seen initialised (the agent started later) is recorded with a hash
 * of (pid, pointer), no rank, and counted (CORR_COLL_F_COMM_UNKNOWN).
 *
 * Kernel join: NCCL launches its kernel inside the collective (or inside
 * ncclGroupEnd for a group), on the calling thread, through the driver
 * (cuLaunchKernelEx, probed and seen by the CUPTI shim). A joined GPU record
 * whose name holds "nccl" completes the oldest waiting collective of its
 * launching thread entered before the launch, and every waiting one of the
 * same group. Collectives of a process whose shim times kernels wait for it
 * at most HOLD_NS, in call order, then go out without.
 *
 * Then each collective feeds the cross-rank wait tracker (collectives only:
 * a send has no n-th counterpart on every rank) and, in sentinel mode, the
 * per-interval aggregate. A wait where the last rank came at least the
 * straggler threshold late (--detect straggler_abs, 1 ms) is written at once
 * and the worst one per communicator and interval becomes a `straggler`
 * anomaly with the evidence sentence.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "pipeline.h"
#include "correlator.h"
#include "collective.h"
#include "diagnose.h"
#include "nccl_live.h"

#define HOLD_NS 2000000000ULL /* the shim flushes every 1 s: twice that */
#define HOLD_MAX 8192
#define COMMS 1024 /* (pid, pointer) entries, a power of 2 */
#define PIDS 256
#define WORST 64     /* communicators with a straggler in one interval */
#define SPLITS 64    /* splits whose ranks are being derived */
#define NOCOLOR (-1) /* NCCL_SPLIT_NOCOLOR, nccl.h */
#define JBUF 4096

static const char *const api_names[NCCL_API_COUNT] = {
    [NCCL_ALL_REDUCE] = "ncclAllReduce",
    [NCCL_ALL_GATHER] = "ncclAllGather",
    [NCCL_REDUCE_SCATTER] = "ncclReduceScatter",
    [NCCL_BROADCAST] = "ncclBroadcast",
    [NCCL_BCAST] = "ncclBcast",
    [NCCL_REDUCE] = "ncclReduce",
    [NCCL_ALLTOALL] = "ncclAlltoAll",
    [NCCL_SEND] = "ncclSend",
    [NCCL_RECV] = "ncclRecv",
    [NCCL_GROUP_START] = "ncclGroupStart",
    [NCCL_GROUP_END] = "ncclGroupEnd",
    [NCCL_COMM_INIT_RANK] = "ncclCommInitRank",
    [NCCL_COMM_INIT_RANK_CONFIG] = "ncclCommInitRankConfig",
    [NCCL_COMM_INIT_ALL] = "ncclCommInitAll",
    [NCCL_COMM_SPLIT] = "ncclCommSplit",
    [NCCL_COMM_DESTROY] = "ncclCommDestroy",
    [NCCL_COMM_ABORT] = "ncclCommAbort",
    [NCCL_COMM_INIT_RANK_SCALABLE] = "ncclCommInitRankScalable",
};

const char *nccl_api_name(unsigned api)
{
	return api < NCCL_API_COUNT && api_names[api] ? api_names[api] : "?";
}

static enum corr_coll_op api_op(unsigned api)
{
	switch (api) {
	case NCCL_ALL_REDUCE:
		return CORR_COLL_ALLREDUCE;
	case NCCL_ALL_GATHER:
		return CORR_COLL_ALLGATHER;
	case NCCL_REDUCE_SCATTER:
		return CORR_COLL_REDUCESCATTER;
	case NCCL_BROADCAST:
	case NCCL_BCAST:
		return CORR_COLL_BROADCAST;
	case NCCL_REDUCE:
		return CORR_COLL_REDUCE;
	case NCCL_ALLTOALL:
		return CORR_COLL_ALLTOALL;
	case NCCL_SEND:
		return CORR_COLL_SEND;
	case NCCL_RECV:
		return CORR_COLL_RECV;
	}
	return CORR_COLL_UNKNOWN;
}

struct comm {
	uint32_t pid; /* 0: free */
	bool dead;    /* tombstone */
	bool known;   /* seen initialised */
	uint64_t ptr;
	uint64_t hash;
	int32_t rank, nranks;
	uint64_t seq, p2p_seq;
	uint32_t splits; /* splits of this comm entered */
	bool split_open; /* one entered, not returned yet */
};

/* a parent rank's part in one split */
struct split_member {
	bool entered, returned;
	int32_t color, key;
	uint32_t pid;
	uint64_t comm; /* the new ncclComm_t once returned (0: none), its rank still unknown */
};

/* the n-th split of a communicator: every parent rank's color and key */
struct split {
	uint64_t parent; /* the parent's hash; 0: a free slot */
	uint32_t idx;
	int32_t nranks; /* the parent's size */
	uint32_t entered, returned;
	uint64_t age;
	struct split_member m[CORR_WAIT_MAX_RANKS];
};

struct held {
	struct corr_collective c;
	bool joined;
	bool gone; /* its process exited: no kernel will come */
	char kernel[GPU_NAME_LEN];
};

struct local_ranks {
	uint64_t hash;
	uint32_t n;
	int32_t ranks[CORR_WAIT_MAX_RANKS];
};

struct worst {
	uint64_t hash;
	uint64_t late_ns;
	uint32_t pid, tid;
	int32_t rank;
	uint64_t wait_total_ns;
	uint64_t ts_ns, last_ns; /* first and last arrival */
	uint64_t seq;
	uint32_t pids[CORR_WAIT_MAX_RANKS]; /* its ranks' processes */
	uint32_t npids;
	char evidence[192];
};

struct nccl_live {
	struct comm comms[COMMS];
	uint32_t n_comms;
	struct {
		uint32_t pid;
		bool gpu;
	} pids[PIDS];
	struct {
		uint32_t pid;
		uint32_t intervals;
	} gone[PIDS];	   /* exited processes whose comms go two intervals later */
	struct held *hold; /* ring of HOLD_MAX */
	uint32_t h_head, h_len;
	struct local_ranks *lr; /* per communicator hash: the ranks initialised here */
	uint32_t n_lr;
	struct split *splits; /* SPLITS */
	uint64_t split_age, split_rank_unknown;
	struct worst worst[WORST];
	uint32_t n_worst;
	struct corr_waits *waits;
	struct corr_coll_agg *agg;
	struct corr_coll_counters cc;
	uint64_t calls[NCCL_API_COUNT];
	uint64_t bad_api, comm_table_full, hold_full, hold_expired, init_failed, waits_emitted,
	    anomalies, emit_errors;
	uint64_t t_cut;
	char buf[JBUF];
};

static uint64_t mix(uint64_t pid, uint64_t ptr)
{
	return (ptr ^ (pid << 40) ^ (pid >> 24)) * 0x9e3779b97f4a7c15ULL;
}

static struct comm *comm_find(struct nccl_live *n, uint32_t pid, uint64_t ptr, bool add)
{
	uint32_t i = (uint32_t)(mix(pid, ptr) >> 40) & (COMMS - 1);
	struct comm *tomb = NULL;

	for (uint32_t k = 0; k < COMMS; k++, i = (i + 1) & (COMMS - 1)) {
		struct comm *c = &n->comms[i];

		if (!c->pid) {
			if (!tomb)
				tomb = c;
			break;
		}
		if (c->dead) {
			if (!tomb)
				tomb = c;
			continue;
		}
		if (c->pid == pid && c->ptr == ptr)
			return c;
	}
	if (!add || !tomb)
		return NULL;
	/* the first free or dead slot on the way */
	memset(tomb, 0, sizeof(*tomb));
	tomb->pid = pid;
	tomb->ptr = ptr;
	tomb->rank = CORR_COLL_NONE;
	n->n_comms++;
	return tomb;
}

static void comm_drop(struct nccl_live *n, struct comm *c)
{
	c->dead = true;
	n->n_comms--;
}

static void waits_emit(void *ctx, const struct corr_wait *w);

static struct nccl_live *live(struct agent *a)
{
	struct corr_waits_opts wo = {.sz = sizeof(wo), .emit = waits_emit, .emit_ctx = a};
	struct nccl_live *n = a->nccl;

	if (n)
		return n;
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->hold = calloc(HOLD_MAX, sizeof(*n->hold));
	n->splits = calloc(SPLITS, sizeof(*n->splits));
	n->waits = corr_waits__new(&wo);
	n->agg = corr_coll_agg__new(0);
	if (!n->hold || !n->splits || !n->waits || !n->agg) {
		free(n->hold);
		free(n->splits);
		corr_waits__free(n->waits);
		corr_coll_agg__free(n->agg);
		free(n);
		return NULL;
	}
	a->nccl = n;
	return n;
}

/* the state, with one more call of api counted; NULL for a bad api (counted) or no memory */
static struct nccl_live *live_call(struct agent *a, unsigned api)
{
	struct nccl_live *n = live(a);

	if (!n)
		return NULL;
	if (api >= NCCL_API_COUNT) {
		n->bad_api++;
		return NULL;
	}
	n->calls[api]++;
	return n;
}

static uint64_t straggler_ns(struct agent *a)
{
	uint64_t v = a->opts.diag.det.straggler_abs_ns;

	return v ? v : 1000000;
}

/* the ranks of a communicator initialised on this node: the tracker expects those */
static void local_rank_add(struct nccl_live *n, uint64_t hash, int32_t rank)
{
	struct local_ranks *l = NULL;

	if (rank < 0)
		return;
	for (uint32_t i = 0; i < n->n_lr; i++)
		if (n->lr[i].hash == hash)
			l = &n->lr[i];
	if (!l) {
		struct local_ranks *nl = realloc(n->lr, (n->n_lr + 1) * sizeof(*nl));

		if (!nl || n->n_lr >= 4096)
			return;
		n->lr = nl;
		l = &n->lr[n->n_lr++];
		memset(l, 0, sizeof(*l));
		l->hash = hash;
	}
	for (uint32_t i = 0; i < l->n; i++)
		if (l->ranks[i] == rank)
			return;
	if (l->n >= CORR_WAIT_MAX_RANKS)
		return;
	l->ranks[l->n++] = rank;
	corr_waits__expect(n->waits, hash, l->ranks, l->n);
}

/* ranks of a communicator initialised on this node */
static uint32_t local_count(const struct nccl_live *n, uint64_t hash)
{
	for (uint32_t i = 0; i < n->n_lr; i++)
		if (n->lr[i].hash == hash)
			return n->lr[i].n;
	return 0;
}

/* ------------------------------------------------------------- splits -- */

/* the n-th split of parent; a new one (the oldest goes when full) when add */
static struct split *split_find(struct nccl_live *n, uint64_t parent, uint32_t idx, bool add)
{
	struct split *free_s = NULL, *old = NULL;

	for (int i = 0; i < SPLITS; i++) {
		struct split *sp = &n->splits[i];

		if (sp->parent == parent && sp->idx == idx)
			return sp;
		if (!sp->parent && !free_s)
			free_s = sp;
		if (sp->parent && (!old || sp->age < old->age))
			old = sp;
	}
	if (!add)
		return NULL;
	if (!free_s) {
		/* its members still waiting for their rank never get one */
		for (int j = 0; j < CORR_WAIT_MAX_RANKS; j++)
			n->split_rank_unknown += old->m[j].returned && old->m[j].comm;
		free_s = old;
	}
	memset(free_s, 0, sizeof(*free_s));
	free_s->parent = parent;
	free_s->idx = idx;
	free_s->age = ++n->split_age;
	return free_s;
}

/* parent rank pr's rank and size in its color's new communicator: by key, then parent rank */
static void split_rank(const struct split *sp, int32_t pr, int32_t *rank, int32_t *nranks)
{
	const struct split_member *me = &sp->m[pr];

	*rank = *nranks = 0;
	for (int32_t j = 0; j < sp->nranks; j++) {
		const struct split_member *o = &sp->m[j];

		if (o->color != me->color)
			continue;
		++*nranks;
		if (o->key < me->key || (o->key == me->key && j < pr))
			++*rank;
	}
}

/* the communicator of one color of a split: the same value on its every rank */
static uint64_t split_hash(uint64_t parent, int32_t color, uint32_t idx)
{
	uint64_t k[3] = {parent, (uint64_t)(int64_t)color, idx};

	return corr_coll_hash(k, sizeof(k));
}

/*
 * Every parent rank entered: each color's ranks are expected by the wait
 * tracker at once (all are local, and a rank may call a collective on the
 * new comm before another one's split return is decoded), and the members
 * that returned before get their rank.
 */
static void split_complete(struct nccl_live *n, struct split *sp)
{
	for (int32_t j = 0; j < sp->nranks; j++) {
		struct split_member *m = &sp->m[j];
		struct comm *c =
		    m->returned && m->comm ? comm_find(n, m->pid, m->comm, false) : NULL;
		int32_t rank, nranks;

		m->comm = 0;
		if (m->color == NOCOLOR)
			continue;
		split_rank(sp, j, &rank, &nranks);
		local_rank_add(n, split_hash(sp->parent, m->color, sp->idx), rank);
		if (c) {
			c->rank = rank;
			c->nranks = nranks;
		}
	}
	if (sp->returned == sp->entered)
		sp->parent = 0;
}

/* a split's entry: this parent rank's color and key */
static void split_enter(struct nccl_live *n, const struct nccl_comm_event *e)
{
	struct comm *p = comm_find(n, e->hdr.pid, e->parent, false);
	struct split_member *m;
	struct split *sp;

	if (!p)
		return; /* a parent never seen: its return says so */
	p->split_open = true;
	/*
	 * Whether every parent rank is here is known at the return: another
	 * rank's init may still be on its way (its return probe came after this
	 * rank returned from its own init and entered the split)
	 */
	sp = p->known && p->rank >= 0 && p->rank < p->nranks && p->nranks <= CORR_WAIT_MAX_RANKS
		 ? split_find(n, p->hash, p->splits, true)
		 : NULL;
	p->splits++;
	if (!sp || sp->m[p->rank].entered)
		return;
	sp->nranks = p->nranks;
	m = &sp->m[p->rank];
	m->entered = true;
	m->color = e->color;
	m->key = e->key;
	if (++sp->entered == (uint32_t)sp->nranks)
		split_complete(n, sp);
}

/*
 * A split's return, on parent p (NULL: never seen) as its idx-th split: the
 * new comm's rank and size, or -1 when they cannot be known (counted) or are
 * not known yet (a parent rank has not entered: set when it does).
 */
static void split_return(struct nccl_live *n, const struct nccl_comm_event *e, struct comm *p,
			 uint32_t idx, bool ok, int32_t *rank, int32_t *nranks)
{
	struct split *sp = p && p->known ? split_find(n, p->hash, idx, false) : NULL;
	struct split_member *m =
	    sp && p->rank >= 0 && p->rank < sp->nranks ? &sp->m[p->rank] : NULL;
	bool wanted = ok && e->color != NOCOLOR && e->comms[0];

	*rank = *nranks = -1;
	if (m && m->entered && !m->returned) {
		m->returned = true;
		m->pid = e->hdr.pid;
		sp->returned++;
	} else {
		m = NULL;
	}
	/*
	 * Every rank of the parent must be here for its colors and keys; they
	 * all entered the split before this return, after their inits: the
	 * count is final. A split that cannot complete goes now.
	 */
	if (sp && local_count(n, p->hash) < (uint32_t)p->nranks) {
		sp->parent = 0;
		m = NULL;
	}
	if (!wanted)
		goto out;
	if (!m) {
		n->split_rank_unknown++;
		goto out;
	}
	if (sp->entered == (uint32_t)sp->nranks)
		split_rank(sp, p->rank, rank, nranks);
	else
		m->comm = e->comms[0]; /* split_complete() sets it */
out:
	if (m && sp->entered == (uint32_t)sp->nranks && sp->returned == sp->entered)
		sp->parent = 0;
}

static bool pid_gpu(struct nccl_live *n, uint32_t pid)
{
	for (int i = 0; i < PIDS; i++)
		if (n->pids[i].pid == pid)
			return n->pids[i].gpu;
	return false;
}

void nccl_on_shim(struct agent *a, uint32_t pid, bool gpu)
{
	struct nccl_live *n = live(a);
	int free_i = -1;

	if (!n)
		return;
	for (int i = 0; i < PIDS; i++) {
		if (n->pids[i].pid == pid) {
			n->pids[i].gpu = gpu;
			return;
		}
		if (!n->pids[i].pid && free_i < 0)
			free_i = i;
	}
	if (free_i >= 0) {
		n->pids[free_i].pid = pid;
		n->pids[free_i].gpu = gpu;
	}
}

/* ------------------------------------------------------------ records -- */

/*
 * A collective in binary form for route_detail_fmt(): the struct, then its
 * kernel's name (NUL-terminated) when joined; the other names point into
 * the static tables of collective.c.
 */
struct coll_blob {
	struct corr_collective c;
	char kernel[768]; /* longer names: formatted at once (emit_collective) */
};

static long coll_fmt(struct agent *a, const char *key, const void *blob, size_t len, char *buf,
		     size_t cap)
{
	const struct coll_blob *b = blob;
	struct corr_json_common cm = {.host = agent_host(a), .instance = key};
	struct corr_collective c;

	if (len < sizeof(b->c))
		return -1;
	c = b->c;
	c.kernel = len > sizeof(b->c) ? b->kernel : NULL;
	return corr_coll_to_json(buf, cap, &cm, &c);
}

static void emit_collective(struct agent *a, struct nccl_live *n, struct corr_collective *c)
{
	const char *inst = agent_instance_of(a, c->pid);
	struct coll_blob b;
	size_t len = sizeof(b.c);

	corr_coll_check(c, &n->cc);
	if (a->opts.mode != MODE_DEEP)
		corr_coll_agg__add(n->agg, c);
	if (c->op >= CORR_COLL_ALLREDUCE && c->op <= CORR_COLL_ALLTOALL)
		corr_waits__add(n->waits, c);
	if (!route_wants_detail(a, c->pid))
		return;
	/* made JSON only when sent: in sentinel mode most never are (a window unread) */
	b.c = *c;
	b.c.kernel = NULL;
	if (c->kernel) {
		size_t k = strnlen(c->kernel, sizeof(b.kernel));

		if (k == sizeof(b.kernel)) {
			struct corr_json_common cm = {.host = agent_host(a), .instance = inst};
			int jl = corr_coll_to_json(n->buf, sizeof(n->buf), &cm, c);

			if (jl < 0 || route_detail(a, c->pid, inst, n->buf, (size_t)jl))
				n->emit_errors++;
			return;
		}
		memcpy(b.kernel, c->kernel, k + 1);
		len = offsetof(struct coll_blob, kernel) + k + 1;
	}
	if (route_detail_fmt(a, c->pid, inst, coll_fmt, &b, len))
		n->emit_errors++;
}

/* the held collectives at the head that are complete, or older than until */
static void release(struct agent *a, struct nccl_live *n, uint64_t until, bool all)
{
	while (n->h_len) {
		struct held *h = &n->hold[n->h_head];

		if (!all && !h->joined && !h->gone && h->c.enqueue_ns >= until)
			break;
		if (!h->joined && !h->gone && !all)
			n->hold_expired++;
		h->c.kernel = h->joined ? h->kernel : NULL;
		emit_collective(a, n, &h->c);
		n->h_head = (n->h_head + 1) % HOLD_MAX;
		n->h_len--;
	}
}

static void emit_group(struct agent *a, const struct nccl_call_event *e)
{
	json_t *r;

	if (!deepdive_pid_deep(a, e->hdr.pid))
		return;
	r = rec_new(a, "nccl_group", e->hdr.pid, e->hdr.tid, e->hdr.ts_ns);
	if (!r)
		return;
	json_object_set_new(r, "api", json_string(nccl_api_name(e->api)));
	json_object_set_new(r, "group_id", json_integer((json_int_t)e->group_id));
	json_object_set_new(r, "group_depth", json_integer(e->group_depth));
	rec_emit(a, REC_EVENT, r);
}

void nccl_on_call(struct agent *a, const struct nccl_call_event *e)
{
	struct nccl_live *n = live_call(a, e->api);
	struct corr_collective c = {0};
	struct comm *cm;

	if (!n)
		return;
	if (e->api == NCCL_GROUP_START || e->api == NCCL_GROUP_END) {
		emit_group(a, e);
		return;
	}
	cm = comm_find(n, e->hdr.pid, e->comm, true);
	c.pid = e->hdr.pid;
	c.tid = e->hdr.tid;
	c.op = api_op(e->api);
	c.count = e->count;
	c.datatype = e->datatype;
	c.redop = e->redop;
	c.root = e->root;
	c.stream = e->flags & NCCL_F_REGS_ONLY ? 0 : e->stream;
	c.enqueue_ns = e->hdr.ts_ns;
	c.group_id = e->group_id;
	c.rank = CORR_COLL_NONE;
	if (!cm) {
		n->comm_table_full++;
		c.comm_hash = e->comm;
		c.flags |= CORR_COLL_F_COMM_UNKNOWN;
	} else {
		/* never seen initialised: the pointer stands for it (no rank: not tracked) */
		if (!cm->known && !cm->hash)
			cm->hash = e->comm;
		c.comm_hash = cm->hash;
		c.rank = cm->rank;
		c.nranks = cm->nranks > 0 ? cm->nranks : 0;
		if (!cm->known)
			c.flags |= CORR_COLL_F_COMM_UNKNOWN;
		c.seq =
		    c.op == CORR_COLL_SEND || c.op == CORR_COLL_RECV ? cm->p2p_seq++ : cm->seq++;
	}
	if (!a->gpu || !pid_gpu(n, c.pid)) {
		emit_collective(a, n, &c);
		return;
	}
	if (n->h_len == HOLD_MAX) {
		n->hold_full++;
		release(a, n, 0, false);
		if (n->h_len == HOLD_MAX) {
			struct held *h = &n->hold[n->h_head];

			h->c.kernel = NULL;
			emit_collective(a, n, &h->c);
			n->h_head = (n->h_head + 1) % HOLD_MAX;
			n->h_len--;
		}
	}
	{
		struct held *h = &n->hold[(n->h_head + n->h_len) % HOLD_MAX];

		h->c = c;
		h->joined = false;
		h->gone = false;
		h->kernel[0] = '\0';
		n->h_len++;
	}
}

void nccl_on_kernel(struct agent *a, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct nccl_live *n = a->nccl;
	struct corr_collective kn = {0};
	uint64_t group = 0;
	bool first = true;

	if (!n || !n->h_len || !l || !g->name || !strstr(g->name, "nccl"))
		return;
	/* the algorithm and protocol NCCL chose are in the kernel's name (static strings) */
	corr_coll_from_kernel(g->name, &kn);
	for (uint32_t k = 0; k < n->h_len; k++) {
		struct held *h = &n->hold[(n->h_head + k) % HOLD_MAX];

		if (h->joined || h->c.pid != l->pid || h->c.tid != l->tid ||
		    h->c.enqueue_ns > l->ts_ns)
			continue;
		if (!first && (!group || h->c.group_id != group))
			continue;
		if (first) {
			first = false;
			group = h->c.group_id;
		}
		h->joined = true;
		h->c.gpu_start_ns = g->start_ns;
		h->c.gpu_end_ns = g->end_ns;
		h->c.device = g->device;
		h->c.algo = kn.algo;
		h->c.proto = kn.proto;
		snprintf(h->kernel, sizeof(h->kernel), "%s", g->name);
		if (!group)
			break;
	}
	release(a, n, 0, false);
}

void nccl_on_comm(struct agent *a, const struct nccl_comm_event *e)
{
	struct nccl_live *n;
	bool ok = e->ret == 0 || e->ret == 7 /* ncclInProgress */;
	int32_t rank = e->rank, nranks = e->nranks;
	uint64_t hash = 0;
	json_t *r;

	if (e->api == NCCL_COMM_SPLIT_ENTER || e->api == NCCL_COMM_INIT_ENTER) {
		/* not a call of its own: the return counts it */
		n = live(a);
		if (n && e->api == NCCL_COMM_SPLIT_ENTER)
			split_enter(n, e);
		else if (n && e->nranks > 0 && e->rank < e->nranks)
			/*
			 * every local rank enters before any returns: the wait
			 * tracker expects them all before the first collective
			 */
			local_rank_add(n, corr_coll_hash(e->id, sizeof(e->id)), e->rank);
		return;
	}
	n = live_call(a, e->api);
	if (!n)
		return;
	r = rec_new(a, "nccl_comm", e->hdr.pid, e->hdr.tid, e->hdr.ts_ns);
	switch (e->api) {
	case NCCL_COMM_INIT_RANK:
	case NCCL_COMM_INIT_RANK_CONFIG:
	case NCCL_COMM_INIT_RANK_SCALABLE: /* the first of its ids */
		hash = corr_coll_hash(e->id, sizeof(e->id));
		break;
	case NCCL_COMM_INIT_ALL: {
		uint64_t k[2] = {e->hdr.pid, e->comms[0]};

		/* one process holds every rank: its first comm names the group */
		hash = corr_coll_hash(k, sizeof(k));
		break;
	}
	case NCCL_COMM_SPLIT: {
		struct comm *p = comm_find(n, e->hdr.pid, e->parent, false);
		uint64_t parent = p ? p->hash : e->parent;
		uint32_t idx = 0;

		/* its entry counted it (no entry seen: counted now) */
		if (p && p->split_open)
			idx = p->splits - 1;
		else if (p)
			idx = p->splits++;
		if (p)
			p->split_open = false;
		/* NCCL_SPLIT_NOCOLOR: no communicator */
		hash = e->color == NOCOLOR ? 0 : split_hash(parent, e->color, idx);
		split_return(n, e, p, idx, ok, &rank, &nranks);
		if (r)
			json_object_set_new(r, "parent_comm_hash",
					    json_sprintf("0x%llx", (unsigned long long)parent));
		break;
	}
	case NCCL_COMM_DESTROY:
	case NCCL_COMM_ABORT: {
		struct comm *c = comm_find(n, e->hdr.pid, e->comms[0], false);

		if (c) {
			hash = c->hash;
			comm_drop(n, c);
		}
		break;
	}
	default:
		n->bad_api++;
		json_decref(r);
		return;
	}
	if (e->api != NCCL_COMM_DESTROY && e->api != NCCL_COMM_ABORT) {
		if (!ok)
			n->init_failed++;
		for (uint32_t i = 0; ok && i < e->n_comms && i < NCCL_INIT_ALL_MAX; i++) {
			struct comm *c;

			if (!e->comms[i])
				continue;
			c = comm_find(n, e->hdr.pid, e->comms[i], true);
			if (!c) {
				n->comm_table_full++;
				continue;
			}
			c->known = true;
			c->hash = hash;
			c->seq = c->p2p_seq = 0;
			c->nranks = nranks;
			c->rank = e->api == NCCL_COMM_INIT_ALL ? (int32_t)i : rank;
			local_rank_add(n, hash, c->rank);
		}
	}
	if (!r)
		return;
	json_object_set_new(r, "api", json_string(nccl_api_name(e->api)));
	json_object_set_new(r, "comm", json_sprintf("0x%llx", (unsigned long long)e->comms[0]));
	json_object_set_new(r, "comm_hash",
			    hash ? json_sprintf("0x%llx", (unsigned long long)hash) : json_null());
	json_object_set_new(r, "rank", rank < 0 ? json_null() : json_integer(rank));
	json_object_set_new(r, "nranks", nranks < 0 ? json_null() : json_integer(nranks));
	if (e->api == NCCL_COMM_SPLIT) {
		json_object_set_new(r, "color", json_integer(e->color));
		json_object_set_new(r, "key", json_integer(e->key));
	}
	if (e->api == NCCL_COMM_INIT_ALL) {
		json_t *arr = json_array();

		for (uint32_t i = 0; i < e->n_comms && i < NCCL_INIT_ALL_MAX; i++)
			json_array_append_new(
			    arr, json_sprintf("0x%llx", (unsigned long long)e->comms[i]));
		json_object_set_new(r, "comms", arr);
	}
	if (e->api != NCCL_COMM_DESTROY && e->api != NCCL_COMM_ABORT) {
		json_object_set_new(r, "ret", json_integer(e->ret));
		json_object_set_new(r, "dur_ns", json_integer((json_int_t)e->dur_ns));
	}
	/* rare and what every later record of the comm refers to: a summary, sent always */
	if (rec_emit(a, REC_SUMMARY, r))
		n->emit_errors++;
}

/* ------------------------------------------------------ cross-rank wait -- */

static void waits_emit(void *ctx, const struct corr_wait *w)
{
	struct agent *a = ctx;
	struct nccl_live *n = a->nccl;
	const struct corr_wait_rank *last = NULL;
	struct corr_json_common cm = {.host = agent_host(a)};
	struct worst *wo = NULL;
	bool slow;
	int len;

	if (!n)
		return;
	if (a->opts.mode != MODE_DEEP)
		corr_coll_agg__add_wait(n->agg, w);
	diag_on_wait(a->diag, w); /* evidence for the anomalies of the steps it fell in */
	for (uint32_t i = 0; i < w->n_arrived; i++)
		if (w->ranks[i].rank == w->last_rank)
			last = &w->ranks[i];
	if (!last)
		return;
	cm.instance = agent_instance_of(a, last->pid);
	slow = w->n_arrived > 1 && w->late_ns >= straggler_ns(a);
	len = corr_wait_to_json(n->buf, sizeof(n->buf), &cm, w);
	if (len < 0) {
		n->emit_errors++;
	} else if (slow || deepdive_pid_deep(a, last->pid)) {
		/* a late rank is evidence worth a line even in sentinel mode */
		n->waits_emitted++;
		if (rec_emit_raw(a, REC_EVENT, cm.instance, n->buf, (size_t)len))
			n->emit_errors++;
	} else if (recorder_enabled(a)) {
		recorder_keep(a, cm.instance, n->buf, (size_t)len);
	}
	if (!slow)
		return;
	for (uint32_t i = 0; i < n->n_worst; i++)
		if (n->worst[i].hash == w->comm_hash)
			wo = &n->worst[i];
	if (!wo && n->n_worst < WORST)
		wo = &n->worst[n->n_worst++], wo->late_ns = 0, wo->hash = w->comm_hash;
	if (!wo || w->late_ns <= wo->late_ns)
		return;
	wo->late_ns = w->late_ns;
	wo->pid = last->pid;
	wo->tid = last->tid;
	wo->rank = w->last_rank;
	wo->wait_total_ns = w->wait_total_ns;
	wo->ts_ns = w->ranks[0].arrival_ns;
	wo->last_ns = w->last_arrival_ns;
	wo->seq = w->seq;
	wo->npids = 0;
	for (uint32_t i = 0; i < w->n_arrived && i < CORR_WAIT_MAX_RANKS; i++)
		wo->pids[wo->npids++] = w->ranks[i].pid;
	if (corr_wait_evidence(wo->evidence, sizeof(wo->evidence), w))
		wo->evidence[0] = '\0';
}

/*
 * the worst late arrival per communicator of the interval: a straggler
 * anomaly, unless its ranks' steps are known (diag_on_straggler decides)
 */
static void emit_anomalies(struct agent *a, struct nccl_live *n)
{
	for (uint32_t i = 0; i < n->n_worst; i++) {
		struct worst *w = &n->worst[i];
		struct diag_anomaly an = {0};

		an.instance = agent_instance_of(a, w->pid);
		an.rank = w->rank;
		an.pid = w->pid; /* the late rank's process and thread */
		an.tid = w->tid;
		an.phase = DIAG_PHASE_UNKNOWN;
		an.step_start_ns = w->ts_ns;
		an.dur_ns = w->late_ns;
		an.expected_ns = 0;
		an.score = (double)w->late_ns / (double)straggler_ns(a);
		an.kind = DIAG_KIND_STRAGGLER;
		an.chart = "collective";
		an.n_suspects = 2;
		an.suspects[0].what = "rank";
		snprintf(an.suspects[0].evidence, sizeof(an.suspects[0].evidence), "%s",
			 w->evidence);
		an.suspects[0].value = (double)w->late_ns;
		an.suspects[1].what = "comm_wait";
		snprintf(an.suspects[1].evidence, sizeof(an.suspects[1].evidence),
			 "the other ranks of comm 0x%llx spent %.2f ms in the collective waiting",
			 (unsigned long long)w->hash, w->wait_total_ns / 1e6);
		an.suspects[1].value = (double)w->wait_total_ns;
		n->anomalies++;
		if (diag_on_straggler(a, &an, w->pids, w->npids, w->hash, w->seq, w->last_ns))
			n->emit_errors++;
	}
	n->n_worst = 0;
}

/* ------------------------------------------------------------ interval -- */

static void emit_row(void *ctx, const struct corr_coll_row *r)
{
	struct agent *a = ctx;
	struct nccl_live *n = a->nccl;
	const char *inst = agent_instance_of(a, r->pid);
	struct corr_json_common cm = {.host = agent_host(a), .instance = inst};
	int len = corr_coll_row_to_json(n->buf, sizeof(n->buf), &cm, r, n->t_cut, now_ns());

	if (len < 0 || rec_emit_raw(a, REC_SUMMARY, inst, n->buf, (size_t)len))
		n->emit_errors++;
}

static void forget_pid(struct nccl_live *n, uint32_t pid)
{
	for (uint32_t i = 0; i < COMMS; i++)
		if (n->comms[i].pid == pid && !n->comms[i].dead)
			comm_drop(n, &n->comms[i]);
	for (int i = 0; i < PIDS; i++)
		if (n->pids[i].pid == pid)
			n->pids[i].pid = 0;
}

void nccl_tick(struct agent *a, uint64_t now)
{
	struct nccl_live *n = a->nccl;

	if (n && n->h_len)
		release(a, n, now > HOLD_NS ? now - HOLD_NS : 0, false);
}

void nccl_interval(struct agent *a, bool final)
{
	struct nccl_live *n = a->nccl;
	uint64_t now = now_ns();

	if (!n)
		return;
	release(a, n, now > HOLD_NS ? now - HOLD_NS : 0, final);
	if (final)
		corr_waits__flush(n->waits);
	else
		corr_waits__advance(n->waits, now);
	emit_anomalies(a, n);
	if (!n->t_cut)
		n->t_cut = a->last_interval_ns;
	corr_coll_agg__cut(n->agg, emit_row, a);
	n->t_cut = now;
	for (int i = 0; i < PIDS; i++)
		if (n->gone[i].pid && ++n->gone[i].intervals >= 2) {
			forget_pid(n, n->gone[i].pid);
			n->gone[i].pid = 0;
		}
}

void nccl_on_exit(struct agent *a, uint32_t pid)
{
	struct nccl_live *n = a->nccl;

	if (!n)
		return;
	/*
	 * its held collectives go (in order: those of other processes held
	 * before them still wait for their kernels), then its comms: the
	 * pointers may be reused
	 */
	for (uint32_t k = 0; k < n->h_len; k++) {
		struct held *h = &n->hold[(n->h_head + k) % HOLD_MAX];

		if (h->c.pid == pid)
			h->gone = true;
	}
	release(a, n, 0, false);
	/*
	 * The exit comes on rb_misc, the process's last calls on rb_cuda: they
	 * may be decoded after it and still need its comms, so those go two
	 * intervals later (as discovery keeps its instance name).
	 */
	for (int i = 0; i < PIDS; i++)
		if (!n->gone[i].pid || n->gone[i].pid == pid) {
			n->gone[i].pid = pid;
			n->gone[i].intervals = 0;
			return;
		}
	forget_pid(n, pid); /* 256 exits in two intervals: at once */
}

void nccl_stats(struct agent *a, json_t *r)
{
	struct nccl_live *n = a->nccl;
	struct nccl_slot_counts sc = {0};
	const struct corr_waits_counters *wc;
	json_t *o, *calls;

	if (a->cap.nccl_counts)
		a->cap.nccl_counts(a, &sc);
	/* calls written and all lost are still told */
	if (!n && sc.written)
		n = live(a);
	if (!n)
		return;
	o = json_object();
	calls = json_object();
	for (unsigned i = 0; i < NCCL_API_COUNT; i++)
		if (n->calls[i])
			json_object_set_new(calls, nccl_api_name(i),
					    json_integer((json_int_t)n->calls[i]));
	json_object_set_new(o, "calls", calls);
	json_object_set_new(o, "collectives", json_integer((json_int_t)n->cc.collectives));
	json_object_set_new(o, "comm_unknown", json_integer((json_int_t)n->cc.comm_unknown));
	json_object_set_new(o, "dtype_unknown", json_integer((json_int_t)n->cc.dtype_unknown));
	json_object_set_new(o, "kernel_joined", json_integer((json_int_t)n->cc.joined));
	json_object_set_new(o, "kernel_missed", json_integer((json_int_t)n->hold_expired));
	json_object_set_new(o, "hold_full", json_integer((json_int_t)n->hold_full));
	json_object_set_new(o, "comms", json_integer(n->n_comms));
	json_object_set_new(o, "comm_table_full", json_integer((json_int_t)n->comm_table_full));
	json_object_set_new(o, "init_failed", json_integer((json_int_t)n->init_failed));
	json_object_set_new(o, "split_rank_unknown",
			    json_integer((json_int_t)n->split_rank_unknown));
	json_object_set_new(o, "bad_api", json_integer((json_int_t)n->bad_api));
	json_object_set_new(o, "waits_written", json_integer((json_int_t)n->waits_emitted));
	json_object_set_new(o, "straggler_anomalies", json_integer((json_int_t)n->anomalies));
	json_object_set_new(o, "emit_errors", json_integer((json_int_t)n->emit_errors));
	json_object_set_new(o, "summary_rows_dropped",
			    json_integer((json_int_t)corr_coll_agg__dropped(n->agg)));
	wc = corr_waits__counters(n->waits);
	json_object_set_new(o, "wait_complete", json_integer((json_int_t)wc->complete));
	json_object_set_new(o, "wait_incomplete", json_integer((json_int_t)wc->incomplete));
	json_object_set_new(o, "wait_no_rank", json_integer((json_int_t)wc->no_rank));
	json_object_set_new(o, "slots_per_cpu", json_integer(sc.per_cpu));
	json_object_set_new(o, "slots_written", json_integer((json_int_t)sc.written));
	json_object_set_new(o, "slots_overwritten", json_integer((json_int_t)sc.overwritten));
	json_object_set_new(r, "nccl", o);
}

void nccl_free(struct agent *a)
{
	struct nccl_live *n = a->nccl;

	if (!n)
		return;
	corr_waits__free(n->waits);
	corr_coll_agg__free(n->agg);
	free(n->hold);
	free(n->splits);
	free(n->lr);
	free(n);
	a->nccl = NULL;
}
