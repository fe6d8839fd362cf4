// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * cupti.c - the CUPTI side of libinfertrace_cupti.so: InitializeInjection,
 * the activity buffer pool, the launch callback and the conversion of CUPTI
 * records into bpf/events.h records (field for field as agent/sources/shim_rx.c
 * validates them).
 *
 * The driver loads this library through CUDA_INJECTION64_PATH and calls
 * InitializeInjection() while it initialises; it is not built with exception
 * handling, so nothing here may fail loudly: every error ends in "inert"
 * (CUPTI left as we found it, one status record saying so).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>

#include <generated_nvtx_meta.h>

#include "shim.h"

struct shim g_shim = {
    .efd = -1,
};

/*
 * The launch and graph-launch entry points, CUDA 13.0 numbering (checked
 * against cupti_runtime_cbid.h / cupti_driver_cbid.h by the _Static_asserts
 * in tests/unit/test_shim.c). Each kernel reaches the GPU through one of them;
 * the runtime ones nest a driver one with the same correlation id, which
 * launch_cb() reports once.
 */
struct shim_cbid {
	CUpti_CallbackDomain domain;
	CUpti_CallbackId cbid;
	bool graph; /* one callback stands for many kernels: never sampled */
};

#define RT(id, gr)                                                                                 \
	{                                                                                          \
		CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_##id, gr                     \
	}
#define DRV(id, gr)                                                                                \
	{                                                                                          \
		CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##id, gr                       \
	}
static const struct shim_cbid launch_cbids[] = {
    RT(cudaLaunch_v3020, false),
    RT(cudaLaunch_ptsz_v7000, false),
    RT(cudaLaunchKernel_v7000, false),
    RT(cudaLaunchKernel_ptsz_v7000, false),
    RT(cudaLaunchCooperativeKernel_v9000, false),
    RT(cudaLaunchCooperativeKernel_ptsz_v9000, false),
    RT(cudaLaunchCooperativeKernelMultiDevice_v9000, false),
    RT(cudaGraphLaunch_v10000, true),
    RT(cudaGraphLaunch_ptsz_v10000, true),
    RT(cudaLaunchKernelExC_v11060, false),
    RT(cudaLaunchKernelExC_ptsz_v11060, false),
    /* CUDA 13 routes <<<>>> through __cudaLaunchKernel */
    RT(__cudaLaunchKernel_v13000, false),
    RT(__cudaLaunchKernel_ptsz_v13000, false),
    /*
     * Async copies and memsets: their MEMCPY/MEMSET records carry a
     * correlation id like kernels do, and only this callback ties it to a
     * thread (the uprobes see cudaMemcpyAsync's entry; the correlator joins
     * the two as for a launch).
     */
    RT(cudaMemcpyAsync_v3020, false),
    RT(cudaMemcpyAsync_ptsz_v7000, false),
    RT(cudaMemsetAsync_v3020, false),
    RT(cudaMemsetAsync_ptsz_v7000, false),
    DRV(cuLaunch, false),
    DRV(cuLaunchGrid, false),
    DRV(cuLaunchGridAsync, false),
    DRV(cuLaunchKernel, false),
    DRV(cuLaunchKernel_ptsz, false),
    DRV(cuLaunchCooperativeKernel, false),
    DRV(cuLaunchCooperativeKernel_ptsz, false),
    DRV(cuLaunchCooperativeKernelMultiDevice, false),
    DRV(cuGraphLaunch, true),
    DRV(cuGraphLaunch_ptsz, true),
    DRV(cuLaunchKernelEx, false),
    DRV(cuLaunchKernelEx_ptsz, false),
};
#undef RT
#undef DRV

/*
 * Activity kinds: CONCURRENT_KERNEL (KERNEL would serialise every kernel),
 * MEMCPY always; MEMSET in deep capture only; DEVICE, one record per device
 * with its UUID (the agent matches it with NVML's), when CUPTI takes it: a
 * refusal is logged and costs nothing else. No API kinds: tracing every
 * runtime/driver call is where profilers lose 10-80%.
 */
#define KINDS_ALWAYS                                                                               \
	((1u << CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) | (1u << CUPTI_ACTIVITY_KIND_MEMCPY) |      \
	 (1u << CUPTI_ACTIVITY_KIND_DEVICE))
#define KINDS_DEEP (KINDS_ALWAYS | (1u << CUPTI_ACTIVITY_KIND_MEMSET))
_Static_assert(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL < 32 && CUPTI_ACTIVITY_KIND_MEMSET < 32,
	       "kinds fit the kinds_on bitmask");

