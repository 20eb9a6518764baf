#!/usr/bin/env bash
# bench/cache_sim.py's gpu policy (the GPU tier's HBM cache):
#  - a hand-made trace (1 layer, 1 KV head, 2 query heads, d = 2, positions
#    126..128, so the closed and total block counts change across steps)
#    whose plane and row hits are worked out by hand below, for fill every
#    step and every 2 steps, including a tie in the line ranking (ties to the
#    lower 4 j + p) and direct-mapped row conflicts (a later token stays);
#  - on a seeded random trace: with every planned line fitting (budget 100%
#    of the index, depths <= 3 so at most 3 d lines against floor(3.4 d)),
#    the plane bytes hit equal an independent count (lines read by a step and
#    by the step before it, holding the blocks closed before it); more plane
#    budget never gives fewer plane hits (the kept lines are a prefix of one
#    ranking); row hits per step never exceed the slots;
#  - untrusted input: malformed traces are rejected with a message; a trace
#    without variance lines still gets LRU and LFU, and no gpu runs.
#   usage: test_cache_sim.sh [BUILD_DIR]   (the build directory is unused)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
sim="$root/bench/cache_sim.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Hand-made trace. Index: 1 pair x 3 blocks x d 2 x 34 = 204 bytes; budget
# 0.35 -> 71 bytes: planes (share 1) floor(71 / 10 / 3) = 2 lines, rows
# (share 0) floor(71 / 12) = 5 slots.
cat >"$tmp/hand.trace" <<'EOF'
# layers 1 q_heads 2 kv_heads 1 dim 2 prompt 126 attn fathom:48 k 2 model hand
126 0 0 0 23 3 0 5 126
126 0 0 1 12 3 0 10 126
v 126 0 0 4 1
127 0 0 0 13 3 0 10 126
127 0 0 1 03 2 127 0
v 127 0 0 1 4
128 0 0 0 12 3 0 127 128
128 0 0 1 02 2 5 128
v 128 0 0 2 2
EOF
# Planes (line (j, p) saves 8 bytes per held block, 10 for p = 0):
#  step 126 (n 127, 2 blocks), depths max (2, 3): 2 x (10+8 + 10+8+8) = 88
#    read, nothing held. Fill: var (4, 1): keys (0,0) 4, (0,1) 1, (1,0) 1,
#    (1,1) 1/4, (1,2) 1/16; 2 lines: (0,0), then the tie (0,1) [i 1] before
#    (1,0) [i 4]; 127 // 64 = 1 block held.
#  step 127 (n 128, 2 blocks), depths (1, 3): 2 x (10 + 26) = 72 read;
#    (0,0) held: 10 hit. Fill (every step): var (1, 4): (1,0) 4, then the tie
#    (0,0) 1 [i 0] before (1,1) 1 [i 5]; 128 // 64 = 2 blocks.
#  step 128 (n 129, 3 blocks), depths (1, 2): 3 x (10 + 18) = 84 read;
#    (0,0) and (1,0) held, 2 blocks: 40 hit.
#  fill every step: 50 / 244; every 2 steps (fills after 126 and 128):
#    step 128 still has (0,0), (0,1), 1 block: 10 + 10 = 20 / 244.
# Rows (5 slots, slot = token mod 5):
#  126: {0, 5, 10, 126} all miss; slot 0 <- 10 (the latest of 0, 5, 10),
#       slot 1 <- 126.
#  127: {0, 10, 126, 127}: 10, 126 hit; 0 misses and stays out (slot 0
#       holds the later 10); slot 2 <- 127.
#  128: {0, 5, 127, 128}: 127 hits; 0, 5, 128 miss.   3 / 12.
python3 "$sim" "$tmp/hand.trace" --json --budget 0.35 --plane-share 1 0 --fill-every 1 2 >"$tmp/hand.json" ||
  fail "cache_sim on the hand-made trace"
python3 - "$tmp/hand.json" <<'PY' || fails=$((fails + 1))
import json, sys
runs = [r for r in json.load(open(sys.argv[1]))["traces"][0]["runs"] if r["policy"] == "gpu"]
got = {(r["fill_every"], r["plane_share"]): r for r in runs}
want = {(1, 1.0): (50 / 244, 0.0, 2, 0), (2, 1.0): (20 / 244, 0.0, 2, 0),
        (1, 0.0): (0.0, 3 / 12, 0, 5), (2, 0.0): (0.0, 3 / 12, 0, 5)}
