/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * shim.h - internal interfaces of libinfertrace_cupti.so. Nothing here is
 * exported: the library is built with -fvisibility=hidden and a version
 * script (agent/shim/libinfertrace_cupti.map) that exports InitializeInjection
 * only.
 *
 * Threads that enter the library:
 *   - CUDA application threads: launch_cb() (CUPTI callback API), and
 *     buf_requested()/buf_completed() when CUPTI calls them there. These must
 *     never block: no locks, no syscalls besides gettid once per thread and
 *     the eventfd poke in buf_completed().
 *   - CUPTI's worker thread: buf_requested()/buf_completed().
 *   - the shim thread (chan.c): owns the socket, converts completed buffers,
 *     drains the launch ring, applies mode switches, sends status.
 */
#ifndef INFERTRACE_SHIM_H
#define INFERTRACE_SHIM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/un.h>

#include <cupti.h>

#include "events.h"
#include "proto.h"

#define SHIM_MAX_BUFS 8	   /* pool bound; bitmaps below are 32 bits */
#define SHIM_RING_CAP 4096 /* launch records in flight; power of two */
/*
 * Correlation ids whose launch callback the shim sampled out, one bit each
 * by id modulo this (2^20: 8 s of launches at 133 k/s, while CUPTI hands a
 * buffer back within INFERTRACE_SHIM_FLUSH_MS, 1 s): set when a launch is
 * sampled out, cleared when one is sent, read when its GPU record is sent.
 */
#define SHIM_SAMPLED_BITS (1u << 20)

/* what CUDA threads hand to the shim thread: launch callbacks, NVTX ranges */
union shim_ring_ev {
	struct event_hdr hdr; /* hdr.size: the member's size */
	struct gpu_launch_cb_event cb;
	struct gpu_marker_event mk;
};

/* one slot of the launch ring (bounded MPSC queue, sequence per cell) */
struct shim_ring_cell {
	_Atomic uint64_t seq;
	union shim_ring_ev ev;
};

struct shim {
	/* settings, written once by InitializeInjection before any thread */
	char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	size_t buf_size;
	unsigned int nbufs;
	unsigned int status_ms;
	unsigned int flush_ms;
	unsigned int retry_ms;
	unsigned int tick_ms;
	unsigned int send_wait_ms; /* a full socket is waited on this long per batch */
	unsigned int launch_rate;  /* sentinel: launch records per thread per s */
	int sndbuf;
	bool log_stderr;
	uint32_t pid;

	/* run-time state */
	atomic_int started;
	atomic_int forked;	     /* set in a fork child: the library goes quiet */
	atomic_int inert;	     /* no GPU, or setup failed */
	_Atomic uint32_t capture;    /* enum agent_mode */
	_Atomic uint32_t clock_mode; /* SHIM_CLOCK_* */
	_Atomic int64_t clock_offset_ns;
	_Atomic uint32_t kinds_on; /* bitmask of enabled activity kinds (1 << kind) */
	CUpti_SubscriberHandle sub;

	/* buffer pool: bufs[i] allocated lazily, never more than nbufs */
	uint8_t *bufs[SHIM_MAX_BUFS];
	size_t buf_valid[SHIM_MAX_BUFS];
	_Atomic uint32_t buf_free;  /* bit i: slot i may be handed to CUPTI */
	_Atomic uint32_t buf_ready; /* bit i: completed, waits for the shim thread */

	/* launch ring: producers are CUDA threads, consumer the shim thread */
	struct shim_ring_cell ring[SHIM_RING_CAP];
	_Atomic uint64_t ring_head;
	uint64_t ring_tail;

	/* SHIM_SAMPLED_BITS bits: CUDA threads write, the shim thread reads */
	_Atomic uint64_t sampled[SHIM_SAMPLED_BITS / 64];

	/* counters (reported in EV_SHIM_STATUS) */
	_Atomic uint64_t sent;
	_Atomic uint64_t dropped;
	_Atomic uint64_t cupti_dropped;
	_Atomic uint64_t zero_ts;    /* part of dropped: activities without time */
	_Atomic uint64_t pool_empty; /* CUPTI asked while every buffer was out */

	/* shim thread */
	pthread_t thr;
	bool thr_started;
	int efd; /* eventfd: wakes the shim thread */
	atomic_int stop;
	atomic_int want_fallback; /* zero kernel timestamps seen */
};

extern struct shim g_shim;

void shim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t shim_mono_ns(void);

/* a record's common header (bpf/events.h): this process, thread tid (0: none), at ts */
static inline void shim_hdr(struct event_hdr *h, __u16 type, size_t size, __u32 tid, __u64 ts)
{
	h->type = type;
	h->size = (__u16)size;
	h->pid = g_shim.pid;
	h->tid = tid;
	h->ts_ns = ts;
}

/* cupti.c */
int shim_cupti_setup(bool ts_callback);
void shim_cupti_teardown(void);
int shim_cupti_set_capture(uint32_t mode);
int shim_cupti_fallback(void);
void shim_cupti_process_ready(void);
int64_t shim_measure_offset(void);

/* chan.c */
int shim_chan_start(void);
void shim_chan_stop(void);
int shim_ring_push(const union shim_ring_ev *ev);
/* shim thread only: queue one record for the agent; counted when data */
void shim_tx_append(const void *rec, size_t len, bool data);

#endif /* INFERTRACE_SHIM_H */
