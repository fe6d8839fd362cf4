// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* jsonw.c - see jsonw.h. The primitives stay small and inline: a replay writes millions. */
#include <string.h>

#include "correlator.h"
#include "jsonw.h"

static inline void put(struct jsonw *w, const char *s, size_t n)
{
	if (w->overflow || n > w->cap - w->len) {
		w->overflow = 1;
		return;
	}
	memcpy(w->buf + w->len, s, n);
	w->len += n;
}

static inline void putc_(struct jsonw *w, char c)
{
	put(w, &c, 1);
}

static inline void put_u64(struct jsonw *w, uint64_t v)
{
	char tmp[24];
	int i = sizeof(tmp);

	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put(w, tmp + i, sizeof(tmp) - i);
}

/* a JSON string: quotes, backslash and control characters escaped; runs copied whole */
static void put_escaped(struct jsonw *w, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t run = 0;

	putc_(w, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		put(w, s + run, i - run);
		run = i + 1;
		if (c == '"' || c == '\\') {
			char e[2] = { '\\', (char)c };

			put(w, e, sizeof(e));
		} else {
			char e[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };

			put(w, e, sizeof(e));
		}
	}
	put(w, s + run, n - run);
	putc_(w, '"');
}

void jw_init(struct jsonw *w, char *buf, size_t cap)
{
	w->buf = buf;
	w->cap = cap;
	w->len = 0;
	w->overflow = 0;
	w->first = 1;
	putc_(w, '{');
}

void jw_key(struct jsonw *w, const char *key)
{
	if (!w->first)
		putc_(w, ',');
	w->first = 0;
	put_escaped(w, key, strlen(key));
	putc_(w, ':');
}

void jw_raw(struct jsonw *w, const char *s, size_t n)
{
	put(w, s, n);
}

void jw_strn(struct jsonw *w, const char *key, const char *s, size_t n)
{
	jw_key(w, key);
	put_escaped(w, s, n);
}

void jw_str(struct jsonw *w, const char *key, const char *s)
{
	jw_strn(w, key, s, strlen(s));
}

void jw_uint(struct jsonw *w, const char *key, uint64_t v)
{
	jw_key(w, key);
	put_u64(w, v);
}

void jw_int(struct jsonw *w, const char *key, int64_t v)
{
	jw_key(w, key);
	if (v < 0) {
		putc_(w, '-');
		put_u64(w, (uint64_t)0 - (uint64_t)v);
	} else {
		put_u64(w, (uint64_t)v);
	}
}

void jw_null(struct jsonw *w, const char *key)
{
	jw_key(w, key);
	put(w, "null", 4);
}

void jw_bool(struct jsonw *w, const char *key, int v)
{
	jw_key(w, key);
	if (v)
		put(w, "true", 4);
	else
		put(w, "false", 5);
}

void jw_hex(struct jsonw *w, const char *key, uint64_t v)
{
	static const char hex[] = "0123456789abcdef";
	char tmp[20];
	int i = sizeof(tmp);

	jw_key(w, key);
	tmp[--i] = '"';
	do {
		tmp[--i] = hex[v & 15];
		v >>= 4;
	} while (v);
	tmp[--i] = 'x';
	tmp[--i] = '0';
	tmp[--i] = '"';
	put(w, tmp + i, sizeof(tmp) - i);
}

void jw_dim3(struct jsonw *w, const char *key, const uint32_t d[3])
{
	jw_key(w, key);
	putc_(w, '[');
	put_u64(w, d[0]);
	putc_(w, ',');
	put_u64(w, d[1]);
	putc_(w, ',');
	put_u64(w, d[2]);
	putc_(w, ']');
}

long jw_end(struct jsonw *w)
{
	putc_(w, '}');
	return w->overflow ? -1 : (long)w->len;
}

static void jw_id(struct jsonw *w, const char *key, int64_t v)
{
	if (v == JW_NULL)
		jw_null(w, key);
	else if (v != JW_OMIT)
		jw_uint(w, key, (uint64_t)v);
}

void jw_common(struct jsonw *w, const char *type, const char *host, const char *instance,
	       int64_t pid, int64_t tid, uint64_t ts_ns)
{
	jw_uint(w, "schema", INFERTRACE_SCHEMA_VERSION);
	jw_str(w, "type", type);
	jw_str(w, "host", host ? host : "");
	jw_str(w, "instance", instance ? instance : "");
	jw_id(w, "pid", pid);
	jw_id(w, "tid", tid);
	jw_uint(w, "ts_ns", ts_ns);
}
