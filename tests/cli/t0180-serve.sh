#!/bin/sh
# `ruvllm serve` on loopback, with curl: the OpenAI endpoints (chat and
# completions, streamed and whole), greedy answers equal to `ruvllm run`'s,
# stop strings, max_tokens, error objects for bad requests, 413, 401, 429,
# a client that disconnects mid-stream freeing its sequence, and SIGTERM
# with a request in flight. Each server listens on a port of its own
# choosing (--port 0) that its log names.
. tests/cli/lib.sh
. tests/cli/serve_lib.sh

start "$TMP/s1.log" --parallel 2 -c 512
assert "the server comes up and names its URL" "[ -n '$URL' ]"
[ -n "$URL" ] || { cat "$TMP/s1.log"; finish; }
assert "it binds 127.0.0.1 by default" "echo '$URL' | grep -q '^http://127.0.0.1:'"

req GET /health
code_is 200
json_is "j['status']" ok
req GET /v1/models
code_is 200
json_is "j['object']" list
json_is "j['data'][0]['id']" SmolLM2-135M-Instruct.Q4_1
json_is "j['data'][0]['object']" model

# --- chat, whole: greedy, the same text as run --chat ---
Q='What is the capital of France?'
CHAT="{\"model\": \"gpt-4o\", \"messages\": [{\"role\": \"user\", \"content\": \"$Q\"}], \"temperature\": 0, \"max_tokens\": 24}"
req POST /v1/chat/completions "$CHAT"
code_is 200
cp "$OUT" "$TMP/chat.json"
json_is "j['object']" chat.completion
json_is "j['id'].startswith('chatcmpl-')" True
json_is "type(j['created']) is int and j['created'] > 1700000000" True
json_is "j['model']" SmolLM2-135M-Instruct.Q4_1
json_is "j['choices'][0]['message']['role']" assistant
json_is "j['choices'][0]['index']" 0
json_is "j['usage']['total_tokens'] == j['usage']['prompt_tokens'] + j['usage']['completion_tokens']" True
json_is "0 < j['usage']['completion_tokens'] <= 24" True
json_is "j['choices'][0]['finish_reason'] in ('stop', 'length')" True
"$RUVLLM" run -m "$MODEL" -t 2 --chat --temp 0 -n 24 "$Q" >"$TMP/run-chat.txt" 2>/dev/null
want=$(python3 -c "import sys; print(repr(open(sys.argv[1], encoding='utf-8').read()))" "$TMP/run-chat.txt")
json_is "repr(j['choices'][0]['message']['content'])" "$want"

# --- chat, streamed: role first, deltas that add up to the same text, [DONE] ---
req POST /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"$Q\"}], \"temperature\": 0, \"max_tokens\": 24, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" -N
code_is 200
sse >"$TMP/sse.json" && ok "the stream is data: events ending in data: [DONE]" || not_ok "the stream is not SSE ending in [DONE]: $(head -c 300 "$OUT")"
cp "$TMP/sse.json" "$OUT"
json_is "j['first']['choices'][0]['delta']['role']" assistant
json_is "j['first']['object']" chat.completion.chunk
json_is "repr(j['text'])" "$want"
json_is "len(j['finish'])" 1
json_is "j['last']['choices'] == [] and j['last']['usage']['completion_tokens'] > 0" True
cp "$TMP/chat.json" "$OUT"
fin=$(js "j['choices'][0]['finish_reason']")
cp "$TMP/sse.json" "$OUT"
json_is "j['finish'][0]" "$fin"

# --- completions: the same text as run, whole and streamed ---
P='The capital of France is'
req POST /v1/completions "{\"prompt\": \"$P\", \"temperature\": 0, \"max_tokens\": 12}"
code_is 200
json_is "j['object']" text_completion
json_is "j['id'].startswith('cmpl-')" True
"$RUVLLM" run -m "$MODEL" -t 2 --temp 0 -n 12 "$P" >"$TMP/run.txt" 2>/dev/null
want=$(python3 -c "import sys; print(repr(open(sys.argv[1], encoding='utf-8').read()))" "$TMP/run.txt")
json_is "repr(j['choices'][0]['text'])" "$want"
# max_tokens ends it: finish_reason "length", exactly that many tokens
json_is "j['choices'][0]['finish_reason']" length
json_is "j['usage']['completion_tokens']" 12
text=$(js "j['choices'][0]['text']")
req POST /completions "{\"prompt\": [\"$P\"], \"temperature\": 0, \"max_tokens\": 12, \"stream\": true}" -N
code_is 200
sse >"$TMP/sse.json" && ok "the completion stream ends in [DONE]" || not_ok "the completion stream is not SSE"
cp "$TMP/sse.json" "$OUT"
json_is "repr(j['text'])" "$want"
json_is "j['finish']" "['length']"

