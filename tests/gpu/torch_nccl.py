# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""torch_nccl - real NCCL collectives for the real-GPU check (scripts/gpu_check.sh).

One rank (a node with one GPU can hold no more: NCCL refuses two ranks of a
communicator on one device): torch.distributed with the NCCL backend, so
the real libnccl initialises a real communicator (ncclCommInitRank with a
real unique id) and runs real collectives, in steps. On one rank NCCL's
collectives launch no kernel (copies at most), so the kernel join is not
exercised here; the probes, the decoding and the communicator are.

usage: python3 torch_nccl.py [-n STEPS] [-w GO_FILE] [-e EXIT_FILE]
Prints {"pid":P,"mono_ns":N} once CUDA is up, makes the communicator (and
one warm-up all-reduce) after GO_FILE, then per
collective {"tid","step","op","count","dtype","t0","t1"} ([t0, t1] brackets
the torch call on CLOCK_MONOTONIC; op and dtype as the agent names them),
then {"done":true}.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("-w")
    ap.add_argument("-e")
    a = ap.parse_args()
    torch.cuda.set_device(0)
    n = 1 << 20
    x = torch.ones(n, device="cuda", dtype=torch.bfloat16)  # CUDA up: the shim is in
    y = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    out({"pid": os.getpid(), "mono_ns": mono_ns()})
    # the communicator is made once the agent watches (it hashes the unique id at init)
    while a.w and not os.path.exists(a.w):
        time.sleep(0.002)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % free_port(),
                            rank=0, world_size=1, device_id=torch.device("cuda", 0))
    dist.all_reduce(x)  # warm: the communicator's first collective
    torch.cuda.synchronize()
    tid = threading.get_native_id()
    ops = [
        ("allreduce", lambda: dist.all_reduce(x)),
        ("allgather", lambda: dist.all_gather_into_tensor(y, x)),
        ("broadcast", lambda: dist.broadcast(x, src=0)),
    ]
    # not reduce_scatter_tensor: on one rank PyTorch copies the input
    # (cudaMemcpyAsync) without calling NCCL (seen on an H100, torch 2.11)
    for i in range(a.n):
        for name, fn in ops:
            t0 = mono_ns()
            fn()
            t1 = mono_ns()
            out({"tid": tid, "step": i, "op": name, "count": n, "dtype": "bfloat16",
                 "t0": t0, "t1": t1})
        torch.cuda.synchronize()
    dist.destroy_process_group()
    out({"done": True})
    for _ in range(3000):
        if not a.e or os.path.exists(a.e):
            break
        time.sleep(0.01)


if __name__ == "__main__":
    main()
