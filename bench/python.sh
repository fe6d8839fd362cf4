#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/python.sh - what --python-stacks costs a Python engine (owner:
# agent/sources/python.c, bpf/python.bpf.c). Prints figures, never asserts.
#
# The system python3 runs a fixed amount of pure-Python work 12 frames deep
# (bench/py_work.py: it maps libcudart, so the agent traces it), pinned to
# one CPU, under the agent in three configurations, in turn each round so
# that drift touches all alike:
#   off     --python-stacks off (the agent otherwise the same)
#   49hz    the default
#   999hz   --python-hz 999 (20x the samples: the per-sample cost shows)
#   old49   with BENCH_OLD_AGENT=PATH (an older build's infertrace-agent):
#           that agent's default, side by side with 49hz
# For each: the work's wall time (median of ROUNDS), its ratio to off, the
# agent's CPU seconds, and the sampler's own time per sample from the
# kernel's BPF statistics (kernel.bpf_stats_enabled, restored after).
#
# Environment: BUILD (build), BENCH_ROUNDS (5), BENCH_PY_ITERS (1000000),
# BENCH_PY_LAUNCHES (200000), BENCH_OLD_AGENT (none).
set -u
source "$(dirname "$0")/lib.sh"
bench_setup 0
ITERS=${BENCH_PY_ITERS:-1000000}
PY=/usr/bin/python3
WORK=bench/py_work.py
CUDART=/usr/local/cuda/lib64/libcudart.so
say() { printf '%s\n' "$*"; }

say "== Python frames (--python-stacks): a Python loop's wall time, side by side =="
if [ "$(id -u)" -ne 0 ] || [ ! -x "$AGENT" ] || [ ! -x "$PY" ] || [ ! -e "$CUDART" ]; then
	say "bench/python.sh: skipped (needs root, $AGENT, $PY and $CUDART)"
	exit 0
fi
TMP=$(mktemp -d /tmp/infertrace-bench-py.XXXXXX)
old_stats=$(cat /proc/sys/kernel/bpf_stats_enabled 2>/dev/null || echo 0)
cleanup() {
	echo "$old_stats" >/proc/sys/kernel/bpf_stats_enabled 2>/dev/null
	[ -n "${APID:-}" ] && kill "$APID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
echo 1 >/proc/sys/kernel/bpf_stats_enabled 2>/dev/null || say "(no BPF statistics: kernel.bpf_stats_enabled not writable)"

prog_ns() { # prog_ns NAME: "run_time_ns run_cnt" of the loaded program NAME (0 0: none)
	bpftool prog show name "$1" -j 2>/dev/null | jq -r 'if type=="array" then .[0] else . end
		| "\(.run_time_ns // 0) \(.run_cnt // 0)"' 2>/dev/null | head -n 1 | grep . || echo "0 0"
}
run_one() { # run_one CONFIG: one timed run; appends "config wall_s agent_cpu_s ns_per_sample samples"
	local cfg=$1 args=() t0 t1 c0 c1 rt0 rc0 rt1 rc1 agent=$AGENT
	case $cfg in
	off) args=(--python-stacks off) ;;
	49hz) args=() ;;
	999hz) args=(--python-hz 999) ;;
	old49) args=() agent=$BENCH_OLD_AGENT ;;
	esac
	taskset -c "$AGENT_CPU" "$agent" -o /dev/null -i 1 "${args[@]}" 2>"$TMP/agent.err" &
	APID=$!
	wait_for "$TMP/agent.err" 'running in' "$APID" || { say "agent did not start: $(tail -n 2 "$TMP/agent.err")"; return 1; }
	read -r rt0 rc0 <<<"$(prog_ns py_sample)"
	c0=$(cpu_ticks "$APID")
	t0=$(date +%s.%N)
	taskset -c "$LOOP_CPU" "$PY" "$WORK" "$CUDART" "$ITERS" >/dev/null || say "py_work.py failed"
	t1=$(date +%s.%N)
	c1=$(cpu_ticks "$APID")
	read -r rt1 rc1 <<<"$(prog_ns py_sample)"
	kill -INT "$APID"
	wait "$APID" 2>/dev/null
	APID=
	awk -v c="$cfg" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" -v hz="$HZ" \
		-v rt="$((rt1 - rt0))" -v rc="$((rc1 - rc0))" \
		'BEGIN { printf "%s %.4f %.3f %s %d\n", c, t1 - t0, (c1 - c0) / hz, rc ? sprintf("%.0f", rt / rc) : "-", rc }' \
		>>"$TMP/res"
}

CFGS=(off 49hz 999hz)
[ -n "${BENCH_OLD_AGENT:-}" ] && [ -x "$BENCH_OLD_AGENT" ] && CFGS+=(old49)
for ((r = 0; r < ROUNDS; r++)); do
	for cfg in "${CFGS[@]}"; do run_one "$cfg" || exit 0; done
