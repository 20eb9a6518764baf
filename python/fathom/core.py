"""numpy API of the index core (include/fathom.h): basis, bit-plane store,
landmarks, plan (importance and water-filling), select, attend, methods.

Arrays are float32 row-major as in the C API (keys ``[n, dim]``, a query
group ``[group, dim]``); ndarray inputs are passed by pointer without a copy
(see ``fathom._arrays``). Results are new arrays, or read-only views of the
library's memory where the C API hands out a pointer (store segments, basis).
"""
import ctypes as C

import numpy as np

from . import _structs as S
from ._arrays import array, f32, ptr, view
from ._lib import lib, new_handle

BLOCK_TOKENS = 64
PLANES = 4
DEFAULT_SEGMENT_BLOCKS = 1024
MAX_DEPTH = 4
SINK_TOKENS = 4
LOCAL_TOKENS = 32
LANDMARK_TOKENS = 8


class _Handle:
    """An owned C object: freed by close(), by ``with``, or when collected."""

    _free = None  # the C free function, set by subclasses

    def __init__(self, handle):
        self._h = handle

    @property
    def _ptr(self):
        if not self._h:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._h

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            type(self)._free(h)

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _rows(a, name, dim):
    """A [count, dim] float32 block (a single [dim] row is one row)."""
    a = f32(a, name, ndim=(1, 2))
    if a.shape[-1] != dim:
        raise ValueError(f"{name}: rows of {a.shape[-1]} values, expected dim = {dim}")
    return a, (1 if a.ndim == 1 else a.shape[0])


def _depths(depths, dim):
    return array(depths, "depths", np.uint8, shape=(dim,))


# --------------------------------------------------------------------------
# basis
# --------------------------------------------------------------------------


class Basis(_Handle):
    """A KLT rotation k' = (k - mean) V (fathom_basis)."""

    _free = lib.fathom_basis_free

    def __init__(self, mean, vectors, eigenvalues):
        """From explicit parts: ``vectors`` is V as a [dim, dim] array with
        V[i, c] the i-th entry of eigenvector c (any memory order)."""
        mean = f32(mean, "mean", ndim=1)
        dim = mean.shape[0]
        V = np.asarray(vectors)
        if V.shape != (dim, dim):
            raise ValueError(f"vectors: shape {V.shape}, expected [{dim}, {dim}]")
        col_major = np.ascontiguousarray(np.asarray(V, dtype=np.float32).T)  # the C layout: vectors[i + c*dim]
        eig = f32(eigenvalues, "eigenvalues", shape=(dim,))
        h = new_handle()
        lib.fathom_basis_create(C.byref(h), dim, ptr(mean), ptr(col_major), ptr(eig))
        super().__init__(h.value)

    @classmethod
    def fit(cls, keys, queries=None):
        """Fit from calibration keys [n, dim] and optional queries [m, dim] (LAPACK)."""
        keys = f32(keys, "keys", ndim=2)
        dim = keys.shape[1]
        if queries is not None:
            queries, nq = _rows(queries, "queries", dim)
        else:
            nq = 0
        h = new_handle()
        lib.fathom_basis_fit(C.byref(h), dim, ptr(keys), keys.shape[0], ptr(queries), nq)
        self = cls.__new__(cls)
        _Handle.__init__(self, h.value)
        return self

    @property
    def dim(self):
        return lib.fathom_basis_dim(self._ptr)

    @property
    def mean(self):
        return view(lib.fathom_basis_mean(self._ptr), (self.dim,), np.float32, self)

    @property
    def vectors(self):
        """V as [dim, dim], V[i, c] (a transposed view of the column-major C array)."""
        d = self.dim
        return view(lib.fathom_basis_vectors(self._ptr), (d, d), np.float32, self).T

    @property
    def eigenvalues(self):
        return view(lib.fathom_basis_eigenvalues(self._ptr), (self.dim,), np.float32, self)

    def _rotate(self, fn, x, name):
        x, count = _rows(x, name, self.dim)
        out = np.empty_like(x)
        for r in range(count):
            fn(self._ptr, x.ctypes.data + 4 * r * self.dim, out.ctypes.data + 4 * r * self.dim)
        return out

    def rotate_key(self, keys):
        """(k - mean) V for one key [dim] or rows [n, dim]."""
        return self._rotate(lib.fathom_basis_rotate_key, keys, "keys")

    def rotate_query(self, queries):
        """q V for one query [dim] or rows [n, dim]."""
        return self._rotate(lib.fathom_basis_rotate_query, queries, "queries")


