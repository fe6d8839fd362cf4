// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * syscalls.bpf.c - per traced thread and syscall number: count, total and
 * max latency and a log2 histogram (syscall_stats), plus single events for
 * syscalls slower than the threshold (all of them in deep mode).
 *
 * raw_syscalls:sys_enter/sys_exit cover every syscall with two hooks; the
 * entry time and number wait in the thread's thread_stats entry.
 */
#include "lib/common.bpf.h"
#include <bpf/bpf_tracing.h>

static __always_inline int handle_enter(long id)
{
	struct thread_stats *ts = thread_current();

	if (!ts)
		return 0;
	ts->sc_start_ns = bpf_ktime_get_ns();
	ts->sc_nr = (__u32)id;
	return 0;
}

static __always_inline int handle_exit(long ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid, tgid = pid_tgid >> 32;
	struct syscall_key key = {};
	struct syscall_stats *st;
	struct thread_stats *ts;
	struct runtime_cfg *rc;
	__u64 now, dur;

	ts = bpf_map_lookup_elem(&thread_stats, &tid);
	if (!ts || ts->pid != tgid || !ts->sc_start_ns)
		return 0;
	now = bpf_ktime_get_ns();
	dur = now - ts->sc_start_ns;
	key.tid = tid;
	key.nr = ts->sc_nr;

	st = bpf_map_lookup_elem(&syscall_stats, &key);
	if (!st) {
		struct syscall_stats zero = {.pid = tgid};

		bpf_map_update_elem(&syscall_stats, &key, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&syscall_stats, &key);
	}
	if (st) {
		st->count++;
		st->total_ns += dur;
		if (dur > st->max_ns)
			st->max_ns = dur;
		st->hist[hist_slot(dur)]++;
	}

	rc = get_rcfg();
	if (rc && (dur >= rc->syscall_thresh_ns || is_deep(rc, tgid))) {
		struct syscall_event *e = reserve(&rb_misc, sizeof(*e), EV_SYSCALL);

		if (e) {
			fill_hdr(&e->hdr, EV_SYSCALL, sizeof(*e), tgid, tid, ts->sc_start_ns);
			e->dur_ns = dur;
			e->ret = ret;
			e->nr = key.nr;
			e->pad = 0;
			bpf_ringbuf_submit(e, 0);
		}
	}
	ts->sc_start_ns = 0;
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs *regs, long id)
{
	return handle_enter(id);
}

SEC("raw_tp/sys_enter")
int BPF_PROG(on_sys_enter_raw, struct pt_regs *regs, long id)
{
	return handle_enter(id);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
	return handle_exit(ret);
}

SEC("raw_tp/sys_exit")
int BPF_PROG(on_sys_exit_raw, struct pt_regs *regs, long ret)
{
	return handle_exit(ret);
}
