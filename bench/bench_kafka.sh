#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/bench_kafka.sh - the Kafka sink (issue 4, item 9). Prints figures;
# never asserts, never fails the build on a figure. Needs no root.
#
# 1. Throughput: build/bench/bench_kafka sends the records of a deep-mode
#    replay (real sizes) through the sink to librdkafka's mock cluster
#    (build/tests/integration/kafka_mock, its own process, loopback) until
#    the broker confirmed all of them: records/s and bytes per record, with
#    the default producer queue and with a queue of 1000 records, so that
#    nearly everything goes through the spill on disk.
# 2. Volume: each recording is replayed through the agent with --kafka in
#    deep and in sentinel mode; bytes per hour for that one instance =
#    the records' value and key bytes scaled from the recording's span to
#    an hour. Per-run records (replay_status, diag_status) are left out;
#    sentinel's gpu_summary comes once per --interval (1 s), so it is
#    scaled by intervals, steps and anomalies by the span. Target: sentinel
#    at most 1% of deep for a steady workload.
#
# Environment: BUILD (default build), INFERTRACE_DATA (default ../shared/data),
# BENCH_KAFKA_RECORDS (200000).
set -u

BUILD=${BUILD:-build}
DATA=${INFERTRACE_DATA:-$(cd "$(dirname "$0")/../.." && pwd)/shared/data}
RECORDS=${BENCH_KAFKA_RECORDS:-200000}
AGENT=$BUILD/infertrace-agent
MOCK=$BUILD/tests/integration/kafka_mock
BENCH=$BUILD/bench/bench_kafka
say() { printf '%s\n' "$*"; }

say "== Kafka sink benchmark (bench/bench_kafka.sh) =="
for f in "$AGENT" "$MOCK" "$BENCH"; do
	[ -x "$f" ] || { say "bench_kafka: skipped: $f is missing (run through: make bench)"; exit 0; }
done
command -v jq >/dev/null || { say "bench_kafka: skipped: jq missing (make deps)"; exit 0; }
[ -d "$DATA/kineto" ] || { say "bench_kafka: skipped: no recordings in $DATA/kineto"; exit 0; }

