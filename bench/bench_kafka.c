// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * bench_kafka - the Kafka sink alone (agent/sinks/sink_kafka.c): how many records
 * per second it takes and delivers to a broker (the mock cluster of
 * build/tests/integration/kafka_mock in bench/bench_kafka.sh).
 *
 * usage: bench_kafka -b BROKERS -f JSONL -d SPILL_DIR [-n RECORDS] [-q QUEUE_MAX]
 *
 * The records are the lines of JSONL (a deep-mode replay: real sizes and
 * contents), sent round-robin until RECORDS, keyed by their instance, class
 * REC_EVENT. Every 10000 records the sink gets the flush(0) the event loop
 * gives it every interval. Prints one JSON line: records, value bytes per
 * record, the rate at which write() returned (enqueue) and the rate until
 * the broker confirmed the last one (delivered), and how many records went
 * through the spill. Figures only; never fails on a figure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "sink_kafka.h"

static struct agent agent; /* large: static */

int main(int argc, char **argv)
{
	const char *file = NULL, *dir = NULL;
	long n = 200000, qmax = 0;
	char **lines = NULL, *buf = NULL;
	size_t *lens = NULL, cap = 0, n_lines = 0, bytes = 0;
	struct kafka_sink_stats st;
	struct sink *s = NULL;
	uint64_t t0, t1, t2;
	FILE *f = NULL;
	ssize_t len;
	int opt, ret = 1;

	while ((opt = getopt(argc, argv, "b:f:d:n:q:")) != -1) {
		switch (opt) {
		case 'b':
			agent.opts.kafka = optarg;
			break;
		case 'f':
			file = optarg;
			break;
		case 'd':
			dir = optarg;
			break;
		case 'n':
			n = atol(optarg);
			break;
		case 'q':
			qmax = atol(optarg);
			break;
		default:
			goto usage;
		}
	}
	if (!agent.opts.kafka || !file || !dir || n < 1)
		goto usage;
	agent_log_set_level(LOG_WARN);
	snprintf(agent.host, sizeof(agent.host), "bench");
	agent.opts.spill_dir = dir;
	agent.opts.kafka_queue_max = qmax;
	agent.opts.flush_timeout_s = 120;
	/* every record goes out: sentinel mode would hold the events back */
	agent.opts.mode = MODE_DEEP;

	f = fopen(file, "r");
	if (!f) {
		fprintf(stderr, "bench_kafka: %s: %s\n", file, strerror(errno));
		return 1;
	}
	while ((len = getline(&buf, &cap, f)) > 0) {
		if (buf[len - 1] == '\n')
			buf[--len] = '\0';
		if (!len)
			continue;
		lines = realloc(lines, (n_lines + 1) * sizeof(*lines));
		lens = realloc(lens, (n_lines + 1) * sizeof(*lens));
		if (!lines || !lens)
			goto cleanup;
		lines[n_lines] = strdup(buf);
		lens[n_lines++] = len;
	}
	if (!n_lines) {
		fprintf(stderr, "bench_kafka: %s: no records\n", file);
		goto cleanup;
	}
	s = sink_kafka_open(&agent);
	if (!s)
		goto cleanup;
	agent.sinks[0] = s;
	agent.n_sinks = 1;

	t0 = now_ns();
	for (long i = 0; i < n; i++) {
		size_t k = i % n_lines;
		/* key: the record's instance, as rec_emit gives it */
		char key[128] = "bench", *p = strstr(lines[k], "\"instance\":\"");

		if (p) {
			p += 12;
			snprintf(key, sizeof(key), "%.*s", (int)strcspn(p, "\""), p);
		}
		s->write(s, REC_EVENT, key, lines[k], lens[k]);
		bytes += lens[k];
		if (i % 10000 == 9999)
			s->flush(s, 0);
	}
	t1 = now_ns();
	s->flush(s, 120000);
	t2 = now_ns();
	kafka_sink_get_stats(&agent, &st);
	printf("{\"records\":%ld,\"bytes_per_record\":%.1f,\"enqueue_per_s\":%.0f,"
	       "\"delivered_per_s\":%.0f,\"delivered\":%llu,\"through_spill\":%llu,"
	       "\"dropped\":%llu,\"queue_max\":%llu,\"mib_per_s\":%.1f}\n",
	       n, (double)bytes / n, n / ((t1 - t0) / 1e9), st.delivered / ((t2 - t0) / 1e9),
	       (unsigned long long)st.delivered, (unsigned long long)st.replayed,
	       (unsigned long long)(st.dropped[REC_EVENT]), (unsigned long long)st.queue_max,
	       bytes / ((t2 - t0) / 1e9) / (1 << 20));
	ret = st.delivered == (uint64_t)n ? 0 : 3;
cleanup:
	if (s)
		s->close(s);
	for (size_t i = 0; i < n_lines; i++)
		free(lines[i]);
	free(lines);
	free(lens);
	free(buf);
	if (f)
		fclose(f);
	return ret;
usage:
	fprintf(stderr, "usage: %s -b BROKERS -f JSONL -d SPILL_DIR [-n RECORDS] [-q QUEUE_MAX]\n",
		argv[0]);
	return 2;
}
