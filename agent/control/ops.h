/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * ops.h - operating the agent while it runs: per-instance deep-dive
 * (deepdive.c), the flight recorder (recorder.c), the control socket
 * (control.c), the Kafka control topic (control_kafka.c), the Prometheus
 * endpoint (metrics.c). The Perfetto / Chrome trace writer, a sink, has its
 * own header (agent/sinks/perfetto.h).
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

struct recorder;
struct deepdive;
struct control;
struct metrics;
struct control_kafka;

/* struct agent.ops: each module's state, NULL when off */
struct ops {
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
/*
 * --summary's sections since the start or the last reset (at exit, every
 * --summary-every, and the control socket's "summary"; control.c); reset:
 * the digest then starts anew. -ENOMEM: nothing reset, the text written.
 */
int control_summary(struct agent *a, FILE *out, bool reset);

/* module lifecycles, called by ops_init/ops_free/ops_tick/ops_stats */
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

/* stats.c: the agent's own counters as a "stats" record */
void stats_emit(struct agent *a, uint64_t interval_ns, bool final);

#endif /* INFERTRACE_OPS_H */
