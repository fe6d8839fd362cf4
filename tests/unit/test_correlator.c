// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_correlator.c - the join on synthetic events: order, lateness, a side
 * that never comes, pid reuse, eviction, clock offsets, graphs, nested
 * runtime/driver calls, uprobe <-> callback matching; stats; JSON output.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "correlator.h"
#include "../../correlator/src/internal.h"
#include "json_assert.h"

#define MAXOUT 64

struct got {
	int n;
	struct corr_gpu g[MAXOUT];
	struct corr_launch l[MAXOUT];
	bool has_l[MAXOUT];
	char api[MAXOUT][48];
};

static void emit(void *ctx, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct got *o = ctx;

	if (o->n >= MAXOUT) { /* bulk tests only count */
		o->n++;
		return;
	}
	o->g[o->n] = *g;
	o->g[o->n].name = NULL;
	o->has_l[o->n] = l != NULL;
	if (l) {
		o->l[o->n] = *l;
		snprintf(o->api[o->n], sizeof(o->api[0]), "%s", l->api);
	}
	o->n++;
}

static struct corr *mk(struct got *o, struct corr_opts *extra)
{
	struct corr_opts opts = {.sz = sizeof(opts)};
	struct corr *c;

	if (extra)
		opts = *extra;
	opts.sz = sizeof(opts);
	opts.emit = emit;
	opts.emit_ctx = o;
	memset(o, 0, sizeof(*o));
	c = corr__new(&opts);
	assert_non_null(c);
	return c;
}

static struct corr_gpu kern(uint32_t pid, uint32_t corr, uint64_t start)
{
	struct corr_gpu g = {
	    .kind = CORR_KIND_KERNEL,
	    .pid = pid,
	    .corr_id = corr,
	    .device = 0,
	    .stream = 7,
	    .start_ns = start,
	    .end_ns = start + 100,
	    .name = "_Z6kernelv",
	};
	return g;
}

/* corr_strtab: one id per distinct string, in order; bounded by count and by bytes */
static void test_strtab(void **state)
{
	struct corr_strtab *t = corr_strtab_new(8, 10);
	size_t len = 0;

	(void)state;
	assert_non_null(t);
	assert_int_equal(corr_strtab_id(t, "abc", 3, 0), 0);
	assert_int_equal(corr_strtab_id(t, "abcd", 3, 0), 0); /* by length: "abc" again */
	assert_int_equal(corr_strtab_id(t, "defgh", 5, corr_name_hash("defgh", 5)), 1);
	/* 4 + 6 bytes held of 10: one more byte does not fit, a known string still does */
	assert_int_equal(corr_strtab_id(t, "x", 1, 0), -ENOSPC);
	assert_int_equal(corr_strtab_id(t, "defgh", 5, 0), 1);
	assert_string_equal(corr_strtab_str(t, 1, &len), "defgh");
	assert_int_equal(len, 5);
	assert_null(corr_strtab_str(t, 2, NULL));
	assert_int_equal(corr_strtab_count(t), 2);
	corr_strtab_free(t);
	t = corr_strtab_new(2, 0); /* no byte bound: two strings */
	assert_int_equal(corr_strtab_id(t, "a", 1, 0), 0);
	assert_int_equal(corr_strtab_id(t, "b", 1, 0), 1);
	assert_int_equal(corr_strtab_id(t, "c", 1, 0), -ENOSPC);
	corr_strtab_free(t);
}

static void test_basic_join(void **state)
{
	struct got o;
	struct corr *c = mk(&o, NULL);
	struct corr_gpu g = kern(100, 5, 2000);

	(void)state;
	assert_int_equal(corr__add_launch(c, 100, 101, 1000, 5, 211, "cudaLaunchKernel"), 0);
	assert_int_equal(corr__add_gpu(c, &g), 0);
	assert_int_equal(o.n, 1);
	assert_true(o.has_l[0]);
	assert_int_equal(o.l[0].pid, 100);
	assert_int_equal(o.l[0].tid, 101);
	assert_int_equal(o.l[0].ts_ns, 1000);
	assert_int_equal(o.l[0].corr_id, 5);
	assert_string_equal(o.api[0], "cudaLaunchKernel");
	assert_int_equal(corr__counters(c)->joined, 1);
	corr__free(c);
}

static void test_out_of_order(void **state)
{
	struct got o;
	struct corr *c = mk(&o, NULL);
	struct corr_gpu g = kern(100, 5, 2000), g2 = kern(100, 6, 2500);

	(void)state;
	corr__add_gpu(c, &g);
	corr__add_gpu(c, &g2);
	assert_int_equal(o.n, 0);
	assert_int_equal(corr__pending(c), 2);
	corr__add_launch(c, 100, 102, 2200, 6, 0, "cudaLaunchKernel");
	corr__add_launch(c, 100, 101, 1000, 5, 0, "cudaLaunchKernel");
	assert_int_equal(o.n, 2);
	assert_int_equal(o.g[0].corr_id, 6);
	assert_int_equal(o.l[0].tid, 102);
	assert_int_equal(o.g[1].corr_id, 5);
	assert_int_equal(o.l[1].tid, 101);
	assert_int_equal(corr__counters(c)->joined_late, 2);
	assert_int_equal(corr__pending(c), 0);
	corr__free(c);
}

