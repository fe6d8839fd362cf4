// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * decode.c - ring-buffer records (bpf/events.h) to JSON lines
 * (docs/events.md). Every record is checked against its type's size before
 * a field is read; a malformed one is counted, never trusted.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <bpf/libbpf.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "diagnose.h"
#include "jsonw.h"
#include "nccl_live.h"

static const struct {
	unsigned type;
	size_t size;
} min_sizes[] = {
    {EV_CUDA_LAUNCH, sizeof(struct cuda_launch_event)},
    {EV_CUDA_SYNC, sizeof(struct cuda_sync_event)},
    {EV_OFFCPU, sizeof(struct offcpu_event)},
    {EV_RUNQ, sizeof(struct runq_event)},
    {EV_SYSCALL, sizeof(struct syscall_event)},
    {EV_TCP_RETRANS, sizeof(struct tcp_retrans_event)},
    {EV_PROC_EXEC, sizeof(struct process_event)},
    {EV_PROC_EXIT, sizeof(struct process_event)},
    {EV_LIB_MAP, sizeof(struct process_event)},
    {EV_STEP_MARK, sizeof(struct step_mark_event)},
    {EV_NET_IO, sizeof(struct net_io_event)},
    {EV_NCCL_CALL, sizeof(struct nccl_call_event)},
    {EV_NCCL_COMM, sizeof(struct nccl_comm_event)},
    {EV_NCCL_WAKE, sizeof(struct event_hdr)},
    {EV_PY_STACK, offsetof(struct py_stack_event, f)},
};

static json_t *hex(uint64_t v)
{
	char b[24];

	snprintf(b, sizeof(b), "0x%llx", (unsigned long long)v);
	return json_string(b);
}

static json_t *str_n(const char *s, size_t max)
{
	return json_stringn_nocheck(s, strnlen(s, max));
}

/* the common fields, in rec_new()'s order and form */

/*
 * One record per launch in deep mode: the hottest record, written with
 * jsonw rather than a jansson tree (about 5x cheaper; make bench shows the
 * agent's CPU per million records).
 */
long decode_launch_json(struct agent *a, const struct cuda_launch_event *e, size_t size, char *buf,
			size_t cap)
{
	bool is_copy = e->api == API_CUDA_MEMCPY_ASYNC || e->api == API_CUDA_MEMCPY_ASYNC_PTSZ;
	bool is_graph = e->api == API_CUDA_GRAPH_LAUNCH || e->api == API_CUDA_GRAPH_LAUNCH_PTSZ ||
			e->api == API_CU_GRAPH_LAUNCH || e->api == API_CU_GRAPH_LAUNCH_PTSZ;
	struct jsonw w;
	long len;

	if (e->flags & LAUNCH_F_STACK) {
		if (size < sizeof(struct cuda_launch_stack_event) ||
		    e->stack_sz / 8 > MAX_STACK_DEPTH) {
			a->cnt.bad_records++;
			return -EINVAL;
		}
	}
	jw_init(&w, buf, cap);
	jw_common(&w, "cuda_launch", a->host, agent_instance_of(a, e->hdr.pid),
		  e->hdr.pid ? (int64_t)e->hdr.pid : JW_OMIT,
		  e->hdr.tid ? (int64_t)e->hdr.tid : JW_OMIT, e->hdr.ts_ns);
	jw_str(&w, "api", corr_api_name(e->api));
	if (is_copy) {
		jw_hex(&w, "stream", e->stream);
		jw_hex(&w, "dst", e->func);
		jw_uint(&w, "bytes", e->arg);
		jw_uint(&w, "copy_kind", e->kind);
	} else if (is_graph) {
		jw_hex(&w, "stream", e->stream);
		jw_hex(&w, "graph_exec", e->func);
	} else if (e->flags & LAUNCH_F_REGS_ONLY) {
		/* what was not read is left out, never written as 0 */
		bool ex = e->api == API_CUDA_LAUNCH_KERNEL_EXC ||
			  e->api == API_CUDA_LAUNCH_KERNEL_EXC_PTSZ ||
			  e->api == API_CU_LAUNCH_KERNEL_EX ||
			  e->api == API_CU_LAUNCH_KERNEL_EX_PTSZ;

		jw_hex(&w, "func", e->func);
		if (!ex) {
			jw_dim3(&w, "grid", e->grid);
			if (e->api == API_CUDA_LAUNCH_KERNEL ||
			    e->api == API_CUDA_LAUNCH_KERNEL_PTSZ)
				jw_dim3(&w, "block", e->block);
		}
		jw_key(&w, "regs_only");
		jw_raw(&w, "true", 4);
	} else {
		jw_hex(&w, "stream", e->stream);
		jw_hex(&w, "func", e->func);
		jw_dim3(&w, "grid", e->grid);
		jw_dim3(&w, "block", e->block);
		jw_uint(&w, "shared_mem", e->arg);
	}
	if (e->flags & LAUNCH_F_STACK) {
		const struct cuda_launch_stack_event *se = (const void *)e;
		unsigned n = e->stack_sz / 8;
		char b[24];

		jw_key(&w, "stack");
		jw_raw(&w, "[", 1);
		for (unsigned i = 0; i < n; i++) {
			int k = snprintf(b, sizeof(b), "%s\"0x%llx\"", i ? "," : "",
					 (unsigned long long)se->ips[i]);

			jw_raw(&w, b, (size_t)k);
		}
		jw_raw(&w, "]", 1);
		python_launch_json(a, e->hdr.pid, e->hdr.tid, e->hdr.ts_ns, &w);
	}
	len = jw_end(&w);
	if (len < 0) {
		a->cnt.json_errors++;
		return -ENOSPC;
	}
	return len;
}

