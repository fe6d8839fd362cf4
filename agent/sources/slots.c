// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * slots.c - the per-CPU slot arrays the BPF side writes without a ring
 * (bpf/lib/common.bpf.h slot_begin/slot_end), read through mmap: one reader
 * for both of them (the flight recorder's launches, flight.c; sentinel's NCCL
 * calls, below), and the NCCL calls' merge with the rings.
 *
 * A CPU's slice has one writer, that CPU: entry n carries seq n + 1 once
 * complete and 0 while it is written, so a copy is checked before and after.
 * An entry the writer came round to before it was copied is counted as
 * overwritten, never handed on.
 *
 * NCCL calls in sentinel mode (bpf/nccl.bpf.c) go into the slots, their
 * communicators' life (EV_NCCL_COMM) and deep capture's calls onto rb_cuda,
 * process exits onto rb_misc. A call must reach nccl_live.c after the ring
 * records it depends on (its comm's init) and before those that depend on it
 * (its comm's destroy, its process's exit), as it did when it was on the ring.
 * Both directions are causal: a record a call depends on was written before
 * the call entered (its timestamp), and a call a record depends on was
 * written before that record. So:
 *  - slots_consume() notes the time t0, consumes the rings, then hands on the
 *    copied calls entered before t0: what they depend on was on a ring by t0
 *    and has been decoded. Later ones wait for the next consume.
 *  - decode.c calls slots_nccl_before(ts) before it decodes an rb_cuda NCCL
 *    record: the calls entered before that record's time go first (each
 *    ring record a call entered before it depends on is earlier on the same
 *    ring, so decoded already). Before an rb_misc exit it calls
 *    slots_consume(), which from there consumes rb_cuda alone (its own
 *    ring_buffer, a->rb_cuda): everything the process wrote before its exit
 *    is then decoded, and its calls are handed on.
 * Calls are handed on in time order (the slices copied into one buffer,
 * sorted by entry time), as the ring gave them in reserve order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <bpf/libbpf.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "nccl_live.h"
#include "util.h"

#define SLOT_ENTRY_MAX 128	 /* bytes of the largest slot entry (struct flight_launch) */
#define NCCL_PEND_MAX (1u << 20) /* calls waiting for their turn before order gives way */

_Static_assert(sizeof(struct flight_launch) <= SLOT_ENTRY_MAX, "slot entry size");
_Static_assert(sizeof(struct nccl_slot) <= SLOT_ENTRY_MAX, "slot entry size");

static size_t page_round(size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (n + pg - 1) / pg * pg;
}

int slices_map(struct slices *s, int fd, int cur_fd, size_t entry, uint32_t per_cpu, uint32_t cpus)
{
	void *base, *cur;

	memset(s, 0, sizeof(*s));
	if (entry > SLOT_ENTRY_MAX || !cpus || !per_cpu || per_cpu & (per_cpu - 1))
		return -EINVAL;
	s->entry = entry;
	s->per_cpu = per_cpu;
	s->cpus = cpus;
	s->base_len = page_round((size_t)per_cpu * s->cpus * entry);
	s->cur_len = page_round((size_t)s->cpus * sizeof(struct slot_cursor));
	base = mmap(NULL, s->base_len, PROT_READ, MAP_SHARED, fd, 0);
	cur = mmap(NULL, s->cur_len, PROT_READ, MAP_SHARED, cur_fd, 0);
	s->read = calloc(s->cpus, sizeof(*s->read));
	if (base == MAP_FAILED || cur == MAP_FAILED || !s->read) {
		int err = errno ? -errno : -ENOMEM;

		if (base != MAP_FAILED)
			munmap(base, s->base_len);
		if (cur != MAP_FAILED)
			munmap(cur, s->cur_len);
		free(s->read);
		memset(s, 0, sizeof(*s));
		return err;
	}
	s->base = base;
	s->cur = cur;
	return 0;
}

void slices_unmap(struct slices *s)
{
	if (s->base)
		munmap((void *)s->base, s->base_len);
	if (s->cur)
		munmap((void *)s->cur, s->cur_len);
	free(s->read);
	memset(s, 0, sizeof(*s));
}

uint64_t slices_written(const struct slices *s)
{
	uint64_t sum = 0;

	for (uint32_t c = 0; c < s->cpus; c++)
		sum += __atomic_load_n(&s->cur[c].n, __ATOMIC_ACQUIRE);
	return sum;
}

/*
 * Hand each entry written since the last call to fn, CPU by CPU and in
 * order within a CPU; returns the entries handed on. An entry overwritten
 * before it was read (the CPU wrote more than its slice holds between two
 * reads), or while it was read, is counted in s->overwritten.
 */
uint64_t slices_read(struct slices *s, void (*fn)(void *ctx, const void *entry), void *ctx)
{
	_Alignas(8) unsigned char copy[SLOT_ENTRY_MAX];
	uint64_t handed = 0;

	for (uint32_t c = 0; c < s->cpus; c++) {
		uint64_t n = __atomic_load_n(&s->cur[c].n, __ATOMIC_ACQUIRE);
		uint64_t i = s->read[c];

		if (n - i > s->per_cpu) {
			s->overwritten += n - i - s->per_cpu;
			i = n - s->per_cpu;
		}
		for (; i < n; i++) {
			const unsigned char *e =
			    s->base + ((size_t)c * s->per_cpu + (i & (s->per_cpu - 1))) * s->entry;
			const uint64_t *seq = (const uint64_t *)e;

			if (__atomic_load_n(seq, __ATOMIC_ACQUIRE) != i + 1) {
				s->overwritten++;
				continue;
			}
			memcpy(copy, e, s->entry);
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (__atomic_load_n(seq, __ATOMIC_RELAXED) != i + 1 ||
			    *(const uint64_t *)copy != i + 1) {
				s->overwritten++;
				continue;
			}
			fn(ctx, copy);
			handed++;
		}
		s->read[c] = n;
	}
	return handed;
}

