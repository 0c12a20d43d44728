"""cgrt.torch on a GPU, bitwise against eager PyTorch: a small decoder (bench_torch's model) under
the local backend's layer and block scopes with token buckets (prepare pads; the reference is
eager PyTorch on the same padded input), training forward/backward under local (per-module
graphs), transformer_engine (the modules of a kind) and full_iteration (one graph per step) with
parameter gradients and SGD updates, inputs that move (rebind), a module that raises, and
transformers' Llama and Mixtral (Mixtral's MoE also run the way that breaks every capture with a
synchronize, which cgrt serves eagerly). Between steps the tests fill freshly allocated memory
with NaN, so a graph that used memory outside its private pool would show it.

Runs under pytest, or alone: python3 python/tests/gpu/test_torch.py (prints "N passed, N failed").
"""

import copy
import gc
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

import torch  # noqa: E402

import cgrt  # noqa: E402
from cgrt import Mode, Status  # noqa: E402

try:
    import pytest

    skip = pytest.skip
except ImportError:  # run alone
    pytest = None

    class _Skip(Exception):
        pass

    def skip(reason):
        raise _Skip(reason)


def _require_gpu():
    if not torch.cuda.is_available():
        skip("torch sees no CUDA device")


def _ini(impl="local", extra=""):
    return (
        f"[cuda_graph]\nimpl = {impl}\nwarmup_steps = 2\n{extra}\n"
        f"[runtime]\ndriver = cuda\ndevice = {torch.cuda.current_device()}\nlog = warn\n"
    )


def _scribble(n=8):
    """Takes memory from PyTorch's allocator and fills it with NaN (held until the next call):
    if a graph's memory had been handed out, this would overwrite it."""
    _scribble.held = [
        torch.full((256 << i,), float("nan"), device="cuda") for i in range(n)
    ] + [torch.full((17, 256), float("nan"), device="cuda", dtype=torch.bfloat16)]


def _chain(rt, model, x):
    """model's modules registered as layer0, layer1... (kind mlp), and the prepare, body and
    static input of a step that runs them in turn over x (prepare copies it into the static)."""
    mods = [rt.register_module(f"layer{i}", m, kind="mlp", layer=i) for i, m in enumerate(model)]
    static = torch.zeros_like(x)

    def prepare(ctx):
        static.copy_(x)

    def body(ctx):
        h = static
        for m in mods:
            h = m(ctx, h)
        return h

    return prepare, body, static


def _decoder():
    import bench_torch

    return bench_torch.build(layers=2, d=256, heads=4, ffn=512, cache_len=64, max_tokens=16)


# ---------------------------------------------------------------- inference