static int decode_launch(struct agent *a, const struct cuda_launch_event *e, size_t size)
{
	char buf[DECODE_LAUNCH_MAX];
	long len = decode_launch_json(a, e, size, buf, sizeof(buf));

	if (len < 0)
		return (int)len;
	return rec_emit_raw(a, REC_EVENT, agent_instance_of(a, e->hdr.pid), buf, (size_t)len);
}

/*
 * A GPU code load (cuModuleLoadData, -Ex) holds its thread like a
 * synchronising call and comes the same way (EV_CUDA_SYNC); its record and
 * its place in the step's breakdown (to_diag()) are its own.
 */
static bool is_code_load(const struct event_hdr *h)
{
	const struct cuda_sync_event *e = (const void *)h;

	return h->type == EV_CUDA_SYNC && e->api < 32 && (API_CODE_LOAD & API_BIT(e->api));
}

static int decode_code_load(struct agent *a, const struct cuda_sync_event *e)
{
	json_t *r = rec_new(a, "cuda_code_load", e->hdr.pid, e->hdr.tid, e->hdr.ts_ns);

	json_object_set_new(r, "api", json_string(corr_api_name(e->api)));
	json_object_set_new(r, "dur_ns", json_integer((json_int_t)e->dur_ns));
	json_object_set_new(r, "ret", json_integer(e->ret));
	return rec_emit(a, REC_EVENT, r);
}

static int decode_sync(struct agent *a, const struct cuda_sync_event *e)
{
	json_t *r;

	if (is_code_load(&e->hdr))
		return decode_code_load(a, e);
	r = rec_new(a, "cuda_sync", e->hdr.pid, e->hdr.tid, e->hdr.ts_ns);
	json_object_set_new(r, "api", json_string(corr_api_name(e->api)));
	/* the BPF side keeps the call's one argument in stream (bpf/cuda.bpf.c) */
	if (e->api == API_CUDA_EVENT_SYNCHRONIZE || e->api == API_CU_EVENT_SYNCHRONIZE)
		json_object_set_new(r, "event", hex(e->stream));
	else if (e->api == API_CUDA_MEMCPY)
		json_object_set_new(r, "copy_kind", json_integer((json_int_t)e->stream));
	else
		json_object_set_new(r, "stream", hex(e->stream));
	json_object_set_new(r, "dur_ns", json_integer((json_int_t)e->dur_ns));
	json_object_set_new(r, "ret", json_integer(e->ret));
	return rec_emit(a, REC_EVENT, r);
}

/*
 * Thread names for single events: reading /proc for every record would cost
 * more than the rest of the record, so names are cached, direct-mapped by
 * tid (bounded; a reused tid is told apart by its pid; a rename shows after
 * the entry is replaced).
 */
#define COMM_CACHE 4096

