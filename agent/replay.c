// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * replay.c - `infertrace-agent --replay FILE`: a recording (Kineto trace,
 * Nsight Systems SQLite export, our own JSON lines) goes through the same
 * correlator and sinks as live events. No BPF, no root.
 *
 * Deep mode: one kernel/memcpy/memset record per GPU activity, formatted by
 * corr_gpu_to_json() (hot path: millions of records) and written with
 * rec_emit_raw(). Sentinel mode: per-interval, per-process gpu_summary
 * records; the interval is --interval in the recording's own clock.
 * Both end with one replay_status record (docs/events_gpu.md).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "correlator.h"

#define JSON_BUF (64 * 1024)
/* sentinel: cut finished intervals once this many records are held */
#define STATS_HOLD 262144

struct replay {
	struct agent *a;
	bool deep;
	char *buf;
	struct corr_stats *st;
	uint64_t interval_ns;
	uint64_t t_next; /* start of the next interval to cut; 0: not started */
	uint64_t max_start;
	uint64_t emitted, too_long, summaries;
	int err;
};

static void replay_log_cb(void *ctx, enum corr_log_level lvl, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	(void)ctx;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	agent_log((enum log_level)lvl, "replay: %s", msg);
}

static void emit_summary(void *ctx, const struct corr_summary *s)
{
	struct replay *r = ctx;

	r->summaries++;
	gpu_emit_summary(r->a, s);
}

/* cut every whole interval that ends before `upto` */
static void cut_until(struct replay *r, uint64_t upto)
{
	if (!r->t_next) {
		uint64_t first = corr_stats__first_ts(r->st);

		if (first == UINT64_MAX)
			return;
		r->t_next = first;
	}
	while (r->t_next + r->interval_ns <= upto) {
		uint64_t first = corr_stats__first_ts(r->st);

		if (first == UINT64_MAX)
			return;
		/* skip empty intervals in one step */
		if (first >= r->t_next + r->interval_ns)
			r->t_next += (first - r->t_next) / r->interval_ns * r->interval_ns;
		if (r->t_next + r->interval_ns > upto)
			return;
		corr_stats__cut(r->st, r->t_next, r->t_next + r->interval_ns, emit_summary, r);
		r->t_next += r->interval_ns;
	}
}

static void on_gpu(void *ctx, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct replay *r = ctx;
	struct corr_json_common cm;
	const char *inst;
	int len;

	r->emitted++;
	if (!r->deep) {
		corr_stats__add(r->st, g, l);
		if (g->start_ns > r->max_start)
			r->max_start = g->start_ns;
		/* a recording is nearly time-ordered: keep two intervals of slack */
		if (r->interval_ns && r->emitted % STATS_HOLD == 0 &&
		    r->max_start > 2 * r->interval_ns)
			cut_until(r, r->max_start - 2 * r->interval_ns);
		return;
	}
	inst = agent_instance_of(r->a, l ? l->pid : 0);
	cm.host = agent_host(r->a);
	cm.instance = inst;
	len = corr_gpu_to_json(r->buf, JSON_BUF, &cm, g, l);
	if (len < 0) {
		r->too_long++; /* a name beyond 64 KiB: counted in replay_status */
		return;
	}
	if (rec_emit_raw(r->a, REC_EVENT, inst, r->buf, (size_t)len))
		r->err = -EIO;
}

static void emit_status(struct replay *r, const char *path, const struct corr_replay_stats *st,
			int err)
{
	const struct corr_counters *c = &st->corr;
	json_t *o = rec_new(r->a, "replay_status", 0, 0, now_ns());

	if (!o)
		return;
	json_object_set_new(o, "file", json_string(path));
	json_object_set_new(o, "format", json_string(corr_format_name(st->format)));
	json_object_set_new(o, "ok", json_boolean(!err));
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
	json_object_set_new(o, "records_too_long", json_integer((json_int_t)r->too_long));
	json_object_set_new(o, "summaries", json_integer((json_int_t)r->summaries));
	json_object_set_new(o, "stats_dropped",
			    json_integer((json_int_t)(r->st ? corr_stats__dropped(r->st) : 0)));
	rec_emit(r->a, REC_STATS, o);
}

int replay_run(struct agent *a, const char *path)
{
	const struct agent_opts *ao = agent_opts(a);
	struct replay r = { .a = a, .deep = ao->mode == MODE_DEEP };
	struct corr_opts co = {
		.sz = sizeof(co),
		.emit = on_gpu,
		.emit_ctx = &r,
		.log = replay_log_cb,
	};
	struct corr_replay_opts ro = { .sz = sizeof(ro), .log = replay_log_cb };
	struct corr_stats_opts so = { .sz = sizeof(so) };
	struct corr_replay_stats st;
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

	if (r.deep) {
		r.buf = malloc(JSON_BUF);
		if (!r.buf) {
			err = -ENOMEM;
			goto cleanup;
		}
	} else {
		r.st = corr_stats__new(&so);
		if (!r.st) {
			err = -errno;
			goto cleanup;
		}
		r.interval_ns = ao->interval_s > 0 ? (uint64_t)(ao->interval_s * 1e9) : 0;
	}
	err = corr_replay_file(path, &co, &ro, &st);
	if (err)
		pr_err("replay: %s: failed (%s) after %llu GPU records", path, strerror(-err),
		       (unsigned long long)r.emitted);
	if (r.st) {
		/* the rest: whole intervals, or one summary when no interval is set */
		if (r.interval_ns)
			cut_until(&r, UINT64_MAX - r.interval_ns);
		corr_stats__cut(r.st, r.t_next ? r.t_next : corr_stats__first_ts(r.st),
				UINT64_MAX, emit_summary, &r);
	}
	emit_status(&r, path, &st, err);
	pr_info("replay: %s (%s): %llu GPU records, %llu joined, %llu unmatched, %llu markers",
		path, corr_format_name(st.format), (unsigned long long)st.gpu_records,
		(unsigned long long)st.corr.joined, (unsigned long long)st.corr.unmatched,
		(unsigned long long)st.markers);
	if (!err && r.err)
		err = r.err;
cleanup:
	corr_stats__free(r.st);
	free(r.buf);
	return err;
}
