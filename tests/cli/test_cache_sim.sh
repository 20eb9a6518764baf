#!/usr/bin/env bash
# bench/cache_sim.py's gpu policy (the GPU tier's HBM cache):
#  - a hand-made trace (1 layer, 1 KV head, 2 query heads, d = 2, positions
#    126..128, so the closed and total block counts change across steps)
#    whose plane and row hits are worked out by hand below, for fill every
#    step and every 2 steps, including a tie in the line ranking (ties to the
#    lower 4 j + p) and direct-mapped row conflicts (a later token stays);
#  - the variants (fill plan|spare, rows later|replace) on the hand trace and
#    on two small traces worked out by hand: spare lines (beyond the plan,
#    ranked after every plan line, only channels with variance > 0), the
#    replace rule, the best variant;
#  - on a seeded random trace, windows 1 and 4: with every planned line
#    fitting (budget 100% of the index, depths <= 3 so at most 3 d lines
#    against floor(3.4 d)) and window 1, fill plan's plane bytes hit equal an
#    independent count (lines read by a step and by the step before it,
#    holding the blocks closed before it);
#    more plane budget never gives fewer plane hits (the kept lines are a
#    prefix of one ranking); fill spare never fewer than fill plan (it keeps
#    a superset) and more somewhere; the gpu policy equals the variant
#    spare/later; row hits per step never exceed the slots;
#  - the plan window (--window W): a hand-made trace where the line most of
#    the last W plans read beats the last plan's line of higher variance,
#    for W 1, 2, 3 and fill every 2 (every step notes its plan, fill or not),
#    and trace_points picking one window's runs;
#  - --as-context: the lines and slots a 1M-token session's budget buys,
#    worked out by hand on the hand trace (lines capped at the trace's 4 d,
#    slots scaled by the trace's mean union), the target's byte weighting and
#    the best share; bad option combinations refused;
#  - the plane bytes a step's plan shares with the previous step's, and those
#    a read-ahead by the previous plan adds to the cache's, by hand;
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
#  Read ahead by the previous plan (plane_ahead_hit: closed blocks, n // 64,
#    of the lines the previous plan read, less what the cache holds):
#    127 (closed 2, previous (2, 3)): (0,0) 1 block past the cache's 10,
#    (1,0) 20, (1,1) 16, (1,2) 16 = 62; 128 (closed 2, previous (1, 3)):
#    fill every step: (0,0), (1,0) cached, (1,1) 16; 78 / 244. Every 2
#    steps: (0,0) 10, (1,0) 20, (1,1) 16; 108 / 244. No lines: 72 + 56 =
#    128 / 244. Rows read ahead (row_ahead_hit: missed rows the previous
#    step's union holds): no slots, 127: 0, 10, 126; 128: 0, 127: 5 / 12; the
#    5 slots below: 127: 0 (127 missed, new); 128: 0 (5, 128 not in 127's
#    union): 2 / 12.
#  Read ahead and not read (plane_ahead_waste: the previous plan's lines the
#    step's plan drops, closed blocks less the cache): 127 drops (0,1), held
#    1 block by both fills: 8; 128 drops (1,2), not held: 16; 24 / 244; no
#    lines: 16 + 16 = 32 / 244. row_ahead_waste (the previous union's rows
#    not held before the step and not selected): no slots, 127: 5; 128: 10,
#    126: 3 / 12; the 5 slots: 127: 5 (0 and 5 not held, 0 selected); 128:
#    none (only 0 not held, selected): 1 / 12.
#  Reading ahead only what the last two steps read (*_ahead2_*): only 128 has
#    two steps before it: lines min((1, 3), (2, 3)) = (1, 3); of its plan
#    (1, 2) over 2 closed blocks: fill every step holds (0,0), (1,0): (1,1)
#    16; every 2 steps holds (0,0) 1 block: 10 + 20 + 16 = 46; no lines:
#    20 + 20 + 16 = 56. Dropped: (1,2) 16. Rows in both unions {0, 10,
#    126}: no slots, 0 read, 10 and 126 not: 1 / 12 and 2 / 12; 5 slots hold
#    10, 126: 0 read: 1 / 12, none wasted.
#  The same for every --window (here the default): the fill after 127 ranks
#    by plans 126 (2, 3) and 127 (1, 3), whose counts 2 are (0,0), (1,0),
#    (1,1), (1,2) and keys 1, 4, 1, 1/4: (1,0), (0,0) as from plan 127 alone.
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
want = {(1, 1.0): (50 / 244, 0.0, 2, 0, 78 / 244, 5 / 12, 24 / 244, 3 / 12, 16 / 244, 1 / 12, 16 / 244, 2 / 12),
        (2, 1.0): (20 / 244, 0.0, 2, 0, 108 / 244, 5 / 12, 24 / 244, 3 / 12, 46 / 244, 1 / 12, 16 / 244, 2 / 12),
        (1, 0.0): (0.0, 3 / 12, 0, 5, 128 / 244, 2 / 12, 32 / 244, 1 / 12, 56 / 244, 1 / 12, 16 / 244, 0.0),
        (2, 0.0): (0.0, 3 / 12, 0, 5, 128 / 244, 2 / 12, 32 / 244, 1 / 12, 56 / 244, 1 / 12, 16 / 244, 0.0)}
