# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""py_launch - a Python "engine" that launches CUDA work, for
tests/integration/python.sh (python_launch).

Loads the real libcudart with ctypes, prints {"pid", "tid", "helper"}, waits
for the go file, then runs ROUNDS rounds on two threads: the main thread's
Model.forward() -> Attention.forward() calls cudaLaunchKernel, and its
prepare_inputs() cudaMemcpyAsync (a host-to-device copy); a second thread's
Sampler.forward() calls cudaMemcpyAsync (device to host). Without a GPU the
calls fail, but the agent's uprobes fire in them, with these Python frames
on the thread. Ends with {"done": 1, "errors": [...]} (the calls' return
codes seen).

usage: py_launch.py CUDART GO_FILE ROUNDS
"""
import ctypes
import json
import sys
import threading
import time

from py_cuda import Dim3, load_cudart, ready

cudart_path, go, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
cudart = load_cudart(cudart_path)
errors = set()
buf = ctypes.create_string_buffer(4096)


class Attention:
    def forward(self):
        errors.add(cudart.cudaLaunchKernel(0x1000, Dim3(8, 1, 1), Dim3(128, 1, 1), None, 0, None))


class Model:
    def __init__(self):
        self.attn = Attention()

    def forward(self):
        self.attn.forward()


def prepare_inputs():
    errors.add(cudart.cudaMemcpyAsync(0x2000, ctypes.addressof(buf), 4096, 1, None))


class Sampler:
    def forward(self):
        errors.add(cudart.cudaMemcpyAsync(ctypes.addressof(buf), 0x3000, 64, 2, None))


def run(model):
    prepare_inputs()
    model.forward()


def sampler_loop(n, tids, gate):
    tids.append(threading.get_native_id())
    gate.wait()
    s = Sampler()
    for _ in range(n):
        s.forward()
        time.sleep(0.002)


helper_tid, gate = [], threading.Event()
helper = threading.Thread(target=sampler_loop, args=(rounds, helper_tid, gate))
helper.start()
while not helper_tid:
    time.sleep(0.01)
ready(go, helper_tid[0])
gate.set()
model = Model()
for _ in range(rounds):
    run(model)
    time.sleep(0.002)
helper.join()
time.sleep(0.5)  # the agent reads the last records while the process lives
print(json.dumps({"done": 1, "errors": sorted(errors)}), flush=True)
