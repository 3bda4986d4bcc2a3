#!/bin/sh
# ruvllm run --batch: every line gives what `ruvllm run` gives it alone
# (greedy and seeded sampling, plain prompts and JSON lines with their own
# options, chat messages), whatever --parallel; --unordered gives the same
# set; stdin; bad lines get an error line and the others go on (exit 1);
# the input is streamed; a closed stdout ends it cleanly.
. tests/cli/lib.sh
MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
export RUVLLM_MODEL="$MODEL"

# the "text" of a JSON object on stdin (still JSON-encoded), and another field
text_of() { sed -n 's/.*"text":\("\([^"\\]\|\\.\)*"\).*/\1/p'; }
field_of() { sed -n "s/.*\"$1\":\(\"[a-z]*\"\|[0-9]*\).*/\1/p"; }
# the number of ids in run --json's "tokens" array
n_tokens() { sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p' | tr ',' '\n' | grep -c .; }

P="$TMP/prompts.txt"
cat >"$P" <<'EOF'
The capital of France is
def fibonacci(n):
Once upon a time, in a small village,

Café au lait is made with
1, 2, 3, 4,
EOF
NP=5   # the blank line is skipped

# alone LINE-NO PROMPT RUN-OPTIONS...: line LINE-NO of $OUT (an object of
# the batch) has the text, finish reason and token counts of `run --json`
alone() {
    no=$1 prompt=$2
    shift 2
    sed -n "${no}p" "$OUT" >"$TMP/got"
    "$RUVLLM" run --json "$@" "$prompt" >"$TMP/want" 2>/dev/null </dev/null   # not the loop's input as material
    desc=$(printf '%s' "$*" | tr '\n' '~')
    assert "line $no ($desc): the text of run alone" \
        "[ \"\$(text_of <'$TMP/got')\" = \"\$(text_of <'$TMP/want')\" ] && [ -n \"\$(text_of <'$TMP/got')\" ]"
    assert "line $no ($desc): the finish reason of run alone" \
        "[ \"\$(field_of finish_reason <'$TMP/got')\" = \"\$(field_of finish_reason <'$TMP/want')\" ]"
    assert "line $no ($desc): completion_tokens = run's tokens" \
        "[ \"\$(field_of completion_tokens <'$TMP/got')\" = \"\$(n_tokens <'$TMP/want')\" ]"
}

# ---- plain lines, greedy and seeded: each as alone -----------------------
run 0 ruvllm run --batch "$P" --temp 0 -n 12 -t 2
err_empty
assert "one object a line, blank line skipped" "[ \$(wc -l <'$OUT') = $NP ]"
out_has '{"id":1,"text":" Paris'
out_has '"prompt_tokens":5,"completion_tokens":12}'
cp "$OUT" "$TMP/greedy"
i=0
grep -v '^$' "$P" | while IFS= read -r p; do i=$((i + 1)); echo "$i	$p"; done >"$TMP/numbered"
while IFS='	' read -r i p; do alone "$i" "$p" --temp 0 -n 12 -t 2; done <"$TMP/numbered"
assert "ids are the line numbers (the blank line counts)" \
    "[ \"\$(field_of id <'$OUT' | tr '\n' ' ')\" = '1 2 3 5 6 ' ]"

run 0 ruvllm run --batch "$P" --temp 0.9 --seed 11 -n 14 --parallel 3
cp "$OUT" "$TMP/seeded"
while IFS='	' read -r i p; do alone "$i" "$p" --temp 0.9 --seed 11 -n 14; done <"$TMP/numbered"

# ---- --parallel 1 and 8, --unordered, stdin: the same results ----------
run 0 ruvllm run --batch "$P" --temp 0.9 --seed 11 -n 14 --parallel 1
assert "--parallel 1 = --parallel 3" "cmp -s '$OUT' '$TMP/seeded'"
run 0 ruvllm run --batch "$P" --temp 0.9 --seed 11 -n 14 --parallel 8
assert "--parallel 8 = --parallel 3" "cmp -s '$OUT' '$TMP/seeded'"
run 0 ruvllm run --batch "$P" --temp 0.9 --seed 11 -n 14 --parallel 8 --unordered
assert "--unordered: the same set of lines" \
    "[ \"\$(sort '$OUT')\" = \"\$(sort '$TMP/seeded')\" ]"
run_in "$(cat "$P")" 0 ruvllm run --batch - --temp 0 -n 12 -t 2
assert "--batch - reads standard input" "cmp -s '$OUT' '$TMP/greedy'"

# ---- JSON lines: their own options, chat messages -----------------------
cat >"$TMP/j.jsonl" <<'EOF'
{"prompt": "The capital of France is", "max_tokens": 5, "temperature": 0, "id": "a"}
{"id": 7.5, "prompt": "Once upon a time", "temperature": 0.7, "seed": 3, "top_k": 20, "top_p": 0.9, "max_tokens": 9}
{"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 20, "temperature": 0}
{"prompt": "Count: 1, 2, 3,", "stop": [" 6", "zz"], "max_tokens": 30}
  {"prompt": "def f(x):", "stop": "\n", "max_tokens": 20, "temperature": null}
EOF
run 0 ruvllm run --batch "$TMP/j.jsonl" --temp 0 -n 40
assert "five objects" "[ \$(wc -l <'$OUT') = 5 ]"
out_has '{"id":"a","text":'
out_has '{"id":7.5,"text":'
alone 1 "The capital of France is" --temp 0 -n 5
alone 2 "Once upon a time" --temp 0.7 --seed 3 --top-k 20 --top-p 0.9 -n 9
alone 3 "What is 2+2?" --chat --temp 0 -n 20
alone 4 "Count: 1, 2, 3," --temp 0 --stop " 6" --stop zz -n 30
nl='
'
alone 5 "def f(x):" --temp 0 --stop "$nl" -n 20
# --stop of the command line holds for lines without "stop"; a line's replaces it
printf '%s\n' 'Count: 1, 2, 3,' '{"prompt": "Count: 1, 2, 3,", "stop": "zz"}' >"$TMP/s.txt"
run 0 ruvllm run --batch "$TMP/s.txt" --temp 0 -n 20 --stop " 5"
alone 1 "Count: 1, 2, 3," --temp 0 -n 20 --stop " 5"
alone 2 "Count: 1, 2, 3," --temp 0 -n 20
# --chat: every plain line is a user turn (with --system)
printf '%s\n' 'Name a color.' >"$TMP/c.txt"
run 0 ruvllm run --batch "$TMP/c.txt" --chat --system "Answer in one word." --temp 0 -n 16
alone 1 "Name a color." --chat --system "Answer in one word." --temp 0 -n 16

# a thinking model's template: the answer in text, the reasoning apart (as --json)
run 0 ruvllm run --batch "$TMP/c.txt" --chat --chat-template qwen3 --temp 0 -n 24
alone 1 "Name a color." --chat --chat-template qwen3 --temp 0 -n 24
rs() { sed -n 's/.*"reasoning":\("\([^"\\]\|\\.\)*"\).*/\1/p'; }
"$RUVLLM" run --json --chat --chat-template qwen3 --temp 0 -n 24 "Name a color." >"$TMP/want"
assert "the reasoning of run --json" "[ -n \"\$(rs <'$OUT')\" ] && [ \"\$(rs <'$OUT')\" = \"\$(rs <'$TMP/want')\" ]"

# ---- bad lines: an error line each, the others go on, exit 1 ------------
cat >"$TMP/bad.jsonl" <<'EOF'
The capital of France is
{"prompt": "Hi", "max_tokens": "5"}
{"promt": "Hi"}
{bad json
{"prompt": ""}
{"prompt": "Hi", "messages": []}
{"prompt": "Hi"} trailing
{"id": [1], "prompt": "Hi"}
{"id": "long", "prompt": "a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a"}
{"prompt": "Hi", "temperature": -1}
{"prompt": "Hi", "stop": [1]}
def fibonacci(n):
EOF
run 1 ruvllm run --batch "$TMP/bad.jsonl" --temp 0 -n 12 -c 32 -t 2
assert "an object for every line" "[ \$(wc -l <'$OUT') = 12 ]"
assert "the good lines as in the good run" \
    "[ \"\$(sed -n 1p '$OUT')\" = \"\$(sed -n 1p '$TMP/greedy')\" ] && \
     [ \"\$(sed -n 12p '$OUT' | text_of)\" = \"\$(sed -n 2p '$TMP/greedy' | text_of)\" ]"
out_has '{"id":2,"line":2,"error":"max_tokens: expected an integer from -1 (no limit) to 1e9"}'
out_has '{"id":3,"line":3,"error":"unknown field '"'promt'"' (did you mean '"'prompt'"'?)"}'
out_has '{"id":4,"line":4,"error":"invalid JSON at byte 3"}'
out_has '{"id":5,"line":5,"error":"prompt: empty"}'
out_has '{"id":6,"line":6,"error":"messages: expected a non-empty array of {\"role\", \"content\"}"}'
out_has '{"id":7,"line":7,"error":"invalid JSON at byte 18"}'
out_has '{"id":8,"line":8,"error":"id: expected a string or a number"}'
out_has '{"id":"long","line":9,"error":"the prompt has'
out_has '{"id":10,"line":10,"error":"temperature: expected a number from 0 (greedy) to 100"}'
out_has '{"id":11,"line":11,"error":"stop: expected a string or an array of strings"}'
err_empty

# ---- usage -------------------------------------------------------------------
run 2 ruvllm run --parallel 2 "Hi"
err_has "--parallel needs --batch"
run 2 ruvllm run --unordered "Hi"
run 2 ruvllm run --batch "$P" --json
err_has "--batch cannot be combined with --json"
run 2 ruvllm run --batch "$P" "Hi"
run 2 ruvllm run --batch "$P" --parallel 0
run 1 ruvllm run --batch "$TMP/nonexistent"
err_has "nonexistent"
run 1 ruvllm run --batch "$TMP"
err_has "is a directory"

# ---- streamed: the first result comes while the input is still open -----
mkfifo "$TMP/fifo"
: >"$TMP/stream"
"$RUVLLM" run --batch "$TMP/fifo" --temp 0 -n 4 >"$TMP/stream" 2>"$ERR" &
pid=$!
exec 7>"$TMP/fifo"
echo "The capital of France is" >&7
i=0
while [ $i -lt 300 ] && [ ! -s "$TMP/stream" ]; do sleep 0.1; i=$((i + 1)); done
assert "a result before the input ends" "[ -s '$TMP/stream' ]"
echo "def fibonacci(n):" >&7
exec 7>&-
wait $pid
assert "then the rest, exit 0 at the end of the input" "[ \$? = 0 ] && [ \$(wc -l <'$TMP/stream') = 2 ]"

# ---- Ctrl-C: exit 130, no error lines ------------------------------------
: >"$OUT"
"$RUVLLM" run --batch "$P" --temp 0 --ignore-eos -n 100000 -c 4096 >"$OUT" 2>"$ERR" &
pid=$!
wait_sigint_handler $pid
sleep 1
kill -INT $pid
wait $pid
assert "interrupted: exit 130" "[ \$? = 130 ]"
out_lacks '"error"'

# ---- SIGPIPE: a closed stdout ends the batch without an error message ---
yes "Once upon a time" | head -n 40 >"$TMP/many.txt"
st=$( { timeout 120 "$RUVLLM" run --batch "$TMP/many.txt" --temp 0 -n 50 2>"$ERR"; echo $? >"$TMP/st"; } | head -c 10 >"$OUT"; cat "$TMP/st")
assert "head -c 10 got 10 bytes" "[ \$(wc -c <'$OUT') = 10 ]"
assert "a closed stdout: exit 1 at once, not a timeout ($st)" "[ '$st' = 1 ]"
err_empty

finish
