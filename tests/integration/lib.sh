# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# shellcheck shell=bash
#
# tests/integration/lib.sh - helpers shared by the integration scripts.
#
# Every script sources this file, then calls the helpers below. A test case
# collects its failed expectations with `expect`/`fail_because` and ends with
# `report NAME`, which prints exactly one line: "PASS NAME" or
# "FAIL NAME: first reasons" (tests/run.sh counts those lines), or use
# `skip NAME WHY`. Every wait is bounded; every process started through
# `bg_start`/`agent_start` and every netns made through `netns_add` is removed
# by the EXIT trap.
set -u

IT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$IT_ROOT/$BUILD ;; esac
AGENT=$BUILD/infertrace-agent
CUDA_CALLS=$BUILD/tests/integration/cuda_calls
WORKLOAD=$BUILD/tests/integration/workload
T=$(mktemp -d /tmp/infertrace-it.XXXXXX)

_it_pids=()
_it_netns=()
AGENT_PID=
AGENT_OUT=
AGENT_ERR=
AGENT_RC=

it_cleanup() {
	local p i
	for p in "${_it_pids[@]}"; do
		kill -0 "$p" 2>/dev/null || continue
		kill -KILL "$p" 2>/dev/null
	done
	for p in "${_it_pids[@]}"; do
		for ((i = 0; i < 50; i++)); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
	done
	for p in "${_it_netns[@]}"; do
		ip netns pids "$p" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
		ip netns del "$p" 2>/dev/null
	done
	if [ -n "${IT_KEEP:-}" ]; then
		echo "kept $T" >&2
	else
		rm -rf "$T"
	fi
}
trap it_cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------ reporting ----
_why=()
expect() { # expect "reason if false" test-args...
	local why=$1
	shift
	"$@" || _why+=("$why")
}
fail_because() { _why+=("$*"); }
report() { # report NAME: one line, then reset the reasons
	local name=$1 msg
	if [ ${#_why[@]} -eq 0 ]; then
		echo "PASS $name"
	else
		msg=$(printf '%s; ' "${_why[@]:0:4}")
		[ ${#_why[@]} -gt 4 ] && msg+="(+$((${#_why[@]} - 4)) more)"
		echo "FAIL $name: ${msg%; }"
	fi
	_why=()
}
skip() { echo "SKIP $1: $2"; _why=(); }
# integer comparisons that tolerate empty or null (they are then false)
num() { [[ "${1:-}" =~ ^-?[0-9]+$ ]]; }
ge() { num "$1" && num "$2" && [ "$1" -ge "$2" ]; }
le() { num "$1" && num "$2" && [ "$1" -le "$2" ]; }
eq() { num "$1" && num "$2" && [ "$1" -eq "$2" ]; }
# kernel_at_least MAJOR MINOR: the running kernel is that release or later
kernel_at_least() {
	local v maj min
	v=$(uname -r)
	maj=${v%%.*}
	min=${v#*.}
	min=${min%%[!0-9]*}
	[ "$maj" -gt "$1" ] || { [ "$maj" -eq "$1" ] && [ "$min" -ge "$2" ]; }
}
between() { ge "$1" "$2" && le "$1" "$3"; } # between V LO HI (inclusive)

# ------------------------------------------------------------ processes ----
# bg_start OUTFILE cmd...: start in the background, pid in BG_PID
bg_start() {
	local out=$1
	shift
	"$@" >"$out" 2>"$out.err" &
	BG_PID=$!
	_it_pids+=("$BG_PID")
}

# wait_exit PID SECS: wait (bounded) for a child to end; its status in WAIT_RC
wait_exit() {
	local pid=$1 secs=$2 i
	WAIT_RC=
	for ((i = 0; i < secs * 20; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$pid" 2>/dev/null; then
		return 1
	fi
	wait "$pid" 2>/dev/null
	WAIT_RC=$?
	return 0
}

# wait_line FILE SECS: until FILE has a complete first line
wait_line() {
	local f=$1 secs=$2 i
	for ((i = 0; i < secs * 20; i++)); do
		[ -s "$f" ] && [ "$(head -c 1 "$f")" = "{" ] && head -n 1 "$f" | grep -q '}' && return 0
		sleep 0.05
	done
	return 1
}

# wait_workload_done FILE SECS: until the workload writing FILE says it is done (a
# '"done"' line); false after SECS
wait_workload_done() {
	local f=$1 secs=$2 i
	for ((i = 0; i < secs * 10; i++)); do
		grep -q '"done"' "$f" && return 0
		sleep 0.1
	done
	return 1
}

# ---------------------------------------------------------------- agent ----
# agent_start NAME [agent options...]: JSON lines go to $T/NAME.jsonl, stderr
# to $T/NAME.err; returns once the agent runs (BPF loaded, discovery done).
agent_start() {
	local name=$1 i
	shift
	AGENT_OUT=$T/$name.jsonl
	AGENT_ERR=$T/$name.err
	AGENT_RC=
	"$AGENT" -o "$AGENT_OUT" "$@" 2>"$AGENT_ERR" &
	AGENT_PID=$!
	_it_pids+=("$AGENT_PID")
	for ((i = 0; i < 300; i++)); do
		grep -q 'running in' "$AGENT_ERR" 2>/dev/null && return 0
		kill -0 "$AGENT_PID" 2>/dev/null || break
		sleep 0.05
	done
	return 1
}

# agent_stop [SIGNAL]: signal the agent (default INT), wait up to 60 s (its
# uprobes' detach takes 0.1 s a link idle, about 1 s a link on a loaded
# machine: docs/operations.md); exit status in AGENT_RC; false when it did
# not exit
# agent_start_metrics NAME [options]: agent_start with --metrics on a free
# loopback port (up to 5 tries when the port is taken); sets PORT
agent_start_metrics() {
	local name=$1 _
	shift
	for _ in 1 2 3 4 5; do
		PORT=$((20000 + RANDOM % 30000))
		agent_start "$name" "$@" --metrics "127.0.0.1:$PORT" && return 0
		grep -q "Address already in use" "$AGENT_ERR" || return 1
	done
	return 1
}
agent_stop() {
	local sig=${1:-INT}
	[ -n "$AGENT_PID" ] || return 1
	kill -"$sig" "$AGENT_PID" 2>/dev/null
	wait_exit "$AGENT_PID" 60 || return 1
	AGENT_RC=$WAIT_RC
	return 0
}

# agent_tail: the agent's last stderr lines, for failure messages
agent_tail() { tail -n 3 "$AGENT_ERR" 2>/dev/null | tr '\n' '|'; }

# wait_record JQ_CONDITION SECS: until a line of AGENT_OUT matches
# (select(JQ_CONDITION)); lines are flushed every --interval
wait_record() {
	local cond=$1 secs=$2 i
	for ((i = 0; i < secs * 10; i++)); do
		if [ -s "$AGENT_OUT" ] &&
			jq -e -n -R "[inputs | fromjson? | select($cond)] | length > 0" "$AGENT_OUT" >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$AGENT_PID" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# jqe JQ-ARGS...: jq -e quietly (a test condition)
jqe() { jq -e "$@" >/dev/null 2>&1; }
# in_exit_range RC: exited with an error, not killed by a signal
in_exit_range() { [ "$1" -ge 1 ] && [ "$1" -le 125 ]; }
# jqo FILTER: run a jq filter over all of AGENT_OUT's records (slurped as .)
jqo() { local f=${*: -1}; jq -c -n -R "${@:1:$#-1}" "[inputs | fromjson?] | $f" "$AGENT_OUT"; }
# jsonl_py FILE [ARGS...] <<'PY' ... PY: run the Python on stdin with sys.argv[1:]
# = FILE ARGS, recs = [(raw bytes, object)] of FILE's lines that decode as strict
# UTF-8 JSON (as a Kafka consumer would) and bad = "line N: why" for the rest
_jsonl_py='import json, sys
bad, recs = [], []
for n, raw in enumerate(open(sys.argv[1], "rb"), 1):
    try:
        recs.append((raw, json.loads(raw.decode("utf-8"))))
    except Exception as e:
        bad.append(f"line {n}: {e}")
'
jsonl_py() { python3 -c "$_jsonl_py$(cat)" "$@"; }

# fast forms of wait_record/jqf for big deep-dive outputs: grep -F FILTER
# picks the candidate lines first (FILTER: a literal every match contains)
wait_rec() { # wait_rec FILTER JQ_COND SECS
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		grep -F -- "$1" "$AGENT_OUT" 2>/dev/null |
			jq -e -n -R "[inputs | fromjson? | select($2)] | length > 0" >/dev/null 2>&1 && return 0
		kill -0 "$AGENT_PID" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
jqf() { # jqf FILTER [jq options] JQ: like jqo on the lines holding FILTER
	local flt=$1
	shift
	grep -F -- "$flt" "$AGENT_OUT" | jq -c -n -R "${@:1:$#-1}" "[inputs | fromjson?] | ${*: -1}"
}
launches() { # launches PID [AFTER_NS]: cuda_launch records of PID (ts_ns > AFTER_NS)
	grep -F '"type":"cuda_launch"' "$AGENT_OUT" | grep -F "\"pid\":$1," |
		jq -n -R --argjson after "${2:-0}" '[inputs | fromjson? | select(.ts_ns > $after)] | length'
}

# agent_finish PID: PID's exit record, then the agent stops on SIGINT with exit 0
agent_finish() {
	wait_record ".type==\"process\" and .event==\"exit\" and .pid==$1" 10 ||
		fail_because "no process exit record for pid $1"
	agent_stop INT || { fail_because "agent did not exit on SIGINT"; return 1; }
	[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
	return 0
}

# the attach record of PID lists both CUDA libraries (runtime and driver)
cuda_attached() { # cuda_attached PID SECS
	wait_record ".type==\"process\" and .pid==$1 and
		((.libraries // []) | any(test(\"libcudart\"))) and
		((.libraries // []) | any(test(\"libcuda\\\\.so\")))" "$2"
}

# count the agent's fds of one kind: perf_event (uprobes) or a path pattern
agent_fds() { # agent_fds REGEX
	local n
	n=$(ls -l "/proc/$AGENT_PID/fd" 2>/dev/null | grep -cE -- "$1")
	echo "${n:-0}"
}

# nccl_id_hash BYTE: the communicator hash the agent gives an ncclUniqueId of
# 128 bytes BYTE (FNV-1a 64, corr_coll_hash), as collective.comm writes it
nccl_id_hash() {
	python3 -c "
h = 0xcbf29ce484222325
for b in bytes([$1]) * 128:
    h = ((h ^ b) * 0x100000001b3) & (2**64 - 1)
print('0x%x' % h)"
}

# nccl_calls_want N: stats.nccl.calls after N rounds of nccl_calls' round_once()
# (tests/integration/nccl_calls.c) on the real libnccl.so.2: ncclBcast is seen as
# the ncclBroadcast NCCL calls inside it
nccl_calls_want() {
	jq -n -c --argjson n "$1" '{ncclAllReduce: (2 * $n), ncclAllGather: $n, ncclReduceScatter: $n,
		ncclBroadcast: (2 * $n), ncclReduce: $n, ncclAlltoAll: $n, ncclSend: $n, ncclRecv: $n,
		ncclGroupStart: $n, ncclGroupEnd: $n, ncclCommInitRank: $n, ncclCommInitRankConfig: $n,
		ncclCommInitAll: $n, ncclCommSplit: $n, ncclCommDestroy: $n, ncclCommAbort: $n,
		ncclCommInitRankScalable: $n}'
}

# ---------------------------------------------------------------- netns ----
netns_add() { # netns_add NAME
	ip netns add "$1" || return 1
	_it_netns+=("$1")
}

# ------------------------------------------------------------ preflight ----
# the agent needs root and BPF; the workloads need to be built
it_preflight() { # it_preflight NAME...: SKIP every name when it can't run
	local why=
	if [ "$(id -u)" -ne 0 ]; then
		why="needs root"
	elif [ ! -x "$AGENT" ]; then
		why="$AGENT not built (make $BUILD/infertrace-agent)"
	elif [ ! -x "$CUDA_CALLS" ] || [ ! -x "$WORKLOAD" ]; then
		why="workloads not built (make test builds $BUILD/tests/integration/*)"
	elif ! command -v jq >/dev/null; then
		why="jq missing (make deps)"
	fi
	[ -z "$why" ] && return 0
	local n
	for n in "$@"; do
		if [ "$why" = "needs root" ]; then
			skip "$n" "$why"
		else
			echo "FAIL $n: $why"
		fi
	done
	exit 0
}

# ------------------------------------------------------ --pid workloads ----
# run_traced NAME "AGENT_ARGS" WORKLOAD_ARGS...: start the workload (it waits
# for a go file), the agent with --pid on it, release it once the agent has
# attached, wait for it to end and for its exit record, stop the agent.
# Sets WPID (pid) and WTID (its worker thread); false, with the reason
# recorded, when a step fails.
run_traced() {
	local name=$1 aargs=$2 go=$T/$1.go out=$T/$1.work wp
	shift 2
	WPID= WTID=
	bg_start "$out" "$@"
	wp=$BG_PID
	wait_line "$out" 10 || { fail_because "workload printed nothing: $(head -c 200 "$out.err")"; return 1; }
	WPID=$(head -n 1 "$out" | jq -r .pid)
	# shellcheck disable=SC2086 # AGENT_ARGS is a word list
	agent_start "$name" -i 0.25 --pid "$WPID" $aargs || { fail_because "agent did not start: $(agent_tail)"; return 1; }
	wait_record ".type==\"process\" and .event==\"attach\" and .pid==$WPID" 10 ||
		{ fail_because "no attach record for pid $WPID"; return 1; }
	touch "$go"
	wait_exit "$wp" 60 || { fail_because "workload did not finish"; return 1; }
	[ "$WAIT_RC" = 0 ] || fail_because "workload exit $WAIT_RC: $(head -c 200 "$out.err")"
	WTID=$(tail -n 1 "$out" | jq -r '.tid // empty')
	num "$WTID" || { fail_because "workload printed no worker tid"; return 1; }
	agent_finish "$WPID"
}

# thread_sum FIELD: FIELD summed over the worker's thread records
thread_sum() {
	jqo --argjson tid "$WTID" --argjson pid "$WPID" \
		"[.[] | select(.type == \"thread\" and .pid == \$pid and .tid == \$tid) | .$1] | add // 0"
}

# level_shift_steps INSTANCE: a step stream of one decode key, 300 steps of
# 20 ms then 100 of 30 ms (1% deterministic jitter): the detector flags 64
# in a row and accepts the new level (replay.sh, otlp.sh)
level_shift_steps() {
	awk -v inst="$1" 'BEGIN { t = 1000000000
	for (i = 0; i < 400; i++) {
		d = int((i < 300 ? 20e6 : 30e6) * (1 + 0.01 * sin(i * 1.7)))
		printf "{\"schema\":1,\"type\":\"step\",\"instance\":\"%s\",\"rank\":0,\"pid\":100,\"tid\":100,", inst
		printf "\"start_ns\":%.0f,\"dur_ns\":%.0f,\"phase\":\"decode\",\"tokens\":8,\"batch_size\":8,", t, d
		printf "\"kv_tokens\":%d}\n", 4096 + i % 8
		t += d + 100000 } }'
}

# summary_has ERR STEPS ANOMALIES EPISODES LEVELS [KINDS]: the "Steps and
# anomalies" section --summary writes to ERR counts STEPS steps, ANOMALIES
# anomalies in EPISODES episodes (then KINDS, a regex, e.g. ': host_stall
# 1$') and LEVELS new levels accepted
summary_has() {
	local sum ok=1
	sum=$(sed -n '/^Steps and anomalies/,$p' "$1")
	grep -qE "^  steps +$2, [0-9]+ judged" <<<"$sum" || ok=
	grep -qE "^  anomalies +$3 in $4 episode\(s\)${6:-}" <<<"$sum" || ok=
	grep -qE "^  new levels +$5 accepted" <<<"$sum" || ok=
	expect "--summary's steps and anomalies, want $2 steps, $3 anomalies in $4 episode(s) ${6:-}, $5 new levels: $(tr '\n' '|' <<<"$sum")" \
		[ -n "$ok" ]
}
