#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# lib_grace - a library file's uprobes outlive its last traced user for
# --lib-grace (issue 18): short-lived CUDA processes that map the same file
# one after another pay one attach, not one each (about 5 ms of agent CPU);
# the links go when the grace is over; at most 8 files are kept so.
# The workloads map private copies of libcudart and the stub libcuda, so
# their uprobes and log lines are told apart from those of other CUDA
# processes on the node (the agent runs without --pid).
#
#   lib_grace_reuse    --lib-grace 600 --launch-sampling 500ms/1s: two
#                      processes on the same copies, one after the other:
#                      one attach per file, the sync links kept between
#                      them (stats: kept, then reused); the sampling windows
#                      attach the launch probes to the reused files without
#                      an error (the first process, whose root the files
#                      were opened through, is gone) and reach all 30 links;
#                      so do they after the second exits while a third
#                      maps the files
#   lib_grace_bound    the same agent, then 9 processes, each with its own
#                      copy of libcudart: the copy idle longest is detached
#                      to keep 8 at most ("more than 8 files"); no stats
#                      record shows more than 8 idle files
#   lib_grace_launches --mode deep: the per-launch probes stay on the copies
#                      after their only user exits (30 links); the next
#                      process, 2 threads of 5 calls, gets 5 records per
#                      launch entry point and thread, no link attached twice
#                      (dropped and attached again, they fired twice while
#                      the old link's destroy waited)
#   lib_grace_expire   --lib-grace 1: the links of the copies go once the
#                      second has passed (a bounded wait), with the
#                      "no traced process mapped it for 1 s" lines
source "$(dirname "$0")/lib.sh"
it_preflight lib_grace_reuse lib_grace_bound lib_grace_launches lib_grace_expire
LA_CALLS=5

LIB=$T/lib

# uprobe links of the agent on the files under DIR (opened as /proc/PID/root/DIR/...)
links_on() {
	bpftool perf list 2>/dev/null | grep -cE "^pid $AGENT_PID .*(uprobe|uretprobe) .*filename .*$1/"
}

# run_one NAME RT: one cuda_calls on the runtime copy RT and our libcuda
# copy, traced (attach record) before it calls; run_end NAME: it calls,
# exits, and the agent wrote its exit record
run_one() {
	local name=$1 rt=$2
	rm -f "$T/$name.go"
	CUDA_CALLS_RT=$rt CUDA_CALLS_DRV=$LIB/libcuda.so \
		bg_start "$T/$name.out" "$CUDA_CALLS" -t "${RUN_THREADS:-1}" -n "${RUN_CALLS:-1}" \
		-w "$T/$name.go"
	RUN_BG=$BG_PID
	wait_line "$T/$name.out" 10 || { fail_because "$name printed nothing: $(head -c 200 "$T/$name.out.err")"; return 1; }
	RUN_PID=$(jq -r .pid "$T/$name.out")
	cuda_attached "$RUN_PID" 10 || { fail_because "$name (pid $RUN_PID) not traced: $(agent_tail)"; return 1; }
}
run_end() {
	touch "$T/$1.go"
	wait_exit "$RUN_BG" 20 || { fail_because "$1 did not finish"; return 1; }
	wait_record ".type==\"process\" and .event==\"exit\" and .pid==$RUN_PID" 10 ||
		{ fail_because "no exit record for $1 (pid $RUN_PID)"; return 1; }
}

# window_ok WHAT PID EVENT: a sampling window closed after PID's process
# record EVENT, and no launch probe failed to attach up to then
window_ok() {
	local ts rec
	ts=$(jqo --argjson p "$2" --arg e "$3" '[.[] | select(.type == "process" and .pid == $p and .event == $e)] | first | .ts_ns')
	wait_record ".type==\"launch_probes\" and .action==\"detach\" and .ts_ns > $ts" 10 ||
		fail_because "no sampling window closed after $1"
	rec=$(jqo '[.[] | select(.type == "launch_probes")] | last')
	expect "launch probes that failed to attach once $1: $rec ($(grep -E 'attach uprobe|failed to open' "$AGENT_ERR" | tail -n 3 | tr '\n' '|'))" \
		eq "$(jq .attach_errors <<<"$rec")" 0
}

