// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_shim.c - libinfertrace_cupti.so end to end, without a GPU.
 *
 * The binary links the CUPTI double (build/tests/fakes/libcupti.so.13, same
 * soname as the real library, found through the rpath) and dlopens
 * build/libinfertrace_cupti.so for every test, calling InitializeInjection as
 * the CUDA driver does; dlclose runs the shim's destructor, so each test
 * starts from a fresh shim. Records travel through the real socket into the
 * real agent/sources/shim_rx.c. No environment is needed: the test sets the shim's
 * env variables itself (socket in a temporary directory, short intervals).
 *
 * Waiting is bounded by deadlines that only turn a hang into a failure;
 * nothing asserts how long anything took.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "fake_cupti.h"
#include "shim_rx.h"
#include "shim/proto.h"

/* the values the shim's cbid table relies on, from the real headers */
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_v3020 == 13, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 == 211, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_ptsz_v7000 == 213, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000 == 214, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000 == 269, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000 == 270, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernelMultiDevice_v9000 == 272,
	       "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000 == 311, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000 == 312, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060 == 430, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060 == 431, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000 == 505, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000 == 506, "cbid");
_Static_assert(CUPTI_DRIVER_TRACE_CBID_cuLaunch == 115, "cbid");
_Static_assert(CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid == 116, "cbid");
_Static_assert(CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync == 117, "cbid");
_Static_assert(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel == 307, "cbid");
_Static_assert(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz == 442, "cbid");
_Static_assert(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel == 477, "cbid");
_Static_assert(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz == 478, "cbid");
_Static_assert(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice == 480, "cbid");
_Static_assert(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch == 514, "cbid");
_Static_assert(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz == 515, "cbid");
_Static_assert(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx == 652, "cbid");
_Static_assert(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz == 653, "cbid");
_Static_assert(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL == 10 && CUPTI_ACTIVITY_KIND_KERNEL == 3,
	       "kinds");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020 == 20, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020 == 41, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000 == 225, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020 == 51, "cbid");
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000 == 235, "cbid");

/* the exact set the shim must enable: {domain, cbid} */
static const uint32_t want_cbs[][2] = {
    {2, 13},
    {2, 211},
    {2, 213},
    {2, 214},
    {2, 269},
    {2, 270},
    {2, 272},
    {2, 311},
    {2, 312},
    {2, 430},
    {2, 431},
    {2, 505},
    {2, 506},
    {1, 115},
    {1, 116},
    {1, 117},
    {1, 307},
    {1, 442},
    {1, 477},
    {1, 478},
    {1, 480},
    {1, 514},
    {1, 515},
    {1, 652},
    {1, 653},
    /* async copies and memsets: their records' correlation ids (issue 3) */
    {2, 41},
    {2, 225},
    {2, 51},
    {2, 235},
    /* NVTX ranges (domain 5): step markers (issue 5) */
    {5, 8},
    {5, 10},
    {5, 11},
    {5, 4},
    {5, 6},
    {5, 7},
    {5, 33},
    {5, 34},
    {5, 31},
    {5, 32},
};
#define N_WANT_CBS (sizeof(want_cbs) / sizeof(want_cbs[0]))

#define DEADLINE_MS 10000

/* ------------------------------------------------------------ harness --- */

struct rec {
	size_t len;
	uint64_t msg; /* on_msg calls before it was delivered */
	union {
		struct event_hdr h;
		struct gpu_activity_event act;
		struct gpu_launch_cb_event cb;
		struct shim_status_event st;
		struct gpu_device_event dev;
		uint8_t raw[SHIM_MSG_MAX];
	};
};

struct t {
	char dir[64];
	char path[128];
	void *so;
	struct shim_rx *rx;
	struct rec *recs;
	size_t nrecs, cap;
	uint64_t data_seen; /* data records received so far */
	bool status_invariant_broken;
	uint64_t msgs; /* on_msg calls */
	bool reenter;  /* on_msg calls shim_rx_drain() and shim_rx_feed() */
	int drain_rc, feed_rc;
};

static void on_msg(void *ctx)
{
	struct t *t = ctx;

	t->msgs++;
	if (t->reenter) {
		uint8_t junk[64] = {0};

		t->drain_rc = shim_rx_drain(t->rx);
		t->feed_rc = shim_rx_feed(t->rx, 1, junk, sizeof(junk));
	}
}

