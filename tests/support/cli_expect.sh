# Sourced by the CLI tests: expect EXIT PATTERN -- ARGS... runs "$fathom" ARGS
# and records a failure (fail=1) unless it exits with EXIT and its output
# matches PATTERN. Needs $fathom and $tmp set by the caller.
fail=0
expect() {
  local want=$1 pattern=$2
  shift 3
  "$fathom" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ $got -ne "$want" ] || ! grep -q -- "$pattern" "$tmp/err" "$tmp/out"; then
    echo "FAIL: fathom $* -> exit $got (want $want), output:"; cat "$tmp/err" "$tmp/out"
    fail=1
  fi
}