static void test_missing_side(void **state)
{
	struct got o;
	struct corr *c = mk(&o, NULL);
	struct corr_gpu g = kern(100, 5, 2000);

	(void)state;
	/* a launch for another pid with the same correlation id must not join */
	corr__add_launch(c, 200, 201, 1000, 5, 0, "cudaLaunchKernel");
	corr__add_gpu(c, &g);
	assert_int_equal(o.n, 0);
	corr__flush(c);
	assert_int_equal(o.n, 1);
	assert_false(o.has_l[0]);
	assert_int_equal(corr__counters(c)->unmatched, 1);
	assert_int_equal(corr__counters(c)->joined, 0);
	corr__free(c);
}

/*
 * A record whose launch the shim sampled out (CORR_GPU_F_NO_LAUNCH) leaves
 * at once, unmatched and counted, and takes no place in the wait queue: at
 * a GPU's kernel rate the queue (65,536) filled in half a second of such
 * records, and each waited up to the window (10 s) before its step and its
 * summary could use it. A record without the flag still waits and joins.
 */
static void test_no_launch_leaves_at_once(void **state)
{
	struct corr_opts opts = {.gpu_capacity = 2};
	struct got o;
	struct corr *c = mk(&o, &opts);
	struct corr_gpu g;

	(void)state;
	for (uint32_t i = 1; i <= 1000; i++) {
		g = kern(100, i, 1000 + i);
		g.flags = CORR_GPU_F_NO_LAUNCH;
		assert_int_equal(corr__add_gpu(c, &g), 0);
		assert_int_equal(o.n, (int)i); /* out before the next comes */
	}
	assert_false(o.has_l[0]);
	assert_int_equal(o.g[0].pid, 100);
	assert_int_equal(o.g[0].corr_id, 1);
	assert_int_equal(corr__pending(c), 0);
	assert_int_equal(corr__counters(c)->no_launch, 1000);
	assert_int_equal(corr__counters(c)->unmatched, 1000);
	assert_int_equal(corr__counters(c)->gpu_evicted, 0);
	/* without the flag: it waits for its launch, and joins */
	memset(&o, 0, sizeof(o));
	g = kern(100, 5000, 9000);
	corr__add_gpu(c, &g);
	assert_int_equal(o.n, 0);
	assert_int_equal(corr__pending(c), 1);
	corr__add_launch(c, 100, 101, 8000, 5000, 0, "cudaLaunchKernel");
	assert_int_equal(o.n, 1);
	assert_true(o.has_l[0]);
	assert_int_equal(corr__counters(c)->no_launch, 1000);
	corr__free(c);
}

/*
 * Every record the correlator emits carries its name's hash (name_hash),
 * so that the steps and stats tables intern it without hashing it again:
 * joined at once, unmatched at once (no launch), joined after waiting
 * (its name kept as an id meanwhile), and unmatched after waiting. A hash
 * that came with the input is not trusted. No name: 0.
 */
static void test_emit_carries_name_hash(void **state)
{
	struct got o;
	struct corr *c = mk(&o, NULL);
	struct corr_gpu g;
	uint64_t h = corr_name_hash("_Z6kernelv", strlen("_Z6kernelv"));

	(void)state;
	assert_int_not_equal(h, 0);
	corr__add_launch(c, 100, 101, 1000, 5, 0, "cudaLaunchKernel");
	g = kern(100, 5, 2000);
	g.name_hash = 12345;  /* forged: ignored */
	corr__add_gpu(c, &g); /* joined at once */
	g = kern(100, 6, 2100);
	g.flags = CORR_GPU_F_NO_LAUNCH;
	corr__add_gpu(c, &g); /* unmatched at once */
	g = kern(100, 7, 2200);
	corr__add_gpu(c, &g); /* waits, then joins */
	corr__add_launch(c, 100, 101, 1100, 7, 0, "cudaLaunchKernel");
	g = kern(100, 8, 2300);
	corr__add_gpu(c, &g); /* waits, then leaves unmatched */
	g = kern(100, 9, 2400);
	g.name = NULL;
	g.name_hash = 777;
	corr__add_gpu(c, &g);
	assert_int_equal(corr__flush(c), 0);
	assert_int_equal(o.n, 5);
	for (int i = 0; i < o.n; i++)
		assert_int_equal(o.g[i].name_hash, o.g[i].corr_id == 9 ? 0 : h);
	assert_int_equal(corr__counters(c)->joined_late, 1);
	corr__free(c);
}

static void test_late_launch_after_window(void **state)
{
	struct corr_opts opts = {.window_ns = 1000};
	struct got o;
	struct corr *c = mk(&o, &opts);
	struct corr_gpu g = kern(100, 5, 2000);

	(void)state;
	corr__add_gpu(c, &g);
	/* time moves on well past the window: the record gives up its launch */
	corr__add_launch(c, 100, 101, 10000, 9, 0, "cudaLaunchKernel");
	assert_int_equal(o.n, 1);
	assert_false(o.has_l[0]);
	/* the late launch arrives: nothing is joined twice or wrongly */
	corr__add_launch(c, 100, 101, 1500, 5, 0, "cudaLaunchKernel");
	assert_int_equal(o.n, 1);
	assert_int_equal(corr__counters(c)->unmatched, 1);
	/* advance() retires old launches */
	corr__advance(c, 100000);
	assert_int_equal(corr__counters(c)->launches_expired, 2);
	corr__free(c);
}

