#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# otlp - the OpenTelemetry sink (--otlp URL, agent/sinks/sink_otlp.c) against a
# small receiver (tests/node/otlp_receiver.mjs) that decodes every request
# with the OpenTelemetry protocol definitions of the npm package
# @opentelemetry/otlp-transformer and refuses anything that does not map
# exactly. tests/node/otlp_check.mjs then compares with the agent's own
# JSON lines (--output): each step, anomaly and process record is one log
# record with every field typed; each integer of thread, net and
# gpu_summary records is a data point of its sum, each *_hist_us a
# histogram, in order.
#
#   otlp_replay_kineto    a recording: its steps (logs) and gpu_summary
#                         records (metrics)
#   otlp_replay_anomaly   a step stream with one stall: 200 steps and the
#                         anomaly as log records
#   otlp_replay_level_shift  a step stream 1.5x slower for good: its 64
#                         anomalies and the level_shift record as WARN log
#                         records, the shift's body a sentence
#   otlp_live             root: a traced CUDA workload, thread summaries
#                         (sums and histograms) and process changes
#   otlp_retry            the receiver answers 503 to its first 3 requests:
#                         the agent retries, nothing is lost
#   otlp_refused          the receiver answers 400: no retry, every record
#                         counted as dropped, the agent's exit is 0
#   otlp_collector_down   nothing listens: the replay is not slowed beyond
#                         --flush-timeout, every record counted as dropped,
#                         the JSON lines complete
#   otlp_bad_url          --otlp without http(s)://: exit 64, clear error
#   otlp_receiver_strict  the receiver itself refuses what a collector would
#                         misread: an unknown field, a 64-bit integer as a
#                         JSON number, an enum by name (and takes the same
#                         request written right)
set -u
. "$(dirname "$0")/lib.sh"

NAMES="otlp_replay_kineto otlp_replay_anomaly otlp_replay_level_shift otlp_live otlp_retry otlp_refused
otlp_collector_down otlp_bad_url otlp_receiver_strict"
NODE_DIR=$IT_ROOT/tests/node
if [ ! -x "$AGENT" ]; then
	for n in $NAMES; do echo "FAIL $n: $AGENT not built"; done
	exit 0
fi
if ! command -v node >/dev/null || ! command -v jq >/dev/null ||
	[ ! -d "$NODE_DIR/node_modules/@opentelemetry/otlp-transformer" ]; then
	for n in $NAMES; do echo "FAIL $n: node, jq or @opentelemetry/otlp-transformer missing (make deps)"; done
	exit 0
fi
DATA=${INFERTRACE_DATA:-$IT_ROOT/../shared/data}
SMALL=$DATA/kineto/tracelens_hf_qwen1.5-0.5b_h100.json.gz

# receiver_start NAME [ARGS...]: sets RECV_PID, RECV_URL; requests in $T/NAME.req
receiver_start() {
	local name=$1 i
	shift
	rm -f "$T/$name.port"
	node "$NODE_DIR/otlp_receiver.mjs" "$T/$name.req" "$T/$name.port" "$@" 2>"$T/$name.recv.err" &
	RECV_PID=$!
	_it_pids+=("$RECV_PID")
	for ((i = 0; i < 200; i++)); do
		[ -s "$T/$name.port" ] && RECV_URL=http://127.0.0.1:$(cat "$T/$name.port") && return 0
		sleep 0.05
	done
	fail_because "receiver did not start: $(head -c 300 "$T/$name.recv.err")"
	return 1
}
receiver_stop() {
	kill -TERM "$RECV_PID" 2>/dev/null
	wait_exit "$RECV_PID" 5
}
# replay_received NAME FILE: FILE replayed to a fresh receiver, the agent's
# exit and check; 1 when the receiver did not start
replay_received() {
	receiver_start "$1" || return 1
	replay "$1" "$2"
	receiver_stop
	expect "agent exit $RC: $(tail -c 300 "$T/$1.err")" eq "$RC" 0
	check "$1"
}
# check NAME: otlp_check.mjs on $T/NAME.jsonl and $T/NAME.req; sets $C
check() {
	C=$(node "$NODE_DIR/otlp_check.mjs" "$T/$1.jsonl" "$T/$1.req" 2>&1)
	expect "$(jq -c '.problems[:3]' <<<"$C" 2>/dev/null || head -c 300 <<<"$C")" \
		jqe '.problems == [] and .decode_errors == 0' <<<"$C"
}
# the sink's account at exit: "otlp: S records sent in R requests, D dropped, N retries"
account() { sed -n "s/.*otlp: \([0-9]*\) records sent in [0-9]* requests, \([0-9]*\) dropped, \([0-9]*\) retries.*/\\$1/p" "$2"; }
# replay NAME FILE [ARGS...]: the agent on FILE with --otlp $RECV_URL
replay() {
	local name=$1 file=$2
	shift 2
	timeout 120 "$AGENT" --replay "$file" -o "$T/$name.jsonl" --otlp "${RECV_URL:-http://127.0.0.1:9}" \
		"$@" 2>"$T/$name.err"
	RC=$?
}
# records of the classes the sink exports
exported() { jq -n -R '[inputs | fromjson? | select(.type | IN("step", "anomaly", "level_shift", "process",
	"thread", "net", "gpu_summary"))] | length' "$1"; }

