// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * diag.c - inference steps and anomalies (correlator/include/diagnose.h),
 * for the live loop and for --replay alike: GPU records, markers and CPU
 * events of launching threads go to the segmenter; each finished step
 * becomes a "step" record and goes through the detector, whose verdicts
 * become "anomaly" records (docs/events.md, docs/diagnosis.md).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "state.h"
#include "pipeline.h"
#include "collective.h"
#include "diagnose.h"

/*
 * Cross-rank waits kept as evidence: the last DIAG_WAITS with a late rank,
 * enough for the steps still being judged (live: the last seconds; replay:
 * the waits come before the steps are judged at the end).
 */
#define DIAG_WAITS 4096

struct diag_wait {
	uint64_t first_ns, last_ns; /* first and last arrival */
	uint64_t late_ns;
	uint64_t comm, seq;
	bool reported; /* an anomaly of its own names it (diag_on_straggler) */
	char evidence[192];
};

void diag_on_wait(struct diag *d, const struct corr_wait *w)
{
	struct diag_wait *e;

	if (!d || w->n_arrived < 2 || !w->late_ns)
		return;
	if (!d->waits && !(d->waits = calloc(DIAG_WAITS, sizeof(*d->waits))))
		return;
	e = &d->waits[d->wnext];
	if (corr_wait_evidence(e->evidence, sizeof(e->evidence), w))
		return; /* too long for a suspect's sentence: not kept */
	e->first_ns = w->ranks[0].arrival_ns;
	e->last_ns = w->last_arrival_ns;
	e->late_ns = w->late_ns;
	e->comm = w->comm_hash;
	e->seq = w->seq;
	e->reported = false;
	d->wnext = (d->wnext + 1) % DIAG_WAITS;
	if (d->nwaits < DIAG_WAITS)
		d->nwaits++;
}

/*
 * Processes with steps: direct-mapped by pid (a pid that collides with an
 * older one makes it forgotten: its straggler is then reported as an
 * anomaly of its own, and its wait kept from the steps' suspects).
 */
#define STEP_PIDS 4096

static void steps_seen(struct diag *d, uint32_t pid)
{
	if (!d->step_pids && !(d->step_pids = calloc(STEP_PIDS, sizeof(*d->step_pids))))
		return;
	d->step_pids[pid % STEP_PIDS] = pid;
}

static bool steps_known(const struct diag *d, uint32_t pid)
{
	return d->step_pids && pid && d->step_pids[pid % STEP_PIDS] == pid;
}

/*
 * A communication or straggler anomaly: the latest-arriving rank of the
 * collective within the step that kept the others waiting longest goes first
 * among the suspects ("collective").
 */
/*
 * s into an's suspects at position at (0: the most likely), those from at
 * on moving down, the last dropped when they are full; false (nothing
 * changed) when at is past the room there is
 */
static bool suspect_put(struct diag_anomaly *an, uint32_t at, const struct diag_suspect *s)
{
	if (at >= DIAG_SUSPECTS_MAX || at > an->n_suspects)
		return false;
	if (an->n_suspects == DIAG_SUSPECTS_MAX)
		an->n_suspects--;
	memmove(&an->suspects[at + 1], &an->suspects[at],
		(an->n_suspects - at) * sizeof(an->suspects[0]));
	an->suspects[at] = *s;
	an->n_suspects++;
	return true;
}

static void wait_suspect(const struct diag *d, struct diag_anomaly *an)
{
	const struct diag_wait *best = NULL;
	struct diag_suspect s = {.what = "collective"};

	if ((an->kind != DIAG_KIND_COMMUNICATION && an->kind != DIAG_KIND_STRAGGLER) ||
	    (an->chart && !strcmp(an->chart, "collective")))
		return; /* a wait's own anomaly: it is the evidence */
	for (uint32_t i = 0; i < d->nwaits; i++) {
		const struct diag_wait *e = &d->waits[i];

		if (!e->reported && e->last_ns >= an->step_start_ns &&
		    e->last_ns <= an->step_start_ns + an->dur_ns &&
		    (!best || e->late_ns > best->late_ns))
			best = e;
	}
	if (!best)
		return;
	snprintf(s.evidence, sizeof(s.evidence), "%s", best->evidence);
	s.value = (double)best->late_ns;
	suspect_put(an, 0, &s); /* its cause: first */
}

/* ------------------------------------------------------------ GPU clocks -- */

/*
 * The "gpu_clock" suspect: a flagged step of a process whose GPU ran under
 * its usual SM clock. NVML's readings of each GPU (the last DIAG_GPU_READS,
 * 128 s at the default 1 s period) are matched with the process's GPUs:
 * the shim names each CUDA device's UUID (EV_GPU_DEVICE), and the process's
 * GPU records say which device numbers it used. The reading "of the step"
 * is the lowest SM clock read from DIAG_GPU_BEFORE_NS before the step's
 * start to its end (a reading stands for a whole period); "usual" is the
 * median of the readings before that, once there are DIAG_GPU_USUAL_MIN.
 * Under 95% of it is a suspect (GPU boost moves the clock by a few percent
 * on its own).
 */
#define DIAG_GPUS 64
#define DIAG_GPU_READS 128
#define DIAG_GPU_BEFORE_NS 1500000000ULL
#define DIAG_GPU_USUAL_MIN 8
#define DIAG_PDEV_DEVS 8
/* an exited process's devices stay for its last steps (cut 2 s after their end), then go */
#define DIAG_PDEV_KEEP_NS 10000000000ULL

struct diag_gpu {
	char uuid[48];
	uint32_t n, next; /* readings held, the next slot */
	struct gpu_read {
		uint64_t ts;
		uint32_t sm;
		char why[84];
	} r[DIAG_GPU_READS];
};

/* a process's Python samples (diag_on_py_sample): the last DIAG_PY_SAMPLES, a ring */
#define DIAG_PY_SAMPLES 1024
struct diag_py {
	uint32_t n, next;
	struct py_sample {
		uint64_t ts;
		uint32_t tid;
		char where[116];
	} s[DIAG_PY_SAMPLES];
};

/* what a process's anomalies may name beside its steps: its GPUs, its Python */
struct diag_pdev {
	uint32_t pid;
	int32_t rank;
	uint64_t exited_ns; /* 0: alive */
	uint64_t seen;	    /* device numbers of its GPU records (bit per device) */
	char instance[128];
	uint32_t n;
	struct {
		uint32_t device;
		char uuid[48];
	} dev[DIAG_PDEV_DEVS];
	struct diag_py *py; /* NULL: no samples */
};

