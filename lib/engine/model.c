/*
 * model.c - the loader: hyper-parameters from GGUF metadata and weight
 * views into the mapped file.
 *
 * Architectures are descriptions (engine/family.c): the family gives the
 * RoPE rotation and the per-layer block recipe, which says which tensors
 * a layer has; the keys and tensor names here are llama.cpp's, the same
 * for every family. Every key that is required and missing, and every
 * tensor whose shape or type does not fit, is an error that names it.
 */
#include <stdio.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/backend.h"
#include "engine/experts.h"
#include "engine/family.h"
#include "engine/model.h"

/* ====================================================================
 * Metadata helpers
 * ==================================================================== */

static int get_u32(const rvl_file *f, const char *arch, const char *suffix, uint32_t *v,
                   bool required, uint32_t def)
{
    char key[128];
    uint64_t u;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    if (!kv) {
        if (required)
            return rvl_seterr(RVL_EFORMAT, "%s: missing metadata key '%s'", rvl_file_path(f), key);
        *v = def;
        return 0;
    }
    if (rvl_kv_get_u64(kv, &u) < 0 || u > UINT32_MAX)
        return rvl_seterr(RVL_EFORMAT, "%s: metadata key '%s' is not a 32-bit unsigned integer",
                          rvl_file_path(f), key);
    *v = (uint32_t)u;
    return 0;
}

static int get_f32(const rvl_file *f, const char *arch, const char *suffix, float *v,
                   bool required, float def)
{
    char key[128];
    double d;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    if (!kv) {
        if (required)
            return rvl_seterr(RVL_EFORMAT, "%s: missing metadata key '%s'", rvl_file_path(f), key);
        *v = def;
        return 0;
    }
    if (rvl_kv_get_f64(kv, &d) < 0)
        return rvl_seterr(RVL_EFORMAT, "%s: metadata key '%s' is not a number", rvl_file_path(f), key);
    if (!isfinite(d) || !isfinite((float)d))
        return rvl_seterr(RVL_EFORMAT, "%s: metadata key '%s' is not a finite number (%g)",
                          rvl_file_path(f), key, d);
    *v = (float)d;
    return 0;
}

/* ====================================================================
 * Weights
 * ==================================================================== */

/* Find a tensor and check it is [ne0, ne1] (ne1 == 0: a vector of ne0) and
 * of a type the forward pass can use in that role. */
static int get_weight(rvl_model *m, rvl_weight *w, const char *name, uint64_t ne0, uint64_t ne1,
                      bool required)
{
    const rvl_tensor_info *t = rvl_file_find_tensor(m->file, name);
    const char *path = rvl_file_path(m->file);

    memset(w, 0, sizeof *w);
    if (!t) {
        if (required)
            return rvl_seterr(RVL_EFORMAT, "%s: missing tensor '%s'", path, name);
        return 0;
    }
    bool ok = t->ne[0] == ne0 && (ne1 ? (t->n_dims == 2 && t->ne[1] == ne1)
                                      : (t->n_dims == 1 || (t->n_dims == 2 && t->ne[1] == 1)));
    if (!ok) {
        char got[96] = "";
        size_t o = 0;
        for (uint32_t d = 0; d < t->n_dims && o < sizeof got; d++)
            o += (size_t)snprintf(got + o, sizeof got - o, "%s%llu", d ? " x " : "",
                                  (unsigned long long)t->ne[d]);
        if (ne1)
            return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' has shape [%s], expected [%llu x %llu]",
                              path, name, got, (unsigned long long)ne0, (unsigned long long)ne1);
        return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' has shape [%s], expected [%llu]", path,
                          name, got, (unsigned long long)ne0);
    }
    const rvl_kformat *kf = rvl_kformat_get(t->type);
    if (!kf || !kf->dequantize || (ne1 && !kf->vec_dot)) {
        const rvl_type_info *ti = rvl_type_get(t->type);
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor '%s' has type %s, which the forward pass "
                          "cannot use yet", path, name, ti ? ti->name : "unknown");
    }
    if (m->used)
        m->used[t - rvl_file_tensor(m->file, 0)] = true;
    w->present = true;
    w->type = t->type;
    w->kf = kf;
    w->ne0 = ne0;
    w->ne1 = ne1 ? ne1 : 1;
    w->row_bytes = rvl_kformat_row_bytes(kf, ne0);
    w->data = t->data;
    return 0;
}

/* Split a fused weight (attn_qkv, ffn_up with gate and up) into row
 * views: out[i] gets rows[i] rows, in order. w may be out[0]. */
static void row_views(const rvl_weight *w, const uint64_t *rows, rvl_weight **out, int n)
{
    const rvl_weight whole = *w;
    uint64_t r0 = 0;
    for (int i = 0; i < n; i++) {
        *out[i] = whole;
        out[i]->ne1 = rows[i];
        out[i]->data = (const char *)whole.data + r0 * whole.row_bytes;
        r0 += rows[i];
    }
}

/* Every tensor of the file is one the forward pass uses: a tensor it
 * would ignore (an output bias, a layer's extra norm) changes what the
 * model computes, so it is refused naming it, as llama.cpp refuses a
 * file with tensors it did not load. Frees m->used. */
static int check_all_used(rvl_model *m)
{
    const uint64_t n = rvl_file_n_tensors(m->file);
    int rc = 0;
    for (uint64_t i = 0; i < n && rc == 0 && m->used; i++)
        if (!m->used[i]) {
            const rvl_tensor_info *t = rvl_file_tensor(m->file, i);
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor '%.*s' is not used by architecture "
                            "'%s' as ruvllm implements it (refused rather than ignored)",
                            rvl_file_path(m->file), (int)t->name.len, t->name.ptr, m->hp.arch);
        }
    free(m->used);
    m->used = NULL;
    return rc;
}

/* A 3-D expert tensor [ne0, ne1, n_expert] (each expert a matrix of ne1
 * rows) as one row view per expert: views[3e] (stride 3). */
