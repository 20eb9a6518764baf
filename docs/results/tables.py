"""The tables of docs/results.md, in order: for each, the data file it reads
(docs/results/data/NAME.json, written by scripts/record-result), its columns,
and the paragraph that says what it means and where it does not hold. Numbers
in a paragraph are computed from the data, so a re-recorded table cannot
contradict its text. scripts/render-results turns this into docs/results.md.
Python 3, standard library only.
"""
from collections import namedtuple

Table = namedtuple("Table", "name section title render pending")

PREAMBLE = """
# Results

The current measurements behind the README's claims, one table per command. Each says on which
machine, on which date and at which commit it was measured, the exact command, and what it means
and where it does not hold. This file is generated: `scripts/record-result TABLE -- COMMAND`
keeps a command's JSON in `docs/results/data/TABLE.json`, `scripts/render-results` renders this
file from those files and `docs/results/tables.py`; `tests/cli/test_results_doc.sh` fails when
the two disagree, so do not edit it by hand. `scripts/record-result NEW --again TABLE` runs a
table's command again from the repository root (on another machine, say) and keeps it as NEW.

The run-by-run lab notebook (every variant measured, raw logs) is kept out of the tree at tag
`notebook-2026-11-29` (`git show notebook-2026-11-29:bench/RESULTS.md`).
"""


# ---------------------------------------------------------------- helpers

def md_table(header, rows, align=None):
    """A Markdown table; every row must have exactly the header's cells."""
    for r in rows:
        if len(r) != len(header):
            raise ValueError("row %r has %d cells under a %d-cell header" % (r, len(r), len(header)))
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def by_name(methods):
    return {m["name"]: m for m in methods}


def err(m):
    return "%.4f ± %.4f" % (m["rel_error"], m["rel_error_stderr"])


def ctx(n):
    """A context length as the bench's options write it: 32k, 1M."""
    return "%dM" % (n >> 20) if n % (1 << 20) == 0 else "%dk" % (n >> 10)


def ratio(a, b):
    return a / b if b else float("inf")


def eval_rows(methods):
    return [[m["name"], "%.1f" % m["bits_per_token"], "%.2f" % (m["scan_bytes_per_step"] / 1e6),
             "%.2f" % (m["row_bytes_per_step"] / 1e6), "%.5f" % m["rel_error"],
             "%.5f" % m["rel_error_stderr"], "%.2f%%" % (100 * m["selection_ratio"])] for m in methods]


EVAL_HEADER = ["method", "bits/token", "scan MB/step", "rows MB/step", "rel. error", "± stderr", "selected"]


def eval_shape(r):
    return "n = %d tokens, the last %d positions, k = %d per query head" % (r["tokens"], r["positions"], r["k"])


def compare(ms, a, b):
    """A sentence comparing method a with b on bits and error, if both ran."""
    if a not in ms or b not in ms:
        return ""
    x, y = ms[a], ms[b]
    return "%s reads %.0f bits per token against %s's %.0f, at an error of %.4f against %.4f (%.2fx). " % (
        a, x["bits_per_token"], b, y["bits_per_token"], x["rel_error"], y["rel_error"],
        ratio(x["rel_error"], y["rel_error"]))


# ---------------------------------------------------------------- CPU fidelity

def synthetic_default(rec):
    r = rec["result"]
    ms = by_name(r["methods"])
    text = md_table(EVAL_HEADER, eval_rows(r["methods"]))
    text += "\n%s (%s); 36 layers x 8 KV heads x G = 4, d = 128; mean relative L2 error of the " \
            "attention output against dense attention (± its standard error); bits and bytes are " \
            "the paper's accounting (code bits plus one fp16 scale per 64 tokens for every channel " \
            "read), per decode step over all layers and KV heads.\n\n" % (eval_shape(r), r["source"])
    text += (compare(ms, "fathom:48", "sparq:16") + compare(ms, "fathom:48", "ds:32")).strip()
    text += ("\n\nWhere it does not hold: this is the synthetic generator (docs/synthetic.md), not a "
             "model. It puts each head's content in a fixed low-dimensional topic subspace and gives "
             "it high-variance outlier channels that carry no content, which favours offline channel "
             "choice (ds, loki) and the calibration KLT (fathom-klt) over raw-channel importance; "
             "real-model captures (the SmolLM2 tables, and the paper's) judge fidelity. The README's main job "
             "(`scripts/run-default`) runs the same evaluation at 32768 tokens; this table uses %d "
             "tokens so that it runs in a few minutes on an idle 2-core machine (the wall time above "
             "was measured under the load shown), and k follows n (n/64).\n" % r["tokens"])
    return text


def synthetic_sweep_k(rec):
    r = rec["result"]
    sweep = r["k_sweep"]
    names = [m["name"] for m in sweep[0]["methods"]]
    header = ["method"] + ["k = %d (%.2f%%)" % (s["k"], 100 * s["methods"][0]["selection_ratio"]) for s in sweep]
    rows = []
    for name in names:
        cells = [name]
        for s in sweep:
            m = by_name(s["methods"]).get(name)
            cells.append(err(m) if m else "-")
        rows.append(cells)
    text = md_table(header, rows)
    text += ("\nRelative error (± stderr) of each method as the selection grows; %s source, n = %d, "
             "the last %d positions. The selection ratio is kept / n, sink 4 + local 32 included.\n\n"
             % (r["source"], r["tokens"], r["positions"]))
    first, last = sweep[0], sweep[-1]
    f0, f1 = by_name(first["methods"]), by_name(last["methods"])
    if "fathom:48" in f0 and "oracle" in f0:
        text += ("fathom:48's error is %.2fx the oracle's at k = %d and %.2fx at k = %d. " %
                 (ratio(f0["fathom:48"]["rel_error"], f0["oracle"]["rel_error"]), first["k"],
                  ratio(f1["fathom:48"]["rel_error"], f1["oracle"]["rel_error"]), last["k"]))
    text += ("Where it does not hold: synthetic keys (see the table above); at long contexts the same "
             "ratio is many more keys, and the gap between scans grows with the number of scanned "
             "winners (k minus sink and local).\n")
    return text


def synthetic_match(rec):
    r = rec["result"]
    sweep = r["budget_sweep"]
    text = md_table(EVAL_HEADER, eval_rows(sweep))
    rows = match_rows(r)
    text += "\nBits at which raw fathom reaches each method's error (log-error interpolated along " \
            "its sweep above):\n\n"
    text += md_table(["method", "its bits", "fathom bits", "fewer bits"], rows)
    text += ("\n%s; the first table is the budget sweep (fathom, and fathom-klt when listed, at the "
             "default budgets), the second the Table 6 analog. A method whose error the raw sweep never "
             "reaches shows \"> max\". Where it does not hold: synthetic keys (see above); the saving "
             "against offline-channel methods depends on how low-rank the keys' content is (§3.5), "
             "which the generator fixes.\n" % ("The window: " + eval_shape(r)))
    return text


def raw_sweep(r):
    """The raw fathom:B rows of a budget sweep (fathom-klt rows left out)."""
    return [m for m in r["budget_sweep"] if m["name"].startswith("fathom:")]


def match_rows(r):
    top = max(m["bits_per_token"] for m in raw_sweep(r))
    rows = []
    for m in r["match"]:
        fb = m["fathom_bits"]
        rows.append([m["method"], "%.1f" % m["method_bits"],
                     "%.1f" % fb if fb is not None else "> %.0f" % top,
                     "%.2fx" % ratio(m["method_bits"], fb) if fb is not None else "-"])
    return rows


# ---------------------------------------------------------------- SmolLM2

SMOLLM2_SETUP = """
Inputs (`scripts/make-captures build-results/captures build-results/fathom`, deterministic on a
given machine: the texts are files that ship with it, cut by the model's tokenizer): a code prompt of about 4000 tokens (Python standard
library files shown as `$ cat PATH`) and a calibration capture of 2048 tokens of C headers, text
the evaluated window does not contain; SmolLM2-135M-Instruct Q4_1 (`scripts/fetch-model`), 30
layers, 9 query / 3 KV heads, d = 64.
"""


def smollm2_eval(rec):
    r = rec["result"]
    ms = by_name(r["methods"])
    text = md_table(EVAL_HEADER, eval_rows(r["methods"]))
    text += "\n" + " ".join(SMOLLM2_SETUP.split()) + " The window: " + eval_shape(r) + ".\n\n"
    text += (compare(ms, "fathom:48", "sparq:16") + compare(ms, "fathom:48", "ds:32")).strip() + " "
    if "oracle" in ms:
        text += "The oracle (exact scores) itself is at %.4f: " % ms["oracle"]["rel_error"]
    text += ("at %d tokens k = %d (%.1f%% of n) keeps %d keys per query head beyond sink and local, "
             "too few to hold the attention mass, so every per-token scan sits close to the oracle; "
             "the paper's gaps at 1.6%% of 128k tokens need many more scanned winners. Where it does "
             "not hold: one prompt, one small model (d = 64), a short context.\n"
             % (r["tokens"], r["k"], 100.0 * r["k"] / r["tokens"], r["k"] - 36))
    return text


def smollm2_match(rec):
    r = rec["result"]
    text = md_table(["method", "its bits", "fathom bits", "fewer bits"], match_rows(r))
    text += ("\nBits at which raw fathom (budget sweep %s) reaches each method's error on the same "
             "capture as above (%s). Where it does not hold: as above.\n" %
             ("/".join(m["name"].split(":")[1] for m in raw_sweep(r)), eval_shape(r)))
    return text


# ---------------------------------------------------------------- CPU scan

def bench_scan(rec):
    r = rec["result"]
    rows = [[s["name"], "%.1f" % s["bits_per_token"], "%.2f" % s["plane_MB_per_step"],
             "%.2f" % s["ms_per_step"], "%.2f" % s["plane_GBps_per_core"], "%.1f%%" % s["of_1core_read_pct"]]
            for s in r["scans"]]
    text = md_table(["scan", "bits/token", "plane MB/step", "ms/step", "plane GB/s per core",
                     "of 1-core read BW"], rows)
    q = r["ratio_fathom_to_ds"]
    text += ("\nSynthetic %s keys of one layer, n = %d, %d KV heads (one store each), G = %d, real "
             "fathom:48 plans from %d query groups per head; ds:32's channels by mean|q| mean|k|. "
             "Memory read bandwidth measured in the same run: %.2f GB/s on one core, %.2f GB/s on %d "
             "threads. Medians of %d interleaved repeats.\n\n"
             % (r["source"], r["context"], r["heads"], r["group"], r["queries"], r["read_GBps_1core"],
                r["read_GBps_threads"], r["threads"], r["repeats"]))
    text += ("fathom:48 reads %.2fx the bytes of ds:32 and takes %.2fx its time: on the CPU the scan "
             "is bound by arithmetic (G multiply-adds per active channel and token, plus bit "
             "extraction), not by memory bandwidth, so fewer bytes buy less than their ratio. Where it "
             "does not hold: a shared, loaded machine (see the load average) makes absolute times "
             "noisy; the ratios are measured side by side. A scan that crosses PCIe (the GPU tables) "
             "is where bytes become time.\n" % (q["bytes"], q["time"]))
    return text


def bench_scan_tiled(rec):
    r = rec["result"]
    old = {x["name"]: x for x in r["scans"]}
    new = {x["name"]: x for x in r["scans_tiled"]}
    rows = [[n, "%.1f" % old[n]["bits_per_token"], "%.2f" % old[n]["ms_per_step"], "%.2f" % new[n]["ms_per_step"],
             "%.3f" % old[n]["plane_GBps_per_core"], "%.3f" % new[n]["plane_GBps_per_core"]]
            for n in ("fathom:48", "ds:32")]
    text = md_table(["scan (1 core)", "bits/token", "old ms/step", "tiled ms/step", "old GB/s", "tiled GB/s"], rows)
    text += "\n" + md_table(["threads", "tiled GB/s", "per thread", "old GB/s (split by head)"],
                            [[x["threads"], "%.3f" % x["tiled_GBps"], "%.3f" % x["tiled_GBps_per_thread"],
                              "%.3f" % x["old_GBps"]] for x in r["scaling_fathom"]])
    g = r["gpu_host_check"]
    text += ("\nThe tiled kernel (%s; fathom_store_scan_range) against the untiled one (fathom_store_scan) on the "
             "stores and plans of the bench-scan setup%s, n = %d, %d KV heads, G = %d, %d query groups, medians of %d "
             "interleaved repeats; threads take (query, head, %d-token range) tasks, the old kernel one task per "
             "(query, head). Scores bit-identical to the untiled kernel's: %s. Tiled over old, fathom:48 plane bytes "
             "per second on one core: %.2fx (issue 16 asks >= 2.5x); fathom:48 over ds:32 time: tiled %.2f, old %.2f "
             "(asks <= 0.5; bytes %.2f).%s Where it does not hold: both kernels keep the GPU's float operations "
             "(one fused multiply-add per query head, active channel and token, in the GPU's order), so at G = 4 "
             "their time follows the active channel count more than the bytes; a shared, loaded machine makes "
             "absolute rates noisy (load average in the record). The GPU host's targets (>= 3 GB/s per core, "
             ">= 40 GB/s on 16 cores at 1M tokens) %s.%s\n"
             % (r["tiled_isa"],
                " (segments of %d blocks)" % r["segment_blocks"] if "segment_blocks" in r else "",
                r["context"], r["heads"], r["group"], r["queries"], r["repeats"], r["range_tokens"],
                "yes" if r["identical_scores"] else "NO", r["ratio_tiled_to_old_fathom_per_core"],
                r["ratio_fathom_to_ds_tiled"]["time"], r["ratio_fathom_to_ds"]["time"],
                r["ratio_fathom_to_ds"]["bytes"],
                (" The AVX2 tiled kernel forms each value from its 4-bit code with one conversion and one "
                 "multiply-add whatever the channel's depth, so its time per active channel does not grow with "
                 "the depth: ds:32's 32 channels of depth 4 cost it about what as many channels of depth 1 would, "
                 "and fathom:48's fewer bits buy less time than with the plane-by-plane kernels.")
                if r["tiled_isa"] == "avx2" else
                (" The AVX-512 tiled kernel forms each value plane by plane (per 16 tokens a blend, then t - 1 "
                 "masked adds, each plane's bits loaded straight into a mask register), so per active channel and "
                 "64-token block it issues 4t of those besides the 16 multiply-adds of G = 4: its time per channel "
                 "grows with the depth, and ds:32's depth-4 channels cost it more than fathom:48's shallow ones do.")
                if r["tiled_isa"] == "avx512" and r.get("avx512_values", "masks") == "masks" else
                (" The AVX-512 tiled kernel reads each channel's values from a 16-entry table of its values in the "
                 "block (vpermps) by an index that up to 4 plane rows share (the channels packed in pass order into "
                 "quads of at most 4 rows; per quad and 16 tokens one shift of a broadcast qword of nibbles, formed "
                 "once per tile), so per active channel and 64-token block it issues 4 table lookups, 4 / (channels "
                 "per quad) shifts and one multiply-add forming its table besides the 16 multiply-adds of G = 4, "
                 "whatever the depth (the plane-by-plane kernel: 4t, and 4 mask loads per plane).")
                if r["tiled_isa"] == "avx512" and r.get("avx512_values", "").startswith("nibbles") else
                (" The AVX-512 tiled kernel reads each channel's values from a 16-entry table of its values in the "
                 "block (vpermps; indices from the plane's bits at depth 1, from 2-bit codes at depth 2, from code "
                 "bytes at depth 3 and 4, formed once per tile), so per active channel and 64-token block it issues "
                 "8 vector operations besides the 16 multiply-adds of G = 4 whatever the depth (the plane-by-plane "
                 "kernel: 4t): ds:32's depth-4 channels cost it no more than shallow ones, so fathom:48's fewer "
                 "bits buy less time than with the plane-by-plane kernel.")
                if r["tiled_isa"] == "avx512" else "",
                ("measured here: %.2f GB/s per core, %.2f GB/s on all threads"
                 % (g["per_core_GBps"], g["all_threads_GBps"])) if g["applies"]
                else "need --context 1048576 --threads 16 on that machine (its own table)",
                (" The binary ran there is bench/bench_scan.c built here (Release) and linked statically, "
                 "since that machine has no jansson or PCRE2 to build the full library.")
                if ".static" in rec["command"] else ""))
    if r.get("fma_zmm_per_ns_1thread"):
        text += ("16-lane multiply-adds per ns per thread in the same run: %.2f on one thread, %.2f each with %d "
                 "threads running (%.2fx): the part of the per-thread scan rate's drop with threads that is the "
                 "core's clock, not the code.\n"
                 % (r["fma_zmm_per_ns_1thread"], r["fma_zmm_per_ns_per_thread_all"], r["threads"],
                    r["fma_zmm_per_ns_per_thread_all"] / r["fma_zmm_per_ns_1thread"]))
    if r.get("read_GBps_1core"):
        share = new["fathom:48"]["plane_GBps_per_core"] / r["read_GBps_1core"]
        text += ("One core read memory at %.1f GB/s in the same run; the tiled fathom:48 scan read planes at %.0f%% "
                 "of that%s.\n" % (r["read_GBps_1core"], 100 * share,
                                   ", so memory bandwidth is not what limits it" if share < 0.5 else ""))
    if "grouped" in r:
        gr = r["grouped"]
        text += ("\nThe opt-in grouped-table mode (FATHOM_SCAN_GROUPED, src/core/store_internal.h; bench_scan "
                 "--grouped) on one core, same stores and plans: per 64-token block one 16-entry table per group of "
                 "at most 4 plane rows and query head, so a token costs one lookup and one add per group and head "
                 "instead of one multiply-add per channel and head. Its scores round in another order than the "
                 "exact kernels' (within test_scan's derived bound), so it is never the default and not "
                 "bit-identical to the GPU or hybrid steps. fathom:48 %.2f ms/step (%.3f GB/s per core), ds:32 "
                 "%.2f ms/step; grouped fathom:48 over exact ds:32 time %.3f (issue 16 asks <= 0.5), over grouped "
                 "ds:32 %.3f; over the tiled exact fathom:48 time %.3f; over the old kernel's plane GB/s per core "
                 "%.2fx. Top-512 selections equal to the exact ones: %.4f of rows on average, %.4f at worst. "
                 "Threads / GB/s: %s.\n"
                 % (gr["fathom_ms_per_step"], gr["fathom_GBps_per_core"], gr["ds_ms_per_step"],
                    gr["ratio_grouped_fathom_to_exact_ds"], gr["ratio_grouped_fathom_to_grouped_ds"],
                    gr["ratio_grouped_to_tiled_fathom"], gr["ratio_grouped_to_old_fathom_per_core"],
                    gr["topk_agreement_mean"], gr["topk_agreement_min"],
                    ", ".join("%d %.2f" % (x["threads"], x["GBps"]) for x in gr["scaling"])))
    if "int8" in r:
        i8 = r["int8"]
        last = i8["scaling"][-1]
        alone = "heads_alone_scan_select_GBps" in last
        text += "\n" + md_table(["threads", "int8 scan GB/s", "per thread", "int8 scan+select GB/s"] +
                                (["heads alone GB/s", "alone / together"] if alone else []),
                                [[x["threads"], "%.3f" % x["GBps"], "%.3f" % (x["GBps"] / x["threads"]),
                                  "%.3f" % x["scan_select_GBps"]] +
                                 (["%.3f" % x["heads_alone_scan_select_GBps"], "%.2f" % x["heads_alone_over_together"]]
                                  if alone else []) for x in i8["scaling"]])
        text += ("\nThe opt-in integer mode (FATHOM_SCAN_INT8, src/core/store_internal.h; definition in "
                 "src/core/scan_internal.h; bench_scan --int8), same stores and plans: per pass, 64-token block and "
                 "query head the weights q a are rounded to int8 against their largest magnitude, each token's sum "
                 "over channels is an exact integer dot product of its 4-bit codes with them (vpdpbusd, 4 channels "
                 "per instruction, on codes transposed from the planes once per tile for all heads with GFNI and byte "
                 "permutes) and one float scale makes the score. Its scores are quantized (within test_scan's derived "
                 "bound), so it is never the default and not bit-identical to the exact GPU or hybrid steps (the KV tier "
                 "has the same mode, fathom_cuda_tier_set_scan_mode, bit-identical to these kernels: \"The hybrid "
                 "step in the integer scan mode\"). One core: "
                 "fathom:48 %.2f ms/step (%.3f GB/s of planes), ds:32 %.2f ms/step (%.3f GB/s); int8 fathom:48 over "
                 "exact ds:32 time %.3f (issue 16 asks <= 0.5), over int8 ds:32 %.3f; over the tiled exact fathom:48 "
                 "time %.3f; over the old kernel's plane GB/s per core %.2fx. Top-512 selections equal to the exact "
                 "ones: %.4f of rows on average, %.4f at worst (the int8 weights move near-ties; the attention error "
                 "on real captures: bench_grouped_agreement --int8). The GPU host's targets with this mode: %.2f GB/s "
                 "per core (asks >= 3: %s), %.2f GB/s of planes on %d threads (asks >= 40: %s); scan+select on %d "
                 "threads %.2f GB/s.\n"
                 % (i8["fathom_ms_per_step"], i8["fathom_GBps_per_core"], i8["ds_ms_per_step"], i8["ds_GBps_per_core"],
                    i8["ratio_int8_fathom_to_exact_ds"], i8["ratio_int8_fathom_to_int8_ds"],
                    i8["ratio_int8_to_tiled_fathom"], i8["ratio_int8_to_old_fathom_per_core"],
                    i8["topk_agreement_mean"], i8["topk_agreement_min"],
                    i8["fathom_GBps_per_core"], "met" if i8["fathom_GBps_per_core"] >= 3 else "NOT met",
                    last["GBps"], last["threads"],
                    ("met" if last["GBps"] >= 40 else "NOT met") if last["threads"] >= 16 and r["context"] >= 1 << 20
                    else "not this configuration",
                    last["threads"], last["scan_select_GBps"]))
    if "scan_select" in r:
        ss = r["scan_select"]
        last = ss["scaling"][-1]
        alone = "heads_alone_scan_select_GBps" in last
        text += "\n" + md_table(["threads", "scan then select ms/step", "scan+select ms/step",
                                 "scan then select GB/s", "scan+select GB/s"] +
                                (["heads alone GB/s", "alone / together"] if alone else []),
                                [[x["threads"], "%.2f" % x["scan_then_select_ms"], "%.2f" % x["scan_select_ms"],
                                  "%.3f" % x["scan_then_select_GBps"], "%.3f" % x["scan_select_GBps"]] +
                                 (["%.3f" % x["heads_alone_scan_select_GBps"], "%.2f" % x["heads_alone_over_together"]]
                                  if alone else []) for x in ss["scaling"]])
        text += ("\nThe scan feeding a selection of k = %d per query head (sink %d, local %d), fathom:48: "
                 "\"scan then select\" writes the [head][G][n] scores (fathom_scan_parallel) and runs fathom_select "
                 "per query head on the pool; \"scan+select\" is fathom_scan_select_parallel, whose range tasks scan "
                 "into a scratch of their worker and keep only candidates for the heads' top m. Selections identical: "
                 "%s. GB/s are plane bytes per second. On %d threads scan+select takes %.2fx the time of scan then "
                 "select.%s Where it does not hold: the candidates' cost grows with k and with scores that rise along "
                 "the context (each range then raises the shared floor); a step of the whole model also has the "
                 "other layers' work in between.\n"
                 % (ss["k"], ss["sink"], ss["local"], "yes" if ss["identical_selections"] else "NO",
                    last["threads"], last["scan_select_ms"] / last["scan_then_select_ms"],
                    (" \"Heads alone\": the fused scan+select with every head alone in turn (%d calls of one item: "
                     "the hybrid step's share of one pair on the host, one call per pair), their summed time over the "
                     "time of the call with all %d heads: above 1, a call of one item pays what a call of many spreads "
                     "(its first ranges without a floor, the last wave of range tasks, the pool's wake-up)."
                     % (r["heads"], r["heads"])) if alone else ""))
    return text


def bench_scan_segments(rec):
    r = rec["result"]
    return bench_scan_tiled(rec) + (
        "\nThe stores here have segments of %d blocks (a plane row of a segment is %d bytes), the KV tier's default: "
        "the hybrid step's host side scans a session's host planes in that layout. The table above is the same "
        "command on stores of 1024 blocks. The kernels' prefetch stays inside a tile's segment: from commit 64c19c3 "
        "it runs 2 tiles (16 blocks) ahead instead of 4, so a 64-block segment's first 2 of 8 tiles go unprefetched "
        "instead of 4 (a record's commit says which distance it ran). Where it does not hold: the rest of the "
        "difference between the two layouts is not measured.\n"
        % (r["segment_blocks"], r["segment_blocks"] * 8))


