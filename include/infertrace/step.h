/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * infertrace/step.h - mark inference steps for infertrace from a native
 * serving engine (C or C++), at no cost when nobody traces.
 *
 *	#include <infertrace/step.h>
 *
 *	INFERTRACE_STEP_BEGIN(tokens, batch, kv_tokens, INFERTRACE_PHASE_DECODE);
 *	run_the_step();
 *	INFERTRACE_STEP_END();
 *
 * Each macro is one USDT probe (provider "infertrace", probes "step_begin"
 * and "step_end", <sys/sdt.h> from systemtap-sdt-dev): a nop instruction and
 * an ELF note. The agent attaches to them (uprobe at the nop) to read the
 * arguments; when it is not attached, they cost one nop. Begin and end must
 * be called on the same thread; steps do not nest. Arguments are evaluated
 * only when the probe is enabled (semaphore), so expensive ones are fine.
 *
 *   tokens     prefill: prompt tokens computed in the step; decode: batch size
 *   batch      requests in the step
 *   kv_tokens  sum of the requests' context lengths (-1 when unknown)
 *   phase      INFERTRACE_PHASE_*
 *
 * The probes may live in the executable or in a shared library (a Python
 * extension, loaded with dlopen() at any time): the agent looks in every
 * file a traced process maps executable. In a library, build with
 * -fvisibility=hidden (or one module's semaphores may interpose another's,
 * and the code would read a semaphore the kernel does not count up).
 *
 * The agent turns each begin/end pair into one `step` record with
 * "source":"usdt" (docs/events.md, docs/diagnosis.md); the values must
 * match enum diag_phase in correlator/include/diagnose.h.
 */
#ifndef INFERTRACE_STEP_H
#define INFERTRACE_STEP_H

#define INFERTRACE_PHASE_UNKNOWN 0
#define INFERTRACE_PHASE_PREFILL 1
#define INFERTRACE_PHASE_DECODE 2
#define INFERTRACE_PHASE_MIXED 3

#if defined(__linux__) && !defined(INFERTRACE_NO_USDT) && __has_include(<sys/sdt.h>)
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

/*
 * Semaphores: the kernel increments them while a uprobe is attached
 * (uprobe ref_ctr_offset). One translation unit defines them with
 * INFERTRACE_STEP_DEFINE_SEMAPHORES().
 */
__extension__ extern unsigned short infertrace_step_begin_semaphore
    __attribute__((section(".probes")));
__extension__ extern unsigned short infertrace_step_end_semaphore
    __attribute__((section(".probes")));

#define INFERTRACE_STEP_BEGIN(tokens, batch, kv_tokens, phase)                                     \
	do {                                                                                       \
		if (__builtin_expect(infertrace_step_begin_semaphore, 0))                          \
			STAP_PROBE4(infertrace, step_begin, (long long)(tokens),                   \
				    (long long)(batch), (long long)(kv_tokens), (int)(phase));     \
	} while (0)
#define INFERTRACE_STEP_END()                                                                      \
	do {                                                                                       \
		if (__builtin_expect(infertrace_step_end_semaphore, 0))                            \
			STAP_PROBE(infertrace, step_end);                                          \
	} while (0)
/* one translation unit of the engine defines the semaphores */
#define INFERTRACE_STEP_DEFINE_SEMAPHORES()                                                        \
	__extension__ unsigned short infertrace_step_begin_semaphore                               \
	    __attribute__((section(".probes"))) = 0;                                               \
	__extension__ unsigned short infertrace_step_end_semaphore                                 \
	    __attribute__((section(".probes"))) = 0
#else
#define INFERTRACE_STEP_BEGIN(tokens, batch, kv_tokens, phase) ((void)0)
#define INFERTRACE_STEP_END() ((void)0)
#define INFERTRACE_STEP_DEFINE_SEMAPHORES() extern int infertrace_step_unused_
#endif

#endif /* INFERTRACE_STEP_H */
