# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""py_embedded - the Python side of tests/integration/py_embed.c's
infer-engine (CPython linked in statically): loads the real libcudart (so
that the agent traces the process), prints {"pid", "tid", "helper": 0},
waits for the go file, then runs embedded_work() on the CPU for SECS
seconds of the thread's own CPU time, and lingers a second.

usage: infer-engine py_embedded.py CUDART GO_FILE SECS
"""
import ctypes
import json
import os
import sys
import threading
import time

cudart_path, go, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
ctypes.CDLL(cudart_path)
print(json.dumps({"pid": os.getpid(), "tid": threading.get_native_id(), "helper": 0}),
      flush=True)
while not os.path.exists(go):
    time.sleep(0.01)


def embedded_work(s):
    end = time.thread_time() + s
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


embedded_work(secs)
time.sleep(1.0)
