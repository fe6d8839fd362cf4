/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * events.h - the one record ABI shared by the BPF programs, the agent and the
 * CUPTI shim.
 *
 * Rules (docs/events.md explains them to users):
 *   - only __u8..__u64, explicit padding, every size _Static_assert'ed;
 *   - every record starts with struct event_hdr;
 *   - event type numbers are never reused, records only grow at the end;
 *   - bump INFERTRACE_ABI_VERSION when a record changes; the agent refuses a
 *     shim that speaks another version.
 *
 * The agent decodes these in agent/sources/decode.c (must match field for field).
 */
#ifndef INFERTRACE_EVENTS_H
#define INFERTRACE_EVENTS_H

#ifdef __BPF__
/* vmlinux.h already defines the __uN types */
#else
#include <linux/types.h>
#endif

#define INFERTRACE_ABI_VERSION 1
/* the JSON lines' "schema" is INFERTRACE_SCHEMA_VERSION in correlator/include/correlator.h */

#define TASK_COMM_LEN 16
#define LIB_NAME_LEN 64
#define MAX_STACK_DEPTH 32
#define HIST_SLOTS 32
#define GPU_NAME_LEN 192

enum event_type {
	EV_CUDA_LAUNCH = 1, /* struct cuda_launch_event (+ optional stack) */
	EV_CUDA_SYNC = 2,   /* struct cuda_sync_event */
	EV_OFFCPU = 3,	    /* struct offcpu_event */
	EV_RUNQ = 4,	    /* struct runq_event */
	EV_SYSCALL = 5,	    /* struct syscall_event */
	EV_TCP_RETRANS = 6, /* struct tcp_retrans_event */
	EV_PROC_EXEC = 7,   /* struct process_event */
	EV_PROC_EXIT = 8,   /* struct process_event */
	/* struct process_event: exec mapping of libcud*, or any by a traced process */
	EV_LIB_MAP = 9,
	EV_STEP_MARK = 10, /* struct step_mark_event: a USDT probe of infertrace/step.h */
	EV_NET_IO = 11,	   /* struct net_io_event: socket bytes of a traced thread */
	EV_NCCL_CALL = 12, /* struct nccl_call_event: a collective, send/recv or group call */
	EV_NCCL_COMM = 13, /* struct nccl_comm_event: a communicator's init, split, end */
	/* struct event_hdr alone: a CPU's NCCL call slots filled half of their slice */
	EV_NCCL_WAKE = 14,
	EV_PY_STACK = 15, /* struct py_stack_event: a traced Python thread's frames (sampled) */
	/* GPU side, written by the CUPTI shim (agent/shim) */
	EV_GPU_KERNEL = 16,    /* struct gpu_activity_event */
	EV_GPU_MEMCPY = 17,    /* struct gpu_activity_event */
	EV_GPU_MEMSET = 18,    /* struct gpu_activity_event */
	EV_GPU_LAUNCH_CB = 19, /* struct gpu_launch_cb_event */
	EV_SHIM_STATUS = 20,   /* struct shim_status_event */
	EV_GPU_MARKER = 21,    /* struct gpu_marker_event: an NVTX range call */
	EV_GPU_DEVICE = 22,    /* struct gpu_device_event: a CUDA device's UUID */
	EV_TYPE_MAX = 32,      /* size of the per-type counter arrays */
};

/*
 * Common header, 24 bytes.
 *
 *  0      2      4          8          12         16                 24
 *  +------+------+----------+----------+----------+------------------+
 *  | type | size |   pid    |   tid    |   cpu    |      ts_ns       |
 *  +------+------+----------+----------+----------+------------------+
 *
 * pid is the tgid as seen from the initial pid namespace, tid the thread id,
 * ts_ns CLOCK_MONOTONIC (bpf_ktime_get_ns()). size is the whole record's size
 * in bytes, header included.
 */
struct event_hdr {
	__u16 type;
	__u16 size;
	__u32 pid;
	__u32 tid;
	__u32 cpu;
	__u64 ts_ns;
};
_Static_assert(sizeof(struct event_hdr) == 24, "event_hdr ABI");

/*
 * CUDA entry points probed by bpf/cuda.bpf.c. The index is also the slot in
 * thread_stats.launches[]. Names live in correlator/src/corr.c, api_names[]
 * (corr_api_name(), must match; a _Static_assert there counts them).
 */
