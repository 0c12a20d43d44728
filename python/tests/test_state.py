"""cgrt._state, the rules cgrt.torch uses to find a module whose calls change Python state that a
graph replay would not (tested on the GPU with transformers' caches in tests/gpu/test_torch.py):
here with plain classes standing in for tensors, caches and modules."""

from cgrt import _state
from cgrt._state import State


class T:
    """Stands in for a tensor: compared by identity, described by its shape."""

    def __init__(self, *shape):
        self.shape = shape


class Layer:
    def __init__(self):
        self.keys = None
        self.is_initialized = False


class DynamicCache:
    """Grows by making a new tensor every call, as transformers' DynamicCache does."""

    def __init__(self, n):
        self.layers = [Layer() for _ in range(n)]

    def update(self, i):
        layer = self.layers[i]
        if not layer.is_initialized:
            layer.keys, layer.is_initialized = T(1, 0), True
        layer.keys = T(1, layer.keys.shape[1] + 1)


class StaticCache(DynamicCache):
    """Allocates once, then updates its tensors in place."""

    def update(self, i):
        layer = self.layers[i]
        if not layer.is_initialized:
            layer.keys, layer.is_initialized = T(1, 8), True


class Module:
    """Stands in for a torch module: never walked into as an argument."""

    def __init__(self):
        self._buffers = {"scale": T(4)}
        self.count = 0

    def __call__(self):
        pass


def taken(cache, mod=None):
    mods = [("module", mod)] if mod is not None else []
    return State([("past_key_values", cache), ("pos", (T(1), T(1)))], mods, tensor=T,
                 opaque=(Module,))


def test_a_cache_that_makes_new_tensors_changes_every_call_after_its_first():
    cache = DynamicCache(2)
    first = taken(cache)
    cache.update(0)
    assert first.changes() == []  # None became a tensor, False True: it initialized itself
    for n in (2, 3):
        s = taken(cache)
        cache.update(0)
        assert s.changes() == [
            f"past_key_values.layers[0].keys: a tensor (1, {n - 1}) became a new tensor (1, {n})"
        ]


def test_a_cache_updated_in_place_never_changes():
    for cache in (StaticCache(2), StaticCache(2)):  # a new one initializes itself: no change
        for _ in range(3):
            s = taken(cache)
            cache.update(1)
            assert s.changes() == []


def test_initialization_is_no_change_but_its_undoing_is():
    class Holder:
        pass

    h = Holder()
    h.flag, h.table, h.items, h.n = False, {}, [], None
    s = State([("h", h)], tensor=T)
    h.flag, h.n, h.new = True, 3, T(1)
    h.table["k"] = T(2)
    h.items.append(T(2))
    assert s.changes() == []
    s = State([("h", h)], tensor=T)
    h.flag, h.n = False, 4
    del h.table["k"]
    del h.new
    h.items.append(T(3))
    assert s.changes() == [
        "h.flag: True became False",
        "h.n: 3 became 4",
        "h.new was removed",
        "h.table['k'] was removed",
        "h.items grew from 1 to 2 items",
    ]


def test_restore_puts_the_state_back_as_it_was():
    cache = DynamicCache(1)
    cache.update(0)
    keys = cache.layers[0].keys
    s = taken(cache)
    cache.update(0)
    cache.layers.append(Layer())
    cache.extra = 1
    s.restore()
    assert cache.layers[0].keys is keys and len(cache.layers) == 1 and not hasattr(cache, "extra")
    assert taken(cache).changes() == []


def test_lists_dicts_and_the_modules_own_attributes():
    class Holder:
        pass

    h = Holder()
    h.seen = [T(2)]
    h.table = {"a": T(3)}
    mod = Module()
    s = State([("h", h)], [("module", mod)], tensor=T)
    h.seen.append(T(2))
    h.table["b"] = T(1)
    del h.table["a"]
    mod.count += 1
    mod.cached = T(5)
    mod._buffers["scale"] = T(4)
    assert s.changes() == [
        "h.seen grew from 1 to 2 items",
        "h.table['a'] was removed",
        "module.count: 0 became 1",
        "module._buffers['scale']: a tensor (4,) became a new tensor (4,)",
    ]
    s.restore()
    assert len(h.seen) == 1 and list(h.table) == ["a"] and mod.count == 0
    assert not hasattr(mod, "cached")


