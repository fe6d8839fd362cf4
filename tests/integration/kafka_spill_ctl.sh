#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# agentctl spill-foreign (issue 18): records spilled by a run for topic
# prefix fa (the broker down) are left alone by a live agent for prefix fb
# on the same spill, which says so; then, without a restart:
#
#   kafka_spill_ctl_send     agentctl spill-foreign send: every fa record
#                            arrives in fb's topics, in order, with its
#                            record id; counted (spill_adopted_total)
#   kafka_spill_ctl_discard  agentctl spill-foreign discard: the fa records
#                            are deleted (no segment of fa left, nothing in
#                            any topic), counted (spill_discarded_total)
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"

NAMES="kafka_spill_ctl_send kafka_spill_ctl_discard"
# shellcheck disable=SC2086
kafka_preflight $NAMES
# shellcheck disable=SC2086
it_preflight $NAMES
AGENTCTL=$BUILD/agentctl
DATA=${INFERTRACE_DATA:-$IT_ROOT/../shared/data}
TINY=$DATA/kineto/hta_alexnet_a100.json.gz
if [ ! -r "$TINY" ]; then
	for n in $NAMES; do skip "$n" "recordings not found in $DATA/kineto"; done
	exit 0
fi
[ -x "$AGENTCTL" ] || { for n in $NAMES; do echo "FAIL $n: $AGENTCTL not built"; done; exit 0; }
KTOPICS="fa.steps fa.anomalies fa.events fa.stats fb.steps fb.anomalies fb.events fb.stats"
mock_start || { for n in $NAMES; do echo "FAIL $n: mock cluster did not start: $(head -c 300 "$T/mock.err")"; done; exit 0; }
bg_start "$T/idle.out" sleep 100000
IDLE=$BG_PID

# spill_fa DIR NAME: a replay for prefix fa with the broker down; its
# records stay in DIR; N_FA: how many
spill_fa() {
	mock_down || fail_because "mock did not go down"
	timeout 120 "$AGENT" --replay "$TINY" --kafka "$BROKERS" --kafka-topic-prefix fa \
		--spill-dir "$1" --flush-timeout 1 -o "$T/$2.jsonl" 2>"$T/$2.err"
	mock_up || fail_because "mock did not come up"
	N_FA=$(wc -l <"$T/$2.jsonl")
	local left
	left=$(sed -n 's/.* \([0-9]*\) left in the spill.*/\1/p' "$T/$2.err")
	expect "the fa run left ${left:-?} of $N_FA records in the spill" eq "${left:-x}" "$N_FA"
}

# live NAME DIR: a live agent for prefix fb on DIR, with its own control socket
live() {
	agent_start "$1" --pid "$IDLE" -i 0.2 --no-net --kafka "$BROKERS" --kafka-topic-prefix fb \
		--spill-dir "$2" --control-socket "$T/$1.sock" ||
		{ fail_because "agent did not start: $(agent_tail)"; return 1; }
	expect "no warning that fa's records are left alone: $(grep -i spill "$AGENT_ERR" | head -3)" \
		grep -q "$N_FA records .*fa.steps.*left alone (agentctl spill-foreign" "$AGENT_ERR"
}

# foreign ACTION SAID: `agentctl spill-foreign ACTION` on the agent of live
# ACTION; it exits 0 and says "N_FA records of another owner SAID"
foreign() {
	local out rc
	out=$("$AGENTCTL" --socket "$T/$1.sock" spill-foreign "$1" 2>&1)
	rc=$?
	expect "agentctl exit $rc: $out" eq "$rc" 0
	expect "agentctl said: $out" grep -q "^$N_FA records of another owner $2" <<<"$out"
}

# final_kafka: stop the agent; K is its final stats record's kafka object
final_kafka() {
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	K=$(jq -c 'select(.type == "stats" and .final) | .kafka' "$AGENT_OUT" | tail -n 1)
}

# ------------------------------------------------------------------ send --
name=kafka_spill_ctl_send
spill_fa "$T/sp1" fa1
if live send "$T/sp1"; then
	foreign send sent
	wait_spill_empty "$AGENT_OUT" 30 || fail_because "spill not empty 30 s after agentctl"
	final_kafka
	expect "agent exit $AGENT_RC: $(agent_tail)" eq "$AGENT_RC" 0
	expect "spill_adopted_total: $K" eq "$(jq .spill_adopted_total <<<"$K")" "$N_FA"
	expect "spill_foreign_records after send: $K" eq "$(jq .spill_foreign_records <<<"$K")" 0
	KTOPICS="fb.steps fb.anomalies fb.events fb.stats" kafka_dump "$T/fb.dump"
	# fa's records, in order, among the live agent's own (other keys)
	c=$(DEDUP=1 kafka_compare "$T/fb.dump" cover "$T/fa1.jsonl")
	expect_compare "$c"
	expect "record ids missing in Kafka of runs $(jq -c .id_gaps <<<"$c")" \
		eq "$(jq '.id_gaps | length' <<<"$c")" 0
	echo "INFO $name: $N_FA records sent by agentctl, $(jq .messages <<<"$c") messages in fb's topics"
fi
report $name

# --------------------------------------------------------------- discard --
name=kafka_spill_ctl_discard
spill_fa "$T/sp2" fa2
if live discard "$T/sp2"; then
	foreign discard deleted
	sleep 0.5
	final_kafka
	expect "spill_discarded_total: $K" eq "$(jq .spill_discarded_total <<<"$K")" "$N_FA"
	left=$(grep -l 'fa\.steps' "$T"/sp2/*.seg 2>/dev/null | wc -l)
	expect "segments of fa left after discard: $left" eq "$left" 0
	KTOPICS="fa.steps fa.anomalies fa.events fa.stats" kafka_dump "$T/fa.dump"
	expect "fa's records in Kafka: $(wc -l <"$T/fa.dump")" eq "$(wc -l <"$T/fa.dump")" 0
fi
report $name
mock_stop
