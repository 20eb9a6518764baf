#!/usr/bin/env bash
# The SentencePiece-style tokenizer of the Gemma 3 270M GGUF against Google's
# sentencepiece built from the same vocabulary (tests/support/spm_reference.py),
# on the tokenizer corpus (a few thousand cases).
# $1: the build directory. Exit 77 (skip) when the model or the Python packages are missing.
set -euo pipefail
build=${1:?usage: test_tokenizer_gemma.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)

model_kind=gemma3
source "$here/../support/model_path.sh" # sets MODEL or exits 77
if ! python3 -c 'import gguf, sentencepiece, tokenizers' 2>/dev/null; then
  echo "test_tokenizer_gemma: needs the Python packages gguf, sentencepiece, tokenizers (scripts/install-deps); skipped"
  exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$here/../support/spm_reference.py" "$MODEL" "$here/../data/tokenizer_corpus" "$work"
"$build/test_tokenizer_corpus" "$MODEL" "$work/cases.bin"
