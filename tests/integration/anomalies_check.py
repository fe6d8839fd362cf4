#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""anomalies_check.py [--follow] RECORDS.jsonl TEXT [INSTANCE] - `agentctl anomalies`'s
text (TEXT) worked out again from the records `agentctl anomalies --json`
gave (RECORDS, the same query): the header (how many of how many, of which
instance, the agent's 256 and how many since it started: at least the
records), then per record in order a block: a blank line; when (local time,
and how long ago: the two agree within 5 s with the time TEXT was written), instance (control
bytes as '?'), rank and pid where known, phase; for an anomaly its kind, duration
and expected (ms, 3 decimals), the ratio, chart, score, run (and "opens an
episode" at run 1), then one line per suspect, in order, with its sentence;
for a level_shift the steps, ratio and kind (and its gpu_clock sentence).
With --follow, TEXT is `agentctl anomalies --follow`'s and RECORDS its
--json twin's: the header counts what was there at the start, the blocks
are every record, those that came later too.
Prints "ok N" or the first difference, and exits 1."""
import datetime
import json
import os
import re
import sys

from summary_read import clean, fail


def when_ok(line, now):
    m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \(([0-9.]+) (s|min|h) ago\)  ", line)
    if not m:
        return None
    stamp = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    ago = float(m.group(2)) * {"s": 1, "min": 60, "h": 3600}[m.group(3)]
    # the stamp is now less the age; both rounded (the stamp to seconds)
    if abs((now - stamp).total_seconds() - ago) > 5:
        fail("'%s': %s and %s ago do not agree with the text's time (%s)" % (line, m.group(1), ago, now))
    return m.end()


def block(rec):
    """the lines after the time, as agentctl prints them"""
    head = clean(rec.get("instance", "?"))
    if isinstance(rec.get("rank"), int):
        head += " rank %d" % rec["rank"]
    if isinstance(rec.get("pid"), int):
        head += " pid %d" % rec["pid"]
    head += "  %s" % clean(rec.get("phase", "?"))
    lines = [head]
    if rec["type"] == "level_shift":
        lines.append("  new level: %d steps flagged in a row at %.2fx what the baseline expected, "
                     "mostly %s; taken for the new normal"
                     % (rec["steps"], rec["ratio"], clean(rec["kind"])))
        if "gpu_clock" in rec:
            lines.append("    gpu_clock: " + clean(rec["gpu_clock"]))
        return lines
    s = "  %s: %.3f ms" % (clean(rec["kind"]), rec["dur_ns"] / 1e6)
    if rec["expected_ns"] > 0:
        s += ", expected %.3f ms (%.2fx)" % (rec["expected_ns"] / 1e6,
                                             rec["dur_ns"] / rec["expected_ns"])
    s += "; chart %s, score %.2f, run %d%s" % (clean(rec["chart"]), rec["score"], rec["run"],
                                             " (opens an episode)" if rec["run"] == 1 else "")
    lines.append(s)
    for sus in rec["suspects"]:
        lines.append("    %s: %s" % (clean(sus["what"]), clean(sus["evidence"])))
    return lines


def main():
    args = sys.argv[1:]
    follow = args[:1] == ["--follow"]
    args = args[1:] if follow else args
    recs = [json.loads(l) for l in open(args[0], encoding="utf-8") if l.strip()]
    text = open(args[1], encoding="utf-8", errors="replace").read().split("\n")
    inst = args[2] if len(args) > 2 else None
    # when agentctl wrote the text: the age it printed counts to then
    now = datetime.datetime.fromtimestamp(os.path.getmtime(args[1]))
    of = " of " + inst if inst else ""
    m = re.fullmatch(r"(\d+) of (\d+) anomaly records%s, oldest first \(the agent keeps the "
                     r"last 256; (\d+) since it started\)" % re.escape(of), text[0])
    if follow and not m:
        m = re.fullmatch(r"no anomaly records%s( among those kept)? \(the agent keeps the "
                         r"last 256; (\d+) since it started\)" % re.escape(of), text[0])
        if not m:
            fail("header: %r" % text[0])
    elif follow:
        if int(m.group(1)) > len(recs):
            fail("header says %s at the start, the records are %d" % (m.group(1), len(recs)))
    elif not recs:
        m0 = re.fullmatch(r"no anomaly records%s( among those kept)? \(the agent keeps the "
                          r"last 256; (\d+) since it started\)" % re.escape(of), text[0])
        if not m0 or text[1:] not in ([], [""]):
            fail("no records, but the text is %r" % text[:3])
        print("ok 0")
        return
    if not m:
        fail("header: %r" % text[0])
    if not follow:
        n, matched, seen = (int(g) for g in m.groups())
        if n != len(recs) or matched < n or seen < matched:
            fail("header says %d of %d (%d seen), the records are %d"
                 % (n, matched, seen, len(recs)))
    i = 1
    for k, rec in enumerate(recs):
        if rec.get("type") not in ("anomaly", "level_shift"):
            fail("record %d is a %s" % (k, rec.get("type")))
        if inst and rec.get("instance") != inst:
            fail("record %d is of %r, not %r" % (k, rec.get("instance"), inst))
        want = block(rec)
        if i >= len(text) or text[i] != "":
            fail("no blank line before record %d: %r" % (k, text[i:i + 1]))
        i += 1
        off = when_ok(text[i], now) if i < len(text) else None
        if off is None:
            fail("record %d: no time at the head of %r" % (k, text[i:i + 1]))
        got = [text[i][off:]] + text[i + 1:i + len(want)]
        if got != want:
            fail("record %d: got %r, want %r" % (k, got, want))
        i += len(want)
    if text[i:] not in ([], [""]):
        fail("more text after the records: %r" % text[i:i + 2])
    print("ok %d" % len(recs))


if __name__ == "__main__":
    main()
