// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_replay.c - replay readers on real recordings (../shared/data, skipped
 * when absent) compared pair by pair with the correlation each trace records,
 * and on malformed, truncated and garbage inputs made here.
 *
 * The reference join is computed independently: jansson (Kineto) or SQL
 * (nsys) maps each correlation id to the launch's pid, tid and API; every
 * kernel the correlator emits must agree with it, and a kernel the trace
 * cannot join must come out unmatched.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>
#include <zlib.h>

#include "correlator.h"
#include "diagnose.h"
#include "test_data.h"

/* ---------------------------------------------------------- helpers ---- */

static char logbuf[8192];

static void cap_log(void *ctx, enum corr_log_level lvl, const char *fmt, ...)
{
	size_t n = strlen(logbuf);
	va_list ap;

	(void)ctx;
	(void)lvl;
	va_start(ap, fmt);
	vsnprintf(logbuf + n, sizeof(logbuf) - n, fmt, ap);
	va_end(ap);
	n = strlen(logbuf);
	if (n + 1 < sizeof(logbuf))
		strcat(logbuf, "\n");
}

static int data_path(char *out, size_t sz, const char *rel)
{
	const char *d = test_data_dir();

	if (!d)
		return -ENOENT;
	snprintf(out, sz, "%s/%s", d, rel);
	return access(out, R_OK) ? -ENOENT : 0;
}

/* reference: correlation id -> launch (sparse array) */
struct ref_launch {
	uint32_t pid, tid;
	char api[48];
	bool set;
};

struct ref {
	struct ref_launch *by_corr;
	uint32_t max;
};

struct check {
	const struct ref *ref;
	uint64_t kernels, joined, unmatched, graph_kernels, wrong, missed;
	uint64_t mem_joined;
	bool pid_known; /* nsys: GPU records carry the pid */
};

static void on_gpu(void *ctx, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct check *ck = ctx;
	const struct ref_launch *r = g->corr_id < ck->ref->max && ck->ref->by_corr[g->corr_id].set
					 ? &ck->ref->by_corr[g->corr_id]
					 : NULL;

	if (g->kind != CORR_KIND_KERNEL) {
		ck->mem_joined += l != NULL;
		return;
	}
	ck->kernels++;
	if (!l) {
		ck->unmatched++;
		if (r)
			ck->missed++; /* the trace joins it, we did not */
		return;
	}
	ck->joined++;
	if (!r || l->corr_id != g->corr_id || l->pid != r->pid || l->tid != r->tid ||
	    strcmp(l->api, r->api) || g->pid != r->pid)
		ck->wrong++;
	if (!strcmp(l->api, "cudaGraphLaunch"))
		ck->graph_kernels++;
}

static char *gunzip_file(const char *path, size_t *len)
{
	gzFile f = gzopen(path, "rb");
	size_t cap = 1 << 20, n = 0;
	char *buf = malloc(cap);
	int r;

	assert_non_null(f);
	while ((r = gzread(f, buf + n, (unsigned)(cap - n))) > 0) {
		n += (size_t)r;
		if (n == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
		}
	}
	gzclose(f);
	*len = n;
	return buf;
}

/* reference from a Kineto trace, parsed with jansson */
static void kineto_ref(const char *path, struct ref *ref, uint64_t *ref_kernels,
		       uint64_t *ref_joinable, uint64_t *ref_graph)
{
	size_t len;
	char *txt = gunzip_file(path, &len);
	json_error_t err;
	json_t *root = json_loadb(txt, len, 0, &err), *evs, *e;
	size_t i;

	free(txt);
	assert_non_null(root);
	evs = json_object_get(root, "traceEvents");
	assert_true(json_is_array(evs));
	ref->max = 0;
	json_array_foreach(evs, i, e)
	{
		json_t *c = json_object_get(json_object_get(e, "args"), "correlation");

		if (json_is_integer(c) && json_integer_value(c) >= (json_int_t)ref->max)
			ref->max = (uint32_t)json_integer_value(c) + 1;
	}
	ref->by_corr = calloc(ref->max + 1, sizeof(*ref->by_corr));
	json_array_foreach(evs, i, e)
	{
		const char *cat = json_string_value(json_object_get(e, "cat"));
		json_t *c = json_object_get(json_object_get(e, "args"), "correlation");
		struct ref_launch *r;

		if (!cat || !json_is_integer(c) ||
		    (strcmp(cat, "cuda_runtime") && strcmp(cat, "cuda_driver")))
			continue;
		r = &ref->by_corr[json_integer_value(c)];
		r->pid = (uint32_t)json_integer_value(json_object_get(e, "pid"));
		r->tid = (uint32_t)json_integer_value(json_object_get(e, "tid"));
		snprintf(r->api, sizeof(r->api), "%s",
			 json_string_value(json_object_get(e, "name")));
		r->set = true;
	}
	*ref_kernels = *ref_joinable = *ref_graph = 0;
	json_array_foreach(evs, i, e)
	{
		const char *cat = json_string_value(json_object_get(e, "cat"));
		json_t *c = json_object_get(json_object_get(e, "args"), "correlation");

		if (!cat || strcmp(cat, "kernel"))
			continue;
		(*ref_kernels)++;
		if (json_is_integer(c) && ref->by_corr[json_integer_value(c)].set) {
			(*ref_joinable)++;
			if (!strcmp(ref->by_corr[json_integer_value(c)].api, "cudaGraphLaunch"))
				(*ref_graph)++;
		}
	}
	json_decref(root);
}

static void run_kineto(const char *rel, uint64_t want_kernels, uint64_t want_joined)
{
	char path[1200];
	struct ref ref;
	struct check ck = {.ref = &ref};
	uint64_t rk, rj, rg;
	struct corr_opts co = {.sz = sizeof(co), .emit = on_gpu, .emit_ctx = &ck};
	struct corr_replay_opts ro = {.sz = sizeof(ro), .log = cap_log};
	struct corr_replay_stats st;

	if (data_path(path, sizeof(path), rel))
		skip(); /* ../shared/data absent: nothing to compare with */
	kineto_ref(path, &ref, &rk, &rj, &rg);
	assert_int_equal(rk, want_kernels);
	assert_int_equal(rj, want_joined);
	assert_int_equal(corr_replay_file(path, &co, &ro, &st), 0);
	assert_int_equal(st.format, CORR_FMT_KINETO);
	assert_int_equal(ck.kernels, want_kernels);
	assert_int_equal(ck.joined, want_joined);
	assert_int_equal(ck.unmatched, want_kernels - want_joined);
	assert_int_equal(ck.wrong, 0);
	assert_int_equal(ck.missed, 0);
	assert_int_equal(ck.graph_kernels, rg);
	assert_int_equal(st.corr.gpu_records, st.corr.joined + st.corr.unmatched);
	assert_int_equal(st.corr.launches_evicted + st.corr.gpu_evicted, 0);
	free(ref.by_corr);
}

