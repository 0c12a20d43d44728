"""What a module call changes in Python, which a replay of its graph would not: cgrt.torch's check
(a graph replays the call's kernels, not its Python). Free of torch, so that its rules are tested
without it; cgrt.torch passes torch's types in.

State(roots, modules, tensor=..., scalars=..., opaque=...) is taken before a call and compared
after it (changes()); restore() puts it back, for a capture that is given up. It follows:
- the lists, dicts and objects reachable from `roots` ((name, value) pairs: the call's non-tensor
  arguments, such as a KV cache object), up to DEPTH containers below each root (a cache, its list
  of layers, a layer, its attributes), LIMIT values at most;
- the public attributes and the `_buffers` dict of each of `modules` ((path, module) pairs: the
  module and its submodules), one level deep.

A change is a tensor or object replaced by another (compared by identity: transformers'
DynamicCache concatenates its keys and values into new tensors every call), a number or string
that changed, a list that grew or shrank, a key or attribute removed. Initialization is not: a
value that was None, a flag that went from False to True, a key or attribute added, a list that
was empty (a cache that allocates its tensors at its first call, as StaticCache does, each time
a new one is used). A tensor updated in place is no change either: its graph repeats the update.
"""

import types
import weakref

SCALARS = (type(None), bool, int, float, complex, str, bytes)
LIMIT = 4096  # containers and values looked at in one State
DEPTH = 4  # containers followed below a root


def _public(obj):
    return {k: v for k, v in vars(obj).items() if not (isinstance(k, str) and k.startswith("__"))}


class _Attrs:
    """A module's public attributes, as a container State compares and restores."""

    __slots__ = ("m",)

    def __init__(self, m):
        self.m = m

    def items(self):
        return {k: x for k, x in vars(self.m).items() if not k.startswith("_")}

    def put(self, before):
        d = vars(self.m)
        for k in [k for k in d if not k.startswith("_") and k not in before]:
            del d[k]
        d.update(before)


class State:
    __slots__ = ("saved", "full", "tensor", "scalars", "tensors", "reached")

    def __init__(self, roots, modules=(), tensor=(), scalars=(), opaque=()):
        self.tensor = tensor
        self.scalars = SCALARS + tuple(scalars)
        self.saved = []  # (path, container, {key: value} as it was), in the order walked
        self.full = True  # False: LIMIT was reached, what lies beyond is not followed
        self.tensors = False  # a tensor was reached below the roots
        leaves = (tensor,) + self.scalars if tensor else self.scalars
        seen = set()
        stack = [(name, v, 0) for name, v in reversed(list(roots))]
        n = 0
        while stack:
            path, v, depth = stack.pop()
            if isinstance(v, leaves) or id(v) in seen:
                continue
            if isinstance(v, tuple):  # immutable: only what it holds can change
                items = dict(enumerate(v))
            elif isinstance(v, list):
                items = dict(enumerate(v))
                self.saved.append((path, v, items))
            elif isinstance(v, dict):
                items = dict(v)
                self.saved.append((path, v, items))
            elif (
                hasattr(v, "__dict__")
                and not callable(v)  # functions, classes, modules of torch (opaque anyway)
                and not isinstance(v, (types.ModuleType,) + tuple(opaque))
            ):
                items = _public(v)
                self.saved.append((path, v, items))
            else:
                continue
            seen.add(id(v))
            n += 1 + len(items)
            if n > LIMIT:
                self.full = False
                break
            if tensor and not self.tensors:
                self.tensors = any(isinstance(x, tensor) for x in items.values())
            if depth < DEPTH:
                fmt = ".{}" if not isinstance(v, (tuple, list, dict)) else "[{!r}]"
                for k, x in reversed(list(items.items())):
                    if not isinstance(x, leaves):
                        stack.append((path + fmt.format(k), x, depth + 1))
        self.reached = len(self.saved)  # saved[:reached] came from the roots, the rest: modules'
        for path, m in modules:
            self.saved.append((path, _Attrs(m), _Attrs(m).items()))
            bufs = getattr(m, "_buffers", None)
            if isinstance(bufs, dict):
                self.saved.append((path + "._buffers", bufs, dict(bufs)))

    def leaves(self):
        """(path, live, key, tensor, own) for each tensor State reached: in its objects' lists,
        dicts and attributes and the modules' attributes and buffers (own: a module's); live is
        the list or dict that holds it (an object's __dict__), so that live[key] reads what is
        there now."""
        for i, (path, c, before) in enumerate(self.saved):
            if isinstance(c, _Attrs):
                live, fmt = vars(c.m), ".{}"
            elif isinstance(c, (list, dict)):
                live, fmt = c, "[{!r}]"
            else:
                live, fmt = vars(c), ".{}"
            for k, v in before.items():
                if self.tensor and isinstance(v, self.tensor):
                    yield path + fmt.format(k), live, k, v, i >= self.reached

    def _same(self, a, b):
        return a is b or (type(a) is type(b) and isinstance(a, self.scalars) and a == b)

    def _describe(self, v):
        if self.tensor and isinstance(v, self.tensor):
            return f"a tensor {tuple(v.shape)}"
        if isinstance(v, self.scalars):
            return repr(v)[:40]
        return f"a {type(v).__name__}"

    @staticmethod
    def _initial(old, new):
        return old is None or (old is False and new is True)

    def changes(self):
        """What the call changed beyond initialization, a phrase each, in the order walked."""
        out = []
        for path, c, before in self.saved:
            if isinstance(c, _Attrs):
                now = c.items()
            elif isinstance(c, (list, dict)):
                now = dict(enumerate(c)) if isinstance(c, list) else c
            else:
                now = _public(c)
            if isinstance(c, list) and len(now) != len(before):
                if before:
                    how = "grew" if len(now) > len(before) else "shrank"
                    out.append(f"{path} {how} from {len(before)} to {len(now)} items")
                continue
            fmt = "[{!r}]" if isinstance(c, (list, dict)) else ".{}"
            for k, old in before.items():
                if k not in now:
                    out.append(f"{path}{fmt.format(k)} was removed")
                elif not self._same(old, now[k]) and not self._initial(old, now[k]):
                    new = self._describe(now[k])
                    new = "a new " + new[2:] if new.startswith("a ") else new
                    out.append(f"{path}{fmt.format(k)}: {self._describe(old)} became {new}")
        return out

    def restore(self):
        """Puts every container followed back as it was when this State was taken."""
        for _, c, before in self.saved:
            if isinstance(c, _Attrs):
                c.put(before)
            elif isinstance(c, list):
                c[:] = [before[i] for i in range(len(before))]
            elif isinstance(c, dict):
                c.clear()
                c.update(before)
            else:
                d = vars(c)
                for k in [k for k in d if k not in before and not str(k).startswith("__")]:
                    del d[k]
                d.update(before)