# --------------------------------------------------------------------------
name=otlp_replay_kineto
if [ ! -r "$SMALL" ]; then
	skip $name "recording not found: $SMALL"
else
	replay_received $name "$SMALL" && {
		expect "no step log record: $C" jqe '.log_matched >= 1' <<<"$C"
		expect "no gpu_summary data points: $C" jqe '.metric_records >= 1 and .points_checked >= 10' <<<"$C"
		expect "sent $(account 1 "$T/$name.err") of $(exported "$T/$name.jsonl") records" \
			eq "$(account 1 "$T/$name.err")" "$(exported "$T/$name.jsonl")"
	}
	report $name
fi

# --------------------------------------------------------------------------
# 200 prefills of 2 s, step 150 stalls 20 ms in one GPU gap (as diag_live.sh)
name=otlp_replay_anomaly
awk 'BEGIN {
	srand(7); t = 1000000000
	for (i = 0; i < 200; i++) {
		d = int(2e9 * (1 + 0.03 * (rand() - 0.5))); g = int(2.4e6 * (1 + 0.8 * (rand() - 0.5)))
		if (i == 150) { d += 20000000; g = 20000000 }
		printf "{\"type\":\"step\",\"instance\":\"otlpsyn\",\"start_ns\":%.0f,\"dur_ns\":%.0f,", t, d
		printf "\"phase\":\"prefill\",\"tokens\":8192,\"batch_size\":1,\"kv_tokens\":8192,"
		printf "\"gpu_busy_ns\":%.0f,\"idle_ns\":%.0f,\"idle_gaps\":4,\"idle_max_ns\":%.0f}\n", d - 3 * g, 3 * g, g
		t += d + 100000
	}
}' >"$T/steps.in.jsonl"
replay_received $name "$T/steps.in.jsonl" && {
	na=$(jq -n -R '[inputs | fromjson? | select(.type == "anomaly")] | length' "$T/$name.jsonl")
	expect "the replay found $na anomalies, want 1" eq "$na" 1
	# a step stream's steps are input: the anomaly is the one record out
	expect "log records: $C, want the anomaly" jqe '.log_records == 1 and .log_matched == 1' <<<"$C"
}
report $name

# --------------------------------------------------------------------------
# a decode key 1.5x slower for good after 300 steps (lib.sh, level_shift_steps)
name=otlp_replay_level_shift
level_shift_steps otlpsyn >"$T/shift.in.jsonl"
replay_received $name "$T/shift.in.jsonl" && {
	nl=$(jq -n -R '[inputs | fromjson? | select(.type == "level_shift")] | length' "$T/$name.jsonl")
	expect "the replay wrote $nl level_shift records, want 1" eq "$nl" 1
	expect "log records: $C, want 64 anomalies and the level shift" \
		jqe '.log_records == 65 and .log_matched == 65' <<<"$C"
	expect "no log body 'new level accepted: 64 steps in a row at 1.5...' in the requests" \
		grep -qE 'new level accepted: 64 steps in a row at 1\.5[0-9]x the expected, mostly [a-z_]+' "$T/$name.req"
}
report $name

# --------------------------------------------------------------------------
name=otlp_live
if [ "$(id -u)" -ne 0 ]; then
	skip $name "needs root"
elif [ ! -x "$CUDA_CALLS" ]; then
	echo "FAIL $name: $CUDA_CALLS not built"
else
	receiver_start $name && {
		if agent_start $name -i 0.25 --otlp "$RECV_URL" --control-socket none --shim-socket none; then
			bg_start "$T/work.out" env INFERTRACE_INSTANCE=it-otlp-$$ "$CUDA_CALLS" -t 2 -s 4
			wpid=$BG_PID
			cuda_attached "$wpid" 10 || fail_because "workload not attached"
			wait_exit "$wpid" 30 || fail_because "workload did not finish"
			sleep 0.6 # the last interval's summaries
			agent_stop INT || fail_because "agent did not stop"
			expect "agent exit ${AGENT_RC:-?}: $(agent_tail)" eq "${AGENT_RC:-1}" 0
			receiver_stop
			mv "$T/$name.req" "$T/$name.req.all" && cp "$T/$name.req.all" "$T/$name.req"
			check $name
			nt=$(jq -n -R '[inputs | fromjson? | select(.type == "thread")] | length' "$AGENT_OUT")
			expect "no thread summaries to compare ($nt)" ge "$nt" 1
			expect "no histogram data points: $C" jqe '.histograms >= 1' <<<"$C"
			expect "no process log record: $C" jqe '.log_matched >= 1' <<<"$C"
			st=$(jq -c -n -R '[inputs | fromjson? | select(.type == "stats") | .otlp] | last' "$AGENT_OUT")
			expect "stats record without the otlp object: $st" \
				jqe '.sent_records_total >= 1 and .dropped_records_total == 0 and .queue_max == 64' <<<"$st"
		else
			fail_because "agent did not start: $(agent_tail)"
			receiver_stop
		fi
	}
	report $name
