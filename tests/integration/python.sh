#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# python - the Python frames of traced processes (--python-stacks,
# bpf/python.bpf.c, agent/sources/python.c), sampled from real
# interpreters: the system's python3 (Debian's 3.11) and, where pyenv has
# them, 3.9, 3.10, 3.12 and 3.13.
#
#   python_layout:   agent/sources/python_layout.h against CPython's own
#                    headers (tests/integration/python_layout.c compiled
#                    with -DPy_BUILD_CORE): the system's 3.11 (python3-dev)
#                    and every pyenv 3.10-3.13 with headers; every offset
#                    the walk, the names and the lines use is the compiler's
#   python_profile:  tests/integration/py_steps.py on the system python3:
#                    80 steps marked through libusdt_steps.so, each a
#                    Python callback; step 60 spends 200 ms in pad_batch()
#                    -> spin(). python_profile records for the engine's
#                    thread name spin, pad_batch, decode_step with the
#                    script's path, each function's def line and the line
#                    it ran (spin's loop, the calls in pad_batch and
#                    decode_step; read from the file), the interpreter's
#                    version and --python-hz; lines unknown for under 5% of
#                    the frames;
#                    their samples add up to stats.python.samples exactly;
#                    the step's anomaly (host_stall) has a python suspect,
#                    second after the GPU idle, naming the thread and
#                    "spin (py_steps.py:DEF) <- pad_batch (py_steps.py:CALL)" in
#                    most of its samples; stats.diag.python_suspects counts
#                    it; the Prometheus counter counts them; --summary's
#                    Python section (`agentctl summary --reset` once the
#                    process ended) names the process, its samples and
#                    spin first among its innermost frames; after the
#                    reset, the one at exit has no sample and no process
#   python_other_thread: the same script with a second thread spinning in
#                    background_tokenize() all along, and step 60 sleeping
#                    300 ms in wait_for_batch() (the GIL released, off the
#                    CPU): that step's anomaly names the other thread, its
#                    frames, and that the step's own thread was seldom in
#                    Python on a CPU
#   python_launch:   the Python frames that made each CUDA launch (deep
#                    mode): tests/integration/py_launch.py on the system
#                    python3 and pyenv's 3.10, 3.12 and 3.13 where they
#                    exist, under one agent (--mode deep). Its main thread's
#                    cudaLaunchKernel comes from Attention.forward <-
#                    Model.forward <- run, its host-to-device copy from
#                    prepare_inputs <- run, and a second thread's copies
#                    from Sampler.forward <- sampler_loop, at the same time.
#                    Every cuda_launch record of the process has its user
#                    stack and a python_stack naming exactly those frames,
#                    with the script, the def lines and the lines of the
#                    calls (3.10 has no qualified names: "forward"); none
#                    is given the other thread's; stats.python.launch_stacks
#                    counts the records, launch_unpaired is 0; the
#                    Perfetto export (agentctl export) gives each launch's slice
#                    the same frames in args.python. With --no-stacks, no
#                    record has Python frames either
#   python_launch_gpu: the kernels of those launches, live: tests/integration/
#                    py_gpu.py on the system python3 loads the real CUPTI
#                    shim bound to the CUPTI test double and plays the GPU:
#                    each cudaLaunchKernel (from Attention.forward <-
#                    Model.forward, or from Sampler.forward, through one
#                    gpu_launch()) gets its launch callback and a kernel
#                    record. Deep mode: every kernel record is joined to its
#                    uprobe launch (uprobe+cupti) and carries launch_python,
#                    the frames of that launch exactly (its cuda_launch's
#                    python_stack, the lines of the calls);
#                    stats.python.gpu_records counts them. The agent's
#                    output replayed (--replay --mode deep --perfetto):
#                    every kernel again with its live launch_python
#                    (replay_status.launch_python), and each launch slice of
#                    the Perfetto trace names its Python line (args.python).
#                    --summary's GPU time by Python call, live and in that
#                    replay (the same tree): each line as pyprof_check.py
#                    works it out from the kernel records; its GPU records
#                    section as gpusum_check.py does; `agentctl summary`
#                    before the stop prints both sections as the exit does
#   python_fixed_period: tests/integration/py_periodic.py on the system
#                    python3, on one CPU for 3 s: the first half of every
#                    1/49 s in first_half(), the second in second_half().
#                    The sampler's clock on that CPU (49 Hz on average)
#                    finds each half in 30% to 70% of its 80 or more
#                    samples; one that ticked every 1/49 s (before random
#                    gaps, bpf/python.bpf.c py_sample) found one half in all
#                    (147 of 147)
#   python_versions: the same script with a second thread spinning in
#                    background_tokenize() (in zlib.crc32, the GIL released:
#                    both threads on a CPU at once) on pyenv's 3.10 (no Py_Version:
#                    its version from the library's name; threads matched
#                    by pthread_self(), the fs base), 3.12 and 3.13 (shared
#                    libpython builds): each thread's profiles name its own
#                    function and never the other's, with the version, and
#                    pad_batch at the line of its call in every sample; 3.9
#                    is refused with one warning, counted in
#                    stats.python.unsupported, never sampled. SKIP where
#                    pyenv has none of them
#   python_forged:   tests/integration/python3-forged claims to be 3.11 and
#                    lies: a thread list with a cycle, frames in a cycle,
#                    code objects that are not, names of 2^40 characters,
#                    pointers to unmapped memory, control characters,
#                    Latin-1 and UCS-4 names with a surrogate and a code
#                    point past U+10FFFF, a name of 300 characters. The
#                    agent runs on: 32 frames, truncated; the named frames
#                    clean (valid UTF-8, "?" for what a record must not
#                    hold, the long name cut at a character: 63 of 2 bytes),
#                    the rest "?" and counted once each
#                    (stats.python.unnamed 3, symbols 3); the thread that
#                    no state matches has no samples; its launches (deep
#                    mode) carry the same frames, 32, python_truncated; the
#                    agent exits 0
#   python_embedded: tests/integration/infer-engine links CPython 3.11 in
#                    statically (Debian's libpython3.11.a) under a name
#                    that does not say python and runs py_embedded.py: the
#                    agent finds the interpreter in the program itself
#                    (its /proc/PID/exe), says so once, and samples the
#                    script's thread in embedded_work() at its file and
#                    first line
#   python_code_reused: py_reuse.py frees a code object (alpha_fn, made by
#                    exec) and makes omega_fn at its address, on the
#                    system python3 and pyenv's 3.12 and 3.13: the samples
#                    after the switch name omega_fn, none alpha_fn (the
#                    agent checks a named code object again once an
#                    interval); stats.python.code_reused counts it
#   python_unloadable: a kernel whose verifier refuses the sampler
#                    (INFERTRACE_BREAK_PY_SAMPLER makes it unloadable): auto
#                    says so in one warning and loads the rest (the steps
#                    of a Python process still cut, no python_profile,
#                    stats.python unavailable with the reason); on refuses
#                    to start (exit 1) and says how to go on without it
#   python_off:      --python-stacks off: no sampler, no python_profile
#                    record, no stats.python, the steps still cut: the
#                    engine exits right after its last step, and its 20
#                    step records still name its instance (an exited
#                    process's slot outlives the 2 s before its last steps
#                    are cut; at -i 0.25 it went after 0.5 s); a bad
#                    --python-hz or --python-stacks is refused with a line
#                    naming the option (exit 64)
source "$(dirname "$0")/lib.sh"
NAMES=(python_layout python_profile python_other_thread python_launch python_launch_gpu python_fixed_period
	python_versions python_forged python_embedded python_code_reused python_unloadable python_off)
