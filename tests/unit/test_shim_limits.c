// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_shim_limits.c - what one hostile peer of the shim socket can cost the
 * agent (agent/sources/shim_rx.c; issue 18, findings 5-7):
 *   - a hello claiming another pid namespace, then a new tid in every
 *     record: /proc task scans are bounded per connection per second;
 *   - records and bytes per connection per second: over budget is shed,
 *     counted;
 *   - 256+ held connections from one process, connections that never say
 *     hello, one uid holding every slot: a genuine shim still gets in;
 *   - status counters of ~0: rejected, counted, the node's totals stay sane.
 * The budgets run on a clock the test sets (shim_rx_opts.now_ns): nothing
 * here depends on how fast the machine is.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "shim_rx.h"
#include "shim/proto.h"
#include "shim_records.h"
#include "proc_tree.h"

#define SEC 1000000000ull

struct t {
	char dir[64];
	char sock[128];
	char proc[128];
	struct shim_rx *rx;
	uint64_t now; /* the receiver's clock */
	uint64_t recs, cbs;
	uint32_t last_tid, last_pid;
	uint32_t pids[64]; /* senders of the hellos seen */
	int n_pids;
	pid_t kids[300];
	int n_kids;
};

static uint64_t clock_of(void *ctx)
{
	return ((struct t *)ctx)->now;
}

static void on_record(void *ctx, const struct event_hdr *h, size_t len)
{
	struct t *t = ctx;

	(void)len;
	t->recs++;
	if (h->type == EV_GPU_LAUNCH_CB) {
		t->cbs++;
		t->last_tid = h->tid;
	}
	if (h->type == EV_SHIM_STATUS && t->n_pids < 64)
		t->pids[t->n_pids++] = h->pid;
	t->last_pid = h->pid;
}

static int setup(void **state)
{
	struct t *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	strcpy(t->dir, "/tmp/infertrace-shimlim.XXXXXX");
	assert_non_null(mkdtemp(t->dir));
	snprintf(t->sock, sizeof(t->sock), "%s/shim.sock", t->dir);
	snprintf(t->proc, sizeof(t->proc), "%s/proc", t->dir);
	assert_int_equal(mkdir(t->proc, 0755), 0);
	t->now = 1000 * SEC;
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct t *t = *state;
	char cmd[128];

	for (int i = 0; i < t->n_kids; i++) {
		kill(t->kids[i], SIGKILL);
		waitpid(t->kids[i], NULL, 0);
	}
	shim_rx_close(t->rx);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
	if (system(cmd)) {
		/* leave it: /tmp */
	}
	free(t);
	return 0;
}

static void rx_open(struct t *t, struct shim_rx_opts *o)
{
	o->sz = sizeof(*o);
	o->on_record = on_record;
	o->ctx = t;
	o->proc_root = t->proc;
	o->now_ns = clock_of;
	t->rx = shim_rx_open(t->sock, o);
	if (!t->rx)
		fail_msg("shim_rx_open %s: %s", t->sock, strerror(errno));
}

/*
 * Everything sent before this call is in the sockets already (AF_UNIX):
 * drain while the receiver's epoll fd says there is work.
 */
static void pump(struct t *t)
{
	struct pollfd p = {.fd = shim_rx_fd(t->rx), .events = POLLIN};

	for (int i = 0; i < 100000 && poll(&p, 1, 0) > 0; i++)
		assert_true(shim_rx_drain(t->rx) >= 0);
}

