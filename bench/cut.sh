#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/cut.sh - how long the live step cut holds the agent's loop, an older
# tree's correlator against this one, side by side (bench/bench_cut.c: a
# made-up stream at 133 k kernels/s, steps of 75 ms, one launch in 1,000
# joined, cut every second what ended 2 s before, as diag_advance() does).
# Both builds are fed the same stream: their step checksums must agree, and
# the script says so. Prints figures, never asserts on one.
#
# usage: bench/cut.sh [REV] [bench_cut args...]   (REV: main)
# Environment: BUILD (build), ROUNDS (3, alternating old and new).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
REV=${1:-main}
shift || true
ROUNDS=${ROUNDS:-3}
TMP=$(mktemp -d /tmp/infertrace-cut.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

make -s "$BUILD/bench/bench_cut" >/dev/null
git archive "$REV" | tar -x -C "$TMP"
make -s -C "$TMP" BUILD=build build/libinfertrace_correlator.a >/dev/null
# the bench is this tree's: the segmenter's API (diagnose.h) is what both share
cc -O2 -Icorrelator/include -o "$TMP/bench_cut_old" bench/bench_cut.c \
	"$TMP/build/libinfertrace_correlator.a" -lm -ljansson -lsqlite3 -lz -ldl -lpthread
OLD=$TMP/bench_cut_old
NEW=$BUILD/bench/bench_cut

field() { sed -E "s|.* $1 ([0-9.]+).*|\\1|"; }
echo "live step cut: $(git rev-parse --short "$REV") ($REV) against this tree, $ROUNDS rounds alternating"
printf '%-6s %-4s %9s %9s %9s %10s  %s\n' round tree mean_ms p50_ms max_ms ns/record steps/kernels/dur
for ((r = 1; r <= ROUNDS; r++)); do
	for t in old new; do
		if [ $t = old ]; then bin=$OLD; else bin=$NEW; fi
		line=$("$bin" "$@")
		sum=$(echo "$line" | sed -E 's/.* steps ([0-9]+) kernels ([0-9]+) dur_ns ([0-9]+).*/\1\/\2\/\3/')
		echo "$sum" >>"$TMP/sums"
		printf '%-6s %-4s %9s %9s %9s %10s  %s\n' "$r" $t "$(echo "$line" | field mean_ms)" \
			"$(echo "$line" | field p50_ms)" "$(echo "$line" | field max_ms)" \
			"$(echo "$line" | field ns/record)" "$sum"
	done
done
echo "kernels made: $(echo "$line" | field kernels_made) (steps/kernels above: all of them unless a tree loses some)"
if [ "$(sort -u "$TMP/sums" | wc -l)" -eq 1 ]; then
	echo "steps: the same in every run ($(head -1 "$TMP/sums"))"
else
	echo "steps: DIFFER between runs (checksums above)"
fi
