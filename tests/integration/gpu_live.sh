#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# gpu_live - the live GPU path end to end (issue 3): the agent's uprobes, the
# real CUPTI shim (build/libinfertrace_cupti.so) talking to the agent's
# socket, the CUPTI test double playing CUPTI inside the workload
# (tests/integration/gpu_live.c), and the correlator in the agent.
#
#   gpu_live_deep:       every kernel, graph kernel, memcpy and memset record
#                        joined, pair by pair, to the call that launched it:
#                        pid, tid, entry point, correlation id, launch_src and
#                        launch_ts_ns = the uprobe's cuda_launch ts_ns of that
#                        call; the kernel whose launch never came is emitted
#                        unmatched and counted; shim_status says monotonic
#   gpu_live_sentinel:   gpu_summary records count every kernel and memcpy,
#                        matched and unmatched, for the workload's pid
#   gpu_live_replay:     the deep run's own JSON lines through --replay give
#                        the same joins (as a user, no root)
#   gpu_live_pidns:      the workload in its own pid namespace (unshare
#                        --pid --fork, as in a container): the shim's tids
#                        are mapped to host tids, the joins are the same
#   gpu_live_exit:       the agent stopped (SIGSTOP) while the workload runs
#                        and exits; held by gdb inside an rb_sched callback
#                        while it does (the same consume then reaches the
#                        exit on rb_misc before the launches on rb_cuda); or
#                        stopped over the exit only with the GPU records in
#                        the shim's last message: it wakes to them and the
#                        exit at once; every pair still joins, the exit is
#                        reported once and every ring record is decoded once
source "$(dirname "$0")/lib.sh"
GPU_LIVE=$BUILD/tests/integration/gpu_live
it_preflight gpu_live_deep gpu_live_sentinel gpu_live_replay gpu_live_pidns gpu_live_exit
if [ ! -x "$GPU_LIVE" ] || [ ! -f "$BUILD/libinfertrace_cupti.so" ]; then
	for n in gpu_live_deep gpu_live_sentinel gpu_live_replay gpu_live_pidns gpu_live_exit; do
		echo "FAIL $n: $GPU_LIVE or $BUILD/libinfertrace_cupti.so not built (make test)"
	done
	exit 0
fi

THREADS=2
ROUNDS=6

# wait_done: (bounded) until the workload has printed its last line
wait_done() {
	local i
	for ((i = 0; i < 200; i++)); do
		jq -e -s 'any(.[]; has("done"))' "$WOUT" >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	return 1
}

# exit_stopped WP FILE...: the agent stopped (SIGSTOP) while FILEs are
# created and the workload WP runs to its exit, then continued
exit_stopped() {
	local wp=$1 rc=0
	shift
	kill -STOP "$AGENT_PID"
	touch "$@"
	wait_exit "$wp" 30 || rc=1
	kill -CONT "$AGENT_PID"
	[ "$rc" = 0 ] || fail_because "gpu_live did not finish with the agent stopped"
	return $rc
}

# exit_in_ring WP FILE...: the agent held by gdb in a ring callback of
# rb_sched (an off-CPU record of the waiting workload) while FILEs are
# created and the workload WP runs to its exit, then let go: the consume in
# progress goes on to rb_misc, and decodes the exit there before rb_cuda's
# new launches unless the exit itself catches rb_cuda up
exit_in_ring() {
	local wp=$1 hold=$T/hold.sh reg=rsi
	shift
	command -v gdb >/dev/null || { fail_because "gdb is not installed (make deps)"; return 1; }
	[ "$(uname -m)" = aarch64 ] && reg=x1
	rm -f "$T/held-exit"
	cat >"$hold" <<-EOF
		touch $*
		for i in \$(seq 600); do
			if [ ! -e /proc/$wp ] || grep -q '^State:.*Z' /proc/$wp/status 2>/dev/null; then
				touch "$T/held-exit"
				exit 0
			fi
			sleep 0.05
		done
	EOF
	# decode_record(a, data, size): data's first field is its type (struct
	# event_hdr, bpf/events.h), 3 = EV_OFFCPU; the break is at the entry
	timeout 120 gdb -p "$AGENT_PID" -batch -nx \
		-ex "break *decode_record if *(unsigned short *)\$$reg == 3" -ex continue \
		-ex "shell sh $hold" -ex delete -ex detach >"$T/gdb.log" 2>&1
	grep -q '^Breakpoint 1, ' "$T/gdb.log" ||
		{ fail_because "gdb never held the agent in decode_record: $(tail -c 300 "$T/gdb.log")"; return 1; }
	[ -e "$T/held-exit" ] || { fail_because "gpu_live did not exit while the agent was held"; return 1; }
	wait_exit "$wp" 30 || { fail_because "gpu_live did not finish"; return 1; }
}

