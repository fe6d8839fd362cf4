#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# cuda_nested - a runtime call that enters the driver (as libcudart does on a
# real GPU: docs/operations.md, "Checking a GPU node") is one call, the
# runtime's: both probes trap, the driver's is folded into it. Through the
# nesting runtime double (tests/fakes/nest_cudart.c) and the stub libcuda
# (tests/integration/nest_calls.c says what a round calls):
#
#   cuda_nested_deep:      per thread and round, cuda_launch records for
#                          cudaLaunchKernel 2 (one nested, one failing before
#                          the driver), cudaLaunchKernelExC 1, cudaGraphLaunch 1
#                          and the direct cuLaunchKernel 1 (right after the
#                          failed runtime call: not taken for nested) and
#                          cuGraphLaunch 1, no cuLaunchKernelEx; cuda_sync
#                          cudaStreamSynchronize 1 and the direct
#                          cuStreamSynchronize 1; thread.launches count the
#                          same and thread.nested_calls 4
#   cuda_nested_sentinel:  the default sentinel (sync probes only): launches
#                          count both syncs once per round, nested_calls 1
source "$(dirname "$0")/lib.sh"
NEST_CALLS=$BUILD/tests/integration/nest_calls
it_preflight cuda_nested_deep cuda_nested_sentinel
if [ ! -x "$NEST_CALLS" ] || [ ! -f "$BUILD/tests/fakes/nest/libcudart.so.13" ]; then
	for n in cuda_nested_deep cuda_nested_sentinel; do
		echo "FAIL $n: $NEST_CALLS or the nesting runtime double not built (make test)"
	done
	exit 0
fi

THREADS=2
ROUNDS=25

# run_nested NAME AGENT_ARGS...: workload up and waiting, the agent on its pid,
# attached to both libraries, workload released and exited, agent stopped.
# Sets PID and TIDS (JSON array).
run_nested() {
	local name=$1 go=$T/$1.go out=$T/$1.work wp
	shift
	PID= TIDS=
	bg_start "$out" "$NEST_CALLS" -t "$THREADS" -n "$ROUNDS" -w "$go"
	wp=$BG_PID
	wait_line "$out" 10 || { fail_because "nest_calls printed nothing: $(head -c 300 "$out.err")"; return 1; }
	PID=$(head -n 1 "$out" | jq -r .pid)
	TIDS=$(head -n 1 "$out" | jq -c .tids)
	agent_start "$name" -i 0.25 --pid "$PID" "$@" || { fail_because "agent did not start: $(agent_tail)"; return 1; }
	cuda_attached "$PID" 10 || { fail_because "no attach record with libcudart and libcuda for pid $PID: $(agent_tail)"; return 1; }
	sleep 0.2 # slack after the record: the probes are in place before it is written
	touch "$go"
	wait_exit "$wp" 30 || { fail_because "nest_calls did not finish"; return 1; }
	[ "$WAIT_RC" = 0 ] || fail_because "nest_calls exit $WAIT_RC: $(head -c 300 "$out.err")"
	agent_finish "$PID"
}

# counts TYPE FIELD: {"tid": {FIELD value: records}} of PID's TYPE records
counts() {
	jqo --argjson pid "$PID" --arg t "$1" --arg f "$2" '[.[] | select(.type == $t and .pid == $pid)]
		| group_by(.tid) | map({key: (.[0].tid | tostring),
		  value: (group_by(.[$f]) | map({key: .[0][$f], value: length}) | from_entries)}) | from_entries'
}

# per_thread WANT GOT: the problems ("" when none) of GOT {"tid": {k: n}}
# against WANT {k: n per round} on every worker thread
per_thread() {
	jq -n -r --argjson want "$1" --argjson got "$2" --argjson tids "$TIDS" --argjson r "$ROUNDS" '
		[$tids[] as $t | ($got[$t | tostring] // {}) as $g
		 | (($want | keys) + ($g | keys) | unique)[] as $k
		 | (($want[$k] // 0) * $r) as $w | select(($g[$k] // 0) != $w)
		 | "tid \($t) \($k)=\($g[$k] // 0), want \($w)"] | .[0:4] | join("; ")'
}

# thread_counts: {"tid": {api: launches, "nested_calls": n}} over the thread records
thread_counts() {
	jqo --argjson pid "$PID" '[.[] | select(.type == "thread" and .pid == $pid)] | group_by(.tid)
		| map({key: (.[0].tid | tostring), value: (map((.launches // {}) + {nested_calls: (.nested_calls // 0)})
		  | reduce .[] as $x ({}; reduce ($x | to_entries[]) as $e (.; .[$e.key] += $e.value))
		  | with_entries(select(.value != 0)))}) | from_entries'
}

# --------------------------------------------------------------------- deep --
if run_nested cuda_nested_deep --mode deep; then
	bad=$(per_thread '{"cudaLaunchKernel":2,"cudaLaunchKernelExC":1,"cudaGraphLaunch":1,
		"cuLaunchKernel":1,"cuGraphLaunch":1}' "$(counts cuda_launch api)")
	expect "cuda_launch: $bad" [ -z "$bad" ]
	bad=$(per_thread '{"cudaStreamSynchronize":1,"cuStreamSynchronize":1}' "$(counts cuda_sync api)")
	expect "cuda_sync: $bad" [ -z "$bad" ]
	bad=$(per_thread '{"cudaLaunchKernel":2,"cudaLaunchKernelExC":1,"cudaGraphLaunch":1,
		"cuLaunchKernel":1,"cuGraphLaunch":1,"cudaStreamSynchronize":1,"cuStreamSynchronize":1,
		"nested_calls":4}' "$(thread_counts)")
	expect "thread records: $bad" [ -z "$bad" ]
fi
report cuda_nested_deep

# ----------------------------------------------------------------- sentinel --
if run_nested cuda_nested_sentinel; then
	n=$(jqo --argjson pid "$PID" '[.[] | select(.type == "cuda_launch" and .pid == $pid)] | length')
	expect "$n cuda_launch records in sentinel" eq "$n" 0
	bad=$(per_thread '{"cudaStreamSynchronize":1,"cuStreamSynchronize":1,"nested_calls":1}' \
		"$(thread_counts)")
	expect "thread records: $bad" [ -z "$bad" ]
fi
report cuda_nested_sentinel