class Generations:
    """Which objects a module's calls come with (a KV cache among their arguments), as a number:
    cgrt.torch makes it part of a call's key, because a graph holds the addresses of the tensors
    its call reached through those objects. The same objects again give the same number (a cache
    reset in place finds its graphs); others give a new one (a new cache gets graphs recorded
    against its tensors). Objects are followed by weak reference: the numbers of objects that died
    are handed out once by dead(), for the caller to drop what it kept for them, and a later
    object at the same address gets a new number. Objects that are new on FRESH calls in a row are
    taken as made afresh for every call: their types are no longer followed, else no call of
    such a host would ever repeat a key; unless the last such object held tensors once its call
    was over (a cache made for every call: followed still, so never replayed)."""

    FRESH = 4

    __slots__ = ("_gens", "_refs", "_next", "_died", "_gone", "_run", "_said", "_last", "_holds",
                 "plain_types", "newly_plain")

    def __init__(self, holds_tensors=lambda v: False):
        self._holds = holds_tensors  # whether a tensor is reachable from an object
        self._gens = {}  # the objects' ids -> number
        self._refs = {}  # number -> (ids, weak references, or objects that cannot have one)
        self._next = 1
        self._died = []  # numbers whose objects died, appended by the references' callbacks
        self._gone = set()  # numbers forgotten here, not yet handed out by dead()
        self._run = {}  # type -> calls in a row that came with an object of it not seen before
        self._last = []  # the new objects of the last call, held until the next one
        self._said = False
        self.plain_types = set()  # types found made afresh for every call
        self.newly_plain = set()  # those of them the last "fresh" news added

    def of(self, objs):
        """(number, news) for a call with these objects (its arguments that are not tensors,
        numbers or containers): news is None, "another" (objects other than the first ones,
        met again: once) or "fresh" (objects of a type new on FRESH calls in a row: that type is
        no longer followed, and the number is the rest's)."""
        if self._died:
            self._forget()  # before any lookup: a new object may sit at a dead one's address
        if self.plain_types:
            objs = [v for v in objs if type(v) not in self.plain_types]
        if not objs:
            return 0, None
        ids = tuple(map(id, objs))
        gen = self._gens.get(ids)
        if gen is not None:
            self._run.clear()
            self._last = []
            if gen > 1 and not self._said:
                self._said = True
                return gen, "another"
            return gen, None
        known = {i for seen in self._gens for i in seen}
        new = [v for v in objs if id(v) not in known]
        self._run = {t: self._run.get(t, 0) + 1 for t in {type(v) for v in new}}
        fresh = {t for t, n in self._run.items() if n >= self.FRESH}
        # a type whose last object held tensors after its call holds state its graphs would use
        fresh -= {type(v) for v in self._last if type(v) in fresh and self._holds(v)}
        self._last = new
        if fresh:
            self.plain_types |= fresh
            self.newly_plain = fresh
            gen, _ = self.of(objs)
            return gen, "fresh"
        gen = self._next
        self._next += 1
        refs = []
        for v in objs:
            try:
                refs.append(weakref.ref(v, lambda _r, g=gen, died=self._died: died.append(g)))
            except TypeError:
                refs.append(v)  # held instead: its id is never reused while it is followed
        self._gens[ids] = gen
        self._refs[gen] = (ids, refs)
        return gen, None

    def _forget(self):
        died = set(self._died)
        del self._died[:]
        for g in died:
            ids, _ = self._refs.pop(g, ((), ()))
            if self._gens.get(ids) == g:
                del self._gens[ids]
        self._gone |= died

    def dead(self):
        """The numbers whose objects died since the last call of dead(), forgotten here: they
        never come back (an empty set most of the time)."""
        if self._died:
            self._forget()
        gone, self._gone = self._gone, set()
        return gone