static int get_stack(rvl_model *m, rvl_weight *views, size_t stride, const char *name,
                     uint64_t ne0, uint64_t ne1, uint32_t n, const char *what)
{
    const rvl_tensor_info *t = rvl_file_find_tensor(m->file, name);
    const char *path = rvl_file_path(m->file);
    if (!t)
        return rvl_seterr(RVL_EFORMAT, "%s: missing tensor '%s'", path, name);
    if (t->n_dims != 3 || t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != n)
        return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' is not [%llu x %llu x %u] (%s)", path,
                          name, (unsigned long long)ne0, (unsigned long long)ne1, n, what);
    const rvl_kformat *kf = rvl_kformat_get(t->type);
    if (!kf || !kf->dequantize || !kf->vec_dot) {
        const rvl_type_info *ti = rvl_type_get(t->type);
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor '%s' has type %s, which the forward pass "
                          "cannot use yet", path, name, ti ? ti->name : "unknown");
    }
    m->used[t - rvl_file_tensor(m->file, 0)] = true;
    const uint64_t row_bytes = rvl_kformat_row_bytes(kf, ne0);
    for (uint32_t e = 0; e < n; e++)
        views[stride * e] = (rvl_weight){.present = true, .type = t->type, .kf = kf,
                                            .ne0 = ne0, .ne1 = ne1, .row_bytes = row_bytes,
                                            .data = (const char *)t->data +
                                                    (uint64_t)e * ne1 * row_bytes};
    return 0;
}

static int get_experts(rvl_model *m, rvl_weight *views, const char *name, uint64_t ne0,
                       uint64_t ne1)
{
    return get_stack(m, views, 3, name, ne0, ne1, m->hp.n_expert, "experts");
}

/* Layer i's multi-head latent attention (block.mla): the query path (a
 * rank-q_rank bottleneck with its norm, or one attn_q), the latent
 * projection with its norm, and the per-head absorption matrices. */
static int load_mla(rvl_model *m, rvl_layer *L, uint32_t i, rvl_weight *views)
{
    const rvl_hparams *hp = &m->hp;
    const uint64_t E = hp->n_embd, QK = (uint64_t)hp->n_head * hp->mla_k_dim;
    const uint64_t R = hp->mla_kv_rank, NOPE = hp->mla_k_dim - hp->rope_dim;
    char nm[96];
    int rc;
#define W(field, suffix, a, b, req)                                            \
    do {                                                                       \
        snprintf(nm, sizeof nm, "blk.%u.%s", i, suffix);                       \
        if ((rc = get_weight(m, &L->field, nm, a, b, req)) < 0)                \
            return rc;                                                         \
    } while (0)
    if (hp->mla_q_rank) {
        W(wq_a, "attn_q_a.weight", E, hp->mla_q_rank, true);
        W(q_a_norm, "attn_q_a_norm.weight", hp->mla_q_rank, 0, true);
        W(wq_b, "attn_q_b.weight", hp->mla_q_rank, QK, true);
    } else {
        W(wq, "attn_q.weight", E, QK, true);
    }
    W(wkv_a, "attn_kv_a_mqa.weight", E, R + hp->rope_dim, true);
    W(kv_a_norm, "attn_kv_a_norm.weight", R, 0, true);
    W(wo, "attn_output.weight", (uint64_t)hp->n_head * hp->mla_v_dim, E, true);
#undef W
    snprintf(nm, sizeof nm, "blk.%u.attn_kv_b.weight", i);
    if (rvl_file_find_tensor(m->file, nm) && !(snprintf(nm, sizeof nm, "blk.%u.attn_k_b.weight", i),
                                                 rvl_file_find_tensor(m->file, nm)))
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: a DeepSeek file of the old layout (one "
                          "attn_kv_b, no attn_k_b/attn_v_b): convert it again with a current "
                          "llama.cpp or with 'ruvllm quantize' from the Hugging Face directory",
                          rvl_file_path(m->file));
    L->k_b = views;
    L->v_b = views + hp->n_head;
    snprintf(nm, sizeof nm, "blk.%u.attn_k_b.weight", i);
    if ((rc = get_stack(m, L->k_b, 1, nm, NOPE, R, hp->n_head, "heads")) < 0)
        return rc;
    snprintf(nm, sizeof nm, "blk.%u.attn_v_b.weight", i);
    return get_stack(m, L->v_b, 1, nm, R, hp->mla_v_dim, hp->n_head, "heads");
}

