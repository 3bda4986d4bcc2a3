/*
 * hf.c - Hugging Face tensor names and GGUF's (rvl_hf_*): the map the
 * Hugging Face import (convert/convert_hf.c) writes a GGUF with, and that
 * PEFT adapters' targets are resolved through (engine/lora.c), and the
 * safetensors export (convert/dequant_hf.c) writes back. llama's
 * q_proj/k_proj rows are stored in GGUF in another order (rotary pairs
 * interleaved, as llama.cpp's convert_hf_to_gguf.py permutes them).
 */
#include <stdio.h>
#include <string.h>

#include "format/format_int.h"

/* The one name table, both directions: GGUF name parts and Hugging Face
 * ones (the import, PEFT targets and the safetensors export all read it). */
static const char *const top[][2] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
static const char *const blk[][2] = {
    {"attn_norm", "input_layernorm"}, {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"},
    {"ffn_gate", "mlp.gate_proj"}, {"ffn_up", "mlp.up_proj"}, {"ffn_down", "mlp.down_proj"},
};
enum { BLK_Q = 2, BLK_K = 3 };   /* the rows llama's GGUF reorders */

/* Map `name` from one naming (from: 0 GGUF, 1 Hugging Face) to the other:
 * 1 mapped, -1 unknown. The layer must be below n_layer. */
static int map_name(int from, const char *arch, uint32_t n_layer, uint32_t n_head,
                    uint32_t n_head_kv, const char *name, char *out, size_t cap,
                    uint32_t *perm_heads)
{
    static const char *const layer_fmt[2] = {"blk.%u.%n", "model.layers.%u.%n"};
    static const char *const out_fmt[2] = {"model.layers.%u.%s%s", "blk.%u.%s%s"};
    *perm_heads = 0;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(name, top[i][from])) {
            snprintf(out, cap, "%s", top[i][!from]);
            return 1;
        }
    unsigned l;
    int n = 0;
    if (sscanf(name, layer_fmt[from], &l, &n) != 1 || n == 0 || l >= n_layer)
        return -1;
    const char *rest = name + n, *dot = strrchr(rest, '.');
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias")))
        return -1;
    for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) {
        size_t k = strlen(blk[i][from]);
        if ((size_t)(dot - rest) == k && !memcmp(rest, blk[i][from], k)) {
            snprintf(out, cap, out_fmt[from], l, blk[i][!from], dot);
            if (!strcmp(arch, "llama") && (i == BLK_Q || i == BLK_K))
                *perm_heads = i == BLK_Q ? n_head : n_head_kv;
            return 1;
        }
    }
    return -1;
}

int rvl_hf_tensor_name(const char *arch, uint32_t n_layer, uint32_t n_head, uint32_t n_head_kv,
                       bool tied, const char *hf, char *out, size_t cap, uint32_t *perm_heads)
{
    *perm_heads = 0;
    if (strstr(hf, "rotary_emb.inv_freq"))
        return 0;
    if (tied && !strcmp(hf, "lm_head.weight"))
        return 0;
    return map_name(1, arch, n_layer, n_head, n_head_kv, hf, out, cap, perm_heads);
}

int rvl_hf_name_of(const char *arch, uint32_t n_layer, uint32_t n_head, uint32_t n_head_kv,
                   const char *gguf, char *out, size_t cap, uint32_t *perm_heads)
{
    return map_name(0, arch, n_layer, n_head, n_head_kv, gguf, out, cap, perm_heads);
}

uint64_t rvl_hf_row(uint64_t g, uint32_t heads, uint64_t n_rows)
{
    uint64_t hd = n_rows / heads, h = g / hd, k = g % hd, half = hd / 2;
    return h * hd + (k % 2) * half + k / 2;
}

uint64_t rvl_hf_gguf_row(uint64_t r, uint32_t heads, uint64_t n_rows)
{
    if (!heads)
        return r;
    uint64_t hd = n_rows / heads, h = r / hd, k = r % hd, half = hd / 2;
    uint64_t j = k / half, i = k % half;
    return h * hd + 2 * i + j;
}
