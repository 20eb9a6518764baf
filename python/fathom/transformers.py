"""Hugging Face transformers decoding with the K/V and the index in libfathom.

Two registrations, no fork and no patching of model code:

- ``FathomCache`` (a ``transformers.Cache``): one backend per cache, one
  sequence per batch row. ``update`` hands each layer's new K/V to the
  backend and returns them unchanged, so the cache itself keeps no K/V in
  torch.
- the attention function ``"fathom"`` (``AttentionInterface``): a prefill on
  an empty cache attends densely over the prompt's K/V with transformers'
  own sdpa; every later step (one token) runs the backend's sparse
  attention: per KV head the method's scores over every cached key, sink +
  local + top-k per query head, exact attention over the selection.

Usage::

    import fathom.transformers  # registers "fathom"
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="fathom")
    cache = fathom.transformers.FathomCache(model, method="fathom:48", k=512)
    model.generate(ids, past_key_values=cache, max_new_tokens=64, do_sample=False)

The backend follows the K/V's device: ``CpuBackend`` (below, the C library
through the numpy API) for CPU tensors, torchtier's ``TierBackend``
(``fathom._hf_tier``) for CUDA ones. Both follow the interface in
.wt-notes/python-api.md: ``append(layer, key, value)``, ``attend(layer,
query, scale)``, ``length(layer)``, ``close()``.

Not supported (each raises NotImplementedError saying so): a prompt chunk of
more than one token on a non-empty cache (chunked prefill, assisted
decoding), sliding-window or chunked-attention layers, padded batches (an
attention mask that masks a token), beam search and other cache reordering,
cropping, batch expansion of a filled cache. Methods that need calibration
(fathom-klt, ds, loki) are refused by the CPU backend.
"""
import math
import threading

import numpy as np
import torch
from transformers import AttentionInterface, Cache
from transformers.cache_utils import CacheLayerMixin
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from . import core

NAME = "fathom"

__all__ = ["NAME", "CpuBackend", "FathomCache", "fathom_attention"]


# --------------------------------------------------------------------------
# CPU backend: what src/model/model.c's sparse decode does, over the C library
# --------------------------------------------------------------------------


def _numpy_f32(x):
    """A torch tensor or array as a float32 ndarray on the host."""
    if isinstance(x, torch.Tensor):
        return x.detach().to(device="cpu", dtype=torch.float32).numpy()
    return np.asarray(x, dtype=np.float32)


DOT_LANES = 8  # src/model/model.c's dot(): lane l sums a[i]*b[i] for i = l mod 8, then lanes 0..7


def oracle_scores(queries, keys):
    """Exact scores [G, n] of queries [G, d] over keys [n, d] in float32 with
    the C decoder's summation order (model.c's dot), so oracle selects the
    same keys as ``fathom generate --attn oracle``, ties included."""
    G, d = queries.shape
    prods = queries[:, None, :] * keys[None, :, :]  # float32 products, unfused as the C code
    pad = -d % DOT_LANES
    if pad:
        prods = np.concatenate([prods, np.zeros(prods.shape[:2] + (pad,), np.float32)], axis=2)
    prods = prods.reshape(G, keys.shape[0], -1, DOT_LANES)
    acc = np.zeros((G, keys.shape[0], DOT_LANES), np.float32)
    for c in range(prods.shape[2]):
        acc += prods[:, :, c]
    s = np.zeros((G, keys.shape[0]), np.float32)
    for lane in range(DOT_LANES):
        s += acc[:, :, lane]
    return s