def test_what_is_not_followed():
    class Node:
        pass

    root = Node()
    deep = root
    for _ in range(_state.DEPTH + 2):  # below DEPTH containers: not followed
        deep.next = Node()
        deep = deep.next
    mod = Module()
    root.module = mod  # a module as an argument's attribute: opaque
    root.fn = len  # callables are not walked into
    s = taken(root)
    deep.value = 1
    deep.__dict__.clear()
    mod.count = 5
    assert s.changes() == []
    assert s.full
    big = [[i] for i in range(_state.LIMIT)]
    assert not taken(big).full  # beyond LIMIT values: the rest is not followed


def test_shared_objects_are_followed_once():
    layer = Layer()
    layer.keys = T(1)
    s = State([("a", [layer]), ("b", [layer])], tensor=T)
    layer.keys = T(2)
    assert s.changes() == ["a[0].keys: a tensor (1,) became a new tensor (2,)"]


# ---------------------------------------------------------------- the objects a call comes with


class Cache:
    """Stands in for a KV cache object passed to every layer call."""


def test_the_same_object_keeps_its_number_and_another_gets_its_own():
    from cgrt._state import Generations

    g = Generations()
    a = Cache()
    assert g.of([a]) == (1, None)
    assert g.of([a]) == (1, None)
    b = Cache()
    assert g.of([b]) == (2, None)
    assert g.of([b]) == (2, "another")  # said once, when the other object is met again
    assert g.of([a]) == (1, None) and g.of([b]) == (2, None)
    assert g.of([a, b]) == (3, None)  # a call with both: a number of its own
    assert g.dead() == set()


def test_a_dead_objects_number_is_handed_out_once_and_never_reused():
    import gc

    from cgrt._state import Generations

    g = Generations()
    a = Cache()
    assert g.of([a])[0] == 1
    b = Cache()
    assert g.of([b])[0] == 2
    del a
    gc.collect()
    assert g.dead() == {1}
    assert g.dead() == set()
    c = Cache()  # may sit where the dead one was: a number of its own all the same
    assert g.of([c])[0] == 3
    assert g.of([b])[0] == 2


def test_objects_that_cannot_be_referenced_weakly_are_held():
    from cgrt._state import Generations

    class Slotted:
        __slots__ = ("x",)

    g = Generations()
    s = Slotted()
    assert g.of([s])[0] == 1
    del s  # held by the Generations: its id is not reused, its number stays valid
    assert g.dead() == set()


def test_objects_made_afresh_for_every_call_are_no_longer_followed():
    from cgrt._state import Generations

    class Options:
        pass

    g = Generations()
    cache = Cache()
    assert g.of([cache])[0] == 1 and g.of([cache])[0] == 1
    # each Options dies at once, and the next may sit at its address: a new object all the same
    news = [g.of([cache, Options()]) for _ in range(Generations.FRESH)]
    assert [n for _, n in news] == [None] * (Generations.FRESH - 1) + ["fresh"]
    assert news[-1][0] == 1  # the cache's own number
    assert g.plain_types == {Options} and g.newly_plain == {Options}
    # from then on only the cache counts: its own number again
    assert g.of([cache, Options()]) == (1, None)
    # a new cache per request (used for several calls each) is never taken for that
    for _ in range(10):
        c = Cache()
        first, _ = g.of([c, Options()])
        assert first > 1 and g.of([c, Options()])[0] == first


def test_a_cache_made_for_every_call_is_followed_still():
    """Objects of a type new on every call that hold tensors once their call is over (a cache
    made for each call) stay followed: every call gets a number of its own and is never
    replayed against another call's cache."""
    from cgrt._state import Generations

    def holds(v):
        return any(isinstance(x, T) for x in vars(v).values())

    g = Generations(holds)
    numbers = set()
    for _ in range(3 * Generations.FRESH):  # each dropped by the host after its call
        c = Cache()
        n, news = g.of([c])
        c.keys = T(1, 8)  # its call initializes it
        assert news is None and n not in numbers
        numbers.add(n)
    assert not g.plain_types


