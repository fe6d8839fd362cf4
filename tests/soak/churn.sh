#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# Churn soak (issue 18, finding 18; `make soak`, not part of `make test`):
# a live agent, with no --pid, discovers and traces every process that loads
# CUDA; SOAK_PROCS (default 10,000) short-lived processes load the real
# libcudart.so and call into it (build/tests/integration/cuda_calls:
# SOAK_CALLS calls of each entry point per thread, after SOAK_DELAY s so that
# the agent traces them first), SOAK_PAR at a time. Every
# SOAK_EVERY (1,000) processes it prints the agent's resident memory, its
# CPU share over that batch and CPU time per process, and the agent's own
# table counts and malloc's heap in use and free (stats.memory: RSS growing
# while the heap in use stays flat is the allocator, not live data) from its
# last stats record. Done in each mode of SOAK_MODES ("sentinel deep").
#
# It prints figures and never fails on them (no timing assertion): after the
# warm-up, RSS and CPU per process should stay flat. It fails only when the
# agent dies or the workload does not run. The machine's other load shows in
# the figures: say what else ran when quoting them.
set -u
. "$(dirname "$0")/../integration/lib.sh"

PROCS=${SOAK_PROCS:-10000}
EVERY=${SOAK_EVERY:-1000}
PAR=${SOAK_PAR:-8}
CALLS=${SOAK_CALLS:-5}
# each process: load, wait DELAY s (the agent finds it), call, linger 0.1 s, exit
DELAY=${SOAK_DELAY:-0.2}
MODES=${SOAK_MODES:-sentinel deep}
HZ=$(getconf CLK_TCK)

if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP soak: needs root (the agent loads BPF)"
	exit 0
fi
for b in "$AGENT" "$CUDA_CALLS"; do
	[ -x "$b" ] || { echo "FAIL soak: $b not built (make soak builds it)"; exit 1; }
done

# agent CPU ticks (user + system) and RSS in KiB
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null; }
# the last stats record's table counts
tables() {
	tac "$AGENT_OUT" 2>/dev/null | grep -m1 '"type":"stats"' |
		jq -r '"traced \(.traced_processes) seen \(.processes_seen) exited \(.processes_exited) gone_early \(.processes_gone_early) files \(.attached_files) idle \(.idle_files // "-") heap_MiB \(if .memory then "\(.memory.heap_in_use_bytes / 1048576 * 10 | round / 10) free \(.memory.heap_free_bytes / 1048576 * 10 | round / 10)" else "-" end)"' 2>/dev/null
}
# entries of the agent's per-process and per-thread BPF maps (its own maps,
# found by the map ids of its descriptors: other agents may run beside it)
bpf_counts() {
	local id name out=""
	command -v bpftool >/dev/null || return 0
	for id in $(grep -h '^map_id:' /proc/"$1"/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -u); do
		name=$(bpftool map show id "$id" -j 2>/dev/null | jq -r '.name // empty')
		case "$name" in
		traced_procs | thread_stats | syscall_stats)
			out+=" $name $(bpftool map dump id "$id" -j 2>/dev/null | jq length)"
			;;
		esac
	done
	echo "bpf:$out"
}

soak_mode() {
	local mode=$1 n=0 t0 c0 t1 c1 tb cb rss batch_ok fails=0 i
	agent_start "soak_$mode" --mode "$mode" -i 1 --no-net ||
		{ echo "FAIL soak_$mode: agent did not start: $(agent_tail)"; return 1; }
	sleep 1
	echo "== $mode mode: $PROCS processes of cuda_calls -n $CALLS -d $DELAY -l 0.1, $PAR at a time, agent pid $AGENT_PID"
	printf '%8s %8s %8s %9s %8s %10s  %s\n' procs secs proc/s rss_MiB cpu_% cpu_ms/proc "agent tables (last stats), BPF map entries"
	t0=$(date +%s.%N) c0=$(cpu_ticks "$AGENT_PID")
	printf '%8d %8s %8s %9.1f %8s %10s  %s\n' 0 0 - "$(echo "$(rss_kib "$AGENT_PID") / 1024" | bc -l)" - - "$(tables)"
	tb=$t0 cb=$c0
	while [ "$n" -lt "$PROCS" ]; do
		# one batch: EVERY processes, PAR at a time, each to its end
		batch_ok=$(seq "$EVERY" | xargs -P "$PAR" -I{} "$CUDA_CALLS" -n "$CALLS" -d "$DELAY" -l 0.1 2>/dev/null |
			grep -c '"rt":1')
		n=$((n + EVERY))
		[ "$batch_ok" -lt "$EVERY" ] && fails=$((fails + EVERY - batch_ok))
		kill -0 "$AGENT_PID" 2>/dev/null ||
			{ echo "FAIL soak_$mode: the agent died after $n processes: $(agent_tail)"; return 1; }
		t1=$(date +%s.%N) c1=$(cpu_ticks "$AGENT_PID") rss=$(rss_kib "$AGENT_PID")
		printf '%8d %8.1f %8.1f %9.1f %8.1f %10.3f  %s\n' "$n" "$(echo "$t1 - $t0" | bc -l)" \
			"$(echo "$EVERY / ($t1 - $tb)" | bc -l)" "$(echo "$rss / 1024" | bc -l)" \
			"$(echo "100 * ($c1 - $cb) / $HZ / ($t1 - $tb)" | bc -l)" \
			"$(echo "1000 * ($c1 - $cb) / $HZ / $EVERY" | bc -l)" "$(tables); $(bpf_counts "$AGENT_PID")"
		tb=$t1 cb=$c1
	done
	# the agent's tables once every process is gone and a few stats intervals passed
	sleep 3
	echo "after 3 s idle: rss $(echo "$(rss_kib "$AGENT_PID") / 1024" | bc -l | xargs printf '%.1f') MiB, $(tables); $(bpf_counts "$AGENT_PID")"
	agent_stop INT || { echo "FAIL soak_$mode: the agent did not exit on SIGINT"; return 1; }
	[ "$fails" -eq 0 ] || { echo "FAIL soak_$mode: $fails workload runs did not load libcudart"; return 1; }
	[ "$AGENT_RC" -eq 0 ] || { echo "FAIL soak_$mode: agent exit $AGENT_RC: $(agent_tail)"; return 1; }
	echo "PASS soak_$mode (figures above; load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
}

rc=0
for m in $MODES; do
	soak_mode "$m" || rc=1
done
exit $rc