/* ---------------------------------------------------------- real data -- */

static void test_vllm_h100(void **state)
{
	(void)state;
	run_kineto("kineto/tracemap_vllm_llama_tp4_h100_rank0.pt.trace.json.gz", 13508, 13508);
}

static void test_vllm_h100_graphs(void **state)
{
	char path[1200];
	struct ref ref;
	struct check ck = {.ref = &ref};
	uint64_t rk, rj, rg;
	struct corr_opts co = {.sz = sizeof(co), .emit = on_gpu, .emit_ctx = &ck};
	struct corr_replay_stats st;

	(void)state;
	if (data_path(path, sizeof(path),
		      "kineto/tracemap_vllm_llama_tp4_h100_rank0.pt.trace.json.gz"))
		skip();
	kineto_ref(path, &ref, &rk, &rj, &rg);
	assert_int_equal(corr_replay_file(path, &co, NULL, &st), 0);
	/* 9 decode steps x 963 graph-replayed kernels (data/README.md) */
	assert_int_equal(rg, 9 * 963);
	assert_int_equal(ck.graph_kernels, 9 * 963);
	/* 729 cudaGraphLaunch calls own them all */
	assert_int_equal(st.markers, 106126);
	free(ref.by_corr);
}

static void test_hf_qwen_unmatched(void **state)
{
	(void)state;
	run_kineto("kineto/tracelens_hf_qwen1.5-0.5b_h100.json.gz", 1465, 1029);
}

static void test_hta_rank0(void **state)
{
	(void)state;
	run_kineto("kineto/hta_sampled_rank-0.json.gz", 1154, 1154);
}

static void test_hta_rank1(void **state)
{
	(void)state;
	run_kineto("kineto/hta_sampled_rank-1.json.gz", 1104, 1104);
}

static void test_b200(void **state)
{
	(void)state;
	run_kineto("kineto/tracelens_vllm_tp8_b200_rank0_eager.json.gz", 768, 768);
}

static void test_ns_resolution(void **state)
{
	(void)state;
	run_kineto("kineto/hta_ddp_v100_rank0_ns_resolution.pt.trace.json.gz", 4350, 4350);
}

static void test_cloverleaf_nsys(void **state)
{
	char path[1200];
	struct ref ref = {0};
	struct check ck = {.ref = &ref, .pid_known = true};
	struct corr_opts co = {.sz = sizeof(co), .emit = on_gpu, .emit_ctx = &ck};
	struct corr_replay_opts ro = {.sz = sizeof(ro), .log = cap_log};
	struct corr_replay_stats st;
	sqlite3 *db;
	sqlite3_stmt *s;
	int bad_pid = 0;

	(void)state;
	if (data_path(path, sizeof(path), "nsys/pipit_cloverleaf_a100.nsys.sqlite"))
		skip();
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	/* the globalTid encoding, checked against the PROCESSES table */
	assert_int_equal(sqlite3_prepare_v2(db,
					    "SELECT DISTINCT k.globalPid, p.pid FROM "
					    "CUPTI_ACTIVITY_KIND_KERNEL k JOIN PROCESSES p "
					    "ON p.globalPid = k.globalPid",
					    -1, &s, NULL),
			 SQLITE_OK);
	while (sqlite3_step(s) == SQLITE_ROW)
		bad_pid += (((uint64_t)sqlite3_column_int64(s, 0) >> 24) & 0xFFFFFF) !=
			   (uint64_t)sqlite3_column_int64(s, 1);
	sqlite3_finalize(s);
	assert_int_equal(bad_pid, 0);
	/* reference join, the trace's own: same correlation id within the process */
	ref.max = 1 << 22;
	ref.by_corr = calloc(ref.max, sizeof(*ref.by_corr));
	assert_int_equal(sqlite3_prepare_v2(db,
					    "SELECT r.correlationId, r.globalTid, s.value FROM "
					    "CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
					    "ON s.id = r.nameId",
					    -1, &s, NULL),
			 SQLITE_OK);
	while (sqlite3_step(s) == SQLITE_ROW) {
		uint32_t c = (uint32_t)sqlite3_column_int64(s, 0);
		uint64_t gt = (uint64_t)sqlite3_column_int64(s, 1);

		assert_true(c < ref.max);
		ref.by_corr[c].pid = (uint32_t)((gt >> 24) & 0xFFFFFF);
		ref.by_corr[c].tid = (uint32_t)(gt & 0xFFFFFF);
		snprintf(ref.by_corr[c].api, sizeof(ref.by_corr[c].api), "%s",
			 (const char *)sqlite3_column_text(s, 2));
		ref.by_corr[c].set = true;
	}
	sqlite3_finalize(s);
	sqlite3_close(db);

	assert_int_equal(corr_replay_file(path, &co, &ro, &st), 0);
	assert_int_equal(st.format, CORR_FMT_NSYS);
	assert_int_equal(ck.kernels, 1312);
	assert_int_equal(ck.joined, 1312);
	assert_int_equal(ck.wrong, 0);
	free(ref.by_corr);
}

/* ------------------------------------------------------ synthetic ------ */

static const char tiny[] =
    "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n"
    "{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 42,"
    " \"tid\": 43, \"ts\": 12.5, \"dur\": 3, \"args\": {\"cbid\": 211, \"correlation\": 7}},\n"
    "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\\\"q\", \"pid\": 0, \"tid\": 7,"
    " \"ts\": 20.0005, \"dur\": 1.25, \"args\": {\"device\": 0, \"stream\": 7,"
    " \"correlation\": 7, \"grid\": [1, 2, 3], \"block\": [4, 5, 6]}},\n"
    "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"step#1\", \"pid\": 42,"
    " \"tid\": 43, \"ts\": 10, \"dur\": 100},\n"
    "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"orphan\", \"pid\": 0, \"tid\": 7,"
    " \"ts\": 30, \"dur\": 1, \"args\": {\"device\": 0, \"stream\": 7, \"correlation\": 8}}\n"
    "]}\n";

