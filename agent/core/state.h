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
	int32_t rank; /* among its instance's workers, from its environment; -1 */
	int libs[MAX_PROC_LIBS]; /* indexes into agent.libs */
	int n_libs;
	int maps_pending; /* >0: re-read maps at the next tick (tries so far) */
	int n_exec_maps; /* executable file mappings at the last maps read */
	struct usdt_link *usdt; /* files with step probes it maps (usdt.c) */
	int n_usdt;
	bool usdt_counted; /* counted in usdt_procs (once per process) */
	int gone_intervals; /* intervals since it exited: its slot goes after 2 */
};

/* a library file with probes attached, shared by every process mapping it */
struct libfile {
	bool used;
	dev_t dev;
	ino_t ino;
	char path[600]; /* as opened: /proc/PID/root/<path in the process> */
	char display[512]; /* path inside the process */
	bool is_driver; /* libcuda (driver API) rather than libcudart */
	int users; /* traced processes mapping it */
	struct bpf_link **links;
	int n_links;
	int missing; /* symbols the file lacks */
	bool rejected; /* no probe could be attached: said once, never retried */
};

/* user-space counters; bpf counters live in the maps */
struct agent_counters {
	uint64_t records; /* ring records decoded */
	uint64_t bad_records; /* malformed ring records */
	uint64_t emitted[REC_CLASS_COUNT];
	uint64_t sink_errors;
	uint64_t json_errors;
	uint64_t attach_errors;
	uint64_t procs_seen;
	uint64_t procs_exited;
	uint64_t proc_table_full;
	uint64_t maps_read_errors;
	uint64_t shim_errors;
	uint64_t usdt_procs; /* processes with the step probes attached */
	uint64_t usdt_errors; /* attaches that failed, per process and file */
	uint64_t usdt_files; /* distinct files found carrying the step probes */
	uint64_t usdt_files_read; /* distinct files whose ELF notes were read */
	uint64_t step_marks; /* step probe hits decoded */
};

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
	/* a process's CUPTI shim: deep or always-on capture; agent/sources/shim.c */
	int (*shim_mode)(struct agent *a, uint32_t pid, enum agent_mode mode);
	/* a flight-recorder launch entry as cuda_launch JSON; agent/sources/decode.c */
	long (*flight_json)(struct agent *a, const struct flight_launch *f, char *buf, size_t cap);
};

struct agent {
	struct agent_opts opts;
	struct capture_hooks cap;
	char host[256];
	char default_instance[INSTANCE_LEN];
	struct infertrace_bpf *skel;
	struct ring_buffer *rb;
	bool in_ring; /* a ring callback runs: ring_buffer__consume() must not nest */
	struct sink *sinks[MAX_SINKS];
	int n_sinks;
	struct agent_counters cnt;
	struct proc procs[MAX_PROCS];
	int n_procs;
	uint32_t next_instance_id;
	struct libfile libs[MAX_LIBFILES];
	uint64_t start_ns;
	uint64_t last_interval_ns;
	void *agg; /* aggregate.c state */
	struct gpu *gpu; /* pipeline/join.c, live; NULL when GPU-side capture is off */
	struct shim_src *shim; /* sources/shim.c: the shims' socket; NULL: not open */
	struct diag *diag; /* diag.c: steps and anomalies; NULL when off */
	struct ops *ops; /* ops.h: deep-dive, flight recorder, control, metrics */
	struct usdt_cache *usdt; /* usdt.c: which files carry step probes */
};