def test_tensors_reached_below_the_roots():
    layer = Layer()
    assert not State([("c", layer)], tensor=T).tensors
    layer.keys = T(1)
    assert State([("c", [layer])], tensor=T).tensors
    assert State([("c", ((T(1),),))], tensor=T).tensors  # inside tuples too


class PT(T):
    """Stands in for a tensor with an address."""

    def __init__(self, addr, *shape):
        super().__init__(*shape)
        self.addr = addr

    def data_ptr(self):
        return self.addr


def watch_of(state):
    return _state.Watch((p, live, k, t.data_ptr(), t.shape, True)
                        for p, live, k, t, _ in state.leaves())


def test_leaves_are_the_tensors_reached_with_the_places_that_hold_them():
    cache = StaticCache(2)
    cache.layers[0].keys, cache.layers[1].keys = PT(0x100, 1, 8), PT(0x200, 1, 8)
    mod = Module()
    mod._buffers["scale"] = PT(0x300, 4)
    mod.table = PT(0x400, 2)
    leaves = list(taken(cache, mod).leaves())
    paths = [p for p, _, _, _, _ in leaves]
    # the tuple's tensors are a call's inputs, declared to cgrt, and no place to put another in
    assert paths == [
        "past_key_values.layers[0].keys",
        "past_key_values.layers[1].keys",
        "module.table",
        "module._buffers['scale']",
    ]
    assert [own for _, _, _, _, own in leaves] == [False, False, True, True]
    for p, live, k, t, _ in leaves:
        assert live[k] is t


def test_a_watch_sees_a_place_given_another_tensor():
    cache = StaticCache(2)
    cache.layers[0].keys, cache.layers[1].keys = PT(0x100, 1, 8), PT(0x200, 1, 8)
    w = watch_of(taken(cache))
    assert w.moved() is None
    # transformers' reorder_cache for a beam search: a new tensor, at another address
    cache.layers[1].keys = PT(0x900, 1, 8)
    said = w.moved()
    assert said.startswith("past_key_values.layers[1].keys (a tensor (1, 8) at 0x200")
    assert "now holds a tensor (1, 8) at 0x900" in said
    # another tensor object at the graph's address, of its shape, is what the graph reads
    cache.layers[1].keys = PT(0x200, 1, 8)
    assert w.moved() is None
    # the same address with another shape (a cache cropped by a view) is not
    cache.layers[1].keys = PT(0x200, 1, 4)
    assert "now holds a tensor (1, 4) at 0x200" in w.moved()
    cache.layers[1].keys = None
    assert "now holds a NoneType" in w.moved()
    del cache.layers[1].keys
    assert w.moved().endswith("was removed")
    cache.layers.pop()
    cache.layers[0].keys = PT(0x100, 1, 8)
    assert w.moved() is not None  # the list shrank under the second layer's place


def test_a_watch_can_leave_shapes_alone():
    params = {"weight": PT(0x500, 4, 4)}
    w = _state.Watch([("module.weight", params, "weight", 0x500, (4, 4), False)])
    params["weight"] = PT(0x500, 16)  # param.data reshaped in place: the same memory
    assert w.moved() is None
    params["weight"] = PT(0x600, 4, 4)  # load_state_dict(assign=True), param.data = ...
    assert w.moved().startswith("module.weight (a tensor (4, 4) at 0x500 in the graph)")


def test_shared_places_are_checked_once_a_step():
    layers = [Layer(), Layer()]
    for i, layer in enumerate(layers):
        layer.keys = PT(0x100 * (i + 1), 1, 8)
    shared = _state.Shared([(f"c[{i}].keys", vars(x), "keys", x.keys.data_ptr(), x.keys.shape, True)
                            for i, x in enumerate(layers)])
    own = _state.Watch([], shared)
    other = _state.Watch([], shared)
    assert own.moved(1) is None and other.moved(1) is None
    assert len(own.places()) == 2
    layers[1].keys = PT(0x900, 1, 8)  # within step 1: the step's answer stands
    assert other.moved(1) is None
    said = own.moved(2)  # the next step checks again, once for both
    assert said.startswith("c[1].keys (a tensor (1, 8) at 0x200")
    layers[1].keys = PT(0x200, 1, 8)
    assert other.moved(2) == said  # the same step: not checked again
    assert other.moved(3) is None
    assert other.moved(None) is None  # no step: checked every call