# --------------------------------------------------------------------------
# store
# --------------------------------------------------------------------------


class Segment:
    """One segment of a store: read-only views of the library's memory
    (valid while the store lives; the views keep it alive)."""

    def __init__(self, v, dim, segment_blocks, owner):
        self.planes = view(v.planes, (dim, PLANES, segment_blocks), np.uint64, owner)  # [j][p][b]
        self.scales = view(v.scales, (dim, segment_blocks), np.float16, owner)  # [j][b]
        self.first_token = v.first_token
        self.blocks = v.blocks
        self.tokens = v.tokens


class Store(_Handle):
    """The bit-plane K store (fathom_store), §3.2 of the paper."""

    _free = lib.fathom_store_free

    def __init__(self, dim, segment_blocks=0, basis=None):
        """An empty store for keys of ``dim`` channels; ``basis`` (a Basis)
        makes it a rotated store. segment_blocks 0 is the default (1024)."""
        h = new_handle()
        lib.fathom_store_create(C.byref(h), dim, segment_blocks, basis._ptr if basis is not None else None)
        super().__init__(h.value)
        self._basis = basis  # the C store reads it; it must outlive the store

    @classmethod
    def from_keys(cls, keys, segment_blocks=0, basis=None):
        """A store holding the rows of ``keys`` [n, dim] float32."""
        keys = f32(keys, "keys", ndim=2)
        store = cls(keys.shape[1], segment_blocks, basis)
        store.append(keys)
        return store

    def append(self, keys):
        """Append key rows [count, dim] (or one key [dim]); all finite."""
        keys, count = _rows(keys, "keys", self.dim)
        lib.fathom_store_append(self._ptr, ptr(keys), count)

    def set_center(self, center):
        """Center the codes on ``center`` [dim] (before the first append, not
        on a rotated store): stored coordinates become k - center."""
        center = f32(center, "center", shape=(self.dim,))
        lib.fathom_store_set_center(self._ptr, ptr(center))

    @property
    def center(self):
        """The center [dim] (a copy), or None."""
        p = lib.fathom_store_center(self._ptr)
        return None if not p else view(p, (self.dim,), np.float32, self).copy()

    def __len__(self):
        return lib.fathom_store_length(self._ptr)

    @property
    def dim(self):
        return lib.fathom_store_dim(self._ptr)

    @property
    def basis(self):
        return self._basis

    @property
    def segment_blocks(self):
        return lib.fathom_store_segment_blocks(self._ptr)

    @property
    def segment_count(self):
        return lib.fathom_store_segment_count(self._ptr)

    @property
    def index_bytes(self):
        return lib.fathom_store_index_bytes(self._ptr)

    @property
    def allocated_bytes(self):
        return lib.fathom_store_allocated_bytes(self._ptr)

    def segment(self, seg):
        v = S.SegmentView()
        lib.fathom_store_segment(self._ptr, seg, C.byref(v))
        return Segment(v, self.dim, self.segment_blocks, self)

    def word(self, channel, plane, block):
        """(plane word, fp16 scale bits) of channel, plane and absolute block."""
        w, s = C.c_uint64(), C.c_uint16()
        lib.fathom_store_word(self._ptr, channel, plane, block, C.byref(w), C.byref(s))
        return w.value, s.value

    def decode(self, depths, first=0, count=None):
        """Tokens [first, first+count) decoded at per-channel ``depths``
        [dim] (0..4), stored coordinates: [count, dim] float32."""
        d = self.dim
        depths = _depths(depths, d)
        if count is None:
            count = max(len(self) - first, 0)
        out = np.empty((count, d), np.float32)
        lib.fathom_store_decode(self._ptr, first, count, ptr(depths), ptr(out))
        return out

    def variance(self):
        """Population variance of each stored coordinate, [dim] float32."""
        out = np.empty(self.dim, np.float32)
        lib.fathom_store_variance(self._ptr, ptr(out))
        return out

    def scan(self, queries, depths, n=None):
        """Approximate scores of the first n tokens (default all) for a query
        group [group, dim] (or one query [dim]) at ``depths``: returns
        (scores [group, n] float32, bytes read)."""
        d = self.dim
        queries, group = _rows(queries, "queries", d)
        depths = _depths(depths, d)
        n = len(self) if n is None else n
        scores = np.empty((group, n), np.float32)
        nbytes = C.c_uint64()
        lib.fathom_store_scan(self._ptr, ptr(depths), ptr(queries), group, n, ptr(scores), C.byref(nbytes))
        return scores, nbytes.value


