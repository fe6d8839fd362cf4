#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# seeds.sh [FIRST [LAST]] - the targets (eval_detect --brief) at
# every fault seed from FIRST to LAST (default 1-10), then their mean, the
# least value and how many seeds meet each target. One seed's figure can
# sit on either side of a target by a few steps; this says how robust it is.
# The seeds run in parallel, one per CPU; the lines come out in seed order.
set -eu
first=${1:-1}
last=${2:-10}
bin=${EVAL_DETECT:-$(dirname "$0")/../build/eval/eval_detect}
if [ ! -x "$bin" ]; then
	echo "seeds.sh: $bin not built (make build/eval/eval_detect)" >&2
	exit 1
fi
# one eval_detect per CPU; lines come out in seed order
jobs=$(nproc 2>/dev/null || echo 1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
seq "$first" "$last" | xargs -P "$jobs" -I{} sh -c '"$1" --brief --seed "$2" >"$3/$2" 2>&1' _ "$bin" {} "$tmp" || rc=1
for ((s = first; s <= last; s++)); do
	cat "$tmp/$s"
done | awk '
	/SKIPPED/ { print; skipped = 1; next }
	{
		print
		n++
		# seed N: host_stall recall R FPR F v | gpu_slow recall R FPR F v | mixed F1 X v
		hr += $5; gr += $12; f1 += $19
		hm += ($8 == "met"); gm += ($15 == "met"); fm += ($20 == "met")
		if (n == 1 || $5 < hmin) hmin = $5
		if (n == 1 || $12 < gmin) gmin = $12
		if (n == 1 || $19 < fmin) fmin = $19
	}
	END {
		if (!n) exit skipped ? 0 : 1
		printf "%d seeds: host_stall recall mean %.4f least %.4f, met at %d | ", n, hr / n, hmin, hm
		printf "gpu_slow recall mean %.4f least %.4f, met at %d | ", gr / n, gmin, gm
		printf "mixed F1 mean %.4f least %.4f, met at %d\n", f1 / n, fmin, fm
	}' || rc=1
if [ "$rc" != 0 ]; then
	echo "seeds.sh: eval_detect failed at some seed (its output is above)" >&2
fi
exit "$rc"
