#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# Instances and containers.
#   instance_env:      a process started with INFERTRACE_INSTANCE=NAME: every
#                      record about it carries NAME
#   instance_override: --instance NAME: every record carries NAME, node-level
#                      ones included
#   container_library: a process in its own mount namespace, where the path
#                      of libcudart leads to a different file than on the
#                      host, is probed in ITS file (/proc/PID/root): exact
#                      launch counts, and the host's file at that path has no
#                      probe
#   container_nccl:    the same for libnccl: the host sees the NCCL double at
#                      a path where the process's mount namespace has the
#                      real libnccl.so.2; the agent probes the real one
#                      through /proc/PID/root: exact calls per entry point
#                      (the double at the host's path would count none)
# (sentinel mode with --sentinel-launches all: launches are what is counted)
source "$(dirname "$0")/lib.sh"
it_preflight instance_env instance_override container_library container_nccl

# run_cuda NAME "AGENT ARGS" [env...]: cuda_calls 1 thread x 9 calls, traced by --pid
run_cuda() {
	local name=$1 aargs=$2
	shift 2
	bg_start "$T/$name.work" env "$@" "$CUDA_CALLS" -t 1 -n 9 -w "$T/$name.go"
	wait_line "$T/$name.work" 10 || { fail_because "workload printed nothing"; return 1; }
	WPID=$(head -n 1 "$T/$name.work" | jq -r .pid)
	# shellcheck disable=SC2086
	agent_start "$name" -i 0.25 --pid "$WPID" --sentinel-launches all $aargs || { fail_because "agent: $(agent_tail)"; return 1; }
	cuda_attached "$WPID" 10 || fail_because "no attach record with both libraries"
	touch "$T/$name.go"
	wait_exit "$BG_PID" 30 || fail_because "workload did not finish"
	wait_record ".type==\"process\" and .event==\"exit\" and .pid==$WPID" 10 ||
		fail_because "no exit record"
	agent_stop INT || fail_because "agent did not stop"
}

run_cuda instance_env "" INFERTRACE_INSTANCE=llama-70b/replica-3 && {
	bad=$(jqo --argjson pid "$WPID" \
		'[.[] | select(.pid == $pid and .instance != "llama-70b/replica-3")] | length')
	n=$(jqo --argjson pid "$WPID" '[.[] | select(.pid == $pid)] | length')
	expect "no record about the process ($n)" ge "$n" 3
	expect "$bad records about the process without its instance" eq "$bad" 0
	n=$(jqo --argjson pid "$WPID" \
		'[.[] | select(.type == "thread" and .pid == $pid) | .launches.cudaLaunchKernel // 0] | add // 0')
	expect "launches $n, want 9" eq "$n" 9
}
report instance_env

run_cuda instance_override "--instance fleet-a/node-7" INFERTRACE_INSTANCE=ignored && {
	bad=$(jqo '[.[] | select(.instance != "fleet-a/node-7")] | length')
	types=$(jqo '[.[] | .type] | unique | join(",")')
	expect "$bad records without the --instance name" eq "$bad" 0
	expect "no stats record among: $types" grep -q stats <<<"$types"
}
report instance_override

# container_library: host sees copy A at $T/lib/libcudart.so.13; the
# workload's mount namespace binds copy B over that path.
if ! command -v unshare >/dev/null; then
	skip container_library "unshare (util-linux) missing"
	skip container_nccl "unshare (util-linux) missing"
	exit 0
fi
real=$(readlink -f /usr/local/cuda/lib64/libcudart.so)
mkdir -p "$T/lib" "$T/b"
cp "$real" "$T/lib/libcudart.so.13"
cp "$real" "$T/b/libcudart.so.13"
ino_a=$(stat -c %i "$T/lib/libcudart.so.13")
ino_b=$(stat -c %i "$T/b/libcudart.so.13")
bg_start "$T/cont.work" unshare --mount --propagation private sh -c \
	"mount --bind '$T/b/libcudart.so.13' '$T/lib/libcudart.so.13' &&
	 CUDA_CALLS_RT='$T/lib/libcudart.so.13' exec '$CUDA_CALLS' -t 1 -n 9 -w '$T/cont.go'"
