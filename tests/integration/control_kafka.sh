#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# control_kafka - fleet-wide deep-dive through the <prefix>.control topic
# (agent/control/control_kafka.c) on librdkafka's mock cluster (kafka_lib.sh):
#
#   control_kafka_deep_dive:  `agentctl deep-dive --kafka BROKERS` publishes
#                             the request keyed by instance; the agent
#                             consuming the topic switches that instance's
#                             process (cuda_launch records appear; source
#                             "kafka"), another instance stays in sentinel;
#                             `--off` through the topic ends it; a
#                             malformed message on the topic is counted and
#                             changes nothing
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kafka_lib.sh"
CTL=$BUILD/agentctl
it_preflight control_kafka_deep_dive
kafka_preflight control_kafka_deep_dive
[ -x "$CTL" ] || { echo "FAIL control_kafka_deep_dive: $CTL not built"; exit 0; }

# fast forms of wait_record/jqo for big deep-dive outputs: grep -F FILTER
# picks the candidate lines first (FILTER: a literal every match contains)
wait_rec() { # wait_rec FILTER JQ_COND SECS
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		grep -F -- "$1" "$AGENT_OUT" 2>/dev/null |
			jq -e -n -R "[inputs | fromjson? | select($2)] | length > 0" >/dev/null 2>&1 && return 0
		kill -0 "$AGENT_PID" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
jqf() { # jqf FILTER [jq options] JQ: like jqo on the lines holding FILTER
	local flt=$1
	shift
	grep -F -- "$flt" "$AGENT_OUT" | jq -c -n -R "${@:1:$#-1}" "[inputs | fromjson?] | ${*: -1}"
}
launches() { # launches PID [AFTER_NS]: cuda_launch records of PID (ts_ns > AFTER_NS)
	grep -F '"type":"cuda_launch"' "$AGENT_OUT" | grep -F "\"pid\":$1," |
		jq -n -R --argjson after "${2:-0}" '[inputs | fromjson? | select(.ts_ns > $after)] | length'
}

A=it-ck-a-$$ B=it-ck-b-$$
# publish until the record shows up: a consumer that has not joined its
# group yet starts at the latest offset and would not see an earlier message
publish_until() { # publish_until JQ_COND AGENTCTL_ARGS...
	local cond=$1 i
	shift
	for ((i = 0; i < 10; i++)); do
		"$CTL" "$@" --kafka "$BROKERS" >>"$T/publish.out" 2>&1 ||
			fail_because "agentctl --kafka failed: $(tail -n 1 "$T/publish.out")"
		wait_rec "\"type\":\"deep_dive\"" "$cond" 3 && return 0
	done
	return 1
}

if ! mock_start infertrace.control; then
	fail_because "mock cluster did not start: $(head -c 300 "$T/mock.err")"
elif agent_start ck -i 0.25 --kafka "$BROKERS" --spill-dir "$T/spill" --control-socket none \
	--shim-socket none; then
	# one thread: the deep-dived workload's records all go to the mock
	# broker, and two threads' (~21k/s) delayed its answers to the control
	# topic's fetch until the dive expired on a CPU-starved machine
	bg_start "$T/wa.out" env INFERTRACE_INSTANCE="$A" "$CUDA_CALLS" -t 1 -s 60
	PA=$BG_PID
	bg_start "$T/wb.out" env INFERTRACE_INSTANCE="$B" "$CUDA_CALLS" -t 2 -s 60
	PB=$BG_PID
	cuda_attached "$PA" 10 && cuda_attached "$PB" 10 || fail_because "workloads not attached"
	expect "cuda_launch before any deep-dive" eq "$(launches "$PA")" 0
	if publish_until ".type == \"deep_dive\" and .instance == \"$A\" and .action == \"start\" and .source == \"kafka\"" \
		deep-dive --instance "$A" --duration 60; then
		wait_rec "\"pid\":$PA," ".type == \"cuda_launch\" and .pid == $PA" 10 ||
			fail_because "no cuda_launch for $A after the deep-dive from the topic"
		# a malformed message on the topic: counted, nothing changes
		printf 'not json' | kcat -P -b "$BROKERS" -t infertrace.control -k "$A" 2>/dev/null
		printf '{"cmd":"export","format":"perfetto"}' |
			kcat -P -b "$BROKERS" -t infertrace.control -k "$A" 2>/dev/null
		if publish_until ".type == \"deep_dive\" and .instance == \"$A\" and .action == \"stop\"" \
			deep-dive --instance "$A" --off; then
			sleep 1.5
			stop=$(jqf '"type":"deep_dive"' --arg i "$A" '[.[] | select(.type == "deep_dive" and .instance == $i and .action == "stop") | .ts_ns][0] // 0')
			expect "cuda_launch of $A after --off: $(launches "$PA" "$stop")" eq "$(launches "$PA" "$stop")" 0
		else
			fail_because "no deep_dive stop record after publishing --off"
		fi
		expect "cuda_launch of $B (never deep-dived)" eq "$(launches "$PB")" 0
		wait_rec '"control_topic"' '.type == "stats" and .control_topic.malformed >= 1 and .control_topic.refused >= 1' 5 ||
			fail_because "stats.control_topic does not count the malformed and the refused message: $(jqf '"control_topic"' '[.[] | select(.type == "stats")][-1].control_topic')"
	else
		fail_because "no deep_dive start (source kafka) after publishing: $(tail -n 2 "$T/publish.out") $(agent_tail)"
	fi
	kill "$PA" "$PB" 2>/dev/null
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	[ "${AGENT_RC:-}" = 0 ] || fail_because "agent exit ${AGENT_RC:-?}: $(agent_tail)"
else
	fail_because "agent did not start: $(agent_tail)"
fi
mock_stop
report control_kafka_deep_dive
