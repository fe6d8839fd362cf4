#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# control - the control socket and agentctl (agent/control/control.c, issue 4):
#
#   control_deep_dive_on_off:    sentinel agent, two CUDA workloads of two
#                                instances; `agentctl deep-dive` on one:
#                                its cuda_launch records appear, the other
#                                stays in sentinel (none), status says so
#                                (and gives the LOCAL_RANK=3 one rank 3, a
#                                steps line in its table, a third one's
#                                name with an escape and a newline as '?'
#                                in both its tables, whole in --json, and
#                                in the agent's log, whose every line is
#                                the agent's; its command's escape '?' in
#                                agentctl summary); `agentctl
#                                summary` counts both workloads' CUDA calls
#                                while the agent runs;
#                                `--off`: none after the stop record; C
#                                deep-dived by its whole name, and B's
#                                (a space, quotes) asked for its anomalies
#   control_deep_dive_duration:  --duration 2 ends by itself (expire record
#                                within generous bounds), none after it
#   control_peer_refused:        a non-root peer (uid 65534) is refused with
#                                a reply that says why, and counted; with
#                                --control-group its group may talk
#   control_malformed:           not JSON, wrong types, unknown command or
#                                keys, empty and oversized frames: an error
#                                reply each, counted, the agent still answers
source "$(dirname "$0")/lib.sh"
CTL=$BUILD/agentctl
RAW=$BUILD/tests/integration/ctl_raw
it_preflight control_deep_dive_on_off control_deep_dive_duration control_peer_refused \
	control_malformed
if [ ! -x "$CTL" ] || [ ! -x "$RAW" ]; then
	for n in control_deep_dive_on_off control_deep_dive_duration control_peer_refused \
		control_malformed; do
		echo "FAIL $n: $CTL or $RAW not built (make test)"
	done
	exit 0
fi

SOCK=$T/ctl/agent.sock
chmod 711 "$T" # uid 65534 must reach the socket to be refused by the agent
ctl() { "$CTL" --socket "$SOCK" "$@"; }

# start_workload NAME INSTANCE SECS [VAR=VALUE...]: a looping cuda_calls of
# that instance; its pid in WPID once the agent has attached both libraries
start_workload() {
	local name=$1 inst=$2 secs=$3
	shift 3
	bg_start "$T/$name.out" env INFERTRACE_INSTANCE="$inst" "$@" "${WL:-$CUDA_CALLS}" -t 2 -s "$secs"
	WPID=$BG_PID
	cuda_attached "$WPID" 10 || { fail_because "no attach record for $name (pid $WPID): $(agent_tail)"; return 1; }
}


