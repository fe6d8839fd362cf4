// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * server.c - see server.h. Epoll data: 0 the listening socket, slot + 1 a
 * connection, WAKE_ID the caller's wake-up fd.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "server.h"

#define SRV_MAX_EVENTS 64
#define WAKE_ID UINT64_MAX

struct srv {
	int lfd, epfd;
	struct srv_opts o;
	unsigned int active;
	struct srv_conn *conns;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

struct srv *srv_new(int lfd, const struct srv_opts *o)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
	struct srv *s;
	int err;

	if (lfd < 0 || !o || o->sz < sizeof(*o) || !o->max_conns || !o->on_accept || !o->on_event) {
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->o = *o;
	if (!s->o.accepts)
		s->o.accepts = 16;
	if (!s->o.max_events || s->o.max_events > SRV_MAX_EVENTS)
		s->o.max_events = SRV_MAX_EVENTS;
	s->lfd = lfd;
	s->conns = calloc(o->max_conns, sizeof(*s->conns));
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (!s->conns || s->epfd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, lfd, &ev)) {
		err = s->conns ? errno : ENOMEM;
		if (s->epfd >= 0)
			close(s->epfd);
		free(s->conns);
		free(s);
		errno = err;
		return NULL;
	}
	for (unsigned int i = 0; i < o->max_conns; i++)
		s->conns[i].fd = -1;
	return s;
}

/* the slot's resources, without telling the owner */
static void release(struct srv *s, struct srv_conn *c)
{
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c->in);
	free(c->out);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	s->active--;
}

void srv_close(struct srv *s, unsigned int slot)
{
	struct srv_conn *c = &s->conns[slot];

	if (c->fd < 0)
		return;
	if (s->o.on_close)
		s->o.on_close(s->o.ctx, slot);
	release(s, c);
}

void srv_free(struct srv *s)
{
	if (!s)
		return;
	for (unsigned int i = 0; i < s->o.max_conns; i++)
		srv_close(s, i);
	close(s->epfd);
	close(s->lfd);
	free(s->conns);
	free(s);
}

int srv_fd(const struct srv *s)
{
	return s->epfd;
}

int srv_watch(struct srv *s, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = WAKE_ID};

	return epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

struct srv_conn *srv_conn(struct srv *s, unsigned int slot)
{
	return &s->conns[slot];
}

unsigned int srv_max_conns(const struct srv *s)
{
	return s->o.max_conns;
}

unsigned int srv_active(const struct srv *s)
{
	return s->active;
}

/* a free slot set up for fd (watched, input buffer), or -errno */
static int take_slot(struct srv *s, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN};
	struct srv_conn *c = NULL;
	unsigned int slot;

	for (slot = 0; slot < s->o.max_conns; slot++)
		if (s->conns[slot].fd < 0) {
			c = &s->conns[slot];
			break;
		}
	if (!c)
		return -ENOSPC;
	if (s->o.in_cap && !(c->in = malloc(s->o.in_cap + 1)))
		return -ENOMEM;
	ev.data.u64 = slot + 1;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		int err = -errno;

		free(c->in);
		c->in = NULL;
		return err;
	}
	if (c->in)
		c->in[0] = '\0';
	c->fd = fd;
	c->events = EPOLLIN;
	c->last_ns = mono_ns();
	s->active++;
	return (int)slot;
}

static int do_accept(struct srv *s)
{
	int sum = 0;

	for (unsigned int k = 0; k < s->o.accepts; k++) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		int slot, r;

		if (fd < 0)
			break; /* EAGAIN, or a connection that died in the backlog */
		slot = take_slot(s, fd);
		r = s->o.on_accept(s->o.ctx, s, fd, slot);
		if (r >= 0 && slot >= 0) {
			sum += r;
			continue;
		}
		if (slot >= 0)
			release(s, &s->conns[slot]); /* closes fd */
		else
			close(fd);
	}
	return sum;
}

int srv_serve(struct srv *s)
{
	struct epoll_event evs[SRV_MAX_EVENTS];
	int n = epoll_wait(s->epfd, evs, (int)s->o.max_events, 0), sum = 0;

	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 0; i < n; i++) {
		uint64_t id = evs[i].data.u64;

		if (!id)
			sum += do_accept(s);
		else if (id == WAKE_ID && s->o.on_wake)
			s->o.on_wake(s->o.ctx, s);
		else if (id - 1 < s->o.max_conns && s->conns[id - 1].fd >= 0)
			sum += s->o.on_event(s->o.ctx, s, (unsigned int)(id - 1), evs[i].events);
	}
	return sum;
}

void srv_interest(struct srv *s, unsigned int slot, uint32_t events)
{
	struct srv_conn *c = &s->conns[slot];
	struct epoll_event ev = {.events = events, .data.u64 = slot + 1};

	if (c->fd < 0 || events == c->events)
		return;
	epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	c->events = events;
}

ssize_t srv_recv(struct srv *s, unsigned int slot)
{
	struct srv_conn *c = &s->conns[slot];

	if (c->in_len >= s->o.in_cap)
		return -ENOBUFS;
	for (;;) {
		ssize_t n = recv(c->fd, c->in + c->in_len, s->o.in_cap - c->in_len, MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EWOULDBLOCK ? -EAGAIN : -errno;
		c->in_len += n;
		c->in[c->in_len] = '\0';
		if (n && s->o.idle_deadline)
			c->last_ns = mono_ns();
		return n;
	}
}

void srv_queue(struct srv *s, unsigned int slot, char *out, size_t len)
{
	struct srv_conn *c = &s->conns[slot];

	free(c->out);
	c->out = out;
	c->out_len = out ? len : 0;
	c->out_off = 0;
}

int srv_send(struct srv *s, unsigned int slot, uint64_t *bytes)
{
	struct srv_conn *c = &s->conns[slot];
	int err = 0;

	while (c->out && c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return -EAGAIN;
		if (n <= 0) {
			err = n ? -errno : -EPIPE;
			break;
		}
		if (bytes)
			*bytes += n;
		c->out_off += n;
		if (s->o.idle_deadline)
			c->last_ns = mono_ns();
	}
	srv_queue(s, slot, NULL, 0);
	return err;
}

void srv_touch(struct srv *s, unsigned int slot)
{
	s->conns[slot].last_ns = mono_ns();
}

unsigned int srv_expire(struct srv *s, uint64_t deadline_ns)
{
	uint64_t now = mono_ns();
	unsigned int n = 0;

	for (unsigned int i = 0; i < s->o.max_conns; i++)
		if (s->conns[i].fd >= 0 && now - s->conns[i].last_ns > deadline_ns) {
			srv_close(s, i);
			n++;
		}
	return n;
}
