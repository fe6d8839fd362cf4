#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench_cut_counts: make bench's live step cut (bench/bench_cut.c,
# bench/cut.sh) runs and its stream is cut right, so that its figures can
# be believed: 3 s at 20 k kernels/s, steps of 75 ms whose GPU work runs
# half a step behind the launches (steps overlap in time), a cut each
# second, with every launch joined, 1 in 7 and 1 in 1,000. Each run cuts
# the 40 steps and every kernel made; a bad argument is refused with exit
# 2 and a message. The timings are printed by make bench, not asserted.
BUILD=${BUILD:-build}
B=$BUILD/bench/bench_cut
N=bench_cut_counts

if [ ! -x "$B" ]; then
	echo "FAIL $N: $B not built (make test)"
	exit 0
fi
why=""
for j in 1 7 1000; do
	out=$("$B" -s 3 -k 20000 -j "$j" 2>&1)
	rc=$?
	steps=$(sed -n 's/.* steps \([0-9]*\) .*/\1/p' <<<"$out")
	kernels=$(sed -n 's/.* kernels \([0-9]*\) dur_ns.*/\1/p' <<<"$out")
	made=$(sed -n 's/.* kernels_made \([0-9]*\).*/\1/p' <<<"$out")
	if [ "$rc" -ne 0 ] || [ -z "$made" ]; then
		why="$why 1 in $j: exit $rc: $out;"
	elif [ "$steps" != 40 ] || [ "$kernels" != "$made" ] || [ "$made" != 59960 ]; then
		why="$why 1 in $j joined: $steps steps, $kernels of $made kernels in steps (want 40, all of 59960);"
	fi
done
out=$("$B" -k fast 2>&1)
rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "positive integer" <<<"$out"; then
	why="$why -k fast: exit $rc: $out;"
fi
if [ -n "$why" ]; then
	echo "FAIL $N:$why"
else
	echo "PASS $N (40 steps, 59960 of 59960 kernels, every launch, 1 in 7 and 1 in 1000 joined)"
fi
