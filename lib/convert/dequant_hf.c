/*
 * dequant_hf.c - GGUF to a Hugging Face model directory
 * (`ruvllm dequant --format safetensors`).
 *
 * What llama.cpp's convert_hf_to_gguf.py does, undone (facts of the two
 * formats, our own code):
 *  - tensor names: token_embd -> model.embed_tokens, blk.N.attn_q ->
 *    model.layers.N.self_attn.q_proj, ffn_gate -> mlp.gate_proj, attn_norm
 *    -> input_layernorm, ffn_norm -> post_attention_layernorm, output_norm
 *    -> model.norm, output -> lm_head;
 *  - mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE): each stacked
 *    3-D ffn_{gate,up,down}_exps back to one matrix per expert
 *    (experts.E.w1/w2/w3, experts.E.gate_proj/...), the router
 *    (block_sparse_moe.gate, mlp.gate), Qwen2-MoE's shared expert;
 *  - llama's Q and K rows: the converter reorders each head's rows from
 *    Hugging Face's two halves (rotate_half) to interleaved pairs; row
 *    h*hd + 2i + j of the GGUF tensor is row h*hd + j*hd/2 + i of the
 *    original (qwen2 uses NeoX RoPE: no reordering);
 *  - hyper-parameters to config.json, the vocabulary, merges and special
 *    tokens to tokenizer.json (SentencePiece vocabularies: byte_fallback BPE
 *    with merges derived from the scores, Prepend/Replace normalizer and
 *    the matching decoder), the chat template and special token texts to
 *    tokenizer_config.json.
 * model.safetensors is streamed (header first, from the known sizes), so
 * memory stays at one chunk of rows whatever the model's size.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "convert/convert_int.h"
#include "formats.h"

/* ======================================================================
 * Model facts from the GGUF metadata
 * ====================================================================== */
typedef struct {
    char arch[32];
    uint32_t n_layer, n_embd, n_ff, n_head, n_head_kv, n_ctx, head_dim, n_vocab;
    double eps, rope_base, rope_factor;
    char rope_scaling[16];
    uint32_t rope_orig_ctx;
    bool tied, qkv_bias;
    /* the families past llama/qwen2 */
    bool gemma, norm_shift;         /* Gemma: GGUF holds 1 + w of RMSNorm gains */
    double attn_softcap, final_softcap, swa_rope_base, q_scale;   /* 0: none */
    uint32_t window, rope_dim;      /* 0: none / head_dim */
    bool has_window;
    const rvl_tensor_info *long_f, *short_f;   /* Phi-3's LongRoPE factors */
    /* YaRN's betas (NaN: not in the file), Ministral 3's log multiplier
     * (mscale_all_dim) and attention temperature beta (0: none) */
    double beta_fast, beta_slow, yarn_log_mul, temp_scale;
    bool has_log_mul;
    /* mixtures of experts (0: dense) */
    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    bool has_head_dim;              /* attention.key_length in the file */
} facts;

static bool get_u32(const rvl_file *f, const char *arch, const char *k, uint32_t *v)
{
    char key[128];
    uint64_t x;
    snprintf(key, sizeof key, "%s.%s", arch, k);
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    if (!kv || rvl_kv_get_u64(kv, &x) < 0 || x > UINT32_MAX)
        return false;
    *v = (uint32_t)x;
    return true;
}

static bool get_f64(const rvl_file *f, const char *arch, const char *k, double *v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    return kv && rvl_kv_get_f64(kv, v) == 0;
}

static bool get_str(const rvl_file *f, const char *key, char *buf, size_t cap)
{
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    rvl_str s;
    if (!kv || rvl_kv_get_str(kv, &s) < 0)
        return false;
    snprintf(buf, cap, "%.*s", (int)(s.len < cap ? s.len : cap - 1), s.ptr);
    return true;
}

