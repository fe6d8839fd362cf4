#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# kafka_compare.py DUMP MODE FILE... - Kafka (kcat -J envelopes, one a line)
# against the agent's JSON lines, for kafka_lib.sh kafka_compare (which
# documents the modes and the fields of the one JSON object printed). It
# was a single jq program: its accumulators copied arrays per message, so
# 22,000 records took minutes on a loaded machine (issue 18); here each
# step is linear. Environment: EVENTS (same|subseq), DEDUP (0|1).
import json
import os
import re
import sys

RID_RE = re.compile(r"^(?P<run>[0-9a-f]+)-(?P<seq>[0-9]+)$")


def parse(s):
    """jq's `try fromjson catch null`"""
    if not isinstance(s, str):
        return None
    try:
        return json.loads(s)
    except ValueError:
        return None


def text(v):
    """a value as jq's string interpolation writes it"""
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def jq_order(v):
    """jq's sort order for the scalars found here: null < false < true < numbers < strings"""
    if v is None:
        return (0, 0)
    if v is False:
        return (1, 0)
    if v is True:
        return (2, 0)
    if isinstance(v, (int, float)):
        return (3, v)
    if isinstance(v, str):
        return (4, v)
    return (5, json.dumps(v, sort_keys=True))


def rid(m):
    h = m.get("headers") or []
    for i in range(0, len(h), 2):
        if h[i] == "infertrace-id":
            v = h[i + 1] if i + 1 < len(h) else None
            return v if v not in (None, False) else None
    return None


def rid_parts(m):
    """a message's infertrace-id as (run, seq), or (None, None)"""
    mm = RID_RE.match(m["rid"]) if isinstance(m["rid"], str) else None
    return (mm.group("run"), int(mm.group("seq"))) if mm else (None, None)


def is_subseq(a, b):
    """a is a subsequence of b"""
    i = 0
    for x in a:
        while i < len(b) and b[i] != x:
            i += 1
        if i == len(b):
            return False
        i += 1
    return True


