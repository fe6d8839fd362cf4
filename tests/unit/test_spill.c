// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_spill.c - the Kafka sink's on-disk buffer (agent/sinks/spill.c): records
 * come back in order and intact, survive a close and a process killed
 * without closing, a torn or corrupt tail is skipped and counted, the size
 * bound holds, shedding takes events before summaries before anomalies,
 * prepended records come first, and only one agent may hold a directory.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "spill.h"

static char dir[256];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/infertrace-spill-test.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	/* a subdirectory: spill_open creates it */
	strcat(dir, "/spill");
	return 0;
}

static int teardown(void **state)
{
	char cmd[300];

	(void)state;
	*strrchr(dir, '/') = '\0';
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static struct spill *open_spill(uint64_t max, uint64_t seg)
{
	struct spill_opts o = {.sz = sizeof(o), .dir = dir, .max_bytes = max, .segment_bytes = seg};
	struct spill *sp = spill_open(&o);

	assert_non_null(sp);
	return sp;
}

/* a record numbered i: {"i":I,"pad":"xxx..."} of about size bytes */
static size_t make_val(char *buf, size_t cap, int i, size_t size)
{
	int n = snprintf(buf, cap, "{\"i\":%d,\"pad\":\"", i);

	while ((size_t)n + 2 < size && (size_t)n + 3 < cap) {
		buf[n] = 'a' + (i + n) % 26;
		n++;
	}
	buf[n++] = '"';
	buf[n++] = '}';
	buf[n] = '\0';
	return n;
}

static int val_index(const struct spill_rec *r)
{
	char tmp[32];
	size_t l = r->len < sizeof(tmp) - 1 ? r->len : sizeof(tmp) - 1;

	memcpy(tmp, r->val, l);
	tmp[l] = '\0';
	return atoi(tmp + 5); /* after {"i": */
}

static void append_n(struct spill *sp, int from, int n, enum rec_class cls, size_t size)
{
	char key[32], val[4096];

	for (int i = from; i < from + n; i++) {
		size_t len = make_val(val, sizeof(val), i, size);

		snprintf(key, sizeof(key), "inst-%d", i % 3);
		assert_int_equal(spill_append(sp, cls, key, strlen(key), val, len), 0);
	}
}

/* read everything unread: indexes into out, tickets done when `done` */
static int drain(struct spill *sp, int *out, int max, bool done)
{
	struct spill_rec r;
	int n = 0;

	while (n < max && !spill_peek(sp, &r)) {
		uint64_t t;

		out[n++] = val_index(&r);
		t = spill_take(sp);
		assert_true(t > 0);
		if (done)
			spill_done(sp, t);
	}
	return n;
}

static int count_files(const char *sfx)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (strlen(de->d_name) > strlen(sfx) &&
		    !strcmp(de->d_name + strlen(de->d_name) - strlen(sfx), sfx))
			n++;
	closedir(d);
	return n;
}

static void test_roundtrip(void **state)
{
	struct spill *sp = open_spill(8 << 20, 64 * 1024);
	struct spill_stats st;
	struct spill_rec r;
	char val[4096];
	int out[1000];
	size_t len;

	(void)state;
	assert_int_equal(spill_peek(sp, &r), -ENOENT);
	append_n(sp, 0, 1000, REC_SUMMARY, 300); /* ~300 KiB: several segments */
	assert_int_equal(spill_unread(sp), 1000);
	spill_get_stats(sp, &st);
	assert_true(st.segments >= 4);
	assert_int_equal(st.records, 1000);
	/* the first record exactly as written */
	assert_int_equal(spill_peek(sp, &r), 0);
	len = make_val(val, sizeof(val), 0, 300);
	assert_int_equal(r.len, len);
	assert_memory_equal(r.val, val, len);
	assert_int_equal(r.key_len, 6);
	assert_memory_equal(r.key, "inst-0", 6);
	assert_int_equal(r.cls, REC_SUMMARY);
	assert_int_equal(drain(sp, out, 1000, true), 1000);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(out[i], i);
	assert_int_equal(spill_unread(sp), 0);
	/* all confirmed: every segment file is gone */
	spill_get_stats(sp, &st);
	assert_int_equal(st.records, 0);
	assert_int_equal(st.segments, 0);
	assert_int_equal(st.bytes, 0);
	assert_int_equal(count_files(".seg"), 0);
	/* appends after a full drain start a new tail */
	append_n(sp, 1000, 5, REC_EVENT, 100);
	assert_int_equal(drain(sp, out, 10, true), 5);
	assert_int_equal(out[0], 1000);
	spill_close(sp);
}

