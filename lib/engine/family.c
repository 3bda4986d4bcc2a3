/*
 * family.c - model families as descriptions.
 *
 * A family is data (rvl_family, engine/family.h): its architecture name,
 * its RoPE rotation, which Q/K/V biases its files carry, and the recipe
 * its layers follow (rvl_block, ruvllm.h: where the norms stand, QK-norm,
 * the activation, scales, soft-caps, sliding windows, fused tensors). The
 * file completes the recipe: the feature keys and tensors below switch
 * features on. The loader (engine/model.c) reads the hyper-parameter keys
 * and tensors every family shares; the forward pass (engine/forward.c)
 * reads the recipe's flags in its one loop.
 *
 * Adding a family is an entry in families[] (and, where the family is
 * truly different, a small function beside it). A feature the file asks
 * for is refused at load, naming the key or tensor that asked for it,
 * never ignored: RVL_EUNSUPPORTED when the forward pass does not
 * implement it yet, RVL_EFORMAT when the family's description lacks it.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "engine/family.h"

/* ====================================================================
 * The families
 * ==================================================================== */

/* The llama block: pre-attention RMSNorm, attention, residual, pre-FFN
 * RMSNorm, SiLU-gated FFN (SwiGLU), residual. */
#define LLAMA_BLOCK .norm_pre_attn = true, .norm_pre_ffn = true, .act = RVL_ACT_SILU
/* Gemma's: the attention and FFN outputs RMS-normed again before their
 * residuals (post_attention_norm, post_ffw_norm), a GELU-gated FFN, and
 * sliding-window layers between global ones. */
#define GEMMA_BLOCK .norm_pre_attn = true, .norm_post_attn = true, .norm_pre_ffn = true, \
                    .norm_post_ffn = true, .act = RVL_ACT_GELU_TANH
/* What a file may switch on in a family with windows and soft-caps. */
#define SOFTCAPS .attn_softcap = 1, .final_softcap = 1
#define WINDOW .swa_window = 1

/* What a file may switch on in a family with experts. */
#define MOE_MAY .moe_renorm = true

static void gemma_finish(rvl_hparams *hp);

