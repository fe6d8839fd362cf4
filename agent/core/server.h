/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * server.h - the small nonblocking server core under the control socket
 * (control/control.c), the metrics endpoint (control/metrics.c) and the
 * CUPTI shim receiver (sources/shim_rx.c): one listening socket, a bounded
 * table of connection slots, each with an input buffer, one output buffer
 * and a deadline, all watched by one private epoll fd that the caller's loop
 * watches in turn. The owner keeps its own per-connection state in an array
 * indexed by slot and decides everything through callbacks; the core only
 * accepts, watches, reads, writes, times out and closes.
 *
 * Threading: single-threaded; every callback runs inside srv_serve(),
 * srv_close(), srv_expire() or srv_free() on the caller's thread. No agent
 * state: the shim tests and the fuzz target link server.o alone.
 */
#ifndef INFERTRACE_SERVER_H
#define INFERTRACE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct srv;

/* one slot; the owner may read every field and set out through srv_queue() */
struct srv_conn {
	int fd;		   /* -1: a free slot */
	uint32_t events;   /* epoll interest now (EPOLLIN at accept) */
	uint64_t last_ns;  /* accept, or (idle_deadline) the last byte in or out */
	unsigned char *in; /* in_cap + 1 bytes, NUL after in_len; NULL when in_cap is 0 */
	size_t in_len;
	char *out; /* what srv_send() writes; freed once written */
	size_t out_len, out_off;
};

struct srv_opts {
	size_t sz;		 /* sizeof(struct srv_opts) */
	unsigned int max_conns;	 /* slots; more connections reach on_accept with -ENOSPC */
	unsigned int accepts;	 /* accepted per turn: a flood cannot hold the loop */
	unsigned int max_events; /* epoll events per srv_serve() (at most 64) */
	size_t in_cap;		 /* input buffer per connection, 0: none */
	/* true: srv_expire() counts from the last traffic; false: from accept */
	bool idle_deadline;
	void *ctx;
	/*
	 * A new connection fd (nonblocking, close-on-exec). slot: its free
	 * slot, already watched for EPOLLIN; -ENOSPC when every slot is taken,
	 * or -errno when no slot could be set up for it. Return < 0 to refuse
	 * it (the core closes fd; the callback may have sent a reason), >= 0 to
	 * keep it (only with slot >= 0): added to srv_serve()'s result.
	 */
	int (*on_accept)(void *ctx, struct srv *s, int fd, int slot);
	/* slot is ready (events as epoll reports them); added to srv_serve()'s result */
	int (*on_event)(void *ctx, struct srv *s, unsigned int slot, uint32_t events);
	/* slot is about to be closed: drop what the owner holds for it. NULL: nothing */
	void (*on_close)(void *ctx, unsigned int slot);
	/* the fd given to srv_watch() is readable. NULL: nothing */
	void (*on_wake)(void *ctx, struct srv *s);
};

/*
 * Serve lfd, a listening nonblocking socket: owned from here on (closed by
 * srv_free), but left open on failure. NULL with errno set on failure.
 */
struct srv *srv_new(int lfd, const struct srv_opts *o);

/* closes every connection (on_close each), the epoll fd and lfd; accepts NULL */
void srv_free(struct srv *s);

/* the epoll fd for the caller's loop: readable when srv_serve() has work */
int srv_fd(const struct srv *s);

/* also watch fd (an eventfd that kicks work done in slices): on_wake; not owned */
int srv_watch(struct srv *s, int fd);

/*
 * Accept and dispatch what is ready now, without blocking. Returns the sum
 * of the callbacks' results, or -errno when epoll fails (EINTR: 0).
 */
int srv_serve(struct srv *s);

struct srv_conn *srv_conn(struct srv *s, unsigned int slot);
unsigned int srv_max_conns(const struct srv *s);
unsigned int srv_active(const struct srv *s); /* connections open now */

/* what the slot waits for (EPOLLIN, EPOLLOUT, 0); no system call when unchanged */
void srv_interest(struct srv *s, unsigned int slot, uint32_t events);

/*
 * One recv() into the slot's input buffer. Returns bytes read, 0 at the
 * end of the stream, -EAGAIN when nothing waits, -ENOBUFS when the buffer
 * is full, or -errno.
 */
ssize_t srv_recv(struct srv *s, unsigned int slot);

/* out (malloc'd, owned from here) replaces what the slot was to send */
void srv_queue(struct srv *s, unsigned int slot, char *out, size_t len);

/*
 * Write the slot's output. 0 when all of it is out (and freed; also when
 * there was none), -EAGAIN when the socket is full (the rest stays), or
 * -errno (the rest is dropped). Bytes written are added to *bytes (NULL: not).
 */
int srv_send(struct srv *s, unsigned int slot, uint64_t *bytes);

/* the slot counts as active now (its deadline starts again) */
void srv_touch(struct srv *s, unsigned int slot);

/* close the slot (on_close first); a free slot is left alone */
void srv_close(struct srv *s, unsigned int slot);

/* close every connection older than deadline_ns; returns how many */
unsigned int srv_expire(struct srv *s, uint64_t deadline_ns);

#endif /* INFERTRACE_SERVER_H */
