#!/usr/bin/env python3
"""Independent numpy forward pass of a GGUF Llama or Gemma 3 model, to check
libfathom's C model (src/model/model.c) against.

Written apart from the C code on purpose:
  * tensors are read and dequantized by the `gguf` Python package (not by
    libfathom's reader);
  * everything is computed in float64, one whole sequence at a time (causal
    mask), not token by token;
  * RoPE is applied the Hugging Face way: the Q/K rows that convert_hf_to_gguf
    permuted for llama.cpp's adjacent-pair rotation are permuted back, and
    rotate_half pairs channel i with i + d/2. If the C code's adjacent-pair
    convention were wrong, the two would disagree.
  * Gemma 3 follows Hugging Face's Gemma3ForCausalLM (modeling_gemma3.py) and
    google/gemma-3-270m's config.json, not llama.cpp: the constants the GGUF
    does not carry are written here from that config (GEMMA3_CONFIG), the
    sliding-window mask is HF's (a query at q sees keys k with q - k <
    sliding_window), the whole causal mask is built at once, and GELU is
    gelu_pytorch_tanh. The GGUF's norm weights are Gemma's (1 + w): HF's
    Gemma3RMSNorm multiplies by 1 + w and convert_hf_to_gguf stores w + 1.

Usage:
  model_reference.py MODEL [--case PROMPT_IDS GEN_IDS C_LOGITS]... [--capture IDS FILE]...
For each case (ids comma-separated): teacher-forces prompt + the C model's generated ids, compares
the C logits (float32 [n_gen x vocab], the logits that chose each generated
token) with the reference's at the same positions, and checks that the
reference's greedy choice (argmax) equals the C model's token at every step,
i.e. that greedy decoding by the reference yields the same sequence.
For each capture: the queries (last P positions), keys and values of every
layer that `fathom capture --dtype f32` wrote against the reference's, after
RoPE, in the GGUF channel order.
Prints one line per check and exits 1 on a mismatch or a tolerance failure.
"""
import argparse
import sys

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover
    print("model_reference.py: the Python package 'gguf' is missing (pip install gguf)", file=sys.stderr)
    sys.exit(77)


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


# google/gemma-3-270m config.json values that the GGUF does not hold.
GEMMA3_CONFIG = {
    "query_pre_attn_scalar": 256,   # attention scale 1/sqrt(256)
    "rope_local_base_freq": 10000.0,
    "sliding_window_pattern": 6,    # layer_types: 5 sliding, then 1 full attention
    "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
}


