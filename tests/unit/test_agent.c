// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * test_agent.c - the agent's parsers and decoders, without BPF: /proc maps
 * lines, library names, instance names from an environment, histogram
 * buckets, and ring records, forged ones included.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "jsonw.h"
#include "numparse.h"
#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "diagnose.h"
#include "json_assert.h"
#include "correlator.h"

/* a sink that keeps the last record */
struct mem_sink {
	struct sink s;
	char last[8192];
	int n;
};

static int mem_write(struct sink *s, enum rec_class cls, const char *key, const char *json,
		     size_t len)
{
	struct mem_sink *m = (struct mem_sink *)s;

	(void)cls;
	(void)key;
	snprintf(m->last, sizeof(m->last), "%.*s", (int)len, json);
	m->n++;
	return 0;
}

static int mem_flush(struct sink *s, int t)
{
	(void)s;
	(void)t;
	return 0;
}

static void mem_close(struct sink *s)
{
	(void)s;
}

static struct agent *agent_new(struct mem_sink *m)
{
	struct agent *a = calloc(1, sizeof(*a));

	assert_non_null(a);
	snprintf(a->host, sizeof(a->host), "testhost");
	memset(m, 0, sizeof(*m));
	m->s.write = mem_write;
	m->s.flush = mem_flush;
	m->s.close = mem_close;
	a->sinks[0] = &m->s;
	a->n_sinks = 1;
	return a;
}

static void test_maps_line(void **state)
{
	unsigned long maj, min, ino;
	char path[512];
	bool exec;

	(void)state;
	assert_int_equal(maps_parse_line("7f0000000000-7f0000100000 r-xp 00001000 fd:01 1234567 "
					 "   /usr/local/cuda/lib64/libcudart.so.13.0.48\n",
					 &maj, &min, &ino, path, sizeof(path), &exec),
			 0);
	assert_int_equal(maj, 0xfd);
	assert_int_equal(min, 1);
	assert_int_equal(ino, 1234567);
	assert_true(exec);
	assert_string_equal(path, "/usr/local/cuda/lib64/libcudart.so.13.0.48");

	assert_int_equal(maps_parse_line("7f00-7f10 rw-p 00000000 00:00 0 \n", &maj, &min, &ino,
					 path, sizeof(path), &exec),
			 0);
	assert_false(exec);
	assert_string_equal(path, "");
	/* paths with spaces stay whole */
	assert_int_equal(maps_parse_line("1-2 r-xp 0 08:02 9 /opt/my dir/libcuda.so.1\n", &maj,
					 &min, &ino, path, sizeof(path), &exec),
			 0);
	assert_string_equal(path, "/opt/my dir/libcuda.so.1");
	assert_int_equal(maps_parse_line("garbage", &maj, &min, &ino, path, sizeof(path), &exec),
			 -EINVAL);
	assert_int_equal(maps_parse_line("", &maj, &min, &ino, path, sizeof(path), &exec), -EINVAL);
}

static void test_lib_kind(void **state)
{
	(void)state;
	assert_int_equal(cuda_lib_kind("/usr/local/cuda/lib64/libcudart.so.13"), 1);
	assert_int_equal(cuda_lib_kind("libcudart.so"), 1);
	assert_int_equal(cuda_lib_kind("/x/libcudart-d0da41ae.so.11.0"), 1); /* pip wheels */
	assert_int_equal(cuda_lib_kind("/usr/lib/x86_64-linux-gnu/libcuda.so.1"), 2);
	assert_int_equal(cuda_lib_kind("/usr/local/cuda/lib64/stubs/libcuda.so"), 2);
	assert_int_equal(cuda_lib_kind("/usr/lib/libcudnn.so.9"), 0);
	assert_int_equal(cuda_lib_kind("/usr/lib/libcuda_wrapper.so"), 0);
	assert_int_equal(cuda_lib_kind("/opt/libcudart.so/other.so"), 0);
}