void shim_log(const char *fmt, ...)
{
	va_list ap;

	if (!g_shim.log_stderr)
		return;
	va_start(ap, fmt);
	fputs("infertrace-shim: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

uint64_t shim_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* handed to cuptiActivityRegisterTimestampCallback: one time base with BPF */
static uint64_t CUPTIAPI mono_ts_callback(void)
{
	return shim_mono_ns();
}

static const char *res_str(CUptiResult r)
{
	const char *s = NULL;

	if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
		return "?";
	return s;
}

/* "no GPU here": what the real libcupti answers without a driver */
static bool res_no_gpu(CUptiResult r)
{
	return r == CUPTI_ERROR_UNKNOWN || r == CUPTI_ERROR_NOT_INITIALIZED;
}

/*
 * CUPTI clock + offset, for the fallback: the offset is the middle of two
 * CLOCK_MONOTONIC reads bracketing cuptiGetTimestamp(), best of a few tries
 * (the narrowest bracket is the least disturbed one).
 */
int64_t shim_measure_offset(void)
{
	uint64_t best_w = UINT64_MAX;
	int64_t best = 0;
	int i;

	for (i = 0; i < 7; i++) {
		uint64_t t1, t2, c = 0;

		t1 = shim_mono_ns();
		if (cuptiGetTimestamp(&c) != CUPTI_SUCCESS)
			continue;
		t2 = shim_mono_ns();
		if (t2 - t1 < best_w) {
			best_w = t2 - t1;
			best = (int64_t)(t1 + (t2 - t1) / 2) - (int64_t)c;
		}
	}
	return best;
}

/* ---------------------------------------------------------------- pool --- */

/*
 * CUPTI asks for a buffer on its worker thread or, at times, on an
 * application thread: claim a free slot with one CAS, never wait. With every
 * slot out (the shim thread is behind), decline: CUPTI drops records and
 * counts them (cuptiActivityGetNumDroppedRecords), so memory stays bounded.
 */
static void CUPTIAPI buf_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	uint32_t free_bits, bit;
	int i;

	*buffer = NULL;
	*size = 0;
	*max_records = 0;
	free_bits = atomic_load(&g_shim.buf_free);
	do {
		if (!free_bits) {
			atomic_fetch_add_explicit(&g_shim.pool_empty, 1, memory_order_relaxed);
			return;
		}
		i = __builtin_ctz(free_bits);
		bit = 1u << i;
	} while (!atomic_compare_exchange_weak(&g_shim.buf_free, &free_bits, free_bits & ~bit));

	if (!g_shim.bufs[i]) {
		/* first use of this slot; CUPTI wants ACTIVITY_RECORD_ALIGNMENT */
		g_shim.bufs[i] = aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, g_shim.buf_size);
		if (!g_shim.bufs[i]) {
			atomic_fetch_or(&g_shim.buf_free, bit);
			atomic_fetch_add_explicit(&g_shim.pool_empty, 1, memory_order_relaxed);
			return;
		}
	}
	*buffer = g_shim.bufs[i];
	*size = g_shim.buf_size;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
				   size_t valid)
{
	size_t dropped = 0;
	uint64_t one = 1;
	unsigned int i;

	(void)size;
	if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
		atomic_fetch_add(&g_shim.cupti_dropped, dropped);
	for (i = 0; i < g_shim.nbufs; i++) {
		if (buffer && g_shim.bufs[i] == buffer)
			break;
	}
	if (i == g_shim.nbufs)
		return; /* not ours: nothing to recycle */
	g_shim.buf_valid[i] = valid;
	atomic_fetch_or_explicit(&g_shim.buf_ready, 1u << i, memory_order_release);
	/* nonblocking eventfd: a full counter only means a wake-up is pending */
	if (g_shim.efd >= 0 && write(g_shim.efd, &one, sizeof(one)) < 0) {
		/* nothing to do: the shim thread also wakes on its tick */
	}
}

/* ---------------------------------------------------------- conversion --- */

static void fill_hdr(struct gpu_activity_event *e, __u16 type, uint64_t start, uint64_t end,
		     int64_t off)
{
	memset(e, 0, sizeof(*e));
	e->start_ns = start + (uint64_t)off;
	e->end_ns = end + (uint64_t)off;
	shim_hdr(&e->hdr, type, sizeof(*e), 0, e->start_ns);
}