static void on_record(void *ctx, const struct event_hdr *h, size_t len)
{
	struct t *t = ctx;
	struct rec *r;

	if (t->nrecs == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 256;
		t->recs = realloc(t->recs, t->cap * sizeof(*t->recs));
		assert_non_null(t->recs);
	}
	r = &t->recs[t->nrecs++];
	r->len = len;
	r->msg = t->msgs;
	memcpy(r->raw, h, len);
	if (h->type == EV_SHIM_STATUS) {
		/* ordered channel: everything counted as sent arrived before it */
		if (r->st.records_sent != t->data_seen)
			t->status_invariant_broken = true;
	} else {
		t->data_seen++;
	}
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int setup(void **state)
{
	struct t *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	strcpy(t->dir, "/tmp/infertrace-shim-XXXXXX");
	assert_non_null(mkdtemp(t->dir));
	snprintf(t->path, sizeof(t->path), "%s/run/shim.sock", t->dir);
	fake_cupti_reset();
	setenv(SHIM_ENV_SOCKET, t->path, 1);
	setenv("INFERTRACE_SHIM_STATUS_MS", "20", 1);
	setenv("INFERTRACE_SHIM_FLUSH_MS", "20", 1);
	setenv("INFERTRACE_SHIM_RETRY_MS", "10", 1);
	setenv("INFERTRACE_SHIM_TICK_MS", "2", 1);
	setenv("INFERTRACE_SHIM_BUF_KIB", "1024", 1);
	setenv("INFERTRACE_SHIM_BUFS", "4", 1);
	unsetenv("INFERTRACE_SHIM_MODE");
	unsetenv("INFERTRACE_SHIM_SNDBUF");
	unsetenv("INFERTRACE_SHIM_SEND_WAIT_MS");
	unsetenv("INFERTRACE_SHIM_LAUNCH_RATE");
	*state = t;
	return 0;
}

static void unload(struct t *t)
{
	if (!t->so)
		return;
	assert_int_equal(dlclose(t->so), 0);
	t->so = NULL;
	/* really gone: the next test gets a fresh shim */
	assert_null(dlopen(fake_cupti_shim_path(), RTLD_NOW | RTLD_NOLOAD));
}

static int teardown(void **state)
{
	struct t *t = *state;
	char cmd[160];

	unload(t);
	shim_rx_close(t->rx);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
	if (system(cmd) != 0)
		return -1;
	free(t->recs);
	free(t);
	return 0;
}

static void load(struct t *t)
{
	int (*init)(void);

	t->so = dlopen(fake_cupti_shim_path(), RTLD_NOW | RTLD_LOCAL);
	if (!t->so)
		fail_msg("dlopen %s: %s", fake_cupti_shim_path(), dlerror());
	init = (int (*)(void))dlsym(t->so, "InitializeInjection");
	assert_non_null(init);
	assert_int_equal(init(), 1);
}

static void rx_open(struct t *t)
{
	struct shim_rx_opts o = {
	    .sz = sizeof(o), .on_record = on_record, .ctx = t, .on_msg = on_msg};

	t->rx = shim_rx_open(t->path, &o);
	if (!t->rx)
		fail_msg("shim_rx_open %s: %s", t->path, strerror(errno));
}

static void pump(struct t *t, int ms)
{
	struct pollfd p = {.fd = shim_rx_fd(t->rx), .events = POLLIN};

	poll(&p, 1, ms);
	while (shim_rx_drain(t->rx) > 0)
		;
}

typedef bool (*pred_fn)(struct t *t, const void *arg);

/* drain until pred holds; false at the deadline */
static bool wait_for(struct t *t, pred_fn pred, const void *arg)
{
	uint64_t end = mono_ns() + DEADLINE_MS * 1000000ull;

	do {
		pump(t, 5);
		if (pred(t, arg))
			return true;
	} while (mono_ns() < end);
	return false;
}

static size_t count_type(struct t *t, uint16_t type)
{
	size_t i, n = 0;

	for (i = 0; i < t->nrecs; i++)
		n += t->recs[i].h.type == type;
	return n;
}

static const struct shim_status_event *last_status(struct t *t)
{
	size_t i;

	for (i = t->nrecs; i-- > 0;) {
		if (t->recs[i].h.type == EV_SHIM_STATUS)
			return &t->recs[i].st;
	}
	return NULL;
}

struct type_n {
	uint16_t type;
	size_t n;
};

static bool have_n(struct t *t, const void *arg)
{
	const struct type_n *w = arg;

	return count_type(t, w->type) >= w->n;
}

static void wait_n(struct t *t, uint16_t type, size_t n)
{
	struct type_n w = {type, n};

	if (!wait_for(t, have_n, &w))
		fail_msg("waited for %zu records of type %u, got %zu", n, type,
			 count_type(t, type));
}

static bool status_is(struct t *t, const void *arg)
{
	const struct shim_status_event *s = last_status(t), *w = arg;

	return s && s->clock_mode == w->clock_mode && s->capture == w->capture;
}

static void wait_status(struct t *t, uint32_t clock_mode, uint32_t capture)
{
	struct shim_status_event w = {.clock_mode = clock_mode, .capture = capture};

	if (!wait_for(t, status_is, &w))
		fail_msg("no status with clock %u capture %u", clock_mode, capture);
}

static CUpti_ActivityKernel10 mk_kernel(uint32_t corr, uint64_t start, const char *name)
{
	CUpti_ActivityKernel10 k;

	FAKE_CUPTI_ACTIVITY(k, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 1, 2, start, 1000, 7, corr);
	FAKE_CUPTI_DIMS(k, 128, 2, 1, 256, 1, 1);
	k.graphId = 9;
	k.graphNodeId = 0x100000002ull;
	k.name = name;
	return k;
}

/* the agent's end, then the shim, connected: its hello received */
static void start(struct t *t)
{
	rx_open(t);
	load(t);
	wait_n(t, EV_SHIM_STATUS, 1);
}

/* n kernel records given to CUPTI, all taken; returns n */
static uint64_t add_kernels(int n, const char *name)
{
	for (int i = 0; i < n; i++) {
		CUpti_ActivityKernel10 k = mk_kernel((uint32_t)i, 1000 + (uint64_t)i, name);

		assert_int_equal(fake_cupti_add_record((CUpti_Activity *)&k), 0);
	}
	return (uint64_t)n;
}

/* n driver API calls cbid with correlation ids first, first + 1, ... */
static void driver_calls(CUpti_CallbackId cbid, uint32_t first, int n)
{
	for (int i = 0; i < n; i++)
		fake_cupti_api_call(CUPTI_CB_DOMAIN_DRIVER_API, cbid, first + (uint32_t)i);
}

/* -------------------------------------------------------------- tests --- */

static void test_only_export(void **state)
{
	struct t *t = *state;

	t->so = dlopen(fake_cupti_shim_path(), RTLD_NOW | RTLD_LOCAL);
	assert_non_null(t->so);
	assert_non_null(dlsym(t->so, "InitializeInjection"));
	assert_null(dlsym(t->so, "g_shim"));
	assert_null(dlsym(t->so, "shim_cupti_setup"));
	assert_null(dlsym(t->so, "shim_ring_push"));
	assert_null(dlsym(t->so, "shim_log"));
}

static void test_init_order_and_kinds(void **state)
{
	struct t *t = *state;
	int ts, tid, en;

	load(t);
	ts = fake_cupti_first_call("cuptiActivityRegisterTimestampCallback");
	tid = fake_cupti_first_call("cuptiSetThreadIdType(SYSTEM)");
	en = fake_cupti_first_call("cuptiActivityEnable");
	assert_true(ts >= 0);
	assert_true(tid >= 0);
	assert_true(en >= 0);
	assert_true(ts < en); /* timestamp callback before any activity kind */
	assert_int_equal(fake_cupti_call_count("cuptiSetThreadIdType(other)"), 0);
	assert_true(fake_cupti_has_ts_callback());
	assert_true(fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
	assert_true(fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_MEMCPY));
	assert_false(fake_cupti_kind_ever_enabled(CUPTI_ACTIVITY_KIND_KERNEL));
	assert_false(fake_cupti_kind_ever_enabled(CUPTI_ACTIVITY_KIND_RUNTIME));
	assert_false(fake_cupti_kind_ever_enabled(CUPTI_ACTIVITY_KIND_DRIVER));
	/* always-on: memset timing only in deep capture */
	assert_false(fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_MEMSET));
	/* one record per device, with its UUID */
	assert_true(fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_DEVICE));
}