# the last complete stats record's FIELD
stat_of() { tac "$AGENT_OUT" | grep -F '"type":"stats"' | grep -m1 '}$' | jq ".$1"; }

# stop the agent: it detaches every file it kept (0.1-0.3 s a link here)
stop_slow() {
	kill -INT "$AGENT_PID" 2>/dev/null
	wait_exit "$AGENT_PID" 90 || { fail_because "agent did not exit within 90 s of SIGINT"; return 1; }
	expect "agent exit $WAIT_RC: $(agent_tail)" eq "$WAIT_RC" 0
}

reuse() {
	local n f i
	agent_start grace -i 0.1 --no-net --lib-grace 600 --launch-sampling 500ms/1s ||
		{ fail_because "agent did not start: $(agent_tail)"; return 1; }
	run_one first "$LIB/libcudart.so.13" && run_end first || return 1
	n=$(links_on "$LIB")
	expect "links on our copies after their only user exited: $n, want the sync ones (12 or more)" ge "$n" 12
	sleep 0.3 # a stats record after the exit
	expect "stats.idle_files $(stat_of idle_files), want at least 2 (our copies)" \
		ge "$(stat_of idle_files)" 2
	run_one second "$LIB/libcudart.so.13" || return 1
	for f in libcudart.so.13 libcuda.so; do
		n=$(grep -cF "probes to $LIB/$f " "$AGENT_ERR")
		expect "attach lines for $f: $n, want 1 (the second process found it attached)" eq "$n" 1
	done
	# the launch probes of a sampling window, attached through the second's root
	for ((i = 0; i < 100; i++)); do
		n=$(links_on "$LIB")
		[ "$n" = 34 ] && break
		sleep 0.1
	done
	expect "links on our copies in a sampling window: $n, want 34 (22 + 12 launch probes)" eq "$n" 34
	# a window opened and closed after the reuse: its records' attach errors
	window_ok "the second process was traced" "$RUN_PID" attach
	# a third process maps them too; the second, whose root they are opened
	# through, exits first: the next windows open them through the third's
	local b_bg=$RUN_BG b_pid=$RUN_PID
	run_one third "$LIB/libcudart.so.13" || return 1
	local c_bg=$RUN_BG c_pid=$RUN_PID
	RUN_BG=$b_bg RUN_PID=$b_pid
	run_end second || return 1
	window_ok "the second process exited" "$b_pid" exit
	RUN_BG=$c_bg RUN_PID=$c_pid
	run_end third || return 1
	sleep 0.3
	expect "stats.idle_files_reused $(stat_of idle_files_reused), want at least 2" \
		ge "$(stat_of idle_files_reused)" 2
}

bound() {
	local i n rec
	# 9 runtime copies, one process each, one after the other
	for ((i = 0; i < 9; i++)); do
		mkdir -p "$LIB/c$i"
		cp "$LIB/libcudart.so.13" "$LIB/c$i/libcudart.so.13" || { fail_because "copy $i"; return 1; }
		run_one "c$i" "$LIB/c$i/libcudart.so.13" && run_end "c$i" || return 1
	done
	expect "copy 0 (idle longest) not detached for room: $(grep -F "$LIB/c0/" "$AGENT_ERR" | tail -n 2)" \
		grep -qF "detached $LIB/c0/libcudart.so.13 (more than 8 files kept without a traced user)" "$AGENT_ERR"
	n=$(links_on "$LIB/c8")
	expect "links on the last copy: $n, want its sync ones (6 or more)" ge "$n" 6
	sleep 0.3
	rec=$(jqo '[.[] | select(.type == "stats") | .idle_files] | max')
	expect "most idle files in a stats record: $rec, more than 8" ge 8 "$rec"
	expect "stats.idle_files_detached $(stat_of idle_files_detached), want at least 1" \
		ge "$(stat_of idle_files_detached)" 1
}

