#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# sentinel_launches - per-launch uprobes come and go (issue 20), with real
# calls into libcudart and the stub libcuda (tests/integration/cuda_calls.c):
#   launch_sampling:      --launch-sampling 300ms/1s, launches in a loop for
#                         3 s: the flight recorder's window holds
#                         cudaLaunchKernel records only inside the windows
#                         the launch_probes records bound (attach .. detach),
#                         at least two windows, and copies (always probed)
#                         outside them too
#   deepdive_launch_probes: a deep-dive attaches the 12 graph and per-launch
#                         uprobes (the agent's perf_event fds), its launches
#                         are recorded; --off detaches them for real (the
#                         fds go back) and no launch is recorded after
source "$(dirname "$0")/lib.sh"
it_preflight launch_sampling deepdive_launch_probes
CTL=$BUILD/agentctl
if [ ! -x "$CTL" ]; then
	for n in launch_sampling deepdive_launch_probes; do
		echo "FAIL $n: $CTL not built (make test)"
	done
	exit 0
fi
SOCK=$T/ctl/agent.sock
ctl() { "$CTL" --socket "$SOCK" "$@"; }

# workload NAME INSTANCE SECS: cuda_calls of that instance, one thread calling
# in a loop for SECS once released, then lingering; started before the
# agent (--pid); its pid in WPID, its output in WOUT
workload() {
	WOUT=$T/$1.calls
	bg_start "$WOUT" env INFERTRACE_INSTANCE="$2" "$CUDA_CALLS" -t 1 -s "$3" -w "$T/$1.go" -l 30
	WPID=$BG_PID
	wait_line "$WOUT" 10 || { fail_because "cuda_calls printed nothing: $(head -c 200 "$WOUT.err")"; return 1; }
}
workload_end() { [ -n "${WPID:-}" ] && { kill "$WPID" 2>/dev/null; wait "$WPID" 2>/dev/null; }; WPID=; }

# -------------------------------------------------------- launch sampling --
INST=it-samp-$$
if workload samp "$INST" 3 &&
	agent_start samp -i 0.25 --pid "$WPID" --launch-sampling 300ms/1s --control-socket "$SOCK" \
		--shim-socket none; then
	if cuda_attached "$WPID" 10; then
		touch "$T/samp.go"
		wait_workload_done "$WOUT" 20 || fail_because "cuda_calls did not finish its calls"
		sleep 1.2 # the last window closes
		ctl deep-dive --instance "$INST" --duration 1 >/dev/null 2>&1
		if wait_record ".type == \"flight_recorder\" and .instance == \"$INST\"" 5; then
			sleep 0.5
			res=$(jqo --argjson p "$WPID" '
				[.[] | select(.type == "launch_probes" and .class == "launch")] as $lp
				| [range(0; $lp | length) as $i | select($lp[$i].action == "attach" and $lp[$i].reason == "sampling")
				   | [$lp[$i].ts_ns, ([$lp[$i + 1:][] | select(.action == "detach")][0].ts_ns // 1e30)]] as $w
				# the window the deep-dive sent (the workload no longer calls)
				| [.[] | select(.type == "cuda_launch" and .pid == $p)] as $l
				| ($l | map(select(.api == "cudaLaunchKernel"))) as $k
				| ($l | map(select(.api == "cudaMemcpyAsync"))) as $c
				| def inside: .ts_ns as $t | any($w[]; .[0] <= $t and $t <= .[1]);
				{windows: ($w | length), launches: ($k | length),
				 outside: ($k | map(select(inside | not)) | length),
				 copies: ($c | length), copies_outside: ($c | map(select(inside | not)) | length),
				 reasons: ([$lp[] | .reason] | unique)}')
			expect "launch_probes windows: $res" ge "$(jq .windows <<<"$res")" 2
			expect "no cudaLaunchKernel kept from the windows: $res" ge "$(jq .launches <<<"$res")" 1
			expect "cudaLaunchKernel recorded outside the windows: $res" eq "$(jq .outside <<<"$res")" 0
			expect "no copy kept outside the windows (copies are always probed): $res" ge "$(jq .copies_outside <<<"$res")" 1
			# (deep-dive too, unless the dive began inside a window: the probes were on)
			expect "reasons $(jq -c .reasons <<<"$res"), want sampling and idle" \
				jqe 'index("sampling") and index("idle")' <<<"$(jq -c .reasons <<<"$res")"
		else
			fail_because "no flight_recorder record after the deep-dive: $(agent_tail)"
		fi
	else
		fail_because "no attach record for pid $WPID: $(agent_tail)"
	fi
	workload_end
	agent_stop INT || fail_because "agent did not stop"
fi
workload_end
report launch_sampling

# ------------------------------------------------ deep-dive: real detach --
INST=it-dd-$$
if workload dd "$INST" 8 &&
	agent_start dd -i 0.25 --pid "$WPID" --control-socket "$SOCK" --shim-socket none; then
	if cuda_attached "$WPID" 10; then
		sleep 0.2
		f0=$(agent_fds perf_event)
		touch "$T/dd.go"
		sleep 0.5
		expect "sentinel: cuda_launch records before any deep-dive" eq "$(launches "$WPID")" 0
		ctl deep-dive --instance "$INST" --duration 30 >/dev/null 2>&1
		if wait_rec "\"pid\":$WPID," ".type == \"cuda_launch\" and .pid == $WPID and .api == \"cudaLaunchKernel\"" 10; then
			f1=$(agent_fds perf_event)
			expect "uprobes during the deep-dive: $f1, before $f0: want 12 more" eq "$((f1 - f0))" 12
		else
			fail_because "no cudaLaunchKernel record within 10 s of the deep-dive"
		fi
		ctl deep-dive --instance "$INST" --off >/dev/null 2>&1
		f2=
		for ((i = 0; i < 100; i++)); do
			f2=$(agent_fds perf_event)
			[ "$f2" -le "$f0" ] && break
			sleep 0.1
		done
		expect "uprobes 10 s after --off: $f2, want $f0 (detached)" eq "$f2" "$f0"
		stop=$(jqo --arg i "$INST" '[.[] | select(.type == "launch_probes" and .class == "launch" and .action == "detach")] | .[-1].ts_ns // 0')
		sleep 0.5
		n=$(grep -F '"type":"cuda_launch"' "$AGENT_OUT" | grep -F "\"pid\":$WPID," |
			jq -n -R --argjson after "$stop" '[inputs | fromjson? | select(.ts_ns > $after and (.api | test("^cu(da)?LaunchKernel")))] | length')
		expect "per-launch records after the detach record: $n" eq "$n" 0
		expect "no launch_probes detach record" [ "$stop" != 0 ]
	else
		fail_because "no attach record for pid $WPID: $(agent_tail)"
	fi
	workload_end
	agent_stop INT || fail_because "agent did not stop"
fi
workload_end
report deepdive_launch_probes
