/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * correlator.h - joins CPU-side CUDA launches with GPU activity records,
 * live (uprobe launches + CUPTI shim callbacks + activity records) or from a
 * recording (Kineto / PyTorch profiler traces, Nsight Systems SQLite exports,
 * the agent's own JSON lines).
 *
 * Join key: (host pid, correlation id). A shim launch callback (API exit) is
 * tied to the uprobe launch (API entry) of the same thread: the latest
 * unmatched uprobe launch with ts <= callback ts, within match_window_ns.
 * A runtime call and its nested driver call share one correlation id: the
 * launch is counted once (the earliest entry wins). Graph-replayed kernels all
 * join the one graph launch of their correlation id.
 *
 * Threading: a struct corr is not thread-safe. One thread owns it and makes
 * every call; callbacks (emit, log) run synchronously on that thread, inside
 * the corr__* call that completed the join or evicted the record.
 *
 * Ownership: pointers passed in (names, options) are copied or used only for
 * the duration of the call. Pointers handed to callbacks are valid only
 * during the callback.
 *
 * Errors: functions return 0 or -errno; constructors return NULL with errno
 * set. The library never prints: it logs through opts.log.
 */
#ifndef INFERTRACE_CORRELATOR_H
#define INFERTRACE_CORRELATOR_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * "schema" of every JSON line the agent and this library write (the common
 * fields, docs/events.md): defined here once, under every writer.
 */
#define INFERTRACE_SCHEMA_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

struct corr;

enum corr_kind {
	CORR_KIND_KERNEL = 0,
	CORR_KIND_MEMCPY = 1,
	CORR_KIND_MEMSET = 2,
	CORR_KIND_COUNT,
};

/* time sources; opts.clock_offset_ns[src] is added to every ts of that source */
enum corr_src {
	CORR_SRC_UPROBE = 0,   /* bpf uprobe launches (CLOCK_MONOTONIC: the base) */
	CORR_SRC_CALLBACK = 1, /* CUPTI shim launch callbacks */
	CORR_SRC_GPU = 2,      /* GPU activity records */
	CORR_SRC_TRACE = 3,    /* launches read from a recording */
	CORR_SRC_COUNT,
};

enum corr_log_level {
	CORR_LOG_ERROR = 0,
	CORR_LOG_WARN = 1,
	CORR_LOG_INFO = 2,
	CORR_LOG_DEBUG = 3
};

/* a launch on the CPU side, as the emit callback sees it */
struct corr_launch {
	uint32_t pid;
	uint32_t tid;
	uint64_t ts_ns; /* API entry (uprobe or trace), else callback time */
	uint32_t corr_id;
	uint32_t cbid;	    /* CUPTI callback id, 0 when unknown */
	const char *api;    /* entry point name, e.g. "cudaLaunchKernel"; never NULL */
	bool from_uprobe;   /* ts_ns is the uprobe's API entry time */
	bool from_callback; /* a shim callback confirmed the correlation id */
};

/* a GPU activity record (input and output) */
struct corr_gpu {
	enum corr_kind kind;
	uint32_t pid; /* host pid; 0 = unknown (Kineto: see CORR_F_PID_FROM_LAUNCH) */
	uint32_t corr_id;
	uint32_t device;
	uint32_t context;
	uint32_t stream;
	uint32_t graph_id;	/* 0 outside graphs */
	uint64_t graph_node_id; /* 0 outside graphs */
	uint64_t start_ns;
	uint64_t end_ns;
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t copy_kind; /* memcpy: CUpti_ActivityMemcpyKind */
	uint64_t bytes;	    /* memcpy/memset */
	const char *name;   /* mangled as recorded; may be NULL */
	uint32_t flags;	    /* CORR_GPU_F_* */
	/*
	 * corr_name_hash() of name, on the records the correlator emits, so
	 * that their consumers (steps, stats) intern the name without hashing
	 * it again; 0: not known. Whoever changes name sets it to 0. The
	 * correlator ignores it on input.
	 */
	uint64_t name_hash;
};

