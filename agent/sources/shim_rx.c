// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * shim_rx.c - receive, validate and count what the CUPTI shims send; send
 * them mode switches. See shim_rx.h; the wire format is agent/shim/proto.h
 * and the records are bpf/events.h (sizes must match agent/shim/cupti.c and
 * agent/shim/chan.c, which build them).
 *
 * Everything that arrives is untrusted: any process that can connect may
 * send anything. Each record is checked against its type's exact size and
 * field ranges before the callback sees it; the pid comes from the kernel.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "shim_rx.h"
#include "shim/proto.h"
#include "server.h"
#include "util.h"

#define RX_MAX_CONNS_DEFAULT 256
#define RX_MSGS_PER_CONN 64 /* per drain call: one busy shim cannot starve the others */
#define RX_ACCEPTS_PER_DRAIN 32
#define RX_MAX_FDS 16 /* fds a sender may try to pass in one message; closed at once */
#define RX_MAX_TIDS 4096 /* threads mapped per containerised process */

/* a thread of a process in another pid namespace: its id there and here */
struct tid_pair {
	uint32_t ns_tid;
	uint32_t host_tid;
};

/* per server slot (the fd is the server core's: conn_fd) */
struct rx_conn {
	uint32_t pid;	 /* kernel's view (SO_PEERCRED at connect) */
	uint32_t ns_pid; /* what the shim calls itself (hello's hdr.pid) */
	bool hello;
	/* last counters from this shim's status records */
	uint64_t sent;
	uint64_t dropped;
	uint64_t cupti_dropped;
	/* ns_pid != pid: the shim's tids -> host tids, from /proc (see map_tid) */
	struct tid_pair *tids;
	uint32_t n_tids;
	uint32_t last_miss; /* ns tid of the last failed lookup: one rescan each */
};

struct shim_rx {
	struct srv *srv; /* the listening socket, the connections' slots */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	shim_rx_record_fn on_record;
	void (*on_msg)(void *ctx);
	void *ctx;
	unsigned int max_conns;
	struct rx_conn *conns;
	struct shim_rx_stats st;
	const char *proc; /* NULL: /proc (tests: a synthetic tree) */
	bool draining;	  /* in shim_rx_drain(): rx->buf holds a message */
	/* one message; 8-aligned so validated records can be read in place */
	uint64_t buf[SHIM_MSG_MAX / 8];
};

/* ------------------------------------------------------------ validate --- */

/* exact size of each record type a shim may send, 0: not a shim record */
static size_t shim_rec_size(__u16 type)
{
	switch (type) {
	case EV_GPU_KERNEL:
	case EV_GPU_MEMCPY:
	case EV_GPU_MEMSET:
		return sizeof(struct gpu_activity_event);
	case EV_GPU_LAUNCH_CB:
		return sizeof(struct gpu_launch_cb_event);
	case EV_SHIM_STATUS:
		return sizeof(struct shim_status_event);
	case EV_GPU_MARKER:
		return sizeof(struct gpu_marker_event);
	default:
		return 0;
	}
}

/* fields beyond the size; h is 8-aligned and h->size bytes long */
static bool rec_fields_ok(const struct event_hdr *h)
{
	switch (h->type) {
	case EV_GPU_KERNEL:
	case EV_GPU_MEMCPY:
	case EV_GPU_MEMSET: {
		const struct gpu_activity_event *e = (const void *)h;

		return memchr(e->name, '\0', sizeof(e->name)) != NULL;
	}
	case EV_GPU_LAUNCH_CB: {
		const struct gpu_launch_cb_event *e = (const void *)h;

		/* CUPTI_CB_DOMAIN_DRIVER_API (1), CUPTI_CB_DOMAIN_RUNTIME_API (2) */
		return e->domain == 1 || e->domain == 2;
	}
	case EV_SHIM_STATUS: {
		const struct shim_status_event *e = (const void *)h;

		return e->clock_mode <= SHIM_CLOCK_NONE && e->capture <= MODE_DEEP &&
		       e->abi_version == INFERTRACE_ABI_VERSION;
	}
	case EV_GPU_MARKER: {
		const struct gpu_marker_event *e = (const void *)h;

		return e->kind <= MARKER_END && memchr(e->name, '\0', sizeof(e->name)) != NULL;
	}
	default:
		return false;
	}
}

/* ------------------------------------------------------------ pid ns --- */