enum cuda_api {
	API_CUDA_LAUNCH_KERNEL = 0,
	API_CUDA_LAUNCH_KERNEL_PTSZ = 1,
	API_CUDA_LAUNCH_KERNEL_EXC = 2,
	API_CUDA_LAUNCH_KERNEL_EXC_PTSZ = 3,
	API_CUDA_GRAPH_LAUNCH = 4,
	API_CUDA_GRAPH_LAUNCH_PTSZ = 5,
	API_CUDA_MEMCPY_ASYNC = 6,
	API_CUDA_MEMCPY_ASYNC_PTSZ = 7,
	API_CUDA_STREAM_SYNCHRONIZE = 8,
	API_CUDA_STREAM_SYNCHRONIZE_PTSZ = 9,
	API_CUDA_DEVICE_SYNCHRONIZE = 10,
	API_CU_LAUNCH_KERNEL = 11,
	API_CU_LAUNCH_KERNEL_PTSZ = 12,
	API_CU_LAUNCH_KERNEL_EX = 13,
	API_CU_LAUNCH_KERNEL_EX_PTSZ = 14,
	API_CU_GRAPH_LAUNCH = 15,
	API_CU_GRAPH_LAUNCH_PTSZ = 16,
	/* synchronisation points added by issue 20 (each with a uretprobe) */
	API_CUDA_EVENT_SYNCHRONIZE = 17,
	API_CUDA_MEMCPY = 18, /* synchronous copy: blocks the host (D2H, pageable H2D) */
	API_CU_STREAM_SYNCHRONIZE = 19,
	API_CU_CTX_SYNCHRONIZE = 20,
	API_CU_EVENT_SYNCHRONIZE = 21,
	/*
	 * GPU code loads (each with a uretprobe, like the synchronising calls):
	 * a JIT compiler's output (Triton's loadBinary calls cuModuleLoadData)
	 * or a cubin loaded while the process serves, which holds its thread
	 */
	API_CU_MODULE_LOAD_DATA = 22,
	API_CU_MODULE_LOAD_DATA_EX = 23,
	API_COUNT = 24,
	API_SLOTS = 24, /* thread_stats.launches[]: more APIs make it grow */
};

/*
 * Probe classes (issue 20). Sync: the synchronisation points and copies, a
 * few per step, attached whenever a library is traced. Graph: one trap per
 * CUDA graph replay (81 per decode step of vLLM's piecewise graphs in the
 * H100 trace of ../shared/data); attached with --sentinel-launches graphs or
 * all. Launch: one trap per kernel launch, hundreds per step. Graph and
 * launch probes are also attached in deep mode, during a deep-dive and in a
 * --launch-sampling window. Every API in neither mask is of the sync class.
 */
#define API_BIT(api) (1u << (api))
#define API_GRAPH_CLASS                                                                            \
	(API_BIT(API_CUDA_GRAPH_LAUNCH) | API_BIT(API_CUDA_GRAPH_LAUNCH_PTSZ) |                    \
	 API_BIT(API_CU_GRAPH_LAUNCH) | API_BIT(API_CU_GRAPH_LAUNCH_PTSZ))
#define API_DRIVER                                                                                 \
	(API_BIT(API_CU_LAUNCH_KERNEL) | API_BIT(API_CU_LAUNCH_KERNEL_PTSZ) |                      \
	 API_BIT(API_CU_LAUNCH_KERNEL_EX) | API_BIT(API_CU_LAUNCH_KERNEL_EX_PTSZ) |                \
	 API_BIT(API_CU_GRAPH_LAUNCH) | API_BIT(API_CU_GRAPH_LAUNCH_PTSZ) |                        \
	 API_BIT(API_CU_STREAM_SYNCHRONIZE) | API_BIT(API_CU_CTX_SYNCHRONIZE) |                    \
	 API_BIT(API_CU_EVENT_SYNCHRONIZE))
/*
 * API_DRIVER: the driver entry points a runtime call enters (folded into it:
 * cuda.bpf.c, "Nested calls"). A GPU code load is a driver entry point too,
 * but never folded: whoever calls it, its time is a cost of its own
 * (API_CODE_LOAD).
 */
#define API_CODE_LOAD (API_BIT(API_CU_MODULE_LOAD_DATA) | API_BIT(API_CU_MODULE_LOAD_DATA_EX))
#define API_LAUNCH_CLASS                                                                           \
	(API_BIT(API_CUDA_LAUNCH_KERNEL) | API_BIT(API_CUDA_LAUNCH_KERNEL_PTSZ) |                  \
	 API_BIT(API_CUDA_LAUNCH_KERNEL_EXC) | API_BIT(API_CUDA_LAUNCH_KERNEL_EXC_PTSZ) |          \
	 API_BIT(API_CU_LAUNCH_KERNEL) | API_BIT(API_CU_LAUNCH_KERNEL_PTSZ) |                      \
	 API_BIT(API_CU_LAUNCH_KERNEL_EX) | API_BIT(API_CU_LAUNCH_KERNEL_EX_PTSZ))

#define LAUNCH_F_STACK (1u << 0) /* a user stack follows the record */
/*
 * Flight recorder (sentinel): only the arguments passed in registers were
 * taken; those the ABI passes on the stack or behind a pointer (stream and
 * shared memory of cudaLaunchKernel, block z, shared memory and stream of
 * cuLaunchKernel, the launch config of the Ex calls) were not read, because
 * one bpf_probe_read_user() costs more than the rest of the probe.
 */
