#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# recorder - the flight recorder's kernel half (bpf/cuda.bpf.c flight_push,
# agent/pipeline/recorder.c pull_kernel; issue 4, item 4): in sentinel mode every
# launch is kept, with its arguments and stack, and sent only on a trigger.
#
#   recorder_every_launch:  a sentinel agent, a workload of 3 threads x 25
#                           calls of each of the 14 launch entry points,
#                           then idle; no cuda_launch record is sent; an
#                           `agentctl export --perfetto` of the instance
#                           draws all 1050 launches; a deep-dive sends the
#                           window: exactly 25 cuda_launch records per (entry
#                           point, thread), none twice, the arguments passed
#                           in registers decoded as in deep mode (those on the
#                           stack left out, regs_only), a user stack on each
#                           but those counted in stacks_missing (a stack map
#                           bucket held another stack)
#   recorder_launches_bound: --recorder-launches 100 (128 per CPU): the
#                           burst of 1050 launches overruns the rings; every
#                           launch is accounted for: written 1050 = copied +
#                           overwritten, copied <= 128 per CPU and tick that
#                           copied (stats: pulls), and the window sends
#                           exactly the copied ones
source "$(dirname "$0")/lib.sh"
CTL=$BUILD/agentctl
it_preflight recorder_every_launch recorder_launches_bound
if [ ! -x "$CTL" ]; then
	for n in recorder_every_launch recorder_launches_bound; do
		echo "FAIL $n: $CTL not built (make test)"
	done
	exit 0
fi

THREADS=3
CALLS=25
LAUNCH_APIS=14 # the 22 probed entry points less the 8 synchronising ones
SOCK=$T/ctl/agent.sock
ctl() { "$CTL" --socket "$SOCK" "$@"; }

# workload_start NAME INSTANCE: cuda_calls of that instance, waiting for its
# go file; its pid in WPID
workload_start() {
	bg_start "$T/$1.calls" env INFERTRACE_INSTANCE="$2" "$CUDA_CALLS" -t "$THREADS" -n "$CALLS" \
		-w "$T/$1.go" -l 60
	WPID=$BG_PID
}

# workload_go NAME: once the agent attached it, released, done with its
# calls, then lingering
workload_go() {
	local out=$T/$1.calls
	wait_line "$out" 10 || { fail_because "cuda_calls printed nothing: $(head -c 200 "$out.err")"; return 1; }
	cuda_attached "$WPID" 10 || { fail_because "no attach record for pid $WPID: $(agent_tail)"; return 1; }
	sleep 0.2
	touch "$T/$1.go"
	wait_workload_done "$out" 10 && return 0
	fail_because "cuda_calls did not finish its calls"
	return 1
}

# workload NAME INSTANCE: both, under an agent already running
workload() { workload_start "$1" "$2" && workload_go "$1"; }

# workload_end: the lingering workload goes, quietly
workload_end() { [ -n "${WPID:-}" ] && { kill "$WPID" 2>/dev/null; wait "$WPID" 2>/dev/null; }; WPID=; }

# launch records of PID in the agent's output (the window's)
launch_recs() {
	grep -F '"type":"cuda_launch"' "$AGENT_OUT" | grep -F "\"pid\":$1," |
		jq -c -n -R '[inputs | fromjson?]'
}

