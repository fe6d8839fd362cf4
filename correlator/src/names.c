// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * names.c - string interning (open addressing on an FNV-1a hash, strings in
 * an append-only arena so ids and pointers stay valid until names_free()).
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
	const char **strs; /* id -> string */
	uint32_t *lens;
	uint64_t *hashes;
	struct arena_chunk *chunks;
};

static uint64_t fnv1a(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

struct names *names_new(uint32_t max_names)
{
	struct names *n = calloc(1, sizeof(*n));
	uint32_t size;

	if (!n)
		return NULL;
	n->max = max_names ? max_names : 65536;
	size = corr_pow2((uint64_t)n->max * 2);
	n->slots = calloc(size, sizeof(*n->slots));
	n->strs = calloc(n->max, sizeof(*n->strs));
	n->lens = calloc(n->max, sizeof(*n->lens));
	n->hashes = calloc(n->max, sizeof(*n->hashes));
	if (!n->slots || !n->strs || !n->lens || !n->hashes) {
		names_free(n);
		errno = ENOMEM;
		return NULL;
	}
	n->mask = size - 1;
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
	uint64_t h = fnv1a(s, len);
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
	if (n->count >= n->max)
		return -ENOSPC;
	copy = arena_copy(n, s, len);
	if (!copy)
		return -ENOMEM;
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