static int read_facts(const char *in, const rvl_file *f, facts *m)
{
    memset(m, 0, sizeof *m);
    if (!get_str(f, "general.architecture", m->arch, sizeof m->arch))
        return rvl_seterr(RVL_EFORMAT, "%s: no general.architecture", in);
    static const char *const known[] = {"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "mistral3",
                                        "qwen2moe", "qwen3moe"};
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        ok |= !strcmp(m->arch, known[i]);
    if (!ok)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: architecture %s: the Hugging Face form is "
                          "written for llama, qwen2, qwen3, gemma2, gemma3, phi3, mistral3, qwen2moe and "
                          "qwen3moe", in, m->arch);
    static const char *const req[] = {"block_count", "embedding_length", "feed_forward_length",
                                      "attention.head_count"};
    uint32_t *dst[] = {&m->n_layer, &m->n_embd, &m->n_ff, &m->n_head};
    for (int i = 0; i < 4; i++)
        if (!get_u32(f, m->arch, req[i], dst[i]) || *dst[i] == 0)
            return rvl_seterr(RVL_EFORMAT, "%s: missing or bad %s.%s", in, m->arch, req[i]);
    if (!get_u32(f, m->arch, "attention.head_count_kv", &m->n_head_kv))
        m->n_head_kv = m->n_head;
    if (!get_u32(f, m->arch, "context_length", &m->n_ctx))
        m->n_ctx = 2048;
    m->has_head_dim = get_u32(f, m->arch, "attention.key_length", &m->head_dim);
    if (!m->has_head_dim)
        m->head_dim = m->n_embd / m->n_head;
    if (!get_f64(f, m->arch, "attention.layer_norm_rms_epsilon", &m->eps))
        m->eps = 1e-6;
    if (!get_f64(f, m->arch, "rope.freq_base", &m->rope_base))
        m->rope_base = 10000;
    if (m->n_head_kv == 0 || m->n_head % m->n_head_kv || m->head_dim == 0 || m->head_dim % 2)
        return rvl_seterr(RVL_EFORMAT, "%s: inconsistent head counts", in);
    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch);
    if (get_str(f, key, m->rope_scaling, sizeof m->rope_scaling) &&
        strcmp(m->rope_scaling, "none") != 0) {
        if (!get_f64(f, m->arch, "rope.scaling.factor", &m->rope_factor))
            return rvl_seterr(RVL_EFORMAT, "%s: rope scaling without a factor", in);
        get_u32(f, m->arch, "rope.scaling.original_context_length", &m->rope_orig_ctx);
        if (strcmp(m->rope_scaling, "linear") != 0 && strcmp(m->rope_scaling, "yarn") != 0)
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: rope scaling %s", in, m->rope_scaling);
    } else {
        m->rope_scaling[0] = 0;
    }
    if (rvl_file_find_tensor(f, "rope_freqs.weight"))
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: rope_freqs.weight (Llama 3.1 scaling): its "
                          "Hugging Face parameters are not in the GGUF file", in);
    m->tied = rvl_file_find_tensor(f, "output.weight") == NULL;
    m->qkv_bias = rvl_file_find_tensor(f, "blk.0.attn_q.bias") != NULL;
    m->gemma = m->norm_shift = !strncmp(m->arch, "gemma", 5);
    get_f64(f, m->arch, "attn_logit_softcapping", &m->attn_softcap);
    get_f64(f, m->arch, "final_logit_softcapping", &m->final_softcap);
    get_f64(f, m->arch, "rope.freq_base_swa", &m->swa_rope_base);
    get_f64(f, m->arch, "attention.scale", &m->q_scale);
    m->has_window = get_u32(f, m->arch, "attention.sliding_window", &m->window);
    get_u32(f, m->arch, "rope.dimension_count", &m->rope_dim);
    if (!get_f64(f, m->arch, "rope.scaling.yarn_beta_fast", &m->beta_fast))
        m->beta_fast = NAN;
    if (!get_f64(f, m->arch, "rope.scaling.yarn_beta_slow", &m->beta_slow))
        m->beta_slow = NAN;
    m->has_log_mul = get_f64(f, m->arch, "rope.scaling.yarn_log_multiplier", &m->yarn_log_mul);
    get_f64(f, m->arch, "attention.temperature_scale", &m->temp_scale);
    if ((m->has_log_mul || m->temp_scale) && strcmp(m->arch, "mistral3") != 0)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: %s.%s: its Hugging Face form is Ministral 3's", in,
                          m->arch, m->has_log_mul ? "rope.scaling.yarn_log_multiplier"
                                                  : "attention.temperature_scale");
    if (!strcmp(m->arch, "mistral3") && m->has_window)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: mistral3.attention.sliding_window: llama.cpp's "
                          "mistral3 has no window", in);
    m->long_f = rvl_file_find_tensor(f, "rope_factors_long.weight");
    m->short_f = rvl_file_find_tensor(f, "rope_factors_short.weight");
    if (!strcmp(m->arch, "phi3") && !get_u32(f, m->arch, "rope.scaling.original_context_length",
                                           &m->rope_orig_ctx))
        m->rope_orig_ctx = m->n_ctx;
    if (!m->long_f != !m->short_f || (m->long_f && strcmp(m->arch, "phi3") != 0))
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: rope_factors_long/short: their Hugging Face form "
                          "is Phi-3's LongRoPE, both tensors", in);
    /* experts: llama's are Mixtral's (renormalized, as transformers'
     * Mixtral); the Qwen families' per family */
    get_u32(f, m->arch, "expert_count", &m->n_expert);
    get_u32(f, m->arch, "expert_used_count", &m->n_expert_used);
    if (!get_u32(f, m->arch, "expert_feed_forward_length", &m->n_ff_exp))
        m->n_ff_exp = m->n_ff;
    const rvl_tensor_info *sh = rvl_file_find_tensor(f, "blk.0.ffn_gate_shexp.weight");
    if (!get_u32(f, m->arch, "expert_shared_feed_forward_length", &m->n_ff_shexp))
        m->n_ff_shexp = sh && sh->n_dims == 2 ? (uint32_t)sh->ne[1] : 0;
    bool qmoe = !strcmp(m->arch, "qwen2moe") || !strcmp(m->arch, "qwen3moe");
    if ((qmoe || m->n_expert) && (m->n_expert == 0 || m->n_expert_used == 0 || m->n_expert_used > m->n_expert))
        return rvl_seterr(RVL_EFORMAT, "%s: %s.expert_count %u, expert_used_count %u", in, m->arch,
                          m->n_expert, m->n_expert_used);
    if (m->n_expert && !qmoe && strcmp(m->arch, "llama") != 0)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: experts in %s: no Hugging Face form here", in, m->arch);
    if (m->n_expert && !strcmp(m->arch, "llama") && m->n_ff_exp != m->n_ff)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: llama.expert_feed_forward_length: Mixtral's experts "
                          "are of feed_forward_length", in);
    if (!strcmp(m->arch, "qwen2moe") && !sh)
        return rvl_seterr(RVL_EFORMAT, "%s: qwen2moe without a shared expert (blk.0.ffn_gate_shexp)", in);
    if (m->attn_softcap && !strcmp(m->arch, "gemma3"))
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: gemma3 with an attention soft-cap has no "
                          "Hugging Face form", in);
    return 0;
}

/* ======================================================================
 * model.safetensors, streamed (names and the Q/K row order: format/hf.c)
 * ====================================================================== */
typedef struct {
    const rvl_tensor_info *t;
    char name[96];
    uint32_t type;          /* output element type */
    uint32_t perm_heads;
    uint64_t nbytes;
    bool shift;             /* Gemma's RMSNorm gain: GGUF's 1 + w back to w */
    /* what is written: all of t, or one expert's matrix of a stacked one */
    const void *data;
    uint32_t n_dims;
    uint64_t ne[RVL_MAX_DIMS], n_elements, in_bytes;
} st_entry;

static const char *st_dtype(uint32_t type)
{
    return type == RVL_TYPE_F32 ? "F32" : type == RVL_TYPE_F16 ? "F16" : "BF16";
}

