/*
 * convert_hf.c - a Hugging Face model directory as the input of
 * quantize and dequant.
 *
 * The directory (config.json, one or sharded *.safetensors,
 * tokenizer.json, tokenizer_config.json) is imported into a GGUF file of
 * the same weights next to the output - what llama.cpp's
 * convert_hf_to_gguf.py makes with --outtype auto, facts of both formats
 * in our own code: hyper-parameters from config.json, the vocabulary,
 * token types, merges, special tokens and the pre-tokenizer's name from
 * tokenizer.json / tokenizer_config.json (byte-level BPE -> "gpt2";
 * BPE with byte_fallback -> SentencePiece "llama", scores from the merge
 * ranks, <0xHH> byte tokens), the chat template; tensors
 * renamed (model.layers.N.self_attn.q_proj -> blk.N.attn_q, ...), llama's
 * Q/K rows reordered from Hugging Face's two halves to interleaved pairs,
 * mixture-of-experts layers' per-expert matrices stacked into one 3-D
 * tensor per kind (ffn_{gate,up,down}_exps), DeepSeek's kv_b_proj split
 * into attn_k_b (transposed per head) and attn_v_b, gpt-oss's fused 3-D
 * experts transposed and de-interleaved, or their MXFP4 blocks repacked
 * into GGUF's MXFP4 as they are,
 * matrices kept in their dtype (F32, F16, BF16), in F32 what the converter
 * keeps in F32 (1-D tensors, norms, routers, biases). The
 * import is opened and unlinked at once (the mapping keeps it), so nothing
 * of it outlives the process.
 */
#include <errno.h>
#include <math.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "convert/convert_int.h"
#include "engine/model.h"
#include "formats.h"

/* Vocabularies larger than this are refused (the largest real ones have
 * about 256k tokens). */
#define MAX_VOCAB (1u << 21)

/* ======================================================================
 * JSON files
 * ====================================================================== */
static int parse_json(const char *name, const void *buf, size_t n, cJSON **out)
{
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(buf, n, &end, false);
    if (!*out) {
        uint64_t off = end ? (uint64_t)(end - (const char *)buf) : 0;
        return rvl_seterr(RVL_EFORMAT, "%s: not valid JSON (byte %llu)", name, (unsigned long long)off);
    }
    return 0;
}

static int read_json(const char *dir, const char *name, bool required, cJSON **out)
{
    char path[4200];
    rvl_map m = {0};
    *out = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (access(path, F_OK) != 0)
        return required ? rvl_seterr(RVL_ENOTFOUND, "%s: missing (a Hugging Face model "
                                     "directory has config.json, tokenizer.json, "
                                     "tokenizer_config.json and *.safetensors)", path) : 0;
    int rc = rvl_map_file(&m, path);
    if (rc < 0)
        return rc;
    rc = parse_json(path, m.base, (size_t)m.size, out);
    rvl_map_unmap(&m);
    return rc;
}

static bool jnum(const cJSON *o, const char *k, double *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(x))
        return false;
    *v = x->valuedouble;
    return true;
}

static bool ju32(const cJSON *o, const char *k, uint32_t *v)
{
    double d;
    if (!jnum(o, k, &d) || d < 0 || d > UINT32_MAX || d != (double)(uint32_t)d)
        return false;
    *v = (uint32_t)d;
    return true;
}

