"""The cgrt package on the host driver: opening, library discovery, the mirrored structs, steps
through the backends (warm-up, capture, replay, buckets, scopes), statistics, errors."""

import ctypes
import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import HostModel, host_ini

import cgrt
from cgrt import Error, Mode, Phase, Status
from cgrt import _lib

PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# ---------------------------------------------------------------- the library and its structs


def test_library_is_the_one_named_by_CGRT_LIBRARY():
    want = os.environ.get("CGRT_LIBRARY")
    if not want:
        pytest.skip("CGRT_LIBRARY is not set (ctest sets it)")
    assert os.path.realpath(cgrt.library_path()) == os.path.realpath(want)
    assert cgrt.version() == "0.4.0"


def test_missing_library_names_what_was_tried(tmp_path):
    missing = str(tmp_path / "nope" / "libcgrt.so")
    code = textwrap.dedent(
        """
        import cgrt
        try:
            cgrt.version()
        except cgrt.LibraryNotFound as e:
            print("NOTFOUND", e)
        """
    )
    env = dict(os.environ, CGRT_LIBRARY=missing, PYTHONPATH=PKG)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "NOTFOUND" in out.stdout and missing in out.stdout and "CGRT_LIBRARY" in out.stdout


def test_build_tree_is_found_without_CGRT_LIBRARY(tmp_path):
    """The checkout's package finds a build of the checkout in its build*/ folders."""
    if not os.path.isfile(os.path.join(PKG, "..", "core", "include", "cgrt", "cgrt.h")):
        pytest.skip("not a source checkout")
    repo = os.path.realpath(os.path.join(PKG, ".."))
    build = os.environ.get("CGRT_BUILD_DIR")
    if build:
        build = os.path.realpath(build)
        if os.path.dirname(build) != repo or not os.path.basename(build).startswith("build"):
            pytest.skip(
                f"this build ({build}) is not a build*/ folder of the checkout ({repo}), the only "
                "place the checkout's package looks; the build's own copy of the package is "
                "tested instead (test_build_copy_finds_its_own_library)"
            )
    env = {k: v for k, v in os.environ.items() if k != "CGRT_LIBRARY"}
    env["PYTHONPATH"] = PKG
    code = "import cgrt; print(cgrt.library_path())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert os.path.realpath(out.stdout.strip()).startswith(repo + os.sep)


def test_build_copy_finds_its_own_library(tmp_path):
    """The build tree's copy of the package (lib/cgrt/python, as installed) loads that build's
    libcgrt without CGRT_LIBRARY, wherever the build is and whatever the working directory."""
    build = os.environ.get("CGRT_BUILD_DIR")
    if not build:
        pytest.skip("CGRT_BUILD_DIR is not set (ctest sets it)")
    copy = os.path.join(build, "lib", "cgrt", "python")
    env = {k: v for k, v in os.environ.items() if k != "CGRT_LIBRARY"}
    env["PYTHONPATH"] = copy
    code = "import cgrt; print(cgrt.__file__); print(cgrt.library_path())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    package, library = out.stdout.split()
    assert os.path.realpath(package).startswith(os.path.realpath(copy) + os.sep)
    lib = os.path.realpath(os.path.join(build, "lib"))
    assert os.path.realpath(library).startswith(lib + os.sep)


def test_ctypes_mirrors_match_the_c_layout():
    helper = os.environ.get("CGRT_LAYOUT_BIN")
    if not helper:
        pytest.skip("CGRT_LAYOUT_BIN is not set (ctest builds tests/python/layout.c)")
    lines = subprocess.run([helper], capture_output=True, text=True, check=True).stdout.split("\n")
    sizes, offsets = {}, {}
    for line in filter(None, lines):
        name, value = line.split()
        if "." in name:
            offsets[name] = int(value)
        else:
            sizes[name] = int(value)
    assert set(sizes) == set(_lib.MIRRORS)
    for cname, mirror in _lib.MIRRORS.items():
        fields = [f[0] for f in mirror._fields_]
        c_fields = [k.split(".", 1)[1] for k in offsets if k.startswith(cname + ".")]
        assert fields == c_fields, cname
        for f in fields:
            assert getattr(mirror, f).offset == offsets[f"{cname}.{f}"], f"{cname}.{f}"
        # The package mirrors the header of its own checkout: every field, nothing short (a
        # shorter mirror still works through struct_size, but is the package lagging the C API).
        assert ctypes.sizeof(mirror) == sizes[cname], f"{cname}: fields of cgrt.h not mirrored"


# ---------------------------------------------------------------- opening


