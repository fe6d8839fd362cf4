#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""dashboard_check.py DASHBOARD.json TMPDIR - the Grafana dashboard's
layout and queries (tests/integration/dashboard.sh runs it; it prints one
PASS/FAIL line per case):

  dashboard_layout        panel ids unique, every panel inside the 24
                          columns and none overlapping another, each
                          panel's data source and its queries' the
                          ${datasource} variable, refIds unique in a panel,
                          every $variable a query uses defined
  dashboard_promql        every query (the variables put in, as Grafana
                          does) passes `promtool check rules`
  dashboard_series_served every infertrace_* series a query or a variable
                          reads is a family the agent serves (its sources'
                          names; the Kafka sink's from docs/events.md's
                          kafka.* fields, as metrics.c makes them)
  dashboard_queries       `promtool test rules`: the main panels' queries,
                          on series made up here, give the values worked
                          out by hand (below): a quantile per instance, a
                          rate per phase, anomalies by kind, ratios

Grafana's own types are checked by tests/node/dashboard_check.mjs."""
import glob
import json
import os
import re
import subprocess
import sys

# what Grafana puts in for its variables here: All for the multi-value ones
VARS = {"$node": ".*", "$instance": ".*", "$__rate_interval": "5m", "$__range": "1h"}
GRID = 24


def out(name, problems):
    if problems:
        print("FAIL %s: %s" % (name, "; ".join(problems[:4]) + (" (+%d more)" % (len(problems) - 4) if len(problems) > 4 else "")))
    else:
        print("PASS %s" % name)


def substitute(expr):
    for k in sorted(VARS, key=len, reverse=True):  # $__rate_interval before $__range
        expr = expr.replace(k, VARS[k])
    return expr


def panels_of(d):
    for p in d["panels"]:
        yield p
        for q in p.get("panels", []):
            yield q


def queries(d):
    """(panel id, refId, expr) of every panel's queries"""
    for p in panels_of(d):
        for t in p.get("targets", []):
            yield p["id"], t.get("refId"), t.get("expr", "")


def variable_queries(d):
    for v in d.get("templating", {}).get("list", []):
        q = v.get("query")
        if v.get("type") == "query":
            q = q.get("query") if isinstance(q, dict) else q
            m = re.match(r"label_values\((.*),\s*(\w+)\)$", q or "")
            yield v["name"], m.group(1) if m else None


def layout(d):
    problems, ids, boxes = [], set(), []
    names = {"$" + v["name"] for v in d.get("templating", {}).get("list", [])}
    names |= {"$__rate_interval", "$__range", "$__interval"}
    for p in panels_of(d):
        if p["id"] in ids:
            problems.append("panel id %d twice" % p["id"])
        ids.add(p["id"])
        g = p.get("gridPos", {})
        if g.get("x", -1) < 0 or g.get("w", 0) < 1 or g["x"] + g["w"] > GRID or g.get("h", 0) < 1 or g.get("y", -1) < 0:
            problems.append("panel %d: gridPos %s outside the %d columns" % (p["id"], g, GRID))
            continue
        for q, h in boxes:
            if (g["x"] < h["x"] + h["w"] and h["x"] < g["x"] + g["w"] and
                    g["y"] < h["y"] + h["h"] and h["y"] < g["y"] + g["h"]):
                problems.append("panels %d and %d overlap" % (q, p["id"]))
        boxes.append((p["id"], g))
        if p["type"] == "row":
            continue
        if p.get("datasource", {}).get("uid") != "${datasource}":
            problems.append("panel %d: data source %s, want ${datasource}" % (p["id"], p.get("datasource")))
        refs = [t.get("refId") for t in p.get("targets", [])]
        if not refs or len(set(refs)) != len(refs):
            problems.append("panel %d: refIds %s" % (p["id"], refs))
        for t in p.get("targets", []):
            if t.get("datasource", {}).get("uid") != "${datasource}":
                problems.append("panel %d %s: data source %s" % (p["id"], t.get("refId"), t.get("datasource")))
            for v in re.findall(r"\$\w+", t.get("expr", "")):
                if v not in names:
                    problems.append("panel %d %s: %s is no variable" % (p["id"], t.get("refId"), v))
    for name, sel in variable_queries(d):
        if sel is None:
            problems.append("variable %s: not label_values(SELECTOR, LABEL)" % name)
    out("dashboard_layout", problems)


def promql(d, tmp):
    rules = []
    for pid, ref, expr in queries(d):
        rules.append({"record": "dashboard:panel_%d_%s" % (pid, ref), "expr": substitute(expr)})
    for name, sel in variable_queries(d):
        if sel:
            rules.append({"record": "dashboard:variable_%s" % name, "expr": substitute(sel)})
    path = os.path.join(tmp, "dashboard_rules.json")  # JSON is YAML
    json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(path, "w"), indent=1)
    r = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True)
    out("dashboard_promql", [] if r.returncode == 0 and "SUCCESS" in r.stdout else
        [" ".join((r.stdout + r.stderr).split())[:400]])
    return path


