# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""py_cuda - the real libcudart through ctypes, and the start every Python
workload of tests/integration/python.sh makes (py_steps.py, py_launch.py,
py_gpu.py, py_reuse.py, py_embedded.py)."""
import ctypes
import json
import os
import threading
import time


class Dim3(ctypes.Structure):
    """dim3 (vector_types.h), passed by value"""
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def load_cudart(path):
    """libcudart with the signatures the workloads call:
    cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                     cudaStream_t stream);
    cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind,
                    cudaStream_t stream)"""
    cudart = ctypes.CDLL(path)
    cudart.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p,
                                        ctypes.c_size_t, ctypes.c_void_p]
    cudart.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                       ctypes.c_int, ctypes.c_void_p]
    return cudart


def ready(go, helper=0):
    """{"pid", "tid", "helper"} on stdout, which python.sh reads to start the
    agent on this process and thread; then wait until python.sh makes the go
    file (the agent is attached)"""
    print(json.dumps({"pid": os.getpid(), "tid": threading.get_native_id(), "helper": helper}),
          flush=True)
    while not os.path.exists(go):
        time.sleep(0.01)
