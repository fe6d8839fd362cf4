#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# cuda_counts - every probed CUDA entry point, called a known number of times
# from known threads through the real libcudart and the stub libcuda
# (tests/integration/cuda_calls.c), is counted exactly, per entry point, pid
# and tid (sentinel --sentinel-launches all), reported once per call with its
# decoded arguments (deep; the GPU code loads cuModuleLoadData(Ex) as
# cuda_code_load records, not synchronisations), and user stacks are
# rate-limited per thread (deep, --stack-rate). Issue 20: the default sentinel (sync) attaches no graph or
# per-launch uprobe: those calls are not counted, the synchronising calls and
# copies are, and the agent holds 12 fewer uprobes than in deep mode (4
# per-launch and 2 graph entry points in each library); --sentinel-launches
# graphs adds the graph launches only (cuda_sentinel_sync, cuda_sentinel_graphs).
source "$(dirname "$0")/lib.sh"
it_preflight cuda_counts cuda_sentinel_sync cuda_sentinel_graphs cuda_deep_args cuda_stacks_rate

THREADS=3
CALLS=25
APIS='["cudaLaunchKernel","cudaLaunchKernel_ptsz","cudaLaunchKernelExC",
"cudaLaunchKernelExC_ptsz","cudaGraphLaunch","cudaGraphLaunch_ptsz","cudaMemcpyAsync",
"cudaMemcpyAsync_ptsz","cudaStreamSynchronize","cudaStreamSynchronize_ptsz",
"cudaDeviceSynchronize","cudaEventSynchronize","cudaMemcpy","cuLaunchKernel",
"cuLaunchKernel_ptsz","cuLaunchKernelEx","cuLaunchKernelEx_ptsz","cuGraphLaunch",
"cuGraphLaunch_ptsz","cuStreamSynchronize","cuCtxSynchronize","cuEventSynchronize",
"cuModuleLoadData","cuModuleLoadDataEx"]'

