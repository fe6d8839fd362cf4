// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * cuda.bpf.c - uprobes on the CUDA launch paths.
 *
 * Why uprobes: they see every launch of every process that maps the library,
 * with the launching thread and CLOCK_MONOTONIC time, without touching the
 * process. The agent (agent/sources/uprobes.c) attaches each program to the symbol of
 * the same name in every libcudart / libcuda file that a traced process maps,
 * once per file (pid -1), so the filter below is what keeps other processes out.
 *
 * Sentinel mode attaches only the sync class (bpf/events.h,
 * API_LAUNCH_CLASS): graph launches, copies, synchronisation; the per-launch
 * programs run in deep capture, sampling windows or with
 * --sentinel-launches all. Sentinel: one hash lookup and a counter increment per call; with the
 * flight recorder on (the default), also the call's register arguments
 * written into this CPU's ring of the flight map, which the agent copies
 * through mmap. Deep mode: one ring record per call, with a rate-limited
 * user stack and, in a Python process, the Python frames that made it.
 *
 * Argument positions follow the x86-64 SysV ABI: a dim3 (12 bytes) passed by
 * value takes two registers; arguments past the sixth register live on the
 * stack above the return address (sp + 8, sp + 16, ...).
 */
#include "lib/common.bpf.h"
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#if defined(__TARGET_ARCH_x86) && !defined(PT_REGS_PARM6)
/* libbpf < 1.2 has no PT_REGS_PARM6 */
#define PT_REGS_PARM6(x) (((struct pt_regs *)(x))->r9)
#endif

struct launch_args {
	__u64 func;
	__u64 stream;
	__u64 arg;
	__u32 grid[3];
	__u32 block[3];
	__u32 kind;
	__u32 flags; /* LAUNCH_F_REGS_ONLY */
};

/*
 * Arguments past the sixth register, read in one go: each
 * bpf_probe_read_user() costs a few hundred ns on a VM (make bench), more
 * than the rest of the program.
 */
static __always_inline void stack_args(struct pt_regs *ctx, __u64 *v, __u32 n)
{
	if (bpf_probe_read_user(v, n * sizeof(__u64), (void *)(PT_REGS_SP(ctx) + 8)))
		__builtin_memset(v, 0, n * sizeof(__u64));
}

/*
 * Per-thread token bucket: at most rc->stack_rate stacks per second. The
 * divisions only run when a token is due (once per period, not per call).
 */
static __always_inline bool stack_allowed(struct thread_stats *ts, struct runtime_cfg *rc,
					  __u64 now)
{
	__u64 period, add;

	if (!rc->stack_rate)
		return false;
	if (!ts->stack_tokens && now - ts->stack_refill_ns < rc->stack_period_ns) {
		ts->stacks_limited++;
		return false;
	}
	period = rc->stack_period_ns ? rc->stack_period_ns : 1;
	add = (now - ts->stack_refill_ns) / period;
	if (add) {
		__u64 tokens = ts->stack_tokens + add;

		ts->stack_tokens = tokens > rc->stack_rate ? rc->stack_rate : tokens;
		ts->stack_refill_ns = now;
	}
	if (!ts->stack_tokens) {
		ts->stacks_limited++;
		return false;
	}
	ts->stack_tokens--;
	ts->stacks++;
	return true;
}

static __always_inline void fill_launch(struct cuda_launch_event *e, struct launch_args *a,
					__u32 api, __u64 id, __u64 now, __u32 size, __u32 stack_sz)
{
	fill_hdr(&e->hdr, EV_CUDA_LAUNCH, size, id >> 32, (__u32)id, now);
	e->api = api;
	e->flags = (stack_sz ? LAUNCH_F_STACK : 0) | a->flags;
	e->stack_sz = stack_sz;
	e->func = a->func;
	e->stream = a->stream;
	e->grid[0] = a->grid[0];
	e->grid[1] = a->grid[1];
	e->grid[2] = a->grid[2];
	e->block[0] = a->block[0];
	e->block[1] = a->block[1];
	e->block[2] = a->block[2];
	e->arg = a->arg;
	e->kind = a->kind;
	e->pad = 0;
}

