// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_utf8.c - every JSON line the agent writes is well-formed UTF-8
 * (issue 18, finding 9): kernel names from a shim or a trace are bytes. The
 * hand writer (correlator/src/jsonw.c) replaces a byte that starts no
 * well-formed sequence with \ufffd; names entering the correlator and
 * strings bound for jansson (rec_string) are cleaned the same way; every
 * replacement is counted (jw_utf8_replaced, stats "utf8_replaced").
 * Checked by parsing the output with jansson, which refuses invalid UTF-8.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "correlator.h"
#include "jsonw.h"
#include "state.h"

/* one record with a "name" written by the hand writer, parsed back */
static json_t *write_name(const char *name, size_t n)
{
	char buf[1024];
	struct jsonw w;
	json_error_t err;
	long len;
	json_t *o;

	jw_init(&w, buf, sizeof(buf));
	jw_strn(&w, "name", name, n);
	len = jw_end(&w);
	assert_true(len > 0);
	o = json_loadb(buf, (size_t)len, 0, &err);
	if (!o)
		fail_msg("not valid JSON (%s): %.*s", err.text, (int)len, buf);
	return o;
}

static void expect(const char *in, const char *want, uint64_t replaced)
{
	uint64_t before = jw_utf8_replaced();
	json_t *o = write_name(in, strlen(in));

	assert_string_equal(json_string_value(json_object_get(o, "name")), want);
	assert_int_equal(jw_utf8_replaced() - before, replaced);
	json_decref(o);
}

