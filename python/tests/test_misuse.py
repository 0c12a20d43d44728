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
