// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* jsonw.c - see jsonw.h. */
#include <stdio.h>
#include <string.h>

#include "jsonw.h"

static void put(struct jsonw *w, const char *s, size_t n)
{
	if (w->overflow || w->len + n > w->cap) {
		w->overflow = 1;
		return;
	}
	memcpy(w->buf + w->len, s, n);
	w->len += n;
}

static void putc_(struct jsonw *w, char c)
{
	put(w, &c, 1);
}

/* a JSON string: quotes, backslash and control characters escaped */
static void put_escaped(struct jsonw *w, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	putc_(w, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\') {
			putc_(w, '\\');
			putc_(w, (char)c);
		} else if (c < 0x20) {
			char e[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };

			put(w, e, sizeof(e));
		} else {
			putc_(w, (char)c);
		}
	}
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

void jw_int(struct jsonw *w, const char *key, int64_t v)
{
	char b[24];
	int n = snprintf(b, sizeof(b), "%lld", (long long)v);

	jw_key(w, key);
	put(w, b, (size_t)n);
}

void jw_uint(struct jsonw *w, const char *key, uint64_t v)
{
	char b[24];
	int n = snprintf(b, sizeof(b), "%llu", (unsigned long long)v);

	jw_key(w, key);
	put(w, b, (size_t)n);
}

void jw_hex(struct jsonw *w, const char *key, uint64_t v)
{
	char b[24];
	int n = snprintf(b, sizeof(b), "\"0x%llx\"", (unsigned long long)v);

	jw_key(w, key);
	put(w, b, (size_t)n);
}

void jw_dim3(struct jsonw *w, const char *key, const uint32_t d[3])
{
	char b[40];
	int n = snprintf(b, sizeof(b), "[%u,%u,%u]", d[0], d[1], d[2]);

	jw_key(w, key);
	put(w, b, (size_t)n);
}

long jw_end(struct jsonw *w)
{
	putc_(w, '}');
	return w->overflow ? -1 : (long)w->len;
}
