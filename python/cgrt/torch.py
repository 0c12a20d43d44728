"""cgrt.torch: torch.nn.Modules under a cgrt backend.

    import torch, cgrt.torch as ct
    with ct.Runtime.from_file("conf/local.ini") as rt, torch.cuda.stream(rt.torch_stream):
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
- A module call declares its input tensors to cgrt as buffers (positional and keyword inputs,
  inside tuples and lists too), so a graph is never replayed with inputs that moved. Under
  rebind = auto (the default) an input that moved on 2 of its last 3 calls, and under copy every
  input, is staged as torch's make_graphed_callables does: the graph reads a static tensor this
  adapter owns (allocated from the graph pool) and each call first copies the input into it on
  cgrt's stream (once a step for a tensor handed to several modules); said once per module in
  the log. Under update the call is re-recorded, under error refused. Its outputs are allocated
  by the module inside the capture, from the pool: they are the graph's static outputs, kept
  here and returned by every replay of that graph (valid until the next step, like
  torch.cuda.graph's). A module whose capture fails twice in a row (a synchronize inside it)
  runs eagerly until release_graphs(), and its inputs are no longer staged.
  Parameters are not declared (declare_params=True declares them too): see the next point.
- A replay runs a module's kernels, not its Python: around warm-up and captured calls the Python
  state the call reaches (its non-tensor arguments, such as a KV cache object, and the module's
  attributes and buffers) is compared (cgrt._state). A module whose call replaces a tensor there,
  changes a number or grows a list (transformers' DynamicCache) runs eagerly until
  release_graphs(), said once and listed in rt.eager_modules; a capture where it is found is
  given up with the state put back. The objects a call comes with (a cache) are part of its key
  (_generation): a call with another cache gets graphs recorded against that cache's tensors.
  A graph also holds the addresses of what its capture reached outside its declared inputs: the
  module's parameters and buffers (checked before each call that would replay) and the tensors
  it reached through its objects (a cache's; checked once a step for all the modules that reach
  them, cgrt._state.Shared). One that holds another tensor (a beam search's reorder_cache,
  parameters reassigned) has the module's graphs recorded again at the new addresses the first
  time, and the module run eagerly the second (said, listed in rt.eager_modules); in block
  scope, where a replayed body calls no module, before each step: every graph is released the
  first time, and bodies run eagerly the second.
- Training: a module registered with backward=True records its forward's autograd graph; its
  backward(ctx, *grad_outputs) computes the input gradients and accumulates the parameter
  gradients into p.grad in place (p.grad is allocated at registration: use
  zero_grad(set_to_none=False)). A backward is captured only against a captured forward.
- For the best speed keep what a module reads in place: pass the previous module's output (a
  graph's static output) and compute per-step tables into tensors allocated once; a tensor
  computed afresh in the body costs a copy per step. Captured work must not use CUDA random
  numbers (dropout) or synchronize. A whole-body graph (block scope) replays the body's own
  tensors: its step `inputs` must stay in place (prepare copies new values into them).
"""

import dataclasses
import os
import threading
import weakref

import torch

import cgrt
from cgrt import Access, Buffer, Error, Mode, Status
from cgrt._state import SCALARS, Generations, Shared, State, Watch

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


def _span(t):
    """Elements from t's first to its last in memory (strided and expanded views included)."""
    if t.numel() == 0:
        return 0
    return 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()) if n > 1)


def _detached(inputs, req=None):
    """Inputs cut from their autograd graphs, each needing a gradient where req says (by default
    where the tensor did): a module's autograd graph starts at its own inputs, as
    make_graphed_callables' does."""
    req = req or tuple(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs)
    return tuple(
        x.detach().requires_grad_(r) if isinstance(x, torch.Tensor) else x
        for x, r in zip(inputs, req)
    )


