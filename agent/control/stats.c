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

/*
 * The stats record's integer members after "emitted", in its order
 * (docs/events.md, "stats"), read as they are set: a table, one row a
 * member (tests/integration/events_doc.sh reads its keys).
 */
static void set_counts(struct agent *a, json_t *r, int procs, int files, int probes)
{
	const struct agent_counters *c = &a->cnt;
	const struct {
		const char *key;
		uint64_t v;
	} counts[] = {
	    {"sink_errors", c->sink_errors},
	    {"json_errors", c->json_errors},
	    {"attach_errors", c->attach_errors},
	    {"maps_read_errors", c->maps_read_errors},
	    {"proc_table_full", c->proc_table_full},
	    {"usdt_processes", c->usdt_procs},
	    {"usdt_errors", c->usdt_errors},
	    {"usdt_files", c->usdt_files},
	    {"usdt_files_read", c->usdt_files_read},
	    {"step_marks", c->step_marks},
	    {"traced_processes", procs},
	    {"processes_seen", c->procs_seen},
	    {"processes_exited", c->procs_exited},
	    {"processes_gone_early", c->procs_gone_early},
	    {"threads_held", c->threads_held},
	    {"threads_exited_unlisted", c->threads_unlisted},
	    {"attached_files", files},
	    {"attached_probes", probes},
	    {"idle_files", c->files_idle},
	    {"idle_files_reused", c->files_reused},
	    {"idle_files_detached", c->files_idle_detached},
	    {"shim_errors", c->shim_errors},
	    {"utf8_replaced", jw_utf8_replaced()},
	};

	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
		json_object_set_new(r, counts[i].key, json_integer((json_int_t)counts[i].v));
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
	json_object_set_new(r, "mode",
			    json_string(a->opts.mode == MODE_DEEP ? "deep" : "sentinel"));
	json_object_set_new(r, "bpf_events", by_type(events));
	json_object_set_new(r, "bpf_drops", by_type(drops));
	json_object_set_new(r, "records_decoded", json_integer((json_int_t)a->cnt.records));
	json_object_set_new(r, "bad_records", json_integer((json_int_t)a->cnt.bad_records));
	json_object_set_new(r, "emitted",
			    json_pack("{sIsIsIsI}", "event", (json_int_t)a->cnt.emitted[REC_EVENT],
				      "summary", (json_int_t)a->cnt.emitted[REC_SUMMARY], "anomaly",
				      (json_int_t)a->cnt.emitted[REC_ANOMALY], "stats",
				      (json_int_t)a->cnt.emitted[REC_STATS]));
	set_counts(a, r, procs, files, probes);
	json_object_set_new(r, "memory", memory_obj());
	shim_stats(a, r);
	gpu_stats(a, r);
	telem_stats(a, r);
	python_stats(a, r);
	diag_stats(a->diag, r);
	/* sinks with counters of their own (the Kafka sink: "kafka"); before
	 * ops_stats, which keeps the record for /metrics (infertrace_kafka_*) */
	for (int i = 0; i < a->n_sinks; i++)
		if (a->sinks[i]->stats)
			a->sinks[i]->stats(a->sinks[i], r);
	ops_stats(a, r);
	rec_emit(a, REC_STATS, r);
}
