// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nccl_calls - a workload that calls NCCL's probed entry points with known
 * arguments, through the real libnccl.so.2 of /usr/local/cuda (NCCL 2.28: no
 * GPU, so every call fails, after the probes fired) or the test double
 * (tests/fakes/fake_nccl.c, whose inits succeed).
 *
 * usage: nccl_calls [-L LIB] [-t THREADS] [-n ROUNDS] [-p US] [-w GO_FILE] [-l LOAD_FILE]
 *        nccl_calls -L LIB -r RANK -R NRANKS -i ID -k STEPS [-d MS -s STEP] [-c COLOR -K KEY]
 *                   [-w GO_FILE]
 *
 * Calls mode: each thread i makes ROUNDS rounds of round() below. Comm
 * arguments point into one zeroed buffer (thread i: base + 64 * i), which
 * NCCL refuses as an invalid comm without touching more; with -p, a thread
 * sleeps US microseconds after each round. Prints
 * {"pid":P,"tids":[...],"comm_base":"0x..."}. With -l, LIB is dlopen()ed
 * only once LOAD_FILE exists (after that line): an agent started on the pid
 * meanwhile finds the library through its mapping.
 *
 * Rank mode (the double): one rank of a communicator whose unique id is
 * 128 bytes of the byte ID; ncclCommInitRank, then STEPS all-reduces (the
 * double's all-reduce waits for every rank, as the GPU kernel would); before
 * step STEP this rank sleeps MS ms: it is the straggler. With -c, after the
 * init, ncclCommSplit(comm, COLOR, KEY) (-1 is NCCL_SPLIT_NOCOLOR), and each
 * step's all-reduce is followed by one on the new comm, when there is one.
 * Prints {"pid":P,"tid":T,"rank":R}, then waits for GO_FILE before the init.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "harness.h"

#define NCCL_REAL "/usr/local/cuda/lib64/libnccl.so.2"
#define MAX_THREADS 16

typedef struct {
	char internal[128]; /* NCCL_UNIQUE_ID_BYTES, nccl.h */
} nccl_id;

/* signatures: /usr/local/cuda/include/nccl.h (NCCL 2.28); enums as int */
static struct {
	int (*all_reduce)(const void *, void *, size_t, int, int, void *, void *);
	int (*all_gather)(const void *, void *, size_t, int, void *, void *);
	int (*reduce_scatter)(const void *, void *, size_t, int, int, void *, void *);
	int (*broadcast)(const void *, void *, size_t, int, int, void *, void *);
	int (*bcast)(void *, size_t, int, int, void *, void *);
	int (*reduce)(const void *, void *, size_t, int, int, int, void *, void *);
	int (*alltoall)(const void *, void *, size_t, int, void *, void *);
	int (*send)(const void *, size_t, int, int, void *, void *);
	int (*recv)(void *, size_t, int, int, void *, void *);
	int (*group_start)(void);
	int (*group_end)(void);
	int (*init_rank)(void **, int, nccl_id, int);
	int (*init_rank_config)(void **, int, nccl_id, int, void *);
	int (*init_rank_scalable)(void **, int, int, int, nccl_id *, void *); /* 2.23 and later */
	int (*init_all)(void **, int, const int *);
	int (*split)(void *, int, int, void **, void *);
	int (*destroy)(void *);
	int (*abort_)(void *);
} f;

static int rounds = 1, pace_us;
static char *comm_base;
static pid_t tids[MAX_THREADS];
static pthread_barrier_t ready;
static const char *go_file;

#define B(x) ((void *)(uintptr_t)(x))

/* one of each call; tests/integration/nccl.sh expects exactly these arguments */
static void round_once(int i)
{
	void *comm = comm_base + 64 * i, *st = B(0x5000 + i), *c = NULL, *cs[2] = {0};
	const int devs[2] = {0, 1};
	nccl_id id;

	f.all_reduce(B(0x1000), B(0x2000), 1000 + i, 9, 0, comm, st);
	f.all_gather(B(0x1000), B(0x2000), 2000 + i, 7, comm, st);
	f.reduce_scatter(B(0x1000), B(0x2000), 3000 + i, 6, 2, comm, st);
	f.broadcast(B(0x1000), B(0x2000), 4000 + i, 4, 1, comm, st);
	f.bcast(B(0x1000), 4500 + i, 1, 2, comm, st);
	f.reduce(B(0x1000), B(0x2000), 5000 + i, 8, 3, 3, comm, st);
	if (f.alltoall)
		f.alltoall(B(0x1000), B(0x2000), 6000 + i, 2, comm, st);
	f.send(B(0x1000), 7000 + i, 5, 1, comm, st);
	f.recv(B(0x2000), 8000 + i, 3, 2, comm, st);
	f.group_start();
	/* datatype 12 is ncclNumTypes: not a type (bad input, recorded and counted) */
	f.all_reduce(B(0x1000), B(0x2000), 9000 + i, 12, 4, comm, st);
	f.group_end();
	memset(&id, 0x40 + i, sizeof(id));
	f.init_rank(&c, 4, id, i);
	f.init_rank_config(&c, 8, id, i + 1, NULL);
	if (f.init_rank_scalable) {
		nccl_id ids[2];

		memset(ids, 0x60 + i, sizeof(ids[0]));
		memset(&ids[1], 0x70, sizeof(ids[1]));
		f.init_rank_scalable(&c, 6, i + 2, 2, ids, NULL);
	}
	f.init_all(cs, 2, devs);
	f.split(NULL, 5, i, &c, NULL);
	f.destroy(NULL);
	f.abort_(NULL);
}

static void *worker(void *arg)
{
	int i = (int)(long)arg;

	tids[i] = (pid_t)syscall(SYS_gettid);
	pthread_barrier_wait(&ready);
	await_file(go_file, 0);
	for (int r = 0; r < rounds; r++) {
		round_once(i);
		if (pace_us)
			usleep(pace_us);
	}
	return NULL;
}

static int load(const char *lib)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		fprintf(stderr, "nccl_calls: %s\n", dlerror());
		return -1;
	}