def _tensor_buffer(t, access, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    return Buffer(t.data_ptr(), max(_span(t) * t.element_size(), 1), access, name)


class _Slot:
    """Where a tensor sat among a call's inputs (a placeholder while they are rebuilt)."""

    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


def _walk(v, found):
    if isinstance(v, torch.Tensor):
        found.append(v)
        return _Slot(len(found) - 1)
    nested = (torch.Tensor, tuple, list)
    if isinstance(v, (tuple, list)) and v and any(isinstance(x, nested) for x in v):
        return type(v)(_walk(x, found) for x in v)
    return v


def _fill(v, tensors):
    if isinstance(v, _Slot):
        return tensors[v.i]
    if isinstance(v, (tuple, list)):
        return type(v)(_fill(x, tensors) for x in v)
    return v


def _flatten(inputs, kwargs):
    """The tensors of a call's positional and keyword inputs (inside tuples and lists too), in
    order, and a template to put others in their places (None when the inputs are the tensors)."""
    if not kwargs and all(isinstance(x, torch.Tensor) for x in inputs):
        return inputs, None
    found = []
    args = tuple(_walk(v, found) for v in inputs)
    template = (args, {k: _walk(v, found) for k, v in kwargs.items()})
    return tuple(found), template


def _rebuild(template, inputs, kwargs, tensors):
    if template is None:
        return tuple(tensors), kwargs
    args, kw = template
    return tuple(_fill(v, tensors) for v in args), {k: _fill(v, tensors) for k, v in kw.items()}


# ---------------------------------------------------------------- Python state a call changes

# Values compared by value (with _state.SCALARS), and objects never walked into.
_STATE_KINDS = dict(tensor=torch.Tensor, scalars=(torch.dtype, torch.device),
                    opaque=(torch.nn.Module,))


class _Unreplayable(Exception):
    """Raised in a capture of a module whose calls change Python state (cgrt._state)."""


# Arguments whose Python state is not followed: tensors and values (TorchModule._state_roots);
# with containers, those that are not objects a call holds tensors through (_generation).
_LEAVES = (torch.Tensor, torch.dtype, torch.device) + SCALARS
_PLAIN = _LEAVES + (tuple, list, dict)


def _holds_tensors(v):
    """Whether a tensor is reachable from v, through its lists, dicts and attributes."""
    return State([("v", v)], **_STATE_KINDS).tensors


def _state_of(roots, module):
    """The Python state a call of `module` with these non-tensor arguments can change."""
    mods = [(f"module.{n}" if n else "module", m) for n, m in module.named_modules()]
    return State(roots, mods, **_STATE_KINDS)


def _version(t):
    """t's version counter (raised by every in-place write); None for a tensor that keeps none
    (one made under torch.inference_mode()), which is never taken as unchanged."""
    try:
        return t._version
    except RuntimeError:
        return None



# ---------------------------------------------------------------- staging moved inputs


class _StageKey:
    """One call signature of one module, as the stager follows its inputs."""

    __slots__ = ("last", "moved", "calls", "statics", "failed")

    def __init__(self):
        self.last = None  # the inputs' addresses at the last call
        self.moved = []  # per input: the calls of its last two moves
        self.calls = 0
        self.statics = {}  # input index -> the static tensor its graph reads
        self.failed = 0  # its failed captures in a row (a capture or a replay since: none)


class _Stager:
    """Moved inputs staged into static tensors, as torch's make_graphed_callables does:
    rebind = copy stages every tensor input from the first call; auto stages an input that moved
    on 2 of its last 3 calls (before cgrt's own rule, 3 of 4, would send the key eager: modules
    are registered with stages_inputs). A staged input's graph reads a static tensor the stager
    owns (allocated from the runtime's graph pool); each call copies the input into it on cgrt's
    stream first, unless the static already holds that very tensor in this step (one fresh table
    handed to every layer is copied once a step: layers that switch together share the static).
    A signature whose capture failed UNSTAGE_AFTER times in a row, which cgrt then runs eagerly
    until release_graphs() (its work synchronizes, say), is handed its own tensors: no graph
    reads the statics, so the copies are saved. release_graphs() starts every signature's
    staging over."""

    UNSTAGE_AFTER = 2  # cgrt's own: a key whose capture fails twice in a row stays eager
    KEYS = 512  # signatures followed per module; beyond, the oldest without statics are forgotten

    def __init__(self, rt, policy):
        self.rt = rt
        self.all = policy == "copy"
        self.held = {}  # id(static) -> (static, the tensor it holds this step, its _version)
        # ids of this step's tensors returned by module calls run in warm-up or capture mode, or
        # replayed: outputs that stay in place once their producer replays, never staged
        self.produced = set()
        self.switched = 0  # signatures auto switched to statics
        self.copy_bytes = 0
        self.statics = {}  # id -> static tensor, for staged_bytes

    def step_begins(self):
        self.held.clear()
        self.produced.clear()

    def note_outputs(self, out):
        """A module call's outputs, when its producer is or will be a graph (not eager)."""
        for t in _tensors(out) if not isinstance(out, torch.Tensor) else (out,):
            self.produced.add(id(t))

    def drop(self):
        self.held.clear()
        self.statics.clear()

    def staged_bytes(self):
        return sum(_span(s) * s.element_size() for s in self.statics.values())

    def _alloc_like(self, t):
        """A tensor of t's shape, strides and dtype over memory of its own, from the graph pool."""
        rt = self.rt
        api = pool_api()
        if rt._pool is None:
            rt._pool = torch.cuda.graph_pool_handle()
        routed = False
        try:
            api.begin(rt.device.index, rt._pool)
            rt._pool_refs += 1
            routed = True
        except (RuntimeError, TypeError):
            pass  # this torch cannot route outside a capture: a plain allocation
        try:
            base = torch.empty(max(_span(t), 1), dtype=t.dtype, device=t.device)
        finally:
            if routed:
                api.end(rt.device.index, rt._pool)
        s = base.as_strided(t.shape, t.stride())
        self.statics[id(s)] = s
        return s

    def _static_for(self, t):
        v = _version(t)
        for s, src, version in self.held.values():
            if src is t and version is not None and version == v and s.stride() == t.stride():
                return s  # another module's static holds this very tensor: share it
        return self._alloc_like(t)

    def _copy(self, s, t):
        if s is t:
            return
        h = self.held.get(id(s))
        if h is not None and h[1] is t and h[2] is not None and h[2] == _version(t):
            return
        n = _span(t)
        with torch.no_grad():
            dst = s.as_strided((n,), (1,), s.storage_offset())
            dst.copy_(t.as_strided((n,), (1,), t.storage_offset()), non_blocking=True)
        self.held[id(s)] = (s, t, _version(t))
        self.copy_bytes += n * t.element_size()

    def _forget(self, stage):
        """Makes room among a module's signatures (a host whose shapes change every call would
        add one a call, without end): the older half of those that have no statics, which no
        graph reads, are forgotten (a signature seen again starts over)."""
        idle = [k for k, st in stage.items() if not st.statics]
        for k in idle[: max(1, len(idle) // 2)]:
            del stage[k]

    def stage(self, tm, skey, tensors):
        """The tensors the call hands its module: staged inputs replaced by their statics."""
        st = tm._stage.get(skey)
        if st is None:
            if len(tm._stage) >= self.KEYS:
                self._forget(tm._stage)
            st = tm._stage[skey] = _StageKey()
        st.calls += 1
        n = st.calls
        cur = tuple(t.data_ptr() for t in tensors)
        if st.last is None or len(st.last) != len(cur):
            st.moved = [[0, 0] for _ in cur]
        else:
            for i, (a, b) in enumerate(zip(st.last, cur)):
                if a != b:
                    m = st.moved[i]
                    m[1], m[0] = m[0], n
        st.last = cur
        tm._stage_key = st
        if st.failed >= self.UNSTAGE_AFTER:
            if st.statics:
                st.statics = {}
                if not tm._unstage_said:
                    tm._unstage_said = True
                    self.rt.log(
                        3,
                        f"cgrt.torch: module '{tm.name}': its capture failed "
                        f"{self.UNSTAGE_AFTER} times in a row and cgrt runs it eagerly, so its "
                        f"moved inputs are no longer copied into statics (until "
                        f"release_graphs())",
                    )
            return tensors
        out = None
        fresh = []
        for i, t in enumerate(tensors):
            s = st.statics.get(i)
            if s is None and id(t) in self.produced:
                st.moved[i] = [0, 0]  # another module's output: in place once that one replays
                continue
            if s is None:
                m = st.moved[i]
                if not (self.all or (m[0] == n and m[1] and m[1] >= n - 2)):
                    continue
                s = st.statics[i] = self._static_for(t)
                fresh.append(i)
            elif s.shape != t.shape or s.stride() != t.stride() or s.dtype != t.dtype:
                s = st.statics[i] = self._static_for(t)
            self._copy(s, t)
            if out is None:
                out = list(tensors)
            out[i] = s
        if fresh and not self.all:
            self.switched += 1
        if fresh and not self.all and not tm._stage_said:
            tm._stage_said = True
            what = ", ".join(
                f"input {i} ({tuple(tensors[i].shape)}, {str(tensors[i].dtype)[6:]})"
                for i in fresh
            )
            per_call = sum(_span(tensors[i]) * tensors[i].element_size() for i in fresh)
            self.rt.log(
                2,
                f"cgrt.torch: module '{tm.name}': {what} moved on 2 of its last 3 calls "
                f"(rebind = auto): its graph now reads a static copy, refreshed on cgrt's stream "
                f"before each call (up to {per_call} bytes a call, once a step for a tensor "
                f"handed to several modules); keep the tensor in place (compute it into one "
                f"allocated once, outside the step) to save the copies",
            )
        return tensors if out is None else tuple(out)


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

    __slots__ = (
        "mode",
        "inputs",
        "kwargs",
        "req",
        "ptrs",
        "ran",
        "captured",
        "result",
        "xs",
        "grads",
        "rec",
        "tried",
        "gen",
        "watch",
    )

    def __init__(self, inputs, ptrs, kwargs=None, req=None):
        self.inputs = inputs
        self.kwargs = kwargs or {}
        self.req = req  # requires_grad of the positional inputs as the host gave them
        self.ptrs = ptrs
        self.mode = None
        self.ran = False
        self.captured = False
        self.result = None
        self.xs = None
        self.grads = None
        self.rec = None
        self.tried = False  # a capture of it was tried (its callback ran in capture mode)
        self.gen = 0  # the objects it came with (TorchModule._generation)
        self.watch = None  # a captured call's Watch (TorchModule._watch_of)


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
            stages_inputs=True,  # cgrt.torch stages moved inputs itself (_Stager)
        )
        self._call = None
        self._static = {}  # (dir, phase, padded, key, microbatch) -> {ptrs: value}
        self._args = {}  # signature -> cgrt.Args (reused while addresses stay)
        self._records = {}  # microbatch -> _Record of this step
        self._stage = {}  # call signature -> _StageKey (inputs staged into statics)
        self._stage_said = False  # the staging of its inputs was logged
        self._unstage_said = False  # the end of it, for a module run eagerly, was logged
        self._stage_key = None  # the _StageKey of the call in flight, if staged
        self._gens = Generations(_holds_tensors)  # the objects its calls came with, numbered
        self._checked_gens = set()  # generations whose first call's Python state was compared
        self._effect = None  # why it runs eagerly: its calls change Python state (cgrt._state)
        self._watch = {}  # the key of _static -> Watch: the places its graph reads through state
        self._epoch = 0  # part of every key: raised when a watched place got another tensor
        self._moves = 0  # times a watched place was found holding another tensor

    def __repr__(self):
        return f"cgrt.torch.TorchModule({self.name!r}, {type(self.module).__name__})"

    # -- args

    def _args_for(self, direction, tensors, extra, microbatch, key, gen=0, epoch=0):
        """The cgrt.Args of a call with these tensors, and their addresses (cached by signature:
        the same tensors at the same addresses reuse one Args). gen: the objects the call came
        with (_generation), and epoch (_state_moved), part of the key."""
        ptrs = tuple(t.data_ptr() for t in tensors)
        sig = (direction, microbatch, key, gen, epoch, ptrs)
        sig += tuple((t.shape, t.dtype) for t in tensors)
        if extra:
            sig += tuple(t.data_ptr() for t in extra)
        a = self._args.get(sig)
        if a is None:
            if key is None:
                # The shapes and dtypes are the call's signature: other shapes, other graphs.
                key = hash(tuple((tuple(t.shape), str(t.dtype)) for t in tensors) + (gen, epoch))
                key &= 2**63 - 1
            elif gen or epoch:
                key = hash((key, gen, epoch)) & (2**63 - 1)
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
        rc = fn(rt._handle(), self.handle.handle, rt._ctx_ptr(ctx), args._ref)
        if rc != 0:
            rt._raise_for(rc)

    def _check_addresses(self, call, args):
        for i, p in enumerate(call.ptrs):
            if args.buffer_ptr(i) != p:
                raise Error(
                    Status.UNSUPPORTED,
                    f"module '{self.name}': cgrt handed the call other buffers than its tensors, "
                    f"which a module registered with stages_inputs never gets (a libcgrt older "
                    f"than this package?)",
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

    def _staged(self, direction, ctx, tensors, microbatch, key):
        """The call's tensors, moved inputs replaced by their statics (rebind = auto, copy)."""
        self._stage_key = None
        stager = self.rt._stager
        if stager is None or not tensors:
            return tensors
        c = ctx._live()
        skey = (direction, c.phase, c.padded_tokens, microbatch, key)
        if key is None:
            skey += tuple(t.shape for t in tensors)
        return stager.stage(self, skey, tensors)

    def _count_failed(self, call):
        """After a call: the failed captures in a row of its staging signature (a capture tried
        and the call run eagerly after it; a capture or replay ends the row)."""
        st = self._stage_key
        if st is None:
            return
        if call.tried and call.mode == Mode.EAGER:
            st.failed += 1
        elif call.tried or not call.ran:
            st.failed = 0

    def _state_roots(self, call):
        """A call's arguments whose Python state State follows (not tensors, not numbers)."""
        roots = [(f"input {i}", x) for i, x in enumerate(call.inputs) if not isinstance(x, _LEAVES)]
        roots += [(k, v) for k, v in call.kwargs.items() if not isinstance(v, _LEAVES)]
        return roots

    def _found_unreplayable(self, changed):
        """Its call changed Python state (State.changes): said once, then run eagerly."""
        more = f" and {len(changed) - 2} more" if len(changed) > 2 else ""
        self._run_eagerly(
            f"module '{self.name}': its call changed Python state that a replay of its graph "
            f"would leave as it was ({'; '.join(changed[:2])}{more}), so a replay would compute "
            f"from stale state: it runs eagerly from now on (until release_graphs()); keep such "
            f"state in tensors updated in place to graph it (transformers: a StaticCache, not "
            f"the default DynamicCache)"
        )

    def _run_eagerly(self, why):
        """From now on until release_graphs() its calls run eagerly, outside cgrt (_eager_call):
        said once at warn, listed in rt.eager_modules."""
        self._effect = why
        self.rt._eager_modules[self.name] = why
        self.rt.log(2, "cgrt.torch: " + why)

    def _watch_of(self, state):
        """The Watch of a captured call (cgrt._state.Watch): the module's parameters (unless
        declared) and buffers, checked at each of its calls, and every tensor it reached through
        its objects (state: its State), in a group shared with the other modules that reach the
        same places (cgrt._state.Shared), checked once a step: a layer reaches every layer's
        cache through the cache object, and watching it per call would cost each call the whole
        cache. What it writes there cannot be told from what it only reads (a cross-attention
        cache written once, a host's metadata object): both are in its graph."""
        items, shared, seen = [], [], set()

        def add(to, path, live, k, t, cmp):
            if (id(live), k) not in seen:
                seen.add((id(live), k))
                to.append((path, live, k, t.data_ptr(), t.shape, cmp))

        if state is not None:
            for path, live, k, t, own in state.leaves():
                add(items if own else shared, path, live, k, t, True)
        if not self.declare_params:
            for n, m in self.module.named_modules():
                path = f"module.{n}" if n else "module"
                for pn, p in m._parameters.items():
                    if p is not None:
                        add(items, f"{path}.{pn}", m._parameters, pn, p, False)
        if shared:
            key = tuple((id(live), k, ptr, shape) for _, live, k, ptr, shape, _ in shared)
            group = self.rt._shared.get(key)
            if group is None:
                group = self.rt._shared[key] = Shared(shared)
            return Watch(items, group)
        return Watch(items) if items else None

    def _retire(self, skeys):
        """The graphs of these keys of _static (of a cache that died, of an old epoch) are freed
        before the runtime's next step (Runtime._flush_retired: cgrt_module_release_key), not
        left to max_graphs' eviction."""
        self.rt._retired.extend((self.handle, k[3]) for k in skeys)

    def _state_moved(self, moved):
        """A place its graphs read through Python state holds another tensor (Watch.moved) at a
        call that would replay: its graphs are recorded again at the new addresses (a new epoch
        in its keys) the first time, and it runs eagerly the second. True: run it eagerly."""
        self._moves += 1
        self._watch.clear()
        self._retire(self._static)  # keys no call makes again
        self._static.clear()
        why = (
            f"module '{self.name}': {moved} since its graph's capture; a replay would read and "
            f"write the memory at the old address"
        )
        if self._moves == 1:
            self._epoch += 1
            self.rt.log(
                3,
                f"cgrt.torch: {why}, so its graphs are recorded again at the new addresses (once: "
                f"if it happens again, the module runs eagerly)",
            )
            return False
        self._run_eagerly(
            f"{why}, and it is the second time a tensor it reaches through Python state was "
            f"replaced between its calls (a beam search's reorder_cache, parameters reassigned): "
            f"it runs eagerly from now on (until release_graphs()); update such tensors in place "
            f"(copy_, index_copy_) to graph it"
        )
        return True

    def _eager_call(self, inputs, kwargs, microbatch):
        """A call of a module found to change Python state: run eagerly, outside cgrt (inside a
        body being captured: refused, so that cgrt runs the body eagerly)."""
        if self.rt._in_body_capture:
            raise _Unreplayable(self._effect)
        grad = torch.is_grad_enabled() and bool(self.params)
        xs = _detached(inputs) if grad else inputs
        out = self.module(*xs, **kwargs)
        if grad:
            self._records[microbatch] = _Record(xs, out, "eager")
        return out

    def _generation(self, inputs, kwargs):
        """The objects among a call's arguments (a KV cache), as a number, 0 for none
        (cgrt._state.Generations): part of the call's key, since a graph holds the addresses of
        the tensors its call reached through them. What was kept for objects that died (their
        graphs' outputs, their staging) is dropped here."""
        dead = self._gens.dead()
        if dead:
            self._checked_gens -= dead
            gone = [k for k in self._static if k[-1] in dead]
            self._retire(gone)
            for k in gone:
                del self._static[k]
            for k in [k for k in self._watch if k[-1] in dead]:
                del self._watch[k]
            for k in [k for k in self._stage if isinstance(k[4], tuple) and k[4][1] in dead]:
                del self._stage[k]
        objs = [v for v in kwargs.values() if not isinstance(v, _PLAIN)]
        if inputs:
            objs += [v for v in inputs if not isinstance(v, _PLAIN)]
        if not objs:
            return 0
        gen, news = self._gens.of(objs)
        if news == "another":
            what = ", ".join(type(v).__name__ for v in objs)
            self.rt.log(
                3,
                f"cgrt.torch: module '{self.name}': called with another {what} than at first: "
                f"its graphs hold the addresses of the tensors they reached through such an "
                f"object, so calls with this one get graphs of their own, recorded against its "
                f"tensors (what is kept for an object no longer alive is dropped); reuse such "
                f"objects (a cache reset in place) to replay the same graphs",
            )
        elif news == "fresh":
            kinds = ", ".join(sorted(t.__name__ for t in self._gens.newly_plain))
            self.rt.log(
                3,
                f"cgrt.torch: module '{self.name}': its arguments of type {kinds} were new "
                f"objects on {Generations.FRESH} calls in a row; they are no longer followed (a "
                f"graph reads what it reached through them at the addresses of its capture: keep "
                f"tensors out of such objects)",
            )
        return gen

    def __call__(self, ctx, *inputs, microbatch=0, key=None, **kwargs):
        rt = self.rt
        if self._effect is not None:
            return self._eager_call(inputs, kwargs, microbatch)
        gen = self._generation(inputs, kwargs)
        tensors, template = _flatten(inputs, kwargs)
        staged = self._staged(0, ctx, tensors, microbatch, (key, gen) if gen else key)
        req = None
        if staged is not tensors:
            if torch.is_grad_enabled() and self.params:
                req = tuple(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs)
            inputs, kwargs = _rebuild(template, inputs, kwargs, staged)
            tensors = staged
        extra = self.params if self.declare_params else ()
        args, ptrs = self._args_for(0, tensors, extra, microbatch, key, gen, self._epoch)
        c = ctx._live()
        skey = (0, c.phase, c.padded_tokens, args.key, microbatch, gen)
        watch = self._watch.get(skey)  # set once this key was captured: it would replay
        if watch is not None:
            moved = watch.moved(rt._step_no)
            if moved is not None:
                if self._state_moved(moved):
                    return self._eager_call(inputs, kwargs, microbatch)
                args, ptrs = self._args_for(0, tensors, extra, microbatch, key, gen, self._epoch)
                skey = (0, c.phase, c.padded_tokens, args.key, microbatch, gen)
        call = _Call(inputs, ptrs, kwargs, req)
        call.gen = gen
        self._call = call
        try:
            self._run(rt._lib.cgrt_forward, ctx, args)
        finally:
            self._call = None
        self._count_failed(call)
        grad = torch.is_grad_enabled() and bool(self.params)
        if call.ran:
            out = call.result
            if call.captured and not rt._in_body_capture:
                self._static_put(skey, ptrs, (out, call.xs))
                if call.watch is not None:
                    self._watch[skey] = call.watch
                else:
                    self._watch.pop(skey, None)
            elif rt._body_watching is not None and call.watch is not None:
                rt._body_watching.append((self.name, call.watch))
            if grad:
                kind = "body" if rt._in_body_capture else ("graph" if call.captured else "eager")
                self._records[microbatch] = _Record(call.xs, out, kind)
            if rt._stager is not None and call.mode != Mode.EAGER:
                rt._stager.note_outputs(out)
            return out
        out, xs = self._static_get(skey, ptrs, "forward")
        if rt._stager is not None:
            rt._stager.note_outputs(out)
        if grad:
            self._records[microbatch] = _Record(xs, out, "graph")
        return out

    def _forward_cb(self, ctx, args):
        call = self._call
        self._check_addresses(call, args)
        captured = ctx.mode == Mode.CAPTURE
        call.tried |= captured
        if captured and self._effect is not None:
            raise _Unreplayable(self._effect)  # diagnose's second capture of one given up
        if torch.is_grad_enabled() and self.params:
            # (a staged input needs a gradient if the host's tensor did)
            xs = _detached(call.inputs, call.req)
        else:
            xs = call.inputs
        # Python state is compared around warm-up and captured calls (a replay runs no Python),
        # but for the first call with its objects, where a cache initializes itself (transformers'
        # StaticCache replaces a placeholder tensor, DynamicCache appends a layer)
        state = None
        if captured or ctx.mode == Mode.WARMUP:
            try:
                state = _state_of(self._state_roots(call), self.module)
            except Exception:  # noqa: BLE001 - an object that cannot be looked at: not followed
                state = None
        out = self.module(*xs, **call.kwargs)
        if state is not None:
            first = call.gen not in self._checked_gens
            self._checked_gens.add(call.gen)
            try:
                changed = state.changes() if captured or not first else ()
            except Exception:  # noqa: BLE001
                changed = ()
            if changed:
                self._found_unreplayable(changed)
                if captured:
                    state.restore()  # cgrt runs the call again, eagerly, from the same state
                    raise _Unreplayable(self._effect)
        if captured:
            call.watch = self._watch_of(state)
        call.mode = ctx.mode
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
        if self._effect is not None and rec.kind == "eager":
            return self._grads(rec, grad_outputs)  # its forward ran outside cgrt: so does this
        given = _tensors(grad_outputs)
        tensors = self._staged(1, ctx, given, microbatch, key)
        if tensors is not given:
            it = iter(tensors)
            grad_outputs = tuple(
                next(it) if isinstance(g, torch.Tensor) else g for g in grad_outputs
            )
        extra = [p.grad for p in self.params]
        args, ptrs = self._args_for(1, tensors, extra, microbatch, key, epoch=self._epoch)
        ptrs += tuple(g.data_ptr() for g in extra)
        call = _Call(grad_outputs, ptrs)
        call.rec = rec
        self._call = call
        try:
            self._run(self.rt._lib.cgrt_backward, ctx, args)
        finally:
            self._call = None
        self._count_failed(call)
        c = ctx._live()
        skey = (1, c.phase, c.padded_tokens, args.key, microbatch, 0)
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
        call.tried |= captured
        if captured and rec.kind == "eager":
            raise Error(
                Status.STATE,
                f"module '{self.name}': its backward is being captured but its forward ran "
                f"eagerly in this step; a graph must not read the eager forward's memory (give "
                f"forward and backward the same warm-up)",
            )
        call.grads = self._grads(rec, call.inputs)
        call.ran = True
        call.captured = captured

    def _grads(self, rec, grad_outputs):
        """The input gradients of rec's forward for these output gradients; the parameter
        gradients are accumulated into p.grad."""
        outs = _tensors(rec.out)
        inputs = [x for x in _tensors(rec.xs) if x.requires_grad]
        targets = inputs + self.params
        grads = torch.autograd.grad(
            outs,
            targets,
            grad_outputs=_tensors(grad_outputs),
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
        return result[0] if len(result) == 1 else result


class Runtime(cgrt.Runtime):
    """A cgrt runtime for PyTorch modules on the cuda driver (`[runtime] driver = cuda`, device =
    torch's current device). Adds `torch_stream` (cgrt's stream as torch.cuda.ExternalStream),
    register_module() and run()."""

    def __init__(self, config=None, **kw):
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
        self._eager_modules = {}  # name -> why: modules whose calls change Python state
        self._body_watch = {}  # the key of _body_static -> Watch of the modules it captured
        self._body_watching = None  # during a body's capture: its modules' Watches
        self._shared = weakref.WeakValueDictionary()  # places several modules' Watches share
        self._step_no = 0  # run() calls: Shared places are checked once a step
        self._retired = []  # (Module, args.key) whose graphs no call will replay: freed in run()
        self._body_moves = 0  # times a body's watched place was found holding another tensor
        self._body_eager = None  # why bodies are no longer captured (_body_moved)
        super().__init__(config, **kw)  # path=, ini=, name=, log=, stream= (from_file...)
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.torch_stream = torch.cuda.ExternalStream(self.stream, device=self.device)
        self._thread = threading.get_ident()
        # PyTorch's caching allocator (libc10_cuda.so, in torch's lib directory in its wheels)
        # calls cudaMalloc while cgrt captures, for the pool _capture_begin routes it to: declared,
        # diagnose does not call those allocations suspicious. The file name if not found there.
        c10 = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10_cuda.so")
        self.set_capture_hooks(
            self._capture_begin,
            self._capture_end,
            pool_allocator=c10 if os.path.exists(c10) else "libc10_cuda.so",
        )
        self.last_report = None
        # Moved inputs are staged here, not by cgrt (modules are registered with stages_inputs).
        try:
            policy = self.config("cuda_graph", "rebind")
        except Error:
            policy = "update"  # a libcgrt without cgrt_config_get: no staging
        self._stager = _Stager(self, policy) if policy in ("auto", "copy") else None

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
            m._stage.clear()
            m._effect = None
            m._checked_gens.clear()
            m._watch.clear()
            m._moves = 0
        self._eager_modules.clear()
        if getattr(self, "_stager", None) is not None:
            self._stager.drop()
        self._body_static.clear()
        self._body_watch.clear()
        self._retired = []
        self._body_moves = 0
        self._body_eager = None
        self._runs = []
        if self._pool is not None:
            api = pool_api()
            for _ in range(self._pool_refs):
                api.release(self.device.index, self._pool)
        self._pool = None
        self._pool_refs = 0

    def _flush_retired(self):
        """Frees the graphs of keys no call will make again (TorchModule._retire), between steps:
        each cgrt_module_release_key waits for the stream first (the first of them; the rest find
        it idle). With a libcgrt that lacks it, they are left to max_graphs' eviction."""
        retired, self._retired = self._retired, []
        for module, key in dict.fromkeys(retired):
            try:
                self.release_key(module, key)
            except Error as e:
                if e.code != Status.UNSUPPORTED:
                    raise
                return

    def _body_moved(self, phase, microbatches, ptrs):
        """Before a step that may replay a whole body (block scope): whether a place its modules'
        graphs read through Python state holds another tensor (TorchModule._state_moved; a
        replayed body calls no module, so its watches are checked here, for every token size of
        this phase). The first time every graph is released and recorded again; the second time
        bodies are no longer captured (they run eagerly) until release_graphs()."""
        for (ph, padded, mb, p), watch in self._body_watch.items():
            if ph != phase or mb != microbatches or p != ptrs:
                continue
            moved = watch.moved(self._step_no)
            if moved is None:
                continue
            n = self._body_moves + 1
            self.release_graphs()  # the stale body graphs, and what is kept for them
            self._body_moves = n
            why = (
                f"cgrt.torch: the body's graph at {padded} tokens: module {moved} since its "
                f"capture; a replay would read and write the memory at the old address"
            )
            if n == 1:
                self.log(3, f"{why}, so the graphs are released and recorded again (once: if it "
                            f"happens again, bodies run eagerly)")
            else:
                self._body_eager = (
                    f"{why}, and it is the second time a tensor the body reaches through Python "
                    f"state was replaced between steps: bodies run eagerly from now on (until "
                    f"release_graphs()); update such tensors in place (copy_) to graph them"
                )
                self.log(2, self._body_eager)
            return

    def _released_hook(self):
        self._drop_pool()

    def _closed_hook(self):
        self._drop_pool()

    def stats(self):
        """cgrt's counters, with the inputs this adapter staged: signatures switched to statics
        (rebind_copy_keys), bytes copied into them (copy_bytes), the statics' memory
        (staged_bytes)."""
        s = super().stats()
        st = self._stager
        if st is None:
            return s
        return dataclasses.replace(
            s,
            rebind_copy_keys=s.rebind_copy_keys + st.switched,
            copy_bytes=s.copy_bytes + st.copy_bytes,
            staged_bytes=s.staged_bytes + st.staged_bytes(),
        )

    @property
    def eager_modules(self):
        """{name: why} of the registered modules run eagerly because their calls change Python
        state that a graph replay would not (a cache that makes new tensors every call), until
        release_graphs()."""
        return dict(self._eager_modules)

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
        it). Call it from the body as ``tm(ctx, *inputs, **kwargs)``; its tensors are declared to
        cgrt, and one that moves on most calls is copied into a static before each call
        (rebind = auto or copy): keep inputs in place for the best speed (the previous module's
        output, per-step tables computed into tensors allocated once). backward=True allows
        tm.backward() and allocates p.grad for its trainable parameters. declare_params=True also declares the parameters as the call's buffers.
        no_cp_comm=True: its calls issue no collectives on the cp communicator (see
        cgrt.Runtime.register)."""
        if self._in_step:  # before TorchModule allocates gradients for a module cgrt refuses
            raise Error(
                Status.STATE,
                f"register_module('{name}'): register modules before or between steps, not "
                "inside one",
            )
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
        if self._in_step:  # before the outer step's records and staging are reset below
            raise Error(
                Status.STATE,
                "run() called from inside a step (prepare, body or a module); steps do not nest",
            )
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
        phase_v = cgrt._enum(cgrt.Phase, phase, "phase")
        self._step_no += 1
        if self._retired:
            self._flush_retired()
        if self._body_watch:
            self._body_moved(phase_v, microbatches, ptrs)
        for m in self._modules_t:
            if m._records:
                m._records.clear()
        if self._stager is not None:
            self._stager.step_begins()
        self._runs = []
        runs = self._runs

        def body_run(ctx):
            c = ctx._live()
            for i, p in enumerate(ptrs):
                if (c.buffers[i].ptr or 0) != p:
                    raise Error(
                        Status.UNSUPPORTED,
                        "cgrt.torch: cgrt handed the body private copies of the step's buffers, "
                        "which a step run with stages_inputs never gets (a libcgrt older than "
                        "this package?)",
                    )
            captured = ctx.mode == Mode.CAPTURE
            padded = ctx.padded_tokens
            if captured and self._body_eager is not None:
                raise _Unreplayable(self._body_eager)  # cgrt runs the body eagerly instead
            self._in_body_capture = captured
            self._body_watching = [] if captured else None
            try:
                out = body(ctx)
                watch = self._body_watching
            finally:
                self._in_body_capture = False
                self._body_watching = None
            runs.append((padded, captured, out, watch))
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
                stages_inputs=True,  # the body reads its own tensors, never private copies
            )
        finally:
            if switch:
                ctxm.__exit__(None, None, None)
                caller.wait_stream(self.torch_stream)
        self.last_report = rep
        # A body captured and not run eagerly right after at the same size (the sign of a failed
        # capture) left its outputs as the graph's static outputs.
        for i, (padded, captured, out, watch) in enumerate(runs):
            if not captured:
                continue
            nxt = runs[i + 1] if i + 1 < len(runs) else None
            if nxt is not None and nxt[0] == padded and not nxt[1]:
                continue
            self._body_static[(phase_v, padded, microbatches, ptrs)] = out
            items, seen = [], set()
            for n, w in watch:
                for it in w.places():
                    if (id(it[1]), it[2]) not in seen:  # a cache's places, shared by its layers
                        seen.add((id(it[1]), it[2]))
                        items.append((f"'{n}': {it[0]}",) + it[1:])
            if items:
                self._body_watch[(phase_v, padded, microbatches, ptrs)] = Watch(items)
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
