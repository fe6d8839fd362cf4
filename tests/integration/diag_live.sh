#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# diag_live - steps, anomalies and the flight recorder's anomaly trigger live
# (issues 5 and 4), with the real uprobes, the real CUPTI shim and the CUPTI
# test double (tests/integration/gpu_live.c -s): one launching thread runs 40
# steps (kernel, graph of 3, driver kernel, device-to-host copy; 2 ms apart),
# and step 34 stalls 40 ms on the host between its graph and its driver
# launch. The agent runs in sentinel mode with its defaults (automatic
# segmentation: a device-to-host copy ends a step).
#
#   diag_live_steps:        40 step records for the workload, in order, one
#                           per round: 5 kernels each, phase decode (graph
#                           kernels), the launching thread's tid, rank 1
#                           (its INFERTRACE_RANK, over LOCAL_RANK=5); step
#                           34 lasts >= 40 ms, every other < 10 ms
#   diag_live_metrics:      /metrics (--metrics) taken once the 40 steps are
#                           cut: infertrace_step_duration_seconds{phase=
#                           "decode",infertrace_instance=INST} holds exactly
#                           those steps (each bucket, the sum, the count; no
#                           other series);
#                           infertrace_gpu_launch_to_start_seconds counts
#                           every joined GPU record; promtool accepts it
#   diag_live_anomaly:      exactly one anomaly for the instance: step 34
#                           (step_start_ns = its start_ns), rank 1, its pid and
#                           tid, kind host_stall,
#                           suspects naming the GPU idle and the launching
#                           thread's ~40 ms off-CPU, run 1 (one episode:
#                           stats.diag, and --summary's steps and anomalies
#                           at exit, say the same: its durations and longest
#                           steps as steps_check.py reads them from the
#                           records, step 34 the longest, host_stall); with --anomaly-deep-dive
#                           30, then a deep_dive start for the instance
#                           (source anomaly, its one process, ~30 s)
#   recorder_anomaly_window: the anomaly sends the instance's window: a
#                           flight_recorder record (trigger anomaly) and
#                           after it every launch (cuda_launch, regs_only)
#                           and every kernel of the 40 steps, the stalled
#                           step's included; none of them before it
#   diag_replay_steps:      the run's own step records (as a steps topic
#                           carries them; its stats records among them)
#                           through --replay (issue 5 item 4): the detector
#                           alone finds the same one anomaly (step, kind,
#                           chart); diag_status counts every step record and
#                           every other record
#   diag_replay_gap:        a step stream of 2 s prefills (made up here)
#                           whose step 150 hides a 20 ms stall in one GPU
#                           idle gap, plus 2 malformed lines: one anomaly,
#                           that step, chart gap, kind host_stall; bad_lines
#                           2, each logged with its line number. Without
#                           idle_max_ns in the records: no anomaly (the
#                           step's duration alone cannot show it)
#   diag_replay_waiting:    a step stream of unknown phase (made up here):
#                           an engine of 64 requests whose batch dips by 2
#                           or 8 every 10th step, that step 5 ms slower per
#                           request missing (their prefill); the last step,
#                           a dip of 2, took 1.5x. diag_status counts the
#                           101 dips as waiting; one anomaly, that step,
#                           phase unknown (the record's). The same stream
#                           given as decode: nothing counted as waiting
#   diag_live_net:          20 rounds, each writing 8000 x (1 + r % 4) bytes
#                           to a loopback TCP connection and reading them
#                           back (gpu_live -N): each step's net_bytes is
#                           exactly twice that (sent and received, through
#                           the socket send/receive tracepoints); the BPF
#                           counters show net_io records and no drop. The
#                           workload has LOCAL_RANK=2 and RANK=9: rank 2
#   diag_live_straggler:    two ranks of one instance (INFERTRACE_RANK 0
#                           and 1) run 40 rounds in lockstep (gpu_live -P:
#                           round r of both at T0 + r x 60 ms); rank 1
#                           stalls 40 ms in round 34 (--detect straggler=2).
#                           40 steps per rank;
#                           exactly one straggler anomaly (chart peers):
#                           rank 1, its step 34, its suspect naming rank 1's
#                           step time against its peer's; no anomaly for
#                           rank 0 in round 34 (its own 5 ms steps on a
#                           2-CPU machine may be flagged slow in other
#                           rounds when it is descheduled: a true finding,
#                           printed, not a failure)
#   diag_live_contention:   round 34 is CPU contention (gpu_live -C): the
#                           launcher does 20 ms of CPU work on its CPU while
#                           a process it forked spins there too. Exactly one
#                           anomaly: that step, kind cpu_contention, a runq
#                           suspect of at least 5 ms naming the spinning
#                           process as the one that preempted the launcher,
#                           and the GPU idle it caused
#   diag_replay_cpu:        the contention run's recording (its step and
#                           anomaly records left out) through --replay: the
#                           steps are cut again from its GPU records, and
#                           its offcpu and syscall records give each the
#                           breakdown it had live (off-CPU, run-queue wait,
#                           who preempted, slow syscalls: equal for every
#                           step); the one anomaly again, the same step and
#                           kind cpu_contention; replay_status counts the
#                           CPU events. Without the offcpu records the step
#                           has no run-queue wait, and is not named
#                           cpu_contention
#   diag_live_nvtx:         30 rounds marked by NVTX ranges as CUPTI reports
#                           them to the shim: 30 steps with source marker,
#                           the tokens and batch of each range's message;
#                           gpu.nvtx counts 36 ranges, none unpaired or lost;
#                           round 12 loads GPU code (gpu_live -J): two
#                           cuda_code_load records, and step 12 alone has
#                           code_loads 2 and their time
#   diag_live_summary_reset: workload A runs 40 steps and ends; `agentctl
#                           summary --reset` prints its digest (40 steps,
#                           none flagged, its CUDA calls, its GPU records)
#                           and starts the agent's anew; workload B runs 40
#                           steps, 34 stalled: --summary at exit is B's
#                           alone (header from the reset, 40 steps, the one
#                           host_stall, steps_check.py on B's records, no
#                           CUDA calls of A); joined GPU records of the two
#                           texts add to stats.gpu.joined; stats not reset.
#                           With --metrics-instances 1, /metrics has A's
#                           steps under its name (its quote, backslash,
#                           UTF-8 and newline as _) and B's as "_other",
#                           and B's anomaly per instance under "_other"
#   diag_live_metrics_idle: --metrics-instances 1 --metrics-instance-idle 3:
#                           A (60 steps over 6 s) has the one series of its
#                           own while it runs; 3 s after its last step the
#                           series leaves /metrics (step_series_expired 1);
#                           then B's steps get a series of their own, not
#                           "_other", and infertrace_steps_total is B's
#                           series plus A's 60
#   diag_live_summary_every: 60 rounds 100 ms apart (the GPU records handed
#                           over every second, gpu_live -F) under
#                           --summary-every 1: a digest on stderr each
#                           second and at exit, each saying from when (later
#                           each time); their steps add up to the 60 step
#                           records and stats.diag.steps, spread over >= 3
#                           digests
source "$(dirname "$0")/lib.sh"
GPU_LIVE=$BUILD/tests/integration/gpu_live
NAMES="diag_live_steps diag_live_metrics diag_live_anomaly recorder_anomaly_window diag_replay_steps diag_replay_gap
	diag_replay_waiting diag_live_net diag_live_straggler diag_live_contention diag_replay_cpu diag_live_nvtx
	diag_live_summary_reset diag_live_metrics_idle diag_live_summary_every"
# shellcheck disable=SC2086
it_preflight $NAMES
if [ ! -x "$GPU_LIVE" ] || [ ! -f "$BUILD/libinfertrace_cupti.so" ]; then
	for n in $NAMES; do
		echo "FAIL $n: $GPU_LIVE or $BUILD/libinfertrace_cupti.so not built (make test)"
	done
	exit 0
fi

STEPS=40
STALL=34

