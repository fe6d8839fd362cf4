#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# metrics - the Prometheus endpoint (--metrics ADDR:PORT, agent/control/metrics.c):
#
#   metrics_exposition:  /metrics is text exposition format 0.0.4: every
#                        sample line parses, belongs to a family announced by
#                        # HELP and # TYPE, counters end in _total, the
#                        agent's own counters are there (events by type, drops
#                        by stage, records produced, steps and anomalies by
#                        kind, CPU seconds, RSS), labels
#                        are low-cardinality (no pid, tid, instance, kernel);
#                        counters grow while a CUDA workload runs
#   metrics_promtool:    Prometheus's own checker, `promtool check metrics`
#                        (Debian's prometheus package, make deps), accepts
#                        the scrape taken while the workload runs, and every
#                        family the agent can announce is in it with at least
#                        one sample: each infertrace_* name in agent/control/metrics.c
#                        (the infertrace_kafka_* ones need --kafka:
#                        tests/integration/kafka.sh checks those); the alert
#                        expressions of docs/operations.md pass `promtool
#                        check rules` and name families the scrape serves
#   metrics_health:      /healthz and /readyz answer 200, unknown paths 404,
#                        other methods 405, a silent or oversized client does
#                        not stop the endpoint from answering others
source "$(dirname "$0")/lib.sh"
it_preflight metrics_exposition metrics_promtool metrics_health

# http PATH [METHOD]: the whole response (status line, headers, body); curl
# when installed, else bash's /dev/tcp
http() {
	local path=$1 method=${2:-GET}
	if [ -z "${IT_NO_CURL:-}" ] && command -v curl >/dev/null; then
		curl -s -i -X "$method" --max-time 5 "http://127.0.0.1:$PORT$path"
	else
		exec 3<>"/dev/tcp/127.0.0.1/$PORT" || return 1
		printf '%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$method" "$path" >&3
		timeout 5 cat <&3
		exec 3<&-
	fi
}
status_of() { head -n 1 | tr -d '\r' | awk '{print $2}'; }
body_of() { sed '1,/^\r\{0,1\}$/d'; }

started=
agent_start_metrics metrics -i 0.25 --control-socket none --shim-socket none && started=1
if [ -z "$started" ]; then
	fail_because "agent did not start: $(agent_tail)"
	report metrics_exposition
	report metrics_promtool
	report metrics_health
	exit 0
fi

# ------------------------------------------------------------ exposition ----
bg_start "$T/work.out" env INFERTRACE_INSTANCE=it-metrics-$$ "$CUDA_CALLS" -t 2 -s 4
wpid=$BG_PID
cuda_attached "$wpid" 10 || fail_because "workload not attached"
r1=$(http /metrics)
expect "GET /metrics: status $(status_of <<<"$r1")" [ "$(status_of <<<"$r1")" = 200 ]
expect "content type is not the 0.0.4 text format" \
	grep -qi '^Content-Type: text/plain; version=0.0.4' <<<"$r1"
b1=$(body_of <<<"$r1")
bad=$(grep -v '^#' <<<"$b1" | grep -v '^$' |
	grep -vE '^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*)?\})? -?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$' | head -n 3)
