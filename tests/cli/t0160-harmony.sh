#!/bin/sh
# gpt-oss's harmony format: its chat template (tests/data/templates/
# gpt-oss.jinja, the model's own) and the built-in gpt-oss format render
# the system message with the reasoning effort and end the prompt with
# "<|start|>assistant"; the reply's analysis channel is its reasoning, left
# out of `run --chat`'s output unless --show-reasoning and apart in --json;
# `chat` keeps only the answer in the conversation (the template refuses
# channel tags in a message's content). The default model does not speak
# harmony: templates that open a channel at the end of the prompt make its
# greedy reply, cut by -n, all analysis or all final.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
GPTOSS=tests/data/templates/gpt-oss.jinja
TODAY=$(date +%Y-%m-%d)

# the rendered prompt: the model's template and the built-in agree
for t in "$GPTOSS" gpt-oss; do
    run 0 ruvllm run -m "$MODEL" --chat --chat-template "$t" --system "Be brief." --echo -n 0 "Hi"
    out_has "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI."
    out_has "Current date: "
    out_has "Reasoning: medium"
    out_has "<|end|><|start|>developer<|message|># Instructions

Be brief.

<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant"
done
run 0 ruvllm run -m "$MODEL" --chat --chat-template "$GPTOSS" --echo -n 0 "Hi"
a=$(cat "$OUT")
run 0 ruvllm run -m "$MODEL" --chat --chat-template gpt-oss --echo -n 0 "Hi"
if [ "$(cat "$OUT")" = "$a" ]; then ok "built-in gpt-oss = its template"; else not_ok "built-in differs"; fi
case $a in *"Current date: $TODAY"*) ok "today's date" ;; *) not_ok "not today's date" ;; esac

# a prompt that opens the analysis channel: the reply is reasoning
cat >"$TMP/analysis.jinja" <<'T'
{% for m in messages %}<|start|>{{ m.role }}<|message|>{% if m.role == 'assistant' and m.content %}{{ raise_exception('history keeps ' + m.content) }}{% endif %}{{ m.content }}<|end|>{% endfor %}<|start|>assistant<|channel|>analysis<|message|>
T
R="-m $MODEL --chat --chat-template $TMP/analysis.jinja --temp 0 -n 12"
run 0 ruvllm run $R --show-reasoning "What is 2+2?"
shown=$(cat "$OUT")
if [ -n "$shown" ]; then ok "--show-reasoning prints the analysis"; else not_ok "nothing shown"; fi
run 0 ruvllm run $R "What is 2+2?"
out_empty
run 0 ruvllm run $R --json "What is 2+2?"
out_has '"text":"",'
out_has '"reasoning":"'
out_has '"finish_reason":"length"'

# ... the final channel: the reply is the answer, printed whole
sed 's/<|channel|>analysis<|message|>$/<|channel|>final<|message|>/' "$TMP/analysis.jinja" >"$TMP/final.jinja"
R="-m $MODEL --chat --chat-template $TMP/final.jinja --temp 0 -n 12"
run 0 ruvllm run $R "What is 2+2?"
if [ -s "$OUT" ]; then ok "the final channel is printed"; else not_ok "nothing printed"; fi
run 0 ruvllm run $R --json "What is 2+2?"
out_has '"reasoning":"",'
out_lacks '"text":"",'

# chat: the conversation keeps the answer only (here: nothing, all was
# analysis), so the second turn's prompt renders without raising
run_in "What is 2+2?
And 3+3?
" 0 ruvllm chat -m "$MODEL" -t 2 --temp 0 -n 8 --chat-template "$TMP/analysis.jinja"
if grep -q "history keeps" "$ERR"; then not_ok "the reasoning joined the conversation"; else
    ok "the reasoning stays out of the conversation"; fi
# and with the real template, two turns render (no fallback warning)
run_in "Hi
Bye
" 0 ruvllm chat -m "$MODEL" -t 2 --temp 0 -n 8 --chat-template "$GPTOSS"
if grep -q "built-in" "$ERR"; then not_ok "the template fell back"; else ok "gpt-oss.jinja renders every turn"; fi
# --reasoning-effort reaches the template as reasoning_effort (run and chat);
# without it the template says its own default
printf '[{"role":"user","content":"hi"}]' >"$TMP/conv.json"
run 0 ruvllm chat -m "$MODEL" --chat-template "$GPTOSS" --reasoning-effort high --render "$TMP/conv.json"
out_has 'Reasoning: high'
run 0 ruvllm chat -m "$MODEL" --chat-template "$GPTOSS" --render "$TMP/conv.json"
out_has 'Reasoning: medium'
run 2 ruvllm run -m "$MODEL" --reasoning-effort low "hi"
run 2 ruvllm run -m "$MODEL" --chat --reasoning-effort extreme "hi"

finish