struct tiny_got {
	int n, markers;
	struct corr_gpu g[4];
	bool has_l[4];
	struct corr_launch l[4];
	char name[4][16];
	char api[4][32]; /* l[].api points into the correlator, freed after the replay */
};

static void tiny_emit(void *ctx, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct tiny_got *t = ctx;

	if (t->n >= 4)
		return;
	t->g[t->n] = *g;
	snprintf(t->name[t->n], sizeof(t->name[0]), "%s", g->name ? g->name : "");
	t->has_l[t->n] = l != NULL;
	if (l) {
		t->l[t->n] = *l;
		snprintf(t->api[t->n], sizeof(t->api[0]), "%s", l->api ? l->api : "(null)");
	}
	t->n++;
}

static void tiny_marker(void *ctx, const struct corr_marker *m)
{
	struct tiny_got *t = ctx;

	assert_string_equal(m->name, "step#1");
	assert_int_equal(m->ts_ns, 10000);
	assert_int_equal(m->dur_ns, 100000);
	t->markers++;
}

static void test_kineto_tiny(void **state)
{
	struct tiny_got t = {0};
	struct corr_opts co = {.sz = sizeof(co), .emit = tiny_emit, .emit_ctx = &t};
	struct corr_replay_opts ro = {.sz = sizeof(ro), .marker = tiny_marker, .marker_ctx = &t};
	struct corr_replay_stats st;

	(void)state;
	assert_int_equal(corr_replay_buf(tiny, sizeof(tiny) - 1, &co, &ro, &st), 0);
	assert_int_equal(t.n, 2);
	assert_true(t.has_l[0]);
	assert_int_equal(t.l[0].ts_ns, 12500);	  /* 12.5 µs */
	assert_int_equal(t.g[0].start_ns, 20001); /* 20.0005 µs, half up */
	assert_int_equal(t.g[0].end_ns, 21251);
	assert_int_equal(t.g[0].pid, 42);
	assert_int_equal(t.l[0].tid, 43);
	assert_string_equal(t.name[0], "k\"q");
	assert_int_equal(t.g[0].grid[2], 3);
	assert_int_equal(t.g[0].block[0], 4);
	assert_false(t.has_l[1]);
	assert_int_equal(t.g[1].pid, 0);
	assert_int_equal(t.markers, 1);
	assert_int_equal(st.markers, 1);
}

static void test_truncated_kineto(void **state)
{
	size_t len = sizeof(tiny) - 1;
	struct tiny_got t;
	struct corr_opts co = {.sz = sizeof(co), .emit = tiny_emit, .emit_ctx = &t};
	struct corr_replay_opts ro = {.sz = sizeof(ro), .log = cap_log};

	(void)state;
	/*
	 * every cut of the file fails cleanly, naming an offset, never crashes;
	 * also the cut after the events array (issue 18 #14: it was ok)
	 */
	for (size_t cut = 1; cut < len - 1; cut++) {
		memset(&t, 0, sizeof(t));
		logbuf[0] = '\0';
		char *copy = malloc(cut); /* exact size: ASan sees any overrun */

		memcpy(copy, tiny, cut);
		assert_int_not_equal(corr_replay_buf(copy, cut, &co, &ro, NULL), 0);
		assert_true(strstr(logbuf, "offset") || strstr(logbuf, "unknown format"));
		free(copy);
	}
	/* garbage in the middle */
	{
		char bad[] = "{\"traceEvents\": [{\"ph\": \"X\", \"ts\": @}]}";

		logbuf[0] = '\0';
		assert_int_equal(corr_replay_buf(bad, sizeof(bad) - 1, &co, &ro, NULL), -EINVAL);
		assert_non_null(strstr(logbuf, "byte offset 35"));
	}
}

static void write_file(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, len, f), len);
	fclose(f);
}

static void test_garbage_and_truncated_files(void **state)
{
	char dir[] = "/tmp/infertrace-replay-XXXXXX", path[256];
	struct tiny_got t = {0};
	struct corr_opts co = {.sz = sizeof(co), .emit = tiny_emit, .emit_ctx = &t};
	struct corr_replay_opts ro = {.sz = sizeof(ro), .log = cap_log};
	struct corr_replay_stats st;
	unsigned char junk[4096];
	gzFile gz;
	FILE *f;
	long full;

	(void)state;
	assert_non_null(mkdtemp(dir));

	/* random bytes */
	srand(1);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)rand();
	junk[0] = 0x01;
	snprintf(path, sizeof(path), "%s/junk.bin", dir);
	write_file(path, junk, sizeof(junk));
	logbuf[0] = '\0';
	assert_int_equal(corr_replay_file(path, &co, &ro, NULL), -EINVAL);
	assert_non_null(strstr(logbuf, "unknown format"));

	/* gzip of the tiny trace: whole, then cut in the middle */
	snprintf(path, sizeof(path), "%s/t.json.gz", dir);
	gz = gzopen(path, "wb");
	assert_non_null(gz);
	for (int i = 0; i < 50; i++) /* enough data for a multi-block stream */
		gzwrite(gz, i ? " " : tiny, i ? 1 : sizeof(tiny) - 1);
	gzclose(gz);
	assert_int_equal(corr_replay_file(path, &co, &ro, &st), 0);
	assert_int_equal(st.format, CORR_FMT_KINETO);
	f = fopen(path, "rb");
	fseek(f, 0, SEEK_END);
	full = ftell(f);
	fclose(f);
	assert_int_equal(truncate(path, full / 2), 0);
	logbuf[0] = '\0';
	assert_int_equal(corr_replay_file(path, &co, &ro, NULL), -EINVAL);
	assert_non_null(strstr(logbuf, "truncated"));

	/* an SQLite header followed by garbage */
	memcpy(junk, "SQLite format 3", 16);
	snprintf(path, sizeof(path), "%s/bad.sqlite", dir);
	write_file(path, junk, sizeof(junk));
	logbuf[0] = '\0';
	assert_int_not_equal(corr_replay_file(path, &co, &ro, NULL), 0);
	assert_non_null(strstr(logbuf, "nsys"));
	unlink(path);

	/* missing file */
	snprintf(path, sizeof(path), "%s/none", dir);
	assert_int_equal(corr_replay_file(path, &co, &ro, NULL), -ENOENT);

	snprintf(path, sizeof(path), "%s/t.json.gz", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/junk.bin", dir);
	unlink(path);
	rmdir(dir);
}

