#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# replay - `infertrace-agent --replay FILE` as an unprivileged user (uid
# 65534, no groups, no capabilities) on every recording format (issue 3):
#
#   replay_kineto_gz:     vLLM H100 trace: 13,508 kernels, every one joined,
#                         graph-replayed kernels to their cudaGraphLaunch
#   replay_kineto_unmatched: HF Qwen H100: 1,029 kernels joined, 436 reported
#                         unmatched (launched before the window)
#   replay_kineto_plain:  DeepSeek-V3 (plain JSON): 963 kernels joined
#   replay_nsys:          CloverLeaf Nsight SQLite export: 1,312 kernels joined
#   replay_jsonl:         our own deep-mode output replayed gives the same
#                         records (pairs, counts)
#   replay_malformed:     truncated gzip / JSON / JSON lines, a corrupt
#                         SQLite file, an unknown format, an empty or blank
#                         file ("empty", not "unknown format"): exit non-zero (not a
#                         signal), an error naming the offset, line or table,
#                         a replay_status with ok=false where a record can be
#                         written; also a Kineto trace cut or corrupted after
#                         its traceEvents (issue 18 #14), JSON lines that are
#                         not ours (#15)
#   replay_streams:       a FIFO, a pipe (<(zcat trace.gz)), an nsys export
#                         through a pipe, a UTF-8 BOM: the same kernels as
#                         the file (issue 18 #13, #15)
#   replay_stop:          SIGTERM while waiting for a FIFO's writer and
#                         SIGINT in the middle of a long replay: exit 1 (not
#                         killed by the signal), "stopped by a signal",
#                         replay_status interrupted=true, the records read so
#                         far written (issue 18 #13). Then SIGINT while the
#                         steps of a whole recording are cut (gdb holds the
#                         agent at its 51st step of 200): exit 1, the 51
#                         steps cut so far written and judged, diag_status
#                         interrupted=true
#   replay_overlap:       a forged recording whose 12,000 steps are one
#                         instant: each record counted in one step, the last
#                         (each step counted every record, and the cut was
#                         quadratic),
#                         a thread's overlapping off-CPU records cut and
#                         counted (diag_status.cpu_events_overlapping), the
#                         off-CPU records of a process without steps
#                         counted (cpu_events_outside_steps; they went
#                         uncounted at the last cut)
#   replay_step_keys:     a step stream of 4,100 instances: 4,096 baselines
#                         kept, the 4 others' steps counted in
#                         diag_status.keys_dropped and warned of once
#   replay_level_shift:   a step stream 1.5x slower for good after 300 steps:
#                         64 anomalies numbered by their run (1..64), then
#                         one level_shift record for the 64th step, counted
#                         in diag_status.level_shifts and logged; the level
#                         is not flagged after it; --summary says the same
#   replay_launch_python: a deep recording's launch_python (the launch's
#                         Python frames) written again on the replayed
#                         kernel, and drawn in the Perfetto output's launch
#                         slice (args.python); frames in a shape the agent
#                         never writes (a string, 33 frames, an element that
#                         is not an object) dropped and counted
#                         (replay_status.launch_python_bad), the kernel kept;
#                         odd fields cleaned as live names are (a number as
#                         function: "?", a control character: "?", a line
#                         that is not a number left out, a name of 300
#                         2-byte characters cut at a character: 63); with
#                         --python-stacks off, none written; two ranks' Kineto
#                         traces with the same pid and tid: each kernel gets
#                         its own file's Python calls only; --summary's GPU
#                         time by Python call holds the two kernels kept with
#                         frames, as tests/integration/pyprof_check.py reads
#                         them again from the kernel records; of 4,000
#                         distinct stacks it keeps 3,072 and counts the rest
#                         on a line of their own
#   replay_kineto_python: the three real traces recorded with Python stacks
#                         (vLLM Llama TP4 on H100, vLLM TP8 eager on B200, HF
#                         Qwen on H100): every joined GPU record carries the
#                         Python calls open at its launch on the launching
#                         thread (launch_python: function, file, first_line),
#                         exactly those that tests/integration/kineto_frames.py
#                         works out on its own from the trace (13,818, 929 and
#                         1,198 records); the vLLM trace's Perfetto output
#                         has args.python on every launch slice. --summary's
#                         GPU time by the Python calls that launched it: each
#                         line's time and records, its chain of single
#                         calls, the sums under each call, as
#                         pyprof_check.py works them out from the kernel
#                         records; a sentinel replay (no kernel records
#                         written) prints the same tree; --python-stacks off
#                         prints none
#   replay_gpu_summary:   --summary's GPU records on every real trace
#                         (Kineto, Nsight Systems): records by kind and joined,
#                         per device the span, the busy time (the union of
#                         activity, records out of order: the V100 DDP
#                         trace's 22,050 idle gaps), launch-to-start
#                         quantiles, copies by direction and every kernel
#                         row (demangled), as tests/integration/
#                         gpusum_check.py works them out from the records
#   replay_step_summary:  the same replays' --summary steps: count, per phase
#                         p50/p90/p99 (within 6.25%) and max, the five
#                         longest steps with their instance, rank, pid,
#                         start_ns and flagging anomaly, as tests/integration/
#                         steps_check.py works them out from the step and
#                         anomaly records (and in replay_level_shift: 64
#                         anomalies, the flagged among the longest named)
#   replay_instance_summary: --summary per instance on a stream of ten
#                         (one with a control byte in its name, one slowing
#                         down for good): the first 8 by their first step,
#                         the other 2 together, each with its steps per phase
#                         and its anomaly records by kind, as steps_check.py
#                         works them out; one instance: no such part
#
# Real data comes from $INFERTRACE_DATA (default ../shared/data); cases skip
# when it is absent.
source "$(dirname "$0")/lib.sh"
DATA=${INFERTRACE_DATA:-$IT_ROOT/../shared/data}
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
CASES=(replay_kineto_gz replay_kineto_unmatched replay_kineto_plain replay_nsys replay_jsonl
	replay_malformed replay_streams replay_stop replay_overlap replay_step_keys replay_level_shift
	replay_launch_python replay_kineto_python replay_gpu_summary replay_step_summary
	replay_instance_summary)

