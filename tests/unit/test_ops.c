// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_ops.c - the operating modules without BPF or sockets: the control
 * request parser, the flight recorder (what it keeps, what an anomaly
 * sends, the memory budget, the launches its kernel half hands down) and
 * the Perfetto writer (tracks, names, flows, lanes for overlapping slices).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "ops.h"
#include "perfetto.h"
#include "control_proto.h"
#include "json_assert.h"
#include "../fakes/cap_sink.h"

/* a sink that keeps every record */
struct cap_sink {
	struct sink s;
	char *recs[4096];
	enum rec_class cls[4096];
	int n;
};

static int cap_write(struct sink *s, enum rec_class cls, const char *key, const char *json,
		     size_t len)
{
	struct cap_sink *c = (struct cap_sink *)s;

	(void)key;
	if (c->n < 4096) {
		c->cls[c->n] = cls;
		c->recs[c->n++] = strndup(json, len);
	}
	return 0;
}

static void cap_close(struct sink *s)
{
	struct cap_sink *c = (struct cap_sink *)s;

	for (int i = 0; i < c->n; i++)
		free(c->recs[i]);
	c->n = 0;
}

static struct agent *agent_new(struct cap_sink *c, unsigned mib)
{
	struct agent *a = calloc(1, sizeof(*a));

	assert_non_null(a);
	snprintf(a->host, sizeof(a->host), "testhost");
	memset(c, 0, sizeof(*c));
	c->s.name = "cap";
	c->s.write = cap_write;
	c->s.flush = cap_flush;
	c->s.close = cap_close;
	a->sinks[0] = &c->s;
	a->n_sinks = 1;
	a->opts.recorder_s = 10;
	a->opts.recorder_mib = mib;
	a->opts.control_socket = "none";
	a->opts.deep_dive_max_s = 600;
	assert_int_equal(ops_init(a), 0);
	return a;
}

static void agent_del(struct agent *a, struct cap_sink *c)
{
	ops_free(a);
	cap_close(&c->s);
	free(a);
}

static void emit(struct agent *a, enum rec_class cls, const char *inst, const char *json)
{
	rec_emit_raw(a, cls, inst, json, strlen(json));
}

static void keep(struct agent *a, const char *inst, const char *json)
{
	recorder_keep(a, inst, json, strlen(json));
}

/* ------------------------------------------------------------- parser -- */

