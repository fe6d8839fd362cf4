// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* log.c - the agent's diagnostics on stderr, one line each. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "agent.h"
#include "correlator.h"

static int log_level = LOG_INFO;

void agent_log_set_level(int level)
{
	log_level = level;
}

void agent_log(enum log_level lvl, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};
	va_list ap;

	if ((int)lvl > log_level)
		return;
	fprintf(stderr, "infertrace-agent: %s: ", names[lvl]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/*
 * The log callback handed to the libraries (correlator, diagnosis): their
 * messages go through agent_log with ctx as a prefix (a string or NULL).
 */
void agent_lib_log(void *ctx, enum corr_log_level lvl, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	agent_log((enum log_level)lvl, "%s%s", ctx ? (const char *)ctx : "", msg);
}
