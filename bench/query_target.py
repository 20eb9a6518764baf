#!/usr/bin/env python3
"""How far a capture's queries point at the keys they attend: the target share.

  bench/query_target.py CAPTURE --rope neox|adjacent --base B [--positions N] [--gauss]

Per query head (keys and queries rotated back by the capture's RoPE, as
bench/positional_means.py reads them): dq = the query's deviation from the
head's mean query over the queried positions, dk = each key's deviation from
the head's mean key. For each of the last N queried positions p, over the keys
between the first 4 and the last 32, t* = the key of the largest full logit
(the top-attended one) and t' = the key of the largest deviation logit
dq . dk (both after RoPE); prints the mean cosine of dq with dk[t*] (`top`,
what `fathom synth-fit` reports as target_cos), with dk[t'] (`dev`), the
mean over the 8 largest full logits (`top8`), and the z-score of t*'s
deviation logit among those keys' (`z`; `z8` over the 8 largest), per layer
and overall. --gauss draws the queries per channel from the head's mean and
std first (bench/query_hybrid.py --mode gauss): what moment-matched queries
give; synth-fit's target_lift is z less that z (docs/synthetic.md, "Queries
that point at their targets").
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from positional_means import rope, unrope  # noqa: E402
from quant_study import read_capture  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--rope", choices=["neox", "adjacent"], required=True)
    ap.add_argument("--base", type=float, required=True)
    ap.add_argument("--positions", type=int, default=16)
    ap.add_argument("--gauss", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    meta, layers = read_capture(a.capture)
    fq = int(meta["first_query"])
    rng = np.random.default_rng(a.seed)
    allv = {"top": [], "dev": [], "top8": [], "z": [], "z8": []}
    for li, (q, k, v) in enumerate(layers):
        H, P, d = q.shape
        KV, n, _ = k.shape
        G = H // KV
        res = {"top": [], "dev": [], "top8": [], "z": [], "z8": []}
        for g in range(KV):
            tpos = np.arange(n)
            kp = unrope(k[g].astype(np.float64), tpos, a.base, a.rope)
            dk = kp - kp.mean(0)
            dkr = rope(dk, tpos, a.base)
            kr = rope(kp, tpos, a.base)
            dkn = np.linalg.norm(dkr, axis=1) + 1e-30
            for hh in range(G):
                h = g * G + hh
                pos = np.arange(fq, fq + P)
                qp = unrope(q[h].astype(np.float64), pos, a.base, a.rope)
                mu, sd = qp.mean(0), qp.std(0)
                if a.gauss:
                    qp = mu + sd * rng.standard_normal(qp.shape)
                dq = qp - mu
                step = max(1, P // a.positions)
                for i in range(P - 1, -1, -step)[: a.positions]:
                    p = fq + i
                    qr = rope(qp[i : i + 1], [p], a.base)[0]
                    dqr = rope(dq[i : i + 1], [p], a.base)[0]
                    lo, hi = 4, p + 1 - 32
                    full = kr[lo:hi] @ qr
                    devl = dkr[lo:hi] @ dqr
                    cos = devl / (dkn[lo:hi] * np.linalg.norm(dqr))
                    res["top"].append(cos[np.argmax(full)])
                    res["dev"].append(cos[np.argmax(devl)])
                    res["top8"].append(cos[np.argsort(full)[-8:]].mean())
                    zs = (devl - devl.mean()) / devl.std()
                    res["z"].append(zs[np.argmax(full)])
                    res["z8"].append(zs[np.argsort(full)[-8:]].mean())
        print("layer %d: " % li + "  ".join("%s %.4f" % (key, np.mean(x)) for key, x in res.items()))
        for key in allv:
            allv[key] += res[key]
    print("all: " + "  ".join("%s %.4f" % (key, np.mean(x)) for key, x in allv.items()))


if __name__ == "__main__":
    main()