static void test_jsonl_roundtrip(void **state)
{
	char buf[8192], line[2048];
	size_t off = 0;
	struct corr_json_common cm = {.host = "h", .instance = "i"};
	struct corr_gpu g = {.kind = CORR_KIND_KERNEL,
			     .corr_id = 5,
			     .stream = 7,
			     .start_ns = 2000,
			     .end_ns = 2100,
			     .name = "_Z1fv"};
	struct corr_launch l = {
	    .pid = 9, .tid = 10, .ts_ns = 1500, .corr_id = 5, .api = "cudaLaunchKernel"};
	struct tiny_got t = {0};
	struct corr_opts co = {.sz = sizeof(co), .emit = tiny_emit, .emit_ctx = &t};
	struct corr_replay_opts ro = {.sz = sizeof(ro), .log = cap_log};
	struct corr_replay_stats st;
	int n;

	(void)state;
	n = corr_gpu_to_json(line, sizeof(line), &cm, &g, &l);
	assert_true(n > 0);
	off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%.*s\n", n, line);
	n = corr_gpu_to_json(line, sizeof(line), &cm, &g, NULL);
	off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%.*s\n", n, line);
	off += (size_t)snprintf(buf + off, sizeof(buf) - off,
				"{\"schema\":1,\"type\":\"process\",\"pid\":3}\n");
	assert_int_equal(corr_replay_buf(buf, off, &co, &ro, &st), 0);
	assert_int_equal(st.format, CORR_FMT_JSONL);
	assert_int_equal(t.n, 2);
	assert_true(t.has_l[0]);
	assert_int_equal(t.l[0].tid, 10);
	assert_int_equal(t.l[0].ts_ns, 1500);
	assert_false(t.has_l[1]);
	assert_int_equal(st.skipped, 1);

	/* a broken third line names line 3 */
	off =
	    (size_t)snprintf(buf, sizeof(buf), "{\"type\":\"x\"}\n{\"type\":\"y\"}\n{\"type\":\n");
	logbuf[0] = '\0';
	assert_int_equal(corr_replay_buf(buf, off, &co, &ro, &st), -EINVAL);
	assert_non_null(strstr(logbuf, "line 3"));
}

/* corr_replay_opts.cpu: the CPU events of a recording, as live handed them to the steps */
struct cpu_got {
	int n;
	struct diag_cpu_event e[8];
};

static void cpu_cb(void *ctx, const struct diag_cpu_event *e)
{
	struct cpu_got *c = ctx;

	if (c->n < 8)
		c->e[c->n] = *e;
	c->n++;
}

static void test_jsonl_cpu_events(void **state)
{
	static const char text[] =
	    "{\"type\":\"offcpu\",\"pid\":9,\"tid\":10,\"ts_ns\":100,\"dur_ns\":50,"
	    "\"cause\":\"preempted\",\"by_pid\":77}\n"
	    "{\"type\":\"syscall\",\"pid\":9,\"tid\":10,\"ts_ns\":200,\"dur_ns\":60}\n"
	    "{\"type\":\"cuda_code_load\",\"pid\":9,\"tid\":10,\"ts_ns\":300,\"dur_ns\":"
	    "41000000,\"api\":\"cuModuleLoadData\",\"ret\":0}\n"
	    "{\"type\":\"cuda_code_load\",\"tid\":10,\"ts_ns\":400,\"dur_ns\":1}\n"
	    "{\"type\":\"cuda_sync\",\"pid\":9,\"tid\":10,\"ts_ns\":500,\"dur_ns\":7}\n";
	struct cpu_got c = {0};
	struct tiny_got t = {0};
	struct corr_opts co = {.sz = sizeof(co), .emit = tiny_emit, .emit_ctx = &t};
	struct corr_replay_opts ro = {
	    .sz = sizeof(ro), .log = cap_log, .cpu = cpu_cb, .cpu_ctx = &c};
	struct corr_replay_stats st;

	(void)state;
	assert_int_equal(corr_replay_buf(text, sizeof(text) - 1, &co, &ro, &st), 0);
	assert_int_equal(c.n, 3);
	assert_int_equal(st.cpu_events, 3);
	assert_int_equal(c.e[0].kind, DIAG_CPU_RUNQ);
	assert_int_equal(c.e[0].other_pid, 77);
	assert_int_equal(c.e[1].kind, DIAG_CPU_SYSCALL);
	assert_int_equal(c.e[2].kind, DIAG_CPU_CODE_LOAD);
	assert_int_equal(c.e[2].pid, 9);
	assert_int_equal(c.e[2].tid, 10);
	assert_int_equal(c.e[2].ts_ns, 300);
	assert_int_equal(c.e[2].dur_ns, 41000000);
	/* whose unknown (no pid): skipped, as the cuda_sync (not a CPU event of a step) */
	assert_int_equal(st.skipped, 2);
}

/* corr_replay_opts.frames: what each GPU record's launch_python gave, and when */
struct frames_got {
	struct tiny_got *t;
	int calls;
	size_t n[8];
	int emitted_before[8]; /* GPU records emitted when the frames came */
	uint64_t ts[8];
	char first[8][64], file[8][64];
	int64_t first_line[8], line[8];
};

static void frames_cb(void *ctx, uint32_t pid, uint32_t tid, uint64_t ts,
		      const struct corr_py_frame *f, size_t n)
{
	struct frames_got *fg = ctx;
	int i = fg->calls++;

	assert_int_equal(pid, 9);
	assert_int_equal(tid, 10);
	assert_true(n <= CORR_PY_FRAMES_MAX);
	if (i >= 8)
		return;
	fg->n[i] = n;
	fg->ts[i] = ts;
	fg->emitted_before[i] = fg->t->n;
	if (n) {
		snprintf(fg->first[i], sizeof(fg->first[0]), "%s",
			 f[0].function ? f[0].function : "(null)");
		snprintf(fg->file[i], sizeof(fg->file[0]), "%s", f[0].file ? f[0].file : "(null)");
		fg->first_line[i] = f[0].first_line;
		fg->line[i] = f[0].line;
	}
}