/* A special token's text in tokenizer_config.json: a string or {"content": ...}. */
static const char *jtoken(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (cJSON_IsObject(x))
        x = cJSON_GetObjectItemCaseSensitive(x, "content");
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* ======================================================================
 * Hyper-parameters
 * ====================================================================== */
typedef struct {
    const char *arch;       /* llama.cpp's: llama (also Mistral), qwen2, qwen3, gemma2, gemma3, phi3 */
    uint32_t n_layer, n_embd, n_ff, n_head, n_head_kv, n_ctx, head_dim, n_vocab;
    bool has_head_dim;      /* config.json says head_dim: key/value_length written */
    double eps, rope_base;
    const char *rope_type;  /* NULL, "linear", "yarn" (phi3's LongRoPE: long_f/short_f) */
    double rope_factor;
    uint32_t rope_orig_ctx;
    double yarn[4];         /* ext_factor, attn_factor, beta_fast, beta_slow; NaN: not in config */
    /* Ministral 3 (mistral3): YaRN's mscale_all_dim and Llama 4's attention
     * temperature beta; NaN: not in config */
    double yarn_log_mul, temp_scale;
    bool tied;
    /* Gemma */
    bool norm_shift;        /* RMSNorm gains stored as 1 + w */
    double attn_softcap, final_softcap;   /* 0: none */
    double swa_rope_base;   /* 0: none */
    double q_scale;         /* 0: llama.cpp's own; else attention.scale */
    /* sliding windows: Gemma's, Mistral's, Phi-3's (which writes 0 for none) */
    bool has_window;
    uint32_t window;
    /* Phi-3 */
    uint32_t rope_dim;      /* 0: not written */
    const cJSON *long_f, *short_f;   /* LongRoPE factors (arrays in config.json) */
    double attn_factor;
    /* mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE); 0: dense or
     * not in config.json */
    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    uint32_t k_len, v_len;  /* attention.key_length/value_length (head_dim but for deepseek2) */
    /* DeepSeek (deepseek2): MLA's ranks and per-head widths, the experts'
     * layout and router; 0 / NaN: not written */
    uint32_t q_lora, kv_lora, k_mla, v_mla, n_dense_lead, n_shexp, n_group, n_group_used, gating;
    bool has_group, has_group_used, w_norm;
    double w_scale;
} hparams;

/* The loader's validation (engine/model.c), so that the import never
 * writes a GGUF that `run` refuses or, for a value that overflowed to
 * infinity, misreads. */
static int check_hparams(const char *path, const hparams *h)
{
    rvl_hparams hp = {0};
    snprintf(hp.arch, sizeof hp.arch, "%s", h->arch);
    hp.n_layer = h->n_layer;
    hp.n_embd = h->n_embd;
    hp.n_ff = h->n_ff;
    hp.n_head = h->n_head;
    hp.n_head_kv = h->n_head_kv;
    hp.head_dim = h->head_dim;
    hp.rope_dim = h->rope_dim ? h->rope_dim : h->head_dim;
    hp.n_ctx_train = h->n_ctx;
    hp.rms_eps = (float)h->eps;
    hp.rope_base = (float)h->rope_base;
    hp.rope_scaling = !h->rope_type ? RVL_ROPE_SCALING_NONE
                      : !strcmp(h->rope_type, "linear") ? RVL_ROPE_SCALING_LINEAR
                                                        : RVL_ROPE_SCALING_YARN;
    hp.rope_factor = h->rope_type ? (float)h->rope_factor : 1.0f;
    hp.rope_orig_ctx = h->rope_orig_ctx ? h->rope_orig_ctx : h->n_ctx;
    hp.rope_attn_factor = 1.0f;
    hp.yarn_beta_fast = 32.0f;
    hp.yarn_beta_slow = 1.0f;
    int rc = rvl_model_check_hparams(&hp, path);
    return rc < 0 ? rvl_preerr(rc, "config.json") : 0;
}

/* A key that changes the computation and that the GGUF file cannot carry
 * (or we do not carry yet): refused by name, never ignored. */
static int refuse(const char *path, const char *key, const char *why)
{
    return rvl_seterr(RVL_EUNSUPPORTED, "%s: %s: %s; not imported", path, key, why);
}

static const cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static bool jstr_is(const cJSON *o, const char *k, const char *v)
{
    const cJSON *x = jget(o, k);
    return cJSON_IsString(x) && !strcmp(x->valuestring, v);
}

/* Hugging Face architectures and the llama.cpp architecture each becomes. */
static const struct {
    const char *hf, *arch;
} hf_archs[] = {
    {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "llama"},
    {"Qwen2ForCausalLM", "qwen2"}, {"Qwen3ForCausalLM", "qwen3"},
    {"Gemma2ForCausalLM", "gemma2"}, {"Gemma3ForCausalLM", "gemma3"},
    {"Gemma3ForConditionalGeneration", "gemma3"},   /* its text part (text_config) */
    {"Phi3ForCausalLM", "phi3"}, {"Ministral3ForCausalLM", "mistral3"},
    {"MixtralForCausalLM", "llama"}, {"Qwen2MoeForCausalLM", "qwen2moe"},
    {"Qwen3MoeForCausalLM", "qwen3moe"}, {"DeepseekV2ForCausalLM", "deepseek2"},
    {"DeepseekV3ForCausalLM", "deepseek2"}, {"GptOssForCausalLM", "gpt-oss"},
};

/* The families whose converter is llama.cpp's LlamaModel: Q/K rows
 * permuted, vocab_size and rope.dimension_count written. */
static bool llama_like(const char *arch) { return !strcmp(arch, "llama") || !strcmp(arch, "mistral3"); }

/* The activation the family computes with: hidden_act / hidden_activation
 * must name it when present. */
static int check_act(const char *path, const cJSON *c, bool gelu)
{
    static const char *const keys[] = {"hidden_act", "hidden_activation"};
    for (int i = 0; i < 2; i++) {
        const cJSON *x = jget(c, keys[i]);
        if (cJSON_IsNull(x) || !x)
            continue;
        bool ok = cJSON_IsString(x) && (gelu ? !strcmp(x->valuestring, "gelu_pytorch_tanh") ||
                                                   !strcmp(x->valuestring, "gelu_tanh")
                                             : !strcmp(x->valuestring, "silu"));
        if (!ok)
            return refuse(path, keys[i], gelu ? "the family computes GELU (tanh)" : "the family computes SiLU");
    }
    return 0;
}

/* Gemma's windowed layers: layer_types (or the older sliding_window_pattern)
 * must be the family's (gemma2: every other layer, the first windowed;
 * gemma3: five windowed, then a global one), which is what a GGUF file
 * implies. *windowed: false when no layer is. */
static int check_layer_types(const char *path, const cJSON *c, const hparams *h, uint32_t period,
                             bool *windowed)
{
    const cJSON *lt = jget(c, "layer_types"), *e;
    *windowed = true;
    double pat;
    if (jnum(c, "sliding_window_pattern", &pat)) {
        if (pat == 1)
            *windowed = false;
        else if (pat != period)
            return refuse(path, "sliding_window_pattern", "llama.cpp's layout of windowed layers differs");
    }
    if (!cJSON_IsArray(lt))
        return 0;
    if ((uint32_t)cJSON_GetArraySize(lt) != h->n_layer)
        return rvl_seterr(RVL_EFORMAT, "%s: layer_types has %d entries for %u layers", path,
                          cJSON_GetArraySize(lt), h->n_layer);
    uint32_t l = 0, n_win = 0;
    cJSON_ArrayForEach(e, lt) {
        bool win = cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention");
        if (!win && !(cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention")))
            return refuse(path, "layer_types", "a layer type other than sliding_attention/full_attention");
        n_win += win;
        if (*windowed && win != ((l + 1) % period != 0))
            return refuse(path, "layer_types", "windowed and global layers not in llama.cpp's layout");
        l++;
    }
    if (n_win == 0)
        *windowed = false;
    return 0;
}

/* RoPE: rope_theta, rope_scaling (or transformers 5's rope_parameters, per
 * layer type for Gemma 3), as convert_hf_to_gguf.py's TextModel reads them. */
static int read_rope(const char *path, const cJSON *c, hparams *h, double default_base)
{
    const cJSON *rp = jget(c, "rope_parameters"), *rs = jget(c, "rope_scaling");
    const cJSON *params = cJSON_IsObject(rp) ? rp : cJSON_IsObject(rs) ? rs : NULL;
    const cJSON *full = params && cJSON_IsObject(jget(params, "full_attention")) ? jget(params, "full_attention") : params;
    const cJSON *swa = params ? jget(params, "sliding_attention") : NULL;
    if (!(full && jnum(full, "rope_theta", &h->rope_base)) && !jnum(c, "rope_theta", &h->rope_base))
        h->rope_base = default_base;
    if (cJSON_IsObject(swa)) {
        if (!jnum(swa, "rope_theta", &h->swa_rope_base))
            return rvl_seterr(RVL_EFORMAT, "%s: rope_parameters.sliding_attention without rope_theta", path);
        const cJSON *t = jget(swa, "rope_type");
        if (cJSON_IsString(t) && strcmp(t->valuestring, "default") != 0)
            return refuse(path, "rope_parameters.sliding_attention.rope_type",
                          "windowed layers with scaled RoPE have no GGUF key");
    } else if (!jnum(c, "rope_local_base_freq", &h->swa_rope_base)) {
        h->swa_rope_base = 0;
    }
    for (int i = 0; i < 4; i++)
        h->yarn[i] = NAN;
    h->yarn_log_mul = h->temp_scale = NAN;
    if (!full)
        return 0;
    const cJSON *t = jget(full, "rope_type");
    if (!cJSON_IsString(t))
        t = jget(full, "type");
    const char *ty = cJSON_IsString(t) ? t->valuestring : "default";
    if (!strcmp(ty, "linear") || !strcmp(ty, "yarn")) {
        h->rope_type = !strcmp(ty, "linear") ? "linear" : "yarn";
        if (!jnum(full, "factor", &h->rope_factor))
            return rvl_seterr(RVL_EFORMAT, "%s: rope_scaling without a factor", path);
        ju32(full, "original_max_position_embeddings", &h->rope_orig_ctx);
        if (h->rope_type[0] == 'y') {
            if (!h->rope_orig_ctx)
                return rvl_seterr(RVL_EFORMAT, "%s: YaRN without original_max_position_embeddings", path);
            jnum(full, "extrapolation_factor", &h->yarn[0]);
            if (!jnum(full, "attention_factor", &h->yarn[1]))
                jnum(full, "attn_factor", &h->yarn[1]);
            jnum(full, "beta_fast", &h->yarn[2]);
            jnum(full, "beta_slow", &h->yarn[3]);
        }
    } else if ((!strcmp(ty, "longrope") || !strcmp(ty, "su")) && !strcmp(h->arch, "phi3")) {
        h->long_f = jget(full, "long_factor");
        h->short_f = jget(full, "short_factor");
    } else if (strcmp(ty, "default") != 0) {
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: rope scaling '%s' (imported: linear, yarn; "
                          "longrope for phi3)", path, ty);
    }
    return 0;
}

/* Phi-3: the rotary dimensions, the original context, LongRoPE's factors
 * (as the tensors rope_factors_long/short) and attention factor. */
static int read_phi3(const char *path, const cJSON *c, hparams *h)
{
    const cJSON *rp = jget(c, "rope_parameters");
    if (!cJSON_IsObject(rp))
        rp = jget(c, "rope_scaling");
    double pct = 1.0;
    if (!(cJSON_IsObject(rp) && jnum(rp, "partial_rotary_factor", &pct)))
        jnum(c, "partial_rotary_factor", &pct);
    h->rope_dim = (uint32_t)(pct * h->n_embd) / h->n_head;
    if (!(cJSON_IsObject(rp) && ju32(rp, "original_max_position_embeddings", &h->rope_orig_ctx)) &&
        !ju32(c, "original_max_position_embeddings", &h->rope_orig_ctx))
        return rvl_seterr(RVL_EFORMAT, "%s: no original_max_position_embeddings (Phi-3 has one)", path);
    if (h->rope_dim == 0 || h->rope_dim % 2 || h->rope_dim > h->head_dim)
        return rvl_seterr(RVL_EFORMAT, "%s: partial_rotary_factor %g gives %u rotary dimensions", path,
                          pct, h->rope_dim);
    const cJSON *sw = jget(c, "sliding_window");
    h->has_window = true;   /* 0: none (llama.cpp tells Phi-4 so) */
    if (!cJSON_IsNull(sw) && sw && !ju32(c, "sliding_window", &h->window))
        return rvl_seterr(RVL_EFORMAT, "%s: bad sliding_window", path);
    if (!cJSON_IsArray(h->long_f) && !cJSON_IsArray(h->short_f))
        return 0;
    if (!cJSON_IsArray(h->long_f) || !cJSON_IsArray(h->short_f) ||
        (uint32_t)cJSON_GetArraySize(h->long_f) != h->rope_dim / 2 ||
        (uint32_t)cJSON_GetArraySize(h->short_f) != h->rope_dim / 2)
        return rvl_seterr(RVL_EFORMAT, "%s: LongRoPE's long_factor and short_factor need %u values each",
                          path, h->rope_dim / 2);
    const cJSON *e;
    for (int k = 0; k < 2; k++) {
        const cJSON *arr = k ? h->short_f : h->long_f;
        cJSON_ArrayForEach(e, arr)
            if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble <= 0)
                return rvl_seterr(RVL_EFORMAT, "%s: a LongRoPE factor is not a positive number", path);
    }
    double scale = (double)h->n_ctx / h->rope_orig_ctx;
    h->attn_factor = scale > 1.0 ? sqrt(1 + log(scale) / log((double)h->rope_orig_ctx)) : 1.0;
    return 0;
}

/* Ministral 3: YaRN always (the converter asserts it), with
 * mscale_all_dim as rope.scaling.yarn_log_multiplier and
 * llama_4_scaling_beta (queries times 1 + beta ln(1 + floor(pos /
 * original context))) as attention.temperature_scale. llama.cpp takes
 * mscale as 1 and has no window for the family. */
static int read_ministral3(const char *path, const cJSON *c, hparams *h)
{
    const cJSON *rp = jget(c, "rope_parameters");
    if (!cJSON_IsObject(rp))
        rp = jget(c, "rope_scaling");
    if (!h->rope_type || strcmp(h->rope_type, "yarn") != 0)
        return refuse(path, "rope_parameters.rope_type", "Ministral 3 is converted with YaRN only");
    /* transformers' attention factor is mscale(factor, mscale) /
     * mscale(factor, mscale_all_dim) when both are set (else
     * mscale(factor, 1)); llama.cpp's is mscale(factor, 1) / mscale(factor,
     * yarn_log_multiplier): the same only with mscale 1 or no
     * mscale_all_dim, and neither takes another attention_factor */
    double ms = 0, msa = 0;
    bool has_ms = jnum(rp, "mscale", &ms), has_msa = jnum(rp, "mscale_all_dim", &msa);
    if (has_msa && msa != 0 && !(has_ms && ms == 1))
        return refuse(path, "rope_parameters.mscale", "llama.cpp takes YaRN's mscale as 1");
    if (jget(rp, "attention_factor") && !cJSON_IsNull(jget(rp, "attention_factor")))
        return refuse(path, "rope_parameters.attention_factor",
                      "llama.cpp derives Ministral 3's from mscale_all_dim");
    if (has_msa)
        h->yarn_log_mul = msa;
    const cJSON *b = jget(rp, "llama_4_scaling_beta");
    if (b && !cJSON_IsNull(b) && !jnum(rp, "llama_4_scaling_beta", &h->temp_scale))
        return rvl_seterr(RVL_EFORMAT, "%s: bad llama_4_scaling_beta", path);
    if (!isnan(h->yarn_log_mul) && !isfinite(h->yarn_log_mul))
        return rvl_seterr(RVL_EFORMAT, "%s: bad mscale_all_dim", path);
    if (!isnan(h->temp_scale) && !isfinite(h->temp_scale))
        return rvl_seterr(RVL_EFORMAT, "%s: bad llama_4_scaling_beta", path);
    const cJSON *sw = jget(c, "sliding_window");
    if (sw && !cJSON_IsNull(sw))
        return refuse(path, "sliding_window", "llama.cpp's mistral3 has no windowed layers");
    if (cJSON_IsArray(jget(c, "layer_types")))
        return refuse(path, "layer_types", "per-layer attention types in the mistral3 family");
    return 0;
}

/* Mixtures of experts: how many, how many a token takes, their widths,
 * as the converter reads them; and what llama.cpp computes that the file
 * cannot change: every layer sparse, the chosen experts' weights
 * renormalized to sum 1 for llama (Mixtral) and qwen3moe, not for
 * qwen2moe (norm_topk_prob must say the same). */
static int read_moe(const char *path, const cJSON *c, hparams *h)
{
    bool qmoe = !strcmp(h->arch, "qwen2moe") || !strcmp(h->arch, "qwen3moe");
    const char *nk = jget(c, "num_local_experts") ? "num_local_experts" : "num_experts";
    if (!jget(c, nk) || cJSON_IsNull(jget(c, nk))) {
        if (qmoe)
            return rvl_seterr(RVL_EFORMAT, "%s: no num_experts (a mixture of experts has one)", path);
        return 0;   /* Llama, Mistral: dense */
    }
    if (!ju32(c, nk, &h->n_expert) || h->n_expert == 0 || h->n_expert > 1024)
        return rvl_seterr(RVL_EFORMAT, "%s: bad %s", path, nk);
    if (!ju32(c, "num_experts_per_tok", &h->n_expert_used) || h->n_expert_used == 0 ||
        h->n_expert_used > h->n_expert)
        return rvl_seterr(RVL_EFORMAT, "%s: missing or bad num_experts_per_tok (1 to %s %u)", path, nk,
                          h->n_expert);
    if (!qmoe)
        return 0;   /* Mixtral: experts of intermediate_size, always renormalized */
    const cJSON *mi = jget(c, "moe_intermediate_size"), *si = jget(c, "shared_expert_intermediate_size");
    if (mi && !cJSON_IsNull(mi) && (!ju32(c, "moe_intermediate_size", &h->n_ff_exp) || h->n_ff_exp == 0 ||
                                    h->n_ff_exp > (1u << 24)))
        return rvl_seterr(RVL_EFORMAT, "%s: bad moe_intermediate_size", path);
    if (si && !cJSON_IsNull(si) && (!ju32(c, "shared_expert_intermediate_size", &h->n_ff_shexp) ||
                                    h->n_ff_shexp == 0 || h->n_ff_shexp > (1u << 24)))
        return rvl_seterr(RVL_EFORMAT, "%s: bad shared_expert_intermediate_size", path);
    if (!strcmp(h->arch, "qwen3moe") && h->n_ff_shexp)
        return refuse(path, "shared_expert_intermediate_size", "llama.cpp's qwen3moe has no shared expert");
    /* transformers' default is false for both */
    bool renorm = cJSON_IsTrue(jget(c, "norm_topk_prob"));
    if (renorm != !strcmp(h->arch, "qwen3moe"))
        return refuse(path, "norm_topk_prob", renorm ? "llama.cpp's qwen2moe does not renormalize the "
                                                       "chosen experts' weights"
                                                     : "llama.cpp's qwen3moe always renormalizes the "
                                                       "chosen experts' weights");
    double step;
    if (jget(c, "decoder_sparse_step") && (!jnum(c, "decoder_sparse_step", &step) || step != 1))
        return refuse(path, "decoder_sparse_step", "llama.cpp makes every layer a mixture of experts");
    const cJSON *mo = jget(c, "mlp_only_layers");
    if (mo && !cJSON_IsNull(mo) && !(cJSON_IsArray(mo) && cJSON_GetArraySize(mo) == 0))
        return refuse(path, "mlp_only_layers", "llama.cpp makes every layer a mixture of experts");
    return 0;
}

/* A positive count of config.json that may be null or absent (def then). */
static int ju32_opt(const char *path, const cJSON *c, const char *k, uint32_t def, uint32_t *v)
{
    const cJSON *x = jget(c, k);
    *v = def;
    if (!x || cJSON_IsNull(x))
        return 0;
    if (!ju32(c, k, v) || *v > (1u << 24))
        return rvl_seterr(RVL_EFORMAT, "%s: bad %s", path, k);
    return 1;
}

/* DeepSeek-V2 and V3 (deepseek2): multi-head latent attention written as
 * llama.cpp's converter writes it - one KV head whose key is the latent
 * (kv_lora_rank) plus the shared rotary part (qk_rope_head_dim) and whose
 * value is the latent; the per-head widths as key/value_length_mla - and
 * the mixture: leading dense layers, routed experts with their scale,
 * renormalization, gating function (softmax, or V3's sigmoid) and groups,
 * the shared experts. YaRN's mscale_all_dim becomes yarn_log_multiplier
 * as 0.1 * mscale_all_dim (llama.cpp's legacy reading for this family). */
static int read_deepseek2(const char *path, const cJSON *c, hparams *h)
{
    uint32_t rope, nope, v, moe_ff;
    int rc;
    if ((rc = ju32_opt(path, c, "kv_lora_rank", 512, &h->kv_lora)) < 0 ||
        (rc = ju32_opt(path, c, "q_lora_rank", 0, &h->q_lora)) < 0 ||
        (rc = ju32_opt(path, c, "n_shared_experts", 0, &h->n_shexp)) < 0)
        return rc;
    if (!ju32(c, "qk_rope_head_dim", &rope) || !ju32(c, "qk_nope_head_dim", &nope) || !ju32(c, "v_head_dim", &v) ||
        rope == 0 || rope % 2 || rope > 1024 || nope > 1024 || v == 0 || v > 1024 || h->kv_lora == 0 ||
        h->kv_lora > 65536)
        return rvl_seterr(RVL_EFORMAT, "%s: missing or bad qk_rope_head_dim, qk_nope_head_dim, v_head_dim or "
                          "kv_lora_rank", path);
    h->n_head_kv = 1;
    h->head_dim = h->k_len = h->kv_lora + rope;
    h->v_len = h->kv_lora;
    h->rope_dim = rope;
    h->k_mla = nope + rope;
    h->v_mla = v;
    /* the routed experts */
    if (!jget(c, "n_routed_experts") || cJSON_IsNull(jget(c, "n_routed_experts")))
        return refuse(path, "n_routed_experts", "a DeepSeek model without routed experts");
    if (!ju32(c, "n_routed_experts", &h->n_expert) || h->n_expert == 0 || h->n_expert > 1024)
        return rvl_seterr(RVL_EFORMAT, "%s: bad n_routed_experts", path);
    if (!ju32(c, "num_experts_per_tok", &h->n_expert_used) || h->n_expert_used == 0 ||
        h->n_expert_used > h->n_expert)
        return rvl_seterr(RVL_EFORMAT, "%s: missing or bad num_experts_per_tok (1 to n_routed_experts %u)",
                          path, h->n_expert);
    if ((rc = ju32_opt(path, c, "moe_intermediate_size", h->n_ff, &moe_ff)) < 0 ||
        (rc = ju32_opt(path, c, "first_k_dense_replace", 0, &h->n_dense_lead)) < 0)
        return rc;
    h->n_ff_exp = moe_ff;
    if (h->n_ff_exp == 0 || h->n_dense_lead > h->n_layer)
        return rvl_seterr(RVL_EFORMAT, "%s: bad moe_intermediate_size or first_k_dense_replace", path);
    double freq;
    if (jnum(c, "moe_layer_freq", &freq) && freq != 1)
        return refuse(path, "moe_layer_freq", "llama.cpp makes every layer past the leading dense ones a mixture");
    if ((rc = ju32_opt(path, c, "n_group", 0, &h->n_group)) < 0 ||
        (h->has_group = rc > 0, rc = ju32_opt(path, c, "topk_group", 0, &h->n_group_used)) < 0)
        return rc;
    h->has_group_used = rc > 0;
    const cJSON *sf = jget(c, "scoring_func");
    if (sf && !cJSON_IsNull(sf)) {
        if (jstr_is(c, "scoring_func", "softmax"))
            h->gating = 1;
        else if (jstr_is(c, "scoring_func", "sigmoid"))
            h->gating = 2;
        else
            return refuse(path, "scoring_func", "llama.cpp's deepseek2 gates with softmax or sigmoid");
    }
    h->w_scale = NAN;
    const cJSON *rs = jget(c, "routed_scaling_factor");
    if (rs && !cJSON_IsNull(rs) && (!jnum(c, "routed_scaling_factor", &h->w_scale) || !isfinite(h->w_scale)))
        return rvl_seterr(RVL_EFORMAT, "%s: bad routed_scaling_factor", path);
    h->w_norm = cJSON_IsTrue(jget(c, "norm_topk_prob"));
    /* YaRN's attention scale: llama.cpp's deepseek2 reads mscale_all_dim
     * (as yarn_log_multiplier) and takes mscale to be the same */
    const cJSON *rp = jget(c, "rope_parameters");
    if (!cJSON_IsObject(rp))
        rp = jget(c, "rope_scaling");
    double ms, msa;
    if (cJSON_IsObject(rp) && jnum(rp, "mscale_all_dim", &msa)) {
        if (!isfinite(msa))
            return rvl_seterr(RVL_EFORMAT, "%s: bad mscale_all_dim", path);
        if (jnum(rp, "mscale", &ms) && ms != msa)
            return refuse(path, "rope_parameters.mscale", "llama.cpp's deepseek2 takes mscale equal to "
                          "mscale_all_dim");
        h->yarn_log_mul = 0.1 * msa;
    }
    return 0;
}

/* gpt-oss: windowed and global layers alternating (the first windowed),
 * the experts of intermediate_size, the clamped SwiGLU llama.cpp computes
 * with its own constants (alpha 1.702, limit 7). */
static int read_gptoss(const char *path, const cJSON *c, hparams *h)
{
    bool windowed;
    double x;
    int rc;
    if ((rc = read_moe(path, c, h)) < 0)
        return rc;
    if (!h->n_expert)
        return rvl_seterr(RVL_EFORMAT, "%s: no num_local_experts (gpt-oss is a mixture of experts)", path);
    h->n_ff_exp = h->n_ff;
    if ((rc = check_layer_types(path, c, h, 2, &windowed)) < 0)
        return rc;
    if (!ju32(c, "sliding_window", &h->window) || h->window == 0)
        return rvl_seterr(RVL_EFORMAT, "%s: missing or bad sliding_window", path);
    if (!windowed)
        return refuse(path, "layer_types", "llama.cpp's gpt-oss windows every other layer");
    h->has_window = true;
    if (jget(c, "swiglu_limit") && (!jnum(c, "swiglu_limit", &x) || x != 7.0))
        return refuse(path, "swiglu_limit", "llama.cpp's gpt-oss clamps at 7");
    if (jget(c, "swiglu_alpha") && (!jnum(c, "swiglu_alpha", &x) || fabs(x - 1.702) > 1e-9))
        return refuse(path, "swiglu_alpha", "llama.cpp's gpt-oss computes with alpha 1.702");
    return 0;
}

/* Gemma 2 and 3: soft-caps, windows, the query scale, the RMSNorm shift. */
static int read_gemma(const char *path, const cJSON *c, hparams *h)
{
    bool g3 = !strcmp(h->arch, "gemma3"), windowed;
    int rc;
    h->norm_shift = true;
    if ((rc = check_act(path, c, true)) < 0)
        return rc;
    const cJSON *ac = jget(c, "attn_logit_softcapping"), *fc = jget(c, "final_logit_softcapping");
    if (ac && !cJSON_IsNull(ac) && (!jnum(c, "attn_logit_softcapping", &h->attn_softcap) || g3))
        return refuse(path, "attn_logit_softcapping", g3 ? "Gemma 3 has none in llama.cpp" : "not a number");
    if (fc && !cJSON_IsNull(fc) && !jnum(c, "final_logit_softcapping", &h->final_softcap))
        return rvl_seterr(RVL_EFORMAT, "%s: bad final_logit_softcapping", path);
    if ((rc = check_layer_types(path, c, h, g3 ? 6 : 2, &windowed)) < 0)
        return rc;
    if (windowed) {
        if (!ju32(c, "sliding_window", &h->window) || h->window == 0)
            return rvl_seterr(RVL_EFORMAT, "%s: missing or bad sliding_window", path);
        h->has_window = true;
    }
    if (!g3 && h->swa_rope_base)
        return refuse(path, "rope_local_base_freq", "Gemma 2 has one RoPE base");
    /* llama.cpp scales queries by 1/sqrt(head_dim), or for the 27B models
     * 1/sqrt(n_embd / n_head): another query_pre_attn_scalar is written as
     * attention.scale (llama.cpp's converter drops it) */
    double qp;
    bool is27b = h->n_layer == (g3 ? 62u : 46u);
    if (jnum(c, "query_pre_attn_scalar", &qp)) {
        if (!(qp > 0) || !isfinite(qp))
            return rvl_seterr(RVL_EFORMAT, "%s: bad query_pre_attn_scalar", path);
        if (qp != (is27b ? (double)(h->n_embd / h->n_head) : (double)h->head_dim))
            h->q_scale = 1.0 / sqrt(qp);
    }
    return 0;
}

static int read_hparams(const char *path, const cJSON *c, hparams *h)
{
    memset(h, 0, sizeof *h);
    const cJSON *a = jget(c, "architectures");
    const char *an = cJSON_IsArray(a) && cJSON_IsString(cJSON_GetArrayItem(a, 0))
                         ? cJSON_GetArrayItem(a, 0)->valuestring : "";
    for (size_t i = 0; i < sizeof hf_archs / sizeof hf_archs[0]; i++)
        if (!strcmp(an, hf_archs[i].hf))
            h->arch = hf_archs[i].arch;
    if (!h->arch)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: architecture '%s': the Hugging Face import knows "
                          "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                          "Gemma2ForCausalLM, Gemma3ForCausalLM (and Gemma3ForConditionalGeneration's "
                          "text part), Phi3ForCausalLM, Ministral3ForCausalLM, MixtralForCausalLM, "
                          "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, DeepseekV2ForCausalLM, "
                          "DeepseekV3ForCausalLM and GptOssForCausalLM", path, an);
    bool g3 = !strcmp(h->arch, "gemma3"), gemma = g3 || !strcmp(h->arch, "gemma2");
    bool phi3 = !strcmp(h->arch, "phi3"), qwen = !strncmp(h->arch, "qwen", 4);
    /* Gemma 3's converter has defaults for what its configs may leave out */
    if (g3) {
        h->n_head = 8;
        h->n_head_kv = 4;
        h->head_dim = 256;
    }
    static const char *const req[] = {"num_hidden_layers", "hidden_size", "intermediate_size",
                                      "num_attention_heads"};
    uint32_t *dst[] = {&h->n_layer, &h->n_embd, &h->n_ff, &h->n_head};
    for (int i = 0; i < 4; i++) {
        const cJSON *x = jget(c, req[i]);
        if (g3 && i == 3 && !x)
            continue;
        if (!ju32(c, req[i], dst[i]) || *dst[i] == 0 || *dst[i] > (1u << 24))
            return rvl_seterr(RVL_EFORMAT, "%s: missing or bad %s", path, req[i]);
    }
    if (!ju32(c, "num_key_value_heads", &h->n_head_kv) && !g3)
        h->n_head_kv = h->n_head;
    h->has_head_dim = ju32(c, "head_dim", &h->head_dim) && h->head_dim > 0;
    if (!h->has_head_dim && !g3)
        h->head_dim = h->n_embd / h->n_head;
    h->has_head_dim |= g3 || gemma;   /* the Gemma converters always write key_length */
    if (h->n_head_kv == 0 || h->n_head % h->n_head_kv || h->head_dim == 0 || h->head_dim % 2)
        return rvl_seterr(RVL_EFORMAT, "%s: inconsistent head counts", path);
    if (!ju32(c, "max_position_embeddings", &h->n_ctx))
        h->n_ctx = g3 ? 131072 : 2048;
    if (!jnum(c, "rms_norm_eps", &h->eps))
        h->eps = 1e-6;
    if (ju32(c, "vocab_size", &h->n_vocab) && h->n_vocab > MAX_VOCAB)
        return rvl_seterr(RVL_EFORMAT, "%s: vocab_size %u is implausibly large", path, h->n_vocab);
    int rc = read_rope(path, c, h, g3 ? 1e6 : 10000);
    if (rc < 0)
        return rc;
    const cJSON *tw = jget(c, "tie_word_embeddings");
    h->tied = cJSON_IsBool(tw) ? cJSON_IsTrue(tw) : gemma;   /* Gemma's default: tied */
    if (gemma) {
        if ((rc = read_gemma(path, c, h)) < 0)
            return rc;
    } else {
        if ((rc = check_act(path, c, false)) < 0)
            return rc;
        if (h->swa_rope_base)
            return refuse(path, "rope_local_base_freq", "one RoPE base in this family");
    }
    if (phi3 && (rc = read_phi3(path, c, h)) < 0)
        return rc;
    if (!strcmp(h->arch, "mistral3") && (rc = read_ministral3(path, c, h)) < 0)
        return rc;
    h->k_len = h->v_len = h->head_dim;
    if (!strcmp(h->arch, "llama") || qwen) {
        if ((rc = read_moe(path, c, h)) < 0)
            return rc;
    }
    if (!strcmp(h->arch, "deepseek2") && (rc = read_deepseek2(path, c, h)) < 0)
        return rc;
    if (!strcmp(h->arch, "gpt-oss") && (rc = read_gptoss(path, c, h)) < 0)
        return rc;
    if (qwen && cJSON_IsTrue(jget(c, "use_sliding_window")))
        return refuse(path, "use_sliding_window", "llama.cpp's qwen2/qwen3 have no windowed layers");
    /* Mistral's window: kept as llama.attention.sliding_window (llama.cpp's
     * converter drops it) when shorter than the context */
    uint32_t sw;
    if (!strcmp(h->arch, "llama") && ju32(c, "sliding_window", &sw) && sw > 0 && sw < h->n_ctx) {
        h->has_window = true;
        h->window = sw;
    }
    if (!strcmp(h->arch, "llama") && cJSON_IsArray(jget(c, "layer_types")))
        return refuse(path, "layer_types", "per-layer attention types in the llama family");
    return check_hparams(path, h);
}

/* ======================================================================
 * Tokenizer
 * ====================================================================== */
#define HF_RX_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define HF_RX_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static bool is_type(const cJSON *o, const char *t)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(x) && !strcmp(x->valuestring, t);
}

static const char *split_regex(const cJSON *o)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "Regex");
    return is_type(o, "Split") && cJSON_IsString(r) ? r->valuestring : NULL;
}

