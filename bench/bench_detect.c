// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * bench_detect - steps per second through the step detector on one core
 * (issue 5, item 6: at least 1 M steps/s). Printed, not asserted.
 *
 * Input: 2 M made-up decode and prefill steps of 8 instances x 4 ranks with
 * realistic workloads (batch 1-256, KV tokens growing as requests decode),
 * 1% noise, a top-kernel list per step and 1% slow steps, built before the
 * clock starts; the detector judges and learns from each, as live.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diagnose.h"

#define N_STEPS 2000000

static uint64_t rs = 0x2545f4914f6cdd1dULL;

static double urand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (rs >> 11) * (1.0 / 9007199254740992.0);
}

static uint64_t anomalies;

static void on_anomaly(void *ctx, const struct diag_anomaly *an)
{
	(void)ctx;
	(void)an;
	anomalies++;
}

/* resident set size, kB (/proc/self/status VmRSS); 0 when unknown */
static long rss_kb(void)
{
	char line[256];
	long kb = 0;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/*
 * Memory per instance whatever the number of workloads (issue 17): 1 M
 * decode steps of one (instance, rank, phase), every one a random workload
 * (tokens 1..1e6, KV tokens 1..1e8), made on the fly. The cells of a key are
 * bounded (baseline.c: prune), so the detector's growth stops.
 */
#define N_RANDOM 1000000
static int memory(void)
{
	struct diag_det_opts o = {.sz = sizeof(o), .anomaly = on_anomaly};
	struct diag_det *d = diag_det__new(&o);
	long before = rss_kb(), half = 0;
	uint64_t ts = 1000000000ULL;

	if (!d) {
		fprintf(stderr, "bench_detect: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < N_RANDOM; i++) {
		struct diag_step s;

		diag_step_init(&s);
		s.instance = "random";
		s.rank = 0;
		s.phase = DIAG_PHASE_DECODE;
		s.tokens = s.batch_size = 1 + (int64_t)(urand() * 1e6);
		s.kv_tokens = 1 + (int64_t)(urand() * 1e8);
		s.start_ns = ts;
		s.dur_ns = (uint64_t)(20e6 * (1 + urand()));
		ts += s.dur_ns;
		diag_det__add_step(d, &s, NULL);
		if (i == N_RANDOM / 2)
			half = rss_kb();
	}
	printf("bench_detect: %d steps of random workloads on one key: resident set +%ld kB "
	       "after half of them, +%ld kB after all (bounded: the second half adds %ld kB)\n",
	       N_RANDOM, half - before, rss_kb() - before, rss_kb() - half);
	diag_det__free(d);
	return 0;
}

int main(void)
{
	static const char *const inst[8] = {"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"};
	struct diag_det_opts o = {.sz = sizeof(o), .anomaly = on_anomaly};
	struct diag_step *st = calloc(N_STEPS, sizeof(*st));
	struct diag_det *d = diag_det__new(&o);
	struct timespec t0, t1;
	uint64_t ts = 1000000000ULL;
	double secs;

	if (!st || !d) {
		fprintf(stderr, "bench_detect: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < N_STEPS; i++) {
		struct diag_step *s = &st[i];
		size_t round = i / 32;
		int batch = 1 + (int)(round / 500 % 256);
		bool prefill = round % 50 == 0;
		double dur;

		diag_step_init(s);
		s->instance = inst[i / 4 % 8];
		s->rank = (int32_t)(i % 4);
		s->phase = prefill ? DIAG_PHASE_PREFILL : DIAG_PHASE_DECODE;
		s->tokens = prefill ? batch * 512 : batch;
		s->batch_size = batch;
		s->kv_tokens = (int64_t)batch * (512 + (int64_t)(round % 500));
		dur =
		    prefill ? 30e6 + 0.2e6 * batch * 5 : 20e6 + 0.3e6 * batch + 2.0 * s->kv_tokens;
		dur *= 1 + 0.01 * (urand() * 2 - 1);
		if (urand() < 0.01)
			dur *= 1.5;
		s->start_ns = ts + (uint64_t)(urand() * 10000);
		s->dur_ns = (uint64_t)dur;
		s->gpu_busy_ns = (int64_t)(0.9 * dur);
		s->idle_ns = (int64_t)(0.1 * dur);
		s->n_top = 3;
		s->top[0] = (struct diag_kernel){"sm90_gemm_bf16", 160, (uint64_t)(0.5 * dur)};
		s->top[1] = (struct diag_kernel){"flash_fwd_kernel", 32, (uint64_t)(0.2 * dur)};
		s->top[2] =
		    (struct diag_kernel){"ncclDevKernel_AllReduce", 64, (uint64_t)(0.1 * dur)};
		if (i % 32 == 31)
			ts += (uint64_t)dur + 100000;
	}
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
	for (size_t i = 0; i < N_STEPS; i++)
		diag_det__add_step(d, &st[i], NULL);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
	secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("bench_detect: %d steps (8 instances x 4 ranks x 2 phases, 3 kernels per step) in "
	       "%.3f s of CPU time: %.2f M steps/s on one core (target >= 1 M/s); %llu anomalies, "
	       "%llu refits\n",
	       N_STEPS, secs, N_STEPS / secs / 1e6, (unsigned long long)anomalies,
	       (unsigned long long)diag_det__counters(d)->refits);
	diag_det__free(d);
	free(st);
	return memory();
}
