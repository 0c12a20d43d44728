#!/usr/bin/env python3
"""tools/trace/trace_summary.py on small hand-made traces whose figures are worked out here:
the step mode (busy time as the union of overlapping records, idle, per-kernel times), the
whole-trace mode, --by-graph, --boundaries (gaps inside and between graphs) and --api (runtime
calls a step). Standard library only (ctest label unit)."""
import csv
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "..", "tools", "trace", "trace_summary.py")
HEADER = ["kind", "name", "start_ns", "end_ns", "stream", "graph", "graph_node", "correlation"]


def write_records(records):
    """A trace file of whole records (HEADER's columns); its path."""
    fd, path = tempfile.mkstemp(suffix=".csv")
    with os.fdopen(fd, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows(records)
    return path


def write_trace(rows):
    """A trace file of (kind, name, start, end) records on stream 7, outside graphs."""
    return write_records([kind, name, s, e, 7, 0, 0, 0] for kind, name, s, e in rows)


def run(*args):
    p = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def step(t0, api_calls):
    """One step from t0 (ns): marker 0-2 us, a copy 1-3 us overlapping it, gemm 5-9 us; the
    next step starts 20 us later. API rows: api_calls launches of 1.5 us each."""
    rows = [("kernel", "_Z15encoder_forwardPfi", t0, t0 + 2000),
            ("memcpy", "memcpy", t0 + 1000, t0 + 3000),
            ("kernel", "gemm<float>(int)", t0 + 5000, t0 + 9000)]
    rows += [("api", "cudaLaunchKernel", t0 + 100 * i, t0 + 100 * i + 1500) for i in range(api_calls)]
    rows.append(("api", "cudaMemcpyAsync", t0, t0 + 4000))
    return rows


class TraceSummary(unittest.TestCase):
    def kernels(self, records):
        """A trace file of kernel records (name, start, end, stream, graph, correlation), removed
        after the test."""
        path = write_records(["kernel", name, s, e, stream, graph, 1, corr]
                             for name, s, e, stream, graph, corr in records)
        self.addCleanup(os.unlink, path)
        return path

    def setUp(self):
        rows = []
        for i in range(5):
            rows += step(i * 20000, 2)
        self.a = write_trace(rows)
        rows = []
        for i in range(5):
            rows += step(i * 20000, 3)
        self.b = write_trace(rows)

    def tearDown(self):
        os.unlink(self.a)
        os.unlink(self.b)

    def test_step(self):
        # 4 whole steps (the 5th has no next marker), skip 1 -> 3; busy = 3 (union 0-3) + 4 = 7 us
        rc, out = run(self.a, "--step", "encoder_forward", "--skip", "1")
        self.assertEqual(rc, 0, out)
        self.assertIn("3 steps", out)
        self.assertIn("kernels 2, in_graphs 0, copies 1, kernel_us 6.0, busy_us 7.0, "
                      "span_us 20.0, idle_us 13.0", out)
        self.assertIn("4.0 us  x1    gemm", out)
        self.assertIn("2.0 us  x1    encoder_forward", out)

    def test_step_line_alone(self):
        # tests/hosts/llmc/bench.sh reads the floor this way: --top 0, the per-step line and no
        # rows (--top 0 was refused once, and the bench printed "-" for every floor)
        rc, out = run(self.a, "--step", "encoder_forward", "--skip", "3", "--top", "0")
        self.assertEqual(rc, 0, out)
        self.assertIn("busy_us 7.0", out)
        self.assertNotIn("gemm", out)

    def test_nccl(self):
        # an NCCL kernel 8-15 us overlapping the gemm (5-9 us): busy = 3 + (5..15) = 13 us, NCCL
        # 7 us, busy without it 7 us (the steps above)
        rows = []
        for i in range(4):
            rows += step(i * 20000, 1)
            rows.append(("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgs)",
                         i * 20000 + 8000, i * 20000 + 15000))
        path = write_trace(rows)
        try:
            rc, out = run(path, "--step", "encoder_forward", "--skip", "0")
        finally:
            os.unlink(path)
        self.assertEqual(rc, 0, out)
        self.assertIn("busy_us 13.0, span_us 20.0, idle_us 7.0, nccl_us 7.0, busy_wo_nccl_us 7.0", out)

    def test_whole(self):
        rc, out = run(self.a)
        self.assertEqual(rc, 0, out)
        # span 0 .. 89 us, busy 5 x 7 us, api rows left out
        self.assertIn("span_us 89.0, busy_us 35.0, idle_us 54.0", out)
        self.assertNotIn("cudaLaunchKernel", out)

    def test_by_graph(self):
        # eager: gemm 0-1 us, gemm 1.5-2.5 us; graph 5: gemm 3-4.2 us, attn 4.3-5.3 us
        path = self.kernels((name, s, e, 7, graph, 0)
                            for name, s, e, graph in (("gemm", 0, 1000, 0), ("gemm", 1500, 2500, 0),
                                                      ("gemm", 3000, 4200, 5),
                                                      ("attn", 4300, 5300, 5)))
        rc, out = run(path, "--by-graph")
        self.assertEqual(rc, 0, out)
        self.assertIn("eager:        2 records,          2.0 us in them,          0.5 us idle", out)
        self.assertIn("graph:        2 records,          2.2 us in them,          0.6 us idle", out)
        self.assertRegex(out, r"2\s+1\.00\s+1\s+1\.20\s+\+0\.20\s+gemm")

    def test_boundaries_by_nccl(self):
        # stream 7, five graph launches: A (graph 5, corr 1) gemm 0-1, nccl 1-2 us; B (graph 6,
        # corr 2) norm 5-6: NCCL -> none 3.0; C (graph 5 again, corr 3) gemm 7-8, nccl 8-9:
        # none -> NCCL 1.0; D (graph 6, corr 4) norm 12-13: NCCL -> none 3.0; E (graph 6 again,
        # corr 5) norm 14-15: none -> none 1.0 (the same graph launched again: between graphs)
        path = self.kernels((name, s, e, 7, graph, corr) for name, s, e, graph, corr in (
            ("gemm", 0, 1000, 5, 1), ("ncclAllGather", 1000, 2000, 5, 1),
            ("norm", 5000, 6000, 6, 2), ("gemm", 7000, 8000, 5, 3),
            ("ncclAllGather", 8000, 9000, 5, 3),
            ("norm", 12000, 13000, 6, 4), ("norm", 14000, 15000, 6, 5)))
        rc, out = run(path, "--boundaries")
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"inside a graph\s+2 gaps, median\s+0\.00")
        self.assertRegex(out, r"between graphs\s+4 gaps")
        self.assertRegex(out, r"NCCL -> none:\s+2 gaps, median\s+3\.00")
        self.assertRegex(out, r"none -> NCCL:\s+1 gaps, median\s+1\.00")
        self.assertRegex(out, r"none -> none:\s+1 gaps, median\s+1\.00")

    def test_by_launch(self):
        # eager: nccl 2 us; graph 5, two launches of 2 kernels (corr 10, 11): nccl 4 and 6 us,
        # gemm 1 us each; graph 6, one launch (corr 12) of 17 kernels: nccl 3 us, 16 gemm 1 us
        rows = [("ncclAllGather", 0, 2000, 0, 1)]
        t = 10000
        for corr, d in ((10, 4000), (11, 6000)):
            rows += [("ncclAllGather", t, t + d, 5, corr), ("gemm", t + d, t + d + 1000, 5, corr)]
            t += 20000
        rows.append(("ncclAllGather", t, t + 3000, 6, 12))
        rows += [("gemm", t + 3000 + i * 1000, t + 4000 + i * 1000, 6, 12) for i in range(16)]
        path = self.kernels((name, s, e, 7, graph, corr) for name, s, e, graph, corr in rows)
        rc, out = run(path, "--by-launch")
        self.assertEqual(rc, 0, out)
        self.assertIn("at most 16 kernels (2 launches); larger ones (1)", out)
        # nccl: eager 1 x 2.00; small 2 x median 5.00, p90 6.00; large 1 x 3.00
        self.assertRegex(out, r"1\s+2\.00\s+2\s+5\.00\s+6\.00\s+1\s+3\.00\s+3\.00\s+ncclAllGather")
        self.assertRegex(out, r"0\s+-\s+2\s+1\.00\s+1\.00\s+16\s+1\.00\s+1\.00\s+gemm")

    def test_boundaries(self):
        # stream 7: graph 5 gemm 0-2 us, norm 1.5-3, gemm 2.5-4 (inside: -0.5, -0.5); graph 6
        # norm 6-7 (between graphs, gemm -> norm: +2.0); eager gemm 7.5-8 (graph and eager:
        # +0.5); eager gemm 100-101 (92 us: idle, left out); stream 8: eager gemm 0-1, gemm
        # 1.25-2 (eager: +0.25)
        path = self.kernels((name, s, e, stream, graph, 0) for name, s, e, stream, graph in (
            ("gemm", 0, 2000, 7, 5), ("norm", 1500, 3000, 7, 5), ("gemm", 2500, 4000, 7, 5),
            ("norm", 6000, 7000, 7, 6), ("gemm", 7500, 8000, 7, 0), ("gemm", 100000, 101000, 7, 0),
            ("gemm", 0, 1000, 8, 0), ("gemm", 1250, 2000, 8, 0)))
        rc, out = run(path, "--boundaries")
        self.assertEqual(rc, 0, out)
        self.assertIn("1 over 50 us left out", out)
        self.assertRegex(out, r"inside a graph\s+2 gaps, median\s+-0\.50")
        self.assertRegex(out, r"between graphs\s+1 gaps, median\s+2\.00")
        self.assertRegex(out, r"graph and eager\s+1 gaps, median\s+0\.50")
        self.assertRegex(out, r"eager\s+1 gaps, median\s+0\.25")
        self.assertRegex(out, r"1 x, median\s+2\.00; inside\s+1 x, median\s+-0\.50\s+gemm -> norm")

    def test_api(self):
        rc, out = run(self.a, "--step", "encoder_forward", "--api", "--against", self.b)
        self.assertEqual(rc, 0, out)
        # per step: 2 launches x 1.5 us + one 4 us copy = 3 calls, 7 us; the other has 3 launches
        self.assertIn("over 5 steps, per step: calls 3.0, host_us 7.0", out)
        self.assertIn("over 5 steps, per step: calls 4.0, host_us 8.5", out)
        self.assertIn("+1.5 us      +1.0 calls  cudaLaunchKernel", out)

    def test_api_needs_api_records(self):
        path = write_trace([r for r in step(0, 2) if r[0] != "api"])
        try:
            rc, out = run(path, "--step", "encoder_forward", "--api")
        finally:
            os.unlink(path)
        self.assertNotEqual(rc, 0)
        self.assertIn("CGRT_TRACE_API=1", out)

    def test_api_needs_step(self):
        rc, out = run(self.a, "--api")
        self.assertNotEqual(rc, 0)
        self.assertIn("--api needs --step", out)


