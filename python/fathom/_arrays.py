"""numpy buffers in and out of C: dtype and layout checks, and read-only views
of memory the library owns.

An ndarray argument is passed to C by pointer, without a copy, so it must
already have the dtype the C API takes, native byte order and C-contiguous
layout; otherwise the call raises TypeError (dtype) or ValueError (layout,
shape) naming the argument and the conversion that fixes it. Other sequences
(lists, tuples, scalars) are converted, since they have no buffer to share.
"""
import ctypes as C

import numpy as np


def array(a, name, dtype, ndim=None, shape=None):
    """``a`` as a C-contiguous ndarray of ``dtype`` (no copy for an ndarray).

    ``ndim`` may be an int or a tuple of accepted ranks; ``shape`` a tuple
    whose ``None`` entries are free.
    """
    dtype = np.dtype(dtype)
    if isinstance(a, np.ndarray):
        if a.dtype != dtype:
            raise TypeError(
                f"{name}: dtype {a.dtype}{'' if a.dtype.isnative else ' (non-native byte order)'}, expected {dtype} "
                f"(convert with np.ascontiguousarray({name}, dtype=np.{dtype}))"
            )
        if not a.flags.c_contiguous or not a.flags.aligned:
            raise ValueError(
                f"{name}: not a C-contiguous aligned array (strides {a.strides}); "
                f"pass np.ascontiguousarray({name})"
            )
    else:
        a = np.ascontiguousarray(a, dtype=dtype)
    if ndim is not None:
        ranks = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if a.ndim not in ranks:
            raise ValueError(f"{name}: {a.ndim}-d array of shape {a.shape}, expected {' or '.join(map(str, ranks))}-d")
    if shape is not None:
        if a.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape)):
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise ValueError(f"{name}: shape {a.shape}, expected {want}")
    return a


def f32(a, name, ndim=None, shape=None):
    return array(a, name, np.float32, ndim, shape)


def ptr(a):
    """The data pointer of an ndarray (None for None)."""
    return None if a is None else a.ctypes.data


def view(address, shape, dtype, owner):
    """A read-only ndarray over C memory at ``address`` that keeps ``owner``
    (the object that frees that memory) alive as long as the array lives."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0 or not address:
        return np.empty(shape, dtype)
    raw = (C.c_char * (count * dtype.itemsize)).from_address(address)
    raw._fathom_owner = owner
    out = np.frombuffer(raw, dtype=dtype).reshape(shape)
    out.flags.writeable = False
    return out
