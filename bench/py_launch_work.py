# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""py_launch_work - CUDA launches from Python 12 frames deep, for bench/python.sh.

usage: py_launch_work.py CUDART LAUNCHES: calls libcudart's cudaLaunchKernel
LAUNCHES times through ctypes (without a GPU each call fails at once, but
the agent's uprobe runs in it), as an engine's model code does.
"""
import ctypes
import sys


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


cudart = ctypes.CDLL(sys.argv[1])
launch = cudart.cudaLaunchKernel
launch.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
GRID, BLOCK = Dim3(8, 1, 1), Dim3(128, 1, 1)
N = int(sys.argv[2])


def kernel():
    return launch(0x1000, GRID, BLOCK, None, 0, None)


def nest(depth):
    if depth == 0:
        return kernel()
    return nest(depth - 1)


def main():
    for _ in range(N):
        nest(10)


main()
