#!/bin/sh
# `ruvllm run --prompt-cache FILE`: the cache of the longest prompt prefix
# saved in FILE is reused (a session file, lib/engine/session.c), the output is
# the same as without it, and a damaged or foreign file is refused with a
# message (and replaced), never used silently.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
PC=$TMP/prompt.rvls
P1="You are a helpful assistant. Answer briefly and precisely. The capital of France is"
P2="You are a helpful assistant. Answer briefly and precisely. The capital of Germany is"
reused() { sed -n 's/.*"prompt_tokens_reused":\([0-9]*\).*/\1/p' "$OUT"; }
text() { sed -n 's/^{"text":"\([^"]*\)".*/\1/p' "$OUT"; }

run 0 ruvllm run -m "$MODEL" --temp 0 -n 12 --json "$P1"
plain1=$(text)
run 0 ruvllm run -m "$MODEL" --temp 0 -n 12 --json "$P2"
plain2=$(text)

run 0 ruvllm run -m "$MODEL" --prompt-cache "$PC" --temp 0 -n 12 --json "$P1"
assert "first run reuses nothing" '[ "$(reused)" = 0 ]'
assert "first run writes the cache" '[ -s "$PC" ]'
run 0 ruvllm run -m "$MODEL" --prompt-cache "$PC" --temp 0 -n 12 --json "$P1"
assert "same prompt: all but the last token reused ($(reused))" '[ "$(reused)" = 15 ]'
assert "same prompt: same text as without the cache" '[ "$(text)" = "$plain1" ]'
run 0 ruvllm run -m "$MODEL" --prompt-cache "$PC" --temp 0 -n 12 --json "$P2"
assert "shared prefix reused ($(reused))" '[ "$(reused)" = 14 ]'
assert "other prompt: same text as without the cache" '[ "$(text)" = "$plain2" ]'

# --stats counts the reused prompt tokens; a prompt of several pages (32
# tokens each) is matched by the pages' chained hashes
PC2=$TMP/long.rvls
P3="$P1 $P1 $P1 $P1 $P1"
run 0 ruvllm run -m "$MODEL" --prompt-cache "$PC2" --temp 0 -n 4 --stats "$P3"
err_has "prompt tokens reused: 0 of "
m=$(sed -n 's/.*prompt tokens reused: 0 of \([0-9]*\).*/\1/p' "$ERR")
run 0 ruvllm run -m "$MODEL" --prompt-cache "$PC2" --temp 0 -n 4 --stats "$P3"
err_has "prompt tokens reused: $((m - 1)) of $m"
assert "the long prompt spans several pages ($m tokens)" '[ "$m" -gt 64 ]'

# a damaged cache is refused with a reason, not used, and replaced
printf 'garbage' | dd of="$PC" bs=1 seek=100 conv=notrunc 2>/dev/null
run 0 ruvllm run -m "$MODEL" --prompt-cache "$PC" --temp 0 -n 12 --json "$P1"
err_has "not using the prompt cache"
err_has "checksum"
assert "damaged cache: nothing reused" '[ "$(reused)" = 0 ]'
assert "damaged cache: same text" '[ "$(text)" = "$plain1" ]'
run 0 ruvllm run -m "$MODEL" --prompt-cache "$PC" --temp 0 -n 12 --json "$P1"
assert "rewritten cache is used again" '[ "$(reused)" = 15 ]'

# another model's cache is refused
run 0 ruvllm run -m tests/data/tiny/llama.gguf --prompt-cache "$PC" --temp 0 -n 2 "abc"
err_has "another model"
finish
