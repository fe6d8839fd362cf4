# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# shellcheck shell=bash
#
# tests/integration/kafka_lib.sh - helpers of the Kafka tests (kafka*.sh),
# sourced after lib.sh. Run on its own (tests/run.sh runs every *.sh) it
# does nothing.
#
# A test starts librdkafka's mock cluster in its own process
# (build/tests/integration/kafka_mock, on loopback), runs the agent with
# --kafka and --output (both sinks get the same records, in the same
# order), reads every topic back with kcat and compares: per topic and key,
# the values in Kafka must be the JSON lines of the file, in file order.
[ "${BASH_SOURCE[0]}" = "$0" ] && exit 0

KAFKA_MOCK=$BUILD/tests/integration/kafka_mock
KTOPICS="infertrace.steps infertrace.anomalies infertrace.events infertrace.stats"
MOCK_PID=
BROKERS=

# kafka_preflight NAME...: SKIP (or FAIL when something of ours is missing)
# every name when the tests cannot run here
kafka_preflight() {
	local why= fail= n
	if ! command -v kcat >/dev/null; then
		why="kcat missing (make deps)"
	elif ! command -v jq >/dev/null; then
		why="jq missing (make deps)"
	elif [ ! -x "$AGENT" ]; then
		fail="$AGENT not built"
	elif [ ! -x "$KAFKA_MOCK" ]; then
		fail="$KAFKA_MOCK not built (make test builds it)"
	fi
	[ -z "$why$fail" ] && return 0
	for n in "$@"; do
		if [ -n "$fail" ]; then echo "FAIL $n: $fail"; else skip "$n" "$why"; fi
	done
	exit 0
}

# mock_start: a cluster of one broker with the four topics (4 partitions
# each); BROKERS is its bootstrap address, MOCK_PID its pid. SIGUSR1 sets
# the broker down, SIGUSR2 up again.
mock_start() {
	local t args=()
	for t in $KTOPICS "$@"; do args+=(-t "$t"); done
	# emptied here: the child truncates it only once it runs, and the loop
	# below must not read an earlier mock's address
	: >"$T/mock.out"
	"$KAFKA_MOCK" -p 4 "${args[@]}" </dev/null >"$T/mock.out" 2>"$T/mock.err" &
	mock_started $!
}
mock_started() { # mock_started PID: keep the pid, wait for the bootstrap address
	local i
	MOCK_PID=$1
	_it_pids+=("$MOCK_PID")
	for ((i = 0; i < 100; i++)); do
		BROKERS=$(sed -n 's/^bootstrap=//p' "$T/mock.out")
		[ -n "$BROKERS" ] && return 0
		sleep 0.05
	done
	return 1
}
mock_cmd() { # mock_cmd down|up: signal the mock, wait for its "ok" line
	local n i sig=USR2
	[ "$1" = down ] && sig=USR1
	n=$(grep -c "^ok $1" "$T/mock.out")
	kill -"$sig" "$MOCK_PID" 2>/dev/null ||
		{ echo "kafka_mock is gone: $(tail -c 300 "$T/mock.err")" >&2; return 1; }
	for ((i = 0; i < 200; i++)); do
		[ "$(grep -c "^ok $1" "$T/mock.out")" -gt "$n" ] && return 0
		sleep 0.05
	done
	echo "kafka_mock did not confirm '$1' in 10 s: $(tail -c 300 "$T/mock.out")" >&2
	return 1
}
mock_down() { mock_cmd down; }
# mock_start_ctl [-b N] TOPIC...: as mock_start, with -b N brokers, and
# commands on a pipe (mock_ctl) for per-broker control
MOCK_FD=
mock_start_ctl() {
	local t nb=1 args=()
	if [ "${1:-}" = -b ]; then nb=$2; shift 2; fi
	for t in $KTOPICS "$@"; do args+=(-t "$t"); done
	rm -f "$T/mock.ctl"
	mkfifo "$T/mock.ctl" || return 1
	exec {MOCK_FD}<>"$T/mock.ctl"
	: >"$T/mock.out"
	"$KAFKA_MOCK" -b "$nb" -p 4 "${args[@]}" <&"$MOCK_FD" >"$T/mock.out" 2>"$T/mock.err" &
	mock_started $!
}
# mock_ctl down|up [ID]: one broker (or all) down or up, confirmed
mock_ctl() {
	local n i what="$1 ${2:--1}"
	n=$(grep -c "^ok $what\$" "$T/mock.out")
	echo "$1 ${2:-}" >&"$MOCK_FD" || return 1
	for ((i = 0; i < 200; i++)); do
		[ "$(grep -c "^ok $what\$" "$T/mock.out")" -gt "$n" ] && return 0
		sleep 0.05
	done
	echo "kafka_mock did not confirm '$what' in 10 s: $(tail -c 300 "$T/mock.out")" >&2
	return 1
}
mock_stop() { # quietly, before the EXIT trap would kill it
	[ -n "$MOCK_PID" ] || return 0
	kill -TERM "$MOCK_PID" 2>/dev/null
	wait_exit "$MOCK_PID" 5
	MOCK_PID=
}
mock_up() { mock_cmd up; }

