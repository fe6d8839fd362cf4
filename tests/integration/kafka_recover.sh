#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# Delivery resumes after the brokers come back, and kill -9 loses nothing
# (issue 18, findings 1 and 3). Delivery is at least once: a record the
# broker may have written before a failed report is sent again, with the
# same infertrace-id; every case compares Kafka with the file after
# dropping repeated ids, as a consumer would, and prints how many there were
# (no id may be missing: that would be a lost record). Every case checks what arrived, never how
# fast: the seconds from "broker up" to "spill empty" are printed as INFO
# lines for the report. KAFKA_RECOVER_LOOPS=N runs each case N times (a
# recovery test is looped 20 times before it is called done); one PASS or
# FAIL line per case, the failures of every round in it;
# KAFKA_RECOVER_CASES=REGEX runs only the cases it matches. A loop of 20
# takes longer than tests/run.sh gives a file (900 s): run this file itself.
#
#   kafka_recover_replay_start  every broker down when a --replay starts to
#                               produce, up 6 s later: every record arrives,
#                               in order, before --flush-timeout
#   kafka_recover_replay_mid    the broker goes down while a --replay
#                               produces, up 6 s later: the same
#   kafka_recover_live          live agent, 3 brokers: all down at start
#                               (5 s), up, all down while producing (5 s),
#                               up, then a rolling restart (one broker at a
#                               time down for 2 s): every record of
#                               --output in Kafka, in order
#   kafka_recover_kill9_drain   live agent; broker down 4 s, up, and kill -9
#                               at a random moment of the drain; a second
#                               start on the same spill: every record of
#                               both runs arrives (at least once: repeats
#                               carry the same infertrace-id and are counted)
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"

NAMES="kafka_recover_replay_start kafka_recover_replay_mid kafka_recover_live kafka_recover_kill9_drain"
# shellcheck disable=SC2086
kafka_preflight $NAMES
LOOPS=${KAFKA_RECOVER_LOOPS:-1}
DATA=${INFERTRACE_DATA:-$IT_ROOT/../shared/data}
SMALL=$DATA/kineto/tracelens_hf_qwen1.5-0.5b_h100.json.gz
BIG=$DATA/kineto/hta_ddp_v100_rank1_df_index_resolver.json.gz
# reconnect backoffs are the agent's defaults: what is tested is what ships

