// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * kafka_mock - librdkafka's mock Kafka cluster (rdkafka_mock.h) in a process
 * of its own, on loopback, for tests/integration/kafka*.sh and
 * bench/bench_kafka.sh. It speaks the real protocol: the agent's producer
 * and kcat talk to it as to a broker.
 *
 * usage: kafka_mock [-b BROKERS] [-p PARTITIONS] [-t TOPIC]...
 *   -b  brokers in the cluster (default 1)
 *   -p  partitions of the topics named with -t (default 4)
 *   -t  create TOPIC up front (repeatable); other topics are created on
 *       first use with the mock's defaults
 *
 * Prints "bootstrap=HOST:PORT,..." on stdout once it listens, then reads
 * commands on stdin, one a line, answering "ok ..." or "error ...":
 *   down [ID]   set broker ID (default: every broker) down: connections are
 *               closed and new ones refused
 *   up [ID]     and up again
 *   rtt MS [ID] add MS of round-trip time
 *   quit        (also SIGINT, SIGTERM; the end of stdin is not a quit)
 * SIGUSR1 and SIGUSR2 set every broker down and up, for scripts without a
 * pipe to stdin.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

static volatile sig_atomic_t quit, want_down, want_up;

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		want_down = 1;
	else if (sig == SIGUSR2)
		want_up = 1;
	else
		quit = 1;
}

static int set_state(rd_kafka_mock_cluster_t *mc, int n_brokers, int id, int up)
{
	rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;

	for (int b = 1; b <= n_brokers; b++) {
		if (id > 0 && b != id)
			continue;
		err =
		    up ? rd_kafka_mock_broker_set_up(mc, b) : rd_kafka_mock_broker_set_down(mc, b);
		if (err)
			break;
	}
	if (err)
		printf("error %s: %s\n", up ? "up" : "down", rd_kafka_err2str(err));
	else
		printf("ok %s %d\n", up ? "up" : "down", id);
	fflush(stdout);
	return err ? -EINVAL : 0;
}

static void command(rd_kafka_mock_cluster_t *mc, int n_brokers, char *line)
{
	char cmd[32];
	int a = -1, b = -1;
	int n = sscanf(line, "%31s %d %d", cmd, &a, &b);

	if (n < 1)
		return;
	if (!strcmp(cmd, "down")) {
		set_state(mc, n_brokers, n > 1 ? a : -1, 0);
	} else if (!strcmp(cmd, "up")) {
		set_state(mc, n_brokers, n > 1 ? a : -1, 1);
	} else if (!strcmp(cmd, "rtt") && n > 1) {
		for (int id = 1; id <= n_brokers; id++)
			if (n < 3 || id == b)
				rd_kafka_mock_broker_set_rtt(mc, id, a);
		printf("ok rtt %d\n", a);
	} else if (!strcmp(cmd, "quit")) {
		quit = 1;
	} else {
		printf("error unknown command: %s\n", cmd);
	}
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *topics[64];
	int n_topics = 0, n_brokers = 1, parts = 4, opt, ret = 1;
	struct sigaction sa = {.sa_handler = on_signal};
	rd_kafka_mock_cluster_t *mc = NULL;
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk = NULL;
	char errstr[256], line[256];
	size_t used = 0;
	bool eof = false;

	while ((opt = getopt(argc, argv, "b:p:t:")) != -1) {
		switch (opt) {
		case 'b':
			n_brokers = atoi(optarg);
			break;
		case 'p':
			parts = atoi(optarg);
			break;
		case 't':
			if (n_topics < 64)
				topics[n_topics++] = optarg;
			break;
		default:
			fprintf(stderr, "usage: %s [-b BROKERS] [-p PARTITIONS] [-t TOPIC]...\n",
				argv[0]);
			return 2;
		}
	}
	if (n_brokers < 1 || n_brokers > 16 || parts < 1 || parts > 1024) {
		fprintf(stderr, "kafka_mock: -b takes 1..16, -p 1..1024\n");
		return 2;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* the cluster lives in (and on the threads of) a client instance */
	conf = rd_kafka_conf_new();
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (!rk) {
		fprintf(stderr, "kafka_mock: %s\n", errstr);
		rd_kafka_conf_destroy(conf);
		return 1;
	}
	mc = rd_kafka_mock_cluster_new(rk, n_brokers);
	if (!mc) {
		fprintf(stderr, "kafka_mock: cannot create the mock cluster\n");
		goto cleanup;
	}
	for (int i = 0; i < n_topics; i++) {
		rd_kafka_resp_err_t err =
		    rd_kafka_mock_topic_create(mc, topics[i], parts, n_brokers < 3 ? n_brokers : 3);

		if (err) {
			fprintf(stderr, "kafka_mock: topic %s: %s\n", topics[i],
				rd_kafka_err2str(err));
			goto cleanup;
		}
	}
	printf("bootstrap=%s\n", rd_kafka_mock_cluster_bootstraps(mc));
	fflush(stdout);

	while (!quit) {
		struct pollfd p = {.fd = 0, .events = POLLIN};
		int n = eof ? poll(NULL, 0, 100) : poll(&p, 1, 100);

		if (want_down) {
			want_down = 0;
			set_state(mc, n_brokers, -1, 0);
		}
		if (want_up) {
			want_up = 0;
			set_state(mc, n_brokers, -1, 1);
		}
		if (n <= 0 || eof || !(p.revents & (POLLIN | POLLHUP)))
			continue;
		ssize_t r = read(0, line + used, sizeof(line) - 1 - used);

		if (r <= 0) {
			/* stdin closed: keep serving (scripts may background us with </dev/null) */
			eof = true;
			continue;
		}
		used += r;
		line[used] = '\0';
		for (char *nl; (nl = strchr(line, '\n'));) {
			*nl = '\0';
			command(mc, n_brokers, line);
			used -= nl + 1 - line;
			memmove(line, nl + 1, used + 1);
		}
		if (used == sizeof(line) - 1)
			used = 0; /* a line too long: dropped */
	}
	ret = 0;
cleanup:
	if (mc)
		rd_kafka_mock_cluster_destroy(mc);
	rd_kafka_destroy(rk);
	return ret;
}
