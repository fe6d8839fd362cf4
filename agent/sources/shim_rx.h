/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * shim_rx.h - the agent's end of the CUPTI shim channel: accepts one
 * SOCK_SEQPACKET connection per CUDA process, validates every record the
 * shims send, stamps it with the sender's pid as the kernel reports it, and
 * sends mode switches back. Protocol: agent/shim/proto.h; design:
 * docs/architecture.md, "The CUPTI shim and its channel to the agent".
 *
 * Threading: single-threaded, like the agent's event loop. on_record is
 * called from shim_rx_drain() / shim_rx_feed() on the caller's thread.
 */
#ifndef INFERTRACE_SHIM_RX_H
#define INFERTRACE_SHIM_RX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "events.h"

struct shim_rx;

/*
 * One valid record: h points to len bytes (len == h->size) that stay valid
 * for the duration of the call only. h->pid is the sending process's pid in
 * the agent's pid namespace (from SCM_CREDENTIALS / SO_PEERCRED, never what
 * the sender wrote). For EV_GPU_LAUNCH_CB h->tid is the thread id in the
 * sender's own pid namespace as the shim sent it; shim_rx maps it to the
 * host tid when shim_rx_pid_ns_differs() for that pid (NSpid: in
 * /proc/PID/task/TID/status, cached per connection), or sets it to 0 when
 * that thread cannot be found (counted in tid_unmapped).
 */
typedef void (*shim_rx_record_fn)(void *ctx, const struct event_hdr *h, size_t len);

struct shim_rx_opts {
	size_t sz; /* sizeof(struct shim_rx_opts) */
	shim_rx_record_fn on_record;
	void *ctx;
	unsigned int max_conns; /* 0: 256; further connections are refused and counted */
	mode_t sock_mode;	/* 0: 0660 */
	mode_t dir_mode;	/* 0: 0755, for directories created on the way */
	/* NULL: "/proc"; where /PID/task/TID/status is read (tests) */
	const char *proc_root;
	/*
	 * Called after each message is received and before its records are
	 * delivered: what the sender did before sending it (a uprobe hit in
	 * the BPF ring) can be taken in first. NULL: nothing.
	 */
	void (*on_msg)(void *ctx);
	/*
	 * Limits, so that no peer can take more than its share (issue 18).
	 * Each 0: the default in brackets.
	 */
	unsigned int max_per_pid; /* connections one process may hold [4] */
	unsigned int hello_ms;	  /* a connection without a hello is closed after [5000] */
	unsigned int idle_ms;	  /* silent this long: may be evicted for a newcomer [30000] */
	uint32_t budget_records;  /* records per connection per second [1000000] */
	uint32_t budget_bytes;	  /* bytes per connection per second [128 MiB] */
	uint32_t budget_scans;	  /* /proc task scans per connection per second [16] */
	gid_t sock_gid;		  /* 0: leave the socket's group as created */
	/* the clock of the budgets and deadlines (tests); NULL: CLOCK_MONOTONIC */
	uint64_t (*now_ns)(void *ctx);
};

/* a shim's status counters above this are not believed (2^48: centuries of records) */
#define SHIM_COUNTER_MAX (1ull << 48)
/* EV_GPU_DEVICE: CUDA device numbers a shim may name, 0 to this - 1 */
#define SHIM_MAX_DEVICES 64

