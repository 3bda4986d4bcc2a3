/*
 * qmix.c - which type each tensor gets: llama.cpp's quantization
 * mixes (llama_ftype) and their per-tensor rules, so that `ruvllm quantize
 * M Q4_K_M` chooses the types `llama-quantize M Q4_K_M` chooses.
 *
 * The rules, as llama.cpp's src/llama-quant.cpp states them (facts, our
 * own code):
 *  - Only tensors of 2+ dimensions whose names end in "weight" are
 *    quantized, never norms ("_norm.weight"), MoE router inputs
 *    ("ffn_gate_inp.weight"), position/token-type embeddings, SSM conv1d,
 *    RWKV's small time_mix tensors, T5's attn_rel_b; output.weight not with
 *    --leave-output.
 *  - Tensors are visited by layer ("blk.N." - others first), then by name;
 *    the counters of attn_v and ffn_down tensors count in that order.
 *  - output.weight (and token_embd.weight when the model has no
 *    output.weight) become Q6_K, or Q8_0 if rows are not whole blocks of
 *    the mix type or the arch is falcon (kept when the mix type is Q8_0).
 *  - use_more_bits(i, n): the first and last eighth of the layers and every
 *    third one between; Q4_K_M/Q5_K_M give those attn_v and ffn_down Q6_K.
 *  - A row length that is not a multiple of the chosen type's block size
 *    falls back: Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K ->
 *    Q8_0, IQ4_XS -> IQ4_NL; if still not a multiple, F16.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "convert/convert_int.h"
#include "formats.h"

#define NONE UINT32_MAX

/* ======================================================================
 * The mixes
 * ====================================================================== */
