#!/usr/bin/env bash
# The tokenizer against the reference (HF tokenizers) on the real SmolLM2 vocabulary.
# $1: the build directory. Exit 77 (skip) when the model or the Python packages are missing.
set -euo pipefail
build=${1:?usage: test_tokenizer_model.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

source "$here/../support/model_path.sh" # sets MODEL or exits 77
model=$MODEL
if ! python3 -c 'import gguf, tokenizers' 2>/dev/null; then
  echo "test_tokenizer_model: needs the Python packages gguf and tokenizers (scripts/install-deps); skipped"
  exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$here/../support/tokenizer_reference.py" "$model" "$here/../data/tokenizer_corpus" "$work"
"$build/test_tokenizer_corpus" "$work/vocab.bin" "$work/cases.bin"
