// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * fuzz_replay.c - libFuzzer target for the replay readers (issue 18): the
 * bytes of a recording a user hands `--replay`. Built once per reader with
 * -DFUZZ_FORMAT=CORR_FMT_KINETO / CORR_FMT_JSONL / CORR_FMT_NSYS (the format
 * forced, so every input reaches that reader; gzip is still inflated) and
 * once with CORR_FMT_AUTO (detection). Whatever the input: no crash, no
 * undefined behaviour (ASan, UBSan without recovery), 0 or a negative errno,
 * every record handed out well-formed, the counters consistent with what
 * was handed out. Build: make fuzz-replay (clang); tests/integration/fuzz.sh
 * runs each for a few seconds in `make test`.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "correlator.h"
#include "diagnose.h"

#ifndef FUZZ_FORMAT
#define FUZZ_FORMAT CORR_FMT_AUTO
#endif

struct seen {
	uint64_t gpu, joined, markers, cpu, frames;
	struct corr_collr *cr;	 /* the NCCL collectives of the input (coll_replay.c) */
	struct corr_pyspans *ps; /* its Python calls (Kineto), asked at every join */
	uint64_t colls, waits;
};

static void on_coll(void *ctx, const struct corr_collective *c, uint32_t file)
{
	struct seen *s = ctx;
	char buf[4096];

	s->colls++;
	if (file > 1 || corr_coll_to_json(buf, sizeof(buf), NULL, c) == -EINVAL)
		abort();
}

static void on_wait(void *ctx, const struct corr_wait *w)
{
	struct seen *s = ctx;
	char buf[8192];

	s->waits++;
	if (w->n_arrived > CORR_WAIT_MAX_RANKS || corr_wait_to_json(buf, sizeof(buf), NULL, w) < 0)
		abort();
	(void)corr_wait_evidence(buf, 192, w);
}

static void on_gpu(void *ctx, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct seen *s = ctx;

	s->gpu++;
	if ((unsigned)g->kind >= CORR_KIND_COUNT)
		abort();
	if (s->cr)
		corr_collr__kernel(s->cr, g, l);
	if (g->name)
		(void)strlen(g->name); /* terminated (ASan reads it) */
	if (l) {
		struct corr_py_frame f[CORR_PY_FRAMES_MAX];
		size_t n =
		    corr_pyspans__stack(s->ps, l->pid, l->tid, l->ts_ns, f, CORR_PY_FRAMES_MAX);

		s->joined++;
		if (l->corr_id != g->corr_id || (l->api && !memchr(l->api, '\0', 1 << 16)) ||
		    n > CORR_PY_FRAMES_MAX)
			abort();
		for (size_t i = 0; i < n; i++)
			if (!f[i].function || !f[i].file || !*f[i].function ||
			    f[i].first_line < 0 ||
			    strlen(f[i].function) + strlen(f[i].file) >= 1 << 16)
				abort();
	}
}

static void on_marker(void *ctx, const struct corr_marker *m)
{
	struct seen *s = ctx;

	s->markers++;
	if (!m->name || !m->cat)
		abort();
	(void)strlen(m->name);
	(void)strlen(m->cat);
}

/* an offcpu, syscall or cuda_code_load record of JSON lines: whose and when are known */
static void on_cpu(void *ctx, const struct diag_cpu_event *e)
{
	struct seen *s = ctx;

	s->cpu++;
	if (!e->pid || !e->tid || !e->ts_ns ||
	    (e->kind > DIAG_CPU_SYSCALL && e->kind != DIAG_CPU_CODE_LOAD))
		abort();
}

static size_t size_max_seen; /* keeps the reads */

/* a launch's Python frames of JSON lines: at most 32; strlen() reads each string (ASan) */
static void on_frames(void *ctx, uint32_t pid, uint32_t tid, uint64_t ts,
		      const struct corr_py_frame *f, size_t n)
{
	struct seen *s = ctx;
	size_t len = 0;

	(void)pid, (void)tid, (void)ts;
	if (n > CORR_PY_FRAMES_MAX)
		abort();
	for (size_t i = 0; i < n; i++)
		len += (f[i].function ? strlen(f[i].function) : 0) +
		       (f[i].file ? strlen(f[i].file) : 0);
	if (len > size_max_seen)
		size_max_seen = len;
	s->frames += n ? 1 : 0;
}

static void counted(const struct corr_replay_stats *st, const struct seen *s)
{
	if (st->corr.joined + st->corr.unmatched != s->gpu || st->corr.joined != s->joined ||
	    st->markers != s->markers || st->cpu_events != s->cpu || st->python_frames != s->frames)
		abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct seen s = {0};
	/* small tables: fast runs, and their eviction paths are exercised too */
	struct corr_opts co = {.sz = sizeof(co),
			       .launch_capacity = 256,
			       .gpu_capacity = 128,
			       .thread_capacity = 16,
			       .emit = on_gpu,
			       .emit_ctx = &s};
	struct corr_replay_opts ro = {.sz = sizeof(ro),
				      .format = FUZZ_FORMAT,
				      .marker = on_marker,
				      .marker_ctx = &s,
				      .cpu = on_cpu,
				      .cpu_ctx = &s,
				      .frames = on_frames,
				      .frames_ctx = &s};
	struct corr_collr_opts cro = {.sz = sizeof(cro),
				      .capacity = 512,
				      .emit = on_coll,
				      .emit_ctx = &s,
				      .wait = on_wait,
				      .wait_ctx = &s};
	struct corr_replay_stats st;
	/* an exact-size copy: ASan sees a read one byte past the input */
	char *buf = malloc(size ? size : 1);
	int err;

	if (!buf)
		return 0;
	s.cr = corr_collr__new(&cro);
	s.ps = corr_pyspans__new();
	ro.pyspans = s.ps;
	ro.comm = corr_collr_op;
	ro.comm_ctx = s.cr;
	memcpy(buf, data, size);
	err = corr_replay_buf(buf, size, &co, &ro, &st);
	/* everything handed out is counted, and only that */
	counted(&st, &s);
	/* the input as two ranks of one job: its collectives matched against themselves */
	corr_collr__end_file(s.cr, 0, 2);
	if (!err) {
		struct seen s2 = s;

		s2.gpu = s2.joined = s2.markers = s2.cpu = s2.frames = 0;
		co.emit_ctx = &s2;
		ro.marker_ctx = &s2;
		ro.cpu_ctx = &s2;
		ro.frames_ctx = &s2;
		/*
		 * each pass against its own counts: SQLite does not read a damaged
		 * file the same way every time in one process (the same bytes were
		 * seen to open as a database with 2 GPU records after other inputs,
		 * and as unreadable alone)
		 */
		(void)corr_replay_buf(buf, size, &co, &ro, &st);
		counted(&st, &s2);
		corr_collr__end_file(s.cr, 1, 2);
	}
	corr_collr__finish(s.cr);
	corr_collr__free(s.cr);
	corr_pyspans__free(s.ps);
	free(buf);
	if (err > 0 || err < -4095)
		abort();
	return 0;
}
