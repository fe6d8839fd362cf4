#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""steps_check.py OUT.jsonl ERR [STEPS.jsonl] - the agent's --summary "Steps
and anomalies" section (in ERR) worked out again from the step and anomaly
records it wrote (OUT; the step records from STEPS when the run replayed a
file of them, which it judges without writing them again): the steps
counted; per phase the count, p50, p90, p99 (nearest rank: the value at
index floor(n x q) of the sorted durations; the section prints the largest
value of its histogram bucket, never under it, at most 6.25% over)
and the largest; the five longest steps, longest first, each with its
phase, start after the first step, instance, rank, pid and start_ns and
the kind of the anomaly whose step it is ("not flagged" when none). Prints "ok
STEPS PHASES" or the first difference, and exits 1."""
import re
import sys

from summary_read import records, section

PHASES = ("unknown", "prefill", "decode", "mixed")
MS = 0.0005  # the section prints milliseconds to 3 decimals


def fail(why):
    print(why)
    sys.exit(1)


def clean(s):
    return "".join("?" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in s)


def main():
    out, err = sys.argv[1], sys.argv[2]
    steps = records(sys.argv[3] if len(sys.argv) > 3 else out, ("step",))
    anomalies = records(out, ("anomaly",))
    lines = section(err, "Steps and anomalies")
    if not lines:
        fail("no 'Steps and anomalies' section")
    m = re.match(r"  steps +(\d+), \d+ judged", lines[1] if len(lines) > 1 else "")
    if not m:
        fail(f"no steps line: {lines[1:2]}")
    if int(m.group(1)) != len(steps):
        fail(f"steps {m.group(1)}, the records hold {len(steps)}")
    by_phase = {}
    for s in steps:
        by_phase.setdefault(s.get("phase", "unknown"), []).append(s["dur_ns"] / 1e6)
    shown = {}
    for ln in lines:
        m = re.match(r"  (\w+) +(\d+) steps: p50 ([\d.]+) ms, p90 ([\d.]+) ms, "
                     r"p99 ([\d.]+) ms, max ([\d.]+) ms", ln)
        if m:
            shown[m.group(1)] = (int(m.group(2)), [float(x) for x in m.group(3, 4, 5, 6)])
    if set(shown) != set(by_phase):
        fail(f"phases shown {sorted(shown)}, in the records {sorted(by_phase)}")
    for ph, durs in by_phase.items():
        durs.sort()
        n, (p50, p90, p99, mx) = shown[ph]
        if n != len(durs):
            fail(f"{ph}: {n} steps shown, {len(durs)} records")
        if abs(mx - durs[-1]) > MS:
            fail(f"{ph}: max {mx} ms, the records' {durs[-1]:.3f}")
        for q, p in ((0.5, p50), (0.9, p90), (0.99, p99)):
            exact = durs[min(int(len(durs) * q), len(durs) - 1)]
            if not (exact - MS <= p <= exact * 1.0625 + MS and p <= durs[-1] + MS):
                fail(f"{ph}: p{int(q * 100)} {p} ms, nearest rank {exact:.3f} ms")
    try:
        i = next(k for k, ln in enumerate(lines) if ln.startswith("  longest steps"))
    except StopIteration:
        fail("no longest steps")
    rows = []
    for ln in lines[i + 1:]:  # the agent's log may follow the section at exit
        if not ln.startswith("    "):
            break
        rows.append(ln)
    want = sorted(steps, key=lambda s: -s["dur_ns"])[:5]
    if len(rows) != len(want):
        fail(f"{len(rows)} longest steps shown, want {len(want)}")
    first = min(s["start_ns"] for s in steps)
    kinds = {(a.get("instance") or "", a.get("rank"), a.get("step_start_ns")): a["kind"]
             for a in anomalies}
    row_re = re.compile(r" +([\d.]+) ms  (\w+) +\+([\d.]+) s  (.*) rank (\S+) pid (\d+) "
                        r"start_ns (\d+): (.*)$")
    for k, (ln, s) in enumerate(zip(rows, want)):
        m = row_re.match(ln)
        if not m:
            fail(f"longest step {k}: cannot read '{ln}'")
        dur, ph, at, inst, rank, pid, start, kind = m.groups()
        if abs(float(dur) - s["dur_ns"] / 1e6) > MS:
            fail(f"longest step {k}: {dur} ms, the records' {k}th longest {s['dur_ns'] / 1e6:.3f}")
        # ties of equal duration may come in either order: the row must be one of them
        same = [t for t in steps if t["dur_ns"] == s["dur_ns"]]
        t = next((t for t in same if t["pid"] == int(pid) and t["start_ns"] == int(start)), None)
        if t is None:
            fail(f"longest step {k}: pid {pid} start_ns {start} is not a step of {dur} ms")
        inst_rec = clean(t.get("instance") or "")[:63]
        want_kind = kinds.get((t.get("instance") or "", t.get("rank"), t["start_ns"]),
                              "not flagged")
        got = (ph, abs(float(at) - (t["start_ns"] - first) / 1e9) <= MS,
               rank, inst, kind)
        exp = (t.get("phase", "unknown"), True,
               "-" if t.get("rank") is None else str(t["rank"]),
               inst_rec or "(no instance)", want_kind)
        if got != exp:
            fail(f"longest step {k}: shown {got}, the records say {exp}")
    print(f"ok {len(steps)} {len(by_phase)}")


main()
