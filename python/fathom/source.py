"""Sources of keys, values and queries (a capture file or the synthetic
generator), the capture writer, and the fidelity harness (fathom_eval_run):
the same evaluation as ``fathom eval``, with the same numbers."""
import ctypes as C
from dataclasses import dataclass

import numpy as np

from . import _structs as S
from ._arrays import f32, ptr
from ._lib import lib, new_handle
from .core import _Handle, parse_methods

DTYPES = {"f32": 0, "f16": 1, "bf16": 2}
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
LAYER_BUDGETS = {"flat": 0, "greedy": 1}


@dataclass(frozen=True)
class SourceInfo:
    model: str
    layers: int
    q_heads: int  # Hq
    kv_heads: int  # Hkv
    dim: int  # head dimension d
    tokens: int  # n: keys/values per layer and KV head
    positions: int  # P: queried positions, the last P
    first_query: int  # absolute position of the first query

    def _to_c(self):
        c = S.SourceInfo()
        c.model = self.model.encode()[:63]
        for f in ("layers", "q_heads", "kv_heads", "dim", "tokens", "positions", "first_query"):
            setattr(c, f, getattr(self, f))
        return c


class Source(_Handle):
    """A capture (``Source.capture(path)``) or a synthetic window
    (``Source.synthetic(preset, context, positions, seed)``)."""

    _free = lib.fathom_source_free

    @classmethod
    def capture(cls, path):
        """Open a capture file (safetensors, docs/capture-format.md)."""
        h = new_handle()
        lib.fathom_capture_open(C.byref(h), str(path).encode())
        return cls(h.value)

    @classmethod
    def synthetic(cls, preset, context, positions=128, seed=1):
        """The seeded synthetic generator: preset "qwen3-8b", "llama-3.1-8b"
        or "smollm2-135m" (docs/synthetic.md)."""
        h = new_handle()
        lib.fathom_synth_open(C.byref(h), preset.encode(), context, positions, seed)
        return cls(h.value)

    @property
    def info(self):
        c = S.SourceInfo()
        lib.fathom_source_get_info(self._ptr, C.byref(c))
        fields = {f: getattr(c, f) for f, _ in S.SourceInfo._fields_}
        fields["model"] = c.model.decode(errors="replace")
        return SourceInfo(**fields)

    def layer(self, layer, q=True, k=True, v=True):
        """(q [Hq, P, d], k [Hkv, n, d], v [Hkv, n, d]) float32 of one layer;
        an array not asked for is None."""
        i = self.info
        qa = np.empty((i.q_heads, i.positions, i.dim), np.float32) if q else None
        ka = np.empty((i.kv_heads, i.tokens, i.dim), np.float32) if k else None
        va = np.empty((i.kv_heads, i.tokens, i.dim), np.float32) if v else None
        lib.fathom_source_layer(self._ptr, layer, ptr(qa), ptr(ka), ptr(va))
        return qa, ka, va

    def dtypes(self, layer):
        """Stored dtypes ("f32", "f16", "bf16") of layer's q, k and v."""
        q, k, v = C.c_int(), C.c_int(), C.c_int()
        lib.fathom_source_dtypes(self._ptr, layer, C.byref(q), C.byref(k), C.byref(v))
        return tuple(_DTYPE_NAMES[x.value] for x in (q, k, v))

    def metadata(self):
        """The capture's extra metadata entries in file order ({} for synthetic)."""
        out, i = {}, 0
        key, value = C.c_char_p(), C.c_char_p()
        while True:
            lib.fathom_source_metadata_at(self._ptr, i, C.byref(key), C.byref(value))
            if key.value is None:
                return out
            out[key.value.decode()] = value.value.decode()
            i += 1

    def write(self, path, dtype="bf16"):
        """Write every layer to a capture file in dtype "f32", "f16" or "bf16"."""
        lib.fathom_capture_write(self._ptr, str(path).encode(), DTYPES[dtype])


class CaptureWriter(_Handle):
    """Write a capture from numpy arrays, layer by layer::

        with CaptureWriter(path, info, dtype="f32") as w:
            w.meta("prompt", "...")
            for l in range(info.layers):
                w.layer(l, q, k, v)

    ``close()`` (or leaving the ``with``) writes the header; the file is
    complete only then.
    """

    def __init__(self, path, info, dtype="bf16"):
        self.info = info
        self._c_info = info._to_c()
        h = new_handle()
        lib.fathom_capture_writer_open(C.byref(h), str(path).encode(), C.byref(self._c_info), DTYPES[dtype])
        super().__init__(h.value)

    def meta(self, key, value):
        lib.fathom_capture_writer_meta(self._ptr, key.encode(), value.encode())

    def layer(self, layer, q, k, v):
        i = self.info
        q = f32(q, "q", shape=(i.q_heads, i.positions, i.dim))
        k = f32(k, "k", shape=(i.kv_heads, i.tokens, i.dim))
        v = f32(v, "v", shape=(i.kv_heads, i.tokens, i.dim))
        lib.fathom_capture_writer_layer(self._ptr, layer, ptr(q), ptr(k), ptr(v))

    def close(self):
        """Write the header and close (the writer is freed either way)."""
        h, self._h = getattr(self, "_h", None), None
        if h:
            lib.fathom_capture_writer_close(h)

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.close()
        else:  # still free the writer; its error must not hide the first one
            try:
                self.close()
            except Exception:
                pass


@dataclass(frozen=True)
class MethodResult:
    """One method's row of ``fathom eval`` (the fields of its JSON)."""

    name: str
    bits_per_token: float  # mean over query groups
    scan_bytes_per_step: float  # all layers and KV heads, one decode step
    row_bytes_per_step: float  # union of the group's winners, K and V rows in bf16
    rel_error: float  # mean relative L2 error against dense attention
    rel_error_stderr: float
    selection_ratio: float  # mean |selected| / n_visible


def evaluate(source, methods, k, calib=None, layer_budget="flat", threads=0, max_positions=0,
             planes_as_keys=False, progress=None):
    """Run the fidelity harness (fathom_eval_run) over ``source``.

    methods: "fathom:48,ds:32" or a list of specs. k: selected keys per query
    head (sink and local included). calib: a Source of other text, or None
    for statistics from the evaluated window. progress: None or
    ``fn(done, total)``, called from the library's worker threads.
    Returns a list of MethodResult in the order of ``methods``.
    """
    ms = parse_methods(methods)
    cfg = S.EvalConfig()
    cfg.k = k
    cfg.calib = calib._ptr if calib is not None else None
    cfg.layer_budget = LAYER_BUDGETS[layer_budget]
    cfg.threads = threads
    cfg.max_positions = max_positions
    cfg.planes_as_keys = int(bool(planes_as_keys))
    if progress is not None:
        callback = S.PROGRESS_FN(lambda user, done, total: progress(done, total))
        cfg.progress = callback  # the C side calls it only during eval_run, while `callback` lives
    results = (S.MethodResult * len(ms))()
    lib.fathom_eval_run(source._ptr, ms, len(ms), C.byref(cfg), results)
    return [
        MethodResult(r.name.decode(), r.bits_per_token, r.scan_bytes_per_step, r.row_bytes_per_step,
                     r.rel_error, r.rel_error_stderr, r.selection_ratio)
        for r in results
    ]