def test_open_from_path_string_and_default(tmp_path, monkeypatch):
    p = tmp_path / "c.ini"
    p.write_text(host_ini("local"))
    with cgrt.Runtime(str(p)) as rt:
        assert rt.backend == "local"
    with cgrt.Runtime(p) as rt:  # a PathLike
        assert rt.backend == "local"
    with cgrt.Runtime(host_ini("none")) as rt:
        assert rt.backend == "none"
        assert rt.stream != 0
    # No configuration: the file CGRT_CONFIG names (else the embedded default, on the GPU).
    q = tmp_path / "default.ini"
    q.write_text(host_ini("transformer_engine"))
    monkeypatch.setenv("CGRT_CONFIG", str(q))
    with cgrt.Runtime() as rt:
        assert rt.backend == "transformer_engine"


def test_closed_runtime_refuses_calls():
    rt = cgrt.Runtime(host_ini("none"))
    rt.close()
    rt.close()  # twice is fine
    with pytest.raises(Error) as e:
        rt.stats()
    assert e.value.code == Status.STATE


def test_bad_config_names_file_line_and_spelling(tmp_path):
    p = tmp_path / "bad.ini"
    p.write_text("[cuda_graph]\nimpl = local\nwarmup_step = 2\n")
    with pytest.raises(Error) as e:
        cgrt.Runtime(str(p))
    assert e.value.code == Status.CONFIG
    assert "bad.ini:3" in e.value.message and "warmup_steps" in e.value.message
    assert "CGRT_E_CONFIG" in str(e.value)


def test_missing_file_and_missing_backend(tmp_path):
    with pytest.raises(Error) as e:
        cgrt.Runtime(str(tmp_path / "none.ini"))
    assert e.value.code == Status.IO
    with pytest.raises(Error) as e:
        cgrt.Runtime("[cuda_graph]\nimpl = no_such_backend\n[runtime]\ndriver = host\nlog = off\n")
    assert e.value.code == Status.NOTFOUND
    assert "no_such_backend" in e.value.message


def test_log_sink_receives_lines():
    lines = []
    ini = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = host\nlog = info\n"
    with cgrt.Runtime(ini, log=lambda level, msg: lines.append((level, msg))):
        pass
    assert any("backend none" in m for _, m in lines)


# ---------------------------------------------------------------- steps


def test_eager_backend_runs_every_call(make_model):
    md = make_model(host_ini("none"))
    for _ in range(3):
        rep = md.step("infer", 5)
        assert rep.mode == Mode.EAGER and rep.padded_tokens == 5
        assert [md.out(i) for i in range(3)] == [1 * 2 + 5, 2 * 2 + 5, 3 * 2 + 5]
    assert len(md.runs) == 9 and md.bodies == 3


def test_local_train_warms_captures_and_replays(make_model):
    md = make_model(host_ini("local"))
    modes = [md.step("train", 0).mode for _ in range(5)]
    assert modes == [Mode.WARMUP, Mode.WARMUP, Mode.CAPTURE, Mode.REPLAY, Mode.REPLAY]
    # Callbacks ran for the warm-ups and the capture only (forward and backward of 3 modules).
    assert len(md.runs) == 3 * 6
    assert [m for _, m in md.runs[-6:]] == [Mode.CAPTURE] * 6
    # The replays computed: out = in * 2, then in = out * 0.5.
    assert md.out(0) == 2.0 and md.inp(0) == 1.0
    s = md.rt.stats()
    assert dataclasses.is_dataclass(s)
    assert s.steps == 5 and s.captures == 6 and s.live_graphs == 6
    assert s.steps_by_mode[Mode.REPLAY] == 2 and s.calls_by_mode[Mode.REPLAY] == 12
    assert s.calls_by_mode[Mode.WARMUP] == 12


def test_inference_buckets_pad_and_bake_the_bucket(make_model):
    md = make_model(host_ini("local", "[inference]\nmax_tokens = 64\nnum_graphs = 7"))
    for tokens, bucket in ((1, 1), (3, 4), (37, 64)):
        for _ in range(4):
            rep = md.step("infer", tokens)
        assert rep.mode == Mode.REPLAY and rep.padded_tokens == bucket
        assert md.prepares[-1] == (tokens, bucket)
        assert md.out(1) == 2 * 2 + bucket
    s = md.rt.stats()
    assert s.buckets == (1, 2, 4, 8, 16, 32, 64) and s.num_buckets == 7
    assert s.padding_tokens == 4 * ((4 - 3) + (64 - 37))
    assert s.padded_tokens == s.padding_tokens  # the old name, kept readable
    assert "padded_tokens" not in {f.name for f in dataclasses.fields(s)}  # one quantity, one field
    assert s.real_tokens == 4 * (1 + 3 + 37)


