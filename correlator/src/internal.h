/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * internal.h - helpers shared by the correlator's sources, not installed.
 */
#ifndef INFERTRACE_CORR_INTERNAL_H
#define INFERTRACE_CORR_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>

#include "correlator.h"

/* 64-bit finaliser (murmur3 fmix64): spreads (pid, corr id) keys over the table */
static inline uint64_t corr_hash64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

/*
 * double -> uint64_t without undefined behaviour: negative and NaN give 0,
 * 2^64 and above UINT64_MAX (a hostile step of dur_ns ~2^64 reaches here)
 */
static inline uint64_t corr_d2u64(double x)
{
	if (!(x > 0))
		return 0;
	return x >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)x;
}

/*
 * qsort, unless the array is in order already: the GPU records of a live
 * agent come nearly always in order, and glibc's merge sort compares as much
 * for a sorted array (a fifth of the agent at 133 k kernels/s, bench/shim.sh).
 * What a stable sort gives either way.
 */
static inline void corr_sort(void *base, size_t n, size_t size,
			     int (*cmp)(const void *, const void *))
{
	const char *b = base;
	size_t i = 1;

	while (i < n && cmp(b + (i - 1) * size, b + i * size) <= 0)
		i++;
	if (i < n)
		qsort(base, n, size, cmp);
}

static inline uint32_t corr_pow2(uint64_t n)
{
	uint32_t p = 16;

	while (p < n && p < (1u << 31))
		p <<= 1;
	return p;
}

/*
 * String interning: kernel and API names repeat millions of times, so GPU
 * records waiting in queues and stats keep a 32-bit id instead of a copy.
 * Bounded by max_names; a full table returns -ENOSPC.
 */
struct names;
struct names *names_new(uint32_t max_names);
/* also at most max_bytes of text, NUL included (0: unbounded); past it -ENOSPC */
struct names *names_new_bounded(uint32_t max_names, size_t max_bytes);
void names_free(struct names *n);
/* id >= 0, or -ENOSPC / -ENOMEM */
int32_t names_intern(struct names *n, const char *s, size_t len);
/* the same, with h = corr_name_hash(s, len) known (corr_gpu.name_hash) */
int32_t names_intern_h(struct names *n, const char *s, size_t len, uint64_t h);
/* a GPU record's name interned, by the hash it came with when it has one */
static inline int32_t names_intern_gpu(struct names *n, const struct corr_gpu *g)
{
	size_t len = strlen(g->name);

	return g->name_hash ? names_intern_h(n, g->name, len, g->name_hash)
			    : names_intern(n, g->name, len);
}
const char *names_str(const struct names *n, int32_t id);
uint32_t names_count(const struct names *n);

/* exact decimal text ("12.5", "1.5e3") in µs to ns, rounding to nearest */
int corr_us_text_to_ns(const char *s, size_t len, uint64_t *out);

/* readers (replay.c dispatches); each returns 0 or -errno and logs the cause */
struct replay_ctx {
	struct corr *c;
	const struct corr_replay_opts *ro;
	struct corr_replay_stats *st;
};
/* log.c: format once, hand to the owner's callback (NULL: dropped) */
void corr_log_forward(corr_log_fn fn, void *ctx, enum corr_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define replay_log(rc, ...)                                                                        \
	corr_log_forward((rc)->ro ? (rc)->ro->log : NULL, (rc)->ro ? (rc)->ro->log_ctx : NULL,     \
			 __VA_ARGS__)
/* the caller asked to stop (corr_replay_opts.stop): readers return -EINTR */
static inline bool replay_stopped(const struct replay_ctx *rc)
{
	return rc->ro && rc->ro->stop && *rc->ro->stop;
}
/* 3 when buf starts with a UTF-8 byte order mark, else 0 (inline: every reader asks) */
static inline size_t corr_bom_len(const char *buf, size_t len)
{
	return len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3) ? 3 : 0;
}
int kineto_read(struct replay_ctx *rc, const char *buf, size_t len);
int jsonl_read(struct replay_ctx *rc, const char *buf, size_t len);
/* from path, or from buf (an export read from a pipe) when buf is set */
int nsys_read(struct replay_ctx *rc, const char *path, const char *buf, size_t len);

/*
 * corr__add_launch() with the launch's sources as a live run recorded them
 * (jsonl.c: a deep recording's launch_src), so a replay says what live said
 */
int corr_add_launch_src(struct corr *c, uint32_t pid, uint32_t tid, uint64_t ts_ns,
			uint32_t corr_id, uint32_t cbid, const char *api, bool from_uprobe,
			bool from_cb);

/*
 * Entries corr__process_exit() has removed since corr__new(): launches,
 * waiting GPU records and threads of the exiting processes, nothing else
 * (tests/unit/test_correlator.c: an exit costs its own process's state).
 */
uint64_t corr_exit_visits(const struct corr *c);
/* processes the correlator holds state for (launches, GPU records, threads) */
uint32_t corr_procs_held(const struct corr *c);

/* enum cuda_api value for an entry point name, -1 when unknown */
int corr_api_from_name(const char *name);

#endif /* INFERTRACE_CORR_INTERNAL_H */