if [ ! -x "$AGENT" ] || ! command -v jq >/dev/null; then
	for n in "${CASES[@]}"; do echo "FAIL $n: $AGENT not built or jq missing"; done
	exit 0
fi
if [ "$(id -u)" -ne 0 ] && ! command -v setpriv >/dev/null; then
	NOBODY=() # already unprivileged
fi
chmod 0755 "$T"
mkdir -p "$T/out" && chmod 0777 "$T/out"

# replay NAME FILE [agent args...]: as nobody; output in $T/out/NAME.jsonl,
# stderr in $T/NAME.err, exit status in RC
replay() {
	local name=$1 file=$2
	shift 2
	OUT=$T/out/$name.jsonl ERR=$T/$name.err
	rm -f "$OUT"
	"${NOBODY[@]}" "$AGENT" --replay "$file" -o "$OUT" "$@" 2>"$ERR"
	RC=$?
}
status() { jq -c -n -R '[inputs | fromjson? | select(.type == "replay_status")] | .[0] // {}' "$OUT"; }
# kernel records: total, joined, unmatched
kernels() {
	jq -r -n -R '[inputs | fromjson? | select(.type == "kernel")]
		| "\(length) \(map(select(.matched)) | length) \(map(select(.matched | not)) | length)"' "$OUT"
}

# check_trace NAME FILE KERNELS JOINED: deep replay, counts exact, every
# kernel of a graph replay named after a graph launch
check_trace() {
	local name=$1 file=$2 want_k=$3 want_j=$4 st n j u bad
	if [ ! -r "$DATA/$file" ]; then
		skip "$name" "$DATA/$file absent (set INFERTRACE_DATA)"
		return
	fi
	replay "$name" "$DATA/$file" --mode deep
	expect "exit $RC: $(tail -n 2 "$ERR" | tr '\n' '|')" [ "$RC" = 0 ]
	st=$(status)
	expect "replay_status not ok: $st" [ "$(jq -r .ok <<<"$st")" = true ]
	expect "replay_status.kernels $(jq .kernels <<<"$st"), want $want_k" eq "$(jq .kernels <<<"$st")" "$want_k"
	read -r n j u <<<"$(kernels)"
	expect "$n kernel records, want $want_k" eq "$n" "$want_k"
	expect "$j kernels joined, want $want_j" eq "$j" "$want_j"
	expect "$u kernels unmatched, want $((want_k - want_j))" eq "$u" $((want_k - want_j))
	bad=$(jq -r -n -R '[inputs | fromjson? | select(.type == "kernel" and .matched
		and ((.pid | type) != "number" or (.tid | type) != "number" or (.launch_api | type) != "string"
		     or .launch_src != "trace" or (.launch_ts_ns | type) != "number"))] | length' "$OUT")
	expect "$bad joined kernels without pid, tid, launch_api or launch_ts_ns" eq "$bad" 0
	report "$name"
}

check_trace replay_kineto_gz kineto/tracemap_vllm_llama_tp4_h100_rank0.pt.trace.json.gz 13508 13508
# the graph launches of that trace: 729 cudaGraphLaunch own 963 x 9 decode kernels
if [ -r "$DATA/kineto/tracemap_vllm_llama_tp4_h100_rank0.pt.trace.json.gz" ]; then
	g=$(jq -r -n -R '[inputs | fromjson? | select(.type == "kernel" and .launch_api == "cudaGraphLaunch")]
		| "\(length) \(map(.correlation_id) | unique | length)"' "$T/out/replay_kineto_gz.jsonl")
	read -r gk gl <<<"$g"
	expect "$gk kernels from cudaGraphLaunch, want 8667 (963 per decode step x 9)" eq "$gk" 8667
	expect "$gl distinct graph launches, want 729" eq "$gl" 729
	report replay_kineto_graphs
fi
check_trace replay_kineto_unmatched kineto/tracelens_hf_qwen1.5-0.5b_h100.json.gz 1465 1029
check_trace replay_kineto_plain kineto/deepseek_v3_train_h800_rank0.json 963 963
check_trace replay_nsys nsys/pipit_cloverleaf_a100.nsys.sqlite 1312 1312

# ------------------------------------------------------------------ jsonl --
# our deep output of a real trace, replayed: the same records come out
src=kineto/hta_sampled_rank-0.json.gz
if [ ! -r "$DATA/$src" ]; then
	skip replay_jsonl "$DATA/$src absent"
else
	replay first "$DATA/$src" --mode deep
	first=$OUT
	replay replay_jsonl "$first" --mode deep
	expect "exit $RC: $(tail -n 2 "$ERR" | tr '\n' '|')" [ "$RC" = 0 ]
	st=$(status)
	expect "format $(jq -r .format <<<"$st"), want jsonl" [ "$(jq -r .format <<<"$st")" = jsonl ]
	pairs() {
		jq -c -n -R '[inputs | fromjson? | select(.type == "kernel" or .type == "memcpy" or .type == "memset")
			| [.type, .correlation_id, .start_ns, .end_ns, .pid, .tid, .launch_api, .launch_ts_ns, .launch_src, .matched, .name]]
			| sort' "$1" | md5sum
	}
	expect "replayed records differ from the first replay's" [ "$(pairs "$first")" = "$(pairs "$OUT")" ]
	read -r n j u <<<"$(kernels)"
	expect "$n kernels / $j joined, want 1154 / 1154" [ "$n $j" = "1154 1154" ]
	report replay_jsonl
