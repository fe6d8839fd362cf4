#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# scripts/gpu_check.sh - the check that only a node with a real NVIDIA GPU can
# run (docs/operations.md, "Checking a GPU node"): the agent in deep mode, a
# real CUDA program started with CUDA_INJECTION64_PATH=libinfertrace_cupti.so,
# and every kernel, memcpy and memset the GPU ran joined to the call that
# launched it, on one clock (tests/gpu/check_real.py says exactly what is
# asserted). Three runs:
#
#   cuda:      tests/gpu/real_cuda.cu (built here with nvcc): every launch
#              path the agent probes, each call bracketed by CLOCK_MONOTONIC
#   torch:     tests/gpu/torch_steps.py (if python3 imports torch with CUDA):
#              cuBLAS and PyTorch kernels, eager and CUDA-graph steps
#   sentinel:  torch_steps.py again in sentinel mode: gpu_summary records
#              count every kernel (those past the shim's launch-record budget
#              unmatched, by design), then with the budget raised: all joined
#   nccl:      tests/gpu/torch_nccl.py: real NCCL collectives on one rank,
#              each decoded and joined to its NCCL kernel; then in sentinel
#              mode, every call counted in the collective_summary rows, and
#              one collective record per call in the flight recorder's
#              window (sent by agentctl deep-dive)
#   diag:      tests/gpu/torch_faults.py in sentinel mode: steps with host
#              stalls, GPU slowdowns and CPU contention injected (about 4% of
#              2,500 steps), the agent's step records and anomalies scored
#              against them (the step detector on a real stream with a
#              breakdown; check_real.py diag says what is asserted)
#   telemetry: (with cuda) the agent's gpu_telemetry records name every GPU
#              nvidia-smi lists, by UUID, and the workload's gpu_device
#              record prints its device's UUID as nvidia-smi does
#   overhead:  ns per cudaLaunchKernel call (real_cuda -b) bare, under the
#              agent in each mode, with the shim injected; reported
#
# Needs root, nvcc (or REAL_CUDA, a binary built from real_cuda.cu) and the
# agent built (make). Environment: BUILD (default build), AGENT, AGENTCTL,
# SHIM, REAL_CUDA (default: in BUILD), GPU_CHECK_DIR
# (where the records and reports go, default $BUILD/gpu_check), AGENT_LD
# (a library folder for the agent and agentctl alone, when built on another
# machine), ROUNDS (real_cuda rounds per thread, default 20), STEPS (torch
# steps, default 30), DIAG_STEPS (default 2500), DIAG_SEED (default 1),
# GPU_CHECK_ONLY (some of: cuda torch sentinel nccl diag overhead; default all), OVERHEAD_ROUNDS (default 3; 0 skips the overhead runs),
# BENCH_LAUNCHES (launches per overhead run, default 100000). Exit status: 0 when every run that could run passed.
set -u

BUILD=${BUILD:-build}
DIR=${GPU_CHECK_DIR:-$BUILD/gpu_check}
AGENT=${AGENT:-$BUILD/infertrace-agent}
AGENTCTL=${AGENTCTL:-$BUILD/agentctl}
SHIM=${SHIM:-$BUILD/libinfertrace_cupti.so}
REAL_CUDA=${REAL_CUDA:-$BUILD/gpu/real_cuda}
ROUNDS=${ROUNDS:-20}
STEPS=${STEPS:-30}
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
rc=0

