#!/usr/bin/env python3
"""Cache simulator for decode traces (bench_decode_trace): for an HBM byte
budget and a policy, the fraction of plane bytes and of row bytes a GPU step
would find resident instead of sending over the link.

  bench/cache_sim.py TRACE [TRACE ...] [--budget 0.1] [--plane-share 0.5] [--fill-every 1 16]
                    [--window 16 ...] [--variants] [--as-context N ... --as-union U [--as-dim 128]
                    [--as-fill-every 1] [--as-rows later ...] [--only-as]] [--json]

Model of what crosses the link, per step and (layer, KV head):
  planes: the scan reads plane p of channel j for p < depth_j. A plane unit
    (layer, kv head, j, p) holds 8 bytes per 64-token block, plus the 2-byte
    fp16 scales for p = 0. A resident unit saves the bytes of the blocks it
    holds; blocks closed since it was loaded cross once and join it; the
    open (last, partial) block always crosses (it is re-quantized each step).
  rows: the union over the group's query heads of the selected rows; a row
    is its key and value in fp16 (4 * dim bytes). A resident row crosses 0.
Budget: a fraction of the session's index (all planes and scales of every
traced layer and KV head at the trace's last position: the layers that keep an
index; Gemma 3's sliding-window layers keep none and are not traced); plane-share of it for
planes, the rest for rows. Policies, separately for planes and rows: LRU by bytes (touched in the
order the step reads them) and LFU (after each step, the units read most
often so far; see the classes).
gpu: the GPU tier's own HBM cache (src/cuda/tier_cache.cu, tier_step.cu),
  given the same bytes: per (layer, KV head) traced,
  lines = min(floor(plane bytes / (pairs * 10 * blocks)), 4 * dim) plane lines
  (blocks = ceil(last length / 64)) and slots = floor(row bytes / (pairs *
  (4 * dim + 4))) row slots. After step 0 and every F steps after it
  (--fill-every) the lines are chosen again from the last W plans (--window,
  fathom_cuda_tier_cache_config.window): every step notes its plan; a line
  (j, p) counts the plans among the last W (this step's included) with
  p < depth_j. Lines counted at least once rank first, by count descending,
  then by var_j / 4^p descending (var: the running key variance the trace's
  "v" lines give at the fill's step), ties to the lower 4 j + p; then the
  spare lines (count 0, of every channel with var_j > 0) ranked the same way
  after them. W = 1 is the fill from that step's plan alone (the plan's lines,
  then spare lines). The first `lines` are kept, holding the blocks closed at
  that fill (floor(length / 64)); a kept line read by a step saves 8 bytes
  per held block, line (j, 0) also the 2-byte scales.
  Rows: slot = token mod slots; a row hits when its slot holds it; after the
  step each missed row enters its slot unless the slot holds a later token.
  The cache starts empty.
  Associative rows (--as-rows ways2|ways4|ways8|lru; the GPU's row_ways 2, 4,
  8 are ways2|ways4|ways8):
  the slots form max(1, floor(slots / W)) sets of min(W, slots) ways (lru:
  one set of all slots), set = token mod sets; a step reads its rows in
  ascending token order, a row hits when its set holds it (the read makes
  it the set's newest); after the step the missed rows, in ascending token order, enter
  their set, each evicting the set's row read longest ago unless that row
  was read or entered this step (then it stays out).
  Latest rows (--as-rows latest2|latest4|latest8): the same sets, each
  keeping the W latest tokens among those it held and the step's missed
  rows of the set (the direct-mapped "later" rule with W ways).
variant (--variants): the gpu policy filled every step (a run per --window) with fill "plan"
  (the plan's lines only) or "spare" (as gpu) and rows "later" (as gpu) or
  "replace" (the latest missed token of each slot replaces what the slot
  held), at each --plane-share; best_variant: the one keeping the most plane
  and row bytes off the link (bytes as the step reads them), ties listed.
as (--as-context N): the gpu policy (filled every --as-fill-every steps, a
  run per --window) given the lines and
  slots that --budget of the index of a longer session would buy: a session
  of N tokens, head dim D (--as-dim) and a mean union of U rows per (layer,
  KV head) (--as-union: the target step's, e.g. bench_cuda_tier's union_mean).
  Per (layer, KV head) its index is B = ceil(N / 64) D 34 bytes, so
  lines = floor(share budget B / (10 ceil(N / 64))) = floor(3.4 share budget D)
  (at most 4 D_trace) and target slots = floor((1 - share) budget B / (4 D + 4));
  the trace gets the same lines (a fathom:B plan is B lines at every d) and
  slots = round(target slots / U x the trace's mean union): the same multiple
  of a step's rows. as_bytes_hit weighs the plane and row hits by the target
  step's bytes: planes = the trace's mean plane bytes per block x ceil(N / 64),
  rows = 4 D U; best_as: per N and window, the share with the most as_bytes_hit. What does
  not carry over: row reuse at the target's k and n (the trace's own k),
  plans over D channels instead of the trace's, and the open block, which
  never hits: 1 of the trace's ceil(n / 64) blocks (1 in 61 at 3,900 tokens,
  1 in 16,384 at 1M), so short traces understate plane hits by that share.
gpu and as runs also report plane_ahead_hit and row_ahead_hit: of a step's
plane and row bytes, those the cache lacks that the previous step of the
same (layer, KV head) read (its plan's lines, in the step's closed blocks;
its union's rows): what a step reading each layer's lines and rows ahead by
that step's plan and union, into staging beside the cache, would add to
plane_hit and row_hit; plane_ahead_waste and row_ahead_waste: what that
read-ahead would also move that the step does not read (the previous plan's
lines it drops, the previous union's rows it does not select), against the
step's plane and row bytes. The *_ahead2_* fields: the same read-ahead
staging only what the last two steps both read (per channel the lower of
the two depths; rows in both unions).
Also printed: the fraction of a step's rows selected by the previous step and
by one of the last 8 steps (union over the group), to compare with captures,
and of its plane bytes that the previous step's plan of the same (layer, KV
head) reads too (per channel min(t, t') lines).
"""
import argparse
import json
import sys
from collections import OrderedDict


