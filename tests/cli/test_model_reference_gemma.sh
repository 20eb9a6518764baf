#!/usr/bin/env bash
# Gemma 3 270M: the C model against the independent numpy forward pass
# (tests/support/model_reference.py, Hugging Face's Gemma 3 conventions):
# logits and greedy tokens of fathom generate for a short prompt and for one
# longer than the 512-token sliding window, and fathom capture's q/k/v; then
# sparse decoding (global layers only) that selects everything against dense.
#   usage: test_model_reference_gemma.sh BUILD_DIR
# Skips (77) without the model file or without numpy + gguf.
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
model_kind=gemma3
source "$here/../support/model_path.sh"
fathom=$build/fathom
python3 -c 'import numpy, gguf' 2>/dev/null || {
  echo "SKIP: python3 with numpy and gguf is needed (scripts/install-deps)" >&2
  exit 77
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# a: "The capital of France is" (bos first), fixed here so that nothing
# depends on the tokenizer; b: three corpus files, about 550 tokens (> the
# 512-key window), through the tokenizer (test_tokenizer_gemma.sh checks it).
short="2,818,5279,529,7001,563"
cat "$here/../data/tokenizer_corpus/"{prose.txt,code.c,code.py} >"$tmp/long.txt"
long=$("$fathom" tokenize --model "$MODEL" --file "$tmp/long.txt")
n_long=$(echo "$long" | tr ',' '\n' | wc -l)
[ "$n_long" -gt 520 ] || { echo "FAIL: the long prompt has $n_long tokens"; exit 1; }

source "$here/../support/generate.sh" # gen PROMPT_IDS OUT N [args]

# 1. Dense greedy decoding and the capture vs the numpy reference.
gen "$short" "$tmp/a" 16 || fail=1
gen "$long" "$tmp/b" 4 || fail=1
"$fathom" capture --model "$MODEL" --prompt-ids "$long" --positions 8 --dtype f32 \
  --threads 2 --quiet --out "$tmp/cap.safetensors" || { echo "FAIL: fathom capture"; fail=1; }
python3 "$here/../support/model_reference.py" "$MODEL" \
  --case "$short" "$(cat "$tmp/a.ids")" "$tmp/a.bin" \
  --case "$long" "$(cat "$tmp/b.ids")" "$tmp/b.bin" \
  --capture "$long" "$tmp/cap.safetensors" --rel-tol 1e-4 || fail=1

# 2. A sparse decode path with k >= context selects every key of the global
# layers: the same tokens as dense, logits equal up to fathom_attend's double
# accumulation (every method: test_model.c on a tiny gemma3 file).
compare_logits() { # a.bin b.bin label
  python3 "$here/../support/compare_logits.py" "$@"
}
for method in oracle; do
  gen "$long" "$tmp/s" 4 --attn "$method" --k 100000 || { fail=1; continue; }
  cmp -s "$tmp/s.ids" "$tmp/b.ids" || {
    echo "FAIL: --attn $method --k 100000 tokens differ from dense: $(cat "$tmp/s.ids") vs $(cat "$tmp/b.ids")"
    fail=1; }
  compare_logits "$tmp/s.bin" "$tmp/b.bin" "$method k=100000" || fail=1
  grep -q "100.00% of visible keys selected" "$tmp/s.err" || {
    echo "FAIL: $method k=100000 did not select every key"; cat "$tmp/s.err"; fail=1; }
done
# 3. A truly sparse method selects a fraction (k = 64 of ~550 positions).
gen "$long" "$tmp/k64" 2 --attn fathom:64 --k 64 || fail=1
pct=$(sed -n 's/.* \([0-9.]*\)% of visible keys selected/\1/p' "$tmp/k64.err")
python3 -c "import sys; sys.exit(0 if 8 < float('${pct:-0}') < 15 else 1)" || {
  echo "FAIL: fathom:64 k=64 selected ${pct:-?}% of the keys"; fail=1; }
echo "fathom:64 k=64: $pct% of visible keys selected"

# 4. The tokenizer: the ids of prompt a.
"$fathom" generate --model "$MODEL" --prompt "The capital of France is" --tokens 1 --ids --quiet \
  >/dev/null 2>"$tmp/tok.err" || fail=1
grep -q "prompt ids (6): $short$" "$tmp/tok.err" || {
  echo "FAIL: tokenizer: $(grep 'prompt ids' "$tmp/tok.err")"; fail=1; }

# 5. --chat wraps the prompt in Gemma's template (bos, then the user's turn
# and the opening of the model's).
"$fathom" generate --model "$MODEL" --chat --prompt "hi" --tokens 1 --ids --quiet \
  >/dev/null 2>"$tmp/chat.err" || fail=1
want=$(printf '<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n' >"$tmp/chat.txt" &&
  "$fathom" tokenize --model "$MODEL" --special --file "$tmp/chat.txt")
grep -q "prompt ids ([0-9]*): $want$" "$tmp/chat.err" && [[ $want == 2,105,* ]] || {
  echo "FAIL: --chat: $(grep 'prompt ids' "$tmp/chat.err"), template alone: $want"; fail=1; }

# 6. capture --global-only keeps the 3 global layers (5, 11, 17), and eval runs on it.
"$fathom" capture --model "$MODEL" --prompt-ids "$short" --positions 4 --global-only --threads 2 \
  --quiet --out "$tmp/glob.safetensors" || { echo "FAIL: capture --global-only"; fail=1; }
"$fathom" info "$tmp/glob.safetensors" >"$tmp/glob.info" || fail=1
grep -q "^layers *3$" "$tmp/glob.info" && grep -q "layers *5,11,17$" "$tmp/glob.info" || {
  echo "FAIL: capture --global-only:"; cat "$tmp/glob.info"; fail=1; }
"$fathom" eval --kv "$tmp/glob.safetensors" --k 4 --methods fathom:48,oracle,dense --threads 2 --quiet \
  >"$tmp/glob.eval" || { echo "FAIL: eval of the Gemma capture"; fail=1; }
grep -q "^oracle" "$tmp/glob.eval" || { echo "FAIL: eval printed no oracle row"; cat "$tmp/glob.eval"; fail=1; }

[ $fail -eq 0 ] && echo "test_model_reference_gemma: ok" || echo "test_model_reference_gemma: FAILED"
exit $fail
