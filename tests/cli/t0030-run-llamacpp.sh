#!/bin/sh
# `ruvllm run` agrees with llama.cpp on the default model, token for token.
# tests/ref/gen_llamacpp_goldens.py ran llama.cpp (llama-cpp-python) on the
# prompts in tests/ref/llamacpp/prompts/ and committed, per prompt, its
# prompt token ids, its greedy continuation (64 tokens, or up to an
# end-of-generation token) and the margin between the two largest logits at
# each step (tests/ref/llamacpp/greedy.tsv). Here, per prompt:
#   - `ruvllm run --tokenize` gives llama.cpp's prompt ids;
#   - `ruvllm run --temp 0 --json` generates llama.cpp's tokens, compared up
#     to (not including) the first step where llama.cpp's top-2 margin is
#     below 1e-3 (a near tie: either token is a correct greedy choice, and
#     everything after it may differ).
# To keep `make check` short, prompts generate RVL_LLAMACPP_N tokens
# (default 32) except those in FULL, which go to the goldens' 64.
# RVL_LLAMACPP_N=64 checks every prompt in full.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
REF=tests/ref/llamacpp
N_SHORT=${RVL_LLAMACPP_N:-32}
FULL=" en-capital chatml py-fib "

if [ ! -f "$MODEL" ]; then
    echo "1..0 # SKIP no model at $MODEL (make model)"
    exit 0
fi

# first_diff EXPECTED OURS MARGINS K: compares the first K ids of two
# space-separated lists; prints nothing when they agree, else the first
# differing step with both tokens and llama.cpp's margin there.
first_diff() {
    awk -v a="$1" -v b="$2" -v m="$3" -v k="$4" 'BEGIN {
        na = split(a, x, " "); nb = split(b, y, " "); split(m, z, " ")
        for (i = 1; i <= k; i++) {
            xi = i <= na ? x[i] : "(none)"; yi = i <= nb ? y[i] : "(none)"
            if (xi != yi) {
                printf "step %d: ruvllm %s, llama.cpp %s (llama.cpp margin %s)\n", i - 1, yi, xi, z[i]
                exit
            }
        }
    }'
}

tab=$(printf '\t')
grep -v '^#' "$REF/greedy.tsv" > "$TMP/golden"
while IFS="$tab" read -r id special prompt pids toks margins seconds tie; do
    flags=""
    [ "$special" = 1 ] && flags="--special"
    file=$REF/prompts/$id.txt
    # shellcheck disable=SC2086 # $flags is empty or one word
    "$RUVLLM" run -m "$MODEL" $flags --tokenize -f "$file" >"$OUT" 2>"$ERR" </dev/null
    got=$(cat "$OUT")
    last="ruvllm run $flags --tokenize -f $file"
    assert "$id: prompt ids are llama.cpp's ($pids)" '[ "$got" = "$pids" ]'

    case $FULL in *" $id "*) n_gen=64 ;; *) n_gen=$N_SHORT ;; esac
    k=$n_gen
    [ "$tie" -ge 0 ] && [ "$tie" -lt "$k" ] && k=$tie
    n_ref=$(echo "$toks" | wc -w)
    [ "$n_ref" -lt "$k" ] && k=$n_ref # llama.cpp stopped at end of generation
    # shellcheck disable=SC2086
    "$RUVLLM" run -m "$MODEL" $flags --temp 0 -n "$n_gen" --json -f "$file" \
        >"$OUT" 2>"$ERR" </dev/null
    ours=$(sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p' "$OUT" | tr ',' ' ')
    last="ruvllm run $flags --temp 0 -n $n_gen --json -f $file"
    diff=$(first_diff "$toks" "$ours" "$margins" "$k")
    note=""
    [ "$k" -lt "$n_gen" ] && note=" (near tie at step $tie: rest unchecked)"
    if [ -z "$diff" ]; then
        ok "$id: the first $k greedy tokens are llama.cpp's$note"
    else
        not_ok "$id: greedy tokens differ from llama.cpp's at $diff"
    fi
done < "$TMP/golden"

finish
