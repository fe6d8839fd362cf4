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
import os
import socket
import threading

import torch
import torch.distributed as dist

from workload import await_go, finish, mono_ns, out, parse_args


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    a = parse_args(10)
    torch.cuda.set_device(0)
    n = 1 << 20
    x = torch.ones(n, device="cuda", dtype=torch.bfloat16)  # CUDA up: the shim is in
    y = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    out({"pid": os.getpid(), "mono_ns": mono_ns()})
    # the communicator is made once the agent watches (it hashes the unique id at init)
    await_go(a.w)
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
    finish(a.e)


if __name__ == "__main__":
    main()
