// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nccl_gpu - one rank of an NCCL communicator whose collectives launch
 * kernels that "run on a GPU": the NCCL double (tests/fakes/fake_nccl.c)
 * for the communicator, the real libinfertrace_cupti.so with the CUPTI
 * double (tests/fakes/fake_cupti.c) for the GPU side, as gpu_live.c plays
 * it. The agent's NCCL uprobes see each collective, its CUDA uprobes the
 * driver launch, the shim the launch callback and the kernel's activity
 * record: the agent joins each collective to its NCCL kernel.
 *
 * usage: nccl_gpu -L LIB -r RANK -R NRANKS -i ID -k STEPS [-w GO_FILE] [-e EXIT_FILE]
 *
 * The unique id is 128 bytes of the byte ID. Each step makes, on the
 * comm: ncclAllReduce(count 1024 + s, float32, sum), then a group of
 * ncclAllReduce(count 2048 + s, bfloat16, max) and ncclAllGather(count
 * 4096 + s, float32): NCCL launches one kernel for the group, at its
 * ncclGroupEnd. Streams are 0x7000 + RANK.
 *
 * NCCL's launch (the double calls on_launch() inside the collective, on the
 * calling thread): the real cuLaunchKernelEx of the stub libcuda (its
 * uprobe fires; the stub fails), then CUPTI's callback for it (domain
 * driver, cuLaunchKernelEx) with a new correlation id. When the call
 * returns (the double waited for every rank, as the kernel would), the
 * kernel's record: device RANK, stream 7 + RANK, from GPU_DELAY_NS after
 * the callback until the return (every rank arrived) + KERNEL_NS.
 *
 * Prints JSON lines: {"pid":P,"tid":T,"rank":R} (before GO_FILE), one line
 * per collective {"seq","op","count","datatype","redop","group","t0","t1",
 * "kernel","corr","start","end","device","stream"} ([t0, t1] brackets the
 * call, or the group from its ncclGroupStart to its ncclGroupEnd), then
 * {"done":true,"records":N}; then waits (at most 30 s) for EXIT_FILE.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "fake_cupti.h"
#include "harness.h"

#define CUDA_DRV "/usr/local/cuda/lib64/stubs/libcuda.so"
#define GPU_DELAY_NS 20000
#define KERNEL_NS 3000
#define FIRST_CORR 5000
#define B_SEND ((const void *)0x1000) /* buffers: the double never reads them */
#define B_RECV ((void *)0x2000)

typedef struct {
	char internal[128]; /* NCCL_UNIQUE_ID_BYTES, nccl.h */
} nccl_id;

/* signatures: /usr/local/cuda/include/nccl.h (NCCL 2.28); enums as int */
static struct {
	int (*init_rank)(void **, int, nccl_id, int);
	int (*all_reduce)(const void *, void *, size_t, int, int, void *, void *);
	int (*all_gather)(const void *, void *, size_t, int, void *, void *);
	int (*group_start)(void);
	int (*group_end)(void);
	int (*destroy)(void *);
	void (*set_launch)(void (*)(const char *, void *));
	CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
} f;

static int rank;
static uint32_t next_corr = FIRST_CORR;
static int records, add_errors;

/* the kernel the last collective launched */
static struct {
	char name[96];
	uint32_t corr;
	uint64_t cb_ns; /* after CUPTI's callback */
	int n;		/* launches since the last collective */
} launched;

/* NCCL's kernel launch, inside the collective (fake_nccl.c) */
static void on_launch(const char *kernel, void *stream)
{
	CUlaunchConfig cfg = {.gridDimX = 16,
			      .gridDimY = 1,
			      .gridDimZ = 1,
			      .blockDimX = 512,
			      .blockDimY = 1,
			      .blockDimZ = 1,
			      .hStream = (CUstream)stream};

	f.launch_ex(&cfg, (CUfunction)(uintptr_t)0xf00d, NULL, NULL);
	launched.corr = next_corr++;
	fake_cupti_api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
			    launched.corr);
	launched.cb_ns = mono_ns();
	snprintf(launched.name, sizeof(launched.name), "%s", kernel);
	launched.n++;
}

/* the launched kernel's record, once its call returned at t1; 0 or -1 */
static int kernel_done(uint64_t t1, uint64_t *start, uint64_t *end)
{
	CUpti_ActivityKernel10 k;

	if (launched.n != 1) {
		fprintf(stderr, "nccl_gpu: %d kernel launches in one call\n", launched.n);
		return -1;
	}
	launched.n = 0;
	*start = launched.cb_ns + GPU_DELAY_NS;
	*end = (t1 > *start ? t1 : *start) + KERNEL_NS;
	FAKE_CUPTI_ACTIVITY(k, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, (uint32_t)rank, 1, *start,
			    *end - *start, 7 + (uint32_t)rank, launched.corr);
	FAKE_CUPTI_DIMS(k, 16, 1, 1, 512, 1, 1);
	/* CUPTI's name strings outlive the record: the shim reads it later */
	k.name = strdup(launched.name);
	if (!k.name)
		return -1;
	if (fake_cupti_add_record((const CUpti_Activity *)&k))
		add_errors++;
	else
		records++;
	return 0;
}

