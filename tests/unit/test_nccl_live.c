// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_nccl_live.c - agent/pipeline/nccl_live.c without BPF: the NCCL ring
 * records (bpf/events.h) as decode.c hands them over, and joined GPU records
 * as join.c does, for what the live tests cannot make without a GPU: a
 * collective held for its NCCL kernel and joined with it (alone, and every
 * call of a group), the hold's expiry, comm mapping after init and after
 * destroy, bad records counted.
 */
#include <errno.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "state.h"
#include "pipeline.h"
#include "correlator.h"
#include "collective.h"
#include "diagnose.h"
#include "nccl_live.h"
#include "json_assert.h"
#include "../fakes/cap_sink.h"

#define PID 4242
#define TID 4243
#define COMM 0xc0ffee00ULL
#define HOLD_NS 2000000000ULL /* nccl_live.c */

struct cap_sink {
	struct sink s;
	json_t *recs; /* every record written, parsed */
};

static int cap_write(struct sink *s, enum rec_class cls, const char *key, const char *json,
		     size_t len)
{
	struct cap_sink *c = (struct cap_sink *)s;

	(void)cls;
	(void)key;
	json_array_append_new(c->recs, json_loadb(json, len, 0, NULL));
	return 0;
}

static void cap_close(struct sink *s)
{
	(void)s;
}

static struct agent *agent_new(struct cap_sink *c)
{
	struct agent *a = calloc(1, sizeof(*a));

	assert_non_null(a);
	snprintf(a->host, sizeof(a->host), "testhost");
	a->opts.mode = MODE_DEEP;
	memset(c, 0, sizeof(*c));
	c->recs = json_array();
	c->s.write = cap_write;
	c->s.flush = cap_flush;
	c->s.close = cap_close;
	a->sinks[0] = &c->s;
	a->n_sinks = 1;
	a->gpu = gpu_new(a, false); /* the live GPU join exists: collectives may wait */
	assert_non_null(a->gpu);
	return a;
}

static void agent_del(struct agent *a, struct cap_sink *c)
{
	nccl_free(a);
	diag_free(a->diag);
	gpu_destroy(a->gpu);
	json_decref(c->recs);
	free(a);
}

/* the records of one type, in order */
static json_t *of_type(struct cap_sink *c, const char *type)
{
	json_t *out = json_array(), *r;
	size_t i;

	json_array_foreach(c->recs, i, r) if (!strcmp(json_string_value(json_object_get(r, "type")),
						      type)) json_array_append(out, r);
	return out;
}

/* one counter of the stats record's "nccl" object */
static json_int_t nccl_stat(struct agent *a, const char *key)
{
	json_t *st = json_object();
	json_int_t v;

	nccl_stats(a, st);
	v = json_integer_value(json_object_get(json_object_get(st, "nccl"), key));
	json_decref(st);
	return v;
}

/* rank of nranks in process pid initialises comm, unique id 128 x idb */
static void init_rank(struct agent *a, uint32_t pid, uint64_t comm, int rank, int nranks,
		      unsigned char idb)
{
	struct nccl_comm_event e = {
	    .hdr = {.type = EV_NCCL_COMM, .size = sizeof(e), .pid = pid, .tid = pid, .ts_ns = 10},
	    .api = NCCL_COMM_INIT_RANK,
	    .n_comms = 1,
	    .dur_ns = 5,
	    .nranks = nranks,
	    .rank = rank};

	e.comms[0] = comm;
	memset(e.id, idb, sizeof(e.id));
	nccl_on_comm(a, &e);
}

/* the entry of that init (NCCL_COMM_INIT_ENTER): every rank's comes before any return */
static void init_enter(struct agent *a, uint32_t pid, int rank, int nranks, unsigned char idb)
{
	struct nccl_comm_event e = {
	    .hdr = {.type = EV_NCCL_COMM, .size = sizeof(e), .pid = pid, .tid = pid, .ts_ns = 5},
	    .api = NCCL_COMM_INIT_ENTER,
	    .nranks = nranks,
	    .rank = rank};

	memset(e.id, idb, sizeof(e.id));
	nccl_on_comm(a, &e);
}

