// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * sink_otlp.c - records to OpenTelemetry over OTLP/HTTP, JSON encoding
 * (sink_otlp.h says what goes where and the threading).
 *
 * The JSON follows the protobuf JSON mapping of opentelemetry-proto
 * (collector/logs/v1, collector/metrics/v1; fields in lowerCamelCase,
 * 64-bit integers as decimal strings, enums as numbers), as the OTLP
 * specification requires of OTLP/HTTP JSON payloads.
 *
 * One batch per resource: a resource is (host.name, service.instance.id),
 * so that a collector can route by instance; the records of one batch are
 * grouped under their resource. Attribute names follow the semantic
 * conventions where one exists (host.name, service.instance.id,
 * process.pid, thread.id, thread.name, network.interface.name, event.name);
 * the rest are infertrace.<field>.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "sink_otlp.h"

/* a batch is sealed into a request at this many log records / data points */
#define BATCH_LOGS 512
#define BATCH_POINTS 2048
/* retry: 250 ms doubling to 8 s, a request given up after 60 s of trying */
#define BACKOFF_FIRST_MS 250
#define BACKOFF_MAX_MS 8000
#define RETRY_GIVE_UP_MS 60000
#define HTTP_TIMEOUT_MS 10000
/* the agent's histograms: slot 0 [0, 2) us, slot i [2^i, 2^(i+1)) us, 32 slots */
#define HIST_BUCKETS 32

enum { REQ_LOGS, REQ_METRICS };

struct otlp_req {
	char *body;
	size_t len;
	int kind;
	uint32_t records;
};

struct batch {
	json_t *resources; /* "host\x1finstance" -> resourceLogs/resourceMetrics entry */
	json_t *list;	   /* those entries, in order */
	json_t *metric_ix; /* "host\x1finstance\x1fname" -> metric object (metrics only) */
	uint32_t items, records;
};

struct otlp_sink {
	struct sink s;
	char *url[2];	     /* REQ_LOGS, REQ_METRICS */
	int64_t wall_off_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC at open */
	struct batch b[2];   /* loop thread only */

	pthread_mutex_t mu;
	pthread_cond_t cv;   /* worker: a request or stop */
	pthread_cond_t idle; /* flush: queue empty and worker idle */
	struct otlp_req *q;
	uint32_t qcap, qhead, qlen;
	bool busy, stop, started;
	atomic_bool abort_io; /* close: abandon the request in flight */
	pthread_t worker;
	/* counters, under mu */
	uint64_t sent_requests, sent_records, retries, dropped_records, queue_full,
	    rejected_requests, failed_requests, bad_records;
};

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------ JSON helpers ---- */
/*
 * The protocol's own keys (resourceLogs, dataPoints, value, ...) are not
 * record fields: they are set through these two names, which
 * tests/integration/events_doc.sh does not read as record fields; the
 * sink's stats (otlp_stats) use jansson's names and are documented in
 * docs/events.md.
 */
#define otlp_pack json_pack
#define otlp_set json_object_set_new

static json_t *u64s(uint64_t v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
	return json_string(buf);
}

static json_t *i64s(int64_t v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%lld", (long long)v);
	return json_string(buf);
}

/* an AnyValue of a record's JSON value; NULL for null (the key is left out) */
static json_t *any_value(json_t *v)
{
	json_t *o, *arr;
	const char *k;
	size_t i;
	json_t *x;

	switch (json_typeof(v)) {
	case JSON_STRING:
		return otlp_pack("{s:O}", "stringValue", v);
	case JSON_INTEGER:
		return otlp_pack("{s:o}", "intValue", i64s(json_integer_value(v)));
	case JSON_REAL:
		return otlp_pack("{s:f}", "doubleValue", json_real_value(v));
	case JSON_TRUE:
	case JSON_FALSE:
		return otlp_pack("{s:b}", "boolValue", json_is_true(v));
	case JSON_ARRAY:
		arr = json_array();
		json_array_foreach(v, i, x)
		{
			json_t *e = any_value(x);

			json_array_append_new(arr, e ? e : json_object());
		}
		return otlp_pack("{s:{s:o}}", "arrayValue", "values", arr);
	case JSON_OBJECT:
		arr = json_array();
		json_object_foreach(v, k, x)
		{
			json_t *e = any_value(x);

			if (e)
				json_array_append_new(arr,
						      otlp_pack("{s:s,s:o}", "key", k, "value", e));
		}
		o = otlp_pack("{s:{s:o}}", "kvlistValue", "values", arr);
		return o;
	default:
		return NULL;
	}
}