static void test_instance_env(void **state)
{
	static const char env[] = "PATH=/bin\0INFERTRACE_INSTANCE=llama-70b/replica-3\0HOME=/";
	static const char none[] = "PATH=/bin\0INFERTRACE_INSTANC=x\0";
	static const char empty_val[] = "INFERTRACE_INSTANCE=\0";
	char out[64];

	(void)state;
	assert_non_null(instance_from_environ(env, sizeof(env), out, sizeof(out)));
	assert_string_equal(out, "llama-70b/replica-3");
	assert_null(instance_from_environ(none, sizeof(none), out, sizeof(out)));
	/* an empty value does not name an instance */
	assert_null(instance_from_environ(empty_val, sizeof(empty_val), out, sizeof(out)));
	/* no terminating NUL at the end of the block: stay inside it */
	assert_non_null(instance_from_environ("INFERTRACE_INSTANCE=abc", 23, out, sizeof(out)));
	assert_string_equal(out, "abc");
	{
		/* kept as records show it: invalid bytes as U+FFFD, counted */
		static const char bad[] = "INFERTRACE_INSTANCE=a\xff b\xc3";
		uint64_t before = jw_utf8_replaced();
		char big[160], inst[128];

		assert_non_null(instance_from_environ(bad, sizeof(bad), out, sizeof(out)));
		assert_string_equal(out, "a\xef\xbf\xbd b\xef\xbf\xbd");
		assert_int_equal(jw_utf8_replaced() - before, 2);
		/* too long: cut at a character (e-acute is 2 bytes: 126, not 127) */
		memcpy(big, "INFERTRACE_INSTANCE=", 20);
		for (int i = 0; i < 64; i++)
			memcpy(big + 20 + 2 * i, "\xc3\xa9", 2);
		assert_non_null(instance_from_environ(big, 20 + 128, inst, sizeof(inst)));
		assert_int_equal(strlen(inst), 126);
		assert_int_equal(jw_utf8_replaced() - before, 2);
		memset(big + 20, 'n', 130);
		assert_non_null(instance_from_environ(big, 20 + 130, inst, sizeof(inst)));
		assert_int_equal(strlen(inst), 127);
	}
}

/* INFERTRACE_RANK, else LOCAL_RANK, else RANK; whole decimal numbers only */
static void test_rank_env(void **state)
{
	static const char all[] = "RANK=5\0LOCAL_RANK=1\0INFERTRACE_RANK=3\0";
	static const char local[] = "RANK=5\0LOCAL_RANK=2\0";
	static const char global[] = "PATH=/bin\0RANK=7\0";
	static const char bad_local[] = "LOCAL_RANK=abc\0RANK=4\0";
	static const char bad_ours[] = "INFERTRACE_RANK=x1\0LOCAL_RANK=2\0";
	static const char neighbours[] = "RANKS=3\0XRANK=4\0RANK=\0NODE_RANK=1\0";
	static const char big[] = "RANK=70000\0";

	(void)state;
	assert_int_equal(rank_from_environ(all, sizeof(all)), 3);
	assert_int_equal(rank_from_environ(local, sizeof(local)), 2);
	assert_int_equal(rank_from_environ(global, sizeof(global)), 7);
	assert_int_equal(rank_from_environ(bad_local, sizeof(bad_local)), 4);
	/* a malformed rank of ours is said, not replaced by a guess */
	assert_int_equal(rank_from_environ(bad_ours, sizeof(bad_ours)), -2);
	assert_int_equal(rank_from_environ(neighbours, sizeof(neighbours)), -1);
	assert_int_equal(rank_from_environ(big, sizeof(big)), -1);
	assert_int_equal(rank_from_environ("RANK=0", 6), 0); /* no final NUL */
}

static void test_hist(void **state)
{
	__u64 slots[HIST_SLOTS] = {}, prev[HIST_SLOTS] = {};
	json_t *h;

	(void)state;
	assert_int_equal(hist_lower_us(0), 0);
	assert_int_equal(hist_lower_us(1), 2);
	assert_int_equal(hist_lower_us(13), 8192);
	slots[0] = 3;
	slots[13] = 10;
	prev[13] = 4;
	h = hist_to_json(slots, prev, HIST_SLOTS);
	assert_int_equal(json_object_size(h), 2);
	assert_json_int(h, "0", 3);
	assert_json_int(h, "8192", 6);
	json_decref(h);
}