/*
 * A deep recording's launch_python goes to corr_replay_opts.frames just
 * before its record joins again; a shape the agent never writes is
 * dropped whole and counted, its record kept; a record without a launch
 * hands nothing
 */
static void test_jsonl_frames(void **state)
{
#define K(corr, ts, extra)                                                                         \
	"{\"type\":\"kernel\",\"pid\":9,\"tid\":10,\"correlation_id\":" #corr ",\"start_ns\":" #ts \
	"000,\"end_ns\":" #ts "500,\"name\":\"k\",\"launch_ts_ns\":" #ts                           \
	",\"launch_src\":\"uprobe+cupti\",\"launch_api\":\"cudaLaunchKernel\"" extra "}\n"
	static const char text[] =
	    K(1, 1,
	      ",\"launch_python\":[{\"function\":\"Model.forward\",\"file\":\"m.py\","
	      "\"first_line\":50,\"line\":51},{\"function\":\"run\"}]")
		K(2, 2, ",\"launch_python\":\"Model.forward\"")
		    K(3, 3, ",\"launch_python\":[{\"function\":\"f\"},7]") K(4, 4, "")
			K(5, 5,
			  ",\"launch_python\":[{\"function\":3,\"line\":\"x\"}"
			  "]") "{\"type\":\"kernel\",\"pid\":9,\"correlation_"
			       "id\":6,\"start_ns\":"
			       "7000,\"end_ns\":7100,\"launch_python\":[{"
			       "\"function\":\"f\"}]}\n";
#undef K
	char big[16384];
	size_t o;
	struct tiny_got t;
	struct frames_got fg = {.t = &t};
	struct corr_opts co = {.sz = sizeof(co), .emit = tiny_emit, .emit_ctx = &t};
	struct corr_replay_opts ro = {
	    .sz = sizeof(ro), .log = cap_log, .frames = frames_cb, .frames_ctx = &fg};
	struct corr_replay_stats st;

	(void)state;
	memset(&t, 0, sizeof(t));
	assert_int_equal(corr_replay_buf(text, sizeof(text) - 1, &co, &ro, &st), 0);
	assert_int_equal(t.n, 4); /* tiny_got keeps 4 of the 6 */
	assert_int_equal(fg.calls, 5);
	/* 1: both frames, before its record was emitted */
	assert_int_equal(fg.n[0], 2);
	assert_int_equal(fg.emitted_before[0], 0);
	assert_int_equal(fg.ts[0], 1);
	assert_string_equal(fg.first[0], "Model.forward");
	assert_string_equal(fg.file[0], "m.py");
	assert_int_equal(fg.first_line[0], 50);
	assert_int_equal(fg.line[0], 51);
	/* 2 (a string) and 3 (an element not an object): none, counted */
	assert_int_equal(fg.n[1], 0);
	assert_int_equal(fg.emitted_before[1], 1);
	assert_int_equal(fg.n[2], 0);
	/* 4: no launch_python */
	assert_int_equal(fg.n[3], 0);
	/* 5: fields of other types are absent, not refused */
	assert_int_equal(fg.n[4], 1);
	assert_string_equal(fg.first[4], "(null)");
	assert_string_equal(fg.file[4], "(null)");
	assert_int_equal(fg.first_line[4], -1);
	assert_int_equal(fg.line[4], -1);
	assert_int_equal(st.python_frames, 2);
	assert_int_equal(st.python_bad, 2);

	/* 33 frames: more than the agent writes, dropped */
	o = (size_t)snprintf(big, sizeof(big),
			     "{\"type\":\"kernel\",\"pid\":9,\"tid\":10,\"correlation_id\":1,"
			     "\"start_ns\":2000,\"end_ns\":2100,\"launch_ts_ns\":1000,"
			     "\"launch_src\":\"uprobe+cupti\",\"launch_python\":[");
	for (int i = 0; i <= CORR_PY_FRAMES_MAX; i++)
		o += (size_t)snprintf(big + o, sizeof(big) - o, "%s{\"function\":\"f%d\"}",
				      i ? "," : "", i);
	o += (size_t)snprintf(big + o, sizeof(big) - o, "]}\n");
	memset(&t, 0, sizeof(t));
	memset(&fg, 0, sizeof(fg));
	fg.t = &t;
	assert_int_equal(corr_replay_buf(big, o, &co, &ro, &st), 0);
	assert_int_equal(fg.calls, 1);
	assert_int_equal(fg.n[0], 0);
	assert_int_equal(st.python_bad, 1);
	assert_int_equal(t.n, 1);
}

static void add(struct corr_pyspans *ps, uint32_t tid, uint64_t start, uint64_t dur,
		const char *name)
{
	assert_int_equal(corr_pyspans__add(ps, 1, tid, start, dur, name, strlen(name)), 0);
}

/* the frames open at ts on thread tid as "func@file:line" joined by " < " */
static const char *stack_at(struct corr_pyspans *ps, uint32_t tid, uint64_t ts, size_t max)
{
	static char out[512];
	struct corr_py_frame f[CORR_PY_FRAMES_MAX];
	size_t n = corr_pyspans__stack(ps, 1, tid, ts, f, max), o = 0;

	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(f[i].line, -1);
		o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%s@%s:%lld", i ? " < " : "",
				      f[i].function, f[i].file, (long long)f[i].first_line);
	}
	return out;
}

/*
 * Kineto's python_function spans (pyspans.c): the calls open at a launch,
 * innermost first, whether the spans came in order or not; built-ins and
 * names of another shape are no frames; a parent and its child starting
 * together; a stack deeper than asked for
 */
