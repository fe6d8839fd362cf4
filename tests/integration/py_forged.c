// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * py_forged - a process that claims to be CPython 3.11 and lies in every
 * structure the Python frame walk reads (tests/integration/python.sh,
 * python_forged). Built as python3-forged (the name says python), it
 * exports _PyRuntime, Py_Version (3.11.2) and PyCode_Type, maps the real
 * libcudart (so the agent traces it) and spins on the CPU for its
 * argument's seconds in two threads, after printing {"pid", "tid", "tid2"}:
 *
 *   - the thread list: the main thread's state, then a state that is its
 *     own next (a cycle no thread matches: the second thread's walk ends
 *     after its bound, and it has no samples);
 *   - the frames: six frames in a cycle (the walk stops at its depth,
 *     truncated), whose code objects are: a name with control characters
 *     and quotes and a Latin-1 file name (named, cleaned: "a?b?\"c" in
 *     "/tmp/caf\u00e9.py"); one whose type is not PyCode_Type; one whose name
 *     claims 2^40 characters; one whose name points at unmapped memory;
 *     one whose name is UCS-4 with a surrogate and a code point past
 *     U+10FFFF (named "x??"); one whose name is 300 Latin-1 "\u00e9" (cut at
 *     a character: 63 of them, 126 bytes). The second to fourth have no
 *     name ("?").
 *
 * The main thread also calls cudaLaunchKernel once a millisecond or so: in
 * deep mode those launches carry the same forged frames (python_stack).
 *
 * Offsets: agent/sources/python_layout.h's 3.11 entry.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "../../agent/sources/python_layout.h"
#include "cudart.h"

#define EXPORT __attribute__((visibility("default"), used))

EXPORT unsigned long Py_Version = 0x030b02f0UL;
EXPORT unsigned char _PyRuntime[4096];
EXPORT unsigned char PyCode_Type[256];

#define NF 6
static unsigned char interp[256], tstate[2][512], cframe[64], frames[NF][128], codes[NF][256];
static unsigned char strs[NF][512];

static void put64(unsigned char *base, unsigned off, uint64_t v)
{
	memcpy(base + off, &v, sizeof(v));
}

static void put32(unsigned char *base, unsigned off, uint32_t v)
{
	memcpy(base + off, &v, sizeof(v));
}

/* a compact str: kind 1, 2 or 4, ascii or not, length chars of data */
static void make_str(const struct py_layout *l, unsigned char *s, unsigned kind, int ascii,
		     uint64_t length, const void *data, size_t bytes)
{
	put64(s, l->str_length, length);
	put32(s, l->str_state, kind << 2 | 1u << 5 | (unsigned)!!ascii << 6);
	memcpy(s + (ascii ? l->str_ascii_size : l->str_compact_size), data, bytes);
}

static volatile int stop;

static void *spin2(void *arg)
{
	(void)arg;
	while (!stop)
		;
	return NULL;
}

int main(int argc, char **argv)
{
	const struct py_layout *l = py_layout_of(3, 11);
	static const uint32_t ucs4[3] = {'x', 0xd800, 0x110000};
	unsigned char latin[300];
	double secs = argc > 1 ? atof(argv[1]) : 3;
	struct timespec t0, t;
	volatile uint64_t n = 0;
	pthread_t th;
	long tid2 = 0;

	launch_fn launch = cudart_launch("py_forged");
	uint64_t launches = 0;

	if (!l || !launch)
		return 1;
	put64(_PyRuntime, l->runtime_interp_head, (uintptr_t)interp);
	put64(interp, l->interp_threads_head, (uintptr_t)tstate[0]);
	put64(tstate[0], l->tstate_native_tid, (uint64_t)syscall(SYS_gettid));
	put64(tstate[0], l->tstate_next, (uintptr_t)tstate[1]);
	put64(tstate[1], l->tstate_native_tid, 0);
	put64(tstate[1], l->tstate_next, (uintptr_t)tstate[1]);
	put64(tstate[0], l->tstate_frame, (uintptr_t)cframe);
	put64(cframe, l->cframe_frame, (uintptr_t)frames[0]);
	for (int i = 0; i < NF; i++) {
		put64(frames[i], l->frame_code, (uintptr_t)codes[i]);
		put64(frames[i], l->frame_previous, (uintptr_t)frames[(i + 1) % NF]);
		put64(codes[i], 8, (uintptr_t)PyCode_Type);
		put64(codes[i], l->code_qualname, (uintptr_t)strs[i]);
		put64(codes[i], l->code_filename, (uintptr_t)strs[1]);
		put32(codes[i], l->code_firstlineno, 10 + i);
	}
	make_str(l, strs[0], 1, 1, 6, "a\001b\n\"c", 6);
	make_str(l, strs[1], 1, 0, 12, "/tmp/caf\xe9.py", 12);
	put64(codes[0], l->code_filename, (uintptr_t)strs[1]);
	put64(codes[1], 8, (uintptr_t)interp); /* not a code object */
	make_str(l, strs[2], 1, 1, 1ULL << 40, "huge", 4);
	put64(codes[3], l->code_qualname, 16); /* unmapped */
	make_str(l, strs[4], 4, 0, 3, ucs4, sizeof(ucs4));
	memset(latin, 0xe9, sizeof(latin));
	make_str(l, strs[5], 1, 0, sizeof(latin), latin, sizeof(latin));

	if (pthread_create(&th, NULL, spin2, &tid2))
		return 1;
	printf("{\"pid\":%d,\"tid\":%ld}\n", getpid(), (long)syscall(SYS_gettid));
	fflush(stdout);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int i = 0; i < 1000000; i++)
			n++;
		launch((const void *)0x1000, (struct dim3){1, 1, 1}, (struct dim3){32, 1, 1}, NULL,
		       0, NULL); /* fails without a GPU; the uprobe fires */
		launches++;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	stop = 1;
	pthread_join(th, NULL);
	printf("{\"done\":1,\"launches\":%llu}\n", (unsigned long long)launches);
	return 0;
}
