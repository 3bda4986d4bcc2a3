#!/bin/sh
# `ruvllm chat` driven by a script (standard input not a terminal): one
# message per line (per NUL-terminated record with -0), each reply followed
# by a blank line, --json objects, /commands, --render, bad input, and the
# context limit. The terminal side is tests/test_chat_pty.c.
#
# The --render texts were printed by jinja2 3.1.6 from the default model's
# tokenizer.chat_template (gguf-py 0.19.0 reads it) under transformers'
# settings:
#   env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
#                                       extensions=['jinja2.ext.loopcontrols'])
#   env.from_string(tmpl).render(messages=..., add_generation_prompt=...,
#                                bos_token='<|im_start|>', eos_token='<|im_end|>')
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
nl='
'
out_is() {
    if [ "$(cat "$OUT"; printf x)" = "${1}x" ]; then ok "stdout is the expected text"; else
        not_ok "stdout is not '$1'"; fi
}
chat() { ruvllm chat -m "$MODEL" -t 2 --temp 0 "$@"; }
# chat_from FILE ARGS...: the messages from FILE
chat_from() {
    f=$1
    shift
    chat "$@" <"$f"
}
cr=$(printf '\r')

# ---- --render: the template's text, byte for byte ----
cat >"$TMP/conv.json" <<'EOF'
[{"role": "system", "content": "Be brief."},
 {"role": "user", "content": "Grüße, 世界!"},
 {"role": "assistant", "content": "Hello! \"Quotes\" and\nnewlines."},
 {"role": "user", "content": "What is 2+2?"}]
EOF
run 0 ruvllm chat -m "$MODEL" --render "$TMP/conv.json"
out_is "<|im_start|>system${nl}Be brief.<|im_end|>${nl}<|im_start|>user${nl}Grüße, 世界!<|im_end|>${nl}<|im_start|>assistant${nl}Hello! \"Quotes\" and${nl}newlines.<|im_end|>${nl}<|im_start|>user${nl}What is 2+2?<|im_end|>${nl}<|im_start|>assistant${nl}"
# no system message: the template's default; ending with a reply: no generation prompt
printf '[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello."}]' >"$TMP/c2.json"
run 0 ruvllm chat -m "$MODEL" --render "$TMP/c2.json"
out_is "<|im_start|>system${nl}You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>${nl}<|im_start|>user${nl}Hi<|im_end|>${nl}<|im_start|>assistant${nl}Hello.<|im_end|>${nl}"
# --system goes first when the conversation has none; --chat-template replaces the template
run 0 ruvllm chat -m "$MODEL" --system "Sys." --chat-template zephyr --render "$TMP/c2.json"
out_has "<|system|>"
out_has "Sys."
out_has "<|user|>"
# bad conversations
printf '[{"role":"user","content":"Hi"},' >"$TMP/bad.json"
run 1 ruvllm chat -m "$MODEL" --render "$TMP/bad.json"
err_has "bad.json: invalid JSON at byte"
printf '{"role":"user"}' >"$TMP/obj.json"
run 1 ruvllm chat -m "$MODEL" --render "$TMP/obj.json"
err_has "obj.json: not a JSON array of messages"
printf '[{"role":"user"}]' >"$TMP/nocontent.json"
run 1 ruvllm chat -m "$MODEL" --render "$TMP/nocontent.json"
err_has 'message 0: missing "content"'
run 1 ruvllm chat -m "$MODEL" --render "$TMP/missing.json"
err_has "missing.json"
run 2 ruvllm chat -m "$MODEL" --render "$TMP/c2.json" --session "$TMP/s"
run 2 ruvllm chat -m "$MODEL" extra-argument
run 2 ruvllm chat -m "$MODEL" --seed -1
err_has "--seed"

# ---- messages from a script: replies separated by blank lines ----
run_in "Say hello.${nl}${nl}What is 2+2?${nl}" 0 chat -n 40
assert "two replies, each followed by a blank line" \
    "[ \"\$(grep -c '^\$' \"\$OUT\")\" = 2 ] && [ \"\$(tail -c 2 \"\$OUT\" | od -An -c | tr -d ' ')\" = '\\n\\n' ]"
out_has "Hello"
# the answer, in digits or words (sampled: which one depends on float rounding)
assert "the second reply answers 2+2" "grep -q -i -e '4' -e 'four' \"\$OUT\""
out_lacks "im_end"
out_lacks ">>>"
# nothing on stderr but, where a sampled reply runs to -n, the limit's marker
assert "stderr: nothing but the -n marker" "! grep -v -x -F '[stopped at -n 40 tokens]' \"\$ERR\" | grep -q ."
assert "no escape sequences when not on a terminal" "! grep -q \"\$(printf '\\033')\" \"\$OUT\" \"\$ERR\""
cp "$OUT" "$TMP/two-replies"

# the same with CR LF lines, and with NUL-separated records (-0)
run_in "Say hello.${cr}${nl}What is 2+2?${cr}${nl}" 0 chat -n 40
assert "CR LF lines give the same replies" "cmp -s \"\$OUT\" \"\$TMP/two-replies\""
printf 'Say hello.\0What is 2+2?\0' >"$TMP/records"
run 0 chat_from "$TMP/records" -n 40 -0
assert "-0 records give the same replies" "cmp -s \"\$OUT\" \"\$TMP/two-replies\""