static void test_parse_ok(void **state)
{
	struct ctl_request r;
	char err[128];
	static const char dd[] =
	    "{\"cmd\":\"deep_dive\",\"instance\":\"vllm-a\",\"duration_s\":12.5,\"id\":\"x1\"}";
	static const char ex[] = "{\"cmd\":\"export\",\"format\":\"perfetto\"}";

	(void)state;
	assert_int_equal(ctl_parse_request(dd, strlen(dd), &r, err, sizeof(err)), 0);
	assert_int_equal(r.cmd, CTL_DEEP_DIVE);
	assert_string_equal(r.instance, "vllm-a");
	assert_true(r.duration_s == 12.5);
	assert_false(r.off);
	assert_string_equal(json_string_value(r.id), "x1");
	ctl_request_release(&r);
	assert_int_equal(ctl_parse_request(ex, strlen(ex), &r, err, sizeof(err)), 0);
	assert_int_equal(r.cmd, CTL_EXPORT);
	assert_string_equal(r.instance, "");
	ctl_request_release(&r);
	assert_int_equal(
	    ctl_parse_request("{\"cmd\":\"summary\",\"id\":3}", 24, &r, err, sizeof(err)), 0);
	assert_int_equal(r.cmd, CTL_SUMMARY);
	assert_string_equal(ctl_cmd_name(r.cmd), "summary");
	assert_false(r.reset);
	ctl_request_release(&r);
	assert_int_equal(
	    ctl_parse_request("{\"cmd\":\"summary\",\"reset\":true}", 30, &r, err, sizeof(err)), 0);
	assert_true(r.reset);
	ctl_request_release(&r);
	assert_int_equal(
	    ctl_parse_request("{\"cmd\":\"summary\",\"reset\":false}", 31, &r, err, sizeof(err)),
	    0);
	assert_false(r.reset);
	ctl_request_release(&r);
	assert_int_equal(ctl_parse_request("{\"cmd\":\"anomalies\"}", 19, &r, err, sizeof(err)), 0);
	assert_int_equal(r.cmd, CTL_ANOMALIES);
	assert_string_equal(ctl_cmd_name(r.cmd), "anomalies");
	assert_int_equal(r.last, 0);   /* every one kept */
	assert_int_equal(r.after, -1); /* from the oldest kept */
	assert_string_equal(r.instance, "");
	ctl_request_release(&r);
	{
		static const char an[] =
		    "{\"cmd\":\"anomalies\",\"instance\":\"vllm-a\",\"last\":256}";

		assert_int_equal(ctl_parse_request(an, strlen(an), &r, err, sizeof(err)), 0);
		assert_int_equal(r.last, 256);
		assert_string_equal(r.instance, "vllm-a");
		ctl_request_release(&r);
	}
	{
		/*
		 * any name a workload can give itself: a space, a quote, a
		 * backslash, UTF-8, an escape and a newline; 127 bytes, not 128
		 */
		static const char *const names[][2] = {
		    {"{\"cmd\":\"deep_dive\",\"instance\":\"llama 70b \\\"chat\\\" \\\\ x\"}",
		     "llama 70b \"chat\" \\ x"},
		    {"{\"cmd\":\"export\",\"format\":\"perfetto\",\"instance\":"
		     "\"m\\u00e9t\\u00e9o\"}",
		     "m\xc3\xa9t\xc3\xa9o"},
		    {"{\"cmd\":\"anomalies\",\"instance\":\"c\\u001b[2J\\n-1\"}", "c\x1b[2J\n-1"},
		};
		char big[256], name[129];

		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			assert_int_equal(ctl_parse_request(names[i][0], strlen(names[i][0]), &r,
							   err, sizeof(err)),
					 0);
			assert_string_equal(r.instance, names[i][1]);
			ctl_request_release(&r);
		}
		memset(name, 'n', 127);
		name[127] = '\0';
		snprintf(big, sizeof(big), "{\"cmd\":\"deep_dive\",\"instance\":\"%s\"}", name);
		assert_int_equal(ctl_parse_request(big, strlen(big), &r, err, sizeof(err)), 0);
		assert_string_equal(r.instance, name);
		ctl_request_release(&r);
		strcpy(name + 127, "n");
		snprintf(big, sizeof(big), "{\"cmd\":\"deep_dive\",\"instance\":\"%s\"}", name);
		assert_int_equal(ctl_parse_request(big, strlen(big), &r, err, sizeof(err)),
				 -EINVAL);
		assert_non_null(strstr(err, "1 to 127 bytes"));
		ctl_request_release(&r);
	}
	{
		static const char an[] = "{\"cmd\":\"anomalies\",\"after\":9007199254740993}";

		assert_int_equal(ctl_parse_request(an, strlen(an), &r, err, sizeof(err)), 0);
		assert_true(r.after == 9007199254740993ll);
		ctl_request_release(&r);
	}
}

/* --metrics' histograms: a value on a bound counts in it (Prometheus's le), past all in +Inf */
static void test_prom_hist(void **state)
{
	static const double le[] = {0.001, 0.01, 0.1};
	struct prom_hist h = {.le = le, .nle = 3};
	static const double v[] = {0, 0.0005, 0.001, 0.0011, 0.01, 0.05, 0.1, 0.1000001, 7};

	(void)state;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		prom_hist_add(&h, v[i]);
	assert_int_equal(h.n[0], 3); /* 0, 0.0005, 0.001 */
	assert_int_equal(h.n[1], 2); /* 0.0011, 0.01 */
	assert_int_equal(h.n[2], 2); /* 0.05, 0.1 */
	assert_int_equal(h.n[3], 2); /* +Inf */
	assert_true(h.sum > 7.2626 && h.sum < 7.2627);
}

/* --summary's log histogram: exact below 16 ns, then a bucket's largest value, at most 1/16 over */
static void test_qhist(void **state)
{
	struct qhist h = {0};
	uint64_t v;

	(void)state;
	for (v = 0; v < 16; v++)
		qhist_add(&h, v);
	assert_true(qhist_quantile(&h, 0.5) == 8.0); /* index 8 of 0..15 */
	assert_true(qhist_quantile(&h, 0.0) == 0.0);
	memset(&h, 0, sizeof(h));
	/* every value from 16 ns to 2^36: a value in v's bucket, at most 6.25% over, never under */
	for (v = 16; v < (1ULL << 36); v = v * 9 / 8 + 1) {
		struct qhist two = {0};
		uint64_t w = v + v / 17; /* under 1/16 above: maybe in v's bucket */
		double q;

		qhist_add(&two, v);
		qhist_add(&two, w);
		qhist_add(&two, v * 2); /* the largest, another bucket */
		q = qhist_quantile(&two, 0.0);
		assert_true(q == (double)v || q == (double)w);
		assert_true(q <= (double)v * 1.0625);
	}
	/* past 2^41 ns: the last bucket */
	qhist_add(&h, 1ULL << 50);
	assert_true(qhist_quantile(&h, 0.5) == (double)(1ULL << 50));
	assert_int_equal(h.n, 1);
}