static int write_safetensors(const char *path, st_entry *e, size_t n, const rvl_dequant_params *p)
{
    rvl_afile *af = NULL;
    char *json = NULL;
    float *f32 = NULL;
    void *obuf = NULL;
    int rc;

    cJSON *h = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t off = 0, max_elems = 1, total = 0;
    for (size_t i = 0; i < n; i++) {
        const st_entry *t = &e[i];
        cJSON *o = cJSON_AddObjectToObject(h, e[i].name);
        cJSON_AddStringToObject(o, "dtype", st_dtype(e[i].type));
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        for (uint32_t d = t->n_dims; d-- > 0;)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->ne[d]));
        e[i].nbytes = t->n_elements * (e[i].type == RVL_TYPE_F32 ? 4 : 2);
        cJSON *offs = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + e[i].nbytes)));
        off += e[i].nbytes;
        total += t->in_bytes;
        uint64_t row = t->ne[0], rows = row ? t->n_elements / row : 0;
        uint64_t c = rvl_convert_chunk_rows(row, rows) * row;
        if (c > max_elems)
            max_elems = c;
    }
    json = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    f32 = malloc((size_t)max_elems * 4);
    obuf = malloc((size_t)max_elems * 4);
    if (!json || !f32 || !obuf) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }
    uint64_t hl = strlen(json), pad = (8 - hl % 8) % 8, hlen = hl + pad;
    if ((rc = rvl_afile_open(&af, path)) < 0 || (rc = rvl_afile_write(af, &hlen, 8)) < 0 ||
        (rc = rvl_afile_write(af, json, (size_t)hl)) < 0 ||
        (rc = rvl_afile_write(af, "        ", (size_t)pad)) < 0)
        goto out;
    uint64_t done = 0;
    for (size_t i = 0; i < n; i++) {
        const st_entry *t = &e[i];
        if (p->progress)
            p->progress(p->ud, &(rvl_convert_progress){i, n, e[i].name, t->t->type, e[i].type,
                                                        t->n_dims, t->ne, done, total});
        const rvl_kformat *kin = rvl_kformat_get(t->t->type), *kout = rvl_kformat_get(e[i].type);
        uint64_t row = t->ne[0], rows = row ? t->n_elements / row : 0;
        uint64_t in_row = rvl_kformat_row_bytes(kin, row), out_row = rvl_kformat_row_bytes(kout, row);
        uint64_t chunk = rvl_convert_chunk_rows(row, rows);
        for (uint64_t r = 0; r < rows; r += chunk) {
            uint64_t m = rows - r < chunk ? rows - r : chunk;
            if (rvl_interrupted()) {
                rc = rvl_seterr(RVL_EINTR, "interrupted");
                goto out;
            }
            for (uint64_t k = 0; k < m; k++) {
                uint64_t g = rvl_hf_gguf_row(r + k, e[i].perm_heads, rows);
                float *x = f32 + k * row;
                kin->dequantize((const char *)t->data + g * in_row, x, (int64_t)row);
                for (uint64_t j = 0; e[i].shift && j < row; j++)
                    x[j] -= 1.0f;
                if (e[i].type != RVL_TYPE_F32)
                    kout->quantize(x, (char *)obuf + k * out_row, (int64_t)row, NULL);
            }
            if ((rc = rvl_afile_write(af, e[i].type == RVL_TYPE_F32 ? (void *)f32 : obuf,
                                      (size_t)(m * out_row))) < 0)
                goto out;
        }
        done += t->in_bytes;
    }
    if (p->progress)
        p->progress(p->ud, &(rvl_convert_progress){n, n, "", 0, 0, 0, NULL, total, total});
    rc = rvl_afile_commit(af);
    af = NULL;
out:
    rvl_afile_abort(af);
    free(json);
    free(f32);
    free(obuf);
    return rc;
}

/* ======================================================================
 * config.json, tokenizer.json, tokenizer_config.json
 * ====================================================================== */
static int write_json(const char *path, cJSON *j)
{
    rvl_afile *af = NULL;
    char *s = cJSON_Print(j);
    int rc;
    if (!s)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    if ((rc = rvl_afile_open(&af, path)) < 0 || (rc = rvl_afile_write(af, s, strlen(s))) < 0 ||
        (rc = rvl_afile_write(af, "\n", 1)) < 0) {
        rvl_afile_abort(af);
        free(s);
        return rc;
    }
    free(s);
    return rvl_afile_commit(af);
}

static int64_t tok_id(const rvl_file *f, const char *key)
{
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    uint64_t v;
    if (!kv || rvl_kv_get_u64(kv, &v) < 0 || v > INT32_MAX)
        return -1;
    return (int64_t)v;
}

static bool tok_flag(const rvl_file *f, const char *key, bool def)
{
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    uint64_t v;
    return kv && rvl_kv_get_u64(kv, &v) == 0 ? v != 0 : def;
}

/* A float key as a float ("30.0", not "30": transformers' configs check
 * the type). */
static cJSON *fnum(double v)
{
    char b[64];
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(b, sizeof b, "%.1f", v);
    else
        snprintf(b, sizeof b, "%.17g", v);
    return cJSON_CreateRaw(b);
}

static void add_f(cJSON *c, const char *k, double v) { cJSON_AddItemToObject(c, k, fnum(v)); }

/* Each family's Hugging Face architecture and model_type. */
static void add_arch(cJSON *c, const facts *m)
{
    static const char *const names[][3] = {
        {"llama", "LlamaForCausalLM", "llama"}, {"qwen2", "Qwen2ForCausalLM", "qwen2"},
        {"qwen3", "Qwen3ForCausalLM", "qwen3"}, {"gemma2", "Gemma2ForCausalLM", "gemma2"},
        {"gemma3", "Gemma3ForCausalLM", "gemma3_text"}, {"phi3", "Phi3ForCausalLM", "phi3"},
        {"mistral3", "Ministral3ForCausalLM", "ministral3"},
        {"qwen2moe", "Qwen2MoeForCausalLM", "qwen2_moe"}, {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe"},
    };
    size_t i = 0;
    while (strcmp(names[i][0], m->arch) != 0)
        i++;
    bool mistral = i == 0 && m->has_window;   /* llama with a window: Mistral's */
    bool mixtral = i == 0 && m->n_expert;     /* llama with experts: Mixtral's */
    cJSON *a = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(mixtral ? "MixtralForCausalLM" : mistral ? "MistralForCausalLM"
                                                                                     : names[i][1]));
    cJSON_AddStringToObject(c, "model_type", mixtral ? "mixtral" : mistral ? "mistral" : names[i][2]);
}

static cJSON *factors(const rvl_tensor_info *t)
{
    cJSON *a = cJSON_CreateArray();
    const rvl_kformat *kf = rvl_kformat_get(t->type);
    float v[1024];
    uint64_t n = t->n_elements < 1024 ? t->n_elements : 1024;
    kf->dequantize(t->data, v, (int64_t)n);
    for (uint64_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, fnum(v[i]));
    return a;
}

/* RoPE's keys: rope_theta and rope_scaling (Gemma 3: per layer type). */
static void add_rope(cJSON *c, const facts *m)
{
    if (!strcmp(m->arch, "gemma3")) {
        cJSON *rp = cJSON_AddObjectToObject(c, "rope_parameters");
        cJSON *sw = cJSON_AddObjectToObject(rp, "sliding_attention"), *fu = cJSON_AddObjectToObject(rp, "full_attention");
        cJSON_AddStringToObject(sw, "rope_type", "default");
        add_f(sw, "rope_theta", m->swa_rope_base ? m->swa_rope_base : 10000);
        cJSON_AddStringToObject(fu, "rope_type", m->rope_scaling[0] ? m->rope_scaling : "default");
        if (m->rope_scaling[0])
            add_f(fu, "factor", m->rope_factor);
        if (m->rope_orig_ctx)
            cJSON_AddNumberToObject(fu, "original_max_position_embeddings", m->rope_orig_ctx);
        add_f(fu, "rope_theta", m->rope_base);
        return;
    }
    if (!strcmp(m->arch, "mistral3")) {
        /* rope_parameters, with Llama 4's temperature (transformers'
         * Ministral 3 always applies it: beta 0 is none) over the original
         * context (llama.cpp's: the YaRN one, else the training context) */
        cJSON *r = cJSON_AddObjectToObject(c, "rope_parameters");
        bool yarn = !strcmp(m->rope_scaling, "yarn");
        cJSON_AddStringToObject(r, "rope_type", yarn ? "yarn" : "default");
        add_f(r, "rope_theta", m->rope_base);
        if (yarn) {
            add_f(r, "factor", m->rope_factor);
            add_f(r, "beta_fast", isnan(m->beta_fast) ? 32 : m->beta_fast);
            add_f(r, "beta_slow", isnan(m->beta_slow) ? 1 : m->beta_slow);
            add_f(r, "mscale", 1);
            if (m->has_log_mul)
                add_f(r, "mscale_all_dim", m->yarn_log_mul);
        }
        cJSON_AddNumberToObject(r, "original_max_position_embeddings",
                                m->rope_orig_ctx ? m->rope_orig_ctx : m->n_ctx);
        cJSON_AddNumberToObject(r, "max_position_embeddings", m->n_ctx);
        add_f(r, "llama_4_scaling_beta", m->temp_scale);
        return;
    }
    add_f(c, "rope_theta", m->rope_base);
    if (m->long_f) {
        cJSON *r = cJSON_AddObjectToObject(c, "rope_scaling");
        cJSON_AddStringToObject(r, "type", "longrope");
        cJSON_AddItemToObject(r, "long_factor", factors(m->long_f));
        cJSON_AddItemToObject(r, "short_factor", factors(m->short_f));
    } else if (m->rope_scaling[0]) {
        cJSON *r = cJSON_AddObjectToObject(c, "rope_scaling");
        cJSON_AddStringToObject(r, "rope_type", m->rope_scaling);
        add_f(r, "factor", m->rope_factor);
        if (m->rope_orig_ctx)
            cJSON_AddNumberToObject(r, "original_max_position_embeddings", m->rope_orig_ctx);
    } else {
        cJSON_AddNullToObject(c, "rope_scaling");
    }
}