static const rvl_qmix mixes[] = {
    {"F32", RVL_FTYPE_ALL_F32, RVL_TYPE_F32, true, "32 bpw, no quantization"},
    {"F16", RVL_FTYPE_MOSTLY_F16, RVL_TYPE_F16, true, "16 bpw half precision"},
    {"BF16", RVL_FTYPE_MOSTLY_BF16, RVL_TYPE_BF16, true, "16 bpw bfloat16"},
    {"Q8_0", RVL_FTYPE_MOSTLY_Q8_0, RVL_TYPE_Q8_0, true, "8.5 bpw, nearly lossless"},
    {"Q6_K", RVL_FTYPE_MOSTLY_Q6_K, RVL_TYPE_Q6_K, true, "6.56 bpw K-quant"},
    {"Q5_K_M", RVL_FTYPE_MOSTLY_Q5_K_M, RVL_TYPE_Q5_K, true, "Q5_K, Q6_K for half of attn_v/ffn_down and output"},
    {"Q5_K_S", RVL_FTYPE_MOSTLY_Q5_K_S, RVL_TYPE_Q5_K, true, "Q5_K, Q6_K for output"},
    {"Q5_1", RVL_FTYPE_MOSTLY_Q5_1, RVL_TYPE_Q5_1, true, "6 bpw legacy, with a min"},
    {"Q5_0", RVL_FTYPE_MOSTLY_Q5_0, RVL_TYPE_Q5_0, true, "5.5 bpw legacy"},
    {"Q4_K_M", RVL_FTYPE_MOSTLY_Q4_K_M, RVL_TYPE_Q4_K, true, "Q4_K, Q6_K for half of attn_v/ffn_down and output"},
    {"Q4_K_S", RVL_FTYPE_MOSTLY_Q4_K_S, RVL_TYPE_Q4_K, true, "Q4_K, Q5_K for early attn_v/ffn_down, Q6_K output"},
    {"Q4_1", RVL_FTYPE_MOSTLY_Q4_1, RVL_TYPE_Q4_1, true, "5 bpw legacy, with a min"},
    {"Q4_0", RVL_FTYPE_MOSTLY_Q4_0, RVL_TYPE_Q4_0, true, "4.5 bpw legacy"},
    {"IQ4_NL", RVL_FTYPE_MOSTLY_IQ4_NL, RVL_TYPE_IQ4_NL, true, "4.5 bpw non-linear"},
    {"IQ4_XS", RVL_FTYPE_MOSTLY_IQ4_XS, RVL_TYPE_IQ4_XS, true, "4.25 bpw non-linear"},
    {"Q3_K_L", RVL_FTYPE_MOSTLY_Q3_K_L, RVL_TYPE_Q3_K, true, "Q3_K, Q5_K for attn_v/ffn_down/attn_output"},
    {"Q3_K_M", RVL_FTYPE_MOSTLY_Q3_K_M, RVL_TYPE_Q3_K, true, "Q3_K, Q4_K/Q5_K for attn_v/ffn_down/attn_output"},
    {"Q3_K_S", RVL_FTYPE_MOSTLY_Q3_K_S, RVL_TYPE_Q3_K, true, "Q3_K, Q6_K output"},
    {"Q2_K", RVL_FTYPE_MOSTLY_Q2_K, RVL_TYPE_Q2_K, true, "Q2_K, Q3_K/Q4_K for attn_v/ffn_down/attn_output"},
    {"Q2_K_S", RVL_FTYPE_MOSTLY_Q2_K_S, RVL_TYPE_Q2_K, true, "Q2_K, needs an importance matrix"},
    {"MXFP4_MOE", RVL_FTYPE_MOSTLY_MXFP4_MOE, RVL_TYPE_MXFP4, true, "MXFP4 MoE experts, Q8_0 for the rest"},
    /* aliases llama-quantize accepts */
    {"Q3_K", RVL_FTYPE_MOSTLY_Q3_K_M, RVL_TYPE_Q3_K, true, "alias for Q3_K_M"},
    {"Q4_K", RVL_FTYPE_MOSTLY_Q4_K_M, RVL_TYPE_Q4_K, true, "alias for Q4_K_M"},
    {"Q5_K", RVL_FTYPE_MOSTLY_Q5_K_M, RVL_TYPE_Q5_K, true, "alias for Q5_K_M"},
    /* ruvllm project formats (docs/formats.md): one type everywhere */
    {"RVL_I4S_G32", NONE, RVL_TYPE_RVL_I4S_G32, false, "INT4 symmetric, groups of 32"},
    {"RVL_I4S_G64", NONE, RVL_TYPE_RVL_I4S_G64, false, "INT4 symmetric, groups of 64"},
    {"RVL_I4S_G128", NONE, RVL_TYPE_RVL_I4S_G128, false, "INT4 symmetric, groups of 128"},
    {"RVL_I4A_G32", NONE, RVL_TYPE_RVL_I4A_G32, false, "INT4 with zero point, groups of 32"},
    {"RVL_I4A_G64", NONE, RVL_TYPE_RVL_I4A_G64, false, "INT4 with zero point, groups of 64"},
    {"RVL_I4A_G128", NONE, RVL_TYPE_RVL_I4A_G128, false, "INT4 with zero point, groups of 128"},
    {"RVL_I8_ROW", NONE, RVL_TYPE_RVL_I8_ROW, false, "INT8, one scale per row"},
    {"RVL_I8_G64", NONE, RVL_TYPE_RVL_I8_G64, false, "INT8, groups of 64"},
    {"RVL_I8_G128", NONE, RVL_TYPE_RVL_I8_G128, false, "INT8, groups of 128"},
    {"MLX_A4_G64", NONE, RVL_TYPE_MLX_A4_G64, false, "MLX affine 4-bit, groups of 64"},
    {"MLX_A8_G64", NONE, RVL_TYPE_MLX_A8_G64, false, "MLX affine 8-bit, groups of 64"},
};

const rvl_qmix *rvl_qmix_at(size_t i)
{
    return i < sizeof mixes / sizeof mixes[0] ? &mixes[i] : NULL;
}

const rvl_qmix *rvl_qmix_find(const char *name)
{
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++)
        if (strcasecmp(mixes[i].name, name) == 0)
            return &mixes[i];
    return NULL;
}

/* ======================================================================
 * Tensor categories (by name, as llama.cpp matches them)
 * ====================================================================== */
typedef enum {
    CAT_TOKEN_EMBD, CAT_ATTN_Q, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_QKV, CAT_ATTN_KV_B,
    CAT_ATTN_OUTPUT, CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN, CAT_OUTPUT, CAT_OTHER,
} category;

