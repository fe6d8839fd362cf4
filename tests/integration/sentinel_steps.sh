#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# sentinel_sampled_steps: always-on mode end to end at an eager engine's
# launch rate. The real shim over the CUPTI double (build/bench/bench_shim:
# 100 kernels and a copy back every 20 ms, 5,000 kernels/s, 3 s) into the
# real agent in sentinel mode. The shim sends 200 launch records a second
# and marks the kernels of the others (GPU_F_NO_LAUNCH): none of them waits
# in the correlator (stats.gpu.no_launch counts them, gpu_evicted stays 0,
# no "wait queue full" warning), and every automatic step has its 100
# kernels and its copy (the first and last may be cut by the run's ends).
# Before the mark, each step had the 3-4 kernels whose launch was sent, and
# the rest reached the step cutter 10 s late.
#
# sentinel_window_slices: the same run with one step stalled 60 ms halfway
# (bench_shim --stall-ms): the agent flags it (host_stall) and sends its
# flight-recorder window, the GPU records the shim delivered so far, in
# slices of the loop (agent/pipeline/recorder.c); later anomalies send
# what came since. Every record the flight_recorder records announce
# follows the first, each once, none left owed at the end.
#
# sentinel_steps_overlap: the GPU runs 30 ms behind the launches (bench_shim
# --gpu-lag-ms; the shim in deep mode, every launch joined). A step's 100
# launches take well under a millisecond of its 20, so its copy back ends
# about 10 ms into the next step: the steps overlap in time, as under an
# engine whose CPU runs ahead. Over 5 s the agent cuts 4-5 times; all 250
# steps come out, each with its 100 kernels and its copy. Before the cut
# kept the next step's early records (steps.c, keep_from), the step after
# each cut lost all of them, uncounted: 245 steps.
source "$(dirname "$0")/lib.sh"
N=sentinel_sampled_steps
B=$BUILD/bench/bench_shim
it_preflight "$N" || exit 0
if [ ! -x "$B" ] || [ ! -f "$BUILD/libinfertrace_cupti.so" ]; then
	echo "FAIL $N: $B or $BUILD/libinfertrace_cupti.so not built (make test)"
	exit 0
fi

# shim_agent LABEL: an agent in sentinel mode on its shim socket; FAIL $N if it does not start
shim_agent() {
	agent_start "$1" --shim-socket "$T/shim.sock" --shim-group root \
		--control-socket "$T/ctl.sock" && return 0
	echo "FAIL $N: the agent did not start: $(agent_tail)"
	return 1
}

shim_agent sentinel_steps || exit 0
out=$("$B" -S "$T/shim.sock" -s 3 -k 100 -t 20 2>&1)
made=$(sed -n 's/.* made \([0-9]*\) .*/\1/p' <<<"$out")
# the last steps are cut 2 s after their end: let the agent pass that
sleep 3
agent_stop || fail_because "the agent did not stop"
expect "bench_shim made no kernels: $out" ge "${made:-0}" 14000
gpu=$(jqo 'map(select(.type == "stats")) | last | .gpu')
nl=$(jq -r '.no_launch' <<<"$gpu")
ev=$(jq -r '.gpu_evicted' <<<"$gpu")
um=$(jq -r '.unmatched' <<<"$gpu")
expect "no_launch $nl of $made kernels: the shim did not mark them" ge "${nl:-0}" $((made * 9 / 10))
expect "no_launch $nl is not part of unmatched $um" le "${nl:-0}" "${um:-0}"
expect "$ev records evicted from the wait queue" eq "${ev:-1}" 0
expect "the agent warned: $(grep -m1 'queue full' "$AGENT_ERR")" \
	test "$(grep -c 'queue full' "$AGENT_ERR")" = 0
steps=$(jqo 'map(select(.type == "step")) | length')
whole=$(jqo 'map(select(.type == "step" and .kernels == 100 and .memcpys == 1)) | length')
expect "$steps steps for 150 made" between "${steps:-0}" 145 152
expect "only $whole of $steps steps had their 100 kernels and copy" ge "${whole:-0}" $((${steps:-0} - 2))
report "$N"

