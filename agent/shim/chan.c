// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * chan.c - the shim's channel to the agent and its one thread.
 *
 * CUDA threads never touch the socket: launch callbacks go into a bounded
 * lock-free ring (shim_ring_push), completed CUPTI buffers into a ready
 * bitmap. The shim thread batches both into SOCK_SEQPACKET messages of up to
 * SHIM_MSG_MAX bytes and sends them with MSG_DONTWAIT: a full socket (agent
 * slow) or no connection (agent absent) drops the batch and counts it. The
 * same connection carries mode switches back from the agent. Protocol:
 * agent/shim/proto.h; the agent side: agent/sources/shim_rx.c.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include "shim.h"

/* shim thread state: only the shim thread touches these */
static int s_fd = -1;
static uint8_t s_tx[SHIM_MSG_MAX];
static size_t s_tx_len;
static uint64_t s_tx_data; /* data records in s_tx */
static bool s_stalled;	   /* the last batch found no room even after waiting */

/* ---------------------------------------------------------------- ring --- */

/*
 * Bounded MPSC queue (a sequence number per cell): a producer claims a slot
 * with one CAS on the head and publishes it by storing seq = pos + 1; the
 * consumer frees it with seq = pos + CAP. A full ring fails at once.
 */
int shim_ring_push(const union shim_ring_ev *ev)
{
	uint64_t pos = atomic_load_explicit(&g_shim.ring_head, memory_order_relaxed);
	struct shim_ring_cell *c;

	for (;;) {
		int64_t diff;

		c = &g_shim.ring[pos & (SHIM_RING_CAP - 1)];
		diff = (int64_t)(atomic_load_explicit(&c->seq, memory_order_acquire) - pos);
		if (diff == 0) {
			if (atomic_compare_exchange_weak_explicit(&g_shim.ring_head, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed))
				break;
		} else if (diff < 0) {
			return -ENOBUFS;
		} else {
			pos = atomic_load_explicit(&g_shim.ring_head, memory_order_relaxed);
		}
	}
	c->ev = *ev;
	atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
	return 0;
}

static void ring_drain(void)
{
	for (;;) {
		uint64_t pos = g_shim.ring_tail;
		struct shim_ring_cell *c = &g_shim.ring[pos & (SHIM_RING_CAP - 1)];
		union shim_ring_ev ev;

		if (atomic_load_explicit(&c->seq, memory_order_acquire) != pos + 1)
			return;
		ev = c->ev;
		atomic_store_explicit(&c->seq, pos + SHIM_RING_CAP, memory_order_release);
		g_shim.ring_tail = pos + 1;
		shim_tx_append(&ev, ev.hdr.size, true);
	}
}

/* -------------------------------------------------------------- socket --- */

static void chan_close(void)
{
	if (s_fd >= 0)
		close(s_fd);
	s_fd = -1;
	s_stalled = false;
}

static int chan_connect(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, err;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* the per-process bound of records in flight to the agent */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &g_shim.sndbuf, sizeof(g_shim.sndbuf));
	memcpy(sa.sun_path, g_shim.sock_path, strlen(g_shim.sock_path));
	/* a Unix connect never waits: EAGAIN when the agent's backlog is full */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	s_fd = fd;
	return 0;
}

static bool full(int err)
{
	return err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS;
}

/*
 * One batch to the agent. The socket holds SO_SNDBUF bytes (1 MiB: ~60
 * batches) and one CUPTI buffer converts to 2 MiB of records, sent in one
 * go, so a burst fills the socket while the agent is draining it at a rate
 * it keeps up with (bench/bench_shim.c: 10-31% of the records of 133 k kernels/s
 * were dropped so). A full socket is therefore waited on, on this thread
 * only (CUDA threads never send), for at most send_wait_ms. When that
 * passes, the agent is taken as stalled: batches are dropped without
 * waiting until one goes through again, and CUPTI, whose buffers this
 * thread holds meanwhile, drops and counts what its pool cannot take.
 */