def _inference(scope, switch_streams):
    import cgrt.torch as ct

    _require_gpu()
    torch.backends.cuda.matmul.allow_tf32 = False
    model = _decoder()
    gen = torch.Generator(device="cuda").manual_seed(3)
    xs = [torch.randn(16, 256, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(5)]
    ini = _ini(
        "local",
        f"inference_scope = {scope}\n[inference]\nbuckets = list\nlist = 1 4 16\nmax_tokens = 16",
    )
    plan = [3, 3, 3, 3, 1, 1, 1, 1, 16, 16, 16, 16, 3, 1, 16, 2, 4, 9]
    bucket = {1: 1, 2: 4, 3: 4, 4: 4, 9: 16, 16: 16}
    modes = []
    with ct.Runtime(ini) as rt, torch.no_grad():
        outer = torch.cuda.current_stream()
        ctxm = torch.cuda.stream(rt.torch_stream) if not switch_streams else torch.cuda.stream(outer)
        with ctxm:
            mods = [
                rt.register_module(f"layer{i}", layer, kind="attn" if i % 2 else "mlp", layer=i)
                for i, layer in enumerate(model.layers)
            ]
            static = torch.zeros(16, 256, device="cuda", dtype=torch.bfloat16)
            for step, t in enumerate(plan):
                x = xs[step % len(xs)]

                def prepare(ctx):
                    static[: ctx.tokens].copy_(x[: ctx.tokens])
                    static[ctx.tokens : ctx.padded_tokens].zero_()

                def body(ctx):
                    h = static[: ctx.padded_tokens]
                    for m in mods:
                        h = m(ctx, h)
                    return h

                out = rt.run("infer", t, prepare, body, inputs=[static])
                rep = rt.last_report
                p = bucket[t]
                assert rep.padded_tokens == p and out.shape == (p, 256)
                padded = torch.zeros(p, 256, device="cuda", dtype=torch.bfloat16)
                padded[:t] = x[:t]
                ref = model(padded)
                assert torch.equal(out[:t], ref[:t]), f"step {step} (T={t}, {rep.mode.name})"
                modes.append(rep.mode)
                _scribble()
        torch.cuda.synchronize()
        s = rt.stats()
        assert rt.pool is not None
    assert Mode.CAPTURE in modes and modes.count(Mode.REPLAY) >= 8
    assert s.fallbacks == 0
    assert s.captures == (3 * len(model.layers) if scope == "layer" else 3)


def test_inference_layer_scope_bitwise():
    _inference("layer", switch_streams=False)


def test_inference_block_scope_bitwise():
    _inference("block", switch_streams=False)


def test_inference_from_the_default_stream():
    _inference("block", switch_streams=True)


def _ordered_with(stream_kind):
    """Issue 37: each step's input is made on the caller's stream behind a ~1 ms spin
    (torch.cuda._sleep), the step runs, and its output is compared on that stream right after,
    with no synchronize: unordered, the step would read the input before it is written."""
    import cgrt.torch as ct

    _require_gpu()
    torch.backends.cuda.matmul.allow_tf32 = False
    model = _decoder()
    base = torch.randn(16, 256, device="cuda").to(torch.bfloat16)
    caller = torch.cuda.Stream() if stream_kind == "side" else torch.cuda.current_stream()
    ini = _ini("local", "[inference]\nbuckets = list\nlist = 16\nmax_tokens = 16")
    with ct.Runtime(ini) as rt, torch.no_grad(), torch.cuda.stream(caller):
        mods = [
            rt.register_module(f"layer{i}", layer, kind="attn" if i % 2 else "mlp", layer=i)
            for i, layer in enumerate(model.layers)
        ]
        static = torch.zeros(16, 256, device="cuda", dtype=torch.bfloat16)
        for step in range(40):
            torch.cuda._sleep(2_000_000)
            x = base * float(step % 7 + 1)  # on the caller's stream, after the spin

            def prepare(ctx):
                static.copy_(x)

            def body(ctx):
                h = static
                for m in mods:
                    h = m(ctx, h)
                return h

            out = rt.run("infer", 16, prepare, body, inputs=[static])
            ref = model(x)  # on the caller's stream, right after the step
            mode = rt.last_report.mode.name
            assert torch.equal(out, ref), f"step {step} ({stream_kind} stream, {mode})"
        assert rt.stats().fallbacks == 0


def test_ordered_with_the_default_stream():
    _ordered_with("default")


def test_ordered_with_a_side_stream():
    _ordered_with("side")


def test_moved_input_rebinds_or_is_refused():
    import cgrt.torch as ct

    _require_gpu()
    model = _decoder()
    x = torch.randn(4, 256, device="cuda").to(torch.bfloat16)
    for policy in ("update", "error"):
        ini = _ini("local", f"rebind = {policy}\n[inference]\nbuckets = list\nlist = 4\nmax_tokens = 4")
        with ct.Runtime(ini) as rt, torch.cuda.stream(rt.torch_stream), torch.no_grad():
            mods = [rt.register_module(f"l{i}", m, layer=i) for i, m in enumerate(model.layers)]
            holder = {"static": torch.zeros(4, 256, device="cuda", dtype=torch.bfloat16)}

            def prepare(ctx):
                holder["static"].copy_(x)

            def body(ctx):
                h = holder["static"]
                for m in mods:
                    h = m(ctx, h)
                return h

            for _ in range(4):
                rt.run("infer", 4, prepare, body, inputs=[holder["static"]])
            holder["static"] = torch.zeros(4, 256, device="cuda", dtype=torch.bfloat16) + 1
            if policy == "update":
                out = rt.run("infer", 4, prepare, body, inputs=[holder["static"]])
                assert rt.stats().rebinds >= 1
                assert torch.equal(out, model(x))
            else:
                try:
                    rt.run("infer", 4, prepare, body, inputs=[holder["static"]])
                    raise AssertionError("rebind = error replayed a moved input")
                except cgrt.Error as e:
                    assert e.code == Status.REBIND and "l0" in e.message


def test_shapes_new_every_call_are_followed_within_a_bound():
    """A host whose module inputs take a new shape on every call (unpadded lengths): no signature
    repeats, nothing is captured, every call is eager and exact, and what cgrt.torch follows per
    signature stays bounded (it grew by one a call before: a leak in a long run)."""
    import cgrt.torch as ct

    _require_gpu()
    torch.backends.cuda.matmul.allow_tf32 = False
    layer = torch.nn.Linear(64, 64, device="cuda")
    ini = _ini("local", "[inference]\nbuckets = list\nlist = 8\nmax_tokens = 8")
    calls = ct._Stager.KEYS + 200
    with ct.Runtime(ini) as rt, torch.cuda.stream(rt.torch_stream), torch.no_grad():
        tm = rt.register_module("lin", layer, kind="mlp")
        for n in range(1, calls + 1):
            x = torch.full((n % 997 + 1, 64), 0.5, device="cuda") + n  # a new shape each call
            out = rt.run("infer", 8, None, lambda ctx, x=x: tm(ctx, x))
            if n % 97 == 0:
                assert torch.equal(out, layer(x)), n
            assert len(tm._stage) <= ct._Stager.KEYS, (n, len(tm._stage))
        assert rt.stats().captures == 0


class _FreshLayer(torch.nn.Module):
    """A layer that reads per-step tensors the body computes afresh: a rotary-like table and a
    mask (keyword input), as HuggingFace decoder layers read their position embeddings."""

    def __init__(self, d, seed):
        super().__init__()
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.w = torch.nn.Parameter(torch.randn(d, d, device="cuda", generator=g) / d**0.5)

    def forward(self, h, table, mask=None):
        a = (h * table) @ self.w
        scores = (a @ h.t()) * mask
        return h + 0.01 * (scores @ a)


def _fresh_inputs(policy, grad=torch.no_grad):
    import cgrt.torch as ct

    _require_gpu()
    torch.backends.cuda.matmul.allow_tf32 = False
    d, n_layers, vocab = 64, 4, 100
    emb = torch.nn.Embedding(vocab, d, device="cuda")
    layers = [_FreshLayer(d, 10 + i) for i in range(n_layers)]
    freq = torch.linspace(0.1, 1.0, d, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(5)
    toks = [torch.randint(0, vocab, (8,), device="cuda", generator=gen) for _ in range(6)]
    lines = []
    extra = f"rebind = {policy}\n" if policy else ""
    ini = _ini("local", extra + "[inference]\nbuckets = list\nlist = 4 8\nmax_tokens = 8")
    keep = []  # the last steps' tensors stay referenced: each step's land elsewhere (they move)

    def per_step(tok, p, step):
        pos = torch.arange(p, device="cuda", dtype=torch.float32) + step
        table = torch.cos(pos[:, None] * freq)
        mask = torch.ones(p, p, device="cuda").tril()
        return emb(tok), table, mask

    with ct.Runtime(ini, log=lambda level, msg: lines.append(msg)) as rt, grad():
        with torch.cuda.stream(rt.torch_stream):
            assert rt.config("cuda_graph", "rebind") == (policy or "auto")
            mods = [rt.register_module(f"layer{i}", m, layer=i) for i, m in enumerate(layers)]
            static_tok = torch.zeros(8, dtype=torch.long, device="cuda")
            plan = [8] * 6 + [3] * 6 + [8, 3, 7, 2, 8, 4]
            copied = []
            for step, t in enumerate(plan):
                tok = toks[step % len(toks)]

                def prepare(ctx):
                    static_tok[: ctx.tokens].copy_(tok[: ctx.tokens])
                    static_tok[ctx.tokens : ctx.padded_tokens].zero_()

                def body(ctx):
                    p = ctx.padded_tokens
                    h, table, mask = per_step(static_tok[:p], p, step)
                    keep.append((h, table, mask))
                    del keep[:-2]
                    for m in mods:
                        h = m(ctx, h, table, mask=mask)
                    return h

                before = rt.stats().copy_bytes
                out = rt.run("infer", t, prepare, body, inputs=[static_tok])
                copied.append(rt.stats().copy_bytes - before)
                p = rt.last_report.padded_tokens
                ref_tok = torch.zeros(p, dtype=torch.long, device="cuda")
                ref_tok[:t] = tok[:t]
                h, table, mask = per_step(ref_tok, p, step)
                for m in layers:
                    h = m(h, table, mask=mask)
                mode = rt.last_report.mode.name
                assert torch.equal(out[:t], h[:t]), f"step {step} (T={t}, {mode})"
                _scribble()
        torch.cuda.synchronize()
        s = rt.stats()
    assert s.fallbacks == 0 and s.rebind_eager_keys == 0, s
    assert s.captures == n_layers * 2, s  # one graph per module and bucket, no re-recording
    assert rt.last_report.mode == Mode.REPLAY
    # a replayed step copies each fresh tensor once: the embedding (layer 0) and the table and
    # mask (shared by every layer), not once per layer; unless the tensors keep no version
    # counter (inference_mode), which would tell the stager a tensor was not written since
    p = 4
    shared = 1 if grad is torch.no_grad else n_layers
    assert copied[-1] == 4 * (p * d + shared * (p * d + p * p)), copied
    staged = [m for m in lines if "cgrt.torch: module" in m and "static copy" in m]
    if policy == "copy":
        assert not staged
    else:
        assert len(staged) == n_layers, lines  # one line per module (its first bucket)
        assert "input 1" in staged[-1] and "keep the tensor in place" in staged[-1]
        assert s.rebind_copy_keys >= n_layers


def test_fresh_inputs_are_staged_bitwise():
    _fresh_inputs(None)


def test_fresh_inputs_under_rebind_copy_bitwise():
    _fresh_inputs("copy")


def test_fresh_inputs_under_inference_mode_bitwise():
    """The same under torch.inference_mode(), whose tensors keep no version counter (the stager
    read it, and raised, before)."""
    _fresh_inputs(None, torch.inference_mode)


def test_module_that_raises_is_named():
    import cgrt.torch as ct

    _require_gpu()

    class Bad(torch.nn.Module):
        def forward(self, x):
            raise ValueError("bad shapes")

    with ct.Runtime(_ini("none")) as rt, torch.cuda.stream(rt.torch_stream):
        m = rt.register_module("bad0", Bad())
        x = torch.zeros(2, device="cuda")
        try:
            rt.run("infer", 1, body=lambda ctx: m(ctx, x))
            raise AssertionError("no error")
        except cgrt.Error as e:
            assert e.code == Status.CALLBACK and "module 'bad0' forward" in e.message
            assert isinstance(e.__cause__, ValueError)
        assert rt.run("infer", 1, body=lambda ctx: x + 1).sum().item() == 2


# ---------------------------------------------------------------- training


class _Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin1 = torch.nn.Linear(d, 2 * d)
        self.lin2 = torch.nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.lin2(torch.nn.functional.gelu(self.lin1(x)))


def _training(impl):
    import cgrt.torch as ct

    _require_gpu()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    d, rows, nblocks = 128, 32, 3
    model = torch.nn.Sequential(*[_Block(d) for _ in range(nblocks)]).cuda()
    ref = copy.deepcopy(model)
    for p in ref.parameters():
        p.grad = torch.zeros_like(p)
    gen = torch.Generator(device="cuda").manual_seed(5)
    data = [
        (torch.randn(rows, d, device="cuda", generator=gen), torch.randn(rows, d, device="cuda", generator=gen))
        for _ in range(4)
    ]
    scale = 2.0 / (rows * d)
    extra = {"full_iteration": "[host]\nnan_check = off", "transformer_engine": "modules = mlp"}
    extra = extra.get(impl, "")
    modes = []
    with ct.Runtime(_ini(impl, extra)) as rt, torch.cuda.stream(rt.torch_stream):
        mods = [
            rt.register_module(f"block{i}", blk, kind="mlp", layer=i, backward=True)
            for i, blk in enumerate(model)
        ]
        sx = torch.zeros(rows, d, device="cuda")
        st = torch.zeros(rows, d, device="cuda")
        gy = torch.zeros(rows, d, device="cuda")  # static, so the last backward's input stays put
        for step in range(7):
            x, t = data[step % len(data)]

            def prepare(ctx):
                sx.copy_(x)
                st.copy_(t)

            def body(ctx):
                h = sx
                for m in mods:
                    h = m(ctx, h)
                with torch.no_grad():  # d(loss)/dh of loss = mean((h - t)^2), in place
                    gy.copy_((h - st) * scale)
                g = gy
                for m in reversed(mods):
                    g = m.backward(ctx, g)
                return h

            for p in model.parameters():
                p.grad.zero_()
            y = rt.run("train", 0, prepare, body, inputs=[sx, st])
            modes.append(rt.last_report.mode)

            for p in ref.parameters():
                p.grad.zero_()
            y_ref = ref(x)
            torch.autograd.backward(y_ref, (y_ref.detach() - t) * scale)
            assert torch.equal(y, y_ref), f"step {step}: output"
            for (name, p), q in zip(model.named_parameters(), ref.parameters()):
                assert torch.equal(p.grad, q.grad), f"step {step}: grad of {name}"
            with torch.no_grad():  # SGD in place: the graphs must see the new weights
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.05)
                for q in ref.parameters():
                    q.add_(q.grad, alpha=-0.05)
            _scribble()
        torch.cuda.synchronize()
        s = rt.stats()
    assert modes[-1] == Mode.REPLAY and Mode.CAPTURE in modes
    assert s.fallbacks == 0
    assert s.captures == (1 if impl == "full_iteration" else 2 * nblocks)


def test_training_local_per_module_graphs_bitwise():
    _training("local")


def test_training_full_iteration_bitwise():
    _training("full_iteration")


def test_training_transformer_engine_bitwise():
    # its capture step graphs every module of a kind in `modules`, forward and backward
    _training("transformer_engine")


# ---------------------------------------------------------------- diagnose


def test_diagnose_reports_the_modules_cudamalloc_not_the_pools():
    """[runtime] diagnose = on: the cudaMalloc calls PyTorch's caching allocator makes while cgrt
    captures (into the private pool cgrt.torch routes them to, libc10_cuda.so declared as the pool
    allocator) are not findings, so a clean model has none; a cudaMalloc the module itself makes
    while captured (libcudart through ctypes, allowed by capture_mode = relaxed) is one."""
    import ctypes

    import cgrt.torch as ct

    _require_gpu()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    d, rows = 64, 8
    # the libcudart this process already loaded (torch's and cgrt's), else the loader's
    maps = open("/proc/self/maps").read().split()
    loaded = [w for w in maps if os.path.basename(w).startswith("libcudart.so")]
    cudart = ctypes.CDLL(loaded[0] if loaded else "libcudart.so")
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cudart.cudaFree.argtypes = [ctypes.c_void_p]

    class Leaky(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(d, d)
            self.held = []

        def forward(self, x):
            p = ctypes.c_void_p()
            assert cudart.cudaMalloc(ctypes.byref(p), 256) == 0
            self.held.append(p)
            return self.lin(x)

    x = torch.randn(rows, d, device="cuda")
    buckets = f"[inference]\nbuckets = list\nlist = {rows}\nmax_tokens = {rows}"
    for leaky in (False, True):
        model = (
            torch.nn.Sequential(Leaky(), torch.nn.Linear(d, d))
            if leaky
            else torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d))
        ).cuda()
        mode = "capture_mode = relaxed" if leaky else ""
        ini = _ini("local", f"inference_scope = layer\n{mode}\n{buckets}") + "diagnose = on\n"
        ini = ini.replace("log = warn", "log = debug")
        lines = []
        modes = []
        with ct.Runtime(ini, log=lambda level, msg: lines.append(msg)) as rt, torch.no_grad():
            with torch.cuda.stream(rt.torch_stream):
                prepare, body, static = _chain(rt, model, x)
                for _ in range(5):
                    out = rt.run("infer", rows, prepare, body, inputs=[static])
                    modes.append(rt.last_report.mode)
                    assert torch.equal(out, model(x))
            torch.cuda.synchronize()
            found = rt.findings()
            s = rt.stats()
        assert Mode.CAPTURE in modes and Mode.REPLAY in modes and s.fallbacks == 0
        mallocs = [f for f in found if f.kind == "malloc"]
        if not leaky:
            assert found == () and s.findings == 0, [f.detail for f in found]
            # the pool's first segments were allocated while capturing, and counted, not reported
            # (with expandable segments the allocator maps memory instead: no cudaMalloc to see)
            if "expandable_segments:True" not in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
                pooled = [m for m in lines if "by the host's pool allocator" in m]
                assert pooled and all("libc10_cuda.so" in m for m in pooled), lines
        else:
            assert [f.call for f in mallocs] == ["cudaMalloc"], [f.detail for f in found]
            assert not mallocs[0].broke_capture and mallocs[0].what == "layer0 fwd"
            assert "libc10_cuda" not in mallocs[0].caller
            for p in model[0].held:
                cudart.cudaFree(p)


