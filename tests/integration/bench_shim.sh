#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench_shim_counts: make bench's measure of the CUPTI shim's channel
# (bench/bench_shim.c, bench/shim.sh) runs and counts right, so that its
# figures can be believed: 1 s of 16 kernels every 12 ms through the real
# shim over the CUPTI double to the agent's receiver, in sentinel and deep
# mode. Every kernel made arrives, none is dropped, deep mode sends a launch
# callback per kernel and per copy (one a step), and the per-record CPU
# figures are printed. A rate
# this low leaves the receiver idle nearly all the time; the figures
# themselves are not asserted (make bench prints them).
BUILD=${BUILD:-build}
B=$BUILD/bench/bench_shim
N=bench_shim_counts

if [ ! -x "$B" ]; then
	echo "FAIL $N: $B not built (make test)"
	exit 0
fi
why=""
for m in sentinel deep; do
	out=$("$B" -s 1 -k 16 -m "$m" 2>&1)
	rc=$?
	read -r got made < <(sed -n 's/.* delivered \([0-9]*\)\/\([0-9]*\) .*/\1 \2/p' <<<"$out")
	cbs=$(sed -n 's/.* launch_cbs \([0-9]*\) .*/\1/p' <<<"$out")
	copies=$(sed -n 's/.* copies \([0-9]*\) .*/\1/p' <<<"$out")
	dropped=$(sed -n 's/.* dropped \([0-9]*\) .*/\1/p' <<<"$out")
	if [ "$rc" -ne 0 ] || [ -z "$made" ]; then
		why="$why $m: exit $rc: $out;"
	elif [ "$made" -lt 1000 ] || [ "$got" != "$made" ] || [ "$dropped" != 0 ]; then
		why="$why $m: $got of $made kernels arrived, $dropped dropped;"
	elif [ "$m" = deep ] && [ "$cbs" != $((made + copies)) ]; then
		why="$why deep: $cbs launch callbacks for $made kernels and $copies copies;"
	elif ! grep -q 'shim_ns/rec [0-9]* .*rx_ns/rec [0-9]*' <<<"$out"; then
		why="$why $m: no CPU figures: $out;"
	fi
done
if [ -n "$why" ]; then
	echo "FAIL $N:$why"
else
	echo "PASS $N (sentinel and deep: $made of $made kernels each)"
fi
