# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""py_periodic - work that repeats at the Python sampler's default period,
for tests/integration/python.sh (python_fixed_period).

Loads the real libcudart (so that the agent traces it), prints {"pid",
"tid"}, waits for the go file, then, on one CPU, for SECS: the first half of
every 1/49 s (20,408,163 ns of CLOCK_MONOTONIC, the period the kernel gives a
49 Hz CPU clock event: NSEC_PER_SEC / 49) in first_half(), the second half in
second_half(). A sampler that ticks every 1/49 s on that CPU finds the
thread in the same half every time; one at random gaps, in each about half
the time. Ends with {"done": 1, "cpu": N}.

usage: py_periodic.py CUDART GO_FILE SECS
"""
import ctypes
import json
import os
import sys
import time

from py_cuda import ready

PERIOD_NS = 1_000_000_000 // 49
HALF_NS = PERIOD_NS // 2

cudart_path, go, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
ctypes.CDLL(cudart_path)
ready(go)
cpu = max(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpu})  # one CPU: one sampling clock, one phase


def first_half(end):
    while time.monotonic_ns() % PERIOD_NS < HALF_NS and time.monotonic_ns() < end:
        pass


def second_half(end):
    while time.monotonic_ns() % PERIOD_NS >= HALF_NS and time.monotonic_ns() < end:
        pass


end = time.monotonic_ns() + int(secs * 1e9)
while time.monotonic_ns() < end:
    if time.monotonic_ns() % PERIOD_NS < HALF_NS:
        first_half(end)
    else:
        second_half(end)
print(json.dumps({"done": 1, "cpu": cpu}), flush=True)
