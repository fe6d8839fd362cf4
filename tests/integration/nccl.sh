#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# nccl - the NCCL probes (bpf/nccl.bpf.c) on the real libnccl.so.2 of
# /usr/local/cuda (NCCL 2.28: without a GPU every call fails, after the
# probes fired), called with known arguments from known threads
# (tests/integration/nccl_calls.c):
#   nccl_counts     sentinel, the library found when the workload dlopen()s
#                   it: per thread (its own comm) and collective, the
#                   collective_summary rows count every call and its bytes;
#                   nccl_comm records per thread and entry point
#   nccl_deep_args  deep: one collective record per call, every argument
#                   decoded, groups, unknown datatype and comm counted
# and, for what needs a communicator that initialises, the double
# (tests/fakes/fake_nccl.c, same ABI) whose all-reduce waits for every rank:
#   nccl_straggler  4 ranks in 4 processes; rank 3 sleeps DELAY_MS before
#                   all-reduce #LATE: the wait names rank 3, its lateness and
#                   the others' waits between DELAY_MS/2 and 2 x DELAY_MS,
#                   and a straggler anomaly carries the evidence.
source "$(dirname "$0")/lib.sh"
it_preflight nccl_counts nccl_deep_args nccl_straggler

NCCL_CALLS=$BUILD/tests/integration/nccl_calls
FAKE=$BUILD/tests/fakes/nccl/libnccl.so.2
REAL=/usr/local/cuda/lib64/libnccl.so.2
THREADS=3
ROUNDS=4

if [ ! -x "$NCCL_CALLS" ] || [ ! -f "$FAKE" ]; then
	for n in nccl_counts nccl_deep_args nccl_straggler; do
		echo "FAIL $n: $NCCL_CALLS or $FAKE not built (make test)"
	done
	exit 0
fi

# run_calls NAME MODE: the workload on the real NCCL, THREADS x ROUNDS; sentinel:
# the agent first (discovery through the mmap of dlopen), deep: --pid. Sets PID,
# TIDS, BASE (the comm buffer). False, with the reason recorded, on failure.
run_calls() {
	local name=$1 mode=$2 go=$T/$1.go out=$T/$1.calls wpid
	PID= TIDS= BASE=
	if [ "$mode" = sentinel ]; then
		agent_start "$name" -i 0.25 || { fail_because "agent did not start: $(agent_tail)"; return 1; }
	fi
	bg_start "$out" "$NCCL_CALLS" -L "$REAL" -t "$THREADS" -n "$ROUNDS" -w "$go"
	wpid=$BG_PID
	wait_line "$out" 10 || { fail_because "nccl_calls printed nothing: $(head -c 300 "$out.err")"; return 1; }
	PID=$(jq -r .pid "$out")
	TIDS=$(jq -c .tids "$out")
	BASE=$(jq -r .comm_base "$out")
	if [ "$mode" = deep ]; then
		agent_start "$name" -i 0.25 --mode deep --pid "$PID" ||
			{ fail_because "agent did not start: $(agent_tail)"; return 1; }
	fi
	wait_record ".type==\"process\" and .pid==$PID and ((.libraries // []) | any(test(\"libnccl\")))" 10 ||
		{ fail_because "no process record with libnccl for pid $PID: $(agent_tail)"; return 1; }
	sleep 0.2
	touch "$go"
	wait_exit "$wpid" 60 || { fail_because "nccl_calls did not finish"; return 1; }
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
"ncclCommDestroy","ncclCommAbort"]'

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
fi
report nccl_counts

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
		# ncclCommInitRank(Config): nranks, rank, the unique id (128 bytes 0x40+i) hashed
		hash=$(nccl_id_hash $((0x40 + i)))
		bad=$(jqo --argjson pid "$PID" --argjson tid "$tid" --argjson i "$i" --arg h "$hash" '
			[.[] | select(.type == "nccl_comm" and .pid == $pid and .tid == $tid)] as $c
			| [$c[] | select(.api == "ncclCommInitRank")
			   | select(.nranks != 4 or .rank != $i or .comm_hash != $h or .ret == 0 or .dur_ns <= 0)]
			+ [$c[] | select(.api == "ncclCommInitRankConfig")
			   | select(.nranks != 8 or .rank != $i + 1 or .comm_hash != $h or .ret == 0)]
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
		'.dtype_unknown == $n and .comm_unknown == 10 * $n and .collectives == 10 * $n and .init_failed == 4 * $n
		 and .calls == $calls' <<<"$st"
fi
report nccl_deep_args

# --------------------------------------------------------------- straggler --
# 4 ranks of one communicator (the double), STEPS all-reduces; rank 3 comes
# DELAY_MS late to all-reduce #LATE. The ranks start in order (rank 0 makes
# the shared barrier), the agent finds them through their mmap of libnccl.
STEPS=8
LATE=4
DELAY_MS=400
IDB=$((0x20 + RANDOM % 0x50))
if agent_start nccl_straggler -i 0.25; then
	pids=() wps=()
	go=$T/nccl_straggler.go
	for r in 0 1 2 3; do
		d=0
		[ "$r" = 3 ] && d=$DELAY_MS
		bg_start "$T/rank$r.out" "$NCCL_CALLS" -L "$FAKE" -r "$r" -R 4 -i "$IDB" -k "$STEPS" -d "$d" -s "$LATE" -w "$go"
		wps+=("$BG_PID")
		[ "$r" = 0 ] && sleep 0.2
	done
	ok=1
	for r in 0 1 2 3; do
		wait_line "$T/rank$r.out" 15 || { fail_because "rank $r printed nothing: $(head -c 300 "$T/rank$r.out.err")"; ok=; break; }
		pids+=("$(jq -r .pid "$T/rank$r.out")")
	done
	if [ -n "$ok" ]; then
		for p in "${pids[@]}"; do
			wait_record ".type==\"process\" and .pid==$p and ((.libraries // []) | any(test(\"libnccl\")))" 10 ||
				{ fail_because "pid $p not traced: $(agent_tail)"; ok=; }
		done
	fi
	if [ -n "$ok" ]; then
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
		pj=$(printf '%s\n' "${pids[@]}" | jq -s -c .)
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
else
	fail_because "agent did not start: $(agent_tail)"
fi
report nccl_straggler