bad = 0
if sorted(got) != sorted(want):
    print("FAIL: gpu runs", sorted(got)); sys.exit(1)
for key, (plane, row, lines, slots, ahead, row_ahead, waste, row_waste, *two) in want.items():
    r = got[key]
    if (abs(r["plane_hit"] - plane) > 1e-12 or abs(r["row_hit"] - row) > 1e-12 or r["lines"] != lines
            or r["slots"] != slots or r["plane_bytes"] != 244 or r["row_bytes"] != 12 * 8
            or abs(r["plane_ahead_hit"] - ahead) > 1e-12 or abs(r["row_ahead_hit"] - row_ahead) > 1e-12
            or abs(r["plane_ahead_waste"] - waste) > 1e-12 or abs(r["row_ahead_waste"] - row_waste) > 1e-12
            or any(abs(r[f] - v) > 1e-12 for f, v in zip(("plane_ahead2_hit", "row_ahead2_hit",
                                                          "plane_ahead2_waste", "row_ahead2_waste"), two))):
        print("FAIL: hand trace", key, r); bad += 1
print("hand trace: %d gpu runs checked" % len(want))
sys.exit(1 if bad else 0)
PY

# Variants (--variants: fill plan|spare x rows later|replace, fill every step).
# Rows, replace (the latest missed token of each slot replaces what it held),
# on the hand trace's 5 slots:
#  126: {0, 5, 10, 126} all miss; slot 0 <- 10 (the latest of 0, 5, 10),
#       slot 1 <- 126.
#  127: {0, 10, 126, 127}: 10, 126 hit; 0 misses and replaces 10 in slot 0;
#       slot 2 <- 127.
#  128: {0, 5, 127, 128}: 0 and 127 hit; 5, 128 miss.   4 / 12 (later: 3 / 12).
# Planes on the hand trace: 2 lines, fewer than the plan's at every fill, so
# spare lines never enter: both fills give the gpu policy's 50 / 244.
python3 "$sim" "$tmp/hand.trace" --json --budget 0.35 --plane-share 1 0 --fill-every 1 --variants \
  >"$tmp/var.json" || fail "cache_sim --variants on the hand-made trace"
