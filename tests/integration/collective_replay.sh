#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# collective_replay - NCCL collectives out of `--replay` (issue 21), the agent
# as a user would run it:
#
#   collective_replay_vllm:   vLLM TP4 H100 rank 0: 171 collective records,
#                             161 all-reduce read from ncclDevKernel_AllReduce_
#                             Sum_bf16_RING_LL (count unknown, comm by stream),
#                             10 all-gather from record_param_comms (group 3)
#   collective_replay_ranks:  the HTA sampled rank-0/rank-1 pair with
#                             --replay-rank: 20 collectives, 15 collective_wait
#                             records, 5 complete with rank 1 last (the values
#                             read by hand from the two traces, see
#                             tests/unit/test_coll_replay.c), 10 with the other
#                             rank missing; sentinel (--interval 0.25):
#                             collective_summary rows per 250 ms window whose
#                             calls and waits per window are the deep run's
#                             collectives (by enqueue) and waits (by last
#                             arrival), adding up to the same 31.865 ms
#   collective_replay_bad:    a collective with a datatype NCCL lacks and no
#                             process group, and an NCCL kernel of an unknown
#                             collective: written with what is known, counted
#                             in collective_status
#   collective_replay_intervals: sentinel, a recording of 3 all-reduces at
#                             0.1 ms, 1.1 s and 1.3 s: one collective_summary
#                             row per --interval window that holds calls
#                             ([0, 1 s): 1 call, [1 s, 2 s): 2), not one for
#                             the whole recording
#   collective_replay_nsys:   the two Nsight Systems exports of the shared data
#                             (no NCCL in them, docs/events.md): replayed,
#                             every kernel joined, no collective
#   collective_replay_errors: --replay-rank without --replay (usage error), one
#                             rank given twice (an error naming the file, its
#                             collectives still written, none matched), a trace
#                             without distributedInfo (a warning)
#
# Real data comes from $INFERTRACE_DATA (default ../shared/data); cases skip
# when it is absent.
source "$(dirname "$0")/lib.sh"
DATA=${INFERTRACE_DATA:-$IT_ROOT/../shared/data}
K=$DATA/kineto
CASES=(collective_replay_vllm collective_replay_ranks collective_replay_bad
	collective_replay_errors collective_replay_intervals collective_replay_nsys)

if [ ! -x "$AGENT" ] || ! command -v jq >/dev/null; then
	for n in "${CASES[@]}"; do echo "FAIL $n: $AGENT not built or jq missing"; done
	exit 0
fi

# run NAME [agent args...]: output in $T/NAME.jsonl, stderr in $T/NAME.err, status in RC
run() {
	local name=$1
	shift
	OUT=$T/$name.jsonl ERR=$T/$name.err
	"$AGENT" "$@" -o "$OUT" 2>"$ERR"
	RC=$?
}
q() { jq -s -c "$1" "$OUT"; } # q JQ over all records of $OUT

# --- a bad recording, made here: no shared data needed -----------------------
cat >"$T/bad.json" <<'EOF'
{"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 7, "tid": 8, "ts": 100, "dur": 50,
  "args": {"Collective name": "allreduce", "dtype": "ComplexFloat", "In msg nelems": 10, "Group size": 2}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 8, "ts": 120, "dur": 5,
  "args": {"correlation": 1, "cbid": 211}},
 {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
  "ts": 130, "dur": 20, "args": {"correlation": 1, "device": 0, "stream": 7}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 8, "ts": 220, "dur": 5,
  "args": {"correlation": 2, "cbid": 211}},
 {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_Frobnicate_RING_LL", "pid": 0, "tid": 7,
  "ts": 230, "dur": 20, "args": {"correlation": 2, "device": 0, "stream": 7}}
]}
EOF
run bad -m deep --replay "$T/bad.json"
expect "exit $RC" eq "$RC" 0
expect "collectives: $(q '[.[] | select(.type == "collective")] | length')" \
	[ "$(q '[.[] | select(.type == "collective")] | length')" = 2 ]
expect "first: $(q '[.[] | select(.type == "collective")][0]')" \
	[ "$(q '[.[] | select(.type == "collective")][0] | [.op, .count, .datatype, .datatype_id,
		.bytes, .comm_known, .rank, .nranks, .seq, .redop, .kernel, .from_kernel_name,
		.enqueue_ns, .gpu_start_ns, .gpu_dur_ns, .pid, .tid]')" = \
	'["allreduce",10,null,null,0,false,0,2,0,"sum","ncclDevKernel_AllReduce_Sum_f32_RING_LL",false,120000,130000,20000,7,8]' ]
expect "second: $(q '[.[] | select(.type == "collective")][1]')" \
	[ "$(q '[.[] | select(.type == "collective")][1] | [.op, .count, .bytes, .seq,
		.from_kernel_name, .algorithm, .protocol]')" = '["unknown",null,null,1,true,"RING","LL"]' ]
expect "status: $(q '.[] | select(.type == "collective_status")')" \
	[ "$(q '.[] | select(.type == "collective_status") | [.files, .collectives, .comm_unknown,
		.dtype_unknown, .count_unknown, .op_unknown, .waits]')" = '[1,2,2,2,1,1,0]' ]
