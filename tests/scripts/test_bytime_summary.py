#!/usr/bin/env python3
"""scripts/bytime_summary.py on hand-made logs whose figures are worked out here: the decode rows
more than 2% slower (static from `speedup`, fresh from `vs_eager` = cgrt / eager), the 1-token
range, a differing row and a broken file (exit 1), the traffic totals against the padded-token
plan, the dispatch lines. Standard library only (ctest label unit)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "..", "scripts", "bytime_summary.py")

TRAFFIC = """cgrt bench: traffic traffic/bimodal.txt (4000 steps, ...)
run                    total_ms   us/step  steady_us  speedup padded_share  captures
eager                    3000.0     750.0      750.0    1.00x        0.00%         0
cgrt: info: local by_time: 90 tokens (bucket 128) served eagerly from now on  1019.7 us  2 x
local exponential        2900.0     725.0      720.0    1.03x       23.67%        72
local adaptive           2950.0     737.5      699.1    1.02x        7.70%       240
local exponential, padded-token plan     3100.0     775.0      780.3    0.97x       24.18%        72
passes, total_ms (first / second): eager 3010.0 / 2990.0; local exponential 2950.0 / 2850.0
local exponential against its padded-token plan: 0.935 of its total (passes 0.952, 0.919)
"""


def decode(rows, fresh, bitwise=True):
    return {
        "rows": [{"tokens": t, "served": s, "speedup": x, "backend_us": u, "bitwise": bitwise}
                 for t, s, x, u in rows],
        "fresh": [{"tokens": t, "bucket": b, "vs_eager": v, "bitwise": True} for t, b, v in fresh],
        "slower_than_eager_2pct": sum(1 for r in rows if r[2] < 0.98),
        "fresh_slower_than_eager_2pct": sum(1 for f in fresh if 1 / f[2] < 0.98),
    }


def run(d):
    p = subprocess.run([sys.executable, TOOL, d], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


class Summary(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def put(self, name, text):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(text if isinstance(text, str) else json.dumps(text))

    def test_figures(self):
        # 37 at 0.91x static; fresh 200 at 1.14 of eager's time = 0.877x; 100 at 1.01 = 0.990x
        dec = decode([(1, "exact", 1.6, 505.0), (37, "padded", 0.91, 765.0),
                      (200, "eager", 1.0, 1350.0)],
                     [(37, 64, 0.9), (100, 128, 1.01), (200, 256, 1.14)])
        dec["backend_figures"] = {"by_time_waited_samples": 5, "by_time_copied_samples": 7,
                                  "by_time_copied_rechecks": 1, "by_time_eager_overturned": 2}
        self.put("dec_g0_1_local_bytime.json", dec)
        self.put("dec_g1_2_local_bytime.json",
                 decode([(1, "exact", 1.3, 509.5), (37, "exact", 1.1, 640.0)], [(37, 37, 0.9)]))
        self.put("traffic_bimodal.txt", TRAFFIC)
        self.put("dispatch.txt",
                 "1 conf/local_block.ini: replay dispatch: 2.674 us of host time per replayed "
                 "graph (one per step) above cudaGraphLaunch of the same executables by hand (raw "
                 "launch 5.107 us), 2.508 us above the floor's graphs by hand\n"
                 "2 conf/local_block.ini: replay dispatch: 1.665 us of host time (raw launch "
                 "3.902 us), more\n")
        self.put("ordering.txt",
                 "1 conf/local_block.ini: ordering with the legacy stream, per step (the floor's "
                 "one graph at 1 tokens launched by hand, medians of 400 triples): 0.812 us for "
                 "the four calls made on cgrt's own stream, 0.406 us for two legacy-stream records "
                 "beside a blocking stream (docs/decisions.md, issue 43, item 5)\n"
                 "1 conf/local_block.ini+host-stream: \n"
                 "2 conf/local_block.ini: ordering with the legacy stream, per step (the floor's "
                 "one graph at 1 tokens launched by hand, above its bare launch on a non-blocking "
                 "stream, medians of 400 rounds): 1.769 us for the four calls made on cgrt's own "
                 "stream, 1.249 us for two legacy-stream records beside a blocking stream; the "
                 "launch itself on the legacy stream +0.494 us, on a blocking stream +0.237 us "
                 "(docs/decisions.md, issue 43, item 5)\n")
        rc, out = run(self.dir)
        self.assertEqual(rc, 0, out)
        self.assertIn("dec_g0_1_local_bytime.json         1 / 1  [37: 0.91x] [200: 0.88x]", out)
        self.assertIn("dec_g1_2_local_bytime.json         0 / 0  [-] [-]", out)
        self.assertIn("local_bytime: 1-token 505.0-509.5 us over 2 processes", out)
        self.assertIn("37:padde", out)
        self.assertIn("fresh at: 37:64 100:128 200:256; samples that waited: 5; samples on "
                      "copies left out: 7, buckets measured again: 1; eager decisions undone: 2",
                      out)
        self.assertIn("fresh at: 37:37\n", out)  # no backend figures: nothing said
        self.assertIn("local exponential 2900.0 ms, its padded-token plan 3100.0 (0.935 of it", out)
        self.assertIn("eager 3000.0 (1.03x); passes 0.952, 0.919; not settled (the ratio favours "
                      "local exponential: run with --settle 2)", out)
        self.assertIn("dispatch local_block.ini: 2.674, 1.665 us a step", out)
        self.assertIn("raw launch 5.107, 3.902 us", out)
        self.assertIn("four as on cgrt's stream 0.812, 1.769 us; two legacy-stream records "
                      "beside a blocking stream 0.406, 1.249 us", out)
        # the launches alone: only the run whose line has them (session 51's bench)
        self.assertIn("the launch alone, above a non-blocking stream's: on the legacy stream "
                      "+0.494 us; on a blocking stream +0.237 us", out)

    def test_four_passes(self):
        # --passes 4: four ratios, in their order
        self.put("dec_g0_1_local.json", decode([(1, "exact", 1.6, 505.0)], []))
        self.put("traffic_bimodal.txt", TRAFFIC.replace(
            "(passes 0.952, 0.919)", "(passes 1.010, 0.950, 0.981, 0.962)"))
        rc, out = run(self.dir)
        self.assertEqual(rc, 0, out)
        self.assertIn("eager 3000.0 (1.03x); passes 1.010, 0.950, 0.981, 0.962", out)

    def test_settled(self):
        # --settle 2: the header line says so, and the summary with it
        self.put("dec_g0_1_local.json", decode([(1, "exact", 1.6, 505.0)], []))
        self.put("traffic_bimodal.txt", TRAFFIC.replace(
            "run ", "settled: 2 rounds of every run over the trace's first 800 steps, untimed, "
            "each on a runtime of its own, before the passes\nrun ", 1))
        rc, out = run(self.dir)
        self.assertEqual(rc, 0, out)
        self.assertIn("passes 0.952, 0.919; settled 2 rounds\n", out)

    def test_differing_row_fails(self):
        self.put("dec_g0_1_local.json", decode([(1, "exact", 1.6, 505.0)], [], bitwise=False))
        rc, out = run(self.dir)
        self.assertEqual(rc, 1, out)
        self.assertIn("DIFFER", out)

    def test_broken_logs_fail(self):
        self.put("dec_g0_1_local.json", "{ not json")
        rc, out = run(self.dir)
        self.assertEqual(rc, 1, out)
        self.assertIn("BROKEN", out)
        self.put("dec_g0_1_local.json", decode([(1, "exact", 1.6, 505.0)], []))
        self.put("traffic_x.txt", "eager  1.0  2.0 x\n")
        rc, out = run(self.dir)
        self.assertEqual(rc, 1, out)
        self.assertIn("traffic traffic_x.txt: BROKEN: no eager row or no padded-token plan row", out)

    def test_no_logs_fail(self):
        rc, out = run(self.dir)
        self.assertEqual(rc, 1, out)
        self.assertIn("no decode logs", out)


if __name__ == "__main__":
    unittest.main()