# Spare lines: d = 2, var (1, 4) at both fills, 1 query head.
#  step 127 (n 128, 2 blocks), depths (2, 0): (0,0) 2 x 10 + (0,1) 2 x 8 = 36
#    read, nothing held. Fill, 3 lines (budget 0.45 of 204 bytes = 91.8:
#    floor(91.8 / 10 / 3)): the plan's (0,0) key 1, (0,1) key 1/4 first (a
#    plan line ranks before every spare line, even (1,0) of key 4), then the
#    best spare line (1,0) key 4; fill plan keeps only the plan's 2 lines.
#    128 // 64 = 2 blocks held.
#  step 128 (n 129, 3 blocks), depths (2, 1): 3 x (10 + 8 + 10) = 84 read;
#    plan: (0,0), (0,1) hit 2 x 18 = 36 of 120; spare: also (1,0), 56 / 120.
#    (Ranking every line by key alone would keep (1,0), (0,0), (1,1): 40.)
cat >"$tmp/spare.trace" <<'EOF2'
# layers 1 q_heads 1 kv_heads 1 dim 2 prompt 127 attn fathom:48 k 2 model spare
127 0 0 0 20 1 0
v 127 0 0 1 4
128 0 0 0 21 1 0
v 128 0 0 1 4
EOF2
# Channel 1 without variance (var (1, 0)) and 5 lines (budget 0.75: 153
# bytes): spare lines come from channel 0 only, (0,2), (0,3): step 128's
# (1,0) is not held, 36 / 120 (counting (1,0) of key 0 as a spare line: 56).
sed 's/^v \(12[78]\) 0 0 1 4$/v \1 0 0 1 0/' "$tmp/spare.trace" >"$tmp/spare0.trace"
python3 "$sim" "$tmp/spare.trace" --json --budget 0.45 --plane-share 1 --fill-every 1 --variants \
  >"$tmp/spare.json" || fail "cache_sim --variants on the spare-line trace"
python3 "$sim" "$tmp/spare0.trace" --json --budget 0.75 --plane-share 1 --fill-every 1 --variants \
  >"$tmp/spare0.json" || fail "cache_sim --variants on the zero-variance trace"
# Plane bytes the previous plan reads too (per block: 8 a line, 2 a read
# channel's scale; each step's blocks): the hand trace's plans (2, 3),
# (1, 3), (1, 2) are each inside the last: 1. The spare trace: step 128's
# (2, 1) = 18 + 10 per block against the previous (2, 0): 18 / 28.
python3 - "$tmp/hand.json" "$tmp/spare.json" <<'PY' || fail "plane bytes in the previous plan"
import json, sys
got = [json.load(open(p))["traces"][0]["reuse"]["plane_bytes_in_previous_plan"] for p in sys.argv[1:]]
sys.exit(0 if abs(got[0] - 1) < 1e-12 and abs(got[1] - 18 / 28) < 1e-12 else print("got", got) or 1)
PY
python3 - "$tmp/var.json" "$tmp/spare.json" "$tmp/spare0.json" <<'PY' || fails=$((fails + 1))
import json, sys
bad = 0
def check(path, want, best=None):
    global bad
    t = json.load(open(path))["traces"][0]
    got = {(r["fill"], r["rows"], r["plane_share"]): r for r in t["runs"] if r["policy"] == "variant"}
    if sorted(got) != sorted(want):
        print("FAIL: variant runs of", path, sorted(got)); bad += 1; return
    for key, (plane, row) in want.items():
        r = got[key]
        if abs(r["plane_hit"] - plane) > 1e-12 or abs(r["row_hit"] - row) > 1e-12 or r["fill_every"] != 1:
            print("FAIL: variant", path, key, r["plane_hit"], r["row_hit"]); bad += 1
    if best is not None:
        b = t.get("best_variant", {})
        if (b.get("fill"), b.get("rows"), b.get("plane_share")) != best:
            print("FAIL: best variant of", path, b); bad += 1
h = {}
for fill in ("plan", "spare"):
    for rows, rh in (("later", 3 / 12), ("replace", 4 / 12)):
        h[(fill, rows, 1.0)] = (50 / 244, 0.0)
        h[(fill, rows, 0.0)] = (0.0, rh)
# hand trace: planes 50 of 244 bytes + 0 rows against rows 4 of 12 x 8 bytes:
# 50 / 340 > 32 / 340, the first such run (plan, later) is the best
check(sys.argv[1], h, ("plan", "later", 1.0))
check(sys.argv[2], {(f, r, 1.0): (p, 0.0) for f, p in (("plan", 36 / 120), ("spare", 56 / 120))
                    for r in ("later", "replace")}, ("spare", "later", 1.0))
check(sys.argv[3], {(f, r, 1.0): (36 / 120, 0.0) for f in ("plan", "spare") for r in ("later", "replace")})
print("variants: checked")
sys.exit(1 if bad else 0)
PY

