#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/replay.sh - replay and correlator figures (issue 3, item 6), for
# bench/run.sh to call. Prints "key=value" lines; never asserts, never fails
# on a figure. The repeated input is built in /tmp and deleted afterwards.
#
# Environment: BUILD (build), INFERTRACE_DATA (../shared/data),
# BENCH_REPLAY_REPEAT (copies of the vLLM H100 trace, default 4).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DATA=${INFERTRACE_DATA:-../shared/data}
BIN=$BUILD/bench/bench_replay
if [ ! -x "$BIN" ]; then
	echo "replay bench skipped: $BIN not built (make $BIN)"
	exit 0
fi
echo "== replay and correlator ($(nproc) CPUs; figures per core are CPU time)"
"$BIN" "$DATA" "${BENCH_REPLAY_REPEAT:-4}" || echo "replay bench: exit $?"
exit 0
