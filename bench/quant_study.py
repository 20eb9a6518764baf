#!/usr/bin/env python3
"""Bit-plane codes that keep the prefix property, compared on a real capture.

  bench/quant_study.py CAPTURE [--positions 32] [--k 512] [--budgets 16,24,...] [--json]

The store's code (src/core/store.c) is symmetric: per 64-token block and
channel one fp16 scale a = max|k|, code c = clip(floor(8 k / a) + 8, 0, 15),
and the first t planes decode to the t-bit mid-rise value of the same range.
A channel whose keys sit far from zero (RoPE'd keys often do) spends its top
planes on that offset. Two codes that keep "the first t planes are the t-bit
quantizer of the same range" are compared with it, every one under the same
read discipline and the same plan (fathom's water-filling on g_j = sum_h q_hj^2
Var_j at budget B, Var over the window's keys as the store's running sums
give it):

  sym       the store's code (reproduces fathom eval's fathom:B; checked below)
  asym      KIVI-style: per block and channel fp16 lo = min, hi = max, code
            clip(floor(16 (k - lo) / (hi - lo)), 0, 15); t planes decode to
            lo + (prefix + 1/2) (hi - lo) / 2^t. Two fp16 per block and channel
            read: 0.5 bits per token per channel read, counted.
  centered  the symmetric code of k - mu, mu the per-channel mean of the
            window's keys (known after prefill, as the rotated store's mean):
            q.(k - mu) ranks the keys as q.k does, so no per-block bytes are
            added (one fp32 mean per channel per session, not counted).

For each code and budget: the mean relative L2 error of the attention output
against dense attention (sink 4 + local 32 + top-k by the approximate scores,
attended exactly), over every layer in the capture, query head and the last P
positions, with its standard error, and the bits per token read (code bits +
scale bits of every channel read). numpy only; the capture is read directly
(docs/capture-format.md).
"""
import argparse
import json
import math
import struct
import sys

import numpy as np

BLOCK = 64
SINK, LOCAL = 4, 32


