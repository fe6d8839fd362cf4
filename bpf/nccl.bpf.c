// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nccl.bpf.c - uprobes on NCCL's collectives, point-to-point calls, groups
 * and communicator life (agent/sources/nccl.c attaches them per libnccl
 * file, as uprobes.c does for libcudart).
 *
 * Signatures: NCCL 2.28's nccl.h (/usr/local/cuda/include/nccl.h). Argument
 * positions follow the x86-64 SysV ABI: six integer registers, then the
 * stack above the return address (sp + 8, ...). ncclUniqueId (128 bytes)
 * passed by value is a MEMORY-class argument: it goes on the stack and takes
 * no register, so ncclCommInitRank's rank is the third register.
 *
 * Every call of a traced thread is one EV_NCCL_CALL, in both modes: the
 * agent needs each arrival for the cross-rank wait. Deep mode (the agent's,
 * or the process's deep-dive) puts it on rb_cuda. Sentinel mode reads no
 * argument from memory (the stream of the 7- and 8-argument calls is on the
 * stack: NCCL_F_REGS_ONLY), except ncclReduce's comm, which the wait needs,
 * and writes the record into this CPU's slice of nccl_slots (struct
 * nccl_slot; slot_begin/slot_end), not on a ring: a ring's reserve and
 * submit were 130-270 ns of the program's ~310 ns per call, the slot write
 * about half that (bpf_stats, docs/operations.md). The thread's verdict
 * (traced, deep) and its group state are in task storage (nccl_thread),
 * not in thread_stats (docs/architecture.md). The comm pointer is mapped
 * to its communicator by the agent, from the EV_NCCL_COMM its init
 * sent on rb_cuda; the agent merges the slots with that ring in time order
 * (agent/sources/slots.c), so a call is decoded against the communicator
 * live at its entry: no extra lookup here.
 */
#include "lib/common.bpf.h"
#include <bpf/bpf_tracing.h>

#if defined(__TARGET_ARCH_x86) && !defined(PT_REGS_PARM6)
#define PT_REGS_PARM6(x) (((struct pt_regs *)(x))->r9)
#endif

#define NCCL_IN_PROGRESS 7 /* ncclInProgress: a non-blocking init is under way */

/* an init or split between its entry and its return, per thread */
struct nccl_pending {
	struct nccl_comm_event ev;
	__u64 out; /* ncclComm_t * (init), ncclComm_t *newcomm (split), comm array (InitAll) */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct nccl_pending);
} nccl_pending SEC(".maps");

/* zeroed template: struct nccl_pending is too large for the BPF stack */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nccl_pending);
} nccl_zero SEC(".maps");

static __always_inline __u64 stack_arg(struct pt_regs *ctx, __u32 i)
{
	__u64 v = 0;

	bpf_probe_read_user(&v, sizeof(v), (void *)(PT_REGS_SP(ctx) + 8 + 8 * i));
	return v;
}

/*
 * Per thread that called NCCL: its process's verdict, cached until the agent
 * changes traced_procs (runtime_cfg.trace_gen), and its group nesting.
 */
#define NCCL_T_TRACED (1u << 0)
#define NCCL_T_DEEP (1u << 1) /* PROC_F_DEEP of its process */
struct nccl_task {
	__u32 gen;   /* trace_gen the flags were read at (the agent starts at 1) */
	__u32 flags; /* NCCL_T_* */
	__u32 pid;   /* the hash fallback: the process that owns a tid's entry */
	__u32 group_depth;
	__u64 group_id; /* outermost ncclGroupStart entry time; 0 outside */
};

/*
 * Task storage: one pointer walk from the current task, freed with it, a
 * reused tid starts empty. Where the kernel refuses task storage to uprobe
 * programs (before 5.12) the loader makes this a hash by tid of
 * --max-threads entries (cfg.task_storage 0), and only traced threads get
 * an entry there, as in thread_stats.
 */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct nccl_task);
} nccl_task SEC(".maps");

static __always_inline struct nccl_task *nccl_task_hash(__u64 id)
{
	struct nccl_task *t, fresh = {.pid = id >> 32};
	__u32 tid = (__u32)id;

	t = bpf_map_lookup_elem(&nccl_task, &tid);
	if (t && t->pid == id >> 32)
		return t;
	if (!traced(id >> 32))
		return NULL; /* untraced threads take no entry (nor a reused tid's) */
	bpf_map_update_elem(&nccl_task, &tid, &fresh, BPF_ANY);
	return bpf_map_lookup_elem(&nccl_task, &tid);
}

