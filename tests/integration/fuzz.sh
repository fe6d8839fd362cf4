#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# fuzz - every libFuzzer target for a short, bounded time (issue 18), from
# the seeds in tests/fuzz/seeds/ (copied: the fuzzer adds to its corpus):
#
#   fuzz_kineto, fuzz_jsonl, fuzz_nsys: one replay reader each (format forced)
#   fuzz_detect:   the replay input with format detection (every seed)
#   fuzz_steps:    recordings -> step segmenter -> detector, and raw step records
#   fuzz_shim_rx:  what CUPTI shims send the agent (agent/sources/shim_rx.c)
#   fuzz_control:  the control request parser (agent/control/control_proto.c)
#
# FUZZ_SECONDS (default 4) per target. A crash, a sanitizer report or a
# leak is a FAIL naming the reproducer: run the binary on that file alone.
# Built by `make test` (clang); `make fuzz-replay fuzz-shim-rx fuzz-control`.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
SECS=${FUZZ_SECONDS:-4}
T=$(mktemp -d /tmp/infertrace-fuzz-XXXXXX)
trap 'rm -rf "$T"' EXIT
S=tests/fuzz/seeds

# run NAME SEED-DIRS...
run() {
	local name=$1 bin=$BUILD/tests/fuzz/$1 corpus=$T/$1 log=$T/$1.log
	shift
	if [ ! -x "$bin" ]; then
		echo "FAIL $name: $bin not built (make test builds it; needs clang)"
		return
	fi
	mkdir -p "$corpus" "$T/art-$name"
	for d in "$@"; do cp "$d"/* "$corpus"/ 2>/dev/null; done
	# seeds first, each alone: a known input that fails names itself
	if ! "$bin" -runs=0 "$corpus" >"$log" 2>&1; then
		echo "FAIL $name: a seed fails: $(grep -m1 -E 'ERROR|runtime error|abort' "$log")"
		return
	fi
	if "$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$T/art-$name/" "$corpus" >"$log" 2>&1; then
		echo "PASS $name ($(sed -n 's/^stat::number_of_executed_units: *//p' "$log") runs in ${SECS} s)"
	else
		local art
		art=$(ls "$T/art-$name" 2>/dev/null | head -n 1)
		mkdir -p "$BUILD/test-logs/fuzz-artifacts"
		[ -n "$art" ] && cp "$T/art-$name/$art" "$BUILD/test-logs/fuzz-artifacts/$name-$art"
		echo "FAIL $name: $(grep -m1 -E 'ERROR|runtime error|deadly' "$log")" \
			"(reproducer: $BUILD/test-logs/fuzz-artifacts/$name-$art)"
		grep -A30 -m1 -E 'ERROR|runtime error' "$log" | head -40
	fi
}

run fuzz_kineto "$S/kineto"
run fuzz_jsonl "$S/jsonl"
run fuzz_nsys "$S/nsys"
run fuzz_detect "$S/kineto" "$S/jsonl" "$S/nsys"
run fuzz_steps "$S/steps"
run fuzz_shim_rx "$S/shim_rx"
run fuzz_control "$S/control"