static int load_weights(rvl_model *m, const rvl_family *fam)
{
    rvl_hparams *hp = &m->hp;
    const uint64_t E = hp->n_embd, F = hp->n_ff, V = hp->n_vocab;
    const uint64_t QD = (uint64_t)hp->n_head * hp->head_dim;
    const uint64_t KVD = (uint64_t)hp->n_head_kv * hp->head_dim;
    char nm[96];
    int rc;

    m->used = calloc(rvl_file_n_tensors(m->file) + 1, sizeof *m->used);
    if (!m->used)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    if ((rc = get_weight(m, &m->tok_embd, "token_embd.weight", E, V, true)) < 0 ||
        (rc = get_weight(m, &m->output_norm, "output_norm.weight", E, 0, true)) < 0 ||
        (rc = get_weight(m, &m->output, "output.weight", E, V, false)) < 0)
        return rc;
    hp->tied_output = !m->output.present;
    /* per-frequency RoPE divisors: Llama 3.1's one set, LongRoPE's two */
    static const char *const divs[] = {"rope_freqs.weight", "rope_factors_long.weight",
                                       "rope_factors_short.weight"};
    rvl_weight *dw[] = {&m->rope_freqs, &m->rope_long, &m->rope_short};
    for (int d = 0; d < 3; d++) {
        const bool want = d == 0 ? hp->has_rope_freqs : hp->has_longrope;
        if (!want)
            continue;
        if ((rc = get_weight(m, dw[d], divs[d], hp->rope_dim / 2, 0, true)) < 0)
            return rc;
        if (dw[d]->type != RVL_TYPE_F32)
            return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' must be F32", rvl_file_path(m->file),
                              divs[d]);
        const float *fd = dw[d]->data;
        for (uint32_t i = 0; i < hp->rope_dim / 2; i++)
            if (!(fd[i] > 0 && fd[i] < 1e9f))
                return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' value %u (%g) is not a positive "
                                  "divisor", rvl_file_path(m->file), divs[d], i, (double)fd[i]);
    }
    if (hp->tied_output)
        m->output = m->tok_embd;

    m->layers = calloc(hp->n_layer, sizeof *m->layers);
    if (hp->block.moe)
        m->experts = calloc((size_t)hp->n_layer * 3 * hp->n_expert, sizeof *m->experts);
    if (hp->block.mla)
        m->mla_views = calloc((size_t)hp->n_layer * 2 * hp->n_head, sizeof *m->mla_views);
    if (!m->layers || (hp->block.moe && !m->experts) || (hp->block.mla && !m->mla_views))
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < hp->n_layer; i++) {
        rvl_layer *L = &m->layers[i];
#define W(field, suffix, a, b, req)                                            \
    do {                                                                       \
        snprintf(nm, sizeof nm, "blk.%u.%s", i, suffix);                       \
        if ((rc = get_weight(m, &L->field, nm, a, b, req)) < 0)                \
            return rc;                                                         \
    } while (0)
        W(attn_norm, "attn_norm.weight", E, 0, true);
        if (hp->block.mla) {
            if ((rc = load_mla(m, L, i, m->mla_views + (size_t)i * 2 * hp->n_head)) < 0)
                return rc;
        } else if (hp->block.fused_qkv) { /* Q, K and V rows of one tensor */
            W(wq, "attn_qkv.weight", E, QD + 2 * KVD, true);
            row_views(&L->wq, (uint64_t[]){QD, KVD, KVD}, (rvl_weight *[]){&L->wq, &L->wk, &L->wv},
                      3);
        } else {
            W(wq, "attn_q.weight", E, QD, true);
            W(wk, "attn_k.weight", E, KVD, true);
            W(wv, "attn_v.weight", E, KVD, true);
        }
        if (!hp->block.mla)
            W(wo, "attn_output.weight", QD, E, true);
        W(bo, "attn_output.bias", E, 0, hp->block.attn_out_bias);
        W(sinks, "attn_sinks.weight", hp->n_head, 0, hp->block.attn_sinks);
        W(post_attn_norm, "post_attention_norm.weight", E, 0, hp->block.norm_post_attn);
        W(bq, "attn_q.bias", QD, 0, hp->block.qkv_bias);
        W(bk, "attn_k.bias", KVD, 0, hp->block.qkv_bias);
        W(bv, "attn_v.bias", KVD, 0, hp->block.qkv_bias);
        if (hp->block.qk_norm) {
            W(q_norm, "attn_q_norm.weight", hp->head_dim, 0, true);
            W(k_norm, "attn_k_norm.weight", hp->head_dim, 0, true);
        }
        char fnn[64];
        snprintf(fnn, sizeof fnn, "%s.weight", fam->ffn_norm ? fam->ffn_norm : "ffn_norm");
        W(ffn_norm, fnn, E, 0, true);
        const bool moe = hp->block.moe && i >= hp->block.moe_dense_lead;
        if (moe) {
            const uint64_t FE = hp->n_ff_exp, FS = hp->n_ff_shexp;
            W(router, "ffn_gate_inp.weight", E, hp->n_expert, true);
            W(router_b, "ffn_gate_inp.bias", hp->n_expert, 0, hp->block.moe_bias);
            W(sel_bias, "exp_probs_b.bias", hp->n_expert, 0, hp->block.moe_sel_bias);
            static const char *const bn[3] = {"ffn_gate_exps.bias", "ffn_up_exps.bias",
                                              "ffn_down_exps.bias"};
            for (int k = 0; k < 3 && hp->block.moe_bias; k++)
                W(exps_b[k], bn[k], k < 2 ? FE : E, hp->n_expert, true);
            L->exps = m->experts + (size_t)i * 3 * hp->n_expert;
            static const char *const en[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
            for (int k = 0; k < 3; k++) {
                snprintf(nm, sizeof nm, "blk.%u.%s.weight", i, en[k]);
                if ((rc = get_experts(m, L->exps + k, nm, k < 2 ? E : FE, k < 2 ? FE : E)) < 0)
                    return rc;
            }
            if (hp->block.moe_shared) {
                W(sh_router, "ffn_gate_inp_shexp.weight", E, 0, hp->block.moe_shared_gate);
                W(sh_gate, "ffn_gate_shexp.weight", E, FS, true);
                W(sh_up, "ffn_up_shexp.weight", E, FS, true);
                W(sh_down, "ffn_down_shexp.weight", FS, E, true);
            }
        } else if (hp->block.fused_gate_up) { /* gate rows, then up rows */
            W(w_gate, "ffn_up.weight", E, 2 * F, true);
            row_views(&L->w_gate, (uint64_t[]){F, F}, (rvl_weight *[]){&L->w_gate, &L->w_up}, 2);
        } else {
            W(w_gate, "ffn_gate.weight", E, F, true);
            W(w_up, "ffn_up.weight", E, F, true);
        }
        if (!moe)
            W(w_down, "ffn_down.weight", F, E, true);
        W(post_ffn_norm, "post_ffw_norm.weight", E, 0, hp->block.norm_post_ffn);
#undef W
    }
    /* Q/K/V biases: required (qwen2), optional (llama: llama.cpp adds
     * them when present) or none, as the family says. The forward pass
     * takes all of them or none. */
    bool any_bias = false;
    for (uint32_t i = 0; i < hp->n_layer; i++)
        any_bias |= m->layers[i].bq.present || m->layers[i].bk.present || m->layers[i].bv.present;
    if (any_bias && fam->bias == RVL_FAMILY_BIAS_NONE)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: architecture '%s' has no Q/K/V biases, but the "
                          "file has tensor 'blk.N.attn_q/k/v.bias'", rvl_file_path(m->file), hp->arch);
    if (any_bias && !hp->block.qkv_bias) {
        for (uint32_t i = 0; i < hp->n_layer; i++) {
            const rvl_layer *L = &m->layers[i];
            const char *miss = !L->bq.present ? "q" : !L->bk.present ? "k" : !L->bv.present ? "v" : NULL;
            if (miss)
                return rvl_seterr(RVL_EFORMAT, "%s: missing tensor 'blk.%u.attn_%s.bias' (the other "
                                  "layers have Q/K/V biases)", rvl_file_path(m->file), i, miss);
        }
        hp->block.qkv_bias = true;
    }
    return 0;
}

/* ====================================================================
 * The packed layout (formats.h gemm16)
 * ==================================================================== */

/* The weights the forward pass multiplies, for packing: how many, and
 * the first cap of them into ws (NULL: only count). */
static size_t matmul_weights(rvl_model *m, rvl_weight **ws, size_t cap)
{
    size_t n = 0;
#define ADD(w) do { if (ws && n < cap) ws[n] = (w); n++; } while (0)
    for (uint32_t i = 0; i < m->hp.n_layer; i++) {
        rvl_layer *L = &m->layers[i];
        rvl_weight *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                            &L->wq_a, &L->wq_b, &L->wkv_a, &L->sh_gate, &L->sh_up, &L->sh_down};
        for (size_t k = 0; k < sizeof lw / sizeof lw[0]; k++)
            ADD(lw[k]);
        /* streamed experts stay in the file (engine/experts.h) */
        for (size_t e = 0; L->exps && !rvl_experts_streamed(m->xs) && e < 3 * (size_t)m->hp.n_expert;
             e++)
            ADD(&L->exps[e]);
    }
    ADD(&m->output);
#undef ADD
    return n;
}

/* Every weight matmul_weights lists, in an array of the caller's to free;
 * NULL when out of memory. */
