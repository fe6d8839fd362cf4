#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# sched - off-CPU time and run-queue wait of a traced thread (--pid).
#   offcpu_sleep: a thread sleeping 10 x 50 ms is ~500 ms off-CPU, blocked,
#                 with one offcpu event per sleep
#   runq_pinned:  a busy thread pinned to the CPU of another busy loop waits
#                 in the run queue (preempted), and the loop's process is
#                 named (by_pid) as one that took its CPU
# Durations are measured, never the code's speed: tolerances cover a loaded
# machine (late wake-ups), not a slow agent.
source "$(dirname "$0")/lib.sh"
it_preflight offcpu_sleep runq_pinned

# ------------------------------------------------------------ offcpu_sleep --
if run_traced offcpu "" "$WORKLOAD" sleep -w "$T/offcpu.go" 10 50; then
	blocked=$(thread_sum offcpu_blocked_ns)
	expect "offcpu_blocked_ns $blocked, want 450-700 ms" between "$blocked" 450000000 700000000
	ev=$(jqo --argjson tid "$WTID" --argjson pid "$WPID" '
		[.[] | select(.type == "offcpu" and .pid == $pid and .tid == $tid)] as $e
		| {sleeps: [$e[] | select(.cause == "blocked" and .dur_ns >= 49000000 and .dur_ns <= 250000000)] | length,
		   blocked: [$e[] | select(.cause == "blocked" and .dur_ns >= 1000000)] | length,
		   short: [$e[] | select(.dur_ns < 1000000)] | length,
		   comm: ([$e[] | .comm] | unique),
		   ms: [$e[] | {ms: (.dur_ns / 1e4 | round / 100), cause}]}')
	expect "offcpu events of 50 ms sleeps: $ev, want 10" [ "$(jq .sleeps <<<"$ev")" = 10 ]
	expect "blocked offcpu events >= 1 ms: $ev, want 10 (11 at most)" between "$(jq .blocked <<<"$ev")" 10 11
	expect "offcpu events under the 1 ms threshold in sentinel mode: $ev" [ "$(jq .short <<<"$ev")" = 0 ]
	count=$(thread_sum offcpu_count)
	# with every interval the thread records and the events saw (a rare CI failure saw 9 of 10)
	expect "offcpu_count $count, want >= 10: thread records $(jqo --argjson tid "$WTID" \
		'[.[] | select(.type == "thread" and .tid == $tid) | {offcpu_count, offcpu_blocked_ns, offcpu_hist_us}]' | jq -c .)" \
		ge "$count" 10
fi
report offcpu_sleep

# ------------------------------------------------------------- runq_pinned --
# a busy loop and the traced busy thread share one CPU: each runs about half
# of the time and waits in the run queue the other half
cpu=$(($(nproc) > 1 ? 1 : 0))
SPIN=1.5
bg_start "$T/spinner" taskset -c "$cpu" "$WORKLOAD" spin -w "$T/runq.go" 4
spinner=$BG_PID
if run_traced runq "" taskset -c "$cpu" "$WORKLOAD" spin -w "$T/runq.go" "$SPIN"; then
	runq=$(thread_sum runq_ns)
	rcount=$(thread_sum runq_count)
	pre=$(thread_sum offcpu_preempted_ns)
	blk=$(thread_sum offcpu_blocked_ns)
	# fair share gives ~750 ms; 20 % of the spin is a floor that other load
	# on the CPU can only raise
	expect "runq_ns $runq, want >= 300 ms" ge "$runq" 300000000
	expect "runq_count $rcount, want > 0" ge "$rcount" 1
	expect "offcpu_preempted_ns $pre, want > 0" ge "$pre" 1
	# a wait in the run queue is part of an off-CPU interval
	expect "runq_ns $runq > offcpu ns $((pre + blk))" le "$runq" $((pre + blk))
	hist=$(jqo --argjson tid "$WTID" --argjson pid "$WPID" '[.[] | select(.type == "thread" and .pid == $pid and .tid == $tid) | .runq_hist_us[]] | add // 0')
	expect "runq_hist_us holds $hist waits, runq_count $rcount" eq "$hist" "$rcount"
	# the spinner's process (by_pid) took the CPU from the traced thread at least once
	sp=$(jqo --argjson tid "$WTID" --argjson pid "$WPID" --argjson s "$spinner" '[.[] | select(.type == "offcpu"
		and .pid == $pid and .tid == $tid and .cause == "preempted" and .by_pid == $s)] | length')
	expect "no preempted offcpu event with by_pid = the spinner $spinner" ge "$sp" 1
fi
kill "$spinner" 2>/dev/null
report runq_pinned
