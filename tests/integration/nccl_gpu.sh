#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# nccl_gpu - the NCCL kernel join live: 2 ranks of one communicator
# (tests/integration/nccl_gpu.c: the NCCL double, whose collectives launch
# their kernel through the real stub libcuda's cuLaunchKernelEx and wait for
# every rank; the real CUPTI shim with the CUPTI double reporting the launch
# callback and the kernel), each STEPS x (an all-reduce, then a group of an
# all-reduce and an all-gather sharing one kernel).
#   nccl_kernel_join     deep: every collective record joined to the kernel
#                        its call (or its group) launched: every field of the
#                        call and of the join (kernel, GPU start and end,
#                        duration, device, algorithm, protocol); the kernel
#                        records joined to their cuLaunchKernelEx (uprobe and
#                        callback); each collective_wait names the rank whose
#                        kernel started last, arrivals = kernel starts
#   nccl_kernel_summary  sentinel: the collective_summary rows count every
#                        call joined, and their GPU time is the kernels' time; no
#                        collective record is sent, and a deep-dive's window
#                        sends one per call, every field as in deep mode
#                        (the stream of the all-reduce not read: 0x0), made
#                        JSON only then (kept in binary form)
source "$(dirname "$0")/lib.sh"
it_preflight nccl_kernel_join nccl_kernel_summary

NCCL_GPU=$BUILD/tests/integration/nccl_gpu
FAKE=$BUILD/tests/fakes/nccl/libnccl.so.2
STEPS=4
RANKS=2
INST=it-nccl-$$
CTL=$BUILD/agentctl
SOCK=$T/ctl/agent.sock

if [ ! -x "$NCCL_GPU" ] || [ ! -f "$FAKE" ] || [ ! -f "$BUILD/libinfertrace_cupti.so" ]; then
	for n in nccl_kernel_join nccl_kernel_summary; do
		echo "FAIL $n: $NCCL_GPU, $FAKE or the shim not built (make test)"
	done
	exit 0
fi