#define LAUNCH_F_REGS_ONLY (1u << 1)

/*
 * EV_CUDA_LAUNCH, 88 bytes (+ 8 * MAX_STACK_DEPTH with LAUNCH_F_STACK).
 *
 *  0        24    26      28        32       40        48              60
 *  +--------+-----+-------+---------+--------+---------+---------------+
 *  | hdr    | api | flags |stack_sz |  func  | stream  | grid[3]       |
 *  +--------+-----+-------+---------+--------+---------+---------------+
 *  60             72       80       84       88
 *  +--------------+--------+--------+--------+
 *  | block[3]     |  arg   |  kind  |  pad   |
 *  +--------------+--------+--------+--------+
 *
 * func: kernel function (runtime), CUfunction (driver), graph exec (graph
 * launches) or destination address (memcpy). arg: dynamic shared memory bytes
 * for kernel launches, byte count for cudaMemcpyAsync. kind: cudaMemcpyKind.
 * stack_sz: bytes of user stack (__u64 ips) that follow, 0 when none.
 */
struct cuda_launch_event {
	struct event_hdr hdr;
	__u16 api;
	__u16 flags;
	__u32 stack_sz;
	__u64 func;
	__u64 stream;
	__u32 grid[3];
	__u32 block[3];
	__u64 arg;
	__u32 kind;
	__u32 pad;
};
_Static_assert(sizeof(struct cuda_launch_event) == 88, "cuda_launch_event ABI");

struct cuda_launch_stack_event {
	struct cuda_launch_event ev;
	__u64 ips[MAX_STACK_DEPTH];
};
_Static_assert(sizeof(struct cuda_launch_stack_event) == 88 + 8 * MAX_STACK_DEPTH,
	       "cuda_launch_stack_event ABI");

/*
 * EV_CUDA_SYNC, 48 bytes: a synchronising call and how long it blocked.
 * hdr.ts_ns is the entry time.
 *
 *  0        24    26    28      32        40        48
 *  +--------+-----+-----+-------+---------+---------+
 *  | hdr    | api | pad | ret   | stream  | dur_ns  |
 *  +--------+-----+-----+-------+---------+---------+
 */
struct cuda_sync_event {
	struct event_hdr hdr;
	__u16 api;
	__u16 pad;
	__s32 ret;
	__u64 stream;
	__u64 dur_ns;
};
_Static_assert(sizeof(struct cuda_sync_event) == 48, "cuda_sync_event ABI");

enum offcpu_cause {
	OFFCPU_BLOCKED = 0,   /* switched out while sleeping/waiting */
	OFFCPU_PREEMPTED = 1, /* switched out while still runnable */
};

/*
 * EV_OFFCPU, 64 bytes: one off-CPU interval of a traced thread, from
 * switch-out (hdr.ts_ns) to switch-in, above the configured threshold.
 * by_tid/by_comm/by_pid: the task that took the CPU when the thread left it,
 * and its process (thread group).
 *
 *  0        24        32      36       40                56       60    64
 *  +--------+---------+-------+--------+-----------------+--------+-----+
 *  | hdr    | dur_ns  | cause | by_tid | by_comm[16]     | by_pid | pad |
 *  +--------+---------+-------+--------+-----------------+--------+-----+
 */
struct offcpu_event {
	struct event_hdr hdr;
	__u64 dur_ns;
	__u32 cause;
	__u32 by_tid;
	char by_comm[TASK_COMM_LEN];
	__u32 by_pid;
	__u32 pad;
};
_Static_assert(sizeof(struct offcpu_event) == 64, "offcpu_event ABI");

/*
 * EV_RUNQ, 32 bytes: run-queue wait (wake-up or preemption until the thread
 * ran again) above the threshold. hdr.ts_ns is when the wait began.
 */
struct runq_event {
	struct event_hdr hdr;
	__u64 dur_ns;
};
_Static_assert(sizeof(struct runq_event) == 32, "runq_event ABI");

/*
 * EV_SYSCALL, 48 bytes: one syscall above the threshold; hdr.ts_ns is entry.
 *
 *  0        24        32        40     44     48
 *  +--------+---------+---------+------+------+
 *  | hdr    | dur_ns  |  ret    |  nr  | pad  |
 *  +--------+---------+---------+------+------+
 */
struct syscall_event {
	struct event_hdr hdr;
	__u64 dur_ns;
	__s64 ret;
	__u32 nr;
	__u32 pad;
};
_Static_assert(sizeof(struct syscall_event) == 48, "syscall_event ABI");

/*
 * EV_TCP_RETRANS, 72 bytes. Addresses in network byte order; IPv4 uses the
 * first 4 bytes. hdr.pid is the owning process when known (0 otherwise),
 * hdr.tid is 0.
 *
 *  0      24          40          56      58      60       62      63   64     68    72
 *  +------+-----------+-----------+-------+-------+--------+-------+----+------+-----+
 *  | hdr  | saddr[16] | daddr[16] | sport | dport | family | state |pad | netns| pad |
 *  +------+-----------+-----------+-------+-------+--------+-------+----+------+-----+
 */
