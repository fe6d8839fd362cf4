// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * log.c - the one log-forwarding helper of the library. The correlator never
 * prints: every module hands its messages to the corr_log_fn its owner set
 * in its options (correlator.h), formatted here once.
 */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

void corr_log_forward(corr_log_fn fn, void *ctx, enum corr_log_level lvl, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!fn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fn(ctx, lvl, "%s", msg);
}