PLANES = 4  # FATHOM_PLANES
GPU_FILL = "spare"  # what fathom_cuda_tier_cache_fill keeps: "plan" or "spare" (gpu_lines)
GPU_ROWS = "later"  # the tier step's default row-slot rule (row_ways 0 or 1; "replace": a variant)
ASSOC_ROWS = {"lru": 0, "ways2": 2, "ways4": 4, "ways8": 8}  # associative row rules: ways (0: one set of all slots)
LATEST_ROWS = {"latest2": 2, "latest4": 4, "latest8": 8}  # sets that keep their W latest tokens
GPU_WINDOW = 16  # plans a fill counts (--window; FATHOM_CUDA_TIER_CACHE_WINDOW)
BLOCK = 64  # FATHOM_BLOCK_TOKENS


class TraceError(ValueError):
    pass


def read_trace(path):
    """meta, steps (each {(layer, kv head): [depths max over the group or None,
    rows union]} plus "_pos") and var {(position, layer, kv head): [dim]}.
    The file is untrusted: every field is checked against the header."""
    meta, steps, var = None, {}, {}
    with open(path) as f:
        for no, line in enumerate(f, 1):
            where = f"{path}:{no}"
            if line.startswith("#"):
                head, _, name = line[1:].partition(" model ")
                t = head.split()
                meta = {t[i]: t[i + 1] for i in range(0, len(t) - 1, 2)}
                meta["model"] = name.strip()
                try:
                    dims = [int(meta[k]) for k in ("layers", "kv_heads", "dim", "prompt", "k")]
                except (KeyError, ValueError):
                    raise TraceError(f"{where}: header lacks layers, kv_heads, dim, prompt or k") from None
                if min(dims) < 1 or dims[2] > 1024:
                    raise TraceError(f"{where}: header sizes out of range")
                layers, kvh_n, dim = dims[:3]
                continue
            if meta is None:
                raise TraceError(f"{where}: record before the header")
            t = line.split()
            try:
                if t and t[0] == "v":
                    pos, layer, kvh = int(t[1]), int(t[2]), int(t[3])
                    v = [float(x) for x in t[4:]]
                    if len(v) != dim or not all(0.0 <= x < float("inf") for x in v):
                        raise ValueError
                else:
                    pos, layer, kvh, count = int(t[0]), int(t[1]), int(t[2]), int(t[5])
                    depths = None if t[4] == "-" else [int(c, 16) for c in t[4]]
                    rows = [int(x) for x in t[6:]]
                    if (len(rows) != count or (depths is not None and (len(depths) != dim or max(depths) > PLANES))
                            or any(r < 0 or r > pos for r in rows)):
                        raise ValueError
            except (ValueError, IndexError):
                raise TraceError(f"{where}: malformed record") from None
            if pos < 0 or not 0 <= layer < layers or not 0 <= kvh < kvh_n:
                raise TraceError(f"{where}: position, layer or KV head out of range")
            if t[0] == "v":
                var[(pos, layer, kvh)] = v
                continue
            step = steps.setdefault(pos, {})
            d, r = step.setdefault((layer, kvh), [None, set()])
            if depths is not None:
                step[(layer, kvh)][0] = depths if d is None else [max(a, b) for a, b in zip(d, depths)]
            r.update(rows)
    if meta is None:
        raise TraceError(f"{path}: no header")
    return meta, [steps[p] | {"_pos": p} for p in sorted(steps)], var


