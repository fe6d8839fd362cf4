// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * sink_kafka.c - every record as a JSON value to Kafka, keyed by instance
 * (interface: sink_kafka.h; the path as a whole: docs/architecture.md,
 * "Kafka").
 *
 *   write() --> producer queue (librdkafka, --kafka-queue-max records)
 *                  |  QUEUE_FULL, or the spill holds anything
 *                  v
 *               spill (agent/sinks/spill.c, --spill-max-mib) --> shed by class
 *                  |  drained back into the producer when it has room
 *                  v
 *               broker (idempotent, acks=all) --> delivery report
 *
 * Order: once a record is in the spill, every later record goes behind it
 * until the spill is empty again. A delivery that fails for a reason that
 * passes (timeout, broker away) sends the producer's whole queue back to
 * the front of the spill, in delivery-report order, which is the order of
 * each partition; so one instance's records keep their order in each topic.
 *
 * Write-ahead: every record is written to the spill (into the kernel,
 * write(2)) before write() returns, and leaves the disk only when its
 * delivery is confirmed; when nothing waits in the spill it goes to the
 * producer at once, without being read back. So kill -9 at any moment loses
 * nothing that write() accepted: a restart resends what was not confirmed
 * (some of it may then arrive twice: the infertrace-id header of each
 * message, docs/events.md, lets a consumer drop the repeats).
 *
 * Recovery: reconnects are tried at least every second (librdkafka's
 * reconnect backoff grows to 10 s by default, which delayed delivery by up
 * to 10 s after an outage), and a producer that has records and gave no
 * delivery report for STALL_NS is replaced by a new one.
 */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/random.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "state.h"
#include "spill.h"
#include "sink_kafka.h"

#define SERVICE_EVERY 256 /* write() polls the producer this often */
#define PROBE_RECORDS 100 /* spilled records sent to find out if the broker is back */
#define PROBE_BACKOFF_NS 2000000000ull
#define SPILL_FLUSH_NS 100000000ull  /* spilled records reach the file within 100 ms */
#define DRAIN_BUDGET 20000	     /* records moved from the spill per call: bounded work */
#define STALL_NS 15000000000ull	     /* records held and no delivery report: a new producer */
#define STALL_MAX_NS 300000000000ull /* doubled while no report comes, up to this */
#define RID_HEADER "infertrace-id"   /* the record id header of every message */

enum broker_state { BROKER_UNKNOWN, BROKER_UP, BROKER_DOWN };
static const char *const broker_names[] = {"unknown", "up", "down"};

struct kafka_counters {
	uint64_t produced, delivered, delivery_errors, not_persisted, possibly_persisted;
	uint64_t requeued, permanent_errors, client_errors;
	uint64_t round_requeued;	/* since the last give_back() */
	uint64_t direct;		/* written ahead and handed to the producer at once */
	uint64_t restarts;		/* producers replaced (fatal error or stall) */
	uint64_t wal_errors;		/* records the spill could not write: sent without */
	uint64_t lost[REC_CLASS_COUNT]; /* permanent errors and spill I/O errors */
};

struct kafka_sink {
	struct sink s;
	struct agent *a;
	rd_kafka_t *rk;
	rd_kafka_topic_t *rkt[REC_CLASS_COUNT];
	struct spill *sp;
	int pfd[2];
	bool watched;
	bool evacuating; /* a delivery failed for a passing reason: give back the queue */
	bool fatal;	 /* the producer raised a fatal error: make a new one */
	enum broker_state broker;
	uint64_t probe_after;
	uint64_t last_flush;
	uint64_t last_report; /* the last delivery report, or the producer's start */
	uint64_t stall_ns;    /* no report for this long: a new producer */
	struct spill_id rid;  /* run id, and the number of the last record accepted */
	uint32_t queue_max;
	unsigned since_service;
	struct kafka_counters c;
	rd_kafka_resp_err_t last_perm_err;
};

static const char *const class_suffix[REC_CLASS_COUNT] = {
    [REC_EVENT] = "events",
    [REC_SUMMARY] = "steps",
    [REC_ANOMALY] = "anomalies",
    [REC_STATS] = "stats",
};

const char *kafka_class_suffix(enum rec_class cls)
{
	return cls < REC_CLASS_COUNT ? class_suffix[cls] : NULL;
}

int kafka_class_of_suffix(const char *suffix)
{
	for (int c = 0; c < REC_CLASS_COUNT; c++)
		if (!strcmp(suffix, class_suffix[c]))
			return c;
	return -1;
}

