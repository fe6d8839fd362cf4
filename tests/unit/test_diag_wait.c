// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_diag_wait.c - agent/pipeline/diag.c: a collective's cross-rank wait
 * (diag_on_wait) becomes the first suspect of the straggler anomaly of the
 * step it fell in, not a longer one outside that step; the anomaly record
 * as written. And /metrics' step series per instance: "_other" past
 * --metrics-instances, leaving after --metrics-instance-idle, their slots
 * reused.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "state.h"
#include "pipeline.h"
#include "collective.h"
#include "diagnose.h"

/* the records written, kept whole */
struct rec_sink {
	struct sink s;
	char rec[16][8192];
	int n;
};

static int rs_write(struct sink *s, enum rec_class cls, const char *key, const char *json,
		    size_t len)
{
	struct rec_sink *m = (struct rec_sink *)s;

	(void)cls, (void)key;
	if (m->n < 16)
		snprintf(m->rec[m->n++], sizeof(m->rec[0]), "%.*s", (int)len, json);
	return 0;
}

static int rs_flush(struct sink *s, int t)
{
	(void)s, (void)t;
	return 0;
}

static void rs_close(struct sink *s)
{
	(void)s;
}

#define MS 1000000ULL

static struct diag_step step(int32_t rank, uint64_t start, uint64_t dur, uint64_t idle)
{
	struct diag_step s;

	diag_step_init(&s);
	s.instance = "tp";
	s.rank = rank;
	s.pid = 100 + (uint32_t)rank;
	s.tid = s.pid;
	s.start_ns = start;
	s.dur_ns = dur;
	s.phase = DIAG_PHASE_DECODE;
	s.source = "marker";
	s.idle_ns = (int64_t)idle;
	return s;
}

static void test_straggler_evidence(void **state)
{
	struct rec_sink *m = calloc(1, sizeof(*m));
	struct agent *a = calloc(1, sizeof(*a));
	struct corr_wait_rank r[2] = {
	    {.rank = 0, .pid = 100, .tid = 100, .arrival_ns = 210 * MS, .from_kernel = true},
	    {.rank = 1, .pid = 101, .tid = 101, .arrival_ns = 360 * MS, .from_kernel = true},
	};
	struct corr_wait w = {
	    .comm_hash = 0x9f3a12c4deadbeefULL,
	    .seq = 7,
	    .op = CORR_COLL_ALLREDUCE,
	    .nranks = 2,
	    .end = CORR_WAIT_COMPLETE,
	    .n_expected = 2,
	    .n_arrived = 2,
	    .ranks = r,
	    .last_rank = 1,
	    .last_arrival_ns = 360 * MS,
	    .late_ns = 150 * MS,
	    .wait_max_ns = 150 * MS,
	    .wait_total_ns = 150 * MS,
	};
	struct corr_wait later = w;
	struct corr_wait_rank re[2] = {r[0], r[1]};
	struct diag *d = NULL;
	struct diag_step s;
	json_t *o = NULL, *sus;

	(void)state;
	assert_non_null(m);
	assert_non_null(a);
	snprintf(a->host, sizeof(a->host), "testhost");
	m->s.write = rs_write;
	m->s.flush = rs_flush;
	m->s.close = rs_close;
	a->sinks[0] = &m->s;
	a->n_sinks = 1;
	a->opts.mode = MODE_DEEP;
	a->opts.metrics = "127.0.0.1:0"; /* and /metrics' counts per instance */
	a->opts.metrics_instances = 8;
	assert_int_equal(diag_new(a, &d), 0);
	assert_non_null(d);
	/* a longer wait after the steps (not theirs), and one in rank 1's slow second step */
	re[0].arrival_ns = 500 * MS;
	re[1].arrival_ns = 800 * MS;
	later.ranks = re;
	later.seq = 8;
	later.last_arrival_ns = 800 * MS;
	later.late_ns = 300 * MS;
	diag_on_wait(d, &later);
	diag_on_wait(d, &w);
	/* round 1 alike; round 2: rank 1 150 ms longer, its GPU idle */
	s = step(0, 0, 100 * MS, 0);
	diag_add_step(d, &s);
	s = step(1, 0, 100 * MS, 0);
	diag_add_step(d, &s);
	s = step(0, 200 * MS, 100 * MS, 0);
	diag_add_step(d, &s);
	s = step(1, 200 * MS, 250 * MS, 150 * MS);
	diag_add_step(d, &s);
	assert_int_equal(diag_finish(d), 0);
	assert_int_equal(d->anomalies, 1);
	{ /* /metrics: tp's series counts it, one straggler that opens an episode */
		uint64_t ep = 0;
		const char *inst = NULL;
		const uint64_t *k = diag_series_anomalies(d, 0, &ep, &inst);

		assert_non_null(k);
		assert_string_equal(inst, "tp");
		for (int c = 0; c < DIAG_KIND_COUNT; c++)
			assert_int_equal(k[c], c == DIAG_KIND_STRAGGLER);
		assert_int_equal(ep, 1);
		assert_null(diag_series_anomalies(d, 1, &ep, &inst));
	}
	for (int i = 0; i < m->n && !o; i++) {
		o = json_loads(m->rec[i], 0, NULL);
		if (o && strcmp(json_string_value(json_object_get(o, "type")), "anomaly")) {
			json_decref(o);
			o = NULL;
		}
	}
	assert_non_null(o);
	assert_string_equal(json_string_value(json_object_get(o, "kind")), "straggler");
	assert_int_equal(json_integer_value(json_object_get(o, "rank")), 1);
	sus = json_object_get(o, "suspects");
	assert_true(json_array_size(sus) >= 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(sus, 0), "what")),
			    "collective");
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(sus, 0), "evidence")),
	    "rank 1 arrived 150.00 ms late at allreduce #7 (comm 9f3a12c4…); rank 0 "
	    "spent 150.00 ms waiting");
	assert_true(json_real_value(json_object_get(json_array_get(sus, 0), "value")) == 150e6);
	/* the detector's own suspect follows */
	assert_string_equal(json_string_value(json_object_get(json_array_get(sus, 1), "what")),
			    "rank");
	json_decref(o);
	diag_free(d);
	free(a);
	free(m);
}