def main():
    dump, mode, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    events = os.environ.get("EVENTS", "same")
    dedup = os.environ.get("DEDUP", "0")

    allm = []
    with open(dump, encoding="utf-8", errors="replace") as f:
        dec = json.JSONDecoder()
        data = f.read()
        pos = 0
        while True:
            while pos < len(data) and data[pos] in " \t\r\n":
                pos += 1
            if pos >= len(data):
                break
            m, pos = dec.raw_decode(data, pos)
            m["rec"] = parse(m.get("payload"))
            m["rid"] = rid(m)
            allm.append(m)

    if dedup == "1":
        seen = set()
        msgs = []
        for m in sorted(
            allm,
            key=lambda m: (jq_order(m.get("topic")), jq_order(m.get("partition")),
                           jq_order(m.get("offset"))),
        ):
            if m["rid"] is not None and m["rid"] in seen:
                continue
            if m["rid"] is not None:
                seen.add(m["rid"])
            msgs.append(m)
    else:
        msgs = allm

    lines = []
    first = set()  # the first file's lines (suffix-killed)
    for n, path in enumerate(files):
        with open(path, encoding="utf-8", errors="replace") as f:
            got = [x for x in f.read().split("\n") if x]
        lines.extend(got)
        if n == 0:
            first.update(got)

    # suffix-killed: the first file's run was killed, and the file lost the
    # tail its stdio buffer held while Kafka's spill had it. Those records
    # are the first run's (its infertrace-id run) and later than every one
    # of its records that the file has; they are set aside, counted, and
    # the rest compared as in suffix
    lost, run1, lost_misplaced = set(), None, []
    if mode == "suffix-killed":
        seqs = {}
        for m in msgs:
            run, seq = rid_parts(m)
            if run is not None and m.get("payload") in first:
                seqs.setdefault(run, []).append(seq)
        if seqs:
            run1 = max(seqs, key=lambda r: len(seqs[r]))
            last1 = max(seqs[run1])
            for m in msgs:
                run, seq = rid_parts(m)
                if run == run1 and seq > last1 and m.get("payload") not in first:
                    lost.add(m["rid"])

    # which topics each record type went to (keys in jq's group_by order)
    by_type = {}
    for m in msgs:
        if isinstance(m["rec"], dict):
            by_type.setdefault(json.dumps(m["rec"].get("type")), []).append(m["topic"])
    tmap = {}
    for k in sorted(by_type, key=lambda k: jq_order(json.loads(k))):
        tmap[text(json.loads(k))] = sorted(set(by_type[k]), key=jq_order)

    # Kafka's values per (topic, key), partition order
    groups = {}
    for m in msgs:
        groups.setdefault((m.get("topic"), json.dumps(m.get("key"))), []).append(m)
    kseq = {}
    for tk in sorted(groups, key=lambda g: (jq_order(g[0]), jq_order(json.loads(g[1])))):
        g = groups[tk]
        ordered = sorted(
            g, key=lambda x: (jq_order(x.get("partition")), jq_order(x.get("offset"))))
        name = "%s %s" % (text(tk[0]), text(json.loads(tk[1])))
        vals = [x.get("payload") for x in ordered if x["rid"] not in lost]
        # the lost tail sits between the first run's other records and the
        # second run's: classes 0 (first run), 1 (lost tail), 2 (the rest)
        if lost:
            cls = [1 if x["rid"] in lost else 0 if rid_parts(x)[0] == run1 else 2 for x in ordered]
            if cls != sorted(cls):
                lost_misplaced.append(name)
        kseq[name] = {
            "parts": len({json.dumps(x.get("partition")) for x in g}),
            "vals": vals,
        }

    # the files' lines per (topic of their type, instance), file order
    recs = []
    for i, ln in enumerate(lines):
        v = parse(ln)
        if isinstance(v, dict):
            t = v.get("type")
            topics = tmap.get(t) if isinstance(t, str) else None
            recs.append((i, v, topics[0] if topics else None))
    fgroups = {}
    for i, v, topic in recs:
        if topic is not None:
            fgroups.setdefault((topic, json.dumps(v.get("instance"))), []).append(lines[i])
    fseq = {}
    for tk in sorted(fgroups, key=lambda g: (jq_order(g[0]), jq_order(json.loads(g[1])))):
        fseq["%s %s" % (text(tk[0]), text(json.loads(tk[1])))] = fgroups[tk]

    mismatch = []
    for tk in sorted(set(kseq) | set(fseq)):
        kv = kseq[tk]["vals"] if tk in kseq else []
        fv = fseq.get(tk, [])
        why = None
        if re.search(r"\.events ", tk) and events == "subseq":
            if not is_subseq(kv, fv):
                why = "%s: not a subsequence of the file (kafka %d, file %d)" % (
                    tk, len(kv), len(fv))
        elif mode == "cover":
            if not is_subseq(fv, kv):
                why = "%s: the file (%d) is not in kafka (%d) in order" % (tk, len(fv), len(kv))
        elif mode == "exact":
            if kv != fv:
                at = next((j for j in range(max(len(kv), len(fv)))
                           if (kv[j] if j < len(kv) else None) !=
                           (fv[j] if j < len(fv) else None)), "?")
                why = "%s: kafka %d file %d, first difference at %s" % (tk, len(kv), len(fv), at)
        else:
            if not (len(kv) <= len(fv) and fv[len(fv) - len(kv):] == kv):
                why = "%s: kafka %d not a suffix of file %d" % (tk, len(kv), len(fv))
        if why is not None:
            mismatch.append(why)

    runs = {}
    for m in msgs:
        run, seq = rid_parts(m)
        if run is not None:
            runs.setdefault(run, set()).add(seq)
    id_gaps = [run for run in sorted(runs)
               if min(runs[run]) != 1 or len(runs[run]) != max(runs[run])]

    by_topic = {}
    for m in msgs:
        by_topic[m.get("topic")] = by_topic.get(m.get("topic"), 0) + 1

    out = {
        "messages": len(msgs),
        "dups": len(allm) - len(msgs),
        "no_id": sum(1 for m in allm if m["rid"] is None),
        "id_gaps": id_gaps,
        "bad_json": sum(1 for m in msgs if not isinstance(m["rec"], dict)),
        "bad_key": sum(1 for m in msgs
                       if isinstance(m["rec"], dict) and m["rec"].get("instance") != m.get("key")),
        "split": [k for k, v in kseq.items() if v["parts"] > 1],
        "types": ["%s:%s" % (k, ",".join(v)) for k, v in tmap.items() if len(v) > 1],
        "file_records": len(recs),
        "unmapped": sorted({json.dumps(v.get("type")) for _, v, t in recs if t is None},
                           key=lambda s: jq_order(json.loads(s))),
        "mismatch": (mismatch + ["%s: a record of the first file's lost tail out of order" % k
                                 for k in lost_misplaced])[:5],
        "n_mismatch": len(mismatch) + len(lost_misplaced),
        "first_tail_lost": len(lost),
        "type_topic": tmap,
        "kafka_by_topic": {text(k): by_topic[k] for k in sorted(by_topic, key=jq_order)},
    }
    out["unmapped"] = [json.loads(s) for s in out["unmapped"]]
    print(json.dumps(out, separators=(",", ":"), ensure_ascii=False))


if __name__ == "__main__":
    main()
