// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * bench_nccl - the NCCL benchmark's traced process (bench/nccl.sh): a tight
 * loop of ncclAllReduce calls through the real libnccl.so.2 of
 * /usr/local/cuda (dlopen, as PyTorch and vLLM's pynccl do). Without a GPU
 * the comm (a zeroed buffer) is refused at once, after the probe fired, so
 * what a probe adds to a call stands out.
 *
 * usage: bench_nccl [-n CALLS] [-w WAIT_FILE] [-W WARMUP] [-p PERIOD_NS]
 *   (BENCH_NCCL: another library)
 *   -p  paced: one call every PERIOD_NS (spinning between, so the CPU stays
 *       busy as a rank's launcher does), each call timed on its own; the
 *       rate of a rank (an all-reduce per layer per step: thousands a
 *       second), not the back-to-back loop that keeps the agent saturated
 * Prints "ready PID" once waiting for WAIT_FILE, then
 *   {"pid":P,"calls":N,"ns":TOTAL_NS,"ns_per_call":X}  (paced: TOTAL_NS is
 *   the calls' own time, the spinning left out)
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* ncclAllReduce(send, recv, count, datatype, op, comm, stream): nccl.h, NCCL 2.28 */
typedef int (*all_reduce_fn)(const void *, void *, size_t, int, int, void *, void *);

static unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	const char *lib =
	    getenv("BENCH_NCCL") ? getenv("BENCH_NCCL") : "/usr/local/cuda/lib64/libnccl.so.2";
	const char *wait_file = NULL;
	long calls = 1000000, warmup = 20000, period = 0;
	void *comm = calloc(1, 16 << 20), *h;
	volatile int sink = 0;
	unsigned long long t0, t1, busy = 0;
	all_reduce_fn ar;
	int opt;

	while ((opt = getopt(argc, argv, "n:w:W:p:")) != -1) {
		if (opt == 'n')
			calls = atol(optarg);
		else if (opt == 'w')
			wait_file = optarg;
		else if (opt == 'W')
			warmup = atol(optarg);
		else if (opt == 'p')
			period = atol(optarg);
		else
			return 2;
	}
	h = dlopen(lib, RTLD_NOW);
	ar = h ? (all_reduce_fn)dlsym(h, "ncclAllReduce") : NULL;
	if (!ar || !comm || calls < 0 || warmup < 0 || period < 0) {
		fprintf(stderr, "bench_nccl: cannot load ncclAllReduce from %s\n", lib);
		return 1;
	}
	for (long i = 0; i < warmup; i++)
		sink += ar((void *)0x1000, (void *)0x2000, 1024, 9, 0, comm, (void *)0x5000);
	printf("ready %d\n", getpid());
	fflush(stdout);
	while (wait_file && access(wait_file, F_OK))
		usleep(2000);
	if (period) {
		unsigned long long next = mono_ns();

		for (long i = 0; i < calls; i++) {
			while ((t0 = mono_ns()) < next)
				;
			sink +=
			    ar((void *)0x1000, (void *)0x2000, 1024, 9, 0, comm, (void *)0x5000);
			t1 = mono_ns();
			busy += t1 - t0;
			next = t0 + period;
		}
	} else {
		t0 = mono_ns();
		for (long i = 0; i < calls; i++)
			sink +=
			    ar((void *)0x1000, (void *)0x2000, 1024, 9, 0, comm, (void *)0x5000);
		t1 = mono_ns();
		busy = t1 - t0;
	}
	printf("{\"pid\":%d,\"calls\":%ld,\"ns\":%llu,\"ns_per_call\":%.2f}\n", getpid(), calls,
	       busy, calls ? (double)busy / calls : 0.0);
	return 0;
}
