// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * cuda_calls - a workload that calls every probed CUDA entry point a known
 * number of times from known threads, through the real libcudart and the
 * stub libcuda (no GPU: the calls fail, the probes fire).
 *
 * usage: cuda_calls [-t THREADS] [-n CALLS] [-w WAIT_FILE] [-s SECONDS] [-l SECONDS] [-d SECONDS]
 *   -n  calls of each entry point per thread (default 10)
 *   -w  wait until WAIT_FILE exists before calling (lets the agent attach)
 *   -s  instead of -n: call in a loop for SECONDS (demo, benchmarks); the
 *       GPU code loads only in the first round, as a process loads its
 *       kernels once (each is a record the agent sends, in every mode)
 *   -d  sleep SECONDS after loading the libraries, before calling (a churn of
 *       short processes that an agent discovers before they call: tests/soak)
 *   -l  linger SECONDS after the calls, printing {"done":true} first, so the
 *       process is still there when the test looks (flight recorder)
 * Prints one JSON line: {"pid":P,"tids":[...],"calls":N,"rt":R,"drv":D}
 * where R/D are 1 when the runtime/driver library loaded.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "cudart.h"
#include "harness.h"

#define CUDA_DRV "/usr/local/cuda/lib64/stubs/libcuda.so"
#define MAX_THREADS 64

/* cudaLaunchConfig_t / CUlaunchConfig prefixes (driver_types.h, cuda.h) */
struct rt_config {
	struct dim3 grid, block;
	size_t shmem;
	void *stream;
	void *attrs;
	unsigned nattrs;
};

struct drv_config {
	unsigned gx, gy, gz, bx, by, bz, shmem;
	void *stream;
	void *attrs;
	unsigned nattrs;
};

typedef int (*launch_exc_fn)(const struct rt_config *, const void *, void **);
typedef int (*graph_fn)(void *, void *);
typedef int (*memcpy_fn)(void *, const void *, size_t, int, void *);
typedef int (*stream_sync_fn)(void *); /* also the event synchronisations */
typedef int (*dev_sync_fn)(void);      /* also cuCtxSynchronize */
typedef int (*copy_fn)(void *, const void *, size_t, int);
typedef int (*cu_launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			    unsigned, void *, void **, void **);
typedef int (*cu_launch_ex_fn)(const struct drv_config *, void *, void **, void **);

static struct {
	launch_fn launch, launch_ptsz;
	launch_exc_fn exc, exc_ptsz;
	graph_fn graph, graph_ptsz, cu_graph, cu_graph_ptsz;
	memcpy_fn copy, copy_ptsz;
	stream_sync_fn ssync, ssync_ptsz, esync, cu_ssync, cu_esync;
	dev_sync_fn dsync, cu_csync;
	copy_fn sync_copy;
	cu_launch_fn cu_launch, cu_launch_ptsz;
	cu_launch_ex_fn cu_ex, cu_ex_ptsz;
	cu_modload_fn cu_modload;
	cu_modload_ex_fn cu_modload_ex;
} f;

static long calls = 10;
static double seconds, linger, delay;
static pid_t tids[MAX_THREADS];

/* the entry points, from the runtime (drv 0) or the driver (drv 1) when it is loaded */
static const struct {
	int drv;
	const char *name;
	void **dst;
} syms[] = {
    {0, "cudaLaunchKernel", (void **)&f.launch},
    {0, "cudaLaunchKernel_ptsz", (void **)&f.launch_ptsz},
    {0, "cudaLaunchKernelExC", (void **)&f.exc},
    {0, "cudaLaunchKernelExC_ptsz", (void **)&f.exc_ptsz},
    {0, "cudaGraphLaunch", (void **)&f.graph},
    {0, "cudaGraphLaunch_ptsz", (void **)&f.graph_ptsz},
    {0, "cudaMemcpyAsync", (void **)&f.copy},
    {0, "cudaMemcpyAsync_ptsz", (void **)&f.copy_ptsz},
    {0, "cudaStreamSynchronize", (void **)&f.ssync},
    {0, "cudaStreamSynchronize_ptsz", (void **)&f.ssync_ptsz},
    {0, "cudaDeviceSynchronize", (void **)&f.dsync},
    {0, "cudaEventSynchronize", (void **)&f.esync},
    {0, "cudaMemcpy", (void **)&f.sync_copy},
    {1, "cuLaunchKernel", (void **)&f.cu_launch},
    {1, "cuLaunchKernel_ptsz", (void **)&f.cu_launch_ptsz},
    {1, "cuLaunchKernelEx", (void **)&f.cu_ex},
    {1, "cuLaunchKernelEx_ptsz", (void **)&f.cu_ex_ptsz},
    {1, "cuGraphLaunch", (void **)&f.cu_graph},
    {1, "cuGraphLaunch_ptsz", (void **)&f.cu_graph_ptsz},
    {1, "cuStreamSynchronize", (void **)&f.cu_ssync},
    {1, "cuCtxSynchronize", (void **)&f.cu_csync},
    {1, "cuEventSynchronize", (void **)&f.cu_esync},
    {1, "cuModuleLoadData", (void **)&f.cu_modload},
    {1, "cuModuleLoadDataEx", (void **)&f.cu_modload_ex},
};

