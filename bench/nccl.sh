#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/nccl.sh - what the agent adds to one ncclAllReduce call (issue 21).
# Prints figures; never asserts.
#
# build/bench/bench_nccl calls ncclAllReduce of the real libnccl.so.2 in a
# tight loop, pinned to one CPU. Each round measures the same loop under four
# configurations, in turn (the order rotates), so that drift on the machine
# touches all of them alike:
#   none      no probe
#   bare      a bare counting uprobe on ncclAllReduce (bench/bare_uprobe.bpf.c)
#   sentinel  the agent, default mode (the call's register arguments in one
#             ring record, no stack read)
#   deep      the agent, --mode deep --no-stacks (the stream read from the stack)
# Reported: added ns per call over "none", and the ratio to the bare
# uprobe's added ns, paired within each round, median over rounds. Then
# BENCH_STATS_ROUNDS (3) more rounds with kernel.bpf_stats_enabled on, of the
# probed configurations only: the BPF program's own ns per call (bpftool's
# run_time_ns / run_cnt), the part of the cost the agent's code decides,
# steadier on a VM than the loop (the trap's cost moves between runs).
#
# Environment: BUILD (build), BENCH_ROUNDS (7), BENCH_CALLS (300000),
# BENCH_AGENT_OLD (an older agent binary, measured as old_sentinel beside),
# BENCH_LOOP_ARGS (more arguments of the loop: "-p 100000" paces it at one
# call per 100 us, each call timed alone; noisier on a VM, where a call
# between pauses runs cold),
# BENCH_LOOP_CPU / BENCH_AGENT_CPU (last CPU / CPU 0), BENCH_NCCL (another
# libnccl.so.2 than /usr/local/cuda's, e.g. a PyTorch wheel's, or a private
# copy: uprobes go by inode, so another agent's probes on the original miss
# it). Each measurement waits (wait_quiet) while other processes hold uprobes
# on the library (a test's agent), and says so when they stay.
set -u

# bench_setup, cpu_ticks, loop_up, bare_up, agent_up, loop_go, probe_down
source "$(dirname "$0")/lib.sh"
bench_setup 300000
NCCL=$(readlink -f "${BENCH_NCCL:-/usr/local/cuda/lib64/libnccl.so.2}" 2>/dev/null || true)
# whose uprobes count as foreign (wait_quiet): any libnccl's, or the copy BENCH_NCCL names
# (a private copy is another inode: other agents' probes on /usr/local/cuda's miss it)
FOREIGN=libnccl
[ -n "${BENCH_NCCL:-}" ] && FOREIGN=$(basename "$(dirname "$NCCL")")/$(basename "$NCCL")
LOOP=$BUILD/bench/bench_nccl
BARE=$BUILD/bench/bare_uprobe
CONFIGS=(none bare sentinel deep)
# BENCH_AGENT_OLD: another agent binary measured beside, in sentinel (old_sentinel)
[ -n "${BENCH_AGENT_OLD:-}" ] && CONFIGS+=(old_sentinel)
say() { printf '%s\n' "$*"; }

say "== NCCL benchmark: cost of a probe on one ncclAllReduce call (bench/nccl.sh) =="
[ "$(id -u)" -eq 0 ] || { say "bench_nccl: skipped: needs root"; exit 0; }
for f in "$AGENT" "$LOOP" "$BARE" "$NCCL"; do
	[ -e "$f" ] || { say "bench_nccl: skipped: $f is missing (run through: make bench)"; exit 0; }
done

TMP=$(mktemp -d /tmp/infertrace-bench-nccl.XXXXXX)
RES=$TMP/results # config round ns_per_call agent_cpu_ticks
cleanup() {
	probe_down
	wait 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

run_one() { # CONFIG ROUND
	local cfg=$1 go=$TMP/go out=$TMP/loop.out err=$TMP/probe.err lp pp="" ns t0=0 t1=0
	rm -f "$go"
	FOREIGN_RE=$FOREIGN OWN_PID=0 wait_quiet ||
		say "  warning: $cfg round $2 measured while other uprobes were on $NCCL"
	loop_up "$go" "$out" || { say "bench_nccl: loop did not start: $(cat "$out")"; return 1; }
	lp=$LOOP_PID
	case $cfg in
	bare)
		bare_up "$NCCL" ncclAllReduce "$err" || { say "bench_nccl: bare: $(cat "$err")"; kill "$lp"; return 1; }
		;;
	sentinel | deep | old_sentinel)
		local -a args=(--pid "$lp" -o /dev/null --shim-socket none)
		local agent=$AGENT
		[ "$cfg" = deep ] && args+=(--mode deep --no-stacks)
		[ "$cfg" = old_sentinel ] && AGENT=$BENCH_AGENT_OLD
		agent_up "$err" 'attached [0-9]+ NCCL probes' -- "${args[@]}" ||
			{ AGENT=$agent; say "bench_nccl: agent ($cfg): $(tail -2 "$err")"; kill "$lp"; return 1; }
		AGENT=$agent
		;;
	esac
	pp=$PROBE_PID t0=$PROBE_T0
	# another agent may have found the loop meanwhile (one without --pid traces every process)
	FOREIGN_RE=$FOREIGN OWN_PID=${pp:-0} wait_quiet 20 ||
		say "  warning: $cfg round $2 measured while another process's uprobes were on $NCCL"
	loop_go "$go" "$out"
	ns=$LOOP_NS
	if [ -n "$pp" ] && [ "$cfg" != bare ]; then
		sleep 0.3 # the agent drains its ring every 100 ms
		t1=$(cpu_ticks "$pp")
	fi
	if [ -n "${STATS:-}" ]; then
		local pn
		pn=$(prog_ns "$pp" "$([ "$cfg" = bare ] && echo on_hit || echo ncclAllReduce)")
		probe_down
		[ -n "$pn" ] || { say "bench_nccl: $cfg: no program statistics"; return 1; }
		echo "$cfg $2 $pn" >>"$STATS"
		return 0
	fi
	probe_down
	[ -n "$ns" ] || { say "bench_nccl: $cfg: no result"; return 1; }
	echo "$cfg $2 $ns $((t1 - t0))" >>"$RES"
}

