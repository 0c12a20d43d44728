"""Misuse gets a sentence, never memory corruption (issue 38): views kept past their callback,
cgrt called from where it must not be, integers that do not fit their C field, error text said
once. On the host driver."""

import ctypes

import pytest
from conftest import host_ini

import cgrt
from cgrt import Error, Status

D = ctypes.sizeof(ctypes.c_double)


@pytest.fixture
def rt():
    r = cgrt.Runtime(host_ini("none"))
    yield r
    r.close()


def _block(n=4):
    b = (ctypes.c_double * n)()
    return b, ctypes.addressof(b)


# ---------------------------------------------------------------- views kept past their callback


def test_args_and_ctx_kept_by_a_module_raise_after_its_callback(rt):
    kept = []
    m = rt.register("m", "mlp", lambda ctx, args: kept.append((ctx, args, args.buffers)))
    block, addr = _block()
    args = cgrt.Args(key=7, microbatch=0, buffers=[cgrt.Buffer(addr, 32, name="x")])
    rt.step("infer", 1, body=lambda ctx: rt.forward(m, ctx, args))
    ctx, view, copied = kept[0]
    # What was copied during the callback stays.
    assert copied == (cgrt.Buffer(addr, 32, cgrt.Access.INOUT, "x"),)
    for use in (
        lambda: view.buffers,
        lambda: view.buffer_ptr(0),
        lambda: view.num_buffers,
        lambda: view.key,
        lambda: view.microbatch,
    ):
        with pytest.raises(Error) as e:
            use()
        assert e.value.code == Status.STATE
        assert e.value.message == (
            "args of module 'm' forward are valid only during the callback: copy what you keep"
        )
    for use in (lambda: ctx.padded_tokens, lambda: ctx.buffers, lambda: ctx.runtime):
        with pytest.raises(Error) as e:
            use()
        assert e.value.code == Status.STATE
        assert "ctx of module 'm' forward is valid only during the callback" in e.value.message


def test_a_kept_ctx_is_refused_by_forward_and_enqueue_host(rt):
    kept = []
    m = rt.register("m", "mlp", lambda ctx, args: None)

    def body(ctx):
        kept.append(ctx)
        rt.forward(m, ctx)

    rt.step("infer", 1, body=body)
    with pytest.raises(Error) as e:
        rt.forward(m, kept[0])
    assert e.value.code == Status.STATE
    assert "ctx of the step's body is valid only during the callback" in e.value.message
    with pytest.raises(Error) as e:
        kept[0].enqueue_host(lambda: None)
    assert e.value.code == Status.STATE and "the step's body" in e.value.message
    assert rt.step("infer", 1, body=body).mode == cgrt.Mode.EAGER  # and the runtime goes on


def test_a_ctx_of_another_runtime_is_refused(rt):
    other = cgrt.Runtime(host_ini("none"))
    try:
        m = rt.register("m", "mlp", lambda ctx, args: None)
        seen = []

        def body(ctx):
            with pytest.raises(Error) as e:
                rt.forward(m, ctx)
            seen.append(e.value)

        other.step("infer", 1, body=body)
        assert seen[0].code == Status.INVAL and "another runtime" in seen[0].message
    finally:
        other.close()


def test_buffer_ptr_out_of_range_raises_index_error(rt):
    got = []

    def fwd(ctx, args):
        got.append((args.buffer_ptr(0), args.buffer_ptr(-1)))
        for i in (2, -3):
            with pytest.raises(IndexError, match="2 buffer"):
                args.buffer_ptr(i)
        got.append("checked")

    m = rt.register("m", "mlp", fwd)
    block, addr = _block()
    bufs = [cgrt.Buffer(addr, D), cgrt.Buffer(addr + D, D)]
    rt.step("infer", 1, body=lambda ctx: rt.forward(m, ctx, buffers=bufs))
    assert got == [(addr, addr + D), "checked"]


# ---------------------------------------------------------------- cgrt called from where it must not


def test_close_inside_a_step_is_refused_and_the_runtime_stays_open(rt):
    refused = []

    def refuse(where):
        with pytest.raises(Error) as e:
            rt.close()
        assert e.value.code == Status.STATE
        assert "cgrt_close called from inside a step" in e.value.message
        refused.append(where)

    m = rt.register("m", "mlp", lambda ctx, args: refuse("module"))

    def body(ctx):
        refuse("body")
        rt.forward(m, ctx)  # the rest of the step runs
        ctx.enqueue_host(lambda: refused.append("host function ran"))

    rep = rt.step("infer", 3, prepare=lambda ctx: refuse("prepare"), body=body)
    assert rep.padded_tokens == 3 and rep.calls_eager == 1
    rt.synchronize()
    assert refused == ["prepare", "body", "module", "host function ran"]
    assert rt.stats().steps == 1  # open and usable
    rt.close()  # the later close frees the C runtime
    assert rt._rt.value is None
    with pytest.raises(Error, match="the runtime is closed"):
        rt.stats()