# The plan window: 1 layer, 1 KV head, 1 query head, d = 2, var (1, 4) at
# every step (keys (0,0) 1, (1,0) 4), positions 127..130 (n 128..131: 2, 3,
# 3, 3 blocks, 2 closed). Budget 0.2 of 1 x 3 x 2 x 34 = 204 bytes: 40 //
# 10 // 3 = 1 line. Plans read (0,0), (0,0), (1,0), (0,0): 20 + 30 + 30 +
# 30 = 110 bytes. Fill every step; a held line hits 10 x 2 blocks:
#  W 1: after 127 (0,0); 128 hits 20; after 128 (0,0); 129 misses; after
#    129 (1,0); 130 misses: 20 / 110.
#  W 3: after 129 (0,0) counts 2, (1,0) 1: (0,0) despite its lower key;
#    128 and 130 hit: 40 / 110.
#  W 2: after 129 plans 128, 129 count (0,0) and (1,0) once each: the key
#    keeps (1,0) (127 forgotten); 130 misses: 20 / 110.
#  W 3, fill every 2 (after 127 and 129): 128 hits; the fill after 129
#    counts 127 and 128 too (every step notes its plan): (0,0); 130 hits:
#    40 / 110.
cat >"$tmp/win.trace" <<'EOF3'
# layers 1 q_heads 1 kv_heads 1 dim 2 prompt 127 attn fathom:48 k 1 model win
127 0 0 0 10 1 0
v 127 0 0 1 4
128 0 0 0 10 1 0
v 128 0 0 1 4
129 0 0 0 01 1 0
v 129 0 0 1 4
130 0 0 0 10 1 0
v 130 0 0 1 4
EOF3
python3 "$sim" "$tmp/win.trace" --json --budget 0.2 --plane-share 1 --fill-every 1 2 --window 1 2 3 \
  >"$tmp/win.json" || fail "cache_sim --window on the window trace"
python3 - "$tmp/win.json" <<'PY' || fails=$((fails + 1))
import json, sys
runs = [r for r in json.load(open(sys.argv[1]))["traces"][0]["runs"] if r["policy"] == "gpu"]
got = {(r["window"], r["fill_every"]): r for r in runs}
want = {(1, 1): 20, (2, 1): 20, (3, 1): 40, (3, 2): 40}
bad = 0
if len(got) != 6:
    print("FAIL: window runs", sorted(got)); sys.exit(1)
for key, hit in want.items():
    r = got[key]
    if r["lines"] != 1 or r["plane_bytes"] != 110 or abs(r["plane_hit"] - hit / 110) > 1e-12:
        print("FAIL: window", key, r["lines"], r["plane_bytes"], r["plane_hit"]); bad += 1
print("window trace: %d runs checked" % len(want))
sys.exit(1 if bad else 0)
PY
# trace_points on runs of windows 1 and 3 (share 1: 1 line here at any
# context): one window's rates, --window needed
python3 "$sim" "$tmp/win.trace" --json --budget 0.2 --plane-share 1 --only-as --as-context 1048576 \
  --as-dim 2 --as-union 1 --window 1 3 >"$tmp/winas.json" || fail "cache_sim --as-context --window 1 3"
python3 "$root/bench/trace_points.py" "$tmp/winas.json" >/dev/null 2>&1 &&
  fail "trace_points chose a window itself among several"
pts=$(python3 "$root/bench/trace_points.py" "$tmp/winas.json" --window 3) || fail "trace_points --window 3"
[ "$pts" = "--trace-point win/100%:1048576:0.3636:0.0000" ] || fail "trace_points --window 3: $pts"
pts=$(python3 "$root/bench/trace_points.py" "$tmp/winas.json" --window 1) || fail "trace_points --window 1"
[ "$pts" = "--trace-point win/100%:1048576:0.1818:0.0000" ] || fail "trace_points --window 1: $pts"
python3 "$sim" "$tmp/win.trace" --window 0 >/dev/null 2>&1 && fail "--window 0 accepted"

