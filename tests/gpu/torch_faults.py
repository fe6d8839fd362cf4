# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""torch_faults - steps with known faults, for the step detector on a real GPU.

Run by scripts/gpu_check.sh (section diag) under the agent, the CUPTI shim
injected; tests/gpu/check_real.py (mode diag) scores the agent's `step` and
`anomaly` records against the faults this script says it made.

Each step, on one launching thread pinned to one CPU: a bf16 matmul
(8192 x 8192, about 2 ms on an H100), then about 2 ms of Python work (as an
engine's scheduler prepares the next batch while the GPU runs), two more
matmuls, and one element copied to the host (`.item()`: the device-to-host
copy that ends an automatic step, docs/diagnosis.md "Steps"). The step
records carry no workload fields: the detector sees the duration and the
breakdown (GPU busy, idle gaps, off-CPU, run-queue).

Faults from step --first on (default 300; about 4% of the steps; episodes
30-100 steps apart, the three kinds in turn, each round's order and the
sizes drawn from --seed):
  host_stall      one step sleeps 20-60 ms between its second and third
                  matmul: the GPU idles while the launcher is off the CPU
  gpu_slow        1-5 steps run two extra matmuls: the GPU is busy longer
  cpu_contention  3-10 steps during which a process pinned to the
                  launcher's CPU spins: the Python work waits for the CPU,
                  and the GPU idles meanwhile

usage: python3 torch_faults.py [-n STEPS] [-w GO_FILE] [-e EXIT_FILE]
                               [--seed S] [--first N] [--schedule]
--schedule prints the fault schedule and exits (no GPU needed).
Prints JSON lines: {"pid","mono_ns","cpu","spinner","work_iters"} once ready,
then one per step {"tid","step","t0","t2","fault","ep"} ([t0, t2] on
CLOCK_MONOTONIC: from before the step's first launch to after its copy
returned; ep: the episode's number, -1 when clean), then {"done":true}.
"""
import argparse
import json
import mmap
import os
import random
import sys
import threading
import time

from workload import await_go, finish, mono_ns, out

KINDS = ("host_stall", "gpu_slow", "cpu_contention")


def schedule(n, seed, first, gap_min=30, gap_max=100):
    """per step: (fault, episode); episodes of one kind, apart by a clean gap"""
    rng = random.Random(seed)
    fault, ep = ["none"] * n, [-1] * n
    i, e, order = first, 0, []
    while True:
        if not order:
            order = rng.sample(KINDS, 3)  # the kinds in turn, each order drawn
        kind = order.pop()
        length = {"host_stall": 1, "gpu_slow": rng.randint(1, 5),
                  "cpu_contention": rng.randint(3, 10)}[kind]
        if i + length >= n:
            break
        for j in range(i, i + length):
            fault[j], ep[j] = kind, e
        e += 1
        i += length + rng.randint(gap_min, gap_max)
    return fault, ep


def spin(iters):
    """CPU work that takes longer when the CPU is shared (not a wall-clock wait)"""
    x = 0
    for k in range(iters):
        x += k
    return x


def spinner(flag, cpu):
    """the contending process: spins on the launcher's CPU while flag[0] == 1"""
    os.sched_setaffinity(0, {cpu})
    while flag[0] != 2:
        if flag[0] == 1:
            t = time.perf_counter()
            while flag[0] == 1 and time.perf_counter() - t < 0.05:
                pass
        else:
            time.sleep(0.001)
    os._exit(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2500)
    ap.add_argument("-w")
    ap.add_argument("-e")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=300)
    ap.add_argument("--schedule", action="store_true")
    a = ap.parse_args()
    fault, ep = schedule(a.n, a.seed, a.first)
    if a.schedule:
        for i in range(a.n):
            out({"step": i, "fault": fault[i], "ep": ep[i]})
        return
    cpu = max(os.sched_getaffinity(0))
    # the spinner is forked before CUDA starts in this process (a child of
    # a CUDA process must not touch CUDA); it sleeps until flag[0] == 1
    flag = mmap.mmap(-1, 8)
    child = os.fork()
    if child == 0:
        spinner(flag, cpu)
    import torch

    dev = torch.device("cuda")
    m = 8192
    a_ = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    b_ = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    c_ = torch.empty(m, m, device=dev, dtype=torch.bfloat16)
    for _ in range(5):
        torch.matmul(a_, b_, out=c_)
    torch.cuda.synchronize()
    # the launching thread on one CPU (after CUDA started: its own threads
    # stay free); the Python work calibrated to about 2 ms there
    os.sched_setaffinity(0, {cpu})
    iters = 20000
    for _ in range(5):
        t = time.perf_counter()
        spin(iters)
        iters = max(1000, int(iters * 0.002 / max(time.perf_counter() - t, 1e-6)))
    rng = random.Random(a.seed * 7919 + 1)
    out({"pid": os.getpid(), "mono_ns": mono_ns(), "cpu": cpu, "spinner": child,
         "work_iters": iters})
    await_go(a.w)
    tid = threading.get_native_id()
    for i in range(a.n):
        f = fault[i]
        flag[0] = 1 if f == "cpu_contention" else 0
        t0 = mono_ns()
        torch.matmul(a_, b_, out=c_)
        spin(iters)
        torch.matmul(a_, b_, out=c_)
        if f == "host_stall":
            time.sleep(rng.uniform(0.020, 0.060))
        torch.matmul(a_, b_, out=c_)
        if f == "gpu_slow":
            torch.matmul(a_, b_, out=c_)
            torch.matmul(a_, b_, out=c_)
        c_[0, 0].item()
        out({"tid": tid, "step": i, "t0": t0, "t2": mono_ns(), "fault": f, "ep": ep[i]})
    flag[0] = 2
    os.waitpid(child, 0)
    finish(a.e)


if __name__ == "__main__":
    sys.exit(main())
