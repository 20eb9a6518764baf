#!/usr/bin/env python3
"""Cache simulator for decode traces (bench_decode_trace): for an HBM byte
budget and a policy, the fraction of plane bytes and of row bytes a GPU step
would find resident instead of sending over the link.

  bench/cache_sim.py TRACE [TRACE ...] [--budget 0.1] [--plane-share 0.5] [--json]

Model of what crosses the link, per step and (layer, KV head):
  planes: the scan reads plane p of channel j for p < depth_j. A plane unit
    (layer, kv head, j, p) holds 8 bytes per 64-token block, plus the 2-byte
    fp16 scales for p = 0. A resident unit saves the bytes of the blocks it
    holds; blocks closed since it was loaded cross once and join it; the
    open (last, partial) block always crosses (it is re-quantized each step).
  rows: the union over the group's query heads of the selected rows; a row
    is its key and value in fp16 (4 * dim bytes). A resident row crosses 0.
Budget: a fraction of the session's index (all planes and scales of every
layer and KV head at the trace's last position); plane-share of it for
planes, the rest for rows. Policies, separately for planes and rows: LRU by bytes (touched in the
order the step reads them) and LFU (after each step, the units read most
often so far; see the classes).
Also printed: the fraction of a step's rows selected by the previous step and
by one of the last 8 steps (union over the group), to compare with captures.
"""
import argparse
import json
import sys
from collections import OrderedDict


def read_trace(path):
    meta, steps = {}, {}
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                head, _, name = line[1:].partition(" model ")
                t = head.split()
                meta = {t[i]: t[i + 1] for i in range(0, len(t) - 1, 2)}
                meta["model"] = name.strip()
                continue
            t = line.split()
            pos, layer, kvh = int(t[0]), int(t[1]), int(t[2])
            depths = None if t[4] == "-" else [int(c, 16) for c in t[4]]
            rows = [int(x) for x in t[6:6 + int(t[5])]]
            step = steps.setdefault(pos, {})
            d, r = step.setdefault((layer, kvh), [None, set()])
            if depths is not None:
                step[(layer, kvh)][0] = depths if d is None else [max(a, b) for a, b in zip(d, depths)]
            r.update(rows)
    return meta, [steps[p] | {"_pos": p} for p in sorted(steps)]


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


def simulate(meta, steps, budget_frac, plane_share, policy):
    dim = int(meta["dim"])
    layers, kv = int(meta["layers"]), int(meta["kv_heads"])
    last_n = steps[-1]["_pos"] + 1
    index_bytes = layers * kv * ((last_n + 63) // 64) * dim * 34
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
    return {
        "plane_hit": tot["plane_hit"] / tot["plane"] if tot["plane"] else None,
        "row_hit": tot["row_hit"] / tot["row"] if tot["row"] else None,
        "bytes_hit": (tot["plane_hit"] + tot["row_hit"]) / (tot["plane"] + tot["row"]),
        "plane_bytes": tot["plane"],
        "row_bytes": tot["row"],
        "budget_bytes": budget,
        "index_bytes": index_bytes,
    }


def reuse(steps):
    prev, last8, total = 0, 0, 0
    history = []
    for step in steps:
        cur = {(k, r) for k, v in step.items() if k != "_pos" for r in v[1]}
        if history:
            total += len(cur)
            prev += len(cur & history[-1])
            recent = set().union(*history[-8:])
            last8 += len(cur & recent)
        history.append(cur)
    return {"rows_in_previous_step": prev / total if total else None,
            "rows_in_last_8_steps": last8 / total if total else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--budget", type=float, default=0.1, help="HBM budget, fraction of the index")
    ap.add_argument("--plane-share", type=float, nargs="+", default=[1.0, 0.5, 0.0])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = []
    for path in a.traces:
        meta, steps = read_trace(path)
        if not steps:
            sys.exit(f"cache_sim: {path}: no records")
        res = {"trace": path, "model": meta.get("model"), "prompt_tokens": int(meta["prompt"]),
               "attn": meta.get("attn"), "k": int(meta["k"]), "steps": len(steps), "budget": a.budget,
               "reuse": reuse(steps), "runs": []}
        for name, policy in (("lru", LRU), ("lfu", LFU)):
            for share in a.plane_share:
                r = simulate(meta, steps, a.budget, share, policy)
                r["policy"], r["plane_share"] = name, share
                res["runs"].append(r)
        out.append(res)
    if a.json:
        print(json.dumps({"traces": out}, indent=1))
        return
    for res in out:
        u = res["reuse"]
        print(f"{res['trace']}: {res['model']}, prompt {res['prompt_tokens']} tokens, {res['attn']} k {res['k']}, "
              f"{res['steps']} steps; rows also selected by the previous step {u['rows_in_previous_step']:.3f}, "
              f"by one of the last 8 {u['rows_in_last_8_steps']:.3f}")
        for r in res["runs"]:
            ph = "n/a" if r["plane_hit"] is None else f"{r['plane_hit']:.3f}"
            print(f"  {r['policy'].upper()}, budget {res['budget']:.0%} of the index ({r['budget_bytes'] / 1e6:.2f} MB), "
                  f"{r['plane_share']:.0%} to planes: plane bytes resident {ph}, row bytes resident "
                  f"{r['row_hit']:.3f}, all bytes {r['bytes_hit']:.3f} "
                  f"(per step {r['plane_bytes'] / res['steps'] / 1e6:.2f} MB planes, "
                  f"{r['row_bytes'] / res['steps'] / 1e6:.2f} MB rows)")


if __name__ == "__main__":
    main()