done
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
base=$(awk '$1=="off"{print $2}' "$TMP/res" | median)
say "python3 $("$PY" -c 'import platform; print(platform.python_version())'), $ITERS loops of 12 calls, loop on CPU $LOOP_CPU, agent on CPU $AGENT_CPU, median of $ROUNDS"
printf '%-7s %9s %9s %11s %13s %12s\n' config wall_s ratio agent_cpu_s ns_per_sample samples_run
for cfg in "${CFGS[@]}"; do
	w=$(awk -v c="$cfg" '$1==c{print $2}' "$TMP/res" | median)
	a=$(awk -v c="$cfg" '$1==c{print $3}' "$TMP/res" | median)
	n=$(awk -v c="$cfg" '$1==c{print $4}' "$TMP/res" | median)
	s=$(awk -v c="$cfg" '$1==c{print $5}' "$TMP/res" | median)
	printf '%-7s %9s %9s %11s %13s %12s\n' "$cfg" "$w" "$(awk -v w="$w" -v b="$base" 'BEGIN { printf "%.4f", w / b }')" "$a" "$n" "$s"
done
say "(ns_per_sample: the sampler's run time per CPU clock tick, every CPU's, Python or not, a tick without a sample included; samples_run: its runs, ticks)"

# The launch probes' Python frames (deep mode, every launch with its user
# stack: --stack-rate 1000000): a Python loop of LAUNCHES cudaLaunchKernel
# calls 12 frames deep (bench/py_launch_work.py), under
#   stack   --python-stacks off: the user stack only
#   python  the default: the stack and the Python frames (py_launch)
#   none    no agent: the calls alone
#   old     with BENCH_OLD_AGENT=PATH (an older build's infertrace-agent):
#           that agent as "stack", to compare the launch path side by side
# wall time per launch, the agent's CPU, and the launch program's own time
# per call (BPF statistics; a tail call's time counts to its caller, so
# python's includes py_launch).
LAUNCHES=${BENCH_PY_LAUNCHES:-200000}
LWORK=bench/py_launch_work.py
say ""
say "== Python frames at each launch (deep mode): a Python launch loop's wall time, side by side =="
run_launch() { # run_launch CONFIG: appends "config wall_s agent_cpu_s probe_ns us_per_call"
	local cfg=$1 args=() t0 t1 c0=0 c1=0 k0 k1 agent=$AGENT
	case $cfg in
	stack) args=(--python-stacks off) ;;
	python) args=() ;;
	old) args=(--python-stacks off) agent=$BENCH_OLD_AGENT ;;
	esac
	if [ "$cfg" != none ]; then
		taskset -c "$AGENT_CPU" "$agent" -o /dev/null -i 1 --mode deep --stack-rate 1000000 \
			"${args[@]}" 2>"$TMP/agent.err" &
		APID=$!
		wait_for "$TMP/agent.err" 'running in' "$APID" || { say "agent did not start: $(tail -n 2 "$TMP/agent.err")"; return 1; }
		c0=$(cpu_ticks "$APID")
	fi
	k0=$(prog_ns cudaLaunchKernel)
	t0=$(date +%s.%N)
	taskset -c "$LOOP_CPU" "$PY" "$LWORK" "$CUDART" "$LAUNCHES" >/dev/null 2>&1 || say "py_launch_work.py failed"
	t1=$(date +%s.%N)
	k1=$(prog_ns cudaLaunchKernel)
	if [ "$cfg" != none ]; then
		sleep 0.5 # the agent drains the ring
		c1=$(cpu_ticks "$APID")
		kill -INT "$APID"
		wait "$APID" 2>/dev/null
		APID=
	fi
	awk -v c="$cfg" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" -v hz="$HZ" -v n="$LAUNCHES" \
		-v k="${k0% *} ${k1% *} ${k0#* } ${k1#* }" '
		function per(s,   f) { split(s, f, " "); return f[4] > f[3] ? sprintf("%.0f", (f[2] - f[1]) / (f[4] - f[3])) : "-" }
		BEGIN { printf "%s %.4f %.3f %s %.2f\n", c, t1 - t0, (c1 - c0) / hz, per(k), (t1 - t0) / n * 1e6 }' \
		>>"$TMP/lres"
}
LCFGS=(none stack python)
[ -n "${BENCH_OLD_AGENT:-}" ] && [ -x "$BENCH_OLD_AGENT" ] && LCFGS+=(old)
for ((r = 0; r < ROUNDS; r++)); do
	for cfg in "${LCFGS[@]}"; do run_launch "$cfg" || exit 0; done
done
lbase=$(awk '$1=="stack"{print $2}' "$TMP/lres" | median)
say "$LAUNCHES launches 12 frames deep, loop on CPU $LOOP_CPU, agent on CPU $AGENT_CPU, median of $ROUNDS"
printf '%-7s %9s %9s %10s %11s %11s\n' config wall_s vs_stack us_per_call agent_cpu_s probe_ns
for cfg in "${LCFGS[@]}"; do
	col() { awk -v c="$cfg" -v i="$1" '$1==c{print $i}' "$TMP/lres" | median; }
	w=$(col 2)
	printf '%-7s %9s %9s %10s %11s %11s\n' "$cfg" "$w" "$(awk -v w="$w" -v b="$lbase" 'BEGIN { printf "%.4f", w / b }')" \
		"$(col 5)" "$(col 3)" "$(col 4)"
done
say "(probe_ns: cudaLaunchKernel's program per call: the record with its user stack, and in python the tail-called py_launch with the Python frames; the rest of us_per_call over none is the uprobe's trap)"
