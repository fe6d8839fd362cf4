#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""
bench/vllm_steps.py - the CUDA API call sequence of one real vLLM decode step
and one prefill step, for bench/vllm_replay.c (issue 20).

Source: ../shared/data/kineto/tracemap_vllm_llama_tp4_h100_rank0.pt.trace.json.gz
(vLLM V1, Llama, TP=4 rank 0, H100; ../shared/data/README.md). A step is one
gpu_model_runner.py execute_model python_function span (the outermost of the
nested pair); its calls are the cuda_runtime / cuda_driver events of the
launching thread that start inside it. Prefill: the step with the most calls;
decode: the step of median duration among those with the decode steps' usual
call count.

Prints, for each step: "step NAME DUR_US NCALLS", then NCALLS lines
"OFFSET_US API" (offset from the step's start). Checks the counts the issue
quotes (per decode step 330 cudaLaunchKernel, 82 cudaLaunchKernelExC, 81
cudaGraphLaunch; prefill 483 cudaLaunchKernelExC, 402 cuLaunchKernel) and
exits 1 when they differ (a different trace file).
usage: vllm_steps.py TRACE.json.gz
"""
import collections
import gzip
import json
import sys


def main():
    with gzip.open(sys.argv[1]) as f:
        ev = json.load(f)["traceEvents"]
    spans = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "python_function"
             and "execute_model" in e.get("name", "")]
    # keep the outermost of nested spans
    outer = [s for s in spans if not any(o is not s and o["ts"] <= s["ts"] and
             s["ts"] + s["dur"] <= o["ts"] + o["dur"] and o["dur"] > s["dur"] for o in spans)]
    calls = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")]
    launch_tids = collections.Counter(e["tid"] for e in calls if "Launch" in e["name"])
    tid = launch_tids.most_common(1)[0][0]
    calls = sorted((e for e in calls if e["tid"] == tid), key=lambda e: e["ts"])
    steps = []
    for s in sorted(outer, key=lambda s: s["ts"]):
        inside = [e for e in calls if s["ts"] <= e["ts"] < s["ts"] + s["dur"]]
        if inside:
            steps.append((s, inside))
    prefill = max(steps, key=lambda x: len(x[1]))
    usual = collections.Counter(len(x[1]) for x in steps).most_common(1)[0][0]
    decode = sorted((x for x in steps if len(x[1]) == usual), key=lambda x: x[0]["dur"])
    decode = decode[len(decode) // 2]
    want = {"decode": {"cudaLaunchKernel": 330, "cudaLaunchKernelExC": 82, "cudaGraphLaunch": 81},
            "prefill": {"cudaLaunchKernelExC": 483, "cuLaunchKernel": 402}}
    ok = True
    for name, (s, inside) in (("decode", decode), ("prefill", prefill)):
        c = collections.Counter(e["name"] for e in inside)
        for api, n in want[name].items():
            if c[api] != n:
                print(f"vllm_steps: {name} step has {c[api]} {api}, the issue says {n}",
                      file=sys.stderr)
                ok = False
        print(f"step {name} {s['dur']:.0f} {len(inside)}")
        for e in inside:
            print(f"{e['ts'] - s['ts']:.1f} {e['name']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