static ssize_t tx_send(void)
{
	ssize_t n = send(s_fd, s_tx, s_tx_len, MSG_DONTWAIT | MSG_NOSIGNAL);
	uint64_t end, now;

	if (n >= 0 || !full(errno) || s_stalled)
		goto out;
	/* the clock only once the socket is full: most batches never look at it */
	end = shim_mono_ns() + (uint64_t)g_shim.send_wait_ms * 1000000ull;
	/* POLLOUT comes at a quarter of the buffer in use; a send can still find it full */
	while (n < 0 && full(errno) && (now = shim_mono_ns()) < end) {
		struct pollfd p = {.fd = s_fd, .events = POLLOUT};

		if (poll(&p, 1, (int)((end - now + 999999) / 1000000)) != 1 ||
		    !(p.revents & POLLOUT)) {
			n = -1;
			errno = p.revents & (POLLHUP | POLLERR) ? EPIPE : EAGAIN;
			break;
		}
		n = send(s_fd, s_tx, s_tx_len, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
out:
	s_stalled = n < 0 && full(errno);
	return n;
}

static void tx_flush(void)
{
	ssize_t n;

	if (!s_tx_len)
		return;
	if (s_fd < 0) {
		n = -1;
		errno = ENOTCONN;
	} else {
		n = tx_send();
	}
	if (n == (ssize_t)s_tx_len) {
		atomic_fetch_add(&g_shim.sent, s_tx_data);
	} else {
		atomic_fetch_add(&g_shim.dropped, s_tx_data);
		if (n < 0 && !full(errno) && errno != ENOTCONN) {
			shim_log("send: %s: reconnecting", strerror(errno));
			chan_close();
		}
	}
	s_tx_len = 0;
	s_tx_data = 0;
}

void shim_tx_append(const void *rec, size_t len, bool data)
{
	if (s_tx_len + len > sizeof(s_tx))
		tx_flush();
	memcpy(s_tx + s_tx_len, rec, len);
	s_tx_len += len;
	if (data)
		s_tx_data++;
}

static void send_status(void)
{
	struct shim_status_event st;

	memset(&st, 0, sizeof(st));
	shim_hdr(&st.hdr, EV_SHIM_STATUS, sizeof(st), 0, shim_mono_ns());
	st.abi_version = INFERTRACE_ABI_VERSION;
	st.clock_mode = atomic_load(&g_shim.clock_mode);
	st.clock_offset_ns = atomic_load(&g_shim.clock_offset_ns);
	st.records_sent = atomic_load(&g_shim.sent);
	st.records_dropped = atomic_load(&g_shim.dropped);
	st.cupti_dropped = atomic_load(&g_shim.cupti_dropped);
	st.capture = atomic_load(&g_shim.capture);
	/* alone in its message, so it is never shed with a batch of data */
	tx_flush();
	shim_tx_append(&st, sizeof(st), false);
	tx_flush();
}

/* mode switches from the agent; anything malformed is ignored */
static void chan_read(void)
{
	struct shim_ctl_msg m;
	int i;

	for (i = 0; i < 16 && s_fd >= 0; i++) {
		ssize_t n = recv(s_fd, &m, sizeof(m), MSG_DONTWAIT);

		if (n == 0 ||
		    (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			chan_close(); /* agent went away */
			return;
		}
		if (n < 0)
			return;
		if (n != sizeof(m) || m.magic != SHIM_CTL_MAGIC || m.version != SHIM_CTL_VERSION)
			continue;
		if (m.op == SHIM_CTL_SET_MODE && !shim_cupti_set_capture(m.arg)) {
			shim_log("capture mode %u", m.arg);
			send_status(); /* the acknowledgement */
		}
	}
}

/* --------------------------------------------------------------- thread --- */

static uint64_t ms_ns(unsigned int ms)
{
	return (uint64_t)ms * 1000000ull;
}

static void final_flush(void)
{
	if (!atomic_load(&g_shim.inert)) {
		/* no new buffers after this: every record comes back to us */
		shim_cupti_teardown();
		cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
		shim_cupti_process_ready();
		ring_drain();
		tx_flush();
	}
	if (s_fd >= 0)
		send_status();
	chan_close();
}

static void *shim_thread(void *arg)
{
	uint64_t now = shim_mono_ns();
	uint64_t next_status = now, next_flush = now + ms_ns(g_shim.flush_ms), next_retry = now;
	bool hello_sent = false;

	(void)arg;
	while (!atomic_load(&g_shim.stop)) {
		struct pollfd pfd[2] = {
		    {.fd = g_shim.efd, .events = POLLIN},
		    {.fd = s_fd, .events = POLLIN},
		};
		bool inert = atomic_load(&g_shim.inert);
		uint64_t v;

		/* inert: only the hello is left to deliver, no need to tick */
		if (poll(pfd, s_fd >= 0 ? 2 : 1, (int)(inert ? g_shim.retry_ms : g_shim.tick_ms)) >
		    0) {
			if (pfd[0].revents & POLLIN) {
				if (read(g_shim.efd, &v, sizeof(v)) < 0) {
					/* spurious: the counter was read already */
				}
			}
			if (s_fd >= 0 && pfd[1].revents)
				chan_read();
		}
		now = shim_mono_ns();

		if (s_fd < 0 && now >= next_retry) {
			next_retry = now + ms_ns(g_shim.retry_ms);
			if (!chan_connect()) {
				/* the hello: the agent checks the ABI version in it */
				send_status();
				hello_sent = s_fd >= 0;
				next_status = now + ms_ns(g_shim.status_ms);
			}
		}
		if (inert) {
			/* no GPU: said once, nothing more to do */
			if (hello_sent)
				break;
			continue;
		}
		if (atomic_load(&g_shim.want_fallback)) {
			shim_cupti_fallback();
			send_status();
			continue;
		}
		if (now >= next_flush) {
			/* completed records only; CUPTI hands them over on this thread */
			cuptiActivityFlushAll(0);
			next_flush = now + ms_ns(g_shim.flush_ms);
		}
		shim_cupti_process_ready();
		ring_drain();
		tx_flush();
		if (now >= next_status) {
			size_t d = 0;

			if (cuptiActivityGetNumDroppedRecords(NULL, 0, &d) == CUPTI_SUCCESS && d)
				atomic_fetch_add(&g_shim.cupti_dropped, d);
			/* CUPTI's clock may be CLOCK_REALTIME, which NTP steps */
			if (atomic_load(&g_shim.clock_mode) == SHIM_CLOCK_OFFSET)
				atomic_store(&g_shim.clock_offset_ns, shim_measure_offset());
			if (s_fd >= 0)
				send_status();
			next_status = now + ms_ns(g_shim.status_ms);
		}
	}
	if (atomic_load(&g_shim.stop))
		final_flush();
	else
		chan_close();
	return NULL;
}

int shim_chan_start(void)
{
	sigset_t all, old;
	int err;

	if (g_shim.efd < 0)
		return -EMFILE;
	/* the thread must never take the process's signals */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = -pthread_create(&g_shim.thr, NULL, shim_thread, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		return err;
	pthread_setname_np(g_shim.thr, "infertrace-shim");
	g_shim.thr_started = true;
	return 0;
}

/* bounded: a thread stuck in CUPTI must not hold up exit */
void shim_chan_stop(void)
{
	struct timespec ts;
	uint64_t one = 1;

	if (!g_shim.thr_started)
		return;
	atomic_store(&g_shim.stop, 1);
	if (write(g_shim.efd, &one, sizeof(one)) < 0) {
		/* the thread also wakes on its tick */
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 2;
	if (!pthread_timedjoin_np(g_shim.thr, NULL, &ts))
		g_shim.thr_started = false;
}
