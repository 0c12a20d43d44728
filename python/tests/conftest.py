"""Shared helpers of the package's tests: host-driver runtimes whose modules do their "device
work" as host functions on the stream, over ctypes arrays (a replay runs them again)."""

import ctypes
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import cgrt  # noqa: E402


def host_ini(impl="local", extra="", warmup=2):
    return (
        f"[cuda_graph]\nimpl = {impl}\nwarmup_steps = {warmup}\n{extra}\n"
        "[runtime]\ndriver = host\nlog = off\n"
    )


class HostModel:
    """N modules; module i computes out[i] = in[i] * 2 + padded_tokens (forward) and
    in[i] = out[i] * 0.5 (backward), as host functions enqueued on the stream."""

    def __init__(self, rt, n=3, kinds=("attn", "mlp", "other"), backward=True):
        self.rt = rt
        self.n = n
        self.buf = (ctypes.c_double * (2 * n))()
        for i in range(n):
            self.buf[i] = i + 1.0
        self.addr = ctypes.addressof(self.buf)
        self.runs = []  # (module, mode) of every callback run
        self.prepares = []
        self.bodies = 0
        self.fail = {}  # module index -> exception to raise (optionally only in a mode)
        self.mods = []
        for i in range(n):
            fwd = self._fwd(i)
            bwd = self._bwd(i) if backward else None
            self.mods.append(rt.register(f"layer{i}", kinds[i % len(kinds)], fwd, bwd, layer=i))
        d = ctypes.sizeof(ctypes.c_double)
        self.args = [
            cgrt.Args(
                buffers=[
                    cgrt.Buffer(self.addr + i * d, d, cgrt.Access.IN, "in"),
                    cgrt.Buffer(self.addr + (n + i) * d, d, cgrt.Access.INOUT, "out"),
                ]
            )
            for i in range(n)
        ]

    def _check_fail(self, i, ctx):
        f = self.fail.get(i)
        if f is not None:
            exc, mode = f
            if mode is None or ctx.mode == mode:
                raise exc

    def _fwd(self, i):
        def fwd(ctx, args):
            self.runs.append((i, ctx.mode))
            self._check_fail(i, ctx)
            src, dst, add = args.buffer_ptr(0), args.buffer_ptr(1), float(ctx.padded_tokens)

            def work():
                x = ctypes.c_double.from_address(src).value
                ctypes.c_double.from_address(dst).value = x * 2 + add

            ctx.enqueue_host(work)

        return fwd

    def _bwd(self, i):
        def bwd(ctx, args):
            self.runs.append((i, ctx.mode))
            src, dst = args.buffer_ptr(1), args.buffer_ptr(0)

            def work():
                ctypes.c_double.from_address(dst).value = (
                    ctypes.c_double.from_address(src).value * 0.5
                )

            ctx.enqueue_host(work)

        return bwd

    def out(self, i):
        return self.buf[self.n + i]

    def inp(self, i):
        return self.buf[i]

    def prepare(self, ctx):
        self.prepares.append((ctx.tokens, ctx.padded_tokens))

    def body(self, ctx):
        self.bodies += 1
        for i, m in enumerate(self.mods):
            self.rt.forward(m, ctx, self.args[i])
        if ctx.phase == cgrt.Phase.TRAIN:
            for i in reversed(range(self.n)):
                self.rt.backward(self.mods[i], ctx, self.args[i])

    def step(self, phase="infer", tokens=1):
        for i in range(self.n):
            self.buf[self.n + i] = 0.0
        rep = self.rt.step(phase, tokens, self.prepare, self.body)
        self.rt.synchronize()
        return rep


@pytest.fixture
def make_model():
    opened = []

    def make(ini, **kw):
        rt = cgrt.Runtime(ini)
        opened.append(rt)
        return HostModel(rt, **kw)

    yield make
    for rt in opened:
        rt.close()
