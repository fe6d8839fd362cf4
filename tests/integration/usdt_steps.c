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

INFERTRACE_STEP_DEFINE_SEMAPHORES();

#define CUDA_LIB "/usr/local/cuda/lib64/libcudart.so"

struct dim3 {
	unsigned x, y, z;
};
typedef int (*launch_fn)(const void *, struct dim3, struct dim3, void **, size_t, void *);

static unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void wait_file(const char *path, int secs)
{
	for (int i = 0; path && i < secs * 100 && access(path, F_OK); i++)
		usleep(10000);
}

int main(int argc, char **argv)
{
	const char *go = NULL, *ex = NULL;
	struct dim3 grid = { 4, 1, 1 }, block = { 64, 1, 1 };
	int steps = 30, opt;
	launch_fn launch;
	void *rt;

	while ((opt = getopt(argc, argv, "n:w:e:")) != -1) {
		switch (opt) {
		case 'n':
			steps = atoi(optarg);
			break;
		case 'w':
			go = optarg;
			break;
		case 'e':
			ex = optarg;
			break;
		default:
			fprintf(stderr, "usage: %s [-n STEPS] [-w GO_FILE] [-e EXIT_FILE]\n", argv[0]);
			return 2;
		}
	}
	rt = dlopen(CUDA_LIB, RTLD_NOW);
	launch = rt ? (launch_fn)dlsym(rt, "cudaLaunchKernel") : NULL;
	if (!launch) {
		fprintf(stderr, "usdt_steps: cannot load %s: %s\n", CUDA_LIB, dlerror());
		return 1;
	}
	printf("{\"pid\":%d,\"tid\":%ld}\n", getpid(), (long)syscall(SYS_gettid));
	fflush(stdout);
	wait_file(go, 30);
	for (int i = 0; i < steps; i++) {
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
	wait_file(ex, 30);
	return 0;
}
