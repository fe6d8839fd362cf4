// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * metrics.c - Prometheus endpoint (--metrics ADDR:PORT, off by default): a
 * tiny HTTP/1.0 responder on the event loop. GET /metrics answers the
 * agent's own counters in the text exposition format 0.0.4; /healthz says
 * the process is alive; /readyz says BPF is loaded and the loop turned in
 * the last 2 s (the Helm chart probes both).
 *
 * Bounded and nonblocking like the control socket, on the same server core
 * (core/server.h): at most METRICS_MAX_CONNS connections, requests up to
 * 4 KiB, a 5 s deadline per connection from its accept, one response then
 * close.
 *
 * Cardinality: labels are event types, record classes, drop stages and
 * sink names, step phases and histogram bounds - small fixed sets - and
 * the step histogram's instance, bounded by --metrics-instances (diag.c:
 * the rest as "_other"; an instance without steps for
 * --metrics-instance-idle frees its slot), and the anomaly counts per
 * instance on the same series. No pid, tid or kernel name is a label
 * (docs/operations.md lists every metric). The two histograms (step
 * durations, launch to GPU start) are the pipeline's (diag.c, join.c:
 * struct prom_hist, core/util.h).
 */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "ops.h"
#include "server.h"
#include "util.h"
#include "jsonw.h"
#include "diagnose.h"

#define METRICS_MAX_CONNS 8
#define METRICS_REQ_MAX 4096
#define METRICS_DEADLINE_NS (5ull * 1000000000ull)
#define READY_TICK_NS (2ull * 1000000000ull)

struct metrics {
	struct agent *a;
	struct srv *srv; /* per connection: the request, the response, the deadline */
	uint64_t requests, scrapes, bad_requests, not_found, refused, timeouts;
};

static void help(FILE *f, const char *name, const char *type, const char *text)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

static void one(FILE *f, const char *name, const char *type, const char *text, double v)
{
	help(f, name, type, text);
	fprintf(f, "%s %.17g\n", name, v);
}

static uint64_t jget(const json_t *o, const char *k)
{
	return (uint64_t)json_integer_value(json_object_get(o, k));
}

/* metrics that are members of the stats record's objects, in the order they are written */
static const struct stats_metric {
	const char *obj, *key; /* the stats object (gpu_stats, ops_add_objects) and member */
	const char *name, *type, *help;
} from_stats[] = {
    {"gpu", "shims_connected", "infertrace_shims_connected", "gauge", "CUPTI shims connected now."},
    {"gpu", "shim_records", "infertrace_shim_records_total", "counter",
     "Valid records received from shims."},
    {"gpu", "shim_shed_msgs", "infertrace_shim_shed_messages_total", "counter",
     "Shim messages read and dropped: their connection was over its records or bytes "
     "budget for the second."},
    {"gpu", "shim_shed_bytes", "infertrace_shim_shed_bytes_total", "counter",
     "Bytes of the shed shim messages."},
    {"gpu", "shim_tid_scans", "infertrace_shim_tid_scans_total", "counter",
     "/proc task scans to map the thread ids of shims in another pid namespace."},
    {"gpu", "shim_tid_scans_shed", "infertrace_shim_tid_scans_shed_total", "counter",
     "Thread-id scans not done: over the connection's budget (the tid went unmapped)."},
    {"gpu", "joined", "infertrace_gpu_records_joined_total", "counter",
     "GPU records joined to their launch."},
    {"gpu", "unmatched", "infertrace_gpu_records_unmatched_total", "counter",
     "GPU records emitted without a launch."},
    {"gpu", "no_launch", "infertrace_gpu_records_no_launch_total", "counter",
     "Unmatched GPU records whose launch record the shim sampled out (always-on mode): "
     "expected, not a loss."},
    {"deep_dive", "active", "infertrace_deep_dives_active", "gauge",
     "Instances in a deep-dive now."},
    {"deep_dive", "processes", "infertrace_deep_dive_processes", "gauge",
     "Processes in deep capture by deep-dives."},
    {"deep_dive", "started", "infertrace_deep_dives_started_total", "counter",
     "Deep-dives started."},
    {"recorder", "used_bytes", "infertrace_recorder_bytes", "gauge",
     "Memory the flight recorder holds."},
    {"recorder", "budget_bytes", "infertrace_recorder_budget_bytes", "gauge",
     "The flight recorder's memory budget."},
    {"recorder", "records_held", "infertrace_recorder_records", "gauge",
     "Records in the flight recorder's windows."},
    {"recorder", "flushes", "infertrace_recorder_flushes_total", "counter",
     "Flight-recorder windows sent (anomaly or deep-dive)."},
    {"control", "requests", "infertrace_control_requests_total", "counter",
     "Control socket requests."},
    {"nccl", "collectives", "infertrace_nccl_collectives_total", "counter",
     "NCCL collectives, sends and receives of traced threads."},
    {"nccl", "comm_unknown", "infertrace_nccl_comm_unknown_total", "counter",
     "NCCL calls on a communicator never seen initialised (no rank: no wait)."},
    {"nccl", "straggler_anomalies", "infertrace_nccl_straggler_anomalies_total", "counter",
     "Straggler anomalies from NCCL collectives (a rank came late)."},
    {"nccl", "slots_written", "infertrace_nccl_slots_written_total", "counter",
     "NCCL calls the BPF side wrote into the per-CPU slots (sentinel)."},
    {"nccl", "slots_overwritten", "infertrace_nccl_slots_overwritten_total", "counter",
     "NCCL calls lost: written over in their CPU's slots before the agent copied them."},
    {"gpu_telemetry", "samples", "infertrace_gpu_telemetry_samples_total", "counter",
     "GPU samples read through NVML (--gpu-telemetry), one per GPU per period."},
    {"gpu_telemetry", "read_errors", "infertrace_gpu_telemetry_errors_total", "counter",
     "NVML queries that failed (a field the GPU does not support is not counted)."},
    {"python", "samples", "infertrace_python_samples_total", "counter",
     "Python stacks sampled from traced threads (--python-stacks)."},
    {"python", "unnamed", "infertrace_python_frames_unnamed_total", "counter",
     "Python frames whose code object could not be read from the process (named \"?\")."},
};

