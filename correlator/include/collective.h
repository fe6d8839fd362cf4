/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * collective.h - NCCL collectives (issue 21): the `collective` record, the
 * cross-rank wait tracker (`collective_wait` records) and the per-interval
 * aggregate (`collective_summary` records). Filled live by the NCCL uprobe
 * source (agent/sources/) and from recordings by --replay; the fields and
 * their meaning are docs/events.md ("Collectives"), which must match
 * correlator/src/collective.c.
 *
 * NCCL constants (datatypes, reduction ops) are those of nccl.h of NCCL
 * 2.28.9 (/usr/local/cuda/include/nccl.h): ncclDataType_t ncclInt8 = 0 ...
 * ncclFloat8e5m2 = 11, ncclNumTypes = 12; ncclRedOp_t ncclSum = 0, ncclProd
 * = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 (values from 5
 * on are ops made by ncclRedOpCreatePreMulSum).
 *
 * Threading and errors as correlator.h: one owning thread per object,
 * callbacks run synchronously inside the call that completed the work,
 * functions return 0 or -errno, constructors NULL with errno set, nothing
 * prints. Pointers handed to callbacks are valid during the callback only.
 */
#ifndef INFERTRACE_COLLECTIVE_H
#define INFERTRACE_COLLECTIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "correlator.h"