# run_cuda NAME [--pid] CUDA_CALLS_ARGS -- AGENT_ARGS: agent up, workload
# attached, released, exited, agent stopped. With --pid the workload starts
# first and the agent traces only it (deep mode: other CUDA processes on the
# node, benchmarks say, must not flood the rings); without, the agent finds
# it by itself. Sets PID, TIDS (JSON array). False (with the reason
# recorded) when a step fails.
run_cuda() {
	local name=$1 bypid= wargs=() go=$T/$1.go out=$T/$1.calls wpid
	shift
	[ "$1" = --pid ] && { bypid=1; shift; }
	while [ $# -gt 0 ] && [ "$1" != -- ]; do wargs+=("$1"); shift; done
	shift
	PID= TIDS=
	if [ -z "$bypid" ]; then
		agent_start "$name" -i 0.25 "$@" || { fail_because "agent did not start: $(agent_tail)"; return 1; }
	fi
	bg_start "$out" "$CUDA_CALLS" "${wargs[@]}" -w "$go"
	wpid=$BG_PID
	wait_line "$out" 10 || { fail_because "cuda_calls printed nothing: $(head -c 200 "$out.err")"; return 1; }
	PID=$(jq -r .pid "$out")
	TIDS=$(jq -c .tids "$out")
	[ "$(jq -r '.rt + .drv' "$out")" = 2 ] || { fail_because "cuda_calls could not load both libraries: $(cat "$out")"; return 1; }
	if [ -n "$bypid" ]; then
		agent_start "$name" -i 0.25 --pid "$PID" "$@" || { fail_because "agent did not start: $(agent_tail)"; return 1; }
	fi
	cuda_attached "$PID" 10 || { fail_because "no attach record with libcudart and libcuda for pid $PID: $(agent_tail)"; return 1; }
	sleep 0.2 # slack after the record: the probes are in place before it is written
	UPROBES=$(agent_fds 'perf_event') # the agent's uprobe links (one perf event each)
	touch "$go"
	wait_exit "$wpid" 30 || { fail_because "cuda_calls did not finish"; return 1; }
	[ "$WAIT_RC" = 0 ] || fail_because "cuda_calls exit $WAIT_RC"
	wait_record ".type==\"process\" and .event==\"exit\" and .pid==$PID" 10 ||
		fail_because "no process exit record for pid $PID"
	agent_stop INT || { fail_because "agent did not exit on SIGINT"; return 1; }
	[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
	return 0
}

# ---------------------------------------------------------------- sentinel --
if run_cuda cuda_sentinel -t "$THREADS" -n "$CALLS" -- --sentinel-launches all; then
	bad=$(jqo --argjson pid "$PID" --argjson tids "$TIDS" --argjson apis "$APIS" --argjson n "$CALLS" '
		[.[] | select(.type == "thread" and .pid == $pid)] as $th
		| [$tids[] as $t | $apis[] as $a
		   | ($th | map(select(.tid == $t) | .launches[$a] // 0) | add // 0) as $c
		   | select($c != $n) | "tid \($t) \($a)=\($c)"]
		+ [$th[] | select(.tid as $x | $tids | index($x) | not)
		   | select((.launches // {}) | length > 0) | "tid \(.tid) (not a worker) has \(.launches)"]
		| .[0:6] | join(", ")')
	expect "launch counts differ from $CALLS: $bad" [ "$bad" = '""' ]
	ntids=$(jqo --argjson pid "$PID" '[.[] | select(.type == "thread" and .pid == $pid and (.launches | length > 0)) | .tid] | unique | length')
	expect "launches on $ntids threads, want $THREADS" eq "$ntids" "$THREADS"
fi
report cuda_counts

# sentinel_counts NAME COUNTED: every thread counts CALLS of each API in
# COUNTED (a JSON array) and none of the others in APIS
sentinel_counts() {
	local bad
	bad=$(jqo --argjson pid "$PID" --argjson tids "$TIDS" --argjson apis "$APIS" --argjson on "$2" --argjson n "$CALLS" '
		[.[] | select(.type == "thread" and .pid == $pid)] as $th
		| [$tids[] as $t | $apis[] as $a
		   | ($th | map(select(.tid == $t) | .launches[$a] // 0) | add // 0) as $c
		   | (if ($on | index($a)) then $n else 0 end) as $want
		   | select($c != $want) | "tid \($t) \($a)=\($c) (want \($want))"]
		| .[0:6] | join(", ")')
	expect "$1: counts differ: $bad" [ "$bad" = '""' ]
}
SYNC_CLASS='["cudaMemcpyAsync","cudaMemcpyAsync_ptsz","cudaStreamSynchronize",
"cudaStreamSynchronize_ptsz","cudaDeviceSynchronize","cudaEventSynchronize","cudaMemcpy",
"cuStreamSynchronize","cuCtxSynchronize","cuEventSynchronize","cuModuleLoadData",
"cuModuleLoadDataEx"]'
GRAPH_CLASS='["cudaGraphLaunch","cudaGraphLaunch_ptsz","cuGraphLaunch","cuGraphLaunch_ptsz"]'

# the default: the launch calls of the real libcudart and the stub libcuda
# trap nothing (not counted: no probe; the fds say it is not attached at all)
if run_cuda cuda_sync --pid -t "$THREADS" -n "$CALLS" --; then
	sentinel_counts "default sentinel" "$SYNC_CLASS"
	# every GPU code load is sent, however short (the stub's return at once)
	n=$(jqo --argjson pid "$PID" '[.[] | select(.type == "cuda_code_load" and .pid == $pid)] | length')
	expect "default sentinel: $n cuda_code_load records, want $((THREADS * CALLS * 2)) (every call)" \
		eq "$n" $((THREADS * CALLS * 2))
	SYNC_UPROBES=$UPROBES
	n=$(jqo '[.[] | select(.type == "launch_probes" and .action == "attach")] | length')
	expect "default sentinel attached graph or per-launch probes ($n launch_probes records)" eq "$n" 0
fi
report cuda_sentinel_sync

if run_cuda cuda_graphs --pid -t "$THREADS" -n "$CALLS" -- --sentinel-launches graphs; then
	sentinel_counts "--sentinel-launches graphs" "$(jq -c -n --argjson a "$SYNC_CLASS" --argjson b "$GRAPH_CLASS" '$a + $b')"
	expect "uprobes: graphs holds $UPROBES, the default ${SYNC_UPROBES:-?}: want 4 more (2 graph entry points per library)" \
		eq "$((${UPROBES:-0} - ${SYNC_UPROBES:-0}))" 4
fi
report cuda_sentinel_graphs

# -------------------------------------------------------------------- deep --
# What round_once() in cuda_calls.c passes; stream is 0x5000 + thread index.
EXPECT='{
 "cudaLaunchKernel":         {"func":"0xabc0","grid":[7,8,9],"block":[32,4,2],"shared_mem":128},
 "cudaLaunchKernel_ptsz":    {"func":"0xabc1","grid":[7,8,9],"block":[32,4,2],"shared_mem":128},
 "cudaLaunchKernelExC":      {"func":"0xabc2","grid":[7,8,9],"block":[32,4,2],"shared_mem":256},
 "cudaLaunchKernelExC_ptsz": {"func":"0xabc3","grid":[7,8,9],"block":[32,4,2],"shared_mem":256},
 "cudaGraphLaunch":          {"graph_exec":"0x6000"},
 "cudaGraphLaunch_ptsz":     {"graph_exec":"0x6001"},
 "cudaMemcpyAsync":          {"bytes":32,"copy_kind":4},
 "cudaMemcpyAsync_ptsz":     {"bytes":16,"copy_kind":4},
 "cuLaunchKernel":           {"func":"0xdef0","grid":[1,2,3],"block":[4,5,6],"shared_mem":1024},
 "cuLaunchKernel_ptsz":      {"func":"0xdef1","grid":[1,2,3],"block":[4,5,6],"shared_mem":1024},
 "cuLaunchKernelEx":         {"func":"0xdef2","grid":[11,12,13],"block":[64,2,1],"shared_mem":512},
 "cuLaunchKernelEx_ptsz":    {"func":"0xdef3","grid":[11,12,13],"block":[64,2,1],"shared_mem":512},
 "cuGraphLaunch":            {"graph_exec":"0x7000"},
 "cuGraphLaunch_ptsz":       {"graph_exec":"0x7001"}
}'
# the call's one argument, as the record names it (docs/events.md,
# cuda_sync): the stream, the event of the event syncs, cudaMemcpy's copy
# kind (4, default); 0x0 for the device and context syncs. Thread i passes
# stream 0x500i and event 0x900i ("s", "e" below).
SYNCS='{"cudaStreamSynchronize":["stream","s"],"cudaStreamSynchronize_ptsz":["stream","s"],
"cudaDeviceSynchronize":["stream","0x0"],"cudaEventSynchronize":["event","e"],
"cudaMemcpy":["copy_kind",4],"cuStreamSynchronize":["stream","s"],
"cuCtxSynchronize":["stream","0x0"],"cuEventSynchronize":["event","e"]}'

if run_cuda cuda_deep --pid -t "$THREADS" -n "$CALLS" -- --mode deep; then
	# issue 20: deep mode attaches what the default sentinel leaves out
	expect "uprobes: deep holds $UPROBES, the default sentinel ${SYNC_UPROBES:-?}: want 12 more (6 graph and per-launch entry points per library)" \
		eq "$((${UPROBES:-0} - ${SYNC_UPROBES:-0}))" 12
	drops=$(jqo '[.[] | select(.type == "stats" and .final) | .bpf_drops.cuda_launch + .bpf_drops.cuda_sync] | add // "none"')
	expect "ring drops: $drops" [ "$drops" = 0 ]
	# one record per call, per thread and entry point, every argument decoded
	bad=$(jqo --argjson pid "$PID" --argjson tids "$TIDS" --argjson exp "$EXPECT" --argjson n "$CALLS" '
		[.[] | select(.type == "cuda_launch" and .pid == $pid)] as $l
		| [range($tids | length) as $i | $tids[$i] as $t | ($exp | keys[]) as $a
		   | ($exp[$a] + {stream: "0x500\($i)"}) as $e
		   | ($l | map(select(.tid == $t and .api == $a))) as $rs
		   | (if ($rs | length) != $n then "tid \($t) \($a): \($rs | length) records" else empty end),
		     ($rs[] | . as $r | select($e | to_entries | any(.value != $r[.key]))
		      | "tid \($t) \($a): \($r | del(.schema, .host, .instance, .stack))")]
		+ [$l[] | select(.tid as $x | $tids | index($x) | not) | "tid \(.tid) (not a worker): \(.api)"]
		+ [$l[] | select((.ts_ns | type) != "number" or .ts_ns <= 0 or .instance != "\(.host)/cuda_calls")
		   | "bad header \(del(.stack))"]
		| unique | .[0:4] | join("; ")')
	expect "cuda_launch records: $bad" [ "$bad" = '""' ]
	bad=$(jqo --argjson pid "$PID" --argjson tids "$TIDS" --argjson syncs "$SYNCS" --argjson n "$CALLS" '
		[.[] | select(.type == "cuda_sync" and .pid == $pid)] as $s
		| [range($tids | length) as $i | $tids[$i] as $t | ($syncs | keys[]) as $a
		   | $syncs[$a][0] as $f
		   | ({"s": "0x500\($i)", "e": "0x900\($i)"}[$syncs[$a][1] | tostring] // $syncs[$a][1]) as $want
		   | ($s | map(select(.tid == $t and .api == $a))) as $rs
		   | (if ($rs | length) != $n then "tid \($t) \($a): \($rs | length) records" else empty end),
		     ($rs[] | select(.[$f] != $want or (.dur_ns | type) != "number" or .dur_ns <= 0)
		      | "tid \($t) \($a): \($f) \(.[$f]) (want \($want)) dur_ns \(.dur_ns)")]
		| unique | .[0:4] | join("; ")')
	expect "cuda_sync records: $bad" [ "$bad" = '""' ]
	# the GPU code loads: a cuda_code_load record per call (the stub fails
	# them: ret not 0), none of them a cuda_sync, none counted in sync_count
	bad=$(jqo --argjson pid "$PID" --argjson tids "$TIDS" --argjson n "$CALLS" '
		[.[] | select(.pid == $pid)] as $all
		| [$all[] | select(.type == "cuda_code_load")] as $c
		| [$tids[] as $t | ("cuModuleLoadData", "cuModuleLoadDataEx") as $a
		   | ($c | map(select(.tid == $t and .api == $a))) as $rs
		   | (if ($rs | length) != $n then "tid \($t) \($a): \($rs | length) records" else empty end),
		     ($rs[] | select((.dur_ns | type) != "number" or .dur_ns <= 0 or (.ret | type) != "number" or .ret == 0)
		      | "tid \($t) \($a): \(del(.schema, .host))")]
		+ [$all[] | select(.type == "cuda_sync" and (.api | startswith("cuModule"))) | "a cuda_sync: \(.api)"]
		+ [($all | map(select(.type == "thread") | .sync_count) | add) as $sc
		   | (($tids | length) * $n * 8) as $want
		   | select($sc != $want) | "sync_count \($sc), want \($want) (8 synchronising calls a round)"]
		| unique | .[0:4] | join("; ")')
	expect "cuda_code_load records: $bad" [ "$bad" = '""' ]
	# default --stack-rate 100: the first launches of each thread carry a stack
	nstack=$(jqo --argjson pid "$PID" '[.[] | select(.type == "cuda_launch" and .pid == $pid and ((.stack // []) | length > 0))] | length')
	expect "no cuda_launch record with a non-empty stack" ge "$nstack" 1
	bad=$(jqo '[.[] | select(.type == "cuda_launch" and has("stack") and ((.stack | length) == 0 or (.stack | any(type != "string" or test("^0x[0-9a-f]+$") | not))))] | length')
	expect "$bad stack arrays empty or not hex addresses" eq "$bad" 0
fi
report cuda_deep_args

# ------------------------------------------------------------ stack rate ---
RATE=5
if run_cuda cuda_stacks --pid -t 2 -s 2 -- --mode deep --stack-rate "$RATE"; then
	# token bucket: at most RATE per second of the thread's launches plus a
	# burst of RATE; +1 for the refill at the window's edge
	res=$(jqo --argjson pid "$PID" --argjson tids "$TIDS" --argjson rate "$RATE" '
		[.[] | select(.type == "cuda_launch" and .pid == $pid)] as $l
		| [.[] | select(.type == "thread" and .pid == $pid)] as $th
		| [$tids[] as $t
		   | ($l | map(select(.tid == $t))) as $lt
		   | (if ($lt | length) > 0 then (($lt | map(.ts_ns) | max) - ($lt | map(.ts_ns) | min)) / 1e9 else 0 end) as $span
		   | ($rate * ($span | ceil) + $rate + 1) as $bound
		   | ($lt | map(select((.stack // []) | length > 0)) | length) as $recs
		   | ($th | map(select(.tid == $t) | .stacks) | add // 0) as $stacks
		   | ($th | map(select(.tid == $t) | .stacks_limited) | add // 0) as $limited
		   | {tid: $t, launches: ($lt | length), span: $span, bound: $bound, recs: $recs, stacks: $stacks, limited: $limited}]')
	bad=$(jq -r '[.[] | select(.launches < 100 or .recs < 1 or .recs > .bound or .stacks > .bound or .limited <= 0)] | map(tostring) | join(" ")' <<<"$res")
	expect "stack limits not kept: $bad" [ -z "$bad" ]
fi
report cuda_stacks_rate
