// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * workload - small known workloads for the integration tests
 * (tests/integration/NAME.sh). Each mode waits for WAIT_FILE (when given) so
 * that the agent can attach with --pid first, then runs its work in a new
 * thread and prints that thread's id, so the test knows exactly which
 * thread did what.
 *
 * usage: workload MODE [-w WAIT_FILE] [args]
 *   sleep N MS           worker: N x nanosleep(MS)          (off-CPU, blocked)
 *   syscalls N MS M PMS  worker: N x SYS_nanosleep(MS), then M x SYS_poll on an
 *                        empty pipe with a PMS timeout      (slow syscalls)
 *   spin SECS            worker: busy loop for SECS of wall time (run queue)
 *   udp-send ADDR PORT N SIZE   N UDP datagrams of SIZE payload bytes
 *   udp-recv PORT SECS   receive and discard datagrams for SECS
 *   tcp-serve PORT SECS  accept one connection, read and discard for SECS
 *   tcp-client ADDR PORT SECS   connect, print the local port, wait for
 *                        WAIT_FILE, then write 1 KiB every 50 ms for SECS
 *
 * Prints JSON lines: {"pid":P} at start (before waiting), then
 * {"pid":P,"tid":T,...} when the work is done.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static const char *wait_file;
static char **args;
static int nargs;
static pid_t worker_tid;

static double mono(void)
{
	return mono_ns() / 1e9;
}

static void wait_go(void)
{
	/* bounded: a test that died must not leave us behind forever */
	await_file(wait_file, 60);
}

static long arg_long(int i)
{
	if (i >= nargs) {
		fprintf(stderr, "workload: missing argument %d\n", i + 1);
		exit(2);
	}
	return strtol(args[i], NULL, 10);
}

static struct timespec ms_ts(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	return ts;
}

static void *do_sleep(void *unused)
{
	long n = arg_long(0), ms = arg_long(1);

	(void)unused;
	worker_tid = (pid_t)syscall(SYS_gettid);
	for (long i = 0; i < n; i++) {
		struct timespec ts = ms_ts(ms);

		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
	return NULL;
}

static void *do_syscalls(void *unused)
{
	long n = arg_long(0), ms = arg_long(1), m = arg_long(2), pms = arg_long(3);
	int p[2];

	(void)unused;
	worker_tid = (pid_t)syscall(SYS_gettid);
	/* raw syscalls: glibc would route nanosleep/poll through clock_nanosleep/ppoll */
	for (long i = 0; i < n; i++) {
		struct timespec ts = ms_ts(ms);

		syscall(SYS_nanosleep, &ts, NULL);
	}
	if (pipe(p))
		return NULL;
	for (long i = 0; i < m; i++) {
		struct pollfd pfd = {.fd = p[0], .events = POLLIN};

		syscall(SYS_poll, &pfd, 1, (int)pms);
	}
	close(p[0]);
	close(p[1]);
	return NULL;
}

static volatile unsigned long spin_sink;

static void *do_spin(void *unused)
{
	double end = mono() + atof(nargs > 0 ? args[0] : "1");

	(void)unused;
	worker_tid = (pid_t)syscall(SYS_gettid);
	while (mono() < end)
		for (int i = 0; i < 10000; i++)
			spin_sink++;
	return NULL;
}

static int inet_addr_port(const char *addr, long port, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((unsigned short)port);
	return inet_pton(AF_INET, addr, &sa->sin_addr) == 1 ? 0 : -1;
}

static int udp_send(void)
{
	long port = arg_long(1), n = arg_long(2), size = arg_long(3);
	struct sockaddr_in sa;
	char *buf;
	int fd;

	if (nargs < 1 || inet_addr_port(args[0], port, &sa) || size < 0 || size > 65000)
		return 2;
	buf = calloc(1, size + 1);
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (!buf || fd < 0)
		return 1;
	for (long i = 0; i < n; i++) {
		memset(buf, 'a' + i % 26, size);
		if (sendto(fd, buf, size, 0, (struct sockaddr *)&sa, sizeof(sa)) != size) {
			perror("workload: sendto");
			return 1;
		}
		usleep(200); /* stay far below any queue limit */
	}
	close(fd);
	free(buf);
	return 0;
}

static int udp_recv(void)
{
	long port = arg_long(0);
	double end = mono() + atof(nargs > 1 ? args[1] : "5");
	struct sockaddr_in sa;
	static char buf[65536];
	long got = 0;
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	if (fd < 0 || inet_addr_port("0.0.0.0", port, &sa) ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		return 1;
	while (mono() < end) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};

		if (poll(&pfd, 1, 50) > 0 && recv(fd, buf, sizeof(buf), 0) >= 0)
			got++;
	}
	printf("{\"pid\":%d,\"received\":%ld}\n", getpid(), got);
	return 0;
}