# steps_of PID: the step records of PID in time order; anomalies_of INST:
# the anomaly records of INST; expect_one_anomaly AN: AN holds exactly one
steps_of() {
	jqo --argjson p "$1" '[.[] | select(.type == "step" and .pid == $p)] | sort_by(.start_ns)'
}
anomalies_of() { jqo --arg i "$1" '[.[] | select(.type == "anomaly" and .instance == $i)]'; }
expect_one_anomaly() {
	expect "$(jq length <<<"$1") anomalies, want 1: $(jq -c '[.[] | {step_start_ns, dur_ns, chart, kind}]' <<<"$1")" \
		eq "$(jq length <<<"$1")" 1
}
# stalled_anomaly STEPS: INST's anomalies in an: exactly one, and it is step STALL of STEPS
stalled_anomaly() {
	local start
	start=$(jq --argjson s "$STALL" '.[$s].start_ns' <<<"$1")
	an=$(anomalies_of "$INST")
	expect_one_anomaly "$an"
	expect "the anomaly is not step $STALL (start $start): $(jq -c '.[0] | {step_start_ns, dur_ns}' <<<"$an")" \
		jqe --argjson s "$start" '.[0].step_start_ns == $s' <<<"$an"
}

# wait_steps N COND [JQ_ARGS...]: until at least N step records meet COND (a
# jq condition on a record, its $variables from JQ_ARGS), at most 15 s; 1 if not
wait_steps() {
	local n=$1 cond=$2 i
	shift 2
	for ((i = 0; i < 150; i++)); do
		[ "$(jqo "$@" "[.[] | select(.type == \"step\" and ($cond))] | length")" -ge "$n" ] && return 0
		sleep 0.1
	done
	return 1
}

# pair_start TAG NAME A_OPTS B_OPTS AGENT_ARGS...: gpu_live workloads A and B
# (one thread each, instances PINST[a] and PINST[b], set by the caller;
# A_OPTS and B_OPTS more gpu_live options, as words), released by $T/TAGa.go
# and $T/TAGb.go, ended by $T/TAGa.exit and $T/TAGb.exit, their shims on
# $T/TAG.d/shim.sock, and an agent with --metrics (NAME, AGENT_ARGS more of
# its options) on both: returns once both are attached and A's shim spoke.
# Sets PPIDS[a|b] (their pids) and PWP[a|b] (the processes); 1, its reason
# given, if not. pair_end TAG: both told to end and waited for, agent stopped
declare -A PINST PPIDS PWP
pair_start() {
	local tag=$1 name=$2 w sock=$T/$1.d/shim.sock
	local -A opts=([a]=$3 [b]=$4)
	shift 4
	mkdir -p "$T/$tag.d"
	for w in a b; do
		# shellcheck disable=SC2086 # the options as words
		bg_start "$T/$tag$w.work" env INFERTRACE_INSTANCE="${PINST[$w]}" INFERTRACE_SHIM_SOCKET="$sock" \
			"$GPU_LIVE" -t 1 ${opts[$w]} -w "$T/$tag$w.go" -e "$T/$tag$w.exit" -m sentinel
		PWP[$w]=$BG_PID
	done
	if ! wait_line "$T/${tag}a.work" 10 || ! wait_line "$T/${tag}b.work" 10; then
		fail_because "gpu_live printed nothing: $(head -c 300 "$T/${tag}a.work.err" "$T/${tag}b.work.err")"
		return 1
	fi
	for w in a b; do PPIDS[$w]=$(head -n 1 "$T/$tag$w.work" | jq -r .pid); done
	if ! agent_start_metrics "$name" -i 0.25 --pid "${PPIDS[a]}" --pid "${PPIDS[b]}" --shim-socket "$sock" \
		--sentinel-launches all "$@"; then
		fail_because "agent did not start: $(agent_tail)"
	elif ! cuda_attached "${PPIDS[a]}" 10 || ! cuda_attached "${PPIDS[b]}" 10; then
		fail_because "no attach record for both workloads"
	elif ! wait_record ".type == \"shim_status\" and .pid == ${PPIDS[a]}" 10; then
		fail_because "no shim_status for A: $(agent_tail)"
	else
		return 0
	fi
	return 1
}
pair_end() {
	local w
	touch "$T/${1}a.exit" "$T/${1}b.exit"
	for w in a b; do wait_exit "${PWP[$w]}" 30 || fail_because "gpu_live $w did not finish"; done
	agent_stop INT || fail_because "agent did not exit on SIGINT"
}

# run NAME GPU_LIVE_ARGS...: gpu_live (one thread, instance it-NAME-$$) and a
# sentinel agent on it, until the agent wrote a step for each of its rounds
# (steps are cut 2 s after their end) and, when WAIT_WINDOW is set, the
# flight recorder's window; workload released, agent stopped. Sets WPID,
# TID, INST, OK, and leaves AGENT_OUT.
run() {
	local name=$1 go=$T/$1.go ex=$T/$1.exit sock=$T/$1.d/shim.sock wout=$T/$1.work wp
	shift
	INST=it-$name-$$ OK=
	# shellcheck disable=SC2086 # RUN_ENV: VAR=VALUE words for the workload
	bg_start "$wout" env INFERTRACE_INSTANCE="$INST" INFERTRACE_SHIM_SOCKET="$sock" ${RUN_ENV:-} \
		"$GPU_LIVE" -t 1 -w "$go" -e "$ex" -m sentinel "$@"
	wp=$BG_PID
	if ! wait_line "$wout" 10; then
		fail_because "gpu_live printed nothing: $(head -c 300 "$wout.err")"
		return 1
	fi
	WPID=$(head -n 1 "$wout" | jq -r .pid)
	TID=$(head -n 1 "$wout" | jq -r '.tids[0]')
	# shellcheck disable=SC2086 # AGENT_ARGS: more agent options
	if ! ${AGENT_START:-agent_start} "$name" -i 0.25 --pid "$WPID" --shim-socket "$sock" --sentinel-launches all ${AGENT_ARGS:-}; then
		fail_because "agent did not start: $(agent_tail)"
	elif ! cuda_attached "$WPID" 10; then
		fail_because "no attach record for pid $WPID"
	elif ! wait_record ".type == \"shim_status\" and .pid == $WPID" 10; then
		fail_because "no shim_status for pid $WPID: $(agent_tail)"
	else
		sleep 0.2
		touch "$go"
		wait_record ".type == \"step\" and .pid == $WPID" 20 &&
			wait_steps "$ROUNDS" '.pid == $p' --argjson p "$WPID"
		[ -n "${WAIT_WINDOW:-}" ] && wait_record ".type == \"flight_recorder\" and .instance == \"$INST\"" 5
		sleep 0.5
		# SCRAPE: /metrics now, every step in (AGENT_START=agent_start_metrics)
		[ -n "${SCRAPE:-}" ] && curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics" >"$SCRAPE"
		OK=1
	fi
	touch "$ex"
	wait_exit "$wp" 30 || fail_because "gpu_live did not finish"
	agent_stop INT || fail_because "agent did not exit on SIGINT"
}

RUN_ENV="INFERTRACE_RANK=1 LOCAL_RANK=5" AGENT_ARGS="--anomaly-deep-dive 30 --summary" ROUNDS=$STEPS WAIT_WINDOW=1 \
	AGENT_START=agent_start_metrics SCRAPE=$T/diag.metrics run diag -n "$STEPS" -s "$STALL"
ok=$OK
WHY=("${_why[@]}")

# ------------------------------------------------------------------ steps --
if [ -n "$ok" ]; then
	steps=$(steps_of "$WPID")
	n=$(jq length <<<"$steps")
	expect "$n steps, want $STEPS" eq "$n" "$STEPS"
	bad=$(jq -c --argjson tid "$TID" --argjson stall "$STALL" '
		[ to_entries[] | .key as $i | .value
		  | (if .kernels != 5 then "step \($i): \(.kernels) kernels" else empty end),
		    (if .rank != 1 then "step \($i): rank \(.rank), want INFERTRACE_RANK 1" else empty end),
		    (if .phase != "decode" then "step \($i): phase \(.phase)" else empty end),
		    (if .tid != $tid then "step \($i): tid \(.tid)" else empty end),
		    (if $i == $stall and .dur_ns < 40000000 then "stalled step \($i): \(.dur_ns) ns" else empty end),
		    (if $i != $stall and .dur_ns >= 10000000 then "step \($i): \(.dur_ns) ns" else empty end)
		] | .[:5]' <<<"$steps")
	expect "steps: $bad" [ "$bad" = "[]" ]
fi
report diag_live_steps

# ---------------------------------------------------------------- metrics --
# /metrics while the agent ran, every step cut: the step histogram holds the
# 40 step records exactly (bucket by bucket, sum); the GPU queue histogram
# counts every joined record; promtool accepts the scrape
_why=("${WHY[@]}")
if [ -n "$ok" ]; then
	m=$(cat "$T/diag.metrics")
	sl="phase=\"decode\",infertrace_instance=\"$INST\""
	got=$(grep -F "{$sl" <<<"$m" | grep '^infertrace_step_duration_seconds_')
	want=$(jq -r --arg sl "$sl" --arg b "$(sed -n 's/.*_bucket{.*,le="\([^"]*\)"}.*/\1/p' <<<"$got" | tr '\n' ' ')" '
		[.[].dur_ns / 1e9] as $d
		| ($b | split(" ") | map(select(. != ""))) as $le
		| ($le[] | . as $l | "infertrace_step_duration_seconds_bucket{\($sl),le=\"\($l)\"} \(if $l == "+Inf" then ($d | length) else [$d[] | select(. <= ($l | tonumber))] | length end)"),
		  "infertrace_step_duration_seconds_sum{\($sl)} \($d | add)",
		  "infertrace_step_duration_seconds_count{\($sl)} \($d | length)"' <<<"$steps")
	# the sums as numbers (the agent prints %.17g, jq its own shortest form)
	norm() { awk '{ if ($1 ~ /_sum/) printf "%s %.9f\n", $1, $2; else print }'; }
	expect "the decode steps' histogram is not their step records: $(diff <(norm <<<"$got") <(norm <<<"$want") | head -n 4 | tr '\n' '|')" \
		[ "$(norm <<<"$got")" = "$(norm <<<"$want")" ]
	expect "no bucket for the decode steps (histogram family missing?)" [ "$(grep -c _bucket <<<"$got")" -ge 10 ]
	others=$(grep '^infertrace_step_duration_seconds_count{' <<<"$m" | grep -vF "{$sl}")
	expect "step series besides the instance's decode steps: $others" [ -z "$others" ]
	st=$(awk '$1 == "infertrace_steps_total" {print $2}' <<<"$m")
	expect "infertrace_steps_total $st, want $STEPS" eq "${st:-0}" "$STEPS"
	jn=$(awk '$1 == "infertrace_gpu_records_joined_total" {print $2}' <<<"$m")
	lc=$(awk '$1 == "infertrace_gpu_launch_to_start_seconds_count" {print $2}' <<<"$m")
	li=$(awk '$1 == "infertrace_gpu_launch_to_start_seconds_bucket{le=\"+Inf\"}" {print $2}' <<<"$m")
	expect "launch-to-start count $lc, +Inf bucket $li, joined records $jn: want equal, >= $((5 * STEPS))" \
		eval '[ "${lc:-x}" = "${jn:-y}" ] && [ "$li" = "$lc" ] && [ "${lc:-0}" -ge $((5 * STEPS)) ]'
	if command -v promtool >/dev/null; then
		lint=$(promtool check metrics <<<"$m" 2>&1)
		expect "promtool check metrics: $(head -n 2 <<<"$lint" | tr '\n' ' ')" [ -z "$lint" ]
	else
		fail_because "promtool missing (make deps)"
	fi
fi
report diag_live_metrics

# ---------------------------------------------------------------- anomaly --
_why=("${WHY[@]}")
if [ -n "$ok" ]; then
	stalled_anomaly "$steps"
	expect "kind $(jq -r '.[0].kind' <<<"$an"), want host_stall" \
		jqe '.[0].kind == "host_stall"' <<<"$an"
	expect "rank $(jq -r '.[0].rank' <<<"$an"), want 1" jqe '.[0].rank == 1' <<<"$an"
	expect "pid/tid $(jq -c '.[0] | [.pid, .tid]' <<<"$an"), want the stalled step's $WPID/$TID" \
		jqe --argjson p "$WPID" --argjson t "$TID" '.[0].pid == $p and .[0].tid == $t' <<<"$an"
	ds=$(jqo '[.[] | select(.type == "stats")][-1].diag')
	expect "stats.diag $ds: want 40 steps, 1 anomaly in 1 episode, host_stall 1, no new level" \
		jqe '.steps == 40 and .anomalies == 1 and .episodes == 1 and .level_shifts == 0
			and .anomalies_by_kind.host_stall == 1' <<<"$ds"
	expect "the anomaly's run $(jq -c '.[0].run' <<<"$an"), want 1 (its episode's first)" \
		jqe '.[0].run == 1' <<<"$an"
	# --summary at exit: the same figures, readable; the stalled step the longest, flagged
	summary_has "$AGENT_ERR" 40 1 1 0 ': host_stall 1$'
	got=$(python3 "$IT_ROOT/tests/integration/steps_check.py" "$AGENT_OUT" "$AGENT_ERR" 2>&1)
	expect "--summary's step durations and longest steps, read again from the records: $got" \
		[ "${got%% *}" = ok ]
	top=$(sed -n '/^  longest steps/{n;p}' "$AGENT_ERR")
	expect "--summary's longest step is not step $STALL flagged host_stall: $top" \
		grep -qE " start_ns $(jq --argjson s "$STALL" '.[$s].start_ns' <<<"$steps"): host_stall$" <<<"$top"
	# --anomaly-deep-dive 30: the instance goes deep after its anomaly, its process with it
	dd=$(jq -c -n -R --arg i "$INST" '[inputs | fromjson?] as $r
		| ($r | map(.type == "anomaly" and .instance == $i) | index(true)) as $a
		| [$r[($a // 0):][] | select(.type == "deep_dive" and .instance == $i)]
		| {n: length, first: .[0]}' "$AGENT_OUT")
	expect "no deep_dive start (source anomaly, 1 process, ~30 s) after the anomaly: $dd" \
		jqe '.first.action == "start" and .first.source == "anomaly" and .first.processes == 1
			and .first.remaining_ns > 25000000000 and .first.remaining_ns <= 30000000000' <<<"$dd"
	expect "no off-CPU suspect of about 40 ms: $(jq -c '.[0].suspects' <<<"$an")" \
		jqe '[.[0].suspects[] | select(.what == "offcpu" and .value >= 35000000 and .value < 200000000)] | length == 1' <<<"$an"
	expect "no GPU idle suspect: $(jq -c '.[0].suspects' <<<"$an")" \
		jqe '[.[0].suspects[] | select(.what == "gpu_idle" and .value >= 35000000)] | length == 1' <<<"$an"
fi
report diag_live_anomaly

# ---------------------------------------------------------------- window --
_why=("${WHY[@]}")
if [ -n "$ok" ]; then
	# the records in output order after the flight_recorder record
	res=$(jq -c -n -R --arg i "$INST" --argjson p "$WPID" '
		[inputs | fromjson?] as $r
		| ($r | map(.type == "flight_recorder" and .instance == $i and .trigger == "anomaly") | index(true)) as $f
		| if $f == null then {f: null} else
		  { f: $f, rec: $r[$f],
		    before_launch: ([$r[:$f][] | select(.pid == $p and .type == "cuda_launch")] | length),
		    before_kernel: ([$r[:$f][] | select(.pid == $p and .type == "kernel")] | length),
		    launches: [$r[$f + 1:][] | select(.pid == $p and .type == "cuda_launch") | {ts_ns, api, regs_only}],
		    kernels: ([$r[$f + 1:][] | select(.pid == $p and .type == "kernel" and .matched)] | length),
		    # kept unformatted until now: each with its names and its launch
		    bad_kernels: [$r[$f + 1:][] | select(.pid == $p and .type == "kernel" and .matched)
			| select((.name | test("gl_") | not) or (.demangled | test("gl_") | not)
			    or ((.name | startswith("_Z")) and (.demangled | startswith("_Z")))
			    or (.launch_api | type != "string" or (test("^cu") | not))
			    or .launch_ts_ns > .start_ns or .end_ns < .start_ns)
			| {name, demangled, launch_api, launch_ts_ns, start_ns}][:2] } end' "$AGENT_OUT")
	if [ "$(jq .f <<<"$res")" = null ]; then
		fail_because "no flight_recorder record with trigger anomaly for $INST"
	else
		nl=$(jq '.launches | length' <<<"$res")
		nk=$(jq .kernels <<<"$res")
		expect "launches sent before the window: $(jq .before_launch <<<"$res")" eq "$(jq .before_launch <<<"$res")" 0
		expect "kernels sent before the window: $(jq .before_kernel <<<"$res")" eq "$(jq .before_kernel <<<"$res")" 0
		# 4 probed launches per round (cudaLaunchKernel, cudaGraphLaunch, cuLaunchKernel, cudaMemcpyAsync)
		expect "the window holds $nl launches, want $((4 * STEPS))" eq "$nl" $((4 * STEPS))
		# joined ones: the workload's orphan kernel (no launch) carries the pid too
		expect "the window holds $nk kernels joined to a launch, want $((5 * STEPS))" eq "$nk" $((5 * STEPS))
		expect "window kernels without their names or launch: $(jq -c .bad_kernels <<<"$res")" \
			jqe '.bad_kernels == []' <<<"$res"
		expect "a kernel launch in the window without regs_only" \
			jqe '[.launches[] | select(.api == "cudaLaunchKernel" and .regs_only != true)] | length == 0' <<<"$res"
		# the stalled round's launches: after the previous step's end, before its own
		prev_end=$(jq --argjson s "$STALL" '.[$s - 1].start_ns + .[$s - 1].dur_ns' <<<"$steps")
		st_end=$(jq --argjson s "$STALL" '.[$s].start_ns + .[$s].dur_ns' <<<"$steps")
		inside=$(jq --argjson a "$prev_end" --argjson b "$st_end" '[.launches[] | select(.ts_ns > $a and .ts_ns <= $b)] | length' <<<"$res")
		expect "the stalled step's 4 launches are not all in the window ($inside)" eq "$inside" 4
		expect "flight_recorder records $(jq .rec.records <<<"$res") < $((nl + nk))" \
			ge "$(jq .rec.records <<<"$res")" $((nl + nk))
	fi
fi
report recorder_anomaly_window

# ----------------------------------------------------------------- replay --
# anomalies of instance $2 in file $1: [{step_start_ns, kind, chart}]
anomalies() {
	jq -c -n -R --arg i "$2" '[inputs | fromjson? | select(.type == "anomaly" and .instance == $i)
		| {step_start_ns, kind, chart}]' "$1"
}
# replay_steps NAME FILE: --replay FILE, output $T/NAME.jsonl, sets RE_ST (diag_status)
replay_steps() {
	local rc=0
	timeout 60 "$AGENT" --replay "$2" -o "$T/$1.jsonl" 2>"$T/$1.err" || rc=$?
	expect "replay of $2 exit $rc: $(tail -n 2 "$T/$1.err" | tr '\n' '|')" [ "$rc" = 0 ]
	RE_ST=$(jq -c -n -R '[inputs | fromjson? | select(.type == "diag_status")][0]' "$T/$1.jsonl")
}
_why=()
if [ -n "$ok" ]; then
	live=$T/diag.steps.jsonl
	jq -c 'select(.type == "step" or .type == "stats")' "$AGENT_OUT" >"$live"
	replay_steps re_live "$live"
	nstep=$(jq -n -R '[inputs | fromjson? | select(.type == "step")] | length' "$live")
	nother=$(jq -n -R '[inputs | fromjson? | select(.type != "step")] | length' "$live")
	expect "diag_status $RE_ST: want ok, steps $nstep, other_lines $nother, bad_lines 0" \
		jqe --argjson n "$nstep" --argjson o "$nother" \
		'.ok and .steps == $n and .other_lines == $o and .bad_lines == 0' <<<"$RE_ST"
	re=$(anomalies "$T/re_live.jsonl" "$INST")
	lv=$(anomalies "$AGENT_OUT" "$INST")
	expect "replayed anomalies $re, live ones $lv" [ "$re" = "$lv" ]
	expect "no live anomaly to compare with" [ "$(jq length <<<"$lv")" = 1 ]
else
	fail_because "no live run (diag_live_steps failed)"
fi
report diag_replay_steps

# 200 prefills of 2 s +-1.5%, longest gap 2.4 ms +-40%; step 150 (line 152
# of the file) +20 ms in one gap; line 51 is not JSON, line 102 has no dur_ns
_why=()
awk 'BEGIN {
	srand(7); t = 1000000000
	for (i = 0; i < 200; i++) {
		if (i == 50) print "{not json"
		if (i == 100) print "{\"type\":\"step\",\"instance\":\"gapsyn\",\"phase\":\"prefill\"}"
		d = int(2e9 * (1 + 0.03 * (rand() - 0.5))); g = int(2.4e6 * (1 + 0.8 * (rand() - 0.5)))
		if (i == 150) { d += 20000000; g = 20000000; start = t }
		printf "{\"type\":\"step\",\"instance\":\"gapsyn\",\"start_ns\":%.0f,\"dur_ns\":%.0f,", t, d
		printf "\"phase\":\"prefill\",\"tokens\":8192,\"batch_size\":1,\"kv_tokens\":8192,"
		printf "\"gpu_busy_ns\":%.0f,\"idle_ns\":%.0f,\"idle_gaps\":4,\"idle_max_ns\":%.0f}\n", d - 3 * g, 3 * g, g
		t += d + 100000
	}
	printf "%.0f", start > "/dev/stderr"
}' >"$T/gap.jsonl" 2>"$T/gap.start"
replay_steps re_gap "$T/gap.jsonl"
expect "diag_status $RE_ST: want ok, steps 200, bad_lines 2" \
	jqe '.ok and .steps == 200 and .bad_lines == 2 and .anomalies == 1' <<<"$RE_ST"
want="[{\"step_start_ns\":$(cat "$T/gap.start"),\"kind\":\"host_stall\",\"chart\":\"gap\"}]"
got=$(anomalies "$T/re_gap.jsonl" gapsyn)
expect "anomalies $got, want $want" [ "$got" = "$want" ]
for l in 51 102; do
	expect "line $l not named in the replay's errors: $(head -c 300 "$T/re_gap.err")" \
		grep -q "line $l:" "$T/re_gap.err"
done
sed 's/,"idle_max_ns":[0-9]*//' "$T/gap.jsonl" >"$T/nogap.jsonl"
replay_steps re_nogap "$T/nogap.jsonl"
expect "without idle_max_ns: $(anomalies "$T/re_nogap.jsonl" gapsyn), want none" \
	[ "$(anomalies "$T/re_nogap.jsonl" gapsyn)" = "[]" ]
report diag_replay_gap

# 1001 steps of phase PH: batch 64, every 10th 62 or 56 (5 ms per request
# missing over 20 ms, +-1%); the last a 62 that took 1.5x. Prints its start.
waitsyn() {
	awk -v ph="$1" 'BEGIN {
		srand(11); t = 1000000000
		for (i = 0; i <= 1000; i++) {
			m = (i % 10 != 9) ? 0 : (i % 20 == 9) ? 2 : 8; f = 1
			if (i == 1000) { m = 2; f = 1.5; start = t }
			d = int((20e6 + 5e6 * m) * (1 + 0.02 * (rand() - 0.5)) * f)
			printf "{\"type\":\"step\",\"instance\":\"waitsyn\",\"start_ns\":%.0f,\"dur_ns\":%.0f,", t, d
			printf "\"phase\":\"%s\",\"tokens\":%d,\"batch_size\":%d,\"kv_tokens\":%d}\n", ph, 64 - m, 64 - m, (64 - m) * 300
			t += d + 100000
		}
		printf "%.0f", start > "/dev/stderr"
	}'
}
_why=()
waitsyn unknown >"$T/wait.jsonl" 2>"$T/wait.start"
replay_steps re_wait "$T/wait.jsonl"
expect "diag_status $RE_ST: want ok, steps 1001, waiting 101, anomalies 1" \
	jqe '.ok and .steps == 1001 and .waiting == 101 and .anomalies == 1' <<<"$RE_ST"
got=$(jq -c -n -R '[inputs | fromjson? | select(.type == "anomaly") | {step_start_ns, phase}]' \
	"$T/re_wait.jsonl")
want="[{\"step_start_ns\":$(cat "$T/wait.start"),\"phase\":\"unknown\"}]"
expect "anomalies $got, want $want" [ "$got" = "$want" ]
waitsyn decode >"$T/wait_dec.jsonl" 2>/dev/null
replay_steps re_wait_dec "$T/wait_dec.jsonl"
expect "given as decode: diag_status $RE_ST, want waiting 0" jqe '.ok and .waiting == 0' <<<"$RE_ST"
report diag_replay_waiting

# -------------------------------------------------------------------- net --
_why=()
NN=20
RUN_ENV="RANK=9 LOCAL_RANK=2" ROUNDS=$NN run net -n "$NN" -s 1000 -N 8000
if [ -n "$OK" ]; then
	steps=$(steps_of "$WPID")
	expect "$(jq length <<<"$steps") steps, want $NN" eq "$(jq length <<<"$steps")" "$NN"
	bad=$(jq -c '[ to_entries[] | .key as $i | .value
		| (if .net_bytes != 2 * 8000 * (1 + $i % 4) then "step \($i): net_bytes \(.net_bytes)" else empty end),
		  (if .rank != 2 then "step \($i): rank \(.rank), want LOCAL_RANK 2" else empty end) ] | .[:5]' \
		<<<"$steps")
	expect "net_bytes (want 2 x 8000 x (1 + i % 4)) or rank: $bad" [ "$bad" = "[]" ]
	st=$(jqo '[.[] | select(.type == "stats")][-1] | {e: .bpf_events.net_io, d: .bpf_drops.net_io}')
	expect "BPF net_io records/drops $st: want some, no drop" jqe '.e > 0 and .d == 0' <<<"$st"
fi
report diag_live_net

# -------------------------------------------------------------- straggler --
_why=()
SINST=it-strag-$$
ssock=$T/strag.d/shim.sock
mkdir -p "$T/strag.d"
declare -a SPID SWP
for r in 0 1; do
	bg_start "$T/strag$r.work" env INFERTRACE_INSTANCE="$SINST" INFERTRACE_RANK=$r \
		INFERTRACE_SHIM_SOCKET="$ssock" "$GPU_LIVE" -t 1 -n "$STEPS" -s $((r ? STALL : 1000)) -P 60 \
		-w "$T/strag.go" -e "$T/strag.exit" -m sentinel
	SWP[r]=$BG_PID
done
sok=
if ! wait_line "$T/strag0.work" 10 || ! wait_line "$T/strag1.work" 10; then
	fail_because "gpu_live printed nothing: $(head -c 300 "$T/strag0.work.err" "$T/strag1.work.err")"
else
	mono=$(head -n 1 "$T/strag0.work" | jq -r .mono_ns)
	real0=$EPOCHREALTIME
	for r in 0 1; do SPID[r]=$(head -n 1 "$T/strag$r.work" | jq -r .pid); done
	# --detect straggler=2: a step twice its peer's. The ranks here are two
	# processes on a 2-CPU machine, not a collective: their 5 ms steps differ
	# by up to 60% from scheduling alone, which the default 15% would name
	if ! agent_start strag -i 0.25 --pid "${SPID[0]}" --pid "${SPID[1]}" --shim-socket "$ssock" \
		--detect straggler=2; then
		fail_because "agent did not start: $(agent_tail)"
	elif ! cuda_attached "${SPID[0]}" 10 || ! cuda_attached "${SPID[1]}" 10; then
		fail_because "no attach record for both ranks"
	elif ! wait_record ".type == \"shim_status\" and .pid == ${SPID[0]}" 10 ||
		! wait_record ".type == \"shim_status\" and .pid == ${SPID[1]}" 10; then
		fail_because "no shim_status for both ranks: $(agent_tail)"
	else
		# T0, on the workloads' clock, 1 s from now: both start round 0 then
		el=$(awk -v a="$real0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", (b - a) * 1e9 }')
		echo $((mono + el + 1000000000)) >"$T/strag.go.tmp" && mv "$T/strag.go.tmp" "$T/strag.go"
		wait_steps $((2 * STEPS)) '.instance == $i' --arg i "$SINST"
		sleep 0.5
		sok=1
	fi
fi
touch "$T/strag.exit"
for r in 0 1; do wait_exit "${SWP[r]}" 30 || fail_because "gpu_live rank $r did not finish"; done
agent_stop INT || fail_because "agent did not exit on SIGINT"
if [ -n "$sok" ]; then
	for r in 0 1; do
		n=$(jqo --arg i "$SINST" --argjson r $r '[.[] | select(.type == "step" and .instance == $i and .rank == $r)] | length')
		expect "rank $r: $n steps, want $STEPS" eq "$n" "$STEPS"
	done
	st1=$(jqo --arg i "$SINST" '[.[] | select(.type == "step" and .instance == $i and .rank == 1)] | sort_by(.start_ns)')
	s34=$(jq --argjson s "$STALL" '.[$s].start_ns' <<<"$st1")
	an=$(anomalies_of "$SINST")
	sa=$(jq -c '[.[] | select(.kind == "straggler")]' <<<"$an")
	expect "$(jq length <<<"$sa") straggler anomalies, want 1: $(jq -c '[.[] | {rank, step_start_ns, chart}]' <<<"$sa")" \
		eq "$(jq length <<<"$sa")" 1
	p34=$(jq -c --argjson s "$STALL" '.[$s] | [.pid, .tid]' <<<"$st1")
	expect "the straggler is not rank 1's step $STALL (start $s34, pid/tid $p34): $(jq -c '.[0] | {rank, step_start_ns, chart, pid, tid}' <<<"$sa")" \
		jqe --argjson s "$s34" --argjson p "$p34" '.[0].rank == 1 and .[0].step_start_ns == $s and .[0].chart == "peers"
			and [.[0].pid, .[0].tid] == $p' <<<"$sa"
	expect "no suspect naming rank 1's step time vs its peer: $(jq -c '.[0].suspects' <<<"$sa")" \
		jqe '.[0].suspects[0].what == "rank" and (.[0].suspects[0].evidence | test("^rank 1 step time"))' <<<"$sa"
	st0=$(jqo --arg i "$SINST" '[.[] | select(.type == "step" and .instance == $i and .rank == 0) | .start_ns] | sort')
	r0=$(jq -c --argjson st "$st0" '[.[] | select(.rank == 0) | {round: (.step_start_ns as $s | $st | index($s)), kind, chart, dur_ns, expected_ns, why: .suspects[0].evidence}]' <<<"$an")
	expect "rank 0 blamed for rank 1's stall in round $STALL: $r0" \
		jqe --argjson s "$STALL" '[.[] | select(.round == $s)] | length == 0' <<<"$r0"
	[ "$r0" = "[]" ] || echo "note: rank 0's own slow steps (scheduling on this machine): $r0" >&2
	ds=$(jqo '[.[] | select(.type == "stats")][-1].diag')
	expect "stats.diag $ds: want 80 steps, straggler 1" \
		jqe '.steps == 80 and .anomalies_by_kind.straggler == 1' <<<"$ds"
fi
report diag_live_straggler

# ------------------------------------------------------------- contention --
_why=()
ROUNDS=$STEPS run contention -n "$STEPS" -s "$STALL" -C
if [ -n "$OK" ]; then
	hog=$(jq -r 'select(.hog) | .hog' "$T/contention.work")
	steps=$(steps_of "$WPID")
	expect "$(jq length <<<"$steps") steps, want $STEPS" eq "$(jq length <<<"$steps")" "$STEPS"
	stalled_anomaly "$steps"
	expect "kind $(jq -r '.[0].kind' <<<"$an") (chart $(jq -r '.[0].chart' <<<"$an")), want cpu_contention" \
		jqe '.[0].kind == "cpu_contention"' <<<"$an"
	expect "no runq suspect of >= 5 ms preempted by the spinning process $hog: $(jq -c '.[0].suspects' <<<"$an")" \
		jqe --arg h "preempted by pid $hog" '[.[0].suspects[] | select(.what == "runq" and .value >= 5000000
			and (.evidence | contains($h)))] | length == 1' <<<"$an"
	expect "no GPU idle suspect: $(jq -c '.[0].suspects' <<<"$an")" \
		jqe '[.[0].suspects[] | select(.what == "gpu_idle")] | length == 1' <<<"$an"
fi
report diag_live_contention

# the same recording replayed (as the live instance): steps cut again, with
# the CPU side they had live
_why=()
if [ -n "$OK" ]; then
	jq -c 'select(.type != "step" and .type != "anomaly")' "$AGENT_OUT" >"$T/cont.rec.jsonl"
	bd='[.[] | select(.type == "step" and .pid == $p) | {start_ns, dur_ns, offcpu_ns, runq_ns,
		slow_syscalls, slow_syscall_ns, preempt_pid}] | sort_by(.start_ns)'
	want_bd=$(jqo --argjson p "$WPID" "$bd")
	rc=0
	timeout 60 "$AGENT" --replay "$T/cont.rec.jsonl" --instance "$INST" -o "$T/re_cont.jsonl" 2>"$T/re_cont.err" || rc=$?
	expect "replay exit $rc: $(tail -n 2 "$T/re_cont.err" | tr '\n' '|')" [ "$rc" = 0 ]
	got_bd=$(jq -c -n -R --argjson p "$WPID" "[inputs | fromjson?] | $bd" "$T/re_cont.jsonl")
	expect "replayed breakdown differs from live: live $(jq -c '.[34]' <<<"$want_bd"), replayed $(jq -c '.[34]' <<<"$got_bd")" \
		[ "$want_bd" = "$got_bd" ]
	expect "$(jq length <<<"$got_bd") replayed steps, want $STEPS" eq "$(jq length <<<"$got_bd")" "$STEPS"
	expect "no run-queue wait in the stalled step live: $(jq -c ".[$STALL]" <<<"$want_bd")" \
		jqe --argjson s "$STALL" '.[$s].runq_ns >= 5000000 and .[$s].preempt_pid > 0' <<<"$want_bd"
	rst=$(jq -c -n -R '[inputs | fromjson? | select(.type == "replay_status")][0]' "$T/re_cont.jsonl")
	nrec=$(jq -n -R --argjson p "$WPID" '[inputs | fromjson? | select((.type == "offcpu" or .type == "syscall") and .pid == $p)] | length' "$T/cont.rec.jsonl")
	expect "replay_status $rst: want cpu_events >= $nrec (the workload's offcpu and syscall records)" \
		jqe --argjson n "$nrec" '.cpu_events >= $n and $n > 0' <<<"$rst"
	want=$(jq -c '[.[] | {step_start_ns, kind, chart}]' <<<"$an")
	got=$(anomalies "$T/re_cont.jsonl" "$INST")
	expect "replayed anomalies $got, want the live one $want" [ "$got" = "$want" ]
	# without the offcpu records: no run-queue wait, not named contention
	jq -c 'select(.type != "offcpu")' "$T/cont.rec.jsonl" >"$T/cont.nooff.jsonl"
	rc=0
	timeout 60 "$AGENT" --replay "$T/cont.nooff.jsonl" --instance "$INST" -o "$T/re_nooff.jsonl" 2>"$T/re_nooff.err" || rc=$?
	expect "replay without offcpu records exit $rc: $(tail -n 2 "$T/re_nooff.err" | tr '\n' '|')" [ "$rc" = 0 ]
	got=$(jq -c -n -R --argjson p "$WPID" "[inputs | fromjson?] | $bd | .[$STALL]" "$T/re_nooff.jsonl")
	expect "without offcpu records, the stalled step $got has a run-queue wait (or is missing)" \
		jqe '. != null and (.runq_ns // 0) == 0 and (.preempt_pid // 0) == 0' <<<"$got"
	got=$(anomalies "$T/re_nooff.jsonl" "$INST")
	expect "without offcpu records still named cpu_contention: $got" \
		jqe '[.[] | select(.kind == "cpu_contention")] | length == 0' <<<"$got"
fi
report diag_replay_cpu

# ------------------------------------------------------------------- nvtx --
# 30 rounds marked with NVTX as CUPTI reports it (gpu_live -M): each a
# push/pop "execute_model tokens=<100+r> batch=<1+r%4>", every 5th also
# inside a start/end range "gl_io"; round 12 loads GPU code (gpu_live -J:
# cuModuleLoadData and -Ex of the stub libcuda, which return at once: each
# is recorded however short): its step, and only it, counts them
_why=()
NV=30 NVJ=12
ROUNDS=$NV run nvtx -n "$NV" -s 1000 -M -J "$NVJ"
if [ -n "$OK" ]; then
	steps=$(steps_of "$WPID")
	expect "$(jq length <<<"$steps") steps, want $NV" eq "$(jq length <<<"$steps")" "$NV"
	bad=$(jq -c --argjson tid "$TID" '
		[ to_entries[] | .key as $i | .value
		  | (if .source != "marker" then "step \($i): source \(.source)" else empty end),
		    (if .tokens != 100 + $i or .batch_size != 1 + $i % 4 then "step \($i): tokens \(.tokens) batch \(.batch_size)" else empty end),
		    (if .kernels != 5 then "step \($i): \(.kernels) kernels" else empty end),
		    (if .tid != $tid then "step \($i): tid \(.tid)" else empty end)
		] | .[:5]' <<<"$steps")
	expect "steps: $bad" [ "$bad" = "[]" ]
	cl=$(jqo --argjson p "$WPID" '[.[] | select(.type == "cuda_code_load" and .pid == $p)]')
	expect "cuda_code_load records of the workload: $(jq -c '[.[] | {tid, api, dur_ns, ts_ns}]' <<<"$cl"), want cuModuleLoadData and -Ex, on its thread" \
		jqe --argjson tid "$TID" '([.[].api] | sort) == ["cuModuleLoadData", "cuModuleLoadDataEx"] and all(.tid == $tid and .dur_ns > 0)' <<<"$cl"
	bad=$(jq -c --argjson j "$NVJ" --argjson cl "$cl" '
		[ to_entries[] | .key as $i | .value
		  | (if $i == $j and (.code_loads != 2 or .code_load_ns != ($cl | map(.dur_ns) | add)) then "step \($i): code_loads \(.code_loads) code_load_ns \(.code_load_ns)" else empty end),
		    (if $i != $j and .code_loads != null then "step \($i): code_loads \(.code_loads)" else empty end)
		] | .[:5]' <<<"$steps")
	expect "code loads in the steps (round $NVJ loads GPU code): $bad" [ "$bad" = "[]" ]
	nv=$(jqo '[.[] | select(.type == "stats")][-1].gpu.nvtx')
	expect "gpu.nvtx $nv: want 36 ranges (30 push/pop, 6 start/end), none unpaired or lost" \
		jqe '.ranges == 36 and .unpaired == 0 and .overflow == 0' <<<"$nv"
fi
report diag_live_nvtx

# ---------------------------------------------------------- summary reset --
# two workloads, one after the other, under one agent with --summary: A (40
# steps, none slow) runs and ends, `agentctl summary --reset` prints its
# digest and starts the agent's anew; then B (40 steps, step 34 stalled).
# The reset's text is A's alone, the exit's B's alone, each part of the run
# in exactly one of them. At the end `agentctl anomalies` gives B's stall as
# the file sink got it, and as text; two followers (--follow) started after
# the reset printed it as it came
_why=()
csock=$T/rs.d/ctl.sock
# A's name as a workload may choose it: a quote, a backslash, UTF-8, a newline
PINST[a]=$'it-rs"a\\\xc3\xa9\n-'$$ PINST[b]=it-rsb-$$
rok= FJ= FT=
# rs_steps W: W's step records so far
rs_steps() { jqo --argjson p "${PPIDS[$1]}" '[.[] | select(.type == "step" and .pid == $p)] | length'; }
if pair_start rs rsreset "-n $STEPS -s 1000" "-n $STEPS -s $STALL" --summary --control-socket "$csock" \
	--metrics-instances 1; then
	touch "$T/rsa.go"
	if ! wait_steps "$STEPS" '.pid == $p' --argjson p "${PPIDS[a]}"; then
		fail_because "A: $(rs_steps a) steps, want $STEPS"
	else
		touch "$T/rsa.exit"
		wait_exit "${PWP[a]}" 30 || fail_because "gpu_live A did not finish"
		sleep 1 # A's threads read gone, their last counts taken
		"$BUILD/agentctl" --socket "$csock" summary --reset >"$T/rs.reset" 2>"$T/rs.reset.err" ||
			fail_because "agentctl summary --reset: exit $?: $(head -c 300 "$T/rs.reset.err")"
		# followers of the anomalies, as records and as text, from before B
		"$BUILD/agentctl" --socket "$csock" anomalies --follow --json >"$T/rs.fj" 2>"$T/rs.fj.err" &
		FJ=$!
		"$BUILD/agentctl" --socket "$csock" anomalies --follow >"$T/rs.ft" 2>"$T/rs.ft.err" &
		FT=$!
		sleep 0.3
		touch "$T/rsb.go"
		if wait_steps "$STEPS" '.pid == $p' --argjson p "${PPIDS[b]}"; then
			sleep 0.5
			curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics" >"$T/rs.metrics"
			rok=1
			# the last anomaly records, all and B's, as records and as text
			ac() { "$BUILD/agentctl" --socket "$csock" anomalies "$@" 2>>"$T/rs.an.err"; }
			wait_record ".type == \"anomaly\"" 10 || fail_because "no anomaly record"
			{ ac --json --last 256 >"$T/rs.an.jsonl" && ac --last 256 >"$T/rs.an.txt" &&
				ac --json --instance "${PINST[b]}" --last 1 >"$T/rs.anb.jsonl" &&
				ac --instance "${PINST[b]}" --last 1 >"$T/rs.anb.txt" &&
				ac --instance "nosuch-$$" >"$T/rs.ann.txt"; } ||
				fail_because "agentctl anomalies: exit $?: $(head -c 300 "$T/rs.an.err")"
			for ((i = 0; i < 100; i++)); do
				[ -s "$T/rs.fj" ] && grep -q host_stall "$T/rs.ft" && break
				sleep 0.1
			done
		else
			fail_because "B: $(rs_steps b) steps, want $STEPS"
		fi
	fi
fi
# the followers end on Ctrl-C, with status 0
for f in FJ FT; do
	[ -n "${!f}" ] || continue
	kill -INT "${!f}" 2>/dev/null
	wait "${!f}"
	rc=$?
	expect "agentctl anomalies --follow ($f): exit $rc on SIGINT, want 0: $(head -c 300 "$T/rs.fj.err" "$T/rs.ft.err")" [ "$rc" = 0 ]
done
pair_end rs
if [ -n "$rok" ]; then
	# the reset's text: A's 40 steps, none flagged; its CUDA calls; its GPU records
	summary_has "$T/rs.reset" "$STEPS" 0 0 0
	expect "agentctl summary --reset did not say what it covered: $(cat "$T/rs.reset.err")" \
		grep -q "^agentctl: that covered [0-9.]* s; the agent's digest starts anew$" "$T/rs.reset.err"
	# the exit's text: from the reset on, B's 40 steps, its one stall
	expect "exit summary's header does not say it runs from the reset: $(grep '^== infertrace summary' "$AGENT_ERR")" \
		grep -qE "^== infertrace summary: [0-9.]+ s \(from [0-9.]+ s after the start: the last reset\), [0-9]+ records ==$" "$AGENT_ERR"
	summary_has "$AGENT_ERR" "$STEPS" 1 1 0 ': host_stall 1$'
	jq -c --argjson p "${PPIDS[b]}" --arg i "${PINST[b]}" \
		'select((.type == "step" and .pid == $p) or (.type == "anomaly" and .instance == $i))' \
		"$AGENT_OUT" >"$T/rs.b.jsonl"
	got=$(python3 "$IT_ROOT/tests/integration/steps_check.py" "$T/rs.b.jsonl" "$AGENT_ERR" 2>&1)
	expect "the exit's steps are not B's records (steps_check.py): $got" [ "${got%% *}" = ok ]
	calls() { grep -cE "^ +$2 +[0-9]+ +[^ ]+ +cu[A-Za-z_]+ +[1-9]" "$1"; }
	expect "CUDA calls: the reset's text has A $(calls "$T/rs.reset" "${PPIDS[a]}") and B $(calls "$T/rs.reset" "${PPIDS[b]}") lines, the exit's A $(calls "$AGENT_ERR" "${PPIDS[a]}") and B $(calls "$AGENT_ERR" "${PPIDS[b]}"): want A then B only" \
		eval '[ "$(calls "$T/rs.reset" "${PPIDS[a]}")" -ge 1 ] && [ "$(calls "$AGENT_ERR" "${PPIDS[b]}")" -ge 1 ] && [ "$(calls "$AGENT_ERR" "${PPIDS[a]}")" = 0 ]'
	joined() { sed -n 's/^  records  *[0-9]*: .* \([0-9][0-9]*\) joined to their launch$/\1/p' "$1"; }
	j1=$(joined "$T/rs.reset") j2=$(joined "$AGENT_ERR")
	jt=$(jqo '[.[] | select(.type == "stats")][-1].gpu.joined')
	expect "GPU records joined: $j1 in the reset's text + $j2 at exit, want $jt (stats), each >= $((5 * STEPS))" \
		eval '[ $((${j1:-0} + ${j2:-0})) = "$jt" ] && [ "${j1:-0}" -ge $((5 * STEPS)) ] && [ "${j2:-0}" -ge $((5 * STEPS)) ]'
	ds=$(jqo '[.[] | select(.type == "stats")][-1] | {steps: .diag.steps, summary: .control.by_cmd.summary, anomalies: .control.by_cmd.anomalies}')
	expect "stats $ds: want 80 steps (records and stats are not reset), 1 summary, anomalies 5 + 2 followers' first + one a second each" \
		jqe '.steps == 80 and .summary == 1 and .anomalies >= 9' <<<"$ds"
	# agentctl anomalies: B's one anomaly (A had none), byte for byte the
	# file's anomaly-class records; the text from the records
	fa=$(python3 -c 'import json, sys
sys.stdout.buffer.write(b"".join(l for l in open(sys.argv[1], "rb")
	if json.loads(l).get("type") in ("anomaly", "level_shift")))' "$AGENT_OUT")
	expect "agentctl anomalies --json: [$(head -c 400 "$T/rs.an.jsonl")], want the file's anomaly records byte for byte: [$(head -c 400 <<<"$fa")]" \
		eval '[ "$(cat "$T/rs.an.jsonl")" = "$fa" ] && [ "$(wc -l <"$T/rs.an.jsonl")" = 1 ]'
	expect "agentctl anomalies: want B's host stall, run 1: $(head -c 300 "$T/rs.an.jsonl")" \
		jqe --arg i "${PINST[b]}" --argjson p "${PPIDS[b]}" '.instance == $i and .pid == $p and .kind == "host_stall" and .run == 1' "$T/rs.an.jsonl"
	expect "agentctl anomalies --instance B --last 1: not the same record" cmp -s "$T/rs.an.jsonl" "$T/rs.anb.jsonl"
	got=$(python3 "$IT_ROOT/tests/integration/anomalies_check.py" "$T/rs.an.jsonl" "$T/rs.an.txt" 2>&1)
	expect "agentctl anomalies' text: $got" [ "$got" = "ok 1" ]
	got=$(python3 "$IT_ROOT/tests/integration/anomalies_check.py" "$T/rs.anb.jsonl" "$T/rs.anb.txt" "${PINST[b]}" 2>&1)
	expect "agentctl anomalies --instance B's text: $got" [ "$got" = "ok 1" ]
	expect "agentctl anomalies --instance nosuch: $(cat "$T/rs.ann.txt")" [ "$(cat "$T/rs.ann.txt")" = \
		"no anomaly records of nosuch-$$ among those kept (the agent keeps the last 256; 1 since it started)" ]
	# the followers, from before B: its anomaly as it came, nothing else
	expect "agentctl anomalies --follow --json: [$(head -c 300 "$T/rs.fj")], want the file's anomaly records" \
		eval '[ "$(cat "$T/rs.fj")" = "$fa" ]'
	got=$(python3 "$IT_ROOT/tests/integration/anomalies_check.py" --follow "$T/rs.fj" "$T/rs.ft" 2>&1)
	expect "agentctl anomalies --follow's text: $got" [ "$got" = "ok 1" ]
	expect "agentctl anomalies --follow: stderr $(cat "$T/rs.ft.err" "$T/rs.fj.err")" \
		eval '[ "$(cat "$T/rs.ft.err")" = "agentctl: following: new records as they come (Ctrl-C ends)" ] && [ ! -s "$T/rs.fj.err" ]'
	# /metrics with --metrics-instances 1: A's steps under its name (as a label
	# value: the quote, backslash, UTF-8 bytes and newline as _), B's as
	# "_other" (and not reset: Prometheus counters only grow)
	sc=$(grep '^infertrace_step_duration_seconds_count{' "$T/rs.metrics" | sort)
	expect "step histogram series: $(tr '\n' '|' <<<"$sc")" [ "$sc" = "infertrace_step_duration_seconds_count{phase=\"decode\",infertrace_instance=\"_other\"} $STEPS
infertrace_step_duration_seconds_count{phase=\"decode\",infertrace_instance=\"it-rs_a____-$$\"} $STEPS" ]
	# the anomalies per instance: B's stall under "_other", none under A's name;
	# their sum by kind the node's
	ia=$(grep -E '^infertrace_instance_anomal' "$T/rs.metrics" | grep -vE '} 0$' | sort)
	expect "anomalies per instance: [$(tr '\n' '|' <<<"$ia")], want _other's host_stall and episode alone" \
		[ "$ia" = 'infertrace_instance_anomalies_total{infertrace_instance="_other",kind="host_stall"} 1
infertrace_instance_anomaly_episodes_total{infertrace_instance="_other"} 1' ]
	na=$(grep -cE "^infertrace_instance_anomalies_total\{infertrace_instance=\"it-rs_a____-$$\",kind=\"[a-z_]+\"\} 0$" "$T/rs.metrics")
	expect "A's anomaly series: $na of 6 kinds at 0" [ "$na" = 6 ]
	for k in host_stall cpu_contention gpu_slow communication straggler regression; do
		nk=$(awk -v s="infertrace_anomalies_total{kind=\"$k\"}" '$1 == s {print $2}' "$T/rs.metrics")
		ik=$(awk -v k="kind=\"$k\"}" 'index($1, "infertrace_instance_anomalies_total{") == 1 && index($1, k) {n += $2} END {print n + 0}' "$T/rs.metrics")
		expect "kind $k: the instances' $ik, the node's $nk" [ "$ik" = "${nk:-x}" ]
	done
	lint=$(promtool check metrics <"$T/rs.metrics" 2>&1)
	expect "promtool check metrics: $(head -n 2 <<<"$lint" | tr '\n' ' ')" [ -z "$lint" ]
fi
report diag_live_summary_reset

# --------------------------------------------------------- metrics idle --
# --metrics-instances 1 --metrics-instance-idle 3 and two workloads, one after
# the other, each 100 ms a step (-P 100; -F: the GPU records come every
# second, so steps are cut as they run): while A runs its series is the one
# there; 3 s after A's last step it has left /metrics; B's steps then take
# the free slot under B's own name rather than "_other"
_why=()
MI=60
PINST[a]=it-mia-$$ PINST[b]=it-mib-$$
# mi_scrape FILE: /metrics into FILE; mi_series FILE: its step series' counts; mi_val FILE NAME
mi_scrape() { curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics" >"$1"; }
mi_series() { grep '^infertrace_step_duration_seconds_count{' "$1" | sort; }
mi_val() { awk -v n="$2" '$1 == n {print $2}' "$1"; }
mok=
if pair_start mi miidle "-n $MI -s 1000 -P 100 -F" "-n $MI -s 1000 -P 100 -F" \
	--metrics-instances 1 --metrics-instance-idle 3; then
	touch "$T/mia.go"
	# while A runs (10 of its 60 steps written): its series
	if ! wait_steps 10 '.pid == $p' --argjson p "${PPIDS[a]}"; then
		fail_because "A: no 10 steps"
	else
		mi_scrape "$T/mi.1"
		wait_steps "$MI" '.pid == $p' --argjson p "${PPIDS[a]}" || fail_because "A: no $MI steps"
		touch "$T/mia.exit"
		# A's series leaves 3 s (and an interval) after its last step
		for ((i = 0; i < 100; i++)); do
			mi_scrape "$T/mi.2"
			grep -q "infertrace_instance=\"${PINST[a]}\"" "$T/mi.2" || break
			sleep 0.1
		done
		touch "$T/mib.go"
		if wait_steps 10 '.pid == $p' --argjson p "${PPIDS[b]}"; then
			mi_scrape "$T/mi.3"
			mok=1
		else
			fail_because "B: no 10 steps"
		fi
	fi
fi
pair_end mi
if [ -n "$mok" ]; then
	s1=$(mi_series "$T/mi.1")
	n1=$(sed -n "s/^infertrace_step_duration_seconds_count{phase=\"decode\",infertrace_instance=\"${PINST[a]}\"} //p" <<<"$s1")
	expect "while A ran: step series [$(tr '\n' '|' <<<"$s1")], want A's alone (decode, 10 to $MI steps)" \
		eval '[ "$(wc -l <<<"$s1")" = 1 ] && [ "${n1:-0}" -ge 10 ] && [ "$n1" -le "$MI" ]'
	s2=$(mi_series "$T/mi.2")
	expect "after A: step series [$(tr '\n' '|' <<<"$s2")], want none" [ -z "$s2" ]
	expect "after A: infertrace_step_series_expired_total $(mi_val "$T/mi.2" infertrace_step_series_expired_total), want 1" \
		[ "$(mi_val "$T/mi.2" infertrace_step_series_expired_total)" = 1 ]
	expect "after A: infertrace_steps_total $(mi_val "$T/mi.2" infertrace_steps_total), want $MI" \
		[ "$(mi_val "$T/mi.2" infertrace_steps_total)" = "$MI" ]
	s3=$(mi_series "$T/mi.3")
	n3=$(sed -n "s/^infertrace_step_duration_seconds_count{phase=\"decode\",infertrace_instance=\"${PINST[b]}\"} //p" <<<"$s3")
	st3=$(mi_val "$T/mi.3" infertrace_steps_total)
	expect "while B ran: step series [$(tr '\n' '|' <<<"$s3")], want B's own (not _other), 10 or more" \
		eval '[ "$(wc -l <<<"$s3")" = 1 ] && [ "${n3:-0}" -ge 10 ]'
	expect "while B ran: infertrace_steps_total $st3, want B's series ${n3:-?} + A's $MI" \
		[ "${st3:-x}" = "$((${n3:-0} + MI))" ]
	expect "while B ran: infertrace_step_series_expired_total $(mi_val "$T/mi.3" infertrace_step_series_expired_total), want 1" \
		[ "$(mi_val "$T/mi.3" infertrace_step_series_expired_total)" = 1 ]
	for f in 1 2 3; do
		lint=$(promtool check metrics <"$T/mi.$f" 2>&1)
		expect "promtool check metrics (scrape $f): $(head -n 2 <<<"$lint" | tr '\n' ' ')" [ -z "$lint" ]
	done
	ex=$(jqo '[.[] | select(.type == "stats")][-1].diag.step_series_expired')
	expect "stats.diag.step_series_expired $ex at the end, want 1 or 2 (B's, if it left before the stop)" \
		eval '[ "$ex" = 1 ] || [ "$ex" = 2 ]'
fi
report diag_live_metrics_idle

# ---------------------------------------------------------- summary every --
# 60 rounds 100 ms apart (gpu_live -P: 6 s of steps; -F: the GPU records come
# every second) under --summary-every 1: the digest on stderr every second,
# each its own period's
_why=()
SE=60
AGENT_ARGS="--summary-every 1" ROUNDS=$SE run sumev -n "$SE" -s 1000 -P 100 -F
if [ -n "$OK" ]; then
	nd=$(grep -c '^== infertrace summary: ' "$AGENT_ERR")
	# each digest's steps (its "none" line: 0)
	per=$(awk '/^Steps and anomalies/ {s = 1; next}
		s && /^  steps / {print $2 + 0; s = 0} s && /^  none/ {print 0; s = 0}' "$AGENT_ERR" | tr '\n' ' ')
	sum=$(awk '{for (i = 1; i <= NF; i++) s += $i} END {print s + 0}' <<<"$per")
	nz=$(awk '{for (i = 1; i <= NF; i++) n += ($i > 0)} END {print n + 0}' <<<"$per")
	ds=$(jqo '[.[] | select(.type == "stats")][-1].diag.steps')
	expect "$nd digests with steps [$per], want >= 4 (one a second, and the exit's), each Steps section once" \
		eval '[ "$nd" -ge 4 ] && [ "$(wc -w <<<"$per")" = "$nd" ]'
	expect "the digests' steps [$per] add to $sum, want $SE (the step records) = stats.diag.steps $ds, over >= 3 digests ($nz)" \
		eval '[ "$sum" = "$SE" ] && [ "$ds" = "$SE" ] && [ "$nz" -ge 3 ]'
	# every digest after the first says from when: later each time
	from=$(sed -n 's/^== infertrace summary: [0-9.]* s (from \([0-9.]*\) s after the start: the last reset), [0-9]* records ==$/\1/p' "$AGENT_ERR" | tr '\n' ' ')
	expect "digests after the first do not say from when, rising: [$from] of $nd" \
		eval '[ "$(wc -w <<<"$from")" = $((nd - 1)) ] && sort -c -g <(tr " " "\n" <<<"$from" | grep .) && [ "$(tr " " "\n" <<<"$from" | grep . | sort -u | wc -l)" = $((nd - 1)) ]'
fi
report diag_live_summary_every
