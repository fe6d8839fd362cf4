// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * fake_cupti.c - a test double of libcupti.so.13 for the shim's tests.
 * See fake_cupti.h. Built against the real CUDA 13 headers so that every
 * prototype, enum value and record layout is the one CUPTI uses; the
 * _Static_asserts below pin the values the tests rely on.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_cupti.h"

_Static_assert(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL == 10, "real cupti_activity.h");
_Static_assert(CUPTI_ACTIVITY_KIND_KERNEL == 3, "real cupti_activity.h");
_Static_assert(CUPTI_ACTIVITY_KIND_MEMCPY == 1, "real cupti_activity.h");
_Static_assert(CUPTI_ACTIVITY_KIND_MEMSET == 2, "real cupti_activity.h");
_Static_assert(CUPTI_CB_DOMAIN_DRIVER_API == 1 && CUPTI_CB_DOMAIN_RUNTIME_API == 2,
	       "real cupti_callbacks.h");

#define MAX_LOG 512
#define MAX_HELD 64
#define MAX_KINDS 64
#define MAX_CBS 256
#define MAX_SEEN 64

static pthread_mutex_t lock;
static pthread_once_t lock_once = PTHREAD_ONCE_INIT;

struct held_buf {
	uint8_t *buf;
	size_t size;
	size_t used;
};

static struct {
	bool no_gpu;
	bool zero_ts;
	bool flush_returns;
	const char *log[MAX_LOG];
	int nlog;
	CUpti_BuffersCallbackRequestFunc req;
	CUpti_BuffersCallbackCompleteFunc done;
	CUpti_TimestampCallbackFunc ts;
	bool subscribed;
	CUpti_CallbackFunc cb;
	void *cb_user;
	bool kind_on[MAX_KINDS];
	bool kind_ever[MAX_KINDS];
	uint32_t cbs[MAX_CBS][2];
	size_t ncbs;
	struct held_buf held[MAX_HELD]; /* held[nheld - 1] is being filled */
	size_t nheld;
	uint8_t *seen[MAX_SEEN];
	size_t nseen;
	uint64_t dropped_pending;
	uint64_t declined;
	bool cuda_gone; /* fake_cupti_cuda_exit() */
} f;

static void lock_init(void)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&lock, &a);
	pthread_mutexattr_destroy(&a);
}

static void lk(void)
{
	pthread_once(&lock_once, lock_init);
	pthread_mutex_lock(&lock);
}

static void ulk(void)
{
	pthread_mutex_unlock(&lock);
}

/* expr of type, read under the lock */
#define LOCKED(type, expr)                                                                         \
	({                                                                                         \
		type v_;                                                                           \
		lk();                                                                              \
		v_ = (expr);                                                                       \
		ulk();                                                                             \
		v_;                                                                                \
	})

static void logcall(const char *fn)
{
	if (f.nlog < MAX_LOG)
		f.log[f.nlog++] = fn;
}

/* after the CUDA runtime's exit handler: what the real libcupti did (a crash) */
static void need_driver(const char *fn)
{
	if (!f.cuda_gone)
		return;
	fprintf(stderr, "fake_cupti: %s after the CUDA runtime's exit handler\n", fn);
	abort();
}

/*
 * How each logged CUPTI entry point starts: the lock taken (the caller drops
 * it with ulk()), the call logged as fn (fake_cupti_first_call(),
 * fake_cupti_call_count()) and, where the real call needs the driver
 * (driver), need_driver(fn).
 */
static void enter(const char *fn, bool driver)
{
	lk();
	logcall(fn);
	if (driver)
		need_driver(fn);
}

/* ---------------------------------------------------------- control API --- */

void fake_cupti_cuda_exit(void)
{
	lk();
	f.cuda_gone = true;
	ulk();
}

void fake_cupti_reset(void)
{
	lk();
	memset(&f, 0, sizeof(f));
	f.flush_returns = true;
	ulk();
}

void fake_cupti_set_no_gpu(bool on)
{
	lk();
	f.no_gpu = on;
	ulk();
}

void fake_cupti_set_zero_kernel_ts(bool on)
{
	lk();
	f.zero_ts = on;
	ulk();
}

void fake_cupti_set_flush_returns(bool on)
{
	lk();
	f.flush_returns = on;
	ulk();
}

int fake_cupti_first_call(const char *fn)
{
	int i, ret = -1;

	lk();
	for (i = 0; i < f.nlog; i++) {
		if (!strcmp(f.log[i], fn)) {
			ret = i;
			break;
		}
	}
	ulk();
	return ret;
}

int fake_cupti_call_count(const char *fn)
{
	int i, n = 0;

	lk();
	for (i = 0; i < f.nlog; i++)
		n += !strcmp(f.log[i], fn);
	ulk();
	return n;
}