static const rvl_family families[] = {
    /* Llama 2/3/3.x, SmolLM, TinyLlama, Mistral 7B (whose window llama.cpp's
     * converter does not write; a file that sets one gets it), Mixtral
     * (experts renormalized, expert_count) */
    {.name = "llama", .rope_type = RVL_ROPE_NORM, .bias = RVL_FAMILY_BIAS_OPTIONAL,
     .block = {LLAMA_BLOCK}, .may = {WINDOW, .moe = true, MOE_MAY}, .moe_renorm = true},
    /* Qwen1.5-MoE, Qwen2-MoE: Q/K/V biases, experts whose weights are not
     * renormalized, a shared expert with a sigmoid gate */
    {.name = "qwen2moe", .rope_type = RVL_ROPE_NEOX, .bias = RVL_FAMILY_BIAS_REQUIRED,
     .block = {LLAMA_BLOCK, .qkv_bias = true, .moe = true, .moe_shared = true,
               .moe_shared_gate = true}, .may = {MOE_MAY}},
    /* Qwen3-MoE (Qwen3-30B-A3B ...): Qwen3's attention, experts renormalized */
    {.name = "qwen3moe", .rope_type = RVL_ROPE_NEOX, .bias = RVL_FAMILY_BIAS_NONE,
     .block = {LLAMA_BLOCK, .qk_norm = true, .moe = true}, .may = {MOE_MAY},
     .moe_renorm = true},
    /* DeepSeek-V2, V2-Lite, V3 and their kin (deepseek2): multi-head latent
     * attention (queries through q_lora_rank, or one attn_q in the Lite
     * models; keys and values from the kv_lora_rank latent), leading dense
     * layers, then experts with shared ones; V3's router: sigmoid scores,
     * a selection bias (exp_probs_b), group-limited top-k, renormalized,
     * scaled (expert_weights_scale) */
    {.name = "deepseek2", .rope_type = RVL_ROPE_NORM, .bias = RVL_FAMILY_BIAS_NONE,
     .block = {LLAMA_BLOCK, .mla = true, .moe = true, .moe_shared = true},
     .may = {MOE_MAY, .moe_gating = RVL_MOE_SIGMOID, .moe_sel_bias = true, .moe_scale = 1,
             .moe_groups = 1, .moe_groups_used = 1, .moe_dense_lead = 1}},
    /* gpt-oss (OpenAI's open-weight models): Q/K/V and output biases,
     * learned attention sinks, a 128-token window on every other layer
     * (the first), experts with biases behind a top-k-then-softmax router
     * and the clamped SwiGLU; its FFN norm is named post_attention_norm;
     * YaRN with transformers' unrounded ramp (truncate: false) */
    {.name = "gpt-oss", .rope_type = RVL_ROPE_NEOX, .bias = RVL_FAMILY_BIAS_REQUIRED,
     .block = {.norm_pre_attn = true, .norm_pre_ffn = true, .act = RVL_ACT_SWIGLU_OAI,
               .qkv_bias = true, .attn_out_bias = true, .attn_sinks = true,
               .swa_window = 128, .swa_period = 2, .moe = true,
               .moe_gating = RVL_MOE_SOFTMAX_WEIGHT, .moe_bias = true, .yarn_exact_ramp = true},
     .may = {WINDOW}, .ffn_norm = "post_attention_norm"},
    /* Ministral 3, Mistral Small 3.x/Magistral text (mistral3): the llama
     * block with YaRN (rope.scaling.yarn_log_multiplier) and Llama 4's
     * attention temperature (attention.temperature_scale) */
    {.name = "mistral3", .rope_type = RVL_ROPE_NORM, .bias = RVL_FAMILY_BIAS_NONE,
     .block = {LLAMA_BLOCK}, .may = {.attn_temp_scale = 1}},
    /* Qwen2, Qwen2.5: Q/K/V biases, NeoX rotation */
    {.name = "qwen2", .rope_type = RVL_ROPE_NEOX, .bias = RVL_FAMILY_BIAS_REQUIRED,
     .block = {LLAMA_BLOCK, .qkv_bias = true}},
    /* Qwen3 (dense): per-head RMSNorm of Q and K before RoPE, no biases,
     * NeoX rotation; head_dim from attention.key_length */
    {.name = "qwen3", .rope_type = RVL_ROPE_NEOX, .bias = RVL_FAMILY_BIAS_NONE,
     .block = {LLAMA_BLOCK, .qk_norm = true}},
    /* Gemma 2: every other layer windowed (attention.sliding_window,
     * 4096 when the file does not say, as llama.cpp assumes),
     * attention and final logits soft-capped (attn_logit_softcapping,
     * final_logit_softcapping), embeddings times sqrt(n_embd) */
    {.name = "gemma2", .rope_type = RVL_ROPE_NEOX, .bias = RVL_FAMILY_BIAS_NONE,
     .block = {GEMMA_BLOCK, .swa_window = 4096, .swa_period = 2}, .may = {WINDOW, SOFTCAPS},
     .finish = gemma_finish},
    /* Gemma 3 (text): five windowed layers, then a global one; QK-norm;
     * windowed layers on RoPE base 10000 without the file's RoPE scaling
     * (which is the global layers'), unless rope.freq_base_swa says */
    {.name = "gemma3", .rope_type = RVL_ROPE_NEOX, .bias = RVL_FAMILY_BIAS_NONE,
     .block = {GEMMA_BLOCK, .qk_norm = true, .swa_period = 6, .swa_rope_base = 10000},
     .may = {WINDOW, SOFTCAPS}, .finish = gemma_finish},
    /* Phi-3, Phi-3.5, Phi-4: gate and up in one ffn_up tensor (gate rows
     * first), Q/K/V in one attn_qkv where the file has it, LongRoPE
     * factors (rope_factors_long/short, read with the weights); every
     * layer windowed where the file sets a window shorter than its context */
    {.name = "phi3", .rope_type = RVL_ROPE_NEOX, .bias = RVL_FAMILY_BIAS_NONE,
     .block = {LLAMA_BLOCK, .fused_gate_up = true}, .may = {WINDOW, .fused_qkv = true}},
};