/* one round: every entry point once (the code loads when load), with recognisable arguments */
static void round_once(int idx, bool load)
{
	void *stream = (void *)(0x5000UL + idx), *event = (void *)(0x9000UL + idx);
	struct dim3 grid = {7, 8, 9}, block = {32, 4, 2};
	struct rt_config rc = {grid, block, 256, stream, NULL, 0};
	struct drv_config dc = {11, 12, 13, 64, 2, 1, 512, stream, NULL, 0};
	static char buf[64];

	if (f.launch) {
		f.launch((void *)0xabc0, grid, block, NULL, 128, stream);
		f.launch_ptsz((void *)0xabc1, grid, block, NULL, 128, stream);
		f.exc(&rc, (void *)0xabc2, NULL);
		f.exc_ptsz(&rc, (void *)0xabc3, NULL);
		f.graph((void *)0x6000, stream);
		f.graph_ptsz((void *)0x6001, stream);
		f.copy(buf, buf + 32, 32, 4, stream);
		f.copy_ptsz(buf, buf + 32, 16, 4, stream);
		f.ssync(stream);
		f.ssync_ptsz(stream);
		f.dsync();
		f.esync(event);
		f.sync_copy(buf, buf + 32, 8, 4);
	}
	if (f.cu_launch) {
		f.cu_launch((void *)0xdef0, 1, 2, 3, 4, 5, 6, 1024, stream, NULL, NULL);
		f.cu_launch_ptsz((void *)0xdef1, 1, 2, 3, 4, 5, 6, 1024, stream, NULL, NULL);
		f.cu_ex(&dc, (void *)0xdef2, NULL, NULL);
		f.cu_ex_ptsz(&dc, (void *)0xdef3, NULL, NULL);
		f.cu_graph((void *)0x7000, stream);
		f.cu_graph_ptsz((void *)0x7001, stream);
		f.cu_ssync(stream);
		f.cu_csync();
		f.cu_esync(event);
		if (load)
			load_gpu_code(f.cu_modload, f.cu_modload_ex);
	}
}

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static pthread_barrier_t ready;

static void *worker(void *arg)
{
	int idx = (int)(long)arg;

	tids[idx] = (pid_t)syscall(SYS_gettid);
	pthread_barrier_wait(&ready); /* tids known */
	pthread_barrier_wait(&ready); /* go */
	if (seconds > 0) {
		double end = mono() + seconds;
		bool first = true;

		while (mono() < end) {
			round_once(idx, first);
			first = false;
			usleep(1000);
		}
	} else {
		for (long i = 0; i < calls; i++)
			round_once(idx, true);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const char *wait_file = NULL;
	pthread_t th[MAX_THREADS];
	int nthreads = 2, opt;
	void *rt, *drv;
	bool missing = false;

	while ((opt = getopt(argc, argv, "t:n:w:s:l:d:")) != -1) {
		switch (opt) {
		case 't':
			nthreads = atoi(optarg);
			break;
		case 'n':
			calls = atol(optarg);
			break;
		case 'w':
			wait_file = optarg;
			break;
		case 's':
			seconds = atof(optarg);
			break;
		case 'l':
			linger = atof(optarg);
			break;
		case 'd':
			delay = atof(optarg);
			break;
		default:
			fprintf(stderr,
				"usage: %s [-t THREADS] [-n CALLS] [-w WAIT_FILE] [-s SECS] [-l "
				"SECS] [-d SECS]\n",
				argv[0]);
			return 2;
		}
	}
	if (nthreads < 1 || nthreads > MAX_THREADS)
		return 2;

	rt = dlopen(getenv("CUDA_CALLS_RT") ? getenv("CUDA_CALLS_RT") : CUDA_LIB, RTLD_NOW);
	drv = dlopen(getenv("CUDA_CALLS_DRV") ? getenv("CUDA_CALLS_DRV") : CUDA_DRV, RTLD_NOW);
	if (!rt && !drv) {
		fprintf(stderr, "cuda_calls: cannot load %s or %s: %s\n", CUDA_LIB, CUDA_DRV,
			dlerror());
		return 1;
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *h = syms[i].drv ? drv : rt;

		*syms[i].dst = need_sym("cuda_calls", h, syms[i].name);
		if (h && !*syms[i].dst)
			missing = true;
	}
	if (missing)
		return 1;

	start_workers(th, nthreads, worker, &ready, tids);
	printf("],\"calls\":%ld,\"rt\":%d,\"drv\":%d}\n", calls, !!rt, !!drv);
	fflush(stdout);
	await_file(wait_file, 0);
	if (delay > 0) {
		struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};

		nanosleep(&ts, NULL);
	}
	pthread_barrier_wait(&ready);
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	if (linger > 0) {
		printf("{\"done\":true}\n");
		fflush(stdout);
		struct timespec ts = {(time_t)linger,
				      (long)((linger - (double)(time_t)linger) * 1e9)};

		nanosleep(&ts, NULL);
	}
	return 0;
}
