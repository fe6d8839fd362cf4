#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# usdt - steps marked by a native engine with include/infertrace/step.h
# (issue 5): the agent finds the USDT notes in the files a traced process
# maps executable (its executable, its libraries, one dlopen()ed late),
# attaches bpf/usdt.bpf.c to them for that pid, and the step segmenter
# makes one step per begin/end pair.
#
#   usdt_steps:     30 steps of tests/integration/usdt_steps.c: 30 step
#                   records with source usdt, in order, each with the
#                   tokens, batch, KV tokens and phase the engine passed, the
#                   engine's thread, and start/end inside the engine's own
#                   clock brackets around the probes; the semaphore was set
#                   while attached (arguments evaluated); 60 probe hits
#                   counted, one process with probes, one file with
#                   probes, no attach error; each distinct executable file
#                   the process maps read once (usdt_files_read equals the
#                   distinct (dev, inode) of its executable mappings)
#   usdt_library:   the probes in a shared library (libusdt_steps.so, from
#                   usdt_lib.c) that usdt_dlopen, whose executable has no
#                   notes, dlopen()s only after the agent traces it: the
#                   agent finds and attaches them (the library's semaphores
#                   go up), and 30 steps give 30 step records with source
#                   usdt, in order, with the library's tokens, batch, KV
#                   tokens and phase, the thread, start/end inside the
#                   brackets, semaphore set; 60 probe hits, one process,
#                   one file with probes, the attach log names the library,
#                   no attach error; each distinct file read once
#   usdt_no_notes:  a CUDA process without the notes (cuda_calls) gets no
#                   probes, no error and no USDT steps
source "$(dirname "$0")/lib.sh"
USDT_STEPS=$BUILD/tests/integration/usdt_steps
USDT_DLOPEN=$BUILD/tests/integration/usdt_dlopen
USDT_LIB=$BUILD/tests/integration/libusdt_steps.so
it_preflight usdt_steps usdt_library usdt_no_notes
for f in "$USDT_STEPS" "$USDT_DLOPEN" "$USDT_LIB"; do
	if [ ! -f "$f" ]; then
		for n in usdt_steps usdt_library usdt_no_notes; do echo "FAIL $n: $f not built (make test)"; done
		exit 0
	fi
done

# distinct (device, inode) of the executable file mappings of PID
exec_files() { awk '$2 ~ /x/ && $5 != 0 { print $4, $5 }' "/proc/$1/maps" | sort -u | wc -l; }

