// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * fuzz_control.c - libFuzzer target for the control request parser
 * (agent/control/control_proto.c), which sees every byte a control-socket peer or a
 * <prefix>.control Kafka message sends. Whatever the input: 0 or -EINVAL,
 * an accepted request is well-formed (known command, bounded printable
 * instance, sane duration), the error text is terminated, nothing leaks
 * (ASan). Seeds: tests/fuzz/seeds/control, one request of each command (a
 * fuzzer without them seldom builds a JSON object with a known "cmd", and
 * never reached the commands' own checks). Build: make fuzz-control
 * (clang); run: build/tests/fuzz/fuzz_control tests/fuzz/seeds/control.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "control_proto.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct ctl_request req;
	char err[160];
	int ret = ctl_parse_request((const char *)data, size, &req, err, sizeof(err));

	if (ret != 0 && ret != -EINVAL)
		abort();
	if (!memchr(err, '\0', sizeof(err)))
		abort();
	if (!ret) {
		if ((unsigned)req.cmd >= CTL_CMD_COUNT)
			abort();
		if (strlen(req.instance) > CTL_INSTANCE_MAX)
			abort();
		if (req.cmd == CTL_DEEP_DIVE &&
		    (!req.instance[0] || !isfinite(req.duration_s) || req.duration_s < 0))
			abort();
	}
	ctl_request_release(&req);
	return 0;
}