/* the step path's, written only while there is one (not with the detector off) */
static const struct stats_metric from_diag[] = {
    {"diag", "steps", "infertrace_steps_total", "counter", "Inference steps cut."},
    {"diag", "keys_dropped", "infertrace_steps_unjudged_total", "counter",
     "Steps not judged: every baseline slot (one per instance, rank and phase, 4096) was "
     "taken."},
    {"diag", "level_shifts", "infertrace_level_shifts_total", "counter",
     "Runs of slow steps accepted as the new normal (64 flagged in a row; a level_shift record "
     "each): the anomalies of that run stop there."},
    {"diag", "episodes", "infertrace_anomaly_episodes_total", "counter",
     "Anomaly episodes: runs of flagged steps of one instance, rank and phase, counted once "
     "(anomaly records with run 1); alert on this to be told once."},
    {"diag", "step_series_expired", "infertrace_step_series_expired_total", "counter",
     "Series of infertrace_step_duration_seconds (and the instance's anomaly counts) gone "
     "from here: their instance had no step or anomaly for --metrics-instance-idle."},
};

/*
 * one series of a histogram family, labelled lab ("": none): cumulative
 * _bucket per bound and +Inf, _sum, _count
 */
static void hist_series(FILE *f, const char *name, const char *lab, const struct prom_hist *h)
{
	const char *sep = lab[0] ? "," : "";
	uint64_t cum = 0;

	for (unsigned int b = 0; b <= h->nle; b++) {
		cum += h->n[b];
		if (b < h->nle)
			fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, lab, sep, h->le[b],
				(unsigned long long)cum);
		else
			fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, lab, sep,
				(unsigned long long)cum);
	}
	fprintf(f, "%s_sum%s%s%s %.17g\n", name, lab[0] ? "{" : "", lab, lab[0] ? "}" : "", h->sum);
	fprintf(f, "%s_count%s%s%s %llu\n", name, lab[0] ? "{" : "", lab, lab[0] ? "}" : "",
		(unsigned long long)cum);
}

static uint64_t hist_count(const struct prom_hist *h)
{
	uint64_t n = 0;

	for (unsigned int b = 0; b <= h->nle; b++)
		n += h->n[b];
	return n;
}

/*
 * the steps' durations by phase (and instance: --metrics-instances), the
 * GPU's queue: the pipeline's own histograms. The node's series are there
 * for every phase from the start; an instance's for the phases it had
 * steps in, while it has them (--metrics-instance-idle).
 */
