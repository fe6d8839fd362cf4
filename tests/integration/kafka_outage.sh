#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# kafka_outage - the broker goes away for 60 s while the live agent produces
# (stats every 0.25 s, per-thread summaries of a CUDA workload, its single
# events), then comes back: every record the agent wrote to --output is in
# Kafka exactly once, in order, per topic and instance.
#
# The producer holds 50 records in memory (--kafka-queue-max), so the spill
# takes the rest; message.timeout.ms is 15 s (-X), so deliveries fail during
# the outage and the producer's queue goes back to the front of the spill,
# more than once. Reconnect backoffs are short (-X) so the test ends soon
# after the broker is back. About 80 s.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"

name=kafka_outage
kafka_preflight $name
it_preflight $name
OUTAGE=${KAFKA_OUTAGE_SECS:-60}

main() {
	local wpid c k
	mock_start || { fail_because "mock cluster did not start: $(head -c 300 "$T/mock.err")"; return; }
	bg_start "$T/work.out" "$CUDA_CALLS" -t 2 -s $((OUTAGE + 30))
	wpid=$BG_PID
	# single events from 2 ms: ~150/s (the mock keeps 5 MiB per partition)
	agent_start outage --pid "$wpid" -i 0.25 --no-net --kafka "$BROKERS" --spill-dir "$T/spill" \
		--offcpu-threshold 2 --syscall-threshold 2 --runq-threshold 2 \
		--kafka-queue-max 50 --flush-timeout 10 \
		-X message.timeout.ms=15000 -X reconnect.backoff.ms=100 -X reconnect.backoff.max.ms=1000 \
		-X retry.backoff.ms=100 ||
		{ fail_because "agent did not start: $(agent_tail)"; return; }
	sleep 4
	mock_down || { fail_because "mock did not set the broker down"; return; }
	sleep "$OUTAGE"
	mock_up || { fail_because "mock did not set the broker up"; return; }
	# a stats record after the outage with an empty spill; the exit sends the rest
	sleep 1
	wait_spill_empty "$AGENT_OUT" 40 || fail_because "spill not empty 40 s after the outage: kafka $(last_kafka "$AGENT_OUT" '{queue_records, spill_records, broker}' | tr -d '\n ')"
	agent_stop INT || { fail_because "agent did not exit on SIGINT"; return; }
	expect "agent exit $AGENT_RC: $(agent_tail)" eq "$AGENT_RC" 0
	kill "$wpid" 2>/dev/null

	kafka_dump "$T/dump"
	c=$(kafka_compare "$T/dump" exact "$AGENT_OUT")
	# sentinel: single events stay in --output and the flight recorder
	UNSENT_TYPES="cuda_launch cuda_sync cuda_code_load offcpu runq syscall tcp_retransmit" expect_compare "$c"
	k=$(jq -c 'select(.type == "stats" and .final) | .kafka' "$AGENT_OUT" | tail -n 1)
	expect "no summaries: $(jq -c .kafka_by_topic <<<"$c")" ge "$(jq '.kafka_by_topic["infertrace.steps"] // 0' <<<"$c")" 10
	# sentinel sends summaries and anomalies: the single events stay local
	expect "single events sent in sentinel mode: $(jq -c .kafka_by_topic <<<"$c")" eq "$(jq '.kafka_by_topic["infertrace.events"] // 0' <<<"$c")" 0
	expect "no single events held back: $k" ge "$(jq .sentinel_held_total <<<"$k")" 100
	expect "no stats records: $(jq -c .kafka_by_topic <<<"$c")" ge "$(jq '.kafka_by_topic["infertrace.stats"] // 0' <<<"$c")" $((OUTAGE * 4))
	expect "nothing spilled: $k" ge "$(jq .spilled_total <<<"$k")" 100
	expect "nothing replayed from the spill: $k" ge "$(jq .replayed_total <<<"$k")" 100
	expect "no delivery failed in a $OUTAGE s outage (message.timeout.ms 15 s): $k" ge "$(jq .requeued_total <<<"$k")" 1
	expect "records dropped: $k" eq "$(jq '.dropped_event_total + .dropped_summary_total + .dropped_anomaly_total + .dropped_stats_total' <<<"$k")" 0
	expect "agent did not report 0 left in the spill: $(grep 'kafka:.*delivered' "$AGENT_ERR")" \
		grep -q ' 0 left in the spill' "$AGENT_ERR"
}

main
report $name
mock_stop
