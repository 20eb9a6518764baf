"""TierBackend: the Backend of fathom.transformers' FathomCache on a CUDA
model (see the interface in FathomCache's module): one KVTier session per
batch row, appends and attention through the fathom::tier_append and
fathom::tier_step custom ops, so a decode step that contains them can be
captured in one CUDA graph and replayed while the sessions grow.

Host work happens only in prepare(tokens_needed) (capacity, before a step or
a replay that would exceed it) and in close(); append and attend never
synchronize. A captured graph stays valid while ``capacity`` (the step's
capacity class) is unchanged; prepare returns True when it changed.

HBM cache (cache_bytes > 0, per sequence): each session gets the KV tier's
HBM cache of plane lines and K/V rows (KVTier.cache_set) whenever prepare
sets a capacity class, cache_plane_share of the bytes for plane lines over
the capacity, the rest for row slots (sets of cache_row_ways ways, 1:
direct-mapped); every cache_fill_every decode steps
(an eager step of the last layer, or replayed()) the lines are chosen again
from the last cache_window plans and copied (KVTier.cache_fill, on the
current stream). Outputs are the same bits with or without it.

Read-ahead (read_ahead "beside", "between" or "across", with or without a
cache):
each layer's step copies into HBM staging the plane lines and union rows
the session's last step of the next layer read and its cache lacks
(KVTier.cache_set's ahead_lines = the plan's lines, ahead_rows = group x k);
"between" starts each copy after its step's own work in the captured decode
graph (KVTier.set_ahead_start), beside the model's work between two layers;
"across" the last layer's too, beside the model's work up to the next decode
step's first layer: a captured decode step then ends with ahead_join().
"""
import numpy as np
import torch

from .core import LOCAL_TOKENS, SINK_TOKENS
from .tier import CACHE_WINDOW, ROW_WAYS, KVTier, parse_method, row_set_bytes


DEFAULT_MAX_TOKENS = 1 << 22  # per sequence, when the cache gives no max_tokens


