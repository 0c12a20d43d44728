#!/usr/bin/env python3
"""One decoder, run in one process every way a PyTorch user would graph it, against cgrt.

The model is the decode workload's shape (kernels/decode.h): 12 layers, d_model 1024, 16 heads of
64, SwiGLU ffn 2816, bf16, RMSNorm, RoPE, T new tokens attending to a static 512-position KV cache
and causally to each other. Variants, each at T = 1, 8, 64:

  eager            plain PyTorch, no graphs
  torch_graph      torch.cuda.graph: the whole step captured once per T
  torch_layers     one torch.cuda.CUDAGraph per layer per T, all sharing one pool (what
                   make_graphed_callables does for inference, without its autograd wrapper)
  torch_compile    torch.compile(mode="reduce-overhead") (inductor + CUDA graph trees), if it works
  cgrt_layer       cgrt.torch, backend local, inference_scope = layer (one graph per layer)
  cgrt_block       cgrt.torch, backend local, inference_scope = block (one graph per step)
  eager_fresh      eager PyTorch whose body computes its tensors afresh every step (the input
                   rows, the rotary tables handed to every layer), as a model's forward does
  cgrt_layer_fresh that body under cgrt_layer (rebind = auto stages the moving tensors)

cgrt runs with token buckets equal to the measured T values, so no variant pads. Each variant's
step stages the new tokens into its static input (one copy, as a serving loop would) and runs the
model. Time: steps run back to back on the variant's stream with a CUDA event between
consecutive steps; the median interval is reported (as `cgrt bench` does), with the mean wall
time per step. Outputs: every variant's last output at each T against eager on the same input
(bitwise for the graph variants; the compiled model's rounding differs, its max |diff| is shown).
Targets printed: cgrt_layer_fresh within 5% of cgrt_layer, and no cgrt row more than 5% slower
than eager on the same host code. cgrt rows also give captures, recordings and bytes copied per
steady step, keys on copies or sent eager, and fallbacks.

    PYTHONPATH=python CGRT_LIBRARY=build-gpu/lib/libcgrt.so \\
        python3 python/bench_torch.py --json out/torch.json
"""

import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- the model


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


try:
    from torch.nn.attention.bias import causal_lower_right as _causal_lower_right
except ImportError:  # torch < 2.3
    _causal_lower_right = None


def attention(q, k, v):
    """Each of the t new tokens (q: [heads, t, hd]) attends to keys 0 .. s - t + i of k, v
    ([heads, s, hd]): the whole cache, then the new tokens causally."""
    t, s = q.shape[-2], k.shape[-2]
    if _causal_lower_right is not None:
        bias = _causal_lower_right(t, s)
    else:
        i = torch.arange(t, device=q.device).unsqueeze(1)
        bias = torch.arange(s, device=q.device).unsqueeze(0) <= (s - t) + i
    return F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                          attn_mask=bias)[0]


