#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# shim_channel: the live agent against peers of its shim socket that are not
# real shims (issue 18, findings 5-9; the peer: tests/integration/shim_peer.c).
#   shim_rejects_exported   a record before the hello, an oversize message, a
#                           passed fd, a status of ~0 dropped records, another
#                           ABI, 300 connections from one process: each is
#                           counted in stats.gpu and infertrace_shim_rejected_total,
#                           and gpu.shim_dropped never reads negative
#   shim_genuine_gets_in    a genuine shim connects after all that; its
#                           unmatched kernel carries its pid
#   shim_tid_scans_bounded  a hello claiming another pid namespace, then a new
#                           tid in each of 20,000 records: the /proc scans
#                           are budgeted, the rest counted as shed
#   shim_output_utf8        the kernel's name (bytes ff fe 80) leaves as
#                           U+FFFD: every line is valid UTF-8
source "$(dirname "$0")/lib.sh"
PEER=$BUILD/tests/integration/shim_peer
NAMES="shim_rejects_exported shim_genuine_gets_in shim_tid_scans_bounded shim_output_utf8"
# shellcheck disable=SC2086
it_preflight $NAMES
if [ ! -x "$PEER" ]; then
	for n in $NAMES; do echo "FAIL $n: $PEER not built (make test)"; done
	exit 0
fi
SOCK=$T/shim/shim.sock

metric() { # metric NAME{LABELS}: its value in a scrape of /metrics
	curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'
}
last_gpu() { jqo '[.[] | select(.type == "stats")] | last | .gpu'; }

# --pid: this shell only, nothing CUDA: the output holds what the peers caused
if ! agent_start_metrics shimch -m deep -i 0.25 --no-net --control-socket none --pid $$ \
	--shim-socket "$SOCK" --shim-group root; then
	for n in $NAMES; do echo "FAIL $n: agent did not start: $(agent_tail)"; done
	exit 0
fi

# ------------------------------------------------------------- rejects ----
bg_start "$T/rejects.out" "$PEER" "$SOCK" rejects
cond='.type == "stats" and .gpu.shim_no_hello >= 1 and .gpu.shim_truncated >= 1 and
	.gpu.shim_fds_closed >= 1 and .gpu.shim_status_absurd >= 1 and .gpu.shim_bad_abi >= 1 and
	.gpu.shim_conns_refused_pid >= 290'
wait_record "$cond" 30 || fail_because "stats.gpu never counted them all: $(last_gpu)"
expect "gpu.shim_dropped poisoned: $(last_gpu)" \
	jqe -n -R '[inputs | fromjson? | select(.type == "stats") | .gpu.shim_dropped] | all(. >= 0 and . < 1000)' "$AGENT_OUT"
for r in before_hello oversize fd_passed absurd_counter bad_abi per_process_limit; do
	v=$(metric "infertrace_shim_rejected_total{reason=\"$r\"}")
	expect "infertrace_shim_rejected_total{reason=\"$r\"} = '$v'" ge "${v%.*}" 1
done
report shim_rejects_exported

# ------------------------------------------------------------- genuine ----
bg_start "$T/genuine.out" "$PEER" "$SOCK" genuine
gpid=$BG_PID
wait_record ".type == \"shim_status\" and .pid == $gpid" 20 ||
	fail_because "no shim_status from the genuine shim $gpid: $(last_gpu)"
report shim_genuine_gets_in

# ----------------------------------------------------------------- amp ----
bg_start "$T/amp.out" "$PEER" "$SOCK" amp 20000
wait_record '.type == "stats" and .gpu.shim_tid_unmapped >= 20000' 60 ||
	fail_because "the 20,000 callbacks did not arrive: $(last_gpu)"
g=$(last_gpu)
# each unknown tid wants a scan: done (at most 16 a second) or shed, never more
expect "scans not bounded: $g" jqe '.shim_tid_scans_shed > 0 and
	.shim_tid_scans + .shim_tid_scans_shed >= 20000 and .shim_tid_scans < 20000' <<<"$g"
report shim_tid_scans_bounded

# ---------------------------------------------------------------- utf-8 ----
agent_stop INT || fail_because "agent did not stop"
check=$(jsonl_py "$AGENT_OUT" "$gpid" <<'PY'
kern = None
for raw, o in recs:
    if o.get("type") == "kernel" and o.get("correlation_id") == 424242:
        kern = o
if bad:
    print("invalid lines: " + "; ".join(bad[:3]))
elif not kern:
    print("no kernel record for the genuine shim's kernel")
elif kern.get("name") != "\ufffd\ufffd\ufffdgemm":
    print(f"name {kern.get('name')!r}")
elif kern.get("pid") != int(sys.argv[2]):
    print(f"unmatched kernel pid {kern.get('pid')}, want the sender {sys.argv[2]}")
PY
)
expect "$check" [ -z "$check" ]
report shim_output_utf8
