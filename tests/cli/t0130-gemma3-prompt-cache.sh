#!/bin/sh
# `ruvllm run --prompt-cache FILE` on a sliding-window model (Gemma 3 270M:
# 15 of its 18 layers see the last 512 positions only and keep a ring of
# pages, kvcache.c "Sliding windows"), with a prompt of about 1000 tokens,
# twice the window: the same prompt again reuses all but its last token
# and prints what a run without the cache prints; a longer prompt reuses
# the cached part; a prompt that stops before what the rings still hold
# reuses nothing (its window's keys were freed) and still prints the right
# text; the session file is version 4 (rings saved trimmed) on f16 and q8.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/gemma-3-270m-q4_k_m.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (scripts/fetch-model.sh gemma3)"
fi
D=${RVL_SHARED_DATA:-../shared/data}
[ -f "$D/text/wikitext-2-test.txt" ] || D=tests/data/shared
# about 1000 tokens of WikiText-2; P2 extends it, P3 is its first 400 tokens or so
sed -n 1,40p "$D/text/wikitext-2-test.txt" | head -c 3600 >"$TMP/p1.txt"
{ cat "$TMP/p1.txt"; printf ' He later appeared in'; } >"$TMP/p2.txt"
head -c 1500 "$TMP/p1.txt" >"$TMP/p3.txt"
g() { ruvllm run -m "$MODEL" -t 2 --temp 0 -n 8 --json "$@"; }
reused() { sed -n 's/.*"prompt_tokens_reused":\([0-9]*\).*/\1/p' "$OUT"; }
text() { sed -n 's/^{"text":"\([^"]*\)".*/\1/p' "$OUT"; }
ntok() { sed -n 's/.*"prompt_tokens":\[\([0-9,]*\)\].*/\1/p' "$OUT" | tr ',' '\n' | grep -c .; }
version() { od -An -tu4 -j8 -N4 "$1" | tr -d ' '; }

for f in 1 2 3; do
    run 0 g -f "$TMP/p$f.txt"
    eval "plain$f=\$(text)"
    eval "n$f=\$(ntok)"
done
assert "the prompt is longer than twice the window ($n1 tokens)" '[ "$n1" -gt 900 ]'

PC=$TMP/pc.rvls
run 0 g --prompt-cache "$PC" -f "$TMP/p1.txt"
assert "first run reuses nothing" '[ "$(reused)" = 0 ]'
assert "first run writes the cache" '[ -s "$PC" ]'
assert "a version 4 session file: the windowed layers' rings, trimmed" '[ "$(version "$PC")" = 4 ]'
run 0 g --prompt-cache "$PC" -f "$TMP/p1.txt"
assert "same prompt: all but the last token reused ($(reused) of $n1)" '[ "$(reused)" = $((n1 - 1)) ]'
assert "same prompt: same text as without the cache" '[ "$(text)" = "$plain1" ]'

# a longer prompt: the cached part (all of it, or all but the tokens the
# seam between old and new text re-tokenizes) comes from the cache
run 0 g --prompt-cache "$PC" -f "$TMP/p2.txt"
assert "extended prompt reuses the cached prefix ($(reused) of $n2, cached $n1)" \
    '[ "$(reused)" -ge $((n1 - 2)) ] && [ "$(reused)" -lt "$n2" ]'
assert "extended prompt: same text as without the cache" '[ "$(text)" = "$plain2" ]'
# --stats says the same
run 0 ruvllm run -m "$MODEL" -t 2 --temp 0 -n 1 --stats --prompt-cache "$PC" -f "$TMP/p2.txt"
err_has "prompt tokens reused: $((n2 - 1)) of $n2"

# a prefix that ends before the window of what the rings hold: nothing is
# reusable (the windowed layers freed the keys it would need), the text is right
run 0 g --prompt-cache "$PC" -f "$TMP/p3.txt"
assert "short prefix of a long cache: nothing reused ($(reused))" '[ "$(reused)" = 0 ]'
assert "short prefix: same text as without the cache" '[ "$(text)" = "$plain3" ]'

# q8: the rings saved and loaded quantized. A run from the cache differs
# a little from a cold q8 run (in a batch, the batch's own keys are still
# f16), so the reference is another run from the cache and f16's words;
# tests/test_session.c checks bit for bit that a restored windowed q8
# cache continues as the saved one.
Q8=$TMP/q8.rvls
run 0 g --kv-type q8 --prompt-cache "$Q8" -f "$TMP/p1.txt"
assert "q8: first run reuses nothing" '[ "$(reused)" = 0 ]'
assert "q8: a version 4 session file" '[ "$(version "$Q8")" = 4 ]'
run 0 g --kv-type q8 --prompt-cache "$Q8" -f "$TMP/p1.txt"
assert "q8: same prompt: all but the last token reused ($(reused))" '[ "$(reused)" = $((n1 - 1)) ]'
q8a=$(text)
run 0 g --kv-type q8 --prompt-cache "$Q8" -f "$TMP/p1.txt"
assert "q8: the same text from the cache each time" '[ "$(text)" = "$q8a" ]'
assert "q8: the cached text is sensible (shares its first words with f16's: '$q8a')" \
    '[ "$(printf %s "$q8a" | cut -c1-12)" = "$(printf %s "$plain1" | cut -c1-12)" ]'
# f16 and q8 files differ in size: q8 pages are about half
assert "q8 file smaller than f16's" '[ "$(wc -c <"$Q8")" -lt "$(wc -c <"$PC")" ]'
# a q8 file is refused by an f16 context, not misread
run 0 g --prompt-cache "$Q8" -f "$TMP/p1.txt"
err_has "not using the prompt cache"
assert "another KV format: nothing reused" '[ "$(reused)" = 0 ]'
assert "another KV format: same text" '[ "$(text)" = "$plain1" ]'
finish
