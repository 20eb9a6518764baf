#!/usr/bin/env bash
# fathom agree / fathom needle / fathom tokenize with the SmolLM2-135M model:
# usage errors, agreement identities (oracle with itself, dense with itself),
# dense continuation after a rewind equal to plain generation, valid JSON,
# and needle retrieval at ~1k tokens with dense attention.
#   usage: test_agree.sh BUILD_DIR     (exit 77: model not available)
set -uo pipefail
fathom=$(cd "$1" && pwd)/fathom
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/../support/cli_expect.sh"

# Usage errors need no model.
expect 0 "usage: fathom agree" -- agree --help
expect 0 "usage: fathom needle" -- needle --help
expect 0 "usage: fathom tokenize" -- tokenize --help
expect 2 "--prompts is required" -- agree --tokens 4
expect 2 "--prompts needs a value" -- agree --prompts
expect 2 "unknown option" -- agree --prompts x --bogus
expect 2 "needs a value" -- agree --prompts x --tokens
expect 2 "non-negative integer" -- agree --prompts x --tokens -1
expect 2 "at least 1" -- agree --prompts x --tokens 0
expect 2 "fractions in (0, 1]" -- agree --prompts "$tmp" --budgets 0.02,2
expect 2 "fractions in (0, 1]" -- agree --prompts "$tmp" --budgets x
expect 2 "^fathom agree: --methods: unknown method" -- agree --prompts "$tmp" --methods nonsense:3
expect 1 "cannot open" -- agree --prompts "$tmp/missing.txt"
mkdir "$tmp/empty"
expect 1 "^fathom agree: no files found" -- agree --prompts "$tmp/empty"
expect 2 "--haystack is required" -- needle --samples 2
expect 2 "unknown option" -- needle --haystack x --bogus
expect 2 "--context in \[64" -- needle --haystack x --context 10
expect 2 "exactly one of --text" -- tokenize
expect 2 "exclude each other" -- tokenize --text a --count --offsets

source "$(dirname "$0")/../support/model_path.sh" # exits 77 without the model
export FATHOM_MODEL=$MODEL

# needle on haystacks that cannot fill the context: an error, a warning.
: >"$tmp/empty.txt"
expect 1 "^fathom needle: the haystack files hold no text" -- needle --haystack "$tmp/empty.txt" --samples 1
# a context beyond the model's window (8192): a warning before the work
expect 1 "^fathom needle: warning: 9012 tokens exceed the model's trained context of 8192" -- \
  needle --haystack "$tmp/empty.txt" --samples 1 --context 9000
printf 'ab.\n' >"$tmp/short.txt"
expect 0 "^fathom needle: warning: the prompt has [0-9]* tokens, fewer than --context 512" -- \
  needle --haystack "$tmp/short.txt" --samples 1 --methods dense --context 512 --tokens 1 --quiet

# tokenize: ASCII text round-trips, so the last offset is its byte length.
text='def add(a, b):
    return a + b  # sum'
expect 0 "" -- tokenize --text "$text" --offsets
last=$(tail -n 1 "$tmp/out" | cut -d' ' -f2)
[ "$last" = "${#text}" ] || { echo "FAIL: tokenize offsets end at $last, text has ${#text} bytes"; fail=1; }
expect 0 "" -- tokenize --text "$text" --count
count=$(cat "$tmp/out")
lines=$("$fathom" tokenize --text "$text" --offsets | wc -l)
[ "$count" = "$lines" ] && [ "$count" -ge 5 ] || { echo "FAIL: tokenize count $count vs $lines offsets"; fail=1; }
expect 2 "bit budget must be in \[1, 256\]" -- agree --prompts "$tmp/empty" --methods fathom:300 \
  --prompts "$0"

# agree on one short prompt: oracle agrees with itself, dense with itself.
cat >"$tmp/prompt.txt" <<'EOF'
import os
import sys