class DecoderLayer(torch.nn.Module):
    """h += Wo . attn(RoPE(q, k) over [cache; new]); h += W_down . (silu(gate) * up)."""

    def __init__(self, d, heads, ffn, cache_len, max_tokens, gen):
        super().__init__()
        self.d, self.heads, self.hd, self.ffn, self.cache_len = d, heads, d // heads, ffn, cache_len

        def w(out, inp):
            return torch.nn.Parameter((torch.rand(out, inp, generator=gen) * 2 - 1) * (3 / inp) ** 0.5)

        self.attn_norm = RMSNorm(d)
        self.mlp_norm = RMSNorm(d)
        with torch.no_grad():
            self.attn_norm.weight.copy_(1 + (torch.rand(d, generator=gen) - 0.5) / 8)
            self.mlp_norm.weight.copy_(1 + (torch.rand(d, generator=gen) - 0.5) / 8)
        self.wqkv = w(3 * d, d)
        self.wo = w(d, d)
        self.w_gate_up = w(2 * ffn, d)
        self.w_down = w(d, ffn)
        self.register_buffer("k_cache", torch.randn(heads, cache_len, self.hd, generator=gen))
        self.register_buffer("v_cache", torch.randn(heads, cache_len, self.hd, generator=gen))
        half = self.hd // 2
        pos = torch.arange(cache_len, cache_len + max_tokens, dtype=torch.float64).unsqueeze(1)
        inv = 10000.0 ** (-torch.arange(half, dtype=torch.float64) * 2 / self.hd)
        ang = pos * inv
        self.register_buffer("cos", ang.cos().float())  # [max_tokens, hd/2], cast with the model
        self.register_buffer("sin", ang.sin().float())

    def rope(self, x, t, cos=None, sin=None):
        cos = (self.cos[:t] if cos is None else cos).unsqueeze(1)
        sin = (self.sin[:t] if sin is None else sin).unsqueeze(1)
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def forward(self, h, cos=None, sin=None):
        """cos, sin: the rotary tables of the t new tokens ([t, hd/2]); None: the layer's own."""
        t = h.shape[0]
        qkv = F.linear(self.attn_norm(h), self.wqkv).view(t, 3, self.heads, self.hd)
        q = self.rope(qkv[:, 0], t, cos, sin).transpose(0, 1)  # [heads, t, hd]
        k = self.rope(qkv[:, 1], t, cos, sin).transpose(0, 1)
        v = qkv[:, 2].transpose(0, 1)
        k = torch.cat((self.k_cache, k), dim=1)
        v = torch.cat((self.v_cache, v), dim=1)
        a = attention(q, k, v)  # [heads, t, hd]
        h = h + F.linear(a.transpose(0, 1).reshape(t, self.d), self.wo)
        gate, up = F.linear(self.mlp_norm(h), self.w_gate_up).split(self.ffn, dim=-1)
        return h + F.linear(F.silu(gate) * up, self.w_down)


class Decoder(torch.nn.Module):
    def __init__(self, layers=12, d=1024, heads=16, ffn=2816, cache_len=512, max_tokens=512, seed=1):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.layers = torch.nn.ModuleList(
            DecoderLayer(d, heads, ffn, cache_len, max_tokens, gen) for _ in range(layers)
        )
        self.d = d

    def forward(self, h):
        for layer in self.layers:
            h = layer(h)
        return h


def build(layers=12, d=1024, heads=16, ffn=2816, cache_len=512, max_tokens=512, seed=1,
          dtype=torch.bfloat16, device="cuda"):
    """The decoder with deterministic weights (a function of seed), in `dtype`, for inference."""
    m = Decoder(layers, d, heads, ffn, cache_len, max_tokens, seed).to(device=device, dtype=dtype)
    m.requires_grad_(False)
    return m.eval()


# ---------------------------------------------------------------- timing


def time_steps(step, stream, steps, warmup):
    """Median interval between consecutive back-to-back steps on `stream` (CUDA events), in us,
    and the mean wall time per step."""
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            step()
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        t0 = time.perf_counter()
        for i in range(steps):
            ev[i].record()
            step()
        ev[steps].record()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / steps * 1e6
    dt = [ev[i].elapsed_time(ev[i + 1]) * 1e3 for i in range(steps)]
    return statistics.median(dt), wall


# ---------------------------------------------------------------- the variants


class Variant:
    """prepare(T) sets the variant up for T tokens (captures, compiles); step() runs one step on
    the staged input; output() is the step's output (a tensor of T rows)."""

    name = "?"

    def __init__(self, model, x, stream):
        self.model, self.x, self.stream = model, x, stream


class Eager(Variant):
    name = "eager"

    def prepare(self, t):
        self.t = t
        self.src = self.x[:t]

    def step(self):
        self.out = self.model(self.src)

    def output(self):
        return self.out


def fresh_tensors(model, x, t):
    """What a PyTorch body computes afresh every step: the input rows (an embedding's output) and
    the rotary tables of the new tokens, new tensors with the values the layers' own tables hold
    (so the outputs stay bitwise those of the model)."""
    layer = model.layers[0]
    return x[:t].clone(), layer.cos[:t].clone(), layer.sin[:t].clone()


