#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/run.sh - what the agent adds to one cudaLaunchKernel call (issue 2,
# item 6). Prints figures; never asserts, never fails the build on a figure.
#
# One traced process (build/bench/bench_launch) calls cudaLaunchKernel of the
# real libcudart in a tight loop, pinned to one CPU. Each round measures the
# same loop under six configurations, in turn, so that drift on the machine
# touches all of them alike:
#   none       no probe at all
#   bare       a bare counting uprobe (bench/bare_uprobe.bpf.c): the floor
#   sentinel   the agent, default mode (per-thread counters in the kernel, and
#              every launch pushed on the flight recorder's kernel queue)
#   sent-norec sentinel with --recorder-launches 0 (counters only)
#   deep       the agent, --mode deep --no-stacks (one ring record per call)
#   deep+stk   the agent, --mode deep (user stacks, --stack-rate 100)
# The agent writes to /dev/null: what is measured is the traced process and
# the agent's own CPU time (utime+stime from /proc/PID/stat, from the start
# of the loop until the agent has drained its rings).
#
# Environment: BUILD (default build), BENCH_ROUNDS (7), BENCH_CALLS (1000000),
# BENCH_LOOP_CPU / BENCH_AGENT_CPU (default: last CPU / CPU 0).
set -u

# bench_setup, cpu_ticks, loop_up, bare_up, agent_up, loop_go, probe_down, foreign_probes,
# wait_quiet (CONTAMINATED)
source "$(dirname "$0")/lib.sh"
bench_setup 1000000
CUDART=$(readlink -f /usr/local/cuda/lib64/libcudart.so 2>/dev/null || true)
LOOP=$BUILD/bench/bench_launch
BARE=$BUILD/bench/bare_uprobe
CONFIGS=(none bare sentinel sent-norec deep deep+stk)

say() { printf '%s\n' "$*"; }

replay_bench() {
	if [ -x bench/replay.sh ]; then
		say ""
		say "== correlator replay benchmark (bench/replay.sh) =="
		BUILD=$BUILD bench/replay.sh || say "bench/replay.sh exited with $? (figures above, if any)"
	fi
}

if [ "$(id -u)" -ne 0 ]; then
	say "bench: skipped: uprobes and the agent need root (run: sudo make bench)"
	replay_bench
	exit 0
fi
for f in "$AGENT" "$LOOP" "$BARE" "$BUILD/bench/bare_uprobe.bpf.o"; do
	[ -e "$f" ] || { say "bench: skipped: $f is missing (run through: make bench)"; exit 0; }
done
if [ -z "$CUDART" ] || [ ! -e "$CUDART" ]; then
	say "bench: skipped: /usr/local/cuda/lib64/libcudart.so not found"
	exit 0
fi
[ "$NCPU" -ge 2 ] || say "bench: note: one CPU only, the agent shares the loop's CPU"

