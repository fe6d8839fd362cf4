// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* jsonw.c - see jsonw.h. The primitives stay small and inline: a replay writes millions. */
#include <stdatomic.h>
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

/* ---------------------------------------------------------------- UTF-8 --- */

/* invalid bytes replaced, process-wide (jsonw has no owner to count in) */
static _Atomic uint64_t utf8_replaced;

/*
 * Length of the well-formed UTF-8 sequence at s (n > 0 bytes left), 1-4, or
 * 0 when s[0] starts none: RFC 3629 section 4 (no overlongs, no surrogates,
 * nothing above U+10FFFF).
 */
size_t jw_utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t len, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

uint64_t jw_utf8_replaced(void)
{
	return atomic_load_explicit(&utf8_replaced, memory_order_relaxed);
}

static void count_replaced(uint64_t n)
{
	if (n)
		atomic_fetch_add_explicit(&utf8_replaced, n, memory_order_relaxed);
}

size_t jw_utf8_valid(const char *s, size_t n)
{
	size_t i = 0, k;

	/*
	 * Names are nearly all ASCII: 8 bytes at a time while no byte has its
	 * top bit, then a byte under 0x80 needs no call. A byte at a time this
	 * was 9% of the agent at 133 k kernels/s (bench/shim.sh, perf).
	 */
	for (; i + 8 <= n; i += 8) {
		uint64_t w;

		memcpy(&w, s + i, 8);
		if (w & 0x8080808080808080ULL)
			break;
	}
	for (; i < n; i += k) {
		k = 1;
		if ((unsigned char)s[i] >= 0x80 &&
		    !(k = jw_utf8_seq((const unsigned char *)s + i, n - i)))
			break;
	}
	return i;
}

const char *jw_utf8_clean(const char *s, char *buf, size_t cap)
{
	static const char rep[] = "\xef\xbf\xbd"; /* U+FFFD */
	size_t n = strlen(s), i = jw_utf8_valid(s, n), o = 0, k;
	uint64_t bad = 0;

	if (i == n)
		return s;
	if (!cap)
		return "";
	memcpy(buf, s, i < cap - 1 ? i : cap - 1);
	o = i < cap - 1 ? i : cap - 1;
	while (i < n && o < cap - 1) {
		k = jw_utf8_seq((const unsigned char *)s + i, n - i);
		if (!k) {
			bad++;
			if (o + 3 > cap - 1)
				break;
			memcpy(buf + o, rep, 3);
			o += 3;
			i++;
			continue;
		}
		if (o + k > cap - 1)
			break;
		memcpy(buf + o, s + i, k);
		o += k;
		i += k;
	}
	/* a cut name can still hide invalid bytes after the cut: they are not written */
	buf[o] = '\0';
	count_replaced(bad ? bad : 1);
	return buf;
}

/* an ASCII byte a JSON string holds as it is: not a control, quote or backslash */
static inline int plain_ascii(unsigned char c)
{
	return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/*
 * A JSON string: quotes, backslash and control characters escaped; a byte
 * that starts no well-formed UTF-8 sequence becomes U+FFFD (counted): a
 * kernel name from a shim or a trace is bytes, and strict parsers (Kafka
 * consumers, jq) refuse invalid UTF-8. Valid runs are copied whole.
 */
static void put_escaped(struct jsonw *w, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t run = 0, k;

	putc_(w, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c >= 0x80) {
			k = jw_utf8_seq((const unsigned char *)s + i, n - i);
			if (k) {
				i += k - 1;
				continue;
			}
			put(w, s + run, i - run);
			run = i + 1;
			put(w, "\\ufffd", 6);
			count_replaced(1);
			continue;
		}
		if (plain_ascii(c))
			continue;
		put(w, s + run, i - run);
		run = i + 1;
		if (c == '"' || c == '\\') {
			char e[2] = {'\\', (char)c};

			put(w, e, sizeof(e));
		} else {
			char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};

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

/*
 * Keys are the writers' own names, plain ASCII: measured, checked and copied
 * in one pass (a collective record has about 40 keys); anything else is
 * escaped as values are.
 */
void jw_key(struct jsonw *w, const char *key)
{
	size_t len = w->len;
	char *o = w->buf + len, *end = w->buf + w->cap;
	const char *p = key;

	if (w->overflow)
		goto slow;
	if (!w->first) {
		if (o == end)
			goto slow;
		*o++ = ',';
	}
	if (o == end)
		goto slow;
	*o++ = '"';
	for (; *p; p++) {
		unsigned char c = (unsigned char)*p;

		if (o == end || !plain_ascii(c))
			goto slow;
		*o++ = (char)c;
	}
	if (end - o < 2)
		goto slow;
	*o++ = '"';
	*o++ = ':';
	w->len = (size_t)(o - w->buf);
	w->first = 0;
	return;
slow:
	w->len = len;
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

void jw_open(struct jsonw *w, char c)
{
	putc_(w, c);
	w->first = 1;
}

void jw_close(struct jsonw *w, char c)
{
	putc_(w, c);
	w->first = 0;
}

void jw_next(struct jsonw *w)
{
	if (!w->first)
		putc_(w, ',');
	w->first = 0;
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
