#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# seeds.sh [FIRST [LAST]] - eval_detect --brief at every fault seed from
# FIRST to LAST (default 1-10), then per stream form and judge the mean of
# every figure with its worst value over the seeds (the least for recalls,
# F1 and kind; the most for false positive rates and lags), and at how many
# seeds the targets are met. EVAL_ARGS adds options (--blind: the
# real stream only). One seed's figure can sit on either side of a target
# by a few steps; this says how robust it is. The seeds run in parallel,
# one per CPU; the lines come out in seed order.
set -eu
first=${1:-1}
last=${2:-10}
bin=${EVAL_DETECT:-$(dirname "$0")/../build/eval/eval_detect}
if [ ! -x "$bin" ]; then
	echo "seeds.sh: $bin not built (make build/eval/eval_detect)" >&2
	exit 1
fi
jobs=$(nproc 2>/dev/null || echo 1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
# shellcheck disable=SC2086
seq "$first" "$last" | xargs -P "$jobs" -I{} sh -c '"$1" --brief --seed "$2" $4 >"$3/$2" 2>&1' \
	_ "$bin" {} "$tmp" "${EVAL_ARGS:-}" || rc=1
for ((s = first; s <= last; s++)); do
	cat "$tmp/$s"
done | awk -v quiet="${SEEDS_QUIET:-0}" '
	/SKIPPED/ { print; skipped = 1; next }
	$1 != "seed" { print; next }
	{
		# seed N STREAM JUDGE key value key value ...
		if (!quiet) print
		g = $3 " " $4
		if (!(g in n)) order[ng++] = g
		n[g]++
		met = 1
		for (i = 5; i < NF; i += 2) {
			k = g SUBSEP $i; v = $(i + 1)
			if (!(k in sum)) keys[g] = keys[g] " " $i
			sum[k] += v
			worst = ($i ~ /^(fpr|lag)/) ? (v > w[k]) : (v < w[k])
			if (n[g] == 1 || worst) w[k] = v
			if ($i == "fpr0" && v > 0.005) met = 0
			if ($i == "f1" && v < 0.99) met = 0
			if (($i == "r_stall" || $i == "r_gpu") && v < 0.99) met = 0
			if ($i == "lagmax" && v > 1) met = 0
		}
		allmet[g] += met
	}
	END {
		if (!ng) exit skipped ? 0 : 1
		printf "means over %d seeds (worst in brackets):\n", n[order[0]]
		for (j = 0; j < ng; j++) {
			g = order[j]
			printf "  %-22s", g
			m = split(keys[g], ks, " ")
			for (i = 1; i <= m; i++)
				printf " %s %.4f (%.4f)", ks[i], sum[g SUBSEP ks[i]] / n[g], w[g SUBSEP ks[i]]
			if (g !~ /modelled/)
				printf " | targets met at %d", allmet[g]
			printf "\n"
		}
	}' || rc=1
if [ "$rc" != 0 ]; then
	echo "seeds.sh: eval_detect failed at some seed (its output is above)" >&2
fi
exit "$rc"
