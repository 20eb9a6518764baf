#!/usr/bin/env python3
"""What Loki's and the KLT's calibrated bases miss, and how many channels carry a query's logits.

  bench/key_subspace.py CAPTURE CALIB [--rank 32] [--json]

Per KV head of every third layer, the keys as stored (after RoPE) of the
second half of the window (tokens n/2 .. first_query - 32, the keys a method
chooses among) are projected on three centered PCA bases of d dimensions:

  own     the window's own keys (tokens 4..n-1)
  calib   the CALIB capture's keys (tokens 4..), as fathom eval --calib uses them
  half    the window's first half (tokens 4..n/2-1): the same text over fewer
          positions

and for each: the share of those keys' variance outside the basis's top
--rank directions (what loki:RANK drops), and the residual of the logits of
the head's queries (every 16th queried position) when keys and query are
cut to those directions: std(q.k - q_r.k_r) / std(q.k). A basis that
covers fewer positions misses the rotation of the key means over the rest of
the window, so calib and half come out alike on a real capture when the
calibration capture is as short as the half.

Also, for the same queries: the share of sum_j q_j^2 Var(k_j) (fathom's
channel importance, Var over the window's keys after RoPE) outside the 16
largest channels. numpy only; the capture is read as bench/quant_study.py
reads it.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quant_study import read_capture  # noqa: E402


def basis(k):
    mu = k.mean(0)
    w, v = np.linalg.eigh(np.cov((k - mu).T))
    return mu, v[:, ::-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("capture")
    ap.add_argument("calib")
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    meta, layers = read_capture(a.capture)
    _, calib = read_capture(a.calib)
    fq = int(meta["first_query"])
    r = a.rank
    res = {"tail_" + b: [] for b in ("own", "calib", "half")}
    res.update({"logit_residual_" + b: [] for b in ("own", "calib", "half")})
    res["importance_outside_16"] = []
    for li, ((q, k, _), (_, kc, _)) in enumerate(zip(layers, calib)):
        if li % 3:
            continue
        hkv, n, d = k.shape
        g = q.shape[0] // hkv
        for h in range(hkv):
            kk = k[h].astype(np.float64)
            sec = kk[n // 2:fq - 32]
            bases = {"own": basis(kk[4:]), "calib": basis(kc[h].astype(np.float64)[4:]),
                     "half": basis(kk[4:n // 2])}
            var = kk[4:].var(0)
            for name, (mu, v) in bases.items():
                x = (sec - mu) @ v
                x -= x.mean(0)
                res["tail_" + name].append(float((x[:, r:] ** 2).sum() / (x ** 2).sum()))
                for qh in range(h * g, (h + 1) * g):
                    for i in range(0, q.shape[1], 16):
                        qq = q[qh, i].astype(np.float64)
                        exact = sec @ qq
                        cut = ((sec - mu) @ v[:, :r]) @ (v[:, :r].T @ qq)
                        res["logit_residual_" + name].append(float((exact - cut).std() / exact.std()))
            for qh in range(h * g, (h + 1) * g):
                for i in range(0, q.shape[1], 16):
                    imp = q[qh, i].astype(np.float64) ** 2 * var
                    res["importance_outside_16"].append(float(np.sort(imp)[::-1][16:].sum() / imp.sum()))
    out = {"capture": a.capture, "calib": a.calib, "rank": r, "tokens": int(layers[0][1].shape[1]),
           "calib_tokens": int(calib[0][1].shape[1])}
    out.update({key: float(np.mean(v)) for key, v in res.items()})
    if a.json:
        print(json.dumps(out))
        return
    print("%s (n = %d), calibration %s (n = %d), rank %d" % (a.capture, out["tokens"], a.calib,
                                                            out["calib_tokens"], r))
    print("basis    variance outside   logit residual")
    for b in ("own", "calib", "half"):
        print("%-8s %16.3f %16.3f" % (b, out["tail_" + b], out["logit_residual_" + b]))
    print("importance outside the 16 largest channels: %.3f" % out["importance_outside_16"])


if __name__ == "__main__":
    main()