struct tcp_retrans_event {
	struct event_hdr hdr;
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u16 family;
	__u8 state;
	__u8 pad;
	__u32 netns;
	__u32 pad2;
};
_Static_assert(sizeof(struct tcp_retrans_event) == 72, "tcp_retrans_event ABI");

/*
 * EV_PROC_EXEC / EV_PROC_EXIT / EV_LIB_MAP, 112 bytes. name: for
 * EV_LIB_MAP the file name of the mapped library (basename), else empty.
 * code: exit code for EV_PROC_EXIT.
 */
struct process_event {
	struct event_hdr hdr;
	char comm[TASK_COMM_LEN];
	char name[LIB_NAME_LEN];
	__s32 code;
	__u32 pad;
};
_Static_assert(sizeof(struct process_event) == 112, "process_event ABI");

/* ---- aggregates kept in BPF maps and read by the agent every interval ---- */

/*
 * thread_stats: value of map thread_stats, key = tid. Counters only grow;
 * the agent reports differences between two reads. Fields after "scratch"
 * are BPF working state, not reported.
 */
struct thread_stats {
	__u32 pid;
	__u32 tid;
	__u64 launches[API_SLOTS];
	__u64 sync_count;
	__u64 sync_ns;
	__u64 offcpu_blocked_ns;
	__u64 offcpu_preempted_ns;
	__u64 offcpu_count;
	__u64 runq_ns;
	__u64 runq_count;
	__u64 offcpu_hist[HIST_SLOTS]; /* log2(us) buckets */
	__u64 runq_hist[HIST_SLOTS];   /* log2(us) buckets */
	__u64 stacks;		       /* user stacks captured */
	__u64 stacks_limited;	       /* stacks skipped by the rate limit */
	__u64 nested; /* driver entry points called by a traced runtime one: not in launches[] */
	/* scratch */
	__u64 offcpu_start_ns;
	__u64 runq_start_ns;
	__u64 sc_start_ns;
	__u64 sync_start_ns;
	__u64 stack_refill_ns;
	__u64 sync_stream;
	__u32 sc_nr;
	__u32 offcpu_cause;
	__u32 offcpu_by_tid;
	__u32 stack_tokens;
	__u16 sync_api;
	__u16 pad16;
	__u32 pad32;
	char offcpu_by_comm[TASK_COMM_LEN];
	/* IP socket bytes gathered for the next EV_NET_IO (bpf/net.bpf.c) */
	__u64 net_first_ns;
	__u64 net_last_ns;
	__u64 net_tx_bytes;
	__u64 net_rx_bytes;
	/*
	 * The runtime launch this thread entered last, until the driver call it
	 * nests is seen (bpf/cuda.bpf.c, nested_driver_call): entry time (0:
	 * none), the probed function's address, and whether it was a graph launch
	 */
	__u64 rt_call_ns;
	__u64 rt_call_ip;
	__u32 rt_call_graph;
	__u32 sync_nested;   /* inside a driver sync nested in the open runtime one */
	__u32 offcpu_by_pid; /* the process of offcpu_by_tid */
	__u32 pad_by;
};
_Static_assert(sizeof(struct thread_stats) % 8 == 0, "thread_stats alignment");

struct syscall_key {
	__u32 tid;
	__u32 nr;
};

struct syscall_stats {
	__u32 pid;
	__u32 pad;
	__u64 count;
	__u64 total_ns;
	__u64 max_ns;
	__u64 hist[HIST_SLOTS]; /* log2(us) buckets */
};
_Static_assert(sizeof(struct syscall_stats) == 32 + 8 * HIST_SLOTS, "syscall_stats ABI");

struct netdev_key {
	__u32 netns; /* network namespace inode number */
	__u32 ifindex;
};

struct netdev_stats {
	char name[16];
	__u64 rx_bytes;
	__u64 rx_packets;
	__u64 tx_bytes;
	__u64 tx_packets;
};
_Static_assert(sizeof(struct netdev_stats) == 48, "netdev_stats ABI");

/* value of map traced_procs, key = tgid */
#define PROC_F_DEEP (1u << 0) /* deep capture for this process */
struct traced_proc {
	__u32 instance_id;
	__u32 flags;
};

enum agent_mode {
	MODE_SENTINEL = 0,
	MODE_DEEP = 1,
};

/*
 * EV_STEP_MARK, 56 bytes: INFERTRACE_STEP_BEGIN / INFERTRACE_STEP_END of
 * include/infertrace/step.h in a traced process (bpf/usdt.bpf.c). The agent
 * feeds them to the step segmenter (docs/diagnosis.md); they are not records
 * of their own.
 */
