/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * state.h - the agent's internal state and the modules that share it.
 * Everything here runs on the event loop thread.
 */
#ifndef INFERTRACE_STATE_H
#define INFERTRACE_STATE_H

#include <sys/types.h>
#include "agent.h"
#include "correlator.h"

struct infertrace_bpf;
struct ring_buffer;
struct bpf_link;
struct ops;
struct usdt_link;
struct usdt_cache;

#define MAX_SINKS 4
#define MAX_PROCS 4096
#define PROC_BUCKETS 8192 /* a power of two, twice MAX_PROCS */
#define MAX_LIBFILES 256
#define MAX_PROC_LIBS 8
#define INSTANCE_LEN 128

/* a traced process */
struct proc {
	bool used;
	uint32_t pid;
	uint64_t start_time; /* /proc/PID/stat field 22: tells a reused pid apart */
	uint32_t instance_id;
	char comm[TASK_COMM_LEN];
	char instance[INSTANCE_LEN];
	int32_t rank;		 /* among its instance's workers, from its environment; -1 */
	int libs[MAX_PROC_LIBS]; /* indexes into agent.libs */
	int n_libs;
	int maps_pending;	/* >0: re-read maps at the next tick (tries so far) */
	int n_exec_maps;	/* executable file mappings at the last maps read */
	struct usdt_link *usdt; /* files with step probes it maps (usdt.c) */
	int n_usdt;
	bool usdt_counted;  /* counted in usdt_procs (once per process) */
	struct pyproc *py;  /* sources/python.c: its Python's frames are sampled; NULL: not */
	bool py_refused;    /* a Python the walk does not know: said once */
	int gone_intervals; /* intervals since it exited: its slot goes after 2 ... */
	uint64_t gone_ns;   /* ... and PROC_GONE_KEEP_NS after its exit (discovery.c) */
};

/* a library file with probes attached, shared by every process mapping it */
struct libfile {
	bool used;
	dev_t dev;
	ino_t ino;
	char path[600];	   /* as opened: /proc/PID/root/<path in the process>, PID a live user */
	uint32_t path_pid; /* that PID (discovery.c keeps it a live user's) */
	int fd;		   /* the file, open (-1: not): opened by that path when PID is gone */
	char display[512]; /* path inside the process */
	bool is_driver;	   /* libcuda (driver API) rather than libcudart */
	bool is_nccl;	   /* libnccl (agent/sources/nccl.c attaches it) */
	int users;	   /* traced processes mapping it */
	uint64_t idle_since_ns; /* users fell to 0 then: kept for --lib-grace; 0: in use */
	struct bpf_link **links;
	int n_links;
	int missing;   /* symbols the file lacks */
	bool rejected; /* no probe could be attached: said once, never retried */
};

/* user-space counters; bpf counters live in the maps */
struct agent_counters {
	uint64_t records;     /* ring records decoded */
	uint64_t bad_records; /* malformed ring records */
	uint64_t emitted[REC_CLASS_COUNT];
	uint64_t sink_errors;
	uint64_t json_errors;
	uint64_t attach_errors;
	uint64_t procs_seen;
	uint64_t procs_exited;
	uint64_t procs_gone_early; /* exited before discovery could read them */
	uint64_t threads_held;	   /* aggregate.c: per-thread entries held (live, listed exited) */
	uint64_t threads_unlisted; /* aggregate.c: exited threads summed and freed */
	uint64_t proc_table_full;
	uint64_t maps_read_errors;
	uint64_t shim_errors;
	uint64_t usdt_procs;	      /* processes with the step probes attached */
	uint64_t usdt_errors;	      /* attaches that failed, per process and file */
	uint64_t usdt_files;	      /* distinct files found carrying the step probes */
	uint64_t usdt_files_read;     /* distinct files whose ELF notes were read */
	uint64_t step_marks;	      /* step probe hits decoded */
	uint64_t files_idle;	      /* library files kept attached without a user (discovery.c) */
	uint64_t files_reused;	      /* ... that a new process mapped in time: no attach */
	uint64_t files_idle_detached; /* ... detached: grace over, or room for another */
};

