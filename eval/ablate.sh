#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# ablate.sh RULE [FIRST [LAST]] - eval/seeds.sh at seeds FIRST-LAST (default
# 11-100) with one rule of the detector switched off, built apart in a
# temporary folder: the real stream in its five forms and the modelled
# streams (the rules that need a breakdown act only there). RULE is one of
# the ABL_<RULE> switches in correlator/src/diag_internal.h, or NONE (the
# detector as it is, built the same way). EVAL_ARGS adds options (--blind:
# the real stream only; --model cells).
set -eu
usage="usage: ablate.sh RULE [FIRST [LAST]]"
rule=${1:?$usage}
first=${2:-11}
last=${3:-100}
top=$(cd "$(dirname "$0")/.." && pwd)
rules=$(sed -n 's/^#ifndef ABL_\([A-Z]*\).*/\1/p' "$top/correlator/src/diag_internal.h" | tr '\n' ' ')
case " NONE $rules " in
*" $rule "*) ;;
*)
	echo "ablate.sh: no rule '$rule'; one of: NONE $rules" >&2
	exit 2
	;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
${CC:-cc} -std=gnu11 -D_GNU_SOURCE -O2 -DABL_"$rule"=1 -I"$top/correlator/include" \
	-o "$tmp/eval_detect" "$top/eval/eval_detect.c" "$top"/correlator/src/*.c \
	-lm -ljansson -lsqlite3 -lz -ldl -lpthread
echo "seeds $first-$last with $rule switched off:"
SEEDS_QUIET=1 EVAL_DETECT="$tmp/eval_detect" "$top/eval/seeds.sh" "$first" "$last"
