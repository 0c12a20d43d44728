"""What the package offers of the C API added for issue 39, on the host driver: the backend and
what each phase gets (cgrt_backend_info), the live graphs one by one (cgrt_graph_list), what a
release freed (cgrt_release_graphs_ex), the host's stream at open (cgrt_open_options.stream), and
the small rest (log sink replaced, findings cleared, stream-ordered temporaries, THD metadata)."""

import ctypes
import dataclasses

import pytest
from conftest import host_ini

import cgrt
from cgrt import BackendCaps, Direction, Error, LogLevel, Mode, Phase, PhaseRun, Status

FULL = "[host]\nnan_check = off\n"  # full_iteration graphs the whole step: the host declares it

# What cgrt_backend_info says of each backend (backends/*/ caps): every phase runs under every
# backend, a phase without a form of the backend's own eagerly in cgrt.
PHASES = {
    "none": (PhaseRun.EAGER, PhaseRun.EAGER, PhaseRun.EAGER),
    "local": (PhaseRun.GRAPHS, PhaseRun.GRAPHS, PhaseRun.GRAPHS),
    "transformer_engine": (PhaseRun.GRAPHS, PhaseRun.GRAPHS, PhaseRun.CORE_EAGER),
    "full_iteration": (PhaseRun.GRAPHS, PhaseRun.GRAPHS, PhaseRun.GRAPHS),
    "dynamic_cp": (PhaseRun.GRAPHS, PhaseRun.GRAPHS, PhaseRun.GRAPHS),
}

# ---------------------------------------------------------------- backend_info


@pytest.mark.parametrize("impl", sorted(PHASES))
def test_backend_info_names_the_backend_its_caps_and_each_phase(impl):
    with cgrt.Runtime(host_ini(impl, FULL)) as rt:
        info = rt.backend_info()
        assert info.name == impl == rt.backend
        assert info.path.endswith(f"libcgrt-backend-{impl}.so")
        assert isinstance(info.caps, BackendCaps)
        assert info.phases == dict(zip(Phase, PHASES[impl]))
        assert all(type(r) is PhaseRun for r in info.phases.values())
        assert (BackendCaps.GRAPHS in info.caps) == (impl != "none")
        assert (BackendCaps.INFERENCE in info.caps) == (impl != "transformer_engine")
        assert (BackendCaps.COMM in info.caps) == (impl == "dynamic_cp")
        assert (BackendCaps.BUCKETS in info.caps) == (impl in ("local", "full_iteration"))
        with pytest.raises(dataclasses.FrozenInstanceError):
            info.name = "other"


def test_backend_caps_keep_bits_this_package_does_not_name():
    caps = BackendCaps((1 << 40) | BackendCaps.GRAPHS)
    assert BackendCaps.GRAPHS in caps and int(caps) == (1 << 40) | 8


def test_backend_info_is_readable_from_inside_a_step():
    with cgrt.Runtime(host_ini("transformer_engine")) as rt:
        seen = []
        rt.step("infer", 1, body=lambda ctx: seen.append(rt.backend_info().phases[ctx.phase]))
        assert seen == [PhaseRun.CORE_EAGER]
        assert rt.stats().eager_phase_steps == 1


def test_backend_figures_are_the_backends_own_counts():
    ini = host_ini("local", "[inference]\nbuckets = list\nlist = 4 8\nmax_tokens = 8")
    with cgrt.Runtime.from_ini(ini) as rt:
        for tokens in (3, 20, 8, 30):
            rt.step("infer", tokens, body=lambda ctx: None)
        figures = rt.backend_figures()
        assert figures["infer_steps_above_buckets"] == 2  # 20 and 30 ran eagerly
        assert set(figures) >= {"bucket_sets_followed", "graphs_retired_with_their_bucket"}
    with cgrt.Runtime.from_ini(host_ini("none")) as rt:
        assert rt.backend_figures() == {}


def test_stats_text_is_cgrt_stats_format():
    import json

    with cgrt.Runtime(host_ini("transformer_engine")) as rt:
        for _ in range(3):
            rt.step("infer", 2, body=lambda ctx: None)
        st = rt.stats()
        doc = json.loads(rt.stats_text(json=True))
        assert doc["steps"] == st.steps == 3
        assert doc["eager_phase_steps"] == st.eager_phase_steps == 3
        assert doc["steps_by_mode"]["eager"] == 3
        assert "padded_tokens" not in doc and doc["padding_tokens"] == st.padding_tokens
        text = rt.stats_text()
        assert "\nsteps 3\n" in text and text.startswith("steps_by_mode: eager 3")


