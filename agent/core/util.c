// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* util.c - see util.h. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "util.h"

int mkdir_p(const char *dir, mode_t parent_mode, mode_t mode)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, parent_mode) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(path, mode) && errno != EEXIST)
		return -errno;
	return 0;
}

int mkdir_parents(const char *path, mode_t mode)
{
	char dir[PATH_MAX];
	char *p;

	if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	p = strrchr(dir, '/');
	if (!p || p == dir)
		return 0; /* in the current directory, or in / */
	*p = '\0';
	return mkdir_p(dir, mode, mode);
}

int write_all(int fd, const void *buf, size_t len, int64_t off)
{
	const char *p = buf;

	while (len) {
		ssize_t n = off >= 0 ? pwrite(fd, p, len, off) : send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= n;
		if (off >= 0)
			off += n;
	}
	return 0;
}

/* a byte that steers a terminal (C0 controls and DEL) */
static bool control_byte(char c)
{
	return (unsigned char)c < 0x20 || c == 0x7f;
}

void term_safe(char *s)
{
	for (; *s; s++)
		if (control_byte(*s))
			*s = '?';
}

void term_safe_text(char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (control_byte(s[i]) && s[i] != '\n')
			s[i] = '?';
}

void term_safe_out(FILE *out, void (*write_fn)(void *ctx, FILE *f), void *ctx)
{
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);

	if (!m) { /* no memory for the copy: straight out */
		write_fn(ctx, out);
		return;
	}
	write_fn(ctx, m);
	fclose(m);
	if (text) {
		term_safe_text(text, len);
		fwrite(text, 1, len, out);
	}
	free(text);
}

int py_frame_text(char *out, size_t sz, const char *func, const char *file, int64_t line)
{
	const char *base = file && *file ? strrchr(file, '/') : NULL;

	base = base ? base + 1 : file && *file ? file : NULL;
	func = func && *func ? func : "?";
	if (base && line > 0)
		return snprintf(out, sz, "%s (%s:%lld)", func, base, (long long)line);
	if (base)
		return snprintf(out, sz, "%s (%s)", func, base);
	return snprintf(out, sz, "%s", func);
}

void prom_hist_add(struct prom_hist *h, double v)
{
	unsigned int lo = 0, hi = h->nle;

	/* the first bound >= v; nle when none (+Inf) */
	while (lo < hi) {
		unsigned int mid = (lo + hi) / 2;

		if (h->le[mid] >= v)
			hi = mid;
		else
			lo = mid + 1;
	}
	h->n[lo]++;
	h->sum += v;
}

/*
 * The bucket of v: v itself below QHIST_SUB; above, the power of two and
 * the four bits below the top one (QHIST_SUB = 16 sixteenths of it)
 */
static unsigned int qhist_bucket(uint64_t v)
{
	unsigned int lg, b;

	if (v < QHIST_SUB)
		return (unsigned int)v;
	lg = 63 - (unsigned int)__builtin_clzll(v); /* >= 4 */
	b = QHIST_SUB * (lg - 3) + (unsigned int)((v >> (lg - 4)) & (QHIST_SUB - 1));
	return b < QHIST_BUCKETS ? b : QHIST_BUCKETS - 1;
}

void qhist_add(struct qhist *h, uint64_t v)
{
	unsigned int b = qhist_bucket(v);

	h->b[b]++;
	if (v > h->top[b])
		h->top[b] = v;
	h->n++;
	if (v > h->max)
		h->max = v;
}

double qhist_quantile(const struct qhist *h, double q)
{
	uint64_t want = (uint64_t)((double)h->n * q), seen = 0;

	for (unsigned int b = 0; b < QHIST_BUCKETS; b++) {
		seen += h->b[b];
		if (seen > want) /* the bucket holds the quantile: its largest value */
			return (double)h->top[b];
	}
	return (double)h->max;
}

void self_usage(double *cpu_s, double *rss)
{
	char buf[1024], *p;
	unsigned long long ut = 0, st = 0, pages = 0;
	long tck = sysconf(_SC_CLK_TCK), psz = sysconf(_SC_PAGESIZE);
	FILE *f = fopen("/proc/self/stat", "re");

	*cpu_s = *rss = 0;
	if (f) {
		if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')))
			/* after "pid (comm)": fields 3..; utime 14, stime 15 */
			sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
			       &st);
		fclose(f);
	}
	f = fopen("/proc/self/statm", "re");
	if (f) {
		if (fscanf(f, "%*u %llu", &pages) != 1)
			pages = 0;
		fclose(f);
	}
	*cpu_s = tck > 0 ? (double)(ut + st) / tck : 0;
	*rss = (double)pages * (psz > 0 ? psz : 4096);
}

uint32_t pow2_clamp(uint32_t n, uint32_t lo, uint32_t hi)
{
	uint32_t p = lo;

	while (p < n && p < hi)
		p <<= 1;
	return p;
}
