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
#include <time.h>

#include "shim_rx.h"
#include "shim/proto.h"
#include "server.h"
#include "util.h"

#define RX_MAX_CONNS_DEFAULT 256
#define RX_MSGS_PER_CONN 64 /* per drain call: one busy shim cannot starve the others */
#define RX_ACCEPTS_PER_DRAIN 32
#define RX_MAX_FDS 16	 /* fds a sender may try to pass in one message; closed at once */
#define RX_MAX_TIDS 4096 /* threads mapped per containerised process */
/* limits (shim_rx_opts) */
#define RX_PER_PID_DEFAULT 4
#define RX_HELLO_MS_DEFAULT 5000
#define RX_IDLE_MS_DEFAULT 30000
#define RX_BUDGET_RECORDS_DEFAULT 1000000u
#define RX_BUDGET_BYTES_DEFAULT (128u << 20)
#define RX_BUDGET_SCANS_DEFAULT 16
#define NS_PER_MS 1000000ull
#define NS_PER_S 1000000000ull

/* a thread of a process in another pid namespace: its id there and here */
struct tid_pair {
	uint32_t ns_tid;
	uint32_t host_tid;
};

/* per server slot (the fd is the server core's: conn_fd) */
struct rx_conn {
	uint32_t pid;	 /* kernel's view (SO_PEERCRED at connect) */
	uint32_t ns_pid; /* what the shim calls itself (hello's hdr.pid) */
	uint32_t uid;	 /* SO_PEERCRED at connect: slots are shared out by uid */
	bool hello;
	uint64_t accept_ns, last_ns; /* rx clock: at accept, at the last message */
	/* this second's budget use (win: the second, rx clock) */
	uint64_t win;
	uint64_t win_recs, win_bytes;
	uint32_t win_scans;
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
	unsigned int n_slots; /* max_conns + 1: a newcomer always finds a slot, then one goes */
	unsigned int max_per_pid;
	uint64_t hello_ns, idle_ns;
	uint64_t budget_records, budget_bytes;
	uint32_t budget_scans;
	uint64_t (*now_fn)(void *ctx);
	struct rx_conn *conns;
	struct shim_rx_stats st;
	const char *proc; /* NULL: /proc (tests: a synthetic tree) */
	bool draining;	  /* in shim_rx_drain(): rx->buf holds a message */
	int gid_err;	  /* -errno of giving the socket to sock_gid; 0: done or not asked */
	/* one message; 8-aligned so validated records can be read in place */
	uint64_t buf[SHIM_MSG_MAX / 8];
};

/* ------------------------------------------------------------- budgets --- */

