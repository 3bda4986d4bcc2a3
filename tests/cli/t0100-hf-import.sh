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
#      tokenizer.ggml.pre  qwen2moe, qwen3moe, deepseek*, gpt-oss only: their
#                          references were converted through gen_tiny_hf.py's
#                          PRE_SHIM, which names "qwen2" ("deepseek-v3",
#                          "gpt-4o") for the tokenizer hash llama.cpp does
#                          not know; their tokenizer.json's pre-tokenizer is
#                          plain ByteLevel, GPT-2's split (not Qwen2's, which
#                          takes digits one by one), and ours says "gpt-2"
#  - every tensor with the same name, type, shape and data, bit for bit
#    (Mixtral's and Qwen-MoE's per-expert matrices stacked into the 3-D
#    ffn_{gate,up,down}_exps, Qwen2-MoE's shared expert and its [dim, 1]
#    gate, the routers; DeepSeek's kv_b_proj split into attn_k_b, each
#    head's key rows transposed, and attn_v_b, its MLA low-rank pairs,
#    shared experts and V3's exp_probs_b.bias; gpt-oss's fused 3-D experts
#    transposed with gate and up de-interleaved (even and odd columns), their
#    biases, the router's bias, the sinks)
#    (in llama-quantize's order, by layer then name: quantize's order; the
#    import itself keeps the converter's);
# and `dequant --format safetensors` of that file (but for deepseek2 and
# gpt-oss, whose export is refused naming the architecture), imported again, gives
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
# name and whole shape of every tensor (the fields between type and
# element count: "16 x 32 x 4"), by name
shapes() {
    ruvllm info --no-metadata "$1" |
        awk '$1 ~ /^[0-9]+$/ { s = $2; for (i = 4; i <= NF - 3; i++) s = s " " $i; print s }' | sort
}

