// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * kafka_reconnect - a plain librdkafka producer, nothing of the agent: one
 * message every 10 ms to topic "plain.t" for SECS seconds, then a flush.
 * Prints "gap FROM TO" (CLOCK_REALTIME seconds) for every pause of more
 * than 0.5 s between two successful delivery reports, and "end outq N".
 * bench/kafka_reconnect.sh sets the mock cluster's broker down and up
 * meanwhile: how long after the broker is back does delivery resume, with
 * librdkafka's default reconnect backoff and with the agent's?
 *
 * usage: kafka_reconnect BOOTSTRAP SECS [KEY=VALUE]...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <librdkafka/rdkafka.h>

static double last_ok;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	double t = now();

	(void)rk;
	(void)opaque;
	if (m->err)
		return;
	if (last_ok && t - last_ok > 0.5)
		printf("gap %.3f %.3f\n", last_ok, t);
	last_ok = t;
}

int main(int argc, char **argv)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char errstr[512];
	double end;
	rd_kafka_t *rk;
	int i = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: %s BOOTSTRAP SECS [KEY=VALUE]...\n", argv[0]);
		return 2;
	}
	if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], errstr, sizeof(errstr)))
		goto bad;
	for (int a = 3; a < argc; a++) {
		char kv[256], *eq;

		snprintf(kv, sizeof(kv), "%s", argv[a]);
		eq = strchr(kv, '=');
		if (!eq) {
			fprintf(stderr, "%s: expected KEY=VALUE\n", kv);
			return 2;
		}
		*eq = '\0';
		if (rd_kafka_conf_set(conf, kv, eq + 1, errstr, sizeof(errstr)))
			goto bad;
	}
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (!rk)
		goto bad;
	end = now() + atof(argv[2]);
	while (now() < end) {
		char v[32];
		int l = snprintf(v, sizeof(v), "m%d", i++);

		rd_kafka_producev(rk, RD_KAFKA_V_TOPIC("plain.t"), RD_KAFKA_V_VALUE(v, l),
				  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
		rd_kafka_poll(rk, 10);
	}
	rd_kafka_flush(rk, 10000);
	printf("end outq %d\n", rd_kafka_outq_len(rk));
	rd_kafka_destroy(rk);
	return 0;
bad:
	fprintf(stderr, "kafka_reconnect: %s\n", errstr);
	rd_kafka_conf_destroy(conf);
	return 2;
}