class Watch:
    """Where a captured call's graph reads and writes the tensors it reached through Python state
    rather than through its declared inputs: a cache's tensors, the module's parameters and
    buffers. The graph holds their addresses, so a replay is right only while the same places
    (a cache layer's `keys`, a module's `weight`) still hold tensors at those addresses, of those
    shapes. A host that puts another tensor there between calls (transformers' reorder_cache for
    a beam search: `self.keys = self.keys.index_select(0, beam_idx)`; load_state_dict(assign=True);
    `param.data = ...`) would have the graph read and write the old memory: moved() says where,
    before a replay. Addresses, not identities, are compared: a new tensor at the old address, of
    the old shape, is what the graph reads.

    items: (path, live, key, address, shape, compare_shape) each, live the list or dict holding
    the tensor (State.leaves); a tensor is anything with data_ptr() and shape. shared: places it
    shares with other Watches (Shared), checked once a step for all of them."""

    __slots__ = ("items", "shared")

    def __init__(self, items, shared=None):
        self.items = tuple(items)
        self.shared = shared

    def places(self):
        """Its items and its shared ones."""
        return self.items + (self.shared.watch.items if self.shared is not None else ())

    def moved(self, step=None):
        """None while every place holds its tensor; else a phrase naming the first that does not.
        step: the caller's step number, for the shared places (checked once a step).
        (About 2 us for a Llama layer's 11 places on an H100; a comprehension was no faster.)"""
        for path, live, key, ptr, shape, cmp in self.items:
            try:
                t = live[key]
            except LookupError:
                return f"{path} (a tensor {tuple(shape)} at {ptr:#x} in the graph) was removed"
            try:
                if t.data_ptr() == ptr and (not cmp or t.shape == shape):
                    continue
                now = f"a tensor {tuple(t.shape)} at {t.data_ptr():#x}"
            except (AttributeError, TypeError):
                now = f"a {type(t).__name__}"
            return f"{path} (a tensor {tuple(shape)} at {ptr:#x} in the graph) now holds {now}"
        return self.shared.moved(step) if self.shared is not None else None


class Shared:
    """Places the graphs of several modules reach through the same objects, checked at most once
    a step for all of them: a KV cache's tensors, every one of which each layer reaches through
    the cache object (what a layer writes cannot be told from what it only reads). Checked per
    call, that would cost a step O(layers²) checks; shared, O(layers)."""

    __slots__ = ("watch", "step", "said", "__weakref__")

    def __init__(self, items):
        self.watch = Watch(items)
        self.step = None
        self.said = None

    def moved(self, step):
        """Watch.moved, once per step (None: every call)."""
        if step is None or step != self.step:
            self.step = step
            self.said = self.watch.moved()
        return self.said
