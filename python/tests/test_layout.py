"""Guard: every struct the Python side mirrors (fathom._structs.MIRRORED)
has the C compiler's layout, as the library exports it: the same size, the
same fields in the same order, each at the same offset with the same size."""
import ctypes as C
import os
import shutil
import subprocess

import pytest

import fathom
from fathom import _structs as S
from fathom._lib import lib

from conftest import ROOT


def c_layout(struct, field=None):
    off, size = C.c_size_t(), C.c_size_t()
    lib.fathom_abi_layout(struct.encode(), None if field is None else field.encode(), C.byref(off), C.byref(size))
    return off.value, size.value


def c_fields(struct):
    names, i = [], 0
    while (name := lib.fathom_abi_field(struct.encode(), i)) is not None:
        names.append(name.decode())
        i += 1
    return names


@pytest.mark.parametrize("struct", sorted(S.MIRRORED))
def test_mirror_matches_c(struct):
    cls = S.MIRRORED[struct]
    assert c_layout(struct) == (0, C.sizeof(cls)), f"sizeof({struct})"
    assert c_fields(struct) == [name for name, _ in cls._fields_], f"fields of {struct}"
    for name, ctype in cls._fields_:
        assert c_layout(struct, name) == (getattr(cls, name).offset, C.sizeof(ctype)), f"{struct}.{name}"


def test_known_sizes_on_lp64():
    # hand-derived for x86-64/aarch64 Linux, so the table itself is checked too
    if C.sizeof(C.c_void_p) != 8:
        pytest.skip("LP64 only")
    assert c_layout("fathom_segment_view") == (0, 32)
    assert c_layout("fathom_method") == (0, 40)
    assert c_layout("fathom_method", "name") == (8, 32)
    assert c_layout("fathom_source_info") == (0, 104)
    assert c_layout("fathom_source_info", "first_query") == (96, 8)
    assert c_layout("fathom_method_result") == (0, 80)


def test_unknown_names_fail():
    with pytest.raises(fathom.InvalidArgumentError, match="no fathom_nothing"):
        c_layout("fathom_nothing")
    with pytest.raises(fathom.InvalidArgumentError, match=r"fathom_method\.nothing"):
        c_layout("fathom_method", "nothing")
    assert lib.fathom_abi_field(b"fathom_nothing", 0) is None
    assert lib.fathom_abi_field(b"fathom_method", 3) is None


def _cuda_include():
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.isfile(os.path.join(root, "include", "cuda_runtime.h")):
            return os.path.join(root, "include")
    nvcc = shutil.which("nvcc")
    if nvcc:
        inc = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "include")
        if os.path.isfile(os.path.join(inc, "cuda_runtime.h")):
            return inc
    return None


def test_cuda_mirrors_match_the_header(tmp_path):
    """include/fathom_cuda.h's structs (fathom.tier) against a probe compiled
    from the header: sizeof, and each field's offset and size."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    inc = _cuda_include()
    if cc is None or inc is None:
        pytest.skip("needs a C compiler and the CUDA headers (cuda_runtime.h) to compile the layout probe")
    lines = ['#include "fathom_cuda.h"', "#include <stddef.h>", "#include <stdio.h>", "int main(void) {"]
    for name, cls in S.CUDA_MIRRORED.items():
        lines.append(f'printf("{name} - 0 %zu\\n", sizeof({name}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{name} {field} %zu %zu\\n", offsetof({name}, {field}), '
                         f'sizeof((({name} *)0)->{field}));')
    lines += ["return 0;", "}"]
    src = tmp_path / "probe.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "probe"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), "-I", inc, str(src), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    got = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
        name, field, off, size = line.split()
        got[(name, field)] = (int(off), int(size))
    for name, cls in S.CUDA_MIRRORED.items():
        assert got[(name, "-")] == (0, C.sizeof(cls)), f"sizeof({name})"
        for field, ctype in cls._fields_:
            assert got[(name, field)] == (getattr(cls, field).offset, C.sizeof(ctype)), f"{name}.{field}"
