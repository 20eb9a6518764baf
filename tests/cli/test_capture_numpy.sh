#!/usr/bin/env bash
# Captures written by `fathom synth` read with plain numpy (and the
# safetensors package when installed) as the format document promises.
# $1 = build directory. Exit 77 (skip) without python3 + numpy.
set -euo pipefail
build=${1:?usage: test_capture_numpy.sh BUILD_DIR}
fathom="$build/fathom"
command -v python3 >/dev/null 2>&1 || { echo "python3 missing: skip"; exit 77; }
python3 -c 'import numpy' 2>/dev/null || { echo "numpy missing: skip"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect_rc() { # expect_rc CODE command...
    local want=$1; shift
    set +e; "$@" >/dev/null 2>&1; local rc=$?; set -e
    if [ "$rc" -ne "$want" ]; then echo "FAIL: '$*' exited $rc, expected $want"; exit 1; fi
}

# usage errors exit 2, failures 1, help 0
expect_rc 0 "$fathom" synth --help
expect_rc 0 "$fathom" info --help
expect_rc 2 "$fathom" synth
expect_rc 2 "$fathom" synth --preset qwen3-8b --context 10
expect_rc 2 "$fathom" synth --preset qwen3-8b --context 12x -o "$tmp/x"
expect_rc 2 "$fathom" synth --preset qwen3-8b --context 10 --positions 11 -o "$tmp/x"
expect_rc 2 "$fathom" synth --preset qwen3-8b --context 10 --dtype f64 -o "$tmp/x"
expect_rc 2 "$fathom" synth --preset qwen3-8b --context 10 --bogus 1 -o "$tmp/x"
expect_rc 2 "$fathom" synth --preset no-such-model --context 10 -o "$tmp/x"
expect_rc 2 "$fathom" info
expect_rc 2 "$fathom" info a b
expect_rc 2 "$fathom" info --bogus "$tmp/x"
expect_rc 1 "$fathom" info "$tmp/does-not-exist"
printf 'not a capture' > "$tmp/junk"
expect_rc 1 "$fathom" info "$tmp/junk"

for dt in f32 f16 bf16; do
    "$fathom" synth -q --preset smollm2-135m --context 200 --positions 8 --seed 3 --dtype "$dt" -o "$tmp/c_$dt.safetensors"
    "$fathom" info --json "$tmp/c_$dt.safetensors" > "$tmp/c_$dt.json"
    "$fathom" info "$tmp/c_$dt.safetensors" | grep -q "^layers *30$"
done

python3 - "$tmp" <<'PY'
import json, struct, sys
import numpy as np

tmp = sys.argv[1]
DT = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}

def read(path):
    """A capture with nothing but numpy: 8-byte length, JSON header, data."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    assert (8 + n) % 8 == 0, "data not 8-byte aligned"
    data = raw[8 + n:]
    meta = header.pop("__metadata__")
    tensors, end = {}, 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, f = e["data_offsets"]
        assert b == end, f"{name}: gap or overlap"
        end = f
        a = np.frombuffer(data[b:f], dtype=DT[e["dtype"]]).reshape(e["shape"])
        if e["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = a.astype(np.float32)
    assert end == len(data), "data not fully covered"
    return meta, tensors

def to_bf16(x):
    """float32 -> bfloat16 -> float32, round to nearest even, in integers."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return (u.astype(np.uint32) << 16).view(np.float32)

caps = {}
for dt in ("f32", "f16", "bf16"):
    info = json.load(open(f"{tmp}/c_{dt}.json"))
    meta, t = read(f"{tmp}/c_{dt}.safetensors")
    assert meta["model"] == info["model"] == "smollm2-135m"
    assert meta["format"] == "fathom-capture-1"
    assert int(meta["first_query"]) == info["first_query"] == 192
    assert meta == info["metadata"]
    L, Hq, Hkv, d, n, P = (info[k] for k in ("layers", "q_heads", "kv_heads", "dim", "tokens", "positions"))
    assert (L, Hq, Hkv, d, n, P) == (30, 9, 3, 64, 200, 8), (L, Hq, Hkv, d, n, P)
    assert info["dtype"] == {"q": dt.upper(), "k": dt.upper(), "v": dt.upper()}
    assert len(t) == 3 * L
    for l in range(L):
        assert t[f"l{l}.q"].shape == (Hq, P, d)
        assert t[f"l{l}.k"].shape == (Hkv, n, d)
        assert t[f"l{l}.v"].shape == (Hkv, n, d)
    caps[dt] = t

f32 = caps["f32"]
for name, x in f32.items():
    assert np.all(np.isfinite(x)), name
    # numpy's own float16 rounding and an integer bf16 rounding, both
    # independent of libfathom, must give the other files bit for bit
    assert np.array_equal(caps["f16"][name], x.astype(np.float16).astype(np.float32)), name
    assert np.array_equal(caps["bf16"][name], to_bf16(x)), name
# values look like activations: keys spread across channels, not constant
k = f32["l0.k"]
var = k.reshape(-1, k.shape[-1]).var(axis=0)
assert var.max() / var.min() > 100, var.max() / var.min()

try:
    from safetensors.numpy import load_file
except ImportError:
    print("safetensors not installed: numpy-only checks done")
else:
    for dt in ("f32", "f16"):
        st = load_file(f"{tmp}/c_{dt}.safetensors")
        assert set(st) == set(caps[dt])
        for name, x in st.items():
            assert np.array_equal(x.astype(np.float32), caps[dt][name]), name
    print("safetensors.numpy agrees")
print("numpy reads every dtype")
PY
echo "test_capture_numpy: ok"
