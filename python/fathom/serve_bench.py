"""Decode tokens per second of a transformers model with the KV cache in the
Fathom KV tier (host memory), against transformers' sdpa with the KV in HBM
and against dense host-offload decoding.

    python -m fathom.serve_bench --model qwen3-8b --runs 32k:1,128k:1,128k:4 \\
        --methods fathom:48,sdpa,offload [--k 512] [--steps 32] [--json]

The model is a random-init transformers model of the preset's shape (bf16, on
the GPU). Every measured decode step is transformers' own forward (embedding,
36 decoder layers, norm, lm_head) plus the argmax of the next token, captured
in ONE CUDA graph (torch.cuda.graph) and replayed; the graph updates its own
input token and position. The cache differs per method:

- fathom:B: TierBackend (fathom.tier's custom ops). The attention layers'
  ``past_key_values.update`` appends the new K/V to the tier, and the
  attention function registered through transformers' AttentionInterface
  runs the tier step. The context is filled SYNTHETICALLY through tier
  append (random K/V with per-channel scales and offsets, chunks of 4096
  tokens), since a real prefill at these lengths would take too long; the
  decode steps then append real K/V from the model. --cache F (or a list,
  e.g. 0,0.1: every fathom method once per share, side by side) gives each
  sequence the tier's HBM cache (TierBackend cache_bytes: F of its index at
  the context, 70% plane lines ranked by the last 16 plans, the rest K/V
  row slots, direct-mapped or in sets of --cache-row-ways ways (a list,
  e.g. 1,4: each cached run once per value); filled at the first step and every --cache-fill-every steps,
  the fills inside the timed steps). Its hit rates here are those of the
  synthetic context and the random model's queries, not a real decode's.
- sdpa: transformers' StaticCache (KV in HBM, random K/V up to the context)
  and its sdpa attention, the speed of light where it fits in HBM.
- offload: dense attention over K/V kept in pinned host memory: every layer
  copies its whole K and V over PCIe each step, then sdpa (what offloading
  engines do). One layer-sized pinned buffer serves every layer: the same
  bytes cross the link as with per-layer buffers, in 1/L of the host memory.

Per-token split (fathom): the same forward with a no-op cache and an
attention that returns zeros (model forward alone), a graph of every layer's
tier append alone, a graph of every layer's tier step alone (each timed with
CUDA events over its own replays) and Python = wall time per step (the host
waits for each token, as generate does) minus the full graph's GPU time.

Until fathom.transformers' FathomCache is merged, the cache object and the
attention function here are this module's TierCache and tier_attention
(the same Backend interface).
"""
import argparse
import gc
import json
import os
import sys
import time

import torch