static void copy_name(char *dst, const char *src)
{
	size_t n;

	if (!src)
		return;
	n = strnlen(src, GPU_NAME_LEN - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/*
 * Kernel, memcpy and memset records (CUpti_ActivityKernel10, Memcpy6,
 * Memset4) name their placement fields alike: one copy for the three types.
 */
#define copy_placement(e, r)                                                                       \
	do {                                                                                       \
		(e)->correlation_id = (r)->correlationId;                                          \
		(e)->device = (r)->deviceId;                                                       \
		(e)->context = (r)->contextId;                                                     \
		(e)->stream = (r)->streamId;                                                       \
		(e)->graph_id = (r)->graphId;                                                      \
		(e)->graph_node_id_lo = (__u32)(r)->graphNodeId;                                   \
		(e)->graph_node_id_hi = (__u32)((r)->graphNodeId >> 32);                           \
	} while (0)

/* the word of g_shim.sampled that holds this correlation id's bit, and the bit */
static _Atomic uint64_t *sampled_word(uint32_t corr, uint64_t *bit)
{
	uint32_t b = corr % SHIM_SAMPLED_BITS;

	*bit = 1ull << (b % 64);
	return &g_shim.sampled[b / 64];
}

/*
 * Was this correlation id's launch sampled out? Relaxed: a bit seen late
 * only makes the agent wait for a launch, as it did before the flag; the
 * launch's callback ran at API exit, long before CUPTI hands its record back.
 */
static bool launch_sampled_out(uint32_t corr)
{
	uint64_t bit;

	return atomic_load_explicit(sampled_word(corr, &bit), memory_order_relaxed) & bit;
}

/* on the launching thread: remember whether this id's launch record was sent */
static void launch_mark(uint32_t corr, bool sampled_out)
{
	uint64_t bit;
	_Atomic uint64_t *w = sampled_word(corr, &bit);

	if (sampled_out)
		atomic_fetch_or_explicit(w, bit, memory_order_relaxed);
	else if (atomic_load_explicit(w, memory_order_relaxed) & bit)
		atomic_fetch_and_explicit(w, ~bit, memory_order_relaxed);
}

/* a device of the process and its UUID (CUpti_ActivityDevice5: id, uuid, isMigEnabled) */
static void send_device(const CUpti_ActivityDevice5 *d)
{
	struct gpu_device_event e;

	memset(&e, 0, sizeof(e));
	shim_hdr(&e.hdr, EV_GPU_DEVICE, sizeof(e), 0, shim_mono_ns());
	e.device = d->id;
	e.flags = d->isMigEnabled ? GPU_DEV_F_MIG : 0;
	_Static_assert(sizeof(d->uuid) == sizeof(e.uuid), "CUuuid is 16 bytes");
	memcpy(e.uuid, &d->uuid, sizeof(e.uuid));
	shim_tx_append(&e, sizeof(e), true);
}

static void send_activity(const CUpti_Activity *rec, int64_t off, unsigned int *kernels,
			  unsigned int *zero_kernels)
{
	struct gpu_activity_event e;

	if (rec->kind == CUPTI_ACTIVITY_KIND_DEVICE) {
		send_device((const void *)rec);
		return;
	}
	switch (rec->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const CUpti_ActivityKernel10 *k = (const void *)rec;

		(*kernels)++;
		if (!k->start && !k->end) {
			(*zero_kernels)++;
			goto no_time;
		}
		fill_hdr(&e, EV_GPU_KERNEL, k->start, k->end, off);
		copy_placement(&e, k);
		e.grid[0] = (__u32)k->gridX;
		e.grid[1] = (__u32)k->gridY;
		e.grid[2] = (__u32)k->gridZ;
		e.block[0] = (__u32)k->blockX;
		e.block[1] = (__u32)k->blockY;
		e.block[2] = (__u32)k->blockZ;
		copy_name(e.name, k->name);
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const CUpti_ActivityMemcpy6 *m = (const void *)rec;

		if (!m->start && !m->end)
			goto no_time;
		fill_hdr(&e, EV_GPU_MEMCPY, m->start, m->end, off);
		copy_placement(&e, m);
		e.copy_kind = m->copyKind;
		e.bytes = m->bytes;
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset4 *m = (const void *)rec;

		if (!m->start && !m->end)
			goto no_time;
		fill_hdr(&e, EV_GPU_MEMSET, m->start, m->end, off);
		copy_placement(&e, m);
		e.bytes = m->bytes;
		break;
	}
	default:
		return; /* a kind we did not ask for */
	}
	if (launch_sampled_out(e.correlation_id))
		e.hdr.cpu = GPU_F_NO_LAUNCH;
	shim_tx_append(&e, sizeof(e), true);
	return;

no_time:
	/* a GPU activity without time is useless to the agent: shed and count */
	atomic_fetch_add(&g_shim.zero_ts, 1);
	atomic_fetch_add(&g_shim.dropped, 1);
}

static void process_buffer(uint8_t *buf, size_t valid)
{
	CUpti_Activity *rec = NULL;
	unsigned int kernels = 0, zero_kernels = 0;
	int64_t off = 0;

	if (atomic_load(&g_shim.clock_mode) == SHIM_CLOCK_OFFSET)
		off = atomic_load(&g_shim.clock_offset_ns);
	while (valid && cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS)
		send_activity(rec, off, &kernels, &zero_kernels);

	/*
	 * Known CUPTI bug (12.6 U2 up to 13.1): with a timestamp callback,
	 * kernel records come with start == end == 0. A single zero record can
	 * be legitimate (no device memory for timing), a buffer of nothing but
	 * zero kernels is the bug: leave the callback behind.
	 */
	if (kernels && zero_kernels == kernels &&
	    atomic_load(&g_shim.clock_mode) == SHIM_CLOCK_MONOTONIC_CB)
		atomic_store(&g_shim.want_fallback, 1);
}

/* shim thread: convert and recycle every buffer CUPTI gave back */
void shim_cupti_process_ready(void)
{
	uint32_t ready = atomic_exchange_explicit(&g_shim.buf_ready, 0, memory_order_acquire);

	while (ready) {
		int i = __builtin_ctz(ready);

		ready &= ready - 1;
		process_buffer(g_shim.bufs[i], g_shim.buf_valid[i]);
		atomic_fetch_or(&g_shim.buf_free, 1u << i);
	}
}

/* ------------------------------------------------------------ callbacks --- */

/*
 * Per-thread state of the launch callback. t_rt_corr: correlation id of the
 * traced runtime call this thread is inside (its nested driver call shares
 * the id and is not reported); t_last_corr: last id reported (one record per
 * correlation id per thread); token bucket for sentinel sampling.
 */
static __thread uint32_t t_tid;
static __thread uint32_t t_rt_corr;
static __thread uint32_t t_last_corr;
static __thread uint64_t t_tok_ns;
static __thread uint32_t t_tokens;

static bool cbid_is_graph(CUpti_CallbackDomain dom, CUpti_CallbackId cbid)
{
	size_t i;

	for (i = 0; i < sizeof(launch_cbids) / sizeof(launch_cbids[0]); i++) {
		if (launch_cbids[i].domain == dom && launch_cbids[i].cbid == cbid)
			return launch_cbids[i].graph;
	}
	return false;
}

/*
 * An NCCL kernel (ncclDevKernel_*, ncclKernel_* in older NCCL; mangled or
 * not): its collective waits for it, so its launch is never sampled out.
 * Only asked when the thread's budget is spent.
 */
static bool nccl_kernel(const char *sym)
{
	return sym && (strstr(sym, "ncclDevKernel") || strstr(sym, "ncclKernel"));
}

/* sentinel mode: at most launch_rate kernel-launch records per thread per s */
static bool take_token(uint64_t now)
{
	uint32_t rate = g_shim.launch_rate;
	uint64_t add;

	if (!t_tok_ns) {
		t_tok_ns = now;
		t_tokens = rate;
	}
	add = (now - t_tok_ns) * rate / 1000000000ull;
	if (add) {
		t_tokens = add + t_tokens > rate ? rate : t_tokens + (uint32_t)add;
		t_tok_ns = now;
	}
	if (!t_tokens)
		return false;
	t_tokens--;
	return true;
}

/* ----------------------------------------------------------------- NVTX --- */

/* the NVTX range calls whose callbacks the shim enables (cupti_nvtx_cbid.h) */
static const CUpti_CallbackId nvtx_cbids[] = {
    CUPTI_CBID_NVTX_nvtxRangePushA,	    CUPTI_CBID_NVTX_nvtxRangePushEx,
    CUPTI_CBID_NVTX_nvtxRangePop,	    CUPTI_CBID_NVTX_nvtxRangeStartA,
    CUPTI_CBID_NVTX_nvtxRangeStartEx,	    CUPTI_CBID_NVTX_nvtxRangeEnd,
    CUPTI_CBID_NVTX_nvtxDomainRangePushEx,  CUPTI_CBID_NVTX_nvtxDomainRangePop,
    CUPTI_CBID_NVTX_nvtxDomainRangeStartEx, CUPTI_CBID_NVTX_nvtxDomainRangeEnd,
};

/* the ASCII message of an event attribute structure, or NULL */
static const char *attr_message(const nvtxEventAttributes_t *a)
{
	if (!a || a->messageType != NVTX_MESSAGE_TYPE_ASCII)
		return NULL;
	return a->message.ascii;
}

/*
 * An NVTX range call, on the calling thread: one marker record through the
 * same lock-free ring as the launch callbacks. Wide-character messages and
 * registered strings carry no ASCII text here: the range keeps an empty
 * name (it still nests and times). A full ring drops and counts.
 */
static void nvtx_cb(CUpti_CallbackId cbid, const void *data)
{
	const CUpti_NvtxData *nd = data;
	const void *p = nd ? nd->functionParams : NULL;
	union shim_ring_ev u;
	struct gpu_marker_event *mk = &u.mk;
	const char *msg = NULL;

	if (!p)
		return;
	memset(mk, 0, sizeof(*mk));
	switch (cbid) {
	case CUPTI_CBID_NVTX_nvtxRangePushA:
		mk->kind = MARKER_PUSH;
		msg = ((const nvtxRangePushA_params *)p)->message;
		break;
	case CUPTI_CBID_NVTX_nvtxRangePushEx:
		mk->kind = MARKER_PUSH;
		msg = attr_message(((const nvtxRangePushEx_params *)p)->eventAttrib);
		break;
	case CUPTI_CBID_NVTX_nvtxDomainRangePushEx:
		mk->kind = MARKER_PUSH;
		msg = attr_message(((const nvtxDomainRangePushEx_params *)p)->core.eventAttrib);
		break;
	case CUPTI_CBID_NVTX_nvtxRangePop:
	case CUPTI_CBID_NVTX_nvtxDomainRangePop:
		mk->kind = MARKER_POP;
		break;
	case CUPTI_CBID_NVTX_nvtxRangeStartA:
	case CUPTI_CBID_NVTX_nvtxRangeStartEx:
	case CUPTI_CBID_NVTX_nvtxDomainRangeStartEx:
		mk->kind = MARKER_START;
		if (cbid == CUPTI_CBID_NVTX_nvtxRangeStartA)
			msg = ((const nvtxRangeStartA_params *)p)->message;
		else if (cbid == CUPTI_CBID_NVTX_nvtxRangeStartEx)
			msg = attr_message(((const nvtxRangeStartEx_params *)p)->eventAttrib);
		else
			msg = attr_message(
			    ((const nvtxDomainRangeStartEx_params *)p)->core.eventAttrib);
		if (!nd->functionReturnValue)
			return; /* no id: its end could not be told apart */
		mk->range_id = *(const nvtxRangeId_t *)nd->functionReturnValue;
		break;
	case CUPTI_CBID_NVTX_nvtxRangeEnd:
		mk->kind = MARKER_END;
		mk->range_id = ((const nvtxRangeEnd_params *)p)->id;
		break;
	case CUPTI_CBID_NVTX_nvtxDomainRangeEnd:
		mk->kind = MARKER_END;
		mk->range_id = ((const nvtxDomainRangeEnd_params *)p)->core.id;
		break;
	default:
		return;
	}
	if (msg)
		strncpy(mk->name, msg, sizeof(mk->name) - 1);
	if (!t_tid)
		t_tid = (uint32_t)syscall(SYS_gettid);
	shim_hdr(&mk->hdr, EV_GPU_MARKER, sizeof(*mk), t_tid, shim_mono_ns());
	if (shim_ring_push(&u))
		atomic_fetch_add_explicit(&g_shim.dropped, 1, memory_order_relaxed);
}

/* runs on the CUDA thread that called the API: lock-free, no syscall */
static void CUPTIAPI launch_cb(void *userdata, CUpti_CallbackDomain dom, CUpti_CallbackId cbid,
			       const void *data)
{
	const CUpti_CallbackData *cb = data;
	union shim_ring_ev u;
	struct gpu_launch_cb_event *ev = &u.cb;
	uint64_t now;

	(void)userdata;
	if (!cb || atomic_load_explicit(&g_shim.forked, memory_order_relaxed))
		return;
	if (dom == CUPTI_CB_DOMAIN_NVTX) {
		nvtx_cb(cbid, data);
		return;
	}
	if (dom == CUPTI_CB_DOMAIN_RUNTIME_API) {
		if (cb->callbackSite == CUPTI_API_ENTER) {
			t_rt_corr = cb->correlationId;
			return;
		}
		t_rt_corr = 0;
	} else if (dom == CUPTI_CB_DOMAIN_DRIVER_API) {
		if (cb->callbackSite != CUPTI_API_EXIT)
			return;
		if (t_rt_corr && cb->correlationId == t_rt_corr)
			return; /* the enclosing runtime call reports it */
	} else {
		return;
	}
	if (cb->correlationId == t_last_corr)
		return;
	t_last_corr = cb->correlationId;

	now = shim_mono_ns();
	if (atomic_load_explicit(&g_shim.capture, memory_order_relaxed) != MODE_DEEP &&
	    !cbid_is_graph(dom, cbid) && !take_token(now) && !nccl_kernel(cb->symbolName)) {
		launch_mark(cb->correlationId, true);
		return; /* sampled out by policy, not a loss */
	}
	launch_mark(cb->correlationId, false); /* an older id of this bit's */

	if (!t_tid)
		t_tid = (uint32_t)syscall(SYS_gettid);
	memset(ev, 0, sizeof(*ev));
	shim_hdr(&ev->hdr, EV_GPU_LAUNCH_CB, sizeof(*ev), t_tid, now);
	ev->correlation_id = cb->correlationId;
	ev->cbid = cbid;
	ev->domain = dom;
	if (shim_ring_push(&u)) {
		atomic_fetch_add_explicit(&g_shim.dropped, 1, memory_order_relaxed);
		launch_mark(cb->correlationId, true); /* lost: none will come either */
	}
}

/* --------------------------------------------------------------- setup --- */

static CUptiResult kinds_apply(uint32_t want)
{
	static const CUpti_ActivityKind kinds[] = {
	    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
	    CUPTI_ACTIVITY_KIND_MEMCPY,
	    CUPTI_ACTIVITY_KIND_MEMSET,
	    CUPTI_ACTIVITY_KIND_DEVICE,
	};
	uint32_t on = atomic_load(&g_shim.kinds_on);
	CUptiResult r, ret = CUPTI_SUCCESS;
	size_t i;

	for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		uint32_t bit = 1u << kinds[i];

		if ((want & bit) && !(on & bit)) {
			r = cuptiActivityEnable(kinds[i]);
			if (r == CUPTI_SUCCESS)
				on |= bit;
			else if (kinds[i] == CUPTI_ACTIVITY_KIND_DEVICE)
				shim_log("cuptiActivityEnable(DEVICE): %s: no device UUIDs",
					 res_str(r));
			else
				ret = r;
		} else if (!(want & bit) && (on & bit)) {
			r = cuptiActivityDisable(kinds[i]);
			on &= ~bit;
			if (r != CUPTI_SUCCESS)
				ret = r;
		}
	}
	atomic_store(&g_shim.kinds_on, on);
	return ret;
}

