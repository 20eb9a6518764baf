#!/usr/bin/env bash
# The conventions every fathom command keeps, without the model file:
# --version; --help on every command; exit status 2 for usage errors and 1
# for failures; every message prefixed "fathom <cmd>:" and free of internal C
# names and doubled paths; warnings for degenerate settings; strings from
# files escaped on the terminal; the default model found next to the
# executable or installed, never in the current directory; the --plot path
# checked before the work, PNG written through cairo when the CLI has it.
#   usage: test_cli_conventions.sh BUILD_DIR
set -uo pipefail
fathom=$(cd "$1" && pwd)/fathom
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/../support/cli_expect.sh"
commands="eval plan info synth synth-fit generate capture agree needle tokenize"
# no message may carry a C function name ("fathom_x:", "tokenizer_encode:")
internal='fathom_[a-z_]*:\|[a-z]*_[a-z_]*: '
no_internal() { # label
  if grep -q -- "$internal" "$tmp/err"; then echo "FAIL: $1 leaks an internal name:"; cat "$tmp/err"; fail=1; fi
}

# --version, --help
expect 0 "^fathom (libfathom) [0-9]*\.[0-9]*\.[0-9]*$" -- --version
expect 0 "usage: fathom <command>" -- --help
expect 2 "fathom: unknown command 'frobnicate'" -- frobnicate
for c in $commands; do
  expect 0 "^usage: fathom $c" -- "$c" --help
  grep -q "Exit status: 0 success, 1 failure, 2 usage error" "$tmp/out" ||
    { echo "FAIL: fathom $c --help does not state the exit status"; fail=1; }
  # usage errors: exit 2, the command's prefix, a pointer to --help
  expect 2 "^fathom $c: unknown option '--frobnicate'" -- "$c" --frobnicate
  grep -q "^(fathom $c --help for usage)$" "$tmp/err" || { echo "FAIL: fathom $c: no --help pointer"; fail=1; }
done
expect 2 "^fathom eval: --k needs a value" -- eval --k
expect 2 "^fathom eval: --json=1 takes no value" -- eval --json=1
expect 2 "^fathom generate: --tokens needs a non-negative integer, not '-3'" -- generate --prompt a --tokens -3

# one bad method name: exit 2 everywhere, the library's message without its C name
for args in "eval --methods bogus:1" "generate --prompt a --attn bogus:1" \
            "agree --prompts $tmp --methods bogus:1" "needle --haystack $tmp --methods bogus:1"; do
  set -- $args
  expect 2 "^fathom $1: --[a-z]*: unknown method 'bogus'" -- $args
  no_internal "$args"
done
expect 2 "^fathom eval: --synthetic: unknown preset\|^fathom eval: --synthetic: .*no-such" -- eval --synthetic no-such --context 64
expect 2 "^fathom synth: --preset: " -- synth --preset no-such --context 64 -o "$tmp/x"
expect 2 "^fathom synth-fit: --keep needs a list of profiles" -- synth-fit --kv x --out "$tmp/p.json" --keep bogus
expect 2 "^fathom synth-fit: --per-query-head needs --per-head" -- synth-fit --kv x --out "$tmp/p.json" --per-query-head
expect 2 "^fathom synth-fit: --churn and --churn-sigma exclude" -- synth-fit --kv x --out "$tmp/p.json" --churn --churn-sigma 0.6
expect 2 "^fathom synth-fit: --churn-sigma needs a number in (0, 4]" -- synth-fit --kv x --out "$tmp/p.json" --churn-sigma 5
expect 1 "^fathom synth-fit: .*does-not-exist" -- synth-fit --kv "$tmp/does-not-exist" --out "$tmp/p.json"

# failures: exit 1, the prefix, the path once, no internal names
expect 1 "^fathom info: " -- info "$tmp/does-not-exist"
no_internal "info of a missing file"
[ "$(grep -o "does-not-exist" "$tmp/err" | wc -l)" -eq 1 ] || { echo "FAIL: the path appears twice:"; cat "$tmp/err"; fail=1; }
printf 'GGUF\003\000\000\000garbage' >"$tmp/bad.gguf"
for c in "generate --prompt a" "tokenize --text a" "capture --text ab --out $tmp/c.safetensors"; do
  set -- $c
  expect 1 "^fathom $1: .*truncated" -- $c --model "$tmp/bad.gguf"
  no_internal "$c on a truncated GGUF"
  [ "$(grep -o "bad.gguf" "$tmp/err" | wc -l)" -le 1 ] || { echo "FAIL: $1: the path appears twice:"; cat "$tmp/err"; fail=1; }
done
expect 1 "^fathom agree: cannot open $tmp/nothing" -- agree --prompts "$tmp/nothing"
mkdir "$tmp/empty"
expect 1 "^fathom needle: no files found in $tmp/empty" -- needle --haystack "$tmp/empty"

# warnings for settings that make a result meaningless or trivial
args=(eval --synthetic smollm2-135m --context 256 --positions 2 --methods oracle --quiet --json)
expect 0 "^fathom eval: warning: k = 20 is at most sink + local = 36" -- "${args[@]}" --k 20
expect 0 "^fathom eval: warning: k = 300 is at least the 256 keys" -- "${args[@]}" --k 300
grep -q '"k":300' "$tmp/out" || { echo "FAIL: the warning changed stdout"; fail=1; }
expect 2 "^fathom plan: --var: a variance cannot be negative (channel 1 is -0.5)" -- \
  plan --var 1,-0.5 --query 1,1 --budget 4
