#!/bin/sh
# `ruvllm kv-inspect`: what a session file holds (header, fingerprint and
# model check, tokens and text, pages and bytes, checksums, per-head
# statistics), damaged files named block by block with exit status 1, and
# --diff of two sessions. Files are made by `run --prompt-cache` with the
# default model (short prompts).
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
TINY=tests/data/tiny/llama.gguf
A=$TMP/a.rvls
B=$TMP/b.rvls

run 0 ruvllm run -m "$MODEL" --prompt-cache "$A" --temp 0 -n 1 "The capital of France is"
run 0 ruvllm run -m "$MODEL" --prompt-cache "$B" --temp 0 -n 1 "The capital of Germany is"

# the header, the token count, the model check and the cached text
run 0 ruvllm kv-inspect -m "$MODEL" "$A"
out_has "ruvllm session (magic RVLSESS), version"
out_has "tokens      5"
out_has ": matches $MODEL"
out_has 'text        "The capital of France is"'
out_has "30 layers, kv_dim 192 (3 kv heads of 64)"
out_has "checksums   header ok, 33 of 33 blocks read, 0 bad, file ok"
out_has "  total                 30       5"
out_has "keys: per head"
out_has "values: per head"
err_empty
# every layer and head of keys and values has a row
assert "180 per-head rows" '[ "$(grep -c -E "^ +[0-9]+ +[0-2]  [0-9.e+-]+ \(" "$OUT")" = 180 ]'
# keys of real models have outlier channels, which the rotation spreads
assert "some key head has outlier channels" 'grep -A 91 "^keys: per head" "$OUT" | grep -q -E "^ +[0-9]+ +[0-9]  [^ ]+ \([0-9]+\) +[^ ]+ +[1-9]"'

# a tq4 cache of three pages: page 0 stays f16 (the attention sink), page
# 1 is tq4, and that is no problem
Q=$TMP/q.rvls
run 0 ruvllm run -m "$MODEL" --kv-type tq4 --prompt-cache "$Q" --temp 0 -n 1 \
    "$(printf 'The quick brown fox jumps over the lazy dog near the river bank. %.0s' 1 2 3 4 5 6)"
run 0 ruvllm kv-inspect "$Q"
out_has "  hot   f16   f16        60"
out_has "  warm  tq4   tq4        30      32"
out_lacks "problems"

# --json: one document with the same facts
run 0 ruvllm kv-inspect --json -m "$MODEL" "$A"
out_has '"n_tokens": 5,'
out_has '"intact": true,'
out_has '"matches": true,'
out_has '"text": "The capital of France is",'
out_has '"outlier_channels": ['
if command -v jq >/dev/null; then
    assert "--json parses (jq)" "jq -e '.n_tokens == 5 and (.heads | length) == 180' '$OUT' >/dev/null"
fi
run 0 ruvllm kv-inspect --json --no-heads "$A"
out_lacks '"heads"'

# a bit flipped inside layer 7's block: that block is named, exit 1
off=$(ruvllm kv-inspect --json --no-heads "$A" |
      awk '/"blocks":/ { b = 1 } b && /"offset":/ { o = $2 } b && /"layer": 7,/ { sub(",", "", o); print o; exit }')
assert "found layer 7's block ($off)" '[ -n "$off" ]'
cp "$A" "$TMP/flip.rvls"
printf '\377' | dd of="$TMP/flip.rvls" bs=1 seek=$((off + 32 + 40)) conv=notrunc 2>/dev/null
run 1 ruvllm kv-inspect "$TMP/flip.rvls"
out_has "the kv block at offset $off (layer 7, page 0): checksum mismatch"
out_has "file checksum mismatch"
out_has "33 of 33 blocks read, 1 bad, file MISMATCH"
out_has "(1 damaged pages not counted)"
err_has "(layer 7, page 0): checksum mismatch"
run 1 ruvllm kv-inspect --json "$TMP/flip.rvls"
out_has '"status": "checksum mismatch"'
out_has '"intact": false,'

# a truncated file: inspected up to the cut, the cut block named, exit 1
size=$(wc -c <"$A")
head -c $((size / 2)) "$A" >"$TMP/cut.rvls"
run 1 ruvllm kv-inspect "$TMP/cut.rvls"
out_has "truncated: its"
out_has "missing:"
out_has "tokens      5"
err_has "truncated"

# --diff: two prompts share "The capital of" (3 tokens); the cache of the
# common prefix is identical
run 0 ruvllm kv-inspect -m "$MODEL" --diff "$B" "$A"
out_has "common      3 tokens"
out_has 'diverge     at token 3: a has id'
out_has '" France", b has id'
out_has '" Germany"'
assert "identical keys and values over the prefix" '[ "$(grep -c -E "^ +[0-9]+  0 +0$" "$OUT")" = 30 ]'
run 0 ruvllm kv-inspect --json --diff "$B" "$A"
out_has '"common_prefix": 3,'
out_has '"first_difference": 3,'
run 0 ruvllm kv-inspect --diff "$A" "$A"
out_has "diverge     nowhere: the same 5 tokens"
run 1 ruvllm kv-inspect --diff "$TMP/flip.rvls" "$A"
out_has "DAMAGED"

# another model's file: the mismatch is reported, exit 1
run 0 ruvllm run -m "$TINY" --prompt-cache "$TMP/tiny.rvls" --temp 0 -n 1 "abc"
run 1 ruvllm kv-inspect -m "$MODEL" "$TMP/tiny.rvls"
out_has ": does not match $MODEL"
err_has "made with another model"
run 0 ruvllm kv-inspect "$TMP/tiny.rvls"

# not a session file; usage
run 1 ruvllm kv-inspect "$TINY"
err_has "not a ruvllm session file (bad magic at offset 0)"
run 2 ruvllm kv-inspect
run 2 ruvllm kv-inspect "$A" "$B"
finish