enum step_mark_kind {
	STEP_MARK_BEGIN = 0,
	STEP_MARK_END = 1,
};
struct step_mark_event {
	struct event_hdr hdr;
	__u32 kind;			/* enum step_mark_kind */
	__s32 phase;			/* INFERTRACE_PHASE_* (begin) */
	__s64 tokens, batch, kv_tokens; /* begin; -1 when unknown */
};
_Static_assert(sizeof(struct step_mark_event) == 56, "step_mark_event ABI");

/*
 * EV_NET_IO, 48 bytes: IP socket payload bytes a traced thread sent and received
 * between hdr.ts_ns and hdr.ts_ns + dur_ns (bpf/net.bpf.c). A thread's
 * bytes are gathered for up to NET_IO_WINDOW_NS and sent when the window is
 * over or the thread leaves the CPU. The agent feeds them to the step
 * segmenter (a step's net_bytes); they are not records of their own.
 */
#define NET_IO_WINDOW_NS 1000000ULL
struct net_io_event {
	struct event_hdr hdr;
	__u64 dur_ns;
	__u64 tx_bytes;
	__u64 rx_bytes;
};
_Static_assert(sizeof(struct net_io_event) == 48, "net_io_event ABI");

/*
 * A traced Python process, as bpf/python.bpf.c walks it (map py_procs, tgid
 * -> struct py_proc, written by agent/sources/python.c). The agent knows the
 * interpreter's version and fills in where its structures keep what the
 * walk reads (agent/sources/python_layout.h); the program itself knows no
 * Python version. PY_OFF_NONE: the version has no such field.
 */
#define PY_OFF_NONE 0xffff
struct py_proc {
	__u64 interp_head;    /* address of _PyRuntime.interpreters.head in the process */
	__u16 interp_threads; /* PyInterpreterState.threads.head */
	__u16 tstate_next;    /* PyThreadState.next */
	__u16 tstate_tid;     /* PyThreadState.native_thread_id */
	__u16 tstate_frame;   /* PyThreadState.cframe (3.11, 3.12), .current_frame (3.13), .frame
				 (3.10) */
	__u16 cframe_frame;   /* _PyCFrame.current_frame; PY_OFF_NONE (3.13) */
	__u16 frame_code;     /* _PyInterpreterFrame.f_code (.f_executable in 3.13) */
	__u16 frame_previous; /* _PyInterpreterFrame.previous */
	__u16 frame_owner;    /* _PyInterpreterFrame.owner (a char) */
	__u8 owner_cstack;    /* FRAME_OWNED_BY_CSTACK (3.12+), skipped; 0xff: none, not read */
	/*
	 * 1: tstate_tid holds pthread_self() (3.10's thread_id, no native id),
	 * matched with the task's fs base (x86-64 glibc: pthread_self() is it)
	 */
	__u8 tid_is_pthread;
	__u8 pad;
	/*
	 * where the frame says which instruction it runs: _PyInterpreterFrame
	 * .prev_instr (3.11, 3.12), .instr_ptr (3.13), PyFrameObject.f_lasti
	 * (3.10, an int); 8 bytes read, the agent makes the line of it
	 */
	__u16 frame_instr;
	__u8 pad2[2];
};
_Static_assert(sizeof(struct py_proc) == 32, "py_proc ABI");

/*
 * EV_PY_STACK, 32 + 16 x n bytes (hdr.size): a traced Python thread's frames
 * when the sampling timer (--python-hz) found it on a CPU, innermost first:
 * the code object of each frame (PyCodeObject *; 0 for the entry frame a
 * C call leaves, 3.12+), which the agent reads (name, file, first line,
 * line table) from the process, and the 8 bytes at py_proc.frame_instr
 * (the instruction it runs: its line). On rb_misc.
 *
 * With PY_F_LAUNCH, the frames that made a CUDA launch (deep mode, with the
 * launch's user stack: --stack-rate): on rb_cuda, just before that launch's
 * EV_CUDA_LAUNCH, with its tid and ts_ns (bpf/cuda.bpf.c); not a sample.
 */
#define PY_STACK_DEPTH 32
#define PY_F_TRUNCATED 1 /* more than PY_STACK_DEPTH frames: the outermost are missing */
#define PY_F_LAUNCH 2	 /* the frames of the launch that follows, not a sample */
struct py_stack_event {
	struct event_hdr hdr;
	__u16 n; /* frames in f[] */
	__u16 flags;
	__u32 pad;
	struct py_frame {
		__u64 code;
		__u64 instr;
	} f[PY_STACK_DEPTH];
};
_Static_assert(sizeof(struct py_stack_event) == 544, "py_stack_event ABI");

/*
 * NCCL entry points probed by bpf/nccl.bpf.c (signatures: NCCL 2.28's nccl.h,
 * /usr/local/cuda/include/nccl.h). Names in agent/pipeline/nccl_live.c
 * (nccl_api_name(), must match).
 */