it_preflight "${NAMES[@]}"

PY_STEPS=$IT_ROOT/tests/integration/py_steps.py
USDT_LIB=$BUILD/tests/integration/libusdt_steps.so
FORGED=$BUILD/tests/integration/python3-forged
SYS_PY=/usr/bin/python3
CUDART=/usr/local/cuda/lib64/libcudart.so
for f in "$USDT_LIB" "$FORGED"; do
	if [ ! -f "$f" ]; then
		for n in "${NAMES[@]}"; do echo "FAIL $n: $f not built (make tests-build)"; done
		exit 0
	fi
done
if [ ! -x "$SYS_PY" ]; then
	for n in "${NAMES[@]}"; do echo "FAIL $n: $SYS_PY missing (make deps)"; done
	exit 0
fi
PYENV=${PYENV_ROOT:-/root/.pyenv}/versions
pyenv_of() { # pyenv_of 3.12: the newest pyenv 3.12.x's python3, or nothing
	local d
	d=$(ls -d "$PYENV/$1".* 2>/dev/null | sort -V | tail -n 1)
	[ -n "$d" ] && [ -x "$d/bin/python3" ] && echo "$d/bin/python3"
}
eqs() { [ "$1" = "$2" ]; }
nes() { [ "$1" != "$2" ]; }
defline() { grep -n "^def $1(" "$PY_STEPS" | cut -d: -f1; } # the def line of a function
lineof() { grep -nF -- "$1" "$PY_STEPS" | head -n 1 | cut -d: -f1; } # the first line holding $1

# py_go NAME PYTHON SCRIPT ARGS...: SCRIPT under the running agent, given
# ARGS with "{go}" replaced by its go file, which is created once the agent
# traces it; the script prints {"pid", "tid", "helper"} first. Sets PYPID,
# PYTID, PYHELPER
py_go() {
	local name=$1 py=$2 out=$T/$1.work go=$T/$1.go args=() a
	shift 2
	for a in "$@"; do args+=("${a/\{go\}/$go}"); done
	PYPID= PYTID= PYHELPER=
	bg_start "$out" "$py" "${args[@]}"
	local wp=$BG_PID
	wait_line "$out" 20 || { fail_because "$name printed nothing: $(head -c 300 "$out.err")"; return 1; }
	PYPID=$(head -n 1 "$out" | jq -r .pid)
	PYTID=$(head -n 1 "$out" | jq -r .tid)
	PYHELPER=$(head -n 1 "$out" | jq -r .helper)
	wait_record ".type==\"process\" and .pid==$PYPID" 10 || fail_because "$name (pid $PYPID) not traced"
	touch "$go"
	wait_exit "$wp" 60 || { fail_because "$name did not finish"; return 1; }
	[ "$WAIT_RC" = 0 ] || fail_because "$name exit $WAIT_RC: $(head -c 300 "$out.err")"
}
# py_run NAME PYTHON STEPS SLOW SLOW_MS [HELPER [SLOW_KIND]]: py_steps.py
py_run() {
	py_go "$1" "$2" "$PY_STEPS" "$CUDART" "$USDT_LIB" "{go}" "$3" "$4" "$5" "${6:-0}" "${7:-pad}"
}

# ---------------------------------------------------------- python_layout --
layout_dirs=()
for d in /usr/include/python3.1[0-3] "$PYENV"/3.1[0-3].*/include/python3.1[0-3]; do
	[ -f "$d/internal/pycore_runtime.h" ] && layout_dirs+=("$d")
done
if [ ! -f /usr/include/python3.11/internal/pycore_frame.h ]; then
	fail_because "the system's CPython headers are missing (python3-dev: make deps)"
fi
checked=()
for d in "${layout_dirs[@]}"; do
	bin=$T/layout.$(echo "$d" | tr -c 'a-z0-9\n' _)
	if ! cc -I"$d" -I"$d/internal" -o "$bin" "$IT_ROOT/tests/integration/python_layout.c" 2>"$bin.err"; then
		fail_because "python_layout.c does not compile against $d: $(head -c 200 "$bin.err")"
		continue
	fi
	res=$("$bin")
	case "$res" in
	ok\ *) checked+=("${res#ok } ($d)") ;;
	*) fail_because "$d: $(echo "$res" | tr '\n' ';')" ;;
	esac
done
[ "${#checked[@]}" -ge 1 ] || fail_because "no CPython headers checked"
echo "# python_layout: checked ${checked[*]}"
report python_layout

# --------------------------------------------------------- python_profile --
agent_start_metrics python_profile -i 0.25 --summary --control-socket "$T/prof.ctl" ||
	fail_because "agent did not start: $(agent_tail)"
py_run sys "$SYS_PY" 80 60 200
if num "$PYPID"; then
	sleep 3 # the last steps are cut 2 s after their end
	metric=$(curl -s "http://127.0.0.1:$PORT/metrics" | awk '$1=="infertrace_python_samples_total"{print $2}')
	# the digest so far (the process has ended), then anew: nothing after it
	"$BUILD/agentctl" --socket "$T/prof.ctl" summary --reset >"$T/prof.reset" 2>&1 ||
		fail_because "agentctl summary --reset: exit $?: $(head -c 300 "$T/prof.reset")"