/* Gemma's keys: soft-caps, the window and its layers, the query scale. */
static void add_gemma(cJSON *c, const facts *m)
{
    bool g3 = !strcmp(m->arch, "gemma3");
    uint32_t period = g3 ? 6 : 2;
    bool is27b = m->n_layer == (g3 ? 62u : 46u);
    cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
    cJSON_AddNumberToObject(c, "query_pre_attn_scalar",
                            m->q_scale ? (double)lround(1.0 / (m->q_scale * m->q_scale))   /* an int; f32 in GGUF */
                                       : is27b ? m->n_embd / m->n_head : m->head_dim);
    if (m->attn_softcap)
        add_f(c, "attn_logit_softcapping", m->attn_softcap);
    else
        cJSON_AddNullToObject(c, "attn_logit_softcapping");
    if (m->final_softcap)
        add_f(c, "final_logit_softcapping", m->final_softcap);
    else
        cJSON_AddNullToObject(c, "final_logit_softcapping");
    cJSON_AddNumberToObject(c, "sliding_window", m->has_window && m->window ? m->window : m->n_ctx);
    cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
    for (uint32_t l = 0; l < m->n_layer; l++)
        cJSON_AddItemToArray(lt, cJSON_CreateString(m->has_window && m->window && (l + 1) % period
                                                        ? "sliding_attention" : "full_attention"));
}

static cJSON *config_json(const facts *m, const rvl_file *f, uint32_t type, uint32_t n_vocab)
{
    cJSON *c = cJSON_CreateObject();
    add_arch(c, m);
    cJSON_AddNumberToObject(c, "hidden_size", m->n_embd);
    cJSON_AddNumberToObject(c, "intermediate_size", m->n_ff);
    cJSON_AddNumberToObject(c, "num_hidden_layers", m->n_layer);
    cJSON_AddNumberToObject(c, "num_attention_heads", m->n_head);
    cJSON_AddNumberToObject(c, "num_key_value_heads", m->n_head_kv);
    if (m->has_head_dim)   /* else transformers' default, hidden_size / heads */
        cJSON_AddNumberToObject(c, "head_dim", m->head_dim);
    if (!m->gemma)
        cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddNumberToObject(c, "max_position_embeddings", m->n_ctx);
    add_f(c, "rms_norm_eps", m->eps);
    add_rope(c, m);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", m->tied);
    cJSON_AddNumberToObject(c, "vocab_size", n_vocab);
    if (!strcmp(m->arch, "mistral3")) {
        cJSON_AddNullToObject(c, "sliding_window");
    } else if (!strcmp(m->arch, "llama") && m->n_expert) {   /* Mixtral */
        cJSON_AddNumberToObject(c, "num_local_experts", m->n_expert);
        cJSON_AddNumberToObject(c, "num_experts_per_tok", m->n_expert_used);
        if (m->has_window)
            cJSON_AddNumberToObject(c, "sliding_window", m->window);
        else
            cJSON_AddNullToObject(c, "sliding_window");
    } else if (!strcmp(m->arch, "llama")) {
        cJSON_AddBoolToObject(c, "attention_bias", m->qkv_bias);
        cJSON_AddBoolToObject(c, "mlp_bias", false);
        if (m->has_window)
            cJSON_AddNumberToObject(c, "sliding_window", m->window);
    } else if (!strncmp(m->arch, "qwen", 4)) {
        cJSON_AddBoolToObject(c, "attention_bias", m->qkv_bias);
        cJSON_AddBoolToObject(c, "use_sliding_window", false);
        cJSON_AddNumberToObject(c, "max_window_layers", m->n_layer);
        if (m->n_expert) {
            /* llama.cpp: every layer sparse; qwen3moe renormalizes the
             * chosen experts' weights, qwen2moe does not */
            bool q2 = !strcmp(m->arch, "qwen2moe");
            cJSON_AddNumberToObject(c, "num_experts", m->n_expert);
            cJSON_AddNumberToObject(c, "num_experts_per_tok", m->n_expert_used);
            cJSON_AddNumberToObject(c, "moe_intermediate_size", m->n_ff_exp);
            if (q2) {
                cJSON_AddNumberToObject(c, "shared_expert_intermediate_size", m->n_ff_shexp);
                cJSON_AddBoolToObject(c, "qkv_bias", m->qkv_bias);
            }
            cJSON_AddBoolToObject(c, "norm_topk_prob", !q2);
            cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
            cJSON_AddArrayToObject(c, "mlp_only_layers");
            cJSON_AddBoolToObject(c, "output_router_logits", false);
        }
    } else if (m->gemma) {
        add_gemma(c, m);
    } else {   /* phi3 */
        cJSON_AddNumberToObject(c, "original_max_position_embeddings", m->rope_orig_ctx);
        cJSON_AddNumberToObject(c, "partial_rotary_factor",
                                m->rope_dim ? (double)m->rope_dim * m->n_head / m->n_embd : 1.0);
        if (m->window)
            cJSON_AddNumberToObject(c, "sliding_window", m->window);
        else
            cJSON_AddNullToObject(c, "sliding_window");
    }
    int64_t bos = tok_id(f, "tokenizer.ggml.bos_token_id"), eos = tok_id(f, "tokenizer.ggml.eos_token_id");
    int64_t pad = tok_id(f, "tokenizer.ggml.padding_token_id");
    if (bos >= 0) cJSON_AddNumberToObject(c, "bos_token_id", (double)bos);
    if (eos >= 0) cJSON_AddNumberToObject(c, "eos_token_id", (double)eos);
    if (pad >= 0) cJSON_AddNumberToObject(c, "pad_token_id", (double)pad);
    const char *dt = type == RVL_TYPE_F32 ? "float32" : type == RVL_TYPE_F16 ? "float16" : "bfloat16";
    cJSON_AddStringToObject(c, "torch_dtype", dt);
    cJSON_AddStringToObject(c, "dtype", dt);
    return c;
}