def bench_scan_kernel(rec):
    r = rec["result"]
    rows = []
    for k in r["kernels"]:
        for x in k["plans"]:
            rows.append([k["kernel"], x["plan"], x["channels"], x["bits"], "%.1f" % x["ns_per_block"],
                         "%.2f" % x["ns_per_channel_block"], "%.2f" % x["plane_GBps"],
                         "%.1f" % x["fma_floor_ns_per_block"] if x["fma_floor_ns_per_block"] else "-",
                         "%.2f" % x["of_floor"] if x["of_floor"] else "-"])
    text = md_table(["kernel", "plan", "channels", "bits", "ns/block", "ns/channel/block", "plane GB/s",
                     "FMA floor ns/block", "of floor"], rows)
    text += ("\nOne core's time per 64-token block of each tiled kernel (fathom_store_scan_range over a store of "
             "n = %d random keys, dim %d, G = %d, the fastest of 7 rounds), for fathom:48's shape on the bench-scan "
             "setup (18 channels of depth 1, 9 of 2, 4 of 3) and ds:32's (32 of depth 4), against the floor of "
             "the multiply-adds every tiled kernel issues (one per query head, active channel and token: G x "
             "channels x 64 lanes per block) at this core's measured rate (%.2f 16-lane and %.2f 8-lane "
             "multiply-adds per ns). What a kernel spends beyond the floor forms the values from the planes "
             "(AVX-512: %s; AVX2: byte codes, a conversion and a "
             "multiply-add per 8 tokens), stages the tile and waits on memory. Where it does not hold: the scans "
             "read %s; the keys are random, the plans fixed, so the rates are the kernels' and not a "
             "model's; the portable kernel (a multiply then an add) has no floor here; on a shared, loaded machine the "
             "rates are noisy (load average in the record).\n"
             % (r["context"], r["dim"], r["group"], r["fma_zmm_per_ns"], r["fma_ymm_per_ns"],
                "a blend and t - 1 masked adds per 16 tokens" if r.get("avx512_values", "masks") == "masks"
                else "per 16 tokens a table lookup (vpermps) and a share of an index that up to 4 plane rows share, "
                "the tile's nibbles and tables formed once" if r.get("avx512_values", "").startswith("nibbles")
                else "per 16 tokens an index and a table lookup (vpermps), the tile's codes and tables formed once",
                "%s KiB, the rows each plan reads" % " and ".join(
                    "%.0f" % ((8 * x["bits"] + 2 * x["channels"]) * ((r["context"] + 63) // 64) / 1024.0)
                    for x in r["kernels"][0]["plans"])))
    if "ratio_fathom_to_ds_grouped" in r:
        text += ("Kernels grp512 (AVX-512) and grp-port (plain C) are the opt-in grouped-table mode "
                 "(FATHOM_SCAN_GROUPED_*): per block one 16-entry table per group of at most 4 plane rows and query "
                 "head (fathom:48's shape: 12 groups), one lookup and one add per group, head and 16 tokens; a group "
                 "of one channel (all of ds:32's) multiply-adds as the exact kernels do. Their scores round in "
                 "another order (not bit-identical to the exact kernels, the GPU or the hybrid step), so the mode is "
                 "never the default; the FMA floor column is the exact kernels' (the grouped ones issue fewer "
                 "multiply-adds). fathom:48 over ds:32 time: exact %.3f, grouped %.3f; grouped fathom:48 over exact "
                 "ds:32 %.3f (issue 16 asks <= 0.5 on the development machine); grouped over exact fathom:48 %.3f.\n"
                 % (r["ratio_fathom_to_ds_exact"], r["ratio_fathom_to_ds_grouped"],
                    r["ratio_grouped_fathom_to_exact_ds"], r["ratio_grouped_to_exact_fathom"]))
    if rec["table"].endswith("gpu-host"):
        text += ("The binary ran there is bench/bench_scan_kernel.c built on the development machine at the "
                 "recorded commit (Release, linked statically against libfathom's common + core modules, "
                 "LAPACK and BLAS), since that machine has no jansson or PCRE2 to build the full library.\n")
    return text


def decode_cache_sim(rec):
    out = []
    for t in rec["result"]["traces"]:
        u = t["reuse"]
        for x in t["runs"]:
            if x["policy"] == "variant":
                continue
            pol = x["policy"].upper() + (", fill every %d" % x["fill_every"] if "fill_every" in x else "")
            out.append([t["trace"].split("/")[-1], t["prompt_tokens"], t["steps"], pol,
                        "%.0f%%" % (100 * x["plane_share"]),
                        "-" if x["plane_hit"] is None else "%.3f" % x["plane_hit"], "%.3f" % x["row_hit"],
                        "%.3f" % x["bytes_hit"], "%.3f" % u["rows_in_previous_step"]])
    t0 = rec["result"]["traces"][0]
    text = md_table(["trace", "prompt", "steps", "policy", "to planes", "plane bytes hit", "row bytes hit",
                     "all bytes hit", "rows in prev. step"], out)
    gemma = rec["table"].startswith("gemma")
    text += ("\nReal %s decodes on the CPU (%s, k = %d, greedy) traced by bench_decode_trace%s and replayed "
             "by bench/cache_sim.py: the fraction of plane bytes and of K/V row bytes (fp16) a GPU step would find "
             "in an HBM cache of %.0f%% of the session's index instead of sending them over the link, with that "
             "budget split between planes and rows as the 'to planes' column says. LRU evicts by recency as the "
             "step reads; LFU keeps, after each step, the units read most often so far. GPU is the GPU tier's own "
             "cache (fathom_cuda_tier_cache_fill and the tier step's row cache) given the same bytes: after step 0 "
             "and every F steps ('fill every F') the plane lines are chosen again from that step's plan, its "
             "lines (j, p < depth_j) ranked by var_j / 4^p (running key variance), then the spare lines (the other "
             "planes of every channel with variance) ranked the same way while lines remain, holding the blocks "
             "closed at that fill; K/V rows sit in direct-mapped slots (token mod slots, a later token stays), "
             "4 d + 4 bytes each.%s%s Where it does not hold: "
             "%s, short decodes (the cache starts cold); plane units are whole (channel, plane) columns of a KV "
             "head.\n"
             % ("Gemma 3 270M (its 3 global layers, 1 KV head each, d = 256; the sliding layers keep their "
                "window in HBM and are not traced)" if gemma else "SmolLM2-135M",
                t0["attn"], t0["k"],
                " (--steps 64, on %s)" % CACHE_SIM_TRACES[rec["table"]] if rec["table"] in CACHE_SIM_TRACES else "",
                100 * t0["budget"], cache_sim_gpu_vs_lfu(rec), cache_sim_variants(rec),
                "one 270M model and one code prompt of 16k tokens (the paper's regime is 8B models at 32k-1M); "
                "the index is that of the 3 global layers, the only ones that keep one (until commit 2f4b340 the "
                "budget was counted over all 18 layers, 60% of this index)"
                if gemma else "one small model, and a budget sized to a 4k-8k index"))
    return text


TRACE_NAMES = {"code_00": "SmolLM2 4k code", "prose_00": "SmolLM2 4k prose", "smol8k-code": "SmolLM2 8k code",
               "smol8k-prose": "SmolLM2 8k prose", "gemma_code16": "Gemma 16k code",
               "gemma_prose16": "Gemma 16k prose"}


# bench_cuda_tier --trace-point names of each trace
TRACE_POINTS = {"code_00": "smol4k-code", "prose_00": "smol4k-prose", "smol8k-code": "smol8k-code",
                "smol8k-prose": "smol8k-prose", "gemma_code16": "gemma16k-code", "gemma_prose16": "gemma16k-prose"}


def trace_base(path):
    base = path.split("/")[-1]
    return base[:-6] if base.endswith(".trace") else base


def trace_label(path):
    base = path.split("/")[-1]
    base = base[:-6] if base.endswith(".trace") else base
    return TRACE_NAMES.get(base, base)


def at_scale_window(rec):
    """The plan window of a cache-sim-at-scale record's runs (cache_sim
    --window; 1 before it existed): the first as-run's."""
    return [x for x in rec["result"]["traces"][0]["runs"] if x["policy"] == "as"][0].get("window", 1)


def cache_sim_at_scale(rec):
    r = rec["result"]
    rows, sweep, shares = [], [], []
    w = at_scale_window(rec)
    for t in r["traces"]:
        runs = [x for x in t["runs"] if x["policy"] == "as" and x.get("window", 1) == w]
        for b in (b for b in t["best_as"] if b.get("window", 1) == w):
            rows.append([trace_label(t["trace"]), t["prompt_tokens"], t["k"], "%.0f" % t["trace_union"],
                         ctx(b["as_context"]), "%.0f%%" % (100 * b["plane_share"]), b["lines"],
                         "%.2f" % b["slot_multiple"], "%.3f" % b["plane_hit"], "%.3f" % b["row_hit"],
                         "%.3f" % b["as_bytes_hit"]])
        top = max(x["as_context"] for x in runs)
        at = [x for x in runs if x["as_context"] == top]
        shares = [x["plane_share"] for x in at]
        sweep.append([trace_label(t["trace"])] + ["%.2f / %.2f: %.2f" % (x["plane_hit"], x["row_hit"],
                                                                            x["as_bytes_hit"]) for x in at])
    x0 = [x for x in r["traces"][0]["runs"] if x["policy"] == "as"][0]
    text = md_table(["trace", "prompt", "k", "trace union", "as context", "to planes", "plane lines",
                     "slots / union", "plane bytes hit", "row bytes hit", "of the step's bytes"], rows)
    w = x0.get("window", 1)  # records before the plan window filled from the last plan
    fill = ("the last plan every step, spare lines after the plan's" if w == 1 else
            "the last %d plans every step (the lines most of them read first; every step notes its plan), spare "
            "lines after theirs" % w)
    text += ("\nThe GPU tier's own cache policy (bench/cache_sim.py --as-context: fill from " + fill + ", "
             "direct-mapped rows where a later token stays) replayed on real "
             "decode traces, given what an HBM budget of %.0f%% of the index of a session of the 'as context' "
             "length buys per (layer, KV head) at the shape the GPU bench times (d = %d, mean union of %.0f rows: "
             "bench_cuda_tier's at k = 512, G = 4): a fathom:48 plan is 48 plane lines at any d and a line of "
             "a 64-token block costs 10 bytes, so 10%% of a d = 128 index (34 bytes per block and channel) is "
             "43 lines at any context, while row slots grow with the context (10%% of a 1M-token index is "
             "7.2 x the union, of a 128k one 0.89 x). The trace gets the same lines and the same multiple of "
             "its own mean union in slots. 'to planes' is the share of the budget, of those in the sweep below, "
             "that keeps the most of the step's bytes off the link, weighing the plane and row hits by the "
             "target step's bytes (the trace's mean plane bytes per block x blocks, 4 d x union). These rates "
             "replace the earlier '10%% of the traced index' points for the GPU tables: an index of a 4k-16k "
             "trace buys far fewer row slots, relative to a step's rows, than the same share of a 1M-token "
             "index (the old smollm2@10%% point held 2.4%% of a 1M index).\n\n" %
             (100 * r["traces"][0]["budget"], x0["as_dim"], x0["as_union"]))
    text += md_table(["trace (at %s)" % ctx(top)] + ["%.0f%% to planes" % (100 * x) for x in shares], sweep)
    text += ("\nEach cell: plane / row bytes hit: the share of the %s step's bytes kept off the link. Traces: "
             "bench_decode_trace --steps 64 --attn fathom:48 (SmolLM2 k = 64 on prompts of `scripts/make-prompts "
             "R --kind code|prose --count 1 --min 3850 --max 3900` or `--min 7900 --max 7950`, --skip 40|2; Gemma "
             "3 270M k = 512 on code_00 / prose_00 of `scripts/make-prompts R --kind code|prose --count 4 --min "
             "16000 --max 16300 --skip 40|2`, its 3 global layers). Where it does not hold: row reuse is the "
             "trace's own, at its k and length (SmolLM2 k = 64 of 4k-8k, Gemma k = 512 of 16k), not measured at "
             "k = 512 of 1M tokens, where more keys compete and the selection may drift more; plans spread 48 "
             "lines over the trace's d channels (64 or 256), not 128; 64 steps from a cold cache; the trace's "
             "open block never hits, 1 of its ceil(n / 64) blocks (1 in 61 at 3,900 tokens, 1 in 16,384 at 1M), "
             "so the short traces understate plane hits by up to that share.\n"
             % ctx(top))
    return text


ROW_RULES = {"later": "direct-mapped, a later token stays (the GPU's)", "replace": "direct-mapped, replace",
             "ways2": "2-way LRU", "ways4": "4-way LRU", "ways8": "8-way LRU", "lru": "LRU over all slots",
             "latest2": "2-way, the latest tokens stay", "latest4": "4-way, the latest tokens stay",
             "latest8": "8-way, the latest tokens stay"}


def cache_sim_row_rules(rec):
    r = rec["result"]
    rules, rows, gains = [], [], {}
    for t in r["traces"]:
        runs = [x for x in t["runs"] if x["policy"] == "as"]
        for x in runs:
            if x["rows"] not in rules:
                rules.append(x["rows"])
        keys = []
        for x in runs:
            if (x["as_context"], x["plane_share"]) not in keys:
                keys.append((x["as_context"], x["plane_share"]))
        for n, share in keys:
            by = {x["rows"]: x for x in runs if (x["as_context"], x["plane_share"]) == (n, share)}
            first = by[rules[0]]
            rows.append([trace_label(t["trace"]), ctx(n), "%.0f%%" % (100 * share), first["lines"],
                         "%.2f" % first["slot_multiple"], "%.3f" % first["plane_hit"]] +
                        ["%.3f" % by[u]["row_hit"] if u in by else "-" for u in rules])
            for u in rules[1:]:
                if u in by:
                    gains.setdefault((n, share, u), []).append(by[u]["row_hit"] - first["row_hit"])
    text = md_table(["trace", "as context", "to planes", "plane lines", "slots / union", "plane bytes hit"] +
                    ["rows: %s" % u for u in rules], rows)
    notes = []
    for n in sorted({k[0] for k in gains}):
        for u in rules[1:]:
            per = [(share, g) for (m, share, v), g in sorted(gains.items()) if m == n and v == u]
            if per:
                notes.append("at %s, %s against %s: row hit %s" % (
                    ctx(n), u, rules[0], ", ".join("%+.2f to %+.2f at %.0f%% to planes" % (min(g), max(g), 100 * sh)
                                                   for sh, g in sorted(per, reverse=True))))
    text += "\n" + "".join("- %s.\n" % x for x in notes)
    return (text + "\nThe cache-sim-at-scale runs (the GPU tier's plane-line fill, the lines and slots 10%% of the "
            "index of a session of the 'as context' length buys, scaled to the trace) with the row slots under "
            "other rules (bench/cache_sim.py --as-rows): %s. In a W-way rule the slots form sets of W "
            "(set = token mod the number of sets); a step's rows hit when their set holds them, then its missed rows (ascending) "
            "enter their set, evicting the row read longest ago unless this step read it (a 'latest' rule's set "
            "keeps its W latest tokens instead). The plane hits do not "
            "depend on the row rule. The GPU tier runs 'later' (row_ways 0 or 1, its default) and the W-way rules "
            "(row_ways 2, 4, 8: \"The KV tier's row cache in 4-way sets\" times them). Where it does not hold: "
            "the caveats of cache-sim-at-scale hold (row reuse at the trace's own k and length, 64 steps from a "
            "cold cache); a hit rate is not a step time (the GPU tables give the time at a rate; at 1M a row "
            "from host costs more time per byte than a plane line).\n"
            % "; ".join("%s = %s" % (u, ROW_RULES.get(u, u)) for u in rules))


def decode_reuse(rec):
    r = rec["result"]
    rows = [[trace_label(t["trace"]), t["model"], t["prompt_tokens"], "%s, k %d" % (t["attn"], t["k"]), t["steps"],
             "%.3f" % t["reuse"]["rows_in_previous_step"], "%.3f" % t["reuse"]["rows_in_last_8_steps"],
             "%.3f" % t["reuse"]["plane_bytes_in_previous_plan"]] for t in r["traces"]]
    planes = [t["reuse"]["plane_bytes_in_previous_plan"] for t in r["traces"]]
    return (md_table(["trace", "model", "prompt", "method", "steps", "rows in previous step", "rows in last 8 steps",
                      "plane bytes in previous plan"], rows) +
            "\nWhat consecutive decode steps share, on the six real traces of the tables above (bench/cache_sim.py's "
            "reuse, printed with every run): the rows of a step's union (over the query heads of a KV head) that the "
            "previous step, or one of the last 8, selected too; and the plane bytes of a step's plan (8 bytes a "
            "plane line per block, 2 a read channel's scale) that the previous step's plan of the same (layer, KV "
            "head) reads too (channel j: min(t_j, t'_j) lines), weighted by each step's blocks: %.3f to %.3f. That "
            "is what reading a layer's plane lines ahead, by the plan its previous step made, would have in place "
            "before the layer's scan. Where it does not hold: small models (135M, 270M) at 4k-16k tokens with their "
            "own k, 64 steps; how plans drift at 128k-1M on an 8B model is not measured.\n" % (min(planes), max(planes)))


def cache_sim_read_ahead(rec):
    r = rec["result"]
    rows, by_ctx = [], {}
    for t in r["traces"]:
        for x in (x for x in t["runs"] if x["policy"] == "as"):
            waste = "waste" if "plane_ahead_waste" in x else None
            rows.append([trace_label(t["trace"]), ctx(x["as_context"]), "%.0f%%" % (100 * x["plane_share"]),
                         "%.3f" % x["plane_hit"], "%.3f" % x["plane_ahead_hit"],
                         "%.3f" % x["plane_ahead_waste"] if waste else "-",
                         "%.3f" % (x["plane_hit"] + x["plane_ahead_hit"]), "%.3f" % x["row_hit"],
                         "%.3f" % x["row_ahead_hit"], "%.3f" % x["row_ahead_waste"] if waste else "-",
                         "%.3f" % (x["row_hit"] + x["row_ahead_hit"])])
            by_ctx.setdefault(x["as_context"], []).append(x)
    text = md_table(["trace", "as context", "to planes", "plane hit", "+ read ahead", "moved, not read",
                     "planes in HBM", "row hit", "+ read ahead", "moved, not read", "rows in HBM"], rows)
    notes = "".join(
        "- at %s: planes in HBM %.2f-%.2f (cache alone %.2f-%.2f), rows %.2f-%.2f (cache alone %.2f-%.2f)%s.\n" %
        (ctx(n), min(x["plane_hit"] + x["plane_ahead_hit"] for x in xs),
         max(x["plane_hit"] + x["plane_ahead_hit"] for x in xs), min(x["plane_hit"] for x in xs),
         max(x["plane_hit"] for x in xs), min(x["row_hit"] + x["row_ahead_hit"] for x in xs),
         max(x["row_hit"] + x["row_ahead_hit"] for x in xs), min(x["row_hit"] for x in xs),
         max(x["row_hit"] for x in xs),
         "; for every byte it keeps off the step's path the read-ahead moves %.2f-%.2f plane and %.2f-%.2f row "
         "bytes in all" % (min(1 + x["plane_ahead_waste"] / x["plane_ahead_hit"] for x in xs),
                           max(1 + x["plane_ahead_waste"] / x["plane_ahead_hit"] for x in xs),
                           min(1 + x["row_ahead_waste"] / x["row_ahead_hit"] for x in xs),
                           max(1 + x["row_ahead_waste"] / x["row_ahead_hit"] for x in xs))
         if all("plane_ahead_waste" in x and x["plane_ahead_hit"] and x["row_ahead_hit"] for x in xs) else "")
        for n, xs in sorted(by_ctx.items()))
    two = [x for xs in by_ctx.values() for x in xs if "row_ahead2_hit" in x]
    if two:
        def moved(x, kind, sfx):
            hit, waste = x[kind + "_ahead" + sfx + "_hit"], x[kind + "_ahead" + sfx + "_waste"]
            return (hit + waste) / hit if hit else float("inf")
        keep_p = [x["plane_ahead2_hit"] / x["plane_ahead_hit"] for x in two if x["plane_ahead_hit"]]
        keep_r = [x["row_ahead2_hit"] / x["row_ahead_hit"] for x in two if x["row_ahead_hit"]]
        notes += ("- staging only what the last two steps both read (plane_ahead2_*, row_ahead2_*) keeps %.0f-%.0f%% "
                  "of the plane and %.0f-%.0f%% of the row bytes the read-ahead of the last step saves, and moves "
                  "%.2f-%.2f plane and %.2f-%.2f row bytes per byte saved (the last step's: %.2f-%.2f and "
                  "%.2f-%.2f).\n" %
                  (100 * min(keep_p), 100 * max(keep_p), 100 * min(keep_r), 100 * max(keep_r),
                   min(moved(x, "plane", "2") for x in two), max(moved(x, "plane", "2") for x in two),
                   min(moved(x, "row", "2") for x in two), max(moved(x, "row", "2") for x in two),
                   min(moved(x, "plane", "") for x in two), max(moved(x, "plane", "") for x in two),
                   min(moved(x, "row", "") for x in two), max(moved(x, "row", "") for x in two)))
    return (text + "\n" + notes +
            "\nThe cache-sim-at-scale runs (the GPU tier's cache policy with what 10%% of the index of a session of "
            "the 'as context' length buys, window 16) with one more source of bytes: a read-ahead that, before "
            "each layer's step, brings into staging beside the cache the plane lines the previous step's plan of "
            "that (layer, KV head) read (their closed blocks) and the rows of the previous step's union, where "
            "the cache lacks them (the GPU's read-ahead, fathom_cuda_tier_cache_config.ahead_lines and "
            "ahead_rows, does this). '+ read ahead' is the share of the step's plane (row) bytes it would add "
            "(bench/cache_sim.py plane_ahead_hit, row_ahead_hit); 'moved, not read' what it would also bring "
            "that the step does not read, as a share of the step's bytes (the previous plan's lines this plan "
            "drops, the previous union's rows this step does not select: plane_ahead_waste, row_ahead_waste). "
            "Those cross the link too, so the read-ahead pays only where the link would idle while a layer's "
            "kernels run (record gpu-tier-read-ahead times it); the caveats of cache-sim-at-scale hold.\n")


CACHE_SIM_TRACES = {
    "decode-cache-sim": "prompts of `scripts/make-prompts R --kind code|prose --count 1 --min 3850 --max 3900 "
                        "--skip 40|2`",
    "decode-cache-sim-8k": "prompts of `scripts/make-prompts R --kind code|prose --count 1 --min 7900 --max 7950 "
                           "--skip 40|2`",
    "gemma-cache-sim": "a 16k-token code prompt of scripts/make-prompts (code_00 of --kind code, from imghdr.py on)",
}


def cache_sim_gpu_vs_lfu(rec):
    """A sentence: the GPU policy's hit rates against LFU's at half the budget
    to planes, per trace (empty for records without gpu runs)."""
    parts = []
    for t in rec["result"]["traces"]:
        at = {(x["policy"], x.get("fill_every"), x["plane_share"]): x for x in t["runs"]}
        lfu, g1, g16 = at.get(("lfu", None, 0.5)), at.get(("gpu", 1, 0.5)), at.get(("gpu", 16, 0.5))
        if not (lfu and g1 and g16):
            continue
        parts.append("%s %.0f%% (fill every 16: %.0f%%) against LFU's %.0f%%, %.0f%% against %.0f%%, "
                     "%.0f%% against %.0f%%" %
                     (t["trace"].split("/")[-1], 100 * g1["plane_hit"], 100 * g16["plane_hit"],
                      100 * lfu["plane_hit"], 100 * g1["row_hit"], 100 * lfu["row_hit"], 100 * g1["bytes_hit"],
                      100 * lfu["bytes_hit"]))
    if not parts:
        return ""
    return (" At %.0f%% of the index, half to planes, the GPU's own policy (filled every step) keeps of the "
            "plane, row and all bytes: %s. Direct-mapped rows lose to LFU's choice where tokens collide." %
            (100 * rec["result"]["traces"][0]["budget"], "; ".join(parts)))


def cache_sim_variants(rec):
    """The gpu policy's variants (cache_sim --variants): a table of all bytes
    kept off the link per fill, row rule and plane share, and the best."""
    rows, best, replace_more, spare_wins = [], [], [], True
    for t in rec["result"]["traces"]:
        var = [x for x in t["runs"] if x["policy"] == "variant"]
        if not var:
            continue
        by = {(x["fill"], x["rows"], x["plane_share"]): x for x in var}
        replace_more += ["%s at %.0f%% to planes (rows %.3f against %.3f)" % (
            t["trace"].split("/")[-1], 100 * x["plane_share"], by[("spare", "replace", x["plane_share"])]["row_hit"],
            x["row_hit"]) for x in var if x["fill"] == "spare" and x["rows"] == "later"
            and by[("spare", "replace", x["plane_share"])]["row_hit"] > x["row_hit"]]
        spare_wins &= all(x["plane_hit"] is None or x["plane_hit"] >= by[("plan", x["rows"], x["plane_share"])]["plane_hit"]
                          for x in var if x["fill"] == "spare")
        shares = sorted({x["plane_share"] for x in var}, reverse=True)
        at = {(x["fill"], x["rows"], x["plane_share"]): x for x in var}
        for fill in ("plan", "spare"):
            for rule in ("later", "replace"):
                rows.append([t["trace"].split("/")[-1], fill, rule] +
                            ["%.3f" % at[(fill, rule, sh)]["bytes_hit"] if (fill, rule, sh) in at else "-"
                             for sh in shares])
        b = t["best_variant"]
        best.append("%s: %s, rows %s, %.0f%% to planes (planes %.3f, rows %.3f, all %.3f%s)" % (
            t["trace"].split("/")[-1], b["fill"], b["rows"], 100 * b["plane_share"], b["plane_hit"], b["row_hit"],
            b["bytes_hit"], "; as many: " + ", ".join("%s/%s/%.0f%%" % (f, r, 100 * x) for f, r, x in b["ties"][1:])
            if len(b["ties"]) > 1 else ""))
    if not rows:
        return ""
    return ("\n\nVariants of the GPU policy (`--variants`, filled every step): fill 'plan' keeps the plan's lines "
            "only, 'spare' (the GPU's) adds spare lines; rows 'later' (the GPU's) lets a missed token into its slot "
            "unless the slot holds a later one, 'replace' lets the latest missed token of each slot replace what "
            "it held. All bytes kept off the link (plane and row bytes as the step reads them) by share of the "
            "budget to planes:\n\n" +
            md_table(["trace", "fill", "rows"] + ["%.0f%% to planes" % (100 * sh) for sh in shares], rows) +
            "\nMost bytes kept off the link: " + "; ".join(best) + ". Spare lines take only lines the plan leaves "
            "over, so they add plane hits only where the budget holds more lines than a plan reads; here they keep "
            "%s plane bytes as the plan's lines alone at every share. %s\n\n" % (
                "at least as many" if spare_wins else "NOT always as many",
                "Replacing keeps more row bytes than the later-token rule only with many slots: %s; with fewer "
                "slots (more of the budget to planes) the later-token rule keeps more." % "; ".join(replace_more)
                if replace_more else "The later-token rule keeps at least as many row bytes as replacing at every "
                "share."))


# ---------------------------------------------------------------- GPU

GPU_COMMAND = ("FATHOM_COMMIT=<commit> scripts/record-result gpu-offload-step -- build-gpu/bench_cuda_step "
               "--json --out /tmp --contexts 32k,128k,256k,512k,1M --batches 1 --methods "
               "fathom:48,fathom:40,sparq:16,ds:32,thumb,landmark,full4,oracle --reps 3 --no-extras "
               "--prefetch 1")
GPU_RESIDENT_COMMAND = ("FATHOM_COMMIT=<commit> scripts/record-result gpu-resident-scan -- "
                        "build-gpu/bench_cuda_step --json --out /tmp --contexts 1M --resident-only "
                        "--methods fathom:48,fathom:40,sparq:16,ds:32,thumb,full4,landmark --reps 3")

HBM_CAVEAT = ("Where it does not hold: every ratio here assumes the index is in host memory too. With "
              "the index in HBM (K/V rows still fetched from host) a ds:32 step at 1M tokens is about "
              "30 ms and fathom:48 about 29 ms (the HBM table below, same machine): there the scan is "
              "bound by integer work, not bytes, and reading fewer bits buys little. A host-resident "
              "index matters where HBM is full (many sessions, long contexts).")

CUB_NOTE = ("The CUB transport (cub::DeviceMemcpy::Batched over the same run list) was measured no "
            "better than the gather kernel and removed: 41.19 ms against the kernel's 40.86 ms for the "
            "fathom:48 plans of a 1M step's 36 layers, 11.70 against 1.60 ms at 32k (slow on the small "
            "runs of short contexts); H200, 2026-11-29, `git show "
            "notebook-2026-11-29:bench/RESULTS.md`, section \"Gather transports\".")

GPU_PENDING = """
Awaits regeneration from `bench_cuda_step --json` on the H200: the lab notebook's GPU tables
(`git show notebook-2026-11-29:bench/RESULTS.md`) were not kept as the bench's JSON, so they are
not reproduced here. Run this on the GPU machine from a build with `-DFATHOM_CUDA=ON` in
`build-gpu/` (as `scripts/gpu-check` makes it), with the commit the tree was copied from, then
copy `docs/results/data/gpu-offload-step.json` back into the tree and run `scripts/render-results`:

    %s

%s

%s
""" % (GPU_COMMAND, HBM_CAVEAT, CUB_NOTE)

GPU_RESIDENT_PENDING = """
Awaits regeneration, likewise:

    %s
""" % GPU_RESIDENT_COMMAND


def gpu_offload_step(rec):
    r = rec["result"]
    rows = [x for x in r["rows"] if x["section"] == "step"]
    ctxs = sorted({x["context"] for x in rows})
    text = ""
    for N in sorted({x["batch"] for x in rows}):
        sel = [x for x in rows if x["batch"] == N]
        top = max(x["context"] for x in sel)
        header = (["method", "transport"] + [ctx(c) for c in ctxs] +
                  ["%s x floor" % ctx(top), "prefetch ms (x floor)", "1-stream", "transfer",
                   "scan", "top-k", "fetch", "attend"])
        out = []
        for m in dict.fromkeys(x["method"] for x in sel):
            for tr in dict.fromkeys(x["transport"] for x in sel):
                by_ctx = {x["context"]: x for x in sel if x["method"] == m and x["transport"] == tr}
                if not by_ctx:
                    continue
                last = by_ctx[max(by_ctx)]
                pf = last.get("prefetch")
                out.append([m, tr] + ["%.1f" % by_ctx[c]["best_ms"] if c in by_ctx else "-" for c in ctxs] +
                           ["%.2f" % last["xfloor"],
                            "%.2f (%.2f)" % (pf["ms"], pf["xfloor"]) if pf else "-",
                            "%.1f" % last["step_ms"], "%.1f" % last["transfer_ms"], "%.1f" % last["scan_ms"],
                            "%.1f" % last["topk_ms"], "%.1f" % last["fetch_ms"], "%.1f" % last["attend_ms"]])
        text += "N = %d session(s):\n\n" % N + md_table(header, out, ["---", "---"] + ["---:"] * (len(header) - 2))
        text += "\n"
        best = {x["method"]: x for x in sel if x["context"] == top and x["transport"] == "kernel"}
        if "fathom:48" in best:
            f = best["fathom:48"]["best_ms"]
            others = ["%s %.2fx" % (o, ratio(best[o]["best_ms"], f)) for o in ("ds:32", "sparq:16", "thumb", "landmark")
                      if o in best]
            if others:
                text += "At %s, N = %d, fathom:48's step against the others (their time / its time): %s.\n\n" % (
                    ctx(top), N, ", ".join(others))
    p = r["params"]
    text += ("GPU ms per decode step: %d layers x %d KV heads per session, G = %d, d = %d, k = %d; the best "
             "of the one-stream and the pipelined (%d lanes) graph replay, median of --reps; the index "
             "and K/V rows in pinned host memory (%s); link %.1f GB/s at the start and %.1f at the end "
             "of the run. \"x floor\" = step / ((scan + row bytes) / link), the prefetch column counts "
             "every prefetched byte; the breakdown is the one-stream graph's phases at the largest "
             "context.\n\n" %
             (p["layers"], p["kv_heads"], p["group"], p["dim"], p["k"], p["lanes"],
              "K and V interleaved per token unless a row says sep", r["link_GBps"],
              r.get("link_end_GBps") or float("nan")))
    if r.get("transfers"):
        trs = [[t["method"], ctx(t["context"]), "%.2f ms, %.1f GB/s" % (t["kernel_ms"], t["kernel_GBps"]),
                "%.2f ms, %.1f GB/s" % (t["batch_memcpy_ms"], t["batch_memcpy_GBps"])
                if t["batch_memcpy_ms"] is not None else "failed"] for t in r["transfers"]]
        text += "Transfer alone, the same run lists:\n\n" + md_table(
            ["plans", "context", "gather kernel", "cudaMemcpyBatchAsync (plan copied to the host first)"], trs) + "\n"
    text += HBM_CAVEAT + "\n\n" + CUB_NOTE + "\n"
    return text


def gpu_resident_scan(rec):
    r = rec["result"]
    rows = [x for x in r["rows"] if x["section"] in ("resident", "resident-primaryK")]
    out = [[x["method"], ctx(x["context"]), x["keys"], "%.2f" % x["best_ms"], "%.2f" % x["scan_ms"],
            "%.0f" % x["scan_index_GBps"] if x.get("scan_index_GBps") is not None else "-", "%.1f" % x["bits_per_token"]]
           for x in rows]
    text = md_table(["method", "context", "K rows", "step ms", "scan ms", "scan GB/s of index", "bits/token"], out)
    text += ("\nThe index in HBM (no gather), K/V rows still fetched from host memory; scan ms is the "
             "scan kernel's share of a one-stream step (median of 5 recorded runs). nibble4 and dsnib:c "
             "are the nibble-packed layouts the bit-plane scans are compared with (every channel; ds:c's "
             "channels). Where it does not hold: this is the regime where reading fewer bits buys "
             "little (the scans are bound by integer work per byte).\n")
    return text


def gpu_tier(rec):
    r = rec["result"]
    one = lambda d: "%.2f" % d["one_stream_ms"] if "one_stream_ms" in d else "-"
    out = [[ctx(d["context"]), "%.2f" % d["tier_ms"], one(d), "%.2f" % d["fixed_best_ms"],
            "%.2f" % d["fixed_direct_ms"], "%.2fx" % d["tier_vs_fixed"], "%.1f%%" % (100 * d["append_share"]),
            "%.2fx" % d["tier_x_floor"], "%.1f" % d["tier_host_us"], "%.0f" % d["eager_enqueue_us"]]
           for d in r["decode"]]
    text = md_table(["context", "tier ms", "one stream ms", "fixed best ms", "fixed direct ms", "tier / fixed best",
                     "append share", "tier x floor", "host us / replay", "eager enqueue us"], out)
    g = r.get("ragged")
    if g:
        text += ("\nRagged batch of 4 sessions (%s tokens, segments of %d blocks): %.2f ms per step, "
                 "%.2fx the link floor of its %.3f GB (scan %.3f + rows %.3f GB at %.1f GB/s), "
                 "%.1f us of host time per replay%s.\n" %
                 (" / ".join(str(x) for x in g["lengths"]), g["segment_blocks"], g["ms"], g["x_floor"],
                  g["scan_GB"] + g["row_GB"], g["scan_GB"], g["row_GB"], r["link_GBps"], g["host_us"],
                  "; on one stream %.2f ms, %.2fx the floor" % (g["one_stream_ms"], g["one_stream_ms"] / g["floor_ms"])
                  if "one_stream_ms" in g else ""))
        if "one_stream_ms" in g and g["one_stream_ms"] < g["ms"]:
            text += ("The recorded commit pipelined this batch of 32 (session, KV head) pairs in chunks of 2 "
                     "(the first figure); later commits run it (more than 16 pairs, segments under 4096 blocks) on "
                     "one stream by default (the second figure, measured in the same run through "
                     "fathom_cuda_tier_set_lanes(tier, 0, 0)).\n")
    text += ("\nGPU ms per decode step of the KV tier (fathom_cuda_tier_append + fathom_cuda_tier_step): "
             "%d layers x %d KV heads, G = %d, d = %d, k = %d, %s, one session growing by one token per "
             "step, ONE captured graph of every layer's append and step replayed %d times (\"one stream\": the same "
             "graph with fathom_cuda_tier_set_lanes(tier, 0, 0), every phase on one stream, planes scanned in "
             "place); \"fixed\" is "
             "fathom_cuda_step (no appends) over the same host memory at the session's final length: the best "
             "of one stream, 3 lanes (kernel transport) and the direct transport, no prefetch. Append share = "
             "a graph of the appends alone / the tier step. Floor = (scan + row bytes) / link (%.1f GB/s, same "
             "run). The tier step is pipelined by default from 196608 tokens of capacity with segments of at least "
             "4096 blocks and at most 16 (session, KV head) pairs (chunks of one KV head: each "
             "chunk's planned planes gathered into HBM staging on a link stream, its scan, top-k, row fetch "
             "and attention on 3 lanes beside the next chunks' gathers); below that it runs on one stream and "
             "scans the planes in place (there the pipeline measured slower). Where it does not hold: the tier "
             "step prefetches nothing across layers, its append (a graph node chain of its own per layer) is "
             "in the step's time, and only %d layers were held (the step is per layer, so the ratios carry "
             "over to 36).\n" %
             (r["layers"], r["kv_heads"], r["group"], r["dim"], r["k"], r["method"], r["reps"], r["link_GBps"],
              r["layers"]))
    trace = lambda c: ("%.2f / %.2f" % (c["trace_plane_hit"], c["trace_row_hit"]) if "trace_plane_hit" in c
                       else "-")
    rows = [[ctx(d["context"]), c["point"], trace(c), "%d / %.0f" % (c["lines"], c["plan_lines"]),
             "%d / %.0f" % (c["slots"], c["union_mean"]), "%.0f%%" % (100 * c["plane_hit"]),
             "%.0f%%" % (100 * c["row_hit"]), "%.3f (%.1f%%)" % (c["hbm_GB"], 100 * c["hbm_of_index"]),
             "%.2f" % c["ms"], "%.2f" % c["one_stream_ms"] if "one_stream_ms" in c else "-",
             "%.2fx" % c["vs_none"], "%.2fx" % (c["ms"] / d["tier_ms"]), "%.2f" % c["host_floor_ms"]]
            for d in r["decode"] for c in d.get("cache", [])]
    if rows:
        text += ("\n**The session's HBM cache** (fathom_cuda_tier_cache_set / _fill): graphs of the %d layers' "
                 "steps at the session's final length (no appends), replayed %d times after one replay that fills "
                 "the row cache.\n\n" % (r["layers"], r["reps"]))
        text += md_table(["context", "point", "trace planes / rows", "plane lines / plan's", "row slots / union",
                          "plane hit", "row hit",
                          "HBM GB (of index)", "ms", "one stream ms", "vs none", "vs tier step",
                          "host-byte floor ms"], rows)
        text += ("\nPlane lines per (layer, head) are a fraction of the plan's own lines (water-filling's sum of "
                 "depths, filled by the plan's depths, low planes of high-variance channels first); row slots a "
                 "multiple of the mean union of the group's winners (direct-mapped by token, so even slots = 64 x "
                 "union misses a few). Hit rates are MEASURED: bytes the step read from HBM (the step's cache_bytes "
                 "counters) over the plane bytes its plan read and the row bytes its union fetched. \"none\" is "
                 "the same graph with no cache; \"vs tier step\" compares with the growing step of the table above "
                 "(issue 16's targets: <= 0.65x at 1M, <= 0.6x at 128k, at real hit rates with 10% of the index). "
                 "Points named TRACE/S% force the hit rates that bench/cache_sim.py --as-context measured on "
                 "that real decode trace with S% of an HBM budget of 10% of this context's index to planes and "
                 "the rest to rows (the table \"The hit rates at what 10% of a 128k or 1M-token session's index "
                 "buys\"SOURCE_NOTE); the bench reaches them through the cache's size (lines = the plan's x (planes - "
                 "0.015), slots = m x union with m (1 - exp(-1/m)) = rows); the 'trace' column gives the trace's "
                 "rates, the hit columns what the bench measured and the "
                 "HBM column what those rates took here (a plan that does not drift needs less). \"ms\" is the step as the "
                 "library runs it by "
                 "default: pipelined at 1M (the gather moves only what the plane cache lacks), on one stream "
                 "once every live session's plane cache holds at least a plan's budget of lines (from commit "
                 "472de69; before it, half of them) and at 128k; \"one stream ms\" the same graph with fathom_cuda_tier_set_lanes(tier, "
                 "0, 0). Host-byte floor = the bytes still read from host / link. Where it does not hold: "
                 "queries are the same every step here, so the plan and union do not drift; the hit rates are "
                 "forced through the cache's size, not earned by a policy on a real decode, and the traces are "
                 "of small models (135M, 270M) at 4k-16k, not of the 8B shape at 128k-1M timed here.VERDICT_NOTE The growing "
                 "step above already has the tier scan of commit c7f7396 (the fixed scan's nibble decoding, 2.2x "
                 "faster in HBM); the step before it measured 2.22 ms at 128k and 7.33 ms at 1M (commit 502a26c, "
                 "same machine), the 'today' of issue 16's targets.\n").replace("SOURCE_NOTE", gpu_cache_sim_source()).replace(
                     "VERDICT_NOTE", gpu_trace_verdict(r))
    return text


def direct_point(name, ways):
    """A W-way trace point's name (TRACE-wW/S%) -> its direct-mapped twin's
    (TRACE/S%), and its trace and share: (twin, TRACE, S%); twin None where
    the name has no -wW."""
    trace, _, share = name.rpartition("/")
    tag = "-w%d" % ways
    if not trace.endswith(tag):
        return None, trace, share
    return trace[:-len(tag)] + "/" + share, trace[:-len(tag)], share


def gpu_tier_row_sets(rec):
    """bench_cuda_tier --only-cache with each trace point twice: the
    direct-mapped row cache at its simulated rate (TRACE/S%) and W-way sets
    at theirs (TRACE-wW/S%)."""
    r = rec["result"]
    rows, ratios = [], []
    for d in r["decode"]:
        cache = d.get("cache", [])
        none = next((c for c in cache if c["point"] == "none"), None)
        direct = {c["point"]: c for c in cache if c.get("row_ways", 1) == 1 and "trace_row_hit" in c}
        for c in cache:
            w = c.get("row_ways", 1)
            if w <= 1 or "trace_row_hit" not in c:
                continue
            twin, base, share = direct_point(c["point"], w)
            a = direct.get(twin)
            if not a:
                continue
            ratios.append((d["context"], c["ms"] / a["ms"], c["ms"] / none["ms"] if none else None,
                           c["one_stream_ms"] / a["one_stream_ms"]))
            rows.append([ctx(d["context"]), base, share, "%.2f -> %.2f" % (a["trace_row_hit"], c["trace_row_hit"]),
                         "%.0f%% / %.0f%%" % (100 * a["row_hit"], 100 * c["row_hit"]),
                         "%d / %d" % (a["slots"], c["slots"]),
                         "%.1f%% / %.1f%%" % (100 * a["hbm_of_index"], 100 * c["hbm_of_index"]),
                         "%.2f" % a["ms"], "%.2f" % c["ms"], "%.3fx" % (c["ms"] / a["ms"]),
                         "%.2f / %.2f" % (a["one_stream_ms"], c["one_stream_ms"]),
                         "%.2fx / %.2fx" % (a["vs_none"], c["vs_none"])])
    text = md_table(["context", "trace", "to planes", "rows hit (sim): direct -> %d-way" % max(
                         (c.get("row_ways", 1) for d in r["decode"] for c in d.get("cache", [])), default=1),
                     "row hit measured", "row slots", "HBM of index", "direct ms", "sets ms", "sets / direct",
                     "one stream ms", "vs none"], rows)
    summary = ""
    if ratios:
        x = [q for _, q, _, _ in ratios]
        v = [n for _, _, n, _ in ratios if n is not None]
        one = [o for *_, o in ratios]
        summary = (" Over the %d pairs the sets' step is %.3fx to %.3fx the direct-mapped step (median %.3fx), on one "
                   "stream %.3fx to %.3fx%s." %
                   (len(x), min(x), max(x), sorted(x)[len(x) // 2], min(one), max(one),
                    "; against the same graph without a cache %.2fx to %.2fx" % (min(v), max(v)) if v else ""))
    return text + (
        "\nbench_cuda_tier --only-cache on %d layers x %d KV heads, G = %d, d = %d, k = %d, %s, one session at "
        "the context (no appends), graphs of the %d layers' steps replayed %d times after one replay that fills the "
        "row cache. Each trace point twice, the plane lines the same: TRACE/S%% with the row cache direct-mapped "
        "(row_ways 1) at the row hit rate bench/cache_sim.py measured on that real decode trace for the GPU's rule, "
        "and TRACE-wW/S%% with W-way sets (row_ways W: a hit stamps its way with the step, a step's missed rows "
        "enter their set ascending, evicting the way read longest ago unless this step read it) at the rate "
        "--as-rows waysW measured on the same trace with the same budget (record cache-sim-row-rules: 10%% of the "
        "context's index, S%% of it to plane lines). The bench reaches each rate through the cache's size: slots "
        "whose static replay hits it (a set of W keeps min(W, c) of the c union rows mapped to it, direct-mapped "
        "one), so the row slots and HBM columns are what a static replay needed, not the trace's budget. \"ms\" is "
        "the step as the library runs it (pipelined at 1M), \"one stream ms\" the same graph on one stream; both "
        "caches' insertions are in the time (the sets' in one kernel per chunk of pairs).%s%s Where it does not "
        "hold: queries are the same every step, so the union does not drift and the sets' insertion sees fewer "
        "misses than a decode's; rates are forced, not earned by the rule on this model's own decode; at 128k and "
        "with 95%% of the budget to planes the sets hit no more than direct-mapped in the simulation (fewer slots "
        "than a step's union rows), so direct-mapped stays the default (row_ways 0).\n" %
        (r["layers"], r["kv_heads"], r["group"], r["dim"], r["k"], r["method"], r["layers"], r["reps"], summary,
         lease_note(rec, next((c["ms"] for d in r["decode"] if d["context"] == 1 << 20 for c in d.get("cache", [])
                               if c["point"] == "none"), None))))


def uncached_note(r, tier):
    """What the ratios against the uncached step depend on: how fast this
    machine's SMs read host memory in place."""
    none = [p["tier_ms"] for d in r["decode"] if d["context"] == 131072 for a in d.get("ahead", [])[:1]
            for p in a["points"] if p["point"] == "none"]
    ref = [p["ms"] for d in (tier["result"]["decode"] if tier else []) if d.get("context") == 131072
           for p in d.get("cache") or [] if p.get("point") == "none"]
    if not none:
        return ""
    if ref and abs(none[0] / ref[0] - 1) <= 0.05:
        return ("the uncached step here takes %.2f ms at 128k, as on the H200 of gpu-tier (%.2f ms)." %
                (none[0], ref[0]))
    why = ("the link kernels (the scan in place, the row fetch) read host memory at different rates on different "
           "machines at the same copy rate, and where they read faster the fixed kernel time weighs more")
    if not ref:
        return "the uncached step here takes %.2f ms at 128k: %s, so ratios against it differ by machine." % (
            none[0], why)
    faster = none[0] < ref[0]
    return ("the uncached step here takes %.2f ms at 128k (the H200 of gpu-tier: %.2f ms): %s; here it is %s, so "
            "that time weighs %s in the ratios against the uncached step." %
            (none[0], ref[0], why, "faster" if faster else "slower", "more" if faster else "less"))


def gpu_tier_read_ahead(rec):
    """bench_cuda_tier --read-ahead: per context and drift, the step-to-step
    overlap ("ahead-only") and each trace point's cache alone, with
    read-ahead started beside each step (+ahead), after it but for the last
    layer (+ahead-between) and, where recorded, after every layer's step
    (+ahead-across), against the same cycling graph without a cache."""
    r = rec["result"]
    rows, detail, near = [], [], None
    sim = sibling("cache-sim-read-ahead")
    between, cycle, work = 0, 2, "spin"
    kinds = ["+ahead", "+ahead-between"]
    names = ["beside", "between"]
    if any(p["point"].endswith("+ahead-across") for d in r["decode"] for a in d.get("ahead", [])
           for p in a["points"]):
        kinds.append("+ahead-across")
        names.append("across")
    for d in r["decode"]:
        for a in d.get("ahead", []):
            between, cycle, work = a.get("between_us", 0), a.get("cycle", 2), a.get("between", "spin")
            pts = {p["point"]: p for p in a["points"]}
            sweep = {p["point"]: p for p in d.get("cache", [])}  # the trace points' own rates
            only = pts.get("ahead-only")
            sets = [[p] + [pts[p["point"] + x] for x in kinds] for p in a["points"]
                    if not p["read_ahead"] and p["point"] != "none" and all(p["point"] + x in pts for x in kinds)]
            if not sets:
                continue
            span = lambda v: "%.2f-%.2fx" % (min(v), max(v))
            cols = [[x[i]["tier_vs_none"] for x in sets] for i in range(len(kinds) + 1)]
            rows.append([ctx(d["context"]), "%.2f" % a["drift"],
                         "%.0f%% / %.0f%%" % (100 * only["plane_staged"], 100 * only["row_staged"]) if only else "-",
                         "%d" % len(sets)] + [span(c) for c in cols] +
                        [" / ".join("%d" % sum(v <= 0.6 for v in c) for c in cols)])
            if d["context"] == 131072 and only and abs(a["drift"] - 0.2) < 1e-6:
                near = (a["drift"], only)
                for x in sets:
                    z = x[2]  # between: the staging the detail's HBM column shows
                    tr = sweep.get(x[0]["point"], {})
                    given = "trace_plane_ahead" in z and "trace_plane_hit" in tr
                    detail.append([x[0]["point"], "%.0f%% / %.0f%%" % (100 * x[0]["plane_hit"], 100 * x[0]["row_hit"]),
                                   "%.0f%% / %.0f%%" % (100 * (z["plane_hit"] + z["plane_staged"]),
                                                        100 * (z["row_hit"] + z["row_staged"])),
                                   "%.0f%% / %.0f%%" % (100 * (tr["trace_plane_hit"] + z["trace_plane_ahead"]),
                                                        100 * (tr["trace_row_hit"] + z["trace_row_ahead"]))
                                   if given else "-",
                                   "%d / %d" % (z["ahead_lines"], z["ahead_rows"])] +
                                  ["%.3f" % y["tier_ms"] for y in x] + ["%.2fx" % y["tier_vs_none"] for y in x])
    text = md_table(["context", "drift", "overlap: planes / rows", "trace points", "cache vs none"] +
                    ["+ read-ahead %s" % n for n in names] +
                    ["points <= 0.6x (cache / %s)" % " / ".join(names)], rows)
    if detail:
        text += ("\nAt 128k with drift %.2f (the unions overlap %.0f%% from step to step without a cache; the real "
                 "traces' 57-70%%), ms per decode step less the work between layers:\n\n" %
                 (near[0], 100 * near[1]["row_staged"]) +
                 md_table(["trace point", "cache hit: planes / rows", "in HBM with read-ahead (between)",
                           "trace: cache + read-ahead", "ahead lines / rows", "cache ms"] +
                          ["%s ms" % n for n in names] + ["cache vs none"] + ["%s vs none" % n for n in names],
                          detail))
    stage, whole = [], {}
    for d in r["decode"]:
        for a in d.get("ahead", [])[:1]:
            pts = {p["point"]: p for p in a["points"]}
            if "ahead-only" in pts:  # no cache: its HBM is the staging of a whole plan and union
                whole[d["context"]] = pts["ahead-only"]["hbm_GB"]
            for p in a["points"]:
                q = pts.get(p["point"] + "+ahead")
                if not p["read_ahead"] and q and p["hbm_GB"] > 0:
                    stage.append((d["context"], q["hbm_GB"] - p["hbm_GB"], p["hbm_GB"]))
    staging = ""
    if stage:
        at = [x for x in stage if x[0] == 131072] or stage
        k = max(x[1] / x[2] for x in at)
        staging = (" The staging is HBM beside the cache's budget (two layers of plans and unions of the "
                   "session's %d KV heads): %s up to %.3f GB at %s with these caps, %.1fx the cache at these points "
                   "in this %d-layer bench; it grows with layers only by each one's last plan and union, so in a "
                   "model of 36 layers with the cache at the same share of its index it would be about %.2fx." %
                   (r["kv_heads"], "%.3f GB for a whole plan and union (ahead-only)," % whole[at[0][0]]
                    if at[0][0] in whole else "", max(x[1] for x in at), ctx(at[0][0]), k, r["layers"],
                    k * r["layers"] / 36))
    ref = ""
    if sim:
        runs = [x for t in sim["result"]["traces"] for x in t["runs"] if x.get("as_context") == 131072
                and "plane_ahead_waste" in x and x["plane_ahead_hit"] and x["row_ahead_hit"]]
        if runs:
            ref = (" On the real traces (record cache-sim-read-ahead, 128k) reading ahead would move %.1f-%.1f plane "
                   "bytes and %.1f-%.1f row bytes for every byte the step then reads from the staging." %
                   (min(1 + x["plane_ahead_waste"] / x["plane_ahead_hit"] for x in runs),
                    max(1 + x["plane_ahead_waste"] / x["plane_ahead_hit"] for x in runs),
                    min(1 + x["row_ahead_waste"] / x["row_ahead_hit"] for x in runs),
                    max(1 + x["row_ahead_waste"] / x["row_ahead_hit"] for x in runs)))
    return text + (
        "\nbench_cuda_tier --read-ahead on %d layers x %d KV heads, G = %d, d = %d, k = %d, %s, one session at the "
        "context: graphs of %d x %d layer steps, each %d with one of %d query sets, set m = sqrt(1 - e^2) set m-1 + "
        "e Z (e the drift, Z other queries), replayed %d times, so every step's previous step of a layer planned "
        "and selected with another set; after each layer's step %s, the model's projections and MLP between two "
        "layers (Qwen3-8B's take about 230-270 us a layer at batch 1: serve-bench); ms is per decode step less that "
        "work timed alone. \"overlap\" is what read-ahead without a cache stages and the step reads: "
        "the share of a plan's plane bytes (closed blocks) and of a union's rows that the previous set's step "
        "read too. Each trace point's cache has the lines and slots of the cache sweep, its window noted by every "
        "set; read-ahead (ahead_lines <= 48, a plan's lines; ahead_rows <= 2048, a union) copies the next layer's "
        "last plan lines and union rows that the cache lacks into HBM staging, started with each step (beside: "
        "it shares the link with the step's own reads) or after each step's last row fetch "
        "(FATHOM_CUDA_AHEAD_BETWEEN: it has the link while the step's attention and the work between layers run, "
        "and the step's row-cache insertion and notes follow it off the step's path; the last layer's starts "
        "with its step%s); the next step joins it. The copy is one kernel whose warps take the items (pieces of "
        "a line, groups of 8 rows) of every pair in turn, without a barrier between pairs, on few CTAs beside a "
        "step and more between two (src/cuda/tier_ahead.cu, AHEAD_GRID_BESIDE and AHEAD_GRID_BETWEEN: more loads "
        "in flight while other work keeps the SMs and HBM busy; more beside a step take its link); its stream has the highest priority, kept in the graphs (instantiated with node "
        "priorities, as PyTorch's are). The bench's plans overlap more from step to step than the real traces' (its plane overlap "
        "is the upper bound), so each trace point's read-ahead is capped (ahead lines / rows, by bisection on "
        "measured replays) where the cache and staging together would serve more of the plane bytes or rows "
        "than the cache and read-ahead did on its real trace (bench/cache_sim.py plane_ahead_hit, "
        "row_ahead_hit); the capped copy moves fewer bytes than an uncapped one would.%s%s Where it does not "
        "hold: %s; alternating synthetic query sets stand in for a decode's; %s %s\n" %
        (r["layers"], r["kv_heads"], r["group"], r["dim"], r["k"], r["method"], cycle, r["layers"], r["layers"],
         cycle, r["reps"],
         ("HBM is copied for about %.0f us, in short 64 KiB CTAs on every SM (bench_cuda_tier --between-copy), as "
          "a decode's weight-streaming kernels keep the SMs and HBM busy" % between) if work == "copy" else
         "one warp spins %.0f us" % between if between else "nothing runs",
         "; across: FATHOM_CUDA_AHEAD_ACROSS, the last layer's too, so its copy of layer 0 runs beside the work "
         "after the last layer, as a model's head and sampling would, and the capture ends with "
         "fathom_cuda_tier_ahead_join" if "across" in names else "",
         staging, ref,
         "the copy saturates HBM where a decode's kernels stream about half its rate, and a real model's kernels "
         "are many and differ" if work == "copy" else
         "the spin warp leaves the SMs and HBM to the read-ahead, while a model's MLP keeps them busy "
         "(gpu-tier-read-ahead-copy copies HBM instead)" if between else
         "a model runs its projections and MLP between two layers' steps",
         uncached_note(r, sibling("gpu-tier")),
         link_note(rec)))


def gpu_tier_row_sets_churn(rec):
    """bench_cuda_tier --read-ahead with each trace point direct-mapped
    (TRACE/S%) and in W-way sets (TRACE-wW/S%): the cache-only points of the
    alternating graphs (drift 0: the same queries every step)."""
    r = rec["result"]
    rows, by_drift = [], {}
    for d in r["decode"]:
        for a in d.get("ahead", []):
            pts = {p["point"]: p for p in a["points"] if not p["read_ahead"]}
            for name, c in pts.items():
                w = c.get("row_ways", 1)
                if w <= 1:
                    continue
                twin, base, share = direct_point(name, w)
                b = pts.get(twin)
                if not b:
                    continue
                by_drift.setdefault((d["context"], a["drift"]), []).append(c["ms"] / b["ms"])
                rows.append([ctx(d["context"]), "%.2f" % a["drift"], base, share,
                             "%.0f%% / %.0f%%" % (100 * b["row_hit"], 100 * c["row_hit"]),
                             "%.3f" % b["ms"], "%.3f" % c["ms"], "%.3fx" % (c["ms"] / b["ms"]),
                             "%.2fx / %.2fx" % (b["vs_none"], c["vs_none"])])
    text = md_table(["context", "drift", "trace", "to planes", "row hit: direct / %d-way" % max(
                         (p.get("row_ways", 1) for d in r["decode"] for a in d.get("ahead", []) for p in a["points"]),
                         default=1),
                     "direct ms", "sets ms", "sets / direct", "vs none"], rows)
    summary = "".join(" At drift %.2f (%s) the sets' step is %.3f-%.3fx the direct-mapped one." %
                      (e, ctx(c), min(v), max(v)) for (c, e), v in sorted(by_drift.items()))
    return text + (
        "\nThe cache-only points of bench_cuda_tier --read-ahead (graphs alternating the queries with a set drifted "
        "by e; drift 0 repeats one query set) on %d layers x %d KV heads, G = %d, d = %d, k = %d, %s: each trace "
        "point's row cache direct-mapped and in 4-way sets, with the slots that give, in a static replay, the rates "
        "bench/cache_sim.py measured for each rule on that real trace (record cache-sim-row-rules), the plane lines "
        "the same. With changing unions a set's missed rows are many each step and its insertion (sort, way "
        "choice, row writes) runs after each layer's attention.%s Where it does not hold: the drifted queries are "
        "synthetic and the measured hit rates are those of the alternating graphs, not of a decode. %s\n" %
        (r["layers"], r["kv_heads"], r["group"], r["dim"], r["k"], r["method"], summary, link_note(rec)))


def lease_note(rec, none_ms):
    """Where a GPU record's uncached 1M step differs from the gpu-tier record's
    (another machine, or a lease whose host reads cost more): say how much."""
    ref = sibling("gpu-tier")
    if not ref or none_ms is None:
        return ""
    at = [c for d in ref["result"]["decode"] if d["context"] == 1 << 20 for c in d.get("cache", [])
          if c["point"] == "none"]
    if not at:
        return ""
    return (" %sThe same graph without a cache took %.2f ms here against %.2f ms in the gpu-tier record (%s, "
            "commit %s): ratios against it hold for this lease only." %
            (link_note(rec), none_ms, at[0]["ms"], ref["machine"].split(" /")[0], ref["commit"]))


def gpu_cache_sim_source():
    """Where the trace points' rates come from: the cache-sim-at-scale record."""
    rec = sibling("cache-sim-at-scale")
    return ", record cache-sim-at-scale at commit %s" % rec["commit"] if rec else ", no cache-sim-at-scale record"


def trace_points(d):
    """A decode entry's trace points (bench_cuda_tier --trace-point): those
    with the trace's rates."""
    return [c for c in d.get("cache", []) if "trace_plane_hit" in c]


def trace_share(point):
    """A trace point's name TRACE/S% -> (TRACE, S); None for other names."""
    name, _, share = point.rpartition("/")
    if name and share.endswith("%") and share[:-1].isdigit():
        return name, int(share[:-1])
    return None


def gpu_trace_verdict(r):
    """Per context: the trace points at each trace's bytes-best share (the
    first cache-sim-at-scale pick) and the fastest share per trace, against
    the uncached graph and the growing tier step, and issue 16's targets."""
    rec = sibling("cache-sim-at-scale")
    best = {}
    if rec:
        w = at_scale_window(rec)
        for t in rec["result"]["traces"]:
            for b in (b for b in t["best_as"] if b.get("window", 1) == w):
                for name in (trace_base(t["trace"]), TRACE_POINTS.get(trace_base(t["trace"]))):
                    best[(name, b["as_context"])] = round(100 * b["plane_share"])
    out = []
    for d in r["decode"]:
        pts = trace_points(d)
        if not pts:
            continue
        by = {}
        for c in pts:  # TRACE/S% (bench/trace_points.py); other names are listed in the table only
            ts = trace_share(c["point"])
            if ts:
                by.setdefault(ts[0], []).append((ts[1], c))
        if not by:
            continue
        target = 0.65 if d["context"] >= 1 << 20 else 0.6  # issue 16's
        parts = []
        for name, got in by.items():
            pick = best.get((name, d["context"]))
            at = dict(got)
            fast_s, fast = min(got, key=lambda x: x[1]["ms"])
            bits = []
            if pick in at:
                bits.append("bytes-best %d%%: %.2fx none, %.2fx the tier step" %
                            (pick, at[pick]["vs_none"], at[pick]["ms"] / d["tier_ms"]))
            bits.append("fastest %d%%: %.2fx / %.2fx" % (fast_s, fast["vs_none"], fast["ms"] / d["tier_ms"]))
            parts.append("%s %s" % (name, ", ".join(bits)))
        worst = max(min(c["vs_none"] for _, c in got) for got in by.values())
        out.append(" At %s (target <= %.2fx, judged against the same graph without a cache): %s; at each "
                   "trace's fastest share the slowest trace is %.2fx none: %s." %
                   (ctx(d["context"]), target, "; ".join(parts), worst, "met" if worst <= target else "NOT met"))
        every = next((c for c in d.get("cache", []) if c["point"] == "p1"), None)
        none = next((c for c in d.get("cache", []) if c["point"] == "none"), None)
        floors = [c["host_floor_ms"] for c in pts]
        if worst > target and every and none and floors:
            low = every["ms"] + min(floors)
            out.append(" What bounds it at %s: with every byte in HBM (p1) the step still takes %.2f ms (%.2fx "
                       "none: the GPU's own kernels, plan, scan, top-k, fetch and attention, one after another per "
                       "layer), and the bytes the trace points still read from host take %.2f-%.2f ms at the link "
                       "rate (host-byte floor); done one after the other that is at least %.2f ms, %.2fx none, "
                       "%s the target's %.2f ms: %s." %
                       (ctx(d["context"]), every["ms"], every["ms"] / none["ms"], min(floors), max(floors), low,
                        low / none["ms"], "above" if low > target * none["ms"] else "within",
                        target * none["ms"],
                        "only overlapping the GPU's own work with the link's transfers could reach it"
                        if low > target * none["ms"] else "the rest is the link's efficiency and the overlap"))
    return "".join(out)


def gpu_hybrid(rec):
    r = rec["result"]
    rows = []

    def gbps(x):
        return "-" if x is None else "%.2f" % x

    def row(context, label, t, ref_ms):
        return [context, label, "%.2f" % t["cpu_GBps"], "%.3f" % t["cpu_fixed_ms"], gbps(t["gpu_GBps"]),
                "%.3f" % t["gpu_fixed_ms"], "%.1f%%" % (100 * t["noise"]) if "noise" in t else "-",
                "%d" % t["share"], "%.2f" % t["ms"], "%.2fx" % (t["ms"] / ref_ms),
                "%d: %.2f" % (t["best_share"], t["best_ms"]), " / ".join("%.1f" % x for x in t["ms_by_share"])]

    caches = lambda d: d["cache"] if isinstance(d["cache"], list) else [d["cache"]]
    for d in r["decode"]:
        for t in d["threads"]:
            rows.append(row(ctx(d["context"]), str(t["threads"]), t, d["gpu_only_ms"]))
        for c in caches(d):
            rows.append(row(ctx(d["context"]), "%d + %s" % (c["hybrid"]["threads"], c.get("point", "cache")),
                            c["hybrid"], d["gpu_only_ms"]))
    text = md_table(["context", "host threads", "cpu GB/s", "cpu fixed ms", "gpu GB/s", "gpu fixed ms", "noise",
                     "share",
                     "ms", "vs GPU only", "best share: ms", "ms with 0 .. %d pairs on the host" % r["kv_heads"]],
                    rows)
    gpu = ", ".join("%s %.2f ms" % (ctx(d["context"]), d["gpu_only_ms"]) for d in r["decode"])
    zeros = [t["ms_by_share"][0] / d["gpu_only_ms"] for d in r["decode"] for t in d["threads"]]
    last = r["decode"][-1]
    top = max(last["threads"], key=lambda t: t["threads"])
    host_best = min(min(t["ms_by_share"][1:]) for t in last["threads"])
    picks = [(d, t) for d in r["decode"] for t in d["threads"] + [c["hybrid"] for c in caches(d)]]
    hits = sum(1 for d, t in picks if t["share"] == t["best_share"])
    worst = max(t["ms"] / t["best_ms"] for d, t in picks)
    cache = "; ".join(
        "at %s, %s: measured hit rates planes %.2f, rows %.2f (%.1f%% of the index in HBM), GPU-only %.2f ms (%.2fx "
        "the uncached), with the host on %d threads %.2f ms at the chosen share %d (best %d: %.2f ms), %.2fx the "
        "uncached GPU-only step" %
        (ctx(d["context"]), c.get("point", "cache"), c["plane_hit"], c["row_hit"], 100 * c["hbm_of_index"],
         c["gpu_only_ms"], c["gpu_only_vs_uncached"], c["hybrid"]["threads"], c["hybrid"]["ms"], c["hybrid"]["share"],
         c["hybrid"]["best_share"], c["hybrid"]["best_ms"], c["hybrid"]["ms"] / d["gpu_only_ms"])
        for d in r["decode"] for c in caches(d)) or "none run"
    at_last = caches(last)
    # judged at the scheduler's share, with the host taking part of the scans
    # (a share of 0 is the cached GPU-only step: the 0.65x target's)
    chosen = [c["hybrid"]["ms"] / last["gpu_only_ms"] for c in at_last if c["hybrid"]["share"] > 0]
    gpu_best = min(c["gpu_only_ms"] for c in at_last) / last["gpu_only_ms"] if at_last else None
    paid = [c for c in at_last if min(c["hybrid"]["ms_by_share"][1:]) < c["hybrid"]["ms_by_share"][0]]
    gain = max((1 - min(c["hybrid"]["ms_by_share"][1:]) / c["hybrid"]["ms_by_share"][0] for c in paid), default=0)
    int8 = r.get("scan_mode") == "int8"
    # records before --segment-blocks used one segment of context / 64 blocks
    own = [d.get("segment_blocks", d["context"] // 64) for d in r["decode"]]
    segs = ("context / 64 blocks" if own == [d["context"] // 64 for d in r["decode"]]
            else " or ".join("%d blocks" % x for x in sorted(set(own))))
    # judged as the library runs it: the scheduler's share at EVERY trace point
    ratios = [c["hybrid"]["ms"] / last["gpu_only_ms"] for c in at_last]
    under = sum(1 for x in ratios if x <= 0.55)
    best_host = [min(c["hybrid"]["ms_by_share"][1:]) / last["gpu_only_ms"] for c in at_last]
    verdict = ("not measured (no trace point at %s)" % ctx(last["context"]) if gpu_best is None else
               "%s: at the scheduler's share the step is <= 0.55x at %d of %d trace points (%.2fx to %.2fx), and the "
               "scheduler gave the host a share at %d of them%s; the cached GPU-only step alone reaches %.2fx; a "
               "host share measured faster than none at %d of them (by at most %.0f%%), and the fastest step with "
               "a host share is <= 0.55x at %d of them" %
               ("met" if chosen and max(ratios) <= 0.55 else "NOT met", under, len(ratios), min(ratios),
                max(ratios), len(chosen), " (best %.2fx)" % min(chosen) if chosen else "", gpu_best, len(paid),
                100 * gain, sum(1 for x in best_host if x <= 0.55)))
    # the rule of the cache table's verdict: each trace at the plane share of
    # the budget that gives it its fastest step (here: at the scheduler's share)
    by_trace = {}
    for c, x in zip(at_last, ratios):
        ts = trace_share(c.get("point", ""))
        if ts:
            by_trace[ts[0]] = min(x, by_trace.get(ts[0], x))
    if by_trace:
        slow = max(by_trace, key=by_trace.get)
        verdict += ("; at each trace's fastest plane share (at the scheduler's host share) the slowest trace, %s, "
                    "is %.2fx: %s" % (slow, by_trace[slow], "met" if by_trace[slow] <= 0.55 else "NOT met"))
    ways = sorted({c.get("row_ways", 1) for c in at_last})
    if len(ways) > 1 or ways and ways[0] > 1:
        verdict += "; by row rule: " + "; ".join(rule_verdict(at_last, w, last["gpu_only_ms"]) for w in ways)
    if rec["table"].endswith("-row-sets"):
        verdict += "." + lease_note(rec, last["gpu_only_ms"])[:-1]
    text += ("\nGPU ms per decode step of fathom_cuda_hybrid_step: %d layers x %d KV heads, G = %d, d = %d, k = %d, %s, "
             "one session of the context less 64 tokens (segments of %s), ONE graph of the %d "
             "layers' steps (no appends) replayed %d times; the GPU-only step (fathom_cuda_tier_step) in the same "
             "run: %s. Per host thread count, fathom_cuda_hybrid_calibrate measures on layer 0 (bytes: the "
             "scheduler's estimate of plane bytes, n (B + min(B, d) / 4) / 8 per pair): cpu, the host's plan + scan + "
             "select of every pair on that many threads, and cpu fixed, the step with every pair on the host less "
             "their bytes at the cpu rate; gpu and gpu fixed, a least-squares fit of the GPU side's time with "
             "0 .. %d pairs given (the host's selections given at once) against the GPU pairs' bytes; and the "
             "hybrid step at every share, whose time over the two-sided estimate is kept per share as a "
             "correction. fathom_cuda_hybrid_share picks how many of the %d pairs the host takes (\"share\", whose "
             "step is \"ms\"), and the step is measured with every share (last column: 0 = the GPU-only step "
             "again, its spread over the rows, %.2fx to %.2fx of the first measurement, is the noise). The "
             "scheduler picked the best measured share in %d of %d rows (the worst pick %.2fx the best: one "
             "calibration of one layer, %s, against graphs of %d layers). \"+ TRACE/S%%\" rows: the "
             "session's HBM cache at that trace point of the KV tier table (the hit rates bench/cache_sim.py "
             "--as-context measured on that real decode trace with 10%% of this context's index as budget, S%% of "
             "it to planes; reached through the cache's size, measured here), the hybrid on the last thread count: "
             "%s. Issue 16's \"with the host CPU scanning its share <= 0.55x\" at 1M: %s. test_cuda_hybrid "
             "checks the hybrid step's selections, depths, unions, out and LSE bit-identical to the GPU-only "
             "step's. Where it does not hold: %s: its kernel reads %.2f GB/s per core here "
             "(%.1f GB/s on %d threads at %s, in the scheduler's bytes), %.2f of the link's %.1f GB/s, and the "
             "host side adds a fixed latency per layer (host function, pool wake-ups, the copy), so the fastest "
             "uncached step with any pair on the host at %s is %.2fx the GPU-only step%s. The host "
             "pairs' plane cache lines are not used (the host reads host memory). Queries are the same every "
             "step and the length does not grow; one session (batch 1); the host shares its memory bandwidth "
             "with the GPU's reads of the other pairs.\n%s" %
             (r["layers"], r["kv_heads"], r["group"], r["dim"], r["k"], r["method"], segs, r["layers"], r["reps"], gpu,
              r["kv_heads"], r["kv_heads"], min(zeros), max(zeros), hits, len(picks), worst,
              r.get("calibration", "best of 3"), r["layers"], cache,
              verdict, "the host CPU barely pays" if host_best / last["gpu_only_ms"] > 0.95 else
              "the host pays for a share of whole pairs only", top["cpu_GBps"] / top["threads"], top["cpu_GBps"], top["threads"], ctx(last["context"]),
              top["cpu_GBps"] / r["link_GBps"], r["link_GBps"], ctx(last["context"]),
              host_best / last["gpu_only_ms"],
              "" if int8 else "; a host kernel at issue 16's >= 3 GB/s per core (the tiled AVX-512 kernel: 1.6 GB/s "
              "per core on one core of this host at 1M, \"The tiled kernel on the GPU machine's host\"; the integer "
              "mode's kernel: \"The hybrid step in the integer scan mode\") is what would make a larger share pay",
              int8_hybrid_note(r, last, top, worst, at_last, picks) if int8 else ""))
    return text


def rule_verdict(points, ways, gpu_ms):
    """The hybrid trace points of one row rule: how many reach issue 16's
    0.55x, and the hybrid step against the other rule's at the same point."""
    got = [c for c in points if c.get("row_ways", 1) == ways]
    x = [c["hybrid"]["ms"] / gpu_ms for c in got]
    text = "%s, <= 0.55x at %d of %d (%.2fx to %.2fx)" % (
        "direct-mapped rows" if ways <= 1 else "%d-way row sets" % ways, sum(1 for v in x if v <= 0.55), len(x),
        min(x), max(x))
    if ways > 1:
        direct = {c["point"]: c for c in points if c.get("row_ways", 1) == 1}
        pairs = []
        for c in got:
            a = direct.get(direct_point(c["point"], ways)[0])
            if a:
                pairs.append((c["hybrid"]["ms"] / a["hybrid"]["ms"], c["gpu_only_ms"] / a["gpu_only_ms"]))
        if pairs:
            text += (", at the same trace and share %.2fx to %.2fx the direct-mapped hybrid step (GPU-only %.2fx "
                     "to %.2fx)" % (min(p[0] for p in pairs), max(p[0] for p in pairs), min(p[1] for p in pairs),
                                    max(p[1] for p in pairs)))
    return text


def int8_hybrid_note(r, last, top, worst, at_last, picks):
    """The integer-mode run's paragraph: what the mode is and what its host share bought."""
    best = min(range(1, len(top["ms_by_share"])), key=lambda c: top["ms_by_share"][c])
    best_ms, gpu_ms = top["ms_by_share"][best], last["gpu_only_ms"]
    given = [c for c in at_last if c["hybrid"]["share"] > 0]
    change = [100 * (c["hybrid"]["ms"] / c["gpu_only_ms"] - 1) for c in given]
    shares = sorted({c["hybrid"]["share"] for c in given})
    cached = ("With the cache at %s, the scheduler gives the host a share at %d of %d trace points (%s)%s. " %
              (ctx(last["context"]), len(given), len(at_last),
               ", ".join("%d of %d pairs at %d" % (n, r["kv_heads"], sum(1 for c in given if c["hybrid"]["share"] == n))
                         for n in shares) or "none",
               ", the step there %+.0f%% to %+.0f%% in time against the cached GPU-only step" %
               (min(change), max(change)) if given else "")
              if at_last else "")
    uncached = ("Without a cache, at %s on %d threads, the scheduler gives the host %d of %d pairs: %.2f ms against "
                "%.2f GPU-only (%.2fx); the fastest host share measured is %d pairs, %.2fx." %
                (ctx(last["context"]), top["threads"], top["share"], r["kv_heads"], top["ms"], gpu_ms,
                 top["ms"] / gpu_ms, best, best_ms / gpu_ms))
    return (
        "\nThis run is in the integer scan mode (bench_cuda_tier --int8: fathom_cuda_tier_set_scan_mode("
        "FATHOM_CUDA_SCAN_INT8) on the tier, and the host's share scanned by the FATHOM_SCAN_INT8 kernels): both "
        "sides score by the int8 definition (src/core/scan_internal.h), so \"GPU only\" above is the tier step in "
        "that mode and the hybrid is bit-identical to it (test_cuda_hybrid runs its whole check in both modes; "
        "test_cuda_tier checks the GPU's int8 scores bit-identical to the CPU's int8 reference). The mode's scores "
        "approximate the exact ones (how often its top-512 selections equal the exact ones: \"The integer (VNNI) "
        "mode on the GPU machine's host\"). %s %s"
        "Where it does not hold: with the cache, the GPU reads about half the plane bytes from HBM, while the "
        "host's share is read from host memory, so a host pair saves only what the GPU spends on a cached pair; "
        "a call of one pair on the host costs more than its share of a call of all pairs (bench_scan's \"heads "
        "alone\" on the same kind of host), so the shares stay small (at most %d of %d pairs in any row here); "
        "steps with a share vary between "
        "trace points by more than the GPU-only step does (the scheduler's worst pick %.2fx the best, from one "
        "calibration). The host's rate is bounded by its plan and "
        "selection as well as its scan (bench_scan's int8 scan + select against its scan alone: the same table). "
        "The host's rate differs between leases of this machine kind (compare the host GB/s per core here with "
        "the record of bench_scan --int8 on the same kind of host).\n" %
        (uncached, cached, max(t["share"] for d, t in picks), r["kv_heads"], worst))


def gpu_shard(rec):
    r = rec["result"]
    copy = {c["tp"]: c for c in r["copy"]}
    base = {d["method"]: d["step_ms"] for d in r["steps"] if d["tp"] == 1}
    def row(d):
        c = copy.get(d["tp"]) if not d.get("one_device") else None
        return [str(d["tp"]) + (" (token split, 1 GPU)" if d.get("token_split") else ""), d["method"],
                "%.2f" % d["step_ms"], "%.2fx" % ratio(d["step_ms"], base[d["method"]]),
                " / ".join("%.1f" % x for x in d["link_GBps"]) or "-",
                "%.1f" % d["host_GBps"] if d["link_GBps"] else "-",
                " / ".join("%.1f" % x for x in c["link_GBps"]) if c else "-", "%.1f" % c["host_GBps"] if c else "-"]
    rows = [row(d) for d in r["steps"]]
    text = md_table(["tp", "method", "step ms", "vs tp 1", "per-link GB/s (step)", "host GB/s (step)",
                     "per-link GB/s (copy)", "host GB/s (copy)"], rows)
    missing = ", ".join(str(t) for t in r["not_run_tp"])
    text += ("\nfathom_cuda_shard with head sharding: each of tp GPUs holds %d / tp of the %d KV heads in its own "
             "tier (G = %d, d = %d, k = %d, %d layers, one session of %s tokens filled through the GPU append); "
             "ms per decode step = the %d layers' steps on every rank, ranks on their own streams, mean of %d. "
             "Per-link rate = the bytes a rank's step read from host memory (planes and scales by its planned "
             "depths, K/V rows of its unions) / the step time; host = their sum, the host memory bandwidth the "
             "step drew. Copy = a 1 GiB pinned host-to-device copy on every rank's GPU at once, same run: the "
             "links' and the host's ceiling. Target (issue 18): tp = 2 <= 0.55x, tp = 4 <= 0.3x of tp = 1. "
             "Where it does not hold: the machine had %s; tp = %s were NOT run (no multi-GPU machine was lent), so "
             "the scaling target is unmeasured. Rows marked token split run tp = 8Q ranks (Q parts per KV head) all on "
             "ONE GPU: their time against tp = 1 is the split's own cost there (each part's top k of its tokens, the "
             "candidates' exchange and global select, attention over the winners read per query head, the merge), "
             "not a multi-GPU time; test_cuda_tier_shard checks the split equal to one tier.\n" %
             (r["kv_heads"], r["kv_heads"], r["group"], r["dim"], r["k"], r["layers"], ctx(r["tokens"]),
              r["layers"], r["reps"], r["machine"], missing or "none"))
    return text


def serve_rows(runs, base):
    """The serve-bench rows; base: (context, batch, method) -> a measured run
    (the same record's or another's) that the ratio columns compare with."""
    rows = []
    for d in runs:
        c, b, m = ctx(d["context"]), d["batch"], d["method"]
        if "tokens_per_s" not in d:
            why = d.get("skipped") or d.get("error", "")
            rows.append([c, b, m] + ["-"] * 9 + [why.split(":")[0][:40]])
            continue
        def vs(method):
            o = base.get((d["context"], d["batch"], method))
            return "%.1fx" % ratio(d["tokens_per_s"], o["tokens_per_s"]) if o and o is not d else "-"
        tier = "forward_ms" in d
        f = lambda name, fmt="%.2f": fmt % d[name] if tier else "-"
        rows.append([c, b, m, "%.2f" % d["tokens_per_s"], "%.2f" % d["step_ms"], vs("offload"), vs("sdpa"),
                     f("forward_ms"), f("append_ms"), f("tier_step_ms"),
                     # python_ms 0.0: recorded when Python was wall - GPU time clipped at 0 (not measured)
                     "%.1f%%" % (100 * d["python_share"]) if tier and d["python_ms"] > 0 else "-",
                     "%.2fx" % d["vs_parts"] if tier else "-", ""])
    return md_table(["context", "batch", "method", "tok/s", "ms/step", "vs offload", "vs sdpa-HBM", "forward ms",
                     "append ms", "tier step ms", "Python", "step / (fwd + tier)", "note"], rows)


def measured(*records):
    base = {}
    for rec in records:
        for d in rec["result"]["runs"] if rec else []:
            if "tokens_per_s" in d:
                base.setdefault((d["context"], d["batch"], d["method"]), d)
    return base


def sibling(name):
    import json
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


SERVE_TEXT = (
    "Decode with transformers %s (torch %s): random-init %s shapes (%d layers, %d query / %d KV heads, d = %d), "
    "bf16; every method's decode step (the model's own forward + argmax of the next token) is captured in ONE "
    "CUDA graph and replayed; tokens/s = batch / wall time of a step with the host waiting for each token (as "
    "generate does), over %d steps (%d for offload). fathom:B = the KV tier (K/V and index in pinned host "
    "memory) through fathom.tier's custom ops, k = %d, sink %d, local %d; its context was filled SYNTHETICALLY "
    "through tier append (random K/V with per-channel scales; no prefill ran), the measured steps append the "
    "model's real K/V. sdpa = transformers' StaticCache (KV in HBM) and sdpa with a causal mask (so "
    "transformers repeats K/V per query head). offload = dense attention over host memory: every layer's K and "
    "V copied over PCIe each step, then sdpa (one layer-sized pinned buffer serves all layers: the same bytes "
    "cross the link). Split: forward ms = the same graph with no attention work, append / tier step ms = graphs "
    "of every layer's tier append / step alone (CUDA events), Python = host time per step outside the wait for "
    "the GPU (prepare, replay, bookkeeping) / wall time. Where it does not hold: random keys and queries make "
    "the G query heads of a KV head select different tokens (the row fetch is near its maximum of G x k rows, "
    "more than a real model's), the synthetic fill skips the prefill cost, and a row with a note did not "
    "measure (the note says why).\n")


def serve_text(r):
    cfg = r["config"]
    return SERVE_TEXT % (r["transformers"], r["torch"], r["model"], cfg["num_hidden_layers"],
                         cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], r["steps"],
                         r["offload_steps"], r["k"], r["sink"], r["local"])


def serve_bench(rec):
    r = rec["result"]
    extra = sibling("serve-bench-baselines")
    base = measured(rec, extra, sibling("serve-bench-baselines-long"))
    text = serve_rows(r["runs"], base)
    fathom = [d for d in r["runs"] if "forward_ms" in d]
    notes = []
    for d in fathom:
        off, sdpa = base.get((d["context"], d["batch"], "offload")), base.get((d["context"], d["batch"], "sdpa"))
        if d["context"] >= 131072 and off and sdpa:
            notes.append("at %s, batch %d: %.1fx dense host-offload (target >= 10x at 128k), %.2fx sdpa with the "
                         "KV in HBM (target > 1x)%s" % (ctx(d["context"]), d["batch"],
                                                     ratio(d["tokens_per_s"], off["tokens_per_s"]),
                                                  ratio(d["tokens_per_s"], sdpa["tokens_per_s"]),
                                                  " (baselines from the tables below)" if extra else ""))
        if d["context"] == 524288 and d["batch"] == 1:
            notes.append("at 512k, batch 1: %.1f tokens/s (target >= 20)" % d["tokens_per_s"])
    missing = ["%s batch %d" % (ctx(d["context"]), d["batch"]) for d in fathom
               if not all((d["context"], d["batch"], m) in base for m in ("sdpa", "offload"))]
    if missing:
        notes.append("no sdpa / offload baseline measured at %s" % ", ".join(missing))
    if fathom:
        notes.append("step / (forward alone + tier step alone) %.2fx to %.2fx (target <= 1.15x)" % (
            min(d["vs_parts"] for d in fathom), max(d["vs_parts"] for d in fathom)))
    if any(d.get("skipped", "").startswith("unsupported") for d in r["runs"]):
        notes.append("\"unsupported\" for ds:32: the recorded commit's fathom.tier had no fixed-depths path "
                     "(ds:32 through the tier: the last table of this section)")
    # Qwen3-8B's tier per token: 36 layers x 8 KV heads x (bf16 K and V 2 x 128 x 2 B + 4 planes x 128 bits
    # + 128 fp16 scales per 64 tokens) = 36 x 8 x 580 B
    per_token = 36 * 8 * (2 * 128 * 2 + 4 * 128 // 8 + 128 * 2 // 64)
    notes.append("batch 4 at 512k is not run: its host tier needs 4 x 524288 tokens x %d B = %.0f GiB of pinned "
                 "host memory (bf16 K/V 512 B + planes 64 B + scales 4 B per token, layer and KV head), the GPU "
                 "host has 125 GiB (batch 1 at 512k: %.1f GiB; batch 4 at 32k: %.1f GiB)" % (
                     per_token, 4 * 524288 * per_token / 2**30, 524288 * per_token / 2**30,
                     4 * 32768 * per_token / 2**30))
    text += "\n" + "".join("- %s.\n" % n for n in notes)
    return text + "\n" + serve_text(r)


def serve_bench_baselines(rec):
    r = rec["result"]
    text = serve_rows(r["runs"], measured(rec, sibling("serve-bench")))
    py = [d for d in r["runs"] if "forward_ms" in d]
    if py:
        text += "\n" + "".join("- Python at %s, batch %d: %.3f ms of host time per step, %.1f%% of the step "
                                "(target <= 5%%).\n" % (ctx(d["context"]), d["batch"], d["python_ms"],
                                                        100 * d["python_share"]) for d in py)
    return (text + "\nA second run after the first one's baselines beyond 32k ran out of GPU memory (the "
            "benchmark then recorded autograd state), and with the Python share measured as host time; its "
            "sdpa and offload rows are the baselines of the table above. " + serve_text(r))



def serve_bench_baselines_long(rec):
    r = rec["result"]
    text = serve_rows(r["runs"], measured(rec, sibling("serve-bench")))
    return (text + "\nThe baselines the first run could not measure (batch 4 at 128k, 512k), on the merged main: "
            "sdpa with a 75 GB StaticCache in HBM, offload moving 75 GB over PCIe per step (%d steps). "
            % r["offload_steps"] + serve_text(r))


def serve_bench_ds(rec):
    r = rec["result"]
    runs = r["runs"]
    text = serve_rows(runs, measured(rec, sibling("serve-bench"), sibling("serve-bench-baselines")))
    by = {(d["context"], d["method"]): d for d in runs if "tokens_per_s" in d}
    notes = []
    for c in sorted({d["context"] for d in runs}):
        f, ds = by.get((c, "fathom:48")), by.get((c, "ds:32"))
        if f and ds:
            notes.append("at %s, batch 1: fathom:48 %.2fx the tokens/s of ds:32 through the same tier; tier step "
                         "alone %.2f vs %.2f ms" % (ctx(c), ratio(f["tokens_per_s"], ds["tokens_per_s"]),
                                                    f["tier_step_ms"], ds["tier_step_ms"]))
    text += "\n" + "".join("- %s.\n" % n for n in notes)
    return (text + "\nds:32 = Double Sparsity's scan through the tier's fixed depths (depth 4 on the 32 channels "
            "of largest mean square key of each layer and KV head, chosen once from the session's keys at the "
            "first decode step: calibration-free, so the channel choice is not DS's offline one; 128 bits per "
            "key against fathom:48's 48) and the same top-k, row fetch and attention. Recorded on the merged "
            "main after the fixed-depths fix. " + serve_text(r))

def serve_bench_cache(rec):
    r = rec["result"]
    rows, notes = [], []
    ahead = lambda d: d.get("read_ahead", "none")
    plain = {(d["context"], d["batch"], d["method"]): d for d in r["runs"]
             if "tokens_per_s" in d and not d.get("cache") and ahead(d) == "none"}
    for d in r["runs"]:
        c, b, m, share = ctx(d["context"]), d["batch"], d["method"], d.get("cache", 0)
        if "tokens_per_s" not in d:
            why = d.get("skipped") or d.get("error", "")
            rows.append([c, b, m, "%g" % share, "-", ahead(d)] + ["-"] * 6 + [why.split(":")[0][:40]])
            continue
        p = plain.get((d["context"], d["batch"], m))
        cached = (share or ahead(d) != "none") and p is not None
        rows.append([c, b, m, "%g" % share, "%d" % d.get("cache_row_ways", 1) if share else "-", ahead(d),
                     "%.2f" % (d.get("cache_bytes_per_session", 0) / 1e9),
                     "%.2f" % d["tokens_per_s"], "%.2f" % d["step_ms"], "%.2f" % d["tier_step_ms"],
                     "%.2fx" % ratio(d["tokens_per_s"], p["tokens_per_s"]) if cached else "-",
                     "%.2fx" % ratio(d["tier_step_ms"], p["tier_step_ms"]) if cached else "-", ""])
        if cached and d["context"] == 524288 and b == 1:
            notes.append("at 512k, batch 1, cache %g%s: %.1f tokens/s (issue 15's target >= 20; without the cache "
                         "%.1f)" % (share, ", %d-way sets" % d["cache_row_ways"] if d.get("cache_row_ways", 1) > 1
                                    else "", d["tokens_per_s"], p["tokens_per_s"]))
        if d.get("vs_parts", 1) > 1.2 and ahead(d) != "none":
            notes.append("%s x%d, cache %g, read-ahead %s: the decode step took %.2fx its parts (forward %.2f ms + "
                         "the tier step timed alone %.2f ms, which repeats one query, so the read-ahead stages what "
                         "the next step reads, and has no model kernels beside it): inside the decode the queries "
                         "change every step and the copy runs beside the model's kernels, and the tier costs about "
                         "%.1f ms more" % (c, b, share, ahead(d), d["vs_parts"], d["forward_ms"], d["tier_step_ms"],
                                           d["step_ms"] - d["forward_ms"] - d["tier_step_ms"]))
        elif d.get("vs_parts", 1) > 1.2:
            notes.append("%s x%d, cache %g%s: the decode step took %.2fx its parts (forward %.2f ms + the tier step "
                         "timed alone %.2f ms, which repeats one query, so the sets keep its rows): inside the decode, "
                         "with a new query every step, more rows miss and enter the sets, and the tier costs about "
                         "%.1f ms more (record gpu-tier-row-sets-churn: under changing unions the sets' step is "
                         "slower than direct-mapped)" %
                         (c, b, share, ", %d-way sets" % d["cache_row_ways"] if d.get("cache_row_ways", 1) > 1
                          else "", d["vs_parts"], d["forward_ms"], d["tier_step_ms"],
                          d["step_ms"] - d["forward_ms"] - d["tier_step_ms"]))
    text = md_table(["context", "batch", "method", "cache share", "row ways", "read-ahead", "cache GB / seq", "tok/s",
                     "ms/step", "tier step ms", "tok/s vs no cache", "tier step vs no cache", "note"], rows)
    text += "\n" + "".join("- %s.\n" % n for n in notes)
    return (text + "\nThe same decode with each sequence's HBM cache (serve_bench --cache: TierBackend cache_bytes "
            "= the share of the sequence's index at the context, 70%% of it plane lines ranked by the last 16 "
            "plans, the rest K/V row slots, direct-mapped or (row ways > 1, serve_bench --cache-row-ways) in sets "
            "kept by recency of use; set with the capacity, filled at the first decode step and every %d "
            "steps, the fills inside the timed steps), each share run after the other in the same process; "
            "read-ahead (serve_bench --read-ahead: TierBackend read_ahead, the tier's read-ahead of each next "
            "layer's last plan lines and union rows, started with each step or, 'between', after its own work "
            "in the decode graph, beside the model's work between two layers ('across': the last layer's too, "
            "beside the model's head up to the next decode step); what it saves depends on how much "
            "consecutive steps' plans and unions overlap, here the random model's), where a row names it. Where "
            "it does not hold: the hit rates are those of the synthetic context (random keys with per-channel "
            "scales) and the random model's queries, not a real decode's (the GPU tables above use the rates "
            "of real traces). " % r.get("cache_fill_every", 16) + link_note(rec) + serve_text(r))


def link_note(rec):
    """Where a table's GPU is not the H200 of the tables it sits beside: say so."""
    if "H200" in rec["machine"]:
        return ""
    return ("This run is on %s, not the H200 of the sections above: compare its rows with each other, "
            "not with the H200's. " % rec["machine"])

# ---------------------------------------------------------------- Gemma 3 270M

GEMMA_SECTION = "CPU: fidelity and agreement on Gemma 3 270M (16k-32k tokens)"

GEMMA_SETUP = (
    "Gemma 3 270M (Q4_K_M, `scripts/fetch-model gemma3`): 18 layers, of which only the 3 global ones "
    "(5, 11, 17) attend the whole context and use a sparse method (the sliding-window layers attend "
    "their 512-token window exactly), 4 query heads over 1 KV head, d = 256. Captures "
    "(`fathom capture --global-only --positions 128`, build-gemma/runs/) of texts that ship with the "
    "machine, cut by the model's tokenizer with `scripts/make-prompts`: code = Python standard-library "
    "files shown as `$ cat PATH`, prose = man pages and licence texts; calibration = 2048 tokens of C "
    "headers (/usr/include), text the evaluated windows do not contain.")


def interp_bits(curve, target):
    """Bits at which a (bits, error) curve sorted by bits reaches error target (log-error
    interpolation, as fathom eval --match); None when it never does, -1 when already its first point."""
    for i, (b, e) in enumerate(curve):
        if e <= target:
            if i == 0:
                return -1
            b0, e0 = curve[i - 1]
            if e0 == e:
                return b
            import math
            return b0 + (b - b0) * (math.log(e0) - math.log(target)) / (math.log(e0) - math.log(e))
    return None


def match_cell(m, sweep_bits):
    fb = m["fathom_bits"]
    if fb is None:
        return "> %.0f" % max(sweep_bits)
    if abs(fb - min(sweep_bits)) < 1e-9 and m["method_bits"] != fb:
        return "<= %.0f (>= %.2fx)" % (fb, ratio(m["method_bits"], fb))
    return "%.1f (%.2fx)" % (fb, ratio(m["method_bits"], fb))


def gemma_fidelity(rec):
    r = rec["result"]
    sweep = r["k_sweep"]
    ks = [s["k"] for s in sweep]
    header = ["method", "bits/token"] + ["error k = %d" % k for k in ks] + ["fathom bits to match, k = %d" % k
                                                                          for k in ks]
    rows = []
    for i, m in enumerate(sweep[0]["methods"]):
        cells = [m["name"], "%.1f" % m["bits_per_token"]]
        cells += [err(s["methods"][i]) for s in sweep]
        for s in sweep:
            mm = {x["method"]: x for x in s.get("match", [])}.get(m["name"])
            bits = [x["bits_per_token"] for x in s["budget_sweep"] if x["name"].startswith("fathom:")]
            cells.append(match_cell(mm, bits) if mm and m["name"] != "dense" else "-")
        rows.append(cells)
    text = md_table(header, rows)
    text += ("\n%s The window: n = %d tokens, the last %d positions, k = %s keys per query head in all "
             "(%s of n; sink 4 + local 32 included); errors are the mean relative L2 error of the attention output against "
             "dense attention ± its standard error over layers, query heads and positions. \"fathom bits to "
             "match\" is Table 6's analog: the bits at which raw fathom's budget sweep (below) reaches the "
             "method's error, with the saving in parentheses.\n\n" %
             (GEMMA_SETUP, r["tokens"], r["positions"], " and ".join(str(k) for k in ks),
              " and ".join("%.1f%%" % (100.0 * k / r["tokens"]) for k in ks)))
    sw_header = ["budget point", "bits/token"] + ["error k = %d" % k for k in ks]
    sw_rows = []
    for i, m in enumerate(sweep[0]["budget_sweep"]):
        sw_rows.append([m["name"], "%.1f" % m["bits_per_token"]] + [err(s["budget_sweep"][i]) for s in sweep])
    text += "Budget sweep (fathom:B, and fathom-klt:B calibrated by the C headers):\n\n" + md_table(sw_header, sw_rows)
    notes = []
    for s in sweep:
        ms = by_name(s["methods"])
        line = "k = %d: " % s["k"] + compare(ms, "fathom:48", "sparq:16") + compare(ms, "fathom:48", "sparq:32")
        if "fathom:48" in ms and "oracle" in ms:
            line += "fathom:48 is %.2fx the oracle's error." % ratio(ms["fathom:48"]["rel_error"],
                                                                   ms["oracle"]["rel_error"])
        notes.append(line.strip())
    text += "\n" + "\n\n".join(notes) + "\n\n"
    paper = []
    for name, rng in (("ds:32", "46-74 bits"), ("sparq:32", "38-92 bits"),
                      ("loki:32", "56-75 bits where Loki is not rank-limited")):
        cells = []
        for s in sweep:
            mm = {x["method"]: x for x in s.get("match", [])}.get(name)
            bits = [x["bits_per_token"] for x in s["budget_sweep"] if x["name"].startswith("fathom:")]
            if mm:
                cells.append("%s bits at k = %d" % (match_cell(mm, bits).split(" (")[0], s["k"]))
        if cells:
            paper.append("%s's 136-bit error at %s there, at %s here" % (name, rng, " and ".join(cells)))
    if paper:
        text += ("Against the paper (§5.3, Table 6, Qwen3-8B and Llama-3.1-8B): fathom matches " +
                 "; ".join(paper) + ". ")
    text += ("Where it does not hold: one prompt per haystack and the last %d positions of it, so the "
             "standard errors hold over positions and heads, not over texts; 3 global layers with one KV "
             "head each (the paper's Qwen3-8B has 36 x 8) and d = 256, so a 48-bit budget reads far fewer "
             "of the channels than at d = 128; a 270M model.\n" % r["positions"])
    return text


CALIB_DEPENDENT = ("fathom:48", "fathom-klt:48", "ds:32", "loki:32")


def gemma_nocalib(rec):
    r = rec["result"]
    cal = sibling(rec["table"][:-len("-nocalib")])
    sweep = r["k_sweep"]
    ks = [s["k"] for s in sweep]
    cal_sweep = {s["k"]: by_name(s["methods"]) for s in cal["result"]["k_sweep"]} if cal else {}
    header = ["method"] + sum([["calibrated, k = %d" % k, "calibration-free, k = %d" % k, "ratio"] for k in ks], [])
    rows = []
    for name in CALIB_DEPENDENT:
        cells = [name]
        for s in sweep:
            m = by_name(s["methods"]).get(name)
            c = cal_sweep.get(s["k"], {}).get(name)
            cells += [err(c) if c else "-", err(m) if m else "-",
                      "%.2fx" % ratio(m["rel_error"], c["rel_error"]) if m and c else "-"]
        rows.append(cells)
    text = md_table(header, rows)
    same = []
    for s in sweep:
        for m in s["methods"]:
            c = cal_sweep.get(s["k"], {}).get(m["name"])
            if m["name"] not in CALIB_DEPENDENT and c and c["rel_error"] == m["rel_error"]:
                same.append(m["name"])
    text += ("\nThe same capture as the table above (n = %d, last %d positions), evaluated without `--calib`: "
             "fathom's Var from the store's running sums of the window's own keys (the paper's "
             "calibration-free variant, App. D) and fathom-klt's mean, eigenbasis and eigenvalues fitted to "
             "the window's own keys (the \"rotated store without a calibration file\" of issue 17; the "
             "eigenvalue-weighted water-filling does not depend on the basis' column order, so no query "
             "statistic enters it). ds and loki take their channels / leading KLT columns from the "
             "evaluated queries themselves when no calibration is given, so their calibration-free rows "
             "are an optimistic bound, not a deployable method. Ratio = calibration-free / calibrated error; "
             "below 1 the window's own statistics are better. The methods that use no calibration (%s) "
             "give identical errors in both runs.\n" %
             (r["tokens"], r["positions"], ", ".join(sorted(set(same))) or "none"))
    parts = []
    for s in sweep:
        ms = by_name(s["methods"])
        if "fathom-klt:48" in ms and "fathom:48" in ms:
            a, b = ms["fathom-klt:48"]["rel_error"], ms["fathom:48"]["rel_error"]
            parts.append("k = %d: %.4f against %.4f (%.2fx)" % (s["k"], a, b, ratio(a, b)))
    if parts:
        text += ("\nThe rotated store without a calibration file against raw planes, both calibration-free, "
                 "fathom-klt:48 against fathom:48: %s; above 1x the raw planes win.\n" % "; ".join(parts))
    return text


def gemma_quant(rec):
    r = rec["result"]
    rows = r["rows"]
    codes = list(dict.fromkeys(x["code"] for x in rows))
    budgets = list(dict.fromkeys(x["budget"] for x in rows))
    by = {(x["code"], x["budget"]): x for x in rows}
    header = ["B"] + sum([["%s bits" % c, "%s error" % c] for c in codes], [])
    out = []
    for b in budgets:
        cells = [str(b)]
        for c in codes:
            x = by[(c, b)]
            cells += ["%.1f" % x["bits_per_token"], err(x)]
        out.append(cells)
    text = md_table(header, out)
    sym = [(by[("sym", b)]["bits_per_token"], by[("sym", b)]["rel_error"]) for b in budgets]
    cmp_rows = []
    for c in codes:
        if c == "sym":
            continue
        curve = [(by[(c, b)]["bits_per_token"], by[(c, b)]["rel_error"]) for b in budgets]
        for b in budgets:
            x = by[(c, b)]
            sb = interp_bits(sym, x["rel_error"])
            cmp_rows.append([c, str(b), "%.1f" % x["bits_per_token"],
                             "> %.0f" % sym[-1][0] if sb is None else ("<= %.1f" % sym[0][0] if sb < 0 else "%.1f" % sb),
                             "-" if sb is None or sb < 0 else "%.2fx" % ratio(sb, x["bits_per_token"])])
    text += ("\nBits the store's symmetric code needs for the same error (log-error interpolation along "
             "its row of the table above); above 1x the new code reads fewer bits for that error:\n\n")
    text += md_table(["code", "B", "its bits", "sym bits, same error", "saving"], cmp_rows)
    text += ("\n`bench/quant_study.py` (numpy) on %s: n = %d, %d global layers, the last %d positions, "
             "k = %d. All three codes keep the bit-plane prefix property (the first t planes are the t-bit "
             "quantizer of the same range) and use the same plan (fathom's water-filling on q^2 Var at "
             "budget B); bits count code bits plus the scale bits of every channel read (sym, centered: "
             "one fp16 per 64 tokens; asym: fp16 min and max). sym is the store's code: its rows equal "
             "`fathom eval`'s fathom:B on the same capture, positions and k to the digits shown (compared "
             "on the 16k code capture at B = 16, 48 and 128; tests/cli/test_quant_study.sh checks it on a "
             "synthetic capture), so the script's plan, selection and error are the library's. "
             "centered subtracts each channel's mean over the window's keys (known after prefill, like the "
             "rotated store's mean; q.mu is the same for every key, so rankings are unchanged and no bytes "
             "are added). Where it does not hold: one capture and model, %d positions; the planner still "
             "uses Var, which is what a centered or asymmetric code's error follows better than the "
             "symmetric one's, so part of the gain is the code and part is a better-matched plan. "
             "The C store implements the centered code (fathom-centered:B, measured by fathom eval below), "
             "not the asymmetric one.\n" %
             (r["source"], r["tokens"], r["layers"], r["positions"], r["k"], r["positions"]))
    return text


def gemma_klt_fit(rec):
    r = rec["result"]
    return ("fathom_basis_fit (per-channel mean, covariance in double, LAPACK dsyev) on the capture's own keys: "
            "%d fits (every global layer's KV head) of %d keys x %d channels, best of %d each: median %.1f ms "
            "(%.1f-%.1f), one thread of this machine under the load above. This is the whole cost of the "
            "calibration-free rotated store at the end of a prefill (the index strides its fit to at most "
            "16384 keys). The paper reports < 1 ms at 100k tokens on its GPU for d = 128; here the covariance "
            "is a scalar double loop over n d^2 / 2 products and the eigensolve of a %dx%d matrix is on the "
            "CPU, which is what a GPU port (one GEMM, cuSOLVER syevd) would replace.\n" %
            (r["fits"], r["keys"], r["dim"], r["repeats"], r["median_ms"], r["min_ms"], r["max_ms"], r["dim"],
             r["dim"]))


def gemma_centered(rec):
    r = rec["result"]
    sweep = r["k_sweep"]
    ks = [x["k"] for x in sweep]
    header = ["B", "bits/token"]
    for k in ks:
        header += ["fathom error, k = %d" % k, "fathom-centered error, k = %d" % k, "sym bits, same error",
                   "saving"]
    rows = []
    for s in sweep:
        s["_by"] = by_name(s["budget_sweep"])
    budgets = [int(x["name"].split(":")[1]) for x in sweep[0]["budget_sweep"] if x["name"].startswith("fathom:")]
    for b in budgets:
        cells = [str(b), "%.1f" % sweep[0]["_by"]["fathom:%d" % b]["bits_per_token"]]
        for s in sweep:
            sym = [(x["bits_per_token"], x["rel_error"]) for x in s["budget_sweep"] if x["name"].startswith("fathom:")]
            f, c = s["_by"]["fathom:%d" % b], s["_by"]["fathom-centered:%d" % b]
            sb = interp_bits(sym, c["rel_error"])
            cells += [err(f), err(c),
                      "> %.0f" % sym[-1][0] if sb is None else ("<= %.1f" % sym[0][0] if sb < 0 else "%.1f" % sb),
                      "-" if sb is None or sb < 0 else "%.2fx" % ratio(sb, c["bits_per_token"])]
        rows.append(cells)
    text = md_table(header, rows)
    same_bits = all(abs(s["_by"]["fathom:%d" % b]["bits_per_token"] -
                        s["_by"]["fathom-centered:%d" % b]["bits_per_token"]) < 1e-9 for s in sweep for b in budgets)
    text += ("\n`fathom eval` without `--calib` on %s (n = %d, the last %d positions): fathom:B reads the store's "
             "symmetric code, fathom-centered:B the same store's code of k - mu, mu the per-channel mean of the "
             "window's keys (`fathom_store_set_center`; in the decoder the prefill's mean), under the same plan "
             "(water-filling on q^2 Var, Var from the store's running sums, which a shift does not change), so "
             "both read %s bits at each B. \"sym bits, same error\": the bits at which fathom:B's sweep reaches "
             "fathom-centered:B's error (log-error interpolation); the saving is those bits over "
             "fathom-centered's. tests/cli/test_quant_study.sh checks that fathom-centered:B equals "
             "bench/quant_study.py's \"centered\" code on a synthetic capture, so this is the code of the "
             "study tables above, now in the C store and the decoder. Where it does not hold: one capture, "
             "one model; the center is fixed at the first append, so keys far from the prefill's mean (a long "
             "decode that drifts) are coded around a stale center.\n" %
             (r["source"], r["tokens"], r["positions"], "the same" if same_bits else "nearly the same"))
    return text


PAPER_AGREE = {0.02: "Fathom (56 bits) 0.67, SparQ r=16 0.49, landmarks 0.47 (k = 2048 of 80k-100k, 20 sessions)",
               0.005: "SparQ r=32 (136 bits) 0.60, Fathom at 92 bits 0.60 (k = 512, 40 sessions)"}


def paired(a, b, key="word_vs_oracle"):
    import math
    x, y = a[key]["per_prompt"], b[key]["per_prompt"]
    d = [p - q for p, q in zip(x, y)]
    n = len(d)
    mean = sum(d) / n
    se = math.sqrt(sum((v - mean) ** 2 for v in d) / (n - 1) / n) if n > 1 else 0.0
    return mean, se


def sparq_rows_explained(res):
    """Why sparq:32 agrees less than sparq:16 in the table above, from this record and the two next to it."""
    small_k, next_tok = sibling("gemma-code-16k-agree-k"), sibling("gemma-next-token-16k")
    if not small_k or not next_tok:
        return ("Not explained: sparq:32 agrees less than sparq:16 at every budget, although its attention "
                "error is lower in the fidelity tables above; the decode path's SparQ at r = 32, d = 256 "
                "should be checked against eval's before this row is trusted.\n\n")
    parts = []
    for budget in sorted({x["budget"] for x in res}, reverse=True):
        at = {x["method"]: x for x in res if x["budget"] == budget}
        a, b = at["sparq:16"]["word_vs_oracle"]["per_prompt"], at["sparq:32"]["word_vs_oracle"]["per_prompt"]
        parts.append("at %g%% sparq:16 %s and sparq:32 %s (paired sparq:32 - sparq:16 %+.3f ± %.3f)" % (
            100 * budget, "/".join("%.2f" % x for x in a), "/".join("%.2f" % x for x in b),
            *paired(at["sparq:32"], at["sparq:16"])))
    errs = []
    for x in small_k["result"]["k_sweep"]:
        ms = by_name(x["methods"])
        errs.append("k = %d: %.4f against %.4f" % (x["k"], ms["sparq:32"]["rel_error"], ms["sparq:16"]["rel_error"]))
    tf, tf_not_below = [], True
    for b in next_tok["result"]["budgets"]:
        ms = {m["method"]: m for m in b["methods"]}
        if "sparq:32" in ms and "sparq:16" in ms:
            tf_not_below &= ms["sparq:32"]["vs_oracle"] >= ms["sparq:16"]["vs_oracle"]
            tf.append("%g%%: %.3f against %.3f (paired %+.3f ± %.3f)" % (
                100 * b["budget"], ms["sparq:32"]["vs_oracle"], ms["sparq:16"]["vs_oracle"],
                *paired_positions(ms["sparq:32"]["per_position_vs_oracle"], ms["sparq:16"]["per_position_vs_oracle"])))
    return ("sparq:32 below sparq:16 is not a defect of the decode path, and not a sign that r = 32 selects "
            "worse: (1) a decode step selects exactly the rows that fathom eval's scoring (fathom_index_scores + "
            "fathom_select) selects on the same cached keys and the step's own queries (tests/test_model.c, "
            "test_decode_selection_is_evals, sparq:r among the methods); (2) at this table's k on the 16k code "
            "capture, sparq:32's attention error is below sparq:16's (%s; the table \"Attention error at the "
            "agreement runs' k\"); (3) one decode step from the same dense prefix at each of %d positions, "
            "sparq:32's greedy token equals the oracle's %s (%s; \"Next-token agreement, teacher-forced\"). "
            "Per prompt, word agreement vs the oracle was %s: at 2%% the gap is one prompt on which sparq:16's "
            "continuation never left the oracle's while sparq:32's did, with both near 0 on the others; a free "
            "continuation turns the first differing token into a run length, so 4 prompts cannot rank two "
            "methods whose per-step agreement differs by a few points.\n\n" %
            ("; ".join(errs), next_tok["result"]["positions"],
             "as often as sparq:16's or more" if tf_not_below else "within the paired standard errors of sparq:16's",
             "; ".join(tf), "; ".join(parts)))


def gemma_agree(rec):
    r = rec["result"]
    res = r["results"]
    n = len(r["prompts"])
    header = ["budget", "method", "k", "bits", "word vs oracle", "token vs oracle", "word vs dense",
              "ms/step"]
    rows = []
    for x in res:
        ms = 1000.0 * x["decode_s"] / x["decode_steps"] if x.get("decode_steps") else None
        rows.append(["%g%%" % (100 * x["budget"]), x["method"], "%.0f" % x["k_mean"], "%.1f" % x["bits_per_token"],
                     "%.3f ± %.3f" % (x["word_vs_oracle"]["mean"], x["word_vs_oracle"]["stderr"]),
                     "%.3f ± %.3f" % (x["token_vs_oracle"]["mean"], x["token_vs_oracle"]["stderr"]),
                     "%.3f ± %.3f" % (x["word_vs_dense"]["mean"], x["word_vs_dense"]["stderr"]),
                     "%.0f" % ms if ms else "-"])
    text = md_table(header, rows, ["---", "---"] + ["---:"] * 6)
    lines = []
    for budget in sorted({x["budget"] for x in res}, reverse=True):
        at = {x["method"]: x for x in res if x["budget"] == budget}
        pairs = [("fathom:48", "sparq:16"), ("fathom:48", "landmark"), ("fathom:80", "sparq:32")]
        diffs = ["%s - %s %+.3f ± %.3f" % ((a, b) + paired(at[a], at[b])) for a, b in pairs if a in at and b in at]
        lines.append("At %g%% (k = %.0f): paired word-level differences %s. The paper: %s." %
                     (100 * budget, next(iter(at.values()))["k_mean"], "; ".join(diffs),
                      PAPER_AGREE.get(budget, "-")))
    pre = [p["prefill_s"] for p in r["prompts"]]
    toks = [p["n_tokens"] - 1 for p in r["prompts"]]
    dense_ms = [1000.0 * p["dense_decode_s"] / p["dense_steps"] for p in r["prompts"] if p["dense_steps"]]
    text += ("\nStep agreement (paper §5.6) over %d prompts of %d-%d tokens (Python standard-library files as "
             "`$ cat PATH`, cut just after a line opening a block, `scripts/make-prompts --kind code`), %d "
             "decode steps each; mean ± standard error over prompts. word/token vs oracle: share of the "
             "generated words/tokens equal, position by position, to the exact top-k oracle's at the same "
             "k; k = budget x n (sink 4 + local 32 included). ms/step: the method's mean decode step, "
             "this machine, under the load above.\n\n" % (n, min(toks) + 1, max(toks) + 1, r["tokens"]))
    text += "\n\n".join(lines) + "\n\n"
    text += ("Speed and memory in the same run: dense prefill %.0f-%.0f tokens/s (%.0f-%.0f s for ~%dk "
             "tokens, 2 threads), dense decode %.0f ms/step at that length, peak resident memory %.2f GiB "
             "(the weights are held as float32).\n\n" %
             (min(t / s for t, s in zip(toks, pre)), max(t / s for t, s in zip(toks, pre)), min(pre), max(pre),
              round(sum(toks) / len(toks) / 1000), sum(dense_ms) / len(dense_ms), r["peak_rss_kib"] / 2**20))
    worst = max(x["word_vs_oracle"]["stderr"] for x in res if x["method"] not in ("oracle", "dense"))
    by_b = {}
    for x in res:
        by_b.setdefault(x["budget"], {})[x["method"]] = x["word_vs_oracle"]["mean"]
    if all("sparq:32" in v and "sparq:16" in v and v["sparq:32"] < v["sparq:16"] for v in by_b.values()):
        text += sparq_rows_explained(res)
    text += ("Where it does not hold: %d prompts (as many as `--time-limit` let finish), so standard errors "
             "up to %.3f (the issue asks for <= 0.05, which needs several times more prompts than a 16k dense "
             "prefill per prompt, minutes on this shared machine, allows); only 3 of Gemma's 18 layers are sparse, each with one KV head; code "
             "continuations, not agent trajectories; 16k tokens, where 2%% and 0.5%% are k = %.0f and %.0f, "
             "against the paper's k = 2048 and 512 at 80k-100k.\n" %
             (n, worst, max(x["k_mean"] for x in res), min(x["k_mean"] for x in res if x["k_mean"] > 0)))
    return text


# The paper's word-level step agreement with exact top-k (§5.6, Tables 8 and 9) beside the rows it
# compares: fathom:48 is its 56-bit Fathom, fathom:80 (~94 bits) its 92-bit one.
PAPER_AGREE_ROWS = {(0.02, "fathom:48"): "0.67", (0.02, "sparq:16"): "0.49", (0.02, "landmark"): "0.47",
                    (0.005, "sparq:32"): "0.60", (0.005, "fathom:80"): "0.60 (92 bits)"}
PAPER_AGREE_PAIRS = {(0.02, "fathom:48", "sparq:16"): "+0.18 ± 0.05 (20 sessions)",
                     (0.005, "fathom:80", "sparq:32"): "-0.00 ± 0.04 (40 sessions)"}
AGREE_KEYS = ("token_vs_dense", "word_vs_dense", "token_vs_oracle", "word_vs_oracle")


def cluster_se(x, groups):
    """Mean of x and its cluster-robust (CR1) standard error with clusters `groups`
    (what fathom agree reports as stderr_cluster); None with fewer than 2 clusters."""
    import math
    n = len(x)
    mean = sum(x) / n
    sums = {}
    for v, g in zip(x, groups):
        sums[g] = sums.get(g, 0.0) + v - mean
    G = len(sums)
    if G < 2:
        return mean, None
    return mean, math.sqrt(G / (G - 1) * sum(s * s for s in sums.values())) / n


def prompt_se(x):
    import math
    n = len(x)
    mean = sum(x) / n
    return mean, (math.sqrt(sum((v - mean) ** 2 for v in x) / (n - 1) / n) if n > 1 else 0.0)


def agree_runs(recs):
    """Rows of one or more branched `fathom agree` records pooled: per (budget, method) the
    per-prompt values of every measure, the documents (unique across records) and the run facts."""
    rows, groups, order = {}, [], []
    for i, rec in enumerate(recs):
        r = rec["result"]
        groups += ["%d:%d" % (i, p["document"]) for p in r["prompts"]]
        for x in r["results"]:
            key = (x["budget"], x["method"])
            if key not in rows:
                order.append(key)
                rows[key] = {"k": [], "bits": [], "ms": [], **{m: [] for m in AGREE_KEYS}}
            w = rows[key]
            n = len(x["word_vs_oracle"]["per_prompt"])
            w["k"] += [x["k_mean"]] * n
            w["bits"] += [x["bits_per_token"]] * n
            if x.get("decode_steps"):
                w["ms"].append(1000.0 * x["decode_s"] / x["decode_steps"])
            for m in AGREE_KEYS:
                w[m] += x[m]["per_prompt"]
    return order, rows, groups


def agree_pair_stats(rows, groups, budget):
    """Paired word-vs-oracle differences a - b at one budget: (a, b, mean, se over prompts, se over documents)."""
    pairs = [("fathom:48", "sparq:16"), ("fathom:48", "landmark"), ("fathom:80", "sparq:32"),
             ("fathom-centered:48", "fathom:48")]
    out = []
    for a, b in pairs:
        if (budget, a) in rows and (budget, b) in rows:
            d = [x - y for x, y in zip(rows[(budget, a)]["word_vs_oracle"], rows[(budget, b)]["word_vs_oracle"])]
            mean, se_p = prompt_se(d)
            out.append((a, b, mean, se_p, cluster_se(d, groups)[1]))
    return out


def agree_pairs(rows, groups, budget):
    out = []
    for a, b, mean, se_p, se_c in agree_pair_stats(rows, groups, budget):
        paper = PAPER_AGREE_PAIRS.get((budget, a, b))
        out.append("%s - %s %+.3f ± %.3f over prompts, ± %s over documents%s" % (
            a, b, mean, se_p, "-" if se_c is None else "%.3f" % se_c, " (paper %s)" % paper if paper else ""))
    return out


def agree_table(order, rows, groups):
    header = ["budget", "method", "k", "bits", "word vs oracle", "± documents", "token vs oracle", "word vs dense",
              "paper (word vs oracle)"]
    out = []
    for budget, method in order:
        w = rows[(budget, method)]
        wm, wp = prompt_se(w["word_vs_oracle"])
        _, wc = cluster_se(w["word_vs_oracle"], groups)
        out.append(["%g%%" % (100 * budget), method, "%.0f" % (sum(w["k"]) / len(w["k"])),
                    "%.1f" % (sum(w["bits"]) / len(w["bits"])), "%.3f ± %.3f" % (wm, wp),
                    "-" if wc is None else "± %.3f" % wc,
                    "%.3f ± %.3f" % prompt_se(w["token_vs_oracle"]), "%.3f ± %.3f" % prompt_se(w["word_vs_dense"]),
                    PAPER_AGREE_ROWS.get((budget, method), "")])
    return md_table(header, out, ["---", "---"] + ["---:"] * 7)


def agree_worst(rows, groups):
    """The largest standard errors of a sparse method's word agreement: over prompts, over documents."""
    sp, sc = [], []
    for (budget, method), w in rows.items():
        if method in ("oracle", "dense"):
            continue
        sp.append(prompt_se(w["word_vs_oracle"])[1])
        sc.append(cluster_se(w["word_vs_oracle"], groups)[1])
    return max(sp), (None if None in sc else max(sc))


AGREE_WHY = (
    "Where ours differ from the paper, what differs between the two setups (named, not measured one by one): "
    "(1) selection size: at 16k tokens 2%% and 0.5%% are k = %.0f and %.0f keys (sink 4 + local 32 included), "
    "against the paper's k = 2048 and 512 at 80k-100k: the same fractions of a 5-6x shorter context; (2) model: "
    "Gemma 3 270M has 18 layers of which 3 are global, with one KV head each, and only those use the sparse method "
    "(the sliding-window layers attend their 512-token window exactly), against 36 layers x 8 KV heads of Qwen3-8B; "
    "(3) text: Python standard-library files and man pages continued for %d tokens from cuts chosen by rule, not "
    "coding-agent trajectories at the agent's own step boundaries; (4) sensitivity: here even the exact top-k "
    "oracle's continuation equals dense attention's on only %.2f of words at 2%%, so small changes of attention "
    "change greedy continuations of this model on this text, and a continuation that has left the oracle's rarely "
    "matches it position by position again; (5) "
    "prompts cut from one document share its content and its dense prefix, so their outcomes are correlated: the "
    "standard error over documents is the honest one, and it rests on %d documents.\n\n")


def gemma_agree_branched(rec):
    """One branched agreement record (code or prose); the prose one adds both pooled."""
    r = rec["result"]
    order, rows, groups = agree_runs([rec])
    text = agree_table(order, rows, groups)
    prompts = r["prompts"]
    docs = len(set(groups))
    n = [p["n_tokens"] for p in prompts]
    kind = "prose" if "prose" in rec["command"] else "code"
    what = ("man pages and licence texts (`scripts/make-prompts R/prose --kind prose --count 4 --min 16000 --max "
            "16300 --skip 2`), cut just after a line that ends "
            "a sentence ('.', '!' or '?')" if kind == "prose" else
            "Python standard-library files as `$ cat PATH` (`scripts/make-prompts R/code --kind code --count 4 "
            "--min 16000 --max 16300 --skip 40`), cut just after "
            "a line that opens a block (':' or '{')")
    text += ("\nStep agreement (paper §5.6) over %d prompts of %d-%d tokens from %d documents of ~16k tokens: %s, "
             "or just before its line break where the tokenizer joins it to the next line's indent; `fathom agree "
             "--branches`: one dense prefill per document, each prompt rewound to its cut with fathom_ctx_truncate "
             "(test_agree checks that this gives the same tokens, for every method, as a separate prefill of the "
             "prefix), %d decode steps each. word/token vs oracle: share of the generated words/tokens equal, "
             "position by position, to the exact top-k oracle's at the same k; k = budget x n (sink 4 + local 32 "
             "included). ± after a mean: standard error over prompts; \"± documents\": cluster-robust (CR1) "
             "standard error of the same mean with the documents as clusters.\n\n" %
             (len(prompts), min(n), max(n), docs, what, r["tokens"]))
    for budget in sorted({b for b, _ in order}, reverse=True):
        text += "At %g%%, paired word-level differences: %s.\n\n" % (
            100 * budget, "; ".join(agree_pairs(rows, groups, budget)))
    pre = [(p["prefill_tokens"], p["prefill_s"]) for p in prompts if p["prefill_tokens"]]
    dense_ms = [1000.0 * p["dense_decode_s"] / p["dense_steps"] for p in prompts if p["dense_steps"]]
    text += ("Cost in the same run: %d dense prefills of %d-%d tokens at %.0f-%.0f tokens/s, dense decode %.0f "
             "ms/step, every row's decode %.0f-%.0f ms/step (2 threads, under the load above); peak resident "
             "memory %.2f GiB.\n\n" % (
                 len(pre), min(t for t, _ in pre), max(t for t, _ in pre), min(t / s for t, s in pre),
                 max(t / s for t, s in pre), sum(dense_ms) / len(dense_ms),
                 min(min(w["ms"]) for w in rows.values() if w["ms"]),
                 max(max(w["ms"]) for w in rows.values() if w["ms"]), r["peak_rss_kib"] / 2**20))
    recs = [rec]
    if kind == "prose":
        code = sibling("gemma-agree-16k-code")
        if code:
            recs = [code, rec]
            order, rows, groups = agree_runs(recs)
            text += ("Code and prose pooled (%d prompts from %d documents; the code run at commit `%s`, this one at "
                     "`%s`):\n\n" % (len(groups), len(set(groups)), code["commit"], rec["commit"]))
            text += agree_table(order, rows, groups) + "\n"
            for budget in sorted({b for b, _ in order}, reverse=True):
                text += "Pooled, at %g%%, paired word-level differences: %s.\n\n" % (
                    100 * budget, "; ".join(agree_pairs(rows, groups, budget)))
    dense2 = prompt_se(rows[(max(b for b, _ in order), "dense")]["word_vs_oracle"])[0]
    ks = [sum(w["k"]) / len(w["k"]) for (b, m), w in rows.items() if m == "oracle"]
    text += AGREE_WHY % (max(ks), min(ks), r["tokens"], dense2, len(set(groups)))
    sp, sc = agree_worst(rows, groups)
    met = sc is not None and sc <= 0.05
    # this run's cost: a document's dense prefill, a prompt's continuations (dense and every row)
    pre_s = sum(s for _, s in pre) / len(pre)
    per_prompt_s = (sum(p["dense_decode_s"] for p in prompts) +
                    sum(x["decode_s"] for x in r["results"])) / len(prompts)
    text += ("Where it does not hold: standard errors of a sparse method's word agreement up to %.3f over prompts "
             "and %s over documents%s, so the issue's target (<= 0.05) is %s; %d of the %d paired differences "
             "above are within two document standard errors of zero.\n" % (
                 sp, "-" if sc is None else "%.3f" % sc, " (pooled)" if len(recs) > 1 else "",
                 "met" if met else "not met: it needs more documents, each a dense ~16k prefill plus the "
                 "continuations of every cut (at this run's cost, %.0f s per prefill and %.0f s per prompt, 64 "
                 "prompts as 16 documents x 4 cuts take %.1f h on this machine)" % (
                     pre_s, per_prompt_s, (16 * pre_s + 64 * per_prompt_s) / 3600), agree_within(rows, groups),
                 sum(len(agree_pair_stats(rows, groups, b)) for b in {b for b, _ in rows})))
    return text


# Further branched code runs (documents that share no file with each other or with the
# gemma-agree-16k-code run), in the order they pool: (data file, make-prompts folder, --count,
# --skip, prompts of that folder the run took).
AGREE_MORE = [("gemma-agree-16k-code2a", "R/code2", 8, 68, "0-3"), ("gemma-agree-16k-code2b", "R/code2", 8, 68, "4-7"),
              ("gemma-agree-16k-code3a", "R/code3", 8, 124, "0-3"), ("gemma-agree-16k-code3b", "R/code3", 8, 124, "4-7"),
              ("gemma-agree-16k-code4", "R/code4", 3, 22, "0-2"), ("gemma-agree-16k-code5", "R/code5", 6, 121, "0-5"),
              ("gemma-agree-16k-code6", "R/code6", 4, 72, "0-3"), ("gemma-agree-16k-code7", "R/code7", 2, 92, "0-1"),
              ("gemma-agree-16k-code8", "R/code8", 2, 66, "0-1")]


def generate_speed(rec):
    """Prefill and decode speed and peak memory of fathom generate, one process per (prompt, method)."""
    r = rec["result"]
    rows = []
    dense = {x["prompt_tokens"]: x for x in r["runs"] if x["attn"] == "dense"}
    for x in r["runs"]:
        d = dense.get(x["prompt_tokens"])
        rows.append([x["prompt_tokens"], x["attn"], "%.1f" % x["prefill_s"], "%.0f" % x["prefill_tokens_per_s"],
                     "%.2f" % x["decode_tokens_per_s"], "%.0f" % (1e3 / x["decode_tokens_per_s"]),
                     "-" if x["attn"] == "dense" else "%.2f" % (x["scan_bytes_per_step"] / 1e6),
                     "-" if x["attn"] == "dense" or not d else "%.2fx" % (x["decode_tokens_per_s"] /
                                                                          d["decode_tokens_per_s"]),
                     "%.2f" % (x["peak_rss_kib"] / 2**20)])
    text = md_table(["prompt tokens", "decode attention", "prefill s", "prefill tokens/s", "decode tokens/s",
                     "ms per token", "MB scanned per step", "decode vs dense", "peak RSS GiB"], rows)
    text += ("\n`fathom generate --json` on %s (%s), one process per row, %d threads, on this machine "
             "with no other job running (the load average in the header): the prompt's raw text prefilled densely "
             "(every row prefills again: the two rows of a prompt are two measurements of the same prefill), then "
             "%d greedy steps (--ignore-eos) with the row's attention, k = %d keys per query head where sparse. "
             "Prompts: Python standard-library files as `$ cat PATH` (`scripts/make-prompts R/speed16 --kind code "
             "--count 1 --min 16000 --max 16000 --skip 40` and `R/speed32 ... --min 32000 --max 32000 --skip "
             "40`). Sparse attention runs only in the 3 global layers; the 15 sliding-window layers attend their "
             "512-token window exactly, and every step runs the whole model's weights, so the decode speed-up is "
             "what the global layers' attention was of the dense step: %s. Peak memory is the process's (weights, "
             "the dense KV cache, the index, the prefill's activations). Where it does not hold: a 2-core "
             "machine; a model whose layers are all global, or a longer context, makes attention a larger share "
             "of the step.\n" % (r["model"], "the Q4_K_M GGUF of scripts/fetch-model gemma3", r["threads"], r["tokens"], r["k"], "; ".join(
                 "%s at %d tokens %.2fx dense's tokens/s" % (x["attn"], x["prompt_tokens"], x["decode_tokens_per_s"] /
                                                              dense[x["prompt_tokens"]]["decode_tokens_per_s"])
                 for x in r["runs"] if x["attn"] != "dense" and x["prompt_tokens"] in dense)))
    return text


def gemma_agree_more(rec):
    """One further branched code run; the last one on record adds every branched run pooled."""
    r = rec["result"]
    order, rows, groups = agree_runs([rec])
    me = [x for x in AGREE_MORE if x[0] == rec["table"]][0]
    n = [p["n_tokens"] for p in r["prompts"]]
    text = agree_table(order, rows, groups)
    text += ("\nThe protocol of the code run above (`fathom agree --branches 3 --cut code`, %d decode steps) on "
             "%d prompts of %d-%d tokens from %d more documents: prompts %s of `scripts/make-prompts %s --kind code "
             "--count %d --min 16000 --max 16300 --skip %d` (Python standard-library files; no file is in two "
             "documents of these runs; a document with no cut point in its last quarter is left out, as fathom "
             "agree warns).\n" % (r["tokens"], len(n), min(n), max(n), len(set(groups)), me[4], me[1], me[2], me[3]))
    names = ["gemma-agree-16k-code", "gemma-agree-16k-prose"] + [x[0] for x in AGREE_MORE]
    recs = [rec if name == rec["table"] else sibling(name) for name in names]
    recs = [x for x in recs if x]
    if recs[-1] is not rec:
        return text
    order, rows, groups = agree_runs(recs)
    text += ("\n**Every branched run pooled** (%d prompts from %d documents: %s):\n\n" % (
        len(groups), len(set(groups)), ", ".join("%s at `%s`" % (x["table"], x["commit"]) for x in recs)))
    text += agree_table(order, rows, groups) + "\n"
    for budget in sorted({b for b, _ in order}, reverse=True):
        text += "Pooled, at %g%%, paired word-level differences: %s.\n\n" % (
            100 * budget, "; ".join(agree_pairs(rows, groups, budget)))
    sp, sc = agree_worst(rows, groups)
    over = []
    for (budget, method), w in rows.items():
        if method in ("oracle", "dense"):
            continue
        se_p, se_c = prompt_se(w["word_vs_oracle"])[1], cluster_se(w["word_vs_oracle"], groups)[1]
        if se_p > 0.05 or se_c is None or se_c > 0.05:
            over.append("%s at %g%% (%.3f / %s)" % (method, 100 * budget, se_p, "-" if se_c is None else "%.3f" % se_c))
    budgets = sorted({b for b, _ in rows}, reverse=True)
    pairs_over = ["%s - %s at %g%% (%.3f / %s)" % (a, b, 100 * budget, se_p, "-" if se_c is None else "%.3f" % se_c)
                  for budget in budgets for a, b, _, se_p, se_c in agree_pair_stats(rows, groups, budget)
                  if se_p > 0.05 or se_c is None or se_c > 0.05]
    text += ("Standard errors of a sparse method's word agreement: at most %.3f over prompts and %s over documents "
             "(cluster-robust). The issue's target (<= 0.05) is %s. %d of the %d paired differences above are "
             "within two document standard errors of zero. What differs from the paper is said under the prose "
             "table above.\n" % (
                 sp, "-" if sc is None else "%.3f" % sc,
                 "met by every row and paired difference" if not over and not pairs_over else
                 "not met by every one: above it (over prompts / over documents) %s; every other row and paired "
                 "difference is within it" % ", ".join(over + pairs_over),
                 agree_within(rows, groups), sum(len(agree_pair_stats(rows, groups, b)) for b in budgets)))
    return text


def agree_within(rows, groups):
    """How many paired differences lie within two document standard errors of zero (or have none)."""
    return sum(1 for budget in {b for b, _ in rows} for _, _, mean, _, se in agree_pair_stats(rows, groups, budget)
               if se is None or abs(mean) <= 2 * se)


def gemma_eval_small_k(rec):
    r = rec["result"]
    sweep = r["k_sweep"]
    header = ["method", "bits/token"] + ["error k = %d (%.2f%% of n)" % (x["k"], 100.0 * x["k"] / r["tokens"])
                                        for x in sweep]
    rows = [[m["name"], "%.1f" % m["bits_per_token"]] + [err(x["methods"][i]) for x in sweep]
            for i, m in enumerate(sweep[0]["methods"])]
    text = md_table(header, rows)
    text += ("\nThe fidelity protocol of the tables above (`fathom eval`, calibration-free, the code capture's "
             "last %d positions, n = %d) at the selection sizes of the step-agreement runs: k = 2%% and 0.5%% "
             "of n, sink 4 + local 32 included.\n" % (r["positions"], r["tokens"]))
    return text


def paired_positions(a, b):
    """Mean and standard error of the per-position differences a - b (0/1 outcomes)."""
    import math
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    return mean, math.sqrt(var / n)


def gemma_next_token(rec):
    r = rec["result"]
    rows, notes = [], []
    for b in r["budgets"]:
        rows.append(["%g%%" % (100 * b["budget"]), "oracle", str(b["k"]), "1", "%.3f" % b["oracle_vs_dense"]])
        ms = {m["method"]: m for m in b["methods"]}
        for m in b["methods"]:
            rows.append(["%g%%" % (100 * b["budget"]), m["method"], str(b["k"]),
                         "%.3f ± %.3f" % (m["vs_oracle"], m["vs_oracle_stderr"]),
                         "%.3f ± %.3f" % (m["vs_dense"], m["vs_dense_stderr"])])
        pairs = [(x, y) for x, y in (("sparq:32", "sparq:16"), ("fathom:48", "sparq:16"),
                                     ("fathom-centered:48", "fathom:48")) if x in ms and y in ms]
        notes.append("At %g%% (k = %d): paired differences against the oracle, per position, %s." % (
            100 * b["budget"], b["k"], "; ".join("%s - %s %+.3f ± %.3f" % ((x, y) + paired_positions(
                ms[x]["per_position_vs_oracle"], ms[y]["per_position_vs_oracle"])) for x, y in pairs)))
    text = md_table(["budget", "method", "k", "top-1 = oracle's", "top-1 = dense's"], rows,
                    ["---", "---", "---:", "---:", "---:"])
    text += ("\n`bench/bench_next_token` on %s (n = %d tokens, the code capture's text): one dense prefill of the "
             "first n - 1 tokens, then at each of the last %d positions p the context is cut back to p "
             "(`fathom_ctx_truncate`, the dense rows below p kept) and one decode step of the text's own "
             "token runs with each method; its greedy token is compared with the exact top-k oracle's at the "
             "same k and with dense attention's. Every position starts from the same dense prefix, so the "
             "outcomes are paired per position and one wrong step does not carry into the next, unlike "
             "`fathom agree`'s free continuations, where a prompt gives one run length.\n\n" %
             (r["prompt"], r["tokens"], r["positions"]))
    text += "\n\n".join(notes) + "\n\n"
    text += ("Where it does not hold: one text, %d positions of it; top-1 agreement of one step, not the "
             "agreement of a continuation; the same 3 sparse layers as above.\n" % r["positions"])
    return text


# ---------------------------------------------------------------- fitted synthetic presets

def synthfit_mass_gaps(target, achieved):
    """The attention statistics the fitted preset misses by more than 0.03, or that it reaches them."""
    names = [("top_mass", "top-k mass"), ("sink_mass", "first-4-token mass"), ("local_mass", "last-32-token mass")]
    missed = ["%s (%.2f; fitted: %.2f)" % (label, target[k], achieved[k])
              for k, label in names if abs(target[k] - achieved[k]) > 0.03]
    if not missed:
        return "the fitted preset reaches the capture's top-k, first-4 and last-32 masses within 0.03"
    return "the fitted preset misses the capture's " + " and ".join(missed) + " by more than 0.03"


def synthfit(rec):
    r = rec["result"]
    src = r["sources"]
    m = r["margins"]
    tol, rho_min = m["ratio_tolerance"], m["min_spearman"]
    fitted = next(s for s in src if s["kind"] == "fitted")  # the full fit; the others are ablations
    main = [s for s in src if s["kind"] != "fitted" or s is fitted]
    ablations = [s for s in src if s["kind"] == "fitted"]
    judge = src[0]

    def f3(x):
        return "-" if x is None else "%.3f" % x

    def ok(flag):
        return "yes" if flag else "no"

    header = ["method"] + [s["source"] for s in main]
    rows = [[name] + ["%.4f" % s["errors"][name] for s in main] for name in r["methods"]]
    rows.append(["Spearman rho / Kendall tau vs judged"] +
                ["%.3f / %.3f" % (s["spearman"], s["kendall"]) for s in main])
    rows.append(["fathom:48 / sparq:16"] + [f3(s["fathom_sparq16"]) for s in main])
    rows.append(["fathom:48 / ds:32"] + [f3(s["fathom_ds32"]) for s in main])
    rows.append(["within the margins (rank, sparq, ds)"] +
                ["%s, %s, %s" % (ok(s["rank_ok"]), ok(s["sparq16_ok"]), ok(s["ds32_ok"])) for s in main])
    text = md_table(header, rows)
    builtin = next((s for s in main if s["kind"] == "builtin"), None)
    t = fitted["fit"]["target"]
    text += ("\nRelative L2 error of every method (k = %d, the last %d positions) on the judged capture "
             "`%s` (n = %d; calibration `%s`), on the capture the preset was fitted to (`%s`, the same model "
             "on other text) and on the preset fitted to it (`fathom synth-fit`, base `%s`, generated at the "
             "judged n, calibrated on its own text of seed 1001%s)%s. "
             "Margins, stated before the runs: Spearman's rho of the methods' errors against the judged "
             "capture's >= %.2f, and each error ratio within %d%% of the judged capture's (%.3f and %.3f). "
             % (r["k"], r["positions"], r["judge_capture"], judge["tokens"], r["calib_capture"],
                r["fit_capture"], r["base"],
                (", %d tokens long as the calibration capture: a calibration over fewer positions than the "
                 "window misses the key means' rotation over the rest, which Loki's and the KLT's bases feel, "
                 "docs/synthetic.md" % r["synthetic_calib_tokens"]) if "synthetic_calib_tokens" in r else
                " at the judged n",
                ", and on the built-in `%s` preset at the same n" % r["base"] if builtin else
                "; the built-in preset is left out, as it has another model's shape and at this n would take "
                "hours here", rho_min, round(100 * tol), judge["fathom_sparq16"], judge["fathom_ds32"]))
    if "--per-layer" in rec["command"]:
        text += ("The preset's topic logit is fitted per layer to that layer's top-k mass (synth-fit --per-layer; "
                 "by default one logit serves every layer). ")
    search = r.get("churn_to_ratio")
    if search:
        text += ("The preset's channel churn (a log-normal gain per RoPE pair on each query, docs/synthetic.md, "
                 "\"Channel churn\"; opt-in) is held at the sigma whose preset gives the fitted capture's own "
                 "fathom:48 / ds:32 ratio, %.3f: a bisection over [0.2, 1.2] of presets fitted with that sigma "
                 "(synth-fit --churn-sigma) and evaluated on fathom:48 and ds:32 alone (sigma / ratio: %s), the "
                 "closest kept, sigma %s. Only the fitted capture decides it; the judged capture is not used. "
                 % (search["fit_fathom_ds32"],
                    ", ".join("%g %.3f" % (x["sigma"], x["fathom_ds32"]) for x in search["steps"]),
                    "%g" % search["sigma"]))
    elif "--churn-sigma" in rec["command"]:
        text += "The preset's channel churn is held at the sigma given (synth-fit --churn-sigma). "
    elif "--churn" in rec["command"]:
        fs_t, fs_a = fitted["fit"]["target"].get("fixed_share"), fitted["fit"]["achieved"].get("fixed_share")
        text += ("The preset's channel churn is fitted too (synth-fit --churn: a log-normal gain per RoPE pair on "
                 "each query, fitted to fixed_share, what the best fixed d/8 channels cover of each query's g over "
                 "what the query's own top d/8 cover: the capture's %s, the preset's %s; docs/synthetic.md, "
                 "\"Channel churn\"; opt-in, not part of the default fit). " % (f3(fs_t), f3(fs_a)))
    real = src[1]
    text += ("The fitted preset reaches rho %.3f, fathom:48 / sparq:16 %.3f and fathom:48 / ds:32 %.3f; the "
             "other real text %.3f, %.3f and %.3f%s. The fitted preset's oracle error is %.4f against the "
             "judged capture's %.4f%s.\n\n"
             % (fitted["spearman"], fitted["fathom_sparq16"], fitted["fathom_ds32"], real["spearman"],
                real["fathom_sparq16"], real["fathom_ds32"],
                "; the built-in preset %.3f, %.3f and %.3f" % (builtin["spearman"], builtin["fathom_sparq16"],
                                                              builtin["fathom_ds32"]) if builtin else "",
                fitted["errors"]["oracle"], judge["errors"]["oracle"],
                " (built-in: %.4f)" % builtin["errors"]["oracle"] if builtin else ""))
    gap = lambda x, key: abs(x[key] / judge[key] - 1)
    nearer = [fitted["spearman"] > real["spearman"], gap(fitted, "fathom_sparq16") < gap(real, "fathom_sparq16"),
              gap(fitted, "fathom_ds32") < gap(real, "fathom_ds32")]
    if not (real["rank_ok"] and real["sparq16_ok"] and real["ds32_ok"]):
        text += ("The two real texts themselves differ by more than the margins here (within them: rank %s, "
                 "sparq %s, ds %s): the margins are tighter than the text-to-text variation of this model. "
                 "Against that variation, the fitted preset is nearer the judged text than the other real "
                 "text on %d of the three (rho %s, fathom:48 / sparq:16 %s, fathom:48 / ds:32 %s).\n\n"
                 % (ok(real["rank_ok"]), ok(real["sparq16_ok"]), ok(real["ds32_ok"]), sum(nearer),
                    *("nearer" if x else "farther" for x in nearer)))
    header = ["preset", "rho", "tau", "fathom/sparq:16", "fathom/ds:32", "top-k mass", "first-4 mass",
              "last-32 mass", "top-d/4 cov. share", "query cosine"]
    rows = [["the fitted capture's statistics", "", "", "", "", "%.3f" % t["top_mass"], "%.3f" % t["sink_mass"],
             "%.3f" % t["local_mass"], "%.3f" % t["pca_share"], "%.3f" % t["drift"]]]
    b = fitted["fit"]["base"]
    rows.append(["%s (built in)" % r["base"]] +
                (["%.3f" % builtin["spearman"], "%.3f" % builtin["kendall"], f3(builtin["fathom_sparq16"]),
                  f3(builtin["fathom_ds32"])] if builtin else ["", "", "", ""]) +
                ["%.3f" % b["top_mass"], "%.3f" % b["sink_mass"], "%.3f" % b["local_mass"], "%.3f" % b["pca_share"],
                 "%.3f" % b["drift"]])
    for s in ablations:
        a = s["fit"]["achieved"]
        rows.append([s["source"], "%.3f" % s["spearman"], "%.3f" % s["kendall"], f3(s["fathom_sparq16"]),
                     f3(s["fathom_ds32"]), "%.3f" % a["top_mass"], "%.3f" % a["sink_mass"],
                     "%.3f" % a["local_mass"], "%.3f" % a["pca_share"], "%.3f" % a["drift"]])
    if len(ablations) > 1:
        text += md_table(header, rows)
        text += ("\nAblations: each row fits all but one group of statistics, which keeps the built-in "
                 "preset's value (profiles: measured on the built-in preset's own output at this shape, and no "
                 "positional profile, which is measured against the capture's own means). The statistic columns are the generator's at the "
                 "judged n (the fit's `achieved`; the built-in row: the base preset's). Recency kept: no "
                 "positional profile, as the built-in preset. The rank correlation "
                 "and the ratios are against the judged capture, as above. ")
        group = {x["fit"]["keep"].split(",")[0]: x for x in ablations if x is not fitted}
        base_sq, base_ds = fitted["fathom_sparq16"], fitted["fathom_ds32"]
        change = {g: (x["fathom_sparq16"] / base_sq - 1, x["fathom_ds32"] / base_ds - 1) for g, x in group.items()
                  if x["fathom_sparq16"] is not None and x["fathom_ds32"] is not None}
        order = sorted(change, key=lambda g: -max(abs(v) for v in change[g]))
        text += ("Keeping one group at the built-in value changes fathom:48 / sparq:16 and fathom:48 / ds:32, "
                 "against the full fit, by: %s. Rho alone does not separate the groups: most methods' "
                 "errors keep their order even where a ratio moves by a factor.\n\n"
                 % "; ".join("%s %+.0f%% and %+.0f%%" % (g, 100 * change[g][0], 100 * change[g][1])
                             for g in order))
    else:
        text += md_table(header, rows)
        text += ("\nThe statistics the fit matches: the capture's, the base preset's structure at the "
                 "capture's shape, and the fitted preset's, at the judged n.\n\n")
    scans = [judge["errors"][n] for n in r["methods"] if n not in ("landmark", "oracle")]
    text += ("Where it does not hold: one model, one fitted and one judged text, n = %d and k = %d, where the "
             "judged errors of the per-token methods span %.4f-%.4f%s; %s; the fitted "
             "profiles are the capture's measured ones, to which the generator adds its own topic content "
             "(docs/synthetic.md, \"Presets fitted to captures\").\n"
             % (judge["tokens"], r["k"], min(scans), max(scans),
                " (close together, so rho moves with small changes)" if max(scans) < 1.5 * min(scans) else "",
                synthfit_mass_gaps(t, fitted["fit"]["achieved"])))
    return text


# ---------------------------------------------------------------- order

RULER_TASKS = {"single": "single needle (RULER niah_single_2)", "multikey": "multi-key needle (niah_multikey_1)",
               "vt": "variable tracking (variable_tracking)"}


# Further RULER runs of the same task, context and methods with other seeds (other words, numbers and
# depths), pooled sample by sample into the first run's table: (table, [further data files]).
RULER_MORE = {"gemma-ruler-16k-single": ["gemma-ruler-16k-single-seed2"],
              "gemma-ruler-16k-multikey": ["gemma-ruler-16k-multikey-seed2"],
              "gemma-ruler-32k-single": ["gemma-ruler-32k-single-seed2", "gemma-ruler-32k-single-seed3"],
              "gemma-ruler-32k-multikey": ["gemma-ruler-32k-multikey-seed2", "gemma-ruler-32k-multikey-seed3",
                                           "gemma-ruler-32k-multikey-seed4"]}

# The 32k seed runs made with the haystack and calibration files that were checked at 32k too: seed 1's first
# multi-key sample, rerun with them (its command with `--samples 1` and no `--seed`), gave all 23 recorded answers.
RULER_CHECKED = {"gemma-ruler-32k-multikey-seed2", "gemma-ruler-32k-multikey-seed3",
                 "gemma-ruler-32k-multikey-seed4", "gemma-ruler-32k-single-seed3"}


def ruler_sample_scores(r):
    """Per (method, budget) the per-sample scores of one needle record, rescored from its answers (the share of
    the expected strings an answer holds, as fathom needle scores); checked against the record's own means."""
    scores = {}
    for x in r["results"]:
        key = "dense@0" if x["method"] == "dense" else "%s@%g" % (x["method"], x["budget"])
        got = [sum(e in smp["answers"][key] for e in smp["expected"]) / len(smp["expected"]) for smp in r["samples"]]
        if abs(sum(got) / len(got) - x["score"]) > 1e-3:
            raise ValueError("needle record %s: rescored %s %.4f, recorded %.4f" % (
                r["task"], key, sum(got) / len(got), x["score"]))
        scores[(x["method"], x["budget"])] = (got, x["k_mean"])
    return scores


def ruler_pooled(recs):
    """The results of several needle records of one task pooled sample by sample (mean, standard error)."""
    pooled, order = {}, []
    for rec in recs:
        for key, (got, k) in ruler_sample_scores(rec["result"]).items():
            if key not in pooled:
                order.append(key)
                pooled[key] = ([], [])
            pooled[key][0].extend(got)
            pooled[key][1].append((k, len(got)))
    counts = {len(v[0]) for v in pooled.values()}
    if len(counts) != 1:
        raise ValueError("pooled needle records do not run the same methods and budgets")
    out = []
    for method, budget in order:
        got, ks = pooled[(method, budget)]
        n = len(got)
        mean = sum(got) / n
        var = sum((g - mean) ** 2 for g in got) / (n - 1) if n > 1 else 0.0
        out.append({"method": method, "budget": budget, "score": mean, "stderr": (var / n) ** 0.5,
                    "k_mean": sum(k * c for k, c in ks) / sum(c for _, c in ks)})
    return out


def ruler_more(rec):
    """A further seed of a RULER run: its provenance here, its samples pooled into the first run's table."""
    first = [t for t, more in RULER_MORE.items() if rec["table"] in more][0]
    r = rec["result"]
    if rec["table"] in RULER_CHECKED:
        check = ("at 32k, the first sample of seed 1 of the multi-key task, run again with these files (its command "
                 "with `--samples 1` and no `--seed`), gave every one of its 23 recorded answers")
    else:
        check = ("the first sample of seed 1 at 16k, run again with them, gave every one of its 23 recorded "
                 "answers%s" % ("" if "16k" in first else
                                "; at this context the run was not checked against the first run's samples"))
    return ("%d samples of %d-%d prompt tokens with another seed (the command above), pooled sample by sample "
            "into the table of `%s` above (the haystack rebuilt with `scripts/make-prompts R/prose32 --kind prose "
            "--count 1 --min 32000 --max 32000` and the calibration capture rebuilt as before: %s); on its own: "
            "%s.\n" % (
                len(r["samples"]), min(x["n_tokens"] for x in r["samples"]), max(x["n_tokens"] for x in r["samples"]),
                first, check, ", ".join("%s %.3f" % (x["method"] if x["method"] == "dense" else "%s@%g%%" % (
                    x["method"], 100 * x["budget"]), x["score"]) for x in r["results"])))


def ruler_more_tables(first):
    """The tables of RULER_MORE[first]'s further seeds, to follow first's table."""
    return [Table(name, GEMMA_SECTION, "RULER at %s: %s, another seed (pooled above)" % (
        name.split("-")[2], "single needle" if "single" in name else "multi-key needle"), ruler_more, None)
        for name in RULER_MORE[first]]


def gemma_ruler(rec):
    more = [x for x in (sibling(n) for n in RULER_MORE.get(rec["table"], [])) if x]
    r = dict(rec["result"])
    if more:
        r["results"] = ruler_pooled([rec] + more)
        r["samples"] = [smp for x in [rec] + more for smp in x["result"]["samples"]]
    budgets = sorted({x["budget"] for x in r["results"] if x["method"] != "dense"}, reverse=True)
    rows = []
    for x in r["results"]:
        if x["method"] == "dense":
            rows.append(["dense"] + ["%.3f ± %.3f" % (x["score"], x["stderr"])] * len(budgets) + ["-"] * len(budgets))
    names = []
    for x in r["results"]:
        if x["method"] != "dense" and x["method"] not in names:
            names.append(x["method"])
    res = {(x["method"], x["budget"]): x for x in r["results"]}
    for name in names:
        cells = [name]
        cells += ["%.3f ± %.3f" % (res[(name, b)]["score"], res[(name, b)]["stderr"]) if (name, b) in res else "-"
                  for b in budgets]
        cells += ["%.0f" % res[(name, b)]["k_mean"] if (name, b) in res else "-" for b in budgets]
        rows.append(cells)
    header = (["method"] + ["score, budget %g%%" % (100 * b) for b in budgets] +
              ["k, budget %g%%" % (100 * b) for b in budgets])
    text = md_table(header, rows)
    ns = [smp["n_tokens"] for smp in r["samples"]]
    label = "%dk" % round(max(ns) / 1000.0)
    text += ("\nRULER-style %s on Gemma 3 270M (`fathom needle`, chat template, greedy answer): %d samples of "
             "%d-%d prompt tokens, haystack = the man page text of the prose captures, needles at random depths "
             "(%s); per sample one dense prefill, then dense and every method at each budget decode the "
             "answer from it (k = max(37, budget x n) keys per query head, sink 4 + local 32 included). Score = "
             "mean over samples ± standard error. The paper (Tab. 7, 32k: 40 samples, standard error ~0.014) "
             "finds every per-token scan within 0.008 of the exact top-k oracle and block landmarks 0.043 "
             "below. Where it does not hold: a handful of samples (the standard errors say how little they "
             "separate), because each sample is a %s dense prefill (%.1f min per sample with every method's "
             "answers in this run, under the load above, on this 2-core machine); a 270M model; %s.\n"
             % (RULER_TASKS.get(r["task"], r["task"]), len(ns), min(ns), max(ns),
                "seed 1" if not more else "seed 1: %d samples at `%s`; %s" % (
                    len(rec["result"]["samples"]), rec["commit"], "; ".join(
                        "seed %s: %d samples at `%s` (`%s`)" % (
                            x["command"].split("--seed ")[1].split()[0] if "--seed " in x["command"] else "1",
                            len(x["result"]["samples"]), x["commit"], x["table"]) for x in more)),
                label, (rec["wall_s"] + sum(x["wall_s"] for x in more)) / 60.0 / len(ns),
                "16k, not 32k" if max(ns) < 20000 else
                "31k of the model's 32k window, not the paper's 32k of a 128k-window model"))
    if any(x["method"] == "dense" and x["score"] == 0 for x in r["results"]):
        text += ("Dense attention scores 0 here: the task is beyond this model at this length (its answers repeat "
                 "digits), so the table cannot rank the methods; it records that the model, not the selection, "
                 "fails.\n")
    return text


def channel_choice(rec):
    """bench/channel_choice.py: SparQ's channels against the same count ranked by g_j, per model."""
    header = ["model (d)", "r", "share of sum g: sparq", "share: top-g", "Var k of sparq's channels / mean",
              "top-k recall: sparq", "recall: top-g"]
    rows = []
    for s in rec["result"]["results"]:
        name = "Gemma 3 270M" if "emma" in s["model"] else "SmolLM2-135M" if "mollm" in s["model"] else s["model"]
        for r, v in s["r"].items():
            rows.append(["%s (%d)" % (name, s["dim"]), r] + [
                "%.3f ± %.3f" % (v[c]["mean"], v[c]["stderr"])
                for c in ("share_g_sparq", "share_g_topg", "var_ratio", "recall_sparq", "recall_topg")])
    text = md_table(header, rows)
    s0 = rec["result"]["results"][0]
    s1 = rec["result"]["results"][-1]
    r0 = min(s0["r"], key=int)
    g, o = s0["r"][r0], s1["r"][r0]
    text += ("\n`bench/channel_choice.py` (numpy) on two captures of the same text (the first %d tokens of the 8th "
             "prompt of `scripts/make-prompts R --kind code --count 8 --min 16000 --max 16300 --skip 68`, Python "
             "standard-library code; `fathom capture --max-tokens %d --positions 64 --dtype f32`, Gemma with "
             "--global-only), "
             "its last %d positions: SparQ reads the r channels with the largest sum_h |q_hj| over the query "
             "group; \"top-g\" the r largest g_j = sum_h q_hj^2 Var(k_j), the weights Fathom's water-filling "
             "uses. share of sum g: the part of the score's variance over keys the r channels carry; recall: "
             "the exact top-k (k = %g%% of n beyond sink 4 and local 32) found by the top-k of the partial dot "
             "product over the r channels, keys unquantized (the channel choice alone). ± standard error over "
             "layers, KV heads and positions.\n\n"
             "Why SparQ fails downstream on Gemma while its attention error is moderate: Gemma 3 normalizes "
             "queries and keys per head (QK-norm), and its largest query channels are channels where the keys "
             "vary little (their key variance is %.2f of the average over channels), so ranking channels by |q| "
             "alone reads channels that carry little of the score's spread: at r = %s they hold %.2f of sum g "
             "and find %.2f of the exact top-k, where as many channels ranked by g hold %.2f and find %.2f. On "
             "SmolLM2 (no QK-norm) the largest query channels are high-variance key channels (%.2f of the "
             "average) and both rules nearly agree (recall %.2f against %.2f at r = %s). The attention error "
             "averages over heads and positions whose mass sits on sink and local tokens, which every method "
             "keeps; retrieval (RULER) and the words a decode chooses depend on the few far keys that the "
             "channel choice misses. Where it does not hold: one 4k text per model, exact key values "
             "(quantization to 4-bit planes lowers both rules' recall).\n" %
             (s0["tokens"], s0["tokens"], s0["positions"], 100 * s0["budget"],
              g["var_ratio"]["mean"], r0, g["share_g_sparq"]["mean"], g["recall_sparq"]["mean"],
              g["share_g_topg"]["mean"], g["recall_topg"]["mean"], o["var_ratio"]["mean"],
              o["recall_sparq"]["mean"], o["recall_topg"]["mean"], r0))
    return text


TABLES = [
    Table("synthetic-default", "CPU: fidelity (fathom eval)", "Every method on the synthetic Qwen3-8B preset",
          synthetic_default, None),
    Table("synthetic-sweep-k", "CPU: fidelity (fathom eval)", "Error against the selection size (--sweep-k)",
          synthetic_sweep_k, None),
    Table("synthetic-match", "CPU: fidelity (fathom eval)", "Bits at which Fathom matches each method (--match)",
          synthetic_match, None),
    Table("smollm2-code-4k", "CPU: fidelity on a real model (SmolLM2-135M captures)",
          "Every method on a 4k-token code capture", smollm2_eval, None),
    Table("smollm2-code-4k-match", "CPU: fidelity on a real model (SmolLM2-135M captures)",
          "Bits at which Fathom matches each method, code capture", smollm2_match, None),
    Table("synthfit-smollm2", "CPU: fidelity on a real model (SmolLM2-135M captures)",
          "A synthetic preset fitted to a capture, judged on another", synthfit,
          "Pending: `scripts/record-result synthfit-smollm2 -- scripts/synth-fit-study --fit R/code_4k.safetensors "
          "--judge R/prose_4k.safetensors --calib R/calib_c2k.safetensors --per-head`."),
    Table("bench-scan", "CPU: scan throughput (bench_scan)", "fathom:48 against ds:32 on the same store",
          bench_scan, None),
    Table("bench-scan-tiled", "CPU: scan throughput (bench_scan)",
          "The tiled kernel against the untiled one, and threads over token ranges", bench_scan_tiled,
          "Pending: `scripts/record-result bench-scan-tiled -- build/bench_scan --json`."),
    Table("bench-scan-tiled-1m", "CPU: scan throughput (bench_scan)",
          "The tiled kernel at 1M tokens on this machine", bench_scan_tiled,
          "Pending: `scripts/record-result bench-scan-tiled-1m -- build/bench_scan --context 1048576 --queries 4 "
          "--repeats 5 --threads 2 --json`."),
    Table("bench-scan-tiled-gpu-host", "CPU: scan throughput (bench_scan)",
          "The tiled kernel on the GPU machine's host (16 cores, 1M tokens)", bench_scan_tiled,
          "Pending: on the GPU machine, `FATHOM_COMMIT=<commit> scripts/record-result bench-scan-tiled-gpu-host -- "
          "build/bench_scan --context 1048576 --threads 16 --queries 4 --repeats 5 --json` (about 8 GB of memory)."),
    Table("bench-scan-int8-gpu-host", "CPU: scan throughput (bench_scan)",
          "The integer (VNNI) mode on the GPU machine's host (16 cores, 1M tokens)", bench_scan_tiled,
          "Pending: on the GPU machine, `FATHOM_COMMIT=<commit> scripts/record-result bench-scan-int8-gpu-host -- "
          "build/bench_scan --context 1048576 --threads 16 --queries 4 --tiled avx512 --int8 --repeats 3 --json`."),
    Table("bench-scan-int8-gpu-host-seg64", "CPU: scan throughput (bench_scan)",
          "The integer mode on the GPU machine's host in the KV tier's segment layout (64 blocks)",
          bench_scan_segments,
          "Pending: on the GPU machine, `FATHOM_COMMIT=<commit> scripts/record-result bench-scan-int8-gpu-host-seg64 "
          "-- build/bench_scan --context 1048576 --threads 16 --queries 4 --tiled avx512 --int8 --repeats 3 "
          "--segment-blocks 64 --json`."),
    Table("bench-scan-int8", "CPU: scan throughput (bench_scan)",
          "The integer (VNNI) mode on this machine (1M tokens)", bench_scan_tiled,
          "Pending: `scripts/record-result bench-scan-int8 -- build/bench_scan --context 1048576 --queries 4 "
          "--tiled avx512 --int8 --repeats 3 --threads 2 --json`."),
    Table("bench-scan-int8-seg64", "CPU: scan throughput (bench_scan)",
          "The same in the KV tier's segment layout (64 blocks)", bench_scan_segments,
          "Pending: `scripts/record-result bench-scan-int8-seg64 -- build/bench_scan --context 1048576 --queries 4 "
          "--tiled avx512 --int8 --repeats 3 --threads 2 --segment-blocks 64 --json`."),
    Table("bench-scan-kernel", "CPU: scan throughput (bench_scan)",
          "One core's time per block against the multiply-add floor", bench_scan_kernel,
          "Pending: `scripts/record-result bench-scan-kernel -- build/bench_scan_kernel --json`."),
    Table("bench-scan-kernel-gpu-host", "CPU: scan throughput (bench_scan)",
          "The same on the GPU machine's host core", bench_scan_kernel,
          "Pending: on the GPU machine, `FATHOM_COMMIT=<commit> scripts/record-result bench-scan-kernel-gpu-host -- "
          "build/bench_scan_kernel --json`."),
    Table("decode-cache-sim", "CPU: decode traces and HBM cache hit rates",
          "Plane and row bytes an HBM cache would keep off the link", decode_cache_sim,
          "Pending: `bench_decode_trace --model SMOLLM2 --prompt-file R/code_00.txt --out T --attn fathom:48 --k 64 "
          "--steps 64` on prompts of `scripts/make-prompts R --kind code|prose --count 1 --min 3850 --max 3900 "
          "--skip 40|2`, then `scripts/record-result decode-cache-sim -- python3 bench/cache_sim.py --json T ...`."),
    Table("decode-cache-sim-8k", "CPU: decode traces and HBM cache hit rates",
          "The same on SmolLM2 at 8k (code and prose)", decode_cache_sim,
          "Pending: `bench_decode_trace --model SMOLLM2 --prompt-file R/code_00.txt --out T --attn fathom:48 --k 64 "
          "--steps 64` on prompts of `scripts/make-prompts R --kind code|prose --count 1 --min 7900 --max 7950 "
          "--skip 40|2`, then `scripts/record-result decode-cache-sim-8k -- python3 bench/cache_sim.py --json T ...`."),
    Table("gemma-cache-sim", "CPU: decode traces and HBM cache hit rates",
          "The same on Gemma 3 270M at 16k (fathom:48, k = 512)", decode_cache_sim,
          "Pending: `bench_decode_trace --model GEMMA --prompt-file R/code16/code_00.txt --out T --attn "
          "fathom:48 --k 512 --steps 64`, then `scripts/record-result gemma-cache-sim -- python3 "
          "bench/cache_sim.py --json T`."),
    Table("cache-sim-at-scale", "CPU: decode traces and HBM cache hit rates",
          "The hit rates at what 10% of a 128k or 1M-token session's index buys", cache_sim_at_scale,
          "Pending: the traces above, then `scripts/record-result cache-sim-at-scale -- python3 bench/cache_sim.py "
          "--json T ... --only-as --plane-share 1 0.95 0.9 0.85 0.8 0.75 0.7 0.6 0.5 0.25 0 --as-context 131072 "
          "1048576 --as-union 1930 --window 16`."),
    Table("cache-sim-row-rules", "CPU: decode traces and HBM cache hit rates",
          "The same budgets with associative row slots", cache_sim_row_rules, None),
    Table("cache-sim-read-ahead", "CPU: decode traces and HBM cache hit rates",
          "The same budgets with the previous step's lines and rows read ahead", cache_sim_read_ahead, None),
    Table("decode-reuse", "CPU: decode traces and HBM cache hit rates",
          "Rows and plane bytes a decode step shares with the steps before it", decode_reuse, None),
    Table("gpu-offload-step", "GPU offload step (H200)", "Decode step with the index in host memory",
          gpu_offload_step, GPU_PENDING),
    Table("gpu-resident-scan", "GPU offload step (H200)", "The index in HBM",
          gpu_resident_scan, GPU_RESIDENT_PENDING),
    Table("gpu-tier", "GPU offload step (H200)", "The KV tier: sessions that grow, one graph for every step",
          gpu_tier, None),
    Table("gpu-shard", "GPU offload step (H200)", "The KV tier over several GPUs (head sharding, tp = 1, 2, 4)",
          gpu_shard, None),
    Table("gpu-hybrid", "GPU offload step (H200)",
          "The hybrid step: the host CPU selects a share of the KV heads where they live", gpu_hybrid,
          "Pending: on the GPU machine, `FATHOM_COMMIT=<commit> GPU_CHECK_STAGES=\"build hybrid\" "
          "GPU_CHECK_TESTS=test_cuda_hybrid scripts/gpu-check` (bench_cuda_tier --hybrid --json --reps 10 "
          "through record-result: $OUT/gpu-hybrid.json)."),
    Table("gpu-hybrid-int8", "GPU offload step (H200)",
          "The hybrid step in the integer scan mode (host and GPU score by the int8 definition)", gpu_hybrid,
          "Pending: on the GPU machine, `FATHOM_COMMIT=<commit> GPU_CHECK_STAGES=\"build hybrid\" "
          "GPU_CHECK_TESTS=test_cuda_hybrid HYBRID_RECORD=gpu-hybrid-int8 HYBRID_BENCH_ARGS=\"--int8 --reps 10\" "
          "scripts/gpu-check` (with the trace points of gpu-hybrid's command)."),
    Table("gpu-tier-row-sets", "GPU offload step: associative row slots",
          "The KV tier's row cache in 4-way sets against direct-mapped, at the rates each earns on the real traces",
          gpu_tier_row_sets, None),
    Table("gpu-hybrid-int8-row-sets", "GPU offload step: associative row slots",
          "The hybrid step (integer mode) with 4-way row sets at their simulated rates", gpu_hybrid, None),
    Table("gpu-hybrid-int8-slow-host-row-sets", "GPU offload step: associative row slots",
          "The same on another H100 lease, whose host scans slower, at a later commit", gpu_hybrid, None),
    Table("gpu-hybrid-int8-row-sets-h200", "GPU offload step: associative row slots",
          "The hybrid step (integer mode) with 4-way row sets on the H200", gpu_hybrid,
          "Pending: not yet measured on an H200 (the tables above in this section are H100 leases). On an H200, "
          "after `GPU_CHECK_STAGES=build scripts/gpu-check`: `FATHOM_COMMIT=<commit> scripts/record-result "
          "gpu-hybrid-int8-row-sets-h200 --again gpu-hybrid-int8-row-sets`."),
    Table("gpu-tier-row-sets-churn", "GPU offload step: associative row slots",
          "The same under changing unions: queries that drift from step to step", gpu_tier_row_sets_churn, None),
    Table("gpu-tier-read-ahead", "GPU offload step: reading the next layer ahead",
          "Read-ahead of the next layer's last plan and union, beside each step or after it, with the work "
          "between layers", gpu_tier_read_ahead, None),
    Table("gpu-tier-read-ahead-copy", "GPU offload step: reading the next layer ahead",
          "The same with HBM copies on every SM between the layers' steps", gpu_tier_read_ahead, None),
    Table("gpu-tier-read-ahead-no-gap", "GPU offload step: reading the next layer ahead",
          "The same with nothing between the layers' steps", gpu_tier_read_ahead, None),
    Table("gpu-tier-read-ahead-slow-link", "GPU offload step: reading the next layer ahead",
          "The first of these on another H100 lease, whose link kernels read host memory slower, at a later commit",
          gpu_tier_read_ahead, None),
    Table("gpu-tier-read-ahead-h200", "GPU offload step: reading the next layer ahead",
          "The first of these on the H200", gpu_tier_read_ahead,
          "Pending: not yet measured on an H200 (every table of this section is an H100 lease; issue 16 states "
          "its 128k target for the H200). On an H200, after `GPU_CHECK_STAGES=build scripts/gpu-check`: "
          "`FATHOM_COMMIT=<commit> scripts/record-result gpu-tier-read-ahead-h200 --again gpu-tier-read-ahead`."),
    Table("serve-bench-read-ahead", "Python and transformers: the HBM cache (H100)",
          "fathom:48 with the HBM cache and read-ahead, from transformers", serve_bench_cache, None),
    Table("serve-bench", "Python and transformers (H200)",
          "Decode tokens/s: transformers with the KV tier against sdpa in HBM and dense host offload",
          serve_bench, "Pending: on the GPU machine, `FATHOM_COMMIT=<commit> SERVE_TABLE=serve-bench "
          "scripts/gpu-python-check` (python -m fathom.serve_bench --json)."),
    Table("serve-bench-baselines", "Python and transformers (H200)",
          "The 128k baselines and the Python share, second run", serve_bench_baselines, None),
    Table("serve-bench-baselines-long", "Python and transformers (H200)",
          "The baselines at 128k with a batch of 4 and at 512k", serve_bench_baselines_long, None),
    Table("serve-bench-ds", "Python and transformers (H200)",
          "fathom:48 against ds:32 through the same tier", serve_bench_ds, None),
    Table("serve-bench-cache", "Python and transformers: the HBM cache (H100)",
          "fathom:48 with the KV tier's HBM cache, from transformers", serve_bench_cache, None),
    Table("serve-bench-cache-ways", "Python and transformers: the HBM cache (H100)",
          "The same with the row cache direct-mapped and in 4-way sets", serve_bench_cache, None),
    Table("gemma-code-16k", GEMMA_SECTION, "Every method on a 16k-token code capture, k = 512 and 2048",
          gemma_fidelity, None),
    Table("gemma-code-16k-nocalib", GEMMA_SECTION, "Code, 16k: calibration-free against calibrated",
          gemma_nocalib, None),
    Table("gemma-prose-16k", GEMMA_SECTION, "Every method on a 16k-token prose capture, k = 512 and 2048",
          gemma_fidelity, None),
    Table("gemma-prose-16k-nocalib", GEMMA_SECTION, "Prose, 16k: calibration-free against calibrated",
          gemma_nocalib, None),
    Table("gemma-code-32k", GEMMA_SECTION, "Every method on a 32k-token code capture, k = 512 and 2048",
          gemma_fidelity, None),
    Table("gemma-code-32k-nocalib", GEMMA_SECTION, "Code, 32k: calibration-free against calibrated",
          gemma_nocalib, None),
    Table("gemma-prose-32k", GEMMA_SECTION, "Every method on a 32k-token prose capture, k = 512 and 2048",
          gemma_fidelity, None),
    Table("gemma-prose-32k-nocalib", GEMMA_SECTION, "Prose, 32k: calibration-free against calibrated",
          gemma_nocalib, None),
    Table("synthfit-gemma", GEMMA_SECTION, "A synthetic preset fitted to the code capture, judged on prose",
          synthfit, "Pending: `scripts/record-result synthfit-gemma -- scripts/synth-fit-study --fit "
          "R/code_16k.safetensors --judge R/prose_16k.safetensors --calib R/calib_c2k.safetensors --base qwen3-8b "
          "--k 512 --positions 128 --per-head --no-ablations --no-builtin`."),
    Table("synthfit-gemma-churn", GEMMA_SECTION, "The same with the queries' channel churn fitted (synth-fit --churn)",
          synthfit, "Pending: the synthfit-gemma command with `--churn` added."),
    Table("synthfit-gemma-churn-ratio", GEMMA_SECTION,
          "The same with the churn held at the sigma that gives the fitted capture's fathom:48 / ds:32 ratio",
          synthfit, "Pending: the synthfit-gemma command with `--churn-to-ratio` added."),
    Table("gemma-ruler-16k-single", GEMMA_SECTION, "RULER at 16k: single needle", gemma_ruler, None),
    *ruler_more_tables("gemma-ruler-16k-single"),
    Table("gemma-ruler-16k-multikey", GEMMA_SECTION, "RULER at 16k: multi-key needle", gemma_ruler, None),
    *ruler_more_tables("gemma-ruler-16k-multikey"),
    Table("gemma-ruler-16k-vt", GEMMA_SECTION, "RULER at 16k: variable tracking", gemma_ruler, None),
    Table("gemma-ruler-32k-single", GEMMA_SECTION, "RULER at 32k: single needle", gemma_ruler,
          "Pending: `scripts/record-result gemma-ruler-32k-single -- fathom needle --model GEMMA --task single "
          "--haystack R/prose32/prose_00.txt --context 31000 --samples S --calib R/calib_c2k.safetensors --methods "
          "oracle,fathom:48,fathom-centered:48,fathom-klt:48,sparq:16,sparq:32,ds:32,loki:32,thumb,landmark,full4 "
          "--budgets 0.02,0.005 --json --progress`."),
    *ruler_more_tables("gemma-ruler-32k-single"),
    Table("gemma-ruler-32k-multikey", GEMMA_SECTION, "RULER at 32k: multi-key needle", gemma_ruler,
          "Pending: the 32k single-needle command above with `--task multikey`."),
    *ruler_more_tables("gemma-ruler-32k-multikey"),
    Table("gemma-ruler-32k-vt", GEMMA_SECTION, "RULER at 32k: variable tracking", gemma_ruler,
          "Pending: the 32k single-needle command above with `--task vt --samples 2`."),
    Table("gemma-klt-fit", GEMMA_SECTION, "The KLT basis from the session's own keys: fit time at 16k",
          gemma_klt_fit, None),
    Table("gemma-quant-code-16k", GEMMA_SECTION,
          "Codes that keep the prefix property: symmetric, asymmetric (KIVI), mean-centered", gemma_quant, None),
    Table("gemma-quant-prose-16k", GEMMA_SECTION, "The same codes on the prose capture", gemma_quant, None),
    Table("gemma-centered-code-16k", GEMMA_SECTION,
          "Mean-centered codes in the C store: fathom-centered:B against fathom:B, code 16k", gemma_centered,
          "Pending: `scripts/record-result gemma-centered-code-16k -- fathom eval --kv R/code_16k.safetensors "
          "--methods fathom:48,fathom-centered:48,oracle --sweep-budgets 16,24,32,48,64,96,128 --sweep-k "
          "512,2048 --json --quiet`."),
    Table("gemma-centered-prose-16k", GEMMA_SECTION, "The same on the prose capture", gemma_centered,
          "Pending: the command above on R/prose_16k.safetensors."),
    Table("gemma-agree-16k", GEMMA_SECTION, "Step agreement at 16k (§5.6), with decode speed and memory",
          gemma_agree, None),
    Table("gemma-agree-16k-code", GEMMA_SECTION, "Step agreement at 16k (§5.6): code, prompts branched from one "
          "prefill per document", gemma_agree_branched,
          "Pending: `scripts/record-result gemma-agree-16k-code -- fathom agree --model GEMMA --prompts R/code "
          "--cut code --branches 3 --methods fathom:48,fathom:80,fathom-centered:48,sparq:16,sparq:32,landmark "
          "--budgets 0.02,0.005 --json --progress`, R/code from `scripts/make-prompts R/code --kind code --count 4 "
          "--min 16000 --max 16300 --skip 40`."),
    Table("gemma-agree-16k-prose", GEMMA_SECTION, "Step agreement at 16k (§5.6): prose, and code and prose pooled",
          gemma_agree_branched,
          "Pending: the command above with `--prompts R/prose --cut prose`, R/prose from `scripts/make-prompts "
          "R/prose --kind prose --count 4 --min 16000 --max 16300 --skip 2`."),
    *[Table(name, GEMMA_SECTION, "Step agreement at 16k (§5.6): code, prompts %s of %s%s" % (
        part, folder, ", and every branched run pooled" if name == AGREE_MORE[-1][0] else ""), gemma_agree_more, None)
      for name, folder, _, _, part in AGREE_MORE],
    Table("gemma-generate-speed", GEMMA_SECTION, "Prefill and decode speed and peak memory, 16k and 32k, idle "
          "machine", generate_speed,
          "Pending: `scripts/record-result gemma-generate-speed -- python3 bench/generate_speed.py --fathom FATHOM "
          "--model GEMMA --prompts R/speed16/code_00.txt,R/speed32/code_00.txt --methods dense,fathom:48 --k 512 "
          "--tokens 32`."),
    Table("gemma-code-16k-agree-k", GEMMA_SECTION, "Attention error at the agreement runs' k, code 16k",
          gemma_eval_small_k, "Pending: `scripts/record-result gemma-code-16k-agree-k -- fathom eval --kv "
          "R/code_16k.safetensors --methods sparq:16,sparq:32,fathom:48,fathom-centered:48,oracle --sweep-k "
          "320,80 --json --quiet`."),
    Table("gemma-next-token-16k", GEMMA_SECTION, "Next-token agreement, teacher-forced, at 16k",
          gemma_next_token, "Pending: `scripts/record-result gemma-next-token-16k -- build/bench_next_token "
          "--model GEMMA --prompt-file R/code16/code_00.txt --positions 64 --budgets 0.02,0.005 --methods "
          "sparq:16,sparq:32,fathom:48,fathom-centered:48 --json`."),
    Table("gemma-channel-choice", GEMMA_SECTION, "Why SparQ misses on Gemma: the channels |q| picks",
          channel_choice, "Pending: `scripts/record-result gemma-channel-choice -- python3 bench/channel_choice.py "
          "GEMMA_CAPTURE SMOLLM2_CAPTURE --r 16,32,64 --positions 16 --json`."),
]
