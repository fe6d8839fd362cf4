/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * diag_internal.h - the workload model shared by baseline.c (fit, save,
 * load) and detect.c (control chart, kinds, peers). Not installed.
 */
#ifndef INFERTRACE_DIAG_INTERNAL_H
#define INFERTRACE_DIAG_INTERNAL_H

#include <stdint.h>

#include "diagnose.h"

/*
 * Ablation switches for measuring each rule: eval/ablate.sh RULE builds the
 * evaluation with -DABL_RULE=1 (docs/diagnosis.md gives each one's effect).
 * All are 0 in a normal build, and the compiler drops the dead branches.
 */
#ifndef ABL_CHURN /* churn steps judged against their own quantile */
#define ABL_CHURN 0
#endif
#ifndef ABL_STAY /* the churn rule, once on, stays on until churn is cheap by a lower bar */
#define ABL_STAY 0
#endif
#ifndef ABL_TWIN /* twins: a churn step judged by the churn steps before it that passed */
#define ABL_TWIN 0
#endif
#ifndef ABL_RUN /* a run in progress judges churn steps and guesses against the steady limit */
#define ABL_RUN 0
#endif
#ifndef ABL_MODES /* second modes */
#define ABL_MODES 0
#endif
#ifndef ABL_HOLD /* noise holds (lone spikes, bursts, small spikes) */
#define ABL_HOLD 0
#endif
#ifndef ABL_SMALL /* small spikes held anywhere */
#define ABL_SMALL 0
#endif
#ifndef ABL_BURST /* bursts of uneven spikes */
#define ABL_BURST 0
#endif
#ifndef ABL_NBSPIKE /* a step with no breakdown under 1.4x counts as a spike */
#define ABL_NBSPIKE 0
#endif
#ifndef ABL_BOUND /* the monotone bounds */
#define ABL_BOUND 0
#endif
#ifndef ABL_GUESS /* the wide limits of guesses and stale cells */
#define ABL_GUESS 0
#endif
#ifndef ABL_LINE /* the line's own spread widens its limit */
#define ABL_LINE 0
#endif
#ifndef ABL_WINDOW /* the smoothed chart */
#define ABL_WINDOW 0
#endif
#ifndef ABL_YOUNG /* young cells (baseline.c) */
#define ABL_YOUNG 0
#endif
#ifndef ABL_SPIKE /* GPU-bound spikes teach the chart */
#define ABL_SPIKE 0
#endif
#ifndef ABL_TEACH /* the teaching clip */
#define ABL_TEACH 0
#endif
#ifndef ABL_BOOT /* the bootstrap clip */
#define ABL_BOOT 0
#endif
#ifndef ABL_GAP /* the gap chart */
#define ABL_GAP 0
#endif
#ifndef ABL_CPU /* the CPU chart */
#define ABL_CPU 0
#endif
#ifndef ABL_WAIT /* unknown phase: a batch under its recent largest prefills the rest */
#define ABL_WAIT 0
#endif
#ifndef ABL_NOKV /* no KV tokens: churn told from the batch alone */
#define ABL_NOKV 0
#endif
#ifndef ABL_BARE /* duration only (no workload, no breakdown): a new level after 16, not 64 */
#define ABL_BARE 0
#endif

/*
 * A workload cell: steps with about the same tokens and KV tokens. The ring
 * keeps the last BIN_RING accepted durations (a sorted copy gives the median
 * in O(BIN_RING) per update), sums give the cell's mean workload, used to
 * scale a neighbour cell's median to this one.
 */
#define BIN_RING 16
#define BIN_MIN 4 /* durations a cell needs before it predicts */
#define BIN_EMPTY UINT64_MAX
#define BIN_SLOTS_MAX 4096 /* cells per key at most 3/4 of this (baseline.c: prune) */

struct dbin {
	uint64_t key;  /* BIN_EMPTY: free slot */
	uint64_t last; /* dmodel.now when a duration last came in */
	uint32_t n;    /* accepted steps ever */
	uint8_t pos, cnt;
	float ring[BIN_RING];
	float sorted[BIN_RING];
	double sum_t, sum_kv; /* of the samples in the ring, for the mean workload */
};