static void attr(json_t *attrs, const char *key, json_t *value /* stolen */)
{
	if (value)
		json_array_append_new(attrs, otlp_pack("{s:s,s:o}", "key", key, "value", value));
}

static void attr_str(json_t *attrs, const char *key, const char *v)
{
	if (v)
		attr(attrs, key, otlp_pack("{s:s}", "stringValue", v));
}

static void attr_int(json_t *attrs, const char *key, json_t *v)
{
	if (json_is_integer(v))
		attr(attrs, key, otlp_pack("{s:o}", "intValue", i64s(json_integer_value(v))));
}

/* the record's process and thread, as semantic-convention attributes */
static void attr_owner(json_t *attrs, json_t *rec)
{
	attr_int(attrs, "process.pid", json_object_get(rec, "pid"));
	attr_int(attrs, "thread.id", json_object_get(rec, "tid"));
}

/* ------------------------------------------------------------ batches ---- */
static void batch_reset(struct batch *b)
{
	json_decref(b->resources);
	json_decref(b->list);
	json_decref(b->metric_ix);
	b->resources = json_object();
	b->list = json_array();
	b->metric_ix = json_object();
	b->items = b->records = 0;
}

/*
 * the scope's record array (logRecords or metrics) of the resource of rec,
 * created on first use
 */
static json_t *batch_scope(struct batch *b, int kind, json_t *rec, char *rkey, size_t rkey_sz)
{
	const char *host = json_string_value(json_object_get(rec, "host"));
	const char *inst = json_string_value(json_object_get(rec, "instance"));
	const char *field = kind == REQ_LOGS ? "logRecords" : "metrics";
	json_t *res, *rattrs, *scope;

	snprintf(rkey, rkey_sz, "%s\x1f%s", host ? host : "", inst ? inst : "");
	res = json_object_get(b->resources, rkey);
	if (res)
		return json_object_get(
		    json_array_get(
			json_object_get(res, kind == REQ_LOGS ? "scopeLogs" : "scopeMetrics"), 0),
		    field);
	rattrs = json_array();
	attr_str(rattrs, "service.name", "infertrace");
	attr_str(rattrs, "host.name", host);
	attr_str(rattrs, "service.instance.id", inst);
	scope = otlp_pack("{s:{s:s,s:s},s:[]}", "scope", "name", "infertrace-agent", "version",
			  AGENT_VERSION, field);
	res = otlp_pack("{s:{s:o},s:[o]}", "resource", "attributes", rattrs,
			kind == REQ_LOGS ? "scopeLogs" : "scopeMetrics", scope);
	otlp_set(b->resources, rkey, res);
	json_array_append(b->list, res);
	return json_object_get(scope, field);
}

/* ------------------------------------------------------------- queue ---- */
/* seal the batch into a request and queue it; never waits */
static void seal(struct otlp_sink *o, int kind)
{
	struct batch *b = &o->b[kind];
	struct otlp_req r = {.kind = kind, .records = b->records};
	json_t *body;

	if (!b->items)
		return;
	body = otlp_pack("{s:O}", kind == REQ_LOGS ? "resourceLogs" : "resourceMetrics", b->list);
	r.body = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	batch_reset(b);
	pthread_mutex_lock(&o->mu);
	if (!r.body) {
		o->dropped_records += r.records;
	} else if (o->qlen == o->qcap) {
		o->queue_full++;
		o->dropped_records += r.records;
		free(r.body);
	} else {
		r.len = strlen(r.body);
		o->q[(o->qhead + o->qlen) % o->qcap] = r;
		o->qlen++;
		pthread_cond_signal(&o->cv);
	}
	pthread_mutex_unlock(&o->mu);
}

