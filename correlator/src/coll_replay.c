// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * coll_replay.c - the collectives of recordings (collective.h, "collectives
 * of recordings"): NCCL kernels of a Kineto trace, their arguments from the
 * communication op around their launch, and across the ranks of several
 * traces the wait per collective. The rules are docs/events.md
 * ("Collectives of a recording"), which must match.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "grow.h"
#include "internal.h"

/* a communication op, kept until its file ends */
struct cop {
	uint32_t pid, tid;
	uint64_t ts, end;
	uint32_t corr; /* a kernel's own arguments */
	bool used;
	bool nccl_event;	  /* nccl:* rather than record_param_comms */
	int32_t coll_name;	  /* interned "Collective name", -1 */
	int32_t dtype;		  /* ncclDataType_t, CORR_COLL_NONE */
	bool dtype_given;	  /* a dtype argument was present (maybe not one NCCL has) */
	int32_t pg;		  /* interned process group name, -1 */
	int32_t pg_desc;	  /* interned, -1 */
	int32_t pg_rank, pg_size; /* this trace's rank in the group and its size, -1 */
	int64_t in, out, rank;
	int32_t event; /* interned event name */
};

/* one NCCL kernel: a collective */
struct ccoll {
	struct corr_collective c;
	uint32_t file;
	uint32_t corr;
	int32_t kname;	 /* interned */
	uint64_t launch; /* 0: unknown */
	bool has_launch;
	bool matched_comm; /* its communicator was matched across ranks */
};

struct corr_collr {
	struct corr_collr_opts o;
	struct names *names;
	struct cop *ops; /* the current file's */
	size_t nops, capops;
	struct ccoll *cs; /* every file's */
	size_t ncs, capcs;
	size_t file_first;  /* the current file's first collective */
	uint32_t file;	    /* the current file */
	int32_t *file_rank; /* per file, -1 unknown */
	size_t capfr;
	struct corr_collr_counters n;
};

#define collr_log(cr, lvl, ...) corr_log_forward((cr)->o.log, (cr)->o.log_ctx, lvl, __VA_ARGS__)

struct corr_collr *corr_collr__new(const struct corr_collr_opts *opts)
{
	struct corr_collr *cr;

	if (!opts || !opts->emit) {
		errno = EINVAL;
		return NULL;
	}
	cr = calloc(1, sizeof(*cr));
	if (!cr)
		return NULL;
	memcpy(&cr->o, opts, opts->sz < sizeof(cr->o) ? opts->sz : sizeof(cr->o));
	cr->o.sz = sizeof(cr->o);
	if (!cr->o.match_ns)
		cr->o.match_ns = 1000000;
	if (!cr->o.capacity)
		cr->o.capacity = 1u << 20;
	cr->names = names_new(65536);
	if (!cr->names) {
		free(cr);
		errno = ENOMEM;
		return NULL;
	}
	return cr;
}

void corr_collr__free(struct corr_collr *cr)
{
	if (!cr)
		return;
	names_free(cr->names);
	free(cr->ops);
	free(cr->cs);
	free(cr->file_rank);
	free(cr);
}

const struct corr_collr_counters *corr_collr__counters(const struct corr_collr *cr)
{
	return &cr->n;
}

static int32_t intern(struct corr_collr *cr, const char *s)
{
	return s ? names_intern(cr->names, s, strlen(s)) : -1;
}

static const char *str_of(const struct corr_collr *cr, int32_t id)
{
	return id >= 0 ? names_str(cr->names, id) : NULL;
}

/* "[0, 1, 2, 3]": the position of rank in the list and the list's length */
static void pg_position(const char *list, int64_t rank, int32_t *pos, int32_t *len)
{
	const char *p = list;
	int32_t i = 0;

	*pos = -1;
	*len = 0;
	if (!p)
		return;
	while (*p) {
		char *e;
		long v;

		while (*p && (*p < '0' || *p > '9') && *p != '-')
			p++;
		if (!*p)
			break;
		v = strtol(p, &e, 10);
		if (e == p)
			break;
		if (v == rank && *pos < 0)
			*pos = i;
		i++;
		p = e;
	}
	*len = i;
}

