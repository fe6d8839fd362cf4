// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * replay.c - `infertrace-agent --replay FILE`: a recording (Kineto trace,
 * Nsight Systems SQLite export, our own JSON lines) goes through the same
 * correlator and sinks as live events. No BPF, no root.
 *
 * The reader's joined records go to the same join as live ones
 * (agent/pipeline/join.c, gpu_joined()): deep mode writes one
 * kernel/memcpy/memset record per GPU activity, sentinel mode per-interval,
 * per-process gpu_summary records, the interval being --interval in the
 * recording's own clock. Both end with one replay_status record
 * (docs/events.md).
 *
 * NCCL collectives (issue 21) are matched across the files at the end; in
 * sentinel mode their collective_summary rows are cut per --interval too:
 * windows [k x interval, (k + 1) x interval) of the recordings' clock, the
 * same for every file (a collective in the window of its enqueue, a wait in
 * that of its last arrival: when it completed).
 *
 * Diagnosis (issue 5, docs/diagnosis.md): GPU records and markers also go
 * to a step segmenter; at the end of the recording every step becomes a
 * `step` record and goes through the detector, whose anomalies become
 * `anomaly` records. A JSON-lines file of this agent's `step` records is
 * replayed through the detector alone, as if live (re-detection).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "collective.h"
#include "correlator.h"
#include "diagnose.h"
#include "grow.h"
#include "jsonw.h"

#define COLL_BUF (64 * 1024)
#define REPLAY_FILES (1 + MAX_REPLAY_RANKS)

/* the collective_summary rows of window k: [k x bin_ns, (k + 1) x bin_ns) */
struct coll_bin {
	uint64_t k;
	struct corr_coll_agg *agg;
};

struct replay {
	struct agent *a;
	struct gpu *gp;	 /* the join (agent/pipeline/join.c), as live */
	struct diag *dg; /* steps and anomalies (agent/pipeline/diag.c); NULL: off */
	uint64_t bad_lines, other_lines;
	const volatile sig_atomic_t *stop; /* set by SIGINT / SIGTERM */
	/* NCCL collectives (issue 21): every file's, matched across ranks at the end */
	struct corr_collr *cr;
	struct coll_bin *bins; /* sentinel: collective_summary rows per interval, by k */
	size_t nbins, cbins;
	uint64_t bin_ns;       /* the interval */
	uint64_t bins_dropped; /* rows beyond an interval's capacity, intervals without memory */
	uint64_t cut_k;	       /* the window being cut */
	char inst[REPLAY_FILES][128]; /* each file's instance */
	struct {
		uint32_t pid, file;
	} pidfile[REPLAY_FILES * 4]; /* a process's file, for its waits and summaries */
	uint32_t npidfile;
	uint64_t coll_written, waits_written, coll_too_long;
	int rank_err; /* a rank given twice */
	char *buf;
	/*
	 * The Python frames of the launch last asked for (replay_python_frames):
	 * a JSON-lines GPU record's launch_python (corr_replay_opts.frames),
	 * given just before its record is written, or the calls of a Kineto
	 * trace open at the launch, kept for its next kernels (a graph launch
	 * has many). Per file.
	 */
	struct {
		uint32_t pid, tid;
		uint64_t ts;
		size_t len; /* bytes of json; 0: none */
		char *json; /* PY_STACK_JSON_MAX: the frames as a JSON array */
	} py;
	struct corr_pyspans *ps; /* a Kineto recording's Python calls; NULL: frames off */
};

/* frames as the JSON array a record's launch_python holds, names cleaned as live ones */
static void frames_keep(struct replay *r, uint32_t pid, uint32_t tid, uint64_t ts,
			const struct corr_py_frame *f, size_t n)
{
	struct jsonw w = {.buf = r->py.json, .cap = PY_STACK_JSON_MAX};
	char func[PY_NAME_MAX], file[PY_NAME_MAX];

	r->py.len = 0;
	if (!n || !r->py.json)
		return;
	jw_open(&w, '[');
	for (size_t i = 0; i < n; i++)
		python_frame_json(&w, python_name_clean(f[i].function, func, sizeof(func)),
				  python_name_clean(f[i].file, file, sizeof(file)), f[i].first_line,
				  f[i].line);
	jw_close(&w, ']');
	if (w.overflow)
		return; /* cannot be: cleaned frames fit (python.c's PY_FRAME_JSON_MAX check) */
	r->py.pid = pid;
	r->py.tid = tid;
	r->py.ts = ts;
	r->py.len = w.len;
}