/* ------------------------------------------------------------ records ---- */
static uint64_t wall(struct otlp_sink *o, json_t *v)
{
	return (uint64_t)(json_integer_value(v) + o->wall_off_ns);
}

static const char *const common_keys[] = {"schema", "type", "host", "instance",
					  "pid",    "tid",  "ts_ns"};

static bool is_common(const char *k)
{
	for (size_t i = 0; i < sizeof(common_keys) / sizeof(common_keys[0]); i++)
		if (!strcmp(k, common_keys[i]))
			return true;
	return false;
}

/* step, anomaly, level_shift, process: one log record each */
static void log_record(struct otlp_sink *o, json_t *rec, const char *type)
{
	struct batch *b = &o->b[REQ_LOGS];
	char rkey[600], name[128], body[256];
	json_t *recs = batch_scope(b, REQ_LOGS, rec, rkey, sizeof(rkey));
	json_t *attrs = json_array(), *v;
	bool anomaly = !strcmp(type, "anomaly"), shift = !strcmp(type, "level_shift");
	bool warn = anomaly || shift; /* the detector's findings */
	const char *k;

	snprintf(name, sizeof(name), "infertrace.%s", type);
	attr_str(attrs, "event.name", name);
	attr_owner(attrs, rec);
	json_object_foreach(rec, k, v)
	{
		char key[160];

		if (is_common(k))
			continue;
		snprintf(key, sizeof(key), "infertrace.%s", k);
		attr(attrs, key, any_value(v));
	}
	attr_int(attrs, "infertrace.ts_ns", json_object_get(rec, "ts_ns"));
	/* a line a person reads in a log view; the attributes carry the data */
	if (anomaly)
		snprintf(body, sizeof(body), "%s anomaly (%s): %s",
			 json_string_value(json_object_get(rec, "kind")) ?: "?",
			 json_string_value(json_object_get(rec, "chart")) ?: "?",
			 json_string_value(json_object_get(
			     json_array_get(json_object_get(rec, "suspects"), 0), "evidence"))
			     ?: "no suspect");
	else if (shift)
		snprintf(body, sizeof(body),
			 "new level accepted: %lld steps in a row at %.2fx the expected, mostly %s",
			 (long long)json_integer_value(json_object_get(rec, "steps")),
			 json_number_value(json_object_get(rec, "ratio")),
			 json_string_value(json_object_get(rec, "kind")) ?: "?");
	else if (!strcmp(type, "step"))
		snprintf(body, sizeof(body), "step %lld: %.3f ms, %s",
			 (long long)json_integer_value(json_object_get(rec, "seq")),
			 json_integer_value(json_object_get(rec, "dur_ns")) / 1e6,
			 json_string_value(json_object_get(rec, "phase")) ?: "unknown");
	else
		snprintf(body, sizeof(body), "%s %s", type,
			 json_string_value(json_object_get(rec, "event")) ?: "");
	json_array_append_new(recs, otlp_pack("{s:o,s:o,s:i,s:s,s:{s:s},s:o}", "timeUnixNano",
					      u64s(wall(o, json_object_get(rec, "ts_ns"))),
					      "observedTimeUnixNano",
					      u64s(clock_ns(CLOCK_REALTIME)), "severityNumber",
					      warn ? 13 : 9, "severityText", warn ? "WARN" : "INFO",
					      "body", "stringValue", body, "attributes", attrs));
	b->items++;
	b->records++;
}

