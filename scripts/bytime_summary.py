#!/usr/bin/env python3
"""Issue 43's GPU figures from the logs scripts/gpu-bytime.sh writes (or any folder holding them):

- decode benches, `dec_g<GPU>_<N>_<CONF>.json` (`cgrt bench conf/CONF.ini --workload decode --json`):
  per configuration, over its processes, the rows more than 2% slower than eager with static and
  with fresh inputs (the bench's own counts and which token counts), the 1-token cgrt time, whether
  every row was bitwise equal, how by_time served each count, how many of its samples waited
  (by_time_waited_samples, when the bench gives it), and how many were left out as replays on
  private copies and how many buckets measured again for them (by_time_copied_samples and
  by_time_copied_rechecks), and how many eager decisions their watch undid
  (by_time_eager_overturned);
- traffic replays, `traffic_<NAME>.txt` (`cgrt bench CONF --traffic FILE`): the configuration's total
  against its padded-token plan and eager, and whether the runs were settled (`--settle N`): without
  it the plan's first two passes fall in the process's first graphed runtimes, which replay 2-3%
  slower, and the configured run's first only (docs/decisions.md, issue 43, session 47), so the
  ratio of an unsettled log favours the configured run;
- `dispatch.txt`: lines "<run> <CONF>: replay dispatch: X us ... (raw launch Y us) ..." per run;
- `ordering.txt`: lines "<run> <CONF>: ordering with the legacy stream ...: F us for the four calls
  ..., T us for two legacy-stream records ...; the launch itself on the legacy stream +L us, on a
  blocking stream +B us ..." per run (the ordering calls alone; the launches since session 51).

usage: bytime_summary.py LOG_DIR. Exit 0 when every log parsed and every row was bitwise equal, 1
otherwise (a missing or broken log, a differing row). The targets (issue 43) are printed beside the
figures, not asserted: no row more than 2% slower than eager, static and fresh; a traffic total no
worse than the padded-token plan's; the step path at most 0.5 us above cudaGraphLaunch.
"""

import glob
import json
import os
import re
import sys

DEC = re.compile(r"dec_g(\d+)_(\d+)_(.+)\.json$")
ROW = re.compile(r"^(?P<run>\S.*?)\s{2,}(?P<total>\d+(?:\.\d+)?)\s+(?P<us>\d+(?:\.\d+)?)\s")
# the bench's passes (2 by default, A B C D D C B A; up to 4), the configured run over its
# padded-token plan in each
PASSES = re.compile(
    r"^.* against its padded-token plan: \d+(?:\.\d+)? of its total \(passes "
    r"(?P<list>\d+(?:\.\d+)?(?:, \d+(?:\.\d+)?)+)\)$"
)
# `--settle N`: the bench's header line when N > 0
SETTLED = re.compile(r"^settled: (?P<n>\d+) rounds? of every run")
DISPATCH = re.compile(
    r"^(?P<run>\S+) (?P<conf>\S+): replay dispatch: (?P<us>-?\d+(?:\.\d+)?) us .*?"
    r"\(raw launch (?P<raw>\d+(?:\.\d+)?) us\)"
)

ORDERING = re.compile(
    r"^(?P<run>\S+) (?P<conf>\S+): ordering with the legacy stream.*?: (?P<four>-?\d+(?:\.\d+)?) us "
    r"for the four calls.*?, (?P<two>-?\d+(?:\.\d+)?) us for two legacy-stream records"
    # since session 51: the launch alone on the legacy stream and on a blocking stream
    r"(?:.*?the launch itself on the legacy stream (?P<legacy>[-+]?\d+(?:\.\d+)?) us, "
    r"on a blocking stream (?P<blocking>[-+]?\d+(?:\.\d+)?) us)?"
)


def slow_rows(rows, key_speedup):
    """Token counts more than 2% slower than eager, with their speedup (eager / cgrt)."""
    out = []
    for r in rows:
        x = key_speedup(r)
        if x is not None and x < 0.98:
            out.append("%d: %.2fx" % (r["tokens"], x))
    return out