/* CUPTI's device record (CUpti_ActivityDevice5) reaches the agent as EV_GPU_DEVICE */
static void test_device_uuid(void **state)
{
	static const unsigned char u[16] = {0x5a, 0x0c, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66,
					    0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xef};
	struct t *t = *state;
	CUpti_ActivityDevice5 d;
	size_t i, seen = 0;

	rx_open(t);
	load(t);
	wait_status(t, SHIM_CLOCK_MONOTONIC_CB, MODE_SENTINEL);
	memset(&d, 0, sizeof(d));
	d.kind = CUPTI_ACTIVITY_KIND_DEVICE;
	d.id = 3;
	d.isMigEnabled = 1;
	memcpy(&d.uuid, u, sizeof(u));
	assert_int_equal(fake_cupti_add_record((CUpti_Activity *)&d), 0);
	fake_cupti_complete();
	wait_n(t, EV_GPU_DEVICE, 1);
	for (i = 0; i < t->nrecs; i++) {
		const struct gpu_device_event *e = &t->recs[i].dev;

		if (e->hdr.type != EV_GPU_DEVICE)
			continue;
		assert_int_equal(t->recs[i].len, sizeof(*e));
		assert_int_equal(e->hdr.pid, getpid());
		assert_int_equal(e->hdr.tid, 0);
		assert_true(e->hdr.ts_ns > 0);
		assert_int_equal(e->device, 3);
		assert_int_equal(e->flags, GPU_DEV_F_MIG);
		assert_memory_equal(e->uuid, u, sizeof(u));
		seen++;
	}
	assert_int_equal(seen, 1);
	assert_false(t->status_invariant_broken);
}

static void test_exact_callbacks(void **state)
{
	struct t *t = *state;
	uint32_t got[64][2];
	size_t n, i, j;

	load(t);
	assert_true(fake_cupti_subscribed());
	n = fake_cupti_enabled_callbacks(got, 64);
	assert_int_equal(n, N_WANT_CBS);
	for (i = 0; i < N_WANT_CBS; i++) {
		for (j = 0; j < n; j++) {
			if (got[j][0] == want_cbs[i][0] && got[j][1] == want_cbs[i][1])
				break;
		}
		if (j == n)
			fail_msg("callback (%u, %u) not enabled", want_cbs[i][0], want_cbs[i][1]);
	}
	/* the double delivers nothing for what was not enabled */
	assert_int_equal(fake_cupti_api_call(CUPTI_CB_DOMAIN_RUNTIME_API,
					     CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, 1),
			 0);
}

static void test_launch_callbacks_end_to_end(void **state)
{
	struct t *t = *state;
	uint32_t me = (uint32_t)syscall(SYS_gettid);
	uint64_t t0, t1;
	size_t i, n = 0;

	setenv("INFERTRACE_SHIM_MODE", "deep", 1);
	rx_open(t);
	load(t);
	wait_status(t, SHIM_CLOCK_MONOTONIC_CB, MODE_DEEP);

	t0 = mono_ns();
	/* runtime + nested driver, one correlation id: reported once, as runtime */
	assert_int_equal(fake_cupti_api_nested(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
					       CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 101),
			 4);
	/* Triton / cuBLAS style: driver only */
	assert_int_equal(fake_cupti_api_call(CUPTI_CB_DOMAIN_DRIVER_API,
					     CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, 102),
			 2);
	/* graph launch, runtime and nested driver */
	fake_cupti_api_nested(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
			      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, 103);
	/* TensorRT-LLM: driver graph launch alone */
	fake_cupti_api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
			    104);
	/* not a launch: never reported */
	fake_cupti_api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
			    105);
	t1 = mono_ns();
	wait_n(t, EV_GPU_LAUNCH_CB, 4);
	pump(t, 50);
	assert_int_equal(count_type(t, EV_GPU_LAUNCH_CB), 4);

	for (i = 0; i < t->nrecs; i++) {
		const struct gpu_launch_cb_event *e = &t->recs[i].cb;
		static const uint32_t want[][3] = {
		    {101, 2, 211},
		    {102, 1, 652},
		    {103, 2, 311},
		    {104, 1, 515},
		};

		if (e->hdr.type != EV_GPU_LAUNCH_CB)
			continue;
		assert_true(n < 4);
		assert_int_equal(e->correlation_id, want[n][0]);
		assert_int_equal(e->domain, want[n][1]);
		assert_int_equal(e->cbid, want[n][2]);
		assert_int_equal(e->hdr.pid, getpid());
		assert_int_equal(e->hdr.tid, me);
		assert_int_equal(e->hdr.size, sizeof(*e));
		/* CLOCK_MONOTONIC, the eBPF time base */
		assert_true(e->hdr.ts_ns >= t0 && e->hdr.ts_ns <= t1);
		n++;
	}
	assert_false(t->status_invariant_broken);
}