def test_a_nested_step_is_refused_and_the_outer_step_goes_on(rt):
    said = []
    m = rt.register("m", "mlp", lambda ctx, args: None)

    def body(ctx):
        with pytest.raises(Error) as e:
            rt.step("infer", 1, body=lambda c: None)
        said.append(e.value)
        rt.forward(m, ctx)
        with pytest.raises(Error):  # still inside the outer step
            rt.close()

    assert rt.step("infer", 1, body=body).calls_eager == 1
    assert said[0].code == Status.STATE and "steps do not nest" in said[0].message
    assert said[0].__cause__ is None


def test_a_host_function_that_calls_cgrt_is_refused(rt):
    m = rt.register("m", "mlp", lambda ctx, args: None)
    calls = {
        "close": lambda: rt.close(),
        "synchronize": lambda: rt.synchronize(),
        "release_graphs": lambda: rt.release_graphs(),
        "release_key": lambda: rt.release_key(m, 0),
        "step": lambda: rt.step("infer", 1, body=lambda c: None),
    }
    for name, call in calls.items():
        rt.step("infer", 1, body=lambda ctx: ctx.enqueue_host(call))
        with pytest.raises(Error) as e:
            rt.synchronize()
        cause = e.value.__cause__
        assert isinstance(cause, Error) and cause.code == Status.STATE, name
        assert "a host function (Ctx.enqueue_host) must not call cgrt" in cause.message
    assert rt.stats().steps == 5  # reading is allowed; the runtime is open
    rt.synchronize()


def test_a_capture_hook_that_calls_cgrt_refuses_the_capture_and_nothing_else(make_model):
    md = make_model(host_ini("local", warmup=1))
    seen = []

    def begin(stream):
        seen.append(md.rt.stream == stream)  # reading is fine
        md.rt.close()

    md.rt.set_capture_hooks(begin, None)
    md.step("infer", 1)
    with pytest.warns(RuntimeWarning, match="the capture begin hook must not call cgrt"):
        rep = md.step("infer", 1)
    assert rep.fallbacks == md.n and seen == [True] * md.n
    md.rt.set_capture_hooks(None, None)
    assert md.step("infer", 1).mode == cgrt.Mode.CAPTURE  # open and usable


def test_a_log_sink_that_calls_cgrt_is_refused_and_said_once():
    lines = []
    holder = []

    def sink(level, msg):
        lines.append(msg)
        if holder:
            holder[0].close()

    ini = "[cuda_graph]\nimpl = local\nwarmup_steps = 1\n[runtime]\ndriver = host\nlog = debug\n"
    rt = cgrt.Runtime(ini, log=sink)
    m = rt.register("m", "mlp", lambda ctx, args: None)
    holder.append(rt)
    with pytest.warns(RuntimeWarning, match="the log sink must not call cgrt") as w:
        for _ in range(3):
            rt.step("infer", 1, body=lambda ctx: rt.forward(m, ctx))  # the capture logs a line
        with pytest.raises(Error) as e:
            rt.config("cuda_graph", "no_such_key")  # its failure logs a line
        assert e.value.code == Status.NOTFOUND
    assert len(w) == 1
    assert any("captured m fwd" in x for x in lines)
    assert rt.stats().steps == 3 and rt.stats().captures == 1  # still open
    holder.clear()
    rt.close()
    assert rt._rt.value is None