now() { date +%s.%N; }
# first_ok FILE PID: the time the agent logs its first delivery after an
# outage ("delivering again"), or when PID ends (then "?")
first_ok() {
	local i
	for ((i = 0; i < 900; i++)); do
		grep -q 'delivering again' "$1" 2>/dev/null && { now; return; }
		kill -0 "$2" 2>/dev/null || { echo "?"; return; }
		sleep 0.1
	done
	echo "?"
}
since() { [ "$2" = "?" ] && echo "?" || secs "$1" "$2"; }
# CLOCK_MONOTONIC-like seconds (the clock of ts_ns, without suspend)
mono() { awk '{print $1}' /proc/uptime; }
# resumed FILE UP: seconds from UP (mono) to the first stats record whose
# delivered_total grew past what it was at UP ("?" when none)
resumed() {
	jq -n -r -R --argjson up "$2" '[inputs | fromjson? | select(.type == "stats" and .kafka) |
		{t: (.ts_ns / 1e9), d: .kafka.delivered_total}] as $s |
		([$s[] | select(.t < $up) | .d] | max // 0) as $d0 |
		(first($s[] | select(.t >= $up and .d > $d0)) // null) as $r |
		if $r == null then "?" else ($r.t - $up) * 100 | round / 100 end' "$1"
}
secs() { echo "$2 - $1" | bc; }

# a live agent is drained when its last stats show an empty spill
# (wait_spill_empty, kafka_lib.sh): every record is written ahead, so
# spill_records counts what the producer holds too; queue_records also counts
# librdkafka's pending events and, with a stats record every 0.05 s and
# linger.ms 50, the previous stats record is nearly always still on its way.

# expect_delivered ERR DUMP OUT: the agent left nothing in its spill (its
# stderr ERR says so), and Kafka (dumped into DUMP) holds every line of OUT,
# repeats dropped as a consumer would, each with its record id and none
# missing; the comparison stays in $c
expect_delivered() {
	expect "records left in the spill: $(grep 'left in the spill' "$1")" \
		grep -q ' 0 left in the spill' "$1"
	kafka_dump "$2"
	c=$(DEDUP=1 kafka_compare "$2" exact "$3")
	expect_compare "$c"
	expect "a message without infertrace-id: $(jq .no_id <<<"$c")" eq "$(jq .no_id <<<"$c")" 0
	expect "record ids missing in Kafka (lost records) of runs $(jq -c .id_gaps <<<"$c")" \
		eq "$(jq '.id_gaps | length' <<<"$c")" 0
}

# replay_case NAME FILE DOWN_AT: a replay with the broker down from DOWN_AT s
# after its start ("pre": before), up 6 s later
replay_case() {
	local name=$1 file=$2 down_at=$3 pfx=$4 pid up first end c
	KTOPICS="$pfx.steps $pfx.anomalies $pfx.events $pfx.stats"
	mock_start || { fail_because "mock cluster did not start: $(head -c 300 "$T/mock.err")"; return; }
	rm -rf "$T/spill.$pfx"
	[ "$down_at" = pre ] && { mock_down || { fail_because "mock did not go down"; return; }; }
	"$AGENT" --replay "$file" --mode deep --kafka "$BROKERS" --kafka-topic-prefix "$pfx" \
		--spill-dir "$T/spill.$pfx" --kafka-queue-max 500 --flush-timeout 60 \
		-o "$T/$pfx.jsonl" 2>"$T/$pfx.err" &
	pid=$!
	_it_pids+=("$pid")
	if [ "$down_at" != pre ]; then
		sleep "$down_at"
		mock_down || { fail_because "mock did not go down"; return; }
	fi
	sleep 6
	mock_up || { fail_because "mock did not come up"; return; }
	up=$(now)
	first=$(first_ok "$T/$pfx.err" "$pid")
	wait_exit "$pid" 90 || { fail_because "agent still running 90 s after the broker came back"; kill -KILL "$pid"; return; }
	end=$(now)
	expect "agent exit $WAIT_RC: $(tail -c 300 "$T/$pfx.err")" eq "$WAIT_RC" 0
	expect_delivered "$T/$pfx.err" "$T/$pfx.dump" "$T/$pfx.jsonl"
	echo "INFO $name: $(jq .messages <<<"$c") records, $(jq .dups <<<"$c") sent twice; after the broker came back: first delivery $(since "$up" "$first") s, all delivered $(secs "$up" "$end") s (--kafka-queue-max 500)"
	mock_stop
}

# up_and_drain WHAT: every broker up, then until the agent drained (30 s at
# most); UP_MONO, UP_AT, DRAINED_AT; false when the mock did not answer
up_and_drain() {
	mock_ctl up || { fail_because "mock did not come up"; return 1; }
	UP_MONO=$(mono)
	UP_AT=$(now)
	wait_spill_empty "$AGENT_OUT" 30 ||
		fail_because "not drained 30 s after $1: spill $(last_stats "$AGENT_OUT" spill_records), producer $(last_stats "$AGENT_OUT" queue_records)"
	DRAINED_AT=$(now)
}

live_case() {
	local c k up0 end0 up1 end1 up2 end2 m0 m1 b
	local -a mr
	KTOPICS="lv.steps lv.anomalies lv.events lv.stats"
	mock_start_ctl -b 3 || { fail_because "mock cluster did not start: $(head -c 300 "$T/mock.err")"; return; }
	mock_ctl down || { fail_because "mock did not go down"; return; }
	rm -rf "$T/spill.lv"
	agent_start live --pid "$IDLE" -i 0.05 --no-net --kafka "$BROKERS" --kafka-topic-prefix lv \
		--spill-dir "$T/spill.lv" --kafka-queue-max 20 --flush-timeout 10 ||
		{ fail_because "agent did not start: $(agent_tail)"; return; }
	# 1. down before the first record, 2. down while producing
	sleep 5
	up_and_drain "the first outage" || return
	m0=$UP_MONO up0=$UP_AT end0=$DRAINED_AT
	sleep 2
	mock_ctl down || { fail_because "mock did not go down"; return; }
	sleep 5
	up_and_drain "the second outage" || return
	m1=$UP_MONO up1=$UP_AT end1=$DRAINED_AT
	# 3. a rolling restart
	for b in 1 2 3; do
		mock_ctl down "$b" || { fail_because "broker $b did not go down"; return; }
		sleep 2
		mock_ctl up "$b" || { fail_because "broker $b did not come up"; return; }
		mr[b]=$(mono)
		sleep 2
	done
	up2=$(now)
	wait_spill_empty "$AGENT_OUT" 30 || fail_because "not drained 30 s after the rolling restart: spill $(last_stats "$AGENT_OUT" spill_records), producer $(last_stats "$AGENT_OUT" queue_records)"
	end2=$(now)
	agent_stop INT || { fail_because "agent did not exit on SIGINT"; return; }
	expect "agent exit $AGENT_RC: $(agent_tail)" eq "$AGENT_RC" 0
	expect_delivered "$AGENT_ERR" "$T/lv.dump" "$AGENT_OUT"
	k=$(jq -c 'select(.type == "stats" and .final) | .kafka' "$AGENT_OUT" | tail -n 1)
	expect "nothing spilled in two outages: $k" ge "$(jq .spilled_total <<<"$k")" 20
	expect "records dropped: $k" eq "$(jq '.dropped_event_total + .dropped_summary_total + .dropped_anomaly_total + .dropped_stats_total' <<<"$k")" 0
	echo "INFO kafka_recover_live: $(jq .messages <<<"$c") records, $(jq .dups <<<"$c") sent twice; first delivery after the outage before production $(resumed "$AGENT_OUT" "$m0") s, during production $(resumed "$AGENT_OUT" "$m1") s, after each broker of the rolling restart $(resumed "$AGENT_OUT" "${mr[1]}") $(resumed "$AGENT_OUT" "${mr[2]}") $(resumed "$AGENT_OUT" "${mr[3]}") s (a stats record every 0.05 s; all sent and confirmed: $(secs "$up0" "$end0"), $(secs "$up1" "$end1"), $(secs "$up2" "$end2") s)"
	mock_stop
	exec {MOCK_FD}>&-
}

kill9_case() {
	local c n2 ms delay killed_at
	KTOPICS="k9d.steps k9d.anomalies k9d.events k9d.stats"
	mock_start || { fail_because "mock cluster did not start: $(head -c 300 "$T/mock.err")"; return; }
	rm -rf "$T/spill.k9d"
	# a producer of 10 records: the drain takes about a second, the kill falls in it
	agent_start k9a --pid "$IDLE" -i 0.02 --no-net --kafka "$BROKERS" --kafka-topic-prefix k9d \
		--spill-dir "$T/spill.k9d" --kafka-queue-max 10 --flush-timeout 1 ||
		{ fail_because "agent did not start: $(agent_tail)"; return; }
	sleep 1
	mock_down || { fail_because "mock did not go down"; return; }
	sleep 4
	mock_up || { fail_because "mock did not come up"; return; }
	# a random moment of the drain and of what follows it: 0 .. 1.5 s
	ms=$((RANDOM % 1500))
	delay=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
	sleep "$delay"
	kill -KILL "$AGENT_PID"
	killed_at="spill $(last_stats "$AGENT_OUT" spill_records), producer $(last_stats "$AGENT_OUT" queue_records)"
	wait_exit "$AGENT_PID" 10 || { fail_because "agent did not die"; return; }
	agent_start k9b --pid "$IDLE" -i 0.05 --no-net --kafka "$BROKERS" --kafka-topic-prefix k9d \
		--spill-dir "$T/spill.k9d" --kafka-queue-max 20 --flush-timeout 1 ||
		{ fail_because "agent did not restart: $(agent_tail)"; return; }
	wait_spill_empty "$AGENT_OUT" 30 || fail_because "spill not empty 30 s after the restart"
	agent_stop INT || { fail_because "agent did not exit on SIGINT"; return; }
	expect "second run exit $AGENT_RC: $(agent_tail)" eq "$AGENT_RC" 0
	n2=$(wc -l <"$T/k9b.jsonl")
	kafka_dump "$T/k9d.dump"
	# the first run's file is cut where kill -9 found its buffer: whole lines only
	grep '}$' "$T/k9a.jsonl" >"$T/k9a.whole"
	c=$(DEDUP=1 kafka_compare "$T/k9d.dump" cover "$T/k9a.whole" "$T/k9b.jsonl")
	expect_compare "$c"
	expect "a message without infertrace-id: $(jq .no_id <<<"$c")" eq "$(jq .no_id <<<"$c")" 0
	expect "record ids missing in Kafka (lost records) of runs $(jq -c .id_gaps <<<"$c")" \
		eq "$(jq '.id_gaps | length' <<<"$c")" 0
	echo "INFO kafka_recover_kill9_drain: killed $delay s after the broker came back (last stats: $killed_at); $(jq .messages <<<"$c") records, $(jq .dups <<<"$c") sent twice, second run wrote $n2"
	mock_stop
}

# the live agents trace only this idle process
IDLE=
live_ok=1
if [ "$(id -u)" -ne 0 ] || [ ! -x "$CUDA_CALLS" ]; then
	live_ok=0
else
	bg_start "$T/idle.out" sleep 100000
	IDLE=$BG_PID
fi

# KAFKA_RECOVER_CASES=regex: only the cases whose name matches
_run_loops() { # _run_loops NAME FUNCTION ARGS...: LOOPS rounds, one report
	local name=$1 fn=$2 r fails=()
	shift 2
	[[ "$name" =~ ${KAFKA_RECOVER_CASES:-.} ]] || return 0
	for ((r = 1; r <= LOOPS; r++)); do
		_why=()
		"$fn" "$@"
		mock_stop
		[ ${#_why[@]} -gt 0 ] && fails+=("round $r: ${_why[*]}")
	done
	_why=("${fails[@]}")
	[ "$LOOPS" -gt 1 ] && echo "INFO $name: $((LOOPS - ${#fails[@]})) of $LOOPS rounds passed"
	report "$name"
}

# KAFKA_RECOVER_CASES=REGEX runs only the cases it matches (a loop of one case)
want_case() { [[ "$1" =~ ${KAFKA_RECOVER_CASES:-.} ]]; }
run_loops() { want_case "$1" && _run_loops "$@"; }
if [ ! -r "$SMALL" ] || [ ! -r "$BIG" ]; then
	skip kafka_recover_replay_start "recordings not found in $DATA/kineto"
	skip kafka_recover_replay_mid "recordings not found in $DATA/kineto"
else
	run_loops kafka_recover_replay_start replay_case kafka_recover_replay_start "$SMALL" pre rs
	run_loops kafka_recover_replay_mid replay_case kafka_recover_replay_mid "$BIG" 0.5 rm
fi
if [ "$live_ok" = 1 ]; then
	run_loops kafka_recover_live live_case
	run_loops kafka_recover_kill9_drain kill9_case
else
	skip kafka_recover_live "needs root and the workloads"
	skip kafka_recover_kill9_drain "needs root and the workloads"
fi
