#!/bin/sh
# `ruvllm run --context-shift` on Gemma 3 270M, whose windowed layers
# rotate on their own RoPE base (10000; the global ones on 1e6): the
# shift re-rotates each layer's keys with its own angles (kvcache.c
# "Context shift"; tests/test_kvcache.c checks the keys against a fresh
# context). Here: generation runs past the context without error, with
# the windows wider than the context (-c 256: every layer keeps every
# page), with real rings (-c 640, window 512), and with a --keep that
# leaves the rings without keys their window would see (attention sees
# what they hold). Before the shift was implemented these runs stopped
# with "context shift of a model whose windowed layers have their own
# RoPE base".
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/gemma-3-270m-q4_k_m.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (scripts/fetch-model.sh gemma3)"
fi
D=${RVL_SHARED_DATA:-../shared/data}
[ -f "$D/text/wikitext-2-test.txt" ] || D=tests/data/shared
sed -n 1,40p "$D/text/wikitext-2-test.txt" | head -c 1500 >"$TMP/p.txt"
g() { ruvllm run -m "$MODEL" -t 2 --temp 0 --stats "$@"; }
words() { tr -s ' \n' '\n\n' <"$OUT" | grep -c '[a-z]'; }

# without --context-shift: stops at the full context
run 0 g -c 256 -n 600 "The history of the Roman Empire"
err_has "context full (256 tokens)"
err_has "finish: context"

run 0 g --context-shift -c 256 -n 600 "The history of the Roman Empire"
err_has "generated 600 tokens"
err_has "finish: length"
err_lacks() { if grep -q -F -e "$1" "$ERR"; then not_ok "stderr has '$1'"; else ok "stderr lacks '$1'"; fi; }
err_lacks "context full"
assert "text all the way ($(words) words)" '[ "$(words)" -gt 300 ]'

# real rings: a prompt of about 400 tokens, the context of 640 filled, half dropped
run 0 g --context-shift -c 640 -n 300 -f "$TMP/p.txt"
err_has "generated 300 tokens"
err_has "finish: length"
assert "text all the way ($(words) words)" '[ "$(words)" -gt 100 ]'
# keeping the prompt: the window of what is left reaches keys the rings freed
run 0 g --context-shift --keep -1 -c 640 -n 300 -f "$TMP/p.txt"
err_has "generated 300 tokens"
assert "text all the way ($(words) words)" '[ "$(words)" -gt 100 ]'
finish
