/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * fake_cupti.h - control interface of the CUPTI test double
 * (build/tests/fakes/libcupti.so.13, from tests/fakes/fake_cupti.c).
 *
 * The double implements the CUPTI entry points libinfertrace_cupti.so calls,
 * with the prototypes, enums and record structs of the real CUDA 13 headers
 * (it includes <cupti.h>). It records what the shim asked for (calls in
 * order, activity kinds, (domain, cbid) pairs) and delivers launch callbacks
 * only for enabled pairs, as CUPTI does. Activity records given to it are the
 * real structs (CUpti_ActivityKernel10, CUpti_ActivityMemcpy6,
 * CUpti_ActivityMemset4); it packs them into buffers obtained from the shim's
 * buffer-requested callback and returns them through its buffer-completed
 * callback, to be read back with cuptiActivityGetNextRecord().
 *
 * Its clock (cuptiGetTimestamp and the records stamped without a timestamp
 * callback) is CLOCK_REALTIME, as Linux CUPTI's default.
 *
 * Threading: every function may be called from any thread; the double holds
 * one recursive lock while it calls the shim's buffer callbacks and no lock
 * while it calls its API callback.
 */
#ifndef INFERTRACE_FAKE_CUPTI_H
#define INFERTRACE_FAKE_CUPTI_H

#include <dlfcn.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cupti.h>

/* forget everything, as a freshly loaded libcupti */
void fake_cupti_reset(void);

/* behave as the real libcupti without a driver: CUPTI_ERROR_UNKNOWN */
void fake_cupti_set_no_gpu(bool on);
/* the CUDA 12.6U2-13.1 bug: kernels have start == end == 0 with a ts callback */
void fake_cupti_set_zero_kernel_ts(bool on);

/*
 * The CUDA runtime's exit handler has run (it destroys the contexts). On an
 * H100 (CUDA 13.0, driver 580.159.04) the real libcupti then crashed in
 * cuptiActivityDisable (docs/operations.md, "Checking a GPU node"): from now
 * on the double aborts, with a message, on any call that needs the driver
 * (enable, disable, flush, unsubscribe, finalize).
 */
void fake_cupti_cuda_exit(void);

/* call log: position of the first call to fn (0-based), or -1 */
int fake_cupti_first_call(const char *fn);
/* number of calls to fn */
int fake_cupti_call_count(const char *fn);

bool fake_cupti_kind_enabled(CUpti_ActivityKind kind);
/* was the kind ever enabled since the reset */
bool fake_cupti_kind_ever_enabled(CUpti_ActivityKind kind);
bool fake_cupti_callback_enabled(CUpti_CallbackDomain dom, CUpti_CallbackId cbid);
/* fill up to max (domain, cbid) pairs currently enabled, return how many */
size_t fake_cupti_enabled_callbacks(uint32_t (*pairs)[2], size_t max);
bool fake_cupti_has_ts_callback(void);
bool fake_cupti_subscribed(void);

/*
 * An API call on the calling thread: ENTER then EXIT callbacks, each only
 * if (dom, cbid) is enabled. Returns the number of callbacks delivered.
 */
int fake_cupti_api_call(CUpti_CallbackDomain dom, CUpti_CallbackId cbid, uint32_t corr);
/* the same, a launch of the kernel named symbol (CUpti_CallbackData.symbolName) */
int fake_cupti_launch(CUpti_CallbackDomain dom, CUpti_CallbackId cbid, uint32_t corr,
		      const char *symbol);
/*
 * An NVTX call as CUPTI reports it once NVTX is routed to it: one callback
 * of domain CUPTI_CB_DOMAIN_NVTX with CUpti_NvtxData (params: the call's
 * generated_nvtx_meta.h struct; ret: its return value or NULL), if enabled.
 */
int fake_cupti_nvtx(CUpti_CallbackId cbid, const void *params, const void *ret);
/* a runtime call with its nested driver call, one correlation id */
int fake_cupti_api_nested(CUpti_CallbackId rt_cbid, CUpti_CallbackId drv_cbid, uint32_t corr);

/*
 * Queue one activity record (a real CUpti_Activity* struct, kind set).
 * Returns 0, or -ENOBUFS when the shim declined a buffer and the record was
 * dropped (counted for cuptiActivityGetNumDroppedRecords).
 */