class CpuBackend:
    """K/V in host memory (float32 arrays per layer) and one ``core.Index``
    per (batch row, layer, KV head), as the C decoder keeps them.

    A decode step of one layer does, per batch row and KV head, what
    model.c's ``sparse_head_attend`` does: the method's scores of the G
    queries of the group over every cached key (``fathom_index_scores``
    with the method's budget; for fathom:B the variance comes from the
    store's running sums, so nothing is calibrated), then per query head
    ``fathom_select`` (sink + local + top-k, k in total) and
    ``fathom_attend`` (exact softmax over the selection, in double). oracle
    scores exactly (``oracle_scores``, the C decoder's float32 dot products);
    dense attends over every key.
    """

    def __init__(self, *, layers, kv_heads, group, dim, batch, method, k, sink=core.SINK_TOKENS,
                 local=core.LOCAL_TOKENS, max_tokens=None, device=None):
        self.method = core.parse_method(method)
        core.method_check(self.method, dim)
        kind = core.METHOD_KINDS[self.method.kind]
        if core.method_needs(self.method) & core.NEEDS_CALIB:
            raise NotImplementedError(
                f"fathom.transformers: {self.method.name.decode()} needs calibration statistics, which the "
                "CPU backend does not take; use fathom:B, sparq:r, thumb, full4, landmark, oracle or dense")
        if k < 1:
            raise ValueError(f"k = {k}: select at least one key per query head")
        self.layers, self.kv_heads, self.group, self.dim, self.batch = layers, kv_heads, group, dim, batch
        self.k, self.sink, self.local = int(k), int(sink), int(local)
        self.kind = kind
        self.max_tokens = None if max_tokens is None else int(max_tokens)
        cap = 256 if max_tokens is None else min(int(max_tokens), 256)  # grows by doubling
        self._keys = [np.empty((batch, kv_heads, cap, dim), np.float32) for _ in range(layers)]
        self._values = [np.empty((batch, kv_heads, cap, dim), np.float32) for _ in range(layers)]
        self._n = [0] * layers
        spec = self.method.name.decode()
        self._index = None
        if kind not in ("oracle", "dense"):
            self._index = [[[core.Index(spec, dim) for _ in range(kv_heads)] for _ in range(batch)]
                           for _ in range(layers)]
        self.stats = {"steps": 0, "selected": 0, "visible": 0, "scan_bytes": 0}
        # a list to collect, per query head of every step, what fathom's decode
        # trace records: (layer, row, kv_head, head, n_visible, idx, depths, scores)
        self.trace = None

    def length(self, layer=0):
        return self._n[layer]

    def _grow(self, layer, need):
        cap = self._keys[layer].shape[2]
        if need <= cap:
            return
        cap = max(need, 2 * cap)
        for arrays in (self._keys, self._values):
            old = arrays[layer]
            new = np.empty(old.shape[:2] + (cap, self.dim), np.float32)
            new[:, :, : self._n[layer]] = old[:, :, : self._n[layer]]
            arrays[layer] = new

    def append(self, layer, key, value):
        """key, value [batch, kv_heads, T, dim] (torch or numpy, any float dtype)."""
        key, value = _numpy_f32(key), _numpy_f32(value)
        want = (self.batch, self.kv_heads, key.shape[2] if key.ndim == 4 else -1, self.dim)
        if key.shape != want or value.shape != want:
            raise ValueError(f"append: key {key.shape} and value {value.shape}, expected {want}")
        n, T = self._n[layer], key.shape[2]
        if self.max_tokens is not None and n + T > self.max_tokens:
            raise ValueError(f"append: {n + T} tokens exceed max_tokens = {self.max_tokens}")
        self._grow(layer, n + T)
        self._keys[layer][:, :, n:n + T] = key
        self._values[layer][:, :, n:n + T] = value
        if self._index is not None:
            for b in range(self.batch):
                for h in range(self.kv_heads):
                    self._index[layer][b][h].append(self._keys[layer][b, h, n:n + T])
        self._n[layer] = n + T

    def attend(self, layer, query, scale):
        """query [batch, kv_heads * group, 1, dim] -> out of that shape and the
        query's dtype and device: sparse attention over every appended token."""
        q = _numpy_f32(query)
        B, G, D, n = self.batch, self.group, self.dim, self._n[layer]
        if q.shape != (B, self.kv_heads * G, 1, D):
            raise ValueError(f"attend: query {q.shape}, expected {(B, self.kv_heads * G, 1, D)}")
        if n == 0:
            raise ValueError(f"attend: layer {layer} holds no tokens")
        # fathom_attend scales by 1/sqrt(dim); another scale rides on the query
        # (a positive factor, so scores rank the same and the plan is unchanged)
        q = np.ascontiguousarray(q.reshape(B, self.kv_heads, G, D))
        if not math.isclose(scale, 1.0 / math.sqrt(D), rel_tol=1e-6):
            q *= np.float32(scale * math.sqrt(D))
        out = np.empty_like(q)
        for b in range(B):
            for h in range(self.kv_heads):
                keys = self._keys[layer][b, h, :n]
                values = self._values[layer][b, h, :n]
                qg = q[b, h]
                scores = depths = None
                if self.kind == "oracle":
                    scores = oracle_scores(qg, keys)
                elif self.kind != "dense":
                    res = self._index[layer][b][h].scores(self.method, qg, n, depths=self.trace is not None)
                    scores, nbytes, depths = res[0], res[2], res[3] if len(res) > 3 else None
                    self.stats["scan_bytes"] += nbytes
                for g in range(G):
                    idx = None if scores is None else core.select(scores[g], self.k, self.sink, self.local)
                    out[b, h, g] = core.attend(qg[g], keys, values, idx)
                    self.stats["selected"] += n if idx is None else len(idx)
                    self.stats["visible"] += n
                    if self.trace is not None:
                        self.trace.append((layer, b, h, g, n, idx, depths, None if scores is None else scores[g]))
        self.stats["steps"] += layer == 0
        res = torch.from_numpy(out.reshape(B, self.kv_heads * G, 1, D))
        if isinstance(query, torch.Tensor):
            res = res.to(device=query.device, dtype=query.dtype)
        return res

    def close(self):
        if self._index is not None:
            for per_row in self._index:
                for per_head in per_row:
                    for ix in per_head:
                        ix.close()
            self._index = None
        self._keys = self._values = []