void shim_cupti_teardown(void)
{
	kinds_apply(0);
	if (g_shim.sub) {
		cuptiUnsubscribe(g_shim.sub);
		g_shim.sub = NULL;
	}
}

/*
 * Order matters: the timestamp callback goes in before any activity kind is
 * enabled, or CUPTI stamps some records with its own clock. Returns 0,
 * -ENODEV when CUPTI says there is no GPU, -EIO on other failures.
 */
int shim_cupti_setup(bool ts_callback)
{
	CUptiResult r;
	size_t i;
	int err;

	r = cuptiActivityRegisterCallbacks(buf_requested, buf_completed);
	if (r != CUPTI_SUCCESS) {
		shim_log("cuptiActivityRegisterCallbacks: %s", res_str(r));
		err = res_no_gpu(r) ? -ENODEV : -EIO;
		goto cleanup;
	}
	if (ts_callback) {
		r = cuptiActivityRegisterTimestampCallback(mono_ts_callback);
		if (res_no_gpu(r)) {
			shim_log("cuptiActivityRegisterTimestampCallback: %s: no GPU", res_str(r));
			err = -ENODEV;
			goto cleanup;
		}
		if (r != CUPTI_SUCCESS) {
			shim_log("cuptiActivityRegisterTimestampCallback: %s: using offset",
				 res_str(r));
			ts_callback = false;
		}
	}
	if (ts_callback) {
		atomic_store(&g_shim.clock_mode, SHIM_CLOCK_MONOTONIC_CB);
	} else {
		atomic_store(&g_shim.clock_offset_ns, shim_measure_offset());
		atomic_store(&g_shim.clock_mode, SHIM_CLOCK_OFFSET);
	}

	r = cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
	if (res_no_gpu(r)) {
		shim_log("cuptiSetThreadIdType: %s: no GPU", res_str(r));
		err = -ENODEV;
		goto cleanup;
	}

	r = cuptiSubscribe(&g_shim.sub, launch_cb, NULL);
	if (res_no_gpu(r)) {
		shim_log("cuptiSubscribe: %s: no GPU", res_str(r));
		g_shim.sub = NULL;
		err = -ENODEV;
		goto cleanup;
	}
	if (r != CUPTI_SUCCESS) {
		/* e.g. another tool subscribed: GPU timing still works */
		shim_log("cuptiSubscribe: %s: no launch callbacks", res_str(r));
		g_shim.sub = NULL;
	}
	for (i = 0; g_shim.sub && i < sizeof(launch_cbids) / sizeof(launch_cbids[0]); i++) {
		r = cuptiEnableCallback(1, g_shim.sub, launch_cbids[i].domain,
					launch_cbids[i].cbid);
		if (r != CUPTI_SUCCESS)
			shim_log("cuptiEnableCallback(%d, %u): %s", launch_cbids[i].domain,
				 launch_cbids[i].cbid, res_str(r));
	}
	/*
	 * NVTX ranges: step markers. They arrive once the process's NVTX loads
	 * CUPTI as its injection (NVTX_INJECTION64_PATH=<libcupti.so>, set by
	 * the user with CUDA_INJECTION64_PATH: setting it from here would race
	 * with the process's own getenv calls).
	 */
	for (i = 0; g_shim.sub && i < sizeof(nvtx_cbids) / sizeof(nvtx_cbids[0]); i++) {
		r = cuptiEnableCallback(1, g_shim.sub, CUPTI_CB_DOMAIN_NVTX, nvtx_cbids[i]);
		if (r != CUPTI_SUCCESS)
			shim_log("cuptiEnableCallback(NVTX, %u): %s", nvtx_cbids[i], res_str(r));
	}

	r = kinds_apply(atomic_load(&g_shim.capture) == MODE_DEEP ? KINDS_DEEP : KINDS_ALWAYS);
	if (r != CUPTI_SUCCESS) {
		shim_log("cuptiActivityEnable: %s", res_str(r));
		err = res_no_gpu(r) ? -ENODEV : -EIO;
		goto cleanup;
	}
	return 0;

cleanup:
	shim_cupti_teardown();
	atomic_store(&g_shim.clock_mode, SHIM_CLOCK_NONE);
	return err;
}

