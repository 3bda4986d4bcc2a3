#!/bin/sh
# Sampling options reach the sampler, in `ruvllm run` and in `ruvllm chat`:
# each is checked where it decides the tokens, against greedy decoding
# (--temp 0), at a temperature high enough (3) that sampling without the
# option would give other tokens. The limits behave as llama.cpp's
# samplers do (src/llama-sampling.cpp, each keeping at least one token):
#   --top-k 1          keeps only the most likely token: greedy, at any seed
#   --top-p 1e-9       the smallest set whose probability reaches p is the
#                      top token alone: greedy
#   --min-p 1          keeps tokens at least as likely as the top one: greedy
#   --top-k 0, --top-p 1, --min-p 0   each filter off: the whole vocabulary
#   --repeat-penalty X divides the positive logits (multiplies the negative
#                      ones) of tokens in the last --repeat-last-n tokens,
#                      prompt included; --repeat-last-n 0 turns it off
#   --frequency-penalty / --presence-penalty subtract from those logits
# One thread: a token per step is too little work to share, and on a busy
# machine waiting for the second thread costs more than the work.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
export RUVLLM_MODEL="$MODEL"
N=24
SEEDS="1 2 3"
# every filter off but the one under test, hot enough to scatter the tokens
OFF="--temp 3 --top-k 0 --top-p 1 --min-p 0"

# ---- run ----
P="Once upon a time"
out_tokens() { sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p' "$OUT"; }
# gen VAR ARGS...: VAR = the generated token ids (comma-separated)
gen() {
    v=$1
    shift
    run 0 ruvllm run -t 1 -n $N --json "$@"
    eval "$v=\$(out_tokens)"
}

gen greedy --temp 0 "$P"
assert "greedy run gives $N tokens" "[ \$(echo '$greedy' | tr ',' '\n' | wc -l) = $N ]"

# the control: with every filter off, sampling leaves greedy decoding (so
# that each limit below, giving greedy tokens, shows the option was applied)
differ=0
for s in $SEEDS; do
    gen t $OFF --seed $s "$P"
    [ "$t" != "$greedy" ] && differ=$((differ + 1))
done
assert "every filter off at temp 3: no seed gives the greedy tokens" "[ $differ = 3 ]"
gen a $OFF --seed 1 "$P"
gen b $OFF --seed 2 "$P"
assert "--seed: two seeds, two samples" '[ "$a" != "$b" ]'
gen c $OFF --seed 1 "$P"
assert "--seed: the same seed, the same sample" '[ "$a" = "$c" ]'

for s in $SEEDS; do
    gen t $OFF --top-k 1 --seed $s "$P"
    assert "run --top-k 1 --seed $s is greedy" '[ "$t" = "$greedy" ]'
    gen t $OFF --top-p 1e-9 --seed $s "$P"
    assert "run --top-p 1e-9 --seed $s is greedy" '[ "$t" = "$greedy" ]'
    gen t $OFF --min-p 1 --seed $s "$P"
    assert "run --min-p 1 --seed $s is greedy" '[ "$t" = "$greedy" ]'
done
# the defaults (top-k 40, top-p 0.95, min-p 0.05) are not each one off
gen t --temp 3 --top-p 1 --min-p 0 --seed 1 "$P"
gen u --temp 3 --top-k 0 --top-p 1 --min-p 0 --seed 1 "$P"
assert "run: --top-k 40 (the default) is not --top-k 0" '[ "$t" != "$u" ]'

# penalties: a repetitive prompt continues itself greedily; penalizing the
# tokens it repeats changes that
R="one one one one one one one one one one one one"
gen rep --temp 0 "$R"
assert "the repetitive prompt goes on repeating" "echo '$rep' | tr ',' '\n' | sort | uniq -c | sort -rn | awk 'NR == 1 { exit !(\$1 >= $N / 2) }'"
gen t --temp 0 --repeat-penalty 3 "$R"
assert "run --repeat-penalty 3 changes the greedy tokens" '[ "$t" != "$rep" ]'
gen u --temp 0 --repeat-penalty 3 --repeat-last-n 0 "$R"
assert "run --repeat-last-n 0 turns the penalty off" '[ "$u" = "$rep" ]'
gen v --temp 0 --repeat-penalty 3 --repeat-last-n 4 "$R"
assert "run --repeat-last-n 4 is a smaller window than the default 64" '[ "$v" != "$t" ]'
gen t --temp 0 --frequency-penalty 2 "$R"
assert "run --frequency-penalty 2 changes the greedy tokens" '[ "$t" != "$rep" ]'
gen t --temp 0 --presence-penalty 5 "$R"
assert "run --presence-penalty 5 changes the greedy tokens" '[ "$t" != "$rep" ]'
gen t --temp 0 --repeat-penalty 1 --frequency-penalty 0 --presence-penalty 0 "$R"
assert "run: penalties at their neutral values change nothing" '[ "$t" = "$rep" ]'

# ---- chat: the same options, through the per-turn sampler ----
# chat_reply VAR MESSAGE ARGS...: VAR = the reply's text
chat_reply() {
    v=$1
    m=$2
    shift 2
    run_in "$m
" 0 ruvllm chat -t 1 -n $N "$@"
    eval "$v=\$(cat \"\$OUT\")"
}
M="Tell me a story about a dragon."
chat_reply cgreedy "$M" --temp 0
assert "chat: a greedy reply" '[ -n "$cgreedy" ]'
differ=0
for s in $SEEDS; do
    chat_reply t "$M" $OFF --seed $s
    [ "$t" != "$cgreedy" ] && differ=$((differ + 1))
done
assert "chat: every filter off at temp 3: no seed gives the greedy reply" "[ $differ = 3 ]"
for s in $SEEDS; do
    chat_reply t "$M" $OFF --top-k 1 --seed $s
    assert "chat --top-k 1 --seed $s is greedy" '[ "$t" = "$cgreedy" ]'
    chat_reply t "$M" $OFF --top-p 1e-9 --seed $s
    assert "chat --top-p 1e-9 --seed $s is greedy" '[ "$t" = "$cgreedy" ]'
    chat_reply t "$M" $OFF --min-p 1 --seed $s
    assert "chat --min-p 1 --seed $s is greedy" '[ "$t" = "$cgreedy" ]'
done
# in-chat /set reaches the next reply's sampler too
chat_reply t "/set top-k 1
$M" $OFF --seed 1
assert "chat /set top-k 1 is greedy" '[ "$t" = "$cgreedy" ]'

RM="Say the word one twelve times: one one one one one one one one one one one one"
chat_reply crep "$RM" --temp 0
chat_reply t "$RM" --temp 0 --repeat-penalty 3
assert "chat --repeat-penalty 3 changes the greedy reply" '[ "$t" != "$crep" ]'
chat_reply u "$RM" --temp 0 --repeat-penalty 3 --repeat-last-n 0
assert "chat --repeat-last-n 0 turns the penalty off" '[ "$u" = "$crep" ]'
chat_reply t "$RM" --temp 0 --frequency-penalty 2
assert "chat --frequency-penalty 2 changes the greedy reply" '[ "$t" != "$crep" ]'
chat_reply t "$RM" --temp 0 --presence-penalty 5
assert "chat --presence-penalty 5 changes the greedy reply" '[ "$t" != "$crep" ]'
finish
