// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * usdt_dlopen - a process whose step probes are not in its executable (this
 * file has none) but in a library it dlopen()s late, as Python loads a
 * native engine: tests/integration/usdt_lib.c.
 *
 * usage: usdt_dlopen -l LIB [-n STEPS] [-w GO_FILE] [-e EXIT_FILE]
 *   Loads the real libcudart (no GPU: the calls fail, the probes fire) and
 *   prints {"pid":P,"tid":T}; waits for GO_FILE (at most 30 s), then
 *   dlopen()s LIB and waits (at most 10 s) for its two semaphores to be
 *   counted up, i.e. for a tracer to have found and attached the probes,
 *   then 0.5 s more (see below), and prints
 *   {"loaded":true,"waited_ms":W,"semaphore":S}; runs STEPS steps of LIB,
 *   each launching 3 kernels (usdt_lib.c prints one line per step); prints
 *   {"done":true} and waits for EXIT_FILE (at most 30 s).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "cudart.h"
#include "harness.h"

typedef unsigned (*semaphore_fn)(int end);
typedef void (*steps_fn)(int, void (*)(void *), void *);

/* a step's GPU work: what the engine would launch */
static void launch3(void *arg)
{
	struct dim3 grid = {4, 1, 1}, block = {64, 1, 1};
	launch_fn launch = (launch_fn)arg;

	for (int k = 0; k < 3; k++)
		launch((void *)0xabc0, grid, block, NULL, 0, NULL);
}

int main(int argc, char **argv)
{
	int waited = 0;
	semaphore_fn semaphore;
	struct step_opts o;
	launch_fn launch;
	steps_fn run;
	void *h;

	if (step_opts_parse(argc, argv, true, &o) || !o.lib) {
		fprintf(stderr, "usage: %s -l LIB [-n STEPS] [-w GO_FILE] [-e EXIT_FILE]\n",
			argv[0]);
		return 2;
	}
	launch = cudart_launch("usdt_dlopen");
	if (!launch)
		return 1;
	print_pid_tid();
	await_file(o.go, 30);

	h = dlopen(o.lib, RTLD_NOW | RTLD_LOCAL);
	semaphore = h ? (semaphore_fn)dlsym(h, "usdt_lib_semaphore") : NULL;
	run = h ? (steps_fn)dlsym(h, "usdt_lib_steps") : NULL;
	if (!semaphore || !run) {
		fprintf(stderr, "usdt_dlopen: cannot load %s: %s\n", o.lib, dlerror());
		return 1;
	}
	/*
	 * The agent attaches at its next look at the maps: steps before that
	 * are lost. A semaphore is counted up when the kernel registers the
	 * probe, before libbpf has attached the program to it; a probe hit in
	 * that window makes the kernel remove the breakpoint from this process
	 * for good (seen on 6.18 with pid-filtered uprobes), so the steps start
	 * a while after both semaphores are up, as an engine that was loaded
	 * before it started serving would.
	 */
	while ((!semaphore(0) || !semaphore(1)) && waited < 10000) {
		usleep(10000);
		waited += 10;
	}
	usleep(500000);
	printf("{\"loaded\":true,\"waited_ms\":%d,\"semaphore\":%u}\n", waited, semaphore(0));
	fflush(stdout);
	run(o.steps, launch3, (void *)launch);
	printf("{\"done\":true}\n");
	fflush(stdout);
	await_file(o.ex, 30);
	return 0;
}
