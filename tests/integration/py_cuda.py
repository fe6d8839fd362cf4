# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""py_cuda - the real libcudart through ctypes, for the Python workloads of
tests/integration/python.sh (py_launch.py, py_gpu.py)."""
import ctypes


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