TMP=$(mktemp -d /tmp/infertrace-bench-kafka.XXXXXX)
MOCK_PID=
cleanup() {
	[ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null && wait "$MOCK_PID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$MOCK" -p 4 </dev/null >"$TMP/mock.out" 2>"$TMP/mock.err" &
MOCK_PID=$!
for _ in $(seq 100); do
	BROKERS=$(sed -n 's/^bootstrap=//p' "$TMP/mock.out")
	[ -n "$BROKERS" ] && break
	sleep 0.05
done
[ -n "$BROKERS" ] || { say "bench_kafka: mock cluster did not start: $(head -c 200 "$TMP/mock.err")"; exit 0; }
say "mock cluster at $BROKERS (1 broker, loopback); librdkafka $(kcat -V 2>/dev/null | sed -n 's/.*librdkafka \([0-9.]*\).*/\1/p' | head -1)"

# ---------------------------------------------------------- throughput ----
SRC=$DATA/kineto/tracemap_vllm_llama_tp4_h100_rank0.pt.trace.json.gz
say ""
say "-- throughput: $RECORDS records of a deep replay ($(basename "$SRC")), sent until all are confirmed"
"$AGENT" --replay "$SRC" --mode deep -o "$TMP/deep.jsonl" 2>/dev/null
printf '  %-26s %12s %14s %14s %10s %12s\n' PATH "BYTES/REC" "ENQUEUE REC/S" "DELIVER REC/S" "MIB/S" "VIA SPILL"
for q in 0 20000 1000; do
	label="queue 100000 (default)"
	[ "$q" -ne 0 ] && label="queue $q"
	for round in 1 2 3; do
		rm -rf "$TMP/spill"
		"$BENCH" -b "$BROKERS" -f "$TMP/deep.jsonl" -d "$TMP/spill" -n "$RECORDS" -q "$q" \
			>>"$TMP/tp.$q" 2>"$TMP/tp.err" || say "  ($label, round $round: $(tail -c 200 "$TMP/tp.err"))"
	done
	# the median round by delivered rate
	jq -s -r --arg l "$label" 'sort_by(.delivered_per_s) | .[(length / 2 | floor)] |
		"  \($l | .[0:26] | . + " " * (26 - length)) \(.bytes_per_record | tostring | .[0:12] |
		" " * (12 - length) + .) \(.enqueue_per_s | tostring | " " * (14 - length) + .) \(.delivered_per_s |
		tostring | " " * (14 - length) + .) \(.mib_per_s | tostring | " " * (10 - length) + .) \(.through_spill |
		tostring | " " * (12 - length) + .)"' "$TMP/tp.$q" 2>/dev/null || say "  $label: no data"
done
say "  (median of 3 rounds; enqueue = write() calls returned, deliver = until the last delivery report;"
say "   JSON value bytes, before lz4; the mock broker keeps its log in memory)"

# -------------------------------------------------------------- volume ----
say ""
say "-- bytes per hour per instance, the same recording replayed in deep and in sentinel mode"
printf '  %-52s %9s %12s %12s %9s %7s\n' RECORDING "SPAN S" "DEEP MB/H" "SENT MB/H" "SENT/DEEP" TARGET
n=0
for f in "$DATA"/kineto/*; do
	b=$(basename "$f")
	for m in deep sentinel; do
		rm -rf "$TMP/spill.$m"
		"$AGENT" --replay "$f" --mode "$m" --kafka "$BROKERS" --kafka-topic-prefix "bench$n$m" \
			--spill-dir "$TMP/spill.$m" -o "$TMP/$m.jsonl" 2>"$TMP/$m.err" ||
			{ say "  $b ($m): agent failed: $(tail -c 200 "$TMP/$m.err")"; continue 2; }
	done
	n=$((n + 1))
	jq -n -r --arg b "$b" --rawfile dr "$TMP/deep.jsonl" --rawfile sr "$TMP/sentinel.jsonl" '
	# records with their size in Kafka: the JSON line (value) and the instance (key)
	def recs: split("\n") | map(select(length > 0) | (fromjson + {_bytes: (utf8bytelength)}) |
		._bytes += (.instance | utf8bytelength));
	def bytes: ._bytes;
	def perrun: .type == "replay_status" or .type == "diag_status";
	($dr | recs) as $d | ($sr | recs) as $s |
	($d | map(select(.start_ns and .end_ns))) as $k |
	(if ($k | length) > 0 then (($k | map(.end_ns) | max) - ($k | map(.start_ns) | min)) / 1e9 else 0 end) as $span |
	($d | map(select(perrun | not) | bytes) | add // 0) as $deep |
	($s | map(select(.type == "gpu_summary"))) as $g |
	($g | map(.interval_start_ns) | unique | length) as $ni |
	($g | map(bytes) | add // 0) as $gb |
	($s | map(select((perrun | not) and .type != "gpu_summary") | bytes) | add // 0) as $rest |
	if $span <= 0.01 then "\($b)\ttoo-short" else
	($deep / $span * 3600 / 1e6) as $dh |
	(((if $ni > 0 then $gb / $ni * 3600 else 0 end) + $rest / $span * 3600) / 1e6) as $sh |
	"\($b)\t\($span)\t\($dh)\t\($sh)" end' >"$TMP/row" 2>/dev/null && [ -s "$TMP/row" ] &&
		awk -F'\t' '$2 == "too-short" { printf "  %-52s span too short to scale\n", substr($1, 1, 52); next }
			{ r = $4 / $3; printf "  %-52s %9.2f %12.0f %12.1f %8.2f%% %7s\n", substr($1, 1, 52), $2, $3, $4,
			  100 * r, r <= 0.01 ? "met" : "MISSED" }' "$TMP/row" ||
		say "  $b: no figures"
done
say "  (recordings are short and some sparse (hta_alexnet: 120 kernels in 13 s, sampled): their deep volume"
say "   is small, so their ratio says little about a steady serving workload; step records scale with the"
say "   step rate, gpu_summary with the interval)"
exit 0