fi

# -------------------------------------------------------------- malformed --
# mal NAME FILE REGEX: fails cleanly with an error matching REGEX
mal() {
	local name=$1 file=$2 re=$3 st
	replay "mal_$name" "$file" --mode deep
	if [ "$RC" = 0 ]; then
		fail_because "$name: exit 0"
	elif [ "$RC" -ge 126 ]; then
		fail_because "$name: exit $RC (crash or signal)"
	fi
	grep -qE "$re" "$ERR" || fail_because "$name: no error matching /$re/: $(tail -n 2 "$ERR" | tr '\n' '|')"
	st=$(status)
	[ "$(jq -r .ok <<<"$st")" = false ] || fail_because "$name: replay_status $st"
}
gz=$DATA/kineto/hta_sampled_rank-0.json.gz
if [ ! -r "$gz" ]; then
	skip replay_malformed "$gz absent"
else
	size=$(stat -c %s "$gz")
	head -c $((size / 2)) "$gz" >"$T/cut.json.gz"
	mal gzip "$T/cut.json.gz" 'gzip: truncated.*offset [0-9]+'
	gunzip -c "$gz" | head -c 300000 >"$T/cut.json"
	mal json "$T/cut.json" 'offset [0-9]+'
	head -n 20 "$T/out/first.jsonl" >"$T/cut.jsonl"
	printf '{"schema":1,"type":"kernel","pid":1,' >>"$T/cut.jsonl"
	mal jsonl_truncated "$T/cut.jsonl" 'line 21 .*truncated'
	{ head -n 5 "$T/out/first.jsonl"; echo '{"type":"kernel",,}'; } >"$T/bad.jsonl"
	mal jsonl_bad "$T/bad.jsonl" 'line 6'
	{ printf 'SQLite format 3\000'; head -c 8192 /dev/urandom; } >"$T/bad.sqlite"
	mal sqlite "$T/bad.sqlite" 'sqlite|SQLite|table'
	printf 'hello, not a trace\n' >"$T/bad.txt"
	mal unknown "$T/bad.txt" 'unknown format'
	# nothing to replay: an empty file, blank lines, an empty gzip stream
	: >"$T/empty.json"
	mal empty "$T/empty.json" 'empty\.json: empty: no records to replay'
	printf '\n  \n' >"$T/blank.jsonl"
	mal blank "$T/blank.jsonl" 'blank\.jsonl: empty: no records to replay'
	printf '' | gzip >"$T/empty.json.gz"
	mal empty_gzip "$T/empty.json.gz" 'empty\.json\.gz: empty: no records to replay'
	mal missing "$T/does-not-exist.json" 'No such file'
	# issue 18 #14: after traceEvents (the last key of this trace): the closing
	# brace cut, more keys cut, data after the end
	gunzip -c "$gz" | head -c -1 >"$T/after_cut.json"
	mal after_events_cut "$T/after_cut.json" 'byte offset [0-9]+'
	{ gunzip -c "$gz" | head -c -1; printf ', "deviceProperties": [{"id": 0, "na'; } >"$T/after_more.json"
	mal after_events_more "$T/after_more.json" 'byte offset [0-9]+'
	{ gunzip -c "$gz"; printf '}\n'; } >"$T/after_data.json"
	mal after_events_data "$T/after_data.json" 'byte offset [0-9]+: data after the end'
	# issue 18 #15: JSON lines whose first line has no type are not a Kineto trace
	printf '{"timestamp": 0, "input_length": 5}\n{"timestamp": 1, "input_length": 7}\n' >"$T/requests.jsonl"
	mal jsonl_not_ours "$T/requests.jsonl" 'JSON lines: line 1: no string "type"'
	report replay_malformed
fi

# ---------------------------------------------------------------- streams --
# same_kernels A B: the kernel records of two outputs agree (instance aside)
same_kernels() {
	local f
	for f in "$1" "$2"; do
		jq -c -n -R '[inputs | fromjson? | select(.type == "kernel") | del(.instance)] | sort' "$f" |
			md5sum
	done | uniq | wc -l
}
if [ ! -r "$gz" ] || [ ! -s "$T/out/first.jsonl" ]; then
	skip replay_streams "$gz absent"