struct point_ctx {
	struct otlp_sink *o;
	const char *rkey;
	json_t *metrics; /* the resource's metrics array */
	json_t *base;	 /* attributes every data point of the record has */
	uint64_t start, time;
};

/* the data point array of metric name (created with its kind: sum, gauge, histogram) */
static json_t *metric_points(struct point_ctx *c, const char *name, const char *unit,
			     const char *kind)
{
	struct batch *b = &c->o->b[REQ_METRICS];
	char key[800];
	json_t *m, *data;

	snprintf(key, sizeof(key), "%s\x1f%s", c->rkey, name);
	m = json_object_get(b->metric_ix, key);
	if (!m) {
		if (!strcmp(kind, "sum"))
			data =
			    otlp_pack("{s:[],s:i,s:b}", "dataPoints", "aggregationTemporality",
				      1 /* DELTA: records carry differences */, "isMonotonic", 1);
		else if (!strcmp(kind, "histogram"))
			data = otlp_pack("{s:[],s:i}", "dataPoints", "aggregationTemporality", 1);
		else
			data = otlp_pack("{s:[]}", "dataPoints");
		m = otlp_pack("{s:s,s:s,s:o}", "name", name, "unit", unit, kind, data);
		otlp_set(b->metric_ix, key, m);
		json_array_append(c->metrics, m);
	}
	return json_object_get(json_object_get(m, kind), "dataPoints");
}

static json_t *point(struct point_ctx *c, json_t *extra /* stolen, may be NULL */)
{
	json_t *attrs = json_deep_copy(c->base), *p;
	size_t i;
	json_t *x;

	json_array_foreach(extra, i, x) json_array_append(attrs, x);
	json_decref(extra);
	p = otlp_pack("{s:o,s:o}", "startTimeUnixNano", u64s(c->start), "timeUnixNano",
		      u64s(c->time));
	if (json_array_size(attrs))
		json_object_set(p, "attributes", attrs);
	json_decref(attrs);
	c->o->b[REQ_METRICS].items++;
	return p;
}

static const char *unit_of(const char *field)
{
	size_t n = strlen(field);

#define ENDS(s) (n >= sizeof(s) - 1 && !strcmp(field + n - (sizeof(s) - 1), s))
	if (ENDS("_ns"))
		return "ns";
	if (ENDS("_bytes"))
		return "By";
	if (ENDS("_packets"))
		return "{packet}";
#undef ENDS
	return "1";
}

static void sum_point(struct point_ctx *c, const char *name, const char *field, json_t *v,
		      json_t *extra)
{
	json_t *p = point(c, extra);

	otlp_set(p, "asInt", i64s(json_integer_value(v)));
	json_array_append_new(metric_points(c, name, unit_of(field), "sum"), p);
}

/* an *_hist_us object ({"lower bound us": count}) as an explicit-bounds histogram */
static void hist_point(struct point_ctx *c, const char *name, json_t *h, json_t *extra)
{
	uint64_t counts[HIST_BUCKETS] = {0}, total = 0;
	json_t *bounds = json_array(), *bc = json_array(), *p, *v;
	const char *k;

	json_object_foreach(h, k, v)
	{
		unsigned long long lo = strtoull(k, NULL, 10);
		unsigned slot = 0;

		while (slot + 1 < HIST_BUCKETS && (2ull << slot) <= lo)
			slot++;
		counts[lo ? slot : 0] += (uint64_t)json_integer_value(v);
		total += (uint64_t)json_integer_value(v);
	}
	/* bucket i holds (bounds[i-1], bounds[i]]: bounds 2, 4, ..., 2^31 us */
	for (unsigned i = 1; i < HIST_BUCKETS; i++)
		json_array_append_new(bounds, json_real((double)(1ull << i)));
	for (unsigned i = 0; i < HIST_BUCKETS; i++)
		json_array_append_new(bc, u64s(counts[i]));
	p = point(c, extra);
	otlp_set(p, "count", u64s(total));
	otlp_set(p, "bucketCounts", bc);
	otlp_set(p, "explicitBounds", bounds);
	json_array_append_new(metric_points(c, name, "us", "histogram"), p);
}

