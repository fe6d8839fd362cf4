/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * tests/fakes/cap_sink.h - for unit tests that put a capturing struct sink
 * (agent/core/agent.h) under the agent: what such a sink shares.
 * Users: tests/unit/test_ops.c, tests/unit/test_nccl_live.c.
 */
#ifndef INFERTRACE_TEST_CAP_SINK_H
#define INFERTRACE_TEST_CAP_SINK_H

/* flush: a capturing sink holds nothing back */
static inline int cap_flush(struct sink *s, int timeout_ms)
{
	(void)s;
	(void)timeout_ms;
	return 0;
}

#endif