fi
agent_stop INT || fail_because "agent did not exit on SIGINT"
[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
if num "$PYPID"; then
	pyver=$("$SYS_PY" -c 'import platform; print(platform.python_version())')
	l_spin=$(defline spin) l_pad=$(defline pad_batch) l_dec=$(defline decode_step)
	# the lines they run: the loop of spin(), the calls in pad_batch() and decode_step()
	r_while=$(lineof "while time.monotonic() < end or time.thread_time() < cpu:") r_inc=$((r_while + 1))
	r_pad=$(lineof "    return spin(ms, 0.75)") r_dec=$(lineof "        pad_batch(slow_ms)")
	stats=$(jqo '[.[] | select(.type=="stats")] | last | .python')
	expect "stats.python running: $stats" \
		eqs "$(echo "$stats" | jq -r .state)" running
	expect "one Python process: $stats" \
		eqs "$(echo "$stats" | jq -r .processes)" 1
	samples=$(echo "$stats" | jq -r .samples)
	expect "samples >= 8: $samples" \
		eqs "$(ge "$samples" 8 && echo y)" y
	total=$(jqo '[.[] | select(.type=="python_profile") | .samples] | add')
	expect "profile samples ($total) = stats.python.samples ($samples)" \
		eqs "$total" "$samples"
	expect "metric infertrace_python_samples_total ($metric) <= stats ($samples) and > 0" \
		eqs "$(num "${metric%.*}" && [ "${metric%.*}" -gt 0 ] && [ "${metric%.*}" -le "$samples" ] && echo y)" y
	pad=$(jqo --argjson pid "$PYPID" --argjson tid "$PYTID" --arg f "$PY_STEPS" \
		--argjson ls "$l_spin" --argjson lp "$l_pad" --argjson ld "$l_dec" --arg v "$pyver" \
		--argjson rw "$r_while" --argjson ri "$r_inc" --argjson rp "$r_pad" --argjson rd "$r_dec" '
		[.[] | select(.type=="python_profile" and .pid==$pid and .tid==$tid and .python==$v
			and .hz==49 and .truncated==false
			and (.stack[:3] | map(del(.line)) == [{function:"spin",file:$f,first_line:$ls},
				{function:"pad_batch",file:$f,first_line:$lp},
				{function:"decode_step",file:$f,first_line:$ld}])
			and (.stack[:3] | map(.line)) as [$a, $b, $c]
			| ($a == $rw or $a == $ri) and $b == $rp and $c == $rd)
		| .samples] | add // 0')
	expect "spin (its loop) <- pad_batch (its call) <- decode_step (its call) sampled (>= 4 samples): $pad" \
		eqs "$(ge "$pad" 4 && echo y)" y
	unk=$(echo "$stats" | jq -r .lines_unknown) frames=$(echo "$stats" | jq -r .frames)
	expect "lines known for 95% of the frames at least (lines_unknown $unk of $frames)" \
		eqs "$(num "$unk" && num "$frames" && [ $((unk * 20)) -le "$frames" ] && echo y)" y
	an=$(jqo '[.[] | select(.type=="anomaly" and .dur_ns >= 200000000)]')
	anl=$(echo "$an" | jq -c '[.[] | [.dur_ns,.kind]]')
	expect "one anomaly for the 200 ms step: $anl" \
		eqs "$(echo "$an" | jq length)" 1
	sus=$(echo "$an" | jq -c '.[0].suspects // [] | map(.what)')
	expect "suspects gpu_idle then python: $sus" \
		eqs "$(echo "$an" | jq -r '.[0].suspects[:2] | map(.what) | join(",")')" "gpu_idle,python"
	ev=$(echo "$an" | jq -r '[.[0].suspects[] | select(.what=="python")][0].evidence // ""')
	want="thread $PYTID ran spin (py_steps.py:$l_spin) <- pad_batch (py_steps.py:$r_pad) in "
	expect "python evidence '$ev' starts '$want'" \
		nes "${ev#"$want"}" "$ev"
	ratio=$(echo "$an" | jq -r '[.[0].suspects[] | select(.what=="python")][0].ratio // 0')
	expect "most of the thread's samples in pad_batch: $ratio" \
		eqs "$(jq -n "$ratio >= 0.6")" true
	# --summary's section, as `agentctl summary --reset` printed it once the process ended
	sum=$(sed -n '/^Python frames (--python-stacks, 49 Hz)$/,/^$/p' "$T/prof.reset")
	expect "--summary names the process with its samples: $(echo "$sum" | head -n 3 | tr '\n' '|')" \
		eqs "$(grep -cE "^  pid $PYPID \(python3, Python $pyver\): $samples samples;" <<<"$sum")" 1
	expect "--summary counts its samples: $(sed -n 2p <<<"$sum")" \
		eqs "$(sed -n 2p <<<"$sum")" "  $samples samples of 1 processes"
	first=$(grep -A1 "^  pid $PYPID " <<<"$sum" | sed -n 2p)
	expect "--summary's first function is spin: $first" \
		eqs "$(grep -cE "^ +[0-9]+ +[0-9]+%  spin \(py_steps.py:$l_spin\)$" <<<"$first")" 1
	# and at exit, after the reset: no sample, no process
	sum=$(sed -n '/^Python frames (--python-stacks, 49 Hz)$/,/^$/p' "$AGENT_ERR")
	expect "--summary at exit, after the reset: $(echo "$sum" | head -n 3 | tr '\n' '|')" \
		eqs "$(sed -n '2,$p' <<<"$sum" | grep .)" "  0 samples of 0 processes"
	expect "stats.diag.python_suspects >= 1" \
		eqs "$(jqo '[.[] | select(.type=="stats")] | last | .diag.python_suspects >= 1')" true
fi
report python_profile

# ---------------------------------------------------- python_other_thread --
agent_start python_other_thread -i 0.25 || fail_because "agent did not start: $(agent_tail)"
py_run other "$SYS_PY" 80 60 300 1 sleep
num "$PYPID" && sleep 3 # the last steps are cut 2 s after their end
agent_stop INT || fail_because "agent did not exit on SIGINT"
[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
if num "$PYPID" && num "$PYHELPER"; then
	l_bg=$(defline background_tokenize)
	an=$(jqo --argjson pid "$PYPID" '[.[] | select(.type=="anomaly" and .dur_ns >= 300000000)]')
	expect "one anomaly for the 300 ms step: $(echo "$an" | jq -c '[.[] | [.dur_ns,.kind]]')" \
		eqs "$(echo "$an" | jq length)" 1
	ev=$(echo "$an" | jq -r '[.[0].suspects[]? | select(.what=="python")][0].evidence // ""')
	want="thread $PYHELPER ran background_tokenize (py_steps.py:$l_bg) <- Thread.run (threading.py:"
	tail_want="; the step's own thread $PYTID was seldom in Python on a CPU"
	expect "python evidence '$ev' names the helper thread ($want...$tail_want)" \
		eqs "$([ "${ev#"$want"}" != "$ev" ] && [ "${ev%"$tail_want"}" != "$ev" ] && echo y)" y
fi
report python_other_thread

# ---------------------------------------------------------- python_launch --
PY_LAUNCH=$IT_ROOT/tests/integration/py_launch.py
pl_line() { grep -nF -- "$1" "$PY_LAUNCH" | head -n 1 | cut -d: -f1; } # the first line holding $1
pl_def() { # pl_def CLASS METHOD: the def line of a method
	awk -v c="class $1" -v m="    def $2(" 'index($0, c) == 1 {in_c = 1; next}
		in_c && index($0, m) == 1 {print NR; exit}' "$PY_LAUNCH"
}
LAUNCH_ROUNDS=30
# launch_run NAME PYTHON: py_launch.py
launch_run() { py_go "$1" "$2" "$PY_LAUNCH" "$CUDART" "{go}" "$LAUNCH_ROUNDS"; }
lvers=("$(basename "$SYS_PY"):$SYS_PY")
for v in 3.10 3.12 3.13; do
	p=$(pyenv_of "$v") && lvers+=("$v:$p")
done
agent_start python_launch -i 0.25 --mode deep --stack-rate 100000 --recorder-seconds 60 \
	--control-socket "$T/launch.sock" || fail_because "agent did not start: $(agent_tail)"
declare -A lpid ltid lhelp
for vp in "${lvers[@]}"; do
	v=${vp%%:*}
	launch_run "l$v" "${vp#*:}"
	lpid[$v]=$PYPID ltid[$v]=$PYTID lhelp[$v]=$PYHELPER
done
# the Perfetto export of the flight recorder's window (deep mode keeps every record in it)
out=$("$BUILD/agentctl" --socket "$T/launch.sock" export --perfetto "$T/launch.trace.json" 2>&1)
expect "agentctl export --perfetto: $out" grep -q "trace events" <<<"$out"
sleep 0.6
agent_stop INT || fail_because "agent did not exit on SIGINT"
[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
# the frames each launch must name: [function, first line, line]
d_attn=$(pl_def Attention forward) d_model=$(pl_def Model forward) d_samp=$(pl_def Sampler forward)
d_run=$(pl_line "def run(model):") d_prep=$(pl_line "def prepare_inputs():")
d_loop=$(pl_line "def sampler_loop(")
c_kern=$(pl_line "errors.add(cudart.cudaLaunchKernel(") c_attn=$(pl_line "self.attn.forward()")
c_model=$(pl_line "    model.forward()") c_prep=$(pl_line "    prepare_inputs()")
c_h2d=$(pl_line "errors.add(cudart.cudaMemcpyAsync(0x2000") c_d2h=$(pl_line "0x3000, 64, 2, None))")
c_samp=$(pl_line "        s.forward()")
seen=() total=0
for vp in "${lvers[@]}"; do
	v=${vp%%:*} pid=${lpid[$v]:-} tid=${ltid[$v]:-} help=${lhelp[$v]:-}
	num "$pid" && num "$tid" && num "$help" || continue
	q() { [ "$v" = 3.10 ] && echo "${1##*.}" || echo "$1"; } # 3.10: co_name, no co_qualname
	want=$(jq -n -c --arg f "$PY_LAUNCH" --arg attn "$(q Attention.forward)" \
		--arg model "$(q Model.forward)" --arg samp "$(q Sampler.forward)" \
		--argjson da "$d_attn" --argjson dm "$d_model" --argjson ds "$d_samp" \
		--argjson dr "$d_run" --argjson dp "$d_prep" --argjson dl "$d_loop" \
		--argjson ck "$c_kern" --argjson ca "$c_attn" --argjson cm "$c_model" \
		--argjson cp "$c_prep" --argjson ch "$c_h2d" --argjson cd "$c_d2h" --argjson cs "$c_samp" '
		def fr(n; d; l): {function: n, file: $f, first_line: d, line: l};
		{kernel: [fr($attn; $da; $ck), fr($model; $dm; $ca), fr("run"; $dr; $cm)],
		 h2d: [fr("prepare_inputs"; $dp; $ch), fr("run"; $dr; $cp)],
		 d2h: [fr($samp; $ds; $cd), fr("sampler_loop"; $dl; $cs)]}')
	got=$(jqo -c --argjson pid "$pid" --argjson t "$tid" --argjson h "$help" --argjson w "$want" '
		[.[] | select(.type=="cuda_launch" and .pid==$pid)] as $r
		| def kind: if .api=="cudaLaunchKernel" and .tid==$t then "kernel"
			elif .api=="cudaMemcpyAsync" and .tid==$t and .copy_kind==1 then "h2d"
			elif .api=="cudaMemcpyAsync" and .tid==$h and .copy_kind==2 then "d2h"
			else "other" end;
		{n: ($r | length),
		 stacked: [$r[] | select(has("stack") and has("python_stack"))] | length,
		 kinds: ($r | group_by(kind) | map({key: (.[0] | kind), value: length}) | from_entries),
		 right: [$r[] | kind as $k | select($k != "other" and .python_stack[:($w[$k] | length)] == $w[$k])]
			| length,
		 bad: [$r[] | kind as $k | select($k == "other" or .python_stack[:($w[$k] | length)] != $w[$k])][:1]}')
	n=$(echo "$got" | jq .n)
	total=$((total + ${n:-0}))
	expect "$v: 3 launches a round ($((3 * LAUNCH_ROUNDS))) recorded: $(echo "$got" | jq -c .kinds)" \
		eqs "$(echo "$got" | jq -c .kinds)" "{\"d2h\":$LAUNCH_ROUNDS,\"h2d\":$LAUNCH_ROUNDS,\"kernel\":$LAUNCH_ROUNDS}"
	expect "$v: every launch with its user stack and Python frames ($(echo "$got" | jq .stacked) of $n)" \
		eqs "$(echo "$got" | jq .stacked)" "$n"
	expect "$v: every launch names its own thread's frames and lines ($(echo "$got" | jq .right) of $n; first wrong: $(echo "$got" | jq -c '.bad[0].python_stack[:3]' | head -c 400))" \
		eqs "$(echo "$got" | jq .right)" "$n"
	# the Perfetto export: each launch's slice says the same in args.python
	pf=$(jq -c --argjson pid "$pid" --argjson t "$tid" --argjson h "$help" --argjson w "$want" '
		def line(fs): fs | map("\(.function) (\(.file | split("/") | last):\(.line))") | join(" <- ");
		[.traceEvents[] | select(.ph == "X" and .cat == "launch" and .pid == $pid)]
		| {n: length, right: [.[] | select(
			(.name == "cudaLaunchKernel" and .tid == $t and (.args.python | startswith(line($w.kernel))))
			or (.name == "cudaMemcpyAsync" and .tid == $t and (.args.python | startswith(line($w.h2d))))
			or (.name == "cudaMemcpyAsync" and .tid == $h and (.args.python | startswith(line($w.d2h)))))]
			| length}' "$T/launch.trace.json" 2>&1)
	expect "$v: the Perfetto export's launch slices name the same frames in args.python: $pf" \
		eqs "$pf" "{\"n\":$n,\"right\":$n}"
	seen+=("$v")
done
st=$(jqo -c '[.[] | select(.type=="stats")] | last | .python | {launch_stacks, launch_unpaired}')
expect "stats.python.launch_stacks = the records with Python frames ($total), none unpaired: $st" \
	eqs "$st" "{\"launch_stacks\":$total,\"launch_unpaired\":0}"
echo "# python_launch: ${seen[*]}"
# --no-stacks: no user stack, no Python frames
agent_start python_launch_nostacks -i 0.25 --mode deep --no-stacks ||
	fail_because "agent did not start: $(agent_tail)"
launch_run lnostack "$SYS_PY"
sleep 0.6
agent_stop INT || fail_because "agent did not exit on SIGINT"
if num "$PYPID"; then
	got=$(jqo -c --argjson pid "$PYPID" '[.[] | select(.type=="cuda_launch" and .pid==$pid)]
		| [length, ([.[] | select(has("python_stack") or has("stack"))] | length)]')
	expect "--no-stacks: $((3 * LAUNCH_ROUNDS)) launches, none with frames: $got" \
		eqs "$got" "[$((3 * LAUNCH_ROUNDS)),0]"
fi
report python_launch

# ------------------------------------------------------ python_launch_gpu --
PY_GPU=$IT_ROOT/tests/integration/py_gpu.py
FAKE_SO=$BUILD/tests/fakes/libcupti.so.13
SHIM_SO=$BUILD/libinfertrace_cupti.so
CBID=$(grep -oE 'CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 *= *[0-9]+' \
	/usr/local/cuda/include/cupti_runtime_cbid.h 2>/dev/null | grep -oE '[0-9]+$')
if [ ! -f "$FAKE_SO" ] || [ ! -f "$SHIM_SO" ] || ! num "$CBID"; then
	fail_because "$FAKE_SO, $SHIM_SO or cupti_runtime_cbid.h missing (make test)"
else
	gsock=$T/gpu.shim.sock gctl=$T/gpu.ctl.sock
	agent_start python_launch_gpu -i 0.25 --mode deep --stack-rate 100000 --shim-socket "$gsock" --summary \
		--control-socket "$gctl" || fail_because "agent did not start: $(agent_tail)"
	py_go gpu env INFERTRACE_SHIM_SOCKET="$gsock" "$SYS_PY" "$PY_GPU" "$CUDART" "$FAKE_SO" "$SHIM_SO" \
		"{go}" "$LAUNCH_ROUNDS" "$CBID"
	# every kernel in: `agentctl summary` while the agent runs prints what it will print at exit
	for ((i = 0; i < 100; i++)); do
		[ "$(grep -cF '"type":"kernel"' "$AGENT_OUT")" -ge $((2 * LAUNCH_ROUNDS)) ] && break
		sleep 0.1
	done
	sleep 0.6
	"$BUILD/agentctl" --socket "$gctl" summary >"$T/gpu.ctl.txt" 2>&1 ||
		fail_because "agentctl summary: exit $?: $(head -c 300 "$T/gpu.ctl.txt")"
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
fi
if num "$PYPID"; then
	g_line() { grep -nF -- "$1" "$PY_GPU" | head -n 1 | cut -d: -f1; }
	g_def() { awk -v c="class $1" -v m="    def $2(" 'index($0, c) == 1 {in_c = 1; next}
		in_c && index($0, m) == 1 {print NR; exit}' "$PY_GPU"; }
	want=$(jq -n -c --arg f "$PY_GPU" --argjson dg "$(g_line "def gpu_launch(name):")" \
		--argjson cg "$(g_line "cudart.cudaLaunchKernel(0x1000")" \
		--argjson da "$(g_def Attention forward)" --argjson ca "$(g_line 'gpu_launch("attn")')" \
		--argjson dm "$(g_def Model forward)" --argjson cm "$(g_line "self.attn.forward()")" \
		--argjson ds "$(g_def Sampler forward)" --argjson cs "$(g_line 'gpu_launch("sample")')" '
		def fr(n; d; l): {function: n, file: $f, first_line: d, line: l};
		{attn_kernel: [fr("gpu_launch"; $dg; $cg), fr("Attention.forward"; $da; $ca),
			fr("Model.forward"; $dm; $cm)],
		 sample_kernel: [fr("gpu_launch"; $dg; $cg), fr("Sampler.forward"; $ds; $cs)]}')
	got=$(jqo -c --argjson pid "$PYPID" --argjson w "$want" '
		([.[] | select(.type=="cuda_launch" and .pid==$pid) | {key: "\(.tid)/\(.ts_ns)", value: .python_stack}]
			| from_entries) as $launch
		| [.[] | select(.type=="kernel" and .pid==$pid)] as $k
		| {n: ($k | length),
		   names: ($k | group_by(.name) | map({key: .[0].name, value: length}) | from_entries),
		   joined: [$k[] | select(.launch_src=="uprobe+cupti")] | length,
		   right: [$k[] | select(.launch_python[:($w[.name] | length)] == $w[.name])] | length,
		   same: [$k[] | select(.launch_python == $launch["\(.tid)/\(.launch_ts_ns)"])] | length,
		   bad: [$k[] | select(.launch_python[:($w[.name] | length)] != $w[.name]) | .launch_python][:1]}')
	n=$(echo "$got" | jq .n)
	expect "kernel records: $LAUNCH_ROUNDS of each: $(echo "$got" | jq -c .names)" \
		eqs "$(echo "$got" | jq -c .names)" "{\"attn_kernel\":$LAUNCH_ROUNDS,\"sample_kernel\":$LAUNCH_ROUNDS}"
	expect "every kernel joined to its uprobe launch ($(echo "$got" | jq .joined) of $n)" \
		eqs "$(echo "$got" | jq .joined)" "$n"
	expect "every kernel's launch_python names its launch's frames and lines ($(echo "$got" | jq .right) of $n; first wrong: $(echo "$got" | jq -c '.bad[0][:3]' | head -c 300))" \
		eqs "$(echo "$got" | jq .right)" "$n"
	expect "every kernel's launch_python is its cuda_launch's python_stack ($(echo "$got" | jq .same) of $n)" \
		eqs "$(echo "$got" | jq .same)" "$n"
	gr=$(jqo '[.[] | select(.type=="stats")] | last | .python.gpu_records')
	expect "stats.python.gpu_records = the kernel records with launch_python ($gr, $n)" eqs "$gr" "$n"
	# the recording replayed: each kernel again with its frames, and in Perfetto
	rout=$T/gpu.replay.jsonl rpf=$T/gpu.replay.perfetto.json
	"$AGENT" --replay "$AGENT_OUT" --mode deep -o "$rout" --perfetto "$rpf" --summary 2>"$T/gpu.replay.err"
	rrc=$?
	# --summary's GPU time by Python call: live, as the kernel records say; the replay's the same
	got=$(python3 "$IT_ROOT/tests/integration/pyprof_check.py" "$AGENT_OUT" "$AGENT_ERR" 2>&1)
	expect "--summary's GPU time by Python call, read again from the $n kernels: $got" \
		[ "${got#ok * $n }" != "$got" ]
	got=$(python3 "$IT_ROOT/tests/integration/gpusum_check.py" "$AGENT_OUT" "$AGENT_ERR" 2>&1)
	expect "--summary's GPU records, read again from the records: $got" [ "${got%% *}" = ok ]
	tree() { sed -n '/^GPU time by the Python calls/,/^$/p' "$1"; }
	expect "the replay's --summary prints the live tree: $(diff <(tree "$AGENT_ERR") <(tree "$T/gpu.replay.err") | head -n 4 | tr '\n' '|')" \
		eqs "$(tree "$AGENT_ERR")" "$(tree "$T/gpu.replay.err")"
	gsec() { sed -n '/^GPU records (/,/^$/p' "$1"; }
	expect "agentctl summary, before the stop, prints the tree of the exit: $(diff <(tree "$AGENT_ERR") <(tree "$T/gpu.ctl.txt") | head -n 4 | tr '\n' '|')" \
		eqs "$(tree "$T/gpu.ctl.txt")" "$(tree "$AGENT_ERR")"
	expect "agentctl summary, before the stop, prints the GPU records of the exit: $(diff <(gsec "$AGENT_ERR") <(gsec "$T/gpu.ctl.txt") | head -n 4 | tr '\n' '|')" \
		eqs "$(gsec "$T/gpu.ctl.txt")" "$(gsec "$AGENT_ERR")"
	expect "agentctl summary: no GPU records section: $(head -c 200 "$T/gpu.ctl.txt" | tr '\n' '|')" \
		[ -n "$(gsec "$T/gpu.ctl.txt")" ]
	same=$(jq -c -n -R --argjson pid "$PYPID" --slurpfile live <(jqo -c --argjson pid "$PYPID" \
		'[.[] | select(.type=="kernel" and .pid==$pid) | {key: "\(.correlation_id)", value: .launch_python}] | from_entries') '
		[inputs | fromjson? | select(.type=="kernel" and .pid==$pid)] as $k
		| {n: ($k | length), same: [$k[] | select(.launch_python != null and .launch_python == $live[0]["\(.correlation_id)"])] | length}' "$rout")
	rs=$(jq -c -n -R '[inputs | fromjson? | select(.type=="replay_status")][0] | {launch_python, launch_python_bad}' "$rout")
	expect "replayed: exit $rrc, kernels with their live launch_python $same of $n, replay_status $rs" \
		eqs "$rrc:$same:$rs" "0:{\"n\":$n,\"same\":$n}:{\"launch_python\":$n,\"launch_python_bad\":0}"
	lines=$(jq -c --arg f "$(basename "$PY_GPU")" --argjson cg "$(g_line "cudart.cudaLaunchKernel(0x1000")" \
		--argjson ca "$(g_line 'gpu_launch("attn")')" --argjson cm "$(g_line "self.attn.forward()")" \
		--argjson cs "$(g_line 'gpu_launch("sample")')" '
		[.traceEvents[] | select(.cat=="launch" and .ph=="X" and .pid=='"$PYPID"') | .args.python]
		| {n: length, attn: [.[] | select(. == "gpu_launch (\($f):\($cg)) <- Attention.forward (\($f):\($ca)) <- Model.forward (\($f):\($cm))" or (startswith("gpu_launch (\($f):\($cg)) <- Attention.forward (\($f):\($ca)) <- Model.forward (\($f):\($cm)) <- ")))] | length,
		   sample: [.[] | select(. == "gpu_launch (\($f):\($cg)) <- Sampler.forward (\($f):\($cs))" or startswith("gpu_launch (\($f):\($cg)) <- Sampler.forward (\($f):\($cs)) <- "))] | length}' "$rpf")
	expect "replayed as Perfetto: $n launch slices, each naming its Python line ($lines)" \
		eqs "$lines" "{\"n\":$n,\"attn\":$LAUNCH_ROUNDS,\"sample\":$LAUNCH_ROUNDS}"
fi
report python_launch_gpu

# ---------------------------------------------------- python_fixed_period --
PY_PERIODIC=$IT_ROOT/tests/integration/py_periodic.py
agent_start python_fixed_period -i 0.25 || fail_because "agent did not start: $(agent_tail)"
py_go periodic "$SYS_PY" "$PY_PERIODIC" "$CUDART" "{go}" 3
sleep 0.6
agent_stop INT || fail_because "agent did not exit on SIGINT"
[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
if num "$PYTID"; then
	halves=$(jqo -r --argjson t "$PYTID" '[.[] | select(.type=="python_profile" and .tid==$t)] as $r
		| def n(f): [$r[] | select(.stack[0].function == f) | .samples] | add // 0;
		[n("first_half"), n("second_half")] | map(tostring) | join(" ")')
	read -r h1 h2 <<<"$halves"
	echo "# python_fixed_period: first_half $h1, second_half $h2 samples"
	expect "samples in the halves: $h1 + $h2, 80 or more (3 s at 49 Hz on a CPU)" \
		ge "$((${h1:-0} + ${h2:-0}))" 80
	expect "each half in 30% to 70% of them: first_half $h1, second_half $h2" \
		between "$((${h1:-0} * 100 / (${h1:-0} + ${h2:-0} + 1)))" 30 70
fi
report python_fixed_period

# -------------------------------------------------------- python_versions --
vers=()
for v in 3.10 3.12 3.13 3.9; do
	p=$(pyenv_of "$v") && vers+=("$v:$p")
done
if [ "${#vers[@]}" = 0 ]; then
	skip python_versions "no pyenv CPython 3.9, 3.10, 3.12 or 3.13 under $PYENV"
else
	agent_start python_versions -i 0.25 || fail_because "agent did not start: $(agent_tail)"
	declare -A vpid vtid vhelp
	for vp in "${vers[@]}"; do
		v=${vp%%:*} p=${vp#*:}
		py_run "v$v" "$p" 12 5 400 1
		vpid[$v]=$PYPID vtid[$v]=$PYTID vhelp[$v]=$PYHELPER
	done
	sleep 0.6
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
	seen=()
	for vp in "${vers[@]}"; do
		v=${vp%%:*} pid=${vpid[$v]:-} tid=${vtid[$v]:-} help=${vhelp[$v]:-}
		num "$pid" && num "$tid" && num "$help" || continue
		# per thread: samples in pad_batch, in background_tokenize, and in all
		counts=$(jqo -r --argjson pid "$pid" --arg v "$v" --argjson t "$tid" --argjson h "$help" \
			--argjson rp "$(lineof "    return spin(ms, 0.75)")" '
			[.[] | select(.type=="python_profile" and .pid==$pid)] as $r
			| def n(tid; f): [$r[] | select(.tid==tid and (.stack | map(.function) | index(f)))
				| .samples] | add // 0;
			def all(tid): [$r[] | select(.tid==tid) | .samples] | add // 0;
			def atline(tid): [$r[] | select(.tid==tid and any(.stack[];
				.function == "pad_batch" and .line == $rp)) | .samples] | add // 0;
			[n($t; "pad_batch"), n($t; "background_tokenize"), n($h; "background_tokenize"),
			 n($h; "pad_batch"), all($t) + all($h), atline($t),
			 ([$r[].python] | unique | join(","))]
			| map(tostring) | join(" ")')
		read -r main_pad main_bg help_bg help_pad total pad_line pyv <<<"$counts"
		if [ "$v" = 3.9 ]; then
			expect "3.9 never sampled: $total" eqs "$total" 0
			expect "3.9 refused with a warning" \
				eqs "$(grep -c "pid $pid: Python 3.9 (.*): its frames are not sampled" "$AGENT_ERR")" 1
			expect "3.9 counted unsupported" \
				eqs "$(jqo '[.[] | select(.type=="stats")] | last | .python.unsupported')" 1
		else
			expect "$v: the main thread in pad_batch ($main_pad samples)" eqs "$(ge "$main_pad" 2 && echo y)" y
			expect "$v: the helper thread in background_tokenize ($help_bg samples)" \
				eqs "$(ge "$help_bg" 2 && echo y)" y
			expect "$v: pad_batch at its call of spin in every sample ($pad_line of $main_pad)" \
				eqs "$pad_line" "$main_pad"
			expect "$v: neither thread given the other's frames ($main_bg, $help_pad)" \
				eqs "$main_bg$help_pad" 00
			expect "$v: the version ($pyv)" \
				eqs "$([ "$pyv" = "$v" ] || [ "${pyv#"$v".}" != "$pyv" ] && echo y)" y
		fi
		seen+=("$v")
	done
	echo "# python_versions: ${seen[*]}"
	report python_versions
fi

# ---------------------------------------------------------- python_forged --
agent_start python_forged -i 0.25 --mode deep || fail_because "agent did not start: $(agent_tail)"
bg_start "$T/forged.out" "$FORGED" 3
fp=$BG_PID
wait_exit "$fp" 30 || fail_because "python3-forged did not finish"
[ "${WAIT_RC:-}" = 0 ] || fail_because "python3-forged exit ${WAIT_RC:-}: $(head -c 200 "$T/forged.out.err")"
sleep 0.6
agent_stop INT || fail_because "agent did not exit on SIGINT"
[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
FPID=$(head -n 1 "$T/forged.out" | jq -r .pid)
FTID=$(head -n 1 "$T/forged.out" | jq -r .tid)
if num "$FPID"; then
	recs=$(jqo --argjson pid "$FPID" '[.[] | select(.type=="python_profile" and .pid==$pid)]')
	expect "profiles of the forged process" \
		eqs "$(echo "$recs" | jq 'length > 0')" true
	tids=$(echo "$recs" | jq -c '[.[].tid] | unique')
	expect "only the thread its state names: $tids" \
		eqs "$tids" "[$FTID]"
	expect "32 frames, truncated" \
		eqs "$(echo "$recs" | jq 'all(.[]; (.stack | length) == 32 and .truncated)')" true
	first=$(echo "$recs" | jq -c '.[0].stack[:5]')
	want='[{"function":"a?b?\"c","file":"/tmp/café.py","first_line":10},{"function":"?"},{"function":"?"},{"function":"?"},{"function":"x??","file":"/tmp/café.py","first_line":14}]'
	expect "frames cleaned: $first" \
		eqs "$first" "$want"
	long=$(echo "$recs" | jq -r '.[0].stack[5].function')
	expect "a long name cut at a character: ${#long} characters, $(printf %s "$long" | wc -c) bytes" \
		eqs "${#long}:$(printf %s "$long" | wc -c):${long//é/}" "63:126:"
	st=$(jqo -r '[.[] | select(.type=="stats")] | last | .python | [.unnamed, .symbols] | map(tostring) | join(",")')
	expect "unnamed 3, symbols 3: $st" \
		eqs "$st" "3,3"
	# its launches (deep mode): the same forged frames, truncated
	lr=$(jqo -c --argjson pid "$FPID" --argjson tid "$FTID" --argjson w "$want" '
		[.[] | select(.type=="cuda_launch" and .pid==$pid and has("stack"))]
		| {n: length, ok: [.[] | select(.tid==$tid and (.python_stack | length) == 32
			and .python_truncated == true and .python_stack[:5] == $w)] | length}')
	expect "its launches with their stack carry the forged frames, 32, truncated: $lr" \
		eqs "$(echo "$lr" | jq '.n > 0 and .n == .ok')" true
fi
report python_forged

# ------------------------------------------------------ python_unloadable --
export INFERTRACE_BREAK_PY_SAMPLER=1
agent_start python_unloadable -i 0.25 || fail_because "agent did not start: $(agent_tail)"
py_run unl "$SYS_PY" 20 -1 0
sleep 2.5
agent_stop INT || fail_because "agent did not exit on SIGINT"
[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
expect "one warning that the sampler did not load" \
	eqs "$(grep -c 'the BPF programs with the Python sampler did not load' "$AGENT_ERR")" 1
st=$(jqo -c '[.[] | select(.type=="stats")] | last | .python | {state, error}')
expect "stats.python unavailable with the reason: $st" \
	eqs "$st" '{"state":"unavailable","error":"the sampler'"'"'s BPF program did not load on this kernel"}'
expect "no python_profile record" eqs "$(jqo '[.[] | select(.type=="python_profile")] | length')" 0
num "$PYPID" && expect "the steps still cut" \
	eqs "$(jqo --argjson pid "$PYPID" '[.[] | select(.type=="step" and .pid==$pid)] | length')" 20
"$AGENT" --python-stacks on -o "$T/unl-on.jsonl" -d 2 >"$T/unl-on.err" 2>&1
rc=$?
expect "--python-stacks on refuses to start: $rc" eqs "$rc" 1
expect "and says how to go on: $(grep 'load BPF programs' "$T/unl-on.err" | head -c 300)" \
	eqs "$(grep -c 'Python sampler was among them (--python-stacks on): --python-stacks auto loads the others' "$T/unl-on.err")" 1
unset INFERTRACE_BREAK_PY_SAMPLER
report python_unloadable

# -------------------------------------------------------- python_embedded --
EMBED=$BUILD/tests/integration/infer-engine
PY_EMB=$IT_ROOT/tests/integration/py_embedded.py
PYPID=
if [ ! -x "$EMBED" ]; then
	fail_because "$EMBED not built: Debian's static libpython3.11.a is missing (python3-dev: make deps)"
else
	agent_start python_embedded -i 0.25 || fail_because "agent did not start: $(agent_tail)"
	py_go embedded "$EMBED" "$PY_EMB" "$CUDART" "{go}" 0.5
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
fi
if num "$PYPID"; then
	expect "CPython found in infer-engine itself: $(grep "pid $PYPID: " "$AGENT_ERR" | head -n 2 | tr '\n' '|')" \
		eqs "$(grep -c "pid $PYPID: Python 3\.11\.[0-9]* frames sampled ($EMBED)" "$AGENT_ERR")" 1
	dl=$(grep -n '^def embedded_work(' "$PY_EMB" | cut -d: -f1)
	got=$(jqo --argjson pid "$PYPID" --argjson tid "$PYTID" --arg f "$PY_EMB" --argjson dl "$dl" '
		[.[] | select(.type=="python_profile" and .pid==$pid and .tid==$tid and .python != null
			and (.stack[0] | .function=="embedded_work" and .file==$f and .first_line==$dl))
		| .samples] | add // 0')
	expect "embedded_work (py_embedded.py:$dl) sampled in infer-engine (>= 4 samples): $got" \
		eqs "$(ge "$got" 4 && echo y)" y
fi
report python_embedded

# ----------------------------------------------------- python_code_reused --
PY_REUSE=$IT_ROOT/tests/integration/py_reuse.py
rvers=("sys:$SYS_PY")
for v in 3.12 3.13; do
	p=$(pyenv_of "$v") && rvers+=("$v:$p")
done
agent_start python_code_reused -i 0.25 || fail_because "agent did not start: $(agent_tail)"
declare -A rpid rout
for vp in "${rvers[@]}"; do
	v=${vp%%:*} p=${vp#*:}
	py_go "reuse$v" "$p" "$PY_REUSE" "$CUDART" "{go}" 1.0
	rpid[$v]=$PYPID rout[$v]=$T/reuse$v.work
done
sleep 0.6
agent_stop INT || fail_because "agent did not exit on SIGINT"
[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
for vp in "${rvers[@]}"; do
	v=${vp%%:*} pid=${rpid[$v]:-}
	num "$pid" || continue
	end=$(tail -n 1 "${rout[$v]}")
	if ! jqe '.reused == true' <<<"$end"; then
		fail_because "$v: omega_fn's code object never landed at alpha_fn's address: $end"
		continue
	fi
	sw=$(jq .switch_ns <<<"$end")
	got=$(jqo -c --argjson pid "$pid" --argjson sw "$sw" '
		[.[] | select(.type=="python_profile" and .pid==$pid)] as $r
		| def n(f; c): [$r[] | select(c and (.stack | map(.function) | index(f))) | .samples] | add // 0;
		{alpha_before: n("alpha_fn"; .ts_ns < $sw), omega: n("omega_fn"; true),
		 alpha_after: n("alpha_fn"; .ts_ns > $sw)}')
	expect "$v: alpha_fn sampled, then omega_fn at its address, never named alpha_fn after the switch: $got" \
		jqe '.alpha_before >= 3 and .omega >= 3 and .alpha_after == 0' <<<"$got"
done
cr=$(jqo '[.[] | select(.type=="stats")] | last | .python.code_reused')
expect "stats.python.code_reused $cr, want >= ${#rvers[@]} (one a run)" eqs "$(ge "${cr:-0}" "${#rvers[@]}" && echo y)" y
echo "# python_code_reused: ${!rpid[*]}"
report python_code_reused

# ------------------------------------------------------------- python_off --
agent_start python_off -i 0.25 --python-stacks off || fail_because "agent did not start: $(agent_tail)"
export PY_STEPS_LINGER=0 # it exits right after its last step
py_run off "$SYS_PY" 20 -1 0
unset PY_STEPS_LINGER
sleep 2.5
agent_stop INT || fail_because "agent did not exit on SIGINT"
[ "$AGENT_RC" = 0 ] || fail_because "agent exit $AGENT_RC: $(agent_tail)"
expect "no python_profile record" \
		eqs "$(jqo '[.[] | select(.type=="python_profile")] | length')" 0
expect "no stats.python" \
		eqs "$(jqo '[.[] | select(.type=="stats" and has("python"))] | length')" 0
expect "no sampler" \
		eqs "$(grep -c 'Python frames' "$AGENT_ERR")" 0
if num "$PYPID"; then
	inst=$(jqo -r --argjson pid "$PYPID" '[.[] | select(.type=="process" and .pid==$pid)][0].instance')
	got=$(jqo -c --argjson pid "$PYPID" '[.[] | select(.type=="step" and .pid==$pid) | .instance] |
		group_by(.) | map([.[0], length])')
	expect "the steps still cut, all 20 under the process's instance ($inst), not the host's: $got" \
		eqs "$got" "[[\"$inst\",20]]"
fi
for bad in "--python-hz 0" "--python-hz 1001" "--python-stacks sometimes"; do
	# shellcheck disable=SC2086 # two words
	"$AGENT" $bad >"$T/bad.out" 2>&1
	rc=$?
	expect "'$bad' refused with 64: $rc" \
		eqs "$rc" 64
	expect "'$bad' names the option: $(head -n 1 "$T/bad.out")" \
		eqs "$(head -n 1 "$T/bad.out" | grep -c -- "${bad%% *}")" 1
done
report python_off
