"""The package's version is the library's (issue 40): cgrt.__version__, the version pip gives the
package (pyproject.toml takes it from __version__), cgrt.h's CGRT_VERSION_STRING, and cgrt.version()
of the libcgrt loaded are one string."""

import os
import re
import warnings

import pytest

import cgrt

PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
HEADER = os.path.join(PKG, "..", "core", "include", "cgrt", "cgrt.h")


def header_version():
    with open(HEADER, encoding="utf-8") as f:
        m = re.search(r'^#define CGRT_VERSION_STRING "([^"]+)"', f.read(), re.M)
    assert m, f"{HEADER} defines no CGRT_VERSION_STRING"
    return m.group(1)


def test_package_version_is_the_headers():
    assert cgrt.__version__ == header_version()


def test_package_version_is_the_loaded_librarys():
    assert cgrt.__version__ == cgrt.version()


def test_pyproject_takes_the_version_from_the_package():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    with open(os.path.join(PKG, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    assert "version" not in project["project"], "pyproject.toml: no version of its own"
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "cgrt.__version__"}


def test_pip_metadata_version_is_the_librarys():
    pyprojecttoml = pytest.importorskip("setuptools.config.pyprojecttoml")
    cwd = os.getcwd()
    os.chdir(PKG)  # setuptools resolves attr: against the project's folder
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # [tool.setuptools] is "beta" in some setuptools
            config = pyprojecttoml.read_configuration("pyproject.toml")
    finally:
        os.chdir(cwd)
    assert config["project"]["version"] == header_version()
