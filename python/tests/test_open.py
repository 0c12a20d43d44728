"""Opening a runtime: from a file, from INI text, and the guess Runtime(config) makes for callers
written before those existed. A file is a file whatever its name holds; text is text even on one
line."""

import os

import pytest
from conftest import host_ini

import cgrt
from cgrt import Error, Status


def test_from_file_opens_a_file_whose_name_holds_brackets(tmp_path):
    p = tmp_path / "conf[local].ini"
    p.write_text(host_ini("local"))
    with cgrt.Runtime.from_file(p) as rt:
        assert rt.backend == "local"
    with cgrt.Runtime.from_file(str(p)) as rt:
        assert rt.backend == "local"
    with cgrt.Runtime.from_file(os.fsencode(p)) as rt:
        assert rt.backend == "local"


def test_the_guess_takes_an_existing_file_as_a_path_even_with_brackets(tmp_path, monkeypatch):
    p = tmp_path / "run[3].ini"
    p.write_text(host_ini("transformer_engine"))
    with cgrt.Runtime(str(p)) as rt:  # '[' used to make this INI text
        assert rt.backend == "transformer_engine"
    monkeypatch.chdir(tmp_path)
    with cgrt.Runtime("run[3].ini") as rt:  # relative to the working directory
        assert rt.backend == "transformer_engine"


def test_from_ini_parses_text_without_a_newline_as_text():
    with pytest.raises(Error) as e:
        cgrt.Runtime.from_ini("warmup_steps = 2", name="one-line")
    assert e.value.code == Status.CONFIG  # parsed, and named as asked
    assert e.value.message.startswith("one-line:1: key 'warmup_steps' is outside any section")
    # The guess takes the same text for a file name: say which with from_ini.
    with pytest.raises(Error) as e:
        cgrt.Runtime("warmup_steps = 2")
    assert e.value.code == Status.IO and "cannot read 'warmup_steps = 2'" in e.value.message


def test_from_ini_names_the_text_in_messages():
    bad = "[cuda_graph]\nimpl = local\nwarmup_step = 2\n[runtime]\ndriver = host\n"
    with pytest.raises(Error) as e:
        cgrt.Runtime.from_ini(bad, name="my host's ini")
    assert "my host's ini:3" in e.value.message and "warmup_steps" in e.value.message
    with pytest.raises(Error) as e:
        cgrt.Runtime.from_ini(bad)
    assert "<python string>:3" in e.value.message
    with cgrt.Runtime.from_ini(host_ini("none"), name="ok", log=lambda level, msg: None) as rt:
        assert rt.backend == "none"


def test_the_guess_for_what_is_not_a_file(tmp_path):
    with cgrt.Runtime(host_ini("none")) as rt:  # a newline: INI text
        assert rt.backend == "none"
    missing = str(tmp_path / "missing.ini")
    with pytest.raises(Error) as e:  # no newline, no '[': a path, and cgrt names it
        cgrt.Runtime(missing)
    assert e.value.code == Status.IO and missing in e.value.message
    with pytest.raises(Error) as e:  # '[' and no such file: INI text (from_file says a path)
        cgrt.Runtime(str(tmp_path / "missing[1].ini"))
    assert e.value.code == Status.CONFIG and e.value.message.startswith("<python string>:1:")
    with pytest.raises(Error) as e:
        cgrt.Runtime.from_file(str(tmp_path / "missing[1].ini"))
    assert e.value.code == Status.IO and "missing[1].ini" in e.value.message


def test_keywords_say_which_without_a_guess(tmp_path):
    p = tmp_path / "c.ini"
    p.write_text(host_ini("local"))
    with cgrt.Runtime(path=str(p)) as rt:
        assert rt.backend == "local"
    with cgrt.Runtime(ini=host_ini("none"), name="inline") as rt:
        assert rt.backend == "none"


def test_one_source_at_a_time_and_the_right_types(tmp_path):
    p = tmp_path / "c.ini"
    p.write_text(host_ini("none"))
    with pytest.raises(TypeError, match="give one of config, path= and ini="):
        cgrt.Runtime(str(p), ini=host_ini("none"))
    with pytest.raises(TypeError, match="give one of"):
        cgrt.Runtime(path=str(p), ini=host_ini("none"))
    with pytest.raises(TypeError, match="name= names INI text"):
        cgrt.Runtime.from_file(p, name="x")
    with pytest.raises(TypeError):
        cgrt.Runtime.from_ini(p)  # a path is not text
    with pytest.raises(TypeError):
        cgrt.Runtime(42)
    with pytest.raises(TypeError):
        cgrt.Runtime.from_file(None)
    with pytest.raises(ValueError, match="NUL"):
        cgrt.Runtime.from_ini(host_ini("none") + "\0")


def test_from_file_and_from_ini_keep_the_subclass(tmp_path):
    class Mine(cgrt.Runtime):
        pass

    p = tmp_path / "c.ini"
    p.write_text(host_ini("none"))
    with Mine.from_file(p) as rt:
        assert type(rt) is Mine
    with Mine.from_ini(host_ini("none"), stream=None) as rt:
        assert type(rt) is Mine