def served(d, root):
    fams = set()
    for f in glob.glob(os.path.join(root, "agent", "**", "*.c"), recursive=True):
        fams |= set(re.findall(r'"(infertrace_[a-z0-9_]+)', open(f, errors="replace").read()))
    # the Kafka sink's: every numeric kafka.* member of the stats record (metrics.c)
    events = open(os.path.join(root, "docs", "events.md")).read()
    for k in re.findall(r"^\| `kafka\.([a-z0-9_]+)`", events, re.M):
        if not k.startswith("dropped_"):
            fams.add("infertrace_kafka_" + k)
    # labels the agent writes (the step histogram's infertrace_instance) are no series
    labels = set()
    for f in glob.glob(os.path.join(root, "agent", "**", "*.c"), recursive=True):
        labels |= set(re.findall(r"(infertrace_[a-z0-9_]+)=", open(f, errors="replace").read()))
    problems = []
    exprs = [e for _, _, e in queries(d)] + [s for _, s in variable_queries(d) if s]
    for e in exprs:
        for m in sorted(set(re.findall(r"infertrace_[a-z0-9_]+", e)) - labels):
            base = re.sub(r"_(bucket|count|sum)$", "", m)
            if m not in fams and base not in fams:
                problems.append("%s is not a family the agent serves" % m)
    out("dashboard_series_served", sorted(set(problems)))


# made-up series and what the dashboard's queries give on them at 60m
# (input interval 1m; $__rate_interval 5m, $__range 1h)
SERIES = [
    # llm-a's decode steps all in (50, 60] ms, 100 a second; llm-b's in (100, 125] ms, 50 a second;
    # llm-a's prefill steps in (300, 500] ms, 1 a second: not in the decode quantiles
    ('infertrace_step_duration_seconds_bucket{node="n1",infertrace_instance="llm-a",phase="decode",le="0.05"}', "0x60"),
    ('infertrace_step_duration_seconds_bucket{node="n1",infertrace_instance="llm-a",phase="decode",le="0.06"}', "0+6000x60"),
    ('infertrace_step_duration_seconds_bucket{node="n1",infertrace_instance="llm-a",phase="decode",le="+Inf"}', "0+6000x60"),
    ('infertrace_step_duration_seconds_count{node="n1",infertrace_instance="llm-a",phase="decode"}', "0+6000x60"),
    ('infertrace_step_duration_seconds_bucket{node="n1",infertrace_instance="llm-b",phase="decode",le="0.1"}', "0x60"),
    ('infertrace_step_duration_seconds_bucket{node="n1",infertrace_instance="llm-b",phase="decode",le="0.125"}', "0+3000x60"),
    ('infertrace_step_duration_seconds_bucket{node="n1",infertrace_instance="llm-b",phase="decode",le="+Inf"}', "0+3000x60"),
    ('infertrace_step_duration_seconds_count{node="n1",infertrace_instance="llm-b",phase="decode"}', "0+3000x60"),
    ('infertrace_step_duration_seconds_bucket{node="n1",infertrace_instance="llm-a",phase="prefill",le="0.3"}', "0x60"),
    ('infertrace_step_duration_seconds_bucket{node="n1",infertrace_instance="llm-a",phase="prefill",le="0.5"}', "0+60x60"),
    ('infertrace_step_duration_seconds_bucket{node="n1",infertrace_instance="llm-a",phase="prefill",le="+Inf"}', "0+60x60"),
    ('infertrace_step_duration_seconds_count{node="n1",infertrace_instance="llm-a",phase="prefill"}', "0+60x60"),
    # an episode a minute, one new level in the hour
    ('infertrace_anomaly_episodes_total{node="n1"}', "0+1x60"),
    ('infertrace_level_shifts_total{node="n1"}', "0x30 1x30"),
    # 10 host stalls and 2 GPU slowdowns a minute
    ('infertrace_anomalies_total{node="n1",kind="host_stall"}', "0+10x60"),
    ('infertrace_anomalies_total{node="n1",kind="gpu_slow"}', "0+2x60"),
    ('infertrace_anomalies_total{node="n1",kind="straggler"}', "0x60"),
    # of them, llm-b opened an episode every minute, llm-a none
    ('infertrace_instance_anomaly_episodes_total{node="n1",infertrace_instance="llm-a"}', "0x60"),
    ('infertrace_instance_anomaly_episodes_total{node="n1",infertrace_instance="llm-b"}', "0+1x60"),
    # the GPU's queue: every launch starts (1, 2.5] ms after it
    ('infertrace_gpu_launch_to_start_seconds_bucket{node="n1",le="0.001"}', "0x60"),
    ('infertrace_gpu_launch_to_start_seconds_bucket{node="n1",le="0.0025"}', "0+600x60"),
    ('infertrace_gpu_launch_to_start_seconds_bucket{node="n1",le="+Inf"}', "0+600x60"),
    # GPU 0 at half its clock, held down by hardware slowdown with GPU 1; power
    ('infertrace_gpu_sm_clock_mhz{node="n1",device="0"}', "990x60"),
    ('infertrace_gpu_sm_clock_max_mhz{node="n1",device="0"}', "1980x60"),
    ('infertrace_gpu_clock_throttled{node="n1",device="0",reason="hw_slowdown"}', "1x60"),
    ('infertrace_gpu_clock_throttled{node="n1",device="1",reason="hw_slowdown"}', "1x60"),
    ('infertrace_gpu_clock_throttled{node="n1",device="0",reason="sw_power_cap"}', "0x60"),
    ('infertrace_gpu_clock_throttled{node="n1",device="0",reason="gpu_idle"}', "1x60"),
    ('infertrace_gpu_power_watts{node="n1",device="0"}', "525x60"),
    ('infertrace_gpu_power_limit_watts{node="n1",device="0"}', "700x60"),
    # the agent: 3 ring drops a second; half a core; Kafka queue a quarter full, spill empty
    ('infertrace_drops_total{node="n1",stage="bpf_ring"}', "0+180x60"),
    ('infertrace_drops_total{node="n1",stage="sink"}', "0x60"),
    ('infertrace_process_cpu_seconds_total{node="n1"}', "0+30x60"),
    ('infertrace_kafka_queue_records{node="n1"}', "25000x60"),
    ('infertrace_kafka_queue_max{node="n1"}', "100000x60"),
    ('infertrace_kafka_spill_bytes{node="n1"}', "0x60"),
    ('infertrace_kafka_spill_max_bytes{node="n1"}', "1073741824x60"),
]