if wait_line "$T/cont.work" 10; then
	WPID=$(head -n 1 "$T/cont.work" | jq -r .pid)
	inside=$(stat -L -c %i "/proc/$WPID/root$T/lib/libcudart.so.13" 2>/dev/null)
	expect "the namespace does not show copy B ($inside vs $ino_b)" eq "$inside" "$ino_b"
	agent_start container_library -i 0.25 --pid "$WPID" --sentinel-launches all || fail_because "agent: $(agent_tail)"
	cuda_attached "$WPID" 10 || fail_because "no attach record with both libraries"
	touch "$T/cont.go"
	wait_exit "$BG_PID" 30 || fail_because "workload did not finish"
	wait_record ".type==\"process\" and .event==\"exit\" and .pid==$WPID" 10 ||
		fail_because "no exit record"
	agent_stop INT || fail_because "agent did not stop"
	n=$(jqo --argjson pid "$WPID" \
		'[.[] | select(.type == "thread" and .pid == $pid) | .launches.cudaLaunchKernel // 0] | add // 0')
	expect "launches $n through the namespace's copy, want 9" eq "$n" 9
	expect "copies A and B share an inode" [ "$ino_a" != "$ino_b" ]
else
	fail_because "workload in the mount namespace printed nothing: $(head -c 200 "$T/cont.work.err")"
fi
report container_library

# container_nccl: host sees the double at $T/nlib/libnccl.so.2; the workload's
# mount namespace binds the real libnccl.so.2 over that path, and nccl_calls
# dlopens that path (3 rounds of every entry point, one thread)
NCCL_CALLS=$BUILD/tests/integration/nccl_calls
FAKE_NCCL=$BUILD/tests/fakes/nccl/libnccl.so.2
REAL_NCCL=$(readlink -f /usr/local/cuda/lib64/libnccl.so.2)
if [ ! -x "$NCCL_CALLS" ] || [ ! -f "$FAKE_NCCL" ] || [ ! -f "$REAL_NCCL" ]; then
	fail_because "$NCCL_CALLS, $FAKE_NCCL or $REAL_NCCL missing (make test)"
else
	mkdir -p "$T/nlib"
	cp "$FAKE_NCCL" "$T/nlib/libnccl.so.2"
	bg_start "$T/ncont.work" unshare --mount --propagation private sh -c \
		"mount --bind '$REAL_NCCL' '$T/nlib/libnccl.so.2' &&
		 exec '$NCCL_CALLS' -L '$T/nlib/libnccl.so.2' -t 1 -n 3 -w '$T/ncont.go'"
	if wait_line "$T/ncont.work" 10; then
		WPID=$(head -n 1 "$T/ncont.work" | jq -r .pid)
		inside=$(stat -L -c %i "/proc/$WPID/root$T/nlib/libnccl.so.2" 2>/dev/null)
		expect "the namespace does not show the real libnccl ($inside)" \
			eq "$inside" "$(stat -c %i "$REAL_NCCL")"
		expect "the host's path is the real libnccl, not the double" \
			[ "$(stat -c %i "$T/nlib/libnccl.so.2")" != "$inside" ]
		agent_start container_nccl -i 0.25 --pid "$WPID" || fail_because "agent: $(agent_tail)"
		wait_record ".type==\"process\" and .pid==$WPID and
			((.libraries // []) | any(. == \"$T/nlib/libnccl.so.2\"))" 10 ||
			fail_because "no process record with $T/nlib/libnccl.so.2"
		touch "$T/ncont.go"
		wait_exit "$BG_PID" 30 || fail_because "workload did not finish"
		agent_finish "$WPID"
		calls=$(jqo -c '[.[] | select(.type == "stats" and .final) | .nccl.calls] | last')
		expect "calls $calls through the namespace's libnccl, want $(nccl_calls_want 3)" \
			jqe --argjson w "$(nccl_calls_want 3)" '. == $w' <<<"$calls"
	else
		fail_because "workload in the mount namespace printed nothing: $(head -c 200 "$T/ncont.work.err")"
	fi
fi
report container_nccl