#define SYM(field, name) (*(void **)&f.field = dlsym(h, name))
	SYM(all_reduce, "ncclAllReduce");
	SYM(all_gather, "ncclAllGather");
	SYM(reduce_scatter, "ncclReduceScatter");
	SYM(broadcast, "ncclBroadcast");
	SYM(bcast, "ncclBcast");
	SYM(reduce, "ncclReduce");
	SYM(alltoall, "ncclAlltoAll");
	SYM(send, "ncclSend");
	SYM(recv, "ncclRecv");
	SYM(group_start, "ncclGroupStart");
	SYM(group_end, "ncclGroupEnd");
	SYM(init_rank, "ncclCommInitRank");
	SYM(init_rank_config, "ncclCommInitRankConfig");
	SYM(init_rank_scalable, "ncclCommInitRankScalable");
	SYM(init_all, "ncclCommInitAll");
	SYM(split, "ncclCommSplit");
	SYM(destroy, "ncclCommDestroy");
	SYM(abort_, "ncclCommAbort");
#undef SYM
	if (!f.all_reduce || !f.all_gather || !f.reduce_scatter || !f.broadcast || !f.bcast ||
	    !f.reduce || !f.send || !f.recv || !f.group_start || !f.group_end || !f.init_rank ||
	    !f.init_rank_config || !f.init_all || !f.split || !f.destroy || !f.abort_) {
		fprintf(stderr, "nccl_calls: %s lacks an entry point\n", lib);
		return -1;
	}
	return 0;
}

/* -c/-K: the split's color (NO_SPLIT: none) and key */
#define NO_SPLIT (-1000)
static int split_color = NO_SPLIT, split_key;

static int rank_mode(int rank, int nranks, int idb, int steps, int delay_ms, int late_step)
{
	void *comm = NULL, *sub = NULL;
	nccl_id id;
	int err;

	print_pid_tid_rank(rank);
	await_file(go_file, 0);
	memset(&id, idb, sizeof(id));
	err = f.init_rank(&comm, nranks, id, rank);
	if (err) {
		fprintf(stderr, "nccl_calls: ncclCommInitRank: %d\n", err);
		return 1;
	}
	if (split_color != NO_SPLIT) {
		err = f.split(comm, split_color, split_key, &sub, NULL);
		if (err) {
			fprintf(stderr, "nccl_calls: ncclCommSplit: %d\n", err);
			return 1;
		}
	}
	for (int s = 0; s < steps; s++) {
		if (s == late_step && delay_ms > 0)
			usleep(delay_ms * 1000);
		err = f.all_reduce(B(0x1000), B(0x2000), 4096, 9, 0, comm, B(0x7000 + rank));
		if (!err && sub)
			err = f.all_reduce(B(0x1000), B(0x2000), 1024, 7, 0, sub, B(0x7000 + rank));
		if (err) {
			fprintf(stderr, "nccl_calls: ncclAllReduce: %d\n", err);
			return 1;
		}
	}
	if (sub)
		f.destroy(sub);
	f.destroy(comm);
	return 0;
}

int main(int argc, char **argv)
{
	struct rank_opts o = {.lib = NCCL_REAL, .rank = -1, .idb = 0x11, .steps = 10};
	int threads = 1, delay = 0, late = -1, opt;
	const char *load_file = NULL;
	pthread_t th[MAX_THREADS];

	while ((opt = getopt(argc, argv, "L:t:n:w:r:R:i:k:d:s:c:K:l:p:")) != -1) {
		if (rank_opt(opt, optarg, &o) || thread_opt(opt, optarg, &threads, &rounds))
			continue;
		switch (opt) {
		case 'd':
			delay = atoi(optarg);
			break;
		case 's':
			late = atoi(optarg);
			break;
		case 'c':
			split_color = atoi(optarg);
			break;
		case 'K':
			split_key = atoi(optarg);
			break;
		case 'l':
			load_file = optarg;
			break;
		case 'p':
			pace_us = atoi(optarg);
			break;
		default:
			return 2;
		}
	}
	go_file = o.go;
	/* the workers wait for GO_FILE before any call: -l needs one */
	if (threads < 1 || threads > MAX_THREADS || (load_file && !go_file) ||
	    (!load_file && load(o.lib)))
		return 2;
	if (o.rank >= 0)
		return load_file ? 2 : rank_mode(o.rank, o.nranks, o.idb, o.steps, delay, late);
	comm_base = calloc(1, 16 << 20); /* past the end of an ncclComm: endMagic */
	if (!comm_base)
		return 2;
	start_workers(th, threads, worker, &ready, tids);
	printf("],\"comm_base\":\"%p\"}\n", (void *)comm_base);
	fflush(stdout);
	if (load_file) {
		await_file(load_file, 0);
		if (load(o.lib))
			exit(2);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	return 0;
}