static void test_pid_reuse(void **state)
{
	struct got o;
	struct corr *c = mk(&o, NULL);
	struct corr_gpu old_pending = kern(7, 2, 150), old_late = kern(7, 1, 160),
			fresh = kern(7, 1, 400);

	(void)state;
	corr__add_launch(c, 7, 70, 100, 1, 0, "cudaLaunchKernel");
	corr__add_gpu(c, &old_pending); /* its launch never comes */
	corr__process_exit(c, 7, 200);
	assert_int_equal(o.n, 1); /* the waiting record went out unmatched */
	assert_false(o.has_l[0]);
	assert_int_equal(corr__counters(c)->launches_dropped_exit, 1);

	/* a new process gets pid 7 and reuses correlation id 1 */
	corr__add_launch(c, 7, 77, 300, 1, 0, "cudaLaunchKernel");
	/* a late record of the old process must not join the new launch */
	corr__add_gpu(c, &old_late);
	assert_int_equal(o.n, 2);
	assert_false(o.has_l[1]);
	assert_int_equal(corr__counters(c)->refused, 1);
	/* the new process's own record does */
	corr__add_gpu(c, &fresh);
	assert_int_equal(o.n, 3);
	assert_true(o.has_l[2]);
	assert_int_equal(o.l[2].tid, 77);
	corr__free(c);
}

/*
 * The launch table against a model: a FIFO of the last CAP distinct launches.
 * Several pids with interleaved, sometimes sparse, sometimes repeated ids
 * drive the open-addressing table through inserts, evictions (and their
 * backward shifts) and lookups; every GPU record must join exactly when the
 * model still holds its launch, and to that launch.
 */
#define MODEL_CAP 64
static void test_launch_table_model(void **state)
{
	struct corr_opts opts = {.launch_capacity = MODEL_CAP, .gpu_capacity = 1};
	struct got o;
	struct corr *c = mk(&o, &opts);
	uint64_t fifo[MODEL_CAP]; /* pid << 32 | corr, oldest at head */
	uint32_t next[5] = {1, 1, 1, 1, 1}, head = 0, len = 0;
	uint64_t rnd = 12345, ts = 1000;

	(void)state;
	for (int step = 0; step < 200000; step++) {
		uint32_t pid, id;
		uint64_t key;
		bool in_model = false;
		struct corr_gpu g;

		rnd = rnd * 6364136223846793005ULL + 1442695040888963407ULL;
		pid = 100 + (uint32_t)(rnd >> 60) % 5;
		if ((rnd >> 20) % 4) {
			/* a launch: usually the next id, sometimes a gap */
			id = next[pid - 100];
			next[pid - 100] +=
			    1 + (uint32_t)((rnd >> 30) % 3 == 0 ? (rnd >> 40) % 50 : 0);
			key = (uint64_t)pid << 32 | id;
			ts += 10;
			corr__add_launch(c, pid, pid + 1, ts, id, 211, "cudaLaunchKernel");
			if (len == MODEL_CAP) {
				head = (head + 1) % MODEL_CAP;
				len--;
			}
			fifo[(head + len++) % MODEL_CAP] = key;
			continue;
		}
		/* a GPU record for a recent or an old id of this pid */
		id = next[pid - 100] - 1 - (uint32_t)((rnd >> 24) % 100);
		if (id == 0 || id > next[pid - 100])
			continue;
		key = (uint64_t)pid << 32 | id;
		for (uint32_t i = 0; i < len; i++)
			in_model |= fifo[(head + i) % MODEL_CAP] == key;
		o.n = 0;
		g = kern(pid, id, ts + 5);
		corr__add_gpu(c, &g);
		if (in_model) {
			assert_int_equal(o.n, 1);
			assert_true(o.has_l[0]);
			assert_int_equal(o.l[0].pid, pid);
			assert_int_equal(o.l[0].corr_id, id);
			assert_int_equal(o.l[0].tid, pid + 1);
		} else {
			/* waits (a queue of one: the previous waiter leaves unmatched) */
			assert_true(o.n <= 1);
			if (o.n)
				assert_false(o.has_l[0]);
		}
	}
	corr__flush(c);
	assert_true(corr__counters(c)->launches_evicted > 100000);
	corr__free(c);
}

static void test_eviction(void **state)
{
	struct corr_opts opts = {.launch_capacity = 4, .gpu_capacity = 2};
	struct got o;
	struct corr *c = mk(&o, &opts);
	struct corr_gpu g;

	(void)state;
	for (uint32_t i = 1; i <= 6; i++)
		corr__add_launch(c, 1, 1, i * 10, i, 0, "cudaLaunchKernel");
	assert_int_equal(corr__counters(c)->launches_evicted, 2);
	g = kern(1, 1, 1000); /* launch 1 was evicted */
	corr__add_gpu(c, &g);
	g = kern(1, 6, 1000);
	corr__add_gpu(c, &g);
	assert_int_equal(o.n, 1);
	assert_int_equal(o.g[0].corr_id, 6);
	/* the wait queue holds 2: a third waiter pushes out the oldest */
	g = kern(1, 100, 1000);
	corr__add_gpu(c, &g);
	g = kern(1, 101, 1000);
	corr__add_gpu(c, &g);
	assert_int_equal(corr__counters(c)->gpu_evicted, 1);
	assert_int_equal(o.n, 2);
	assert_int_equal(o.g[1].corr_id, 1);
	assert_false(o.has_l[1]);
	/* many more: state stays bounded */
	for (uint32_t i = 200; i < 5000; i++) {
		g = kern(1, i, 1000);
		corr__add_gpu(c, &g);
		corr__add_launch(c, 1, 1, 900, i + 100000, 0, "x");
	}
	assert_true(corr__pending(c) <= 2);
	corr__flush(c);
	assert_int_equal(corr__pending(c), 0);
	assert_int_equal(corr__counters(c)->gpu_records,
			 corr__counters(c)->joined + corr__counters(c)->unmatched);
	corr__free(c);
}