TMP=$(mktemp -d /tmp/infertrace-bench.XXXXXX)
RES=$TMP/results # config round ns_per_call agent_cpu_s records drops
cleanup() {
	probe_down # the bare uprobe or agent running now, if any
	wait 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# sum over CPUs of slot 1 (EV_CUDA_LAUNCH, bpf/events.h) of the agent's
# per-CPU array map NAME (event_counts / drop_counts), found through the
# map fds the agent holds, so other agents on the node do not interfere
agent_counter() {
	local pid=$1 name=$2 id
	for id in $(cat /proc/"$pid"/fdinfo/* 2>/dev/null | awk '/^map_id:/ { print $2 }' | sort -u); do
		if [ "$(bpftool map show id "$id" -j 2>/dev/null | jq -r .name)" = "$name" ]; then
			bpftool map lookup id "$id" key 1 0 0 0 -j 2>/dev/null |
				jq '[.formatted.values[].value] | add'
			return
		fi
	done
	echo 0
}

# one measurement: run_one CONFIG ROUND
run_one() {
	local cfg=$1 round=$2 go=$TMP/go.$1.$2 out=$TMP/loop.out err=$TMP/probe.err
	local lp pp="" t0=0 t1 prev n ns records=0 drops=0
	local -a agent_args

	rm -f "$go"
	wait_quiet || say "  warning: $cfg round $round measured while other uprobes were on the CUDA libraries"
	loop_up "$go" "$out" || { say "bench: $cfg: loop did not start: $(cat "$out")"; return 1; }
	lp=$LOOP_PID

	case $cfg in
	none) ;;
	bare)
		bare_up "$CUDART" cudaLaunchKernel "$err" || { say "bench: bare uprobe: $(cat "$err")"; kill "$lp"; return 1; }
		;;
	*)
		agent_args=(--pid "$lp" -o /dev/null)
		case $cfg in
		sent-norec) agent_args+=(--recorder-launches 0) ;;
		deep) agent_args+=(--mode deep --no-stacks) ;;
		deep+stk) agent_args+=(--mode deep) ;;
		esac
		agent_up "$err" 'running in' 'attached [0-9]+ probes' -- "${agent_args[@]}" ||
			{ say "bench: agent ($cfg) did not attach: $(tail -3 "$err")"; kill "$lp"; return 1; }
		;;
	esac
	pp=$PROBE_PID t0=$PROBE_T0

	loop_go "$go" "$out"
	ns=$LOOP_NS
	[ -n "$ns" ] || { say "bench: $cfg: no result: $(cat "$out")"; return 1; }

	t1=0
	if [ -n "$pp" ] && [ "$cfg" != bare ]; then
		# the agent is done when its CPU time stops moving (rings drained)
		prev=-1
		for ((n = 0; n < 100; n++)); do
			t1=$(cpu_ticks "$pp")
			[ "$t1" = "$prev" ] && break
			prev=$t1
			sleep 0.2
		done
		records=$(agent_counter "$pp" event_counts)
		drops=$(agent_counter "$pp" drop_counts)
	fi
	probe_down
	rm -f "$go"
	echo "$cfg $round $ns $(awk -v a="$t0" -v b="$t1" -v hz="$HZ" 'BEGIN { printf "%.3f", (b - a) / hz }') ${records:-0} ${drops:-0}" >>"$RES"
}

say "== infertrace benchmark: cost of a probe on one cudaLaunchKernel call =="
say "kernel $(uname -r), $NCPU CPUs, loop pinned to CPU $LOOP_CPU, probes/agent on CPU $AGENT_CPU"
say "library $CUDART; $ROUNDS rounds x $CALLS calls per configuration, interleaved"
say ""
for ((r = 1; r <= ROUNDS; r++)); do
	# rotate the order each round so no configuration always runs first
	line="round $r:"
	for ((k = 0; k < ${#CONFIGS[@]}; k++)); do
		cfg=${CONFIGS[$(((k + r - 1) % ${#CONFIGS[@]}))]}
		run_one "$cfg" "$r" || continue
		line="$line $cfg=$(awk -v c="$cfg" -v r="$r" '$1 == c && $2 == r { print $3 }' "$RES")"
	done
	say "  $line ns/call"
done
say ""
[ "$CONTAMINATED" -gt 0 ] && say "warning: $CONTAMINATED measurements ran while other processes held uprobes on the CUDA libraries"
say "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the node widens the spread)"
say ""

# median, min and max of column 3 for one configuration
stat_of() { awk -v c="$1" '$1 == c { print $3 }' "$RES" | sort -g | awk '
	{ v[NR] = $1 } END {
		if (!NR) { print "nan nan nan"; exit }
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		print m, v[1], v[NR] }'; }

read -r BASE _ _ <<<"$(stat_of none)"
read -r BAREM _ _ <<<"$(stat_of bare)"
printf '%-10s %12s %16s %12s %10s\n' CONFIG "NS/CALL" "(MIN..MAX)" "ADDED NS" "VS BARE"
for cfg in "${CONFIGS[@]}"; do
	read -r med lo hi <<<"$(stat_of "$cfg")"
	awk -v c="$cfg" -v m="$med" -v lo="$lo" -v hi="$hi" -v b="$BASE" -v bb="$BAREM" 'BEGIN {
		if (m == "nan") { printf "%-10s %12s\n", c, "no data"; exit }
		add = m - b; badd = bb - b
		vs = (c == "none") ? "-" : (badd > 0 ? sprintf("%.2fx", add / badd) : "?")
		printf "%-10s %12.1f %16s %12.1f %10s\n", c, m, sprintf("(%.1f..%.1f)", lo, hi), \
			(c == "none" ? 0 : add), vs }'
done
say ""

# targets, from the medians: sentinel <= 1.3x bare, deep without stacks <= 2x
ratio() { read -r m _ _ <<<"$(stat_of "$1")"; awk -v m="$m" -v b="$BASE" -v bb="$BAREM" \
	'BEGIN { if (m == "nan" || bb - b <= 0) print "nan"; else printf "%.2f", (m - b) / (bb - b) }'; }
# the same ratio within each round (paired: both figures share the round's
# conditions), median over the rounds; the verdict uses this one
paired() { awk -v c="$1" '$1 == "none" { b[$2] = $3 } $1 == "bare" { bb[$2] = $3 } $1 == c { m[$2] = $3 }
	END { for (r in m) if ((r in b) && (r in bb) && bb[r] > b[r]) print (m[r] - b[r]) / (bb[r] - b[r]) }' "$RES" |
	sort -g | awk '{ v[NR] = $1 } END { if (!NR) { print "nan"; exit }
		printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
RS=$(paired sentinel)
RS0=$(paired sent-norec)
RD=$(paired deep)
RDS=$(paired deep+stk)
say "ratio of the medians above: sentinel/bare $(ratio sentinel), deep/bare $(ratio deep), deep+stk/bare $(ratio deep+stk)"
verdict() { awk -v r="$1" -v t="$2" 'BEGIN { if (r == "nan") print "NO DATA"; else if (r + 0 <= t + 0) print "met"; else print "MISSED" }'; }
say "targets (added ns relative to the bare uprobe's added ns; median of the per-round ratios):"
say "  sentinel / bare = $RS  (target <= 1.3): $(verdict "$RS" 1.3)"
say "    (of which the flight recorder's queue: sentinel without it, sent-norec / bare = $RS0)"
say "  deep     / bare = $RD  (target <= 2.0): $(verdict "$RD" 2.0)"
say "  deep+stk / bare = $RDS  (no target)"
if [ "$(verdict "$RS" 1.3)" = MISSED ]; then
	say "    why (likely): per call the sentinel program does two bpf_probe_read_user (stack arguments it then"
	say "    discards) and a thread_stats hash lookup; the bare probe does one add. Spread on a shared VM is wide."
fi
if [ "$(verdict "$RD" 2.0)" = MISSED ]; then
	say "    why: deep mode adds a ring reserve/fill/submit per call to the sentinel work, and the agent,"
	say "    busy on the other CPU formatting JSON, falls behind (see DROP % below)."
fi
DROPPCT=$(awk '$1 == "deep" { r += $5; d += $6 } END { printf "%.0f", (r + d) ? 100 * d / (r + d) : 0 }' "$RES")
if [ "${DROPPCT:-0}" -gt 5 ]; then
	say "  note: deep figures are a lower bound: ${DROPPCT}% of deep calls found the ring full (the agent"
	say "  cannot format that many JSON lines), and a failed reserve is cheaper than a written record."
fi
say ""

# agent CPU per million traced events
say "agent CPU (utime+stime, loop start to rings drained), per million events:"
printf '  %-10s %10s %12s %12s %8s %16s\n' CONFIG "CPU S" "CALLS" "RECORDS" "DROP %" "CPU S / M EVENTS"
for cfg in sentinel sent-norec deep deep+stk; do
	awk -v c="$cfg" -v calls="$CALLS" '$1 == c { cpu += $4; rec += $5; drop += $6; n++ }
	END {
		if (!n) { printf "  %-10s no data\n", c; exit }
		# sentinel: every call is a traced event, counted in the kernel;
		# deep: events are the cuda_launch records the BPF side emitted
		ev = (c == "sentinel") ? calls * n : rec
		printf "  %-10s %10.2f %12d %12d %8.1f %16.3f\n", c, cpu / n, calls, rec / n, \
			(rec + drop) ? 100 * drop / (rec + drop) : 0, ev ? cpu / (ev / 1e6) : 0 }' "$RES"
done
say "  (averages per round; sentinel counts calls, deep counts cuda_launch records written to the ring;"
say "   DROP % = ring reservations that failed because the agent fell behind: those calls paid less)"

replay_bench
# issue 20: what each mode adds to a replayed vLLM decode and prefill step,
# and the deep-dive switch; printed, not asserted
VLLM_TRAP_NS=$(awk -v b="$BASE" -v bb="$BAREM" 'BEGIN { if (bb != "nan" && bb > b) printf "%.0f", bb - b }') \
	BUILD=$BUILD bench/vllm.sh || say "bench/vllm.sh exited with $?"
# diagnosis (issue 5, owner: correlator/src/detect.c): step detector speed,
# printed, not asserted (target >= 1 M steps/s per core)
[ -x "$BUILD/bench/bench_detect" ] && "$BUILD/bench/bench_detect"
# the live step cut (owner: correlator/src/steps.c; bench/bench_cut.c): how long
# one interval's cut holds the agent's loop at 133 k kernels/s; printed. Side by
# side with an older tree: bench/cut.sh REV
say ""
say "== live step cut (bench_cut; side by side: bench/cut.sh REV) =="
[ -x "$BUILD/bench/bench_cut" ] && "$BUILD/bench/bench_cut" -s 20
say "   without copies back (steps cut by launch gaps, 1 launch in 7 joined):"
[ -x "$BUILD/bench/bench_cut" ] && "$BUILD/bench/bench_cut" -s 20 -g -j 7
# Kafka sink (issue 4, item 9, owner: bench/bench_kafka*): records/s to the
# mock cluster, bytes per record, bytes per hour sentinel vs deep; printed
say ""
BUILD=$BUILD bench/bench_kafka.sh || say "bench/bench_kafka.sh exited with $?"
# the CUPTI shim's channel (owner: bench/shim.sh, bench/bench_shim.c): the shim
# thread's and the agent's CPU at 133 k kernels/s, and what arrived; printed
say ""
BUILD=$BUILD bench/shim.sh || say "bench/shim.sh exited with $?"
# NCCL (issue 21, owner: bench/nccl.sh, bench/bench_nccl.c): per ncclAllReduce, sentinel
# and deep as a ratio to a bare uprobe; printed
say ""
BUILD=$BUILD bench/nccl.sh || say "bench/nccl.sh exited with $?"
# Python frames (owner: bench/python.sh, bench/py_work.py): a Python loop's wall
# time with the sampler off, at 49 Hz and at 999 Hz, side by side; printed
say ""
BUILD=$BUILD bench/python.sh || say "bench/python.sh exited with $?"
exit 0
