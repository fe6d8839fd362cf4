/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * diagnose.h - inference steps, a workload-aware baseline and anomaly
 * detection (docs/diagnosis.md).
 *
 * Two objects, fed by the owner of the correlator:
 *
 *   struct diag_seg  cuts each process's GPU activity into inference steps:
 *                    feed every joined GPU record (diag_seg__add_gpu, from the
 *                    corr emit callback), markers (Kineto python_function /
 *                    user_annotation, NVTX ranges), USDT step begin/end and,
 *                    live, the launching threads' CPU events
 *                    (diag_seg__add_cpu); call diag_seg__advance() every
 *                    interval and diag_seg__flush() at the end. Finished steps
 *                    come out through opts.step.
 *
 *   struct diag_det  learns how long a step of a given workload takes, per
 *                    (instance, rank, phase), and judges every step when it
 *                    arrives (diag_det__add_step): anomalies come out through
 *                    opts.anomaly before diag_det__add_step returns, so a
 *                    step is decided within one step of its end.
 *
 * Live wiring (one thread): corr emit -> diag_seg__add_gpu; sched/syscall/net
 * events of traced threads -> diag_seg__add_cpu; every interval
 * diag_seg__advance(now); the step callback formats the `step` record and
 * calls diag_det__add_step; the anomaly callback formats the `anomaly` record
 * (and triggers the flight recorder).
 *
 * Threading: neither object is thread-safe. One thread owns each and makes
 * every call; callbacks (step, anomaly, log) run synchronously on that thread
 * inside the call that produced them. A callback may call diag_det__add_step
 * on a detector (the step callback usually does), but must not call back into
 * the object that is calling it.
 *
 * Ownership: pointers passed in are copied or used only during the call.
 * Pointers handed to callbacks (steps, anomalies, names) are valid only
 * during the callback.
 *
 * Errors: functions return 0 or -errno; constructors return NULL with errno
 * set. The library never prints: it logs through opts.log.
 */
#ifndef INFERTRACE_DIAGNOSE_H
#define INFERTRACE_DIAGNOSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "correlator.h"

