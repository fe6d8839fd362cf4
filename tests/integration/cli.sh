#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# cli - what the agent says and does at the edges: bad input gives one clear
# error line and a non-zero exit; --help lists every option and examples,
# and its texts (the agent's and agentctl's) fit argp's margin unbroken;
# SIGTERM and --duration end the agent cleanly (exit 0, final stats record).
source "$(dirname "$0")/lib.sh"
it_preflight bad_input_unknown_option bad_input_no_such_pid bad_input_values bad_input_not_root \
	help shutdown_sigterm shutdown_duration

# run_agent NAME ARGS...: run to completion (bounded), stderr in $T/NAME.err,
# exit status in RC
run_agent() {
	local name=$1
	shift
	timeout 30 "$AGENT" "$@" >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	ERR=$(cat "$T/$name.err")
}
# the one error line: the first line of stderr that is not an info message
err_line() { grep -a -v ': info: ' <<<"$ERR" | head -n 1; }

# ------------------------------------------------------------- bad input ---
run_agent unknown --bogus-option
expect "exit $RC, want non-zero" [ "$RC" -ne 0 ]
expect "error line does not name the option: '$(err_line)'" grep -q -- '--bogus-option' <<<"$(err_line)"
# one error line; what follows is argp's hint (what to do), which argp may
# wrap over two lines
rest=$(tail -n +2 <<<"$ERR" | tr '\n' ' ')
expect "after the error line, not just the --help hint: '$rest'" \
	eval '[[ "$rest" =~ ^Try\ .*--help.*$ ]] && ! grep -q -- --bogus-option <<<"$rest"'
report bad_input_unknown_option

nopid=999999
while [ -e "/proc/$nopid" ]; do nopid=$((nopid + 1)); done
run_agent nopid --pid "$nopid" -o "$T/nopid.jsonl"
expect "exit $RC, want non-zero" [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ]
line=$(err_line)
expect "error line '$line' lacks 'no such process' and the pid" \
	grep -qiE -- "$nopid.*no such process|no such process.*$nopid" <<<"$line"
expect "error is not one line: $ERR" eq "$(grep -v ': info: ' <<<"$ERR" | grep -c .)" 1
report bad_input_no_such_pid

# each bad value: its option and the value named on the error line
for spec in "--interval abc" "--mode fast" "--duration -1" "--interval 0" "--stack-rate many" \
	"--pid abc" "--ringbuf-kib 100" "--syscall-threshold x" "--detect model=fast" \
	"--instance a"$'\xff'"b"; do
	read -r opt val <<<"$spec"
	run_agent values "$opt" "$val"
	line=$(err_line)
	expect "$spec: exit $RC, want non-zero" [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ]
	expect "$spec: error line '$line' does not name $opt and '$val'" \
		eval 'grep -qF -- "$opt" <<<"$line" && grep -qF -- "$val" <<<"$line"'
done
report bad_input_values

# not root: setpriv drops to nobody, and with it every capability
if ! command -v setpriv >/dev/null; then
	skip bad_input_not_root "setpriv (util-linux) missing"
else
	nb=$(mktemp -d /tmp/infertrace-nobody.XXXXXX)
	chmod 755 "$nb"
	cp "$AGENT" "$nb/infertrace-agent" && chmod 755 "$nb/infertrace-agent"
	(cd "$nb" && timeout 30 setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$nb/infertrace-agent" -d 1 >"$T/nobody.out" 2>"$T/nobody.err")
	RC=$?
	ERR=$(cat "$T/nobody.err")
	rm -rf "$nb"
	line=$(err_line)
	expect "exit $RC, want non-zero" [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ]
	expect "error line '$line' names neither root nor CAP_BPF" \
		eval 'grep -q root <<<"$line" && grep -q CAP_BPF <<<"$line"'
	expect "nothing written to stdout as nobody: $(head -c 100 "$T/nobody.out")" [ ! -s "$T/nobody.out" ]
	report bad_input_not_root
fi

# ------------------------------------------------------------------ help ---
run_agent help --help
expect "--help exit $RC, want 0" [ "$RC" -eq 0 ]
help=$(cat "$T/help.out")
for o in mode interval duration output pid instance offcpu-threshold runq-threshold \
	syscall-threshold sync-threshold no-stacks stack-rate ringbuf-kib max-threads summary \
	no-net replay verbose help version; do
	expect "--help does not show --$o" grep -q -- "--$o" <<<"$help"
done
ex=$(sed -n '/EXAMPLES/,/^$/p' <<<"$help" | grep -c '^ *infertrace-agent')
expect "--help shows $ex examples, want >= 3" ge "$ex" 3
# argp re-wraps a text line of 79 columns or more at a word, which split
# an example's last option onto a line of its own: with the margin moved
# out of the way, every line of the texts (not argp's option column, from
# column 29) must fit in 78
for tool in "$AGENT" "$BUILD/agentctl"; do
	long=$(ARGP_HELP_FMT=rmargin=1000 "$tool" --help 2>&1 | awk '{ match($0, /^ */) }
		RLENGTH < 29 && !/^  -|^      --|^Mandatory or optional/ && length($0) > 78' | head -n 2)
	expect "$(basename "$tool") --help: lines argp re-wraps: $long" [ -z "$long" ]
done
report help

# --------------------------------------------------------------- shutdown ---
final_check() { # the last record is the one final stats record
	local last nfinal
	last=$(tail -n 1 "$AGENT_OUT" | jq -c '{type, final}' 2>/dev/null)
	nfinal=$(jqo '[.[] | select(.type == "stats" and .final == true)] | length')
	expect "last record $last, want the final stats record" [ "$last" = '{"type":"stats","final":true}' ]
	expect "$nfinal final stats records, want 1" eq "$nfinal" 1
	expect "unparsable lines in the output" eq "$(jq -R 'fromjson? // "bad" | select(. == "bad")' "$AGENT_OUT" | grep -c .)" 0
}

if agent_start sigterm -i 0.25; then
	wait_record '.type=="stats"' 10 || fail_because "no stats record while running"
	if agent_stop TERM; then
		expect "exit $AGENT_RC after SIGTERM, want 0: $(agent_tail)" [ "$AGENT_RC" = 0 ]
		final_check
	else
		fail_because "agent still running 15 s after SIGTERM"
	fi
else
	fail_because "agent did not start: $(agent_tail)"
fi
report shutdown_sigterm

AGENT_OUT=$T/duration.jsonl
AGENT_ERR=$T/duration.err
"$AGENT" -o "$AGENT_OUT" --duration 1 -i 0.25 2>"$AGENT_ERR" &
AGENT_PID=$!
_it_pids+=("$AGENT_PID")
if wait_exit "$AGENT_PID" 20; then
	expect "exit $WAIT_RC with --duration 1, want 0: $(agent_tail)" [ "$WAIT_RC" = 0 ]
	final_check
else
	fail_because "agent still running 20 s after start with --duration 1"
fi
report shutdown_duration
