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
        assert "cgrt_close called from inside a step; close after it" in e.value.message
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
    calls = {
        "close": lambda: rt.close(),
        "synchronize": lambda: rt.synchronize(),
        "release_graphs": lambda: rt.release_graphs(),
        "step": lambda: rt.step("infer", 1, body=lambda c: None),
    }
    for name, call in calls.items():
        rt.step("infer", 1, body=lambda ctx: ctx.enqueue_host(call))
        with pytest.raises(Error) as e:
            rt.synchronize()
        cause = e.value.__cause__
        assert isinstance(cause, Error) and cause.code == Status.STATE, name
        assert "a host function (Ctx.enqueue_host) must not call cgrt" in cause.message
    assert rt.stats().steps == 4  # reading is allowed; the runtime is open
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
