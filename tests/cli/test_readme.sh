#!/usr/bin/env bash
# Runs every ```sh block of README.md, so the walkthrough cannot rot. Each
# block runs as one bash script (set -euo pipefail) in a scratch directory
# where build/ is the build under test and scripts/, examples/ are the
# repository's, so the commands run verbatim. An HTML comment on the line
# before a block steers it:
#   <!-- doc-test: --opt VALUE ... -->   in every line of the block, the value
#                                        of --opt becomes VALUE (smaller sizes)
#   <!-- doc-test: eval+ --opt VALUE -->  appended to every `build/fathom eval`
#                                        line of the block (any subcommand)
#   <!-- doc-test: model; ... -->        the block needs the SmolLM2 model: it
#                                        is skipped when the model cannot be had
#   <!-- doc-test: skip (REASON) -->     not run here; REASON names what runs it
# Exit 0 when every runnable block passed, 77 when all passed but the model
# blocks were skipped (no model), 1 on a failure. $1 is the build directory.
set -u
build="$(cd "${1:?usage: test_readme.sh BUILD_DIR}" && pwd)"
src="$(cd "$(dirname "$0")/../.." && pwd)"
[ -x "$build/fathom" ] || { echo "no $build/fathom"; exit 1; }
command -v python3 >/dev/null || { echo "python3 missing: skip"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$build" "$work/build"
ln -s "$src/scripts" "$work/scripts"
ln -s "$src/examples" "$work/examples"

# The model, when it can be had (without failing the test when it cannot).
model=$(bash -c "source '$src/tests/support/model_path.sh' && echo \"\$MODEL\"" 2>/dev/null) || model=

python3 - "$src/README.md" "$work" "$model" <<'PY'
import os, re, resource, shlex, subprocess, sys, time

readme, work, model = sys.argv[1], sys.argv[2], sys.argv[3]
lines = open(readme, encoding="utf-8").read().split("\n")
blocks, directive, i = [], None, 0
while i < len(lines):
    m = re.match(r"\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$", lines[i])
    if m:
        directive = m.group(1)
    elif lines[i].strip() == "```sh":
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        blocks.append((i + 1, directive or "", lines[i + 1:j]))
        directive, i = None, j
    elif lines[i].strip():
        directive = None  # a directive applies to the block right after it
    i += 1

def substitute(text, pairs):
    for opt, val in pairs:
        text = re.sub(r"(?<!\S)%s(\s+|=)\S+" % re.escape(opt), lambda m: opt + m.group(1) + val, text)
    return text

env = dict(os.environ)
if model:
    env["FATHOM_MODEL"] = model
    env["FATHOM_MODELS_DIR"] = os.path.dirname(model)  # scripts/fetch-model finds it there
failed = ran = skipped_model = 0
for line_no, directive, body in blocks:
    parts = [p.strip() for p in directive.split(";") if p.strip()]
    if any(p.startswith("skip") for p in parts):
        print("README:%d: not run here: %s" % (line_no, directive[4:].strip(" ()")))
        continue
    needs_model = "model" in parts
    pairs, appends = [], []
    for p in parts:
        if p.startswith("-"):
            tok = shlex.split(p)
            pairs += list(zip(tok[0::2], tok[1::2]))
        m = re.match(r"([a-z]+)\+\s+(.*)", p)
        if m:
            appends.append(m.groups())
    if needs_model and not model:
        print("README:%d: SKIP: needs the model, which cannot be had here" % line_no)
        skipped_model += 1
        continue
    script = substitute("\n".join(body), pairs)
    for cmd, extra in appends:
        script = re.sub(r"^(build/fathom\s+%s\b[^#\n]*?)(\s*(#.*)?)$" % cmd,
                        lambda m: m.group(1) + " " + extra + m.group(2), script, flags=re.M)
    t0, cpu0 = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=work, env=env,
                       capture_output=True, text=True)
    ran += 1
    if r.returncode != 0:
        failed += 1
        print("README:%d: FAIL (exit %d) running:\n%s\n--- stdout (tail)\n%s\n--- stderr (tail)\n%s"
              % (line_no, r.returncode, script, r.stdout[-3000:], r.stderr[-3000:]))
    else:
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        print("README:%d: ok (%d commands, %.0f s, %.0f s CPU)" % (
            line_no, len([l for l in body if l.strip()]), time.time() - t0,
            cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime))
if ran < 2:
    print("FAIL: only %d README blocks ran" % ran)
    failed += 1
sys.exit(1 if failed else 77 if skipped_model else 0)
PY
