// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * usdt_steps - a native "engine" that marks its steps with
 * include/infertrace/step.h (USDT) and launches CUDA work inside them
 * through the real libcudart (no GPU: the calls fail, the probes fire).
 *
 * usage: usdt_steps [-n STEPS] [-w GO_FILE] [-e EXIT_FILE]
 *   step i (from 0): INFERTRACE_STEP_BEGIN(tokens = 100 + i, batch = 1 + i % 4,
 *   kv_tokens = 1000 * (i + 1), phase = prefill for i == 0, else decode),
 *   3 cudaLaunchKernel calls, 2 ms of work, INFERTRACE_STEP_END(); 1 ms between
 *   steps. Prints {"pid":P,"tid":T} first, then one
 *   {"step":i,"begin":ns,"end":ns,"semaphore":S} per step (CLOCK_MONOTONIC,
 *   bracketing the probes; S: the begin probe's semaphore, non-zero while a
 *   tracer is attached), then {"done":true}; waits for EXIT_FILE (at most
 *   30 s).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "../../include/infertrace/step.h"
#include "cudart.h"
#include "harness.h"

INFERTRACE_STEP_DEFINE_SEMAPHORES();

int main(int argc, char **argv)
{
	struct dim3 grid = {4, 1, 1}, block = {64, 1, 1};
	struct step_opts o;
	launch_fn launch;

	if (step_opts_parse(argc, argv, false, &o)) {
		fprintf(stderr, "usage: %s [-n STEPS] [-w GO_FILE] [-e EXIT_FILE]\n", argv[0]);
		return 2;
	}
	launch = cudart_launch("usdt_steps");
	if (!launch)
		return 1;
	print_pid_tid();
	await_file(o.go, 30);
	for (int i = 0; i < o.steps; i++) {
		unsigned long long b = mono_ns(), e;

		INFERTRACE_STEP_BEGIN(100 + i, 1 + i % 4, 1000LL * (i + 1),
				      i ? INFERTRACE_PHASE_DECODE : INFERTRACE_PHASE_PREFILL);
		for (int k = 0; k < 3; k++)
			launch((void *)0xabc0, grid, block, NULL, 0, NULL);
		usleep(2000);
		INFERTRACE_STEP_END();
		e = mono_ns();
		printf("{\"step\":%d,\"begin\":%llu,\"end\":%llu,\"semaphore\":%u}\n", i, b, e,
		       (unsigned)infertrace_step_begin_semaphore);
		usleep(1000);
	}
	printf("{\"done\":true}\n");
	fflush(stdout);
	await_file(o.ex, 30);
	return 0;
}
