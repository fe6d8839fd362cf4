#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/replay_steps.sh - --replay of a long single-process recording of this
# agent (JSON lines), cut into steps with their CPU side, an older agent
# against this tree's, side by side. Each step measured its GPU records and
# CPU events by scanning all those held, and a replay holds the whole
# recording: time grew with steps x records. Prints figures, never asserts.
#
# The recording is made up here (awk): one process, one launching thread,
# N steps of 1 ms, each 3 kernels and a device-to-host copy (the automatic
# cut) and 4 offcpu records (one preempted), 8 records per step.
#
# SHAPE=instant makes it forged instead: every record at one instant, so
# every step is the same instant and holds every record (each step counted
# them all, and the cut grew with steps x records however it searched).
#
# usage: bench/replay_steps.sh [REV] [N...]   (REV: main; N: 10000 20000 40000)
# Environment: BUILD (build), ROUNDS (3), SHAPE (steps, or instant).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
REV=${1:-main}
shift || true
NS=${*:-10000 20000 40000}
ROUNDS=${ROUNDS:-3}
SHAPE=${SHAPE:-steps}
case "$SHAPE" in
steps) DT=1 ;;
instant) DT=0 ;;
*)
	echo "replay_steps.sh: SHAPE is steps or instant, not '$SHAPE'" >&2
	exit 2
	;;
esac
TMP=$(mktemp -d /tmp/infertrace-replay-steps.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

make -s "$BUILD/infertrace-agent" >/dev/null
git archive "$REV" | tar -x -C "$TMP"
make -s -C "$TMP" BUILD=build build/infertrace-agent >/dev/null
OLD=$TMP/build/infertrace-agent
NEW=$BUILD/infertrace-agent

# recording N FILE
recording() {
	awk -v n="$1" -v dt="$DT" 'BEGIN {
		t = 1000000000; c = 1
		print "{\"schema\":1,\"type\":\"process\",\"pid\":100}"
		for (s = 0; s < n; s++) {
			for (k = 0; k < 3; k++) {
				l = t + k * 100000 * dt
				printf "{\"schema\":1,\"type\":\"kernel\",\"pid\":100,\"tid\":100,\"start_ns\":%.0f,", l + 20000
				printf "\"end_ns\":%.0f,\"correlation_id\":%d,\"launch_ts_ns\":%.0f,", l + 90000, c++, l
				printf "\"launch_api\":\"cudaLaunchKernel\",\"launch_cbid\":211,"
				printf "\"launch_src\":\"uprobe+cupti\",\"stream\":7,\"name\":\"k%d\"}\n", k
			}
			l = t + 300000 * dt
			printf "{\"schema\":1,\"type\":\"memcpy\",\"pid\":100,\"tid\":100,\"start_ns\":%.0f,", l + 10000
			printf "\"end_ns\":%.0f,\"correlation_id\":%d,\"bytes\":8,\"copy_kind\":2,", l + 20000, c++
			printf "\"stream\":7,\"launch_ts_ns\":%.0f,\"launch_api\":\"cudaMemcpyAsync\",", l
			printf "\"launch_src\":\"uprobe+cupti\"}\n"
			for (k = 0; k < 4; k++) {
				printf "{\"schema\":1,\"type\":\"offcpu\",\"pid\":100,\"tid\":100,\"ts_ns\":%.0f,", t + (k * 80000 + 5000) * dt
				printf "\"dur_ns\":30000,\"cause\":\"%s\",\"by_pid\":%d}\n", k == 1 ? "preempted" : "blocked", k == 1 ? 7 : 0
			}
			t += 1000000 * dt
		}
	}' >"$2"
}

# cpu AGENT FILE: user CPU seconds of one replay (bash's time builtin)
cpu() {
	local TIMEFORMAT=%U
	{ time "$1" --replay "$2" -o /dev/null 2>/dev/null; } 2>&1
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "replay with steps ($SHAPE): $(git rev-parse --short "$REV") ($REV) against this tree," \
	"8 records per step, median of $ROUNDS (user CPU s)"
printf '%-8s %10s %10s %8s %12s %12s\n' steps old_s new_s old/new old_us/step new_us/step
for n in $NS; do
	recording "$n" "$TMP/rec.jsonl"
	: >"$TMP/o.$n"
	: >"$TMP/n.$n"
	for ((r = 0; r < ROUNDS; r++)); do
		cpu "$OLD" "$TMP/rec.jsonl" >>"$TMP/o.$n"
		cpu "$NEW" "$TMP/rec.jsonl" >>"$TMP/n.$n"
	done
	o=$(median <"$TMP/o.$n")
	w=$(median <"$TMP/n.$n")
	awk -v n="$n" -v o="$o" -v w="$w" 'BEGIN {
		printf "%-8d %10.2f %10.2f %8.1f %12.1f %12.1f\n", n, o, w, (w > 0 ? o / w : 0), o * 1e6 / n, w * 1e6 / n }'
done