static int raw_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	strcpy(sa.sun_path, path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

static struct shim_status_event mk_hello(uint32_t ns_pid)
{
	return shim_hello(ns_pid, INFERTRACE_ABI_VERSION);
}

/* ROOT/PID/task/HOST/status naming the thread ns_tid inside */
static void put_thread(struct t *t, uint32_t pid, uint32_t host, uint32_t ns_tid)
{
	char nspid[64];

	snprintf(nspid, sizeof(nspid), "NSpid:\t%u\t%u\n", host, ns_tid);
	proc_tree_put_status(t->proc, pid, host, nspid);
}

/* ------------------------------------------------------------ finding 5 --- */

/*
 * A hello that says pid 1 (another pid namespace), then a launch callback
 * with a new tid in every record: each unknown tid used to cost a walk of
 * /proc/PID/task. Now budget_scans a second per connection; the rest go
 * unmapped (tid 0, never a wrong thread) and are counted.
 */
static void test_tid_scan_budget(void **state)
{
	struct t *t = *state;
	struct shim_rx_opts o = {0};
	struct shim_status_event hello = mk_hello(1);
	struct gpu_launch_cb_event cb;
	struct shim_rx_stats st;
	uint8_t buf[SHIM_MSG_MAX];
	uint32_t me = (uint32_t)getpid(), tid = 1000;
	size_t len;
	int fd, m, n = 0;

	rx_open(t, &o); /* default budget: 16 scans per second */
	put_thread(t, me, 777, 7);
	fd = raw_connect(t->sock);
	assert_true(fd >= 0);
	assert_int_equal(send(fd, &hello, sizeof(hello), 0), sizeof(hello));
	for (m = 0; m < 20; m++) {
		for (len = 0; len + sizeof(cb) <= sizeof(buf); len += sizeof(cb)) {
			cb = shim_launch_cb(1, tid++, (uint32_t)n++);
			memcpy(buf + len, &cb, sizeof(cb));
		}
		assert_int_equal(send(fd, buf, len, 0), (ssize_t)len);
		pump(t);
	}
	shim_rx_get_stats(t->rx, &st);
	/* every record delivered, none mapped to a wrong thread */
	assert_int_equal(t->cbs, (uint64_t)n);
	assert_int_equal(st.tid_mapped, 0);
	assert_int_equal(st.tid_unmapped, (uint64_t)n);
	/* the hello's scan and 15 more in this second; the rest shed and counted */
	assert_int_equal(st.tid_scans, 16);
	assert_int_equal(st.tid_scans + st.tid_scans_shed, (uint64_t)n + 1);

	/* a known thread costs nothing; a new one is looked up again the next second */
	cb = shim_launch_cb(1, 7, 1);
	assert_int_equal(send(fd, &cb, sizeof(cb), 0), sizeof(cb));
	pump(t);
	assert_int_equal(t->last_tid, 777);
	put_thread(t, me, 778, 8);
	cb = shim_launch_cb(1, 8, 2);
	assert_int_equal(send(fd, &cb, sizeof(cb), 0), sizeof(cb));
	pump(t);
	assert_int_equal(t->last_tid, 0); /* still this second: over budget */
	t->now += SEC;
	assert_int_equal(send(fd, &cb, sizeof(cb), 0), sizeof(cb));
	pump(t);
	assert_int_equal(t->last_tid, 778);
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.tid_scans, 17);
	close(fd);
}

/* records and bytes per connection per second: the rest is read and shed, counted */
static void test_record_and_byte_budget(void **state)
{
	struct t *t = *state;
	struct shim_rx_opts o = {.budget_records = 100, .budget_bytes = 64 * 1024};
	struct shim_status_event hello = mk_hello((uint32_t)getpid());
	struct gpu_launch_cb_event cb;
	struct shim_rx_stats st;
	uint8_t buf[50 * sizeof(cb)];
	int fd, fd2, i;

	rx_open(t, &o);
	fd = raw_connect(t->sock);
	fd2 = raw_connect(t->sock);
	assert_true(fd >= 0 && fd2 >= 0);
	assert_int_equal(send(fd, &hello, sizeof(hello), 0), sizeof(hello));
	assert_int_equal(send(fd2, &hello, sizeof(hello), 0), sizeof(hello));
	for (i = 0; i < 50; i++) {
		cb = shim_launch_cb((uint32_t)getpid(), 1, (uint32_t)i);
		memcpy(buf + i * sizeof(cb), &cb, sizeof(cb));
	}
	/* hello + 50 + 50 reach the budget of 100: the next 8 messages are shed */
	for (i = 0; i < 10; i++)
		assert_int_equal(send(fd, buf, sizeof(buf), 0), sizeof(buf));
	pump(t);
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.records, 2 + 100);
	assert_int_equal(st.shed_msgs, 8);
	assert_int_equal(st.shed_bytes, 8 * sizeof(buf));
	/* another connection's budget is its own */
	assert_int_equal(send(fd2, buf, sizeof(buf), 0), sizeof(buf));
	pump(t);
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.records, 2 + 150);
	/* the next second: a fresh budget */
	t->now += SEC;
	assert_int_equal(send(fd, buf, sizeof(buf), 0), sizeof(buf));
	pump(t);
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.records, 2 + 200);
	assert_int_equal(st.shed_msgs, 8);

	/*
	 * bytes: 64 KiB a second. Messages of 16 KiB garbage (no records, so
	 * the record budget stays out of it): 4 are read and rejected, the
	 * fifth is over the byte budget and shed.
	 */
	t->now += SEC;
	{
		static uint8_t big[SHIM_MSG_MAX];
		uint64_t bad = st.bad_msgs;

		memset(big, 0, sizeof(big));
		for (i = 0; i < 5; i++)
			assert_int_equal(send(fd2, big, sizeof(big), 0), sizeof(big));
		pump(t);
		shim_rx_get_stats(t->rx, &st);
		assert_int_equal(st.bad_msgs, bad + 4);
		assert_int_equal(st.shed_msgs, 8 + 1);
		assert_int_equal(st.shed_bytes, 8 * sizeof(buf) + sizeof(big));
	}
	close(fd);
	close(fd2);
}

