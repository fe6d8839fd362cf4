// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * stats.c - the observer observes itself: a "stats" record every interval
 * and at exit with what BPF emitted and dropped per event type, what user
 * space decoded, rejected and wrote (docs/events.md, "stats").
 */

#include <malloc.h>

#include "state.h"
#include "util.h"
#include "pipeline.h"
#include "sources.h"
#include "ops.h"
#include "jsonw.h"

static json_t *by_type(const uint64_t *v)
{
	json_t *o = json_object();

	for (int t = 0; t < EV_TYPE_MAX; t++)
		if (event_type_name(t))
			json_object_set_new(o, event_type_name(t), json_integer((json_int_t)v[t]));
	return o;
}

void stats_provide(struct agent *a, void (*fn)(struct agent *a, json_t *obj))
{
	if (a->ops && a->ops->n_providers < STATS_PROVIDERS)
		a->ops->providers[a->ops->n_providers++] = fn;
}

void ops_add_objects(struct agent *a, json_t *obj)
{
	if (!a->ops)
		return;
	for (int i = 0; i < a->ops->n_providers; i++)
		a->ops->providers[i](a, obj);
}

/* events per second by type, from two successive stats records */
static json_t *rates_of(const json_t *prev, const json_t *cur, double secs)
{
	json_t *out = json_object(), *v;
	const char *k;

	if (!out || secs <= 0)
		return out;
	json_object_foreach((json_t *)json_object_get(cur, "bpf_events"), k, v)
	{
		json_int_t before =
		    json_integer_value(json_object_get(json_object_get(prev, "bpf_events"), k));
		json_int_t now = json_integer_value(v);

		json_object_set_new(out, k, json_real(now >= before ? (now - before) / secs : 0));
	}
	return out;
}

static void ops_stats(struct agent *a, json_t *r)
{
	json_t *prev;
	double secs;

	if (!a->ops)
		return;
	ops_add_objects(a, r);
	prev = a->ops->last_stats;
	secs = json_integer_value(json_object_get(r, "interval_ns")) / 1e9;
	json_decref(a->ops->rates);
	a->ops->rates = prev ? rates_of(prev, r, secs) : NULL;
	a->ops->last_stats = json_deep_copy(r);
	json_decref(prev);
}

/*
 * The agent's memory: resident, and what malloc holds of it, in use and
 * free. A resident size that grows while the heap in use stays flat is the
 * allocator keeping freed memory (fragmentation), not live data
 * (docs/operations.md, "Short-lived processes").
 */
static json_t *memory_obj(void)
{
	struct mallinfo2 mi = mallinfo2(); /* every arena */
	double cpu, rss;

	self_usage(&cpu, &rss);
	return json_pack("{sIsIsIsI}", "rss_bytes", (json_int_t)rss, "heap_in_use_bytes",
			 (json_int_t)(mi.uordblks + mi.hblkhd), "heap_free_bytes",
			 (json_int_t)mi.fordblks, "heap_mmap_bytes", (json_int_t)mi.hblkhd);
}

void stats_emit(struct agent *a, uint64_t interval_ns, bool final)
{
	uint64_t events[EV_TYPE_MAX] = {}, drops[EV_TYPE_MAX] = {};
	int procs = 0, files = 0, probes = 0;
	json_t *r;

	loader_event_counts(a, events, drops); /* zeros while BPF is not loaded */
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
	json_object_set_new(r, "processes_gone_early",
			    json_integer((json_int_t)a->cnt.procs_gone_early));
	json_object_set_new(r, "threads_held", json_integer((json_int_t)a->cnt.threads_held));
	json_object_set_new(r, "threads_exited_unlisted",
			    json_integer((json_int_t)a->cnt.threads_unlisted));
	json_object_set_new(r, "attached_files", json_integer(files));
	json_object_set_new(r, "attached_probes", json_integer(probes));
	json_object_set_new(r, "idle_files", json_integer((json_int_t)a->cnt.files_idle));
	json_object_set_new(r, "idle_files_reused", json_integer((json_int_t)a->cnt.files_reused));
	json_object_set_new(r, "idle_files_detached",
			    json_integer((json_int_t)a->cnt.files_idle_detached));
	json_object_set_new(r, "shim_errors", json_integer((json_int_t)a->cnt.shim_errors));
	json_object_set_new(r, "utf8_replaced", json_integer((json_int_t)jw_utf8_replaced()));
	json_object_set_new(r, "memory", memory_obj());
	shim_stats(a, r);
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
