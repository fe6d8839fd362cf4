// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * stats.c - the observer observes itself: a "stats" record every interval
 * and at exit with what BPF emitted and dropped per event type, what user
 * space decoded, rejected and wrote (docs/events.md, "stats").
 */
#include <bpf/libbpf.h>

#include "state.h"
#include "ops.h"
#include "infertrace.skel.h"

static const char *const type_names[EV_TYPE_MAX] = {
	[EV_CUDA_LAUNCH] = "cuda_launch", [EV_CUDA_SYNC] = "cuda_sync",
	[EV_OFFCPU] = "offcpu",		  [EV_RUNQ] = "runq",
	[EV_SYSCALL] = "syscall",	  [EV_TCP_RETRANS] = "tcp_retransmit",
	[EV_PROC_EXEC] = "proc_exec",	  [EV_PROC_EXIT] = "proc_exit",
	[EV_LIB_MAP] = "lib_map",	  [EV_STEP_MARK] = "step_mark",
	[EV_NET_IO] = "net_io",
	[EV_GPU_KERNEL] = "gpu_kernel",	  [EV_GPU_MEMCPY] = "gpu_memcpy",
	[EV_GPU_MEMSET] = "gpu_memset",	  [EV_GPU_LAUNCH_CB] = "gpu_launch_cb",
	[EV_SHIM_STATUS] = "shim_status",
};

const char *event_type_name(int t)
{
	return t >= 0 && t < EV_TYPE_MAX ? type_names[t] : NULL;
}

static json_t *by_type(const uint64_t *v)
{
	json_t *o = json_object();

	for (int t = 0; t < EV_TYPE_MAX; t++)
		if (type_names[t])
			json_object_set_new(o, type_names[t], json_integer((json_int_t)v[t]));
	return o;
}

void stats_emit(struct agent *a, uint64_t interval_ns, bool final)
{
	uint64_t events[EV_TYPE_MAX] = {}, drops[EV_TYPE_MAX] = {};
	int procs = 0, files = 0, probes = 0;
	json_t *r;

	if (a->skel) {
		loader_read_type_counts(a, bpf_map__fd(a->skel->maps.event_counts), events);
		loader_read_type_counts(a, bpf_map__fd(a->skel->maps.drop_counts), drops);
	}
	for (int i = 0; i < a->n_procs; i++)
		procs += a->procs[i].used && a->procs[i].start_time != PROC_GONE;
	for (int i = 0; i < MAX_LIBFILES; i++)
		if (a->libs[i].used && !a->libs[i].rejected) {
			files++;
			probes += a->libs[i].n_links;
		}
	r = rec_new(a, "stats", 0, 0, now_ns());
	json_object_set_new(r, "interval_ns", json_integer((json_int_t)interval_ns));
	json_object_set_new(r, "final", json_boolean(final));
	json_object_set_new(r, "mode", json_string(a->opts.mode == MODE_DEEP ? "deep" : "sentinel"));
	json_object_set_new(r, "bpf_events", by_type(events));
	json_object_set_new(r, "bpf_drops", by_type(drops));
	json_object_set_new(r, "records_decoded", json_integer((json_int_t)a->cnt.records));
	json_object_set_new(r, "bad_records", json_integer((json_int_t)a->cnt.bad_records));
	json_object_set_new(r, "emitted",
			    json_pack("{sIsIsIsI}", "event", (json_int_t)a->cnt.emitted[REC_EVENT],
				      "summary", (json_int_t)a->cnt.emitted[REC_SUMMARY], "anomaly",
				      (json_int_t)a->cnt.emitted[REC_ANOMALY], "stats",
				      (json_int_t)a->cnt.emitted[REC_STATS]));
	json_object_set_new(r, "sink_errors", json_integer((json_int_t)a->cnt.sink_errors));
	json_object_set_new(r, "json_errors", json_integer((json_int_t)a->cnt.json_errors));
	json_object_set_new(r, "attach_errors", json_integer((json_int_t)a->cnt.attach_errors));
	json_object_set_new(r, "maps_read_errors",
			    json_integer((json_int_t)a->cnt.maps_read_errors));
	json_object_set_new(r, "proc_table_full", json_integer((json_int_t)a->cnt.proc_table_full));
	json_object_set_new(r, "usdt_processes", json_integer((json_int_t)a->cnt.usdt_procs));
	json_object_set_new(r, "usdt_errors", json_integer((json_int_t)a->cnt.usdt_errors));
	json_object_set_new(r, "usdt_files", json_integer((json_int_t)a->cnt.usdt_files));
	json_object_set_new(r, "usdt_files_read", json_integer((json_int_t)a->cnt.usdt_files_read));
	json_object_set_new(r, "step_marks", json_integer((json_int_t)a->cnt.step_marks));
	json_object_set_new(r, "traced_processes", json_integer(procs));
	json_object_set_new(r, "processes_seen", json_integer((json_int_t)a->cnt.procs_seen));
	json_object_set_new(r, "processes_exited", json_integer((json_int_t)a->cnt.procs_exited));
	json_object_set_new(r, "attached_files", json_integer(files));
	json_object_set_new(r, "attached_probes", json_integer(probes));
	json_object_set_new(r, "shim_errors", json_integer((json_int_t)a->cnt.shim_errors));
	gpu_stats(a, r);
	diag_stats(a->diag, r);
	/* sinks with counters of their own (the Kafka sink: "kafka"); before
	 * ops_stats, which keeps the record for /metrics (infertrace_kafka_*) */
	for (int i = 0; i < a->n_sinks; i++)
		if (a->sinks[i]->stats)
			a->sinks[i]->stats(a->sinks[i], r);
	ops_stats(a, r);
	rec_emit(a, REC_STATS, r);
}