static void test_decode_launch(void **state)
{
	struct cuda_launch_event e = {};
	struct mem_sink m;
	struct agent *a = agent_new(&m);
	json_t *r;

	(void)state;
	e.hdr.type = EV_CUDA_LAUNCH;
	e.hdr.size = sizeof(e);
	e.hdr.pid = 4242;
	e.hdr.tid = 4243;
	e.hdr.ts_ns = 123456789;
	e.api = API_CU_LAUNCH_KERNEL_EX;
	e.func = 0xdef2;
	e.stream = 0x5001;
	e.grid[0] = 11;
	e.grid[1] = 12;
	e.grid[2] = 13;
	e.block[0] = 64;
	e.block[1] = 2;
	e.block[2] = 1;
	e.arg = 512;
	assert_int_equal(decode_record(a, &e, sizeof(e)), 0);
	r = json_loads(m.last, 0, NULL);
	assert_non_null(r);
	assert_json_str(r, "type", "cuda_launch");
	assert_json_str(r, "api", "cuLaunchKernelEx");
	assert_json_int(r, "pid", 4242);
	assert_json_int(r, "tid", 4243);
	assert_json_int(r, "ts_ns", 123456789);
	assert_json_str(r, "func", "0xdef2");
	assert_json_str(r, "stream", "0x5001");
	assert_int_equal(json_integer_value(json_array_get(json_object_get(r, "grid"), 2)), 13);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(r, "block"), 0)), 64);
	assert_json_int(r, "shared_mem", 512);
	assert_json_int(r, "schema", INFERTRACE_SCHEMA_VERSION);
	assert_json_str(r, "host", "testhost");
	json_decref(r);
	free(a);
}

/*
 * An exit first consumes rb_cuda (the launches the process made before it,
 * agent/sources/slots.c): with no rings opened it consumes nothing and the
 * exit is taken
 */
static void test_decode_exit_no_rings(void **state)
{
	struct process_event e = {};
	struct mem_sink m;
	struct agent *a = agent_new(&m);

	(void)state;
	assert_null(a->rb_cuda);
	e.hdr.type = EV_PROC_EXIT;
	e.hdr.size = sizeof(e);
	e.hdr.pid = 4242;
	e.hdr.tid = 4242;
	e.hdr.ts_ns = 123456789;
	assert_int_equal(decode_record(a, &e, sizeof(e)), 0);
	assert_int_equal(a->in_ring, 0);
	assert_int_equal(slots_consume(a), 0);
	free(a);
}

