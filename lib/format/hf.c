/*
 * hf.c - Hugging Face tensor names and GGUF's (rvl_hf_*): the map the
 * Hugging Face import (convert/convert_hf.c) writes a GGUF with, and that
 * PEFT adapters' targets are resolved through (engine/lora.c), and the
 * safetensors export (convert/dequant_hf.c) writes back, for llama
 * (and Mistral, Mixtral), qwen2, qwen3, gemma2, gemma3, phi3, mistral3
 * (Ministral 3), qwen2moe, qwen3moe, deepseek2 (DeepSeek-V2/V3: MLA's
 * low-rank projections, the routed experts' correction bias) and gpt-oss
 * (its router with a bias, the attention sinks; its fused 3-D experts are
 * the import's: convert/convert_hf.c). Mixture-of-experts layers: the
 * router (ffn_gate_inp), Qwen2-MoE's shared expert (ffn_*_shexp, its gate
 * ffn_gate_inp_shexp), and each expert's matrices, which Hugging Face
 * keeps apart (experts.E.w1 / gate_proj, ...) and GGUF stacks into one 3-D
 * tensor per kind (ffn_{gate,up,down}_exps, expert E the E-th matrix:
 * rvl_hf_expert_*). llama's and mistral3's
 * q_proj/k_proj rows are stored in GGUF in another order (rotary pairs
 * interleaved, as llama.cpp's convert_hf_to_gguf.py permutes them).
 */
#include <stdio.h>
#include <string.h>

#include "format/format_int.h"

/* The families the table knows (a bit each). */
enum { F_LLAMA = 1, F_QWEN2 = 2, F_QWEN3 = 4, F_GEMMA2 = 8, F_GEMMA3 = 16, F_PHI3 = 32,
       F_MISTRAL3 = 64, F_QWEN2MOE = 128, F_QWEN3MOE = 256, F_DEEPSEEK2 = 512, F_GPTOSS = 1024,
       F_ALL = 2047,
       F_GEMMA = F_GEMMA2 | F_GEMMA3, F_PERMUTED = F_LLAMA | F_MISTRAL3,
       F_QWEN_MOE = F_QWEN2MOE | F_QWEN3MOE };

static unsigned family_bit(const char *arch)
{
    static const char *const names[] = {"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "mistral3",
                                         "qwen2moe", "qwen3moe", "deepseek2", "gpt-oss"};
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(arch, names[i]))
            return 1u << i;
    return 0;
}

/* The one name table, both directions: GGUF name parts and Hugging Face
 * ones (the import, PEFT targets and the safetensors export all read it),
 * with the families each pair holds in (the first match wins: Gemma's
 * post_attention_layernorm is a post-norm, Llama's the FFN's pre-norm;
 * Phi-3's ffn_up is gate and up in one). */