/* corr_replay_opts.frames: a JSON-lines GPU record's launch_python, for its replayed record */
static void on_frames(void *ctx, uint32_t pid, uint32_t tid, uint64_t ts,
		      const struct corr_py_frame *f, size_t n)
{
	frames_keep(ctx, pid, tid, ts, f, n);
}

/*
 * capture_hooks.launch_python in a replay: the frames on_frames() was just
 * given, else those of the recording's Python spans (Kineto) open at the
 * launch on its thread; the last launch's are kept (a graph launch has
 * many kernels)
 */
static bool replay_python_frames(struct agent *a, uint32_t pid, uint32_t tid, uint64_t ts,
				 struct jsonw *w)
{
	struct replay *r = a->replay;
	struct corr_py_frame f[PY_STACK_DEPTH];

	if (!r)
		return false;
	if (!r->py.len || r->py.pid != pid || r->py.tid != tid || r->py.ts != ts) {
		if (!r->ps)
			return false;
		frames_keep(r, pid, tid, ts, f,
			    corr_pyspans__stack(r->ps, pid, tid, ts, f, PY_STACK_DEPTH));
		if (!r->py.len)
			return false;
	}
	jw_key(w, "launch_python");
	jw_raw(w, r->py.json, r->py.len);
	return true;
}

/* the correlator's joined GPU records: NCCL kernels to the collectives, all to the join */
static void on_gpu(void *ctx, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct replay *r = ctx;

	corr_collr__kernel(r->cr, g, l);
	gpu_joined(r->gp, g, l);
}

static const char *inst_of_pid(struct replay *r, uint32_t pid)
{
	for (uint32_t i = 0; i < r->npidfile; i++)
		if (r->pidfile[i].pid == pid)
			return r->inst[r->pidfile[i].file];
	return r->inst[0];
}

static void write_coll(struct replay *r, enum rec_class cls, const char *inst, int len)
{
	if (len < 0) {
		r->coll_too_long++;
		return;
	}
	rec_emit_raw(r->a, cls, inst, r->buf, (size_t)len);
}

/* sentinel: the rows of the window holding t; NULL when out of memory (counted) */
static struct corr_coll_agg *coll_bin(struct replay *r, uint64_t t)
{
	size_t lo = 0, hi = r->nbins;
	uint64_t k = t / r->bin_ns;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (r->bins[mid].k < k)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < r->nbins && r->bins[lo].k == k)
		return r->bins[lo].agg;
	if (grow_array((void **)&r->bins, &r->cbins, r->nbins, sizeof(*r->bins), 16)) {
		r->bins_dropped++;
		return NULL;
	}
	memmove(&r->bins[lo + 1], &r->bins[lo], (r->nbins - lo) * sizeof(*r->bins));
	r->bins[lo].k = k;
	r->bins[lo].agg = corr_coll_agg__new(0);
	if (!r->bins[lo].agg) {
		memmove(&r->bins[lo], &r->bins[lo + 1], (r->nbins - lo) * sizeof(*r->bins));
		r->bins_dropped++;
		return NULL;
	}
	r->nbins++;
	return r->bins[lo].agg;
}

/* a collective (corr_collr_opts.emit): deep, a record; sentinel, its window's rows */
static void on_collective(void *ctx, const struct corr_collective *c, uint32_t file)
{
	struct replay *r = ctx;
	struct corr_json_common cm = {.host = agent_host(r->a), .instance = r->inst[file]};
	bool known = false;

	for (uint32_t i = 0; i < r->npidfile && !known; i++)
		known = r->pidfile[i].pid == c->pid;
	if (!known && r->npidfile < sizeof(r->pidfile) / sizeof(r->pidfile[0]))
		r->pidfile[r->npidfile++].pid = c->pid, r->pidfile[r->npidfile - 1].file = file;
	if (r->bin_ns) {
		struct corr_coll_agg *agg =
		    coll_bin(r, c->enqueue_ns ? c->enqueue_ns : c->gpu_start_ns);

		if (agg)
			corr_coll_agg__add(agg, c);
		if (!route_wants_detail(r->a, c->pid))
			return;
	}
	r->coll_written++;
	write_coll(r, REC_EVENT, cm.instance, corr_coll_to_json(r->buf, COLL_BUF, &cm, c));
}