static rvl_weight **all_matmul_weights(rvl_model *m, size_t *n)
{
    *n = matmul_weights(m, NULL, 0);
    rvl_weight **ws = malloc(*n * sizeof *ws);
    if (ws)
        matmul_weights(m, ws, *n);
    return ws;
}

static bool packable(const rvl_weight *w)
{
    return w->present && w->kf->gemm16 && w->ne1 >= RVL_PACK16_ROWS && w->kf->row_header == 0;
}

/* Drop the file pages of the packed weights from the page tables: the
 * forward pass reads the packed copy, and the process would otherwise hold
 * both (twice the weights' memory). The page cache keeps them; a reader
 * of the row-major bytes (another backend, the fingerprint) faults them
 * back. Not the tied output: its rows are the token embeddings too. */
static bool releasable(const rvl_model *m, const rvl_weight *w)
{
    return w->packed && !(w == &m->output && m->hp.tied_output);
}

/* Drop the file pages of rows [r0, r1) of a packed weight (the whole
 * pages among them). */
static void release_rows(const rvl_weight *w, uint64_t r0, uint64_t r1)
{
    const uintptr_t pg = 4096;
    const uintptr_t a = ((uintptr_t)w->data + r0 * w->row_bytes + pg - 1) & ~(pg - 1);
    const uintptr_t e = ((uintptr_t)w->data + r1 * w->row_bytes) & ~(pg - 1);
    if (e > a)
        (void)madvise((void *)a, e - a, MADV_DONTNEED);
}

void rvl_model_release_packed_source(const rvl_model *m)
{
    size_t n;
    rvl_weight **ws = all_matmul_weights((rvl_model *)m, &n);
    for (size_t i = 0; ws && i < n; i++)
        if (releasable(m, ws[i]))
            release_rows(ws[i], 0, ws[i]->packed_rows);
    free(ws);
}

/* ====================================================================
 * The load's work on a pool: tokenizer, packing, prefaulting
 *
 * Three jobs that do not depend on each other are cut into items that
 * every thread of a short-lived pool takes in turn (an atomic counter):
 * opening the tokenizer (one item, first: the longest that cannot be
 * cut), packing the weights whose format has a packed kernel on this CPU
 * (pieces of whole row groups: each group is packed on its own, so the
 * bytes are those of one thread), and populating the page tables of the
 * rest of the file that the first forward pass reads. A fresh process
 * then pays for the three once, side by side.
 * ==================================================================== */

#define PACK_PAGE ((uintptr_t)2 << 20)   /* the packed copy's pages (MADV_HUGEPAGE) */
#define FAULT_PIECE ((size_t)4 << 20)     /* bytes per prefault item */

typedef struct {
    rvl_weight *w;              /* packing: the weight, its rows [r0, r1); NULL: a range */
    uint64_t r0, r1;
    const void *a, *b;          /* prefault: [a, b) of the mapping */
} load_item;

/* Cut w's packing into items (NULL: only count them) of the row groups
 * that start in one 2 MiB page of the packed copy, so that the threads
 * write (and fault in) different huge pages, not the same one at once. */
static size_t pack_items(rvl_weight *w, load_item *items)
{
    const uint64_t P = RVL_PACK16_ROWS;
    const uintptr_t dst = (uintptr_t)w->packed;
    size_t n = 0;
    uint64_t r0 = 0;
    for (uint64_t r = P; r <= w->packed_rows; r += P)
        if (r == w->packed_rows ||
            (dst + r * w->row_bytes) / PACK_PAGE != (dst + r0 * w->row_bytes) / PACK_PAGE) {
            if (items)
                items[n] = (load_item){.w = w, .r0 = r0, .r1 = r};
            n++;
            r0 = r;
        }
    return n;
}

typedef struct {
    rvl_model *m;
    load_item *items;
    size_t n_items;
    bool tok;                   /* item "-1": rvl_tok_open */
    atomic_size_t next;
    int tok_rc;
    char tok_err[512];          /* rvl_errmsg is per thread: the worker's copy */
} load_job;

static void run_item(load_job *j, const load_item *it)
{
    rvl_weight *w = it->w;
    if (!w) {
#ifdef MADV_POPULATE_READ
        (void)madvise((void *)it->a, (size_t)((const char *)it->b - (const char *)it->a),
                      MADV_POPULATE_READ);
#endif
        return;
    }
    char *dst = (char *)w->packed;
    for (uint64_t r = it->r0; r < it->r1; r += RVL_PACK16_ROWS)
        w->kf->pack16((int64_t)w->ne0, (const char *)w->data + r * w->row_bytes, w->row_bytes,
                      dst + r * w->row_bytes);
    if (releasable(j->m, w)) /* as we go: the process never holds both */
        release_rows(w, it->r0, it->r1);
}

static void load_worker(void *arg, int ith, int nth)
{
    load_job *j = arg;
    (void)ith;
    (void)nth;
    for (;;) {
        const size_t i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (j->tok && i == 0) {
            j->tok_rc = rvl_tok_open(&j->m->tok, j->m->file);
            if (j->tok_rc < 0)
                snprintf(j->tok_err, sizeof j->tok_err, "%s", rvl_errmsg());
            continue;
        }
        const size_t k = i - j->tok;
        if (k >= j->n_items)
            return;
        run_item(j, &j->items[k]);
    }
}

/* Lay out the packed copy (one allocation, 2 MiB pages where the kernel
 * gives them: decode streams it) and point each packable weight at its
 * rows; *n_pieces: the packing items they make. RUVLLM_REPACK=0 keeps the
 * row-major path (the same bits, for comparisons). */
static int plan_packing(rvl_model *m, rvl_weight **ws, size_t n, size_t *n_pieces)
{
    const char *env = getenv("RUVLLM_REPACK");
    *n_pieces = 0;
    if (env && strcmp(env, "0") == 0)
        return 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (packable(ws[i]))
            total += ws[i]->ne1 / RVL_PACK16_ROWS * RVL_PACK16_ROWS * ws[i]->row_bytes;
    if (total == 0)
        return 0;
    const size_t huge = (size_t)2 << 20;
    const size_t bytes = (size_t)((total + huge - 1) / huge * huge);
    void *p = NULL;
    if (posix_memalign(&p, huge, bytes))
        return rvl_seterr(RVL_ENOMEM, "out of memory for the packed weights (%llu MiB)",
                          (unsigned long long)(bytes >> 20));
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
    m->packed = p;
    m->packed_bytes = bytes;
    char *dst = p;
    for (size_t i = 0; i < n; i++) {
        rvl_weight *w = ws[i];
        if (!packable(w))
            continue;
        const uint64_t rows = w->ne1 / RVL_PACK16_ROWS * RVL_PACK16_ROWS;
        w->packed = dst;
        w->packed_rows = rows;
        dst += rows * w->row_bytes;
        *n_pieces += pack_items(w, NULL);
    }
    return 0;
}

