#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Check --summary's "GPU time by the Python calls that launched it" against
the records it summarises, read on their own.

usage: pyprof_check.py RECORDS.jsonl SUMMARY.txt

RECORDS: the agent's JSON lines (kernel, memcpy and memset records with
launch_python: innermost frame first; GPU time end_ns - start_ns).
SUMMARY: the agent's stderr with --summary. This script builds its own call
tree from the records (outermost call first; a call is its function, file
and first line, or line where there is no first line) and checks every
line of the section: each call line's GPU time (to the microsecond printed) and
record count, its chain of single calls, that calls are 1% or more and
widest first, and that the lines under a call add up to it. Prints "ok
LINES RECORDS MS" or the first difference, and exits 1 on a difference.
"""
import re
import sys

from summary_read import gpu_records, section

HEAD = "GPU time by the Python calls that launched it"
LINE = re.compile(r"^\s+([0-9.]+) ms\s+([0-9.]+)%\s+(\d+)  ( *)(.*)$")


class Node:
    def __init__(self, key):
        self.key = key
        self.ns = self.n = self.self_ns = self.self_n = 0
        self.kids = {}


def key_of(f):
    line = f.get("first_line", f.get("line", -1))
    return (f.get("function", "?"), f.get("file"), line)


def text_of(key):
    func, path, line = key
    if path is None:
        return func
    base = path.rsplit("/", 1)[-1]
    return f"{func} ({base}:{line})" if line >= 0 else f"{func} ({base})"


def build(path):
    root, total_ns, total_n = Node(("(all records)", None, -1)), 0, 0
    for r in gpu_records(path):
        if not r.get("launch_python"):
            continue
        ns = max(r["end_ns"] - r["start_ns"], 0)
        total_ns += ns
        total_n += 1
        at = root
        at.ns += ns
        at.n += 1
        for f in reversed(r["launch_python"]):
            k = key_of(f)
            at = at.kids.setdefault(k, Node(k))
            at.ns += ns
            at.n += 1
        at.self_ns += ns
        at.self_n += 1
    return root, total_ns, total_n


def close(ms, ns):
    return abs(float(ms) - ns / 1e6) <= 0.00051 + ns * 1e-12


def check(root, total_ns, total_n, lines):
    if not lines:
        return "no section" if total_n else None
    if total_n == 0:
        return "a section for no record"
    m = re.search(r"\((\d+) GPU records with launch_python, ([0-9.]+) ms", lines[0])
    if not m or int(m.group(1)) != total_n or not close(m.group(2), total_ns):
        return f"header {lines[0]!r}: want {total_n} records, {total_ns / 1e6:.3f} ms"
    rows = []
    for raw in lines[2:]:
        m = LINE.match(raw)
        if m:
            rows.append((len(m.group(4)) // 2, m.group(1), int(m.group(3)), m.group(5)))
        elif not raw.strip().startswith("("):
            return f"unreadable line {raw!r}"
    if not rows:
        return "no rows"
    # the first row: the root's chain (one outermost call) or all threads
    stack = []  # (depth, node, [children's ns, n])
    prev_at = {}  # depth -> ns of the last call row there (widest first)
    for depth, ms, n, text in rows:
        while stack and stack[-1][0] >= depth:
            d, node, acc = stack.pop()
            if acc[1] != node.n or abs(acc[0] - node.ns) > 510 * (acc[2] + 1):
                return f"the lines under {text_of(node.key)} add to {acc[1]} records, want {node.n}"
        parent = stack[-1][1] if stack else None
        if parent is None and depth != 0:
            return f"row {text!r} at depth {depth} with no call above"
        if text.startswith("(stacks past "):  # records not in the tree: in no sum
            continue
        if text.startswith("(launched by "):
            if parent is None or n != parent.self_n or not close(ms, parent.self_ns):
                return f"{text!r}: {n} records, want {parent.self_n if parent else '?'}"
            stack[-1][2][0] += parent.self_ns
            stack[-1][2][1] += n
            stack[-1][2][2] += 1
            continue
        if text.startswith("("):  # the folded rest; the sum below checks it
            if text.startswith("(all records)"):
                node = root
            else:
                stack[-1][2][0] += float(ms) * 1e6
                stack[-1][2][1] += n
                stack[-1][2][2] += 1
                continue
        else:
            m = re.match(r"^(.*?) > \.\.\. > (.*) \((\d+) calls\)$", text)
            if m:
                first, last, k = m.group(1), m.group(2), int(m.group(3))
            elif " > " in text:
                first, last = text.split(" > ", 1)
                k = 2
            else:
                first, last, k = text, text, 1
            base = parent if parent is not None else root
            cands = [c for c in base.kids.values() if text_of(c.key) == first and c.n == n]
            if not cands:
                return f"{first!r}: no such call with {n} records under " \
                       f"{text_of(base.key)} (have {[(text_of(c.key), c.n) for c in base.kids.values()][:6]})"
            node = cands[0]
            if node.ns * 100 < total_ns:
                return f"{text!r} is under 1% and not folded"
            if depth in prev_at and prev_at[depth] < node.ns and parent is not None:
                return f"{text!r} is wider than the call above it"
            prev_at[depth] = node.ns
            for _ in range(k - 1):
                if node.self_n or len(node.kids) != 1:
                    return f"{text!r}: {text_of(node.key)} is no single call"
                node = next(iter(node.kids.values()))
            if text_of(node.key) != last:
                return f"{text!r}: the chain ends in {text_of(node.key)!r}"
            if not (node.self_n or len(node.kids) != 1):
                return f"{text!r}: the chain goes on past {last!r}"
        if n != node.n or not close(ms, node.ns):
            return f"{text!r}: {ms} ms {n} records, want {node.ns / 1e6:.3f} ms {node.n}"
        if parent is not None:
            stack[-1][2][0] += node.ns
            stack[-1][2][1] += node.n
            stack[-1][2][2] += 1
        for d in [d for d in prev_at if d > depth]:
            del prev_at[d]
        if node.kids:
            stack.append((depth, node, [0.0, 0, 0]))
    while stack:
        d, node, acc = stack.pop()
        if acc[1] != node.n:
            return f"the lines under {text_of(node.key)} add to {acc[1]} records, want {node.n}"
    return None


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    root, total_ns, total_n = build(sys.argv[1])
    lines = section(sys.argv[2], HEAD)
    err = check(root, total_ns, total_n, lines)
    if err:
        print(f"differs: {err}")
        sys.exit(1)
    print(f"ok {max(len(lines) - 2, 0)} {total_n} {total_ns / 1e6:.3f}")


if __name__ == "__main__":
    main()
