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
#include "correlator.h"
#include "diagnose.h"
#include "jsonw.h"

struct replay {
	struct agent *a;
	struct gpu *gp; /* the join (agent/pipeline/join.c), as live */
	struct diag *dg; /* steps and anomalies (agent/pipeline/diag.c); NULL: off */
	uint64_t bad_lines, other_lines;
	const volatile sig_atomic_t *stop; /* set by SIGINT / SIGTERM */
};

static void on_marker(void *ctx, const struct corr_marker *m)
{
	struct replay *r = ctx;

	diag_on_marker(r->dg, m);
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
	const struct diag_seg_counters *sc = r->dg ? diag_seg__counters(r->dg->seg) : NULL;
	json_t *o;

	if (!dc)
		return;
	o = rec_new(r->a, "diag_status", 0, 0, now_ns());
	if (!o)
		return;
	json_object_set_new(o, "file", rec_string(path));
	json_object_set_new(o, "ok", json_boolean(!err));
	json_object_set_new(o, "steps", json_integer((json_int_t)r->dg->steps));
	json_object_set_new(o, "judged", json_integer((json_int_t)dc->judged));
	json_object_set_new(o, "bootstrapping", json_integer((json_int_t)dc->bootstrapping));
	json_object_set_new(o, "anomalies", json_integer((json_int_t)dc->anomalies));
	json_object_set_new(o, "explained", json_integer((json_int_t)dc->explained));
	json_object_set_new(o, "noise", json_integer((json_int_t)dc->noise));
	json_object_set_new(o, "baseline_keys", json_integer((json_int_t)dc->baseline_keys));
	json_object_set_new(o, "bad_lines", json_integer((json_int_t)r->bad_lines));
	json_object_set_new(o, "other_lines", json_integer((json_int_t)r->other_lines));
	json_object_set_new(o, "steps_marker",
			    json_integer((json_int_t)(sc ? sc->steps_marker + sc->steps_usdt : 0)));
	json_object_set_new(o, "steps_auto",
			    json_integer((json_int_t)(sc ? sc->steps_auto + sc->steps_anchor : 0)));
	json_object_set_new(o, "records_outside_steps",
			    json_integer((json_int_t)(sc ? sc->outside : 0)));
	json_object_set_new(o, "records_dropped", json_integer((json_int_t)(sc ? sc->dropped : 0)));
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
	rec_emit(r->a, REC_STATS, o);
}

int replay_run(struct agent *a, const char *path, const volatile sig_atomic_t *stop)
{
	struct replay r = {.a = a, .stop = stop};
	struct corr_opts co = {
	    .sz = sizeof(co),
	    .emit = gpu_joined,
	    .log = agent_lib_log,
	    .log_ctx = "replay: ",
	};
	struct corr_replay_opts ro = {
	    .sz = sizeof(ro),
	    .log = agent_lib_log,
	    .log_ctx = "replay: ",
	    .marker = on_marker,
	    .marker_ctx = &r,
	    .stop = stop,
	};
	struct gpu_counts n = {0};
	struct corr_input in = {0};
	struct corr_replay_stats st = {0};
	const char *base = strrchr(path, '/');
	char inst[128];
	char *dot;
	int err;

	/* records carry the recording's name as instance (--instance still wins) */
	snprintf(inst, sizeof(inst), "%s", base ? base + 1 : path);
	/* strip recording suffixes only: names like qwen1.5-0.5b keep their dots */
	while ((dot = strrchr(inst, '.')) && dot != inst &&
	       (!strcmp(dot, ".gz") || !strcmp(dot, ".json") || !strcmp(dot, ".jsonl") ||
		!strcmp(dot, ".sqlite") || !strcmp(dot, ".trace") || !strcmp(dot, ".pt") ||
		!strcmp(dot, ".nsys")))
		*dot = '\0';
	agent_set_default_instance(a, inst);

	err = diag_new(a, &r.dg);
	if (err) {
		pr_err("replay: diagnosis setup: %s", strerror(-err));
		goto cleanup;
	}
	a->diag = r.dg; /* the join feeds the agent's diagnosis, as live */
	/*
	 * read once (a FIFO or a pipe is read as a stream); our own step
	 * records: re-run the detector on them, nothing else
	 */
	err = corr_replay_load(path, &ro, &in);
	if (!err && in.buf && (in.len < 16 || memcmp(in.buf, "SQLite format 3", 16)) &&
	    is_step_stream(in.buf, in.len)) {
		if (!r.dg) {
			pr_err("replay: %s holds step records, but --step-markers off disables "
			       "the detector",
			       path);
			err = -EINVAL;
			goto cleanup;
		}
		err = replay_steps(&r, path, in.buf, in.len);
		if (!err || err == -EINTR) {
			int derr = diag_finish(r.dg);

			if (!err)
				err = derr;
		}
		if (err == -EINTR)
			pr_warn("replay: %s: stopped by a signal; the steps read so far were judged",
				path);
		emit_diag_status(&r, path, err);
		pr_info("replay: %s: %llu steps re-judged, %llu anomalies, %llu malformed lines",
			path, (unsigned long long)r.dg->steps, (unsigned long long)r.dg->anomalies,
			(unsigned long long)r.bad_lines);
		goto cleanup;
	}

	if (err)
		goto replayed; /* load failed (logged): the status records still say so */
	r.gp = gpu_new(a, true);
	if (!r.gp) {
		err = -errno;
		goto cleanup;
	}
	co.emit_ctx = r.gp;
	err = corr_replay_input(path, &in, &co, &ro, &st);
	corr_input_release(&in);
replayed:
	if (r.gp) {
		gpu_finish(r.gp); /* the rest: whole intervals, or one summary */
		gpu_counts(r.gp, &n);
	}
	if (err == -EINTR)
		pr_warn("replay: %s: stopped by a signal after %llu GPU records: the output is "
			"incomplete (replay_status.interrupted)",
			path, (unsigned long long)n.joined);
	else if (err)
		pr_err("replay: %s: failed (%s) after %llu GPU records", path, strerror(-err),
		       (unsigned long long)n.joined);
	emit_status(&r, path, &st, &n, err);
	if (r.dg) {
		int derr = diag_finish(r.dg);

		if (derr && !err)
			err = derr;
		emit_diag_status(&r, path, err);
		pr_info("replay: %s: %llu steps, %llu anomalies", path,
			(unsigned long long)r.dg->steps, (unsigned long long)r.dg->anomalies);
	}
	pr_info("replay: %s (%s): %llu GPU records, %llu joined, %llu unmatched, %llu markers",
		path, corr_format_name(st.format), (unsigned long long)st.gpu_records,
		(unsigned long long)st.corr.joined, (unsigned long long)st.corr.unmatched,
		(unsigned long long)st.markers);
	if (!err && n.err)
		err = n.err;
	if (!err && r.dg && r.dg->err)
		err = r.dg->err;
cleanup:
	corr_input_release(&in);
	a->diag = NULL;
	diag_free(r.dg);
	gpu_destroy(r.gp);
	return err;
}
