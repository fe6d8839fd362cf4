#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# perfetto - the Chrome trace JSON export (agent/sinks/perfetto.c) that
# ui.perfetto.dev opens, offline and live, and the flight recorder behind the
# live one (agent/pipeline/recorder.c):
#
#   perfetto_replay:   --replay of real Kineto recordings --perfetto OUT (as a
#                      user, no root): valid JSON; every pid/tid drawn on has a
#                      process_name/thread_name; GPU devices and streams are
#                      tracks; one flow per joined GPU record, every flow start
#                      has its end, and each end sits inside a slice of its
#                      track (starts inside the launch slice)
#   perfetto_live:     a live GPU workload (real shim, CUPTI double) in
#                      sentinel mode: its kernels are not sent but kept by the
#                      flight recorder; `agentctl export --perfetto` draws them
#                      with the CPU threads and flows; an unknown instance gives
#                      a valid, empty trace; a deep-dive then sends the window
#                      (flight_recorder record, the kept kernel records)
source "$(dirname "$0")/lib.sh"
CTL=$BUILD/agentctl
GPU_LIVE=$BUILD/tests/integration/gpu_live
DATA=${INFERTRACE_DATA:-$IT_ROOT/../shared/data}

# nflows FILE: flow starts in the trace
nflows() { jq '[.traceEvents[] | select(.ph == "s")] | length' "$1" 2>/dev/null; }