class Landmarks(_Handle):
    """fp16 mean key of each 8-token block (a ShadowKV-style baseline)."""

    _free = lib.fathom_landmarks_free

    def __init__(self, dim):
        h = new_handle()
        lib.fathom_landmarks_create(C.byref(h), dim)
        super().__init__(h.value)
        self.dim = dim

    def append(self, keys):
        keys, count = _rows(keys, "keys", self.dim)
        lib.fathom_landmarks_append(self._ptr, ptr(keys), count)

    def __len__(self):
        return lib.fathom_landmarks_length(self._ptr)

    def scan(self, queries, n=None):
        """(scores [group, n], bytes read): q_h . mean(block of i)."""
        queries, group = _rows(queries, "queries", self.dim)
        n = len(self) if n is None else n
        scores = np.empty((group, n), np.float32)
        nbytes = C.c_uint64()
        lib.fathom_landmarks_scan(self._ptr, ptr(queries), group, n, ptr(scores), C.byref(nbytes))
        return scores, nbytes.value


# --------------------------------------------------------------------------
# plan
# --------------------------------------------------------------------------


def importance(queries, var):
    """g[j] = sum_h q_hj^2 var[j] over a query group [group, dim] (or [dim]): [dim] float64."""
    var = f32(var, "var", ndim=1)
    queries, group = _rows(queries, "queries", var.shape[0])
    g = np.empty(var.shape[0], np.float64)
    lib.fathom_importance(var.shape[0], group, ptr(queries), ptr(var), ptr(g))
    return g


def depths_at(g, theta):
    """t_j(theta) = clip(round(log4(g_j / theta)), 0, 4): [dim] uint8."""
    g = array(g, "g", np.float64, ndim=1)
    out = np.empty(g.shape[0], np.uint8)
    lib.fathom_depths_at(g.shape[0], ptr(g), theta, ptr(out))
    return out


def water_fill(g, budget, bisect=False):
    """Depths for budget code bits by reverse water-filling of importance
    ``g``: returns (depths [dim] uint8, theta). ``bisect`` uses the paper's
    30 log-bisection steps instead of the exact breakpoint search."""
    g = array(g, "g", np.float64, ndim=1)
    out = np.empty(g.shape[0], np.uint8)
    theta = C.c_double()
    fn = lib.fathom_water_fill_bisect if bisect else lib.fathom_water_fill
    fn(g.shape[0], ptr(g), budget, ptr(out), C.byref(theta))
    return out, theta.value


def plan(var, queries, budget, bisect=False):
    """The read depths ``fathom plan --var ... --query ... --budget B``
    prints: importance of the query group, then water-filling. [dim] uint8."""
    return water_fill(importance(queries, var), budget, bisect)[0]


