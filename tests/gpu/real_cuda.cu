// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * real_cuda - a real CUDA workload for the real-GPU check (scripts/gpu_check.sh):
 * every launch path the agent probes, on a real GPU, with each call bracketed
 * by CLOCK_MONOTONIC (the clock of bpf_ktime_get_ns()) so that the agent's
 * joins and the GPU's own timestamps can be checked against the host's clock.
 * Not built by `make` (it needs nvcc and runs only on a GPU):
 *
 *   nvcc -O2 -cudart shared -o real_cuda tests/gpu/real_cuda.cu -lcuda -lpthread
 *
 * usage: real_cuda [-t THREADS] [-n ROUNDS] [-b LAUNCHES] [-w GO_FILE] [-e EXIT_FILE]
 *   -t  launching threads, one stream each (default 2)
 *   -n  rounds per thread (default 20); a round is, on the thread's stream:
 *       spin<<<>>> (cudaLaunchKernel, SPIN_NS on the GPU), axpy through
 *       cudaLaunchKernelEx (cudaLaunchKernelExC), axpy through the driver's
 *       cuLaunchKernel, cudaGraphLaunch of a graph of GRAPH_KERNELS axpy
 *       kernels, cudaMemcpyAsync host->device, cudaMemsetAsync, then
 *       cudaStreamSynchronize
 *   -b  instead of rounds, time LAUNCHES launches of an empty kernel per
 *       thread (cudaLaunchKernel, a stream synchronisation every BENCH_SYNC,
 *       not timed): what a launch call costs the launching thread
 *   -w  wait until GO_FILE exists before the first round (the agent attaches
 *       and switches the shim first); CUDA is initialised before
 *   -e  after the last line, wait (at most 30 s) until EXIT_FILE exists
 *
 * Prints JSON lines: {"pid":P,"mono_ns":N} once CUDA is up, then one line per
 * call {"tid","api","kind","round","t0","t1","t2","n"}: [t0, t1] brackets the
 * call on CLOCK_MONOTONIC, t2 is after the round's cudaStreamSynchronize
 * returned (every GPU record of the call must end before it) and n is the
 * number of GPU records the call must produce; then {"done":true}. With -b,
 * one line per thread {"tid","launches","launch_ns_mean","launch_ns_p50",
 * "launch_ns_p99"} instead of the call lines.
 * A CUDA error ends the program with exit status 1 and the error on stderr.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include <algorithm>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 200000ull /* the spin kernel's time on the GPU */
#define GRAPH_KERNELS 3
#define ELEMS (1 << 16)
#define BENCH_SYNC 256 /* launches between synchronisations in -b */

static int n_rounds = 20, n_bench;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

