#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# The spill across an agent restart (live agent, a stats record every loop
# tick, about 10 per second).
#
#   kafka_restart_kill9  the broker is down; the agent is killed with -9
#                        once records are in the spill; the broker comes
#                        back and the agent starts again on the same spill:
#                        everything spilled arrives, each record once and in
#                        order, before what the second run writes. What the
#                        producer held in memory (--kafka-queue-max 20) dies
#                        with the process: Kafka holds a suffix of the
#                        records, exactly as many from the first run as the
#                        second found in the spill (kafka.recovered_total).
#                        The first run's file may lack the last records its
#                        stdio buffer held at the kill while the spill had
#                        them: Kafka may hold that tail (at most 10 records,
#                        all after the file's last, before the second run's;
#                        kafka_lib.sh, mode suffix-killed).
#   kafka_restart_exit   the same with SIGTERM and --flush-timeout 1: the
#                        producer's queue goes back to the spill at exit, so
#                        every record of both runs arrives, once, in order.
#   kafka_stop_order     SIGINT, then SIGKILL as soon as the agent starts
#                        detaching its uprobes (a stop deadline): every record
#                        it wrote, the final stats included, is in Kafka.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"

kafka_preflight kafka_restart_kill9 kafka_restart_exit kafka_stop_order
it_preflight kafka_restart_kill9 kafka_restart_exit kafka_stop_order
mock_start || { for n in kafka_restart_kill9 kafka_restart_exit kafka_stop_order; do
	echo "FAIL $n: mock cluster did not start: $(head -c 300 "$T/mock.err")"; done; exit 0; }

# the agents trace only this idle process: CUDA processes of other tests
# running at the same time stay out of the records
bg_start "$T/idle.out" sleep 600
IDLE=$BG_PID

# run_agent NAME PREFIX: the live agent on the case's spill, broker as it is
run_agent() {
	agent_start "$1" --pid "$IDLE" -i 0.05 --no-net --kafka "$BROKERS" --kafka-topic-prefix "$2" \
		--spill-dir "$T/spill.$2" --kafka-queue-max 20 --flush-timeout 1 \
		-X reconnect.backoff.ms=100 -X reconnect.backoff.max.ms=1000
}

case_kill9() {
	local c n1 n2 rec from1 segs
	mock_down || { fail_because "mock did not set the broker down"; return; }
	run_agent k1 k9 || { fail_because "agent did not start: $(agent_tail)"; return; }
	sleep 7
	kill -KILL "$AGENT_PID"
	wait_exit "$AGENT_PID" 10 || { fail_because "agent did not die"; return; }
	n1=$(wc -l <"$T/k1.jsonl")
	segs=$(find "$T/spill.k9" -name '*.seg' | wc -l)
	expect "no spill segment after kill -9" ge "$segs" 1
	mock_up || { fail_because "mock did not set the broker up"; return; }
	run_agent k2 k9 || { fail_because "agent did not restart: $(agent_tail)"; return; }
	wait_spill_empty "$AGENT_OUT" 30 || fail_because "spill not empty 30 s after the restart"
	sleep 0.5
	agent_stop INT || { fail_because "agent did not exit on SIGINT"; return; }
	expect "second run exit $AGENT_RC: $(agent_tail)" eq "$AGENT_RC" 0
	rec=$(jq -r 'select(.type == "stats" and .final) | .kafka.recovered_total' "$T/k2.jsonl" | tail -n 1)
	n2=$(wc -l <"$T/k2.jsonl")
	KTOPICS="k9.steps k9.anomalies k9.events k9.stats" kafka_dump "$T/k9.dump"
	c=$(kafka_compare "$T/k9.dump" suffix-killed "$T/k1.jsonl" "$T/k2.jsonl")
	expect_compare "$c"
	expect "first run's file lost $(jq .first_tail_lost <<<"$c") records at the kill, want at most 10" \
		le "$(jq .first_tail_lost <<<"$c")" 10
	from1=$(($(jq .messages <<<"$c") - n2))
	expect "records recovered from the spill: $rec (first run wrote $n1)" ge "${rec:-0}" 20
	expect "first-run records in Kafka: $from1, recovered from the spill: $rec" eq "$from1" "${rec:-x}"
	expect "second run left records in the spill: $(grep 'left in the spill' "$AGENT_ERR" || agent_tail)" \
		grep -q ' 0 left in the spill' "$AGENT_ERR"
}

