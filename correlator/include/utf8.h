/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * utf8.h - one code point to UTF-8, for the readers that decode text
 * themselves: JSON's \uXXXX escapes (correlator/src/kineto.c) and the
 * strings of a Python process (agent/sources/python.c). The caller decides
 * what it accepts (kineto.c passes surrogate halves through as-is).
 */
#ifndef INFERTRACE_UTF8_H
#define INFERTRACE_UTF8_H

#include <stdint.h>

/* c (at most 0x10ffff) as UTF-8 into out (4 bytes of room): the bytes written */
static inline int utf8_put(uint32_t c, char *out)
{
	if (c < 0x80) {
		out[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		out[0] = (char)(0xc0 | c >> 6);
		out[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		out[0] = (char)(0xe0 | c >> 12);
		out[1] = (char)(0x80 | (c >> 6 & 0x3f));
		out[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | c >> 18);
	out[1] = (char)(0x80 | (c >> 12 & 0x3f));
	out[2] = (char)(0x80 | (c >> 6 & 0x3f));
	out[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

#endif /* INFERTRACE_UTF8_H */
