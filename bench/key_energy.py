#!/usr/bin/env python3
"""How a capture's keys spread their energy: over tokens, and off a query's direction.

  bench/key_energy.py CAPTURE --rope neox|adjacent --base B [--json]

Per layer and KV head, two statistics of the keys' deviation from the mean
key, k - mu:

  spread  over tokens 4..n-1 rotated back by the capture's RoPE (as
          bench/positional_means.py reads them), the coefficient of
          variation of e_t = |k_t - mu|^2, against sqrt(2 sum l^2) / sum l,
          the coefficient of variation of |x|^2 for Gaussian x with the
          keys' covariance (l its eigenvalues): keys whose tokens differ in
          how loud their whole content is spread their energy more than
          their Gaussian does, keys whose deviation has a fixed energy less
  off     for every query head and every 16th queried position, the keys
          4 .. first_query - 32 as stored (after RoPE) ranked by their
          deviation along the query, a = (k - mu) . q / |q|: the mean
          energy off the query's direction, |k - mu|^2 - a^2, of the top
          0.3% against that of all of them (mean over queries). Below 1:
          the keys a query is after are quieter elsewhere than the rest;
          above 1, louder (a salience shared by every content direction)

numpy only; the capture is read as bench/quant_study.py reads it.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from positional_means import unrope  # noqa: E402
from quant_study import read_capture  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--rope", choices=["neox", "adjacent"], required=True)
    ap.add_argument("--base", type=float, required=True)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    meta, layers = read_capture(a.capture)
    fq = int(meta["first_query"])
    rows = []
    for li, (q, k, _) in enumerate(layers):
        group = q.shape[0] // k.shape[0]
        for g in range(k.shape[0]):
            n = k.shape[1]
            kp = unrope(k[g, 4:].astype(np.float64), np.arange(4, n), a.base, a.rope)
            c = kp - kp.mean(0)
            e = (c ** 2).sum(1)
            lam = np.clip(np.linalg.eigvalsh(np.cov(c.T)), 0, None)
            ks = k[g, 4:fq - 32].astype(np.float64)
            cs = ks - ks.mean(0)
            es = (cs ** 2).sum(1)
            top = max(1, int(0.003 * len(cs)))
            off = []
            for h in range(g * group, (g + 1) * group):
                for i in range(q.shape[1] - 1, -1, -16):
                    u = q[h, i].astype(np.float64)
                    along = cs @ (u / np.linalg.norm(u))
                    o = es - along ** 2
                    off.append(o[np.argsort(-along)[:top]].mean() / o.mean())
            rows.append({"layer": li, "kv_head": g, "energy_cv": float(e.std() / e.mean()),
                         "gaussian_cv": float(np.sqrt(2 * (lam ** 2).sum()) / lam.sum()),
                         "top_off_direction": float(np.mean(off))})
    if a.json:
        print(json.dumps({"capture": a.capture, "heads": rows}))
        return
    print("%s: spread = coefficient of variation of |k - mean key|^2 over tokens; off = energy off the query's"
          " direction, top 0.3%% along it / all" % a.capture)
    print("%5s %7s %9s %9s %7s %7s" % ("layer", "kv head", "spread", "Gaussian", "ratio", "off"))
    for r in rows:
        print("%5d %7d %9.3f %9.3f %7.2f %7.2f" % (r["layer"], r["kv_head"], r["energy_cv"], r["gaussian_cv"],
                                                 r["energy_cv"] / r["gaussian_cv"], r["top_off_direction"]))


if __name__ == "__main__":
    main()
