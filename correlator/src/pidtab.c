// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * pidtab.c - per-process state found by pid (pidtab.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "pidtab.h"

#define PIDTAB_MIN 64 /* first size */

static inline uint32_t home(const struct pidtab *t, uint32_t pid)
{
	return (uint32_t)corr_hash64(pid) & t->mask;
}

void pidtab_free(struct pidtab *t)
{
	free(t->slots);
	t->slots = NULL;
	t->mask = t->len = t->last = 0;
}

void *pidtab_find_slow(struct pidtab *t, uint32_t pid)
{
	for (uint32_t i = home(t, pid);; i = (i + 1) & t->mask) {
		struct pid_slot *e = pidtab_at(t, i);

		if (!e->used)
			return NULL;
		if (e->pid == pid) {
			t->last = i;
			return e;
		}
	}
}

/* the table at half load at most: double it */
static int grow(struct pidtab *t)
{
	uint32_t osize = t->slots ? t->mask + 1 : 0, size = osize ? osize * 2 : PIDTAB_MIN;
	char *old = t->slots, *n = calloc(size, t->esz);

	if (!n)
		return -ENOMEM;
	t->slots = n;
	t->mask = size - 1;
	t->last = 0;
	for (uint32_t i = 0; i < osize; i++) {
		const struct pid_slot *e = (const struct pid_slot *)(old + (size_t)i * t->esz);
		uint32_t j;

		if (!e->used)
			continue;
		for (j = home(t, e->pid); pidtab_at(t, j)->used; j = (j + 1) & t->mask)
			;
		memcpy(pidtab_at(t, j), e, t->esz);
	}
	free(old);
	return 0;
}

void *pidtab_add(struct pidtab *t, uint32_t pid)
{
	struct pid_slot *e;
	uint32_t i;

	if ((!t->slots || (t->len + 1) * 2 > t->mask + 1) && grow(t))
		return NULL;
	for (i = home(t, pid); pidtab_at(t, i)->used; i = (i + 1) & t->mask)
		;
	e = pidtab_at(t, i);
	memset(e, 0, t->esz);
	e->pid = pid;
	e->used = 1;
	t->len++;
	t->last = i;
	return e;
}

void pidtab_del(struct pidtab *t, void *entry)
{
	uint32_t s = (uint32_t)(((char *)entry - t->slots) / t->esz), j = s;

	pidtab_at(t, s)->used = 0;
	t->len--;
	for (;;) {
		uint32_t h;

		j = (j + 1) & t->mask;
		if (!pidtab_at(t, j)->used)
			return;
		h = home(t, pidtab_at(t, j)->pid);
		/* move j into the hole when its home is not in (s, j] (cyclically) */
		if ((s <= j) ? (h <= s || h > j) : (h <= s && h > j)) {
			memcpy(pidtab_at(t, s), pidtab_at(t, j), t->esz);
			pidtab_at(t, j)->used = 0;
			s = j;
		}
	}
}
