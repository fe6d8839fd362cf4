/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * jsonw.h - a JSON writer for the hottest records (one per CUDA launch in
 * deep mode): appends to a fixed buffer, no allocation, no object tree.
 * jansson remains the writer for everything else; records written here
 * must carry the same fields in the same form (docs/events.md), which the
 * unit tests check by parsing them back with jansson.
 */
#ifndef INFERTRACE_JSONW_H
#define INFERTRACE_JSONW_H

#include <stddef.h>
#include <stdint.h>

struct jsonw {
	char *buf;
	size_t cap;
	size_t len;
	int overflow; /* set once anything did not fit: the record is dropped */
	int first; /* no comma before the next key */
};

void jw_init(struct jsonw *w, char *buf, size_t cap); /* writes "{" */
void jw_str(struct jsonw *w, const char *key, const char *s);
void jw_strn(struct jsonw *w, const char *key, const char *s, size_t n);
void jw_int(struct jsonw *w, const char *key, int64_t v);
void jw_uint(struct jsonw *w, const char *key, uint64_t v);
void jw_hex(struct jsonw *w, const char *key, uint64_t v); /* "0x..." string */
void jw_dim3(struct jsonw *w, const char *key, const uint32_t d[3]);
void jw_key(struct jsonw *w, const char *key); /* for a raw value that follows */
void jw_raw(struct jsonw *w, const char *s, size_t n);
/* closes the object; returns its length, or -1 on overflow */
long jw_end(struct jsonw *w);

#endif /* INFERTRACE_JSONW_H */
