#!/usr/bin/env python3
"""Where a step's device time goes, from libcgrt-trace.so's CSV (tools/trace/cupti_trace.c).

    trace_summary.py RUN.csv --step encoder_forward [--skip 2] [--top 12] [--against OTHER.csv]
    trace_summary.py RUN.csv [--top 12] [--against OTHER.csv]
    trace_summary.py RUN.csv --by-graph [--top 12]
    trace_summary.py RUN.csv --boundaries [--top 12]
    trace_summary.py RUN.csv --by-launch [--top 12]

A step begins at each kernel whose name starts with --step (a step's first kernel). Per step:
kernels and copies run, the sum of the kernels' durations, the time the device was busy (the
union of every kernel, copy and memset interval), the span from this step's first kernel to the
next step's, the idle time of that span, the time in NCCL's kernels (nccl_us: their durations
summed) and the busy time without them (busy_wo_nccl_us). On several GPUs an NCCL kernel also
spins while it waits for the other ranks, so busy_us then counts waiting too, and the busy time
without NCCL is the rank's own work. The medians over the steps after --skip are
printed, then the kernels by time per step; with --against, the same for a second trace and the
kernels whose time per step differs most between the two.
Without --step (a run with no step marker: a multi-rank bench), the whole trace: its span, busy
and idle time, and per kernel, copy or graph (CGRT_TRACE_GRAPHS=1 records one per launch, named
by graph id) the calls, the median and the total time; with --against, the names whose median
moved most. With --api (a trace taken with CGRT_TRACE_API=1), the host side too: per runtime
API function, its calls and host time over the whole trace divided by its number of steps (the
kernels named --step), e.g. to see which calls an eager loop spends its launch-bound time in.
With --by-graph, the whole trace split into the work outside graphs and inside them: per side,
the records, their time and the device's idle time before them; per name, each side's median.
With --boundaries, the gap from each device record's end to the next record's start on the same
stream (negative: the next began first, a programmatic dependent launch), in four classes: inside
one graph launch's records (same graph id and launch), between two graph launches (another graph,
or the same one launched again), between a graph and work outside graphs, and outside graphs; per
class the gaps, their median and 90th percentile; then the between-graphs gaps by whether the
launch before and the one after hold an NCCL kernel (when any does: a graph holding a collective
ends later, issue 42, session 48), and by the pair of names that meet there, beside the same
pair's median inside graphs, which says what a graph boundary costs (issue 42: module scope's
graphs against one graph a step). Gaps over 50 us (the host behind, or a pause between phases) are left out and counted. A
graph's kernels are reported on the stream it was launched on, so parallel branches inside a graph
show as overlaps.
With --by-launch, each kernel's durations by the launch it came in: eagerly, in a graph launch of
at most SMALL_LAUNCH kernels (a graph per module call), or in a larger one (a graph per step): the
same kernel slower in small graphs than in large ones is what a graph boundary does to it, and an
NCCL kernel that runs longer there waits longer for its peers (issue 42: ranks whose module graphs
drift apart between two collectives).
Standard library only.
"""
import argparse
import csv
import os
import stat
import statistics
import sys

DEVICE_KINDS = ("kernel", "memcpy", "memset", "graph")


def demangled_base(name):
    """The function name of an Itanium-mangled symbol (_Z12encoder_fwdPfi -> encoder_fwd;
    nested names joined by ::), without its template and function arguments; None if not one."""
    if not name.startswith("_Z"):
        return None
    i, parts = 2, []
    nested = name[i:i + 1] == "N"
    i += nested
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        parts.append(name[j:j + n])
        i = j + n
        if not nested:
            break
    return "::".join(parts) or None


def short(name):
    """A kernel's name without its argument list and template arguments."""
    base = demangled_base(name)
    if base:
        return base
    cut = len(name)
    for ch in "(<":
        i = name.find(ch)
        if i > 0:
            cut = min(cut, i)
    return name[:cut]


