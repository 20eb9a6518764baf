#!/usr/bin/env python3
"""Two float32 logits dumps (fathom generate --dump-logits) agree:
max |a - b| / max |b| below a tolerance.

usage: compare_logits.py A.bin B.bin LABEL [TOL (default 1e-4)]"""
import sys

import numpy as np

if len(sys.argv) not in (4, 5):
    sys.exit(__doc__)
a, b = np.fromfile(sys.argv[1], np.float32), np.fromfile(sys.argv[2], np.float32)
tol = float(sys.argv[4]) if len(sys.argv) == 5 else 1e-4
rel = np.abs(a - b).max() / np.abs(b).max() if a.size == b.size and b.size else float("inf")
print(f"{sys.argv[3]}: max |logit - dense| / max |dense| = {rel:.2e}")
sys.exit(0 if rel < tol else 1)