int fake_cupti_add_record(const CUpti_Activity *rec);
/*
 * A kernel record (CUpti_ActivityKernel10, device 0, context 1, grid 64,
 * block 128) through fake_cupti_add_record(), for callers that cannot build
 * the struct (tests/integration/py_gpu.py, with ctypes). name is not
 * copied: it must outlive the record's delivery.
 */
int fake_cupti_add_kernel(uint32_t corr, uint64_t start, uint64_t dur, uint32_t stream,
			  const char *name);
/* hand every filled or partly filled buffer back to the shim */
void fake_cupti_complete(void);
/* when false, buffers go back only on fake_cupti_complete() (default true:
 * cuptiActivityFlushAll returns them too) */
void fake_cupti_set_flush_returns(bool on);
/* buffers the shim gave and the double still holds */
size_t fake_cupti_buffers_held(void);
/* distinct buffer addresses seen since the reset */
size_t fake_cupti_distinct_buffers(void);
/* buffer requests the shim declined */
uint64_t fake_cupti_declined(void);

/*
 * What CUPTI's kernel, memcpy and memset records share (their structs
 * differ): m zeroed, then kind k on device dev, context ctx, stream,
 * correlation id corr, from t0 for dur ns.
 */
#define FAKE_CUPTI_ACTIVITY(m, k, dev, ctx, t0, dur, stream, corr)                                 \
	do {                                                                                       \
		memset(&(m), 0, sizeof(m));                                                        \
		(m).kind = (k);                                                                    \
		(m).deviceId = (dev);                                                              \
		(m).contextId = (ctx);                                                             \
		(m).start = (t0);                                                                  \
		(m).end = (m).start + (dur);                                                       \
		(m).streamId = (stream);                                                           \
		(m).correlationId = (corr);                                                        \
	} while (0)

/* a kernel record's grid and block */
#define FAKE_CUPTI_DIMS(k, gx, gy, gz, bx, by, bz)                                                 \
	((k).gridX = (gx), (k).gridY = (gy), (k).gridZ = (gz), (k).blockX = (bx),                  \
	 (k).blockY = (by), (k).blockZ = (bz))

/*
 * The shim the tests load with the double: $INFERTRACE_SHIM_SO, else
 * build/libinfertrace_cupti.so found from this binary, two levels under build/
 * (build/tests/unit/test_shim, build/tests/integration/gpu_live).
 */
static inline const char *fake_cupti_shim_path(void)
{
	static char p[PATH_MAX + 64];
	char exe[PATH_MAX];
	ssize_t n;
	char *s;

	if (getenv("INFERTRACE_SHIM_SO"))
		return getenv("INFERTRACE_SHIM_SO");
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return "build/libinfertrace_cupti.so";
	exe[n] = '\0';
	s = strrchr(exe, '/');
	if (s)
		*s = '\0';
	snprintf(p, sizeof(p), "%s/../../libinfertrace_cupti.so", exe);
	return p;
}

/*
 * Load the shim as the CUDA driver would (its NEEDED libcupti.so.13 binds
 * to the double the caller is linked with: same soname) and call its
 * InitializeInjection, with fast ticks so that tests do not wait on the
 * shim's 1 s defaults (the environment may set others). 0, or -1 with the
 * reason on stderr, prefixed by who.
 */
static inline int fake_cupti_load_shim(const char *who)
{
	const char *path = fake_cupti_shim_path();
	int (*init)(void);
	void *so;

	setenv("INFERTRACE_SHIM_TICK_MS", "2", 0);
	setenv("INFERTRACE_SHIM_FLUSH_MS", "20", 0);
	setenv("INFERTRACE_SHIM_STATUS_MS", "100", 0);
	setenv("INFERTRACE_SHIM_RETRY_MS", "20", 0);
	so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!so) {
		fprintf(stderr, "%s: cannot load the shim %s: %s\n", who, path, dlerror());
		return -1;
	}
	init = (int (*)(void))dlsym(so, "InitializeInjection");
	if (!init || init() != 1) {
		fprintf(stderr, "%s: InitializeInjection failed\n", who);
		return -1;
	}
	return 0;
}

#endif /* INFERTRACE_FAKE_CUPTI_H */
