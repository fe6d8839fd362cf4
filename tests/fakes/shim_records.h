/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * shim_records.h - records as a CUPTI shim sends them (agent/shim/proto.h),
 * for tests that play a shim peer: tests/unit/test_shim_limits.c,
 * tests/unit/test_shim_nspid.c and tests/integration/shim_peer.c.
 */
#ifndef INFERTRACE_TEST_SHIM_RECORDS_H
#define INFERTRACE_TEST_SHIM_RECORDS_H

#include <stdint.h>
#include <string.h>

#include "events.h"

/* a hello (status record) from ns_pid speaking ABI abi */
static inline struct shim_status_event shim_hello(uint32_t ns_pid, uint32_t abi)
{
	struct shim_status_event s;

	memset(&s, 0, sizeof(s));
	s.hdr.type = EV_SHIM_STATUS;
	s.hdr.size = sizeof(s);
	s.hdr.pid = ns_pid;
	s.abi_version = abi;
	return s;
}

/* a runtime-API launch callback of thread tid with correlation id corr */
static inline struct gpu_launch_cb_event shim_launch_cb(uint32_t ns_pid, uint32_t tid,
							uint32_t corr)
{
	struct gpu_launch_cb_event cb;

	memset(&cb, 0, sizeof(cb));
	cb.hdr.type = EV_GPU_LAUNCH_CB;
	cb.hdr.size = sizeof(cb);
	cb.hdr.pid = ns_pid;
	cb.hdr.tid = tid;
	cb.domain = 2;
	cb.correlation_id = corr;
	return cb;
}

#endif /* INFERTRACE_TEST_SHIM_RECORDS_H */
