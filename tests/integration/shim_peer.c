// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * shim_peer.c - a peer of the agent's CUPTI shim socket that is not a real
 * shim, for tests/integration/shim_channel.sh (issue 18, findings 5-9):
 *
 *   shim_peer SOCK rejects   one of each rejection: a record before the
 *                            hello, an oversize message, a passed file
 *                            descriptor, a status of ~0 dropped records,
 *                            a hello of another ABI, then 300 connections
 *                            held open (one process may hold 4)
 *   shim_peer SOCK amp N     a hello claiming pid 1 (another pid namespace),
 *                            then N launch callbacks, each with a new tid
 *   shim_peer SOCK genuine   a hello, then an unmatched kernel whose name is
 *                            the bytes ff fe 80 followed by "gemm"
 *
 * Prints "ready" on stdout once everything is sent, then waits to be killed
 * (the connections stay open until then).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "events.h"
#include "shim/proto.h"
#include "../fakes/shim_records.h"

static const char *sock_path;

static int dial(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

static void must(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "shim_peer: %s: %s\n", what, strerror(errno));
		exit(1);
	}
}

static void rejects(void)
{
	static uint8_t big[SHIM_MSG_MAX + 64];
	struct shim_status_event h = shim_hello((uint32_t)getpid(), INFERTRACE_ABI_VERSION);
	struct gpu_launch_cb_event cb = shim_launch_cb((uint32_t)getpid(), (uint32_t)getpid(), 1);
	struct iovec iov = {.iov_base = &cb, .iov_len = sizeof(cb)};
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr a;
	} u;
	struct msghdr mh = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	int fd = dial(), fd2, pass = 0, i;

	must(fd >= 0, "connect");
	must(send(fd, &cb, sizeof(cb), 0) == sizeof(cb), "record before hello");
	must(send(fd, &h, sizeof(h), 0) == sizeof(h), "hello");
	must(send(fd, big, sizeof(big), 0) == sizeof(big), "oversize");
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &pass, sizeof(int));
	must(sendmsg(fd, &mh, 0) == sizeof(cb), "passed fd");
	h.records_dropped = ~0ull;
	must(send(fd, &h, sizeof(h), 0) == sizeof(h), "absurd status");
	fd2 = dial();
	must(fd2 >= 0, "connect");
	h = shim_hello((uint32_t)getpid(), INFERTRACE_ABI_VERSION + 1);
	must(send(fd2, &h, sizeof(h), 0) == sizeof(h), "bad abi");
	/* 298 more: this process already holds 2 (one may be closed: bad ABI) */
	for (i = 0; i < 298; i++)
		must(dial() >= 0, "connect");
}

static void amp(long n)
{
	static uint8_t buf[SHIM_MSG_MAX];
	struct shim_status_event h = shim_hello(1, INFERTRACE_ABI_VERSION);
	uint32_t tid = 100000;
	int fd = dial();
	long sent = 0;

	must(fd >= 0, "connect");
	must(send(fd, &h, sizeof(h), 0) == sizeof(h), "hello");
	while (sent < n) {
		size_t len = 0;

		for (; len + sizeof(struct gpu_launch_cb_event) <= 4096 && sent < n; sent++) {
			struct gpu_launch_cb_event cb = shim_launch_cb(1, tid++, (uint32_t)sent);

			memcpy(buf + len, &cb, sizeof(cb));
			len += sizeof(cb);
		}
		must(send(fd, buf, len, 0) == (ssize_t)len, "callbacks");
	}
}

static void genuine(void)
{
	struct shim_status_event h = shim_hello((uint32_t)getpid(), INFERTRACE_ABI_VERSION);
	struct gpu_activity_event k;
	int fd = dial();

	must(fd >= 0, "connect");
	must(send(fd, &h, sizeof(h), 0) == sizeof(h), "hello");
	memset(&k, 0, sizeof(k));
	k.hdr.type = EV_GPU_KERNEL;
	k.hdr.size = sizeof(k);
	k.hdr.pid = (uint32_t)getpid();
	k.hdr.ts_ns = 1000;
	k.correlation_id = 424242; /* no launch has it: unmatched */
	k.start_ns = 1000;
	k.end_ns = 2000;
	memcpy(k.name, "\xff\xfe\x80gemm", 8);
	must(send(fd, &k, sizeof(k), 0) == sizeof(k), "kernel");
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: shim_peer SOCK rejects|amp N|genuine\n");
		return 2;
	}
	sock_path = argv[1];
	if (!strcmp(argv[2], "rejects"))
		rejects();
	else if (!strcmp(argv[2], "amp") && argc > 3)
		amp(atol(argv[3]));
	else if (!strcmp(argv[2], "genuine"))
		genuine();
	else
		return 2;
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