bool fake_cupti_kind_enabled(CUpti_ActivityKind kind)
{
	return LOCKED(bool, (unsigned)kind < MAX_KINDS && f.kind_on[kind]);
}

bool fake_cupti_kind_ever_enabled(CUpti_ActivityKind kind)
{
	return LOCKED(bool, (unsigned)kind < MAX_KINDS && f.kind_ever[kind]);
}

static ssize_t cb_index(uint32_t dom, uint32_t cbid)
{
	size_t i;

	for (i = 0; i < f.ncbs; i++) {
		if (f.cbs[i][0] == dom && f.cbs[i][1] == cbid)
			return (ssize_t)i;
	}
	return -1;
}

bool fake_cupti_callback_enabled(CUpti_CallbackDomain dom, CUpti_CallbackId cbid)
{
	return LOCKED(bool, f.subscribed &&cb_index(dom, cbid) >= 0);
}

size_t fake_cupti_enabled_callbacks(uint32_t (*pairs)[2], size_t max)
{
	size_t i, n;

	lk();
	n = f.subscribed ? f.ncbs : 0;
	for (i = 0; i < n && i < max; i++) {
		pairs[i][0] = f.cbs[i][0];
		pairs[i][1] = f.cbs[i][1];
	}
	ulk();
	return n;
}

bool fake_cupti_has_ts_callback(void)
{
	return LOCKED(bool, f.ts != NULL);
}

bool fake_cupti_subscribed(void)
{
	return LOCKED(bool, f.subscribed);
}

/* the subscriber's callback if (dom, cbid) is enabled, else NULL */
static CUpti_CallbackFunc enabled_cb(CUpti_CallbackDomain dom, CUpti_CallbackId cbid, void **user)
{
	CUpti_CallbackFunc cb;

	lk();
	cb = f.subscribed && cb_index(dom, cbid) >= 0 ? f.cb : NULL;
	*user = f.cb_user;
	ulk();
	return cb;
}

/* deliver one callback if enabled, with no lock held (CUPTI calls inline) */
static int deliver(CUpti_CallbackDomain dom, CUpti_CallbackId cbid, CUpti_ApiCallbackSite site,
		   uint32_t corr, const char *symbol)
{
	CUpti_CallbackData d;
	void *user;
	CUpti_CallbackFunc cb = enabled_cb(dom, cbid, &user);

	if (!cb)
		return 0;
	memset(&d, 0, sizeof(d));
	d.callbackSite = site;
	d.functionName = "fake";
	d.symbolName = symbol;
	d.correlationId = corr;
	cb(user, dom, cbid, &d);
	return 1;
}

int fake_cupti_nvtx(CUpti_CallbackId cbid, const void *params, const void *ret)
{
	CUpti_NvtxData d;
	void *user;
	CUpti_CallbackFunc cb = enabled_cb(CUPTI_CB_DOMAIN_NVTX, cbid, &user);

	if (!cb)
		return 0;
	memset(&d, 0, sizeof(d));
	d.functionName = "nvtx";
	d.functionParams = params;
	d.functionReturnValue = ret;
	cb(user, CUPTI_CB_DOMAIN_NVTX, cbid, &d);
	return 1;
}

int fake_cupti_api_call(CUpti_CallbackDomain dom, CUpti_CallbackId cbid, uint32_t corr)
{
	return fake_cupti_launch(dom, cbid, corr, NULL);
}

int fake_cupti_launch(CUpti_CallbackDomain dom, CUpti_CallbackId cbid, uint32_t corr,
		      const char *symbol)
{
	return deliver(dom, cbid, CUPTI_API_ENTER, corr, symbol) +
	       deliver(dom, cbid, CUPTI_API_EXIT, corr, symbol);
}

int fake_cupti_api_nested(CUpti_CallbackId rt_cbid, CUpti_CallbackId drv_cbid, uint32_t corr)
{
	int n = 0;

	n += deliver(CUPTI_CB_DOMAIN_RUNTIME_API, rt_cbid, CUPTI_API_ENTER, corr, NULL);
	n += deliver(CUPTI_CB_DOMAIN_DRIVER_API, drv_cbid, CUPTI_API_ENTER, corr, NULL);
	n += deliver(CUPTI_CB_DOMAIN_DRIVER_API, drv_cbid, CUPTI_API_EXIT, corr, NULL);
	n += deliver(CUPTI_CB_DOMAIN_RUNTIME_API, rt_cbid, CUPTI_API_EXIT, corr, NULL);
	return n;
}

/* ------------------------------------------------------------- buffers --- */

static size_t rec_size(CUpti_ActivityKind kind)
{
	switch (kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		return sizeof(CUpti_ActivityKernel10);
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		return sizeof(CUpti_ActivityMemcpy6);
	case CUPTI_ACTIVITY_KIND_MEMSET:
		return sizeof(CUpti_ActivityMemset4);
	case CUPTI_ACTIVITY_KIND_DEVICE:
		return sizeof(CUpti_ActivityDevice5);
	default:
		return 0;
	}
}