static bool has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static category categorize(const char *name)
{
    if (strcmp(name, "output.weight") == 0)
        return CAT_OUTPUT;
    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0)
        return CAT_TOKEN_EMBD;
    if (has(name, "attn_qkv.weight")) return CAT_ATTN_QKV;
    if (has(name, "attn_kv_b.weight")) return CAT_ATTN_KV_B;
    if (has(name, "attn_v.weight")) return CAT_ATTN_V;
    if (has(name, "attn_k.weight")) return CAT_ATTN_K;
    if (has(name, "attn_q.weight")) return CAT_ATTN_Q;
    if (has(name, "attn_output.weight")) return CAT_ATTN_OUTPUT;
    if (has(name, "ffn_up")) return CAT_FFN_UP;
    if (has(name, "ffn_gate")) return CAT_FFN_GATE;
    if (has(name, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

static bool is_attn_v(category c) { return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B; }

static bool allows_quantization(const rvl_qmix_params *p, const rvl_qmix_tensor *t)
{
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
        "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
        "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
        "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
        "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
        ".position_embd", ".rel_pos", ".patch_embd", ".patch_merger",
    };
    /* ggml_n_dims: trailing dimensions of 1 do not count */
    uint32_t nd = t->n_dims;
    while (nd > 1 && t->ne[nd - 1] == 1)
        nd--;
    if (nd < 2)
        return false;
    size_t len = strlen(t->name);
    if (len < 6 || strcmp(t->name + len - 6, "weight") != 0)
        return false;
    if (p->leave_output && strcmp(t->name, "output.weight") == 0)
        return false;
    if (strcmp(t->name, "position_embd.weight") == 0 || strcmp(t->name, "token_types.weight") == 0)
        return false;
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (has(t->name, never[i]))
            return false;
    /* types we cannot read as floats are left alone */
    const rvl_kformat *kf = rvl_kformat_get(t->type);
    return kf && kf->dequantize;
}

/* llama.cpp's visiting order: layer number ("blk.N."; -1 for others), then name. */
static int layer_of(const char *name)
{
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1)
        l = -1;
    return l;
}

typedef struct {
    int layer;
    const char *name;
    size_t idx;
} visit;

