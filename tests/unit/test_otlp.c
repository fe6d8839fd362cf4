// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_otlp.c - the OTLP sink's loop side (agent/sinks/sink_otlp.c) with no
 * collector: records it cannot read are refused and counted, the classes
 * it does not export are passed over, a full request queue drops and
 * counts instead of waiting, and the exit flush is bounded. The requests
 * themselves are checked against the protocol in tests/integration/otlp.sh.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "sink_otlp.h"

/* nothing listens on port 9 (discard) of loopback in the test machines */
#define NOWHERE "http://127.0.0.1:9"

static json_t *stats_of(struct sink *s)
{
	json_t *r = json_object();

	s->stats(s, r);
	return r;
}

static json_int_t counter(struct sink *s, const char *k)
{
	json_t *r = stats_of(s);
	json_int_t v = json_integer_value(json_object_get(json_object_get(r, "otlp"), k));

	json_decref(r);
	return v;
}

static int put(struct sink *s, enum rec_class c, const char *json)
{
	return s->write(s, c, NULL, json, strlen(json));
}

static void test_bad_urls(void **state)
{
	(void)state;
	errno = 0;
	assert_null(sink_otlp_open("collector:4318", 4));
	assert_int_equal(errno, EINVAL);
	assert_null(sink_otlp_open("ftp://collector", 4));
}

static void test_bad_records(void **state)
{
	struct sink *s = sink_otlp_open(NOWHERE, 4);

	(void)state;
	assert_non_null(s);
	assert_int_equal(put(s, REC_SUMMARY, "{not json"), -EINVAL);
	assert_int_equal(put(s, REC_ANOMALY, "{\"type\":\"anomaly\"}"), -EINVAL); /* no ts_ns */
	assert_int_equal(put(s, REC_SUMMARY, "[1,2]"), -EINVAL);
	assert_int_equal(counter(s, "bad_records_total"), 3);
	assert_int_equal(s->errors, 3);
	assert_int_equal(s->written, 0);
	/* events and stats are not exported: accepted, not counted as written */
	assert_int_equal(put(s, REC_EVENT, "{\"type\":\"cuda_launch\",\"ts_ns\":1}"), 0);
	assert_int_equal(put(s, REC_STATS, "{\"type\":\"stats\",\"ts_ns\":1}"), 0);
	assert_int_equal(s->written, 0);
	s->close(s);
}

static void test_queue_full_drops(void **state)
{
	const char *step = "{\"schema\":1,\"type\":\"step\",\"host\":\"h\",\"instance\":\"i\","
			   "\"pid\":7,\"tid\":7,\"ts_ns\":1000,\"seq\":0,\"dur_ns\":5,"
			   "\"phase\":\"decode\",\"rank\":null,\"top_kernels\":[]}";
	struct sink *s = sink_otlp_open(NOWHERE, 1);
	json_int_t sent, dropped, queued;

	(void)state;
	assert_non_null(s);
	/* ten requests of one record each against a queue of one */
	for (int i = 0; i < 10; i++) {
		assert_int_equal(put(s, REC_SUMMARY, step), 0);
		assert_int_equal(s->flush(s, 0), 0);
	}
	assert_int_equal(s->written, 10);
	/* the sender is retrying the first one: the others found the queue full */
	queued = counter(s, "queue_requests");
	assert_true(counter(s, "queue_full_total") >= 8);
	assert_int_equal(counter(s, "dropped_records_total"), counter(s, "queue_full_total"));
	/* a bounded exit: the flush gives up, close drops and counts the rest */
	assert_int_equal(s->flush(s, 200), -ETIMEDOUT);
	sent = counter(s, "sent_records_total");
	dropped = counter(s, "dropped_records_total");
	assert_int_equal(sent, 0);
	assert_true(dropped + queued >= 9);
	s->close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bad_urls),
	    cmocka_unit_test(test_bad_records),
	    cmocka_unit_test(test_queue_full_drops),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