/* The calling thread's entry if its process is traced, else NULL (id: pid and tid). */
static __always_inline struct nccl_task *nccl_thread(struct runtime_cfg *rc, __u64 id)
{
	struct traced_proc *tp;
	struct nccl_task *t;

	if (!rc)
		return NULL;
	if (cfg.task_storage)
		t = bpf_task_storage_get(&nccl_task, bpf_get_current_task_btf(), 0,
					 BPF_LOCAL_STORAGE_GET_F_CREATE);
	else
		t = nccl_task_hash(id);
	if (!t) {
		/*
		 * task storage can fail (no memory; kernels before 6.2 also
		 * when another task-storage call is busy on this CPU): a
		 * traced process's call is then lost, counted as a drop
		 */
		if (cfg.task_storage && traced(id >> 32))
			count_type(&drop_counts, EV_NCCL_CALL);
		return NULL;
	}
	if (t->gen != rc->trace_gen) {
		tp = traced(id >> 32);
		t->flags = tp ? NCCL_T_TRACED | (tp->flags & PROC_F_DEEP ? NCCL_T_DEEP : 0) : 0;
		t->gen = rc->trace_gen;
	}
	return t->flags & NCCL_T_TRACED ? t : NULL;
}

struct nccl_args {
	__u64 comm, count, stream;
	__s32 datatype, redop, root;
	__u16 flags;
};

static __always_inline void nccl_fill(struct nccl_call_event *e, __u32 api, __u64 id, __u64 now,
				      struct nccl_task *t, struct nccl_args *c)
{
	fill_hdr(&e->hdr, EV_NCCL_CALL, sizeof(*e), id >> 32, (__u32)id, now);
	e->api = api;
	e->flags = c->flags;
	e->datatype = c->datatype;
	e->comm = c->comm;
	e->count = c->count;
	e->stream = c->stream;
	e->redop = c->redop;
	e->root = c->root;
	e->group_id = t->group_id;
	e->group_depth = t->group_depth;
	e->pad = 0;
}

/*
 * Sentinel: the call into this CPU's slot. Once per half slice, a wake-up
 * record on rb_cuda: the agent copies the slots at least every 100 ms, and
 * a thread calling NCCL in a tight loop would wrap the slice before that.
 */
static __always_inline void nccl_slot_put(__u32 api, struct nccl_task *t, struct nccl_args *c,
					  __u32 per_cpu, __u64 id)
{
	struct slot_cursor *cur;
	struct nccl_slot *s = slot_begin(&nccl_slots, &nccl_cur, per_cpu, &cur);
	struct event_hdr *w;

	if (!s)
		return;
	nccl_fill(&s->ev, api, id, bpf_ktime_get_ns(), t, c);
	if (slot_end(s, cur) & (per_cpu / 2 - 1))
		return;
	w = reserve(&rb_cuda, sizeof(*w), EV_NCCL_WAKE);
	if (!w)
		return;
	fill_hdr(w, EV_NCCL_WAKE, sizeof(*w), id >> 32, (__u32)id, bpf_ktime_get_ns());
	bpf_ringbuf_submit(w, BPF_RB_FORCE_WAKEUP);
}

static __always_inline int nccl_emit(__u32 api, struct nccl_task *t, struct nccl_args *c, bool deep,
				     struct runtime_cfg *rc, __u64 id)
{
	struct nccl_call_event *e;

	if (!deep && rc && rc->nccl_slots) {
		nccl_slot_put(api, t, c, rc->nccl_slots, id);
		return 0;
	}
	e = reserve(&rb_cuda, sizeof(*e), EV_NCCL_CALL);
	if (!e)
		return 0;
	nccl_fill(e, api, id, bpf_ktime_get_ns(), t, c);
	/* the agent drains every 100 ms: wake it per batch, as for launches */
	bpf_ringbuf_submit(e, batch_wakeup(&rb_cuda, sizeof(*e)));
	return 0;
}

/*
 * The traced thread, the runtime settings and whether the stack arguments
 * are read (deep), or NULL for an untraced thread (id: pid and tid).
 */