def read_capture(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = np.frombuffer(f.read(), dtype=np.uint8)
    meta = header.pop("__metadata__")
    tensors = {}
    for name, e in header.items():
        b0, b1 = e["data_offsets"]
        raw = data[b0:b1]
        if e["dtype"] == "BF16":
            x = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F16":
            x = raw.view(np.float16).astype(np.float32)
        else:
            x = raw.view(np.float32)
        tensors[name] = x.reshape(e["shape"])
    layers = sorted({int(k[1:].split(".")[0]) for k in tensors})
    return meta, [(tensors["l%d.q" % L], tensors["l%d.k" % L], tensors["l%d.v" % L]) for L in layers]


def fp16(x):
    """Round to fp16 and back, saturated at the largest finite fp16 (as store.c's block_scale)."""
    with np.errstate(over="ignore"):
        h = x.astype(np.float16)
    h[np.isinf(h)] = np.copysign(np.float16(65504), h[np.isinf(h)])
    return h.astype(np.float32)


def blocks(keys):
    """keys [n, d] -> [nb, 64, d] padded with NaN (ignored by nanmax/nanmin)."""
    n, d = keys.shape
    nb = (n + BLOCK - 1) // BLOCK
    pad = np.full((nb * BLOCK, d), np.nan, np.float32)
    pad[:n] = keys
    return pad.reshape(nb, BLOCK, d)


def sym_levels(keys):
    """The store's code: [t-1] = keys decoded from their first t planes, t = 1..4."""
    n, d = keys.shape
    kb = blocks(keys)
    a = fp16(np.nanmax(np.abs(kb), axis=1))[:, None, :]  # [nb, 1, d]
    s = a / 8.0
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.clip(np.floor(kb / s) + 8.0, 0, 15)
    c = np.where(a > 0, c, 8.0)
    out = []
    for t in range(1, 5):
        half = float(1 << (t - 1))
        prefix = np.floor(c / (1 << (4 - t)))
        out.append(((prefix + 0.5 - half) * (a / half)).reshape(-1, d)[:n].astype(np.float32))
    return out


def asym_levels(keys):
    n, d = keys.shape
    kb = blocks(keys)
    lo = fp16(np.nanmin(kb, axis=1))[:, None, :]
    hi = fp16(np.nanmax(kb, axis=1))[:, None, :]
    r = hi - lo
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.clip(np.floor((kb - lo) * (16.0 / r)), 0, 15)
    c = np.where(r > 0, c, 0.0)
    out = []
    for t in range(1, 5):
        prefix = np.floor(c / (1 << (4 - t)))
        out.append((lo + (prefix + 0.5) * (r / float(1 << t))).reshape(-1, d)[:n].astype(np.float32))
    return out


def centered_levels(keys):
    mu = keys.astype(np.float64).mean(axis=0).astype(np.float32)
    return [lv + mu for lv in sym_levels(keys - mu)]


CODES = {"sym": (sym_levels, 16.0), "asym": (asym_levels, 32.0), "centered": (centered_levels, 16.0)}


def water_fill(g, budget):
    """fathom_water_fill: depths = breakpoints g_j 2^(1-2m) strictly above the (budget+1)-th largest."""
    m = np.arange(1, 5)
    pts = g[:, None] * np.exp2(1.0 - 2.0 * m)[None, :]
    flat = np.sort(pts[pts > 0])[::-1]
    if flat.size <= budget:
        return (pts > 0).sum(axis=1)
    return (pts > flat[budget]).sum(axis=1)


def softmax_out(scores, values, scale):
    x = (scores - scores.max()) * scale
    w = np.exp(x)
    return (w @ values) / w.sum()


def select(approx, n_vis, k):
    """fathom_select's set: sink + local + the top (k - forced) of the middle."""
    if n_vis <= k:
        return np.arange(n_vis)
    sink_end, local_begin = min(SINK, n_vis), max(n_vis - LOCAL, 0)
    m = k - (sink_end + n_vis - local_begin)
    mid = approx[sink_end:local_begin]
    # ties go to the lower position, as fathom_select breaks them (a stable sort
    # keeps equal scores in position order; argpartition's order is unspecified)
    top = np.argsort(-mid, kind="stable")[:m] + sink_end
    return np.concatenate([np.arange(sink_end), np.sort(top), np.arange(local_begin, n_vis)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--positions", type=int, default=32, help="the last P queried positions")
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--budgets", default="16,24,32,48,64,96,128")
    ap.add_argument("--codes", default="sym,asym,centered")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    budgets = [int(b) for b in a.budgets.split(",")]
    codes = a.codes.split(",")
    meta, layers = read_capture(a.capture)
    first = int(meta["first_query"])
    errs = {(c, b): [] for c in codes for b in budgets}
    bits = {(c, b): [] for c in codes for b in budgets}
    tokens = None
    for q, k, v in layers:
        hq, npos, d = q.shape
        hkv, n, _ = k.shape
        tokens, G = n, hq // hkv
        P = min(a.positions, npos)
        scale = 1.0 / math.sqrt(d)
        for g in range(hkv):
            K, V = k[g], v[g]
            var = K.astype(np.float64).var(axis=0)
            levels = {c: [np.zeros_like(K)] + CODES[c][0](K) for c in codes}
            for p in range(npos - P, npos):
                n_vis = first + p + 1
                Q = q[g * G:(g + 1) * G, p, :]
                exact = K[:n_vis] @ Q.T  # [n_vis, G]
                dense = [softmax_out(exact[:, h].astype(np.float64), V[:n_vis], scale) for h in range(G)]
                imp = (Q.astype(np.float64) ** 2).sum(axis=0) * var
                for b in budgets:
                    depth = water_fill(imp, b)
                    active = int((depth > 0).sum())
                    for c in codes:
                        lv = levels[c]
                        ka = np.empty((n_vis, d), np.float32)
                        for t in range(5):
                            cols = depth == t
                            if cols.any():
                                ka[:, cols] = lv[t][:n_vis][:, cols]
                        approx = ka @ Q.T
                        bits[(c, b)].append(depth.sum() + active * CODES[c][1] / BLOCK)
                        for h in range(G):
                            sel = select(approx[:, h], n_vis, a.k)
                            out = softmax_out(exact[sel, h].astype(np.float64), V[sel], scale)
                            errs[(c, b)].append(np.linalg.norm(out - dense[h]) / np.linalg.norm(dense[h]))
    rows = []
    for c in codes:
        for b in budgets:
            e = np.array(errs[(c, b)])
            rows.append({"code": c, "budget": b, "bits_per_token": float(np.mean(bits[(c, b)])),
                         "rel_error": float(e.mean()), "rel_error_stderr": float(e.std(ddof=1) / math.sqrt(e.size))})
    res = {"source": a.capture, "tokens": tokens, "layers": len(layers), "positions": a.positions, "k": a.k,
           "rows": rows}
    if a.json:
        print(json.dumps(res))
        return
    print("%s: n = %d, %d layers, last %d positions, k = %d" % (a.capture, tokens, len(layers), a.positions, a.k))
    print("%-9s %6s %10s %10s %9s" % ("code", "budget", "bits", "rel err", "stderr"))
    for r in rows:
        print("%-9s %6d %10.2f %10.5f %9.5f" % (r["code"], r["budget"], r["bits_per_token"], r["rel_error"],
                                               r["rel_error_stderr"]))


if __name__ == "__main__":
    main()