static void test_clock_offset(void **state)
{
	struct corr_opts opts = {.max_skew_ns = 10};
	struct got o;
	struct corr *c;
	struct corr_gpu g = kern(1, 1, 500);

	(void)state;
	/* without an offset the kernel would start before its launch: refused */
	c = mk(&o, &opts);
	corr__add_launch(c, 1, 1, 1000, 1, 0, "cudaLaunchKernel");
	corr__add_gpu(c, &g);
	assert_int_equal(o.n, 1);
	assert_false(o.has_l[0]);
	assert_int_equal(corr__counters(c)->refused, 1);
	corr__free(c);

	/* the GPU clock runs 1000 ns behind: the offset aligns it */
	opts.clock_offset_ns[CORR_SRC_GPU] = 1000;
	c = mk(&o, &opts);
	corr__add_launch(c, 1, 1, 1000, 1, 0, "cudaLaunchKernel");
	corr__add_gpu(c, &g);
	assert_int_equal(o.n, 1);
	assert_true(o.has_l[0]);
	assert_int_equal(o.g[0].start_ns, 1500);
	assert_int_equal(o.g[0].end_ns, 1600);
	corr__free(c);
}

static void test_graph_many_kernels(void **state)
{
	struct got o;
	struct corr *c = mk(&o, NULL);

	(void)state;
	corr__add_launch(c, 1, 2, 100, 42, 311, "cudaGraphLaunch");
	for (int i = 0; i < 5; i++) {
		struct corr_gpu g = kern(1, 42, 200 + i * 10);

		g.graph_id = 3;
		g.graph_node_id = 1000 + i;
		corr__add_gpu(c, &g);
	}
	assert_int_equal(o.n, 5);
	for (int i = 0; i < 5; i++) {
		assert_true(o.has_l[i]);
		assert_string_equal(o.api[i], "cudaGraphLaunch");
		assert_int_equal(o.g[i].graph_node_id, 1000 + i);
	}
	assert_int_equal(corr__counters(c)->launches, 1);
	corr__free(c);
}

static void test_nested_driver_once(void **state)
{
	struct got o;
	struct corr *c = mk(&o, NULL);
	struct corr_gpu g = kern(1, 9, 500);

	(void)state;
	/* driver call inside the runtime call, possibly reported first */
	corr__add_launch(c, 1, 2, 110, 9, 307, "cuLaunchKernel");
	corr__add_launch(c, 1, 2, 100, 9, 211, "cudaLaunchKernel");
	corr__add_gpu(c, &g);
	assert_int_equal(o.n, 1);
	assert_string_equal(o.api[0], "cudaLaunchKernel");
	assert_int_equal(o.l[0].ts_ns, 100);
	assert_int_equal(corr__counters(c)->launches, 1);
	assert_int_equal(corr__counters(c)->launches_nested, 1);
	corr__free(c);
}

static void test_uprobe_callback(void **state)
{
	struct got o;
	struct corr *c = mk(&o, NULL);
	struct corr_gpu g;

	(void)state;
	/* two calls on tid 11; the callback at 250 belongs to the entry at 200 */
	corr__add_uprobe_launch(c, 1, 11, 100, 0 /* cudaLaunchKernel */);
	corr__add_uprobe_launch(c, 1, 11, 200, 11 /* cuLaunchKernel */);
	/* another thread's later entry must not be taken */
	corr__add_uprobe_launch(c, 1, 12, 240, 0);
	corr__add_callback(c, 1, 11, 250, 9, 1, 307);
	g = kern(1, 9, 1000);
	corr__add_gpu(c, &g);
	assert_int_equal(o.n, 1);
	assert_int_equal(o.l[0].tid, 11);
	assert_int_equal(o.l[0].ts_ns, 200);
	assert_string_equal(o.api[0], "cuLaunchKernel");
	assert_true(o.l[0].from_uprobe);
	assert_true(o.l[0].from_callback);

	/* beyond the match bound: the callback stands alone (its own time, cbid name) */
	corr__add_uprobe_launch(c, 1, 13, 1000, 0);
	corr__add_callback(c, 1, 13, 1000 + 200000000ULL, 10, 2, 311);
	g = kern(1, 10, 1000 + 300000000ULL);
	corr__add_gpu(c, &g);
	assert_int_equal(o.n, 2);
	assert_false(o.l[1].from_uprobe);
	assert_string_equal(o.api[1], "cudaGraphLaunch");
	assert_int_equal(o.l[1].ts_ns, 1000 + 200000000ULL);
	assert_int_equal(corr__counters(c)->callbacks_without_uprobe, 1);

	/* callback first, uprobe late: the launch takes the uprobe's entry time */
	corr__add_callback(c, 1, 14, 5300, 11, 2, 211);
	corr__add_uprobe_launch(c, 1, 14, 5280, 0);
	g = kern(1, 11, 6000);
	corr__add_gpu(c, &g);
	assert_int_equal(o.n, 3);
	assert_int_equal(o.l[2].ts_ns, 5280);
	assert_true(o.l[2].from_uprobe);
	assert_int_equal(corr__counters(c)->callbacks_with_uprobe, 2);
	corr__free(c);
}

/*
 * The shim sends callbacks in batches (one per tick): all uprobe entries of a
 * busy thread arrive before the first callback of the batch. Each callback
 * still takes its own call's entry: after the previous callback, at or
 * before its exit, the runtime entry rather than the driver entry nested in
 * it; a call whose callback never comes is skipped, not taken by the next.
 */