void diag_on_gpu_reading(struct diag *d, const struct gpu_reading *r)
{
	struct diag_gpu *g;
	struct gpu_read *x;

	if (!d || !r->sm_mhz || !r->uuid || !r->uuid[0] || r->index >= DIAG_GPUS)
		return;
	if (!d->gpus && !(d->gpus = calloc(DIAG_GPUS, sizeof(*d->gpus))))
		return;
	g = d->gpus[r->index];
	if (!g) {
		g = d->gpus[r->index] = calloc(1, sizeof(*g));
		if (!g)
			return;
	}
	if (strcmp(g->uuid, r->uuid)) { /* a new GPU at this index: start over */
		memset(g, 0, sizeof(*g));
		snprintf(g->uuid, sizeof(g->uuid), "%s", r->uuid);
	}
	x = &g->r[g->next];
	x->ts = r->ts_ns;
	x->sm = r->sm_mhz;
	snprintf(x->why, sizeof(x->why), "%s", r->why ? r->why : "");
	g->next = (g->next + 1) % DIAG_GPU_READS;
	if (g->n < DIAG_GPU_READS)
		g->n++;
}

static void pdev_free(struct diag_pdev *p)
{
	if (p)
		free(p->py);
	free(p);
}

/* the live process pid's entry, made or started over; NULL without memory */
static struct diag_pdev *pdev_get(struct diag *d, uint32_t pid)
{
	struct diag_pdev *p;

	if (!d->pdev && !(d->pdev = calloc(STEP_PIDS, sizeof(*d->pdev))))
		return NULL;
	p = d->pdev[pid % STEP_PIDS];
	if (!p && !(p = d->pdev[pid % STEP_PIDS] = calloc(1, sizeof(*p))))
		return NULL;
	if (p->pid != pid || p->exited_ns) { /* another process, or the pid came back */
		free(p->py);
		memset(p, 0, sizeof(*p));
		p->pid = pid;
		snprintf(p->instance, sizeof(p->instance), "%s", agent_instance_of(d->a, pid));
		p->rank = agent_rank_of(d->a, pid);
	}
	return p;
}

