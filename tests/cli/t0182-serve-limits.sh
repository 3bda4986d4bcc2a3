#!/bin/sh
# `ruvllm serve`'s time limits and step size: --max-request-time ends a
# generation that would run for 100000 tokens with finish_reason "length"
# and the text it had (a prefix of the greedy answer), whole or streamed;
# llama-server's per-request t_max_predict_ms ends at the first newline
# after the limit; --batch-size changes how prompts are fed, never the
# answer; --kv-budget bounds the KV cache over all sequences. No durations are asserted: curl's --max-time only keeps a server
# without the limit from hanging the test.
. tests/cli/lib.sh
. tests/cli/serve_lib.sh

run 2 "$RUVLLM" serve --max-request-time -1
err_has "max-request-time"
run 2 "$RUVLLM" serve --batch-size 0
err_has "batch-size"

start "$TMP/s1.log" --parallel 2 -c 4096 --max-request-time 1
assert "the server comes up with --max-request-time 1" "[ -n '$URL' ]"
[ -n "$URL" ] || { cat "$TMP/s1.log"; finish; }

# --- whole: ends "length" with fewer tokens, its text the greedy answer's start ---
LONG='{"prompt": "Once upon a time", "max_tokens": 100000, "ignore_eos": true, "temperature": 0}'
req POST /v1/completions "$LONG" --max-time 120
code_is 200
json_is "j['choices'][0]['finish_reason']" length
json_is "0 <= j['usage']['completion_tokens'] < 100000" True
N=$(js "j['usage']['completion_tokens']")
js "j['choices'][0]['text']" > "$TMP/cut.txt"
"$RUVLLM" run -m "$MODEL" -t 2 --temp 0 --ignore-eos -n "${N:-0}" "Once upon a time" > "$TMP/run.txt" 2>/dev/null
echo >> "$TMP/run.txt"
assert "the text so far is the start of run's greedy answer of as many tokens ($N)" \
    "python3 -c 'import sys; a=open(sys.argv[1]).read(); b=open(sys.argv[2]).read(); sys.exit(not b.startswith(a.rstrip(\"\\n\")))' '$TMP/cut.txt' '$TMP/run.txt'"

# --- streamed chat: the last chunk says "length", usage and [DONE] follow ---
STREAM='{"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 100000, "ignore_eos": true, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}'
req POST /v1/chat/completions "$STREAM" -N --max-time 120
code_is 200
sse > "$TMP/sse.json"
cp "$TMP/sse.json" "$OUT"
json_is "j['finish']" "['length']"
json_is "j['last']['usage']['completion_tokens'] < 100000" True

# --- three at once on two sequences: the one that waits is ended too ---
for k in 1 2 3; do
    curl -s -o "$TMP/c$k.json" --max-time 120 -H 'Content-Type: application/json' \
        --data-binary "$LONG" "$URL/v1/completions" &
    eval "C$k=\$!"
done
wait $C1 $C2 $C3
for k in 1 2 3; do
    OUT=$TMP/c$k.json
    json_is "(j['choices'][0]['finish_reason'], j['usage']['completion_tokens'] < 100000)" "('length', True)"
done
OUT=$TMP/stdout

# --- t_max_predict_ms (llama-server's): the generation ends at the next newline ---
kill $PID
wait $PID 2>/dev/null
start "$TMP/s2.log" --parallel 1 -c 512
LIST='{"prompt": "Shopping list:\n1. Milk\n2.", "max_tokens": 100000, "ignore_eos": true, "temperature": 0, "t_max_predict_ms": 1}'
req POST /v1/completions "$LIST" --max-time 120
code_is 200
json_is "j['choices'][0]['finish_reason']" length
json_is "j['choices'][0]['text'] == ' Water\\n'" True
req POST /v1/completions '{"prompt": "Hi", "t_max_predict_ms": "soon"}'
code_is 400
error_is invalid_request_error t_max_predict_ms

# --- --batch-size: one token a step or the whole prompt, the same answer ---
kill $PID
wait $PID 2>/dev/null
P='{"prompt": "The history of the Roman Empire, from its founding to its fall, is a long story of conquest, law, roads and emperors; it begins", "max_tokens": 16, "temperature": 0}'
for size in 1 512; do   # (not $b: req uses it)
    start "$TMP/b$size.log" --parallel 2 -c 512 --batch-size $size
    req POST /v1/completions "$P"
    code_is 200
    js "j['choices'][0]['text']" > "$TMP/b$size.txt"
    kill $PID
    wait $PID 2>/dev/null
done
assert "--batch-size 1 and 512 give the same greedy text" \
    "[ -s '$TMP/b1.txt' ] && cmp -s '$TMP/b1.txt' '$TMP/b512.txt'"

# --- --kv-budget: positions over all sequences; a request that can never fit
# is a 400 (context_length_exceeded), one that fits is answered ---
run 2 "$RUVLLM" serve --kv-budget -5
err_has "kv-budget"
start "$TMP/kv.log" --parallel 2 -c 512 --kv-budget 64
req POST /v1/completions '{"prompt": "Hello there", "max_tokens": 100, "temperature": 0}'
code_is 400
json_is "j['error']['code']" context_length_exceeded
json_is "'the budget holds 2' in j['error']['message']" True
req POST /v1/completions '{"prompt": "Hello there", "max_tokens": 20, "temperature": 0}'
code_is 200
json_is "j['usage']['completion_tokens']" 20
req GET /metrics
assert "metrics: a budget of 2 pages" "grep -q '^ruvllm_kv_cache_pages{state=\"budget\"} 2$' '$OUT'"
kill $PID
wait $PID 2>/dev/null

finish