# run_live NAME MODE [PREFIX...]: workload up (shim loaded, pointed at a
# fresh socket), agent in MODE on its pid with that socket, shim connected,
# workload released, exited, agent stopped. Sets WPID (host pid), WOUT (the
# workload's lines) and TIDMAP ({"tid in the workload's namespace": host
# tid}). PREFIX (e.g. unshare --pid --fork) runs the workload in its own
# pid namespace: WPID is then unshare's child.
run_live() {
	local name=$1 mode=$2 go=$T/$1.go ex=$T/$1.exit sock=$T/$1.d/shim.sock wp cond st want
	shift 2
	WOUT=$T/$name.work WPID= TIDMAP='{}'
	bg_start "$WOUT" env INFERTRACE_SHIM_SOCKET="$sock" "$@" "$GPU_LIVE" -t "$THREADS" -n "$ROUNDS" \
		-w "$go" -e "$ex" -m "$mode" ${FROZEN:+$([ "$FROZEN" = exit ] && echo -L)}
	wp=$BG_PID
	wait_line "$WOUT" 10 || { fail_because "gpu_live printed nothing: $(head -c 300 "$WOUT.err")"; return 1; }
	WPID=$(head -n 1 "$WOUT" | jq -r .pid)
	if [ $# -gt 0 ]; then
		WPID=$(pgrep -P "$wp" | head -n 1)
		num "$WPID" || { fail_because "no child of $*"; return 1; }
		# NSpid: host tid first, the namespace's last
		TIDMAP=$(for st in /proc/"$WPID"/task/*/status; do
			awk '/^NSpid:/ { printf "{\"%s\":%s}\n", $NF, $2 }' "$st"
		done | jq -s -c 'add // {}')
	fi
	# FROZEN: no off-CPU, run-queue or syscall record while the workload
	# waits (ring: off-CPU records, one to hold the agent in)
	agent_start "$name" -i 0.25 --mode "$mode" --pid "$WPID" --shim-socket "$sock" \
		${FROZEN:+--offcpu-threshold $([ "$FROZEN" = ring ] && echo 1 || echo 60000)} \
		${FROZEN:+--runq-threshold 60000 --syscall-threshold 60000} ||
		{ fail_because "agent did not start: $(agent_tail)"; return 1; }
	cuda_attached "$WPID" 10 || { fail_because "no attach record with libcudart and libcuda for pid $WPID"; return 1; }
	# the shim retries its connection every 20 ms; deep: the agent's switch acknowledged
	cond=".type == \"shim_status\" and .pid == $WPID"
	[ "$mode" = deep ] && cond="$cond and .capture == \"deep\""
	wait_record "$cond" 10 || { fail_because "no shim_status ($mode) for pid $WPID: $(agent_tail)"; return 1; }
	sleep 0.2 # slack after the attach record: the probes are in place before it is written
	if [ "${FROZEN:-}" = run ]; then
		# it wakes to the uprobes, the shim's messages and the exit at once
		exit_stopped "$wp" "$ex" "$go" || return 1
	elif [ "${FROZEN:-}" = ring ]; then
		exit_in_ring "$wp" "$ex" "$go" || return 1
	else
		touch "$go"
		wait_done
		if [ "${FROZEN:-}" = exit ]; then
			# (gpu_live -L) the GPU records leave in the shim's last message:
			# the agent takes the launch callbacks, then is stopped over the exit
			want=$(jq -s '[.[] | select(has("corr"))] | length' "$WOUT")
			wait_record ".type == \"stats\" and .gpu.shim_records >= $want" 10 ||
				fail_because "the agent never took the $want launch callbacks before the exit"
			exit_stopped "$wp" "$ex" || return 1
		else
			# the process stays until the agent has joined what it sent
			want=$(jq -s '[.[] | select(has("corr")) | .n] | add // 0' "$WOUT")
			wait_record ".type == \"stats\" and .gpu.joined >= $want" 10 ||
				fail_because "stats never counted $want joined GPU records before the exit"
			touch "$ex"
			wait_exit "$wp" 30 || { fail_because "gpu_live did not finish"; return 1; }
		fi
	fi
	[ "$WAIT_RC" = 0 ] || fail_because "gpu_live exit $WAIT_RC: $(head -c 300 "$WOUT.err")"
	agent_finish "$WPID"
}

# calls: the workload's per-call lines, as one JSON array, with host tids
calls_json() {
	jq -s -c --argjson m "$TIDMAP" '[.[] | select(has("corr")) | .tid = ($m[.tid | tostring] // .tid)]' "$WOUT"
}
orphan_corr() { jq -s -r '.[] | select(has("orphan_corr")) | .orphan_corr' "$WOUT"; }

# check_joins FILE UPFILE PID CALLS ORPHAN: pair by pair; prints the first
# problems ("" when none). UPFILE holds the live run's cuda_launch records:
# every call with a uprobe must carry that call's uprobe ts_ns (the one in
# its [t0, t1] on its thread) as launch_ts_ns; memset has no uprobe, its
# launch is the callback alone, stamped in [t1, t2].
check_joins() {
	local file=$1 upfile=$2 pid=$3 calls=$4 orphan=$5 up
	up=$(jq -c -n -R --argjson pid "$pid" '[inputs | fromjson? | select(.type == "cuda_launch" and .pid == $pid)]' "$upfile")
	jq -r -n -R --argjson pid "$pid" --argjson calls "$calls" --argjson orphan "$orphan" \
		--argjson up "$up" '
	[inputs | fromjson? | select((.type == "kernel" or .type == "memcpy" or .type == "memset")
		and (.pid == $pid or .pid == null))] as $gpu
	| [ $calls[] as $c
	  | ($gpu | map(select(.correlation_id == $c.corr))) as $g
	  | (if $c.kind == "memset" then null
	     else ($up | map(select(.tid == $c.tid and .api == $c.api and .ts_ns >= $c.t0 and .ts_ns <= $c.t1)))
	     end) as $u
	  | (if $c.kind == "graph" or $c.kind == "kernel" then "kernel" else $c.kind end) as $type
	  | (if $u != null and ($u | length) != 1
	     then "corr \($c.corr) \($c.api): \($u | length) cuda_launch records in [t0,t1] on tid \($c.tid)"
	     else empty end),
	    (if ($g | length) != $c.n then "corr \($c.corr) \($c.api): \($g | length) GPU records, want \($c.n)" else empty end),
	    ($g[] | . as $r
	     | [ (if .type != $type then "type \(.type)" else empty end),
		 (if .matched != true then "not matched" else empty end),
		 (if .pid != $pid then "pid \(.pid)" else empty end),
		 (if .tid != $c.tid then "tid \(.tid) want \($c.tid)" else empty end),
		 (if .launch_api != $c.api then "launch_api \(.launch_api)" else empty end),
		 (if $u == null then
		    (if .launch_src != "cupti" then "launch_src \(.launch_src) want cupti" else empty end),
		    (if (.launch_ts_ns < $c.t1 or .launch_ts_ns > $c.t2) then "callback ts \(.launch_ts_ns) not in [t1,t2]" else empty end)
		  else
		    (if .launch_src != "uprobe+cupti" then "launch_src \(.launch_src) want uprobe+cupti" else empty end),
		    (if ($u | length) == 1 and .launch_ts_ns != $u[0].ts_ns then "launch_ts_ns \(.launch_ts_ns) != uprobe ts_ns \($u[0].ts_ns)" else empty end)
		  end),
		 (if .start_ns <= .launch_ts_ns or .launch_to_start_ns != .start_ns - .launch_ts_ns
		  then "start \(.start_ns) launch \(.launch_ts_ns) l2s \(.launch_to_start_ns)" else empty end),
		 (if $c.kind == "graph" then
		    (if .graph_id == 0 or .graph_node_id == 0 then "graph ids \(.graph_id)/\(.graph_node_id)" else empty end)
		  else
		    (if .graph_id != 0 then "graph_id \(.graph_id) outside a graph" else empty end)
		  end) ]
	     | select(length > 0) | "corr \($c.corr) \($c.api) \($r.type) node \($r.graph_node_id): \(join(", "))"),
	    (if $c.kind == "graph" and ($g | map(.graph_node_id) | unique | length) != $c.n
	     then "corr \($c.corr): graph node ids not distinct: \($g | map(.graph_node_id))" else empty end)
	  ]
	+ ( ($gpu | map(select(.correlation_id == $orphan))) as $o
	    | if ($o | length) != 1 then ["orphan: \($o | length) records, want 1"]
	      else [$o[0] | select(.matched != false or .pid != $pid or .tid != null or .launch_src != null
		or .launch_ts_ns != null or .launch_api != null) | "orphan not unmatched: \(.)"] end )
	+ ( ($calls | map(.corr)) as $known
	    | [$gpu[] | select(.correlation_id as $x | ($known | index($x)) == null and $x != $orphan)
	       | "unexpected \(.type) corr \(.correlation_id)"] )
	| .[0:4] | join("; ")' "$file"
}

# ------------------------------------------------------------------- deep --
if run_live gpu_deep deep; then
	calls=$(calls_json)
	orphan=$(orphan_corr)
	ncalls=$(jq length <<<"$calls")
	want=$(jq '[.[].n] | add' <<<"$calls")
	expect "workload made $ncalls calls, want $((THREADS * ROUNDS * 5))" eq "$ncalls" $((THREADS * ROUNDS * 5))
	bad=$(check_joins "$AGENT_OUT" "$AGENT_OUT" "$WPID" "$calls" "$orphan")
	expect "joins: $bad" [ -z "$bad" ]
	# the counters say the same: every record joined but the orphan
	read -r joined unmatched shim_drop <<<"$(jqo -r '[.[] | select(.type == "stats" and .final)][0].gpu
		| "\(.joined) \(.unmatched) \(.shim_dropped)"')"
	expect "stats.gpu.joined $joined, want $want" eq "$joined" "$want"
	expect "stats.gpu.unmatched $unmatched, want 1" eq "$unmatched" 1
	expect "stats.gpu.shim_dropped $shim_drop" eq "$shim_drop" 0
	clock=$(jqo -r --argjson pid "$WPID" '[.[] | select(.type == "shim_status" and .pid == $pid) | .clock] | unique | join(",")')
	expect "shim_status clock '$clock', want monotonic" [ "$clock" = monotonic ]
	cp "$AGENT_OUT" "$T/deep-recording.jsonl"
	DEEP_CALLS=$calls DEEP_ORPHAN=$orphan DEEP_PID=$WPID DEEP_WANT=$want
fi
report gpu_live_deep

# --------------------------------------------------------------- sentinel --
if run_live gpu_sentinel sentinel; then
	calls=$(calls_json)
	nk=$(jq '[.[] | select(.kind == "kernel" or .kind == "graph") | .n] | add' <<<"$calls")
	nm=$(jq '[.[] | select(.kind == "memcpy") | .n] | add' <<<"$calls")
	read -r k m ms matched unmatched <<<"$(jqo -r --argjson pid "$WPID" '
		[.[] | select(.type == "gpu_summary" and .pid == $pid)]
		| "\(map(.kernels) | add) \(map(.memcpys) | add) \(map(.memsets) | add) \(map(.matched) | add) \(map(.unmatched) | add)"')"
	expect "gpu_summary kernels $k, want $((nk + 1)) (with the orphan)" eq "$k" $((nk + 1))
	expect "gpu_summary memcpys $m, want $nm" eq "$m" "$nm"
	expect "gpu_summary memsets $ms, want 0 (sentinel)" eq "$ms" 0
	expect "gpu_summary matched $matched, want $((nk + nm))" eq "$matched" $((nk + nm))
	expect "gpu_summary unmatched $unmatched, want 1" eq "$unmatched" 1
	# the top kernel by time is the graph kernel (3 per graph launch)
	top=$(jqo -r --argjson pid "$WPID" '[.[] | select(.type == "gpu_summary" and .pid == $pid) | .top_kernels[]]
		| group_by(.name) | map({name: .[0].name, n: (map(.count) | add)}) | sort_by(-.n) | .[0] | "\(.name)=\(.n)"')
	expect "top kernel $top, want _Z8gl_graphILi1EEvPf=$((THREADS * ROUNDS * 3))" \
		[ "$top" = "_Z8gl_graphILi1EEvPf=$((THREADS * ROUNDS * 3))" ]
	nk_deep=$(jqo '[.[] | select(.type == "kernel")] | length')
	expect "$nk_deep kernel records in sentinel mode" eq "$nk_deep" 0
	clock=$(jqo -r --argjson pid "$WPID" '[.[] | select(.type == "shim_status" and .pid == $pid) | .clock] | unique | join(",")')
	expect "shim_status clock '$clock', want monotonic" [ "$clock" = monotonic ]
fi
report gpu_live_sentinel

# ----------------------------------------------------------------- replay --
# The deep recording re-analysed offline: its kernel/memcpy/memset records
# carry their launches, so the replay joins them again, the same way.
if [ -z "${DEEP_CALLS:-}" ]; then
	skip gpu_live_replay "no deep recording (gpu_live_deep failed)"
else
	rec=$T/deep-recording.jsonl
	mkdir -p "$T/u" && chmod 0755 "$T" && chmod 0777 "$T/u" && chmod 0644 "$rec"
	setpriv --reuid=65534 --regid=65534 --clear-groups "$AGENT" --replay "$rec" --mode deep \
		-o "$T/u/replayed.jsonl" 2>"$T/replayed.err"
	rc=$?
	cp "$T/u/replayed.jsonl" "$T/replayed.jsonl" 2>/dev/null
	expect "replay exit $rc: $(tail -n 2 "$T/replayed.err" | tr '\n' '|')" [ "$rc" = 0 ]
	bad=$(check_joins "$T/replayed.jsonl" "$rec" "$DEEP_PID" "$DEEP_CALLS" "$DEEP_ORPHAN")
	expect "replayed joins: $bad" [ -z "$bad" ]
	# same pairs as live: (corr, graph node) -> (pid, tid, api, launch ts, src)
	pairs() {
		jq -c -n -R '[inputs | fromjson? | select(.type == "kernel" or .type == "memcpy" or .type == "memset")
			| [.type, .correlation_id, .graph_node_id, .pid, .tid, .launch_api, .launch_ts_ns, .launch_src, .start_ns, .matched]]
			| sort' "$1"
	}
	expect "replayed records differ from the live ones" [ "$(pairs "$rec")" = "$(pairs "$T/replayed.jsonl")" ]
	read -r ok joined unmatched <<<"$(jq -r -n -R '[inputs | fromjson? | select(.type == "replay_status")][0]
		| "\(.ok) \(.joined) \(.unmatched)"' "$T/replayed.jsonl")"
	expect "replay_status ok=$ok" [ "$ok" = true ]
	expect "replay_status joined $joined, want $DEEP_WANT" eq "$joined" "$DEEP_WANT"
	expect "replay_status unmatched $unmatched, want 1" eq "$unmatched" 1
fi
report gpu_live_replay

# ------------------------------------------------------------------ pidns --
if ! unshare --pid --fork true 2>/dev/null; then
	skip gpu_live_pidns "unshare --pid --fork does not work here"
elif run_live gpu_pidns deep unshare --pid --fork; then
	calls=$(calls_json)
	nsp=$(head -n 1 "$WOUT" | jq -r .pid)
	expect "workload pid in its namespace is $nsp, the host's $WPID: not a pid namespace" [ "$nsp" != "$WPID" ]
	expect "no tid mapping read from /proc/$WPID/task" [ "$(jq length <<<"$TIDMAP")" -ge "$THREADS" ]
	bad=$(check_joins "$AGENT_OUT" "$AGENT_OUT" "$WPID" "$calls" "$(orphan_corr)")
	expect "joins: $bad" [ -z "$bad" ]
	read -r mapped unmapped <<<"$(jqo -r '[.[] | select(.type == "stats" and .final)][0].gpu
		| "\(.shim_tid_mapped) \(.shim_tid_unmapped)"')"
	expect "stats.gpu.shim_tid_mapped $mapped, want $(jq length <<<"$calls")" eq "$mapped" "$(jq length <<<"$calls")"
	expect "stats.gpu.shim_tid_unmapped $unmapped" eq "$unmapped" 0
fi
report gpu_live_pidns

# ------------------------------------------------------------------- exit --
# The exit must not overtake the records the shim sent before it (every
# pair still joins), nor be decoded twice. run: the agent is stopped while
# the workload runs and exits; it wakes to the uprobes, the shim's messages
# and the exit at once. ring: the agent is held (gdb) inside an rb_sched
# callback while the workload runs and exits; let go, the same consume
# decodes the exit on rb_misc next, and the launches written to rb_cuda
# meanwhile must be decoded before the shim's last messages are (with one
# ring_buffer for all three rings they came after them: 3 runs in 20 of
# "run" joined as cupti alone). exit: the GPU records wait in the shim's last
# message (gpu_live -L), sent as the process ends; the agent is stopped
# over the exit only. Sentinel mode with thresholds no wait reaches keeps
# the rings quiet but for the exit (the joins are read from gpu_summary).
for FROZEN in run ring exit; do
	mode=deep
	[ "$FROZEN" = exit ] && mode=sentinel
	run_live gpu_exit_$FROZEN $mode || continue
	if [ $mode = deep ]; then
		bad=$(check_joins "$AGENT_OUT" "$AGENT_OUT" "$WPID" "$(calls_json)" "$(orphan_corr)")
		expect "$FROZEN: joins: $bad" [ -z "$bad" ]
	else
		want=$(calls_json | jq '[.[] | select(.kind != "memset") | .n] | add')
		read -r matched unmatched <<<"$(jqo -r --argjson pid "$WPID" '
			[.[] | select(.type == "gpu_summary" and .pid == $pid)]
			| "\(map(.matched) | add) \(map(.unmatched) | add)"')"
		expect "$FROZEN: gpu_summary matched $matched, want $want" eq "$matched" "$want"
		expect "$FROZEN: gpu_summary unmatched $unmatched, want 1 (the orphan)" eq "$unmatched" 1
	fi
	n=$(jqo --argjson p "$WPID" '[.[] | select(.type == "process" and .event == "exit" and .pid == $p)] | length')
	expect "$FROZEN: $n process exit records for pid $WPID, want 1" eq "$n" 1
	read -r dec put <<<"$(jqo -r '[.[] | select(.type == "stats" and .final)][0]
		| "\(.records_decoded) \([.bpf_events[]] | add)"')"
	expect "$FROZEN: $dec ring records decoded, $put written by BPF" eq "$dec" "$put"
done
FROZEN=
report gpu_live_exit
