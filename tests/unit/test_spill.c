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
#include <signal.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "spill.h"

static char dir[256];

/* the file format (agent/sinks/spill.c): segment header, record header, a record */
#define SEG_HDR 256
#define REC_HDR 32
#define REC(key_len, len) (REC_HDR + (key_len) + (len))

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

/* drain as drain() does: exactly want records come back, the first of them index first */
static void drain_expect(struct spill *sp, int *out, int max, bool done, int want, int first)
{
	assert_int_equal(drain(sp, out, max, done), want);
	assert_int_equal(out[0], first);
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
	drain_expect(sp, out, 600, false, 500, 0);
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

	/*
	 * one flipped byte in record 20's value: that record is skipped, the
	 * reading resumes at record 21; the torn tail is still there
	 */
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "Z", 1, SEG_HDR + 20 * REC(6, 100) + REC_HDR + 6 + 50), 1);
	close(fd);
	sp = open_spill(8 << 20, 1 << 20);
	spill_get_stats(sp, &st);
	assert_int_equal(st.torn, 2);
	assert_int_equal(st.resynced, 1);
	assert_int_equal(st.torn_bytes, REC(6, 100) + REC(6, 100) - 37);
	assert_int_equal(st.recovered, 48);
	n = drain(sp, out, 100, true);
	assert_int_equal(n, 48);
	for (int i = 0; i < n; i++)
		assert_int_equal(out[i], i < 20 ? i : i + 1);
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
	int out[20];
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
	drain_expect(sp, out, 20, false, 5, 1);
	assert_int_equal(out[1], 10);
	assert_int_equal(out[2], 11);
	assert_int_equal(out[3], 12);
	assert_int_equal(out[4], 13);
	spill_close(sp);
	/* the same order after a restart */
	sp = open_spill(8 << 20, 64 * 1024);
	drain_expect(sp, out, 20, true, 5, 1);
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

