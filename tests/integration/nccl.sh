#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# nccl - the NCCL probes (bpf/nccl.bpf.c) on the real libnccl.so.2 of
# /usr/local/cuda (NCCL 2.28: without a GPU every call fails, after the
# probes fired), called with known arguments from known threads
# (tests/integration/nccl_calls.c):
#   nccl_counts     sentinel, the library found when the workload dlopen()s
#                   it (after the agent started on its pid): per thread (its
#                   own comm) and collective, the
#                   collective_summary rows count every call and its bytes;
#                   nccl_comm records per thread and entry point; every
#                   call through the per-CPU slots, none lost
#   nccl_slot_wrap  sentinel, 16 slots per CPU, the agent stopped while the
#                   calls are made: the calls written over are counted
#                   (slots_overwritten), exactly those missing, and the
#                   summary counts the others
#   nccl_slot_switch sentinel, a deep-dive during the run moves the calls to
#                   the ring and back: none lost or doubled, in entry order
#   nccl_deep_args  deep: one collective record per call, every argument
#                   decoded, groups, unknown datatype and comm counted
# and, for what needs a communicator that initialises, the double
# (tests/fakes/fake_nccl.c, same ABI) whose all-reduce waits for every rank:
#   nccl_straggler  4 ranks in 4 processes; rank 3 sleeps DELAY_MS before
#                   all-reduce #LATE: the wait names rank 3, its lateness and
#                   the others' waits between DELAY_MS/2 and 2 x DELAY_MS,
#                   and a straggler anomaly carries the evidence.
#   nccl_split      4 ranks split their communicator in two colors: each
#                   new comm's rank and size derived (by key, then parent
#                   rank), its collectives ranked and their waits complete
# The real libnccl is also probed for ncclCommInitRankScalable (nccl_deep_args).
# The calling thread's state is in task storage (bpf/nccl.bpf.c, nccl_task);
# tests/integration/nccl_hash.sh runs the first four again on the fallback
# of kernels before 5.12, a hash by tid (SFX=_hash: only those, named so).
source "$(dirname "$0")/lib.sh"
SFX=${NCCL_TEST_SUFFIX:-}
NAMES=(nccl_counts nccl_slot_wrap nccl_slot_switch nccl_deep_args)
[ -z "$SFX" ] && NAMES+=(nccl_straggler nccl_split)
NAMES=("${NAMES[@]/%/$SFX}")
it_preflight "${NAMES[@]}"

NCCL_CALLS=$BUILD/tests/integration/nccl_calls
FAKE=$BUILD/tests/fakes/nccl/libnccl.so.2
REAL=/usr/local/cuda/lib64/libnccl.so.2
THREADS=3
ROUNDS=4
SLOT_CALLS=12 # calls per round_once() that go into the slots: every one but the comm life
WRAP_ROUNDS=40

if [ ! -x "$NCCL_CALLS" ] || [ ! -f "$FAKE" ]; then
	for n in "${NAMES[@]}"; do
		echo "FAIL $n: $NCCL_CALLS or $FAKE not built (make test)"
	done
	exit 0
fi

