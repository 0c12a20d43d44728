#!/usr/bin/env python3
"""Writes small synthetic token shards for llm.c's DataLoader, standard library only.

The format is dev/data/data_common.py's (write_datafile, "gpt-2"): a header of 256 int32 (magic
20240520, version 1, the token count), then the tokens as uint16, little-endian. The tokens follow a
log-uniform law over GPT-2's 50257 ids, so that small ids repeat within a batch as common words do
in text: encoder_backward buckets the repeats, and the test wants buckets of several sizes.

    usage: gen_shards.py DIR [--train-tokens N] [--val-tokens N] [--seed S]
    writes DIR/train_000000.bin and DIR/val_000000.bin (llm.c: -i 'DIR/train_*.bin' -j ...)
"""
import argparse
import array
import os
import random
import struct
import sys

MAGIC, VERSION, VOCAB = 20240520, 1, 50257


def tokens(n, seed):
    rng = random.Random(seed)
    # int(V ** u) for u uniform in [0, 1) is log-uniform over 1..V-1; minus one: ids 0..V-2
    return array.array("H", (int(VOCAB ** rng.random()) - 1 for _ in range(n)))


def write_shard(path, toks):
    header = [0] * 256
    header[0], header[1], header[2] = MAGIC, VERSION, len(toks)
    if sys.byteorder != "little":
        toks.byteswap()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(toks.tobytes())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--train-tokens", type=int, default=1 << 18)
    ap.add_argument("--val-tokens", type=int, default=1 << 15)
    ap.add_argument("--seed", type=int, default=20240520)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    for name, n, seed in (("train", a.train_tokens, a.seed), ("val", a.val_tokens, a.seed + 1)):
        path = os.path.join(a.dir, "%s_000000.bin" % name)
        write_shard(path, tokens(n, seed))
        print("wrote %s: %d tokens" % (path, n))


if __name__ == "__main__":
    main()