def test_a_phase_the_backend_has_no_form_for_runs_eagerly_and_is_counted(make_model):
    """transformer_engine graphs training only: its infer steps run eagerly in cgrt, never fail,
    and Stats.eager_phase_steps counts them."""
    md = make_model(host_ini("transformer_engine", warmup=1))
    for _ in range(3):
        md.step("train", 2)
    modes = [md.step("infer", 3).mode for _ in range(4)]
    assert modes == [Mode.EAGER] * 4 and md.out(2) == md.inp(2) * 2 + 3
    s = md.rt.stats()
    assert s.eager_phase_steps == 4 and s.steps == 7
    assert s.steps_by_mode[Mode.REPLAY] == 1  # the third train step


def test_block_scope_skips_the_body_on_replay(make_model):
    md = make_model(host_ini("local", "inference_scope = block\n[inference]\nmax_tokens = 8"))
    for _ in range(5):
        rep = md.step("infer", 6)
        assert md.out(2) == 3 * 2 + 8
    assert rep.mode == Mode.REPLAY
    assert md.bodies == 3  # two warm-ups and the capture
    assert md.rt.stats().captures == 1


def test_release_graphs_captures_again(make_model):
    md = make_model(host_ini("local", warmup=1))
    for _ in range(3):
        md.step("infer", 1)
    from cgrt import _HOST_FNS

    kept = [k for k, v in _HOST_FNS.items() if v[1] is md.rt]
    assert len(kept) == 3  # the captured host functions, one per module
    md.rt.release_graphs()
    assert not [k for k, v in _HOST_FNS.items() if v[1] is md.rt]
    assert md.rt.stats().live_graphs == 0
    for _ in range(2):
        md.step("infer", 1)
    assert md.rt.stats().captures == 6 and md.out(0) == 3.0


def test_enums_take_names_and_values(make_model):
    md = make_model(host_ini("none"))
    assert md.rt.step(Phase.EVAL, 1, body=md.body).mode == Mode.EAGER
    assert md.rt.step(2, 1, body=md.body).padded_tokens == 1
    with pytest.raises(ValueError):
        md.rt.step("inference", 1, body=md.body)
    assert md.mods[0].kind == cgrt.Kind.ATTN


# ---------------------------------------------------------------- errors


def test_module_that_raises_fails_the_step_naming_it(make_model):
    md = make_model(host_ini("none"))
    md.fail[1] = (ValueError("boom"), None)
    with pytest.raises(Error) as e:
        md.step("infer", 1)
    err = e.value
    assert err.code == Status.CALLBACK
    assert "module 'layer1' forward" in err.message
    assert isinstance(err.exception, ValueError) and isinstance(err.__cause__, ValueError)
    assert "ValueError: boom" in str(err)
    # The process and the runtime go on.
    del md.fail[1]
    assert md.step("infer", 1).mode == Mode.EAGER and md.out(1) == 5.0


def test_body_that_raises(make_model):
    md = make_model(host_ini("local"))

    def body(ctx):
        raise KeyError("no such layer")

    with pytest.raises(Error) as e:
        md.rt.step("infer", 1, body=body)
    assert e.value.code == Status.CALLBACK and "body callback" in e.value.message
    assert isinstance(e.value.__cause__, KeyError)


def test_capture_that_raises_falls_back_to_eager(make_model):
    md = make_model(host_ini("local", warmup=1))
    md.fail[0] = (RuntimeError("not capturable"), Mode.CAPTURE)
    md.step("infer", 1)
    with pytest.warns(RuntimeWarning, match="not capturable"):
        rep = md.step("infer", 1)
    assert rep.fallbacks == 1
    assert md.out(0) == 3.0  # the eager retry computed it
    s = md.rt.stats()
    assert s.fallbacks == 1 and s.live_graphs == 2


def test_keyboard_interrupt_is_not_wrapped(make_model):
    md = make_model(host_ini("none"))
    md.fail[0] = (KeyboardInterrupt(), None)
    with pytest.raises(KeyboardInterrupt):
        md.step("infer", 1)


