// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * fake_nccl.c - a test double of libnccl.so.2 with NCCL 2.28's ABI
 * (signatures of /usr/local/cuda/include/nccl.h), for what the real library
 * cannot do without a GPU: a communicator that initialises, and collectives
 * that complete. Built as build/tests/fakes/nccl/libnccl.so.2 (the name the
 * agent's discovery looks for). Only the parts tests/integration/nccl.sh
 * needs:
 *
 *   - ncclCommInitRank(Config) succeed and return a new comm; the ranks of
 *     one unique id (its first 16 bytes, hex) share a process-shared barrier
 *     in POSIX shared memory, created by rank 0 and joined by the others;
 *   - ncclAllReduce on such a comm waits on that barrier, as every rank's
 *     kernel waits for the last rank to arrive; the other collectives and
 *     send/recv return ncclSuccess at once;
 *   - ncclCommInitAll / ncclCommSplit return new comms (no barrier);
 *   - ncclCommDestroy / ncclCommAbort free the comm.
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

EXPORT int ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
	(void)devlist;
	for (int i = 0; i < ndev; i++)
		if (init(&comm[i], ndev, NULL, i))
			return 2;
	return 0;
}

EXPORT int ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, void *config)
{
	(void)key;
	(void)config;
	if (!comm || !newcomm)
		return 4;
	if (color < 0) {
		*newcomm = NULL;
		return 0;
	}
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

EXPORT int ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
			 ncclComm_t comm, void *stream)
{
	(void)sendbuff, (void)recvbuff, (void)count, (void)datatype, (void)op, (void)stream;
	if (!comm)
		return 4;
	if (comm->sh)
		pthread_barrier_wait(&comm->sh->bar);
	return 0;
}

EXPORT int ncclAllGather(const void *s, void *r, size_t n, int dt, ncclComm_t comm, void *st)
{
	(void)s, (void)r, (void)n, (void)dt, (void)st;
	return comm ? 0 : 4;
}

EXPORT int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, ncclComm_t comm,
			     void *st)
{
	(void)s, (void)r, (void)n, (void)dt, (void)op, (void)st;
	return comm ? 0 : 4;
}

EXPORT int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, ncclComm_t comm,
			 void *st)
{
	(void)s, (void)r, (void)n, (void)dt, (void)root, (void)st;
	return comm ? 0 : 4;
}

EXPORT int ncclBcast(void *b, size_t n, int dt, int root, ncclComm_t comm, void *st)
{
	(void)b, (void)n, (void)dt, (void)root, (void)st;
	return comm ? 0 : 4;
}

EXPORT int ncclReduce(const void *s, void *r, size_t n, int dt, int op, int root, ncclComm_t comm,
		      void *st)
{
	(void)s, (void)r, (void)n, (void)dt, (void)op, (void)root, (void)st;
	return comm ? 0 : 4;
}

EXPORT int ncclAlltoAll(const void *s, void *r, size_t n, int dt, ncclComm_t comm, void *st)
{
	(void)s, (void)r, (void)n, (void)dt, (void)st;
	return comm ? 0 : 4;
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

static __thread int group_depth;

EXPORT int ncclGroupStart(void)
{
	group_depth++;
	return 0;
}

EXPORT int ncclGroupEnd(void)
{
	if (!group_depth)
		return 4;
	group_depth--;
	return 0;
}