def hq(q, lo, hi, rate):
    """histogram_quantile() when every observation is in one bucket (lo, hi]
    at rate per second: linear within the bucket, in Prometheus's order of
    operations (promql/quantile.go, bucketQuantile), so the float is the same"""
    return lo + (hi - lo) * ((q * rate) / rate)


# (panel id, refId): [(labels, value)]
EXPECT = {
    (1, "A"): [('{node="n1",infertrace_instance="llm-a"}', hq(0.99, 0.05, 0.06, 100)),
               ('{node="n1",infertrace_instance="llm-b"}', hq(0.99, 0.1, 0.125, 50))],
    (2, "A"): [('{node="n1",infertrace_instance="llm-a"}', hq(0.5, 0.05, 0.06, 100)),
               ('{node="n1",infertrace_instance="llm-b"}', hq(0.5, 0.1, 0.125, 50))],
    (3, "A"): [('{node="n1",infertrace_instance="llm-a"}', hq(0.99, 0.3, 0.5, 1))],
    (4, "A"): [('{node="n1",infertrace_instance="llm-a",phase="decode"}', 100),
               ('{node="n1",infertrace_instance="llm-b",phase="decode"}', 50),
               ('{node="n1",infertrace_instance="llm-a",phase="prefill"}', 1)],
    (5, "A"): [("{}", 60)],
    (6, "A"): [("{}", 1)],
    (7, "A"): [('{kind="host_stall"}', 50), ('{kind="gpu_slow"}', 10), ('{kind="straggler"}', 0)],
    (17, "A"): [('{node="n1",infertrace_instance="llm-a"}', 0), ('{node="n1",infertrace_instance="llm-b"}', 5)],
    (8, "A"): [('{node="n1"}', hq(0.99, 0.001, 0.0025, 10))],
    (9, "A"): [('{node="n1",device="0"}', 0.5)],
    (10, "A"): [('{node="n1",reason="hw_slowdown"}', 2), ('{node="n1",reason="sw_power_cap"}', 0)],
    (11, "A"): [('{node="n1",device="0"}', 0.75)],
    (12, "A"): [('{node="n1",stage="bpf_ring"}', 3), ('{node="n1",stage="sink"}', 0)],
    (13, "A"): [('{node="n1"}', 0.5)],
    (16, "A"): [('{node="n1"}', 0.25)],
    (16, "B"): [('{node="n1"}', 0)],
}


def evaluate(d, tmp, rules):
    exprs = {(pid, ref): e for pid, ref, e in queries(d)}
    missing = [k for k in EXPECT if k not in exprs]
    if missing:
        out("dashboard_queries", ["no query %s in the dashboard" % (missing,)])
        return
    tests = [{
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in SERIES],
        "promql_expr_test": [{
            "expr": substitute(exprs[k]),
            "eval_time": "60m",
            "exp_samples": [{"labels": l, "value": v} for l, v in EXPECT[k]],
        } for k in sorted(EXPECT)],
    }]
    path = os.path.join(tmp, "dashboard_test.json")
    json.dump({"rule_files": [os.path.basename(rules)], "evaluation_interval": "1m", "tests": tests},
              open(path, "w"), indent=1)
    r = subprocess.run(["promtool", "test", "rules", path], capture_output=True, text=True, cwd=tmp)
    out("dashboard_queries", [] if r.returncode == 0 else [" ".join((r.stdout + r.stderr).split())[:600]])


def main():
    d = json.load(open(sys.argv[1]))
    tmp = sys.argv[2]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    layout(d)
    rules = promql(d, tmp)
    served(d, root)
    evaluate(d, tmp, rules)


if __name__ == "__main__":
    main()