/* a collective seen on several ranks (corr_collr_opts.wait) */
static void on_wait(void *ctx, const struct corr_wait *w)
{
	struct replay *r = ctx;
	const char *inst = inst_of_pid(r, w->n_arrived ? w->ranks[w->n_arrived - 1].pid : 0);
	struct corr_json_common cm = {.host = agent_host(r->a), .instance = inst};

	if (r->bin_ns) {
		struct corr_coll_agg *agg = coll_bin(r, w->last_arrival_ns);

		if (agg)
			corr_coll_agg__add_wait(agg, w);
	}
	diag_on_wait(r->dg, w);
	r->waits_written++;
	write_coll(r, REC_EVENT, inst, corr_wait_to_json(r->buf, COLL_BUF, &cm, w));
}

/* a row of the window being cut (r->cut_k) */
static void on_row(void *ctx, const struct corr_coll_row *row)
{
	struct replay *r = ctx;
	const char *inst = inst_of_pid(r, row->pid);
	struct corr_json_common cm = {.host = agent_host(r->a), .instance = inst};
	uint64_t t0 = r->cut_k * r->bin_ns;

	write_coll(r, REC_SUMMARY, inst,
		   corr_coll_row_to_json(r->buf, COLL_BUF, &cm, row, t0, t0 + r->bin_ns));
}

/* the collectives of every file, their waits and summaries, and their counters */
static int collectives_finish(struct replay *r, const char *path)
{
	const struct corr_collr_counters *n = corr_collr__counters(r->cr);
	int err = corr_collr__finish(r->cr);
	uint64_t dropped = r->bins_dropped;
	json_t *o;

	/* the windows in time order, each window's rows in first-seen order */
	for (size_t i = 0; i < r->nbins; i++) {
		r->cut_k = r->bins[i].k;
		corr_coll_agg__cut(r->bins[i].agg, on_row, r);
		dropped += corr_coll_agg__dropped(r->bins[i].agg);
	}
	if (!n->ops && !n->collectives && !agent_opts(r->a)->n_replay_ranks)
		return err;
	o = rec_new(r->a, "collective_status", 0, 0, now_ns());
	if (!o)
		return err;
	json_object_set_new(o, "file", json_string(path));
	json_object_set_new(o, "files", json_integer(1 + agent_opts(r->a)->n_replay_ranks));
	json_object_set_new(o, "comm_ops", json_integer((json_int_t)n->ops));
	json_object_set_new(o, "comm_ops_unused", json_integer((json_int_t)n->ops_unused));
	json_object_set_new(o, "collectives", json_integer((json_int_t)n->collectives));
	json_object_set_new(o, "collectives_written", json_integer((json_int_t)r->coll_written));
	json_object_set_new(o, "unjoined", json_integer((json_int_t)n->unjoined));
	json_object_set_new(o, "comm_unknown", json_integer((json_int_t)n->comm_unknown));
	json_object_set_new(o, "dtype_unknown", json_integer((json_int_t)n->dtype_unknown));
	json_object_set_new(o, "count_unknown", json_integer((json_int_t)n->count_unknown));
	json_object_set_new(o, "op_unknown", json_integer((json_int_t)n->op_unknown));
	json_object_set_new(o, "dropped", json_integer((json_int_t)n->dropped));
	json_object_set_new(o, "matched", json_integer((json_int_t)n->matched));
	json_object_set_new(o, "unmatched", json_integer((json_int_t)n->unmatched));
	json_object_set_new(o, "waits", json_integer((json_int_t)r->waits_written));
	json_object_set_new(o, "summaries_dropped", json_integer((json_int_t)dropped));
	json_object_set_new(o, "records_too_long", json_integer((json_int_t)r->coll_too_long));
	rec_emit(r->a, REC_STATS, o);
	pr_info("replay: %llu NCCL collectives (%llu without a process group), %llu matched "
		"across ranks, %llu on some ranks only, %llu waits",
		(unsigned long long)n->collectives, (unsigned long long)n->comm_unknown,
		(unsigned long long)n->matched, (unsigned long long)n->unmatched,
		(unsigned long long)r->waits_written);
	return err;
}

