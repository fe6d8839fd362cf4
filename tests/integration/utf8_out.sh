#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# utf8_out: every JSON line is valid UTF-8 whatever bytes a recording (or a
# shim) puts in its names (issue 18, finding 9). A Kineto trace with raw
# invalid bytes in a kernel name, a runtime call and a step marker is
# replayed in deep and sentinel mode; each output line must decode as strict
# UTF-8 JSON (Python's decoder, as a Kafka consumer would), the bad bytes
# come out as U+FFFD and replay_status.utf8_replaced counts them. No root.
#   utf8_replay_deep, utf8_replay_sentinel
source "$(dirname "$0")/lib.sh"

# the bytes of the finding (ff fe 80), an overlong (c0 af), a lone ed
printf '%s\n' \
	'{"displayTimeUnit": "ns", "traceEvents": [' \
	'{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunch\xedKernel", "pid": 42, "tid": 43, "ts": 12.5, "dur": 3, "args": {"cbid": 211, "correlation": 7}},' \
	'{"ph": "X", "cat": "kernel", "name": "gemm\xff\xfe\x80k", "pid": 0, "tid": 7, "ts": 20, "dur": 1.25, "args": {"device": 0, "stream": 7, "correlation": 7}},' \
	'{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1 \xc0\xaf", "pid": 42, "tid": 43, "ts": 10, "dur": 100},' \
	'{"ph": "X", "cat": "kernel", "name": "orphan\xff", "pid": 0, "tid": 7, "ts": 30, "dur": 1, "args": {"device": 0, "stream": 7, "correlation": 8}}' \
	'], "traceName": "t"}' | while IFS= read -r l; do printf "$l\n"; done >"$T/bad.json"

for mode in deep sentinel; do
	"$AGENT" --replay "$T/bad.json" -m "$mode" -o "$T/$mode.jsonl" 2>"$T/$mode.err"
	rc=$?
	expect "exit $rc: $(head -c 300 "$T/$mode.err")" eq "$rc" 0
	check=$(jsonl_py "$T/$mode.jsonl" <<'PY'
names, replaced = [], None
for raw, o in recs:
    if o.get("type") in ("kernel", "gpu_summary", "step"):
        names.append(raw.decode("utf-8"))
    if o.get("type") == "replay_status":
        replaced = o.get("utf8_replaced")
if bad:
    print("invalid: " + "; ".join(bad[:3]))
elif not names or not any("\ufffd" in l for l in names):
    print("no record shows U+FFFD for the invalid bytes")
elif not replaced:
    print(f"replay_status.utf8_replaced = {replaced}")
PY
	)
	expect "$check" [ -z "$check" ]
	report "utf8_replay_$mode"
done