def test_every_public_method_called_inside_a_step_is_refused_or_harmless(rt):
    """From the body and from a module callback: what changes the runtime is refused with cgrt's
    sentence, what reads it works, and the step and the runtime go on."""
    m = rt.register("m", "mlp", lambda ctx, args: None)
    said = {}

    def try_all(where, ctx):
        calls = {
            "close": rt.close,
            "step": lambda: rt.step("infer", 1, body=lambda c: None),
            "register": lambda: rt.register(f"x{where}", "mlp", lambda c, a: None),
            "synchronize": rt.synchronize,
            "device_synchronize": rt.device_synchronize,
            "release_graphs": rt.release_graphs,
            "release_key": lambda: rt.release_key(m, 0),
            "set_world_comm": lambda: rt.set_world_comm(None),
            "set_capture_hooks": lambda: rt.set_capture_hooks(None, None),
        }
        if where == "module":
            calls["forward"] = lambda: rt.forward(m, ctx)  # calls do not nest
        for name, call in calls.items():
            with pytest.raises(Error) as e:
                call()
            assert e.value.code == Status.STATE, (where, name, e.value)
            said[(where, name)] = e.value.message
        # Reading is fine.
        assert rt.backend == "none" and rt.stream != 0 and rt.stats().steps == 0
        assert rt.config("cuda_graph", "impl") == "none" and rt.findings() == ()
        rt.log(4, "inside")

    n = rt.register("n", "mlp", lambda ctx, args: try_all("module", ctx))

    def body(ctx):
        try_all("body", ctx)
        rt.forward(m, ctx)
        rt.forward(n, ctx)

    assert rt.step("infer", 1, body=body).calls_eager == 2
    assert len(said) == 19 and all(said.values())
    assert "not allowed inside a step" in said[("module", "device_synchronize")]
    assert "steps do not nest" in said[("body", "step")]
    assert "not inside one" in said[("module", "register")]
    assert "do not nest" in said[("module", "forward")]
    assert [x.name for x in rt.modules] == ["m", "n"]
    rt.synchronize()
    rt.release_graphs()
    assert rt.stats().steps == 1


def test_device_synchronize_is_refused_inside_a_capture_and_breaks_none(rt):
    """A module of one runtime that synchronizes another's device: refused while it is captured
    (Status.CAPTURE, with cgrt's sentence), the capture goes on whole; eager calls pass."""
    rt.device_synchronize()  # between steps: fine
    other = cgrt.Runtime(host_ini("local", warmup=1))
    said = []

    def fwd(ctx, args):
        try:
            rt.device_synchronize()
            said.append(None)
        except Error as e:
            said.append(e)

    m = other.register("m", "mlp", fwd)
    reps = [other.step("infer", 1, body=lambda ctx: other.forward(m, ctx)) for _ in range(3)]
    assert [r.mode for r in reps] == [cgrt.Mode.WARMUP, cgrt.Mode.CAPTURE, cgrt.Mode.REPLAY]
    assert all(r.fallbacks == 0 for r in reps)
    assert said[0] is None  # the warm-up call ran eagerly
    assert said[1].code == Status.CAPTURE and len(said) == 2  # the capture's; the replay runs none
    assert "called while this thread captures" in said[1].message
    other.close()


def test_a_module_of_another_runtime_is_refused_before_cgrt_reads_it(rt):
    other = cgrt.Runtime(host_ini("none"))
    theirs = other.register("theirs", "mlp", lambda ctx, args: None)
    other.close()  # its modules are freed
    errors = []

    def body(ctx):
        for bad, exc in ((theirs, Error), ("theirs", TypeError)):
            with pytest.raises(exc) as e:
                rt.forward(bad, ctx)
            errors.append(e.value)
        with pytest.raises(TypeError, match="args must be a cgrt.Args"):
            rt.forward(mine, ctx, (1, 2))

    mine = rt.register("mine", "mlp", lambda ctx, args: None)
    rt.step("infer", 1, body=body)
    assert errors[0].code == Status.INVAL
    assert errors[0].message == "module 'theirs' is registered with another runtime"
    with pytest.raises(Error, match="must be callable"):
        rt.step("infer", 1, body="body")


# ---------------------------------------------------------------- integers that do not fit their C field


def _refused(exc, *words):
    """The exception's text names every word (the field, the value, the range)."""
    text = str(exc.value)
    assert all(w in text for w in words), text


def test_integers_out_of_their_c_range_are_refused_naming_field_value_and_range(rt):
    m = rt.register("m", "mlp", lambda ctx, args: None)
    body = lambda ctx: rt.forward(m, ctx)  # noqa: E731
    for kw, words in (
        (dict(tokens=2**64 + 4), ("step tokens", str(2**64 + 4), "int64_t", str(2**63 - 1))),
        (dict(tokens=-(2**63) - 1), ("step tokens", "int64_t")),
        (dict(cp_size=2**32 + 1), ("step cp_size", str(2**32 + 1), "int", str(2**31 - 1))),
        (dict(microbatches=2**31), ("step microbatches", "int")),
        (dict(seqlens=[4, 2**32 + 3]), ("step seqlens[1]", str(2**32 + 3), "int32_t")),
    ):
        with pytest.raises(ValueError) as e:
            rt.step("infer", **dict(dict(tokens=1), **kw), body=body)
        _refused(e, *words)
    for kw, words in (
        (dict(key=2**64 + 1), ("Args key", str(2**64 + 1), "uint64_t", str(2**64 - 1))),
        (dict(key=-1), ("Args key", "-1", "uint64_t")),
        (dict(microbatch=2**31), ("Args microbatch", str(2**31), "int")),
    ):
        with pytest.raises(ValueError) as e:
            cgrt.Args(**kw)
        _refused(e, *words)
    with pytest.raises(ValueError) as e:
        rt.register("l", "mlp", lambda c, a: None, layer=2**32 + 3)
    _refused(e, "register('l'): layer", str(2**32 + 3), "int", str(-(2**31)))
    assert [x.name for x in rt.modules] == ["m"]  # nothing registered
    assert rt.stats().steps == 0  # no step ran


