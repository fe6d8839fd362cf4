# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""summary_read - what pyprof_check.py, gpusum_check.py, steps_check.py and
anomalies_check.py read: the agent's records of some types from its JSON
lines, and one --summary section from its stderr; a name as the agent
prints it on a terminal; the checkers' way to fail."""
import json
import sys

GPU_KINDS = ("kernel", "memcpy", "memset")


def records(path, types):
    """the records of a JSON-lines file whose type is in types (bad lines skipped)"""
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            try:
                r = json.loads(raw)
            except ValueError:
                continue
            if isinstance(r, dict) and r.get("type") in types:
                out.append(r)
    return out


def gpu_records(path):
    """the kernel, memcpy and memset records of a JSON-lines file"""
    return records(path, GPU_KINDS)


def section(path, head):
    """the lines of the section whose first line starts with head, to the blank line"""
    lines, on = [], False
    with open(path, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            raw = raw.rstrip("\n")
            if raw.startswith(head):
                on, lines = True, [raw]
            elif on:
                if not raw.strip():
                    break
                lines.append(raw)
    return lines


def clean(s):
    """a name as the agent and agentctl print it: control bytes as '?' (term_safe())"""
    return "".join("?" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in s)


def fail(why):
    """print the first difference and exit 1"""
    print(why)
    sys.exit(1)