static struct {
	uint32_t pid, tid;
	char comm[TASK_COMM_LEN + 1];
} comm_cache[COMM_CACHE];

static void set_comm(json_t *r, uint32_t pid, uint32_t tid)
{
	typeof(comm_cache[0]) *c = &comm_cache[tid % COMM_CACHE];

	if (c->tid != tid || c->pid != pid || !c->comm[0]) {
		thread_comm(pid, tid, c->comm, sizeof(c->comm));
		c->pid = pid;
		c->tid = tid;
	}
	json_object_set_new(r, "comm", rec_string(c->comm));
}

static int decode_offcpu(struct agent *a, const struct offcpu_event *e)
{
	json_t *r = rec_new(a, "offcpu", e->hdr.pid, e->hdr.tid, e->hdr.ts_ns);

	set_comm(r, e->hdr.pid, e->hdr.tid);
	json_object_set_new(r, "dur_ns", json_integer((json_int_t)e->dur_ns));
	json_object_set_new(r, "cause",
			    json_string(e->cause == OFFCPU_PREEMPTED ? "preempted" : "blocked"));
	json_object_set_new(r, "by_tid", json_integer(e->by_tid));
	json_object_set_new(r, "by_pid", json_integer(e->by_pid));
	json_object_set_new(r, "by_comm", str_n(e->by_comm, sizeof(e->by_comm)));
	return rec_emit(a, REC_EVENT, r);
}

static int decode_runq(struct agent *a, const struct runq_event *e)
{
	json_t *r = rec_new(a, "runq", e->hdr.pid, e->hdr.tid, e->hdr.ts_ns);

	set_comm(r, e->hdr.pid, e->hdr.tid);
	json_object_set_new(r, "dur_ns", json_integer((json_int_t)e->dur_ns));
	return rec_emit(a, REC_EVENT, r);
}

static int decode_syscall(struct agent *a, const struct syscall_event *e)
{
	json_t *r = rec_new(a, "syscall", e->hdr.pid, e->hdr.tid, e->hdr.ts_ns);
	const char *name = syscall_name(e->nr);

	aggregate_note_syscall(a, e->hdr.tid, e->nr, e->dur_ns);
	set_comm(r, e->hdr.pid, e->hdr.tid);
	json_object_set_new(r, "nr", json_integer(e->nr));
	json_object_set_new(r, "name", name ? json_string(name) : json_null());
	json_object_set_new(r, "dur_ns", json_integer((json_int_t)e->dur_ns));
	json_object_set_new(r, "ret", json_integer(e->ret));
	return rec_emit(a, REC_EVENT, r);
}

static json_t *addr_json(unsigned family, const __u8 *addr)
{
	char buf[INET6_ADDRSTRLEN];

	if (!inet_ntop(family == 10 ? AF_INET6 : AF_INET, addr, buf, sizeof(buf)))
		return json_null();
	return json_string(buf);
}

static int decode_retrans(struct agent *a, const struct tcp_retrans_event *e)
{
	json_t *r = rec_new(a, "tcp_retransmit", e->hdr.pid, 0, e->hdr.ts_ns);

	/* pid absent: the owner is unknown (a socket nobody sent on since start) */
	json_object_set_new(r, "family", json_string(e->family == 10 ? "ipv6" : "ipv4"));
	json_object_set_new(r, "saddr", addr_json(e->family, e->saddr));
	json_object_set_new(r, "sport", json_integer(e->sport));
	json_object_set_new(r, "daddr", addr_json(e->family, e->daddr));
	json_object_set_new(r, "dport", json_integer(e->dport));
	json_object_set_new(r, "state", json_string(tcp_state_name(e->state)));
	json_object_set_new(r, "netns", json_integer(e->netns));
	return rec_emit(a, REC_EVENT, r);
}