# run_calls NAME MODE [WORKLOAD ARGS] [AGENT ARGS] [stop]: the workload on the
# real NCCL, THREADS x ROUNDS unless WORKLOAD ARGS say otherwise, the agent
# on its pid (--pid: without it the agent also probes other processes'
# libraries, and its exit waits for their detach); sentinel: started before
# the workload dlopen()s NCCL (discovery through the mapping), deep: after;
# with stop, the agent is stopped (SIGSTOP) while the workload runs.
# Sets PID, TIDS, BASE (the comm buffer). False, with the reason recorded, on
# failure.
run_calls() {
	local name=$1 mode=$2 wargs=${3:-"-t $THREADS -n $ROUNDS"} aargs=${4:-} stop=${5:-}
	local go=$T/$1.go out=$T/$1.calls wpid i
	local load=()
	PID= TIDS= BASE=
	[ "$mode" = sentinel ] && load=(-l "$T/$name.load")
	# shellcheck disable=SC2086 # word lists
	bg_start "$out" "$NCCL_CALLS" -L "$REAL" $wargs -w "$go" "${load[@]}"
	wpid=$BG_PID
	wait_line "$out" 10 || { fail_because "nccl_calls printed nothing: $(head -c 300 "$out.err")"; return 1; }
	PID=$(jq -r .pid "$out")
	TIDS=$(jq -c .tids "$out")
	BASE=$(jq -r .comm_base "$out")
	# shellcheck disable=SC2086 # a word list
	agent_start "$name" -i 0.25 --mode "$mode" $aargs --pid "$PID" ||
		{ fail_because "agent did not start: $(agent_tail)"; return 1; }
	if [ "$mode" = sentinel ]; then
		wait_record ".type==\"process\" and .pid==$PID" 10 ||
			{ fail_because "pid $PID not traced: $(agent_tail)"; return 1; }
		expect "libnccl probed before the workload loaded it" \
			[ "$(jqo --argjson p "$PID" '[.[] | select(.type == "process" and .pid == $p)
				| (.libraries // [])[] | select(test("libnccl"))] | length')" = 0 ]
		touch "$T/$name.load"
	fi
	wait_record ".type==\"process\" and .pid==$PID and ((.libraries // []) | any(test(\"libnccl\")))" 10 ||
		{ fail_because "no process record with libnccl for pid $PID: $(agent_tail)"; return 1; }
	sleep 0.2
	if [ -n "$stop" ]; then
		# the agent's loop stopped for the whole run: nothing copies the slots
		kill -STOP "$AGENT_PID"
		for ((i = 0; i < 100; i++)); do
			[ "$(awk '{ print $3 }' "/proc/$AGENT_PID/stat" 2>/dev/null)" = T ] && break
			sleep 0.05
		done
	fi
	touch "$go"
	wait_exit "$wpid" 60 || { kill -CONT "$AGENT_PID"; fail_because "nccl_calls did not finish"; return 1; }
	[ -n "$stop" ] && kill -CONT "$AGENT_PID"
	[ "$WAIT_RC" = 0 ] || fail_because "nccl_calls exit $WAIT_RC: $(head -c 300 "$out.err")"
	agent_finish "$PID"
}

# per thread i: op -> [calls, bytes] of ROUNDS rounds of round_once() (nccl_calls.c);
# the grouped all-reduce has datatype 12 (no such type): counted, 0 bytes
expected_rows() {
	jq -n --argjson r "$ROUNDS" --argjson i "$1" '{
		allreduce: [2 * $r, (1000 + $i) * 2 * $r],
		allgather: [$r, (2000 + $i) * 4 * $r],
		reducescatter: [$r, (3000 + $i) * 2 * $r],
		broadcast: [2 * $r, ((4000 + $i) * 8 + (4500 + $i)) * $r],
		reduce: [$r, (5000 + $i) * 8 * $r],
		alltoall: [$r, (6000 + $i) * 4 * $r],
		send: [$r, (7000 + $i) * 8 * $r],
		recv: [$r, (8000 + $i) * 4 * $r]}'
}

# comm pointer of thread i, as the records write it
comm_of() { printf '0x%x' $((BASE + 64 * $1)); }

COMM_APIS='["ncclCommInitRank","ncclCommInitRankConfig","ncclCommInitAll","ncclCommSplit",
"ncclCommDestroy","ncclCommAbort","ncclCommInitRankScalable"]'

