#!/usr/bin/env python3
"""How well a capture's keys fit fathom's block code: crest factors and prefix errors.

  bench/block_crest.py CAPTURE [CAPTURE ...] [--positions 32] [--k 512] [--json]

The store's code (src/core/store.c; bench/quant_study.py's `sym`) keeps per
64-token block and channel one fp16 scale a = max|k|; the first t planes
decode to the t-bit mid-rise value of [-a, a]. How much a t-bit prefix
loses depends on where the block's keys sit against its max. Per layer of
each capture (keys as stored, after RoPE), with channel j's importance
g_j = mean over the last P queried positions of sum_h q_hj^2 Var k_j (Var
over the window, the planner's weight):

  crest     mean over blocks of max|k| / rms(k) in the block (rms about 0,
            as the code is symmetric about 0): 1 for a square wave, sqrt(2)
            for a sine through whole periods, ~2.4 for 64 Gaussian samples
            around 0; weighted by g_j (and unweighted, `crest_u`)
  err_t     sum_j g_j E(k_j - k^_tj)^2 / sum_j g_j Var k_j, t = 1..4: the
            score noise a uniform t-bit read adds, against the score spread
  noise48   over the last P positions and query heads, Var(approx - exact)
            / Var(exact) of the scores of the window's keys with fathom's
            water-filled depths at 48 bits (bench/quant_study.py's plan)
  fathom48  mean relative L2 error of the attention output with those scores
            selecting sink 4 + local 32 + top-k (quant_study's `sym` at 48)
  oracle    the same with the exact scores selecting

numpy only; the capture is read as bench/quant_study.py reads it.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quant_study import BLOCK, blocks, read_capture, select, softmax_out, sym_levels, water_fill  # noqa: E402


def layer_stats(q, k, v, first, P, kk):
    hq, npos, d = q.shape
    hkv, n, _ = k.shape
    G = hq // hkv
    P = min(P, npos)
    scale = 1.0 / math.sqrt(d)
    acc = {"crest": [], "crest_u": [], "err": [], "noise48": [], "fathom48": [], "oracle": []}
    for g in range(hkv):
        K, V = k[g], v[g]
        var = K.astype(np.float64).var(axis=0)
        Q = q[g * G:(g + 1) * G, npos - P:, :].astype(np.float64)
        imp = (Q ** 2).sum(axis=0).mean(axis=0) * var  # [d]
        w = imp / imp.sum()
        kb = blocks(K)
        full = ~np.isnan(kb).any(axis=(1, 2))  # whole blocks only
        kb = kb[full]
        mx = np.abs(kb).max(axis=1)
        rms = np.sqrt((kb.astype(np.float64) ** 2).mean(axis=1))
        with np.errstate(divide="ignore", invalid="ignore"):
            cr = np.where(rms > 0, mx / rms, 1.0).mean(axis=0)  # [d]
        acc["crest"].append(float((w * cr).sum()))
        acc["crest_u"].append(float(cr.mean()))
        lv = sym_levels(K)
        acc["err"].append([float((w * ((K - lv[t]).astype(np.float64) ** 2).mean(axis=0) / np.maximum(var, 1e-30)).sum())
                           for t in range(4)])
        levels = [np.zeros_like(K)] + lv
        for p in range(npos - P, npos):
            n_vis = first + p + 1
            Qp = q[g * G:(g + 1) * G, p, :]
            exact = K[:n_vis] @ Qp.T
            depth = water_fill((Qp.astype(np.float64) ** 2).sum(axis=0) * var, 48)
            ka = np.empty((n_vis, d), np.float32)
            for t in range(5):
                cols = depth == t
                if cols.any():
                    ka[:, cols] = levels[t][:n_vis][:, cols]
            approx = ka @ Qp.T
            for h in range(G):
                e = exact[:, h].astype(np.float64)
                acc["noise48"].append(float((approx[:, h] - e).var() / e.var()))
                dense = softmax_out(e, V[:n_vis], scale)
                for name, sc in (("fathom48", approx[:, h]), ("oracle", e)):
                    sel = select(sc, n_vis, kk)
                    out = softmax_out(e[sel], V[sel], scale)
                    acc[name].append(float(np.linalg.norm(out - dense) / np.linalg.norm(dense)))
    res = {key: float(np.mean(val)) for key, val in acc.items() if key != "err"}
    res["err"] = [float(x) for x in np.mean(np.array(acc["err"]), axis=0)]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("captures", nargs="+")
    ap.add_argument("--positions", type=int, default=32, help="the last P queried positions")
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = []
    for path in a.captures:
        meta, layers = read_capture(path)
        first = int(meta["first_query"])
        rows = [layer_stats(q, k, v, first, a.positions, a.k) for q, k, v in layers]
        out.append({"source": path, "layers": rows})
        if not a.json:
            print("%s (last %d positions, k = %d)" % (path, a.positions, a.k))
            print("%5s %6s %7s %6s %6s %6s %6s %8s %8s %7s" % ("layer", "crest", "crest_u", "err1", "err2", "err3",
                                                               "err4", "noise48", "fathom48", "oracle"))
            for i, r in enumerate(rows):
                print("%5d %6.3f %7.3f %6.3f %6.3f %6.4f %6.4f %8.4f %8.4f %7.4f" % (
                    i, r["crest"], r["crest_u"], r["err"][0], r["err"][1], r["err"][2], r["err"][3],
                    r["noise48"], r["fathom48"], r["oracle"]))
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
