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

from summary_read import clean, fail, records, section

PHASES = ("unknown", "prefill", "decode", "mixed")
# the section prints milliseconds to 3 decimals: half the last digit, and the
# float error of a value that ends in exactly 5 there (41.1605 printed 41.160)
MS = 0.0005 + 1e-9


def phase_lines(lines, indent, durs_by_phase, who):
    """the phase lines at indent: each phase of the records, its count, quantiles, max"""
    shown = {}
    for ln in lines:
        m = re.match(r"%s(\w+) +(\d+) steps: p50 ([\d.]+) ms, p90 ([\d.]+) ms, "
                     r"p99 ([\d.]+) ms, max ([\d.]+) ms" % (" " * indent), ln)
        if m and not ln[indent].isspace():
            shown[m.group(1)] = (int(m.group(2)), [float(x) for x in m.group(3, 4, 5, 6)])
    if set(shown) != set(durs_by_phase):
        fail(f"{who}: phases shown {sorted(shown)}, in the records {sorted(durs_by_phase)}")
    for ph, durs in durs_by_phase.items():
        durs.sort()
        n, (p50, p90, p99, mx) = shown[ph]
        if n != len(durs):
            fail(f"{who} {ph}: {n} steps shown, {len(durs)} records")
        if abs(mx - durs[-1]) > MS:
            fail(f"{who} {ph}: max {mx} ms, the records' {durs[-1]:.3f}")
        for q, p in ((0.5, p50), (0.9, p90), (0.99, p99)):
            exact = durs[min(int(len(durs) * q), len(durs) - 1)]
            if not (exact - MS <= p <= exact * 1.0625 + MS and p <= durs[-1] + MS):
                fail(f"{who} {ph}: p{int(q * 100)} {p} ms, nearest rank {exact:.3f} ms")


def by_phase(steps):
    out = {}
    for s in steps:
        out.setdefault(s.get("phase", "unknown"), []).append(s["dur_ns"] / 1e6)
    return out


def per_instance(lines, steps, anomalies):
    """the per-instance part: there when the steps name more than one instance,
    the first 8 in the order of their first step, the rest as (others), each
    with its steps, its anomaly records by kind, and its phase lines"""
    order = []
    for s in sorted(steps, key=lambda s: s["start_ns"]):
        i = s.get("instance") or ""
        if i not in order:
            order.append(i)
    try:
        k = next(k for k, ln in enumerate(lines) if ln.startswith("  per instance ("))
    except StopIteration:
        if len(order) > 1:
            fail(f"{len(order)} instances, no per-instance part")
        return
    if len(order) < 2:
        fail(f"a per-instance part for {len(order)} instance(s)")
    groups = [(clean(i)[:63] or "(no instance)", [i]) for i in order[:8]]
    if len(order) > 8:
        groups.append(("(others)", order[8:]))
    want_head = ("the first 8 by their first step, then the others together" if len(order) > 8
                 else "in the order their first step came")
    if lines[k] != f"  per instance ({want_head}):":
        fail(f"per-instance head '{lines[k]}'")
    body = []
    for ln in lines[k + 1:]:
        if not ln.startswith("    "):
            break
        body.append(ln)
    heads = [j for j, ln in enumerate(body) if not ln.startswith("      ")]
    if len(heads) != len(groups):
        fail(f"{len(heads)} instances shown, want {len(groups)}")
    for (name, g), j in zip(groups, heads):
        end = next((h for h in heads if h > j), len(body))
        st = [s for s in steps if (s.get("instance") or "") in g]
        an = [a for a in anomalies if (a.get("instance") or "") in g]
        kinds = {}
        for a in an:
            kinds[a["kind"]] = kinds.get(a["kind"], 0) + 1
        tail = (f"{len(an)} {'anomaly' if len(an) == 1 else 'anomalies'}" if an
                else "no anomalies")
        # the agent lists kinds in its enum's order: compare as a set of pairs
        m = re.fullmatch(r"    (.*): (\d+) steps, (no anomalies|\d+ anomal(?:y|ies))(: .*)?",
                         body[j])
        if not m:
            fail(f"per-instance line '{body[j]}'")
        got_kinds = dict((k.rsplit(" ", 1)[0], int(k.rsplit(" ", 1)[1]))
                         for k in (m.group(4) or ": ")[2:].split(", ") if k)
        if (m.group(1), int(m.group(2)), m.group(3), got_kinds) != (name, len(st), tail, kinds):
            fail(f"per-instance '{body[j]}', the records say {name}: {len(st)} steps, {tail} "
                 f"{kinds}")
        phase_lines(body[j + 1:end], 6, by_phase(st), name)


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
    phases = by_phase(steps)
    phase_lines(lines, 2, phases, "node")
    per_instance(lines, steps, anomalies)
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
    print(f"ok {len(steps)} {len(phases)}")


main()
