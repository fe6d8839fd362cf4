// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * bench_shim - what the CUPTI shim's channel costs at a GPU's record rate:
 * the shim thread inside the traced process (it converts completed CUPTI
 * buffers into records and sends them, docs/architecture.md, "The channel")
 * and the agent's receiver (agent/sources/shim_rx.c: validation and
 * delivery, not the join behind it). Printed, not asserted.
 *
 * One process plays the CUDA application: it loads the real shim
 * (build/libinfertrace_cupti.so) over the CUPTI test double
 * (tests/fakes/fake_cupti.c, linked as libcupti.so.13), then makes steps of
 * --kernels launches every --step-ms: a launch callback each (what CUPTI
 * calls on the launching thread) and a kernel record each, then a copy
 * back to the host (an LLM engine's sampled tokens) that ends the step, all
 * on one stream, handed back to the shim a full buffer at a time as CUPTI
 * does. A child process is the agent's end: shim_rx on the socket, draining
 * as the agent's loop does.
 *
 * Measured over the run, after the last record was sent: the shim thread's
 * CPU time (its thread CPU clock), the receiver's (getrusage in the child),
 * messages and records delivered, and what the shim counted as dropped.
 * The launching thread's cost per launch callback is printed too, with the
 * test double's own dispatch in it (an upper bound of the shim's part; on a
 * real GPU: docs/operations.md, "Checking a GPU node").
 */
#include <argp.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "fake_cupti.h"
#include "shim_rx.h"

struct opts {
	unsigned long kernels; /* per step */
	unsigned long step_ms;
	unsigned long seconds;
	unsigned long stall_ms; /* the launching thread sleeps this long once, mid-run */
	unsigned long lag_ms;	/* the GPU starts a kernel this long after its launch */
	const char *mode;
	const char *socket; /* a running agent's; NULL: our own receiver */
};

static struct argp_option options[] = {
    {"kernels", 'k', "N", 0, "Kernel launches per step (default 1600)", 0},
    {"step-ms", 't', "MS", 0, "One step every MS milliseconds (default 12)", 0},
    {"seconds", 's', "S", 0, "How long the workload runs (default 5)", 0},
    {"mode", 'm', "MODE", 0, "The shim's mode: sentinel (default) or deep", 0},
    {"stall-ms", 'x', "MS", 0,
     "Once, halfway through the run and halfway through a step, the launching thread sleeps "
     "MS milliseconds: a host stall an agent flags (and then sends its flight-recorder window)",
     0},
    {"gpu-lag-ms", 'g', "MS", 0,
     "The GPU starts each kernel MS milliseconds after its launch (default 0: at once), as "
     "under an engine whose CPU runs ahead: with MS over the step, a step's copy back ends "
     "after the next step's first launches (the steps overlap)",
     0},
    {"socket", 'S', "PATH", 0,
     "Send to a running agent's shim socket (its --shim-socket) instead of a receiver of our "
     "own; the agent's stats record then says what arrived",
     0},
    {0},
};