static void test_restart_resumes(void **state)
{
	struct spill *sp = open_spill(8 << 20, 16 * 1024);
	struct spill_stats st;
	uint64_t t[10];
	struct spill_rec r;
	int out[600], n;

	(void)state;
	append_n(sp, 0, 500, REC_ANOMALY, 200);
	/* 10 handed out: 1-4 and 6 confirmed, so 0 and 5.. are not */
	for (int i = 0; i < 10; i++) {
		assert_int_equal(spill_peek(sp, &r), 0);
		t[i] = spill_take(sp);
	}
	for (int i = 1; i <= 4; i++)
		spill_done(sp, t[i]);
	spill_done(sp, t[6]);
	spill_close(sp);

	/* nothing confirmed as a prefix: all 500 come back, in order */
	sp = open_spill(8 << 20, 16 * 1024);
	spill_get_stats(sp, &st);
	assert_int_equal(st.recovered, 500);
	n = drain(sp, out, 600, false);
	assert_int_equal(n, 500);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[499], 499);
	spill_close(sp);

	/* a prefix of 120 confirmed and committed, then the process dies */
	if (fork() == 0) {
		sp = open_spill(8 << 20, 16 * 1024);
		for (int i = 0; i < 120; i++) {
			assert_int_equal(spill_peek(sp, &r), 0);
			spill_done(sp, spill_take(sp));
		}
		append_n(sp, 500, 7, REC_SUMMARY, 100);
		spill_flush(sp);
		spill_commit(sp);
		_exit(0); /* no spill_close: as kill -9 after the commit */
	}
	wait(NULL);
	sp = open_spill(8 << 20, 16 * 1024);
	spill_get_stats(sp, &st);
	assert_int_equal(st.recovered, 500 - 120 + 7);
	n = drain(sp, out, 600, true);
	assert_int_equal(n, 387);
	for (int i = 0; i < n; i++)
		assert_int_equal(out[i], 120 + i);
	spill_close(sp);
	assert_int_equal(count_files(".seg"), 0);
}

static char *only_segment(char *path, size_t sz)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	assert_non_null(d);
	path[0] = '\0';
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".seg"))
			snprintf(path, sz, "%s/%s", dir, de->d_name);
	closedir(d);
	assert_true(path[0]);
	return path;
}

static void test_torn_tail(void **state)
{
	struct spill *sp = open_spill(8 << 20, 1 << 20);
	struct spill_stats st;
	struct stat stb;
	char path[512];
	int out[100], n, fd;

	(void)state;
	append_n(sp, 0, 50, REC_SUMMARY, 100);
	spill_close(sp);
	only_segment(path, sizeof(path));
	/* a crash in the middle of the last record */
	assert_int_equal(stat(path, &stb), 0);
	assert_int_equal(truncate(path, stb.st_size - 37), 0);
	sp = open_spill(8 << 20, 1 << 20);
	spill_get_stats(sp, &st);
	assert_int_equal(st.torn, 1);
	assert_int_equal(st.recovered, 49);
	n = drain(sp, out, 100, false);
	assert_int_equal(n, 49);
	for (int i = 0; i < n; i++)
		assert_int_equal(out[i], i);
	spill_close(sp);

	/* one flipped byte in record 20's value: it and what follows are skipped */
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	/* header 32 + 20 records of 16 + 6 (key) + 100 bytes, into the value */
	assert_int_equal(pwrite(fd, "Z", 1, 32 + 20 * 122 + 16 + 6 + 50), 1);
	close(fd);
	sp = open_spill(8 << 20, 1 << 20);
	spill_get_stats(sp, &st);
	assert_int_equal(st.torn, 1);
	assert_int_equal(st.recovered, 20);
	n = drain(sp, out, 100, true);
	assert_int_equal(n, 20);
	assert_int_equal(out[19], 19);
	spill_close(sp);
	/* a file that is nothing but garbage */
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_int_equal(write(fd, "garbage", 7), 7);
	close(fd);
	sp = open_spill(8 << 20, 1 << 20);
	spill_get_stats(sp, &st);
	assert_int_equal(st.torn, 1);
	assert_int_equal(st.recovered, 0);
	assert_int_equal(count_files(".seg"), 0);
	spill_close(sp);
}