class EagerFresh(Variant):
    """Eager PyTorch with the fresh host's body: the tensors of fresh_tensors() every step."""

    name = "eager_fresh"

    def prepare(self, t):
        self.t = t

    def step(self):
        h, cos, sin = fresh_tensors(self.model, self.x, self.t)
        for layer in self.model.layers:
            h = layer(h, cos, sin)
        self.out = h

    def output(self):
        return self.out


def stage_and_warm(v, t):
    """The static input of T tokens, and three eager runs on a side stream before a capture (as
    torch.cuda.graph's documentation asks)."""
    v.t = t
    v.static_in = torch.zeros(t, v.model.d, device="cuda", dtype=v.x.dtype)
    v.static_in.copy_(v.x[:t])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            v.model(v.static_in)
    torch.cuda.current_stream().wait_stream(side)


class TorchGraph(Variant):
    name = "torch_graph"

    def prepare(self, t):
        stage_and_warm(self, t)
        self.g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.g):
            self.static_out = self.model(self.static_in)

    def step(self):
        self.static_in.copy_(self.x[: self.t])
        self.g.replay()

    def output(self):
        return self.static_out


class TorchLayers(Variant):
    name = "torch_layers"

    def prepare(self, t):
        stage_and_warm(self, t)
        pool = torch.cuda.graph_pool_handle()
        self.graphs = []
        h = self.static_in
        for layer in self.model.layers:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                h = layer(h)
            self.graphs.append(g)
        self.static_out = h

    def step(self):
        self.static_in.copy_(self.x[: self.t])
        for g in self.graphs:
            g.replay()

    def output(self):
        return self.static_out


class TorchCompile(Variant):
    name = "torch_compile"

    def __init__(self, model, x, stream):
        super().__init__(model, x, stream)
        self.compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)

    def prepare(self, t):
        self.t = t
        self.static_in = torch.zeros(t, self.model.d, device="cuda", dtype=self.x.dtype)
        for _ in range(3):  # compile, record, replay
            self.static_in.copy_(self.x[:t])
            self.compiled(self.static_in)

    def step(self):
        self.static_in.copy_(self.x[: self.t])
        self.out = self.compiled(self.static_in)

    def output(self):
        return self.out.clone()  # the next call overwrites a cudagraph tree's output


class Cgrt(Variant):
    """The model under cgrt.torch: each decoder layer one cgrt module."""

    def __init__(self, model, x, stream, scope, tokens, lib_log="warn", fresh=False):
        import cgrt.torch as ct

        super().__init__(model, x, stream)
        self.scope = scope
        self.fresh = fresh
        self.keep = None
        self.name = f"cgrt_{scope}" + ("_fresh" if fresh else "")
        ini = (
            "[cuda_graph]\nimpl = local\nwarmup_steps = 2\n"
            f"inference_scope = {scope}\n"
            "[inference]\nbuckets = list\n"
            f"list = {' '.join(str(t) for t in sorted(set(tokens)))}\n"
            f"max_tokens = {max(tokens)}\n"
            f"[runtime]\ndriver = cuda\ndevice = {torch.cuda.current_device()}\nlog = {lib_log}\n"
        )
        self.rt = ct.Runtime(ini)
        self.stream = self.rt.torch_stream
        self.mods = [
            self.rt.register_module(f"layer{i}", layer, kind="other", layer=i)
            for i, layer in enumerate(model.layers)
        ]
        self.static_in = torch.zeros(max(tokens), model.d, device="cuda", dtype=x.dtype)

    def _prepare(self, ctx):
        n, p = ctx.tokens, ctx.padded_tokens
        self.static_in[:n].copy_(self.x[:n])
        if p > n:
            self.static_in[n:p].zero_()

    def _body(self, ctx):
        if self.fresh:
            # The fresh host: the body computes its tensors anew; the last step's stay referenced
            # (as a caller's variables would) until these replace them, so they move every step.
            h, cos, sin = fresh_tensors(self.model, self.static_in, ctx.padded_tokens)
            self.keep = (h, cos, sin)
            for m in self.mods:
                h = m(ctx, h, cos, sin)
            return h
        h = self.static_in[: ctx.padded_tokens]
        for m in self.mods:
            h = m(ctx, h)
        return h

    def prepare(self, t):
        self.t = t
        with torch.cuda.stream(self.stream):
            for _ in range(4):  # warm-up steps, the capture, a replay
                self.step()
        torch.cuda.synchronize()

    def step(self):
        self.out = self.rt.run(
            "infer", self.t, self._prepare, self._body, inputs=[self.static_in]
        )

    def output(self):
        return self.out[: self.t]

    def close(self):
        self.rt.close()