/* Hugging Face's regular expressions for the pre-tokenizers we write. */
#define HF_RX_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define HF_RX_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static cJSON *byte_level(bool use_regex)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "ByteLevel");
    cJSON_AddBoolToObject(b, "add_prefix_space", false);
    cJSON_AddBoolToObject(b, "trim_offsets", true);
    cJSON_AddBoolToObject(b, "use_regex", use_regex);
    return b;
}

static cJSON *split_rx(const char *rx)
{
    cJSON *s = cJSON_CreateObject(), *pat = cJSON_AddObjectToObject(s, "pattern");
    cJSON_AddStringToObject(s, "type", "Split");
    cJSON_AddStringToObject(pat, "Regex", rx);
    cJSON_AddStringToObject(s, "behavior", "Isolated");
    cJSON_AddBoolToObject(s, "invert", false);
    return s;
}

/* The pre_tokenizer object for tokenizer.ggml.pre, or NULL if we have none. */
static cJSON *pre_tokenizer(const char *pre, bool *ignore_merges)
{
    *ignore_merges = false;
    if (!strcmp(pre, "gpt-2") || !strcmp(pre, "default") || !strcmp(pre, "mpt") || !strcmp(pre, "olmo"))
        return byte_level(true);
    cJSON *seq = cJSON_CreateObject(), *list;
    cJSON_AddStringToObject(seq, "type", "Sequence");
    list = cJSON_AddArrayToObject(seq, "pretokenizers");
    if (!strcmp(pre, "smollm") || !strcmp(pre, "starcoder") || !strcmp(pre, "refact")) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "type", "Digits");
        cJSON_AddBoolToObject(d, "individual_digits", true);
        cJSON_AddItemToArray(list, d);
        cJSON_AddItemToArray(list, byte_level(true));
    } else if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3")) {
        *ignore_merges = true;
        cJSON_AddItemToArray(list, split_rx(HF_RX_LLAMA3));
        cJSON_AddItemToArray(list, byte_level(false));
    } else if (!strcmp(pre, "qwen2")) {
        cJSON_AddItemToArray(list, split_rx(HF_RX_QWEN2));
        cJSON_AddItemToArray(list, byte_level(false));
    } else {
        cJSON_Delete(seq);
        return NULL;
    }
    return seq;
}

static char *strn(rvl_str s) { return strndup(s.ptr, (size_t)s.len); }

/* ----------------------------------------------------------------------
 * SentencePiece BPE vocabularies carry scores, not merges: Hugging Face's
 * BPE needs merges. Every way of cutting a normal token into two normal
 * tokens is a merge, ranked by the merged token's score (highest first;
 * then by the pieces' ids), which is the order SentencePiece merges in.
 * ---------------------------------------------------------------------- */
typedef struct {
    float score;
    uint32_t merged, left, right;
} spm_merge;

static uint64_t h_bytes(const char *s, uint64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static int cmp_merge(const void *a, const void *b)
{
    const spm_merge *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    if (x->left != y->left)
        return x->left < y->left ? -1 : 1;
    return x->right < y->right ? -1 : x->right > y->right;
}

static bool spm_normal(const rvl_kv *types, uint64_t i)
{
    int64_t t = rvl_kv_arr_i64(types, i);
    return t == RVL_TOK_NORMAL || t == RVL_TOK_USER_DEFINED;
}

static int spm_merges(const rvl_kv *toks, const rvl_kv *types, const rvl_kv *scores, cJSON *ml)
{
    uint64_t n = toks->n, cap = 1;
    while (cap < 2 * n)
        cap <<= 1;
    uint32_t *slot = malloc((size_t)cap * sizeof *slot);   /* id + 1; 0 empty */
    spm_merge *m = NULL;
    size_t nm = 0, mcap = 0;
    int rc = 0;
    if (!slot)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    memset(slot, 0, (size_t)cap * sizeof *slot);
    for (uint64_t i = 0; i < n; i++) {
        if (!spm_normal(types, i))
            continue;
        uint64_t k = h_bytes(toks->strs[i].ptr, toks->strs[i].len) & (cap - 1);
        while (slot[k])
            k = (k + 1) & (cap - 1);
        slot[k] = (uint32_t)i + 1;
    }
#define FIND(P_, N_, OUT_) do { \
        OUT_ = -1; \
        for (uint64_t k_ = h_bytes(P_, N_) & (cap - 1); slot[k_]; k_ = (k_ + 1) & (cap - 1)) { \
            rvl_str s_ = toks->strs[slot[k_] - 1]; \
            if (s_.len == (N_) && memcmp(s_.ptr, P_, (size_t)(N_)) == 0) { OUT_ = (int64_t)slot[k_] - 1; break; } \
        } } while (0)
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        rvl_str s = toks->strs[i];
        if (!spm_normal(types, i) || s.len < 2)
            continue;
        for (uint64_t c = 1; c < s.len; c++) {
            if (((unsigned char)s.ptr[c] & 0xc0) == 0x80)
                continue;               /* inside a UTF-8 character */
            int64_t l, r;
            FIND(s.ptr, c, l);
            if (l < 0)
                continue;
            FIND(s.ptr + c, s.len - c, r);
            if (r < 0)
                continue;
            if (nm == mcap) {
                size_t nc = mcap ? mcap * 2 : 4096;
                spm_merge *g = realloc(m, nc * sizeof *m);
                if (!g) {
                    rc = rvl_seterr(RVL_ENOMEM, "out of memory");
                    break;
                }
                m = g;
                mcap = nc;
            }
            m[nm++] = (spm_merge){(float)rvl_kv_arr_f64(scores, i), (uint32_t)i, (uint32_t)l, (uint32_t)r};
        }
    }
#undef FIND
    if (rc == 0)
        qsort(m, nm, sizeof *m, cmp_merge);
    for (size_t i = 0; rc == 0 && i < nm; i++) {
        rvl_str a = toks->strs[m[i].left], b = toks->strs[m[i].right];
        char *x = strn(a), *y = strn(b);
        cJSON *pair = cJSON_CreateArray();
        if (!x || !y || !pair) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        } else {
            cJSON_AddItemToArray(pair, cJSON_CreateString(x));
            cJSON_AddItemToArray(pair, cJSON_CreateString(y));
            cJSON_AddItemToArray(ml, pair);
            pair = NULL;
        }
        cJSON_Delete(pair);
        free(x);
        free(y);
    }
    free(m);
    free(slot);
    return rc;
}

