#!/bin/sh
# ruvllm run: prompt sources, stdout carries only the text, options are
# validated, errors are clear, Ctrl-C and SIGPIPE end cleanly.
. tests/cli/lib.sh
D=${RVL_SHARED_DATA:-../shared/data}
MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
export RUVLLM_MODEL="$MODEL"

# --tokenize works on vocab-only files and prints ids on one line
run 0 ruvllm run --tokenize -m "$D/tokenizers/ggml-vocab-gpt-2.gguf" "Hello world"
out_is() { if [ "$(cat "$OUT")" = "$1" ]; then ok "stdout is '$1'"; else not_ok "stdout is not '$1'"; fi; }
out_is "15496 995"
run_in "Hello world" 0 ruvllm run --tokenize -m "$D/tokenizers/ggml-vocab-gpt-2.gguf"
out_is "15496 995"
run 0 ruvllm run --tokenize -m "$D/tokenizers/ggml-vocab-llama-spm.gguf" "Hello world"
out_is "1 15043 3186"
run 0 ruvllm run --tokenize --no-bos -m "$D/tokenizers/ggml-vocab-llama-spm.gguf" "Hello world"
out_is "15043 3186"
run 0 ruvllm run --tokenize "<|im_start|>user"
out_is "44 108 306 79 3738 108 46 4093"
run 0 ruvllm run --tokenize --special "<|im_start|>user"
out_is "1 4093"

# invalid UTF-8 in the prompt is tolerated (replaced), never a crash
printf '\377\376\377 abc \300' >"$TMP/bad-utf8.txt"
run 0 ruvllm run --tokenize -f "$TMP/bad-utf8.txt"
assert "invalid UTF-8 prompt gives tokens" "[ -s '$OUT' ]"
run 0 ruvllm run --temp 0 -n 2 -f "$TMP/bad-utf8.txt"

# greedy generation is deterministic and stdout has only the text
run 0 ruvllm run --temp 0 -n 6 "The capital of France is"
cp "$OUT" "$TMP/g1"
err_empty
run 0 ruvllm run --temp 0 -n 6 "The capital of France is"
assert "greedy runs agree" "cmp -s '$OUT' '$TMP/g1'"
out_has "Paris"
# the prompt from stdin and from -f gives the same text
run_in "The capital of France is" 0 ruvllm run --temp 0 -n 6
assert "stdin prompt = argument prompt" "cmp -s '$OUT' '$TMP/g1'"
printf 'The capital of France is' >"$TMP/prompt.txt"
run 0 ruvllm run --temp 0 -n 6 -f "$TMP/prompt.txt"
assert "-f prompt = argument prompt" "cmp -s '$OUT' '$TMP/g1'"
run 0 ruvllm run --temp 0 -n 6 --echo "The capital of France is"
assert "--echo prints prompt then text" "[ \"\$(cat '$OUT')\" = \"The capital of France is\$(cat '$TMP/g1')\" ]"

# sampling with a seed is reproducible
run 0 ruvllm run -n 8 --seed 42 "Once upon a time"
cp "$OUT" "$TMP/s1"
run 0 ruvllm run -n 8 --seed 42 "Once upon a time"
assert "same seed, same text" "cmp -s '$OUT' '$TMP/s1'"

# --json: one object with the keys scripts need
run 0 ruvllm run --temp 0 -n 4 --json "The capital of France is"
out_has '"text":" Paris'
out_has '"prompt_tokens":[504,3575,282,4649,314]'
out_has '"finish_reason":"length"'
out_has '"timings":{'
assert "--json is one line" "[ \$(wc -l <'$OUT') = 1 ]"

# --stop: generation ends before the stop string, which is not printed
run 0 ruvllm run --temp 0 -n 30 --stop "." "The capital of France is"
out_is " Paris"
run 0 ruvllm run --temp 0 -n 30 --stop "." --json "The capital of France is"
out_has '"finish_reason":"stop"'

# -n 0 generates nothing
run 0 ruvllm run -n 0 "Hello"
out_empty

# --stats goes to stderr
run 0 ruvllm run --temp 0 -n 2 --stats "Hi"
err_has "tok/s"
err_has "KV cache at "

# absurd options are usage errors
run 2 ruvllm run -n abc "x"
err_has "'abc' is not an integer"
run 2 ruvllm run --temp -1 "x"
err_has "out of range"
run 2 ruvllm run --top-p 0 "x"
run 2 ruvllm run -t 100000 "x"
run 2 ruvllm run -c 99999999 "x"
run 2 ruvllm run --seed -3 "x"
run 2 ruvllm run --stop "" "x"
run 2 ruvllm run -f "$TMP/prompt.txt" -   # two prompt sources (an argument with -f is joined: t0191)
run 2 ruvllm run --tmep 0 "x"
err_has "did you mean '--temp'?"

# model errors are runtime errors that say what to do
RUVLLM_MODEL= RUVLLM_MODELS= XDG_CACHE_HOME="$TMP/nocache" run 1 ruvllm run "x"
err_has "ruvllm pull"
run 1 ruvllm run -m "$TMP/none.gguf" "x"
err_has "none.gguf: No such file or directory"
run 1 ruvllm run -m "$D/tokenizers/ggml-vocab-gpt-2.gguf" "x"
err_has "unsupported architecture 'gpt2'"
run 1 ruvllm run -m "$D/tokenizers/ggml-vocab-llama-spm.gguf" "x"
err_has "ggml-vocab-llama-spm.gguf: missing"

