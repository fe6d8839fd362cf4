#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# ablate.sh RULE [FIRST [LAST]] - the blind protocol (eval_detect --blind)
# at seeds FIRST-LAST (default 11-100) with one rule of the detector switched
# off (DIAG_ABLATE_<RULE> in correlator/src/detect.c or baseline.c: CHURN,
# MODES, HOLD, BOUND, GUESS, RUN, SPIKE, WINDOW, YOUNG), built apart in a
# temporary folder. Compare with eval/seeds.sh on the same seeds.
set -eu
rule=${1:?usage: ablate.sh RULE [FIRST [LAST]]}
first=${2:-11}
last=${3:-100}
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
${CC:-cc} -std=gnu11 -D_GNU_SOURCE -O2 -DDIAG_ABLATE_"$rule" -I"$top/correlator/include" \
	-o "$tmp/eval_detect" "$top/eval/eval_detect.c" "$top"/correlator/src/*.c \
	-lm -ljansson -lsqlite3 -lz -ldl -lpthread
echo "blind protocol with $rule switched off:"
SEEDS_QUIET=1 EVAL_ARGS=--blind EVAL_DETECT="$tmp/eval_detect" "$top/eval/seeds.sh" "$first" "$last"
