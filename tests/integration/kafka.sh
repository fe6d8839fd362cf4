#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# Kafka sink against librdkafka's mock cluster in its own process (no root:
# the records come from --replay of real recordings in $INFERTRACE_DATA).
# The agent writes the same records to --output and to Kafka; kcat reads
# the topics back and, per topic and key, Kafka must hold the file's lines.
#
#   kafka_replay_deep       deep replay: topics, key = instance, one partition
#                           per instance, order, valid JSON, each record once
#   kafka_replay_sentinel   sentinel replay: steps and stats the same way
#   kafka_queue_overflow    a producer queue of 500 records for 13k records:
#                           the spill takes the overflow and gives it back in
#                           order
#   kafka_topics_config     --kafka-topic-prefix, --kafka-topic, -X and the
#                           Kafka options from a --config file
#   kafka_bad_options       a bad -X property or --kafka-topic class: error
#   kafka_spill_locked      a spill directory held by another agent: error
#   kafka_exit_to_spill     broker down for a whole run: after --flush-timeout
#                           the records stay in the spill; the next run (broker
#                           up) sends them first, each once, in order
#   kafka_spill_foreign     records spilled for one topic prefix are not sent
#                           by a start with another prefix (left alone, said,
#                           counted); --spill-foreign send sends them with the
#                           new settings, --spill-foreign discard deletes them
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"

NAMES="kafka_replay_deep kafka_replay_sentinel kafka_queue_overflow kafka_topics_config
kafka_bad_options kafka_spill_locked kafka_exit_to_spill kafka_spill_foreign"
# shellcheck disable=SC2086
kafka_preflight $NAMES
DATA=${INFERTRACE_DATA:-$IT_ROOT/../shared/data}
SMALL=$DATA/kineto/tracelens_hf_qwen1.5-0.5b_h100.json.gz
BIG=$DATA/kineto/tracemap_vllm_llama_tp4_h100_rank0.pt.trace.json.gz
TINY=$DATA/kineto/hta_alexnet_a100.json.gz
if [ ! -r "$SMALL" ] || [ ! -r "$BIG" ] || [ ! -r "$TINY" ]; then
	# shellcheck disable=SC2086
	for n in $NAMES; do skip "$n" "recordings not found in $DATA/kineto"; done
	exit 0
fi
mock_start || { for n in $NAMES; do echo "FAIL $n: mock cluster did not start: $(head -c 300 "$T/mock.err")"; done; exit 0; }

# run_replay NAME ARGS...: the agent on a recording, Kafka and --output
run_replay() {
	local name=$1
	shift
	timeout 120 "$AGENT" --kafka "$BROKERS" --spill-dir "$T/spill.$name" -o "$T/$name.jsonl" \
		"$@" 2>"$T/$name.err"
}

# replay_compare NAME ARGS...: run_replay NAME with the topics NAME.*; it must
# exit 0, and Kafka must hold exactly the records of its --output (the
# comparison in c, for the case's own checks)
replay_compare() {
	local name=$1 rc
	shift
	run_replay "$name" --kafka-topic-prefix "$name" "$@"
	rc=$?
	expect "agent exit $rc: $(tail -c 300 "$T/$name.err")" eq "$rc" 0
	KTOPICS="$name.steps $name.anomalies $name.events $name.stats" kafka_dump "$T/$name.dump"
	c=$(kafka_compare "$T/$name.dump" exact "$T/$name.jsonl")
	expect_compare "$c"
}

# --------------------------------------------------------------------------
# each case has topics of its own (--kafka-topic-prefix)
name=kafka_replay_deep
replay_compare deep --replay "$SMALL" --mode deep
expect "no kernel records in deep.events: $(jq -c .kafka_by_topic <<<"$c")" \
	ge "$(jq '.kafka_by_topic["deep.events"] // 0' <<<"$c")" 1000
expect "kernel records not in deep.events: $(jq -c .type_topic <<<"$c")" \
	test "$(jq -c .type_topic.kernel <<<"$c")" = '["deep.events"]'
expect "replay_status not in deep.stats: $(jq -c .type_topic <<<"$c")" \
	test "$(jq -c .type_topic.replay_status <<<"$c")" = '["deep.stats"]'
expect "agent did not report 0 left in the spill: $(grep 'kafka:.*delivered' "$T/deep.err")" \
	grep -q ' 0 left in the spill' "$T/deep.err"
report $name

# --------------------------------------------------------------------------
name=kafka_replay_sentinel
replay_compare sent --replay "$BIG" -i 0.05
expect "no summaries in sent.steps: $(jq -c .kafka_by_topic <<<"$c")" \
	ge "$(jq '.kafka_by_topic["sent.steps"] // 0' <<<"$c")" 1