# ---------------------------------------------------------------- sentinel --
if run_calls nccl_sentinel sentinel; then
	for ((i = 0; i < THREADS; i++)); do
		exp=$(expected_rows "$i")
		bad=$(jqo --argjson pid "$PID" --arg comm "$(comm_of "$i")" --argjson exp "$exp" '
			[.[] | select(.type == "collective_summary" and .pid == $pid and .comm == $comm)] as $rows
			| [($exp | keys[]) as $op
			   | ($rows | map(select(.op == $op))) as $o
			   | [($o | map(.calls) | add // 0), ($o | map(.bytes) | add // 0)] as $got
			   | select($got != $exp[$op]) | "\($op): \($got) want \($exp[$op])"]
			+ [$rows[] | select(.op as $op | $exp | has($op) | not) | "unexpected op \(.op)"]
			| join(", ")')
		expect "thread $i (comm $(comm_of "$i")): $bad" [ "$bad" = '""' ]
	done
	# the communicator's life: one nccl_comm per call, per thread and entry point
	bad=$(jqo --argjson pid "$PID" --argjson tids "$TIDS" --argjson apis "$COMM_APIS" --argjson r "$ROUNDS" '
		[.[] | select(.type == "nccl_comm" and .pid == $pid)] as $c
		| [$tids[] as $t | $apis[] as $a | ($c | map(select(.tid == $t and .api == $a)) | length) as $n
		   | select($n != $r) | "tid \($t) \($a): \($n)"]
		+ [$c[] | select(.tid as $x | $tids | index($x) | not) | "tid \(.tid) not a worker"]
		| join(", ")')
	expect "nccl_comm records: $bad" [ "$bad" = '""' ]
	bad=$(jqo --argjson pid "$PID" '[.[] | select(.type == "collective" and .pid == $pid)] | length')
	expect "$bad collective records in sentinel mode (want none: summaries only)" eq "$bad" 0
	# every call went through the per-CPU slots (bpf/nccl.bpf.c), none lost
	st=$(jqo '[.[] | select(.type == "stats" and .final) | .nccl] | last')
	expect "stats nccl slots: $st" jqe --argjson n "$((SLOT_CALLS * THREADS * ROUNDS))" \
		'.slots_per_cpu == 1024 and .slots_written == $n and .slots_overwritten == 0' <<<"$st"
	# which per-thread state the probes used: the fallback only when asked
	# (this kernel has task storage for uprobes: 5.12+)
	fb=$(grep -c 'no task storage for uprobe programs' "$AGENT_ERR")
	if [ -n "$SFX" ]; then
		expect "the agent did not take the hash fallback: $(agent_tail)" eq "$fb" 1
	elif kernel_at_least 5 12; then
		expect "the agent took the hash fallback on $(uname -r)" eq "$fb" 0
	fi
fi
report nccl_counts$SFX

# -------------------------------------------------------------- slot wrap --
# sentinel with the least slots (--nccl-slots 16 per CPU): the agent stopped
# (SIGSTOP) while one thread makes WRAP_ROUNDS rounds, SLOT_CALLS slot calls
# each, far more than 16 per CPU, then let go. Every call is in
# slots_written; those written over before the agent copied them are
# slots_overwritten, exactly the ones missing from nccl.calls; the summary
# rows count the collectives that arrived, no more; none got through twice.
if run_calls nccl_wrap sentinel "-t 1 -n $WRAP_ROUNDS" "--nccl-slots 16" stop; then
	st=$(jqo '[.[] | select(.type == "stats" and .final) | .nccl] | last')
	rows=$(jqo --argjson pid "$PID" '[.[] | select(.type == "collective_summary" and .pid == $pid) | .calls] | add // 0')
	expect "stats nccl: $st; summary calls $rows" jqe --argjson n "$((SLOT_CALLS * WRAP_ROUNDS))" \
		--argjson rows "$rows" --argjson comm "$COMM_APIS" '
		([.calls | to_entries[] | select(.key as $k | $comm | index($k) | not) | .value] | add // 0) as $got
		| ([.calls | to_entries[] | select(.key | test("^ncclGroup")) | .value] | add // 0) as $groups
		| .slots_per_cpu == 16 and .slots_written == $n and .slots_overwritten > 0
		and .slots_overwritten + $got == $n and $got - $groups == $rows and .collectives == $rows' <<<"$st"
fi
report nccl_slot_wrap$SFX

# ------------------------------------------------------------ slot switch --
# sentinel, one thread making SW_ROUNDS rounds SW_PACE_US apart; a deep-dive
# of its instance starts during the run and ends before it: its calls move
# from the slots to rb_cuda and back. None lost, none twice: the summary
# counts every collective, the stats every call; some went each way; the
# collective records sent (the window, then the deep-dive's) are numbered in
# the order the calls entered.
SW_ROUNDS=200
SW_PACE_US=10000
SW_INST=it-nccl-switch-$$
SW_SOCK=$T/ctl/agent.sock
mkdir -p "$T/ctl"
if bg_start "$T/sw.calls" env INFERTRACE_INSTANCE="$SW_INST" "$NCCL_CALLS" -L "$REAL" -t 1 \
	-n "$SW_ROUNDS" -p "$SW_PACE_US" -w "$T/sw.go" && wait_line "$T/sw.calls" 10; then
	swp=$BG_PID
	PID=$(jq -r .pid "$T/sw.calls")
	if agent_start nccl_switch -i 0.25 --pid "$PID" --control-socket "$SW_SOCK" --shim-socket none &&
		wait_record ".type==\"process\" and .pid==$PID and ((.libraries // []) | any(test(\"libnccl\")))" 10; then
		sleep 0.2
		touch "$T/sw.go"
		sleep 0.3
		"$BUILD/agentctl" --socket "$SW_SOCK" deep-dive --instance "$SW_INST" --duration 0.6 >/dev/null 2>&1 ||
			fail_because "deep-dive refused"
		wait_exit "$swp" 60 || fail_because "nccl_calls did not finish"
		agent_finish "$PID"
		st=$(jqo '[.[] | select(.type == "stats" and .final) | .nccl] | last')
		rows=$(jqo --argjson pid "$PID" '[.[] | select(.type == "collective_summary" and .pid == $pid) | .calls] | add // 0')
		expect "stats nccl: $st; summary calls $rows" jqe --argjson n "$SW_ROUNDS" \
			--argjson s "$((SLOT_CALLS * SW_ROUNDS))" --argjson calls "$(nccl_calls_want "$SW_ROUNDS")" \
			--argjson rows "$rows" '.calls == $calls and .collectives == 10 * $n and $rows == 10 * $n
			and .slots_overwritten == 0 and .slots_written > 0 and .slots_written < $s' <<<"$st"
		dd=$(jqo '[.[] | select(.type == "deep_dive") | .action]')
		expect "deep-dive records: $dd" jqe 'index("start") != null and index("expire") != null' <<<"$dd"
		bad=$(jqo --argjson pid "$PID" '[.[] | select(.type == "collective" and .pid == $pid
			and .op != "send" and .op != "recv")] | sort_by(.enqueue_ns) | map(.seq) as $q
			| if length == 0 then "no collective record"
			  elif $q != ($q | unique) then "seq out of entry order: \($q)" else "" end')
		expect "collective records: $bad" [ "$bad" = '""' ]
	else
		fail_because "agent did not trace pid $PID: $(agent_tail)"
	fi
else
	fail_because "nccl_calls printed nothing: $(head -c 300 "$T/sw.calls.err")"
fi
report nccl_slot_switch$SFX

# -------------------------------------------------------------------- deep --
if run_calls nccl_deep deep; then
	drops=$(jqo '[.[] | select(.type == "stats" and .final) | .bpf_drops.nccl_call // 0] | add // 0')
	expect "ring drops: $drops" [ "$drops" = 0 ]
	for ((i = 0; i < THREADS; i++)); do
		tid=$(jq -r ".[$i]" <<<"$TIDS")
		# op count -> the fields round_once() passed (nccl.h's enums by value)
		exp=$(jq -n --argjson i "$i" --arg comm "$(comm_of "$i")" --arg st "0x500$i" '
			def c(op; n; dt; rest): {key: "\(op) \(n)", value: ({op: op, count: n, datatype_id: dt,
				comm: $comm, comm_known: false, rank: null, stream: $st, redop: null,
				root: null, peer: null} + rest)};
			[c("allreduce"; 1000 + $i; 9; {redop: "sum", bytes: (2 * (1000 + $i)), group: 0}),
			 c("allgather"; 2000 + $i; 7; {bytes: (4 * (2000 + $i)), group: 0}),
			 c("reducescatter"; 3000 + $i; 6; {redop: "max", bytes: (2 * (3000 + $i))}),
			 c("broadcast"; 4000 + $i; 4; {root: 1, bytes: (8 * (4000 + $i))}),
			 c("broadcast"; 4500 + $i; 1; {root: 2, bytes: (4500 + $i)}),
			 c("reduce"; 5000 + $i; 8; {redop: "min", root: 3, bytes: (8 * (5000 + $i))}),
			 c("alltoall"; 6000 + $i; 2; {bytes: (4 * (6000 + $i))}),
			 c("send"; 7000 + $i; 5; {peer: 1, bytes: (8 * (7000 + $i))}),
			 c("recv"; 8000 + $i; 3; {peer: 2, bytes: (4 * (8000 + $i))}),
			 c("allreduce"; 9000 + $i; 12; {redop: "avg", datatype: null, bytes: 0})] | from_entries')
		bad=$(jqo --argjson pid "$PID" --argjson tid "$tid" --argjson exp "$exp" --argjson r "$ROUNDS" '
			[.[] | select(.type == "collective" and .pid == $pid and .tid == $tid)] as $l
			| [.[] | select(.type == "nccl_group" and .pid == $pid and .tid == $tid)] as $g
			| [($exp | keys[]) as $k | ($l | map(select("\(.op) \(.count)" == $k))) as $rs
			   | (if ($rs | length) != $r then "\($k): \($rs | length) records" else empty end),
			     ($rs[] | . as $x | select($exp[$k] | to_entries | any(.value != $x[.key]))
			      | "\($k): \($x | del(.schema, .host, .instance))")]
			+ [$l[] | select("\(.op) \(.count)" as $k | $exp | has($k) | not) | "unexpected \(.op) \(.count)"]
			# the grouped all-reduce: in the group its ncclGroupStart opened
			+ ([$g[] | select(.api == "ncclGroupStart") | .group_id] as $gs
			   | [$l[] | select(.count >= 9000) | .group] as $in
			   | if ($gs | length) != $r or ($g | map(select(.api == "ncclGroupEnd" and .group_depth == 0)) | length) != $r
			     then ["groups: \($g | length) records"]
			     elif $in != $gs then ["group ids \($in) want \($gs)"] else [] end)
			# the enqueue time is the record time; seq counts the comm calls
			+ [$l[] | select(.enqueue_ns != .ts_ns or .enqueue_ns <= 0) | "enqueue_ns \(.enqueue_ns)"]
			+ (if ($l | map(select(.op != "send" and .op != "recv") | .seq)) != [range(8 * $r)]
			   then ["seq \($l | map(.seq))"] else [] end)
			| unique | .[0:4] | join("; ")')
		expect "tid $tid: $bad" [ "$bad" = '""' ]
		# ncclCommInitRank(Config): nranks, rank, the unique id (128 bytes 0x40+i) hashed;
		# ncclCommInitRankScalable: the first of its two ids (0x60+i) names the comm
		hash=$(nccl_id_hash $((0x40 + i)))
		hs=$(nccl_id_hash $((0x60 + i)))
		bad=$(jqo --argjson pid "$PID" --argjson tid "$tid" --argjson i "$i" --arg h "$hash" --arg hs "$hs" '
			[.[] | select(.type == "nccl_comm" and .pid == $pid and .tid == $tid)] as $c
			| [$c[] | select(.api == "ncclCommInitRank")
			   | select(.nranks != 4 or .rank != $i or .comm_hash != $h or .ret == 0 or .dur_ns <= 0)]
			+ [$c[] | select(.api == "ncclCommInitRankConfig")
			   | select(.nranks != 8 or .rank != $i + 1 or .comm_hash != $h or .ret == 0)]
			+ [$c[] | select(.api == "ncclCommInitRankScalable")
			   | select(.nranks != 6 or .rank != $i + 2 or .comm_hash != $hs or .ret == 0 or .dur_ns <= 0)]
			+ [$c[] | select(.api == "ncclCommInitAll") | select(.nranks != 2 or .ret == 0)]
			+ [$c[] | select(.api == "ncclCommSplit") | select(.color != 5 or .key != $i or .ret == 0)]
			+ [$c[] | select(.api == "ncclCommDestroy" or .api == "ncclCommAbort") | select(.comm != "0x0")]
			| .[0:2] | map(del(.schema, .host, .instance)) | tostring')
		expect "tid $tid nccl_comm: $bad" [ "$bad" = '"[]"' ]
	done
	st=$(jqo '[.[] | select(.type == "stats" and .final) | .nccl] | last')
	n=$((THREADS * ROUNDS))
	# --pid: the agent's counters are this process's (without it, other NCCL processes count too)
	expect "stats nccl: $st" jqe --argjson n "$n" --argjson calls "$(nccl_calls_want "$n")" \
		'.dtype_unknown == $n and .comm_unknown == 10 * $n and .collectives == 10 * $n and .init_failed == 5 * $n
		 and .calls == $calls' <<<"$st"
fi
report nccl_deep_args$SFX
# the fallback runs the real library's tests only
[ -n "$SFX" ] && exit 0

# ranks_run NAME N "AGENT ARGS": N ranks of one communicator through the double
# (nccl_calls rank mode, unique id IDB, rank r's further arguments from
# rank_args r; rank 0 first: it makes the shared barrier), traced by an agent
# started on their pids (--pid: other processes' libraries, attached without
# it, made its exit wait for their detach past agent_stop's 15 s on a busy
# machine) with AGENT ARGS; released together, finished, their exits
# recorded, the agent stopped. Sets PJ (their pids by rank, JSON); false,
# with the reason recorded, on failure.
ranks_run() {
	local name=$1 n=$2 aargs=$3 go=$T/$1.go r p w
	local wps=() pids=()
	PJ=
	for ((r = 0; r < n; r++)); do
		# shellcheck disable=SC2046 # rank_args prints a word list
		bg_start "$T/$name.rank$r" "$NCCL_CALLS" -L "$FAKE" -r "$r" -R "$n" -i "$IDB" $(rank_args "$r") -w "$go"
		wps+=("$BG_PID")
		[ "$r" = 0 ] && sleep 0.2
	done
	for ((r = 0; r < n; r++)); do
		wait_line "$T/$name.rank$r" 15 ||
			{ fail_because "rank $r printed nothing: $(head -c 300 "$T/$name.rank$r.err")"; return 1; }
		pids+=("$(jq -r .pid "$T/$name.rank$r")")
	done
	# shellcheck disable=SC2046,SC2086 # word lists
	agent_start "$name" -i 0.25 $aargs $(printf -- '--pid %s ' "${pids[@]}") ||
		{ fail_because "agent did not start: $(agent_tail)"; return 1; }
	for p in "${pids[@]}"; do
		wait_record ".type==\"process\" and .pid==$p and ((.libraries // []) | any(test(\"libnccl\")))" 10 ||
			{ fail_because "pid $p not traced: $(agent_tail)"; return 1; }
	done
	sleep 0.2
	touch "$go"
	for w in "${wps[@]}"; do
		wait_exit "$w" 30 || fail_because "a rank did not finish"
		[ "$WAIT_RC" = 0 ] || fail_because "a rank exited $WAIT_RC"
	done
	for p in "${pids[@]}"; do
		wait_record ".type==\"process\" and .event==\"exit\" and .pid==$p" 10 || fail_because "no exit of $p"
	done
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	PJ=$(printf '%s\n' "${pids[@]}" | jq -s -c .)
}

# --------------------------------------------------------------- straggler --
# 4 ranks of one communicator (the double), STEPS all-reduces; rank 3 comes
# DELAY_MS late to all-reduce #LATE (the library found when a process
# dlopen()s it: nccl_counts).
STEPS=8
LATE=4
DELAY_MS=400
IDB=$((0x20 + RANDOM % 0x50))
rank_args() { echo "-k $STEPS -d $([ "$1" = 3 ] && echo $DELAY_MS || echo 0) -s $LATE"; }
if ranks_run nccl_straggler 4 ""; then
	pj=$PJ
	# every rank's init: one hash, its rank of 4
	res=$(jqo --argjson pids "$pj" '[.[] | select(.type == "nccl_comm" and .api == "ncclCommInitRank"
		and (.pid as $p | $pids | index($p)))] | {n: length, h: (map(.comm_hash) | unique),
		ranks: (sort_by(.pid) | map(.rank)), ret: (map(.ret) | unique)}')
	expect "inits: $res" jqe '.n == 4 and (.h | length) == 1 and .ranks == [0,1,2,3] and .ret == [0]' <<<"$res"
	hash=$(jq -r '.h[0]' <<<"$res")
	# all-reduce #LATE: rank 3 last, DELAY_MS late (+-50%), each other rank waited as long
	# the bounds: the sleep, less what the others' wake-up after the previous
	# all-reduce can lag, plus what the sleep can overshoot on a loaded machine
	lo=$((DELAY_MS * 1000000 / 2)) hi=$((DELAY_MS * 1000000 * 2))
	w=$(jqo --arg h "$hash" --argjson s "$LATE" '[.[] | select(.type == "collective_wait" and .comm == $h and .seq == $s)]')
	expect "one wait record for all-reduce #$LATE: $w" jqe 'length == 1' <<<"$w"
	expect "wait: $w" jqe --argjson lo "$lo" --argjson hi "$hi" '.[0] | .end == "complete" and .arrived == 4
		and .last_rank == 3 and .late_ns >= $lo and .late_ns <= $hi
		and ([.ranks[] | select(.rank != 3) | .wait_ns] | length == 3 and all(. >= $lo and . <= $hi))' <<<"$w"
	# the other steps: written only when a rank came 1 ms late (scheduling on a
	# busy machine), never as late as the injected delay
	other=$(jqo --arg h "$hash" --argjson s "$LATE" --argjson lo "$lo" '[.[] | select(.type == "collective_wait"
		and .comm == $h and .seq != $s and .late_ns >= $lo) | {seq, last_rank, late_ns}]')
	expect "other waits as late as the delay: $other" jqe 'length == 0' <<<"$other"
	an=$(jqo --argjson lo "$lo" '[.[] | select(.type == "anomaly" and .kind == "straggler"
		and .chart == "collective" and .dur_ns >= $lo)]')
	expect "straggler anomaly: $an" jqe --arg h "$hash" 'length == 1 and .[0].rank == 3
		and (.[0].suspects[0].evidence | test("rank 3 arrived")) and (.[0].suspects[1].evidence | contains($h))' <<<"$an"
	# the per-interval rows: STEPS all-reduces per rank, rank 3 once last
	rows=$(jqo --arg h "$hash" '[.[] | select(.type == "collective_summary" and .comm == $h)]
		| group_by(.pid) | map({calls: (map(.calls) | add), waits: (map(.waits) | add), last: (map(.last) | add)})')
	expect "summary rows: $rows" jqe --argjson n "$STEPS" 'length == 4 and all(.calls == $n and .waits == $n)
		and (map(.last) | add) == $n' <<<"$rows"
fi
report nccl_straggler

# ------------------------------------------------------------------- split --
# 4 ranks of a parent communicator (the double), each splits it with
# COLORS[r] and KEYS[r], then makes SPLIT_STEPS all-reduces on the parent and
# on its new comm (deep mode, the agent on their pids). NCCL orders a color's
# ranks by key, then by parent rank (nccl.h; NVIDIA/nccl src/init.cc,
# commGetSplitInfo): color 0 is parent ranks 0, 2 (keys equal), color 1 is
# 3 (key 0), then 1. Every split record has its derived rank and size, the
# collectives on the new comms carry them, and each of their all-reduces is
# one complete wait of its two ranks.
COLORS=(0 1 0 1)
KEYS=(5 1 5 0)
WANT_RANK='[0, 1, 1, 0]'
SPLIT_STEPS=3
IDB=$((0x20 + RANDOM % 0x50))
rank_args() { echo "-k $SPLIT_STEPS -c ${COLORS[$1]} -K ${KEYS[$1]}"; }
if ranks_run nccl_split 4 "--mode deep"; then
	parent=$(nccl_id_hash "$IDB")
	sp=$(jqo -c --argjson pids "$PJ" '[.[] | select(.type == "nccl_comm" and .api == "ncclCommSplit")
		| select(.pid as $p | $pids | index($p))] | sort_by(.pid as $p | $pids | index($p))')
	expect "split records: $sp" jqe --argjson want "$WANT_RANK" --arg parent "$parent" '
		length == 4 and (map(.rank) == $want) and all(.nranks == 2 and .ret == 0
			and .parent_comm_hash == $parent and .comm != "0x0")
		and ([.[] | .comm_hash] | unique | length) == 2' <<<"$sp"
	# the two colors: one hash each, shared by its ranks
	bad=$(jq -r --argjson colors "$(printf '%s\n' "${COLORS[@]}" | jq -s -c .)" '
		[to_entries | group_by($colors[.key])[] | map(.value.comm_hash) | unique | length]
		| if . != [1, 1] then "hashes per color \(.)" else "" end' <<<"$sp")
	expect "$bad" [ -z "$bad" ]
	# their collectives: the derived rank; their waits: complete, the two ranks
	bad=$(jqo -r --argjson sp "$sp" --argjson n "$SPLIT_STEPS" '
		[.[] | select(.type == "collective")] as $l
		| [.[] | select(.type == "collective_wait")] as $w
		| [$sp[] as $s
		   | ($l | map(select(.pid == $s.pid and .comm == $s.comm_hash))) as $m
		   | (if ($m | length) != $n then "pid \($s.pid): \($m | length) collectives on its split comm"
		      else empty end),
		     ($m[] | select(.rank != $s.rank or .nranks != 2 or .comm_known != true)
		      | "pid \($s.pid) seq \(.seq): rank \(.rank)/\(.nranks)")]
		+ [$sp | group_by(.comm_hash)[] as $g
		   | ($w | map(select(.comm == $g[0].comm_hash))) as $gw
		   | (if ($gw | length) != $n then "comm \($g[0].comm_hash): \($gw | length) waits" else empty end),
		     ($gw[] | select(.end != "complete" or .arrived != 2 or .expected != 2
			or ([.ranks[] | [.rank, .pid]] | sort) != ([$g[] | [.rank, .pid]] | sort))
		      | "wait \(.comm) #\(.seq): \(.end) \(.ranks | map([.rank, .pid]))")]
		| .[0:4] | join("; ")')
	expect "split comms: $bad" [ -z "$bad" ]
	st=$(jqo '[.[] | select(.type == "stats" and .final) | .nccl] | last')
	expect "stats nccl: $st" jqe '.split_rank_unknown == 0 and .wait_no_rank == 0
		and .calls.ncclCommSplit == 4' <<<"$st"
fi
report nccl_split