# kafka_dump OUT [TOPIC...]: every message of the topics (default: the
# four) as kcat JSON envelopes, one a line
kafka_dump() {
	local out=$1 t
	shift
	: >"$out"
	for t in ${@:-$KTOPICS}; do
		timeout 30 kcat -C -b "$BROKERS" -t "$t" -e -q -J -X topic.metadata.refresh.interval.ms=1000 \
			>>"$out" 2>>"$out.err" || echo "kcat $t: exit $?" >>"$out.err"
	done
}

# kafka_compare DUMP MODE FILE...: compare Kafka with the JSON lines of the
# files (one agent run after the other). Prints one JSON object:
#   messages, bad_json (values that are not JSON objects), bad_key (key !=
#   .instance), split (topic+key spread over several partitions), types
#   (record types found in more than one topic: "type:topic,topic"),
#   mismatch (per topic and key, "topic key: why"; at most 5), file_records,
#   unmapped (file records of a type Kafka never saw), type_topic (type ->
#   [topics]), kafka_by_topic (topic -> messages).
# MODE exact: per topic and key, Kafka holds exactly the file's values in
#   file order (each once).
# MODE suffix: Kafka holds a suffix of them (the first ones may be lost:
#   kill -9 loses what the producer held in memory), each once, in order.
# MODE suffix-killed: suffix, where the first file's run was killed with -9
#   after the records went to the spill but before the file's stdio buffer
#   was flushed: Kafka may also hold that tail, records of the first run
#   (infertrace-id) later than all of its records the file has, between
#   the two runs' records. They are set aside and counted
#   (first_tail_lost), the rest compared as in suffix.
# MODE cover: every line of the files is in Kafka, in order; Kafka may hold
#   more (accepted by the Kafka sink before a kill -9, not yet flushed to
#   the file). id_gaps then lists the runs whose infertrace-id numbers in
#   Kafka are not 1..N without a hole (a hole is a lost record).
# Records of the class "events" compare the same way unless EVENTS=subseq:
#   then Kafka must hold a subsequence (shed records), each once, in order.
# DEDUP=1: a message whose infertrace-id header was seen before (in
#   partition order) is dropped first, as a consumer would; the result
#   counts them (dups) and the messages without an id (no_id).
# kafka_compare.py does it (one jq program was quadratic: 260 s for the
# 24,000 records of kafka_recover_replay_mid, 4.7 s in Python).
kafka_compare() {
	local dump=$1 mode=$2
	shift 2
	# each file on its own: a last line cut by a kill stays cut, not glued to the next file's first
	EVENTS=${EVENTS:-same} DEDUP=${DEDUP:-0} python3 "$IT_ROOT/tests/integration/kafka_compare.py" \
		"$dump" "$mode" "$@"
}

# expect_compare JSON: the usual expectations on a kafka_compare result
expect_compare() {
	local c=$1
	expect "no messages in Kafka" ge "$(jq .messages <<<"$c")" 1
	expect "values that are not JSON objects: $(jq .bad_json <<<"$c")" eq "$(jq .bad_json <<<"$c")" 0
	expect "keys that are not the record's instance: $(jq .bad_key <<<"$c")" eq "$(jq .bad_key <<<"$c")" 0
	expect "an instance in several partitions: $(jq -c .split <<<"$c")" eq "$(jq '.split | length' <<<"$c")" 0
	expect "a record type in several topics: $(jq -c .types <<<"$c")" eq "$(jq '.types | length' <<<"$c")" 0
	# UNSENT_TYPES: record types that must stay local (sentinel's single events)
	local unsent=${UNSENT_TYPES:-}
	expect "record types never seen in Kafka: $(jq -c .unmapped <<<"$c")" eq \
		"$(jq --arg u "$unsent" '[.unmapped[] | select(. as $t | $u | split(" ") | index([$t]) | not)] | length' <<<"$c")" 0
	expect "$(jq .n_mismatch <<<"$c") topic/key sequences differ: $(jq -c .mismatch <<<"$c")" \
		eq "$(jq .n_mismatch <<<"$c")" 0
}

# last_kafka FILE FIELD: FIELD of the kafka object of the last stats record
last_kafka() {
	jq -r "select(.type == \"stats\" and .kafka != null) | .kafka.$2" "$1" 2>/dev/null | tail -n 1
}

# last_stats FILE FIELD: FIELD of the kafka object of the last complete
# stats record, read from the file's end (the file grows: a jq over all of
# it would take longer each time)
last_stats() {
	tail -n 200 "$1" 2>/dev/null | grep '"type":"stats"' | grep '}$' | tail -n 1 |
		jq -r ".kafka.$2" 2>/dev/null
}

# wait_spill_empty FILE SECS: until a stats record shows an empty spill
# (what the producer holds then is delivered by the exit flush); bounded
# by the clock
wait_spill_empty() {
	local f=$1 end=$((SECONDS + $2))
	while [ "$SECONDS" -lt "$end" ]; do
		[ "$(last_stats "$f" spill_records)" = 0 ] && return 0
		sleep 0.2
	done
	return 1
}