# ------------------------------------------------------- deep-dive on/off ----
# B's name has a space and quotes, as a workload may call itself
A=it-ctl-a-$$ B="it-ctl-b \"q\" $$"
# C's names as a workload may choose them: its instance with a terminal's
# escape (clear the screen) and a newline, its command (comm) with the escape
C=$'it-ctl-c\e[2J\n-'$$
ln -s "$CUDA_CALLS" "$T/"$'cu\e[2Jc'
if agent_start ctl_onoff -i 0.25 --control-socket "$SOCK" --shim-socket none; then
	start_workload wa "$A" 40 && PA=$WPID
	start_workload wb "$B" 40 LOCAL_RANK=3 && PB=$WPID
	WL="$T/"$'cu\e[2Jc' start_workload wc "$C" 40 && PC=$WPID
	if [ -n "${PA:-}" ] && [ -n "${PB:-}" ] && [ -n "${PC:-}" ]; then
		sleep 0.5
		expect "sentinel: cuda_launch records before any deep-dive" eq "$(launches "$PA")" 0
		out=$(ctl deep-dive --instance "$A" --duration 60 2>&1)
		expect "deep-dive on failed: $out" grep -q "deep-dive $A on" <<<"$out"
		wait_rec "\"pid\":$PA," ".type == \"cuda_launch\" and .pid == $PA" 10 ||
			fail_because "no cuda_launch for $A (pid $PA) within 10 s of the deep-dive"
		st=$(ctl status --json)
		expect "status: $A not deep: $(jq -c '.instances' <<<"$st")" \
			test "$(jq -r --arg i "$A" '.instances[] | select(.name == $i) | .mode' <<<"$st")" = deep
		expect "status: $B not sentinel" \
			test "$(jq -r --arg i "$B" '.instances[] | select(.name == $i) | .mode' <<<"$st")" = sentinel
		expect "status: pid $PA not deep" \
			test "$(jq -r --argjson p "$PA" '.processes[] | select(.pid == $p) | .mode' <<<"$st")" = deep
		expect "status lacks the deep-dive" \
			test "$(jq -r --arg i "$A" '[.deep_dives[] | select(.instance == $i)] | length' <<<"$st")" = 1
		expect "status: ranks of $PA/$PB not null/3: $(jq -c '[.processes[] | {pid, rank}]' <<<"$st")" \
			jqe --argjson a "$PA" --argjson b "$PB" \
			'([.processes[] | select(.pid == $a)][0].rank == null) and ([.processes[] | select(.pid == $b)][0].rank == 3)' <<<"$st"
		# the summary while the agent runs (without --summary: no GPU records section)
		sum=$(ctl summary 2>&1)
		rc=$?
		expect "agentctl summary: exit $rc: $(head -c 300 <<<"$sum")" [ "$rc" = 0 ]
		expect "agentctl summary: no CUDA calls of $PA and $PB: $(grep -E "^ +($PA|$PB) +[0-9]+ +[^ ]+ +cu" <<<"$sum" | head -n 4 | tr '\n' '|')" \
			eval 'grep -qE "^ +$PA +[0-9]+ +[^ ]+ +cu[A-Za-z_]+ +[1-9]" <<<"$sum" && grep -qE "^ +$PB +[0-9]+ +[^ ]+ +cu[A-Za-z_]+ +[1-9]" <<<"$sum"'
		expect "agentctl summary: C's command not as cu?[2Jc, or a control byte: $(grep -E "^ +$PC " <<<"$sum" | head -n 2 | cat -v | tr '\n' '|')" \
			eval 'grep -qE "^ +$PC +[0-9]+ +cu\?\[2Jc +cu[A-Za-z_]+ +[1-9]" <<<"$sum" && ! LC_ALL=C grep -q "[[:cntrl:]]" <<<"$sum"'
		expect "agentctl summary: sections missing: $(grep -E '^[A-Z=]' <<<"$sum" | tr '\n' '|')" \
			eval 'grep -q "^== infertrace summary: " <<<"$sum" && grep -q "^Off-CPU time" <<<"$sum" && grep -q "^Steps and anomalies" <<<"$sum" && grep -q "collected only when the agent runs with --summary" <<<"$sum" && ! grep -q "^GPU records" <<<"$sum"'
		expect "status: control.by_cmd.summary != 1" eq "$(ctl status --json | jq .control.by_cmd.summary)" 1
		# the table form names both instances
		tbl=$(ctl status)
		expect "status table lacks $A / $B" eval 'grep -q "$A *deep" <<<"$tbl" && grep -q "$B *sentinel" <<<"$tbl"'
		expect "status table lacks $B's rank 3: $(grep -F "$B" <<<"$tbl" | tail -n 1)" \
			grep -qE "^$PB +[^ ]+ +$B +3 +sentinel" <<<"$tbl"
		expect "status table lacks the steps line: $(tail -n 12 <<<"$tbl" | tr '\n' '|')" \
			grep -qE "^steps +[0-9]+ cut, [0-9]+ judged, [0-9]+ new levels accepted$" <<<"$tbl"
		# C's name with its control bytes as '?', in both tables; the JSON keeps it whole
		cc="it-ctl-c?[2J?-$$"
		expect "status table: C's name not as $cc in both tables, or a raw control byte: $(grep -F "it-ctl-c" <<<"$tbl" | cat -v | tr '\n' '|')" \
			eval 'grep -qF "$cc" <<<"$(grep -E "^$PC " <<<"$tbl")" && [ "$(grep -cF "$cc" <<<"$tbl")" = 2 ] && ! LC_ALL=C grep -q "[[:cntrl:]]" <<<"$tbl"'
		expect "status --json: C's name not whole" \
			jqe --arg c "$C" '[.instances[] | select(.name == $c)] | length == 1' <<<"$st"
		wait_rec "\"type\":\"flight_recorder\"" ".type == \"flight_recorder\" and .instance == \"$A\" and .trigger == \"deep_dive\"" 5 ||
			fail_because "no flight_recorder record at the deep-dive's start"
		out=$(ctl deep-dive --instance "$A" --off 2>&1)
		expect "deep-dive off failed: $out" grep -q "deep-dive $A off" <<<"$out"
		wait_rec "\"type\":\"deep_dive\"" ".type == \"deep_dive\" and .instance == \"$A\" and .action == \"stop\"" 5 ||
			fail_because "no deep_dive stop record"
		sleep 1.5 # the workload goes on calling; the rings are drained
		stop=$(jqf '"type":"deep_dive"' --arg i "$A" '[.[] | select(.type == "deep_dive" and .instance == $i and .action == "stop") | .ts_ns][0] // 0')
		expect "cuda_launch of $A after --off: $(launches "$PA" "$stop")" eq "$(launches "$PA" "$stop")" 0
		expect "cuda_launch of $B (never deep-dived): $(launches "$PB")" eq "$(launches "$PB")" 0
		expect "cuda_launch of $A during the deep-dive: none" ge "$(launches "$PA")" 1
		out=$(ctl deep-dive --instance "$A" --off 2>&1)
		rc=$?
		expect "a second --off: exit $rc, want 1 (not_found): $out" eval '[ "$rc" = 1 ] && grep -q not_found <<<"$out"'
		# every instance status lists can be asked for by its name as given:
		# C's (an escape, a newline) deep-dived, B's (a space, quotes) asked
		out=$(ctl deep-dive --instance "$C" --duration 60 2>&1)
		expect "deep-dive of C's name failed, or C's control bytes not as '?': $(cat -v <<<"$out")" \
			eval 'grep -qF "deep-dive $cc on for 60.0 s: 1 processes" <<<"$out" && ! LC_ALL=C grep -q "[[:cntrl:]]" <<<"$out"'
		wait_rec "\"pid\":$PC," ".type == \"cuda_launch\" and .pid == $PC" 10 ||
			fail_because "no cuda_launch for C (pid $PC) within 10 s of its deep-dive"
		expect "status: C not deep" \
			jqe --arg c "$C" '[.instances[] | select(.name == $c and .mode == "deep")] | length == 1' <<<"$(ctl status --json)"
		out=$(ctl deep-dive --instance "$C" --off 2>&1)
		expect "deep-dive of C off failed: $(cat -v <<<"$out")" grep -qF "deep-dive $cc off after" <<<"$out"
		out=$(ctl anomalies --instance "$B" 2>&1)
		rc=$?
		expect "agentctl anomalies --instance '$B': exit $rc: $out" \
			eval '[ "$rc" = 0 ] && grep -qF "no anomaly records of $B (the agent keeps the last 256" <<<"$out"'
	fi
	kill "${PA:-}" "${PB:-}" "${PC:-}" 2>/dev/null
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	[ "${AGENT_RC:-}" = 0 ] || fail_because "agent exit ${AGENT_RC:-?}: $(agent_tail)"
	# the agent's log names C too, its control bytes as '?': no forged line, no escape
	expect "the agent's log: C not as it-ctl-c?[2J?-$$, or a control byte in it: $(grep -F it-ctl-c "$AGENT_ERR" | cat -v | head -n 2 | tr '\n' '|')" \
		eval 'grep -qF "instance it-ctl-c?[2J?-$$" "$AGENT_ERR" && ! LC_ALL=C grep -q "[[:cntrl:]]" "$AGENT_ERR"'
	expect "the agent's log: a line that is not the agent's: $(grep -v "^infertrace-agent: " "$AGENT_ERR" | head -n 2 | cat -v)" \
		eval '! grep -qv "^infertrace-agent: " "$AGENT_ERR"'
