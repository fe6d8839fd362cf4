// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * sched.bpf.c - off-CPU intervals and run-queue wait of traced threads.
 *
 * sched_switch sees both sides of every context switch: the thread leaving
 * (off-CPU starts; blocked if it was sleeping, preempted if still runnable,
 * in which case its run-queue wait starts too) and the thread arriving
 * (off-CPU and run-queue wait end). sched_wakeup(_new) starts the run-queue
 * wait of a blocked thread. Sums and log2 histograms stay in thread_stats;
 * single intervals above the thresholds (all of them in deep mode) go to
 * rb_sched. A thread leaving the CPU also sends the socket bytes it gathered
 * (net_io_flush()).
 */
#include "lib/common.bpf.h"
#include "core_fixes.bpf.h"
#include <bpf/bpf_tracing.h>

#define TASK_RUNNING 0

static __always_inline void on_switch_out(struct task_struct *prev, struct task_struct *next,
					  bool preempt, __u64 now)
{
	__u32 tgid = BPF_CORE_READ(prev, tgid), tid = BPF_CORE_READ(prev, pid);
	struct thread_stats *ts;

	if (!tid)
		return; /* idle task */
	ts = thread_get(tgid, tid);
	if (!ts)
		return;
	/* the `preempt` argument misses yields and exits; a runnable state doesn't */
	bool runnable = preempt || get_task_state(prev) == TASK_RUNNING;

	net_io_flush(ts);
	ts->offcpu_start_ns = now;
	ts->offcpu_cause = runnable ? OFFCPU_PREEMPTED : OFFCPU_BLOCKED;
	ts->runq_start_ns = runnable ? now : 0;
	ts->offcpu_by_tid = BPF_CORE_READ(next, pid);
	ts->offcpu_by_pid = BPF_CORE_READ(next, tgid);
	bpf_probe_read_kernel_str(ts->offcpu_by_comm, sizeof(ts->offcpu_by_comm), next->comm);
}

static __always_inline void on_switch_in(struct task_struct *next, __u64 now)
{
	__u32 tgid = BPF_CORE_READ(next, tgid), tid = BPF_CORE_READ(next, pid);
	struct runtime_cfg *rc = get_rcfg();
	struct thread_stats *ts;
	bool deep;

	if (!tid || !rc)
		return;
	ts = bpf_map_lookup_elem(&thread_stats, &tid);
	if (!ts || ts->pid != tgid)
		return; /* first seen on switch-out, not here */
	deep = is_deep(rc, tgid);

	if (ts->runq_start_ns && now > ts->runq_start_ns) {
		__u64 wait = now - ts->runq_start_ns;

		ts->runq_ns += wait;
		ts->runq_count++;
		ts->runq_hist[hist_slot(wait)]++;
		if (deep || wait >= rc->runq_thresh_ns) {
			struct runq_event *e = reserve(&rb_sched, sizeof(*e), EV_RUNQ);

			if (e) {
				fill_hdr(&e->hdr, EV_RUNQ, sizeof(*e), tgid, tid,
					 ts->runq_start_ns);
				e->dur_ns = wait;
				bpf_ringbuf_submit(e, 0);
			}
		}
	}
	ts->runq_start_ns = 0;

	if (ts->offcpu_start_ns && now > ts->offcpu_start_ns) {
		__u64 off = now - ts->offcpu_start_ns;

		if (ts->offcpu_cause == OFFCPU_PREEMPTED)
			ts->offcpu_preempted_ns += off;
		else
			ts->offcpu_blocked_ns += off;
		ts->offcpu_count++;
		ts->offcpu_hist[hist_slot(off)]++;
		if (deep || off >= rc->offcpu_thresh_ns) {
			struct offcpu_event *e = reserve(&rb_sched, sizeof(*e), EV_OFFCPU);

			if (e) {
				fill_hdr(&e->hdr, EV_OFFCPU, sizeof(*e), tgid, tid,
					 ts->offcpu_start_ns);
				e->dur_ns = off;
				e->cause = ts->offcpu_cause;
				e->by_tid = ts->offcpu_by_tid;
				__builtin_memcpy(e->by_comm, ts->offcpu_by_comm,
						 sizeof(e->by_comm));
				e->by_pid = ts->offcpu_by_pid;
				e->pad = 0;
				bpf_ringbuf_submit(e, 0);
			}
		}
	}
	ts->offcpu_start_ns = 0;
}

static __always_inline int handle_switch(bool preempt, struct task_struct *prev,
					 struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();

	on_switch_out(prev, next, preempt, now);
	on_switch_in(next, now);
	return 0;
}

static __always_inline int handle_wakeup(struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid), tid = BPF_CORE_READ(p, pid);
	struct thread_stats *ts;

	ts = bpf_map_lookup_elem(&thread_stats, &tid);
	if (!ts || ts->pid != tgid)
		return 0;
	/* a wake-up of a thread already runnable (preempted) keeps the earlier start */
	if (!ts->runq_start_ns)
		ts->runq_start_ns = bpf_ktime_get_ns();
	return 0;
}

/* tp_btf: typed arguments, cheapest dispatch; raw_tp where BTF tracing is absent */
SEC("tp_btf/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return handle_switch(preempt, prev, next);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(on_sched_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return handle_switch(preempt, prev, next);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_sched_wakeup, struct task_struct *p)
{
	return handle_wakeup(p);
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(on_sched_wakeup_raw, struct task_struct *p)
{
	return handle_wakeup(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_sched_wakeup_new, struct task_struct *p)
{
	return handle_wakeup(p);
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(on_sched_wakeup_new_raw, struct task_struct *p)
{
	return handle_wakeup(p);
}
