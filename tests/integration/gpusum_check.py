#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Check --summary's "GPU records" section against the records it sums,
read on their own.

usage: gpusum_check.py RECORDS.jsonl SUMMARY.txt

RECORDS: the agent's JSON lines in deep mode (every kernel, memcpy and
memset record). SUMMARY: its stderr with --summary. Works out from the
records: the counts by kind and their GPU time, the records joined to a
launch, per device the span, the union of activity (exact, sorted here)
and the sum of durations, the launch-to-start quantiles (nearest rank;
the section prints the largest value of its bucket, sixteenths of an
octave: never under it, at most 6.25% over), the copies by direction, and every kernel row (name
shown, count, total, mean, max, share), the rest on one row. Prints "ok
RECORDS KERNELS NAMES" or the first difference, and exits 1.
"""
import re
import subprocess
import sys

from summary_read import GPU_KINDS as KINDS, gpu_records, section
DEMANGLED = {}
COPY = ["?", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"]


def near(printed, ns, scale=1e6, digits=3):
    return abs(float(printed) - ns / scale) <= 0.51 * 10 ** -digits + 1e-9


def demangled(names):
    """the names c++filt demangles (those starting _Z), by name"""
    mangled = sorted(n for n in names if n and n.startswith("_Z"))
    if not mangled:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(mangled) + "\n", capture_output=True,
                         text=True, check=True).stdout.split("\n")
    return dict(zip(mangled, out))


def shown(name):
    name = DEMANGLED.get(name, name)
    if len(name.encode()) <= 100:
        return name
    b = name.encode()[:97]
    while b and (b[-1] & 0xC0) == 0x80:
        b = b[:-1]
    if b and b[-1] >= 0xC0:  # the start of a character cut off
        b = b[:-1]
    return b.decode(errors="replace") + "..."


def check(recs, lines):
    if not recs:
        return "a section for no record" if lines else None
    if not lines:
        return "no section"
    text = "\n".join(lines)
    dur = lambda r: max(r["end_ns"] - r["start_ns"], 0)
    n = {k: [r for r in recs if r["type"] == k] for k in KINDS}
    ns = {k: sum(dur(r) for r in n[k]) for k in KINDS}
    joined = [r for r in recs if r.get("matched")]
    m = re.search(r"records +(\d+): (\d+) kernels \(([0-9.]+) ms\), (\d+) copies \(([0-9.]+) ms\), "
                  r"(\d+) sets; (\d+) joined", text)
    if not m:
        return "no records line"
    got = [int(m.group(i)) for i in (1, 2, 4, 6, 7)]
    want = [len(recs), len(n["kernel"]), len(n["memcpy"]), len(n["memset"]), len(joined)]
    if got != want or not near(m.group(3), ns["kernel"]) or not near(m.group(5), ns["memcpy"]):
        return f"records line {m.group(0)!r}: want {want}, {ns['kernel'] / 1e6:.3f} ms"
    for dev in sorted({r["device"] for r in recs}):
        rs = sorted((r["start_ns"], r["end_ns"]) for r in recs if r["device"] == dev)
        busy, end = 0, 0
        for s, e in rs:
            if e > end:
                busy += e - max(s, end)
                end = e
        span = max(e for _, e in rs) - min(s for s, _ in rs)
        m = re.search(rf"device {dev} +(\d+) records over ([0-9.]+) ms: busy ([0-9.]+) ms "
                      rf"\(([0-9.]+)%\), their durations add to ([0-9.]+) ms", text)
        if not m or int(m.group(1)) != len(rs) or not near(m.group(2), span) \
                or not near(m.group(5), sum(e - s for s, e in rs if e > s)):
            return f"device {dev}: {m.group(0) if m else 'no line'!r}: want {len(rs)} records, " \
                   f"span {span / 1e6:.3f} ms"
        if not near(m.group(3), busy):
            return f"device {dev}: busy {m.group(3)} ms, the union is {busy / 1e6:.3f} ms"
    waits = sorted(r["start_ns"] - r["launch_ts_ns"] for r in joined
                   if r["start_ns"] >= r["launch_ts_ns"])
    if waits:
        m = re.search(r"p50 ([0-9.]+) us, p90 ([0-9.]+) us, p99 ([0-9.]+) us, max ([0-9.]+) us "
                      r"over (\d+) joined", text)
        if not m or int(m.group(5)) != len(waits) or not near(m.group(4), waits[-1], 1e3, 1):
            return f"launch to start: {m.group(0) if m else 'no line'!r}, want {len(waits)}, " \
                   f"max {waits[-1] / 1e3:.1f} us"
        for g, q in zip((1, 2, 3), (0.5, 0.9, 0.99)):
            exact = waits[int(len(waits) * q)]
            p = float(m.group(g)) * 1e3
            if not (exact - 51 <= p <= exact * 1.0625 + 51 and p <= waits[-1] + 51):
                return f"launch to start p{int(q * 100)}: {p / 1e3} us, nearest rank {exact / 1e3} us"
    for k in sorted({r.get("copy_kind", 0) for r in n["memcpy"]}):
        rs = [r for r in n["memcpy"] if r.get("copy_kind", 0) == k]
        name = COPY[k] if k < len(COPY) else "other"
        m = re.search(rf"copies {re.escape(name)} +(\d+), ([0-9.]+) MiB in ([0-9.]+) ms", text)
        if not m or int(m.group(1)) != len(rs) or \
                not near(m.group(2), sum(r.get("bytes", 0) for r in rs), 1048576, 1) or \
                not near(m.group(3), sum(dur(r) for r in rs)):
            return f"copies {name}: {m.group(0) if m else 'no line'!r}, want {len(rs)}"
    if not n["kernel"]:
        return None
    per = {}
    for r in n["kernel"]:
        p = per.setdefault(r.get("name"), [0, 0, 0])
        p[0] += 1
        p[1] += dur(r)
        p[2] = max(p[2], dur(r))
    names = sorted((nm for nm in per if nm is not None), key=lambda nm: (-per[nm][1], nm))
    DEMANGLED.update(demangled(names[:10]))
    m = re.search(r"kernels by GPU time \((\d+) names\)", text)
    if not m or int(m.group(1)) != len(names):
        return f"kernel names: {m.group(0) if m else 'no line'!r}, want {len(names)}"
    rows = [l for l in lines if re.match(r"^ +[0-9.]+ ms +[0-9.]+% +\d+ ", l)]
    kns = ns["kernel"]
    for nm, row in zip(names[:10], rows):
        c, t, mx = per[nm]
        m = re.match(r"^ +([0-9.]+) ms +([0-9.]+)% +(\d+) +([0-9.]+) us +([0-9.]+) us  (.*)$", row)
        if not m or m.group(6) != shown(nm) or int(m.group(3)) != c or not near(m.group(1), t) \
                or not near(m.group(4), t / c, 1e3, 1) or not near(m.group(5), mx, 1e3, 1) \
                or abs(float(m.group(2)) - 100 * t / kns) > 0.051:
            return f"kernel row {row.strip()!r}: want {shown(nm)!r} {c} x, {t / 1e6:.3f} ms"
    rest = names[10:]
    if rest or None in per:
        rn = sum(per[nm][0] for nm in rest) + (per[None][0] if None in per else 0)
        rt = sum(per[nm][1] for nm in rest) + (per[None][1] if None in per else 0)
        last = rows[min(len(names), 10)] if len(rows) > min(len(names), 10) else ""
        m = re.match(r"^ +([0-9.]+) ms +[0-9.]+% +(\d+) +\(the other kernels\)$", last)
        if not m or int(m.group(2)) != rn or not near(m.group(1), rt):
            return f"the other kernels: {last.strip()!r}, want {rn}, {rt / 1e6:.3f} ms"
    return None


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    recs = gpu_records(sys.argv[1])
    err = check(recs, section(sys.argv[2], "GPU records ("))
    if err:
        print(f"differs: {err}")
        sys.exit(1)
    print(f"ok {len(recs)} {sum(r['type'] == 'kernel' for r in recs)} "
          f"{len({r.get('name') for r in recs if r['type'] == 'kernel'})}")


if __name__ == "__main__":
    main()
