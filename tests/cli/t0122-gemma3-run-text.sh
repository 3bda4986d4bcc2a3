#!/bin/sh
# `ruvllm run -m gemma-3-270m-q4_k_m.gguf "..."` prints sensible text: Gemma
# 3 270M (a base model) completes three factual prompts greedily with the
# word llama.cpp completes them with on the same file (Paris, Tokyo,
# oxygen: llama-cpp-python 0.3.36, temperature 0, 16 tokens).
. tests/cli/lib.sh
MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/gemma-3-270m-q4_k_m.gguf
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi

run 0 ruvllm run -m "$MODEL" --temp 0 -n 16 "The Eiffel Tower is located in the city of"
out_has "Paris"
run 0 ruvllm run -m "$MODEL" --temp 0 -n 16 "The capital city of Japan is"
out_has "Tokyo"
run 0 ruvllm run -m "$MODEL" --temp 0 -n 16 "Water is made of hydrogen and"
out_has "oxygen"
finish