static void init_comm(struct agent *a, uint64_t comm, int rank, int nranks, unsigned char idb)
{
	init_rank(a, PID, comm, rank, nranks, idb);
}

static void call_on(struct agent *a, uint32_t pid, uint32_t tid, unsigned api, uint64_t ts,
		    uint64_t group, uint64_t comm)
{
	struct nccl_call_event e = {
	    .hdr = {.type = EV_NCCL_CALL, .size = sizeof(e), .pid = pid, .tid = tid, .ts_ns = ts},
	    .api = api,
	    .datatype = 9,
	    .comm = comm,
	    .count = 1024,
	    .stream = 0x5000,
	    .redop = 0,
	    .root = -1,
	    .group_id = group,
	    .group_depth = group ? 1 : 0};

	nccl_on_call(a, &e);
}

static void call(struct agent *a, unsigned api, uint64_t ts, uint64_t group, uint64_t comm)
{
	call_on(a, PID, TID, api, ts, group, comm);
}

static void kernel(struct agent *a, const char *name, uint32_t tid, uint64_t launch_ts,
		   uint64_t start)
{
	struct corr_gpu g = {.kind = CORR_KIND_KERNEL,
			     .pid = PID,
			     .start_ns = start,
			     .end_ns = start + 700,
			     .device = 3,
			     .name = name};
	struct corr_launch l = {.pid = PID,
				.tid = tid,
				.ts_ns = launch_ts,
				.api = "cuLaunchKernelEx",
				.from_uprobe = true};

	nccl_on_kernel(a, &g, &l);
}

static uint64_t fnv(unsigned char b)
{
	unsigned char id[128];

	memset(id, b, sizeof(id));
	return corr_coll_hash(id, sizeof(id));
}

/* a collective waits for its kernel; a group's calls all take the group's kernel */
static void test_kernel_join(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c);
	const char *k1 = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";
	const char *k2 = "ncclDevKernel_SendRecv";
	char hash[24];
	json_t *cs, *r;

	(void)state;
	nccl_on_shim(a, PID, true);
	init_comm(a, COMM, 1, 2, 0x11);
	call(a, NCCL_ALL_REDUCE, 1000, 0, COMM);
	call(a, NCCL_GROUP_START, 2000, 2000, 0);
	call(a, NCCL_ALL_REDUCE, 2100, 2000, COMM);
	call(a, NCCL_ALL_GATHER, 2200, 2000, COMM);
	call(a, NCCL_GROUP_END, 2300, 2000, 0);
	cs = of_type(&c, "collective");
	assert_int_equal(json_array_size(cs), 0); /* held */
	json_decref(cs);

	/* another thread's kernel, and a kernel not of NCCL: nothing joins */
	kernel(a, k1, TID + 1, 1500, 5000);
	kernel(a, "vectorAdd", TID, 1500, 5000);
	cs = of_type(&c, "collective");
	assert_int_equal(json_array_size(cs), 0);
	json_decref(cs);

	kernel(a, k1, TID, 1500, 5000);
	cs = of_type(&c, "collective");
	assert_int_equal(json_array_size(cs), 1);
	r = json_array_get(cs, 0);
	snprintf(hash, sizeof(hash), "0x%llx", (unsigned long long)fnv(0x11));
	assert_json_str(r, "comm", hash);
	assert_true(json_is_true(json_object_get(r, "comm_known")));
	assert_json_int(r, "rank", 1);
	assert_json_int(r, "nranks", 2);
	assert_json_int(r, "seq", 0);
	assert_json_str(r, "op", "allreduce");
	assert_json_int(r, "bytes", 2048);
	assert_true(json_is_true(json_object_get(r, "joined")));
	assert_json_str(r, "kernel", k1);
	assert_json_int(r, "gpu_start_ns", 5000);
	assert_json_int(r, "gpu_end_ns", 5700);
	assert_json_int(r, "device", 3);
	assert_json_str(r, "algorithm", "RING"); /* from the kernel's name */
	assert_json_str(r, "protocol", "LL");
	assert_json_int(r, "enqueue_ns", 1000);
	json_decref(cs);

	/* the group's launch: both calls of the group */
	kernel(a, k2, TID, 2350, 8000);
	cs = of_type(&c, "collective");
	assert_int_equal(json_array_size(cs), 3);
	for (int i = 1; i < 3; i++) {
		r = json_array_get(cs, i);
		assert_json_int(r, "seq", i);
		assert_json_int(r, "group", 2000);
		assert_json_str(r, "kernel", k2);
		assert_json_int(r, "gpu_start_ns", 8000);
		/* a send/recv kernel's name has neither */
		assert_true(json_is_null(json_object_get(r, "algorithm")));
		assert_true(json_is_null(json_object_get(r, "protocol")));
	}
	assert_json_str(json_array_get(cs, 2), "op", "allgather");
	json_decref(cs);
	cs = of_type(&c, "nccl_group");
	assert_int_equal(json_array_size(cs), 2);
	json_decref(cs);
	agent_del(a, &c);
}