static __always_inline struct nccl_task *nccl_begin(bool *deep, struct runtime_cfg **rcp, __u64 id)
{
	struct runtime_cfg *rc = get_rcfg();
	struct nccl_task *t = nccl_thread(rc, id);

	if (t) {
		*rcp = rc;
		*deep = rc->mode == MODE_DEEP || (rc->deep_procs && (t->flags & NCCL_T_DEEP));
	}
	return t;
}

#define NCCL_BEGIN()                                                                               \
	bool deep = false;                                                                         \
	struct runtime_cfg *rc = NULL;                                                             \
	struct nccl_args c = {.redop = -1, .root = -1};                                            \
	__u64 id = bpf_get_current_pid_tgid();                                                     \
	struct nccl_task *t = nccl_begin(&deep, &rc, id);                                          \
	if (!t)                                                                                    \
	return 0

/*
 * One uprobe program per entry point, named as the function (the loader
 * attaches by program name); `shape` reads the arguments of its signature.
 */
#define NCCL_UPROBE(name, shape, api)                                                              \
	SEC("uprobe")                                                                              \
	int BPF_KPROBE(name)                                                                       \
	{                                                                                          \
		return shape(ctx, api);                                                            \
	}

/*
 * ncclAllReduce / ncclReduceScatter(send, recv, count, dtype, op, comm, stream),
 * ncclBroadcast(send, recv, count, dtype, root, comm, stream): the fifth is the
 * root for a broadcast (api is a constant once inlined)
 */
static __always_inline int reduce7(struct pt_regs *ctx, __u32 api)
{
	NCCL_BEGIN();
	c.count = PT_REGS_PARM3(ctx);
	c.datatype = (__s32)PT_REGS_PARM4(ctx);
	if (api == NCCL_BROADCAST)
		c.root = (__s32)PT_REGS_PARM5(ctx);
	else
		c.redop = (__s32)PT_REGS_PARM5(ctx);
	c.comm = PT_REGS_PARM6(ctx);
	if (deep)
		c.stream = stack_arg(ctx, 0);
	else
		c.flags = NCCL_F_REGS_ONLY;
	return nccl_emit(api, t, &c, deep, rc, id);
}

/* ncclAllGather / ncclAlltoAll(send, recv, count, dtype, comm, stream) */
static __always_inline int gather6(struct pt_regs *ctx, __u32 api)
{
	NCCL_BEGIN();
	c.count = PT_REGS_PARM3(ctx);
	c.datatype = (__s32)PT_REGS_PARM4(ctx);
	c.comm = PT_REGS_PARM5(ctx);
	c.stream = PT_REGS_PARM6(ctx);
	return nccl_emit(api, t, &c, deep, rc, id);
}

/* ncclSend / ncclRecv(buf, count, dtype, peer, comm, stream) */
static __always_inline int p2p6(struct pt_regs *ctx, __u32 api)
{
	NCCL_BEGIN();
	c.count = PT_REGS_PARM2(ctx);
	c.datatype = (__s32)PT_REGS_PARM3(ctx);
	c.root = (__s32)PT_REGS_PARM4(ctx);
	c.comm = PT_REGS_PARM5(ctx);
	c.stream = PT_REGS_PARM6(ctx);
	return nccl_emit(api, t, &c, deep, rc, id);
}

NCCL_UPROBE(ncclAllReduce, reduce7, NCCL_ALL_REDUCE)
NCCL_UPROBE(ncclReduceScatter, reduce7, NCCL_REDUCE_SCATTER)
NCCL_UPROBE(ncclBroadcast, reduce7, NCCL_BROADCAST)
NCCL_UPROBE(ncclAllGather, gather6, NCCL_ALL_GATHER)
NCCL_UPROBE(ncclAlltoAll, gather6, NCCL_ALLTOALL)
NCCL_UPROBE(ncclSend, p2p6, NCCL_SEND)
NCCL_UPROBE(ncclRecv, p2p6, NCCL_RECV)