/* "offcpu_hist_us" -> stem "offcpu"; "hist_us" (syscalls[]) -> stem "" */
static bool ends_hist(const char *k, char *stem, size_t sz)
{
	size_t n = strlen(k);

	if (!strcmp(k, "hist_us")) {
		stem[0] = 0;
		return true;
	}
	if (n <= 8 || strcmp(k + n - 8, "_hist_us"))
		return false;
	snprintf(stem, sz, "%.*s", (int)(n - 8), k);
	return true;
}

/* the identifying members of an array element become its data points' attributes */
static bool is_id(const char *k)
{
	return !strcmp(k, "name") || !strcmp(k, "nr") || !strcmp(k, "device") ||
	       !strcmp(k, "stream");
}

/* fields that place the record in time or space, not measurements */
static bool is_position(const char *k)
{
	return !strcmp(k, "interval_ns") || !strcmp(k, "interval_start_ns") ||
	       !strcmp(k, "interval_end_ns") || !strcmp(k, "ifindex") || !strcmp(k, "netns");
}

/* thread, net, gpu_summary: every measurement as a metric data point */
static void metric_record(struct otlp_sink *o, json_t *rec, const char *type)
{
	struct batch *b = &o->b[REQ_METRICS];
	char rkey[600], name[256], stem[128];
	struct point_ctx c = {.o = o, .rkey = rkey};
	json_t *ts = json_object_get(rec, "ts_ns"), *v, *x;
	const char *k, *kk;
	size_t i;

	c.metrics = batch_scope(b, REQ_METRICS, rec, rkey, sizeof(rkey));
	c.time = wall(o, ts);
	c.start = c.time;
	if (json_is_integer(json_object_get(rec, "interval_ns"))) {
		c.start =
		    c.time - (uint64_t)json_integer_value(json_object_get(rec, "interval_ns"));
	} else if (json_is_integer(json_object_get(rec, "interval_end_ns"))) {
		c.start = wall(o, json_object_get(rec, "interval_start_ns"));
		c.time = wall(o, json_object_get(rec, "interval_end_ns"));
	}
	c.base = json_array();
	attr_owner(c.base, rec);
	attr_str(c.base, "thread.name", json_string_value(json_object_get(rec, "comm")));
	attr_str(c.base, "network.interface.name", json_string_value(json_object_get(rec, "dev")));

	json_object_foreach(rec, k, v)
	{
		if (is_common(k) || is_position(k))
			continue;
		snprintf(name, sizeof(name), "infertrace.%s.%s", type, k);
		if (json_is_integer(v)) {
			sum_point(&c, name, k, v, NULL);
		} else if (json_is_object(v) && ends_hist(k, stem, sizeof(stem))) {
			snprintf(name, sizeof(name), "infertrace.%s.%s", type, stem);
			hist_point(&c, name, v, NULL);
		} else if (json_is_object(v) && !strcmp(k, "launch_to_start_ns")) {
			/* percentiles of a distribution we do not hold: gauges by quantile */
			json_object_foreach(v, kk, x)
			{
				json_t *p;

				if (!json_is_integer(x) || !strcmp(kk, "count"))
					continue;
				p = point(&c,
					  otlp_pack("[{s:s,s:{s:s}}]", "key", "infertrace.quantile",
						    "value", "stringValue", kk));
				otlp_set(p, "asInt", i64s(json_integer_value(x)));
				json_array_append_new(metric_points(&c, name, "ns", "gauge"), p);
			}
		} else if (json_is_object(v)) {
			/* name -> count (launches per CUDA entry point) */
			json_object_foreach(v, kk, x)
			{
				char akey[160];

				if (!json_is_integer(x))
					continue;
				snprintf(akey, sizeof(akey), "infertrace.%s.name", k);
				sum_point(&c, name, k, x,
					  otlp_pack("[{s:s,s:{s:s}}]", "key", akey, "value",
						    "stringValue", kk));
			}
		} else if (json_is_array(v)) {
			/* syscalls, devices, streams, top_kernels: per element */
			json_array_foreach(v, i, x)
			{
				json_t *ids = json_array(), *f;
				const char *fk;

				json_object_foreach(x, fk, f)
				{
					char akey[160];

					if (!is_id(fk) || json_is_null(f))
						continue;
					snprintf(akey, sizeof(akey), "infertrace.%s.%s", k, fk);
					attr(ids, akey, any_value(f));
				}
				json_object_foreach(x, fk, f)
				{
					char mname[300];

					if (is_id(fk))
						continue;
					if (json_is_integer(f)) {
						snprintf(mname, sizeof(mname), "%s.%s", name, fk);
						sum_point(&c, mname, fk, f, json_deep_copy(ids));
					} else if (json_is_object(f) &&
						   ends_hist(fk, stem, sizeof(stem))) {
						snprintf(mname, sizeof(mname),
							 stem[0] ? "%s.%s" : "%s", name, stem);
						hist_point(&c, mname, f, json_deep_copy(ids));
					}
				}
				json_decref(ids);
			}
		}
	}
	json_decref(c.base);
	b->records++;
}