void diag_on_gpu_device(struct diag *d, uint32_t pid, uint32_t device, const char *uuid)
{
	struct diag_pdev *p;
	uint32_t i;

	if (!d || !pid || !(p = pdev_get(d, pid)))
		return;
	snprintf(p->instance, sizeof(p->instance), "%s", agent_instance_of(d->a, pid));
	p->rank = agent_rank_of(d->a, pid);
	for (i = 0; i < p->n && p->dev[i].device != device; i++)
		;
	if (i == DIAG_PDEV_DEVS)
		return;
	if (i == p->n)
		p->n++;
	p->dev[i].device = device;
	snprintf(p->dev[i].uuid, sizeof(p->dev[i].uuid), "%s", uuid);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* GPU g during [lo, hi]: its lowest reading there and the usual clock before; false: unknown */
static bool gpu_clock_at(const struct diag_gpu *g, uint64_t lo, uint64_t hi,
			 const struct gpu_read **low, uint32_t *usual)
{
	uint32_t before[DIAG_GPU_READS], nb = 0;

	*low = NULL;
	for (uint32_t i = 0; i < g->n; i++) {
		const struct gpu_read *x = &g->r[i];

		if (x->ts < lo)
			before[nb++] = x->sm;
		else if (x->ts <= hi && (!*low || x->sm < (*low)->sm))
			*low = x;
	}
	if (!*low || nb < DIAG_GPU_USUAL_MIN)
		return false;
	qsort(before, nb, sizeof(before[0]), cmp_u32);
	*usual = before[nb / 2];
	return true;
}

/*
 * The GPU of instance (rank, where >= 0) furthest under its usual clock
 * between start and end, as one sentence into out: false when none is under
 * 95% of it (or nothing is known). value: its clock, ratio: to the usual.
 */
static bool clock_evidence(const struct diag *d, const char *instance, int32_t rank, uint64_t start,
			   uint64_t end, struct diag_suspect *out)
{
	uint64_t lo = start > DIAG_GPU_BEFORE_NS ? start - DIAG_GPU_BEFORE_NS : 0;
	const struct gpu_read *best = NULL;
	uint32_t best_usual = 0, best_gpu = 0;

	if (!d->pdev || !d->gpus || !instance)
		return false;
	for (uint32_t i = 0; i < STEP_PIDS; i++) {
		const struct diag_pdev *p = d->pdev[i];

		if (!p || strcmp(p->instance, instance) || (rank >= 0 && p->rank != rank))
			continue;
		for (uint32_t k = 0; k < p->n; k++) {
			const struct gpu_read *low;
			uint32_t usual;

			if (p->dev[k].device >= 64 || !(p->seen & 1ULL << p->dev[k].device))
				continue; /* a device the process has not run work on */
			for (uint32_t gi = 0; gi < DIAG_GPUS; gi++) {
				const struct diag_gpu *g = d->gpus[gi];

				if (!g || strcmp(g->uuid, p->dev[k].uuid) ||
				    !gpu_clock_at(g, lo, end, &low, &usual))
					continue;
				if ((uint64_t)low->sm * 100 < (uint64_t)usual * 95 &&
				    (!best ||
				     (double)low->sm / usual < (double)best->sm / best_usual)) {
					best = low;
					best_usual = usual;
					best_gpu = gi;
				}
			}
		}
	}
	if (!best)
		return false;
	out->what = "gpu_clock";
	snprintf(out->evidence, sizeof(out->evidence),
		 "GPU %u (%.40s) ran at %u MHz, %.0f%% under its usual %u MHz%s%.60s", best_gpu,
		 d->gpus[best_gpu]->uuid, best->sm, 100.0 - 100.0 * best->sm / best_usual,
		 best_usual, best->why[0] ? "; held by " : "", best->why);
	out->value = best->sm;
	out->ratio = (double)best->sm / best_usual;
	return true;
}

/* the anomaly's gpu_clock suspect: first on a gpu_slow one, last (where there is room) else */
static void clock_suspect(struct diag *d, struct diag_anomaly *an)
{
	struct diag_suspect s;

	if (clock_evidence(d, an->instance, an->rank, an->step_start_ns,
			   an->step_start_ns + an->dur_ns, &s) &&
	    suspect_put(an, an->kind == DIAG_KIND_GPU_SLOW ? 0 : an->n_suspects, &s))
		d->clock_suspects++;
}

/* --------------------------------------------------------------- Python -- */

void diag_on_py_sample(struct diag *d, uint32_t pid, uint32_t tid, uint64_t ts, const char *where)
{
	struct diag_pdev *p;
	struct py_sample *x;

	if (!d || !pid || !(p = pdev_get(d, pid)))
		return;
	if (!p->py && !(p->py = calloc(1, sizeof(*p->py))))
		return;
	x = &p->py->s[p->py->next];
	x->ts = ts;
	x->tid = tid;
	snprintf(x->where, sizeof(x->where), "%s", where);
	p->py->next = (p->py->next + 1) % DIAG_PY_SAMPLES;
	if (p->py->n < DIAG_PY_SAMPLES)
		p->py->n++;
}

/*
 * The (thread, innermost frames) that samples of p found most often during
 * [start, end], only of thread tid where tid is not 0: false when none.
 * *n: how often, *of: that thread's samples in the window.
 */
static const struct py_sample *py_top(const struct diag_py *py, uint64_t start, uint64_t end,
				      uint32_t tid, uint32_t *n, uint32_t *of)
{
	const struct py_sample *best = NULL;

	*n = *of = 0;
	for (uint32_t k = 0; k < py->n; k++) {
		const struct py_sample *x = &py->s[k];
		uint32_t same = 0, all = 0;

		if (x->ts < start || x->ts > end || (tid && x->tid != tid))
			continue;
		for (uint32_t j = 0; j < py->n; j++) {
			const struct py_sample *y = &py->s[j];

			if (y->ts < start || y->ts > end || y->tid != x->tid)
				continue;
			all++;
			same += !strcmp(y->where, x->where);
		}
		if (same > *n) {
			best = x;
			*n = same;
			*of = all;
		}
	}
	return best;
}

/*
 * The "python" suspect: what the flagged step's process ran in Python
 * during the step. Its own thread first: the frames found most often in
 * its samples. A thread with fewer than two there was off the CPU or
 * outside Python (waiting for the GIL, for one): then the thread of the
 * process whose frames were found most, named as another. An anomaly of no one step (peers)
 * looks at every process of its instance (and rank). Two samples at least
 * (one is 20 ms of evidence at 49 Hz).
 */
static bool python_evidence(const struct diag *d, const struct diag_anomaly *an,
			    struct diag_suspect *out)
{
	uint64_t start = an->step_start_ns, end = an->step_start_ns + an->dur_ns;
	const struct py_sample *best = NULL;
	uint32_t best_n = 0, best_of = 0;

	if (!d->pdev)
		return false;
	for (uint32_t i = 0; i < STEP_PIDS; i++) {
		const struct diag_pdev *p = d->pdev[i];
		const struct py_sample *x;
		uint32_t n, of;

		if (!p || !p->py)
			continue;
		if (an->pid ? p->pid != an->pid
			    : !an->instance || strcmp(p->instance, an->instance) ||
				  (an->rank >= 0 && p->rank != an->rank))
			continue;
		x = an->tid ? py_top(p->py, start, end, an->tid, &n, &of) : NULL;
		if (!x || n < 2)
			x = py_top(p->py, start, end, 0, &n, &of);
		if (x && n > best_n) {
			best = x;
			best_n = n;
			best_of = of;
		}
	}
	if (!best || best_n < 2)
		return false;
	out->what = "python";
	if (!an->tid || best->tid == an->tid)
		snprintf(out->evidence, sizeof(out->evidence),
			 "thread %u ran %.116s in %u of %u samples", best->tid, best->where, best_n,
			 best_of);
	else
		snprintf(out->evidence, sizeof(out->evidence),
			 "thread %u ran %.72s in %u of %u samples; the step's own thread %u was "
			 "seldom in Python on a CPU",
			 best->tid, best->where, best_n, best_of, an->tid);
	out->value = best_n;
	out->ratio = (double)best_n / best_of;
	return true;
}

/*
 * the anomaly's python suspect: second on a host stall (the GPU waited, and
 * this is what the host ran meanwhile), last (where there is room) else
 */
static void python_suspect(struct diag *d, struct diag_anomaly *an)
{
	uint32_t at = an->kind == DIAG_KIND_HOST_STALL && an->n_suspects ? 1 : an->n_suspects;
	struct diag_suspect s;

	if (python_evidence(d, an, &s) && suspect_put(an, at, &s))
		d->python_suspects++;
}

/*
 * a name from a workload or a recording as printed, cut to sz: control
 * bytes as '?' (term_safe()), also where the digest is printed without
 * its filter (term_safe_out())
 */
static const char *term_name(char *out, size_t sz, const char *in)
{
	size_t n = strnlen(in, sz - 1);

	memcpy(out, in, n);
	out[n] = '\0';
	term_safe(out);
	return out;
}

struct diag_inst_sum {
	char key[INSTANCE_LEN]; /* the instance as given; the others' slot: "" */
	uint64_t steps, anomalies;
	uint64_t by_kind[DIAG_KIND_COUNT];
	struct qhist q[DIAG_STEP_PHASES];
};

/*
 * --summary's part for instance inst: its own slot, or once
 * DIAG_SUM_INSTANCES are taken the others' (so that the digest stays
 * bounded whatever the workloads call themselves); NULL without memory.
 * A step's instance is nearly always the last one's: tried first.
 */
static struct diag_inst_sum *inst_sum(struct diag *d, const char *inst)
{
	uint32_t i;

	inst = inst ? inst : "";
	if (!d->isum && !(d->isum = calloc(DIAG_SUM_INSTANCES + 1, sizeof(*d->isum)))) {
		d->isum_nomem = true;
		return NULL;
	}
	if (d->isum_last < d->n_isum && !strncmp(d->isum[d->isum_last].key, inst, INSTANCE_LEN - 1))
		return &d->isum[d->isum_last];
	for (i = 0; i < d->n_isum && strncmp(d->isum[i].key, inst, INSTANCE_LEN - 1); i++)
		;
	if (i == DIAG_SUM_INSTANCES) {
		d->isum_others = true;
	} else if (i == d->n_isum) {
		snprintf(d->isum[i].key, INSTANCE_LEN, "%s", inst);
		d->n_isum++;
	}
	d->isum_last = i;
	return &d->isum[i];
}

/* ------------------------------------------------------------ diagnosis -- */

static void series_anomaly(struct diag *d, const struct diag_anomaly *an);

static void emit_anomaly(void *ctx, const struct diag_anomaly *in)
{
	struct diag *d = ctx;
	struct diag_anomaly x = *in, *an = &x;
	json_t *o = rec_new(d->a, "anomaly", an->pid, an->tid, an->step_start_ns), *sus;
	struct diag_inst_sum *is;

	if (!o) {
		d->err = -ENOMEM;
		return;
	}
	wait_suspect(d, an);
	clock_suspect(d, an);
	python_suspect(d, an);
	sus = json_array();
	/* the detector's instance (a step stream names its own) */
	json_object_set_new(o, "instance", rec_string(an->instance));
	json_object_set_new(o, "rank", an->rank < 0 ? json_null() : json_integer(an->rank));
	json_object_set_new(o, "phase", json_string(diag_phase_name(an->phase)));
	json_object_set_new(o, "step_start_ns", json_integer((json_int_t)an->step_start_ns));
	json_object_set_new(o, "dur_ns", json_integer((json_int_t)an->dur_ns));
	json_object_set_new(o, "expected_ns", json_integer((json_int_t)an->expected_ns));
	json_object_set_new(o, "score", json_real(an->score));
	json_object_set_new(o, "kind", json_string(diag_kind_name(an->kind)));
	json_object_set_new(o, "chart", json_string(an->chart));
	json_object_set_new(o, "run", json_integer(an->run ? an->run : 1));
	for (uint32_t i = 0; i < an->n_suspects; i++)
		json_array_append_new(
		    sus, json_pack("{s:s,s:s,s:f,s:f}", "what", an->suspects[i].what, "evidence",
				   an->suspects[i].evidence, "value", an->suspects[i].value,
				   "ratio", an->suspects[i].ratio));
	json_object_set_new(o, "suspects", sus);
	d->anomalies++;
	series_anomaly(d, an);
	/* not for diag_on_straggler()'s stand-in when diagnosis is off: no digest */
	is = d == d->a->diag ? inst_sum(d, an->instance) : NULL;
	if (is && (unsigned)an->kind < DIAG_KIND_COUNT) {
		is->anomalies++;
		is->by_kind[an->kind]++;
	}
	for (uint32_t i = 0; i < d->n_slowest; i++) { /* --summary names what flagged it */
		struct diag_slow *w = &d->slowest[i];

		if (w->start_ns == an->step_start_ns && w->rank == an->rank &&
		    !strncmp(w->instance, an->instance ? an->instance : "",
			     sizeof(w->instance) - 1))
			w->kind = (int)an->kind;
	}
	if (rec_emit(d->a, REC_ANOMALY, o))
		d->err = -EIO;
	/*
	 * then full detail on the instance, where configured; steps are judged
	 * at the loop's interval, never inside a ring or shim read. Replay has
	 * no deep-dives (-ENOTSUP), deep mode needs none (-EALREADY).
	 */
	if (d->a->opts.anomaly_dive_s > 0 && an->instance[0]) {
		int err =
		    deepdive_start(d->a, an->instance, d->a->opts.anomaly_dive_s, "anomaly", NULL);

		if (err && err != -ENOTSUP && err != -EALREADY && !d->dive_errors++)
			pr_warn("anomaly on %s: deep-dive refused: %s", an->instance,
				strerror(-err));
	}
}

/*
 * A run of flagged steps accepted as the new level: its anomalies stop here,
 * and the record says why (class anomaly: the anomalies topic, the flight
 * recorder's window with it).
 */
static void emit_level_shift(void *ctx, const struct diag_level_shift *ls)
{
	struct diag *d = ctx;
	json_t *o = rec_new(d->a, "level_shift", ls->pid, ls->tid, ls->step_start_ns);

	if (!o) {
		d->err = -ENOMEM;
		return;
	}
	json_object_set_new(o, "instance", rec_string(ls->instance));
	json_object_set_new(o, "rank", ls->rank < 0 ? json_null() : json_integer(ls->rank));
	json_object_set_new(o, "phase", json_string(diag_phase_name(ls->phase)));
	json_object_set_new(o, "step_start_ns", json_integer((json_int_t)ls->step_start_ns));
	json_object_set_new(o, "steps", json_integer(ls->steps));
	json_object_set_new(o, "ratio", json_real(ls->ratio));
	json_object_set_new(o, "kind", json_string(diag_kind_name(ls->kind)));
	{
		struct diag_suspect s; /* a clock that moved for good: the new level's why */

		if (clock_evidence(d, ls->instance, ls->rank, ls->step_start_ns, ls->step_start_ns,
				   &s))
			json_object_set_new(o, "gpu_clock", json_string(s.evidence));
	}
	if (rec_emit(d->a, REC_ANOMALY, o))
		d->err = -EIO;
}

/* ------------------------------------------------ stragglers of a wait -- */

/*
 * Held until the segmenter has cut the steps around the wait (it cuts a
 * step 2 s after its end: steps.c, hold_ns) and the loop has judged them.
 */
#define STRAG_MAX 64
#define STRAG_DECIDE_NS 3000000000ULL

struct diag_strag {
	struct diag_anomaly an;
	char instance[128]; /* an.instance's text: the process may be gone by then */
	uint32_t pids[CORR_WAIT_MAX_RANKS];
	uint32_t npids;
	uint64_t comm, seq, last_ns;
};

/* written, unless a step of one of its processes is known: its step's anomaly names it */
static void strag_decide(struct diag *d, struct diag_strag *s)
{
	for (uint32_t i = 0; i < s->npids; i++)
		if (steps_known(d, s->pids[i])) {
			d->strag_in_steps++;
			return;
		}
	for (uint32_t i = 0; i < d->nwaits; i++)
		if (d->waits[i].comm == s->comm && d->waits[i].seq == s->seq)
			d->waits[i].reported = true;
	s->an.instance = s->instance;
	d->strag_written++;
	emit_anomaly(d, &s->an);
}

/* the held stragglers whose wait ended before until (all: UINT64_MAX), in order */
static void strag_flush(struct diag *d, uint64_t until)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < d->nstrag; i++) {
		if (d->strag[i].last_ns < until)
			strag_decide(d, &d->strag[i]);
		else
			d->strag[k++] = d->strag[i];
	}
	d->nstrag = k;
}