# --- stop strings: the text up to the stop, finish_reason "stop" ---
stop=$(python3 -c "import sys; t=sys.argv[1]; w=t.split(); print(w[len(w)//2] if len(w) > 2 else t[3:6])" "$text")
req POST /v1/completions "{\"prompt\": \"$P\", \"temperature\": 0, \"max_tokens\": 12, \"stop\": [\"zzz\", \"$stop\"]}"
code_is 200
wantstop=$(python3 -c "import sys; t=sys.argv[1]; print(repr(t[:t.index(sys.argv[2])]))" "$text" "$stop")
json_is "repr(j['choices'][0]['text'])" "$wantstop"
json_is "j['choices'][0]['finish_reason']" stop

# --- bad requests: 400 with an error object naming the field ---
req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}'
code_is 400
error_is invalid_request_error None
req POST /v1/chat/completions '{"messages": "Hi"}'
code_is 400
error_is invalid_request_error messages
req POST /v1/chat/completions '{"messages": []}'
code_is 400
error_is invalid_request_error messages
req POST /v1/chat/completions '{"messages": [{"role": "user", "content": 7}]}'
code_is 400
error_is invalid_request_error "messages[0].content"
req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "temperature": "hot"}'
code_is 400
error_is invalid_request_error temperature
req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 0}'
code_is 400
error_is invalid_request_error max_tokens
req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "stream": "yes"}'
code_is 400
error_is invalid_request_error stream
req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "n": 2}'
code_is 400
error_is invalid_request_error n
req POST /v1/completions '{"max_tokens": 4}'
code_is 400
error_is invalid_request_error prompt
req POST /v1/completions '{"prompt": [999999999]}'
code_is 400
error_is invalid_request_error prompt
req POST /v1/completions '[1, 2]'
code_is 400
req GET /v1/chat/completions
code_is 405
error_is invalid_request_error None
req GET /v1/nothing
code_is 404
# a body over --max-body (1 MiB): 413, announced or chunked
python3 -c "print('{\"prompt\": \"' + 'a' * (2 << 20) + '\"}')" >"$TMP/big.json"
req POST /v1/completions "@$TMP/big.json"
code_is 413
error_is invalid_request_error None
req POST /v1/completions "@$TMP/big.json" -H 'Transfer-Encoding: chunked'
code_is 413
# headers past the connection's memory (64 KiB): 431 from libmicrohttpd
CODE=$(curl -s -o "$OUT" -w '%{http_code}' -H "X-Big: $(python3 -c 'print("a" * 100000)')" "$URL/health")
last="curl -X GET /health with a header of 100 kB"
code_is 431
# malformed HTTP: answered by libmicrohttpd or closed, and the server lives on
python3 - "$URL" <<'PY'
import socket, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
for junk in (b"\x00\xff garbage\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
             b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
             b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\n\r\n"):
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    try:
        s.sendall(junk)
        s.recv(4096)
    except OSError:
        pass
    s.close()
PY
req GET /health
code_is 200
assert "the server is still running after malformed requests" "kill -0 $PID"

# --- a client that disconnects mid-stream frees its sequence ---
curl -s -N --max-time 3 -o "$TMP/cut.txt" -X POST -H 'Content-Type: application/json' \
    --data-binary '{"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true, "stream": true}' \
    "$URL/v1/completions" &
CURL=$!
i=0
while [ $i -lt 100 ] && ! grep -q '^data: {' "$TMP/cut.txt" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
req GET /metrics
assert "metrics show the stream's sequence running" "grep -q '^ruvllm_running_sequences 1$' '$OUT'"
assert "and its KV cache in use" "grep -q '^ruvllm_kv_cache_tokens [1-9]' '$OUT'"
assert "and its KV bytes" "grep -q '^ruvllm_kv_cache_bytes [1-9]' '$OUT'"
# the client leaves now (512 positions take under 3 s to generate)
kill $CURL 2>/dev/null
wait $CURL
assert "the stream had begun when the client left" "grep -q '^data: {' '$TMP/cut.txt'"
i=0
while [ $i -lt 50 ]; do
    req GET /metrics
    grep -q '^ruvllm_running_sequences 0$' "$OUT" && break
    sleep 0.1
    i=$((i + 1))
done
assert "metrics show no running sequence once the client left" "grep -q '^ruvllm_running_sequences 0$' '$OUT'"
assert "and no KV cache in use" "grep -q '^ruvllm_kv_cache_tokens 0$' '$OUT' && grep -q '^ruvllm_kv_cache_bytes 0$' '$OUT'"
assert "metrics count the cancelled request" "grep -q '^ruvllm_sched_requests_total{state=\"cancelled\"} [1-9]' '$OUT'"
assert "the log says the request was cancelled" "grep -q 'POST /v1/completions 200 .*cancelled' '$TMP/s1.log'"
assert "metrics count requests by endpoint and status" \
    "grep -q '^ruvllm_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} [1-9]' '$OUT'"
for k in ruvllm_prompt_tokens_total ruvllm_generated_tokens_total ruvllm_queue_depth \
    ruvllm_generated_tokens_per_second ruvllm_kv_cache_tokens ruvllm_kv_cache_bytes \
    ruvllm_decode_steps_total; do
    assert "metrics have $k" "grep -q '^$k [0-9]' '$OUT'"
done
assert "metrics: a KV budget, no page held once the requests ended" \
    "grep -q '^ruvllm_kv_cache_pages{state=\"budget\"} [1-9]' '$OUT' && grep -q '^ruvllm_kv_cache_pages{state=\"used\"} 0$' '$OUT'"
# --- a prompt of several pages sent twice: the second maps the first's pages (a
# prefix cache in the free pages) and answers the same ---
LONG="The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined several existing technologies into a system for mass producing books. His movable type, oil-based inks and a wooden press adapted from wine presses allowed pages to be printed quickly. Within decades printing shops had spread across Europe"
req POST /v1/completions "{\"prompt\": \"$LONG\", \"temperature\": 0, \"max_tokens\": 8}"
cp "$OUT" "$TMP/long1.json"
req POST /v1/completions "{\"prompt\": \"$LONG\", \"temperature\": 0, \"max_tokens\": 8}"
assert "the same prompt again gives the same text" \
    "[ \"\$(js 'j[\"choices\"][0][\"text\"]')\" = \"\$(OUT=$TMP/long1.json js 'j[\"choices\"][0][\"text\"]')\" ] && [ -n \"\$(js 'j[\"choices\"][0][\"text\"]')\" ]"
assert "and reports the prompt's whole length (58 tokens)" "[ \"\$(js 'j[\"usage\"][\"prompt_tokens\"]')\" = 58 ]"
req GET /metrics
assert "metrics: its first pages were reused, not computed" \
    "grep -q '^ruvllm_prompt_tokens_reused_total [1-9]' '$OUT'"
assert "one log line per request: method, path, status, tokens, ms" \
    "grep -q '^ruvllm serve: POST /v1/completions 200 [0-9]*+12 tokens [0-9]* ms' '$TMP/s1.log'"

# --- SIGTERM with a request in flight: answered, exit 0 ---
curl -s -N -o "$TMP/term.txt" -X POST -H 'Content-Type: application/json' \
    --data-binary '{"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true, "stream": true}' \
    "$URL/v1/completions" &
CURL=$!
i=0
while [ $i -lt 100 ] && ! grep -q '^data: {' "$TMP/term.txt" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
kill -TERM $PID
wait $PID
st=$?
assert "SIGTERM with a stream in flight: exit 0 (got $st)" "[ $st = 0 ]"
wait $CURL
assert "the stream in flight ends with an error event" "grep -q '^data: {\"error\"' '$TMP/term.txt'"
assert "the log says it stopped" "grep -q 'stopping' '$TMP/s1.log'"

# --- --api-key: 401 without the key or with a wrong one ---
start "$TMP/s2.log" --parallel 1 -c 256 --api-key s3cret --timeout 2
# --timeout: a client that stops sending in the middle of its headers is
# disconnected (a recv that returns nothing: the server closed)
python3 - "$URL" >"$TMP/idle.txt" <<'PY'
import socket, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
s = socket.create_connection((u.hostname, u.port), timeout=20)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
t0 = time.monotonic()
try:
    got = s.recv(4096)
except OSError:
    got = b""
print("closed" if got == b"" else "answered", round(time.monotonic() - t0))
PY
assert "an idle half-sent request is closed after --timeout 2 ($(cat "$TMP/idle.txt"))" \
    "grep -q -E '^closed [2-5]$' '$TMP/idle.txt'"
req GET /v1/models
code_is 401
error_is authentication_error None
req GET /v1/models -H 'Authorization: Bearer wrong'
code_is 401
req GET /v1/models -H 'Authorization: Bearer s3cret'
code_is 200
req POST /v1/completions '{"prompt": "Hi", "max_tokens": 2}' -H 'Authorization: Bearer s3cret'
code_is 200
req GET /health
code_is 200
kill -TERM $PID
wait $PID
RUVLLM_API_KEY=k2 start "$TMP/s3.log" --parallel 1 -c 256
req GET /metrics
code_is 401
req GET /metrics -H 'Authorization: Bearer k2'
code_is 200
kill -TERM $PID
wait $PID

# --- a full queue answers 429: one running, one waiting, the third refused ---
start "$TMP/s4.log" --parallel 1 --queue 1 -c 512
for k in 1 2 3; do
    curl -s -o "$TMP/q$k.json" -w '%{http_code}\n' -X POST -H 'Content-Type: application/json' \
        --data-binary '{"prompt": "Once upon a time", "max_tokens": 300, "ignore_eos": true}' \
        "$URL/v1/completions" >"$TMP/q$k.code" &
    eval "Q$k=\$!"
    sleep 0.3
done
wait $Q1 $Q2 $Q3
codes=$(cat "$TMP/q1.code" "$TMP/q2.code" "$TMP/q3.code" | sort | tr '\n' ' ')
assert "--parallel 1 --queue 1, three requests: 200 200 429 (got $codes)" "[ '$codes' = '200 200 429 ' ]"
cp "$TMP/q3.json" "$OUT"
json_is "j['error']['code']" rate_limit_exceeded
kill -TERM $PID
wait $PID

# --- a thinking model's reasoning apart, in reasoning_content (llama-server's
# and DeepSeek's field): DeepSeek-R1's template opens <think> in the prompt,
# so the whole reply is reasoning; run --chat prints none of it, and
# --show-reasoning all of it ---
start "$TMP/s5.log" --parallel 1 -c 512 --chat-template deepseek-r1
Q2='What is 2 + 2?'
req POST /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"$Q2\"}], \"temperature\": 0, \"max_tokens\": 16}"
code_is 200
"$RUVLLM" run -m "$MODEL" -t 2 --chat --chat-template deepseek-r1 --temp 0 -n 16 --show-reasoning "$Q2" >"$TMP/think.txt" 2>/dev/null
want=$(python3 -c "import sys; print(repr(open(sys.argv[1], encoding='utf-8').read()))" "$TMP/think.txt")
json_is "repr(j['choices'][0]['message']['reasoning_content'])" "$want"
json_is "j['choices'][0]['message']['content']" ""
assert "the reasoning is not empty" "[ -s '$TMP/think.txt' ]"
req POST /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"$Q2\"}], \"temperature\": 0, \"max_tokens\": 16, \"stream\": true}" -N
python3 - "$OUT" >"$TMP/think-sse.txt" <<'PY'
import json, sys
ev = [l[6:] for l in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if l]
print(repr("".join(json.loads(e)["choices"][0]["delta"].get("reasoning_content") or "" for e in ev[:-1])))
PY
printf '%s\n' "$want" >"$TMP/think-want.txt"
assert "streamed: the reasoning in delta.reasoning_content" "cmp -s '$TMP/think-sse.txt' '$TMP/think-want.txt'"
kill -TERM $PID
wait $PID

finish