/* tokenizer.json's "normalizer": SentencePiece's spaces as U+2581 (after
 * one in front of the text with space_prefix); none for byte-level BPE. */
static void add_normalizer(cJSON *t, bool spm, bool space_prefix)
{
    if (spm && space_prefix) {
        /* SentencePiece: a space in front of the text, spaces as U+2581 */
        cJSON *n = cJSON_AddObjectToObject(t, "normalizer"), *l;
        cJSON_AddStringToObject(n, "type", "Sequence");
        l = cJSON_AddArrayToObject(n, "normalizers");
        cJSON *pr = cJSON_CreateObject(), *rp = cJSON_CreateObject(), *pat;
        cJSON_AddStringToObject(pr, "type", "Prepend");
        cJSON_AddStringToObject(pr, "prepend", "\xe2\x96\x81");
        cJSON_AddStringToObject(rp, "type", "Replace");
        pat = cJSON_AddObjectToObject(rp, "pattern");
        cJSON_AddStringToObject(pat, "String", " ");
        cJSON_AddStringToObject(rp, "content", "\xe2\x96\x81");
        cJSON_AddItemToArray(l, pr);
        cJSON_AddItemToArray(l, rp);
    } else if (spm) {
        cJSON *rp = cJSON_AddObjectToObject(t, "normalizer"), *pat;
        cJSON_AddStringToObject(rp, "type", "Replace");
        pat = cJSON_AddObjectToObject(rp, "pattern");
        cJSON_AddStringToObject(pat, "String", " ");
        cJSON_AddStringToObject(rp, "content", "\xe2\x96\x81");
    } else {
        cJSON_AddNullToObject(t, "normalizer");
    }
}

/* tokenizer.json's "post_processor": BOS before each sequence when the
 * model adds it, else byte-level's. */
static cJSON *post_processor(const rvl_file *f, const rvl_kv *toks, bool add_bos)
{
    int64_t bos = tok_id(f, "tokenizer.ggml.bos_token_id");
    cJSON *pp = cJSON_CreateObject();
    if (add_bos && bos >= 0 && (uint64_t)bos < toks->n) {
        char *bt = strn(toks->strs[bos]);
        cJSON_AddStringToObject(pp, "type", "TemplateProcessing");
        cJSON *single = cJSON_AddArrayToObject(pp, "single"), *pair = cJSON_AddArrayToObject(pp, "pair");
        for (int k = 0; k < 2; k++) {
            cJSON *arr = k ? pair : single;
            for (int seq = 0; seq <= k; seq++) {
                cJSON *st = cJSON_CreateObject(), *sp = cJSON_AddObjectToObject(st, "SpecialToken");
                cJSON_AddStringToObject(sp, "id", bt ? bt : "");
                cJSON_AddNumberToObject(sp, "type_id", seq);
                cJSON_AddItemToArray(arr, st);
                cJSON *sq = cJSON_CreateObject(), *sv = cJSON_AddObjectToObject(sq, "Sequence");
                cJSON_AddStringToObject(sv, "id", seq ? "B" : "A");
                cJSON_AddNumberToObject(sv, "type_id", seq);
                cJSON_AddItemToArray(arr, sq);
            }
        }
        cJSON *sps = cJSON_AddObjectToObject(pp, "special_tokens"), *e = cJSON_AddObjectToObject(sps, bt ? bt : "");
        cJSON_AddStringToObject(e, "id", bt ? bt : "");
        cJSON *ids = cJSON_AddArrayToObject(e, "ids"), *tt = cJSON_AddArrayToObject(e, "tokens");
        cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)bos));
        cJSON_AddItemToArray(tt, cJSON_CreateString(bt ? bt : ""));
        free(bt);
    } else {
        cJSON_AddStringToObject(pp, "type", "ByteLevel");
        cJSON_AddBoolToObject(pp, "add_prefix_space", true);
        cJSON_AddBoolToObject(pp, "trim_offsets", false);
        cJSON_AddBoolToObject(pp, "use_regex", true);
    }
    return pp;
}

/* tokenizer.json's "decoder": the normalizer undone (U+2581 back to
 * spaces, byte fallback, the leading space stripped) or byte-level's. */
static void add_decoder(cJSON *dec, bool spm, bool space_prefix)
{
    if (spm) {
        cJSON *l = cJSON_AddArrayToObject(dec, "decoders"), *d, *pat;
        cJSON_AddStringToObject(dec, "type", "Sequence");
        d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "type", "Replace");
        pat = cJSON_AddObjectToObject(d, "pattern");
        cJSON_AddStringToObject(pat, "String", "\xe2\x96\x81");
        cJSON_AddStringToObject(d, "content", " ");
        cJSON_AddItemToArray(l, d);
        d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "type", "ByteFallback");
        cJSON_AddItemToArray(l, d);
        d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "type", "Fuse");
        cJSON_AddItemToArray(l, d);
        if (space_prefix) {
            d = cJSON_CreateObject();
            cJSON_AddStringToObject(d, "type", "Strip");
            cJSON_AddStringToObject(d, "content", " ");
            cJSON_AddNumberToObject(d, "start", 1);
            cJSON_AddNumberToObject(d, "stop", 0);
            cJSON_AddItemToArray(l, d);
        }
    } else {
        cJSON_AddStringToObject(dec, "type", "ByteLevel");
        cJSON_AddBoolToObject(dec, "add_prefix_space", true);
        cJSON_AddBoolToObject(dec, "trim_offsets", true);
        cJSON_AddBoolToObject(dec, "use_regex", true);
    }
}

/* dir/tokenizer_config.json: BOS/EOS flags, the special tokens' texts,
 * the chat template. */
static int write_tokenizer_config(const char *dir, const rvl_file *f, const facts *m,
                                  const rvl_kv *toks, bool add_bos)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddBoolToObject(c, "add_bos_token", add_bos);
    cJSON_AddBoolToObject(c, "add_eos_token", tok_flag(f, "tokenizer.ggml.add_eos_token", false));
    static const char *const sp[][2] = {
        {"bos_token", "tokenizer.ggml.bos_token_id"}, {"eos_token", "tokenizer.ggml.eos_token_id"},
        {"unk_token", "tokenizer.ggml.unknown_token_id"}, {"pad_token", "tokenizer.ggml.padding_token_id"},
    };
    for (size_t i = 0; i < 4; i++) {
        int64_t id = tok_id(f, sp[i][1]);
        if (id >= 0 && (uint64_t)id < toks->n) {
            char *s = strn(toks->strs[id]);
            cJSON_AddStringToObject(c, sp[i][0], s ? s : "");
            free(s);
        } else {
            cJSON_AddNullToObject(c, sp[i][0]);
        }
    }
    const rvl_kv *tpl = rvl_file_find_kv(f, "tokenizer.chat_template");
    rvl_str ts;
    if (tpl && rvl_kv_get_str(tpl, &ts) == 0) {
        char *s = strn(ts);
        cJSON_AddStringToObject(c, "chat_template", s ? s : "");
        free(s);
    }
    cJSON_AddBoolToObject(c, "clean_up_tokenization_spaces", false);
    cJSON_AddNumberToObject(c, "model_max_length", m->n_ctx);
    cJSON_AddStringToObject(c, "tokenizer_class", "PreTrainedTokenizerFast");
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    int rc = write_json(path, c);
    cJSON_Delete(c);
    return rc;
}

