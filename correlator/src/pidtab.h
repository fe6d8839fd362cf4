/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * pidtab.h - per-process state found by pid: an open-addressing table of
 * fixed-size entries (linear probing, murmur finaliser, backward-shift
 * delete, no tombstones), grown at half load, never shrunk. Every entry
 * starts with struct pid_slot. The correlator (corr.c: a process's
 * launches, waiting GPU records and threads) and the step segmenter
 * (steps.c: a process's step sequence) keep one each (issue 18: state found
 * by scanning made a churn of short-lived processes quadratic).
 *
 * Pointers to entries are valid until the next pidtab_add() or
 * pidtab_del() on the table: both may move entries.
 */
#ifndef INFERTRACE_CORR_PIDTAB_H
#define INFERTRACE_CORR_PIDTAB_H

#include <stddef.h>
#include <stdint.h>

struct pid_slot {
	uint32_t pid;
	uint32_t used;
};

struct pidtab {
	char *slots; /* mask + 1 entries of esz bytes; NULL until the first add */
	uint32_t mask, len;
	uint32_t esz;
	uint32_t last; /* slot of the last entry found: records come in runs of one process */
};

/* an empty table of entries of esz bytes (sizeof the struct that starts with pid_slot) */
static inline void pidtab_init(struct pidtab *t, size_t esz)
{
	*t = (struct pidtab){.esz = (uint32_t)esz};
}

void pidtab_free(struct pidtab *t);

static inline struct pid_slot *pidtab_at(const struct pidtab *t, uint32_t i)
{
	return (struct pid_slot *)(t->slots + (size_t)i * t->esz);
}

void *pidtab_find_slow(struct pidtab *t, uint32_t pid);

/* the pid's entry, or NULL */
static inline void *pidtab_find(struct pidtab *t, uint32_t pid)
{
	struct pid_slot *e;

	if (!t->slots)
		return NULL;
	e = pidtab_at(t, t->last);
	if (e->used && e->pid == pid)
		return e;
	return pidtab_find_slow(t, pid);
}

/* a new zeroed entry for pid (not in the table), or NULL when the table cannot grow */
void *pidtab_add(struct pidtab *t, uint32_t pid);
/* an entry out of the table */
void pidtab_del(struct pidtab *t, void *entry);

#endif /* INFERTRACE_CORR_PIDTAB_H */