# run_ranks NAME MODE: RANKS ranks up (shim loaded), the agent on their pids
# in MODE, every shim connected, the ranks released; once the agent joined
# every kernel, the ranks exit and the agent stops. Sets TIDS (JSON array,
# by rank), HASH (the comm) and CALLS (every rank's call lines, with rank,
# pid and tid).
run_ranks() {
	local name=$1 mode=$2 go=$T/$1.go ex=$T/$1.exit sock=$T/$1.d/shim.sock idb r p cond
	local wps=() pids=() aargs=()
	idb=$((0x20 + RANDOM % 0x50))
	HASH=$(nccl_id_hash "$idb")
	TIDS= CALLS=
	for ((r = 0; r < RANKS; r++)); do
		bg_start "$T/$name.rank$r" env INFERTRACE_SHIM_SOCKET="$sock" \
			INFERTRACE_INSTANCE="$INST" \
			"$NCCL_GPU" -L "$FAKE" -r "$r" -R "$RANKS" -i "$idb" -k "$STEPS" -w "$go" -e "$ex"
		wps+=("$BG_PID")
	done
	for ((r = 0; r < RANKS; r++)); do
		wait_line "$T/$name.rank$r" 10 ||
			{ fail_because "rank $r printed nothing: $(head -c 300 "$T/$name.rank$r.err")"; return 1; }
		pids+=("$(head -n 1 "$T/$name.rank$r" | jq -r .pid)")
		aargs+=(--pid "${pids[$r]}")
	done
	TIDS=$(for ((r = 0; r < RANKS; r++)); do head -n 1 "$T/$name.rank$r" | jq .tid; done | jq -s -c .)
	agent_start "$name" -i 0.25 --mode "$mode" "${aargs[@]}" --shim-socket "$sock" \
		--control-socket "$SOCK" ||
		{ fail_because "agent did not start: $(agent_tail)"; return 1; }
	for p in "${pids[@]}"; do
		wait_record ".type==\"process\" and .pid==$p and ((.libraries // []) | any(test(\"libnccl\")))
			and ((.libraries // []) | any(test(\"libcuda\\\\.so\")))" 10 ||
			{ fail_because "pid $p: no process record with libnccl and libcuda: $(agent_tail)"; return 1; }
		cond=".type == \"shim_status\" and .pid == $p"
		[ "$mode" = deep ] && cond="$cond and .capture == \"deep\""
		wait_record "$cond" 10 || { fail_because "no shim_status ($mode) for pid $p: $(agent_tail)"; return 1; }
	done
	sleep 0.2 # the probes are in place before the process record is written
	touch "$go"
	for ((r = 0; r < RANKS; r++)); do
		wait_workload_done "$T/$name.rank$r" 30 ||
			{ fail_because "rank $r did not finish: $(head -c 300 "$T/$name.rank$r.err")"; return 1; }
	done
	# the ranks stay until the agent has joined every kernel (an exit releases held collectives)
	wait_record ".type == \"stats\" and .gpu.joined >= $((RANKS * 2 * STEPS))" 10 ||
		fail_because "stats never counted $((RANKS * 2 * STEPS)) joined GPU records"
	# sentinel: the window of the instance, sent by a deep-dive once every call is recorded
	if [ "$mode" = sentinel ]; then
		wait_record ".type == \"stats\" and .nccl.collectives >= $((RANKS * 3 * STEPS))" 10 ||
			fail_because "stats never counted $((RANKS * 3 * STEPS)) collectives"
		SENT_BEFORE=$(jqo '[.[] | select(.type == "collective")] | length')
		"$CTL" --socket "$SOCK" deep-dive --instance "$INST" --duration 2 >/dev/null 2>&1
		wait_record ".type == \"flight_recorder\" and .instance == \"$INST\"" 5 ||
			fail_because "no flight_recorder record after the deep-dive: $(agent_tail)"
		sleep 0.3
	fi
	touch "$ex"
	for ((r = 0; r < RANKS; r++)); do
		wait_exit "${wps[$r]}" 30 || { fail_because "rank $r did not exit"; return 1; }
		[ "$WAIT_RC" = 0 ] || fail_because "rank $r exit $WAIT_RC: $(head -c 300 "$T/$name.rank$r.err")"
		[ "$r" = $((RANKS - 1)) ] && break
		wait_record ".type==\"process\" and .event==\"exit\" and .pid==${pids[$r]}" 10 ||
			fail_because "no exit record for ${pids[$r]}"
	done
	agent_finish "${pids[$((RANKS - 1))]}"
	CALLS=$(for ((r = 0; r < RANKS; r++)); do
		jq -c --argjson r "$r" --argjson p "${pids[$r]}" --argjson t "$(jq ".[$r]" <<<"$TIDS")" \
			'select(has("seq")) + {rank: $r, pid: $p, tid: $t}' "$T/$name.rank$r"
	done | jq -s -c .)
	expect "the ranks made $(jq length <<<"$CALLS") calls, want $((RANKS * 3 * STEPS))" \
		eq "$(jq length <<<"$CALLS")" $((RANKS * 3 * STEPS))
}

# coll_bad STREAMS: every collective record in the agent's output against
# the call it came from (rank, seq), every field; STREAMS "all" (deep: each
# call's stream) or "regs" (sentinel: the stream of the 7-argument calls is
# on the stack, not read: 0x0). The first problems, "" when none.
coll_bad() {
	jqo --arg h "$HASH" --argjson calls "$CALLS" --argjson n "$RANKS" --arg st "$1" '
		[.[] | select(.type == "collective")] as $l
		| [$calls[] as $c
		   | ($l | map(select(.pid == $c.pid and .seq == $c.seq))) as $m
		   | if ($m | length) != 1 then "rank \($c.rank) seq \($c.seq): \($m | length) records"
		     else $m[0] | ({tid: $c.tid, comm: $h, comm_known: true, rank: $c.rank, nranks: $n,
			op: $c.op, count: $c.count, datatype_id: $c.datatype,
			datatype: (if $c.datatype == 7 then "float32" else "bfloat16" end),
			bytes: ($c.count * (if $c.datatype == 7 then 4 else 2 end)),
			redop: ({"0": "sum", "2": "max"}[$c.redop | tostring]), root: null, peer: null,
			stream: (if $st == "regs" and $c.op == "allreduce" then "0x0" else $c.stream end),
			ts_ns: .enqueue_ns, joined: true, kernel: $c.kernel,
			gpu_start_ns: $c.start, gpu_end_ns: $c.end, gpu_dur_ns: ($c.end - $c.start),
			device: $c.rank, algorithm: "RING", protocol: "LL", from_kernel_name: false}
			| to_entries) as $want
		     | . as $r
		     | ([$want[] | select($r[.key] != .value) | "\(.key) \($r[.key]) want \(.value)"]
			+ (if .enqueue_ns < $c.t0 or .enqueue_ns > $c.t1 then ["enqueue_ns not in the call"] else [] end)
			+ (if $c.group then (if .group == 0 then ["group 0 in a group"] else [] end)
			   elif .group != 0 then ["group \(.group) outside a group"] else [] end))
		     | select(length > 0) | "rank \($c.rank) seq \($c.seq): \(join(", "))"
		     end]
		+ [$l[] | select(.comm != $h) | "collective on comm \(.comm)"]
		# the two calls of a group share its number, and each group has its own
		+ ([$l[] | select(.group != 0)] | group_by([.pid, .group]) | map(length) | unique
		   | if . != [2] then ["calls per group \(.)"] else [] end)
		| .[0:4] | join("; ")'
}

# ------------------------------------------------------------------- deep --
if run_ranks nccl_join deep; then
	bad=$(coll_bad all)
	expect "collectives: $bad" [ "$bad" = '""' ]
	# the kernel records: each joined to its cuLaunchKernelEx, uprobe and callback
	bad=$(jqo --argjson calls "$CALLS" '
		[.[] | select(.type == "kernel")] as $k
		| [$calls | unique_by([.pid, .corr])[] as $c
		   | ($k | map(select(.pid == $c.pid and .correlation_id == $c.corr))) as $m
		   | if ($m | length) != 1 then "corr \($c.corr): \($m | length) kernel records"
		     else $m[0] | select(.tid != $c.tid or .name != $c.kernel or .start_ns != $c.start
			or .end_ns != $c.end or .device != $c.rank or .stream != 7 + $c.rank or .matched != true
			or .launch_api != "cuLaunchKernelEx" or .launch_src != "uprobe+cupti"
			or .launch_ts_ns < $c.t0 or .launch_ts_ns > $c.t1)
		     | "corr \($c.corr): \(del(.schema, .host, .instance))" end]
		+ [$k[] | select(.correlation_id as $x | $calls | map(.corr) | index($x) | not)
		   | "unexpected kernel corr \(.correlation_id)"]
		| .[0:3] | join("; ")')
	expect "kernels: $bad" [ "$bad" = '""' ]
	# every collective on every rank: one wait, arrivals = kernel starts, the last started last
	bad=$(jqo --arg h "$HASH" --argjson calls "$CALLS" --argjson n "$RANKS" '
		[.[] | select(.type == "collective_wait" and .comm == $h)] as $w
		| [$calls | group_by(.seq)[] as $c
		   | ($w | map(select(.seq == $c[0].seq))) as $m
		   | ($c | max_by(.start)) as $last
		   | if ($m | length) != 1 then "seq \($c[0].seq): \($m | length) waits"
		     else $m[0] | select(.end != "complete" or .arrived != $n or .expected != $n or .nranks != $n
			or .op != $c[0].op or .last_rank != $last.rank or .last_arrival_ns != $last.start
			or .pid != $last.pid or .tid != $last.tid or .ts_ns != ($c | map(.start) | min)
			or .wait_max_ns != $last.start - ($c | map(.start) | min)
			or ([.ranks[] | [.rank, .pid, .tid, .arrival, .arrival_ns, .wait_ns]] | sort)
			   != ([$c[] | [.rank, .pid, .tid, "kernel", .start, $last.start - .start]] | sort))
		     | "seq \(.seq): \(del(.schema, .host, .instance))" end]
		| .[0:2] | join("; ")')
	expect "waits: $bad" [ "$bad" = '""' ]
	st=$(jqo '[.[] | select(.type == "stats" and .final) | .nccl] | last')
	n=$((RANKS * 3 * STEPS))
	expect "stats nccl: $st" jqe --argjson n "$n" --argjson r "$RANKS" '.collectives == $n and .kernel_joined == $n
		and .kernel_missed == 0 and .comm_unknown == 0 and .wait_complete == $n / $r' <<<"$st"
fi
report nccl_kernel_join

# --------------------------------------------------------------- sentinel --
if run_ranks nccl_summary sentinel; then
	# per rank and op: calls, bytes, joined, GPU time of the joined kernels, waits
	want=$(jq -c 'group_by([.rank, .op]) | map({rank: .[0].rank, op: .[0].op, calls: length,
		bytes: (map(.count * (if .datatype == 7 then 4 else 2 end)) | add), joined: length,
		gpu_ns: (map(.end - .start) | add), waits: length})' <<<"$CALLS")
	got=$(jqo -c --arg h "$HASH" '[.[] | select(.type == "collective_summary" and .comm == $h)]
		| group_by([.rank, .op]) | map({rank: .[0].rank, op: .[0].op, calls: (map(.calls) | add),
		bytes: (map(.bytes) | add), joined: (map(.joined) | add), gpu_ns: (map(.gpu_ns) | add),
		waits: (map(.waits) | add)})')
	expect "collective_summary $got, want $want" [ "$got" = "$want" ]
	st=$(jqo '[.[] | select(.type == "stats" and .final) | .nccl] | last')
	expect "stats nccl: $st" jqe --argjson n $((RANKS * 3 * STEPS)) \
		'.kernel_joined == $n and .kernel_missed == 0' <<<"$st"
	# the single records: none sent, then the window's, one per call, as deep mode writes them
	expect "sentinel sent $SENT_BEFORE collective records before the deep-dive" eq "$SENT_BEFORE" 0
	bad=$(coll_bad regs)
	expect "window collectives: $bad" [ "$bad" = '""' ]
	rc=$(jqo '[.[] | select(.type == "stats" and .final)] | last | .recorder.fmt_errors')
	expect "recorder.fmt_errors $rc" eq "$rc" 0
fi
report nccl_kernel_summary
