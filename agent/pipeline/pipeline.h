/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * pipeline.h - the pipeline's entry points, the same for the live agent and
 * --replay (docs/architecture.md, "Layout"). The sources feed it: GPU
 * records and launches (join.c), CPU events, step marks and recorded steps
 * (diag.c), finished records (rec_emit() in agent.h, decided by route.c);
 * the loop ticks it (gpu_interval, diag_advance) and finishes it
 * (gpu_finish, diag_finish). Deep-dives and the flight recorder, the
 * pipeline's policy, are below; control (agent/control/) switches them.
 *
 * Threading: the event loop thread, like everything in the agent.
 */
#ifndef INFERTRACE_PIPELINE_H
#define INFERTRACE_PIPELINE_H

#include "state.h"
#include "util.h"     /* struct prom_hist */
#include "diagnose.h" /* struct diag_det_counters */

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
	uint64_t launch_python; /* records given their launch's Python frames */
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

void gpu_interval(struct agent *a, bool final);
void gpu_stats(struct agent *a, json_t *stats_record);
/* --metrics' histogram of launch to GPU start (seconds) of the joined records; empty without */
const struct prom_hist *gpu_l2s_hist(const struct agent *a);
void gpu_free(struct agent *a);
/*
 * pyprof.c: --summary's GPU time by the Python calls that launched it
 * (a->pyprof, made by main.c with --summary). join.c adds each record it
 * gives launch_python: that JSON array (innermost frame first) and the
 * record's GPU time; the tree is printed at exit, live and in a replay.
 */
struct pyprof;
struct pyprof *pyprof_new(void); /* NULL + errno */
void pyprof_add(struct pyprof *pp, const char *frames_json, size_t len, uint64_t gpu_ns);
void pyprof_print(const struct pyprof *pp, FILE *out); /* nothing when no record came */
void pyprof_free(struct pyprof *pp);
/*
 * gpusum.c: --summary's GPU records section (a->gpusum, made by main.c with
 * --summary): join.c adds every record it joins, sent or not; printed at
 * exit, live and after a replay
 */
struct gpusum;
struct gpusum *gpusum_new(void); /* NULL + errno */
void gpusum_add(struct gpusum *s, const struct corr_gpu *g, const struct corr_launch *l);
void gpusum_print(const struct gpusum *s, FILE *out); /* nothing when no record came */
void gpusum_free(struct gpusum *s);
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
	uint64_t dive_errors;	 /* --anomaly-deep-dive refused (logged once; deep_dive.refused) */
	int err;		 /* first sink error */
	struct diag_wait *waits; /* recent cross-rank waits, a ring (diag_on_wait) */
	uint32_t nwaits, wnext;
	uint32_t *step_pids;	  /* processes with steps, direct-mapped by pid */
	struct diag_strag *strag; /* stragglers from a wait alone, held (diag_on_straggler) */
	uint32_t nstrag;
	uint64_t strag_in_steps, strag_written;
	/* GPU clocks for the suspects (diag_on_gpu_reading, diag_on_gpu_device); live only */
	struct diag_gpu **gpus;	 /* by NVML's index, DIAG_GPUS */
	struct diag_pdev **pdev; /* a process's CUDA devices, direct-mapped by pid */
	uint64_t clock_suspects;
	uint64_t python_suspects;
	/* every step's duration by phase, unknown to mixed (--metrics, --summary) */
#define DIAG_STEP_PHASES 4
	struct diag_step_series *series; /* --metrics' histograms (diag_step_hist()) */
	uint32_t n_series, series_max;	 /* series_max: --metrics-instances */
	bool series_other;		 /* one of them is "_other" */
	uint64_t series_idle_ns;	 /* --metrics-instance-idle; 0: never */
	uint64_t series_now;		 /* diag_advance()'s latest time (steps' last_ns) */
	uint64_t series_expired;	 /* series gone for want of steps or anomalies */
	struct {
		uint64_t hash; /* of the instance name as given; 0: empty slot */
		uint32_t idx;
	} series_cache[64];
	struct qhist step_q[DIAG_STEP_PHASES];
	uint64_t first_step_ns; /* the earliest start seen; 0: none */
	/* --summary: the longest steps, longest first, and the anomaly that flagged each */
