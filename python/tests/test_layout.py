"""Guard: every struct the Python side mirrors (fathom._structs.MIRRORED)
has the C compiler's layout, as the library exports it: the same size, the
same fields in the same order, each at the same offset with the same size."""
import ctypes as C

import pytest

import fathom
from fathom import _structs as S
from fathom._lib import lib


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