say "library $NCCL; $ROUNDS rounds x $CALLS calls per configuration, interleaved"
for ((r = 1; r <= ROUNDS; r++)); do
	line="round $r:"
	for ((k = 0; k < ${#CONFIGS[@]}; k++)); do
		cfg=${CONFIGS[$(((k + r - 1) % ${#CONFIGS[@]}))]}
		run_one "$cfg" "$r" && line="$line $cfg=$(awk -v c="$cfg" -v r="$r" '$1 == c && $2 == r { print $3 }' "$RES")"
	done
	say "  $line ns/call"
done
say "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

# per round: added ns over none, bare's added ns, and their ratio; medians over rounds
median() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "nan"; else printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { # CONFIG COLUMN(1: added, 2: bare added, 3: ratio)
	awk -v c="$1" -v k="$2" '{ v[$1, $2] = $3; r[$2] = 1 }
	END { for (x in r) if (((c, x) in v) && (("none", x) in v) && (("bare", x) in v) && v["bare", x] > v["none", x]) {
		a = v[c, x] - v["none", x]; b = v["bare", x] - v["none", x]
		print (k == 1 ? a : k == 2 ? b : a / b) } }' "$RES" | median
}
for cfg in "${CONFIGS[@]:2}"; do
	q=$(col "$cfg" 3)
	verdict=""
	[ "$cfg" != deep ] && verdict=$(awk -v q="$q" 'BEGIN { print (q == "nan" ? "no data" : q + 0 <= 1.3 ? "target <= 1.3: met" : "target <= 1.3: MISSED") }')
	say "  $cfg adds $(col "$cfg" 1) ns/call, the bare uprobe $(col "$cfg" 2); $cfg / bare = $q  $verdict"
done
awk -v hz="$HZ" -v calls="$CALLS" '$1 != "none" && $1 != "bare" { t[$1] += $4; n[$1]++ }
	END { for (c in t) printf "  agent CPU (%s): %.2f us per call, on its own CPU\n", c, 1e6 * t[c] / hz / (n[c] * calls) }' "$RES" | sort | while read -r l; do say "$l"; done
say "  (a uprobe's trap dominates on a VM; a busy node widens the spread: see the load average)"

# the programs alone: kernel.bpf_stats_enabled for these rounds only (it adds
# two clock reads per program run), restored after
SR=${BENCH_STATS_ROUNDS:-3}
if [ "$SR" -gt 0 ] && command -v bpftool >/dev/null && [ -w /proc/sys/kernel/bpf_stats_enabled ]; then
	STATS=$TMP/stats # config round ns_per_run
	old_stats=$(cat /proc/sys/kernel/bpf_stats_enabled)
	trap 'echo "$old_stats" >/proc/sys/kernel/bpf_stats_enabled; cleanup' EXIT
	echo 1 >/proc/sys/kernel/bpf_stats_enabled
	for ((r = 1; r <= SR; r++)); do
		for ((k = 1; k < ${#CONFIGS[@]}; k++)); do
			cfg=${CONFIGS[$((1 + (k + r - 2) % (${#CONFIGS[@]} - 1)))]}
			run_one "$cfg" "$r"
		done
	done
	echo "$old_stats" >/proc/sys/kernel/bpf_stats_enabled
	line=$(for cfg in "${CONFIGS[@]:1}"; do
		printf ' %s %s,' "$cfg" "$(awk -v c="$cfg" '$1 == c { print $3 }' "$STATS" | median)"
	done)
	say "  BPF program per call (bpf_stats, median of $SR rounds, ns):${line%,}"
fi
[ "$CONTAMINATED" -gt 0 ] &&
	say "warning: $CONTAMINATED measurements ran while other processes held uprobes on $NCCL"
exit 0