class Misuse(unittest.TestCase):
    """Files and numbers the summary cannot use are refused with path:line or the option's
    range, never read forever (/dev/zero), waited on (a FIFO) or shown as a traceback."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    def refused(self, *args, said):
        p = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True,
                           timeout=20)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertIn(said, p.stderr)
        self.assertNotIn("Traceback", p.stderr)

    def trace(self, text):
        path = os.path.join(self.dir, "t.csv")
        with open(path, "w", newline="") as f:
            f.write(",".join(HEADER) + "\n" + text)
        return path

    def test_not_a_file(self):
        self.refused("/dev/zero", said="/dev/zero: not a regular file")
        fifo = os.path.join(self.dir, "fifo")
        os.mkfifo(fifo)
        self.refused(fifo, said="fifo: not a regular file")
        self.refused(self.dir, said="not a regular file")

    def test_bad_records(self):
        self.refused(self.trace("kernel,a\0b,1,2,0,0,0,0\n"), said="t.csv:2: a NUL byte")
        self.refused(self.trace("kernel,a,1,2,0,0,0,0\nkernel,b,1x,2,0,0,0,0\n"),
                     said="t.csv:3: start_ns = '1x': expected a whole number")
        self.refused(self.trace("kernel,a,1\n"), said="t.csv:2: the record does not have")
        self.refused(self.trace("kernel," + "x" * 200000 + ",1,2,0,0,0,0\n"),
                     said="t.csv:2: field larger than field limit")

    def test_numbers(self):
        path = self.trace("kernel,a,1,2,0,0,0,0\n")
        for v in ("-1", "1e3", "10abc", "99999999999999999999999"):
            self.refused(path, "--top", v, said=f"--top: '{v}': expected a whole number from 0")
        for v in ("-1", "1e3", " 2"):
            self.refused(path, "--skip", v, said=f"--skip: '{v}': expected a whole number from 0")


if __name__ == "__main__":
    unittest.main()
