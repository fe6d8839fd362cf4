/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sink_otlp.h - records to an OpenTelemetry collector over OTLP/HTTP with
 * the JSON encoding (agent/sinks/sink_otlp.c; docs/operations.md, "OpenTelemetry").
 *
 * A transport like the others: it sees the finished JSON records. Steps,
 * anomalies and process changes become log records (POST URL/v1/logs); the
 * interval aggregates (thread, net, gpu_summary) become metrics (POST
 * URL/v1/metrics): integer counters as delta sums, *_hist_us histograms as
 * histograms. Single events and the agent's own stats are not sent.
 *
 * Threading: write(), flush() and stats() run on the event loop thread and
 * never wait on the network: records are batched there, a batch is sealed
 * into a request body every interval (flush) or when it is full, and a
 * request goes into a bounded queue that one worker thread sends with
 * libcurl, retrying with backoff. A full queue drops the new request and
 * counts its records; so does a request that failed for good.
 */
#ifndef INFERTRACE_SINK_OTLP_H
#define INFERTRACE_SINK_OTLP_H

#include "agent.h"

#define OTLP_QUEUE_MAX_DEFAULT 64

/*
 * url: the collector's OTLP/HTTP base, e.g. http://collector:4318 (the
 * paths /v1/logs and /v1/metrics are appended). queue_max: requests held
 * while the collector is slow or away. NULL + errno, logged.
 */
struct sink *sink_otlp_open(const char *url, uint32_t queue_max);

#endif /* INFERTRACE_SINK_OTLP_H */