static void test_uprobe_batches(void **state)
{
	struct got o;
	struct corr *c = mk(&o, NULL);
	const int n = 40, skipped = 20;
	struct corr_gpu g;

	(void)state;
	for (int i = 0; i < n; i++) {
		corr__add_uprobe_launch(c, 1, 11, 1000000 + 1000 * i, 0 /* cudaLaunchKernel */);
		corr__add_uprobe_launch(c, 1, 11, 1000000 + 1000 * i + 100,
					11 /* cuLaunchKernel */);
	}
	for (int i = 0; i < n; i++)
		if (i != skipped)
			corr__add_callback(c, 1, 11, 1000000 + 1000 * i + 500, 100 + i, 2, 211);
	for (int i = 0; i < n; i++) {
		g = kern(1, 100 + i, 2000000 + 1000 * i);
		corr__add_gpu(c, &g);
	}
	corr__flush(c);
	assert_int_equal(o.n, n);
	for (int i = 0; i < n; i++) {
		if (o.g[i].corr_id == 100 + skipped) {
			assert_false(o.has_l[i]);
			continue;
		}
		assert_true(o.has_l[i]);
		assert_int_equal(o.l[i].ts_ns, 1000000 + 1000 * (o.g[i].corr_id - 100));
		assert_string_equal(o.api[i], "cudaLaunchKernel");
		assert_true(o.l[i].from_uprobe && o.l[i].from_callback);
	}
	assert_int_equal(corr__counters(c)->callbacks_with_uprobe, n - 1);
	corr__free(c);
}

static void test_pid_from_launch(void **state)
{
	struct corr_opts opts = {.flags = CORR_F_PID_FROM_LAUNCH};
	struct got o;
	struct corr *c = mk(&o, &opts);
	struct corr_gpu g = kern(0, 77, 500), u = kern(0, 78, 500);

	(void)state;
	corr__add_launch(c, 1234, 1235, 100, 77, 0, "cudaLaunchKernel");
	corr__add_gpu(c, &g);
	corr__add_gpu(c, &u);
	corr__flush(c);
	assert_int_equal(o.n, 2);
	assert_int_equal(o.g[0].pid, 1234);
	assert_int_equal(o.l[0].tid, 1235);
	assert_int_equal(o.g[1].pid, 0);
	assert_false(o.has_l[1]);
	corr__free(c);
}

struct sumgot {
	int n;
	struct corr_summary s[4];
	char top0[64];
};

static void on_sum(void *ctx, const struct corr_summary *s)
{
	struct sumgot *o = ctx;

	assert_true(o->n < 4);
	o->s[o->n] = *s;
	if (s->n_top)
		snprintf(o->top0, sizeof(o->top0), "%s", s->top[0].name);
	o->n++;
}

static void test_stats(void **state)
{
	struct corr_stats_opts so = {.sz = sizeof(so), .top_n = 2};
	struct corr_stats *st = corr_stats__new(&so);
	struct corr_launch l = {.pid = 5, .tid = 5, .api = "cudaLaunchKernel"};
	struct sumgot o = {0};
	/* device 0: [0,100) s1, [50,150) s2 overlap, gap, [300,400) s1 */
	struct {
		uint64_t s, e, lts;
		uint32_t stream;
		const char *name;
	} k[] = {
	    {0, 100, 0, 1, "a"},
	    {50, 150, 40, 2, "b"},
	    {300, 400, 200, 1, "a"},
	    {5000, 5100, 4000, 1, "c"}, /* next interval */
	};

	(void)state;
	assert_non_null(st);
	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
		struct corr_gpu g = {.kind = CORR_KIND_KERNEL,
				     .stream = k[i].stream,
				     .start_ns = k[i].s,
				     .end_ns = k[i].e,
				     .name = k[i].name};

		l.ts_ns = k[i].lts;
		assert_int_equal(corr_stats__add(st, &g, &l), 0);
	}
	corr_stats__cut(st, 0, 1000, on_sum, &o);
	assert_int_equal(o.n, 1);
	assert_int_equal(o.s[0].pid, 5);
	assert_int_equal(o.s[0].kernels, 3);
	assert_int_equal(o.s[0].n_dev, 1);
	assert_int_equal(o.s[0].dev[0].busy_ns, 250);
	assert_int_equal(o.s[0].dev[0].gaps, 1);
	assert_int_equal(o.s[0].dev[0].gap_ns, 150);
	assert_int_equal(o.s[0].n_streams, 2);
	/* launch-to-start 0, 10, 100 */
	assert_int_equal(o.s[0].l2s_count, 3);
	assert_int_equal(o.s[0].l2s_p50_ns, 10);
	assert_int_equal(o.s[0].l2s_p99_ns, 100);
	assert_int_equal(o.s[0].n_top, 2);
	assert_string_equal(o.top0, "a");
	assert_int_equal(o.s[0].top[0].total_ns, 200);
	assert_int_equal(corr_stats__first_ts(st), 5000);
	corr_stats__cut(st, 1000, 6000, on_sum, &o);
	assert_int_equal(o.n, 2);
	assert_int_equal(o.s[1].kernels, 1);
	assert_int_equal(corr_stats__first_ts(st), UINT64_MAX);
	corr_stats__free(st);
}