/* ------------------------------------------------------------- sink ---- */
static int otlp_write(struct sink *s, enum rec_class cls, const char *key, const char *json,
		      size_t len)
{
	struct otlp_sink *o = s->priv;
	json_error_t jerr;
	json_t *rec;
	const char *type;
	int kind = -1;

	(void)key;
	if (cls == REC_EVENT || cls == REC_STATS)
		return 0; /* not exported (sink_otlp.h) */
	rec = json_loadb(json, len, 0, &jerr);
	type = json_string_value(json_object_get(rec, "type"));
	if (!type || !json_is_integer(json_object_get(rec, "ts_ns"))) {
		json_decref(rec);
		pthread_mutex_lock(&o->mu);
		o->bad_records++;
		pthread_mutex_unlock(&o->mu);
		s->errors++;
		return -EINVAL;
	}
	if (cls == REC_ANOMALY || !strcmp(type, "step") || !strcmp(type, "process")) {
		log_record(o, rec, type);
		kind = REQ_LOGS;
	} else if (!strcmp(type, "thread") || !strcmp(type, "net") ||
		   !strcmp(type, "gpu_summary")) {
		metric_record(o, rec, type);
		kind = REQ_METRICS;
	}
	json_decref(rec);
	if (kind < 0)
		return 0;
	s->written++;
	if (o->b[kind].items >= (kind == REQ_LOGS ? BATCH_LOGS : BATCH_POINTS))
		seal(o, kind);
	return 0;
}

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
	(void)p;
	(void)ud;
	return size * n;
}

static int progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	struct otlp_sink *o = ud;

	(void)a, (void)b, (void)c, (void)d;
	return atomic_load(&o->abort_io); /* non-zero aborts the transfer */
}

/* one POST: 0 sent, -EAGAIN worth retrying, -EPROTO refused for good */
static int post(struct otlp_sink *o, CURL *h, const struct otlp_req *r, char *err, size_t errsz)
{
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	long status = 0;
	CURLcode rc;

	curl_easy_setopt(h, CURLOPT_URL, o->url[r->kind]);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body);
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->len);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)HTTP_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, o);
	rc = curl_easy_perform(h);
	curl_slist_free_all(hdr);
	if (rc != CURLE_OK) {
		snprintf(err, errsz, "%s", curl_easy_strerror(rc));
		return -EAGAIN;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	snprintf(err, errsz, "HTTP %ld", status);
	if (status >= 200 && status < 300)
		return 0;
	/* OTLP/HTTP: these are retryable, every other status is not */
	if (status == 429 || status == 502 || status == 503 || status == 504)
		return -EAGAIN;
	return -EPROTO;
}

