// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * names.c - string interning (open addressing on an FNV-1a hash, strings in
 * an append-only arena so ids and pointers stay valid until names_free()).
 * The tables start small and double with use up to the maximum: a table
 * sized for 2^20 names cost 40 MB of zeroed memory before the first name.
 * The agent uses it too, through corr_strtab_* (correlator.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define ARENA_CHUNK (1u << 20)

struct arena_chunk {
	struct arena_chunk *next;
	size_t used, size;
	char data[];
};

struct names {
	uint32_t *slots; /* id + 1, 0 = empty */
	uint32_t mask;
	uint32_t count, max;
	size_t bytes, max_bytes; /* text held, NUL included; 0: no bound */
	uint32_t cap;		 /* entries allocated in strs/lens/hashes, grown up to max */
	const char **strs;	 /* id -> string */
	uint32_t *lens;
	uint64_t *hashes;
	struct arena_chunk *chunks;
};

#define NAMES_FIRST 1024 /* entries at first: tables grow with use, not with max */

/*
 * Eight bytes a step, finished by corr_hash64's mix: a kernel name is ~100
 * bytes and is interned up to three times per GPU record (correlator,
 * steps, stats), where FNV-1a's byte a step was 10% of the agent at 133 k
 * kernels/s. The correlator hashes each record's name once and sends the
 * hash with it (corr_gpu.name_hash): hashing it again in steps and stats
 * was another 4% (perf, bench/shim.sh's stream).
 */
uint64_t corr_name_hash(const char *s, size_t len)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ len, w;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		memcpy(&w, s + i, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	w = 0;
	memcpy(&w, s + i, len - i);
	return corr_hash64(h ^ w);
}

/* room for cap entries: the arrays to cap, the slot table to 2 x cap */
static int names_grow(struct names *n, uint32_t cap)
{
	uint32_t size = corr_pow2((uint64_t)cap * 2);
	const char **strs = realloc(n->strs, (size_t)cap * sizeof(*strs));
	uint32_t *lens, *slots;
	uint64_t *hashes;

	if (!strs)
		return -ENOMEM;
	n->strs = strs;
	lens = realloc(n->lens, (size_t)cap * sizeof(*lens));
	if (!lens)
		return -ENOMEM;
	n->lens = lens;
	hashes = realloc(n->hashes, (size_t)cap * sizeof(*hashes));
	if (!hashes)
		return -ENOMEM;
	n->hashes = hashes;
	n->cap = cap;
	if (n->slots && size == n->mask + 1)
		return 0;
	slots = calloc(size, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	/* re-place every id by its kept hash: ids do not change */
	for (uint32_t id = 0; id < n->count; id++) {
		uint32_t i = (uint32_t)n->hashes[id] & (size - 1);

		while (slots[i])
			i = (i + 1) & (size - 1);
		slots[i] = id + 1;
	}
	free(n->slots);
	n->slots = slots;
	n->mask = size - 1;
	return 0;
}

struct names *names_new(uint32_t max_names)
{
	return names_new_bounded(max_names, 0);
}

struct names *names_new_bounded(uint32_t max_names, size_t max_bytes)
{
	struct names *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	n->max = max_names ? max_names : 65536;
	n->max_bytes = max_bytes;
	if (names_grow(n, n->max < NAMES_FIRST ? n->max : NAMES_FIRST)) {
		names_free(n);
		errno = ENOMEM;
		return NULL;
	}
	return n;
}

void names_free(struct names *n)
{
	struct arena_chunk *ch, *next;

	if (!n)
		return;
	for (ch = n->chunks; ch; ch = next) {
		next = ch->next;
		free(ch);
	}
	free(n->slots);
	free(n->strs);
	free(n->lens);
	free(n->hashes);
	free(n);
}

static char *arena_copy(struct names *n, const char *s, size_t len)
{
	struct arena_chunk *ch = n->chunks;
	char *p;

	if (!ch || ch->size - ch->used < len + 1) {
		size_t size = len + 1 > ARENA_CHUNK ? len + 1 : ARENA_CHUNK;

		ch = malloc(sizeof(*ch) + size);
		if (!ch)
			return NULL;
		ch->size = size;
		ch->used = 0;
		ch->next = n->chunks;
		n->chunks = ch;
	}
	p = ch->data + ch->used;
	memcpy(p, s, len);
	p[len] = '\0';
	ch->used += len + 1;
	return p;
}

int32_t names_intern(struct names *n, const char *s, size_t len)
{
	return names_intern_h(n, s, len, corr_name_hash(s, len));
}

int32_t names_intern_h(struct names *n, const char *s, size_t len, uint64_t h)
{
	uint32_t i = (uint32_t)h & n->mask;
	char *copy;

	for (;; i = (i + 1) & n->mask) {
		uint32_t v = n->slots[i];

		if (!v)
			break;
		v--;
		if (n->hashes[v] == h && n->lens[v] == len && !memcmp(n->strs[v], s, len))
			return (int32_t)v;
	}
	if (n->count >= n->max || (n->max_bytes && len + 1 > n->max_bytes - n->bytes))
		return -ENOSPC;
	if (n->count == n->cap) {
		uint64_t cap = (uint64_t)n->cap * 2;

		if (names_grow(n, cap > n->max ? n->max : (uint32_t)cap))
			return -ENOMEM;
		/* the slot table changed: find the free slot again */
		for (i = (uint32_t)h & n->mask; n->slots[i]; i = (i + 1) & n->mask)
			;
	}
	copy = arena_copy(n, s, len);
	if (!copy)
		return -ENOMEM;
	n->bytes += len + 1;
	n->strs[n->count] = copy;
	n->lens[n->count] = (uint32_t)len;
	n->hashes[n->count] = h;
	n->slots[i] = n->count + 1;
	return (int32_t)n->count++;
}

const char *names_str(const struct names *n, int32_t id)
{
	if (id < 0 || (uint32_t)id >= n->count)
		return NULL;
	return n->strs[id];
}

uint32_t names_count(const struct names *n)
{
	return n->count;
}

/* ------------------------------------------- corr_strtab (correlator.h) -- */

struct corr_strtab *corr_strtab_new(uint32_t max_strings, size_t max_bytes)
{
	return (struct corr_strtab *)names_new_bounded(max_strings, max_bytes);
}

void corr_strtab_free(struct corr_strtab *t)
{
	names_free((struct names *)t);
}

int32_t corr_strtab_id(struct corr_strtab *t, const char *s, size_t len, uint64_t hash)
{
	if (len > UINT32_MAX - 1)
		return -ENOSPC; /* lens are 32-bit */
	return names_intern_h((struct names *)t, s, len, hash ? hash : corr_name_hash(s, len));
}

const char *corr_strtab_str(const struct corr_strtab *t, int32_t id, size_t *len)
{
	const struct names *n = (const struct names *)t;

	if (id < 0 || (uint32_t)id >= n->count)
		return NULL;
	if (len)
		*len = n->lens[id];
	return n->strs[id];
}

uint32_t corr_strtab_count(const struct corr_strtab *t)
{
	return names_count((const struct names *)t);
}