static void test_json_out(void **state)
{
	char buf[4096];
	struct corr_json_common cm = {.host = "h", .instance = "i\"x"};
	struct corr_gpu g = kern(1, 9, 2000);
	struct corr_launch l = {.pid = 1,
				.tid = 2,
				.ts_ns = 1500,
				.corr_id = 9,
				.api = "cudaLaunchKernel",
				.from_uprobe = true};
	json_error_t err;
	json_t *o;
	int n;

	(void)state;
	g.name = "_Z3fooi";
	n = corr_gpu_to_json(buf, sizeof(buf), &cm, &g, &l);
	assert_true(n > 0);
	o = json_loadb(buf, (size_t)n, 0, &err);
	assert_non_null(o);
	assert_json_str(o, "type", "kernel");
	assert_json_str(o, "instance", "i\"x");
	assert_json_int(o, "pid", 1);
	assert_json_int(o, "launch_to_start_ns", 500);
	assert_json_int(o, "correlation_id", 9);
	assert_json_str(o, "name", "_Z3fooi");
	if (corr_demangle("_Z3fooi"))
		assert_json_str(o, "demangled", "foo(int)");
	json_decref(o);

	/* unmatched: explicit nulls, but the sender's pid when known (issue 18 #8) */
	n = corr_gpu_to_json(buf, sizeof(buf), &cm, &g, NULL);
	o = json_loadb(buf, (size_t)n, 0, &err);
	assert_non_null(o);
	assert_json_int(o, "pid", 1);
	assert_true(json_is_null(json_object_get(o, "tid")));
	assert_true(json_is_false(json_object_get(o, "matched")));
	json_decref(o);
	g.pid = 0; /* a Kineto trace: no process */
	n = corr_gpu_to_json(buf, sizeof(buf), &cm, &g, NULL);
	o = json_loadb(buf, (size_t)n, 0, &err);
	assert_non_null(o);
	assert_true(json_is_null(json_object_get(o, "pid")));
	json_decref(o);
	g.pid = 1;
	/* too small a buffer */
	assert_int_equal(corr_gpu_to_json(buf, 20, &cm, &g, &l), -ENOSPC);
}

static void test_demangle(void **state)
{
	const char *d = corr_demangle("_ZN2at6native18elementwise_kernelILi128ELi4EEEvi");

	(void)state;
	if (!d)
		skip(); /* libstdc++.so.6 absent */
	assert_string_equal(d, "void at::native::elementwise_kernel<128, 4>(int)");
	assert_null(corr_demangle("void foo<int>(int)")); /* already demangled */
	assert_null(corr_demangle("_Zgarbage!"));
	corr_demangle_cache_free();
}

static void test_us_to_ns(void **state)
{
	uint64_t v;

	(void)state;
	assert_int_equal(corr_us_text_to_ns("12.5", 4, &v), 0);
	assert_int_equal(v, 12500);
	assert_int_equal(corr_us_text_to_ns("1712195495519689.047", 20, &v), 0);
	assert_int_equal(v, 1712195495519689047ULL);
	assert_int_equal(corr_us_text_to_ns("3676599926233.705", 17, &v), 0);
	assert_int_equal(v, 3676599926233705ULL);
	assert_int_equal(corr_us_text_to_ns("1.0005", 6, &v), 0);
	assert_int_equal(v, 1001); /* half up */
	assert_int_equal(corr_us_text_to_ns("2e3", 3, &v), 0);
	assert_int_equal(v, 2000000);
	assert_int_equal(corr_us_text_to_ns("7", 1, &v), 0);
	assert_int_equal(v, 7000);
	assert_int_not_equal(corr_us_text_to_ns("x", 1, &v), 0);
	assert_int_not_equal(corr_us_text_to_ns("1.2.3", 5, &v), 0);
}

static void test_api_names(void **state)
{
	(void)state;
	assert_string_equal(corr_api_name(4), "cudaGraphLaunch");
	assert_string_equal(corr_api_name(999), "unknown");
	assert_string_equal(corr_cbid_name(2, 211), "cudaLaunchKernel");
	assert_string_equal(corr_cbid_name(1, 514), "cuGraphLaunch");
	assert_null(corr_cbid_name(2, 1));
}

/*
 * Threads of an exited process leave the thread table (issue 18 #17): a
 * node that starts short-lived processes kept their dead threads until the
 * table was full, then evicted live ones round-robin. The joins of the
 * threads that stay are unchanged by the moves inside the table.
 */
static void test_threads_pruned_at_exit(void **state)
{
	struct corr_opts x = {.thread_capacity = 16};
	struct got o;
	struct corr *c = mk(&o, &x);
	struct corr_gpu g;
	uint64_t t = 1000;

	(void)state;
	/* a long-lived process, then 50 short-lived ones of 8 threads each */
	corr__add_uprobe_launch(c, 1, 11, t, 0);
	for (uint32_t p = 100; p < 150; p++) {
		for (uint32_t tid = 0; tid < 8; tid++)
			corr__add_uprobe_launch(c, p, p * 10 + tid, t += 10, 0);
		corr__process_exit(c, p, t += 10);
	}
	assert_int_equal(corr__counters(c)->threads_evicted, 0);
	assert_int_equal(corr__counters(c)->threads_pruned, 400);
	/* the long-lived thread kept its pending entry: its callback joins it */
	corr__add_callback(c, 1, 11, 1050, 9, 2, 211);
	g = kern(1, 9, t + 1000);
	corr__add_gpu(c, &g);
	assert_int_equal(o.n, 1);
	assert_true(o.has_l[0]);
	assert_int_equal(o.l[0].tid, 11);
	assert_int_equal(o.l[0].ts_ns, 1000);
	assert_true(o.l[0].from_uprobe);
	corr__free(c);
}

/*
 * An exit removes its own process's state and touches nothing else (issue
 * 18): the correlator scanned its whole launch ring, wait queue and thread
 * table on every exit, so a node starting thousands of short-lived CUDA
 * processes beside a long-lived server paid the server's 50,000 launches per
 * exit. corr_exit_visits() counts the entries the exits removed; the
 * long-lived process's launches, waiting record and thread still join.
 */
