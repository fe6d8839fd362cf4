// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * fuzz_steps.c - libFuzzer target for the step path (issue 18): what a
 * recording's records become once read. The first byte picks the way in:
 *
 *   even: the rest is a recording (any format, as `--replay` detects it);
 *         its GPU records and markers go through the step segmenter
 *         (diag_seg, cut every 16 GPU records at the latest end seen, as
 *         a live agent cuts while time passes), its steps through the
 *         detector (diag_det), with the processes ending at the end as a
 *         live agent sees them; with bit 1 set, the launch of every record
 *         of an odd correlation id is dropped and the record marked
 *         (CORR_GPU_F_NO_LAUNCH), as the shim's always-on sampling sends it;
 *   odd:  the rest is a sequence of step records field by field (64-bit
 *         values, any bit pattern: what a hostile `step` JSON line can
 *         carry into the detector through --replay's re-detection), fed
 *         straight to the detector.
 *
 * No crash, no undefined behaviour (ASan, UBSan without recovery), every
 * step, anomaly and level shift well-formed. Build: make fuzz-replay (clang).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "correlator.h"
#include "diagnose.h"

struct ctx {
	struct diag_seg *sg;
	struct diag_det *det;
	uint64_t steps;
	uint32_t pids[16]; /* processes seen, to end them */
	int npids;
	uint64_t n_gpu, max_end; /* live cuts as the recording's time passes */
	bool sample_out;	 /* odd correlation ids: launch sampled out */
};

static void on_anomaly(void *c, const struct diag_anomaly *an)
{
	(void)c;
	if (!an || !an->run || an->run > 64)
		abort();
}

/*
 * A level is accepted after 64 flagged steps in a row, 16 of duration only,
 * counted by the step at hand: a run of steps with fields that ends on a
 * duration-only one is accepted there, at 16-63.
 */
static void on_level_shift(void *c, const struct diag_level_shift *ls)
{
	(void)c;
	if (!ls || !ls->instance || ls->steps < 16 || ls->steps > 64 || !(ls->ratio > 0) ||
	    ls->kind >= DIAG_KIND_COUNT)
		abort();
}

static void on_step(void *c, const struct diag_step *s)
{
	struct ctx *x = c;
	struct diag_verdict v;

	x->steps++;
	if (!s->source || s->n_top > DIAG_TOP_MAX || (unsigned)s->phase >= DIAG_PHASE_COUNT)
		abort();
	for (uint32_t i = 0; i < s->n_top; i++)
		if (!s->top[i].name)
			abort();
	if (s->marker)
		(void)strlen(s->marker);
	if (diag_det__add_step(x->det, s, &v) && s->dur_ns)
		abort();
}

static void on_gpu(void *c, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct ctx *x = c;
	uint32_t pid = l ? l->pid : g->pid;
	struct corr_gpu y;
	int i;

	if (x->sample_out && l && (g->corr_id & 1)) {
		y = *g;
		y.pid = pid;
		y.flags |= CORR_GPU_F_NO_LAUNCH;
		g = &y;
		l = NULL;
	}
	for (i = 0; i < x->npids && x->pids[i] != pid; i++)
		;
	if (i == x->npids && x->npids < 16)
		x->pids[x->npids++] = pid;
	diag_seg__add_gpu(x->sg, g, l);
	/* cut as the agent does while time passes: what is held merges with what comes */
	if (g->end_ns > x->max_end)
		x->max_end = g->end_ns;
	if (++x->n_gpu % 16 == 0)
		diag_seg__advance(x->sg, x->max_end);
}

static void on_marker(void *c, const struct corr_marker *m)
{
	struct ctx *x = c;

	diag_seg__add_marker(x->sg, m);
}

/* a JSON-lines recording's offcpu and syscall records, as the agent's replay feeds them */
static void on_cpu(void *c, const struct diag_cpu_event *e)
{
	struct ctx *x = c;

	diag_seg__add_cpu(x->sg, e);
}

static uint64_t take(const unsigned char **p, const unsigned char *end)
{
	uint64_t v = 0;

	for (int i = 0; i < 8 && *p < end; i++)
		v |= (uint64_t) * (*p)++ << (8 * i);
	return v;
}

/* step records from raw bytes: every field any value a JSON line can hold */
static void raw_steps(struct ctx *x, const unsigned char *p, const unsigned char *end)
{
	static const char *const inst[] = {"", "a", "b"};
	static const char *const names[] = {"gemm", "nccl_all_reduce", "k"};

	while (p < end) {
		struct diag_step s;
		struct diag_verdict v;
		uint64_t sel = take(&p, end);

		diag_step_init(&s);
		s.instance = inst[sel % 3];
		s.rank = (int32_t)(sel >> 8);
		s.pid = (uint32_t)(sel >> 16);
		s.phase = (enum diag_phase)((sel >> 48) % DIAG_PHASE_COUNT);
		s.source = "record";
		s.start_ns = take(&p, end);
		s.dur_ns = take(&p, end);
		s.tokens = (int64_t)take(&p, end);
		s.batch_size = (int64_t)take(&p, end);
		s.kv_tokens = (int64_t)take(&p, end);
		s.gpu_busy_ns = (int64_t)take(&p, end);
		s.idle_ns = (int64_t)take(&p, end);
		s.idle_gaps = (int64_t)take(&p, end);
		s.idle_max_ns = (int64_t)take(&p, end);
		s.kernels = (int64_t)take(&p, end);
		s.comm_ns = (int64_t)take(&p, end);
		s.offcpu_ns = (int64_t)take(&p, end);
		s.runq_ns = (int64_t)take(&p, end);
		s.slow_syscalls = (int64_t)take(&p, end);
		s.slow_syscall_ns = (int64_t)take(&p, end);
		s.code_loads = (int64_t)take(&p, end);
		s.code_load_ns = (int64_t)take(&p, end);
		s.preempt_pid = (uint32_t)take(&p, end);
		s.n_top = (uint32_t)((sel >> 56) % (DIAG_TOP_MAX + 1));
		for (uint32_t i = 0; i < s.n_top; i++)
			s.top[i] = (struct diag_kernel){names[i % 3], take(&p, end), take(&p, end)};
		diag_det__add_step(x->det, &s, &v);
	}
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct ctx x = {0};
	struct diag_seg_opts so = {.sz = sizeof(so), .step = on_step, .step_ctx = &x};
	struct diag_det_opts dopts = {.sz = sizeof(dopts),
				      .anomaly = on_anomaly,
				      .level_shift = on_level_shift,
				      .bootstrap = 4,
				      .max_keys = 64};
	/* small correlator tables: fast runs (fuzz_replay.c does the same) */
	struct corr_opts co = {.sz = sizeof(co),
			       .launch_capacity = 256,
			       .gpu_capacity = 128,
			       .thread_capacity = 16,
			       .emit = on_gpu,
			       .emit_ctx = &x};
	struct corr_replay_opts ro = {
	    .sz = sizeof(ro), .marker = on_marker, .marker_ctx = &x, .cpu = on_cpu, .cpu_ctx = &x};
	char *buf;

	if (!size)
		return 0;
	x.sg = diag_seg__new(&so);
	x.det = diag_det__new(&dopts);
	if (!x.sg || !x.det)
		abort();
	x.sample_out = data[0] & 2;
	if (data[0] & 1) {
		raw_steps(&x, data + 1, data + size);
	} else {
		buf = malloc(size - 1 ? size - 1 : 1);
		if (buf) {
			memcpy(buf, data + 1, size - 1);
			corr_replay_buf(buf, size - 1, &co, &ro, NULL);
			free(buf);
		}
		/* the processes end: their state goes after the last cut */
		for (int i = 0; i < x.npids; i++)
			diag_seg__process_exit(x.sg, x.pids[i]);
		diag_seg__flush(x.sg);
	}
	diag_det__flush(x.det, UINT64_MAX);
	diag_seg__free(x.sg);
	diag_det__free(x.det);
	return 0;
}