# check_trace FILE: prints the problems found ("" when none)
check_trace() {
	local f=$1
	jq -r '
	.traceEvents as $ev
	| ($ev | map(select(.ph == "M" and .name == "process_name") | .pid) | unique) as $pn
	| ($ev | map(select(.ph == "M" and .name == "thread_name") | "\(.pid)/\(.tid)") | unique) as $tn
	| ($ev | map(select(.ph == "X" or .ph == "s" or .ph == "f" or (.ph == "i" and .s == "t")))) as $drawn
	| ($ev | map(select(.ph == "X")) | group_by("\(.pid)/\(.tid)")
	   | map({key: "\(.[0].pid)/\(.[0].tid)",
		  value: (sort_by(.ts) | {s: map(.ts), e: map(.ts + .dur)})}) | from_entries) as $slices
	# inside TRACK TS: one of the last slices begun on the track by ts holds ts
	| def inside($k; $t): ($slices[$k] // {s: [], e: []}) as $x | ($x.s | bsearch($t)) as $i
	    | (if $i >= 0 then $i else (-2 - $i) end) as $j
	    | [range([$j - 7, 0] | max; $j + 1)] | any($x.e[.] >= $t);
	[
	  ($drawn | map(.pid) | unique | map(select(. as $p | $pn | index($p) | not))
	   | select(length > 0) | "pids without process_name: \(.[0:5])"),
	  ($drawn | map("\(.pid)/\(.tid)") | unique | map(select(. as $t | $tn | index($t) | not))
	   | select(length > 0) | "threads without thread_name: \(.[0:5])"),
	  ($ev | map(select(.ph == "s") | .id) | sort) as $s
	  | ($ev | map(select(.ph == "f") | .id) | sort) as $f
	  | (if $s != $f then "flow starts and ends differ (\($s | length) s, \($f | length) f)" else empty end),
	  ($s | group_by(.) | map(select(length > 1)) | select(length > 0) | "flow ids used twice: \(.[0:3])"),
	  ($ev | map(select((.ph == "s" or .ph == "f") and (inside("\(.pid)/\(.tid)"; .ts) | not)))
	   | select(length > 0) | "\(length) flow events outside any slice of their track, e.g. \(.[0])"),
	  ($ev | map(select(.ph == "X")) | group_by("\(.pid)/\(.tid)")
	   | map(sort_by([.ts, -.dur]) | reduce .[] as $x ({st: [], bad: 0};
		.st |= map(select(. > $x.ts + 0.0005))
		| if (.st | length) > 0 and ($x.ts + $x.dur) > .st[-1] + 0.0005 then .bad += 1
		  else .st += [$x.ts + $x.dur] end) | .bad) | add // 0
	   | select(. > 0) | "\(.) slices overlap a slice of their track without nesting"),
	  ($ev | map(select(.ph == "X" and ((.dur | type) != "number" or .dur < 0 or (.ts | type) != "number")))
	   | select(length > 0) | "bad X events: \(.[0])")
	] | .[]' "$f" 2>&1 | head -n 5
}

# ---------------------------------------------------------------- replay ----
if ! command -v jq >/dev/null; then
	echo "FAIL perfetto_replay: jq missing (make deps)"
elif [ ! -x "$AGENT" ]; then
	echo "FAIL perfetto_replay: $AGENT not built"
elif [ ! -d "$DATA/kineto" ]; then
	skip perfetto_replay "no recordings in $DATA (shared/data)"
else
	for rec in hta_alexnet_a100.json.gz tracemap_vllm_llama_tp4_h100_rank0.pt.trace.json.gz; do
		out=$T/${rec%%.*}.perfetto.json
		run=(timeout 120 "$AGENT" --replay "$DATA/kineto/$rec" --perfetto "$out")
		# as a user: replay needs no root
		[ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
			run=(setpriv --reuid=65534 --regid=65534 --clear-groups "${run[@]}") && chmod 777 "$T"
		"${run[@]}" >"$T/replay.stdout" 2>"$T/replay.err"
		rc=$?
		expect "$rec: exit $rc: $(tail -n 2 "$T/replay.err")" [ "$rc" = 0 ]
		expect "$rec: JSON lines on stdout without --output" [ ! -s "$T/replay.stdout" ]
		if ! jq -e '.traceEvents | length > 0' "$out" >/dev/null 2>&1; then
			fail_because "$rec: $out is not a trace JSON document"
			continue
		fi
		probs=$(check_trace "$out")
		NFLOWS=$(nflows "$out")
		expect "$rec: $probs" [ -z "$probs" ]
		# the same replay as JSON lines: how many GPU records joined their launch
		"$AGENT" --replay "$DATA/kineto/$rec" --mode deep -o "$T/replay.jsonl" 2>/dev/null
		joined=$(jq -s '[.[] | select((.type == "kernel" or .type == "memcpy" or .type == "memset") and .matched)] | length' "$T/replay.jsonl")
		gpu=$(jq -s '[.[] | select(.type == "kernel" or .type == "memcpy" or .type == "memset")] | length' "$T/replay.jsonl")
		expect "$rec: $NFLOWS flows, want one per joined GPU record ($joined)" eq "$NFLOWS" "$joined"
		expect "$rec: no flows" ge "$NFLOWS" 1
		ngpu=$(jq '[.traceEvents[] | select(.ph == "X" and .pid >= 1073741824)] | length' "$out")
		expect "$rec: $ngpu GPU slices, want $gpu" eq "$ngpu" "$gpu"
		expect "$rec: no GPU process named 'GPU N'" \
			jqe '[.traceEvents[] | select(.ph == "M" and .name == "process_name" and (.args.name | test("^GPU [0-9]+$")))] | length > 0' "$out"
		expect "$rec: no stream threads" \
			jqe '[.traceEvents[] | select(.ph == "M" and .name == "thread_name" and (.args.name | test("^stream [0-9]+$")))] | length > 0' "$out"
		expect "$rec: no launch slices on CPU threads" \
			jqe '[.traceEvents[] | select(.ph == "X" and .cat == "launch" and .pid < 1073741824)] | length > 0' "$out"
	done
	report perfetto_replay
fi

# ------------------------------------------------------------------ live ----
it_preflight perfetto_live
[ -n "${PF_LIVE_ONLY:-}" ] || true
if [ ! -x "$CTL" ] || [ ! -x "$GPU_LIVE" ] || [ ! -f "$BUILD/libinfertrace_cupti.so" ]; then
	echo "FAIL perfetto_live: $CTL, $GPU_LIVE or the shim not built (make test)"
	exit 0
fi
INST=it-pf-$$
SOCK=$T/pf/agent.sock
go=$T/pf.go
bg_start "$T/pf.work" env INFERTRACE_INSTANCE="$INST" INFERTRACE_SHIM_SOCKET="$T/pf/shim.sock" \
	"$GPU_LIVE" -t 2 -n 6 -w "$go" -m sentinel
wp=$BG_PID
if ! wait_line "$T/pf.work" 10; then
	fail_because "gpu_live printed nothing: $(head -c 300 "$T/pf.work.err")"
elif ! agent_start pf_live -i 0.25 --pid "$(head -n 1 "$T/pf.work" | jq -r .pid)" \
	--control-socket "$SOCK" --shim-socket "$T/pf/shim.sock"; then
	fail_because "agent did not start: $(agent_tail)"
else
	WPID=$(head -n 1 "$T/pf.work" | jq -r .pid)
	cuda_attached "$WPID" 10 || fail_because "no attach record for pid $WPID"
	wait_record ".type == \"shim_status\" and .pid == $WPID" 10 || fail_because "the shim did not connect"
	sleep 0.2
	touch "$go"
	wait_exit "$wp" 30 || fail_because "gpu_live did not finish"
	wait_record ".type==\"process\" and .event==\"exit\" and .pid==$WPID" 10 ||
		fail_because "no exit record for pid $WPID"
	sent=$(jqo --argjson p "$WPID" '[.[] | select(.type == "kernel" and .pid == $p)] | length')
	expect "sentinel sent $sent kernel records (the recorder keeps them)" eq "$sent" 0
	out=$("$CTL" --socket "$SOCK" export --perfetto "$T/live.json" --instance "$INST" 2>&1)
	expect "export failed: $out" grep -q "trace events" <<<"$out"
	if jq -e .traceEvents "$T/live.json" >/dev/null 2>&1; then
		probs=$(check_trace "$T/live.json")
		NFLOWS=$(nflows "$T/live.json")
		expect "live: $probs" [ -z "$probs" ]
		expect "live: no flows" ge "$NFLOWS" 1
		nk=$(jq '[.traceEvents[] | select(.ph == "X" and .cat == "kernel")] | length' "$T/live.json")
		expect "live: no kernel slices from the recorder" ge "$nk" 1
		expect "live: the workload's threads are not tracks" \
			jqe --argjson p "$WPID" '[.traceEvents[] | select(.ph == "M" and .name == "thread_name" and .pid == $p)] | length >= 2' "$T/live.json"
		expect "live: no process_name for the workload" \
			jqe --argjson p "$WPID" --arg i "$INST" '[.traceEvents[] | select(.ph == "M" and .name == "process_name" and .pid == $p and (.args.name | startswith($i)))] | length == 1' "$T/live.json"
	else
		fail_because "live: $T/live.json is not a trace JSON document"
	fi
	"$CTL" --socket "$SOCK" export --perfetto "$T/empty.json" --instance "no-such-$$" >/dev/null 2>&1
	expect "export of an unknown instance is not an empty trace" \
		jqe '.traceEvents == []' "$T/empty.json"
	# a deep-dive sends the window first: the kept kernel records go out now
	"$CTL" --socket "$SOCK" deep-dive --instance "$INST" --duration 5 >/dev/null 2>&1
	if wait_record ".type == \"flight_recorder\" and .instance == \"$INST\" and .trigger == \"deep_dive\"" 5; then
		n=$(jqo --arg i "$INST" '[.[] | select(.type == "flight_recorder" and .instance == $i)][0].records')
		sleep 0.5
		sent=$(jqo --arg i "$INST" '[.[] | select(.type == "kernel" and .instance == $i)] | length')
		expect "flight_recorder says $n records, want >= the $nk kernels" ge "$n" "${nk:-1}"
		expect "after the deep-dive $sent kernel records were sent, want $nk" eq "$sent" "${nk:-1}"
	else
		fail_because "no flight_recorder record at the deep-dive"
	fi
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	[ "${AGENT_RC:-}" = 0 ] || fail_because "agent exit ${AGENT_RC:-?}: $(agent_tail)"
fi
report perfetto_live