/* 4 bytes flipped in the middle of a 128 KiB segment: one record lost, counted to the byte */
static void test_resync(void **state)
{
	struct spill *sp = open_spill(8 << 20, 1 << 20);
	struct spill_stats st;
	char path[512];
	int out[1200], n, fd;
	const int total = 128 * 1024 / REC(6, 100);

	(void)state;
	append_n(sp, 0, total, REC_EVENT, 100);
	spill_close(sp);
	only_segment(path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	/* into the header of record 400: magic and lengths no longer check out */
	assert_int_equal(pwrite(fd, "\xff\xfe\xfd\xfc", 4, SEG_HDR + 400 * REC(6, 100) + 4), 4);
	close(fd);
	sp = open_spill(8 << 20, 1 << 20);
	spill_get_stats(sp, &st);
	assert_int_equal(st.torn, 1);
	assert_int_equal(st.resynced, 1);
	assert_int_equal(st.torn_bytes, REC(6, 100));
	assert_int_equal(st.recovered, total - 1);
	n = drain(sp, out, 1200, true);
	assert_int_equal(n, total - 1);
	for (int i = 0; i < n; i++)
		assert_int_equal(out[i], i < 400 ? i : i + 1);
	spill_close(sp);
	assert_int_equal(count_files(".seg"), 0);
}

/* the same damage while the spill is open (read after the check at open) */
static void test_resync_at_read(void **state)
{
	struct spill *sp = open_spill(8 << 20, 1 << 20);
	struct spill_stats st;
	char path[512];
	int out[200], n, fd;

	(void)state;
	append_n(sp, 0, 100, REC_SUMMARY, 100);
	assert_int_equal(spill_flush(sp), 0);
	only_segment(path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	/* record 30's value, and records 60 to 99: nothing good after 60 */
	assert_int_equal(pwrite(fd, "\xff\xfe\xfd\xfc", 4, SEG_HDR + 30 * REC(6, 100) + 60), 4);
	for (int i = 60; i < 100; i++)
		assert_int_equal(pwrite(fd, "XXXX", 4, SEG_HDR + i * REC(6, 100) + 4), 4);
	close(fd);
	n = drain(sp, out, 200, true);
	assert_int_equal(n, 59);
	for (int i = 0; i < n; i++)
		assert_int_equal(out[i], i < 30 ? i : i + 1);
	spill_get_stats(sp, &st);
	assert_int_equal(st.torn, 2);
	assert_int_equal(st.resynced, 1);
	assert_int_equal(st.torn_bytes, 41 * REC(6, 100));
	assert_int_equal(st.unread, 0);
	assert_int_equal(st.records, 0);
	spill_close(sp);
	assert_int_equal(count_files(".seg"), 0);
}

/* the consumed offset of a segment header set to v, as a bad disk or hand would */
static void set_consumed(uint64_t v)
{
	char path[512];
	int fd;

	only_segment(path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &v, sizeof(v), 16), sizeof(v));
	close(fd);
}

#define UNTOUCHED UINT64_MAX

/* 100 records, 30 confirmed and committed, then the consumed offset set to v */
static struct spill *consumed_case(uint64_t v, struct spill_stats *st)
{
	struct spill *sp = open_spill(8 << 20, 1 << 20);
	struct spill_rec r;

	append_n(sp, 0, 100, REC_SUMMARY, 100);
	for (int i = 0; i < 30; i++) {
		assert_int_equal(spill_peek(sp, &r), 0);
		spill_done(sp, spill_take(sp));
	}
	spill_close(sp);
	if (v != UNTOUCHED)
		set_consumed(v);
	sp = open_spill(8 << 20, 1 << 20);
	spill_get_stats(sp, st);
	return sp;
}

/* too high, 0, or another record boundary: never a silent loss or a silent repeat */
static void test_consumed_damaged(void **state)
{
	const uint64_t cases[] = {1ull << 40, 0, SEG_HDR + 60 * REC(6, 100), 7};
	struct spill_stats st;
	int out[200];

	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct spill *sp = consumed_case(cases[c], &st);

		/* all 100 again, counted as suspect: none lost */
		assert_int_equal(st.recovered, 100);
		assert_int_equal(st.suspect, 100);
		drain_expect(sp, out, 200, true, 100, 0);
		assert_int_equal(out[99], 99);
		spill_close(sp);
		assert_int_equal(count_files(".seg"), 0);
	}
	/* untouched: the 70 not confirmed, nothing suspect */
	{
		struct spill *sp = consumed_case(UNTOUCHED, &st);

		assert_int_equal(st.recovered, 70);
		assert_int_equal(st.suspect, 0);
		drain_expect(sp, out, 200, true, 70, 30);
		spill_close(sp);
	}
}

static struct spill *open_owner(const char *owner, enum spill_foreign f)
{
	struct spill_opts o = {.sz = sizeof(o),
			       .dir = dir,
			       .max_bytes = 8 << 20,
			       .segment_bytes = 1 << 20,
			       .owner = owner,
			       .foreign = f};
	struct spill *sp = spill_open(&o);

	assert_non_null(sp);
	return sp;
}

