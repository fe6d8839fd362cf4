/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sink_kafka.h - records to Kafka (agent/sinks/sink_kafka.c), and the helpers
 * other Kafka clients of the agent use (the <prefix>.control consumer).
 *
 * Topics: REC_SUMMARY -> <prefix>.steps, REC_ANOMALY -> <prefix>.anomalies,
 * REC_EVENT -> <prefix>.events, REC_STATS -> <prefix>.stats, unless
 * --kafka-topic CLASS=NAME says otherwise. Key: the record's instance, so
 * that one instance's records stay in one partition, in order.
 *
 * No silent loss: the producer's queue (--kafka-queue-max records), then
 * the spill (agent/sinks/spill.h, --spill-dir, --spill-max-mib), then shedding by
 * class, counted. docs/architecture.md, "Kafka", tells the whole path.
 *
 * Threading: everything runs on the event loop thread; librdkafka's
 * callbacks (delivery reports, errors, logs) are served from rd_kafka_poll()
 * there too, never from librdkafka's own threads.
 */
#ifndef INFERTRACE_SINK_KAFKA_H
#define INFERTRACE_SINK_KAFKA_H

#include <librdkafka/rdkafka.h>

#include "agent.h"

/* defaults of the options (main.c documents them in its table) */
#define KAFKA_PREFIX_DEFAULT "infertrace"
#define KAFKA_QUEUE_MAX_DEFAULT 100000
#define SPILL_DIR_DEFAULT "/var/lib/infertrace/spill"
#define SPILL_DIR_REPLAY_DEFAULT "/var/lib/infertrace/spill-replay"
#define SPILL_MAX_MIB_DEFAULT 1024
#define FLUSH_TIMEOUT_DEFAULT 10.0

/* topic suffix of a class ("steps", "anomalies", "events", "stats"), NULL if none */
const char *kafka_class_suffix(enum rec_class cls);
/* class of a suffix, or -1: parses the CLASS of --kafka-topic CLASS=NAME */
int kafka_class_of_suffix(const char *suffix);

/*
 * The producer sink. Opens (creates) the spill directory, takes its lock and
 * resumes what an earlier run left there, creates the producer and registers
 * its event fd with the loop (agent_watch_fd). NULL + errno, logged.
 */
struct sink *sink_kafka_open(struct agent *a);

/*
 * For other Kafka clients of the agent, e.g. the <prefix>.control consumer
 * (control_kafka.c).
 *
 * kafka_conf_new: a configuration with bootstrap.servers = --kafka and every
 * -X property applied in order (TLS/SASL settings included), client.id set
 * to infertrace-agent-<host>, librdkafka's log lines routed to agent_log
 * (debug level; errors at level <= 2). Producer-only -X properties (linger.ms, acks,
 * ...) make librdkafka log a warning on a consumer and are otherwise
 * ignored. NULL with the reason in errstr. The caller owns it (rd_kafka_new
 * takes it over on success).
 *
 * kafka_topic_name: "<prefix>.<suffix>" into buf; -ENAMETOOLONG.
 *
 * kafka_consumer_new: a consumer subscribed to <prefix>.<topic_suffix>,
 * in consumer group "<prefix>.agent.<host>" (one group per agent, so every
 * agent sees every message), auto.offset.reset=latest, offsets committed
 * automatically. The caller polls it (rd_kafka_consumer_poll(rk, 0) from
 * the loop tick, or rd_kafka_queue_io_event_enable() on
 * rd_kafka_queue_get_consumer() with a pipe registered by agent_watch_fd)
 * and destroys it (rd_kafka_consumer_close, rd_kafka_destroy). NULL with
 * the reason in errstr (also when --kafka is not set).
 */
rd_kafka_conf_t *kafka_conf_new(const struct agent_opts *o, const char *host, char *errstr,
				size_t errstr_sz);
int kafka_topic_name(const struct agent_opts *o, const char *suffix, char *buf, size_t sz);
rd_kafka_t *kafka_consumer_new(struct agent *a, const char *topic_suffix, char *errstr,
			       size_t errstr_sz);

/* the sink's state, for agentctl status and the metrics (NULL when no Kafka sink) */
struct kafka_sink_stats {
	const char *broker;	     /* "up", "down", "unknown" (nothing sent yet) */
	uint64_t produced;	     /* handed to the producer (spilled ones again when replayed) */
	uint64_t delivered;	     /* confirmed by the broker (acks=all) */
	uint64_t delivery_errors;    /* failed delivery reports, of which: */
	uint64_t not_persisted;	     /* certainly not written: given back to the spill */
	uint64_t possibly_persisted; /* maybe written: given back, may arrive twice */
	uint64_t requeued;	     /* failed or purged records given back to the spill */
	uint64_t permanent_errors;   /* refused for good (too large, unknown topic) */
	uint64_t queue;		     /* records in the producer now */
	uint64_t queue_max;
	uint64_t spilled;   /* records written to the spill */
	uint64_t replayed;  /* records read back from the spill and produced */
	uint64_t recovered; /* records found in the spill at start */
	uint64_t spill_bytes, spill_max_bytes, spill_records, spill_segments;
	uint64_t spill_torn; /* torn tails and corrupt stretches skipped */
	uint64_t spill_torn_bytes, spill_resynced;
	uint64_t spill_suspect; /* recovered behind a bad consumed offset: may arrive twice */
	uint64_t spill_foreign_records, spill_foreign_bytes; /* another owner's, left alone */
	uint64_t spill_discarded, spill_adopted;	     /* --spill-foreign discard, send */
	uint64_t spill_unsafe_dir;			     /* 1: others can write the directory */
	uint64_t spill_io_errors;
	uint64_t wal_errors;	    /* records the spill could not write (sent, not durable) */
	uint64_t producer_restarts; /* fatal errors and stalls */
	uint64_t dropped[REC_CLASS_COUNT]; /* never to be delivered, by class */
};
int kafka_sink_get_stats(struct agent *a, struct kafka_sink_stats *out);
/*
 * agentctl spill-foreign: the spill's segments of another owner, left
 * alone at start, sent with this run's settings (send) or deleted. 0,
 * -ENOENT without a Kafka sink, or -errno; *done says how many.
 */
struct spill_foreign_done;
int kafka_sink_spill_foreign(struct agent *a, bool send, struct spill_foreign_done *done);

#endif /* INFERTRACE_SINK_KAFKA_H */