# ---------------------------------------------------------------- a model from a library


def _hf_llama(layers, steps):
    """bench_hf (imported here), transformers' Llama of `layers` small layers (d 128, 4 heads,
    vocab 1000, 32 positions, random weights) and `steps` decode steps of token ids for 2
    sequences; skipped without a GPU or transformers. TF32 off: eager and graphs alike."""
    _require_gpu()
    try:
        import transformers  # noqa: F401
    except ImportError:
        skip("transformers is not installed")
    import bench_hf

    torch.backends.cuda.matmul.allow_tf32 = False
    model = bench_hf.build(layers=layers, d=128, heads=4, ffn=256, vocab=1000, max_len=32)
    return bench_hf, model, bench_hf.token_ids(steps, 2, 1000)


def test_huggingface_llama_decode_layer_scope_bitwise():
    """transformers' Llama with its StaticCache, its forward computing embeddings, rotary tables,
    positions and the mask afresh every step, each decoder layer a cgrt module: every step's
    logits bitwise equal to the model run eagerly, one graph per layer, nothing sent eager."""
    bench_hf, model, ids = _hf_llama(2, 20)
    ref = bench_hf.eager_steps(model, ids, 32)
    v = bench_hf.CgrtDecode(model, 2, 32)
    try:
        outs = []
        with torch.cuda.stream(v.rt.torch_stream):
            for i, x in enumerate(ids):
                outs.append(v.step(x).clone())
                if i == 11:
                    steady = v.rt.stats().captures
        torch.cuda.synchronize()
        for i, (o, e) in enumerate(zip(outs, ref)):
            assert torch.equal(o, e), f"step {i}"
        s = v.rt.stats()
        assert v.rt.last_report.mode == Mode.REPLAY
        # a graph per layer, re-recorded at most while the adapter learns what moves; none after
        assert 2 <= s.captures <= 2 * 3 and s.captures == steady, s
        assert s.fallbacks == 0 and s.rebind_eager_keys == 0, s
        assert not v.rt.eager_modules, v.rt.eager_modules  # a StaticCache updates in place
    finally:
        v.close()