static void test_parse_bad(void **state)
{
	static const char *const bad[] = {
	    "",
	    "nope",
	    "[]",
	    "{}",
	    "{\"cmd\":1}",
	    "{\"cmd\":\"rm\"}",
	    "{\"cmd\":\"deep_dive\"}",
	    "{\"cmd\":\"deep_dive\",\"instance\":\"\"}",
	    "{\"cmd\":\"deep_dive\",\"instance\":\"a\\u0000b\"}",
	    "{\"cmd\":\"deep_dive\",\"instance\":\"a\",\"duration_s\":0}",
	    "{\"cmd\":\"deep_dive\",\"instance\":\"a\",\"duration_s\":1e9}",
	    "{\"cmd\":\"deep_dive\",\"instance\":\"a\",\"off\":\"yes\"}",
	    "{\"cmd\":\"status\",\"instance\":\"a\"}",
	    "{\"cmd\":\"export\"}",
	    "{\"cmd\":\"summary\",\"instance\":\"a\"}",
	    "{\"cmd\":\"summary\",\"reset\":1}",
	    "{\"cmd\":\"status\",\"reset\":true}",
	    "{\"cmd\":\"anomalies\",\"last\":0}",
	    "{\"cmd\":\"anomalies\",\"last\":257}",
	    "{\"cmd\":\"anomalies\",\"last\":-1}",
	    "{\"cmd\":\"anomalies\",\"last\":\"5\"}",
	    "{\"cmd\":\"anomalies\",\"last\":5.0}",
	    "{\"cmd\":\"anomalies\",\"after\":-1}",
	    "{\"cmd\":\"anomalies\",\"after\":\"7\"}",
	    "{\"cmd\":\"summary\",\"after\":7}",
	    "{\"cmd\":\"anomalies\",\"reset\":true}",
	    "{\"cmd\":\"anomalies\",\"instance\":7}",
	    "{\"cmd\":\"summary\",\"last\":5}",
	    "{\"cmd\":\"ping\",\"id\":[1]}",
	    "{\"cmd\":\"ping\",\"cmd\":\"ping\"}",
	    "{\"cmd\":\"ping\"} trailing",
	};
	struct ctl_request r;
	char err[128];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(ctl_parse_request(bad[i], strlen(bad[i]), &r, err, sizeof(err)),
				 -EINVAL);
		assert_true(strlen(err) > 0);
		ctl_request_release(&r);
	}
	/* an id survives an error, for the error reply */
	assert_int_equal(ctl_parse_request("{\"cmd\":\"rm\",\"id\":7}", 19, &r, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(json_integer_value(r.id), 7);
	ctl_request_release(&r);
}

/* ------------------------------------------------- recent anomalies -- */

/* recent_write()'s lines and counts, as `agentctl anomalies` gets them */
static json_t *recent_text(struct agent *a, const char *inst, uint32_t last, int64_t after,
			   char **text)
{
	size_t len = 0;
	FILE *f = open_memstream(text, &len);
	json_t *r;

	assert_non_null(f);
	r = recent_write(a, inst, last, after, f);
	assert_int_equal(fclose(f), 0);
	assert_non_null(r);
	return r;
}

/* the n of each line, in order; the number of lines */
static int line_ns(const char *text, int *ns, int max)
{
	int k = 0;

	for (const char *p = text; *p && k < max; p = strchr(p, '\n') + 1) {
		const char *q = strstr(p, "\"n\":");

		assert_non_null(q);
		ns[k++] = atoi(q + 4);
	}
	return k;
}

static void test_recent_anomalies(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c, 4);
	char buf[128], *text = NULL;
	int ns[RECENT_MAX], k;
	json_t *r;

	(void)state;
	r = recent_text(a, NULL, 0, -1, &text);
	assert_string_equal(text, "");
	assert_json_int(r, "seen", 0);
	assert_json_int(r, "records", 0);
	json_decref(r);
	free(text);
	/* 300 anomaly-class records, i1 and i2 in turn; other classes pass by */
	for (int i = 0; i < 300; i++) {
		const char *inst = i % 2 ? "i2" : "i1";

		snprintf(buf, sizeof(buf), "{\"type\":\"%s\",\"instance\":\"%s\",\"n\":%d}",
			 i % 50 == 49 ? "level_shift" : "anomaly", inst, i);
		emit(a, REC_ANOMALY, inst, buf);
		emit(a, REC_EVENT, inst, "{\"type\":\"offcpu\",\"n\":-1}");
		emit(a, REC_SUMMARY, inst, "{\"type\":\"step\",\"n\":-1}");
	}
	/* the last 256, oldest first, each line as the sinks got it */
	r = recent_text(a, "", 0, -1, &text);
	assert_json_int(r, "seen", 300);
	assert_json_int(r, "kept", RECENT_MAX);
	assert_json_int(r, "capacity", RECENT_MAX);
	assert_json_int(r, "matched", RECENT_MAX);
	assert_json_int(r, "records", RECENT_MAX);
	assert_json_int(r, "not_kept", 0);
	k = line_ns(text, ns, RECENT_MAX);
	assert_int_equal(k, RECENT_MAX);
	for (int i = 0; i < k; i++)
		assert_int_equal(ns[i], 300 - RECENT_MAX + i);
	assert_non_null(strstr(text, "{\"type\":\"level_shift\",\"instance\":\"i2\",\"n\":299}\n"));
	json_decref(r);
	free(text);
	/* one instance's newest 5 */
	r = recent_text(a, "i2", 5, -1, &text);
	assert_json_int(r, "matched", RECENT_MAX / 2);
	assert_json_int(r, "records", 5);
	k = line_ns(text, ns, RECENT_MAX);
	assert_int_equal(k, 5);
	for (int i = 0; i < k; i++)
		assert_int_equal(ns[i], 291 + 2 * i);
	json_decref(r);
	free(text);
	/* an instance with none; more asked than kept */
	r = recent_text(a, "elsewhere", 3, -1, &text);
	assert_json_int(r, "matched", 0);
	assert_json_int(r, "records", 0);
	assert_string_equal(text, "");
	json_decref(r);
	free(text);
	r = recent_text(a, "i1", RECENT_MAX, -1, &text);
	assert_json_int(r, "records", RECENT_MAX / 2);
	json_decref(r);
	free(text);
	/* --follow's cursor: after the 299th seen, the 300th (n 299); none missed */
	r = recent_text(a, NULL, 0, 299, &text);
	assert_json_int(r, "records", 1);
	assert_json_int(r, "missed", 0);
	assert_json_int(r, "seen", 300);
	k = line_ns(text, ns, RECENT_MAX);
	assert_int_equal(k, 1);
	assert_int_equal(ns[0], 299);
	json_decref(r);
	free(text);
	/* a follower that had seen none: the first 44 went unread */
	r = recent_text(a, NULL, 0, 0, &text);
	assert_json_int(r, "missed", 300 - RECENT_MAX);
	assert_json_int(r, "records", RECENT_MAX);
	json_decref(r);
	free(text);
	/* after the 10th: the ring starts at the 45th, so 34 went unread */
	r = recent_text(a, "i2", 0, 10, &text);
	assert_json_int(r, "missed", 300 - RECENT_MAX - 10);
	assert_json_int(r, "records", RECENT_MAX / 2);
	json_decref(r);
	free(text);
	/* nothing after the last, nor after a cursor of another run of the agent */
	for (int after = 300; after <= 500; after += 200) {
		r = recent_text(a, NULL, 0, after, &text);
		assert_json_int(r, "records", 0);
		assert_json_int(r, "missed", 0);
		assert_string_equal(text, "");
		json_decref(r);
		free(text);
	}
	agent_del(a, &c);
}