# --as-context 1048576 --as-dim 128 --as-union 1000, budget 0.1: a pair's
# index is 16384 blocks x 128 x 34 = 71,303,168 bytes. Share 1: int(7,130,316.8)
# // (10 x 16384) = 43 lines (capped at the trace's 4 d = 8), 0 slots. Share
# 0.5: 3,565,158 // 163,840 = 21 lines (-> 8); target slots 3,565,158 // 516 =
# 6,909 = 6.909 x union; the trace's mean union is 4 (every step selects 4
# rows), so round(27.636) = 28 slots here. Share 0: 0 lines, 13,818 target
# slots -> 55 here.
# Planes with every line held (fills after 126 and 127, spare lines of both
# channels): step 127 depths (1, 3), 1 block held: 10 + 10 + 8 + 8 = 36;
# step 128 (1, 2), 2 blocks: 20 + 20 + 16 = 56: 92 / 244.
# Rows with 28 or 55 slots (tokens 0, 5, 10, 126, 127, 128 never collide):
# step 127 hits 0, 10, 126; step 128 hits 0, 5, 127: 6 / 12.
# The target's bytes: planes = the trace's mean plane bytes per block
# ((8 x 5 + 4) + (8 x 4 + 4) + (8 x 3 + 4)) / 3 = 36 x 16384 = 589,824; rows
# 4 x 128 x 1000 = 512,000.
python3 "$sim" "$tmp/hand.trace" --json --budget 0.1 --plane-share 1 0.5 0 --only-as --as-context 1048576 \
  --as-union 1000 >"$tmp/as.json" || fail "cache_sim --as-context on the hand-made trace"
python3 - "$tmp/as.json" <<'PY' || fails=$((fails + 1))
import json, sys
t = json.load(open(sys.argv[1]))["traces"][0]
runs = {r["plane_share"]: r for r in t["runs"]}
P, R = 36 * 16384, 512000
want = {1.0: (8, 0, 0, 92 / 244, 0.0), 0.5: (8, 28, 6909, 92 / 244, 0.5), 0.0: (0, 55, 13818, 0.0, 0.5)}
bad = 0
if sorted(runs) != sorted(want) or {r["policy"] for r in t["runs"]} != {"as"}:
    print("FAIL: as runs", sorted(runs), {r["policy"] for r in t["runs"]}); sys.exit(1)
for share, (lines, slots, target, plane, row) in want.items():
    r = runs[share]
    tb = (plane * P + row * R) / (P + R)
    if ((r["lines"], r["slots"], r["as_slots"]) != (lines, slots, target) or abs(r["plane_hit"] - plane) > 1e-12
            or abs(r["row_hit"] - row) > 1e-12 or abs(r["as_bytes_hit"] - tb) > 1e-12
            or r["as_plane_bytes"] != P or r["as_row_bytes"] != R):
        print("FAIL: as share", share, r); bad += 1
b = t["best_as"]
if len(b) != 1 or b[0]["plane_share"] != 0.5 or b[0]["as_context"] != 1048576:
    print("FAIL: best share", b); bad += 1
if abs(t["trace_union"] - 4) > 1e-12 or abs(t["trace_plane_bytes_per_block"] - 36) > 1e-12:
    print("FAIL: trace shape", t["trace_union"], t["trace_plane_bytes_per_block"]); bad += 1
print("as-context: %d shares checked" % len(want))
sys.exit(1 if bad else 0)
PY
# bench/trace_points.py: the best share (0.5) by default, and the asked shares
pts=$(python3 "$root/bench/trace_points.py" "$tmp/as.json") || fail "trace_points on the as runs"
[ "$pts" = "--trace-point hand/50%:1048576:0.3770:0.5000" ] || fail "trace_points: $pts"
pts=$(python3 "$root/bench/trace_points.py" "$tmp/as.json" --shares 0 1) || fail "trace_points --shares"
[ "$pts" = "--trace-point hand/100%:1048576:0.3770:0.0000 --trace-point hand/0%:1048576:0.0000:0.5000" ] ||
  fail "trace_points --shares: $pts"
python3 "$root/bench/trace_points.py" "$tmp/as.json" --contexts 131072 >/dev/null 2>&1 &&
  fail "trace_points printed points of a context the runs lack"