/* What llama.cpp derives for Gemma rather than reads from the file: the
 * embedding scale sqrt(n_embd), and for the 27B models (by layer count, as
 * llama.cpp decides) queries scaled by 1/sqrt(n_embd / n_head), their
 * query_pre_attn_scalar, instead of 1/sqrt(key_length). */
static void gemma_finish(rvl_hparams *hp)
{
    const bool is27b = (strcmp(hp->arch, "gemma2") == 0 && hp->n_layer == 46) ||
                       (strcmp(hp->arch, "gemma3") == 0 && hp->n_layer == 62);
    hp->block.embd_scale = sqrtf((float)hp->n_embd);
    if (is27b && !hp->block.q_scale)
        hp->block.q_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
}

const rvl_family *rvl_family_find(const char *arch)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(families[i].name, arch) == 0)
            return &families[i];
    return NULL;
}

const char *rvl_family_names(void)
{
    return "llama, mistral3, qwen2, qwen2moe, qwen3, qwen3moe, deepseek2, gpt-oss, gemma2, gemma3, "
           "phi3";
}

/* ====================================================================
 * Recipe features: names, and which backend lacks what
 * ==================================================================== */

rvl_layer_kind rvl_family_layer_kind(const rvl_block *b, uint32_t l)
{
    if (!b->swa_window || (b->swa_period && (l + 1) % b->swa_period == 0))
        return RVL_LAYER_GLOBAL;
    return RVL_LAYER_WINDOW;
}

const char *rvl_family_missing(const rvl_block *b, const rvl_block *have)
{
    /* the pre-norms are the block's shape: equal, not a subset */
    if (b->norm_pre_attn != have->norm_pre_attn)
        return b->norm_pre_attn ? "norm_pre_attn" : "no norm_pre_attn";
    if (b->norm_pre_ffn != have->norm_pre_ffn)
        return b->norm_pre_ffn ? "norm_pre_ffn" : "no norm_pre_ffn";
#define FLAG(f) if (b->f && !have->f) return #f
    FLAG(norm_post_attn);
    FLAG(norm_post_ffn);
    FLAG(qk_norm);
    FLAG(qkv_bias);
    FLAG(fused_qkv);
    FLAG(fused_gate_up);
    FLAG(embd_scale);
    FLAG(q_scale);
    FLAG(attn_softcap);
    FLAG(final_softcap);
    FLAG(swa_window);
    FLAG(swa_period);
    FLAG(swa_rope_base);
    FLAG(attn_temp_scale);
    FLAG(moe);
    FLAG(moe_renorm);
    FLAG(moe_shared);
    FLAG(moe_shared_gate);
    FLAG(moe_sel_bias);
    FLAG(moe_bias);
    FLAG(moe_scale);
    FLAG(moe_groups);
    FLAG(moe_groups_used);
    FLAG(moe_dense_lead);
    FLAG(mla);
    FLAG(attn_sinks);
    FLAG(attn_out_bias);
    FLAG(yarn_exact_ramp);
#undef FLAG
    /* the activation and the gating: `have` names the last one of its
     * enum a backend implements, and with it every one before */
    if (b->moe_gating > RVL_MOE_SOFTMAX && b->moe_gating > have->moe_gating)
        return b->moe_gating == RVL_MOE_SIGMOID ? "moe_gating sigmoid" : "moe_gating softmax_weight";
    if (b->act > have->act)
        return b->act == RVL_ACT_GELU_TANH ? "act gelu_tanh" : "act swiglu_oai";
    return NULL;
}

/* ====================================================================
 * What a file asks for
 * ==================================================================== */