int kafka_topic_name(const struct agent_opts *o, const char *suffix, char *buf, size_t sz)
{
	const char *prefix = o->kafka_prefix ? o->kafka_prefix : KAFKA_PREFIX_DEFAULT;
	int n = snprintf(buf, sz, "%s.%s", prefix, suffix);

	return n < 0 || (size_t)n >= sz ? -ENAMETOOLONG : 0;
}

static int conf_set(rd_kafka_conf_t *conf, const char *k, const char *v, char *errstr,
		    size_t errstr_sz)
{
	if (rd_kafka_conf_set(conf, k, v, errstr, errstr_sz) != RD_KAFKA_CONF_OK)
		return -EINVAL;
	return 0;
}

/*
 * librdkafka's log lines through agent_log: debug, errors at level <= 2.
 * Called on librdkafka's threads unless log.queue is set (the producer sets
 * it); agent_log is one fprintf, safe from any thread.
 */
static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	(void)rk;
	if (level <= 2)
		pr_err("kafka: %s: %s", fac, buf);
	else
		pr_debug("kafka: %s: %s", fac, buf);
}

/* bootstrap.servers, client.id and every -X property, in order, onto conf */
static int conf_apply_user(rd_kafka_conf_t *conf, const struct agent_opts *o, const char *host,
			   char *errstr, size_t errstr_sz)
{
	char id[300];

	snprintf(id, sizeof(id), "infertrace-agent-%s", host ? host : "unknown");
	if (conf_set(conf, "bootstrap.servers", o->kafka, errstr, errstr_sz) ||
	    conf_set(conf, "client.id", id, errstr, errstr_sz))
		return -EINVAL;
	for (int i = 0; i < o->n_kafka_props; i++) {
		char kv[1024], *eq;

		snprintf(kv, sizeof(kv), "%s", o->kafka_props[i]);
		eq = strchr(kv, '=');
		if (!eq) {
			snprintf(errstr, errstr_sz, "-X %s: expected key=value", kv);
			return -EINVAL;
		}
		*eq = '\0';
		if (conf_set(conf, kv, eq + 1, errstr, errstr_sz))
			return -EINVAL;
	}
	return 0;
}

rd_kafka_conf_t *kafka_conf_new(const struct agent_opts *o, const char *host, char *errstr,
				size_t errstr_sz)
{
	rd_kafka_conf_t *conf;

	if (!o->kafka) {
		snprintf(errstr, errstr_sz, "--kafka is not set");
		return NULL;
	}
	conf = rd_kafka_conf_new();
	if (!conf) {
		snprintf(errstr, errstr_sz, "out of memory");
		return NULL;
	}
	if (conf_apply_user(conf, o, host, errstr, errstr_sz)) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	rd_kafka_conf_set_log_cb(conf, on_log);
	return conf;
}

rd_kafka_t *kafka_consumer_new(struct agent *a, const char *topic_suffix, char *errstr,
			       size_t errstr_sz)
{
	const struct agent_opts *o = agent_opts(a);
	rd_kafka_topic_partition_list_t *topics = NULL;
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk = NULL;
	rd_kafka_resp_err_t err;
	char topic[256], group[512];

	if (kafka_topic_name(o, topic_suffix, topic, sizeof(topic))) {
		snprintf(errstr, errstr_sz, "topic name too long");
		return NULL;
	}
	conf = kafka_conf_new(o, agent_host(a), errstr, errstr_sz);
	if (!conf)
		return NULL;
	snprintf(group, sizeof(group), "%s.agent.%s",
		 o->kafka_prefix ? o->kafka_prefix : KAFKA_PREFIX_DEFAULT, agent_host(a));
	if (conf_set(conf, "group.id", group, errstr, errstr_sz) ||
	    conf_set(conf, "auto.offset.reset", "latest", errstr, errstr_sz) ||
	    conf_set(conf, "enable.auto.commit", "true", errstr, errstr_sz)) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, errstr_sz);
	if (!rk) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	rd_kafka_poll_set_consumer(rk);
	topics = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(topics, topic, RD_KAFKA_PARTITION_UA);
	err = rd_kafka_subscribe(rk, topics);
	rd_kafka_topic_partition_list_destroy(topics);
	if (err) {
		snprintf(errstr, errstr_sz, "subscribe %s: %s", topic, rd_kafka_err2str(err));
		rd_kafka_destroy(rk);
		return NULL;
	}
	return rk;
}

/* ------------------------------------------------------------ producer -- */