def test_huggingface_new_cache_per_request_bitwise():
    """A host that makes a new StaticCache for each request (the old one dropped) and decodes from
    position 0 again. A layer's graph holds the addresses of the cache tensors it reached through
    the cache object, not a declared input: before cgrt.torch followed the objects a call comes
    with, the replays went on using the first cache's tensors (freed memory; this test ended in a
    device-side assert at the third request). Now a
    call with another cache object gets graphs of its own (said once at info), the outputs kept
    for a cache no longer alive are dropped, and a cache reset in place replays its graphs."""
    layers, per = 2, 8
    bench_hf, model, ids = _hf_llama(layers, 3 * per)
    ref = []
    for r in range(3):  # eagerly: a new cache for each request of `per` steps
        ref += bench_hf.eager_steps(model, ids[r * per:(r + 1) * per], 32)
    lines = []
    v = bench_hf.CgrtDecode(model, 2, 32, log="info", sink=lambda lv, m: lines.append(m))
    try:
        outs, caps = [], []
        with torch.cuda.stream(v.rt.torch_stream):
            for i, x in enumerate(ids):
                if i and i % per == 0:
                    v.cache = bench_hf.make_cache(model, 2, 32)  # the old one is dropped
                    v.pos = 0
                outs.append(v.step(x).clone())
                caps.append(v.rt.stats().captures)
        torch.cuda.synchronize()
        for i, (o, e) in enumerate(zip(outs, ref)):
            assert torch.equal(o, e), f"request {i // per}, step {i % per}"
        assert v.rt.last_report.mode == Mode.REPLAY
        # each request's cache got graphs of its own, replayed within the request
        assert caps[per - 1] >= layers and caps[2 * per - 1] > caps[per - 1], caps
        assert caps[-1] > caps[2 * per - 1] and caps[-1] == caps[-3], caps
        said = [m for m in lines if "called with another StaticCache than at first" in m]
        assert len(said) == layers, lines  # once a layer
        before = v.rt.stats().captures
        gc.collect()
        v.reset()  # the same cache, reset in place: its graphs replay
        with torch.cuda.stream(v.rt.torch_stream):
            for i in range(per):
                o = v.step(ids[2 * per + i]).clone()
        torch.cuda.synchronize()
        assert torch.equal(o, ref[-1]) and v.rt.stats().captures == before
        tm = v.layers[0].tm
        assert {k[-1] for k in tm._static} == {3}, list(tm._static)  # the dead caches' dropped
    finally:
        v.close()


