// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * cuda.bpf.c - uprobes on the CUDA launch paths.
 *
 * Why uprobes: they see every launch of every process that maps the library,
 * with the launching thread and CLOCK_MONOTONIC time, without touching the
 * process. The agent (agent/uprobes.c) attaches each program to the symbol of
 * the same name in every libcudart / libcuda file that a traced process maps,
 * once per file (pid -1), so the filter below is what keeps other processes out.
 *
 * Sentinel mode: one hash lookup and a counter increment per call; the
 * arguments are not even read. Deep mode: one ring record per call, with a
 * rate-limited user stack.
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
};

static __always_inline __u64 stack_arg(struct pt_regs *ctx, int n)
{
	__u64 v = 0;

	bpf_probe_read_user(&v, sizeof(v), (void *)(PT_REGS_SP(ctx) + 8 * n));
	return v;
}

/* per-thread token bucket: at most rc->stack_rate stacks per second */
static __always_inline bool stack_allowed(struct thread_stats *ts, struct runtime_cfg *rc, __u64 now)
{
	__u64 period, add;

	if (!rc->stack_rate)
		return false;
	period = 1000000000ULL / rc->stack_rate;
	if (!period)
		period = 1;
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
	e->flags = stack_sz ? LAUNCH_F_STACK : 0;
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
 * Sentinel fast path, before any argument is read: count the call for a
 * traced thread; true when the call also needs a record (deep mode).
 */
static __always_inline bool launch_begin(__u32 api, struct thread_stats **tsp,
					 struct runtime_cfg **rcp)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct thread_stats *ts = thread_get(id >> 32, (__u32)id);

	if (!ts)
		return false;
	if (api < API_SLOTS)
		ts->launches[api]++;
	*rcp = get_rcfg();
	*tsp = ts;
	return is_deep(*rcp, id >> 32);
}

/*
 * Wake the agent once per WAKEUP_BYTES of records: it drains the rings every
 * 100 ms anyway, and a wake-up costs the launching thread an irq_work (a VM
 * exit on virtual machines). The record that makes the unread data cross a
 * multiple of WAKEUP_BYTES wakes; so a falling-behind agent is woken once
 * per batch, not once per record.
 */
#define WAKEUP_BYTES (256 << 10)

static __always_inline __u64 submit_flags(__u32 size)
{
	__u64 avail = bpf_ringbuf_query(&rb_cuda, BPF_RB_AVAIL_DATA);

	return avail / WAKEUP_BYTES != (avail - size) / WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP
								      : BPF_RB_NO_WAKEUP;
}

/* deep path: one record, with a user stack when allowed */
static __always_inline int emit_launch(struct pt_regs *ctx, __u32 api, struct launch_args *a,
				       struct thread_stats *ts, struct runtime_cfg *rc)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();

	if (rc->deep_stacks && stack_allowed(ts, rc, now)) {
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
		fill_launch(&se->ev, a, api, id, now, sizeof(*se), (__u32)n);
		bpf_ringbuf_submit(se, submit_flags(sizeof(*se)));
		return 0;
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
	if (!launch_begin(api, &ts, &rc) || !rc)                                                   \
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
	a.arg = stack_arg(ctx, 1);
	a.stream = stack_arg(ctx, 2);
	return emit_launch(ctx, api, &a, ts, rc);
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

	bpf_probe_read_user(&c, sizeof(c), (void *)PT_REGS_PARM1(ctx));
	a.func = PT_REGS_PARM2(ctx);
	__builtin_memcpy(a.grid, c.grid, sizeof(a.grid));
	__builtin_memcpy(a.block, c.block, sizeof(a.block));
	a.arg = shmem32 ? (__u32)c.shmem : c.shmem;
	a.stream = c.stream;
	return emit_launch(ctx, api, &a, ts, rc);
}

/* cudaGraphLaunch(exec, stream) and cuGraphLaunch(exec, stream) */
static __always_inline int graph_launch(struct pt_regs *ctx, __u32 api)
{
	LAUNCH_BEGIN(api);

	a.func = PT_REGS_PARM1(ctx);
	a.stream = PT_REGS_PARM2(ctx);
	return emit_launch(ctx, api, &a, ts, rc);
}

