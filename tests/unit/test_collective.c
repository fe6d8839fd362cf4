// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_collective.c - correlator/src/collective.c: the NCCL tables, the
 * `collective`, `collective_wait` and `collective_summary` writers (parsed
 * back with jansson, every field checked), the cross-rank wait tracker
 * (completion, missing ranks, timeout, eviction, duplicates) and the
 * per-interval aggregate.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "collective.h"
#include "json_assert.h"

static void test_tables(void **state)
{
	(void)state;
	/* nccl.h of NCCL 2.28.9: ncclBfloat16 = 9, ncclFloat8e5m2 = 11, ncclNumTypes = 12 */
	assert_string_equal(corr_nccl_type_name(9), "bfloat16");
	assert_int_equal(corr_nccl_type_size(9), 2);
	assert_int_equal(corr_nccl_type_size(7), 4);
	assert_int_equal(corr_nccl_type_size(4), 8);
	assert_int_equal(corr_nccl_type_size(11), 1);
	assert_null(corr_nccl_type_name(12));
	assert_int_equal(corr_nccl_type_size(-1), 0);
	assert_int_equal(corr_nccl_type_parse("bf16", 4), 9);
	assert_int_equal(corr_nccl_type_parse("BFloat16", 8), 9);
	assert_int_equal(corr_nccl_type_parse("Float", 5), 7);
	assert_int_equal(corr_nccl_type_parse("int8_t", 6), 0);
	assert_int_equal(corr_nccl_type_parse("unsigned char", 13), 1);
	assert_int_equal(corr_nccl_type_parse("Long", 4), 4);
	assert_int_equal(corr_nccl_type_parse("complex64", 9), CORR_COLL_NONE);
	assert_int_equal(corr_nccl_redop_parse("Sum", 3), 0);
	assert_int_equal(corr_nccl_redop_parse("Avg", 3), 4);
	assert_int_equal(corr_nccl_redop_parse("PreMulSum", 9), 5);
	assert_string_equal(corr_nccl_redop_name(2), "max");
	assert_string_equal(corr_nccl_redop_name(7), "premulsum");
	assert_null(corr_nccl_redop_name(CORR_COLL_NONE));
	assert_int_equal(corr_coll_op_parse("AllReduce", 9), CORR_COLL_ALLREDUCE);
	assert_int_equal(corr_coll_op_parse("_allgather_base", 15), CORR_COLL_ALLGATHER);
	assert_int_equal(corr_coll_op_parse("reduce_scatter_tensor", 21), CORR_COLL_REDUCESCATTER);
	assert_int_equal(corr_coll_op_parse("all_to_all", 10), CORR_COLL_ALLTOALL);
	assert_int_equal(corr_coll_op_parse("SendRecv", 8), CORR_COLL_SENDRECV);
	assert_int_equal(corr_coll_op_parse("reduce", 6), CORR_COLL_REDUCE);
	assert_int_equal(corr_coll_op_parse("recv", 4), CORR_COLL_RECV);
	assert_int_equal(corr_coll_op_parse("wait", 4), CORR_COLL_UNKNOWN);
	assert_string_equal(corr_coll_op_name(CORR_COLL_REDUCESCATTER), "reducescatter");
	/* FNV-1a 64 of "a" (the published test vector) */
	assert_true(corr_coll_hash("a", 1) == 0xaf63dc4c8601ec8cULL);
}

/*
 * The members that a `collective` and a `collective_wait` record of the
 * 4-rank allreduce on comm 0x9f3a12c4deadbeef share: type, who, when, which.
 */
static void assert_coll_head(json_t *o, const char *type, int pid, int tid, int64_t ts_ns,
			     int64_t seq)
{
	assert_json_str(o, "type", type);
	assert_json_int(o, "pid", pid);
	assert_json_int(o, "tid", tid);
	assert_json_int(o, "ts_ns", ts_ns);
	assert_json_str(o, "comm", "0x9f3a12c4deadbeef");
	assert_json_int(o, "seq", seq);
	assert_json_str(o, "op", "allreduce");
	assert_json_int(o, "nranks", 4);
}

