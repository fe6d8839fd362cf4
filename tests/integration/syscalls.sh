#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# syscalls - a traced thread (--pid) makes known slow syscalls: 5 x
# nanosleep(20 ms) and 3 x poll(30 ms) on an empty pipe, both as raw
# syscalls. They show in the thread records' per-syscall aggregates with the
# exact counts and about the expected time, and as single syscall events
# (above the 1 ms threshold) with the right name, result and duration.
source "$(dirname "$0")/lib.sh"
it_preflight syscalls_slow

if run_traced syscalls "" "$WORKLOAD" syscalls -w "$T/syscalls.go" 5 20 3 30; then
	agg=$(jqo --argjson tid "$WTID" --argjson pid "$WPID" '
		[.[] | select(.type == "thread" and .pid == $pid and .tid == $tid) | .syscalls[]]
		| group_by(.name) | map({key: (.[0].name // "?"), value: {count: (map(.count) | add),
		  total_ns: (map(.total_ns) | add), nr: .[0].nr,
		  hist: (map(.hist_us | to_entries[]) | group_by(.key) | map({key: .[0].key, value: (map(.value) | add)}) | from_entries)}})
		| from_entries')
	# name count nr expected-ms-each
	for spec in "nanosleep 5 35 20" "poll 3 7 30"; do
		read -r name n nr ms <<<"$spec"
		c=$(jq ".$name.count // 0" <<<"$agg")
		t=$(jq ".$name.total_ns // 0" <<<"$agg")
		expect "thread.syscalls $name count $c, want $n" eq "$c" "$n"
		expect "thread.syscalls $name nr $(jq ".$name.nr" <<<"$agg"), want $nr" [ "$(jq ".$name.nr" <<<"$agg")" = "$nr" ]
		# never shorter than asked; late wake-ups on a loaded machine allowed
		expect "thread.syscalls $name total_ns $t, want $((n * ms)) to $((n * ms * 2)) ms" \
			between "$t" $((n * ms * 1000000)) $((n * ms * 2000000))
		h=$(jq "[.$name.hist // {} | to_entries[] | select((.key | tonumber) >= 16384) | .value] | add // 0" <<<"$agg")
		expect "thread.syscalls $name hist_us: $(jq -c ".$name.hist" <<<"$agg"), want $n in >= 16384 us buckets" eq "$h" "$n"
		ev=$(jqo --argjson tid "$WTID" --argjson pid "$WPID" --arg name "$name" --argjson lo $((ms * 1000000)) --argjson hi $((ms * 3000000)) '
			[.[] | select(.type == "syscall" and .pid == $pid and .tid == $tid and .name == $name)]
			| {n: length, bad: [.[] | select(.dur_ns < $lo or .dur_ns > $hi or .ret != 0) | {dur_ns, ret, nr}]}')
		expect "$name events: $(jq -c . <<<"$ev"), want $n of ${ms}-$((ms * 3)) ms with ret 0" \
			[ "$(jq -c '[.n, (.bad | length)]' <<<"$ev")" = "[$n,0]" ]
	done
	fast=$(jqo --argjson tid "$WTID" '[.[] | select(.type == "syscall" and .tid == $tid and .dur_ns < 1000000)] | length')
	expect "$fast syscall events under the 1 ms threshold in sentinel mode" eq "$fast" 0
fi
report syscalls_slow
