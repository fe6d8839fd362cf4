# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# bench/lib.sh - helpers of the agent benchmarks (bench/run.sh, bench/vllm.sh,
# bench/nccl.sh), sourced; say() comes from the script. Needs bpftool and jq.
# The loop benchmarks (run.sh, nccl.sh) start and stop their loop and probes
# here; vllm.sh its agent (agent_up, probe_down).

# bench_setup CALLS: the settings every loop benchmark shares, from the
# environment: BUILD (build), ROUNDS (BENCH_ROUNDS, 7), CALLS (BENCH_CALLS,
# default CALLS), the loop's and the agent's CPUs (BENCH_LOOP_CPU: the last
# one, BENCH_AGENT_CPU: 0), AGENT, HZ
bench_setup() {
	BUILD=${BUILD:-build}
	ROUNDS=${BENCH_ROUNDS:-7}
	CALLS=${BENCH_CALLS:-$1}
	NCPU=$(nproc)
	LOOP_CPU=${BENCH_LOOP_CPU:-$((NCPU - 1))}
	AGENT_CPU=${BENCH_AGENT_CPU:-0}
	AGENT=$BUILD/infertrace-agent
	HZ=$(getconf CLK_TCK)
}

# utime + stime of a process, in clock ticks
cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# wait until FILE holds a line matching RE (or PID dies); 0 when found
wait_for() {
	local file=$1 re=$2 pid=$3 i
	for ((i = 0; i < 300; i++)); do
		grep -qE "$re" "$file" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# One measurement of a loop benchmark (run.sh, nccl.sh): loop_up, then at most
# one probe (bare_up or agent_up), then loop_go, then probe_down (also what
# the script's exit trap calls).
#
# loop_up GO OUT: the measured loop ($LOOP -n $CALLS -w GO, waiting for GO) on
# the loop's CPU, its output in OUT, its pid in LOOP_PID; no probe yet
# (PROBE_PID empty, PROBE_T0 0); 0 once the loop is ready
loop_up() {
	PROBE_PID="" PROBE_T0=0
	taskset -c "$LOOP_CPU" "$LOOP" -n "$CALLS" ${BENCH_LOOP_ARGS:-} -w "$1" >"$2" 2>&1 &
	LOOP_PID=$!
	wait_for "$2" '^ready' "$LOOP_PID"
}

# bare_up LIB SYMBOL ERR: the bare counting uprobe ($BARE) on SYMBOL of LIB,
# on the agent's CPU, its output in ERR, its pid in PROBE_PID; 0 once attached
bare_up() {
	taskset -c "$AGENT_CPU" "$BARE" "$1" "$2" >"$3" 2>&1 &
	PROBE_PID=$!
	wait_for "$3" '^attached' "$PROBE_PID"
}

# agent_up ERR RE... -- ARGS...: the agent with ARGS on the agent's CPU, its
# log in ERR, its pid in PROBE_PID; 0 once its log has a line matching each
# RE, and then its CPU ticks so far in PROBE_T0 (what attaching cost is not
# measured)
agent_up() {
	local err=$1 re
	local -a ready=()
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		ready+=("$1")
		shift
	done
	shift
	taskset -c "$AGENT_CPU" "$AGENT" "$@" >/dev/null 2>"$err" &
	PROBE_PID=$!
	for re in "${ready[@]}"; do
		wait_for "$err" "$re" "$PROBE_PID" || return 1
	done
	PROBE_T0=$(cpu_ticks "$PROBE_PID")
}

# probe_down: the probe running now (PROBE_PID), if any, stopped with SIGINT
# (the agent drains its rings and reports) and waited for
probe_down() {
	[ -n "${PROBE_PID:-}" ] || return 0
	kill -INT "$PROBE_PID" 2>/dev/null
	wait "$PROBE_PID" 2>/dev/null
	PROBE_PID=""
}

# loop_go GO OUT: the loop released and waited for; its ns per call (from
# its result line in OUT) in LOOP_NS, empty without one
loop_go() {
	touch "$1"
	wait "$LOOP_PID"
	LOOP_NS=$(sed -n 's/.*"ns_per_call":\([0-9.]*\).*/\1/p' "$2")
}

# uprobes on the CUDA libraries that another process holds (another agent,
# a test run): they would add their cost to our loop. Wait a while for them
# to go; the measurement is flagged when they stay.
# FOREIGN_RE: the files that matter (default: any CUDA library); OWN_PID:
# a process whose probes are not foreign (the agent being measured)
foreign_probes() {
	bpftool perf show -j 2>/dev/null | jq --arg re "${FOREIGN_RE:-libcuda}" --argjson own "${OWN_PID:-0}" '
		[.[] | select((.fd_type // "") | test("uprobe")) | select(.pid != $own)
		| select((.filename // "") | test($re))] | length' 2>/dev/null || echo 0
}
CONTAMINATED=0
wait_quiet() { # wait_quiet [TRIES]: half-seconds to wait at most (60)
	local i n
	for ((i = 0; i < ${1:-60}; i++)); do
		n=$(foreign_probes)
		[ "${n:-0}" -eq 0 ] && return 0
		[ "$i" -eq 0 ] && say "  (waiting for $n uprobes on the CUDA libraries held by other processes to go)"
		sleep 0.5
	done
	CONTAMINATED=$((CONTAMINATED + 1))
	return 1
}

# prog_ns PID NAME: ns per run of the BPF program NAME that process PID holds
# (an fd of PID, /proc/PID/fdinfo's prog_id; run_time_ns / run_cnt of bpftool
# prog show, counted only while kernel.bpf_stats_enabled is 1); empty when
# none ran
prog_ns() {
	local ids
	ids=$(grep -h '^prog_id:' /proc/"$1"/fdinfo/* 2>/dev/null | awk '{ print $2 }' | jq -s -c .)
	bpftool prog show -j 2>/dev/null | jq -r --argjson ids "${ids:-[]}" --arg name "$2" '
		[.[] | select(.name == $name and (.id as $i | $ids | index($i)) and (.run_cnt // 0) > 0)]
		| if length == 0 then empty else (map(.run_time_ns) | add) / (map(.run_cnt) | add) end' 2>/dev/null
}
