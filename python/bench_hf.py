#!/usr/bin/env python3
"""A HuggingFace `transformers` Llama, or Mixtral with `--model mixtral` (random weights, built
from a config: nothing is downloaded) decoding with its own StaticCache, its decoder layers
registered with cgrt.torch: a host nobody here wrote. Its forward does what every PyTorch forward does: it computes the embeddings, the
rotary cos/sin tables, the position and cache-position tensors and the mask afresh every step, so
the layers' inputs sit at new addresses every step. Variants, in one process:

  eager         the model as it comes
  cgrt_layer    each decoder layer a cgrt module (local, layer scope), rebind = auto (default)
  cgrt_update   the same under rebind = update (re-recorded on every call: what auto replaced)

Each runs the same decode steps (the same token ids, positions 0, 1, 2...) on a cache of its own;
the logits of every step are compared bitwise with eager's. Time: the median interval between
back-to-back steps (CUDA events, as cgrt bench). cgrt rows give captures, recordings per steady
step, keys staged, bytes copied per step and fallbacks.

Mixtral's MoE layers run their experts the way transformers' `experts_implementation` says
(`--experts`; transformers 5 picks grouped_mm by default): grouped_mm and batched_mm are free of
host synchronization and capture; eager loops over the experts the router hit, found with
nonzero(), which synchronizes, so no layer can be captured: cgrt runs each layer eagerly after
two failed captures (the rows' fallbacks), and says which call broke them.

    PYTHONPATH=python CGRT_LIBRARY=build/lib/libcgrt.so python3 python/bench_hf.py
    ... python3 python/bench_hf.py --model mixtral --experts eager
"""

import argparse
import json
import os
import statistics
import sys

import torch


