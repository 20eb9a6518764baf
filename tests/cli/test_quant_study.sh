#!/usr/bin/env bash
# bench/quant_study.py's "sym" code is the store's: on a synthetic capture its
# errors and bits equal `fathom eval`'s fathom:B (same positions and k), and
# its "centered" code equals fathom-centered:B (the store centered on the
# window's mean), so the script's asymmetric code is measured under the
# library's own plan, selection and error. Needs numpy (exit 77 without it).
#   usage: test_quant_study.sh BUILD_DIR
set -uo pipefail
fathom=$(cd "$1" && pwd)/fathom
root=$(cd "$(dirname "$0")/../.." && pwd)
python3 -c 'import numpy' 2>/dev/null || { echo "SKIP: numpy absent"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$fathom" synth --preset smollm2-135m --context 700 --positions 4 -o "$tmp/c.safetensors" -q ||
  { echo "FAIL: synth"; exit 1; }
"$fathom" eval --kv "$tmp/c.safetensors" --k 100 --methods fathom:16,fathom:48,fathom-centered:16,fathom-centered:48 --json --quiet >"$tmp/eval.json" ||
  { echo "FAIL: eval"; exit 1; }
python3 "$root/bench/quant_study.py" "$tmp/c.safetensors" --positions 4 --k 100 --budgets 16,48 --json \
  >"$tmp/study.json" || { echo "FAIL: quant_study.py"; exit 1; }
python3 - "$tmp/eval.json" "$tmp/study.json" <<'PY'
import json, sys
ev = {m["name"]: m for m in json.load(open(sys.argv[1]))["methods"]}
st = json.load(open(sys.argv[2]))["rows"]
sym = {r["budget"]: r for r in st if r["code"] == "sym"}
bad = 0
for name, code in (("fathom", "sym"), ("fathom-centered", "centered")):
    rows = {r["budget"]: r for r in st if r["code"] == code}
    for b in (16, 48):
        e, s = ev["%s:%d" % (name, b)], rows[b]
        if abs(e["bits_per_token"] - s["bits_per_token"]) > 1e-3 or abs(e["rel_error"] - s["rel_error"]) > 1e-4 * e["rel_error"]:
            print("FAIL: %s:%d eval %s/%s, study %s %s/%s" % (name, b, e["bits_per_token"], e["rel_error"], code,
                                                              s["bits_per_token"], s["rel_error"]))
            bad = 1
# the two codes differ on this capture, so each comparison above tells them apart
if abs(ev["fathom:16"]["rel_error"] - ev["fathom-centered:16"]["rel_error"]) <= 1e-4 * ev["fathom:16"]["rel_error"]:
    print("FAIL: fathom:16 and fathom-centered:16 agree; the capture cannot tell the codes apart"); bad = 1
codes = {r["code"] for r in st}
if codes != {"sym", "asym", "centered"}:
    print("FAIL: codes %s" % sorted(codes)); bad = 1
# the asymmetric code pays a second fp16 per channel read: 0.25 bits more per active channel
for b in (16, 48):
    a = [r for r in st if r["code"] == "asym" and r["budget"] == b][0]
    c = [r for r in st if r["code"] == "centered" and r["budget"] == b][0]
    if not (a["bits_per_token"] > sym[b]["bits_per_token"] == c["bits_per_token"]):
        print("FAIL: bits sym %s asym %s centered %s" % (sym[b]["bits_per_token"], a["bits_per_token"],
                                                        c["bits_per_token"])); bad = 1
sys.exit(bad)
PY
rc=$?
[ $rc -eq 0 ] && echo "test_quant_study: ok"
exit $rc