# ---------------------------------------------------------------- graphs


def test_graphs_lists_every_live_graph_with_every_field(make_model):
    md = make_model(host_ini("local", warmup=1))
    for _ in range(3):
        md.step("train", 4)
        bucket = md.step("infer", 3).padded_tokens
    graphs = md.rt.graphs()
    assert isinstance(graphs, tuple)
    s = md.rt.stats()
    assert len(graphs) == s.live_graphs == 3 * 2 + 3  # fwd and bwd in train, fwd in infer
    assert sum(g.bytes for g in graphs) == s.graph_bytes
    assert sum(g.nodes for g in graphs) == s.graph_nodes
    want = {f.name for f in dataclasses.fields(cgrt.GraphInfo)}
    assert want == {f for f, _ in cgrt._lib.CGraphInfo._fields_} - {"struct_size"}
    by = {(g.module, g.dir, g.phase): g for g in graphs}
    assert set(by) == {
        (f"layer{i}", d, p)
        for i in range(3)
        for d, p in (
            (Direction.FORWARD, Phase.TRAIN),
            (Direction.BACKWARD, Phase.TRAIN),
            (Direction.FORWARD, Phase.INFER),
        )
    }
    g = by[("layer1", Direction.BACKWARD, Phase.TRAIN)]
    assert type(g.dir) is Direction and type(g.phase) is Phase
    assert g.name == "layer1 bwd, train, key 0" and g.microbatch == 0 and g.shape == 0
    assert g.bytes == g.pool_bytes + g.exec_bytes and g.nodes == 1
    assert g.replays == 1 and g.last_use == 4  # captured in step 2 (train), replayed in step 4
    infer = by[("layer0", Direction.FORWARD, Phase.INFER)]
    assert infer.extra == bucket == 8  # local keys infer graphs by their token bucket
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.replays = 0


def test_graphs_of_a_whole_body_have_no_module(make_model):
    md = make_model(host_ini("local", "inference_scope = block", warmup=1))
    for _ in range(3):
        md.step("infer", 2)
    (g,) = md.rt.graphs()
    assert g.module is None and g.phase == Phase.INFER and g.replays == 1
    assert g.name.startswith("body, infer")


def test_graphs_is_refused_inside_a_step_and_from_a_host_function(make_model):
    md = make_model(host_ini("local", warmup=1))
    said = []

    def body(ctx):
        with pytest.raises(Error) as e:
            md.rt.graphs()
        said.append(e.value)
        ctx.enqueue_host(md.rt.graphs)

    md.rt.step("infer", 1, body=body)
    assert said[0].code == Status.STATE and "not allowed inside a step" in said[0].message
    with pytest.raises(Error) as e:
        md.rt.synchronize()
    assert e.value.__cause__.code == Status.STATE
    assert "a host function (Ctx.enqueue_host) must not call cgrt" in e.value.__cause__.message
    assert md.rt.graphs() == ()


# ---------------------------------------------------------------- release_graphs


def test_release_graphs_reports_what_it_freed(make_model):
    md = make_model(host_ini("local", warmup=1))
    for _ in range(3):
        md.step("infer", 1)
    before = md.rt.stats()
    graphs = md.rt.graphs()
    rep = md.rt.release_graphs()
    assert isinstance(rep, cgrt.ReleaseReport)
    assert rep.graphs == len(graphs) == before.live_graphs == 3
    assert rep.bytes == sum(g.bytes for g in graphs) == before.graph_bytes
    assert rep.nodes == before.graph_nodes == 3
    assert (rep.pool_reserved_before, rep.pool_reserved_after) == (0, 0)  # no pool on the host
    assert md.rt.graphs() == () and md.rt.stats().live_graphs == 0
    empty = md.rt.release_graphs()
    assert (empty.graphs, empty.bytes, empty.nodes) == (0, 0, 0)