/* cudaMemcpyAsync(dst, src, count, kind, stream) */
static __always_inline int memcpy_async(struct pt_regs *ctx, __u32 api)
{
	LAUNCH_BEGIN(api);

	a.func = PT_REGS_PARM1(ctx);
	a.arg = PT_REGS_PARM3(ctx);
	a.kind = (__u32)PT_REGS_PARM4(ctx);
	a.stream = PT_REGS_PARM5(ctx);
	return emit_launch(ctx, api, &a, ts, rc);
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
	a.block[2] = (__u32)stack_arg(ctx, 1);
	a.arg = (__u32)stack_arg(ctx, 2);
	a.stream = stack_arg(ctx, 3);
	return emit_launch(ctx, api, &a, ts, rc);
}

/* entry of cudaStreamSynchronize(stream) / cudaDeviceSynchronize() */
static __always_inline int sync_enter(struct pt_regs *ctx, __u32 api, __u64 stream)
{
	struct thread_stats *ts = thread_current();

	if (!ts)
		return 0;
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

	ts = bpf_map_lookup_elem(&thread_stats, &(__u32){ (__u32)id });
	if (!ts || !ts->sync_start_ns || ts->pid != id >> 32)
		return 0;
	now = bpf_ktime_get_ns();
	dur = now - ts->sync_start_ns;
	ts->sync_count++;
	ts->sync_ns += dur;
	rc = get_rcfg();
	if (rc && (is_deep(rc, id >> 32) || dur >= rc->sync_thresh_ns)) {
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
int BPF_KPROBE(cudaLaunchKernel) { return rt_launch(ctx, API_CUDA_LAUNCH_KERNEL); }
SEC("uprobe")
int BPF_KPROBE(cudaLaunchKernel_ptsz) { return rt_launch(ctx, API_CUDA_LAUNCH_KERNEL_PTSZ); }
SEC("uprobe")
int BPF_KPROBE(cudaLaunchKernelExC) { return launch_ex(ctx, API_CUDA_LAUNCH_KERNEL_EXC, false); }
SEC("uprobe")
int BPF_KPROBE(cudaLaunchKernelExC_ptsz)
{
	return launch_ex(ctx, API_CUDA_LAUNCH_KERNEL_EXC_PTSZ, false);
}
SEC("uprobe")
int BPF_KPROBE(cudaGraphLaunch) { return graph_launch(ctx, API_CUDA_GRAPH_LAUNCH); }
SEC("uprobe")
int BPF_KPROBE(cudaGraphLaunch_ptsz) { return graph_launch(ctx, API_CUDA_GRAPH_LAUNCH_PTSZ); }
SEC("uprobe")
int BPF_KPROBE(cudaMemcpyAsync) { return memcpy_async(ctx, API_CUDA_MEMCPY_ASYNC); }
SEC("uprobe")
int BPF_KPROBE(cudaMemcpyAsync_ptsz) { return memcpy_async(ctx, API_CUDA_MEMCPY_ASYNC_PTSZ); }
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
int BPF_KPROBE(cudaDeviceSynchronize) { return sync_enter(ctx, API_CUDA_DEVICE_SYNCHRONIZE, 0); }
/* one return probe serves every synchronising call: the entry saved which */
SEC("uretprobe")
int BPF_KRETPROBE(on_sync_return) { return sync_exit(ctx); }
SEC("uprobe")
int BPF_KPROBE(cuLaunchKernel) { return drv_launch(ctx, API_CU_LAUNCH_KERNEL); }
SEC("uprobe")
int BPF_KPROBE(cuLaunchKernel_ptsz) { return drv_launch(ctx, API_CU_LAUNCH_KERNEL_PTSZ); }
SEC("uprobe")
int BPF_KPROBE(cuLaunchKernelEx) { return launch_ex(ctx, API_CU_LAUNCH_KERNEL_EX, true); }
SEC("uprobe")
int BPF_KPROBE(cuLaunchKernelEx_ptsz) { return launch_ex(ctx, API_CU_LAUNCH_KERNEL_EX_PTSZ, true); }
SEC("uprobe")
int BPF_KPROBE(cuGraphLaunch) { return graph_launch(ctx, API_CU_GRAPH_LAUNCH); }
SEC("uprobe")
int BPF_KPROBE(cuGraphLaunch_ptsz) { return graph_launch(ctx, API_CU_GRAPH_LAUNCH_PTSZ); }
