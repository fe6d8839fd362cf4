// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nest_calls - runtime calls that enter the driver, beside direct driver
 * calls, from known threads (tests/integration/cuda_nested.sh). Loads the
 * nesting runtime double (tests/fakes/nest_cudart.c, build/tests/fakes/nest/
 * libcudart.so.13, found beside this binary) and the stub libcuda.
 *
 * usage: nest_calls [-t THREADS] [-n ROUNDS] [-w GO_FILE]
 * A round, on each thread:
 *   cudaLaunchKernel       -> cuLaunchKernel (nested)
 *   cudaLaunchKernelExC    -> cuLaunchKernelEx (nested)
 *   cudaGraphLaunch        -> cuGraphLaunch (nested)
 *   cudaLaunchKernel(NULL)    fails before the driver
 *   cuLaunchKernel            direct, right after that failed runtime call
 *   cuGraphLaunch             direct
 *   cudaStreamSynchronize  -> cuStreamSynchronize (nested)
 *   cuStreamSynchronize       direct
 * Prints {"pid":P,"tids":[...]} before GO_FILE, {"done":true} at the end.
 */
#include <dlfcn.h>
#include <limits.h>
#include <string.h>

#include "cudart.h"
#include "harness.h"

#define CUDA_DRV "/usr/local/cuda/lib64/stubs/libcuda.so"
#define MAX_THREADS 8

static struct {
	launch_fn launch;
	int (*launch_ex)(const struct launch_config *, const void *, void **);
	int (*graph)(void *, void *);
	int (*sync)(void *);
	int (*cu_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			 unsigned, void *, void **, void **);
	int (*cu_graph)(void *, void *);
	int (*cu_sync)(void *);
} f;
static int rounds = 20;
static const char *go;
static pthread_barrier_t ready;
static pid_t tids[MAX_THREADS];

static void *worker(void *arg)
{
	int i = (int)(long)arg;
	struct dim3 g = {2, 1, 1}, b = {64, 1, 1};
	struct launch_config cfg = {{2, 1, 1}, {64, 1, 1}, 0, (void *)0x5, NULL, 0};
	char func;

	tids[i] = (pid_t)syscall(SYS_gettid);
	pthread_barrier_wait(&ready);
	await_file(go, 0);
	for (int r = 0; r < rounds; r++) {
		f.launch(&func, g, b, NULL, 0, (void *)0x5);
		f.launch_ex(&cfg, &func, NULL);
		f.graph((void *)0x77, (void *)0x5);
		f.launch(NULL, g, b, NULL, 0, (void *)0x5);
		f.cu_launch(&func, 2, 1, 1, 64, 1, 1, 0, (void *)0x5, NULL, NULL);
		f.cu_graph((void *)0x77, (void *)0x5);
		f.sync((void *)0x5);
		f.cu_sync((void *)0x5);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	char path[PATH_MAX], *slash;
	int threads = 2, opt;
	pthread_t th[MAX_THREADS];
	void *rt, *drv;

	while ((opt = getopt(argc, argv, "t:n:w:")) != -1) {
		if (thread_opt(opt, optarg, &threads, &rounds))
			continue;
		switch (opt) {
		case 'w':
			go = optarg;
			break;
		default:
			fprintf(stderr,
				"usage: nest_calls [-t THREADS] [-n ROUNDS] [-w GO_FILE]\n");
			return 2;
		}
	}
	if (threads < 1 || threads > MAX_THREADS || rounds < 1)
		return 2;
	/* build/tests/integration/nest_calls -> build/tests/fakes/nest/libcudart.so.13 */
	if (!realpath("/proc/self/exe", path) || !(slash = strrchr(path, '/')))
		return 1;
	snprintf(slash, sizeof(path) - (size_t)(slash - path), "/../fakes/nest/libcudart.so.13");
	rt = dlopen(path, RTLD_NOW);
	drv = dlopen(CUDA_DRV, RTLD_NOW);
	if (!rt || !drv) {
		fprintf(stderr, "nest_calls: cannot load %s or %s: %s\n", path, CUDA_DRV,
			dlerror());
		return 1;
	}
	/* each one missing is named (need_sym) */
	f.launch = (launch_fn)need_sym("nest_calls", rt, "cudaLaunchKernel");
	f.launch_ex = need_sym("nest_calls", rt, "cudaLaunchKernelExC");
	f.graph = need_sym("nest_calls", rt, "cudaGraphLaunch");
	f.sync = need_sym("nest_calls", rt, "cudaStreamSynchronize");
	f.cu_launch = need_sym("nest_calls", drv, "cuLaunchKernel");
	f.cu_graph = need_sym("nest_calls", drv, "cuGraphLaunch");
	f.cu_sync = need_sym("nest_calls", drv, "cuStreamSynchronize");
	if (!f.launch || !f.launch_ex || !f.graph || !f.sync || !f.cu_launch || !f.cu_graph ||
	    !f.cu_sync)
		return 1;
	start_workers(th, threads, worker, &ready, tids);
	printf("]}\n");
	fflush(stdout);
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	printf("{\"done\":true}\n");
	fflush(stdout);
	return 0;
}