static int by_layer_name(const void *a, const void *b)
{
    const visit *x = a, *y = b;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* ======================================================================
 * The per-tensor rules (llama_tensor_get_type_impl), for the mixes above
 * ====================================================================== */
typedef struct {
    const rvl_qmix_params *p;
    uint32_t ftype;
    int n_attn_v, i_attn_v, i_ffn_down, i_ffn_gate, i_ffn_up;
    bool tied;              /* no output.weight: token_embd is the output */
    bool falcon;
    uint32_t n_gqa;
} state;

static bool use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static uint32_t block_of(uint32_t type)
{
    const rvl_kformat *kf = rvl_kformat_get(type);
    return kf ? kf->block_size : 1;
}

/* (i_layer, n_layer) of a per-layer counter; MoE models take the layer
 * from the name because experts do not come in layer order. */
static void layer_info(const state *s, int counter, const char *name, int *i, int *n)
{
    *i = counter;
    *n = (int)s->p->n_layer;
    if (s->p->n_expert > 1) {
        int l = layer_of(name);
        if (l >= 0)
            *i = l;
    }
}

static uint32_t rules(state *s, uint32_t type, const rvl_qmix_tensor *t, category cat)
{
    const rvl_qmix_params *p = s->p;
    uint32_t ft = s->ftype;
    int il, nl;

    /* MXFP4_MOE: the 3-D tensors MXFP4 (the experts, and as llama.cpp
     * does, DeepSeek's per-head attn_k_b and attn_v_b too, where their rows
     * are whole blocks), everything else Q8_0 */
    if (ft == RVL_FTYPE_MOSTLY_MXFP4_MOE) {
        if (cat == CAT_OUTPUT || (s->tied && cat == CAT_TOKEN_EMBD))
            return p->output_type != NONE ? p->output_type : RVL_TYPE_Q8_0;
        return t->n_dims >= 3 && t->ne[2] > 1 ? RVL_TYPE_MXFP4 : RVL_TYPE_Q8_0;
    }
    if (cat == CAT_OUTPUT || (s->tied && cat == CAT_TOKEN_EMBD)) {
        if (p->output_type != NONE)
            return p->output_type;
        if (s->falcon || t->ne[0] % block_of(type) != 0)
            return RVL_TYPE_Q8_0;
        return type != RVL_TYPE_Q8_0 ? RVL_TYPE_Q6_K : type;
    }
    if (cat == CAT_TOKEN_EMBD)
        return p->embd_type != NONE ? p->embd_type : type;

    if (is_attn_v(cat)) {
        if (ft == RVL_FTYPE_MOSTLY_Q2_K)
            type = s->n_gqa >= 4 ? RVL_TYPE_Q4_K : RVL_TYPE_Q3_K;
        else if (ft == RVL_FTYPE_MOSTLY_Q2_K_S && s->n_gqa >= 4)
            type = RVL_TYPE_Q4_K;
        else if (ft == RVL_FTYPE_MOSTLY_Q3_K_M)
            type = s->i_attn_v < 2 ? RVL_TYPE_Q5_K : RVL_TYPE_Q4_K;
        else if (ft == RVL_FTYPE_MOSTLY_Q3_K_L)
            type = RVL_TYPE_Q5_K;
        else if ((ft == RVL_FTYPE_MOSTLY_IQ4_NL || ft == RVL_FTYPE_MOSTLY_IQ4_XS) && s->n_gqa >= 4)
            type = RVL_TYPE_Q5_K;
        else if ((ft == RVL_FTYPE_MOSTLY_Q4_K_M || ft == RVL_FTYPE_MOSTLY_Q5_K_M) &&
                 use_more_bits(s->i_attn_v, s->n_attn_v))
            type = RVL_TYPE_Q6_K;
        else if (ft == RVL_FTYPE_MOSTLY_Q4_K_S && s->i_attn_v < 4)
            type = RVL_TYPE_Q5_K;
        if (p->is_70b && (type == RVL_TYPE_Q3_K || type == RVL_TYPE_Q4_K))
            type = RVL_TYPE_Q5_K;
        if (p->n_expert == 8)
            type = RVL_TYPE_Q8_0;
        s->i_attn_v++;
    } else if (cat == CAT_ATTN_K) {
        if (p->n_expert == 8)
            type = RVL_TYPE_Q8_0;
    } else if (cat == CAT_FFN_DOWN) {
        layer_info(s, s->i_ffn_down, t->name, &il, &nl);
        if (ft == RVL_FTYPE_MOSTLY_Q2_K)
            type = RVL_TYPE_Q3_K;
        else if (ft == RVL_FTYPE_MOSTLY_Q2_K_S) {
            if (il < nl / 8)
                type = RVL_TYPE_Q4_K;
        } else if (ft == RVL_FTYPE_MOSTLY_Q3_K_M)
            type = il < nl / 16 ? RVL_TYPE_Q5_K
                 : !s->falcon || use_more_bits(il, nl) ? RVL_TYPE_Q4_K : RVL_TYPE_Q3_K;
        else if (ft == RVL_FTYPE_MOSTLY_Q3_K_L)
            type = s->falcon ? RVL_TYPE_Q4_K : RVL_TYPE_Q5_K;
        else if (ft == RVL_FTYPE_MOSTLY_Q4_K_M) {
            if (s->falcon)
                type = il < nl / 16 ? RVL_TYPE_Q6_K
                     : use_more_bits(il, nl) ? RVL_TYPE_Q5_K : RVL_TYPE_Q4_K;
            else if (use_more_bits(il, nl))
                type = RVL_TYPE_Q6_K;
        } else if (il < nl / 8 && (ft == RVL_FTYPE_MOSTLY_IQ4_NL || ft == RVL_FTYPE_MOSTLY_IQ4_XS) &&
                   !p->has_imatrix)
            type = RVL_TYPE_Q5_K;
        else if (ft == RVL_FTYPE_MOSTLY_Q5_K_M && use_more_bits(il, nl))
            type = RVL_TYPE_Q6_K;
        else if (ft == RVL_FTYPE_MOSTLY_Q4_K_S && !s->falcon && il < nl / 8)
            type = RVL_TYPE_Q5_K;
        else if ((ft == RVL_FTYPE_MOSTLY_Q4_0 || ft == RVL_FTYPE_MOSTLY_Q5_0) && p->has_imatrix &&
                 il < nl / 8)
            type = ft == RVL_FTYPE_MOSTLY_Q4_0 ? RVL_TYPE_Q4_1 : RVL_TYPE_Q5_1;
        s->i_ffn_down++;
    } else if (cat == CAT_ATTN_OUTPUT) {
        if (!s->falcon) {
            if (p->n_expert == 8) {
                if (ft == RVL_FTYPE_MOSTLY_Q2_K || ft == RVL_FTYPE_MOSTLY_Q3_K_S ||
                    ft == RVL_FTYPE_MOSTLY_Q3_K_M || ft == RVL_FTYPE_MOSTLY_IQ4_NL ||
                    ft == RVL_FTYPE_MOSTLY_Q4_K_S || ft == RVL_FTYPE_MOSTLY_Q4_K_M ||
                    ft == RVL_FTYPE_MOSTLY_IQ4_XS)
                    type = RVL_TYPE_Q5_K;
            } else {
                if (ft == RVL_FTYPE_MOSTLY_Q2_K)
                    type = RVL_TYPE_Q3_K;
                else if (ft == RVL_FTYPE_MOSTLY_Q3_K_M)
                    type = RVL_TYPE_Q4_K;
                else if (ft == RVL_FTYPE_MOSTLY_Q3_K_L)
                    type = RVL_TYPE_Q5_K;
            }
        } else if (ft == RVL_FTYPE_MOSTLY_Q3_K_L) {
            type = RVL_TYPE_Q4_K;
        }
    } else if (cat == CAT_ATTN_QKV) {
        /* unreachable: attn_qkv is attn_v-like above (as in llama.cpp) */
    } else if (cat == CAT_FFN_GATE) {
        s->i_ffn_gate++;
    } else if (cat == CAT_FFN_UP) {
        s->i_ffn_up++;
    }
    return type;
}

/* Rows that are not whole blocks: a compatible type, then F16. */
static uint32_t fallback(uint32_t type, uint64_t ncols, size_t *n_fallback)
{
    if (ncols % block_of(type) == 0)
        return type;
    uint32_t to;
    switch (type) {
    case RVL_TYPE_IQ1_S: case RVL_TYPE_IQ1_M: case RVL_TYPE_IQ2_XXS: case RVL_TYPE_IQ2_XS:
    case RVL_TYPE_IQ2_S: case RVL_TYPE_IQ3_XXS: case RVL_TYPE_IQ3_S: case RVL_TYPE_IQ4_XS:
        to = RVL_TYPE_IQ4_NL;
        break;
    case RVL_TYPE_Q2_K: case RVL_TYPE_Q3_K: case RVL_TYPE_TQ1_0: case RVL_TYPE_TQ2_0:
        to = RVL_TYPE_Q4_0;
        break;
    case RVL_TYPE_Q4_K: to = RVL_TYPE_Q5_0; break;
    case RVL_TYPE_Q5_K: to = RVL_TYPE_Q5_1; break;
    case RVL_TYPE_Q6_K: to = RVL_TYPE_Q8_0; break;
    default: to = RVL_TYPE_Q8_0; break;   /* llama.cpp has none: ours, for the project formats */
    }
    if (ncols % block_of(to) != 0)
        to = RVL_TYPE_F16;
    (*n_fallback)++;
    return to;
}

/* ======================================================================
 * The plan
 * ====================================================================== */
typedef struct {
    pcre2_code *rx;
    uint32_t type;
} override;

static void free_overrides(override *o, size_t n)
{
    for (size_t i = 0; o && i < n; i++)
        pcre2_code_free(o[i].rx);
    free(o);
}

static int compile_overrides(const rvl_qmix_params *p, override **out)
{
    *out = NULL;
    if (!p->n_overrides)
        return 0;
    override *o = calloc(p->n_overrides, sizeof *o);
    if (!o)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->n_overrides; i++) {
        const char *s = p->overrides[i], *eq = strrchr(s, '=');
        if (!eq || eq == s || !eq[1]) {
            free_overrides(o, p->n_overrides);
            return rvl_seterr(RVL_EINVAL, "--tensor-type '%s': expected REGEX=TYPE", s);
        }
        int ty = rvl_type_from_name(eq + 1);
        const rvl_kformat *kf = ty >= 0 ? rvl_kformat_get((uint32_t)ty) : NULL;
        if (!kf || !kf->quantize || (kf->flags & RVL_KF_ACT)) {
            free_overrides(o, p->n_overrides);
            return rvl_seterr(RVL_EINVAL, "--tensor-type '%s': '%s' is not a type ruvllm can "
                              "quantize to", s, eq + 1);
        }
        int err;
        PCRE2_SIZE erroff;
        o[i].rx = pcre2_compile((PCRE2_SPTR)s, (PCRE2_SIZE)(eq - s), 0, &err, &erroff, NULL);
        if (!o[i].rx) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(err, msg, sizeof msg);
            free_overrides(o, p->n_overrides);
            return rvl_seterr(RVL_EINVAL, "--tensor-type '%s': bad pattern at offset %zu: %s", s,
                              (size_t)erroff, (const char *)msg);
        }
        o[i].type = (uint32_t)ty;
    }
    *out = o;
    return 0;
}