/* tokenizer.ggml.pre from the shape of the pre_tokenizer (llama.cpp hashes
 * the tokenization of a test text instead; these are the forms of the
 * vocabularies we run). NULL when unknown. */
static const char *pre_name(const cJSON *pt)
{
    if (is_type(pt, "ByteLevel"))
        return "gpt-2";
    if (!is_type(pt, "Sequence"))
        return NULL;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    int n = cJSON_GetArraySize(l);
    const cJSON *a = cJSON_GetArrayItem(l, 0), *b = cJSON_GetArrayItem(l, 1);
    if (n == 2 && is_type(a, "Digits") && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "individual_digits")) &&
        is_type(b, "ByteLevel"))
        return "smollm";
    const char *rx = n == 2 && is_type(b, "ByteLevel") ? split_regex(a) : NULL;
    if (rx && !strcmp(rx, HF_RX_LLAMA3))
        return "llama-bpe";
    if (rx && !strcmp(rx, HF_RX_QWEN2))
        return "qwen2";
    return NULL;
}

enum { SPECIAL_KINDS = 7 };

typedef struct {
    char **tok;             /* n_vocab texts */
    int32_t *type;
    uint32_t n;
    char **merges;
    uint32_t n_merges;
    const char *pre;
    int64_t special[SPECIAL_KINDS];  /* bos eos unk sep pad cls mask; -1 none */
    int special_order[SPECIAL_KINDS], n_special;   /* in the order found */
    int add_bos, add_eos;   /* -1: not said */
    char *chat_template;
    bool spm;               /* SentencePiece BPE (byte_fallback): model "llama" */
    float *scores;          /* spm: -(rank of the first merge making the token), else 0 */
    bool add_space_prefix;
    int space_prefix;       /* tokenizer.ggml.add_space_prefix to write; -1 none */
    uint32_t n_real;        /* tokens the tokenizer files define (Gemma 3 trims its embeddings to them) */
} vocab;