/* failures that pass: the record goes back to the spill and is sent again */
static bool err_passes(rd_kafka_resp_err_t err)
{
	switch (err) {
	case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
	case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
	case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
	case RD_KAFKA_RESP_ERR__TIMED_OUT:
	case RD_KAFKA_RESP_ERR__TRANSPORT:
	case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
	case RD_KAFKA_RESP_ERR__FATAL:
	case RD_KAFKA_RESP_ERR__FENCED:
	case RD_KAFKA_RESP_ERR__DESTROY:
	case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
	case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
	case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
	case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
	case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
	case RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION:
	case RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER:
	case RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID:
	case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH:
		return true;
	default:
		return false;
	}
}

static void set_broker(struct kafka_sink *k, enum broker_state st, const char *why)
{
	if (k->broker == st)
		return;
	if (st == BROKER_DOWN)
		pr_warn(
		    "kafka: brokers unreachable (%s): records wait in memory, then in the spill",
		    why);
	else if (st == BROKER_UP && k->broker == BROKER_DOWN)
		pr_info("kafka: delivering again (%" PRIu64 " records in the spill)",
			spill_unread(k->sp));
	k->broker = st;
}

static void lose(struct kafka_sink *k, enum rec_class cls, rd_kafka_resp_err_t err)
{
	k->c.lost[cls]++;
	k->c.permanent_errors++;
	if (err != k->last_perm_err) {
		pr_err("kafka: a %s record cannot be delivered: %s (counted as dropped)",
		       class_suffix[cls], rd_kafka_err2str(err));
		k->last_perm_err = err;
	}
}

/* opaque of a message: class in the low 2 bits, spill ticket (0: none) above */
static void *msg_opaque(enum rec_class cls, uint64_t ticket)
{
	return (void *)(uintptr_t)((ticket << 2) | (unsigned)cls);
}

/* the record id of a message (its RID_HEADER: "<run, 16 hex>-<seq>"); {0, 0} if none */
static void rid_of(const rd_kafka_message_t *m, struct spill_id *rid)
{
	rd_kafka_headers_t *hdrs;
	const void *v;
	size_t len;
	char buf[48];

	memset(rid, 0, sizeof(*rid));
	if (rd_kafka_message_headers(m, &hdrs) ||
	    rd_kafka_header_get_last(hdrs, RID_HEADER, &v, &len) || len >= sizeof(buf))
		return;
	memcpy(buf, v, len);
	buf[len] = '\0';
	if (sscanf(buf, "%16" SCNx64 "-%" SCNu64, &rid->run, &rid->seq) != 2)
		memset(rid, 0, sizeof(*rid));
}

/* served by rd_kafka_poll() on the loop thread */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	struct kafka_sink *k = opaque;
	uintptr_t o = (uintptr_t)m->_private;
	enum rec_class cls = o & 3;
	uint64_t ticket = o >> 2;
	struct spill_id rid;
	int err;

	(void)rk;
	k->last_report = now_ns();
	if (!m->err) {
		k->stall_ns = STALL_NS;
		k->c.delivered++;
		set_broker(k, BROKER_UP, NULL);
		if (ticket)
			spill_done(k->sp, ticket);
		return;
	}
	k->c.delivery_errors++;
	if (rd_kafka_message_status(m) == RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED)
		k->c.possibly_persisted++;
	else
		k->c.not_persisted++;
	if (!err_passes(m->err)) {
		lose(k, cls, m->err);
	} else {
		/* back in front of everything unread, in report order */
		if (m->err != RD_KAFKA_RESP_ERR__PURGE_QUEUE &&
		    m->err != RD_KAFKA_RESP_ERR__PURGE_INFLIGHT)
			set_broker(k, BROKER_DOWN, rd_kafka_err2str(m->err));
		k->evacuating = true;
		rid_of(m, &rid);
		err = spill_prepend_id(k->sp, cls, &rid, m->key, m->key_len, m->payload, m->len);
		if (!err) {
			k->c.requeued++;
			k->c.round_requeued++;
		} else if (err != -ENOSPC && err != -E2BIG)
			k->c.lost[cls]++;
	}
	if (ticket)
		spill_done(k->sp, ticket);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	struct kafka_sink *k = opaque;
	char buf[256];

	k->c.client_errors++;
	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
		set_broker(k, BROKER_DOWN, reason);
	} else if (err == RD_KAFKA_RESP_ERR__FATAL) {
		rd_kafka_fatal_error(rk, buf, sizeof(buf));
		pr_err("kafka: producer failed: %s; starting a new one", buf);
		k->fatal = true;
	} else {
		pr_debug("kafka: %s: %s", rd_kafka_err2name(err), reason);
	}
}