report collective_replay_bad

# --- summaries per interval, made here ------------------------------------------
# ts in us: record_param_comms at T, its launch at T+20, the kernel at T+30
{
	echo '{"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": ['
	c=0
	for t in 100 1100000 1300000; do
		c=$((c + 1))
		[ $c -gt 1 ] && echo ','
		cat <<EOF
 {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 7, "tid": 8, "ts": $t, "dur": 50,
  "args": {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": $((c * 10)), "Group size": 2}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 8, "ts": $((t + 20)),
  "dur": 5, "args": {"correlation": $c, "cbid": 211}},
 {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
  "ts": $((t + 30)), "dur": 20, "args": {"correlation": $c, "device": 0, "stream": 7}}
EOF
	done
	echo ']}'
} >"$T/three.json"
run intervals -i 1 --replay "$T/three.json"
expect "exit $RC: $(tail -c 300 "$ERR")" eq "$RC" 0
expect "rows: $(q '[.[] | select(.type == "collective_summary")]')" \
	[ "$(q '[.[] | select(.type == "collective_summary") | [.interval_start_ns, .interval_end_ns,
		.ts_ns, .op, .calls, .bytes, .joined, .gpu_ns]]')" = \
	'[[0,1000000000,0,"allreduce",1,40,1,20000],[1000000000,2000000000,1000000000,"allreduce",2,200,2,40000]]' ]
report collective_replay_intervals

# --- errors -------------------------------------------------------------------
run noreplay --replay-rank "$T/bad.json"
expect "--replay-rank alone: exit $RC, want 64" eq "$RC" 64
expect "--replay-rank alone: $(head -c 200 "$ERR")" grep -q -- '--replay-rank needs --replay' "$ERR"
run twice -m deep --replay "$T/bad.json" --replay-rank "$T/bad.json"
expect "rank twice: exit $RC" [ "$RC" -ne 0 ]
expect "rank twice: $(tail -c 300 "$ERR")" grep -q 'rank 0 again: give each rank' "$ERR"
expect "rank twice: collectives $(q '[.[] | select(.type == "collective")] | length')" \
	[ "$(q '[.[] | select(.type == "collective")] | length')" = 4 ]
expect "rank twice: waits" [ "$(q '[.[] | select(.type == "collective_wait")] | length')" = 0 ]
if [ -r "$K/kineto_docs_h100_after_fix_trace.json" ]; then
	run nodist -m deep --replay "$T/bad.json" --replay-rank "$K/kineto_docs_h100_after_fix_trace.json"
	expect "no distributedInfo: exit $RC" eq "$RC" 0
	expect "no distributedInfo: $(tail -c 300 "$ERR")" grep -q 'has no distributedInfo' "$ERR"
fi
report collective_replay_errors

# --- Nsight Systems exports: no NCCL, no collective ------------------------------
if [ -r "$DATA/nsys/pipit_saxpy_mpi_a100_rank0.nsys.sqlite" ]; then
	for f in pipit_cloverleaf_a100 pipit_saxpy_mpi_a100_rank0; do
		run "nsys_$f" -m deep --replay "$DATA/nsys/$f.nsys.sqlite"
		expect "$f: exit $RC" eq "$RC" 0
		expect "$f: $(q '[.[] | select(.type == "replay_status")]')" [ "$(q '[.[] |
			select(.type == "replay_status") | [.format, .ok, .kernels > 0, .unmatched]]')" = \
			'[["nsys-sqlite",true,true,0]]' ]
		expect "$f: collective records" \
			[ "$(q '[.[] | select(.type | test("^collective"))] | length')" = 0 ]
	done
	report collective_replay_nsys
else
	skip collective_replay_nsys "no shared data in $DATA"
fi

if [ ! -r "$K/hta_sampled_rank-1.json.gz" ]; then
	skip collective_replay_vllm "no shared data in $DATA"
	skip collective_replay_ranks "no shared data in $DATA"
	exit 0
fi

# --- vLLM TP4, rank 0 ---------------------------------------------------------
run vllm -m deep --replay "$K/tracemap_vllm_llama_tp4_h100_rank0.pt.trace.json.gz"
expect "exit $RC: $(tail -c 300 "$ERR")" eq "$RC" 0
expect "ops: $(q '[.[] | select(.type == "collective") | .op] | group_by(.) | map([.[0], length])')" \
	[ "$(q '[.[] | select(.type == "collective") | .op] | group_by(.) | map([.[0], length])')" = \
	'[["allgather",10],["allreduce",161]]' ]
expect "all-reduce fields" [ "$(q '[.[] | select(.type == "collective" and .op == "allreduce") |
	[.redop, .datatype, .algorithm, .protocol, .count, .comm_known, .rank, .nranks,
	 .from_kernel_name, .stream]] | unique')" = \
	'[["sum","bfloat16","RING","LL",null,false,0,4,true,"0x7"]]' ]
expect "all-reduce GPU time" [ "$(q '[.[] | select(.type == "collective" and .op == "allreduce") |
	.gpu_dur_ns] | add')" = 16509216 ]
