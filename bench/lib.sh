# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# bench/lib.sh - helpers of the agent benchmarks (bench/run.sh, bench/vllm.sh,
# bench/nccl.sh), sourced; say() comes from the script. Needs bpftool and jq.

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

