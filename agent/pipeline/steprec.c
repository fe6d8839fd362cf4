// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * steprec.c - the "step" record (docs/events.md): its one writer, used by
 * diagnosis for every step it cuts (agent/pipeline/diag.c), and its one
 * reader, used by --replay to re-judge a file of step records
 * (agent/sources/replay.c). Side by side so that a field added to one is
 * added to the other.
 */
#include <errno.h>
#include <string.h>

#include "state.h"
#include "pipeline.h"
#include "diagnose.h"

static json_t *int_or_null(int64_t v)
{
	return v < 0 ? json_null() : json_integer((json_int_t)v);
}

json_t *steprec_to_json(struct agent *a, const struct diag_step *s)
{
	json_t *o = rec_new(a, "step", s->pid, s->tid, s->start_ns), *top;

	if (!o)
		return NULL;
	top = json_array();
	json_object_set_new(o, "rank", s->rank < 0 ? json_null() : json_integer(s->rank));
	json_object_set_new(o, "seq", json_integer((json_int_t)s->seq));
	json_object_set_new(o, "start_ns", json_integer((json_int_t)s->start_ns));
	json_object_set_new(o, "dur_ns", json_integer((json_int_t)s->dur_ns));
	json_object_set_new(o, "phase", json_string(diag_phase_name(s->phase)));
	json_object_set_new(o, "tokens", int_or_null(s->tokens));
	json_object_set_new(o, "batch_size", int_or_null(s->batch_size));
	json_object_set_new(o, "kv_tokens", int_or_null(s->kv_tokens));
	json_object_set_new(o, "source", json_string(s->source));
	json_object_set_new(o, "marker", s->marker ? json_string(s->marker) : json_null());
	json_object_set_new(o, "gpu_busy_ns", int_or_null(s->gpu_busy_ns));
	json_object_set_new(o, "idle_ns", int_or_null(s->idle_ns));
	json_object_set_new(o, "idle_gaps", int_or_null(s->idle_gaps));
	json_object_set_new(o, "idle_max_ns", int_or_null(s->idle_max_ns));
	json_object_set_new(o, "kernels", int_or_null(s->kernels));
	json_object_set_new(o, "graph_kernels", int_or_null(s->graph_kernels));
	json_object_set_new(o, "memcpys", int_or_null(s->memcpys));
	json_object_set_new(o, "comm_ns", int_or_null(s->comm_ns));
	if (s->l2s_p50_ns >= 0)
		json_object_set_new(o, "launch_to_start_ns",
				    json_pack("{s:I,s:I,s:I}", "p50", (json_int_t)s->l2s_p50_ns,
					      "p90", (json_int_t)s->l2s_p90_ns, "p99",
					      (json_int_t)s->l2s_p99_ns));
	else
		json_object_set_new(o, "launch_to_start_ns", json_null());
	json_object_set_new(o, "offcpu_ns", int_or_null(s->offcpu_ns));
	json_object_set_new(o, "runq_ns", int_or_null(s->runq_ns));
	json_object_set_new(o, "slow_syscalls", int_or_null(s->slow_syscalls));
	json_object_set_new(o, "slow_syscall_ns", int_or_null(s->slow_syscall_ns));
	json_object_set_new(o, "code_loads", int_or_null(s->code_loads));
	json_object_set_new(o, "code_load_ns", int_or_null(s->code_load_ns));
	json_object_set_new(o, "net_bytes", int_or_null(s->net_bytes));
	json_object_set_new(o, "preempt_pid",
			    s->preempt_pid ? json_integer(s->preempt_pid) : json_null());
	for (uint32_t i = 0; i < s->n_top; i++)
		json_array_append_new(top, json_pack("{s:s,s:I,s:I}", "name",
						     s->top[i].name ? s->top[i].name : "", "count",
						     (json_int_t)s->top[i].count, "total_ns",
						     (json_int_t)s->top[i].total_ns));
	json_object_set_new(o, "top_kernels", top);
	return o;
}

static int64_t jint(const json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : DIAG_UNKNOWN;
}

static uint64_t jpos(const json_t *o, const char *k)
{
	int64_t v = jint(o, k);

	return v > 0 ? (uint64_t)v : 0;
}

int steprec_from_json(const json_t *o, struct diag_step *s)
{
	const char *type = json_string_value(json_object_get(o, "type"));
	const char *inst = json_string_value(json_object_get(o, "instance"));
	const char *phase = json_string_value(json_object_get(o, "phase"));
	const json_t *top = json_object_get(o, "top_kernels"), *l2s;

	if (!type || strcmp(type, "step"))
		return -ENOENT;
	diag_step_init(s);
	s->instance = inst ? inst : "";
	s->rank = json_is_integer(json_object_get(o, "rank"))
		      ? (int32_t)json_integer_value(json_object_get(o, "rank"))
		      : -1;
	s->pid = (uint32_t)jpos(o, "pid");
	s->tid = (uint32_t)jpos(o, "tid");
	s->seq = jpos(o, "seq");
	s->start_ns = jpos(o, "start_ns");
	s->dur_ns = jpos(o, "dur_ns");
	if (!s->dur_ns || (phase && diag_phase_parse(phase, &s->phase)))
		return -EINVAL;
	/* source and marker stay unset: a re-judged step's source is the record */
	s->tokens = jint(o, "tokens");
	s->batch_size = jint(o, "batch_size");
	s->kv_tokens = jint(o, "kv_tokens");
	s->gpu_busy_ns = jint(o, "gpu_busy_ns");
	s->idle_ns = jint(o, "idle_ns");
	s->idle_gaps = jint(o, "idle_gaps");
	s->idle_max_ns = jint(o, "idle_max_ns");
	s->kernels = jint(o, "kernels");
	s->graph_kernels = jint(o, "graph_kernels");
	s->memcpys = jint(o, "memcpys");
	s->comm_ns = jint(o, "comm_ns");
	l2s = json_object_get(o, "launch_to_start_ns");
	s->l2s_p50_ns = jint(l2s, "p50");
	s->l2s_p90_ns = jint(l2s, "p90");
	s->l2s_p99_ns = jint(l2s, "p99");
	s->offcpu_ns = jint(o, "offcpu_ns");
	s->runq_ns = jint(o, "runq_ns");
	s->slow_syscalls = jint(o, "slow_syscalls");
	s->slow_syscall_ns = jint(o, "slow_syscall_ns");
	s->code_loads = jint(o, "code_loads");
	s->code_load_ns = jint(o, "code_load_ns");
	s->net_bytes = jint(o, "net_bytes");
	s->preempt_pid = (uint32_t)jpos(o, "preempt_pid");
	for (size_t i = 0;
	     json_is_array(top) && i < json_array_size(top) && s->n_top < DIAG_TOP_MAX; i++) {
		const json_t *k = json_array_get(top, i);
		const char *name = json_string_value(json_object_get(k, "name"));

		if (!name || jint(k, "count") <= 0 || jint(k, "total_ns") < 0)
			continue;
		s->top[s->n_top++] = (struct diag_kernel){name, (uint64_t)jint(k, "count"),
							  (uint64_t)jint(k, "total_ns")};
	}
	return 0;
}