static struct corr_collective coll(int32_t rank, uint64_t seq, uint64_t enq, uint64_t gs)
{
	return (struct corr_collective){
	    .pid = 100 + (uint32_t)rank,
	    .tid = 200 + (uint32_t)rank,
	    .comm_hash = 0x9f3a12c4deadbeefULL,
	    .rank = rank,
	    .nranks = 4,
	    .seq = seq,
	    .op = CORR_COLL_ALLREDUCE,
	    .count = 1000,
	    .datatype = 9,
	    .redop = 0,
	    .root = CORR_COLL_NONE,
	    .stream = 0x7f00,
	    .enqueue_ns = enq,
	    .gpu_start_ns = gs,
	    .gpu_end_ns = gs ? gs + 500 : 0,
	    .kernel = gs ? "ncclDevKernel_AllReduce_Sum_bf16_RING_LL" : NULL,
	};
}

static void test_collective_json(void **state)
{
	struct corr_json_common cm = {.host = "h", .instance = "i"};
	struct corr_coll_counters n = {0};
	struct corr_collective c = coll(2, 7, 1000, 3000);
	char buf[2048];
	json_error_t je;
	json_t *o;
	int len;

	(void)state;
	c.group_id = 3;
	c.algo = "RING";
	c.proto = "LL";
	c.device = 1;
	corr_coll_check(&c, &n);
	assert_int_equal(c.bytes, 2000);
	len = corr_coll_to_json(buf, sizeof(buf), &cm, &c);
	assert_true(len > 0);
	o = json_loadb(buf, (size_t)len, 0, &je);
	assert_non_null(o);
	assert_json_int(o, "schema", 1);
	assert_coll_head(o, "collective", 102, 202, 1000, 7);
	assert_json_str(o, "host", "h");
	assert_json_str(o, "instance", "i");
	assert_true(json_is_true(json_object_get(o, "comm_known")));
	assert_json_int(o, "rank", 2);
	assert_json_int(o, "count", 1000);
	assert_json_str(o, "datatype", "bfloat16");
	assert_json_int(o, "datatype_id", 9);
	assert_json_int(o, "bytes", 2000);
	assert_json_str(o, "redop", "sum");
	assert_true(json_is_null(json_object_get(o, "root")));
	assert_true(json_is_null(json_object_get(o, "peer")));
	assert_json_str(o, "stream", "0x7f00");
	assert_json_int(o, "enqueue_ns", 1000);
	assert_json_int(o, "group", 3);
	assert_true(json_is_true(json_object_get(o, "joined")));
	assert_json_int(o, "gpu_start_ns", 3000);
	assert_json_int(o, "gpu_end_ns", 3500);
	assert_json_int(o, "gpu_dur_ns", 500);
	assert_json_int(o, "device", 1);
	assert_json_str(o, "kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
	assert_json_str(o, "algorithm", "RING");
	assert_json_str(o, "protocol", "LL");
	assert_true(json_is_false(json_object_get(o, "from_kernel_name")));
	assert_int_equal(json_object_size(o), 32); /* 7 common + 25 */
	json_decref(o);

	/* bad input: unknown datatype and comm, a send with its peer, not joined */
	c = coll(0, 0, 50, 0);
	c.op = CORR_COLL_SEND;
	c.root = 3;
	c.datatype = 42;
	c.redop = CORR_COLL_NONE;
	c.flags = CORR_COLL_F_COMM_UNKNOWN;
	corr_coll_check(&c, &n);
	assert_int_equal(c.bytes, 0);
	assert_true(c.flags & CORR_COLL_F_DTYPE_UNKNOWN);
	assert_int_equal(n.collectives, 2);
	assert_int_equal(n.dtype_unknown, 1);
	assert_int_equal(n.comm_unknown, 1);
	assert_int_equal(n.joined, 1);
	len = corr_coll_to_json(buf, sizeof(buf), NULL, &c);
	assert_true(len > 0);
	o = json_loadb(buf, (size_t)len, 0, &je);
	assert_non_null(o);
	assert_true(json_is_false(json_object_get(o, "comm_known")));
	assert_true(json_is_null(json_object_get(o, "datatype")));
	assert_json_int(o, "datatype_id", 42);
	assert_json_int(o, "bytes", 0);
	assert_true(json_is_null(json_object_get(o, "redop")));
	assert_true(json_is_null(json_object_get(o, "root")));
	assert_json_int(o, "peer", 3);
	assert_true(json_is_false(json_object_get(o, "joined")));
	assert_true(json_is_null(json_object_get(o, "gpu_start_ns")));
	assert_true(json_is_null(json_object_get(o, "kernel")));
	json_decref(o);
	assert_int_equal(corr_coll_to_json(buf, 40, NULL, &c), -ENOSPC);
}

#define MAXR 16
struct got {
	int n;
	struct corr_wait w[MAXR];
	struct corr_wait_rank r[MAXR][CORR_WAIT_MAX_RANKS];
	int32_t miss[MAXR][CORR_WAIT_MAX_RANKS];
	char json[MAXR][4096];
	char ev[MAXR][512];
};

static void on_wait(void *ctx, const struct corr_wait *w)
{
	struct got *g = ctx;
	int i = g->n++;

	assert_true(i < MAXR);
	g->w[i] = *w;
	memcpy(g->r[i], w->ranks, w->n_arrived * sizeof(w->ranks[0]));
	memcpy(g->miss[i], w->missing, w->n_missing * sizeof(w->missing[0]));
	g->w[i].ranks = g->r[i];
	g->w[i].missing = g->miss[i];
	assert_true(corr_wait_to_json(g->json[i], sizeof(g->json[i]), NULL, w) > 0);
	assert_int_equal(corr_wait_evidence(g->ev[i], sizeof(g->ev[i]), w), 0);
}

static void test_wait_complete(void **state)
{
	struct got *g = calloc(1, sizeof(*g));
	struct corr_waits_opts o = {.sz = sizeof(o), .emit = on_wait};
	struct corr_waits *w;
	struct corr_collective c;
	json_error_t je;
	json_t *j, *a;

	(void)state;
	o.emit_ctx = g;
	w = corr_waits__new(&o);
	assert_non_null(w);
	/* seq 5: ranks 0-2 start their kernels at 1.0, 1.2, 1.1 ms, rank 3 at 13.5 ms */
	c = coll(0, 5, 900000, 1000000);
	assert_int_equal(corr_waits__add(w, &c), 0);
	c = coll(2, 5, 900000, 1100000);
	corr_waits__add(w, &c);
	c = coll(1, 5, 900000, 1200000);
	corr_waits__add(w, &c);
	c = coll(2, 5, 900000, 1100000); /* the same rank again */
	corr_waits__add(w, &c);
	assert_int_equal(g->n, 0);
	assert_int_equal(corr_waits__pending(w), 1);
	c = coll(3, 5, 13000000, 13500000);
	corr_waits__add(w, &c);
	assert_int_equal(g->n, 1);
	assert_int_equal(corr_waits__pending(w), 0);
	assert_int_equal(g->w[0].end, CORR_WAIT_COMPLETE);
	assert_int_equal(g->w[0].n_expected, 4);
	assert_int_equal(g->w[0].n_arrived, 4);
	assert_int_equal(g->w[0].n_missing, 0);
	assert_int_equal(g->w[0].last_rank, 3);
	assert_int_equal(g->w[0].late_ns, 13500000 - 1200000);
	assert_int_equal(g->w[0].wait_max_ns, 12500000);
	assert_int_equal(g->w[0].wait_total_ns, 12500000 + 12400000 + 12300000);
	assert_int_equal(g->r[0][0].rank, 0);
	assert_int_equal(g->r[0][1].rank, 2);
	assert_int_equal(g->r[0][2].rank, 1);
	assert_int_equal(g->r[0][2].wait_ns, 12300000);
	assert_int_equal(g->r[0][3].wait_ns, 0);
	assert_string_equal(g->ev[0],
			    "rank 3 arrived 12.30 ms late at allreduce #5 (comm 9f3a12c4…); "
			    "ranks 0-2 spent 37.20 ms waiting");
	j = json_loads(g->json[0], 0, &je);
	assert_non_null(j);
	assert_coll_head(j, "collective_wait", 103, 203, 1000000, 5);
	assert_json_str(j, "end", "complete");
	assert_json_int(j, "expected", 4);
	assert_json_int(j, "arrived", 4);
	assert_json_int(j, "last_rank", 3);
	assert_json_int(j, "last_arrival_ns", 13500000);
	assert_json_int(j, "late_ns", 12300000);
	assert_json_int(j, "wait_max_ns", 12500000);
	assert_json_int(j, "wait_total_ns", 37200000);
	assert_true(json_is_false(json_object_get(j, "op_mismatch")));
	a = json_object_get(j, "ranks");
	assert_int_equal(json_array_size(a), 4);
	assert_json_int(json_array_get(a, 1), "rank", 2);
	assert_json_int(json_array_get(a, 1), "pid", 102);
	assert_json_int(json_array_get(a, 1), "tid", 202);
	assert_json_int(json_array_get(a, 1), "arrival_ns", 1100000);
	assert_json_str(json_array_get(a, 1), "arrival", "kernel");
	assert_json_int(json_array_get(a, 1), "wait_ns", 12400000);
	assert_int_equal(json_array_size(json_object_get(j, "missing_ranks")), 0);
	json_decref(j);
	assert_int_equal(corr_waits__counters(w)->arrivals, 5);
	assert_int_equal(corr_waits__counters(w)->duplicates, 1);
	assert_int_equal(corr_waits__counters(w)->complete, 1);
	corr_waits__free(w);
	free(g);
}

static void test_wait_missing_timeout_evict(void **state)
{
	struct got *g = calloc(1, sizeof(*g));
	struct corr_waits_opts o = {
	    .sz = sizeof(o), .emit = on_wait, .capacity = 2, .timeout_ns = 1000};
	int32_t local[] = {1, 0};
	struct corr_waits *w;
	struct corr_collective c;
	json_t *j;

	(void)state;
	o.emit_ctx = g;
	w = corr_waits__new(&o);
	assert_non_null(w);
	/* a comm of 4 ranks with 2 on this node: complete with ranks 0 and 1 */
	assert_int_equal(corr_waits__expect(w, 0x9f3a12c4deadbeefULL, local, 2), 0);
	c = coll(1, 0, 100, 0); /* enqueue only */
	corr_waits__add(w, &c);
	c = coll(0, 0, 400, 0);
	corr_waits__add(w, &c);
	assert_int_equal(g->n, 1);
	assert_int_equal(g->w[0].n_expected, 2);
	assert_int_equal(g->w[0].last_rank, 0);
	assert_int_equal(g->w[0].late_ns, 300);
	assert_false(g->r[0][0].from_kernel);
	/* undeclared comm of 3 ranks: rank 2 never comes, the timeout emits it */
	c = coll(0, 0, 5000, 0);
	c.comm_hash = 77;
	c.nranks = 3;
	corr_waits__add(w, &c);
	c.rank = 1;
	c.enqueue_ns = 5200;
	corr_waits__add(w, &c);
	corr_waits__advance(w, 6000); /* 5000 + 1000 is not before 6000 */
	assert_int_equal(g->n, 1);
	corr_waits__advance(w, 6001);
	assert_int_equal(g->n, 2);
	assert_int_equal(g->w[1].end, CORR_WAIT_TIMEOUT);
	assert_int_equal(g->w[1].n_missing, 1);
	assert_int_equal(g->miss[1][0], 2);
	assert_string_equal(g->ev[1],
			    "rank 1 arrived 0.00 ms late at allreduce #0 (comm 00000000…); "
			    "rank 0 spent 0.00 ms waiting; rank 2 never arrived");
	j = json_loads(g->json[1], 0, NULL);
	assert_json_str(j, "end", "timeout");
	assert_int_equal(json_array_size(json_object_get(j, "missing_ranks")), 1);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "missing_ranks"), 0)),
			 2);
	json_decref(j);
	/* capacity 2: a third pending entry evicts the oldest */
	for (uint64_t s = 1; s <= 3; s++) {
		c = coll(0, s, 10000 + s, 0);
		c.comm_hash = 77;
		c.nranks = 3;
		corr_waits__add(w, &c);
	}
	assert_int_equal(g->n, 3);
	assert_int_equal(g->w[2].end, CORR_WAIT_EVICTED);
	assert_int_equal(g->w[2].seq, 1);
	assert_int_equal(g->w[2].n_missing, 2);
	assert_int_equal(corr_waits__pending(w), 2);
	corr_waits__flush(w);
	assert_int_equal(g->n, 5);
	assert_int_equal(g->w[3].end, CORR_WAIT_FLUSH);
	assert_int_equal(g->w[3].seq, 2);
	assert_int_equal(g->w[4].seq, 3);
	/* no rank: counted, not tracked */
	c.rank = CORR_COLL_NONE;
	corr_waits__add(w, &c);
	assert_int_equal(corr_waits__counters(w)->no_rank, 1);
	assert_int_equal(corr_waits__counters(w)->evicted, 1);
	assert_int_equal(corr_waits__counters(w)->incomplete, 4);
	assert_int_equal(corr_waits__counters(w)->complete, 1);
	assert_int_equal(corr_waits__pending(w), 0);
	corr_waits__free(w);
	free(g);
}

