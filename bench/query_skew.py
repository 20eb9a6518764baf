#!/usr/bin/env python3
"""Which way a capture's queries point: the skewness of their deviation logits.

  bench/query_skew.py CAPTURE [CAPTURE ...] --rope neox|adjacent --base B

For each query head and each of 8 queried positions (the last, then every
P/8-th back, as src/io/synth_fit.c samples them), the logits of the query's
deviation from the head's mean query (both rotated back by RoPE, the
deviation rotated to the query's position again) against each key's
deviation from the head's mean key (rotated to the key's position), over
the keys between the first 4 and the last 32 of the query's window; prints
their skewness per layer and the mean over layers, heads and positions, the
number `fathom synth-fit` reports as dev_skew (docs/synthetic.md, "Query
direction"). Queries drawn from their per-channel moments meet the keys in
a random direction and give about 0 on any keys; mirrored about their mean
(bench/query_hybrid.py --mode flip) they give the negative.

With --dscut C, also the share of the deviation logits' std carried by the
C channels with the largest mean |q| * mean |k| (Double Sparsity's
calibrated channels, measured on the capture itself). With --contrib, also
the exact split of the deviation logits' variance over the channels (channel
j's part dq_j * Cov(k_j, L), L the logits; the parts sum to Var(L)): the
share the C DS channels hold (C = --dscut, else 32) and the share the 32
largest parts hold; and, per query head, the correlation over RoPE pairs of
Var(query) against Var(key) (Spearman; pre-RoPE, pair energies), and the
effective number of pairs (1 / sum of squared shares) of their product
Var(query) * Var(key) (docs/synthetic.md, "Query direction"). numpy only.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from positional_means import rope, unrope  # noqa: E402
from quant_study import read_capture  # noqa: E402

SINKS, LOCAL, SAMPLES = 4, 32, 8


def rope_style(x, pos, base, style):
    """Rotate pre-RoPE rows x (NeoX channel order) to positions pos in the capture's layout."""
    y = rope(x, pos, base)
    if style == "neox":
        return y
    half = x.shape[-1] // 2
    out = np.empty_like(y)
    out[..., 0::2], out[..., 1::2] = y[..., :half], y[..., half:]
    return out


def skewness(x):
    e = x - x.mean()
    m2 = (e * e).mean()
    return (e ** 3).mean() / m2 ** 1.5 if m2 > 0 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("captures", nargs="+")
    ap.add_argument("--rope", choices=["neox", "adjacent"], required=True)
    ap.add_argument("--base", type=float, required=True)
    ap.add_argument("--dscut", type=int, default=0)
    ap.add_argument("--contrib", action="store_true")
    a = ap.parse_args()
    for path in a.captures:
        meta, layers = read_capture(path)
        fq = int(meta["first_query"])
        per_layer, share_layer, contrib_layer = [], [], []
        for q, k, _ in layers:
            hq, P, d = q.shape
            hkv, n, _ = k.shape
            G = hq // hkv
            step = max(P // SAMPLES, 1)
            sk, sh, co = [], [], []
            for g in range(hkv):
                K = k[g].astype(np.float64)
                mk = unrope(K, np.arange(n), a.base, a.rope).mean(0)
                Kc = K - rope_style(np.tile(mk, (n, 1)), np.arange(n), a.base, a.rope)
                for h in range(g * G, (g + 1) * G):
                    pos = np.arange(fq, fq + P)
                    qp = unrope(q[h].astype(np.float64), pos, a.base, a.rope)
                    mq = qp.mean(0)
                    ds = None
                    if a.contrib:
                        half = d // 2
                        vq = qp.var(0)
                        vk = unrope(K, np.arange(n), a.base, a.rope).var(0)
                        pq, pk = vq[:half] + vq[half:], vk[:half] + vk[half:]
                        pc = pq * pk / np.sum(pq * pk)
                        rank = lambda x: np.argsort(np.argsort(x))
                        pair_stats = (np.corrcoef(rank(pq), rank(pk))[0, 1], 1 / np.sum(pc * pc))
                    if a.dscut or a.contrib:
                        ds = np.argsort(-(np.abs(q[h]).mean(0) * np.abs(K).mean(0)))[: a.dscut or 32]
                    for s in range(SAMPLES):
                        i = P - 1 - s * step
                        if i < 0:
                            break
                        p = fq + i
                        if p + 1 < SINKS + LOCAL + 3:
                            continue
                        dq = rope_style((qp[i] - mq)[None], np.array([p]), a.base, a.rope)[0]
                        mid = Kc[SINKS : p + 1 - LOCAL]
                        sk.append(skewness(mid @ dq))
                        if a.contrib:
                            lg = mid @ dq
                            part = dq * ((mid - mid.mean(0)) * (lg - lg.mean())[:, None]).mean(0) / lg.var()
                            co.append((part[ds].sum(), np.sort(part)[::-1][:32].sum()) + pair_stats)
                        if a.dscut:
                            rest = np.setdiff1d(np.arange(d), ds)
                            x, y = mid[:, ds] @ dq[ds], mid[:, rest] @ dq[rest]
                            sh.append(x.std() / np.hypot(x.std(), y.std()))
            per_layer.append(sk)
            share_layer.append(sh)
            contrib_layer.append(co)
        every = [x for sk in per_layer for x in sk]
        line = "%s: dev_skew %.4f; per layer %s" % (
            path, np.mean(every), " / ".join("%.3f" % np.mean(sk) for sk in per_layer))
        if a.dscut:
            line += "; deviation-logit std share of the %d DS channels per layer %s" % (
                a.dscut, " / ".join("%.3f" % np.mean(sh) for sh in share_layer))
        if a.contrib:
            line += "; variance parts per layer (DS channels / 32 largest / rank corr Var q, Var k over pairs / pairs of Var q * Var k) %s" % (
                " / ".join("(%s)" % ", ".join("%.3f" % x for x in np.mean(co, 0)) for co in contrib_layer))
        print(line)


if __name__ == "__main__":
    main()