fi

# --------------------------------------------------------------------------
# outages, on the recording (a logs and a metrics request)
if [ ! -r "$SMALL" ]; then
	for n in otlp_retry otlp_refused otlp_collector_down; do skip $n "recording not found: $SMALL"; done
	NO_REC=1
fi
name=otlp_retry
[ -z "${NO_REC:-}" ] && receiver_start $name --fail-first 3 && {
	replay $name "$SMALL"
	receiver_stop
	expect "agent exit $RC: $(tail -c 300 "$T/$name.err")" eq "$RC" 0
	check $name
	expect "records $C, want every one" jqe '.log_matched >= 1 and .points_checked >= 10' <<<"$C"
	expect "retries $(account 3 "$T/$name.err"), want >= 3" ge "$(account 3 "$T/$name.err")" 3
	expect "dropped $(account 2 "$T/$name.err"), want 0" eq "$(account 2 "$T/$name.err")" 0
}
[ -z "${NO_REC:-}" ] && report $name

name=otlp_refused
[ -z "${NO_REC:-}" ] && receiver_start $name --status 400 && {
	replay $name "$SMALL"
	receiver_stop
	expect "agent exit $RC: $(tail -c 300 "$T/$name.err")" eq "$RC" 0
	n=$(exported "$T/$name.jsonl")
	expect "dropped $(account 2 "$T/$name.err") of $n" eq "$(account 2 "$T/$name.err")" "$n"
	expect "retried a 400 $(account 3 "$T/$name.err") times" eq "$(account 3 "$T/$name.err")" 0
}
[ -z "${NO_REC:-}" ] && report $name

name=otlp_collector_down
# a port nobody listens on: the receiver's, after it stopped
[ -z "${NO_REC:-}" ] && receiver_start $name && receiver_stop && {
	t0=$(date +%s)
	replay $name "$SMALL" --flush-timeout 2
	t1=$(date +%s)
	expect "agent exit $RC: $(tail -c 300 "$T/$name.err")" eq "$RC" 0
	expect "took $((t1 - t0)) s with --flush-timeout 2: blocked on the collector" le $((t1 - t0)) 30
	n=$(exported "$T/$name.jsonl")
	expect "JSON lines: $n exported records" ge "$n" 3
	expect "dropped $(account 2 "$T/$name.err") of $n" eq "$(account 2 "$T/$name.err")" "$n"
	expect "sent $(account 1 "$T/$name.err")" eq "$(account 1 "$T/$name.err")" 0
}
[ -z "${NO_REC:-}" ] && report $name

# --------------------------------------------------------------------------
name=otlp_bad_url
out=$("$AGENT" --otlp collector:4318 --replay "$T/steps.in.jsonl" 2>&1 >/dev/null)
rc=$?
expect "exit $rc, want 64" eq "$rc" 64
expect "no clear error: $out" grep -q 'http:// or https:// URL' <<<"$out"
report $name

# --------------------------------------------------------------------------
name=otlp_receiver_strict
if ! command -v curl >/dev/null; then
	skip $name "curl missing"
else
	receiver_start $name && {
		post() { curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
			--data-binary "$1" "$RECV_URL/v1/logs"; }
		rec() { printf '{"resourceLogs":[{"scopeLogs":[{"logRecords":[{%s}]}]}]}' "$1"; }
		good='"timeUnixNano":"1700000000000000000","severityNumber":9,"body":{"stringValue":"x"}'
		code=$(post "$(rec "$good")")
		expect "a right request: HTTP $code" [ "$code" = 200 ]
		for bad in "$good,\"bogus\":1" "${good/\"1700000000000000000\"/1700000000}" \
			"${good/:9,/:\"SEVERITY_NUMBER_INFO\",}"; do
			code=$(post "$(rec "$bad")")
			expect "accepted ($code): $bad" [ "$code" = 400 ]
		done
		receiver_stop
		expect "receiver logged $(jq -s 'map(select(.error)) | length' "$T/$name.req") errors, want 3" \
			[ "$(jq -s 'map(select(.error)) | length' "$T/$name.req")" = 3 ]
	}
	report $name
fi