int diag_on_straggler(struct agent *a, const struct diag_anomaly *an, const uint32_t *pids,
		      uint32_t npids, uint64_t comm, uint64_t seq, uint64_t last_ns)
{
	struct diag off = {.a = a}, *d = a->diag;
	struct diag_strag *s;
	int before;

	if (!d) {
		/* no diagnosis, no steps: the wait is the finding */
		emit_anomaly(&off, an);
		return off.err;
	}
	before = d->err;
	if (!d->strag && !(d->strag = calloc(STRAG_MAX, sizeof(*d->strag)))) {
		emit_anomaly(d, an); /* no memory to hold it: written rather than lost */
		return d->err != before ? d->err : -ENOMEM;
	}
	if (d->nstrag == STRAG_MAX) {
		/* the oldest is decided early */
		strag_decide(d, &d->strag[0]);
		memmove(&d->strag[0], &d->strag[1], (STRAG_MAX - 1) * sizeof(d->strag[0]));
		d->nstrag--;
	}
	s = &d->strag[d->nstrag++];
	s->an = *an;
	snprintf(s->instance, sizeof(s->instance), "%s", an->instance ? an->instance : "");
	s->npids = npids < CORR_WAIT_MAX_RANKS ? npids : CORR_WAIT_MAX_RANKS;
	memcpy(s->pids, pids, s->npids * sizeof(*pids));
	s->comm = comm;
	s->seq = seq;
	s->last_ns = last_ns;
	return d->err != before ? d->err : 0;
}

/*
 * --metrics' step durations (seconds): the upper bounds of
 * infertrace_step_duration_seconds, fine between 20 and 200 ms where decode
 * steps are (75 ms against 160 ms falls in different buckets)
 */
