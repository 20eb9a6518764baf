"""The installed package: imported from site-packages (not the source tree)
with its own libfathom, and its version (the CMake project's)."""
import os

import pytest

import fathom

from conftest import ROOT


def test_imported_from_an_installation():
    if os.environ.get("FATHOM_LIBRARY"):
        pytest.skip("FATHOM_LIBRARY set: a deliberate run against a separate build")
    here = os.path.dirname(os.path.abspath(fathom.__file__))
    assert not here.startswith(os.path.join(ROOT, "python")), f"fathom imported from the source tree: {here}"
    assert os.path.dirname(fathom.library_path) == here
    assert os.path.isfile(fathom.library_path)


def test_version_is_the_cmake_project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        line = next(l for l in f if l.startswith("project(libfathom VERSION "))
    assert fathom.__version__ == line.split()[2]