static int produce(struct kafka_sink *k, enum rec_class cls, const struct spill_id *rid,
		   const char *key, size_t key_len, const char *val, size_t len, uint64_t ticket)
{
	char id[48];
	int n = snprintf(id, sizeof(id), "%016" PRIx64 "-%" PRIu64, rid->run, rid->seq);

	if (!rid->run) /* records of a format-1 spill have no id: no header */
		return rd_kafka_producev(
		    k->rk, RD_KAFKA_V_RKT(k->rkt[cls]), RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
		    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_VALUE((void *)val, len),
		    RD_KAFKA_V_KEY((void *)key, key_len),
		    RD_KAFKA_V_OPAQUE(msg_opaque(cls, ticket)), RD_KAFKA_V_END);
	return rd_kafka_producev(
	    k->rk, RD_KAFKA_V_RKT(k->rkt[cls]), RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
	    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_VALUE((void *)val, len),
	    RD_KAFKA_V_KEY((void *)key, key_len), RD_KAFKA_V_HEADER(RID_HEADER, id, n),
	    RD_KAFKA_V_OPAQUE(msg_opaque(cls, ticket)), RD_KAFKA_V_END);
}

/*
 * The queue was given back to the spill by the delivery reports: purge what
 * the producer still holds, so that all of it lands in the same place.
 * inflight: also what is on the wire (exit; it may then arrive twice).
 */
static void give_back(struct kafka_sink *k, bool inflight, int wait_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)wait_ms * 1000000;

	rd_kafka_purge(k->rk, RD_KAFKA_PURGE_F_QUEUE | (inflight ? RD_KAFKA_PURGE_F_INFLIGHT : 0));
	do
		rd_kafka_poll(k->rk, 10);
	while (rd_kafka_outq_len(k->rk) > 0 && inflight && now_ns() < deadline);
	rd_kafka_poll(k->rk, 0);
	spill_prepend_end(k->sp);
	spill_commit(k->sp);
	k->evacuating = false;
	k->probe_after = now_ns() + PROBE_BACKOFF_NS;
	if (k->c.round_requeued)
		pr_info("kafka: %" PRIu64 " undelivered records given back to the spill",
			k->c.round_requeued);
	k->c.round_requeued = 0;
}

/* spilled records back to the producer while it has room and the broker answers */
static void drain(struct kafka_sink *k)
{
	int outq = rd_kafka_outq_len(k->rk), limit, budget = DRAIN_BUDGET;
	struct spill_rec r;

	if (k->evacuating || k->fatal || !spill_unread(k->sp))
		return;
	if (k->broker == BROKER_UP) {
		limit = k->queue_max - k->queue_max / 4;
	} else {
		/* not known to answer: a few records, once the last ones came back */
		if (outq > 0 || now_ns() < k->probe_after)
			return;
		limit = PROBE_RECORDS;
		k->probe_after = now_ns() + PROBE_BACKOFF_NS;
	}
	while (outq < limit && budget-- > 0 && !spill_peek(k->sp, &r)) {
		int err = produce(k, r.cls, &r.rid, r.key, r.key_len, r.val, r.len, r.ticket);

		if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL)
			break;
		spill_take(k->sp);
		if (err) {
			lose(k, r.cls, err);
			spill_done(k->sp, r.ticket);
			continue;
		}
		k->c.produced++;
		outq++;
	}
}

static void producer_free(struct kafka_sink *k)
{
	for (int c = 0; c < REC_CLASS_COUNT; c++) {
		if (k->rkt[c])
			rd_kafka_topic_destroy(k->rkt[c]);
		k->rkt[c] = NULL;
	}
	if (k->rk)
		rd_kafka_destroy(k->rk);
	k->rk = NULL;
}

