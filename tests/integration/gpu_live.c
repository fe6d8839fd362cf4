// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * gpu_live - the live GPU path end to end without a GPU: real CUDA launch
 * entry points (the agent's uprobes fire), the real libinfertrace_cupti.so
 * (its shim thread talks to the agent's socket), and the CUPTI test double
 * (tests/fakes/) standing in for libcupti to play CUPTI's part: the launch
 * callback on the calling thread right after each call, then activity
 * records for the work the call would have put on the GPU.
 *
 * usage: gpu_live [-t THREADS] [-n ROUNDS] [-w GO_FILE] [-e EXIT_FILE] [-m MODE] [-s STALL] [-C]
 * [-M] [-L] [-F]
 *                 [-N BYTES] [-P PERIOD_MS] [-J ROUND]
 *   -t  launching threads (default 2)
 *   -n  rounds per thread (default 5); a round is cudaLaunchKernel (one
 *       kernel), cudaGraphLaunch (GRAPH_KERNELS kernels sharing its
 *       correlation id), cuLaunchKernel (one kernel), cudaMemcpyAsync (one
 *       memcpy) and, in deep mode, a cudaMemsetAsync callback (one memset;
 *       no uprobe exists for it)
 *   -w  wait until GO_FILE exists before calling (the agent attaches first)
 *   -e  after the last line, wait (at most 30 s) until EXIT_FILE exists
 *       before exiting: the agent sees the process alive while it takes
 *       the records (it reads a container's thread ids from /proc)
 *   -m  the capture the agent should put the shim in: deep waits (bounded)
 *       until the shim enabled MEMSET activity, i.e. the agent's switch came
 *   -M  steps marked with NVTX (as CUPTI reports them): each round is one
 *       nvtxRangePushA("execute_model tokens=<100+r> batch=<1+r%4>") ..
 *       nvtxRangePop(), and every 5th round (r % 5 == 4) an
 *       nvtxRangeStartA/End("gl_io") around it
 *   -s  steps: the copy is device-to-host (an engine's sampled tokens, which
 *       ends a step), kernels take STEP_KERNEL_NS on one in-order stream per
 *       thread, each round waits for its copy to end (as an engine
 *       synchronises) and then STEP_GAP_US, and round STALL (from 0)
 *       of each thread stalls STALL_MS on the host between its graph launch
 *       and its cuLaunchKernel (the GPU waits: a host stall)
 *   -C  with -s: the stalled round is CPU contention instead of a sleep: the
 *       thread does STALL_MS / 2 of CPU work on its CPU while a process it
 *       forks spins there too at nice -10, so it waits in the run queue
 *       several times as long, preempted by that process (its pid:
 *       {"hog":PID} before "done")
 *   -N  network traffic inside each round: after the graph launch, the
 *       thread writes BYTES x (1 + r % 4) to a TCP connection over loopback
 *       that it holds both ends of, and reads them back (so its process
 *       sends and receives that many bytes within the step)
 *   -P  lockstep (with -s): round r of every thread starts at T0 + r x
 *       PERIOD_MS, T0 being the CLOCK_MONOTONIC ns written in GO_FILE (if
 *       it is in the future; else 100 ms after GO_FILE appeared), so that
 *       several processes given one GO_FILE run their rounds together, as
 *       the tensor-parallel ranks of one model do
 *   -G  with -s, a GPU slowdown: from round SLOW:FILE on (SLOW from 0), the
 *       kernels take GPU_SLOW_X times as long (the GPU's clock dropped); FILE
 *       is created when round SLOW begins, for a test to act on
 *   -J  round ROUND (from 0) of each thread loads GPU code between its graph
 *       launch and its cuLaunchKernel: cuModuleLoadData and
 *       cuModuleLoadDataEx of the stub libcuda (which fails them at once),
 *       as a JIT compiler's kernels reach the GPU inside a step
 *   -U  CUPTI's device record for device 0 with this UUID (32 hex digits, or
 *       NVML's form GPU-xxxxxxxx-xxxx-...): the shim sends it to the agent
 *   -L  CUPTI keeps the GPU records until the process ends: the shim's
 *       destructor flushes them, so they are in its last message, sent just
 *       before the exit (after EXIT_FILE)
 *   -F  CUPTI hands the buffers over at each of the shim's periodic flushes
 *       (about every second), as the real one does for a flush without
 *       CUPTI_ACTIVITY_FLAG_FLUSH_FORCED when a buffer holds a completed
 *       record; without -F, when the rounds end (or -L)
 * The environment passes INFERTRACE_SHIM_SOCKET to the shim. Thread 0 also
 * queues one kernel whose launch never happened (ORPHAN_CORR).
 *
 * Prints JSON lines: first {"pid":P,"tids":[...],"mono_ns":N} (before
 * GO_FILE; N: CLOCK_MONOTONIC then), then
 * one line per call {"tid","api","kind","corr","t0","t1","t2","n"} where
 * [t0, t1] (CLOCK_MONOTONIC, the eBPF clock) brackets the real CUDA call, t2
 * follows CUPTI's callback (GPU work starts GPU_DELAY_NS after it) and n is
 * the number of GPU records queued for corr, then {"orphan_corr":C,"tid":T},
 * then {"done":true,"records":R}. tests/integration/gpu_live.sh reads them.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <generated_nvtx_meta.h>

#include "fake_cupti.h"
#include "harness.h"

#define CUDA_LIB "/usr/local/cuda/lib64/libcudart.so"
#define CUDA_DRV "/usr/local/cuda/lib64/stubs/libcuda.so"
#define MAX_THREADS 8
#define MAX_ROUNDS 200
#define CALLS_PER_ROUND 5
#define GRAPH_KERNELS 3
#define FIRST_CORR 1000
#define ORPHAN_CORR 0x40000000u
#define GPU_DELAY_NS 20000 /* launch -> start on the "GPU" */
#define KERNEL_NS 3000
#define STEP_GAP_US 2000
#define GPU_SLOW_X 3
#define STEP_KERNEL_NS 1000000 /* -s: kernels of 1 ms, one stream in order */
#define STALL_MS 40

typedef int (*launch_fn)(const void *, struct dim3, struct dim3, void **, size_t, void *);
typedef int (*graph_fn)(void *, void *);
typedef int (*memcpy_fn)(void *, const void *, size_t, int, void *);
typedef int (*cu_launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			    unsigned, void *, void **, void **);

struct call {
	pid_t tid;
	const char *api;
	const char *kind;
	uint32_t corr;
	uint64_t t0, t1, t2;
	int n;
};

static struct {
	launch_fn launch;
	graph_fn graph;
	memcpy_fn copy;
	cu_launch_fn cu_launch;
	cu_modload_fn modload;
	cu_modload_ex_fn modload_ex;
} f;

static int rounds = 5;
static int stall_round = -1;		 /* -s: steps mode */
static int load_round = -1;		 /* -J */
static int slow_round = -1;		 /* -G */
static const char *slow_file;		 /* -G */
static bool contend;			 /* -C */
static pid_t hog_pid;			 /* -C: the process that took the CPU */
static bool nvtx_marks;			 /* -M */
static bool hold_records;		 /* -L */
static bool flush_returns;		 /* -F */
static int net_bytes;			 /* -N */
static uint64_t period_ns, t0_ns;	 /* -P */
static int net_fd[MAX_THREADS][2];	 /* -N: each thread's connection, both ends */
static uint64_t stream_end[MAX_THREADS]; /* -s: when each thread's stream is free */
static int deep;
static pid_t tids[MAX_THREADS];
static struct call calls[MAX_THREADS][MAX_ROUNDS * CALLS_PER_ROUND];
static int ncalls[MAX_THREADS];
static _Atomic uint32_t next_corr = FIRST_CORR;
static _Atomic int add_errors;
static _Atomic int records;
static pthread_barrier_t ready;

/*
 * When GPU work launched at t2 starts: GPU_DELAY_NS later; with -s also not
 * before the thread's stream finished its previous work (one stream runs in
 * order), so that a step lasts as long as its GPU work, as on a real GPU.
 */
static uint64_t gpu_start(int idx, uint64_t t2, uint64_t dur)
{
	uint64_t start = t2 + GPU_DELAY_NS;

	if (stall_round < 0)
		return start;
	if (start < stream_end[idx])
		start = stream_end[idx];
	stream_end[idx] = start + dur;
	return start;
}

static void add(const void *rec)
{
	if (fake_cupti_add_record(rec))
		add_errors++;
	else
		records++;
}

static void add_kernel(uint32_t corr, uint64_t start, uint64_t dur, uint32_t stream,
		       uint32_t graph_id, uint64_t node, const char *name)
{
	CUpti_ActivityKernel10 k;

	FAKE_CUPTI_ACTIVITY(k, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 0, 1, start, dur, stream,
			    corr);
	FAKE_CUPTI_DIMS(k, 64, 2, 1, 128, 1, 1);
	k.graphId = graph_id;
	k.graphNodeId = node;
	k.name = name;
	add(&k);
}

/* the real call on this thread, then CUPTI's callback for it, as CUPTI would */
static struct call *do_call(int idx, const char *api, const char *kind, int dom, int cbid)
{
	struct call *c = &calls[idx][ncalls[idx]++];
	void *stream = (void *)(0x5000UL + idx);
	struct dim3 grid = {64, 2, 1}, block = {128, 1, 1}; /* vector_types.h */
	static char buf[64];

	c->tid = tids[idx];
	c->api = api;
	c->kind = kind;
	c->t0 = mono_ns();
	if (!strcmp(api, "cudaLaunchKernel"))
		f.launch((void *)0xabc0, grid, block, NULL, 0, stream);
	else if (!strcmp(api, "cudaGraphLaunch"))
		f.graph((void *)0x6000, stream);
	else if (!strcmp(api, "cuLaunchKernel"))
		f.cu_launch((void *)0xdef0, 64, 2, 1, 128, 1, 1, 0, stream, NULL, NULL);
	else if (!strcmp(api, "cudaMemcpyAsync"))
		f.copy(buf, buf + 32, 32, stall_round >= 0 ? 2 : 1, stream);
	c->t1 = mono_ns();
	c->corr = atomic_fetch_add(&next_corr, 1);
	fake_cupti_api_call((CUpti_CallbackDomain)dom, (CUpti_CallbackId)cbid, c->corr);
	c->t2 = mono_ns();
	return c;
}

/* -N: one loopback TCP connection per thread, both ends in the thread */
static int net_open(int idx)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), s;

	if (l < 0 || c < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&sa, &len) ||
	    connect(c, (struct sockaddr *)&sa, sizeof(sa)) || (s = accept(l, NULL, NULL)) < 0) {
		perror("gpu_live: loopback TCP connection");
		return -1;
	}
	close(l);
	net_fd[idx][0] = c;
	net_fd[idx][1] = s;
	return 0;
}

/* all n bytes through fd, or exit */
static void net_all(int fd, char *buf, int n, bool out)
{
	for (int done = 0; done < n;) {
		ssize_t k =
		    out ? write(fd, buf, (size_t)(n - done)) : read(fd, buf, (size_t)(n - done));

		if (k <= 0) {
			perror(out ? "gpu_live: write" : "gpu_live: read");
			exit(1);
		}
		done += (int)k;
	}
}

static void net_round(int idx, int n)
{
	static char buf[MAX_THREADS][1 << 15];

	net_all(net_fd[idx][0], buf[idx], n, true);
	net_all(net_fd[idx][1], buf[idx], n, false);
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* -C: STALL_MS / 2 of CPU work on this thread's CPU, shared with a spinning process */
static void contend_cpu(void)
{
	cpu_set_t one, old;
	uint64_t until;
	pid_t hog;

	CPU_ZERO(&one);
	CPU_SET(sched_getcpu(), &one);
	if (sched_getaffinity(0, sizeof(old), &old) || sched_setaffinity(0, sizeof(one), &one)) {
		perror("gpu_live: affinity");
		exit(1);
	}
	hog = fork();
	if (hog < 0) {
		perror("gpu_live: fork");
		exit(1);
	}
	if (!hog) {
		/*
		 * inherits the CPU; killed below. At nice -10 it takes ~90% of the
		 * CPU while both run, so it is by far the launcher's main preemptor
		 * even on a loaded machine (other nice-0 work took more of the
		 * launcher's wait than a nice-0 hog: diag_live_contention in CI)
		 */
		if (setpriority(PRIO_PROCESS, 0, -10))
			perror("gpu_live: hog priority");
		for (;;)
			;
	}
	hog_pid = hog;
	until = thread_cpu_ns() + STALL_MS * 500000ull;
	while (thread_cpu_ns() < until)
		;
	kill(hog, SIGKILL);
	waitpid(hog, NULL, 0);
	sched_setaffinity(0, sizeof(old), &old);
}

/* a call that launches one kernel, name, of kdur ns on stream */
static void one_kernel(int idx, const char *api, int dom, int cbid, uint32_t stream, uint64_t kdur,
		       const char *name)
{
	struct call *c = do_call(idx, api, "kernel", dom, cbid);

	add_kernel(c->corr, gpu_start(idx, c->t2, kdur), kdur, stream, 0, 0, name);
	c->n = 1;
}

static void round_once(int idx, int round)
{
	uint32_t stream = 7 + idx;
	uint64_t kdur = stall_round >= 0 ? STEP_KERNEL_NS : KERNEL_NS;
	struct call *c;

	if (slow_round >= 0 && round >= slow_round) {
		kdur *= GPU_SLOW_X;
		if (round == slow_round && slow_file)
			close(open(slow_file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
	}

	one_kernel(idx, "cudaLaunchKernel", CUPTI_CB_DOMAIN_RUNTIME_API,
		   CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, stream, kdur,
		   "_Z10gl_eagerPfi");

	c = do_call(idx, "cudaGraphLaunch", "graph", CUPTI_CB_DOMAIN_RUNTIME_API,
		    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000);
	for (int k = 0; k < GRAPH_KERNELS; k++)
		add_kernel(c->corr,
			   stall_round >= 0
			       ? gpu_start(idx, c->t2, kdur)
			       : c->t2 + GPU_DELAY_NS + (uint64_t)k * (KERNEL_NS + 500),
			   kdur, stream, 100 + idx, ((uint64_t)(idx + 1) << 32) | (uint64_t)(k + 1),
			   "_Z8gl_graphILi1EEvPf");
	c->n = GRAPH_KERNELS;

	if (net_bytes)
		net_round(idx, net_bytes * (1 + round % 4));
	if (round == stall_round && contend) {
		contend_cpu();
	} else if (round == stall_round) {
		struct timespec ts = {0, STALL_MS * 1000000L};

		nanosleep(&ts, NULL);
	}
	if (round == load_round)
		load_gpu_code(f.modload, f.modload_ex);
	one_kernel(idx, "cuLaunchKernel", CUPTI_CB_DOMAIN_DRIVER_API,
		   CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, stream, kdur, "triton_gl_driver");

	c = do_call(idx, "cudaMemcpyAsync", "memcpy", CUPTI_CB_DOMAIN_RUNTIME_API,
		    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020);
	{
		CUpti_ActivityMemcpy6 m;

		FAKE_CUPTI_ACTIVITY(m, CUPTI_ACTIVITY_KIND_MEMCPY, 0, 1,
				    gpu_start(idx, c->t2, 1000), 1000, stream, c->corr);
		m.copyKind = stall_round >= 0 ? CUPTI_ACTIVITY_MEMCPY_KIND_DTOH
					      : CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
		m.bytes = 4096 + idx;
		add(&m);
	}
	c->n = 1;

	if (!deep)
		return;
	/* memset: a callback only (no uprobe on cudaMemsetAsync) */
	c = do_call(idx, "cudaMemsetAsync", "memset", CUPTI_CB_DOMAIN_RUNTIME_API,
		    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020);
	{
		CUpti_ActivityMemset4 m;

		FAKE_CUPTI_ACTIVITY(m, CUPTI_ACTIVITY_KIND_MEMSET, 0, 1, c->t2 + GPU_DELAY_NS, 500,
				    stream, c->corr);
		m.bytes = 512;
		add(&m);
	}
	c->n = 1;
}

static void *worker(void *arg)
{
	int idx = (int)(long)arg;

	tids[idx] = (pid_t)syscall(SYS_gettid);
	if (net_bytes && net_open(idx))
		exit(1);
	pthread_barrier_wait(&ready); /* tids known */
	pthread_barrier_wait(&ready); /* go */
	for (int r = 0; r < rounds; r++) {
		char msg[96];
		nvtxRangePushA_params push = {msg};
		nvtxRangeStartA_params start = {"gl_io"};
		nvtxRangeEnd_params end = {(nvtxRangeId_t)(1000 + r)};
		nvtxRangeId_t id = end.id;

		snprintf(msg, sizeof(msg), "execute_model tokens=%d batch=%d", 100 + r, 1 + r % 4);
		if (nvtx_marks && r % 5 == 4)
			fake_cupti_nvtx(CUPTI_CBID_NVTX_nvtxRangeStartA, &start, &id);
		if (nvtx_marks)
			fake_cupti_nvtx(CUPTI_CBID_NVTX_nvtxRangePushA, &push, NULL);
		if (period_ns) {
			uint64_t at = t0_ns + (uint64_t)r * period_ns;
			struct timespec ts = {(time_t)(at / 1000000000ull),
					      (long)(at % 1000000000ull)};

			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		}
		round_once(idx, r);
		/* -s: the engine waits for its copy (synchronises) */
		if (stall_round >= 0 && stream_end[idx] > mono_ns())
			usleep((useconds_t)((stream_end[idx] - mono_ns()) / 1000 + 1));
		if (nvtx_marks)
			fake_cupti_nvtx(CUPTI_CBID_NVTX_nvtxRangePop, &(nvtxRangePop_params){0},
					NULL);
		if (nvtx_marks && r % 5 == 4)
			fake_cupti_nvtx(CUPTI_CBID_NVTX_nvtxRangeEnd, &end, NULL);
		if (stall_round >= 0 && !period_ns)
			usleep(STEP_GAP_US);
	}
	if (idx == 0) /* GPU work whose launch the agent never sees */
		add_kernel(ORPHAN_CORR, mono_ns() + GPU_DELAY_NS,
			   stall_round >= 0 ? STEP_KERNEL_NS : KERNEL_NS, 7, 0, 0, "_Z9gl_orphanv");
	return NULL;
}

int main(int argc, char **argv)
{
	const char *wait_file = NULL, *exit_file = NULL, *mode = "deep";
	pthread_t th[MAX_THREADS];
	int nthreads = 2, opt;
	void *rt, *drv;

	const char *uuid = NULL;

	while ((opt = getopt(argc, argv, "t:n:w:e:m:s:CMLFN:P:G:U:J:")) != -1) {
		if (thread_opt(opt, optarg, &nthreads, &rounds))
			continue;
		switch (opt) {
		case 'w':
			wait_file = optarg;
			break;
		case 'e':
			exit_file = optarg;
			break;
		case 'm':
			mode = optarg;
			break;
		case 's':
			stall_round = atoi(optarg);
			break;
		case 'C':
			contend = true;
			break;
		case 'M':
			nvtx_marks = true;
			break;
		case 'L':
			hold_records = true;
			break;
		case 'F':
			flush_returns = true;
			break;
		case 'N':
			net_bytes = atoi(optarg);
			break;
		case 'P':
			period_ns = (uint64_t)atoi(optarg) * 1000000ull;
			break;
		case 'G':
			slow_round = atoi(optarg);
			slow_file = strchr(optarg, ':') ? strchr(optarg, ':') + 1 : NULL;
			break;
		case 'U':
			uuid = optarg;
			break;
		case 'J':
			load_round = atoi(optarg);
			break;
		default:
			fprintf(stderr,
				"usage: %s [-t THREADS] [-n ROUNDS] [-w GO_FILE] [-e EXIT_FILE] "
				"[-m MODE] [-s STALL_ROUND] [-C] [-M] [-L] [-F] [-N BYTES] [-P "
				"PERIOD_MS] "
				"[-G SLOW_ROUND:FILE] [-U UUID] [-J LOAD_ROUND]\n",
				argv[0]);
			return 2;
		}
	}
	if (nthreads < 1 || nthreads > MAX_THREADS || rounds < 1 || rounds > MAX_ROUNDS ||
	    net_bytes < 0 || net_bytes > 8192)
		return 2;
	deep = !strcmp(mode, "deep");

	rt = dlopen(CUDA_LIB, RTLD_NOW);
	drv = dlopen(CUDA_DRV, RTLD_NOW);
	if (!rt || !drv) {
		fprintf(stderr, "gpu_live: cannot load %s and %s: %s\n", CUDA_LIB, CUDA_DRV,
			dlerror());
		return 1;
	}
	f.launch = need_sym("gpu_live", rt, "cudaLaunchKernel");
	f.graph = need_sym("gpu_live", rt, "cudaGraphLaunch");
	f.copy = need_sym("gpu_live", rt, "cudaMemcpyAsync");
	f.cu_launch = need_sym("gpu_live", drv, "cuLaunchKernel");
	f.modload = need_sym("gpu_live", drv, "cuModuleLoadData");
	f.modload_ex = need_sym("gpu_live", drv, "cuModuleLoadDataEx");
	if (!f.launch || !f.graph || !f.copy || !f.cu_launch || !f.modload || !f.modload_ex)
		return 1;

	/* the shim as the driver would load it, bound to the double */
	if (fake_cupti_load_shim("gpu_live"))
		return 1;
	fake_cupti_set_flush_returns(flush_returns);
	if (uuid) { /* CUPTI's device record, as it comes once per device */
		CUpti_ActivityDevice5 d;
		int n = 0;

		memset(&d, 0, sizeof(d));
		d.kind = CUPTI_ACTIVITY_KIND_DEVICE;
		d.id = 0;
		for (const char *p = uuid; *p && n < 32; p++) {
			unsigned v;

			if (sscanf(p, "%1x", &v) != 1)
				continue; /* "GPU-" and the dashes */
			((unsigned char *)&d.uuid)[n / 2] |= (unsigned char)(n % 2 ? v : v << 4);
			n++;
		}
		if (n != 32) {
			fprintf(stderr, "gpu_live: -U takes 32 hex digits\n");
			return 2;
		}
		add(&d);
	}

	start_workers(th, nthreads, worker, &ready, tids);
	printf("],\"mono_ns\":%llu}\n", (unsigned long long)mono_ns());
	fflush(stdout);
	await_file(wait_file, 0);
	if (period_ns) {
		FILE *gf = wait_file ? fopen(wait_file, "r") : NULL;
		unsigned long long t0 = 0;

		if (!gf || fscanf(gf, "%llu", &t0) != 1 || t0 <= mono_ns())
			t0 = mono_ns() + 100000000ull;
		if (gf)
			fclose(gf);
		t0_ns = t0;
	}
	if (deep) {
		/* the agent switches the shim to deep capture once it is connected */
		for (int i = 0; i < 1000 && !fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_MEMSET);
		     i++)
			usleep(10000);
		if (!fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_MEMSET)) {
			fprintf(stderr, "gpu_live: the agent never switched the shim to deep\n");
			return 3;
		}
	}
	pthread_barrier_wait(&ready);
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	/* CUPTI hands the filled buffers back; the shim thread sends them */
	if (!hold_records)
		fake_cupti_complete();

	for (int i = 0; i < nthreads; i++)
		for (int j = 0; j < ncalls[i]; j++) {
			const struct call *c = &calls[i][j];

			printf("{\"tid\":%d,\"api\":\"%s\",\"kind\":\"%s\",\"corr\":%u,\"t0\":%llu,"
			       "\"t1\":%llu,\"t2\":%llu,\"n\":%d}\n",
			       c->tid, c->api, c->kind, c->corr, (unsigned long long)c->t0,
			       (unsigned long long)c->t1, (unsigned long long)c->t2, c->n);
		}
	printf("{\"orphan_corr\":%u,\"tid\":%d}\n", ORPHAN_CORR, tids[0]);
	if (hog_pid)
		printf("{\"hog\":%d}\n", (int)hog_pid);
	printf("{\"done\":true,\"records\":%d,\"add_errors\":%d}\n", (int)records, (int)add_errors);
	fflush(stdout);
	await_file(exit_file, 30);
	/* exit: the shim's destructor flushes and says goodbye before the process ends */
	return add_errors ? 4 : 0;
}