/* ----------------------------------------------------------- recorder -- */

static void test_recorder_anomaly_sends_window(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c, 4);
	json_t *fr;

	(void)state;
	emit(a, REC_EVENT, "i1", "{\"type\":\"offcpu\",\"instance\":\"i1\",\"n\":1}");
	keep(a, "i1", "{\"type\":\"kernel\",\"instance\":\"i1\",\"n\":2}");
	keep(a, "i2", "{\"type\":\"kernel\",\"instance\":\"i2\",\"n\":3}");
	emit(a, REC_SUMMARY, "i1", "{\"type\":\"thread\",\"instance\":\"i1\"}");
	assert_int_equal(c.n, 2); /* kept records are not sent */
	emit(a, REC_ANOMALY, "i1", "{\"type\":\"anomaly\",\"instance\":\"i1\"}");
	/* the anomaly, the marker, then the kept record of i1 only */
	assert_int_equal(c.n, 5);
	assert_int_equal(c.cls[2], REC_ANOMALY);
	fr = json_loads(c.recs[3], 0, NULL);
	assert_non_null(fr);
	assert_json_str(fr, "type", "flight_recorder");
	assert_json_str(fr, "instance", "i1");
	assert_json_str(fr, "trigger", "anomaly");
	assert_json_int(fr, "records", 1);
	assert_json_int(fr, "already_sent", 2);
	json_decref(fr);
	assert_non_null(strstr(c.recs[4], "\"n\":2"));
	assert_int_equal(c.cls[4], REC_EVENT);
	/* a second anomaly: nothing new to send, no repeats */
	emit(a, REC_ANOMALY, "i1", "{\"type\":\"anomaly\",\"instance\":\"i1\"}");
	assert_int_equal(c.n, 7);
	assert_non_null(strstr(c.recs[6], "\"records\":0"));
	/* an instance without records here: no marker */
	assert_int_equal(recorder_flush(a, "elsewhere", "deep_dive"), 0);
	assert_int_equal(c.n, 7);
	agent_del(a, &c);
}