/* shim thread: a mode datagram from the agent */
int shim_cupti_set_capture(uint32_t mode)
{
	CUptiResult r;

	if (mode != MODE_SENTINEL && mode != MODE_DEEP)
		return -EINVAL;
	atomic_store(&g_shim.capture, mode);
	if (atomic_load(&g_shim.inert))
		return 0;
	r = kinds_apply(mode == MODE_DEEP ? KINDS_DEEP : KINDS_ALWAYS);
	return r == CUPTI_SUCCESS ? 0 : -EIO;
}

/*
 * shim thread: zero kernel timestamps with our timestamp callback. CUPTI
 * cannot drop a registered timestamp callback (NULL is refused), so detach
 * and attach again without it: stop the kinds, flush everything back (those
 * records have no time and are counted), cuptiFinalize(), take back buffers
 * CUPTI still held, and set up again on CUPTI's clock plus an offset. The
 * CUPTI docs prefer cuptiFinalize() from an API-exit callback; with the kinds
 * disabled and flushed first the shim thread is as safe and keeps the cost
 * off the CUDA threads.
 */
int shim_cupti_fallback(void)
{
	int err;

	shim_log("zero kernel timestamps with the timestamp callback: falling back to offset");
	kinds_apply(0);
	cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	shim_cupti_process_ready();
	if (g_shim.sub) {
		cuptiUnsubscribe(g_shim.sub);
		g_shim.sub = NULL;
	}
	cuptiFinalize();
	/* CUPTI is detached: every slot not queued for us is ours again */
	atomic_store(&g_shim.buf_free, (1u << g_shim.nbufs) - 1);
	atomic_store(&g_shim.want_fallback, 0);
	err = shim_cupti_setup(false);
	if (err)
		atomic_store(&g_shim.inert, 1);
	return err;
}