void corr_collr_op(void *ctx, const struct corr_comm_op *op)
{
	struct corr_collr *cr = ctx;
	struct cop *c;
	int32_t pos, len;

	cr->n.ops++;
	if (cr->nops + cr->ncs >= cr->o.capacity) {
		cr->n.dropped++;
		return;
	}
	if (grow_array((void **)&cr->ops, &cr->capops, cr->nops, sizeof(*cr->ops), 256)) {
		cr->n.dropped++;
		return;
	}
	c = &cr->ops[cr->nops++];
	*c = (struct cop){
	    .pid = op->pid,
	    .tid = op->tid,
	    .ts = op->ts_ns,
	    .end = op->ts_ns + op->dur_ns,
	    .corr = op->corr_id,
	    .nccl_event = op->event && !strncmp(op->event, "nccl:", 5),
	    .coll_name = intern(cr, op->coll),
	    .dtype =
		op->dtype ? corr_nccl_type_parse(op->dtype, strlen(op->dtype)) : CORR_COLL_NONE,
	    .dtype_given = op->dtype != NULL,
	    .pg = intern(cr, op->pg_name),
	    .pg_desc = intern(cr, op->pg_desc),
	    .pg_rank = -1,
	    .pg_size =
		op->group_size > 0 && op->group_size <= INT32_MAX ? (int32_t)op->group_size : -1,
	    .in = op->in_nelems,
	    .out = op->out_nelems,
	    .rank = op->rank,
	    .event = intern(cr, op->event),
	};
	/* the rank in the group: "Rank" is the global one, placed in "Process Group Ranks" */
	pg_position(op->pg_ranks, op->rank, &pos, &len);
	if (len > 0) {
		c->pg_rank = pos;
		c->pg_size = len;
	}
}

static bool is_nccl_kernel(const char *name)
{
	struct corr_collective scratch;

	return corr_coll_from_kernel(name, &scratch);
}

int corr_collr__kernel(struct corr_collr *cr, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct ccoll *k;

	if (g->kind != CORR_KIND_KERNEL || !is_nccl_kernel(g->name))
		return 0;
	if (cr->nops + cr->ncs >= cr->o.capacity) {
		cr->n.dropped++;
		return 0;
	}
	if (grow_array((void **)&cr->cs, &cr->capcs, cr->ncs, sizeof(*cr->cs), 256)) {
		cr->n.dropped++;
		return -ENOMEM;
	}
	k = &cr->cs[cr->ncs++];
	memset(k, 0, sizeof(*k));
	k->c.pid = l ? l->pid : 0;
	k->c.tid = l ? l->tid : 0;
	k->c.rank = CORR_COLL_NONE;
	k->c.datatype = CORR_COLL_NONE;
	k->c.redop = CORR_COLL_NONE;
	k->c.root = CORR_COLL_NONE;
	k->c.stream = g->stream;
	k->c.device = g->device;
	k->c.gpu_start_ns = g->start_ns;
	k->c.gpu_end_ns = g->end_ns;
	k->c.enqueue_ns = l ? l->ts_ns : 0;
	k->file = cr->file;
	k->corr = g->corr_id;
	k->kname = intern(cr, g->name);
	k->launch = l ? l->ts_ns : 0;
	k->has_launch = l != NULL;
	return 1;
}

static int cmp_op(const void *a, const void *b)
{
	const struct cop *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	return (x->ts > y->ts) - (x->ts < y->ts);
}

/* the ops around one kernel's launch, each the innermost of its kind */
struct kops {
	struct cop *args;  /* with a collective name (record_param_comms of newer PyTorch) */
	struct cop *nccl;  /* an nccl:<collective> event: the op in its name */
	struct cop *sized; /* with an element count or a datatype */
};

