// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * python.bpf.c - the Python frames of traced threads, sampled (issue "Python
 * frames"; docs/architecture.md). A CPU clock event on every CPU
 * (--python-hz, agent/sources/loader.c) runs py_sample; when the thread on
 * the CPU belongs to a process in py_procs (a traced process that runs
 * CPython 3.10-3.13, found by agent/sources/python.c), it walks the
 * interpreter's own structures, as the agent described them in the
 * process's struct py_proc:
 *
 *   _PyRuntime.interpreters.head -> PyInterpreterState.threads.head
 *     -> PyThreadState (.next ...) whose native_thread_id is this thread
 *        (3.10: whose thread_id is its pthread_self())
 *     -> current frame (3.11, 3.12: through tstate->cframe)
 *     -> _PyInterpreterFrame.f_code, .previous ... (innermost first;
 *        3.10: PyFrameObject.f_code, .f_back)
 *
 * and sends the code object pointers (EV_PY_STACK on rb_misc); the agent
 * names them. The launch probes (bpf/cuda.bpf.c, py_launch) send the same
 * walk of the launching thread in deep mode (py_stack_send). Every read is
 * bpf_probe_read_user(): a process that lies about its structures gets
 * wrong or no frames, never more than PY_THREADS + PY_STACK_DEPTH reads.
 * The thread's PyThreadState is cached by tid (py_tstate) and checked
 * again at every use.
 */
#include "lib/common.bpf.h"
#include <bpf/bpf_core_read.h>

#define PY_THREADS 64 /* thread states walked to find this thread's */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} py_tstate SEC(".maps");

static __always_inline __u64 read_ptr(__u64 addr)
{
	__u64 v = 0;

	if (bpf_probe_read_user(&v, sizeof(v), (const void *)addr))
		return 0;
	return v;
}

/*
 * what the thread's PyThreadState holds to name it: its tid (3.11+,
 * native_thread_id), or pthread_self() (3.10, thread_id), which is the
 * thread's fs base on x86-64 (glibc's TCB); 0 elsewhere: nothing matches
 */
static __always_inline __u64 thread_key(const struct py_proc *pp, __u32 tid)
{
	if (!pp->tid_is_pthread)
		return tid;
#if defined(__TARGET_ARCH_x86)
	return BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), thread.fsbase);
#else
	return 0;
#endif
}

/* this thread's PyThreadState, or 0 when the interpreter has none for it */
static __always_inline __u64 find_tstate(const struct py_proc *pp, __u32 tid)
{
	__u64 *cached = bpf_map_lookup_elem(&py_tstate, &tid);
	__u64 interp, ts, key = thread_key(pp, tid);

	if (!key)
		return 0;
	if (cached && *cached && read_ptr(*cached + pp->tstate_tid) == key)
		return *cached;
	interp = read_ptr(pp->interp_head);
	if (!interp)
		return 0;
	ts = read_ptr(interp + pp->interp_threads);
	for (int i = 0; i < PY_THREADS && ts; i++) {
		if (read_ptr(ts + pp->tstate_tid) == key) {
			bpf_map_update_elem(&py_tstate, &tid, &ts, BPF_ANY);
			return ts;
		}
		ts = read_ptr(ts + pp->tstate_next);
	}
	return 0;
}

/*
 * The thread's frames as an EV_PY_STACK stamped ts_ns: on rb_misc (a
 * sample), or with PY_F_LAUNCH on rb_cuda (the frames of the launch whose
 * record follows, bpf/cuda.bpf.c). Nothing when its process runs no Python
 * the agent described, or the thread is outside Python code. One global
 * function serves py_sample and py_launch (which the launch probes
 * tail-call, so that the walk is not verified again in each of them).
 */
__noinline int py_stack_send(__u64 id, __u64 ts_ns, __u32 flags)
{
	__u32 pid = id >> 32, tid = (__u32)id;
	struct py_stack_event *e;
	__u64 tstate, frame;
	struct py_proc *pp;
	__u16 n;
	int i;

	if (!pid)
		return 0;
	pp = bpf_map_lookup_elem(&py_procs, &pid);
	if (!pp)
		return 0;
	tstate = find_tstate(pp, tid);
	if (!tstate)
		return 0;
	frame = read_ptr(tstate + pp->tstate_frame);
	if (frame && pp->cframe_frame != PY_OFF_NONE)
		frame = read_ptr(frame + pp->cframe_frame);
	if (!frame)
		return 0; /* a Python thread outside any Python code */
	if (flags & PY_F_LAUNCH)
		e = reserve(&rb_cuda, sizeof(*e), EV_PY_STACK);
	else
		e = reserve(&rb_misc, sizeof(*e), EV_PY_STACK);
	if (!e)
		return 0;
	e->flags = flags & PY_F_LAUNCH;
	e->pad = 0;
	/*
	 * One slot per frame walked, the loop's own index: a count that
	 * branches per frame would make the verifier walk every combination.
	 * The entry frame of a C call (3.12+) leaves its slot 0.
	 */
	for (i = 0; i < PY_STACK_DEPTH && frame; i++) {
		__u64 code = read_ptr(frame + pp->frame_code);
		__u8 owner = 0;

		if (pp->owner_cstack != 0xff)
			bpf_probe_read_user(&owner, 1, (const void *)(frame + pp->frame_owner));
		e->f[i].code = owner == pp->owner_cstack ? 0 : code;
		e->f[i].instr = read_ptr(frame + pp->frame_instr);
		frame = read_ptr(frame + pp->frame_previous);
	}
	if (frame)
		e->flags |= PY_F_TRUNCATED;
	n = i;
	e->n = n;
	fill_hdr(&e->hdr, EV_PY_STACK, sizeof(*e) - (PY_STACK_DEPTH - n) * sizeof(e->f[0]), pid,
		 tid, ts_ns);
	if (flags & PY_F_LAUNCH)
		bpf_ringbuf_submit(e, batch_wakeup(&rb_cuda, sizeof(*e)));
	else
		bpf_ringbuf_submit(e, 0);
	return 0;
}

/* per CPU: the clock ticks py_sample lets pass before its next sample */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} py_skip SEC(".maps");

/*
 * The clock ticks cfg.py_ticks times --python-hz; a sample is taken after a
 * random 1 to 2 * py_ticks - 1 ticks (py_ticks on average: --python-hz). A
 * fixed period locks onto work that repeats at a multiple of it: two Python
 * threads that take turns at the GIL every 5 ms (its switch interval) turn
 * about 4 times in the 20.4 ms of 49 Hz, and a fixed 49 Hz found one of them
 * in 0 to 30 of 30 chances for the same 50% share. Random gaps take every
 * phase of such work alike (tests/integration/python.sh, python_fixed_period)
 */
SEC("perf_event")
int py_sample(void *ctx)
{
	__u32 zero = 0, *skip;

	(void)ctx;
	if (cfg.py_ticks > 1 && (skip = bpf_map_lookup_elem(&py_skip, &zero))) {
		if (*skip) {
			(*skip)--;
			return 0;
		}
		*skip = bpf_get_prandom_u32() % (2 * cfg.py_ticks - 1);
	}
	return py_stack_send(bpf_get_current_pid_tgid(), bpf_ktime_get_ns(), 0);
}