#define DIAG_SLOWEST 5
	struct diag_slow {
		uint64_t start_ns, dur_ns;
		uint32_t pid;
		int32_t rank;
		int phase, kind; /* kind: enum diag_kind, -1 while no anomaly names it */
		char instance[64];
	} slowest[DIAG_SLOWEST];
	uint32_t n_slowest;
	/*
	 * --summary per instance: steps by phase and anomalies by kind of the
	 * first DIAG_SUM_INSTANCES instances, then of the others together (the
	 * slot after them); made at the first step, NULL without memory
	 */
#define DIAG_SUM_INSTANCES 8
	struct diag_inst_sum *isum;
	uint32_t n_isum, isum_last; /* named slots; the last one used (a step's cache) */
	bool isum_others, isum_nomem;
	/* the counters at `agentctl summary --reset`: --summary prints what came since */
	uint64_t base_steps;
	struct diag_det_counters base;
};
/* --step-markers, --baseline, --baseline-save, --detect into ao->diag: 0, -EINVAL, -ENOENT */
int diag_option(struct agent_opts *ao, const char *name, const char *arg);
int diag_new(struct agent *a, struct diag **out); /* *out NULL: diagnosis is off */
void diag_on_gpu(struct diag *d, const struct corr_gpu *g, const struct corr_launch *l);
void diag_on_marker(struct diag *d, const struct corr_marker *m);
void diag_on_cpu(struct diag *d, const struct diag_cpu_event *e);
void diag_on_step_mark(struct diag *d, const struct step_mark_event *e);
void diag_on_exit(struct diag *d, uint32_t pid); /* a process ended */
/*
 * The node's GPUs (sources/gpu_telemetry.c): one GPU's reading, kept for
 * the anomalies' "gpu_clock" suspect (a step's GPU ran under its usual SM
 * clock). uuid and why are copied.
 */
struct gpu_reading {
	uint64_t ts_ns;
	uint32_t index;	  /* NVML's index of the GPU on the node */
	uint32_t sm_mhz;  /* 0: not read */
	const char *uuid; /* "GPU-..." */
	const char *why;  /* the throttle reasons' names, ", " between; "" */
};
void diag_on_gpu_reading(struct diag *d, const struct gpu_reading *r);
/* a CUDA process's device number and its GPU's UUID (the shim's EV_GPU_DEVICE) */
void diag_on_gpu_device(struct diag *d, uint32_t pid, uint32_t device, const char *uuid);
/*
 * A Python sample of pid's thread tid (sources/python.c): where is its
 * innermost frames as text, copied; kept for the anomalies' "python" suspect
 */
void diag_on_py_sample(struct diag *d, uint32_t pid, uint32_t tid, uint64_t ts, const char *where);
/*
 * a collective's cross-rank wait (collective.h): evidence for the
 * communication and straggler anomalies of the steps it fell in
 */
struct corr_wait;
void diag_on_wait(struct diag *d, const struct corr_wait *w);
void diag_add_step(struct diag *d, const struct diag_step *s); /* recorded steps: judge only */
void diag_advance(struct diag *d, uint64_t now_ns);
void diag_stats(struct diag *d, json_t *r); /* the stats record's "diag" object */
/*
 * --metrics' histograms of step durations (seconds): series i (from 0),
 * phase p (0 unknown, prefill, decode, mixed; diag_phase_name()). *instance:
 * the series' instance as a label value, or NULL for the node's one series
 * (--metrics-instances 0). NULL past the last series, or without --metrics.
 */
const struct prom_hist *diag_step_hist(const struct diag *d, uint32_t i, int p,
				       const char **instance);
/*
 * --metrics' anomaly counts of series i (as diag_step_hist()): its anomaly
 * records by kind (DIAG_KIND_COUNT, diag_kind_name()), *episodes those of
 * them that open an episode. NULL past the last series, and with
 * --metrics-instances 0 (the node's counts are the stats record's).
 */
const uint64_t *diag_series_anomalies(const struct diag *d, uint32_t i, uint64_t *episodes,
				      const char **instance);