static size_t align8(size_t n)
{
	return (n + ACTIVITY_RECORD_ALIGNMENT - 1) & ~(size_t)(ACTIVITY_RECORD_ALIGNMENT - 1);
}

/* ask the shim for a buffer, as CUPTI does when it needs room */
static struct held_buf *new_buffer(void)
{
	size_t size = 0, maxrec = 0, i;
	uint8_t *buf = NULL;

	if (!f.req || f.nheld == MAX_HELD)
		return NULL;
	f.req(&buf, &size, &maxrec);
	if (!buf || !size) {
		f.declined++;
		return NULL;
	}
	for (i = 0; i < f.nseen && f.seen[i] != buf; i++)
		;
	if (i == f.nseen && f.nseen < MAX_SEEN)
		f.seen[f.nseen++] = buf;
	f.held[f.nheld] = (struct held_buf){.buf = buf, .size = size};
	return &f.held[f.nheld++];
}

int fake_cupti_add_record(const CUpti_Activity *rec)
{
	size_t sz = rec_size(rec->kind), need = align8(sz);
	struct held_buf *h = NULL;
	uint8_t *dst;
	int ret = 0;

	lk();
	if (!sz || (unsigned)rec->kind >= MAX_KINDS || !f.kind_on[rec->kind]) {
		ret = -EINVAL; /* CUPTI only produces kinds that are enabled */
		goto out;
	}
	if (f.nheld && f.held[f.nheld - 1].used + need <= f.held[f.nheld - 1].size)
		h = &f.held[f.nheld - 1];
	else
		h = new_buffer();
	if (!h) {
		f.dropped_pending++;
		ret = -ENOBUFS;
		goto out;
	}
	dst = h->buf + h->used;
	memcpy(dst, rec, sz);
	memset(dst + sz, 0, need - sz);
	if (f.ts)
		f.ts(); /* CUPTI converts GPU time with the client's clock */
	if (f.zero_ts && f.ts &&
	    (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
	     rec->kind == CUPTI_ACTIVITY_KIND_KERNEL)) {
		CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)dst;

		k->start = 0;
		k->end = 0;
	}
	h->used += need;
out:
	ulk();
	return ret;
}

int fake_cupti_add_kernel(uint32_t corr, uint64_t start, uint64_t dur, uint32_t stream,
			  const char *name)
{
	CUpti_ActivityKernel10 k;

	FAKE_CUPTI_ACTIVITY(k, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 0, 1, start, dur, stream,
			    corr);
	FAKE_CUPTI_DIMS(k, 64, 1, 1, 128, 1, 1);
	k.name = name;
	return fake_cupti_add_record((const CUpti_Activity *)&k);
}

static void complete_all(void)
{
	size_t i, n;
	struct held_buf hb[MAX_HELD];

	n = f.nheld;
	memcpy(hb, f.held, n * sizeof(hb[0]));
	f.nheld = 0;
	for (i = 0; i < n; i++) {
		if (f.done)
			f.done(NULL, 0, hb[i].buf, hb[i].size, hb[i].used);
	}
}

void fake_cupti_complete(void)
{
	lk();
	complete_all();
	ulk();
}

size_t fake_cupti_buffers_held(void)
{
	return LOCKED(size_t, f.nheld);
}

size_t fake_cupti_distinct_buffers(void)
{
	return LOCKED(size_t, f.nseen);
}

uint64_t fake_cupti_declined(void)
{
	return LOCKED(uint64_t, f.declined);
}

/* ----------------------------------------------------------- CUPTI API --- */

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str)
{
	if (!str)
		return CUPTI_ERROR_INVALID_PARAMETER;
	switch (result) {
	case CUPTI_SUCCESS:
		*str = "CUPTI_SUCCESS";
		break;
	case CUPTI_ERROR_UNKNOWN:
		*str = "CUPTI_ERROR_UNKNOWN";
		break;
	default:
		*str = "CUPTI_ERROR_(fake)";
		break;
	}
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *timestamp)
{
	struct timespec ts;

	if (!timestamp)
		return CUPTI_ERROR_INVALID_PARAMETER;
	enter("cuptiGetTimestamp", false);
	ulk();
	clock_gettime(CLOCK_REALTIME, &ts);
	*timestamp = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
						    CUpti_BuffersCallbackCompleteFunc done)
{
	if (!req || !done)
		return CUPTI_ERROR_INVALID_PARAMETER;
	enter("cuptiActivityRegisterCallbacks", false);
	f.req = req;
	f.done = done;
	ulk();
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc fn)
{
	CUptiResult r = CUPTI_SUCCESS;

	if (!fn)
		return CUPTI_ERROR_INVALID_PARAMETER;
	enter("cuptiActivityRegisterTimestampCallback", false);
	if (f.no_gpu)
		r = CUPTI_ERROR_UNKNOWN;
	else
		f.ts = fn;
	ulk();
	return r;
}