class LRU:
    """Least recently used, by bytes: evicts as soon as the budget is passed."""

    def __init__(self, budget):
        self.budget, self.used, self.items = budget, 0, OrderedDict()

    def holds(self, key):
        return key in self.items

    def touch(self, key, size):
        old = self.items.pop(key, None)
        self.used += size - (old or 0)
        self.items[key] = size
        while self.used > self.budget and self.items:
            _, gone = self.items.popitem(last=False)
            self.used -= gone

    def end_step(self):
        pass


class LFU:
    """Most frequently used so far: after each step the cache holds the units
    read most often in the steps before (ties: the more recent), up to the
    budget; a unit read for the first time waits for the next step."""

    def __init__(self, budget):
        self.budget, self.count, self.size, self.last, self.held, self.clock = budget, {}, {}, {}, set(), 0

    def holds(self, key):
        return key in self.held

    def touch(self, key, size):
        self.count[key] = self.count.get(key, 0) + 1
        self.size[key] = size
        self.last[key] = self.clock

    def end_step(self):
        self.clock += 1
        order = sorted(self.count, key=lambda k: (-self.count[k], -self.last[k]))
        self.held, used = set(), 0
        for k in order:
            if used + self.size[k] > self.budget:
                break
            self.held.add(k)
            used += self.size[k]