/* log.c: the libraries' log callback (corr_log_fn); ctx is a message prefix */
void agent_lib_log(void *ctx, enum corr_log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* loop.c: fds of the event loop, each with a callback run when readable */
int loop_init(void);
int agent_watch_fd(struct agent *a, int fd, void (*fn)(struct agent *a, void *ctx), void *ctx);
void agent_unwatch_fd(struct agent *a, int fd);
int loop_wait(struct agent *a, int timeout_ms); /* ready fds handled, or -errno */
void loop_free(void);

/*
 * pipeline/join.c: the GPU join, one object for the live agent (a->gpu,
 * gpu_init) and for each --replay (gpu_new(a, true), whose reader's
 * correlator emits into gpu_joined()).
 */
struct corr_summary;
struct corr_launch;
struct gpu;
struct gpu_counts {
	uint64_t joined;	/* GPU records out of the correlator */
	uint64_t too_long;	/* records over 64 KiB, not written */
	uint64_t summaries;	/* gpu_summary records */
	uint64_t stats_dropped; /* records the interval statistics could not hold */
	int err;		/* the first sink error (-EIO) */
};
struct gpu *gpu_new(struct agent *a, bool recording); /* NULL + errno */
/* the correlator's emit callback (struct corr_opts.emit, ctx: the gpu) */
void gpu_joined(void *ctx, const struct corr_gpu *g, const struct corr_launch *l);
void gpu_finish(struct gpu *gp); /* the last summaries */
void gpu_counts(const struct gpu *gp, struct gpu_counts *out);
void gpu_destroy(struct gpu *gp);
int gpu_init(struct agent *a); /* live: a->gpu, unless --shim-socket none */
void gpu_on_launch(struct agent *a, const struct cuda_launch_event *e);
/* the shims' records, from agent/sources/shim.c */
void gpu_on_activity(struct agent *a, const struct corr_gpu *g);
void gpu_on_callback(struct agent *a, const struct gpu_launch_cb_event *cb);
void gpu_on_marker(struct agent *a, const struct gpu_marker_event *e);
/* a process left: its launches leave the correlator */
void gpu_on_process_exit(struct agent *a, uint32_t pid, uint64_t ts_ns);

/* sources/shim.c: the CUPTI shims' socket as a source (after gpu_init) */
struct shim_src;
int shim_init(struct agent *a);
/* a traced process ended: its shim's last records, then the correlator and discovery */
void shim_on_exit(struct agent *a, uint32_t pid, uint64_t ts_ns);
void shim_interval(struct agent *a); /* read what is left, push the deep mode to new shims */
void shim_stats(struct agent *a, json_t *stats_record);
void shim_free(struct agent *a);
void gpu_interval(struct agent *a, bool final);
void gpu_stats(struct agent *a, json_t *stats_record);
void gpu_free(struct agent *a);
/* diag.c: steps and anomalies, live and in replay */
struct diag_seg;
struct diag_det;
struct diag_step;
struct diag_cpu_event;
struct corr_gpu;
struct corr_launch;
struct corr_marker;
struct diag {
	struct agent *a;
	struct diag_seg *seg;
	struct diag_det *det;
	uint64_t steps, anomalies;
	uint64_t dive_errors; /* --anomaly-deep-dive refused (logged once; deep_dive.refused) */
	int err; /* first sink error */
};
int diag_option(const char *name, const char *arg); /* --step-markers, --baseline ... */
int diag_new(struct agent *a, struct diag **out); /* *out NULL: diagnosis is off */
void diag_on_gpu(struct diag *d, const struct corr_gpu *g, const struct corr_launch *l);
void diag_on_marker(struct diag *d, const struct corr_marker *m);
void diag_on_cpu(struct diag *d, const struct diag_cpu_event *e);
void diag_on_step_mark(struct diag *d, const struct step_mark_event *e);
void diag_add_step(struct diag *d, const struct diag_step *s); /* recorded steps: judge only */
void diag_advance(struct diag *d, uint64_t now_ns);
void diag_stats(struct diag *d, json_t *r); /* the stats record's "diag" object */
int diag_finish(struct diag *d); /* flush, save the baseline */
void diag_free(struct diag *d);
/* pipeline/steprec.c: the step record's one writer and one reader */
json_t *steprec_to_json(struct agent *a, const struct diag_step *s); /* NULL: no memory */
/* 0; -ENOENT: not a step record; -EINVAL: no positive dur_ns or an unknown phase */
int steprec_from_json(const json_t *o, struct diag_step *s);


/* loader.c: open, configure, load, attach the skeleton */
int loader_start(struct agent *a);
void loader_stop(struct agent *a);
int loader_update_runtime_cfg(struct agent *a);
/* a traced process's flags in traced_procs (PROC_F_DEEP), only if it is there */
int loader_set_proc_flags(struct agent *a, uint32_t pid, uint32_t instance_id, uint32_t flags);
/* sum a per-CPU counter map into out[EV_TYPE_MAX] */
int loader_read_type_counts(struct agent *a, int map_fd, uint64_t *out);

/* uprobes.c: CUDA library probes, once per file */
int uprobes_attach_file(struct agent *a, int lib_idx);
void uprobes_detach_file(struct agent *a, int lib_idx); /* asynchronous: see uprobes.c */
/* takes links (a malloc()ed array) and destroys them off the event loop */
void uprobes_reap_links(struct bpf_link **links, int n);
void uprobes_reaper_stop(void); /* waits for queued detaches */
/* entry point names: corr_api_name() (correlator.h), the one table */

/* discovery.c */
int discovery_start(struct agent *a); /* initial /proc scan or --pid set */
void discovery_on_lib_map(struct agent *a, uint32_t pid);
void discovery_on_exec(struct agent *a, uint32_t pid);
void discovery_on_exit(struct agent *a, uint32_t pid);
void discovery_tick(struct agent *a); /* retries, reaps dead processes */
void discovery_reap(struct agent *a); /* free slots of exited processes */
void discovery_stop(struct agent *a);
/* the live process with this pid, else one that exited but is not reaped yet */
struct proc *proc_find(struct agent *a, uint32_t pid);
struct proc *proc_find_live(struct agent *a, uint32_t pid);
#define PROC_GONE UINT64_MAX /* proc.start_time of an exited process */
/* parse one /proc/PID/maps line; exposed for unit tests */
int maps_parse_line(const char *line, unsigned long *dev_major, unsigned long *dev_minor,
		    unsigned long *ino, char *path, size_t path_sz, bool *exec);
/* is this file name a CUDA runtime (1) or driver (2) library, else 0 */
int cuda_lib_kind(const char *path);
/* instance name from an environment block (NUL separated), else NULL */
const char *instance_from_environ(const char *env, size_t len, char *out, size_t out_sz);
int rank_from_environ(const char *env, size_t len);

/* decode.c: ring records -> JSON */
int decode_record(struct agent *a, const void *data, size_t size);

/* usdt.c: the step probes of include/infertrace/step.h */
#define USDT_LINKS 2
/* an executable mapping of path (dev, ino as in /proc/PID/maps): attach if it has the probes */
int usdt_on_mapping(struct agent *a, struct proc *p, dev_t dev, ino_t ino, const char *path);
void usdt_detach(struct proc *p); /* every file of the process */
void usdt_free(struct agent *a); /* the file cache, at shutdown */
/* a cuda_launch record's JSON (deep mode, and the flight recorder's kernel half) */
#define DECODE_LAUNCH_MAX (1024 + MAX_STACK_DEPTH * 24)
long decode_launch_json(struct agent *a, const struct cuda_launch_event *e, size_t size,
			char *buf, size_t cap); /* length, or -errno (counted) */
/* the same from a flight-recorder entry, its stack looked up by id */
long decode_flight_json(struct agent *a, const struct flight_launch *f, char *buf, size_t cap);
const char *syscall_name(unsigned nr);
const char *tcp_state_name(unsigned state);

/* aggregate.c: per-interval summaries from the maps */
int aggregate_init(struct agent *a);
void aggregate_interval(struct agent *a, bool final);
void aggregate_free(struct agent *a);
void aggregate_print_summary(struct agent *a, FILE *out);
/* a single slow-syscall event, counted for the readable summary */
void aggregate_note_syscall(struct agent *a, uint32_t tid, uint32_t nr, uint64_t dur_ns);
/* bucket lower bound in us for a histogram slot; must match bpf hist_slot() */
uint64_t hist_lower_us(unsigned slot);
json_t *hist_to_json(const __u64 *slots, const __u64 *prev, unsigned n);

/* stats.c: the agent's own counters as a "stats" record */
void stats_emit(struct agent *a, uint64_t interval_ns, bool final);
/* core/names.c: the name of an event type in stats and metrics ("step_mark"); NULL: none */
const char *event_type_name(int type);

/* thread names */
const char *thread_comm(uint32_t pid, uint32_t tid, char *buf, size_t sz);

#endif /* INFERTRACE_STATE_H */
