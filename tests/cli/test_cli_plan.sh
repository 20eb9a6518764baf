#!/usr/bin/env bash
# fathom plan on the paper's Appendix A example: depths, --json, --theta,
# --bisect, and usage errors (exit 2). $1 is the build directory.
set -u
FATHOM="${1:?usage: test_cli_plan.sh BUILD_DIR}/fathom"
[ -x "$FATHOM" ] || { echo "no $FATHOM"; exit 1; }
command -v python3 >/dev/null || { echo "python3 missing: skip"; exit 77; }

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

EXAMPLE=(--var 1.222,0.755,0.127,0.001 --query 3,1,2,0.1 --query 1,2,-1,0.2)

# Depth column of the text table, one line "4 3 1 0".
depths_of() { awk '/^ *[0-9]+ +[-0-9.e+]+ +[0-4]$/ { printf "%s%s", sep, $3; sep = " " } END { print "" }'; }

out=$("$FATHOM" plan "${EXAMPLE[@]}" --budget 8) && ok || bad "budget 8 exit $?"
[ "$(depths_of <<<"$out")" = "4 3 1 0" ] && ok || bad "budget 8 depths: $out"
grep -q '^theta 0.07937' <<<"$out" && ok || bad "budget 8 theta: $out"
grep -q 'total bits 8.75' <<<"$out" && ok || bad "budget 8 total bits: $out"

out=$("$FATHOM" plan "${EXAMPLE[@]}" --budget 6) && ok || bad "budget 6 exit $?"
[ "$(depths_of <<<"$out")" = "3 2 1 0" ] && ok || bad "budget 6 depths: $out"

out=$("$FATHOM" plan "${EXAMPLE[@]}" --theta 0.1) && ok || bad "theta 0.1 exit $?"
[ "$(depths_of <<<"$out")" = "3 3 1 0" ] && ok || bad "theta 0.1 depths: $out"
out=$("$FATHOM" plan "${EXAMPLE[@]}" --theta 0.01)
[ "$(depths_of <<<"$out")" = "4 4 3 0" ] && ok || bad "theta 0.01 depths: $out"

# --json: exactly one object with the three keys and the golden values.
check_json() { # $1 = expected depths as a Python list, $2 = theta low, $3 = theta high
    python3 -c '
import json, sys
want, lo, hi = json.loads(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
doc = json.loads(sys.stdin.read())
assert isinstance(doc, dict) and set(doc) == {"theta", "importance", "depths"}, doc
assert doc["depths"] == want, doc["depths"]
assert lo <= doc["theta"] <= hi, doc["theta"]
g = doc["importance"]
for got, exp in zip(g, [12.22, 3.775, 0.635, 0.00005]):
    assert abs(got - exp) <= 1e-5 * max(1.0, exp), g
assert len(g) == 4
' "$1" "$2" "$3"
}
"$FATHOM" plan "${EXAMPLE[@]}" --budget 8 --json | check_json '[4,3,1,0]' 0.0793749 0.0793751 && ok ||
    bad "json budget 8"
"$FATHOM" plan "${EXAMPLE[@]}" --budget 6 --json | check_json '[3,2,1,0]' 0.117968 0.117970 && ok ||
    bad "json budget 6"
"$FATHOM" plan "${EXAMPLE[@]}" --budget 8 --bisect --json | check_json '[4,3,1,0]' 0.079375 0.0794 &&
    ok || bad "json bisect"
"$FATHOM" plan "${EXAMPLE[@]}" --theta 0.01 --json | check_json '[4,4,3,0]' 0.01 0.01 && ok ||
    bad "json theta"
"$FATHOM" plan "${EXAMPLE[@]}" --budget 100 --json | check_json '[4,4,4,4]' 0 0 && ok ||
    bad "json all fit"

"$FATHOM" plan --help | grep -q 'usage: fathom plan' && ok || bad "--help"

# Usage errors exit 2 with a message on stderr.
expect_usage() {
    local err rc
    err=$("$FATHOM" plan "$@" 2>&1 >/dev/null)
    rc=$?
    if [ "$rc" -eq 2 ] && [ -n "$err" ]; then ok; else bad "exit $rc (want 2) for: $* [$err]"; fi
}
expect_usage
expect_usage --query 1,2 --budget 4                     # no --var
expect_usage --var 1,2 --budget 4                       # no --query
expect_usage --var 1,2 --query 1,2                      # neither --budget nor --theta
expect_usage --var 1,2 --query 1,2 --budget 4 --theta 1 # both
expect_usage --var 1,2 --query 1,2 --theta 1 --bisect   # bisect without budget
expect_usage --var 1,2 --query 1 --budget 4             # query too short
expect_usage --var 1,2 --query 1,2,3 --budget 4         # query too long
expect_usage --var 1,2 --query 1,2 --query 1 --budget 4
expect_usage --var 1,x --query 1,2 --budget 4
expect_usage --var 1,,2 --query 1,2,3 --budget 4
expect_usage --var 1,nan --query 1,2 --budget 4
expect_usage --var 1,2, --query 1,2 --budget 4
expect_usage --var 1,2 --query 1,inf --budget 4
expect_usage --var 1,2 --query 1,2 --budget -1
expect_usage --var 1,2 --query 1,2 --budget 4x
expect_usage --var 1,2 --query 1,2 --budget 99999999999
expect_usage --var 1,2 --query 1,2 --theta 0
expect_usage --var 1,2 --query 1,2 --theta -1
expect_usage --var 1,2 --query 1,2 --theta abc
expect_usage --var 1,2 --query 1,2 --budget
expect_usage --var 1,2 --query 1,2 --budget 4 --bogus
expect_usage --var 1,2 --var 1,2 --query 1,2 --budget 4

echo "test_cli_plan: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
