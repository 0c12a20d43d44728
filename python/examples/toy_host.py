"""A toy host for cgrt: 3 layers, each y = 2x + 1 (its backward: dx = 2 dy), whose kernels are
host functions on cgrt's stream, so it runs on the host driver without a GPU. It trains a few
steps, then serves inference steps of varying size, under every backend in turn: only the INI
changes, the host code never does.

    PYTHONPATH=python python3 python/examples/toy_host.py
"""

import ctypes

import cgrt

INI = """
[cuda_graph]
warmup_steps = 2       ; eager steps (or calls) before a capture
{backend}
[inference]
max_tokens = 8         ; the largest token bucket: the toy's buffers hold 8 tokens
[runtime]
driver = host          ; the CPU executor: no GPU needed (driver = cuda on a GPU)
log = warn
[host]
nan_check = off        ; the toy never reads its loss mid-step (full_iteration needs it)
"""

# The lines that pick a strategy; everything else stays as it is.
BACKENDS = {
    "none": "impl = none",
    "local": "impl = local",
    "local_block": "impl = local\ninference_scope = block",
    "transformer_engine": "impl = transformer_engine",
    "full_iteration": "impl = full_iteration",
    "dynamic_cp": "impl = dynamic_cp\n[dynamic_cp]\ncp_sizes = 1\nmax_packed_tokens = 8",
}

LAYERS, MAX_TOKENS, TRAIN_TOKENS = 3, 8, 4
INFER_TOKENS = [3, 5, 3, 7, 3, 8, 5, 3, 1, 5]


def affine(a, b):
    """A module callback whose kernel computes out[t] = a * in[t] + b over the padded tokens."""

    def call(ctx, args):
        src, dst, n = args.buffer_ptr(0), args.buffer_ptr(1), ctx.padded_tokens

        def kernel():  # runs on the stream: now, or again at each replay of a graph holding it
            x = (ctypes.c_double * n).from_address(src)
            y = (ctypes.c_double * n).from_address(dst)
            for t in range(n):
                y[t] = a * x[t] + b

        ctx.enqueue_host(kernel)

    return call


def buffer(array, access, name):
    return cgrt.Buffer(ctypes.addressof(array), ctypes.sizeof(array), access, name)


class Toy:
    def __init__(self, rt):
        self.rt = rt
        # Static buffers, allocated once: activations x0..x3 and their gradients g0..g3.
        self.x = [(ctypes.c_double * MAX_TOKENS)() for _ in range(LAYERS + 1)]
        self.g = [(ctypes.c_double * MAX_TOKENS)() for _ in range(LAYERS + 1)]
        self.buffers = [  # the step's static buffers, checked by whole-step graphs
            buffer(a, "inout", f"{name}{i}")
            for name, arrays in (("x", self.x), ("g", self.g))
            for i, a in enumerate(arrays)
        ]
        self.fwd = [  # (in, out) of each call
            (buffer(self.x[i], "in", f"x{i}"), buffer(self.x[i + 1], "out", f"x{i + 1}"))
            for i in range(LAYERS)
        ]
        self.bwd = [
            (buffer(self.g[i + 1], "in", f"g{i + 1}"), buffer(self.g[i], "out", f"g{i}"))
            for i in range(LAYERS)
        ]
        self.layers = [
            rt.register(f"layer{i}.mlp", "mlp", affine(2, 1), affine(2, 0), layer=i)
            for i in range(LAYERS)
        ]
        if rt.backend_info().caps & cgrt.BackendCaps.COMM:
            rt.set_world_comm(None)  # the host driver's stand-in; on a GPU, your NCCL world comm
        self.inputs = []

    def prepare(self, ctx):
        """Always eager: stage the real tokens into x0 (and dy = 1 into g3), zero the padding."""
        n, xs = ctx.padded_tokens, self.inputs[: ctx.tokens]
        if n > MAX_TOKENS:
            raise ValueError(f"a step padded to {n} tokens; the buffers hold {MAX_TOKENS}")
        dy = 1.0 if ctx.phase == cgrt.Phase.TRAIN else 0.0

        def stage():  # on the stream too, after the work of the steps before
            for t in range(n):
                self.x[0][t] = xs[t] if t < len(xs) else 0.0
                self.g[LAYERS][t] = dy if t < len(xs) else 0.0

        ctx.enqueue_host(stage)

    def body(self, ctx):
        """The graphable work: forward through the layers, and backward when training. The key
        is the call's shape: calls of different keys never share a graph."""
        for i, layer in enumerate(self.layers):
            self.rt.forward(layer, ctx, key=ctx.padded_tokens, buffers=self.fwd[i])
        if ctx.phase == cgrt.Phase.TRAIN:
            for i in reversed(range(LAYERS)):
                self.rt.backward(self.layers[i], ctx, key=ctx.padded_tokens, buffers=self.bwd[i])

    def step(self, phase, inputs):
        """One step; returns its outputs (and the input gradients when training)."""
        self.inputs = inputs
        self.rt.step(phase, len(inputs), self.prepare, self.body, buffers=self.buffers)
        self.rt.synchronize()  # the host driver runs the stream's work here
        n = len(inputs)
        return list(self.x[LAYERS][:n]), list(self.g[0][:n]) if phase == "train" else None


def run(rt, train_steps=4):
    """Trains, then serves; returns what every step computed."""
    toy = Toy(rt)
    out = []
    for s in range(train_steps):
        out.append(toy.step("train", [s + t / 10 for t in range(TRAIN_TOKENS)]))
    for s, n in enumerate(INFER_TOKENS):
        out.append(toy.step("infer", [s + t / 10 for t in range(n)]))
    return out


def main():
    results = {}
    for name, lines in BACKENDS.items():
        with cgrt.Runtime.from_ini(INI.format(backend=lines), name=name) as rt:
            results[name] = run(rt)
            info, st = rt.backend_info(), rt.stats()
            runs = " ".join(f"{p.name.lower()}={r.name.lower()}" for p, r in info.phases.items())
            replayed = st.steps_by_mode[cgrt.Mode.REPLAY], st.calls_by_mode[cgrt.Mode.REPLAY]
            print(
                f"{name:18} {runs:42} replayed: steps {replayed[0]}, calls {replayed[1]}; "
                f"run eagerly by cgrt {st.eager_phase_steps}; live graphs {len(rt.graphs())}"
            )
    assert all(r == results["none"] for r in results.values()), "the backends disagree"
    print("every backend computed the same; the last step:", results["none"][-1][0])


if __name__ == "__main__":
    main()