/* ---------------------------------------------------------------- entry --- */

static unsigned long env_ulong(const char *name, unsigned long def, unsigned long min,
			       unsigned long max)
{
	const char *s = getenv(name);
	unsigned long v;
	char *end;

	if (!s || !*s)
		return def;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end)
		return def;
	return v < min ? min : v > max ? max : v;
}

static void on_fork_child(void)
{
	/* the shim thread does not exist in the child: stay quiet there */
	atomic_store(&g_shim.forked, 1);
}

static void read_settings(void)
{
	const char *s;

	s = getenv("INFERTRACE_SHIM_LOG");
	g_shim.log_stderr = s && !strcmp(s, "stderr");
	s = getenv(SHIM_ENV_SOCKET);
	if (!s || !*s || strlen(s) >= sizeof(g_shim.sock_path))
		s = SHIM_SOCK_DEFAULT;
	strcpy(g_shim.sock_path, s);
	g_shim.buf_size = env_ulong("INFERTRACE_SHIM_BUF_KIB", 2048, 1024, 8192) * 1024;
	g_shim.nbufs = env_ulong("INFERTRACE_SHIM_BUFS", 4, 2, SHIM_MAX_BUFS);
	g_shim.status_ms = env_ulong("INFERTRACE_SHIM_STATUS_MS", 1000, 10, 3600000);
	g_shim.flush_ms = env_ulong("INFERTRACE_SHIM_FLUSH_MS", 1000, 10, 3600000);
	g_shim.retry_ms = env_ulong("INFERTRACE_SHIM_RETRY_MS", 1000, 10, 3600000);
	g_shim.tick_ms = env_ulong("INFERTRACE_SHIM_TICK_MS", 10, 1, 1000);
	g_shim.send_wait_ms = env_ulong("INFERTRACE_SHIM_SEND_WAIT_MS", 100, 0, 10000);
	g_shim.launch_rate = env_ulong("INFERTRACE_SHIM_LAUNCH_RATE", 200, 1, 10000000);
	g_shim.sndbuf = (int)env_ulong("INFERTRACE_SHIM_SNDBUF", 1 << 20, SHIM_MSG_MAX, 64 << 20);
	s = getenv("INFERTRACE_SHIM_MODE");
	atomic_store(&g_shim.capture, s && !strcmp(s, "deep") ? MODE_DEEP : MODE_SENTINEL);
}

