#!/usr/bin/env python3
"""Where a capture's locality and sinks come from: the channel means under RoPE.

  bench/positional_means.py CAPTURE --rope neox|adjacent --base B [--json]

Keys and queries are rotated back by the capture's RoPE (style and base as
`fathom synth-fit` detects them), so each is its pre-RoPE projection; pair i
is read as the complex number x_i + i x_{i+d/2} (NeoX order). Per KV head,
mu_k = the mean key over tokens 4..n-1; per query head, mu_q = its mean
query over the queried positions. The mean query meets the mean key at
distance D = p - t with the logit

    f(D) = sum_i Re(A_i e^{i D theta_i}),   A_i = mu_q_i conj(mu_k_i) / sqrt(d)

(the positional profile a fitted preset carries; docs/synthetic.md). For 8
queried positions of every query head (the last, then every P/8-th back) the
dense attention (scale 1/sqrt(d)) is computed on:
  real                  the capture's keys and queries
  q . mean key          the logit q . R_t mu_k alone (every key replaced by the
                        mean key): the positional part
  sink keys = 0         tokens 0-3's keys set to zero
  real - q . mean key   the capture's logits without the positional part
and for each, the mean top-64, first-4 and last-32 masses. Also: f(D) - mean
f(512..2047) over heads (the locality the means give), and for tokens 0-3 the
mean query's logit gap over far keys, with their real keys and with the mean
key in their place, |k - mu_k| in units of the key's total std, cos(k, mu_k)
and |k| / rms |k|. The mean query's noise: the std over keys 4..n-1 of
mu_q . (k - mu_k) / sqrt(d), the logit spread the positional part brings
with it, against sum_i |A_i| (the size of the profile), and the pairs that
hold half of sum_i |A_i| in one head (how few pairs carry the profile).
numpy only; the capture is read as bench/quant_study.py
reads it.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quant_study import read_capture  # noqa: E402

DISTANCES = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)


def unrope(x, pos, base, style):
    """x [rows, d] at positions pos back to pre-RoPE, NeoX order."""
    d = x.shape[-1]
    half = d // 2
    ang = np.outer(pos, base ** (-2 * np.arange(half) / d))
    c, s = np.cos(ang), np.sin(ang)
    a, b = (x[..., :half], x[..., half:]) if style == "neox" else (x[..., 0::2], x[..., 1::2])
    return np.concatenate([a * c + b * s, b * c - a * s], -1)


def rope(x, pos, base):
    """NeoX RoPE of pre-RoPE rows x at positions pos."""
    d = x.shape[-1]
    half = d // 2
    ang = np.outer(pos, base ** (-2 * np.arange(half) / d))
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, a * s + b * c], -1)


def masses(logits):
    p = np.exp(logits - logits.max())
    p /= p.sum()
    return [float(np.sort(p)[::-1][:64].sum()), float(p[:4].sum()), float(p[-32:].sum())]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--rope", choices=["neox", "adjacent"], required=True)
    ap.add_argument("--base", type=float, required=True)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    meta, layers = read_capture(a.capture)
    fq = int(meta["first_query"])
    res, prof, sink, noise = {}, [], [], []
    for Q, K, _ in layers:
        hkv, n, d = K.shape
        hq, P, _ = Q.shape
        G, half = hq // hkv, d // 2
        theta = a.base ** (-2 * np.arange(half) / d)
        kpos = np.arange(n)
        for g in range(hkv):
            kp = unrope(K[g], kpos, a.base, a.rope)
            mu, total_sd = kp[4:].mean(0), np.sqrt(((kp[4:] - kp[4:].mean(0)) ** 2).sum(1).mean())
            kr = rope(kp, kpos, a.base)
            for h in range(G):
                qp = unrope(Q[g * G + h], np.arange(fq, fq + P), a.base, a.rope)
                qmu = qp.mean(0)
                A = (qmu[:half] + 1j * qmu[half:]) * np.conj(mu[:half] + 1j * mu[half:]) / np.sqrt(d)
                prof.append((A[None, :] * np.exp(1j * np.outer(np.arange(2048), theta))).real.sum(1))
                absA = np.sort(np.abs(A))[::-1]
                noise.append([float(((kp[4:] - mu) @ qmu).std() / np.sqrt(d)), float(absA.sum()),
                              float(np.searchsorted(np.cumsum(absA), 0.5 * absA.sum()) + 1)])
                last = fq + P - 1
                qr = rope(qmu[None], np.array([last]), a.base)[0]
                far = kr[4:last - 32] @ qr / np.sqrt(d)
                gap_real = kr[:4] @ qr / np.sqrt(d) - far.mean()
                gap_mean = rope(np.tile(mu, (4, 1)), np.arange(4), a.base) @ qr / np.sqrt(d) - far.mean()
                sink.append(np.concatenate([
                    gap_real, gap_mean, np.linalg.norm(kp[:4] - mu, axis=1) / total_sd,
                    kp[:4] @ mu / np.linalg.norm(kp[:4], axis=1) / np.linalg.norm(mu),
                    np.linalg.norm(kp[:4], axis=1) / np.sqrt((kp[4:] ** 2).sum(1).mean())]))
                for i in range(P - 1, -1, -max(1, P // 8)):
                    pos = fq + i
                    q1 = rope(qp[i:i + 1], np.array([pos]), a.base)[0]
                    lg = kr[:pos + 1] @ q1 / np.sqrt(d)
                    mm = rope(np.tile(mu, (pos + 1, 1)), np.arange(pos + 1), a.base) @ q1 / np.sqrt(d)
                    lz = lg.copy()
                    lz[:4] = 0.0
                    for name, x in (("real", lg), ("q . mean key", mm), ("sink keys = 0", lz),
                                    ("real - q . mean key", lg - mm)):
                        res.setdefault(name, []).append(masses(x))
    prof = np.array(prof)
    rel = prof - prof[:, 512:].mean(1, keepdims=True)
    s = np.array(sink).mean(0)
    out = {
        "capture": a.capture, "tokens": int(layers[0][1].shape[1]), "rope": a.rope, "base": a.base,
        "attention": {k: dict(zip(("top64", "first4", "last32"), np.mean(v, 0).tolist())) for k, v in res.items()},
        "profile": {str(D): [float(rel[:, D].mean()), float(rel[:, D].std())] for D in DISTANCES},
        "profile_far_sd": float(prof[:, 512:].std(1).mean()),
        "mean_query_noise": dict(zip(("logit_sd", "sum_abs_A", "pairs_half_A"), np.mean(noise, 0).tolist())),
        "sink": {"gap_real": s[0:4].tolist(), "gap_mean_key": s[4:8].tolist(), "dist_from_mean": s[8:12].tolist(),
                 "cos_mean": s[12:16].tolist(), "norm_ratio": s[16:20].tolist()},
    }
    if a.json:
        print(json.dumps(out))
        return
    print("%s (n = %d)" % (a.capture, out["tokens"]))
    print("%-22s %7s %7s %7s" % ("attention", "top-64", "first-4", "last-32"))
    for k, v in out["attention"].items():
        print("%-22s %7.3f %7.3f %7.3f" % (k, v["top64"], v["first4"], v["last32"]))
    print("f(D) - mean f(512..2047), mean (sd) over heads:")
    for D in DISTANCES:
        print("  D = %4d  %6.2f (%.2f)" % (D, *out["profile"][str(D)]))
    print("  sd of f over D in 512..2047: %.2f" % out["profile_far_sd"])
    nz = out["mean_query_noise"]
    print("mean query against key deviations: logit sd %.2f, sum |A_i| %.1f, pairs holding half of it %.1f"
          % (nz["logit_sd"], nz["sum_abs_A"], nz["pairs_half_A"]))
    for k, v in out["sink"].items():
        print("tokens 0-3 %-15s %s" % (k, " ".join("%6.2f" % x for x in v)))


if __name__ == "__main__":
    main()
