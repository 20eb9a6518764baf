#!/usr/bin/env python3
"""A capture's keys and values with other queries: what of the queries ranks the methods.

  bench/query_hybrid.py CAPTURE OUT --mode gauss|flip|signflip|rot|shuffle|other [--other CAPTURE]
                        --rope neox|adjacent --base B [--seed S]

Writes OUT, a capture (F32, docs/capture-format.md) with CAPTURE's keys,
values and metadata and, per query head, queries built from the head's own
(rotated back by the capture's RoPE, as bench/positional_means.py reads
them; mu the head's mean query over the queried positions, sd its
per-channel std):

  gauss   mu + sd * N(0, 1), independent per position and channel: the
          queries' first two moments per channel, nothing more (what a
          generator that draws its query noise per channel can reproduce)
  flip    2 mu - q: every query's deviation from the head's mean reversed;
          every even moment (the covariance included) kept, but the
          deviations point away from the keys they were after
  signflip  mu + s (q - mu), s = +-1 drawn per position: the covariance
          kept, half the deviations pointing away from their keys
  rot     mu + R (q - mu) over positions, R a random orthogonal P x P matrix:
          the covariance over the P positions kept exactly, each query a
          mix of all deviations
  shuffle each channel's values permuted over positions on its own: every
          channel's distribution kept, the joint structure lost
  other   the same head's queries from --other (a capture of the same model
          and layers on other text, its positions taken in order): queries
          of the model, whose deviations point at what that text asked for

then rotated by RoPE at CAPTURE's queried positions. `fathom eval --kv OUT
--calib CALIB` then ranks the methods on the same keys with those queries
(docs/synthetic.md, "Where it does not hold"). numpy only; the captures are
read as bench/quant_study.py reads them.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from positional_means import rope, unrope  # noqa: E402
from quant_study import read_capture  # noqa: E402


def layer_ids(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return sorted({int(k[1:].split(".")[0]) for k in header if k != "__metadata__"})


def write_capture(path, meta, tensors):
    """tensors: [(name, float32 array)] in file order."""
    header = {"__metadata__": meta}
    offset = 0
    for name, x in tensors:
        header[name] = {"dtype": "F32", "shape": list(x.shape), "data_offsets": [offset, offset + x.nbytes]}
        offset += x.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, x in tensors:
            f.write(np.ascontiguousarray(x, dtype=np.float32).tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("capture")
    ap.add_argument("out")
    ap.add_argument("--mode", choices=["gauss", "flip", "signflip", "rot", "shuffle", "other"], required=True)
    ap.add_argument("--other")
    ap.add_argument("--rope", choices=["neox", "adjacent"], required=True)
    ap.add_argument("--base", type=float, required=True)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.rope != "neox":
        sys.exit("query_hybrid: only NeoX captures are written back (the RoPE the store's readers assume here)")
    if (a.mode == "other") != (a.other is not None):
        sys.exit("query_hybrid: --other goes with --mode other, and only with it")
    meta, layers = read_capture(a.capture)
    fq = int(meta["first_query"])
    if a.other:
        ometa, others = read_capture(a.other)
        ofq = int(ometa["first_query"])
        if len(others) != len(layers):
            sys.exit("query_hybrid: --other has %d layers, the capture %d" % (len(others), len(layers)))
    rng = np.random.default_rng(a.seed)
    tensors = []
    for li, (L, (q, k, v)) in enumerate(zip(layer_ids(a.capture), layers)):
        P = q.shape[1]
        pos = np.arange(fq, fq + P)
        out = np.empty(q.shape, np.float32)
        for h in range(q.shape[0]):
            qp = unrope(q[h].astype(np.float64), pos, a.base, a.rope)
            mu, sd = qp.mean(0), qp.std(0)
            if a.mode == "gauss":
                g = mu + sd * rng.standard_normal(qp.shape)
            elif a.mode == "flip":
                g = 2 * mu - qp
            elif a.mode == "signflip":
                g = mu + (qp - mu) * rng.choice([-1.0, 1.0], size=(P, 1))
            elif a.mode == "rot":
                r, _ = np.linalg.qr(rng.standard_normal((P, P)))
                g = mu + r @ (qp - mu)
            elif a.mode == "shuffle":
                g = np.stack([qp[rng.permutation(P), j] for j in range(qp.shape[1])], 1)
            else:
                oq = others[li][0]
                if oq.shape[0] != q.shape[0] or oq.shape[1] < P:
                    sys.exit("query_hybrid: --other's queries do not cover the capture's heads and positions")
                g = unrope(oq[h, :P].astype(np.float64), np.arange(ofq, ofq + P), a.base, a.rope)
            out[h] = rope(g, pos, a.base)
        tensors += [("l%d.q" % L, out), ("l%d.k" % L, k.astype(np.float32)), ("l%d.v" % L, v.astype(np.float32))]
    meta = dict(meta)
    meta["producer"] = "bench/query_hybrid.py --mode %s" % a.mode
    write_capture(a.out, meta, tensors)


if __name__ == "__main__":
    main()
