#!/bin/sh
# `ruvllm run` on Gemma 3 270M (scripts/fetch-model.sh gemma3) agrees with
# llama.cpp on the same file: per prompt of tests/ref/gemma3/prompts/
# (plain text, Gemma's turn markup, code, numbers, French, German, Chinese,
# Russian, Japanese, emoji) the prompt ids are llama.cpp's (BOS in front),
# and the 32-token greedy continuations agree with llama.cpp's at least as
# often as llama.cpp agrees with itself when it switches to flash attention
# (tests/ref/gemma3/self-agreement.tsv: 2 of 16 equal token for token, 192
# equal leading tokens in all; with a q8_0 KV cache 5 of 16). The goldens
# are tests/ref/gen_llamacpp_goldens.py --set gemma3 --self-agreement; the
# comparison is t0030's, with this model's goldens.
MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/gemma-3-270m-q4_k_m.gguf
RVL_LLAMACPP_MODEL=$MODEL RVL_LLAMACPP_REF=tests/ref/gemma3 exec sh tests/cli/t0030-run-llamacpp.sh