/* counters; they only grow (the agent reports differences) */
struct shim_rx_stats {
	uint64_t conns_accepted;
	uint64_t conns_refused;	      /* no peer credentials */
	uint64_t conns_refused_pid;   /* the process already holds max_per_pid connections */
	uint64_t conns_refused_full;  /* every slot taken and none could be evicted */
	uint64_t conns_evicted;	      /* closed to make room for a newcomer (no hello, idle, or
				       * of the uid that held the most slots) */
	uint64_t conns_hello_timeout; /* closed: no hello within hello_ms */
	uint64_t conns_closed;
	uint64_t conns_bad_abi; /* hello with another INFERTRACE_ABI_VERSION: closed */
	uint64_t conns_active;
	uint64_t msgs; /* messages read */
	uint64_t bytes;
	uint64_t records;	       /* valid records handed to on_record */
	uint64_t by_type[EV_TYPE_MAX]; /* valid records per event type */
	uint64_t bad_msgs;	       /* messages with at least one invalid record */
	uint64_t bad_records;	/* invalid records (the rest of their message is dropped too) */
	uint64_t no_hello;	/* records before a valid hello: dropped */
	uint64_t truncated;	/* messages cut by the kernel (MSG_TRUNC/MSG_CTRUNC) */
	uint64_t fds_closed;	/* file descriptors a sender tried to pass us */
	uint64_t pid_rewritten; /* hdr.pid differed from the kernel's pid */
	uint64_t status_absurd; /* status records with a counter above SHIM_COUNTER_MAX: rejected */
	/* over a connection's budget: read and dropped */
	uint64_t shed_msgs;
	uint64_t shed_bytes;
	uint64_t mode_sent;
	uint64_t mode_failed;
	/* from the shims' own status records (latest per connection, summed) */
	uint64_t shim_records_sent;
	uint64_t shim_records_dropped;
	uint64_t shim_cupti_dropped;
	/* launch callbacks of shims in another pid namespace (containers) */
	uint64_t tid_mapped;	 /* tid rewritten to the host tid */
	uint64_t tid_unmapped;	 /* no host tid found: tid set to 0 */
	uint64_t tid_scans;	 /* /proc/PID/task scans to (re)build a map */
	uint64_t tid_scans_shed; /* scans over budget_scans not done (the tid counts as unmapped) */
	uint64_t reentered;	 /* drain or feed called from a drain's callbacks: refused */
};

/*
 * Listen on path (NULL: SHIM_SOCK_DEFAULT). Creates missing directories,
 * replaces a stale socket file, applies the modes in opts. Returns NULL with
 * errno set on failure.
 */
struct shim_rx *shim_rx_open(const char *path, const struct shim_rx_opts *opts);

/*
 * 0, or -errno when the socket could not be given to opts->sock_gid (it
 * stays the agent's group: EPERM without CAP_CHOWN when the agent is not
 * in that group itself)
 */
int shim_rx_gid_error(const struct shim_rx *rx);

/* one fd for the caller's poll loop (POLLIN: call shim_rx_drain) */
int shim_rx_fd(const struct shim_rx *rx);

/*
 * Accept pending connections and read what is there without blocking, at
 * most a bounded number of messages per connection per call (call again
 * while it returns > 0 to empty everything). Returns the number of valid
 * records delivered, or -errno on a failure of the receiver itself. Not
 * re-entrant: called from on_record or on_msg it returns -EBUSY (counted
 * in reentered) and the message in hand is delivered whole.
 */
int shim_rx_drain(struct shim_rx *rx);

/*
 * Tell the shim(s) of process pid (0: every connected shim) to switch to
 * mode (enum agent_mode). Returns 0 when at least one shim was told,
 * -ESRCH when none is connected for pid, -EINVAL for a bad mode, -EAGAIN
 * when every matching socket was full.
 */
int shim_rx_set_mode(struct shim_rx *rx, uint32_t pid, uint32_t mode);

/* true when pid's shim runs in another pid namespace (its tids are not host tids) */
int shim_rx_pid_ns_differs(const struct shim_rx *rx, uint32_t pid);

/*
 * The NSpid: line of a /proc/.../status text: host the first id (the
 * reader's namespace), inner the last (the process's own). 0, -ENOENT
 * without the line, -EINVAL when it is malformed.
 */
int shim_rx_nspid_parse(const char *status, uint32_t *host, uint32_t *inner);
/*
 * fn(ctx, ns_tid, host_tid) for each thread of pid found under
 * proc (NULL: /proc). Returns the number of threads, or -errno.
 */
int shim_rx_scan_tids(const char *proc, uint32_t pid, void *ctx,
		      void (*fn)(void *ctx, uint32_t ns_tid, uint32_t host_tid));

void shim_rx_get_stats(const struct shim_rx *rx, struct shim_rx_stats *out);

/*
 * Validate and deliver one message as if it came from pid over a fresh
 * connection (its first record must be the hello). For the fuzzer and the
 * tests; the socket path uses the same code. Returns records delivered or
 * -EINVAL when the message was rejected (counted as for a socket); -EBUSY
 * from inside shim_rx_drain()'s callbacks, like shim_rx_drain() itself.
 */
int shim_rx_feed(struct shim_rx *rx, uint32_t pid, const void *buf, size_t len);

/*
 * Close the connections that said no hello within hello_ms (counted in
 * conns_hello_timeout). Call now and then (the agent: every interval).
 * Returns how many were closed.
 */
unsigned int shim_rx_expire(struct shim_rx *rx);

/* closes every connection, removes the socket file; accepts NULL */
void shim_rx_close(struct shim_rx *rx);

#endif /* INFERTRACE_SHIM_RX_H */
