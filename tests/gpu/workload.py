# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""workload - what the real-GPU workloads (torch_steps.py, torch_nccl.py) share.

Both are started by scripts/gpu_check.sh's live() as
`python3 tests/gpu/NAME.py -n STEPS -w GO_FILE -e EXIT_FILE`, talk to it in
JSON lines on stdout and time their calls on CLOCK_MONOTONIC (the agent's
clock). Python puts a script's own directory first on sys.path, so the
workloads import this module as `workload` with nothing installed.
"""
import argparse
import json
import os
import sys
import time


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def out(obj):
    """obj as one JSON line on stdout, flushed: the script polls the file"""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def parse_args(steps):
    """-n STEPS (default steps), -w GO_FILE, -e EXIT_FILE"""
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=steps)
    ap.add_argument("-w")
    ap.add_argument("-e")
    return ap.parse_args()


def await_go(path):
    """until GO_FILE exists (None: at once): the agent watches by then"""
    while path and not os.path.exists(path):
        time.sleep(0.002)


def finish(exit_path):
    """{"done":true}, then up to 30 s for EXIT_FILE: the agent reads the
    process's last records while it still lives"""
    out({"done": True})
    for _ in range(3000):
        if not exit_path or os.path.exists(exit_path):
            break
        time.sleep(0.01)
