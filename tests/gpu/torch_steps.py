# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""torch_steps - a PyTorch workload for the real-GPU check (scripts/gpu_check.sh).

Decode-like steps of a small transformer block on the GPU, eager and replayed
from a CUDA graph (as vLLM decodes), so that the kernels come through the
paths a real engine uses: cuBLAS, PyTorch's own kernels, graph replay.

usage: python3 torch_steps.py [-n STEPS] [-w GO_FILE] [-e EXIT_FILE]
Prints JSON lines: {"pid":P,"mono_ns":N} once CUDA is up and warm, then one
line per step {"tid","step","graph","t0","t2"} ([t0, t2] on CLOCK_MONOTONIC:
from before the step's first call to after torch.cuda.synchronize()), then
{"done":true}.
"""
import os
import threading

import torch

from workload import await_go, finish, mono_ns, out, parse_args


def main():
    a = parse_args(30)
    dev = torch.device("cuda")
    d, ff, batch = 2048, 8192, 16
    w_qkv = torch.randn(d, 3 * d, device=dev, dtype=torch.bfloat16)
    w_o = torch.randn(d, d, device=dev, dtype=torch.bfloat16)
    w_1 = torch.randn(d, ff, device=dev, dtype=torch.bfloat16)
    w_2 = torch.randn(ff, d, device=dev, dtype=torch.bfloat16)
    x = torch.randn(batch, d, device=dev, dtype=torch.bfloat16)

    def block(h):
        q, k, v = (torch.nn.functional.layer_norm(h, (d,)) @ w_qkv).split(d, dim=-1)
        att = torch.softmax(q @ k.t() / 45.0, dim=-1) @ v
        h = h + att @ w_o
        return h + torch.nn.functional.gelu(torch.nn.functional.layer_norm(h, (d,)) @ w_1) @ w_2

    for _ in range(3):
        block(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            block(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = block(x)
    torch.cuda.synchronize()
    out({"pid": os.getpid(), "mono_ns": mono_ns()})
    await_go(a.w)
    tid = threading.get_native_id()
    for i in range(a.n):
        t0 = mono_ns()
        graph = i % 2 == 1
        if graph:
            g.replay()
        else:
            y = block(x)
        torch.cuda.synchronize()
        out({"tid": tid, "step": i, "graph": graph, "t0": t0, "t2": mono_ns()})
    del y
    finish(a.e)


if __name__ == "__main__":
    main()