static void to_diag(struct agent *a, const struct event_hdr *h)
{
	struct diag_cpu_event e = {.pid = h->pid, .tid = h->tid, .ts_ns = h->ts_ns};

	if (h->type == EV_OFFCPU) {
		const struct offcpu_event *o = (const void *)h;

		/* a preempted thread waits in the run queue: that is CPU contention */
		e.kind = o->cause == OFFCPU_PREEMPTED ? DIAG_CPU_RUNQ : DIAG_CPU_OFFCPU;
		e.dur_ns = o->dur_ns;
		e.other_pid = o->by_pid; /* the process that took the CPU, not its thread */
	} else if (h->type == EV_RUNQ) {
		return; /* already counted in the off-CPU interval that holds it */
	} else if (h->type == EV_NET_IO) {
		const struct net_io_event *n = (const void *)h;

		e.kind = DIAG_CPU_NET;
		e.dur_ns = n->dur_ns;
		e.bytes = n->tx_bytes + n->rx_bytes;
	} else if (h->type == EV_CUDA_SYNC) { /* a code load (is_code_load()) */
		e.kind = DIAG_CPU_CODE_LOAD;
		e.dur_ns = ((const struct cuda_sync_event *)h)->dur_ns;
	} else {
		e.kind = DIAG_CPU_SYSCALL;
		e.dur_ns = ((const struct syscall_event *)h)->dur_ns;
	}
	diag_on_cpu(a->diag, &e);
}

int decode_record(struct agent *a, const void *data, size_t size)
{
	const struct event_hdr *h = data;
	bool known = false;

	a->cnt.records++;
	if (size < sizeof(*h) || h->size > size) {
		a->cnt.bad_records++;
		return -EINVAL;
	}
	for (size_t i = 0; i < sizeof(min_sizes) / sizeof(min_sizes[0]); i++) {
		if (min_sizes[i].type != h->type)
			continue;
		if (size < min_sizes[i].size) {
			a->cnt.bad_records++;
			return -EINVAL;
		}
		known = true;
	}
	if (!known) {
		a->cnt.bad_records++;
		return -EINVAL;
	}

	/* a step's breakdown counts its launching thread's CPU events */
	if (a->diag && (h->type == EV_OFFCPU || h->type == EV_RUNQ || h->type == EV_SYSCALL ||
			h->type == EV_NET_IO || is_code_load(h)))
		to_diag(a, data);

	switch (h->type) {
	case EV_CUDA_LAUNCH: {
		/* the record first: its Python frames are then kept for its GPU records */
		int err = decode_launch(a, data, size);

		gpu_on_launch(a, data);
		return err;
	}
	case EV_CUDA_SYNC:
		return decode_sync(a, data);
	case EV_OFFCPU:
		return decode_offcpu(a, data);
	case EV_RUNQ:
		return decode_runq(a, data);
	case EV_SYSCALL:
		return decode_syscall(a, data);
	case EV_TCP_RETRANS:
		return decode_retrans(a, data);
	case EV_LIB_MAP:
		discovery_on_lib_map(a, h->pid);
		return 0;
	case EV_PROC_EXEC:
		discovery_on_exec(a, h->pid);
		return 0;
	case EV_PROC_EXIT:
		/*
		 * rb_cuda first (rb_misc may be read after it: its uprobe launches
		 * and NCCL records, and the slots' NCCL calls, were written before
		 * the exit), then the shim's last records, the correlator, discovery
		 */
		slots_consume(a);
		shim_on_exit(a, h->pid, h->ts_ns);
		diag_on_exit(a->diag, h->pid); /* after the shim's last records */
		nccl_on_exit(a, h->pid);
		return 0;
	case EV_STEP_MARK:
		a->cnt.step_marks++;
		diag_on_step_mark(a->diag, data);
		return 0;
	case EV_NET_IO:
		return 0; /* only the steps use them (to_diag above) */
	case EV_NCCL_CALL:
		/* deep capture's: sentinel's calls that came before it (a deep-dive began) first */
		slots_nccl_before(a, h->ts_ns);
		nccl_on_call(a, data);
		return 0;
	case EV_NCCL_COMM:
		slots_nccl_before(a, h->ts_ns); /* the calls before it, in the slots */
		nccl_on_comm(a, data);
		return 0;
	case EV_NCCL_WAKE:
		return 0; /* the consume that decodes it drains the slots (slots.c) */
	case EV_PY_STACK: {
		const struct py_stack_event *e = data;

		if (e->n > PY_STACK_DEPTH ||
		    size < offsetof(struct py_stack_event, f) + e->n * sizeof(e->f[0])) {
			a->cnt.bad_records++;
			return 0;
		}
		python_on_stack(a, e);
		return 0;
	}
	}
	return 0;
}