/* Keys (under "<arch>.", llama.cpp's names) and tensors (blk.N.<name> in
 * any layer: the weight loader then requires it in every layer that has
 * the feature) that switch a recipe feature on. A key at 0 or at its
 * neutral value asks for nothing; so does a window as long as the
 * training context (SRC_WINDOW). */
typedef enum { SRC_F32, SRC_U32, SRC_WINDOW, SRC_BOOL, SRC_TENSOR } src_kind;
static const struct {
    const char *name;
    src_kind kind;
    size_t off;          /* the rvl_block field: float, uint32_t or bool */
    float neutral;       /* keys: the value that asks for nothing besides 0 */
} sources[] = {
    {"embedding_scale", SRC_F32, offsetof(rvl_block, embd_scale), 1},
    {"attention.scale", SRC_F32, offsetof(rvl_block, q_scale), 0},
    {"attn_logit_softcapping", SRC_F32, offsetof(rvl_block, attn_softcap), 0},
    {"final_logit_softcapping", SRC_F32, offsetof(rvl_block, final_softcap), 0},
    {"attention.sliding_window", SRC_WINDOW, offsetof(rvl_block, swa_window), 0},
    {"rope.freq_base_swa", SRC_F32, offsetof(rvl_block, swa_rope_base), 0},
    {"attention.temperature_scale", SRC_F32, offsetof(rvl_block, attn_temp_scale), 0},
    {"expert_weights_scale", SRC_F32, offsetof(rvl_block, moe_scale), 1},
    {"expert_weights_norm", SRC_BOOL, offsetof(rvl_block, moe_renorm), 0},
    {"expert_gating_func", SRC_U32, offsetof(rvl_block, moe_gating), RVL_MOE_SOFTMAX},
    {"expert_group_count", SRC_U32, offsetof(rvl_block, moe_groups), 1},
    {"expert_group_used_count", SRC_U32, offsetof(rvl_block, moe_groups_used), 0},
    {"leading_dense_block_count", SRC_U32, offsetof(rvl_block, moe_dense_lead), 0},
    {"attn_q_norm.weight", SRC_TENSOR, offsetof(rvl_block, qk_norm), 0},
    {"attn_k_norm.weight", SRC_TENSOR, offsetof(rvl_block, qk_norm), 0},
    {"post_attention_norm.weight", SRC_TENSOR, offsetof(rvl_block, norm_post_attn), 0},
    {"post_ffw_norm.weight", SRC_TENSOR, offsetof(rvl_block, norm_post_ffn), 0},
    {"attn_qkv.weight", SRC_TENSOR, offsetof(rvl_block, fused_qkv), 0},
    {"attn_output.bias", SRC_TENSOR, offsetof(rvl_block, attn_out_bias), 0},
    {"attn_sinks.weight", SRC_TENSOR, offsetof(rvl_block, attn_sinks), 0},
    {"attn_kv_a_mqa.weight", SRC_TENSOR, offsetof(rvl_block, mla), 0},
    {"ffn_gate_inp.weight", SRC_TENSOR, offsetof(rvl_block, moe), 0},
    {"ffn_gate_inp.bias", SRC_TENSOR, offsetof(rvl_block, moe_bias), 0},
    {"exp_probs_b.bias", SRC_TENSOR, offsetof(rvl_block, moe_sel_bias), 0},
    {"ffn_up_shexp.weight", SRC_TENSOR, offsetof(rvl_block, moe_shared), 0},
    {"ffn_gate_inp_shexp.weight", SRC_TENSOR, offsetof(rvl_block, moe_shared_gate), 0},
};

/* The first layer with tensor blk.N.<suffix>, its name into name; -1
 * when no layer has it. */
static int first_layer_with(const rvl_file *f, const rvl_hparams *hp, const char *suffix,
                            char *name, size_t size)
{
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        snprintf(name, size, "blk.%u.%s", l, suffix);
        if (rvl_file_find_tensor(f, name))
            return (int)l;
    }
    return -1;
}

/* Keys that change the computation and have no recipe field yet: present
 * at a value other than their neutral one, they are refused. */
