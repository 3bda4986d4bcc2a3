#!/bin/sh
# `ruvllm run -m gemma-3-270m-q4_k_m.gguf "..."` prints sensible text: Gemma
# 3 270M (a base model) completes three factual prompts greedily with the
# word llama.cpp completes them with on the same file (Paris, France,
# oxygen: llama-cpp-python 0.3.36, temperature 0, 16 tokens). Not "The
# capital city of Japan is": there " Tokyo" leads " a" by 0.25 in
# llama.cpp's logits and trails it by 0.16 in ours, inside the margins at
# which llama.cpp's own greedy choices flip (up to 0.41, tests/ref/gemma3).
. tests/cli/lib.sh
MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/gemma-3-270m-q4_k_m.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi

run 0 ruvllm run -m "$MODEL" --temp 0 -n 16 "The Eiffel Tower is located in the city of"
out_has "Paris"
run 0 ruvllm run -m "$MODEL" --temp 0 -n 16 "Paris is the capital of"
out_has "France"
run 0 ruvllm run -m "$MODEL" --temp 0 -n 16 "Water is made of hydrogen and"
out_has "oxygen"
# --stats says what the KV cache holds per layer kind: 3 global layers, 15
# windowed ones of 512 positions
run 0 ruvllm run -m "$MODEL" --temp 0 -n 2 --stats "Water is made of hydrogen and"
err_has "3 global layers"
err_has "15 windowed layers of 512"
finish
