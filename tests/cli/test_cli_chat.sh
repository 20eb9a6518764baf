#!/usr/bin/env bash
# fathom generate with the SmolLM2-135M model: --chat builds the prompt from
# the chat template the GGUF declares (ChatML with its default system turn,
# written out here as the reference), generation stops at the end of the
# turn without printing the end token; without --chat on this instruct model
# a warning says that --chat is probably wanted.
#   usage: test_cli_chat.sh BUILD_DIR     (exit 77: model not available)
set -uo pipefail
fathom=$(cd "$1" && pwd)/fathom
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/../support/cli_expect.sh"
source "$(dirname "$0")/../support/model_path.sh" # exits 77 without the model

# The template SmolLM2-135M-Instruct declares, for one user message "What is 2+2?".
reference=$'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n'
want=$("$fathom" tokenize --model "$MODEL" --special --text "$reference")
expect 0 "" -- generate --model "$MODEL" --chat --prompt "What is 2+2?" --tokens 24 --ids --threads 2
got=$(sed -n 's/^prompt ids ([0-9]*): //p' "$tmp/err")
[ "$got" = "$want" ] || { echo "FAIL: --chat prompt ids"; echo "  want $want"; echo "  got  $got"; fail=1; }
if grep -q "im_end\|<|" "$tmp/out"; then echo "FAIL: the end token was printed:"; cat "$tmp/out"; fail=1; fi
ids=$(tail -n 1 "$tmp/out")
eos=$("$fathom" tokenize --model "$MODEL" --special --text "<|im_end|>")
case ",$ids" in
  *",$eos") ;;
  *) echo "FAIL: generation did not stop at the end of the turn ($eos): $ids"; fail=1 ;;
esac
[ "$(echo "$ids" | tr ',' '\n' | wc -l)" -lt 24 ] || { echo "FAIL: all 24 tokens generated: $ids"; fail=1; }
# --system replaces the template's default system turn
expect 0 "" -- generate --model "$MODEL" --chat --system "Be brief." --prompt "Hi" --tokens 1 --ids --quiet
want=$("$fathom" tokenize --model "$MODEL" --special \
  --text $'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n')
got=$(sed -n 's/^prompt ids ([0-9]*): //p' "$tmp/err")
[ "$got" = "$want" ] || { echo "FAIL: --system prompt ids"; echo "  want $want"; echo "  got  $got"; fail=1; }
# plain text on an instruct model, and sparse decoding whose k covers every key: warnings
expect 0 "^fathom generate: warning: the model declares a chat template.*--chat is probably wanted" -- \
  generate --model "$MODEL" --prompt "Hi" --tokens 1 --attn fathom:48 --quiet
grep -q "^fathom generate: warning: k = 256 is at least the [0-9]* keys in the context: every key is selected" \
  "$tmp/err" || { echo "FAIL: no warning for k beyond the context:"; cat "$tmp/err"; fail=1; }

[ $fail -eq 0 ] && echo "test_cli_chat: ok"
exit $fail