static int producer_new(struct kafka_sink *k)
{
	const struct agent_opts *o = agent_opts(k->a);
	char errstr[512], num[32], topic[256];
	rd_kafka_conf_t *conf;
	rd_kafka_queue_t *q;
	/* our defaults; -X properties are applied after them and win */
	const char *const defaults[][2] = {
	    {"enable.idempotence", "true"},
	    {"acks", "all"},
	    {"compression.codec", "lz4"},
	    {"linger.ms", "50"},
	    {"batch.num.messages", "10000"},
	    {"batch.size", "1000000"},
	    /* bounded: past it the record goes back to the spill */
	    {"message.timeout.ms", "120000"},
	    {"socket.keepalive.enable", "true"},
	    /*
	     * librdkafka doubles the wait between reconnects up to 10 s by
	     * default: after an outage the first try could come 10 s after the
	     * broker was back. Keep it near a second.
	     */
	    {"reconnect.backoff.ms", "100"},
	    {"reconnect.backoff.max.ms", "1000"},
	    /* Java-compatible key hashing: other clients agree on the partition */
	    {"partitioner", "murmur2_random"},
	    {"log.queue", "true"},
	};

	conf = rd_kafka_conf_new();
	if (!conf)
		return -ENOMEM;
	snprintf(num, sizeof(num), "%u", k->queue_max);
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++)
		if (conf_set(conf, defaults[i][0], defaults[i][1], errstr, sizeof(errstr)))
			goto fail_conf;
	if (conf_set(conf, "queue.buffering.max.messages", num, errstr, sizeof(errstr)) ||
	    conf_apply_user(conf, o, agent_host(k->a), errstr, sizeof(errstr)))
		goto fail_conf;
	rd_kafka_conf_set_opaque(conf, k);
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rd_kafka_conf_set_error_cb(conf, on_error);
	rd_kafka_conf_set_log_cb(conf, on_log);
	k->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (!k->rk)
		goto fail_conf;
	k->last_report = now_ns();
	/* logs to the main queue: served by rd_kafka_poll on our thread */
	rd_kafka_set_log_queue(k->rk, NULL);
	for (int c = 0; c < REC_CLASS_COUNT; c++) {
		const char *name = o->kafka_topics[c];

		if (!name) {
			if (kafka_topic_name(o, class_suffix[c], topic, sizeof(topic))) {
				snprintf(errstr, sizeof(errstr), "topic prefix too long");
				goto fail;
			}
			name = topic;
		}
		k->rkt[c] = rd_kafka_topic_new(k->rk, name, NULL);
		if (!k->rkt[c]) {
			snprintf(errstr, sizeof(errstr), "topic %s: %s", name,
				 rd_kafka_err2str(rd_kafka_last_error()));
			goto fail;
		}
	}
	/* the loop wakes when a delivery report, error or log line is queued */
	q = rd_kafka_queue_get_main(k->rk);
	rd_kafka_queue_io_event_enable(q, k->pfd[1], "k", 1);
	rd_kafka_queue_destroy(q);
	return 0;
fail_conf:
	rd_kafka_conf_destroy(conf);
fail:
	pr_err("kafka: producer for %s: %s", o->kafka, errstr);
	producer_free(k);
	return -EINVAL;
}

/* poll, give back after a failure, refill from the spill, keep the spill current */
static void service(struct kafka_sink *k, int timeout_ms)
{
	uint64_t now;

	k->since_service = 0;
	rd_kafka_poll(k->rk, timeout_ms);
	if (k->evacuating)
		give_back(k, false, 0);
	now = now_ns();
	if (!k->fatal && rd_kafka_outq_len(k->rk) > 0 && now - k->last_report > k->stall_ns) {
		/*
		 * held records and no report, success or failure: do not trust
		 * this producer. In a long outage this repeats, ever less often.
		 */
		pr_warn("kafka: %d records in the producer and no delivery report in %llu s: "
			"starting a new producer",
			rd_kafka_outq_len(k->rk),
			(unsigned long long)(k->stall_ns / 1000000000ull));
		k->stall_ns = k->stall_ns * 2 < STALL_MAX_NS ? k->stall_ns * 2 : STALL_MAX_NS;
		k->fatal = true;
	}
	if (k->fatal) {
		give_back(k, true, 1000);
		producer_free(k);
		k->fatal = false;
		k->broker = BROKER_UNKNOWN;
		k->c.restarts++;
		if (producer_new(k))
			pr_err("kafka: no producer: records go to the spill only");
	}
	if (k->rk)
		drain(k);
	spill_commit(k->sp);
	now = now_ns();
	if (now - k->last_flush >= SPILL_FLUSH_NS) {
		spill_flush(k->sp);
		k->last_flush = now;
	}
}

static void on_fd(struct agent *a, void *ctx)
{
	struct kafka_sink *k = ctx;
	char buf[64];

	(void)a;
	while (read(k->pfd[0], buf, sizeof(buf)) > 0)
		;
	if (k->rk)
		service(k, 0);
}

