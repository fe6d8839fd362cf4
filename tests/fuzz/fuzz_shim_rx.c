// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * fuzz_shim_rx.c - libFuzzer target for the validation of what CUPTI shims
 * send the agent (agent/sources/shim_rx.c). Each input is one message on a fresh
 * connection; every record handed to the callback must be a shim record of
 * its exact size, with the kernel's pid, and its strings terminated. The
 * types a shim may send are listed here, not taken as a range: a new type
 * (EV_GPU_MARKER came after EV_SHIM_STATUS, EV_GPU_DEVICE after it) is a valid
 * record, not a crash.
 * Build: make fuzz-shim-rx (clang).
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shim_rx.h"

#define FUZZ_PID 4242u

/* exact size of each type a shim may send; 0: must never be delivered */
static size_t shim_size(unsigned type)
{
	switch (type) {
	case EV_GPU_KERNEL:
	case EV_GPU_MEMCPY:
	case EV_GPU_MEMSET:
		return sizeof(struct gpu_activity_event);
	case EV_GPU_LAUNCH_CB:
		return sizeof(struct gpu_launch_cb_event);
	case EV_SHIM_STATUS:
		return sizeof(struct shim_status_event);
	case EV_GPU_MARKER:
		return sizeof(struct gpu_marker_event);
	case EV_GPU_DEVICE:
		return sizeof(struct gpu_device_event);
	default:
		return 0;
	}
}

static void on_record(void *ctx, const struct event_hdr *h, size_t len)
{
	(void)ctx;
	if (!shim_size(h->type) || len != h->size || h->size != shim_size(h->type) ||
	    h->pid != FUZZ_PID)
		abort();
	if (h->type <= EV_GPU_MEMSET &&
	    !memchr(((const struct gpu_activity_event *)h)->name, '\0', GPU_NAME_LEN))
		abort();
	if (h->type == EV_GPU_MARKER &&
	    !memchr(((const struct gpu_marker_event *)h)->name, '\0', MARKER_NAME_LEN))
		abort();
	if (h->type == EV_GPU_DEVICE &&
	    (((const struct gpu_device_event *)h)->device >= SHIM_MAX_DEVICES ||
	     ((const struct gpu_device_event *)h)->flags & ~GPU_DEV_F_MIG))
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
