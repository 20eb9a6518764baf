#!/usr/bin/env python3
"""Prefill and decode speed and peak memory of `fathom generate`, one process
per (prompt, attention method), as one JSON object (for scripts/record-result).

  bench/generate_speed.py --fathom BIN --model GGUF --prompts F1,F2 --methods dense,fathom:48
                          [--k 512] [--tokens 32] [--threads N]

Each run: the prompt file's raw text prefilled densely, then --tokens greedy
steps (--ignore-eos) attending by the method with --k selected keys per query
head; the numbers are generate's own (--json): prefill and decode seconds and
rates, plane bytes scanned per step, peak resident memory of the process.
A run that fails, or reports a non-finite or non-positive rate, fails the
whole command.
"""
import argparse
import json
import math
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fathom", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True, help="comma-separated prompt files")
    ap.add_argument("--methods", default="dense,fathom:48")
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    runs = []
    for prompt in a.prompts.split(","):
        for method in a.methods.split(","):
            cmd = [a.fathom, "generate", "--model", a.model, "--prompt-file", prompt, "--tokens", str(a.tokens),
                   "--ignore-eos", "--attn", method, "--k", str(a.k), "--threads", str(a.threads), "--json"]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit("generate_speed: %s failed (exit %d): %s" % (" ".join(cmd), p.returncode,
                                                                       p.stderr.strip()[-500:]))
            r = json.loads(p.stdout)
            for key in ("prefill_tokens_per_s", "decode_tokens_per_s"):
                if not (isinstance(r[key], (int, float)) and math.isfinite(r[key]) and r[key] > 0):
                    sys.exit("generate_speed: %s reported %s = %r" % (prompt, key, r[key]))
            r.pop("ids", None)
            r["prompt_file"] = prompt
            runs.append(r)
            print("generate_speed: %s %s: prefill %d tokens %.1f s, decode %.2f tokens/s, peak %.2f GiB" % (
                os.path.basename(prompt), method, r["prompt_tokens"], r["prefill_s"], r["decode_tokens_per_s"],
                r["peak_rss_kib"] / 2**20), file=sys.stderr)
    print(json.dumps({"model": runs[0]["model"], "threads": a.threads, "k": a.k, "tokens": a.tokens, "runs": runs}))


if __name__ == "__main__":
    main()