static const char *const top[][2] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
static const struct {
    const char *gguf, *hf;
    unsigned families;
} blk[] = {
    {"attn_norm", "input_layernorm", F_ALL},
    {"ffn_norm", "post_attention_layernorm", F_ALL & ~F_GEMMA & ~F_GPTOSS},
    {"post_attention_norm", "post_attention_layernorm", F_GEMMA | F_GPTOSS},
    {"ffn_norm", "pre_feedforward_layernorm", F_GEMMA},
    {"post_ffw_norm", "post_feedforward_layernorm", F_GEMMA},
    {"attn_q", "self_attn.q_proj", F_ALL}, {"attn_k", "self_attn.k_proj", F_ALL},
    {"attn_v", "self_attn.v_proj", F_ALL}, {"attn_output", "self_attn.o_proj", F_ALL},
    {"attn_q_norm", "self_attn.q_norm", F_QWEN3 | F_GEMMA3 | F_QWEN3MOE},
    {"attn_k_norm", "self_attn.k_norm", F_QWEN3 | F_GEMMA3 | F_QWEN3MOE},
    {"attn_qkv", "self_attn.qkv_proj", F_PHI3},
    {"ffn_up", "mlp.gate_up_proj", F_PHI3},
    {"ffn_gate", "mlp.gate_proj", F_ALL & ~F_PHI3}, {"ffn_up", "mlp.up_proj", F_ALL & ~F_PHI3},
    {"ffn_down", "mlp.down_proj", F_ALL},
    /* mixtures of experts: the router, Qwen2-MoE's shared expert */
    {"ffn_gate_inp", "block_sparse_moe.gate", F_LLAMA},
    {"ffn_gate_inp", "mlp.gate", F_QWEN_MOE | F_DEEPSEEK2}, {"ffn_gate_inp", "mlp.router", F_GPTOSS},
    {"ffn_gate_shexp", "mlp.shared_expert.gate_proj", F_QWEN2MOE},
    {"ffn_up_shexp", "mlp.shared_expert.up_proj", F_QWEN2MOE},
    {"ffn_down_shexp", "mlp.shared_expert.down_proj", F_QWEN2MOE},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate", F_QWEN2MOE},
    /* DeepSeek: MLA (queries through a low-rank pair, or q_proj as V2-Lite;
     * keys and values through the latent kv_a, whose kv_b_proj the import
     * splits into attn_k_b and attn_v_b), the shared experts */
    {"attn_q_a", "self_attn.q_a_proj", F_DEEPSEEK2}, {"attn_q_a_norm", "self_attn.q_a_layernorm", F_DEEPSEEK2},
    {"attn_q_b", "self_attn.q_b_proj", F_DEEPSEEK2},
    {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa", F_DEEPSEEK2},
    {"attn_kv_a_norm", "self_attn.kv_a_layernorm", F_DEEPSEEK2},
    {"ffn_gate_shexp", "mlp.shared_experts.gate_proj", F_DEEPSEEK2},
    {"ffn_up_shexp", "mlp.shared_experts.up_proj", F_DEEPSEEK2},
    {"ffn_down_shexp", "mlp.shared_experts.down_proj", F_DEEPSEEK2},
};

/* Whole names (after the layer's prefix) that do not end in .weight or
 * .bias on one side: DeepSeek-V3's routing bias, gpt-oss's sinks. */
static const struct {
    const char *gguf, *hf;
    unsigned families;
} whole[] = {
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias", F_DEEPSEEK2},
    {"attn_sinks.weight", "self_attn.sinks", F_GPTOSS},
};

/* The experts' matrices: Hugging Face's per-expert name (after
 * model.layers.N.<prefix>E.) and GGUF's stacked tensor. */
static const struct {
    const char *gguf, *prefix, *hf;
    unsigned families;
} exps[] = {
    {"ffn_gate_exps", "block_sparse_moe.experts.", "w1", F_LLAMA},
    {"ffn_down_exps", "block_sparse_moe.experts.", "w2", F_LLAMA},
    {"ffn_up_exps", "block_sparse_moe.experts.", "w3", F_LLAMA},
    {"ffn_gate_exps", "mlp.experts.", "gate_proj", F_QWEN_MOE | F_DEEPSEEK2},
    {"ffn_up_exps", "mlp.experts.", "up_proj", F_QWEN_MOE | F_DEEPSEEK2},
    {"ffn_down_exps", "mlp.experts.", "down_proj", F_QWEN_MOE | F_DEEPSEEK2},
};

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
    unsigned fam = family_bit(arch);
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
        if ((whole[i].families & fam) && !strcmp(rest, from ? whole[i].hf : whole[i].gguf)) {
            snprintf(out, cap, out_fmt[from], l, from ? whole[i].gguf : whole[i].hf, "");
            return 1;
        }
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias")))
        return -1;
    for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) {
        const char *a = from ? blk[i].hf : blk[i].gguf, *b = from ? blk[i].gguf : blk[i].hf;
        size_t k = strlen(a);
        if (!(blk[i].families & fam) || (size_t)(dot - rest) != k || memcmp(rest, a, k))
            continue;
        snprintf(out, cap, out_fmt[from], l, b, dot);
        /* llama's (and mistral3's) Q/K rows (NeoX families keep Hugging
         * Face's order) */
        if ((fam & F_PERMUTED) && !strcmp(blk[i].gguf, "attn_q"))
            *perm_heads = n_head;
        if ((fam & F_PERMUTED) && !strcmp(blk[i].gguf, "attn_k"))
            *perm_heads = n_head_kv;
        return 1;
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

int rvl_hf_expert_tensor(const char *arch, uint32_t n_layer, const char *hf, char *out, size_t cap,
                         uint32_t *expert)
{
    unsigned l, e, fam = family_bit(arch);
    int n = 0;
    if (sscanf(hf, "model.layers.%u.%n", &l, &n) != 1 || n == 0 || l >= n_layer)
        return 0;
    const char *rest = hf + n;
    for (size_t i = 0; i < sizeof exps / sizeof exps[0]; i++) {
        size_t k = strlen(exps[i].prefix);
        int m = 0;
        if (!(exps[i].families & fam) || strncmp(rest, exps[i].prefix, k) ||
            sscanf(rest + k, "%u.%n", &e, &m) != 1 || m == 0 || rest[k] < '0' || rest[k] > '9')
            continue;
        const char *w = rest + k + m;
        size_t wl = strlen(exps[i].hf);
        if (strncmp(w, exps[i].hf, wl) || strcmp(w + wl, ".weight"))
            continue;
        snprintf(out, cap, "blk.%u.%s.weight", l, exps[i].gguf);
        *expert = e;
        return 1;
    }
    return 0;
}

int rvl_hf_expert_name(const char *arch, uint32_t n_layer, const char *gguf, uint32_t expert,
                       char *out, size_t cap)
{
    unsigned l, fam = family_bit(arch);
    int n = 0;
    if (sscanf(gguf, "blk.%u.%n", &l, &n) != 1 || n == 0 || l >= n_layer)
        return 0;
    for (size_t i = 0; i < sizeof exps / sizeof exps[0]; i++) {
        size_t k = strlen(exps[i].gguf);
        if ((exps[i].families & fam) && !strncmp(gguf + n, exps[i].gguf, k) &&
            !strcmp(gguf + n + k, ".weight")) {
            snprintf(out, cap, "model.layers.%u.%s%u.%s.weight", l, exps[i].prefix, expert, exps[i].hf);
            return 1;
        }
    }
    return 0;
}