# ----------------------------------------------------------- every launch --
INST=it-rec-$$
# a stack on every launch: 350 launches per thread fit in a bucket of 1000
if agent_start rec_all -i 0.25 --sentinel-launches all --control-socket "$SOCK" --shim-socket none --stack-rate 1000; then
	if workload rec_all "$INST"; then
		sleep 0.5
		expect "sentinel sent cuda_launch records before any trigger" \
			eq "$(launch_recs "$WPID" | jq length)" 0
		out=$(ctl export --perfetto "$T/rec.json" --instance "$INST" 2>&1)
		expect "export failed: $out" grep -q "trace events" <<<"$out"
		nl=$(jq --argjson p "$WPID" '[.traceEvents[] | select(.ph == "X" and .cat == "launch" and .pid == $p)] | length' "$T/rec.json" 2>/dev/null)
		expect "the export draws $nl launches, want $((LAUNCH_APIS * THREADS * CALLS))" \
			eq "$nl" $((LAUNCH_APIS * THREADS * CALLS))
		ctl deep-dive --instance "$INST" --duration 2 >/dev/null 2>&1
		if wait_record ".type == \"flight_recorder\" and .instance == \"$INST\"" 5; then
			sleep 0.5
			recs=$(launch_recs "$WPID")
			n=$(jq length <<<"$recs")
			expect "the window sent $n launches, want $((LAUNCH_APIS * THREADS * CALLS))" \
				eq "$n" $((LAUNCH_APIS * THREADS * CALLS))
			bad=$(jq -c --argjson n "$CALLS" --argjson apis "$LAUNCH_APIS" --argjson th "$THREADS" '
				(group_by([.api, .tid]) | map({k: [.[0].api, .[0].tid], c: length})) as $g
				| [ (if ($g | length) != $apis * $th then "\($g | length) (api, tid) pairs" else empty end),
				    ($g[] | select(.c != $n) | "\(.k): \(.c)"),
				    (if (map([.tid, .ts_ns]) | unique | length) != length then "a launch sent twice" else empty end),
				    (.[] | select(.api == "cudaLaunchKernel") | select(.func != "0xabc0" or .grid != [7,8,9] or .block != [32,4,2] or .regs_only != true or has("stream") or has("shared_mem")) | "cudaLaunchKernel args \(.)"),
				    (.[] | select(.api == "cuLaunchKernel") | select(.func != "0xdef0" or .grid != [1,2,3] or .regs_only != true or has("block") or has("stream")) | "cuLaunchKernel args \(.)"),
				    (.[] | select(.api == "cuLaunchKernelEx") | select(.func != "0xdef2" or .regs_only != true or has("grid") or has("stream")) | "cuLaunchKernelEx args \(.)"),
				    (.[] | select(.api == "cudaMemcpyAsync") | select(.bytes != 32 or .copy_kind != 4 or (.stream | test("^0x500[0-2]$") | not) or has("regs_only")) | "cudaMemcpyAsync args \(.)"),
				    (.[] | select(.api == "cuGraphLaunch") | select(.graph_exec != "0x7000" or (.stream | test("^0x500[0-2]$") | not)) | "cuGraphLaunch args \(.)"),
				    (.[] | select(has("stack") and (.stack | length) < 2) | "short stack: \(.api) \(.tid)")
				  ] | .[:5]' <<<"$recs")
			expect "window records: $bad" [ "$bad" = "[]" ]
			wr=$(jqo --arg i "$INST" '[.[] | select(.type == "flight_recorder" and .instance == $i)][0].records')
			expect "the flight_recorder record counts $wr, want >= $n" ge "$wr" "$n"
		else
			fail_because "no flight_recorder record after the deep-dive: $(agent_tail)"
		fi
	fi
	workload_end
	agent_stop INT || fail_because "agent did not stop"
	# every launch has its stack (the bucket of 1000 holds 350 per thread),
	# except those whose stack map bucket held another stack: counted
	if [ -n "${recs:-}" ]; then
		nost=$(jq '[.[] | select(has("stack") | not)] | length' <<<"$recs")
		miss=$(jqo '[.[] | select(.type == "stats")][-1].recorder.kernel_launches.stacks_missing')
		expect "$nost launches without a stack, stacks_missing says $miss" eq "$nost" "$miss"
		expect "$nost of $n launches without a stack" le $((nost * 10)) "$n"
	fi
else
	fail_because "agent did not start: $(agent_tail)"
fi
report recorder_every_launch

# ------------------------------------------------------------------ bound --
INST=it-recb-$$
# --pid: the counts are of the flight rings, node-wide; only this workload
# may write them, whatever other CUDA process runs on the machine
workload_start rec_bound "$INST"
if agent_start rec_bound -i 0.25 --sentinel-launches all --control-socket "$SOCK" --shim-socket none \
	--recorder-launches 100 --pid "$WPID"; then
	if workload_go rec_bound; then
		sleep 0.5
		ctl deep-dive --instance "$INST" --duration 2 >/dev/null 2>&1
		if wait_record ".type == \"flight_recorder\" and .instance == \"$INST\"" 5; then
			sleep 0.5
			sent=$(launch_recs "$WPID" | jq length)
			agent_stop INT || fail_because "agent did not stop"
			st=$(jqo '[.[] | select(.type == "stats")][-1].recorder.kernel_launches')
			w=$(jq .written <<<"$st") cp=$(jq .copied <<<"$st") ov=$(jq .overwritten <<<"$st")
			cpus=$(jq .cpus <<<"$st") pulls=$(jq .pulls <<<"$st")
			expect "kernel_launches $st: want per_cpu 128" eq "$(jq .per_cpu <<<"$st")" 128
			expect "kernel_launches $st: want 1050 written" eq "$w" $((LAUNCH_APIS * THREADS * CALLS))
			expect "kernel_launches $st: copied + overwritten != written" eq $((cp + ov)) "$w"
			# each tick copies at most a ring per CPU; the burst spans a tick or
			# two, more on a loaded machine: bound by the ticks that copied
			expect "kernel_launches $st: no tick copied" ge "$pulls" 1
			expect "kernel_launches $st: copied more than the rings hold" le "$cp" $((pulls * 128 * cpus))
			expect "kernel_launches $st: nothing overwritten by a burst of 1050" ge "$ov" 1
			expect "the window sent $sent launches, want the $cp copied" eq "$sent" "$cp"
		else
			fail_because "no flight_recorder record after the deep-dive: $(agent_tail)"
		fi
	fi
	workload_end
	agent_stop INT 2>/dev/null
else
	fail_because "agent did not start: $(agent_tail)"
fi
report recorder_launches_bound
