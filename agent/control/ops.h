/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * ops.h - operating the agent while it runs: per-instance deep-dive
 * (deepdive.c), the flight recorder (recorder.c), the control socket
 * (control.c), the Kafka control topic (control_kafka.c), the Prometheus
 * endpoint (metrics.c) and the Perfetto / Chrome trace writer (perfetto.c).
 * docs/operations.md explains them to operators.
 *
 * Threading: everything here runs on the event loop thread (main.c), like
 * the rest of the agent. The state lives behind struct agent.ops.
 */
#ifndef INFERTRACE_OPS_H
#define INFERTRACE_OPS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <jansson.h>

#include "agent.h"

struct agent;

#define DEEP_DIVE_DEFAULT_S 60.0

struct recorder;
struct deepdive;
struct control;
struct metrics;
struct control_kafka;

/* struct agent.ops: each module's state, NULL when off */
struct ops {
	struct recorder *rec;
	struct deepdive *dd;
	struct control *ctl;
	struct metrics *met;
	struct control_kafka *ck;
	uint64_t last_tick_ns; /* readiness: the loop turns */
	json_t *last_stats;    /* the latest stats record (status shows it) */
	json_t *rates;	       /* events per second by type over the latest interval */
#define STATS_PROVIDERS 8
	/* what adds an object to every stats record and status reply (stats_provide) */
	void (*providers[STATS_PROVIDERS])(struct agent *a, json_t *obj);
	int n_providers;
};

/* set up / tear down every module the options enable; 0 or -errno */
int ops_init(struct agent *a);
/* every loop iteration (<= 100 ms): expiries, connection timeouts */
void ops_tick(struct agent *a);
/*
 * stats.c: a module adds its object ("control", "deep_dive", "recorder",
 * "metrics", "control_topic") to every stats record and status reply through
 * the function it registers here (ops_init registers them, in that order).
 */
void stats_provide(struct agent *a, void (*fn)(struct agent *a, json_t *obj));
/* every registered object into obj (stats records, status replies, metrics) */
void ops_add_objects(struct agent *a, json_t *obj);
void ops_free(struct agent *a);

/* module lifecycles, called by ops_init/ops_free/ops_tick/ops_stats */
int recorder_init(struct agent *a);
void recorder_tick(struct agent *a);
void recorder_stats(struct agent *a, json_t *obj);
void recorder_free(struct agent *a);
int deepdive_init(struct agent *a);
void deepdive_tick(struct agent *a);
void deepdive_stats(struct agent *a, json_t *obj);
void deepdive_free(struct agent *a);
int control_init(struct agent *a);
void control_tick(struct agent *a);
void control_stats(struct agent *a, json_t *obj);
void control_free(struct agent *a);
/* the "status" reply body (also what agentctl status prints) */
json_t *control_status(struct agent *a);
int metrics_init(struct agent *a);
void metrics_tick(struct agent *a);
void metrics_stats(struct agent *a, json_t *obj);
void metrics_free(struct agent *a);

/* ------------------------------------------------------------ deep-dive -- */
/*
 * Deep capture for every traced process of instance `name` (and processes
 * of that instance that appear meanwhile) until duration_s (0: the default,
 * capped by --deep-dive-max) has passed or deepdive_stop(). Sets
 * PROC_F_DEEP in traced_procs, runtime_cfg.deep_procs, and tells the CUPTI
 * shims of those processes to capture in deep mode. A new deep-dive first
 * sends the instance's flight-recorder window. source: "socket", "kafka",
 * "anomaly".
 * info (may be NULL) receives "instance", "until_ns", "duration_s",
 * "processes". Returns 0 or -errno (-EALREADY when the whole agent is in
 * deep mode, -ENOSPC when too many deep-dives run).
 */
int deepdive_start(struct agent *a, const char *name, double duration_s, const char *source,
		   json_t *info);
/* -ENOENT when the instance has no deep-dive */
int deepdive_stop(struct agent *a, const char *name, json_t *info);
/* is pid in deep capture (global deep mode or a deep-dive)? cheap when none runs */
bool deepdive_pid_deep(struct agent *a, uint32_t pid);
/* every event of this instance is sent: deep mode, or a deep-dive on it */
bool deepdive_instance_deep(struct agent *a, const char *instance);
/* number of traced processes flagged PROC_F_DEEP by deep-dives (runtime_cfg.deep_procs) */
uint32_t deepdive_proc_count(struct agent *a);
/* active deep-dives as a JSON array of {instance, remaining_s, processes, source} */
json_t *deepdive_list(struct agent *a);