expect "all-gather fields" [ "$(q '[.[] | select(.type == "collective" and .op == "allgather") |
	[.count, .bytes, .datatype, .comm_known, .nranks]] | unique')" = '[[32064,64128,"bfloat16",true,4]]' ]
expect "no waits from one rank" [ "$(q '[.[] | select(.type == "collective_wait")] | length')" = 0 ]
report collective_replay_vllm

# --- two ranks ------------------------------------------------------------------
R0=$K/hta_sampled_rank-0.json.gz R1=$K/hta_sampled_rank-1.json.gz
run ranks -m deep --replay "$R0" --replay-rank "$R1"
expect "exit $RC: $(tail -c 300 "$ERR")" eq "$RC" 0
expect "collectives per instance" [ "$(q '[.[] | select(.type == "collective") | .instance] |
	group_by(.) | map([.[0], length])')" = '[["hta_sampled_rank-0",10],["hta_sampled_rank-1",10]]' ]
expect "waits by end" [ "$(q '[.[] | select(.type == "collective_wait") | .end] | group_by(.) |
	map([.[0], length])')" = '[["complete",5],["flush",10]]' ]
# the five pairs: [first arrival (rank 0), last rank, late ns, op]
expect "complete waits: $(q '[.[] | select(.type == "collective_wait" and .end == "complete") |
	[.ranks[0].arrival_ns, .last_rank, .late_ns, .op]]')" \
	[ "$(q '[.[] | select(.type == "collective_wait" and .end == "complete") |
	[.ranks[0].arrival_ns, .last_rank, .late_ns, .op, .ranks[0].wait_ns, .expected,
	 .instance]] | sort')" = \
	'[[1682725898125052000,1,4859000,"alltoall",4859000,2,"hta_sampled_rank-1"],[1682725898295662000,1,3302000,"allreduce",3302000,2,"hta_sampled_rank-1"],[1682725898585321000,1,84000,"allgather",84000,2,"hta_sampled_rank-1"],[1682725899146327000,1,22328000,"allreduce",22328000,2,"hta_sampled_rank-1"],[1682725899185890000,1,1292000,"allgather",1292000,2,"hta_sampled_rank-1"]]' ]
expect "flushed waits name the missing rank" [ "$(q '[.[] | select(.type == "collective_wait" and
	.end == "flush") | (.missing_ranks | length) == 1 and .arrived == 1] | all')" = true ]
expect "status: $(q '.[] | select(.type == "collective_status")')" \
	[ "$(q '.[] | select(.type == "collective_status") | [.files, .collectives, .matched,
		.unmatched, .waits, .comm_unknown]')" = '[2,20,5,10,15,20]' ]
expect "a replay_status per file" [ "$(q '[.[] | select(.type == "replay_status") | .ok] |
	length')" = 2 ]
DEEP=$OUT
run ranks_sentinel -i 0.25 --replay "$R0" --replay-rank "$R1"
expect "sentinel: exit $RC" eq "$RC" 0
expect "sentinel: no collective records" [ "$(q '[.[] | select(.type == "collective")] | length')" = 0 ]
expect "sentinel: summaries $(q '[.[] | select(.type == "collective_summary")]')" \
	[ "$(q '[.[] | select(.type == "collective_summary")] | [(map(.calls) | add),
		(map(.wait_ns) | add), (map(select(.rank == 1).last) | add), (map(.late_ns) | add)]')" = \
	'[20,31865000,5,31865000]' ]
# per 250 ms window and instance: the deep run's collectives by enqueue, its waits by last
# arrival (Python: the times are epoch ns, beyond jq's doubles)
bad=$(python3 - "$DEEP" "$OUT" 250000000 <<'PY'
import json, sys
from collections import Counter
deep = [json.loads(l) for l in open(sys.argv[1])]
sent = [json.loads(l) for l in open(sys.argv[2])]
i = int(sys.argv[3])
inst = {c["pid"]: c["instance"] for c in deep if c["type"] == "collective"}
want = Counter()
for c in deep:
    if c["type"] == "collective":
        want[(c["enqueue_ns"] or c["gpu_start_ns"]) // i, c["instance"], "calls"] += 1
    if c["type"] == "collective_wait":
        for r in c["ranks"]:
            want[c["last_arrival_ns"] // i, inst[r["pid"]], "waits"] += 1
got, off = Counter(), []
for s in sent:
    if s["type"] != "collective_summary":
        continue
    if s["interval_start_ns"] % i or s["interval_end_ns"] - s["interval_start_ns"] != i:
        off.append((s["interval_start_ns"], s["interval_end_ns"]))
    for f in ("calls", "waits"):
        if s[f]:
            got[s["interval_start_ns"] // i, s["instance"], f] += s[f]
print("; ".join(([f"rows not on a window: {off[:2]}"] if off else []) +
                ([f"per window {sorted(got.items())} want {sorted(want.items())}"] if got != want else [])))
PY
)
expect "sentinel: $bad" [ -z "$bad" ]
report collective_replay_ranks