case_exit() {
	local c left n1
	mock_down || { fail_because "mock did not set the broker down"; return; }
	run_agent e1 ex || { fail_because "agent did not start: $(agent_tail)"; return; }
	sleep 4
	agent_stop TERM || { fail_because "agent did not exit on SIGTERM"; return; }
	expect "first run exit $AGENT_RC: $(agent_tail)" eq "$AGENT_RC" 0
	n1=$(wc -l <"$T/e1.jsonl")
	left=$(sed -n 's/.* \([0-9]*\) left in the spill.*/\1/p' "$AGENT_ERR")
	expect "first run left ${left:-?} of $n1 records in the spill" eq "${left:-x}" "$n1"
	mock_up || { fail_because "mock did not set the broker up"; return; }
	run_agent e2 ex || { fail_because "agent did not restart: $(agent_tail)"; return; }
	wait_spill_empty "$AGENT_OUT" 30 || fail_because "spill not empty 30 s after the restart"
	sleep 0.5
	agent_stop INT || { fail_because "agent did not exit on SIGINT"; return; }
	KTOPICS="ex.steps ex.anomalies ex.events ex.stats" kafka_dump "$T/ex.dump"
	c=$(kafka_compare "$T/ex.dump" exact "$T/e1.jsonl" "$T/e2.jsonl")
	expect_compare "$c"
}

# kafka_stop_order: a stop deadline (systemd's TimeoutStopSec, the pod's
# grace period) kills the agent while it detaches its uprobes, which is slow
# (each link waits for an RCU grace period in the kernel); by then everything
# it wrote, the final stats record included, must be in Kafka
case_stop_order() {
	local c n wp go=$T/so.go i
	mock_up || { fail_because "mock did not set the broker up"; return; }
	# a CUDA process: the agent holds uprobe links on its libraries
	bg_start "$T/so.calls" "$CUDA_CALLS" -t 1 -n 5 -w "$go" -l 600
	wp=$BG_PID
	wait_line "$T/so.calls" 10 || { fail_because "cuda_calls printed nothing"; return; }
	agent_start so --pid "$wp" -i 0.05 --no-net --kafka "$BROKERS" --kafka-topic-prefix so \
		--spill-dir "$T/spill.so" --flush-timeout 10 ||
		{ fail_because "agent did not start: $(agent_tail)"; return; }
	cuda_attached "$wp" 10 || { fail_because "no attach record for pid $wp: $(agent_tail)"; return; }
	touch "$go"
	wait_workload_done "$T/so.calls" 10 || fail_because "cuda_calls did not finish its calls"
	sleep 0.3
	kill -INT "$AGENT_PID"
	for ((i = 0; i < 300; i++)); do
		grep -q 'records delivered; detaching' "$AGENT_ERR" && break
		sleep 0.05
	done
	kill -KILL "$AGENT_PID" # the deadline, as soon as the detach begins
	wait_exit "$AGENT_PID" 30 || { fail_because "agent did not die"; return; }
	expect "the agent did not say it delivered before detaching: $(agent_tail)" \
		grep -q 'records delivered; detaching' "$AGENT_ERR"
	kill "$wp" 2>/dev/null
	KTOPICS="so.steps so.anomalies so.events so.stats" kafka_dump "$T/so.dump"
	n=$(jq -s '[.[] | .payload | fromjson? | select(.type == "stats" and .final)] | length' "$T/so.dump")
	expect "final stats records in Kafka: ${n:-none}, want 1" eq "${n:-x}" 1
	# sentinel's single events stay local (docs/operations.md, Kafka)
	c=$(kafka_compare "$T/so.dump" exact "$T/so.jsonl")
	UNSENT_TYPES="cuda_launch cuda_sync cuda_code_load offcpu runq syscall tcp_retransmit" expect_compare "$c"
}

case_kill9
report kafka_restart_kill9
case_exit
report kafka_restart_exit
case_stop_order
report kafka_stop_order
mock_stop