def _tier_backend():
    from ._hf_tier import TierBackend  # torchtier's: the KV tier on CUDA

    return TierBackend


# --------------------------------------------------------------------------
# the cache
# --------------------------------------------------------------------------

# update() of a FathomCache layer leaves (layer, key, dense) here for the
# attention call of the same layer, which the model makes right after it on
# the same thread with the tensors update() returned.
_pending = threading.local()


def _unsupported(what):
    return NotImplementedError(f"fathom.transformers: {what} is not supported by FathomCache")


class _FathomLayer(CacheLayerMixin):
    """One model layer of a FathomCache; the K/V live in the cache's backend."""

    is_compileable = False
    is_croppable = False
    is_sliding = False

    def __init__(self, cache, layer):
        super().__init__()
        self._cache, self._layer = cache, layer
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states):
        pass

    def update(self, key_states, value_states, *args, **kwargs):
        return self._cache._append(self._layer, key_states, value_states)

    def get_seq_length(self):
        return self._cache._length(self._layer)

    def get_mask_sizes(self, query_length):
        return self.get_seq_length() + query_length, 0

    def get_max_length(self):
        return -1

    def offload(self):
        pass

    def prefetch(self):
        pass

    def reset(self):
        self._cache._close()

    def reorder_cache(self, beam_idx):
        raise _unsupported("beam search (reorder_cache)")

    def crop(self, tokens_to_remove):
        if tokens_to_remove:
            raise _unsupported("cropping the cache (crop)")

    def batch_repeat_interleave(self, repeats):
        if self.get_seq_length() and repeats != 1:
            raise _unsupported("expanding a filled cache over the batch (batch_repeat_interleave)")

    def batch_select_indices(self, indices):
        if self.get_seq_length():
            raise _unsupported("selecting batch rows of a filled cache (batch_select_indices)")


def _config_of(model):
    config = getattr(model, "config", model)
    return config.get_text_config() if hasattr(config, "get_text_config") else config


