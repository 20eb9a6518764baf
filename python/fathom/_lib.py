"""Loading libfathom and declaring the C functions the package calls.

The shared library is installed next to this file by ``pip install .``;
``FATHOM_LIBRARY`` may name another build of it (a path to libfathom.so).
Every function that returns a status gets an ``errcheck`` that turns a
negative status into the matching :class:`fathom.FathomError` subclass, with
the message ``fathom_last_error`` holds for this thread (ctypes calls C on the
calling thread, so the message read right after the call is this call's).
"""
import ctypes as C
import os
import sys

from . import _structs as S
from .errors import UnsupportedError, error_for

_NAMES = {"darwin": "libfathom.dylib", "win32": "fathom.dll"}


def _find_library():
    override = os.environ.get("FATHOM_LIBRARY")
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _NAMES.get(sys.platform, "libfathom.so"))


path = _find_library()
try:
    lib = C.CDLL(path)
except OSError as e:
    raise ImportError(
        f"fathom: cannot load the C library {path} ({e}); install the package with "
        "`pip install .` from the repository root, or set FATHOM_LIBRARY to a built libfathom.so"
    ) from None

P = C.c_void_p  # every pointer to data or to an opaque object
PP = C.POINTER(C.c_void_p)  # an out-parameter for an opaque object
u32, u64, f64, cstr = C.c_uint32, C.c_uint64, C.c_double, C.c_char_p
STATUS = "status"  # restype marker: int status, checked

lib.fathom_status_name.restype = cstr
lib.fathom_status_name.argtypes = [C.c_int]
lib.fathom_last_error.restype = cstr
lib.fathom_last_error.argtypes = []


def _checker(library):
    """The errcheck of ``library``'s status functions: its own
    fathom_last_error holds the message (each fathom shared library keeps its
    own copy of the C core)."""
    last_error = getattr(library, "fathom_last_error", lib.fathom_last_error)
    last_error.restype, last_error.argtypes = cstr, []

    def check(result, func, args):
        if result < 0:
            name = lib.fathom_status_name(result).decode()
            raise error_for(result, name, last_error().decode(errors="replace"))
        return result

    return check


_check = _checker(lib)