static const double step_le[] = {0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.075, 0.1, 0.125,
				 0.15,	0.2,  0.3,  0.5,  0.75, 1,    2,    5,	   10,	30};
_Static_assert(DIAG_STEP_PHASES == DIAG_PHASE_COUNT, "one step histogram per phase");
_Static_assert(sizeof(step_le) / sizeof(step_le[0]) <= PROM_HIST_MAX, "step_le");

static const struct prom_hist step_none = {.le = step_le,
					   .nle = sizeof(step_le) / sizeof(step_le[0])};

/*
 * One --metrics step histogram per instance and phase: --metrics-instances
 * instances at a time, every other one in "_other" (so a node's series stay
 * bounded whatever names its workloads choose); with --metrics-instances 0
 * one per phase for the node (label NULL). Made with --metrics only, all at
 * diag_new(). A series without a step or an anomaly for
 * --metrics-instance-idle leaves (series_expire()): its slot is the next
 * new instance's.
 */
struct diag_step_series {
	char label[INSTANCE_LEN]; /* printable ASCII, '"' and '\' as '_'; "" unnamed */
	bool other;		  /* "_other": the instances past series_max */
	uint64_t last_ns;	  /* series_now at its latest step or anomaly */
	struct prom_hist h[DIAG_STEP_PHASES];
	uint64_t anomalies[DIAG_KIND_COUNT]; /* its anomaly records by kind */
	uint64_t episodes;		     /* of them, those that open an episode (run 1) */
};

#define SERIES_OTHER "_other"

const struct prom_hist *diag_step_hist(const struct diag *d, uint32_t i, int p,
				       const char **instance)
{
	if (!d || i >= d->n_series || p < 0 || p >= DIAG_STEP_PHASES)
		return NULL;
	*instance = d->series_max ? d->series[i].label : NULL;
	return &d->series[i].h[p];
}

const uint64_t *diag_series_anomalies(const struct diag *d, uint32_t i, uint64_t *episodes,
				      const char **instance)
{
	if (!d || !d->series_max || i >= d->n_series)
		return NULL;
	*instance = d->series[i].label;
	*episodes = d->series[i].episodes;
	return d->series[i].anomalies;
}

/* an empty series: no label, no counts, the step buckets' bounds */
static void series_clear(struct diag_step_series *ser)
{
	memset(ser, 0, sizeof(*ser));
	for (int p = 0; p < DIAG_STEP_PHASES; p++)
		ser->h[p] = step_none;
}

/* an instance name as a Prometheus label value: printable ASCII, nothing to escape */
static void series_label(const char *in, char out[INSTANCE_LEN])
{
	size_t k = 0;

	for (; *in && k < INSTANCE_LEN - 1; in++) {
		unsigned char c = (unsigned char)*in;

		out[k++] = c < 0x20 || c > 0x7e || c == '"' || c == '\\' ? '_' : (char)c;
	}
	out[k] = '\0';
	if (!k)
		snprintf(out, INSTANCE_LEN, "_unnamed");
}

/* the series of a step of instance inst: its own, or "_other" once series_max are taken */
static struct diag_step_series *step_series(struct diag *d, const char *inst)
{
	uint64_t hash = 14695981039346656037ull; /* FNV-1a */
	char label[INSTANCE_LEN];
	uint32_t i, slot;

	if (!d->series_max)
		return d->series;
	for (const char *c = inst ? inst : ""; *c; c++)
		hash = (hash ^ (unsigned char)*c) * 1099511628211ull;
	hash |= 1; /* 0 marks an empty slot */
	slot = hash % (sizeof(d->series_cache) / sizeof(d->series_cache[0]));
	if (d->series_cache[slot].hash == hash)
		return &d->series[d->series_cache[slot].idx];
	series_label(inst ? inst : "", label);
	for (i = 0; i < d->n_series && strcmp(d->series[i].label, label); i++)
		;
	if (i == d->n_series && d->n_series - d->series_other >= d->series_max) /* full: "_other" */
		for (i = 0; i < d->n_series && strcmp(d->series[i].label, SERIES_OTHER); i++)
			;
	if (i == d->n_series) { /* at most series_max named and "_other": calloc'd series_max + 1 */
		d->series[i].other = d->n_series - d->series_other >= d->series_max;
		d->series_other |= d->series[i].other;
		snprintf(d->series[i].label, INSTANCE_LEN, "%s",
			 d->series[i].other ? SERIES_OTHER : label);
		d->n_series++;
	}
	d->series_cache[slot].hash = hash;
	d->series_cache[slot].idx = i;
	return &d->series[i];
}

/* /metrics' anomaly counts per instance (the node's are the detector's counters) */
static void series_anomaly(struct diag *d, const struct diag_anomaly *an)
{
	struct diag_step_series *ser;

	if (!d->series || !d->series_max || (unsigned)an->kind >= DIAG_KIND_COUNT)
		return;
	ser = step_series(d, an->instance);
	ser->anomalies[an->kind]++;
	ser->episodes += an->run <= 1;
	ser->last_ns = d->series_now;
}

/*
 * The series of instances without a step or an anomaly since
 * --metrics-instance-idle before now leave /metrics, "_other" too: the
 * instance's pod is gone, or it is idle, and its slot is for the next new
 * one. Back, an instance starts again from 0 (a counter reset to rate()).
 * Live only (diag_advance()).
 */
static void series_expire(struct diag *d, uint64_t now)
{
	uint32_t k = 0;

	d->series_now = now;
	if (!d->series_max || !d->series_idle_ns)
		return;
	for (uint32_t i = 0; i < d->n_series; i++) {
		if (now > d->series[i].last_ns + d->series_idle_ns) {
			d->series_other &= !d->series[i].other;
			d->series_expired++;
			continue;
		}
		if (k != i)
			d->series[k] = d->series[i];
		k++;
	}
	if (k == d->n_series)
		return;
	for (uint32_t i = k; i < d->n_series; i++)
		series_clear(&d->series[i]);
	d->n_series = k;
	memset(d->series_cache, 0, sizeof(d->series_cache)); /* its indices moved */
}

/* --summary's longest steps: s in its place, longest first, when it is one of them */
static void slowest_add(struct diag *d, const struct diag_step *s, int phase)
{
	uint32_t i = d->n_slowest;
	struct diag_slow *w;

	if (i == DIAG_SLOWEST) { /* full: in place of the shortest, if longer */
		if (s->dur_ns <= d->slowest[--i].dur_ns)
			return;
	} else {
		d->n_slowest++;
	}
	for (; i > 0 && d->slowest[i - 1].dur_ns < s->dur_ns; i--)
		d->slowest[i] = d->slowest[i - 1];
	w = &d->slowest[i];
	*w = (struct diag_slow){.start_ns = s->start_ns,
				.dur_ns = s->dur_ns,
				.pid = s->pid,
				.rank = s->rank,
				.phase = phase,
				.kind = -1};
	/* as given, to match its anomaly's (emit_anomaly()); cleaned where printed */
	snprintf(w->instance, sizeof(w->instance), "%s", s->instance ? s->instance : "");
}

