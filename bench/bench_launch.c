// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * bench_launch - the benchmark's traced process: a tight loop of calls to
 * cudaLaunchKernel through the real libcudart (dlopen, as inference engines
 * do). Without a driver each call fails fast (~10 ns), so what a probe adds
 * to a call stands out clearly.
 *
 * usage: bench_launch [-n CALLS] [-w WAIT_FILE] [-W WARMUP]
 *   -n  timed calls (default 2000000)
 *   -w  after warm-up, wait until WAIT_FILE exists (lets a probe attach);
 *       SIGUSR1 ends the wait too
 *   -W  untimed warm-up calls before the wait (default 20000)
 * Prints "ready PID" (flushed) once waiting, then one JSON line:
 *   {"pid":P,"calls":N,"ns":TOTAL_NS,"ns_per_call":X}
 * Pin it with taskset; bench/run.sh does.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define CUDA_RT "/usr/local/cuda/lib64/libcudart.so"

struct dim3 {
	unsigned x, y, z;
};

typedef int (*launch_fn)(const void *, struct dim3, struct dim3, void **, size_t, void *);

static volatile sig_atomic_t go;

static void on_usr1(int sig)
{
	(void)sig;
	go = 1;
}

static long parse_long(const char *s, const char *what)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0) {
		fprintf(stderr, "bench_launch: bad %s: %s\n", what, s);
		exit(2);
	}
	return v;
}

static unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	const char *lib = getenv("BENCH_CUDART") ? getenv("BENCH_CUDART") : CUDA_RT;
	const char *wait_file = NULL;
	long calls = 2000000, warmup = 20000;
	struct dim3 grid = {128, 1, 1}, block = {256, 1, 1};
	volatile int sink = 0;
	unsigned long long t0, t1;
	launch_fn launch;
	void *h;
	int opt;

	while ((opt = getopt(argc, argv, "n:w:W:")) != -1) {
		switch (opt) {
		case 'n':
			calls = parse_long(optarg, "-n");
			break;
		case 'w':
			wait_file = optarg;
			break;
		case 'W':
			warmup = parse_long(optarg, "-W");
			break;
		default:
			fprintf(stderr, "usage: %s [-n CALLS] [-w WAIT_FILE] [-W WARMUP]\n",
				argv[0]);
			return 2;
		}
	}
	signal(SIGUSR1, on_usr1);

	h = dlopen(lib, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "bench_launch: cannot load %s: %s\n", lib, dlerror());
		return 1;
	}
	launch = (launch_fn)dlsym(h, "cudaLaunchKernel");
	if (!launch) {
		fprintf(stderr, "bench_launch: %s has no cudaLaunchKernel\n", lib);
		return 1;
	}

	/* fault in the library's paths (and its one-time driver lookup) untimed */
	for (long i = 0; i < warmup; i++)
		sink += launch((void *)0xabc0, grid, block, NULL, 0, NULL);

	printf("ready %d\n", getpid());
	fflush(stdout);
	if (wait_file)
		while (!go && access(wait_file, F_OK))
			usleep(2000);

	t0 = mono_ns();
	for (long i = 0; i < calls; i++)
		sink += launch((void *)0xabc0, grid, block, NULL, 0, NULL);
	t1 = mono_ns();

	printf("{\"pid\":%d,\"calls\":%ld,\"ns\":%llu,\"ns_per_call\":%.2f}\n", getpid(), calls,
	       t1 - t0, calls ? (double)(t1 - t0) / calls : 0.0);
	return 0;
}