static void vocab_free(vocab *v)
{
    for (uint32_t i = 0; v->tok && i < v->n; i++)
        free(v->tok[i]);
    for (uint32_t i = 0; v->merges && i < v->n_merges; i++)
        free(v->merges[i]);
    free(v->tok);
    free(v->type);
    free(v->merges);
    free(v->chat_template);
    free(v->scores);
}

static uint64_t h_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* tokenizer.json's model.merges ("a b" strings or [a, b] pairs) into
 * v->merges, as "a b". */
static int read_merges(const char *path, const cJSON *model, vocab *v)
{
    const cJSON *e;
    const cJSON *ml = cJSON_GetObjectItemCaseSensitive(model, "merges");
    int nm = cJSON_GetArraySize(ml);
    v->merges = calloc(nm > 0 ? (size_t)nm : 1, sizeof *v->merges);
    if (!v->merges)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    cJSON_ArrayForEach(e, ml) {
        char *s = NULL;
        if (cJSON_IsString(e)) {
            s = strdup(e->valuestring);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 0)) && cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            const char *a = cJSON_GetArrayItem(e, 0)->valuestring, *b = cJSON_GetArrayItem(e, 1)->valuestring;
            size_t la = strlen(a), lb = strlen(b);
            if ((s = malloc(la + lb + 2)) != NULL) {
                memcpy(s, a, la);
                s[la] = ' ';
                memcpy(s + la + 1, b, lb + 1);
            }
        } else {
            return rvl_seterr(RVL_EFORMAT, "%s: merge %u is neither \"a b\" nor [a, b]", path, v->n_merges);
        }
        if (!s)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        v->merges[v->n_merges++] = s;
    }
    return 0;
}

/* SentencePiece-style vocabularies: scores from the merge ranks
 * (SentencePiece merges the pair whose result scores highest, BPE the
 * pair of lowest rank). */
static int spm_scores(vocab *v)
{
    v->scores = calloc(v->n, sizeof *v->scores);
    bool *set = calloc(v->n, 1);
    uint64_t hcap = 1;
    while (hcap < 2ull * v->n)
        hcap <<= 1;
    uint32_t *slot = calloc((size_t)hcap, sizeof *slot);
    int rc = 0;
    if (!v->scores || !set || !slot) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
    } else {
        for (uint32_t i = 0; i < v->n; i++) {
            uint64_t k = h_str(v->tok[i]) & (hcap - 1);
            while (slot[k])
                k = (k + 1) & (hcap - 1);
            slot[k] = i + 1;
        }
        char buf[512];
        for (uint32_t r = 0; r < v->n_merges; r++) {
            const char *sp = strchr(v->merges[r], ' ');
            size_t la = sp ? (size_t)(sp - v->merges[r]) : 0, lb = sp ? strlen(sp + 1) : 0;
            if (!sp || la + lb >= sizeof buf)
                continue;
            memcpy(buf, v->merges[r], la);
            memcpy(buf + la, sp + 1, lb + 1);
            for (uint64_t k = h_str(buf) & (hcap - 1); slot[k]; k = (k + 1) & (hcap - 1)) {
                uint32_t id = slot[k] - 1;
                if (!strcmp(v->tok[id], buf)) {
                    if (!set[id]) {
                        set[id] = true;
                        v->scores[id] = -(float)r;
                    }
                    break;
                }
            }
        }
    }
    free(set);
    free(slot);
    return rc;
}

/* The special tokens as gguf-py's SpecialVocab finds them: the texts of
 * tokenizer_config.json's <kind>_token among tokenizer.json's added tokens,
 * else config.json's <kind>_token_id; whether BOS and EOS are added (the
 * post-processor's say first, then tokenizer_config.json's add_*_token). */
static const char *const special_kinds[SPECIAL_KINDS] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};

static int64_t added_id(const cJSON *added, const char *text)
{
    const cJSON *e;
    double id;
    cJSON_ArrayForEach(e, added)
        if (text && jstr_is(e, "content", text) && jnum(e, "id", &id))
            return (int64_t)id;
    return -1;
}

static void read_specials(const cJSON *tj, const cJSON *tc, const cJSON *cfg, vocab *v)
{
    const cJSON *added = jget(tj, "added_tokens"), *pp = jget(tj, "post_processor");
    char key[32];
    v->add_bos = v->add_eos = -1;
    if (is_type(pp, "ByteLevel")) {
        v->add_bos = v->add_eos = 0;
    } else if (is_type(pp, "TemplateProcessing")) {
        const cJSON *single = jget(pp, "single");
        int n = cJSON_GetArraySize(single);
        const cJSON *f = jget(jget(cJSON_GetArrayItem(single, 0), "SpecialToken"), "id");
        const cJSON *l = jget(jget(cJSON_GetArrayItem(single, n - 1), "SpecialToken"), "id");
        const char *bt = jtoken(tc, "bos_token"), *et = jtoken(tc, "eos_token");
        if (n > 1 && cJSON_IsString(f))
            v->add_bos = !tc || (bt && !strcmp(bt, f->valuestring)) || !bt;
        if (n > 1 && cJSON_IsString(l))
            v->add_eos = !tc || (et && !strcmp(et, l->valuestring)) || !et;
    }
    for (int k = 0; k < SPECIAL_KINDS; k++) {
        v->special[k] = -1;
        snprintf(key, sizeof key, "add_%s_token", special_kinds[k]);
        const cJSON *ab = jget(tc, key);
        if (k == 0 && cJSON_IsBool(ab) && v->add_bos < 0)
            v->add_bos = cJSON_IsTrue(ab);
        if (k == 1 && cJSON_IsBool(ab) && v->add_eos < 0)
            v->add_eos = cJSON_IsTrue(ab);
        snprintf(key, sizeof key, "%s_token", special_kinds[k]);
        int64_t id = added_id(added, jtoken(tc, key));
        if (id >= 0 && id < v->n) {
            v->special[k] = id;
            v->special_order[v->n_special++] = k;
        }
    }
    for (int k = 0; k < SPECIAL_KINDS; k++) {
        uint32_t id;
        snprintf(key, sizeof key, "%s_token_id", special_kinds[k]);
        if (v->special[k] < 0 && ju32(cfg, key, &id) && id < v->n) {
            v->special[k] = id;
            v->special_order[v->n_special++] = k;
        }
    }
}

/* The chat template: tokenizer_config.json's (the default of a list), else
 * chat_template.jinja's; none is no error. */
static int read_chat_template(const char *dir, const cJSON *tc, vocab *v)
{
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
    if (cJSON_IsArray(ct)) {    /* [{name, template}, ...]: the default one */
        const cJSON *x, *pick = NULL;
        cJSON_ArrayForEach(x, ct) {
            const cJSON *nm2 = cJSON_GetObjectItemCaseSensitive(x, "name");
            if (!pick || (cJSON_IsString(nm2) && !strcmp(nm2->valuestring, "default")))
                pick = x;
        }
        ct = cJSON_GetObjectItemCaseSensitive(pick, "template");
    }
    if (cJSON_IsString(ct)) {
        if (!(v->chat_template = strdup(ct->valuestring)))
            return rvl_seterr(RVL_ENOMEM, "out of memory");
    } else {   /* newer directories: chat_template.jinja */
        rvl_map m = {0};
        char path[4200];
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        if (access(path, F_OK) == 0 && rvl_map_file(&m, path) == 0) {
            v->chat_template = strndup(m.base, (size_t)m.size);
            rvl_map_unmap(&m);
        }
    }
    return 0;
}

/* Added tokens that llama.cpp's converter makes control tokens whatever
 * their "special" flag says (does_token_look_special). */
static bool looks_special(const char *t)
{
    size_t n = strlen(t);
    if (!strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") || !strcmp(t, "[@BOS@]"))
        return true;
    if (n >= 4 && !strncmp(t, "<|", 2) && !strcmp(t + n - 2, "|>"))
        return true;
    if (n >= 6 && !strncmp(t, "<\xef\xbd\x9c", 4) && !strcmp(t + n - 4, "\xef\xbd\x9c>"))
        return true;
    return !strncmp(t, "<unused", 7) && t[n - 1] == '>';
}

/* ----------------------------------------------------------------------
 * tokenizer.model: SentencePiece's ModelProto (protocol buffers). Only
 * its pieces are read: field 1, each {1: piece, 2: score (float), 3: type}.
 * ---------------------------------------------------------------------- */
typedef struct {
    const uint8_t *p, *end;
} pb;

static bool pb_varint(pb *b, uint64_t *v)
{
    *v = 0;
    for (int sh = 0; sh < 64 && b->p < b->end; sh += 7) {
        uint8_t c = *b->p++;
        *v |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80))
            return true;
    }
    return false;
}

/* The next field: its number, wire type, and for length-delimited ones the
 * bytes; varints in *v; false at the end or on bad input (*bad). */
static bool pb_next(pb *b, uint32_t *field, uint32_t *wt, uint64_t *v, pb *sub, bool *bad)
{
    uint64_t key;
    if (b->p >= b->end)
        return false;
    if (!pb_varint(b, &key))
        return !(*bad = true);
    *field = (uint32_t)(key >> 3);
    *wt = (uint32_t)(key & 7);
    switch (*wt) {
    case 0:
        if (!pb_varint(b, v))
            return !(*bad = true);
        return true;
    case 1: case 5: {
        size_t n = *wt == 1 ? 8 : 4;
        if ((size_t)(b->end - b->p) < n)
            return !(*bad = true);
        *v = 0;
        for (size_t i = 0; i < n; i++)
            *v |= (uint64_t)b->p[i] << (8 * i);
        b->p += n;
        return true;
    }
    case 2:
        if (!pb_varint(b, v) || *v > (uint64_t)(b->end - b->p))
            return !(*bad = true);
        sub->p = b->p;
        sub->end = b->p + *v;
        b->p += *v;
        return true;
    default:
        return !(*bad = true);
    }
}

/* Whether the vocabulary comes from tokenizer.model, as llama.cpp's
 * converter decides per family (Phi-4's GPT2Tokenizer does not). */
static bool use_spm_model(const char *dir, const cJSON *tc, const hparams *h)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    if (access(path, F_OK) != 0)
        return false;
    return !(!strcmp(h->arch, "phi3") && jstr_is(tc, "tokenizer_class", "GPT2Tokenizer"));
}

static int set_tok(vocab *v, uint32_t i, const char *s, size_t n, float score, int32_t type)
{
    free(v->tok[i]);
    if (!(v->tok[i] = strndup(s, n)))
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    v->scores[i] = score;
    v->type[i] = type;
    return 0;
}

/* User-defined added tokens hold spaces, not U+2581 (llama.cpp's converter
 * pre-normalizes them). */
static int set_user_tok(vocab *v, uint32_t i, const char *s)
{
    size_t n = strlen(s), o = 0;
    char *t = malloc(n + 1);
    if (!t)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    for (size_t k = 0; k < n; k++) {
        if (!strncmp(s + k, "\xe2\x96\x81", 3)) {
            t[o++] = ' ';
            k += 2;
        } else {
            t[o++] = s[k];
        }
    }
    int rc = set_tok(v, i, t, o, -1000.0f, RVL_TOK_USER_DEFINED);
    free(t);
    return rc;
}

/* The vocabulary of dir/tokenizer.model, as convert_hf_to_gguf.py's
 * _create_vocab_sentencepiece (Phi-3: its own variant) makes it: the
 * pieces with their scores and types (user-defined pieces count as
 * normal), [PADn] up to config's vocab_size, then added_tokens.json's,
 * tokenizer_config.json's added_tokens_decoder (and for Phi-3
 * tokenizer.json's added_tokens) at score -1000. */