def test_misuse_is_refused(make_model):
    md = make_model(host_ini("local"))
    kept = []

    def prepare(ctx):
        kept.append(ctx)
        md.rt.forward(md.mods[0], ctx, md.args[0])  # not from the body

    with pytest.raises(Error) as e:
        md.rt.step("infer", 1, prepare=prepare, body=md.body)
    assert e.value.code == Status.CALLBACK  # the prepare callback failed ...
    assert isinstance(e.value.__cause__, Error)  # ... because cgrt_forward refused
    assert e.value.__cause__.code == Status.STATE
    with pytest.raises(Error) as e:
        kept[0].padded_tokens  # a Ctx outlives its callback
    assert e.value.code == Status.STATE
    with pytest.raises(Error) as e:
        md.rt.register("layer0", "mlp", lambda c, a: None)  # duplicate name
    assert e.value.code == Status.INVAL and "layer0" in e.value.message
    with pytest.raises(ValueError):
        md.rt.register("x", "not_a_kind", lambda c, a: None)


def test_moved_buffer_under_rebind_error_is_named(make_model):
    md = make_model(host_ini("local", "rebind = error", warmup=1))
    md.step("infer", 1)
    md.step("infer", 1)
    other = (ctypes.c_double * 1)(5.0)
    d = ctypes.sizeof(ctypes.c_double)
    md.args[0] = cgrt.Args(
        buffers=[
            cgrt.Buffer(ctypes.addressof(other), d, cgrt.Access.IN, "moved_input"),
            md.args[0].buffers[1],
        ]
    )
    with pytest.raises(Error) as e:
        md.step("infer", 1)
    assert e.value.code == Status.REBIND and "moved_input" in e.value.message


def test_fresh_inputs_under_the_default_rebind_are_copied_and_said_once():
    lines = []
    rt = cgrt.Runtime(
        "[cuda_graph]\nimpl = local\nwarmup_steps = 1\n[runtime]\ndriver = host\nlog = warn\n",
        log=lambda level, msg: lines.append(msg),
    )
    try:
        assert rt.config("cuda_graph", "rebind") == "auto"
        md = HostModel(rt, backward=False)
        d = ctypes.sizeof(ctypes.c_double)
        fresh = [(ctypes.c_double * md.n)() for _ in range(40)]  # a new input block every step
        for s, block in enumerate(fresh):
            for i in range(md.n):
                block[i] = s + i
                md.args[i] = cgrt.Args(
                    buffers=[
                        cgrt.Buffer(ctypes.addressof(block) + i * d, d, cgrt.Access.IN, "x"),
                        md.args[i].buffers[1],
                    ]
                )
            md.step("infer", 1)
            assert [md.out(i) for i in range(md.n)] == [(s + i) * 2 + 1 for i in range(md.n)]
        st = rt.stats()
        assert st.rebind_copy_keys == md.n and st.rebind_eager_keys == 0
        assert st.captures <= 3 * md.n
        assert st.staged_bytes == md.n * d and st.copy_bytes >= 30 * md.n * d
        moved = [m for m in lines if "moved on 3 of its last 4 calls" in m]
        assert len(moved) == md.n and all("'x' (#0)" in m for m in moved)
        with pytest.raises(Error) as e:
            rt.config("cuda_graph", "rebnd")
        assert e.value.code == Status.NOTFOUND
    finally:
        rt.close()


def test_host_function_that_raises_is_reported_at_synchronize(make_model):
    md = make_model(host_ini("none"))

    def body(ctx):
        ctx.enqueue_host(lambda: 1 / 0)

    md.rt.step("infer", 1, body=body)
    with pytest.raises(Error) as e:
        md.rt.synchronize()
    assert e.value.code == Status.CALLBACK and isinstance(e.value.__cause__, ZeroDivisionError)
    md.rt.synchronize()  # reported once


def test_max_queued_steps_bounds_the_steps_ahead_of_the_device():
    """[runtime] max_queued_steps = 2: before step i is issued, step i - 2 has run (the host
    driver runs work only when something waits for it), each wait counted in Stats; without the
    key nothing waits."""
    import json

    ran = []

    def body(i):
        return lambda ctx: ctx.enqueue_host(lambda: ran.append(i))

    ini = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = host\nlog = off\nmax_queued_steps = 2\n"
    with cgrt.Runtime(ini) as rt:
        assert rt.config("runtime", "max_queued_steps") == "2"
        for i in range(5):
            rt.step("train", 1, body=body(i))
        assert ran == [0, 1, 2]
        s = rt.stats()
        assert s.queue_waits == 3 and s.queue_wait_ns >= 0
        assert json.loads(rt.stats_text(json=True))["queue_waits"] == 3
        rt.synchronize()
        assert ran == [0, 1, 2, 3, 4]
    ran.clear()
    with cgrt.Runtime(host_ini("none")) as rt:
        for i in range(5):
            rt.step("train", 1, body=body(i))
        assert ran == [] and rt.stats().queue_waits == 0 and rt.stats().queue_wait_ns == 0
        rt.synchronize()
        assert ran == [0, 1, 2, 3, 4]