/*
 * The ops of a kernel: the arguments its own event carried, else those on
 * the launching thread whose span holds the launch (record_param_comms sits
 * inside nccl:*; both may hold parts).
 */
#define ENCLOSE_LOOKBACK 64
static void find_ops(struct corr_collr *cr, const struct ccoll *k, struct kops *out)
{
	size_t lo = 0, hi = cr->nops;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < cr->nops; i++)
		if (cr->ops[i].corr && cr->ops[i].corr == k->corr) {
			if (cr->ops[i].coll_name >= 0)
				out->args = &cr->ops[i];
			out->sized = &cr->ops[i]; /* its sizes and group, whatever it has */
			return;
		}
	if (!k->has_launch)
		return;
	/* the first op after (pid, tid, launch) in the sorted ops */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct cop *m = &cr->ops[mid];
		bool before = m->pid != k->c.pid   ? m->pid < k->c.pid
			      : m->tid != k->c.tid ? m->tid < k->c.tid
						   : m->ts <= k->launch;

		if (before)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t n = 0; lo > 0 && n < ENCLOSE_LOOKBACK; n++) {
		struct cop *o = &cr->ops[--lo];

		if (o->pid != k->c.pid || o->tid != k->c.tid)
			break;
		if (o->corr || o->end < k->launch)
			continue;
		if (!out->args && o->coll_name >= 0)
			out->args = o;
		if (!out->nccl && o->nccl_event)
			out->nccl = o;
		if (!out->sized && (o->in >= 0 || o->dtype_given))
			out->sized = o;
	}
}

/* op, count, datatype, group and ranks of a collective from its ops and its kernel's name */
static void fill(struct corr_collr *cr, struct ccoll *k, const struct kops *ops, int32_t rank,
		 int32_t world)
{
	struct corr_collective *c = &k->c;
	const struct cop *o = ops->args ? ops->args : ops->sized, *pg = NULL;
	const char *kn = str_of(cr, k->kname);
	char ident[300];
	enum corr_coll_op op_arg = CORR_COLL_UNKNOWN;

	c->kernel = kn;
	corr_coll_from_kernel(kn, c);
	if (ops->args) {
		const char *cn = str_of(cr, ops->args->coll_name);

		if (cn)
			op_arg = corr_coll_op_parse(cn, strlen(cn));
	}
	if (op_arg == CORR_COLL_UNKNOWN && ops->nccl) {
		const char *ev = str_of(cr, ops->nccl->event); /* NULL: the name table was full */

		if (ev && strlen(ev) >= 5)
			op_arg = corr_coll_op_parse(ev + 5, strlen(ev + 5));
	}
	if (op_arg != CORR_COLL_UNKNOWN) {
		c->op = op_arg;
		c->flags &= ~CORR_COLL_F_OP_FROM_KERNEL;
	}
	if (o && o->dtype_given)
		c->datatype = o->dtype;
	/* NCCL's count: per rank for all-gather, the result's for reduce-scatter */
	c->flags |= CORR_COLL_F_COUNT_UNKNOWN;
	if (o) {
		int64_t n = c->op == CORR_COLL_REDUCESCATTER ? o->out : o->in;

		if (n >= 0) {
			c->count = (uint64_t)n;
			c->flags &= ~CORR_COLL_F_COUNT_UNKNOWN;
		}
	}
	if (ops->args && ops->args->pg >= 0)
		pg = ops->args;
	else if (ops->sized && ops->sized->pg >= 0)
		pg = ops->sized;
	/* the communicator: the process group, else the stream (one communicator per stream) */
	if (pg) {
		snprintf(ident, sizeof(ident), "pg:%s", str_of(cr, pg->pg));
		c->rank = pg->pg_rank >= 0 ? pg->pg_rank : rank;
		c->nranks = pg->pg_size > 0 ? pg->pg_size : world;
	} else {
		snprintf(ident, sizeof(ident), "stream:%llu", (unsigned long long)k->c.stream);
		c->flags |= CORR_COLL_F_COMM_UNKNOWN;
		c->rank = rank;
		c->nranks = world > 0 ? world : 0;
	}
	if (c->rank < 0)
		c->rank = CORR_COLL_NONE;
	c->comm_hash = corr_coll_hash(ident, strlen(ident));
}