else
	# as this user: a pipe of process substitution belongs to the shell's user
	rm -f "$T/fifo" && mkfifo "$T/fifo"
	(cat "$gz" >"$T/fifo" &)
	OUT=$T/out/fifo.jsonl
	"$AGENT" --replay "$T/fifo" --mode deep -o "$OUT" 2>"$T/fifo.err"
	expect "FIFO: exit $?: $(tail -n 1 "$T/fifo.err")" [ "$(status | jq -r .ok)" = true ]
	expect "FIFO: kernels differ from the file's" eq "$(same_kernels "$T/out/first.jsonl" "$OUT")" 1
	OUT=$T/out/pipe.jsonl
	"$AGENT" --replay <(gunzip -c "$gz") --mode deep -o "$OUT" 2>"$T/pipe.err"
	expect "pipe: exit $?: $(tail -n 1 "$T/pipe.err")" [ "$(status | jq -r .ok)" = true ]
	expect "pipe: format $(status | jq -r .format)" [ "$(status | jq -r .format)" = kineto ]
	expect "pipe: kernels differ from the file's" eq "$(same_kernels "$T/out/first.jsonl" "$OUT")" 1
	OUT=$T/out/bom.jsonl
	"$AGENT" --replay <(printf '\xef\xbb\xbf'; gunzip -c "$gz") --mode deep -o "$OUT" 2>"$T/bom.err"
	expect "BOM: exit $?: $(tail -n 1 "$T/bom.err")" [ "$(status | jq -r .ok)" = true ]
	expect "BOM: kernels differ from the file's" eq "$(same_kernels "$T/out/first.jsonl" "$OUT")" 1
	nsys=$DATA/nsys/pipit_cloverleaf_a100.nsys.sqlite
	if [ -r "$nsys" ]; then
		OUT=$T/out/nsys_pipe.jsonl
		"$AGENT" --replay <(cat "$nsys") --mode deep -o "$OUT" 2>"$T/nsys_pipe.err"
		read -r n j u <<<"$(kernels)"
		expect "nsys through a pipe: $n kernels, $j joined, want 1312 / 1312" [ "$n $j" = "1312 1312" ]
		expect "nsys through a pipe: format $(status | jq -r .format)" \
			[ "$(status | jq -r .format)" = nsys-sqlite ]
	fi
	report replay_streams
fi

# ------------------------------------------------------------------- stop --
# signalled PID SIG WHAT SECS: signal the agent, wait at most SECS for its
# exit (then kill -9 and say so); its exit status in rc
signalled() {
	local pid=$1 sig=$2 what=$3 secs=$4 i
	kill -"$sig" "$pid"
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		fail_because "$what: still running $secs s after SIG$sig"
		kill -9 "$pid"
	fi
	wait "$pid"
	rc=$?
}
# stopped PID SIG WHAT: signalled within 30 s, exit 1, replay_status interrupted
stopped() {
	local what=$3 rc
	signalled "$1" "$2" "$what" 30
	expect "$what: exit $rc, want 1 (not killed by the signal)" eq "$rc" 1
	expect "$what: no 'stopped by a signal' in $(tail -n 2 "$ERR" | tr '\n' '|')" \
		grep -q 'stopped by a signal' "$ERR"
	expect "$what: replay_status $(status)" [ "$(status | jq -r '.interrupted and (.ok | not)')" = true ]
}
# a FIFO nobody writes: the agent waits in open(); SIGTERM ends it
rm -f "$T/fifo2" && mkfifo "$T/fifo2"
OUT=$T/out/stop_fifo.jsonl ERR=$T/stop_fifo.err
"$AGENT" --replay "$T/fifo2" -o "$OUT" 2>"$ERR" &
pid=$!
# until it waits in openat (syscall 257 on x86-64, 56 on arm64), bounded
for ((i = 0; i < 100; i++)); do
	grep -qE '^(257|56) ' /proc/$pid/syscall 2>/dev/null && break
	sleep 0.1
done
stopped "$pid" TERM "FIFO without a writer"
# SIGINT in the middle: 400,000 JSON-lines kernel records (~90 MB)
awk 'BEGIN { for (i = 0; i < 400000; i++)
	printf "{\"schema\":1,\"type\":\"kernel\",\"pid\":%d,\"tid\":%d,\"correlation_id\":%d,\"start_ns\":%d,\"end_ns\":%d,\"name\":\"k\",\"launch_ts_ns\":%d,\"launch_api\":\"cudaLaunchKernel\"}\n",
		100 + i % 50, 100 + i % 50, i + 1, 1e9 + i * 1e4 + 5e3, 1e9 + i * 1e4 + 9e3, 1e9 + i * 1e4 }' \
	>"$T/long.jsonl"
OUT=$T/out/stop_long.jsonl ERR=$T/stop_long.err
"$AGENT" --replay "$T/long.jsonl" --mode deep -o "$OUT" 2>"$ERR" &
pid=$!
# until the first records are out, bounded
for ((i = 0; i < 600; i++)); do
	[ -s "$OUT" ] && break
	sleep 0.1
done
stopped "$pid" INT "SIGINT mid-replay"
n=$(jq -r -n -R '[inputs | fromjson? | select(.type == "kernel")] | length' "$OUT")
expect "SIGINT mid-replay: $n kernel records written, want some and fewer than 400000" between "$n" 1 399999
expect "SIGINT mid-replay: replay_status.gpu_records $(status | jq .gpu_records) != $n records" \
	eq "$(status | jq .gpu_records)" "$n"
# SIGINT in the one cut at the end: 200 automatic steps; gdb holds the
# agent as it starts the 51st (diag_step_init) and lets it go with SIGINT
awk 'BEGIN { for (s = 0; s < 200; s++) for (k = 0; k < 4; k++) {
	l = 1000000 + s * 100000 + k * 1000
	printf "{\"schema\":1,\"type\":\"%s\",\"pid\":100,\"tid\":100,\"correlation_id\":%d,\"start_ns\":%d,\"end_ns\":%d,\"copy_kind\":%d,\"launch_ts_ns\":%d,\"launch_api\":\"cudaLaunchKernel\"}\n",
		k == 3 ? "memcpy" : "kernel", 4 * s + k + 1, l + 100, l + 500, k == 3 ? 2 : 0, l } }' >"$T/cut200.jsonl"
OUT=$T/out/stop_cut.jsonl ERR=$T/stop_cut.err
if ! command -v gdb >/dev/null; then
	fail_because "SIGINT while cutting: gdb is not installed (make deps)"