for dir in "$D"/hf/*/; do
    name=$(basename "$dir")
    ref="$D/$name.gguf"
    case $name in
    *-nonorm) continue ;;    # refused (below)
    *-mxfp4)
        # gpt-oss with MXFP4 experts (*_blocks, *_scales: openai/gpt-oss-*'s
        # form; a tiny one from tests/ref/gen_gptoss_mxfp4.py): the experts
        # become GGUF MXFP4 byte for byte as the converter repacks them
        # (MXFP4_MOE copies MXFP4 tensors as they are), and the whole file,
        # its experts decoded to F32, is the converter's
        run 0 ruvllm quantize -q "$dir" "$TMP/$name.gguf" MXFP4_MOE
        run 0 ruvllm quantize -q "$ref" "$TMP/$name-ref.gguf" MXFP4_MOE
        tensors "$TMP/$name-ref.gguf" >"$TMP/t-ref"
        tensors "$TMP/$name.gguf" >"$TMP/t-ours"
        assert "$name: 6 MXFP4 expert tensors" "[ \$(grep -c '_exps.weight	MXFP4	' $TMP/t-ours) -eq 6 ]"
        assert "$name: the MXFP4 experts byte for byte as the converter's" \
            "[ \"\$(grep MXFP4 $TMP/t-ref)\" = \"\$(grep MXFP4 $TMP/t-ours)\" ]"
        assert "$name: all tensors as the converter's (MXFP4_MOE of both)" "cmp -s $TMP/t-ref $TMP/t-ours"
        run 0 ruvllm quantize -q --allow-requantize "$dir" "$TMP/$name.gguf" F32
        run 0 ruvllm quantize -q --allow-requantize "$ref" "$TMP/$name-ref.gguf" F32
        meta "$TMP/$name-ref.gguf" | grep -v '^  tokenizer\.ggml\.pre ' >"$TMP/meta-ref"
        meta "$TMP/$name.gguf" | grep -v '^  tokenizer\.ggml\.pre ' >"$TMP/meta-ours"
        assert "$name: metadata as the converter's" "cmp -s $TMP/meta-ref $TMP/meta-ours"
        tensors "$TMP/$name-ref.gguf" >"$TMP/t-ref"
        tensors "$TMP/$name.gguf" >"$TMP/t-ours"
        assert "$name: all tensors, experts decoded to F32, as the converter's" "cmp -s $TMP/t-ref $TMP/t-ours"
        rm -f "$TMP/$name.gguf" "$TMP/$name-ref.gguf"
        continue ;;
    *-bf16)
        # a BF16 checkpoint (tests/ref/gen_bf16_hf.py; the converter's
        # --outtype auto): matrices BF16, routers, norms and biases (gpt-oss's
        # 2-D expert biases too) F32 as the converter keeps them. Through
        # quantize's BF16 mix, which leaves every tensor it does not quantize
        # in its type, both files must agree in every type and byte
        run 0 ruvllm quantize -q "$dir" "$TMP/$name.gguf" BF16
        run 0 ruvllm quantize -q "$ref" "$TMP/$name-ref.gguf" BF16
        tensors "$TMP/$name-ref.gguf" >"$TMP/t-ref"
        tensors "$TMP/$name.gguf" >"$TMP/t-ours"
        assert "$name: routers F32 as the converter keeps them" \
            "grep -q 'ffn_gate_inp.weight	F32	' $TMP/t-ours && ! grep -q 'ffn_gate_inp.weight	BF16' $TMP/t-ours"
        assert "$name: all tensors, types and bytes, as the converter's" "cmp -s $TMP/t-ref $TMP/t-ours"
        if ! cmp -s "$TMP/t-ref" "$TMP/t-ours"; then
            diff "$TMP/t-ref" "$TMP/t-ours" | head -n 6 | sed 's/^/#   /'
        fi
        meta "$TMP/$name-ref.gguf" | grep -v '^  tokenizer\.ggml\.pre ' >"$TMP/meta-ref"
        meta "$TMP/$name.gguf" | grep -v '^  tokenizer\.ggml\.pre ' >"$TMP/meta-ours"
        assert "$name: metadata as the converter's" "cmp -s $TMP/meta-ref $TMP/meta-ours"
        rm -f "$TMP/$name.gguf" "$TMP/$name-ref.gguf"
        continue ;;
    esac
    run 0 ruvllm quantize -q "$dir" "$TMP/$name.gguf" F32
    meta "$ref" >"$TMP/meta-ref"
    meta "$TMP/$name.gguf" >"$TMP/meta-ours"
    case $name in
    qwen*moe|deepseek*|gpt-oss)
        assert "$name: tokenizer.ggml.pre gpt-2 (the reference: the shim's name)" \
            "grep -q -E '^  tokenizer.ggml.pre +string +\"gpt-2\"\$' $TMP/meta-ours"
        grep -v '^  tokenizer\.ggml\.pre ' "$TMP/meta-ref" >"$TMP/meta-x" && mv "$TMP/meta-x" "$TMP/meta-ref"
        grep -v '^  tokenizer\.ggml\.pre ' "$TMP/meta-ours" >"$TMP/meta-x" && mv "$TMP/meta-x" "$TMP/meta-ours"
        ;;
    esac
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
    shapes "$ref" >"$TMP/s-ref"
    shapes "$TMP/$name.gguf" >"$TMP/s-ours"
    assert "$name: shapes as the converter's" "cmp -s $TMP/s-ref $TMP/s-ours"
    case $name in
    deepseek*|gpt-oss)       # not exported (DeepSeek's kv_b_proj, gpt-oss's fused experts): refused by name
        run 1 ruvllm dequant -q --format safetensors --type f32 "$TMP/$name.gguf" "$TMP/$name-hf"
        err_has "$(sed -n 's/^  general.architecture *string *"\(.*\)"$/\1/p' "$TMP/meta-ours")"
        assert "$name: no directory written" "[ ! -e $TMP/$name-hf ]"
        rm -f "$TMP/$name.gguf"
        continue ;;
    esac
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
# Mixtures of experts: what llama.cpp's qwen3moe/qwen2moe compute and the
# file cannot change (qwen3moe renormalizes the chosen experts' weights,
# qwen2moe does not; every layer sparse)
if [ -d "$D/hf/qwen3moe-nonorm" ]; then
    run 1 ruvllm quantize -q "$D/hf/qwen3moe-nonorm" "$TMP/bad.gguf" F32
    err_has "norm_topk_prob"
fi
for m in qwen3moe qwen2moe; do
    [ -d "$D/hf/$m" ] || continue
    rm -f "$TMP/bad"/*
    for f in "$D"/hf/$m/*; do ln -s "$PWD/$f" "$TMP/bad/"; done
    rm "$TMP/bad/config.json"
    if [ $m = qwen2moe ]; then
        sed 's/"norm_topk_prob": false/"norm_topk_prob": true/' "$D/hf/$m/config.json" >"$TMP/bad/config.json"
    else
        grep -v '"norm_topk_prob"' "$D/hf/$m/config.json" >"$TMP/bad/config.json"   # default: false
    fi
    run 1 ruvllm quantize -q "$TMP/bad" "$TMP/bad.gguf" F32
    err_has "norm_topk_prob"
    sed 's/"decoder_sparse_step": 1/"decoder_sparse_step": 2/' "$D/hf/$m/config.json" >"$TMP/bad/config.json"
    run 1 ruvllm quantize -q "$TMP/bad" "$TMP/bad.gguf" F32
    err_has "decoder_sparse_step"
    sed 's/"mlp_only_layers": \[\]/"mlp_only_layers": [1]/' "$D/hf/$m/config.json" >"$TMP/bad/config.json"
    run 1 ruvllm quantize -q "$TMP/bad" "$TMP/bad.gguf" F32
    err_has "mlp_only_layers"
    # harmless: the training-time router outputs
    sed 's/"output_router_logits": false/"output_router_logits": true/' "$D/hf/$m/config.json" >"$TMP/bad/config.json"
    run 0 ruvllm quantize -q "$TMP/bad" "$TMP/ok.gguf" F32
    rm -f "$TMP/ok.gguf"
done
# a missing expert is an error, not a short tensor
if [ -d "$D/hf/mixtral" ]; then
    rm -f "$TMP/bad"/*
    for f in "$D"/hf/mixtral/*; do ln -s "$PWD/$f" "$TMP/bad/"; done
    rm "$TMP/bad/config.json"
    sed 's/"num_local_experts": 4/"num_local_experts": 5/' "$D/hf/mixtral/config.json" >"$TMP/bad/config.json"
    run 1 ruvllm quantize -q "$TMP/bad" "$TMP/bad.gguf" F32
    err_has "expert 4's matrix is missing"
fi
# DeepSeek and gpt-oss: what llama.cpp computes its own way
bad_cfg() {   # bad_cfg MODEL SED-EXPR KEY: the edited config.json is refused naming KEY
    [ -d "$D/hf/$1" ] || return 0
    rm -f "$TMP/bad"/*
    for f in "$D"/hf/$1/*; do ln -s "$PWD/$f" "$TMP/bad/"; done
    rm "$TMP/bad/config.json"
    sed "$2" "$D/hf/$1/config.json" >"$TMP/bad/config.json"
    run 1 ruvllm quantize -q "$TMP/bad" "$TMP/bad.gguf" F32
    err_has "$3"
}
bad_cfg deepseek2 's/"mscale": 0.707,/"mscale": 1.0,/' "rope_parameters.mscale"
bad_cfg deepseek3 's/"scoring_func": "sigmoid"/"scoring_func": "tanh"/' "scoring_func"
bad_cfg deepseek2 's/"n_routed_experts": 8/"n_routed_experts": null/' "n_routed_experts"
bad_cfg gpt-oss 's/"swiglu_limit": 7.0/"swiglu_limit": 5.0/' "swiglu_limit"
bad_cfg gpt-oss 's/"sliding_attention"/"full_attention"/' "layer_types"
bad_cfg gpt-oss 's/"num_local_experts": 4/"num_local_experts": 3/' "shape"
assert "nothing left at the output" "[ ! -e $TMP/bad.gguf ]"
finish
