#!/usr/bin/env bash
# fathom generate / fathom capture: usage errors (exit 2) and failures
# (exit 1, a message naming the problem), without the model file.
#   usage: test_cli_model.sh BUILD_DIR
set -uo pipefail
fathom=$(cd "$1" && pwd)/fathom
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/../support/cli_expect.sh"

expect 0 "usage: fathom generate" -- generate --help
expect 0 "usage: fathom capture" -- capture --help
expect 2 "exactly one of --prompt" -- generate --tokens 4
expect 2 "exactly one of --prompt" -- generate --prompt a --prompt-ids 1,2
expect 2 "needs a value" -- generate --prompt
expect 2 "non-negative integer" -- generate --prompt a --tokens -3
expect 2 "non-negative integer" -- generate --prompt a --k 12x
expect 2 "at least 1" -- generate --prompt a --tokens 0
expect 2 "--chat needs text" -- generate --prompt-ids 1,2 --chat
expect 2 "unknown option" -- generate --prompt a --bogus
expect 2 "give --json or --ids" -- generate --prompt a --json --ids
expect 2 "^fathom generate: --attn: unknown method" -- generate --prompt a --attn nonsense:3
expect 1 "no-such-model.gguf" -- generate --model "$tmp/no-such-model.gguf" --prompt a
expect 2 "exactly one of --text-file" -- capture --out "$tmp/c.safetensors"
expect 2 "--out is required" -- capture --text hello
expect 2 "f32, f16 or bf16" -- capture --text hello --out "$tmp/c" --dtype f64
expect 2 "at least 1" -- capture --text hello --out "$tmp/c" --positions 0
expect 2 "--system needs --chat" -- capture --text hello --out "$tmp/c" --system hi
expect 1 "no-such-model.gguf" -- capture --model "$tmp/no-such-model.gguf" --text hi --out "$tmp/c"
printf 'GGUF\003\000\000\000garbage' >"$tmp/bad.gguf"
expect 1 "^fathom generate: .*truncated" -- generate --model "$tmp/bad.gguf" --prompt a
[ ! -e "$tmp/c" ] || { echo "FAIL: a capture file was left behind"; fail=1; }

[ $fail -eq 0 ] && echo "test_cli_model: ok"
exit $fail