else
	timeout 120 gdb -batch -nx -ex 'handle SIGINT nostop noprint pass' -ex 'break diag_step_init' \
		-ex 'ignore 1 50' -ex run -ex 'signal SIGINT' -ex delete -ex continue \
		--args "$AGENT" --replay "$T/cut200.jsonl" -o "$OUT" >"$T/stop_cut.gdb" 2>"$ERR"
	rc=$(sed -n 's/.*\[Inferior 1 (process [0-9]*) exited with code \([0-9]*\)\].*/\1/p' "$T/stop_cut.gdb")
	expect "SIGINT while cutting: exit '$rc', want 01: $(tail -c 300 "$T/stop_cut.gdb")" [ "$rc" = 01 ]
	ds=$(jq -c -n -R '[inputs | fromjson? | select(.type == "diag_status")][0]' "$OUT")
	n=$(jq -r -n -R '[inputs | fromjson? | select(.type == "step")] | length' "$OUT")
	expect "SIGINT while cutting: diag_status $ds, want interrupted, not ok, $n steps" \
		jqe --argjson n "$n" '.interrupted and (.ok | not) and .steps == $n' <<<"$ds"
	expect "SIGINT while cutting: $n steps written, want 51 (the 50 cut and the one it was in)" eq "$n" 51
	expect "SIGINT while cutting: no 'stopped by a signal while cutting steps' in $(tail -n 2 "$ERR" | tr '\n' '|')" \
		grep -q 'stopped by a signal while cutting steps' "$ERR"
fi
report replay_stop

# a forged recording: 12,000 automatic steps at one instant (every record
# launched at 4000, every step [4000, 6000]), and 100 off-CPU records of the
# launching thread on top of each other
awk 'BEGIN { for (s = 0; s < 12000; s++) for (k = 0; k < 4; k++)
	printf "{\"schema\":1,\"type\":\"%s\",\"pid\":100,\"tid\":100,\"correlation_id\":%d,\"start_ns\":5000,\"end_ns\":6000,\"copy_kind\":%d,\"launch_ts_ns\":4000,\"launch_api\":\"cudaLaunchKernel\"}\n",
		k == 3 ? "memcpy" : "kernel", 4 * s + k + 1, k == 3 ? 2 : 0
	for (i = 0; i < 100; i++)
		print "{\"schema\":1,\"type\":\"offcpu\",\"pid\":100,\"tid\":100,\"ts_ns\":4500,\"dur_ns\":1000,\"cause\":\"blocked\"}"
	for (i = 0; i < 7; i++)
		printf "{\"schema\":1,\"type\":\"offcpu\",\"pid\":200,\"tid\":200,\"ts_ns\":%d,\"dur_ns\":100,\"cause\":\"blocked\"}\n", 4100 + i * 200 }' >"$T/instant.jsonl"