static int read_spm_vocab(const char *dir, const cJSON *tj, const cJSON *tc, const cJSON *cfg,
                          const hparams *h, vocab *v)
{
    char path[4200];
    rvl_map m = {0};
    bool phi3 = !strcmp(h->arch, "phi3"), bad = false;
    int rc;
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    if ((rc = rvl_map_file(&m, path)) < 0)
        return rc;
    pb b = {m.base, (const uint8_t *)m.base + m.size}, sub, x;
    uint32_t f, wt, n_pieces = 0;
    uint64_t val;
    while (pb_next(&b, &f, &wt, &val, &sub, &bad))
        n_pieces += f == 1 && wt == 2;
    v->spm = true;
    v->pre = "default";
    v->n_real = n_pieces;
    v->n = h->n_vocab ? h->n_vocab : n_pieces;
    if (bad || n_pieces == 0 || v->n > MAX_VOCAB) {
        rvl_map_unmap(&m);
        return rvl_seterr(RVL_EFORMAT, "%s: not a SentencePiece model", path);
    }
    v->tok = calloc(v->n, sizeof *v->tok);
    v->type = calloc(v->n, sizeof *v->type);
    v->scores = calloc(v->n, sizeof *v->scores);
    if (!v->tok || !v->type || !v->scores) {
        rvl_map_unmap(&m);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < v->n; i++) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%u]", i);
        if ((rc = set_tok(v, i, pad, strlen(pad), -10000.0f, RVL_TOK_UNUSED)) < 0)
            goto out;
    }
    b = (pb){m.base, (const uint8_t *)m.base + m.size};
    for (uint32_t id = 0; id < v->n && pb_next(&b, &f, &wt, &val, &sub, &bad);) {
        if (f != 1 || wt != 2)
            continue;
        const char *piece = "";
        size_t plen = 0;
        float score = 0;
        uint64_t type = 1;
        while (pb_next(&sub, &f, &wt, &val, &x, &bad)) {
            if (f == 1 && wt == 2) {
                piece = (const char *)x.p;
                plen = (size_t)(x.end - x.p);
            } else if (f == 2 && wt == 5) {
                uint32_t u = (uint32_t)val;
                memcpy(&score, &u, 4);
            } else if (f == 3 && wt == 0) {
                type = val;
            }
        }
        /* SentencePiece's NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4,
         * UNUSED 5, BYTE 6: llama.cpp's numbers, user-defined as normal */
        int32_t ty = type == 2 || type == 3 || type == 5 || type == 6 ? (int32_t)type : RVL_TOK_NORMAL;
        if ((rc = set_tok(v, id++, piece, plen, score, ty)) < 0)
            goto out;
    }
    if (bad) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: not a SentencePiece model", path);
        goto out;
    }
    cJSON *at = NULL;
    const cJSON *e;
    if ((rc = read_json(dir, "added_tokens.json", false, &at)) < 0)
        goto out;
    cJSON_ArrayForEach(e, at) {
        if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < v->n &&
            (rc = set_tok(v, (uint32_t)e->valuedouble, e->string, strlen(e->string), -1000.0f,
                          RVL_TOK_USER_DEFINED)) < 0)
            break;
    }
    cJSON_Delete(at);
    if (rc < 0)
        goto out;
    const cJSON *dec = jget(tc, "added_tokens_decoder");
    for (int pass = 0; pass < (phi3 ? 2 : 1); pass++) {
        const cJSON *list = pass ? jget(tj, "added_tokens") : dec;
        cJSON_ArrayForEach(e, list) {
            const cJSON *ct = jget(e, "content");
            double idd = -1;
            if (pass)
                jnum(e, "id", &idd);
            else
                idd = strtod(e->string, NULL);
            if (!cJSON_IsString(ct) || !(idd >= 0 && idd < v->n))
                continue;
            uint32_t id = (uint32_t)idd;
            bool special = cJSON_IsTrue(jget(e, "special"));
            if (phi3)      /* Phi-3's: no look-alike rule, no space normalization */
                rc = set_tok(v, id, ct->valuestring, strlen(ct->valuestring), -1000.0f,
                             special ? RVL_TOK_CONTROL : RVL_TOK_USER_DEFINED);
            else if (special || looks_special(ct->valuestring))
                rc = set_tok(v, id, ct->valuestring, strlen(ct->valuestring), -1000.0f, RVL_TOK_CONTROL);
            else
                rc = set_user_tok(v, id, ct->valuestring);
            if (rc < 0)
                goto out;
        }
    }
    /* Gemma: no space in front; Llama: tokenizer_config.json's add_prefix_space */
    const cJSON *aps = jget(tc, "add_prefix_space");
    if (!strncmp(h->arch, "gemma", 5))
        v->space_prefix = 0;
    else if (llama_like(h->arch) && cJSON_IsBool(aps))
        v->space_prefix = cJSON_IsTrue(aps);
    read_specials(tj, tc, cfg, v);
    rc = read_chat_template(dir, tc, v);
out:
    rvl_map_unmap(&m);
    return rc;
}

/* The vocabulary of dir/tokenizer.json (tj), with tokenizer_config.json
 * (tc) and config.json (cfg): tokens and their types, merges, SentencePiece
 * scores, special tokens, the chat template. */
static int read_vocab(const char *dir, const cJSON *tj, const cJSON *tc, const cJSON *cfg,
                      const hparams *h, vocab *v)
{
    char path[4200];
    int rc;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    memset(v, 0, sizeof *v);
    v->space_prefix = -1;
    if (use_spm_model(dir, tc, h))
        return read_spm_vocab(dir, tj, tc, cfg, h, v);
    /* without tokenizer.model (llama.cpp's converter wants it for Gemma
     * 2), tokenizer.json's BPE with byte fallback: the same pieces, the
     * scores from the merge ranks */
    if (!tj)
        return rvl_seterr(RVL_ENOTFOUND, "%s: missing", path);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    if (!is_type(model, "BPE"))
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: only BPE vocabularies are imported (byte-level "
                          "and SentencePiece-style with byte_fallback)", path);
    v->spm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    const cJSON *ptj = cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer");
    v->pre = v->spm ? "default" : pre_name(ptj);
    if (v->spm) {
        /* a space in front: a Prepend normalizer or a Metaspace that prepends */
        const cJSON *nz = cJSON_GetObjectItemCaseSensitive(tj, "normalizer"), *x;
        const cJSON *nl = cJSON_GetObjectItemCaseSensitive(nz, "normalizers");
        if (is_type(nz, "Prepend"))
            v->add_space_prefix = true;
        cJSON_ArrayForEach(x, nl)
            if (is_type(x, "Prepend"))
                v->add_space_prefix = true;
        if (is_type(ptj, "Metaspace")) {
            const cJSON *ps = cJSON_GetObjectItemCaseSensitive(ptj, "prepend_scheme");
            v->add_space_prefix = !cJSON_IsString(ps) || strcmp(ps->valuestring, "never") != 0;
        }
    }
    if (!v->pre)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: pre_tokenizer of an unknown form (known: "
                          "ByteLevel, Digits+ByteLevel, the Llama 3 and Qwen2 Split regexes)", path);
    const cJSON *vo = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens");
    if (!cJSON_IsObject(vo))
        return rvl_seterr(RVL_EFORMAT, "%s: model.vocab missing", path);
    /* size: the largest id + 1, or config's vocab_size when larger (padding) */
    double max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vo) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= MAX_VOCAB ||
            e->valuedouble != (double)(uint32_t)e->valuedouble)
            return rvl_seterr(RVL_EFORMAT, "%s: bad id of token '%s'", path, e->string);
        if (e->valuedouble > max_id) max_id = e->valuedouble;
    }
    cJSON_ArrayForEach(e, added) {
        double id;
        if (!jnum(e, "id", &id) || id < 0 || id >= MAX_VOCAB || id != (double)(uint32_t)id)
            return rvl_seterr(RVL_EFORMAT, "%s: bad added token id", path);
        if (id > max_id) max_id = id;
    }
    v->n = (uint32_t)(max_id + 1);
    v->n_real = (uint32_t)(cJSON_GetArraySize(vo) + cJSON_GetArraySize(added));
    if (h->n_vocab > v->n)
        v->n = h->n_vocab;
    if (v->n == 0)
        return rvl_seterr(RVL_EFORMAT, "%s: empty vocabulary", path);
    v->tok = calloc(v->n ? v->n : 1, sizeof *v->tok);
    v->type = calloc(v->n ? v->n : 1, sizeof *v->type);
    if (!v->tok || !v->type)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    const cJSON *unk_tok = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    cJSON_ArrayForEach(e, vo) {
        uint32_t id = (uint32_t)e->valuedouble;
        unsigned byte;
        char tail;
        free(v->tok[id]);
        v->tok[id] = strdup(e->string);
        v->type[id] = RVL_TOK_NORMAL;
        if (v->spm && strlen(e->string) == 6 && sscanf(e->string, "<0x%2X%c", &byte, &tail) == 2 &&
            tail == '>')
            v->type[id] = RVL_TOK_BYTE;
        if (v->spm && cJSON_IsString(unk_tok) && !strcmp(unk_tok->valuestring, e->string))
            v->type[id] = RVL_TOK_UNKNOWN;
        if (!v->tok[id])
            return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    cJSON_ArrayForEach(e, added) {
        double id = 0;
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(e, "content");
        jnum(e, "id", &id);
        if (!cJSON_IsString(ct))
            return rvl_seterr(RVL_EFORMAT, "%s: added token without content", path);
        uint32_t i = (uint32_t)id;
        free(v->tok[i]);
        v->tok[i] = strdup(ct->valuestring);
        v->type[i] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) ||
                             looks_special(ct->valuestring) ? RVL_TOK_CONTROL : RVL_TOK_USER_DEFINED;
        if (v->spm && cJSON_IsString(unk_tok) && !strcmp(unk_tok->valuestring, ct->valuestring))
            v->type[i] = RVL_TOK_UNKNOWN;
        if (!v->tok[i])
            return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < v->n; i++) {
        if (v->tok[i])
            continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%u]", i);
        v->tok[i] = strdup(pad);
        v->type[i] = RVL_TOK_UNUSED;
        if (!v->tok[i])
            return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    if ((rc = read_merges(path, model, v)) < 0 ||
        (v->spm && (rc = spm_scores(v)) < 0))
        return rc;
    if (v->spm)
        v->space_prefix = v->add_space_prefix;
    read_specials(tj, tc, cfg, v);
    return read_chat_template(dir, tc, v);
}

/* ======================================================================
 * Tensors
 * ====================================================================== */
typedef struct {
    const rvl_tensor_info *t;   /* NULL: synthesized from f */
    char name[64];
    uint32_t type;          /* output type */
    uint32_t perm;
    bool shift;             /* Gemma's RMSNorm gain: + 1 */
    uint64_t ne[3];         /* output shape (Gemma 3 trims token_embd's rows) */
    uint32_t n_dims;
    const cJSON *f;         /* synthesized: the numbers (Phi-3's LongRoPE factors) */
    /* stacked experts (3-D): expert e's matrix is exps[e] (t is exps[0]) */
    const rvl_tensor_info **exps;
    /* picked from t by strides (DeepSeek's kv_b_proj split in two, gpt-oss's
     * fused experts transposed and de-interleaved): output element (i0, i1,
     * i2) is element base + i0 s[0] + i1 s[1] + i2 s[2] of t */
    bool gather;
    uint64_t base, s[3];
    /* MXFP4 (gpt-oss's experts as *_blocks, t, and *_scales): output row r
     * of expert e is the source row e * src_rows + roff + r * rstep */
    const rvl_tensor_info *scales;
    uint64_t roff, rstep;
} imp_tensor;

/* The tensors the converter keeps in F32 whatever the checkpoint's dtype:
 * 1-D ones, norms, routers, and all that are not .weight (biases, DeepSeek's
 * exp_probs_b.bias). */
static bool forced_f32(const char *name, uint32_t n_dims)
{
    size_t n = strlen(name);
    return n_dims <= 1 || strstr(name, "ffn_gate_inp") || n < 7 || strcmp(name + n - 7, ".weight") ||
           (n >= 12 && !strcmp(name + n - 12, "_norm.weight"));
}

/* Elements picked by strides, in chunks of whole output rows. */
static int stream_gather(rvl_gguf_writer *w, uint64_t idx, const imp_tensor *x, float *f32, void *obuf,
                         uint64_t cap)
{
    const rvl_tensor_info *t = x->t;
    const rvl_kformat *kin = rvl_kformat_get(t->type), *kout = rvl_kformat_get(x->type);
    uint64_t es = rvl_kformat_row_bytes(kin, 1), n0 = x->ne[0], out_row = rvl_kformat_row_bytes(kout, n0);
    uint64_t rows = x->ne[1] * x->ne[2], per = cap / out_row, k = 0;
    const char *src = t->data;
    for (uint64_t r = 0; r < rows; r++) {
        uint64_t at = x->base + (r % x->ne[1]) * x->s[1] + (r / x->ne[1]) * x->s[2];
        char *o = (char *)obuf + k * out_row;
        if (t->type == x->type) {
            for (uint64_t i = 0; i < n0; i++)
                memcpy(o + i * es, src + (at + i * x->s[0]) * es, (size_t)es);
        } else {
            for (uint64_t i = 0; i < n0; i++)
                kin->dequantize(src + (at + i * x->s[0]) * es, f32 + i, 1);
            kout->quantize(f32, o, (int64_t)n0, NULL);
        }
        if (++k == per || r + 1 == rows) {
            if (rvl_interrupted())
                return rvl_seterr(RVL_EINTR, "interrupted");
            int rc = rvl_gguf_writer_tensor_data(w, idx, obuf, k * out_row);
            if (rc < 0)
                return rc;
            k = 0;
        }
    }
    return 0;
}

/* gpt-oss's MXFP4 experts: a block of the checkpoint is 16 bytes holding
 * elements 2j (low nibble) and 2j + 1 (high) in byte j, and its E8M0 scale
 * apart; a GGUF MXFP4 block is the scale, then 16 bytes holding elements j
 * (low) and j + 16 (high). */
static int stream_mxfp4(rvl_gguf_writer *w, uint64_t idx, const imp_tensor *x, void *obuf, uint64_t cap)
{
    const uint8_t *blk = x->t->data, *sc = x->scales->data;
    uint64_t nb = x->ne[0] / 32, src_rows = x->t->ne[2], out_row = nb * 17;
    uint64_t rows = x->ne[1] * x->ne[2], per = cap / out_row, k = 0;
    for (uint64_t r = 0; r < rows; r++) {
        uint64_t sr = (r / x->ne[1]) * src_rows + x->roff + (r % x->ne[1]) * x->rstep;
        uint8_t *o = (uint8_t *)obuf + k * out_row;
        for (uint64_t b = 0; b < nb; b++) {
            const uint8_t *q = blk + (sr * nb + b) * 16;
            o[b * 17] = sc[sr * nb + b];
            for (int j = 0; j < 16; j++) {
                int k2 = j + 16;
                uint8_t lo = (q[j / 2] >> (4 * (j & 1))) & 15, hi = (q[k2 / 2] >> (4 * (k2 & 1))) & 15;
                o[b * 17 + 1 + j] = (uint8_t)(lo | hi << 4);
            }
        }
        if (++k == per || r + 1 == rows) {
            if (rvl_interrupted())
                return rvl_seterr(RVL_EINTR, "interrupted");
            int rc = rvl_gguf_writer_tensor_data(w, idx, obuf, k * out_row);
            if (rc < 0)
                return rc;
            k = 0;
        }
    }
    return 0;
}

