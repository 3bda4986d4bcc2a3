#!/bin/sh
# ruvllm quantize of a Hugging Face directory writes the GGUF file that
# llama.cpp's convert_hf_to_gguf.py writes from it: for each tiny model of
# tests/data/tiny/hf/<name>/ (tests/ref/gen_tiny_hf.py; its converter
# output is tests/data/tiny/<name>.gguf), `quantize --type F32` gives
#  - every metadata key with the same type and value (arrays in full), in
#    the same order, but for the differences that are meant:
#      general.name        the converter's is made from the model card or
#                          the directory name by heuristics; ours is the
#                          directory's name
#      general.size_label  the converter's parameter-count label; not written
#      llama.attention.sliding_window
#                          Mistral's sliding_window: the converter drops it
#                          (llama.cpp then attends over the whole context,
#                          unlike transformers); we keep it
#      <arch>.attention.scale
#                          a query_pre_attn_scalar other than the one
#                          llama.cpp derives (none of these models has one)
#  - every tensor with the same name, type, shape and data, bit for bit
#    (in llama-quantize's order, by layer then name: quantize's order; the
#    import itself keeps the converter's);
# and `dequant --format safetensors` of that file, imported again, gives
# the same hyper-parameters and the same tensors bit for bit (Gemma's norm
# gains go back from 1 + w to w and return to the same 1 + w). Ministral 3
# (mistral3) carries YaRN's mscale_all_dim as
# rope.scaling.yarn_log_multiplier and Llama 4's llama_4_scaling_beta as
# attention.temperature_scale, with Q/K permuted as llama's.
# tests/ref/check_convert_hf.py checks the exported directory in
# transformers and the import in llama.cpp.
. tests/cli/lib.sh

D=tests/data/tiny
[ -d "$D/hf" ] || skip_all "no $D/hf (tests/ref/gen_tiny_hf.py)"

# metadata lines of `ruvllm info`, without the meant differences
meta() {
    ruvllm info --all --no-tensors "$1" | sed -n '/^metadata:/,/^totals:/p' |
        grep -v -e '^metadata:' -e '^totals:' -e '^$' -e '^  general\.name ' -e '^  general\.size_label ' \
            -e '^  llama\.attention\.sliding_window ' -e '^  [a-z0-9]*\.attention\.scale '
}
# name, type and data digest of every tensor, by name
tensors() { tensor_hashes "$1" | sort; }