/*
 * Nested calls. On a real driver the runtime enters the driver's exported
 * entry point: cudaLaunchKernel calls cuLaunchKernel, cudaLaunchKernelExC
 * cuLaunchKernelEx, cudaGraphLaunch cuGraphLaunch, cudaStreamSynchronize
 * cuStreamSynchronize (seen on an H100, driver 580.159.04, CUDA 13.0:
 * docs/operations.md, "Checking a GPU node"). Both probes fire; the call is
 * the runtime's, once. (The stub libcuda of the toolkit fails cuInit, so the
 * runtime never gets that far without a GPU.)
 *
 * A launch has no return probe, so the runtime entry leaves its time and
 * address in the thread's entry, and the next driver launch of the same
 * class (kernel or graph) on that thread is the nested one when it comes
 * within NEST_WINDOW_NS (first launches load modules) and returns into code
 * within NEST_RANGE of the runtime's entry point (its caller is libcudart,
 * not the application): a direct driver call after a runtime call that
 * failed early is not taken for nested. One runtime call folds one driver
 * call.
 */
#define NEST_WINDOW_NS 1000000000ull
#define NEST_RANGE (16ull << 20)

static __always_inline bool nested_driver_call(struct pt_regs *ctx, struct thread_stats *ts,
					       __u32 api, __u64 now)
{
	bool graph = API_BIT(api) & API_GRAPH_CLASS;
	__u64 ra = 0, ip = ts->rt_call_ip;

	if (!ts->rt_call_ns || now - ts->rt_call_ns > NEST_WINDOW_NS || ts->rt_call_graph != graph)
		return false;
	/* at a function's first instruction the return address is at sp */
	if (bpf_probe_read_user(&ra, sizeof(ra), (void *)PT_REGS_SP(ctx)))
		return false;
	if (ra - ip > NEST_RANGE && ip - ra > NEST_RANGE)
		return false;
	ts->rt_call_ns = 0;
	ts->nested++;
	return true;
}

enum launch_dest {
	DEST_NONE,   /* counted only */
	DEST_FLIGHT, /* sentinel with the flight recorder: this CPU's flight ring */
	DEST_RING,   /* deep: a ring record */
};

/*
 * Sentinel fast path, before any argument is read: count the call for a
 * traced thread, and say where its record goes, if anywhere.
 */
static __always_inline enum launch_dest
launch_begin(struct pt_regs *ctx, __u32 api, struct thread_stats **tsp, struct runtime_cfg **rcp)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct thread_stats *ts = thread_get(id >> 32, (__u32)id);
	struct runtime_cfg *rc;
	bool deep;

	if (!ts)
		return DEST_NONE;
	if (API_BIT(api) & API_DRIVER) {
		if (nested_driver_call(ctx, ts, api, bpf_ktime_get_ns()))
			return DEST_NONE;
	} else if (API_BIT(api) & (API_LAUNCH_CLASS | API_GRAPH_CLASS)) {
		ts->rt_call_ns = bpf_ktime_get_ns();
		ts->rt_call_ip = PT_REGS_IP(ctx);
		ts->rt_call_graph = !!(API_BIT(api) & API_GRAPH_CLASS);
	}
	rc = get_rcfg();
	deep = is_deep(rc, id >> 32);
	/*
	 * a per-launch probe outside deep capture, --sentinel-launches all and
	 * sampling windows: its link is being detached (or serves another
	 * instance's deep-dive); nothing is counted or kept
	 */
	if (!deep && ((API_LAUNCH_CLASS | API_GRAPH_CLASS) & API_BIT(api)) &&
	    !(rc && (rc->launches & API_BIT(api))))
		return DEST_NONE;
	if (api < API_SLOTS)
		ts->launches[api]++;
	*rcp = rc;
	*tsp = ts;
	if (!rc)
		return DEST_NONE;
	if (deep)
		return DEST_RING;
	return rc->flight ? DEST_FLIGHT : DEST_NONE;
}

static __always_inline __u64 submit_flags(__u32 size)
{
	return batch_wakeup(&rb_cuda, size);
}

/*
 * Flight path: the record deep mode would send (register arguments only),
 * written in place into this CPU's slice of the flight map, which the agent
 * reads through mmap; the stack, when the thread's token bucket allows, as
 * an id in flight_stacks. No lock: a slice has one writer, its CPU (uprobe
 * programs run with migration disabled).
 */