static int kafka_write(struct sink *s, enum rec_class cls, const char *key, const char *json,
		       size_t len)
{
	struct kafka_sink *k = s->priv;
	size_t key_len = key ? strlen(key) : 0;
	uint64_t ticket = 0, *want = NULL;
	int err, perr;

	if (cls >= REC_CLASS_COUNT)
		return -EINVAL;
	/* what sentinel holds back is decided before (s->remote, route.c) */
	/* replay writes without a loop: poll from here */
	if (++k->since_service >= SERVICE_EVERY && k->rk)
		service(k, 0);
	s->written++;
	k->rid.seq++;
	/* write-ahead; straight on to the producer when nothing waits and it has room */
	if (k->rk && !k->evacuating && !k->fatal && rd_kafka_outq_len(k->rk) < (int)k->queue_max)
		want = &ticket;
	err = spill_append_id(k->sp, cls, &k->rid, key, key_len, json, len, want);
	if (err == -ENOSPC || err == -E2BIG)
		return 0; /* shed, counted by class */
	if (!err && !ticket)
		return 0; /* waits in the spill, drained in order */
	if (err) {
		/* the spill cannot write: the producer still may (not durable), counted */
		k->c.wal_errors++;
		if (!k->rk) {
			k->c.lost[cls]++;
			return err;
		}
	}
	perr = produce(k, cls, &k->rid, key, key_len, json, len, ticket);
	if (!perr) {
		k->c.produced++;
		if (ticket)
			k->c.direct++;
		return 0;
	}
	if (ticket && perr == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
		/* it was the only record waiting: back to the front, in its turn */
		if (!spill_prepend_id(k->sp, cls, &k->rid, key, key_len, json, len))
			k->c.requeued++;
		spill_prepend_end(k->sp);
		spill_done(k->sp, ticket);
		return 0;
	}
	if (ticket) {
		spill_done(k->sp, ticket); /* refused for good: counted below */
	} else if (perr == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
		k->c.lost[cls]++; /* no spill, no room */
		return -EIO;
	}
	lose(k, cls, perr);
	s->errors++;
	return -EIO;
}

static bool all_sent(struct kafka_sink *k)
{
	return !spill_unread(k->sp) && (!k->rk || rd_kafka_outq_len(k->rk) == 0);
}

/* 0: an interval tick; > 0: the exit wait, until all is delivered or timeout_ms */
static int kafka_flush(struct sink *s, int timeout_ms)
{
	struct kafka_sink *k = s->priv;
	uint64_t deadline = now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000;

	if (k->rk)
		service(k, 0);
	while (timeout_ms > 0 && k->rk && !all_sent(k) && now_ns() < deadline)
		service(k, 50);
	return spill_sync(k->sp);
}

static uint64_t dropped_total(const struct kafka_sink *k, const struct spill_stats *st)
{
	uint64_t n = 0;

	for (int c = 0; c < REC_CLASS_COUNT; c++)
		n += k->c.lost[c] + st->refused[c] + st->evicted[c];
	return n;
}

static void kafka_close(struct sink *s)
{
	struct kafka_sink *k;
	struct spill_stats st;

	if (!s)
		return;
	k = s->priv;
	if (k->rk) {
		/* what the producer still holds goes back to the spill */
		if (rd_kafka_outq_len(k->rk) > 0 || k->evacuating)
			give_back(k, true, 2000);
		rd_kafka_queue_t *q = rd_kafka_queue_get_main(k->rk);

		rd_kafka_queue_io_event_enable(q, -1, NULL, 0);
		rd_kafka_queue_destroy(q);
	}
	if (k->sp) {
		spill_get_stats(k->sp, &st);
		pr_info("kafka: %" PRIu64 " records delivered (%" PRIu64
			" through the spill), %" PRIu64 " dropped, %" PRIu64
			" left in the spill for the next start",
			k->c.delivered, st.replayed, dropped_total(k, &st), st.records);
	}
	if (k->watched)
		agent_unwatch_fd(k->a, k->pfd[0]);
	producer_free(k);
	spill_close(k->sp);
	for (int i = 0; i < 2; i++)
		if (k->pfd[i] >= 0)
			close(k->pfd[i]);
	free(k);
}

static struct kafka_sink *kafka_of(struct agent *a)
{
	for (int i = 0; i < a->n_sinks; i++)
		if (a->sinks[i] && a->sinks[i]->close == kafka_close)
			return a->sinks[i]->priv;
	return NULL;
}

int kafka_sink_spill_foreign(struct agent *a, bool send, struct spill_foreign_done *done)
{
	struct kafka_sink *k = kafka_of(a);
	int err;

	memset(done, 0, sizeof(*done));
	if (!k || !k->sp)
		return -ENOENT;
	err = spill_foreign_apply(k->sp, send ? SPILL_FOREIGN_ADOPT : SPILL_FOREIGN_DISCARD, done);
	pr_info("kafka: spill: %" PRIu64 " records of another owner %s (%" PRIu64
		" segment files)%s%s",
		send ? done->adopted : done->discarded,
		send ? "to be sent with this run's settings" : "deleted", done->segments,
		err ? ": " : "", err ? strerror(-err) : "");
	if (send && done->adopted && k->rk)
		drain(k); /* they are read first */
	return err;
}