/* ncclReduce(send, recv, count, dtype, op, root, comm, stream): comm on the stack */
SEC("uprobe")
int BPF_KPROBE(ncclReduce)
{
	__u64 st[2] = {};

	NCCL_BEGIN();
	c.count = PT_REGS_PARM3(ctx);
	c.datatype = (__s32)PT_REGS_PARM4(ctx);
	c.redop = (__s32)PT_REGS_PARM5(ctx);
	c.root = (__s32)PT_REGS_PARM6(ctx);
	if (deep) {
		bpf_probe_read_user(st, sizeof(st), (void *)(PT_REGS_SP(ctx) + 8));
		c.comm = st[0];
		c.stream = st[1];
	} else {
		c.comm = stack_arg(ctx, 0);
		c.flags = NCCL_F_REGS_ONLY;
	}
	return nccl_emit(NCCL_REDUCE, t, &c, deep, rc, id);
}

/* groups nest: the outermost start names the group, the outermost end closes it */
SEC("uprobe")
int BPF_KPROBE(ncclGroupStart)
{
	NCCL_BEGIN();
	if (!t->group_depth)
		t->group_id = bpf_ktime_get_ns();
	t->group_depth++;
	return nccl_emit(NCCL_GROUP_START, t, &c, deep, rc, id);
}

SEC("uprobe")
int BPF_KPROBE(ncclGroupEnd)
{
	NCCL_BEGIN();
	if (t->group_depth)
		t->group_depth--;
	nccl_emit(NCCL_GROUP_END, t, &c, deep, rc, id);
	if (!t->group_depth)
		t->group_id = 0;
	return 0;
}

/* ---- communicator life: entry saves the arguments, return reports ---- */

static __always_inline struct nccl_pending *pending_new(__u32 api)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, zero = 0;
	struct nccl_pending *p;

	if (!nccl_thread(get_rcfg(), id))
		return NULL;
	p = bpf_map_lookup_elem(&nccl_zero, &zero);
	if (!p)
		return NULL;
	/* the template is per CPU and only read below: reset what a last use left */
	__builtin_memset(&p->ev, 0, sizeof(p->ev));
	p->out = 0;
	fill_hdr(&p->ev.hdr, EV_NCCL_COMM, sizeof(p->ev), id >> 32, tid, bpf_ktime_get_ns());
	p->ev.api = api;
	p->ev.nranks = -1;
	p->ev.rank = -1;
	if (bpf_map_update_elem(&nccl_pending, &tid, p, BPF_ANY))
		return NULL;
	return bpf_map_lookup_elem(&nccl_pending, &tid);
}

/*
 * What an entry saved, reported now as api (NCCL_COMM_INIT_ENTER,
 * NCCL_COMM_SPLIT_ENTER): inits and splits are collective, NCCL gathers
 * every rank before any returns (NVIDIA/nccl src/init.cc: the bootstrap's
 * allgather; for a split commGetSplitInfo), so on one ring every rank's
 * entry comes before the first return and before any rank's first call on
 * the new comm.
 */
static __always_inline void entry_report(struct nccl_pending *p, __u32 api)
{
	struct nccl_comm_event *e = reserve(&rb_cuda, sizeof(*e), EV_NCCL_COMM);

	if (!e)
		return;
	__builtin_memcpy(e, &p->ev, sizeof(*e));
	e->api = api;
	bpf_ringbuf_submit(e, 0);
}

/* ncclCommInitRank(comm*, nranks, commId, rank) / ...Config(comm*, nranks, commId, rank, config) */
static __always_inline int init_rank(struct pt_regs *ctx, __u32 api)
{
	struct nccl_pending *p = pending_new(api);

	if (!p)
		return 0;
	p->out = PT_REGS_PARM1(ctx);
	p->ev.nranks = (__s32)PT_REGS_PARM2(ctx);
	p->ev.rank = (__s32)PT_REGS_PARM3(ctx);
	bpf_probe_read_user(p->ev.id, sizeof(p->ev.id), (void *)(PT_REGS_SP(ctx) + 8));
	entry_report(p, NCCL_COMM_INIT_ENTER);
	return 0;
}

NCCL_UPROBE(ncclCommInitRank, init_rank, NCCL_COMM_INIT_RANK)
NCCL_UPROBE(ncclCommInitRankConfig, init_rank, NCCL_COMM_INIT_RANK_CONFIG)

/*
 * ncclCommInitRankScalable(newcomm*, nranks, myrank, nId, commIds*, config):
 * "the number of ncclUniqueIds and their order must be the same for every
 * rank" (nccl.h), so the first id names the communicator on every rank
 */