static int cmp_range(const void *a, const void *b)
{
    const uintptr_t x = (uintptr_t)((const void *const *)a)[0];
    const uintptr_t y = (uintptr_t)((const void *const *)b)[0];
    return x < y ? -1 : x > y;
}

/* The ranges the prefault leaves out, sorted: the packed weights'
 * row-major bytes (read once; the packed copy is what the forward pass
 * reads), the streamed experts' (engine/experts.h), and an embedding
 * matrix that is not also the output (the forward pass reads one row per
 * token). NULL when out of memory. */
static const void *(*prefault_skips(rvl_model *m, rvl_weight **ws, size_t n, size_t *k))[2]
{
    const size_t nx = 3 * (size_t)m->hp.n_layer;
    const void *(*skip)[2] = malloc((n + nx + 2) * sizeof *skip);
    if (!skip)
        return NULL;
    *k = rvl_experts_ranges(m->xs, skip, nx);
    for (size_t i = 0; i < n; i++)
        if (releasable(m, ws[i])) {
            skip[*k][0] = ws[i]->data;
            skip[*k][1] = (const char *)ws[i]->data + ws[i]->packed_rows * ws[i]->row_bytes;
            (*k)++;
        }
    if (!m->hp.tied_output) {
        skip[*k][0] = m->tok_embd.data;
        skip[*k][1] = (const char *)m->tok_embd.data + m->tok_embd.ne1 * m->tok_embd.row_bytes;
        (*k)++;
    }
    qsort(skip, *k, sizeof *skip, cmp_range);
    return skip;
}

/* Open the tokenizer, pack the weights and prefault the rest of the file,
 * on n_threads threads (0: one per online CPU). */
