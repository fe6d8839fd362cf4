/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * jsonw.h - the hand JSON writer for the hottest records: one per CUDA
 * launch in deep mode (agent/sources/decode.c) and one per kernel, copy or
 * memset (correlator/src/json_out.c, millions in a replay). Appends to a
 * fixed buffer, no allocation, no object tree. jansson remains the writer
 * for everything else (agent/pipeline/record.c, rec_new()); jw_common()
 * writes the common fields the way rec_new() does, which the unit tests check
 * by comparing the two.
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
	int first;    /* no comma before the next key */
};

void jw_init(struct jsonw *w, char *buf, size_t cap); /* writes "{" */
void jw_str(struct jsonw *w, const char *key, const char *s);
void jw_strn(struct jsonw *w, const char *key, const char *s, size_t n);
void jw_int(struct jsonw *w, const char *key, int64_t v);
void jw_uint(struct jsonw *w, const char *key, uint64_t v);
void jw_null(struct jsonw *w, const char *key);
void jw_bool(struct jsonw *w, const char *key, int v);
void jw_hex(struct jsonw *w, const char *key, uint64_t v); /* "0x..." string */
void jw_dim3(struct jsonw *w, const char *key, const uint32_t d[3]);
void jw_key(struct jsonw *w, const char *key); /* for a raw value that follows */
void jw_raw(struct jsonw *w, const char *s, size_t n);
/*
 * Nesting: jw_open() writes '{' or '[' as a value (after jw_key(), or
 * after jw_next() in an array), jw_close() its '}' or ']'; jw_next() puts
 * the comma before an array's next element. A key inside starts without one.
 */
void jw_open(struct jsonw *w, char c);
void jw_close(struct jsonw *w, char c);
void jw_next(struct jsonw *w);
/* closes the object; returns its length, or -1 on overflow */
long jw_end(struct jsonw *w);

/*
 * UTF-8: every string the JSON writers emit is well-formed (issue 18). The
 * hand writer replaces a byte that starts no well-formed sequence with
 * \ufffd; jw_utf8_clean() does the same for strings bound for jansson
 * (which refuses them: the field would be lost) and for names kept in
 * tables: s itself when it is valid, else a copy in buf (cap bytes, cut at
 * a character boundary) with U+FFFD for each invalid byte. Both count into
 * one process-wide total, jw_utf8_replaced() (stats "utf8_replaced").
 */
size_t jw_utf8_seq(const unsigned char *s, size_t n); /* 1-4, or 0: invalid */
/* how many of s's first n bytes are well-formed UTF-8 from its start: n when all are */
size_t jw_utf8_valid(const char *s, size_t n);
const char *jw_utf8_clean(const char *s, char *buf, size_t cap);
uint64_t jw_utf8_replaced(void);

/*
 * The common fields every record starts with (docs/events.md, "Common
 * fields"), in their order: schema, type, host, instance, pid, tid, ts_ns.
 * pid and tid: JW_OMIT leaves the key out (a node-level record), JW_NULL
 * writes null (a GPU record without its launch), else the number.
 */
#define JW_OMIT (-2)
#define JW_NULL (-1)
void jw_common(struct jsonw *w, const char *type, const char *host, const char *instance,
	       int64_t pid, int64_t tid, uint64_t ts_ns);

#endif /* INFERTRACE_JSONW_H */
