// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * fake_nccl.c - a test double of libnccl.so.2 with NCCL 2.28's ABI
 * (signatures of /usr/local/cuda/include/nccl.h), for what the real library
 * cannot do without a GPU: a communicator that initialises, and collectives
 * that complete. Built as build/tests/fakes/nccl/libnccl.so.2 (the name the
 * agent's discovery looks for). Only the parts the NCCL tests need:
 *
 *   - ncclCommInitRank(Config) and ncclCommInitRankScalable succeed and
 *     return a new comm; the ranks of one unique id (its first 16 bytes,
 *     hex; the first id of the scalable init's list) share a process-shared
 *     barrier in POSIX shared memory, created by rank 0 and joined by the
 *     others, and return once every rank joined (NCCL's init is collective);
 *   - a collective on such a comm launches its kernel (below) and waits on
 *     that barrier, as every rank's kernel waits for the last rank to
 *     arrive; in a group (ncclGroupStart/End) the collectives launch one
 *     kernel and wait once, at the outermost ncclGroupEnd, as NCCL launches
 *     a group's work there; send/recv return ncclSuccess at once;
 *   - ncclCommSplit waits on the parent's barrier (NCCL's split is
 *     collective over the parent: no rank returns before every rank gave
 *     its color and key), then returns a new comm without a barrier, or
 *     NULL for color NCCL_SPLIT_NOCOLOR (nccl.h); the double does not
 *     compute the new comm's rank (the agent derives it, and the tests
 *     check that derivation against their own);
 *   - ncclCommInitAll returns new comms (no barrier);
 *   - ncclCommDestroy / ncclCommAbort free the comm.
 *
 * Kernels: the double has no GPU, so it "launches" a kernel by calling the
 * function given to fake_nccl_set_launch() (exported by the double only),
 * on the calling thread, with the name NCCL >= 2.19 gives that kernel
 * ("ncclDevKernel_AllReduce_Sum_f32_RING_LL"; every kernel is RING/LL
 * here). A workload that plays CUPTI's part (tests/integration/nccl_gpu.c)
 * turns it into a driver launch and its activity record.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define EXPORT __attribute__((visibility("default"), noinline))

typedef struct {
	char internal[128];
} ncclUniqueId;

struct shared {
	pthread_barrier_t bar;
	int ready; /* rank 0 finished the barrier's init */
};

struct fake_comm {
	int rank, nranks;
	struct shared *sh; /* NULL: no barrier */
	char name[64];
};
typedef struct fake_comm *ncclComm_t;

static struct shared *shared_open(const ncclUniqueId *id, int rank, int nranks, char *name,
				  size_t sz)
{
	struct shared *sh;
	int fd;

	snprintf(name, sz, "/fake_nccl_");
	for (int i = 0; i < 16; i++)
		snprintf(name + strlen(name), sz - strlen(name), "%02x",
			 (unsigned char)id->internal[i]);
	if (rank == 0) {
		pthread_barrierattr_t at;

		shm_unlink(name);
		fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
		if (fd < 0 || ftruncate(fd, sizeof(*sh)))
			return NULL;
		sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (sh == MAP_FAILED)
			return NULL;
		pthread_barrierattr_init(&at);
		pthread_barrierattr_setpshared(&at, PTHREAD_PROCESS_SHARED);
		pthread_barrier_init(&sh->bar, &at, (unsigned)nranks);
		__atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
		return sh;
	}
	/* the others wait (bounded: 10 s) for rank 0 to create it */
	for (int i = 0; i < 1000; i++) {
		fd = shm_open(name, O_RDWR, 0600);
		if (fd >= 0) {
			struct stat st;

			/* rank 0 may not have sized it yet */
			if (fstat(fd, &st) || st.st_size < (off_t)sizeof(*sh)) {
				close(fd);
				usleep(10000);
				continue;
			}
			sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			close(fd);
			if (sh == MAP_FAILED)
				return NULL;
			while (!__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) && i++ < 1000)
				usleep(10000);
			return sh->ready ? sh : NULL;
		}
		usleep(10000);
	}
	return NULL;
}

static int init(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank)
{
	struct fake_comm *c;

	if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
		return 4; /* ncclInvalidArgument */
	c = calloc(1, sizeof(*c));
	if (!c)
		return 2; /* ncclSystemError */
	c->rank = rank;
	c->nranks = nranks;
	if (id && nranks > 1) {
		c->sh = shared_open(id, rank, nranks, c->name, sizeof(c->name));
		if (!c->sh) {
			free(c);
			return 2;
		}
		/* NCCL's init is collective: no rank returns before every rank joined */
		pthread_barrier_wait(&c->sh->bar);
	}
	*comm = c;
	return 0;
}

EXPORT int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	return init(comm, nranks, &commId, rank);
}

EXPORT int ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
				  void *config)
{
	(void)config;
	return init(comm, nranks, &commId, rank);
}

/* the ids are the same list on every rank (nccl.h): the first names the comm */
EXPORT int ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
				    ncclUniqueId *commIds, void *config)
{
	(void)config;
	if (nId < 1 || !commIds)
		return 4;
	return init(newcomm, nranks, &commIds[0], myrank);
}

EXPORT int ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
	(void)devlist;
	for (int i = 0; i < ndev; i++)
		if (init(&comm[i], ndev, NULL, i))
			return 2;
	return 0;
}

#define NCCL_SPLIT_NOCOLOR (-1) /* nccl.h */

