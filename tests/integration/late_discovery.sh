#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# late_discovery - a CUDA process started after the agent is found by the
# agent on its own (no --pid), traced (attach record, exact launch counts),
# and once it exits the agent holds no uprobe link and no file descriptor for
# its libraries any more (--lib-grace 0: detached at once; the grace period
# is lib_grace.sh's).
#
# The workload loads private copies of libcudart and the stub libcuda, so
# its uprobes are told apart from those of any other CUDA process on the node
# (uprobes are per file; bpftool perf list names the file of each).
source "$(dirname "$0")/lib.sh"
it_preflight late_discovery

THREADS=2
CALLS=5
NAPIS=24 # every probed entry point (cuda_calls.c)

main() {
	local lib=$T/lib go=$T/late.go out=$T/late.calls wpid pid

	mkdir -p "$lib"
	cp -L /usr/local/cuda/lib64/libcudart.so "$lib/libcudart.so.13" &&
		cp -L /usr/local/cuda/lib64/stubs/libcuda.so "$lib/libcuda.so" ||
		{ fail_because "cannot copy the CUDA libraries"; return; }
	command -v bpftool >/dev/null || { fail_because "bpftool missing (make deps)"; return; }

	agent_start late -i 0.25 --sentinel-launches all --lib-grace 0 || { fail_because "agent did not start: $(agent_tail)"; return; }
	# uprobe links of the agent on our copies, and all its perf_event fds
	ours() {
		bpftool perf list 2>/dev/null >"$T/perf.txt"; grep -E "^pid $AGENT_PID .*(uprobe|uretprobe) .*filename .*$lib/" "$T/perf.txt" >"$T/ours.txt"
		wc -l <"$T/ours.txt"
	}
	others() { bpftool perf list 2>/dev/null | grep -E "^pid $AGENT_PID .*(uprobe|uretprobe)" | grep -v "$lib/" | sort | md5sum; }
	local perf0 others0 ours0
	sleep 0.5 # the initial /proc scan may attach to CUDA processes already running
	perf0=$(agent_fds 'perf_event')
	others0=$(others)
	ours0=$(ours)
	expect "uprobes on our library copies before the process started: $ours0" eq "$ours0" 0

	CUDA_CALLS_RT=$lib/libcudart.so.13 CUDA_CALLS_DRV=$lib/libcuda.so \
		bg_start "$out" "$CUDA_CALLS" -t "$THREADS" -n "$CALLS" -w "$go"
	wpid=$BG_PID
	wait_line "$out" 10 || { fail_because "cuda_calls printed nothing: $(head -c 200 "$out.err")"; return; }
	pid=$(jq -r .pid "$out")
	cuda_attached "$pid" 10 || { fail_because "pid $pid not discovered (no process record with both libraries): $(agent_tail)"; return; }
	local rec
	rec=$(jqo --argjson pid "$pid" '[.[] | select(.type == "process" and .pid == $pid)] | first')
	expect "first process record is not an attach: $rec" [ "$(jq -r .event <<<"$rec")" = attach ]
	expect "attach record comm/instance: $rec" [ "$(jq -r '.comm + " " + (.instance | split("/") | last)' <<<"$rec")" = "cuda_calls cuda_calls" ]
	local during perf_during
	during=$(ours)
	perf_during=$(agent_fds 'perf_event')
	# --sentinel-launches all: 13 runtime entry points + 5 return probes on the
	# synchronising ones (stream, device, event, cudaMemcpy), 11 driver ones + 5
	# return probes (cuStream/cuCtx/cuEventSynchronize, cuModuleLoadData(Ex))
	expect "uprobe links on our copies while traced: $during, want 34 ($(awk '{n=split($9, p, "/"); printf "%s %s %s, ", $7, p[n], $11}' "$T/ours.txt"))" eq "$during" 34
	expect "perf_event fds while traced: $perf_during, baseline $perf0" ge "$perf_during" $((perf0 + 34))

	sleep 0.2
	touch "$go"
	wait_exit "$wpid" 30 || { fail_because "cuda_calls did not finish"; return; }
	expect "cuda_calls exit $WAIT_RC" [ "$WAIT_RC" = 0 ]
	wait_record ".type==\"process\" and .event==\"exit\" and .pid==$pid" 10 ||
		fail_because "no process exit record for pid $pid"
	# detaching happens right after the exit record; bounded wait for it
	local i after=$during
	for ((i = 0; i < 100; i++)); do
		after=$(ours)
		[ "$after" = 0 ] && break
		sleep 0.1
	done
	expect "uprobe links on our copies after exit: $after" eq "$after" 0
	local fds
	fds=$(ls -l "/proc/$AGENT_PID/fd" 2>/dev/null | grep -c -- "$lib/")
	expect "agent fds still open on the libraries: $fds" eq "$fds" 0
	local perf1
	perf1=$(agent_fds 'perf_event')
	if [ "$(others)" = "$others0" ]; then
		expect "perf_event fds after exit: $perf1, baseline $perf0" eq "$perf1" "$perf0"
	fi

	# still running afterwards, then the counts
	expect "agent died after the process exit" kill -0 "$AGENT_PID"
	agent_stop INT || { fail_because "agent did not exit on SIGINT"; return; }
	expect "agent exit $AGENT_RC: $(agent_tail)" [ "$AGENT_RC" = 0 ]
	local total want=$((THREADS * CALLS * NAPIS)) bad
	total=$(jqo --argjson pid "$pid" '[.[] | select(.type == "thread" and .pid == $pid) | .launches[]] | add // 0')
	expect "launches counted for pid $pid: $total, want $want" eq "$total" "$want"
	bad=$(jqo --argjson pid "$pid" --argjson tids "$(jq -c .tids "$out")" --argjson n "$((CALLS * NAPIS))" '
		[$tids[] as $t | [.[] | select(.type == "thread" and .pid == $pid and .tid == $t) | .launches[]] | add // 0
		 | select(. != $n)] | length')
	expect "a worker thread's launches differ from $((CALLS * NAPIS))" eq "$bad" 0
}

main
report late_discovery
