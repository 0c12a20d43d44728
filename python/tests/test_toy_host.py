"""python/examples/toy_host.py, the README's example, run under every backend by swapping only
the INI: equal results, what backend_info() says of each phase, no backend failing an infer step;
and the README holds the file as it is."""

import os
import re
import subprocess
import sys

import pytest

import cgrt
from cgrt import Mode, Phase, PhaseRun

PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
EXAMPLE = os.path.join(PKG, "examples", "toy_host.py")
sys.path.insert(0, os.path.dirname(EXAMPLE))

import toy_host  # noqa: E402

G, E, C = PhaseRun.GRAPHS, PhaseRun.EAGER, PhaseRun.CORE_EAGER
EXPECTED_PHASES = {
    "none": (E, E, E),
    "local": (G, G, G),
    "local_block": (G, G, G),
    "transformer_engine": (G, G, C),  # no form for infer steps: cgrt runs them eagerly
    "full_iteration": (G, G, G),
    "dynamic_cp": (G, G, G),
}


def _layers(x):
    for _ in range(toy_host.LAYERS):
        x = 2 * x + 1
    return x


def _run(name):
    ini = toy_host.INI.format(backend=toy_host.BACKENDS[name])
    with cgrt.Runtime.from_ini(ini, name=name) as rt:
        out = toy_host.run(rt)
        return out, rt.backend_info(), rt.stats(), rt.graphs()


def test_the_toy_swaps_every_backend_by_the_ini_alone():
    assert set(toy_host.BACKENDS) == set(EXPECTED_PHASES)
    ref = None
    for name in EXPECTED_PHASES:
        out, info, st, graphs = _run(name)
        # Each layer computes 2x + 1; the gradient of the input is 2 * 2 * 2.
        n_train = len(out) - len(toy_host.INFER_TOKENS)
        for s, (y, dx) in enumerate(out[:n_train]):
            xs = [s + t / 10 for t in range(toy_host.TRAIN_TOKENS)]
            assert y == [_layers(x) for x in xs] and dx == [8.0] * len(xs), name
        for s, (y, dx) in enumerate(out[n_train:]):
            xs = [s + t / 10 for t in range(toy_host.INFER_TOKENS[s])]
            assert y == [_layers(x) for x in xs] and dx is None, name
        if ref is None:
            ref = out
        assert out == ref, f"{name} computed otherwise than none"
        assert info.name == ("local" if name == "local_block" else name)
        assert info.phases == dict(zip(Phase, EXPECTED_PHASES[name])), name
        infer_eager = info.phases[Phase.INFER] == PhaseRun.CORE_EAGER
        assert st.eager_phase_steps == (len(toy_host.INFER_TOKENS) if infer_eager else 0), name
        assert st.steps == len(out)
        replayed = st.steps_by_mode[Mode.REPLAY] + st.calls_by_mode[Mode.REPLAY]
        if name == "none":
            assert replayed == 0 and graphs == () and st.captures == 0
        else:
            assert replayed > 0 and len(graphs) == st.live_graphs > 0, name


def test_the_toy_runs_as_a_script():
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = subprocess.run(
        [sys.executable, EXAMPLE], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == list(toy_host.BACKENDS)
    assert "infer=core_eager" in lines[list(toy_host.BACKENDS).index("transformer_engine")]
    assert lines[-1].startswith("every backend computed the same")
    # The README shows this output, indented, right after the toy.
    with open(os.path.join(PKG, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    shown = "".join(f"    {line}\n" for line in lines)
    assert shown in readme, "python/README.md shows another output of the toy: paste it again"


def test_the_readme_holds_the_toy_as_it_is():
    with open(os.path.join(PKG, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    m = re.search(r"<!-- python/examples/toy_host.py -->\n```python\n(.*?)```\n", readme, re.S)
    assert m, "python/README.md has no ```python block after <!-- python/examples/toy_host.py -->"
    with open(EXAMPLE, encoding="utf-8") as f:
        assert m.group(1) == f.read(), "python/README.md and python/examples/toy_host.py differ"


@pytest.mark.parametrize("name", ["local", "transformer_engine"])
def test_an_infer_step_never_fails_for_want_of_a_form(name):
    """A host that only serves (no train step first) runs under every backend."""
    ini = toy_host.INI.format(backend=toy_host.BACKENDS[name])
    with cgrt.Runtime.from_ini(ini) as rt:
        toy = toy_host.Toy(rt)
        assert toy.step("infer", [1.0, 2.0]) == ([15.0, 23.0], None)