class FathomCache(Cache):
    """A transformers Cache whose K/V and index live in libfathom.

    model: the model (or its config), whose attention implementation must be
    "fathom" (``attn_implementation="fathom"`` when loading, or
    ``model.set_attn_implementation("fathom")``). method: a fathom method
    spec ("fathom:48", "sparq:16", "oracle", "dense", ...); k: keys selected
    per query head, sink + local of them always (4 and 32, as the C
    decoder); max_tokens: tokens per sequence at most (default the config's
    max_position_embeddings; the KV tier sizes its sessions by it).
    backend: None (by the K/V's device: CPU -> CpuBackend, CUDA ->
    TierBackend), "cpu", "tier", or a class taking the backend keyword
    arguments (layers, kv_heads, group, dim, batch, method, k, sink, local,
    max_tokens, device); its optional prepare(tokens) runs before each
    forward's first append. cache_bytes (the KV tier only): device bytes per
    sequence for the tier's HBM cache of plane lines and K/V rows
    (TierBackend's cache_bytes; 0: none); same outputs, fewer bytes over the
    link. cache_row_ways: its K/V rows direct-mapped (1) or in sets of 2, 4
    or 8 ways kept by recency of use (TierBackend's cache_row_ways).
    """

    def __init__(self, model, method="fathom:48", k=256, sink=core.SINK_TOKENS, local=core.LOCAL_TOKENS,
                 max_tokens=None, backend=None, cache_bytes=0, cache_row_ways=1):
        config = _config_of(model)
        impl = getattr(config, "_attn_implementation", None)
        if impl != NAME:
            raise ValueError(
                f"FathomCache: the model's attention implementation is {impl!r}, not {NAME!r}; load it with "
                f"attn_implementation={NAME!r} or call model.set_attn_implementation({NAME!r}) (after "
                "`import fathom.transformers`)")
        types = getattr(config, "layer_types", None)
        if types is None and getattr(config, "sliding_window", None) is not None:
            types = ["sliding_attention"]
        other = sorted(set(types or ()) - {"full_attention"})
        if other:
            raise _unsupported(f"layer types {other} (only full-attention layers)")
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        if heads % kv_heads:
            raise ValueError(f"FathomCache: {heads} query heads are not a multiple of {kv_heads} KV heads")
        self.num_layers = config.num_hidden_layers
        self.kv_heads, self.group = kv_heads, heads // kv_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.method, self.k, self.sink, self.local = method, k, sink, local
        self.max_tokens = max_tokens or getattr(config, "max_position_embeddings", None)
        self._backend_choice = backend
        self.cache_bytes = int(cache_bytes)
        self.cache_row_ways = int(cache_row_ways)
        from .tier import ROW_WAYS
        if self.cache_bytes < 0 or self.cache_row_ways not in ROW_WAYS:
            raise ValueError(f"FathomCache: cache_bytes {cache_bytes} must be >= 0 and cache_row_ways "
                             f"{cache_row_ways} one of {ROW_WAYS}")
        if self.cache_bytes and backend not in (None, "tier"):
            raise ValueError(f"FathomCache: cache_bytes is the KV tier's HBM cache; backend {backend!r} has none")
        self.backend = None  # made at the first update, when the batch and device are known
        if backend is None or backend == "cpu":  # fail early on a method the CPU backend refuses
            core.method_check(method, self.head_dim)
        super().__init__(layers=[_FathomLayer(self, i) for i in range(self.num_layers)])

    def _make_backend(self, key):
        choice = self._backend_choice
        if choice is None:
            choice = "tier" if key.device.type == "cuda" else "cpu"
        extra = {}
        if choice == "cpu":
            if self.cache_bytes:
                raise ValueError("FathomCache: cache_bytes is the KV tier's HBM cache; the K/V are on the CPU")
            cls = CpuBackend
        elif choice == "tier":
            cls = _tier_backend()
            extra = {"cache_bytes": self.cache_bytes, "cache_row_ways": self.cache_row_ways}
        elif callable(choice):
            cls = choice
        else:
            raise ValueError(f"FathomCache: backend {choice!r}: expected None, 'cpu', 'tier' or a class")
        return cls(layers=self.num_layers, kv_heads=self.kv_heads, group=self.group, dim=self.head_dim,
                   batch=key.shape[0], method=self.method, k=self.k, sink=self.sink, local=self.local,
                   max_tokens=self.max_tokens, device=key.device, **extra)

    def _length(self, layer):
        return 0 if self.backend is None else self.backend.length(layer)

    def _append(self, layer, key, value):
        left = getattr(_pending, "entry", None)
        if left is not None:
            _pending.entry = None
            raise RuntimeError(
                f"FathomCache: layer {left[1]}'s update was not followed by the {NAME!r} attention function; "
                f"the model must run with attn_implementation={NAME!r}")
        B, H, T, D = key.shape
        if (H, D) != (self.kv_heads, self.head_dim):
            raise ValueError(f"FathomCache: key {tuple(key.shape)}, expected [batch, {self.kv_heads}, T, "
                             f"{self.head_dim}]")
        n = self._length(layer)
        if n and T != 1:
            raise _unsupported(f"a chunk of {T} tokens on a cache holding {n} (chunked prefill)")
        if self.backend is None:
            self.backend = self._make_backend(key)
        elif B != self.backend.batch:
            raise ValueError(f"FathomCache: batch {B}, the cache holds {self.backend.batch} rows")
        if layer == 0 and hasattr(self.backend, "prepare"):
            self.backend.prepare(n + T)
        self.backend.append(layer, key, value)
        _pending.entry = (self, layer, key, n == 0)
        return key, value

    def _close(self):
        if self.backend is not None:
            self.backend.close()
            self.backend = None

    def close(self):
        """Free the backend (its sessions, indexes and host K/V); idempotent."""
        self._close()

    @property
    def batch_size(self):
        return -1 if self.backend is None else self.backend.batch


# --------------------------------------------------------------------------
# the attention function
# --------------------------------------------------------------------------


def fathom_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The "fathom" attention function: dense sdpa for the prefill of an empty
    FathomCache, the backend's sparse attention for a decode step."""
    entry = getattr(_pending, "entry", None)
    _pending.entry = None
    if entry is None or entry[2] is not key:
        raise RuntimeError(
            f"attention {NAME!r} runs only with past_key_values=FathomCache(...) (and use_cache=True): "
            "the K/V come from the cache's backend")
    cache, layer, _, dense = entry
    if getattr(module, "layer_idx", layer) != layer:
        raise RuntimeError(f"fathom attention: module of layer {module.layer_idx} after the cache update of {layer}")
    if kwargs.get("sliding_window") is not None:
        raise _unsupported("sliding-window attention")
    if attention_mask is not None:
        # sdpa_mask returns None for a causal mask without padding
        raise _unsupported("an attention mask that masks tokens (a padded batch)")
    if dropout:
        raise _unsupported("attention dropout (training)")
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    if dense:
        return sdpa_attention_forward(module, query, key, value, None, dropout=0.0, scaling=scaling, **kwargs)
    out = cache.backend.attend(layer, query, scaling)  # [B, Hq, 1, d]
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, fathom_attention)
AttentionMaskInterface.register(NAME, sdpa_mask)