def rows(path):
    """The trace's records as (line, dict), from a regular file only: a directory, a FIFO or a
    device (/dev/zero never ends) is refused before it is opened. A malformed record (a missing
    column, a NUL byte, a number that is not one) ends the run with path:line and what is wrong."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        sys.exit(f"{path}: cannot read it: {e.strerror}; check the path")
    if not stat.S_ISREG(mode):
        sys.exit(f"{path}: not a regular file (a directory, a pipe or a device); give the CSV "
                 "file libcgrt-trace.so wrote (CGRT_TRACE_OUT)")
    with open(path, newline="", errors="replace") as f:
        r = csv.DictReader(f)
        try:
            missing = [k for k in ("kind", "name", "start_ns", "end_ns", "graph")
                       if k not in (r.fieldnames or [])]
            if r.fieldnames and missing:
                raise ValueError(f"the header has no column {', '.join(missing)}")
            for row in r:
                if "\0" in "".join(v for v in row.values() if isinstance(v, str)):
                    raise ValueError("a NUL byte in the record")
                if None in row.values() or None in row:
                    raise ValueError("the record does not have the header's columns")
                yield r.line_num, row
        except csv.Error as e:  # raised while reading the next record: its first line
            sys.exit(f"{path}:{r.line_num + 1}: {e}; is it a trace of libcgrt-trace.so?")
        except ValueError as e:
            sys.exit(f"{path}:{r.line_num}: {e}; is it a trace of libcgrt-trace.so?")


def number(path, line, row, key):
    """row[key] as a whole number, or the run ends with path:line."""
    try:
        return int(row[key])
    except (KeyError, TypeError, ValueError):
        sys.exit(f"{path}:{line}: {key} = {row.get(key)!r}: expected a whole number of ns (or of "
                 "a graph id); is it a trace of libcgrt-trace.so?")


def load(path, with_stream=False):
    """The device records, sorted: (start, end, kind, name, graph), and the stream and the
    correlation id (a graph launch's, for the records of its nodes) last when with_stream."""
    recs = []
    for line, row in rows(path):
        if row["kind"] in DEVICE_KINDS:
            name = row["name"]
            if row["kind"] == "graph":
                name = f"graph {row['graph']}"
            rec = (number(path, line, row, "start_ns"), number(path, line, row, "end_ns"),
                   row["kind"], name, number(path, line, row, "graph"))
            if with_stream:
                rec += (number(path, line, row, "stream"), number(path, line, row, "correlation"))
            recs.append(rec)
    recs.sort()
    return recs


def steps_of(recs, marker):
    starts = [i for i, r in enumerate(recs) if r[2] == "kernel" and short(r[3]).startswith(marker)]
    return [(recs[a:b], recs[b][0]) for a, b in zip(starts, starts[1:])]


def is_nccl(rec):
    return rec[2] == "kernel" and short(rec[3]).startswith("nccl")


def busy_ns(recs):
    total, cur_s, cur_e = 0, None, None
    for s, e, *_ in recs:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def summarize(path, marker, skip):
    recs = load(path)
    steps = steps_of(recs, marker)[skip:]
    if not steps:
        sys.exit(f"{path}: fewer than {skip + 2} kernels named {marker}*: no whole step to measure")
    rows, per_name = [], {}
    for seg, next_start in steps:
        kernels = [r for r in seg if r[2] == "kernel"]
        rows.append({
            "kernels": len(kernels),
            "copies": sum(1 for r in seg if r[2] in ("memcpy", "memset")),
            "in_graphs": sum(1 for r in kernels if r[4]),
            "kernel_us": sum(e - s for s, e, *_ in kernels) / 1e3,
            "busy_us": busy_ns(seg) / 1e3,
            "span_us": (next_start - seg[0][0]) / 1e3,
            "nccl_us": sum(e - s for s, e, *_ in filter(is_nccl, kernels)) / 1e3,
            "busy_wo_nccl_us": busy_ns([r for r in seg if not is_nccl(r)]) / 1e3,
        })
        step_names = {}
        for s, e, kind, name, _ in seg:
            key = short(name) if kind == "kernel" else kind
            t, n = step_names.get(key, (0, 0))
            step_names[key] = (t + (e - s), n + 1)
        for key, tn in step_names.items():
            per_name.setdefault(key, []).append(tn)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    med["idle_us"] = med["span_us"] - med["busy_us"]
    names = {}
    for key, tns in per_name.items():
        tns = tns + [(0, 0)] * (len(rows) - len(tns))
        names[key] = (statistics.median(t for t, _ in tns) / 1e3,
                      statistics.median(n for _, n in tns))
    return len(rows), med, names


def print_summary(path, n, med, names, top):
    print(f"{path}: {n} steps")
    print("  per step (median): " + ", ".join(
        f"{k} {med[k]:.1f}" if k.endswith("_us") else f"{k} {med[k]:g}"
        for k in ("kernels", "in_graphs", "copies", "kernel_us", "busy_us", "span_us", "idle_us",
                  "nccl_us", "busy_wo_nccl_us")))
    for key, (t, cnt) in sorted(names.items(), key=lambda x: -x[1][0])[:top]:
        print(f"    {t:9.1f} us  x{cnt:<4g} {key[:80]}")


def summarize_whole(path):
    """The whole trace: span, busy, idle; per name: calls, median and total us."""
    recs = load(path)
    if not recs:
        sys.exit(f"{path}: no device records (was libcgrt-trace.so preloaded into a CUDA process?)")
    span = (max(e for _, e, *_ in recs) - recs[0][0]) / 1e3
    busy = busy_ns(recs) / 1e3
    by = {}
    for s, e, kind, name, _ in recs:
        key = short(name) if kind == "kernel" else (name if kind == "graph" else kind)
        by.setdefault(key, []).append((e - s) / 1e3)
    names = {k: (len(v), statistics.median(v), sum(v)) for k, v in by.items()}
    return {"span_us": span, "busy_us": busy, "idle_us": span - busy}, names


def print_whole(path, med, names, top):
    print(f"{path}: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
    print(f"    {'calls':>7} {'median_us':>10} {'total_us':>11}  name")
    for key, (n, m, t) in sorted(names.items(), key=lambda x: -x[1][2])[:top]:
        print(f"    {n:7d} {m:10.2f} {t:11.1f}  {key[:80]}")


def main_whole(a):
    med, names = summarize_whole(a.csv)
    print_whole(a.csv, med, names, a.top)
    if not a.against:
        return
    med2, names2 = summarize_whole(a.against)
    print_whole(a.against, med2, names2, a.top)
    diff = {k: names2[k][1] - names[k][1] for k in set(names) & set(names2)}
    print(f"  {a.against} - {a.csv}: the medians that moved most")
    for key, d in sorted(diff.items(), key=lambda x: -abs(x[1]))[:a.top]:
        print(f"    {d:+9.2f} us  {key[:80]}  ({names[key][0]} -> {names2[key][0]} calls)")
    for key in sorted(set(names) ^ set(names2))[:a.top]:
        print(f"    only in {'the second' if key in names2 else 'the first'}: {key[:80]}")


def summarize_by_graph(path):
    """The whole trace split by where each record ran: outside graphs (eager) or inside one. Per
    side: records, their summed time, and the idle time before each record of that side (the gap
    after the device's previous work, whichever side it was); per name, each side's calls and
    median. For a run that times eager and graph steps in turn (cgrt bench), it says whether the
    graphs' kernels run longer than the same kernels launched eagerly, or the device waits more
    between them."""
    recs = load(path)
    if not recs:
        sys.exit(f"{path}: no device records (was libcgrt-trace.so preloaded into a CUDA process?)")
    side = {"eager": [0, 0.0, 0.0], "graph": [0, 0.0, 0.0]}
    by = {}
    last_end = None
    for s, e, kind, name, graph in recs:
        where = "graph" if graph else "eager"
        side[where][0] += 1
        side[where][1] += (e - s) / 1e3
        if last_end is not None and s > last_end:
            side[where][2] += (s - last_end) / 1e3
        last_end = e if last_end is None else max(last_end, e)
        key = short(name) if kind == "kernel" else kind
        by.setdefault(key, {"eager": [], "graph": []})[where].append((e - s) / 1e3)
    return side, by


def main_by_graph(a):
    side, by = summarize_by_graph(a.csv)
    print(f"{a.csv}: outside and inside graphs")
    for where, (n, busy, idle) in side.items():
        print(f"    {where:5}: {n:8d} records, {busy:12.1f} us in them, {idle:12.1f} us idle before "
              "them")
    print(f"    {'eager':>8} {'median':>9} {'graph':>8} {'median':>9} {'moved':>8}  name")
    rows = []
    for key, d in by.items():
        me = statistics.median(d["eager"]) if d["eager"] else None
        mg = statistics.median(d["graph"]) if d["graph"] else None
        total = sum(d["eager"]) + sum(d["graph"])
        rows.append((total, key, len(d["eager"]), me, len(d["graph"]), mg))
    for total, key, ne, me, ng, mg in sorted(rows, reverse=True)[:a.top]:
        moved = f"{mg - me:+8.2f}" if me is not None and mg is not None else f"{'':>8}"
        fe = f"{me:9.2f}" if me is not None else f"{'-':>9}"
        fg = f"{mg:9.2f}" if mg is not None else f"{'-':>9}"
        print(f"    {ne:8d} {fe} {ng:8d} {fg} {moved}  {key[:70]}")


BOUNDARY_IDLE_US = 50  # a longer gap is the host behind or a pause, not a boundary's cost


def quantile(v, q):
    """The q-quantile of v (sorted copy, nearest rank below)."""
    s = sorted(v)
    return s[min(len(s) - 1, int(q * len(s)))]


def summarize_boundaries(path):
    """Per class (those of the --boundaries doc), the gaps in us; per pair of names meeting
    between two graphs and inside one, their gaps; the gaps between two graphs by whether the
    graph launch before and the one after hold an NCCL kernel; and how many gaps were left out as
    idle."""
    recs = load(path, with_stream=True)
    if not recs:
        sys.exit(f"{path}: no device records (was libcgrt-trace.so preloaded into a CUDA process?)")
    streams, with_nccl = {}, set()
    for r in recs:
        streams.setdefault(r[5], []).append(r)
        if r[4] and is_nccl(r):
            with_nccl.add((r[4], r[6]))  # the graph launch (graph, correlation) holds NCCL
    classes = {k: [] for k in ("inside a graph", "between graphs", "graph and eager", "eager")}
    between, inside, by_nccl = {}, {}, {}
    idle = 0
    for rs in streams.values():
        for a, b in zip(rs, rs[1:]):
            gap = (b[0] - a[1]) / 1e3
            if gap > BOUNDARY_IDLE_US:
                idle += 1
                continue
            pair = (short(a[3]) if a[2] == "kernel" else a[2],
                    short(b[3]) if b[2] == "kernel" else b[2])
            if a[4] and b[4] and (a[4], a[6]) == (b[4], b[6]):
                classes["inside a graph"].append(gap)
                inside.setdefault(pair, []).append(gap)
            elif a[4] and b[4]:
                classes["between graphs"].append(gap)
                between.setdefault(pair, []).append(gap)
                key = ((a[4], a[6]) in with_nccl, (b[4], b[6]) in with_nccl)
                by_nccl.setdefault(key, []).append(gap)
            elif a[4] or b[4]:
                classes["graph and eager"].append(gap)
            else:
                classes["eager"].append(gap)
    return classes, between, inside, by_nccl, idle


def last(name):
    """The last part of a qualified name (gemm_tile of ns::(anonymous)::gemm_tile), 40 at most."""
    return name.split("::")[-1][:40]


def main_boundaries(a):
    classes, between, inside, by_nccl, idle = summarize_boundaries(a.csv)
    print(f"{a.csv}: gaps between consecutive records of a stream, us (negative: overlapped); "
          f"{idle} over {BOUNDARY_IDLE_US} us left out")
    for k, v in classes.items():
        if v:
            print(f"    {k:16} {len(v):9d} gaps, median {statistics.median(v):7.2f}, "
                  f"p90 {quantile(v, 0.9):7.2f}")
    if not between:
        return
    if any(k != (False, False) for k in by_nccl):
        print("    between graphs, by whether the graph launch before and the one after hold an "
              "NCCL kernel:")
        for (before, after), v in sorted(by_nccl.items()):
            print(f"        {'NCCL' if before else 'none':4} -> {'NCCL' if after else 'none':4}: "
                  f"{len(v):9d} gaps, median {statistics.median(v):7.2f}, "
                  f"p90 {quantile(v, 0.9):7.2f}")
    print(f"    between graphs, by the names that meet there (and the same pair inside a graph):")
    for pair, v in sorted(between.items(), key=lambda x: -len(x[1]))[:a.top]:
        w = inside.get(pair)
        ins = f"inside {len(w):7d} x, median {statistics.median(w):7.2f}" if w else "not inside"
        print(f"    {len(v):9d} x, median {statistics.median(v):7.2f}; {ins}  "
              f"{last(pair[0])} -> {last(pair[1])}")


SMALL_LAUNCH = 16  # kernels of a graph launch, at most, to count as a module's graph


def summarize_by_launch(path):
    """Per kernel name, its durations in us by launch class: eager, small graphs, large graphs;
    and the number of graph launches of each class. A graph launch's kernels share the launch's
    correlation id (CUPTI reports them one by one)."""
    launches, kernels = {}, []
    for line, row in rows(path):
        if row["kind"] != "kernel":
            continue
        graph = number(path, line, row, "graph")
        corr = number(path, line, row, "correlation")
        dur = (number(path, line, row, "end_ns") - number(path, line, row, "start_ns")) / 1e3
        kernels.append((short(row["name"]), graph, corr, dur))
        if graph:
            launches[(graph, corr)] = launches.get((graph, corr), 0) + 1
    if not kernels:
        sys.exit(f"{path}: no kernel records (was libcgrt-trace.so preloaded into a CUDA process?)")
    by, count = {}, {"small": 0, "large": 0}
    for n in launches.values():
        count["small" if n <= SMALL_LAUNCH else "large"] += 1
    for name, graph, corr, dur in kernels:
        where = "eager" if not graph else (
            "small" if launches[(graph, corr)] <= SMALL_LAUNCH else "large")
        by.setdefault(name, {"eager": [], "small": [], "large": []})[where].append(dur)
    return by, count


def main_by_launch(a):
    by, count = summarize_by_launch(a.csv)
    print(f"{a.csv}: kernel durations by launch, us: eager; graph launches of at most "
          f"{SMALL_LAUNCH} kernels ({count['small']} launches); larger ones ({count['large']})")
    print(f"    {'eager':>8} {'median':>8} {'small':>8} {'median':>8} {'p90':>8} {'large':>8} "
          f"{'median':>8} {'p90':>8}  name")
    order = sorted(by.items(), key=lambda x: -sum(sum(v) for v in x[1].values()))
    for name, d in order[:a.top]:
        cols = [f"{len(d['eager']):8d}",
                f"{statistics.median(d['eager']):8.2f}" if d["eager"] else f"{'-':>8}"]
        for k in ("small", "large"):
            v = d[k]
            cols += [f"{len(v):8d}", f"{statistics.median(v):8.2f}" if v else f"{'-':>8}",
                     f"{quantile(v, 0.9):8.2f}" if v else f"{'-':>8}"]
        print("    " + " ".join(cols) + f"  {last(name)}")


def summarize_api(path, marker):
    """Per runtime API function: (calls, host us) a step, over the whole trace; and the steps."""
    steps, by = 0, {}
    for line, row in rows(path):
        if row["kind"] == "kernel" and short(row["name"]).startswith(marker):
            steps += 1
        elif row["kind"] == "api":
            n, t = by.get(row["name"], (0, 0))
            by[row["name"]] = (n + 1, t + number(path, line, row, "end_ns") -
                               number(path, line, row, "start_ns"))
    if not steps:
        sys.exit(f"{path}: no kernel named {marker}*: no steps to divide by")
    if not by:
        sys.exit(f"{path}: no API records (take the trace with CGRT_TRACE_API=1)")
    return steps, {k: (n / steps, t / steps / 1e3) for k, (n, t) in by.items()}


def print_api(path, steps, names, top):
    calls = sum(n for n, _ in names.values())
    host = sum(t for _, t in names.values())
    print(f"{path}: runtime API over {steps} steps, per step: calls {calls:.1f}, host_us {host:.1f}")
    for key, (n, t) in sorted(names.items(), key=lambda x: -x[1][1])[:top]:
        print(f"    {t:9.1f} us  x{n:<7.1f} {key[:80]}")


def main_api(a):
    steps, names = summarize_api(a.csv, a.step)
    print_api(a.csv, steps, names, a.top)
    if not a.against:
        return
    steps2, names2 = summarize_api(a.against, a.step)
    print_api(a.against, steps2, names2, a.top)
    print(f"  {a.against} - {a.csv}, per step:")
    diff = {k: (names2.get(k, (0, 0))[0] - names.get(k, (0, 0))[0],
                names2.get(k, (0, 0))[1] - names.get(k, (0, 0))[1]) for k in set(names) | set(names2)}
    for key, (dn, dt) in sorted(diff.items(), key=lambda x: -abs(x[1][1]))[:a.top]:
        print(f"    {dt:+9.1f} us  {dn:+8.1f} calls  {key[:80]}")


def whole(lo, hi):
    """An argparse type: a whole number from lo to hi, written in digits only."""
    def parse(text):
        if not text.isascii() or not text.isdigit() or not lo <= int(text) <= hi:
            raise argparse.ArgumentTypeError(f"'{text}': expected a whole number from {lo} to {hi}")
        return int(text)
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--step", help="name prefix of a step's first kernel (else: the whole trace)")
    ap.add_argument("--skip", type=whole(0, 1000000), default=2,
                    help="steps left out at the start (warm-up), 0 to 1000000")
    ap.add_argument("--top", type=whole(0, 1000000), default=12,
                    help="rows shown, 0 to 1000000 (0: the per-step line alone)")
    ap.add_argument("--against", help="a second trace of the same program, to compare")
    ap.add_argument("--api", action="store_true",
                    help="the runtime API calls a step (needs --step and CGRT_TRACE_API=1)")
    ap.add_argument("--by-graph", action="store_true",
                    help="the whole trace split into work outside and inside graphs")
    ap.add_argument("--boundaries", action="store_true",
                    help="the gaps between records of a stream: inside graphs, between them")
    ap.add_argument("--by-launch", action="store_true",
                    help="each kernel's durations eagerly, in small graph launches, in large ones")
    a = ap.parse_args()
    if a.by_launch:
        main_by_launch(a)
        return
    if a.by_graph:
        main_by_graph(a)
        return
    if a.boundaries:
        main_boundaries(a)
        return
    if a.api:
        if not a.step:
            ap.error("--api needs --step, to count the steps")
        main_api(a)
        return
    if not a.step:
        main_whole(a)
        return
    n, med, names = summarize(a.csv, a.step, a.skip)
    print_summary(a.csv, n, med, names, a.top)
    if not a.against:
        return
    n2, med2, names2 = summarize(a.against, a.step, a.skip)
    print_summary(a.against, n2, med2, names2, a.top)
    print(f"  {a.against} - {a.csv}, per step: " + ", ".join(
        f"{k} {med2[k] - med[k]:+.1f}" for k in ("kernel_us", "busy_us", "span_us", "idle_us")))
    diff = {k: names2.get(k, (0, 0))[0] - names.get(k, (0, 0))[0] for k in set(names) | set(names2)}
    for key, d in sorted(diff.items(), key=lambda x: -abs(x[1]))[:a.top]:
        print(f"    {d:+9.1f} us  {key[:80]}  ({names.get(key, (0, 0))[1]:g} -> "
              f"{names2.get(key, (0, 0))[1]:g} a step)")


if __name__ == "__main__":
    main()