static void test_pyspans(void **state)
{
	struct corr_pyspans *ps = corr_pyspans__new(), *ps2;
	struct corr_pyspans_counts c;

	(void)state;
	assert_non_null(ps);
	/* in order, as PyTorch writes them: run > Model.forward > Attention.forward */
	add(ps, 10, 100, 1000, "engine.py(12): run");
	add(ps, 10, 100, 400, "model.py(50): Model.forward");
	add(ps, 10, 150, 100, "model.py(40): Attention.forward");
	add(ps, 10, 160, 10, "<built-in method empty of type object at 0x7f>");
	add(ps, 10, 600, 100, "sampler.py(7): sample");
	/* not frames: no file, no name, a number too long, no parentheses, nothing before */
	add(ps, 10, 100, 900, "(12): f");
	add(ps, 10, 100, 900, "): f");
	add(ps, 10, 100, 900, "x.py(12): ");
	add(ps, 10, 100, 900, "x.py(1234567890): f");
	add(ps, 10, 100, 900, "nccl:all_reduce");
	assert_string_equal(
	    stack_at(ps, 10, 160, 32),
	    "Attention.forward@model.py:40 < Model.forward@model.py:50 < run@engine.py:12");
	assert_string_equal(stack_at(ps, 10, 250, 32),
			    "Model.forward@model.py:50 < run@engine.py:12");
	assert_string_equal(stack_at(ps, 10, 100, 32),
			    "Model.forward@model.py:50 < run@engine.py:12");
	assert_string_equal(stack_at(ps, 10, 650, 32), "sample@sampler.py:7 < run@engine.py:12");
	assert_string_equal(stack_at(ps, 10, 1100, 32), ""); /* after run: nothing open */
	assert_string_equal(stack_at(ps, 10, 99, 32), "");
	assert_string_equal(stack_at(ps, 11, 160, 32), ""); /* another thread */
	assert_string_equal(stack_at(ps, 10, 160, 2),
			    "Attention.forward@model.py:40 < Model.forward@model.py:50");
	corr_pyspans__counts(ps, &c);
	assert_int_equal(c.spans, 4);
	assert_int_equal(c.not_python, 6);
	assert_int_equal(c.sorts, 0);
	assert_int_equal(c.truncated, 1);

	/* the same spans backwards, a child before its parent at the same start: one sort */
	ps2 = corr_pyspans__new();
	add(ps2, 10, 600, 100, "sampler.py(7): sample");
	add(ps2, 10, 150, 100, "model.py(40): Attention.forward");
	add(ps2, 10, 100, 400, "model.py(50): Model.forward");
	add(ps2, 10, 100, 1000, "engine.py(12): run");
	assert_string_equal(
	    stack_at(ps2, 10, 160, 32),
	    "Attention.forward@model.py:40 < Model.forward@model.py:50 < run@engine.py:12");
	assert_string_equal(stack_at(ps2, 10, 650, 32), "sample@sampler.py:7 < run@engine.py:12");
	/* added after a question: sorted again at the next */
	add(ps2, 10, 160, 5, "model.py(30): rope");
	assert_string_equal(
	    stack_at(ps2, 10, 162, 32),
	    "rope@model.py:30 < Attention.forward@model.py:40 < Model.forward@model.py:50 "
	    "< run@engine.py:12");
	corr_pyspans__counts(ps2, &c);
	assert_int_equal(c.sorts, 2);
	/* spans that overlap without nesting (forged): an answer, no crash */
	add(ps2, 10, 120, 400, "x.py(1): overlap");
	(void)stack_at(ps2, 10, 300, 32);
	corr_pyspans__free(ps2);
	corr_pyspans__free(ps);
}

/* ------------------------------------------- hostile input (issue 18) -- */

/* correlator/src/internal.h: not installed, exported by the library */
int corr_us_text_to_ns(const char *s, size_t len, uint64_t *out);

static int replay_text(const char *text, struct tiny_got *t, struct corr_replay_stats *st)
{
	struct corr_opts co = {.sz = sizeof(co), .emit = tiny_emit, .emit_ctx = t};
	struct corr_replay_opts ro = {.sz = sizeof(ro), .log = cap_log};
	size_t n = strlen(text);
	char *copy = malloc(n + 1); /* exact size: ASan sees any overrun */
	int err;

	memcpy(copy, text, n + 1);
	memset(t, 0, sizeof(*t));
	logbuf[0] = '\0';
	err = corr_replay_buf(copy, n, &co, &ro, st);
	free(copy);
	return err;
}

#define LAUNCH(name_field)                                                                         \
	"{\"traceEvents\": [\n{\"ph\": \"X\", \"cat\": \"cuda_runtime\", " name_field              \
	" \"pid\": 42, \"tid\": 43, \"ts\": 12.5, \"args\": {\"correlation\": 7}},\n"              \
	"{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"pid\": 0, \"tid\": 7, \"ts\": "   \
	"20,"                                                                                      \
	" \"args\": {\"correlation\": 7}}\n]}\n"

/* #12: an event without a string name (memcpy from NULL, caught by SAN=undefined) */
static void test_kineto_nameless(void **state)
{
	struct tiny_got t;

	(void)state;
	assert_int_equal(replay_text(LAUNCH(""), &t, NULL), 0);
	assert_int_equal(t.n, 1);
	assert_true(t.has_l[0]);
	assert_string_equal(t.api[0], "");
	assert_int_equal(replay_text(LAUNCH("\"name\": 5,"), &t, NULL), 0);
	assert_true(t.has_l[0]);
	assert_string_equal(t.api[0], "");
}

/* #12: an exponent beyond int (signed overflow) must be out of range, not 1 µs */
static void test_kineto_huge_exponent(void **state)
{
	static const char *const ts[] = {"1e4294967296", "1e-4294967296", "1e99999999999999999999",
					 "1.5E2147483648"};
	uint64_t ns = 0;
	struct tiny_got t;
	char buf[512];

	(void)state;
	assert_int_equal(corr_us_text_to_ns("1e3", 3, &ns), 0);
	assert_int_equal(ns, 1000000);
	for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
		ns = 0;
		assert_int_equal(corr_us_text_to_ns(ts[i], strlen(ts[i]), &ns), -ERANGE);
		snprintf(buf, sizeof(buf),
			 "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": %s}]}",
			 ts[i]);
		assert_int_equal(replay_text(buf, &t, NULL), -EINVAL);
		assert_non_null(strstr(logbuf, "bad timestamp"));
	}
}

