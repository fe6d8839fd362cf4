#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""
modules.py - the module graph of agent/ and correlator/ (issue 16).

Calls go down the data flow, never back up:
  agent/main.c > agent/control > agent/sources > agent/pipeline > agent/sinks
  > agent/core > correlator/
A file may call a file of its own folder or of a folder below; no group of
files calls each other in a cycle (a file never calls back up, directly or in
a ring). Callbacks registered by the caller are how a lower layer hands work
up: they are function pointers, which this check does not follow.

How: Universal Ctags lists every non-static function and variable defined in
the C files; a file "calls" another when it names one of the other's
definitions outside comments and strings. Prints one PASS/FAIL line per rule
for tests/run.sh. Usage: modules.py [--graph] (run from the repository root).
"""
import collections
import glob
import re
import subprocess
import sys

# rank of each folder: a file may only use definitions of its rank or lower
RANKS = [
    ("correlator/src/", 0),
    ("agent/core/", 1),
    ("agent/sinks/", 2),
    ("agent/pipeline/", 3),
    ("agent/sources/", 4),
    ("agent/control/", 5),
    ("agent/main.c", 6),
]


def rank_of(path):
    for prefix, r in RANKS:
        if path.startswith(prefix):
            return r
    return None


def strip(src):
    # comments, then string and character literals (names in messages are not calls)
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    src = re.sub(r"//[^\n]*", " ", src)
    src = re.sub(r'"(\\.|[^"\\\n])*"', '""', src)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", src)


def definitions(files):
    out = subprocess.run(
        ["ctags", "-x", "--c-kinds=fv", "--language-force=C", "--_xformat=%N %F %K %{C.properties}"] + files,
        capture_output=True, text=True, check=True).stdout
    defs = collections.defaultdict(set)  # name -> files defining it for all
    local = collections.defaultdict(set)  # file -> names it defines static
    funcs = set()  # the names in defs that are functions
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, path, kind, props = parts[0], parts[1], parts[2], " ".join(parts[3:])
        if "static" in props:
            local[path].add(name)
        else:
            defs[name].add(path)
            if kind == "function":
                funcs.add(name)
    return defs, local, funcs


def shadows(files):
    """file -> names declared there as parameters or local variables"""
    out = subprocess.run(
        ["ctags", "-x", "--c-kinds=lz", "--language-force=C", "--_xformat=%N %F"] + files,
        capture_output=True, text=True, check=True).stdout
    names = collections.defaultdict(set)
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            names[parts[1]].add(parts[0])
    return names


def graph(files):
    defs, local, funcs = definitions(files)
    shadow = shadows(files)
    edges = collections.defaultdict(dict)  # file -> {file: first name}
    # a function is used when called or when its address is taken (&name, or
    # name as a value: a callback registered by the caller); a parameter that
    # shares a function's name (uint64_t now_ns) is neither
    ident = re.compile(r"(?<![\w.>])([A-Za-z_]\w*)\b(\s*\()?")
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            src = strip(fh.read())
        for m in ident.finditer(src):
            name = m.group(1)
            if name in local[f] or name not in defs:
                continue  # its own static of the same name, or not ours
            if name in funcs and not m.group(2) and (name in shadow[f] or not (
                    re.search(r"[=,(&]\s*$", src[max(0, m.start() - 8):m.start()])
                    and re.match(r"\s*[,);]", src[m.end():m.end() + 8]))):
                continue
            for d in defs[name]:
                if d != f and d not in edges[f] and f not in defs[name]:
                    edges[f][d] = name
    return edges


def cycles(files, edges):
    # Tarjan's strongly connected components: every component of more than one file is a cycle
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for f in files:
        if f not in index:
            visit(f)
    return out


def main():
    files = sorted(glob.glob("agent/main.c") + glob.glob("agent/*/*.c") + glob.glob("correlator/src/*.c"))
    files = [f for f in files if rank_of(f) is not None]
    if not files:
        print("FAIL modules_graph: no C files found (run from the repository root)")
        return 0
    edges = graph(files)
    if "--graph" in sys.argv:
        for f in files:
            for d, name in sorted(edges.get(f, {}).items()):
                print(f"{f} -> {d} ({name})")
    comps = cycles(files, edges)
    if comps:
        for c in comps:
            ring = "; ".join(f"{a} -> {b} ({n})" for a in c for b, n in edges[a].items() if b in c)
            print(f"FAIL modules_no_cycle: {len(c)} files call each other: {ring}")
    else:
        print(f"PASS modules_no_cycle ({len(files)} files, {sum(len(e) for e in edges.values())} edges)")
    up = [(f, d, n) for f in files for d, n in edges.get(f, {}).items() if rank_of(d) > rank_of(f)]
    if up:
        for f, d, n in up:
            print(f"FAIL modules_calls_down: {f} calls up into {d} ({n})")
    else:
        print("PASS modules_calls_down (main > control > sources > pipeline > sinks > core > correlator)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
