#!/usr/bin/env bash
# The C model against an independent numpy forward pass (tests/model_reference.py):
# logits and greedy tokens of fathom generate, and fathom capture's q/k/v; then
# sparse decoding that selects everything against dense decoding.
#   usage: test_model_reference.sh BUILD_DIR
# Skips (77) without the model file or without numpy + gguf.
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../support/model_path.sh"
fathom=$build/fathom
python3 -c 'import numpy, gguf' 2>/dev/null || {
  echo "SKIP: python3 with numpy and gguf is needed (scripts/install-deps)" >&2
  exit 77
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
N=32

# Token ids fixed here, so nothing depends on the tokenizer:
#  a: "The capital of France is"
#  b: the chat template around "What is 2+2?"
#  c: 70 tokens of prose (two prefill chunks of 64 + 6)
prompts=(
  "504,3575,282,4649,314"
  "1,4093,198,1780,314,216,34,27,34,47,2,198,1,520,9531,198"
  "788,216,33,41,32,37,28,14338,16211,2587,1876,5057,338,4247,6944,30,378,808,5192,260,2261,30851,977,411,29259,338,1420,2216,281,18926,20407,282,1439,28,1916,1217,23794,30,378,1796,5192,7949,697,5522,347,2364,327,9288,30,378,3464,4727,1767,24581,28,284,260,8629,6435,260,4248,8345,11475,2389,284,1439,30,8219,623,5057"
)

source "$here/../support/generate.sh" # gen PROMPT_IDS OUT N [args]

# 1. Dense greedy decoding vs the numpy reference (logits and tokens).
cases=()
for i in "${!prompts[@]}"; do
  gen "${prompts[$i]}" "$tmp/dense$i" "$N" || fail=1
  cases+=(--case "${prompts[$i]}" "$(cat "$tmp/dense$i.ids")" "$tmp/dense$i.bin")
done
# ... and fathom capture's queries, keys and values (the 70-token prompt).
"$fathom" capture --model "$MODEL" --prompt-ids "${prompts[2]}" --positions 8 --dtype f32 \
  --threads 2 --quiet --out "$tmp/cap.safetensors" || { echo "FAIL: fathom capture"; fail=1; }
python3 "$here/../support/model_reference.py" "$MODEL" "${cases[@]}" --capture "${prompts[2]}" "$tmp/cap.safetensors" \
  --rel-tol 1e-3 || fail=1
"$fathom" info "$tmp/cap.safetensors" | grep -q "positions    8 (first query at 62)" || {
  echo "FAIL: fathom info on the capture"; "$fathom" info "$tmp/cap.safetensors"; fail=1; }

# 2. Sparse decode paths with k >= context select every key: the same tokens
# as dense, and logits equal up to fathom_attend's double accumulation.
compare_logits() { # a.bin b.bin label
  python3 "$here/../support/compare_logits.py" "$@"
}
for method in oracle fathom:256; do
  gen "${prompts[0]}" "$tmp/s" "$N" --attn "$method" --k 100000 || { fail=1; continue; }
  if ! cmp -s "$tmp/s.ids" "$tmp/dense0.ids"; then
    echo "FAIL: --attn $method --k 100000 tokens differ from dense"
    echo "  dense:  $(cat "$tmp/dense0.ids")"
    echo "  $method: $(cat "$tmp/s.ids")"
    fail=1
  fi
  compare_logits "$tmp/s.bin" "$tmp/dense0.bin" "$method k=100000" || fail=1
  grep -q "100.00% of visible keys selected" "$tmp/s.err" || {
    echo "FAIL: $method k=100000 did not select every key"; cat "$tmp/s.err"; fail=1; }
done

# 3. A truly sparse method runs and selects a fraction of the keys (k = 40 of
# 71..78 positions: sink 4 + local 32 + 4 more). Other methods: test_model.c.
gen "${prompts[2]}" "$tmp/k40" 8 --attn fathom:32 --k 40 || fail=1
pct=$(sed -n 's/.* \([0-9.]*\)% of visible keys selected/\1/p' "$tmp/k40.err")
python3 -c "import sys; sys.exit(0 if 50 < float('${pct:-0}') < 57 else 1)" || {
  echo "FAIL: fathom:32 k=40 selected ${pct:-?}% of the keys"; fail=1; }
echo "fathom:32 k=40: $pct% of visible keys selected"

# 4. The tokenizer built from the GGUF metadata encodes like Hugging Face's.
"$fathom" generate --model "$MODEL" --prompt "The capital of France is" --tokens 1 --ids --quiet \
  >/dev/null 2>"$tmp/tok.err" || fail=1
grep -q "prompt ids (5): 504,3575,282,4649,314$" "$tmp/tok.err" || {
  echo "FAIL: tokenizer: $(grep 'prompt ids' "$tmp/tok.err")"; fail=1; }

[ $fail -eq 0 ] && echo "test_model_reference: ok" || echo "test_model_reference: FAILED"
exit $fail