/* #12: JSON-lines numbers beyond their field: an error naming it, not a cut value */
static void test_jsonl_out_of_range(void **state)
{
	static const char *const bad[] = {
	    "\"pid\":1.5e19", /* was pid 3470524416 */
	    "\"pid\":1e20",   /* beyond uint64_t: the conversion was undefined */
	    "\"pid\":4294967296",
	    "\"pid\":1,\"correlation_id\":99999999999",
	    "\"pid\":1,\"start_ns\":1e300",
	    "\"pid\":1,\"grid\":[1,4294967296,1]",
	};
	struct tiny_got t;
	char buf[512];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(buf, sizeof(buf),
			 "{\"type\":\"x\"}\n{\"schema\":1,\"type\":\"kernel\",%s}\n", bad[i]);
		assert_int_equal(replay_text(buf, &t, NULL), -EINVAL);
		assert_non_null(strstr(logbuf, "line 2"));
		assert_non_null(strstr(logbuf, "out of range"));
		assert_int_equal(t.n, 0);
	}
	/* in range, real or integer, and negative (unknown): accepted as before */
	assert_int_equal(replay_text("{\"type\":\"kernel\",\"pid\":4294967295,\"start_ns\":5.0,"
				     "\"end_ns\":-1}\n",
				     &t, NULL),
			 0);
	assert_int_equal(t.n, 1);
	assert_int_equal(t.g[0].pid, 4294967295u);
	assert_int_equal(t.g[0].start_ns, 5);
	assert_int_equal(t.g[0].end_ns, 0);
}