say() { printf '== %s\n' "$*"; }
die() { printf 'gpu_check: %s\n' "$*" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || die "the agent loads eBPF programs: run as root"
[ -x "$AGENT" ] && [ -f "$SHIM" ] || die "$AGENT or $SHIM missing: run make first"
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 ||
	die "no NVIDIA GPU here (nvidia-smi -L failed); this check needs one"
mkdir -p "$DIR" "$(dirname "$REAL_CUDA")"
rm -f "$DIR"/*.jsonl "$DIR"/*.work "$DIR"/*.err "$DIR"/*.json
SHIM=$(readlink -f "$SHIM")

# the shim's libcupti.so.13 (and real_cuda's libcudart.so.13) when the
# loader does not find them: the toolkit's, else a pip wheel's
WL_LD=
if ldd "$SHIM" | grep -q 'libcupti.*not found'; then
	c=$(ls "$CUDA_HOME"/extras/CUPTI/lib64/libcupti.so.* "$CUDA_HOME"/lib64/libcupti.so.* \
		$($PY -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null |
			xargs -n1 -I{} sh -c 'ls {}/nvidia/*/lib/libcupti.so.* {}/nvidia/cuda_cupti/lib/libcupti.so.* 2>/dev/null') \
		2>/dev/null | head -n 1)
	[ -n "$c" ] || die "the shim needs libcupti.so.13 and none was found (CUDA_HOME=$CUDA_HOME)"
	WL_LD=$(dirname "$c")
fi
if [ -x "$REAL_CUDA" ] && ldd "$REAL_CUDA" | grep -q 'libcudart.*not found'; then
	WL_LD=${WL_LD:+$WL_LD:}$CUDA_HOME/lib64
fi

say "node: $(uname -r); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1)"
say "agent $AGENT, shim $SHIM${WL_LD:+ (libcupti from $WL_LD)}"

if [ ! -x "$REAL_CUDA" ]; then
	NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
	[ -x "$NVCC" ] || NVCC=$(command -v nvcc) || die "no nvcc to build tests/gpu/real_cuda.cu"
	say "building $REAL_CUDA"
	"$NVCC" -O2 -cudart shared -gencode arch=compute_90,code=sm_90 \
		-gencode arch=compute_75,code=compute_75 -o "$REAL_CUDA" "$HERE/tests/gpu/real_cuda.cu" \
		-lcuda -lpthread || die "nvcc failed"
fi

# pyq FILE NEEDLE EXPR: true when a JSON line r of FILE holding NEEDLE makes
# the Python EXPR true (NEEDLE spares parsing every line of a deep run)
pyq() {
	$PY - "$1" "$2" "$3" <<'EOF'
import json, sys
ok = False
try:
    for ln in open(sys.argv[1], errors="replace"):
        if sys.argv[2] not in ln:
            continue
        try:
            r = json.loads(ln)
        except ValueError:
            continue
        if eval(sys.argv[3]):
            ok = True
            break
except OSError:
    pass
sys.exit(0 if ok else 1)
EOF
}
wait_q() { # wait_q FILE NEEDLE EXPR SECS: until pyq, at most SECS of wall time
	local end=$((SECONDS + $4))
	while [ $SECONDS -lt $end ]; do
		pyq "$1" "$2" "$3" && return 0
		sleep 0.1
	done
	return 1
}

# live NAME MODE CMD...: the workload up (shim injected) and waiting, the agent
# on its pid, attached and (deep) the shim switched, the workload released,
# finished and exited, the agent stopped. Leaves $DIR/NAME.{work,jsonl,err}.
live() {
	local name=$1 mode=$2 go=$DIR/$1.go ex=$DIR/$1.exit sock=$DIR/$1.sock wpid apid cond
	shift 2
	rm -f "$go" "$ex" "$sock"
	env CUDA_INJECTION64_PATH="$SHIM" INFERTRACE_SHIM_SOCKET="$sock" \
		${WL_LD:+LD_LIBRARY_PATH=$WL_LD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} \
		"$@" -w "$go" -e "$ex" >"$DIR/$name.work" 2>"$DIR/$name.werr" &
	wpid=$!
	wait_q "$DIR/$name.work" '"pid"' '"pid" in r' 120 ||
		{ say "$name: the workload never came up: $(tail -c 400 "$DIR/$name.werr")"; kill $wpid; return 1; }
	# env, not a shell function: $! is then the agent itself, which SIGINT stops
	env ${AGENT_LD:+LD_LIBRARY_PATH=$AGENT_LD} "$AGENT" -o "$DIR/$name.jsonl" -i 0.25 --mode "$mode" --pid "$wpid" --shim-socket "$sock" \
		--control-socket "$DIR/$name.ctl" 2>"$DIR/$name.err" &
	apid=$!
	cond="r.get('type') == 'process' and r.get('pid') == $wpid and any('libcudart' in l for l in r.get('libraries') or [])"
	if ! wait_q "$DIR/$name.jsonl" '"process"' "$cond" 30; then
		say "$name: no process record with libcudart for $wpid: $(tail -c 600 "$DIR/$name.err")"
		kill $wpid $apid 2>/dev/null
		return 1
	fi
	cond="r.get('type') == 'shim_status' and r.get('pid') == $wpid"
	[ "$mode" = deep ] && cond="$cond and r.get('capture') == 'deep'"
	wait_q "$DIR/$name.jsonl" '"shim_status"' "$cond" 20 || say "$name: no shim_status ($mode) for $wpid"
	sleep 0.3
	touch "$go"
	wait_q "$DIR/$name.work" '"done"' '"done" in r' 300 || say "$name: the workload did not finish"
	sleep 3 # the shim flushes CUPTI every second (its default): its last buffers are joined
	if [ -n "${WINDOW:-}" ]; then
		# the flight recorder's window of the workload's instance, sent by a deep-dive
		local inst
		inst=$($PY -c 'import json, sys
for ln in open(sys.argv[1], errors="replace"):
    if "\"process\"" in ln:
        r = json.loads(ln)
        if r.get("type") == "process" and r.get("pid") == int(sys.argv[2]):
            print(r["instance"]); break' "$DIR/$name.jsonl" "$wpid")
		env ${AGENT_LD:+LD_LIBRARY_PATH=$AGENT_LD} "$AGENTCTL" --socket "$DIR/$name.ctl" \
			deep-dive --instance "$inst" --duration 2 >/dev/null 2>&1 ||
			say "$name: agentctl deep-dive --instance $inst failed"
		wait_q "$DIR/$name.jsonl" '"flight_recorder"' "r.get('type') == 'flight_recorder'" 10 ||
			say "$name: no flight_recorder record after the deep-dive"
		sleep 0.5
	fi
	touch "$ex"
	# the shim must never harm the process: any exit status but 0 fails the check
	wait $wpid || { say "FAIL $name: workload exit status $?: $(tail -c 400 "$DIR/$name.werr")"; rc=1; }
	sleep 0.5
	kill -INT $apid
	wait $apid || say "$name: agent exit status $?"
	say "$name: $(wc -l <"$DIR/$name.jsonl") records; agent log: $(grep -c . "$DIR/$name.err") lines"
}

check() { # check NAME MODE [ARG]: tests/gpu/check_real.py's report
	local name=$1
	shift
	if $PY "$HERE/tests/gpu/check_real.py" "$1" "$DIR/$name.work" "$DIR/$name.jsonl" "${@:2}" \
		>"$DIR/$name.report.json"; then
		say "PASS $name"
	else
		say "FAIL $name"
		rc=1
	fi
	cat "$DIR/$name.report.json"
}

# want SECTION: whether GPU_CHECK_ONLY (a space-separated list) names it, or is unset
want() { [ -z "${GPU_CHECK_ONLY:-}" ] || [[ " $GPU_CHECK_ONLY " == *" $1 "* ]]; }

if want cuda; then
	live cuda deep "$REAL_CUDA" -t 2 -n "$ROUNDS" && check cuda cuda || rc=1
fi

# telemetry: the agent reads the GPUs through NVML (--gpu-telemetry auto, the
# default) during the cuda run; its records must name every GPU nvidia-smi
# lists, by the same UUID, and the shim's gpu_device record of the workload
# must print its device's UUID as nvidia-smi does (the byte order the agent
# assumes); the clocks are reported beside nvidia-smi's
if want cuda && [ -s "$DIR/cuda.jsonl" ]; then
	nvidia-smi --query-gpu=index,uuid,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
		--format=csv,noheader,nounits >"$DIR/nvidia-smi.csv" 2>&1
	if $PY - "$DIR/cuda.jsonl" "$DIR/nvidia-smi.csv" >"$DIR/telemetry.report.json" <<'PYEOF'; then
import json, sys
smi = [l.split(", ") for l in open(sys.argv[2]) if l.strip()]
uuids = {f[1] for f in smi}
tel, dev = {}, []
for ln in open(sys.argv[1], errors="replace"):
    if '"gpu_telemetry"' in ln or '"gpu_device"' in ln:
        r = json.loads(ln)
        if r.get("type") == "gpu_telemetry":
            tel.setdefault(r.get("uuid"), []).append(r)
        elif r.get("type") == "gpu_device":
            dev.append(r)
rep = {"nvidia_smi": smi, "telemetry_uuids": sorted(u for u in tel if u),
       "gpu_device": [{k: d.get(k) for k in ("pid", "device", "uuid", "mig")} for d in dev],
       "last": {u: {k: v[-1].get(k) for k in ("device", "sm_clock_mhz", "sm_clock_max_mhz",
                "power_mw", "temperature_c", "throttle")} for u, v in tel.items()}}
rep["ok_telemetry"] = uuids <= set(tel)
rep["ok_device"] = bool(dev) and all(d.get("uuid") in uuids for d in dev)
print(json.dumps(rep, indent=1))
sys.exit(0 if rep["ok_telemetry"] and rep["ok_device"] else 1)
PYEOF
		say "PASS telemetry"
	else
		say "FAIL telemetry"
		rc=1
	fi
	cat "$DIR/telemetry.report.json"
fi

if ! $PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	say "SKIP torch, sentinel, nccl: python3 has no torch with CUDA"
else
	dk=
	if want torch || want sentinel; then
		if live torch deep $PY "$HERE/tests/gpu/torch_steps.py" -n "$STEPS"; then
			check torch torch
			dk=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["by_type"].get("kernel", 0))' \
				"$DIR/torch.report.json" 2>/dev/null)
		else
			rc=1
		fi
	fi
	if want sentinel; then
		live torch_sentinel sentinel $PY "$HERE/tests/gpu/torch_steps.py" -n "$STEPS" &&
			check torch_sentinel sentinel $dk || rc=1
		# the launch-record budget raised: then every kernel is joined in sentinel too
		live torch_sentinel_all sentinel env INFERTRACE_SHIM_LAUNCH_RATE=10000000 \
			$PY "$HERE/tests/gpu/torch_steps.py" -n "$STEPS" &&
			check torch_sentinel_all sentinel $dk --all-joined || rc=1
	fi
	# the step detector on real steps with injected faults (the launch-record
	# budget raised: every kernel joined, each step's breakdown whole)
	if want diag; then
		live diag sentinel env INFERTRACE_SHIM_LAUNCH_RATE=10000000 \
			$PY "$HERE/tests/gpu/torch_faults.py" -n "${DIAG_STEPS:-2500}" --seed "${DIAG_SEED:-1}" &&
			check diag diag || rc=1
	fi
	# real NCCL, one rank: collectives decoded and joined to their kernels
	if want nccl; then
		live nccl deep $PY "$HERE/tests/gpu/torch_nccl.py" -n 10 && check nccl nccl || rc=1
		# sentinel: no single records, the per-interval summaries count every call
		WINDOW=1 live nccl_sentinel sentinel $PY "$HERE/tests/gpu/torch_nccl.py" -n 10 &&
			check nccl_sentinel nccl_sentinel || rc=1
	fi
fi

# overhead: what one cudaLaunchKernel costs the launching thread (real_cuda
# -b), side by side in one run, each configuration 3 times, interleaved:
# bare; the agent in sentinel (no launch probe); deep (the launch probes:
# cudaLaunchKernel and the cuLaunchKernel it enters, 2 traps); the shim
# injected (CUPTI's callback and activity records) under a sentinel agent;
# the shim under a deep agent. Reported, not asserted.
BENCH_N=${BENCH_LAUNCHES:-100000}
bench_one() { # bench_one NAME SHIM(0|1) AGENT_MODE(none|sentinel|deep)
	local name=$1 go=$DIR/$1.go out=$DIR/$1.work wpid apid=
	rm -f "$go"
	if [ "$2" = 1 ]; then
		env CUDA_INJECTION64_PATH="$SHIM" INFERTRACE_SHIM_SOCKET="$DIR/bench.sock" \
			${WL_LD:+LD_LIBRARY_PATH=$WL_LD} "$REAL_CUDA" -t 1 -b "$BENCH_N" -w "$go" >"$out" 2>"$out.err" &
	else
		env ${WL_LD:+LD_LIBRARY_PATH=$WL_LD} "$REAL_CUDA" -t 1 -b "$BENCH_N" -w "$go" >"$out" 2>"$out.err" &
	fi
	wpid=$!
	wait_q "$out" '"pid"' '"pid" in r' 60 || { kill $wpid; return 1; }
	if [ "$3" != none ]; then
		env ${AGENT_LD:+LD_LIBRARY_PATH=$AGENT_LD} "$AGENT" -o "$DIR/$name.jsonl" -i 1 --mode "$3" \
			--pid "$wpid" --shim-socket "$DIR/bench.sock" --control-socket none 2>"$DIR/$name.err" &
		apid=$!
		wait_q "$DIR/$name.jsonl" '"process"' "r.get('type') == 'process' and r.get('pid') == $wpid" 30
		[ "$2" = 1 ] && wait_q "$DIR/$name.jsonl" '"shim_status"' "r.get('type') == 'shim_status' and r.get('pid') == $wpid" 20
		sleep 0.3
	fi
	touch "$go"
	wait $wpid || say "$name: workload exit status $?"
	[ -n "$apid" ] && { kill -INT $apid; wait $apid; }
	$PY -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if "launches" in l][0]
print("%-18s mean %7.0f ns  p50 %6d  p99 %6d" % (sys.argv[2], r["launch_ns_mean"], r["launch_ns_p50"], r["launch_ns_p99"]))' \
		"$out" "$name" | tee -a "$DIR/overhead.txt"
}
rm -f "$DIR/overhead.txt"
ROUNDS_OH=${OVERHEAD_ROUNDS:-3}
want overhead || ROUNDS_OH=0
[ "$ROUNDS_OH" -gt 0 ] &&
	say "overhead: ns per cudaLaunchKernel call on the launching thread ($BENCH_N launches, $ROUNDS_OH rounds)"
for ((round = 1; round <= ROUNDS_OH; round++)); do
	bench_one "bare_$round" 0 none
	bench_one "sentinel_$round" 0 sentinel
	bench_one "deep_$round" 0 deep
	bench_one "shim_sentinel_$round" 1 sentinel
	bench_one "shim_deep_$round" 1 deep
done
exit $rc