/* no kernel within the hold: out without one, counted; order kept */
static void test_hold_expires(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c);
	json_t *cs;

	(void)state;
	nccl_on_shim(a, PID, true);
	init_comm(a, COMM, 0, 2, 0x22);
	call(a, NCCL_ALL_REDUCE, 1000, 0, COMM);
	call(a, NCCL_BROADCAST, 3000, 0, COMM);
	nccl_tick(a, 1000 + HOLD_NS); /* the first is not older than the hold yet */
	cs = of_type(&c, "collective");
	assert_int_equal(json_array_size(cs), 0);
	json_decref(cs);
	nccl_tick(a, 1001 + HOLD_NS);
	cs = of_type(&c, "collective");
	assert_int_equal(json_array_size(cs), 1);
	assert_true(json_is_false(json_object_get(json_array_get(cs, 0), "joined")));
	json_decref(cs);
	/* the process ends: what it still holds goes out */
	nccl_on_exit(a, PID);
	cs = of_type(&c, "collective");
	assert_int_equal(json_array_size(cs), 2);
	assert_json_str(json_array_get(cs, 1), "op", "broadcast");
	json_decref(cs);
	assert_int_equal(nccl_stat(a, "kernel_missed"), 1);
	assert_int_equal(nccl_stat(a, "collectives"), 2);
	agent_del(a, &c);
}

/* no shim (or a shim without GPU): at once; unknown comm, destroy, bad api counted */
static void test_unknown_and_bad(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c);
	struct nccl_comm_event d = {
	    .hdr = {.type = EV_NCCL_COMM, .size = sizeof(d), .pid = PID, .tid = TID, .ts_ns = 50},
	    .api = NCCL_COMM_DESTROY,
	    .n_comms = 1,
	    .nranks = -1,
	    .rank = -1};
	json_t *cs;

	(void)state;
	nccl_on_shim(a, PID, false);
	call(a, NCCL_SEND, 100, 0, 0xabc0);
	cs = of_type(&c, "collective");
	assert_int_equal(json_array_size(cs), 1);
	assert_json_str(json_array_get(cs, 0), "comm", "0xabc0");
	assert_true(json_is_false(json_object_get(json_array_get(cs, 0), "comm_known")));
	assert_true(json_is_null(json_object_get(json_array_get(cs, 0), "rank")));
	json_decref(cs);

	init_comm(a, COMM, 0, 4, 0x33);
	d.comms[0] = COMM;
	nccl_on_comm(a, &d); /* destroyed: a later call on that pointer is unknown */
	call(a, NCCL_ALL_REDUCE, 200, 0, COMM);
	cs = of_type(&c, "collective");
	assert_true(json_is_false(json_object_get(json_array_get(cs, 1), "comm_known")));
	json_decref(cs);
	cs = of_type(&c, "nccl_comm");
	assert_int_equal(json_array_size(cs), 2);
	assert_json_str(json_array_get(cs, 1), "api", "ncclCommDestroy");
	json_decref(cs);

	call(a, NCCL_API_COUNT + 3, 300, 0, COMM);
	d.api = 999;
	nccl_on_comm(a, &d);
	assert_int_equal(nccl_stat(a, "bad_api"), 2);
	assert_int_equal(nccl_stat(a, "comm_unknown"), 2);
	assert_int_equal(nccl_stat(a, "collectives"), 2);
	agent_del(a, &c);
}