static void *worker(void *arg)
{
	struct otlp_sink *o = arg;
	CURL *h = curl_easy_init();
	char err[128];

	pthread_mutex_lock(&o->mu);
	for (;;) {
		struct otlp_req r;
		uint64_t t0;
		int backoff = BACKOFF_FIRST_MS, ret;

		while (!o->qlen && !o->stop)
			pthread_cond_wait(&o->cv, &o->mu);
		if (!o->qlen)
			break; /* stop, nothing left */
		r = o->q[o->qhead];
		o->busy = true;
		pthread_mutex_unlock(&o->mu);

		t0 = clock_ns(CLOCK_MONOTONIC);
		for (;;) {
			ret = h ? post(o, h, &r, err, sizeof(err)) : -EPROTO;
			if (!h)
				snprintf(err, sizeof(err), "curl_easy_init failed");
			if (ret != -EAGAIN || atomic_load(&o->abort_io) ||
			    clock_ns(CLOCK_MONOTONIC) - t0 > RETRY_GIVE_UP_MS * 1000000ull)
				break;
			/* wait before the next try; close() cuts it short */
			pthread_mutex_lock(&o->mu);
			o->retries++;
			if (!atomic_load(&o->abort_io)) {
				struct timespec until;
				uint64_t t = clock_ns(CLOCK_REALTIME) + backoff * 1000000ull;

				until.tv_sec = t / 1000000000ull;
				until.tv_nsec = t % 1000000000ull;
				pthread_cond_timedwait(&o->cv, &o->mu, &until);
			}
			pthread_mutex_unlock(&o->mu);
			backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
		}

		pthread_mutex_lock(&o->mu);
		if (!ret) {
			o->sent_requests++;
			o->sent_records += r.records;
		} else {
			if (ret == -EPROTO)
				o->rejected_requests++;
			else
				o->failed_requests++;
			o->dropped_records += r.records;
			pr_debug("otlp: %s request of %u records dropped: %s",
				 r.kind == REQ_LOGS ? "logs" : "metrics", r.records, err);
		}
		free(r.body);
		o->qhead = (o->qhead + 1) % o->qcap;
		o->qlen--;
		o->busy = false;
		pthread_cond_broadcast(&o->idle);
	}
	pthread_mutex_unlock(&o->mu);
	if (h)
		curl_easy_cleanup(h);
	return NULL;
}

/*
 * timeout_ms 0 (every interval): seal the batches, return. At exit: also
 * wait up to timeout_ms for the queue to drain.
 */
static int otlp_flush(struct sink *s, int timeout_ms)
{
	struct otlp_sink *o = s->priv;
	struct timespec until;
	uint64_t t;
	int err = 0;

	seal(o, REQ_LOGS);
	seal(o, REQ_METRICS);
	if (timeout_ms <= 0)
		return 0;
	t = clock_ns(CLOCK_REALTIME) + (uint64_t)timeout_ms * 1000000ull;
	until.tv_sec = t / 1000000000ull;
	until.tv_nsec = t % 1000000000ull;
	pthread_mutex_lock(&o->mu);
	while ((o->qlen || o->busy) && !err)
		err = pthread_cond_timedwait(&o->idle, &o->mu, &until);
	if (o->qlen)
		pr_warn("otlp: %u requests not sent within the flush timeout", o->qlen);
	pthread_mutex_unlock(&o->mu);
	return err ? -ETIMEDOUT : 0;
}

