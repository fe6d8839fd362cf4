# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""py_reuse - a code object freed and another made at its address, for
tests/integration/python.sh (python_code_reused).

Loads the real libcudart (so that the agent traces it), prints {"pid",
"tid"}, waits for the go file. Makes alpha_fn from source (exec), spins in
it for SECS on the CPU, frees it, then makes omega_fn from the same source
under another name until its code object lands at alpha_fn's address
(CPython's allocator gives the freed block back at once: 1 try on 3.11-
3.13), sleeps 0.6 s off the CPU, and spins in omega_fn for SECS. Ends with
{"reused": true|false, "tries": N, "switch_ns": CLOCK_MONOTONIC ns at
omega_fn's start}.

usage: py_reuse.py CUDART GO_FILE SECS
"""
import ctypes
import gc
import json
import sys
import time

from py_cuda import ready

cudart_path, go, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
ctypes.CDLL(cudart_path)
ready(go)


def make(name):
    # one source, one size: only the name differs (same length)
    src = (f"def {name}(secs):\n"
           "    end = time.monotonic() + secs\n"
           "    cpu = time.thread_time() + secs / 2\n"
           "    n = 0\n"
           "    while time.monotonic() < end or time.thread_time() < cpu:\n"
           "        n += 1\n"
           "    return n\n")
    ns = {"time": time}
    exec(compile(src, "reuse_gen.py", "exec"), ns)
    return ns[name]


f = make("alpha_fn")
addr = id(f.__code__)
f(secs)
del f
gc.collect()
tries, g = 0, None
while tries < 1000:
    tries += 1
    g = make("omega_fn")
    if id(g.__code__) == addr:
        break
    del g
    g = None
time.sleep(0.6)  # off the CPU: alpha_fn's last samples are in an earlier interval
switch = time.monotonic_ns()
if g is not None:
    g(secs)
print(json.dumps({"reused": g is not None, "tries": tries, "switch_ns": switch}), flush=True)
