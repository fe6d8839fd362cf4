#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/shim.sh - the CUPTI shim's channel at a GPU's record rate (1,600
# kernels per 12 ms step, 133 k/s). Prints figures; never asserts.
#
# 1. build/bench/bench_shim with its own receiver (shim_rx, the agent's end
#    without the join), sentinel and deep, BENCH_SHIM_ROUNDS (3) rounds in
#    turn: delivered, messages/s, the shim thread's CPU and the receiver's.
#    BENCH_SHIM_OLD (an older libinfertrace_cupti.so) is measured beside it.
# 2. As root, into a running agent (--shim-socket, sentinel, output to a
#    file): what arrived and was dropped by the agent's stats records, the
#    kernels whose launch the shim sampled out (no_launch), the steps cut
#    and the anomalies flagged, and the agent's CPU time per kernel record
#    (from /proc/PID/stat, its idle cost over the same time subtracted).
#    An anomaly makes the flight recorder send its window (~2 s of
#    kernels here, its 64 MiB budget): compare runs that flagged as many.
#    A second run stalls one step 50 ms (bench_shim --stall-ms), so that a
#    window is sent mid-run: the windows, the records they announced, the
#    slices they went out in. The stats counters are totals since the
#    start: the last record has them.
#
# Environment: BUILD (build), BENCH_SHIM_ROUNDS (3), BENCH_SHIM_SECONDS (5),
# BENCH_SHIM_OLD, BENCH_AGENT_OLD (an older agent, measured beside in 2).
set -u

# bench_setup, cpu_ticks, wait_for, agent_up, probe_down
source "$(dirname "$0")/lib.sh"
bench_setup 0
ROUNDS=${BENCH_SHIM_ROUNDS:-3}
SECS=${BENCH_SHIM_SECONDS:-5}
BENCH=$BUILD/bench/bench_shim
say() { printf '%s\n' "$*"; }

say "== CUPTI shim channel benchmark (bench/shim.sh): 1,600 kernels / 12 ms =="
[ -x "$BENCH" ] || { say "bench_shim: skipped: $BENCH is missing (run through: make bench)"; exit 0; }

for r in $(seq 1 "$ROUNDS"); do
	for mode in sentinel deep; do
		say "round $r new $("$BENCH" -s "$SECS" -m "$mode")"
		[ -n "${BENCH_SHIM_OLD:-}" ] &&
			say "round $r old $(INFERTRACE_SHIM_SO=$BENCH_SHIM_OLD "$BENCH" -s "$SECS" -m "$mode")"
	done
done

[ "$(id -u)" -eq 0 ] || { say "bench_shim: into the agent: skipped (needs root)"; exit 0; }
command -v jq >/dev/null || { say "bench_shim: into the agent: skipped (jq missing)"; exit 0; }
TMP=$(mktemp -d /tmp/infertrace-bench-shim.XXXXXX)
cleanup() {
	probe_down
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# into AGENT_BIN LABEL [BENCH_ARGS]: one run of the workload into that agent
into() {
	local bin=$1 label=$2 t0 t1 idle busy line
	shift 2
	rm -f "$TMP"/out.jsonl "$TMP"/shim.sock
	AGENT=$bin agent_up "$TMP/err" 'running in' -- --shim-socket "$TMP/shim.sock" \
		--shim-group root --control-socket "$TMP/ctl.sock" -o "$TMP/out.jsonl" || {
		say "bench_shim: $label: the agent did not start: $(tail -2 "$TMP/err")"
		probe_down
		return
	}
	# its idle cost, over as long as the workload will run
	t0=$(cpu_ticks "$PROBE_PID")
	sleep "$((SECS + 3))"
	t1=$(cpu_ticks "$PROBE_PID")
	idle=$((t1 - t0))
	line=$("$BENCH" -S "$TMP/shim.sock" -s "$SECS" "$@")
	busy=$(($(cpu_ticks "$PROBE_PID") - t1))
	probe_down
	jq -s --arg l "$label" --arg line "$line" --argjson busy "$busy" --argjson idle "$idle" \
		--argjson hz "$HZ" -r '
		([.[] | select(.type == "stats")] | last) as $st | $st.gpu as $g
		| ($line | capture("made (?<m>[0-9]+)").m | tonumber) as $made
		| "\($l): made \($made) arrived \($g.shim_records) " +
		  "dropped \($g.shim_dropped) shed \($g.shim_shed_msgs) " +
		  "no_launch \($g.no_launch // "-") evicted \($g.gpu_evicted) " +
		  "steps \($st.diag.steps) anomalies \($st.diag.anomalies) " +
		  "windows \([.[] | select(.type == "flight_recorder")] | length) " +
		  "of \([.[] | select(.type == "flight_recorder") | .records] | add // 0) records " +
		  "(slices \($st.recorder.slices // "-"), sent_early \($st.recorder.sent_early // "-")) " +
		  "agent_cpu \(($busy - $idle) / $hz)s = \((($busy - $idle) / $hz * 1e9 / $made) | floor) ns/kernel " +
		  "(idle \($idle / $hz)s)"' "$TMP/out.jsonl"
}

say "into a running agent, sentinel, ${SECS}s:"
into "$AGENT" new
[ -n "${BENCH_AGENT_OLD:-}" ] && into "$BENCH_AGENT_OLD" old
# one step stalls 50 ms halfway: the agent flags it and sends its window
# (~200k records) while the shim keeps sending; drops here are the window's
say "the same with one step stalled 50 ms (a flight-recorder window sent mid-run):"
into "$AGENT" new --stall-ms 50
[ -n "${BENCH_AGENT_OLD:-}" ] && into "$BENCH_AGENT_OLD" old --stall-ms 50
exit 0
