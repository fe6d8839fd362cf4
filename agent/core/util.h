/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * util.h - one helper per small job the agent does in many places: mkdir -p,
 * writing a whole buffer, growing an array. No agent state: the shim
 * receiver, agentctl and the fuzz targets link util.o alone (Makefile).
 * Every function returns 0 or -errno.
 */
#ifndef INFERTRACE_UTIL_H
#define INFERTRACE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * mkdir -p dir: its missing parents with parent_mode, dir itself with mode;
 * existing directories are left as they are. -ENAMETOOLONG over PATH_MAX.
 */
int mkdir_p(const char *dir, mode_t parent_mode, mode_t mode);

/* mkdir -p of the directory that holds path (a socket, a file), every level with mode */
int mkdir_parents(const char *path, mode_t mode);

/*
 * All of buf, retrying short writes and EINTR. off >= 0: pwrite() at off (a
 * file); off < 0: send() with MSG_NOSIGNAL (a stream socket: a peer that is
 * gone is -EPIPE, not SIGPIPE). A nonblocking fd that fills is -EAGAIN.
 */
int write_all(int fd, const void *buf, size_t len, int64_t off);

/* utime + stime in seconds and resident memory in bytes of this process (0 when unreadable) */
void self_usage(double *cpu_s, double *rss);

/*
 * The least power of 2 >= n, clamped to [lo, hi] (powers of 2): the size of
 * a per-CPU slice of a BPF slot array (agent/sources/slots.c)
 */
uint32_t pow2_clamp(uint32_t n, uint32_t lo, uint32_t hi);

/*
 * One Python frame as people read it, the same wherever the agent prints
 * one (--summary, anomaly suspects, Perfetto slices): "func (file.py:12)",
 * the file by its last component; "func (file.py)" without a line (< 1);
 * "func" without a file (NULL or ""); "?" for a function without a name.
 * snprintf's return.
 */
int py_frame_text(char *out, size_t sz, const char *func, const char *file, int64_t line);
/*
 * A name from a workload or a recording, for the terminal: control bytes
 * (a newline, a terminal's escape) become '?', in place: the agent's log
 * lines, agentctl's output.
 */
void term_safe(char *s);
/* the same over len bytes of text of many lines: every control byte but '\n' */
void term_safe_text(char *s, size_t len);
/*
 * Text for people that prints names workloads or recordings chose (the
 * --summary digest): write_fn(ctx, f) writes it into memory, and it reaches
 * out through term_safe_text(), whichever of its lines has such a name.
 * Without memory for the copy, write_fn writes to out itself.
 */
void term_safe_out(FILE *out, void (*write_fn)(void *ctx, FILE *f), void *ctx);

/*
 * A Prometheus histogram (--metrics, agent/control/metrics.c): counts per
 * upper bound le[i] (inclusive, as Prometheus's buckets are), the last
 * slot past every bound (+Inf); the sum of what was observed. Its owner
 * sets le and nle (ascending, at most PROM_HIST_MAX) and adds to it.
 */
#define PROM_HIST_MAX 24
struct prom_hist {
	const double *le;
	unsigned int nle;
	uint64_t n[PROM_HIST_MAX + 1]; /* not cumulative: metrics.c sums them */
	double sum;
};

void prom_hist_add(struct prom_hist *h, double v);

/*
 * Nanoseconds in a log histogram, 16 buckets per power of two (1 to 15 ns
 * exact; 2^41 ns, 37 minutes, and more in the last): --summary's launch
 * waits and step durations. A quantile is the largest value its bucket
 * has seen: never under the true value, at most 1/16 (6.25%) over it.
 * 9.5 KiB each.
 */
#define QHIST_SUB 16
#define QHIST_BUCKETS (QHIST_SUB + 37 * QHIST_SUB)
struct qhist {
	uint64_t b[QHIST_BUCKETS];
	uint64_t top[QHIST_BUCKETS]; /* the largest value in each */
	uint64_t n, max;
};

void qhist_add(struct qhist *h, uint64_t v);
double qhist_quantile(const struct qhist *h, double q); /* 0 when empty */

/* grow_array(): correlator/include/grow.h, one helper for the agent and the correlator */
#include "grow.h"

#endif /* INFERTRACE_UTIL_H */
