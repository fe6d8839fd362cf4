/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * grow.h - the one growable-array helper of the agent and the correlator
 * (the correlator is the lower of the two, so it lives here; inline, so
 * that binaries linking neither library whole need no extra object).
 */
#ifndef INFERTRACE_GROW_H
#define INFERTRACE_GROW_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/*
 * Room for element n in *arr of *cap elements of elem bytes: when n >= *cap
 * the capacity doubles (first when it was 0) until it holds n + 1. *arr and
 * *cap change only on success; -ENOMEM leaves them alone.
 */
static inline int grow_array(void **arr, size_t *cap, size_t n, size_t elem, size_t first)
{
	size_t nc = *cap ? *cap : (first ? first : 1);
	void *na;

	if (n < *cap)
		return 0;
	while (nc <= n) {
		if (nc > SIZE_MAX / 2 / elem)
			return -ENOMEM;
		nc *= 2;
	}
	na = realloc(*arr, nc * elem);
	if (!na)
		return -ENOMEM;
	*arr = na;
	*cap = nc;
	return 0;
}

#endif /* INFERTRACE_GROW_H */
