# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""check_real - what the real-GPU check (scripts/gpu_check.sh) asserts.

usage: check_real.py cuda|torch|nccl|nccl_sentinel|sentinel|diag WORKLOAD_LINES AGENT_JSONL [DEEP_KERNELS] [--all-joined]

cuda (tests/gpu/real_cuda.cu under --mode deep): every call of the workload has
  exactly its n GPU records, each joined to it: matched, same pid and tid, the
  call's entry point, launch_ts_ns inside the call's [t0, t1] on
  CLOCK_MONOTONIC and equal to the one cuda_launch uprobe record of that call
  (memset: no uprobe, the CUPTI callback's time, launch_src cupti), and no
  record of the driver entry point the runtime call enters (cudaLaunchKernel
  -> cuLaunchKernel ...: folded, counted in thread.nested_calls); every
  cuda_sync of the workers is cudaStreamSynchronize (not the nested
  cuStreamSynchronize); the GPU
  start after the launch (after the call's t0 where only the CUPTI callback,
  at API exit, stamps it) and the end before the host saw the stream
  synchronised (t2); the spin kernel lasts its SPIN_NS; graph kernels carry
  distinct graph node ids; no GPU record of the process is left over.
torch (tests/gpu/torch_steps.py under --mode deep): every GPU record of the
  process joined, started after its launch, inside a step's [t0, t2] or
  before the first (warm-up); which entry points launched them.
nccl (tests/gpu/torch_nccl.py under --mode deep: one rank, real NCCL): each
  collective call has one `collective` record (op, count, datatype, bytes,
  the communicator known: rank 0 of 1, enqueue inside the call, GPU start
  after it when joined), an nccl_comm record exists, and every NCCL kernel
  the GPU ran is joined to a collective.
nccl_sentinel (torch_nccl.py in sentinel mode): the collective_summary rows
  count every call per op (the workload's and its warm-up all-reduce) and
  their bytes, on a known communicator (rank 0 of 1); the flight recorder's
  window, sent by a deep-dive, holds one collective record per call (seq 0..30,
  the decoded arguments, the stack-passed stream of the 7-argument calls
  not read: 0x0).
sentinel (torch_steps.py in sentinel mode): gpu_summary records count the
  process's kernels, as many as the deep run's DEEP_KERNELS. In sentinel the
  shim sends at most INFERTRACE_SHIM_LAUNCH_RATE (200) kernel-launch records
  per thread per second, so kernels past that budget are unmatched by
  design (reported); with --all-joined (the rate raised for the run) every
  kernel must be joined.
diag (tests/gpu/torch_faults.py in sentinel mode, the launch-record budget
  raised): at least 95% of the workload's steps have exactly one `step`
  record of the launching thread (its midpoint inside the step's [t0, t2]),
  and the run has at least one anomaly. Reported, per fault kind, against
  what the workload says it injected (the issue 17 protocol on a real
  stream with a breakdown): episodes, episodes caught on one of their steps
  or the step after (recall), faulted steps flagged, the lag to the first
  flag, and the share of the hits whose kind names the fault; and the
  natural false positive rate: clean steps from the first fault on, not the
  step right after an episode, that were flagged.

Prints a JSON report on stdout; exit status 1 when a check failed.
"""
import bisect
import collections
import json
import sys

SPIN_NS = 200000


def lines(path):
    res = []
    with open(path, errors="replace") as f:
        for ln in f:
            ln = ln.strip()
            if not ln:
                continue
            try:
                res.append(json.loads(ln))
            except ValueError:
                pass
    return res


def pct(v, p):
    if not v:
        return None
    v = sorted(v)
    return v[min(len(v) - 1, max(0, int(round(p / 100.0 * len(v) + 0.5)) - 1))]


def dist(v):
    return {"count": len(v), "min": min(v) if v else None, "p50": pct(v, 50),
            "p99": pct(v, 99), "max": max(v) if v else None}


def common(work, agent):
    pid = next(w["pid"] for w in work if "pid" in w)
    gpu = [r for r in agent if r.get("type") in ("kernel", "memcpy", "memset")
           and r.get("pid") == pid]
    ups = [r for r in agent if r.get("type") == "cuda_launch" and r.get("pid") == pid]
    shim = [r for r in agent if r.get("type") == "shim_status" and r.get("pid") == pid]
    final = [r for r in agent if r.get("type") == "stats" and r.get("final")]
    rep = {
        "pid": pid,
        "gpu_records": len(gpu),
        "by_type": dict(collections.Counter(r["type"] for r in gpu)),
        "cuda_launch_records": len(ups),
        "uprobe_apis": dict(collections.Counter(r.get("api") for r in ups)),
        "shim_clock": sorted({s.get("clock") for s in shim}),
        "shim_capture": sorted({s.get("capture") for s in shim}),
        "shim_dropped": max([s.get("records_dropped", 0) for s in shim] or [0]),
        "cupti_dropped": max([s.get("cupti_dropped", 0) for s in shim] or [0]),
        "stats_gpu": final[0].get("gpu") if final else None,
        "thread_launches": dict(sum((collections.Counter(r.get("launches") or {}) for r in agent
                                     if r.get("type") == "thread" and r.get("pid") == pid),
                                    collections.Counter())),
        "thread_nested_calls": sum(r.get("nested_calls", 0) for r in agent
                                   if r.get("type") == "thread" and r.get("pid") == pid),
    }
    return pid, gpu, ups, rep


def check_cuda(work, agent):
    pid, gpu, ups, rep = common(work, agent)
    calls = [w for w in work if "api" in w]
    bad, claimed = [], set()
    l2s = collections.defaultdict(list)
    slack, spin = [], []
    for c in calls:
        g = [r for r in gpu if r.get("tid") == c["tid"] and r.get("launch_api") == c["api"]
             and r.get("launch_ts_ns") is not None and c["t0"] <= r["launch_ts_ns"] <= c["t1"]]
        u = [r for r in ups if r.get("tid") == c["tid"] and r.get("api") == c["api"]
             and c["t0"] <= r["ts_ns"] <= c["t1"]]
        want_u = 0 if c["kind"] == "memset" else 1
        tag = "%s tid %d round %d" % (c["api"], c["tid"], c.get("round", -1))
        if len(u) != want_u:
            bad.append("%s: %d cuda_launch records in [t0,t1], want %d" % (tag, len(u), want_u))
        # the driver call the runtime makes inside it is folded into it
        other = [r["api"] for r in ups if r.get("tid") == c["tid"] and r.get("api") != c["api"]
                 and c["t0"] <= r["ts_ns"] <= c["t1"]]
        if other:
            bad.append("%s: nested %s recorded too" % (tag, ",".join(other)))
        if len(g) != c["n"]:
            bad.append("%s: %d GPU records, want %d" % (tag, len(g), c["n"]))
        for r in g:
            claimed.add(id(r))
            why = []
            if r.get("type") != c["kind"]:
                why.append("type " + str(r.get("type")))
            if r.get("matched") is not True:
                why.append("not matched")
            src = "cupti" if want_u == 0 else "uprobe+cupti"
            if r.get("launch_src") != src:
                why.append("launch_src %s want %s" % (r.get("launch_src"), src))
            if len(u) == 1 and r["launch_ts_ns"] != u[0]["ts_ns"]:
                why.append("launch_ts_ns %d != uprobe %d" % (r["launch_ts_ns"], u[0]["ts_ns"]))
            # the uprobe stamps the call's entry: the GPU starts after it; a
            # launch stamped by the CUPTI callback alone (memset) is the API
            # exit, which the GPU may beat: it starts after the call began
            first = r["launch_ts_ns"] + 1 if want_u else c["t0"]
            if not (first <= r["start_ns"] <= r["end_ns"] <= c["t2"]):
                why.append("launch %d start %d end %d t2 %d" % (r["launch_ts_ns"], r["start_ns"],
                                                                r["end_ns"], c["t2"]))
            if r.get("launch_to_start_ns") != r["start_ns"] - r["launch_ts_ns"]:
                why.append("launch_to_start_ns")
            if c["api"] == "cudaGraphLaunch" and (not r.get("graph_id") or not r.get("graph_node_id")):
                why.append("graph ids %s/%s" % (r.get("graph_id"), r.get("graph_node_id")))
            if why:
                bad.append("%s corr %s: %s" % (tag, r.get("correlation_id"), ", ".join(why)))
            l2s[c["api"]].append(r["start_ns"] - r["launch_ts_ns"])
            slack.append(c["t2"] - r["end_ns"])
            if c["api"] == "cudaLaunchKernel":
                spin.append(r["end_ns"] - r["start_ns"])
        if c["api"] == "cudaGraphLaunch" and len({r.get("graph_node_id") for r in g}) != len(g):
            bad.append("%s: graph node ids not distinct" % tag)
    extra = [r for r in gpu if id(r) not in claimed]
    for r in extra[:5]:
        bad.append("left over: %s %s corr %s matched %s api %s" % (
            r.get("type"), r.get("name", "")[:60], r.get("correlation_id"), r.get("matched"),
            r.get("launch_api")))
    if spin and min(spin) < SPIN_NS * 0.95:
        bad.append("spin kernel lasted %d ns on the GPU, want >= %d" % (min(spin), SPIN_NS))
    if rep["shim_clock"] != ["monotonic"]:
        bad.append("shim clock %s" % rep["shim_clock"])
    tids = {c["tid"] for c in calls}
    syncs = collections.Counter(r.get("api") for r in agent if r.get("type") == "cuda_sync"
                                and r.get("pid") == pid and r.get("tid") in tids)
    rounds = len([c for c in calls if c["api"] == "cudaMemsetAsync"])
    if syncs.get("cudaStreamSynchronize", 0) < rounds or set(syncs) != {"cudaStreamSynchronize"}:
        bad.append("cuda_sync %s, want cudaStreamSynchronize >= %d only" % (dict(syncs), rounds))
    rep.update({
        "cuda_sync": dict(syncs),
        "want_gpu_records": sum(c["n"] for c in calls),
        "left_over": len(extra),
        "launch_to_start_ns": {k: dist(v) for k, v in sorted(l2s.items())},
        "end_to_sync_return_ns": dist(slack),
        "spin_kernel_ns": dist(spin),
        "problems": len(bad),
        "first_problems": bad[:12],
    })
    return rep, not bad


def check_torch(work, agent):
    pid, gpu, ups, rep = common(work, agent)
    steps = [w for w in work if "step" in w]
    bad = []
    first = min(s["t0"] for s in steps) if steps else 0
    unmatched = [r for r in gpu if r.get("matched") is not True]
    before = [r for r in gpu if r["start_ns"] < first]
    in_step = collections.Counter()
    outside = []
    for r in gpu:
        if r["start_ns"] < first:
            continue
        s = next((s for s in steps if s["t0"] <= r["start_ns"] and r["end_ns"] <= s["t2"]), None)
        if s is None:
            outside.append(r)
        else:
            in_step[(s["step"], s["graph"])] += 1
    neg = [r for r in gpu if r.get("matched") and r["start_ns"] <= r["launch_ts_ns"]]
    if unmatched:
        bad.append("%d of %d GPU records not joined (first: %s via %s)" % (
            len(unmatched), len(gpu), unmatched[0].get("name", "")[:60], unmatched[0].get("launch_api")))
    if neg:
        bad.append("%d records start before their launch" % len(neg))
    if outside:
        bad.append("%d records outside every step window (first: %s)" % (
            len(outside), outside[0].get("name", "")[:60]))
    if rep["shim_clock"] != ["monotonic"]:
        bad.append("shim clock %s" % rep["shim_clock"])
    eager = [n for (i, gr), n in in_step.items() if not gr]
    graph = [n for (i, gr), n in in_step.items() if gr]
    l2s = [r["start_ns"] - r["launch_ts_ns"] for r in gpu if r.get("matched")]
    rep.update({
        "steps": len(steps),
        "unmatched": len(unmatched),
        "warmup_records": len(before),
        "records_per_eager_step": sorted(set(eager)),
        "records_per_graph_step": sorted(set(graph)),
        "launch_api": dict(collections.Counter(r.get("launch_api") for r in gpu)),
        "launch_src": dict(collections.Counter(r.get("launch_src") for r in gpu)),
        "launch_to_start_ns": dist(l2s),
        "top_kernels": collections.Counter(r.get("demangled", r.get("name", ""))[:80]
                                           for r in gpu if r["type"] == "kernel").most_common(8),
        "problems": len(bad),
        "first_problems": bad,
    })
    return rep, not bad


def check_sentinel(work, agent, deep_kernels, all_joined):
    pid = next(w["pid"] for w in work if "pid" in w)
    sums = [r for r in agent if r.get("type") == "gpu_summary" and r.get("pid") == pid]
    k = sum(r.get("kernels", 0) for r in sums)
    m = sum(r.get("matched", 0) for r in sums)
    u = sum(r.get("unmatched", 0) for r in sums)
    rep = {"pid": pid, "gpu_summary_records": len(sums), "kernels": k, "matched": m,
           "unmatched": u, "deep_kernels": deep_kernels,
           "launch_to_start_ns": [r.get("launch_to_start_ns") for r in sums if r.get("kernels")][:3]}
    bad = []
    if not sums or k == 0:
        bad.append("no gpu_summary with kernels for pid %d" % pid)
    if deep_kernels is not None and k != deep_kernels:
        bad.append("gpu_summary counted %d kernels, the deep run %d" % (k, deep_kernels))
    if all_joined and u:
        bad.append("%d of %d records unmatched" % (u, m + u))
    rep["first_problems"] = bad
    return rep, not bad


def check_nccl(work, agent):
    pid = next(w["pid"] for w in work if "pid" in w)
    calls = [w for w in work if "op" in w]
    colls = [r for r in agent if r.get("type") == "collective" and r.get("pid") == pid]
    comms = [r for r in agent if r.get("type") == "nccl_comm" and r.get("pid") == pid]
    kernels = [r for r in agent if r.get("type") == "kernel" and r.get("pid") == pid
               and "nccl" in (r.get("name") or "").lower()]
    bad = []
    for c in calls:
        m = [r for r in colls if r.get("tid") == c["tid"] and r.get("op") == c["op"]
             and r.get("enqueue_ns") is not None and c["t0"] <= r["enqueue_ns"] <= c["t1"]]
        tag = "%s step %d" % (c["op"], c["step"])
        if len(m) != 1:
            bad.append("%s: %d collective records in [t0,t1], want 1" % (tag, len(m)))
            continue
        r = m[0]
        want = {"count": c["count"], "datatype": c["dtype"], "bytes": c["count"] * 2,
                "comm_known": True, "rank": 0, "nranks": 1}
        diff = ["%s %s (want %s)" % (k, r.get(k), v) for k, v in want.items() if r.get(k) != v]
        if diff:
            bad.append("%s: %s" % (tag, ", ".join(diff)))
        if r.get("joined") and not (r["enqueue_ns"] < r["gpu_start_ns"] <= r["gpu_end_ns"]):
            bad.append("%s: enqueue %s gpu %s-%s" % (tag, r["enqueue_ns"], r.get("gpu_start_ns"),
                                                     r.get("gpu_end_ns")))
    # every NCCL kernel the GPU ran is some collective's
    joined = {(r.get("kernel"), r.get("gpu_start_ns")) for r in colls if r.get("joined")}
    lone = [k for k in kernels if (k.get("name"), k.get("start_ns")) not in joined]
    if lone:
        bad.append("%d of %d NCCL kernels joined to no collective (first: %s)" % (
            len(lone), len(kernels), lone[0].get("name")))
    if not comms:
        bad.append("no nccl_comm record")
    rep = {"pid": pid, "calls": len(calls), "collective_records": len(colls),
           "by_op": dict(collections.Counter(r.get("op") for r in colls)),
           "joined": sum(1 for r in colls if r.get("joined")),
           "kernels": dict(collections.Counter(k.get("name") for k in kernels)),
           "nccl_comm": [{k: r.get(k) for k in ("api", "comm_hash", "rank", "nranks", "ret")}
                         for r in comms][:4],
           "first_collective": {k: v for k, v in (colls[0] if colls else {}).items()
                                if k not in ("schema", "host", "instance")},
           "problems": len(bad), "first_problems": bad[:12]}
    return rep, not bad


def check_nccl_sentinel(work, agent):
    """sentinel: the collective_summary rows of the process count every call
    (the workload's, plus its one warm-up all-reduce) and its bytes, on a
    known communicator (rank 0 of 1)"""
    pid = next(w["pid"] for w in work if "pid" in w)
    calls = [w for w in work if "op" in w]
    want = collections.Counter(c["op"] for c in calls)
    want["allreduce"] += 1  # the warm-up
    rows = [r for r in agent if r.get("type") == "collective_summary" and r.get("pid") == pid]
    got = collections.Counter()
    nbytes = collections.Counter()
    bad = []
    for r in rows:
        got[r.get("op")] += r.get("calls") or 0
        nbytes[r.get("op")] += r.get("bytes") or 0
        if (r.get("rank"), r.get("nranks")) != (0, 1):
            bad.append("row %s: rank %s of %s (want 0 of 1)" % (r.get("op"), r.get("rank"),
                                                                 r.get("nranks")))
    for op in sorted(set(want) | set(got)):
        if got[op] != want[op]:
            bad.append("%s: %d calls summarised, want %d" % (op, got[op], want[op]))
        elif nbytes[op] != want[op] * (1 << 21):
            bad.append("%s: %d bytes, want %d" % (op, nbytes[op], want[op] * (1 << 21)))
    if not rows:
        bad.append("no collective_summary row")
    # the flight recorder's window (a deep-dive sent it): one record per call
    single = [r for r in agent if r.get("type") == "collective" and r.get("pid") == pid]
    if not any(r.get("type") == "flight_recorder" for r in agent):
        bad.append("no flight_recorder record (the window was not sent)")
    wgot = collections.Counter(r.get("op") for r in single)
    if wgot != want:
        bad.append("window collectives %s, want %s" % (dict(wgot), dict(want)))
    for r in single:
        # the 7-argument calls pass their stream on the stack: not read in sentinel
        # (0x0); PyTorch passes 0x0 to all-gather too here (seen on an H100)
        st_ok = r.get("stream") == "0x0" if r.get("op") in ("allreduce", "broadcast") \
            else isinstance(r.get("stream"), str)
        if not (r.get("comm_known") and r.get("rank") == 0 and r.get("nranks") == 1
                and r.get("count") == 1 << 20 and r.get("bytes") == 1 << 21
                and r.get("datatype") == "bfloat16" and st_ok):
            bad.append("window record %s" % {k: r.get(k) for k in (
                "op", "seq", "comm_known", "rank", "nranks", "count", "bytes", "stream")})
            break
    seqs = sorted(r.get("seq") for r in single)
    if seqs != list(range(len(single))):
        bad.append("window seq %s..., want 0..%d" % (seqs[:5], len(single) - 1))
    rep = {"pid": pid, "calls": len(calls) + 1, "summary_rows": len(rows),
           "calls_by_op": dict(got), "bytes_by_op": dict(nbytes),
           "window_collectives": dict(wgot), "first_row": {k: v for k, v in (rows[0] if rows else {}).items()
                                                        if k not in ("schema", "host", "instance")},
           "problems": len(bad), "first_problems": bad[:12]}
    return rep, not bad


def check_diag(work, agent):
    pid = next(w["pid"] for w in work if "pid" in w)
    ws = [w for w in work if "step" in w and "t0" in w]
    tid = ws[0]["tid"] if ws else None
    steps = [r for r in agent if r.get("type") == "step" and r.get("pid") == pid
             and r.get("tid") == tid]
    anoms = [r for r in agent if r.get("type") == "anomaly" and r.get("kind") != "straggler"]
    bad = []
    # each agent step to the workload step holding its midpoint
    t0s = [w["t0"] for w in ws]
    per = collections.defaultdict(list)
    for r in steps:
        mid = r["start_ns"] + r["dur_ns"] // 2
        i = bisect.bisect_right(t0s, mid) - 1
        if i >= 0 and mid <= ws[i]["t2"]:
            per[i].append(r)
    one = sum(1 for i in range(len(ws)) if len(per[i]) == 1)
    if not ws or one < 0.95 * len(ws):
        bad.append("%d of %d workload steps have exactly one step record" % (one, len(ws)))
    by_start = {r["start_ns"]: i for i in per for r in per[i]}
    flag = {}
    for a in anoms:
        i = by_start.get(a.get("step_start_ns"))
        if i is not None:
            flag.setdefault(i, a)
    if not anoms:
        bad.append("no anomaly at all")
    first = next((i for i, w in enumerate(ws) if w["fault"] != "none"), len(ws))
    eps = collections.defaultdict(list)
    for i, w in enumerate(ws):
        if w["ep"] >= 0:
            eps[w["ep"]].append(i)
    after = {idx[-1] + 1 for idx in eps.values()}
    clean = [i for i in range(first, len(ws)) if ws[i]["fault"] == "none" and i not in after]
    fp = [i for i in clean if i in flag]
    kinds = {}
    for kind in ("host_stall", "gpu_slow", "cpu_contention"):
        mine = [idx for idx in eps.values() if ws[idx[0]]["fault"] == kind]
        caught, lags, hits, right, fsteps, flagged = 0, [], 0, 0, 0, 0
        for idx in mine:
            seen = [i for i in idx + [idx[-1] + 1] if i in flag]
            fsteps += len(idx)
            flagged += sum(1 for i in idx if i in flag)
            if seen:
                caught += 1
                lags.append(seen[0] - idx[0])
            for i in idx:
                if i in flag:
                    hits += 1
                    right += flag[i].get("kind") == kind
        kinds[kind] = {"episodes": len(mine), "caught": caught,
                       "recall": round(caught / len(mine), 4) if mine else None,
                       "steps": fsteps, "steps_flagged": flagged,
                       "lag_mean": round(sum(lags) / len(lags), 2) if lags else None,
                       "lag_max": max(lags) if lags else None,
                       "kind_right": round(right / hits, 4) if hits else None,
                       "kinds_named": dict(collections.Counter(flag[i].get("kind")
                                                              for idx in mine for i in idx if i in flag))}
    dur = sorted(r["dur_ns"] for i in range(first) for r in per[i])
    rep = {"pid": pid, "workload_steps": len(ws), "step_records": len(steps),
           "steps_matched_once": one, "anomalies": len(anoms),
           "clean_dur_ns": dist(dur),
           "first_fault_step": first, "clean_steps_judged": len(clean),
           "false_positives": len(fp),
           "natural_fpr": round(len(fp) / len(clean), 5) if clean else None,
           "false_positive_kinds": dict(collections.Counter(flag[i].get("kind") for i in fp)),
           "by_fault": kinds,
           "first_anomaly": {k: v for k, v in (anoms[0] if anoms else {}).items()
                             if k not in ("schema", "host")},
           "problems": len(bad), "first_problems": bad[:12]}
    return rep, not bad


def main():
    if len(sys.argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    mode, work, agent = sys.argv[1], lines(sys.argv[2]), lines(sys.argv[3])
    if not any("pid" in w for w in work):
        print(json.dumps({"error": "the workload printed no pid line"}))
        return 1
    if mode == "cuda":
        rep, ok = check_cuda(work, agent)
    elif mode == "torch":
        rep, ok = check_torch(work, agent)
    elif mode == "nccl":
        rep, ok = check_nccl(work, agent)
    elif mode == "nccl_sentinel":
        rep, ok = check_nccl_sentinel(work, agent)
    elif mode == "sentinel":
        rest = sys.argv[4:]
        dk = next((int(a) for a in rest if a.isdigit()), None)
        rep, ok = check_sentinel(work, agent, dk, "--all-joined" in rest)
    elif mode == "diag":
        rep, ok = check_diag(work, agent)
    else:
        sys.stderr.write("check_real: mode is cuda, torch, nccl, nccl_sentinel, sentinel or diag\n")
        return 2
    rep["ok"] = ok
    print(json.dumps(rep, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
