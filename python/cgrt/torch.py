"""cgrt.torch: torch.nn.Modules under a cgrt backend.

    import torch, cgrt.torch as ct
    with ct.Runtime("conf/local.ini") as rt, torch.cuda.stream(rt.torch_stream):
        layers = [rt.register_module(f"layer{i}", l, kind="other", layer=i)
                  for i, l in enumerate(model.layers)]
        x = torch.zeros(max_tokens, d, device="cuda")            # the step's static input
        def prepare(ctx):                                          # stage and pad (always eager)
            x[: ctx.tokens].copy_(batch); x[ctx.tokens : ctx.padded_tokens].zero_()
        def body(ctx):                                             # graphable
            h = x[: ctx.padded_tokens]
            for layer in layers:
                h = layer(ctx, h)
            return h
        with torch.no_grad():
            out = rt.run("infer", tokens=len(batch), prepare=prepare, body=body, inputs=[x])

How it works:
- The module's forward runs on cgrt's stream, which torch sees as torch.cuda.ExternalStream
  (`rt.torch_stream`); run() makes it the current stream for the step when it is not already.
- cgrt tells this runtime when it begins and ends every capture (cgrt_set_capture_hooks): in
  between, PyTorch's caching allocator serves allocations made on cgrt's stream from one private
  graph pool (as torch.cuda.graph does for its own captures), so the memory a graph uses is never
  handed to other work. The pool lives until release_graphs() or close().
- A module call declares its input tensors to cgrt as buffers, so a graph is never replayed with
  inputs that moved (cgrt re-records or refuses, per `rebind`). Its outputs are allocated by the
  module inside the capture, from the pool: they are the graph's static outputs, kept here and
  returned by every replay of that graph (valid until the next step, like torch.cuda.graph's).
  Parameters are assumed to stay in place (declare_params=True declares them too).
- Training: a module registered with backward=True records its forward's autograd graph; its
  backward(ctx, *grad_outputs) computes the input gradients and accumulates the parameter
  gradients into p.grad in place (p.grad is allocated at registration: use
  zero_grad(set_to_none=False)). A backward is captured only against a captured forward.
- rebind = copy is refused (torch modules address their own tensors, not cgrt's private copies);
  captured work must not use CUDA random numbers (dropout) or synchronize.
"""

import threading

import torch

import cgrt
from cgrt import Access, Buffer, Error, Mode, Status

__all__ = ["Runtime", "TorchModule", "pool_api"]


# ---------------------------------------------------------------- PyTorch's private pool API


class _PoolAPI:
    """The caching allocator's pool routing, as torch.cuda.graph uses it, across torch versions:
    begin routes allocations made on the current stream to a pool (creating the pool or taking a
    reference to it), end stops routing, release drops a reference (at zero the pool's free
    memory may go back to CUDA)."""

    def __init__(self):
        C = torch._C
        self.begin_fn = getattr(C, "_cuda_beginAllocateCurrentStreamToPool", None)
        self.end_fn = getattr(C, "_cuda_endAllocateToPool", None)
        self.end_takes_pool = True
        if self.end_fn is None:
            self.end_fn = getattr(C, "_cuda_endAllocateCurrentStreamToPool", None)
        self.release_fn = getattr(C, "_cuda_releasePool", None)
        missing = [
            n
            for n, f in (
                ("_cuda_beginAllocateCurrentStreamToPool", self.begin_fn),
                ("_cuda_endAllocateToPool", self.end_fn),
                ("_cuda_releasePool", self.release_fn),
            )
            if f is None
        ]
        self.missing = missing

    def check(self):
        if self.missing:
            raise Error(
                Status.UNSUPPORTED,
                f"cgrt.torch: torch {torch.__version__} lacks the allocator pool API "
                f"({', '.join(self.missing)}); captures would allocate outside a graph pool",
            )

    def begin(self, device, pool):
        self.begin_fn(device, pool)

    def end(self, device, pool):
        if self.end_takes_pool:
            try:
                self.end_fn(device, pool)
                return
            except TypeError:
                self.end_takes_pool = False  # torch <= 2.1: end(device)
        self.end_fn(device)

    def release(self, device, pool):
        self.release_fn(device, pool)


