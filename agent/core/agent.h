/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * agent.h - the agent's internal interfaces: options, the record builder and
 * the sinks every producer (BPF rings, CUPTI shim, replay) writes through.
 *
 * Threading: the agent is one event loop thread (main.c). Every function here
 * is called from that thread unless it says otherwise.
 */
#ifndef INFERTRACE_AGENT_H
#define INFERTRACE_AGENT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <jansson.h>

#include "events.h"
#include "diagnose.h"

#define AGENT_VERSION "0.1.0"
#define MAX_PID_FILTER 64
/* --replay-rank files besides --replay's: collective.h matches up to 64 ranks */
#define MAX_REPLAY_RANKS 63
#define MAX_KAFKA_PROPS 64

/* what a record is for: the sink routes it (Kafka topics later) */
enum rec_class {
	REC_EVENT = 0,	 /* deep-mode detail: launches, kernels, single events */
	REC_SUMMARY = 1, /* per-interval aggregates, steps */
	REC_ANOMALY = 2,
	REC_STATS = 3, /* the agent's own counters */
	REC_CLASS_COUNT,
};

/* all command-line options in one struct (main.c fills it and documents it: --config-doc) */
struct agent_opts {
	enum agent_mode mode;
	double interval_s;
	double duration_s;    /* 0: until signalled */
	const char *output;   /* NULL or "-": stdout */
	const char *instance; /* overrides every process's instance name */
	int pids[MAX_PID_FILTER];
	int n_pids;
	uint64_t offcpu_thresh_ns;
	uint64_t runq_thresh_ns;
	uint64_t syscall_thresh_ns;
	uint64_t sync_thresh_ns;
	bool thresholds_set; /* set explicitly: deep mode keeps them */
	bool stacks;	     /* user stacks at launches in deep mode */
	uint32_t stack_rate;
	uint32_t ringbuf_kib;
	uint32_t max_threads;
	bool summary;		/* readable summary on stderr at exit */
	double summary_every_s; /* and every this often, each its period's; 0: off */
	bool no_net;		/* skip the network family */
	const char *replay;	/* --replay FILE (no BPF) */
	const char *replay_ranks[MAX_REPLAY_RANKS]; /* --replay-rank FILE: more ranks of the job */
	int n_replay_ranks;
	const char *shim_socket; /* CUPTI shims connect here; "none": off */
	const char *shim_group;	 /* group of the shim socket; NULL: SHIM_GROUP_DEFAULT */
	/* Kafka sink (agent/sinks/sink_kafka.h); kafka NULL: no Kafka */
	const char *kafka;	  /* --kafka BROKERS (bootstrap.servers) */
	const char *kafka_prefix; /* topics <prefix>.steps, .anomalies, .events, .stats */
	const char *kafka_topics[REC_CLASS_COUNT]; /* --kafka-topic CLASS=NAME overrides */
	const char *kafka_props[MAX_KAFKA_PROPS];  /* -X key=value, in order */
	int n_kafka_props;
	uint32_t kafka_queue_max; /* records held in memory by the producer */
	const char *spill_dir;
	uint32_t spill_max_mib;
	int spill_foreign;	 /* enum spill_foreign (spill.h): another owner's records */
	double flush_timeout_s;	 /* exit: wait this long for delivery */
	const char *otlp;	 /* --otlp URL (agent/sinks/sink_otlp.h); NULL: off */
	uint32_t otlp_queue_max; /* requests; 0: OTLP_QUEUE_MAX_DEFAULT */
	/* operating the agent (agent/control/ops.h, docs/operations.md) */
	const char *control_socket; /* NULL: CTL_SOCK_DEFAULT; "none": off */
	const char *control_group;  /* besides root, members may use the socket */
	double deep_dive_max_s;	    /* cap of one deep-dive's duration */
	double anomaly_dive_s;	    /* deep-dive an anomaly's instance this long; 0: off */
	double recorder_s;	    /* flight-recorder window; 0: off */
	uint32_t recorder_mib;	    /* flight-recorder memory budget */
	uint32_t recorder_launches; /* kernel flight queue entries; 0: none */
	uint32_t nccl_slots;	    /* sentinel's NCCL call slots per CPU; 0: on the ring */
	double lib_grace_s;	    /* a library file's probes outlive its last user this long */
	/* per-launch uprobes in sentinel (agent/sources/uprobes.c, issue 20) */
	enum {
		SENTINEL_LAUNCHES_SYNC,
		SENTINEL_LAUNCHES_GRAPHS,
		SENTINEL_LAUNCHES_ALL
	} sentinel_launches;					   /* --sentinel-launches */
	uint64_t launch_sample_window_ns, launch_sample_period_ns; /* --launch-sampling; 0: off */
	const char *metrics;		/* ADDR:PORT of the Prometheus endpoint; NULL: off */
	uint32_t metrics_instances;	/* step histograms of their own; 0: the node's only */
	uint32_t metrics_instance_idle; /* seconds without a step: its series leave; 0 never */
	/* the node's GPUs through NVML (agent/sources/gpu_telemetry.c) */
	enum { GPU_TELEMETRY_AUTO, GPU_TELEMETRY_ON, GPU_TELEMETRY_OFF } gpu_telemetry;
	const char *nvml_lib;		  /* NULL: libnvidia-ml.so.1 */
	uint64_t gpu_telemetry_period_ns; /* --gpu-telemetry-period */
	/* the Python frames of traced processes (agent/sources/python.c) */
	enum { PYTHON_STACKS_AUTO, PYTHON_STACKS_ON, PYTHON_STACKS_OFF } python_stacks;
	uint32_t python_hz;   /* --python-hz */
	const char *perfetto; /* --replay ... --perfetto OUT */
	/* steps and anomalies (agent/pipeline/diag.c; --step-markers, --baseline, --detect) */
	struct agent_diag_opts {
		const char *markers; /* NULL: the library's defaults */
		bool auto_only, no_anchor, off;
		const char *baseline, *baseline_save;
		struct diag_det_opts det; /* .sz set by diag_new() */
	} diag;
	int verbose;
};

