// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * flight.c - the flight recorder's kernel half, on the BPF side of the line:
 * in sentinel mode the launch uprobes write every launch of a traced thread
 * into per-CPU rings of the mmap'able array map `flight` (their cursors in
 * `flight_cur`, stacks in `flight_stacks`; bpf/events.h, struct
 * flight_launch). This file maps the two arrays read-only and, when the
 * recorder asks (capture_hooks.flight_pull: at every tick and before a window
 * is read), hands each entry written since the last pull to
 * recorder_kernel_launch(). It also formats an entry as the cuda_launch
 * record deep mode would have sent (capture_hooks.flight_json), so that the
 * recorder never sees the maps (docs/architecture.md, "Flight recorder").
 *
 * A CPU's slice has one writer, that CPU: entry n carries seq n + 1 once
 * complete and 0 while it is written, so a copy is checked before and after.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"

static struct flight_src {
	struct flight_launch *ring;
	volatile struct flight_cursor *cur;
	size_t ring_len, cur_len;
	uint32_t per_cpu, cpus;
	uint64_t *read; /* per CPU: entries consumed */
	uint64_t overwritten, pulls, no_stack;
} fl;

static size_t page_round(size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (n + pg - 1) / pg * pg;
}

/* launches the BPF side wrote so far, all CPUs */
static uint64_t written(void)
{
	uint64_t sum = 0;

	for (uint32_t c = 0; c < fl.cpus; c++)
		sum += __atomic_load_n(&fl.cur[c].n, __ATOMIC_ACQUIRE);
	return sum;
}

/*
 * Hand what the BPF side wrote since the last call to the recorder. An
 * entry overwritten before it was read (the CPU wrote more than its ring
 * holds between two pulls), or while it was read, is counted in overwritten;
 * the recorder itself skips (and counts) one older than its window.
 */
static void flight_pull(struct agent *a)
{
	bool took = false;

	for (uint32_t c = 0; c < fl.cpus; c++) {
		uint64_t n = __atomic_load_n(&fl.cur[c].n, __ATOMIC_ACQUIRE);
		uint64_t i = fl.read[c];

		if (n - i > fl.per_cpu) {
			fl.overwritten += n - i - fl.per_cpu;
			i = n - fl.per_cpu;
		}
		for (; i < n; i++) {
			const struct flight_launch *e =
			    &fl.ring[(size_t)c * fl.per_cpu + (i & (fl.per_cpu - 1))];
			struct flight_launch copy;

			if (__atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) != i + 1) {
				fl.overwritten++;
				continue;
			}
			memcpy(&copy, e, sizeof(copy));
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (__atomic_load_n(&e->seq, __ATOMIC_RELAXED) != i + 1 ||
			    copy.seq != i + 1) {
				fl.overwritten++;
				continue;
			}
			if (recorder_kernel_launch(a, &copy, agent_instance_of(a, copy.ev.hdr.pid)))
				continue;
			took = true;
			/* bpf_get_stackid() failed: another stack held its bucket */
			if (copy.stack_id < -1)
				fl.no_stack++;
		}
		fl.read[c] = n;
	}
	/* each pull hands down at most per_cpu per CPU: copied <= pulls x that */
	if (took)
		fl.pulls++;
}

static void flight_counts(struct agent *a, struct flight_counts *out)
{
	(void)a;
	out->per_cpu = fl.per_cpu;
	out->cpus = fl.cpus;
	out->written = written();
	out->overwritten = fl.overwritten;
	out->pulls = fl.pulls;
	out->no_stack = fl.no_stack;
}

/* an entry as cuda_launch JSON, its stack looked up by id now */
static long flight_json(struct agent *a, const struct flight_launch *f, char *buf, size_t cap)
{
	struct cuda_launch_stack_event se;
	size_t size = sizeof(se.ev);

	se.ev = f->ev;
	/* ids are never reused for another stack: a failed lookup only loses one */
	if (f->stack_id >= 0 && !loader_flight_stack(a, f->stack_id, se.ips, sizeof(se.ips))) {
		unsigned depth = 0;

		while (depth < MAX_STACK_DEPTH && se.ips[depth])
			depth++;
		se.ev.flags |= LAUNCH_F_STACK;
		se.ev.stack_sz = depth * 8;
		size = sizeof(se);
	}
	return decode_launch_json(a, &se.ev, size, buf, cap);
}

int flight_start(struct agent *a)
{
	void *ring, *cur;

	if (!loader_loaded(a) || !recorder_enabled(a) || !recorder_kernel_enabled(a))
		return 0;
	memset(&fl, 0, sizeof(fl));
	fl.per_cpu = recorder_kernel_per_cpu(a);
	fl.cpus = recorder_kernel_cpus();
	fl.ring_len = page_round((size_t)fl.per_cpu * fl.cpus * sizeof(struct flight_launch));
	fl.cur_len = page_round((size_t)fl.cpus * sizeof(struct flight_cursor));
	ring = mmap(NULL, fl.ring_len, PROT_READ, MAP_SHARED, loader_map_fd(a, LOADER_FLIGHT), 0);
	cur = mmap(NULL, fl.cur_len, PROT_READ, MAP_SHARED, loader_map_fd(a, LOADER_FLIGHT_CUR), 0);
	fl.read = calloc(fl.cpus, sizeof(*fl.read));
	if (ring == MAP_FAILED || cur == MAP_FAILED || !fl.read) {
		int err = -errno;

		pr_err("flight recorder: cannot map the kernel's launch rings: %s",
		       strerror(err ? -err : ENOMEM));
		if (ring != MAP_FAILED)
			munmap(ring, fl.ring_len);
		if (cur != MAP_FAILED)
			munmap(cur, fl.cur_len);
		free(fl.read);
		fl.read = NULL;
		return err ? err : -ENOMEM;
	}
	fl.ring = ring;
	fl.cur = cur;
	a->cap.flight_pull = flight_pull;
	a->cap.flight_counts = flight_counts;
	a->cap.flight_json = flight_json;
	return 0;
}

void flight_stop(struct agent *a)
{
	a->cap.flight_pull = NULL;
	a->cap.flight_counts = NULL;
	a->cap.flight_json = NULL;
	if (fl.ring)
		munmap(fl.ring, fl.ring_len);
	if (fl.cur)
		munmap((void *)fl.cur, fl.cur_len);
	free(fl.read);
	memset(&fl, 0, sizeof(fl));
}