def read_lines(path):
    """Return the lines of a text file without their line breaks."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def count_words(lines):
    total = 0
    for line in lines:
EOF
t0=$(date +%s)
"$fathom" agree --prompts "$tmp/prompt.txt" --tokens 8 --methods fathom:48,sparq:16,fathom:48,oracle \
  --budgets 0.02 --threads 2 --json >"$tmp/agree.json" 2>"$tmp/agree.err"
rc=$?
echo "agree: $(( $(date +%s) - t0 )) s"
[ $rc -eq 0 ] || { echo "FAIL: agree exit $rc"; cat "$tmp/agree.err"; fail=1; }
"$fathom" generate --prompt-file "$tmp/prompt.txt" --tokens 8 --ignore-eos --threads 2 \
  >"$tmp/gen.txt" 2>/dev/null || { echo "FAIL: generate"; fail=1; }
# --time-limit: the first prompt always runs; one that would end past the limit does not start
"$fathom" agree --prompts "$tmp/prompt.txt" "$tmp/prompt.txt" --tokens 2 --methods fathom:48 --budgets 0.02 \
  --threads 2 --time-limit 1 --json >"$tmp/limit.json" 2>"$tmp/limit.err" || { echo "FAIL: agree --time-limit"; fail=1; }
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["prompts"]) == 1 and all(len(r["word_vs_oracle"]["per_prompt"]) == 1 for r in d["results"])' \
  "$tmp/limit.json" && grep -q "stopping after 1 of 2 prompts" "$tmp/limit.err" || { echo "FAIL: --time-limit: $(cat "$tmp/limit.err")"; fail=1; }
# generate --json: the same ids as --ids, its counts, timings and peak memory.
"$fathom" generate --prompt-file "$tmp/prompt.txt" --tokens 8 --ignore-eos --threads 2 --ids --quiet \
  >"$tmp/gen.ids" 2>/dev/null || { echo "FAIL: generate --ids"; fail=1; }
"$fathom" generate --prompt-file "$tmp/prompt.txt" --tokens 8 --ignore-eos --threads 2 --json \
  >"$tmp/gen.json" 2>/dev/null || { echo "FAIL: generate --json"; fail=1; }
"$fathom" generate --prompt-file "$tmp/prompt.txt" --tokens 8 --ignore-eos --threads 2 --json --attn fathom:48 \
  --k 40 >"$tmp/gen-sparse.json" 2>/dev/null || { echo "FAIL: generate --json --attn"; fail=1; }
python3 - "$tmp/gen.json" "$tmp/gen.ids" "$tmp/gen-sparse.json" <<'EOF' || { echo "FAIL: generate --json: $(cat "$tmp/gen.json")"; fail=1; }
import json, sys
g = json.load(open(sys.argv[1]))
ids = [int(x) for x in open(sys.argv[2]).read().split(",")]
assert g["ids"] == ids and g["attn"] == "dense" and g["k"] == 0 and g["decode_steps"] == 7
assert g["prompt_tokens"] > 40 and g["prefill_s"] > 0 and g["decode_s"] > 0
assert abs(g["prefill_tokens_per_s"] - g["prompt_tokens"] / g["prefill_s"]) < 0.01 * g["prefill_tokens_per_s"]
assert g["scan_bytes_per_step"] == 0 and g["peak_rss_kib"] > 90000  # the weights alone exceed that
s = json.load(open(sys.argv[3]))
assert s["attn"] == "fathom:48" and s["k"] == 40 and len(s["ids"]) == 8
assert 0 < s["selected_share"] < 1 and s["scan_bytes_per_step"] > 0
EOF
python3 - "$tmp/agree.json" "$tmp/gen.txt" <<'EOF' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
gen = open(sys.argv[2], encoding="utf-8").read()[:-1]  # generate ends with a newline
rows = {r["method"]: r for r in d["results"]}
twice = [r for r in d["results"] if r["method"] == "fathom:48"]
ok = True
def check(cond, what):
    global ok
    if not cond:
        print("FAIL:", what); ok = False
check(d["tokens"] == 8 and len(d["prompts"]) == 1, "header")
check(set(rows) == {"oracle", "dense", "fathom:48", "sparq:16"}, "rows %s" % sorted(rows))
for m in ("token_vs_oracle", "word_vs_oracle"):
    check(rows["oracle"][m]["mean"] == 1.0, "oracle vs itself: %s" % rows["oracle"][m])
for m in ("token_vs_dense", "word_vs_dense"):
    check(rows["dense"][m]["mean"] == 1.0, "dense vs itself: %s" % rows["dense"][m])
for r in rows.values():
    for m in ("token_vs_dense", "word_vs_dense", "token_vs_oracle", "word_vs_oracle"):
        check(0.0 <= r[m]["mean"] <= 1.0 and r[m]["stderr"] == 0.0 and r[m]["per_prompt"] == [r[m]["mean"]],
              "%s %s" % (r["method"], m))
    check(r["k_mean"] == (0 if r["method"] == "dense" else 37), "k of %s" % r["method"])
# The second fathom:48 run rebuilds its index after a rewind: same tokens.
untimed = [{key: val for key, val in r.items() if key != "decode_s"} for r in twice]
check(len(twice) == 2 and untimed[0] == untimed[1], "fathom:48 twice: %s" % twice)
check(len(d["results"]) == 5, "%d rows" % len(d["results"]))
# timings: every row but dense decodes 8 steps per prompt; the prefill is timed; peak memory
for r in d["results"]:
    check(r["decode_steps"] == (0 if r["method"] == "dense" else 8) and r["decode_s"] >= 0,
          "steps of %s: %s" % (r["method"], r["decode_steps"]))
check(d["prompts"][0]["prefill_s"] > 0 and d["prompts"][0]["dense_steps"] == 8, "prompt timings")
check(d["peak_rss_kib"] > 90000, "peak RSS %s" % d["peak_rss_kib"])
# dense vs oracle is symmetric
check(rows["dense"]["token_vs_oracle"] == rows["oracle"]["token_vs_dense"], "symmetry")
check(rows["oracle"]["bits_per_token"] == 1024.0, "oracle reads bf16 keys (16 x 64 bits)")
check(0 < rows["fathom:48"]["bits_per_token"] < rows["sparq:16"]["bits_per_token"] + 40,
      "fathom bits %s" % rows["fathom:48"]["bits_per_token"])
# Rewinding to the prefill and stepping the last prompt token reproduces
# plain generation (prefill of the whole prompt) token for token.
check(d["prompts"][0]["dense_text"] == gen, "dense continuation %r vs generate %r"
      % (d["prompts"][0]["dense_text"], gen))
sys.exit(0 if ok else 1)
EOF

# --branches: prompts cut from one dense prefill give exactly what separate
# prefills of the same prefixes give, for every method.
expect 2 "--cut must be code or prose" -- agree --prompts x --cut verse
expect 2 "--branches must be at most 4096" -- agree --prompts x --branches 5000
python3 - "$tmp/doc.txt" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(3):
        f.write("def step_%d(state, value):\n    if value > %d:\n        state.total += value * %d\n"
                "    else:\n        state.misses += %d\n    return state\n\n" % (i, i, i + 2, i + 1))
EOF
t0=$(date +%s)
branch_args=(--tokens 2 --methods fathom:48,sparq:16 --budgets 0.5 --threads 2 --json)
"$fathom" agree --prompts "$tmp/doc.txt" --branches 2 "${branch_args[@]}" >"$tmp/branch.json" 2>"$tmp/branch.err" ||
  { echo "FAIL: agree --branches: $(cat "$tmp/branch.err")"; fail=1; }
mkdir "$tmp/cuts"
python3 - "$tmp/doc.txt" "$tmp/branch.json" "$tmp/cuts" <<'EOF' || fail=1
import json, sys
text, d = open(sys.argv[1], "rb").read(), json.load(open(sys.argv[2]))
assert d["documents"] == 1 and [p["branch"] for p in d["prompts"]] == [0, 1], d["prompts"]
n = [p["n_tokens"] for p in d["prompts"]]
assert n == sorted(n, reverse=True) and len(set(n)) == 2 and n[1] >= 0.75 * n[0], n
assert d["prompts"][0]["prefill_tokens"] == n[0] - 1 and d["prompts"][1]["prefill_tokens"] == 0
for i, p in enumerate(d["prompts"]):
    head = text[:p["cut_byte"]].rstrip(b"\n")
    assert head.endswith(b":"), "cut %d after %r" % (i, head[-20:])
    open("%s/cut_%d.txt" % (sys.argv[3], i), "wb").write(text[:p["cut_byte"]])
for r in d["results"]:
    assert all(r[m]["stderr_documents"] is None and r[m]["stderr_cluster"] is None for m in
               ("token_vs_dense", "word_vs_dense", "token_vs_oracle", "word_vs_oracle")), r
EOF
"$fathom" agree --prompts "$tmp/cuts" "${branch_args[@]}" >"$tmp/separate.json" 2>"$tmp/branch.err" ||
  { echo "FAIL: agree on the cut files: $(cat "$tmp/branch.err")"; fail=1; }
echo "agree --branches: $(( $(date +%s) - t0 )) s"
python3 - "$tmp/branch.json" "$tmp/separate.json" <<'EOF' || fail=1
import json, sys
b, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert s["documents"] == 2 and len(b["prompts"]) == len(s["prompts"]) == 2
for pb, ps in zip(b["prompts"], s["prompts"]):
    assert pb["n_tokens"] == ps["n_tokens"] and pb["dense_ids"] == ps["dense_ids"], (pb, ps)
    assert pb["continuations"] == ps["continuations"], (pb["continuations"], ps["continuations"])
    # k = 50% of n: the sparse rows select, below every key
    assert all(0 < c["k"] < pb["n_tokens"] for c in pb["continuations"] if c["method"] != "dense")
for rb, rs in zip(b["results"], s["results"]):
    for m in ("token_vs_dense", "word_vs_dense", "token_vs_oracle", "word_vs_oracle"):
        assert rb[m]["per_prompt"] == rs[m]["per_prompt"], (rb["method"], m)
        # two documents of one prompt each: the document stderrs equal the prompt one
        assert abs(rs[m]["stderr_documents"] - rs[m]["stderr"]) < 2e-4, rs[m]
        assert abs(rs[m]["stderr_cluster"] - rs[m]["stderr"]) < 2e-4, rs[m]
EOF

# needle at ~1k tokens: dense attention retrieves the number.
# a haystack that does not change with the code: the Apache-2.0 text
cp "$(dirname "$0")/../../LICENSE" "$tmp/hay.txt"
t0=$(date +%s)
"$fathom" needle --haystack "$tmp/hay.txt" --context 1024 --samples 1 --methods dense \
  --threads 2 --json >"$tmp/needle.json" 2>"$tmp/needle.err"
rc=$?
echo "needle: $(( $(date +%s) - t0 )) s"
[ $rc -eq 0 ] || { echo "FAIL: needle exit $rc"; cat "$tmp/needle.err"; fail=1; }
python3 - "$tmp/needle.json" <<'EOF' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
ok = True
for s in d["samples"]:
    if not (900 <= s["n_tokens"] <= 1024):
        print("FAIL: sample of %d tokens" % s["n_tokens"]); ok = False
    if len(s["expected"]) != 1 or len(s["needles"]) != 1 or s["expected"][0] not in s["needles"][0]["text"]:
        print("FAIL: needle", s); ok = False
    if s["expected"][0] not in s["answers"]["dense@0"]:
        print("FAIL: dense missed %s: %r" % (s["expected"][0], s["answers"]["dense@0"])); ok = False
r = d["results"]
if len(r) != 1 or r[0]["method"] != "dense" or r[0]["score"] != 1.0:
    print("FAIL: results", r); ok = False
sys.exit(0 if ok else 1)
EOF

# the other RULER tasks: four needles, one asked for (dense retrieves it);
# variable tracking: a chain of 5 names in order, scored by the names found
expect 2 "--task: 'x' is not single, multikey or vt" -- needle --haystack x --task x
"$fathom" needle --task multikey --haystack "$tmp/hay.txt" --context 512 --samples 1 --methods dense \
  --threads 2 --json >"$tmp/multikey.json" 2>"$tmp/needle.err" || { echo "FAIL: needle multikey"; cat "$tmp/needle.err"; fail=1; }
"$fathom" needle --task vt --haystack "$tmp/hay.txt" --context 256 --samples 1 --tokens 12 --methods dense \
  --threads 2 --json >"$tmp/vt.json" 2>"$tmp/needle.err" || { echo "FAIL: needle vt"; cat "$tmp/needle.err"; fail=1; }
python3 - "$tmp/multikey.json" "$tmp/vt.json" <<'EOF' || fail=1
import json, re, sys
ok = True
def bad(*a):
    global ok
    print("FAIL:", *a); ok = False
mk, vt = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for s in mk["samples"]:
    words = [re.fullmatch(r"The special magic number for (\w+) is (\d{7})\.", n["text"]) for n in s["needles"]]
    if len(words) != 4 or not all(words) or len({w.group(1) for w in words}) != 4:
        bad("multikey needles", s["needles"])
    elif s["expected"] not in [[w.group(2)] for w in words]:
        bad("multikey asks for no needle's number", s)
    depths = [n["depth"] for n in s["needles"]]
    if depths != sorted(depths): bad("multikey needles out of depth order", depths)
    if s["expected"][0] not in s["answers"]["dense@0"]: bad("dense missed the asked needle", s)
if mk["results"][0]["score"] != 1.0: bad("multikey results", mk["results"])
total = 0.0
for s in vt["samples"]:
    names = s["expected"]
    if len(names) != 5 or len(set(names)) != 5 or not all(re.fullmatch("[A-Z]{5}", x) for x in names):
        bad("vt names", names)
    first = re.fullmatch(r"VAR ([A-Z]{5}) = (\d{5})\.", s["needles"][0]["text"])
    if not first or first.group(1) != names[0]: bad("vt chain head", s["needles"][0])
    for i in range(1, 5):
        if s["needles"][i]["text"] != "VAR %s = VAR %s." % (names[i], names[i - 1]): bad("vt chain", s["needles"][i])
    total += sum(x in s["answers"]["dense@0"] for x in names) / 5
if abs(vt["results"][0]["score"] - total / len(vt["samples"])) > 1e-4: bad("vt score", vt["results"], total)
sys.exit(0 if ok else 1)
EOF

[ $fail -eq 0 ] && echo "test_agree: all passed"
exit $fail