int shim_rx_nspid_parse(const char *status, uint32_t *host, uint32_t *inner)
{
	const char *p = status;

	while (p && *p) {
		if (!strncmp(p, "NSpid:", 6)) {
			unsigned long v, first = 0, last = 0;
			const char *q = p + 6;
			char *end;
			int n = 0;

			for (;;) {
				while (*q == ' ' || *q == '\t')
					q++;
				if (*q < '0' || *q > '9')
					break;
				errno = 0;
				v = strtoul(q, &end, 10);
				if (errno || v == 0 || v > UINT32_MAX)
					return -EINVAL;
				if (!n++)
					first = v;
				last = v;
				q = end;
			}
			if (!n || (*q && *q != '\n'))
				return -EINVAL;
			*host = (uint32_t)first;
			*inner = (uint32_t)last;
			return 0;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -ENOENT; /* kernel < 4.1, or not a status file */
}

int shim_rx_scan_tids(const char *proc, uint32_t pid, void *ctx,
		      void (*fn)(void *ctx, uint32_t ns_tid, uint32_t host_tid))
{
	char path[512], buf[4096];
	struct dirent *d;
	int n = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "%s/%u/task", proc ? proc : "/proc", pid);
	dir = opendir(path);
	if (!dir)
		return -errno;
	while ((d = readdir(dir))) {
		uint32_t host, inner;
		size_t len;
		FILE *f;

		if (d->d_name[0] < '0' || d->d_name[0] > '9' || strlen(d->d_name) > 10)
			continue;
		snprintf(path, sizeof(path), "%s/%u/task/%s/status", proc ? proc : "/proc", pid,
			 d->d_name);
		f = fopen(path, "re");
		if (!f)
			continue; /* the thread ended meanwhile */
		len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = '\0';
		if (shim_rx_nspid_parse(buf, &host, &inner))
			continue;
		fn(ctx, inner, host);
		n++;
	}
	closedir(dir);
	return n;
}

/* add or update one pair; a tid reused for a new thread gets the new host id */
static void add_tid(void *ctx, uint32_t ns_tid, uint32_t host_tid)
{
	struct rx_conn *c = ctx;
	uint32_t i;

	for (i = 0; i < c->n_tids; i++)
		if (c->tids[i].ns_tid == ns_tid) {
			c->tids[i].host_tid = host_tid;
			return;
		}
	if (c->n_tids == RX_MAX_TIDS)
		c->n_tids = 0; /* full: start over, the live threads come back */
	c->tids[c->n_tids++] = (struct tid_pair){ns_tid, host_tid};
}

/* (re)read the threads of c's process into its table; 0 or -errno */
static int scan_conn(struct shim_rx *rx, struct rx_conn *c)
{
	int n;

	if (!c->tids) {
		c->tids = calloc(RX_MAX_TIDS, sizeof(*c->tids));
		if (!c->tids)
			return -ENOMEM;
	}
	rx->st.tid_scans++;
	n = shim_rx_scan_tids(rx->proc, c->pid, c, add_tid);
	return n < 0 ? n : 0;
}

/*
 * The host tid of thread ns_tid of connection c's process, 0 when unknown.
 * The table is read from /proc/PID/task/<tid>/status (NSpid: host id first,
 * the process's own namespace last) at the hello and again on a miss, once
 * per new tid: a new thread costs one scan, a thread that is gone does not
 * cost one per record. Pairs stay known after their thread (or the whole
 * process) is gone: the last records of a process arrive after its exit.
 */
static uint32_t map_tid(struct shim_rx *rx, struct rx_conn *c, uint32_t ns_tid)
{
	uint32_t i;

	for (i = 0; i < c->n_tids; i++)
		if (c->tids[i].ns_tid == ns_tid)
			return c->tids[i].host_tid;
	if (c->last_miss == ns_tid)
		return 0;
	scan_conn(rx, c);
	for (i = 0; i < c->n_tids; i++)
		if (c->tids[i].ns_tid == ns_tid)
			return c->tids[i].host_tid;
	c->last_miss = ns_tid;
	return 0;
}

/* counters from a status record: only forward movement counts */
static void take_status(struct shim_rx *rx, struct rx_conn *c, const struct shim_status_event *s)
{
	if (s->records_sent > c->sent)
		rx->st.shim_records_sent += s->records_sent - c->sent;
	if (s->records_dropped > c->dropped)
		rx->st.shim_records_dropped += s->records_dropped - c->dropped;
	if (s->cupti_dropped > c->cupti_dropped)
		rx->st.shim_cupti_dropped += s->cupti_dropped - c->cupti_dropped;
	if (s->records_sent > c->sent)
		c->sent = s->records_sent;
	if (s->records_dropped > c->dropped)
		c->dropped = s->records_dropped;
	if (s->cupti_dropped > c->cupti_dropped)
		c->cupti_dropped = s->cupti_dropped;
}

/*
 * One message: records back to back. A record that fails validation makes
 * the rest of the message untrustworthy (its framing may be off), so the
 * rest is dropped. Returns records delivered, or -EPROTO when the
 * connection speaks another ABI and must be closed.
 */
static int process_msg(struct shim_rx *rx, struct rx_conn *c, uint8_t *buf, size_t len)
{
	size_t off = 0;
	int delivered = 0;

	rx->st.msgs++;
	rx->st.bytes += len;
	if (!len)
		goto bad;
	while (off < len) {
		struct event_hdr *h = (struct event_hdr *)(buf + off);
		size_t want;

		if (len - off < sizeof(*h))
			goto bad;
		want = shim_rec_size(h->type);
		if (!want || h->size != want || h->size > len - off)
			goto bad;
		if (h->type == EV_SHIM_STATUS && !c->hello) {
			const struct shim_status_event *s = (const void *)h;

			if (s->abi_version != INFERTRACE_ABI_VERSION) {
				rx->st.conns_bad_abi++;
				return -EPROTO;
			}
		}
		if (!rec_fields_ok(h))
			goto bad;
		if (!c->hello) {
			if (h->type != EV_SHIM_STATUS) {
				rx->st.no_hello++;
				off += h->size;
				continue;
			}
			c->hello = true;
			c->ns_pid = h->pid;
			/* in a container: learn its threads while the process lives */
			if (c->ns_pid != c->pid)
				scan_conn(rx, c);
		}
		if (h->pid != c->pid) {
			rx->st.pid_rewritten++;
			h->pid = c->pid;
		}
		/* a shim in another pid namespace names its threads there */
		if ((h->type == EV_GPU_LAUNCH_CB || h->type == EV_GPU_MARKER) &&
		    c->ns_pid != c->pid) {
			uint32_t host = map_tid(rx, c, h->tid);

			if (host) {
				h->tid = host;
				rx->st.tid_mapped++;
			} else {
				/* unknown here: no thread rather than a wrong one */
				h->tid = 0;
				rx->st.tid_unmapped++;
			}
		}
		if (h->type == EV_SHIM_STATUS)
			take_status(rx, c, (const void *)h);
		rx->st.records++;
		rx->st.by_type[h->type]++;
		delivered++;
		if (rx->on_record)
			rx->on_record(rx->ctx, h, h->size);
		off += h->size;
	}
	return delivered;

bad:
	rx->st.bad_msgs++;
	rx->st.bad_records++;
	return delivered;
}

int shim_rx_feed(struct shim_rx *rx, uint32_t pid, const void *buf, size_t len)
{
	struct rx_conn c = {.pid = pid};
	uint64_t bad = rx->st.bad_msgs;
	int n;

	if (rx->draining) {
		rx->st.reentered++;
		return -EBUSY;
	}
	if (len > sizeof(rx->buf)) {
		rx->st.msgs++;
		rx->st.truncated++;
		return -EINVAL;
	}
	memcpy(rx->buf, buf, len);
	n = process_msg(rx, &c, (uint8_t *)rx->buf, len);
	free(c.tids);
	if (n < 0 || rx->st.bad_msgs != bad)
		return -EINVAL;
	return n;
}

/* ---------------------------------------------------------- connections --- */

static unsigned int conn_slot(const struct shim_rx *rx, const struct rx_conn *c)
{
	return (unsigned int)(c - rx->conns);
}

/* -1: the slot is free */
static int conn_fd(const struct shim_rx *rx, const struct rx_conn *c)
{
	return srv_conn(rx->srv, conn_slot(rx, c))->fd;
}

static void conn_close(struct shim_rx *rx, struct rx_conn *c)
{
	srv_close(rx->srv, conn_slot(rx, c));
}

/* the server core closes a slot */
static void on_close(void *ctx, unsigned int slot)
{
	struct shim_rx *rx = ctx;
	struct rx_conn *c = &rx->conns[slot];

	free(c->tids);
	memset(c, 0, sizeof(*c));
	rx->st.conns_closed++;
	rx->st.conns_active--;
}

static int conn_read(struct shim_rx *rx, struct rx_conn *c);

/* a new connection: its peer's pid, and read at once what it may have sent already */
static int on_accept(void *ctx, struct srv *s, int fd, int slot)
{
	struct shim_rx *rx = ctx;
	struct ucred cr;
	socklen_t crlen = sizeof(cr);
	int one = 1;

	(void)s;
	if (slot < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0 || cr.pid <= 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0) {
		rx->st.conns_refused++;
		return -1;
	}
	rx->conns[slot] = (struct rx_conn){.pid = (uint32_t)cr.pid};
	rx->st.conns_accepted++;
	rx->st.conns_active++;
	return conn_read(rx, &rx->conns[slot]);
}

/*
 * The pid of this message from the kernel. Credentials are per message, so
 * a child that inherited the connection is seen as itself; any passed file
 * descriptors are closed at once (we never asked for them).
 */
static uint32_t msg_pid(struct shim_rx *rx, struct rx_conn *c, struct msghdr *mh)
{
	uint32_t pid = c->pid;
	struct cmsghdr *cm;

	for (cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET)
			continue;
		if (cm->cmsg_type == SCM_CREDENTIALS &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
			struct ucred cr;

			memcpy(&cr, CMSG_DATA(cm), sizeof(cr));
			if (cr.pid > 0)
				pid = (uint32_t)cr.pid;
		} else if (cm->cmsg_type == SCM_RIGHTS) {
			size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int), i;

			for (i = 0; i < n; i++) {
				int fd;

				memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
				close(fd);
				rx->st.fds_closed++;
			}
		}
	}
	return pid;
}