/* The rows of source t (a whole tensor, or one expert's matrix). */
static int stream_rows(rvl_gguf_writer *w, uint64_t idx, const imp_tensor *x, const rvl_tensor_info *t,
                       float *f32, void *obuf)
{
    const rvl_kformat *kin = rvl_kformat_get(t->type), *kout = rvl_kformat_get(x->type);
    uint64_t row = t->ne[0], rows = x->n_dims >= 2 ? x->ne[1] : 1, src_rows = row ? t->n_elements / row : 0;
    uint64_t in_row = rvl_kformat_row_bytes(kin, row), out_row = rvl_kformat_row_bytes(kout, row);
    uint64_t chunk = rvl_convert_chunk_rows(row, rows);
    for (uint64_t r = 0; r < rows; r += chunk) {
        uint64_t m = rows - r < chunk ? rows - r : chunk;
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        for (uint64_t k = 0; k < m; k++) {
            uint64_t s = x->perm ? rvl_hf_row(r + k, x->perm, src_rows) : r + k;
            const char *src = (const char *)t->data + s * in_row;
            if (t->type == x->type && !x->shift) {
                memcpy((char *)obuf + k * out_row, src, (size_t)in_row);
                continue;
            }
            kin->dequantize(src, f32, (int64_t)row);
            if (x->shift) {
                /* w + 1 in the weights' own precision, as torch adds */
                for (uint64_t i = 0; i < row; i++)
                    f32[i] += 1.0f;
                if (t->type != RVL_TYPE_F32) {
                    kin->quantize(f32, (char *)obuf + k * out_row, (int64_t)row, NULL);
                    kin->dequantize((char *)obuf + k * out_row, f32, (int64_t)row);
                }
            }
            kout->quantize(f32, (char *)obuf + k * out_row, (int64_t)row, NULL);
        }
        int rc = rvl_gguf_writer_tensor_data(w, idx, obuf, m * out_row);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int stream_tensor(rvl_gguf_writer *w, uint64_t idx, const imp_tensor *x, float *f32, void *obuf,
                         uint64_t cap)
{
    if (x->scales)
        return stream_mxfp4(w, idx, x, obuf, cap);
    if (x->gather)
        return stream_gather(w, idx, x, f32, obuf, cap);
    if (!x->t) {   /* a 1-D F32 tensor from config.json's numbers */
        const cJSON *e;
        uint64_t k = 0;
        cJSON_ArrayForEach(e, x->f)
            f32[k++] = (float)e->valuedouble;
        return rvl_gguf_writer_tensor_data(w, idx, f32, k * 4);
    }
    if (!x->exps)
        return stream_rows(w, idx, x, x->t, f32, obuf);
    for (uint64_t e = 0; e < x->ne[2]; e++) {
        int rc = stream_rows(w, idx, x, x->exps[e], f32, obuf);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The Hugging Face name of a tensor of the language model of a
 * Gemma3ForConditionalGeneration as Gemma3ForCausalLM names it; NULL for
 * the vision tower and the projector, which are not imported. */
static const char *text_part_name(const char *s, char *buf, size_t cap)
{
    static const char *const pre[][2] = {
        {"model.language_model.", "model."}, {"language_model.model.", "model."},
        {"language_model.lm_head.", "lm_head."},
    };
    if (strstr(s, "vision_tower") || strstr(s, "multi_modal_projector"))
        return NULL;
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
        size_t n = strlen(pre[i][0]);
        if (!strncmp(s, pre[i][0], n)) {
            snprintf(buf, cap, "%s%s", pre[i][1], s + n);
            return buf;
        }
    }
    return s;
}

static int plan_sorted(const char *in, const rvl_tensor_info **by_name, uint64_t n, const hparams *h,
                       const vocab *v, imp_tensor *x, uint64_t *nxp, uint64_t *max_row,
                       uint64_t *max_chunk, bool *have_embd);

static void note_sizes(const rvl_tensor_info *t, uint64_t *max_row, uint64_t *max_chunk)
{
    uint64_t rb = t->ne[0] * 4, c = rvl_convert_chunk_rows(t->ne[0], t->n_elements / t->ne[0]) * t->ne[0];
    if (rb > *max_row) *max_row = rb;
    if (c > *max_chunk) *max_chunk = c;
}

/* One expert's matrix `s` into its stacked tensor, which is made where the
 * first of its experts sorts (a layer's experts sort together, so that is
 * where the converter writes it): 1 taken, 0 not an expert's. */
static int plan_expert(const char *in, const rvl_tensor_info *t, const char *s, const hparams *h,
                       imp_tensor *x, uint64_t *nxp, uint64_t *max_row, uint64_t *max_chunk)
{
    char name[64];
    uint32_t e;
    if (!rvl_hf_expert_tensor(h->arch, h->n_layer, s, name, sizeof name, &e))
        return 0;
    if (e >= h->n_expert)
        return rvl_seterr(RVL_EFORMAT, "%s: tensor %s: expert %u of a model of %u", in, s, e, h->n_expert);
    if (t->type != RVL_TYPE_F32 && t->type != RVL_TYPE_F16 && t->type != RVL_TYPE_BF16)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s: dtype %s (F32, F16 or BF16 expected)",
                          in, s, rvl_type_get(t->type) ? rvl_type_get(t->type)->name : "?");
    if (t->n_dims != 2 || t->ne[0] == 0 || t->ne[1] == 0)
        return rvl_seterr(RVL_EFORMAT, "%s: tensor %s: an expert's matrix has 2 dimensions", in, s);
    imp_tensor *m = NULL;
    for (uint64_t i = *nxp; i-- > 0 && !m;)
        if (x[i].exps && !strcmp(x[i].name, name))
            m = &x[i];
    if (!m) {
        m = &x[(*nxp)++];
        snprintf(m->name, sizeof m->name, "%s", name);
        if (!(m->exps = calloc(h->n_expert, sizeof *m->exps)))
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        m->t = t;
        m->type = t->type;
        m->n_dims = 3;
        m->ne[0] = t->ne[0];
        m->ne[1] = t->ne[1];
        m->ne[2] = h->n_expert;
    }
    if (m->exps[e])
        return rvl_seterr(RVL_EFORMAT, "%s: tensor %s: expert %u twice", in, s, e);
    if (t->type != m->type || t->ne[0] != m->ne[0] || t->ne[1] != m->ne[1])
        return rvl_seterr(RVL_EFORMAT, "%s: tensor %s: not of the dtype and shape of its layer's other "
                          "experts", in, s);
    m->exps[e] = t;
    note_sizes(t, max_row, max_chunk);
    return 1;
}

static void note_out(uint64_t n0, uint64_t *max_row, uint64_t *max_chunk)
{
    if (n0 * 4 > *max_row) *max_row = n0 * 4;
    if (n0 > *max_chunk) *max_chunk = n0;
}

/* A tensor picked from t by strides (imp_tensor.gather). */
static void add_gather(imp_tensor *m, const rvl_tensor_info *t, const char *name, uint32_t n_dims,
                       uint64_t n0, uint64_t n1, uint64_t n2, uint64_t base, uint64_t s0, uint64_t s1, uint64_t s2)
{
    snprintf(m->name, sizeof m->name, "%s", name);
    m->t = t;
    m->gather = true;
    m->n_dims = n_dims;
    m->type = forced_f32(name, n_dims) ? RVL_TYPE_F32 : t->type;
    m->ne[0] = n0;
    m->ne[1] = n1;
    m->ne[2] = n2;
    m->base = base;
    m->s[0] = s0;
    m->s[1] = s1;
    m->s[2] = s2;
}

static int float_dtype(const char *in, const char *s, const rvl_tensor_info *t)
{
    if (t->type != RVL_TYPE_F32 && t->type != RVL_TYPE_F16 && t->type != RVL_TYPE_BF16)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s: dtype %s (F32, F16 or BF16 expected)",
                          in, s, rvl_type_get(t->type) ? rvl_type_get(t->type)->name : "?");
    return 0;
}

/* DeepSeek: the layers past num_hidden_layers (V3's multi-token prediction)
 * are left out, as the converter leaves them; kv_b_proj (per head, the
 * keys' nope rows then the values' rows, over the latent) becomes
 * attn_k_b (each head's key rows transposed: [kv_lora_rank, nope] per head)
 * and attn_v_b ([v_head_dim, kv_lora_rank] per head). 1 taken, 0 not. */
static int plan_deepseek2(const char *in, const rvl_tensor_info *t, const char *s, const hparams *h,
                          imp_tensor *x, uint64_t *nxp, uint64_t *max_row, uint64_t *max_chunk)
{
    unsigned l;
    int n = 0;
    if (sscanf(s, "model.layers.%u.%n", &l, &n) != 1 || n == 0)
        return 0;
    if (l >= h->n_layer)
        return 1;
    if (strcmp(s + n, "self_attn.kv_b_proj.weight"))
        return 0;
    uint64_t nope = h->k_mla - h->rope_dim, v = h->v_mla, kvl = h->kv_lora, H = h->n_head;
    int rc = float_dtype(in, s, t);
    if (rc < 0)
        return rc;
    if (t->n_dims != 2 || t->ne[0] != kvl || t->ne[1] != H * (nope + v))
        return rvl_seterr(RVL_EFORMAT, "%s: tensor %s: not [%llu, %llu] (heads x (qk_nope_head_dim + "
                          "v_head_dim), kv_lora_rank)", in, s, (unsigned long long)(H * (nope + v)),
                          (unsigned long long)kvl);
    char name[64];
    snprintf(name, sizeof name, "blk.%u.attn_k_b.weight", l);
    add_gather(&x[(*nxp)++], t, name, 3, nope, kvl, H, 0, kvl, 1, (nope + v) * kvl);
    snprintf(name, sizeof name, "blk.%u.attn_v_b.weight", l);
    add_gather(&x[(*nxp)++], t, name, 3, kvl, v, H, nope * kvl, 1, kvl, (nope + v) * kvl);
    note_out(kvl > nope ? kvl : nope, max_row, max_chunk);
    return 1;
}

/* gpt-oss's experts, one 3-D tensor per kind in the checkpoint: down_proj
 * [experts, ff, dim] and gate_up_proj [experts, dim, 2 ff] (x @ W: the
 * transposes of GGUF's matrices), gate and up interleaved along 2 ff
 * (gate the even columns), their biases alike; or MXFP4 (*_blocks and
 * *_scales, rows the outputs: planned by plan_mxfp4, skipped here).
 * 1 taken, 0 not. */
static int plan_gptoss(const char *in, const rvl_tensor_info *t, const char *s, const hparams *h,
                       imp_tensor *x, uint64_t *nxp, uint64_t *max_row, uint64_t *max_chunk)
{
    unsigned l;
    int n = 0;
    if (sscanf(s, "model.layers.%u.mlp.experts.%n", &l, &n) != 1 || n == 0 || l >= h->n_layer)
        return 0;
    const char *k = s + n;
    size_t kl = strlen(k);
    if (kl > 7 && (!strcmp(k + kl - 7, "_blocks") || !strcmp(k + kl - 7, "_scales")))
        return 1;
    bool down = !strncmp(k, "down_proj", 9), bias = kl > 5 && !strcmp(k + kl - 5, "_bias");
    if (!down && strncmp(k, "gate_up_proj", 12))
        return 0;
    int rc = float_dtype(in, s, t);
    if (rc < 0)
        return rc;
    uint64_t E = h->n_expert, ff = h->n_ff_exp, dim = h->n_embd, out = down ? dim : 2 * ff;
    bool ok = bias ? t->n_dims == 2 && t->ne[1] == E && t->ne[0] == out
                   : t->n_dims == 3 && t->ne[2] == E && t->ne[1] == (down ? ff : dim) && t->ne[0] == out;
    if (!ok)
        return rvl_seterr(RVL_EFORMAT, "%s: tensor %s: not the shape num_local_experts %u, hidden_size %u "
                          "and intermediate_size %u give", in, s, h->n_expert, h->n_embd, h->n_ff_exp);
    char name[64];
    if (down) {
        snprintf(name, sizeof name, "blk.%u.ffn_down_exps.%s", l, bias ? "bias" : "weight");
        if (bias)
            add_gather(&x[(*nxp)++], t, name, 2, dim, E, 1, 0, 1, dim, 0);
        else
            add_gather(&x[(*nxp)++], t, name, 3, ff, dim, E, 0, dim, 1, ff * dim);
    } else {
        for (int u = 0; u < 2; u++) {
            snprintf(name, sizeof name, "blk.%u.ffn_%s_exps.%s", l, u ? "up" : "gate", bias ? "bias" : "weight");
            if (bias)
                add_gather(&x[(*nxp)++], t, name, 2, ff, E, 1, (uint64_t)u, 2, 2 * ff, 0);
            else
                add_gather(&x[(*nxp)++], t, name, 3, dim, ff, E, (uint64_t)u, 2 * ff, 2, dim * 2 * ff);
        }
    }
    note_out(dim > ff ? dim : ff, max_row, max_chunk);
    return 1;
}

/* gpt-oss's MXFP4 experts: each *_blocks with its *_scales, planned in the
 * converter's order (before all other tensors, a layer's down then gate
 * and up). */
static int plan_mxfp4(const char *in, const rvl_file *st, const rvl_tensor_info *const *by_name, uint64_t n,
                      const hparams *h, imp_tensor *x, uint64_t *nxp, uint64_t *max_row, uint64_t *max_chunk)
{
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = by_name[i];
        char s[256], sn[256], name[64];
        unsigned l;
        int m = 0;
        snprintf(s, sizeof s, "%.*s", (int)(t->name.len > 255 ? 255 : t->name.len), t->name.ptr);
        if (sscanf(s, "model.layers.%u.mlp.experts.%n", &l, &m) != 1 || m == 0 || l >= h->n_layer)
            continue;
        bool down = !strcmp(s + m, "down_proj_blocks");
        if (!down && strcmp(s + m, "gate_up_proj_blocks"))
            continue;
        snprintf(sn, sizeof sn, "%.*s_scales", (int)(strlen(s) - 7), s);
        const rvl_tensor_info *sc = rvl_file_find_tensor(st, sn);
        uint64_t E = h->n_expert, rows = down ? h->n_embd : 2ull * h->n_ff_exp;
        uint64_t cols = down ? h->n_ff_exp : h->n_embd, nb = cols / 32;
        if (!sc)
            return rvl_seterr(RVL_EFORMAT, "%s: tensor %s without its %s", in, s, sn);
        if (t->type != RVL_TYPE_U8 || sc->type != RVL_TYPE_U8 || cols % 32 || t->n_dims != 4 ||
            t->ne[0] != 16 || t->ne[1] != nb || t->ne[2] != rows || t->ne[3] != E || sc->n_dims != 3 ||
            sc->ne[0] != nb || sc->ne[1] != rows || sc->ne[2] != E)
            return rvl_seterr(RVL_EFORMAT, "%s: tensor %s: MXFP4 blocks of another shape than %llu experts "
                              "of %llu x %llu (U8 [%llu, %llu, %llu, 16] and scales [%llu, %llu, %llu])", in, s,
                              (unsigned long long)E, (unsigned long long)rows, (unsigned long long)cols,
                              (unsigned long long)E, (unsigned long long)rows, (unsigned long long)nb,
                              (unsigned long long)E, (unsigned long long)rows, (unsigned long long)nb);
        for (int u = 0; u < (down ? 1 : 2); u++) {
            imp_tensor *o = &x[(*nxp)++];
            snprintf(name, sizeof name, "blk.%u.ffn_%s_exps.weight", l, down ? "down" : u ? "up" : "gate");
            snprintf(o->name, sizeof o->name, "%s", name);
            o->t = t;
            o->scales = sc;
            o->type = RVL_TYPE_MXFP4;
            o->n_dims = 3;
            o->ne[0] = cols;
            o->ne[1] = down ? rows : rows / 2;
            o->ne[2] = E;
            o->roff = (uint64_t)u;
            o->rstep = down ? 1 : 2;
        }
        note_out(cols, max_row, max_chunk);
    }
    return 0;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    const rvl_tensor_info *x = *(const rvl_tensor_info *const *)a, *y = *(const rvl_tensor_info *const *)b;
    uint64_t n = x->name.len < y->name.len ? x->name.len : y->name.len;
    int c = memcmp(x->name.ptr, y->name.ptr, (size_t)n);
    return c ? c : (x->name.len > y->name.len) - (x->name.len < y->name.len);
}

