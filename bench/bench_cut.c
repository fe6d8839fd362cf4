// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * bench_cut - what the live step cut costs the agent's loop (bench/cut.sh).
 *
 * A made-up stream like bench_shim's into the agent, fed straight to the
 * step segmenter (correlator/src/steps.c) as the agent's loop feeds it: one
 * process, one launching thread, K kernels/s in steps of S ms, each ending
 * with the device-to-host copy of the sampled tokens (the automatic cut);
 * one launch in J joined, the others sampled out (CORR_GPU_F_NO_LAUNCH, as
 * the shim's launch sampling leaves them). With -g, no copy back: a step's
 * launches come twice as fast and take the first half of it, and the pause
 * (half a step) cuts, as the automatic cut does without copies. Records arrive in CUPTI-like
 * batches every B ms, and the segmenter cuts every I ms what ended H ms
 * before, as diag_advance() does each interval.
 *
 * Prints the time of each cut (mean, p50, max: the loop is held that long),
 * the CPU per record, and a checksum of the steps (count, kernels, total
 * duration) so that two builds can be compared for equal output; when no
 * kernel is lost, kernels = kernels_made. Never asserts on a figure.
 *
 * usage: bench_cut [-k kernels/s] [-s seconds] [-S step_ms] [-j joined_1_in]
 *                  [-b batch_ms] [-i interval_ms] [-H hold_ms] [-g]
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "correlator.h"
#include "diagnose.h"

struct sum {
	unsigned long long steps, kernels, dur;
};

static void on_step(void *ctx, const struct diag_step *s)
{
	struct sum *m = ctx;

	m->steps++;
	m->kernels += (unsigned long long)s->kernels;
	m->dur += (unsigned long long)s->dur_ns;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static unsigned long arg(const char *s, char o)
{
	char *e;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &e, 10);
	if (errno || *e || !v) {
		fprintf(stderr, "bench_cut: -%c takes a positive integer, not '%s'\n", o, s);
		exit(2);
	}
	return v;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_cut [-k kernels/s (133000)] [-s seconds (30)] [-S step_ms (75)]\n"
		   "                 [-j joined_1_in (1000)] [-b batch_ms (100)] [-i interval_ms "
		   "(1000)]\n"
		   "                 [-H hold_ms (2000)] [-g (no copy back: launch gaps cut)]\n"
		   "Feeds a made-up stream to the step segmenter as the agent's loop does and "
		   "prints\n"
		   "how long each cut held the loop, and a checksum of the steps cut.\n");
}