static int cmp_enqueue(const void *a, const void *b)
{
	const struct ccoll *x = a, *y = b;
	uint64_t tx = x->has_launch ? x->launch : x->c.gpu_start_ns;
	uint64_t ty = y->has_launch ? y->launch : y->c.gpu_start_ns;

	if (x->c.comm_hash != y->c.comm_hash)
		return x->c.comm_hash < y->c.comm_hash ? -1 : 1;
	if (tx != ty)
		return tx < ty ? -1 : 1;
	return (x->c.gpu_start_ns > y->c.gpu_start_ns) - (x->c.gpu_start_ns < y->c.gpu_start_ns);
}

int corr_collr__end_file(struct corr_collr *cr, int32_t rank, int32_t world)
{
	struct ccoll *fc = cr->cs ? cr->cs + cr->file_first : NULL;
	size_t nf = cr->ncs - cr->file_first;
	int err = 0;

	if (grow_array((void **)&cr->file_rank, &cr->capfr, cr->file, sizeof(*cr->file_rank), 8))
		return -ENOMEM;
	for (uint32_t f = 0; f < cr->file && rank >= 0; f++)
		if (cr->file_rank[f] == rank) {
			collr_log(
			    cr, CORR_LOG_ERROR,
			    "collectives: file %u has rank %d as file %u has: its collectives "
			    "are written, not matched across ranks",
			    cr->file + 1, rank, f + 1);
			rank = -1;
			err = -EEXIST;
		}
	cr->file_rank[cr->file] = rank;
	if (cr->nops) /* qsort() of NULL is undefined, even of nothing */
		qsort(cr->ops, cr->nops, sizeof(*cr->ops), cmp_op);
	for (size_t i = 0; i < nf; i++) {
		struct kops ops;

		find_ops(cr, &fc[i], &ops);
		if (ops.args)
			ops.args->used = true;
		if (ops.nccl)
			ops.nccl->used = true;
		if (ops.sized)
			ops.sized->used = true;
		fill(cr, &fc[i], &ops, rank, world);
	}
	for (size_t i = 0; i < cr->nops; i++)
		cr->n.ops_unused += !cr->ops[i].used;
	/* seq: per communicator, in enqueue order */
	if (nf)
		qsort(fc, nf, sizeof(*fc), cmp_enqueue);
	for (size_t i = 0; i < nf; i++)
		fc[i].c.seq =
		    i && fc[i - 1].c.comm_hash == fc[i].c.comm_hash ? fc[i - 1].c.seq + 1 : 0;
	cr->nops = 0;
	cr->file_first = cr->ncs;
	cr->file++;
	return err;
}

/* several ranks: a communicator's kernels matched across files by their end */
struct mstate {
	struct corr_collr *cr;
	struct corr_waits *w;
	size_t *idx[CORR_WAIT_MAX_RANKS]; /* per file: its collectives on the comm, by end */
	size_t cnt[CORR_WAIT_MAX_RANKS], pos[CORR_WAIT_MAX_RANKS];
};

static int cmp_end(const void *a, const void *b, void *ctx)
{
	const struct corr_collr *cr = ctx;
	const struct ccoll *x = &cr->cs[*(const size_t *)a], *y = &cr->cs[*(const size_t *)b];

	return (x->c.gpu_end_ns > y->c.gpu_end_ns) - (x->c.gpu_end_ns < y->c.gpu_end_ns);
}