/* the hash the name tables intern by (name_hash above) */
uint64_t corr_name_hash(const char *s, size_t len);

/*
 * Strings kept once each, by an id from 0 in order of arrival: the
 * correlator's own name table (src/names.c), for the agent's tables of
 * distinct strings (--summary's kernel names and Python stacks). At most
 * max_strings of them and max_bytes of their text (0: no byte bound);
 * their text stays where it is until corr_strtab_free().
 */
struct corr_strtab;
struct corr_strtab *corr_strtab_new(uint32_t max_strings, size_t max_bytes); /* NULL + errno */
void corr_strtab_free(struct corr_strtab *t);
/* s's id (made when new); -ENOSPC past a bound, -ENOMEM. hash: corr_name_hash(s), 0 unknown */
int32_t corr_strtab_id(struct corr_strtab *t, const char *s, size_t len, uint64_t hash);
/* the text of id (NUL-terminated) and its length; NULL for an id not given */
const char *corr_strtab_str(const struct corr_strtab *t, int32_t id, size_t *len);
uint32_t corr_strtab_count(const struct corr_strtab *t);

/*
 * No launch was or will be sent for this record (the shim sampled its
 * launch callback out: GPU_F_NO_LAUNCH): emitted unmatched at once, neither
 * looked up nor waiting in the queue.
 */
#define CORR_GPU_F_NO_LAUNCH (1u << 0)

/*
 * Called once per GPU record, joined (l != NULL) or not (l == NULL: the
 * launch never came, was evicted, or belonged to an exited process).
 * g->pid is the launch's pid when joined.
 */
