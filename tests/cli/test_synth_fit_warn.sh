#!/usr/bin/env bash
# fathom synth-fit says on stderr which fitted statistics the preset misses by
# more than 0.03, and only those: checked against the fit's own JSON report
# (target = the capture's, achieved = the preset's) on a small synthetic
# capture, with every statistic fitted and with recency kept (a kept
# statistic is never warned about). The capture is chosen so that the first
# fit both misses and reaches statistics: the check fails if it sees only one
# kind. $1 = build directory. Exit 77 (skip) without python3.
set -uo pipefail
fathom=$(cd "${1:?usage: test_synth_fit_warn.sh BUILD_DIR}" && pwd)/fathom
command -v python3 >/dev/null 2>&1 || { echo "python3 missing: skip"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$fathom" synth -q --preset smollm2-135m --context 1500 --positions 12 --seed 5 --dtype f32 \
  -o "$tmp/c.safetensors" || exit 1
status=0
for keep in none recency; do
  "$fathom" synth-fit --kv "$tmp/c.safetensors" --out "$tmp/p.json" --keep $keep --json >"$tmp/r.json" \
    2>"$tmp/err" || { echo "FAIL: synth-fit --keep $keep: $(cat "$tmp/err")"; exit 1; }
  python3 - "$tmp/r.json" "$tmp/err" "$keep" <<'PY' || status=1
import json, re, sys
r = json.load(open(sys.argv[1]))
err = open(sys.argv[2]).read()
keep = sys.argv[3]
names = {"top_mass": ("top-k mass", "concentration"), "sink_mass": ("first-4 (sink) mass", "sinks"),
         "local_mass": ("last-32 (local) mass", "recency"), "pca_share": ("top-d/4 covariance share", "rank"),
         "drift": ("consecutive-query cosine", "drift")}
warned = set(re.findall(r"synth-fit: warning: the fitted preset's (.+?) is ", err))
bad, missed, reached = [], 0, 0
for key, (what, group) in names.items():
    fitted = group not in keep.split(",")
    miss = fitted and abs(r["achieved"][key] - r["target"][key]) > 0.03
    missed += miss
    reached += fitted and not miss
    if miss != (what in warned):
        bad.append("%s: achieved %g, target %g, %s, warned %s" % (what, r["achieved"][key], r["target"][key],
                                                               "fitted" if fitted else "kept", what in warned))
if keep == "none" and not (missed and reached):
    bad.append("the capture no longer gives both a missed (%d) and a reached (%d) statistic: choose another" %
               (missed, reached))
if bad:
    print("FAIL (--keep %s): %s" % (keep, "; ".join(bad)))
    sys.exit(1)
print("ok (--keep %s): %d missed and warned, %d reached and not warned" % (keep, missed, reached))
PY
done
exit $status