def test_huggingface_beam_reorder_bitwise():
    _beam_reorder(torch.no_grad)


def test_huggingface_beam_reorder_under_inference_mode_bitwise():
    """The same under torch.inference_mode(), whose tensors keep no version counter (the stager
    read it, and raised, before)."""
    _beam_reorder(torch.inference_mode)


def _beam_reorder(grad):
    """A beam search over transformers' StaticCache: between steps the host reorders the beams
    with cache.reorder_cache(beam_idx), which puts new tensors in every layer's place
    (`self.keys = self.keys.index_select(0, beam_idx)`). A layer's graph holds the old tensors'
    addresses, so a replay would read and write the old memory while the model's Python reads
    the new: before cgrt.torch watched the places its graphs read through Python state, every
    step after the first reorder differed from eager, nothing said. Now a replay's places are
    checked first: one reorder has the layers recorded again at the new addresses (said at info,
    then replayed), and a second has them run eagerly (warned, rt.eager_modules). Bitwise
    throughout. The cache's places are checked once a step for all layers (cgrt._state.Shared);
    no layer is said before the first reorder (nothing else the cache holds changes)."""
    layers, steps, once, every = 2, 16, 4, 11
    bench_hf, model, ids = _hf_llama(layers, steps)
    swaps = [torch.tensor(b, device="cuda") for b in ([1, 0], [0, 0], [1, 1])]

    def reorder(cache, pos):
        if pos == once or pos >= every:
            cache.reorder_cache(swaps[pos % len(swaps)])

    ref = []
    with grad():
        cache = bench_hf.make_cache(model, 2, 32)
        for pos, x in enumerate(ids):
            reorder(cache, pos)
            cp = torch.tensor([pos], device="cuda")
            ref.append(model(input_ids=x, past_key_values=cache, cache_position=cp,
                             use_cache=True).logits.clone())
    lines = []
    with grad():
        v = bench_hf.CgrtDecode(model, 2, 32, log="info", sink=lambda lv, m: lines.append(m))
    try:
        outs, caps, modes = [], [], []
        with torch.cuda.stream(v.rt.torch_stream), grad():
            for pos, x in enumerate(ids):
                reorder(v.cache, pos)
                outs.append(v.step(x).clone())
                caps.append(v.rt.stats().captures)
                modes.append(v.rt.last_report.mode)
        torch.cuda.synchronize()
        for i, (o, e) in enumerate(zip(outs, ref)):
            assert torch.equal(o, e), f"step {i}"
        # recorded at the new addresses after the first reorder, and replayed until the next
        # (before it, rebind = auto may record a layer again as it stages the moving inputs)
        assert caps[every - 1] == caps[once - 1] + layers, caps
        assert modes[every - 1] == Mode.REPLAY, modes
        assert caps[-1] == caps[every - 1], caps  # then eager: nothing recorded any more
        for i in range(layers):
            again = [m for m in lines if f"module 'layer{i}': " in m and "recorded again" in m]
            assert len(again) == 1 and "layers[" in again[0], lines
            assert "second time" in v.rt.eager_modules.get(f"layer{i}", ""), v.rt.eager_modules
    finally:
        v.close()