typedef void (*corr_emit_fn)(void *ctx, const struct corr_gpu *g, const struct corr_launch *l);
typedef void (*corr_log_fn)(void *ctx, enum corr_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * GPU records carry no host pid (Kineto writes the device as pid): join on
 * the correlation id alone, which is unique within one recorded process, and
 * take the pid from the launch.
 */
#define CORR_F_PID_FROM_LAUNCH (1u << 0)

struct corr_opts {
	size_t sz;		  /* sizeof(struct corr_opts) */
	uint32_t flags;		  /* CORR_F_* */
	uint32_t launch_capacity; /* launches kept for joining; 0: 131072 */
	uint32_t gpu_capacity;	  /* GPU records waiting for their launch; 0: 65536 */
	uint32_t thread_capacity; /* threads with pending uprobe launches; 0: 4096 */
	/*
	 * launches older than (newest launch ts - window_ns) are retired, GPU
	 * records waiting longer than that (by the same clock) are emitted
	 * unmatched. 0: 10 s; UINT64_MAX: capacity only (replay).
	 */
	uint64_t window_ns;
	uint64_t match_window_ns; /* uprobe entry -> callback exit bound; 0: 100 ms */
	/*
	 * A kernel may not start earlier than its launch minus this slack
	 * (clock jitter between sources); otherwise the pair is refused. 0: 1 ms.
	 */
	uint64_t max_skew_ns;
	int64_t clock_offset_ns[CORR_SRC_COUNT];
	corr_emit_fn emit;
	void *emit_ctx;
	corr_log_fn log; /* may be NULL */
	void *log_ctx;
};

/* counters; they only grow */
struct corr_counters {
	uint64_t uprobe_launches;
	uint64_t callbacks;
	uint64_t callbacks_with_uprobe; /* callback tied to a uprobe launch */
	uint64_t callbacks_without_uprobe;
	uint64_t launches;		/* distinct (pid, corr id) launches */
	uint64_t launches_nested;	/* same key again (runtime -> driver): counted once */
	uint64_t launches_expired;	/* retired by the window */
	uint64_t launches_evicted;	/* pushed out by capacity */
	uint64_t launches_dropped_exit; /* dropped at process exit */
	uint64_t uprobes_evicted;	/* uprobe launches no callback claimed */
	uint64_t threads_evicted;
	uint64_t threads_pruned; /* threads of exited processes dropped */
	uint64_t gpu_records;
	uint64_t joined;	/* GPU records joined to a launch */
	uint64_t joined_late;	/* ... after waiting for their launch */
	uint64_t unmatched;	/* GPU records emitted without a launch */
	uint64_t gpu_evicted;	/* unmatched because the wait queue was full */
	uint64_t no_launch;	/* unmatched at once: CORR_GPU_F_NO_LAUNCH */
	uint64_t refused;	/* a candidate launch refused (time order, pid reuse) */
	uint64_t names_dropped; /* name table full: record emitted without name */
	uint64_t kinds[CORR_KIND_COUNT];
};

struct corr *corr__new(const struct corr_opts *opts);
void corr__free(struct corr *c); /* accepts NULL; does not flush */

/* a uprobe launch: API entry on (pid, tid) at ts_ns; api = enum cuda_api */
int corr__add_uprobe_launch(struct corr *c, uint32_t pid, uint32_t tid, uint64_t ts_ns,
			    uint16_t api);
/*
 * a shim launch callback: API exit on (pid, tid) with its correlation id;
 * domain/cbid as CUPTI's (CUPTI_CB_DOMAIN_DRIVER_API 1, RUNTIME_API 2)
 */
int corr__add_callback(struct corr *c, uint32_t pid, uint32_t tid, uint64_t ts_ns, uint32_t corr_id,
		       uint32_t domain, uint32_t cbid);
/* a launch that already carries its correlation id (recordings) */
int corr__add_launch(struct corr *c, uint32_t pid, uint32_t tid, uint64_t ts_ns, uint32_t corr_id,
		     uint32_t cbid, const char *api);
/* a GPU activity record; emitted now if its launch is known, else queued */
int corr__add_gpu(struct corr *c, const struct corr_gpu *g);
/*
 * The process exited at ts_ns: its queued GPU records are emitted unmatched
 * and its launches dropped; a later process with the same pid never joins
 * them, nor GPU records that started before ts_ns.
 */
int corr__process_exit(struct corr *c, uint32_t pid, uint64_t ts_ns);
/* retire state older than now_ns - window (live: call every interval) */
int corr__advance(struct corr *c, uint64_t now_ns);
/* emit every queued GPU record as unmatched (end of input) */
int corr__flush(struct corr *c);
const struct corr_counters *corr__counters(const struct corr *c);
/* GPU records waiting for their launch right now */
uint32_t corr__pending(const struct corr *c);

/* name of an enum cuda_api value (bpf/events.h), "unknown" otherwise */
const char *corr_api_name(uint16_t api);
/* a driver (cu*) entry point rather than a runtime (cuda*) one */
bool corr_api_is_driver(uint16_t api);
/* name of a CUPTI launch callback id (runtime or driver domain), or NULL */
const char *corr_cbid_name(uint32_t domain, uint32_t cbid);

/*
 * Itanium C++ demangling through __cxa_demangle from libstdc++.so.6, loaded
 * with dlopen on first use (no C++ in this repository). Results are cached
 * per name. Returns NULL when the name is not mangled, the library is
 * missing, or demangling fails. The string stays valid until
 * corr_demangle_cache_free(). Not thread-safe (one owning thread).
 */
const char *corr_demangle(const char *mangled);
void corr_demangle_cache_free(void);

/* ---------------------------------------------------------------- stats -- */

/*
 * Per-interval statistics over emitted GPU records: per process (instance),
 * GPU busy time per device (union of activity), idle gaps between busy
 * periods, per-stream busy time, launch-to-start percentiles and the top
 * kernels by total time. Same threading rules as struct corr.
 */
struct corr_stats;

#define CORR_STATS_MAX_DEV 16
#define CORR_STATS_MAX_STREAMS 32
#define CORR_STATS_MAX_TOP 16

struct corr_stats_opts {
	size_t sz;
	uint32_t top_n;	     /* top kernels reported; 0: 5, at most CORR_STATS_MAX_TOP */
	uint64_t gap_min_ns; /* idle gaps shorter than this are not gaps; 0: 0 */
	uint32_t capacity;   /* records held per interval; 0: 1 << 20; more are counted */
};

struct corr_summary {
	uint32_t pid;	       /* 0: GPU records whose process is unknown */
	uint64_t t0_ns, t1_ns; /* the interval [t0, t1) by record start */
	uint64_t kernels, memcpys, memsets;
	uint64_t matched, unmatched;
	uint64_t memcpy_bytes;
	uint32_t n_dev;
	struct {
		uint32_t device;
		uint64_t busy_ns; /* union of activity on the device */
		uint64_t gaps;	  /* idle gaps between busy periods, >= gap_min_ns */
		uint64_t gap_ns;  /* total of those gaps */
		uint64_t gap_max_ns;
	} dev[CORR_STATS_MAX_DEV];
	uint32_t n_streams;
	struct {
		uint32_t device, stream;
		uint64_t busy_ns;
		uint64_t records;
	} streams[CORR_STATS_MAX_STREAMS];
	uint64_t l2s_count; /* launch-to-start samples (joined records) */
	uint64_t l2s_p50_ns, l2s_p90_ns, l2s_p99_ns, l2s_max_ns;
	uint32_t n_top;
	struct {
		const char *name; /* valid until the next corr_stats__cut() */
		uint64_t count;
		uint64_t total_ns;
	} top[CORR_STATS_MAX_TOP];
};

/* called once per process with records in the interval */
typedef void (*corr_summary_fn)(void *ctx, const struct corr_summary *s);

struct corr_stats *corr_stats__new(const struct corr_stats_opts *opts);
void corr_stats__free(struct corr_stats *st);
/* record one emitted GPU record (call it from the emit callback) */
int corr_stats__add(struct corr_stats *st, const struct corr_gpu *g, const struct corr_launch *l);
/*
 * Summarise the records that started before t1_ns (t0_ns is only reported),
 * one callback per pid, and forget them. Later records stay for the next cut.
 */
int corr_stats__cut(struct corr_stats *st, uint64_t t0_ns, uint64_t t1_ns, corr_summary_fn fn,
		    void *ctx);
/* earliest start held, UINT64_MAX when empty */
uint64_t corr_stats__first_ts(const struct corr_stats *st);
uint64_t corr_stats__dropped(const struct corr_stats *st);

/* --------------------------------------------------------------- replay -- */

enum corr_format {
	CORR_FMT_AUTO = 0,
	CORR_FMT_KINETO, /* Chrome trace JSON, plain or gzip */
	CORR_FMT_NSYS,	 /* Nsight Systems SQLite export */
	CORR_FMT_JSONL,	 /* the agent's own JSON lines */
};

/* a marker of a recording (python_function, user_annotation, NVTX range) */
struct corr_marker {
	uint32_t pid, tid;
	uint64_t ts_ns, dur_ns;
	const char *cat; /* "python_function", "user_annotation", "nvtx" */
	const char *name;
};
typedef void (*corr_marker_fn)(void *ctx, const struct corr_marker *m);
/* a communication op of a recording (record_param_comms, nccl:*): collective.h */
struct corr_comm_op;
typedef void (*corr_comm_fn)(void *ctx, const struct corr_comm_op *op);
/* a launching thread's CPU side in the agent's own JSON lines (offcpu, syscall, cuda_code_load):
 * diagnose.h */
struct diag_cpu_event;
typedef void (*corr_cpu_fn)(void *ctx, const struct diag_cpu_event *e);
/*
 * A launch's Python frames as the agent's JSON lines hold them (a kernel,
 * memcpy or memset record's launch_python, docs/events.md), innermost
 * first. Strings are valid UTF-8 (the reader's JSON parser refuses
 * others); a field the record lacks or holds as another type (or a
 * negative line) is NULL or -1.
 */
struct corr_py_frame {
	const char *function, *file;
	int64_t first_line, line;
};
#define CORR_PY_FRAMES_MAX 32 /* as many as the agent writes (PY_STACK_DEPTH) */
/*
 * The frames of the launch (pid, tid, launch_ts) a GPU record of the
 * agent's JSON lines is about to be joined to again, n of them; n 0: the
 * record has none (or had them in a shape not the agent's, counted in
 * corr_replay_stats.python_bad)
 */
typedef void (*corr_frames_fn)(void *ctx, uint32_t pid, uint32_t tid, uint64_t launch_ts,
			       const struct corr_py_frame *f, size_t n);

/*
 * A recording's Python function spans (Kineto's python_function events,
 * "path/file.py(LINE): name", per thread; pyspans.c): asked for the frames
 * that enclosed a launch's time on its thread, innermost first, as
 * corr_py_frame (function, file, first_line = LINE; line -1: Kineto records
 * no call line). The strings stay valid until corr_pyspans__free().
 */
struct corr_pyspans;
struct corr_pyspans_counts {
	uint64_t spans;	     /* Python calls kept */
	uint64_t not_python; /* events of another name (built-ins): no frame */
	uint64_t dropped;    /* no memory */
	uint64_t sorts;	     /* threads whose spans came out of order, sorted once each time */
	uint64_t truncated;  /* stacks deeper than asked for: the outermost left out */
};
struct corr_pyspans *corr_pyspans__new(void);
void corr_pyspans__free(struct corr_pyspans *ps);
/* a span [start, start + dur) of thread (pid, tid) named name (len bytes, not NUL-ended) */
int corr_pyspans__add(struct corr_pyspans *ps, uint32_t pid, uint32_t tid, uint64_t start,
		      uint64_t dur, const char *name, size_t len);
/* the frames open at ts on (pid, tid) into out (at most max); how many */
size_t corr_pyspans__stack(struct corr_pyspans *ps, uint32_t pid, uint32_t tid, uint64_t ts,
			   struct corr_py_frame *out, size_t max);
void corr_pyspans__counts(const struct corr_pyspans *ps, struct corr_pyspans_counts *out);

struct corr_replay_opts {
	size_t sz;
	enum corr_format format; /* CORR_FMT_AUTO: detect from the content */
	corr_marker_fn marker;	 /* may be NULL; called on the caller's thread */
	void *marker_ctx;
	corr_log_fn log;
	void *log_ctx;
	/*
	 * May be NULL. Set non-zero (from a signal handler) to stop a replay:
	 * reading, gunzip and every reader check it at least every few MiB or
	 * thousand records, and a blocked open() or read() interrupted by the
	 * signal returns; the call then fails with -EINTR after flushing what
	 * was read.
	 */
	const volatile sig_atomic_t *stop;
	/*
	 * May be NULL: Kineto's communication ops (cpu_op record_param_comms
	 * and nccl:*, and the communication arguments a kernel event carries),
	 * called on the caller's thread as they are read (collective.h)
	 */
	corr_comm_fn comm;
	void *comm_ctx;
	/*
	 * May be NULL: the CPU events of the agent's own JSON lines (offcpu:
	 * blocked or preempted, syscall), called on the caller's thread as
	 * they are read, for the steps' breakdown (diag_seg__add_cpu())
	 */
	corr_cpu_fn cpu;
	void *cpu_ctx;
	/*
	 * May be NULL: the Python frames of the launches in the agent's own
	 * JSON lines, called on the caller's thread before each GPU record
	 * with a launch is joined again (its emit follows at once), so the
	 * replayed record can carry them as the recorded one did
	 */
	corr_frames_fn frames;
	void *frames_ctx;
	/*
	 * May be NULL: Kineto's python_function events are added to it as
	 * they are read, for the caller to ask which Python calls enclosed a
	 * launch (PyTorch writes them before the launches)
	 */
	struct corr_pyspans *pyspans;
};

struct corr_replay_stats {
	enum corr_format format;
	uint64_t bytes;	      /* input size, uncompressed */
	uint64_t events;      /* input events seen */
	uint64_t launches;    /* launch events fed */
	uint64_t gpu_records; /* GPU records fed */
	uint64_t markers;
	uint64_t skipped; /* events of no interest */
	struct corr_counters corr;
	uint64_t comm_ops;	/* communication ops handed to corr_replay_opts.comm */
	uint64_t cpu_events;	/* CPU events handed to corr_replay_opts.cpu */
	uint64_t python_frames; /* GPU records whose frames went to corr_replay_opts.frames */
	uint64_t python_bad;	/* launch_python not an array of at most 32 objects: dropped */
	bool dist_known;	/* Kineto's distributedInfo gave the rank and world size */
	uint32_t dist_rank, dist_world;
};

/*
 * A recording read into memory by corr_replay_load(): its text (gunzipped
 * when it was gzip), or only a note that it is an SQLite export in a regular
 * file, which SQLite reads in place from its path.
 */
struct corr_input {
	char *buf;  /* NUL-terminated; NULL when in_place */
	size_t len; /* bytes of buf, or of the file when in_place */
	bool in_place;
	bool owned; /* buf is freed by corr_input_release() */
};

/* format name for logs and records */
const char *corr_format_name(enum corr_format f);
/*
 * Detect the format of a file from its first bytes: 0 or -errno. It opens
 * and reads the file: not for FIFOs or pipes (corr_replay_load() is).
 */
int corr_replay_detect(const char *path, enum corr_format *out);
/*
 * Read a recording and feed it through a correlator made from copts (the
 * reader adds CORR_F_PID_FROM_LAUNCH for Kineto and widens the window to
 * capacity-only), flush it, free it. copts->emit receives every GPU record.
 * A malformed or truncated file fails with -EINVAL (-EIO when unreadable)
 * after logging the byte offset or line; records emitted before the error
 * stay emitted.
 */
int corr_replay_file(const char *path, const struct corr_opts *copts,
		     const struct corr_replay_opts *ropts, struct corr_replay_stats *stats);
/* the same on a buffer in memory (any format, gzip too; tests, fuzzing) */
int corr_replay_buf(const char *buf, size_t len, const struct corr_opts *copts,
		    const struct corr_replay_opts *ropts, struct corr_replay_stats *stats);
/*
 * corr_replay_file() in two steps, for a caller that looks at the input
 * first: load opens path once and reads it as a stream (a FIFO or a pipe
 * works; nothing is reopened or seeked), gunzips it within the limits of
 * docs/operations.md ("Replay limits"); 0 or -errno, logged. Then
 * corr_replay_input() replays it (path names it in logs; needed in_place).
 */
int corr_replay_load(const char *path, const struct corr_replay_opts *ropts, struct corr_input *in);
int corr_replay_input(const char *path, const struct corr_input *in, const struct corr_opts *copts,
		      const struct corr_replay_opts *ropts, struct corr_replay_stats *stats);
void corr_input_release(struct corr_input *in);

/* ------------------------------------------------------------ JSON out -- */

/* the common fields every record starts with (docs/events.md) */
struct corr_json_common {
	const char *host;
	const char *instance;
};

/*
 * Format one deep-mode record ("kernel", "memcpy" or "memset") as one JSON
 * object without newline into buf. Returns the length, or -ENOSPC when buf
 * is too small (nothing useful written). Field list: docs/events.md.
 */
int corr_gpu_to_json(char *buf, size_t sz, const struct corr_json_common *cm,
		     const struct corr_gpu *g, const struct corr_launch *l);

#ifdef __cplusplus
}
#endif

#endif /* INFERTRACE_CORRELATOR_H */
