#!/bin/sh
# Thinking models: --reasoning on|off reaches the chat template as
# enable_thinking (Qwen3's template, tests/data/templates/qwen3.jinja, and
# the built-in qwen3 format close an empty think block when it is off), and
# `run --chat` keeps the reply's <think> reasoning out of standard output
# unless --show-reasoning; --json has it apart. The default model does not
# think: a template that opens <think> at the end of the prompt (as
# DeepSeek-R1's does) makes its greedy reply, cut by -n, all reasoning.
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
QWEN3=tests/data/templates/qwen3.jinja
GEN="<|im_start|>user${nl}Hi<|im_end|>${nl}<|im_start|>assistant${nl}"

# the rendered prompt: the template's default (thinking on), on, off
for t in "$QWEN3" qwen3; do
    run 0 ruvllm run -m "$MODEL" --chat --chat-template "$t" --echo -n 0 "Hi"
    out_is "$GEN"
    run 0 ruvllm run -m "$MODEL" --chat --chat-template "$t" --reasoning on --echo -n 0 "Hi"
    out_is "$GEN"
    run 0 ruvllm run -m "$MODEL" --chat --chat-template "$t" --reasoning off --echo -n 0 "Hi"
    out_is "$GEN<think>${nl}${nl}</think>${nl}${nl}"
done
# the same through chat --render, and the token ids change with it
printf '[{"role": "user", "content": "Hi"}]' >"$TMP/conv.json"
run 0 ruvllm chat -m "$MODEL" --chat-template "$QWEN3" --reasoning off --render "$TMP/conv.json"
out_is "$GEN<think>${nl}${nl}</think>${nl}${nl}"
run 0 ruvllm run -m "$MODEL" --chat --chat-template "$QWEN3" --tokenize "Hi"
on=$(cat "$OUT")
run 0 ruvllm run -m "$MODEL" --chat --chat-template "$QWEN3" --reasoning off --tokenize "Hi"
if [ "$(cat "$OUT")" != "$on" ]; then ok "--reasoning off changes the prompt's tokens"; else
    not_ok "--reasoning off leaves the tokens as they were"; fi

# the model's own template knows nothing of thinking: nothing changes
run 0 ruvllm run -m "$MODEL" --chat --echo -n 0 "Hi"
plain=$(cat "$OUT")
run 0 ruvllm run -m "$MODEL" --chat --reasoning off --echo -n 0 "Hi"
if [ "$(cat "$OUT")" = "$plain" ]; then ok "a template without enable_thinking renders the same"; else
    not_ok "--reasoning off changed a template that does not think"; fi

# usage
run 2 ruvllm run -m "$MODEL" --reasoning off "Hi"
err_has "--reasoning needs --chat"
run 2 ruvllm run -m "$MODEL" --show-reasoning "Hi"
err_has "--show-reasoning needs --chat"
run 2 ruvllm run -m "$MODEL" --chat --reasoning maybe "Hi"

# a reply inside <think> (the prompt opened it), cut by -n: all reasoning
cat >"$TMP/think.jinja" <<'T'
{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}<|im_start|>assistant
<think>
T
R="-m $MODEL --chat --chat-template $TMP/think.jinja --temp 0 -n 12"
run 0 ruvllm run $R --show-reasoning "What is 2+2?"
shown=$(cat "$OUT")
if [ -n "$shown" ]; then ok "--show-reasoning prints the reasoning"; else not_ok "nothing shown"; fi
run 0 ruvllm run $R "What is 2+2?"
out_empty
run 0 ruvllm run $R --json "What is 2+2?"
out_has '"text":"",'
out_has '"reasoning":"'
out_has '"finish_reason":"length"'

# a reply after a closed think block is answer: printed whole
sed 's|<think>$|<think>\nEasy.\n</think>\n|' "$TMP/think.jinja" >"$TMP/closed.jinja"
R="-m $MODEL --chat --chat-template $TMP/closed.jinja --temp 0 -n 12"
run 0 ruvllm run $R --show-reasoning "What is 2+2?"
shown=$(cat "$OUT")
run 0 ruvllm run $R "What is 2+2?"
if [ -n "$shown" ] && [ "$(cat "$OUT")" = "$shown" ]; then ok "the answer is printed whole"; else
    not_ok "the answer was cut: '$(cat "$OUT")' vs '$shown'"; fi
run 0 ruvllm run $R --json "What is 2+2?"
out_has '"reasoning":"","'
finish