/* dir/tokenizer.json and dir/tokenizer_config.json from f's GGUF
 * vocabulary (gpt2 or llama); *n_vocab: its size. */
static int tokenizer_files(const char *in, const rvl_file *f, const facts *m, const char *dir,
                           uint32_t *n_vocab)
{
    char model[32] = "", pre[64] = "default", path[4200];
    int rc = 0;
    if (!get_str(f, "tokenizer.ggml.model", model, sizeof model))
        return rvl_seterr(RVL_EFORMAT, "%s: no tokenizer.ggml.model", in);
    bool spm = strcmp(model, "llama") == 0;
    if (strcmp(model, "gpt2") != 0 && !spm)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: tokenizer model %s: tokenizer.json is written "
                          "for gpt2 (byte-level BPE) and llama (SentencePiece BPE) vocabularies", in, model);
    get_str(f, "tokenizer.ggml.pre", pre, sizeof pre);
    bool ignore_merges = false;
    cJSON *pt = spm ? cJSON_CreateNull() : pre_tokenizer(pre, &ignore_merges);
    if (!pt)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: pre-tokenizer %s has no tokenizer.json form "
                          "here yet", in, pre);
    const rvl_kv *toks = rvl_file_find_kv(f, "tokenizer.ggml.tokens");
    const rvl_kv *types = rvl_file_find_kv(f, "tokenizer.ggml.token_type");
    const rvl_kv *merges = rvl_file_find_kv(f, "tokenizer.ggml.merges");
    const rvl_kv *scores = rvl_file_find_kv(f, "tokenizer.ggml.scores");
    if (!toks || toks->type != RVL_GGUF_ARRAY || toks->arr_type != RVL_GGUF_STRING ||
        (!spm && (!merges || merges->type != RVL_GGUF_ARRAY || merges->arr_type != RVL_GGUF_STRING)) ||
        (spm && (!scores || scores->type != RVL_GGUF_ARRAY || scores->n != toks->n ||
                 scores->arr_type == RVL_GGUF_STRING || !types)) ||
        (types && (types->type != RVL_GGUF_ARRAY || types->n != toks->n ||
                   types->arr_type == RVL_GGUF_STRING)) || toks->n > INT32_MAX) {
        cJSON_Delete(pt);
        return rvl_seterr(RVL_EFORMAT, "%s: bad or missing tokenizer.ggml.tokens/merges/scores/"
                          "token_type", in);
    }
    *n_vocab = (uint32_t)toks->n;

    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "version", "1.0");
    cJSON_AddNullToObject(t, "truncation");
    cJSON_AddNullToObject(t, "padding");
    cJSON *added = cJSON_AddArrayToObject(t, "added_tokens");
    for (uint64_t i = 0; types && i < toks->n; i++) {
        int64_t ty = rvl_kv_arr_i64(types, i);
        if (ty == RVL_TOK_UNKNOWN)
            ty = RVL_TOK_CONTROL;
        if (ty != RVL_TOK_CONTROL && ty != RVL_TOK_USER_DEFINED)
            continue;
        char *s = strn(toks->strs[i]);
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", (double)i);
        cJSON_AddStringToObject(a, "content", s ? s : "");
        cJSON_AddBoolToObject(a, "single_word", false);
        cJSON_AddBoolToObject(a, "lstrip", false);
        cJSON_AddBoolToObject(a, "rstrip", false);
        cJSON_AddBoolToObject(a, "normalized", ty != RVL_TOK_CONTROL);
        cJSON_AddBoolToObject(a, "special", ty == RVL_TOK_CONTROL);
        cJSON_AddItemToArray(added, a);
        free(s);
    }
    add_normalizer(t, spm, tok_flag(f, "tokenizer.ggml.add_space_prefix", true));
    cJSON_AddItemToObject(t, "pre_tokenizer", pt);

    bool add_bos = tok_flag(f, "tokenizer.ggml.add_bos_token", false);
    cJSON_AddItemToObject(t, "post_processor", post_processor(f, toks, add_bos));
    add_decoder(cJSON_AddObjectToObject(t, "decoder"), spm,
                tok_flag(f, "tokenizer.ggml.add_space_prefix", true));

    cJSON *mo = cJSON_AddObjectToObject(t, "model");
    cJSON_AddStringToObject(mo, "type", "BPE");
    cJSON_AddNullToObject(mo, "dropout");
    int64_t unk = tok_id(f, "tokenizer.ggml.unknown_token_id");
    if (spm && unk >= 0 && (uint64_t)unk < toks->n) {
        char *u = strn(toks->strs[unk]);
        cJSON_AddStringToObject(mo, "unk_token", u ? u : "");
        free(u);
    } else {
        cJSON_AddNullToObject(mo, "unk_token");
    }
    cJSON_AddNullToObject(mo, "continuing_subword_prefix");
    cJSON_AddNullToObject(mo, "end_of_word_suffix");
    cJSON_AddBoolToObject(mo, "fuse_unk", spm);
    cJSON_AddBoolToObject(mo, "byte_fallback", spm);
    cJSON_AddBoolToObject(mo, "ignore_merges", ignore_merges);
    cJSON *vocab = cJSON_AddObjectToObject(mo, "vocab");
    for (uint64_t i = 0; i < toks->n; i++) {
        char *s = strn(toks->strs[i]);
        if (!s) { rc = rvl_seterr(RVL_ENOMEM, "out of memory"); break; }
        cJSON_AddItemToObject(vocab, s, cJSON_CreateNumber((double)i));
        free(s);
    }
    cJSON *ml = cJSON_AddArrayToObject(mo, "merges");
    if (spm && rc == 0)
        rc = spm_merges(toks, types, scores, ml);
    for (uint64_t i = 0; !spm && rc == 0 && i < merges->n; i++) {
        char *s = strn(merges->strs[i]);
        if (!s) { rc = rvl_seterr(RVL_ENOMEM, "out of memory"); break; }
        cJSON_AddItemToArray(ml, cJSON_CreateString(s));
        free(s);
    }
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (rc == 0)
        rc = write_json(path, t);
    cJSON_Delete(t);
    if (rc < 0)
        return rc;
    return write_tokenizer_config(dir, f, m, toks, add_bos);
}