/* an nsys export with one kernel whose name is StringIds id `id` */
static void make_nsys(const char *path, long long id)
{
	char sql[1024];
	sqlite3 *db;

	unlink(path);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	snprintf(
	    sql, sizeof(sql),
	    "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
	    "INSERT INTO StringIds VALUES (%lld, 'kern'), (1, 'cudaLaunchKernel_v7000');"
	    "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, globalTid INT,"
	    " correlationId INT, nameId INT);"
	    "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (100, 110, %lld, 5, 1);"
	    "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT,"
	    " contextId INT, streamId INT, correlationId INT, globalPid INT, demangledName INT,"
	    " gridX INT, gridY INT, gridZ INT, blockX INT, blockY INT, blockZ INT);"
	    "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (200, 210, 0, 1, 7, 5, %lld, %lld,"
	    " 1, 1, 1, 32, 1, 1);",
	    id, (77LL << 24) | 78, 77LL << 24, id);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

static int nsys_once(const char *path, struct tiny_got *t)
{
	struct corr_opts co = {.sz = sizeof(co), .emit = tiny_emit, .emit_ctx = t};
	struct corr_replay_opts ro = {.sz = sizeof(ro), .log = cap_log};

	memset(t, 0, sizeof(*t));
	logbuf[0] = '\0';
	return corr_replay_file(path, &co, &ro, NULL);
}

/* #12, #16: StringIds ids are looked up, not indexed: no max(id) + 1, no huge array */
static void test_nsys_string_ids(void **state)
{
	char dir[] = "/tmp/infertrace-replay-XXXXXX", path[256];
	struct tiny_got t;
	pid_t child;
	int ws;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/x.sqlite", dir);
	/* INT64_MAX: max(id) + 1 overflowed ("implausible max id") */
	make_nsys(path, 9223372036854775807LL);
	assert_int_equal(nsys_once(path, &t), 0);
	assert_int_equal(t.n, 1);
	assert_true(t.has_l[0]);
	assert_int_equal(t.l[0].pid, 77);
	assert_int_equal(t.l[0].tid, 78);
	assert_string_equal(t.name[0], "kern");
	/*
	 * 60,000,000: a dense table of 480 MB before. The replay must fit
	 * in 256 MiB more address space than this process has (a child, as
	 * RLIMIT_AS is for good; not under ASan, whose shadow needs terabytes).
	 */
	make_nsys(path, 60000000);
#if !defined(__SANITIZE_ADDRESS__)
	child = fork();
	assert_true(child >= 0);
	if (!child) {
		struct rlimit rl;
		FILE *f = fopen("/proc/self/statm", "r");
		unsigned long pages = 0;

		if (!f || fscanf(f, "%lu", &pages) != 1)
			_exit(3);
		fclose(f);
		rl.rlim_cur = rl.rlim_max =
		    (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (256 << 20);
		if (setrlimit(RLIMIT_AS, &rl))
			_exit(4);
		_exit(nsys_once(path, &t) || t.n != 1 || strcmp(t.name[0], "kern") ? 1 : 0);
	}
	assert_int_equal(waitpid(child, &ws, 0), child);
	assert_true(WIFEXITED(ws));
	assert_int_equal(WEXITSTATUS(ws), 0);
#else
	(void)child;
	(void)ws;
#endif
	assert_int_equal(nsys_once(path, &t), 0);
	assert_string_equal(t.name[0], "kern");
	unlink(path);
	rmdir(dir);
}

/* #14: a trace cut or corrupted after traceEvents is an error */
static void test_kineto_after_events(void **state)
{
	static const char *const bad[] = {
	    "{\"traceEvents\": [], \"deviceProperties\": [{\"id\": 0, \"name\": \"H1",
	    "{\"traceEvents\": [], \"deviceProperties\": [{\"id\": 0}]",
	    "{\"traceEvents\": [], \"x\": 1} trailing",
	    "{\"traceEvents\": []}}",
	    "{\"traceEvents\": []}\n{\"traceEvents\": []}",
	    "[{\"ph\": \"X\"}] [",
	    "{\"traceEvents\": [], \"x\": tru}",
	};
	struct tiny_got t;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_not_equal(replay_text(bad[i], &t, NULL), 0);
		assert_non_null(strstr(logbuf, "offset"));
	}
	assert_int_equal(
	    replay_text("{\"traceEvents\": [], \"x\": [1, {\"y\": null}]}\n \n", &t, NULL), 0);
}

/* #15: errors that say what the input is; a BOM is no "unknown format" */
static void test_detect_messages(void **state)
{
	struct corr_replay_stats st;
	struct tiny_got t;
	char *bom = malloc(sizeof(tiny) + 3);

	(void)state;
	assert_int_equal(replay_text("{\"timestamp\": 0, \"input_length\": 5}\n"
				     "{\"timestamp\": 1, \"input_length\": 6}\n",
				     &t, &st),
			 -EINVAL);
	assert_int_equal(st.format, CORR_FMT_JSONL);
	assert_non_null(strstr(logbuf, "JSON lines: line 1"));
	assert_non_null(strstr(logbuf, "\"type\""));
	assert_null(strstr(logbuf, "traceEvents array"));
	/* a one-line JSON document without traceEvents is a Chrome trace without them */
	assert_int_equal(replay_text("{\"a\": 1}\n", &t, &st), -EINVAL);
	assert_non_null(strstr(logbuf, "no traceEvents array"));
	/* UTF-8 byte order mark, Chrome trace and JSON lines */
	memcpy(bom, "\xef\xbb\xbf", 3);
	memcpy(bom + 3, tiny, sizeof(tiny));
	assert_int_equal(replay_text(bom, &t, &st), 0);
	assert_int_equal(st.format, CORR_FMT_KINETO);
	assert_int_equal(t.n, 2);
	assert_int_equal(replay_text("\xef\xbb\xbf{\"type\":\"kernel\",\"pid\":3}\n", &t, &st), 0);
	assert_int_equal(st.format, CORR_FMT_JSONL);
	assert_int_equal(t.n, 1);
	/* a line beyond 1 MiB is no record of ours (a DOM would cost many times it) */
	{
		static const char head[] = "{\"type\":\"x\"}\n{\"type\":\"y\",\"pad\":\"";
		size_t n = (1 << 20) + 64;
		char *big = malloc(n + 1);

		memset(big, ' ', n);
		memcpy(big, head, sizeof(head) - 1);
		memcpy(big + n - 3, "\"}\n", 3);
		big[n] = '\0';
		assert_int_equal(replay_text(big, &t, NULL), -EINVAL);
		assert_non_null(strstr(logbuf, "line 2"));
		assert_non_null(strstr(logbuf, "longer than"));
		free(big);
	}
	free(bom);
}

/* #16: a gzip bomb is refused at a bound relative to its size */
static void test_gzip_bomb(void **state)
{
	char dir[] = "/tmp/infertrace-replay-XXXXXX", path[256];
	struct tiny_got t = {0};
	struct corr_opts co = {.sz = sizeof(co), .emit = tiny_emit, .emit_ctx = &t};
	struct corr_replay_opts ro = {.sz = sizeof(ro), .log = cap_log};
	static char spaces[1 << 20];
	struct stat sb;
	gzFile gz;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/bomb.json.gz", dir);
	memset(spaces, ' ', sizeof(spaces));
	gz = gzopen(path, "wb9");
	assert_non_null(gz);
	gzwrite(gz, tiny, sizeof(tiny) - 1);
	/* 96 MiB of white space after a valid trace: ~100 KB compressed */
	for (int i = 0; i < 96; i++)
		assert_int_equal(gzwrite(gz, spaces, sizeof(spaces)), (int)sizeof(spaces));
	gzclose(gz);
	assert_int_equal(stat(path, &sb), 0);
	assert_true(sb.st_size < (1 << 20));
	logbuf[0] = '\0';
	assert_int_equal(corr_replay_file(path, &co, &ro, NULL), -EFBIG);
	assert_non_null(strstr(logbuf, "gzip: expands beyond"));
	assert_int_equal(t.n, 0);
	unlink(path);
	rmdir(dir);
}

static volatile sig_atomic_t stop_flag;

static void on_alarm(int sig)
{
	(void)sig;
	stop_flag = 1;
}

/* #13: pipes and FIFOs are read as streams; a stop request ends a blocked replay */
static void test_pipe_fifo_stop(void **state)
{
	char dir[] = "/tmp/infertrace-replay-XXXXXX", path[256], fdpath[64];
	struct tiny_got t;
	struct corr_opts co = {.sz = sizeof(co), .emit = tiny_emit, .emit_ctx = &t};
	struct corr_replay_opts ro = {.sz = sizeof(ro), .log = cap_log, .stop = &stop_flag};
	struct corr_replay_stats st;
	struct sigaction sa = {.sa_handler = on_alarm}; /* no SA_RESTART: open() returns */
	int fds[2];
	pid_t child;

	(void)state;
	/* a pipe (`--replay <(cat trace)`): nothing to stat, nothing to reopen */
	assert_int_equal(pipe(fds), 0);
	child = fork();
	assert_true(child >= 0);
	if (!child) {
		close(fds[0]);
		_exit(write(fds[1], tiny, sizeof(tiny) - 1) == sizeof(tiny) - 1 ? 0 : 1);
	}
	close(fds[1]);
	snprintf(fdpath, sizeof(fdpath), "/dev/fd/%d", fds[0]);
	memset(&t, 0, sizeof(t));
	logbuf[0] = '\0';
	assert_int_equal(corr_replay_file(fdpath, &co, &ro, &st), 0);
	assert_int_equal(st.format, CORR_FMT_KINETO);
	assert_int_equal(t.n, 2);
	close(fds[0]);
	waitpid(child, NULL, 0);

	/* a FIFO without a writer: open() blocks until the stop request */
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/fifo", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(sigaction(SIGALRM, &sa, NULL), 0);
	stop_flag = 0;
	alarm(1);
	logbuf[0] = '\0';
	assert_int_equal(corr_replay_file(path, &co, &ro, &st), -EINTR);
	assert_non_null(strstr(logbuf, "stopped"));
	/* a stop already requested ends a replay of a buffer */
	assert_int_equal(corr_replay_buf(tiny, sizeof(tiny) - 1, &co, &ro, NULL), -EINTR);
	stop_flag = 0;
	signal(SIGALRM, SIG_DFL);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_vllm_h100),
	    cmocka_unit_test(test_vllm_h100_graphs),
	    cmocka_unit_test(test_hf_qwen_unmatched),
	    cmocka_unit_test(test_hta_rank0),
	    cmocka_unit_test(test_hta_rank1),
	    cmocka_unit_test(test_b200),
	    cmocka_unit_test(test_ns_resolution),
	    cmocka_unit_test(test_cloverleaf_nsys),
	    cmocka_unit_test(test_kineto_tiny),
	    cmocka_unit_test(test_truncated_kineto),
	    cmocka_unit_test(test_garbage_and_truncated_files),
	    cmocka_unit_test(test_jsonl_roundtrip),
	    cmocka_unit_test(test_jsonl_cpu_events),
	    cmocka_unit_test(test_kineto_nameless),
	    cmocka_unit_test(test_kineto_huge_exponent),
	    cmocka_unit_test(test_jsonl_out_of_range),
	    cmocka_unit_test(test_nsys_string_ids),
	    cmocka_unit_test(test_kineto_after_events),
	    cmocka_unit_test(test_detect_messages),
	    cmocka_unit_test(test_gzip_bomb),
	    cmocka_unit_test(test_pipe_fifo_stop),
	    cmocka_unit_test(test_jsonl_frames),
	    cmocka_unit_test(test_pyspans),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