# ---------------------------------------------------------------- window --
N=sentinel_window_slices
WHY=()
shim_agent sentinel_window || exit 0
out=$("$B" -S "$T/shim.sock" -s 3 -k 100 -t 20 --stall-ms 60 2>&1)
sleep 3
agent_stop || fail_because "the agent did not stop"
bpid=$(jqo '[.[] | select(.type == "kernel")][0].pid')
inst=$(jqo '[.[] | select(.type == "kernel")][0].instance')
an=$(jqo --argjson i "${inst:-null}" '[.[] | select(.type == "anomaly" and .instance == $i)]')
# the stalled step itself (others may be flagged: the steps that catch up,
# a stall of the VM's own)
expect "anomalies of the stalled run: $(jq -c '[.[] | {kind, dur_ns}]' <<<"$an"), want a host_stall of 60 ms or more" \
	jqe '[.[] | select(.kind == "host_stall" and .dur_ns >= 60000000)] | length == 1' <<<"$an"
res=$(jq -c -n -R --argjson p "${bpid:-0}" --argjson i "${inst:-null}" '
	[inputs | fromjson?] as $r
	| ($r | map(.type == "flight_recorder" and .trigger == "anomaly" and .instance == $i) | index(true)) as $f
	| if $f == null then {f: null} else
	  ([$r[$f + 1:][] | select(.pid == $p and (.type == "kernel" or .type == "memcpy"))]) as $w
	  | { f: $f,
	      announced: ([$r[] | select(.type == "flight_recorder" and .instance == $i) | .records] | add),
	      sent: ($w | length), once: ($w | map(.correlation_id) | unique | length),
	      rec: ([$r[] | select(.type == "stats")] | last | .recorder) } end' "$AGENT_OUT")
if [ "$(jq .f <<<"$res")" = null ]; then
	fail_because "no flight_recorder record with trigger anomaly: $(agent_tail)"
else
	a=$(jq .announced <<<"$res") w=$(jq .sent <<<"$res")
	expect "the windows announced $a records, want at least the 7,575 made before the stall" \
		between "$a" 7500 15150
	expect "$w GPU records of the workload after the first window's record, want the $a its windows announced" \
		eq "$w" "$a"
	expect "$(jq .once <<<"$res") distinct correlation ids of $w records: a record sent twice" \
		eq "$(jq .once <<<"$res")" "$w"
	expect "stats.recorder $(jq -c .rec <<<"$res"): flushed != announced or a window still owed" \
		jqe --argjson a "$a" '.rec.flushed == $a and .rec.sending == 0 and .rec.slices >= 1' <<<"$res"
fi
report "$N"

# --------------------------------------------------------------- overlap --
N=sentinel_steps_overlap
WHY=()
shim_agent sentinel_overlap || exit 0
out=$("$B" -S "$T/shim.sock" -s 5 -k 100 -t 20 -m deep --gpu-lag-ms 30 2>&1)
made=$(sed -n 's/.* made \([0-9]*\) .*/\1/p' <<<"$out")
sleep 3
agent_stop || fail_because "the agent did not stop"
expect "bench_shim made no kernels: $out" ge "${made:-0}" 24000
steps=$(jqo 'map(select(.type == "step")) | length')
whole=$(jqo 'map(select(.type == "step" and .kernels == 100 and .memcpys == 1)) | length')
short=$(jqo -c 'map(select(.type == "step" and (.kernels != 100 or .memcpys != 1)) | {start_ns, kernels, memcpys})')
# every step, the run's first and last included (the agent's exit cuts the rest)
expect "$steps steps for the $((${made:-0} / 100)) made" eq "${steps:-0}" $((${made:-0} / 100))
expect "only $whole of $steps steps had their 100 kernels and copy: $short" eq "${whole:-0}" "${steps:-0}"
report "$N"