static void test_writer(void **state)
{
	(void)state;
	/* the finding's bytes */
	expect("\xff\xfe\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 3);
	expect("k\xff"
	       "ernel",
	       "k\xef\xbf\xbd"
	       "ernel",
	       1);
	/* well-formed: untouched, not counted (2, 3 and 4 byte sequences) */
	expect("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80",
	       "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80", 0);
	expect("a\"b\\c\n", "a\"b\\c\n", 0);
	/* overlong, surrogate, above U+10FFFF, a sequence cut at the end */
	expect("\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd", 2);
	expect("\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 3);
	expect("\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 4);
	expect("ab\xe6\x97", "ab\xef\xbf\xbd\xef\xbf\xbd", 2);
}

/*
 * Keys: plain ones are written in one copy, others escaped as values are;
 * a buffer cut anywhere gives an overflow (-1), never a partial record.
 */
static void test_keys(void **state)
{
	char buf[128], small[40];
	const char *want = "{\"a\":1,\"step_ns\":2,\"q\\\"k\\\\\":3,\"\\u0001\":4}";
	struct jsonw w;
	long len;

	(void)state;
	jw_init(&w, buf, sizeof(buf));
	jw_uint(&w, "a", 1);
	jw_uint(&w, "step_ns", 2);
	jw_uint(&w, "q\"k\\", 3);
	jw_uint(&w, "\x01", 4);
	len = jw_end(&w);
	assert_int_equal(len, (long)strlen(want));
	assert_memory_equal(buf, want, (size_t)len);
	for (size_t cap = 1; cap < strlen(want) + 1; cap++) {
		jw_init(&w, small, cap < sizeof(small) ? cap : sizeof(small));
		jw_uint(&w, "a", 1);
		jw_uint(&w, "step_ns", 2);
		jw_uint(&w, "q\"k\\", 3);
		jw_uint(&w, "\x01", 4);
		assert_int_equal(jw_end(&w), -1);
	}
}

/* nesting (jw_open/jw_next/jw_close): arrays of objects and empty ones, then a key after */
static void test_nested(void **state)
{
	char buf[256];
	const char *want = "{\"a\":1,\"s\":[{\"f\":\"x\",\"l\":2},{\"f\":\"?\"}],\"e\":[],"
			   "\"o\":{},\"b\":true}";
	struct jsonw w;
	long len;

	(void)state;
	jw_init(&w, buf, sizeof(buf));
	jw_uint(&w, "a", 1);
	jw_key(&w, "s");
	jw_open(&w, '[');
	jw_next(&w);
	jw_open(&w, '{');
	jw_str(&w, "f", "x");
	jw_int(&w, "l", 2);
	jw_close(&w, '}');
	jw_next(&w);
	jw_open(&w, '{');
	jw_str(&w, "f", "?");
	jw_close(&w, '}');
	jw_close(&w, ']');
	jw_key(&w, "e");
	jw_open(&w, '[');
	jw_close(&w, ']');
	jw_key(&w, "o");
	jw_open(&w, '{');
	jw_close(&w, '}');
	jw_bool(&w, "b", 1);
	len = jw_end(&w);
	assert_int_equal(len, (long)strlen(want));
	assert_memory_equal(buf, want, (size_t)len);
}

static void test_clean(void **state)
{
	char buf[8];
	const char *s = "valid";
	uint64_t before = jw_utf8_replaced();

	(void)state;
	assert_ptr_equal(jw_utf8_clean(s, buf, sizeof(buf)), s); /* no copy when valid */
	assert_string_equal(jw_utf8_clean("a\xff"
					  "b",
					  buf, sizeof(buf)),
			    "a\xef\xbf\xbd"
			    "b");
	/* cut to the buffer at a character boundary: 7 bytes hold two U+FFFD, not a third half */
	assert_string_equal(jw_utf8_clean("\xff\xff\xff\xff", buf, sizeof(buf)),
			    "\xef\xbf\xbd\xef\xbf\xbd");
	assert_true(jw_utf8_replaced() - before >= 3);
}

/*
 * The scan (jw_utf8_valid) goes 8 bytes at a time while they are ASCII: a
 * non-ASCII byte at every offset and in every length up to 40 (each side of
 * each word edge) is found, whether it starts a well-formed sequence or none.
 */
static void test_clean_every_offset(void **state)
{
	static const struct {
		const char *seq, *want; /* want NULL: well-formed, the name comes back as it is */
		bool last;		/* a sequence cut short: only at the end */
	} cases[] = {
	    {"\xff", "\xef\xbf\xbd", false},
	    {"\xc3\xa9", NULL, false},
	    {"\xf0\x9f\x98\x80", NULL, false},
	    {"\xe6\x97", "\xef\xbf\xbd\xef\xbf\xbd", true},
	};
	char in[64], want[64], buf[64];

	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		size_t sl = strlen(cases[c].seq), wl = cases[c].want ? strlen(cases[c].want) : 0;

		for (size_t len = 0; len <= 40; len++) {
			for (size_t at = 0; at <= len; at++) {
				size_t tail = cases[c].last ? 0 : len - at;
				const char *got;

				memset(in, 'k', sizeof(in));
				memcpy(in + at, cases[c].seq, sl);
				in[at + sl + tail] = '\0';
				got = jw_utf8_clean(in, buf, sizeof(buf));
				/* the valid prefix (--instance's check): all, or up to the bad byte
				 */
				assert_int_equal(jw_utf8_valid(in, strlen(in)),
						 cases[c].want ? at : strlen(in));
				if (!cases[c].want) {
					assert_ptr_equal(got, in);
					continue;
				}
				memset(want, 'k', sizeof(want));
				memcpy(want + at, cases[c].want, wl);
				want[at + wl + tail] = '\0';
				assert_string_equal(got, want);
			}
		}
	}
	/* ASCII of every length comes back as it is, uncopied */
	for (size_t len = 0; len <= 40; len++) {
		memset(in, 'k', len);
		in[len] = '\0';
		assert_ptr_equal(jw_utf8_clean(in, buf, sizeof(buf)), in);
	}
}

/* a kernel name through the correlator and the deep-mode record writer */
struct got {
	char json[4096];
	int n;
};

static void on_emit(void *ctx, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct got *got = ctx;
	struct corr_json_common cm = {.host = "h", .instance = "i"};

	got->n = corr_gpu_to_json(got->json, sizeof(got->json), &cm, g, l);
}

static void test_correlator_record(void **state)
{
	struct got got = {0};
	struct corr_opts co = {.sz = sizeof(co), .emit = on_emit, .emit_ctx = &got};
	struct corr_gpu g = {.kind = CORR_KIND_KERNEL,
			     .pid = 4242,
			     .corr_id = 7,
			     .start_ns = 1000,
			     .end_ns = 2000,
			     .name = "\xff\xfe\x80kern"};
	json_error_t err;
	struct corr *c;
	json_t *o;

	(void)state;
	c = corr__new(&co);
	assert_non_null(c);
	assert_int_equal(corr__add_gpu(c, &g), 0);
	corr__flush(c); /* no launch ever: unmatched */
	assert_true(got.n > 0);
	o = json_loadb(got.json, (size_t)got.n, 0, &err);
	if (!o)
		fail_msg("kernel record is not valid JSON (%s): %s", err.text, got.json);
	assert_string_equal(json_string_value(json_object_get(o, "name")),
			    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdkern");
	/* unmatched, yet the sender is known (finding 8) */
	assert_int_equal(json_integer_value(json_object_get(o, "pid")), 4242);
	assert_true(json_is_null(json_object_get(o, "tid")));
	json_decref(o);
	corr__free(c);
}

/* strings for jansson: kept (cleaned) rather than lost */
static void test_rec_string(void **state)
{
	json_t *s;

	(void)state;
	assert_null(json_string("inst\xff")); /* why: jansson drops the whole field */
	s = rec_string("inst\xff");
	assert_non_null(s);
	assert_string_equal(json_string_value(s), "inst\xef\xbf\xbd");
	json_decref(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_writer),
	    cmocka_unit_test(test_keys),
	    cmocka_unit_test(test_nested),
	    cmocka_unit_test(test_clean),
	    cmocka_unit_test(test_clean_every_offset),
	    cmocka_unit_test(test_correlator_record),
	    cmocka_unit_test(test_rec_string),
	};

	return cmocka_run_group_tests_name("utf8", tests, NULL, NULL);
}