/* the step series' instance labels in order, and their decode counts: "a:1 _other:2" */
static void series_are(const struct diag *d, const char *want)
{
	char got[256] = "";
	const struct prom_hist *h;
	const char *inst;
	size_t k = 0;

	for (uint32_t i = 0; (h = diag_step_hist(d, i, DIAG_PHASE_DECODE, &inst)); i++) {
		uint64_t n = 0;

		for (unsigned int b = 0; b <= h->nle; b++)
			n += h->n[b];
		k += (size_t)snprintf(got + k, sizeof(got) - k, "%s%s:%llu", k ? " " : "", inst,
				      (unsigned long long)n);
	}
	assert_string_equal(got, want);
}

static void series_step(struct diag *d, const char *inst)
{
	struct diag_step s = step(0, 0, 20 * MS, 0);

	s.instance = inst;
	diag_add_step(d, &s);
}

static void test_step_series_idle(void **state)
{
	struct agent *a = calloc(1, sizeof(*a));
	struct diag *d = NULL;
	uint64_t t0;
	json_t *r;

	(void)state;
	assert_non_null(a);
	a->opts.metrics = "127.0.0.1:0";
	a->opts.metrics_instances = 2;
	a->opts.metrics_instance_idle = 10;
	assert_int_equal(diag_new(a, &d), 0);
	t0 = d->series_now;
	/* two of their own, the rest summed */
	series_step(d, "a");
	series_step(d, "b");
	series_step(d, "c");
	series_step(d, "d");
	series_are(d, "a:1 b:1 _other:2");
	diag_advance(d, t0 + 5000 * MS);
	series_step(d, "a");
	diag_advance(d, t0 + 10000 * MS); /* 10 s: not yet */
	series_are(d, "a:2 b:1 _other:2");
	/* b's and _other's last steps 11 s ago: gone; their slots for the next ones */
	diag_advance(d, t0 + 11000 * MS);
	series_are(d, "a:2");
	series_step(d, "c"); /* summed in _other before, now a series of its own */
	series_step(d, "e");
	series_step(d, "d");
	series_are(d, "a:2 c:1 _other:2");
	/* a back after it left: from 0 again */
	diag_advance(d, t0 + 16000 * MS);
	series_are(d, "c:1 _other:2");
	series_step(d, "a");
	series_step(d, "c");
	series_are(d, "c:2 _other:2 a:1");
	r = json_object();
	diag_stats(d, r);
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(r, "diag"), "step_series_expired")),
	    3);
	json_decref(r);
	diag_free(d);

	/* 0: kept while the agent runs, the first 2 then "_other" for good */
	a->opts.metrics_instance_idle = 0;
	assert_int_equal(diag_new(a, &d), 0);
	t0 = d->series_now;
	series_step(d, "a");
	series_step(d, "b");
	diag_advance(d, t0 + 86400000 * MS);
	series_step(d, "c");
	series_are(d, "a:1 b:1 _other:1");
	diag_free(d);
	free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_straggler_evidence),
	    cmocka_unit_test(test_step_series_idle),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
