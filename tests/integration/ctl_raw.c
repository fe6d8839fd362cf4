// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ctl_raw - send the control socket whatever bytes a test wants (agentctl
 * only sends well-formed requests) and print what comes back.
 *
 * usage: ctl_raw SOCKET [-l LEN] [-n]
 *   stdin is the payload; it is sent after a 4-byte big-endian length
 *   header holding LEN (default: the payload's real length); -n: no header.
 * Prints each reply frame on its own line, then "EOF" when the agent closed
 * the connection or "OPEN" when it kept it open (0.5 s without data).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

static int read_n(int fd, unsigned char *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ssize_t r;

		if (poll(&p, 1, 500) <= 0)
			return 1; /* quiet: still open */
		r = recv(fd, buf + got, n - got, 0);
		if (r <= 0)
			return -1; /* closed */
		got += r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	static unsigned char in[1 << 21];
	long len = -1;
	int fd, no_hdr = 0, opt;
	size_t n = 0;
	ssize_t r;

	while ((opt = getopt(argc, argv, "l:n")) != -1) {
		if (opt == 'l')
			len = strtol(optarg, NULL, 0);
		else if (opt == 'n')
			no_hdr = 1;
		else
			return 2;
	}
	if (optind >= argc) {
		fprintf(stderr, "usage: ctl_raw SOCKET [-l LEN] [-n] < payload\n");
		return 2;
	}
	while (n < sizeof(in) && (r = read(0, in + n, sizeof(in) - n)) > 0)
		n += r;
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", argv[optind]);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof(sun))) {
		perror("connect");
		return 3;
	}
	if (!no_hdr) {
		unsigned long l = len >= 0 ? (unsigned long)len : n;
		unsigned char h[4] = {l >> 24, l >> 16, l >> 8, l};

		(void)!send(fd, h, 4, MSG_NOSIGNAL);
	}
	(void)!send(fd, in, n, MSG_NOSIGNAL);
	for (;;) {
		unsigned char h[4], *body;
		unsigned long l;
		int st = read_n(fd, h, 4);

		if (st) {
			printf("%s\n", st < 0 ? "EOF" : "OPEN");
			break;
		}
		l = (unsigned long)h[0] << 24 | h[1] << 16 | h[2] << 8 | h[3];
		body = malloc(l + 1);
		if (!body || read_n(fd, body, l)) {
			printf("TRUNCATED\n");
			break;
		}
		body[l] = '\0';
		printf("%s\n", body);
		free(body);
	}
	close(fd);
	return 0;
}