# name: (restype, argtypes) in the order of include/fathom.h
_PROTOTYPES = {
    "fathom_abi_layout": (STATUS, [cstr, cstr, C.POINTER(C.c_size_t), C.POINTER(C.c_size_t)]),
    "fathom_abi_field": (cstr, [cstr, u32]),
    # basis
    "fathom_basis_fit": (STATUS, [PP, u32, P, u64, P, u64]),
    "fathom_basis_create": (STATUS, [PP, u32, P, P, P]),
    "fathom_basis_free": (None, [P]),
    "fathom_basis_dim": (u32, [P]),
    "fathom_basis_mean": (P, [P]),
    "fathom_basis_vectors": (P, [P]),
    "fathom_basis_eigenvalues": (P, [P]),
    "fathom_basis_rotate_key": (STATUS, [P, P, P]),
    "fathom_basis_rotate_query": (STATUS, [P, P, P]),
    # store
    "fathom_store_create": (STATUS, [PP, u32, u32, P]),
    "fathom_store_free": (None, [P]),
    "fathom_store_append": (STATUS, [P, P, u64]),
    "fathom_store_set_center": (STATUS, [P, P]),
    "fathom_store_center": (P, [P]),
    "fathom_store_length": (u64, [P]),
    "fathom_store_dim": (u32, [P]),
    "fathom_store_segment_blocks": (u32, [P]),
    "fathom_store_segment_count": (u32, [P]),
    "fathom_store_index_bytes": (u64, [P]),
    "fathom_store_allocated_bytes": (u64, [P]),
    "fathom_store_segment": (STATUS, [P, u32, C.POINTER(S.SegmentView)]),
    "fathom_store_word": (STATUS, [P, u32, u32, u64, C.POINTER(u64), C.POINTER(C.c_uint16)]),
    "fathom_store_decode": (STATUS, [P, u64, u64, P, P]),
    "fathom_store_variance": (STATUS, [P, P]),
    "fathom_store_scan": (STATUS, [P, P, P, u32, u64, P, C.POINTER(u64)]),
    # landmarks
    "fathom_landmarks_create": (STATUS, [PP, u32]),
    "fathom_landmarks_free": (None, [P]),
    "fathom_landmarks_append": (STATUS, [P, P, u64]),
    "fathom_landmarks_length": (u64, [P]),
    "fathom_landmarks_scan": (STATUS, [P, P, u32, u64, P, C.POINTER(u64)]),
    # plan
    "fathom_importance": (STATUS, [u32, u32, P, P, P]),
    "fathom_depths_at": (STATUS, [u32, P, f64, P]),
    "fathom_water_fill": (STATUS, [u32, P, u32, P, C.POINTER(f64)]),
    "fathom_water_fill_bisect": (STATUS, [u32, P, u32, P, C.POINTER(f64)]),
    "fathom_depth_bits": (f64, [u32, P]),
    "fathom_greedy_layer_budgets": (STATUS, [u32, P, u32, P, f64, P]),
    # select, attend
    "fathom_select": (STATUS, [P, u64, u32, u32, u32, P, P, C.POINTER(u32)]),
    "fathom_select_work_size": (C.c_size_t, [u64]),
    "fathom_union_size": (STATUS, [u32, P, P, C.POINTER(u32)]),
    "fathom_attend": (STATUS, [u32, P, P, P, P, u64, P]),
    "fathom_rel_l2": (f64, [u32, P, P]),
    # methods
    "fathom_method_parse": (STATUS, [cstr, C.POINTER(S.Method)]),
    "fathom_method_parse_list": (STATUS, [cstr, C.POINTER(S.Method), u32, C.POINTER(u32)]),
    "fathom_method_fixed_bits": (f64, [C.POINTER(S.Method), u32]),
    "fathom_method_check": (STATUS, [C.POINTER(S.Method), u32]),
    "fathom_method_needs": (C.c_uint, [C.POINTER(S.Method)]),
    # index
    "fathom_index_create": (STATUS, [PP, C.POINTER(S.Method), u32, u32, C.c_uint]),
    "fathom_index_free": (None, [P]),
    "fathom_index_append": (STATUS, [P, P, u64]),
    "fathom_index_clear": (STATUS, [P]),
    "fathom_index_length": (u64, [P]),
    "fathom_index_dim": (u32, [P]),
    "fathom_index_scratch_size": (C.c_size_t, [u32, u32]),
    "fathom_index_scores": (STATUS, [P, C.POINTER(S.Method), u32, u32, P, u64, P, P, C.POINTER(f64), C.POINTER(u64)]),
    "fathom_index_scratch_depths": (P, [P, u32, u32]),
    # source
    "fathom_capture_open": (STATUS, [PP, cstr]),
    "fathom_synth_open": (STATUS, [PP, cstr, u64, u32, u64]),
    "fathom_source_free": (None, [P]),
    "fathom_source_get_info": (STATUS, [P, C.POINTER(S.SourceInfo)]),
    "fathom_source_layer": (STATUS, [P, u32, P, P, P]),
    "fathom_source_metadata": (STATUS, [P, cstr, C.POINTER(cstr)]),
    "fathom_source_metadata_at": (STATUS, [P, u64, C.POINTER(cstr), C.POINTER(cstr)]),
    "fathom_source_dtypes": (STATUS, [P, u32, C.POINTER(C.c_int), C.POINTER(C.c_int), C.POINTER(C.c_int)]),
    "fathom_capture_write": (STATUS, [P, cstr, C.c_int]),
    "fathom_capture_writer_open": (STATUS, [PP, cstr, C.POINTER(S.SourceInfo), C.c_int]),
    "fathom_capture_writer_meta": (STATUS, [P, cstr, cstr]),
    "fathom_capture_writer_layer": (STATUS, [P, u32, P, P, P]),
    "fathom_capture_writer_close": (STATUS, [P]),
    # eval
    "fathom_eval_run": (STATUS, [P, C.POINTER(S.Method), u32, C.POINTER(S.EvalConfig), C.POINTER(S.MethodResult)]),
}



# The modules a FATHOM_MINIMAL build (src/common + src/core: no jansson, PCRE2)
# leaves out; their functions raise UnsupportedError when called.
_OPTIONAL = ("fathom_capture_", "fathom_synth_", "fathom_source_", "fathom_eval_")


def _absent(name, path):
    def call(*args):
        raise UnsupportedError(
            UnsupportedError.status, "unsupported",
            f"{name} is not in {path}: it was built with FATHOM_MINIMAL (src/common and src/core "
            "only); install the full library (jansson and PCRE2 present, no FATHOM_MINIMAL) for "
            "captures, synthetic sources and evaluation")
    call.__name__ = name
    return call


def declare(library, prototypes, optional=()):
    """Set restype/argtypes of every function in ``prototypes`` on a loaded
    library; STATUS functions raise on failure with the message of that
    library's fathom_last_error. A function whose name starts with one of
    ``optional`` and that the library lacks becomes a stub that raises
    UnsupportedError when called. Another fathom library (fathom.tier's
    libfathom_cuda.so) declares its functions the same way."""
    check = _check if library is lib else _checker(library)
    for name, (restype, argtypes) in prototypes.items():
        try:
            f = getattr(library, name)
        except AttributeError:
            if not name.startswith(tuple(optional)):
                raise
            setattr(library, name, _absent(name, library._name))
            continue
        f.argtypes = argtypes
        if restype is STATUS:
            f.restype = C.c_int
            f.errcheck = check
        else:
            f.restype = restype


declare(lib, _PROTOTYPES, _OPTIONAL)
minimal = not hasattr(lib.fathom_eval_run, "argtypes")  # a FATHOM_MINIMAL build


def new_handle():
    """An out-parameter for a create/open call: pass it, then read ``.value``."""
    return C.c_void_p()
