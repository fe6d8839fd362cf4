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
source "$(dirname "$0")/lib.sh"
N=sentinel_sampled_steps
B=$BUILD/bench/bench_shim
it_preflight "$N" || exit 0
if [ ! -x "$B" ] || [ ! -f "$BUILD/libinfertrace_cupti.so" ]; then
	echo "FAIL $N: $B or $BUILD/libinfertrace_cupti.so not built (make test)"
	exit 0
fi

if ! agent_start sentinel_steps --shim-socket "$T/shim.sock" --shim-group root \
	--control-socket "$T/ctl.sock"; then
	echo "FAIL $N: the agent did not start: $(agent_tail)"
	exit 0
fi
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