static const struct {
    const char *name;
    float neutral;
} unsupported_keys[] = {
    {"logit_scale", 1.0f},
    {"residual_scale", 1.0f},
};

/* The feature `one` asks for, if the family has it neither in its recipe
 * nor among what its files may switch on: its name, or NULL. */
static const char *family_lacks(const rvl_family *fam, rvl_block one)
{
    one.norm_pre_attn = fam->block.norm_pre_attn;
    one.norm_pre_ffn = fam->block.norm_pre_ffn;
    const char *miss = rvl_family_missing(&one, &fam->block);
    rvl_block may = fam->may;
    may.norm_pre_attn = one.norm_pre_attn;
    may.norm_pre_ffn = one.norm_pre_ffn;
    may.act = fam->block.act;
    return miss && rvl_family_missing(&one, &may) ? miss : NULL;
}

static int read_f32(const rvl_file *f, const char *key, float *v)
{
    double d;
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    if (!kv)
        return 0;
    if (rvl_kv_get_f64(kv, &d) < 0 || !isfinite(d) || !isfinite((float)d))
        return rvl_seterr(RVL_EFORMAT, "%s: metadata key '%s' is not a finite number",
                          rvl_file_path(f), key);
    *v = (float)d;
    return 1;
}

static int read_u32(const rvl_file *f, const char *key, uint32_t *v)
{
    uint64_t u;
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    if (!kv)
        return 0;
    if (rvl_kv_get_u64(kv, &u) < 0 || u > UINT32_MAX)
        return rvl_seterr(RVL_EFORMAT, "%s: metadata key '%s' is not a 32-bit unsigned integer",
                          rvl_file_path(f), key);
    *v = (uint32_t)u;
    return 1;
}

/* <arch>.attention.sliding_window_pattern: every n-th layer global (an
 * integer; 0: every layer windowed), or one bool per layer (true:
 * windowed) -- accepted where it is such a period, refused otherwise. */
static int window_pattern(const rvl_family *fam, const rvl_file *f, rvl_hparams *hp)
{
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch);
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    if (!kv)
        return 0;
    if (!fam->block.swa_period && !fam->may.swa_window && !fam->block.swa_window)
        return rvl_seterr(RVL_EFORMAT, "%s: metadata key '%s' asks for the block feature "
                          "'swa_period', which architecture '%s' does not have",
                          rvl_file_path(f), key, fam->name);
    uint64_t period = 0;
    if (kv->type != RVL_GGUF_ARRAY) {
        if (rvl_kv_get_u64(kv, &period) < 0 || period > UINT16_MAX)
            return rvl_seterr(RVL_EFORMAT, "%s: metadata key '%s' is not a layer period",
                              rvl_file_path(f), key);
    } else {
        if (kv->arr_type != RVL_GGUF_BOOL || kv->n != hp->n_layer)
            return rvl_seterr(RVL_EFORMAT, "%s: metadata key '%s' is not one bool per layer (%u)",
                              rvl_file_path(f), key, hp->n_layer);
        const unsigned char *w = kv->data;
        /* the first global layer's index + 1, and every layer against it */
        for (uint64_t l = 0; l < kv->n && !period; l++)
            period = w[l] ? 0 : l + 1;
        rvl_block b = {.swa_window = 1, .swa_period = (uint32_t)period};
        for (uint32_t l = 0; l < hp->n_layer; l++)
            if ((w[l] != 0) != (rvl_family_layer_kind(&b, l) == RVL_LAYER_WINDOW))
                return rvl_seterr(RVL_EUNSUPPORTED, "%s: metadata key '%s': windowed and global "
                                  "layers in other than a fixed period are not implemented "
                                  "(layer %u)", rvl_file_path(f), key, l);
    }
    hp->block.swa_period = (uint32_t)period;
    return 0;
}