#ifdef __cplusplus
extern "C" {
#endif

/* same levels as enum corr_log_level */
typedef corr_log_fn diag_log_fn;

enum diag_phase {
	DIAG_PHASE_UNKNOWN = 0,
	DIAG_PHASE_PREFILL = 1,
	DIAG_PHASE_DECODE = 2,
	DIAG_PHASE_MIXED = 3,
	DIAG_PHASE_COUNT,
};

/* "unknown", "prefill", "decode", "mixed" */
const char *diag_phase_name(enum diag_phase p);
/* parse a phase name; unknown text gives DIAG_PHASE_UNKNOWN and -EINVAL */
int diag_phase_parse(const char *s, enum diag_phase *out);

#define DIAG_TOP_MAX 8
#define DIAG_UNKNOWN (-1) /* value of every int64_t field that is not known */

struct diag_kernel {
	const char *name; /* mangled as recorded */
	uint64_t count;
	uint64_t total_ns;
};

/*
 * One inference step (the `step` record, docs/events.md). Every int64_t
 * field is DIAG_UNKNOWN (-1) when its source was not available (replay has
 * no CPU-side view; a step stream may lack the breakdown).
 */
struct diag_step {
	const char *instance; /* NULL from the segmenter: the caller names it */
	int32_t rank;	      /* -1: unknown */
	uint32_t pid, tid;    /* launching process and thread; 0: unknown */
	uint64_t seq;	      /* step number within the process, from 0 */
	uint64_t start_ns, dur_ns;
	enum diag_phase phase;
	int64_t tokens; /* prefill: prompt tokens computed; decode: batch size */
	int64_t batch_size;
	int64_t kv_tokens;  /* sum of context lengths */
	const char *source; /* "marker", "usdt", "auto", "anchor", "record" */
	const char *marker; /* marker name for marker/anchor steps, else NULL */
	/* GPU side (correlator) */
	int64_t gpu_busy_ns; /* union of GPU activity inside the step */
	int64_t idle_ns;     /* step time the GPU was idle */
	int64_t idle_gaps;   /* idle gaps of at least 50 us */
	int64_t idle_max_ns;
	int64_t kernels, graph_kernels, memcpys;
	int64_t comm_ns; /* time in communication kernels (nccl*, all_reduce ...) */
	int64_t l2s_p50_ns, l2s_p90_ns, l2s_p99_ns; /* launch to start */
	/* CPU side of the launching thread (live only) */
	int64_t offcpu_ns, runq_ns;
	int64_t slow_syscalls, slow_syscall_ns;
	int64_t code_loads, code_load_ns; /* GPU code loads (cuModuleLoadData, -Ex) */
	int64_t net_bytes;
	uint32_t preempt_pid; /* ran most while the launcher waited in the run queue; 0 */
	uint32_t n_top;
	struct diag_kernel top[DIAG_TOP_MAX]; /* by total time */
};

/* a step with every optional field unknown */
void diag_step_init(struct diag_step *s);

/* ------------------------------------------------------------ segmenter -- */

struct diag_seg;

typedef void (*diag_step_fn)(void *ctx, const struct diag_step *s);

struct diag_seg_opts {
	size_t sz; /* sizeof(struct diag_seg_opts) */
	/*
	 * Step marker names, comma separated: a marker is a step when its name
	 * contains one of them ("ProfilerStep#" matches ProfilerStep#12).
	 * NULL: "execute_model,run_batch,forward_batch,ProfilerStep#".
	 * Nested matches on one thread: the innermost wins.
	 */
	const char *markers;
	/*
	 * Ignore marker names: cut steps from the launch/kernel stream of the
	 * launching thread, then align the cuts with an unnamed recurring
	 * marker when one brackets them (see docs/diagnosis.md).
	 */
	bool auto_only;
	bool no_anchor; /* auto: never use markers, the launch stream only */
	/* live: steps are cut once their end is older than now - hold_ns; 0: 2 s */
	uint64_t hold_ns;
	uint32_t capacity; /* GPU records held; 0: 1 << 20; more are counted and dropped */
	/*
	 * May be NULL. Set non-zero (from a signal handler) to stop a cut
	 * between two steps (a replay's one cut of a whole recording can take
	 * long): the steps cut so far are sent, and the call returns -EINTR
	 */
	const volatile sig_atomic_t *stop;
	diag_step_fn step;
	void *step_ctx;
	diag_log_fn log; /* may be NULL */
	void *log_ctx;
};

struct diag_seg_counters {
	uint64_t gpu_records, markers, step_markers, cpu_events;
	uint64_t dropped; /* records beyond capacity */
	uint64_t steps, steps_marker, steps_auto, steps_anchor, steps_usdt;
	uint64_t outside;      /* GPU records launched outside every step */
	uint64_t bad_metadata; /* key=value metadata that did not parse */
	uint64_t procs_pruned; /* exited processes whose state was dropped */
	uint64_t cpu_outside;  /* CPU events of a process holding no step to come: dropped */
	uint64_t cpu_overlaps; /* a thread's off-CPU or syscall intervals that overlapped: cut */
	uint64_t cut_short; /* steps ended at another thread's next step (steps.c OVERLAP_DEPTH) */
};

struct diag_seg *diag_seg__new(const struct diag_seg_opts *opts);
void diag_seg__free(struct diag_seg *sg); /* accepts NULL; does not flush */

/* a GPU record as the corr emit callback gives it (l may be NULL) */
int diag_seg__add_gpu(struct diag_seg *sg, const struct corr_gpu *g, const struct corr_launch *l);
/*
 * A marker (replay, NVTX). The name may carry metadata after the first
 * space or '|': "execute_model tokens=512 batch=4 kv=8192 phase=prefill".
 */
int diag_seg__add_marker(struct diag_seg *sg, const struct corr_marker *m);

/* USDT probes of include/infertrace/step.h */
int diag_seg__usdt_begin(struct diag_seg *sg, uint32_t pid, uint32_t tid, uint64_t ts_ns,
			 int64_t tokens, int64_t batch, int64_t kv_tokens, enum diag_phase phase);
int diag_seg__usdt_end(struct diag_seg *sg, uint32_t pid, uint32_t tid, uint64_t ts_ns);

/*
 * live CPU events of a thread, attributed to the steps they overlap; network
 * bytes of any thread of the process, to the step their window began in
 */
enum diag_cpu_kind {
	DIAG_CPU_OFFCPU = 0,	/* blocked (not runnable) */
	DIAG_CPU_RUNQ = 1,	/* runnable, waiting for a CPU; other_pid: who ran */
	DIAG_CPU_SYSCALL = 2,	/* a slow syscall */
	DIAG_CPU_NET = 3,	/* IP socket bytes sent and received in [ts_ns, ts_ns + dur_ns] */
	DIAG_CPU_CODE_LOAD = 4, /* a GPU code load (cuModuleLoadData, -Ex) held the thread */
};
struct diag_cpu_event {
	enum diag_cpu_kind kind;
	uint32_t pid, tid;
	uint64_t ts_ns, dur_ns;
	uint64_t bytes;
	uint32_t other_pid;
};
int diag_seg__add_cpu(struct diag_seg *sg, const struct diag_cpu_event *e);

/*
 * A process ended: its open USDT steps are dropped, and its state (step
 * sequence, what was cut) goes after the first cut that leaves nothing of
 * it held. Its records still held are cut as usual. 0 or -ENOMEM.
 */
int diag_seg__process_exit(struct diag_seg *sg, uint32_t pid);

/* cut the steps that ended before now_ns - hold_ns */
int diag_seg__advance(struct diag_seg *sg, uint64_t now_ns);
/* cut everything held (end of input) */
int diag_seg__flush(struct diag_seg *sg);
const struct diag_seg_counters *diag_seg__counters(const struct diag_seg *sg);

/* ------------------------------------------------------------- detector -- */

enum diag_kind {
	DIAG_KIND_HOST_STALL = 0,
	DIAG_KIND_CPU_CONTENTION,
	DIAG_KIND_GPU_SLOW,
	DIAG_KIND_COMMUNICATION,
	DIAG_KIND_STRAGGLER,
	DIAG_KIND_REGRESSION,
	DIAG_KIND_COUNT,
};
/* "host_stall", "cpu_contention", "gpu_slow", "communication", "straggler", "regression" */
const char *diag_kind_name(enum diag_kind k);

#define DIAG_SUSPECTS_MAX 8

struct diag_suspect {
	const char *what;   /* "gpu_idle", "offcpu", "runq", "kernel", "comm", "rank", ... */
	char evidence[192]; /* one readable sentence with the numbers */
	double value;	    /* the main number (ns, or a ratio for kernels) */
	double ratio;	    /* value against its expectation; 0 when none */
};

struct diag_anomaly {
	const char *instance;
	int32_t rank;
	uint32_t pid, tid; /* the flagged step's process and thread; 0: not one step's */
	enum diag_phase phase;
	uint64_t step_start_ns; /* == the flagged step's start_ns */
	uint64_t dur_ns;
	uint64_t expected_ns; /* the baseline's P99 for this workload */
	double score;	      /* (dur - median) / UCL distance: > 1 is beyond the limit */
	enum diag_kind kind;
	const char *chart; /* "single", "window", "gap", "cpu", "peers", "baseline" */
	/*
	 * steps of its (instance, rank, phase) flagged in a row by the step
	 * charts (single, window, gap, cpu), this one included: 1 opens an
	 * episode. 1 for the other charts.
	 */
	uint32_t run;
	uint32_t n_suspects;
	struct diag_suspect suspects[DIAG_SUSPECTS_MAX]; /* most likely first */
};

typedef void (*diag_anomaly_fn)(void *ctx, const struct diag_anomaly *an);

/*
 * A run of flagged steps long enough to be the new normal (64 in a row; 16
 * for steps of duration only): the detector accepts the level and its key
 * learns its model again (docs/diagnosis.md, "Level shifts"). Its anomalies
 * stop there, and this says why.
 */
struct diag_level_shift {
	const char *instance;
	int32_t rank;
	uint32_t pid, tid; /* the process and thread of the step that completed the run */
	enum diag_phase phase;
	uint64_t step_start_ns; /* the step that completed the run */
	uint32_t steps;		/* flagged in a row */
	double ratio;		/* the run's median duration over what was expected */
	enum diag_kind kind;	/* the kind most of the run's anomalies named */
};

typedef void (*diag_level_fn)(void *ctx, const struct diag_level_shift *ls);

/*
 * The expected-latency model (docs/diagnosis.md, "The baseline" and "The
 * grid model"). GRID (0, the default): a workload without a measured cell
 * of its own is judged against the measured cells that bracket it (a lighter
 * and a heavier one within reach, along KV tokens, or along the batch with
 * the KV tokens per request held), interpolated, as a measurement; where
 * none do, as CELLS. CELLS: against the nearest cell scaled by the robust
 * line, as a guess (wide limit) unless that cell is adjacent.
 */
enum diag_model {
	DIAG_MODEL_GRID = 0,
	DIAG_MODEL_CELLS,
	DIAG_MODEL_COUNT,
};

/* "grid", "cells" */
const char *diag_model_name(enum diag_model m);
/* parse a model name (--detect model=, eval_detect --model); other text: -EINVAL, *out kept */
int diag_model_parse(const char *s, enum diag_model *out);

struct diag_det_opts {
	size_t sz;		    /* sizeof(struct diag_det_opts) */
	uint32_t bootstrap;	    /* steps per (instance, rank, phase) before judging; 0: 24 */
	uint32_t window;	    /* control chart smoothing window, steps; 0: 4 */
	double k_single;	    /* UCL = mean + k * sd of the positive residuals; 0: 5 */
	double k_window;	    /* the same for the smoothed chart; 0: 5 */
	double floor_single;	    /* minimum UCL, relative excess over the median; 0: 0.17 */
	double floor_window;	    /* 0: 0.09 */
	uint32_t refit;		    /* accepted steps between refits of the roofline; 0: 1024 */
	double straggler_rel;	    /* peer deviation that names a straggler; 0: 0.15 */
	uint64_t straggler_abs_ns;  /* ... and at least this much; 0: 1 ms */
	double regression_rel;	    /* sustained excess over a saved baseline; 0: 0.10 */
	uint32_t regression_window; /* steps averaged for it; 0: 32 */
	uint32_t max_keys;	    /* (instance, rank, phase) tracked; 0: 4096 */
	/*
	 * the gap chart: a step whose longest GPU idle gap exceeds the usual
	 * longest gap by k sd and by at least this much; 0: 10 ms
	 */
	uint64_t gap_floor_ns;
	diag_anomaly_fn anomaly;
	void *anomaly_ctx;
	diag_log_fn log; /* may be NULL */
	void *log_ctx;
	enum diag_model model;	   /* 0: DIAG_MODEL_GRID */
	diag_level_fn level_shift; /* may be NULL */
	void *level_shift_ctx;
};

/* what the detector concluded about one step */
struct diag_verdict {
	bool judged; /* false while bootstrapping */
	bool anomalous;
	bool held;	      /* over its limit but maybe noise: decided by the next step */
	uint64_t expected_ns; /* P99 for the workload; 0 when none yet */
	uint64_t median_ns;
	double score;
	/* where median_ns came from: 0 the workload's own cell, 1 a neighbour
	 * cell scaled to this workload (the grid model: the cells bracketing
	 * it, interpolated), 2 the roofline alone, 3 the bound of a heavier
	 * workload's cell (a novel workload flagged above it); -1 none */
	int source;
};

struct diag_det_counters {
	uint64_t steps, judged, anomalies, bootstrapping;
	uint64_t by_kind[DIAG_KIND_COUNT];
	uint64_t refits, keys, keys_dropped, bad_steps;
	uint64_t explained;	/* over the limit at a recurring second mode of the workload */
	uint64_t noise;		/* lone GPU-bound spikes in a noisy stretch, not reported */
	uint64_t baseline_keys; /* keys loaded from a saved baseline */
	/*
	 * steps over the steady limit whose batch changed membership, within
	 * the limit learned for such steps (work the record does not count)
	 */
	uint64_t churn;
	/*
	 * steps of unknown phase judged as prefilling the requests their batch
	 * was short of, against its recent largest (docs/diagnosis.md)
	 */
	uint64_t waiting;
	uint64_t level_shifts; /* runs of flagged steps accepted as the new level */
	uint64_t episodes;     /* anomalies that opened a run of flagged steps (run 1) */
};

struct diag_det *diag_det__new(const struct diag_det_opts *opts);
void diag_det__free(struct diag_det *d); /* accepts NULL */
/*
 * Judge one step and learn from it. Anomalies are delivered through
 * opts.anomaly before this returns, except a held one (a lone GPU-bound
 * spike in a noisy stretch): the next step of its (instance, rank) decides
 * whether it was noise, and delivers it otherwise (or diag_det__flush()).
 * v (may be NULL) receives the verdict.
 * s->instance may be NULL (""). A step with dur_ns 0 is counted in
 * bad_steps and returns -EINVAL.
 */
int diag_det__add_step(struct diag_det *d, const struct diag_step *s, struct diag_verdict *v);
/* save what was learned (text, docs/diagnosis.md) */
int diag_det__save(const struct diag_det *d, const char *path);
/*
 * Load a saved baseline as the reference for regressions. Malformed lines
 * fail with -EINVAL after logging the line number.
 */
int diag_det__load(struct diag_det *d, const char *path);
const struct diag_det_counters *diag_det__counters(const struct diag_det *d);
/*
 * Report the held anomalies (see diag_verdict.held) of steps that ended
 * before before_ns: their next step has not come. UINT64_MAX: all of them,
 * at the end of the input.
 */
void diag_det__flush(struct diag_det *d, uint64_t before_ns);

#ifdef __cplusplus
}
#endif

#endif /* INFERTRACE_DIAGNOSE_H */
