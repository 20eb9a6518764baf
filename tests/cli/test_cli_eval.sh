#!/usr/bin/env bash
# fathom eval from the command line: JSON shape and names, the human table,
# sweeps, the plot, and usage errors. $1 = build directory.
set -u
fathom="$1/fathom"
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "FAIL: $*" >&2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

"$fathom" eval --synthetic smollm2-135m --context 1024 --positions 8 --k 64 --quiet \
  --methods 'fathom:48, sparq:16,dense' --json >"$tmp/out.json" 2>"$tmp/err" || bad "eval --json failed: $(cat "$tmp/err")"
python3 - "$tmp/out.json" <<'PY' && ok || bad "json content"
import json, sys
o = json.load(open(sys.argv[1]))
names = [m["name"] for m in o["methods"]]
assert names == ["fathom:48", "sparq:16", "dense"], names
for m in o["methods"]:
    for key in ("bits_per_token", "scan_bytes_per_step", "row_bytes_per_step", "rel_error"):
        assert isinstance(m[key], (int, float)), key
d = o["methods"][2]
assert d["rel_error"] == 0 and d["scan_bytes_per_step"] == 0
s = o["methods"][1]
assert abs(s["bits_per_token"] - (4 * 16 + 16 / 4)) < 1e-9
assert 0 < o["methods"][0]["rel_error"] < 1
PY

"$fathom" eval --synthetic smollm2-135m --context 1024 --positions 8 --quiet \
  --methods fathom:32,ds:16,oracle --match --sweep-budgets 8,16,32,64,128 --plot "$tmp/p.svg" >"$tmp/table" 2>"$tmp/err" \
  || bad "eval table failed: $(cat "$tmp/err")"
grep -q "^fathom:32 " "$tmp/table" && ok || bad "table lacks fathom:32"
grep -q "budget sweep" "$tmp/table" && ok || bad "table lacks the sweep"
grep -q "matches" "$tmp/table" && ok || bad "table lacks the match section"
grep -q "<svg" "$tmp/p.svg" && grep -q "polyline" "$tmp/p.svg" && ok || bad "plot"
grep -q "lower is better" "$tmp/table" && grep -q "^bits/token  what choosing the keys costs" "$tmp/table" \
  && ok || bad "table lacks the legend"

# --match: a method whose error fathom's smallest swept budget already reaches
# gets a bound (">= x" saving, "<= b" bits) and a note; --json keeps the number.
args=(--synthetic smollm2-135m --context 512 --positions 4 --quiet --methods landmark,fathom:16 --match
      --sweep-budgets 16,32)
"$fathom" eval "${args[@]}" >"$tmp/m.txt" 2>"$tmp/err" || bad "match failed: $(cat "$tmp/err")"
grep -q "^landmark .* <= 1[0-9.]* *>= [0-9.]*x$" "$tmp/m.txt" && grep -q "saving is a lower bound" "$tmp/m.txt" \
  && ok || bad "landmark's match is not a bound: $(cat "$tmp/m.txt")"
"$fathom" eval "${args[@]}" --json >"$tmp/m.json" 2>"$tmp/err" || bad "match --json failed"
python3 -c 'import json,sys; m={x["method"]:x for x in json.load(open(sys.argv[1]))["match"]}; assert m["landmark"]["fathom_bits"] == m["fathom:16"]["method_bits"]' "$tmp/m.json" \
  && ok || bad "match json: $(cat "$tmp/m.json")"

"$fathom" eval --synthetic smollm2-135m --context 512 --positions 4 --quiet --methods oracle,dense \
  --sweep-k 48,96 --json >"$tmp/k.json" 2>"$tmp/err" || bad "sweep-k failed: $(cat "$tmp/err")"
python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); assert [x["k"] for x in o["k_sweep"]]==[48,96]' "$tmp/k.json" && ok || bad "k sweep json"
# --match with --sweep-k: every k carries its own budget sweep and match; the
# first k's are the top-level ones, and a larger k gives the sweep lower error.
"$fathom" eval --synthetic smollm2-135m --context 512 --positions 4 --quiet --methods sparq:16,fathom:16 \
  --match --sweep-budgets 16,32 --sweep-k 48,160 --json >"$tmp/km.json" 2>"$tmp/err" || bad "sweep-k match failed"
python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))
a, b = o["k_sweep"]
assert a["match"] == o["match"] and a["budget_sweep"] == o["budget_sweep"]
assert [m["method"] for m in b["match"]] == ["sparq:16", "fathom:16"]
assert len(b["budget_sweep"]) == 2 and b["budget_sweep"][0]["rel_error"] < a["budget_sweep"][0]["rel_error"]
assert b["match"][1]["fathom_bits"] == b["methods"][1]["bits_per_token"]' "$tmp/km.json" \
  && ok || bad "k sweep match json: $(cat "$tmp/km.json")"

# --calib-context: the synthetic calibration text at that length is the
# same as a capture of it written by fathom synth (seed + 1000), and a
# calibration over fewer positions gives Loki another basis.
cc=(--synthetic smollm2-135m --context 1024 --positions 8 --k 64 --quiet --methods loki:8,fathom:48 --json)
"$fathom" eval "${cc[@]}" --calib synthetic --calib-context 300 >"$tmp/cc.json" 2>"$tmp/err" \
  || bad "calib-context failed: $(cat "$tmp/err")"
"$fathom" synth --preset smollm2-135m --context 300 --positions 8 --seed 1001 --dtype f32 -o "$tmp/c300.safetensors" \
  --quiet 2>"$tmp/err" || bad "synth failed: $(cat "$tmp/err")"
"$fathom" eval "${cc[@]}" --calib "$tmp/c300.safetensors" >"$tmp/cf.json" 2>"$tmp/err" \
  || bad "calib file failed: $(cat "$tmp/err")"
"$fathom" eval "${cc[@]}" --calib synthetic >"$tmp/cs.json" 2>"$tmp/err" || bad "calib synthetic failed"
python3 - "$tmp/cc.json" "$tmp/cf.json" "$tmp/cs.json" <<'PY' && ok || bad "calib-context json"
import json, sys
e = [{m["name"]: m["rel_error"] for m in json.load(open(f))["methods"]} for f in sys.argv[1:]]
assert e[0] == e[1], e
assert e[0]["loki:8"] != e[2]["loki:8"], e
PY

for args in "--k" "--k 0" "--methods bogus:1" "--layer-budget steep" "--kv x --synthetic qwen3-8b" "--frobnicate" \
  "--calib-context 100" "--calib synthetic --calib-context 0" "--kv x --calib y --calib-context 100"; do
  "$fathom" eval $args >/dev/null 2>&1; rc=$?
  [ $rc -eq 2 ] && ok || bad "'eval $args' exited $rc, expected 2"
done
"$fathom" eval --kv /nonexistent/file.safetensors >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "nonexistent" "$tmp/err" && ok || bad "missing capture: rc $rc, $(cat "$tmp/err")"
"$fathom" eval --help | grep -q "usage: fathom eval" && ok || bad "help"

echo "test_cli_eval: $pass passed, $fail failed"
[ $fail -eq 0 ]