struct agent;

/*
 * Sinks: where finished JSON lines go. write() gets one record without a
 * trailing newline; it must not block for long (a Kafka sink queues).
 */
struct sink {
	const char *name;
	int (*write)(struct sink *s, enum rec_class cls, const char *key, const char *json,
		     size_t len);
	int (*flush)(struct sink *s, int timeout_ms);
	void (*close)(struct sink *s);
	/* optional: add the sink's counters to a stats record (stats.c) */
	void (*stats)(struct sink *s, json_t *stats_record);
	/*
	 * Set by a sink that leaves the node (Kafka): in sentinel mode the
	 * pipeline (agent/pipeline/route.c) does not hand it single events of an
	 * instance that is not deep, unless a flight-recorder window releases
	 * them; it counts them in held. Local sinks (file, stdout) get everything.
	 */
	bool remote;
	uint64_t held;
	uint64_t written;
	uint64_t errors;
	void *priv;
};

struct sink *sink_file_open(const char *path); /* NULL or "-" = stdout; NULL+errno on error */

/*
 * Record builder. rec_new() returns a new object with the common fields
 * (schema, type, host, instance, pid, tid when tid != 0, ts_ns);
 * rec_emit() serialises it to the sinks and releases it (steals the ref).
 * pid 0 means a node-level record: instance is the host name.
 */
json_t *rec_new(struct agent *a, const char *type, uint32_t pid, uint32_t tid, uint64_t ts_ns);
/* a JSON string of bytes from outside: invalid UTF-8 replaced (U+FFFD), counted */
json_t *rec_string(const char *s);
int rec_emit(struct agent *a, enum rec_class cls, json_t *rec);