expect "events in sentinel mode: $(jq -c .kafka_by_topic <<<"$c")" \
	eq "$(jq '.kafka_by_topic["sent.events"] // 0' <<<"$c")" 0
report $name

# --------------------------------------------------------------------------
name=kafka_queue_overflow
replay_compare ovf --replay "$BIG" --mode deep --kafka-queue-max 500 -v
expect "fewer than 13000 records: $(jq -c .kafka_by_topic <<<"$c")" ge "$(jq .messages <<<"$c")" 13000
# the spill was used and is empty again
through=$(sed -n 's/.*(\([0-9]*\) through the spill).*/\1/p' "$T/ovf.err")
expect "the spill was not used: $(grep 'kafka:.*delivered' "$T/ovf.err")" ge "${through:-0}" 1
expect "spill directory not empty after the run: $(ls "$T/spill.ovf" | head -3)" \
	eq "$(find "$T/spill.ovf" -name '*.seg' | wc -l)" 0
report $name

# --------------------------------------------------------------------------
name=kafka_topics_config
cat >"$T/k.conf" <<EOF
# Kafka through the configuration file
kafka = $BROKERS
kafka-topic-prefix = cfg
kafka-topic = stats=cfg.custom-stats
kafka-property = linger.ms=5
kafka-property = compression.codec=zstd
kafka-queue-max = 1000
spill-dir = $T/spill.cfg
spill-max-mib = 16
flush-timeout = 5
EOF
timeout 60 "$AGENT" --config "$T/k.conf" --replay "$SMALL" -o "$T/cfg.jsonl" 2>"$T/cfg.err"
rc=$?
expect "agent exit $rc: $(tail -c 300 "$T/cfg.err")" eq "$rc" 0
KTOPICS="cfg.steps cfg.anomalies cfg.events cfg.custom-stats" kafka_dump "$T/cfg.dump"
c=$(kafka_compare "$T/cfg.dump" exact "$T/cfg.jsonl")
expect_compare "$c"
expect "stats not in cfg.custom-stats: $(jq -c .kafka_by_topic <<<"$c")" \
	ge "$(jq '.kafka_by_topic["cfg.custom-stats"] // 0' <<<"$c")" 1
KTOPICS="cfg.stats" kafka_dump "$T/cfg2.dump"
expect "records in cfg.stats despite --kafka-topic" eq "$(wc -l <"$T/cfg2.dump")" 0
expect "spill directory not created" test -d "$T/spill.cfg"
report $name

# --------------------------------------------------------------------------
name=kafka_bad_options
out=$("$AGENT" --kafka "$BROKERS" --spill-dir "$T/spill.bad" -X no.such.property=1 --replay "$TINY" 2>&1 >/dev/null)
rc=$?
expect "bad -X: exit $rc" eq "$rc" 1
expect "bad -X: no clear error: $out" grep -q 'No such configuration property' <<<"$out"
out=$("$AGENT" --kafka "$BROKERS" --kafka-topic bogus=x --replay "$TINY" 2>&1 >/dev/null)
rc=$?
expect "bad --kafka-topic: exit $rc" eq "$rc" 64
expect "bad --kafka-topic: no clear error: $out" grep -q 'CLASS=TOPIC' <<<"$out"
out=$("$AGENT" --kafka "$BROKERS" -X linger.ms --replay "$TINY" 2>&1 >/dev/null)
rc=$?
expect "-X without =: exit $rc" eq "$rc" 64
report $name

# --------------------------------------------------------------------------
name=kafka_spill_locked
mkdir -p "$T/spill.lock"
flock "$T/spill.lock" sleep 20 &
lp=$!
_it_pids+=("$lp")
sleep 0.2
out=$("$AGENT" --kafka "$BROKERS" --spill-dir "$T/spill.lock" --replay "$TINY" 2>&1 >/dev/null)
rc=$?
kill "$lp" 2>/dev/null
expect "second holder of the spill: exit $rc" eq "$rc" 1
expect "no clear error: $out" grep -q 'in use by another agent' <<<"$out"
report $name

# --------------------------------------------------------------------------
# the broker is away for a whole run: the exit waits --flush-timeout, then
# the producer's queue goes back to the spill, in front of what overflowed
name=kafka_exit_to_spill
mock_down || fail_because "mock did not set the broker down"
t0=$(date +%s)
run_replay ex1 --kafka-topic-prefix ex --instance exrun --replay "$SMALL" --mode deep --kafka-queue-max 300 \
	--flush-timeout 2 -X message.timeout.ms=60000
