/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * harness.h - what the integration workloads (tests/integration/NAME.c) all
 * do around their work: read the clock, wait for the script's go or exit
 * file, start their worker threads and tell the script who they are. Header
 * only: each workload is one source file (Makefile pattern rule).
 */
#ifndef INFERTRACE_TEST_HARNESS_H
#define INFERTRACE_TEST_HARNESS_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static inline unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

/* until path exists (NULL: at once), checked every 10 ms; secs 0: no limit */
static inline void await_file(const char *path, int secs)
{
	for (long i = 0; path && (!secs || i < secs * 100L) && access(path, F_OK); i++)
		usleep(10000);
}

/* {"pid":P,"tid":T} of the calling thread, one line on stdout */
static inline void print_pid_tid(void)
{
	printf("{\"pid\":%d,\"tid\":%ld}\n", getpid(), (long)syscall(SYS_gettid));
	fflush(stdout);
}

/* {"pid":P,"tid":T,"rank":R}: one rank of a communicator (the NCCL workloads) */
static inline void print_pid_tid_rank(int rank)
{
	printf("{\"pid\":%d,\"tid\":%ld,\"rank\":%d}\n", getpid(), (long)syscall(SYS_gettid), rank);
	fflush(stdout);
}

/*
 * n threads fn((void *)i), returned once each has reached ready (a barrier
 * of n + 1 that fn waits on, and may wait on again); then the first line a
 * workload prints starts, {"pid":P,"tids":[...] - the caller ends it.
 */
static inline void start_workers(pthread_t *th, int n, void *(*fn)(void *),
				 pthread_barrier_t *ready, const pid_t *tids)
{
	pthread_barrier_init(ready, NULL, n + 1);
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, fn, (void *)(long)i);
	pthread_barrier_wait(ready);
	printf("{\"pid\":%d,\"tids\":[", getpid());
	for (int i = 0; i < n; i++)
		printf("%s%d", i ? "," : "", tids[i]);
}

/*
 * name from the library h (NULL: the library is absent, which the caller
 * says), or NULL with "WHO: NAME missing" on stderr
 */
static inline void *need_sym(const char *who, void *h, const char *name)
{
	void *p = h ? dlsym(h, name) : NULL;

	if (h && !p)
		fprintf(stderr, "%s: %s missing\n", who, name);
	return p;
}

/* cuModuleLoadData(CUmodule *, const void *image), -Ex(..., n, options, values): cuda.h */
typedef int (*cu_modload_fn)(void **, const void *);
typedef int (*cu_modload_ex_fn)(void **, const void *, unsigned, void *, void **);

/*
 * one GPU code load each way, as a JIT compiler's output reaches the GPU
 * (a PTX image; the stub libcuda fails both at once, the probes fire)
 */
static inline void load_gpu_code(cu_modload_fn load, cu_modload_ex_fn load_ex)
{
	static const char image[] = "//\n.version 8.0\n.target sm_90\n";
	void *mod = NULL;

	load(&mod, image);
	load_ex(&mod, image, 0, NULL, NULL);
}

/*
 * -t THREADS and -n ROUNDS of the threaded workloads (gpu_live, nccl_calls,
 * nest_calls): true when opt (getopt's, with optarg) is one of those
 */
static inline bool thread_opt(int opt, const char *arg, int *threads, int *rounds)
{
	switch (opt) {
	case 't':
		*threads = atoi(arg);
		return true;
	case 'n':
		*rounds = atoi(arg);
		return true;
	}
	return false;
}

/*
 * One rank of an NCCL communicator (nccl_calls, nccl_gpu): -L LIB, -r RANK,
 * -R NRANKS, -i ID (the byte the unique id is made of), -k STEPS, -w
 * GO_FILE. rank_opt() takes opt (getopt's, with optarg) into o: true when
 * it is one of those.
 */
struct rank_opts {
	const char *lib, *go;
	int rank, nranks, idb, steps;
};

static inline bool rank_opt(int opt, const char *arg, struct rank_opts *o)
{
	switch (opt) {
	case 'L':
		o->lib = arg;
		return true;
	case 'r':
		o->rank = atoi(arg);
		return true;
	case 'R':
		o->nranks = atoi(arg);
		return true;
	case 'i':
		o->idb = (int)strtol(arg, NULL, 0);
		return true;
	case 'k':
		o->steps = atoi(arg);
		return true;
	case 'w':
		o->go = arg;
		return true;
	}
	return false;
}

/* the step workloads' options: -n STEPS (30), -w GO_FILE, -e EXIT_FILE, -l LIB */
struct step_opts {
	int steps;
	const char *go, *ex, *lib;
};

/* 0, or -1 on an option the workload does not take (lib: whether -l is one) */
static inline int step_opts_parse(int argc, char **argv, bool lib, struct step_opts *o)
{
	int opt;

	*o = (struct step_opts){.steps = 30};
	while ((opt = getopt(argc, argv, lib ? "l:n:w:e:" : "n:w:e:")) != -1) {
		switch (opt) {
		case 'l':
			o->lib = optarg;
			break;
		case 'n':
			o->steps = atoi(optarg);
			break;
		case 'w':
			o->go = optarg;
			break;
		case 'e':
			o->ex = optarg;
			break;
		default:
			return -1;
		}
	}
	return 0;
}

#endif /* INFERTRACE_TEST_HARNESS_H */