def test_buffer_refuses_negative_and_oversized_pointers_and_sizes():
    for args, words in (
        ((4096, -8), ("Buffer bytes", "-8", "size_t")),
        ((4096, 2**64), ("Buffer bytes", str(2**64), "size_t", str(2**64 - 1))),
        ((-8, 8), ("Buffer ptr", "-8", "void *")),
        ((2**64, 8), ("Buffer ptr", str(2**64), "void *")),
        ((4096, 8, 7), ("Buffer access", "7", "in=1", "out=2", "inout=3")),
    ):
        with pytest.raises(ValueError) as e:
            cgrt.Buffer(*args)
        _refused(e, *words)
    with pytest.raises(TypeError, match="Buffer bytes must be an integer, not float"):
        cgrt.Buffer(4096, 8.5)
    with pytest.raises(ValueError, match="NUL"):
        cgrt.Buffer(4096, 8, name="a\0b")
    # The limits themselves are fine, and the access takes its name.
    b = cgrt.Buffer(2**64 - 1, 2**64 - 1, "in")
    assert b.ptr == 2**64 - 1 and b.access == cgrt.Access.IN
    with pytest.raises(ValueError, match="Buffer bytes"):
        cgrt.Args(buffers=[(4096, -8)])  # the tuple form too


def test_the_limits_of_each_c_field_go_through_unchanged(rt):
    seen = []
    m = rt.register("m", "mlp", lambda ctx, args: seen.append((args.key, args.microbatch)),
                    layer=-(2**31))
    block, addr = _block()
    args = cgrt.Args(key=2**64 - 1, microbatch=0, buffers=[(addr, 8)])
    rep = rt.step("infer", 2**62, body=lambda ctx: rt.forward(m, ctx, args))
    assert rep.padded_tokens == 2**62 and seen == [(2**64 - 1, 0)]
    assert m.layer == -(2**31)


def test_floats_and_strings_are_not_integers(rt):
    body = lambda ctx: None  # noqa: E731
    with pytest.raises(TypeError, match="step tokens must be an integer, not float"):
        rt.step("infer", 5.9, body=body)
    with pytest.raises(TypeError, match="Args key must be an integer, not str"):
        cgrt.Args(key="7")
    assert rt.stats().steps == 0


def test_enum_values_out_of_range_name_the_field(rt):
    with pytest.raises(ValueError) as e:
        rt.step(7, 1, body=lambda ctx: None)
    _refused(e, "step phase 7", "train=0", "infer=2")
    with pytest.raises(ValueError) as e:
        rt.register("x", 2**32 + 1, lambda c, a: None)
    _refused(e, "register('x'): kind", str(2**32 + 1), "int")
    with pytest.raises(ValueError) as e:
        rt.register("x", 99, lambda c, a: None)
    _refused(e, "register('x'): kind 99", "attn=0", "other=6")


def test_log_level_and_strings_with_nul_are_refused(rt):
    for level in (0, 5, 2**32 + 2, -1):
        with pytest.raises(ValueError) as e:
            rt.log(level, "hello")
        _refused(e, "log level", str(level))
    with pytest.raises(ValueError, match="NUL"):
        rt.log(2, "cut\0here")
    with pytest.raises(ValueError, match="the module name 'a\\\\x00b' holds a NUL"):
        rt.register("a\0b", "mlp", lambda c, a: None)
    with pytest.raises(ValueError, match="NUL"):
        rt.config("cuda_graph\0", "impl")
    with pytest.raises(ValueError, match="config path"):
        cgrt.Runtime("conf/local.ini\0.bak")
    assert rt.modules == ()


def test_set_world_comm_refuses_a_pointer_out_of_range(rt):
    with pytest.raises(ValueError, match="set_world_comm comm = -1 is out of range"):
        rt.set_world_comm(-1)


