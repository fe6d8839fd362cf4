// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* log.c - the agent's diagnostics on stderr, one line each. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "agent.h"

static int log_level = LOG_INFO;

void agent_log_set_level(int level)
{
	log_level = level;
}

void agent_log(enum log_level lvl, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };
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
