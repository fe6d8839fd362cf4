/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * pipeline.h - the pipeline's entry points, the same for the live agent and
 * --replay (docs/architecture.md, "Layout"). The sources feed it: GPU
 * records and launches (join.c), CPU events, step marks and recorded steps
 * (diag.c), finished records (rec_emit() in agent.h, decided by route.c);
 * the loop ticks it (gpu_interval, diag_advance) and finishes it
 * (gpu_finish, diag_finish). Deep-dives and the flight recorder: ops.h.
 *
 * Threading: the event loop thread, like everything in the agent.
 */
#ifndef INFERTRACE_PIPELINE_H
#define INFERTRACE_PIPELINE_H

#include "state.h"

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
void diag_on_exit(struct diag *d, uint32_t pid); /* a process ended */
void diag_add_step(struct diag *d, const struct diag_step *s); /* recorded steps: judge only */
void diag_advance(struct diag *d, uint64_t now_ns);
void diag_stats(struct diag *d, json_t *r); /* the stats record's "diag" object */
int diag_finish(struct diag *d); /* flush, save the baseline */
void diag_free(struct diag *d);
/* pipeline/steprec.c: the step record's one writer and one reader */
json_t *steprec_to_json(struct agent *a, const struct diag_step *s); /* NULL: no memory */
/* 0; -ENOENT: not a step record; -EINVAL: no positive dur_ns or an unknown phase */
int steprec_from_json(const json_t *o, struct diag_step *s);

#endif /* INFERTRACE_PIPELINE_H */