/* ======================================================================
 * The directory
 * ====================================================================== */
static int check_out_dir(const char *in, const char *out)
{
    struct stat st, si;
    if (stat(out, &st) < 0)
        return errno == ENOENT ? 0 : rvl_seterr(RVL_EIO, "%s: %s", out, strerror(errno));
    if (stat(in, &si) == 0 && si.st_dev == st.st_dev && si.st_ino == st.st_ino)
        return rvl_seterr(RVL_EINVAL, "%s: output is the input; write to another path", out);
    if (!S_ISDIR(st.st_mode))
        return rvl_seterr(RVL_EINVAL, "%s: exists and is not a directory (the safetensors "
                          "form is a directory)", out);
    DIR *d = opendir(out);
    struct dirent *de;
    bool empty = true;
    while (d && (de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            empty = false;
    if (d)
        closedir(d);
    if (!empty)
        return rvl_seterr(RVL_EINVAL, "%s: directory is not empty", out);
    return 0;
}

int rvl_dequant_hf(const char *in, const char *out, const rvl_dequant_params *p)
{
    rvl_file *f = NULL;
    st_entry *e = NULL;
    char tmp[4096], path[4200];
    bool made = false;
    int rc;

    if (p->type != RVL_TYPE_F32 && p->type != RVL_TYPE_F16 && p->type != RVL_TYPE_BF16)
        return rvl_seterr(RVL_EINVAL, "dequant: the output type must be F32, F16 or BF16");
    if ((rc = check_out_dir(in, out)) < 0)
        return rc;
    if ((rc = rvl_file_open(&f, in)) < 0)
        return rc;
    if (rvl_file_fmt(f) != RVL_FMT_GGUF) {
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: dequant reads GGUF files", in);
        goto fail;
    }
    facts m;
    if ((rc = read_facts(in, f, &m)) < 0)
        goto fail;
    uint64_t n = rvl_file_n_tensors(f), ne = 0, n_out = 0;
    for (uint64_t i = 0; i < n; i++) {   /* a stacked expert tensor: a matrix an expert */
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        char g[80], hn[96];
        snprintf(g, sizeof g, "%.*s", (int)(t->name.len > 79 ? 79 : t->name.len), t->name.ptr);
        n_out += m.n_expert && rvl_hf_expert_name(m.arch, m.n_layer, g, 0, hn, sizeof hn) ? m.n_expert : 1;
    }
    e = calloc(n_out ? n_out : 1, sizeof *e);
    if (!e) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        char g[80];
        snprintf(g, sizeof g, "%.*s", (int)(t->name.len > 79 ? 79 : t->name.len), t->name.ptr);
        if (!strcmp(g, "rope_factors_long.weight") || !strcmp(g, "rope_factors_short.weight"))
            continue;       /* config.json's rope_scaling */
        const rvl_kformat *kf = rvl_kformat_get(t->type);
        if (!kf || !kf->dequantize) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s: no dequantizer for its type", in, g);
            goto fail;
        }
        if (m.n_expert && rvl_hf_expert_name(m.arch, m.n_layer, g, 0, e[ne].name, sizeof e[ne].name)) {
            if (t->n_dims != 3 || t->ne[2] != m.n_expert) {
                rc = rvl_seterr(RVL_EFORMAT, "%s: tensor %s: not [rows x cols x %u experts]", in, g,
                                m.n_expert);
                goto fail;
            }
            uint64_t mat = rvl_kformat_row_bytes(kf, t->ne[0]) * t->ne[1];
            for (uint32_t x = 0; x < m.n_expert; x++, ne++) {
                e[ne] = (st_entry){.t = t, .type = p->type, .data = (const char *)t->data + x * mat,
                                   .n_dims = 2, .ne = {t->ne[0], t->ne[1], 1, 1},
                                   .n_elements = t->ne[0] * t->ne[1], .in_bytes = mat};
                rvl_hf_expert_name(m.arch, m.n_layer, g, x, e[ne].name, sizeof e[ne].name);
            }
            continue;
        }
        e[ne].t = t;
        e[ne].data = t->data;
        e[ne].n_dims = t->n_dims;
        memcpy(e[ne].ne, t->ne, sizeof e[ne].ne);
        e[ne].n_elements = t->n_elements;
        e[ne].in_bytes = t->nbytes;
        size_t gl = strlen(g);
        e[ne].shift = m.norm_shift && gl >= 11 && !strcmp(g + gl - 11, "norm.weight");
        if (rvl_hf_name_of(m.arch, m.n_layer, m.n_head, m.n_head_kv, g, e[ne].name, sizeof e[ne].name,
                            &e[ne].perm_heads) != 1) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s has no Hugging Face name here", in, g);
            goto fail;
        }
        e[ne].type = t->n_dims <= 1 ? RVL_TYPE_F32 : p->type;
        if (e[ne].perm_heads && (t->ne[1] % e[ne].perm_heads || (t->ne[1] / e[ne].perm_heads) % 2)) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: tensor %s: %llu rows do not split into %u heads",
                            in, g, (unsigned long long)t->ne[1], e[ne].perm_heads);
            goto fail;
        }
        if (!strcmp(m.arch, "mistral3") && gl >= 5 && !strcmp(g + gl - 5, ".bias")) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s: transformers' Ministral 3 has no biases",
                            in, g);
            goto fail;
        }
        if (e[ne].perm_heads && t->n_dims == 1) {     /* a bias: one row per element */
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %s: llama Q/K biases", in, g);
            goto fail;
        }
        ne++;
    }

    /* hidden, next to out, removed on interruption (and by the next run
     * after a SIGKILL) like every temporary */
    if ((rc = rvl_afile_mkdtemp(out, tmp, sizeof tmp)) < 0)
        goto fail;
    made = true;
    uint32_t n_vocab = 0;
    if ((rc = tokenizer_files(in, f, &m, tmp, &n_vocab)) < 0)
        goto fail;
    const rvl_tensor_info *emb = rvl_file_find_tensor(f, "token_embd.weight");
    if (emb && emb->n_dims >= 2)
        n_vocab = (uint32_t)emb->ne[1];
    cJSON *cfg = config_json(&m, f, p->type, n_vocab);
    snprintf(path, sizeof path, "%s/config.json", tmp);
    rc = write_json(path, cfg);
    cJSON_Delete(cfg);
    if (rc < 0)
        goto fail;
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    if ((rc = write_safetensors(path, e, (size_t)ne, p)) < 0)
        goto fail;
    made = false;   /* committed or removed either way */
    if ((rc = rvl_afile_dtemp_commit(tmp, out)) < 0)
        goto fail;
    free(e);
    rvl_file_close(f);
    return 0;
fail:
    if (made)
        rvl_afile_dtemp_abort(tmp);
    free(e);
    rvl_file_close(f);
    return rc;
}
