#!/usr/bin/env bash
# docs/results.md is the render of docs/results/data/*.json by
# scripts/render-results (a hand edit fails here); record-result keeps a
# command's JSON with its provenance and refuses failed or non-JSON output,
# and runs a record's command again (--again);
# a table row with more cells than its header cannot be rendered.
#   usage: test_results_doc.sh [BUILD_DIR]   (BUILD_DIR unused)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }

python3 "$root/scripts/render-results" --check || bad "docs/results.md is not the render of its data"

# record-result: the file it writes, and what it refuses
export FATHOM_RESULTS_DATA=$tmp/data FATHOM_COMMIT=abc1234
python3 "$root/scripts/record-result" t1 -- python3 -c 'print("{\"x\": 1.5, \"date\": \"2026-01-02\"}")' \
  || bad "record-result failed on a JSON command"
python3 - "$tmp/data/t1.json" <<'PY' || bad "t1.json is not what record-result should write"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["table"] == "t1" and r["commit"] == "abc1234" and r["date"] == "2026-01-02", r
assert r["result"] == {"x": 1.5, "date": "2026-01-02"}, r
assert r["command"].startswith("python3 -c ") and "cores" in r["machine"], r
assert isinstance(r["wall_s"], float) and len(r["load_average"]) == 2, r
PY
python3 "$root/scripts/record-result" t2 -- sh -c 'echo not json' 2>/dev/null && bad "accepted non-JSON"
python3 "$root/scripts/record-result" t3 -- sh -c 'echo "{}"; exit 77' 2>/dev/null && bad "accepted exit 77"
python3 "$root/scripts/record-result" t4 -- sh -c 'echo "[1]"' 2>/dev/null && bad "accepted a JSON array"
python3 "$root/scripts/record-result" t5 2>/dev/null && bad "accepted no command"
[ -e "$tmp/data/t2.json" ] || [ -e "$tmp/data/t3.json" ] || [ -e "$tmp/data/t4.json" ] \
  && bad "wrote a file for a refused command"

# --again: a record's own command, run again from the repository root, under another table
mkdir -p "$tmp/from"
python3 - "$tmp/from/r1.json" <<'PY'
import json, sys
cmd = "python3 -c 'import os; print(\"{\\\"cwd\\\": \\\"%s\\\"}\" % os.getcwd())'"
json.dump({"table": "r1", "command": cmd}, open(sys.argv[1], "w"))
PY
(cd "$tmp" && python3 "$root/scripts/record-result" t6 --again "$tmp/from/r1.json") \
  || bad "record-result --again failed on a record with a command"
python3 - "$tmp/data/t6.json" "$tmp/from/r1.json" "$root" <<'PY' || bad "t6.json is not r1's command run again"
import json, os, sys
r, src = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert r["table"] == "t6" and r["command"] == src["command"], r
assert os.path.samefile(r["result"]["cwd"], sys.argv[3]), r
PY
echo '{"table": "r2"}' >"$tmp/from/r2.json"
echo '[1]' >"$tmp/from/r3.json"
for from in "$tmp/from/r2.json" "$tmp/from/r3.json" "$tmp/from/none.json" no-such-table; do
  python3 "$root/scripts/record-result" t7 --again "$from" 2>/dev/null && bad "--again accepted $from"
done
python3 "$root/scripts/record-result" t7 --again 2>/dev/null && bad "--again accepted no record"
[ -e "$tmp/data/t7.json" ] && bad "wrote a file for a refused --again"

# the old notebook's defect (7 cells under a 6-cell header) cannot be rendered
python3 - "$root/docs/results/tables.py" <<'PY' || bad "md_table accepted a row wider than its header"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("t", sys.argv[1])
t = importlib.util.module_from_spec(spec)
spec.loader.exec_module(t)
assert t.md_table(["a", "b"], [[1, 2]]).count("\n") == 3
try:
    t.md_table(["a", "b"], [[1, 2, 3]])
except ValueError:
    sys.exit(0)
sys.exit(1)
PY
[ $fail -eq 0 ] && echo "test_results_doc: passed"
exit $fail