def decode(logdir):
    """Per configuration: a list of (file, summary) and whether all parsed and were bitwise."""
    ok = True
    confs = {}
    for path in sorted(glob.glob(os.path.join(logdir, "dec_*.json"))):
        m = DEC.search(os.path.basename(path))
        if not m:
            continue
        conf = m.group(3)
        try:
            with open(path) as f:
                d = json.load(f)
            rows, fresh = d["rows"], d.get("fresh", [])
        except (OSError, ValueError, KeyError) as e:
            confs.setdefault(conf, []).append((path, {"error": str(e)}))
            ok = False
            continue
        bitwise = all(r.get("bitwise") for r in rows) and all(r.get("bitwise") for r in fresh)
        ok = ok and bitwise
        one = [r["backend_us"] for r in rows if r["tokens"] == 1]
        confs.setdefault(conf, []).append(
            (
                path,
                {
                    "static": d.get("slower_than_eager_2pct"),
                    "fresh": d.get("fresh_slower_than_eager_2pct"),
                    "static_rows": slow_rows(rows, lambda r: r.get("speedup")),
                    "fresh_rows": slow_rows(
                        fresh,
                        lambda r: 1.0 / r["vs_eager"] if r.get("vs_eager") else None,
                    ),
                    "one": one[0] if one else None,
                    "bitwise": bitwise,
                    "served": " ".join(
                        "%d:%s" % (r["tokens"], r.get("served", "?")[:5]) for r in rows
                    ),
                    "fresh_served": " ".join(
                        "%d:%d" % (r["tokens"], r.get("bucket", 0)) for r in fresh
                    ),
                    "waited": d.get("backend_figures", {}).get("by_time_waited_samples"),
                    "copied": d.get("backend_figures", {}).get("by_time_copied_samples"),
                    "rechecked": d.get("backend_figures", {}).get("by_time_copied_rechecks"),
                    "undone": d.get("backend_figures", {}).get("by_time_eager_overturned"),
                },
            )
        )
    return confs, ok


def traffic(path):
    """(configuration row, its total, the padded plan's total, eager's total, the passes' ratios
    to the plan in their order or None for a log of one pass, the settling rounds), or an
    error."""
    rows = {}
    passes = None
    settled = 0
    with open(path) as f:
        for line in f:
            m = SETTLED.match(line.strip())
            if m:
                settled = int(m.group("n"))
                continue
            m = PASSES.match(line.strip())
            if m:
                passes = tuple(float(x) for x in m.group("list").split(", "))
                continue
            m = ROW.match(line)
            if m and m.group("run") != "run":
                rows[m.group("run").strip()] = float(m.group("total"))
    plan = [r for r in rows if r.endswith(", padded-token plan")]
    if not plan or "eager" not in rows:
        raise ValueError("no eager row or no padded-token plan row")
    conf = plan[0][: -len(", padded-token plan")]
    if conf not in rows:
        raise ValueError("no row %r beside its padded-token plan" % conf)
    return conf, rows[conf], rows[plan[0]], rows["eager"], passes, settled


def dispatch(path):
    """Per configuration, the (dispatch us, raw launch us) of each run, in order."""
    out = {}
    with open(path) as f:
        for line in f:
            m = DISPATCH.match(line.strip())
            if m:
                conf = os.path.basename(m.group("conf"))
                out.setdefault(conf, []).append((float(m.group("us")), float(m.group("raw"))))
    return out


