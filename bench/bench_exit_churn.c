// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * bench_exit_churn.c - the correlator under a churn of short-lived CUDA
 * processes (issue 18): N processes, one after another, each with two
 * threads that make L launches (uprobe entry, shim callback, one kernel per
 * launch) and one GPU record that never finds its launch, then the exit.
 * Processes start 1 ms apart on the trace clock, so the 10 s window keeps
 * up to 10,000 processes' launches in the ring (capped at 131,072), as a
 * live agent does. Prints the time per process; never asserts.
 *
 * usage: bench_exit_churn N [L]   (L: launches per thread, default 8)
 *
 * It uses only correlator.h, so the same source builds against an older
 * library for a side-by-side run (bench/exit_churn.sh).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "correlator.h"

static uint64_t emitted, joined;

static void emit(void *ctx, const struct corr_gpu *g, const struct corr_launch *l)
{
	(void)ctx;
	(void)g;
	emitted++;
	joined += l != NULL;
}

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct corr_opts co = {.sz = sizeof(co), .emit = emit};
	uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 0;
	uint32_t per = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 8;
	double w0, c0, wall, cpu;
	struct corr *c;
	uint64_t ts;

	if (!n || !per) {
		fprintf(stderr, "usage: bench_exit_churn N [LAUNCHES_PER_THREAD]\n");
		return 2;
	}
	c = corr__new(&co);
	if (!c) {
		perror("corr__new");
		return 1;
	}
	w0 = clock_s(CLOCK_MONOTONIC);
	c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	for (uint32_t i = 0; i < n; i++) {
		/* pids 1000.. wrap within the kernel's default pid_max, as a node's do */
		uint32_t pid = 1000 + i % 4000000, id = 1;

		ts = 1000000000ULL + (uint64_t)i * 1000000;
		for (uint32_t t = 0; t < 2; t++) {
			uint32_t tid = pid * 4 + t;

			for (uint32_t k = 0; k < per; k++, id++) {
				struct corr_gpu g = {
				    .kind = CORR_KIND_KERNEL,
				    .pid = pid,
				    .corr_id = id,
				    .stream = 7,
				    .name = "_Z6kernelv",
				};

				corr__add_uprobe_launch(c, pid, tid, ts, 0);
				corr__add_callback(c, pid, tid, ts + 2000, id, 2, 211);
				g.start_ns = ts + 5000;
				g.end_ns = ts + 9000;
				corr__add_gpu(c, &g);
				ts += 10000;
			}
		}
		{
			struct corr_gpu g = {
			    .kind = CORR_KIND_KERNEL, .pid = pid, .corr_id = 999999};

			g.start_ns = g.end_ns = ts;
			corr__add_gpu(c, &g); /* waits until the exit */
		}
		corr__process_exit(c, pid, ts + 1000);
	}
	corr__flush(c);
	wall = clock_s(CLOCK_MONOTONIC) - w0;
	cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
	printf("processes=%u launches_per_process=%u wall_s=%.3f cpu_s=%.3f ns_per_process=%.0f "
	       "joined=%llu emitted=%llu dropped_exit=%llu\n",
	       n, 2 * per, wall, cpu, cpu * 1e9 / n, (unsigned long long)joined,
	       (unsigned long long)emitted,
	       (unsigned long long)corr__counters(c)->launches_dropped_exit);
	corr__free(c);
	return 0;
}