replay replay_overlap "$T/instant.jsonl"
expect "one-instant recording: exit $RC: $(tail -n 2 "$ERR" | tr '\n' '|')" [ "$RC" = 0 ]
got=$(jq -c -n -R '[inputs | fromjson? | select(.type == "step")]
	| {steps: length, kernels: (map(.kernels) | add), memcpys: (map(.memcpys) | add),
	   offcpu: (map(.offcpu_ns // 0) | add), last: .[-1].kernels}' "$OUT")
expect "one-instant recording: steps $got, want 12000 steps counting 36000 kernels and 12000 copies once, all in the last (each step ends where the next starts), and the off-CPU time once (1000 ns)" \
	jqe '.steps == 12000 and .kernels == 36000 and .memcpys == 12000 and .last == 36000 and .offcpu == 1000' <<<"$got"
ds=$(jq -c -n -R '[inputs | fromjson? | select(.type == "diag_status")][0]' "$OUT")
expect "one-instant recording: diag_status $ds, want ok, 99 overlapping CPU events, no step cut short (one thread's steps bound each other), the 7 off-CPU records of pid 200 (no step) counted outside steps, no bad metadata" \
	jqe '.ok and .steps == 12000 and .cpu_events_overlapping == 99 and .steps_cut_short == 0 and .cpu_events_outside_steps == 7 and .bad_metadata == 0' <<<"$ds"
report replay_overlap

# a step stream of 4,100 instances: the detector keeps 4,096 baselines; the
# steps of the 4 others are not judged, and diag_status and a warning say so
awk 'BEGIN { for (i = 0; i < 4100; i++)
	printf "{\"schema\":1,\"type\":\"step\",\"instance\":\"inst-%d\",\"rank\":0,\"pid\":100,\"tid\":100,\"start_ns\":%d,\"dur_ns\":20000000,\"phase\":\"decode\",\"tokens\":8,\"batch_size\":8,\"kv_tokens\":4096}\n", i, 1000000000 + i * 1000 }' >"$T/keys.jsonl"
replay replay_step_keys "$T/keys.jsonl"
expect "4,100 instances: exit $RC: $(tail -n 2 "$ERR" | tr '\n' '|')" [ "$RC" = 0 ]
ds=$(jq -c -n -R '[inputs | fromjson? | select(.type == "diag_status")][0]' "$OUT")
expect "4,100 instances: diag_status $ds, want 4100 steps, 4096 keys, 4 steps dropped, none refused" \
	jqe '.ok and .steps == 4100 and .keys == 4096 and .keys_dropped == 4 and .bad_steps == 0' <<<"$ds"
expect "4,100 instances: no warning naming keys_dropped: $(tail -n 3 "$ERR" | tr '\n' '|')" \
	grep -q 'warning: diag: 4096 baselines kept.*keys_dropped' "$ERR"
report replay_step_keys

# a decode key 1.5x slower for good after 300 steps: the 64 flagged in a row
# are accepted as the new level, and a record says so
level_shift_steps llm-0 >"$T/shift.jsonl"
replay replay_level_shift "$T/shift.jsonl" --summary
expect "level shift: exit $RC: $(tail -n 2 "$ERR" | tr '\n' '|')" [ "$RC" = 0 ]
s364=$(sed -n 364p "$T/shift.jsonl" | jq .start_ns)
ls=$(jq -c -n -R '[inputs | fromjson? | select(.type == "level_shift")]' "$OUT")
expect "level shift: $ls, want one of 64 steps at 1.45-1.55x on llm-0 rank 0 decode, at step 364 ($s364)" \
	jqe --argjson at "$s364" 'length == 1 and (.[0] | .instance == "llm-0" and .rank == 0
		and .phase == "decode" and .pid == 100 and .tid == 100 and .steps == 64 and .ratio > 1.45 and .ratio < 1.55
		and .step_start_ns == $at and .ts_ns == $at and (.kind | type) == "string")' <<<"$ls"
runs=$(jq -c -n -R '[inputs | fromjson? | select(.type == "anomaly") | .run]' "$OUT")
expect "level shift: anomaly runs $runs, want 1..64 in order and none after the shift" \
	jqe '. == [range(1; 65)]' <<<"$runs"
ds=$(jq -c -n -R '[inputs | fromjson? | select(.type == "diag_status")][0]' "$OUT")
expect "level shift: diag_status $ds, want level_shifts 1 and 64 anomalies in 1 episode" \
	jqe '.ok and .level_shifts == 1 and .anomalies == 64 and .episodes == 1 and .steps == 400' <<<"$ds"
summary_has "$ERR" 400 64 1 1
got=$(python3 "$IT_ROOT/tests/integration/steps_check.py" "$OUT" "$ERR" "$T/shift.jsonl" 2>&1)
expect "level shift: --summary's step durations and longest steps, read again from the records: $got" \
	[ "${got%% *}" = ok ]
expect "level shift: none of the longest steps flagged: $(sed -n '/^  longest steps/,$p' "$ERR" | tr '\n' '|')" \
	eval 'sed -n "/^  longest steps/,\$p" "$ERR" | grep -qE ": host_stall$"'
expect "level shift: no warning: $(tail -n 3 "$ERR" | tr '\n' '|')" \
	grep -q 'warning: diag: llm-0 rank 0 decode: 64 slow steps in a row, accepting the new level (1\.5.x' "$ERR"
report replay_level_shift

# ten instances on one node: llm<BEL>0 slows down for good (64 anomalies),
# nine others run 30 calm steps each from just after its start, one of them
# named with a control byte too; --summary's part per instance, and its
# longest steps with the kind that flagged each, read again
level_shift_steps llm-0 >"$T/multi.raw"
python3 - "$T/multi.raw" >"$T/multi.jsonl" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
for s in steps:  # the slowing one's name has a control byte too: its flagged longest steps
    s["instance"] = "llm\u00070"
names = ["a\u0007b"] + ["inst-%d" % k for k in range(2, 10)]
for k, name in enumerate(names, 1):
    t = 1000000000 + k * 1000
    for i in range(30):
        d = 5000000 + 37000 * ((i * 7 + k) % 11)
        steps.append({"schema": 1, "type": "step", "instance": name,
                      "rank": 0, "pid": 100 + k, "tid": 100 + k, "start_ns": t, "dur_ns": d,
                      "phase": "decode" if i % 3 else "prefill", "tokens": 8, "batch_size": 8,
                      "kv_tokens": 4096})
        t += d + 20000000
for s in sorted(steps, key=lambda s: s["start_ns"]):
    print(json.dumps(s))
PY
replay replay_instance_summary "$T/multi.jsonl" --summary
expect "ten instances: exit $RC: $(tail -n 2 "$ERR" | tr '\n' '|')" [ "$RC" = 0 ]
got=$(python3 "$IT_ROOT/tests/integration/steps_check.py" "$OUT" "$ERR" "$T/multi.jsonl" 2>&1)
expect "ten instances: --summary's steps per instance, read again from the records: $got" \
	[ "${got%% *}" = ok ]
expect "ten instances: no part per instance, or llm?0's 64 anomalies, a?b or the others not in it: $(sed -n '/^  per instance/,/^  longest/p' "$ERR" | tr '\n' '|')" \
	eval 'grep -qx "    llm?0: 400 steps, 64 anomalies: .*" "$ERR" && grep -qx "    a?b: 30 steps, no anomalies" "$ERR" &&
		grep -qx "    (others): 60 steps, no anomalies" "$ERR"'
report replay_instance_summary

# --------------------------------------------------- replay_launch_python --
python3 - "$T/pyrec.jsonl" <<'PY'
import json, sys
fr = lambda f, fl, l, fn="/m/model.py": {"function": f, "file": fn, "first_line": fl, "line": l}
good = [fr("Attention.forward", 40, 43), fr("Model.forward", 50, 51)]
odd = [{"function": 5, "file": "a\u0001b", "first_line": -3, "line": "x"},
       {"function": "\u00e9" * 300, "file": "/x.py", "first_line": 1, "line": 2}]
lp = {"k1": good, "k2": "Attention.forward", "k3": [fr("f%d" % i, 1, 2) for i in range(33)],
      "k4": [good[0], 7], "k5": odd}
with open(sys.argv[1], "w") as out:
    for i, name in enumerate(["k1", "k2", "k3", "k4", "k5", "k6"]):
        r = {"schema": 1, "type": "kernel", "pid": 100, "tid": 101, "correlation_id": 5 + i,
             "device": 0, "context": 1, "stream": 7, "start_ns": 2000 * (i + 1),
             "end_ns": 2000 * (i + 1) + 900, "name": name, "launch_ts_ns": 2000 * (i + 1) - 500,
             "launch_api": "cudaLaunchKernel", "launch_cbid": 211, "launch_src": "uprobe+cupti",
             "matched": True}
        if name in lp:
            r["launch_python"] = lp[name]
        out.write(json.dumps(r) + "\n")
    # no launch: nothing to join, its frames are nobody's
    out.write(json.dumps({"schema": 1, "type": "kernel", "pid": 100, "correlation_id": 99,
        "device": 0, "context": 1, "stream": 7, "start_ns": 20000, "end_ns": 20900,
        "name": "k7", "matched": False, "launch_python": good}) + "\n")
PY
replay replay_launch_python "$T/pyrec.jsonl" --mode deep --perfetto "$T/out/pyrec.perfetto.json" --summary
expect "launch_python: exit $RC: $(tail -n 2 "$ERR" | tr '\n' '|')" [ "$RC" = 0 ]
got=$(python3 "$IT_ROOT/tests/integration/pyprof_check.py" "$OUT" "$ERR" 2>&1)
expect "launch_python: --summary's GPU time by Python call, read again from the kernels: $got" \
	[ "$got" = "ok 3 2 0.002" ]
got=$(jq -c -n -R '[inputs | fromjson? | select(.type == "kernel") | {key: .name, value: .launch_python}] | from_entries' "$OUT")
want=$(jq -c -n '
	def fr(f; fl; l): {function: f, file: "/m/model.py", first_line: fl, line: l};
	{k1: [fr("Attention.forward"; 40; 43), fr("Model.forward"; 50; 51)], k2: null, k3: null, k4: null,
	 k5: [{function: "?", file: "a?b"}, {function: ("\u00e9" * 63), file: "/x.py", first_line: 1, line: 2}],
	 k6: null, k7: null}')
expect "launch_python: the replayed kernels' frames $(echo "$got" | head -c 400), want $(echo "$want" | head -c 400)" \
	[ "$got" = "$want" ]
rs=$(jq -c -n -R '[inputs | fromjson? | select(.type == "replay_status")][0] | {ok, joined, launch_python, launch_python_bad}' "$OUT")
expect "launch_python: replay_status $rs, want 6 joined, 2 written with frames, 3 dropped" \
	[ "$rs" = '{"ok":true,"joined":6,"launch_python":2,"launch_python_bad":3}' ]
pf=$(jq -c '[.traceEvents[] | select(.cat == "launch" and .ph == "X") | {key: (.args.correlation_id | tostring), value: .args.python}] | from_entries' "$T/out/pyrec.perfetto.json")
expect "launch_python: Perfetto launch slices $pf, want 6 launch slices, the line of k1's frames on 5 and of k5's on 9, no other" \
	jqe '.["5"] == "Attention.forward (model.py:43) <- Model.forward (model.py:51)" and .["9"] == "? (a?b) <- \("\u00e9" * 63) (x.py:2)" and ([.[] | select(. != null)] | length) == 2 and length == 6' <<<"$pf"
# --summary keeps 3,072 distinct stacks (corr_strtab): 4,000
# kernels of distinct stacks: the rest counted on a line of its own
python3 - "$T/pymany.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as out:
    for i in range(4000):
        out.write(json.dumps({"schema": 1, "type": "kernel", "pid": 100, "tid": 101,
            "correlation_id": 5 + i, "device": 0, "context": 1, "stream": 7,
            "start_ns": 2000 * (i + 1), "end_ns": 2000 * (i + 1) + 1000, "name": "k",
            "launch_ts_ns": 2000 * (i + 1) - 500, "launch_api": "cudaLaunchKernel",
            "launch_cbid": 211, "launch_src": "uprobe+cupti", "matched": True,
            "launch_python": [{"function": "f%d" % i, "file": "/m/a.py", "first_line": 1}]}) + "\n")
PY
replay replay_launch_python "$T/pymany.jsonl" --summary
got=$(sed -n '/^GPU time by the Python calls/,/^$/p' "$ERR" | grep -E 'launch_python, |\(all records\)|stacks past' |
	sed -E 's/^ +//; s/ +/ /g' | tr '\n' '|')
expect "4,000 distinct stacks: exit $RC, $got" [ "$RC:$got" = "0:GPU time by the Python calls that launched it (4000 GPU records with launch_python, 4.000 ms of GPU time)|3.072 ms 76.8% 3072 (all records)|0.928 ms 928 (stacks past the 3072 kept: not in the tree)|" ]
replay replay_launch_python "$T/pyrec.jsonl" --mode deep --python-stacks off
n=$(jq -n -R '[inputs | fromjson? | select(.type == "kernel" and has("launch_python"))] | length' "$OUT")
rs=$(jq -c -n -R '[inputs | fromjson? | select(.type == "replay_status")][0] | {ok, joined, launch_python}' "$OUT")
expect "launch_python, --python-stacks off: exit $RC, $n kernels with frames, $rs" \
	[ "$RC:$n:$rs" = '0:0:{"ok":true,"joined":6,"launch_python":0}' ]
# two ranks' traces, the same pid and tid (containers): each file's own Python calls
for rk in 0 1; do
	{
		echo '{"traceEvents": ['
		[ "$rk" = 0 ] && echo '{"ph": "X", "cat": "python_function", "name": "model.py(40): forward", "pid": 42, "tid": 43, "ts": 10, "dur": 100},'
		echo '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 42, "tid": 43, "ts": 20, "dur": 2, "args": {"correlation": 7, "cbid": 211}},'
		echo '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 3, "args": {"correlation": 7, "device": 0, "stream": 7}}'
		echo ']}'
	} >"$T/pyrank$rk.json"
done
replay replay_launch_python "$T/pyrank0.json" --mode deep --replay-rank "$T/pyrank1.json"
got=$(jq -c -n -R '[inputs | fromjson? | select(.type == "kernel") | {key: .instance, value: (.launch_python // [] | map(.function))}] | from_entries' "$OUT")
expect "two ranks, one pid: exit $RC, frames per file $got, want forward on pyrank0's kernel only" \
	[ "$RC:$got" = '0:{"pyrank0":["forward"],"pyrank1":[]}' ]
report replay_launch_python

# --------------------------------------------------- replay_kineto_python --
# PyTorch's python_function spans of real traces: each joined GPU record's
# launch_python, checked against an independent reading of the trace
kpy_absent=0
for kt in tracemap_vllm_llama_tp4_h100_rank0.pt.trace.json.gz:13818 \
	tracelens_vllm_tp8_b200_rank0_eager.json.gz:929 tracelens_hf_qwen1.5-0.5b_h100.json.gz:1198; do
	kf=${kt%%:*} kn=${kt##*:}
	if [ ! -r "$DATA/kineto/$kf" ]; then
		kpy_absent=-1
		break
	fi
	replay replay_kineto_python "$DATA/kineto/$kf" --mode deep --perfetto "$T/out/$kf.perfetto.json" --summary
	expect "$kf: exit $RC: $(tail -n 2 "$ERR" | tr '\n' '|')" [ "$RC" = 0 ]
	# --summary's GPU time by Python call: the kernels' own frames and times
	# say the same; a sentinel replay (no kernel records) prints the same tree
	got=$(python3 "$IT_ROOT/tests/integration/pyprof_check.py" "$OUT" "$ERR" 2>&1)
	expect "$kf: --summary's GPU time by Python call, read again from the $kn records: $got" \
		[ "${got#ok * $kn }" != "$got" ]
	sed -n '/^GPU time by the Python calls/,/^$/p' "$ERR" >"$T/$kf.deep.tree"
	"$AGENT" --replay "$DATA/kineto/$kf" -o /dev/null --summary 2>"$T/$kf.sentinel.err"
	sed -n '/^GPU time by the Python calls/,/^$/p' "$T/$kf.sentinel.err" >"$T/$kf.sentinel.tree"
	expect "$kf: sentinel --summary prints the deep replay's tree ($(wc -l <"$T/$kf.sentinel.tree") lines, $(wc -l <"$T/$kf.deep.tree"))" \
		cmp -s "$T/$kf.deep.tree" "$T/$kf.sentinel.tree"
	got=$(python3 "$IT_ROOT/tests/integration/kineto_frames.py" "$DATA/kineto/$kf" "$OUT" 2>&1)
	expect "$kf: $(echo "$got" | head -c 600), want $kn records, each with the frames worked out from the trace" \
		jqe --argjson n "$kn" '.records == $n and .with_frames == $n and .equal == $n and .functions > 1' <<<"$got"
	lp=$(status | jq .launch_python)
	expect "$kf: replay_status.launch_python $lp, want $kn" eq "$lp" "$kn"
	pf=$(jq -c '[.traceEvents[] | select(.cat == "launch" and .ph == "X")] | {n: length, python: map(select(.args.python | type == "string")) | length}' "$T/out/$kf.perfetto.json")
	expect "$kf: Perfetto launch slices $pf, want each with args.python" jqe '.n > 0 and .n == .python' <<<"$pf"
done
if [ "$kpy_absent" = 0 ]; then
	"$AGENT" --replay "$DATA/kineto/tracelens_hf_qwen1.5-0.5b_h100.json.gz" -o /dev/null --summary \
		--python-stacks off 2>"$T/pyoff.err"
	expect "--python-stacks off: no GPU time by Python call in --summary (exit $?)" \
		[ "$(grep -c "^GPU time by the Python calls" "$T/pyoff.err")" = 0 ]
fi
if [ "$kpy_absent" = -1 ]; then
	skip replay_kineto_python "$DATA/kineto absent (set INFERTRACE_DATA)"
else
	report replay_kineto_python
fi

# ----------------------------------------------------- replay_gpu_summary --
# --summary's GPU records on every real trace, checked against the records
n_gs=0
for f in "$DATA"/kineto/*.json "$DATA"/kineto/*.json.gz "$DATA"/nsys/*.sqlite; do
	[ -r "$f" ] || continue
	b=$(basename "$f")
	replay replay_gpu_summary "$f" --mode deep --summary
	got=$(python3 "$IT_ROOT/tests/integration/gpusum_check.py" "$OUT" "$ERR" 2>&1)
	expect "$b: exit $RC, --summary's GPU records read again from the records: $got" \
		[ "$RC:${got%% *}" = "0:ok" ]
	n_gs=$((n_gs + 1))
	cp "$OUT" "$T/gs-$n_gs.jsonl" && cp "$ERR" "$T/gs-$n_gs.err" && echo "$b" >"$T/gs-$n_gs.name"
done
if [ "$n_gs" = 0 ]; then
	skip replay_gpu_summary "$DATA absent (set INFERTRACE_DATA)"
	skip replay_step_summary "$DATA absent (set INFERTRACE_DATA)"
else
	echo "# replay_gpu_summary: $n_gs traces"
	report replay_gpu_summary
	# the same replays' steps: durations by phase and the longest steps
	for ((i = 1; i <= n_gs; i++)); do
		got=$(python3 "$IT_ROOT/tests/integration/steps_check.py" "$T/gs-$i.jsonl" "$T/gs-$i.err" 2>&1)
		expect "$(cat "$T/gs-$i.name"): --summary's steps read again from the step records: $got" \
			[ "${got%% *}" = ok ]
	done
	report replay_step_summary
fi
