/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* common.bpf.h - helpers every hook family uses: filter, threads, records. */
#ifndef INFERTRACE_COMMON_BPF_H
#define INFERTRACE_COMMON_BPF_H

#include "maps.bpf.h"

static __always_inline struct runtime_cfg *get_rcfg(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&runtime_cfg, &zero);
}

static __always_inline void count_type(void *counts, __u32 type)
{
	__u64 *v;

	if (type >= EV_TYPE_MAX)
		return;
	v = bpf_map_lookup_elem(counts, &type);
	if (v)
		*v += 1; /* per-CPU slot: no atomics needed */
}

/* Is this (tgid) traced, and in which mode? NULL when not traced. */
static __always_inline struct traced_proc *traced(__u32 tgid)
{
	return bpf_map_lookup_elem(&traced_procs, &tgid);
}

/*
 * The per-thread entry of a traced thread, created on first sight. The fast
 * path is one hash lookup: a thread that has an entry is traced. Untraced
 * threads cost a second lookup in traced_procs.
 */
static __always_inline struct thread_stats *thread_get(__u32 tgid, __u32 tid)
{
	struct thread_stats *ts;
	__u32 zero = 0;

	ts = bpf_map_lookup_elem(&thread_stats, &tid);
	if (ts) {
		/* a reused tid from another process: forget the old thread */
		if (ts->pid == tgid)
			return ts;
		bpf_map_delete_elem(&thread_stats, &tid);
	}
	if (!traced(tgid))
		return NULL;
	ts = bpf_map_lookup_elem(&zero_thread, &zero);
	if (!ts)
		return NULL;
	ts->pid = tgid;
	ts->tid = tid;
	/* BPF_NOEXIST: a concurrent creator wins, we use its entry */
	bpf_map_update_elem(&thread_stats, &tid, ts, BPF_NOEXIST);
	ts->pid = 0;
	ts->tid = 0;
	return bpf_map_lookup_elem(&thread_stats, &tid);
}

static __always_inline struct thread_stats *thread_current(void)
{
	__u64 id = bpf_get_current_pid_tgid();

	return thread_get(id >> 32, (__u32)id);
}

/* Deep capture for this process? Cheap when no process is deep by itself. */
static __always_inline bool is_deep(struct runtime_cfg *rc, __u32 tgid)
{
	struct traced_proc *tp;

	if (!rc)
		return false;
	if (rc->mode == MODE_DEEP)
		return true;
	if (!rc->deep_procs)
		return false;
	tp = traced(tgid);
	return tp && (tp->flags & PROC_F_DEEP);
}

/*
 * Reserve a record of `size` bytes on `rb`, or count a drop for `type`.
 * The caller fills every field (the header via fill_hdr) and submits.
 */
static __always_inline void *reserve(void *rb, __u32 size, __u32 type)
{
	void *rec = bpf_ringbuf_reserve(rb, size, 0);

	if (!rec) {
		count_type(&drop_counts, type);
		return NULL;
	}
	count_type(&event_counts, type);
	return rec;
}

static __always_inline void fill_hdr(struct event_hdr *h, __u32 type, __u32 size, __u32 pid,
				     __u32 tid, __u64 ts)
{
	h->type = type;
	h->size = size;
	h->pid = pid;
	h->tid = tid;
	h->cpu = bpf_get_smp_processor_id();
	h->ts_ns = ts;
}

/*
 * Send the socket bytes a traced thread gathered (EV_NET_IO) and start over:
 * when its window is over (bpf/net.bpf.c) or when it leaves the CPU
 * (bpf/sched.bpf.c), so that bytes never wait for the thread's next send.
 */
static __always_inline void net_io_flush(struct thread_stats *ts)
{
	struct net_io_event *e;

	if (!ts->net_first_ns)
		return;
	e = reserve(&rb_misc, sizeof(*e), EV_NET_IO);
	if (e) {
		fill_hdr(&e->hdr, EV_NET_IO, sizeof(*e), ts->pid, ts->tid, ts->net_first_ns);
		e->dur_ns = ts->net_last_ns - ts->net_first_ns;
		e->tx_bytes = ts->net_tx_bytes;
		e->rx_bytes = ts->net_rx_bytes;
		bpf_ringbuf_submit(e, 0);
	}
	ts->net_first_ns = 0;
	ts->net_tx_bytes = 0;
	ts->net_rx_bytes = 0;
}