EXPORT int ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, void *config)
{
	(void)key;
	(void)config;
	if (!comm || !newcomm)
		return 4;
	if (comm->sh)
		pthread_barrier_wait(&comm->sh->bar);
	if (color == NCCL_SPLIT_NOCOLOR) {
		*newcomm = NULL;
		return 0;
	}
	if (color < 0)
		return 4;
	return init(newcomm, comm->nranks, NULL, comm->rank);
}

static int end(ncclComm_t comm)
{
	if (!comm)
		return 0;
	if (comm->sh) {
		munmap(comm->sh, sizeof(*comm->sh));
		if (comm->rank == 0)
			shm_unlink(comm->name);
	}
	free(comm);
	return 0;
}

EXPORT int ncclCommDestroy(ncclComm_t comm)
{
	return end(comm);
}
EXPORT int ncclCommAbort(ncclComm_t comm)
{
	return end(comm);
}

/* ------------------------------------------------------------ kernels -- */

typedef void (*fake_nccl_launch_fn)(const char *kernel, void *stream);
static fake_nccl_launch_fn launch_fn;

/* the function that stands for NCCL's kernel launch (NULL: none) */
EXPORT void fake_nccl_set_launch(fake_nccl_launch_fn fn)
{
	launch_fn = fn;
}

static __thread int group_depth;
/* the group's first collective: its kernel, stream and comm */
static __thread struct {
	char kernel[96];
	void *stream;
	ncclComm_t comm;
} group_work;

/* ncclDataType_t (nccl.h) as NCCL's kernel names write it */
static const char *const type_names[] = {"i8",	"u8",  "i32", "u32",  "i64",	"u64",
					 "f16", "f32", "f64", "bf16", "f8e4m3", "f8e5m2"};
/* ncclRedOp_t: NCCL's min and max share one kernel */
static const char *const redop_names[] = {"Sum", "Prod", "MinMax", "MinMax", "Avg"};

static void kernel_name(char *buf, size_t sz, const char *op, int redop, int dt)
{
	if (redop < 0)
		snprintf(buf, sz, "ncclDevKernel_%s_RING_LL", op);
	else
		snprintf(buf, sz, "ncclDevKernel_%s_%s_%s_RING_LL", op,
			 redop < 5 ? redop_names[redop] : "PreMulSum",
			 dt >= 0 && dt < 12 ? type_names[dt] : "i8");
}

/*
 * A collective: its kernel is launched now (or, in a group, at the group's
 * end), then it waits for every rank of the comm, as the kernel would.
 */
static int collective(ncclComm_t comm, const char *op, int redop, int dt, void *stream)
{
	char name[96];

	if (!comm)
		return 4;
	if (group_depth) {
		if (!group_work.comm) {
			kernel_name(group_work.kernel, sizeof(group_work.kernel), op, redop, dt);
			group_work.stream = stream;
			group_work.comm = comm;
		}
		return 0;
	}
	kernel_name(name, sizeof(name), op, redop, dt);
	if (launch_fn)
		launch_fn(name, stream);
	if (comm->sh)
		pthread_barrier_wait(&comm->sh->bar);
	return 0;
}

EXPORT int ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
			 ncclComm_t comm, void *stream)
{
	(void)sendbuff, (void)recvbuff, (void)count;
	return collective(comm, "AllReduce", op, datatype, stream);
}

EXPORT int ncclAllGather(const void *s, void *r, size_t n, int dt, ncclComm_t comm, void *st)
{
	(void)s, (void)r, (void)n, (void)dt;
	return collective(comm, "AllGather", -1, dt, st);
}

EXPORT int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, ncclComm_t comm,
			     void *st)
{
	(void)s, (void)r, (void)n;
	return collective(comm, "ReduceScatter", op, dt, st);
}

EXPORT int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, ncclComm_t comm,
			 void *st)
{
	(void)s, (void)r, (void)n, (void)root;
	return collective(comm, "Broadcast", -1, dt, st);
}

/* as NCCL 2.28: a call of ncclBroadcast(buff, buff, ...) */
EXPORT int ncclBcast(void *b, size_t n, int dt, int root, ncclComm_t comm, void *st)
{
	return ncclBroadcast(b, b, n, dt, root, comm, st);
}

EXPORT int ncclReduce(const void *s, void *r, size_t n, int dt, int op, int root, ncclComm_t comm,
		      void *st)
{
	(void)s, (void)r, (void)n, (void)root;
	return collective(comm, "Reduce", op, dt, st);
}

EXPORT int ncclAlltoAll(const void *s, void *r, size_t n, int dt, ncclComm_t comm, void *st)
{
	(void)s, (void)r, (void)n;
	return collective(comm, "SendRecv", -1, dt, st);
}

EXPORT int ncclSend(const void *s, size_t n, int dt, int peer, ncclComm_t comm, void *st)
{
	(void)s, (void)n, (void)dt, (void)peer, (void)st;
	return comm ? 0 : 4;
}

EXPORT int ncclRecv(void *r, size_t n, int dt, int peer, ncclComm_t comm, void *st)
{
	(void)r, (void)n, (void)dt, (void)peer, (void)st;
	return comm ? 0 : 4;
}

EXPORT int ncclGroupStart(void)
{
	group_depth++;
	return 0;
}

/* the outermost end launches the group's one kernel and waits once */
EXPORT int ncclGroupEnd(void)
{
	ncclComm_t comm = group_work.comm;

	if (!group_depth)
		return 4;
	if (--group_depth || !comm)
		return 0;
	if (launch_fn)
		launch_fn(group_work.kernel, group_work.stream);
	group_work.comm = NULL;
	if (comm->sh)
		pthread_barrier_wait(&comm->sh->bar);
	return 0;
}