int kafka_sink_get_stats(struct agent *a, struct kafka_sink_stats *out)
{
	struct kafka_sink *k = kafka_of(a);
	struct spill_stats st;

	memset(out, 0, sizeof(*out));
	if (!k)
		return -ENOENT;
	spill_get_stats(k->sp, &st);
	out->broker = broker_names[k->broker];
	out->produced = k->c.produced;
	out->delivered = k->c.delivered;
	out->delivery_errors = k->c.delivery_errors;
	out->not_persisted = k->c.not_persisted;
	out->possibly_persisted = k->c.possibly_persisted;
	out->requeued = k->c.requeued;
	out->permanent_errors = k->c.permanent_errors;
	out->queue = k->rk ? rd_kafka_outq_len(k->rk) : 0;
	out->queue_max = k->queue_max;
	/* prepends are records given back, not new ones */
	out->spilled = st.appended - k->c.requeued - k->c.direct;
	out->replayed = st.replayed;
	out->recovered = st.recovered;
	out->spill_bytes = st.bytes;
	out->spill_max_bytes = st.max_bytes;
	out->spill_records = st.records;
	out->spill_segments = st.segments;
	out->spill_torn = st.torn;
	out->spill_io_errors = st.io_errors;
	out->spill_torn_bytes = st.torn_bytes;
	out->spill_resynced = st.resynced;
	out->spill_suspect = st.suspect;
	out->spill_foreign_records = st.foreign_records;
	out->spill_foreign_bytes = st.foreign_bytes;
	out->spill_discarded = st.discarded;
	out->spill_adopted = st.adopted;
	out->spill_unsafe_dir = st.unsafe_dir;
	out->wal_errors = k->c.wal_errors;
	out->producer_restarts = k->c.restarts;
	for (int c = 0; c < REC_CLASS_COUNT; c++)
		out->dropped[c] = k->c.lost[c] + st.refused[c] + st.evicted[c];
	return 0;
}

/* the numeric members of the "kafka" object, in their order (docs/events.md) */
#define KS(name, member)                                                                           \
	{                                                                                          \
		name, offsetof(struct kafka_sink_stats, member)                                    \
	}
static const struct {
	const char *name;
	size_t off;
} kafka_counters[] = {
    KS("queue_records", queue),
    KS("queue_max", queue_max),
    KS("spilled_total", spilled),
    KS("replayed_total", replayed),
    KS("recovered_total", recovered),
    KS("spill_bytes", spill_bytes),
    KS("spill_max_bytes", spill_max_bytes),
    KS("spill_records", spill_records),
    KS("spill_segments", spill_segments),
    KS("spill_torn_total", spill_torn),
    KS("spill_io_errors_total", spill_io_errors),
    KS("spill_torn_bytes_total", spill_torn_bytes),
    KS("spill_resynced_total", spill_resynced),
    KS("spill_suspect_total", spill_suspect),
    KS("spill_foreign_records", spill_foreign_records),
    KS("spill_foreign_bytes", spill_foreign_bytes),
    KS("spill_discarded_total", spill_discarded),
    KS("spill_adopted_total", spill_adopted),
    KS("spill_unsafe_dir", spill_unsafe_dir),
    KS("wal_errors_total", wal_errors),
    KS("producer_restarts_total", producer_restarts),
    KS("dropped_event_total", dropped[REC_EVENT]),
    KS("dropped_summary_total", dropped[REC_SUMMARY]),
    KS("dropped_anomaly_total", dropped[REC_ANOMALY]),
    KS("dropped_stats_total", dropped[REC_STATS]),
};
#undef KS

static json_t *ks_int(uint64_t v)
{
	return json_integer((json_int_t)v);
}

