#!/bin/sh
# `ruvllm chat` on a sliding-window model (Gemma 3 270M, window 512; a base
# model: chat uses the built-in gemma template): a first message of about
# 900 tokens, then two short ones. Each turn reuses the whole conversation
# before it from the cache (cached_tokens past the window: the rings still
# hold what the next turn's window needs); a conversation saved with
# --session and continued in a new process gives the same reply as the
# uninterrupted one, without decoding the earlier turns again.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/gemma-3-270m-q4_k_m.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (scripts/fetch-model.sh gemma3)"
fi
D=${RVL_SHARED_DATA:-../shared/data}
[ -f "$D/text/wikitext-2-test.txt" ] || D=tests/data/shared
nl='
'
long=$(sed -n 1,40p "$D/text/wikitext-2-test.txt" | head -c 3600 | tr '\n' ' ')
chat() { ruvllm chat -m "$MODEL" -t 2 --temp 0 -n 16 --json "$@"; }
cached() { sed -n "${1}p" "$OUT" | sed -n 's/.*"cached_tokens":\([0-9]*\).*/\1/p'; }
reply() { sed -n "${1}p" "$OUT" | sed 's/"prompt_tokens".*//; s/^{"user":"[^"]*",//'; }

run_in "$long${nl}Summarize that in one sentence.${nl}Who is he?${nl}" 0 chat
c1=$(cached 1) c2=$(cached 2) c3=$(cached 3)
r3=$(reply 3)
assert "three turns" '[ -n "$c3" ]'
assert "the first turn reuses nothing ($c1)" '[ "$c1" = 0 ]'
assert "the second turn reuses the first, past the window ($c2 > 512)" '[ "${c2:-0}" -gt 600 ]'
assert "the third turn reuses the first two ($c3 > $c2)" '[ "${c3:-0}" -gt "${c2:-0}" ]'

# two turns in a session file, the program restarted, the third turn
S=$TMP/s.rvls
run_in "$long${nl}Summarize that in one sentence.${nl}" 0 chat --session "$S"
assert "the session file exists" '[ -s "$S" ]'
run_in "Who is he?${nl}" 0 chat --session "$S"
assert "restarted: the third turn reuses the saved cache ($(cached 1) > 512)" \
    '[ "$(cached 1)" -gt 600 ]'
assert "restarted: the same reply as the uninterrupted conversation" '[ -n "$r3" ] && [ "$(reply 1)" = "$r3" ]'
finish