#define CK(call)                                                                            \
	do {                                                                                \
		cudaError_t e_ = (call);                                                    \
		if (e_ != cudaSuccess) {                                                    \
			fprintf(stderr, "real_cuda: %s: %s\n", #call, cudaGetErrorString(e_)); \
			exit(1);                                                            \
		}                                                                           \
	} while (0)
#define CKD(call)                                                              \
	do {                                                                   \
		CUresult r_ = (call);                                          \
		if (r_ != CUDA_SUCCESS) {                                      \
			fprintf(stderr, "real_cuda: %s: %d\n", #call, (int)r_); \
			exit(1);                                               \
		}                                                              \
	} while (0)

static unsigned long long mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

__global__ void spin(unsigned long long ns)
{
	unsigned long long t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - t0 < ns);
}

__global__ void empty(void)
{
}

__global__ void axpy(float *y, const float *x, float a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}

struct call {
	const char *api, *kind;
	unsigned long long t0, t1;
	int n;
};

static void *worker(void *arg)
{
	const char *go = (const char *)arg;
	cudaStream_t s;
	float *x, *y, *host;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	CUfunction f;
	int n = ELEMS, tid = (int)syscall(SYS_gettid);
	float a = 2.0f;
	dim3 grid((ELEMS + 255) / 256), block(256);

	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaMalloc(&x, ELEMS * sizeof(float)));
	CK(cudaMalloc(&y, ELEMS * sizeof(float)));
	CK(cudaMallocHost(&host, ELEMS * sizeof(float)));
	CK(cudaGetFuncBySymbol(&f, (const void *)axpy));
	/* the graph: GRAPH_KERNELS axpy kernels captured on the stream */
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	for (int k = 0; k < GRAPH_KERNELS; k++)
		axpy<<<grid, block, 0, s>>>(y, x, a, n);
	CK(cudaStreamEndCapture(s, &graph));
	CK(cudaGraphInstantiate(&exec, graph, 0));
	CK(cudaStreamSynchronize(s));

	while (go && access(go, F_OK) != 0)
		usleep(2000);

	if (n_bench) {
		std::vector<unsigned long long> ns(n_bench);
		double sum = 0;

		for (int i = 0; i < n_bench; i++) {
			unsigned long long t0 = mono_ns();

			empty<<<1, 1, 0, s>>>();
			ns[i] = mono_ns() - t0;
			sum += (double)ns[i];
			if (i % BENCH_SYNC == BENCH_SYNC - 1)
				CK(cudaStreamSynchronize(s));
		}
		CK(cudaStreamSynchronize(s));
		CK(cudaGetLastError());
		std::sort(ns.begin(), ns.end());
		pthread_mutex_lock(&out_lock);
		printf("{\"tid\":%d,\"launches\":%d,\"launch_ns_mean\":%.1f,\"launch_ns_p50\":%llu,"
		       "\"launch_ns_p99\":%llu}\n",
		       tid, n_bench, sum / n_bench, ns[n_bench / 2], ns[(size_t)n_bench * 99 / 100]);
		fflush(stdout);
		pthread_mutex_unlock(&out_lock);
	}
	for (int r = 0; !n_bench && r < n_rounds; r++) {
		struct call c[6];
		int k = 0;
		void *args[] = {&y, &x, &a, &n};
		cudaLaunchConfig_t cfg = {};

		cfg.gridDim = grid;
		cfg.blockDim = block;
		cfg.stream = s;

		c[k] = (struct call){"cudaLaunchKernel", "kernel", mono_ns(), 0, 1};
		spin<<<1, 32, 0, s>>>(SPIN_NS);
		c[k++].t1 = mono_ns();
		CK(cudaGetLastError());

		c[k] = (struct call){"cudaLaunchKernelExC", "kernel", mono_ns(), 0, 1};
		CK(cudaLaunchKernelEx(&cfg, axpy, y, (const float *)x, a, n));
		c[k++].t1 = mono_ns();

		c[k] = (struct call){"cuLaunchKernel", "kernel", mono_ns(), 0, 1};
		CKD(cuLaunchKernel(f, grid.x, 1, 1, block.x, 1, 1, 0, (CUstream)s, args, NULL));
		c[k++].t1 = mono_ns();

		c[k] = (struct call){"cudaGraphLaunch", "kernel", mono_ns(), 0, GRAPH_KERNELS};
		CK(cudaGraphLaunch(exec, s));
		c[k++].t1 = mono_ns();

		c[k] = (struct call){"cudaMemcpyAsync", "memcpy", mono_ns(), 0, 1};
		CK(cudaMemcpyAsync(x, host, ELEMS * sizeof(float), cudaMemcpyHostToDevice, s));
		c[k++].t1 = mono_ns();

		c[k] = (struct call){"cudaMemsetAsync", "memset", mono_ns(), 0, 1};
		CK(cudaMemsetAsync(y, 0, ELEMS * sizeof(float), s));
		c[k++].t1 = mono_ns();

		CK(cudaStreamSynchronize(s));
		unsigned long long t2 = mono_ns();
		pthread_mutex_lock(&out_lock);
		for (int i = 0; i < k; i++)
			printf("{\"tid\":%d,\"api\":\"%s\",\"kind\":\"%s\",\"round\":%d,\"t0\":%llu,"
			       "\"t1\":%llu,\"t2\":%llu,\"n\":%d}\n",
			       tid, c[i].api, c[i].kind, r, c[i].t0, c[i].t1, t2, c[i].n);
		fflush(stdout);
		pthread_mutex_unlock(&out_lock);
	}
	CK(cudaGraphExecDestroy(exec));
	CK(cudaGraphDestroy(graph));
	CK(cudaFreeHost(host));
	CK(cudaFree(x));
	CK(cudaFree(y));
	CK(cudaStreamDestroy(s));
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = 2, opt;
	const char *go = NULL, *ex = NULL;
	pthread_t th[16];

	while ((opt = getopt(argc, argv, "t:n:b:w:e:")) != -1) {
		switch (opt) {
		case 't': threads = atoi(optarg); break;
		case 'b': n_bench = atoi(optarg); break;
		case 'n': n_rounds = atoi(optarg); break;
		case 'w': go = optarg; break;
		case 'e': ex = optarg; break;
		default:
			fprintf(stderr, "usage: real_cuda [-t THREADS] [-n ROUNDS] [-b LAUNCHES] [-w GO] "
					"[-e EXIT]\n");
			return 2;
		}
	}
	if (threads < 1 || threads > 16 || n_rounds < 1 || n_bench < 0) {
		fprintf(stderr, "real_cuda: -t is 1..16, -n at least 1, -b at least 0\n");
		return 2;
	}
	CK(cudaFree(0)); /* the context: CUDA_INJECTION64_PATH's library is loaded now */
	printf("{\"pid\":%d,\"mono_ns\":%llu}\n", (int)getpid(), mono_ns());
	fflush(stdout);
	for (int i = 0; i < threads; i++)
		pthread_create(&th[i], NULL, worker, (void *)go);
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	printf("{\"done\":true}\n");
	fflush(stdout);
	for (int i = 0; ex && i < 3000 && access(ex, F_OK) != 0; i++)
		usleep(10000);
	return 0;
}
