#!/usr/bin/env python3
"""The core's layers, checked from its object files (ctest core_layers, label unit).

    check_layers.py [--src CORE_SRC] OBJECT...
        (core/src/FOLDER/FILE.c.o, as CMake's $<TARGET_OBJECTS:cgrt_objs>)

A file calls another when its object needs a symbol the other defines (nm). Fails, naming the
files and the symbols, when files call each other in a circle, or when a folder calls one that the
layering (docs/DESIGN.md section 2) puts above it. With --src, also reads the sources: a file of a
lower folder must not include runtime.h (struct cgrt_runtime, the whole runtime), but for the
files still listed in STILL_RUNTIME, and each of those must still need it (so the list only
shrinks). Standard library and nm only.
"""
import collections
import os
import re
import subprocess
import sys

# who may call whom, between folders of core/src (a folder calls itself freely, without circles)
ALLOWED = {
    "runtime": {"graphs", "comm", "config", "buckets", "base"},
    "graphs": {"comm", "base"},
    "config": {"base"},
    "comm": {"base"},
    "buckets": set(),
    "base": set(),
}

# Folders whose files get what they need (the log, the device, their own state) rather than the
# runtime: none of their files includes runtime.h, but those named in STILL_RUNTIME.
NO_RUNTIME = {"base", "buckets", "config", "comm", "graphs"}
# Files that still reach into struct cgrt_runtime (docs/DESIGN.md section 2, "What is left").
STILL_RUNTIME = set()
INCLUDES_RUNTIME = re.compile(r'^\s*#\s*include\s*"(?:\.\./)?runtime\.h"', re.M)


def runtime_includes(src):
    """Failures: files of NO_RUNTIME folders that include runtime.h and may not, and files of
    STILL_RUNTIME that no longer do (take them off the list)."""
    bad = []
    for folder in sorted(NO_RUNTIME):
        top = os.path.join(src, folder)
        if not os.path.isdir(top):
            bad.append(f"{top}: no such folder (NO_RUNTIME in {os.path.basename(__file__)})")
            continue
        for name in sorted(os.listdir(top)):
            if not name.endswith((".c", ".h", ".def")):
                continue
            rel = f"{folder}/{name}"
            with open(os.path.join(top, name), encoding="utf-8") as f:
                has = bool(INCLUDES_RUNTIME.search(f.read()))
            if has and rel not in STILL_RUNTIME:
                bad.append(f"{rel} includes runtime.h: {folder}/ gets what it needs (the log, the "
                           "device, its own struct) rather than the whole runtime "
                           "(docs/DESIGN.md section 2)")
            elif not has and rel in STILL_RUNTIME:
                bad.append(f"{rel} no longer includes runtime.h: take it off STILL_RUNTIME in "
                           f"{os.path.basename(__file__)} (and off DESIGN.md's \"What is left\")")
    for rel in sorted(STILL_RUNTIME):
        if not os.path.exists(os.path.join(src, rel)):
            bad.append(f"{rel} (STILL_RUNTIME) does not exist: take it off the list")
    return bad


def symbols(obj):
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, needed = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRV":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            needed.add(parts[1])
    return defined, needed


def name_of(obj):
    """core/src's FOLDER/FILE for an object, from its path (.../src/FOLDER/FILE.c.o); None for an
    object built from a generated source (the embedded default configuration)."""
    parts = obj.replace("\\", "/").split("/")
    if "src" not in parts:
        return None
    i = len(parts) - 1 - parts[::-1].index("src")
    return "/".join(parts[i + 1:])[: -len(".o")]


def cycles(edges):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def main(args):
    src = None
    if args[:1] == ["--src"] and len(args) >= 2:
        src, args = args[1], args[2:]
    objs = args
    if not objs:
        sys.exit("usage: check_layers.py [--src CORE_SRC] OBJECT...")
    defs, needs = {}, {}
    for obj in objs:
        name = name_of(obj)
        if name is None:
            continue
        if "/" not in name:
            sys.exit(f"{obj}: not in a folder of core/src: every file belongs to a layer")
        d, n = symbols(obj)
        needs[name] = n
        for s in d:
            defs[s] = name
    edges = collections.defaultdict(dict)
    for f, syms in needs.items():
        for s in syms:
            g = defs.get(s)
            if g and g != f:
                edges[f].setdefault(g, []).append(s)
    bad = []
    for comp in cycles({f: set(gs) for f, gs in edges.items()}):
        bad.append("files call each other in a circle: " + " ".join(comp) + " (" + "; ".join(
            f"{a} -> {b}: {', '.join(sorted(edges[a][b])[:3])}"
            for a in comp for b in comp if b in edges.get(a, {})) + ")")
    for f, gs in sorted(edges.items()):
        for g, syms in sorted(gs.items()):
            a, b = f.split("/")[0], g.split("/")[0]
            if a != b and b not in ALLOWED.get(a, set()):
                bad.append(f"{f} calls {g} ({', '.join(sorted(syms)[:3])}): {a}/ may call only "
                           f"{', '.join(sorted(ALLOWED.get(a, ()))) or 'nothing'}/ "
                           "(docs/DESIGN.md section 2)")
    folders = sorted({n.split("/")[0] for n in needs})
    unknown = [x for x in folders if x not in ALLOWED]
    if unknown:
        bad.append(f"folders with no place in the layers: {', '.join(unknown)} (add them to ALLOWED)")
    if src is not None:
        bad.extend(runtime_includes(src))
    for line in bad:
        print("FAIL:", line)
    if bad:
        return 1
    print(f"{len(needs)} files in {len(folders)} folders ({', '.join(folders)}): no circle, "
          "every call between folders runs down")
    if src is not None:
        print(f"runtime.h, in {'/ '.join(sorted(NO_RUNTIME))}/: included only by "
              f"{', '.join(sorted(STILL_RUNTIME)) or 'no file'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