/* process of parent rank r (its thread: the same id) */
#define RPID(r) (5000u + (uint32_t)(r))
#define PARENT 0xa000ULL /* every rank's parent comm pointer */
#define NEWC(r, k) (0xb000ULL + 0x100ULL * (k) + (uint64_t)(r)) /* rank r's k-th split comm */

/* parent rank r enters (enter) or returns from its split (color, key); ret an ncclResult_t */
static void split_ev(struct agent *a, int r, bool enter, int color, int key, uint64_t newc, int ret)
{
	struct nccl_comm_event e = {.hdr = {.type = EV_NCCL_COMM,
					    .size = sizeof(e),
					    .pid = RPID(r),
					    .tid = RPID(r),
					    .ts_ns = 100},
				    .api = enter ? NCCL_COMM_SPLIT_ENTER : NCCL_COMM_SPLIT,
				    .parent = PARENT,
				    .nranks = -1,
				    .rank = -1,
				    .color = color,
				    .key = key,
				    .ret = ret};

	if (!enter && (ret == 0 || ret == 7)) {
		e.n_comms = 1;
		e.comms[0] = newc;
	}
	nccl_on_comm(a, &e);
}

/* the nccl_comm record of the split that returned newc in process pid */
static json_t *split_rec(struct cap_sink *c, uint32_t pid, uint64_t newc)
{
	json_t *cs = of_type(c, "nccl_comm"), *r, *out = NULL;
	char want[24];
	size_t i;

	snprintf(want, sizeof(want), "0x%llx", (unsigned long long)newc);
	json_array_foreach(cs, i, r)
	{
		if (!strcmp(json_string_value(json_object_get(r, "api")), "ncclCommSplit") &&
		    json_integer_value(json_object_get(r, "pid")) == pid &&
		    !strcmp(json_string_value(json_object_get(r, "comm")), want))
			out = r;
	}
	json_incref(out);
	json_decref(cs);
	assert_non_null(out);
	return out;
}

/* its split record: rank and nranks (-1: null, not known) */
static void assert_split_rank(struct cap_sink *c, int r, uint64_t newc, int rank, int nranks)
{
	json_t *o = split_rec(c, RPID(r), newc);

	if (rank < 0) {
		assert_true(json_is_null(json_object_get(o, "rank")));
		assert_true(json_is_null(json_object_get(o, "nranks")));
	} else {
		assert_json_int(o, "rank", rank);
		assert_json_int(o, "nranks", nranks);
	}
	json_decref(o);
}

/*
 * A split's ranks as NCCL orders them (nccl.h: by key; NVIDIA/nccl
 * src/init.cc, commGetSplitInfo: ties by parent rank), from every parent
 * rank's entry; NCCL_SPLIT_NOCOLOR gives no comm. Every parent rank enters
 * before any returns, as NCCL's split gathers them first.
 */
