# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""py_steps - a Python "engine" for tests/integration/python.sh.

Loads the real libcudart (so that the agent traces it) and libusdt_steps.so
(steps marked with include/infertrace/step.h, as an engine's extension
marks them), prints {"pid", "tid"}, waits for the go file, then runs STEPS
steps through usdt_lib_steps(): each step calls back into Python, which
runs decode_step(i): sample_tokens() for about 1 ms, and on step SLOW
pad_batch() for SLOW_MS first (and until three quarters of it ran on the
CPU: beside the helper it takes longer).
Lingers, then ends with {"done": 1}.
With HELPER 1, a second thread runs background_tokenize() on the CPU until
the steps end (its native id in the first line's "helper"): zlib.crc32()
over 4 MiB at a time (about 1 ms), which releases the GIL, so that both
threads run at once (a helper that held the GIL took turns with the main
thread every 5 ms, which a sampler with a fixed 49 Hz period locked onto:
the main thread got 0 to 30 of pad_batch's samples; py_periodic.py). It
lingers
PY_STEPS_LINGER seconds (environment, default 3) after its steps. With SLOW_KIND
sleep, step SLOW sleeps SLOW_MS in wait_for_batch() (off the CPU, the GIL
released) instead of running pad_batch().

usage: py_steps.py CUDART USDT_LIB GO_FILE STEPS SLOW SLOW_MS [HELPER [SLOW_KIND]]
"""
import ctypes
import json
import os
import sys
import threading
import time
import zlib

from py_cuda import ready

cudart_path, lib_path, go, steps, slow, slow_ms = sys.argv[1:7]
steps, slow, slow_ms = int(steps), int(slow), float(slow_ms)
helper = len(sys.argv) > 7 and sys.argv[7] == "1"
slow_sleep = len(sys.argv) > 8 and sys.argv[8] == "sleep"
ctypes.CDLL(cudart_path)
lib = ctypes.CDLL(lib_path)
done = threading.Event()
helper_tid = [0]
started = threading.Event()
CRC_BUF = bytes(4 << 20)


def background_tokenize():
    helper_tid[0] = threading.get_native_id()
    started.set()
    n = 0
    while not done.is_set():
        n ^= zlib.crc32(CRC_BUF)  # the GIL released inside
    return n


if helper:
    threading.Thread(target=background_tokenize, daemon=True).start()
    started.wait()
ready(go, helper_tid[0])


def spin(ms, cpu_share=0.25):
    # ms of the clock, and at least cpu_share of it on the thread's CPU: a
    # thread that shares the GIL with the helper, on a loaded machine, would
    # otherwise run too little of it to be sampled (49 Hz): the tests count
    # its samples
    end = time.monotonic() + ms / 1000
    cpu = time.thread_time() + ms * cpu_share / 1000
    n = 0
    while time.monotonic() < end or time.thread_time() < cpu:
        n += 1
    return n


def pad_batch(ms):
    # three quarters on the CPU: about 15 of the sampler's chances in
    # python_versions (400 ms) however loaded the machine is
    return spin(ms, 0.75)


def sample_tokens():
    return spin(1)


def wait_for_batch(ms):
    time.sleep(ms / 1000)


step = [0]


def decode_step(arg):
    if step[0] == slow and slow_sleep:
        wait_for_batch(slow_ms)
    elif step[0] == slow:
        pad_batch(slow_ms)
    sample_tokens()
    step[0] += 1


WORK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
lib.usdt_lib_steps.argtypes = [ctypes.c_int, WORK, ctypes.c_void_p]
lib.usdt_lib_steps(steps, WORK(decode_step), None)
done.set()
time.sleep(float(os.environ.get("PY_STEPS_LINGER", "3")))  # an engine lives on
print(json.dumps({"done": 1}), flush=True)