/* every step the detector is given, cut here or recorded: its duration by phase */
static void step_count(struct diag *d, const struct diag_step *s)
{
	int p = (unsigned)s->phase < DIAG_STEP_PHASES ? (int)s->phase : 0;
	struct diag_inst_sum *is = inst_sum(d, s->instance);

	d->steps++;
	if (d->series) {
		struct diag_step_series *ser = step_series(d, s->instance);

		prom_hist_add(&ser->h[p], s->dur_ns / 1e9);
		ser->last_ns = d->series_now;
	}
	qhist_add(&d->step_q[p], s->dur_ns);
	if (is) {
		is->steps++;
		qhist_add(&is->q[p], s->dur_ns);
	}
	if (!d->first_step_ns || s->start_ns < d->first_step_ns)
		d->first_step_ns = s->start_ns;
	slowest_add(d, s, p);
}

static void emit_step(void *ctx, const struct diag_step *cs)
{
	struct diag *d = ctx;
	struct diag_step s = *cs;
	json_t *o;

	steps_seen(d, s.pid);
	s.instance = agent_instance_of(d->a, s.pid);
	if (s.rank < 0) /* no rank= in its marker: the process's environment */
		s.rank = agent_rank_of(d->a, s.pid);
	o = steprec_to_json(d->a, &s);
	if (!o) {
		d->err = -ENOMEM;
		return;
	}
	step_count(d, &s);
	if (rec_emit(d->a, REC_SUMMARY, o))
		d->err = -EIO;
	if (d->det)
		diag_det__add_step(d->det, &s, NULL);
}

int diag_option(struct agent_opts *ao, const char *name, const char *arg)
{
	struct agent_diag_opts *dopt = &ao->diag;
	char *end;
	double v;

	if (!strcmp(name, "step-markers")) {
		if (!strcmp(arg, "auto")) {
			dopt->auto_only = true;
		} else if (!strcmp(arg, "launches")) {
			dopt->auto_only = dopt->no_anchor = true;
		} else if (!strcmp(arg, "off")) {
			dopt->off = true;
		} else {
			dopt->markers = arg;
		}
		return 0;
	}
	if (!strcmp(name, "baseline")) {
		dopt->baseline = arg;
		return 0;
	}
	if (!strcmp(name, "baseline-save")) {
		dopt->baseline_save = arg;
		return 0;
	}
	if (strcmp(name, "detect"))
		return -ENOENT;
	/* KEY=VALUE */
	{
		const char *eq = strchr(arg, '=');
		size_t kl = eq ? (size_t)(eq - arg) : 0;

		if (!eq)
			return -EINVAL;
		/* the one word-valued key: the expected-latency model (docs/diagnosis.md) */
		if (kl == 5 && !strncmp(arg, "model", 5))
			return diag_model_parse(eq + 1, &dopt->det.model);
		errno = 0;
		v = strtod(eq + 1, &end);
		if (errno || end == eq + 1 || *end || !(v > 0) || v > 1e9)
			return -EINVAL;
#define KEY(k) (kl == strlen(k) && !strncmp(arg, k, kl))
		if (KEY("k"))
			dopt->det.k_single = dopt->det.k_window = v;
		else if (KEY("floor"))
			dopt->det.floor_single = v;
		else if (KEY("window-floor"))
			dopt->det.floor_window = v;
		else if (KEY("window") && v <= 32)
			dopt->det.window = (uint32_t)v;
		else if (KEY("bootstrap"))
			dopt->det.bootstrap = (uint32_t)v;
		else if (KEY("straggler"))
			dopt->det.straggler_rel = v;
		else if (KEY("straggler_abs"))
			dopt->det.straggler_abs_ns = (uint64_t)(v * 1e6);
		else if (KEY("regression"))
			dopt->det.regression_rel = v;
		else if (KEY("gap"))
			dopt->det.gap_floor_ns = (uint64_t)(v * 1e6);
		else
			return -EINVAL;
#undef KEY
	}
	return 0;
}

int diag_new(struct agent *a, struct diag **out)
{
	const struct agent_diag_opts *dopt = &a->opts.diag;
	struct diag *d;
	struct diag_seg_opts so = {
	    .sz = sizeof(so),
	    .markers = dopt->markers,
	    .auto_only = dopt->auto_only,
	    .no_anchor = dopt->no_anchor,
	    .step = emit_step,
	    .log = agent_lib_log,
	    .stop = a->stop,
	};
	struct diag_det_opts o = dopt->det;
	int err;

	o.sz = sizeof(o);
	*out = NULL;
	if (dopt->off)
		return 0;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->a = a;
	if (a->opts.metrics) { /* series_max of their own, and one for the rest */
		d->series_max = a->opts.metrics_instances;
		d->series = calloc(d->series_max + 1, sizeof(*d->series));
		if (!d->series) {
			free(d);
			return -ENOMEM;
		}
		for (uint32_t i = 0; i <= d->series_max; i++)
			series_clear(&d->series[i]);
		d->n_series = !d->series_max; /* the node's one series is there from the start */
		d->series_idle_ns = (uint64_t)a->opts.metrics_instance_idle * 1000000000ull;
		d->series_now = now_ns();
	}
	so.step_ctx = d;
	o.sz = sizeof(o);
	o.anomaly = emit_anomaly;
	o.anomaly_ctx = d;
	o.level_shift = emit_level_shift;
	o.level_shift_ctx = d;
	o.log = agent_lib_log;
	d->det = diag_det__new(&o);
	if (!d->det) {
		err = -errno;
		goto fail;
	}
	/* a run can be long: say now that its baseline could not be saved */
	if (dopt->baseline_save) {
		char dir[4096];
		const char *slash = strrchr(dopt->baseline_save, '/');

		snprintf(dir, sizeof(dir), "%.*s",
			 slash ? (int)(slash - dopt->baseline_save + 1) : 1,
			 slash ? dopt->baseline_save : ".");
		if (access(dir, W_OK | X_OK)) {
			err = -errno;
			pr_err("diag: cannot write baseline %s (directory %s): %s",
			       dopt->baseline_save, dir, strerror(-err));
			goto fail;
		}
	}
	if (dopt->baseline) {
		err = diag_det__load(d->det, dopt->baseline);
		if (err)
			goto fail;
		pr_info("baseline %s: %llu keys", dopt->baseline,
			(unsigned long long)diag_det__counters(d->det)->baseline_keys);
	}
	d->seg = diag_seg__new(&so);
	if (!d->seg) {
		err = -errno;
		goto fail;
	}
	*out = d;
	return 0;
fail:
	diag_free(d);
	return err;
}