/* The tensors to write, in the converter's order: Phi-3's LongRoPE
 * factors first, then the model's by name (the converter sorts each
 * shard's names; across shards the order may differ, not the tensors). */
static int plan_tensors(const char *in, const rvl_file *st, const hparams *h, const vocab *v,
                        imp_tensor *x, uint64_t *nx_out, uint64_t *max_row, uint64_t *max_chunk)
{
    uint64_t n = rvl_file_n_tensors(st), nx = 0;
    if (h->long_f) {
        static const char *const fn[] = {"rope_factors_long.weight", "rope_factors_short.weight"};
        for (int k = 0; k < 2; k++) {
            snprintf(x[nx].name, sizeof x[nx].name, "%s", fn[k]);
            x[nx].f = k ? h->short_f : h->long_f;
            x[nx].type = RVL_TYPE_F32;
            x[nx].n_dims = 1;
            x[nx].ne[0] = (uint64_t)cJSON_GetArraySize(x[nx].f);
            x[nx].ne[1] = 1;
            nx++;
        }
    }
    bool have_embd = false;
    const rvl_tensor_info **by_name = malloc((n ? n : 1) * sizeof *by_name);
    if (!by_name)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++)
        by_name[i] = rvl_file_tensor(st, i);
    qsort(by_name, (size_t)n, sizeof *by_name, cmp_tensor_name);
    int rc = 0;
    if (!strcmp(h->arch, "gpt-oss"))
        rc = plan_mxfp4(in, st, by_name, n, h, x, &nx, max_row, max_chunk);
    if (rc == 0)
        rc = plan_sorted(in, by_name, n, h, v, x, &nx, max_row, max_chunk, &have_embd);
    free(by_name);
    if (rc < 0)
        return rc;
    /* every stacked tensor whole; every sparse layer with its experts */
    uint32_t n_stacked = 0;
    for (uint64_t i = 0; i < nx; i++) {
        for (uint32_t e = 0; x[i].exps && e < h->n_expert; e++)
            if (!x[i].exps[e])
                return rvl_seterr(RVL_EFORMAT, "%s: %s: expert %u's matrix is missing", in, x[i].name, e);
        size_t nl = strlen(x[i].name);
        n_stacked += nl > 12 && !strcmp(x[i].name + nl - 12, "_exps.weight");
    }
    uint32_t n_sparse = h->n_layer - h->n_dense_lead;
    if (n_stacked != 3 * n_sparse && h->n_expert)
        return rvl_seterr(RVL_EFORMAT, "%s: %u layers of %u experts, but %u stacked expert tensors "
                          "(3 a layer)", in, n_sparse, h->n_expert, n_stacked);
    if (!have_embd)
        return rvl_seterr(RVL_EFORMAT, "%s: no model.embed_tokens.weight", in);
    *nx_out = nx;
    return 0;
}

static int plan_sorted(const char *in, const rvl_tensor_info **by_name, uint64_t n, const hparams *h,
                       const vocab *v, imp_tensor *x, uint64_t *nxp, uint64_t *max_row,
                       uint64_t *max_chunk, bool *have_embd)
{
    uint64_t nx = *nxp;
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = by_name[i];
        char s0[256], s1[256];
        snprintf(s0, sizeof s0, "%.*s", (int)(t->name.len > 255 ? 255 : t->name.len), t->name.ptr);
        const char *s = text_part_name(s0, s1, sizeof s1);
        if (!s)
            continue;
        if (!strcmp(h->arch, "deepseek2") || !strcmp(h->arch, "gpt-oss")) {
            int rc = h->arch[0] == 'd' ? plan_deepseek2(in, t, s, h, x, &nx, max_row, max_chunk)
                                       : plan_gptoss(in, t, s, h, x, &nx, max_row, max_chunk);
            if (rc < 0)
                return rc;
            if (rc > 0)
                continue;
        }
        if (h->n_expert) {
            int rc = plan_expert(in, t, s, h, x, &nx, max_row, max_chunk);
            if (rc < 0)
                return rc;
            if (rc > 0)
                continue;
        }
        int k = rvl_hf_tensor_name(h->arch, h->n_layer, h->n_head, h->n_head_kv, h->tied, s,
                                   x[nx].name, sizeof x[nx].name, &x[nx].perm);
        if (k == 0)
            continue;
        if (k < 0)
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s: no GGUF name for it", in, s);
        if (t->type != RVL_TYPE_F32 && t->type != RVL_TYPE_F16 && t->type != RVL_TYPE_BF16)
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s: dtype %s (F32, F16 or BF16 expected)",
                              in, s, rvl_type_get(t->type) ? rvl_type_get(t->type)->name : "?");
        if (t->n_dims < 1 || t->n_dims > 2 || t->ne[0] == 0)
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s: %u dimensions", in, s, t->n_dims);
        if (x[nx].perm && (t->n_dims != 2 || t->ne[1] % x[nx].perm || (t->ne[1] / x[nx].perm) % 2))
            return rvl_seterr(RVL_EFORMAT, "%s: tensor %s: %llu rows do not split into %u heads", in,
                              s, (unsigned long long)(t->n_dims == 2 ? t->ne[1] : 1), x[nx].perm);
        x[nx].t = t;
        x[nx].type = forced_f32(x[nx].name, t->n_dims) ? RVL_TYPE_F32 : t->type;
        x[nx].n_dims = t->n_dims;
        x[nx].ne[0] = t->ne[0];
        x[nx].ne[1] = t->n_dims == 2 ? t->ne[1] : 1;
        size_t sl = strlen(s);
        x[nx].shift = h->norm_shift && sl >= 11 && !strcmp(s + sl - 11, "norm.weight");
        if (!strcmp(x[nx].name, "token_embd.weight")) {
            *have_embd = true;
            /* Gemma 3: the rows past the tokenizer's tokens are dropped */
            if (!strcmp(h->arch, "gemma3") && t->n_dims == 2 && v->n_real && v->n_real < x[nx].ne[1])
                x[nx].ne[1] = v->n_real;
        }
        note_sizes(t, max_row, max_chunk);
        nx++;
    }
    *nxp = nx;
    return 0;
}

/* The hyper-parameters, in the order convert_hf_to_gguf.py writes them
 * for the family. */
static int write_hparams(rvl_gguf_writer *w, const hparams *h, const vocab *v, uint32_t ftype)
{
    char key[96];
    const char *a = h->arch;
    bool g2 = !strcmp(a, "gemma2"), phi3 = !strcmp(a, "phi3");
    int rc = 0;
#define K(s) (snprintf(key, sizeof key, "%s.%s", a, s), key)
#define U32(s, x) if (rc == 0) rc = rvl_gguf_writer_kv_u32(w, K(s), x)
#define F32(s, x) if (rc == 0) rc = rvl_gguf_writer_kv_f32(w, K(s), (float)(x))
    if (phi3) {
        if (h->long_f)
            F32("rope.scaling.attn_factor", h->attn_factor);
        return rc;
    }
    if (g2) {
        U32("context_length", h->n_ctx);
        U32("embedding_length", h->n_embd);
        U32("block_count", h->n_layer);
    } else {
        U32("block_count", h->n_layer);
        U32("context_length", h->n_ctx);
        U32("embedding_length", h->n_embd);
    }
    U32("feed_forward_length", h->n_ff);
    U32("attention.head_count", h->n_head);
    U32("attention.head_count_kv", h->n_head_kv);
    if (h->rope_type) {
        if (rc == 0)
            rc = rvl_gguf_writer_kv_str(w, K("rope.scaling.type"), h->rope_type);
        F32("rope.scaling.factor", h->rope_factor);
        if (h->rope_type[0] == 'y') {
            static const char *const yk[] = {"rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor",
                                             "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow"};
            U32("rope.scaling.original_context_length", h->rope_orig_ctx);
            for (int i = 0; i < 4; i++)
                if (!isnan(h->yarn[i]))
                    F32(yk[i], h->yarn[i]);
        }
    }
    if (!g2 || h->rope_base != 10000)     /* Gemma 2's converter writes no base (10000) */
        F32("rope.freq_base", h->rope_base);
    if (h->swa_rope_base)
        F32("rope.freq_base_swa", h->swa_rope_base);
    F32("attention.layer_norm_rms_epsilon", h->eps);
    if (h->n_expert) {
        U32("expert_count", h->n_expert);
        U32("expert_used_count", h->n_expert_used);
    }
    if (h->has_group)
        U32("expert_group_count", h->n_group);
    if (h->has_group_used)
        U32("expert_group_used_count", h->n_group_used);
    if (h->gating)
        U32("expert_gating_func", h->gating);
    if (h->has_head_dim) {   /* (deepseek2's converter writes its own values over these) */
        U32("attention.key_length", h->k_len);
        U32("attention.value_length", h->v_len);
    }
    if (rc == 0)
        rc = rvl_gguf_writer_kv_u32(w, "general.file_type", ftype);
    if (!strcmp(a, "deepseek2")) {
        U32("leading_dense_block_count", h->n_dense_lead);
        U32("vocab_size", h->n_vocab ? h->n_vocab : v->n);
        if (h->q_lora)
            U32("attention.q_lora_rank", h->q_lora);
        U32("attention.kv_lora_rank", h->kv_lora);
        if (!h->has_head_dim) {
            U32("attention.key_length", h->k_len);
            U32("attention.value_length", h->v_len);
        }
        U32("attention.key_length_mla", h->k_mla);
        U32("attention.value_length_mla", h->v_mla);
        U32("expert_feed_forward_length", h->n_ff_exp);
        U32("expert_shared_count", h->n_shexp);
        if (!isnan(h->w_scale))
            F32("expert_weights_scale", h->w_scale);
        if (h->w_norm && rc == 0)
            rc = rvl_gguf_writer_kv_bool(w, K("expert_weights_norm"), true);
        U32("rope.dimension_count", h->rope_dim);
        if (!isnan(h->yarn_log_mul))
            F32("rope.scaling.yarn_log_multiplier", h->yarn_log_mul);
        return rc;
    }
    if (!strcmp(a, "gpt-oss")) {
        U32("attention.sliding_window", h->window);
        U32("expert_feed_forward_length", h->n_ff_exp);
        return rc;
    }
    if (h->n_ff_exp)
        U32("expert_feed_forward_length", h->n_ff_exp);
    if (h->n_ff_shexp)
        U32("expert_shared_feed_forward_length", h->n_ff_shexp);
    if (llama_like(a)) {
        U32("vocab_size", h->n_vocab ? h->n_vocab : v->n);
        U32("rope.dimension_count", h->head_dim);
    }
    if (!isnan(h->yarn_log_mul))
        F32("rope.scaling.yarn_log_multiplier", h->yarn_log_mul);
    if (!isnan(h->temp_scale))
        F32("attention.temperature_scale", h->temp_scale);
    if (h->attn_softcap)
        F32("attn_logit_softcapping", h->attn_softcap);
    if (h->final_softcap)
        F32("final_logit_softcapping", h->final_softcap);
    if (h->has_window)
        U32("attention.sliding_window", h->window);
    if (h->q_scale)
        F32("attention.scale", h->q_scale);
    return rc;
}