static void test_split_ranks(void **state)
{
	const int color[4] = {0, 1, 0, 1}, key[4] = {5, 1, 5, 0};
	/* color 0: ranks 0, 2 (same key: parent order); color 1: 3 (key 0), then 1 */
	const int want_rank[4] = {0, 1, 1, 0};
	const int color2[4] = {7, 7, 7, -1 /* NCCL_SPLIT_NOCOLOR */}, key2[4] = {2, 1, 0, 9};
	struct cap_sink c;
	struct agent *a = agent_new(&c);
	json_t *o, *h0, *h1, *ws, *w;
	size_t i;

	(void)state;
	for (int r = 0; r < 4; r++)
		init_rank(a, RPID(r), PARENT, r, 4, 0x44);
	for (int r = 0; r < 4; r++)
		split_ev(a, r, true, color[r], key[r], 0, 0);
	for (int r = 0; r < 4; r++)
		split_ev(a, r, false, color[r], key[r], NEWC(r, 0), 0);
	for (int r = 0; r < 4; r++)
		assert_split_rank(&c, r, NEWC(r, 0), want_rank[r], 2);
	/* one comm per color: the same hash on its ranks, another on the other color's */
	h0 = split_rec(&c, RPID(0), NEWC(0, 0));
	h1 = split_rec(&c, RPID(2), NEWC(2, 0));
	assert_string_equal(json_string_value(json_object_get(h0, "comm_hash")),
			    json_string_value(json_object_get(h1, "comm_hash")));
	json_decref(h1);
	h1 = split_rec(&c, RPID(1), NEWC(1, 0));
	assert_string_not_equal(json_string_value(json_object_get(h0, "comm_hash")),
				json_string_value(json_object_get(h1, "comm_hash")));
	json_decref(h1);

	/* the second split of the parent: three keys reversed, rank 3 in none */
	for (int r = 0; r < 4; r++)
		split_ev(a, r, true, color2[r], key2[r], 0, 0);
	for (int r = 0; r < 4; r++)
		split_ev(a, r, false, color2[r], key2[r], r < 3 ? NEWC(r, 1) : 0, 0);
	for (int r = 0; r < 3; r++)
		assert_split_rank(&c, r, NEWC(r, 1), 2 - r, 3);
	o = split_rec(&c, RPID(3), 0);
	assert_true(json_is_null(json_object_get(o, "comm_hash")));
	assert_true(json_is_null(json_object_get(o, "rank")));
	json_decref(o);

	/* the color-0 comm's ranks are tracked: its all-reduce is one complete wait */
	call_on(a, RPID(2), RPID(2), NCCL_ALL_REDUCE, 1000, 0, NEWC(2, 0));
	call_on(a, RPID(0), RPID(0), NCCL_ALL_REDUCE, 1500, 0, NEWC(0, 0));
	ws = of_type(&c, "collective_wait");
	assert_int_equal(json_array_size(ws), 1);
	w = json_array_get(ws, 0);
	assert_json_str(w, "comm", json_string_value(json_object_get(h0, "comm_hash")));
	assert_json_str(w, "end", "complete");
	assert_json_int(w, "arrived", 2);
	assert_json_int(w, "last_rank", 0);
	json_array_foreach(json_object_get(w, "ranks"), i, o)
	    assert_int_equal(json_integer_value(json_object_get(o, "pid")),
			     json_integer_value(json_object_get(o, "rank")) ? RPID(2) : RPID(0));
	json_decref(ws);
	json_decref(h0);
	assert_int_equal(nccl_stat(a, "split_rank_unknown"), 0);
	assert_int_equal(nccl_stat(a, "wait_no_rank"), 0);
	agent_del(a, &c);
}

/*
 * A non-blocking split (ncclInProgress) may return before the other ranks
 * entered: its nccl_comm has no rank yet, its collectives have it once
 * every rank entered.
 */
static void test_split_late_entry(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c);
	json_t *cs;

	(void)state;
	for (int r = 0; r < 2; r++)
		init_rank(a, RPID(r), PARENT, r, 2, 0x55);
	split_ev(a, 0, true, 3, 1, 0, 0);
	split_ev(a, 0, false, 3, 1, NEWC(0, 0), 7);
	assert_split_rank(&c, 0, NEWC(0, 0), -1, -1);
	split_ev(a, 1, true, 3, 0, 0, 0);
	split_ev(a, 1, false, 3, 0, NEWC(1, 0), 7);
	assert_split_rank(&c, 1, NEWC(1, 0), 0, 2);
	call_on(a, RPID(0), RPID(0), NCCL_ALL_GATHER, 1000, 0, NEWC(0, 0));
	cs = of_type(&c, "collective");
	assert_json_int(json_array_get(cs, 0), "rank", 1);
	assert_json_int(json_array_get(cs, 0), "nranks", 2);
	json_decref(cs);
	agent_del(a, &c);
}

