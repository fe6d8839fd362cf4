#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""kineto_frames.py TRACE REPLAY_JSONL: the Python frames each replayed GPU
record should carry, worked out here on their own from the Kineto trace, and
compared with the record's launch_python (tests/integration/replay.sh,
replay_kineto_python).

A launch's frames are the python_function events of its thread that are open
at its time (start <= t < start + dur), innermost first (the latest start;
at the same start the shorter), named "file(LINE): name" (the first
"(digits): " with something on each side; anything else, a built-in, is no
frame), at most 32, names cut at 127 bytes. Times are read as decimals, not
floats: Kineto's microseconds carry ns on epoch-sized values. Prints one
JSON object: records, with_frames, equal, functions (distinct innermost),
first_diff."""
import gzip
import json
import re
import sys
from bisect import bisect_right
from decimal import Decimal

NAME = re.compile(r"^(.+?)\((\d{1,9})\): (.+)$", re.S)


def ns(v):
    return int(Decimal(v) * 1000)


def cut(s):
    b = s.encode()[:127]
    return b.decode(errors="ignore")


def main():
    trace, out = sys.argv[1], sys.argv[2]
    op = gzip.open if trace.endswith(".gz") else open
    with op(trace, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    spans = {}  # (pid, tid) -> [(start, -end, end, frame)]
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "python_function":
            continue
        m = NAME.match(e.get("name", ""))
        if not m:
            continue
        start = ns(e["ts"])
        end = start + ns(e.get("dur", 0))
        frame = {"function": cut(m.group(3)), "file": cut(m.group(1)),
                 "first_line": int(m.group(2))}
        spans.setdefault((e["pid"], e["tid"]), []).append((start, -end, end, frame))
    starts = {}
    for k, v in spans.items():
        v.sort(key=lambda s: (s[0], s[1]))
        starts[k] = [s[0] for s in v]

    def frames(pid, tid, t):
        v = spans.get((pid, tid), [])
        i = bisect_right(starts.get((pid, tid), []), t)
        # every span started by t and still open, innermost (latest) first
        return [s[3] for s in reversed(v[:i]) if s[2] > t][:32]

    n = with_frames = equal = 0
    inner = set()
    diff = None
    with open(out) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") not in ("kernel", "memcpy", "memset") or not r.get("matched"):
                continue
            n += 1
            want = frames(r["pid"], r["tid"], r["launch_ts_ns"])
            got = r.get("launch_python")
            with_frames += 1 if got else 0
            if (got or []) == want:
                equal += 1
                if want:
                    inner.add(want[0]["function"])
            elif diff is None:
                diff = {"correlation_id": r.get("correlation_id"), "got": (got or [])[:3],
                        "want": want[:3]}
    print(json.dumps({"records": n, "with_frames": with_frames, "equal": equal,
                      "functions": len(inner), "first_diff": diff}))


if __name__ == "__main__":
    main()