/* the counters diag_stats and a replay's diag_status share, into o */
void diag_counters(const struct diag *d, json_t *o);
/* steps and anomalies, for --summary's reader (out: stderr at exit) */
void diag_print_summary(const struct diag *d, FILE *out);
/* `agentctl summary --reset`: that section counts anew (stats and /metrics do not) */
void diag_summary_reset(struct diag *d);
int diag_finish(struct diag *d); /* flush, save the baseline */
void diag_free(struct diag *d);
/*
 * A straggler one collective wait shows (nccl_live.c: the worst late
 * arrival per communicator and interval), the anomaly an (chart
 * "collective"), the wait (comm, seq; its last arrival last_ns) and the
 * processes of its ranks. A straggler is reported once: as the cause of a
 * step when steps are known, else as this anomaly. So it is held until the
 * steps around it are cut and judged (or diag_finish()), then dropped when
 * one of pids has steps (its step's anomaly names it: suspect
 * "collective"), else written, and the wait is kept from any later step's
 * suspects. Without diagnosis (d NULL: no steps), written at once. 0 or
 * -errno.
 */
struct diag_anomaly;
int diag_on_straggler(struct agent *a, const struct diag_anomaly *an, const uint32_t *pids,
		      uint32_t npids, uint64_t comm, uint64_t seq, uint64_t last_ns);
/* pipeline/steprec.c: the step record's one writer and one reader */
json_t *steprec_to_json(struct agent *a, const struct diag_step *s); /* NULL: no memory */
/* 0; -ENOENT: not a step record; -EINVAL: no positive dur_ns or an unknown phase */
int steprec_from_json(const json_t *o, struct diag_step *s);

#define DEEP_DIVE_DEFAULT_S 60.0 /* a deep-dive without a duration */

/* the deep-dive and the flight recorder: their lifecycles (ops.c calls them) */
int recorder_init(struct agent *a);
void recorder_tick(struct agent *a);
void recorder_stats(struct agent *a, json_t *obj);
void recorder_free(struct agent *a);
int deepdive_init(struct agent *a);
void deepdive_tick(struct agent *a);
void deepdive_stats(struct agent *a, json_t *obj);
void deepdive_free(struct agent *a);

/* ------------------------------------------------------------ deep-dive -- */
/*
 * Deep capture for every traced process of instance `name` (and processes
 * of that instance that appear meanwhile) until duration_s (0: the default,
 * capped by --deep-dive-max) has passed or deepdive_stop(). Sets
 * PROC_F_DEEP in traced_procs, runtime_cfg.deep_procs, and tells the CUPTI
 * shims of those processes to capture in deep mode. A new deep-dive first
 * sends the instance's flight-recorder window. source: "socket", "kafka",
 * "anomaly".
 * info (may be NULL) receives "instance", "until_ns", "duration_s",
 * "processes". Returns 0 or -errno (-EALREADY when the whole agent is in
 * deep mode, -ENOSPC when too many deep-dives run).
 */
int deepdive_start(struct agent *a, const char *name, double duration_s, const char *source,
		   json_t *info);
/* -ENOENT when the instance has no deep-dive */
int deepdive_stop(struct agent *a, const char *name, json_t *info);
/* is pid in deep capture (global deep mode or a deep-dive)? cheap when none runs */
bool deepdive_pid_deep(struct agent *a, uint32_t pid);
/* every event of this instance is sent: deep mode, or a deep-dive on it */
bool deepdive_instance_deep(struct agent *a, const char *instance);
/* number of traced processes flagged PROC_F_DEEP by deep-dives (runtime_cfg.deep_procs) */
uint32_t deepdive_proc_count(struct agent *a);
/* active deep-dives as a JSON array of {instance, remaining_s, processes, source} */
json_t *deepdive_list(struct agent *a);

/* ------------------------------------------------- the recent anomalies -- */
/*
 * recent.c: the last RECENT_MAX records of class REC_ANOMALY (anomaly,
 * level_shift) as the sinks got them, for `agentctl anomalies`. Live only:
 * recent_init() (ops_init) makes the ring; recent_keep() (route.c, every
 * record) keeps a copy of those of class REC_ANOMALY and counts them.
 * recent_write(): the last `last` (0: all) kept records of instance (NULL
 * or "": every instance) that came after the after-th record seen (-1: all)
 * to out as JSON lines, oldest first, each as the sinks got it; returns
 * "seen" (the cursor of a next call's after), "not_kept" (no memory),
 * "kept", "capacity", "matched" (kept, of the instance, after after),
 * "records" (written), "missed" (seen after after but gone from the ring
 * before this call, of any instance), or NULL without the ring or memory.
 * Caller owns it.
 */