static void histograms(struct agent *a, FILE *f)
{
	static const char step[] = "infertrace_step_duration_seconds";
	const struct prom_hist *h;
	const char *inst;
	char lab[64 + 2 * INSTANCE_LEN];

	help(f, step, "histogram",
	     "Steps cut (or given by markers), by phase and instance (infertrace_instance, the "
	     "records' instance; '_other' past --metrics-instances; gone after "
	     "--metrics-instance-idle without a step): their durations. "
	     "histogram_quantile() over it is the step latency.");
	for (uint32_t i = 0; diag_step_hist(a->diag, i, 0, &inst); i++)
		for (int p = 0; p < DIAG_STEP_PHASES; p++) {
			h = diag_step_hist(a->diag, i, p, &inst);
			if (inst && !hist_count(h))
				continue;
			snprintf(lab, sizeof(lab), "phase=\"%s\"%s%s%s",
				 diag_phase_name((enum diag_phase)p),
				 inst ? ",infertrace_instance=\"" : "", inst ? inst : "",
				 inst ? "\"" : "");
			hist_series(f, step, lab, h);
		}
	help(f, "infertrace_gpu_launch_to_start_seconds", "histogram",
	     "GPU records joined to their launch: from the launch call to the start on the "
	     "GPU (the GPU's queue; long: the CPU runs ahead, short: the GPU waits for it).");
	hist_series(f, "infertrace_gpu_launch_to_start_seconds", "", gpu_l2s_hist(a));
}

/*
 * the anomaly records per instance, by kind, and the episodes among them:
 * the step histogram's series (--metrics-instances; not with 0, where the
 * node's infertrace_anomalies_total and _episodes_total are all there is)
 */
static void instance_anomalies(struct agent *a, FILE *f)
{
	const uint64_t *k;
	uint64_t ep;
	const char *inst;

	if (!a->diag || !a->diag->series_max)
		return;
	help(
	    f, "infertrace_instance_anomalies_total", "counter",
	    "Anomalous steps by instance (infertrace_instance, as the step histogram's) and kind.");
	for (uint32_t i = 0; (k = diag_series_anomalies(a->diag, i, &ep, &inst)); i++)
		for (int c = 0; c < DIAG_KIND_COUNT; c++)
			fprintf(
			    f,
			    "infertrace_instance_anomalies_total{infertrace_instance=\"%s\",kind="
			    "\"%s\"} %llu\n",
			    inst, diag_kind_name((enum diag_kind)c), (unsigned long long)k[c]);
	help(f, "infertrace_instance_anomaly_episodes_total", "counter",
	     "Anomaly episodes by instance (infertrace_instance): route alerts per instance on "
	     "this.");
	for (uint32_t i = 0; (k = diag_series_anomalies(a->diag, i, &ep, &inst)); i++)
		fprintf(
		    f,
		    "infertrace_instance_anomaly_episodes_total{infertrace_instance=\"%s\"} %llu\n",
		    inst, (unsigned long long)ep);
}

/* one family per row: the stats record o's member obj.key */
static void table(FILE *f, const json_t *o, const struct stats_metric *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		one(f, t[i].name, t[i].type, t[i].help,
		    (double)jget(json_object_get(o, t[i].obj), t[i].key));
}

/* what the shim receiver refused, closed or rejected: the stats "gpu" member and its reason */
static const struct {
	const char *key, *reason;
} shim_reject[] = {
    {"shim_conns_refused", "no_credentials"},  {"shim_conns_refused_pid", "per_process_limit"},
    {"shim_conns_refused_full", "slots_full"}, {"shim_conns_evicted", "evicted"},
    {"shim_hello_timeouts", "hello_timeout"},  {"shim_bad_abi", "bad_abi"},
    {"shim_no_hello", "before_hello"},	       {"shim_truncated", "oversize"},
    {"shim_fds_closed", "fd_passed"},	       {"shim_bad_records", "bad_record"},
    {"shim_status_absurd", "absurd_counter"},
};

/* announced also without a shim socket (all 0), like the other shim families */
static void shim_rejects(FILE *f, const json_t *g)
{
	help(f, "infertrace_shim_rejected_total", "counter",
	     "Shim connections refused or closed and records rejected, by reason.");
	for (size_t i = 0; i < sizeof(shim_reject) / sizeof(shim_reject[0]); i++)
		fprintf(f, "infertrace_shim_rejected_total{reason=\"%s\"} %llu\n",
			shim_reject[i].reason, (unsigned long long)jget(g, shim_reject[i].key));
}