static void test_size_bound(void **state)
{
	const uint64_t max = 64 * 1024;
	struct spill *sp = open_spill(max, 8 * 1024);
	struct spill_stats st;
	char val[4096];
	int ok = 0, refused = 0, out[2000], n;

	(void)state;
	for (int i = 0; i < 2000; i++) {
		size_t len = make_val(val, sizeof(val), i, 200);
		int err = spill_append(sp, REC_EVENT, "k", 1, val, len);

		if (!err)
			ok++;
		else if (err == -ENOSPC)
			refused++;
		else
			fail_msg("append: %d", err);
		spill_get_stats(sp, &st);
		assert_true(st.bytes <= max);
	}
	spill_get_stats(sp, &st);
	assert_int_equal(ok + refused, 2000);
	assert_true(refused > 0);
	assert_int_equal(st.refused[REC_EVENT], refused);
	assert_int_equal(st.evicted[REC_EVENT], 0); /* events never evict events */
	/* the oldest are kept: what came first goes out first */
	n = drain(sp, out, 2000, true);
	assert_int_equal(n, ok);
	for (int i = 0; i < n; i++)
		assert_int_equal(out[i], i);
	/* too large for the whole spill */
	{
		char *big = malloc(max);

		memset(big, 'x', max);
		assert_int_equal(spill_append(sp, REC_ANOMALY, "k", 1, big, max), -E2BIG);
		free(big);
	}
	spill_close(sp);
}

static void test_shedding_order(void **state)
{
	const uint64_t max = 64 * 1024;
	struct spill *sp = open_spill(max, 8 * 1024);
	struct spill_stats st;
	struct spill_rec r;
	char val[4096];
	int i, n, last[REC_CLASS_COUNT], out_cls[2000], k, ev_end;

	(void)state;
	/* full of events */
	for (i = 0; i < 1000; i++) {
		size_t len = make_val(val, sizeof(val), i, 200);

		if (spill_append(sp, REC_EVENT, "k", 1, val, len))
			break;
	}
	assert_true(i < 1000);
	ev_end = i;
	/* summaries and stats push events out; a further event is refused */
	for (; i < ev_end + 100; i++) {
		size_t len = make_val(val, sizeof(val), i, 200);

		assert_int_equal(
		    spill_append(sp, i % 2 ? REC_SUMMARY : REC_STATS, "k", 1, val, len), 0);
	}
	spill_get_stats(sp, &st);
	assert_true(st.evicted[REC_EVENT] > 0);
	assert_int_equal(st.evicted[REC_SUMMARY] + st.evicted[REC_STATS], 0);
	/* events fill what the evictions left over, then are refused, evicting nothing */
	for (k = 0; !spill_append(sp, REC_EVENT, "k", 1, val, make_val(val, sizeof(val), i, 200));
	     k++, i++)
		assert_true(k < 100);
	spill_get_stats(sp, &st);
	assert_int_equal(st.evicted[REC_SUMMARY] + st.evicted[REC_STATS], 0);
	assert_int_equal(st.refused[REC_EVENT], 2); /* the first fill, and now */
	i++;
	/* summaries until no event is left, then summaries are refused */
	for (;; i++) {
		size_t len = make_val(val, sizeof(val), i, 200);
		int err = spill_append(sp, REC_SUMMARY, "k", 1, val, len);

		if (err) {
			assert_int_equal(err, -ENOSPC);
			break;
		}
		assert_true(i < 5000);
	}
	spill_get_stats(sp, &st);
	assert_true(st.refused[REC_SUMMARY] == 1);
	/* anomalies push summaries and stats out, never the other way */
	for (k = 0; k < 50; k++, i++) {
		size_t len = make_val(val, sizeof(val), i, 200);

		assert_int_equal(spill_append(sp, REC_ANOMALY, "k", 1, val, len), 0);
	}
	spill_get_stats(sp, &st);
	assert_true(st.evicted[REC_SUMMARY] + st.evicted[REC_STATS] > 0);
	assert_int_equal(st.evicted[REC_ANOMALY], 0);
	assert_true(st.bytes <= max);
	/* what is left comes out in its original order, the 50 anomalies last */
	memset(last, -1, sizeof(last));
	n = 0;
	while (!spill_peek(sp, &r)) {
		int idx = val_index(&r);

		assert_true(idx > last[0] && idx > last[1] && idx > last[2] && idx > last[3]);
		last[r.cls] = idx;
		out_cls[n++] = r.cls;
		spill_done(sp, spill_take(sp));
	}
	for (k = n - 50; k < n; k++)
		assert_int_equal(out_cls[k], REC_ANOMALY);
	for (k = 0; k < n; k++)
		assert_int_not_equal(out_cls[k], REC_EVENT);
	spill_close(sp);
}