rc=$?
t1=$(date +%s)
expect "run 1 exit $rc: $(tail -c 300 "$T/ex1.err")" eq "$rc" 0
expect "run 1 did not wait about --flush-timeout ($((t1 - t0)) s)" between $((t1 - t0)) 2 30
n1=$(wc -l <"$T/ex1.jsonl")
left=$(sed -n 's/.* \([0-9]*\) left in the spill.*/\1/p' "$T/ex1.err")
expect "run 1 left $left of $n1 records in the spill" eq "${left:-x}" "$n1"
mock_up || fail_because "mock did not set the broker up"
# run 2: another recording, same instance, same spill: run 1's records first
mv "$T/spill.ex1" "$T/spill.ex2"
run_replay ex2 --kafka-topic-prefix ex --instance exrun --replay "$TINY" --mode deep -X message.timeout.ms=60000
rc=$?
expect "run 2 exit $rc: $(tail -c 300 "$T/ex2.err")" eq "$rc" 0
KTOPICS="ex.steps ex.anomalies ex.events ex.stats" kafka_dump "$T/ex.dump"
c=$(kafka_compare "$T/ex.dump" exact "$T/ex1.jsonl" "$T/ex2.jsonl")
expect_compare "$c"
expect "run 2 left records in the spill: $(grep 'left in the spill' "$T/ex2.err")" \
	grep -q ' 0 left in the spill' "$T/ex2.err"
report $name

# --------------------------------------------------------------------------
name=kafka_spill_foreign
# fa: the broker is down, the records stay in the spill
mock_down || fail_because "mock did not set the broker down"
run_replay fa1 --spill-dir "$T/spill.fo" --kafka-topic-prefix fa --replay "$TINY" --flush-timeout 1
n1=$(wc -l <"$T/fa1.jsonl")
left=$(sed -n 's/.* \([0-9]*\) left in the spill.*/\1/p' "$T/fa1.err")
expect "run fa1 left ${left:-?} of $n1 records in the spill" eq "${left:-x}" "$n1"
mock_up || fail_because "mock did not set the broker up"
# fb: another prefix, same spill: fa's records stay, said and counted
run_replay fb2 --spill-dir "$T/spill.fo" --kafka-topic-prefix fb --replay "$TINY"
rc=$?
expect "run fb2 exit $rc: $(tail -c 300 "$T/fb2.err")" eq "$rc" 0
expect "no warning about fa's records: $(grep -i spill "$T/fb2.err" | head -3)" \
	grep -q "$n1 records .* another Kafka cluster or topic prefix.*fa.steps.*left alone" "$T/fb2.err"
KTOPICS="fb.steps fb.anomalies fb.events fb.stats" kafka_dump "$T/fb2.dump"
c=$(kafka_compare "$T/fb2.dump" exact "$T/fb2.jsonl")
expect_compare "$c"
KTOPICS="fa.steps fa.anomalies fa.events fa.stats" kafka_dump "$T/fa.dump"
expect "fa's records were sent by the fb run" eq "$(wc -l <"$T/fa.dump")" 0
# send: fa's records go to fb's topics, first
run_replay fb3 --spill-dir "$T/spill.fo" --kafka-topic-prefix fb --replay "$TINY" --spill-foreign send
expect "fb3 did not say it adopted fa's records: $(grep -i spill "$T/fb3.err" | head -3)" \
	grep -q "$n1 records for .*fa.steps.* adopted" "$T/fb3.err"
KTOPICS="fb.steps fb.anomalies fb.events fb.stats" kafka_dump "$T/fb3.dump"
c=$(kafka_compare "$T/fb3.dump" exact "$T/fb2.jsonl" "$T/fa1.jsonl" "$T/fb3.jsonl")
expect_compare "$c"
# discard: spilled for fa again, deleted by a start for fc
mock_down || fail_because "mock did not set the broker down"
run_replay fa4 --spill-dir "$T/spill.fo" --kafka-topic-prefix fa --replay "$TINY" --flush-timeout 1
mock_up || fail_because "mock did not set the broker up"
run_replay fc5 --spill-dir "$T/spill.fo" --kafka-topic-prefix fc --replay "$TINY" --spill-foreign discard
expect "fc5 did not say it discarded fa4's records: $(grep -i spill "$T/fc5.err" | head -3)" \
	grep -q "holds $(wc -l <"$T/fa4.jsonl") records for .*fa.steps.*: discarded" "$T/fc5.err"
expect "segments left after discard: $(ls "$T/spill.fo")" eq "$(find "$T/spill.fo" -name '*.seg' | wc -l)" 0
KTOPICS="fa.steps fa.anomalies fa.events fa.stats" kafka_dump "$T/fa.dump"
expect "fa's records were sent" eq "$(wc -l <"$T/fa.dump")" 0
report $name
mock_stop