static void shim_at_exit(void);

/*
 * Called by the CUDA driver (CUDA_INJECTION64_PATH) during initialisation.
 * Always reports success: a tracing problem must never fail the workload.
 */
__attribute__((visibility("default"))) int InitializeInjection(void)
{
	int expect = 0, err;

	if (!atomic_compare_exchange_strong(&g_shim.started, &expect, 1))
		return 1;
	read_settings();
	g_shim.pid = (uint32_t)getpid();
	atomic_store(&g_shim.buf_free, (1u << g_shim.nbufs) - 1);
	atomic_store(&g_shim.clock_mode, SHIM_CLOCK_NONE);
	for (uint64_t i = 0; i < SHIM_RING_CAP; i++)
		atomic_store(&g_shim.ring[i].seq, i);
	g_shim.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_atfork(NULL, NULL, on_fork_child);
	atexit(shim_at_exit);

	err = shim_cupti_setup(true);
	if (err) {
		shim_log("inert: %s", err == -ENODEV ? "no GPU" : "CUPTI setup failed");
		atomic_store(&g_shim.inert, 1);
	}
	err = shim_chan_start();
	if (err && !atomic_load(&g_shim.inert)) {
		/* nobody would recycle buffers: leave CUPTI as we found it */
		shim_log("shim thread: %s: inert", strerror(-err));
		shim_cupti_teardown();
		atomic_store(&g_shim.inert, 1);
		atomic_store(&g_shim.clock_mode, SHIM_CLOCK_NONE);
	}
	return 1;
}

