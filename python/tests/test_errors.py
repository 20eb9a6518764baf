"""C status codes become FathomError subclasses carrying the status, the
library's name for it and its message; Python-side argument checks raise
TypeError/ValueError before any C call."""
import pickle

import numpy as np
import pytest

import fathom
from fathom.errors import ERRORS, error_for
from conftest import full_library

STATUSES = {
    -1: ("invalid argument", fathom.InvalidArgumentError, ValueError),
    -2: ("out of memory", fathom.OutOfMemoryError, MemoryError),
    -3: ("i/o error", fathom.FathomIOError, OSError),
    -4: ("malformed file", fathom.FormatError, fathom.FathomError),
    -5: ("non-finite value", fathom.NonFiniteError, ValueError),
    -6: ("unsupported", fathom.UnsupportedError, fathom.FathomError),
    -7: ("numeric failure", fathom.NumericError, ArithmeticError),
    -8: ("invalid state", fathom.StateError, fathom.FathomError),
    -9: ("device error", fathom.DeviceError, fathom.FathomError),
}


@pytest.mark.parametrize("status", sorted(STATUSES))
def test_every_status_has_its_class(status):
    name, cls, base = STATUSES[status]
    assert fathom.status_name(status) == name  # the C library's fixed name
    e = error_for(status, name, "why")
    assert type(e) is cls and isinstance(e, fathom.FathomError) and isinstance(e, base)
    assert (e.status, e.status_name, e.message, str(e)) == (status, name, "why", f"{name}: why")
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is cls and again.message == "why"


def test_table_covers_the_header_and_unknown_codes():
    assert sorted(ERRORS) == sorted(STATUSES)
    e = error_for(-99, fathom.status_name(-99), "")
    assert type(e) is fathom.FathomError and e.status == -99 and e.status_name == "unknown status"


@full_library
def test_real_failures(tmp_path):
    with pytest.raises(fathom.InvalidArgumentError) as info:
        fathom.Store(0)
    assert info.value.status == -1 and "dim" in info.value.message

    store = fathom.Store(4)
    with pytest.raises(fathom.NonFiniteError) as info:
        store.append(np.array([[1, 2, np.nan, 4]], np.float32))
    assert info.value.status == -5 and info.value.message
    assert len(store) == 0  # nothing appended

    with pytest.raises(fathom.FathomIOError) as info:
        fathom.open_capture(tmp_path / "absent.safetensors")
    assert info.value.status == -3 and "absent.safetensors" in info.value.message

    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    with pytest.raises(fathom.FormatError) as info:
        fathom.open_capture(junk)
    assert info.value.status == -4

    with pytest.raises(fathom.InvalidArgumentError, match="bogus"):
        fathom.evaluate(fathom.synthetic("smollm2-135m", 256, 4), "bogus:3", k=64)
    with pytest.raises(fathom.InvalidArgumentError):
        fathom.synthetic("no-such-preset", 256, 4)
    with pytest.raises(fathom.InvalidArgumentError):
        store.decode(np.array([5, 0, 0, 0], np.uint8), 0, 0)


def test_python_side_checks_name_the_argument():
    store = fathom.Store(4)
    with pytest.raises(TypeError, match=r"keys: dtype float64, expected float32"):
        store.append(np.zeros((2, 4)))
    with pytest.raises(TypeError, match="non-native byte order"):
        store.append(np.zeros((2, 4), ">f4"))
    with pytest.raises(ValueError, match="keys: not a C-contiguous"):
        store.append(np.zeros((4, 2), np.float32).T)
    with pytest.raises(ValueError, match="rows of 3 values, expected dim = 4"):
        store.append(np.zeros((2, 3), np.float32))
    store.append([[1, 2, 3, 4]])  # a list has no buffer to share: converted
    assert len(store) == 1
    store.close()
    with pytest.raises(ValueError, match="Store is closed"):
        len(store)


def test_absent_functions_of_a_minimal_build_raise_unsupported():
    import fathom._lib as L
    if not L.minimal:
        pytest.skip("the full library: every function is present")
    with pytest.raises(fathom.UnsupportedError, match="FATHOM_MINIMAL"):
        fathom.synthetic("smollm2-135m", 256, 4)
