"""The KV tier from torch: sessions whose K/V and bit-plane index live in
pinned host memory and grow on the GPU (include/fathom_cuda.h, "KV tier").

``KVTier`` wraps ``fathom_cuda_tier_*`` with ctypes over libfathom_cuda.so
(built into the package by ``FATHOM_CUDA=1 pip install .``; without it,
creating a KVTier raises :class:`fathom.UnsupportedError` saying so, and
``import fathom`` is unaffected). Tensors go to C by ``data_ptr()`` on
``torch.cuda.current_stream()``; every dtype, device, shape and layout is
checked first (``TypeError`` / ``ValueError``).

The per-step work is two torch custom ops, so a decode step that contains
them can be captured in a CUDA graph (``torch.cuda.graph``) or traced by
``torch.compile`` (their fake kernels give shapes without running C):

- ``fathom::tier_append(state, tier, layer, sessions, counts, max_count, keys, values)``
- ``fathom::tier_step(state, tier, layer, sessions, capacity, k, sink, local,
  budget, scale, queries, workspace, fixed_depths) -> (out, lse)``
  (fixed_depths empty: a water-filling plan with budget; else the depths)

``state`` is the tier's one-element device tensor that append declares it
mutates and step reads, which orders them for the compiler; ``tier`` is the
KVTier's id. Neither op synchronizes the host: the C tier reads lengths,
counts and segment tables from device memory, so one captured graph replays
while sessions grow, as long as the host ``reserve``\\ s capacity first.
"""
import ctypes as C
import itertools
import math
import os
import re
import weakref

import numpy as np
import torch

from . import _lib
from ._lib import P, STATUS, u32, u64
from ._structs import StepArgs, TierCacheConfig, TierShape, TierUsage, TierView
from .core import LOCAL_TOKENS, SINK_TOKENS
from .errors import UnsupportedError

MAX_GROUP = 16  # FATHOM_CUDA_TIER_MAX_GROUP
DIMS = (64, 128, 256)
CACHE_WINDOW = 16  # FATHOM_CUDA_TIER_CACHE_WINDOW: the plans a fill ranks lines by
MAX_CACHE_WINDOW = 255  # FATHOM_CUDA_TIER_CACHE_MAX_WINDOW
ROW_WAYS = (0, 1, 2, 4, 8)  # fathom_cuda_tier_cache_config.row_ways: 0 and 1 direct-mapped


def row_set_bytes(dim, row_ways):
    """Row-cache bytes one (layer, KV head) pays per set (a slot when
    direct-mapped): bf16 K and V rows and a tag each, and with sets a step
    stamp per way (fathom_cuda_tier_cache_config.row_ways)."""
    ways = max(int(row_ways), 1)
    return ways * (4 * int(dim) + (8 if ways > 1 else 4))


_PROTOTYPES = {
    "fathom_cuda_tier_create": (STATUS, [C.POINTER(TierShape), C.POINTER(P)]),
    "fathom_cuda_tier_destroy": (None, [P]),
    "fathom_cuda_tier_session_create": (STATUS, [P, C.POINTER(u32)]),
    "fathom_cuda_tier_session_free": (STATUS, [P, u32]),
    "fathom_cuda_tier_reserve": (STATUS, [P, u32, u64]),
    "fathom_cuda_tier_length": (STATUS, [P, u32, C.POINTER(u64)]),
    "fathom_cuda_tier_truncate": (STATUS, [P, u32, u64]),
    "fathom_cuda_tier_fork": (STATUS, [P, u32, C.POINTER(u32)]),
    "fathom_cuda_tier_set_center": (STATUS, [P, u32, P]),
    "fathom_cuda_tier_center": (STATUS, [P, u32, u32, u32, C.POINTER(P)]),
    "fathom_cuda_tier_usage_of": (STATUS, [P, u32, C.POINTER(TierUsage)]),
    "fathom_cuda_tier_segment": (STATUS, [P, u32, u32, u32, u32, C.POINTER(TierView)]),
    "fathom_cuda_tier_sums": (STATUS, [P, u32, u32, u32, C.POINTER(P), C.POINTER(P), C.POINTER(P)]),
    "fathom_cuda_tier_check": (STATUS, [P]),
    "fathom_cuda_tier_append": (STATUS, [P, u32, P, u32, P, u32, P, P, P]),
    "fathom_cuda_tier_workspace_size": (STATUS, [P, C.POINTER(StepArgs), C.POINTER(C.c_size_t)]),
    "fathom_cuda_tier_step": (STATUS, [P, C.POINTER(StepArgs), P]),
    "fathom_cuda_tier_cache_set": (STATUS, [P, u32, C.POINTER(TierCacheConfig)]),
    "fathom_cuda_tier_cache_fill": (STATUS, [P, u32, P, P]),
    "fathom_cuda_tier_ahead_join": (STATUS, [P, P]),
    "fathom_cuda_tier_set_ahead_start": (STATUS, [P, C.c_int]),
    "fathom_cuda_tier_cache_bytes": (STATUS, [P, u32, C.POINTER(u64)]),
}

