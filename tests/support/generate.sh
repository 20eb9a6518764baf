# Sourced by the model reference tests: gen PROMPT_IDS OUT N [extra args...]
# runs greedy fathom generate for N tokens ($fathom, $MODEL) and leaves the
# generated ids in OUT.ids, the logits in OUT.bin and stderr in OUT.err.
gen() {
  local ids=$1 out=$2 n=$3
  shift 3
  "$fathom" generate --model "$MODEL" --prompt-ids "$ids" --tokens "$n" --ignore-eos --ids --quiet \
    --threads 2 --dump-logits "$out.bin" "$@" >"$out.ids" 2>"$out.err" || {
    echo "FAIL: fathom generate $* exited $?"; cat "$out.err"; return 1; }
}