/* records written for one cluster are not sent by a start for another one */
static void test_foreign(void **state)
{
	struct spill *sp;
	struct spill_stats st;
	int out[100];

	(void)state;
	sp = open_owner("bootstrap=a:1 prefix=x", SPILL_FOREIGN_KEEP);
	append_n(sp, 0, 10, REC_SUMMARY, 100);
	spill_close(sp);

	/* another cluster: left alone and counted, its own records apart */
	sp = open_owner("bootstrap=b:1 prefix=x", SPILL_FOREIGN_KEEP);
	spill_get_stats(sp, &st);
	assert_int_equal(st.recovered, 0);
	assert_int_equal(st.foreign_records, 10);
	assert_int_equal(st.foreign_segments, 1);
	assert_int_equal(spill_unread(sp), 0);
	append_n(sp, 100, 5, REC_SUMMARY, 100);
	spill_close(sp);
	assert_int_equal(count_files(".seg"), 2);

	/* the first owner again: its 10, and the other's 5 left alone */
	sp = open_owner("bootstrap=a:1 prefix=x", SPILL_FOREIGN_KEEP);
	spill_get_stats(sp, &st);
	assert_int_equal(st.recovered, 10);
	assert_int_equal(st.foreign_records, 5);
	drain_expect(sp, out, 100, false, 10, 0);
	spill_close(sp);

	/* adopt: both, oldest first */
	sp = open_owner("bootstrap=c:1 prefix=y", SPILL_FOREIGN_ADOPT);
	spill_get_stats(sp, &st);
	assert_int_equal(st.adopted, 15);
	drain_expect(sp, out, 100, false, 15, 0);
	assert_int_equal(out[10], 100);
	spill_close(sp);

	/* discard: gone, counted */
	sp = open_owner("bootstrap=d:1 prefix=z", SPILL_FOREIGN_DISCARD);
	spill_get_stats(sp, &st);
	assert_int_equal(st.discarded, 15);
	assert_int_equal(spill_unread(sp), 0);
	spill_close(sp);
	assert_int_equal(count_files(".seg"), 0);
}

/*
 * Foreign segments left alone at start, dealt with while the spill is open
 * (agentctl spill-foreign): adopted ones are read first, then what this run
 * wrote; discarded ones are gone; both counted, none foreign any more.
 */
static void test_foreign_later(void **state)
{
	struct spill_foreign_done done;
	struct spill_stats st;
	struct spill *sp;
	int out[100], n;

	(void)state;
	sp = open_owner("bootstrap=a:1 prefix=x", SPILL_FOREIGN_KEEP);
	append_n(sp, 0, 10, REC_SUMMARY, 100);
	spill_close(sp);

	sp = open_owner("bootstrap=b:1 prefix=x", SPILL_FOREIGN_KEEP);
	append_n(sp, 100, 4, REC_SUMMARY, 100);
	assert_int_equal(spill_foreign_apply(sp, SPILL_FOREIGN_KEEP, &done), -EINVAL);
	assert_int_equal(spill_foreign_apply(sp, SPILL_FOREIGN_ADOPT, &done), 0);
	assert_int_equal(done.segments, 1);
	assert_int_equal(done.adopted, 10);
	assert_int_equal(done.discarded, 0);
	spill_get_stats(sp, &st);
	assert_int_equal(st.foreign_records, 0);
	assert_int_equal(st.foreign_segments, 0);
	assert_int_equal(st.adopted, 10);
	assert_int_equal(spill_unread(sp), 14);
	n = drain(sp, out, 100, true);
	assert_int_equal(n, 14);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[9], 9);
	assert_int_equal(out[10], 100);
	/* nothing left to adopt: a second call finds nothing */
	assert_int_equal(spill_foreign_apply(sp, SPILL_FOREIGN_ADOPT, &done), 0);
	assert_int_equal(done.adopted, 0);
	spill_close(sp);

	/* another owner's records, discarded while open; ours stay */
	sp = open_owner("bootstrap=a:1 prefix=x", SPILL_FOREIGN_KEEP);
	append_n(sp, 200, 6, REC_STATS, 100);
	spill_close(sp);
	sp = open_owner("bootstrap=b:1 prefix=x", SPILL_FOREIGN_KEEP);
	append_n(sp, 300, 2, REC_STATS, 100);
	spill_get_stats(sp, &st);
	assert_int_equal(st.foreign_records, 6);
	assert_int_equal(spill_foreign_apply(sp, SPILL_FOREIGN_DISCARD, &done), 0);
	assert_int_equal(done.discarded, 6);
	spill_get_stats(sp, &st);
	assert_int_equal(st.foreign_records, 0);
	assert_int_equal(st.discarded, 6);
	n = drain(sp, out, 100, false);
	assert_int_equal(n, 2);
	assert_int_equal(out[0], 300);
	spill_close(sp);
}

