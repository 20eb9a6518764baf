#!/usr/bin/env bash
# Every file under tests/data/malformed/ (gguf/, capture/, methods/, preset/) is
# rejected by the CLI with exit status 1 or 2 (never 0, never a crash), one
# message prefixed "fathom <cmd>:" that contains the text EXPECT lists for
# it; every file there is listed in EXPECT. The same files seed the fuzz
# targets (scripts/fuzz). $1 is the build directory.
set -u
fathom="${1:?usage: test_malformed.sh BUILD_DIR}/fathom"
[ -x "$fathom" ] || { echo "no $fathom"; exit 1; }
dir="$(cd "$(dirname "$0")/../data/malformed" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail=0 checked=0
bad() { echo "FAIL: $*"; fail=1; }

# the command that reads each kind
run() {
  local kind=$1 file=$2
  case $kind in
    gguf) "$fathom" generate --model "$file" --prompt x --tokens 1 ;;
    capture) "$fathom" info "$file" ;;
    methods) "$fathom" eval --synthetic smollm2-135m --context 256 --methods "$(cat "$file")" ;;
    preset) "$fathom" eval --synthetic "$file" --context 256 --positions 8 --methods oracle ;;
    *) echo "unknown kind $kind" >&2; return 99 ;;
  esac
}

declare -A listed
while IFS='|' read -r file want; do
  file=$(echo "$file" | xargs) want=${want# }
  case $file in ''|\#*) continue ;; esac
  listed[$file]=1
  kind=${file%%/*} cmd=
  [ -f "$dir/$file" ] || { bad "$file is listed in EXPECT but missing"; continue; }
  timeout 60 bash -c "$(declare -f run); fathom='$fathom'; run '$kind' '$dir/$file'" \
    >"$tmp/out" 2>"$tmp/err"
  got=$?
  case $kind in gguf) cmd=generate ;; capture) cmd=info ;; methods|preset) cmd=eval ;; esac
  checked=$((checked + 1))
  if [ $got -ne 1 ] && [ $got -ne 2 ]; then
    bad "$file: exit $got (want 1 or 2): $(head -c 300 "$tmp/err")"
  elif [ "$(grep -c . "$tmp/err")" -ne 1 ]; then
    bad "$file: want one line on stderr, got: $(cat "$tmp/err")"
  elif ! grep -q "^fathom $cmd: " "$tmp/err"; then
    bad "$file: message lacks the 'fathom $cmd:' prefix: $(cat "$tmp/err")"
  elif ! grep -qF -- "$want" "$tmp/err"; then
    bad "$file: message lacks '$want': $(cat "$tmp/err")"
  fi
done <"$dir/EXPECT"

for f in "$dir"/*/*; do
  rel=${f#"$dir"/}
  [ "${listed[$rel]:-}" = 1 ] || bad "$rel is not listed in EXPECT"
done
[ "$checked" -ge 30 ] || bad "only $checked files checked"
echo "test_malformed: $checked files rejected with their message$([ $fail = 0 ] || echo ', with failures')"
exit $fail
