#!/usr/bin/env python3
"""How much of a capture's attention the queries' mean part sets.

  bench/query_mean_part.py CAPTURE [CAPTURE ...] [--rope neox|adjacent] [--base B]

Per layer, averaged over query heads (keys and queries rotated back by
RoPE; the key of a head is its KV head's):
  kmean   |mean k|^2 / E|k|^2 over all tokens
  qmean   |mean q|^2 / E|q|^2 over the queried positions
  mq.mk   |mean q| |mean k| / sqrt(d)
  dev     std of dq . (k - mean k) / sqrt(d), dq = q - mean q (every 8th
          position against every 7th key from token 4)
  mean    std of mean q . (k - mean k) / sqrt(d) (keys from token 4)
  gap     for every 8th position from the last: of the logit gap between
          the top 512 keys (4 .. p - 32, by the query's logit) and all of
          them, the share the mean part (mean q rotated to p) carries
docs/synthetic.md ("Per-query-head query profiles") gives the numbers for
Gemma 3 and its fitted preset. numpy only.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from positional_means import rope, unrope  # noqa: E402
from quant_study import read_capture  # noqa: E402

TOP, SINKS, LOCAL = 512, 4, 32


def to_style(x, style):
    """NeoX-ordered rows in the capture's layout."""
    if style == "neox":
        return x
    half = x.shape[-1] // 2
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = x[..., :half], x[..., half:]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("captures", nargs="+")
    ap.add_argument("--rope", choices=("neox", "adjacent"), default="neox")
    ap.add_argument("--base", type=float, default=1e6)
    a = ap.parse_args()
    for path in a.captures:
        meta, layers = read_capture(path)
        fq = int(meta["first_query"])
        rows = []
        for q, k, _ in layers:
            hq, P, d = q.shape
            hkv, n, _ = k.shape
            G = hq // hkv
            r = []
            for h in range(hq):
                K = k[h // G].astype(np.float64)
                kp = unrope(K, np.arange(n), a.base, a.rope)
                mk = kp.mean(0)
                qp = unrope(q[h].astype(np.float64), np.arange(fq, fq + P), a.base, a.rope)
                mq = qp.mean(0)
                kd, dq = kp[SINKS:] - mk, qp - mq
                dev = (kd[::7] @ dq[::8].T).std() / np.sqrt(d)
                mean = (kd @ mq).std() / np.sqrt(d)
                gaps = []
                for i in range(P - 1, -1, -8):
                    p = fq + i
                    if p + 1 - LOCAL - SINKS < 2 * TOP:
                        continue
                    mid = K[SINKS:p + 1 - LOCAL]
                    top = np.argsort(-(mid @ q[h][i]))[:TOP]
                    dk = mid[top].mean(0) - mid.mean(0)
                    qm = to_style(rope(mq[None], np.array([p]), a.base)[0], a.rope)
                    gaps.append((qm @ dk) / (q[h][i].astype(np.float64) @ dk))
                r.append(((mk ** 2).sum() / (kp ** 2).sum(1).mean(), (mq ** 2).sum() / (qp ** 2).sum(1).mean(),
                          np.linalg.norm(mq) * np.linalg.norm(mk) / np.sqrt(d), dev, mean,
                          np.mean(gaps) if gaps else np.nan))
            rows.append(np.mean(r, 0))
        print("%s: per layer (kmean / qmean / mq.mk / dev / mean / gap) %s" % (
            path, " | ".join("%.3f / %.3f / %.2f / %.2f / %.2f / %.3f" % tuple(x) for x in rows)))


if __name__ == "__main__":
    main()