/* Phi-3's own order (after its attention factor and the general keys). */
static int write_phi3(rvl_gguf_writer *w, const hparams *h, uint32_t ftype)
{
    char key[96];
    const char *a = h->arch;
    int rc = 0;
    U32("context_length", h->n_ctx);
    U32("rope.scaling.original_context_length", h->rope_orig_ctx);
    U32("embedding_length", h->n_embd);
    U32("feed_forward_length", h->n_ff);
    U32("block_count", h->n_layer);
    U32("attention.head_count", h->n_head);
    U32("attention.head_count_kv", h->n_head_kv);
    F32("attention.layer_norm_rms_epsilon", h->eps);
    U32("rope.dimension_count", h->rope_dim);
    F32("rope.freq_base", h->rope_base);
    if (rc == 0)
        rc = rvl_gguf_writer_kv_u32(w, "general.file_type", ftype);
    U32("attention.sliding_window", h->window);
    return rc;
#undef K
#undef U32
#undef F32
}

/* The vocabulary keys, in SpecialVocab's order. */
static int write_vocab(rvl_gguf_writer *w, const vocab *v, rvl_str *strs, bool space_prefix_first)
{
    int rc;
    if (v->space_prefix >= 0 && space_prefix_first &&
        (rc = rvl_gguf_writer_kv_bool(w, "tokenizer.ggml.add_space_prefix", v->space_prefix)) < 0)
        return rc;
    for (uint32_t i = 0; i < v->n; i++)
        strs[i] = (rvl_str){v->tok[i], strlen(v->tok[i])};
    if ((rc = rvl_gguf_writer_kv_str(w, "tokenizer.ggml.model", v->spm ? "llama" : "gpt2")) < 0 ||
        (rc = rvl_gguf_writer_kv_str(w, "tokenizer.ggml.pre", v->pre)) < 0 ||
        (rc = rvl_gguf_writer_kv_str_arr(w, "tokenizer.ggml.tokens", strs, v->n)) < 0 ||
        (v->spm && (rc = rvl_gguf_writer_kv_arr(w, "tokenizer.ggml.scores", RVL_GGUF_F32, v->scores,
                                                v->n)) < 0) ||
        (rc = rvl_gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", RVL_GGUF_I32, v->type, v->n)) < 0)
        return rc;
    for (uint32_t i = 0; !v->spm && i < v->n_merges; i++)
        strs[i] = (rvl_str){v->merges[i], strlen(v->merges[i])};
    if (!v->spm && (rc = rvl_gguf_writer_kv_str_arr(w, "tokenizer.ggml.merges", strs, v->n_merges)) < 0)
        return rc;
    static const char *const idk[SPECIAL_KINDS] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.cls_token_id", "tokenizer.ggml.mask_token_id"};
    for (int i = 0; i < v->n_special; i++) {
        int k = v->special_order[i];
        if ((rc = rvl_gguf_writer_kv_u32(w, idk[k], (uint32_t)v->special[k])) < 0)
            return rc;
    }
    if ((v->add_bos >= 0 && (rc = rvl_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos)) < 0) ||
        (v->add_eos >= 0 && (rc = rvl_gguf_writer_kv_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos)) < 0) ||
        (v->chat_template && (rc = rvl_gguf_writer_kv_str(w, "tokenizer.chat_template", v->chat_template)) < 0))
        return rc;
    if (v->space_prefix >= 0 && !space_prefix_first &&
        (rc = rvl_gguf_writer_kv_bool(w, "tokenizer.ggml.add_space_prefix", v->space_prefix)) < 0)
        return rc;
    return 0;
}

static int write_import(const char *in, const char *dest, const rvl_file *st, const hparams *h,
                        const vocab *v)
{
    rvl_gguf_writer *w = NULL;
    imp_tensor *x = NULL;
    rvl_str *strs = NULL;
    float *f32 = NULL;
    void *obuf = NULL;
    int rc;
    uint64_t n = rvl_file_n_tensors(st), nx = 0, max_row = 64 * 4, max_chunk = 64;

    /* (a checkpoint's tensor gives at most two: kv_b_proj, gate_up_proj) */
    x = calloc(2 * n + 2, sizeof *x);
    if (!x) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = plan_tensors(in, st, h, v, x, &nx, &max_row, &max_chunk)) < 0)
        goto out;
    for (uint64_t i = 0; i < nx; i++)
        if (x[i].f && (uint64_t)cJSON_GetArraySize(x[i].f) * 4 > max_row)
            max_row = (uint64_t)cJSON_GetArraySize(x[i].f) * 4;
    f32 = malloc((size_t)max_row);
    obuf = malloc((size_t)max_chunk * 4);
    strs = calloc(v->n > v->n_merges ? v->n : v->n_merges ? v->n_merges : 1, sizeof *strs);
    if (!f32 || !obuf || !strs) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }
    /* general.file_type of the matrices' type (all of one dtype, as
     * Hugging Face stores them) */
    uint32_t mtype = RVL_TYPE_F32;
    bool mxfp4 = false;   /* gpt-oss's MXFP4 experts: the converter says MOSTLY_MXFP4_MOE */
    for (uint64_t i = 0; i < nx; i++) {
        mxfp4 |= x[i].type == RVL_TYPE_MXFP4;
        if (x[i].n_dims >= 2 && x[i].type != RVL_TYPE_MXFP4 && !forced_f32(x[i].name, x[i].n_dims))
            mtype = x[i].type;
    }
    uint32_t ftype = mxfp4 ? RVL_FTYPE_MOSTLY_MXFP4_MOE : rvl_convert_float_ftype(mtype);

    /* metadata, in convert_hf_to_gguf.py's order */
    char name[256], tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", in);
    size_t tl = strlen(tmp);
    while (tl > 1 && tmp[tl - 1] == '/')
        tmp[--tl] = 0;
    snprintf(name, sizeof name, "%s", basename(tmp));
    bool phi3 = !strcmp(h->arch, "phi3");
    if ((rc = rvl_gguf_writer_open(&w, dest)) < 0 ||
        (rc = rvl_gguf_writer_kv_str(w, "general.architecture", h->arch)) < 0 ||
        (phi3 && (rc = write_hparams(w, h, v, 0)) < 0) ||
        (rc = rvl_gguf_writer_kv_str(w, "general.type", "model")) < 0 ||
        (rc = rvl_gguf_writer_kv_str(w, "general.name", name)) < 0 ||
        (rc = phi3 ? write_phi3(w, h, ftype) : write_hparams(w, h, v, ftype)) < 0 ||
        (rc = rvl_gguf_writer_kv_u32(w, "general.quantization_version", RVL_GGML_QNT_VERSION)) < 0 ||
        (rc = write_vocab(w, v, strs, llama_like(h->arch))) < 0)
        goto out;

    for (uint64_t i = 0; i < nx; i++)
        if ((rc = rvl_gguf_writer_add_tensor(w, x[i].name, x[i].type, x[i].n_dims, x[i].ne, NULL)) < 0)
            goto out;
    if ((rc = rvl_gguf_writer_begin_data(w)) < 0)
        goto out;
    for (uint64_t i = 0; i < nx; i++)
        if ((rc = stream_tensor(w, i, &x[i], f32, obuf, max_chunk * 4)) < 0) {
            if (rc != RVL_EINTR)
                rvl_preerr(rc, "%s: tensor %s", in, x[i].name);
            goto out;
        }
    rc = rvl_gguf_writer_finish(w);
    w = NULL;
out:
    rvl_gguf_writer_abort(w);
    for (uint64_t i = 0; x && i < 2 * n + 2; i++)   /* (all of them: nx is not set on errors) */
        free(x[i].exps);
    free(x);
    free(strs);
    free(f32);
    free(obuf);
    return rc;
}

/* ======================================================================
 * The entry point: any input as an open GGUF
 * ====================================================================== */
/* config.json with text_config's keys over its own (a multimodal model's
 * language part), as the converter reads it. owned. */
static int text_config(const cJSON *cfg, cJSON **out)
{
    const cJSON *tc = jget(cfg, "text_config"), *e;
    *out = cJSON_Duplicate(cfg, true);
    if (!*out)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    if (!cJSON_IsObject(tc))
        return 0;
    cJSON_ArrayForEach(e, tc) {
        cJSON *d = cJSON_Duplicate(e, true);
        if (!d)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        if (cJSON_HasObjectItem(*out, e->string))
            cJSON_ReplaceItemInObjectCaseSensitive(*out, e->string, d);
        else
            cJSON_AddItemToObject(*out, e->string, d);
    }
    return 0;
}

int rvl_convert_open_input(const char *in, const char *out, rvl_file **fo)
{
    rvl_file *f = NULL, *g = NULL;
    cJSON *cfg = NULL, *tcfg = NULL, *tj = NULL, *tc = NULL;
    vocab v = {0};
    char dir[4096], dest[4200];
    int rc;

    *fo = NULL;
    if ((rc = rvl_file_open(&f, in)) < 0)
        return rc;
    if (rvl_file_fmt(f) == RVL_FMT_GGUF) {
        *fo = f;
        return 0;
    }
    /* safetensors: the model directory is IN, or the directory of IN */
    struct stat sb;
    snprintf(dir, sizeof dir, "%s", in);
    if (stat(in, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        char *d = dirname(dir);
        memmove(dir, d, strlen(d) + 1);
    }
    hparams h;
    char cpath[4200];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    if ((rc = read_json(dir, "config.json", true, &cfg)) < 0 ||
        (rc = text_config(cfg, &tcfg)) < 0 ||
        (rc = read_hparams(cpath, tcfg, &h)) < 0 ||
        (rc = read_json(dir, "tokenizer.json", false, &tj)) < 0 ||
        (rc = read_json(dir, "tokenizer_config.json", false, &tc)) < 0 ||
        (rc = read_vocab(dir, tj, tc, cfg, &h, &v)) < 0)
        goto out;
    /* the import lives next to the output (same file system, room checked
     * by the writes) under a name nobody else uses */
    const char *o = out ? out : in;
    if (snprintf(dest, sizeof dest, "%s.import.XXXXXX", o) >= (int)sizeof dest) {
        rc = rvl_seterr(RVL_EINVAL, "%s: path too long", o);
        goto out;
    }
    int fd = mkstemp(dest);
    if (fd < 0) {
        rc = rvl_seterr(RVL_EIO, "%s: %s", dest, strerror(errno));
        goto out;
    }
    close(fd);
    if ((rc = write_import(in, dest, f, &h, &v)) < 0) {
        unlink(dest);
        goto out;
    }
    rc = rvl_file_open(&g, dest);
    unlink(dest);                 /* the mapping keeps the data */
    if (rc == 0)
        *fo = g;
out:
    cJSON_Delete(cfg);
    cJSON_Delete(tcfg);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    vocab_free(&v);
    rvl_file_close(f);
    return rc;
}

/* For the fuzz harness: the metadata half of the import from memory. */
int rvl_convert_hf_parse(const void *config, size_t n_config, const void *tokenizer,
                         size_t n_tokenizer, const void *tok_config, size_t n_tok_config)
{
    cJSON *cfg = NULL, *tcfg = NULL, *tj = NULL, *tc = NULL;
    vocab v = {0};
    hparams h;
    int rc;
    if ((rc = parse_json("config.json", config, n_config, &cfg)) < 0 ||
        (rc = text_config(cfg, &tcfg)) < 0 ||
        (rc = read_hparams("config.json", tcfg, &h)) < 0 ||
        (rc = parse_json("tokenizer.json", tokenizer, n_tokenizer, &tj)) < 0 ||
        (rc = parse_json("tokenizer_config.json", tok_config, n_tok_config, &tc)) < 0 ||
        (rc = read_vocab("/nonexistent", tj, tc, cfg, &h, &v)) < 0)
        goto out;
    if (v.n == 0 || !v.tok[v.n - 1])
        rc = rvl_seterr(RVL_EFORMAT, "empty vocabulary");
out:
    cJSON_Delete(cfg);
    cJSON_Delete(tcfg);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    vocab_free(&v);
    return rc;
}