bad = 0
if sorted(got) != sorted(want):
    print("FAIL: gpu runs", sorted(got)); sys.exit(1)
for key, (plane, row, lines, slots) in want.items():
    r = got[key]
    if (abs(r["plane_hit"] - plane) > 1e-12 or abs(r["row_hit"] - row) > 1e-12 or r["lines"] != lines
            or r["slots"] != slots or r["plane_bytes"] != 244 or r["row_bytes"] != 12 * 8):
        print("FAIL: hand trace", key, r); bad += 1
print("hand trace: %d gpu runs checked" % len(want))
sys.exit(1 if bad else 0)
PY

# Seeded random trace: 2 layers x 2 KV heads x 2 query heads, d 8, 40 steps
# from position 200, rows biased to recent tokens.
python3 - "$tmp/rand.trace" <<'PY'
import random, sys
rng = random.Random(7)
L, H, G, d = 2, 2, 2, 8
with open(sys.argv[1], "w") as f:
    f.write(f"# layers {L} q_heads {H * G} kv_heads {H} dim {d} prompt 200 attn fathom:48 k 6 model rand\n")
    for pos in range(200, 240):
        for l in range(L):
            for h in range(H):
                for g in range(G):
                    depths = "".join(str(rng.randint(0, 3)) for _ in range(d))
                    rows = sorted({pos - min(pos, int(rng.expovariate(1 / 30))) if rng.random() < 0.7
                                   else rng.randrange(pos + 1) for _ in range(8)})
                    f.write(f"{pos} {l} {h} {g} {depths} {len(rows)} {' '.join(map(str, rows))}\n")
                f.write(f"v {pos} {l} {h} " + " ".join("%.9g" % rng.choice([0.5, 1.0, 2.0, rng.random() * 4])
                                                      for _ in range(d)) + "\n")
PY
: >"$tmp/rand.jsonl"
for b in 0.02 0.05 0.1 0.2 0.4 0.7 1.0; do
  python3 "$sim" "$tmp/rand.trace" --json --budget $b --plane-share 1 0 --fill-every 1 3 >>"$tmp/rand.jsonl" ||
    fail "cache_sim --budget $b on the random trace"
  echo >>"$tmp/rand.jsonl"
done
python3 - "$tmp/rand.trace" "$tmp/rand.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
steps, d = {}, 8
for line in open(sys.argv[1]):
    t = line.split()
    if line.startswith("#") or t[0] == "v":
        continue
    pos, key = int(t[0]), (int(t[1]), int(t[2]))
    dep = [int(c) for c in t[4]]
    s = steps.setdefault(pos, {}).setdefault(key, [[0] * d, set()])
    s[0] = [max(a, b) for a, b in zip(s[0], dep)]
    s[1].update(int(x) for x in t[6:])