static int load_on_pool(rvl_model *m, int n_threads)
{
    size_t n, n_pack, n_skip = 0;
    int rc;
    rvl_weight **ws = all_matmul_weights(m, &n);
    if (!ws)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    if ((rc = plan_packing(m, ws, n, &n_pack)) < 0) {
        free(ws);
        return rc;
    }
    const void *(*skip)[2] = prefault_skips(m, ws, n, &n_skip);
    const size_t n_fault = skip ? rvl_file_prefault_ranges(m->file, (const void *const (*)[2])skip,
                                                           n_skip, FAULT_PIECE, NULL, 0) : 0;
    load_job j = {.m = m, .tok = true, .n_items = n_pack + n_fault};
    j.items = malloc((j.n_items + 1) * sizeof *j.items);
    if (!skip || !j.items) {
        free(ws);
        free(skip);
        free(j.items);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (ws[i]->packed)
            k += pack_items(ws[i], j.items + k);
    /* the ranges go into the items' a/b after the packing pieces */
    const void *(*fr)[2] = malloc((n_fault + 1) * sizeof *fr);
    if (!fr) {
        free(ws);
        free(skip);
        free(j.items);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    rvl_file_prefault_ranges(m->file, (const void *const (*)[2])skip, n_skip, FAULT_PIECE, fr,
                             n_fault);
    for (size_t i = 0; i < n_fault; i++)
        j.items[k++] = (load_item){.a = fr[i][0], .b = fr[i][1]};
    free(fr);
    free(skip);
    free(ws);

    rvl_pool *pool = NULL;
    if (n_threads != 1 && rvl_pool_open(&pool, n_threads) < 0)
        pool = NULL; /* one thread does it all */
    if (pool)
        rvl_pool_run(pool, load_worker, &j);
    else
        load_worker(&j, 0, 1);
    rvl_pool_close(pool);
    free(j.items);
    if (j.tok_rc < 0)
        return rvl_seterr(j.tok_rc, "%s", j.tok_err);
    return 0;
}

/* ====================================================================
 * Hyper-parameters
 * ==================================================================== */

/* One validation for every producer of hyper-parameters: the GGUF loader
 * below and the Hugging Face import (convert/convert_hf.c), so that no
 * command writes a file another refuses. Messages name the GGUF keys. */
int rvl_model_check_hparams(const rvl_hparams *hp, const char *path)
{
    const char *A = hp->arch;
#define CHECK(cond, ...) do { if (!(cond)) return rvl_seterr(RVL_EFORMAT, __VA_ARGS__); } while (0)
    CHECK(hp->n_layer >= 1 && hp->n_layer <= 1024, "%s: %s.block_count %u is out of range", path, A, hp->n_layer);
    CHECK(hp->n_embd >= 1 && hp->n_embd <= 65536, "%s: %s.embedding_length %u is out of range", path, A, hp->n_embd);
    CHECK(hp->n_ff >= 1 && hp->n_ff <= 1u << 20, "%s: %s.feed_forward_length %u is out of range", path, A, hp->n_ff);
    CHECK(hp->n_head >= 1 && hp->n_head <= 1024, "%s: %s.attention.head_count %u is out of range", path, A, hp->n_head);
    CHECK(hp->n_head_kv >= 1 && hp->n_head % hp->n_head_kv == 0,
          "%s: %s.attention.head_count_kv %u does not divide head_count %u", path, A, hp->n_head_kv, hp->n_head);
    CHECK(isfinite(hp->rms_eps) && hp->rms_eps > 0 && hp->rms_eps < 1,
          "%s: %s.attention.layer_norm_rms_epsilon %g is out of range", path, A, (double)hp->rms_eps);
    CHECK(isfinite(hp->rope_base) && hp->rope_base > 0, "%s: %s.rope.freq_base %g must be a positive "
          "finite number", path, A, (double)hp->rope_base);
    CHECK(hp->n_ctx_train >= 1, "%s: %s.context_length must be positive", path, A);
    CHECK(hp->head_dim >= 2 && hp->head_dim % 2 == 0 && hp->head_dim <= 1024,
          "%s: head dimension %u is invalid", path, hp->head_dim);
    CHECK(hp->rope_dim % 2 == 0 && hp->rope_dim <= hp->head_dim,
          "%s: %s.rope.dimension_count %u is invalid for head size %u", path, A, hp->rope_dim, hp->head_dim);
    CHECK(hp->rope_orig_ctx >= 1, "%s: %s.rope.scaling.original_context_length must be positive", path, A);
    CHECK(isfinite(hp->rope_attn_factor) && hp->rope_attn_factor > 0 && hp->rope_attn_factor < 100,
          "%s: %s.rope.scaling.attn_factor %g is out of range", path, A, (double)hp->rope_attn_factor);
    CHECK(hp->yarn_beta_fast > 0 && hp->yarn_beta_slow > 0 && hp->yarn_beta_fast < 1e6f &&
          hp->yarn_beta_slow < 1e6f, "%s: %s.rope.scaling.yarn_beta_fast/slow must be positive", path, A);
    if (hp->rope_scaling != RVL_ROPE_SCALING_NONE)
        CHECK(isfinite(hp->rope_factor) && hp->rope_factor > 0 && hp->rope_factor < 1e6f,
              "%s: %s.rope.scaling.factor %g is out of range", path, A, (double)hp->rope_factor);
    CHECK(hp->yarn_ext_factor >= 0 && hp->yarn_ext_factor <= 1,
          "%s: %s.rope.scaling.yarn_ext_factor %g is out of range", path, A,
          (double)hp->yarn_ext_factor);
#undef CHECK
    return 0;
}

static int load_hparams(rvl_model *m, const rvl_family **famp)
{
    const rvl_file *f = m->file;
    const char *path = rvl_file_path(f);
    rvl_hparams *hp = &m->hp;
    const rvl_kv *kv = rvl_file_find_kv(f, "general.architecture");
    rvl_str a;
    int rc;

    if (!kv)
        return rvl_seterr(RVL_EFORMAT, "%s: missing metadata key 'general.architecture'", path);
    if (rvl_kv_get_str(kv, &a) < 0 || a.len == 0 || a.len >= sizeof hp->arch)
        return rvl_seterr(RVL_EFORMAT, "%s: 'general.architecture' is not a valid name", path);
    memcpy(hp->arch, a.ptr, a.len);
    hp->arch[a.len] = 0;

    const rvl_family *fam = rvl_family_find(hp->arch);
    if (!fam)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: unsupported architecture '%s' (supported: %s)",
                          path, hp->arch, rvl_family_names());
    *famp = fam;

    const char *A = hp->arch;
    if ((rc = get_u32(f, A, "block_count", &hp->n_layer, true, 0)) < 0 ||
        (rc = get_u32(f, A, "embedding_length", &hp->n_embd, true, 0)) < 0 ||
        (rc = get_u32(f, A, "feed_forward_length", &hp->n_ff, true, 0)) < 0 ||
        (rc = get_u32(f, A, "attention.head_count", &hp->n_head, true, 0)) < 0 ||
        (rc = get_u32(f, A, "attention.head_count_kv", &hp->n_head_kv, false, hp->n_head)) < 0 ||
        (rc = get_u32(f, A, "context_length", &hp->n_ctx_train, true, 0)) < 0 ||
        (rc = get_f32(f, A, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, 0)) < 0 ||
        (rc = get_f32(f, A, "rope.freq_base", &hp->rope_base, false, 10000.0f)) < 0)
        return rc;

    uint32_t key_len = 0;
    if ((rc = get_u32(f, A, "attention.key_length", &key_len, false, hp->n_head ? hp->n_embd / hp->n_head : 0)) < 0)
        return rc;
    hp->head_dim = key_len;
    if ((rc = get_u32(f, A, "rope.dimension_count", &hp->rope_dim, false, hp->head_dim)) < 0)
        return rc;

    /* RoPE scaling: none, linear, YaRN (rope.scaling.*), or Llama 3.1's
     * per-frequency divisors (the tensor rope_freqs.weight, read with the
     * weights). */
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", A);
    hp->rope_scaling = RVL_ROPE_SCALING_NONE;
    hp->rope_factor = 1.0f;
    hp->yarn_ext_factor = 0.0f;
    if ((rc = get_u32(f, A, "rope.scaling.original_context_length", &hp->rope_orig_ctx, false,
                      hp->n_ctx_train)) < 0 ||
        (rc = get_f32(f, A, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast, false, 32.0f)) < 0 ||
        (rc = get_f32(f, A, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow, false, 1.0f)) < 0 ||
        (rc = get_f32(f, A, "rope.scaling.attn_factor", &hp->rope_attn_factor, false, 1.0f)) < 0 ||
        (rc = get_f32(f, A, "rope.scaling.yarn_log_multiplier", &hp->yarn_log_mul, false, 0.0f)) < 0)
        return rc;
    const rvl_kv *st = rvl_file_find_kv(f, key);
    rvl_str sv = {0};
    if (st && rvl_kv_get_str(st, &sv) < 0)
        return rvl_seterr(RVL_EFORMAT, "%s: metadata key '%s' is not a string", path, key);
    if (st && !rvl_str_eq(sv, "none")) {
        float factor;
        if ((rc = get_f32(f, A, "rope.scaling.factor", &factor, true, 1.0f)) < 0)
            return rc;
        hp->rope_factor = factor;
        if (rvl_str_eq(sv, "linear")) {
            hp->rope_scaling = RVL_ROPE_SCALING_LINEAR;
        } else if (rvl_str_eq(sv, "yarn")) {
            hp->rope_scaling = RVL_ROPE_SCALING_YARN;
            /* llama.cpp's default: full ramp mixing when the model asks for YaRN */
            if ((rc = get_f32(f, A, "rope.scaling.yarn_ext_factor", &hp->yarn_ext_factor, false,
                              1.0f)) < 0)
                return rc;
        } else {
            return rvl_seterr(RVL_EUNSUPPORTED, "%s: RoPE scaling '%.*s' in '%s' is not supported "
                              "(supported: none, linear, yarn)", path,
                              (int)(sv.len > 32 ? 32 : sv.len), sv.ptr, key);
        }
    }
    hp->has_rope_freqs = rvl_file_find_tensor(f, "rope_freqs.weight") != NULL;
    /* LongRoPE (Phi-3): both sets of divisors, chosen by the context size */
    hp->has_longrope = rvl_file_find_tensor(f, "rope_factors_long.weight") != NULL ||
                       rvl_file_find_tensor(f, "rope_factors_short.weight") != NULL;
    if (hp->has_longrope && hp->has_rope_freqs)
        return rvl_seterr(RVL_EFORMAT, "%s: tensors 'rope_freqs.weight' and "
                          "'rope_factors_long/short.weight' both set RoPE divisors", path);

    /* experts: how many, how many per token, their FFN widths */
    if ((rc = get_u32(f, A, "expert_count", &hp->n_expert, false, 0)) < 0 ||
        (rc = get_u32(f, A, "expert_used_count", &hp->n_expert_used, false, 0)) < 0 ||
        (rc = get_u32(f, A, "expert_feed_forward_length", &hp->n_ff_exp, false, hp->n_ff)) < 0 ||
        (rc = get_u32(f, A, "expert_shared_feed_forward_length", &hp->n_ff_shexp, false,
                      hp->n_ff)) < 0)
        return rc;

    /* DeepSeek's shared experts: expert_shared_count of n_ff_exp each */
    uint32_t n_shexp = 0;
    if ((rc = get_u32(f, A, "expert_shared_count", &n_shexp, false, 0)) < 0)
        return rc;
    snprintf(key, sizeof key, "%s.expert_shared_feed_forward_length", A);
    if (n_shexp && !rvl_file_find_kv(f, key)) {
        if (n_shexp > 64)
            return rvl_seterr(RVL_EFORMAT, "%s: %s.expert_shared_count %u is out of range", path,
                              A, n_shexp);
        hp->n_ff_shexp = n_shexp * hp->n_ff_exp;
    }
    /* multi-head latent attention's dimensions (the cache's head is the
     * latent plus the RoPE key: attention.key_length) */
    if ((rc = get_u32(f, A, "attention.q_lora_rank", &hp->mla_q_rank, false, 0)) < 0 ||
        (rc = get_u32(f, A, "attention.kv_lora_rank", &hp->mla_kv_rank, false, 0)) < 0 ||
        (rc = get_u32(f, A, "attention.key_length_mla", &hp->mla_k_dim, false, 0)) < 0 ||
        (rc = get_u32(f, A, "attention.value_length_mla", &hp->mla_v_dim, false, 0)) < 0)
        return rc;

    if ((rc = rvl_model_check_hparams(hp, path)) < 0)
        return rc;
    /* the block recipe: the family's, completed by the file's keys */
    if ((rc = rvl_family_recipe(fam, f, hp, &rvl_forward_block)) < 0)
        return rc;
    if (hp->block.mla &&
        (hp->mla_kv_rank < 1 || hp->mla_kv_rank > 8192 || hp->n_head_kv != 1 ||
         hp->head_dim != hp->mla_kv_rank + hp->rope_dim || hp->mla_k_dim <= hp->rope_dim ||
         hp->mla_k_dim > 1024 || hp->mla_v_dim < 1 || hp->mla_v_dim > 1024 ||
         hp->mla_q_rank > 65536))
        return rvl_seterr(RVL_EFORMAT, "%s: the latent attention's dimensions do not fit "
                          "(%s.attention.kv_lora_rank %u + rope.dimension_count %u must be "
                          "attention.key_length %u with head_count_kv 1; key_length_mla %u, "
                          "value_length_mla %u, q_lora_rank %u)", path, A, hp->mla_kv_rank,
                          hp->rope_dim, hp->head_dim, hp->mla_k_dim, hp->mla_v_dim,
                          hp->mla_q_rank);
    if (hp->block.moe && (hp->block.moe_dense_lead >= hp->n_layer ||
                          (hp->block.moe_groups > 1 &&
                           (hp->n_expert % hp->block.moe_groups || hp->block.moe_groups > 64 ||
                            hp->block.moe_groups_used < 1 ||
                            hp->block.moe_groups_used > hp->block.moe_groups ||
                            hp->n_expert_used > hp->block.moe_groups_used *
                                                    (hp->n_expert / hp->block.moe_groups)))))
        return rvl_seterr(RVL_EFORMAT, "%s: %s.leading_dense_block_count %u or the expert "
                          "groups (%u, %u used, of %u experts) are out of range", path, A,
                          hp->block.moe_dense_lead, hp->block.moe_groups,
                          hp->block.moe_groups_used, hp->n_expert);
    if (hp->block.moe_gating > RVL_MOE_SOFTMAX_WEIGHT)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: %s.expert_gating_func %d is not implemented "
                          "(1 softmax, 2 sigmoid, 3 softmax of the chosen)", path, A,
                          (int)hp->block.moe_gating);
    if (hp->block.moe != (hp->n_expert > 0))
        return rvl_seterr(RVL_EFORMAT, "%s: %s.expert_count is %u but the file %s experts "
                          "(blk.0.ffn_gate_inp.weight)", path, A, hp->n_expert,
                          hp->block.moe ? "has" : "has no");
    if (hp->block.moe && (hp->n_expert > 1024 || hp->n_expert_used < 1 ||
                          hp->n_expert_used > hp->n_expert || hp->n_ff_exp < 1 ||
                          hp->n_ff_exp > (1u << 20) || hp->n_ff_shexp < 1 ||
                          hp->n_ff_shexp > (1u << 20)))
        return rvl_seterr(RVL_EFORMAT, "%s: %s.expert_used_count %u of expert_count %u (or an "
                          "expert feed_forward_length) is out of range", path, A,
                          hp->n_expert_used, hp->n_expert);

    /* vocabulary size: from the embedding matrix, cross-checked with the key */
#define CHECK(cond, ...) do { if (!(cond)) return rvl_seterr(RVL_EFORMAT, __VA_ARGS__); } while (0)
    const rvl_tensor_info *te = rvl_file_find_tensor(f, "token_embd.weight");
    CHECK(te, "%s: missing tensor 'token_embd.weight'", path);
    CHECK(te->n_dims == 2 && te->ne[0] == hp->n_embd && te->ne[1] >= 1 && te->ne[1] <= (1u << 24),
          "%s: tensor 'token_embd.weight' has the wrong shape for embedding_length %u", path, hp->n_embd);
    hp->n_vocab = (uint32_t)te->ne[1];
    uint32_t vs;
    if ((rc = get_u32(f, A, "vocab_size", &vs, false, hp->n_vocab)) < 0)
        return rc;
    CHECK(vs == hp->n_vocab, "%s: %s.vocab_size %u contradicts token_embd.weight's %u rows", path, A,
          vs, hp->n_vocab);
#undef CHECK
    return 0;
}