/*
 * For hot paths that format JSON themselves (replay of millions of kernel
 * records): one finished JSON object, no trailing newline. key: the record's
 * partition key (its instance), may be NULL. rec_emit() and rec_emit_raw()
 * are the pipeline's entry (agent/pipeline/route.c decides send/hold/keep).
 */
int rec_emit_raw(struct agent *a, enum rec_class cls, const char *key, const char *json,
		 size_t len);
/*
 * Sentinel GPU detail (route.c): is it wanted at all for pid (a deep-dive
 * sends it, the flight recorder keeps it), and hand it over.
 */
bool route_wants_detail(struct agent *a, uint32_t pid);
int route_detail(struct agent *a, uint32_t pid, const char *key, const char *json, size_t len);
/*
 * A record in a source's binary form and the function that makes it JSON
 * into buf (its length, or -1): fn(a, key, blob, len, buf, cap).
 */
typedef long (*rec_fmt_fn)(struct agent *a, const char *key, const void *blob, size_t len,
			   char *buf, size_t cap);
/*
 * route_detail() of a record still in binary form: formatted now when it
 * is sent (a deep-dive), else kept as it is and formatted only if its
 * window is read (recorder.c). len at most 4 KiB; the JSON at most 64 KiB.
 */
int route_detail_fmt(struct agent *a, uint32_t pid, const char *key, rec_fmt_fn fn,
		     const void *blob, size_t len);
/*
 * record.c, below the decision: rec_dump() serialises (a buffer reused by
 * the next call, NULL on error, counted); rec_send() writes one line to
 * every sink, remote sinks only class-event lines that are released.
 */
const char *rec_dump(struct agent *a, const json_t *rec, size_t *len);
int rec_send(struct agent *a, enum rec_class cls, const char *key, const char *json, size_t len,
	     bool release);
/* one serialised record to a writer: rec_emit_raw(), or rec_send() released */
typedef int (*rec_raw_fn)(struct agent *a, enum rec_class cls, const char *key, const char *json,
			  size_t len);
/* rec_dump() rec, hand it to fn with its instance as key; steals rec */
int rec_obj_to(struct agent *a, enum rec_class cls, json_t *rec, rec_raw_fn fn);
/* rec_obj_to() rec_send() released, for the pipeline's own records */
int rec_send_obj(struct agent *a, enum rec_class cls, json_t *rec);

/* the agent's options (read-only after start) */
const struct agent_opts *agent_opts(struct agent *a);

/*
 * Instance used for records whose process has no instance of its own (replay
 * sets it to the recording's name). --instance still wins.
 */
void agent_set_default_instance(struct agent *a, const char *name);

/*
 * --replay FILE: feed a recording through the correlator and the sinks
 * instead of live sources (agent/sources/replay.c). Returns 0 or -errno; errors are
 * logged with the file offset or line. FILE may be a FIFO or a pipe. A
 * non-zero *stop (set by the SIGINT / SIGTERM handler) ends it early with
 * -EINTR after writing what was read.
 */
int replay_run(struct agent *a, const char *path, const volatile sig_atomic_t *stop);

/* instance name of a traced process (never NULL) */
const char *agent_instance_of(struct agent *a, uint32_t pid);
/* the process's rank among its instance's workers (its environment); -1 */
int32_t agent_rank_of(struct agent *a, uint32_t pid);
const char *agent_host(struct agent *a);

/* log with a level; the only place the agent prints diagnostics */
enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };
void agent_log(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void agent_log_set_level(int level);

#define pr_err(...) agent_log(LOG_ERROR, __VA_ARGS__)
#define pr_warn(...) agent_log(LOG_WARN, __VA_ARGS__)
#define pr_info(...) agent_log(LOG_INFO, __VA_ARGS__)
#define pr_debug(...) agent_log(LOG_DEBUG, __VA_ARGS__)

/* monotonic clock, same base as bpf_ktime_get_ns() */
uint64_t now_ns(void);

#endif /* INFERTRACE_AGENT_H */