else
	fail_because "agent did not start: $(agent_tail)"
fi
report control_deep_dive_on_off

# ------------------------------------------------------ deep-dive duration ----
A=it-ctl-d-$$
if agent_start ctl_dur -i 0.25 --control-socket "$SOCK" --shim-socket none --deep-dive-max 30; then
	if start_workload wd "$A" 40; then
		PA=$WPID
		t0=$(date +%s%N)
		out=$(ctl deep-dive --instance "$A" --duration 2 2>&1)
		expect "deep-dive failed: $out" grep -q "on for 2.0 s" <<<"$out"
		wait_rec "\"type\":\"deep_dive\"" ".type == \"deep_dive\" and .instance == \"$A\" and .action == \"expire\"" 15 ||
			fail_because "the 2 s deep-dive did not expire within 15 s"
		t1=$(date +%s%N)
		expect "expired after $(((t1 - t0) / 1000000)) ms, want >= 1900" ge $(((t1 - t0) / 1000000)) 1900
		sleep 1
		exp=$(jqf '"type":"deep_dive"' --arg i "$A" '[.[] | select(.type == "deep_dive" and .instance == $i and .action == "expire") | .ts_ns][0] // 0')
		expect "no cuda_launch during the deep-dive" ge "$(launches "$PA")" 1
		expect "cuda_launch after the expiry: $(launches "$PA" "$exp")" eq "$(launches "$PA" "$exp")" 0
		# a duration above --deep-dive-max is cut to it
		out=$(ctl deep-dive --instance "$A" --duration 9999 2>&1)
		expect "--duration 9999 not capped at 30: $out" grep -q "on for 30.0 s" <<<"$out"
		kill "$PA" 2>/dev/null
	fi
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	[ "${AGENT_RC:-}" = 0 ] || fail_because "agent exit ${AGENT_RC:-?}: $(agent_tail)"
else
	fail_because "agent did not start: $(agent_tail)"
