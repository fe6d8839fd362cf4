#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# churn - short-lived CUDA processes leave nothing behind in the agent
# (issue 18, finding 18). A live agent without --pid discovers 200 processes
# that load the real libcudart and call into it, 8 at a time: half wait
# 0.3 s before calling (the agent traces them), half exit at once (many are
# gone before discovery reads them). Every process the agent traced (an
# attach record) gets its exit record, the agent's traced_procs BPF map
# holds none of them afterwards, and its stats count the ones gone early;
# the per-thread state it holds is its live threads and at most 256 exited
# ones (the rest summed for the exit summary and freed).
# (Before the fix every start time read 0, so a process that exited before
# discovery added it stayed traced, in both tables, forever.) The long
# version with figures is `make soak` (tests/soak/churn.sh).
source "$(dirname "$0")/lib.sh"
it_preflight churn_no_leftovers

N=200

# the keys of the agent's own BPF map NAME (found by the map ids of its
# descriptors: other agents may run beside it), and how many there are
bpf_keys() {
	local id
	for id in $(grep -h '^map_id:' /proc/"$AGENT_PID"/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -u); do
		[ "$(bpftool map show id "$id" -j 2>/dev/null | jq -r .name)" = "$1" ] &&
			bpftool map dump id "$id" -j 2>/dev/null | jq -c '[.[] | .formatted.key]'
	done
}
bpf_entries() { bpf_keys "$1" | jq length; }

main() {
	local pids attached exited left n_ok i
	command -v bpftool >/dev/null || { fail_because "bpftool missing (make deps)"; return; }
	agent_start churn -i 0.2 --no-net || { fail_because "agent did not start: $(agent_tail)"; return; }
	sleep 0.5
	# odd runs wait before calling, even runs exit at once
	seq "$N" | xargs -P 8 -I{} sh -c 'if [ $(({} % 2)) = 1 ]; then exec "$1" -n 2 -d 0.3; else exec "$1" -n 2; fi' _ "$CUDA_CALLS" \
		>"$T/runs.jsonl" 2>"$T/runs.err"
	n_ok=$(grep -c '"rt":1' "$T/runs.jsonl")
	expect "workload runs that loaded libcudart: $n_ok of $N ($(head -c 200 "$T/runs.err"))" eq "$n_ok" "$N"
	pids=$(jq -c -s '[.[].pid]' "$T/runs.jsonl")
	# every traced one of ours exited, as the agent saw it: bounded wait
	for ((i = 0; i < 50; i++)); do
		# the process records only: the whole output grows with every thread record
		grep -F '"type":"process"' "$AGENT_OUT" | grep '}$' >"$T/procs.jsonl"
		attached=$(jq -s -c --argjson p "$pids" '[.[] | select(.event == "attach" and (.pid | IN($p[]))) | .pid] | unique' "$T/procs.jsonl")
		exited=$(jq -s -c --argjson p "$pids" '[.[] | select(.event == "exit" and (.pid | IN($p[]))) | .pid] | unique' "$T/procs.jsonl")
		[ "$attached" = "$exited" ] && break
		sleep 0.2
	done
	expect "processes of ours traced: $(jq length <<<"$attached") (none: the test proves nothing)" ge "$(jq length <<<"$attached")" 1
	expect "traced and never released: $(jq -c -n --argjson a "$attached" --argjson e "$exited" '$a - $e')" \
		[ "$attached" = "$exited" ]
	# the agent's own traced_procs map (other agents may run beside it)
	left=$(bpf_keys traced_procs)
	[ -n "$left" ] || left='[]'
	expect "our pids still in traced_procs: $(jq -c -n --argjson l "$left" --argjson p "$pids" '[$l[] | select(IN($p[]))]')" \
		eq "$(jq -n --argjson l "$left" --argjson p "$pids" '[$l[] | select(IN($p[]))] | length')" 0
	# per-thread state: live threads (the agent's thread_stats entries) and
	# at most 256 exited ones; bounded wait for the deletions (two intervals)
	local st held live bound
	for ((i = 0; i < 25; i++)); do
		sleep 0.2
		st=$(tac "$AGENT_OUT" | grep -m1 -F '"type":"stats"')
		held=$(jq .threads_held <<<"$st")
		live=$(bpf_entries thread_stats)
		bound=$((256 + ${live:-0}))
		ge "$bound" "$held" && break
	done
	expect "stats without processes_gone_early: $st" num "$(jq .processes_gone_early <<<"$st")"
	expect "per-thread entries held: $held, more than 256 + $live live threads" ge "$bound" "$held"
	expect "no exited thread summed and freed among $(jq '3 * length' <<<"$attached") traced threads: $(jq -c '{threads_held, threads_exited_unlisted}' <<<"$st")" \
		ge "$(jq .threads_exited_unlisted <<<"$st")" 1
	agent_stop INT || fail_because "agent did not exit on SIGINT"
	echo "INFO churn_no_leftovers: $N processes, $(jq length <<<"$attached") traced and released, processes_gone_early $(jq .processes_gone_early <<<"$st"), threads held $held (live $live), exited threads summed and freed $(jq .threads_exited_unlisted <<<"$st")"
}

main
report churn_no_leftovers