/*
 * A rank's init return may come after another rank entered the split (seen
 * live: rank 0 returned from its init and entered the split before rank 1's
 * init return probe fired): the split is still derived.
 */
static void test_split_init_after_entry(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c);

	(void)state;
	init_rank(a, RPID(0), PARENT, 0, 2, 0x77);
	split_ev(a, 0, true, 0, 0, 0, 0);
	init_rank(a, RPID(1), PARENT, 1, 2, 0x77);
	split_ev(a, 1, true, 0, 0, 0, 0);
	for (int r = 0; r < 2; r++)
		split_ev(a, r, false, 0, 0, NEWC(r, 0), 0);
	for (int r = 0; r < 2; r++)
		assert_split_rank(&c, r, NEWC(r, 0), r, 2);
	agent_del(a, &c);
}

/* the wait records of the run, each asserted complete with n ranks; their count */
static size_t complete_waits(struct cap_sink *c, int n)
{
	json_t *ws = of_type(c, "collective_wait"), *w;
	size_t i, k = json_array_size(ws);

	json_array_foreach(ws, i, w)
	{
		assert_json_str(w, "end", "complete");
		assert_json_int(w, "arrived", n);
	}
	json_decref(ws);
	return k;
}

/*
 * A rank may return from its init, or its split, and call its first
 * collective before another rank's return is decoded: the ranks to expect
 * come from the entries (every rank enters before any returns), so that
 * collective is one wait of both ranks, not one of rank 0 alone.
 */
static void test_first_collective_waits_all(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c);

	(void)state;
	for (int r = 0; r < 2; r++)
		init_enter(a, RPID(r), r, 2, 0xaa);
	init_rank(a, RPID(0), PARENT, 0, 2, 0xaa);
	call_on(a, RPID(0), RPID(0), NCCL_ALL_REDUCE, 100, 0, PARENT);
	init_rank(a, RPID(1), PARENT, 1, 2, 0xaa);
	call_on(a, RPID(1), RPID(1), NCCL_ALL_REDUCE, 110, 0, PARENT);
	assert_int_equal(complete_waits(&c, 2), 1);
	/* the same on a split comm (keys: rank 1 first) */
	for (int r = 0; r < 2; r++)
		split_ev(a, r, true, 4, 1 - r, 0, 0);
	split_ev(a, 0, false, 4, 1, NEWC(0, 0), 0);
	call_on(a, RPID(0), RPID(0), NCCL_ALL_REDUCE, 200, 0, NEWC(0, 0));
	split_ev(a, 1, false, 4, 0, NEWC(1, 0), 0);
	call_on(a, RPID(1), RPID(1), NCCL_ALL_REDUCE, 210, 0, NEWC(1, 0));
	assert_int_equal(complete_waits(&c, 2), 2);
	assert_int_equal(nccl_stat(a, "wait_incomplete"), 0);
	agent_del(a, &c);
}

/*
 * Not every rank of the parent on this node (2 of 4 initialised here): the
 * split comms are recorded with what is known (hash, no rank) and counted.
 */
static void test_split_not_local(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c);
	json_t *o;

	(void)state;
	for (int r = 0; r < 2; r++)
		init_rank(a, RPID(r), PARENT, r, 4, 0x66);
	for (int r = 0; r < 2; r++)
		split_ev(a, r, true, 0, r, 0, 0);
	for (int r = 0; r < 2; r++)
		split_ev(a, r, false, 0, r, NEWC(r, 0), 0);
	for (int r = 0; r < 2; r++) {
		o = split_rec(&c, RPID(r), NEWC(r, 0));
		assert_true(json_is_null(json_object_get(o, "rank")));
		assert_true(json_is_null(json_object_get(o, "nranks")));
		assert_true(json_is_string(json_object_get(o, "comm_hash")));
		json_decref(o);
	}
	assert_int_equal(nccl_stat(a, "split_rank_unknown"), 2);
	agent_del(a, &c);
}

