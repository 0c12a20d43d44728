#!/usr/bin/env python3
"""Writes a synthetic decode traffic file for `cgrt bench --traffic` and `cgrt buckets --histogram`:
one step's token count per line. Each mode is WEIGHT:LO-HI (a share of the steps, whose token
counts are uniform in [LO, HI]); steps draw their mode independently, from a seeded generator, so
the same arguments always give the same file.

  python3 scripts/gen_traffic.py --steps 4000 --seed 1 70:20-40 30:90-120 > traffic/bimodal.txt
"""
import argparse
import random
import sys


def mode(text):
    try:
        weight, span = text.split(":")
        lo, hi = span.split("-")
        weight, lo, hi = float(weight), int(lo), int(hi)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected WEIGHT:LO-HI, e.g. 70:20-40")
    if weight <= 0 or lo < 1 or hi < lo:
        raise argparse.ArgumentTypeError(f"{text!r}: weight > 0 and 1 <= LO <= HI")
    return weight, lo, hi


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("modes", nargs="+", type=mode)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    weights = [m[0] for m in args.modes]
    out = sys.stdout
    spec = " ".join(f"{w:g}:{lo}-{hi}" for w, lo, hi in args.modes)
    out.write(f"# synthetic decode traffic: {args.steps} steps, modes {spec}, seed {args.seed}\n")
    for _ in range(args.steps):
        _, lo, hi = rng.choices(args.modes, weights=weights)[0]
        out.write(f"{rng.randint(lo, hi)}\n")


if __name__ == "__main__":
    main()
