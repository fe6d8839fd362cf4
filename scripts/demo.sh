#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# scripts/demo.sh - `make demo`: the agent at work on this machine, with no
# GPU and no broker (issue 2, item 7).
#
# First, the newest views: a Python engine's slow step and the Python
# function it spent its time in (--python-stacks), the Python line behind
# each CUDA launch (deep mode), then a slow NCCL rank.
# Then it starts the agent in sentinel mode, then a small CUDA workload
# (build/tests/integration/cuda_calls -s: two threads calling the 22 probed
# launch, copy and synchronising entry points through the real libcudart and
# the stub libcuda about once a millisecond, sleeping in between, and the two
# GPU code loads once) and some loopback UDP traffic; after
# a few seconds it stops the agent and shows its readable summary, a few of
# the JSON lines it wrote, and where they are.
#
# Environment: BUILD (default build), DEMO_SECONDS (default 5), DEMO_DIR
# (default $BUILD/demo).
set -u

BUILD=${BUILD:-build}
SECS=${DEMO_SECONDS:-5}
DIR=${DEMO_DIR:-$BUILD/demo}
AGENT=$BUILD/infertrace-agent
CUDA_CALLS=$BUILD/tests/integration/cuda_calls
WORKLOAD=$BUILD/tests/integration/workload
OUT=$DIR/events.jsonl
LOG=$DIR/agent.log
SUMMARY=$DIR/summary.txt
UDP_PORT=${DEMO_UDP_PORT:-47999}

bold() { if [ -t 1 ]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }

if [ "$(id -u)" -ne 0 ]; then
	echo "make demo: the agent loads eBPF programs and needs root; run: sudo make demo"
	exit 0
fi
for f in "$AGENT" "$CUDA_CALLS"; do
	if [ ! -x "$f" ]; then
		echo "make demo: $f is missing; run it through make demo (it builds what it needs)"
		exit 0
	fi
done

mkdir -p "$DIR"
rm -f "$OUT" "$LOG" "$SUMMARY"
AGENT_PID=""
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	[ -n "$AGENT_PID" ] && kill -INT "$AGENT_PID" 2>/dev/null
	wait 2>/dev/null
}
trap cleanup EXIT

# agent_bg LOG OUT [options]: an agent of a part of its own, writing OUT, its
# log in LOG; returns once it runs (or after 10 s); its pid in BGA
agent_bg() {
	local log=$1 out=$2 i
	shift 2
	"$AGENT" -o "$out" "$@" 2>"$log" &
	BGA=$!
	PIDS+=("$BGA")
	for ((i = 0; i < 200; i++)); do
		grep -q 'running in' "$log" 2>/dev/null && break
		sleep 0.05
	done
}

cat <<EOF

  infertrace demo
  ---------------
  infertrace-agent finds the processes on this node that load the CUDA
  libraries (libcudart, libcuda) and NCCL, attaches uprobes to their
  synchronisation points and collectives (and to every CUDA launch in deep
  mode, deep-dives and sampled windows) and follows, in the kernel, what
  those processes do: when their threads are off the CPU and why, their slow
  syscalls, and the node's network traffic. It writes JSON lines.

  This machine has no GPU: the workload's CUDA calls fail at once, but the
  probes see every call, which is all the agent needs. For ${SECS} s:
    - a CUDA workload, 2 threads calling all 22 probed CUDA entry points
      about once a millisecond (sleeping 1 ms between rounds),
    - loopback UDP traffic, 200 datagrams of 1000 bytes.
  The agent runs in sentinel mode (the default): per-thread counters kept in
  the kernel, one summary per thread per second, single events only above
  the thresholds (1 ms). Sentinel traps the synchronisation points and copies,
  not the launches (--sentinel-launches all, --launch-sampling or --mode deep
  add them): the launch entry points show no calls below.

EOF