expect 2 "^fathom generate: --system needs --chat" -- generate --prompt a --system b
expect 2 "^fathom capture: --system needs --chat" -- capture --text a --system b --out "$tmp/c"

# capture metadata reaches the terminal escaped
"$fathom" synth -q --preset smollm2-135m --context 64 --positions 2 -o "$tmp/c.safetensors"
python3 - "$tmp/c.safetensors" "$tmp/evil.safetensors" <<'PY' || { echo "FAIL: could not write the capture"; fail=1; }
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
header["__metadata__"]["note"] = "\x1b[31mred\x1b[0m\x07"
text = json.dumps(header).encode()
text += b" " * (-(8 + len(text)) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
expect 0 'note *\\x1b\[31mred\\x1b\[0m\\x07' -- info "$tmp/evil.safetensors"
if LC_ALL=C grep -q $'\x1b' "$tmp/out"; then echo "FAIL: fathom info printed a raw escape"; fail=1; fi
"$fathom" info --json "$tmp/evil.safetensors" | python3 -c 'import json,sys; assert json.load(sys.stdin)["metadata"]["note"] == "\x1b[31mred\x1b[0m\x07"' ||
  { echo "FAIL: info --json does not round-trip the metadata"; fail=1; }
# a path in a message reaches the terminal escaped too
expect 1 'cannot write .*x\\x1b\[31m\.svg' -- eval --plot "$tmp/nodir/x"$'\x1b'"[31m.svg"
if LC_ALL=C grep -q $'\x1b' "$tmp/err"; then echo "FAIL: a message printed a raw escape"; fail=1; fi

# the default model: next to the executable's source tree, never the current directory
mkdir -p "$tmp/tree/build" "$tmp/cwd/models"
cp "$fathom" "$tmp/tree/build/fathom"
printf 'GGUF\003\000\000\000garbage' >"$tmp/cwd/models/SmolLM2-135M-Instruct.Q4_1.gguf"
(cd "$tmp/cwd" && env -u FATHOM_MODEL "$tmp/tree/build/fathom" tokenize --text hi >"$tmp/out" 2>"$tmp/err"); rc=$?
if [ -e "/usr/local/share/fathom/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  echo "note: an installed model exists; the not-found case is not checked"
elif [ $rc -ne 1 ] || ! grep -q "^fathom tokenize: no model: give --model FILE or set FATHOM_MODEL" "$tmp/err"; then
  echo "FAIL: the model was looked for in the current directory (exit $rc):"; cat "$tmp/err"; fail=1
fi
mkdir "$tmp/tree/models"
cp "$tmp/cwd/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$tmp/tree/models/"
(cd "$tmp/cwd" && env -u FATHOM_MODEL "$tmp/tree/build/fathom" tokenize --text hi >"$tmp/out" 2>"$tmp/err"); rc=$?
[ $rc -eq 1 ] && grep -q "$tmp/tree/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$tmp/err" ||
  { echo "FAIL: the model next to the executable was not used (exit $rc):"; cat "$tmp/err"; fail=1; }
(cd "$tmp/cwd" && FATHOM_MODEL="$tmp/env.gguf" "$tmp/tree/build/fathom" tokenize --text hi >"$tmp/out" 2>"$tmp/err")
grep -q "$tmp/env.gguf" "$tmp/err" || { echo "FAIL: \$FATHOM_MODEL was not used:"; cat "$tmp/err"; fail=1; }

# --plot: the path is checked before the evaluation; PNG through cairo
small=(eval --synthetic smollm2-135m --context 256 --positions 2 --k 64 --methods fathom:48,sparq:16,oracle
       --sweep-budgets 16,32,64 --quiet)
expect 1 "^fathom eval: cannot write $tmp/no-dir/p.svg" -- "${small[@]}" --plot "$tmp/no-dir/p.svg"
[ ! -s "$tmp/out" ] || { echo "FAIL: eval ran before the plot path was checked:"; cat "$tmp/out"; fail=1; }
expect 0 "budget sweep" -- "${small[@]}" --plot "$tmp/p.svg"
head -c 5 "$tmp/p.svg" | grep -q "<svg" || { echo "FAIL: no SVG"; fail=1; }
grep -q "(log scale)" "$tmp/p.svg" || { echo "FAIL: the plot has no log axis"; fail=1; }
"$fathom" "${small[@]}" --plot "$tmp/p.png" >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc -eq 2 ] && grep -q "built without cairo" "$tmp/err"; then
  echo "note: this fathom has no cairo; PNG refused as it should be"
  [ ! -s "$tmp/out" ] || { echo "FAIL: eval ran before refusing .png"; fail=1; }
elif [ $rc -ne 0 ] || [ "$(head -c 8 "$tmp/p.png" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
  echo "FAIL: --plot p.png (exit $rc) did not write a PNG:"; cat "$tmp/err"; fail=1
fi

[ $fail -eq 0 ] && echo "test_cli_conventions: ok"
exit $fail