/* the "kafka" object of the stats record (docs/events.md); flat, for the metrics */
static void kafka_stats(struct sink *s, json_t *rec)
{
	struct kafka_sink *k = s->priv;
	struct kafka_sink_stats x;
	json_t *o;

	if (kafka_sink_get_stats(k->a, &x))
		return;
	o = json_object();
	json_object_set_new(o, "broker", json_string(x.broker));
	json_object_set_new(o, "broker_up", json_integer(k->broker == BROKER_UP));
	json_object_set_new(o, "produced_total", ks_int(x.produced));
	json_object_set_new(o, "delivered_total", ks_int(x.delivered));
	json_object_set_new(o, "delivery_errors_total", ks_int(x.delivery_errors));
	json_object_set_new(o, "not_persisted_total", ks_int(x.not_persisted));
	json_object_set_new(o, "possibly_persisted_total", ks_int(x.possibly_persisted));
	json_object_set_new(o, "requeued_total", ks_int(x.requeued));
	json_object_set_new(o, "permanent_errors_total", ks_int(x.permanent_errors));
	json_object_set_new(o, "client_errors_total", ks_int(k->c.client_errors));
	json_object_set_new(o, "sentinel_held_total", ks_int(s->held));
	for (size_t i = 0; i < sizeof(kafka_counters) / sizeof(kafka_counters[0]); i++)
		json_object_set_new(
		    o, kafka_counters[i].name,
		    ks_int(*(const uint64_t *)((const char *)&x + kafka_counters[i].off)));
	json_object_set_new(rec, "kafka", o);
}

/*
 * Whose records the spill holds: the bootstrap servers and the four topics
 * (prefix included). A start with other settings leaves them alone.
 */
static void spill_owner(const struct agent_opts *o, char *buf, size_t sz)
{
	size_t n = snprintf(buf, sz, "bootstrap=%s topics=", o->kafka);

	for (int c = 0; c < REC_CLASS_COUNT && n < sz; c++) {
		char topic[256];
		const char *name = o->kafka_topics[c];

		if (!name && !kafka_topic_name(o, class_suffix[c], topic, sizeof(topic)))
			name = topic;
		n += snprintf(buf + n, sz - n, "%s%s", c ? "," : "", name ? name : "?");
	}
}

struct sink *sink_kafka_open(struct agent *a)
{
	const struct agent_opts *o = agent_opts(a);
	char owner[2048];
	/* a replay's records are not the live agent's: a spill of its own */
	const char *dir = o->spill_dir ? o->spill_dir
			  : o->replay  ? SPILL_DIR_REPLAY_DEFAULT
				       : SPILL_DIR_DEFAULT;
	struct spill_opts so = {
	    .sz = sizeof(so),
	    .dir = dir,
	    .max_bytes = (uint64_t)(o->spill_max_mib ? o->spill_max_mib : SPILL_MAX_MIB_DEFAULT)
			 << 20,
	    .owner = owner,
	    .foreign = o->spill_foreign,
	    .write_through = true,
	};
	struct kafka_sink *k = calloc(1, sizeof(*k));
	int err;

	if (!k) {
		errno = ENOMEM;
		return NULL;
	}
	k->a = a;
	k->pfd[0] = k->pfd[1] = -1;
	k->queue_max = o->kafka_queue_max ? o->kafka_queue_max : KAFKA_QUEUE_MAX_DEFAULT;
	k->last_flush = now_ns();
	k->stall_ns = STALL_NS;
	k->s.name = "kafka";
	k->s.remote = true; /* sentinel holds single events back (route.c) */
	k->s.write = kafka_write;
	k->s.flush = kafka_flush;
	k->s.close = kafka_close;
	k->s.stats = kafka_stats;
	k->s.priv = k;
	/* the run id of the record ids: random, never 0 */
	while (!k->rid.run)
		if (getrandom(&k->rid.run, sizeof(k->rid.run), 0) != sizeof(k->rid.run))
			k->rid.run = now_ns() ^ ((uint64_t)getpid() << 32);
	spill_owner(o, owner, sizeof(owner));
	k->sp = spill_open(&so);
	if (!k->sp) {
		err = -errno;
		pr_err("kafka: spill %s: %s", so.dir, strerror(-err));
		goto fail;
	}
	if (pipe2(k->pfd, O_NONBLOCK | O_CLOEXEC)) {
		err = -errno;
		pr_err("kafka: pipe: %s", strerror(-err));
		goto fail;
	}
	err = producer_new(k);
	if (err)
		goto fail;
	err = agent_watch_fd(a, k->pfd[0], on_fd, k);
	if (err) {
		pr_err("kafka: event loop: %s", strerror(-err));
		goto fail;
	}
	k->watched = true;
	pr_info("kafka: producing to %s (topics %s.*), spill %s (%u MiB)", o->kafka,
		o->kafka_prefix ? o->kafka_prefix : KAFKA_PREFIX_DEFAULT, so.dir,
		(unsigned)(so.max_bytes >> 20));
	return &k->s;
fail:
	kafka_close(&k->s);
	errno = -err;
	return NULL;
}