class Reference:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        arch = field(r, "general.architecture")
        if arch not in ("llama", "gemma3"):
            raise SystemExit(f"model_reference.py: only llama and gemma3 GGUFs are handled, not {arch}")
        self.gemma = arch == "gemma3"
        self.n_layers = int(field(r, f"{arch}.block_count"))
        self.embed = int(field(r, f"{arch}.embedding_length"))
        self.n_heads = int(field(r, f"{arch}.attention.head_count"))
        self.n_kv = int(field(r, f"{arch}.attention.head_count_kv"))
        self.head_dim = int(field(r, f"{arch}.attention.key_length", self.embed // self.n_heads))
        self.base = float(field(r, f"{arch}.rope.freq_base", 10000.0))
        self.eps = float(field(r, f"{arch}.attention.layer_norm_rms_epsilon"))
        self.scale = 1.0 / np.sqrt(self.head_dim)
        self.window = None
        self.sliding = [False] * self.n_layers
        self.local_base = self.base
        if self.gemma:
            cfg = GEMMA3_CONFIG
            self.scale = cfg["query_pre_attn_scalar"] ** -0.5
            self.window = int(field(r, "gemma3.attention.sliding_window"))
            self.local_base = cfg["rope_local_base_freq"]
            pat = cfg["sliding_window_pattern"]
            self.sliding = [(l + 1) % pat != 0 for l in range(self.n_layers)]
        self.t = {}
        for t in r.tensors:
            # dequantize returns the logical shape, rows first: [out, in].
            w = gguf.quants.dequantize(t.data, t.tensor_type)
            # The (large) embedding stays float32; logits are taken in chunks.
            self.t[t.name] = np.asarray(w, dtype=np.float32 if t.name == "token_embd.weight" else np.float64)
        self.out_w = self.t.get("output.weight", self.t["token_embd.weight"])
        # Undo convert_hf_to_gguf's permute of Q and K rows (per head, the
        # rows (0..d/2-1, d/2..d-1) were interleaved into adjacent pairs).
        # Gemma's are not permuted (llama.cpp rotates them NEOX-style).
        for l in range(self.n_layers if not self.gemma else 0):
            for name, heads in (("attn_q", self.n_heads), ("attn_k", self.n_kv)):
                key = f"blk.{l}.{name}.weight"
                w = self.t[key]
                d = w.shape[0] // heads
                self.t[key] = w.reshape(heads, d // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope_hf(self, x, pos, base):
        # x: [seq, heads, d]; Hugging Face rotate_half convention.
        d = x.shape[-1]
        inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        ang = pos[:, None] * inv[None, :]
        cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)[:, None, :]
        sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1)[:, None, :]
        rot = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], axis=-1)
        return x * cos + rot * sin

    def logits(self, ids, record=None):
        """Logits [seq x vocab] at every position of ids. record (a list)
        gets (q, k, v) of every layer after RoPE, [seq, heads, d], in the
        GGUF's channel order (adjacent rotation pairs), as the C model
        caches them."""
        n = len(ids)
        D, H, Hk = self.head_dim, self.n_heads, self.n_kv
        x = self.t["token_embd.weight"][np.asarray(ids)].astype(np.float64)
        if self.gemma:
            x = x * np.sqrt(self.embed)  # Gemma3TextScaledWordEmbedding
        pos = np.arange(n, dtype=np.float64)
        qi, ki = np.arange(n)[:, None], np.arange(n)[None, :]
        causal = np.where(ki > qi, -np.inf, 0.0)
        local = causal if self.window is None else np.where(qi - ki >= self.window, -np.inf, causal)
        for l in range(self.n_layers):
            p = f"blk.{l}."
            mask, base = (local, self.local_base) if self.sliding[l] else (causal, self.base)
            h = self.rmsnorm(x, self.t[p + "attn_norm.weight"])
            q = (h @ self.t[p + "attn_q.weight"].T).reshape(n, H, D)
            k = (h @ self.t[p + "attn_k.weight"].T).reshape(n, Hk, D)
            v = (h @ self.t[p + "attn_v.weight"].T).reshape(n, Hk, D)
            if self.gemma:
                q = self.rmsnorm(q, self.t[p + "attn_q_norm.weight"])
                k = self.rmsnorm(k, self.t[p + "attn_k_norm.weight"])
            q, k = self.rope_hf(q, pos, base), self.rope_hf(k, pos, base)
            if record is not None:
                record.append((self.gguf_order(q), self.gguf_order(k), v))
            out = np.empty((n, H, D))
            for hh in range(H):
                kv = hh // (H // Hk)
                s = q[:, hh, :] @ k[:, kv, :].T * self.scale + mask
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                out[:, hh, :] = s @ v[:, kv, :]
            a = out.reshape(n, H * D) @ self.t[p + "attn_output.weight"].T
            if self.gemma:
                a = self.rmsnorm(a, self.t[p + "post_attention_norm.weight"])
            x = x + a
            h = self.rmsnorm(x, self.t[p + "ffn_norm.weight"])
            g = h @ self.t[p + "ffn_gate.weight"].T
            u = h @ self.t[p + "ffn_up.weight"].T
            if self.gemma:  # gelu_pytorch_tanh
                act = 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g ** 3)))
            else:
                act = g / (1.0 + np.exp(-g))
            f = (act * u) @ self.t[p + "ffn_down.weight"].T
            if self.gemma:
                f = self.rmsnorm(f, self.t[p + "post_ffw_norm.weight"])
            x = x + f
        h = self.rmsnorm(x, self.t["output_norm.weight"])
        logits = np.empty((n, self.out_w.shape[0]))
        for r0 in range(0, self.out_w.shape[0], 16384):
            logits[:, r0:r0 + 16384] = h @ self.out_w[r0:r0 + 16384].astype(np.float64).T
        return logits

    def gguf_order(self, x):
        return x if self.gemma else to_gguf_order(x)