_cuda = None


def cuda_library():
    """libfathom_cuda.so, loaded on first use (FATHOM_CUDA_LIBRARY may name
    another build); UnsupportedError if the package was built without it."""
    global _cuda
    if _cuda is None:
        path = os.environ.get("FATHOM_CUDA_LIBRARY") or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "libfathom_cuda.so")
        if not os.path.isfile(path):
            raise UnsupportedError(
                UnsupportedError.status, "unsupported",
                f"fathom.tier needs {path}, which this installation lacks: reinstall with "
                "`FATHOM_CUDA=1 pip install .` (nvcc on PATH) or set FATHOM_CUDA_LIBRARY")
        library = C.CDLL(path)
        _lib.declare(library, _PROTOTYPES)
        _cuda = library
    return _cuda


def available():
    """True where a KVTier can be created: libfathom_cuda.so and a CUDA device."""
    try:
        cuda_library()
    except (UnsupportedError, OSError):
        return False
    return torch.cuda.is_available()


def parse_method(method):
    """(kind, parameter) of a method the C tier step runs: ("fathom", B) for
    "fathom:B" (water-filling plans with budget B), ("fathom-centered", B)
    for "fathom-centered:B" (the same plans over a session centered on its
    first append's mean: KVTier.set_center) or ("ds", c) for "ds:c" (fixed
    depths: 4 on c channels per KV head); anything else raises
    UnsupportedError."""
    m = re.fullmatch(r"(fathom|fathom-centered|ds):(\d+)", str(method).strip())
    if not m or int(m.group(2)) < 1:
        raise UnsupportedError(
            UnsupportedError.status, "unsupported",
            f"method {method!r}: the KV tier step runs water-filling plans (\"fathom:B\", "
            "\"fathom-centered:B\") and fixed depths (\"ds:c\") only")
    return m.group(1), int(m.group(2))


# ---------------------------------------------------------------- checks