static uint64_t rx_now(const struct shim_rx *rx)
{
	struct timespec ts;

	if (rx->now_fn)
		return rx->now_fn(rx->ctx);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/*
 * A connection's budgets are per second of the rx clock: what one peer may
 * cost the agent's loop is bounded whatever it sends (issue 18, finding 5).
 */
static void budget_roll(struct shim_rx *rx, struct rx_conn *c)
{
	uint64_t win = rx_now(rx) / NS_PER_S + 1; /* 0: never used */

	if (c->win == win)
		return;
	c->win = win;
	c->win_recs = c->win_bytes = 0;
	c->win_scans = 0;
}

/* a counter that only grows, saturating where JSON and Prometheus still read it right */
static void sat_add(uint64_t *total, uint64_t d)
{
	*total = *total > (uint64_t)INT64_MAX - d ? (uint64_t)INT64_MAX : *total + d;
}

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
	case EV_GPU_DEVICE:
		return sizeof(struct gpu_device_event);
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
	case EV_GPU_DEVICE: {
		const struct gpu_device_event *e = (const void *)h;

		/* a CUDA device number is small; every UUID bit is data */
		return e->device < SHIM_MAX_DEVICES && !(e->flags & ~GPU_DEV_F_MIG);
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

/*
 * (re)read the threads of c's process into its table; 0 or -errno. A scan
 * reads every thread's status file: at most budget_scans a second per
 * connection, or a workload naming a new tid in every record would buy a
 * /proc walk per record. Over budget: -EAGAIN, counted.
 */
static int scan_conn(struct shim_rx *rx, struct rx_conn *c)
{
	int n;

	budget_roll(rx, c);
	if (c->win_scans >= rx->budget_scans) {
		rx->st.tid_scans_shed++;
		return -EAGAIN;
	}
	c->win_scans++;
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
	if (scan_conn(rx, c) == -EAGAIN)
		return 0; /* over budget: unmapped now, looked up again next second */
	for (i = 0; i < c->n_tids; i++)
		if (c->tids[i].ns_tid == ns_tid)
			return c->tids[i].host_tid;
	c->last_miss = ns_tid;
	return 0;
}

/*
 * Counters from a status record: only forward movement counts. Each value is
 * at most SHIM_COUNTER_MAX (checked before), so one connection adds at most
 * that much per counter, and the sums saturate at INT64_MAX: a shim cannot
 * make a node's counter wrap or read negative (issue 18, finding 7).
 */
static void take_status(struct shim_rx *rx, struct rx_conn *c, const struct shim_status_event *s)
{
	if (s->records_sent > c->sent)
		sat_add(&rx->st.shim_records_sent, s->records_sent - c->sent);
	if (s->records_dropped > c->dropped)
		sat_add(&rx->st.shim_records_dropped, s->records_dropped - c->dropped);
	if (s->cupti_dropped > c->cupti_dropped)
		sat_add(&rx->st.shim_cupti_dropped, s->cupti_dropped - c->cupti_dropped);
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
		if (h->type == EV_SHIM_STATUS) {
			const struct shim_status_event *s = (const void *)h;

			if (s->records_sent > SHIM_COUNTER_MAX ||
			    s->records_dropped > SHIM_COUNTER_MAX ||
			    s->cupti_dropped > SHIM_COUNTER_MAX) {
				/* its size is right: the framing holds, only this record goes */
				rx->st.status_absurd++;
				off += h->size;
				continue;
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
		c->win_recs++;
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
	struct rx_conn c = {.pid = pid, .uid = 0};
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

/* connections open now of process pid (another slot than skip) */
static unsigned int conns_of_pid(struct shim_rx *rx, uint32_t pid, unsigned int skip)
{
	unsigned int i, n = 0;

	for (i = 0; i < rx->n_slots; i++)
		n += i != skip && conn_fd(rx, &rx->conns[i]) >= 0 && rx->conns[i].pid == pid;
	return n;
}

static unsigned int conns_of_uid(struct shim_rx *rx, uint32_t uid, unsigned int skip)
{
	unsigned int i, n = 0;

	for (i = 0; i < rx->n_slots; i++)
		n += i != skip && conn_fd(rx, &rx->conns[i]) >= 0 && rx->conns[i].uid == uid;
	return n;
}

/*
 * Every slot is taken and a newcomer (slot new, peer uid) is in the spare
 * one: the connection that makes room, or -1. In order: the oldest that
 * never said hello; the longest silent one of the uid holding the most
 * slots, when that is not the newcomer's uid and holds more than it does
 * (one uid cannot keep every slot from the others); the longest silent one
 * past idle_ns. Slots go by uid because a peer with the same uid could
 * ptrace or kill the shim's process anyway (docs/operations.md).
 */
static int pick_victim(struct shim_rx *rx, unsigned int new, uint32_t uid)
{
	uint64_t now = rx_now(rx);
	unsigned int i, top_n = 0, n;
	uint32_t top_uid = uid;
	int v = -1;

	for (i = 0; i < rx->n_slots; i++) {
		struct rx_conn *c = &rx->conns[i];

		if (i == new || conn_fd(rx, c) < 0 || c->hello)
			continue;
		if (v < 0 || c->accept_ns < rx->conns[v].accept_ns)
			v = (int)i;
	}
	if (v >= 0)
		return v;
	for (i = 0; i < rx->n_slots; i++) {
		struct rx_conn *c = &rx->conns[i];

		if (i == new || conn_fd(rx, c) < 0 || c->uid == top_uid)
			continue;
		n = conns_of_uid(rx, c->uid, new);
		if (n > top_n) {
			top_n = n;
			top_uid = c->uid;
		}
	}
	/* the newcomer counts for its uid */
	if (top_uid != uid && top_n > conns_of_uid(rx, uid, new) + 1) {
		for (i = 0; i < rx->n_slots; i++) {
			struct rx_conn *c = &rx->conns[i];

			if (i == new || conn_fd(rx, c) < 0 || c->uid != top_uid)
				continue;
			if (v < 0 || c->last_ns < rx->conns[v].last_ns)
				v = (int)i;
		}
		return v;
	}
	for (i = 0; i < rx->n_slots; i++) {
		struct rx_conn *c = &rx->conns[i];

		if (i == new || conn_fd(rx, c) < 0 || now - c->last_ns < rx->idle_ns)
			continue;
		if (v < 0 || c->last_ns < rx->conns[v].last_ns)
			v = (int)i;
	}
	return v;
}

/* a new connection: its peer's pid, and read at once what it may have sent already */
static int on_accept(void *ctx, struct srv *s, int fd, int slot)
{
	struct shim_rx *rx = ctx;
	struct ucred cr;
	socklen_t crlen = sizeof(cr);
	uint64_t now;
	int one = 1, v;

	if (slot < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0 || cr.pid <= 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0) {
		rx->st.conns_refused++;
		return -1;
	}
	memset(&rx->conns[slot], 0, sizeof(rx->conns[slot]));
	/* one process needs one connection (a fork reconnects as itself) */
	if (conns_of_pid(rx, (uint32_t)cr.pid, (unsigned int)slot) >= rx->max_per_pid) {
		rx->st.conns_refused_pid++;
		return -1;
	}
	if (srv_active(s) > rx->max_conns) {
		v = pick_victim(rx, (unsigned int)slot, (uint32_t)cr.uid);
		if (v < 0) {
			rx->st.conns_refused_full++;
			return -1;
		}
		rx->st.conns_evicted++;
		conn_close(rx, &rx->conns[v]);
	}
	now = rx_now(rx);
	rx->conns[slot] = (struct rx_conn){
	    .pid = (uint32_t)cr.pid, .uid = (uint32_t)cr.uid, .accept_ns = now, .last_ns = now};
	rx->st.conns_accepted++;
	rx->st.conns_active++;
	return conn_read(rx, &rx->conns[slot]);
}

unsigned int shim_rx_expire(struct shim_rx *rx)
{
	uint64_t now = rx_now(rx);
	unsigned int i, n = 0;

	for (i = 0; i < rx->n_slots; i++) {
		struct rx_conn *c = &rx->conns[i];

		if (conn_fd(rx, c) < 0 || c->hello || now - c->accept_ns < rx->hello_ns)
			continue;
		rx->st.conns_hello_timeout++;
		conn_close(rx, c);
		n++;
	}
	return n;
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
		c->last_ns = rx_now(rx);
		budget_roll(rx, c);
		if (c->win_bytes + (uint64_t)len > rx->budget_bytes ||
		    c->win_recs >= rx->budget_records) {
			/* over this second's budget: read (the socket must drain) and dropped */
			rx->st.shed_msgs++;
			rx->st.shed_bytes += (uint64_t)len;
			c->pid = conn_pid;
			continue;
		}
		c->win_bytes += (uint64_t)len;
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
	for (i = 0; i < rx->n_slots; i++) {
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

	for (i = 0; i < rx->n_slots; i++) {
		const struct rx_conn *c = &rx->conns[i];

		if (conn_fd(rx, c) >= 0 && c->hello && c->pid == pid)
			return c->ns_pid != c->pid;
	}
	return 0;
}

int shim_rx_gid_error(const struct shim_rx *rx)
{
	return rx->gid_err;
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
	gid_t sock_gid = 0;
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
	rx->max_per_pid = RX_PER_PID_DEFAULT;
	rx->hello_ns = RX_HELLO_MS_DEFAULT * NS_PER_MS;
	rx->idle_ns = RX_IDLE_MS_DEFAULT * NS_PER_MS;
	rx->budget_records = RX_BUDGET_RECORDS_DEFAULT;
	rx->budget_bytes = RX_BUDGET_BYTES_DEFAULT;
	rx->budget_scans = RX_BUDGET_SCANS_DEFAULT;
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
		if (opts->sz >= offsetof(struct shim_rx_opts, now_ns) + sizeof(opts->now_ns)) {
			if (opts->max_per_pid)
				rx->max_per_pid = opts->max_per_pid;
			if (opts->hello_ms)
				rx->hello_ns = opts->hello_ms * NS_PER_MS;
			if (opts->idle_ms)
				rx->idle_ns = opts->idle_ms * NS_PER_MS;
			if (opts->budget_records)
				rx->budget_records = opts->budget_records;
			if (opts->budget_bytes)
				rx->budget_bytes = opts->budget_bytes;
			if (opts->budget_scans)
				rx->budget_scans = opts->budget_scans;
			sock_gid = opts->sock_gid;
			rx->now_fn = opts->now_ns;
		}
	}
	strcpy(rx->path, path);
	rx->n_slots = rx->max_conns + 1;
	rx->conns = calloc(rx->n_slots, sizeof(*rx->conns));
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
	/*
	 * The group before listen(): no shim connects while it is still root's.
	 * Without CAP_CHOWN the agent must be in the group itself; when it is
	 * not, the socket stays root's (more closed, not less): the caller is
	 * told (shim_rx_gid_error), the socket still serves root's workloads.
	 */
	if (sock_gid && chown(path, (uid_t)-1, sock_gid) < 0)
		rx->gid_err = -errno;
	if (chmod(path, sock_mode) < 0 || listen(lfd, 128) < 0) {
		err = -errno;
		goto cleanup_unlink;
	}
	so.max_conns = rx->n_slots;
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
