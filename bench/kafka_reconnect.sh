#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/kafka_reconnect.sh - why delivery came back late after a Kafka outage
# (issue 18, finding 1), shown without the agent: a plain librdkafka
# producer (build/bench/kafka_reconnect: idempotent, acks=all, linger.ms=50,
# as the agent) sends a message every 10 ms to the mock cluster
# (build/tests/integration/kafka_mock); the broker goes down 2 s in, for
# OUTAGE s, and comes back. Printed: seconds from "broker up" to the next
# successful delivery, with librdkafka's default reconnect backoff
# (reconnect.backoff.max.ms=10000) and with the agent's (1000). Figures
# only; never asserts.
#
# usage: bench/kafka_reconnect.sh [OUTAGE_SECS...] (default 6 12 20); ROUNDS=N
set -u
BUILD=${BUILD:-build}
MOCK=$BUILD/tests/integration/kafka_mock
PLAIN=$BUILD/bench/kafka_reconnect
[ -x "$MOCK" ] && [ -x "$PLAIN" ] || { echo "build $MOCK and $PLAIN first (make bench)"; exit 1; }
T=$(mktemp -d /tmp/infertrace-reconnect.XXXXXX)
trap 'rm -rf "$T"' EXIT

one() { # one OUTAGE MAXMS: seconds from up to the next delivery
	local d=$T/$RANDOM mp br i up gap
	mkdir -p "$d"
	"$MOCK" -p 4 -t plain.t </dev/null >"$d/mock.out" 2>"$d/mock.err" &
	mp=$!
	for ((i = 0; i < 100; i++)); do
		br=$(sed -n 's/^bootstrap=//p' "$d/mock.out")
		[ -n "$br" ] && break
		sleep 0.1
	done
	(sleep 2; kill -USR1 "$mp"; sleep "$1"; kill -USR2 "$mp"; date +%s.%N >"$d/up") &
	"$PLAIN" "$br" $(($1 + 10)) enable.idempotence=true acks=all linger.ms=50 \
		reconnect.backoff.max.ms="$2" >"$d/out" 2>"$d/err"
	wait $!
	kill "$mp"
	wait "$mp" 2>/dev/null
	up=$(cat "$d/up")
	gap=$(awk '/^gap/ {print $3}' "$d/out" | tail -n 1)
	if [ -z "$gap" ]; then echo "?"; else echo "$gap - $up" | bc; fi
}

for outage in ${@:-6 12 20}; do
	for max in 10000 1000; do
		r=()
		for ((n = 0; n < ${ROUNDS:-3}; n++)); do r+=("$(one "$outage" "$max")"); done
		echo "outage ${outage} s, reconnect.backoff.max.ms=$max: first delivery after up: ${r[*]} s"
	done
done