# py_engine LOG OUT BASE [agent options] -- SCRIPT ARGS...: an agent of its
# own (agent_bg LOG OUT), then the system python3 running SCRIPT (ARGS with
# "{go}" for its go file, BASE.go; its output in BASE.out and BASE.err),
# released once the agent traces it; returns when both have ended
py_engine() {
	local log=$1 out=$2 base=$3 opts=() args=() a i pp ap
	shift 3
	while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
	shift
	for a in "$@"; do args+=("${a/\{go\}/$base.go}"); done
	rm -f "$base.go"
	agent_bg "$log" "$out" "${opts[@]}"
	ap=$BGA
	/usr/bin/python3 "${args[@]}" >"$base.out" 2>"$base.err" &
	pp=$!
	PIDS+=("$pp")
	for ((i = 0; i < 100; i++)); do # go once the agent traces it
		PYPID=$(head -n 1 "$base.out" 2>/dev/null | jq -r '.pid // empty' 2>/dev/null)
		[ -n "$PYPID" ] && grep -q "pid $PYPID: Python" "$log" && break
		sleep 0.1
	done
	touch "$base.go"
	wait "$pp" 2>/dev/null
	kill -INT "$ap" 2>/dev/null
	wait "$ap" 2>/dev/null
}

# 0. the newest view first: what the host ran while the GPU waited. A Python
#    "engine" on the system python3 (tests/integration/py_steps.py) runs 80
#    steps marked with include/infertrace/step.h (libusdt_steps.so), each a
#    Python callback; step 60 spends 200 ms in pad_batch(). The agent samples
#    the engine's Python frames in the kernel (--python-stacks, on by
#    default), flags the step and names the function.
PY_STEPS=tests/integration/py_steps.py
USDT_LIB=$BUILD/tests/integration/libusdt_steps.so
if [ -x /usr/bin/python3 ] && [ -f "$USDT_LIB" ] && [ -f "$PY_STEPS" ] && command -v jq >/dev/null; then
	PDIR=$DIR/python
	POUT=$DIR/python.jsonl
	rm -rf "$PDIR" "$POUT"
	mkdir -p "$PDIR"
	bold "What the host ran while the GPU waited: a Python engine's frames, sampled in the kernel"
	py_engine "$PDIR/agent.log" "$POUT" "$PDIR/engine" -i 0.25 -- \
		"$PY_STEPS" /usr/local/cuda/lib64/libcudart.so "$USDT_LIB" "{go}" 80 60 200
	echo "  $(grep -o "Python [0-9.]* frames sampled.*" "$PDIR/agent.log" | head -n 1)"
	echo "  the slow step's anomaly and its suspects:"
	jq -r 'select(.type == "anomaly" and .dur_ns >= 150000000) |
		"    \(.kind), \(.dur_ns / 1e6 | floor) ms (expected \(.expected_ns / 1e6 * 10 | floor / 10) ms):",
		(.suspects[] | "      \(.what): \(.evidence)")' "$POUT" | head -n 5
	echo "  the engine thread's Python profile over the run (python_profile records, innermost first):"
	jq -s -r '[.[] | select(.type == "python_profile")] | group_by(.stack | map(.function)) |
		map({s: (map(.samples) | add), f: (.[0].stack | map("\(.function):\(.line)") | join(" <- "))}) |
		sort_by(-.s) | .[:4][] | "    \(.s) samples  \(.f)"' "$POUT"
	echo "  (all of it: $POUT; docs/operations.md, \"Python frames\")"
	echo
	# 0a. the Python line behind each launch: in deep mode a launch that
	#    takes its user stack carries the Python frames that made it
	#    (tests/integration/py_launch.py: a kernel launch and two copies,
	#    from two threads, through the real libcudart)
	LOUT=$DIR/python_launch.jsonl
	rm -f "$LOUT"
	bold "Which Python line launched it: cuda_launch records in deep mode"
	py_engine "$PDIR/agent-launch.log" "$LOUT" "$PDIR/launch" -i 0.25 --mode deep -- \
		tests/integration/py_launch.py /usr/local/cuda/lib64/libcudart.so "{go}" 10
	jq -s -r '[.[] | select(.type == "cuda_launch" and has("python_stack"))] |
		group_by([.api, .copy_kind, (.python_stack | map(.function))]) |
		.[] | "    \(length) x \(.[0].api)\(if .[0].copy_kind then " (copy kind \(.[0].copy_kind))" else "" end) <- " +
		(.[0].python_stack[:3] | map("\(.function) (\(.file | split("/") | last):\(.line))") | join(" <- "))' "$LOUT"
	echo "  (cuda_launch.python_stack; its native stack alone is the interpreter's loop)"
	echo
fi

