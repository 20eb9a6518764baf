#!/usr/bin/env python3
"""bench_cuda_tier --trace-point arguments from cache_sim --as-context runs.

  bench/trace_points.py SIM.json [--contexts N ...] [--shares S ...] [--best] [--window W] [--rows R]

SIM.json: bench/cache_sim.py --json --as-context output, or its
scripts/record-result file (docs/results/data/cache-sim-at-scale.json). For
every trace and --as-context N (all, or --contexts), one
--trace-point NAME/P%:N:PLANE:ROW per plane share in --shares that the runs
hold, and with --best (the default when --shares is not given) the share
cache_sim found best for N; NAME is the trace's file name without ".trace".
The runs of one fill: --window W (cache_sim --window: plans a fill ranks
by), needed when the runs hold several; runs without one (older records)
are of window 1, the fill from the last plan. Likewise --rows R
(cache_sim --as-rows: the row slots' rule; runs without one: "later").
Rates are printed to 4 decimals (a row rate of 1 as 0.9999: the bench wants
row < 1). Prints one line.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sim")
    ap.add_argument("--contexts", type=int, nargs="+")
    ap.add_argument("--shares", type=float, nargs="+", default=[])
    ap.add_argument("--best", action="store_true")
    ap.add_argument("--window", type=int)
    ap.add_argument("--rows")
    a = ap.parse_args()
    try:
        with open(a.sim) as f:
            doc = json.load(f)
        traces = (doc.get("result", doc))["traces"]
        windows = sorted({r.get("window", 1) for t in traces for r in t["runs"] if r.get("policy") == "as"})
        if a.window is None and len(windows) > 1:
            sys.exit("trace_points: the runs hold windows %s: pick one with --window" % windows)
        window = windows[0] if a.window is None and windows else a.window
        rules = sorted({r.get("rows", "later") for t in traces for r in t["runs"] if r.get("policy") == "as"})
        if a.rows is None and len(rules) > 1:
            sys.exit("trace_points: the runs hold row rules %s: pick one with --rows" % rules)
        rows = rules[0] if a.rows is None and rules else a.rows
        out = []
        for t in traces:
            name = t["trace"].split("/")[-1]
            name = name[:-6] if name.endswith(".trace") else name
            if not name or any(c in name for c in ": "):
                sys.exit("trace_points: trace name %r cannot name a point" % name)
            best = {b["as_context"]: b["plane_share"] for b in t.get("best_as", [])
                    if b.get("window", 1) == window and b.get("rows", "later") == rows}
            for r in t["runs"]:
                if r.get("policy") != "as" or r.get("window", 1) != window or r.get("rows", "later") != rows:
                    continue
                n, share = r["as_context"], r["plane_share"]
                if a.contexts and n not in a.contexts:
                    continue
                if share in a.shares or ((a.best or not a.shares) and best.get(n) == share):
                    arg = "%s/%d%%:%d:%.4f:%.4f" % (name, round(100 * share), n, r["plane_hit"],
                                                     min(r["row_hit"], 0.9999))
                    if arg not in out:
                        out.append(arg)
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit("trace_points: %s: %s" % (a.sim, e))
    if not out:
        sys.exit("trace_points: no --as-context runs match")
    print(" ".join("--trace-point " + x for x in out))


if __name__ == "__main__":
    main()