def _parameters_replaced(scope):
    import warnings

    import cgrt.torch as ct

    _require_gpu()
    torch.backends.cuda.matmul.allow_tf32 = False
    d, rows = 64, 8
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.Linear(d, d)).cuda()
    x = torch.randn(rows, d, device="cuda")
    ini = _ini("local", f"inference_scope = {scope}\n[inference]\nbuckets = list\n"
                        f"list = {rows}\nmax_tokens = {rows}").replace("log = warn", "log = info")
    lines, caps, modes = [], [], []
    with ct.Runtime(ini, log=lambda level, msg: lines.append(msg)) as rt, torch.no_grad(), \
            warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with torch.cuda.stream(rt.torch_stream):
            prepare, body, static = _chain(rt, model, x)
            for step in range(12):
                if step in (5, 9):
                    w = torch.randn(d, d, device="cuda")
                    if step == 5:
                        model[1].weight = torch.nn.Parameter(w)  # another Parameter object
                    else:
                        model[1].weight.data = w  # the same one, over other memory
                    _scribble()  # the old weight's memory handed out and overwritten
                out = rt.run("infer", rows, prepare, body, inputs=[static])
                assert torch.equal(out, model(x)), f"step {step}"
                caps.append(rt.stats().captures)
                modes.append(rt.last_report.mode)
        torch.cuda.synchronize()
        again = [m for m in lines if "recorded again" in m]
        assert len(again) == 1 and "'layer1': module.weight (a tensor (64, 64)" in again[0], lines
        assert modes[4] == modes[8] == Mode.REPLAY, modes
        if scope == "layer":
            # (a module run eagerly runs outside cgrt: layer0's replay is the step's mode)
            # layer1 recorded again after step 5, then eager after step 9; layer0 untouched
            assert caps[4] == 2 and caps[8] == 3 and caps[-1] == 3, caps
            assert list(rt.eager_modules) == ["layer1"], rt.eager_modules
        else:
            # every graph released and the body recorded again, then bodies run eagerly
            assert caps[4] == 1 and caps[8] == 2, caps
            assert Mode.REPLAY not in modes[9:], modes
            assert rt._body_eager is not None and "second time" in rt._body_eager


def test_parameters_replaced_between_calls_bitwise():
    """Parameters are not declared inputs (declare_params=False, the default): a module's graph
    reads them at the addresses of its capture. A host that gives a parameter another tensor
    between steps (`lin.weight = Parameter(...)`, load_state_dict(assign=True), `p.data = ...`)
    would have the replay read the old, freed memory. Now, in layer scope, the first time the
    module's graphs are recorded again against the new parameters and the second time it runs
    eagerly; bitwise against the module run eagerly at every step."""
    _parameters_replaced("layer")


def test_parameters_replaced_between_steps_block_scope_bitwise():
    """The same in block scope, where a replayed body calls no module: the body's modules' places
    are checked before each step; the first time every graph is released and the body recorded
    again, the second time bodies run eagerly."""
    _parameters_replaced("block")


