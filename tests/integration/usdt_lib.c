// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * usdt_lib - an "engine" in a shared library, as a Python extension is one:
 * it marks its steps with include/infertrace/step.h, so the USDT notes and
 * the semaphores live in this library, not in the executable that loads it
 * (tests/integration/usdt_dlopen.c, built as libusdt_steps.so by the
 * Makefile with hidden visibility: the semaphores the kernel counts up are
 * the ones this library's code reads, whatever else the process loads).
 *
 * usdt_lib_steps(steps, work, arg): step i (from 0):
 * INFERTRACE_STEP_BEGIN(tokens = 200 + i, batch = 1 + i % 4,
 * kv_tokens = 1000 * (i + 1), phase = prefill for i == 0, else decode),
 * work(arg), 2 ms of work, INFERTRACE_STEP_END(); 1 ms between steps. Prints
 * one {"step":i,"begin":ns,"end":ns,"semaphore":S} per step, as usdt_steps
 * does. usdt_lib_semaphore(end): the begin (0) or end (1) probe's semaphore
 * (non-zero while a tracer is attached).
 */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "../../include/infertrace/step.h"
#include "harness.h"

#define EXPORT __attribute__((visibility("default")))

INFERTRACE_STEP_DEFINE_SEMAPHORES();

EXPORT unsigned usdt_lib_semaphore(int end)
{
	return end ? *(volatile unsigned short *)&infertrace_step_end_semaphore
		   : *(volatile unsigned short *)&infertrace_step_begin_semaphore;
}

EXPORT void usdt_lib_steps(int steps, void (*work)(void *), void *arg)
{
	for (int i = 0; i < steps; i++) {
		unsigned long long b = mono_ns(), e;

		INFERTRACE_STEP_BEGIN(200 + i, 1 + i % 4, 1000LL * (i + 1),
				      i ? INFERTRACE_PHASE_DECODE : INFERTRACE_PHASE_PREFILL);
		work(arg);
		usleep(2000);
		INFERTRACE_STEP_END();
		e = mono_ns();
		printf("{\"step\":%d,\"begin\":%llu,\"end\":%llu,\"semaphore\":%u}\n", i, b, e,
		       usdt_lib_semaphore(0));
		usleep(1000);
	}
	fflush(stdout);
}
