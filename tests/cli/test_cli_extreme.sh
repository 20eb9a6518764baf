#!/usr/bin/env bash
# fathom eval on extreme but valid input: a capture whose keys hold 3e38 (a
# finite float32) fails with exit 1 and a message naming the layer, never
# prints a NaN error; --k 4294967295 runs with scratch sized by the window
# (within 4 GiB of address space where no sanitizer needs more) and gives
# the errors of k = n (0). $1 = build directory. python3 writes the capture
# (stdlib only); without it: skip.
set -uo pipefail
fathom=$(cd "${1:?usage: test_cli_extreme.sh BUILD_DIR}" && pwd)/fathom
command -v python3 >/dev/null 2>&1 || { echo "python3 missing: skip"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

"$fathom" synth -q --preset smollm2-135m --context 128 --positions 4 --dtype f32 -o "$tmp/c.safetensors" ||
  bad "synth"
# Layer 1, KV head 2, token 50: every channel 3e38.
python3 - "$tmp/c.safetensors" <<'PY' || bad "patching the capture"
import json, struct, sys
path = sys.argv[1]
raw = bytearray(open(path, "rb").read())
(n,) = struct.unpack("<Q", raw[:8])
e = json.loads(raw[8:8 + n])["l1.k"]
assert e["dtype"] == "F32", e
heads, tokens, dim = e["shape"]
at = 8 + n + e["data_offsets"][0] + ((2 * tokens) + 50) * dim * 4
raw[at:at + dim * 4] = struct.pack("<%df" % dim, *([3e38] * dim))
open(path, "wb").write(raw)
PY
"$fathom" eval --kv "$tmp/c.safetensors" --methods sparq:16,oracle --k 64 --json --quiet --threads 2 \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] || bad "eval of 3e38 keys exited $rc, want 1"
grep -q "layer 1, KV head 2" "$tmp/err" || bad "no layer/head in: $(cat "$tmp/err")"
! grep -qi "nan" "$tmp/out" || bad "NaN printed: $(cat "$tmp/out")"

limit=""
# (the binary itself, not `ldd | grep -q`: under pipefail grep's early exit
# can kill ldd with SIGPIPE and fail the pipeline; static runtimes show no lib)
if ! grep -qa '__asan_init\|__tsan_init' "$fathom"; then limit=4194304; fi
out=$( [ -n "$limit" ] && ulimit -v "$limit"
       "$fathom" eval --synthetic smollm2-135m --context 256 --positions 2 --k 4294967295 \
         --methods fathom:48,sparq:16,oracle --json --quiet --threads 2 ) || bad "eval --k 4294967295 exited $?"
python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
assert doc["k"] == 4294967295, doc
for m in doc["methods"]:
    assert m["rel_error"] == 0 and m["selection_ratio"] == 1, m
' "$out" || bad "eval --k 4294967295: $out"

[ $fail -eq 0 ] && echo "test_cli_extreme: ok"
exit $fail