static int count_cb(void *ctx, const char *json, size_t len)
{
	(void)json;
	(void)len;
	(*(int *)ctx)++;
	return 0;
}

static void test_recorder_budget(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c, 1); /* 1 MiB: four chunks */
	char rec[1024];
	json_t *st = json_object();
	int n = 0;

	(void)state;
	memset(rec, 'x', sizeof(rec));
	memcpy(rec, "{\"a\":\"", 6);
	memcpy(rec + sizeof(rec) - 3, "\"}", 3);
	for (int i = 0; i < 5000; i++)
		recorder_keep(a, i % 2 ? "i1" : "i2", rec, strlen(rec));
	recorder_stats(a, st);
	assert_true(json_integer_value(
			json_object_get(json_object_get(st, "recorder"), "used_bytes")) <= 1 << 20);
	assert_true(json_integer_value(
			json_object_get(json_object_get(st, "recorder"), "evicted_budget")) > 0);
	recorder_foreach(a, NULL, count_cb, &n);
	assert_true(n > 500 && n < 1100);
	json_decref(st);
	agent_del(a, &c);
}

/* "n" of the record i of the capture, -1 when it has none */
static long rec_n(struct cap_sink *c, int i)
{
	const char *p = strstr(c->recs[i], "\"n\":");

	return p ? strtol(p + 4, NULL, 10) : -1;
}

static uint64_t rstat(struct agent *a, const char *name)
{
	json_t *st = json_object();
	uint64_t v;

	recorder_stats(a, st);
	v = (uint64_t)json_integer_value(json_object_get(json_object_get(st, "recorder"), name));
	json_decref(st);
	return v;
}

/*
 * A window goes out in slices (here the shortest: 64 entries each), the
 * first at the trigger, the next at each tick; the records kept meanwhile
 * belong to the next window; a second trigger while one is being sent
 * announces only what the first did not; each record is sent once, in
 * recorded order.
 */