# deep mode: the per-launch probes stay on a file kept for --lib-grace, and
# the next process's launches are recorded once each
launches() {
	local n dup bad pid
	agent_start launches -i 0.1 --no-net --mode deep --no-stacks --lib-grace 600 ||
		{ fail_because "agent did not start: $(agent_tail)"; return 1; }
	run_one la "$LIB/libcudart.so.13" && run_end la || return 1
	n=$(links_on "$LIB")
	expect "links on our copies after their only user exited: $n, want all 34 (22 + 12 per-launch)" \
		eq "$n" 34
	RUN_THREADS=2 RUN_CALLS=$LA_CALLS run_one lb "$LIB/libcudart.so.13" || return 1
	pid=$RUN_PID
	run_end lb || return 1
	sleep 0.3 # the last ring drain
	bpftool perf list 2>/dev/null | grep -E "^pid $AGENT_PID .*uprobe .*filename " >"$T/la.perf"
	dup=$(awk '{ for (i = 1; i < NF; i++) if ($i == "prog_id" || $i == "offset") k = k " " $(i + 1); print k; k = "" }' \
		"$T/la.perf" | sort | uniq -d | wc -l)
	# which files, for the message
	[ "$dup" = 0 ] || dup="$dup ($(awk '{ for (i = 1; i < NF; i++) { if ($i == "filename") f = $(i + 1)
		if ($i == "prog_id" || $i == "offset") k = k " " $(i + 1) } print k, f; k = "" }' "$T/la.perf" |
		sort | awk '{ f = $NF; $NF = ""; if ($0 == last) print f; last = $0 }' | sort | uniq -c | head -3 | tr '\n' ' '))"
	expect "$dup (program, offset) pairs attached twice" [ "$dup" = 0 ]
	bad=$(grep -F '"type":"cuda_launch"' "$AGENT_OUT" | jq -c -n -R --argjson p "$pid" --argjson c "$LA_CALLS" \
		'[inputs | fromjson? | select(.pid == $p)] | group_by([.api, .tid]) |
		 [(if length != 28 then "\(length) (api, thread) pairs, want 28" else empty end),
		  (.[] | select(length != $c) | "\(.[0].api) on \(.[0].tid): \(length) records")] | .[:4]')
	expect "launch records of the second process: $bad" [ "$bad" = "[]" ]
}

expire() {
	local i n f
	agent_start expire -i 0.1 --no-net --lib-grace 1 ||
		{ fail_because "agent did not start: $(agent_tail)"; return 1; }
	run_one fourth "$LIB/libcudart.so.13" && run_end fourth || return 1
	for ((i = 0; i < 300; i++)); do
		n=$(links_on "$LIB")
		[ "$n" = 0 ] && grep -qF "detached $LIB/libcuda.so (" "$AGENT_ERR" &&
			grep -qF "detached $LIB/libcudart.so.13 (" "$AGENT_ERR" && break
		sleep 0.1
	done
	expect "links on our copies 30 s after the exit, with --lib-grace 1: $n" eq "$n" 0
	for f in libcudart.so.13 libcuda.so; do
		expect "no grace line for $f: $(grep -F "$LIB/$f" "$AGENT_ERR" | tail -n 1)" \
			grep -qF "detached $LIB/$f (no traced process mapped it for 1 s)" "$AGENT_ERR"
	done
}

main() {
	command -v bpftool >/dev/null || { fail_because "bpftool missing (make deps)"; return; }
	mkdir -p "$LIB"
	cp -L /usr/local/cuda/lib64/libcudart.so "$LIB/libcudart.so.13" &&
		cp -L /usr/local/cuda/lib64/stubs/libcuda.so "$LIB/libcuda.so" ||
		{ fail_because "cannot copy the CUDA libraries"; return; }
	reuse
	report lib_grace_reuse
	[ -n "$AGENT_PID" ] && kill -0 "$AGENT_PID" 2>/dev/null && bound
	stop_slow
	report lib_grace_bound
	launches
	stop_slow
	report lib_grace_launches
	expire
	stop_slow
	report lib_grace_expire
}

main