def test_release_key_frees_one_modules_graphs_of_that_key(make_model):
    md = make_model(host_ini("local", warmup=1), backward=False)
    for _ in range(3):
        md.step("infer", 1)
    assert len(md.rt.graphs()) == 3
    assert md.rt.release_key(md.mods[0], 0) == 1
    assert sorted(g.module for g in md.rt.graphs()) == ["layer1", "layer2"]
    assert md.rt.release_key(md.mods[0], 0) == 0
    assert md.rt.release_key(md.mods[1], 7) == 0  # a key it never had
    del md.runs[:]
    md.step("infer", 1)  # layer0 warms up again; the others replay
    assert md.runs == [(0, Mode.WARMUP)]
    assert md.out(0) == 2 * 1.0 + 1 and md.out(2) == 2 * 3.0 + 1
    md.step("infer", 1)
    assert md.runs[-1] == (0, Mode.CAPTURE) and len(md.rt.graphs()) == 3


def test_release_key_refuses_misuse(make_model):
    md = make_model(host_ini("local", warmup=1))
    other = make_model(host_ini("local", warmup=1))
    with pytest.raises(TypeError, match="expected a cgrt.Module"):
        md.rt.release_key("layer0", 0)
    with pytest.raises(Error) as e:
        md.rt.release_key(other.mods[0], 0)
    assert e.value.code == Status.INVAL and "another runtime" in e.value.message
    with pytest.raises(ValueError, match="release_key key = -1 is out of range"):
        md.rt.release_key(md.mods[0], -1)
    seen = []

    def body(ctx):
        try:
            md.rt.release_key(md.mods[0], 0)
        except Error as err:
            seen.append(err)

    md.rt.step("infer", 1, None, body)
    assert seen and seen[0].code == Status.STATE, seen


# ---------------------------------------------------------------- the host's stream


def test_a_host_stream_is_refused_on_the_host_driver_with_cgrts_sentence():
    with pytest.raises(Error) as e:
        cgrt.Runtime(host_ini("none"), stream=0x1000)
    assert e.value.code == Status.INVAL
    assert e.value.message.startswith("cgrt_open_options.stream: the host driver")
    assert "leave stream NULL, or use driver = cuda" in e.value.message
    with cgrt.Runtime(host_ini("none"), stream=None) as rt:  # None and 0: cgrt's own
        assert rt.stream != 0
    with cgrt.Runtime(host_ini("none"), stream=0) as rt:
        assert rt.stream != 0


def test_a_stream_must_be_an_integer_that_fits_a_pointer():
    with pytest.raises(ValueError, match="Runtime stream = -1 is out of range"):
        cgrt.Runtime(host_ini("none"), stream=-1)
    with pytest.raises(TypeError, match="Runtime stream must be an integer"):
        cgrt.Runtime(host_ini("none"), stream="0x1000")


# ---------------------------------------------------------------- the small rest


def test_set_log_replaces_and_restores_the_sink():
    first, second = [], []
    ini = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = host\nlog = debug\n"
    with cgrt.Runtime(ini, log=lambda level, msg: first.append((level, msg))) as rt:
        assert first and all(type(level) is LogLevel for level, _ in first)
        n = len(first)
        rt.set_log(lambda level, msg: second.append(msg))
        rt.log(LogLevel.INFO, "to the second")
        assert second == ["to the second"] and len(first) == n
        rt.set_log(None)  # stderr again
        rt.log(LogLevel.DEBUG, "to stderr")
        assert second == ["to the second"]
        with pytest.raises(TypeError):
            rt.set_log("not callable")
    with cgrt.Runtime(ini) as rt:  # opened without a sink: one can be set later
        got = []
        rt.set_log(lambda level, msg: got.append(msg))
        rt.log(LogLevel.ERROR, "late")
        assert got == ["late"]


def test_set_log_from_the_log_sink_is_refused():
    holder = []

    def sink(level, msg):
        if holder:
            holder[0].set_log(None)

    ini = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = host\nlog = info\n"
    with cgrt.Runtime(ini, log=sink) as rt:
        holder.append(rt)
        with pytest.warns(RuntimeWarning, match="the log sink must not call cgrt"):
            rt.log(LogLevel.INFO, "x")
        holder.clear()


def test_clear_findings_outside_a_step_only(make_model):
    # (What makes a finding on the host driver is the driver's own operations, which Python does
    # not reach: tests/unit/test_diagnose.c covers the forgetting.)
    md = make_model(host_ini("local", "[runtime]\ndiagnose = on\n", warmup=1))
    md.rt.clear_findings()
    assert md.rt.findings() == ()
    refused = []
    md.rt.step("infer", 1, body=lambda ctx: refused.append(_raises(md.rt.clear_findings)))
    assert refused[0].code == Status.STATE and "not allowed inside a step" in refused[0].message