static __always_inline int flight_push(struct pt_regs *ctx, __u32 api, struct launch_args *a,
				       struct thread_stats *ts, struct runtime_cfg *rc, __u64 id,
				       __u64 now)
{
	struct slot_cursor *cur;
	struct flight_launch *f = slot_begin(&flight, &flight_cur, rc->flight, &cur);

	if (!f)
		return 0;
	f->stack_id = -1;
	f->pad = 0;
	if (rc->deep_stacks && stack_allowed(ts, rc, now))
		f->stack_id = (__s32)bpf_get_stackid(ctx, &flight_stacks, BPF_F_USER_STACK);
	fill_launch(&f->ev, a, api, id, now, sizeof(f->ev), 0);
	slot_end(f, cur);
	return 0;
}

/*
 * A launch with its user stack, in deep mode: the launch (fill_launch) is
 * written into this CPU's launch_tmpl, then the program tail-calls
 * py_launch (when the agent runs the Python sampler: py_tail), which sends
 * the Python frames that made it (bpf/python.bpf.c, py_stack_send: an
 * EV_PY_STACK with PY_F_LAUNCH just before the launch's record on the same
 * ring, with its tid and time, which is how the agent pairs them;
 * docs/events.md, cuda_launch.python_stack) and then the record. Without
 * Python the tail call does nothing and the record follows here. The walk
 * sits in one program, verified once, not in each launch probe (where it
 * made the agent's start 1.3 s longer). The per-CPU template is safe: a
 * probe that fires on this CPU while this one runs is not run
 * (bpf_prog_active), the same rule the flight rings rely on.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cuda_launch_event);
} launch_tmpl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} py_tail SEC(".maps"); /* [0]: py_launch, set by agent/sources/loader.c */

extern int py_stack_send(__u64 id, __u64 ts_ns, __u32 flags);

/* the launch t, with this call's user stack */
static __always_inline int send_with_stack(struct pt_regs *ctx, const struct cuda_launch_event *t)
{
	struct cuda_launch_stack_event *se;
	long n;

	se = reserve(&rb_cuda, sizeof(*se), EV_CUDA_LAUNCH);
	if (!se)
		return 0;
	n = bpf_get_stack(ctx, se->ips, sizeof(se->ips), BPF_F_USER_STACK);
	if (n < 0)
		n = 0;
	/* zero the frames past the stack so no stale ring bytes leak */
	for (int i = 0; i < MAX_STACK_DEPTH; i++)
		if (i * 8 >= n)
			se->ips[i] = 0;
	__builtin_memcpy(&se->ev, t, sizeof(*t));
	se->ev.stack_sz = (__u32)n;
	if (n)
		se->ev.flags |= LAUNCH_F_STACK;
	bpf_ringbuf_submit(se, submit_flags(sizeof(*se)));
	return 0;
}

SEC("uprobe")
int py_launch(struct pt_regs *ctx)
{
	struct cuda_launch_event *t = bpf_map_lookup_elem(&launch_tmpl, &(__u32){0});

	if (!t)
		return 0;
	py_stack_send((__u64)t->hdr.pid << 32 | t->hdr.tid, t->hdr.ts_ns, PY_F_LAUNCH);
	return send_with_stack(ctx, t);
}

/* deep path: one record, with a user stack (and Python frames) when allowed */
static __always_inline int emit_launch(struct pt_regs *ctx, __u32 api, struct launch_args *a,
				       struct thread_stats *ts, struct runtime_cfg *rc,
				       enum launch_dest dest)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();

	if (dest == DEST_FLIGHT)
		return flight_push(ctx, api, a, ts, rc, id, now);
	if (rc->deep_stacks && stack_allowed(ts, rc, now)) {
		struct cuda_launch_event *t = bpf_map_lookup_elem(&launch_tmpl, &(__u32){0});

		if (!t)
			return 0;
		fill_launch(t, a, api, id, now, sizeof(struct cuda_launch_stack_event), 0);
		bpf_tail_call(ctx, &py_tail, 0);
		return send_with_stack(ctx, t); /* no Python sampler: no tail call */
	}

	struct cuda_launch_event *e = reserve(&rb_cuda, sizeof(*e), EV_CUDA_LAUNCH);

	if (!e)
		return 0;
	fill_launch(e, a, api, id, now, sizeof(*e), 0);
	bpf_ringbuf_submit(e, submit_flags(sizeof(*e)));
	return 0;
}