def to_gguf_order(x):
    """Hugging Face channel order (i, i + d/2 rotate together) to GGUF's
    (2i, 2i+1): channel 2i + s of GGUF is channel s*d/2 + i of HF."""
    d = x.shape[-1]
    return x.reshape(*x.shape[:-1], 2, d // 2).swapaxes(-1, -2).reshape(x.shape)


def read_capture(path):
    """The tensors and metadata of a capture (safetensors, F32 only here)."""
    import json
    import struct
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__")
    out = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            raise SystemExit(f"model_reference.py: {path}: write the capture with --dtype f32")
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(blob[8 + n + b:8 + n + e], dtype="<f4").reshape(t["shape"])
    return out, meta


def check_capture(ref, ids, path, tol):
    """Queries of the last P positions, keys and values of every layer."""
    rec = []
    ref.logits(ids, rec)
    cap, meta = read_capture(path)
    n = len(ids)
    P = cap["l0.q"].shape[1]
    ok = int(meta["first_query"]) == n - P
    worst = 0.0
    for l, (q, k, v) in enumerate(rec):
        for name, got, want in (("q", cap[f"l{l}.q"], q[n - P:].transpose(1, 0, 2)),
                                ("k", cap[f"l{l}.k"], k.transpose(1, 0, 2)),
                                ("v", cap[f"l{l}.v"], v.transpose(1, 0, 2))):
            if got.shape != want.shape:
                print(f"FAIL capture l{l}.{name}: shape {got.shape}, expected {want.shape}")
                ok = False
                continue
            rel = np.abs(got - want).max() / np.abs(want).max()
            worst = max(worst, rel)
    ok = ok and worst < tol
    print(f"{'ok' if ok else 'FAIL'} capture {path}: {n} tokens, P {P}, first_query {meta['first_query']}, "
          f"max |capture - ref| / max |ref| over q, k, v of all layers {worst:.3e}")
    return ok


def parse_ids(s):
    return [int(v) for v in s.split(",") if v]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--case", nargs=3, action="append", default=[],
                    metavar=("PROMPT_IDS", "GEN_IDS", "C_LOGITS"),
                    help="prompt ids, the C model's generated ids, its logits file")
    ap.add_argument("--capture", nargs=2, action="append", default=[], metavar=("IDS", "FILE"),
                    help="token ids and the f32 capture fathom capture wrote for them")
    ap.add_argument("--rel-tol", type=float, default=1e-3,
                    help="max |C - ref| / max |ref| allowed per step (default 1e-3)")
    a = ap.parse_args()
    ref = Reference(a.model)
    vocab = ref.out_w.shape[0]
    failed = False
    worst = 0.0
    for prompt_s, gen_s, path in a.case:
        prompt, gen = parse_ids(prompt_s), parse_ids(gen_s)
        c = np.fromfile(path, dtype=np.float32)
        if c.size != len(gen) * vocab:
            print(f"FAIL {path}: {c.size} floats, expected {len(gen)} x {vocab}")
            failed = True
            continue
        c = c.reshape(len(gen), vocab).astype(np.float64)
        seq = prompt + gen[:-1]
        r = ref.logits(seq)[len(prompt) - 1:]  # the rows that chose gen[0..]
        rel = np.abs(c - r).max(axis=1) / np.abs(r).max(axis=1)
        greedy = r.argmax(axis=1)
        mism = [i for i in range(len(gen)) if greedy[i] != gen[i]]
        top2 = np.sort(r, axis=1)[:, -2:]
        margin = (top2[:, 1] - top2[:, 0]).min()
        worst = max(worst, rel.max())
        status = "ok"
        if mism or rel.max() > a.rel_tol:
            status = "FAIL"
            failed = True
        print(f"{status} prompt {len(prompt)} tokens, {len(gen)} generated: max|dC|/max|ref| "
              f"{rel.max():.3e} (mean {rel.mean():.3e}), max abs diff {np.abs(c - r).max():.3e}, "
              f"greedy mismatches {len(mism)}{' at ' + str(mism[:5]) if mism else ''}, "
              f"smallest top-2 margin {margin:.3g}")
    for ids_s, path in a.capture:
        failed |= not check_capture(ref, parse_ids(ids_s), path, a.rel_tol)
    if a.case:
        print(f"worst relative logit difference {worst:.3e} (tolerance {a.rel_tol:g})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
