#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""
paths.py - every repository path named in the docs and in code comments
exists (issue 16: stale references point newcomers at files that are gone).

A path is a token that starts with one of the repository's top folders
(agent/, bpf/, correlator/, docs/, tests/, ...) and names a file with an
extension; build outputs (build/...) and globs are not checked. One
PASS/FAIL line for tests/run.sh, naming each stale reference.
"""
import glob
import os
import re
import subprocess

TOPS = ("agent", "bpf", "correlator", "docs", "tests", "deploy", "bench", "eval", "include", "scripts")
TOKEN = re.compile(r"(?<![\w./<-])((?:%s)/[\w./-]*\w\.(?:c|h|md|sh|py|yaml|yml|tpl|txt|json|map|service|conf))\b" % "|".join(TOPS))


def main():
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True).stdout.split()
    files = [f for f in files if f.endswith((".c", ".h", ".md", ".sh", ".py", ".yaml", ".tpl", "Makefile"))
             and not f.startswith("bpf/vmlinux/")]
    stale = []
    for f in files:
        try:
            text = open(f, encoding="utf-8", errors="replace").read()
        except OSError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in TOKEN.finditer(line):
                p = m.group(1)
                if "*" in p or re.search(r"/[A-Z]+\.", p) or os.path.exists(p) or glob.glob(p):
                    continue
                stale.append(f"{f}:{lineno}: {p}")
    if stale:
        print(f"FAIL paths_exist: {len(stale)} references to files that do not exist: " + "; ".join(stale[:40]))
    else:
        print(f"PASS paths_exist ({len(files)} files read)")


if __name__ == "__main__":
    main()