static void render(struct agent *a, struct metrics *m, FILE *f)
{
	uint64_t ev[EV_TYPE_MAX] = {}, dr[EV_TYPE_MAX] = {}, bpf_drops = 0;
	static const char *const classes[REC_CLASS_COUNT] = {"event", "summary", "anomaly",
							     "stats"};
	json_t *o = json_object(), *g, *x, *v;
	int procs = 0, probes = 0;
	double cpu, rss;
	const char *k;

	loader_event_counts(a, ev, dr); /* zeros while BPF is not loaded */
	help(f, "infertrace_build_info", "gauge", "Agent version and mode (value 1).");
	fprintf(f, "infertrace_build_info{version=\"%s\",mode=\"%s\"} 1\n", AGENT_VERSION,
		a->opts.mode == MODE_DEEP ? "deep" : "sentinel");
	help(f, "infertrace_bpf_events_total", "counter",
	     "Records the BPF programs wrote to the rings, by event type.");
	/* the BPF families only (the GPU types are the shims') */
	for (int t = 0; t < EV_GPU_KERNEL; t++)
		if (event_type_name(t))
			fprintf(f, "infertrace_bpf_events_total{type=\"%s\"} %llu\n",
				event_type_name(t), (unsigned long long)ev[t]);
	help(f, "infertrace_bpf_drops_total", "counter",
	     "Records lost in the kernel because a ring was full, by event type.");
	for (int t = 0; t < EV_GPU_KERNEL; t++)
		if (event_type_name(t)) {
			fprintf(f, "infertrace_bpf_drops_total{type=\"%s\"} %llu\n",
				event_type_name(t), (unsigned long long)dr[t]);
			bpf_drops += dr[t];
		}
	one(f, "infertrace_records_decoded_total", "counter", "Ring records decoded.",
	    (double)a->cnt.records);
	help(f, "infertrace_records_emitted_total", "counter",
	     "JSON records produced for the sinks, by record class.");
	for (int c = 0; c < REC_CLASS_COUNT; c++)
		fprintf(f, "infertrace_records_emitted_total{class=\"%s\"} %llu\n", classes[c],
			(unsigned long long)a->cnt.emitted[c]);
	help(f, "infertrace_sink_records_total", "counter", "Records a sink accepted, by sink.");
	for (int i = 0; i < a->n_sinks; i++)
		fprintf(f, "infertrace_sink_records_total{sink=\"%s\"} %llu\n", a->sinks[i]->name,
			(unsigned long long)a->sinks[i]->written);
	help(f, "infertrace_sink_errors_total", "counter", "Records a sink refused, by sink.");
	for (int i = 0; i < a->n_sinks; i++)
		fprintf(f, "infertrace_sink_errors_total{sink=\"%s\"} %llu\n", a->sinks[i]->name,
			(unsigned long long)a->sinks[i]->errors);

	shim_stats(a, o);
	gpu_stats(a, o);
	telem_stats(a, o);
	python_stats(a, o);
	diag_stats(a->diag, o);
	g = json_object_get(o, "gpu");
	help(f, "infertrace_drops_total", "counter",
	     "Records lost, by stage: bpf_ring (ring full), decode (malformed ring record), "
	     "json (record could not be built), sink (a sink refused), shim_channel (the CUPTI "
	     "shim could not send), cupti (CUPTI dropped), recorder (evicted from the flight "
	     "recorder by its memory budget), steps (GPU records and CPU events the step "
	     "segmenter could not hold: their steps lack them).");
	fprintf(f, "infertrace_drops_total{stage=\"bpf_ring\"} %llu\n",
		(unsigned long long)bpf_drops);
	fprintf(f, "infertrace_drops_total{stage=\"decode\"} %llu\n",
		(unsigned long long)a->cnt.bad_records);
	fprintf(f, "infertrace_drops_total{stage=\"json\"} %llu\n",
		(unsigned long long)a->cnt.json_errors);
	fprintf(f, "infertrace_drops_total{stage=\"sink\"} %llu\n",
		(unsigned long long)a->cnt.sink_errors);
	fprintf(f, "infertrace_drops_total{stage=\"shim_channel\"} %llu\n",
		(unsigned long long)jget(g, "shim_dropped"));
	fprintf(f, "infertrace_drops_total{stage=\"cupti\"} %llu\n",
		(unsigned long long)jget(g, "cupti_dropped"));
	ops_add_objects(a, o);
	x = json_object_get(o, "recorder");
	fprintf(f, "infertrace_drops_total{stage=\"recorder\"} %llu\n",
		(unsigned long long)jget(x, "evicted_budget"));
	x = json_object_get(o, "diag");
	fprintf(f, "infertrace_drops_total{stage=\"steps\"} %llu\n",
		(unsigned long long)jget(x, "records_dropped"));

	for (int i = 0; i < a->n_procs; i++)
		procs += a->procs[i].used && a->procs[i].start_time != PROC_GONE;
	for (int i = 0; i < MAX_LIBFILES; i++)
		if (a->libs[i].used)
			probes += a->libs[i].n_links;
	if (x) {
		json_t *kinds = json_object_get(x, "anomalies_by_kind");

		table(f, o, from_diag, sizeof(from_diag) / sizeof(from_diag[0]));
		help(f, "infertrace_anomalies_total", "counter",
		     "Anomalous steps, by kind (host_stall, cpu_contention, gpu_slow, "
		     "communication, straggler, regression).");
		json_object_foreach(kinds, k, v)
		    fprintf(f, "infertrace_anomalies_total{kind=\"%s\"} %llu\n", k,
			    (unsigned long long)json_integer_value(v));
	}
	histograms(a, f);
	instance_anomalies(a, f);
	one(f, "infertrace_traced_processes", "gauge", "CUDA processes traced now.", procs);
	one(f, "infertrace_attached_probes", "gauge", "CUDA uprobes attached now.", probes);
	one(f, "infertrace_attach_errors_total", "counter", "Probes that could not be attached.",
	    (double)a->cnt.attach_errors);
	table(f, o, from_stats, sizeof(from_stats) / sizeof(from_stats[0]));
	telem_metrics(a, f);
	x = json_object_get(o, "control");
	help(f, "infertrace_control_errors_total", "counter",
	     "Control socket requests or peers refused, by reason.");
	fprintf(f, "infertrace_control_errors_total{reason=\"malformed\"} %llu\n",
		(unsigned long long)jget(x, "malformed"));
	fprintf(f, "infertrace_control_errors_total{reason=\"oversized\"} %llu\n",
		(unsigned long long)jget(x, "oversized"));
	fprintf(f, "infertrace_control_errors_total{reason=\"peer\"} %llu\n",
		(unsigned long long)jget(x, "refused_peer"));
	fprintf(f, "infertrace_control_errors_total{reason=\"busy\"} %llu\n",
		(unsigned long long)jget(x, "refused_limit"));
	one(f, "infertrace_metrics_scrapes_total", "counter", "Scrapes of this endpoint.",
	    (double)m->scrapes);
	shim_rejects(f, json_object_get(o, "gpu"));
	one(f, "infertrace_utf8_replaced_total", "counter",
	    "Invalid UTF-8 bytes in strings from shims, traces or processes, written as U+FFFD.",
	    (double)jw_utf8_replaced());

	/*
	 * The Kafka sink reports its own counters in the stats record ("kafka":
	 * queue and spill fill, broker errors, records produced); every numeric
	 * member becomes infertrace_kafka_<name>, except dropped_<class>_total:
	 * one family infertrace_kafka_dropped_total{class} (a class name in a
	 * metric name, "summary", reads as a Prometheus type: promtool refuses
	 * it). Absent until the sink runs.
	 */
	x = a->ops->last_stats ? json_object_get(a->ops->last_stats, "kafka") : NULL;
	json_object_foreach(x, k, v)
	{
		char name[96];
		bool ok = true;

		if (!json_is_number(v) && !json_is_boolean(v))
			continue;
		for (const char *c = k; *c; c++)
			ok &= (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_';
		if (!ok || strlen(k) > 60 || !strncmp(k, "dropped_", 8))
			continue;
		snprintf(name, sizeof(name), "infertrace_kafka_%s", k);
		one(f, name, strstr(k, "_total") ? "counter" : "gauge",
		    "Kafka sink counter (stats record, kafka object).",
		    json_is_boolean(v) ? json_is_true(v) : json_number_value(v));
	}
	if (x) {
		help(f, "infertrace_kafka_dropped_total", "counter",
		     "Records the Kafka sink will never deliver, by class (stats record, "
		     "kafka.dropped_<class>_total).");
		for (int c = 0; c < REC_CLASS_COUNT; c++) {
			char key[64];

			snprintf(key, sizeof(key), "dropped_%s_total", classes[c]);
			fprintf(f, "infertrace_kafka_dropped_total{class=\"%s\"} %llu\n",
				classes[c], (unsigned long long)jget(x, key));
		}
	}

	self_usage(&cpu, &rss);
	one(f, "infertrace_process_cpu_seconds_total", "counter",
	    "User and system CPU time of the agent.", cpu);
	one(f, "infertrace_process_resident_memory_bytes", "gauge", "Resident memory of the agent.",
	    rss);
	one(f, "infertrace_uptime_seconds", "gauge", "Seconds since the agent started.",
	    (now_ns() - a->start_ns) / 1e9);
	json_decref(o);
}

static void respond(struct srv *s, unsigned int slot, int code, const char *ctype, const char *body,
		    size_t len)
{
	const char *reason = code == 200   ? "OK"
			     : code == 404 ? "Not Found"
			     : code == 405 ? "Method Not Allowed"
			     : code == 503 ? "Service Unavailable"
					   : "Bad Request";
	char hdr[256];
	int n = snprintf(hdr, sizeof(hdr),
			 "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n",
			 code, reason, ctype, len);

	char *out = malloc(n + len);

	if (!out)
		return;
	memcpy(out, hdr, n);
	memcpy(out + n, body, len);
	srv_queue(s, slot, out, n + len);
}

static void handle(struct agent *a, struct metrics *m, unsigned int slot)
{
	struct srv_conn *c = srv_conn(m->srv, slot);
	char method[8], path[256];
	const char *text = "text/plain; charset=utf-8";

	m->requests++;
	if (sscanf((const char *)c->in, "%7s %255s HTTP/%*d.%*d", method, path) != 2) {
		m->bad_requests++;
		respond(m->srv, slot, 400, text, "bad request\n", 12);
		return;
	}
	path[strcspn(path, "?")] = '\0';
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		m->bad_requests++;
		respond(m->srv, slot, 405, text, "GET only\n", 9);
	} else if (!strcmp(path, "/metrics")) {
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);

		if (!f)
			return;
		m->scrapes++;
		render(a, m, f);
		fclose(f);
		respond(m->srv, slot, 200, "text/plain; version=0.0.4; charset=utf-8", buf, len);
		free(buf);
	} else if (!strcmp(path, "/healthz")) {
		respond(m->srv, slot, 200, text, "ok\n", 3);
	} else if (!strcmp(path, "/readyz")) {
		bool ticking = now_ns() - a->ops->last_tick_ns < READY_TICK_NS;

		if (loader_loaded(a) && ticking)
			respond(m->srv, slot, 200, text, "ready\n", 6);
		else if (!loader_loaded(a))
			respond(m->srv, slot, 503, text, "not ready: BPF not loaded\n", 26);
		else
			respond(m->srv, slot, 503, text, "not ready: event loop stalled\n", 30);
	} else {
		m->not_found++;
		respond(m->srv, slot, 404, text, "not found: /metrics /healthz /readyz\n", 37);
	}
	if (!strcmp(method, "HEAD") && c->out) {
		/* headers only */
		char *end = strstr(c->out, "\r\n\r\n");

		if (end)
			c->out_len = end + 4 - c->out;
	}
}

