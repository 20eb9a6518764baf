"""fathom — Python bindings of libfathom (per-query read depth for sparse
decoding over offloaded KV caches).

The C library is loaded with ctypes from the package folder (``pip install .``
builds it). Failures raise :class:`FathomError` subclasses with the C
status, its name and message. Modules:

- ``fathom.core``: Basis, Store, Landmarks, Index (one KV head's index for
  a set of methods, as the decoder builds it), importance/water_fill/plan,
  select, attend, methods (numpy, zero-copy for conforming ndarrays)
- ``fathom.transformers``: FathomCache and the "fathom" attention function
  for Hugging Face transformers (imports torch and transformers)
- ``fathom.source``: Source (capture, synthetic), CaptureWriter, evaluate
"""
from ._lib import lib as _lib_handle, path as library_path
from .core import (
    BLOCK_TOKENS,
    DEFAULT_SEGMENT_BLOCKS,
    LANDMARK_TOKENS,
    LOCAL_TOKENS,
    MAX_DEPTH,
    PLANES,
    SINK_TOKENS,
    Basis,
    Index,
    Landmarks,
    Segment,
    Store,
    attend,
    depth_bits,
    depths_at,
    greedy_layer_budgets,
    importance,
    method_check,
    method_fixed_bits,
    method_needs,
    parse_method,
    plan,
    rel_l2,
    select,
    union_size,
    water_fill,
)
from .errors import (
    DeviceError,
    FathomError,
    FathomIOError,
    FormatError,
    InvalidArgumentError,
    NonFiniteError,
    NumericError,
    OutOfMemoryError,
    StateError,
    UnsupportedError,
)
from .source import CaptureWriter, MethodResult, Source, SourceInfo, evaluate

open_capture = Source.capture
synthetic = Source.synthetic


def status_name(status):
    """libfathom's fixed name of a status code (fathom_status_name)."""
    return _lib_handle.fathom_status_name(status).decode()


try:
    from importlib.metadata import version as _version

    __version__ = _version("fathom")
except Exception:  # not installed as a distribution (FATHOM_LIBRARY on a source tree)
    __version__ = "0+unknown"
