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
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"

NAMES="kafka_kafkajs_lz4 kafka_kafkajs_gzip"
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
if [ ! -r "$SMALL" ]; then
	for n in $NAMES; do skip "$n" "recording not found: $SMALL"; done
	exit 0
fi
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