for dir in "$D"/hf/*/; do
    name=$(basename "$dir")
    ref="$D/$name.gguf"
    run 0 ruvllm quantize -q "$dir" "$TMP/$name.gguf" F32
    meta "$ref" >"$TMP/meta-ref"
    meta "$TMP/$name.gguf" >"$TMP/meta-ours"
    assert "$name: metadata as llama.cpp's converter writes it" "cmp -s $TMP/meta-ref $TMP/meta-ours"
    if ! cmp -s "$TMP/meta-ref" "$TMP/meta-ours"; then
        diff "$TMP/meta-ref" "$TMP/meta-ours" | cut -c1-160 | head -n 8 | sed 's/^/#   /'
    fi
    tensors "$ref" >"$TMP/t-ref"
    tensors "$TMP/$name.gguf" >"$TMP/t-ours"
    assert "$name: $(wc -l <"$TMP/t-ref") tensors, names, types and data as the converter's" \
        "cmp -s $TMP/t-ref $TMP/t-ours"
    if ! cmp -s "$TMP/t-ref" "$TMP/t-ours"; then
        diff "$TMP/t-ref" "$TMP/t-ours" | head -n 6 | sed 's/^/#   /'
    fi
    assert "$name: shapes as the converter's" \
        "[ \"\$(ruvllm info --no-metadata $ref | awk '\$1 ~ /^[0-9]+\$/ { \$1 = \"\"; print \$2, \$4 }' | sort)\" = \
           \"\$(ruvllm info --no-metadata $TMP/$name.gguf | awk '\$1 ~ /^[0-9]+\$/ { \$1 = \"\"; print \$2, \$4 }' | sort)\" ]"
    # the round trip: safetensors and back
    run 0 ruvllm dequant -q --format safetensors --type f32 "$TMP/$name.gguf" "$TMP/$name-hf"
    run 0 ruvllm quantize -q "$TMP/$name-hf" "$TMP/$name-back.gguf" F32
    tensors "$TMP/$name-back.gguf" >"$TMP/t-back"
    assert "$name: exported to safetensors and imported again: the same tensors" \
        "cmp -s $TMP/t-ours $TMP/t-back"
    # and the same hyper-parameters (the vocabulary comes back from
    # tokenizer.json, with keys of its own)
    meta "$TMP/$name.gguf" | grep -v '^  tokenizer\.' >"$TMP/h-ours"
    meta "$TMP/$name-back.gguf" | grep -v '^  tokenizer\.' >"$TMP/h-back"
    assert "$name: exported and imported again: the same hyper-parameters" \
        "cmp -s $TMP/h-ours $TMP/h-back"
    if ! cmp -s "$TMP/h-ours" "$TMP/h-back"; then
        diff "$TMP/h-ours" "$TMP/h-back" | cut -c1-160 | head -n 6 | sed 's/^/#   /'
    fi
    rm -rf "$TMP/$name-hf" "$TMP/$name-back.gguf" "$TMP/$name.gguf"
done

# Mistral's window is kept (the converter drops it)
if [ -d "$D/hf/mistral" ]; then
    w=$(sed -n 's/^ *"sliding_window": *\([0-9]*\).*/\1/p' "$D/hf/mistral/config.json")
    run 0 ruvllm quantize -q "$D/hf/mistral" "$TMP/m.gguf" F32
    run 0 ruvllm info "$TMP/m.gguf"
    assert "mistral: llama.attention.sliding_window $w" \
        "grep -q -E '^  llama.attention.sliding_window +u32 +$w\$' $OUT"
fi

# keys that change the computation and have no GGUF form are refused by name
mkdir -p "$TMP/bad"
for f in "$D"/hf/gemma3/*; do ln -s "$PWD/$f" "$TMP/bad/"; done
rm "$TMP/bad/config.json"
sed 's/"sliding_attention",$/"full_attention",/' "$D/hf/gemma3/config.json" >"$TMP/bad/config.json"
run 1 ruvllm quantize -q "$TMP/bad" "$TMP/bad.gguf" F32
err_has "layer_types"
sed 's/"hidden_activation": "gelu_pytorch_tanh"/"hidden_activation": "silu"/' "$D/hf/gemma3/config.json" >"$TMP/bad/config.json"
run 1 ruvllm quantize -q "$TMP/bad" "$TMP/bad.gguf" F32
err_has "hidden_activation"
# Ministral 3: what llama.cpp's mistral3 cannot carry
rm -f "$TMP/bad"/*
for f in "$D"/hf/ministral3/*; do ln -s "$PWD/$f" "$TMP/bad/"; done
rm "$TMP/bad/config.json"
sed 's/"sliding_window": null/"sliding_window": 8/' "$D/hf/ministral3/config.json" >"$TMP/bad/config.json"
run 1 ruvllm quantize -q "$TMP/bad" "$TMP/bad.gguf" F32
err_has "sliding_window"
sed 's/"mscale": 1.0,/"mscale": 0.5,/' "$D/hf/ministral3/config.json" >"$TMP/bad/config.json"
run 1 ruvllm quantize -q "$TMP/bad" "$TMP/bad.gguf" F32
err_has "rope_parameters.mscale"
sed 's/"rope_type": "yarn"/"rope_type": "default"/' "$D/hf/ministral3/config.json" >"$TMP/bad/config.json"
run 1 ruvllm quantize -q "$TMP/bad" "$TMP/bad.gguf" F32
err_has "rope_type"
assert "nothing left at the output" "[ ! -e $TMP/bad.gguf ]"
finish