fi
report control_deep_dive_duration

# ----------------------------------------------------------- peer refused ----
if ! command -v setpriv >/dev/null; then
	skip control_peer_refused "setpriv missing (util-linux)"
elif agent_start ctl_peer --control-socket "$SOCK" --shim-socket none; then
	out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$CTL" --socket "$SOCK" status 2>&1)
	rc=$?
	expect "uid 65534: exit $rc, want 1" [ "$rc" = 1 ]
	expect "uid 65534: no 'permission denied' in: $out" grep -q "permission denied" <<<"$out"
	out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$CTL" --socket "$SOCK" \
		deep-dive --instance x 2>&1)
	expect "uid 65534 could ask for a deep-dive: $out" grep -q "permission denied" <<<"$out"
	n=$(ctl status --json | jq '.control.refused_peer')
	expect "control.refused_peer = $n, want 2" eq "$n" 2
	expect "a refused peer started a deep-dive" eq "$(ctl status --json | jq '.deep_dive.started')" 0
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	# the configured group may talk
	grp=$(getent group 65534 | cut -d: -f1)
	if [ -n "$grp" ] && agent_start ctl_grp --control-socket "$SOCK" --shim-socket none --control-group "$grp"; then
		out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$CTL" --socket "$SOCK" ping 2>&1)
		expect "--control-group $grp: uid 65534 refused: $out" grep -q "is there" <<<"$out"
		out=$(setpriv --reuid=65534 --regid=0 --groups=65534 "$CTL" --socket "$SOCK" ping 2>&1)
		expect "--control-group $grp as a supplementary group refused: $out" grep -q "is there" <<<"$out"
		agent_stop INT || fail_because "agent did not exit on SIGINT"
	else
		fail_because "no group 65534 or agent with --control-group did not start: $(agent_tail)"
	fi