static void test_activity_records_end_to_end(void **state)
{
	struct t *t = *state;
	CUpti_ActivityKernel10 k = mk_kernel(201, 5000000, "_Z6kernelPfi");
	CUpti_ActivityMemcpy6 mc;
	CUpti_ActivityMemset4 ms;
	char longname[400];
	size_t i, seen = 0;

	setenv("INFERTRACE_SHIM_MODE", "deep", 1);
	rx_open(t);
	load(t);
	wait_status(t, SHIM_CLOCK_MONOTONIC_CB, MODE_DEEP);

	FAKE_CUPTI_ACTIVITY(mc, CUPTI_ACTIVITY_KIND_MEMCPY, 1, 2, 6000000, 500000, 8, 202);
	mc.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
	mc.bytes = 1 << 20;
	FAKE_CUPTI_ACTIVITY(ms, CUPTI_ACTIVITY_KIND_MEMSET, 1, 2, 7000000, 100, 9, 203);
	ms.bytes = 4096;
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';

	assert_int_equal(fake_cupti_add_record((CUpti_Activity *)&k), 0);
	assert_int_equal(fake_cupti_add_record((CUpti_Activity *)&mc), 0);
	assert_int_equal(fake_cupti_add_record((CUpti_Activity *)&ms), 0);
	k = mk_kernel(204, 8000000, longname);
	assert_int_equal(fake_cupti_add_record((CUpti_Activity *)&k), 0);
	fake_cupti_complete();
	wait_n(t, EV_GPU_KERNEL, 2);
	wait_n(t, EV_GPU_MEMSET, 1);

	for (i = 0; i < t->nrecs; i++) {
		const struct gpu_activity_event *e = &t->recs[i].act;

		switch (e->hdr.type) {
		case EV_GPU_KERNEL:
			assert_int_equal(e->hdr.size, sizeof(*e));
			assert_int_equal(e->hdr.pid, getpid());
			assert_int_equal(e->hdr.tid, 0);
			assert_int_equal(e->device, 1);
			assert_int_equal(e->context, 2);
			assert_int_equal(e->stream, 7);
			assert_int_equal(e->grid[0], 128);
			assert_int_equal(e->grid[1], 2);
			assert_int_equal(e->block[0], 256);
			assert_int_equal(e->graph_id, 9);
			assert_int_equal(e->graph_node_id_lo, 2);
			assert_int_equal(e->graph_node_id_hi, 1);
			if (e->correlation_id == 201) {
				assert_int_equal(e->start_ns, 5000000);
				assert_int_equal(e->end_ns, 5001000);
				assert_int_equal(e->hdr.ts_ns, 5000000);
				assert_string_equal(e->name, "_Z6kernelPfi");
			} else {
				assert_int_equal(e->correlation_id, 204);
				assert_int_equal(strlen(e->name), GPU_NAME_LEN - 1);
			}
			seen++;
			break;
		case EV_GPU_MEMCPY:
			assert_int_equal(e->correlation_id, 202);
			assert_int_equal(e->copy_kind, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
			assert_int_equal(e->bytes, 1 << 20);
			assert_int_equal(e->start_ns, 6000000);
			assert_int_equal(e->end_ns, 6500000);
			assert_int_equal(e->stream, 8);
			assert_string_equal(e->name, "");
			seen++;
			break;
		case EV_GPU_MEMSET:
			assert_int_equal(e->correlation_id, 203);
			assert_int_equal(e->bytes, 4096);
			assert_int_equal(e->stream, 9);
			seen++;
			break;
		}
	}
	assert_int_equal(seen, 4);
	assert_false(t->status_invariant_broken);
}

static bool status_offset(struct t *t, const void *arg)
{
	const struct shim_status_event *s = last_status(t);

	(void)arg;
	return s && s->clock_mode == SHIM_CLOCK_OFFSET;
}

static void test_zero_timestamp_fallback(void **state)
{
	struct t *t = *state;
	CUpti_ActivityKernel10 k;
	const struct shim_status_event *s;
	uint64_t cupti_now, mono_before, mono_after;
	size_t i;
	int j;

	fake_cupti_set_zero_kernel_ts(true);
	rx_open(t);
	load(t);
	wait_status(t, SHIM_CLOCK_MONOTONIC_CB, MODE_SENTINEL);

	for (j = 0; j < 3; j++) {
		k = mk_kernel(300 + j, 1000, "zeroed");
		assert_int_equal(fake_cupti_add_record((CUpti_Activity *)&k), 0);
	}
	fake_cupti_complete();
	if (!wait_for(t, status_offset, NULL))
		fail_msg("no fallback to the offset clock");

	/* re-attached without the timestamp callback, same kinds, same callbacks */
	assert_int_equal(fake_cupti_call_count("cuptiFinalize"), 1);
	assert_false(fake_cupti_has_ts_callback());
	assert_true(fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
	assert_true(fake_cupti_callback_enabled(CUPTI_CB_DOMAIN_DRIVER_API,
						CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch));
	assert_true(fake_cupti_first_call("cuptiGetTimestamp") >= 0);
	/* the zeroed kernels were shed and counted, never sent with time 0 */
	assert_int_equal(count_type(t, EV_GPU_KERNEL), 0);
	s = last_status(t);
	assert_true(s->records_dropped >= 3);

	/* a kernel now stamped by CUPTI's own clock (CLOCK_REALTIME) */
	mono_before = mono_ns();
	cuptiGetTimestamp(&cupti_now);
	mono_after = mono_ns();
	k = mk_kernel(310, cupti_now, "after");
	assert_int_equal(fake_cupti_add_record((CUpti_Activity *)&k), 0);
	fake_cupti_complete();
	wait_n(t, EV_GPU_KERNEL, 1);
	for (i = 0; i < t->nrecs; i++) {
		const struct gpu_activity_event *e = &t->recs[i].act;

		if (e->hdr.type != EV_GPU_KERNEL)
			continue;
		assert_int_equal(e->correlation_id, 310);
		/* converted onto CLOCK_MONOTONIC: lands inside our bracket (NTP aside) */
		assert_true(e->start_ns + 50000000ull >= mono_before);
		assert_true(e->start_ns <= mono_after + 50000000ull);
		assert_int_equal(e->end_ns - e->start_ns, 1000);
	}
	assert_false(t->status_invariant_broken);
}

static void test_no_gpu_inert(void **state)
{
	struct t *t = *state;
	const struct shim_status_event *s;

	fake_cupti_set_no_gpu(true);
	start(t);
	s = last_status(t);
	assert_int_equal(s->clock_mode, SHIM_CLOCK_NONE);
	assert_int_equal(s->abi_version, INFERTRACE_ABI_VERSION);
	assert_false(fake_cupti_subscribed());
	assert_false(fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
	/* said once: several status periods later still one record, then EOF */
	pump(t, 100);
	pump(t, 100);
	assert_int_equal(count_type(t, EV_SHIM_STATUS), 1);
	assert_int_equal(t->nrecs, 1);
}

static bool dropped_at_least(struct t *t, const void *arg)
{
	const struct shim_status_event *s = last_status(t);

	return s && s->records_dropped >= *(const uint64_t *)arg;
}

static void test_agent_absent(void **state)
{
	struct t *t = *state;
	uint64_t want = 60;
	int i;

	setenv("INFERTRACE_SHIM_MODE", "deep", 1);
	load(t);
	/* nobody listens: launches and kernels are dropped and counted */
	driver_calls(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 1000, 50);
	for (i = 0; i < 10; i++) {
		CUpti_ActivityKernel10 k = mk_kernel(1000 + i, 1000000 + i, "k");

		assert_int_equal(fake_cupti_add_record((CUpti_Activity *)&k), 0);
	}
	fake_cupti_complete();
	/* let the shim thread shed them before the agent appears */
	for (i = 0; i < 50 && fake_cupti_call_count("cuptiActivityFlushAll") < 3; i++)
		usleep(10000);
	usleep(50000);

	rx_open(t);
	if (!wait_for(t, dropped_at_least, &want))
		fail_msg("drops while absent not reported");
	assert_int_equal(count_type(t, EV_GPU_KERNEL), 0);
	assert_int_equal(last_status(t)->records_sent, 0);
	assert_false(t->status_invariant_broken);
}

/*
 * The CUDA runtime's exit handler, registered (as libcudart registers its
 * own) before cuInit() loads the shim: by the time it runs, the shim must
 * have flushed and let go of CUPTI, which then goes away (the double aborts
 * on any later call that needs the driver, as the real one crashed).
 */
static void cuda_runtime_exit(void)
{
	if (fake_cupti_first_call("cuptiActivityFlushAll(forced)") < 0 ||
	    fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ||
	    fake_cupti_subscribed()) {
		fprintf(stderr, "the shim still held CUPTI when the CUDA runtime exited\n");
		_exit(3);
	}
	fake_cupti_cuda_exit();
}

/* exit() of a CUDA process with the shim: finished before CUDA, no crash after */
static void test_process_exit(void **state)
{
	struct t *t = *state;
	int st = 0;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		atexit(cuda_runtime_exit);
		load(t);
		fake_cupti_api_call(CUPTI_CB_DOMAIN_DRIVER_API,
				    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 42);
		exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("the process ended with %s %d", WIFEXITED(st) ? "status" : "signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

static bool accounted(struct t *t, const void *arg)
{
	const struct shim_status_event *s = last_status(t);

	return s &&
	       s->records_sent + s->records_dropped + s->cupti_dropped >= *(const uint64_t *)arg;
}

/*
 * The agent reads again after a stall: every one of the produced records is
 * accounted for, sent or dropped (some dropped), and what was sent arrived
 * before the status that counted it.
 */
static void caught_up_with_drops(struct t *t, uint64_t produced)
{
	const struct shim_status_event *s;

	if (!wait_for(t, accounted, &produced))
		fail_msg("records not accounted for");
	s = last_status(t);
	assert_true(s->records_dropped > 0);
	assert_int_equal(s->records_sent + s->records_dropped + s->cupti_dropped, produced);
	assert_int_equal(s->records_sent, t->data_seen);
	assert_false(t->status_invariant_broken);
}

static void test_agent_slow(void **state)
{
	struct t *t = *state;
	uint64_t produced = 0;
	int i, r;

	setenv("INFERTRACE_SHIM_MODE", "deep", 1);
	setenv("INFERTRACE_SHIM_SNDBUF", "16384", 1);
	start(t);

	/*
	 * The agent stops reading. The calling (CUDA) thread keeps launching:
	 * each callback only pushes into the in-process ring, so it returns
	 * whatever the socket does (a blocking design would hang here and the
	 * watchdog would fail the test).
	 */
	for (i = 0; i < 200000; i++) {
		fake_cupti_api_call(CUPTI_CB_DOMAIN_DRIVER_API,
				    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 10 + i);
		produced++;
	}
	for (i = 0; i < 20000; i++) {
		CUpti_ActivityKernel10 k = mk_kernel(10 + i, 1000000 + i, "slow");

		r = fake_cupti_add_record((CUpti_Activity *)&k);
		assert_true(r == 0 || r == -ENOBUFS);
		produced++; /* a refused one is CUPTI's drop, reported as cupti_dropped */
	}
	fake_cupti_complete();
	usleep(100000);

	/* the agent catches up: every record is accounted for, sent or dropped */
	caught_up_with_drops(t, produced);
}

static bool sent_or_dropped(struct t *t, const void *arg)
{
	const struct shim_status_event *s = last_status(t);

	return s && s->records_sent + s->records_dropped >= *(const uint64_t *)arg;
}

static void test_buffer_pool_bounded(void **state)
{
	struct t *t = *state;
	const struct shim_status_event *s;
	uint64_t accepted = 0;
	int i, r, refused = 0, round;

	setenv("INFERTRACE_SHIM_BUFS", "2", 1);
	setenv("INFERTRACE_SHIM_FLUSH_MS", "3600000", 1);
	fake_cupti_set_flush_returns(false);
	start(t);

	for (round = 0; round < 4; round++) {
		/* 2 x 1 MiB holds ~2 x 4000 kernel records: overflow it */
		for (i = 0; i < 12000; i++) {
			CUpti_ActivityKernel10 k = mk_kernel(i, 1000 + i, "pool");

			r = fake_cupti_add_record((CUpti_Activity *)&k);
			if (r == -ENOBUFS) {
				refused++;
			} else {
				assert_int_equal(r, 0);
				accepted++;
			}
		}
		assert_true(fake_cupti_buffers_held() <= 2);
		fake_cupti_complete();
		/* the shim thread converted both buffers and put them back */
		if (!wait_for(t, sent_or_dropped, &accepted))
			fail_msg("round %d not processed", round);
	}
	assert_true(refused > 0);
	assert_true(fake_cupti_declined() > 0);
	/* recycled: never more than the pool, however many rounds */
	assert_int_equal(fake_cupti_distinct_buffers(), 2);
	s = last_status(t);
	assert_int_equal(s->records_sent + s->records_dropped, accepted);
	assert_int_equal(s->records_sent, count_type(t, EV_GPU_KERNEL));
	/* what the pool could not take is CUPTI's drop, and reported as such */
	if (!wait_for(t, accounted, &(uint64_t){accepted + (uint64_t)refused}))
		fail_msg("cupti drops not reported");
	assert_int_equal(last_status(t)->cupti_dropped, refused);
	assert_false(t->status_invariant_broken);
}

/*
 * A burst bigger than the socket while the agent drains: one CUPTI buffer
 * converts to more records than SO_SNDBUF holds (here 64 KiB, by default
 * 1 MiB against a 2 MiB buffer), sent in one go. The shim thread waits for
 * room instead of dropping (with INFERTRACE_SHIM_SEND_WAIT_MS=0, the former
 * behaviour, most of each burst is dropped). The wait is long here because
 * this thread drains only between its polls.
 */
static void test_burst_waits_for_room(void **state)
{
	struct t *t = *state;
	const struct shim_status_event *s;
	uint64_t produced = 0;
	int round;

	setenv("INFERTRACE_SHIM_SNDBUF", "65536", 1);
	setenv("INFERTRACE_SHIM_SEND_WAIT_MS", "5000", 1);
	setenv("INFERTRACE_SHIM_FLUSH_MS", "3600000", 1);
	start(t);

	for (round = 0; round < 3; round++) {
		/* ~0.9 MB of records, under one 1 MiB buffer of the double */
		produced += add_kernels(3000, "burst");
		fake_cupti_complete();
		if (!wait_for(t, accounted, &produced))
			fail_msg("round %d not accounted for", round);
	}
	s = last_status(t);
	assert_int_equal(s->records_dropped, 0);
	assert_int_equal(s->cupti_dropped, 0);
	assert_int_equal(s->records_sent, produced);
	assert_int_equal(count_type(t, EV_GPU_KERNEL), produced);
	assert_false(t->status_invariant_broken);
}

/*
 * INFERTRACE_SHIM_SNDBUF under one message (16 KiB) is raised to it: a Unix
 * datagram larger than the send buffer fails with EMSGSIZE, which made the
 * shim reconnect on every full batch and deliver none.
 */
static void test_sndbuf_floor(void **state)
{
	struct t *t = *state;
	struct shim_rx_stats st;
	uint64_t produced;

	setenv("INFERTRACE_SHIM_SNDBUF", "4096", 1);
	start(t);
	produced = add_kernels(500, "floor");
	fake_cupti_complete();
	if (!wait_for(t, accounted, &produced))
		fail_msg("records not accounted for");
	assert_int_equal(last_status(t)->records_dropped, 0);
	assert_int_equal(count_type(t, EV_GPU_KERNEL), produced);
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.conns_accepted, 1);
}

/*
 * An agent that stops reading costs the shim one wait, not one per batch:
 * after send_wait_ms the batches are dropped at once and CUPTI's buffers go
 * back to the pool, so CUPTI keeps recording (a wait per batch would hold a
 * buffer of ~70 batches for over a minute here, past the deadline).
 */
static void test_stalled_agent_one_wait(void **state)
{
	struct t *t = *state;
	uint64_t produced, end;
	int r;

	setenv("INFERTRACE_SHIM_SNDBUF", "16384", 1);
	setenv("INFERTRACE_SHIM_SEND_WAIT_MS", "1000", 1);
	setenv("INFERTRACE_SHIM_BUFS", "2", 1);
	setenv("INFERTRACE_SHIM_FLUSH_MS", "3600000", 1);
	fake_cupti_set_flush_returns(false);
	start(t);

	/* the agent reads nothing from here: one buffer and a half (of 1 MiB), handed back */
	produced = add_kernels(
	    (int)(3 * (1u << 20) / 2 / ((sizeof(CUpti_ActivityKernel10) + 7) & ~7u)), "stall");
	assert_int_equal(fake_cupti_buffers_held(), 2);
	fake_cupti_complete();
	/* CUPTI gets a buffer again once the shim has shed both */
	end = mono_ns() + DEADLINE_MS * 1000000ull;
	do {
		CUpti_ActivityKernel10 k = mk_kernel(0, 1, "again");

		usleep(20000);
		r = fake_cupti_add_record((CUpti_Activity *)&k);
		produced++; /* accepted, or CUPTI's drop (cupti_dropped) */
	} while (r && mono_ns() < end);
	assert_int_equal(r, 0);
	fake_cupti_complete();

	/* the agent reads again: every record accounted for, the stall's as drops */
	caught_up_with_drops(t, produced);
}

static bool status_capture(struct t *t, const void *arg)
{
	const struct shim_status_event *s = last_status(t);

	return s && s->capture == *(const uint32_t *)arg;
}

static void test_mode_switch(void **state)
{
	struct t *t = *state;
	uint32_t deep = MODE_DEEP, sentinel = MODE_SENTINEL;
	size_t before;
	int i;

	setenv("INFERTRACE_SHIM_LAUNCH_RATE", "5", 1);
	rx_open(t);
	load(t);
	wait_status(t, SHIM_CLOCK_MONOTONIC_CB, MODE_SENTINEL);
	assert_false(fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_MEMSET));

	/* always-on: kernel launches sampled, graph launches always */
	driver_calls(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 500, 20);
	driver_calls(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, 600, 3);
	wait_n(t, EV_GPU_LAUNCH_CB, 8);
	pump(t, 50);
	before = count_type(t, EV_GPU_LAUNCH_CB);
	assert_true(before >= 8 && before < 23);
	/* the budget is spent, but an NCCL kernel's launch is never sampled out */
	for (i = 0; i < 10; i++)
		fake_cupti_launch(CUPTI_CB_DOMAIN_DRIVER_API,
				  CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, 650 + i,
				  "_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_"
				  "LL24ncclDevKernelArgsStorageILm4096EE");
	wait_n(t, EV_GPU_LAUNCH_CB, before + 10);
	before = count_type(t, EV_GPU_LAUNCH_CB);

	assert_int_equal(shim_rx_set_mode(t->rx, 999999999, MODE_DEEP), -ESRCH);
	assert_int_equal(shim_rx_set_mode(t->rx, getpid(), 7), -EINVAL);
	assert_int_equal(shim_rx_set_mode(t->rx, getpid(), MODE_DEEP), 0);
	if (!wait_for(t, status_capture, &deep))
		fail_msg("shim did not switch to deep");
	assert_true(fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_MEMSET));
	driver_calls(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 700, 20);
	wait_n(t, EV_GPU_LAUNCH_CB, before + 20);

	assert_int_equal(shim_rx_set_mode(t->rx, 0, MODE_SENTINEL), 0);
	if (!wait_for(t, status_capture, &sentinel))
		fail_msg("shim did not switch back");
	assert_false(fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_MEMSET));
	assert_true(fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
	assert_false(t->status_invariant_broken);
}

/* was a launch callback with this correlation id received? */
static bool have_cb(struct t *t, uint32_t corr)
{
	for (size_t i = 0; i < t->nrecs; i++)
		if (t->recs[i].h.type == EV_GPU_LAUNCH_CB && t->recs[i].cb.correlation_id == corr)
			return true;
	return false;
}

/* the kernel records with this correlation id: how many, and how many flagged */
static void kernels_of(struct t *t, uint32_t corr, size_t *n, size_t *flagged)
{
	*n = *flagged = 0;
	for (size_t i = 0; i < t->nrecs; i++) {
		const struct gpu_activity_event *e = &t->recs[i].act;

		if (e->hdr.type != EV_GPU_KERNEL || e->correlation_id != corr)
			continue;
		(*n)++;
		*flagged += (e->hdr.cpu & GPU_F_NO_LAUNCH) != 0;
		assert_int_equal(e->hdr.cpu & ~GPU_F_NO_LAUNCH, 0);
	}
}

/*
 * Always-on mode samples kernel launches out: the GPU record of a launch
 * whose callback was not sent says so (GPU_F_NO_LAUNCH), and the agent does
 * not wait for a launch that will not come. A record whose launch was sent
 * is never flagged: graph launches, launches within the budget, and, in deep
 * mode, a later id that shares a sampled-out id's bit.
 */
static void test_sampled_out_flagged(void **state)
{
	struct t *t = *state;
	uint32_t deep = MODE_DEEP, alias;
	size_t n, flagged, out = 0, sent = 0;
	int i;

	setenv("INFERTRACE_SHIM_LAUNCH_RATE", "5", 1);
	start(t);
	driver_calls(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 500, 20);
	driver_calls(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, 600, 3);
	for (i = 0; i < 20; i++) {
		CUpti_ActivityKernel10 k = mk_kernel(500 + i, 1000 + i, "k");

		k.graphId = 0;
		assert_int_equal(fake_cupti_add_record((CUpti_Activity *)&k), 0);
	}
	for (i = 0; i < 6; i++) { /* two kernels per graph launch */
		CUpti_ActivityKernel10 k = mk_kernel(600 + i / 2, 2000 + i, "g");

		assert_int_equal(fake_cupti_add_record((CUpti_Activity *)&k), 0);
	}
	fake_cupti_complete();
	wait_n(t, EV_GPU_KERNEL, 26);
	pump(t, 50); /* launch callbacks sent after the buffer arrive too */
	for (i = 0; i < 20; i++) {
		kernels_of(t, 500 + i, &n, &flagged);
		assert_int_equal(n, 1);
		/* flagged exactly when its callback did not come */
		assert_int_equal(flagged, !have_cb(t, 500 + i));
		out += flagged;
		sent += !flagged;
	}
	/* a budget of 5 a second: most of the 20 are sampled out, some are not */
	assert_true(out >= 10 && sent >= 1);
	for (i = 0; i < 3; i++) {
		assert_true(have_cb(t, 600 + i));
		kernels_of(t, 600 + i, &n, &flagged);
		assert_int_equal(n, 2);
		assert_int_equal(flagged, 0);
	}

	/* deep: every launch sent, and it clears what an older id left in its bit */
	assert_int_equal(shim_rx_set_mode(t->rx, getpid(), MODE_DEEP), 0);
	if (!wait_for(t, status_capture, &deep))
		fail_msg("shim did not switch to deep");
	for (alias = 500; alias < 520; alias++) {
		kernels_of(t, alias, &n, &flagged);
		if (flagged)
			break;
	}
	assert_true(alias < 520);
	alias += 1u << 20; /* SHIM_SAMPLED_BITS: a sampled-out id's bit */
	fake_cupti_api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
			    alias);
	{
		CUpti_ActivityKernel10 k = mk_kernel(alias, 3000, "k");

		assert_int_equal(fake_cupti_add_record((CUpti_Activity *)&k), 0);
	}
	fake_cupti_complete();
	wait_n(t, EV_GPU_KERNEL, 27);
	assert_true(have_cb(t, alias));
	kernels_of(t, alias, &n, &flagged);
	assert_int_equal(n, 1);
	assert_int_equal(flagged, 0);
	assert_false(t->status_invariant_broken);
}

/* --------------------------------------------------- receiver hardening --- */

static int raw_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	strcpy(sa.sun_path, path);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* a record r of type t as a shim sends it: zeroed, its header's type and size set */
#define REC_INIT(r, t)                                                                             \
	do {                                                                                       \
		memset(&(r), 0, sizeof(r));                                                        \
		(r).hdr.type = (t);                                                                \
		(r).hdr.size = sizeof(r);                                                          \
	} while (0)

static struct shim_status_event mk_hello(uint32_t abi)
{
	struct shim_status_event s;

	REC_INIT(s, EV_SHIM_STATUS);
	s.hdr.pid = (uint32_t)getpid();
	s.abi_version = abi;
	return s;
}

/* a runtime-API launch callback with correlation id corr, pid and tid 0 */
static struct gpu_launch_cb_event mk_cb(uint32_t corr)
{
	struct gpu_launch_cb_event cb;

	REC_INIT(cb, EV_GPU_LAUNCH_CB);
	cb.domain = 1;
	cb.correlation_id = corr;
	return cb;
}

static void test_rx_forged_and_garbage(void **state)
{
	struct t *t = *state;
	struct shim_status_event hello = mk_hello(INFERTRACE_ABI_VERSION);
	struct gpu_launch_cb_event cb;
	struct gpu_activity_event act;
	struct shim_rx_stats st;
	uint8_t big[SHIM_MSG_MAX + 64], msg[512];
	struct stat sb;
	int fd, fd2, i;

	rx_open(t);
	assert_int_equal(stat(t->path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0660);
	assert_true(S_ISSOCK(sb.st_mode));

	/* a record before the hello is not accepted */
	fd = raw_connect(t->path);
	cb = mk_cb(1);
	assert_int_equal(send(fd, &cb, sizeof(cb), 0), sizeof(cb));
	pump(t, 20);
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.no_hello, 1);
	assert_int_equal(t->nrecs, 0);

	/* the hello, with a forged pid: the kernel's pid wins */
	hello.hdr.pid = 1;
	assert_int_equal(send(fd, &hello, sizeof(hello), 0), sizeof(hello));
	cb.hdr.pid = 1;
	assert_int_equal(send(fd, &cb, sizeof(cb), 0), sizeof(cb));
	pump(t, 20);
	assert_int_equal(t->nrecs, 2);
	/* on_msg ran after each message came in and before its record left */
	assert_int_equal(t->msgs, 3);
	assert_int_equal(t->recs[0].msg, 2);
	assert_int_equal(t->recs[1].msg, 3);
	assert_int_equal(t->recs[0].h.pid, getpid());
	assert_int_equal(t->recs[1].h.pid, getpid());
	assert_true(shim_rx_pid_ns_differs(t->rx, getpid()));
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.pid_rewritten, 2);

	/* garbage of every kind: counted, never delivered */
	memset(msg, 0xa5, sizeof(msg));
	assert_int_equal(send(fd, msg, 7, 0), 7); /* shorter than a header */
	assert_int_equal(send(fd, msg, sizeof(msg), 0), sizeof(msg));
	REC_INIT(act, EV_GPU_KERNEL);
	memset(act.name, 'A', sizeof(act.name)); /* no NUL */
	assert_int_equal(send(fd, &act, sizeof(act), 0), sizeof(act));
	act.name[5] = '\0';
	act.hdr.size = sizeof(act) - 8; /* size does not match the type */
	assert_int_equal(send(fd, &act, sizeof(act), 0), sizeof(act));
	act.hdr.size = sizeof(act) + 8; /* beyond the message */
	assert_int_equal(send(fd, &act, sizeof(act), 0), sizeof(act));
	act.hdr.type = EV_CUDA_LAUNCH; /* a BPF record is never a shim's */
	act.hdr.size = sizeof(struct cuda_launch_event);
	assert_int_equal(send(fd, &act, sizeof(struct cuda_launch_event), 0),
			 sizeof(struct cuda_launch_event));
	cb.domain = 77;
	assert_int_equal(send(fd, &cb, sizeof(cb), 0), sizeof(cb));
	assert_int_equal(send(fd, msg, 0, 0), 0); /* empty message */
	memset(big, 0, sizeof(big));
	assert_int_equal(send(fd, big, sizeof(big), 0), sizeof(big)); /* too long */
	/* a valid record followed by a broken one: the valid one counts */
	act.hdr.type = EV_GPU_MEMCPY;
	act.hdr.size = sizeof(act);
	memcpy(msg, &act, sizeof(act));
	memset(msg + sizeof(act), 0xff, 24);
	assert_int_equal(send(fd, msg, sizeof(act) + 24, 0), sizeof(act) + 24);
	/* a device past SHIM_MAX_DEVICES, unknown flags: refused; the last device passes */
	{
		struct gpu_device_event dv;

		REC_INIT(dv, EV_GPU_DEVICE);
		dv.device = SHIM_MAX_DEVICES;
		assert_int_equal(send(fd, &dv, sizeof(dv), 0), sizeof(dv));
		dv.device = SHIM_MAX_DEVICES - 1;
		dv.flags = 2;
		assert_int_equal(send(fd, &dv, sizeof(dv), 0), sizeof(dv));
		dv.flags = GPU_DEV_F_MIG;
		memset(dv.uuid, 0xff, sizeof(dv.uuid));
		assert_int_equal(send(fd, &dv, sizeof(dv), 0), sizeof(dv));
	}
	/* a passed descriptor is closed, never kept */
	{
		struct iovec iov = {.iov_base = &cb, .iov_len = sizeof(cb)};
		union {
			char b[CMSG_SPACE(sizeof(int))];
			struct cmsghdr a;
		} u;
		struct msghdr mh = {.msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = u.b,
				    .msg_controllen = sizeof(u.b)};
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		int pass = 0;

		cb.domain = 2;
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pass, sizeof(int));
		assert_int_equal(sendmsg(fd, &mh, 0), sizeof(cb));
	}
	pump(t, 20);
	pump(t, 20);
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.bad_msgs, 11);
	assert_int_equal(st.truncated, 1);
	assert_int_equal(st.fds_closed, 1);
	/* hello, cb, the valid memcpy, the valid device, the cb with an fd */
	assert_int_equal(t->nrecs, 5);
	assert_int_equal(t->recs[2].h.type, EV_GPU_MEMCPY);
	assert_int_equal(t->recs[3].h.type, EV_GPU_DEVICE);
	assert_int_equal(t->recs[3].dev.device, SHIM_MAX_DEVICES - 1);

	/* another ABI: the connection is refused */
	fd2 = raw_connect(t->path);
	hello = mk_hello(INFERTRACE_ABI_VERSION + 1);
	assert_int_equal(send(fd2, &hello, sizeof(hello), 0), sizeof(hello));
	pump(t, 20);
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.conns_bad_abi, 1);
	assert_int_equal(recv(fd2, msg, sizeof(msg), 0), 0); /* closed by the agent */
	close(fd2);

	/* random input through the same validation: no crash, nothing forged */
	srand(1);
	for (i = 0; i < 20000; i++) {
		size_t len = (size_t)rand() % 400, j;
		int n;

		for (j = 0; j < len; j++)
			msg[j] = (uint8_t)rand();
		if (i & 1 && len >= sizeof(hello)) /* sometimes a valid hello first */
			memcpy(msg,
			       &(struct shim_status_event){
				   .hdr = {.type = EV_SHIM_STATUS, .size = sizeof(hello)},
				   .abi_version = INFERTRACE_ABI_VERSION},
			       sizeof(hello));
		n = shim_rx_feed(t->rx, 4242, msg, len);
		assert_true(n >= -EINVAL);
	}
	for (i = 0; i < (int)t->nrecs; i++) {
		const struct event_hdr *h = &t->recs[i].h;

		assert_true(h->type >= EV_GPU_KERNEL && h->type <= EV_GPU_DEVICE);
		assert_int_equal(h->size, t->recs[i].len);
	}
	close(fd);
	pump(t, 20);
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.conns_active, 0);
}