/*
 * Wake the agent once per WAKEUP_BYTES of records: it drains the rings every
 * 100 ms anyway, and a wake-up costs the producing thread an irq_work (a VM
 * exit on virtual machines). The record that makes the unread data cross a
 * multiple of WAKEUP_BYTES wakes; so a falling-behind agent is woken once
 * per batch, not once per record. Flags for bpf_ringbuf_submit().
 */
#define WAKEUP_BYTES (256 << 10)

static __always_inline __u64 batch_wakeup(void *rb, __u32 size)
{
	__u64 avail = bpf_ringbuf_query(rb, BPF_RB_AVAIL_DATA);

	return avail / WAKEUP_BYTES != (avail - size) / WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP
								     : BPF_RB_NO_WAKEUP;
}

/*
 * Per-CPU slot arrays (flight, nccl_slots): an mmap'able array map holding
 * per_cpu entries (a power of 2) for each CPU, and its cursor map (struct
 * slot_cursor per CPU). A CPU's slice has one writer, that CPU (uprobe
 * programs run with migration disabled): no lock, no atomic, no wake-up.
 * slot_begin() returns this CPU's next entry with its seq (the entry's
 * first member) at 0, or NULL (the CPU has no slice: the cursor lookup
 * fails past the map's size); the caller fills the entry, then
 * slot_end() publishes it: seq n + 1 for entry n, then the cursor.
 * agent/sources/slots.c reads them the same way for both maps.
 */
static __always_inline void *slot_begin(void *slots, void *cursors, __u32 per_cpu,
					struct slot_cursor **curp)
{
	__u32 cpu = bpf_get_smp_processor_id(), idx;
	struct slot_cursor *cur = bpf_map_lookup_elem(cursors, &cpu);
	__u64 *seq;

	if (!cur)
		return NULL;
	idx = cpu * per_cpu + (__u32)(cur->n & (per_cpu - 1));
	seq = bpf_map_lookup_elem(slots, &idx);
	if (!seq)
		return NULL;
	*seq = 0;
	asm volatile("" ::: "memory");
	*curp = cur;
	return seq;
}

/* the entry is complete: n + 1 in its seq, then the cursor; returns the new cursor */
static __always_inline __u64 slot_end(void *entry, struct slot_cursor *cur)
{
	__u64 n = cur->n + 1;

	asm volatile("" ::: "memory");
	*(__u64 *)entry = n;
	cur->n = n;
	return n;
}

/* floor(log2(v)) without loops, so the verifier sees straight-line code */
static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, shift;

	shift = (v > 0xFFFFFFFFULL) << 5;
	v >>= shift;
	r |= shift;
	shift = (v > 0xFFFF) << 4;
	v >>= shift;
	r |= shift;
	shift = (v > 0xFF) << 3;
	v >>= shift;
	r |= shift;
	shift = (v > 0xF) << 2;
	v >>= shift;
	r |= shift;
	shift = (v > 0x3) << 1;
	v >>= shift;
	r |= shift;
	r |= (v >> 1);
	return r;
}

/*
 * Histogram slot of a duration: slot 0 holds [0, 2) us, slot i >= 1 holds
 * [2^i, 2^(i+1)) us, the last slot everything above. Must match
 * agent/sources/aggregate.c (hist_lower_us).
 */
static __always_inline __u32 hist_slot(__u64 ns)
{
	__u32 slot = log2_u64(ns / 1000);

	if (slot >= HIST_SLOTS)
		slot = HIST_SLOTS - 1;
	/* keep the mask: clang drops it after the clamp, the verifier needs it */
	asm volatile("%[s] &= %[m]" : [s] "+r"(slot) : [m] "i"(HIST_SLOTS - 1));
	return slot;
}

#endif /* INFERTRACE_COMMON_BPF_H */