static void on_marker(void *ctx, const struct corr_marker *m)
{
	struct replay *r = ctx;

	diag_on_marker(r->dg, m);
}

/* the agent's own recording: the launching threads' CPU side, as live (decode.c: to_diag()) */
static void on_cpu(void *ctx, const struct diag_cpu_event *e)
{
	struct replay *r = ctx;

	diag_on_cpu(r->dg, e);
}

/*
 * does this JSON-lines input hold step records? The first 64 lines decide,
 * each line looked at in pieces of 4095 bytes at most (as gzgets() into a
 * 4 KiB buffer did when this read the file a second time).
 */
static bool is_step_stream(const char *buf, size_t len)
{
	const char *p = buf, *end = buf + len;

	for (int i = 0; i < 64 && p < end; i++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);

		if (n > 4095)
			n = 4095;
		if (memmem(p, n, "\"type\":\"step\"", 13) || memmem(p, n, "\"type\": \"step\"", 14))
			return true;
		p += n;
	}
	return false;
}

/*
 * Re-detection: every `step` line goes to the detector as if it had just
 * been measured. Other record types are skipped (counted); a malformed line
 * is logged with its number, counted, and skipped.
 */
static int replay_steps(struct replay *r, const char *path, const char *buf, size_t buflen)
{
	const char *p = buf, *end = buf + buflen;
	unsigned long ln = 0;
	int err = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
		const char *line = p;
		json_error_t je;
		json_t *o;
		struct diag_step s;

		p += len;
		if (r->stop && *r->stop) {
			err = -EINTR;
			break;
		}
		ln++;
		if (len <= 1)
			continue;
		o = json_loadb(line, len, 0, &je);
		if (!o || !json_is_object(o)) {
			if (r->bad_lines++ < 10)
				pr_warn("replay: %s: line %lu: not a JSON object (%s), skipped",
					path, ln, o ? "wrong type" : je.text);
			json_decref(o);
			continue;
		}
		switch (steprec_from_json(o, &s)) {
		case 0:
			diag_add_step(r->dg, &s);
			break;
		case -ENOENT:
			r->other_lines++; /* another record type: skipped */
			break;
		default:
			if (r->bad_lines++ < 10)
				pr_warn("replay: %s: line %lu: step without a positive dur_ns or "
					"with an unknown phase, skipped",
					path, ln);
		}
		json_decref(o);
	}
	return err;
}

static void emit_diag_status(struct replay *r, const char *path, int err)
{
	const struct diag_det_counters *dc = r->dg ? diag_det__counters(r->dg->det) : NULL;
	json_t *o;

	if (!dc)
		return;
	o = rec_new(r->a, "diag_status", 0, 0, now_ns());
	if (!o)
		return;
	json_object_set_new(o, "file", rec_string(path));
	json_object_set_new(o, "ok", json_boolean(!err));
	if (err == -EINTR)
		json_object_set_new(o, "interrupted", json_true());
	diag_counters(r->dg, o);
	json_object_set_new(o, "bootstrapping", json_integer((json_int_t)dc->bootstrapping));
	json_object_set_new(o, "baseline_keys", json_integer((json_int_t)dc->baseline_keys));
	json_object_set_new(o, "bad_lines", json_integer((json_int_t)r->bad_lines));
	json_object_set_new(o, "other_lines", json_integer((json_int_t)r->other_lines));
	rec_emit(r->a, REC_STATS, o);
}