enum nccl_api {
	NCCL_ALL_REDUCE = 0,
	NCCL_ALL_GATHER = 1,
	NCCL_REDUCE_SCATTER = 2,
	NCCL_BROADCAST = 3,
	NCCL_BCAST = 4, /* not probed: NCCL implements it with ncclBroadcast */
	NCCL_REDUCE = 5,
	NCCL_ALLTOALL = 6, /* ncclAlltoAll, 2.28 and later */
	NCCL_SEND = 7,
	NCCL_RECV = 8,
	NCCL_GROUP_START = 9,
	NCCL_GROUP_END = 10,
	NCCL_COMM_INIT_RANK = 11,
	NCCL_COMM_INIT_RANK_CONFIG = 12,
	NCCL_COMM_INIT_ALL = 13,
	NCCL_COMM_SPLIT = 14,
	NCCL_COMM_DESTROY = 15,
	NCCL_COMM_ABORT = 16,
	NCCL_COMM_INIT_RANK_SCALABLE = 17, /* ncclCommInitRankScalable, 2.23 and later */
	/*
	 * not an entry point: the entry of ncclCommSplit (EV_NCCL_COMM with
	 * parent, color, key; n_comms 0), sent besides its return so that the
	 * agent has every rank's color and key when the first split returns
	 */
	NCCL_COMM_SPLIT_ENTER = 18,
	/*
	 * not an entry point: the entry of ncclCommInitRank(Config/Scalable)
	 * (nranks, rank, id; n_comms 0), besides its return: an init is
	 * collective, so every local rank's entry comes before the first
	 * return, and the agent knows the ranks to expect before any of them
	 * calls a collective
	 */
	NCCL_COMM_INIT_ENTER = 19,
	NCCL_API_COUNT = 20,
};

#define NCCL_F_REGS_ONLY (1u << 0) /* sentinel: stream (on the stack) not read */
#define NCCL_ID_BYTES 128	   /* NCCL_UNIQUE_ID_BYTES */
#define NCCL_INIT_ALL_MAX 8	   /* comms of ncclCommInitAll reported */

/*
 * EV_NCCL_CALL, 80 bytes: entry of a collective, ncclSend/ncclRecv, or a
 * ncclGroupStart/End (hdr.ts_ns = entry: the enqueue time). comm is the
 * ncclComm_t pointer: the agent maps it to (unique id hash, rank, nranks)
 * from the EV_NCCL_COMM of its init. root: root (broadcast, reduce) or peer
 * (send, recv), else -1. redop: ncclRedOp_t, else -1. group_id: the
 * thread's outermost ncclGroupStart entry time, 0 outside a group;
 * group_depth: its nesting after this call.
 *
 *  0      24    26      28        32     40      48       56      60     64         72       76 80
 *  +------+-----+-------+---------+------+-------+--------+-------+------+----------+--------+-----+
 *  | hdr  | api | flags |datatype | comm | count | stream | redop | root | group_id | depth  | pad
 * |
 *  +------+-----+-------+---------+------+-------+--------+-------+------+----------+--------+-----+
 */
struct nccl_call_event {
	struct event_hdr hdr;
	__u16 api;
	__u16 flags;
	__s32 datatype;
	__u64 comm;
	__u64 count;
	__u64 stream;
	__s32 redop;
	__s32 root;
	__u64 group_id;
	__u32 group_depth;
	__u32 pad;
};
_Static_assert(sizeof(struct nccl_call_event) == 80, "nccl_call_event ABI");

/*
 * EV_NCCL_COMM, 256 bytes: a communicator's life. Init calls and split are
 * reported at return (hdr.ts_ns = entry, dur_ns, ret = ncclResult_t), with
 * the new comm pointer(s) read from the caller's out argument; destroy and
 * abort at entry (dur_ns 0, ret 0); a split and a rank's init also at
 * entry (api NCCL_COMM_SPLIT_ENTER, NCCL_COMM_INIT_ENTER; n_comms 0, ret
 * 0). id: the ncclUniqueId passed by
 * value to ncclCommInitRank(Config), copied from the stack at entry, or the
 * first of ncclCommInitRankScalable's list (commIds[0]).
 */
struct nccl_comm_event {
	struct event_hdr hdr;
	__u16 api;
	__u16 n_comms; /* comms[] filled */
	__s32 ret;
	__u64 dur_ns;
	__u64 parent;			/* ncclCommSplit: the parent comm */
	__s32 nranks;			/* init: nranks (InitAll: ndev); -1 unknown */
	__s32 rank;			/* init: rank; -1 unknown */
	__s32 color;			/* split */
	__s32 key;			/* split */
	__u64 comms[NCCL_INIT_ALL_MAX]; /* comms[0]: the new or ended comm */
	__u8 id[NCCL_ID_BYTES];
};
_Static_assert(sizeof(struct nccl_comm_event) == 256, "nccl_comm_event ABI");