# ---------------------------------------------------------------- main


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="1,8,64", help="token counts T (comma-separated)")
    ap.add_argument("--steps", type=int, default=200, help="timed steps per variant and T")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps before timing")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--cache-len", type=int, default=512)
    ap.add_argument(
        "--variants",
        default="eager,torch_graph,torch_layers,torch_compile,cgrt_layer,cgrt_block,"
        "eager_fresh,cgrt_layer_fresh",
        help="which variants to run (comma-separated)",
    )
    ap.add_argument("--no-compile", action="store_true", help="skip torch_compile")
    ap.add_argument("--json", help="write the results to this file too")
    a = ap.parse_args(argv)

    if not torch.cuda.is_available():
        print("bench_torch: no CUDA device visible to torch; nothing to measure", file=sys.stderr)
        return 2
    tokens = [int(t) for t in a.tokens.split(",") if t]
    names = [v for v in a.variants.split(",") if v]
    if a.no_compile and "torch_compile" in names:
        names.remove("torch_compile")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    model = build(a.layers, a.d_model, a.heads, a.ffn, a.cache_len, max(tokens))
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(max(tokens), a.d_model, device="cuda", generator=gen).to(torch.bfloat16)

    import cgrt

    info = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cgrt": cgrt.version(),
        "libcgrt": cgrt.library_path(),
        "model": {
            "layers": a.layers, "d_model": a.d_model, "heads": a.heads, "ffn": a.ffn,
            "cache_len": a.cache_len, "dtype": "bfloat16",
        },
        "steps": a.steps,
        "warmup": a.warmup,
    }
    print(
        f"bench_torch: {info['device']}, torch {info['torch']} (CUDA {info['cuda']}), "
        f"cgrt {info['cgrt']} ({info['libcgrt']})"
    )
    print(
        f"decoder: {a.layers} layers, d {a.d_model}, {a.heads} heads, ffn {a.ffn}, KV cache "
        f"{a.cache_len}, bf16; {a.steps} timed steps after {a.warmup}"
    )

    # The eager reference of every T.
    ref = {}
    with torch.no_grad():
        for t in tokens:
            ref[t] = model(x[:t]).clone()
        torch.cuda.synchronize()

    results = []
    default_stream = torch.cuda.current_stream()
    for name in names:
        v = None
        try:
            with torch.no_grad():
                if name == "eager":
                    v = Eager(model, x, default_stream)
                elif name == "torch_graph":
                    v = TorchGraph(model, x, default_stream)
                elif name == "torch_layers":
                    v = TorchLayers(model, x, default_stream)
                elif name == "torch_compile":
                    v = TorchCompile(model, x, default_stream)
                elif name == "eager_fresh":
                    v = EagerFresh(model, x, default_stream)
                elif name in ("cgrt_layer", "cgrt_block", "cgrt_layer_fresh"):
                    fresh = name.endswith("_fresh")
                    v = Cgrt(model, x, default_stream, name.split("_")[1], tokens, fresh=fresh)
                else:
                    raise ValueError(f"unknown variant {name}")
                for t in tokens:
                    t0 = time.perf_counter()
                    v.prepare(t)
                    setup_s = time.perf_counter() - t0
                    med, wall = time_steps(v.step, v.stream, a.steps, a.warmup)
                    out = v.output()
                    torch.cuda.synchronize()
                    equal = bool(torch.equal(out, ref[t]))
                    diff = float((out.float() - ref[t].float()).abs().max())
                    r = {
                        "variant": name, "tokens": t, "median_us": round(med, 2),
                        "wall_us": round(wall, 2), "setup_s": round(setup_s, 3),
                        "equal_to_eager": equal, "max_abs_diff": diff,
                    }
                    if name.startswith("cgrt"):
                        s0 = v.rt.stats()
                        with torch.cuda.stream(v.stream):
                            for _ in range(10):
                                v.step()
                        torch.cuda.synchronize()
                        s = v.rt.stats()
                        r["graphs"] = s.live_graphs
                        r["captures"] = s.captures
                        r["fallbacks"] = s.fallbacks
                        r["copy_keys"] = s.rebind_copy_keys
                        r["eager_keys"] = s.rebind_eager_keys
                        # once steady: recordings and bytes copied per step (10 more steps)
                        r["recordings_per_step"] = (s.captures - s0.captures) / 10
                        r["copy_bytes_per_step"] = (s.copy_bytes - s0.copy_bytes) / 10
                    results.append(r)
                    counters = ""
                    if name.startswith("cgrt"):
                        counters = (
                            f"  captures {r['captures']}, rec/step {r['recordings_per_step']:.2f}, "
                            f"copy {r['copy_bytes_per_step']:.0f} B/step, copy keys "
                            f"{r['copy_keys']}, eager keys {r['eager_keys']}, fallbacks "
                            f"{r['fallbacks']}"
                        )
                    print(
                        f"  {name:16s} T={t:<4d} {med:9.1f} us  (wall {wall:8.1f} us)  "
                        f"{'equal' if equal else f'DIFFER max|d|={diff:.3g}'}"
                        f"  [setup {setup_s:.2f} s]{counters}",
                        flush=True,
                    )
        except Exception as e:  # noqa: BLE001 - a variant that cannot run is reported, not fatal
            msg = f"{type(e).__name__}: {e}"
            print(f"  {name:14s} unavailable: {msg}", flush=True)
            if os.environ.get("BENCH_TORCH_TRACE"):
                traceback.print_exc()
            results.append({"variant": name, "unavailable": msg})
        finally:
            if v is not None and hasattr(v, "close"):
                v.close()
            del v
            torch.cuda.synchronize()

    # The targets: cgrt block vs the whole-step torch graph, cgrt layer vs per-layer torch graphs.
    def med(name, t):
        for r in results:
            if r.get("variant") == name and r.get("tokens") == t:
                return r["median_us"]
        return None

    ratios = {}
    print("ratios (median step time; < 1 is faster):")
    for a_name, b_name, target in (
        ("cgrt_block", "torch_graph", 1.03),
        ("cgrt_layer", "torch_layers", 1.05),
        ("cgrt_layer_fresh", "cgrt_layer", 1.05),
        ("cgrt_block", "eager", 1.05),
        ("cgrt_layer", "eager", 1.05),
        ("cgrt_layer_fresh", "eager_fresh", 1.05),
    ):
        key = f"{a_name}/{b_name}"
        for t in tokens:
            x_us, y_us = med(a_name, t), med(b_name, t)
            if x_us is None or y_us is None or y_us == 0:
                continue
            ratio = x_us / y_us
            ratios.setdefault(key, {})[str(t)] = round(ratio, 4)
            mark = ""
            if target is not None:
                mark = f"  (target <= {target:.2f}: {'met' if ratio <= target else 'NOT met'})"
            print(f"  {key:30s} T={t:<4d} {ratio:6.3f}{mark}")

    all_equal = all(
        r.get("equal_to_eager", True)
        for r in results
        if r.get("variant") not in ("torch_compile",) and "unavailable" not in r
    )
    print("outputs: " + ("every graph variant bitwise equal to eager" if all_equal else "DIFFER"))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"info": info, "results": results, "ratios": ratios}, f, indent=2)
        print(f"wrote {a.json}")
    return 0 if all_equal else 1


if __name__ == "__main__":
    sys.exit(main())
