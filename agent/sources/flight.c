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
 * The slices are read with agent/sources/slots.c's reader, as sentinel's
 * NCCL calls are.
 */
#include <errno.h>
#include <string.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"

static struct flight_src {
	struct slices s;
	uint64_t pulls, no_stack;
	bool took;
} fl;

static void take(void *ctx, const void *entry)
{
	struct agent *a = ctx;
	const struct flight_launch *f = entry;

	if (recorder_kernel_launch(a, f, agent_instance_of(a, f->ev.hdr.pid)))
		return;
	fl.took = true;
	/* bpf_get_stackid() failed: another stack held its bucket */
	if (f->stack_id < -1)
		fl.no_stack++;
}

/*
 * Hand what the BPF side wrote since the last call to the recorder
 * (slices_read() counts what was overwritten); the recorder itself skips
 * (and counts) an entry older than its window.
 */
static void flight_pull(struct agent *a)
{
	fl.took = false;
	slices_read(&fl.s, take, a);
	/* each pull hands down at most per_cpu per CPU: copied <= pulls x that */
	if (fl.took)
		fl.pulls++;
}

static void flight_counts(struct agent *a, struct flight_counts *out)
{
	(void)a;
	out->per_cpu = fl.s.per_cpu;
	out->cpus = fl.s.cpus;
	out->written = slices_written(&fl.s);
	out->overwritten = fl.s.overwritten;
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
	int err;

	if (!loader_loaded(a) || !recorder_enabled(a) || !recorder_kernel_enabled(a))
		return 0;
	memset(&fl, 0, sizeof(fl));
	err = slices_map(&fl.s, loader_map_fd(a, LOADER_FLIGHT),
			 loader_map_fd(a, LOADER_FLIGHT_CUR), sizeof(struct flight_launch),
			 recorder_kernel_per_cpu(a), recorder_kernel_cpus());
	if (err) {
		pr_err("flight recorder: cannot map the kernel's launch rings: %s", strerror(-err));
		return err;
	}
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
	slices_unmap(&fl.s);
	memset(&fl, 0, sizeof(fl));
}
