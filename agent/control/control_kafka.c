// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * control_kafka.c - fleet-wide deep-dive: every agent consumes
 * <prefix>.control (its own consumer group, so every agent sees every
 * message) and applies the deep_dive requests in it, the same JSON requests
 * as the control socket (control_proto.h), which `agentctl deep-dive
 * --kafka BROKERS` publishes keyed by instance.
 *
 * A request names an instance, not a node: each agent registers it, so the
 * node serving the instance switches its processes, and an agent that does
 * not serve it (yet) switches them if they appear before the deep-dive ends.
 * Other commands are refused on the topic (counted): status, export,
 * summary and the rest answer on the socket only.
 *
 * Polled from the loop tick (every <= 100 ms), at most CK_MAX_PER_TICK
 * messages per tick; librdkafka fetches on its own threads meanwhile.
 * Consumer creation: kafka_consumer_new() of the Kafka sink (sink_kafka.h),
 * so TLS/SASL (-X) apply here as to the producer.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "ops.h"
#include "control_proto.h"
#include "sink_kafka.h"

#define CK_MAX_PER_TICK 64

struct control_kafka {
	rd_kafka_t *rk;
	char topic[256];
	uint64_t messages, applied, malformed, refused, errors;
};

int control_kafka_init(struct agent *a)
{
	struct control_kafka *ck;
	char errstr[512];

	if (!a->opts.kafka)
		return 0;
	ck = calloc(1, sizeof(*ck));
	if (!ck)
		return -ENOMEM;
	kafka_topic_name(&a->opts, "control", ck->topic, sizeof(ck->topic));
	ck->rk = kafka_consumer_new(a, "control", errstr, sizeof(errstr));
	if (!ck->rk) {
		/* the sink still works: deep-dives by socket only */
		pr_warn("control topic %s: no consumer (%s); fleet-wide deep-dive is off",
			ck->topic, errstr);
		free(ck);
		return 0;
	}
	a->ops->ck = ck;
	pr_info("control topic %s: consuming deep-dive requests", ck->topic);
	return 0;
}

static void apply(struct agent *a, struct control_kafka *ck, const rd_kafka_message_t *m)
{
	struct ctl_request req;
	char why[160];
	int err;

	ck->messages++;
	if (ctl_parse_request(m->payload, m->len, &req, why, sizeof(why))) {
		ck->malformed++;
		pr_warn("control topic %s: malformed message at offset %lld: %s", ck->topic,
			(long long)m->offset, why);
		ctl_request_release(&req);
		return;
	}
	if (req.cmd != CTL_DEEP_DIVE) {
		ck->refused++;
		pr_debug("control topic: %s ignored (socket only)", ctl_cmd_name(req.cmd));
		ctl_request_release(&req);
		return;
	}
	if (req.off)
		err = deepdive_stop(a, req.instance, NULL);
	else
		err = deepdive_start(a, req.instance, req.duration_s, "kafka", NULL);
	if (err && err != -ENOENT) {
		ck->errors++;
		pr_warn("control topic: deep-dive %s %s: %s", req.instance, req.off ? "off" : "on",
			strerror(-err));
	} else {
		ck->applied++;
	}
	ctl_request_release(&req);
}

void control_kafka_poll(struct agent *a)
{
	struct control_kafka *ck = a->ops ? a->ops->ck : NULL;

	if (!ck)
		return;
	for (int i = 0; i < CK_MAX_PER_TICK; i++) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(ck->rk, 0);

		if (!m)
			break;
		if (m->err) {
			/* end of partition is informational; the rest is counted */
			if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
				ck->errors++;
				pr_debug("control topic: %s", rd_kafka_message_errstr(m));
			}
		} else {
			apply(a, ck, m);
		}
		rd_kafka_message_destroy(m);
	}
}

void control_kafka_stats(struct agent *a, json_t *obj)
{
	struct control_kafka *ck = a->ops ? a->ops->ck : NULL;

	if (!ck)
		return;
	json_object_set_new(obj, "control_topic",
			    json_pack("{s:s,s:I,s:I,s:I,s:I,s:I}", "topic", ck->topic, "messages",
				      (json_int_t)ck->messages, "applied", (json_int_t)ck->applied,
				      "malformed", (json_int_t)ck->malformed, "refused",
				      (json_int_t)ck->refused, "errors", (json_int_t)ck->errors));
}

void control_kafka_free(struct agent *a)
{
	struct control_kafka *ck = a->ops ? a->ops->ck : NULL;

	if (!ck)
		return;
	/* no group leave handshake: it could hold the exit while the broker is away */
	rd_kafka_destroy_flags(ck->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	free(ck);
	a->ops->ck = NULL;
}
