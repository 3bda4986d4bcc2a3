#!/bin/sh
# `ruvllm run --chat`: the prompt becomes one user turn of the model's chat
# template (rendered as Python's jinja2 renders it under transformers'
# settings: the expected texts below were printed by jinja2 3.1.6 from the
# default model's tokenizer.chat_template), special tokens of the template
# are parsed, and generation stops at the template's end of turn.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
nl='
'
# out_is TEXT: stdout is exactly TEXT (no trailing newline added)
out_is() {
    if [ "$(cat "$OUT"; printf x)" = "${1}x" ]; then ok "stdout is the expected text"; else
        not_ok "stdout is not '$1'"; fi
}

# the rendered prompt, with a system message and non-ASCII text
run 0 ruvllm run -m "$MODEL" --chat --system "Be brief." --echo -n 0 "Grüße, 世界"
out_is "<|im_start|>system${nl}Be brief.<|im_end|>${nl}<|im_start|>user${nl}Grüße, 世界<|im_end|>${nl}<|im_start|>assistant${nl}"

# without --system the template supplies its own default system message
run 0 ruvllm run -m "$MODEL" --chat --echo -n 0 "Hi"
out_is "<|im_start|>system${nl}You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>${nl}<|im_start|>user${nl}Hi<|im_end|>${nl}<|im_start|>assistant${nl}"

# markup becomes the special tokens (1 = <|im_start|>, 2 = <|im_end|>), not text:
# the ids llama.cpp (llama-cpp-python 0.3.36) gives for the rendered text
run 0 ruvllm run -m "$MODEL" --chat --system "Be brief." --tokenize "Hi"
out_is "1 9690 198 6077 5453 30 2 198 1 4093 198 26843 2 198 1 520 9531 198${nl}"

# greedy reply ends at the end of turn: finish_reason stop, <|im_end|> (2) last
run 0 ruvllm run -m "$MODEL" --chat --temp 0 -n 100 --json "Say hello."
out_has '"finish_reason":"stop"'
out_has ',2],"finish_reason"'
out_has 'Hello'
out_lacks 'im_end'
run 0 ruvllm run -m "$MODEL" --chat --temp 0 -n 100 "Say hello."
out_lacks 'im_end'

# a built-in template by name, and a template file, replace the model's
printf '%s' '{% for m in messages %}[{{ m.role }}] {{ m.content }}
{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}' >"$TMP/t.jinja"
run 0 ruvllm run -m "$MODEL" --chat --chat-template "$TMP/t.jinja" --echo -n 0 "Hi"
out_is "[user] Hi${nl}[assistant] "
run 0 ruvllm run -m "$MODEL" --chat --chat-template zephyr --echo -n 0 "Hi"
out_has "<|user|>${nl}Hi"

# usage errors
run 2 ruvllm run -m "$MODEL" --system "x" "Hi"
err_has "--system needs --chat"
run 2 ruvllm run -m "$MODEL" --chat-template chatml "Hi"
err_has "--chat-template needs --chat"
run 1 ruvllm run -m "$MODEL" --chat --chat-template "$TMP/missing.jinja" "Hi"
err_has "missing.jinja"
printf '%s' '{% for m in messages %}{{ m.content' >"$TMP/bad.jinja"
run 1 ruvllm run -m "$MODEL" --chat --chat-template "$TMP/bad.jinja" -n 0 "Hi"
err_has "bad.jinja"
finish