# --as-rows: the row rules on the hand trace's unions {0, 5, 10, 126},
# {0, 10, 126, 127}, {0, 5, 127, 128} with 3 slots (share 0, target slots
# 13,818, --as-union 18424: round(13818 / 18424 x 4) = 3).
#  later (slot = token mod 3): 126 fills slot 0 <- 126 (0 stays out), 1 <- 10,
#    2 <- 5; 127: 10, 126 hit, 0 out, 127 replaces 10; 128: 5, 127 hit, 0 out,
#    128 replaces 5.   4 / 12.
#  lru (one set of 3): 126: 0, 5, 10 enter, 126 stays out (every way entered
#    this step); 127: 0, 10 hit, 126 evicts 5, 127 out; 128: 0 hits, 5
#    evicts 10, 127 evicts 126, 128 out.   3 / 12.
#  ways2: one set of 2 ways (3 // 2 sets), so 2 slots: 126: 0, 5 enter;
#    127: 0 hits, 10 evicts 5; 128: 0 hits, 5 evicts 10.   2 / 12.
#  ways4: 4 ways over 3 slots is one set of 3: as lru.   3 / 12.
#  latest2 (one set keeping its 2 latest tokens): 126 keeps 10, 126; 127: 10,
#    126 hit, keeps 126, 127; 128: 127 hits, keeps 127, 128.   3 / 12.
#  latest4 (one set of 3): 126 keeps 5, 10, 126; 127: 10, 126 hit, keeps 10,
#    126, 127; 128: 127 hits, keeps 126, 127, 128.   3 / 12.
python3 "$sim" "$tmp/hand.trace" --json --budget 0.1 --plane-share 0 --only-as --as-context 1048576 \
  --as-union 18424 --as-rows later lru ways2 ways4 latest2 latest4 >"$tmp/rules.json" || fail "cache_sim --as-rows"
python3 - "$tmp/rules.json" <<'PY' || fails=$((fails + 1))
import json, sys
t = json.load(open(sys.argv[1]))["traces"][0]
got = {r["rows"]: r for r in t["runs"]}
want = {"later": 4 / 12, "lru": 3 / 12, "ways2": 2 / 12, "ways4": 3 / 12, "latest2": 3 / 12, "latest4": 3 / 12}
bad = 0
if sorted(got) != sorted(want) or len(t["runs"]) != len(want):
    print("FAIL: row rule runs", sorted(got)); sys.exit(1)
for rule, hit in want.items():
    if got[rule]["slots"] != 3 or abs(got[rule]["row_hit"] - hit) > 1e-12:
        print("FAIL: rows", rule, got[rule]["slots"], got[rule]["row_hit"]); bad += 1
if sorted(b["rows"] for b in t["best_as"]) != sorted(want):
    print("FAIL: best per rule", t["best_as"]); bad += 1
print("row rules: %d checked" % len(want))
sys.exit(1 if bad else 0)
PY
python3 "$root/bench/trace_points.py" "$tmp/rules.json" >/dev/null 2>&1 &&
  fail "trace_points took runs of several row rules without --rows"
pts=$(python3 "$root/bench/trace_points.py" "$tmp/rules.json" --rows ways2) || fail "trace_points --rows"
[ "$pts" = "--trace-point hand/0%:1048576:0.0000:0.1667" ] || fail "trace_points --rows ways2: $pts"
python3 "$sim" "$tmp/hand.trace" --only-as --as-context 1048576 --as-union 10 --as-rows ways3 >/dev/null 2>&1 &&
  fail "--as-rows ways3 accepted"
# The W-way rules are the GPU tier's row_ways W (include/fathom_cuda.h, its
# kernels and test_cuda_tier's host model): per way a tag and a stamp, 2 x the
# step it was read, + 1 where inserted; the step's missed rows (ascending)
# take the way of least (stamp, tag) not read this step, empty ways first, or
# stay out. On seeded random unions (clustered, so sets fill and refill) the
# simulator's ordered-dict rule must give the same hits every step.
python3 - "$sim" <<'PY' || fail "cache_sim's W-way rules differ from the GPU's stamp-and-tag form"
import importlib.util, random, sys
spec = importlib.util.spec_from_file_location("cache_sim", sys.argv[1])
cs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cs)