static int on_event(void *ctx, struct srv *s, unsigned int slot, uint32_t events)
{
	struct metrics *m = ctx;
	struct srv_conn *c = srv_conn(s, slot);
	ssize_t n;

	(void)events;
	while (!c->out && c->in_len < METRICS_REQ_MAX) {
		n = srv_recv(s, slot);
		if (n == -EAGAIN)
			return 0;
		if (n <= 0) {
			srv_close(s, slot);
			return 0;
		}
		if (strstr((const char *)c->in, "\r\n\r\n") || strstr((const char *)c->in, "\n\n"))
			break;
	}
	if (!c->out) {
		if (c->in_len >= METRICS_REQ_MAX) {
			m->bad_requests++;
			respond(s, slot, 400, "text/plain", "request too large\n", 18);
		} else {
			handle(m->a, m, slot);
		}
		if (!c->out) {
			srv_close(s, slot);
			return 0;
		}
		srv_interest(s, slot, EPOLLOUT);
	}
	if (srv_send(s, slot, NULL) == -EAGAIN)
		return 0;
	srv_close(s, slot);
	return 0;
}

static int on_accept(void *ctx, struct srv *s, int fd, int slot)
{
	struct metrics *m = ctx;

	(void)s;
	(void)fd;
	if (slot < 0) {
		m->refused++;
		return -1;
	}
	return 0;
}

