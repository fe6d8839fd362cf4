/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* core_fixes.bpf.h - CO-RE flavors for fields renamed across kernels. */
#ifndef INFERTRACE_CORE_FIXES_BPF_H
#define INFERTRACE_CORE_FIXES_BPF_H

#include <bpf/bpf_core_read.h>

/*
 * task_struct::state was renamed to __state in kernel commit 2f064a59a11f
 * ("sched: Change task_struct::state", v5.14).
 */
struct task_struct___o {
	volatile long int state;
} __attribute__((preserve_access_index));

struct task_struct___x {
	unsigned int __state;
} __attribute__((preserve_access_index));

static __always_inline __s64 get_task_state(void *task)
{
	struct task_struct___x *t = task;

	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___o *)task, state);
}

#endif /* INFERTRACE_CORE_FIXES_BPF_H */