/* ------------------------------------------------------ flight recorder -- */
/*
 * Every record of class REC_EVENT or REC_ANOMALY passes recorder_tap()
 * (record.c), already delivered to the sinks (sent = true). Detail that is
 * produced but not sent in sentinel mode (GPU activity records of
 * instances without a deep-dive) is kept with recorder_keep(). Per
 * instance, the last --recorder-seconds are kept, in a global budget of
 * --recorder-mib.
 */
bool recorder_enabled(struct agent *a);
/*
 * The kernel half (bpf/events.h, struct flight_launch): in sentinel mode BPF
 * writes every launch into per-CPU rings of an mmap'able array map, which
 * the agent copies at every tick. Sized from the options alone, before the
 * BPF object is loaded: entries per CPU (a power of 2; 0: off), and CPUs.
 */
#define FLIGHT_STACKS 16384 /* stack map buckets (256 bytes each): few collisions */
uint32_t recorder_kernel_per_cpu(struct agent *a);
uint32_t recorder_kernel_cpus(void);
bool recorder_kernel_enabled(struct agent *a);
void recorder_tap(struct agent *a, enum rec_class cls, const char *key, const char *json,
		  size_t len);
void recorder_keep(struct agent *a, const char *key, const char *json, size_t len);
/*
 * Send the window of instance key (records not delivered yet) to the
 * sinks, after a "flight_recorder" record. trigger: "anomaly",
 * "deep_dive". Returns the number of records sent.
 */
int recorder_flush(struct agent *a, const char *key, const char *trigger);
/* inside recorder_flush(): the records being emitted are a window */
bool recorder_flushing(struct agent *a);
/*
 * Call fn for each record in the window (instance NULL: every instance),
 * oldest first per instance. Returns 0, or the first non-zero fn result.
 */
int recorder_foreach(struct agent *a, const char *instance,
		     int (*fn)(void *ctx, const char *json, size_t len), void *ctx);

/*
 * Copy the window (instance NULL: every instance) into one malloc'ed buffer
 * of entries [u32 length][JSON bytes], so that a long export can convert it
 * bit by bit while the recorder moves on. *buf NULL when empty. 0 or -errno.
 */
int recorder_snapshot(struct agent *a, const char *instance, char **buf, size_t *len,
		      uint64_t *records);

/* ------------------------------------------------------------- Perfetto -- */
/*
 * Chrome trace JSON (opens in ui.perfetto.dev and chrome://tracing) from
 * the agent's own records: one track per CPU thread (launches, off-CPU,
 * slow syscalls, synchronisations, markers), one process per GPU device
 * with a track per stream (kernels, copies, memsets), and a flow arrow from
 * each launch to each kernel it started. Records of other types are
 * ignored (counted). docs/operations.md, "Perfetto export".
 */
struct perfetto;
struct perfetto_stats {
	uint64_t records; /* records given */
	uint64_t events;  /* trace events written (metadata excluded) */
	uint64_t flows;
	uint64_t ignored; /* records that draw nothing */
	uint64_t bad;	  /* records that are not JSON objects with a type */
};
struct perfetto *perfetto_new(void); /* NULL + errno */
int perfetto_add(struct perfetto *p, const json_t *rec);
int perfetto_add_json(struct perfetto *p, const char *json, size_t len);
/* the whole document; 0 or -errno */
int perfetto_write(struct perfetto *p, FILE *f);
void perfetto_get_stats(const struct perfetto *p, struct perfetto_stats *out);
void perfetto_free(struct perfetto *p);
/*
 * A sink that feeds every record to a struct perfetto and writes path at
 * close (--replay FILE --perfetto OUT). NULL + errno.
 */
struct sink *sink_perfetto_open(const char *path);

/* -------------------------------------------------------- control topic -- */
/*
 * control_kafka.c: consume <prefix>.control (every agent, its own consumer
 * group) and apply deep_dive requests for the instances this node serves.
 * 0 when Kafka is not configured.
 */
int control_kafka_init(struct agent *a);
void control_kafka_poll(struct agent *a);
void control_kafka_stats(struct agent *a, json_t *obj);
void control_kafka_free(struct agent *a);

#endif /* INFERTRACE_OPS_H */
