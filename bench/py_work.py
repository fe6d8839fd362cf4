# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""py_work - fixed pure-Python work 12 frames deep for bench/python.sh.

usage: py_work.py CUDART ITERS (maps CUDART so that the agent traces it)
"""
import ctypes
import sys

ctypes.CDLL(sys.argv[1])
ITERS = int(sys.argv[2])


def leaf(x):
    return x * 3 + 1


def nest(depth, x):
    if depth == 0:
        return leaf(x)
    return nest(depth - 1, x)


def main():
    acc = 0
    for i in range(ITERS):
        acc += nest(10, i)
    return acc


main()