/* the kernel half's rings as agent/sources/flight.c sees them (stats.recorder.kernel_launches) */
struct flight_counts {
	uint32_t per_cpu, cpus;
	uint64_t written;     /* launches the BPF side wrote, all CPUs */
	uint64_t overwritten; /* of which lost before they were copied */
	uint64_t pulls;	      /* pulls that handed at least one launch to the recorder */
	uint64_t no_stack;    /* handed launches whose stack could not be kept */
};

/* sentinel's NCCL call slots as agent/sources/slots.c sees them (stats.nccl) */
struct nccl_slot_counts {
	uint32_t per_cpu;     /* entries per CPU; 0: off */
	uint64_t written;     /* calls the BPF side wrote, all CPUs */
	uint64_t overwritten; /* of which lost before they were copied */
};

struct jsonw;
/*
 * How the pipeline's capture decisions (deep-dives) reach the sources: each
 * source registers its half when it starts; NULL while that source is off.
 * The pipeline calls these, never the sources' files (calls go down).
 */
struct capture_hooks {
	/* traced_procs flags of a process (PROC_F_DEEP); agent/sources/loader.c */
	int (*proc_flags)(struct agent *a, uint32_t pid, uint32_t instance_id, uint32_t flags);
	/* runtime_cfg re-read (it counts deep-dived processes); loader.c */
	int (*runtime_cfg)(struct agent *a);
	/* per-launch uprobes on or off as deep-dives need them; agent/sources/uprobes.c */
	void (*launch_probes)(struct agent *a);
	/* a process's CUPTI shim: deep or always-on capture; agent/sources/shim.c */
	int (*shim_mode)(struct agent *a, uint32_t pid, enum agent_mode mode);
	/*
	 * The flight recorder's kernel half; agent/sources/flight.c. Copy the
	 * launches the BPF side wrote since the last call into the recorder
	 * (recorder_kernel_launch() each); its rings' counters; an entry as
	 * cuda_launch JSON (a buffer of DECODE_LAUNCH_MAX bytes holds any).
	 */
	void (*flight_pull)(struct agent *a);
	void (*flight_counts)(struct agent *a, struct flight_counts *out);
	long (*flight_json)(struct agent *a, const struct flight_launch *f, char *buf, size_t cap);
	/*
	 * Sentinel's NCCL call slots; agent/sources/slots.c. Copy what they
	 * hold before a deep-dive moves processes between the slots and
	 * rb_cuda (the calls are handed on in time order with the ring's);
	 * their counters.
	 */
	void (*nccl_flush)(struct agent *a);
	void (*nccl_counts)(struct agent *a, struct nccl_slot_counts *out);
	/*
	 * The Python frames of the launch (pid, tid, ts) a GPU record was
	 * joined to, written into w as its "launch_python" field (key and
	 * array); false: none known. agent/pipeline/join.c appends the field
	 * to the record and counts it (gpu_counts.launch_python);
	 * agent/sources/python.c live, agent/sources/replay.c from a recording
	 */
	bool (*launch_python)(struct agent *a, uint32_t pid, uint32_t tid, uint64_t ts,
			      struct jsonw *w);
};

/* bytes of a Python qualified name or file kept, with its NUL (agent/sources/python.c) */
#define PY_NAME_MAX 128
/* a Python frame as JSON at most (agent/sources/python.c checks it), and a stack's */
#define PY_FRAME_JSON_MAX 900
#define PY_STACK_JSON_MAX (PY_STACK_DEPTH * PY_FRAME_JSON_MAX)
#define DECODE_LAUNCH_MAX (1024 + MAX_STACK_DEPTH * 24 + PY_STACK_JSON_MAX)

#define IN_RB_CUDA 1u
#define IN_RB 2u

