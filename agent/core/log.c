// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* log.c - the agent's diagnostics on stderr, one line each. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "agent.h"
#include "correlator.h"
#include "util.h"

static int log_level = LOG_INFO;

void agent_log_set_level(int level)
{
	log_level = level;
}

/*
 * One line on stderr (the journal, kubectl logs). Messages carry names a
 * workload chose (comm, instance, Python functions, library paths): their
 * control bytes are written as '?' (term_safe()), so that a newline cannot
 * forge a log line nor an escape sequence reach the terminal of whoever
 * tails the log.
 */
void agent_log(enum log_level lvl, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};
	char buf[1024], *msg = buf;
	va_list ap;
	int n;

	if ((int)lvl > log_level)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(buf) && (msg = malloc((size_t)n + 1))) {
		va_start(ap, fmt);
		vsnprintf(msg, (size_t)n + 1, fmt, ap);
		va_end(ap);
	}
	if (!msg)
		msg = buf; /* no memory: the first 1023 bytes */
	term_safe(msg);
	fprintf(stderr, "infertrace-agent: %s: %s\n", names[lvl], n < 0 ? fmt : msg);
	if (msg != buf)
		free(msg);
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