/*
 * Let the shim thread flush and say goodbye, bounded in time so a wedged
 * CUPTI never holds up the process's exit; then free what CUPTI gave back.
 * Once only: from exit()'s handler or from the destructor, whichever first.
 */
static void shim_shutdown(void)
{
	static atomic_int done;
	unsigned int i;

	if (!atomic_load(&g_shim.started) || atomic_load(&g_shim.forked) ||
	    atomic_exchange(&done, 1))
		return;
	shim_chan_stop();
	if (g_shim.thr_started)
		return; /* the thread is stuck somewhere: leak rather than free under it */
	if (atomic_load(&g_shim.kinds_on) || g_shim.sub)
		shim_cupti_teardown();
	/* only slots that are back in the pool; CUPTI may still own others */
	for (i = 0; i < g_shim.nbufs; i++) {
		if (atomic_load(&g_shim.buf_free) & (1u << i)) {
			free(g_shim.bufs[i]);
			g_shim.bufs[i] = NULL;
		}
	}
	if (g_shim.efd >= 0)
		close(g_shim.efd);
	g_shim.efd = -1;
}

/*
 * exit(): handlers registered with atexit() run last-registered first, all
 * before any library destructor. Ours is registered inside cuInit(), so it
 * runs while CUDA and CUPTI are still whole: the CUDA runtime's own exit
 * handler (which destroys the contexts) and libcupti's and libcuda's
 * destructors come after it.
 */
static void shim_at_exit(void)
{
	shim_shutdown();
}

/* dlclose() without exit(), or a process that never reached atexit() */
__attribute__((destructor)) static void shim_fini(void)
{
	shim_shutdown();
}