/* a directory others can write to is reported; a planted link is not followed */
static void test_unsafe_dir(void **state)
{
	struct spill *sp = open_spill(1 << 20, 0);
	struct spill_stats st;
	char link[600];

	(void)state;
	spill_get_stats(sp, &st);
	assert_int_equal(st.unsafe_dir, 0);
	spill_close(sp);
	assert_int_equal(chmod(dir, 0777), 0);
	snprintf(link, sizeof(link), "%s/0000010000000000.seg", dir);
	assert_int_equal(symlink("/etc/passwd", link), 0);
	sp = open_spill(1 << 20, 0);
	spill_get_stats(sp, &st);
	assert_int_equal(st.unsafe_dir, 1);
	assert_int_equal(st.recovered, 0);
	assert_int_equal(st.io_errors, 0);
	/* the link is left alone, and new segments do not collide with it */
	append_n(sp, 0, 3, REC_STATS, 50);
	assert_int_equal(spill_flush(sp), 0);
	spill_close(sp);
	assert_int_equal(access(link, F_OK), 0);
	unlink(link);
}

/* write-ahead: taken at once when nothing waits; ids survive a kill -9 */
static void test_append_take(void **state)
{
	struct spill_opts o = {.sz = sizeof(o),
			       .dir = dir,
			       .max_bytes = 8 << 20,
			       .segment_bytes = 64 * 1024,
			       .owner = "o",
			       .write_through = true};
	struct spill_id id = {0x1234, 0};
	struct spill *sp;
	struct spill_rec r;
	struct spill_stats st;
	uint64_t t[3];
	char val[256];

	(void)state;
	sp = spill_open(&o);
	assert_non_null(sp);
	for (int i = 0; i < 3; i++) {
		size_t len = make_val(val, sizeof(val), i, 100);

		id.seq = i + 1;
		assert_int_equal(spill_append_id(sp, REC_SUMMARY, &id, "k", 1, val, len, &t[i]), 0);
		assert_true(t[i] > 0);
	}
	assert_int_equal(spill_unread(sp), 0);
	spill_done(sp, t[0]);
	spill_done(sp, t[1]);
	spill_close(sp);
	/* the third was not confirmed: it comes back, with its id */
	sp = spill_open(&o);
	assert_int_equal(spill_peek(sp, &r), 0);
	assert_int_equal(val_index(&r), 2);
	assert_int_equal(r.rid.run, 0x1234);
	assert_int_equal(r.rid.seq, 3);
	/* something unread: a new record waits its turn */
	assert_int_equal(spill_append_id(sp, REC_SUMMARY, &id, "k", 1, val, 10, &t[0]), 0);
	assert_int_equal(t[0], 0);
	spill_done(sp, spill_take(sp));
	spill_close(sp);

	/* kill -9 right after the appends, no flush, no close: nothing lost */
	if (fork() == 0) {
		struct spill *c = spill_open(&o);
		uint64_t tk;

		for (int i = 0; i < 50; i++) {
			size_t len = make_val(val, sizeof(val), 100 + i, 100);

			id.seq = 100 + i;
			spill_append_id(c, REC_EVENT, &id, "k", 1, val, len, &tk);
		}
		raise(SIGKILL);
	}
	wait(NULL);
	sp = spill_open(&o);
	spill_get_stats(sp, &st);
	assert_int_equal(st.recovered, 1 + 50);
	assert_int_equal(spill_peek(sp, &r), 0);
	spill_done(sp, spill_take(sp));
	for (int i = 0; i < 50; i++) {
		assert_int_equal(spill_peek(sp, &r), 0);
		assert_int_equal(val_index(&r), 100 + i);
		assert_int_equal(r.rid.seq, 100 + i);
		spill_done(sp, spill_take(sp));
	}
	spill_close(sp);
	assert_int_equal(count_files(".seg"), 0);
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
	    cmocka_unit_test_setup_teardown(test_resync, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_resync_at_read, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_consumed_damaged, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_foreign, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_foreign_later, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unsafe_dir, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_append_take, setup, teardown),
	};

	agent_log_set_level(LOG_ERROR - 1); /* the warnings are expected here */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