def test_step_buffers_as_a_ctypes_array_of_another_type_are_refused(rt):
    wrong = (ctypes.c_int * 4)()
    with pytest.raises(TypeError, match="ctypes array of c_int"):
        rt.step("infer", 1, body=lambda ctx: None, buffers=wrong)
    block, addr = _block()
    right = cgrt._c_buffers([cgrt.Buffer(addr, 8)])
    seen = []
    rt.step("infer", 1, body=lambda ctx: seen.append(ctx.buffers), buffers=right)
    assert seen == [(cgrt.Buffer(addr, 8),)]


def test_what_cgrt_was_given_cannot_change_behind_its_back(rt):
    m = rt.register("m", "mlp", lambda c, a: None, layer=3)
    for name, value in (("layer", 4), ("name", "n"), ("kind", cgrt.Kind.ATTN), ("handle", 5)):
        with pytest.raises(AttributeError, match=f"module 'm': {name} was given to cgrt"):
            setattr(m, name, value)
    with pytest.raises(AttributeError, match="registered without a backward"):
        m.backward = lambda c, a: None
    with pytest.raises(TypeError, match="forward must be callable"):
        m.forward = None
    m.forward = lambda c, a: None  # replacing a callback stays allowed
    args = cgrt.Args(key=1)
    with pytest.raises(AttributeError):
        args.key = 2
    assert args._c.key == 1 and args.key == 1


def test_a_callback_result_that_a_c_int_cannot_hold_fails_the_call(rt):
    m = rt.register("m", "mlp", lambda ctx, args: 2**32)
    with pytest.raises(Error) as e:
        rt.step("infer", 1, body=lambda ctx: rt.forward(m, ctx))
    assert e.value.code == Status.CALLBACK and isinstance(e.value.__cause__, ValueError)
    assert "module 'm' forward returned 4294967296, which a C int cannot hold" in str(e.value)
    with pytest.raises(Error) as e:
        rt.step("infer", 1, body=lambda ctx: 2**32)
    assert e.value.code == Status.CALLBACK and "the step's body returned 4294967296" in str(e.value)
    assert rt.step("infer", 1, body=lambda ctx: "ignored").mode == cgrt.Mode.EAGER


# ---------------------------------------------------------------- error text said once


def _seen(exc):
    """Everything an uncaught exception prints: the chain with its tracebacks."""
    import traceback

    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def test_a_cgrt_error_let_through_a_body_is_said_once(rt):
    m = rt.register("m", "mlp", lambda ctx, args: 5)
    with pytest.raises(Error) as e:
        rt.step("infer", 1, body=lambda ctx: rt.forward(m, ctx))
    sentence = "module 'm' forward returned 5 (step 0, microbatch 0, eager)"
    assert e.value.code == Status.CALLBACK and e.value.message == sentence
    assert str(e.value) == f"{sentence} [CGRT_E_CALLBACK]"
    out = _seen(e.value)
    assert out.count("returned 5") == 1 and out.count("CGRT_E_CALLBACK") == 1, out
    assert "rt.forward(m, ctx)" in out  # the traceback reaches the call that failed


def test_a_module_raising_a_cgrt_error_of_its_own_names_the_call_then_its_sentence(rt):
    """As cgrt.torch does: the call's sentence, then the module's, each code once."""

    def fwd(ctx, args):
        raise Error(Status.STATE, "module 'm': its backward is not ready")

    m = rt.register("m", "mlp", fwd)
    with pytest.raises(Error) as e:
        rt.step("infer", 1, body=lambda ctx: rt.forward(m, ctx))
    text = str(e.value)
    assert text == (
        "module 'm' forward returned 1 (step 0, microbatch 0, eager): module 'm': its backward "
        "is not ready [CGRT_E_STATE] [CGRT_E_CALLBACK]"
    )


def test_prepare_refused_by_forward_says_each_sentence_and_code_once(rt):
    m = rt.register("m", "mlp", lambda ctx, args: None)
    with pytest.raises(Error) as e:
        rt.step("infer", 1, prepare=lambda ctx: rt.forward(m, ctx), body=lambda ctx: None)
    text = str(e.value)
    assert e.value.code == Status.CALLBACK and e.value.__cause__.code == Status.STATE
    for part in ("module calls are made from the step body", "CGRT_E_STATE", "CGRT_E_CALLBACK"):
        assert text.count(part) == 1, text


def test_error_built_around_the_same_error_says_it_once():
    inner = Error(Status.CALLBACK, "module 'm' forward returned 5")
    assert str(Error(Status.CALLBACK, inner.message, inner)) == (
        "module 'm' forward returned 5 [CGRT_E_CALLBACK]"
    )
    other = Error(Status.STATE, "not now")
    assert str(Error(Status.CALLBACK, "the body failed", other)) == (
        "the body failed: not now [CGRT_E_STATE] [CGRT_E_CALLBACK]"
    )