/* forged or truncated records are counted and never read past their end */
static void test_decode_forged(void **state)
{
	unsigned char buf[sizeof(struct cuda_launch_stack_event)] = {};
	struct event_hdr *h = (struct event_hdr *)buf;
	struct cuda_launch_event *e = (struct cuda_launch_event *)buf;
	struct mem_sink m;
	struct agent *a = agent_new(&m);

	(void)state;
	/* shorter than a header */
	assert_int_equal(decode_record(a, buf, 10), -EINVAL);
	/* header claims more than was received */
	h->type = EV_OFFCPU;
	h->size = 200;
	assert_int_equal(decode_record(a, buf, sizeof(struct offcpu_event)), -EINVAL);
	/* too short for its type */
	h->size = 30;
	assert_int_equal(decode_record(a, buf, 30), -EINVAL);
	/* unknown type */
	h->type = 999;
	h->size = 24;
	assert_int_equal(decode_record(a, buf, 24), -EINVAL);
	/* a stack flag without the stack */
	h->type = EV_CUDA_LAUNCH;
	h->size = sizeof(*e);
	e->flags = LAUNCH_F_STACK;
	e->stack_sz = 8 * MAX_STACK_DEPTH;
	assert_int_equal(decode_record(a, buf, sizeof(*e)), -EINVAL);
	/* a stack size beyond the array */
	h->size = sizeof(buf);
	e->stack_sz = 8 * (MAX_STACK_DEPTH + 1);
	assert_int_equal(decode_record(a, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(a->cnt.bad_records, 6);
	assert_int_equal(m.n, 0);
	/* and a valid stack record goes through */
	e->stack_sz = 16;
	assert_int_equal(decode_record(a, buf, sizeof(buf)), 0);
	assert_int_equal(m.n, 1);
	assert_non_null(strstr(m.last, "\"stack\":[\"0x0\",\"0x0\"]"));
	free(a);
}

static void test_names(void **state)
{
	(void)state;
	/* one table for the agent and the correlator (correlator/src/corr.c) */
	assert_string_equal(corr_api_name(API_CUDA_GRAPH_LAUNCH), "cudaGraphLaunch");
	assert_string_equal(corr_api_name(API_CU_GRAPH_LAUNCH_PTSZ), "cuGraphLaunch_ptsz");
	assert_string_equal(corr_api_name(API_COUNT), "unknown");
	assert_string_equal(corr_api_name(1000), "unknown");
	for (unsigned i = 0; i < API_COUNT; i++) {
		assert_string_not_equal(corr_api_name(i), "unknown");
		assert_int_equal(corr_api_is_driver(i),
				 !!((API_DRIVER | API_CODE_LOAD) & API_BIT(i)));
		assert_int_equal(corr_api_is_driver(i),
				 corr_api_name(i)[2] != 'd'); /* cu vs cuda */
	}
	assert_string_equal(syscall_name(0), "read");
	assert_null(syscall_name(100000));
	assert_string_equal(tcp_state_name(1), "ESTABLISHED");
	assert_string_equal(tcp_state_name(200), "UNKNOWN");
}

/* the hand writer's output parses back to the same values, escapes included */
static void test_jsonw(void **state)
{
	const uint32_t d[3] = {1, 2, 4294967295u};
	char buf[256], small[16];
	struct jsonw w;
	json_t *r;
	long n;

	(void)state;
	jw_init(&w, buf, sizeof(buf));
	jw_str(&w, "s", "a\"b\\c\n\x01/é");
	jw_int(&w, "neg", -42);
	jw_hex(&w, "h", 0xdeadbeef);
	jw_dim3(&w, "d", d);
	jw_strn(&w, "cut", "abcdef", 3);
	n = jw_end(&w);
	assert_true(n > 0);
	r = json_loadb(buf, (size_t)n, 0, NULL);
	assert_non_null(r);
	assert_json_str(r, "s", "a\"b\\c\n\x01/é");
	assert_json_int(r, "neg", -42);
	assert_json_str(r, "h", "0xdeadbeef");
	assert_int_equal(json_integer_value(json_array_get(json_object_get(r, "d"), 2)),
			 4294967295LL);
	assert_json_str(r, "cut", "abc");
	json_decref(r);
	/* jansson has no unsigned 64-bit integers: check the text itself */
	jw_init(&w, buf, sizeof(buf));
	jw_uint(&w, "big", UINT64_MAX);
	n = jw_end(&w);
	assert_int_equal(n, strlen("{\"big\":18446744073709551615}"));
	assert_memory_equal(buf, "{\"big\":18446744073709551615}", (size_t)n);

	/* what does not fit is reported, never written past the buffer */
	memset(small, 'X', sizeof(small));
	jw_init(&w, small, sizeof(small) - 1);
	jw_str(&w, "key", "a value longer than the buffer");
	assert_int_equal(jw_end(&w), -1);
	assert_int_equal(small[sizeof(small) - 1], 'X');
}

/* option numbers: the whole string, within bounds, else untouched */
/* the common fields: the hand writer and the jansson builder write the same bytes */
static void test_common_fields_agree(void **state)
{
	static const struct {
		uint32_t pid, tid;
	} ids[] = {{0, 0}, {42, 0}, {42, 43}};
	struct mem_sink m;
	struct agent *a = agent_new(&m);

	(void)state;
	a->opts.instance = "llama/0 \"q\""; /* escaped the same way too */
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		json_t *o = rec_new(a, "step", ids[i].pid, ids[i].tid, 123456789012345ull);
		char hand[512], *tree;
		struct jsonw w;
		long n;

		jw_init(&w, hand, sizeof(hand));
		jw_common(&w, "step", a->host, agent_instance_of(a, ids[i].pid),
			  ids[i].pid ? (int64_t)ids[i].pid : JW_OMIT,
			  ids[i].tid ? (int64_t)ids[i].tid : JW_OMIT, 123456789012345ull);
		n = jw_end(&w);
		assert_true(n > 0 && (size_t)n < sizeof(hand));
		hand[n] = '\0';
		tree = json_dumps(o, JSON_COMPACT);
		assert_string_equal(hand, tree);
		free(tree);
		json_decref(o);
	}
	free(a);
}

/* the step record's writer and reader (agent/pipeline/steprec.c) agree field by field */
static void test_steprec_round_trip(void **state)
{
	struct mem_sink m;
	struct agent *a = agent_new(&m);
	struct diag_step s, back;
	json_t *o, *parsed;
	char *text;

	(void)state;
	diag_step_init(&s);
	s.rank = 3;
	s.pid = 42;
	s.tid = 43;
	s.seq = 7;
	s.start_ns = 1000000000123ull;
	s.dur_ns = 75000000;
	s.phase = DIAG_PHASE_DECODE;
	s.tokens = 64;
	s.batch_size = 64;
	s.kv_tokens = 131072;
	s.source = "usdt";
	s.gpu_busy_ns = 70000000;
	s.idle_ns = 5000000;
	s.idle_gaps = 3;
	s.idle_max_ns = 4000000;
	s.kernels = 1375;
	s.graph_kernels = 963;
	s.memcpys = 7;
	s.comm_ns = 1400000;
	s.l2s_p50_ns = 800000;
	s.l2s_p90_ns = 900000;
	s.l2s_p99_ns = 1000000;
	s.offcpu_ns = 120000;
	s.runq_ns = 30000;
	s.slow_syscalls = 2;
	s.slow_syscall_ns = 2500000;
	s.code_loads = 3;
	s.code_load_ns = 41000000;
	s.net_bytes = 4096;
	s.preempt_pid = 99;
	s.n_top = 1;
	s.top[0] = (struct diag_kernel){"gemm", 160, 9980963};
	o = steprec_to_json(a, &s);
	assert_non_null(o);
	/* through text, as a file of step records is read back */
	text = json_dumps(o, JSON_COMPACT);
	parsed = json_loads(text, 0, NULL);
	assert_non_null(parsed);
	assert_int_equal(steprec_from_json(parsed, &back), 0);
	assert_string_equal(back.instance, "testhost");
	assert_int_equal(back.rank, s.rank);
	assert_int_equal(back.pid, s.pid);
	assert_int_equal(back.tid, s.tid);
	assert_int_equal(back.seq, s.seq);
	assert_int_equal(back.start_ns, s.start_ns);
	assert_int_equal(back.dur_ns, s.dur_ns);
	assert_int_equal(back.phase, s.phase);
	assert_int_equal(back.tokens, s.tokens);
	assert_int_equal(back.batch_size, s.batch_size);
	assert_int_equal(back.kv_tokens, s.kv_tokens);
	assert_int_equal(back.gpu_busy_ns, s.gpu_busy_ns);
	assert_int_equal(back.idle_ns, s.idle_ns);
	assert_int_equal(back.idle_gaps, s.idle_gaps);
	assert_int_equal(back.idle_max_ns, s.idle_max_ns);
	assert_int_equal(back.kernels, s.kernels);
	assert_int_equal(back.graph_kernels, s.graph_kernels);
	assert_int_equal(back.memcpys, s.memcpys);
	assert_int_equal(back.comm_ns, s.comm_ns);
	assert_int_equal(back.l2s_p50_ns, s.l2s_p50_ns);
	assert_int_equal(back.l2s_p90_ns, s.l2s_p90_ns);
	assert_int_equal(back.l2s_p99_ns, s.l2s_p99_ns);
	assert_int_equal(back.offcpu_ns, s.offcpu_ns);
	assert_int_equal(back.runq_ns, s.runq_ns);
	assert_int_equal(back.slow_syscalls, s.slow_syscalls);
	assert_int_equal(back.slow_syscall_ns, s.slow_syscall_ns);
	assert_int_equal(back.code_loads, s.code_loads);
	assert_int_equal(back.code_load_ns, s.code_load_ns);
	assert_int_equal(back.net_bytes, s.net_bytes);
	assert_int_equal(back.preempt_pid, s.preempt_pid);
	assert_int_equal(back.n_top, 1);
	assert_string_equal(back.top[0].name, "gemm");
	assert_int_equal(back.top[0].count, 160);
	assert_int_equal(back.top[0].total_ns, 9980963);
	/* unknown fields are written null and read back unknown */
	diag_step_init(&s);
	s.dur_ns = 1;
	json_decref(o);
	json_decref(parsed);
	free(text);
	o = steprec_to_json(a, &s);
	assert_int_equal(steprec_from_json(o, &back), 0);
	assert_int_equal(back.tokens, DIAG_UNKNOWN);
	assert_int_equal(back.offcpu_ns, DIAG_UNKNOWN);
	assert_int_equal(back.l2s_p99_ns, DIAG_UNKNOWN);
	assert_int_equal(back.rank, -1);
	/* not a step, and a step without a duration */
	json_object_set_new(o, "dur_ns", json_integer(0));
	assert_int_equal(steprec_from_json(o, &back), -EINVAL);
	json_object_set_new(o, "type", json_string("kernel"));
	assert_int_equal(steprec_from_json(o, &back), -ENOENT);
	json_decref(o);
	free(a);
}

/*
 * The process table's pid index (issue 18, finding 18): every slot is found
 * by pid, an exited process only when no live one has the pid, and the
 * index is empty again once every slot is freed.
 */
static void test_proc_index(void **state)
{
	struct agent *a = calloc(1, sizeof(*a));
	struct proc *p;
	int n = MAX_PROCS;

	(void)state;
	assert_non_null(a);
	/* pids that share buckets: every PROC_BUCKETS-th, and a reused pid */
	for (int i = 0; i < n; i++) {
		p = &a->procs[i];
		p->used = true;
		p->pid = i < n / 2 ? 1000 + (uint32_t)i : 7 + (uint32_t)(i - n / 2) * PROC_BUCKETS;
		p->start_time = 1 + (uint64_t)i;
		proc_index_add(a, p);
	}
	a->n_procs = n;
	for (int i = 0; i < n; i++)
		assert_ptr_equal(proc_find_live(a, a->procs[i].pid), &a->procs[i]);
	assert_null(proc_find(a, 999));
	/* pid 1000 exits; a new process gets the pid in slot 0's place: the live one wins */
	a->procs[0].start_time = PROC_GONE;
	assert_null(proc_find_live(a, 1000));
	assert_ptr_equal(proc_find(a, 1000), &a->procs[0]);
	proc_index_del(a, &a->procs[n - 1]);
	a->procs[n - 1].pid = 1000;
	a->procs[n - 1].start_time = 99;
	proc_index_add(a, &a->procs[n - 1]);
	assert_ptr_equal(proc_find(a, 1000), &a->procs[n - 1]);
	assert_ptr_equal(proc_find_live(a, 1000), &a->procs[n - 1]);
	/* every slot freed, in an order unlike insertion: the index is empty */
	for (int i = 0; i < n; i += 2)
		proc_index_del(a, &a->procs[i]);
	for (int i = 1; i < n; i += 2)
		proc_index_del(a, &a->procs[i]);
	for (int b = 0; b < PROC_BUCKETS; b++)
		assert_int_equal(a->proc_head[b], 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(a->proc_next[i], 0);
	assert_null(proc_find(a, 1001));
	free(a);
}

/* /proc/PID/stat's start time (field 22), comm with spaces and ')' */
static void test_stat_start_time(void **state)
{
	const char *line = "4242 (a) b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 "
			   "3 0 1173005 10000 200 18446744073709551615";

	(void)state;
	assert_int_equal(stat_start_time(line), 1173005);
	assert_int_equal(stat_start_time("4242 (x) S 1 2"), 0);
	assert_int_equal(stat_start_time("no paren"), 0);
}

static void test_numparse(void **state)
{
	double d = -1;
	long l = -1;

	(void)state;
	assert_int_equal(parse_double("0.25", 0.01, 3600, &d), 0);
	assert_true(d == 0.25);
	assert_int_equal(parse_double("0.001", 0.01, 3600, &d), -EINVAL);
	assert_int_equal(parse_double("1e9999", 0, 1e300, &d), -EINVAL);
	assert_int_equal(parse_double("nan", 0, 1, &d), -EINVAL);
	assert_int_equal(parse_double("2s", 0, 10, &d), -EINVAL);
	assert_int_equal(parse_double("", 0, 10, &d), -EINVAL);
	assert_true(d == 0.25);
	assert_int_equal(parse_long("4096", 64, 1 << 20, &l), 0);
	assert_int_equal(l, 4096);
	assert_int_equal(parse_long("12abc", 0, 100, &l), -EINVAL);
	assert_int_equal(parse_long("99999999999999999999", 0, 100, &l), -EINVAL);
	assert_int_equal(parse_long("-1", 0, 100, &l), -EINVAL);
	assert_int_equal(l, 4096);
}

/*
 * --detect model=grid|cells (agent/pipeline/diag.c diag_option): the word
 * reaches the detector's options; any other word, or none, is refused and
 * leaves the setting as it was
 */
static void test_detect_model(void **state)
{
	struct agent_opts o = {0};

	(void)state;
	assert_int_equal(o.diag.det.model, DIAG_MODEL_GRID); /* the default */
	assert_int_equal(diag_option(&o, "detect", "model=cells"), 0);
	assert_int_equal(o.diag.det.model, DIAG_MODEL_CELLS);
	assert_int_equal(diag_option(&o, "detect", "model=fast"), -EINVAL);
	assert_int_equal(diag_option(&o, "detect", "model="), -EINVAL);
	assert_int_equal(diag_option(&o, "detect", "model=1"), -EINVAL);
	assert_int_equal(o.diag.det.model, DIAG_MODEL_CELLS);
	assert_int_equal(diag_option(&o, "detect", "model=grid"), 0);
	assert_int_equal(o.diag.det.model, DIAG_MODEL_GRID);
	/* the names eval_detect prints are the ones parsed */
	assert_string_equal(diag_model_name(DIAG_MODEL_GRID), "grid");
	assert_string_equal(diag_model_name(DIAG_MODEL_CELLS), "cells");
	/* the numeric keys are untouched by the word key */
	assert_int_equal(diag_option(&o, "detect", "window=8"), 0);
	assert_int_equal(o.diag.det.window, 8);
	assert_int_equal(o.diag.det.model, DIAG_MODEL_GRID);
}

/* what gpusum_print() writes for s, in buf (freed by the caller) */
static char *gpusum_text(const struct gpusum *s)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	gpusum_print(s, f);
	fclose(f);
	assert_non_null(buf);
	return buf;
}

/*
 * --summary's GPU records (agent/pipeline/gpusum.c): a device's busy time is
 * the union of its records' activity, whatever their order, while it keeps
 * 65,536 disjoint spans; past them the oldest are closed, a record that
 * ends before the closed time is counted late, one that straddles it counts
 * from it on. The launch waits' quantiles are the largest value of their
 * bucket (struct qhist). A name's control characters are printed as '?'.
 */
static void test_gpusum(void **state)
{
	struct gpusum *s = gpusum_new();
	struct corr_gpu g = {.kind = CORR_KIND_KERNEL, .device = 3, .name = "k"};
	struct corr_launch l = {.api = "cudaLaunchKernel"};
	char *text;

	(void)state;
	assert_non_null(s);
	/* out of order within the kept spans: odd ones first, then the even ones, then a cover */
	for (int pass = 1; pass >= 0; pass--)
		for (uint64_t i = pass; i < 100; i += 2) {
			g.start_ns = 1000000 + 10000 * i;
			g.end_ns = g.start_ns + 5000;
			l.ts_ns = g.start_ns - 1000000;
			gpusum_add(s, &g, &l);
		}
	g.start_ns = 1003000; /* over spans 0..4 and the gaps between: [1.000, 1.045) ms */
	g.end_ns = 1042000;
	gpusum_add(s, &g, NULL);
	text = gpusum_text(s);
	/* 95 spans of 5 us and one of 45 us: 0.520 ms busy over [1.000, 1.995) ms */
	assert_non_null(strstr(text,
			       "records      101: 101 kernels (0.539 ms), 0 copies (0.000 ms), "
			       "0 sets; 100 joined to their launch\n"));
	assert_non_null(strstr(text,
			       "device 3    101 records over 0.995 ms: busy 0.520 ms (52.3%), "
			       "their durations add to 0.539 ms\n"));
	/* 1 ms waits: bucket [0.917, 1.049) ms, printed as the largest */
	assert_non_null(strstr(text, "p50 1000.0 us, p90 1000.0 us, p99 1000.0 us, max 1000.0 us "
				     "over 100 joined"));
	assert_non_null(strstr(text, "   0.539 ms 100.0%      101      5.3 us     39.0 us  k\n"));
	assert_null(strstr(text, "came after"));
	free(text);
	gpusum_free(s);

	/* 65,546 disjoint spans in order: the first 10 closed; then one late, one straddling */
	s = gpusum_new();
	assert_non_null(s);
	for (uint64_t i = 0; i < 65546; i++) {
		g.start_ns = 10000 * i;
		g.end_ns = 10000 * i + 5000;
		gpusum_add(s, &g, NULL);
	}
	g.start_ns = 0; /* before the closed time (95 us): late */
	g.end_ns = 3000;
	gpusum_add(s, &g, NULL);
	g.start_ns = 93000; /* from 95 us on: [95, 200) us over spans 10..19 */
	g.end_ns = 200000;
	gpusum_add(s, &g, NULL);
	text = gpusum_text(s);
	/* 65,546 x 5 us + 55 us = 327.785 ms */
	assert_non_null(strstr(text, "device 3    65548 records over 655.455 ms: busy 327.785 ms"));
	assert_non_null(
	    strstr(text, "1 records came after their time was closed (65536 spans kept)"));
	free(text);
	gpusum_free(s);

	/* a recording's name cannot steer the terminal */
	s = gpusum_new();
	assert_non_null(s);
	g.name = "k\x1b[2J\tx";
	gpusum_add(s, &g, NULL);
	text = gpusum_text(s);
	assert_non_null(strstr(text, "  k?[2J?x\n"));
	free(text);
	gpusum_free(s);
	gpusum_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_maps_line),
	    cmocka_unit_test(test_lib_kind),
	    cmocka_unit_test(test_instance_env),
	    cmocka_unit_test(test_rank_env),
	    cmocka_unit_test(test_hist),
	    cmocka_unit_test(test_decode_launch),
	    cmocka_unit_test(test_decode_forged),
	    cmocka_unit_test(test_decode_exit_no_rings),
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_jsonw),
	    cmocka_unit_test(test_numparse),
	    cmocka_unit_test(test_proc_index),
	    cmocka_unit_test(test_stat_start_time),
	    cmocka_unit_test(test_steprec_round_trip),
	    cmocka_unit_test(test_common_fields_agree),
	    cmocka_unit_test(test_detect_model),
	    cmocka_unit_test(test_gpusum),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