def _said_once_per_layer(lines, layers):
    for i in range(layers):
        said = [m for m in lines if f"module 'layer{i}': its call changed Python state" in m]
        assert len(said) == 1, lines
        assert "past_key_values" in said[0] and "became a new tensor" in said[0], said[0]


def test_huggingface_dynamic_cache_runs_eagerly_bitwise():
    """transformers' default KV cache, DynamicCache, concatenates each step's keys and values into
    new tensors, in Python, which a replayed graph does not run: replayed, a layer would attend
    over the cache as it was at its capture (before cgrt.torch compared the Python state a call
    changes, every step after the capture differed from eager, nothing said). Now each layer is
    found to change the cache object's tensors, said once, and run eagerly, every step bitwise:
    - layer scope, two warm-up steps: found in the second warm-up call, nothing captured;
    - one warm-up step: found in the capture, which is given up with the cache put back as it
      was, so that the eager run cgrt makes instead appends once;
    - block scope: the body's capture is given up the same way, then refused (the layers run
      eagerly), and the body runs eagerly.
    A StaticCache, updated in place, stays graphed (the Llama and Mixtral tests)."""
    import warnings

    layers, steps = 3, 8
    bench_hf, model, ids = _hf_llama(layers, steps)
    from transformers import DynamicCache

    import cgrt.torch as ct

    ref = bench_hf.eager_steps(model, ids, 32, cache="dynamic")
    names = [f"layer{i}" for i in range(layers)]
    for warmup in (2, 1):
        lines = []
        v = bench_hf.CgrtDecode(model, 2, 32, log="info", sink=lambda lv, m: lines.append(m),
                                cache="dynamic", warmup=warmup)

        def decode_bitwise(when, v=v, warmup=warmup):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with torch.cuda.stream(v.rt.torch_stream):
                    outs = [v.step(x).clone() for x in ids]
            torch.cuda.synchronize()
            for i, (o, e) in enumerate(zip(outs, ref)):
                assert torch.equal(o, e), f"warmup_steps {warmup}{when}, step {i}"

        try:
            decode_bitwise("")
            s = v.rt.stats()
            assert sorted(v.rt.eager_modules) == names, v.rt.eager_modules
            assert s.captures == 0, s
            # one capture given up a layer when found there, then none tried
            assert s.fallbacks == (layers if warmup == 1 else 0), (s, lines)
            _said_once_per_layer(lines, layers)
            v.rt.release_graphs()  # forgets what it found: found again, the same way
            assert not v.rt.eager_modules
            v.reset()
            decode_bitwise(", after release_graphs")
            assert sorted(v.rt.eager_modules) == names, v.rt.eager_modules
        finally:
            v.close()
    # block scope: one graph a step, the body the model's forward over static ids and position
    lines = []
    ini = (
        "[cuda_graph]\nimpl = local\nwarmup_steps = 1\ninference_scope = block\n"
        "[inference]\nbuckets = list\nlist = 2\nmax_tokens = 2\n"
        f"[runtime]\ndriver = cuda\ndevice = {torch.cuda.current_device()}\nlog = info\n"
    )
    rt = ct.Runtime(ini, log=lambda lv, m: lines.append(m))
    holder = bench_hf.Holder()
    orig = list(model.model.layers)
    try:
        for i, layer in enumerate(orig):
            tm = rt.register_module(names[i], layer, kind="other", layer=i)
            model.model.layers[i] = bench_hf.Hooked(tm, holder)
        cache = DynamicCache()
        x = torch.zeros(2, 1, dtype=torch.long, device="cuda")
        cp = torch.zeros(1, dtype=torch.long, device="cuda")
        outs = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.cuda.stream(rt.torch_stream), torch.no_grad():
                for pos, t in enumerate(ids):

                    def prepare(ctx, t=t, pos=pos):
                        x.copy_(t)
                        cp.fill_(pos)

                    def body(ctx):
                        holder.ctx = ctx
                        return model(input_ids=x, past_key_values=cache, cache_position=cp,
                                     use_cache=True).logits

                    outs.append(rt.run("infer", 2, prepare, body, inputs=[x, cp]).clone())
        torch.cuda.synchronize()
        for i, (o, e) in enumerate(zip(outs, ref)):
            assert torch.equal(o, e), f"block scope, step {i}"
        s = rt.stats()
        assert s.captures == 0 and rt.last_report.mode == Mode.EAGER, (s, lines)
        assert "layer0" in rt.eager_modules, (rt.eager_modules, lines)
        # the capture given up at layer 0's finding, then one refused: cgrt stops trying
        assert s.fallbacks == 2, (s, lines)
        said = [str(w.message) for w in caught if "changed Python state" in str(w.message)]
        assert said, [str(w.message) for w in caught]
    finally:
        for i, layer in enumerate(orig):
            model.model.layers[i] = layer
        rt.close()