/* one-entry array map runtime_cfg: settings the agent changes while running */
struct runtime_cfg {
	__u32 mode;	   /* enum agent_mode for every traced process */
	__u32 deep_stacks; /* capture user stacks at launches in deep mode */
	__u64 offcpu_thresh_ns;
	__u64 runq_thresh_ns;
	__u64 syscall_thresh_ns;
	__u64 sync_thresh_ns;
	__u32 stack_rate;  /* stacks per thread per second */
	__u32 deep_procs;  /* number of traced_procs entries with PROC_F_DEEP */
	__u32 flight;	   /* sentinel: entries per CPU in the flight map (a power of 2); 0: off */
	__u32 flight_cpus; /* CPUs the flight map has slices for */
	__u64 stack_period_ns; /* 1e9 / stack_rate: no division per call */
	/*
	 * API bits (API_BIT) of the graph and launch classes whose probes count
	 * and record for processes not in deep capture: set by
	 * --sentinel-launches and during --launch-sampling windows. Their
	 * uprobes are attached only then (or for a deep-dive); the mask makes a
	 * window end at once while the detach of its links is under way
	 * (agent/sources/uprobes.c).
	 */
	__u32 launches;
	/*
	 * sentinel: entries per CPU in the nccl_slots map (a power of 2), where
	 * NCCL calls of processes not in deep capture go; 0: on rb_cuda
	 */
	__u32 nccl_slots;
	/*
	 * bumped by the agent whenever traced_procs changes (a process traced,
	 * untraced, or its PROC_F_DEEP switched): a thread's cached verdict
	 * (bpf/nccl.bpf.c, nccl_thread) is read again when it differs
	 */
	__u32 trace_gen;
	__u32 pad;
};
_Static_assert(sizeof(struct runtime_cfg) == 80, "runtime_cfg ABI");

/*
 * The kernel half of the flight recorder (agent/pipeline/recorder.c): in sentinel
 * mode every launch of a traced thread is written, with the arguments its
 * registers hold, into its CPU's slice of the array map "flight" (a ring
 * of flight_per_cpu entries per CPU, overwritten in turn; no lock, no
 * wakeup). The agent reads the slices through mmap at every tick of its
 * loop (<= 100 ms) into its own window, in this binary form, and formats
 * JSON only when a window is sent or exported. The user stack, at the
 * deep-mode rate, is an id in the stack map "flight_stacks".
 *
 * seq is 0 while BPF writes an entry and n + 1 once entry n of that CPU is
 * complete; a reader that sees seq change under it drops the copy.
 */
struct flight_launch {
	__u64 seq;
	__s32 stack_id; /* < 0: no stack */
	__u32 pad;
	struct cuda_launch_event ev; /* flags has LAUNCH_F_REGS_ONLY where it applies */
};
_Static_assert(sizeof(struct flight_launch) == 104, "flight_launch ABI");

/*
 * The write cursor of one CPU's slice of a per-CPU slot array ("flight_cur"
 * for "flight", "nccl_cur" for "nccl_slots"), one cache line each. Every
 * slot array's entry starts with its __u64 seq, written as above
 * (bpf/lib/common.bpf.h slot_begin/slot_end; agent/sources/slots.c reads).
 */
struct slot_cursor {
	__u64 n; /* entries written on this CPU so far */
	__u64 pad[7];
};
_Static_assert(sizeof(struct slot_cursor) == 64, "slot_cursor ABI");

/*
 * Sentinel's NCCL arrivals (bpf/nccl.bpf.c): each call of a thread not in
 * deep capture is written, as the EV_NCCL_CALL deep mode would send, into
 * its CPU's slice of the mmap'able array map "nccl_slots"
 * (runtime_cfg.nccl_slots entries per CPU), with seq as in struct
 * flight_launch; the agent copies the slices on every loop turn and merges
 * them in time order with rb_cuda's communicator records
 * (agent/sources/slots.c). When a slice's cursor crosses a multiple of half
 * the slice, the writer also puts an EV_NCCL_WAKE on rb_cuda, which wakes the
 * agent before the slice wraps.
 */
struct nccl_slot {
	__u64 seq;
	struct nccl_call_event ev; /* flags has NCCL_F_REGS_ONLY */
};
_Static_assert(sizeof(struct nccl_slot) == 88, "nccl_slot ABI");

/* load-time settings, written into .rodata between open and load */
struct agent_cfg {
	__u32 self_pid; /* the agent itself is never traced */
	/*
	 * 1: nccl_task is task storage (Linux 5.12); 0: a hash by tid, where
	 * the kernel does not let uprobe programs use task storage
	 * (agent/sources/loader.c, task_storage_usable())
	 */
	__u32 task_storage;
	/*
	 * The Python sampler's clock ticks per sample (bpf/python.bpf.c,
	 * py_sample; agent/sources/loader.c, loader_py_ticks()): 1, or the
	 * mean of the random gap between two samples
	 */
	__u32 py_ticks;
	__u32 pad;
};