static int tcp_serve(void)
{
	long port = arg_long(0);
	double end = mono() + atof(nargs > 1 ? args[1] : "5");
	struct sockaddr_in sa;
	static char buf[65536];
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0), c = -1;

	if (fd < 0 || inet_addr_port("0.0.0.0", port, &sa))
		return 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 4))
		return 1;
	while (mono() < end) {
		struct pollfd pfd = {.fd = c >= 0 ? c : fd, .events = POLLIN};

		if (poll(&pfd, 1, 50) <= 0)
			continue;
		if (c < 0)
			c = accept(fd, NULL, NULL);
		else if (read(c, buf, sizeof(buf)) <= 0)
			break;
	}
	return 0;
}

static int tcp_client(void)
{
	long port = arg_long(1);
	double secs = atof(nargs > 2 ? args[2] : "2"), end;
	struct sockaddr_in sa, local;
	socklen_t len = sizeof(local);
	static char buf[1024];
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || nargs < 1 || inet_addr_port(args[0], port, &sa))
		return 2;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&local, &len)) {
		perror("workload: connect");
		return 1;
	}
	printf("{\"pid\":%d,\"sport\":%u}\n", getpid(), ntohs(local.sin_port));
	fflush(stdout);
	wait_go();
	memset(buf, 'x', sizeof(buf));
	end = mono() + secs;
	while (mono() < end) {
		if (send(fd, buf, sizeof(buf), MSG_DONTWAIT) < 0 && errno != EAGAIN)
			break;
		usleep(50000);
	}
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	void *(*fn)(void *) = NULL;
	const char *mode;
	pthread_t th;
	int i = 1;

	if (argc < 2) {
		fprintf(stderr, "usage: workload MODE [-w WAIT_FILE] [args]\n");
		return 2;
	}
	mode = argv[i++];
	if (i + 1 < argc && !strcmp(argv[i], "-w")) {
		wait_file = argv[i + 1];
		i += 2;
	}
	args = argv + i;
	nargs = argc - i;

	if (!strcmp(mode, "udp-send"))
		return udp_send();
	if (!strcmp(mode, "udp-recv"))
		return udp_recv();
	if (!strcmp(mode, "tcp-serve"))
		return tcp_serve();
	if (!strcmp(mode, "tcp-client"))
		return tcp_client();
	if (!strcmp(mode, "sleep"))
		fn = do_sleep;
	else if (!strcmp(mode, "syscalls"))
		fn = do_syscalls;
	else if (!strcmp(mode, "spin"))
		fn = do_spin;
	if (!fn) {
		fprintf(stderr, "workload: unknown mode %s\n", mode);
		return 2;
	}
	printf("{\"pid\":%d}\n", getpid());
	fflush(stdout);
	wait_go();
	/* the worker starts only now: its counters hold nothing but the work */
	if (pthread_create(&th, NULL, fn, NULL))
		return 1;
	pthread_join(th, NULL);
	printf("{\"pid\":%d,\"tid\":%d}\n", getpid(), worker_tid);
	fflush(stdout);
	return 0;
}