struct call {
	const char *op;
	uint64_t count;
	int datatype, redop; /* redop -1: none */
};

static void print_call(uint64_t seq, const struct call *c, bool group, uint64_t t0, uint64_t t1,
		       uint64_t start, uint64_t end)
{
	printf("{\"seq\":%llu,\"op\":\"%s\",\"count\":%llu,\"datatype\":%d,\"redop\":%d,"
	       "\"group\":%s,\"t0\":%llu,\"t1\":%llu,\"kernel\":\"%s\",\"corr\":%u,"
	       "\"start\":%llu,\"end\":%llu,\"device\":%d,\"stream\":\"0x%x\"}\n",
	       (unsigned long long)seq, c->op, (unsigned long long)c->count, c->datatype, c->redop,
	       group ? "true" : "false", (unsigned long long)t0, (unsigned long long)t1,
	       launched.name, launched.corr, (unsigned long long)start, (unsigned long long)end,
	       rank, 0x7000 + rank);
}

static int call_one(void *comm, void *stream, const struct call *c)
{
	if (!strcmp(c->op, "allreduce"))
		return f.all_reduce(B_SEND, B_RECV, c->count, c->datatype, c->redop, comm, stream);
	return f.all_gather(B_SEND, B_RECV, c->count, c->datatype, comm, stream);
}

static int steps_run(void *comm, int steps)
{
	void *stream = (void *)(uintptr_t)(0x7000 + rank);
	uint64_t seq = 0, t0, t1, start, end;

	for (int s = 0; s < steps; s++) {
		struct call solo = {"allreduce", 1024 + (uint64_t)s, 7, 0};
		struct call grp[2] = {{"allreduce", 2048 + (uint64_t)s, 9, 2},
				      {"allgather", 4096 + (uint64_t)s, 7, -1}};

		t0 = mono_ns();
		if (call_one(comm, stream, &solo))
			return -1;
		t1 = mono_ns();
		if (kernel_done(t1, &start, &end))
			return -1;
		print_call(seq++, &solo, false, t0, t1, start, end);

		t0 = mono_ns();
		if (f.group_start() || call_one(comm, stream, &grp[0]) ||
		    call_one(comm, stream, &grp[1]) || f.group_end())
			return -1;
		t1 = mono_ns();
		if (kernel_done(t1, &start, &end))
			return -1;
		for (int i = 0; i < 2; i++)
			print_call(seq++, &grp[i], true, t0, t1, start, end);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct rank_opts o = {.idb = 0x31, .steps = 4};
	const char *ex = NULL;
	void *nccl, *drv, *comm = NULL;
	nccl_id id;
	int opt;

	while ((opt = getopt(argc, argv, "L:r:R:i:k:w:e:")) != -1) {
		if (rank_opt(opt, optarg, &o))
			continue;
		if (opt == 'e') {
			ex = optarg;
			continue;
		}
		fprintf(stderr,
			"usage: %s -L LIB -r RANK -R NRANKS -i ID -k STEPS [-w GO_FILE] [-e "
			"EXIT_FILE]\n",
			argv[0]);
		return 2;
	}
	rank = o.rank;
	if (!o.lib || rank < 0 || o.nranks < 1 || rank >= o.nranks || o.steps < 1)
		return 2;
	nccl = dlopen(o.lib, RTLD_NOW | RTLD_LOCAL);
	drv = dlopen(CUDA_DRV, RTLD_NOW);
	if (!nccl || !drv) {
		fprintf(stderr, "nccl_gpu: cannot load %s and %s: %s\n", o.lib, CUDA_DRV,
			dlerror());
		return 1;
	}
#define SYM(field, h, name) (*(void **)&f.field = need_sym("nccl_gpu", h, name))
	if (!SYM(init_rank, nccl, "ncclCommInitRank") || !SYM(all_reduce, nccl, "ncclAllReduce") ||
	    !SYM(all_gather, nccl, "ncclAllGather") || !SYM(group_start, nccl, "ncclGroupStart") ||
	    !SYM(group_end, nccl, "ncclGroupEnd") || !SYM(destroy, nccl, "ncclCommDestroy") ||
	    !SYM(set_launch, nccl, "fake_nccl_set_launch") ||
	    !SYM(launch_ex, drv, "cuLaunchKernelEx"))
		return 1;
#undef SYM
	if (fake_cupti_load_shim("nccl_gpu"))
		return 1;
	f.set_launch(on_launch);

	print_pid_tid_rank(rank);
	await_file(o.go, 0);
	memset(&id, o.idb, sizeof(id));
	if (f.init_rank(&comm, o.nranks, id, rank)) {
		fprintf(stderr, "nccl_gpu: ncclCommInitRank failed\n");
		return 1;
	}
	if (steps_run(comm, o.steps))
		return 1;
	f.destroy(comm);
	/* CUPTI hands the filled buffers back; the shim thread sends them */
	fake_cupti_complete();
	printf("{\"done\":true,\"records\":%d,\"add_errors\":%d}\n", records, add_errors);
	fflush(stdout);
	await_file(ex, 30);
	return add_errors ? 4 : 0;
}