else
	fail_because "agent did not start: $(agent_tail)"
fi
report control_peer_refused

# -------------------------------------------------------------- malformed ----
# raw PAYLOAD [ctl_raw options]: the replies, one per line, then EOF/OPEN
raw() { local p=$1; shift; printf '%s' "$p" | "$RAW" "$SOCK" "$@"; }
if agent_start ctl_bad --control-socket "$SOCK" --shim-socket none; then
	for p in 'not json' '[1,2]' '{"cmd":7}' '{"cmd":"reboot"}' '{"cmd":"deep_dive"}' \
		'{"cmd":"deep_dive","instance":"x","duration_s":-3}' \
		'{"cmd":"deep_dive","instance":"x","duration_s":"long"}' \
		'{"cmd":"deep_dive","instance":"a\u0000b"}' '{"cmd":"status","extra":1}' \
		'{"cmd":"export","format":"pprof"}' '{"cmd":"ping","id":{"x":1}}' \
		'{"cmd":"ping","cmd":"status"}' '{"cmd":"ping"' '{"cmd":"summary","since":0}' \
		'{"cmd":"summary","reset":"yes"}' '{"cmd":"anomalies","last":0}' \
		'{"cmd":"anomalies","last":"all"}' \
		"{\"cmd\":\"anomalies\",\"instance\":\"$(printf 'n%.0s' {1..128})\"}"; do
		r=$(raw "$p")
		expect "'$p': no bad_request reply, got: $r" \
			eval 'head -n 1 <<<"$r" | jq -e ".ok == false and .error == \"bad_request\" and (.message | length > 0)" >/dev/null'
		expect "'$p': connection closed after a malformed request" grep -qx OPEN <<<"$r"
	done
	# the id of a request comes back, also on errors
	r=$(raw '{"cmd":"reboot","id":42}')
	expect "id not echoed on an error: $r" eval 'head -n 1 <<<"$r" | jq -e ".id == 42" >/dev/null'
	# oversized: the header announces 1 MiB; empty frame
	r=$(head -c 2000 /dev/zero | "$RAW" "$SOCK" -l 1048576)
	expect "oversized: no too_large reply then close: $r" \
		eval 'head -n 1 <<<"$r" | jq -e ".error == \"too_large\"" >/dev/null && grep -qx EOF <<<"$r"'
	r=$(printf '' | "$RAW" "$SOCK" -l 0)
	expect "empty frame: no error reply then close: $r" \
		eval 'head -n 1 <<<"$r" | jq -e ".ok == false" >/dev/null && grep -qx EOF <<<"$r"'
	# random bytes with no header at all
	r=$(head -c 300 /dev/urandom | "$RAW" "$SOCK" -n)
	expect "random bytes: the agent did not answer or hang up: $r" test -n "$r"
	# two requests in one write: two replies, in order
	r=$( { printf '\0\0\0\x0e{"cmd":"ping"}\0\0\0\x10{"cmd":"status"}'; } | "$RAW" "$SOCK" -n)
	expect "pipelined requests: want ping then status replies: $(head -c 200 <<<"$r")" \
		eval '[ "$(sed -n 1p <<<"$r" | jq -r .version)" != null ] && sed -n 2p <<<"$r" | jq -e ".ok and .processes" >/dev/null'
	out=$(ctl ping 2>&1)
	expect "agent does not answer after the abuse: $out" grep -q "is there" <<<"$out"
	out=$(ctl status --reset 2>&1)
	rc=$?
	expect "agentctl status --reset: exit $rc, want 2 (usage) saying why: $out" \
		eval '[ "$rc" = 2 ] && grep -q -- "--reset belongs to summary" <<<"$out"'
	# agentctl anomalies: usage errors say why (exit 2); none yet here
	for u in "anomalies --last 0|--last takes a number from 1 to 256" \
		"anomalies --last 257|--last takes a number from 1 to 256" \
		"summary --last 3|--last belongs to anomalies" \
		"summary --instance x|--instance belongs to deep-dive, export and anomalies (summary covers the node)" \
		"ping --json|--json belongs to status and anomalies" \
		"anomalies --instance $(printf 'n%.0s' {1..128})|--instance takes a name of 1 to 127 bytes" \
		"anomalies --instance n"$'\xff'"|--instance: the name is not valid UTF-8"; do
		out=$(ctl ${u%%|*} 2>&1)
		rc=$?
		expect "agentctl ${u%%|*}: exit $rc, want 2 (usage) saying '${u#*|}': $out" \
			eval '[ "$rc" = 2 ] && grep -qF -- "${u#*|}" <<<"$out"'
	done
	out=$(ctl anomalies 2>&1)
	rc=$?
	expect "agentctl anomalies with none: exit $rc: $out" [ "$rc:$out" = \
		"0:no anomaly records (the agent keeps the last 256; 0 since it started)" ]
	out=$(ctl anomalies --json 2>&1)
	expect "agentctl anomalies --json with none: '$out', want nothing" [ -z "$out" ]
	kill -0 "$AGENT_PID" 2>/dev/null || fail_because "agent died"
	st=$(ctl status --json)
	expect "control.malformed = $(jq .control.malformed <<<"$st"), want >= 19" ge "$(jq .control.malformed <<<"$st")" 19
	expect "control.oversized = $(jq .control.oversized <<<"$st"), want >= 2" ge "$(jq .control.oversized <<<"$st")" 2
	# a follower of the anomalies outlives the agent: it says so once, asks
	# again every second, finds the agent restarted, and ends on Ctrl-C
	# with status 0 (agentctl itself, not the ctl function: SIGINT reaches
	# the process)
	"$CTL" --socket "$SOCK" anomalies --follow >"$T/follow.out" 2>"$T/follow.err" &
	fp=$!
	sleep 1.5
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	[ "${AGENT_RC:-}" = 0 ] || fail_because "agent exit ${AGENT_RC:-?}: $(agent_tail)"
	n=$(jqf '"final":true' '[.[] | select(.type == "stats" and .final) | .control.malformed][0] // 0')
	expect "final stats record: control.malformed = $n" ge "$n" 19
	sleep 2.5
	if ! kill -0 "$fp" 2>/dev/null; then
		fail_because "agentctl anomalies --follow ended when the agent went: $(cat "$T/follow.err")"
	elif agent_start ctl_bad_again --control-socket "$SOCK" --shim-socket none; then
		for ((i = 0; i < 50; i++)); do
			grep -q restarted "$T/follow.out" && break
			sleep 0.1
		done
		kill -INT "$fp"
		wait "$fp"
		rc=$?
		expect "agentctl anomalies --follow: exit $rc on SIGINT, want 0" [ "$rc" = 0 ]
		agent_stop INT || fail_because "agent did not exit on SIGINT"
	else
		fail_because "agent did not start again: $(agent_tail)"
	fi
	expect "agentctl anomalies --follow: stdout '$(cat "$T/follow.out")', want none, then the restart" \
		[ "$(cat "$T/follow.out")" = "no anomaly records (the agent keeps the last 256; 0 since it started)

the agent restarted: its records start anew" ]
	expect "agentctl anomalies --follow with the agent gone: stderr '$(cat "$T/follow.err")', want the reason and 'trying again' once each" \
		eval '[ "$(wc -l <"$T/follow.err")" = 3 ] && sed -n 1p "$T/follow.err" | grep -qx "agentctl: following: new records as they come (Ctrl-C ends)" &&
			sed -n 2p "$T/follow.err" | grep -q "^agentctl: no agent listens on $SOCK " && sed -n 3p "$T/follow.err" | grep -qx "agentctl: trying again every second"'
else
	fail_because "agent did not start: $(agent_tail)"
fi
report control_malformed