def _raises(fn):
    try:
        fn()
    except Error as e:
        return e
    raise AssertionError(f"{fn} did not raise")


def test_alloc_async_gives_a_temporary_that_a_captured_call_keeps(make_model):
    md = make_model(host_ini("local", warmup=1), n=1)
    out = (ctypes.c_double * 1)()
    seen = []

    def fwd(ctx, args):
        tmp = ctx.alloc_async(64)
        seen.append(ctx.mode)

        def write():
            ctypes.c_double.from_address(tmp).value = 21.0

        def read():
            out[0] = ctypes.c_double.from_address(tmp).value * 2

        ctx.enqueue_host(write)
        ctx.enqueue_host(read)
        ctx.free_async(tmp)

    md.mods[0].forward = fwd
    for _ in range(4):
        out[0] = 0.0
        md.step("infer", 1)
        assert out[0] == 42.0
    assert seen == [Mode.WARMUP, Mode.CAPTURE]  # then replays, with the graph's memory
    (g,) = md.rt.graphs()
    assert g.alloc_bytes == 64
    with pytest.raises(Error) as e:
        md.rt.step("infer", 1, body=lambda ctx: ctx.alloc_async(-1))
    assert isinstance(e.value.__cause__, ValueError)
    assert "alloc_async bytes = -1 is out of range" in str(e.value.__cause__)


def test_ctx_gives_the_thd_metadata_addresses():
    seen = []
    with cgrt.Runtime(host_ini("none")) as rt:
        rt.step("train", 5, body=lambda ctx: seen.append((ctx.cu_seqlens, ctx.cu_seqlens_padded)))
    assert seen == [(0, 0)]  # a step without packed sequences has none


@pytest.mark.parametrize("dtype", [None, "f64"])
def test_a_buffer_declares_its_element_type_for_verify(dtype):
    """Outputs of a float type compare within verify_tolerance ulps, others bitwise: a kernel
    whose result moves by one ulp from run to run passes only when its buffers say f64."""
    ini = host_ini("local", "verify = first\nverify_tolerance = 4\n", warmup=1)
    x = (ctypes.c_double * 2)(1.0, 0.0)
    runs, seen = [0], []

    def fwd(ctx, args):
        src, dst = args.buffer_ptr(0), args.buffer_ptr(1)
        seen.append(args.buffers)

        def kernel():
            runs[0] += 1
            v = ctypes.c_double.from_address(src).value * 3
            ctypes.c_double.from_address(dst).value = v + (v * 2**-52 if runs[0] % 2 else 0.0)

        ctx.enqueue_host(kernel)

    with cgrt.Runtime(ini) as rt:
        m = rt.register("m", "mlp", fwd)
        addr = ctypes.addressof(x)
        args = cgrt.Args(
            buffers=[
                cgrt.Buffer(addr, 8, "in", "x", dtype=dtype),
                cgrt.Buffer(addr + 8, 8, "out", "y", dtype=dtype),
            ]
        )
        for _ in range(4):
            rt.step("infer", 1, body=lambda ctx: rt.forward(m, ctx, args))
            rt.synchronize()
        s = rt.stats()
    assert s.verifications == 1 and s.verify_mismatches == (1 if dtype is None else 0)
    want = None if dtype is None else cgrt.ElementType.F64
    assert [b.dtype for b in seen[-1]] == [want, want]  # a view gives the type back
    assert [b.access for b in seen[-1]] == [cgrt.Access.IN, cgrt.Access.OUT]


def test_buffer_dtype_takes_names_and_values_and_refuses_others():
    assert cgrt.Buffer(0, 8, dtype="bf16").dtype is cgrt.ElementType.BF16
    assert cgrt.Buffer(0, 8, dtype=0x10).dtype is cgrt.ElementType.F32
    assert cgrt.Buffer(0, 8).dtype is None
    with pytest.raises(ValueError, match="Buffer dtype 'f8' is not one of"):
        cgrt.Buffer(0, 8, dtype="f8")
    with pytest.raises(ValueError, match="Buffer dtype 3 is not one of"):
        cgrt.Buffer(0, 8, dtype=3)