/* ------------------------------------------------------- NCCL calls -- */

static struct nccl_slots {
	struct slices s;
	struct nccl_slot *pend; /* copied, not handed on yet: [head, n), by entry time */
	size_t head, n, cap;
	bool sorted;
	bool busy;   /* handing calls on: a drain from inside returns */
	uint64_t t0; /* the current (or last) consume's start */
} nccl_slots_state;

static int pend_cmp(const void *x, const void *y)
{
	const struct nccl_slot *p = x, *q = y;

	if (p->ev.hdr.ts_ns != q->ev.hdr.ts_ns)
		return p->ev.hdr.ts_ns < q->ev.hdr.ts_ns ? -1 : 1;
	if (p->ev.hdr.cpu != q->ev.hdr.cpu)
		return p->ev.hdr.cpu < q->ev.hdr.cpu ? -1 : 1;
	return p->seq < q->seq ? -1 : p->seq > q->seq;
}

static void pend_add(void *ctx, const void *entry)
{
	struct nccl_slots *q = &nccl_slots_state;
	const struct nccl_slot *e = entry;

	if (q->n == q->cap && q->head) {
		memmove(q->pend, q->pend + q->head, (q->n - q->head) * sizeof(*q->pend));
		q->n -= q->head;
		q->head = 0;
	}
	if (q->n == q->cap &&
	    (q->cap >= NCCL_PEND_MAX ||
	     grow_array((void **)&q->pend, &q->cap, q->n, sizeof(*q->pend), 256))) {
		/* no room: this one goes now, out of its turn, rather than not at all */
		nccl_on_call(ctx, &e->ev);
		return;
	}
	if (q->n > q->head && pend_cmp(&q->pend[q->n - 1], e) > 0)
		q->sorted = false;
	q->pend[q->n++] = *e;
}

/*
 * Copy what the slices hold, then hand on, in time order, the calls
 * entered before `until`.
 */
static void nccl_drain(struct agent *a, uint64_t until)
{
	struct nccl_slots *q = &nccl_slots_state;

	if (!q->s.base || q->busy)
		return;
	q->busy = true;
	slices_read(&q->s, pend_add, a);
	if (!q->sorted) {
		qsort(q->pend + q->head, q->n - q->head, sizeof(*q->pend), pend_cmp);
		q->sorted = true;
	}
	while (q->head < q->n && q->pend[q->head].ev.hdr.ts_ns < until)
		nccl_on_call(a, &q->pend[q->head++].ev);
	if (q->head == q->n)
		q->head = q->n = 0;
	q->busy = false;
}

void slots_nccl_before(struct agent *a, uint64_t ts)
{
	nccl_drain(a, ts);
}

int slots_consume(struct agent *a)
{
	struct nccl_slots *q = &nccl_slots_state;
	int err;

	if (a->in_ring & IN_RB_CUDA) {
		/* an rb_cuda callback is running: libbpf would hand its records out again */
		nccl_drain(a, q->t0);
		return 0;
	}
	q->t0 = now_ns();
	err = a->rb_cuda ? ring_buffer__consume(a->rb_cuda) : 0; /* none: no rings opened */
	/* from an rb_misc exit: rb_cuda alone, up to t0 */
	if (err >= 0 && a->rb && !(a->in_ring & IN_RB))
		err = ring_buffer__consume(a->rb);
	nccl_drain(a, q->t0);
	return err < 0 ? err : 0;
}

/*
 * The capture_hooks entry: a deep-dive is about to move processes between
 * the slots and rb_cuda. The slots are copied now and what is safe handed
 * on; the rest waits for the next consume, where the ring's calls take
 * their turn after them (slots_nccl_before). The rings are not consumed
 * here: their records could start another deep-dive while this one syncs.
 */
static void nccl_flush(struct agent *a)
{
	nccl_drain(a, nccl_slots_state.t0);
}

static void nccl_counts(struct agent *a, struct nccl_slot_counts *out)
{
	struct nccl_slots *q = &nccl_slots_state;

	(void)a;
	out->per_cpu = q->s.per_cpu;
	out->written = slices_written(&q->s);
	out->overwritten = q->s.overwritten;
}

int slots_nccl_start(struct agent *a)
{
	struct nccl_slots *q = &nccl_slots_state;
	uint32_t per_cpu = loader_nccl_slots(a);
	int err;

	if (!per_cpu || !loader_loaded(a))
		return 0;
	err = slices_map(&q->s, loader_map_fd(a, LOADER_NCCL_SLOTS),
			 loader_map_fd(a, LOADER_NCCL_CUR), sizeof(struct nccl_slot), per_cpu,
			 recorder_kernel_cpus());
	if (err) {
		pr_err("NCCL slots: cannot map the kernel's per-CPU slots: %s", strerror(-err));
		return err;
	}
	q->sorted = true;
	a->cap.nccl_flush = nccl_flush;
	a->cap.nccl_counts = nccl_counts;
	return 0;
}

void slots_nccl_stop(struct agent *a)
{
	struct nccl_slots *q = &nccl_slots_state;

	a->cap.nccl_flush = NULL;
	a->cap.nccl_counts = NULL;
	slices_unmap(&q->s);
	free(q->pend);
	memset(q, 0, sizeof(*q));
}