#define MS 1000000ULL

/* a decode step of rank r (its process RPID(r)) in the instance "tp" */
static void add_step(struct agent *a, int32_t r, uint64_t start, uint64_t dur, uint64_t idle)
{
	struct diag_step st;

	diag_step_init(&st);
	st.instance = "tp";
	st.rank = r;
	st.pid = st.tid = RPID(r);
	st.start_ns = start;
	st.dur_ns = dur;
	st.phase = DIAG_PHASE_DECODE;
	st.source = "marker";
	st.idle_ns = (int64_t)idle;
	diag_add_step(a->diag, &st);
}

/*
 * Rank 1 comes 150 ms late to an all-reduce of 2 ranks; with steps, the
 * second round's step of rank 1 is 150 ms longer, its GPU idle (the peer
 * detector's straggler). Returns the anomaly records.
 */
static json_t *late_rank_anomalies(struct cap_sink *c, bool steps)
{
	struct agent *a = agent_new(c);

	assert_int_equal(diag_new(a, &a->diag), 0);
	assert_non_null(a->diag);
	for (int r = 0; r < 2; r++)
		init_rank(a, RPID(r), NEWC(r, 0), r, 2, 0x88);
	call_on(a, RPID(0), RPID(0), NCCL_ALL_REDUCE, 210 * MS, 0, NEWC(0, 0));
	call_on(a, RPID(1), RPID(1), NCCL_ALL_REDUCE, 360 * MS, 0, NEWC(1, 0));
	nccl_interval(a, false); /* the interval's worst late arrival */
	if (steps) {
		add_step(a, 0, 0, 100 * MS, 0);
		add_step(a, 1, 0, 100 * MS, 0);
		add_step(a, 0, 200 * MS, 100 * MS, 0);
		add_step(a, 1, 200 * MS, 250 * MS, 150 * MS);
	}
	nccl_interval(a, true);
	assert_int_equal(diag_finish(a->diag), 0);
	json_t *an = of_type(c, "anomaly");
	agent_del(a, c);
	return an;
}

/*
 * A straggler is reported once: with its ranks' steps known, as the step's
 * anomaly, whose first suspect is the collective (no anomaly of the
 * interval besides); without steps, as the interval's anomaly (chart
 * collective), its evidence not repeated as a "collective" suspect.
 */
static void test_straggler_once(void **state)
{
	const char *ev = "rank 1 arrived 150.00 ms late at allreduce #0";
	struct cap_sink c;
	json_t *an, *sus;

	(void)state;
	an = late_rank_anomalies(&c, true);
	assert_int_equal(json_array_size(an), 1);
	assert_json_str(json_array_get(an, 0), "chart", "peers");
	assert_json_int(json_array_get(an, 0), "rank", 1);
	/* the late rank's step: its process and thread */
	assert_json_int(json_array_get(an, 0), "pid", RPID(1));
	assert_json_int(json_array_get(an, 0), "tid", RPID(1));
	sus = json_object_get(json_array_get(an, 0), "suspects");
	assert_json_str(json_array_get(sus, 0), "what", "collective");
	assert_non_null(
	    strstr(json_string_value(json_object_get(json_array_get(sus, 0), "evidence")), ev));
	json_decref(an);

	an = late_rank_anomalies(&c, false);
	assert_int_equal(json_array_size(an), 1);
	assert_json_str(json_array_get(an, 0), "kind", "straggler");
	assert_json_str(json_array_get(an, 0), "chart", "collective");
	assert_json_int(json_array_get(an, 0), "rank", 1);
	/* the late rank's process, the thread that called the collective */
	assert_json_int(json_array_get(an, 0), "pid", RPID(1));
	assert_json_int(json_array_get(an, 0), "tid", RPID(1));
	sus = json_object_get(json_array_get(an, 0), "suspects");
	assert_int_equal(json_array_size(sus), 2);
	assert_json_str(json_array_get(sus, 0), "what", "rank");
	assert_non_null(
	    strstr(json_string_value(json_object_get(json_array_get(sus, 0), "evidence")), ev));
	assert_json_str(json_array_get(sus, 1), "what", "comm_wait");
	json_decref(an);
}

