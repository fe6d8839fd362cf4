// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * vllm_replay - the traced process of bench/vllm.sh (issue 20): replays the
 * CUDA API call sequence of a real vLLM decode step and prefill step (as
 * bench/vllm_steps.py extracts it from the H100 trace in ../shared/data),
 * through the real libcudart and the stub libcuda, each call at its offset
 * in the step, each step as long as in the trace. Without a driver every call
 * fails fast, but a uprobe on it fires all the same, so what the agent adds
 * to the launching thread stands out.
 *
 * usage: vllm_replay -f SEQ [-r ROUNDS] [-n DECODES] [-w WAIT_FILE]
 *   -f  the sequence file (vllm_steps.py's output)
 *   -r  rounds of one prefill followed by DECODES decode steps (default 5)
 *   -n  decode steps per round (default 9, as in the trace)
 *   -w  wait until WAIT_FILE exists before the first step
 * Environment: VLLM_RT, VLLM_DRV: the libraries to load instead of CUDA_RT,
 * CUDA_DRV (bench/vllm.sh loads private copies: see there).
 * Prints {"pid":P,"tid":T} (flushed) once ready, then one line per step:
 *   {"step":"decode","calls":N,"cpu_ns":C,"in_call_ns":X,"wall_ns":W}
 * cpu_ns: the thread's CPU time over the step's calls (CLOCK_THREAD_CPUTIME_ID:
 * uprobe traps and BPF programs run on the thread and count; time waiting for
 * a CPU on a loaded machine does not); in_call_ns: the wall time inside the
 * CUDA calls, measured around each call with CLOCK_MONOTONIC (vDSO: no
 * syscall), which preemption inflates.
 *
 * Pacing: a call whose offset is 100 us or more ahead is slept to; closer
 * ones run at once, so the thread never spins; each step then sleeps out the
 * rest of its trace duration.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#define CUDA_RT "/usr/local/cuda/lib64/libcudart.so"
#define CUDA_DRV "/usr/local/cuda/lib64/stubs/libcuda.so"
#define MAX_NAMES 64
#define NAME_LEN 64

struct dim3 {
	unsigned x, y, z;
};

/* cudaLaunchConfig_t's prefix (driver_types.h): grid, block, shmem, stream, attrs */
struct rt_config {
	struct dim3 grid, block;
	size_t shmem;
	void *stream;
	void *attrs;
	unsigned n_attrs;
};

enum kind { K_GENERIC, K_LAUNCH, K_LAUNCH_EXC, K_GRAPH, K_MEMCPY_ASYNC, K_SYNC, K_CU_LAUNCH };

struct api {
	char name[NAME_LEN];
	enum kind kind;
	void *fn;
};

struct call {
	double off_us;
	int api;
};

struct step {
	char name[16];
	double dur_us;
	struct call *calls;
	int n;
};

static struct api apis[MAX_NAMES];
static int n_apis;
/* pointer arguments of the calls replayed generically point here */
static char scratch[1 << 16] __attribute__((aligned(64)));

static unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void sleep_until(unsigned long long t)
{
	struct timespec ts = {(time_t)(t / 1000000000ULL), (long)(t % 1000000000ULL)};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static enum kind kind_of(const char *n)
{
	if (!strcmp(n, "cudaLaunchKernel"))
		return K_LAUNCH;
	if (!strcmp(n, "cudaLaunchKernelExC"))
		return K_LAUNCH_EXC;
	if (!strcmp(n, "cudaGraphLaunch"))
		return K_GRAPH;
	if (!strcmp(n, "cudaMemcpyAsync"))
		return K_MEMCPY_ASYNC;
	if (!strcmp(n, "cudaStreamSynchronize"))
		return K_SYNC;
	if (!strcmp(n, "cuLaunchKernel"))
		return K_CU_LAUNCH;
	return K_GENERIC;
}

static int api_index(const char *n, void *rt, void *drv)
{
	for (int i = 0; i < n_apis; i++)
		if (!strcmp(apis[i].name, n))
			return i;
	if (n_apis == MAX_NAMES || strlen(n) >= NAME_LEN)
		return -1;
	snprintf(apis[n_apis].name, NAME_LEN, "%s", n);
	apis[n_apis].kind = kind_of(n);
	apis[n_apis].fn = dlsym(!strncmp(n, "cuda", 4) ? rt : drv, n);
	if (!apis[n_apis].fn)
		fprintf(stderr, "vllm_replay: %s not found (replayed as a no-op)\n", n);
	return n_apis++;
}

typedef int (*generic_fn)(void *, void *, void *, void *, void *, void *);
typedef int (*launch_fn)(const void *, struct dim3, struct dim3, void **, size_t, void *);
typedef int (*exc_fn)(const struct rt_config *, const void *, void **);
typedef int (*graph_fn)(void *, void *);
typedef int (*copy_fn)(void *, const void *, size_t, int, void *);
typedef int (*sync_fn)(void *);
typedef int (*cu_launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			    unsigned, void *, void **, void **);

static void call_one(const struct api *a)
{
	static const struct rt_config cfg = {{128, 1, 1}, {256, 1, 1}, 0, NULL, NULL, 0};
	struct dim3 g = {128, 1, 1}, b = {256, 1, 1};
	void *s = scratch;

	if (!a->fn)
		return;
	switch (a->kind) {
	case K_LAUNCH:
		((launch_fn)a->fn)((void *)0x1000, g, b, NULL, 0, NULL);
		break;
	case K_LAUNCH_EXC:
		((exc_fn)a->fn)(&cfg, (void *)0x1000, NULL);
		break;
	case K_GRAPH:
		((graph_fn)a->fn)((void *)0x2000, NULL);
		break;
	case K_MEMCPY_ASYNC:
		((copy_fn)a->fn)(scratch, scratch + 4096, 64, 2 /* device to host */, NULL);
		break;
	case K_SYNC:
		((sync_fn)a->fn)(NULL);
		break;
	case K_CU_LAUNCH:
		((cu_launch_fn)a->fn)((void *)0x3000, 128, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
		break;
	case K_GENERIC:
		/* queries and attribute calls: every pointer argument points at scratch */
		((generic_fn)a->fn)(s, s, s, s, s, s);
		break;
	}
}

static int read_steps(const char *path, struct step *st, int max, void *rt, void *drv)
{
	FILE *f = fopen(path, "r");
	char line[256], name[NAME_LEN];
	int n = -1, filled = 0;

	if (!f) {
		fprintf(stderr, "vllm_replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		double v;
		int cnt;

		if (sscanf(line, "step %15s %lf %d", st[n + 1 < max ? n + 1 : 0].name, &v, &cnt) ==
		    3) {
			if (++n == max || cnt <= 0)
				break;
			st[n].dur_us = v;
			st[n].calls = calloc(cnt, sizeof(*st[n].calls));
			st[n].n = 0;
			filled = cnt;
			if (!st[n].calls)
				break;
			continue;
		}
		if (n < 0 || st[n].n >= filled || sscanf(line, "%lf %63s", &v, name) != 2)
			continue;
		st[n].calls[st[n].n].off_us = v;
		st[n].calls[st[n].n].api = api_index(name, rt, drv);
		if (st[n].calls[st[n].n].api >= 0)
			st[n].n++;
	}
	fclose(f);
	return n + 1;
}

static unsigned long long thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void run_step(const struct step *st)
{
	unsigned long long c0 = thread_cpu_ns(), t0 = mono_ns(), in_call = 0, c1;

	for (int i = 0; i < st->n; i++) {
		unsigned long long at = t0 + (unsigned long long)(st->calls[i].off_us * 1000), a, b;

		if (at >= mono_ns() + 100000)
			sleep_until(at);
		a = mono_ns();
		call_one(&apis[st->calls[i].api]);
		b = mono_ns();
		in_call += b - a;
	}
	c1 = thread_cpu_ns();
	sleep_until(t0 + (unsigned long long)(st->dur_us * 1000));
	printf("{\"step\":\"%s\",\"calls\":%d,\"cpu_ns\":%llu,\"in_call_ns\":%llu,"
	       "\"wall_ns\":%llu}\n",
	       st->name, st->n, c1 - c0, in_call, mono_ns() - t0);
}

int main(int argc, char **argv)
{
	const char *seq = NULL, *wait_file = NULL;
	int rounds = 5, decodes = 9, opt, n;
	struct step st[2] = {};
	const struct step *prefill = NULL, *decode = NULL;
	void *rt, *drv;

	while ((opt = getopt(argc, argv, "f:r:n:w:")) != -1) {
		switch (opt) {
		case 'f':
			seq = optarg;
			break;
		case 'r':
			rounds = atoi(optarg);
			break;
		case 'n':
			decodes = atoi(optarg);
			break;
		case 'w':
			wait_file = optarg;
			break;
		default:
			fprintf(stderr,
				"usage: %s -f SEQ [-r ROUNDS] [-n DECODES] [-w WAIT_FILE]\n",
				argv[0]);
			return 2;
		}
	}
	if (!seq || rounds < 1 || decodes < 0)
		return 2;
	rt = dlopen(getenv("VLLM_RT") ? getenv("VLLM_RT") : CUDA_RT, RTLD_NOW);
	drv = dlopen(getenv("VLLM_DRV") ? getenv("VLLM_DRV") : CUDA_DRV, RTLD_NOW);
	if (!rt || !drv) {
		fprintf(stderr, "vllm_replay: cannot load the CUDA runtime and driver: %s\n",
			dlerror());
		return 1;
	}
	n = read_steps(seq, st, 2, rt, drv);
	for (int i = 0; i < n; i++) {
		if (!strcmp(st[i].name, "prefill"))
			prefill = &st[i];
		else if (!strcmp(st[i].name, "decode"))
			decode = &st[i];
	}
	if (!prefill || !decode) {
		fprintf(stderr, "vllm_replay: %s lacks a prefill or a decode step\n", seq);
		return 1;
	}
	/* warm up outside the measurement: the runtime's one-time init, page faults */
	for (int i = 0; i < decode->n; i++)
		call_one(&apis[decode->calls[i].api]);
	for (int i = 0; i < prefill->n; i++)
		call_one(&apis[prefill->calls[i].api]);
	printf("{\"pid\":%d,\"tid\":%ld}\n", getpid(), (long)syscall(SYS_gettid));
	fflush(stdout);
	while (wait_file && access(wait_file, F_OK))
		usleep(10000);
	for (int r = 0; r < rounds; r++) {
		run_step(prefill);
		for (int d = 0; d < decodes; d++)
			run_step(decode);
	}
	fflush(stdout);
	return 0;
}
