#!/usr/bin/env python3
"""The core's layers, checked from its object files (ctest core_layers, label unit).

    check_layers.py OBJECT...   (core/src/FOLDER/FILE.c.o, as CMake's $<TARGET_OBJECTS:cgrt_objs>)

A file calls another when its object needs a symbol the other defines (nm). Fails, naming the
files and the symbols, when files call each other in a circle, or when a folder calls one that the
layering (docs/DESIGN.md section 2) puts above it. Standard library and nm only.
"""
import collections
import os
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


def main(objs):
    if not objs:
        sys.exit("usage: check_layers.py OBJECT...")
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
    for line in bad:
        print("FAIL:", line)
    if bad:
        return 1
    print(f"{len(needs)} files in {len(folders)} folders ({', '.join(folders)}): no circle, "
          "every call between folders runs down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