def ordering(path):
    """The (four calls us, two records us, legacy launch us, blocking launch us) of each run, in
    order, over every configuration; the launches None in a log from before session 51."""
    out = []
    with open(path) as f:
        for line in f:
            m = ORDERING.match(line.strip())
            if m:
                extra = [m.group(k) for k in ("legacy", "blocking")]
                out.append((float(m.group("four")), float(m.group("two")))
                           + tuple(float(x) if x is not None else None for x in extra))
    return out


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: bytime_summary.py LOG_DIR", file=sys.stderr)
        return 2
    logdir = argv[1]
    confs, ok = decode(logdir)
    if confs:
        print(
            "decode (cgrt bench CONF --workload decode --json), per process: rows > 2% slower "
            "than eager, static / fresh (target: 0 / 0); 1-token cgrt_us; bitwise"
        )
    for conf, runs in sorted(confs.items()):
        for path, s in runs:
            name = os.path.basename(path)
            if "error" in s:
                print("  %-34s BROKEN: %s" % (name, s["error"]))
                continue
            print(
                "  %-34s %s / %s  [%s] [%s]  1-token %s  %s"
                % (
                    name,
                    s["static"],
                    s["fresh"],
                    ", ".join(s["static_rows"]) or "-",
                    ", ".join(s["fresh_rows"]) or "-",
                    "%.1f us" % s["one"] if s["one"] is not None else "-",
                    "equal" if s["bitwise"] else "DIFFER",
                )
            )
            waited = "" if s["waited"] is None else "; samples that waited: %d" % s["waited"]
            if s["copied"] is not None:  # replays on private copies: left out, and early rechecks
                waited += "; samples on copies left out: %d, buckets measured again: %d" % (
                    s["copied"], s["rechecked"] or 0)
            if s["undone"] is not None:  # eager decisions sent back to their bucket by the watch
                waited += "; eager decisions undone: %d" % s["undone"]
            print(
                "  %-34s served: %s; fresh at: %s%s"
                % ("", s["served"], s["fresh_served"], waited)
            )
        ones = [s["one"] for _, s in runs if s.get("one") is not None]
        if ones:
            print("  %s: 1-token %.1f-%.1f us over %d processes" % (conf, min(ones), max(ones), len(ones)))
    for path in sorted(glob.glob(os.path.join(logdir, "traffic_*.txt"))):
        try:
            conf, total, plan, eager, passes, settled = traffic(path)
        except (OSError, ValueError) as e:
            print("traffic %s: BROKEN: %s" % (os.path.basename(path), e))
            ok = False
            continue
        print(
            "traffic %s: %s %.1f ms, its padded-token plan %.1f (%.3f of it; target: 1.000 at "
            "most), eager %.1f (%.2fx)%s; %s"
            % (os.path.basename(path), conf, total, plan, total / plan, eager, eager / total,
               "; passes " + ", ".join("%.3f" % x for x in passes) if passes else "",
               "settled %d round%s" % (settled, "s" if settled > 1 else "") if settled
               else "not settled (the ratio favours %s: run with --settle 2)" % conf)
        )
    dpath = os.path.join(logdir, "dispatch.txt")
    if os.path.exists(dpath):
        for conf, v in sorted(dispatch(dpath).items()):
            print(
                "dispatch %s: %s us a step above cudaGraphLaunch by hand (raw launch %s us; "
                "target: 0.5 at most)"
                % (
                    conf,
                    ", ".join("%.3f" % u for u, _ in v),
                    ", ".join("%.3f" % r for _, r in v),
                )
            )
    opath = os.path.join(logdir, "ordering.txt")
    v = ordering(opath) if os.path.exists(opath) else []
    if v:
        print(
            "ordering calls alone (per step, each run): four as on cgrt's stream %s us; two "
            "legacy-stream records beside a blocking stream %s us"
            % (", ".join("%.3f" % o[0] for o in v), ", ".join("%.3f" % o[1] for o in v))
        )
        launched = [o for o in v if o[2] is not None]
        if launched:
            print(
                "the launch alone, above a non-blocking stream's: on the legacy stream %s us; on "
                "a blocking stream %s us"
                % (
                    ", ".join("%+.3f" % o[2] for o in launched),
                    ", ".join("%+.3f" % o[3] for o in launched),
                )
            )
    if not confs:
        print("no decode logs (dec_g*_*_*.json) in %s" % logdir)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