def _tensor(name, t, dtype, shape, device):
    """Raise TypeError/ValueError unless t is a contiguous tensor of dtype on
    device with shape (None: any extent)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name}: dtype {t.dtype}, expected {dtype}")
    if t.device != device:
        raise ValueError(f"{name}: on {t.device}, expected {device} (the tier's device)")
    if t.dim() != len(shape) or any(s is not None and s != e for s, e in zip(shape, t.shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name}: shape {list(t.shape)}, expected {want}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: not contiguous (call .contiguous())")
    return t.data_ptr()


def _stream():
    return C.c_void_p(torch.cuda.current_stream().cuda_stream)


_TIERS = weakref.WeakValueDictionary()  # id -> KVTier, for the custom ops
_ids = itertools.count(1)


class KVTier:
    """Sessions of one model shape on the current CUDA device.

    layers, kv_heads, group (query heads per KV head, 1..16), dim (64, 128 or
    256); max_sessions alive at once; max_tokens per session (sizes the
    device segment table); segment_blocks (blocks of 64 tokens per host
    segment, a multiple of 32; 0: the library's 64).
    """

    def __init__(self, layers, kv_heads, group, dim, *, max_sessions=64, max_tokens=1 << 20,
                 segment_blocks=0):
        lib = cuda_library()
        if not torch.cuda.is_available():
            raise UnsupportedError(UnsupportedError.status, "unsupported",
                                   "KVTier: torch sees no CUDA device")
        self.layers, self.kv_heads, self.group, self.dim = int(layers), int(kv_heads), int(group), int(dim)
        self.max_tokens = int(max_tokens)
        self.device = torch.device("cuda", torch.cuda.current_device())
        shape = TierShape(self.layers, self.kv_heads, self.group, self.dim, int(segment_blocks),
                          int(max_sessions), self.max_tokens)
        handle = P()
        lib.fathom_cuda_tier_create(C.byref(shape), C.byref(handle))
        self._lib, self._handle = lib, handle
        self.id = next(_ids)
        _TIERS[self.id] = self
        self.state = torch.zeros(1, dtype=torch.int32, device=self.device)
        self._no_depths = torch.empty(0, dtype=torch.uint8, device=self.device)  # fathom:B: plan, no fixed depths
        self._workspaces = {}

    # ------------------------------------------------------------ host side
    def _h(self):
        if not self._handle:
            raise ValueError("KVTier: closed")
        return self._handle

    def close(self):
        """Free every session and the tier (idempotent). Synchronizes the device."""
        if getattr(self, "_handle", None):
            torch.cuda.synchronize(self.device)
            self._lib.fathom_cuda_tier_destroy(self._handle)
            self._handle = P()
            self._workspaces.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: torch or the library already gone
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def session(self):
        """A new empty session; its id."""
        s = u32()
        self._lib.fathom_cuda_tier_session_create(self._h(), C.byref(s))
        return s.value

    def free(self, session):
        self._lib.fathom_cuda_tier_session_free(self._h(), session)

    def reserve(self, session, tokens):
        """Capacity for `tokens` tokens in total (never shrinks). Host call:
        no work touching the session may be in flight."""
        self._lib.fathom_cuda_tier_reserve(self._h(), session, int(tokens))

    def length(self, session):
        n = u64()
        self._lib.fathom_cuda_tier_length(self._h(), session, C.byref(n))
        return n.value

    def truncate(self, session, n):
        self._lib.fathom_cuda_tier_truncate(self._h(), session, int(n))

    def fork(self, session):
        s = u32()
        self._lib.fathom_cuda_tier_fork(self._h(), session, C.byref(s))
        return s.value

    def set_center(self, session, center=None):
        """Center the session's codes (fathom-centered): its planes hold
        k - mu per (layer, KV head). center None: mu is the mean of each
        layer's first append's keys, taken on the GPU by that append (as the
        CPU index takes it); else float32 [layers, kv_heads, dim], finite.
        Only on an empty session; a second call replaces the center. Host
        call: no work touching the session may be in flight."""
        ptr = None
        if center is not None:
            center = np.ascontiguousarray(center, dtype=np.float32)
            if center.shape != (self.layers, self.kv_heads, self.dim):
                raise ValueError(f"set_center: center shape {list(center.shape)}, expected "
                                 f"[{self.layers}, {self.kv_heads}, {self.dim}]")
            ptr = center.ctypes.data
        self._lib.fathom_cuda_tier_set_center(self._h(), session, ptr)

    def center(self, session, layer, head):
        """The center of (session, layer, KV head): a float32 [dim] copy, or
        None when the session is not centered or that layer's first append
        has not taken it yet. Host call (synchronize first)."""
        p = P()
        self._lib.fathom_cuda_tier_center(self._h(), session, layer, head, C.byref(p))
        if not p:
            return None
        return np.ctypeslib.as_array(C.cast(p, C.POINTER(C.c_float)), shape=(self.dim,)).copy()

    def usage(self, session):
        u = TierUsage()
        self._lib.fathom_cuda_tier_usage_of(self._h(), session, C.byref(u))
        return {name: getattr(u, name) for name, _ in TierUsage._fields_}

    def check(self):
        """Raise the first error the GPU recorded since the last check
        (an append beyond capacity, a length above a step's capacity).
        Synchronizes the device."""
        self._lib.fathom_cuda_tier_check(self._h())

    def segment(self, session, layer, head, segment):
        """Copies of one host segment of (session, layer, KV head): planes
        uint64 [dim, 4, S], scales uint16 (fp16 bits) [dim, S], kv uint16
        (bf16 bits) [64*S, 2, dim] and its first token."""
        v = TierView()
        self._lib.fathom_cuda_tier_segment(self._h(), session, layer, head, segment, C.byref(v))
        S, d = v.segment_blocks, self.dim

        def copy(ptr, ctype, shape):
            return np.ctypeslib.as_array(C.cast(ptr, C.POINTER(ctype)), shape=shape).copy()

        return {"planes": copy(v.planes, C.c_uint64, (d, 4, S)), "scales": copy(v.scales, C.c_uint16, (d, S)),
                "kv": copy(v.kv, C.c_uint16, (64 * S, 2, d)), "first_token": v.first_token}

    def sums(self, session, layer, head):
        """(shift, sum, sum_sq) of (session, layer, KV head): float64 [dim] copies."""
        ptrs = [P(), P(), P()]
        self._lib.fathom_cuda_tier_sums(self._h(), session, layer, head, *map(C.byref, ptrs))
        return tuple(np.ctypeslib.as_array(C.cast(p, C.POINTER(C.c_double)), shape=(self.dim,)).copy()
                     for p in ptrs)

    # ------------------------------------------------------------ HBM cache
    def cache_set(self, session, *, plane_bytes=0, row_bytes=0, tokens=None, window=CACHE_WINDOW, row_ways=1,
                  ahead_lines=0, ahead_rows=0):
        """Give the session an empty HBM cache (include/fathom_cuda.h, "HBM
        cache"): plane_bytes of device memory for plane lines covering tokens
        [0, tokens) (None: the tier's max_tokens), row_bytes for K/V row
        slots, the plane lines ranked at each fill by the last `window` plans
        the steps noted (0..255; 0: by variance alone); row_ways 1: direct-
        mapped row slots, 2, 4 or 8: sets of that many ways kept by recency of
        use; ahead_lines and ahead_rows > 0: read-ahead, each layer's step
        copies into HBM staging, beside its own work or after it
        (set_ahead_start), up to that many plane
        lines per KV head and union rows of the next layer's last step that
        the cache lacks (lines only for steps that scan in place). All sizes 0
        frees it. The steps' results are the same bits with or without a cache
        or read-ahead. Host call (synchronizes the device); capture
        graphs after it, since a graph captured while no session had a window
        does not note plans, nor one without a row cache of that kind insert
        rows."""
        plane_bytes, row_bytes, window, row_ways = int(plane_bytes), int(row_bytes), int(window), int(row_ways)
        ahead_lines, ahead_rows = int(ahead_lines), int(ahead_rows)
        if not 0 <= ahead_lines <= 4 * self.dim or not 0 <= ahead_rows <= 4096:
            raise ValueError(f"cache_set: ahead_lines {ahead_lines} not in 0..{4 * self.dim} or ahead_rows "
                             f"{ahead_rows} not in 0..4096")
        if row_ways not in ROW_WAYS:
            raise ValueError(f"cache_set: row_ways {row_ways} not one of {ROW_WAYS}")
        tokens = self.max_tokens if tokens is None else int(tokens)
        if plane_bytes < 0 or row_bytes < 0:
            raise ValueError(f"cache_set: plane_bytes {plane_bytes} and row_bytes {row_bytes} must be >= 0")
        if not 0 <= window <= MAX_CACHE_WINDOW:
            raise ValueError(f"cache_set: window {window} not in 0..{MAX_CACHE_WINDOW}")
        if not 1 <= tokens <= self.max_tokens:
            raise ValueError(f"cache_set: tokens {tokens} not in 1..max_tokens {self.max_tokens}")
        cfg = TierCacheConfig(plane_bytes, tokens, row_bytes, window, row_ways, ahead_lines, ahead_rows)
        self._lib.fathom_cuda_tier_cache_set(self._h(), session, C.byref(cfg))

    def cache_fill(self, session):
        """Choose the session's plane lines (by its window's plans, else by
        variance) and copy their closed blocks from host memory, for every
        layer and KV head, on the current stream. No-op without plane lines."""
        self._lib.fathom_cuda_tier_cache_fill(self._h(), session, None, _stream())

    def ahead_join(self):
        """The current stream waits for a read-ahead that a step captured
        into the graph it is capturing left to the next step: call before
        ending a capture whose last step is not of the last layer, or with
        set_ahead_start("across") before ending any capture of a step (no-op
        otherwise)."""
        self._lib.fathom_cuda_tier_ahead_join(self._h(), _stream())

    def set_ahead_start(self, start):
        """When a captured step starts its read-ahead of the next layer:
        "beside" (with the step; the default), "between" (a step of a layer
        other than the last starts it after its own work, so that the copy
        has the link while the model's work between two layers runs: for
        models whose work there takes longer than the copy; the last layer's
        starts it with the step) or "across" (every layer's step, the last
        too: its copy of layer 0 runs beside the model's work up to the next
        decode step's first layer; a capture then ends with ahead_join).
        Eager steps start it with the step. Same bits either way."""
        code = {"beside": 0, "between": 1, "across": 2}.get(start)
        if code is None:
            raise ValueError(f"ahead start {start!r} is not 'beside', 'between' or 'across'")
        self._lib.fathom_cuda_tier_set_ahead_start(self._h(), code)

    def cache_bytes(self, session):
        """Device bytes the session's cache holds allocated (0 without one)."""
        n = u64()
        self._lib.fathom_cuda_tier_cache_bytes(self._h(), session, C.byref(n))
        return n.value

    # ------------------------------------------------------------ device side
    def sessions_tensor(self, sessions):
        """The device tensor of session ids the per-step calls take."""
        return torch.tensor(list(sessions), dtype=torch.int32, device=self.device)

    def workspace(self, batch, capacity, k):
        """The step's workspace for (batch, capacity class, k): one cached
        uint8 device tensor, so a captured graph keeps its address."""
        key = (int(batch), int(capacity), int(k))
        ws = self._workspaces.get(key)
        if ws is None:
            # the size depends on batch, capacity and k; the pointers only need to be set
            args = StepArgs(layer=0, sessions=1, batch=key[0], capacity_tokens=key[1], k=key[2], budget=1,
                            scale=1.0, queries=1, out=1)
            size = C.c_size_t()
            self._lib.fathom_cuda_tier_workspace_size(self._h(), C.byref(args), C.byref(size))
            ws = torch.empty(max(size.value, 1), dtype=torch.uint8, device=self.device)
            self._workspaces[key] = ws
        return ws

    def append(self, layer, sessions, keys, values, counts=None, max_count=None):
        """Append tokens to every session of a batch for one layer.

        sessions: int32 device [B]; keys, values: bf16 device
        [total, kv_heads, dim], batch entry i's rows after those of entries
        before it. counts: int32 device [B] (None: total / B tokens each);
        max_count bounds every count (None: total / B)."""
        B = sessions.shape[0] if isinstance(sessions, torch.Tensor) else 0
        total = keys.shape[0] if isinstance(keys, torch.Tensor) else 0
        if counts is None:
            if B == 0 or total % B:
                raise ValueError(f"append: {total} rows do not split evenly over {B} sessions; pass counts")
            counts = torch.full((B,), total // B, dtype=torch.int32, device=self.device)
        if max_count is None:
            max_count = total // B if B else 0
        torch.ops.fathom.tier_append(self.state, self.id, int(layer), sessions, counts, int(max_count),
                                     keys, values)

    def step(self, layer, sessions, queries, *, capacity, k, budget=0, sink=SINK_TOKENS, local=LOCAL_TOKENS,
             scale=None, fixed_depths=None):
        """Sparse attention of one layer for a batch: queries bf16 device
        [B, kv_heads, group, dim] -> (out bf16 [B, kv_heads, group, dim],
        lse float32 [B, kv_heads, group]). capacity bounds every session's
        length (the graph's capacity class), budget is fathom:B's B, scale
        the softmax scale (None: 1/sqrt(dim)). fixed_depths: uint8 device
        [B, kv_heads, dim] depths 0..4 scanned instead of a plan (ds:c: 4 on
        its c channels); budget is then unused."""
        if scale is None:
            scale = 1.0 / math.sqrt(self.dim)
        B = sessions.shape[0] if isinstance(sessions, torch.Tensor) else 0
        ws = self.workspace(B, capacity, k)
        if fixed_depths is None:
            fixed_depths = self._no_depths
        return torch.ops.fathom.tier_step(self.state, self.id, int(layer), sessions, int(capacity), int(k),
                                          int(sink), int(local), int(budget), float(scale), queries, ws,
                                          fixed_depths)

    def ds_depths(self, session, layer, channels, tokens=None):
        """Double Sparsity's fixed depths for (session, layer) without
        calibration queries: depth 4 on the `channels` channels of each KV
        head with the largest mean square key (from the running sums over
        the layer's `tokens` keys; None: the session's length, which needs
        every layer at the same length), 0 elsewhere; uint8 numpy
        [kv_heads, dim]. Host call (synchronize first)."""
        if not 1 <= channels <= self.dim:
            raise ValueError(f"ds_depths: {channels} channels not in 1..{self.dim}")
        n = max(self.length(session) if tokens is None else int(tokens), 1)
        out = np.zeros((self.kv_heads, self.dim), np.uint8)
        for h in range(self.kv_heads):
            shift, s1, s2 = self.sums(session, layer, h)
            mean = shift + s1 / n
            power = s2 / n - (s1 / n) ** 2 + mean ** 2  # E[k^2] = var + mean^2
            out[h, np.argsort(-power, kind="stable")[:channels]] = 4
        return out


def _tier(tier_id):
    t = _TIERS.get(tier_id)
    if t is None or not t._handle:
        raise ValueError(f"fathom tier {tier_id}: no such open KVTier")
    return t


# ---------------------------------------------------------------- custom ops

@torch.library.custom_op("fathom::tier_append", mutates_args=("state",))
def tier_append(state: torch.Tensor, tier: int, layer: int, sessions: torch.Tensor, counts: torch.Tensor,
                max_count: int, keys: torch.Tensor, values: torch.Tensor) -> None:
    t = _tier(tier)
    dev = t.device
    if not 0 <= layer < t.layers:
        raise ValueError(f"append: layer {layer} not in 0..{t.layers - 1}")
    ps = _tensor("sessions", sessions, torch.int32, (None,), dev)
    B = sessions.shape[0]
    if B < 1:
        raise ValueError("append: empty batch")
    pc = _tensor("counts", counts, torch.int32, (B,), dev)
    pk = _tensor("keys", keys, torch.bfloat16, (None, t.kv_heads, t.dim), dev)
    pv = _tensor("values", values, torch.bfloat16, tuple(keys.shape), dev)
    if not 0 <= max_count <= keys.shape[0]:
        raise ValueError(f"append: max_count {max_count} not in 0..{keys.shape[0]} (the rows given)")
    t._lib.fathom_cuda_tier_append(t._h(), layer, P(ps), B, P(pc), max_count, P(pk), P(pv), _stream())


@tier_append.register_fake
def _(state, tier, layer, sessions, counts, max_count, keys, values):
    return None


@torch.library.custom_op("fathom::tier_step", mutates_args=("workspace",))
def tier_step(state: torch.Tensor, tier: int, layer: int, sessions: torch.Tensor, capacity: int, k: int,
              sink: int, local: int, budget: int, scale: float, queries: torch.Tensor,
              workspace: torch.Tensor, fixed_depths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    t = _tier(tier)
    dev = t.device
    if not 0 <= layer < t.layers:
        raise ValueError(f"step: layer {layer} not in 0..{t.layers - 1}")
    ps = _tensor("sessions", sessions, torch.int32, (None,), dev)
    B = sessions.shape[0]
    pq = _tensor("queries", queries, torch.bfloat16, (B, t.kv_heads, t.group, t.dim), dev)
    pw = _tensor("workspace", workspace, torch.uint8, (None,), dev)
    pd = None  # an empty tensor: water-filling with budget
    if fixed_depths.numel():
        pd = _tensor("fixed_depths", fixed_depths, torch.uint8, (B, t.kv_heads, t.dim), dev)
    out = torch.empty_like(queries)
    lse = torch.empty((B, t.kv_heads, t.group), dtype=torch.float32, device=dev)
    args = StepArgs(layer=layer, sessions=ps, batch=B, capacity_tokens=capacity, k=k, sink=sink, local=local,
                    budget=budget, scale=scale, queries=pq, out=out.data_ptr(), lse=lse.data_ptr(),
                    workspace=pw, workspace_bytes=workspace.numel(), fixed_depths=pd)
    t._lib.fathom_cuda_tier_step(t._h(), C.byref(args), _stream())
    return out, lse


@tier_step.register_fake
def _(state, tier, layer, sessions, capacity, k, sink, local, budget, scale, queries, workspace, fixed_depths):
    return torch.empty_like(queries), queries.new_empty(queries.shape[:3], dtype=torch.float32)