static void on_wait(void *ctx, const struct corr_wait *w)
{
	struct corr_collr *cr = ctx;

	cr->n.waits++;
	if (cr->o.wait)
		cr->o.wait(cr->o.wait_ctx, w);
}

/*
 * One communicator on two or more ranks: the same collective ends on every
 * rank within a few µs (none can finish before the last one arrived), so
 * the kernels whose ends lie within match_ns of the earliest end still
 * unmatched are one collective; seq numbers those groups. A kernel with no
 * partner (a sampled trace, a rank that never called) is a group of its own.
 */
static void match_comm(struct mstate *m, uint64_t comm, uint32_t nfiles)
{
	struct corr_collr *cr = m->cr;
	int32_t ranks[CORR_WAIT_MAX_RANKS];
	uint32_t nr = 0;
	uint64_t seq = 0;

	for (uint32_t f = 0; f < nfiles; f++) {
		m->cnt[f] = m->pos[f] = 0;
		if (cr->file_rank[f] < 0)
			continue;
		for (size_t i = 0; i < cr->ncs; i++) {
			const struct ccoll *k = &cr->cs[i];

			if (k->file == f && k->c.comm_hash == comm && k->c.rank >= 0)
				m->idx[f][m->cnt[f]++] = i;
		}
		if (m->cnt[f])
			ranks[nr++] = cr->cs[m->idx[f][0]].c.rank;
		if (m->cnt[f])
			qsort_r(m->idx[f], m->cnt[f], sizeof(size_t), cmp_end, cr);
	}
	if (nr < 2)
		return; /* on one rank only: nothing to compare, per-rank seq stays */
	corr_waits__expect(m->w, comm, ranks, nr);
	for (;;) {
		uint64_t e0 = UINT64_MAX;
		uint32_t first = UINT32_MAX, got = 0;

		for (uint32_t f = 0; f < nfiles; f++)
			if (m->pos[f] < m->cnt[f] &&
			    cr->cs[m->idx[f][m->pos[f]]].c.gpu_end_ns < e0) {
				e0 = cr->cs[m->idx[f][m->pos[f]]].c.gpu_end_ns;
				first = f;
			}
		if (first == UINT32_MAX)
			break;
		for (uint32_t f = 0; f < nfiles; f++) {
			struct ccoll *k;

			if (m->pos[f] >= m->cnt[f])
				continue;
			k = &cr->cs[m->idx[f][m->pos[f]]];
			if (f != first && k->c.gpu_end_ns - e0 > cr->o.match_ns)
				continue;
			k->c.seq = seq;
			k->matched_comm = true;
			m->pos[f]++;
			got++;
		}
		if (got == nr)
			cr->n.matched++;
		else
			cr->n.unmatched++;
		seq++;
	}
}

static int cmp_file_enqueue(const void *a, const void *b)
{
	const struct ccoll *x = a, *y = b;

	uint64_t tx = x->has_launch ? x->launch : x->c.gpu_start_ns;
	uint64_t ty = y->has_launch ? y->launch : y->c.gpu_start_ns;

	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	if (tx != ty)
		return tx < ty ? -1 : 1;
	return (x->c.gpu_start_ns > y->c.gpu_start_ns) - (x->c.gpu_start_ns < y->c.gpu_start_ns);
}

static int cmp_comm_seq(const void *a, const void *b)
{
	const struct ccoll *x = a, *y = b;

	if (x->matched_comm != y->matched_comm)
		return x->matched_comm ? -1 : 1;
	if (x->c.comm_hash != y->c.comm_hash)
		return x->c.comm_hash < y->c.comm_hash ? -1 : 1;
	if (x->c.seq != y->c.seq)
		return x->c.seq < y->c.seq ? -1 : 1;
	return (x->file > y->file) - (x->file < y->file);
}

