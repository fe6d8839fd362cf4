// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * fuzz_shim_rx.c - libFuzzer target for the validation of what CUPTI shims
 * send the agent (agent/sources/shim_rx.c). Each input is one message on a fresh
 * connection; every record handed to the callback must be a shim record of
 * its exact size, with the kernel's pid. Build: make fuzz-shim-rx (clang).
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shim_rx.h"

#define FUZZ_PID 4242u

static void on_record(void *ctx, const struct event_hdr *h, size_t len)
{
	(void)ctx;
	if (len != h->size || h->pid != FUZZ_PID || h->type < EV_GPU_KERNEL ||
	    h->type > EV_SHIM_STATUS)
		abort();
	if (h->type <= EV_GPU_MEMSET &&
	    !memchr(((const struct gpu_activity_event *)h)->name, '\0', GPU_NAME_LEN))
		abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	static struct shim_rx *rx;

	if (!rx) {
		struct shim_rx_opts o = {.sz = sizeof(o), .on_record = on_record};
		char path[64];

		/* a private socket; the fuzzer never connects to it */
		snprintf(path, sizeof(path), "/tmp/fuzz-shim-rx-%d/shim.sock", (int)getpid());
		rx = shim_rx_open(path, &o);
		if (!rx)
			abort();
	}
	shim_rx_feed(rx, FUZZ_PID, data, size);
	return 0;
}