def depth_bits(depths):
    """Code bits plus scale bits per token: sum t_j + #{t_j > 0} / 4."""
    depths = array(depths, "depths", np.uint8, ndim=1)
    return lib.fathom_depth_bits(depths.shape[0], ptr(depths))


def greedy_layer_budgets(levels, err, target_mean):
    """Per-layer budgets (§3.4): ``levels`` ascending [n_levels], ``err``
    [layers, n_levels] calibration errors. [layers] uint32."""
    levels = array(levels, "levels", np.uint32, ndim=1)
    err = array(err, "err", np.float64, shape=(None, levels.shape[0]))
    out = np.empty(err.shape[0], np.uint32)
    lib.fathom_greedy_layer_budgets(err.shape[0], ptr(levels), levels.shape[0], ptr(err), target_mean, ptr(out))
    return out


# --------------------------------------------------------------------------
# select, attend
# --------------------------------------------------------------------------


def select(scores, k, sink=SINK_TOKENS, local=LOCAL_TOKENS):
    """Positions chosen for one query head over scores [n_visible] float32:
    the first ``sink`` and last ``local`` always, then the top scores until
    k (ties to the lower index, NaN lowest). Ascending uint32 array."""
    scores = f32(scores, "scores", ndim=1)
    n = scores.shape[0]
    work = np.empty(max(lib.fathom_select_work_size(n) // 8, 1), np.uint64)
    idx = np.empty(max(min(k, n), 1), np.uint32)
    count = C.c_uint32()
    lib.fathom_select(ptr(scores), n, k, sink, local, ptr(work), ptr(idx), C.byref(count))
    return idx[: count.value]


def union_size(sets):
    """Size of the union of sorted uint32 index lists."""
    sets = [array(s, f"sets[{i}]", np.uint32, ndim=1) for i, s in enumerate(sets)]
    ptrs = (C.c_void_p * max(len(sets), 1))(*[ptr(s) for s in sets])
    counts = np.array([s.shape[0] for s in sets] or [0], np.uint32)
    out = C.c_uint32()
    lib.fathom_union_size(len(sets), ptrs, ptr(counts), C.byref(out))
    return out.value


def attend(query, keys, values, idx=None):
    """softmax(q . K_S / sqrt(dim)) V_S over rows S = idx of keys/values
    [n, dim] (all rows when idx is None): [dim] float32, accumulated in double."""
    query = f32(query, "query", ndim=1)
    dim = query.shape[0]
    keys = f32(keys, "keys", shape=(None, dim))
    values = f32(values, "values", shape=keys.shape)
    if idx is None:
        count = keys.shape[0]
    else:
        idx = array(idx, "idx", np.uint32, ndim=1)
        count = idx.shape[0]
        if count and int(idx.max()) >= keys.shape[0]:
            raise IndexError(f"idx: row {int(idx.max())} out of range for {keys.shape[0]} keys")
    out = np.empty(dim, np.float32)
    lib.fathom_attend(dim, ptr(query), ptr(keys), ptr(values), ptr(idx), count, ptr(out))
    return out


def rel_l2(a, b):
    """||a - b|| / ||b|| of two [dim] float32 vectors (0 if both are zero)."""
    a = f32(a, "a", ndim=1)
    b = f32(b, "b", shape=a.shape)
    return lib.fathom_rel_l2(a.shape[0], ptr(a), ptr(b))


# --------------------------------------------------------------------------
# methods
# --------------------------------------------------------------------------

METHOD_KINDS = ("fathom", "fathom-klt", "sparq", "ds", "loki", "thumb", "landmark", "full4", "oracle", "dense",
                "fathom-centered")


def parse_methods(specs):
    """A ctypes array of fathom_method from "fathom:48,ds:32" or a list of specs."""
    text = specs if isinstance(specs, str) else ",".join(specs)
    cap = text.count(",") + 1
    out = (S.Method * cap)()
    n = C.c_uint32()
    lib.fathom_method_parse_list(text.encode(), out, cap, C.byref(n))
    return (S.Method * n.value).from_buffer(out)


def method_fixed_bits(spec, dim):
    """Bits per token of a fixed-depth method at this dim; None for fathom,
    fathom-klt and fathom-centered, whose bits depend on the plan."""
    m = S.Method()
    lib.fathom_method_parse(spec.encode(), C.byref(m))
    bits = lib.fathom_method_fixed_bits(C.byref(m), dim)
    return None if bits < 0 else bits


def parse_method(spec):
    """One method spec ("fathom:48", "sparq:16", ...) as a fathom_method
    (a Method passes through)."""
    if isinstance(spec, S.Method):
        return spec
    m = S.Method()
    lib.fathom_method_parse(spec.encode(), C.byref(m))
    return m


def method_check(spec, dim):
    """Raise InvalidArgumentError unless the method suits head dimension ``dim``
    (fathom_method_check: the rule every C caller applies)."""
    lib.fathom_method_check(C.byref(parse_method(spec)), dim)


# What a method reads (fathom_method_needs flags).
NEEDS_STORE, NEEDS_ROTATED, NEEDS_LANDMARKS, NEEDS_CALIB, NEEDS_CENTERED = 1, 2, 4, 8, 16


def method_needs(spec):
    """The FATHOM_NEEDS_* flags of a method (0 for oracle and dense)."""
    return lib.fathom_method_needs(C.byref(parse_method(spec)))


# --------------------------------------------------------------------------
# index
# --------------------------------------------------------------------------


class Index(_Handle):
    """One KV head's index for a set of methods (fathom_index): what the
    decoder's sparse attention and eval scan. Without calibration, fathom
    reads the variance from the store's running sums (App. D)."""

    _free = lib.fathom_index_free

    def __init__(self, methods, dim, extra_needs=0):
        """``methods``: specs as "fathom:48,sparq:16" or a list; dim: key size."""
        ms = parse_methods(methods)
        h = new_handle()
        lib.fathom_index_create(C.byref(h), ms, len(ms), dim, extra_needs)
        super().__init__(h.value)
        self._scratch = {}  # group -> uint8 scratch of fathom_index_scratch_size

    def append(self, keys):
        """Append key rows [count, dim] (or one key [dim]); all finite."""
        keys, count = _rows(keys, "keys", self.dim)
        lib.fathom_index_append(self._ptr, ptr(keys), count)

    def clear(self):
        lib.fathom_index_clear(self._ptr)

    def __len__(self):
        return lib.fathom_index_length(self._ptr)

    @property
    def dim(self):
        return lib.fathom_index_dim(self._ptr)

    def scores(self, method, queries, n=None, budget=None, depths=False):
        """Approximate scores [group, n] of a query group [group, dim] over the
        first n keys (default all) by ``method`` (one of the index's set,
        not oracle or dense). budget: fathom's bits (default the method's B).
        Returns (scores, bits per token, bytes read), plus the per-channel
        depths [dim] the scan read when ``depths`` is true."""
        m = parse_method(method)
        d = self.dim
        queries, group = _rows(queries, "queries", d)
        n = len(self) if n is None else n
        size = lib.fathom_index_scratch_size(d, group)
        if size == 0:
            raise ValueError(f"queries: a group of {group} is out of range for the index")
        scratch = self._scratch.get(group)
        if scratch is None:
            scratch = self._scratch[group] = np.empty((size + 7) // 8, np.uint64)  # 8-byte aligned
        out = np.empty((group, n), np.float32)
        bits, nbytes = C.c_double(), C.c_uint64()
        lib.fathom_index_scores(self._ptr, C.byref(m), m.param if budget is None else budget, group, ptr(queries),
                                n, ptr(out), ptr(scratch), C.byref(bits), C.byref(nbytes))
        if not depths:
            return out, bits.value, nbytes.value
        dp = lib.fathom_index_scratch_depths(ptr(scratch), d, group)
        return out, bits.value, nbytes.value, view(dp, (d,), np.uint8, scratch).copy()