static void test_exit_cost_own_state(void **state)
{
	struct got o;
	struct corr *c = mk(&o, NULL);
	struct corr_gpu g;
	uint64_t t = 1000;
	uint32_t p;

	(void)state;
	for (uint32_t id = 1; id <= 50000; id++)
		corr__add_launch(c, 1, 11, t++, id, 211, "cudaLaunchKernel");
	for (uint32_t id = 60001; id <= 61000; id++) {
		g = kern(1, id, t++); /* waits: its launch comes later */
		corr__add_gpu(c, &g);
	}
	for (uint32_t tid = 100; tid < 200; tid++)
		corr__add_uprobe_launch(c, 1, tid, t++, 0);
	assert_int_equal(corr_procs_held(c), 1);

	/* 1,000 short processes: 2 threads, 5 launches, 2 records that wait */
	for (p = 1000; p < 2000; p++) {
		for (uint32_t tid = 0; tid < 2; tid++)
			corr__add_uprobe_launch(c, p, p * 10 + tid, t++, 0);
		for (uint32_t id = 1; id <= 5; id++)
			corr__add_launch(c, p, p * 10, t++, id, 211, "cudaLaunchKernel");
		for (uint32_t id = 100; id < 102; id++) {
			g = kern(p, id, t++);
			corr__add_gpu(c, &g);
		}
		corr__process_exit(c, p, t++);
	}
	assert_int_equal(corr_exit_visits(c), 1000 * (2 + 5 + 2));
	assert_int_equal(corr__counters(c)->launches_dropped_exit, 1000 * 5);
	assert_int_equal(corr__counters(c)->threads_pruned, 1000 * 2);
	assert_int_equal(o.n, 1000 * 2); /* their waiting records, unmatched */
	assert_int_equal(corr__pending(c), 1000);
	assert_int_equal(corr_procs_held(c), 1);

	/* the long-lived process lost nothing */
	o.n = 0;
	g = kern(1, 1, t++);
	corr__add_gpu(c, &g);
	corr__add_launch(c, 1, 12, t++, 60500, 211, "cudaLaunchKernel");
	corr__add_callback(c, 1, 150, t++, 70000, 2, 211);
	g = kern(1, 70000, t++);
	corr__add_gpu(c, &g);
	assert_int_equal(o.n, 3);
	assert_true(o.has_l[0] && o.l[0].tid == 11 && o.l[0].ts_ns == 1000);
	assert_true(o.has_l[1] && o.l[1].tid == 12 && o.g[1].corr_id == 60500);
	assert_true(o.has_l[2] && o.l[2].tid == 150 && o.l[2].from_uprobe);
	assert_int_equal(o.l[2].ts_ns, 1000 + 50000 + 1000 + 50);
	corr__process_exit(c, 1, t++);
	assert_int_equal(corr_procs_held(c), 0);
	corr__free(c);
}

/*
 * The per-process lists against a model: a few pids launch, send GPU records
 * that join or wait, run threads, and exit (their pids reused at once, their
 * correlation ids from 1 again), through small tables that evict launches,
 * waiting records and threads all the time. Each exit must drop exactly the
 * model's live launches of that pid and emit exactly its waiting records.
 */
