/*
 * hf.c - Hugging Face tensor names and GGUF's (rvl_hf_*): the map the
 * Hugging Face import (convert/convert_hf.c) writes a GGUF with, and that
 * PEFT adapters' targets are resolved through (engine/lora.c). llama's
 * q_proj/k_proj rows are stored in GGUF in another order (rotary pairs
 * interleaved, as llama.cpp's convert_hf_to_gguf.py permutes them).
 */
#include <stdio.h>
#include <string.h>

#include "format/format_int.h"

int rvl_hf_tensor_name(const char *arch, uint32_t n_layer, uint32_t n_head, uint32_t n_head_kv,
                       bool tied, const char *hf, char *out, size_t cap, uint32_t *perm_heads)
{
    static const char *const top[][2] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
    };
    static const char *const blk[][2] = {
        {"input_layernorm", "attn_norm"}, {"post_attention_layernorm", "ffn_norm"},
        {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"},
        {"self_attn.v_proj", "attn_v"}, {"self_attn.o_proj", "attn_output"},
        {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"},
    };
    *perm_heads = 0;
    if (strstr(hf, "rotary_emb.inv_freq"))
        return 0;
    if (tied && !strcmp(hf, "lm_head.weight"))
        return 0;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(hf, top[i][0])) {
            snprintf(out, cap, "%s", top[i][1]);
            return 1;
        }
    unsigned l;
    int n = 0;
    if (sscanf(hf, "model.layers.%u.%n", &l, &n) != 1 || n == 0 || l >= n_layer)
        return -1;
    const char *rest = hf + n, *dot = strrchr(rest, '.');
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias")))
        return -1;
    for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) {
        size_t k = strlen(blk[i][0]);
        if ((size_t)(dot - rest) == k && !memcmp(rest, blk[i][0], k)) {
            snprintf(out, cap, "blk.%u.%s%s", l, blk[i][1], dot);
            if (!strcmp(arch, "llama") && (i == 2 || i == 3))
                *perm_heads = i == 2 ? n_head : n_head_kv;
            return 1;
        }
    }
    return -1;
}

uint64_t rvl_hf_row(uint64_t g, uint32_t heads, uint64_t n_rows)
{
    uint64_t hd = n_rows / heads, h = g / hd, k = g % hd, half = hd / 2;
    return h * hd + (k % 2) * half + k / 2;
}