static void test_recorder_window_in_slices(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c, 4);
	char rec[64];
	int ticks = 0, next = 0, base;
	json_t *fr;

	(void)state;
	recorder_set_slice(a, 0);
	for (int i = 0; i < 1000; i++) {
		snprintf(rec, sizeof(rec), "{\"type\":\"kernel\",\"n\":%d}", i);
		keep(a, "i1", rec);
	}
	emit(a, REC_ANOMALY, "i1", "{\"type\":\"anomaly\",\"instance\":\"i1\"}");
	fr = json_loads(c.recs[1], 0, NULL);
	assert_non_null(fr);
	assert_json_str(fr, "type", "flight_recorder");
	assert_json_int(fr, "records", 1000);
	json_decref(fr);
	assert_int_equal(c.n, 2 + 64); /* the anomaly, the marker, one slice */
	assert_true(recorder_sending(a));
	/* kept after the trigger: not this window's */
	for (int i = 1000; i < 1010; i++) {
		snprintf(rec, sizeof(rec), "{\"type\":\"kernel\",\"n\":%d}", i);
		keep(a, "i1", rec);
	}
	while (recorder_sending(a) && ticks < 100) {
		recorder_tick(a);
		ticks++;
	}
	assert_int_equal(ticks, 15); /* 1001 entries, 64 a slice */
	assert_int_equal(c.n, 2 + 1000);
	for (int i = 2; i < c.n; i++)
		assert_int_equal(rec_n(&c, i), next++);
	/* the next trigger sends the 10, once */
	emit(a, REC_ANOMALY, "i1", "{\"type\":\"anomaly\",\"instance\":\"i1\"}");
	assert_non_null(strstr(c.recs[c.n - 11], "\"records\":10"));
	for (int i = c.n - 10; i < c.n; i++)
		assert_int_equal(rec_n(&c, i), next++);
	assert_false(recorder_sending(a));

	/* a second trigger while the first window is being sent */
	base = c.n;
	for (int i = 1010; i < 1500; i++) {
		snprintf(rec, sizeof(rec), "{\"type\":\"kernel\",\"n\":%d}", i);
		keep(a, "i1", rec);
		if (i == 1200)
			emit(a, REC_ANOMALY, "i1", "{\"type\":\"anomaly\",\"instance\":\"i1\"}");
	}
	assert_true(recorder_sending(a));
	assert_int_equal(recorder_flush(a, "i1", "deep_dive"), 1500 - 1201);
	while (recorder_sending(a) && ticks < 200) {
		recorder_tick(a);
		ticks++;
	}
	for (int i = base, w = 0; i < c.n; i++) {
		if (strstr(c.recs[i], "flight_recorder"))
			assert_non_null(
			    strstr(c.recs[i], w++ ? "\"records\":299" : "\"records\":191"));
		else if (rec_n(&c, i) >= 0)
			assert_int_equal(rec_n(&c, i), next++);
	}
	assert_int_equal(next, 1500);
	assert_int_equal(rstat(a, "sent_early"), 0);
	assert_int_equal(rstat(a, "flushed"), 1500);
	agent_del(a, &c);
}

/*
 * A trigger counts what an earlier one walked by whole chunks: over many
 * chunks, the second window announces only the records kept since, and
 * counts the others as already sent.
 */
static void test_recorder_second_trigger_counts(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c, 16);
	char rec[1024];
	json_t *fr;

	(void)state;
	recorder_set_slice(a, UINT64_MAX); /* each window at once, however slow the build */
	memset(rec, 'x', sizeof(rec));
	memcpy(rec, "{\"a\":\"", 6);
	memcpy(rec + sizeof(rec) - 3, "\"}", 3);
	for (int i = 0; i < 2000; i++) /* 8 chunks */
		keep(a, "i1", rec);
	assert_int_equal(recorder_flush(a, "i1", "anomaly"), 2000);
	for (int i = 0; i < 10; i++)
		keep(a, "i1", rec);
	assert_int_equal(recorder_flush(a, "i1", "anomaly"), 10);
	fr = json_loads(c.recs[c.n - 11], 0, NULL);
	assert_non_null(fr);
	assert_json_str(fr, "type", "flight_recorder");
	assert_json_int(fr, "records", 10);
	assert_json_int(fr, "already_sent", 2000);
	json_decref(fr);
	assert_int_equal(c.n, 1 + 2000 + 1 + 10);
	agent_del(a, &c);
}

/*
 * The budget evicts chunks of a window being sent: what the window
 * announced in them is sent first (sent_early), in order, each record once.
 * A window still being sent at shutdown goes out whole.
 */
static void test_recorder_window_evicted_while_sent(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c, 1); /* four chunks of 256 KiB */
	char rec[1024];
	uint64_t announced;
	json_t *fr;

	(void)state;
	recorder_set_slice(a, 0);
	memset(rec, 'x', sizeof(rec));
	for (int i = 0; i < 600; i++) {
		int k = snprintf(rec, sizeof(rec), "{\"n\":%d,\"pad\":\"", i);

		rec[k] = 'x';
		memcpy(rec + sizeof(rec) - 3, "\"}", 3);
		keep(a, "i1", rec);
	}
	announced = (uint64_t)recorder_flush(a, "i1", "anomaly");
	assert_int_equal(announced, 600);
	fr = json_loads(c.recs[0], 0, NULL);
	assert_non_null(fr);
	assert_json_int(fr, "records", 600);
	json_decref(fr);
	assert_int_equal(c.n, 1 + 64);
	/* another instance's records push i1's oldest chunks out */
	for (int i = 0; i < 800; i++)
		keep(a, "i2", rec);
	assert_true(rstat(a, "sent_early") > 0);
	assert_true(rstat(a, "evicted_budget") > 0);
	while (recorder_sending(a))
		recorder_tick(a);
	assert_int_equal(c.n, 1 + 600);
	for (int i = 1; i < c.n; i++)
		assert_int_equal(rec_n(&c, i), i - 1);

	/* at shutdown, what is left of a window is sent */
	cap_close(&c.s);
	for (int i = 0; i < 300; i++)
		keep(a, "i2", rec);
	announced = (uint64_t)recorder_flush(a, "i2", "deep_dive");
	assert_true(recorder_sending(a));
	ops_free(a);
	assert_int_equal((uint64_t)c.n - 1, announced);
	cap_close(&c.s);
	free(a);
}