/* ------------------------------------------------------------ finding 6 --- */

/* a child process that connects, says hello when asked, and waits to be killed */
static pid_t spawn_peer(struct t *t, bool hello, uid_t uid)
{
	int sync[2];
	pid_t pid;
	char c = 0;

	assert_int_equal(pipe(sync), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		struct shim_status_event h = mk_hello((uint32_t)getpid());
		int fd;

		close(sync[0]);
		if (uid && setuid(uid))
			_exit(2);
		fd = raw_connect(t->sock);
		if (fd < 0)
			_exit(3);
		if (hello && send(fd, &h, sizeof(h), 0) != sizeof(h))
			_exit(4);
		if (write(sync[1], &c, 1) != 1)
			_exit(5);
		pause();
		_exit(0);
	}
	close(sync[1]);
	assert_int_equal(read(sync[0], &c, 1), 1);
	close(sync[0]);
	t->kids[t->n_kids++] = pid;
	return pid;
}

static bool hello_from(struct t *t, pid_t pid)
{
	for (int i = 0; i < t->n_pids; i++)
		if (t->pids[i] == (uint32_t)pid)
			return true;
	return false;
}

/*
 * A shim of uid comes and says hello, the agent serves its connection:
 * whether its hello got through; *st the counters after, *pid (if asked) the peer.
 */
static bool shim_arrives(struct t *t, uid_t uid, struct shim_rx_stats *st, pid_t *pid)
{
	pid_t p = spawn_peer(t, true, uid);
	bool heard;

	pump(t);
	heard = hello_from(t, p);
	shim_rx_get_stats(t->rx, st);
	if (pid)
		*pid = p;
	return heard;
}

/* one process holding 300 connections: it gets max_per_pid, a genuine shim gets in */
static void test_one_peer_cannot_fill_slots(void **state)
{
	struct t *t = *state;
	struct shim_rx_opts o = {0};
	struct shim_rx_stats st;
	int fds[300], i, held = 0;

	rx_open(t, &o); /* 256 slots, 4 per process */
	for (i = 0; i < 300; i++) {
		fds[i] = raw_connect(t->sock);
		assert_true(fds[i] >= 0);
		if (i % 16 == 15)
			pump(t); /* the backlog is 128 */
	}
	pump(t);
	/* the finding: a genuine shim was accepted and reset */
	assert_true(shim_arrives(t, 0, &st, NULL));
	assert_int_equal(st.conns_active, 5);
	assert_int_equal(st.conns_refused_pid, 296);
	for (i = 0; i < 300; i++) {
		char b;

		/* the refused ones read end of file: closed by the agent */
		held += recv(fds[i], &b, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN;
	}
	assert_int_equal(held, 4);
	for (i = 0; i < 300; i++)
		close(fds[i]);
}

/*
 * Every slot held by processes that never say hello: a newcomer evicts the
 * oldest of them; the rest time out after hello_ms.
 */
static void test_no_hello_evicted_and_expired(void **state)
{
	struct t *t = *state;
	struct shim_rx_opts o = {.max_conns = 8, .hello_ms = 5000};
	struct shim_rx_stats st;
	pid_t genuine;
	int i;

	rx_open(t, &o);
	for (i = 0; i < 8; i++) {
		spawn_peer(t, false, 0);
		pump(t);
		t->now += 1000; /* their ages tell them apart */
	}
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.conns_active, 8);
	assert_true(shim_arrives(t, 0, &st, &genuine));
	assert_int_equal(st.conns_evicted, 1);
	assert_int_equal(st.conns_active, 8);
	/* not yet */
	assert_int_equal(shim_rx_expire(t->rx), 0);
	t->now += 5 * SEC;
	assert_int_equal(shim_rx_expire(t->rx), 7);
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.conns_hello_timeout, 7);
	assert_int_equal(st.conns_active, 1); /* the genuine shim stays */
	assert_int_equal(shim_rx_set_mode(t->rx, (uint32_t)genuine, MODE_DEEP), 0);
}