order = sorted(steps)
# every planned line kept (budget 1.0): a line read at step s and at s - 1
# saves its bytes per block closed at s - 1
hit = total = 0
for i, pos in enumerate(order):
    n = pos + 1
    for key, (dep, _) in steps[pos].items():
        for j, t in enumerate(dep):
            for p in range(t):
                pb = 10 if p == 0 else 8
                total += pb * ((n + 63) // 64)
                if i and p < steps[order[i - 1]][key][0][j]:
                    hit += pb * ((order[i - 1] + 1) // 64)
docs = [json.loads(x) for x in open(sys.argv[2]).read().split("\n\n") if x.strip()]
bad, checks, bound = 0, 0, 0
prev = {}
for doc in docs:
    t = doc["traces"][0]
    for r in t["runs"]:
        if r["policy"] != "gpu":
            continue
        key = (r["fill_every"], r["plane_share"])
        if r["plane_share"] == 1.0:
            checks += 1
            if key in prev and r["plane_hit"] < prev[key] - 1e-15:
                print("FAIL: plane hits fell with more budget", t["budget"], key, r["plane_hit"], prev[key]); bad += 1
            prev[key] = r["plane_hit"]
            if t["budget"] == 1.0 and r["fill_every"] == 1:
                checks += 1
                if r["lines"] < 3 * d or abs(r["plane_hit"] - hit / total) > 1e-12 or r["plane_bytes"] != total:
                    print("FAIL: all lines kept", r["lines"], r["plane_hit"], hit / total); bad += 1
        else:
            checks += 1
            if r["max_row_hits"] > r["slots"] or (r["slots"] == 0 and r["row_hit"] != 0):
                print("FAIL: row hits above the slots", r["slots"], r["max_row_hits"]); bad += 1
            bound += r["max_row_hits"] == r["slots"] > 0
if not bound:
    print("FAIL: no budget where the slots bound the hits"); bad += 1
if checks != 7 * 2 + 1 + 7 * 2:
    print("FAIL: %d checks ran" % checks); bad += 1
print("random trace: %d checks" % checks)
sys.exit(1 if bad else 0)
PY

# Untrusted input.
bad_trace() { # NAME LINE: the hand trace with LINE appended must be rejected
  { cat "$tmp/hand.trace"; echo "$2"; } >"$tmp/bad.trace"
  out=$(python3 "$sim" "$tmp/bad.trace" 2>&1) && fail "$1 accepted"
  case "$out" in *"cache_sim: "*) ;; *) fail "$1: no message: $out" ;; esac
}
bad_trace "a depth above 4 planes" "128 0 0 0 15 1 3"
bad_trace "a row after the position" "128 0 0 0 11 1 129"
bad_trace "a row count that disagrees" "128 0 0 0 11 2 3"
bad_trace "a KV head out of range" "128 0 1 0 11 1 3"
bad_trace "a variance line of d - 1 values" "v 128 0 0 1"
bad_trace "a negative variance" "v 128 0 0 1 -1"
bad_trace "a depth string of d + 1 digits" "128 0 0 0 111 1 3"
printf '126 0 0 0 11 1 3\n' >"$tmp/nohead.trace"
python3 "$sim" "$tmp/nohead.trace" >/dev/null 2>&1 && fail "a trace without header accepted"
grep -v '^v ' "$tmp/hand.trace" >"$tmp/old.trace"
python3 "$sim" --json --budget 0.35 "$tmp/old.trace" >"$tmp/old.json" 2>"$tmp/old.err" || fail "an old trace rejected"
python3 - "$tmp/old.json" <<'PY' || fails=$((fails + 1))
import json, sys
runs = json.load(open(sys.argv[1]))["traces"][0]["runs"]
pol = sorted({r["policy"] for r in runs})
if pol != ["lfu", "lru"] or len(runs) != 6:
    print("FAIL: old trace runs", pol, len(runs)); sys.exit(1)
PY
grep -q "no variance lines" "$tmp/old.err" || fail "no note that the old trace has no gpu policy"
# a fill step without its variance line
grep -v '^v 127' "$tmp/hand.trace" >"$tmp/novar.trace"
python3 "$sim" "$tmp/novar.trace" --budget 0.35 >/dev/null 2>"$tmp/novar.err" && fail "a missing variance line accepted"
grep -q "no variance line for position 127" "$tmp/novar.err" || fail "missing variance: $(cat "$tmp/novar.err")"

# The budget is a fraction of the index of the traced (layer, KV head) pairs
# (the layers that keep one): the hand trace declared with 6 layers, of which
# it traces one, has the same 204-byte index and the same hits.
sed 's/^# layers 1 /# layers 6 /' "$tmp/hand.trace" >"$tmp/hand6.trace"
python3 "$sim" "$tmp/hand6.trace" --json --budget 0.35 --plane-share 1 0 --fill-every 1 2 >"$tmp/hand6.json" 2>/dev/null || fail "6-layer header"
python3 - "$tmp/hand.json" "$tmp/hand6.json" <<'PY' || fails=$((fails + 1))
import json, sys
a, b = (json.load(open(p))["traces"][0]["runs"] for p in sys.argv[1:3])
bad = [x["index_bytes"] for x in b if x["index_bytes"] != 204]
if bad or [(x["plane_hit"], x["row_hit"]) for x in a] != [(x["plane_hit"], x["row_hit"]) for x in b]:
    print("FAIL: the index or the hits depend on layers the trace does not hold: %s" % bad)
    sys.exit(1)
PY
[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "PASS"