int main(int argc, char **argv)
{
	unsigned long rate = 133000, secs = 30, step_ms = 75, join = 1000, batch_ms = 100;
	unsigned long ival_ms = 1000, hold_ms = 2000;
	struct sum sum = {0};
	bool gaps = false;
	int o;

	while ((o = getopt(argc, argv, "k:s:S:j:b:i:H:gh")) != -1) {
		switch (o) {
		case 'g':
			gaps = true;
			break;
		case 'k':
			rate = arg(optarg, 'k');
			break;
		case 's':
			secs = arg(optarg, 's');
			break;
		case 'S':
			step_ms = arg(optarg, 'S');
			break;
		case 'j':
			join = arg(optarg, 'j');
			break;
		case 'b':
			batch_ms = arg(optarg, 'b');
			break;
		case 'i':
			ival_ms = arg(optarg, 'i');
			break;
		case 'H':
			hold_ms = arg(optarg, 'H');
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}

	struct diag_seg_opts so = {.sz = sizeof(so),
				   .auto_only = true,
				   .hold_ns = hold_ms * 1000000ULL,
				   .step = on_step,
				   .step_ctx = &sum};
	struct diag_seg *sg = diag_seg__new(&so);
	uint64_t t0 = 1000000000ULL, end = t0 + secs * 1000000000ULL;
	uint64_t per_step = rate * step_ms / 1000, step_ns = step_ms * 1000000ULL;
	uint64_t gap = step_ns / (per_step + 1), lag = step_ns / 2;
	uint64_t next_batch = t0 + batch_ms * 1000000ULL, next_cut = t0 + ival_ms * 1000000ULL;
	size_t ncut = 0, records = 0, made = 0; /* made: kernels */
	/*
	 * the last step starts before the run's end; its records end within a
	 * step and the lag (half a step) after that
	 */
	double *cut = calloc((secs * 1000 + 2 * step_ms) / ival_ms + 2, sizeof(*cut)), busy = 0;
	uint32_t corr = 1;
	struct corr_gpu *pend = calloc(per_step ? per_step : 1, sizeof(*pend));
	struct corr_launch *pl = calloc(per_step ? per_step : 1, sizeof(*pl));

	if (!sg || !cut || !pend || !pl || per_step < 2) {
		fprintf(stderr, "bench_cut: %s\n",
			per_step < 2 ? "fewer than 2 kernels a step" : strerror(ENOMEM));
		return 1;
	}
	/*
	 * Each step: per_step - 1 kernels launched gap apart, the copy last
	 * (with -g: per_step kernels gap / 2 apart, no copy);
	 * the GPU runs them lag behind their launch (the CPU runs ahead), back
	 * to back. Records of a batch are added once the batch's time passed.
	 */
	for (uint64_t s0 = t0; s0 < end; s0 += step_ns) {
		for (uint64_t k = 0; k < per_step; k++) {
			uint64_t l = s0 + k * (gaps ? gap / 2 : gap);
			bool copy = !gaps && k == per_step - 1;

			pend[k] = (struct corr_gpu){
			    .kind = copy ? CORR_KIND_MEMCPY : CORR_KIND_KERNEL,
			    .pid = 100,
			    .corr_id = corr++,
			    .start_ns = l + lag,
			    .end_ns = l + lag + gap - 1,
			    .copy_kind = copy ? 2 : 0,
			    .name =
				copy ? NULL : (k & 1 ? "gemm_bf16_128x128" : "flash_fwd_kernel"),
			};
			pl[k] = (struct corr_launch){.pid = 100,
						     .tid = 101,
						     .ts_ns = l,
						     .corr_id = pend[k].corr_id,
						     .api = "cudaLaunchKernel"};
			if (pend[k].corr_id % join)
				pend[k].flags |= CORR_GPU_F_NO_LAUNCH;
		}
		for (uint64_t k = 0; k < per_step; k++) {
			double a;

			/* a batch arrives once its records ended; cut on the interval */
			while (pend[k].end_ns > next_batch) {
				next_batch += batch_ms * 1000000ULL;
				if (next_batch > next_cut) {
					a = now_s();
					diag_seg__advance(sg, next_cut);
					cut[ncut] = now_s() - a;
					busy += cut[ncut++];
					next_cut += ival_ms * 1000000ULL;
				}
			}
			diag_seg__add_gpu(sg, &pend[k],
					  pend[k].flags & CORR_GPU_F_NO_LAUNCH ? NULL : &pl[k]);
			records++;
			made += pend[k].kind == CORR_KIND_KERNEL;
		}
	}
	diag_seg__flush(sg);
	if (!ncut) {
		fprintf(stderr, "bench_cut: no cut ran (-s shorter than -i?)\n");
		return 1;
	}
	{
		double mean = busy / (double)ncut, mx;

		qsort(cut, ncut, sizeof(*cut), cmp_d);
		mx = cut[ncut - 1];
		printf("cuts %zu mean_ms %.2f p50_ms %.2f max_ms %.2f ns/record %.0f "
		       "steps %llu kernels %llu dur_ns %llu records %zu kernels_made %zu\n",
		       ncut, mean * 1e3, cut[ncut / 2] * 1e3, mx * 1e3,
		       busy * 1e9 / (double)records, sum.steps, sum.kernels, sum.dur, records,
		       made);
	}
	diag_seg__free(sg);
	free(cut);
	free(pend);
	free(pl);
	return 0;
}