def capacity_class(tokens):
    """The step's capacity for `tokens`: rounded up to 1/8 of its octave
    (at most 12.5% above), so a growing session re-captures rarely."""
    tokens = max(int(tokens), 1024)
    quantum = 1 << max(tokens.bit_length() - 4, 0)
    return -(-tokens // quantum) * quantum


class TierBackend:
    def __init__(self, *, layers, kv_heads, group, dim, batch, method, k, sink=SINK_TOKENS, local=LOCAL_TOKENS,
                 max_tokens=None, device=None, segment_blocks=0, cache_bytes=0, cache_plane_share=0.7,
                 cache_window=CACHE_WINDOW, cache_fill_every=16, cache_row_ways=1, read_ahead=None):
        self.kind, param = parse_method(method)
        self.budget = param if self.kind in ("fathom", "fathom-centered") else 0
        self.ds_channels = param if self.kind == "ds" else 0
        self._ds = None  # ds:c: uint8 [layers, B, kv_heads, dim] depths, chosen at the first decode step
        if device is not None:
            device = torch.device(device)
            if device.type != "cuda":
                raise ValueError(f"TierBackend: device {device} is not a CUDA device")
            torch.cuda.set_device(device)
        self.layers, self.kv_heads, self.group, self.dim = layers, kv_heads, group, dim
        self.cache_bytes, self.cache_plane_share = int(cache_bytes), float(cache_plane_share)
        self.cache_window, self.cache_fill_every = int(cache_window), int(cache_fill_every)
        self.cache_row_ways = int(cache_row_ways)
        if self.cache_row_ways not in ROW_WAYS:
            raise ValueError(f"TierBackend: cache_row_ways {cache_row_ways} not one of {ROW_WAYS}")
        if self.cache_bytes < 0 or not 0.0 <= self.cache_plane_share <= 1.0 or self.cache_fill_every < 1:
            raise ValueError(f"TierBackend: cache_bytes {cache_bytes} must be >= 0, cache_plane_share "
                             f"{cache_plane_share} in [0, 1] and cache_fill_every {cache_fill_every} >= 1")
        if read_ahead not in (None, "none", "beside", "between", "across"):
            raise ValueError(f"TierBackend: read_ahead {read_ahead!r} is not None, 'none', 'beside', 'between' "
                             "or 'across'")
        self.read_ahead = None if read_ahead == "none" else read_ahead
        self._steps = 0  # decode steps run (eager steps of the last layer and replayed tokens)
        self.batch, self.k, self.sink, self.local = batch, int(k), int(sink), int(local)
        # sizes the device segment table only (host memory comes with reserve)
        self.max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else int(max_tokens)
        self.tier = KVTier(layers, kv_heads, group, dim, max_sessions=batch, max_tokens=self.max_tokens,
                           segment_blocks=segment_blocks)
        self.sessions = [self.tier.session() for _ in range(batch)]
        if self.kind == "fathom-centered":  # each (layer, KV head) centers on its prefill's mean
            for s in self.sessions:
                self.tier.set_center(s)
        self.sessions_t = self.tier.sessions_tensor(self.sessions)
        if self.read_ahead:
            self.tier.set_ahead_start(self.read_ahead)
        self._counts = {}
        self._len = [0] * layers
        self.capacity = 0  # the step's capacity class; every session holds at least this many tokens
        self.prepare(1)

    def prepare(self, tokens_needed):
        """Make room for `tokens_needed` tokens per sequence (the length after
        the coming step or prefill). Host call: synchronizes only when it must
        reserve. Returns True when the capacity class changed (a graph
        captured before must be captured again)."""
        tokens_needed = int(tokens_needed)
        if tokens_needed <= self.capacity:
            return False
        if tokens_needed > self.max_tokens:
            raise ValueError(f"TierBackend: {tokens_needed} tokens exceed max_tokens {self.max_tokens}")
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("TierBackend.prepare must run before a graph capture, not inside it")
        capacity = min(capacity_class(tokens_needed), self.max_tokens)
        torch.cuda.synchronize(self.tier.device)
        for s in self.sessions:
            self.tier.reserve(s, capacity)
        self.capacity = capacity
        if self.cache_bytes or self.read_ahead:
            self._cache_set(capacity)
        return True

    def _cache_set(self, capacity):
        """Every session's HBM cache and read-ahead for a capacity class
        (emptied: the next fill copies what it keeps). A share that buys no
        plane line or no row slot per (layer, KV head) at this capacity goes
        to the other part."""
        ahead = {}
        if self.read_ahead:  # a plan's lines (fathom:B plans B; ds:c reads c channels' 4 planes) and a union
            lines = self.budget if self.budget else 4 * self.ds_channels
            ahead = dict(ahead_lines=min(lines, 4 * self.dim), ahead_rows=self.group * self.k)
        if not self.cache_bytes:
            for s in self.sessions:
                self.tier.cache_set(s, tokens=capacity, **ahead)
            return
        pairs = self.layers * self.kv_heads
        line = pairs * 10 * -(-capacity // 64)  # a plane line: 8 bytes of words + 2 of scales per block
        slot = pairs * row_set_bytes(self.dim, self.cache_row_ways)  # a set of K/V rows (a slot: direct-mapped)
        plane = int(self.cache_bytes * self.cache_plane_share)
        if plane < line:
            plane = 0
        row = self.cache_bytes - plane
        if row < slot:
            row = 0
            plane = self.cache_bytes if self.cache_bytes >= line else 0
        if not plane and not row:
            raise ValueError(f"TierBackend: cache_bytes {self.cache_bytes} buys neither one plane line "
                             f"({line} bytes at capacity {capacity}) nor one row slot ({slot} bytes) per "
                             f"(layer, KV head)")
        for s in self.sessions:
            self.tier.cache_set(s, plane_bytes=plane, row_bytes=row, tokens=capacity, window=self.cache_window,
                                row_ways=self.cache_row_ways, **ahead)
        self._steps = 0  # the empty caches are filled at the next step

    def fill_cache(self):
        """Choose and copy every session's plane lines now (KVTier.cache_fill,
        on the current stream). No-op without a cache."""
        if self.cache_bytes:  # the constructor's prepare(1) has set a capacity class
            for s in self.sessions:
                self.tier.cache_fill(s)

    def _step_done(self, steps=1):
        """Count decode steps; fill the caches when a multiple of
        cache_fill_every is reached (not while a graph is being captured:
        replayed() counts the steps a replay runs)."""
        before = self._steps
        self._steps += steps
        if self.cache_bytes and before // self.cache_fill_every != self._steps // self.cache_fill_every:
            self.fill_cache()

    def _counts_of(self, tokens):
        c = self._counts.get(tokens)
        if c is None:
            c = self._counts[tokens] = torch.full((self.batch,), tokens, dtype=torch.int32,
                                                  device=self.tier.device)
        return c

    def _check(self, name, t, ndim_last):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-d tensor [B, heads, T, d]")
        B, H, _, d = t.shape
        if B != self.batch or H != ndim_last or d != self.dim:
            raise ValueError(f"{name}: shape {list(t.shape)}, expected [{self.batch}, {ndim_last}, T, {self.dim}]")
        if not t.is_floating_point():
            raise TypeError(f"{name}: dtype {t.dtype} is not a float type")

    def append(self, layer, key, value):
        """key, value [B, kv_heads, T, d]: T new tokens of every sequence."""
        self._check("key", key, self.kv_heads)
        self._check("value", value, self.kv_heads)
        if key.shape != value.shape:
            raise ValueError(f"value: shape {list(value.shape)} differs from key's {list(key.shape)}")
        T = key.shape[2]
        capturing = torch.cuda.is_current_stream_capturing()
        if self._len[layer] + T > self.capacity:
            if capturing:
                raise RuntimeError(f"TierBackend: capture of an append beyond the capacity {self.capacity}; "
                                   "call prepare(tokens_needed) before capturing")
            self.prepare(self._len[layer] + T)
        rows = lambda x: x.to(torch.bfloat16).transpose(1, 2).reshape(self.batch * T, self.kv_heads, self.dim)
        self.tier.append(layer, self.sessions_t, rows(key).contiguous(), rows(value).contiguous(),
                         counts=self._counts_of(T), max_count=T)
        if not capturing:  # a captured append runs at replay: replayed() counts it
            self._len[layer] += T

    def attend(self, layer, query, scale):
        """query [B, Hq, 1, d] -> [B, Hq, 1, d] in query.dtype."""
        self._check("query", query, self.kv_heads * self.group)
        if query.shape[2] != 1:
            raise ValueError(f"query: {query.shape[2]} positions; the tier attends one query per sequence "
                             "(a prefill attends densely)")
        q = query.to(torch.bfloat16).reshape(self.batch, self.kv_heads, self.group, self.dim).contiguous()
        capturing = torch.cuda.is_current_stream_capturing()
        if layer == 0 and self.cache_bytes and self._steps == 0 and not capturing:
            self.fill_cache()  # the first step after a capacity class is set: lines by variance
        out, _ = self.tier.step(layer, self.sessions_t, q, capacity=self.capacity, k=self.k, budget=self.budget,
                                sink=self.sink, local=self.local, scale=scale, fixed_depths=self._fixed(layer))
        if layer == self.layers - 1 and not capturing:
            self._step_done()
        return out.reshape(query.shape).to(query.dtype)

    def ahead_join(self):
        """The current stream waits for the read-ahead a captured step left to
        the next one (read_ahead "across": the last layer's): call at the end
        of a captured decode step, after the model's head. No-op otherwise."""
        self.tier.ahead_join()

    def _fixed(self, layer):
        """ds:c's depths of one layer (None for fathom:B). They are chosen
        once, from the keys held at the first decode step (tier.ds_depths:
        the c channels of largest mean square key per session and head) and
        kept, as Double Sparsity keeps its calibrated channels."""
        if self.kind != "ds":
            return None
        if self._ds is None:
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError("TierBackend: ds depths are chosen at the first decode step; run one step "
                                   "before capturing a graph")
            torch.cuda.synchronize(self.tier.device)
            # mid-step, the layers hold different counts (this one has the new token already)
            depths = np.stack([np.stack([self.tier.ds_depths(s, layer_, self.ds_channels, self._len[layer_])
                                         for s in self.sessions]) for layer_ in range(self.layers)])
            self._ds = torch.from_numpy(depths).to(self.tier.device)
        return self._ds[layer]

    def replayed(self, tokens=1):
        """Record that a replayed graph appended `tokens` tokens to every layer
        (a replay does not run this object's Python)."""
        self._len = [n + tokens for n in self._len]
        self._step_done(tokens)

    def length(self, layer=0):
        return self._len[layer]

    def check(self):
        """Raise the first error the GPU recorded (synchronizes)."""
        self.tier.check()

    def close(self):
        self.tier.close()
