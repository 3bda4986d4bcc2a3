#!/bin/sh
# ruvllm info on mixtures of experts and multi-head latent attention: the
# experts (per layer, used per token, shared, leading dense layers), the
# parameters of the routed and shared experts, the parameters a token
# computes with, and for DeepSeek (deepseek2) MLA's ranks and the KV cache
# a token takes, latent against per head; --json the same fields. On the
# tiny converter files of tests/data/tiny (tests/ref/gen_tiny_hf.py), by
# hand from their tensor tables (`ruvllm info`):
#
# deepseek2.gguf (DeepSeek-V2: 3 layers, the first dense; 8 experts, 2 used,
# 1 shared of width 32; hidden 64):
#   all tensors                              226992 elements
#   routed experts, layers 1 and 2: ffn_{gate,up,down}_exps 64 x 32 x 8
#     = 16384 each, 3 a layer             -> 2 x 3 x 16384 = 98304
#   shared: ffn_{gate,up,down}_shexp 64 x 32 = 2048 each -> 2 x 3 x 2048 = 12288
#   active: 226992 - 98304 + 98304 x 2/8 = 128688 + 24576 = 153264
#   MLA: q_lora_rank 48, kv_lora_rank 32, rope 8, per head key 24 (16 + 8),
#   value 16, 4 heads:
#     latent a token: 3 layers x (32 + 8) x 2 bytes               = 240
#     per head:       3 layers x 4 heads x (24 + 16) x 2 bytes     = 960 (4.00x)
# deepseek2-lite.gguf (V2-Lite: q_proj, no q_lora_rank): attn_q 64 x 96 for
#   q_a (64 x 48) + q_a_norm (48) + q_b (48 x 96): 6144 for 7728, 3 layers
#   -> 226992 - 3 x 1584 = 222240; active 222240 - 98304 + 24576 = 148512
# gpt-oss.gguf (2 layers, 4 experts, 2 used, no shared; expert width 32):
#   a layer's experts: ffn_{gate,up,down}_exps 8192 each, biases: down
#   64 x 4 = 256, gate and up 32 x 4 = 128 each -> 24576 + 512 = 25088
#   -> 2 layers: 50176 of 110800; active 110800 - 50176 + 25088 = 85712
# A dense model (qwen3.gguf) shows neither.
. tests/cli/lib.sh

D=tests/data/tiny
[ -f "$D/deepseek2.gguf" ] || skip_all "no $D/deepseek2.gguf (tests/ref/gen_tiny_hf.py)"

# the line of `info`'s text that starts with $1 (spaces squeezed)
line() { grep -E "^ *$1" "$OUT" | tr -s ' ' | sed 's/^ //'; }
# the value of "$1": in --json's output (one key a line)
jval() { sed -n "s/^ *\"$1\": \\([0-9]*\\),\\{0,1\\}\$/\\1/p" "$OUT"; }

run 0 ruvllm info --no-tensors "$D/deepseek2.gguf"
assert "deepseek2: experts line" \
    "[ \"\$(line experts:)\" = 'experts: 8 per layer, 2 used per token, 1 shared, 1 leading dense layer' ]"
assert "deepseek2: 98304 expert parameters of 226992" \
    "[ \"\$(line 'expert parameters')\" = 'expert parameters 98304 (43.3% of 226992)' ]"
assert "deepseek2: 12288 shared expert parameters" \
    "[ \"\$(line 'shared expert parameters')\" = 'shared expert parameters 12288' ]"
assert "deepseek2: 153264 active parameters a token" \
    "[ \"\$(line 'active parameters')\" = 'active parameters a token 153264 (67.5%)' ]"
assert "deepseek2: MLA's ranks and widths" \
    "[ \"\$(line MLA:)\" = 'MLA: q_lora_rank 48, kv_lora_rank 32, rope dimensions 8; per head: key 24, value 16' ]"
assert "deepseek2: KV cache a token, latent 240 bytes against 960 per head" \
    "[ \"\$(line 'KV cache')\" = 'KV cache a token (f16, 3 layers): latent 240 bytes, per head 960 bytes (4.00x)' ]"

run 0 ruvllm info --json --no-tensors --no-metadata "$D/deepseek2.gguf"
assert "deepseek2 --json: moe and mla fields" \
    "[ \"\$(for k in n_expert n_expert_used n_expert_shared n_dense_lead params expert_params shared_params \
             active_params q_lora_rank kv_lora_rank rope_dim key_length_mla value_length_mla kv_bytes_latent \
             kv_bytes_per_head; do jval \$k; done | tr '\\n' ' ')\" = \
       '8 2 1 1 226992 98304 12288 153264 48 32 8 24 16 240 960 ' ]"

run 0 ruvllm info --no-tensors "$D/deepseek2-lite.gguf"
assert "deepseek2-lite: 148512 active parameters of 222240" \
    "[ \"\$(line 'active parameters')\" = 'active parameters a token 148512 (66.8%)' ]"
out_has "q_lora_rank 0 (plain query projection)"

run 0 ruvllm info --no-tensors "$D/gpt-oss.gguf"
assert "gpt-oss: experts line" \
    "[ \"\$(line experts:)\" = 'experts: 4 per layer, 2 used per token, 0 shared, 0 leading dense layers' ]"
assert "gpt-oss: 50176 expert parameters (biases included) of 110800" \
    "[ \"\$(line 'expert parameters')\" = 'expert parameters 50176 (45.3% of 110800)' ]"
assert "gpt-oss: 85712 active parameters a token" \
    "[ \"\$(line 'active parameters')\" = 'active parameters a token 85712 (77.4%)' ]"
out_lacks "MLA:"
run 0 ruvllm info --json --no-tensors --no-metadata "$D/gpt-oss.gguf"
assert "gpt-oss --json: active_params 85712, no mla" \
    "[ \"\$(jval active_params)\" = 85712 ] && ! grep -q '\"mla\"' $OUT"

if [ -f "$D/qwen3.gguf" ]; then
    run 0 ruvllm info --no-tensors "$D/qwen3.gguf"
    out_lacks "experts:"
    out_lacks "MLA:"
    run 0 ruvllm info --json --no-tensors --no-metadata "$D/qwen3.gguf"
    out_lacks '"moe"'
fi
finish
