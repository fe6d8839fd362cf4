#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# The agent's Kafka topics read by a second, independent client: kafkajs
# (npm, tests/node/kafka_read.mjs), against librdkafka's mock cluster in its
# own process (no root: the records come from --replay of a recording in
# $INFERTRACE_DATA). Per topic and key, what kafkajs reads must be the JSON
# lines the agent wrote to --output, in order (kafka_lib.sh kafka_compare).
#
#   kafka_kafkajs_lz4    the default codec is LZ4: plain kafkajs refuses the
#                        batches ("LZ4 compression not implemented"), kafkajs
#                        with the lz4js codec of docs/operations.md reads all
#                        four topics
#   kafka_kafkajs_gzip   -X compression.codec=gzip: plain kafkajs reads all
#                        four topics
#   kafka_metrics_promtool  root: a live agent with --kafka and --metrics;
#                        promtool check metrics accepts the scrape, and every
#                        number of the stats record's kafka object is an
#                        infertrace_kafka_* sample (dropped_<class>_total:
#                        infertrace_kafka_dropped_total{class}), the
#                        families metrics.sh cannot see without Kafka
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"

NAMES="kafka_kafkajs_lz4 kafka_kafkajs_gzip kafka_metrics_promtool"
# shellcheck disable=SC2086
kafka_preflight $NAMES
NODE_DIR=$IT_ROOT/tests/node
if ! command -v node >/dev/null || [ ! -d "$NODE_DIR/node_modules/kafkajs" ] ||
	[ ! -d "$NODE_DIR/node_modules/lz4js" ]; then
	for n in $NAMES; do echo "FAIL $n: node or kafkajs/lz4js missing in $NODE_DIR/node_modules (make deps)"; done
	exit 0
fi
DATA=${INFERTRACE_DATA:-$IT_ROOT/../shared/data}
SMALL=$DATA/kineto/tracelens_hf_qwen1.5-0.5b_h100.json.gz
mock_start || { for n in $NAMES; do echo "FAIL $n: mock cluster did not start: $(head -c 300 "$T/mock.err")"; done; exit 0; }

# kafkajs_run NAME PREFIX [AGENT ARGS...]: the agent replays the recording
# to Kafka (topics PREFIX.*: $topics) and --output
kafkajs_run() {
	local name=$1 prefix=$2
	shift 2
	timeout 120 "$AGENT" --kafka "$BROKERS" --kafka-topic-prefix "$prefix" --spill-dir "$T/spill.$name" \
		-o "$T/$name.jsonl" --replay "$SMALL" --mode deep "$@" 2>"$T/$name.err"
	rc=$?
	expect "agent exit $rc: $(tail -c 300 "$T/$name.err")" eq "$rc" 0
	topics=("$prefix.steps" "$prefix.anomalies" "$prefix.events" "$prefix.stats")
}
# kafkajs_check NAME DUMP: kafkajs read every record of every topic
kafkajs_check() {
	local name=$1 dump=$2 t
	c=$(kafka_compare "$dump" exact "$T/$name.jsonl")
	expect_compare "$c"
	for t in "${topics[0]}" "${topics[2]}" "${topics[3]}"; do
		expect "kafkajs read nothing from $t: $(jq -c .kafka_by_topic <<<"$c")" \
			ge "$(jq --arg t "$t" '.kafka_by_topic[$t] // 0' <<<"$c")" 1
	done
	# anomalies: the recording may have none; kafkajs must see what kcat sees
	KTOPICS="${topics[1]}" kafka_dump "$T/$name.kcat"
	expect "kafkajs and kcat disagree on ${topics[1]}" \
		eq "$(jq --arg t "${topics[1]}" '.kafka_by_topic[$t] // 0' <<<"$c")" "$(wc -l <"$T/$name.kcat")"
}

# --------------------------------------------------------------------------
name=kafka_metrics_promtool
if [ "$(id -u)" -ne 0 ]; then
	skip $name "needs root (a live agent)"
elif ! command -v promtool >/dev/null; then
	echo "FAIL $name: promtool missing (make deps installs Debian's prometheus package)"
else
	started=
	agent_start_metrics kmetrics -i 0.25 --kafka "$BROKERS" --kafka-topic-prefix kmet \
		--spill-dir "$T/spill.kmet" --control-socket none --shim-socket none && started=1
	if [ -z "$started" ]; then
		fail_because "agent did not start: $(agent_tail)"
	else
		wait_record '.type == "stats" and .kafka.delivered_total > 0' 20 ||
			fail_because "no stats record with delivered Kafka records"
		body=$(curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics")
		lint=$(promtool check metrics <<<"$body" 2>&1)
		rc=$?
		expect "promtool check metrics: exit $rc: $(head -n 3 <<<"$lint" | tr '\n' ' ')" \
			eval '[ "$rc" = 0 ] && [ -z "$lint" ]'
		keys=$(jq -r 'select(.type == "stats" and .kafka != null) | .kafka | to_entries[]
			| select(.value | type == "number" or type == "boolean") | .key' "$AGENT_OUT" | sort -u)
		expect "no numbers in the stats record's kafka object" [ -n "$keys" ]
		for k in $keys; do
			case $k in
			dropped_*_total) m="infertrace_kafka_dropped_total{class=\"$(sed 's/^dropped_//; s/_total$//' <<<"$k")\"}" ;;
			*) m=infertrace_kafka_$k ;;
			esac
			grep -qF "$m " <<<"$body" || fail_because "no sample of $m"
		done
		agent_stop INT || fail_because "agent did not exit on SIGINT"
	fi
	report $name
fi

if [ ! -r "$SMALL" ]; then
	for n in kafka_kafkajs_lz4 kafka_kafkajs_gzip; do skip "$n" "recording not found: $SMALL"; done
	mock_stop
	exit 0
fi

# --------------------------------------------------------------------------
name=kafka_kafkajs_lz4
kafkajs_run lz4 kjs
node "$NODE_DIR/kafka_read.mjs" "$BROKERS" "${topics[@]}" >"$T/lz4.plain" 2>"$T/lz4.plain.err"
rc=$?
expect "plain kafkajs read the default codec (exit $rc): not LZ4?" eq "$rc" 1
expect "plain kafkajs failed otherwise: $(tail -c 300 "$T/lz4.plain.err")" \
	grep -q 'LZ4 compression not implemented' "$T/lz4.plain.err"
node "$NODE_DIR/kafka_read.mjs" "$BROKERS" "${topics[@]}" --lz4 >"$T/lz4.dump" 2>"$T/lz4.dump.err"
rc=$?
expect "kafkajs with the lz4js codec: exit $rc: $(tail -c 300 "$T/lz4.dump.err")" eq "$rc" 0
kafkajs_check lz4 "$T/lz4.dump"
report $name

# --------------------------------------------------------------------------
name=kafka_kafkajs_gzip
kafkajs_run gzip kgz -X compression.codec=gzip
node "$NODE_DIR/kafka_read.mjs" "$BROKERS" "${topics[@]}" >"$T/gzip.dump" 2>"$T/gzip.dump.err"
rc=$?
expect "plain kafkajs on gzip: exit $rc: $(tail -c 300 "$T/gzip.dump.err")" eq "$rc" 0
kafkajs_check gzip "$T/gzip.dump"
report $name
mock_stop
