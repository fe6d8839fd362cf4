// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_shim_nspid.c - host tids for shims in another pid namespace
 * (agent/sources/shim_rx.c): the NSpid: parser on synthetic status texts, the
 * /proc/PID/task scan on a synthetic tree, and the receiver rewriting a
 * launch callback's tid end to end through shim_rx_feed().
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "shim_rx.h"
#include "shim_records.h"
#include "proc_tree.h"

static void test_parse(void **state)
{
	uint32_t host = 0, inner = 0;

	(void)state;
	/* a thread of a container: host id first, the container's last */
	assert_int_equal(shim_rx_nspid_parse("Name:\tpython\nTgid:\t4242\nPid:\t4250\n"
					     "NSpid:\t4250\t17\nNSpgid:\t4242\t1\n",
					     &host, &inner),
			 0);
	assert_int_equal(host, 4250);
	assert_int_equal(inner, 17);
	/* nested namespaces: still first and last */
	assert_int_equal(shim_rx_nspid_parse("NSpid:\t900\t300\t5\n", &host, &inner), 0);
	assert_int_equal(host, 900);
	assert_int_equal(inner, 5);
	/* same namespace: one id */
	assert_int_equal(shim_rx_nspid_parse("Pid:\t77\nNSpid:\t77\n", &host, &inner), 0);
	assert_int_equal(host, 77);
	assert_int_equal(inner, 77);
	/* last line without newline */
	assert_int_equal(shim_rx_nspid_parse("NSpid:\t10\t2", &host, &inner), 0);
	assert_int_equal(inner, 2);
	/* absent (old kernel) or malformed */
	assert_int_equal(shim_rx_nspid_parse("Pid:\t77\n", &host, &inner), -ENOENT);
	assert_int_equal(shim_rx_nspid_parse("", &host, &inner), -ENOENT);
	assert_int_equal(shim_rx_nspid_parse("NSpid:\n", &host, &inner), -EINVAL);
	assert_int_equal(shim_rx_nspid_parse("NSpid:\t12x\n", &host, &inner), -EINVAL);
	assert_int_equal(shim_rx_nspid_parse("NSpid:\t0\t3\n", &host, &inner), -EINVAL);
	assert_int_equal(shim_rx_nspid_parse("NSpid:\t99999999999\t3\n", &host, &inner), -EINVAL);
	/* "NSpid" only at the start of a line */
	assert_int_equal(shim_rx_nspid_parse("Name:\tNSpid:\t1\t2\n", &host, &inner), -ENOENT);
}

/* a synthetic /proc: ROOT/PID/task/TID/status */
struct tree {
	char root[64];
};

static void put_status(struct tree *t, uint32_t pid, uint32_t host, const char *nspid)
{
	proc_tree_put_status(t->root, pid, host, nspid);
}

static int tree_setup(void **state)
{
	struct tree *t = calloc(1, sizeof(*t));

	strcpy(t->root, "/tmp/infertrace-nspid.XXXXXX");
	if (!mkdtemp(t->root))
		return -1;
	put_status(t, 5000, 5000, "NSpid:\t5000\t1\n");
	put_status(t, 5000, 5003, "NSpid:\t5003\t4\n");
	put_status(t, 5000, 5007, "NSpid:\t5007\t9\n");
	put_status(t, 5000, 5008, "Broken\n"); /* skipped */
	*state = t;
	return 0;
}

static int tree_teardown(void **state)
{
	struct tree *t = *state;
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->root);
	if (system(cmd)) {
		/* leave it: /tmp */
	}
	free(t);
	return 0;
}

struct seen {
	uint32_t ns[8], host[8];
	int n;
};

static void collect(void *ctx, uint32_t ns_tid, uint32_t host_tid)
{
	struct seen *s = ctx;

	if (s->n < 8) {
		s->ns[s->n] = ns_tid;
		s->host[s->n++] = host_tid;
	}
}

static void test_scan(void **state)
{
	struct tree *t = *state;
	struct seen s = {0};
	int n, found = 0;

	n = shim_rx_scan_tids(t->root, 5000, &s, collect);
	assert_int_equal(n, 3);
	for (int i = 0; i < s.n; i++)
		found |= (s.ns[i] == 1 && s.host[i] == 5000) << 0 |
			 (s.ns[i] == 4 && s.host[i] == 5003) << 1 |
			 (s.ns[i] == 9 && s.host[i] == 5007) << 2;
	assert_int_equal(found, 7);
	assert_true(shim_rx_scan_tids(t->root, 6000, &s, collect) < 0);
}

/* hello + one launch callback, as a shim inside a container sends them */
static size_t msg(uint8_t *buf, uint32_t ns_pid, uint32_t ns_tid)
{
	struct shim_status_event st = shim_hello(ns_pid, INFERTRACE_ABI_VERSION);
	struct gpu_launch_cb_event cb = shim_launch_cb(ns_pid, ns_tid, 42);

	cb.hdr.ts_ns = 123;
	cb.cbid = 211;
	memcpy(buf, &st, sizeof(st));
	memcpy(buf + sizeof(st), &cb, sizeof(cb));
	return sizeof(st) + sizeof(cb);
}

static uint32_t last_pid, last_tid;

static void on_record(void *ctx, const struct event_hdr *h, size_t len)
{
	(void)ctx;
	(void)len;
	if (h->type == EV_GPU_LAUNCH_CB) {
		last_pid = h->pid;
		last_tid = h->tid;
	}
}

static void test_rx_rewrites_tid(void **state)
{
	struct tree *t = *state;
	char sock[128];
	struct shim_rx_opts o = {.sz = sizeof(o), .on_record = on_record, .proc_root = t->root};
	struct shim_rx_stats st;
	struct shim_rx *rx;
	uint8_t buf[1024];
	size_t len;

	snprintf(sock, sizeof(sock), "%s/shim.sock", t->root);
	rx = shim_rx_open(sock, &o);
	assert_non_null(rx);
	/* the container calls itself pid 1; the kernel says 5000 */
	len = msg(buf, 1, 9);
	assert_int_equal(shim_rx_feed(rx, 5000, buf, len), 2);
	assert_int_equal(last_pid, 5000);
	assert_int_equal(last_tid, 5007);
	/* a thread /proc does not know: no thread rather than a wrong one */
	len = msg(buf, 1, 33);
	assert_int_equal(shim_rx_feed(rx, 5000, buf, len), 2);
	assert_int_equal(last_tid, 0);
	/* same namespace: tids are host tids already, untouched */
	len = msg(buf, 5000, 9);
	assert_int_equal(shim_rx_feed(rx, 5000, buf, len), 2);
	assert_int_equal(last_tid, 9);
	shim_rx_get_stats(rx, &st);
	assert_int_equal(st.tid_mapped, 1);
	assert_int_equal(st.tid_unmapped, 1);
	shim_rx_close(rx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse),
	    cmocka_unit_test_setup_teardown(test_scan, tree_setup, tree_teardown),
	    cmocka_unit_test_setup_teardown(test_rx_rewrites_tid, tree_setup, tree_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