static void otlp_stats(struct sink *s, json_t *rec)
{
	struct otlp_sink *o = s->priv;
	json_t *x;

	pthread_mutex_lock(&o->mu);
	x = json_pack(
	    "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "queue_requests", (json_int_t)o->qlen,
	    "queue_max", (json_int_t)o->qcap, "sent_requests_total", (json_int_t)o->sent_requests,
	    "sent_records_total", (json_int_t)o->sent_records, "retries_total",
	    (json_int_t)o->retries, "dropped_records_total", (json_int_t)o->dropped_records,
	    "queue_full_total", (json_int_t)o->queue_full, "rejected_requests_total",
	    (json_int_t)o->rejected_requests, "failed_requests_total",
	    (json_int_t)o->failed_requests, "bad_records_total", (json_int_t)o->bad_records);
	pthread_mutex_unlock(&o->mu);
	json_object_set_new(rec, "otlp", x);
}

static void otlp_close(struct sink *s)
{
	struct otlp_sink *o;

	if (!s)
		return;
	o = s->priv;
	if (o->started) {
		/* what is still queued now is dropped, counted (flush waited already) */
		atomic_store(&o->abort_io, true);
		pthread_mutex_lock(&o->mu);
		o->stop = true;
		pthread_cond_broadcast(&o->cv);
		pthread_mutex_unlock(&o->mu);
		pthread_join(o->worker, NULL);
		pr_info("otlp: %llu records sent in %llu requests, %llu dropped, %llu retries",
			(unsigned long long)o->sent_records, (unsigned long long)o->sent_requests,
			(unsigned long long)o->dropped_records, (unsigned long long)o->retries);
	}
	for (int k = 0; k < 2; k++) {
		json_decref(o->b[k].resources);
		json_decref(o->b[k].list);
		json_decref(o->b[k].metric_ix);
		free(o->url[k]);
	}
	for (uint32_t i = 0; i < o->qlen; i++)
		free(o->q[(o->qhead + i) % o->qcap].body);
	free(o->q);
	pthread_mutex_destroy(&o->mu);
	pthread_cond_destroy(&o->cv);
	pthread_cond_destroy(&o->idle);
	free(o);
}

struct sink *sink_otlp_open(const char *url, uint32_t queue_max)
{
	struct otlp_sink *o;
	size_t n = strlen(url);
	pthread_condattr_t ca;
	int err;

	if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) {
		pr_err("--otlp %s: not an http:// or https:// URL", url);
		errno = EINVAL;
		return NULL;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		pr_err("--otlp: libcurl initialisation failed");
		errno = EIO;
		return NULL;
	}
	o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	while (n && url[n - 1] == '/')
		n--;
	if (asprintf(&o->url[REQ_LOGS], "%.*s/v1/logs", (int)n, url) < 0 ||
	    asprintf(&o->url[REQ_METRICS], "%.*s/v1/metrics", (int)n, url) < 0) {
		o->url[REQ_LOGS] = o->url[REQ_METRICS] = NULL;
		free(o);
		errno = ENOMEM;
		return NULL;
	}
	o->qcap = queue_max ? queue_max : OTLP_QUEUE_MAX_DEFAULT;
	o->q = calloc(o->qcap, sizeof(*o->q));
	o->wall_off_ns = (int64_t)(clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_MONOTONIC));
	batch_reset(&o->b[REQ_LOGS]);
	batch_reset(&o->b[REQ_METRICS]);
	pthread_mutex_init(&o->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_cond_init(&o->cv, &ca);
	pthread_cond_init(&o->idle, &ca);
	pthread_condattr_destroy(&ca);
	o->s.name = "otlp";
	o->s.write = otlp_write;
	o->s.flush = otlp_flush;
	o->s.close = otlp_close;
	o->s.stats = otlp_stats;
	o->s.priv = o;
	if (!o->q) {
		otlp_close(&o->s);
		errno = ENOMEM;
		return NULL;
	}
	err = pthread_create(&o->worker, NULL, worker, o);
	if (err) {
		pr_err("--otlp: cannot start the sender thread: %s", strerror(err));
		otlp_close(&o->s);
		errno = err;
		return NULL;
	}
	o->started = true;
	pr_info("otlp: logs to %s, metrics to %s", o->url[REQ_LOGS], o->url[REQ_METRICS]);
	return &o->s;
}