static void emit_status(struct replay *r, const char *path, const struct corr_replay_stats *st,
			const struct gpu_counts *n, int err)
{
	const struct corr_counters *c = &st->corr;
	json_t *o = rec_new(r->a, "replay_status", 0, 0, now_ns());

	if (!o)
		return;
	json_object_set_new(o, "file", rec_string(path));
	json_object_set_new(o, "format", json_string(corr_format_name(st->format)));
	json_object_set_new(o, "ok", json_boolean(!err));
	if (err == -EINTR)
		json_object_set_new(o, "interrupted", json_true());
	json_object_set_new(o, "bytes", json_integer((json_int_t)st->bytes));
	json_object_set_new(o, "events", json_integer((json_int_t)st->events));
	json_object_set_new(o, "launch_events", json_integer((json_int_t)st->launches));
	json_object_set_new(o, "gpu_records", json_integer((json_int_t)st->gpu_records));
	json_object_set_new(o, "markers", json_integer((json_int_t)st->markers));
	json_object_set_new(o, "cpu_events", json_integer((json_int_t)st->cpu_events));
	json_object_set_new(o, "kernels", json_integer((json_int_t)c->kinds[CORR_KIND_KERNEL]));
	json_object_set_new(o, "memcpys", json_integer((json_int_t)c->kinds[CORR_KIND_MEMCPY]));
	json_object_set_new(o, "memsets", json_integer((json_int_t)c->kinds[CORR_KIND_MEMSET]));
	json_object_set_new(o, "joined", json_integer((json_int_t)c->joined));
	json_object_set_new(o, "unmatched", json_integer((json_int_t)c->unmatched));
	json_object_set_new(o, "launches", json_integer((json_int_t)c->launches));
	json_object_set_new(o, "launches_nested", json_integer((json_int_t)c->launches_nested));
	json_object_set_new(o, "launches_evicted", json_integer((json_int_t)c->launches_evicted));
	json_object_set_new(o, "gpu_evicted", json_integer((json_int_t)c->gpu_evicted));
	json_object_set_new(o, "refused", json_integer((json_int_t)c->refused));
	json_object_set_new(o, "records_too_long", json_integer((json_int_t)n->too_long));
	json_object_set_new(o, "summaries", json_integer((json_int_t)n->summaries));
	json_object_set_new(o, "stats_dropped", json_integer((json_int_t)n->stats_dropped));
	json_object_set_new(o, "utf8_replaced", json_integer((json_int_t)jw_utf8_replaced()));
	json_object_set_new(o, "launch_python", json_integer((json_int_t)n->launch_python));
	json_object_set_new(o, "launch_python_bad", json_integer((json_int_t)st->python_bad));
	if (r->ps) {
		struct corr_pyspans_counts pc;

		corr_pyspans__counts(r->ps, &pc);
		json_object_set_new(o, "python_spans", json_integer((json_int_t)pc.spans));
		if (pc.dropped)
			pr_warn("replay: %s: %llu Python calls not kept (no memory): some kernels "
				"lack their launch_python",
				path, (unsigned long long)pc.dropped);
	}
	rec_emit(r->a, REC_STATS, o);
}

/* a stream of this agent's step records: the detector alone (re-detection) */
static int replay_step_stream(struct replay *r, const char *path, struct corr_input *in)
{
	int err;

	if (!r->dg) {
		pr_err("replay: %s holds step records, but --step-markers off disables "
		       "the detector",
		       path);
		return -EINVAL;
	}
	err = replay_steps(r, path, in->buf, in->len);
	if (!err || err == -EINTR) {
		int derr = diag_finish(r->dg);

		if (!err)
			err = derr;
	}
	if (err == -EINTR)
		pr_warn("replay: %s: stopped by a signal; the steps read so far were judged", path);
	emit_diag_status(r, path, err);
	pr_info("replay: %s: %llu steps re-judged, %llu anomalies, %llu malformed lines", path,
		(unsigned long long)r->dg->steps, (unsigned long long)r->dg->anomalies,
		(unsigned long long)r->bad_lines);
	return err;
}

/* the instance of a recording: its name, recording suffixes stripped */
static void file_instance(const char *path, char *inst, size_t sz)
{
	const char *base = strrchr(path, '/');
	char *dot;

	snprintf(inst, sz, "%s", base ? base + 1 : path);
	/* strip recording suffixes only: names like qwen1.5-0.5b keep their dots */
	while ((dot = strrchr(inst, '.')) && dot != inst &&
	       (!strcmp(dot, ".gz") || !strcmp(dot, ".json") || !strcmp(dot, ".jsonl") ||
		!strcmp(dot, ".sqlite") || !strcmp(dot, ".trace") || !strcmp(dot, ".pt") ||
		!strcmp(dot, ".nsys")))
		*dot = '\0';
}