PRESETS = {
    "qwen3-8b": dict(model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                     rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
    "tiny-qwen3": dict(model_type="qwen3", hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=1024,
                       rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
}
FILL_CHUNK = 4096


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def host_cpu():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def parse_tokens(s):
    s = s.strip().lower()
    mult = {"k": 1 << 10, "m": 1 << 20}.get(s[-1:], 1)
    return int(s[:-1] if mult > 1 else s) * mult


def make_config(preset, max_positions):
    from transformers import AutoConfig

    kw = dict(PRESETS[preset])
    kw["max_position_embeddings"] = max(max_positions, 4096)
    return AutoConfig.for_model(**kw)


def make_model(config, device="cuda", dtype=torch.bfloat16, seed=0):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    finally:
        torch.set_default_dtype(old)
    return model.to(dtype).eval()


# ---------------------------------------------------------------- caches and attention functions

class TierCache:
    """What transformers' attention layers call as past_key_values: update()
    appends the new K/V to the backend and hands them back (a prefill
    attends densely over them; a decode step's attention goes to the tier)."""

    def __init__(self, backend):
        self.backend = backend

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.backend.append(layer_idx, key_states, value_states)
        return key_states, value_states

    def get_seq_length(self, layer_idx=0):
        return self.backend.length(layer_idx)


class NullCache:
    """Keeps nothing (the model-forward-alone graph)."""

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        return key_states, value_states

    def get_seq_length(self, layer_idx=0):
        return 0


class OffloadCache:
    """Dense host offload: each layer's K and V [B, H, L, d] copied from pinned
    host memory to the GPU every step (one pinned buffer for all layers), the
    new token written at `position`, then sdpa over all L with a mask."""

    def __init__(self, batch, kv_heads, length, dim, position, device):
        shape = (batch, kv_heads, length, dim)
        self.dev_k = torch.empty(shape, dtype=torch.bfloat16, device=device).normal_()
        self.dev_v = torch.empty(shape, dtype=torch.bfloat16, device=device).normal_()
        self.host_k = torch.empty(shape, dtype=torch.bfloat16, pin_memory=True)
        self.host_v = torch.empty(shape, dtype=torch.bfloat16, pin_memory=True)
        self.host_k.copy_(self.dev_k)
        self.host_v.copy_(self.dev_v)
        self.position = position  # long [1] device tensor: the token's index
        self.bytes_per_layer = 2 * self.host_k.numel() * 2

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.dev_k.copy_(self.host_k, non_blocking=True)
        self.dev_v.copy_(self.host_v, non_blocking=True)
        self.dev_k.index_copy_(2, self.position, key_states)
        self.dev_v.index_copy_(2, self.position, value_states)
        return self.dev_k, self.dev_v

    def get_seq_length(self, layer_idx=0):
        return 0


def tier_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """AttentionInterface function "fathom_tier": one query per sequence goes
    to the module's TierBackend; a prefill attends densely (sdpa, causal)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if query.shape[2] == 1:
        out = module.fathom_backend.attend(module.layer_idx, query, scaling)
        return out.transpose(1, 2), None
    return sdpa_attention_forward(module, query, key, value, None, dropout=dropout, scaling=scaling,
                                  is_causal=True, **kwargs)


def skip_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """AttentionInterface function "fathom_skip": zeros (no attention work)."""
    return torch.zeros_like(query).transpose(1, 2), None


def register():
    from transformers import AttentionInterface

    AttentionInterface.register("fathom_tier", tier_attention)
    AttentionInterface.register("fathom_skip", skip_attention)


def attach(model, backend, attn):
    """Route model's attention layers to `backend` through attention function `attn`."""
    for layer in model.model.layers:
        layer.self_attn.fathom_backend = backend
    model.config._attn_implementation = attn


# ---------------------------------------------------------------- graphs and timing

class Decoder:
    """One decode step of `model` (forward + argmax; the step writes the next
    token into `ids` and advances `pos`) captured in one CUDA graph."""

    def __init__(self, model, cache, ids, pos, mask_fn=None, warmup=1):
        self.model, self.cache, self.ids, self.pos, self.mask_fn = model, cache, ids, pos, mask_fn
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                self.step()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.step()

    def step(self):
        mask = {"full_attention": self.mask_fn(self.pos) if self.mask_fn else None}
        out = self.model(input_ids=self.ids, position_ids=self.pos, attention_mask=mask,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.ids.copy_(out.logits[:, -1:].argmax(-1))
        self.pos.add_(1)
        join = getattr(getattr(self.cache, "backend", None), "ahead_join", None)
        if join is not None:  # the tier's read-ahead "across": the last layer's copy ran beside the head
            join()


def capture(fn, warmup=1):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def gpu_ms(graph, reps, before=None):
    """Mean GPU ms of one replay of `graph` (CUDA events around `reps` replays)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        if before:
            before()
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def wall_ms(graph, reps, before=None, after=None):
    """(mean wall ms per step when the host waits for every step's token,
    mean host ms per step outside that wait: the Python of prepare, replay
    and bookkeeping, during which the GPU idles)."""
    torch.cuda.synchronize()
    host = 0.0
    t0 = time.perf_counter()
    for _ in range(reps):
        h0 = time.perf_counter()
        if before:
            before()
        graph.replay()
        h1 = time.perf_counter()
        torch.cuda.current_stream().synchronize()
        h2 = time.perf_counter()
        if after:
            after()
        host += (h1 - h0) + (time.perf_counter() - h2)
    return (time.perf_counter() - t0) * 1e3 / reps, host * 1e3 / reps


def progress(total, desc):
    try:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit="tok", unit_scale=True, file=sys.stderr, leave=False)
    except ImportError:
        class Bar:
            def __init__(self):
                self.n = 0

            def update(self, k):
                self.n += k
                print(f"\r{desc}: {self.n}/{total}", end="", file=sys.stderr, flush=True)

            def close(self):
                print(file=sys.stderr)

        return Bar()


def synthetic_kv(batch, heads, tokens, dim, gen, chan):
    """Random K/V [B, H, T, d] bf16: K with per-channel scales and offsets."""
    k = torch.randn((batch, heads, tokens, dim), device="cuda", generator=gen) * chan[0] + chan[1]
    v = torch.randn((batch, heads, tokens, dim), device="cuda", generator=gen)
    return k.to(torch.bfloat16), v.to(torch.bfloat16)


# ---------------------------------------------------------------- the methods

def shape_of(config):
    return dict(layers=config.num_hidden_layers, kv_heads=config.num_key_value_heads,
                group=config.num_attention_heads // config.num_key_value_heads, dim=config.head_dim)


def run_fathom(model, config, method, context, batch, args, cache=0.0, row_ways=1, read_ahead=None):
    from ._hf_tier import TierBackend

    sh = shape_of(config)
    total = context + args.steps * 3 + args.reps * 2 + 64
    # --cache: an HBM cache per session of that share of its index at the context (34 bytes per block and channel)
    cache_bytes = int(cache * sh["layers"] * sh["kv_heads"] * -(-context // 64) * sh["dim"] * 34)
    backend = TierBackend(**sh, batch=batch, method=method, k=args.k, max_tokens=total + 4096,
                          cache_bytes=cache_bytes, cache_fill_every=args.cache_fill_every,
                          cache_row_ways=row_ways, read_ahead=read_ahead)
    try:
        t0 = time.perf_counter()
        backend.prepare(total)
        reserve_s = time.perf_counter() - t0
        gen = torch.Generator(device="cuda").manual_seed(1)
        chan = (torch.rand((sh["kv_heads"], 1, sh["dim"]), device="cuda", generator=gen) * 1.5 + 0.25,
                torch.randn((sh["kv_heads"], 1, sh["dim"]), device="cuda", generator=gen) * 0.5)
        bar = progress(context * batch, f"fill {method} {context // 1024}k x{batch}")
        t0 = time.perf_counter()
        done = 0
        while done < context:
            T = min(FILL_CHUNK, context - done)
            for layer in range(sh["layers"]):
                k, v = synthetic_kv(batch, sh["kv_heads"], T, sh["dim"], gen, chan)
                backend.append(layer, k, v)
            done += T
            bar.update(T * batch)
        torch.cuda.synchronize()
        bar.close()
        fill_s = time.perf_counter() - t0
        backend.check()

        ids = torch.randint(0, config.vocab_size, (batch, 1), device="cuda")
        pos = torch.full((batch, 1), context, dtype=torch.long, device="cuda")
        cache = TierCache(backend)
        attach(model, backend, "fathom_tier")
        dec = Decoder(model, cache, ids, pos, warmup=1)
        replay = lambda: backend.prepare(backend.length() + 1)
        for _ in range(2):  # first replays
            replay(); dec.graph.replay(); backend.replayed(1)
        wall, host = wall_ms(dec.graph, args.steps, before=replay, after=lambda: backend.replayed(1))
        gpu = gpu_ms(dec.graph, args.steps, before=replay)
        backend.replayed(args.steps)
        backend.check()

        # the parts alone
        attach(model, backend, "fathom_skip")
        pos_fwd = pos.clone()
        fwd = Decoder(model, NullCache(), ids.clone(), pos_fwd, warmup=1)
        forward = gpu_ms(fwd.graph, args.reps)
        del fwd
        q = torch.randn((batch, config.num_attention_heads, 1, sh["dim"]), device="cuda").to(torch.bfloat16)
        k1, v1 = synthetic_kv(batch, sh["kv_heads"], 1, sh["dim"], gen, chan)
        scale = sh["dim"] ** -0.5

        def appends():
            for layer in range(sh["layers"]):
                backend.append(layer, k1, v1)

        def steps():
            for layer in range(sh["layers"]):
                backend.attend(layer, q, scale)
            backend.ahead_join()

        g_app = capture(appends)
        append = gpu_ms(g_app, args.reps)
        backend.replayed(args.reps)
        g_step = capture(steps)
        step = gpu_ms(g_step, args.reps)
        backend.check()
        final = backend.length()
        usage = backend.tier.usage(backend.sessions[0])
        del g_app, g_step, dec
        return {
            "step_ms": wall, "gpu_ms": gpu, "tokens_per_s": batch * 1e3 / wall,
            "forward_ms": forward, "append_ms": append, "tier_step_ms": step,
            "python_ms": host, "python_share": host / wall,
            "vs_parts": wall / (forward + step),
            "fill": "synthetic (tier append, chunks of %d tokens)" % FILL_CHUNK, "fill_s": fill_s,
            "reserve_s": reserve_s, "final_length": final, "capacity": backend.capacity,
            "host_bytes_per_session": usage["bytes"],
            "cache_bytes_per_session": backend.tier.cache_bytes(backend.sessions[0]),
        }
    finally:
        attach(model, None, "sdpa")
        backend.close()


def causal_mask_fn(length, batch):
    ar = torch.arange(length, device="cuda")

    def mask(pos):  # keys 0..pos (the current token included)
        return (ar[None, :] <= pos).view(batch, 1, 1, length)

    return mask


def run_sdpa(model, config, context, batch, args):
    from transformers import StaticCache

    sh = shape_of(config)
    length = context + args.steps * 2 + 16
    need = 2 * sh["layers"] * batch * sh["kv_heads"] * length * sh["dim"] * 2
    free, _ = torch.cuda.mem_get_info()
    if need > free - (4 << 30):
        return {"skipped": "KV of %.1f GB does not fit in the %.1f GB of HBM left" % (need / 1e9, free / 1e9)}
    cache = StaticCache(config=config, max_cache_len=length)
    cache.early_initialization(batch, sh["kv_heads"], sh["dim"], torch.bfloat16, torch.device("cuda"))
    for layer in cache.layers:
        layer.keys.normal_()
        layer.values.normal_()
        layer.cumulative_length.fill_(context)
    ids = torch.randint(0, config.vocab_size, (batch, 1), device="cuda")
    pos = torch.full((batch, 1), context, dtype=torch.long, device="cuda")
    attach(model, None, "sdpa")
    try:
        dec = Decoder(model, cache, ids, pos, mask_fn=causal_mask_fn(length, batch), warmup=1)
        wall, host = wall_ms(dec.graph, args.steps)
        gpu = gpu_ms(dec.graph, args.steps)
        return {"step_ms": wall, "gpu_ms": gpu, "tokens_per_s": batch * 1e3 / wall, "python_ms": host,
                "kv_hbm_bytes": need}
    finally:
        del cache


def run_offload(model, config, context, batch, args):
    sh = shape_of(config)
    length = context + args.offload_steps * 2 + 8
    pos = torch.full((batch, 1), context, dtype=torch.long, device="cuda")
    position = torch.full((1,), context, dtype=torch.long, device="cuda")
    cache = OffloadCache(batch, sh["kv_heads"], length, sh["dim"], position, "cuda")
    ids = torch.randint(0, config.vocab_size, (batch, 1), device="cuda")
    attach(model, None, "sdpa")
    mask = causal_mask_fn(length, batch)

    def mask_and_position(p):
        position.copy_(p[0])
        return mask(p)

    try:
        dec = Decoder(model, cache, ids, pos, mask_fn=mask_and_position, warmup=1)
        wall, host = wall_ms(dec.graph, args.offload_steps)
        gpu = gpu_ms(dec.graph, args.offload_steps)
        moved = cache.bytes_per_layer * sh["layers"]
        return {"step_ms": wall, "gpu_ms": gpu, "tokens_per_s": batch * 1e3 / wall, "python_ms": host,
                "link_bytes_per_step": moved,
                "link_gb_s": moved / (gpu * 1e-3) / 1e9}
    finally:
        del cache


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m fathom.serve_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3-8b", choices=sorted(PRESETS))
    ap.add_argument("--runs", default="32k:1,128k:1,128k:4,512k:1", help="context:batch[@method+method],... (e.g. 128k:4 or 128k:1@sdpa+offload)")
    ap.add_argument("--methods", default="fathom:48,ds:32,sdpa,offload",
                    help="fathom:B (the tier), sdpa (StaticCache, KV in HBM), offload (dense host offload), "
                         "ds:N (fixed depths through the tier, if the C tier has it)")
    ap.add_argument("--k", type=int, default=512, help="tokens selected per query head")
    ap.add_argument("--steps", type=int, default=32, help="decode steps timed per method")
    ap.add_argument("--offload-steps", type=int, default=3, help="decode steps timed for offload")
    ap.add_argument("--reps", type=int, default=20, help="replays timing each part alone")
    ap.add_argument("--cache", default="0",
                    help="fathom runs: an HBM cache per sequence of this share of its index at the context "
                         "(e.g. 0.1; 0: none), 70%% for plane lines, the rest for K/V rows; a list (0,0.1) "
                         "runs each fathom method once per share")
    ap.add_argument("--cache-fill-every", type=int, default=16, help="decode steps between cache fills")
    ap.add_argument("--cache-row-ways", default="1",
                    help="the row cache's ways (1: direct-mapped; 2, 4, 8: sets kept by recency of use), or a "
                         "list (1,4): every cached fathom run once per value")
    ap.add_argument("--read-ahead", default="none",
                    help="fathom runs: the KV tier's read-ahead of the next layer (none; beside: started with "
                         "each step; between: after each step's own work but the last layer's, beside the "
                         "model's work between two layers; across: the last layer's too), or a list "
                         "(none,between): every fathom run once per value")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ap.add_argument("--partial", help="rewrite this file with the JSON so far after every run")
    args = ap.parse_args(argv)
    try:
        caches = [float(x) for x in args.cache.split(",")]
    except ValueError:
        caches = [-1.0]
    if not all(0.0 <= c <= 1.0 for c in caches) or args.cache_fill_every < 1:
        ap.error(f"--cache {args.cache}: shares in [0, 1], and --cache-fill-every {args.cache_fill_every} >= 1")
    try:
        row_ways = [int(x) for x in args.cache_row_ways.split(",")]
    except ValueError:
        row_ways = [-1]
    if not row_ways or not all(w in (1, 2, 4, 8) for w in row_ways):
        ap.error(f"--cache-row-ways {args.cache_row_ways}: values of 1, 2, 4, 8")
    aheads = [x.strip() for x in args.read_ahead.split(",")]
    if not aheads or not all(x in ("none", "beside", "between", "across") for x in aheads):
        ap.error(f"--read-ahead {args.read_ahead}: values of none, beside, between, across")
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device (torch.cuda.is_available() is False)")
    from . import tier

    methods = [m.strip() for m in args.methods.split(",")]
    runs = []
    for spec in args.runs.split(","):  # context:batch[@method+method]
        shape, _, only = spec.partition("@")
        c, b = shape.split(":")
        runs.append((parse_tokens(c), int(b), only.split("+") if only else methods))
    register()
    config = make_config(args.model, max(r[0] for r in runs) + 4096)
    t0 = time.perf_counter()
    model = make_model(config)
    log(f"model {args.model}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, "
        f"{time.perf_counter() - t0:.1f} s")
    results = []
    torch.set_grad_enabled(False)  # no autograd graph: it would keep every layer's activations
    plan = [(c, b, m, share, ways, ahead) for c, b, ms in runs for m in ms
            for share in (caches if m not in ("sdpa", "offload") else [0.0])
            for ways in (row_ways if share > 0 else [1])
            for ahead in (aheads if m not in ("sdpa", "offload") else ["none"])]
    for context, batch, method, share, ways, ahead in plan:
        log(f"== {method} at {context // 1024}k, batch {batch}" +
            (f", cache {share:g}, row ways {ways}" if share else "") +
            (f", read-ahead {ahead}" if ahead != "none" else ""))
        try:
            if method == "sdpa":
                r = run_sdpa(model, config, context, batch, args)
            elif method == "offload":
                r = run_offload(model, config, context, batch, args)
            else:
                tier.parse_method(method)  # UnsupportedError for methods the tier step lacks
                r = run_fathom(model, config, method, context, batch, args, cache=share, row_ways=ways,
                               read_ahead=ahead)
        except tier.UnsupportedError as e:
            r = {"skipped": str(e)}
        except Exception as e:  # noqa: BLE001 - one failed run must not lose the others
            r = {"error": f"{type(e).__name__}: {e}"}
        gc.collect()
        torch.cuda.empty_cache()
        r.update(method=method, context=context, batch=batch)
        if method not in ("sdpa", "offload"):
            r.update(cache=share, cache_row_ways=ways, read_ahead=ahead)
        log("   " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))
        results.append(r)
        out = {
            "machine": f"{torch.cuda.get_device_name()} (host: {host_cpu()}, {os.cpu_count()} cores)",
            "model": args.model, "config": PRESETS[args.model], "dtype": "bf16", "init": "random",
            "k": args.k, "sink": tier.SINK_TOKENS, "local": tier.LOCAL_TOKENS, "steps": args.steps,
            "offload_steps": args.offload_steps, "reps": args.reps,
            "cache": caches, "cache_fill_every": args.cache_fill_every, "cache_row_ways": row_ways,
            "read_ahead": aheads,
            "graph": "transformers forward + argmax captured in one torch.cuda.graph per method",
            "torch": torch.__version__, "transformers": __import__("transformers").__version__,
            "runs": results,
        }
        if args.partial:
            with open(args.partial, "w") as f:
                json.dump(out, f)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{'context':>8} {'batch':>5} {'method':>10} {'tok/s':>8} {'ms/step':>8} {'fwd':>6} {'append':>7} "
              f"{'step':>6} {'python':>7}")
        for r in results:
            if "skipped" in r:
                print(f"{r['context'] // 1024:>7}k {r['batch']:>5} {r['method']:>10} skipped: {r['skipped']}")
                continue
            if "error" in r:
                print(f"{r['context'] // 1024:>7}k {r['batch']:>5} {r['method']:>10} error: {r['error']}")
                continue
            parts = ""
            if "forward_ms" in r:
                parts = (f"{r['forward_ms']:>6.2f} {r['append_ms']:>7.2f} {r['tier_step_ms']:>6.2f} "
                         f"{100 * r['python_share']:>6.1f}%")
            name = r["method"] + (f"+{r['cache']:g}" if r.get("cache") else "") + (
                f"w{r['cache_row_ways']}" if r.get("cache") and r.get("cache_row_ways", 1) > 1 else "") + (
                f"+{r['read_ahead']}" if r.get("read_ahead", "none") != "none" else "")
            print(f"{r['context'] // 1024:>7}k {r['batch']:>5} {name:>10} {r['tokens_per_s']:>8.2f} "
                  f"{r['step_ms']:>8.2f} {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