def _mixtral_decode(model, lines, steps=16, switch=None):
    """Decode steps of a built Mixtral, eagerly and with its decoder layers under cgrt.torch;
    every step's logits compared bitwise. switch = (step, impl): before that step the experts
    implementation becomes impl (in both runs) and cgrt's graphs are released, as a host that
    mends a module does. Returns the runtime's stats, the last step's mode, the bytes staged
    (copied into statics) by each step and the recordings (captures) after each step."""
    import bench_hf

    def switch_at(pos):
        if switch and pos == switch[0]:
            bench_hf.set_experts(model, switch[1])

    ids = bench_hf.token_ids(steps, 2, model.config.vocab_size)
    first = bench_hf.experts_of(model)
    ref = bench_hf.eager_steps(model, ids, 32, before=switch_at)
    if switch:
        bench_hf.set_experts(model, first)
    v = bench_hf.CgrtDecode(model, 2, 32, log="info", sink=lambda level, msg: lines.append(msg))
    try:
        outs = []
        copied = []
        caps = []
        with torch.cuda.stream(v.rt.torch_stream):
            for pos, x in enumerate(ids):
                if switch and pos == switch[0]:
                    switch_at(pos)
                    v.rt.release_graphs()
                before = v.rt.stats().copy_bytes
                outs.append(v.step(x).clone())
                s = v.rt.stats()
                copied.append(s.copy_bytes - before)
                caps.append(s.captures)
        torch.cuda.synchronize()
        for i, (o, e) in enumerate(zip(outs, ref)):
            assert torch.equal(o, e), f"step {i} (experts {bench_hf.experts_of(model)})"
        return v.rt.stats(), v.rt.last_report.mode, copied, caps
    finally:
        v.close()


def test_huggingface_mixtral_decode_graphs_or_breaks_bitwise():
    """transformers' Mixtral (a sparse MoE in every layer), each decoder layer a cgrt module
    (local, layer scope), as a host would register it without reading the model's code:
    - experts run by grouped_mm (transformers 5's default): no host synchronization, so a graph
      per layer, replayed, every step bitwise;
    - experts run eagerly (older transformers' only way): the MoE finds the experts the router
      hit with nonzero(), which synchronizes, so every capture of a layer breaks. cgrt runs the
      layer eagerly instead, names the call that broke it, and stops trying after two failures
      in a row (and cgrt.torch stops staging the layer's inputs); every step bitwise and
      nothing raised to the host;
    - the host then switches to grouped_mm and calls release_graphs(): the layers are graphed
      again, bitwise."""
    import warnings

    _require_gpu()
    try:
        import transformers  # noqa: F401
        from transformers import MixtralConfig  # noqa: F401
    except ImportError:
        skip("transformers with Mixtral is not installed")
    import bench_hf

    torch.backends.cuda.matmul.allow_tf32 = False
    layers = 2
    model = bench_hf.build_mixtral(layers=layers, d=128, heads=4, ffn=256, vocab=1000,
                                   max_len=32, experts=4)
    if bench_hf.experts_of(model) is not None:
        bench_hf.set_experts(model, "grouped_mm")
        lines = []
        s, mode, copied, caps = _mixtral_decode(model, lines)
        assert mode == Mode.REPLAY, (mode, lines)
        assert s.fallbacks == 0 and s.rebind_eager_keys == 0, (s, lines)
        # a graph per layer, re-recorded while the adapter learns what moves and when an input
        # it does not stage moves (once in a while, as the allocator hands out blocks): most
        # calls replay
        assert layers <= caps[-1] <= len(caps) * layers // 2, caps
        assert copied[-1] > 0, copied  # the fresh mask and positions, staged for the graphs
        bench_hf.set_experts(model, "eager")
    lines = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s, mode, copied, caps = _mixtral_decode(model, lines)
    assert mode == Mode.EAGER and s.captures == 0, (mode, s)
    assert s.fallbacks == 2 * layers, (s, lines)  # two tries a layer, then eager
    for i in range(layers):
        broke = [m for m in lines if f"capture of layer{i} fwd failed, running it eagerly" in m]
        assert len(broke) == 2, lines
        assert "cudaStreamSynchronize" in broke[0], broke[0]  # diagnose: the call that broke it
        gave_up = [m for m in lines if f"layer{i} fwd failed to capture 2 times in a row" in m]
        assert len(gave_up) == 1, lines
        unstaged = [m for m in lines if f"module 'layer{i}': its capture failed 2 times" in m]
        assert len(unstaged) == 1, lines
    # layers run eagerly read the fresh tensors themselves: nothing is copied for them
    assert copied[-8:] == [0] * 8, copied
    said = [w for w in caught if "a capture fell back to eager because a callback raised" in
            str(w.message)]
    assert said, [str(w.message) for w in caught]
    if bench_hf.experts_of(model) is None:
        return  # no other way to run the experts here
    lines = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s, mode, copied, caps = _mixtral_decode(model, lines, steps=20, switch=(8, "grouped_mm"))
    assert s.fallbacks == 2 * layers, (s, lines)  # before the switch
    assert caps[7] == 0 and mode == Mode.REPLAY, (caps, mode)
    assert layers <= caps[-1] <= (len(caps) - 8) * layers // 2, caps
    assert copied[6] == 0 and copied[-1] > 0, copied  # unstaged while eager, staged once graphed


# ---------------------------------------------------------------- alone


def _main():
    tests = [(k, v) for k, v in sorted(globals().items()) if k.startswith("test_") and callable(v)]
    passed = failed = skipped = 0
    for name, fn in tests:
        try:
            fn()
            passed += 1
            print(f"PASSED  {name}", flush=True)
        except Exception as e:  # noqa: BLE001
            if type(e).__name__ == "_Skip":
                skipped += 1
                print(f"SKIPPED {name}: {e}", flush=True)
                continue
            failed += 1
            print(f"FAILED  {name}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    if passed == 0 and failed == 0:
        return 77
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_main())