int rvl_family_recipe(const rvl_family *fam, const rvl_file *f, rvl_hparams *hp,
                      const rvl_block *have)
{
    const char *path = rvl_file_path(f);
    const char *miss;
    char key[128];
    int rc;

    hp->rope_type = fam->rope_type;
    hp->block = fam->block;
    if ((miss = rvl_family_missing(&hp->block, have)))
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: architecture '%s': its block feature '%s' is not "
                          "implemented", path, fam->name, miss);

    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
        const bool tensor = sources[i].kind == SRC_TENSOR;
        char *field = (char *)&hp->block + sources[i].off;
        rvl_block one = {0};
        char *one_field = (char *)&one + sources[i].off;
        if (!tensor)
            snprintf(key, sizeof key, "%s.%s", hp->arch, sources[i].name);

        /* what the file asks for, into the recipe and into `one` alone */
        if (tensor) {
            char own[96];
            snprintf(own, sizeof own, "%s.weight", fam->ffn_norm ? fam->ffn_norm : "ffn_norm");
            if (strcmp(sources[i].name, own) == 0 || /* the family's FFN norm is no feature */
                first_layer_with(f, hp, sources[i].name, key, sizeof key) < 0)
                continue;
            *(bool *)field = *(bool *)one_field = true;
        } else if (sources[i].kind == SRC_BOOL) {
            const rvl_kv *kv = rvl_file_find_kv(f, key);
            uint64_t u = 0;
            if (!kv)
                continue;
            if (kv->type != RVL_GGUF_BOOL)
                return rvl_seterr(RVL_EFORMAT, "%s: metadata key '%s' is not a bool", path, key);
            u = *(const unsigned char *)kv->data;
            if (!u)
                continue;
            *(bool *)field = *(bool *)one_field = true;
        } else if (sources[i].kind == SRC_F32) {
            float v = 0;
            if ((rc = read_f32(f, key, &v)) <= 0) {
                if (rc < 0)
                    return rc;
                continue;
            }
            if (v == 0 || v == sources[i].neutral)
                continue;
            *(float *)field = *(float *)one_field = v;
        } else {
            uint32_t v = 0;
            if ((rc = read_u32(f, key, &v)) <= 0) {
                if (rc < 0)
                    return rc;
                continue;
            }
            if (v == 0 || (sources[i].kind == SRC_WINDOW && v >= hp->n_ctx_train) ||
                (sources[i].kind == SRC_U32 && v == (uint32_t)sources[i].neutral))
                continue;
            *(uint32_t *)field = *(uint32_t *)one_field = v;
        }

        /* `one` against the loop, then against the family (the pre-norms
         * are the block's shape, not asked for by a key) */
        one.norm_pre_attn = have->norm_pre_attn;
        one.norm_pre_ffn = have->norm_pre_ffn;
        if ((miss = rvl_family_missing(&one, have)))
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: %s '%s' asks for the block feature '%s', "
                              "which is not implemented", path, tensor ? "tensor" : "metadata key",
                              key, miss);
        if ((miss = family_lacks(fam, one)))
            return rvl_seterr(RVL_EFORMAT, "%s: %s '%s' asks for the block feature '%s', which "
                              "architecture '%s' does not have", path,
                              tensor ? "tensor" : "metadata key", key, miss, fam->name);
    }
    for (size_t i = 0; i < sizeof unsupported_keys / sizeof unsupported_keys[0]; i++) {
        float v;
        snprintf(key, sizeof key, "%s.%s", hp->arch, unsupported_keys[i].name);
        if ((rc = read_f32(f, key, &v)) < 0)
            return rc;
        if (rc > 0 && v != unsupported_keys[i].neutral)
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: metadata key '%s' (%g) is not implemented",
                              path, key, (double)v);
    }
    if ((rc = window_pattern(fam, f, hp)) < 0)
        return rc;
    if (fam->moe_renorm) /* the family's rule, whatever the file says */
        hp->block.moe_renorm = hp->block.moe;
    if (fam->finish) {
        fam->finish(hp);
        if ((miss = rvl_family_missing(&hp->block, have)))
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: architecture '%s': its block feature '%s' is "
                              "not implemented", path, fam->name, miss);
    }
    return 0;
}