/* every decoder starts with this: count, and stop unless a record is due */
#define LAUNCH_BEGIN(api)                                                                          \
	struct thread_stats *ts;                                                                   \
	struct runtime_cfg *rc;                                                                    \
	struct launch_args a = {};                                                                 \
	enum launch_dest dest = launch_begin(ctx, api, &ts, &rc);                                  \
	if (dest == DEST_NONE || !rc)                                                              \
	return 0

/* cudaLaunchKernel(func, dim3 grid, dim3 block, args, size_t shmem, stream) */
static __always_inline int rt_launch(struct pt_regs *ctx, __u32 api)
{
	LAUNCH_BEGIN(api);
	__u64 g_xy = PT_REGS_PARM2(ctx), b_xy = PT_REGS_PARM4(ctx);

	a.func = PT_REGS_PARM1(ctx);
	a.grid[0] = (__u32)g_xy;
	a.grid[1] = g_xy >> 32;
	a.grid[2] = (__u32)PT_REGS_PARM3(ctx);
	a.block[0] = (__u32)b_xy;
	a.block[1] = b_xy >> 32;
	a.block[2] = (__u32)PT_REGS_PARM5(ctx);
	/* args in the 6th register; shmem and stream on the stack */
	__u64 st[2];

	if (dest == DEST_RING) {
		stack_args(ctx, st, 2);
		a.arg = st[0];
		a.stream = st[1];
	} else {
		a.flags = LAUNCH_F_REGS_ONLY;
	}
	return emit_launch(ctx, api, &a, ts, rc, dest);
}

/*
 * The launch configs of cudaLaunchKernelExC (cudaLaunchConfig_t,
 * driver_types.h) and cuLaunchKernelEx (CUlaunchConfig, cuda.h) share one
 * prefix: grid, block, then shared memory (size_t in the runtime's, an
 * unsigned int plus padding in the driver's) and the stream at offset 32.
 */
struct launch_config {
	__u32 grid[3];
	__u32 block[3];
	__u64 shmem;
	__u64 stream;
};

/* cudaLaunchKernelExC(config, func, args) / cuLaunchKernelEx(config, f, params, extra) */
static __always_inline int launch_ex(struct pt_regs *ctx, __u32 api, bool shmem32)
{
	LAUNCH_BEGIN(api);
	struct launch_config c = {};

	a.func = PT_REGS_PARM2(ctx);
	if (dest != DEST_RING) {
		a.flags = LAUNCH_F_REGS_ONLY;
		return emit_launch(ctx, api, &a, ts, rc, dest);
	}
	bpf_probe_read_user(&c, sizeof(c), (void *)PT_REGS_PARM1(ctx));
	__builtin_memcpy(a.grid, c.grid, sizeof(a.grid));
	__builtin_memcpy(a.block, c.block, sizeof(a.block));
	a.arg = shmem32 ? (__u32)c.shmem : c.shmem;
	a.stream = c.stream;
	return emit_launch(ctx, api, &a, ts, rc, dest);
}

/* cudaGraphLaunch(exec, stream) and cuGraphLaunch(exec, stream) */
static __always_inline int graph_launch(struct pt_regs *ctx, __u32 api)
{
	LAUNCH_BEGIN(api);

	a.func = PT_REGS_PARM1(ctx);
	a.stream = PT_REGS_PARM2(ctx);
	return emit_launch(ctx, api, &a, ts, rc, dest);
}

/* cudaMemcpyAsync(dst, src, count, kind, stream) */
static __always_inline int memcpy_async(struct pt_regs *ctx, __u32 api)
{
	LAUNCH_BEGIN(api);

	a.func = PT_REGS_PARM1(ctx);
	a.arg = PT_REGS_PARM3(ctx);
	a.kind = (__u32)PT_REGS_PARM4(ctx);
	a.stream = PT_REGS_PARM5(ctx);
	return emit_launch(ctx, api, &a, ts, rc, dest);
}

/* cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra) */
static __always_inline int drv_launch(struct pt_regs *ctx, __u32 api)
{
	LAUNCH_BEGIN(api);

	a.func = PT_REGS_PARM1(ctx);
	a.grid[0] = (__u32)PT_REGS_PARM2(ctx);
	a.grid[1] = (__u32)PT_REGS_PARM3(ctx);
	a.grid[2] = (__u32)PT_REGS_PARM4(ctx);
	a.block[0] = (__u32)PT_REGS_PARM5(ctx);
	a.block[1] = (__u32)PT_REGS_PARM6(ctx);
	__u64 st[3];

	if (dest == DEST_RING) {
		stack_args(ctx, st, 3);
		a.block[2] = (__u32)st[0];
		a.arg = (__u32)st[1];
		a.stream = st[2];
	} else {
		a.flags = LAUNCH_F_REGS_ONLY;
	}
	return emit_launch(ctx, api, &a, ts, rc, dest);
}

/*
 * entry of cudaStreamSynchronize(stream) / cudaDeviceSynchronize() ... A
 * driver sync entered while a runtime one is open on the thread is nested
 * in it (see nested_driver_call): the runtime call keeps its name and its
 * whole time, and the driver call's return is skipped.
 */
static __always_inline int sync_enter(struct pt_regs *ctx, __u32 api, __u64 stream)
{
	struct thread_stats *ts = thread_current();

	if (!ts)
		return 0;
	if (ts->sync_start_ns && (API_BIT(api) & API_DRIVER) &&
	    !(API_BIT(ts->sync_api) & API_DRIVER)) {
		ts->sync_nested = 1;
		ts->nested++;
		return 0;
	}
	ts->sync_nested = 0;
	if (api < API_SLOTS)
		ts->launches[api]++;
	ts->sync_start_ns = bpf_ktime_get_ns();
	ts->sync_api = api;
	ts->sync_stream = stream;
	return 0;
}

static __always_inline int sync_exit(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct cuda_sync_event *e;
	struct runtime_cfg *rc;
	struct thread_stats *ts;
	__u64 now, dur;
	bool code_load;

	ts = bpf_map_lookup_elem(&thread_stats, &(__u32){(__u32)id});
	if (!ts || !ts->sync_start_ns || ts->pid != id >> 32)
		return 0;
	if (ts->sync_nested) {
		ts->sync_nested = 0;
		return 0;
	}
	now = bpf_ktime_get_ns();
	dur = now - ts->sync_start_ns;
	/*
	 * A GPU code load is not a sync, and each one is sent, whatever its
	 * length: a JIT compiler compiles first (on the thread, or in a ptxas
	 * child it waits for) and loads in the end, so a short load marks a
	 * long stall. A process loads code at its start and when it compiles
	 * new kernels: a few records, not one per step.
	 */
	code_load = API_BIT(ts->sync_api) & API_CODE_LOAD;
	if (!code_load) {
		ts->sync_count++;
		ts->sync_ns += dur;
	}
	rc = get_rcfg();
	if (rc && (code_load || is_deep(rc, id >> 32) || dur >= rc->sync_thresh_ns)) {
		e = reserve(&rb_cuda, sizeof(*e), EV_CUDA_SYNC);
		if (e) {
			fill_hdr(&e->hdr, EV_CUDA_SYNC, sizeof(*e), id >> 32, (__u32)id,
				 ts->sync_start_ns);
			e->api = ts->sync_api;
			e->pad = 0;
			e->ret = (__s32)PT_REGS_RC(ctx);
			e->stream = ts->sync_stream;
			e->dur_ns = dur;
			bpf_ringbuf_submit(e, 0);
		}
	}
	ts->sync_start_ns = 0;
	return 0;
}