expect "sample lines that do not parse: $bad" [ -z "$bad" ]
# every family: HELP and TYPE before its first sample; counters end in _total
probs=$(awk '
	/^# HELP / { help[$3] = 1; next }
	/^# TYPE / { type[$3] = $4; next }
	/^$/ { next }
	{ name = $1; sub(/\{.*/, "", name)
	  # the series of a histogram family: NAME_bucket (with le), NAME_sum, NAME_count
	  base = name; sub(/_(bucket|sum|count)$/, "", base)
	  if (!(name in type) && type[base] == "histogram") {
	    if (name ~ /_bucket$/ && $1 !~ /le="/) { print "bucket without le: " $1; exit }
	    name = base
	  }
	  if (!(name in help) || !(name in type)) { print "no HELP/TYPE before " name; exit }
	  if (type[name] == "counter" && name !~ /_total$/) { print "counter without _total: " name; exit }
	  if (seen[name]++ == 0) n++ }
	END { if (n < 20) print "only " n " metric families" }' <<<"$b1")
expect "$probs" [ -z "$probs" ]
for m in 'infertrace_bpf_events_total{type="cuda_launch"}' 'infertrace_bpf_drops_total{type="offcpu"}' \
	'infertrace_drops_total{stage="bpf_ring"}' 'infertrace_drops_total{stage="sink"}' \
	'infertrace_drops_total{stage="steps"}' 'infertrace_steps_unjudged_total' \
	'infertrace_level_shifts_total' 'infertrace_anomaly_episodes_total' \
	'infertrace_records_emitted_total{class="summary"}' 'infertrace_process_cpu_seconds_total' \
	'infertrace_process_resident_memory_bytes' 'infertrace_traced_processes' \
	'infertrace_sink_records_total{sink="file"}' 'infertrace_recorder_bytes' \
	'infertrace_steps_total' 'infertrace_anomalies_total{kind="host_stall"}' \
	'infertrace_anomalies_total{kind="straggler"}'; do
	grep -qF "$m " <<<"$b1" || fail_because "missing $m"
done
rss=$(awk '$1 == "infertrace_process_resident_memory_bytes" {print int($2)}' <<<"$b1")
expect "RSS $rss bytes, want > 1 MiB" ge "${rss:-0}" 1048576
labels=$(grep -v '^#' <<<"$b1" | grep -oE '[{,][a-z_]+=' | tr -d '{,=' | sort -u | tr '\n' ' ')
expect "label names beyond type/class/stage/sink/reason/version/mode/kind/phase/le: $labels" \
	eval '[ -z "$(tr " " "\n" <<<"$labels" | grep -vxE "type|class|stage|sink|reason|version|mode|kind|phase|le|")" ]'
sleep 1.5
b2=$(http /metrics | body_of)
e1=$(awk '$1 == "infertrace_records_emitted_total{class=\"summary\"}" {print $2}' <<<"$b1")
e2=$(awk '$1 == "infertrace_records_emitted_total{class=\"summary\"}" {print $2}' <<<"$b2")
expect "summary records did not grow across 1.5 s ($e1 -> $e2)" eval '[ "${e2%.*}" -gt "${e1%.*}" ]'
report metrics_exposition

# -------------------------------------------------------------- promtool ----
# the scrape of the running workload, b1
if ! command -v promtool >/dev/null; then
	fail_because "promtool missing (make deps installs Debian's prometheus package)"
else
	lint=$(promtool check metrics <<<"$b1" 2>&1)
	rc=$?
	expect "promtool check metrics: exit $rc: $(head -n 3 <<<"$lint" | tr '\n' ' ')" \
		eval '[ "$rc" = 0 ] && [ -z "$lint" ]'
fi
# the alert expressions docs/operations.md gives: PromQL that promtool
# accepts as alerting rules, on families this scrape serves
exprs=$(awk '/^```/ { inb = !inb; next }
	inb && /infertrace_[a-z_]+/ && /^(sum|increase|rate|max|avg|histogram_quantile)[ (]/' docs/operations.md)
expect "no alert expressions found in docs/operations.md (pattern broken?)" [ -n "$exprs" ]
if command -v promtool >/dev/null && [ -n "$exprs" ]; then
	{
		echo "groups:"
		echo "  - name: docs"
		echo "    rules:"
		i=0
		while IFS= read -r e; do
			i=$((i + 1))
			echo "      - alert: Doc$i"
			printf '        expr: %s\n' "$(jq -Rn --arg e "$e" '$e')"
		done <<<"$exprs"
	} >"$T/doc_rules.yml"
	lint=$(promtool check rules "$T/doc_rules.yml" 2>&1)
	expect "promtool check rules on the docs' alerts: $(grep -m2 -iE 'error|fail' <<<"$lint" | tr '\n' ' ')" \
		grep -q 'SUCCESS' <<<"$lint"
	for m in $(grep -oE 'infertrace_[a-z0-9_]+' <<<"$exprs" | sort -u); do
		# a label the agent writes (the step histogram's infertrace_instance) is no series
		grep -qF "$m=" agent/control/metrics.c && continue
		# a family per instance has no sample before the first step: announced is served
		grep -qE "^$m(\{| )" <<<"$b1" || grep -qE "^# TYPE ${m%_bucket} (histogram|counter)$" <<<"$b1" ||
			fail_because "the docs alert on $m, which the agent does not serve"
	done
fi
# every family the source can announce, announced and with a sample
fams=$(grep -oE '"infertrace_[a-z0-9_]+' agent/control/metrics.c | tr -d '"' | grep -v '^infertrace_kafka_' | sort -u)
expect "no family names read from agent/control/metrics.c" [ -n "$fams" ]
for fam in $fams; do
	grep -qxF "# TYPE $fam $(awk -v f="$fam" '$1 == "#" && $2 == "TYPE" && $3 == f {print $4}' <<<"$b1")" <<<"$b1" ||
		{ fail_because "family $fam not announced"; continue; }
	# the step histogram's series and the anomalies per instance (--metrics-instances): none before a step
	case $fam in infertrace_step_duration_seconds | infertrace_instance_anomal*)
		grep -qx 'infertrace_steps_total 0' <<<"$b1" && continue ;;
	esac
	grep -qE "^$fam(_bucket|_sum|_count)?(\{| )" <<<"$b1" || fail_because "family $fam has no sample"
done
report metrics_promtool

# ---------------------------------------------------------------- health ----
expect "/healthz not 200" [ "$(http /healthz | status_of)" = 200 ]
r=$(http /readyz)
expect "/readyz: $(status_of <<<"$r") $(body_of <<<"$r")" [ "$(status_of <<<"$r")" = 200 ]
expect "/nope not 404" [ "$(http /nope | status_of)" = 404 ]
expect "POST /metrics not 405" [ "$(http /metrics POST | status_of)" = 405 ]
# a client that says nothing, and one that sends 8 KiB of headers
exec 4<>"/dev/tcp/127.0.0.1/$PORT"
{ printf 'GET /metrics HTTP/1.0\r\n'; head -c 8192 /dev/zero | tr '\0' 'x'; } >"$T/big.req"
exec 5<>"/dev/tcp/127.0.0.1/$PORT"
cat "$T/big.req" >&5 2>/dev/null
big=$(timeout 5 cat <&5 2>/dev/null | head -n 1 | tr -d '\r')
expect "oversized request: '$big', want 400" grep -q ' 400 ' <<<"$big"
expect "with a silent client open, /healthz does not answer" [ "$(http /healthz | status_of)" = 200 ]
exec 4<&- 5<&-
n=$(http /metrics | body_of | awk '$1 == "infertrace_metrics_scrapes_total" {print int($2)}')
expect "scrapes counter $n, want >= 3" ge "${n:-0}" 3
agent_stop INT || fail_because "agent did not exit on SIGINT"
[ "${AGENT_RC:-}" = 0 ] || fail_because "agent exit ${AGENT_RC:-?}: $(agent_tail)"
report metrics_health