CUptiResult CUPTIAPI cuptiSetThreadIdType(CUpti_ActivityThreadIdType type)
{
	CUptiResult r;

	(void)type;
	enter(type == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM ? "cuptiSetThreadIdType(SYSTEM)"
							   : "cuptiSetThreadIdType(other)",
	      false);
	r = f.no_gpu ? CUPTI_ERROR_UNKNOWN : CUPTI_SUCCESS;
	ulk();
	return r;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb,
				    void *userdata)
{
	CUptiResult r = CUPTI_SUCCESS;

	if (!sub)
		return CUPTI_ERROR_INVALID_PARAMETER;
	enter("cuptiSubscribe", false);
	if (f.no_gpu) {
		r = CUPTI_ERROR_UNKNOWN;
	} else if (f.subscribed) {
		r = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	} else {
		f.subscribed = true;
		f.cb = cb;
		f.cb_user = userdata;
		f.ncbs = 0;
		*sub = (CUpti_SubscriberHandle)&f;
	}
	ulk();
	return r;
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle sub)
{
	CUptiResult r = CUPTI_SUCCESS;

	enter("cuptiUnsubscribe", true);
	if (!f.subscribed || sub != (CUpti_SubscriberHandle)&f)
		r = CUPTI_ERROR_INVALID_PARAMETER;
	f.subscribed = false;
	f.cb = NULL;
	f.ncbs = 0;
	ulk();
	return r;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle sub,
					 CUpti_CallbackDomain dom, CUpti_CallbackId cbid)
{
	CUptiResult r = CUPTI_SUCCESS;
	ssize_t i;

	enter("cuptiEnableCallback", false);
	if (!f.subscribed || sub != (CUpti_SubscriberHandle)&f) {
		r = CUPTI_ERROR_INVALID_PARAMETER;
		goto out;
	}
	i = cb_index(dom, cbid);
	if (enable && i < 0 && f.ncbs < MAX_CBS) {
		f.cbs[f.ncbs][0] = dom;
		f.cbs[f.ncbs][1] = cbid;
		f.ncbs++;
	} else if (!enable && i >= 0) {
		f.cbs[i][0] = f.cbs[f.ncbs - 1][0];
		f.cbs[i][1] = f.cbs[f.ncbs - 1][1];
		f.ncbs--;
	}
out:
	ulk();
	return r;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind)
{
	CUptiResult r = CUPTI_SUCCESS;

	enter("cuptiActivityEnable", true);
	if (f.no_gpu)
		r = CUPTI_ERROR_UNKNOWN;
	else if ((unsigned)kind >= MAX_KINDS || !rec_size(kind))
		r = CUPTI_ERROR_INVALID_KIND; /* the double only knows the shim's kinds */
	else
		f.kind_on[kind] = f.kind_ever[kind] = true;
	ulk();
	return r;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind)
{
	enter("cuptiActivityDisable", true);
	if ((unsigned)kind < MAX_KINDS)
		f.kind_on[kind] = false;
	ulk();
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid,
						CUpti_Activity **record)
{
	uint8_t *p;
	size_t sz;

	if (!buffer || !record)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (!*record) {
		p = buffer;
	} else {
		sz = rec_size((*record)->kind);
		if (!sz)
			return CUPTI_ERROR_INVALID_KIND;
		p = (uint8_t *)*record + align8(sz);
	}
	if (p >= buffer + valid)
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	sz = rec_size(((CUpti_Activity *)p)->kind);
	if (!sz || p + sz > buffer + valid)
		return CUPTI_ERROR_INVALID_KIND;
	*record = (CUpti_Activity *)p;
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag)
{
	enter(flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED ? "cuptiActivityFlushAll(forced)"
						      : "cuptiActivityFlushAll",
	      true);
	if (f.flush_returns || (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED))
		complete_all();
	ulk();
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream,
						       size_t *dropped)
{
	(void)ctx;
	(void)stream;
	if (!dropped)
		return CUPTI_ERROR_INVALID_PARAMETER;
	lk();
	*dropped = f.dropped_pending;
	f.dropped_pending = 0;
	ulk();
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiFinalize(void)
{
	enter("cuptiFinalize", true);
	/* detached: CUPTI forgets every client setting and buffer */
	f.req = NULL;
	f.done = NULL;
	f.ts = NULL;
	f.subscribed = false;
	f.cb = NULL;
	f.ncbs = 0;
	memset(f.kind_on, 0, sizeof(f.kind_on));
	f.nheld = 0;
	ulk();
	return CUPTI_SUCCESS;
}