# check_steps PID TID WORKLOAD_OUT TOKENS_BASE: the workload's N steps
# (tokens TOKENS_BASE + i, batch 1 + i % 4, kv 1000 * (i + 1), prefill then
# decode) against the agent's step records of PID, one by one
check_steps() {
	local pid=$1 tid=$2 wout=$3 tb=$4 steps marks bad
	steps=$(jqo --argjson p "$pid" '[.[] | select(.type == "step" and .pid == $p)] | sort_by(.start_ns)')
	marks=$(jq -s -c '[.[] | select(has("step"))]' "$wout")
	expect "$(jq length <<<"$marks") workload steps, want $N" eq "$(jq length <<<"$marks")" "$N"
	expect "$(jq length <<<"$steps") steps, want $N" eq "$(jq length <<<"$steps")" "$N"
	bad=$(jq -c -n --argjson s "$steps" --argjson m "$marks" --argjson tid "$tid" --argjson tb "$tb" '
		[ range(0; [$s | length, $m | length] | min) as $i | $s[$i] as $x | $m[$i] as $w
		  | (if $x.source != "usdt" then "step \($i): source \($x.source)" else empty end),
		    (if $x.tokens != $tb + $i or $x.batch_size != 1 + $i % 4 or $x.kv_tokens != 1000 * ($i + 1)
		     then "step \($i): tokens \($x.tokens) batch \($x.batch_size) kv \($x.kv_tokens)" else empty end),
		    (if $x.phase != (if $i == 0 then "prefill" else "decode" end) then "step \($i): phase \($x.phase)" else empty end),
		    (if $x.tid != $tid then "step \($i): tid \($x.tid)" else empty end),
		    (if $x.start_ns < $w.begin or $x.start_ns + $x.dur_ns > $w.end or $x.dur_ns < 2000000
		     then "step \($i): [\($x.start_ns), +\($x.dur_ns)] outside [\($w.begin), \($w.end)]" else empty end),
		    (if $w.semaphore < 1 then "step \($i): semaphore \($w.semaphore)" else empty end)
		] | .[:5]')
	expect "steps: $bad" [ "$bad" = "[]" ]
}

# finish_steps NAME TOKENS_BASE: once the workload (WPID, TID, WOUT, BG pid
# wp, exit file ex) has run its N steps: wait until the agent cut them (2 s
# after their end), let the workload exit, stop the agent, check the steps
# one by one, and the stats: 2 probe hits a step, 1 process and 1 file with
# probes, no error, each distinct executable file of the process read once
finish_steps() {
	local name=$1 tb=$2 nfiles st
	for ((i = 0; i < 60; i++)); do
		[ "$(jqo --argjson p "$WPID" '[.[] | select(.type == "step" and .pid == $p)] | length')" -ge "$N" ] && break
		sleep 0.1
	done
	nfiles=$(exec_files "$WPID")
	touch "$ex"
	wait_exit "$wp" 30 || fail_because "$name did not finish"
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	check_steps "$WPID" "$TID" "$WOUT" "$tb"
	st=$(jqo '[.[] | select(.type == "stats")][-1] | {usdt_processes, usdt_errors, usdt_files, usdt_files_read, step_marks,
		bpf: .bpf_events.step_mark, lost: .bpf_drops.step_mark}')
	expect "stats $st: want 60 step marks" jqe '.step_marks == 60' <<<"$st"
	expect "stats $st: want 60 step_mark records from BPF, none lost" jqe '.bpf == 60 and .lost == 0' <<<"$st"
	expect "stats $st: want 1 process with probes, 1 file with probes, no error" \
		jqe '.usdt_processes == 1 and .usdt_files == 1 and .usdt_errors == 0' <<<"$st"
	expect "stats $st: want each of the $nfiles executable files read once" \
		jqe --argjson n "${nfiles:-0}" '$n > 2 and .usdt_files_read == $n' <<<"$st"
}

# start_engine NAME WORKLOAD ARGS...: WORKLOAD in the background, output in
# WOUT (first line {"pid","tid"}: WPID, TID; its pid in wp), then the agent
# (NAME) on that pid; 0 once the agent traces it, else the reason is noted
start_engine() {
	local name=$1
	shift
	bg_start "$WOUT" "$@"
	wp=$BG_PID
	if ! wait_line "$WOUT" 10; then
		fail_because "$(basename "$1") printed nothing: $(head -c 300 "$WOUT.err")"
		return 1
	fi
	WPID=$(head -n 1 "$WOUT" | jq -r .pid)
	TID=$(head -n 1 "$WOUT" | jq -r .tid)
	if ! agent_start "$name" -i 0.25 --pid "$WPID"; then
		fail_because "agent did not start: $(agent_tail)"
		return 1
	fi
	if ! wait_record ".type == \"process\" and .pid == $WPID" 10; then
		fail_because "no attach record for pid $WPID: $(agent_tail)"
		return 1
	fi
}

N=30
go=$T/go ex=$T/exit WOUT=$T/work
if start_engine usdt "$USDT_STEPS" -n "$N" -w "$go" -e "$ex"; then
	sleep 0.2
	touch "$go"
	wait_workload_done "$WOUT" 10
	finish_steps usdt_steps 100
fi
report usdt_steps

# ----------------------------------------------------- shared library --
go=$T/go3 ex=$T/exit3 WOUT=$T/work3
if start_engine usdt_lib "$USDT_DLOPEN" -l "$USDT_LIB" -n "$N" -w "$go" -e "$ex"; then
	# not loaded yet: nothing to attach to
	expect "libusdt_steps.so mapped before the go" [ -z "$(grep libusdt_steps "/proc/$WPID/maps")" ]
	touch "$go"
	wait_workload_done "$WOUT" 15
	expect "the library's semaphores never went up: $(grep loaded "$WOUT")" \
		jqe -s 'map(select(has("loaded"))) | length == 1 and .[0].semaphore >= 1' "$WOUT"
	finish_steps usdt_dlopen 200
	att=$(grep -c "pid $WPID: step probes .* attached in .*/libusdt_steps.so\$" "$AGENT_ERR")
	expect "$att attach lines for the library, want 1: $(grep 'step probes' "$AGENT_ERR" | head -3)" \
		eq "$att" 1
	expect "step probes attached elsewhere: $(grep 'step probes' "$AGENT_ERR" | head -3)" \
		eq "$(grep -c 'step probes' "$AGENT_ERR")" 1
	expect "the agent warned: $(grep -iE 'warn|error' "$AGENT_ERR" | grep -iv 'control socket\|--shim-group' | head -2)" \
		[ -z "$(grep -iE 'warn|error' "$AGENT_ERR" | grep -iv 'control socket\|--shim-group')" ]
fi
report usdt_library

# ------------------------------------------------------------- no notes --
go=$T/go2 out=$T/calls
if agent_start usdt_none -i 0.25; then
	bg_start "$out" "$CUDA_CALLS" -t 1 -n 5 -w "$go"
	cp=$BG_PID
	if wait_line "$out" 10; then
		CPID=$(jq -r .pid "$out")
		cuda_attached "$CPID" 10 || fail_because "no attach record for cuda_calls (pid $CPID)"
		touch "$go"
		wait_exit "$cp" 30 || fail_because "cuda_calls did not finish"
		sleep 0.5
	else
		fail_because "cuda_calls printed nothing"
	fi
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	st=$(jqo '[.[] | select(.type == "stats")][-1] | {usdt_processes, usdt_errors, step_marks}')
	expect "stats $st: want no USDT process, error or mark" \
		jqe '.usdt_processes == 0 and .usdt_errors == 0 and .step_marks == 0' <<<"$st"
	expect "a USDT step for cuda_calls" eq "$(jqo '[.[] | select(.type == "step" and .source == "usdt")] | length')" 0
	expect "the agent warned: $(agent_tail)" [ -z "$(grep -i 'usdt' "$AGENT_ERR")" ]
else
	fail_because "agent did not start: $(agent_tail)"
fi
report usdt_no_notes