def gpu_step(tags, stamps, sel, sets, W, now):
    missed, hits = [], 0
    for r in sorted(sel):
        s0 = (r % sets) * W
        way = next((x for x in range(W) if tags[s0 + x] == r + 1), None)
        if way is None:
            missed.append(r)
        else:
            hits += 1
            stamps[s0 + way] = 2 * now
    for r in missed:
        s0 = (r % sets) * W
        ok = [x for x in range(W) if not tags[s0 + x] or stamps[s0 + x] >> 1 != now]
        if ok:
            x = min(ok, key=lambda x: (stamps[s0 + x], tags[s0 + x]) if tags[s0 + x] else (-1, 0))
            tags[s0 + x], stamps[s0 + x] = r + 1, 2 * now + 1
    return hits

rng = random.Random(7)
compared = differ = 0
for W in (2, 4, 8):
    for sets in (3, 17, 64):
        held, tags, stamps = {}, [0] * (sets * W), [0] * (sets * W)
        hot = rng.sample(range(5000), 300)
        for step in range(60):
            sel = set(rng.sample(hot, 120)) | set(rng.sample(range(5000), 40))
            a = cs.row_slots_step("ways%d" % W, held, sel, sets * W, step)
            b = gpu_step(tags, stamps, sel, sets, W, step)
            compared += 1
            differ += a != b
print("W-way rules: %d steps compared, %d differ" % (compared, differ))
sys.exit(0 if compared == 540 and differ == 0 else 1)
PY
python3 "$sim" "$tmp/hand.trace" --as-context 1048576 >/dev/null 2>&1 && fail "--as-context without --as-union accepted"
python3 "$sim" "$tmp/hand.trace" --only-as >/dev/null 2>&1 && fail "--only-as without --as-context accepted"
python3 "$sim" "$tmp/hand.trace" --as-context 0 --as-union 10 >/dev/null 2>&1 && fail "--as-context 0 accepted"

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
  python3 "$sim" "$tmp/rand.trace" --json --budget $b --plane-share 1 0 --fill-every 1 3 --variants --window 1 4 \
    >>"$tmp/rand.jsonl" ||
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
bad, checks, bound, spare_more = 0, 0, 0, 0
prev = {}
for doc in docs:
    t = doc["traces"][0]
    var = {(r["fill"], r["rows"], r["plane_share"], r["window"]): r for r in t["runs"] if r["policy"] == "variant"}
    for r in t["runs"]:
        if r["policy"] != "gpu":
            continue
        key, w = (r["fill_every"], r["plane_share"], r["window"]), r["window"]
        if r["fill_every"] == 1:
            checks += 1
            v, p = var[("spare", "later", r["plane_share"], w)], var[("plan", "later", r["plane_share"], w)]
            if (r["plane_hit"], r["row_hit"]) != (v["plane_hit"], v["row_hit"]) or p["plane_hit"] > v["plane_hit"]:
                print("FAIL: gpu against spare/later and plan/later", t["budget"], key, r["plane_hit"],
                      v["plane_hit"], p["plane_hit"]); bad += 1
            spare_more += p["plane_hit"] < v["plane_hit"]
        if r["plane_share"] == 1.0:
            checks += 1
            if key in prev and r["plane_hit"] < prev[key] - 1e-15:
                print("FAIL: plane hits fell with more budget", t["budget"], key, r["plane_hit"], prev[key]); bad += 1
            prev[key] = r["plane_hit"]
            if t["budget"] == 1.0 and r["fill_every"] == 1 and w == 1:
                checks += 1
                p = var[("plan", "later", 1.0, 1)]
                if p["lines"] < 3 * d or abs(p["plane_hit"] - hit / total) > 1e-12 or p["plane_bytes"] != total:
                    print("FAIL: all lines kept", p["lines"], p["plane_hit"], hit / total); bad += 1
        else:
            checks += 1
            if r["max_row_hits"] > r["slots"] or (r["slots"] == 0 and r["row_hit"] != 0):
                print("FAIL: row hits above the slots", r["slots"], r["max_row_hits"]); bad += 1
            bound += r["max_row_hits"] == r["slots"] > 0
if not bound:
    print("FAIL: no budget where the slots bound the hits"); bad += 1
if not spare_more:
    print("FAIL: no budget where spare lines add plane hits"); bad += 1
if checks != 2 * (7 * 2 + 7 * 2 + 7 * 2) + 1:
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
