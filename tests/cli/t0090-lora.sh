#!/bin/sh
# ruvllm lora-merge and run --lora on SmolLM2 with the adapters of
# tests/data/lora (tests/ref/gen_lora_goldens.py, made with peft): greedy
# generation with --lora equals generation from the merged file and
# llama.cpp's with the same GGUF LoRA; the summary; errors name what is
# wrong and leave nothing at OUT. tests/test_lora.c compares the merged
# weights with peft's merge_and_unload.
. tests/cli/lib.sh

MODEL=${RVL_LORA_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -f "$MODEL" ]; then
    skip_all "no model at $MODEL (make model)"
fi
D=tests/data/lora
P="The capital of France is"

# the f32 base: the merged file then has exactly W + s B A in f32
run 0 ruvllm dequant -q --type f32 "$MODEL" "$TMP/base.gguf"
run 0 ruvllm lora-merge -t 2 --type F32 "$TMP/base.gguf" $D/smol-r8 -o "$TMP/merged.gguf"
err_has "ruvllm lora-merge: wrote $TMP/merged.gguf in"
err_has "28 of 272 tensors updated"
err_has "adapter: $D/smol-r8 (peft, r=8, alpha=16, scale 1, 28 tensors, 325632 parameters)"
err_has "tensors: F32 272"
out_empty

run 0 ruvllm run -m "$TMP/merged.gguf" -t 2 --temp 0 -n 24 "$P"
cp "$OUT" "$TMP/gen-merged"
run 0 ruvllm run -m "$TMP/base.gguf" -t 2 --temp 0 -n 24 --lora $D/smol-r8 "$P"
assert "run --lora (PEFT) generates what the merged file generates" "cmp -s $OUT $TMP/gen-merged"
run 0 ruvllm run -m "$TMP/base.gguf" -t 2 --temp 0 -n 24 --lora $D/smol-r8.gguf "$P"
assert "run --lora (GGUF LoRA) generates what the merged file generates" "cmp -s $OUT $TMP/gen-merged"
assert "and what llama.cpp generates with the GGUF LoRA" "cmp -s $OUT $D/llamacpp.txt"
run 0 ruvllm run -m "$TMP/base.gguf" -t 2 --temp 0 -n 24 "$P"
assert "the adapter changes the text" "! cmp -s $OUT $TMP/gen-merged"
# half an adapter twice is the whole adapter
run 0 ruvllm run -m "$TMP/base.gguf" -t 2 --temp 0 -n 24 --lora $D/smol-r8:0.5 --lora $D/smol-r8.gguf:0.5 "$P"
assert "two half adapters add up to the whole" "cmp -s $OUT $TMP/gen-merged"
rm -f "$TMP/merged.gguf"

# two adapters, one of them rsLoRA, merged and applied at run time
run 0 ruvllm lora-merge -q --type F32 "$TMP/base.gguf" $D/smol-r8 $D/smol-rs4:0.5 -o "$TMP/m2.gguf"
err_empty
run 0 ruvllm run -m "$TMP/m2.gguf" -t 2 --temp 0 -n 24 "$P"
cp "$OUT" "$TMP/gen-m2"
run 0 ruvllm run -m "$TMP/base.gguf" -t 2 --temp 0 -n 24 --lora $D/smol-r8 --lora $D/smol-rs4:0.5 "$P"
assert "two adapters at run time equal their merge" "cmp -s $OUT $TMP/gen-m2"
rm -f "$TMP/m2.gguf"

# own types: Q4_1 stays Q4_1; --json
run 0 ruvllm lora-merge -j -t 2 "$MODEL" $D/smol-r8.gguf:2 -o "$TMP/q.gguf"
out_has '"tensors_updated": 28'
out_has '"form": "gguf"'
out_has '"scale": 2'
assert "same tensor types as the base" \
    "[ \"\$(ruvllm info --no-metadata $MODEL | awk '\$1 ~ /^[0-9]+\$/ {print \$2, \$3}')\" = \"\$(ruvllm info --no-metadata $TMP/q.gguf | awk '\$1 ~ /^[0-9]+\$/ {print \$2, \$3}')\" ]"
run 0 ruvllm run -m "$TMP/q.gguf" -t 2 --temp 0 -n 4 "$P"
assert "the merged Q4_1 file runs" "[ -s $OUT ]"
rm -f "$TMP/q.gguf"

# errors name what is wrong; nothing is left at OUT
run 1 ruvllm lora-merge "$MODEL" $D/bad-dora -o "$TMP/x.gguf"
err_has "use_dora is true: DoRA adapters (weight-decomposed LoRA) are not supported"
run 1 ruvllm lora-merge "$MODEL" $D/bad-shape -o "$TMP/x.gguf"
err_has "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight (8 x 500)"
err_has "do not fit blk.0.attn_q.weight (576 x 576)"
run 1 ruvllm lora-merge "$MODEL" $D/bad-target -o "$TMP/x.gguf"
err_has "tensor base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight: unknown target module"
run 1 ruvllm lora-merge "$MODEL" $D/bad-save -o "$TMP/x.gguf"
err_has "modules_to_save"
run 1 ruvllm lora-merge "$MODEL" $D/bad-trunc -o "$TMP/x.gguf"
err_has "bad-trunc/adapter_model.safetensors"
run 1 ruvllm lora-merge "$MODEL" "$MODEL" -o "$TMP/x.gguf"
err_has "not a LoRA adapter (general.type is"
run 1 ruvllm lora-merge "$MODEL" $D/nope -o "$TMP/x.gguf"
err_has "$D/nope: no such adapter file or directory"
assert "nothing at OUT after the errors" "[ ! -e $TMP/x.gguf ]"
run 1 ruvllm run -t 2 -n 1 --lora $D/bad-dora "$P"
err_has "ruvllm run: $D/bad-dora/adapter_config.json: use_dora is true"
run 2 ruvllm lora-merge "$MODEL" $D/smol-r8
err_has "-o OUT is required"
run 2 ruvllm lora-merge --type Q9 "$MODEL" $D/smol-r8 -o "$TMP/x.gguf"
err_has "--type Q9"
run 2 ruvllm run --lora $D/smol-r8 --prompt-cache "$TMP/pc" "$P"
err_has "--prompt-cache cannot be combined with --lora"
run 2 ruvllm chat --lora $D/smol-r8 --session "$TMP/s.json"
err_has "--session cannot be combined with --lora"
finish