#define RECENT_MAX 256
int recent_init(struct agent *a);
void recent_free(struct agent *a);
void recent_keep(struct agent *a, enum rec_class cls, const char *key, const char *json,
		 size_t len);
json_t *recent_write(struct agent *a, const char *instance, uint32_t last, int64_t after,
		     FILE *out);

/* ------------------------------------------------------ flight recorder -- */
/*
 * Every record of class REC_EVENT or REC_ANOMALY passes recorder_tap()
 * (record.c), already delivered to the sinks (sent = true). Detail that is
 * produced but not sent in sentinel mode (GPU activity records of
 * instances without a deep-dive) is kept with recorder_keep(). Per
 * instance, the last --recorder-seconds are kept, in a global budget of
 * --recorder-mib.
 */
bool recorder_enabled(struct agent *a);
/*
 * The kernel half (bpf/events.h, struct flight_launch): in sentinel mode BPF
 * writes every launch into per-CPU rings of an mmap'able array map, which
 * agent/sources/flight.c copies when the recorder asks (cap.flight_pull: at
 * every tick, and before a window is read). Sized from the options alone,
 * before the BPF object is loaded: entries per CPU (a power of 2; 0: off),
 * and CPUs.
 */
#define FLIGHT_STACKS 16384 /* stack map buckets (256 bytes each): few collisions */
uint32_t recorder_kernel_per_cpu(struct agent *a);
uint32_t recorder_kernel_cpus(void);
bool recorder_kernel_enabled(struct agent *a);
/*
 * One launch copied from the kernel's rings, into instance's window as a
 * binary entry (formatted by cap.flight_json only when the window is read).
 * 0: taken; -ESTALE: older than the window (counted); -ENODEV: no recorder.
 */
int recorder_kernel_launch(struct agent *a, const struct flight_launch *f, const char *instance);
void recorder_tap(struct agent *a, enum rec_class cls, const char *key, const char *json,
		  size_t len);
void recorder_keep(struct agent *a, const char *key, const char *json, size_t len);
#define REC_FMT_BLOB_MAX 4096
/*
 * Keep a record of instance key in binary form: len bytes (at most
 * REC_FMT_BLOB_MAX) copied now, made JSON by fn only when the window is
 * read (flushed, exported): fn(a, key, blob, len, buf, cap) returns the
 * JSON length or -1.
 */
void recorder_keep_fmt(struct agent *a, const char *key, rec_fmt_fn fn, const void *blob,
		       size_t len);
/*
 * Send the window of instance key (records not delivered yet) to the
 * sinks, after a "flight_recorder" record. trigger: "anomaly",
 * "deep_dive". Returns the number of records the window announces.
 */
int recorder_flush(struct agent *a, const char *key, const char *trigger);
/*
 * A window's records follow its flight_recorder record in slices of at most
 * 5 ms of the loop (the first inside recorder_flush() when no other window
 * is being sent, the next ones in recorder_tick()), so that a window of 250k records does not hold
 * the loop (the shims' channel drops after 100 ms). True while one is being sent: the loop then
 * does not sleep. recorder_send_all() sends what is left (at shutdown, before the sources that
 * format kept records go). recorder_set_slice(): the slice's length (tests).
 */
bool recorder_sending(struct agent *a);
void recorder_send_all(struct agent *a);
void recorder_set_slice(struct agent *a, uint64_t slice_ns);
/*
 * Call fn for each record in the window (instance NULL: every instance),
 * oldest first per instance. Returns 0, or the first non-zero fn result.
 */
int recorder_foreach(struct agent *a, const char *instance,
		     int (*fn)(void *ctx, const char *json, size_t len), void *ctx);

/*
 * Copy the window (instance NULL: every instance) into one malloc'ed buffer
 * of entries [u32 length][JSON bytes], so that a long export can convert it
 * bit by bit while the recorder moves on. *buf NULL when empty. 0 or -errno.
 */
int recorder_snapshot(struct agent *a, const char *instance, char **buf, size_t *len,
		      uint64_t *records);

#endif /* INFERTRACE_PIPELINE_H */