/* the empirical roofline: dur = c0 + c1 * t + c2 * kv, fit by least absolute deviations */
#define RES_CAP 512
struct dlin {
	bool ok;
	double c[3];
	double q50, q99; /* relative residuals of the fit */
	double floor;	 /* no prediction below this: the quickest step fitted */
	uint32_t n, pos; /* samples in the reservoir (ring) */
	float t[RES_CAP], kv[RES_CAP], dur[RES_CAP];
};

/*
 * now: the owner's step clock (steps of the key). A cell that got no
 * duration for more than `stale` steps (0: never stale) is not trusted: the
 * workload it describes has not run for a long time and may run at another
 * speed now (another job mix, a driver, clocks). Its next duration restarts
 * it.
 */
struct dmodel {
	struct dbin *bins;
	uint32_t cap, used;
	uint64_t now, stale;
	struct dlin lin;
	/*
	 * the lowest and highest tokens (0) and KV (1) buckets any cell ever
	 * had: the grid model's search stops there (dm_interp)
	 */
	int32_t ext_lo[2], ext_hi[2];
};

/* workload coordinates: t = tokens (else batch size), kv = KV tokens; < 0 unknown */
uint64_t dm_bin_key(double t, double kv);
int dm_init(struct dmodel *m);
void dm_free(struct dmodel *m);
struct dbin *dm_find(const struct dmodel *m, uint64_t key);
int dm_add(struct dmodel *m, double t, double kv, double dur);
/* the reservoir sample for the global fit */
void dm_lin_sample(struct dmodel *m, double t, double kv, double dur);
int dm_lin_fit(struct dlin *l);
double dm_lin_pred(const struct dlin *l, double t, double kv);
float dm_bin_median(const struct dbin *b);
/* a cell restored from a saved baseline: cnt copies of its median */
int dm_put_bin(struct dmodel *m, uint64_t key, double med, uint32_t cnt, double mean_t,
	       double mean_kv);
/*
 * Median duration expected for (t, kv): the cell, else a neighbour cell
 * scaled by the roofline, else the roofline. Returns 0 when nothing can
 * predict yet. *src: 0 cell, 1 neighbour, 2 roofline. *novel: the workload
 * is new to the model (the prediction comes from the roofline, a cell more
 * than one step away, or a stale cell), so it is a guess, not a measurement.
 */
double dm_predict(const struct dmodel *m, double t, double kv, int *src, bool *novel);
/*
 * The grid model (DIAG_MODEL_GRID): the median expected for (t, kv) from the
 * measured cells that bracket it along KV tokens, or along tokens with KV
 * tokens per token held (per_tok: tokens are the batch) or KV tokens held,
 * interpolated; 0 when no two cells within reach bracket it. Fresh cells
 * first; where none bracket it, the nearest cells stale or not (a past job
 * mix's measurements), and *stale says so.
 */
double dm_interp(const struct dmodel *m, double t, double kv, bool per_tok, bool *stale);
/*
 * dir > 0: the smallest median of the fresh cells at least as heavy as
 * (t, kv); dir < 0: the largest of those at most as heavy; 0: none
 */
double dm_bound(const struct dmodel *m, double t, double kv, int dir);

/* kernels: per-call time history, name -> EWMA of log(ns per call) */
struct dkern {
	char *name; /* NULL: free */
	double log_ns;
	uint64_t steps;
};
struct dkerns {
	struct dkern *tab;
	uint32_t cap, used;
	uint32_t last[DIAG_TOP_MAX]; /* the slot each top-kernel position found last */
};
/*
 * the kernel's entry (created if asked and room is left); pos >= 0: its
 * position among a step's top kernels, whose last slot is tried first (the
 * same kernels lead step after step; the name is compared, so a wrong guess
 * costs one strcmp)
 */
struct dkern *dk_get(struct dkerns *k, const char *name, bool create, int pos);
void dk_free(struct dkerns *k);

#endif /* INFERTRACE_DIAG_INTERNAL_H */
