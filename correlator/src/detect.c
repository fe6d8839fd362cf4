// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * detect.c - judge each step against its workload's baseline when it
 * arrives (docs/diagnosis.md).
 *
 * Per (instance, rank, phase):
 *  - the baseline (baseline.c) predicts the median duration m for the
 *    step's workload; u = dur / m - 1 is the relative residual;
 *  - control chart on the positive residuals u+: a step is flagged when u+
 *    exceeds UCL1 = max(floor, mean + k * sd) of the accepted steps' u+
 *    (the single-step chart: a host stall, a 2x step), or when the mean of
 *    u+ over the last `window` steps not already flagged exceeds its own
 *    UCL (the smoothed chart: a run of 1.2x steps that no single step
 *    betrays) and the step itself is above the window floor;
 *  - the gap chart: a host stall is one long GPU idle gap, and a step's
 *    longest gap does not grow with the step (the GPU-bound middle of a
 *    long prefill has none; the longest are the host's per-step work). A
 *    step whose longest gap exceeds the usual longest gap by k sd and by
 *    the gap floor is a stall even where +20 ms hides in a 2 s step's
 *    jitter;
 *  - the CPU chart: a step whose launcher waited in the run queue a larger
 *    share of the step than usual (k sd, RUNQ_FLOOR of the step and 1 ms)
 *    while the GPU idled at least half as long is CPU contention, also for
 *    a workload no cell knows;
 *  - requests waiting: a step of unknown phase whose batch is under its
 *    sequence's recent largest is judged as a mixed step that prefills the
 *    missing requests (waiting());
 *  - churn: a step whose batch changed membership did work its record may
 *    not count; where a key's churn steps are often far slower than steady
 *    ones, they are judged against a quantile of their own excesses;
 *  - flagged steps never teach the baseline (a run of slow steps must not
 *    become the norm), unless they persist for LEVEL_SHIFT steps
 *    (LEVEL_SHIFT_BARE for steps of duration only): then the
 *    new level is accepted and said so, and only a saved baseline
 *    (--baseline) still sees the regression. The key learns its model
 *    again; while that one bootstraps, the old model scaled by the run's
 *    median ratio judges (relearn()), so a stall just after a shift is not
 *    missed.
 * Per instance: ranks of one instance run the same steps; the last step of
 * each rank is kept and, once every known rank has a step in the same round
 * (starts within half a step), each rank is compared with its peers' median.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_internal.h"
#include "internal.h"

#define W_MAX 32
#define LEVEL_SHIFT 64 /* consecutive flagged steps after which a key relearns */
/*
 * the same for a step of duration only (no tokens, batch or KV tokens, no
 * breakdown), where a new workload and a slowdown look alike
 * (docs/diagnosis.md, "Fields missing"; chosen on seeds 1-10). Steps the
 * agent cuts itself have a breakdown and keep LEVEL_SHIFT.
 */
#define LEVEL_SHIFT_BARE 16
#define MAX_RANKS 64
#define MAX_INST 1024
#define EW_ALPHA 0.02 /* EWMA weight of the chart's statistics (~50 steps) */
#define CHART_WARM 16 /* chart samples before k*sd counts (floor only before) */
/* a workload cell untouched for this many steps of its key is learned again */
#define STALE_STEPS 1000
/*
 * A novel workload (baseline.c: dm_predict) is judged against a wide limit:
 * the roofline or a distant cell guesses it within tens of percent, so only a
 * step far beyond the guess (a stall) is flagged; the others teach the
 * model, which then knows the workload after BIN_MIN steps.
 */
#define NOVEL_FLOOR 0.5
/*
 * The workload's own cell gone stale measured this very workload, only long
 * ago: a speed drift since (clocks, a driver) is tens of percent at most, and
 * a new job that starts with a 1.4x slow GPU must not teach it.
 */
#define STALE_FLOOR 0.3
/* the CPU chart's floor: extra run-queue wait, share of the step */
#define RUNQ_FLOOR 0.05
/* a flagged step under this many times its limit is a spike noise may hold */
#define SPIKE_MAX 3
/* an accepted step teaches the charts its excess up to this many floors */
#define TEACH_CLIP 1.5
/*
 * A workload with a second mode: a flagged step between two clearly normal
 * ones is lone; once MODE_MIN lone steps of the workload (its tokens cell,
 * KV tokens within MODE_KV cells, in the key's last STALE_STEPS steps) came
 * within MODE_TOL of one ratio to the median, a step at that ratio after a
 * clearly normal one is explained: not flagged, and not taught to the cell
 * either (its median stays the first mode's).
 */
#define MODE_N 32
#define MODE_MIN 3
#define MODE_TOL 0.05
#define MODE_KV 2
/*
 * Noise: in a stretch where NOISE_MIN lone GPU-bound spikes (flagged, the GPU
 * busy for at least NOISE_GPU of the excess, no host chart seeing a stall,
 * the step before not flagged, the step after calm: not flagged and under
 * the limit of a measured cell) came in the last NOISE_WIN steps of the
 * (instance, rank), the next such flag is held until the following step: a
 * calm one makes it noise (counted, not reported), anything else has it
 * reported then, one step late. A slow GPU that lasts is reported; a GPU
 * that jitters for a while is not reported every few steps.
 * A step with no breakdown says neither whether the GPU was busy nor whether
 * it idled: under NOISE_NB x its median it counts as such a spike, above (a
 * stall's size) it is reported at once.
 * A spike under NOISE_SMALL x its median is held the same way anywhere: one
 * such step is jitter; a second slow step makes it a run, reported.
 * Bursts: a held spike followed by another whose dur / median differs by
 * more than BURST_TOL is noise, and the new one is held in its turn, up to
 * BURST_MAX spikes in a row. Jitter is uneven; a slowed GPU slows step after
 * step by one factor, and that steady level is reported.
 */
#define NOISE_N 16
#define NOISE_MIN 2
#define NOISE_WIN 200
#define NOISE_GPU 0.75
#define NOISE_NB 1.4
#define NOISE_SMALL 1.25
#define BURST_MAX 3
#define BURST_TOL 0.04

/*
 * Churn: a decode (or phase unknown) step whose batch changed membership
 * prefilled the newcomers, work its record may not count (step_class()).
 * Every judged churn step teaches the key a ring of the last CH_N churn
 * excesses (u+ over the steady cost of its workload), clipped at CH_CLIP x
 * its limit: a quantile shrugs off the few faults among them, where a
 * limit learned from accepted steps alone would only ever shrink. Churn must
 * be the exception (under CH_SHARE of the sequence's recent steps): where
 * every step changes the batch, the class separates nothing. Once CH_MIN are
 * known and their CH_HEAVY_Q quantile is over CH_HEAVY x the single chart's
 * limit (a tenth of them far slower than steady steps: no few faults among
 * them can say that), churn costs unrecorded work on this key: a churn step
 * is judged against their CH_Q quantile and teaches neither the cells nor
 * the charts. Otherwise it is judged, and teaches, like any step. Once on,
 * the rule stays on until that quantile is under CH_LIGHT x the limit: a
 * stretch of cheap churn between two ramp-ups (its 90th percentile 1.2-3x
 * the limit, its tail still 1.5x the steady cost) is not judged at the
 * steady limit.
 */
#define CH_N 128
#define CH_MIN 16
#define CH_Q 0.99
#define CH_CLIP 6.0
#define CH_HEAVY 3.0
#define CH_HEAVY_Q 0.9
#define CH_LIGHT 0.5
#define CH_SHARE 0.8

/*
 * Twins (twin_limit()): churn steps of the same key and tokens that passed,
 * among the sequence's last TWIN_N churn steps and in its last TWIN_GAP
 * steps. A churn step with TWIN_MIN of them that agree is judged against
 * the slowest by the steady limit; without, one right after a churn step
 * that passed is not flagged within the steady limit of it. A step of
 * several joins (class 2) forgets them.
 */
#define TWIN_N 4
#define TWIN_GAP 32
#define TWIN_MIN 2
/*
 * A run in progress: after RUN_MIN flagged steady (not churn) steps in a row,
 * the last at most RUN_MAX x its median and among the sequence's last
 * RUN_GAP steps, a churn step is judged against the steady limit, not the
 * churn quantile: a slowed GPU or a contended CPU slows the churn steps of
 * its run too, and most passed under the churn quantile. So is a workload
 * no cell measures (a guess), not against the guess's wide limit: a run
 * that goes on into a new job must not teach the new job's cells its slow
 * level. Flagged steady steps far over RUN_MAX are a new job's ramp-up, not
 * a slowdown, and its churn steps are left to their quantile. A run no
 * steady step has confirmed for RUN_GAP steps is over (when only a steady
 * step that passed ended it, a ramp-up of churn steps after a run's end,
 * none of them steady, was flagged to its end).
 */
#define RUN_MIN 2
#define RUN_MAX 3.0f
#define RUN_GAP 4
/*
 * Requests waiting: a continuously batched engine fills its batch up to the
 * requests it has; a step whose batch is under the largest of its sequence's
 * last WAIT_N steps had requests waiting to join, and prefilled them in this
 * step or the next ones (a step's newcomers were prefilled before it lists
 * them). A batch held for WAIT_HELD steps in a row is the engine's level
 * (fewer clients now), not a dip: the largest is forgotten. A record of
 * unknown phase does not count that work; where the engine said the phase,
 * it is taken at its word.
 */
#define WAIT_N 32
#define WAIT_HELD 4

static const char *const kind_names[DIAG_KIND_COUNT] = {
    "host_stall", "cpu_contention", "gpu_slow", "communication", "straggler", "regression",
};
static const char *const phase_names[DIAG_PHASE_COUNT] = {"unknown", "prefill", "decode", "mixed"};

const char *diag_kind_name(enum diag_kind k)
{
	return (unsigned)k < DIAG_KIND_COUNT ? kind_names[k] : "unknown";
}

const char *diag_phase_name(enum diag_phase p)
{
	return (unsigned)p < DIAG_PHASE_COUNT ? phase_names[p] : "unknown";
}

/* the index of s among n names, or -1 */
static int name_index(const char *const *names, int n, const char *s)
{
	for (int i = 0; s && i < n; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

int diag_phase_parse(const char *s, enum diag_phase *out)
{
	int i = name_index(phase_names, DIAG_PHASE_COUNT, s);

	*out = i < 0 ? DIAG_PHASE_UNKNOWN : (enum diag_phase)i;
	return i < 0 ? -EINVAL : 0;
}

static const char *const model_names[DIAG_MODEL_COUNT] = {"grid", "cells"};

const char *diag_model_name(enum diag_model m)
{
	return (unsigned)m < DIAG_MODEL_COUNT ? model_names[m] : "unknown";
}

int diag_model_parse(const char *s, enum diag_model *out)
{
	int i = name_index(model_names, DIAG_MODEL_COUNT, s);

	if (i < 0)
		return -EINVAL;
	*out = (enum diag_model)i;
	return 0;
}

void diag_step_init(struct diag_step *s)
{
	memset(s, 0, sizeof(*s));
	s->rank = -1;
	s->tokens = s->batch_size = s->kv_tokens = DIAG_UNKNOWN;
	s->gpu_busy_ns = s->idle_ns = s->idle_gaps = s->idle_max_ns = DIAG_UNKNOWN;
	s->kernels = s->graph_kernels = s->memcpys = s->comm_ns = DIAG_UNKNOWN;
	s->l2s_p50_ns = s->l2s_p90_ns = s->l2s_p99_ns = DIAG_UNKNOWN;
	s->offcpu_ns = s->runq_ns = s->slow_syscalls = s->slow_syscall_ns = DIAG_UNKNOWN;
	s->code_loads = s->code_load_ns = DIAG_UNKNOWN;
	s->net_bytes = DIAG_UNKNOWN;
}

/* a saved baseline for one key: the reference regressions are measured against */
struct dref {
	char *instance;
	int32_t rank;
	enum diag_phase phase;
	struct dmodel m;
	struct dkerns kern;
};

/* running mean and variance with an EWMA once warm (plain mean before) */
struct ewstat {
	double mean, var;
	uint32_t n;
};

static void ew_add(struct ewstat *s, double x)
{
	double a = s->n < 1 / EW_ALPHA ? 1.0 / (s->n + 1) : EW_ALPHA, d = x - s->mean;

	s->mean += a * d;
	s->var = (1 - a) * (s->var + a * d * d);
	s->n++;
}

/* x, but at most `over` above the mean once there is one */
static void ew_add_capped(struct ewstat *s, double x, double over)
{
	ew_add(s, s->n && x > s->mean + over ? s->mean + over : x);
}

/* the step sequence of one (instance, rank): which steps were lone */
struct dseq {
	uint32_t refs;
	struct dinst *inst; /* the instance's peers (peers()), once looked up */
	bool last_ok;	    /* the previous step of the sequence was clearly normal */
	bool pend;	    /* a lone candidate waits for the next step */
	struct dkey *pk;
	uint64_t pcell, pstep;
	float pr;
	/* noise: GPU-bound spikes after a quiet step (not flagged), before a calm one */
	uint64_t n; /* steps of the sequence */
	bool last_quiet, npend;
	uint32_t run;	/* flagged steady (not churn) steps in a row */
	float run_r;	/* the last one's dur / median */
	uint64_t run_n; /* and its sequence step (n after it) */
	uint64_t nstep;
	uint64_t noise[NOISE_N]; /* sequence steps of lone GPU-bound spikes */
	uint32_t noise_pos;
	bool held; /* an anomaly waits for the next step: noise or not */
	struct diag_anomaly han;
	float hr;	      /* its dur / median */
	uint32_t burst;	      /* held spikes in a row */
	double pbs, pkv;      /* batch and KV tokens of the previous step; < 0 unknown */
	int64_t wbs[WAIT_N];  /* batch sizes of the last WAIT_N steps (waiting()) */
	uint32_t wpos, wheld; /* and how many in a row had the last one's */
	struct ewstat churn;  /* share of churn steps (step_class) */
	struct dtwin {
		uint64_t n;   /* sequence step; 0: none */
		float t, dur; /* tokens, duration ns */
		int phase;    /* of its key */
	} tw[TWIN_N];	      /* the last churn steps that passed (twin_limit()) */
	uint32_t tw_pos;
};

/* a lone flagged step: its cell, dur / median, and when (key steps) */
struct dmode {
	uint64_t cell, step;
	float r;
};

struct dkey {
	char *instance;
	int32_t rank;
	enum diag_phase phase;
	struct dmodel m;
	struct dkerns kern;
	uint64_t steps, accepted, since_refit, consec;
	struct ewstat u1; /* u+ of accepted steps */
	double flag_u;	  /* limit the last flagged step crossed; < 0: not GPU jitter */
	struct ewstat uw; /* window mean of u+ */
	float win[W_MAX];
	uint32_t wpos, wcnt;
	/* breakdown of accepted steps, as fractions of the step or ns */
	struct ewstat f_idle, f_busy, f_comm, f_runq, offcpu, runq;
	struct ewstat gap; /* longest GPU idle gap, ns */
	/* regression against the reference */
	const struct dref *ref;
	bool ref_looked;
	double reg[W_MAX * 8];
	uint32_t reg_pos, reg_cnt;
	bool reg_active;
	struct dseq *seq;
	struct dmode modes[MODE_N];
	uint32_t mode_pos;
	/* u+ of recent churn steps (step_class), sorted: their own limit */
	float ch[CH_N], ch_sorted[CH_N];
	uint32_t ch_pos, ch_cnt;
	bool ch_heavy; /* churn_limit(): the rule is on for this key */
	/*
	 * the flagged steps in a row (consec): dur / median, how many the gap
	 * chart saw, and how many each kind named
	 */
	float run_r[LEVEL_SHIFT];
	uint32_t run_gap;
	uint16_t run_kind[DIAG_KIND_COUNT];
	/* after a level shift, until the new model bootstraps: the old one and the level's ratio */
	struct dmodel *prev;
	double prev_r;
};

struct dinst {
	char *instance;
	uint32_t n_ranks;
	struct {
		int32_t rank;
		bool valid, judged;
		uint32_t pid, tid;
		uint64_t start, dur;
		int64_t idle, offcpu;
		enum diag_phase phase;
	} r[MAX_RANKS];
};

struct diag_det {
	struct diag_det_opts o;
	struct dkey **keys; /* open addressing by (instance, rank, phase) */
	uint32_t kcap, kused;
	struct dref *refs;
	uint32_t n_refs;
	struct dinst *inst;
	uint32_t n_inst;
	struct diag_det_counters cnt;
	uint32_t n_held; /* sequences holding an anomaly */
};

#define dlog(d, ...) corr_log_forward((d)->o.log, (d)->o.log_ctx, __VA_ARGS__)

struct diag_det *diag_det__new(const struct diag_det_opts *opts)
{
	struct diag_det *d;

	if (!opts || opts->sz < offsetof(struct diag_det_opts, anomaly)) {
		errno = EINVAL;
		return NULL;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		errno = ENOMEM;
		return NULL;
	}
	memcpy(&d->o, opts, opts->sz < sizeof(d->o) ? opts->sz : sizeof(d->o));
	d->o.sz = sizeof(d->o);
	if (!d->o.bootstrap)
		d->o.bootstrap = 24;
	if (!d->o.window)
		d->o.window = 4;
	if (d->o.window > W_MAX)
		d->o.window = W_MAX;
	if (d->o.k_single <= 0)
		d->o.k_single = 5;
	if (d->o.k_window <= 0)
		d->o.k_window = 5;
	if (d->o.floor_single <= 0)
		d->o.floor_single = 0.17;
	if (d->o.floor_window <= 0)
		d->o.floor_window = 0.09;
	if (!d->o.refit)
		d->o.refit = 1024;
	if (d->o.straggler_rel <= 0)
		d->o.straggler_rel = 0.15;
	if (!d->o.straggler_abs_ns)
		d->o.straggler_abs_ns = 1000000;
	if (d->o.regression_rel <= 0)
		d->o.regression_rel = 0.10;
	if (!d->o.regression_window)
		d->o.regression_window = 32;
	if (d->o.regression_window > W_MAX * 8)
		d->o.regression_window = W_MAX * 8;
	if (!d->o.max_keys)
		d->o.max_keys = 4096;
	if (!d->o.gap_floor_ns)
		d->o.gap_floor_ns = 10000000;
	d->kcap = corr_pow2((uint64_t)d->o.max_keys * 2);
	d->keys = calloc(d->kcap, sizeof(*d->keys));
	d->inst = calloc(MAX_INST, sizeof(*d->inst));
	if (!d->keys || !d->inst) {
		free(d->keys);
		free(d->inst);
		free(d);
		errno = ENOMEM;
		return NULL;
	}
	return d;
}

/* the model before a level shift goes (relearn()): the new one has bootstrapped */
static void prev_drop(struct dkey *k)
{
	if (k->prev)
		dm_free(k->prev);
	free(k->prev);
	k->prev = NULL;
}

static void key_free(struct dkey *k)
{
	if (!k)
		return;
	dm_free(&k->m);
	prev_drop(k);
	dk_free(&k->kern);
	if (k->seq && !--k->seq->refs)
		free(k->seq);
	free(k->instance);
	free(k);
}

void diag_det__free(struct diag_det *d)
{
	if (!d)
		return;
	for (uint32_t i = 0; i < d->kcap; i++)
		key_free(d->keys[i]);
	for (uint32_t i = 0; i < d->n_refs; i++) {
		dm_free(&d->refs[i].m);
		dk_free(&d->refs[i].kern);
		free(d->refs[i].instance);
	}
	for (uint32_t i = 0; i < d->n_inst; i++)
		free(d->inst[i].instance);
	free(d->refs);
	free(d->inst);
	free(d->keys);
	free(d);
}

const struct diag_det_counters *diag_det__counters(const struct diag_det *d)
{
	return &d->cnt;
}

static uint64_t key_hash(const char *inst, int32_t rank, enum diag_phase ph)
{
	uint64_t h = 1469598103934665603ULL;

	for (const char *p = inst; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ULL;
	return corr_hash64(h ^ ((uint64_t)(uint32_t)rank << 8) ^ (uint64_t)ph);
}

/* the key's slot: its own, or the empty one where it goes */
static uint32_t key_slot(const struct diag_det *d, const char *inst, int32_t rank,
			 enum diag_phase ph)
{
	uint32_t mask = d->kcap - 1, i = (uint32_t)key_hash(inst, rank, ph) & mask;

	for (; d->keys[i]; i = (i + 1) & mask) {
		const struct dkey *k = d->keys[i];

		if (k->rank == rank && k->phase == ph && !strcmp(k->instance, inst))
			break;
	}
	return i;
}

static struct dkey *key_get(struct diag_det *d, const char *inst, int32_t rank, enum diag_phase ph)
{
	uint32_t i = key_slot(d, inst, rank, ph);
	struct dkey *k = d->keys[i];

	if (k)
		return k;
	if (d->kused >= d->o.max_keys) {
		if (!d->cnt.keys_dropped++)
			dlog(d, CORR_LOG_WARN,
			     "diag: %u baselines kept, one per (instance, rank, phase); steps of "
			     "any other are not judged (counted: keys_dropped)",
			     d->o.max_keys);
		return NULL;
	}
	k = calloc(1, sizeof(*k));
	if (!k)
		return NULL;
	k->instance = strdup(inst);
	if (!k->instance || dm_init(&k->m)) {
		key_free(k);
		return NULL;
	}
	k->rank = rank;
	k->phase = ph;
	/* the phases of one (instance, rank) are one sequence of steps */
	for (int p = 0; p < DIAG_PHASE_COUNT && !k->seq; p++) {
		struct dkey *sib = p == (int)ph ? NULL : d->keys[key_slot(d, inst, rank, p)];

		if (sib)
			k->seq = sib->seq;
	}
	if (!k->seq && !(k->seq = calloc(1, sizeof(*k->seq)))) {
		key_free(k);
		return NULL;
	}
	k->seq->refs++;
	d->keys[i] = k;
	d->kused++;
	d->cnt.keys++;
	return k;
}

static const struct dref *ref_for(const struct diag_det *d, const struct dkey *k)
{
	const struct dref *any = NULL;

	for (uint32_t i = 0; i < d->n_refs; i++) {
		const struct dref *r = &d->refs[i];

		if (r->phase != k->phase || strcmp(r->instance, k->instance))
			continue;
		if (r->rank == k->rank)
			return r;
		if (!any)
			any = r;
	}
	return any;
}

/* ------------------------------------------------------------- kinds ---- */

static void add_suspect(struct diag_anomaly *an, const char *what, double value, double ratio,
			const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void add_suspect(struct diag_anomaly *an, const char *what, double value, double ratio,
			const char *fmt, ...)
{
	struct diag_suspect *s;
	va_list ap;

	if (an->n_suspects >= DIAG_SUSPECTS_MAX)
		return;
	s = &an->suspects[an->n_suspects++];
	s->what = what;
	s->value = value;
	s->ratio = ratio;
	va_start(ap, fmt);
	vsnprintf(s->evidence, sizeof(s->evidence), fmt, ap);
	va_end(ap);
}

static int cmp_suspect(const void *a, const void *b)
{
	const struct diag_suspect *x = a, *y = b;

	return x->value < y->value ? 1 : x->value > y->value ? -1 : 0;
}

/* kernels of this step slower per call than their own history */
static void kernel_suspects(struct dkey *k, const struct diag_step *s, struct diag_anomaly *an,
			    double excess)
{
	struct diag_suspect ks[DIAG_TOP_MAX];
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->n_top && i < DIAG_TOP_MAX; i++) {
		const struct diag_kernel *t = &s->top[i];
		struct dkern *h;
		double per, med;

		if (!t->name || !t->count)
			continue;
		h = dk_get(&k->kern, t->name, false, (int)i);
		if (!h || h->steps < 3)
			continue;
		per = (double)t->total_ns / t->count;
		med = exp(h->log_ns);
		if (per < 1.3 * med)
			continue;
		ks[n].what = "kernel";
		ks[n].value = (per - med) * t->count; /* its share of the excess */
		ks[n].ratio = per / med;
		snprintf(ks[n].evidence, sizeof(ks[n].evidence),
			 "kernel %.80s %.1fx its median (%.1f -> %.1f us per call, %llu calls, "
			 "%.0f%% of the excess)",
			 t->name, per / med, med / 1e3, per / 1e3, (unsigned long long)t->count,
			 excess > 0 ? 100 * (per - med) * t->count / excess : 0);
		n++;
	}
	qsort(ks, n, sizeof(ks[0]), cmp_suspect);
	for (uint32_t i = 0; i < n && an->n_suspects < DIAG_SUSPECTS_MAX; i++)
		an->suspects[an->n_suspects++] = ks[i];
}

/*
 * Why was the step slow? The excess over the median is split over what the
 * breakdown measured against its own history: GPU busy beyond normal means
 * the GPU was slow (or given more work); GPU idle beyond normal means the
 * GPU waited for the CPU, and the launching thread's run-queue wait or
 * off-CPU time says whether it was preempted (contention) or blocked (a
 * stall). Without a breakdown the shape decides: one slow step is a stall,
 * a run is contention. gap > 0: the gap chart caught one idle gap that much
 * longer than usual, a stall (or, with the run-queue wait to match, the
 * CPU was taken), whatever the step's duration says. cpu > 0: the CPU
 * chart caught that much more run-queue wait than usual, contention.
 */
static void classify(struct dkey *k, const struct diag_step *s, double med, bool window, double gap,
		     double cpu, struct diag_anomaly *an)
{
	double excess = (double)s->dur_ns - med, dur = (double)s->dur_ns;
	double d_idle = -1, d_busy = -1, d_comm = -1, runq = -1, offcpu = -1;

	if (gap > 0)
		excess = gap; /* the stall, not the step's jitter around it */
	if (cpu > 0)
		excess = cpu;
	if (excess <= 0)
		excess = 1;
	if (s->idle_ns >= 0 && k->f_idle.n)
		d_idle = s->idle_ns - k->f_idle.mean * med;
	if (s->gpu_busy_ns >= 0 && k->f_busy.n)
		d_busy = s->gpu_busy_ns - k->f_busy.mean * med;
	if (s->comm_ns >= 0 && k->f_comm.n)
		d_comm = s->comm_ns - k->f_comm.mean * med;
	if (s->runq_ns >= 0)
		runq = s->runq_ns - (k->runq.n ? k->runq.mean : 0);
	if (s->offcpu_ns >= 0)
		offcpu = s->offcpu_ns - (k->offcpu.n ? k->offcpu.mean : 0);

	if (cpu > 0) {
		char by[40] = "";

		an->kind = DIAG_KIND_CPU_CONTENTION;
		if (s->preempt_pid)
			snprintf(by, sizeof(by), "; preempted by pid %u", s->preempt_pid);
		add_suspect(
		    an, "runq", cpu, 0,
		    "launching thread waited %.2f ms for a CPU, %.0f%% of the step where it "
		    "usually waits %.1f%%%s",
		    s->runq_ns / 1e6, 100.0 * (double)s->runq_ns / dur, 100 * k->f_runq.mean, by);
	} else if (gap > 0) {
		an->kind = runq >= 0.3 * excess ? DIAG_KIND_CPU_CONTENTION : DIAG_KIND_HOST_STALL;
		add_suspect(an, "gpu_gap", gap, s->idle_max_ns / fmax(k->gap.mean, 1),
			    "one GPU idle gap of %.2f ms, where the longest is usually %.2f ms: "
			    "the GPU waited for the CPU",
			    s->idle_max_ns / 1e6, k->gap.mean / 1e6);
	} else if (d_comm >= 0.5 * excess) {
		an->kind = DIAG_KIND_COMMUNICATION;
		add_suspect(an, "comm", d_comm, 0,
			    "communication kernels %.2f ms longer than usual (%.2f ms in the step)",
			    d_comm / 1e6, s->comm_ns / 1e6);
	} else if (d_busy >= 0.5 * excess) {
		an->kind = DIAG_KIND_GPU_SLOW;
		add_suspect(an, "gpu_busy", d_busy, s->gpu_busy_ns / fmax(k->f_busy.mean * med, 1),
			    "GPU busy %.2f ms, %.2f ms more than usual for this workload",
			    s->gpu_busy_ns / 1e6, d_busy / 1e6);
		kernel_suspects(k, s, an, excess);
	} else if (runq >= 0.3 * excess) {
		an->kind = DIAG_KIND_CPU_CONTENTION;
	} else if (offcpu >= 0.3 * excess || d_idle >= 0.3 * excess) {
		an->kind = DIAG_KIND_HOST_STALL;
	} else {
		an->kind = window ? DIAG_KIND_CPU_CONTENTION : DIAG_KIND_HOST_STALL;
	}
	if (d_idle > 0 && an->kind != DIAG_KIND_GPU_SLOW) {
		if (offcpu > 0)
			add_suspect(an, "gpu_idle", d_idle, 0,
				    "%.2f ms GPU idle (%.2f ms more than usual) while the "
				    "launching thread was off-CPU %.2f ms",
				    s->idle_ns / 1e6, d_idle / 1e6, s->offcpu_ns / 1e6);
		else
			add_suspect(an, "gpu_idle", d_idle, 0,
				    "%.2f ms GPU idle, %.2f ms more than usual: the GPU waited "
				    "for the CPU",
				    s->idle_ns / 1e6, d_idle / 1e6);
	}
	if (runq > 0.1 * excess && cpu <= 0) {
		if (s->preempt_pid)
			add_suspect(
			    an, "runq", runq, 0,
			    "launching thread waited %.2f ms for a CPU, preempted by pid %u",
			    s->runq_ns / 1e6, s->preempt_pid);
		else
			add_suspect(an, "runq", runq, 0,
				    "launching thread waited %.2f ms for a CPU", s->runq_ns / 1e6);
	}
	if (offcpu > 0.1 * excess)
		add_suspect(an, "offcpu", offcpu, 0, "launching thread off-CPU %.2f ms",
			    s->offcpu_ns / 1e6);
	if (s->slow_syscall_ns > 0.1 * excess)
		add_suspect(an, "syscall", (double)s->slow_syscall_ns, 0,
			    "%lld slow syscalls took %.2f ms", (long long)s->slow_syscalls,
			    s->slow_syscall_ns / 1e6);
	/*
	 * any code load at all: a JIT compiler (Triton at a new shape) compiles
	 * before it loads, so the load's own time is a small part of the stall
	 */
	if (s->code_loads > 0)
		add_suspect(
		    an, "code_load", (double)(s->code_load_ns > 0 ? s->code_load_ns : 0), 0,
		    "the launching thread loaded GPU code %lld time%s in the step (%.2f ms "
		    "in cuModuleLoadData): new kernels, which a JIT compiler such as Triton "
		    "compiles or reads from its cache first",
		    (long long)s->code_loads, s->code_loads == 1 ? "" : "s", s->code_load_ns / 1e6);
	if (an->kind != DIAG_KIND_GPU_SLOW && s->n_top)
		kernel_suspects(k, s, an, excess);
	if (!an->n_suspects)
		add_suspect(an, "step", excess, dur / med,
			    "step %.2f ms, %.2fx the median %.2f ms for its workload; no breakdown "
			    "to say more (kind from the shape: %s)",
			    dur / 1e6, dur / med, med / 1e6, window ? "a run" : "one step");
	/* the first suspect names the kind; the rest by size */
	if (an->n_suspects > 2)
		qsort(&an->suspects[1], an->n_suspects - 1, sizeof(an->suspects[0]), cmp_suspect);
}

static void emit(struct diag_det *d, const struct diag_anomaly *an)
{
	d->cnt.anomalies++;
	d->cnt.by_kind[an->kind]++;
	d->cnt.episodes += an->run <= 1;
	if (d->o.anomaly)
		d->o.anomaly(d->o.anomaly_ctx, an);
}

/* a held anomaly: reported (noise == false) or counted as noise */
static void release(struct diag_det *d, struct dseq *sq, bool noise)
{
	sq->held = false;
	d->n_held--;
	if (noise)
		d->cnt.noise++;
	else
		emit(d, &sq->han);
}

void diag_det__flush(struct diag_det *d, uint64_t before_ns)
{
	for (uint32_t i = 0; i < d->kcap && d->n_held; i++) {
		struct dkey *k = d->keys[i];

		if (k && k->seq->held && k->seq->han.step_start_ns + k->seq->han.dur_ns < before_ns)
			release(d, k->seq, false);
	}
}

static int noise_count(const struct dseq *sq)
{
	int n = 0;

	for (int i = 0; i < NOISE_N; i++)
		n += sq->noise[i] && sq->n - sq->noise[i] <= NOISE_WIN;
	return n;
}

static void mode_add(struct dkey *k, uint64_t cell, float r, uint64_t step)
{
	k->modes[k->mode_pos].cell = cell;
	k->modes[k->mode_pos].r = r;
	k->modes[k->mode_pos].step = step;
	k->mode_pos = (k->mode_pos + 1) % MODE_N;
}

/* lone flagged steps of this workload (its tokens cell, KV within MODE_KV cells) at this ratio */
static int mode_match(const struct dkey *k, uint64_t cell, double r)
{
	int n = 0;

	for (int i = 0; i < MODE_N; i++) {
		const struct dmode *e = &k->modes[i];
		int dk = (int)(uint32_t)e->cell - (int)(uint32_t)cell;

		if (!e->step || e->cell >> 32 != cell >> 32 || abs(dk) > MODE_KV ||
		    k->steps - e->step > STALE_STEPS || fabs(e->r / r - 1) > MODE_TOL)
			continue;
		n++;
	}
	return n;
}

/*
 * The usual breakdown of an accepted step. The longest gap and the run-queue
 * share teach their charts at most one floor over the mean: a stall accepted
 * before the chart judged (its first 16 steps, a workload no cell knew) made
 * the gap chart's spread, and so its limit, 100 ms and more, and the next
 * stalls passed and taught it too.
 */
static void learn_breakdown(const struct diag_det *d, struct dkey *k, const struct diag_step *s)
{
	double dur = (double)s->dur_ns;

	if (s->idle_ns >= 0)
		ew_add(&k->f_idle, s->idle_ns / dur);
	if (s->gpu_busy_ns >= 0)
		ew_add(&k->f_busy, s->gpu_busy_ns / dur);
	if (s->comm_ns >= 0)
		ew_add(&k->f_comm, s->comm_ns / dur);
	if (s->offcpu_ns >= 0)
		ew_add(&k->offcpu, (double)s->offcpu_ns);
	if (s->runq_ns >= 0) {
		ew_add(&k->runq, (double)s->runq_ns);
		ew_add_capped(&k->f_runq, s->runq_ns / dur, RUNQ_FLOOR);
	}
	if (s->idle_max_ns >= 0)
		ew_add_capped(&k->gap, (double)s->idle_max_ns, (double)d->o.gap_floor_ns);
	for (uint32_t i = 0; i < s->n_top && i < DIAG_TOP_MAX; i++) {
		const struct diag_kernel *t = &s->top[i];
		struct dkern *h;
		double l;

		if (!t->name || !t->count || !t->total_ns)
			continue;
		h = dk_get(&k->kern, t->name, true, (int)i);
		if (!h)
			continue;
		l = log((double)t->total_ns / t->count);
		h->log_ns = h->steps ? h->log_ns + 0.1 * (l - h->log_ns) : l;
		h->steps++;
	}
}

/* ------------------------------------------------------------- peers ---- */

static struct dinst *inst_get(struct diag_det *d, const char *name)
{
	for (uint32_t i = 0; i < d->n_inst; i++)
		if (!strcmp(d->inst[i].instance, name))
			return &d->inst[i];
	if (d->n_inst >= MAX_INST)
		return NULL;
	d->inst[d->n_inst].instance = strdup(name);
	if (!d->inst[d->n_inst].instance)
		return NULL;
	return &d->inst[d->n_inst++];
}

/* x[0..n) sorted into v */
static void sort_small(const double *x, uint32_t n, double *v)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = i;

		for (; j > 0 && v[j - 1] > x[i]; j--)
			v[j] = v[j - 1];
		v[j] = x[i];
	}
}

/* the median of the sorted v[0..n) without one value equal to x */
static double median_without(const double *v, uint32_t n, double x)
{
	uint32_t p = 0, m = n - 1;

	while (p < m && v[p] != x)
		p++;
#define V_AT(q) v[(q) < p ? (q) : (q) + 1]
	return m ? ((m & 1) ? V_AT(m / 2) : 0.5 * (V_AT(m / 2 - 1) + V_AT(m / 2))) : 0;
#undef V_AT
}

static void peers(struct diag_det *d, const char *instance, const struct diag_step *s,
		  struct dseq *sq)
{
	static const char *const metric[3] = {"step time", "GPU idle", "launcher off-CPU"};
	struct dinst *in;
	uint32_t idx[MAX_RANKS], n = 0, slot = MAX_RANKS, worst_i = 0, worst_m = 0;
	double x[3][MAX_RANKS], v[3][MAX_RANKS], worst = 0, worst_med = 0;
	uint64_t maxdur = 0;

	if (s->rank < 0)
		return;
	in = sq && sq->inst ? sq->inst : inst_get(d, instance);
	if (!in)
		return;
	if (sq)
		sq->inst = in;
	for (uint32_t i = 0; i < in->n_ranks; i++)
		if (in->r[i].rank == s->rank)
			slot = i;
	if (slot == MAX_RANKS) {
		if (in->n_ranks >= MAX_RANKS)
			return;
		slot = in->n_ranks++;
		in->r[slot].rank = s->rank;
	}
	in->r[slot].valid = true;
	in->r[slot].judged = false;
	in->r[slot].pid = s->pid;
	in->r[slot].tid = s->tid;
	in->r[slot].start = s->start_ns;
	in->r[slot].dur = s->dur_ns;
	in->r[slot].idle = s->idle_ns;
	in->r[slot].offcpu = s->offcpu_ns;
	in->r[slot].phase = s->phase;
	if (in->n_ranks < 2)
		return;
	for (uint32_t i = 0; i < in->n_ranks; i++) {
		uint64_t a = in->r[i].start, b = s->start_ns;

		if (!in->r[i].valid || in->r[i].judged)
			return; /* the round is not complete yet */
		if ((a > b ? a - b : b - a) > s->dur_ns / 2 + in->r[i].dur / 2)
			return;
		if (in->r[i].dur > maxdur)
			maxdur = in->r[i].dur;
		idx[n++] = i;
	}
	for (uint32_t j = 0; j < n; j++) {
		x[0][j] = (double)in->r[idx[j]].dur;
		x[1][j] = (double)in->r[idx[j]].idle;
		x[2][j] = (double)in->r[idx[j]].offcpu;
	}
	/* each metric sorted once: a rank's peers' median is it without that rank */
	for (uint32_t m = 0; m < 3; m++)
		sort_small(x[m], n, v[m]);
	for (uint32_t m = 0; m < 3; m++) {
		bool known = true;

		for (uint32_t j = 0; j < n; j++)
			known &= x[m][j] >= 0;
		if (!known)
			continue;
		for (uint32_t j = 0; j < n; j++) {
			double med = median_without(v[m], n, x[m][j]), dev = x[m][j] - med;
			/* step time relative to itself; idle and off-CPU relative to the step */
			double rel = m == 0 ? (med > 0 ? dev / med : 0) : dev / (double)maxdur;

			/*
			 * a launcher off the CPU while its GPU had work slowed
			 * nothing (it sleeps in a blocking synchronise): it
			 * counts where its GPU idled longer than its peers' too
			 */
			if (m == 2 && x[1][j] >= 0 &&
			    x[1][j] - median_without(v[1], n, x[1][j]) < 0.5 * dev)
				continue;

			if (dev >= (double)d->o.straggler_abs_ns && rel > d->o.straggler_rel &&
			    rel / d->o.straggler_rel > worst) {
				worst = rel / d->o.straggler_rel;
				worst_i = j;
				worst_m = m;
				worst_med = med;
			}
		}
	}
	for (uint32_t j = 0; j < n; j++)
		in->r[idx[j]].judged = true;
	if (worst > 0) {
		struct diag_anomaly an = {0};
		uint32_t ri = idx[worst_i];
		double v = x[worst_m][worst_i];

		an.instance = instance;
		an.rank = in->r[ri].rank;
		an.pid = in->r[ri].pid;
		an.tid = in->r[ri].tid;
		an.phase = in->r[ri].phase;
		an.step_start_ns = in->r[ri].start;
		an.dur_ns = in->r[ri].dur;
		an.expected_ns =
		    corr_d2u64(worst_m == 0 ? worst_med : (double)in->r[ri].dur - (v - worst_med));
		an.score = worst;
		an.kind = DIAG_KIND_STRAGGLER;
		an.chart = "peers";
		an.run = 1;
		add_suspect(&an, "rank", v - worst_med, worst_med > 0 ? v / worst_med : 0,
			    "rank %d %s %.2f ms vs its %u peers' median %.2f ms", an.rank,
			    metric[worst_m], v / 1e6, n - 1, worst_med / 1e6);
		emit(d, &an);
	}
}

/* -------------------------------------------------------- regression ---- */

static void regression(struct diag_det *d, struct dkey *k, const struct diag_step *s, double t,
		       double kv)
{
	struct diag_anomaly an;
	double ref_med, sum = 0, mean;
	uint32_t w = d->o.regression_window;
	bool novel;
	int src;

	if (!k->ref_looked) {
		k->ref = ref_for(d, k);
		k->ref_looked = true;
	}
	if (!k->ref)
		return;
	ref_med = dm_predict(&k->ref->m, t, kv, &src, &novel);
	if (ref_med <= 0)
		return;
	k->reg[k->reg_pos] = (double)s->dur_ns / ref_med;
	k->reg_pos = (k->reg_pos + 1) % w;
	if (k->reg_cnt < w)
		k->reg_cnt++;
	if (k->reg_cnt < w)
		return;
	for (uint32_t i = 0; i < w; i++)
		sum += k->reg[i];
	mean = sum / w;
	if (k->reg_active) {
		/* re-arm once the level is back within half the limit */
		if (mean < 1 + d->o.regression_rel / 2)
			k->reg_active = false;
		return;
	}
	if (mean < 1 + d->o.regression_rel)
		return;
	k->reg_active = true;
	memset(&an, 0, sizeof(an));
	an.instance = k->instance;
	an.rank = k->rank;
	an.pid = s->pid;
	an.tid = s->tid;
	an.phase = k->phase;
	an.step_start_ns = s->start_ns;
	an.dur_ns = s->dur_ns;
	an.expected_ns = corr_d2u64(ref_med);
	an.score = (mean - 1) / d->o.regression_rel;
	an.kind = DIAG_KIND_REGRESSION;
	an.chart = "baseline";
	an.run = 1;
	add_suspect(&an, "baseline", mean, mean,
		    "the last %u steps took %.2fx the saved baseline for their workload", w, mean);
	/* kernels whose name set or per-call time changed against the reference */
	for (uint32_t i = 0; i < k->kern.cap && an.n_suspects < DIAG_SUSPECTS_MAX; i++) {
		const struct dkern *h = &k->kern.tab[i];
		struct dkern *r;

		if (!h->name || h->steps < 3)
			continue;
		r = dk_get((struct dkerns *)&k->ref->kern, h->name, false, -1);
		if (!r)
			add_suspect(&an, "kernel_new", exp(h->log_ns), 0,
				    "kernel %.100s is new (%.1f us per call), not in the baseline",
				    h->name, exp(h->log_ns) / 1e3);
		else if (exp(h->log_ns - r->log_ns) >= 1.2)
			add_suspect(
			    &an, "kernel_slower", exp(h->log_ns), exp(h->log_ns - r->log_ns),
			    "kernel %.100s %.1f -> %.1f us per call (%.2fx the baseline)", h->name,
			    exp(r->log_ns) / 1e3, exp(h->log_ns) / 1e3, exp(h->log_ns - r->log_ns));
	}
	for (uint32_t i = 0; i < k->ref->kern.cap && an.n_suspects < DIAG_SUSPECTS_MAX; i++) {
		const struct dkern *r = &k->ref->kern.tab[i];

		if (r->name && r->steps >= 3 && k->kern.used &&
		    !dk_get(&k->kern, r->name, false, -1))
			add_suspect(&an, "kernel_gone", exp(r->log_ns), 0,
				    "kernel %.100s of the baseline no longer runs", r->name);
	}
	emit(d, &an);
}

/* ------------------------------------------------------------- judge ---- */

/*
 * The limit of a churn step: the CH_Q quantile of the key's recent churn
 * excesses (at least the steady limit); 0 while too few of them are far over
 * the steady limit (or too few are known, or churn is the rule): churn then
 * costs nothing the record does not describe, and the step is judged, and
 * teaches, like any other. "Far over" is CH_HEAVY x the limit to turn the
 * rule on for the key, CH_LIGHT x to keep it on (k->ch_heavy).
 */
static double churn_limit(struct dkey *k, double ucl1)
{
	double q, bar = (k->ch_heavy && !ABL_STAY ? CH_LIGHT : CH_HEAVY) * ucl1;

	if (ABL_CHURN || k->ch_cnt < CH_MIN || k->seq->churn.mean >= CH_SHARE)
		return 0;
	k->ch_heavy = k->ch_sorted[(uint32_t)(CH_HEAVY_Q * (k->ch_cnt - 1) + 0.5)] > bar;
	if (!k->ch_heavy)
		return 0;
	q = k->ch_sorted[(uint32_t)(CH_Q * (k->ch_cnt - 1) + 0.5)];
	return q > ucl1 ? q : ucl1;
}

static void churn_add(struct dkey *k, double up, double clip)
{
	float v = (float)fmin(up, clip), old = 0;
	bool full = k->ch_cnt == CH_N;
	uint32_t n = k->ch_cnt, i;

	if (full) {
		old = k->ch[k->ch_pos];
		for (i = 0; i < n - 1 && k->ch_sorted[i] != old; i++)
			;
		memmove(&k->ch_sorted[i], &k->ch_sorted[i + 1], sizeof(float) * (n - 1 - i));
		n--;
	}
	for (i = n; i > 0 && k->ch_sorted[i - 1] > v; i--)
		k->ch_sorted[i] = k->ch_sorted[i - 1];
	k->ch_sorted[i] = v;
	k->ch[k->ch_pos] = v;
	k->ch_pos = (k->ch_pos + 1) % CH_N;
	if (!full)
		k->ch_cnt++;
}

/*
 * The class of a step (churn, above). In a continuously batched engine, a
 * step's KV tokens are the previous step's plus one token per request that
 * stayed: when they are short of that (requests left and newer, shorter
 * ones took their place) or the batch shrank, requests joined and were
 * prefilled in this step, work its record may not describe (no prefill
 * count, phase unknown): class 1. Class 2: KV grew by more than the batch
 * plus one request's context (several joined). 0: steady. Prefill steps are
 * class 0 and start the comparison again. Without KV tokens (on this step or
 * the one before) the batch alone tells: shrank, class 1; grew, class 2; at
 * the same batch, class 1 while requests wait (waiting(): the batch is under
 * its recent top: a place that frees is taken at once, and the newcomer may
 * have been prefilled in this step), else 0 (a request replaced in a full
 * batch is not seen).
 */
#define CHURN_TOL 0.002
static uint32_t step_class(struct dseq *sq, const struct diag_step *s, bool waits)
{
	double bs = (double)s->batch_size, kv = (double)s->kv_tokens, exp, tol;
	uint32_t c = 0;

	if (s->phase == DIAG_PHASE_PREFILL) {
		sq->pbs = sq->pkv = -1;
		return 0;
	}
	if (sq->pbs > 0 && sq->pkv > 0 && bs >= 0 && kv >= 0) {
		exp = sq->pkv + fmin(bs, sq->pbs);
		tol = 0.5 + CHURN_TOL * kv;
		if (kv < exp - tol || bs < sq->pbs)
			c = 1;
		else if (bs > 0 && kv > exp + tol + kv / bs)
			c = 2;
	} else if (!ABL_NOKV && sq->pbs > 0 && bs >= 0) {
		/*
		 * no KV tokens here or before: the batch alone says it; at the
		 * same batch while requests wait, one took a leaver's place
		 */
		c = bs < sq->pbs ? 1 : bs > sq->pbs ? 2 : waits ? 1 : 0;
	}
	ew_add(&sq->churn, c != 0);
	if (c == 2)
		memset(sq->tw, 0, sizeof(sq->tw));
	sq->pbs = s->batch_size >= 0 ? bs : -1;
	sq->pkv = s->kv_tokens >= 0 ? kv : -1;
	return c;
}

/*
 * One step as the judge sees it: what the model expects (expect()), the
 * limits from the residuals' own spread (limits()), what each chart says
 * (charts()), and what the step's sequence makes of it (sequence()).
 */
struct judge {
	double t, kv, dur;     /* workload coordinates and duration, ns */
	double med, up;	       /* expected median; u+ = max(dur / med - 1, 0) */
	double ucl1, ucl1_own; /* single chart's limit; before a guess widened it */
	double uclw, wsum;     /* smoothed chart: limit, sum of its window */
	double gx, uclg;       /* gap chart: longest gap over usual, and its limit */
	double cx, uclc;       /* CPU chart: extra run-queue wait, and its limit */
	uint32_t wn, cls;
	int src;
	bool novel, measured, churn, judged;
	bool waits; /* judged as requests waiting (waiting()): s is not the record's step */
	bool flag1, flagw, flagg, flagc, explained, flagged;
	bool hostg, hostc; /* the gap or CPU chart sees a stall */
	bool calm, ok, hold, chain;
	bool jitter;		/* a GPU-bound spike, by the breakdown (sequence()) */
	bool recalled;		/* the grid model interpolated stale cells: the stale limit */
	const struct dmodel *m; /* the model that predicts: the key's, or the one before a shift */
	double scale;		/* its medians times this: 1, or the accepted level's ratio */
};

/*
 * The grid model (DIAG_MODEL_GRID): a workload its own cell does not measure
 * (not yet, or not for a long time) is judged against the measured cells
 * that bracket it, interpolated (baseline.c: dm_interp()), as a measurement
 * with the chart's own limit, where the cells model guesses from the nearest
 * cell scaled by the line.
 */
static void grid(const struct diag_step *s, struct judge *j)
{
	bool per_tok = s->batch_size > 0 && (s->tokens < 0 || s->tokens == s->batch_size);
	bool stale;
	double p = dm_interp(j->m, j->t, j->kv, per_tok, &stale);

	if (p <= 0)
		return;
	if (!stale) {
		j->med = p;
		j->src = 1;
		j->novel = false;
	} else if (j->src && j->novel) {
		/*
		 * cells of an earlier job mix (stale) bracket it: still a
		 * guess, but from measurements, so with the stale cell's
		 * limit, not a guess's (not instead of its own stale cell)
		 */
		j->med = p;
		j->src = 1;
		j->recalled = true;
	}
}

/*
 * The model: the median duration expected for the step's workload
 * (baseline.c: its cell, a neighbour scaled by the line, the line; with the
 * grid model, the cells bracketing it before those), never under what a
 * lighter workload's cell measured. While a key learns again after a level
 * shift and its new model bootstraps, the old model predicts, times the
 * accepted level's ratio (relearn()).
 */
static void expect(const struct diag_det *d, struct dkey *k, const struct diag_step *s,
		   struct judge *j)
{
	double u;

	j->dur = (double)s->dur_ns;
	j->t = s->tokens >= 0 ? (double)s->tokens : (double)s->batch_size;
	j->kv = (double)s->kv_tokens;
	j->src = -1;
	k->m.now = k->steps;
	k->m.stale = STALE_STEPS;
	j->cls = step_class(k->seq, s, j->waits);
	j->m = &k->m;
	j->scale = 1;
	if (k->prev && k->steps <= d->o.bootstrap) {
		j->m = k->prev;
		j->scale = k->prev_r;
	}
	j->med = dm_predict(j->m, j->t, j->kv, &j->src, &j->novel);
	if (d->o.model == DIAG_MODEL_GRID && (j->src || j->novel))
		grid(s, j);
	/* a guess under a lighter workload's median is certainly too low */
	if (!ABL_BOUND && j->novel && j->med > 0) {
		double lb = dm_bound(j->m, j->t, j->kv, -1);

		if (lb > j->med)
			j->med = lb;
	}
	j->med *= j->scale;
	/* the workload's own cell or a neighbour's, not a guess of the line */
	j->measured = j->src == 0 || j->src == 1;
	u = j->med > 0 ? j->dur / j->med - 1 : 0;
	j->up = u > 0 ? u : 0;
}

/*
 * A churn step judged by the churn steps just before it that passed
 * (`ucl1`: its limit so far, the churn quantile). Its twins (its key and
 * tokens, in the sequence's last TWIN_GAP steps, TWIN_MIN of them within the
 * steady limit of each other) judge it against the slowest of them by the
 * steady limit, where that is tighter: a step short of one request costs
 * what the last ones short of one did, where the quantile also holds the
 * ramp-ups' 4-8x. Twins that disagree (churn that costs unevenly, prompts
 * the record does not count) say nothing. Without twins, a churn step right
 * after one that passed is not flagged within the steady limit of it: a
 * ramp-up goes on. Returns the limit, a relative excess over the median.
 */
static double twin_limit(const struct dkey *k, const struct judge *j, double ucl1)
{
	const struct dseq *sq = k->seq;
	const struct dtwin *p = &sq->tw[(sq->tw_pos + TWIN_N - 1) % TWIN_N];
	double ref = 0, lo = INFINITY;
	int n = 0;

	if (j->med <= 0)
		return ucl1;
	for (uint32_t i = 0; i < TWIN_N; i++) {
		const struct dtwin *w = &sq->tw[i];

		if (w->n && w->phase == (int)k->phase && sq->n - w->n < TWIN_GAP &&
		    w->t == (float)j->t) {
			ref = fmax(ref, w->dur);
			lo = fmin(lo, w->dur);
			n++;
		}
	}
	if (n >= TWIN_MIN && ref <= lo * (1 + j->ucl1_own))
		return fmin(ucl1, fmax(ref * (1 + j->ucl1_own) / j->med - 1, j->ucl1_own));
	if (p->n && p->n == sq->n)
		return fmax(ucl1, p->dur * (1 + j->ucl1_own) / j->med - 1);
	return ucl1;
}

/*
 * limits from the residuals' own spread, with floors (a churn step also
 * moves the key's churn rule on or off: churn_limit())
 */
static void limits(const struct diag_det *d, struct dkey *k, struct judge *j)
{
	double ucl1 = k->u1.n >= CHART_WARM ? k->u1.mean + d->o.k_single * sqrt(k->u1.var) : 0;
	double guess_floor = j->src == 0 || j->recalled ? STALE_FLOOR : NOVEL_FLOOR, uclw;

	if (ucl1 < d->o.floor_single)
		ucl1 = d->o.floor_single;
	j->ucl1_own = ucl1;
	/*
	 * a run in progress: the steady limit, not a guess's (the floor, or
	 * the line's spread) nor the churn quantile (the step still teaches
	 * nothing)
	 */
	bool run = !ABL_RUN && k->seq->run >= RUN_MIN && k->seq->run_r <= RUN_MAX &&
		   k->seq->n - k->seq->run_n < RUN_GAP;

	/* a roofline guess (no cell near) is only as good as the fit's own spread */
	if (!ABL_LINE && j->src == 2 && ucl1 < 1.5 * (k->m.lin.q99 - k->m.lin.q50) && !run)
		ucl1 = 1.5 * (k->m.lin.q99 - k->m.lin.q50);
	if (!ABL_GUESS && j->novel && ucl1 < guess_floor && !run)
		ucl1 = guess_floor;
	if (j->cls) {
		double cl = churn_limit(k, j->ucl1_own);

		j->churn = cl > 0;
		if (j->churn && ucl1 < cl && !run)
			ucl1 = cl;
	}
	if (j->churn && ucl1 > j->ucl1_own && !ABL_TWIN)
		ucl1 = twin_limit(k, j, ucl1);
	j->ucl1 = ucl1;
	/*
	 * the smoothed chart's own spread once it has some; before, the single
	 * chart's (bootstrap included), scaled to a mean of `window` steps: a
	 * floor alone flags every jittery window of a fresh key
	 */
	if (k->uw.n >= CHART_WARM)
		uclw = k->uw.mean + d->o.k_window * sqrt(k->uw.var);
	else
		uclw =
		    k->u1.n >= 2 ? k->u1.mean + d->o.k_window * sqrt(k->u1.var / d->o.window) : 0;
	j->uclw = uclw < d->o.floor_window ? d->o.floor_window : uclw;
}

/* the host charts: they know no workload, so novel ones are judged too */
static void host_charts(const struct diag_det *d, const struct dkey *k, const struct diag_step *s,
			struct judge *j)
{
	/* a host stall is one long GPU idle gap */
	if (!ABL_GAP && s->idle_max_ns >= 0 && k->gap.n >= CHART_WARM) {
		j->gx = (double)s->idle_max_ns - k->gap.mean;
		j->uclg = d->o.k_single * sqrt(k->gap.var);
		if (j->uclg < (double)d->o.gap_floor_ns)
			j->uclg = (double)d->o.gap_floor_ns;
		j->hostg = j->gx > j->uclg;
		j->flagg = !j->flag1 && !j->flagw && j->hostg;
	}
	/*
	 * the launcher waited for a CPU a larger share of the step than it
	 * does, and the GPU idled for it
	 */
	if (!ABL_CPU && s->runq_ns >= 0 && s->idle_ns >= 0 && k->f_runq.n >= CHART_WARM &&
	    k->f_idle.n) {
		j->cx = (double)s->runq_ns - k->f_runq.mean * j->dur;
		j->uclc = fmax(d->o.k_single * sqrt(k->f_runq.var), RUNQ_FLOOR) * j->dur;
		if (j->uclc < 1e6)
			j->uclc = 1e6;
		j->hostc = j->cx > j->uclc && s->idle_ns - k->f_idle.mean * j->dur >= 0.5 * j->cx;
		j->flagc = !j->flag1 && !j->flagw && !j->flagg && j->hostc;
	}
}

/* the duration charts, single and smoothed, then the host charts */
static void charts(const struct diag_det *d, struct dkey *k, const struct diag_step *s,
		   struct judge *j)
{
	j->judged = true;
	j->flag1 = j->up > j->ucl1;
	/*
	 * a novel workload's guess is loose, but no step is slower than a
	 * heavier workload's: above that bound by the chart's own limit it is
	 * flagged as if its cell were known
	 */
	if (!ABL_BOUND && !j->flag1 && j->novel && !j->churn) {
		double ub = dm_bound(j->m, j->t, j->kv, 1) * j->scale;

		if (ub > 0 && j->dur > ub * (1 + j->ucl1_own)) {
			j->flag1 = true;
			j->src = 3;
			j->measured = false;
			j->med = ub;
			j->up = j->dur / j->med - 1;
			j->ucl1 = j->ucl1_own;
		}
	}
	/* a second mode of this workload; the next step may end a run */
	if (!ABL_MODES && j->flag1 && j->measured && k->seq->last_ok &&
	    mode_match(k, dm_bin_key(j->t, j->kv), j->dur / j->med) >= MODE_MIN) {
		j->flag1 = false;
		j->explained = true;
	}
	/* smoothed chart over the steps the single chart did not flag */
	for (uint32_t i = 0; i < k->wcnt; i++)
		j->wsum += k->win[i];
	j->wn = k->wcnt;
	if (!j->flag1 && !j->explained) {
		double wm = (j->wsum + j->up) / (j->wn + 1);

		j->flagw = !ABL_WINDOW && !j->novel && !j->churn && j->wn + 1 >= d->o.window &&
			   wm > j->uclw && j->up > d->o.floor_window / 2;
	}
	host_charts(d, k, s, j);
}

/*
 * What the step's (instance, rank) sequence makes of it: lone steps (flagged
 * or explained between two clearly normal ones, normal meaning under half
 * the limit against a measured cell) teach second modes; a spike that noise
 * may hold (no host chart sees a stall, the GPU was busy for the excess; on
 * a step with no breakdown to say either way, a small one) waits for the
 * next step, which also decides the one held before.
 */
static void sequence(struct diag_det *d, struct dkey *k, const struct diag_step *s, struct judge *j)
{
	struct dseq *sq = k->seq;
	bool spike;

	sq->n++;
	j->calm = j->judged && !j->flagged && !j->explained && j->up < j->ucl1_own;
	j->ok = j->calm && j->measured && j->up < j->ucl1_own / 2;
	spike = (j->flag1 || j->flagw) && j->measured && !j->hostg && !j->hostc;
	if (s->gpu_busy_ns >= 0) {
		spike = spike && k->f_busy.n >= CHART_WARM &&
			s->gpu_busy_ns - k->f_busy.mean * j->med >= NOISE_GPU * (j->dur - j->med);
		j->jitter = spike && j->flag1 && j->up < SPIKE_MAX * j->ucl1;
	} else
		spike = spike && !ABL_NBSPIKE && j->dur < NOISE_NB * j->med;
	j->hold = !ABL_HOLD && spike && j->up < SPIKE_MAX * j->ucl1 &&
		  (noise_count(sq) >= NOISE_MIN || (!ABL_SMALL && j->dur < NOISE_SMALL * j->med));
	/* an uneven spike after a held one: a burst of jitter, not a level */
	j->chain = !ABL_BURST && j->hold && sq->held && sq->burst < BURST_MAX &&
		   fabs(j->dur / j->med / sq->hr - 1) > BURST_TOL;
	if (sq->held)
		release(d, sq, j->calm || j->chain);
	j->hold = j->hold && (sq->last_quiet || j->chain);
	if (sq->pend && j->ok)
		mode_add(sq->pk, sq->pcell, sq->pr, sq->pstep);
	if (sq->npend && j->calm)
		sq->noise[sq->noise_pos++ % NOISE_N] = sq->nstep;
	sq->pend =
	    (j->flag1 || j->explained) && j->measured && !j->flagg && !j->flagc && sq->last_ok;
	if (sq->pend) {
		sq->pk = k;
		sq->pcell = dm_bin_key(j->t, j->kv);
		sq->pr = (float)(j->dur / j->med);
		sq->pstep = k->steps;
	}
	sq->npend = j->flag1 && spike && sq->last_quiet;
	sq->nstep = sq->n;
	sq->last_ok = j->ok;
	sq->last_quiet = j->judged && !j->flagged;
	if (!j->cls && j->med > 0) {
		sq->run = j->flagged ? sq->run + 1 : 0;
		sq->run_r = (float)(j->dur / j->med);
		sq->run_n = sq->n;
	}
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return (x > y) - (x < y);
}

/*
 * LEVEL_SHIFT flagged steps in a row (LEVEL_SHIFT_BARE where the step is
 * duration only): the new level is accepted and the key learns its model
 * again. Until the new model bootstraps, the old one judges,
 * its medians times the run's median dur / median: a key learning again is
 * not blind (a 43 ms stall 12 steps after a GPU clock change went unjudged).
 * The gap chart learns again only where the level is in the host's gaps
 * (most of the run crossed it); a level in the GPU's time leaves the usual
 * gaps as they were. Seen modes are forgotten. The shift is counted, logged
 * and handed to opts.level_shift: the anomalies stop here, and it says why.
 */
static int relearn(struct diag_det *d, struct dkey *k, const struct diag_step *s)
{
	float r[LEVEL_SHIFT];
	uint32_t ls = (uint32_t)k->consec; /* LEVEL_SHIFT, or fewer: LEVEL_SHIFT_BARE */
	struct diag_level_shift sh = {.instance = k->instance,
				      .rank = s->rank,
				      .pid = s->pid,
				      .tid = s->tid,
				      .phase = s->phase,
				      .step_start_ns = s->start_ns,
				      .steps = ls};
	double med;

	memcpy(r, k->run_r, sizeof(r));
	qsort(r, ls, sizeof(r[0]), cmp_float);
	med = (r[(ls - 1) / 2] + r[ls / 2]) / 2;
	for (int i = 1; i < DIAG_KIND_COUNT; i++)
		if (k->run_kind[i] > k->run_kind[sh.kind])
			sh.kind = (enum diag_kind)i;
	sh.ratio = med;
	d->cnt.level_shifts++;
	dlog(d, CORR_LOG_WARN,
	     "diag: %s rank %d %s: %u slow steps in a row, accepting the new level (%.2fx "
	     "the expected, mostly %s)",
	     k->instance, s->rank, diag_phase_name(s->phase), ls, med, diag_kind_name(sh.kind));
	if (d->o.level_shift)
		d->o.level_shift(d->o.level_shift_ctx, &sh);
	if (2 * k->run_gap >= ls)
		memset(&k->gap, 0, sizeof(k->gap));
	k->consec = 0;
	k->run_gap = 0;
	memset(k->run_kind, 0, sizeof(k->run_kind));
	memset(k->modes, 0, sizeof(k->modes));
	if (!k->prev && (k->prev = malloc(sizeof(*k->prev)))) {
		*k->prev = k->m;
		k->prev_r = med;
	} else {
		/*
		 * shifted again before the new model took over: the old one
		 * stays, the ratios compound; or no memory for it: blind until
		 * the new model bootstraps
		 */
		if (k->prev)
			k->prev_r *= med;
		dm_free(&k->m);
	}
	k->steps = 0;
	return dm_init(&k->m) ? -ENOMEM : 0;
}

/* flagged steps in a row that make a new level: fewer for a step of duration only */
static uint64_t level_shift(const struct diag_step *s)
{
	bool duration_only =
	    s->tokens < 0 && s->batch_size < 0 && s->kv_tokens < 0 && s->gpu_busy_ns < 0;

	return !ABL_BARE && duration_only ? LEVEL_SHIFT_BARE : LEVEL_SHIFT;
}

/*
 * A flagged step: its anomaly, kind from the evidence (classify()), reported
 * now or held for the next step; 64 in a row (16 of duration only) are a new
 * level, learned again.
 */
static int report(struct diag_det *d, struct dkey *k, const struct diag_step *s,
		  const struct judge *j, struct diag_verdict *v)
{
	struct dseq *sq = k->seq;
	struct diag_anomaly an = {0};

	k->run_r[k->consec % LEVEL_SHIFT] = (float)(j->dur / j->med);
	k->run_gap += j->hostg;
	k->consec++;
	k->flag_u = j->jitter ? j->ucl1 : -1;
	an.instance = k->instance;
	an.rank = s->rank;
	an.pid = s->pid;
	an.tid = s->tid;
	an.phase = s->phase;
	an.step_start_ns = s->start_ns;
	an.dur_ns = s->dur_ns;
	an.expected_ns = corr_d2u64(j->med * (1 + k->u1.mean + 2.33 * sqrt(k->u1.var)));
	if (j->flagg) {
		an.score = j->gx / j->uclg;
		an.chart = "gap";
	} else if (j->flagc) {
		an.score = j->cx / j->uclc;
		an.chart = "cpu";
	} else {
		an.score = j->flag1 ? j->up / j->ucl1 : ((j->wsum + j->up) / (j->wn + 1)) / j->uclw;
		an.chart = j->flag1 ? "single" : "window";
	}
	classify(k, s, j->med, j->flagw, j->flagg ? j->gx : 0, j->flagc ? j->cx : 0, &an);
	an.run = (uint32_t)k->consec;
	k->run_kind[an.kind]++;
	if (v)
		v->score = an.score;
	if (j->hold) {
		sq->han = an;
		sq->hr = (float)(j->dur / j->med);
		sq->burst = j->chain ? sq->burst + 1 : 1;
		sq->held = true;
		d->n_held++;
		if (v)
			v->held = true;
	} else {
		emit(d, &an);
		if (v)
			v->anomalous = true;
	}
	if (k->consec < level_shift(s))
		return 0;
	return relearn(d, k, s);
}

/*
 * An accepted step teaches the baseline and the charts, its excess clipped
 * at TEACH_CLIP x the floor: a slow level under the limit (a GPU 1.33x slow
 * in a noisy stretch) taught as is raised the limit step by step and was
 * never flagged. A churn step whose key learned that churn costs unrecorded
 * work teaches neither.
 */
static int learn(struct diag_det *d, struct dkey *k, const struct diag_step *s,
		 const struct judge *j)
{
	learn_breakdown(d, k, s);
	if (j->churn)
		return 0;
	if (j->judged && !j->novel) {
		double wm = (j->wsum + j->up) / (j->wn + 1);

		ew_add(&k->u1, ABL_TEACH ? j->up : fmin(j->up, TEACH_CLIP * d->o.floor_single));
		if (j->wn + 1 >= d->o.window)
			ew_add(&k->uw, ABL_TEACH ? wm : fmin(wm, TEACH_CLIP * d->o.floor_window));
	} else if (!j->judged && j->med > 0 && j->src == 0) {
		/*
		 * bootstrap warms the chart too, clipped at the floor: nothing
		 * judged these steps, and one stall among them taught as is
		 * made the limit several times the step
		 */
		ew_add(&k->u1, ABL_BOOT ? j->up : fmin(j->up, d->o.floor_single));
	}
	if (dm_add(&k->m, j->t, j->kv, j->dur) == -ENOMEM)
		return -ENOMEM;
	dm_lin_sample(&k->m, j->t, j->kv, j->dur);
	k->accepted++;
	/*
	 * refit at the end of the bootstrap, then each time the accepted steps
	 * double (a line from 24 steps extrapolates badly), then every `refit`
	 */
	if (++k->since_refit >= d->o.refit ||
	    (k->accepted >= d->o.bootstrap && k->accepted < d->o.refit &&
	     !(k->accepted % d->o.bootstrap) &&
	     !((k->accepted / d->o.bootstrap) & (k->accepted / d->o.bootstrap - 1)))) {
		k->since_refit = 0;
		if (!dm_lin_fit(&k->m.lin))
			d->cnt.refits++;
	}
	return 0;
}

/* the window remembers u+ of the last unflagged steps judged against a measurement */
static void remember(const struct diag_det *d, struct dkey *k, const struct judge *j)
{
	if (j->judged && j->cls)
		churn_add(k, j->up, CH_CLIP * j->ucl1);
	if (j->judged && j->churn && !j->flagged) {
		struct dtwin *w = &k->seq->tw[k->seq->tw_pos++ % TWIN_N];

		*w = (struct dtwin){.n = k->seq->n + 1,
				    .t = (float)j->t,
				    .dur = (float)j->dur,
				    .phase = (int)k->phase};
	}
	/* flagged ones are skipped, not kept as holes: a slow GPU under jitter, flagged
	 * every other step, left the chart blind */
	if (!j->flag1 && !j->explained && j->measured && !j->churn) {
		k->win[k->wpos] = (float)j->up;
		k->wpos = (k->wpos + 1) % d->o.window;
		if (k->wcnt < d->o.window)
			k->wcnt++;
	}
}

/*
 * Requests waiting (WAIT_N above): a step of unknown phase whose batch is
 * under the largest of the sequence's last WAIT_N steps is judged as what it
 * is, a mixed step prefilling the missing requests: key phase mixed, tokens
 * the number missing. Its cells then tell one newcomer from fourteen, where
 * the churn quantile of the unknown-phase key took every such step as
 * alike. Returns the step to judge: s itself, or *w.
 */
static const struct diag_step *waiting(struct dseq *sq, const struct diag_step *s,
				       struct diag_step *w)
{
	int64_t top = s->batch_size;
	uint32_t prev = (sq->wpos + WAIT_N - 1) % WAIT_N;

	if (s->batch_size <= 0)
		return s;
	sq->wheld = sq->wpos && sq->wbs[prev] == s->batch_size ? sq->wheld + 1 : 1;
	if (sq->wheld == WAIT_HELD) /* the engine's level now */
		for (uint32_t i = 0; i < WAIT_N; i++)
			sq->wbs[i] = s->batch_size;
	sq->wbs[sq->wpos++ % WAIT_N] = s->batch_size;
	if (ABL_WAIT || s->phase != DIAG_PHASE_UNKNOWN ||
	    (s->tokens >= 0 && s->tokens != s->batch_size))
		return s;
	for (uint32_t i = 0; i < WAIT_N; i++)
		if (sq->wbs[i] > top)
			top = sq->wbs[i];
	if (top == s->batch_size)
		return s;
	*w = *s;
	w->phase = DIAG_PHASE_MIXED;
	w->tokens = top - s->batch_size;
	return w;
}

int diag_det__add_step(struct diag_det *d, const struct diag_step *rs, struct diag_verdict *v)
{
	const struct diag_step *s = rs;
	struct diag_step w;
	const char *inst = s->instance ? s->instance : "";
	struct judge j = {0};
	struct dkey *k;
	int err = 0;

	if (v)
		memset(v, 0, sizeof(*v));
	d->cnt.steps++;
	if (!s->dur_ns) {
		d->cnt.bad_steps++;
		return -EINVAL;
	}
	k = key_get(d, inst, s->rank, s->phase);
	peers(d, inst, s, k ? k->seq : NULL);
	if (k && (s = waiting(k->seq, rs, &w)) != rs) {
		j.waits = true;
		d->cnt.waiting++;
		k = key_get(d, inst, s->rank, s->phase);
	}
	if (!k)
		return d->kused >= d->o.max_keys ? -ENOSPC : -ENOMEM;
	k->steps++;
	if (k->steps > d->o.bootstrap)
		prev_drop(k);
	expect(d, k, s, &j);
	limits(d, k, &j);
	if (j.med > 0 && (k->steps > d->o.bootstrap || j.m != &k->m))
		charts(d, k, s, &j);
	j.flagged = j.flag1 || j.flagw || j.flagg || j.flagc;
	remember(d, k, &j);
	if (j.judged)
		d->cnt.judged++;
	else
		d->cnt.bootstrapping++;
	if (v) {
		v->judged = j.judged;
		v->median_ns = corr_d2u64(j.med);
		v->source = j.src;
		v->expected_ns =
		    j.med > 0 ? corr_d2u64(j.med * (1 + k->u1.mean + 2.33 * sqrt(k->u1.var))) : 0;
		v->score = j.ucl1 > 0 ? j.up / j.ucl1 : 0;
	}
	if (j.judged && j.churn && !j.flagged && !j.explained && j.up > j.ucl1_own)
		d->cnt.churn++;
	sequence(d, k, s, &j);
	if (j.flagged) {
		err = report(d, k, rs, &j, v); /* the phase the record gave */
	} else {
		/*
		 * a lone GPU-bound spike (the breakdown says the kernels ran
		 * longer, no host chart saw a stall) teaches the chart the limit
		 * it crossed: in a noisy stretch the limit rises with the
		 * jitter. Without a breakdown nothing says a slow step was
		 * jitter, and it teaches nothing.
		 */
		if (!ABL_SPIKE && k->consec == 1 && j.judged && !j.novel && k->flag_u >= 0)
			ew_add(&k->u1, k->flag_u);
		k->consec = 0;
		k->run_gap = 0;
		memset(k->run_kind, 0, sizeof(k->run_kind));
		if (j.explained)
			d->cnt.explained++;
		else
			err = learn(d, k, s, &j);
	}
	if (err)
		return err;
	regression(d, k, s, j.t, j.kv);
	return 0;
}

/* ------------------------------------------------------- save / load ---- */

/*
 * Text, one item per line, tab separated (docs/diagnosis.md):
 *   infertrace-baseline 1
 *   key <rank> <phase> <steps> <c0> <c1> <c2> <q50> <q99> <instance>
 *   bin <bin key hex> <median ns> <count> <mean tokens> <mean kv>
 *   kern <log ns per call> <steps> <name>
 * bin and kern lines belong to the key line above them.
 */
int diag_det__save(const struct diag_det *d, const char *path)
{
	FILE *f = fopen(path, "w");
	int err = 0;

	if (!f) {
		err = -errno;
		dlog(d, CORR_LOG_ERROR, "diag: cannot write baseline %s: %s", path, strerror(-err));
		return err;
	}
	fprintf(f, "infertrace-baseline 1\n");
	for (uint32_t i = 0; i < d->kcap; i++) {
		const struct dkey *k = d->keys[i];

		if (!k || strpbrk(k->instance, "\t\n"))
			continue;
		fprintf(f, "key\t%d\t%s\t%llu\t%.9g\t%.9g\t%.9g\t%.6g\t%.6g\t%s\n", k->rank,
			diag_phase_name(k->phase), (unsigned long long)k->steps, k->m.lin.c[0],
			k->m.lin.c[1], k->m.lin.c[2], k->m.lin.ok ? k->m.lin.q50 : 0,
			k->m.lin.ok ? k->m.lin.q99 : -1, k->instance);
		for (uint32_t j = 0; j < k->m.cap; j++) {
			const struct dbin *b = &k->m.bins[j];

			if (b->key == BIN_EMPTY || !b->cnt)
				continue;
			fprintf(f, "bin\t%llx\t%.9g\t%u\t%.6g\t%.6g\n", (unsigned long long)b->key,
				dm_bin_median(b), b->cnt, b->sum_t / b->cnt, b->sum_kv / b->cnt);
		}
		for (uint32_t j = 0; j < k->kern.cap; j++) {
			const struct dkern *h = &k->kern.tab[j];

			if (h->name && !strpbrk(h->name, "\t\n"))
				fprintf(f, "kern\t%.9g\t%llu\t%s\n", h->log_ns,
					(unsigned long long)h->steps, h->name);
		}
	}
	if (ferror(f))
		err = -EIO;
	if (fclose(f) && !err)
		err = -errno;
	if (err)
		dlog(d, CORR_LOG_ERROR, "diag: writing baseline %s failed: %s", path,
		     strerror(-err));
	return err;
}

static int load_bin(struct dref *r, char *rest)
{
	unsigned long long key;
	double med, mt, mkv;
	unsigned cnt;

	if (sscanf(rest, "%llx\t%lf\t%u\t%lf\t%lf", &key, &med, &cnt, &mt, &mkv) != 5 || med <= 0 ||
	    !cnt || cnt > BIN_RING || key == BIN_EMPTY)
		return -EINVAL;
	/* the saved line's floor (baseline.c: dm_lin_fit): its quickest cell */
	if (!r->m.lin.floor || med < r->m.lin.floor)
		r->m.lin.floor = med;
	return dm_put_bin(&r->m, key, med, cnt, mt, mkv);
}

int diag_det__load(struct diag_det *d, const char *path)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	struct dref *cur = NULL;
	unsigned long lineno = 0;
	int err = 0;

	if (!f) {
		err = -errno;
		dlog(d, CORR_LOG_ERROR, "diag: cannot read baseline %s: %s", path, strerror(-err));
		return err;
	}
	while (fgets(line, sizeof(line), f)) {
		size_t n = strlen(line);
		char *tab;

		lineno++;
		if (n && line[n - 1] == '\n')
			line[--n] = '\0';
		else if (!feof(f)) {
			err = -EINVAL;
			break;
		}
		if (lineno == 1) {
			if (strcmp(line, "infertrace-baseline 1")) {
				err = -EINVAL;
				break;
			}
			continue;
		}
		tab = strchr(line, '\t');
		if (!tab) {
			err = -EINVAL;
			break;
		}
		*tab++ = '\0';
		if (!strcmp(line, "key")) {
			int rank, off = 0;
			char phase[16];
			unsigned long long steps;
			double c0, c1, c2, q50, q99;
			struct dref *nr;

			if (sscanf(tab, "%d\t%15[a-z]\t%llu\t%lf\t%lf\t%lf\t%lf\t%lf\t%n", &rank,
				   phase, &steps, &c0, &c1, &c2, &q50, &q99, &off) != 8 ||
			    !off || !tab[off]) {
				err = -EINVAL;
				break;
			}
			nr = realloc(d->refs, sizeof(*d->refs) * (d->n_refs + 1));
			if (!nr) {
				err = -ENOMEM;
				break;
			}
			d->refs = nr;
			cur = &d->refs[d->n_refs];
			memset(cur, 0, sizeof(*cur));
			if (dm_init(&cur->m) || !(cur->instance = strdup(tab + off))) {
				dm_free(&cur->m);
				err = -ENOMEM;
				break;
			}
			d->n_refs++;
			cur->rank = rank;
			diag_phase_parse(phase, &cur->phase);
			cur->m.lin.c[0] = c0;
			cur->m.lin.c[1] = c1;
			cur->m.lin.c[2] = c2;
			cur->m.lin.q50 = q50;
			cur->m.lin.q99 = q99;
			cur->m.lin.ok = q99 >= 0;
			d->cnt.baseline_keys++;
		} else if (!strcmp(line, "bin") && cur) {
			err = load_bin(cur, tab);
			if (err)
				break;
		} else if (!strcmp(line, "kern") && cur) {
			double lns;
			unsigned long long steps;
			int off = 0;
			struct dkern *h;

			if (sscanf(tab, "%lf\t%llu\t%n", &lns, &steps, &off) != 2 || !off ||
			    !tab[off]) {
				err = -EINVAL;
				break;
			}
			h = dk_get(&cur->kern, tab + off, true, -1);
			if (h) {
				h->log_ns = lns;
				h->steps = steps;
			}
		} else {
			err = -EINVAL;
			break;
		}
	}
	if (!err && ferror(f))
		err = -EIO;
	fclose(f);
	if (err)
		dlog(d, CORR_LOG_ERROR, "diag: baseline %s: line %lu: %s", path, lineno,
		     err == -EINVAL ? "malformed" : strerror(-err));
	/* keys already looking at references must look again */
	for (uint32_t i = 0; i < d->kcap; i++)
		if (d->keys[i])
			d->keys[i]->ref_looked = false;
	return err;
}