#define XM_PIDS 6
#define XM_LCAP 32
#define XM_GCAP 16
static void test_exit_model(void **state)
{
	struct corr_opts opts = {
	    .launch_capacity = XM_LCAP,
	    .gpu_capacity = XM_GCAP,
	    .thread_capacity = 8,
	    .window_ns = UINT64_MAX,
	    .max_skew_ns = 1ULL << 50,
	};
	struct got o;
	struct corr *c = mk(&o, &opts);
	/* model FIFOs of keys, oldest first; an exited launch keeps its ring slot (key 0) */
	uint64_t lf[XM_LCAP], gf[XM_GCAP];
	uint32_t ln = 0, gn = 0, next[XM_PIDS];
	uint64_t rnd = 99, ts = 1000, exits = 0;

	(void)state;
	for (int i = 0; i < XM_PIDS; i++)
		next[i] = 1;
	for (int step = 0; step < 200000; step++) {
		uint32_t k, pid, id, expect = 0;
		uint64_t key, dropped, unmatched, pruned, visits;
		struct corr_gpu g;

		rnd = rnd * 6364136223846793005ULL + 1442695040888963407ULL;
		k = (uint32_t)(rnd >> 33) % 100;
		pid = 300 + (uint32_t)(rnd >> 50) % XM_PIDS;
		ts += 10;
		o.n = 0;
		if (k < 35) {
			/* a launch: the waiting records of its key join it */
			id = next[pid - 300]++;
			key = (uint64_t)pid << 32 | id;
			corr__add_launch(c, pid, pid * 10, ts, id, 211, "cudaLaunchKernel");
			for (uint32_t i = 0; i < gn;) {
				if (gf[i] == key) {
					memmove(&gf[i], &gf[i + 1], (gn - i - 1) * sizeof(gf[0]));
					gn--;
					expect++;
				} else {
					i++;
				}
			}
			if (ln == XM_LCAP)
				memmove(&lf[0], &lf[1], (--ln) * sizeof(lf[0]));
			lf[ln++] = key;
			assert_int_equal(o.n, expect);
			for (int i = 0; i < o.n; i++)
				assert_true(o.has_l[i] && o.l[i].pid == pid &&
					    o.l[i].corr_id == id);
		} else if (k < 70) {
			/* a GPU record of a recent or a coming launch */
			bool live = false;

			id = next[pid - 300] + 40 - (uint32_t)(rnd >> 40) % 50;
			if (id == 0 || id > 1u << 30)
				continue;
			key = (uint64_t)pid << 32 | id;
			for (uint32_t i = 0; i < ln; i++)
				live |= lf[i] == key;
			g = kern(pid, id, ts);
			corr__add_gpu(c, &g);
			if (live) {
				assert_int_equal(o.n, 1);
				assert_true(o.has_l[0] && o.l[0].corr_id == id &&
					    o.l[0].pid == pid);
				continue;
			}
			if (gn == XM_GCAP) {
				/* the oldest waiter leaves unmatched */
				assert_int_equal(o.n, 1);
				assert_false(o.has_l[0]);
				assert_int_equal(((uint64_t)o.g[0].pid << 32 | o.g[0].corr_id),
						 gf[0]);
				memmove(&gf[0], &gf[1], (--gn) * sizeof(gf[0]));
			} else {
				assert_int_equal(o.n, 0);
			}
			gf[gn++] = key;
		} else if (k < 92) {
			corr__add_uprobe_launch(c, pid, pid * 10 + (uint32_t)(rnd >> 20) % 4, ts,
						0);
		} else {
			dropped = corr__counters(c)->launches_dropped_exit;
			unmatched = corr__counters(c)->unmatched;
			pruned = corr__counters(c)->threads_pruned;
			visits = corr_exit_visits(c);
			corr__process_exit(c, pid, ts);
			exits++;
			for (uint32_t i = 0; i < ln; i++) {
				if (lf[i] >> 32 == pid) {
					lf[i] = 0;
					expect++;
				}
			}
			assert_int_equal(corr__counters(c)->launches_dropped_exit - dropped,
					 expect);
			expect = 0;
			for (uint32_t i = 0; i < gn;) {
				if (gf[i] >> 32 == pid) {
					/* emitted oldest first, unmatched */
					assert_true(o.n > (int)expect && !o.has_l[expect]);
					assert_int_equal(o.g[expect].corr_id, (uint32_t)gf[i]);
					memmove(&gf[i], &gf[i + 1], (gn - i - 1) * sizeof(gf[0]));
					gn--;
					expect++;
				} else {
					i++;
				}
			}
			assert_int_equal(o.n, expect);
			assert_int_equal(corr__counters(c)->unmatched - unmatched, expect);
			assert_int_equal(corr_exit_visits(c) - visits,
					 corr__counters(c)->launches_dropped_exit - dropped +
					     expect + corr__counters(c)->threads_pruned - pruned);
			next[pid - 300] = 1; /* the pid is reused */
		}
	}
	assert_true(exits > 10000);
	assert_true(corr__counters(c)->launches_evicted > 1000);
	assert_true(corr__counters(c)->gpu_evicted > 1000);
	assert_true(corr__counters(c)->threads_evicted > 1000);
	assert_true(corr__counters(c)->threads_pruned > 1000);
	for (uint32_t pid = 300; pid < 300 + XM_PIDS; pid++)
		corr__process_exit(c, pid, ts += 10);
	assert_int_equal(corr_procs_held(c), 0);
	assert_int_equal(corr__pending(c), 0);
	corr__free(c);
}

/* correlator/src/internal.h: not installed, exported by the library */
struct names;
struct names *names_new(uint32_t max_names);
void names_free(struct names *n);
int32_t names_intern(struct names *n, const char *s, size_t len);
const char *names_str(const struct names *n, int32_t id);

/*
 * The intern table grows with use (it started at its maximum: 40 MB zeroed
 * for 2^20 names): ids stay sequential and stable across every growth, the
 * maximum still holds.
 */
static void test_names_grow(void **state)
{
	struct names *n = names_new(5000);
	char s[32];

	(void)state;
	assert_non_null(n);
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < 5000; i++) {
			int len = snprintf(s, sizeof(s), "kernel_%d", i);

			assert_int_equal(names_intern(n, s, (size_t)len), i);
		}
	for (int i = 0; i < 5000; i += 499) {
		snprintf(s, sizeof(s), "kernel_%d", i);
		assert_string_equal(names_str(n, i), s);
	}
	assert_int_equal(names_intern(n, "one more", 8), -ENOSPC);
	assert_null(names_str(n, 5000));
	names_free(n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_strtab),
	    cmocka_unit_test(test_basic_join),
	    cmocka_unit_test(test_out_of_order),
	    cmocka_unit_test(test_missing_side),
	    cmocka_unit_test(test_late_launch_after_window),
	    cmocka_unit_test(test_no_launch_leaves_at_once),
	    cmocka_unit_test(test_emit_carries_name_hash),
	    cmocka_unit_test(test_pid_reuse),
	    cmocka_unit_test(test_eviction),
	    cmocka_unit_test(test_clock_offset),
	    cmocka_unit_test(test_graph_many_kernels),
	    cmocka_unit_test(test_nested_driver_once),
	    cmocka_unit_test(test_uprobe_callback),
	    cmocka_unit_test(test_uprobe_batches),
	    cmocka_unit_test(test_pid_from_launch),
	    cmocka_unit_test(test_stats),
	    cmocka_unit_test(test_json_out),
	    cmocka_unit_test(test_launch_table_model),
	    cmocka_unit_test(test_demangle),
	    cmocka_unit_test(test_us_to_ns),
	    cmocka_unit_test(test_api_names),
	    cmocka_unit_test(test_names_grow),
	    cmocka_unit_test(test_threads_pruned_at_exit),
	    cmocka_unit_test(test_exit_cost_own_state),
	    cmocka_unit_test(test_exit_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