int rvl_model_open(rvl_model **out, const char *path)
{
    return rvl_model_open_params(out, path, NULL);
}

int rvl_model_open_params(rvl_model **out, const char *path, const rvl_model_params *p)
{
    rvl_model *m;
    int rc;

    *out = NULL;
    m = calloc(1, sizeof *m);
    if (!m)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    if ((rc = rvl_file_open(&m->file, path)) < 0)
        goto fail;
    if (rvl_file_fmt(m->file) != RVL_FMT_GGUF) {
        rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: running safetensors models directly is not supported; "
                        "convert with 'ruvllm quantize'", path);
        goto fail;
    }
    const rvl_family *fam = NULL;
    if ((rc = load_hparams(m, &fam)) < 0 || (rc = load_weights(m, fam)) < 0 ||
        (rc = check_all_used(m)) < 0 ||
        (rc = rvl_experts_open(&m->xs, m, p ? p->expert_budget : 0)) < 0) /* before packing */
        goto fail;
    if ((rc = load_on_pool(m, p ? (int)p->n_threads : 0)) < 0)
        goto fail;
    /* one row of the embedding and of the output per token, as llama.cpp
     * requires: ids without a row fail in rvl_decode mid-chat, rows
     * without a token are sampled and then cannot be printed */
    if ((uint32_t)rvl_tok_n_vocab(m->tok) != m->hp.n_vocab) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: tokenizer.ggml.tokens has %d tokens but token_embd.weight "
                        "has %u rows (they must agree)", path, rvl_tok_n_vocab(m->tok),
                        m->hp.n_vocab);
        goto fail;
    }
    *out = m;
    return 0;
