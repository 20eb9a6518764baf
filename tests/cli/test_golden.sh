#!/usr/bin/env bash
# Byte-identical output of `fathom eval --json`, `fathom plan` and
# `fathom generate --ids` against golden files in tests/data/golden/ (written
# by the library before the per-head index and the thread pool were unified;
# a change that moves any of these numbers is a behaviour change and must
# regenerate them on purpose). eval and plan need no model; generate needs the
# SmolLM2-135M GGUF and the test exits 77 (skip) after the model-free checks
# when it is absent.
#   usage: test_golden.sh BUILD_DIR
#   FATHOM_GOLDEN_WRITE=1 test_golden.sh BUILD_DIR   rewrite the golden files
set -uo pipefail
fathom=$(cd "${1:?usage: test_golden.sh BUILD_DIR}" && pwd)/fathom
[ -x "$fathom" ] || { echo "no $fathom"; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
golden=$here/../data/golden
corpus=$here/../data/tokenizer_corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
write=${FATHOM_GOLDEN_WRITE:-0}
fail=0

# check NAME -- ARGS...: runs fathom ARGS; its exit status must be 0 and its
# stdout must equal $golden/NAME byte for byte.
check() {
  local name=$1
  shift 2
  if ! "$fathom" "$@" >"$tmp/$name" 2>"$tmp/err"; then
    echo "FAIL: $name: fathom $* exited $?:"; cat "$tmp/err"; fail=1; return
  fi
  if [ "$write" = 1 ]; then
    mkdir -p "$golden" && cp "$tmp/$name" "$golden/$name"
  elif ! cmp -s "$tmp/$name" "$golden/$name"; then
    echo "FAIL: $name differs from tests/data/golden/$name (fathom $*):"
    diff "$golden/$name" "$tmp/$name" | head -20
    fail=1
  fi
}

check eval_synthetic.json -- eval --synthetic smollm2-135m --context 4096 --positions 16 \
  --methods fathom:48,fathom-klt:48,sparq:16,ds:32,loki:32,thumb,landmark,full4,oracle \
  --json --quiet --threads 2
check eval_calib_greedy.json -- eval --synthetic smollm2-135m --context 2048 --positions 8 \
  --calib synthetic --layer-budget greedy --keys planes --k 48 \
  --methods fathom:48,fathom-klt:48,ds:32,loki:32,sparq:16 --sweep-budgets 32,64 \
  --json --quiet --threads 2
check plan.txt -- plan --var 1.222,0.755,0.127,0.001 --query 3,1,2,0.1 --query 1,2,-1,0.2 --budget 8

# shellcheck source=../support/model_path.sh
if ! (source "$here/../support/model_path.sh") >/dev/null 2>&1; then
  [ $fail -eq 0 ] || exit 1
  echo "test_golden: model-free outputs identical; SKIP generate: model absent"
  exit 77
fi
source "$here/../support/model_path.sh"

# The prose prompt is 171 tokens: k 48 keeps sink 4 + local 32 + the method's
# 12 best of the rest, so every method's selection matters.
for m in dense oracle fathom:48 sparq:16 landmark; do
  check "generate_${m/:/_}.txt" -- generate --model "$MODEL" --prompt-file "$corpus/prose.txt" \
    --tokens 6 --k 48 --attn "$m" --ids --quiet --threads 2
done
# Methods that need calibration, from a capture of other text. The captures
# are named relative to $tmp: eval prints its source's name.
cd "$tmp" || exit 1
if "$fathom" capture --model "$MODEL" --text-file "$corpus/code.py" --out calib.safetensors \
     --positions 8 --quiet --threads 2 2>"$tmp/err"; then
  for m in fathom-klt:48 ds:32; do
    check "generate_calib_${m/:/_}.txt" -- generate --model "$MODEL" \
      --prompt-file "$corpus/prose.txt" --calib calib.safetensors \
      --tokens 6 --k 48 --attn "$m" --ids --quiet --threads 2
  done
  "$fathom" capture --model "$MODEL" --text-file "$corpus/prose.txt" --out kv.safetensors \
    --positions 8 --quiet --threads 2 2>"$tmp/err" || { echo "FAIL: capture"; cat "$tmp/err"; fail=1; }
  check eval_capture.json -- eval --kv kv.safetensors --calib calib.safetensors \
    --k 48 --methods fathom:32,fathom-klt:32,sparq:16,ds:16,loki:16,thumb,landmark,full4,oracle \
    --json --quiet --threads 2
else
  echo "FAIL: capture:"; cat "$tmp/err"; fail=1
fi

[ $fail -eq 0 ] && echo "test_golden: all outputs identical"
exit $fail