/* Thin entry points; the program name is the symbol the agent attaches to. */
SEC("uprobe")
int BPF_KPROBE(cudaLaunchKernel)
{
	return rt_launch(ctx, API_CUDA_LAUNCH_KERNEL);
}
SEC("uprobe")
int BPF_KPROBE(cudaLaunchKernel_ptsz)
{
	return rt_launch(ctx, API_CUDA_LAUNCH_KERNEL_PTSZ);
}
SEC("uprobe")
int BPF_KPROBE(cudaLaunchKernelExC)
{
	return launch_ex(ctx, API_CUDA_LAUNCH_KERNEL_EXC, false);
}
SEC("uprobe")
int BPF_KPROBE(cudaLaunchKernelExC_ptsz)
{
	return launch_ex(ctx, API_CUDA_LAUNCH_KERNEL_EXC_PTSZ, false);
}
SEC("uprobe")
int BPF_KPROBE(cudaGraphLaunch)
{
	return graph_launch(ctx, API_CUDA_GRAPH_LAUNCH);
}
SEC("uprobe")
int BPF_KPROBE(cudaGraphLaunch_ptsz)
{
	return graph_launch(ctx, API_CUDA_GRAPH_LAUNCH_PTSZ);
}
SEC("uprobe")
int BPF_KPROBE(cudaMemcpyAsync)
{
	return memcpy_async(ctx, API_CUDA_MEMCPY_ASYNC);
}
SEC("uprobe")
int BPF_KPROBE(cudaMemcpyAsync_ptsz)
{
	return memcpy_async(ctx, API_CUDA_MEMCPY_ASYNC_PTSZ);
}
SEC("uprobe")
int BPF_KPROBE(cudaStreamSynchronize)
{
	return sync_enter(ctx, API_CUDA_STREAM_SYNCHRONIZE, PT_REGS_PARM1(ctx));
}
SEC("uprobe")
int BPF_KPROBE(cudaStreamSynchronize_ptsz)
{
	return sync_enter(ctx, API_CUDA_STREAM_SYNCHRONIZE_PTSZ, PT_REGS_PARM1(ctx));
}
SEC("uprobe")
int BPF_KPROBE(cudaDeviceSynchronize)
{
	return sync_enter(ctx, API_CUDA_DEVICE_SYNCHRONIZE, 0);
}
/* one return probe serves every synchronising call: the entry saved which */
SEC("uretprobe")
int BPF_KRETPROBE(on_sync_return)
{
	return sync_exit(ctx);
}
SEC("uprobe")
int BPF_KPROBE(cudaEventSynchronize)
{
	return sync_enter(ctx, API_CUDA_EVENT_SYNCHRONIZE, PT_REGS_PARM1(ctx));
}
/* cudaMemcpy(dst, src, count, kind): the record's stream field holds kind */
SEC("uprobe")
int BPF_KPROBE(cudaMemcpy)
{
	return sync_enter(ctx, API_CUDA_MEMCPY, PT_REGS_PARM4(ctx));
}
SEC("uprobe")
int BPF_KPROBE(cuStreamSynchronize)
{
	return sync_enter(ctx, API_CU_STREAM_SYNCHRONIZE, PT_REGS_PARM1(ctx));
}
SEC("uprobe")
int BPF_KPROBE(cuCtxSynchronize)
{
	return sync_enter(ctx, API_CU_CTX_SYNCHRONIZE, 0);
}
SEC("uprobe")
int BPF_KPROBE(cuEventSynchronize)
{
	return sync_enter(ctx, API_CU_EVENT_SYNCHRONIZE, PT_REGS_PARM1(ctx));
}
/* cuModuleLoadData(module, image) / cuModuleLoadDataEx(module, image, n, options, values) */
SEC("uprobe")
int BPF_KPROBE(cuModuleLoadData)
{
	return sync_enter(ctx, API_CU_MODULE_LOAD_DATA, 0);
}
SEC("uprobe")
int BPF_KPROBE(cuModuleLoadDataEx)
{
	return sync_enter(ctx, API_CU_MODULE_LOAD_DATA_EX, 0);
}
SEC("uprobe")
int BPF_KPROBE(cuLaunchKernel)
{
	return drv_launch(ctx, API_CU_LAUNCH_KERNEL);
}
SEC("uprobe")
int BPF_KPROBE(cuLaunchKernel_ptsz)
{
	return drv_launch(ctx, API_CU_LAUNCH_KERNEL_PTSZ);
}
SEC("uprobe")
int BPF_KPROBE(cuLaunchKernelEx)
{
	return launch_ex(ctx, API_CU_LAUNCH_KERNEL_EX, true);
}
SEC("uprobe")
int BPF_KPROBE(cuLaunchKernelEx_ptsz)
{
	return launch_ex(ctx, API_CU_LAUNCH_KERNEL_EX_PTSZ, true);
}
SEC("uprobe")
int BPF_KPROBE(cuGraphLaunch)
{
	return graph_launch(ctx, API_CU_GRAPH_LAUNCH);
}
SEC("uprobe")
int BPF_KPROBE(cuGraphLaunch_ptsz)
{
	return graph_launch(ctx, API_CU_GRAPH_LAUNCH_PTSZ);
}
