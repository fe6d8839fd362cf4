// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * loop.c - the event loop's file descriptors: every source (the BPF rings,
 * the shim socket, and later the control socket, the metrics endpoint, the
 * Kafka client) registers its fd and a callback; loop_wait() runs the
 * callbacks of the ready ones. One thread, so callbacks never race.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>

#include "state.h"

#define MAX_WATCHES 64

struct watch {
	int fd;
	void (*fn)(struct agent *a, void *ctx);
	void *ctx;
};

static struct watch watches[MAX_WATCHES];
static int n_watches;
static int epfd = -1;

int loop_init(void)
{
	if (epfd >= 0)
		return 0;
	epfd = epoll_create1(EPOLL_CLOEXEC);
	return epfd < 0 ? -errno : 0;
}

static int watch_add(int fd, uint32_t events, void (*fn)(struct agent *a, void *ctx), void *ctx)
{
	struct epoll_event ev = {.events = events};
	int err = loop_init();

	if (err)
		return err;
	if (n_watches == MAX_WATCHES)
		return -ENOSPC;
	ev.data.u32 = n_watches;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev))
		return -errno;
	watches[n_watches++] = (struct watch){fd, fn, ctx};
	return 0;
}

int agent_watch_fd(struct agent *a, int fd, void (*fn)(struct agent *a, void *ctx), void *ctx)
{
	(void)a;
	return watch_add(fd, EPOLLIN, fn, ctx);
}

/*
 * Edge-triggered: fn runs when fd is woken, not whenever it holds data.
 * For the BPF rings, whose producers wake the agent once per batch and
 * otherwise leave the records for the loop's next turn (at most 100 ms):
 * level-triggered, a ring that is never empty under a steady stream of
 * records (a launch or collective loop) made the loop spin, a turn per few
 * records, with all its per-turn work (discovery, control, NCCL ticks).
 */
int agent_watch_fd_edge(struct agent *a, int fd, void (*fn)(struct agent *a, void *ctx), void *ctx)
{
	(void)a;
	return watch_add(fd, EPOLLIN | EPOLLET, fn, ctx);
}

void agent_unwatch_fd(struct agent *a, int fd)
{
	(void)a;
	for (int i = 0; i < n_watches; i++)
		if (watches[i].fd == fd) {
			epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
			watches[i].fn = NULL; /* slot stays: epoll data holds indexes */
		}
}

int loop_wait(struct agent *a, int timeout_ms)
{
	struct epoll_event evs[16];
	int n = epoll_wait(epfd, evs, 16, timeout_ms);

	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 0; i < n; i++) {
		struct watch *w = &watches[evs[i].data.u32 % MAX_WATCHES];

		if (w->fn)
			w->fn(a, w->ctx);
	}
	return n;
}

void loop_free(void)
{
	if (epfd >= 0)
		close(epfd);
	epfd = -1;
	n_watches = 0;
}
