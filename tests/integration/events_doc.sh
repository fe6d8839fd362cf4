#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# docs/events.md is the schema contract: every field the code can emit must
# be listed there.
#   events_doc_static:  every JSON key the sources set (json_object_set_new,
#                       json_pack) appears in docs/events.md
#   events_doc_runtime: every (type, field) in a real deep-mode run, nested
#                       array members included, is listed under that type's
#                       section (or among the common fields)
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
DOC=docs/events.md
tmp=$(mktemp -d)
agent_pid=
cleanup() {
	[ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# --- static: keys in the sources ------------------------------------------
missing=""
# the sources as one line each (a call clang-format broke after "(" or "r,"
# still matches), string literals and all
flat() { for f in agent/*.c agent/{core,sinks,pipeline,sources,control}/*.c correlator/src/*.c; do
	[ -f "$f" ] && tr '\n\t' '  ' <"$f" && echo; done; }
keys=$( { flat | grep -ohE 'json_object_set_new\( *[a-z_]+, *"[a-z0-9_]+"' |
	sed -E 's/.*"([a-z0-9_]+)"/\1/'
	flat | grep -ohE 'json_pack\( *"[^"]*"[^;]*' |
	grep -oE '"[a-z_][a-z0-9_]*"' | tr -d '"'
	# keys written from a table: KS("name", member) in agent/sinks/sink_kafka.c
	flat | grep -ohE 'KS\( *"[a-z0-9_]+"' |
	sed -E 's/.*"([a-z0-9_]+)"/\1/'
	# keys written from a table: {"name", value} rows of set_counts() in agent/control/stats.c
	awk '/^static void set_counts\(/,/^}/' agent/control/stats.c | grep -oE '^[[:space:]]*\{"[a-z0-9_]+",' |
	sed -E 's/.*"([a-z0-9_]+)".*/\1/'
	# keys of the hand writer (correlator/include/jsonw.h): jw_uint(&w, "name", ...)
	flat | grep -ohE 'jw_[a-z_]+\( *&?[a-z]+, *"[a-z0-9_]+"' |
	sed -E 's/.*"([a-z0-9_]+)"/\1/'; } | sort -u)
for k in $keys; do
	grep -qE "\`([a-z_]+(\[\])?\.)?$k\`" "$DOC" || missing="$missing $k"
done
if [ -z "$keys" ]; then
	echo "FAIL events_doc_static: found no JSON keys in the sources (pattern broken?)"
elif [ -n "$missing" ]; then
	echo "FAIL events_doc_static: keys set in the code but not in $DOC:$missing"
else
	echo "PASS events_doc_static"
fi

# --- runtime: a deep-mode run with the CUDA workload ------------------------
if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP events_doc_runtime: needs root to load BPF"
	exit 0
fi
# "type field" pairs the document lists; common fields under type "*"
awk '
	/^## Common fields/ { sec = "*"; common = 1; next }
	/^### `/ {
		# a heading may name several types: ### `kernel`, `memcpy`, `memset`
		sec = ""; s = $0
		while (match(s, /`[a-z_]+`/)) {
			sec = sec " " substr(s, RSTART + 1, RLENGTH - 2); s = substr(s, RSTART + RLENGTH)
		}
		next
	}
	/^##/ { sec = "" }
	# every name in the first cell: | `window_start_ns`, `window_end_ns` |
	sec != "" && /^\| `/ {
		c = $0; sub(/^\| /, "", c); sub(/ \|.*$/, "", c)
		n = split(sec, types, " ")
		while (match(c, /`[^`]+`/)) {
			f = substr(c, RSTART + 1, RLENGTH - 2); c = substr(c, RSTART + RLENGTH)
			for (i = 1; i <= n; i++) print types[i], f
		}
	}
' "$DOC" | sort -u >"$tmp/doc"

"$BUILD/infertrace-agent" --mode deep -o "$tmp/out.jsonl" -d 6 --stack-rate 20 \
	--syscall-threshold 0 2>"$tmp/agent.err" &
agent_pid=$!
for _ in $(seq 50); do
	grep -q '"running in' "$tmp/agent.err" 2>/dev/null && break
	grep -q 'info: running' "$tmp/agent.err" 2>/dev/null && break
	sleep 0.1
done
"$BUILD/tests/integration/cuda_calls" -t 2 -s 2 >/dev/null 2>&1
# NCCL's records: the real libnccl.so.2 (collective, nccl_comm, nccl_group),
# called once the agent had time to attach to the library it dlopen()ed
if [ -x "$BUILD/tests/integration/nccl_calls" ]; then
	"$BUILD/tests/integration/nccl_calls" -t 2 -n 2 -w "$tmp/nccl.go" >/dev/null 2>&1 &
	for _ in $(seq 100); do
		grep -q 'NCCL probes' "$tmp/agent.err" 2>/dev/null && break
		sleep 0.1
	done
	touch "$tmp/nccl.go"
	wait $!
fi
wait "$agent_pid"
rc=$?
agent_pid=
if [ "$rc" -ne 0 ] || [ ! -s "$tmp/out.jsonl" ]; then
	echo "FAIL events_doc_runtime: agent exit $rc, $(head -c 300 "$tmp/agent.err")"
	exit 0
fi
# every (type, key) and (type, array[].key) the run produced
jq -r '. as $r | ($r | keys[]) as $k |
	($r.type + " " + $k),
	(if ($r[$k] | type) == "array" then
		($r[$k][] | select(type == "object") | keys[] | ($r.type + " " + $k + "[]." + .))
	 else empty end)' "$tmp/out.jsonl" | sort -u >"$tmp/seen"
undocumented=""
while read -r type field; do
	grep -qxF "$type $field" "$tmp/doc" || grep -qxF "* $field" "$tmp/doc" ||
		undocumented="$undocumented $type.$field"
done <"$tmp/seen"
ntypes=$(cut -d' ' -f1 "$tmp/seen" | sort -u | wc -l)
if [ -n "$undocumented" ]; then
	echo "FAIL events_doc_runtime: emitted but not in $DOC:$undocumented"
elif [ "$ntypes" -lt 5 ]; then
	echo "FAIL events_doc_runtime: only $ntypes record types seen in the run"
else
	echo "PASS events_doc_runtime ($ntypes record types, $(wc -l <"$tmp/seen") fields checked)"
fi