/*
 * One recording through its own correlator into the join, as live; its
 * NCCL kernels and communication ops to the collectives. 0 or -errno
 * (logged); its replay_status record says what was read either way, also
 * when its load failed (load_err).
 */
static int replay_file(struct replay *r, const char *path, struct corr_input *in,
		       struct corr_replay_opts *ro, int load_err)
{
	struct corr_opts co = {
	    .sz = sizeof(co),
	    .emit = on_gpu,
	    .emit_ctx = r,
	    .log = agent_lib_log,
	    .log_ctx = "replay: ",
	};
	struct corr_replay_stats st = {0};
	struct gpu_counts n = {0};
	int err, eerr;

	err = load_err;
	if (!err) {
		r->gp = gpu_new(r->a, true);
		if (!r->gp)
			return -errno;
		err = corr_replay_input(path, in, &co, ro, &st);
		corr_input_release(in);
		gpu_finish(r->gp); /* the rest: whole intervals, or one summary */
		gpu_counts(r->gp, &n);
	}
	if (err == -EINTR)
		pr_warn("replay: %s: stopped by a signal after %llu GPU records: the output is "
			"incomplete (replay_status.interrupted)",
			path, (unsigned long long)n.joined);
	else if (err)
		pr_err("replay: %s: failed (%s) after %llu GPU records", path, strerror(-err),
		       (unsigned long long)n.joined);
	emit_status(r, path, &st, &n, err);
	pr_info("replay: %s (%s): %llu GPU records, %llu joined, %llu unmatched, %llu markers",
		path, corr_format_name(st.format), (unsigned long long)st.gpu_records,
		(unsigned long long)st.corr.joined, (unsigned long long)st.corr.unmatched,
		(unsigned long long)st.markers);
	if (load_err)
		return err; /* nothing read: no collectives either */
	if (agent_opts(r->a)->n_replay_ranks && !st.dist_known)
		pr_warn("replay: %s has no distributedInfo (rank, world_size): its collectives "
			"are written, but not matched across ranks",
			path);
	eerr = corr_collr__end_file(r->cr, st.dist_known ? (int32_t)st.dist_rank : -1,
				    st.dist_known ? (int32_t)st.dist_world : 0);
	if (eerr == -EEXIST) {
		pr_err("replay: %s: rank %u again: give each rank's recording once", path,
		       st.dist_rank);
		r->rank_err = -EINVAL; /* the rest is still replayed, the exit says it */
	}
	if (!err && n.err)
		err = n.err;
	gpu_destroy(r->gp);
	r->gp = NULL;
	return err;
}

/* --summary after a replay: the sections a recording has (term_safe_out()) */
static void replay_sections(void *ctx, FILE *f)
{
	struct replay *r = ctx;

	gpusum_print(r->a->gpusum, f);
	pyprof_print(r->a->pyprof, f);
	diag_print_summary(r->dg, f);
}