/*
 * Every slot held by one uid with hellos: a shim of another uid evicts the
 * longest silent of them. Slots full of its own uid's live shims refuse a
 * newcomer (counted) until one falls silent for idle_ms.
 */
static void test_uid_share_and_idle(void **state)
{
	struct t *t = *state;
	struct shim_rx_opts o = {.max_conns = 8, .idle_ms = 30000};
	struct shim_rx_stats st;
	int i;

	if (geteuid() != 0) {
		skip(); /* needs two uids */
		return;
	}
	/* nobody must reach the socket */
	o.sock_mode = 0666;
	assert_int_equal(chmod(t->dir, 0755), 0);
	rx_open(t, &o);
	for (i = 0; i < 8; i++) {
		spawn_peer(t, true, 65534);
		pump(t);
		t->now += 1000;
	}
	assert_true(shim_arrives(t, 0, &st, NULL));
	assert_int_equal(st.conns_evicted, 1);
	assert_int_equal(st.conns_active, 8);
	/* uid 65534 holds 7, root 1: another nobody peer is refused, not let in */
	assert_false(shim_arrives(t, 65534, &st, NULL));
	assert_int_equal(st.conns_refused_full, 1);
	/* after idle_ms of silence anyone may take the longest silent slot */
	t->now += 31 * SEC;
	assert_true(shim_arrives(t, 65534, &st, NULL));
	assert_int_equal(st.conns_evicted, 2);
}

/* ------------------------------------------------------------ finding 7 --- */

static void test_status_counters_not_poisoned(void **state)
{
	struct t *t = *state;
	struct shim_rx_opts o = {0};
	struct shim_status_event s = mk_hello((uint32_t)getpid());
	struct shim_rx_stats st;
	int fd, i;

	rx_open(t, &o);
	fd = raw_connect(t->sock);
	assert_true(fd >= 0);
	s.records_sent = 10;
	s.records_dropped = 3;
	assert_int_equal(send(fd, &s, sizeof(s), 0), sizeof(s));
	s.records_dropped = ~0ull; /* the finding: gpu.shim_dropped read -1 */
	assert_int_equal(send(fd, &s, sizeof(s), 0), sizeof(s));
	s.records_dropped = 3;
	s.cupti_dropped = SHIM_COUNTER_MAX + 1;
	assert_int_equal(send(fd, &s, sizeof(s), 0), sizeof(s));
	pump(t);
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.shim_records_dropped, 3);
	assert_int_equal(st.shim_cupti_dropped, 0);
	assert_int_equal(st.status_absurd, 2);
	assert_int_equal(t->recs, 1); /* the absurd ones are not delivered either */
	close(fd);
	/* each connection adds at most SHIM_COUNTER_MAX per counter */
	for (i = 0; i < 4; i++) {
		struct shim_status_event h = mk_hello((uint32_t)getpid());

		fd = raw_connect(t->sock);
		assert_true(fd >= 0);
		h.records_dropped = SHIM_COUNTER_MAX;
		assert_int_equal(send(fd, &h, sizeof(h), 0), sizeof(h));
		pump(t);
		close(fd);
		pump(t);
	}
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.shim_records_dropped, 3 + 4 * SHIM_COUNTER_MAX);
	assert_true(st.shim_records_dropped <= (uint64_t)INT64_MAX);
}

/* ----------------------------------------------------------- finding 10 --- */

/* the socket goes to the group asked for (--shim-group), mode 0660, before anyone connects */
static void test_socket_group(void **state)
{
	struct t *t = *state;
	struct shim_rx_opts o = {.sock_gid = 65534};
	struct stat sb;

	if (geteuid() != 0) {
		skip(); /* chown to a group not ours */
		return;
	}
	rx_open(t, &o);
	assert_int_equal(stat(t->sock, &sb), 0);
	assert_int_equal(sb.st_gid, 65534);
	assert_int_equal(sb.st_mode & 0777, 0660);
	assert_int_equal(shim_rx_gid_error(t->rx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_tid_scan_budget, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_record_and_byte_budget, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_one_peer_cannot_fill_slots, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_no_hello_evicted_and_expired, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_uid_share_and_idle, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_status_counters_not_poisoned, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_socket_group, setup, teardown),
	};

	alarm(120);
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("shim_limits", tests, NULL, NULL);
}