# ---------------------------------------------------------------- capture notifications


def test_capture_hooks_bracket_every_capture(make_model):
    md = make_model(host_ini("local", "[inference]\nmax_tokens = 8"))
    events = []
    inside = []

    def begin(stream):
        assert stream == md.rt.stream
        events.append("begin")
        inside.append(1)

    def end(stream):
        events.append("end")
        inside.pop()

    md.rt.set_capture_hooks(begin, end)
    seen = []
    old = md._fwd(0)

    def fwd(ctx, args):
        seen.append((ctx.mode, bool(inside)))
        return old(ctx, args)

    md.mods[0].forward = fwd
    for tokens in (1, 1, 1, 1, 5, 5, 5, 5):
        md.step("infer", tokens)
    s = md.rt.stats()
    assert events == ["begin", "end"] * s.captures and s.captures == 6
    # Work is recorded exactly between the hooks.
    assert all((mode == Mode.CAPTURE) == ins for mode, ins in seen)
    assert sum(1 for mode, _ in seen if mode == Mode.CAPTURE) == 2


def test_capture_hook_that_raises_refuses_the_capture(make_model):
    md = make_model(host_ini("local", warmup=1))
    state = {"refuse": 1, "ends": 0}

    def begin(stream):
        if state["refuse"]:
            state["refuse"] -= 1
            raise MemoryError("pool unavailable")

    def end(stream):
        state["ends"] += 1

    md.rt.set_capture_hooks(begin, end)
    md.step("infer", 1)
    with pytest.warns(RuntimeWarning, match="pool unavailable"):
        rep = md.step("infer", 1)
    assert rep.fallbacks == 1 and md.out(0) == 3.0
    assert state["ends"] == 2  # the two captures that were allowed
    md.rt.set_capture_hooks(None, None)
    md.step("infer", 1)
    assert md.rt.stats().live_graphs == 3


# ---------------------------------------------------------------- context parallelism


def _cp_run(monkeypatch, mlp_no_cp_comm):
    """dynamic_cp graphing attn only, NCCL graph mixing off: two warm-up steps, the captures of the
    bank's two slots, then four replays whose mlp call runs eagerly right behind the attn graph."""
    monkeypatch.setenv("NCCL_GRAPH_MIXING_SUPPORT", "0")  # read at the split
    extra = "modules = attn\n[dynamic_cp]\ncp_sizes = 1 2\nmax_packed_tokens = 64\nmax_sequences = 4"
    seen = []  # (module, mode, comm) of every callback run
    with cgrt.Runtime(host_ini("dynamic_cp", extra)) as rt:

        def module(name):
            def fwd(ctx, args):
                seen.append((name, ctx.mode, ctx.comm))
                ctx.enqueue_host(lambda: None)

            return fwd

        attn = rt.register("l0.attn", "attn", module("attn"), layer=0)
        mlp = rt.register("l0.mlp", "mlp", module("mlp"), layer=0, no_cp_comm=mlp_no_cp_comm)
        assert mlp.no_cp_comm == mlp_no_cp_comm and not attn.no_cp_comm

        def body(ctx):
            rt.forward(attn, ctx)
            rt.forward(mlp, ctx)

        with pytest.raises(Error) as e:  # dynamic_cp needs the communicators first
            rt.step("train", body=body, seqlens=[8, 9], cp_size=2)
        assert "cgrt_set_world_comm" in str(e.value)
        rt.set_world_comm(None)  # the host driver's stand-ins
        modes = [rt.step("train", body=body, seqlens=[8, 9], cp_size=2).mode for _ in range(4)]
        before = rt.stats().comm_waits  # the replays' waits alone, from here
        modes += [rt.step("train", body=body, seqlens=[8, 9], cp_size=2).mode for _ in range(4)]
        rt.synchronize()
        assert modes == [Mode.WARMUP] * 2 + [Mode.CAPTURE] * 2 + [Mode.REPLAY] * 4
        return seen, rt.stats().comm_waits - before


def test_dynamic_cp_modules_without_collectives_see_no_comm_and_never_wait(monkeypatch):
    seen, replay_waits = _cp_run(monkeypatch, False)
    assert all(comm != 0 for _, _, comm in seen)
    assert replay_waits == 4  # each replaying step's eager mlp call waited for the attn graph
    seen, replay_waits = _cp_run(monkeypatch, True)
    assert {comm != 0 for name, _, comm in seen if name == "attn"} == {True}
    assert {comm for name, _, comm in seen if name == "mlp"} == {0}
    assert replay_waits == 0
