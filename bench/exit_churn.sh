#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/exit_churn.sh - the correlator under a churn of short-lived processes,
# an older library against this tree's, side by side (issue 18). Builds
# bench/bench_exit_churn.c twice: against this tree's correlator and against
# the correlator of REV (git archive into /tmp, deleted afterwards), then runs
# both for each N, alternating, ROUNDS times, and prints the median CPU
# seconds of each and their ratio. Prints figures, never asserts.
#
# usage: bench/exit_churn.sh [REV] [N...]   (REV: main; N: 25000 50000 100000 200000)
# Environment: BUILD (build), ROUNDS (3), LAUNCHES (launches per thread, 8).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
REV=${1:-main}
shift || true
NS=${*:-25000 50000 100000 200000}
ROUNDS=${ROUNDS:-3}
LAUNCHES=${LAUNCHES:-8}
TMP=$(mktemp -d /tmp/infertrace-exit-churn.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

make -s "$BUILD/libinfertrace_correlator.a" >/dev/null
git archive "$REV" | tar -x -C "$TMP"
make -s -C "$TMP" BUILD=build build/libinfertrace_correlator.a >/dev/null
# one compile line for both (REV may predate the bench): only the library differs
for v in old new; do
	lib=$BUILD/libinfertrace_correlator.a
	inc=correlator/include
	[ "$v" = new ] || { lib=$TMP/build/libinfertrace_correlator.a; inc=$TMP/correlator/include; }
	cc -O2 -std=gnu11 -I"$inc" -o "$TMP/$v" bench/bench_exit_churn.c "$lib" \
		-ljansson -lsqlite3 -lz -ldl -lpthread
done

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "correlator churn: $(git rev-parse --short "$REV") ($REV) against this tree," \
	"$((2 * LAUNCHES)) launches per process, median of $ROUNDS (CPU s)"
printf '%-9s %10s %10s %8s %14s %14s\n' processes old_s new_s old/new old_ns/proc new_ns/proc
for n in $NS; do
	: >"$TMP/o.$n"
	: >"$TMP/n.$n"
	for ((r = 0; r < ROUNDS; r++)); do
		"$TMP/old" "$n" "$LAUNCHES" | sed -n 's/.*cpu_s=\([0-9.]*\).*/\1/p' >>"$TMP/o.$n"
		"$TMP/new" "$n" "$LAUNCHES" | sed -n 's/.*cpu_s=\([0-9.]*\).*/\1/p' >>"$TMP/n.$n"
	done
	o=$(median <"$TMP/o.$n")
	w=$(median <"$TMP/n.$n")
	awk -v n="$n" -v o="$o" -v w="$w" 'BEGIN {
		printf "%-9d %10.3f %10.3f %8.1f %14.0f %14.0f\n", n, o, w, o / w, o * 1e9 / n, w * 1e9 / n }'
done