/* several files with their ranks: seq across ranks, the wait tracker set up */
static int match(struct corr_collr *cr, struct mstate *m, uint32_t nfiles)
{
	struct corr_waits_opts wo = {
	    .sz = sizeof(wo), .emit = on_wait, .emit_ctx = cr, .capacity = 4};
	uint64_t *done = calloc(cr->ncs + 1, sizeof(*done));
	size_t nd = 0;
	int err = 0;

	m->cr = cr;
	m->w = corr_waits__new(&wo);
	for (uint32_t f = 0; f < nfiles; f++) {
		size_t n = 0;

		for (size_t i = 0; i < cr->ncs; i++)
			n += cr->cs[i].file == f;
		m->idx[f] = malloc((n + 1) * sizeof(size_t));
		if (!m->idx[f])
			err = -ENOMEM;
	}
	if (!m->w || !done)
		err = -ENOMEM;
	/* each communicator once */
	for (size_t i = 0; i < cr->ncs && !err; i++) {
		bool seen = false;

		for (size_t j = 0; j < nd && !seen; j++)
			seen = done[j] == cr->cs[i].c.comm_hash;
		if (seen)
			continue;
		done[nd++] = cr->cs[i].c.comm_hash;
		match_comm(m, cr->cs[i].c.comm_hash, nfiles);
	}
	for (uint32_t f = 0; f < nfiles; f++)
		free(m->idx[f]);
	free(done);
	return err;
}

/* the matched collectives to the tracker, one (comm, seq) at a time */
static void waits(struct corr_collr *cr, struct mstate *m)
{
	if (cr->ncs)
		qsort(cr->cs, cr->ncs, sizeof(*cr->cs), cmp_comm_seq);
	for (size_t i = 0; i < cr->ncs && cr->cs[i].matched_comm; i++) {
		corr_waits__add(m->w, &cr->cs[i].c);
		if (i + 1 == cr->ncs || !cr->cs[i + 1].matched_comm ||
		    cr->cs[i + 1].c.comm_hash != cr->cs[i].c.comm_hash ||
		    cr->cs[i + 1].c.seq != cr->cs[i].c.seq)
			corr_waits__flush(m->w); /* its ranks are all in: the rest never come */
	}
}

int corr_collr__finish(struct corr_collr *cr)
{
	struct mstate m = {0};
	uint32_t nfiles, ranked = 0;
	struct corr_coll_counters cc = {0};
	int err = 0;

	if (cr->ncs > cr->file_first || cr->nops)
		corr_collr__end_file(cr, -1, 0); /* a file its caller did not end */
	nfiles = cr->file;
	for (uint32_t f = 0; f < nfiles; f++)
		ranked += cr->file_rank[f] >= 0;
	if (ranked >= 2 && nfiles > CORR_WAIT_MAX_RANKS) {
		collr_log(cr, CORR_LOG_ERROR, "collectives: %u files, at most %d are matched",
			  nfiles, CORR_WAIT_MAX_RANKS);
		ranked = 0;
		err = -E2BIG;
	}
	if (ranked >= 2)
		err = match(cr, &m, nfiles);
	/* every collective, per file in enqueue order; then the waits */
	if (cr->ncs)
		qsort(cr->cs, cr->ncs, sizeof(*cr->cs), cmp_file_enqueue);
	for (size_t i = 0; i < cr->ncs; i++) {
		struct ccoll *k = &cr->cs[i];

		k->c.kernel = str_of(cr, k->kname);
		corr_coll_check(&k->c, &cc);
		cr->n.unjoined += !k->has_launch;
		cr->n.count_unknown += !!(k->c.flags & CORR_COLL_F_COUNT_UNKNOWN);
		cr->o.emit(cr->o.emit_ctx, &k->c, k->file);
	}
	cr->n.collectives += cc.collectives;
	cr->n.comm_unknown += cc.comm_unknown;
	cr->n.dtype_unknown += cc.dtype_unknown;
	cr->n.op_unknown += cc.op_unknown;
	if (m.w && !err)
		waits(cr, &m);
	cr->ncs = cr->file_first = 0;
	corr_waits__free(m.w);
	return err;
}