void diag_on_gpu(struct diag *d, const struct corr_gpu *g, const struct corr_launch *l)
{
	if (!d)
		return;
	if (d->pdev && g->device < 64) { /* which of its devices the process runs work on */
		struct diag_pdev *p = d->pdev[g->pid % STEP_PIDS];

		if (p && p->pid == g->pid)
			p->seen |= 1ULL << g->device;
	}
	diag_seg__add_gpu(d->seg, g, l);
}

void diag_on_marker(struct diag *d, const struct corr_marker *m)
{
	if (d)
		diag_seg__add_marker(d->seg, m);
}

void diag_on_cpu(struct diag *d, const struct diag_cpu_event *e)
{
	if (d)
		diag_seg__add_cpu(d->seg, e);
}

/* a traced process ended: the segmenter drops its state once its steps are cut */
void diag_on_exit(struct diag *d, uint32_t pid)
{
	struct diag_pdev *p;

	if (!d)
		return;
	diag_seg__process_exit(d->seg, pid);
	/* kept for its last steps' suspects; the next process with this pid starts over */
	p = d->pdev ? d->pdev[pid % STEP_PIDS] : NULL;
	if (p && p->pid == pid)
		p->exited_ns = now_ns();
}

void diag_on_step_mark(struct diag *d, const struct step_mark_event *e)
{
	if (!d)
		return;
	if (e->kind == STEP_MARK_BEGIN)
		diag_seg__usdt_begin(
		    d->seg, e->hdr.pid, e->hdr.tid, e->hdr.ts_ns, e->tokens, e->batch, e->kv_tokens,
		    e->phase >= 0 && e->phase <= DIAG_PHASE_MIXED ? (enum diag_phase)e->phase
								  : DIAG_PHASE_UNKNOWN);
	else
		diag_seg__usdt_end(d->seg, e->hdr.pid, e->hdr.tid, e->hdr.ts_ns);
}

void diag_add_step(struct diag *d, const struct diag_step *s)
{
	if (!d)
		return;
	step_count(d, s);
	steps_seen(d, s->pid);
	diag_det__add_step(d->det, s, NULL);
}

/*
 * A held anomaly (a lone GPU-bound spike in a noisy stretch) waits for the
 * next step of its rank; steps are cut 2 s after their end, so one whose
 * step ended this long ago has no next step coming soon: report it.
 */
#define HELD_MAX_NS 5000000000ULL

void diag_advance(struct diag *d, uint64_t now)
{
	if (!d)
		return;
	diag_seg__advance(d->seg, now);
	if (d->series)
		series_expire(d, now);
	if (now > HELD_MAX_NS)
		diag_det__flush(d->det, now - HELD_MAX_NS);
	if (now > STRAG_DECIDE_NS)
		strag_flush(d, now - STRAG_DECIDE_NS);
	for (uint32_t i = 0; d->pdev && i < STEP_PIDS; i++)
		if (d->pdev[i] && d->pdev[i]->exited_ns &&
		    now > d->pdev[i]->exited_ns + DIAG_PDEV_KEEP_NS) {
			pdev_free(d->pdev[i]);
			d->pdev[i] = NULL;
		}
}

/*
 * The counters the live stats record's "diag" object and a replay's
 * diag_status share (docs/events.md): steps written, the detector's
 * verdicts, and what the step segmenter cut, dropped or mended.
 */