fail:
    rvl_model_close(m);
    return rc;
}

void rvl_model_close(rvl_model *m)
{
    if (!m)
        return;
    rvl_tok_close(m->tok);
    rvl_experts_close(m->xs);
    free(m->layers);
    free(m->experts);
    free(m->mla_views);
    free(m->used);
    free(m->packed);
    rvl_file_close(m->file);
    free(m);
}

void rvl_model_expert_stats(const rvl_model *m, rvl_expert_stats *st)
{
    rvl_experts_stats(m->xs, st);
}

const rvl_hparams *rvl_model_hparams(const rvl_model *m) { return &m->hp; }
const rvl_file *rvl_model_file(const rvl_model *m) { return m->file; }
struct rvl_tokenizer *rvl_model_tokenizer(const rvl_model *m) { return m->tok; }

/* ====================================================================
 * Weights for backends (ruvllm.h "Backends"): read-only views.
 * ==================================================================== */

int rvl_model_weight(const rvl_model *m, uint32_t layer, rvl_weight_role role,
                     rvl_weight_view *out)
{
    static const char *const names[RVL_WEIGHT_N] = {
        "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
        "output", "attn_norm", "ffn_norm", "attn_q bias", "attn_k bias", "attn_v bias",
        "output_norm", "token_embd", "rope_freqs"};
    const rvl_weight *w;
    const rvl_layer *L = layer < m->hp.n_layer ? &m->layers[layer] : NULL;
    const bool per_layer = role < RVL_WEIGHT_OUTPUT ||
                           (role > RVL_WEIGHT_OUTPUT && role < RVL_WEIGHT_OUTPUT_NORM);
    if ((unsigned)role >= RVL_WEIGHT_N || (per_layer && !L))
        return rvl_seterr(RVL_EINVAL, "no weight of role %d in layer %u of %u", (int)role, layer,
                          m->hp.n_layer);
    switch (role) {
    case RVL_WEIGHT_Q: w = &L->wq; break;
    case RVL_WEIGHT_K: w = &L->wk; break;
    case RVL_WEIGHT_V: w = &L->wv; break;
    case RVL_WEIGHT_O: w = &L->wo; break;
    case RVL_WEIGHT_GATE: w = &L->w_gate; break;
    case RVL_WEIGHT_UP: w = &L->w_up; break;
    case RVL_WEIGHT_DOWN: w = &L->w_down; break;
    case RVL_WEIGHT_OUTPUT: w = &m->output; break;
    case RVL_WEIGHT_ATTN_NORM: w = &L->attn_norm; break;
    case RVL_WEIGHT_FFN_NORM: w = &L->ffn_norm; break;
    case RVL_WEIGHT_BQ: w = &L->bq; break;
    case RVL_WEIGHT_BK: w = &L->bk; break;
    case RVL_WEIGHT_BV: w = &L->bv; break;
    case RVL_WEIGHT_OUTPUT_NORM: w = &m->output_norm; break;
    case RVL_WEIGHT_TOK_EMBD: w = &m->tok_embd; break;
    default: w = &m->rope_freqs; break;
    }
    if (!w->present)
        return rvl_seterr(RVL_ENOTFOUND, "the model has no %s weight", names[role]);
    *out = (rvl_weight_view){w->type, w->ne0, w->ne1, w->row_bytes, w->data};
    return 0;
}

int rvl_model_weight_rows(const rvl_weight_view *w, uint64_t row0, uint64_t n, float *dst)
{
    if (row0 > w->ne1 || n > w->ne1 - row0)
        return rvl_seterr(RVL_ERANGE, "rows %llu..%llu of a weight of %llu rows",
                          (unsigned long long)row0, (unsigned long long)(row0 + n),
                          (unsigned long long)w->ne1);
    /* the format was checked when the model was opened: it has one */
    const rvl_dequantize_fn dq = rvl_kformat_get(w->type)->dequantize;
    for (uint64_t r = 0; r < n; r++)
        dq((const char *)w->data + (row0 + r) * w->row_bytes, dst + r * w->ne0, (int64_t)w->ne0);
    return 0;
}

/* ====================================================================
 * Fingerprint: what a session file must have been made with.
 * ==================================================================== */

#include <xxhash.h>

uint64_t rvl_model_fingerprint(const rvl_model *cm)
{
    rvl_model *m = (rvl_model *)cm; /* only the cached value changes */
    uint64_t have = atomic_load(&m->fingerprint);
    if (have)
        return have;
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return 0;
    XXH3_64bits_reset(st);
    const rvl_hparams *hp = &m->hp;
    const uint32_t geo[] = {hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_head_kv,
                            hp->head_dim, hp->n_vocab, hp->rope_dim, (uint32_t)hp->rope_type,
                            (uint32_t)hp->rope_scaling};
    const float fp[] = {hp->rms_eps, hp->rope_base, hp->rope_factor};
    XXH3_64bits_update(st, hp->arch, strlen(hp->arch));
    XXH3_64bits_update(st, geo, sizeof geo);
    XXH3_64bits_update(st, fp, sizeof fp);
    uint64_t n = rvl_file_n_tensors(m->file);
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(m->file, i);
        uint64_t meta[2 + RVL_MAX_DIMS] = {t->type, t->n_dims};
        for (uint32_t d = 0; d < t->n_dims && d < RVL_MAX_DIMS; d++)
            meta[2 + d] = t->ne[d];
        XXH3_64bits_update(st, t->name.ptr, t->name.len);
        XXH3_64bits_update(st, meta, sizeof meta);
        XXH3_64bits_update(st, t->data, t->nbytes);
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    rvl_model_release_packed_source(m);
    rvl_experts_drop_pages(m->xs);
    h = h ? h : 1;
    atomic_store(&m->fingerprint, h);
    return h;
}