/*
 * --detect straggler_abs=MS (docs/events.md, operations.md): a rank later
 * than that is a straggler; 3 ms late is not one at 5 ms, 6 ms is.
 */
static void test_straggler_threshold(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c);
	json_t *ws, *an;

	(void)state;
	assert_int_equal(diag_option(&a->opts, "detect", "straggler_abs=5"), 0);
	assert_int_equal(a->opts.diag.det.straggler_abs_ns, 5 * MS);
	assert_int_equal(diag_option(&a->opts, "detect", "straggler_abs=0"), -EINVAL);
	for (int r = 0; r < 2; r++)
		init_rank(a, RPID(r), NEWC(r, 0), r, 2, 0x99);
	a->opts.mode = MODE_SENTINEL; /* waits written only when a rank is that late */
	call_on(a, RPID(0), RPID(0), NCCL_ALL_REDUCE, 100 * MS, 0, NEWC(0, 0));
	call_on(a, RPID(1), RPID(1), NCCL_ALL_REDUCE, 103 * MS, 0, NEWC(1, 0));
	call_on(a, RPID(0), RPID(0), NCCL_ALL_REDUCE, 200 * MS, 0, NEWC(0, 0));
	call_on(a, RPID(1), RPID(1), NCCL_ALL_REDUCE, 206 * MS, 0, NEWC(1, 0));
	nccl_interval(a, true);
	ws = of_type(&c, "collective_wait");
	assert_int_equal(json_array_size(ws), 1);
	assert_json_int(json_array_get(ws, 0), "seq", 1);
	an = of_type(&c, "anomaly");
	assert_int_equal(json_array_size(an), 1);
	assert_json_int(json_array_get(an, 0), "dur_ns", 6 * MS);
	json_decref(ws);
	json_decref(an);
	agent_del(a, &c);
}

/*
 * The stats record's "gpu" object, every interval for as long as the agent
 * runs: building it must not keep memory (json_object_update() does not take
 * the packed counters: ~830 bytes an interval, 70 MB a day at the default
 * 1 s, until 2026-11-28, seen by LeakSanitizer under bench/shim.sh). 10,000
 * intervals, the heap in use by the end within 64 KiB of the start (it grew
 * ~8 MB).
 */
static void test_gpu_stats_keep_nothing(void **state)
{
	struct cap_sink c;
	struct agent *a = agent_new(&c);
	size_t before, after;

	(void)state;
	for (int round = 0; round < 2; round++) {
		before = mallinfo2().uordblks;
		for (int i = 0; i < 10000; i++) {
			json_t *r = json_object();

			gpu_stats(a, r);
			assert_non_null(json_object_get(json_object_get(r, "gpu"), "gpu_records"));
			json_decref(r);
		}
		after = mallinfo2().uordblks;
	}
	assert_true(after < before + 65536);
	agent_del(a, &c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_kernel_join),
	    cmocka_unit_test(test_hold_expires),
	    cmocka_unit_test(test_unknown_and_bad),
	    cmocka_unit_test(test_split_ranks),
	    cmocka_unit_test(test_split_late_entry),
	    cmocka_unit_test(test_split_init_after_entry),
	    cmocka_unit_test(test_split_not_local),
	    cmocka_unit_test(test_straggler_once),
	    cmocka_unit_test(test_first_collective_waits_all),
	    cmocka_unit_test(test_straggler_threshold),
	    cmocka_unit_test(test_gpu_stats_keep_nothing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