struct agent {
	struct agent_opts opts;
	struct capture_hooks cap;
	char host[256];
	char default_instance[INSTANCE_LEN];
	struct infertrace_bpf *skel; /* agent/sources/loader.c's alone */
	struct ring_buffer *rb_cuda; /* loader_open_rings(): rb_cuda */
	struct ring_buffer *rb;	     /* loader_open_rings(): rb_sched and rb_misc */
	/* IN_RB_CUDA, IN_RB: that one's callback runs; its ring_buffer__consume() must not nest */
	uint8_t in_ring;
	/* --replay: set by SIGINT / SIGTERM (main.c); the step segmenter's cut stops on it */
	const volatile sig_atomic_t *stop;
	struct sink *sinks[MAX_SINKS];
	int n_sinks;
	struct agent_counters cnt;
	struct proc procs[MAX_PROCS];
	int n_procs;
	uint64_t procs_checked_ns; /* discovery_tick(): last check of the start times */
	/* procs by pid (core/agent.c): slot index + 1 of each chain's head, 0: none */
	int32_t proc_head[PROC_BUCKETS];
	int32_t proc_next[MAX_PROCS]; /* the next slot of the same bucket, + 1 */
	uint32_t next_instance_id;
	struct libfile libs[MAX_LIBFILES];
	uint64_t start_ns;
	/* --summary's digest covers from here: start_ns, or the last `agentctl summary --reset` */
	uint64_t summary_ns;
	uint64_t summary_records; /* records written before summary_ns (the digest's header) */
	uint64_t last_interval_ns;
	void *agg;		    /* aggregate.c state */
	struct gpu *gpu;	    /* pipeline/join.c, live; NULL when GPU-side capture is off */
	struct shim_src *shim;	    /* sources/shim.c: the shims' socket; NULL: not open */
	struct telem *telem;	    /* sources/gpu_telemetry.c: NVML; NULL: --gpu-telemetry off */
	struct pysrc *python;	    /* sources/python.c: Python frames; NULL: --python-stacks off */
	struct replay *replay;	    /* sources/replay.c: --replay's state; NULL: live */
	struct pyprof *pyprof;	    /* pipeline/pyprof.c: --summary's GPU time by Python call */
	struct gpusum *gpusum;	    /* pipeline/gpusum.c: --summary's GPU records */
	struct diag *diag;	    /* diag.c: steps and anomalies; NULL when off */
	struct recorder *rec;	    /* pipeline/recorder.c: the flight recorder; NULL: off */
	struct recent *recent;	    /* pipeline/recent.c: the last anomaly records; NULL: replay */
	struct deepdive *dd;	    /* pipeline/deepdive.c; NULL before ops_init() */
	struct ops *ops;	    /* control/ops.h: control socket, metrics, control topic */
	struct usdt_cache *usdt;    /* usdt.c: which files carry step probes */
	struct nccl_live *nccl;	    /* pipeline/nccl_live.c; NULL until the first NCCL record */
	uint32_t sentinel_launches; /* uprobes.c: runtime_cfg.launches (API bits recording) */
};

/* log.c: the libraries' log callback (corr_log_fn); ctx is a message prefix */
void agent_lib_log(void *ctx, enum corr_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* loop.c: fds of the event loop, each with a callback run when readable */
int loop_init(void);
int agent_watch_fd(struct agent *a, int fd, void (*fn)(struct agent *a, void *ctx), void *ctx);
/* the same, edge-triggered: fn when fd is woken, not while it holds data (the rings) */
int agent_watch_fd_edge(struct agent *a, int fd, void (*fn)(struct agent *a, void *ctx), void *ctx);
void agent_unwatch_fd(struct agent *a, int fd);
int loop_wait(struct agent *a, int timeout_ms); /* ready fds handled, or -errno */
void loop_free(void);

/* core/agent.c: the live process with this pid, else one that exited but is not reaped yet */
struct proc *proc_find(struct agent *a, uint32_t pid);
struct proc *proc_find_live(struct agent *a, uint32_t pid);
/* core/agent.c: the pid index of procs[]; discovery calls these as it fills or frees a slot */
void proc_index_add(struct agent *a, struct proc *p);
void proc_index_del(struct agent *a, struct proc *p);
#define PROC_GONE UINT64_MAX /* proc.start_time of an exited process */

/* core/names.c */
const char *syscall_name(unsigned nr);
const char *tcp_state_name(unsigned state);
/* the name of an event type in stats and metrics ("step_mark"); NULL: none */
const char *event_type_name(int type);

/* thread names */
const char *thread_comm(uint32_t pid, uint32_t tid, char *buf, size_t sz);

#endif /* INFERTRACE_STATE_H */
