# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""py_gpu - a Python "engine" whose launches run kernels on a played GPU, for
tests/integration/python.sh (python_launch_gpu).

The live GPU path without a GPU, from Python: the real libcudart (the
agent's uprobes fire in its calls), the real CUPTI shim (SHIM, loaded as
the driver would and bound to the CUPTI test double FAKE, which is loaded
first under the same soname) and the double playing CUPTI: for each
cudaLaunchKernel the launch callback on the calling thread with a fresh
correlation id, then a kernel record on the GPU 50 us later, 20 us long.
Model.forward() -> Attention.forward() launches "attn_kernel", and
Sampler.forward() "sample_kernel". Prints {"pid", "tid"}, waits for the go
file, waits (bounded) until the agent has put the shim in deep capture,
runs ROUNDS rounds, hands CUPTI's buffers back, lingers 1 s (the shim
sends them), then {"done": 1, "corr": [first, last]}.

usage: py_gpu.py CUDART FAKE SHIM GO_FILE ROUNDS CBID
  CBID: CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 (cupti_runtime_cbid.h)
"""
import ctypes
import json
import os
import sys
import threading
import time

from py_cuda import Dim3, load_cudart, ready

cudart_path, fake_path, shim_path, go, rounds, cbid = sys.argv[1:7]
rounds, cbid = int(rounds), int(cbid)
RUNTIME_API = 2        # CUPTI_CB_DOMAIN_RUNTIME_API (cupti_callbacks.h)
KIND_MEMSET = 2        # CUPTI_ACTIVITY_KIND_MEMSET (cupti_activity.h): on in deep capture only
os.environ.setdefault("INFERTRACE_SHIM_TICK_MS", "2")
os.environ.setdefault("INFERTRACE_SHIM_FLUSH_MS", "20")
os.environ.setdefault("INFERTRACE_SHIM_STATUS_MS", "100")
os.environ.setdefault("INFERTRACE_SHIM_RETRY_MS", "20")

cudart = load_cudart(cudart_path)
fake = ctypes.CDLL(fake_path, mode=ctypes.RTLD_GLOBAL)
shim = ctypes.CDLL(shim_path)
if shim.InitializeInjection() != 1:
    sys.exit("py_gpu: InitializeInjection failed")


fake.fake_cupti_add_kernel.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64,
                                       ctypes.c_uint32, ctypes.c_char_p]
fake.fake_cupti_api_call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint32]
NAMES = {"attn": b"attn_kernel", "sample": b"sample_kernel"}  # outlive the records
corr = [1000]
lock = threading.Lock()


def gpu_launch(name):
    cudart.cudaLaunchKernel(0x1000, Dim3(64, 1, 1), Dim3(128, 1, 1), None, 0, None)
    with lock:
        corr[0] += 1
        c = corr[0]
    fake.fake_cupti_api_call(RUNTIME_API, cbid, c)
    fake.fake_cupti_add_kernel(c, time.monotonic_ns() + 50000, 20000, 7, NAMES[name])


class Attention:
    def forward(self):
        gpu_launch("attn")


class Model:
    def __init__(self):
        self.attn = Attention()

    def forward(self):
        self.attn.forward()


class Sampler:
    def forward(self):
        gpu_launch("sample")


ready(go)
for _ in range(1000):
    if fake.fake_cupti_kind_enabled(KIND_MEMSET):
        break
    time.sleep(0.01)
else:
    sys.exit("py_gpu: the agent never switched the shim to deep capture")
model, sampler = Model(), Sampler()
for _ in range(rounds):
    model.forward()
    sampler.forward()
    time.sleep(0.002)
fake.fake_cupti_complete()
time.sleep(1)
print(json.dumps({"done": 1, "corr": [1001, corr[0]]}), flush=True)