/* ---- GPU side: records the CUPTI shim sends to the agent (issue 3) ---- */

/*
 * EV_GPU_KERNEL / EV_GPU_MEMCPY / EV_GPU_MEMSET: one GPU activity.
 * hdr.pid = the CUDA process, hdr.tid = 0 (CUPTI activity records carry no
 * thread), hdr.ts_ns = start. Times are CLOCK_MONOTONIC ns. hdr.cpu (a
 * process sends these, not a CPU) holds GPU_F_* flags; 0 from shims before
 * them, which the agent reads as "a launch may come".
 */
/*
 * The shim sampled out this record's launch callback (always-on mode,
 * INFERTRACE_SHIM_LAUNCH_RATE): no launch will come for it to join, and the
 * agent does not wait for one.
 */
#define GPU_F_NO_LAUNCH (1u << 0)
struct gpu_activity_event {
	struct event_hdr hdr;
	__u64 start_ns;
	__u64 end_ns;
	__u32 correlation_id;
	__u32 device;
	__u32 context;
	__u32 stream;
	__u32 graph_id;
	__u32 graph_node_id_lo;
	__u32 graph_node_id_hi;
	__u32 grid[3];
	__u32 block[3];
	__u32 copy_kind;	 /* memcpy: CUpti_ActivityMemcpyKind */
	__u64 bytes;		 /* memcpy/memset */
	char name[GPU_NAME_LEN]; /* kernel name, mangled, NUL-terminated, cut */
};
_Static_assert(sizeof(struct gpu_activity_event) == 104 + GPU_NAME_LEN, "gpu_activity_event ABI");

/*
 * EV_GPU_LAUNCH_CB: the shim's launch callback (API exit) on the launching
 * thread; ties correlation_id to (pid, tid, ts). cbid/domain as CUPTI's.
 */
struct gpu_launch_cb_event {
	struct event_hdr hdr;
	__u32 correlation_id;
	__u32 cbid;
	__u32 domain;
	__u32 pad;
};
_Static_assert(sizeof(struct gpu_launch_cb_event) == 40, "gpu_launch_cb_event ABI");

/*
 * EV_GPU_MARKER, 136 bytes: one NVTX range call seen by the shim's NVTX
 * callbacks (nvtxRangePush/Pop, nvtxRangeStart/End and their domain forms),
 * on the calling thread at hdr.ts_ns. The agent pairs push with pop per
 * thread and start with end by id into markers for the step segmenter.
 */
enum gpu_marker_kind {
	MARKER_PUSH = 0,
	MARKER_POP = 1,
	MARKER_START = 2,
	MARKER_END = 3,
};
#define MARKER_NAME_LEN 96
struct gpu_marker_event {
	struct event_hdr hdr;
	__u32 kind; /* enum gpu_marker_kind */
	__u32 pad;
	__u64 range_id;		    /* START/END: nvtxRangeId_t */
	char name[MARKER_NAME_LEN]; /* PUSH/START: the message, NUL-terminated, cut */
};
_Static_assert(sizeof(struct gpu_marker_event) == 136, "gpu_marker_event ABI");

/*
 * EV_GPU_DEVICE, 48 bytes: a CUDA device of the process (CUPTI's device
 * record, CUpti_ActivityDevice5: id and uuid), once per device. The agent
 * maps the device numbers of the process's GPU records (gpu_activity_event
 * .device, renumbered by CUDA_VISIBLE_DEVICES) to the GPU's UUID, which NVML
 * names too (agent/sources/gpu_telemetry.c). hdr.ts_ns: when the shim read it.
 */
#define GPU_DEV_F_MIG (1u << 0) /* a MIG instance: uuid is its parent GPU's */
struct gpu_device_event {
	struct event_hdr hdr;
	__u32 device; /* CUPTI's deviceId, as in gpu_activity_event */
	__u32 flags;  /* GPU_DEV_F_* */
	__u8 uuid[16];
};
_Static_assert(sizeof(struct gpu_device_event) == 48, "gpu_device_event ABI");

#define SHIM_CLOCK_MONOTONIC_CB 0 /* CUPTI converts with our callback */
#define SHIM_CLOCK_OFFSET 1	  /* CUPTI clock + measured offset (fallback) */
#define SHIM_CLOCK_NONE 2	  /* no GPU: the shim is inert */

struct shim_status_event {
	struct event_hdr hdr;
	__u32 abi_version;
	__u32 clock_mode;
	__s64 clock_offset_ns;
	__u64 records_sent;
	__u64 records_dropped; /* channel full or agent absent */
	__u64 cupti_dropped;   /* cuptiActivityGetNumDroppedRecords */
	__u32 capture;	       /* enum agent_mode */
	__u32 pad;
};
_Static_assert(sizeof(struct shim_status_event) == 72, "shim_status_event ABI");

#endif /* INFERTRACE_EVENTS_H */