_POOL_API = None


def pool_api():
    global _POOL_API
    if _POOL_API is None:
        _POOL_API = _PoolAPI()
    return _POOL_API


# ---------------------------------------------------------------- helpers


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return (x,)
    if type(x) is tuple and len(x) == 1 and isinstance(x[0], torch.Tensor):
        return x  # the common call: one input tensor
    if isinstance(x, (tuple, list)):
        return tuple(t for t in x if isinstance(t, torch.Tensor))
    return ()


def _tensor_buffer(t, access, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    return Buffer(t.data_ptr(), max(t.numel() * t.element_size(), 1), access, name)


_MISSING = object()
_LIMIT_VARIANTS = 64  # static outputs kept per (call shape), one per input address set


class _Record:
    """What a forward left for its backward in this step."""

    __slots__ = ("xs", "out", "kind")

    def __init__(self, xs, out, kind):
        self.xs = xs  # the inputs as the module saw them (detached, requires_grad as given)
        self.out = out  # the module's output(s), with their autograd graph
        self.kind = kind  # "eager", "graph" (a module graph's capture) or "body" (a body capture)


class _Call:
    """A call in flight between TorchModule.__call__/backward and the cgrt callback."""

    __slots__ = ("inputs", "ptrs", "ran", "captured", "result", "xs", "grads", "rec")

    def __init__(self, inputs, ptrs):
        self.inputs = inputs
        self.ptrs = ptrs
        self.ran = False
        self.captured = False
        self.result = None
        self.xs = None
        self.grads = None
        self.rec = None


class TorchModule:
    """A torch.nn.Module registered with cgrt. From the step body: ``out = tm(ctx, *inputs)``
    runs its forward as cgrt decides (eager, captured, or a replay returning the graph's static
    outputs); ``grads = tm.backward(ctx, *grad_outputs)`` its backward (backward=True)."""

    def __init__(self, rt, name, module, kind, layer, backward, declare_params, no_cp_comm=False):
        self.rt = rt
        self.module = module
        self.name = name
        self.params = [p for p in module.parameters() if p.requires_grad] if backward else []
        self.declare_params = declare_params
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self.handle = rt.register(
            name,
            kind,
            forward=self._forward_cb,
            backward=self._backward_cb if backward else None,
            layer=layer,
            no_cp_comm=no_cp_comm,
        )
        self._call = None
        self._static = {}  # (dir, phase, padded, key, microbatch) -> {ptrs: value}
        self._args = {}  # signature -> cgrt.Args (reused while addresses stay)
        self._records = {}  # microbatch -> _Record of this step

    def __repr__(self):
        return f"cgrt.torch.TorchModule({self.name!r}, {type(self.module).__name__})"

    # -- args

    def _args_for(self, direction, tensors, extra, microbatch, key):
        """The cgrt.Args of a call with these tensors, and their addresses (cached by signature:
        the same tensors at the same addresses reuse one Args)."""
        ptrs = tuple(t.data_ptr() for t in tensors)
        sig = (direction, microbatch, key, ptrs) + tuple((t.shape, t.dtype) for t in tensors)
        if extra:
            sig += tuple(t.data_ptr() for t in extra)
        a = self._args.get(sig)
        if a is None:
            if key is None:
                # The shapes and dtypes are the call's signature: other shapes, other graphs.
                key = hash(tuple((tuple(t.shape), str(t.dtype)) for t in tensors)) & (2**63 - 1)
            bufs = [_tensor_buffer(t, Access.IN, f"input{i}") for i, t in enumerate(tensors)]
            access = Access.INOUT if direction else Access.IN
            bufs += [_tensor_buffer(t, access, f"param{i}") for i, t in enumerate(extra)]
            a = cgrt.Args(key=key, microbatch=microbatch, buffers=bufs)
            if len(self._args) > 256:
                self._args.clear()
            self._args[sig] = a
        return a, ptrs

    def _run(self, fn, ctx, args):
        """cgrt_forward/cgrt_backward without the generic wrapper's checks (the hot path)."""
        rt = self.rt
        rc = fn(rt._handle(), self.handle.handle, ctx._ptr, args._ref)
        if rc != 0:
            rt._raise_for(rc)

    def _check_addresses(self, call, args):
        for i, p in enumerate(call.ptrs):
            if args.buffer_ptr(i) != p:
                raise Error(
                    Status.UNSUPPORTED,
                    f"module '{self.name}': cgrt handed the call other buffers than its tensors "
                    f"(rebind = copy); cgrt.torch needs [cuda_graph] rebind = update, recapture "
                    f"or error",
                )

    # -- static outputs

    def _static_put(self, skey, ptrs, value):
        variants = self._static.setdefault(skey, {})
        variants.pop(ptrs, None)
        variants[ptrs] = value
        while len(variants) > _LIMIT_VARIANTS:
            variants.pop(next(iter(variants)))

    def _static_get(self, skey, ptrs, what):
        v = self._static.get(skey, {}).get(ptrs, _MISSING)
        if v is _MISSING:
            raise Error(
                Status.STATE,
                f"module '{self.name}' {what}: cgrt replayed a graph of this call, but cgrt.torch "
                f"holds no outputs of its capture (captured before this runtime's hooks, or its "
                f"outputs were dropped): call release_graphs()",
            )
        return v

    # -- forward

    def __call__(self, ctx, *inputs, microbatch=0, key=None):
        rt = self.rt
        tensors = _tensors(inputs)
        extra = self.params if self.declare_params else ()
        args, ptrs = self._args_for(0, tensors, extra, microbatch, key)
        call = _Call(inputs, ptrs)
        self._call = call
        try:
            self._run(rt._lib.cgrt_forward, ctx, args)
        finally:
            self._call = None
        c = ctx._live()
        skey = (0, c.phase, c.padded_tokens, args.key, microbatch)
        grad = torch.is_grad_enabled() and bool(self.params)
        if call.ran:
            out = call.result
            if call.captured and not rt._in_body_capture:
                self._static_put(skey, ptrs, (out, call.xs))
            if grad:
                kind = "body" if rt._in_body_capture else ("graph" if call.captured else "eager")
                self._records[microbatch] = _Record(call.xs, out, kind)
            return out
        out, xs = self._static_get(skey, ptrs, "forward")
        if grad:
            self._records[microbatch] = _Record(xs, out, "graph")
        return out

    def _forward_cb(self, ctx, args):
        call = self._call
        self._check_addresses(call, args)
        captured = ctx.mode == Mode.CAPTURE
        if torch.is_grad_enabled() and self.params:
            # Each module's autograd graph starts at its own inputs, as make_graphed_callables'.
            xs = tuple(
                x.detach().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
                for x in call.inputs
            )
        else:
            xs = call.inputs
        out = self.module(*xs)
        call.ran = True
        call.captured = captured
        call.result = out
        call.xs = xs

    # -- backward

    def backward(self, ctx, *grad_outputs, microbatch=0, key=None):
        """The gradients of this step's forward inputs (one per input, None where an input needs
        none; the tensor itself for a one-input module); the parameter gradients are accumulated
        into p.grad."""
        rec = self._records.get(microbatch)
        if rec is None:
            raise Error(
                Status.STATE,
                f"module '{self.name}': backward before its forward in this step (microbatch "
                f"{microbatch}), or the forward ran without grad enabled",
            )
        for p in self.params:
            if p.grad is None:
                raise Error(
                    Status.STATE,
                    f"module '{self.name}': a parameter's .grad is None; graphs accumulate into "
                    f"p.grad in place: use optimizer.zero_grad(set_to_none=False)",
                )
        tensors = _tensors(grad_outputs)
        extra = [p.grad for p in self.params]
        args, ptrs = self._args_for(1, tensors, extra, microbatch, key)
        ptrs += tuple(g.data_ptr() for g in extra)
        call = _Call(grad_outputs, ptrs)
        call.rec = rec
        self._call = call
        try:
            self._run(self.rt._lib.cgrt_backward, ctx, args)
        finally:
            self._call = None
        c = ctx._live()
        skey = (1, c.phase, c.padded_tokens, args.key, microbatch)
        if call.ran:
            if call.captured and not self.rt._in_body_capture:
                self._static_put(skey, ptrs, call.grads)
            return call.grads
        return self._static_get(skey, ptrs, "backward")

    def _backward_cb(self, ctx, args):
        call = self._call
        self._check_addresses(call, args)
        rec = call.rec
        captured = ctx.mode == Mode.CAPTURE
        if captured and rec.kind == "eager":
            raise Error(
                Status.STATE,
                f"module '{self.name}': its backward is being captured but its forward ran "
                f"eagerly in this step; a graph must not read the eager forward's memory (give "
                f"forward and backward the same warm-up)",
            )
        outs = _tensors(rec.out)
        inputs = [x for x in _tensors(rec.xs) if x.requires_grad]
        targets = inputs + self.params
        grads = torch.autograd.grad(
            outs,
            targets,
            grad_outputs=_tensors(call.inputs),
            retain_graph=rec.kind == "graph",
            allow_unused=True,
        )
        for p, g in zip(self.params, grads[len(inputs) :]):
            if g is not None:
                p.grad.add_(g)
        it = iter(grads[: len(inputs)])
        result = tuple(
            next(it) if isinstance(x, torch.Tensor) and x.requires_grad else None
            for x in (rec.xs if isinstance(rec.xs, tuple) else (rec.xs,))
        )
        if len(result) == 1:
            result = result[0]
        call.ran = True
        call.captured = captured
        call.grads = result


class Runtime(cgrt.Runtime):
    """A cgrt runtime for PyTorch modules on the cuda driver (`[runtime] driver = cuda`, device =
    torch's current device). Adds `torch_stream` (cgrt's stream as torch.cuda.ExternalStream),
    register_module() and run()."""

    def __init__(self, config=None, *, log=None):
        if not torch.cuda.is_available():
            raise Error(Status.NODEV, "cgrt.torch: torch sees no CUDA device")
        api = pool_api()
        api.check()
        self._pool = None
        self._pool_refs = 0
        self._modules_t = []
        self._body_static = {}
        self._runs = []
        self._in_body_capture = False
        self._step_bufs = {}
        super().__init__(config, log=log)
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.torch_stream = torch.cuda.ExternalStream(self.stream, device=self.device)
        self._thread = threading.get_ident()
        # PyTorch's caching allocator (libc10_cuda.so, in torch's lib directory in its wheels)
        # calls cudaMalloc while cgrt captures, for the pool _capture_begin routes it to: declared,
        # diagnose does not call those allocations suspicious. The file name if not found there.
        import os

        c10 = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10_cuda.so")
        self.set_capture_hooks(
            self._capture_begin,
            self._capture_end,
            pool_allocator=c10 if os.path.exists(c10) else "libc10_cuda.so",
        )
        self.last_report = None

    # -- the pool

    def _capture_begin(self, stream):
        cur = torch.cuda.current_stream(self.device).cuda_stream
        if cur != stream:
            raise Error(
                Status.STATE,
                "cgrt.torch: a capture began while torch's current stream is not cgrt's "
                "(run steps with Runtime.run)",
            )
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        pool_api().begin(self.device.index, self._pool)
        self._pool_refs += 1  # each begin takes a reference; released with the graphs

    def _capture_end(self, stream):
        pool_api().end(self.device.index, self._pool)

    def _drop_pool(self):
        for m in self._modules_t:
            m._static.clear()
            m._records.clear()
        self._body_static.clear()
        self._runs = []
        if self._pool is not None:
            api = pool_api()
            for _ in range(self._pool_refs):
                api.release(self.device.index, self._pool)
        self._pool = None
        self._pool_refs = 0

    def _released_hook(self):
        self._drop_pool()

    def _closed_hook(self):
        self._drop_pool()

    @property
    def pool(self):
        """The private graph pool's handle (torch.cuda.graph_pool_handle()), None before the first
        capture."""
        return self._pool

    # -- modules

    def register_module(
        self,
        name,
        module: torch.nn.Module,
        kind="other",
        layer=-1,
        backward=False,
        declare_params=False,
        no_cp_comm=False,
    ) -> TorchModule:
        """Registers `module` with cgrt as `name` (kind decides whether scoped backends graph
        it). backward=True allows tm.backward() and allocates p.grad for its trainable
        parameters. declare_params=True also declares the parameters as the call's buffers.
        no_cp_comm=True: its calls issue no collectives on the cp communicator (see
        cgrt.Runtime.register)."""
        tm = TorchModule(self, name, module, kind, layer, backward, declare_params, no_cp_comm)
        self._modules_t.append(tm)
        return tm

    # -- steps

    def run(
        self,
        phase,
        tokens=0,
        prepare=None,
        body=None,
        *,
        inputs=(),
        outputs=(),
        seqlens=None,
        microbatches=1,
        cp_size=1,
    ):
        """Runs one step on cgrt's stream and returns what `body(ctx)` returned: when the backend
        replays the whole body, the outputs of its capture (valid until the next step).
        `inputs`/`outputs` are the step's static tensors (prepare writes the inputs; the body
        reads them through the same tensors); cgrt checks them before replaying a whole body.
        The report is in last_report."""
        if body is None:
            raise Error(Status.INVAL, "run: body is required")
        if threading.get_ident() != self._thread:
            raise Error(Status.STATE, "cgrt.torch: drive a runtime from the thread that opened it")
        sig = tuple((t.data_ptr(), t.numel() * t.element_size()) for t in inputs) + tuple(
            (t.data_ptr(), t.numel() * t.element_size(), 0) for t in outputs
        )
        bufs = self._step_bufs.get(sig)
        if bufs is None:
            bl = [_tensor_buffer(t, Access.IN, f"input{i}") for i, t in enumerate(inputs)]
            bl += [_tensor_buffer(t, Access.OUT, f"output{i}") for i, t in enumerate(outputs)]
            bufs = (cgrt._c_buffers(bl) if bl else (), tuple(b.ptr for b in bl))
            if len(self._step_bufs) > 64:
                self._step_bufs.clear()
            self._step_bufs[sig] = bufs
        bufs, ptrs = bufs
        for m in self._modules_t:
            if m._records:
                m._records.clear()
        self._runs = []
        runs = self._runs

        def body_run(ctx):
            c = ctx._live()
            for i, p in enumerate(ptrs):
                if (c.buffers[i].ptr or 0) != p:
                    raise Error(
                        Status.UNSUPPORTED,
                        "cgrt.torch: cgrt handed the body private copies of the step's buffers "
                        "(rebind = copy); use rebind = update, recapture or error",
                    )
            captured = ctx.mode == Mode.CAPTURE
            padded = ctx.padded_tokens
            self._in_body_capture = captured
            try:
                out = body(ctx)
            finally:
                self._in_body_capture = False
            runs.append((padded, captured, out))
            return 0

        caller = torch.cuda.current_stream(self.device)
        switch = caller.cuda_stream != self.stream
        if switch:
            self.torch_stream.wait_stream(caller)
            ctxm = torch.cuda.stream(self.torch_stream)
            ctxm.__enter__()
        try:
            rep = self.step(
                phase,
                tokens,
                prepare,
                body_run,
                buffers=bufs,
                seqlens=seqlens,
                microbatches=microbatches,
                cp_size=cp_size,
            )
        finally:
            if switch:
                ctxm.__exit__(None, None, None)
                caller.wait_stream(self.torch_stream)
        self.last_report = rep
        phase_v = cgrt._enum(cgrt.Phase, phase, "phase")
        # A body captured and not run eagerly right after at the same size (the sign of a failed
        # capture) left its outputs as the graph's static outputs.
        for i, (padded, captured, out) in enumerate(runs):
            if not captured:
                continue
            nxt = runs[i + 1] if i + 1 < len(runs) else None
            if nxt is not None and nxt[0] == padded and not nxt[1]:
                continue
            self._body_static[(phase_v, padded, microbatches, ptrs)] = out
        if runs and not runs[-1][1] and runs[-1][0] == rep.padded_tokens:
            return runs[-1][2]
        key = (phase_v, rep.padded_tokens, microbatches, ptrs)
        if key not in self._body_static:
            raise Error(
                Status.STATE,
                f"cgrt.torch: the body at {rep.padded_tokens} tokens was replayed but no capture "
                f"of it was seen by this runtime",
            )
        return self._body_static[key]
