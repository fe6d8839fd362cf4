// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * usdt.bpf.c - the step probes of include/infertrace/step.h (provider
 * "infertrace", probes step_begin(tokens, batch, kv_tokens, phase) and
 * step_end()). The agent attaches them per traced process to each file it
 * maps that has them, executable or library (agent/sources/usdt.c; libbpf resolves
 * the probe sites, argument locations and semaphores from the ELF notes).
 * One record per probe hit, on rb_misc; the agent hands them to the step
 * segmenter.
 */
#include "lib/common.bpf.h"
#include <bpf/usdt.bpf.h>

static __always_inline int step_mark(__u32 kind, long long tokens, long long batch, long long kv,
				     int phase)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct step_mark_event *e;

	if (!traced(id >> 32))
		return 0;
	e = reserve(&rb_misc, sizeof(*e), EV_STEP_MARK);
	if (!e)
		return 0;
	fill_hdr(&e->hdr, EV_STEP_MARK, sizeof(*e), id >> 32, (__u32)id, bpf_ktime_get_ns());
	e->kind = kind;
	e->phase = phase;
	e->tokens = tokens;
	e->batch = batch;
	e->kv_tokens = kv;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(infertrace_step_begin, long long tokens, long long batch, long long kv, int phase)
{
	return step_mark(STEP_MARK_BEGIN, tokens, batch, kv, phase);
}

SEC("usdt")
int BPF_USDT(infertrace_step_end)
{
	return step_mark(STEP_MARK_END, -1, -1, -1, 0);
}