static void test_prepend(void **state)
{
	struct spill *sp = open_spill(8 << 20, 64 * 1024);
	struct spill_rec r;
	char val[256];
	uint64_t t0;
	int out[20], n;
	size_t len;

	(void)state;
	append_n(sp, 10, 3, REC_SUMMARY, 50); /* 10 11 12 */
	assert_int_equal(spill_peek(sp, &r), 0);
	t0 = spill_take(sp); /* 10 handed out, then given back */
	len = make_val(val, sizeof(val), 1, 50);
	assert_int_equal(spill_prepend(sp, REC_SUMMARY, "k", 1, val, len), 0);
	len = make_val(val, sizeof(val), 10, 50);
	assert_int_equal(spill_prepend(sp, REC_SUMMARY, "k", 1, val, len), 0);
	spill_done(sp, t0);
	/* not readable before the end of the prepend */
	assert_int_equal(spill_peek(sp, &r), 0);
	assert_int_equal(val_index(&r), 11);
	append_n(sp, 13, 1, REC_SUMMARY, 50);
	assert_int_equal(spill_prepend_end(sp), 0);
	n = drain(sp, out, 20, false);
	assert_int_equal(n, 5);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 10);
	assert_int_equal(out[2], 11);
	assert_int_equal(out[3], 12);
	assert_int_equal(out[4], 13);
	spill_close(sp);
	/* the same order after a restart */
	sp = open_spill(8 << 20, 64 * 1024);
	n = drain(sp, out, 20, true);
	assert_int_equal(n, 5);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[2], 11);
	spill_close(sp);
}

static void test_exclusive(void **state)
{
	struct spill *sp = open_spill(1 << 20, 0);
	struct spill_opts o = {.sz = sizeof(o), .dir = dir, .max_bytes = 1 << 20};

	(void)state;
	assert_null(spill_open(&o));
	assert_int_equal(errno, EBUSY);
	spill_close(sp);
	sp = spill_open(&o);
	assert_non_null(sp);
	spill_close(sp);
	o.max_bytes = 1;
	assert_null(spill_open(&o));
	assert_int_equal(errno, EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_restart_resumes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_torn_tail, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_size_bound, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shedding_order, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_prepend, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_exclusive, setup, teardown),
	};

	agent_log_set_level(LOG_ERROR - 1); /* the warnings are expected here */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
