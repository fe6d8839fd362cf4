// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_coll_replay.c - correlator/src/coll_replay.c and the Kineto reader's
 * communication ops on the real traces of ../shared/data (skipped when it is
 * absent), and NCCL kernel names.
 *
 * The expected numbers were computed independently with python3's json
 * module from the same files (kernel events whose name starts with
 * ncclDevKernel_/ncclKernel_, their runtime launch by correlation id, ts and
 * dur converted to ns with exact decimals, the args of record_param_comms /
 * kernel events), and the cross-rank pairs of the HTA sampled ranks by
 * reading their kernel ends side by side: a collective ends on both ranks
 * within 0.4 ms, the unpaired ones end 14 ms or more apart.
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

#include "collective.h"
#include "test_data.h"

static void test_kernel_names(void **state)
{
	struct corr_collective c = {0};

	(void)state;
	assert_true(corr_coll_from_kernel(
	    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
	    &c));
	assert_int_equal(c.op, CORR_COLL_ALLREDUCE);
	assert_int_equal(c.redop, 0);
	assert_int_equal(c.datatype, 9);
	assert_string_equal(c.algo, "RING");
	assert_string_equal(c.proto, "LL");
	assert_true(c.flags & CORR_COLL_F_OP_FROM_KERNEL);
	memset(&c, 0, sizeof(c));
	assert_true(corr_coll_from_kernel(
	    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", &c));
	assert_int_equal(c.op, CORR_COLL_ALLREDUCE);
	assert_int_equal(c.datatype, 7);
	assert_int_equal(c.redop, 0);
	/* non-reducing: NCCL's placeholder Sum/int8_t is not taken */
	memset(&c, 0, sizeof(c));
	assert_true(corr_coll_from_kernel("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, "
					  "unsigned long, ncclWork*)",
					  &c));
	assert_int_equal(c.op, CORR_COLL_BROADCAST);
	assert_int_equal(c.redop, CORR_COLL_NONE);
	assert_int_equal(c.datatype, CORR_COLL_NONE);
	memset(&c, 0, sizeof(c));
	assert_true(
	    corr_coll_from_kernel("ncclDevKernel_ReduceScatter_MinMax_f8e4m3_NVLS_TREE_LL128", &c));
	assert_int_equal(c.op, CORR_COLL_REDUCESCATTER);
	assert_int_equal(c.redop, CORR_COLL_NONE); /* MinMax: min or max, not told */
	assert_int_equal(c.datatype, 10);
	assert_string_equal(c.algo, "NVLS_TREE");
	assert_string_equal(c.proto, "LL128");
	memset(&c, 0, sizeof(c));
	assert_true(corr_coll_from_kernel(
	    "_Z45ncclDevKernel_AllGather_COLLNET_DIRECT_SIMPLE24ncclDevKernelArgsStorageILm4096EE",
	    &c));
	assert_int_equal(c.op, CORR_COLL_ALLGATHER);
	assert_string_equal(c.algo, "COLLNET_DIRECT");
	assert_string_equal(c.proto, "SIMPLE");
	memset(&c, 0, sizeof(c));
	assert_true(
	    corr_coll_from_kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", &c));
	assert_int_equal(c.op, CORR_COLL_SENDRECV);
	/* an NCCL kernel of a collective the table does not know: still one, op unknown */
	memset(&c, 0, sizeof(c));
	assert_true(corr_coll_from_kernel("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage)", &c));
	assert_int_equal(c.op, CORR_COLL_UNKNOWN);
	assert_false(corr_coll_from_kernel("_Z99ncclDevKernel_AllReduce", &c)); /* bad length */
	assert_false(corr_coll_from_kernel("void at::native::reduce_kernel<512, 1>(...)", &c));
	assert_false(corr_coll_from_kernel("my_ncclKernel_AllReduce_copy", &c));
	assert_false(corr_coll_from_kernel(NULL, &c));
}

#define MAXC 4096
#define MAXW 64
struct out {
	uint32_t n;
	struct corr_collective c[MAXC];
	uint32_t file[MAXC];
	uint32_t nw;
	struct corr_wait w[MAXW];
	struct corr_wait_rank r[MAXW][2];
};

static void on_coll(void *ctx, const struct corr_collective *c, uint32_t file)
{
	struct out *o = ctx;

	assert_true(o->n < MAXC);
	o->c[o->n] = *c;
	o->c[o->n].kernel = NULL; /* valid during the callback only */
	o->file[o->n++] = file;
}

static void on_wait(void *ctx, const struct corr_wait *w)
{
	struct out *o = ctx;

	assert_true(o->nw < MAXW);
	assert_true(w->n_arrived <= 2);
	o->w[o->nw] = *w;
	memcpy(o->r[o->nw], w->ranks, w->n_arrived * sizeof(*w->ranks));
	o->w[o->nw].ranks = o->r[o->nw];
	o->w[o->nw].missing = NULL;
	o->nw++;
}

struct run {
	struct corr_collr *cr;
};

static void on_gpu(void *ctx, const struct corr_gpu *g, const struct corr_launch *l)
{
	corr_collr__kernel(ctx, g, l);
}

/* replay files into one builder; the builder's counters after finish */
static struct out *replay(const char **files, int n, struct corr_collr_counters *cnt)
{
	struct out *o = calloc(1, sizeof(*o));
	struct corr_collr_opts cro = {.sz = sizeof(cro), .emit = on_coll, .wait = on_wait};
	struct corr_collr *cr;
	char path[512];

	assert_non_null(o);
	cro.emit_ctx = cro.wait_ctx = o;
	cr = corr_collr__new(&cro);
	assert_non_null(cr);
	for (int i = 0; i < n; i++) {
		struct corr_opts co = {.sz = sizeof(co), .emit = on_gpu, .emit_ctx = cr};
		struct corr_replay_opts ro = {
		    .sz = sizeof(ro), .comm = corr_collr_op, .comm_ctx = cr};
		struct corr_replay_stats st = {0};

		snprintf(path, sizeof(path), "%s/kineto/%s", test_data_dir(), files[i]);
		assert_int_equal(corr_replay_file(path, &co, &ro, &st), 0);
		assert_true(st.dist_known);
		assert_int_equal(
		    corr_collr__end_file(cr, (int32_t)st.dist_rank, (int32_t)st.dist_world), 0);
	}
	assert_int_equal(corr_collr__finish(cr), 0);
	*cnt = *corr_collr__counters(cr);
	corr_collr__free(cr);
	return o;
}

static void test_vllm_tp4(void **state)
{
	const char *f[] = {"tracemap_vllm_llama_tp4_h100_rank0.pt.trace.json.gz"};
	struct corr_collr_counters n;
	struct out *o;
	uint64_t ar = 0, ag = 0, ar_gpu = 0, ag_gpu = 0, seq = 0;
	const struct corr_collective *first = NULL;

	(void)state;
	if (!test_data_dir())
		skip(); /* ../shared/data absent */
	o = replay(f, 1, &n);
	assert_int_equal(o->n, 171);
	assert_int_equal(n.collectives, 171);
	assert_int_equal(n.comm_unknown, 161); /* pynccl calls carry no process group */
	assert_int_equal(n.count_unknown, 161);
	assert_int_equal(n.unjoined, 0);
	assert_int_equal(n.waits, 0); /* one rank: nothing to compare */
	assert_int_equal(o->nw, 0);
	for (uint32_t i = 0; i < o->n; i++) {
		const struct corr_collective *c = &o->c[i];

		assert_int_equal(c->rank, 0);
		assert_int_equal(c->nranks, 4);
		assert_int_equal(c->pid, 8013);
		assert_int_equal(c->tid, 8013);
		assert_int_equal(c->datatype, 9);
		assert_string_equal(c->algo, "RING");
		assert_string_equal(c->proto, "LL");
		if (c->op == CORR_COLL_ALLREDUCE) {
			/* ncclDevKernel_AllReduce_Sum_bf16_RING_LL: everything from the name */
			assert_true(c->flags & CORR_COLL_F_OP_FROM_KERNEL);
			assert_true(c->flags & CORR_COLL_F_COMM_UNKNOWN);
			assert_int_equal(c->redop, 0);
			assert_int_equal(c->stream, 7);
			assert_int_equal(c->seq, seq++); /* in enqueue order */
			if (!first)
				first = c;
			ar++;
			ar_gpu += c->gpu_end_ns - c->gpu_start_ns;
		} else {
			/* record_param_comms _allgather_base, process group "3" */
			assert_int_equal(c->op, CORR_COLL_ALLGATHER);
			assert_false(c->flags & CORR_COLL_F_COMM_UNKNOWN);
			assert_int_equal(c->count, 32064);
			assert_int_equal(c->bytes, 64128);
			assert_int_equal(c->redop, CORR_COLL_NONE);
			assert_int_equal(c->stream, 171);
			assert_true(c->comm_hash == corr_coll_hash("pg:3", 4));
			ag++;
			ag_gpu += c->gpu_end_ns - c->gpu_start_ns;
		}
	}
	assert_int_equal(ar, 161);
	assert_int_equal(ag, 10);
	assert_int_equal(ar_gpu, 16509216);
	assert_int_equal(ag_gpu, 240124);
	assert_int_equal(first->gpu_start_ns, 3676599928470048ULL);
	assert_int_equal(first->gpu_end_ns, 3676599928622014ULL);
	assert_int_equal(first->enqueue_ns, 3676599928459795ULL); /* its cudaLaunchKernelExC */
	free(o);
}

static void test_ddp_a100_args(void **state)
{
	const char *f[] = {"hta_ddp_a100_rank0_nccl_data.json.gz"};
	struct corr_collr_counters n;
	struct out *o;
	uint64_t bytes = 0, gpu = 0, ar = 0, bc = 0;

	(void)state;
	if (!test_data_dir())
		skip();
	o = replay(f, 1, &n);
	assert_int_equal(o->n, 21);
	assert_int_equal(n.comm_unknown, 0);
	assert_int_equal(n.count_unknown, 0);
	assert_int_equal(n.dtype_unknown, 0);
	for (uint32_t i = 0; i < o->n; i++) {
		const struct corr_collective *c = &o->c[i];

		/* the kernel events carry Collective name, dtype, In msg nelems, group "0" */
		assert_true(c->comm_hash == corr_coll_hash("pg:0", 4));
		assert_int_equal(c->rank, 0);
		assert_int_equal(c->nranks, 2);
		assert_false(c->flags & CORR_COLL_F_OP_FROM_KERNEL);
		ar += c->op == CORR_COLL_ALLREDUCE;
		bc += c->op == CORR_COLL_BROADCAST;
		bytes += c->bytes;
		gpu += c->gpu_end_ns - c->gpu_start_ns;
		if (c->op == CORR_COLL_BROADCAST && c->count == 53)
			assert_int_equal(c->datatype, 4); /* "Long" */
	}
	assert_int_equal(ar, 15);
	assert_int_equal(bc, 6);
	assert_int_equal(bytes, 307323096);
	assert_int_equal(gpu, 46876493);
	free(o);
}

/* the five pairs, read by hand: comm stream, rank 0 start, rank 1 start (ns), op */
static const struct {
	uint32_t stream;
	uint64_t s0, s1;
	enum corr_coll_op op;
	uint64_t count;
} pairs[] = {
    {84, 1682725898125052000ULL, 1682725898129911000ULL, CORR_COLL_ALLTOALL, 0},
    {84, 1682725898295662000ULL, 1682725898298964000ULL, CORR_COLL_ALLREDUCE, 19618307},
    {84, 1682725899146327000ULL, 1682725899168655000ULL, CORR_COLL_ALLREDUCE, 5716654},
    {203, 1682725898585321000ULL, 1682725898585405000ULL, CORR_COLL_ALLGATHER, 16777216},
    {203, 1682725899185890000ULL, 1682725899187182000ULL, CORR_COLL_ALLGATHER, 16777216},
};

static void test_hta_two_ranks(void **state)
{
	const char *f[] = {"hta_sampled_rank-0.json.gz", "hta_sampled_rank-1.json.gz"};
	struct corr_collr_counters n;
	struct out *o;
	uint32_t complete = 0, flushed = 0;

	(void)state;
	if (!test_data_dir())
		skip();
	o = replay(f, 2, &n);
	/* 10 ncclKernel_SendRecv per rank; the ops around their launches name them */
	assert_int_equal(o->n, 20);
	assert_int_equal(n.matched, 5);
	assert_int_equal(n.unmatched, 10);
	assert_int_equal(n.waits, 15);
	assert_int_equal(o->nw, 15);
	assert_int_equal(n.comm_unknown, 20); /* no process group in these traces: by stream */
	for (uint32_t i = 0; i < o->nw; i++) {
		const struct corr_wait *w = &o->w[i];
		bool found = false;

		assert_int_equal(w->nranks, 128);   /* world_size */
		assert_int_equal(w->n_expected, 2); /* the two files' ranks */
		if (w->end == CORR_WAIT_FLUSH) {
			flushed++;
			assert_int_equal(w->n_arrived, 1);
			assert_int_equal(w->n_missing, 1);
			continue;
		}
		assert_int_equal(w->end, CORR_WAIT_COMPLETE);
		complete++;
		assert_false(w->op_mismatch);
		for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++) {
			char id[32];

			if (w->ranks[0].arrival_ns != pairs[p].s0)
				continue;
			found = true;
			snprintf(id, sizeof(id), "stream:%u", pairs[p].stream);
			assert_true(w->comm_hash == corr_coll_hash(id, strlen(id)));
			assert_int_equal(w->op, pairs[p].op);
			/* rank 1 came last every time, kernel start against kernel start */
			assert_int_equal(w->last_rank, 1);
			assert_int_equal(w->ranks[0].rank, 0);
			assert_int_equal(w->ranks[1].arrival_ns, pairs[p].s1);
			assert_int_equal(w->late_ns, pairs[p].s1 - pairs[p].s0);
			assert_int_equal(w->ranks[0].wait_ns, pairs[p].s1 - pairs[p].s0);
			assert_int_equal(w->ranks[0].pid, 4037);
			assert_int_equal(w->ranks[1].pid, 4045);
			if (p == 2) {
				/* the example of docs/operations.md, "A slow rank" */
				char ev[192];

				assert_int_equal(w->seq, 12);
				assert_int_equal(corr_wait_evidence(ev, sizeof(ev), w), 0);
				assert_string_equal(ev,
						    "rank 1 arrived 22.33 ms late at allreduce #12 "
						    "(comm 11d7d6e7…); rank 0 spent 22.33 ms "
						    "waiting");
			}
		}
		assert_true(found);
	}
	assert_int_equal(complete, 5);
	assert_int_equal(flushed, 10);
	/* the matched collectives agree on their size on both ranks (all-to-all splits may not) */
	for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++) {
		uint32_t both = 0;

		for (uint32_t i = 0; i < o->n; i++)
			if (o->c[i].gpu_start_ns == pairs[p].s0 ||
			    o->c[i].gpu_start_ns == pairs[p].s1) {
				both++;
				assert_int_equal(o->c[i].op, pairs[p].op);
				if (pairs[p].count)
					assert_int_equal(o->c[i].count, pairs[p].count);
			}
		assert_int_equal(both, 2);
	}
	free(o);
}

/* the same rank twice: refused with -EEXIST, its collectives kept, nothing matched */
static void test_same_rank_twice(void **state)
{
	struct out *o = calloc(1, sizeof(*o));
	struct corr_collr_opts cro = {.sz = sizeof(cro), .emit = on_coll, .wait = on_wait};
	struct corr_collr *cr;
	struct corr_gpu g = {.kind = CORR_KIND_KERNEL,
			     .name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
			     .start_ns = 100,
			     .end_ns = 200};
	struct corr_launch l = {.pid = 1, .tid = 1, .ts_ns = 50, .api = "cudaLaunchKernel"};

	(void)state;
	cro.emit_ctx = cro.wait_ctx = o;
	cr = corr_collr__new(&cro);
	assert_int_equal(corr_collr__kernel(cr, &g, &l), 1);
	assert_int_equal(corr_collr__end_file(cr, 0, 2), 0);
	assert_int_equal(corr_collr__kernel(cr, &g, &l), 1);
	assert_int_equal(corr_collr__end_file(cr, 0, 2), -EEXIST);
	g.name = "volta_sgemm_128x64_nn";
	assert_int_equal(corr_collr__kernel(cr, &g, &l), 0);
	assert_int_equal(corr_collr__finish(cr), 0);
	assert_int_equal(o->n, 2);
	assert_int_equal(o->nw, 0);
	/* a kernel alone: op from its name, count unknown, comm from the stream */
	assert_true(o->c[0].flags & CORR_COLL_F_COUNT_UNKNOWN);
	assert_true(o->c[0].flags & CORR_COLL_F_COMM_UNKNOWN);
	assert_int_equal(o->c[0].datatype, 7);
	assert_int_equal(corr_collr__counters(cr)->count_unknown, 2);
	corr_collr__free(cr);
	free(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_kernel_names),    cmocka_unit_test(test_vllm_tp4),
	    cmocka_unit_test(test_ddp_a100_args),   cmocka_unit_test(test_hta_two_ranks),
	    cmocka_unit_test(test_same_rank_twice),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