/*
 * The kernel half's boundary: the BPF source (here a fake of
 * agent/sources/flight.c) hands launches down when the recorder pulls, the
 * recorder keeps those inside its window and formats them only when the
 * window is sent.
 */
static int fake_pulls;

static void fake_flight_pull(struct agent *a)
{
	struct flight_launch f = {};
	uint64_t now = now_ns();

	fake_pulls++;
	if (fake_pulls > 1)
		return; /* the rings hold nothing new */
	f.seq = 1;
	f.ev.hdr.ts_ns = now;
	assert_int_equal(recorder_kernel_launch(a, &f, "i1"), 0);
	f.seq = 2;
	f.ev.hdr.ts_ns = 1; /* long before the 10 s window (the clock has run longer) */
	assert_int_equal(recorder_kernel_launch(a, &f, "i1"), -ESTALE);
}

static void fake_flight_counts(struct agent *a, struct flight_counts *out)
{
	(void)a;
	*out = (struct flight_counts){
	    .per_cpu = 16, .cpus = 1, .written = 3, .overwritten = 1, .pulls = 1};
}

static long fake_flight_json(struct agent *a, const struct flight_launch *f, char *buf, size_t cap)
{
	(void)a;
	return snprintf(buf, cap, "{\"type\":\"cuda_launch\",\"seq\":%llu}",
			(unsigned long long)f->seq);
}

static void test_recorder_kernel_launches(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c, 4);
	json_t *st = json_object(), *k, *fr;

	(void)state;
	fake_pulls = 0;
	a->cap.flight_pull = fake_flight_pull;
	a->cap.flight_counts = fake_flight_counts;
	a->cap.flight_json = fake_flight_json;
	recorder_tick(a);
	assert_int_equal(fake_pulls, 1);
	assert_int_equal(c.n, 0); /* kept, not sent */
	/* a window is read after a fresh pull */
	assert_int_equal(recorder_flush(a, "i1", "anomaly"), 1);
	assert_int_equal(fake_pulls, 2);
	assert_int_equal(c.n, 2);
	fr = json_loads(c.recs[0], 0, NULL);
	assert_non_null(fr);
	assert_string_equal(json_string_value(json_object_get(fr, "type")), "flight_recorder");
	assert_int_equal(json_integer_value(json_object_get(fr, "records")), 1);
	json_decref(fr);
	assert_string_equal(c.recs[1], "{\"type\":\"cuda_launch\",\"seq\":1}");
	recorder_stats(a, st);
	k = json_object_get(json_object_get(st, "recorder"), "kernel_launches");
	assert_non_null(k);
	assert_int_equal(json_integer_value(json_object_get(k, "per_cpu")), 16);
	assert_int_equal(json_integer_value(json_object_get(k, "written")), 3);
	assert_int_equal(json_integer_value(json_object_get(k, "copied")), 1);
	assert_int_equal(json_integer_value(json_object_get(k, "overwritten")), 1);
	assert_int_equal(json_integer_value(json_object_get(k, "older_than_window")), 1);
	json_decref(st);
	agent_del(a, &c);
}

/* ----------------------------------------------------------- perfetto -- */