static void on_ready(struct agent *a, void *ctx)
{
	struct metrics *m = ctx;

	(void)a;
	srv_serve(m->srv);
}

void metrics_tick(struct agent *a)
{
	struct metrics *m = a->ops->met;

	if (!m)
		return;
	m->timeouts += srv_expire(m->srv, METRICS_DEADLINE_NS);
}

/* ADDR:PORT, [V6ADDR]:PORT or :PORT (every address) */
static int parse_addr(const char *spec, char *host, size_t hsz, char *port, size_t psz)
{
	const char *colon = strrchr(spec, ':');
	size_t hl;

	if (!colon || !colon[1] || strlen(colon + 1) >= psz)
		return -EINVAL;
	hl = colon - spec;
	if (hl >= 2 && spec[0] == '[' && spec[hl - 1] == ']') {
		spec++;
		hl -= 2;
	}
	if (hl >= hsz)
		return -EINVAL;
	memcpy(host, spec, hl);
	host[hl] = '\0';
	snprintf(port, psz, "%s", colon + 1);
	return 0;
}

int metrics_init(struct agent *a)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
	struct srv_opts so = {
	    .sz = sizeof(so),
	    .max_conns = METRICS_MAX_CONNS,
	    .accepts = 16,
	    .max_events = 16,
	    .in_cap = METRICS_REQ_MAX,
	    .on_accept = on_accept,
	    .on_event = on_event,
	};
	char host[256], port[16];
	struct metrics *m;
	int err, one = 1, lfd = -1;

	if (!a->opts.metrics)
		return 0;
	if (parse_addr(a->opts.metrics, host, sizeof(host), port, sizeof(port))) {
		pr_err("--metrics %s: want ADDR:PORT", a->opts.metrics);
		return -EINVAL;
	}
	err = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (err) {
		pr_err("--metrics %s: %s", a->opts.metrics, gai_strerror(err));
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		freeaddrinfo(res);
		return -ENOMEM;
	}
	m->a = a;
	so.ctx = m;
	lfd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(lfd, res->ai_addr, res->ai_addrlen) || listen(lfd, 16) ||
	    !(m->srv = srv_new(lfd, &so))) {
		err = -errno;
		pr_err("--metrics %s: %s", a->opts.metrics, strerror(-err));
		goto fail;
	}
	err = agent_watch_fd(a, srv_fd(m->srv), on_ready, m);
	if (err) {
		pr_err("--metrics: event loop: %s", strerror(-err));
		goto fail;
	}
	freeaddrinfo(res);
	a->ops->met = m;
	pr_info("metrics on http://%s/metrics", a->opts.metrics);
	return 0;

fail:
	freeaddrinfo(res);
	if (m->srv)
		srv_free(m->srv); /* closes lfd */
	else if (lfd >= 0)
		close(lfd);
	free(m);
	return err;
}

void metrics_stats(struct agent *a, json_t *obj)
{
	struct metrics *m = a->ops->met;

	if (!m)
		return;
	json_object_set_new(obj, "metrics",
			    json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "requests",
				      (json_int_t)m->requests, "scrapes", (json_int_t)m->scrapes,
				      "bad_requests", (json_int_t)m->bad_requests, "not_found",
				      (json_int_t)m->not_found, "refused", (json_int_t)m->refused,
				      "timeouts", (json_int_t)m->timeouts));
}

void metrics_free(struct agent *a)
{
	struct metrics *m = a->ops ? a->ops->met : NULL;

	if (!m)
		return;
	agent_unwatch_fd(a, srv_fd(m->srv));
	srv_free(m->srv);
	free(m);
	a->ops->met = NULL;
}