SEC("uprobe")
int BPF_KPROBE(ncclCommInitRankScalable)
{
	struct nccl_pending *p = pending_new(NCCL_COMM_INIT_RANK_SCALABLE);

	if (!p)
		return 0;
	p->out = PT_REGS_PARM1(ctx);
	p->ev.nranks = (__s32)PT_REGS_PARM2(ctx);
	p->ev.rank = (__s32)PT_REGS_PARM3(ctx);
	if ((int)PT_REGS_PARM4(ctx) >= 1)
		bpf_probe_read_user(p->ev.id, sizeof(p->ev.id), (void *)PT_REGS_PARM5(ctx));
	entry_report(p, NCCL_COMM_INIT_ENTER);
	return 0;
}

/* ncclCommInitAll(comm*, ndev, devlist): one comm per device, ranks 0..ndev-1 */
SEC("uprobe")
int BPF_KPROBE(ncclCommInitAll)
{
	struct nccl_pending *p = pending_new(NCCL_COMM_INIT_ALL);

	if (!p)
		return 0;
	p->out = PT_REGS_PARM1(ctx);
	p->ev.nranks = (__s32)PT_REGS_PARM2(ctx);
	return 0;
}

/*
 * ncclCommSplit(comm, color, key, newcomm*, config): reported at entry too,
 * so that the agent has every parent rank's color and key when the first
 * split returns, and derives the new ranks (entry_report above).
 */
SEC("uprobe")
int BPF_KPROBE(ncclCommSplit)
{
	struct nccl_pending *p = pending_new(NCCL_COMM_SPLIT);

	if (!p)
		return 0;
	p->ev.parent = PT_REGS_PARM1(ctx);
	p->ev.color = (__s32)PT_REGS_PARM2(ctx);
	p->ev.key = (__s32)PT_REGS_PARM3(ctx);
	p->out = PT_REGS_PARM4(ctx);
	entry_report(p, NCCL_COMM_SPLIT_ENTER);
	return 0;
}

/* one return probe for every init and the split: the entry saved which */
SEC("uretprobe")
int BPF_KRETPROBE(on_nccl_comm_return)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct nccl_pending *p = bpf_map_lookup_elem(&nccl_pending, &tid);
	struct nccl_comm_event *e;
	__u32 n = 1;

	if (!p)
		return 0;
	p->ev.ret = (__s32)PT_REGS_RC(ctx);
	p->ev.dur_ns = bpf_ktime_get_ns() - p->ev.hdr.ts_ns;
	if (p->ev.ret == 0 || p->ev.ret == NCCL_IN_PROGRESS) {
		if (p->ev.api == NCCL_COMM_INIT_ALL) {
			n = p->ev.nranks > 0 ? (__u32)p->ev.nranks : 0;
			if (n > NCCL_INIT_ALL_MAX)
				n = NCCL_INIT_ALL_MAX;
		}
		if (n && p->out)
			bpf_probe_read_user(p->ev.comms, n * sizeof(__u64) & 0x7f, (void *)p->out);
		p->ev.n_comms = n;
	}
	e = reserve(&rb_cuda, sizeof(*e), EV_NCCL_COMM);
	if (e) {
		__builtin_memcpy(e, &p->ev, sizeof(*e));
		bpf_ringbuf_submit(e, 0);
	}
	bpf_map_delete_elem(&nccl_pending, &tid);
	return 0;
}

/* ncclCommDestroy(comm) / ncclCommAbort(comm): the pointer may be reused after */
static __always_inline int comm_end(struct pt_regs *ctx, __u32 api)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct nccl_comm_event *e;

	if (!nccl_thread(get_rcfg(), id))
		return 0;
	e = reserve(&rb_cuda, sizeof(*e), EV_NCCL_COMM);
	if (!e)
		return 0;
	__builtin_memset(e, 0, sizeof(*e));
	fill_hdr(&e->hdr, EV_NCCL_COMM, sizeof(*e), id >> 32, (__u32)id, bpf_ktime_get_ns());
	e->api = api;
	e->nranks = -1;
	e->rank = -1;
	e->comms[0] = PT_REGS_PARM1(ctx);
	e->n_comms = 1;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

NCCL_UPROBE(ncclCommDestroy, comm_end, NCCL_COMM_DESTROY)
NCCL_UPROBE(ncclCommAbort, comm_end, NCCL_COMM_ABORT)