#ifdef __cplusplus
extern "C" {
#endif

enum corr_coll_op {
	CORR_COLL_UNKNOWN = 0,
	CORR_COLL_ALLREDUCE,
	CORR_COLL_ALLGATHER,
	CORR_COLL_REDUCESCATTER,
	CORR_COLL_BROADCAST,
	CORR_COLL_REDUCE,
	CORR_COLL_ALLTOALL,
	CORR_COLL_SEND,
	CORR_COLL_RECV,
	CORR_COLL_SENDRECV, /* a fused send/recv kernel (ncclDevKernel_SendRecv): replay only */
	CORR_COLL_OP_COUNT,
};

/* ncclDataType_t of NCCL 2.28 (nccl.h): ncclInt8 = 0 ... ncclFloat8e5m2 = 11 */
#define CORR_NCCL_NUM_TYPES 12
/* ncclRedOp_t: ncclSum = 0 ... ncclAvg = 4; ncclNumOps = 5 and above are user-made */
#define CORR_NCCL_NUM_OPS 5

/* "not known" for the signed fields below */
#define CORR_COLL_NONE (-1)

/* flags of struct corr_collective */
#define CORR_COLL_F_COMM_UNKNOWN (1u << 0)   /* the communicator was never seen initialised */
#define CORR_COLL_F_DTYPE_UNKNOWN (1u << 1)  /* datatype outside the table: bytes 0 */
#define CORR_COLL_F_OP_FROM_KERNEL (1u << 2) /* op, redop, datatype read from the kernel name */
#define CORR_COLL_F_COUNT_UNKNOWN (1u << 3)  /* no element count (a kernel without its call) */

/* one collective call (one per rank and call) */
struct corr_collective {
	uint32_t pid, tid;  /* the calling thread */
	uint64_t comm_hash; /* corr_coll_hash() of the ncclUniqueId (replay: of the group) */
	int32_t rank;	    /* rank in the communicator; CORR_COLL_NONE unknown */
	int32_t nranks;	    /* ranks in the communicator; 0 unknown */
	uint64_t seq;	    /* n-th collective on this communicator (on this rank), from 0 */
	enum corr_coll_op op;
	uint64_t count;	     /* elements (NCCL's count argument) */
	int32_t datatype;    /* ncclDataType_t as passed; CORR_COLL_NONE unknown */
	uint64_t bytes;	     /* count * element size; 0 when the datatype is not in the table */
	int32_t redop;	     /* ncclRedOp_t; CORR_COLL_NONE for ops without one */
	int32_t root;	     /* broadcast/reduce root, send/recv peer; CORR_COLL_NONE otherwise */
	uint64_t stream;     /* cudaStream_t as passed (replay: the CUDA stream id) */
	uint64_t enqueue_ns; /* the call's entry (CLOCK_MONOTONIC, or the recording's clock) */
	uint64_t group_id;   /* ncclGroupStart/End nesting it was in; 0 outside a group */
	uint64_t gpu_start_ns, gpu_end_ns; /* its NCCL kernel when joined; 0 otherwise */
	const char *kernel;		   /* that kernel's name when joined; NULL otherwise */
	const char *algo;  /* from the kernel name ("RING", "TREE", ...); NULL unknown */
	const char *proto; /* from the kernel name ("LL", "LL128", "SIMPLE"); NULL unknown */
	uint32_t device;   /* CUDA device of the kernel (replay); 0 unknown */
	uint32_t flags;	   /* CORR_COLL_F_* */
};

/* bad or partial input seen by corr_coll_check(); counters only grow */
struct corr_coll_counters {
	uint64_t collectives;
	uint64_t dtype_unknown; /* datatype outside the table (recorded, bytes 0) */
	uint64_t comm_unknown;	/* communicator never seen initialised (recorded) */
	uint64_t op_unknown;
	uint64_t joined; /* with their kernel */
};

/* names: "allreduce", "allgather", ... "unknown" */
const char *corr_coll_op_name(enum corr_coll_op op);
/*
 * an op from a name as recorders write it, case and '_' ignored:
 * "AllReduce" (kernel names), "allreduce", "all_reduce", "_allgather_base",
 * "reduce_scatter_tensor", "all_to_all", "alltoall_base", "send", "recv",
 * "SendRecv"; CORR_COLL_UNKNOWN otherwise
 */
enum corr_coll_op corr_coll_op_parse(const char *s, size_t n);
/* ncclDataType_t: name ("bf16", "float32", ...) or NULL; element bytes or 0 */
const char *corr_nccl_type_name(int32_t dt);
uint32_t corr_nccl_type_size(int32_t dt);
/*
 * a datatype from a recorder's name: NCCL's kernel names ("bf16", "half",
 * "float", "int8_t", "f8e4m3"), PyTorch's ("Float", "BFloat16", "Half",
 * "Long", "Int", "Byte", "Char", "Double"); CORR_COLL_NONE otherwise
 */
int32_t corr_nccl_type_parse(const char *s, size_t n);
/* ncclRedOp_t: "sum", "prod", "max", "min", "avg", "premulsum" (user-made), NULL for none */
const char *corr_nccl_redop_name(int32_t op);
/* "Sum", "sum", "Prod", ...: the ncclRedOp_t, else CORR_COLL_NONE */
int32_t corr_nccl_redop_parse(const char *s, size_t n);

/* FNV-1a 64 of a byte string: the communicator hash (an ncclUniqueId's 128 bytes live) */
uint64_t corr_coll_hash(const void *p, size_t n);

/*
 * Before a collective is written: bytes from count and the datatype table
 * (CORR_COLL_F_DTYPE_UNKNOWN when not in it), and the counters (n may be
 * NULL). Nothing is ever refused: a bad collective is written with what is
 * known.
 */
void corr_coll_check(struct corr_collective *c, struct corr_coll_counters *n);

/*
 * One `collective` record (docs/events.md) as one JSON object without
 * newline; the length, or -ENOSPC. ts_ns = enqueue_ns (gpu_start_ns when
 * the enqueue is unknown).
 */
int corr_coll_to_json(char *buf, size_t sz, const struct corr_json_common *cm,
		      const struct corr_collective *c);

/* ------------------------------------------------------- cross-rank wait -- */

/*
 * The n-th collective of a communicator is the same operation on every
 * rank. Fed every local rank's collectives, the tracker waits until all
 * expected ranks of (comm_hash, seq) arrived, then emits one result:
 * who came last, how late, and how long each other rank waited for it.
 * Arrival = kernel start when known (gpu_start_ns), else the enqueue.
 * Expected ranks: those declared with corr_waits__expect(), else 0..nranks-1
 * (all ranks local) when nranks <= CORR_WAIT_MAX_RANKS; without either an
 * entry is emitted only at timeout or flush. Memory is bounded: at most
 * `capacity` pending entries, the oldest evicted (emitted incomplete,
 * counted) to make room.
 */
#define CORR_WAIT_MAX_RANKS 64

enum corr_wait_end {
	CORR_WAIT_COMPLETE = 0, /* every expected rank arrived */
	CORR_WAIT_TIMEOUT,	/* corr_waits__advance(): the first arrival is older than timeout */
	CORR_WAIT_FLUSH,	/* corr_waits__flush(): end of input */
	CORR_WAIT_EVICTED,	/* pushed out by capacity */
};

struct corr_wait_rank {
	int32_t rank;
	uint32_t pid, tid;
	uint64_t arrival_ns;
	uint64_t wait_ns; /* last arrival - this arrival: 0 for the last */
	bool from_kernel; /* arrival is the kernel start, else the enqueue */
};

struct corr_wait {
	uint64_t comm_hash;
	uint64_t seq;
	enum corr_coll_op op;
	int32_t nranks; /* the communicator's size as the collectives said */
	enum corr_wait_end end;
	uint32_t n_expected; /* 0 when not known (neither declared nor nranks <= max) */
	uint32_t n_arrived;
	const struct corr_wait_rank *ranks; /* n_arrived, in arrival order */
	uint32_t n_missing;		    /* expected ranks that never came */
	const int32_t *missing;		    /* their ranks, ascending */
	int32_t last_rank; /* the last to arrive; CORR_COLL_NONE when none arrived */
	uint64_t last_arrival_ns;
	uint64_t late_ns;	/* last arrival - the one before it (0 with one arrival) */
	uint64_t wait_max_ns;	/* the longest wait (first arrival's) */
	uint64_t wait_total_ns; /* every rank's wait added */
	bool op_mismatch;	/* ranks disagreed on the op: not the same collective */
};

typedef void (*corr_wait_fn)(void *ctx, const struct corr_wait *w);

struct corr_waits_opts {
	size_t sz;		/* sizeof(struct corr_waits_opts) */
	uint32_t capacity;	/* pending (comm, seq) entries; 0: 1024 */
	uint32_t comm_capacity; /* communicators with declared ranks; 0: 256 */
	uint64_t timeout_ns;	/* advance() emits entries older than this; 0: 10 s */
	corr_wait_fn emit;
	void *emit_ctx;
};

struct corr_waits_counters {
	uint64_t arrivals;
	uint64_t complete;	 /* results with every expected rank */
	uint64_t incomplete;	 /* results with ranks missing (timeout, flush, eviction) */
	uint64_t evicted;	 /* of which pushed out by capacity */
	uint64_t duplicates;	 /* the same rank twice for one (comm, seq): ignored */
	uint64_t no_rank;	 /* collectives without a rank: not tracked */
	uint64_t too_many_ranks; /* arrivals beyond CORR_WAIT_MAX_RANKS: ignored */
	uint64_t comms_dropped;	 /* corr_waits__expect() beyond comm_capacity */
};

struct corr_waits;
struct corr_waits *corr_waits__new(const struct corr_waits_opts *opts);
void corr_waits__free(struct corr_waits *w); /* accepts NULL; does not flush */
/*
 * The ranks of comm_hash that this tracker sees (e.g. those initialised on
 * this node, or the files of a replay): n <= CORR_WAIT_MAX_RANKS.
 */
int corr_waits__expect(struct corr_waits *w, uint64_t comm_hash, const int32_t *ranks, uint32_t n);
/* one rank's collective; may complete and emit its entry */
int corr_waits__add(struct corr_waits *w, const struct corr_collective *c);
/* emit (CORR_WAIT_TIMEOUT) entries whose first arrival is before now_ns - timeout */
int corr_waits__advance(struct corr_waits *w, uint64_t now_ns);
/* emit every pending entry (CORR_WAIT_FLUSH), oldest first */
int corr_waits__flush(struct corr_waits *w);
const struct corr_waits_counters *corr_waits__counters(const struct corr_waits *w);
uint32_t corr_waits__pending(const struct corr_waits *w);

/*
 * One `collective_wait` record (docs/events.md): pid/tid/instance of the
 * last rank to arrive (cm names its instance), ts_ns = the first arrival.
 */
int corr_wait_to_json(char *buf, size_t sz, const struct corr_json_common *cm,
		      const struct corr_wait *w);
/*
 * The evidence sentence of a `communication` / `straggler` anomaly:
 * "rank 3 arrived 12.40 ms late at allreduce #4812 (comm 9f3a12c4…); ranks
 * 0-2 spent 12.10 ms waiting" (the total of their waits). 0 or -ENOSPC.
 */
int corr_wait_evidence(char *buf, size_t sz, const struct corr_wait *w);

/* ------------------------------------------------- per-interval summary -- */

/*
 * Sentinel mode: per (pid, communicator, op) and interval: calls, bytes,
 * GPU time in NCCL kernels, time waiting for other ranks. Bounded: at most
 * `capacity` rows per interval, further keys counted in dropped.
 */
struct corr_coll_row {
	uint32_t pid;
	uint64_t comm_hash;
	enum corr_coll_op op;
	int32_t rank, nranks;
	uint64_t calls;
	uint64_t bytes;
	uint64_t joined;  /* calls with their kernel */
	uint64_t gpu_ns;  /* total kernel time of those */
	uint64_t waits;	  /* wait results this rank took part in */
	uint64_t wait_ns; /* its waits added */
	uint64_t last;	  /* times it was the last to arrive */
	uint64_t late_ns; /* ... and how late, added */
};

typedef void (*corr_coll_row_fn)(void *ctx, const struct corr_coll_row *r);

struct corr_coll_agg;
struct corr_coll_agg *corr_coll_agg__new(uint32_t capacity); /* 0: 256 */
void corr_coll_agg__free(struct corr_coll_agg *a);
int corr_coll_agg__add(struct corr_coll_agg *a, const struct corr_collective *c);
/* each arrived rank's wait goes to its (pid, comm, op) row */
int corr_coll_agg__add_wait(struct corr_coll_agg *a, const struct corr_wait *w);
/* one callback per row, in first-seen order, then forget them */
int corr_coll_agg__cut(struct corr_coll_agg *a, corr_coll_row_fn fn, void *ctx);
uint64_t corr_coll_agg__dropped(const struct corr_coll_agg *a);

/*
 * One `collective_summary` record (docs/events.md) for the interval
 * [t0_ns, t1_ns): ts_ns = t0_ns. The length or -ENOSPC.
 */
int corr_coll_row_to_json(char *buf, size_t sz, const struct corr_json_common *cm,
			  const struct corr_coll_row *r, uint64_t t0_ns, uint64_t t1_ns);

/* ------------------------------------------- collectives of recordings -- */

/*
 * A communication op of a Kineto trace: a cpu_op `record_param_comms` or
 * `nccl:<collective>` event, or the same arguments carried by a kernel
 * event (corr_id set). Strings are NULL when absent, numbers -1.
 */
struct corr_comm_op {
	uint32_t pid, tid; /* the calling thread (0 for a kernel's arguments) */
	uint64_t ts_ns, dur_ns;
	uint32_t corr_id;     /* non-zero: the arguments of the kernel of this correlation id */
	const char *event;    /* the event's name: "record_param_comms", "nccl:all_reduce", ... */
	const char *coll;     /* "Collective name", e.g. "allreduce", "_allgather_base", "wait" */
	const char *dtype;    /* "dtype", PyTorch's name, e.g. "BFloat16" (else "Input type") */
	const char *pg_name;  /* "Process Group Name" (or "Process Group ID") */
	const char *pg_desc;  /* "Process Group Description" */
	const char *pg_ranks; /* "Process Group Ranks", e.g. "[0, 1, 2, 3]" */
	int64_t group_size;   /* "Group size" */
	/* "In msg nelems" (else the first input's elements, "Input Dims"), "Out msg nelems" */
	int64_t in_nelems, out_nelems;
	int64_t rank; /* "Rank" (global) */
};

/*
 * An NCCL kernel name into c: op, redop, datatype, algorithm and protocol,
 * CORR_COLL_F_OP_FROM_KERNEL set. NCCL >= 2.19 names
 * ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ncclDevKernel_SendRecv"),
 * older ones ("ncclKernel_AllReduce_RING_LL_Sum_float(...)"), Itanium-mangled
 * or not. A non-reducing collective (broadcast, all-gather, send/recv)
 * carries NCCL's placeholder Sum/int8 in the old names: not taken. The
 * algorithm and protocol strings are static. False when name is not an
 * NCCL kernel; an NCCL kernel whose collective is not in the table (a newer
 * NCCL) leaves op CORR_COLL_UNKNOWN.
 */
bool corr_coll_from_kernel(const char *name, struct corr_collective *c);

/*
 * The collectives of one or more recordings (--replay): NCCL kernels joined
 * to their launch, their arguments from the communication op that encloses
 * the launch on its thread (or that the kernel event carries), and with
 * several files (ranks of one job) the cross-rank wait per collective.
 * Feed one file at a time: its comm ops (corr_collr_op, as the replay's
 * corr_replay_opts.comm), its joined GPU records (corr_collr__kernel, from
 * the correlator's emit), then corr_collr__end_file(); corr_collr__finish()
 * emits every collective, then the waits. Rules: docs/events.md,
 * "Collectives of a recording".
 */
struct corr_collr_opts {
	size_t sz;
	uint64_t
	    match_ns; /* several files: kernels ending within this are one collective; 0: 1 ms */
	uint32_t capacity; /* collectives and ops held, all files; 0: 1 << 20; more counted */
	/* every collective; file = 0-based index of the file it came from */
	void (*emit)(void *ctx, const struct corr_collective *c, uint32_t file);
	void *emit_ctx;
	corr_wait_fn wait; /* may be NULL; several files only */
	void *wait_ctx;
	corr_log_fn log; /* may be NULL */
	void *log_ctx;
};

struct corr_collr_counters {
	uint64_t ops;		/* communication ops read */
	uint64_t ops_unused;	/* ... that enclosed no NCCL kernel ("wait", barriers, ...) */
	uint64_t collectives;	/* NCCL kernels: collectives emitted */
	uint64_t unjoined;	/* ... whose launch was unknown (pid 0) */
	uint64_t comm_unknown;	/* ... without a process group: comm from the stream */
	uint64_t dtype_unknown; /* ... without a datatype NCCL has */
	uint64_t count_unknown; /* ... without an element count */
	uint64_t dropped;	/* beyond capacity: not emitted */
	uint64_t matched;	/* several files: collectives seen on every file's rank */
	uint64_t unmatched;	/* ... seen on some only */
	uint64_t waits;		/* wait results emitted */
	uint64_t op_unknown;	/* NCCL kernels whose collective neither name nor op told */
};

struct corr_collr;
struct corr_collr *corr_collr__new(const struct corr_collr_opts *opts);
void corr_collr__free(struct corr_collr *cr);
/* a corr_comm_fn: ctx is the struct corr_collr */
void corr_collr_op(void *ctx, const struct corr_comm_op *op);
/* a joined (or unmatched) GPU record; NCCL kernels are kept, the rest ignored */
int corr_collr__kernel(struct corr_collr *cr, const struct corr_gpu *g,
		       const struct corr_launch *l);
/*
 * The current file ends: its rank and world size (Kineto's distributedInfo;
 * rank < 0: unknown). -EEXIST when another file had that rank (its
 * collectives are kept, not matched).
 */
int corr_collr__end_file(struct corr_collr *cr, int32_t rank, int32_t world);
int corr_collr__finish(struct corr_collr *cr);
const struct corr_collr_counters *corr_collr__counters(const struct corr_collr *cr);

#ifdef __cplusplus
}
#endif

#endif /* INFERTRACE_COLLECTIVE_H */