static bool rx_search(pcre2_code *rx, const char *s)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(rx, NULL);
    if (!md)
        return false;
    int m = pcre2_match(rx, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return m >= 0;
}

bool rvl_qmix_needs_imatrix(const rvl_qmix *mix, const char *name, uint32_t type)
{
    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0 ||
        strcmp(name, "output.weight") == 0)
        return false;
    switch (type) {
    case RVL_TYPE_IQ3_XXS: case RVL_TYPE_IQ2_XXS: case RVL_TYPE_IQ2_XS: case RVL_TYPE_IQ2_S:
    case RVL_TYPE_IQ1_M: case RVL_TYPE_IQ1_S:
        return true;
    case RVL_TYPE_Q2_K:
        return mix && mix->ftype == RVL_FTYPE_MOSTLY_Q2_K_S;
    default:
        return false;
    }
}

int rvl_qmix_plan(const rvl_qmix_params *p, const rvl_qmix_tensor *t, size_t n,
                  uint32_t *types, size_t *n_fallback)
{
    size_t nfb = 0;
    visit *order = NULL;
    override *ov = NULL;
    int rc;

    if (!p->mix)
        return rvl_seterr(RVL_EINVAL, "no quantization type");
    if ((rc = compile_overrides(p, &ov)) < 0)
        return rc;
    order = malloc((n ? n : 1) * sizeof *order);
    if (!order) {
        free_overrides(ov, p->n_overrides);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }

    state s = {.p = p, .ftype = p->mix->ftype, .tied = true};
    s.falcon = p->arch && strcmp(p->arch, "falcon") == 0;
    s.n_gqa = p->n_head_kv ? p->n_head / p->n_head_kv : 0;
    for (size_t i = 0; i < n; i++) {
        order[i] = (visit){layer_of(t[i].name), t[i].name, i};
        category c = categorize(t[i].name);
        if (is_attn_v(c))
            s.n_attn_v++;
        if (c == CAT_OUTPUT)
            s.tied = false;
    }
    qsort(order, n, sizeof *order, by_layer_name);

    const rvl_kformat *def = rvl_kformat_get(p->mix->type);
    bool quantized = def && (def->flags & RVL_KF_QUANTIZED);
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k].idx;
        const rvl_qmix_tensor *x = &t[i];
        if (!allows_quantization(p, x)) {
            types[i] = x->type;
            continue;
        }
        category c = categorize(x->name);
        if (p->embd_type != NONE && c == CAT_TOKEN_EMBD) {
            types[i] = p->embd_type;
            continue;
        }
        if (p->output_type != NONE && c == CAT_OUTPUT) {
            types[i] = p->output_type;
            continue;
        }
        uint32_t ty = p->mix->type;
        if (quantized) {
            bool manual = false;
            for (size_t j = 0; j < p->n_overrides; j++) {
                if (rx_search(ov[j].rx, x->name)) {
                    ty = ov[j].type;
                    manual = true;
                    break;
                }
            }
            if (!manual && !p->pure && p->mix->llama_rules)
                ty = rules(&s, ty, x, c);
            ty = fallback(ty, x->ne[0], &nfb);
        }
        types[i] = ty;
    }
    free(order);
    free_overrides(ov, p->n_overrides);
    if (n_fallback)
        *n_fallback = nfb;
    return 0;
}
