#!/usr/bin/env python3
"""Which key channels a query-only rule picks, and what they are worth.

  bench/channel_choice.py CAPTURE [--r 16,32,64] [--positions 32] [--budget 0.02] [--json]

SparQ reads the r channels with the largest sum_h |q_hj| over the query group
(src/core/index.c, SparQ's GQA rule); Fathom weighs channel j by
g_j = sum_h q_hj^2 Var(k_j), the part of the score's variance over keys that
channel carries when channels are uncorrelated. For each of the last P
positions of every layer and KV head in the capture, and each r, this reports:
  share_g    sum of g_j over the r channels a rule picks / sum over all channels
  var_ratio  mean Var(k_j) over SparQ's channels / mean Var(k_j) over all
  recall     the exact top-k keys (k = budget x n, beyond sink 4 and local 32)
             found by the top-k of the partial dot product over the r channels,
             with exact (unquantized) key values: the selection quality of the
             channel choice alone, apart from any quantization
for SparQ's rule and for the r largest g_j ("top-g", the same count of
channels ranked as Fathom ranks them). Var over the window's keys (as the
store's running sums give it at the end). numpy only; the capture is read as
bench/quant_study.py reads it.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quant_study import SINK, LOCAL, read_capture  # noqa: E402


def recall(keys, q, channels, kk):
    """Mean over query heads of |top-kk of q.k over channels ∩ exact top-kk| / kk."""
    exact = keys @ q.T
    part = keys[:, channels] @ q[:, channels].T
    hits = 0.0
    for h in range(q.shape[0]):
        a = np.argpartition(-exact[:, h], kk - 1)[:kk]
        b = np.argpartition(-part[:, h], kk - 1)[:kk]
        hits += np.intersect1d(a, b).size / kk
    return hits / q.shape[0]


def study(path, rs, positions, budget):
    meta, layers = read_capture(path)
    first = int(meta["first_query"])
    out = {"capture": path, "model": meta.get("model", ""), "layers": len(layers),
           "budget": budget, "positions": positions, "r": {}}
    for r in rs:
        cols = {"share_g_sparq": [], "share_g_topg": [], "var_ratio": [], "recall_sparq": [], "recall_topg": []}
        for q_all, k_all, _ in layers:
            hq, p_all, d = q_all.shape
            hkv, n, _ = k_all.shape
            if r > d:
                raise SystemExit("channel_choice: r = %d exceeds the head dimension %d" % (r, d))
            g_size = hq // hkv
            for kv in range(hkv):
                keys = k_all[kv].astype(np.float64)
                var = keys.var(axis=0)
                for p in range(max(0, p_all - positions), p_all):
                    t = first + p  # the query's absolute position: keys [0, t] are visible
                    q = q_all[kv * g_size:(kv + 1) * g_size, p].astype(np.float64)
                    g = (q ** 2).sum(axis=0) * var
                    sparq = np.argsort(-np.abs(q).sum(axis=0), kind="stable")[:r]
                    topg = np.argsort(-g, kind="stable")[:r]
                    mid = keys[SINK:t + 1 - LOCAL]
                    kk = max(1, int(budget * (t + 1)))
                    if mid.shape[0] <= kk:
                        continue
                    total = g.sum()
                    cols["share_g_sparq"].append(g[sparq].sum() / total if total > 0 else 0.0)
                    cols["share_g_topg"].append(g[topg].sum() / total if total > 0 else 0.0)
                    cols["var_ratio"].append(var[sparq].mean() / var.mean() if var.mean() > 0 else 0.0)
                    cols["recall_sparq"].append(recall(mid, q, sparq, kk))
                    cols["recall_topg"].append(recall(mid, q, topg, kk))
        if not cols["recall_sparq"]:
            raise SystemExit("channel_choice: no position has more than budget x n keys beyond sink and local")
        out["r"][str(r)] = {name: {"mean": float(np.mean(v)),
                                   "stderr": float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0}
                            for name, v in cols.items()}
        out["r"][str(r)]["count"] = len(cols["recall_sparq"])
        out["dim"] = int(d)
        out["tokens"] = int(n)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("captures", nargs="+")
    ap.add_argument("--r", default="16,32,64", help="channel counts, comma-separated")
    ap.add_argument("--positions", type=int, default=32, help="the last P queried positions")
    ap.add_argument("--budget", type=float, default=0.02, help="k = budget x n keys beyond sink and local")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rs = [int(x) for x in a.r.split(",")]
    if any(r < 1 for r in rs) or a.positions < 1 or not 0 < a.budget < 1:
        ap.error("--r must be >= 1, --positions >= 1 and 0 < --budget < 1")
    res = {"study": "channel-choice", "results": [study(c, rs, a.positions, a.budget) for c in a.captures]}
    if a.json:
        print(json.dumps(res))
        return
    for s in res["results"]:
        print("%s (%s, d = %d, n = %d)" % (s["capture"], s["model"], s["dim"], s["tokens"]))
        for r, v in s["r"].items():
            print("  r %3s: share of g sparq %.3f top-g %.3f | var ratio %.3f | recall sparq %.3f top-g %.3f" %
                  (r, v["share_g_sparq"]["mean"], v["share_g_topg"]["mean"], v["var_ratio"]["mean"],
                   v["recall_sparq"]["mean"], v["recall_topg"]["mean"]))


if __name__ == "__main__":
    main()