void diag_counters(const struct diag *d, json_t *o)
{
	const struct diag_det_counters *dc = diag_det__counters(d->det);
	const struct diag_seg_counters *sc = diag_seg__counters(d->seg);
	const struct {
		const char *name;
		uint64_t v;
	} c[] = {
	    {"steps", d->steps},
	    {"steps_marker", sc->steps_marker + sc->steps_usdt},
	    {"steps_auto", sc->steps_auto + sc->steps_anchor},
	    {"records_outside_steps", sc->outside},
	    {"records_dropped", sc->dropped},
	    {"cpu_events_outside_steps", sc->cpu_outside},
	    {"cpu_events_overlapping", sc->cpu_overlaps},
	    {"steps_cut_short", sc->cut_short},
	    {"bad_metadata", sc->bad_metadata},
	    {"judged", dc->judged},
	    {"anomalies", dc->anomalies},
	    {"explained", dc->explained},
	    {"noise", dc->noise},
	    {"churn", dc->churn},
	    {"waiting", dc->waiting},
	    {"episodes", dc->episodes},
	    {"level_shifts", dc->level_shifts},
	    {"refits", dc->refits},
	    {"keys", dc->keys},
	    {"keys_dropped", dc->keys_dropped},
	    {"bad_steps", dc->bad_steps},
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		json_object_set_new(o, c[i].name, json_integer((json_int_t)c[i].v));
}

/* a phase's steps in --summary, at indent, when it had any */
static void phase_line(FILE *out, int indent, int p, const struct qhist *q)
{
	if (q->n)
		fprintf(out,
			"%*s%-12s %llu steps: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f "
			"ms (within 6.25%%)\n",
			indent, "", diag_phase_name((enum diag_phase)p), (unsigned long long)q->n,
			qhist_quantile(q, 0.50) / 1e6, qhist_quantile(q, 0.90) / 1e6,
			qhist_quantile(q, 0.99) / 1e6, (double)q->max / 1e6);
}

/* anomaly kinds and counts: ": host_stall 1, gpu_slow 2" (nothing when none) */
static void kinds_list(FILE *out, const uint64_t *by_kind)
{
	int n = 0;

	for (int k = 0; k < DIAG_KIND_COUNT; k++)
		if (by_kind[k])
			fprintf(out, "%s %s %llu", n++ ? "," : ":",
				diag_kind_name((enum diag_kind)k), (unsigned long long)by_kind[k]);
}

/*
 * --summary's steps and anomalies per instance, when more than one had
 * any: which of a node's instances is slow. Each instance's anomalies are
 * its anomaly records (the node's line counts the detector's).
 */
static void print_instances(const struct diag *d, FILE *out)
{
	fprintf(out, "  per instance (%s):\n",
		d->isum_others ? "the first 8 by their first step, then the others together"
			       : "in the order their first step came");
	for (uint32_t i = 0; i <= DIAG_SUM_INSTANCES; i++) {
		const struct diag_inst_sum *is = &d->isum[i];
		char name[64] = "(others)";

		if (i < DIAG_SUM_INSTANCES ? i >= d->n_isum : !d->isum_others)
			continue;
		if (i < DIAG_SUM_INSTANCES)
			term_name(name, sizeof(name), is->key[0] ? is->key : "(no instance)");
		fprintf(out, "    %s: %llu steps, ", name, (unsigned long long)is->steps);
		if (is->anomalies)
			fprintf(out, "%llu %s", (unsigned long long)is->anomalies,
				is->anomalies == 1 ? "anomaly" : "anomalies");
		else
			fprintf(out, "no anomalies");
		kinds_list(out, is->by_kind);
		fprintf(out, "\n");
		for (int p = 0; p < DIAG_STEP_PHASES; p++)
			phase_line(out, 6, p, &is->q[p]);
	}
}

/*
 * --summary's section: steps cut and judged, anomalies by kind and in how
 * many episodes, new levels accepted (the counters of stats.diag); per
 * instance where there are several; the longest steps.
 */
void diag_print_summary(const struct diag *d, FILE *out)
{
	struct diag_det_counters since, *dc = &since;
	const struct diag_det_counters *now, *b;

	if (!d)
		return;
	now = diag_det__counters(d->det);
	b = &d->base;
	since = (struct diag_det_counters){
	    .judged = now->judged - b->judged,
	    .anomalies = now->anomalies - b->anomalies,
	    .episodes = now->episodes - b->episodes,
	    .level_shifts = now->level_shifts - b->level_shifts,
	    .keys_dropped = now->keys_dropped - b->keys_dropped,
	};
	for (int k = 0; k < DIAG_KIND_COUNT; k++)
		since.by_kind[k] = now->by_kind[k] - b->by_kind[k];
	fprintf(out, "\nSteps and anomalies (docs/diagnosis.md)\n");
	if (d->steps == d->base_steps) { /* every step the detector sees is counted there first */
		fprintf(out, "  none (steps come from GPU work via the CUPTI library, step markers "
			     "or USDT)\n");
		return;
	}
	fprintf(out, "  %-12s %llu, %llu judged (each baseline's first steps teach it)\n", "steps",
		(unsigned long long)(d->steps - d->base_steps), (unsigned long long)dc->judged);
	for (int p = 0; p < DIAG_STEP_PHASES; p++)
		phase_line(out, 2, p, &d->step_q[p]);
	fprintf(out, "  %-12s %llu in %llu episode(s)", "anomalies",
		(unsigned long long)dc->anomalies, (unsigned long long)dc->episodes);
	kinds_list(out, dc->by_kind);
	fprintf(out, "\n  %-12s %llu accepted (level_shift records: slowdowns that lasted)\n",
		"new levels", (unsigned long long)dc->level_shifts);
	if (dc->keys_dropped)
		fprintf(out, "  %-12s %llu steps: every baseline slot was taken\n", "not judged",
			(unsigned long long)dc->keys_dropped);
	if (d->n_isum > 1 || d->isum_others)
		print_instances(d, out);
	else if (d->isum_nomem)
		fprintf(out, "  per instance: no memory to count them\n");
	fprintf(out, "  longest steps (their step records: pid and start_ns; the anomaly that "
		     "flagged each):\n");
	for (uint32_t i = 0; i < d->n_slowest; i++) {
		const struct diag_slow *w = &d->slowest[i];
		char rank[16] = "-", name[sizeof(w->instance)];

		if (w->rank >= 0)
			snprintf(rank, sizeof(rank), "%d", (int)w->rank);
		fprintf(
		    out, "    %10.3f ms  %-8s +%.3f s  %s rank %s pid %u start_ns %llu: %s\n",
		    w->dur_ns / 1e6, diag_phase_name((enum diag_phase)w->phase),
		    (w->start_ns - d->first_step_ns) / 1e9,
		    term_name(name, sizeof(name), w->instance[0] ? w->instance : "(no instance)"),
		    rank, w->pid, (unsigned long long)w->start_ns,
		    w->kind >= 0 ? diag_kind_name((enum diag_kind)w->kind) : "not flagged");
	}
}

void diag_summary_reset(struct diag *d)
{
	if (!d)
		return;
	d->base_steps = d->steps;
	d->base = *diag_det__counters(d->det);
	memset(d->step_q, 0, sizeof(d->step_q));
	d->first_step_ns = 0;
	d->n_slowest = 0;
	if (d->isum)
		memset(d->isum, 0, (DIAG_SUM_INSTANCES + 1) * sizeof(*d->isum));
	d->n_isum = d->isum_last = 0;
	d->isum_others = d->isum_nomem = false;
}

/* the "diag" object of the stats record (docs/events.md) */
void diag_stats(struct diag *d, json_t *r)
{
	const struct diag_det_counters *dc;
	json_t *o, *kinds;

	if (!d)
		return;
	dc = diag_det__counters(d->det);
	o = json_object();
	kinds = json_object();
	diag_counters(d, o);
	for (int k = 0; k < DIAG_KIND_COUNT; k++)
		json_object_set_new(kinds, diag_kind_name((enum diag_kind)k),
				    json_integer((json_int_t)dc->by_kind[k]));
	json_object_set_new(o, "anomalies_by_kind", kinds);
	json_object_set_new(o, "deep_dives_refused", json_integer((json_int_t)d->dive_errors));
	/* a collective wait's stragglers: the steps named them, or an anomaly of their own */
	json_object_set_new(o, "stragglers_in_steps", json_integer((json_int_t)d->strag_in_steps));
	json_object_set_new(o, "stragglers_written", json_integer((json_int_t)d->strag_written));
	/* anomalies whose GPU ran under its usual clock (--gpu-telemetry) */
	json_object_set_new(o, "gpu_clock_suspects", json_integer((json_int_t)d->clock_suspects));
	/* anomalies that name what their process ran in Python (--python-stacks) */
	json_object_set_new(o, "python_suspects", json_integer((json_int_t)d->python_suspects));
	/* /metrics' step series of instances idle for --metrics-instance-idle, gone */
	json_object_set_new(o, "step_series_expired", json_integer((json_int_t)d->series_expired));
	json_object_set_new(r, "diag", o);
}

int diag_finish(struct diag *d)
{
	int err = 0;

	if (!d)
		return 0;
	err = diag_seg__flush(d->seg);
	diag_det__flush(d->det, UINT64_MAX);
	strag_flush(d, UINT64_MAX); /* every step is judged now */
	if (!err && d->a->opts.diag.baseline_save)
		err = diag_det__save(d->det, d->a->opts.diag.baseline_save);
	return err;
}

void diag_free(struct diag *d)
{
	if (!d)
		return;
	diag_seg__free(d->seg);
	diag_det__free(d->det);
	free(d->waits);
	free(d->step_pids);
	free(d->strag);
	for (uint32_t i = 0; d->gpus && i < DIAG_GPUS; i++)
		free(d->gpus[i]);
	free(d->gpus);
	for (uint32_t i = 0; d->pdev && i < STEP_PIDS; i++)
		pdev_free(d->pdev[i]);
	free(d->pdev);
	free(d->series);
	free(d->isum);
	free(d);
}