/* recvmsg() returns 0 for an empty message and at end of file alike */
static bool peer_gone(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLRDHUP};

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static int conn_read(struct shim_rx *rx, struct rx_conn *c)
{
	union {
		char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(RX_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} cmsg;
	int i, n, fd, delivered = 0;

	for (i = 0; i < RX_MSGS_PER_CONN && (fd = conn_fd(rx, c)) >= 0; i++) {
		struct iovec iov = {.iov_base = rx->buf, .iov_len = sizeof(rx->buf)};
		struct msghdr mh = {
		    .msg_iov = &iov,
		    .msg_iovlen = 1,
		    .msg_control = cmsg.buf,
		    .msg_controllen = sizeof(cmsg.buf),
		};
		uint32_t conn_pid = c->pid;
		ssize_t len;

		len = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (len < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			break;
		if (len < 0 || (len == 0 && peer_gone(fd))) {
			conn_close(rx, c); /* the process went away */
			break;
		}
		c->pid = msg_pid(rx, c, &mh);
		if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
			rx->st.msgs++;
			rx->st.truncated++;
			c->pid = conn_pid;
			continue;
		}
		if (rx->on_msg)
			rx->on_msg(rx->ctx);
		n = process_msg(rx, c, (uint8_t *)rx->buf, (size_t)len);
		c->pid = conn_pid;
		if (n < 0) {
			conn_close(rx, c);
			break;
		}
		delivered += n;
	}
	return delivered;
}

static int on_event(void *ctx, struct srv *s, unsigned int slot, uint32_t events)
{
	struct shim_rx *rx = ctx;

	(void)s;
	(void)events;
	return conn_read(rx, &rx->conns[slot]);
}

int shim_rx_drain(struct shim_rx *rx)
{
	int delivered;

	/* from a callback: the next read would overwrite the message in hand */
	if (rx->draining) {
		rx->st.reentered++;
		return -EBUSY;
	}
	rx->draining = true;
	delivered = srv_serve(rx->srv);
	rx->draining = false;
	return delivered;
}

int shim_rx_set_mode(struct shim_rx *rx, uint32_t pid, uint32_t mode)
{
	struct shim_ctl_msg m = {
	    .magic = SHIM_CTL_MAGIC,
	    .version = SHIM_CTL_VERSION,
	    .op = SHIM_CTL_SET_MODE,
	    .arg = mode,
	};
	bool matched = false, sent = false;
	unsigned int i;

	if (mode != MODE_SENTINEL && mode != MODE_DEEP)
		return -EINVAL;
	for (i = 0; i < rx->max_conns; i++) {
		struct rx_conn *c = &rx->conns[i];

		if (conn_fd(rx, c) < 0 || !c->hello || (pid && c->pid != pid))
			continue;
		matched = true;
		if (send(conn_fd(rx, c), &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL) == sizeof(m)) {
			rx->st.mode_sent++;
			sent = true;
		} else {
			rx->st.mode_failed++;
		}
	}
	if (!matched)
		return -ESRCH;
	return sent ? 0 : -EAGAIN;
}

int shim_rx_pid_ns_differs(const struct shim_rx *rx, uint32_t pid)
{
	unsigned int i;

	for (i = 0; i < rx->max_conns; i++) {
		const struct rx_conn *c = &rx->conns[i];

		if (conn_fd(rx, c) >= 0 && c->hello && c->pid == pid)
			return c->ns_pid != c->pid;
	}
	return 0;
}

int shim_rx_fd(const struct shim_rx *rx)
{
	return srv_fd(rx->srv);
}

void shim_rx_get_stats(const struct shim_rx *rx, struct shim_rx_stats *out)
{
	*out = rx->st;
}

/* ----------------------------------------------------------------- open --- */

struct shim_rx *shim_rx_open(const char *path, const struct shim_rx_opts *opts)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct srv_opts so = {
	    .sz = sizeof(so),
	    .accepts = RX_ACCEPTS_PER_DRAIN,
	    .max_events = 64,
	    .on_accept = on_accept,
	    .on_event = on_event,
	    .on_close = on_close,
	};
	mode_t sock_mode = 0660, dir_mode = 0755;
	struct shim_rx *rx = NULL;
	struct stat stb;
	int err, one = 1, lfd = -1;

	if (!path)
		path = SHIM_SOCK_DEFAULT;
	if (!*path || strlen(path) >= sizeof(sa.sun_path) ||
	    (opts && opts->sz < offsetof(struct shim_rx_opts, dir_mode) + sizeof(mode_t))) {
		err = -EINVAL;
		goto cleanup;
	}
	rx = calloc(1, sizeof(*rx));
	if (!rx) {
		err = -ENOMEM;
		goto cleanup;
	}
	rx->max_conns = RX_MAX_CONNS_DEFAULT;
	if (opts) {
		rx->on_record = opts->on_record;
		rx->ctx = opts->ctx;
		if (opts->max_conns)
			rx->max_conns = opts->max_conns;
		if (opts->sock_mode)
			sock_mode = opts->sock_mode;
		if (opts->dir_mode)
			dir_mode = opts->dir_mode;
		if (opts->sz >= offsetof(struct shim_rx_opts, proc_root) + sizeof(opts->proc_root))
			rx->proc = opts->proc_root;
		if (opts->sz >= offsetof(struct shim_rx_opts, on_msg) + sizeof(opts->on_msg))
			rx->on_msg = opts->on_msg;
	}
	strcpy(rx->path, path);
	rx->conns = calloc(rx->max_conns, sizeof(*rx->conns));
	if (!rx->conns) {
		err = -ENOMEM;
		goto cleanup;
	}

	err = mkdir_parents(path, dir_mode);
	if (err)
		goto cleanup;
	/* a socket left by a previous agent goes; anything else is not ours */
	if (lstat(path, &stb) == 0) {
		if (!S_ISSOCK(stb.st_mode)) {
			err = -EEXIST;
			goto cleanup;
		}
		unlink(path);
	}
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd < 0) {
		err = -errno;
		goto cleanup;
	}
	/* Linux creates the socket file with the socket inode's mode: no wide window */
	fchmod(lfd, sock_mode);
	setsockopt(lfd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	memcpy(sa.sun_path, path, strlen(path));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = -errno;
		goto cleanup;
	}
	if (chmod(path, sock_mode) < 0 || listen(lfd, 128) < 0) {
		err = -errno;
		goto cleanup_unlink;
	}
	so.max_conns = rx->max_conns;
	so.ctx = rx;
	rx->srv = srv_new(lfd, &so);
	if (!rx->srv) {
		err = -errno;
		goto cleanup_unlink;
	}
	return rx;

cleanup_unlink:
	unlink(path);
cleanup:
	if (lfd >= 0)
		close(lfd);
	if (rx) {
		free(rx->conns);
		free(rx);
	}
	errno = -err;
	return NULL;
}

void shim_rx_close(struct shim_rx *rx)
{
	if (!rx)
		return;
	srv_free(rx->srv); /* every connection (on_close), the listening socket */
	unlink(rx->path);
	free(rx->conns);
	free(rx);
}