# --json: one object per turn, nothing streamed
run_in "Say hello.${nl}What is 2+2?${nl}" 0 chat -n 40 --json
assert "two JSON lines" "[ \"\$(wc -l <\"\$OUT\")\" = 2 ] && [ \"\$(grep -c '^{\"user\":' \"\$OUT\")\" = 2 ]"
out_has '{"user":"Say hello.","reply":"Hello'
out_has '"finish_reason":"stop"'
out_has ',2],"prompt_tokens":'
out_has '"cached_tokens":0,'
out_has '"context_size":4096'
# the second turn reuses the first one's cache
assert "the second turn reuses the cache" "sed -n 2p \"\$OUT\" | grep -q '\"cached_tokens\":[1-9]'"

# ---- /commands in a script: output on stderr, replies on stdout ----
run_in "/help${nl}/set temp 0.5${nl}/set${nl}/system Answer in French.${nl}/system${nl}Hi${nl}/stats${nl}/undo${nl}/stats${nl}/reset${nl}/stats${nl}//etc/passwd is a file?${nl}/exit${nl}Never sent${nl}" 0 chat -n 8 --json
err_has "/retry"
err_has "(temp = 0.5)"
err_has "  temp               0.5"
err_has "system: Answer in French."
err_has "messages   3 (1 exchange)"
err_has "(removed the last exchange: 2 messages)"
err_has "messages   1 (0 exchanges)"
err_has "(a new conversation; the system message stays)"
assert "two turns (Hi and the // message, none after /exit)" "[ \"\$(wc -l <\"\$OUT\")\" = 2 ]"
out_has '{"user":"Hi",'
out_has '{"user":"/etc/passwd is a file?",'
out_lacks "Never sent"

# a repeated system prompt after /reset comes back from the pages the
# reset dropped (prefix reuse: whole pages of 32 tokens named by chained
# hashes), and /stats counts the reused prompt tokens
sys="You are a careful assistant. $(printf 'Answer every question briefly, precisely and politely. %.0s' 1 2 3 4 5 6)"
run_in "/system $sys${nl}Hi${nl}/reset${nl}Hi${nl}/stats${nl}" 0 chat -n 4 --temp 0 --json
assert "the first turn reuses nothing" "sed -n 1p \"\$OUT\" | grep -q '\"cached_tokens\":0,'"
assert "after /reset the system prompt's pages are reused" \
    "[ \"\$(sed -n '2s/.*\"cached_tokens\":\\([0-9]*\\).*/\\1/p' \"\$OUT\")\" -ge 64 ]"
err_has "prompt tokens reused: "

# /retry regenerates the last reply: greedy gives the same text again
run_in "Say hello.${nl}/retry${nl}/stats${nl}" 0 chat -n 16
assert "/retry: the same greedy reply twice" \
    "[ \"\$(sed -n 1p \"\$OUT\")\" = \"\$(sed -n 3p \"\$OUT\")\" ] && [ -n \"\$(sed -n 1p \"\$OUT\")\" ]"
err_has "messages   2 (1 exchange)"

# errors in a script: reported, the chat goes on, exit status 1
run_in "/foo${nl}/stast${nl}/set tmp 1${nl}/set temp 500${nl}/set top-k x${nl}/set temp${nl}/undo${nl}/retry${nl}/save${nl}/load $TMP/none${nl}Hi${nl}" 1 chat -n 8
err_has "unknown command '/foo' (/help lists the commands"
err_has "unknown command '/stast'; did you mean '/stats'?"
err_has "/set: unknown setting 'tmp'; did you mean 'temp'?"
err_has "/set: temp: 500 is out of range [0, 100]"
err_has "/set: top-k: 'x' is not an integer"
err_has "/set: temp needs a value"
err_has "/undo: nothing to undo"
err_has "/retry: no reply to regenerate"
err_has "/save needs a file name"
err_has "/load: "
err_has "none"
assert "the message after the errors is answered" "[ \"\$(grep -c '^\$' \"\$OUT\")\" = 1 ]"

# an empty input is an empty conversation
run_in "" 0 chat
out_empty

# ---- the context: a warning at 90%, a clear stop when full, then the
# oldest messages make room ----
run_in "Write a long story about a cat.${nl}And then?${nl}" 0 chat -c 80
err_has "the context is full (80 tokens): the reply stops here"
err_has "context: dropped the 2 oldest messages to make room"
run_in "Write a long story about a cat.${nl}" 0 chat -c 80 -n 34
err_has "the context is 9"
err_has "% full ("
# a message that cannot fit at all: refused, the conversation kept
run_in "Hi${nl}$(printf 'word %.0s' $(seq 1 100))${nl}/stats${nl}Hello${nl}" 1 chat -c 80 -n 4
err_has "more than the context holds (80; see -c)"
err_has "messages   2 (1 exchange)"
assert "the messages before and after are answered" "[ \"\$(grep -c '^\$' \"\$OUT\")\" = 2 ]"

# ---- Ctrl-C (SIGINT) during a reply: the partial reply, exit 130 ----
printf 'Write a very long story about a dragon.\n' >"$TMP/int.in"
"$RUVLLM" chat -m "$MODEL" -t 2 --temp 0 -n 1000 <"$TMP/int.in" >"$TMP/int.out" 2>"$TMP/int.err" &
chat_pid=$!
i=0
while [ ! -s "$TMP/int.out" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
kill -INT "$chat_pid"
wait "$chat_pid"
echo $? >"$TMP/int.rc"
assert "SIGINT during a reply: exit status 130" "[ \"\$(cat \"\$TMP/int.rc\")\" = 130 ]"
assert "the partial reply was printed" "[ -s \"\$TMP/int.out\" ]"
assert "stderr says the reply was interrupted" "grep -q 'interrupted' \"\$TMP/int.err\""
finish