def traced_index_bytes(steps, dim, last_n):
    """Bytes of the index of every (layer, KV head) the trace holds at n = last_n:
    4 planes of 8 bytes and a 2-byte scale per 64-token block and channel."""
    pairs = len({key for step in steps for key in step if key != "_pos"})
    return pairs * ((last_n + BLOCK - 1) // BLOCK) * dim * 34


def hit_rates(tot, budget, index_bytes):
    """A run's result from its byte totals (plane, plane_hit, row, row_hit)."""
    return {
        "plane_hit": tot["plane_hit"] / tot["plane"] if tot["plane"] else None,
        "row_hit": tot["row_hit"] / tot["row"] if tot["row"] else None,
        "bytes_hit": (tot["plane_hit"] + tot["row_hit"]) / (tot["plane"] + tot["row"]),
        "plane_bytes": tot["plane"],
        "row_bytes": tot["row"],
        "budget_bytes": budget,
        "index_bytes": index_bytes,
    }


def simulate(meta, steps, budget_frac, plane_share, policy):
    dim = int(meta["dim"])
    last_n = steps[-1]["_pos"] + 1
    index_bytes = traced_index_bytes(steps, dim, last_n)
    budget = budget_frac * index_bytes
    planes, rows = policy(budget * plane_share), policy(budget * (1 - plane_share))
    plane_units = {}  # key -> closed blocks resident
    tot = {"plane": 0, "plane_hit": 0, "row": 0, "row_hit": 0}
    row_bytes = 4 * dim
    for step in steps:
        n = step["_pos"] + 1
        closed, blocks = n // 64, (n + 63) // 64
        for key, value in step.items():
            if key == "_pos":
                continue
            (layer, kvh), (depths, sel) = key, value
            for j, t in enumerate(depths or []):
                for p in range(t):
                    per_block = 8 + (2 if p == 0 else 0)
                    unit = (layer, kvh, j, p)
                    tot["plane"] += blocks * per_block
                    if planes.holds(unit):
                        tot["plane_hit"] += plane_units.get(unit, 0) * per_block
                    plane_units[unit] = closed
                    planes.touch(unit, closed * per_block)
            for r in sel:
                tot["row"] += row_bytes
                if rows.holds((layer, kvh, r)):
                    tot["row_hit"] += row_bytes
                rows.touch((layer, kvh, r), row_bytes)
        planes.end_step()
        rows.end_step()
    return hit_rates(tot, budget, index_bytes)


def gpu_lines(counts, var, lines, fill):
    """The plane lines a fill keeps for one (layer, KV head): counts[4 j + p]
    is how many of the window's plans read line (j, p). Counted lines first, by
    count descending, then var_j / 4^p descending, ties to the lower 4 j + p;
    fill "spare" then ranks the uncounted lines of every channel with
    var_j > 0 after them the same way and keeps those too while lines remain.
    The first `lines` of the ranking are kept."""
    chosen = [(-c, -(var[i // PLANES] / 4 ** (i % PLANES)), i) for i, c in enumerate(counts)
              if c or (fill == "spare" and var[i // PLANES] > 0)]
    return {(i // PLANES, i % PLANES) for _, _, i in sorted(chosen)[:lines]}


class PlanWindow:
    """The last `window` plans of one (layer, KV head) and how many of them
    read each line 4 j + p."""

    def __init__(self, window, dim):
        self.window, self.plans, self.counts = window, [], [0] * (PLANES * dim)

    def note(self, depths):
        self.plans.append(depths)
        for j, t in enumerate(depths):
            for p in range(t):
                self.counts[PLANES * j + p] += 1
        if len(self.plans) > self.window:
            for j, t in enumerate(self.plans.pop(0)):
                for p in range(t):
                    self.counts[PLANES * j + p] -= 1


def row_slots_step(rule, held, sel, slots, step):
    """One step of one (layer, KV head)'s row slots under `rule` (the gpu and
    associative rows of the module's text): held, the slots' state between
    steps, is updated; returns how many rows of sel hit."""
    return len(sel) - len(row_slots_missed(rule, held, sel, slots, step))


def row_held(rule, held, r, slots):
    """Whether row_slots_missed's state `held` holds token r (before a step)."""
    if rule in ("later", "replace"):
        return held.get(r % slots) == r + 1
    ways = min(ASSOC_ROWS.get(rule, LATEST_ROWS.get(rule)) or slots, slots)
    return r in held.get(r % max(1, slots // ways), ())


def row_slots_missed(rule, held, sel, slots, step):
    """row_slots_step's rows of sel that missed."""
    if rule in ("later", "replace"):  # held: slot -> token + 1
        missed = [r for r in sel if not row_held(rule, held, r, slots)]
        if rule == "replace":  # the latest missed token of each slot replaces what it held
            claim = {}
            for r in missed:
                claim[r % slots] = max(claim.get(r % slots, 0), r + 1)
            held.update(claim)
        else:  # "later": a missed token enters unless its slot holds a later one
            for r in missed:
                held[r % slots] = max(held.get(r % slots, 0), r + 1)
        return missed
    ways = min(ASSOC_ROWS.get(rule, LATEST_ROWS.get(rule)) or slots, slots)
    nsets = max(1, slots // ways)  # held: set -> its tokens
    if rule in LATEST_ROWS:  # each set keeps its W latest tokens, held or missed
        missed = [r for r in sel if not row_held(rule, held, r, slots)]
        for r in missed:
            held.setdefault(r % nsets, set()).add(r)
        for k in {r % nsets for r in missed}:
            if len(held[k]) > ways:
                held[k] = set(sorted(held[k])[-ways:])
        return missed
    missed = []  # LRU sets: token -> step last read, oldest first
    for r in sorted(sel):
        ways_of = held.setdefault(r % nsets, OrderedDict())
        if r in ways_of:
            ways_of[r] = step
            ways_of.move_to_end(r)
        else:
            missed.append(r)
    for r in missed:  # enters its set, evicting the way read longest ago unless this step read it
        ways_of = held[r % nsets]
        if len(ways_of) >= ways:
            if next(iter(ways_of.values())) == step:
                continue
            ways_of.popitem(last=False)
        ways_of[r] = step
    return missed


def simulate_gpu(meta, steps, var, budget_frac, plane_share, fill_every, fill=GPU_FILL, row_rule=GPU_ROWS,
                 lines_slots=None, window=GPU_WINDOW):
    """lines_slots: (plane lines, row slots) per (layer, KV head) instead of
    those the budget buys on the trace's own index (--as-context)."""
    dim = int(meta["dim"])
    last_n = steps[-1]["_pos"] + 1
    index_bytes = traced_index_bytes(steps, dim, last_n)
    budget = budget_frac * index_bytes
    pairs = len({key for step in steps for key in step if key != "_pos"})
    cache_blocks = (last_n + BLOCK - 1) // BLOCK
    if lines_slots is None:
        lines = min(int(budget * plane_share) // pairs // 10 // cache_blocks, PLANES * dim)
        slots = int(budget * (1 - plane_share)) // pairs // (4 * dim + 4)
    else:
        lines, slots = min(lines_slots[0], PLANES * dim), lines_slots[1]
    kept, valid, tags = {}, {}, {}  # per (layer, kv head): lines, blocks they hold, row slots (row_slots_step)
    plans, last_plan, last_sel = {}, {}, {}  # per (layer, kv head): PlanWindow, the previous step's depths, union
    tot = {"plane": 0, "plane_hit": 0, "row": 0, "row_hit": 0, "plane_ahead": 0, "row_ahead": 0,
           "plane_ahead_waste": 0, "row_ahead_waste": 0, "plane_ahead2": 0, "row_ahead2": 0,
           "plane_ahead2_waste": 0, "row_ahead2_waste": 0}
    last2_plan, last2_sel = {}, {}  # per (layer, kv head): the step before the previous one's depths, union
    row_bytes, max_row_hits = 4 * dim, 0
    for s, step in enumerate(steps):
        n = step["_pos"] + 1
        blocks = (n + BLOCK - 1) // BLOCK
        for key, value in step.items():
            if key == "_pos":
                continue
            depths, sel = value
            held, nvalid = kept.get(key, ()), valid.get(key, 0)
            prev = last_plan.get(key)
            prev2 = last2_plan.get(key)
            both = [min(a, b) for a, b in zip(prev, prev2)] if prev is not None and prev2 is not None else None
            for j, t in enumerate(depths or []):
                for p in range(t):
                    per_block = 8 + (2 if p == 0 else 0)
                    tot["plane"] += blocks * per_block
                    cached = nvalid if (j, p) in held else 0
                    tot["plane_hit"] += cached * per_block
                    if prev is not None and p < prev[j]:  # read ahead: the closed blocks the cache lacks
                        tot["plane_ahead"] += max(n // BLOCK - cached, 0) * per_block
                    if both is not None and p < both[j]:  # only what the last two plans both read
                        tot["plane_ahead2"] += max(n // BLOCK - cached, 0) * per_block
            if both is not None:
                cur = depths or [0] * len(both)
                for j, t0 in enumerate(both):
                    for p in range(cur[j], t0):
                        cached = nvalid if (j, p) in held else 0
                        tot["plane_ahead2_waste"] += max(n // BLOCK - cached, 0) * (8 + (2 if p == 0 else 0))
            if prev is not None:  # read ahead and not read: the previous plan's lines this plan drops
                cur = depths or [0] * len(prev)
                for j, t0 in enumerate(prev):
                    for p in range(cur[j], t0):
                        cached = nvalid if (j, p) in held else 0
                        tot["plane_ahead_waste"] += max(n // BLOCK - cached, 0) * (8 + (2 if p == 0 else 0))
            last = last_sel.get(key, set())
            staged = {r for r in last if not (slots and row_held(row_rule, tags.get(key, {}), r, slots))}
            tot["row_ahead_waste"] += row_bytes * len(staged - set(sel))
            last2 = last & last2_sel[key] if key in last2_sel else set()
            tot["row_ahead2_waste"] += row_bytes * len((staged & last2) - set(sel))
            missed = set(sel)
            if slots:
                missed = set(row_slots_missed(row_rule, tags.setdefault(key, {}), sel, slots, s))
                hits = len(sel) - len(missed)
                tot["row_hit"] += row_bytes * hits
                max_row_hits = max(max_row_hits, hits)
            tot["row"] += row_bytes * len(sel)
            tot["row_ahead"] += row_bytes * len(missed & last_sel.get(key, set()))  # read ahead: the last union
            tot["row_ahead2"] += row_bytes * len(missed & last2)
            if key in last_sel:
                last2_sel[key] = last_sel[key]
            last_sel[key] = set(sel)
            if depths is not None:  # the step notes its plan (fathom_cuda_tier_step)
                plans.setdefault(key, PlanWindow(window, dim)).note(depths)
                if key in last_plan:
                    last2_plan[key] = last_plan[key]
                last_plan[key] = depths
        if lines and s % fill_every == 0:
            for key, value in step.items():
                if key == "_pos" or value[0] is None:
                    continue
                v = var.get((step["_pos"], *key))
                if v is None:
                    raise TraceError(f"no variance line for position {step['_pos']}, layer {key[0]}, "
                                     f"KV head {key[1]}: regenerate the trace with bench_decode_trace")
                kept[key] = gpu_lines(plans[key].counts, v, lines, fill)
                valid[key] = min(n // BLOCK, cache_blocks)
    return {
        **hit_rates(tot, budget, index_bytes),
        # bytes the cache lacks that the previous step of the same (layer, KV head) read (its plan's lines in
        # closed blocks; its union's rows): what reading each layer's lines and rows ahead by that step would add
        "plane_ahead_hit": tot["plane_ahead"] / tot["plane"] if tot["plane"] else None,
        "row_ahead_hit": tot["row_ahead"] / tot["row"] if tot["row"] else None,
        # what that read-ahead would also move and the step not read, against the step's bytes
        "plane_ahead_waste": tot["plane_ahead_waste"] / tot["plane"] if tot["plane"] else None,
        "row_ahead_waste": tot["row_ahead_waste"] / tot["row"] if tot["row"] else None,
        # the same reading ahead only what the last two steps both read (lines in both plans, rows in both unions)
        "plane_ahead2_hit": tot["plane_ahead2"] / tot["plane"] if tot["plane"] else None,
        "row_ahead2_hit": tot["row_ahead2"] / tot["row"] if tot["row"] else None,
        "plane_ahead2_waste": tot["plane_ahead2_waste"] / tot["plane"] if tot["plane"] else None,
        "row_ahead2_waste": tot["row_ahead2_waste"] / tot["row"] if tot["row"] else None,
        "lines": lines,
        "slots": slots,
        "max_row_hits": max_row_hits,  # most resident rows one step of one pair read
        "fill_every": fill_every,
        "fill": fill,
        "rows": row_rule,
        "window": window,
    }


def trace_shape(steps):
    """The trace's mean union of rows and mean plane bytes per 64-token block
    per (layer, KV head) and step (the plan's lines, 8 bytes each, plus the
    2-byte scales of its channels)."""
    rows = per_block = count = 0
    for step in steps:
        for key, (depths, sel) in ((k, v) for k, v in step.items() if k != "_pos"):
            rows += len(sel)
            per_block += plan_bytes(depths or [])
            count += 1
    return rows / count, per_block / count


def as_lines_slots(budget_frac, share, context, dim, union, trace_union):
    """Plane lines and row slots (in the trace) that budget_frac of the index
    of a context-token session of head dim `dim` buys per (layer, KV head), and
    the target's own slots (see "as" in the module's text)."""
    blocks = (context + BLOCK - 1) // BLOCK
    index = blocks * dim * 34
    lines = int(share * budget_frac * index) // (10 * blocks)
    target_slots = int((1 - share) * budget_frac * index) // (4 * dim + 4)
    return lines, round(target_slots / union * trace_union), target_slots


def plan_bytes(depths, cover=None):
    """Plane bytes per block of a plan (8 a plane line, 2 for a read
    channel's scale), or those a cover plan also reads."""
    if cover is None:
        return sum(8 * t + (2 if t else 0) for t in depths)
    return sum(8 * min(t, c) + (2 if t and c else 0) for t, c in zip(depths, cover))


def reuse(steps):
    """Rows of a step the previous step (and the last 8) selected too, and the
    plane bytes of a step's plan that the previous step's plan of the same
    (layer, KV head) reads too (per block, weighted by the step's blocks):
    what reading the next step's lines ahead by the last plan would cover."""
    prev, last8, total = 0, 0, 0
    plane_prev, plane_total = 0, 0
    history, last_plan = [], {}
    for step in steps:
        cur = {(k, r) for k, v in step.items() if k != "_pos" for r in v[1]}
        if history:
            total += len(cur)
            prev += len(cur & history[-1])
            recent = set().union(*history[-8:])
            last8 += len(cur & recent)
        history.append(cur)
        blocks = (step["_pos"] + 1 + BLOCK - 1) // BLOCK
        for key, (depths, _) in ((k, v) for k, v in step.items() if k != "_pos"):
            if depths is None:
                continue
            if key in last_plan:
                plane_total += blocks * plan_bytes(depths)
                plane_prev += blocks * plan_bytes(depths, last_plan[key])
            last_plan[key] = depths
    return {"rows_in_previous_step": prev / total if total else None,
            "rows_in_last_8_steps": last8 / total if total else None,
            "plane_bytes_in_previous_plan": plane_prev / plane_total if plane_total else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--budget", type=float, default=0.1, help="HBM budget, fraction of the index")
    ap.add_argument("--plane-share", type=float, nargs="+", default=[1.0, 0.5, 0.0])
    ap.add_argument("--fill-every", type=int, nargs="+", default=[1, 16],
                    help="gpu policy: steps between plane-line fills (a run per value)")
    ap.add_argument("--window", type=int, nargs="+", default=[GPU_WINDOW],
                    help="gpu, variant and as policies: plans a fill counts (a run per value; 1: the fill's own "
                    "step's plan alone)")
    ap.add_argument("--as-fill-every", type=int, default=1, help="--as-context runs: steps between fills")
    ap.add_argument("--variants", action="store_true",
                    help="also the gpu policy's variants (policy \"variant\", fill every step): fill plan|spare "
                    "x rows later|replace x each --plane-share, and the one keeping the most bytes off the link")
    ap.add_argument("--as-context", type=int, nargs="+", default=[],
                    help="gpu policy with the lines and slots --budget of the index of a session of N tokens buys "
                    "(see 'as' in the text); needs --as-union")
    ap.add_argument("--as-dim", type=int, default=128, help="the --as-context session's head dim")
    ap.add_argument("--as-union", type=float, help="the --as-context step's mean union of rows per (layer, KV head)")
    ap.add_argument("--only-as", action="store_true", help="only the --as-context runs (no LRU, LFU, gpu runs)")
    ap.add_argument("--as-rows", nargs="+", default=[GPU_ROWS],
                    choices=["later", "replace"] + list(ASSOC_ROWS) + list(LATEST_ROWS),
                    help="--as-context runs: the row slots' rule (a run per value): the GPU's direct-mapped "
                    "'later' or 'replace', LRU inside sets of 2, 4 or 8 ways or over all slots ('lru'), or sets "
                    "of 2, 4 or 8 ways keeping their latest tokens")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if (not 0 < a.budget <= 1 or any(not 0 <= x <= 1 for x in a.plane_share) or min(a.fill_every) < 1
            or a.as_fill_every < 1 or not all(1 <= w <= 255 for w in a.window)):
        sys.exit("cache_sim: --budget in (0, 1], --plane-share in [0, 1], --fill-every and --as-fill-every >= 1, "
                 "--window in 1..255")
    if a.only_as and not a.as_context:
        sys.exit("cache_sim: --only-as needs --as-context")
    if a.as_context and (a.as_union is None or not 0 < a.as_union < 1e9 or not 1 <= a.as_dim <= 1024
                         or min(a.as_context) < 1 or max(a.as_context) > 1 << 40):
        sys.exit("cache_sim: --as-context N >= 1 needs --as-union U > 0, and --as-dim in [1, 1024]")
    out = []
    for path in a.traces:
        try:
            meta, steps, var = read_trace(path)
            if not steps:
                raise TraceError(f"{path}: no records")
            res = {"trace": path, "model": meta.get("model"), "prompt_tokens": int(meta["prompt"]),
                   "attn": meta.get("attn"), "k": int(meta["k"]), "steps": len(steps), "budget": a.budget,
                   "reuse": reuse(steps), "runs": []}
            for name, policy in () if a.only_as else (("lru", LRU), ("lfu", LFU)):
                for share in a.plane_share:
                    r = simulate(meta, steps, a.budget, share, policy)
                    r["policy"], r["plane_share"] = name, share
                    res["runs"].append(r)
            if not var:
                print(f"cache_sim: {path}: no variance lines (a trace of an older bench_decode_trace): "
                      "no gpu policy", file=sys.stderr)
            for w in a.window if var and not a.only_as else []:
                for every in a.fill_every:
                    for share in a.plane_share:
                        r = simulate_gpu(meta, steps, var, a.budget, share, every, window=w)
                        r["policy"], r["plane_share"] = "gpu", share
                        res["runs"].append(r)
            for w in a.window if var and a.variants else ():
                for fill in ("plan", "spare"):
                    for rule in ("later", "replace"):
                        for share in a.plane_share:
                            r = simulate_gpu(meta, steps, var, a.budget, share, 1, fill, rule, window=w)
                            r["policy"], r["plane_share"] = "variant", share
                            res["runs"].append(r)
            if a.as_context and var:
                t_union, t_block = trace_shape(steps)
                res["trace_union"], res["trace_plane_bytes_per_block"] = t_union, t_block
                res["best_as"] = []
                for n, w, rule in ((n, w, rule) for n in a.as_context for w in a.window for rule in a.as_rows):
                    runs = []
                    for share in a.plane_share:
                        lines, slots, target_slots = as_lines_slots(a.budget, share, n, a.as_dim, a.as_union, t_union)
                        r = simulate_gpu(meta, steps, var, a.budget, share, a.as_fill_every, row_rule=rule,
                                         lines_slots=(lines, slots), window=w)
                        planes_b = t_block * ((n + BLOCK - 1) // BLOCK)
                        rows_b = 4 * a.as_dim * a.as_union
                        r.update(policy="as", plane_share=share, as_context=n, as_dim=a.as_dim, as_union=a.as_union,
                                 as_slots=target_slots, slot_multiple=target_slots / a.as_union,
                                 as_plane_bytes=planes_b, as_row_bytes=rows_b,
                                 as_bytes_hit=(r["plane_hit"] * planes_b + r["row_hit"] * rows_b)
                                 / (planes_b + rows_b))
                        runs.append(r)
                    res["runs"] += runs
                    best = max(runs, key=lambda r: (r["as_bytes_hit"], -runs.index(r)))
                    res["best_as"].append({k: best[k] for k in ("as_context", "window", "rows", "fill_every",
                                                                "plane_share", "lines", "slots",
                                                                "as_slots", "slot_multiple", "plane_hit", "row_hit",
                                                                "as_bytes_hit")})
            var_runs = [r for r in res["runs"] if r["policy"] == "variant"]
            if var_runs:  # the most bytes kept off the link, and every variant that keeps as many
                best = max(var_runs, key=lambda r: (r["bytes_hit"], -var_runs.index(r)))
                res["best_variant"] = {k: best[k] for k in ("fill", "rows", "plane_share", "window", "plane_hit",
                                                             "row_hit", "bytes_hit")}
                res["best_variant"]["ties"] = [[r["fill"], r["rows"], r["plane_share"], r["window"]] for r in var_runs
                                               if r["bytes_hit"] == best["bytes_hit"]]
        except (OSError, TraceError) as e:
            sys.exit(f"cache_sim: {e}")
        out.append(res)
    if a.json:
        print(json.dumps({"traces": out}, indent=1))
        return
    for res in out:
        u = res["reuse"]
        print(f"{res['trace']}: {res['model']}, prompt {res['prompt_tokens']} tokens, {res['attn']} k {res['k']}, "
              f"{res['steps']} steps; rows also selected by the previous step {u['rows_in_previous_step']:.3f}, "
              f"by one of the last 8 {u['rows_in_last_8_steps']:.3f}" +
              ("" if u["plane_bytes_in_previous_plan"] is None else
               f"; plane bytes the previous plan reads too {u['plane_bytes_in_previous_plan']:.3f}"))
        for r in res["runs"]:
            ph = "n/a" if r["plane_hit"] is None else f"{r['plane_hit']:.3f}"
            name = r["policy"].upper() + (f" (fill every {r['fill_every']} from {r['window']} plans, {r['fill']}, "
                                          f"rows {r['rows']})" if "fill_every" in r else "")
            if r["policy"] == "as":
                print(f"  AS {r['as_context']} tokens, d {r['as_dim']}, union {r['as_union']:.0f}, fill every "
                      f"{r['fill_every']} from {r['window']} plans, rows {r['rows']}: "
                      f"{r['plane_share']:.0%} to planes = {r['lines']} lines, {r['as_slots']} slots "
                      f"({r['slot_multiple']:.2f} x union; {r['slots']} here): planes {r['plane_hit']:.3f}, "
                      f"rows {r['row_hit']:.3f}, the target's bytes {r['as_bytes_hit']:.3f}")
                continue
            print(f"  {name}, budget {res['budget']:.0%} of the index ({r['budget_bytes'] / 1e6:.2f} MB), "
                  f"{r['plane_share']:.0%} to planes: plane bytes resident {ph}, row bytes resident "
                  f"{r['row_hit']:.3f}, all bytes {r['bytes_hit']:.3f} "
                  f"(per step {r['plane_bytes'] / res['steps'] / 1e6:.2f} MB planes, "
                  f"{r['row_bytes'] / res['steps'] / 1e6:.2f} MB rows)")
        for b in res.get("best_as", []):
            print(f"  most of a {b['as_context']}-token step's bytes, fill every {b['fill_every']} from "
                  f"{b['window']} plans, rows {b['rows']}: {b['plane_share']:.0%} to planes "
                  f"({b['lines']} lines, {b['slot_multiple']:.2f} x union): planes {b['plane_hit']:.3f}, "
                  f"rows {b['row_hit']:.3f}, bytes {b['as_bytes_hit']:.3f}")
        if "best_variant" in res:
            b = res["best_variant"]
            print(f"  most bytes kept off the link: fill {b['fill']}, rows {b['rows']}, {b['plane_share']:.0%} to "
                  f"planes, {b['window']} plans: planes {b['plane_hit']:.3f}, rows {b['row_hit']:.3f}, "
                  f"all {b['bytes_hit']:.3f}"
                  + (" (as many: %s)" % ", ".join("%s/%s/%.0f%%/%d" % (t[0], t[1], 100 * t[2], t[3])
                                                  for t in b["ties"][1:])
                     if len(b["ties"]) > 1 else ""))


if __name__ == "__main__":
    main()
