// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * jsonl.c - the agent's own JSON lines (docs/events.md).
 * Lines are small, so jansson parses each; errors name the line.
 *
 * Used records:
 *   kernel / memcpy / memset (json_out.c writes them, live and in replay):
 *     a joined record re-creates its launch from pid, tid, launch_ts_ns,
 *     launch_api, launch_cbid, launch_src, correlation_id, then the GPU
 *     record itself joins it again: a deep-mode recording re-analysed
 *     offline gives the same joins (tests/integration/gpu_live.sh); its
 *     launch_python (the launch's Python frames) goes to
 *     corr_replay_opts.frames just before, so the replayed record has them;
 *   cuda_launch {pid, tid, ts_ns, api} (agent/sources/decode.c): a uprobe launch
 *     (api by name). Alone it joins nothing: a recording holds no callbacks;
 *   gpu_launch_cb {pid, tid, ts_ns, correlation_id, domain, cbid}: a shim
 *     callback. The agent writes no such record (callbacks only feed its
 *     correlator); accepted for recordings made by other tools;
 *   offcpu {pid, tid, ts_ns, dur_ns, cause, by_pid} and syscall {pid, tid,
 *     ts_ns, dur_ns}: the CPU side live steps counted (decode.c: to_diag()),
 *     handed to corr_replay_opts.cpu, so a step re-cut from a recording has
 *     the breakdown it had live (off-CPU, run-queue wait and who took the
 *     CPU, slow syscalls). Network bytes are not recorded: unknown here.
 * Others are skipped.
 */
#include <errno.h>
#include <string.h>
#include <jansson.h>

#include "diagnose.h"
#include "internal.h"

#define JSONL_LINE_MAX (1u << 20) /* longest line read (docs/operations.md) */

/*
 * Numbers of a line, range-checked: a field beyond its width (or a real
 * beyond 2^64, whose conversion is undefined) fails the line instead of
 * being cut to a wrong value ("pid":1.5e19 is not pid 3470524416).
 * Negative values still read as 0 (unknown), as they always have.
 */
struct line {
	json_t *o;
	const char *bad; /* first field out of range */
};

static uint64_t jnum(struct line *ln, json_t *v, const char *k, uint64_t max)
{
	if (json_is_integer(v)) {
		json_int_t x = json_integer_value(v);

		if (x < 0)
			return 0;
		if ((uint64_t)x <= max)
			return (uint64_t)x;
	} else if (json_is_real(v)) {
		double x = json_real_value(v);

		if (x < 0)
			return 0;
		/* (double)max rounds up to 2^64 or 2^32: '<' keeps the cast defined */
		if (x < (double)max || (max < UINT64_MAX && x <= (double)max))
			return (uint64_t)x;
	} else {
		return 0;
	}
	if (!ln->bad)
		ln->bad = k;
	return 0;
}

static uint64_t ju(struct line *ln, const char *k)
{
	return jnum(ln, json_object_get(ln->o, k), k, UINT64_MAX);
}

static uint32_t ju32(struct line *ln, const char *k)
{
	return (uint32_t)jnum(ln, json_object_get(ln->o, k), k, UINT32_MAX);
}

static void u32x3(struct line *ln, const char *k, uint32_t v[3])
{
	json_t *a = json_object_get(ln->o, k);

	for (size_t i = 0; i < 3 && json_is_array(a) && i < json_array_size(a); i++)
		v[i] = (uint32_t)jnum(ln, json_array_get(a, i), k, UINT32_MAX);
}

/*
 * an offcpu, syscall or cuda_code_load record (kind: the syscall's or the
 * code load's), as live handed it to the steps (decode.c)
 */
static int cpu_event(struct replay_ctx *rc, struct line *ln, bool offcpu, enum diag_cpu_kind kind)
{
	const char *cause = json_string_value(json_object_get(ln->o, "cause"));
	struct diag_cpu_event e = {
	    .kind = kind,
	    .pid = ju32(ln, "pid"),
	    .tid = ju32(ln, "tid"),
	    .ts_ns = ju(ln, "ts_ns"),
	    .dur_ns = ju(ln, "dur_ns"),
	};

	if (offcpu) {
		/* a preempted thread waited in the run queue; by_pid ran instead */
		e.kind = cause && !strcmp(cause, "preempted") ? DIAG_CPU_RUNQ : DIAG_CPU_OFFCPU;
		e.other_pid = ju32(ln, "by_pid");
	}
	if (ln->bad)
		return -ERANGE;
	if (!e.pid || !e.tid || !e.ts_ns) {
		rc->st->skipped++; /* whose, or when, unknown: no step can take it */
		return 0;
	}
	rc->st->cpu_events++;
	rc->ro->cpu(rc->ro->cpu_ctx, &e);
	return 0;
}

/*
 * A GPU record's launch_python to corr_replay_opts.frames: an array of at
 * most CORR_PY_FRAMES_MAX objects, as the agent writes it; another shape is
 * a forged or foreign record: dropped whole and counted, the record kept
 */
static void py_frames(struct replay_ctx *rc, struct line *ln, uint32_t pid, uint32_t tid,
		      uint64_t lts)
{
	json_t *a = json_object_get(ln->o, "launch_python"), *v;
	struct corr_py_frame f[CORR_PY_FRAMES_MAX];
	size_t n = 0, i;

	if (a && (!json_is_array(a) || json_array_size(a) > CORR_PY_FRAMES_MAX)) {
		rc->st->python_bad++;
		a = NULL;
	}
	json_array_foreach(a, i, v)
	{
		json_t *def, *call;

		if (!json_is_object(v)) {
			rc->st->python_bad++;
			n = 0;
			break;
		}
		def = json_object_get(v, "first_line");
		call = json_object_get(v, "line");
		f[n++] = (struct corr_py_frame){
		    .function = json_string_value(json_object_get(v, "function")),
		    .file = json_string_value(json_object_get(v, "file")),
		    .first_line = json_is_integer(def) && json_integer_value(def) >= 0
				      ? json_integer_value(def)
				      : -1,
		    .line = json_is_integer(call) && json_integer_value(call) >= 0
				? json_integer_value(call)
				: -1,
		};
	}
	if (n)
		rc->st->python_frames++;
	rc->ro->frames(rc->ro->frames_ctx, pid, tid, lts, f, n);
}

static int one(struct replay_ctx *rc, struct line *ln)
{
	json_t *o = ln->o;
	const char *type = json_string_value(json_object_get(o, "type"));
	struct corr_gpu g;
	int err;

	rc->st->events++;
	if (!type) {
		rc->st->skipped++;
		return 0;
	}
	if (!strcmp(type, "kernel") || !strcmp(type, "memcpy") || !strcmp(type, "memset")) {
		const char *src;
		bool has_launch;

		memset(&g, 0, sizeof(g));
		g.kind = type[0] == 'k'	  ? CORR_KIND_KERNEL
			 : type[3] == 'c' ? CORR_KIND_MEMCPY
					  : CORR_KIND_MEMSET;
		g.pid = ju32(ln, "pid");
		g.corr_id = ju32(ln, "correlation_id");
		g.device = ju32(ln, "device");
		g.context = ju32(ln, "context");
		g.stream = ju32(ln, "stream");
		g.graph_id = ju32(ln, "graph_id");
		g.graph_node_id = ju(ln, "graph_node_id");
		g.start_ns = ju(ln, "start_ns");
		g.end_ns = ju(ln, "end_ns");
		g.bytes = ju(ln, "bytes");
		g.copy_kind = ju32(ln, "copy_kind");
		u32x3(ln, "grid", g.grid);
		u32x3(ln, "block", g.block);
		g.name = json_string_value(json_object_get(o, "name"));
		src = json_string_value(json_object_get(o, "launch_src"));
		has_launch = json_is_integer(json_object_get(o, "launch_ts_ns"));
		/* the shim sampled its launch out: the agent's steps count it (steps.c) */
		if (!has_launch && src && !strcmp(src, "sampled_out"))
			g.flags = CORR_GPU_F_NO_LAUNCH;
		if (g.pid && has_launch) {
			bool cb = src && (!strcmp(src, "cupti") || !strcmp(src, "uprobe+cupti"));
			bool up = !src || strcmp(src, "cupti");
			uint32_t tid = ju32(ln, "tid"), cbid = ju32(ln, "launch_cbid");
			uint64_t lts = ju(ln, "launch_ts_ns");

			if (ln->bad)
				return -ERANGE;
			if (rc->ro && rc->ro->frames)
				py_frames(rc, ln, g.pid, tid, lts);
			rc->st->launches++;
			err = corr_add_launch_src(
			    rc->c, g.pid, tid, lts, g.corr_id, cbid,
			    json_string_value(json_object_get(o, "launch_api")), up, cb);
			if (err)
				return err;
		}
		if (ln->bad)
			return -ERANGE;
		rc->st->gpu_records++;
		return corr__add_gpu(rc->c, &g);
	}
	if (!strcmp(type, "cuda_launch")) {
		const char *api = json_string_value(json_object_get(o, "api"));
		int a = api ? corr_api_from_name(api) : -1;
		uint32_t pid = ju32(ln, "pid"), tid = ju32(ln, "tid");
		uint64_t ts = ju(ln, "ts_ns");

		if (ln->bad)
			return -ERANGE;
		rc->st->launches++;
		return corr__add_uprobe_launch(rc->c, pid, tid, ts, a < 0 ? 0xffff : (uint16_t)a);
	}
	if (!strcmp(type, "gpu_launch_cb")) {
		uint32_t pid = ju32(ln, "pid"), tid = ju32(ln, "tid");
		uint64_t ts = ju(ln, "ts_ns");
		uint32_t corr = ju32(ln, "correlation_id"), dom = ju32(ln, "domain");
		uint32_t cbid = ju32(ln, "cbid");

		if (ln->bad)
			return -ERANGE;
		rc->st->launches++;
		return corr__add_callback(rc->c, pid, tid, ts, corr, dom, cbid);
	}
	if (rc->ro && rc->ro->cpu && (!strcmp(type, "offcpu") || !strcmp(type, "syscall")))
		return cpu_event(rc, ln, type[0] == 'o', DIAG_CPU_SYSCALL);
	if (rc->ro && rc->ro->cpu && !strcmp(type, "cuda_code_load"))
		return cpu_event(rc, ln, false, DIAG_CPU_CODE_LOAD);
	rc->st->skipped++;
	return 0;
}

int jsonl_read(struct replay_ctx *rc, const char *buf, size_t len)
{
	const char *p = buf + corr_bom_len(buf, len), *end = buf + len;
	size_t line = 0, records = 0;
	int err = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', end - p);
		const char *e = nl ? nl : end;
		json_error_t jerr;
		struct line ln;
		json_t *o;

		if ((line++ & 4095) == 0 && replay_stopped(rc))
			return -EINTR;
		/* skip blank lines */
		while (p < e && (*p == ' ' || *p == '\t' || *p == '\r'))
			p++;
		if (p == e) {
			p = e + 1;
			continue;
		}
		/* our records are below 64 KiB; a DOM of a huge line costs many times it */
		if ((size_t)(e - p) > JSONL_LINE_MAX) {
			replay_log(rc, CORR_LOG_ERROR,
				   "JSON lines: line %zu (byte offset %zu): longer than %u bytes, "
				   "not a record of this agent",
				   line, (size_t)(p - buf), JSONL_LINE_MAX);
			return -EINVAL;
		}
		/* the whole line: data after the object is corruption too */
		o = json_loadb(p, e - p, 0, &jerr);
		if (!o || !json_is_object(o)) {
			replay_log(rc, CORR_LOG_ERROR, "JSON lines: line %zu (byte offset %zu): %s",
				   line, (size_t)(p - buf) + (o ? 0 : (size_t)jerr.position),
				   o	 ? "not a JSON object"
				   : !nl ? "truncated last line"
					 : jerr.text);
			json_decref(o);
			return -EINVAL;
		}
		/* the first record says whose lines these are */
		if (!records++ && !json_is_string(json_object_get(o, "type"))) {
			replay_log(rc, CORR_LOG_ERROR,
				   "JSON lines: line %zu: no string \"type\": not records of this "
				   "agent (docs/events.md), nor a Chrome trace (no traceEvents)",
				   line);
			json_decref(o);
			return -EINVAL;
		}
		ln.o = o;
		ln.bad = NULL;
		err = one(rc, &ln);
		json_decref(o);
		if (err && ln.bad) {
			replay_log(rc, CORR_LOG_ERROR,
				   "JSON lines: line %zu (byte offset %zu): \"%s\" out of range",
				   line, (size_t)(p - buf), ln.bad);
			return -EINVAL;
		}
		if (err)
			return err;
		p = e + 1;
	}
	return 0;
}