int replay_run(struct agent *a, const char *path, const volatile sig_atomic_t *stop)
{
	const struct agent_opts *opts = agent_opts(a);
	struct replay r = {.a = a, .stop = stop};
	struct corr_replay_opts ro = {
	    .sz = sizeof(ro),
	    .log = agent_lib_log,
	    .log_ctx = "replay: ",
	    .marker = on_marker,
	    .marker_ctx = &r,
	    .cpu = on_cpu,
	    .cpu_ctx = &r,
	    .stop = stop,
	    .comm = corr_collr_op,
	    .frames = on_frames,
	    .frames_ctx = &r,
	};
	struct corr_collr_opts cro = {
	    .sz = sizeof(cro),
	    .emit = on_collective,
	    .emit_ctx = &r,
	    .wait = on_wait,
	    .wait_ctx = &r,
	    .log = agent_lib_log,
	    .log_ctx = "replay: ",
	};
	const char *files[REPLAY_FILES];
	int nfiles = 1 + opts->n_replay_ranks;
	struct corr_input in = {0};
	int err, cerr;

	a->stop = stop; /* the step segmenter's one cut at the end stops on it too */
	files[0] = path;
	for (int i = 1; i < nfiles; i++)
		files[i] = opts->replay_ranks[i - 1];
	for (int i = 0; i < nfiles; i++)
		file_instance(files[i], r.inst[i], sizeof(r.inst[i]));
	/* records carry the recording's name as instance (--instance still wins) */
	agent_set_default_instance(a, r.inst[0]);

	r.buf = malloc(COLL_BUF);
	r.cr = corr_collr__new(&cro);
	/* a deep recording's launch_python, written again (--python-stacks off: not) */
	if (opts->python_stacks != PYTHON_STACKS_OFF) {
		r.py.json = malloc(PY_STACK_JSON_MAX);
		if (!r.py.json) {
			err = -ENOMEM;
			pr_err("replay: Python frames: %s", strerror(-err));
			goto cleanup;
		}
		a->replay = &r;
		a->cap.launch_python = replay_python_frames;
	}
	if (opts->mode != MODE_DEEP)
		r.bin_ns = opts->interval_s > 0 ? (uint64_t)(opts->interval_s * 1e9) : 1000000000;
	if (!r.buf || !r.cr) {
		err = -ENOMEM;
		pr_err("replay: collectives setup: %s", strerror(-err));
		goto cleanup;
	}
	ro.comm_ctx = r.cr;
	err = diag_new(a, &r.dg);
	if (err) {
		pr_err("replay: diagnosis setup: %s", strerror(-err));
		goto cleanup;
	}
	a->diag = r.dg; /* the join feeds the agent's diagnosis, as live */
	for (int i = 0; i < nfiles && !err; i++) {
		agent_set_default_instance(a, r.inst[i]);
		/*
		 * read once (a FIFO or a pipe is read as a stream); our own step
		 * records: re-run the detector on them, nothing else
		 */
		/* each file's own Python calls: another rank's process may have the same pid */
		if (r.py.json) {
			corr_pyspans__free(r.ps);
			ro.pyspans = r.ps = corr_pyspans__new();
			r.py.len = 0;
			if (!r.ps) {
				err = -ENOMEM;
				pr_err("replay: Python frames: %s", strerror(-err));
				goto cleanup;
			}
		}
		err = corr_replay_load(files[i], &ro, &in);
		if (!err && in.buf && (in.len < 16 || memcmp(in.buf, "SQLite format 3", 16)) &&
		    is_step_stream(in.buf, in.len)) {
			if (nfiles > 1) {
				pr_err("replay: %s holds step records: --replay-rank takes "
				       "recordings of GPU activity only",
				       files[i]);
				err = -EINVAL;
				goto cleanup;
			}
			err = replay_step_stream(&r, path, &in);
			goto cleanup;
		}
		/* a failed load (logged) still gets its status record */
		err = replay_file(&r, files[i], &in, &ro, err);
	}
	agent_set_default_instance(a, r.inst[0]);
	cerr = collectives_finish(&r, path);
	if (!err)
		err = cerr ? cerr : r.rank_err;
	if (r.dg) {
		int derr = diag_finish(r.dg);

		if (derr == -EINTR)
			pr_warn(
			    "replay: %s: stopped by a signal while cutting steps: the steps cut "
			    "so far were judged (diag_status.interrupted)",
			    path);
		if (derr && !err)
			err = derr;
		emit_diag_status(&r, path, err);
		pr_info("replay: %s: %llu steps, %llu anomalies", path,
			(unsigned long long)r.dg->steps, (unsigned long long)r.dg->anomalies);
	}
	if (!err && r.dg && r.dg->err)
		err = r.dg->err;
cleanup:
	corr_input_release(&in);
	if (a->opts.summary) /* the live summary's other sections need the kernel's view */
		term_safe_out(stderr, replay_sections, &r);
	a->diag = NULL;
	if (a->replay == &r) {
		a->cap.launch_python = NULL;
		a->replay = NULL;
	}
	free(r.py.json);
	corr_pyspans__free(r.ps);
	diag_free(r.dg);
	gpu_destroy(r.gp);
	corr_collr__free(r.cr);
	for (size_t i = 0; i < r.nbins; i++)
		corr_coll_agg__free(r.bins[i].agg);
	free(r.bins);
	free(r.buf);
	return err;
}