/*
 * The agent's on_msg decodes its BPF rings, and a process exit found there
 * drains the shims: a drain from inside a drain would read the next message
 * over the one being delivered. It is refused; both messages arrive whole.
 */
static void test_rx_not_reentrant(void **state)
{
	struct t *t = *state;
	struct shim_status_event hello = mk_hello(INFERTRACE_ABI_VERSION);
	struct gpu_launch_cb_event cb;
	struct shim_rx_stats st;
	int fd;

	rx_open(t);
	fd = raw_connect(t->path);
	assert_int_equal(send(fd, &hello, sizeof(hello), 0), sizeof(hello));
	cb = mk_cb(41);
	assert_int_equal(send(fd, &cb, sizeof(cb), 0), sizeof(cb));
	cb.correlation_id = 42;
	assert_int_equal(send(fd, &cb, sizeof(cb), 0), sizeof(cb));
	t->reenter = true;
	pump(t, 20);
	t->reenter = false;
	assert_int_equal(t->drain_rc, -EBUSY);
	assert_int_equal(t->feed_rc, -EBUSY);
	assert_int_equal(t->nrecs, 3);
	assert_int_equal(t->recs[0].h.type, EV_SHIM_STATUS);
	assert_int_equal(t->recs[1].cb.correlation_id, 41);
	assert_int_equal(t->recs[2].cb.correlation_id, 42);
	assert_int_equal(t->recs[2].h.pid, getpid());
	shim_rx_get_stats(t->rx, &st);
	assert_int_equal(st.reentered, 6); /* a drain and a feed per message */
	assert_int_equal(st.records, 3);
	assert_int_equal(st.bad_msgs, 0);
	/* outside a drain both work again */
	assert_int_equal(shim_rx_drain(t->rx), 0);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_only_export, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_init_order_and_kinds, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_exact_callbacks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_launch_callbacks_end_to_end, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_activity_records_end_to_end, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_device_uuid, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_zero_timestamp_fallback, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_no_gpu_inert, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_agent_absent, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_process_exit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_agent_slow, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_buffer_pool_bounded, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_burst_waits_for_room, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sndbuf_floor, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stalled_agent_one_wait, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_mode_switch, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sampled_out_flagged, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rx_forged_and_garbage, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rx_not_reentrant, setup, teardown),
	};

	/* a hang (a blocking CUDA thread, a lost wake-up) fails instead of stalling CI */
	alarm(300);
	return cmocka_run_group_tests_name("shim", tests, NULL, NULL);
}
