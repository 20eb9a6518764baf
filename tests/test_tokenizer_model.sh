#!/usr/bin/env bash
# The tokenizer against the reference (HF tokenizers) on the real SmolLM2 vocabulary.
# $1: the build directory. Exit 77 (skip) when the model or the Python packages are missing.
set -euo pipefail
build=${1:?usage: test_tokenizer_model.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
name=SmolLM2-135M-Instruct.Q4_1.gguf

model=""
for candidate in "${FATHOM_MODEL:-}" "$root/models/$name" "/work/wt/shared-model/$name"; do
  if [ -n "$candidate" ] && [ -f "$candidate" ]; then model=$candidate; break; fi
done
if [ -z "$model" ] && [ -x "$root/scripts/fetch-model" ]; then
  "$root/scripts/fetch-model" >&2 || true
  [ -f "$root/models/$name" ] && model="$root/models/$name"
fi
if [ -z "$model" ]; then
  echo "test_tokenizer_model: no model (set FATHOM_MODEL or run scripts/fetch-model); skipped"
  exit 77
fi
if ! python3 -c 'import gguf, tokenizers' 2>/dev/null; then
  echo "test_tokenizer_model: needs the Python packages gguf and tokenizers (scripts/install-deps); skipped"
  exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$here/tokenizer_reference.py" "$model" "$here/data/tokenizer_corpus" "$work"
"$build/test_tokenizer_corpus" "$work/vocab.bin" "$work/cases.bin"
