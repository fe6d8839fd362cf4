# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""py_embedded - the Python side of tests/integration/py_embed.c's
infer-engine (CPython linked in statically): loads the real libcudart (so
that the agent traces the process), prints {"pid", "tid", "helper": 0},
waits for the go file, then runs embedded_work() on the CPU for SECS
seconds of the thread's own CPU time, and lingers a second.

usage: infer-engine py_embedded.py CUDART GO_FILE SECS
"""
import ctypes
import os
import sys
import time

# an embedded interpreter's PyRun_SimpleFile puts no script folder on sys.path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_cuda import ready  # noqa: E402

cudart_path, go, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
ctypes.CDLL(cudart_path)
ready(go)


def embedded_work(s):
    end = time.thread_time() + s
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


embedded_work(secs)
time.sleep(1.0)