def _causal_lm(config_cls, model_cls, layers, d, heads, ffn, vocab, max_len, seed, **more):
    """A causal LM of this shape with random weights, bf16, on the GPU, for inference (more:
    the model's own config fields)."""
    cfg = config_cls(
        vocab_size=vocab,
        hidden_size=d,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_len,
        **more,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = model_cls(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    model.requires_grad_(False)
    return model


def build(layers=12, d=1024, heads=16, ffn=2816, vocab=32000, max_len=512, seed=1):
    """The Llama causal LM of this shape with random weights, bf16, on the GPU, for inference."""
    from transformers import LlamaConfig, LlamaForCausalLM

    return _causal_lm(LlamaConfig, LlamaForCausalLM, layers, d, heads, ffn, vocab, max_len, seed)


def build_mixtral(layers=12, d=1024, heads=16, ffn=2816, vocab=32000, max_len=512, experts=8,
                  top_k=2, experts_impl=None, seed=1):
    """The Mixtral causal LM (a sparse MoE in every layer) of this shape with random weights,
    bf16, on the GPU, for inference. experts_impl: transformers' experts implementation (eager,
    batched_mm, grouped_mm; None: the installed version's default)."""
    from transformers import MixtralConfig, MixtralForCausalLM

    model = _causal_lm(MixtralConfig, MixtralForCausalLM, layers, d, heads, ffn, vocab, max_len,
                       seed, num_local_experts=experts, num_experts_per_tok=top_k)
    if experts_impl:
        set_experts(model, experts_impl)
    return model


def experts_of(model):
    """How the model's MoE layers run their experts (transformers 5's experts_implementation),
    or None where the installed transformers has no such choice (its MoE loops over experts)."""
    return getattr(model.config, "_experts_implementation", None)


def set_experts(model, impl):
    """Switches the experts implementation of a built model (the config its experts read)."""
    if experts_of(model) is None:
        raise ValueError(f"transformers here has no experts implementation to set ({impl})")
    model.config._experts_implementation = impl
    for layer in model.model.layers:
        experts = getattr(getattr(layer, "mlp", None), "experts", None)
        if experts is not None and getattr(experts, "config", None) is not None:
            experts.config._experts_implementation = impl


def make_cache(model, batch, max_len, kind="static"):
    """A StaticCache for `batch` sequences of up to max_len tokens (any transformers version);
    kind="dynamic": transformers' default DynamicCache, which grows by concatenation (new tensors
    every step: a graph cannot replay it, so cgrt.torch runs its layers eagerly)."""
    if kind == "dynamic":
        from transformers.cache_utils import DynamicCache

        return DynamicCache()
    from transformers.cache_utils import StaticCache

    tries = (
        dict(config=model.config, max_cache_len=max_len),
        dict(config=model.config, max_batch_size=batch, max_cache_len=max_len, device="cuda",
             dtype=torch.bfloat16),
    )
    last = None
    for kw in tries:
        try:
            return StaticCache(**kw)
        except TypeError as e:
            last = e
    raise last


class Hooked(torch.nn.Module):
    """Stands in for a decoder layer in the model's ModuleList: runs it as cgrt module `tm` with
    the step's ctx; any attribute the model reads of its layers is the layer's."""

    def __init__(self, tm, holder):
        super().__init__()
        self.tm = tm
        self.holder = holder

    def forward(self, hidden_states, **kwargs):
        return self.tm(self.holder.ctx, hidden_states, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["tm"].module, name)


class Holder:
    ctx = None


def token_ids(steps, batch, vocab, seed=3):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randint(0, vocab, (batch, 1), device="cuda", generator=g) for _ in range(steps)]


def eager_steps(model, ids, max_len, before=None, cache="static"):
    """Logits of each decode step, the model as it comes (before(pos): called before each)."""
    cache = make_cache(model, ids[0].shape[0], max_len, cache)
    out = []
    with torch.no_grad():
        for pos, x in enumerate(ids):
            if before:
                before(pos)
            cp = torch.tensor([pos], device="cuda")
            out.append(model(input_ids=x, past_key_values=cache, cache_position=cp,
                             use_cache=True).logits.clone())
    return out


class CgrtDecode:
    """The model with its decoder layers under cgrt.torch (local, layer scope); the body is the
    model's own forward."""

    def __init__(self, model, batch, max_len, rebind=None, log="warn", sink=None, cache="static",
                 warmup=2):
        import cgrt.torch as ct

        self.model = model
        self.batch = batch
        self.max_len = max_len
        self.cache_kind = cache
        extra = f"rebind = {rebind}\n" if rebind else ""
        ini = (
            f"[cuda_graph]\nimpl = local\nwarmup_steps = {warmup}\ninference_scope = layer\n"
            f"{extra}"
            f"[inference]\nbuckets = list\nlist = {batch}\nmax_tokens = {batch}\n"
            f"[runtime]\ndriver = cuda\ndevice = {torch.cuda.current_device()}\nlog = {log}\n"
        )
        self.rt = ct.Runtime(ini, log=sink) if sink else ct.Runtime(ini)
        self.holder = Holder()
        self.layers = model.model.layers
        self.orig = list(self.layers)
        for i, layer in enumerate(self.orig):
            tm = self.rt.register_module(f"layer{i}", layer, kind="other", layer=i)
            self.layers[i] = Hooked(tm, self.holder)
        self.cache = make_cache(model, batch, max_len, cache)
        self.pos = 0
        self.x = None

    def reset(self):
        """Back to position 0 on the same cache, zeroed in place: the captured graphs write into
        the cache tensors they were recorded with (a new cache would leave them writing into
        freed memory). A DynamicCache (never graphed) starts empty again."""
        if self.cache_kind == "dynamic":
            self.cache = make_cache(self.model, self.batch, self.max_len, "dynamic")
        else:
            self.cache.reset()
        self.pos = 0

    def _body(self, ctx):
        self.holder.ctx = ctx
        cp = torch.tensor([self.pos], device="cuda")
        return self.model(input_ids=self.x, past_key_values=self.cache, cache_position=cp,
                          use_cache=True).logits

    def step(self, x):
        self.x = x
        with torch.no_grad():
            out = self.rt.run("infer", self.batch, None, self._body)
        self.pos += 1
        return out

    def close(self):
        for i, layer in enumerate(self.orig):
            self.layers[i] = layer
        self.rt.close()


def time_steps(step, stream, steps):
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    with torch.cuda.stream(stream):
        for i in range(steps):
            ev[i].record()
            step(i)
        ev[steps].record()
    torch.cuda.synchronize()
    return statistics.median(ev[i].elapsed_time(ev[i + 1]) * 1e3 for i in range(steps))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--batch", default="1,8", help="sequences per step (comma-separated)")
    ap.add_argument("--steps", type=int, default=60, help="decode steps per variant (checked)")
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--cache", choices=("static", "dynamic"), default="static",
                    help="the KV cache: StaticCache (updated in place: graphed), or transformers' "
                    "default DynamicCache (new tensors every step: cgrt.torch runs the layers "
                    "eagerly and says why)")
    ap.add_argument("--variants", default="eager,cgrt_layer,cgrt_update")
    ap.add_argument("--model", choices=("llama", "mixtral"), default="llama")
    ap.add_argument("--experts", type=int, default=8, help="mixtral: experts per MoE layer")
    ap.add_argument("--experts-impl", help="mixtral: eager, batched_mm or grouped_mm "
                    "(transformers' experts implementation; default: the installed version's)")
    ap.add_argument("--json", help="write the results to this file too")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_hf: no CUDA device visible to torch; nothing to measure", file=sys.stderr)
        return 2
    import transformers

    import cgrt

    torch.backends.cuda.matmul.allow_tf32 = False
    if a.model == "mixtral":
        model = build_mixtral(a.layers, a.d_model, a.heads, a.ffn, max_len=a.max_len,
                              experts=a.experts, experts_impl=a.experts_impl)
        what = (f"Mixtral {a.layers} layers, {a.experts} experts (top 2, "
                f"{experts_of(model) or 'a loop over experts'})")
    else:
        model = build(a.layers, a.d_model, a.heads, a.ffn, max_len=a.max_len)
        what = f"Llama {a.layers} layers"
    print(f"bench_hf: {torch.cuda.get_device_name()}, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, cgrt {cgrt.version()}; {what}, d {a.d_model}, "
          f"{a.heads} heads, ffn {a.ffn}, bf16, "
          f"{'StaticCache' if a.cache == 'static' else 'DynamicCache'} {a.max_len}; {a.steps} "
          f"decode steps per variant")
    results = []
    all_equal = True
    for batch in [int(b) for b in a.batch.split(",") if b]:
        ids = token_ids(a.steps, batch, model.config.vocab_size)
        ref = eager_steps(model, ids, a.max_len, cache=a.cache)
        for name in [v for v in a.variants.split(",") if v]:
            r = {"variant": name, "batch": batch}
            if name == "eager":
                cache = [make_cache(model, batch, a.max_len, a.cache)]

                def step(i, cache=cache, ids=ids):
                    cp = torch.tensor([i], device="cuda")
                    with torch.no_grad():
                        model(input_ids=ids[i], past_key_values=cache[0], cache_position=cp,
                              use_cache=True)

                r["median_us"] = round(time_steps(step, torch.cuda.current_stream(), a.steps), 1)
                r["equal_to_eager"] = True
            else:
                v = CgrtDecode(model, batch, a.max_len,
                               rebind="update" if name == "cgrt_update" else None, cache=a.cache)
                try:
                    outs = []
                    with torch.cuda.stream(v.rt.torch_stream):
                        for i in range(a.steps):  # checked run: every step's logits
                            outs.append(v.step(ids[i]).clone())
                    torch.cuda.synchronize()
                    r["equal_to_eager"] = all(torch.equal(o, e) for o, e in zip(outs, ref))
                    v.reset()
                    s0 = v.rt.stats()
                    r["median_us"] = round(
                        time_steps(lambda i: v.step(ids[i]), v.rt.torch_stream, a.steps), 1)
                    s = v.rt.stats()
                    r.update(captures=s.captures, fallbacks=s.fallbacks,
                             copy_keys=s.rebind_copy_keys, eager_keys=s.rebind_eager_keys,
                             recordings_per_step=round((s.captures - s0.captures) / a.steps, 2),
                             copy_bytes_per_step=round((s.copy_bytes - s0.copy_bytes) / a.steps),
                             eager_modules=len(v.rt.eager_modules),
                             unrepeated=s.unrepeated_units)
                finally:
                    v.close()
            all_equal &= r["equal_to_eager"]
            results.append(r)
            extra = ""
            if "captures" in r:
                extra = (f"  captures {r['captures']}, rec/step {r['recordings_per_step']}, "
                         f"copy {r['copy_bytes_per_step']} B/step, keys staged {r['copy_keys']}, "
                         f"eager {r['eager_keys']}, fallbacks {r['fallbacks']}, modules run "
                         f"eagerly for Python state {r['eager_modules']}, with keys that never "
                         f"repeat {r['unrepeated']}")
            print(f"  B={batch:<3d} {name:12s} {r['median_us']:9.1f} us  "
                  f"{'equal' if r['equal_to_eager'] else 'DIFFER'}{extra}", flush=True)
    print("ratios to eager (median step time; < 1 is faster, target <= 1.05):")
    for r in results:
        e = next(x for x in results if x["batch"] == r["batch"] and x["variant"] == "eager")
        if r["variant"] != "eager":
            ratio = r["median_us"] / e["median_us"]
            print(f"  B={r['batch']:<3d} {r['variant']:12s} {ratio:6.3f}"
                  f"{'' if ratio <= 1.05 else '  SLOWER THAN EAGER'}")
    print("outputs: " + ("every variant bitwise equal to eager" if all_equal else "DIFFER"))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if all_equal else 1


if __name__ == "__main__":
    sys.exit(main())