static int num(const char *arg, unsigned long lo, unsigned long hi, unsigned long *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (errno || end == arg || *end || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

static error_t parse_opt(int key, char *arg, struct argp_state *st)
{
	struct opts *o = st->input;

	switch (key) {
	case 'k':
		if (num(arg, 1, 100000, &o->kernels))
			argp_error(st, "--kernels: a number from 1 to 100000, not '%s'", arg);
		break;
	case 't':
		if (num(arg, 1, 10000, &o->step_ms))
			argp_error(st, "--step-ms: a number from 1 to 10000, not '%s'", arg);
		break;
	case 's':
		if (num(arg, 1, 3600, &o->seconds))
			argp_error(st, "--seconds: a number from 1 to 3600, not '%s'", arg);
		break;
	case 'g':
		if (num(arg, 0, 10000, &o->lag_ms))
			argp_error(st, "--gpu-lag-ms: a number from 0 to 10000, not '%s'", arg);
		break;
	case 'x':
		if (num(arg, 1, 10000, &o->stall_ms))
			argp_error(st, "--stall-ms: a number from 1 to 10000, not '%s'", arg);
		break;
	case 'm':
		if (strcmp(arg, "sentinel") && strcmp(arg, "deep"))
			argp_error(st, "--mode: sentinel or deep, not '%s'", arg);
		o->mode = arg;
		break;
	case 'S':
		o->socket = arg;
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------- the agent's end --- */

/* what the receiver reports to the parent when told to stop */
struct rx_result {
	uint64_t kernels, launch_cbs, status, msgs;
	uint64_t shim_sent, shim_dropped, cupti_dropped; /* the last status record */
	uint64_t cpu_ns;				 /* the child's user + system time */
};

static void on_record(void *ctx, const struct event_hdr *h, size_t len)
{
	struct rx_result *r = ctx;

	(void)len;
	if (h->type == EV_GPU_KERNEL) {
		r->kernels++;
	} else if (h->type == EV_GPU_LAUNCH_CB) {
		r->launch_cbs++;
	} else if (h->type == EV_SHIM_STATUS) {
		const struct shim_status_event *s = (const void *)h;

		r->status++;
		r->shim_sent = s->records_sent;
		r->shim_dropped = s->records_dropped;
		r->cupti_dropped = s->cupti_dropped;
	}
}

static uint64_t tv_ns(struct timeval tv)
{
	return (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
}

/* the child: receive until stop_fd reads EOF, then write the result to out_fd */
static int receiver(const char *path, int ready_fd, int stop_fd, int out_fd)
{
	struct shim_rx_opts o = {.sz = sizeof(o), .on_record = on_record};
	struct rx_result r = {0};
	struct shim_rx_stats st;
	struct rusage ru;
	struct shim_rx *rx;
	char one = 1;

	o.ctx = &r;
	rx = shim_rx_open(path, &o);
	if (!rx) {
		fprintf(stderr, "bench_shim: shim_rx_open %s: %s\n", path, strerror(errno));
		return 1;
	}
	if (write(ready_fd, &one, 1) != 1)
		return 1;
	for (;;) {
		struct pollfd p[2] = {{.fd = shim_rx_fd(rx), .events = POLLIN},
				      {.fd = stop_fd, .events = POLLIN}};

		if (poll(p, 2, 100) < 0 && errno != EINTR)
			break;
		while (shim_rx_drain(rx) > 0)
			;
		if (p[1].revents)
			break;
	}
	shim_rx_get_stats(rx, &st);
	r.msgs = st.msgs;
	shim_rx_close(rx);
	getrusage(RUSAGE_SELF, &ru);
	r.cpu_ns = tv_ns(ru.ru_utime) + tv_ns(ru.ru_stime);
	return write(out_fd, &r, sizeof(r)) == sizeof(r) ? 0 : 1;
}

/* ------------------------------------------------- the application --- */

/*
 * A thread's CPU clock from its tid: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)
 * of the kernel header posix-timers_types.h (((~tid) << 3) | 4 | 2), the clock
 * glibc's pthread_getcpuclockid() returns; valid for threads of this process.
 */
static clockid_t thread_clock(pid_t tid)
{
	return (clockid_t)((~(unsigned)tid) << 3) | 6;
}

/* fn of shim_rx_scan_tids: keep the tid whose name is the shim thread's */
static void is_shim(void *ctx, uint32_t ns_tid, uint32_t host_tid)
{
	char path[64], comm[32];
	FILE *f;

	(void)ns_tid;
	snprintf(path, sizeof(path), "/proc/self/task/%u/comm", host_tid);
	f = fopen(path, "r");
	if (!f)
		return;
	if (fgets(comm, sizeof(comm), f) && !strncmp(comm, "infertrace-shim", 15))
		*(pid_t *)ctx = (pid_t)host_tid;
	fclose(f);
}

/* the shim thread's tid (pthread_setname_np "infertrace-shim", agent/shim/chan.c), or 0 */
static pid_t shim_tid(void)
{
	pid_t found = 0;

	shim_rx_scan_tids(NULL, (uint32_t)getpid(), &found, is_shim);
	return found;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull),
			      .tv_nsec = (long)(t % 1000000000ull)};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* a mangled name as long as a cutlass kernel's; the shim copies GPU_NAME_LEN - 1 at most */
static const char kname[] =
    "_ZN7cutlass7Kernel2I58cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x4_tn_"
    "align8EEvNT_6ParamsE";

/* copies: device-to-host copies made, one a step (their launches are callbacks too) */
static int run(const struct opts *o, const char *sock, uint64_t *launch_ns, uint64_t *shim_ns,
	       uint64_t *made, uint64_t *copies, uint64_t *wall_ns)
{
	/* records per CUPTI buffer: CUPTI hands back a buffer when it is full */
	size_t per_buf = (size_t)2048 * 1024 / ((sizeof(CUpti_ActivityKernel10) + 7) & ~(size_t)7);
	uint64_t t0, next, end, c0, c1, lsum = 0, corr = 1, gpu_t = 0;
	clockid_t ck;
	size_t in_buf = 0;
	pid_t tid;

	*copies = 0;
	setenv("INFERTRACE_SHIM_SOCKET", sock, 1);
	setenv("INFERTRACE_SHIM_MODE", o->mode, 1);
	/* the shim's own defaults, not fake_cupti_load_shim()'s fast test ticks */
	setenv("INFERTRACE_SHIM_TICK_MS", "10", 1);
	setenv("INFERTRACE_SHIM_FLUSH_MS", "1000", 1);
	setenv("INFERTRACE_SHIM_STATUS_MS", "1000", 1);
	setenv("INFERTRACE_SHIM_BUF_KIB", "2048", 1);
	if (fake_cupti_load_shim("bench_shim"))
		return -1;
	usleep(200000); /* the shim connects and says hello */
	tid = shim_tid();
	if (!tid) {
		fprintf(stderr, "bench_shim: the shim thread is not running\n");
		return -1;
	}
	ck = thread_clock(tid);
	c0 = now_ns(ck);
	t0 = now_ns(CLOCK_MONOTONIC);
	end = t0 + o->seconds * 1000000000ull;
	/*
	 * GPU time: CUPTI stamps records through the shim's timestamp callback,
	 * CLOCK_MONOTONIC (the double's own clock, realtime, is for the offset
	 * fallback; realtime here put every kernel 56 years after its launch, so
	 * no step ever ended). One stream: a kernel starts 5 us after its launch
	 * returned (plus --gpu-lag-ms) or after the kernel before it.
	 */
	for (next = t0; next < end; next += o->step_ms * 1000000ull) {
		bool stall = o->stall_ms && next <= t0 + (end - t0) / 2 &&
			     next + o->step_ms * 1000000ull > t0 + (end - t0) / 2;

		for (unsigned long i = 0; i <= o->kernels; i++, corr++) {
			bool copy = i == o->kernels;

			if (stall && i == o->kernels / 2)
				usleep(o->stall_ms * 1000);
			union {
				CUpti_ActivityKernel10 k;
				CUpti_ActivityMemcpy6 m;
			} u;
			uint64_t a = now_ns(CLOCK_MONOTONIC), b;

			/* the step ends as an LLM engine's does: its tokens copied back */
			fake_cupti_launch(CUPTI_CB_DOMAIN_RUNTIME_API,
					  copy ? CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020
					       : CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
					  (uint32_t)corr, copy ? NULL : kname);
			b = now_ns(CLOCK_MONOTONIC);
			{
				uint64_t ready = b + o->lag_ms * 1000000ull;

				gpu_t = (ready > gpu_t ? ready : gpu_t) + 5000;
			}
			if (copy) {
				FAKE_CUPTI_ACTIVITY(u.m, CUPTI_ACTIVITY_KIND_MEMCPY, 0, 1, gpu_t,
						    2000, 7, (uint32_t)corr);
				u.m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
				u.m.bytes = 8192;
				(*copies)++;
			} else {
				lsum += b - a;
				FAKE_CUPTI_ACTIVITY(u.k, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 0,
						    1, gpu_t, 4000, 7, (uint32_t)corr);
				FAKE_CUPTI_DIMS(u.k, 132, 1, 1, 128, 1, 1);
				u.k.name = kname;
				(*made)++;
			}
			fake_cupti_add_record((const CUpti_Activity *)&u);
			if (++in_buf == per_buf) {
				fake_cupti_complete();
				in_buf = 0;
			}
		}
		sleep_until(next + o->step_ms * 1000000ull);
	}
	*wall_ns = now_ns(CLOCK_MONOTONIC) - t0;
	fake_cupti_complete();
	/* two status periods: the shim has sent the last buffer and said so */
	usleep(2200000);
	c1 = now_ns(ck);
	*launch_ns = lsum;
	*shim_ns = c1 - c0;
	return 0;
}

int main(int argc, char **argv)
{
	static const char doc[] =
	    "bench_shim: the CPU cost of the CUPTI shim's channel at a GPU's record rate.\n\n"
	    "USAGE: bench_shim [--kernels N] [--step-ms MS] [--seconds S] [--mode M] [--stall-ms "
	    "MS]\n"
	    "                  [--gpu-lag-ms MS]\n\n"
	    "EXAMPLES:\n"
	    "  bench_shim                  # 1,600 kernels every 12 ms (133 k/s), sentinel\n"
	    "  bench_shim --mode deep      # every launch callback sent as well\n"
	    "  bench_shim -k 160 -t 12     # a tenth of the rate\n"
	    "  bench_shim -S /run/infertrace/shim.sock   # into a running agent\n"
	    "  bench_shim -S /run/infertrace/shim.sock --stall-ms 50\n"
	    "                              # one step stalls: the agent flags it and sends\n"
	    "                              # its flight-recorder window\n"
	    "  bench_shim -S /run/infertrace/shim.sock -k 100 -t 20 --gpu-lag-ms 30\n"
	    "                              # the CPU runs 1.5 steps ahead: steps overlap\n\n"
	    "Prints one line: kernels/s, messages/s, records per message, the shim\n"
	    "thread's and the receiver's CPU (% of a core, ns per record), the launch\n"
	    "callback's ns (the test double's dispatch included) and what was lost.";
	struct argp argp = {options, parse_opt, NULL, doc, NULL, NULL, NULL};
	struct opts o = {.kernels = 1600, .step_ms = 12, .seconds = 5, .mode = "sentinel"};
	char dir[] = "/tmp/infertrace-bench-shim.XXXXXX", sock[PATH_MAX], so[PATH_MAX + 32];
	uint64_t launch_ns = 0, shim_ns = 0, made = 0, copies = 0, wall = 1;
	int ready[2], stop[2], res[2], status, rc = 1;
	struct rx_result r = {0};
	char exe[PATH_MAX], c;
	ssize_t n;
	pid_t pid;

	argp_parse(&argp, argc, argv, 0, NULL, &o);
	/* build/bench/bench_shim -> build/libinfertrace_cupti.so */
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0 && !getenv("INFERTRACE_SHIM_SO")) {
		exe[n] = '\0';
		*strrchr(exe, '/') = '\0';
		snprintf(so, sizeof(so), "%s/../libinfertrace_cupti.so", exe);
		setenv("INFERTRACE_SHIM_SO", so, 1);
	}
	if (o.socket) {
		if (run(&o, o.socket, &launch_ns, &shim_ns, &made, &copies, &wall))
			return 1;
		printf("mode %s kernels/s %.0f made %llu shim_cpu %.2f%% shim_ns/kernel %.0f "
		       "launch_cb_ns %.0f (delivered and dropped: the agent's stats record)\n",
		       o.mode, made / (wall / 1e9), (unsigned long long)made,
		       100.0 * shim_ns / wall, made ? (double)shim_ns / made : 0,
		       made ? (double)launch_ns / made : 0);
		return 0;
	}
	if (!mkdtemp(dir) || pipe(ready) || pipe(stop) || pipe(res)) {
		fprintf(stderr, "bench_shim: %s\n", strerror(errno));
		return 1;
	}
	snprintf(sock, sizeof(sock), "%s/shim.sock", dir);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "bench_shim: fork: %s\n", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		close(stop[1]);
		_exit(receiver(sock, ready[1], stop[0], res[1]));
	}
	close(stop[0]);
	close(ready[1]);
	close(res[1]);
	if (read(ready[0], &c, 1) != 1) {
		fprintf(stderr, "bench_shim: the receiver did not start\n");
		goto out;
	}
	if (run(&o, sock, &launch_ns, &shim_ns, &made, &copies, &wall))
		goto out;
	close(stop[1]);
	stop[1] = -1;
	if (read(res[0], &r, sizeof(r)) != sizeof(r)) {
		fprintf(stderr, "bench_shim: no result from the receiver\n");
		goto out;
	}
	{
		double secs = wall / 1e9, recs = (double)(r.kernels + r.launch_cbs);

		printf("mode %s kernels/s %.0f delivered %llu/%llu copies %llu launch_cbs %llu "
		       "msgs/s %.0f "
		       "recs/msg %.1f shim_cpu %.2f%% shim_ns/rec %.0f rx_cpu %.2f%% "
		       "rx_ns/rec %.0f launch_cb_ns %.0f dropped %llu cupti_dropped %llu\n",
		       o.mode, made / secs, (unsigned long long)r.kernels, (unsigned long long)made,
		       (unsigned long long)copies, (unsigned long long)r.launch_cbs, r.msgs / secs,
		       r.msgs ? recs / r.msgs : 0, 100.0 * shim_ns / wall,
		       recs ? shim_ns / recs : 0, 100.0 * r.cpu_ns / wall,
		       recs ? r.cpu_ns / recs : 0, made ? (double)launch_ns / made : 0,
		       (unsigned long long)r.shim_dropped, (unsigned long long)r.cupti_dropped);
	}
	rc = 0;
out:
	if (stop[1] >= 0)
		close(stop[1]);
	kill(pid, SIGTERM);
	waitpid(pid, &status, 0);
	unlink(sock);
	rmdir(dir);
	return rc;
}