struct rows {
	int n;
	struct corr_coll_row r[8];
};

static void on_row(void *ctx, const struct corr_coll_row *r)
{
	struct rows *rs = ctx;

	assert_true(rs->n < 8);
	rs->r[rs->n++] = *r;
}

static void test_agg(void **state)
{
	struct corr_coll_agg *a = corr_coll_agg__new(2);
	struct corr_collective c0 = coll(0, 0, 100, 1000), c1 = coll(1, 0, 100, 1200), c2;
	struct corr_wait_rank wr[2] = {
	    {.rank = 0, .pid = 100, .tid = 200, .arrival_ns = 1000, .wait_ns = 200},
	    {.rank = 1, .pid = 101, .tid = 201, .arrival_ns = 1200, .wait_ns = 0},
	};
	struct corr_wait w = {.comm_hash = c0.comm_hash,
			      .op = CORR_COLL_ALLREDUCE,
			      .nranks = 4,
			      .n_arrived = 2,
			      .ranks = wr,
			      .late_ns = 200};
	struct rows rs = {0};
	char buf[1024];
	json_t *j;

	(void)state;
	assert_non_null(a);
	corr_coll_check(&c0, NULL);
	corr_coll_check(&c1, NULL);
	corr_coll_agg__add(a, &c0);
	corr_coll_agg__add(a, &c0);
	corr_coll_agg__add(a, &c1);
	assert_int_equal(corr_coll_agg__add_wait(a, &w), 0);
	c2 = c0;
	c2.op = CORR_COLL_BROADCAST; /* a third key: capacity 2 */
	assert_int_equal(corr_coll_agg__add(a, &c2), -ENOSPC);
	assert_int_equal(corr_coll_agg__dropped(a), 1);
	corr_coll_agg__cut(a, on_row, &rs);
	assert_int_equal(rs.n, 2);
	assert_int_equal(rs.r[0].calls, 2);
	assert_int_equal(rs.r[0].bytes, 4000);
	assert_int_equal(rs.r[0].joined, 2);
	assert_int_equal(rs.r[0].gpu_ns, 1000);
	assert_int_equal(rs.r[0].waits, 1);
	assert_int_equal(rs.r[0].wait_ns, 200);
	assert_int_equal(rs.r[0].last, 0);
	assert_int_equal(rs.r[1].last, 1);
	assert_int_equal(rs.r[1].late_ns, 200);
	assert_true(corr_coll_row_to_json(buf, sizeof(buf), NULL, &rs.r[1], 0, 1000000) > 0);
	j = json_loads(buf, 0, NULL);
	assert_non_null(j);
	assert_json_str(j, "type", "collective_summary");
	assert_json_int(j, "pid", 101);
	assert_null(json_object_get(j, "tid"));
	assert_json_int(j, "ts_ns", 0);
	assert_json_int(j, "interval_start_ns", 0);
	assert_json_int(j, "interval_end_ns", 1000000);
	assert_json_str(j, "comm", "0x9f3a12c4deadbeef");
	assert_json_str(j, "op", "allreduce");
	assert_json_int(j, "rank", 1);
	assert_json_int(j, "nranks", 4);
	assert_json_int(j, "calls", 1);
	assert_json_int(j, "bytes", 2000);
	assert_json_int(j, "joined", 1);
	assert_json_int(j, "gpu_ns", 500);
	assert_json_int(j, "waits", 1);
	assert_json_int(j, "wait_ns", 0);
	assert_json_int(j, "last", 1);
	assert_json_int(j, "late_ns", 200);
	json_decref(j);
	rs.n = 0;
	corr_coll_agg__cut(a, on_row, &rs);
	assert_int_equal(rs.n, 0);
	corr_coll_agg__free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tables),	  cmocka_unit_test(test_collective_json),
	    cmocka_unit_test(test_wait_complete), cmocka_unit_test(test_wait_missing_timeout_evict),
	    cmocka_unit_test(test_agg),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