# 0b. which rank everyone waited for. Four processes
#    are the four ranks of one NCCL communicator (the NCCL double of
#    tests/fakes, same ABI as libnccl.so.2, whose all-reduce waits for every
#    rank: no GPU needed); rank 3 comes 300 ms late to all-reduce #4. The
#    agent's NCCL uprobes see each rank arrive (agent/pipeline/nccl_live.c).
NCCL_CALLS=$BUILD/tests/integration/nccl_calls
FAKE_NCCL=$BUILD/tests/fakes/nccl/libnccl.so.2
if [ -x "$NCCL_CALLS" ] && [ -f "$FAKE_NCCL" ] && command -v jq >/dev/null; then
	NDIR=$DIR/slow-rank
	NOUT=$DIR/slow-rank.jsonl
	rm -rf "$NDIR" "$NOUT"
	mkdir -p "$NDIR"
	bold "A slow rank: 4 ranks of one NCCL communicator, rank 3 late to all-reduce #4"
	agent_bg "$NDIR/agent.log" "$NOUT" -i 0.25
	NAP=$BGA
	ID=$((0x20 + RANDOM % 0x50))
	RANKS=()
	for r in 0 1 2 3; do
		d=0
		[ "$r" = 3 ] && d=300
		"$NCCL_CALLS" -L "$FAKE_NCCL" -r "$r" -R 4 -i "$ID" -k 8 -d "$d" -s 4 \
			-w "$NDIR/go" >"$NDIR/rank$r.out" 2>"$NDIR/rank$r.err" &
		RANKS+=($!)
		PIDS+=($!)
		[ "$r" = 0 ] && sleep 0.2
	done
	# start together once the agent has found every rank's libnccl
	for ((i = 0; i < 100; i++)); do
		n=$(jq -s '[.[] | select(.type == "process" and
			((.libraries // []) | any(test("libnccl"))))] | length' "$NOUT" 2>/dev/null)
		[ "${n:-0}" -ge 4 ] && break
		sleep 0.1
	done
	touch "$NDIR/go"
	wait "${RANKS[@]}" 2>/dev/null
	sleep 0.5
	kill -INT "$NAP" 2>/dev/null
	wait "$NAP" 2>/dev/null
	echo "  what the agent wrote for the late all-reduce (a collective_wait record):"
	jq -r 'select(.type == "collective_wait" and .late_ns >= 100000000) | .last_rank as $l |
		"    comm \(.comm), all-reduce #\(.seq): rank \($l) arrived last, \(.late_ns / 1e6 | floor) ms late;",
		"    the others waited \([.ranks[] | select(.rank != $l) | "rank \(.rank) \(.wait_ns / 1e6 | floor) ms"] | join(", "))"' "$NOUT" |
		head -n 2
	echo "  and the anomaly it became:"
	jq -r 'select(.type == "anomaly" and .kind == "straggler") |
		"    \(.kind) (chart \(.chart)): \(.suspects[0].evidence)"' "$NOUT" | head -n 1
	echo "  (all of it: $NOUT; docs/operations.md, \"A slow rank\")"
	echo
fi

# 1. the agent, first: it finds the workload by itself when it starts
"$AGENT" --summary -o "$OUT" -d $((SECS + 3)) 2>"$LOG" &
AGENT_PID=$!
for ((i = 0; i < 200; i++)); do
	grep -q 'running in' "$LOG" 2>/dev/null && break
	if ! kill -0 "$AGENT_PID" 2>/dev/null; then
		echo "make demo: the agent did not start:"
		sed 's/^/  /' "$LOG"
		AGENT_PID=""
		exit 0
	fi
	sleep 0.05
done
bold "agent running (pid $AGENT_PID), writing $OUT"

# 2. the CUDA workload; the agent discovers it (a "process" record, event
#    "attach") and attaches its uprobes to the libraries it maps
"$CUDA_CALLS" -t 2 -s "$SECS" >"$DIR/workload.out" 2>&1 &
PIDS+=($!)
CUDA_PID=$!
bold "CUDA workload started (pid $CUDA_PID): cuda_calls -t 2 -s $SECS"

# 3. loopback traffic: a receiver and a sender from the test workloads when
#    built, else bash's /dev/udp (datagrams to a closed port still cross lo)
if [ -x "$WORKLOAD" ]; then
	"$WORKLOAD" udp-recv "$UDP_PORT" "$SECS" >/dev/null 2>&1 &
	PIDS+=($!)
	sleep 0.2
	("$WORKLOAD" udp-send 127.0.0.1 "$UDP_PORT" 200 1000 >/dev/null 2>&1 ||
		for ((i = 0; i < 200; i++)); do printf '%1000s' x >/dev/udp/127.0.0.1/"$UDP_PORT"; done) &
else
	(for ((i = 0; i < 200; i++)); do
		printf '%1000s' x >/dev/udp/127.0.0.1/"$UDP_PORT" 2>/dev/null
		sleep 0.01
	done) &
fi
PIDS+=($!)
bold "loopback UDP traffic started (port $UDP_PORT)"
echo
printf 'running %s s ' "$SECS"
for ((i = 0; i < SECS; i++)); do
	sleep 1
	printf '.'
done
echo

# 4. let the workload end, then stop the agent: it drains, prints its summary
wait "$CUDA_PID" 2>/dev/null
sleep 1.2 # one more interval, so the last summaries are in
kill -INT "$AGENT_PID" 2>/dev/null
wait "$AGENT_PID"
rc=$?
AGENT_PID=""
if [ "$rc" -ne 0 ]; then
	echo "make demo: the agent exited with $rc:"
	sed 's/^/  /' "$LOG"
	exit 0
fi

# the summary is the part of the log after the "== infertrace summary" line
# (without the agent's own log lines, which may follow it)
sed -n '/^== infertrace summary/,$p' "$LOG" | grep -v '^infertrace-agent: ' >"$SUMMARY"
echo
bold "What the agent saw (its --summary, printed at exit)"
cat <<'EOF'
  CUDA calls:  calls per entry point and thread, counted in the kernel
               (per second over the agent's whole run, a little longer
               than the workload's)
  Off-CPU:     time the threads were blocked (sleeping, waiting) or
               preempted, and time spent waiting in the run queue
  Syscalls:    syscalls that took at least 1 ms (here the 1 ms sleeps)
  Network:     bytes and packets per device on the whole node (lo here)
  Steps:       inference steps and anomalies (none here: this workload has
               no GPU work to cut; the live diagnosis below has)
EOF
if [ -s "$SUMMARY" ]; then
	cat "$SUMMARY"
else
	echo "  (no summary in $LOG)"
fi

echo
bold "A few of the JSON lines ($(wc -l <"$OUT") in all; jq makes them readable)"
if command -v jq >/dev/null; then
	for t in process thread cuda_sync syscall net stats; do
		line=$(grep -m1 "\"type\":\"$t\"" "$OUT")
		[ -n "$line" ] || continue
		echo "  -- type \"$t\":"
		printf '%s\n' "$line" | cut -c1-400 | sed 's/^/  /'
	done
	echo
	echo "  records by type:"
	jq -r .type "$OUT" | sort | uniq -c | sort -rn | sed 's/^/  /'
else
	head -n 5 "$OUT" | cut -c1-400 | sed 's/^/  /'
fi

# Part 2: live diagnosis. No GPU here, so the CUPTI test double (tests/fakes)
# plays the GPU inside the workload (tests/integration/gpu_live -s): the
# agent, its uprobes and the CUPTI shim are the real ones. 40 steps, each
# with some loopback TCP traffic, one of which stalls 40 ms on the host; the
# agent cuts the steps, flags the stalled one, sends the flight recorder's
# window from before it and deep-dives the instance (--anomaly-deep-dive).
GPU_LIVE=$BUILD/tests/integration/gpu_live
if [ -x "$GPU_LIVE" ] && [ -f "$BUILD/libinfertrace_cupti.so" ] && command -v jq >/dev/null; then
	LOUT=$DIR/live-diagnosis.jsonl
	LDIR=$DIR/live-run
	rm -rf "$LDIR" "$LOUT"
	mkdir -p "$LDIR"
	echo
	bold "Live diagnosis: steps, an anomaly and the flight recorder (simulated GPU)"
	echo "  a workload runs 40 inference-like steps (kernel, CUDA graph, driver kernel, copy of"
	echo "  the sampled tokens, 8-32 KB over a loopback TCP connection); step 34 stalls 40 ms on"
	echo "  the host. The GPU is the CUPTI test double of tests/fakes; the agent, its probes and"
	echo "  the CUPTI shim are the production ones. The agent runs with --anomaly-deep-dive 10."
	INFERTRACE_INSTANCE=demo/llm INFERTRACE_RANK=0 INFERTRACE_SHIM_SOCKET=$LDIR/shim.sock \
		"$GPU_LIVE" -t 1 -n 40 -s 34 -N 4000 -w "$LDIR/go" -e "$LDIR/exit" -m sentinel \
		>"$LDIR/work" 2>"$LDIR/work.err" &
	WP=$!
	PIDS+=("$WP")
	for ((i = 0; i < 100; i++)); do [ -s "$LDIR/work" ] && break; sleep 0.05; done
	LPID=$(head -n 1 "$LDIR/work" | jq -r .pid 2>/dev/null)
	"$AGENT" -i 0.25 --pid "$LPID" --shim-socket "$LDIR/shim.sock" --anomaly-deep-dive 10 \
		--control-socket "$LDIR/ctl.sock" --summary -o "$LOUT" 2>"$LDIR/agent.log" &
	LAP=$!
	for ((i = 0; i < 100; i++)); do
		grep -q '"type":"shim_status"' "$LOUT" 2>/dev/null && break
		sleep 0.1
	done
	touch "$LDIR/go"
	# steps are cut 2 s after they end; the anomaly sends the window
	for ((i = 0; i < 100; i++)); do
		grep -q '"type":"flight_recorder"' "$LOUT" 2>/dev/null && break
		sleep 0.1
	done
	sleep 0.5
	# --summary's sections while the agent runs: what an SRE asks a daemon
	"$BUILD/agentctl" --socket "$LDIR/ctl.sock" summary >"$LDIR/summary-live.txt" 2>&1 ||
		cp /dev/null "$LDIR/summary-live.txt"
	# and what the detector said lately, from the agent (no reader of its sinks needed)
	"$BUILD/agentctl" --socket "$LDIR/ctl.sock" anomalies >"$LDIR/anomalies-live.txt" 2>&1 ||
		cp /dev/null "$LDIR/anomalies-live.txt"
	touch "$LDIR/exit"
	wait "$WP" 2>/dev/null
	kill -INT "$LAP" 2>/dev/null
	wait "$LAP" 2>/dev/null
	jq -r -s '[.[] | select(.type == "step")] |
		"  \(length) steps of rank \(.[0].rank): median \(map(.dur_ns) | sort | .[length / 2 | floor] / 1e6 * 10 | floor / 10) ms, longest \(map(.dur_ns) | max / 1e6 * 10 | floor / 10) ms; network \(map(.net_bytes) | min / 1000) to \(map(.net_bytes) | max / 1000) KB per step (sent + received)"' "$LOUT"
	echo "  the anomaly (one record, within a step of the stall), as \`agentctl anomalies\` shows the"
	echo "  running agent's last ones, each with its evidence:"
	if grep -q '^[0-9]' "$LDIR/anomalies-live.txt"; then
		cut -c1-120 "$LDIR/anomalies-live.txt" | sed '/./s/^/    /'
	else
		jq -r 'select(.type == "anomaly") |
			"    \(.kind): \(.dur_ns / 1e6 * 10 | floor / 10) ms, expected \(.expected_ns / 1e6 * 100 | floor / 100) ms",
			(.suspects[] | "      - \(.evidence)")' "$LOUT"
	fi
	echo "  what the flight recorder sent with it (detail sentinel mode keeps but does not send):"
	jq -r -s '(map(.type == "flight_recorder") | index(true)) as $f |
		if $f == null then "    (no window: see \($f))" else
		.[$f] as $w | .[$f + 1:] as $r |
		"    window of \($w.window_ns / 1e9) s: \([$r[] | select(.type == "cuda_launch")] | length) CUDA launches, \([$r[] | select(.type == "kernel")] | length) GPU kernels"
		end' "$LOUT"
	jq -r 'select(.type == "deep_dive" and .action == "start") |
		"  then the anomaly deep-dived \(.instance) for \(.remaining_ns / 1e9 | floor) s (source \(.source), \(.processes) process): every launch, stack and kernel"' "$LOUT"
	echo "  \`agentctl summary\` asked the running agent for its digest (--summary prints the same at"
	echo "  exit); it ends with the detector's account: step durations per phase, anomalies (one"
	echo "  anomaly is one episode; a slowdown that lasts 64 steps becomes the new level), and the"
	echo "  longest steps with the anomaly that flagged each:"
	sum=$LDIR/summary-live.txt
	grep -q '^Steps and anomalies' "$sum" || sum=$LDIR/agent.log
	sed -n '/^Steps and anomalies/,$p' "$sum" | sed 1d | grep '^  ' | cut -c1-120 | sed 's/^/  /'
	echo "  (all of it: $LOUT)"
fi

# Part 2b: the node's GPUs through NVML (--gpu-telemetry), with the step detector.
# No GPU here: the NVML double (tests/fakes/fake_nvml.c) plays two H100s from a
# state file and the CUPTI double plays the workload's GPU (gpu_live -s, device 0
# named GPU 0's UUID). From round 50 of 70 its kernels take 3x as long, and the
# script puts GPU 0 at 1410 MHz under a power cap and a hardware slowdown.
NVML=$BUILD/tests/fakes/libnvidia-ml.so.1
if [ -f "$NVML" ] && [ -x "$GPU_LIVE" ] && [ -f "$BUILD/libinfertrace_cupti.so" ] &&
	command -v jq >/dev/null; then
	TDIR=$DIR/telemetry
	TOUT=$DIR/gpu-telemetry.jsonl
	U0=GPU-11111111-2222-3333-4444-555555555555
	rm -rf "$TDIR" "$TOUT"
	mkdir -p "$TDIR"
	echo
	bold "A slow GPU and why: its clock (NVML, simulated GPUs)"
	echo "  the agent reads every GPU each --gpu-telemetry-period (here 100 ms) on a thread of its own;"
	echo "  a workload runs 70 steps on GPU 0, whose kernels take 3x as long from step 50 on while"
	echo "  NVML reports GPU 0 power-capped and slowed. The detector runs with its defaults."
	gpus() { # gpus SM0 REASONS0 POWER0 TEMP0
		printf '%s\n' "$U0|NVIDIA H100 80GB HBM3|$1|1980|2619|$3|700000|$4|97|40|$2" \
			"GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee|NVIDIA H100 80GB HBM3|1980|1980|2619|512000|700000|61|96|38|0" \
			>"$TDIR/state.tmp" && mv "$TDIR/state.tmp" "$TDIR/state"
	}
	gpus 1980 0 520000 62
	INFERTRACE_INSTANCE=demo/llm-gpu INFERTRACE_SHIM_SOCKET=$TDIR/shim.sock \
		"$GPU_LIVE" -t 1 -n 70 -s 1000 -P 40 -G "50:$TDIR/slow" -U "$U0" -w "$TDIR/go" \
		-e "$TDIR/exit" -m sentinel >"$TDIR/work" 2>"$TDIR/work.err" &
	WP=$!
	PIDS+=("$WP")
	for ((i = 0; i < 100; i++)); do [ -s "$TDIR/work" ] && break; sleep 0.05; done
	TPID=$(head -n 1 "$TDIR/work" | jq -r .pid 2>/dev/null)
	FAKE_NVML_STATE=$TDIR/state "$AGENT" -i 0.25 --pid "$TPID" --shim-socket "$TDIR/shim.sock" \
		--control-socket none --nvml-lib "$NVML" --gpu-telemetry-period 100 --summary \
		-o "$TOUT" 2>"$TDIR/agent.log" &
	TAP=$!
	for ((i = 0; i < 100; i++)); do
		grep -q '"type":"shim_status"' "$TOUT" 2>/dev/null && break
		sleep 0.1
	done
	sleep 1 # the usual clock first
	touch "$TDIR/go"
	for ((i = 0; i < 500; i++)); do [ -e "$TDIR/slow" ] && break; sleep 0.01; done
	gpus 1410 c 700000 79
	for ((i = 0; i < 100; i++)); do
		grep -q '"seq":69' "$TOUT" 2>/dev/null && break
		sleep 0.1
	done
	touch "$TDIR/exit"
	wait "$WP" 2>/dev/null
	kill -INT "$TAP" 2>/dev/null
	wait "$TAP" 2>/dev/null
	jq -r 'select(.type == "gpu_device") |
		"  the workload (pid \(.pid)) runs its device \(.device) on \(.uuid) (a gpu_device record)"' "$TOUT"
	jq -r -s '[.[] | select(.type == "anomaly")] |
		"  the slowdown: \(length) anomalies in \([.[] | select(.run == 1)] | length) episode; \([.[] | select(any(.suspects[]; .what == "gpu_clock"))] | length) name the GPU clock (a step that ended before NVML read the GPU again names none)"' "$TOUT"
	echo "  the first that does (kind, duration, expected; its first suspects):"
	jq -r -s '[.[] | select(.type == "anomaly" and any(.suspects[]; .what == "gpu_clock"))] | first // empty |
		"    \(.kind): \(.dur_ns / 1e6 * 10 | floor / 10) ms, expected \(.expected_ns / 1e6 * 100 | floor / 100) ms",
		(.suspects[:3][] | "      - \(.what): \(.evidence)")' "$TOUT"
	echo "  the agent's --summary at exit:"
	sed -n "/^The node's GPUs/,/^\$/p" "$TDIR/agent.log" | sed 1d | grep '^  ' | sed 's/^/  /'
	echo "  (all of it: $TOUT: gpu_telemetry records; metrics infertrace_gpu_sm_clock_mhz,"
	echo "   infertrace_gpu_clock_throttled)"
fi

# Part 3: the GPU side, offline. No GPU here, so the correlator and the step
# detector run on a real trace recorded on an H100 (vLLM, Llama, TP=4), if the
# shared data set is next to the repository.
DATA=${INFERTRACE_DATA:-$(cd "$(dirname "$0")/../.." && pwd)/shared/data}
TRACE=$DATA/kineto/tracemap_vllm_llama_tp4_h100_rank0.pt.trace.json.gz
if [ -f "$TRACE" ] && command -v jq >/dev/null; then
	GOUT=$DIR/gpu-replay.jsonl
	echo
	bold "GPU side: a real vLLM H100 trace through the same correlator (--replay)"
	"$AGENT" --replay "$TRACE" --mode deep -o "$GOUT" --summary 2>"$DIR/gpu-replay.log"
	echo "  every kernel and copy joined to the CPU launch that caused it:"
	jq -r 'select(.type == "replay_status") |
		"    \(.gpu_records) GPU records (\(.kernels) kernels): \(.joined) joined to their launch, \(.unmatched) unmatched"' "$GOUT"
	echo "  the run's GPU records (--summary): busy time, how long kernels waited after their"
	echo "  launch (vLLM's CPU runs 1-2 ms ahead of its graph replays), the top kernels:"
	sed -n '/^GPU records (/,/^$/p' "$DIR/gpu-replay.log" | sed '1d;/^$/d' | head -n 11 | cut -c1-140 |
		sed 's/^/  /'
	echo "  kernels per launch entry point (graph replays map to their cudaGraphLaunch):"
	jq -r 'select(.type == "kernel") | .launch_api' "$GOUT" | sort | uniq -c | sort -rn | sed 's/^/    /'
	echo "  GPU time by the Python calls that launched it (--summary; each kernel's launch_python:"
	echo "  the trace's Python calls open at its launch). The piecewise CUDA-graph replays under"
	echo "  vLLM's backends.py take 58%, the Inductor-compiled code 35%, NCCL all-reduce 7%:"
	sed -n '/^GPU time by the Python calls/,/^$/p' "$DIR/gpu-replay.log" | sed '1d;/^$/d;s/^/  /'
	echo "  inference steps, cut at vLLM's execute_model markers in the trace, with their GPU breakdown:"
	jq -r 'select(.type == "step") |
		if .kernels == 0 and .memcpys == 0 then
			"    step \(.seq): \(.dur_ns / 1e3 | floor) us, no GPU work"
		else
			"    step \(.seq): \(.phase) \(.dur_ns / 1e6 | floor) ms, \(.kernels) kernels (\(.graph_kernels) from CUDA graphs), GPU busy \(.gpu_busy_ns / 1e6 | floor) ms"
		end' "$GOUT"
	echo "  one kernel record:"
	grep -m1 '"type":"kernel"' "$GOUT" | cut -c1-400 | sed 's/^/    /'
	echo "  (all of it: $GOUT)"
fi

cat <<EOF

$(bold "Where things are")
  JSON lines:      $OUT
  agent log:       $LOG  (summary also in $SUMMARY)
  record types:    docs/events.md
  try next:        $AGENT --help
                   jq 'select(.type=="thread")' $OUT
                   $AGENT --mode deep --pid PID   # every launch, with stacks
                   jq 'select(.type=="anomaly")' $DIR/live-diagnosis.jsonl
EOF
exit 0
