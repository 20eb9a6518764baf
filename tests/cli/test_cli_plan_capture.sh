#!/usr/bin/env bash
# fathom plan --capture: how much of each position's plan the previous
# position had planned, checked against an independent numpy computation
# (causal variance, importance, exact water-filling by breakpoints) on a synthetic
# capture; plus the properties that must hold (budget 4*dim plans every
# channel fully: hit 1, waste 0) and the usage errors.
# $1 = build directory. Exit 77 (skip) without python3 + numpy.
set -uo pipefail
fathom=$(cd "${1:?usage: test_cli_plan_capture.sh BUILD_DIR}" && pwd)/fathom
command -v python3 >/dev/null 2>&1 || { echo "python3 missing: skip"; exit 77; }
python3 -c 'import numpy' 2>/dev/null || { echo "numpy missing: skip"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/../support/cli_expect.sh"

"$fathom" synth -q --preset smollm2-135m --context 1500 --positions 12 --seed 5 --dtype f32 -o "$tmp/c.safetensors" || exit 1
"$fathom" synth -q --preset smollm2-135m --context 100 --positions 1 -o "$tmp/one.safetensors" || exit 1
expect 2 "needs --budget" -- plan --capture "$tmp/c.safetensors"
expect 2 "needs --budget" -- plan --capture "$tmp/c.safetensors" --theta 0.1
expect 2 "needs --budget" -- plan --capture "$tmp/c.safetensors" --budget 24 --bisect
expect 2 "no --var/--query" -- plan --capture "$tmp/c.safetensors" --budget 24 --var 1,2
expect 2 "given twice" -- plan --capture "$tmp/c.safetensors" --capture "$tmp/c.safetensors" --budget 24
expect 1 "missing.safetensors" -- plan --capture "$tmp/missing.safetensors" --budget 24
expect 1 "comparing plans needs 2" -- plan --capture "$tmp/one.safetensors" --budget 24
expect 0 "^  all " -- plan --capture "$tmp/c.safetensors" --budget 24
[ $fail -eq 0 ] || exit 1

for b in 24 48 256; do
    "$fathom" plan --capture "$tmp/c.safetensors" --budget $b --json > "$tmp/b$b.json" || exit 1
done

python3 - "$tmp" <<'PY'
import json, struct, sys
import numpy as np

tmp = sys.argv[1]
raw = open(f"{tmp}/c.safetensors", "rb").read()
(hn,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + hn])
data = raw[8 + hn:]
first = int(header.pop("__metadata__")["first_query"])
t = {}
for name, e in header.items():
    b, f = e["data_offsets"]
    assert e["dtype"] == "F32"
    t[name] = np.frombuffer(data[b:f], dtype="<f4").reshape(e["shape"])
L = sum(1 for k in t if k.endswith(".q"))
Hq, P, d = t["l0.q"].shape
Hkv, n, _ = t["l0.k"].shape
G = Hq // Hkv

def depths(g, budget):
    """Exact water-filling: breakpoints g/4^(m-1/2); the water line sits just
    above the largest breakpoint v with #{bp >= v} > budget (0 if none)."""
    bp = np.concatenate([np.where(g > 0, g / 2.0 ** (2 * m + 1), -1.0) for m in range(4)])
    pos = np.sort(bp[bp > 0])[::-1]
    theta = 0.0
    if len(pos) > budget:
        # #{bp >= v} > budget holds for v = pos[budget] and every smaller one
        theta = pos[budget]
    return sum((g / 2.0 ** (2 * m + 1) > theta).astype(int) for m in range(4))

def bits(tt):
    return np.where(tt > 0, tt + 0.25, 0.0)

for budget in (24, 48, 256):
    got = json.load(open(f"{tmp}/b{budget}.json"))
    assert got["budget"] == budget and got["dim"] == d and len(got["layers"]) == L
    tot = np.zeros(3)
    steps = same = 0
    for l in range(L):
        q, k = t[f"l{l}.q"], t[f"l{l}.k"]
        lay = np.zeros(3)
        lsteps = 0
        for kv in range(Hkv):
            x = k[kv].astype(np.float64)
            prev = None
            for p in range(P):
                seen = x[:first + p + 1]  # causal: the keys this position sees
                var = (np.mean(seen * seen, axis=0) - np.mean(seen, axis=0) ** 2).clip(min=0).astype(np.float32)
                qg = q[kv * G:(kv + 1) * G, p, :].astype(np.float64)
                g = (qg * qg).sum(axis=0) * var.astype(np.float64)
                now = depths(g, budget)
                if prev is not None:
                    m = np.minimum(now, prev)
                    hit = m + np.where((now > 0) & (prev > 0), 0.25, 0.0)
                    lay += [bits(now).sum(), hit.sum(), bits(prev).sum() - hit.sum()]
                    lsteps += 1
                    same += int((now == prev).all())
                prev = now
        gl = got["layers"][l]
        assert abs(gl["plan_bits"] - lay[0] / lsteps) < 0.02, (budget, l, gl, lay / lsteps)
        assert abs(gl["hit"] - lay[1] / lay[0]) < 0.01, (budget, l, gl["hit"], lay[1] / lay[0])
        assert abs(gl["waste"] - lay[2] / lay[0]) < 0.01, (budget, l, gl["waste"], lay[2] / lay[0])
        tot += lay
        steps += lsteps
    assert got["steps"] == steps == L * Hkv * (P - 1)
    assert abs(got["hit"] - tot[1] / tot[0]) < 0.005 and abs(got["waste"] - tot[2] / tot[0]) < 0.005, got
    assert abs(got["same"] - same / steps) < 0.01
    if budget >= 4 * d:  # every channel at depth 4 in every plan
        assert got["hit"] == 1.0 and got["waste"] == 0.0 and got["same"] == 1.0, got
        assert abs(got["plan_bits"] - 4.25 * d) < 1e-9, got
    else:
        assert 0.0 < got["hit"] < 1.0 and got["waste"] > 0.0 and budget <= got["plan_bits"] <= budget + 0.25 * d
    print(f"budget {budget}: hit {got['hit']:.4f} waste {got['waste']:.4f} (numpy {tot[1] / tot[0]:.4f} {tot[2] / tot[0]:.4f})")
PY
[ $? -eq 0 ] || exit 1
echo "test_cli_plan_capture: ok"