# a prompt longer than the context is refused
run 1 ruvllm run -c 8 "one two three four five six seven eight nine ten"
err_has "context of 8"
# a full context stops generation with a message
run 0 ruvllm run -c 12 --temp 0 --json "The capital of France is"
out_has '"finish_reason":"context"'
err_has "context full"

# --ignore-eos: a greedy chat reply ends with <|im_end|>; with --ignore-eos
# the same reply goes on past that point to -n, never sampling it (no token
# ids from a reference here: only how the two runs relate)
run 0 ruvllm run --tokenize --special "<|im_end|>"
eot=$(cat "$OUT")
assert "<|im_end|> is one token" "echo '$eot' | grep -q -E '^[0-9]+\$'"
ids() { sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p' "$OUT" | tr ',' ' '; }
run 0 ruvllm run --temp 0 --chat --json "Say hi"
out_has '"finish_reason":"stop"'
stopped=$(ids)
n_stop=$(echo $stopped | wc -w)
assert "the reply ends with <|im_end|>, its only one" \
    "[ \"\$(echo $stopped | tr ' ' '\n' | grep -n -x '$eot')\" = '$n_stop:$eot' ]"
run 0 ruvllm run --temp 0 --chat --json --ignore-eos -n $((n_stop + 8)) "Say hi"
out_has '"finish_reason":"length"'
longer=$(ids)
assert "--ignore-eos goes on to -n $((n_stop + 8)) tokens" "[ \$(echo $longer | wc -w) = $((n_stop + 8)) ]"
assert "--ignore-eos never samples <|im_end|>" "! echo ' $longer ' | grep -q ' $eot '"
assert "--ignore-eos: the same reply up to where <|im_end|> was" \
    "[ \"\$(echo $longer | cut -d' ' -f1-$((n_stop - 1)))\" = \"\$(echo $stopped | cut -d' ' -f1-$((n_stop - 1)))\" ]"

# SIGPIPE: a closed pipe ends generation without an error message
"$RUVLLM" run --temp 0 -n 200 "Once upon a time" 2>"$ERR" | head -c 10 >"$OUT"
assert "head -c 10 got 10 bytes" "[ \$(wc -c <'$OUT') = 10 ]"
err_empty

# Ctrl-C stops generation, keeps what was printed, exits 130
# (--ignore-eos: the model's end of text must not end it before the signal;
# OUT is emptied first: otherwise the loop below can see the previous test's
# output before the shell has truncated it, and signal the process before it
# has installed its handler, while a background job still ignores SIGINT)
: >"$OUT"
"$RUVLLM" run --temp 0 --ignore-eos -n 100000 -c 4096 "Once upon a time" >"$OUT" 2>"$ERR" &
pid=$!
wait_sigint_handler $pid
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    [ -s "$OUT" ] && break
    sleep 0.5
done
kill -INT $pid
wait $pid
st=$?
assert "Ctrl-C exits 130 (got $st)" "[ $st = 130 ]"
assert "text generated before Ctrl-C is kept" "[ -s '$OUT' ]"
# RoPE overrides: NTK-aware x2 keeps short-context greedy text; linear x8 changes it
run 0 ruvllm run --temp 0 -n 6 --json "The capital of France is"
base=$(sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p' "$OUT")
run 0 ruvllm run --rope-scaling ntk --rope-scale 2 --temp 0 -n 6 --json "The capital of France is"
ntk=$(sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p' "$OUT")
assert "NTK-aware x2 gives the same first tokens at a short context" '[ "$ntk" = "$base" ]'
run 0 ruvllm run --rope-scaling linear --rope-scale 8 --temp 0 -n 6 --json "The capital of France is"
lin=$(sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p' "$OUT")
assert "linear x8 changes them (the override is applied)" '[ "$lin" != "$base" ]'
run 2 ruvllm run --rope-scaling bogus "x"
err_has "none|linear|yarn|ntk"

# --backend: metal only in builds made with make METAL=1 on macOS (generation
# through it is tested in emulation: tests/metal-emu/test_backend.cpp)
run 2 ruvllm run --backend gpu "x"
err_has "cpu|metal"
run 0 ruvllm run --backend cpu --temp 0 -n 3 --json -m tests/data/tiny/llama.gguf "x"
out_has '"backend":"cpu","device":"cpu"'
if ! ruvllm --version | grep -q '^backends:.* metal'; then
    run 1 ruvllm run --backend metal -m tests/data/tiny/llama.gguf "x"
    err_has "ruvllm run: this build has no Metal backend (build on macOS with make METAL=1)"
    out_lacks "x"
    # the missing backend is what is reported, whatever else is asked
    run 1 ruvllm run --backend metal --kv-type q8 --prompt-cache "$TMP/pc" -m tests/data/tiny/llama.gguf "x"
    err_has "ruvllm run: this build has no Metal backend"
    assert "no prompt cache written" '[ ! -e "$TMP/pc" ]'
    run 1 ruvllm chat --backend metal -m tests/data/tiny/llama.gguf
    err_has "ruvllm chat: this build has no Metal backend (build on macOS with make METAL=1)"
fi
finish