static void test_perfetto_tracks_and_flows(void **state)
{
	static const char *const recs[] = {
	    "{\"type\":\"cuda_launch\",\"instance\":\"i\",\"pid\":10,\"tid\":11,\"ts_ns\":1000,"
	    "\"api\":\"cudaGraphLaunch\"}",
	    "{\"type\":\"offcpu\",\"instance\":\"i\",\"pid\":10,\"tid\":11,\"ts_ns\":5000,"
	    "\"dur_ns\":9000,\"comm\":\"worker\",\"cause\":\"blocked\"}",
	    "{\"type\":\"cuda_code_load\",\"instance\":\"i\",\"pid\":10,\"tid\":11,\"ts_ns\":"
	    "14000,\"dur_ns\":3000,\"api\":\"cuModuleLoadData\",\"ret\":0}",
	    /* two kernels of one graph launch, overlapping on one stream */
	    "{\"type\":\"kernel\",\"instance\":\"i\",\"pid\":10,\"tid\":11,\"start_ns\":3000,"
	    "\"end_ns\":8000,\"device\":0,\"context\":1,\"stream\":7,\"correlation_id\":5,"
	    "\"matched\":true,\"launch_ts_ns\":1000,\"launch_api\":\"cudaGraphLaunch\","
	    "\"name\":\"k1\"}",
	    "{\"type\":\"kernel\",\"instance\":\"i\",\"pid\":10,\"tid\":11,\"start_ns\":6000,"
	    "\"end_ns\":9000,\"device\":0,\"context\":1,\"stream\":7,\"correlation_id\":5,"
	    "\"matched\":true,\"launch_ts_ns\":1000,\"launch_api\":\"cudaGraphLaunch\","
	    "\"name\":\"k2\"}",
	    "{\"type\":\"memcpy\",\"instance\":\"i\",\"pid\":null,\"tid\":null,\"start_ns\":9500,"
	    "\"end_ns\":9900,\"device\":1,\"context\":1,\"stream\":3,\"matched\":false,"
	    "\"copy_kind\":1,\"bytes\":64}",
	    "{\"type\":\"stats\",\"ts_ns\":1}",
	    "not json",
	};
	struct perfetto *p = perfetto_new();
	struct perfetto_stats st;
	char *buf = NULL;
	size_t len = 0, i;
	FILE *f = open_memstream(&buf, &len);
	json_t *doc, *ev;
	int s = 0, fl = 0, tn = 0, pn = 0, x = 0, overlap = 0, code_load = 0;

	(void)state;
	for (i = 0; i < sizeof(recs) / sizeof(recs[0]); i++)
		perfetto_add_json(p, recs[i], strlen(recs[i]));
	assert_int_equal(perfetto_write(p, f), 0);
	fclose(f);
	perfetto_get_stats(p, &st);
	assert_int_equal(st.flows, 2);
	assert_int_equal(st.ignored, 1);
	assert_int_equal(st.bad, 1);
	doc = json_loadb(buf, len, 0, NULL);
	assert_non_null(doc);
	json_array_foreach(json_object_get(doc, "traceEvents"), i, ev)
	{
		const char *ph = json_string_value(json_object_get(ev, "ph"));
		const char *name = json_string_value(json_object_get(ev, "name"));

		s += !strcmp(ph, "s");
		fl += !strcmp(ph, "f");
		x += !strcmp(ph, "X");
		code_load += !strcmp(ph, "X") && !strcmp(name, "cuModuleLoadData") &&
			     !strcmp(json_string_value(json_object_get(ev, "cat")), "code_load");
		if (!strcmp(ph, "M") && !strcmp(name, "thread_name")) {
			const char *tname =
			    json_string_value(json_object_get(json_object_get(ev, "args"), "name"));

			tn++;
			overlap += strstr(tname, "(overlap 1)") != NULL;
		}
		pn += !strcmp(ph, "M") && !strcmp(name, "process_name");
	}
	/* one launch slice (the graph launch, once), off-CPU, a code load, three GPU slices */
	assert_int_equal(x, 6);
	assert_int_equal(code_load, 1);
	assert_int_equal(s, 2);
	assert_int_equal(fl, 2);
	/* worker thread; stream 7, its overlap lane; stream 3 of GPU 1 */
	assert_int_equal(tn, 4);
	assert_int_equal(overlap, 1);
	/* the process, GPU 0, GPU 1 */
	assert_int_equal(pn, 3);
	json_decref(doc);
	free(buf);
	perfetto_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_ok),
	    cmocka_unit_test(test_parse_bad),
	    cmocka_unit_test(test_prom_hist),
	    cmocka_unit_test(test_recent_anomalies),
	    cmocka_unit_test(test_qhist),
	    cmocka_unit_test(test_recorder_anomaly_sends_window),
	    cmocka_unit_test(test_recorder_budget),
	    cmocka_unit_test(test_recorder_window_in_slices),
	    cmocka_unit_test(test_recorder_second_trigger_counts),
	    cmocka_unit_test(test_recorder_window_evicted_while_sent),
	    cmocka_unit_test(test_recorder_kernel_launches),
	    cmocka_unit_test(test_perfetto_tracks_and_flows),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
