/*
 * forward.c - the forward pass, llama2.c-style: one readable loop over
 * layers that follows the model's block recipe (rvl_block, ruvllm.h; the
 * families are described in lib/engine/family.c). rvl_forward_block
 * below lists the recipe features this loop implements; the loader
 * refuses a model asking for another, naming the key.
 *
 * Per token: embedding row -> for each layer: RMSNorm, Q/K/V projections
 * (+ biases, + per-head Q/K RMSNorm), RoPE, grouped-query attention over the KV cache, output
 * projection, residual; RMSNorm, SwiGLU FFN, residual -> final RMSNorm ->
 * output projection. Every buffer is allocated when the session opens;
 * decode never allocates. Matmuls run on the session's thread pool, split
 * by rows (lib/engine/matmul.h); RMSNorm, RoPE and SwiGLU are
 * kernels/rowops.h's, batches of rows split over the pool by
 * lib/engine/ops.h.
 *
 * The KV cache is lib/engine/kvcache.c's paged, tiered cache (keys cached after
 * RoPE); attention runs over its pages: kernels/attn.h's flash kernels
 * over the f16/f32 pages (q rounded to f16 against f16 keys as llama.cpp
 * does; the probabilities stay f32, as in llama.cpp's flash-attention
 * path) and kernels/kvq.h's page readers over the quantized ones.
 *
 * With rvl_ctx_params.profile set, every op call is timed into it by kind
 * ("Op profile" below; `ruvllm bench model --profile`); off, no clock is
 * read.
 *
 * This is the "cpu" backend (ruvllm.h "Backends", lib/engine/backend.h):
 * rvl_forward_ops at the end of the file. The context (lib/engine/ctx.c)
 * checks every input before calling it.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend.h"
#include "engine/experts.h"
#include "engine/kvcache.h"
#include "engine/lora_int.h"
#include "engine/matmul.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "rowops.h"

/* The recipe this loop follows: the llama block (pre-attention RMSNorm,
 * attention, residual, pre-FFN RMSNorm, SiLU-gated FFN, residual) and
 * every feature of rvl_block: post-norms, Q/K/V biases, per-head Q/K
 * RMSNorm, fused tensors (row views, engine/model.c), GELU, scales,
 * soft-caps, sliding windows with their own RoPE base. (A nonzero field:
 * the feature is implemented; act: the activation besides SiLU.) */
const rvl_block rvl_forward_block = {
    .norm_pre_attn = true, .norm_post_attn = true, .norm_pre_ffn = true, .norm_post_ffn = true,
    .qk_norm = true, .qkv_bias = true, .fused_qkv = true, .fused_gate_up = true,
    .act = RVL_ACT_SWIGLU_OAI, .embd_scale = 1, .q_scale = 1, .attn_softcap = 1,
    .final_softcap = 1, .swa_window = 1, .swa_period = 1, .swa_rope_base = 1,
    .attn_temp_scale = 1, .moe = true, .moe_renorm = true, .moe_shared = true,
    .moe_shared_gate = true, .moe_gating = RVL_MOE_SOFTMAX_WEIGHT, .moe_sel_bias = true,
    .moe_bias = true, .moe_scale = 1, .moe_groups = 1, .moe_groups_used = 1,
    .moe_dense_lead = 1, .mla = true, .attn_sinks = true, .attn_out_bias = true,
    .yarn_exact_ramp = true,
};

/* Tokens processed together (RVL_UBATCH): each weight row is read once
 * per chunk and multiplied with every token's activations while it is in
 * cache. */
#define UBATCH RVL_UBATCH

/* A session of the CPU backend: the table's rvl_backend handle (ruvllm.h)
 * is one of these (fw()). */
/* The rows of one sequence in a chunk: rows row0 .. row0 + n - 1 are its
 * positions pos0 .. pos0 + n - 1, over its cache kv; logits: where the
 * logits of its last row go, or NULL. */
typedef struct {
    struct rvl_kvcache *kv;
    uint32_t pos0, row0, n;
    float *logits;
} fw_seg;

typedef struct rvl_forward rvl_forward;
struct rvl_forward {
    const rvl_model *m;
    rvl_pool *pool;
    uint32_t n_ctx;
    uint32_t pos;                 /* tokens in the cache */
    bool all_logits;
    uint32_t n_batch;             /* most tokens per call with all_logits */
    rvl_kv_type kv_type_k, kv_type_v;
    rvl_kvcache *kv;                  /* the paged KV cache (lib/engine/kvcache.h) */
    float *rope_cos, *rope_sin;   /* (n_ctx, rope_dim/2) */
    float *swa_cos, *swa_sin;     /* the windowed layers' (swa_rope_base), or NULL: the same */
    float kq_scale;               /* 1/sqrt(head_dim) or q_scale, times the RoPE mscale^2 */
    float rot_mscale;             /* partial rotary (rope_dim < head_dim): the RoPE mscale,
                                     applied to the rotated dimensions of q and k only (as
                                     ggml and transformers scale cos and sin), not in
                                     kq_scale; else 1 */
    float *x;                     /* (UBATCH, dim) residual stream */
    float *xb;                    /* (UBATCH, max(dim, q_dim)) normed input / attention out */
    float *q;                     /* (UBATCH, q_dim) */
    float *k, *v;                 /* (UBATCH, kv_dim) */
    float *hb, *hb2;              /* (UBATCH, ff): ff the widest FFN (dense, expert, shared) */
    /* mixture of experts (block.moe), else NULL */
    float *moe_p;                 /* (UBATCH, n_expert) router logits, then probabilities */
    int32_t *moe_sel;             /* (UBATCH, n_expert_used) each token's experts */
    float *moe_w;                 /* (UBATCH, n_expert_used) and their weights */
    float *moe_x;                 /* (UBATCH * n_expert_used, dim) each expert's tokens' rows */
    float *moe_h, *moe_h2;        /* (UBATCH * n_expert_used, n_ff_exp) their gate and up */
    float *moe_o;                 /* (UBATCH * n_expert_used, dim) the experts' outputs */
    unsigned char *moe_act, *moe_act2, *moe_actd; /* (UBATCH * n_expert_used) activation
                                     rows (mm.act_stride bytes) of gate, up (when its format
                                     differs), down */
    uint32_t *moe_cnt, *moe_first; /* (n_expert) each expert's rows and its first */
    rvl_matmul_group *moe_grp;    /* (2 * RVL_MOE_GROUP) one pool job's matrices */
    void *moe_scratch;            /* rvl_matmul_grouped's */
    uint32_t *moe_idx;            /* (UBATCH * n_expert_used) which tokens, with */
    float *moe_idxw;              /* their weights */
    float *sh_router;             /* (n_layer, dim) the shared expert's gate vectors, or NULL */
    float *moe_s;                 /* (n_expert) one token's selection scores */
    float *moe_rb, *moe_sb;       /* (n_layer, n_expert) router biases (moe_bias), selection
                                     biases (moe_sel_bias), or NULL */
    float *moe_eb;                /* (n_layer, n_expert, 2 n_ff_exp + dim) each expert's gate,
                                     up and down biases (moe_bias), or NULL */
    float *attn_ob;               /* (n_layer, dim) attention output biases, or NULL */
    /* multi-head latent attention (block.mla), else NULL */
    float *mla_qa;                /* (UBATCH, q_rank) the queries' bottleneck */
    float *mla_q;                 /* (UBATCH, n_head * k_dim) the queries */
    float *mla_v;                 /* (UBATCH, n_head * v_dim) the heads' values */
    float *mla_norm;              /* (n_layer, q_rank + kv_rank) q_a and kv_a norm gains */
    bool mla_exp;                 /* prompts in the expanded form (RUVLLM_MLA=expanded) */
    float *mla_lat, *mla_kn, *mla_vv, *mla_p; /* its (n_ctx + 32, head_dim) latents, (n_ctx,
                                     k_dim - rope_dim) keys and (n_ctx, v_dim) values of
                                     one head, (n_ctx) scores */
    float *mla_kbf, *mla_vbf;     /* one head's k_b and v_b as floats */
    float *xo;                    /* (UBATCH, dim) matmul output */
    float *logits;                /* (vocab) or (n_batch, vocab) with all_logits */
    float *norm_w;                /* dequantized norm weights: (2*n_layer+1, dim) */
    float *post_w;                /* post-norm weights (n_layer, 2, dim), or NULL */
    float *bias;                  /* dequantized biases: (n_layer, q_dim + 2*kv_dim) or NULL */
    float *qk_norm;               /* dequantized Q and K norm gains: (n_layer, 2, head_dim)
                                     or NULL */
    rvl_matmul mm;                /* pool; act: (UBATCH, act_stride) activations for
                                     vec_dot */
    const rvl_lora *lora;         /* run-time LoRA adapters (borrowed), or NULL */
    /* the chunk being run: its sequences (one for rvl_decode; rvl_batch's
     * several) and each row's position */
    fw_seg segs[UBATCH];
    uint32_t seg_seq[UBATCH];     /* rvl_batch's sequence of each segment */
    uint32_t n_segs;
    uint32_t row_pos[UBATCH];
    /* rvl_batch's sequences (forward_seqs_open), beside the session's own */
    rvl_kvstore *seq_store;       /* their pages (kvcache.h "The store"), shared */
    rvl_kvcache **seq_kv;         /* (n_seq) */
    uint32_t *seq_pos;            /* (n_seq) */
    const int32_t **it_tok;       /* (n_seq) a step's items after what they shared */
    uint32_t *it_n;               /* (n_seq) */
    uint32_t *kv_win;             /* (n_layer) each layer's window, or NULL (kvcache.h) */
    uint32_t n_seq;
    float *seq_logits;            /* (n_seq, vocab): each item's last logits */
    float *seg_logits;            /* (UBATCH, vocab): a chunk's segments' last logits */
    int32_t *seq_tok;             /* (UBATCH) a chunk's tokens */
    rvl_trace_fn trace;           /* rvl_ctx_set_trace: per-step hook, or NULL */
    void *trace_ud;
    rvl_profile *prof;            /* rvl_ctx_params.profile (borrowed), or NULL: off */
};

/* The trace hook after a named step of forward_chunk: nb rows of n floats,
 * stride floats apart (rvl_ctx_set_trace). */
#define TRACE(name, l, p, stride, n)                                                      \
    do {                                                                                 \
        if (c->trace)                                                                    \
            c->trace(c->trace_ud, name, (int)(l), pos0, nb, p, stride, n);               \
    } while (0)

/* ====================================================================
 * Op profile (rvl_ctx_params.profile): the wall time of each op call,
 * by kind (RVL_PROF_KINDS). Off, an op costs one test of c->prof before
 * and after it and no clock read; the pool runs ops synchronously, so the
 * call's wall time is the op's. Timed calls never nest: a kind's time is
 * its own.
 * ==================================================================== */

static uint64_t prof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The clock at an op's start when profiling, else 0 (not read). */
static inline uint64_t prof_start(const rvl_forward *c) { return c->prof ? prof_now() : 0; }

/* The op of kind k that started at t0 (prof_start) is done. */
static inline void prof_end(const rvl_forward *c, rvl_prof_kind k, uint64_t t0)
{
    if (c->prof) {
        c->prof->ns[k] += prof_now() - t0;
        c->prof->calls[k]++;
    }
}

static uint64_t prof_sum(const rvl_profile *p)
{
    uint64_t s = 0;
    for (int k = 0; k < RVL_PROF_COUNT; k++)
        s += p->ns[k];
    return s;
}

/* A decode that started at t0, when the kinds summed ops0: what no op
 * accounted for is RVL_PROF_OTHER's. */
static void prof_rest(const rvl_forward *c, uint64_t t0, uint64_t ops0)
{
    const uint64_t dt = prof_now() - t0, ops = prof_sum(c->prof) - ops0;
    c->prof->ns[RVL_PROF_OTHER] += dt > ops ? dt - ops : 0;
    c->prof->calls[RVL_PROF_OTHER]++;
}

/* y = W x (rvl_matmul_run) as an op of kind k: profiling, the activation
 * rows' quantization (its first half) is RVL_PROF_ACT_QUANT's. */
static void mm_run(const rvl_forward *c, rvl_prof_kind k, float *y, size_t y_stride,
                   const rvl_weight *w, const float *x, size_t x_stride, uint32_t nb)
{
    if (!c->prof) {
        rvl_matmul_run(&c->mm, y, y_stride, w, x, x_stride, nb);
        return;
    }
    const unsigned char *act;
    size_t as;
    uint64_t t = prof_now();
    rvl_matmul_prepare_act(&c->mm, w, x, x_stride, nb, &act, &as);
    if (act != (const unsigned char *)x)
        prof_end(c, RVL_PROF_ACT_QUANT, t), t = prof_now();
    rvl_matmul_act(&c->mm, 1, &w, &y, &y_stride, act, as, nb);
    prof_end(c, k, t);
}

/* rvl_matmul_shared as an op of kind k: profiling, its halves apart (the
 * same runs of weights whose activation formats agree). */
static void mm_shared(const rvl_forward *c, rvl_prof_kind k, const float *x, size_t x_stride,
                      uint32_t nb, int n, const rvl_weight *const *ws, float *const *ys,
                      const size_t *y_strides)
{
    if (!c->prof) {
        rvl_matmul_shared(&c->mm, x, x_stride, nb, n, ws, ys, y_strides);
        return;
    }
    for (int i = 0; i < n;) {
        int e = i + 1;
        while (e < n && e - i < RVL_MATMUL_PARTS &&
               ws[e]->kf->vec_dot_type == ws[i]->kf->vec_dot_type)
            e++;
        const unsigned char *act;
        size_t as;
        uint64_t t = prof_now();
        rvl_matmul_prepare_act(&c->mm, ws[i], x, x_stride, nb, &act, &as);
        if (act != (const unsigned char *)x)
            prof_end(c, RVL_PROF_ACT_QUANT, t), t = prof_now();
        rvl_matmul_act(&c->mm, e - i, ws + i, ys + i, y_strides + i, act, as, nb);
        prof_end(c, k, t);
        i = e;
    }
}

/* LoRA adapters on a projection (rvl_lora_apply), timed only when there
 * are adapters. */
#define LORA(c, l, kind, x, xs, nb, y, ys)                                                   \
    do {                                                                                     \
        if ((c)->lora) {                                                                     \
            const uint64_t t_ = prof_start(c);                                               \
            rvl_lora_apply((c)->lora, (c)->pool, l, kind, x, xs, nb, y, ys);                 \
            prof_end(c, RVL_PROF_LORA, t_);                                                  \
        }                                                                                    \
    } while (0)

/* ====================================================================
 * Attention's steps
 * ==================================================================== */

/* One token's Q and K of layer l after their projections: biases (V's
 * too), per-head Q/K RMSNorm -- where the recipe has them (qkv_pre is
 * called only then). */
static void qkv_pre(const rvl_forward *c, uint32_t l, float *q, float *k, float *v)
{
    const rvl_hparams *hp = &c->m->hp;
    const rvl_block *B = &hp->block;
    const uint32_t hd = hp->head_dim, q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;

    if (B->qkv_bias) {
        const float *b = c->bias + (size_t)l * (q_dim + 2 * kv_dim);
        for (uint32_t i = 0; i < q_dim; i++)
            q[i] += b[i];
        for (uint32_t i = 0; i < kv_dim; i++) {
            k[i] += b[q_dim + i];
            v[i] += b[q_dim + kv_dim + i];
        }
    }
    if (B->qk_norm) { /* each head of Q and K RMS-normed before RoPE */
        const float *g = c->qk_norm + (size_t)l * 2 * hd;
        for (uint32_t h = 0; h < hp->n_head; h++)
            rmsnorm_f32_ref(q + (size_t)h * hd, q + (size_t)h * hd, g, hd, hp->rms_eps);
        for (uint32_t h = 0; h < hp->n_head_kv; h++)
            rmsnorm_f32_ref(k + (size_t)h * hd, k + (size_t)h * hd, g + hd, hd, hp->rms_eps);
    }
}

/* One token's Q and K at position pos after qkv_pre: RoPE (the windowed
 * layers' own tables with own_rope; a partial rotation's mscale on the
 * rotated dimensions), the attention temperature where the recipe has
 * it. */
static void qkv_rope(const rvl_forward *c, float *q, float *k, uint32_t pos, bool own_rope)
{
    const rvl_hparams *hp = &c->m->hp;
    const rvl_block *B = &hp->block;
    const uint32_t hd = hp->head_dim, q_dim = hp->n_head * hd;
    const uint32_t half = hp->rope_dim / 2;
    const float *cs = (own_rope ? c->swa_cos : c->rope_cos) + (size_t)pos * half;
    const float *sn = (own_rope ? c->swa_sin : c->rope_sin) + (size_t)pos * half;
    const bool neox = hp->rope_type == RVL_ROPE_NEOX;
    rope_f32_ref(q, hp->n_head, hd, hp->rope_dim, cs, sn, neox);
    rope_f32_ref(k, hp->n_head_kv, hd, hp->rope_dim, cs, sn, neox);
    if (c->rot_mscale != 1.0f) {
        for (uint32_t h = 0; h < hp->n_head; h++)
            for (uint32_t i = 0; i < hp->rope_dim; i++)
                q[(size_t)h * hd + i] *= c->rot_mscale;
        for (uint32_t h = 0; h < hp->n_head_kv; h++)
            for (uint32_t i = 0; i < hp->rope_dim; i++)
                k[(size_t)h * hd + i] *= c->rot_mscale;
    }
    if (B->attn_temp_scale) { /* Llama 4's attention temperature */
        const float ts = 1.0f + B->attn_temp_scale *
                                    logf(floorf((float)pos / (float)hp->rope_orig_ctx) + 1.0f);
        for (uint32_t i = 0; i < q_dim; i++)
            q[i] *= ts;
    }
}

/* Expert e of layer l: its gate, up and down weights (three in a row).
 * The one place the forward pass takes an expert's weights. */
static const rvl_weight *expert_weights(const rvl_forward *c, uint32_t l, uint32_t e)
{
    return rvl_experts_acquire(c->m->xs, l, e); /* pinned until rvl_experts_release */
}

/* The forward pass is done with expert e's weights (expert_weights). */
static void expert_done(const rvl_forward *c, const rvl_weight *w)
{
    rvl_experts_release(c->m->xs, w);
}

/* Most experts whose GEMMs run as one pool job (moe_ffn). */
#define RVL_MOE_GROUP 64

/* The top k of n scores, by repeated arg-max (the first of equal ones):
 * their indices into sel. */
static void top_k(const float *s, uint32_t n, uint32_t k, int32_t *sel)
{
    for (uint32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (uint32_t e = 0; e < n; e++) {
            bool taken = false;
            for (uint32_t i = 0; i < j; i++)
                taken |= sel[i] == (int32_t)e;
            if (!taken && s[e] > -INFINITY && (best < 0 || s[e] > s[best]))
                best = (int32_t)e;
        }
        sel[j] = best < 0 ? 0 : best;
    }
}

/* One token's routing: from the router's logits p (ne, overwritten with
 * the probabilities) the n_expert_used experts into sel and their weights
 * into w, as llama.cpp's build_moe_ffn and transformers define them: the
 * gating (softmax, sigmoid, or the chosen logits' softmax), the choice on
 * the probabilities plus the selection bias (DeepSeek-V3's exp_probs_b,
 * not in the weights) within the best groups (the sum of each group's two
 * best), the weights renormalized (moe_renorm) and scaled (moe_scale).
 * s: ne floats of scratch. */
static void route_token(const rvl_hparams *hp, float *p, const float *sel_bias, float *s,
                        int32_t *sel, float *w)
{
    const rvl_block *B = &hp->block;
    const uint32_t ne = hp->n_expert, nu = hp->n_expert_used;
    if (B->moe_gating == RVL_MOE_SIGMOID)
        for (uint32_t e = 0; e < ne; e++)
            p[e] = 1.0f / (1.0f + expf(-p[e]));
    else if (B->moe_gating != RVL_MOE_SOFTMAX_WEIGHT)
        softmax_f32_ref(p, p, ne);
    for (uint32_t e = 0; e < ne; e++)
        s[e] = sel_bias ? p[e] + sel_bias[e] : p[e];
    if (B->moe_groups > 1) { /* keep the groups of the best top-2 sums */
        const uint32_t ng = B->moe_groups, per = ne / ng;
        float gs[64];
        int32_t keep[64];
        for (uint32_t g = 0; g < ng && g < 64; g++) {
            int32_t two[2];
            top_k(s + (size_t)g * per, per, per < 2 ? per : 2, two);
            gs[g] = s[(size_t)g * per + (uint32_t)two[0]] +
                    (per < 2 ? 0.0f : s[(size_t)g * per + (uint32_t)two[1]]);
        }
        top_k(gs, ng, B->moe_groups_used, keep);
        for (uint32_t g = 0; g < ng; g++) {
            bool kept = false;
            for (uint32_t i = 0; i < B->moe_groups_used; i++)
                kept |= keep[i] == (int32_t)g;
            for (uint32_t e = 0; !kept && e < per; e++)
                s[(size_t)g * per + e] = -INFINITY;
        }
    }
    top_k(s, ne, nu, sel);
    float sum = 0;
    for (uint32_t j = 0; j < nu; j++) {
        w[j] = p[sel[j]];
        sum += w[j];
    }
    if (B->moe_gating == RVL_MOE_SOFTMAX_WEIGHT)
        softmax_f32_ref(w, w, nu);
    else if (B->moe_renorm)
        for (uint32_t j = 0; j < nu; j++)
            w[j] /= sum > 6.103515625e-5f ? sum : 6.103515625e-5f;
    if (B->moe_scale)
        for (uint32_t j = 0; j < nu; j++)
            w[j] *= B->moe_scale;
}

/* rows += bias, n floats per row, nb rows stride apart */
static void add_bias(float *rows, size_t stride, const float *bias, uint32_t n, uint32_t nb)
{
    for (uint32_t t = 0; t < nb; t++)
        for (uint32_t i = 0; i < n; i++)
            rows[(size_t)t * stride + i] += bias[i];
}

/* The mixture-of-experts FFN of layer l on the nb normed rows of xb, into
 * xo: the router (route_token) gives each token its n_expert_used experts
 * and their weights; each chosen expert runs once, as one GEMM over the
 * rows of the tokens that chose it (with its biases: moe_bias); plus, with
 * moe_shared, the shared expert (times sigmoid(its gate . x) with
 * moe_shared_gate). */
static void moe_ffn(rvl_forward *c, uint32_t l, uint32_t nb, size_t xb_stride)
{
    const rvl_hparams *hp = &c->m->hp;
    const rvl_block *B = &hp->block;
    const rvl_layer *L = &c->m->layers[l];
    const uint32_t dim = hp->n_embd, ne = hp->n_expert, nu = hp->n_expert_used;
    const uint32_t fe = hp->n_ff_exp, fs = hp->n_ff_shexp;
    const size_t eb = 2 * (size_t)fe + dim; /* one expert's biases */

    mm_run(c, RVL_PROF_MOE_ROUTE, c->moe_p, ne, &L->router, c->xb, xb_stride, nb);
    uint64_t tp = prof_start(c); /* routing and gathering: moe_route */
    if (B->moe_bias)
        add_bias(c->moe_p, ne, c->moe_rb + (size_t)l * ne, ne, nb);
    for (uint32_t t = 0; t < nb; t++)
        route_token(hp, c->moe_p + (size_t)t * ne,
                    B->moe_sel_bias ? c->moe_sb + (size_t)l * ne : NULL, c->moe_s,
                    c->moe_sel + (size_t)t * nu, c->moe_w + (size_t)t * nu);
    rvl_experts_routed(c->m->xs, l, c->moe_sel, nb, c->xb, xb_stride); /* prefetch l+1's */
    /* the rows of each expert's tokens, expert after expert (moe_x row r:
     * token moe_idx[r], its weight moe_idxw[r]) */
    uint32_t *cnt = c->moe_cnt, *first = c->moe_first;
    memset(cnt, 0, ne * sizeof *cnt);
    for (size_t i = 0; i < (size_t)nb * nu; i++)
        cnt[c->moe_sel[i]]++;
    uint32_t rows = 0;
    for (uint32_t e = 0; e < ne; e++) {
        first[e] = rows;
        rows += cnt[e];
        cnt[e] = 0;
    }
    for (uint32_t t = 0; t < nb; t++)
        for (uint32_t j = 0; j < nu; j++) {
            const uint32_t e = (uint32_t)c->moe_sel[(size_t)t * nu + j];
            const uint32_t r = first[e] + cnt[e]++;
            c->moe_idx[r] = t;
            c->moe_idxw[r] = c->moe_w[(size_t)t * nu + j];
            memcpy(c->moe_x + (size_t)r * dim, c->xb + (size_t)t * xb_stride,
                   dim * sizeof *c->moe_x);
        }
    prof_end(c, RVL_PROF_MOE_ROUTE, tp);
    /* the chosen experts in groups (as many as their weights can be held
     * at once), each group's gate and up as one pool job over every
     * expert's rows, then its down; the inputs quantized once per kind */
    const rvl_weight *ew0 = &c->m->layers[l].exps[0];
    rvl_matmul mx = c->mm; /* the activations of up to UBATCH x n_expert_used rows */
    const unsigned char *act_g, *act_u;
    size_t as_g, as_u;
    mx.act = c->moe_act;
    tp = prof_start(c);
    rvl_matmul_prepare_act(&mx, &ew0[0], c->moe_x, dim, rows, &act_g, &as_g);
    act_u = act_g;
    as_u = as_g;
    if (ew0[1].kf->vec_dot_type != ew0[0].kf->vec_dot_type) {
        mx.act = c->moe_act2;
        rvl_matmul_prepare_act(&mx, &ew0[1], c->moe_x, dim, rows, &act_u, &as_u);
    }
    prof_end(c, RVL_PROF_ACT_QUANT, tp);
    /* streamed experts: a group holds no more pins than one token's */
    const uint32_t max_g = rvl_experts_streamed(c->m->xs) ? nu : RVL_MOE_GROUP;
    for (uint32_t e0 = 0; e0 < ne;) {
        uint32_t n_g = 0, e1 = e0, r0 = rows, r1 = 0;
        const rvl_weight *ew[RVL_MOE_GROUP];
        tp = prof_start(c);
        for (; e1 < ne && n_g < max_g; e1++) {
            if (!cnt[e1])
                continue;
            ew[n_g] = expert_weights(c, l, e1);
            c->moe_grp[2 * n_g] = (rvl_matmul_group){&ew[n_g][0], c->moe_h + (size_t)first[e1] * fe,
                                                      fe, act_g + first[e1] * as_g, as_g, cnt[e1]};
            c->moe_grp[2 * n_g + 1] = (rvl_matmul_group){&ew[n_g][1],
                                                          c->moe_h2 + (size_t)first[e1] * fe, fe,
                                                          act_u + first[e1] * as_u, as_u, cnt[e1]};
            r0 = first[e1] < r0 ? first[e1] : r0;
            r1 = first[e1] + cnt[e1];
            n_g++;
        }
        prof_end(c, RVL_PROF_MOE_LOAD, tp);
        if (!n_g)
            break;
        tp = prof_start(c);
        rvl_matmul_grouped(&c->mm, 2 * (int)n_g, c->moe_grp, c->moe_scratch);
        prof_end(c, RVL_PROF_MM_MOE_EXPERTS, tp);
        for (uint32_t e = e0; B->moe_bias && e < e1; e++) {
            const float *b = c->moe_eb + ((size_t)l * ne + e) * eb;
            add_bias(c->moe_h + (size_t)first[e] * fe, fe, b, fe, cnt[e]);
            add_bias(c->moe_h2 + (size_t)first[e] * fe, fe, b + fe, fe, cnt[e]);
        }
        tp = prof_start(c);
        rvl_ops_glu_rows(c->pool, B->act, c->moe_h + (size_t)r0 * fe, c->moe_h2 + (size_t)r0 * fe,
                         fe, r1 - r0);
        prof_end(c, RVL_PROF_ACT, tp);
        const unsigned char *act_d;
        size_t as_d;
        mx.act = c->moe_actd + (size_t)r0 * c->mm.act_stride;
        tp = prof_start(c);
        rvl_matmul_prepare_act(&mx, &ew[0][2], c->moe_h + (size_t)r0 * fe, fe, r1 - r0, &act_d,
                               &as_d);
        prof_end(c, RVL_PROF_ACT_QUANT, tp);
        for (uint32_t i = 0, e = e0; e < e1; e++) {
            if (!cnt[e])
                continue;
            c->moe_grp[i] = (rvl_matmul_group){&ew[i][2], c->moe_o + (size_t)first[e] * dim, dim,
                                               act_d + (first[e] - r0) * as_d, as_d, cnt[e]};
            i++;
        }
        tp = prof_start(c);
        rvl_matmul_grouped(&c->mm, (int)n_g, c->moe_grp, c->moe_scratch);
        prof_end(c, RVL_PROF_MM_MOE_EXPERTS, tp);
        for (uint32_t i = 0, e = e0; e < e1; e++) {
            if (!cnt[e])
                continue;
            if (B->moe_bias)
                add_bias(c->moe_o + (size_t)first[e] * dim, dim,
                         c->moe_eb + ((size_t)l * ne + e) * eb + 2 * (size_t)fe, dim, cnt[e]);
            expert_done(c, ew[i++]);
        }
        e0 = e1;
    }
    /* each token's experts in the order of their index, as one at a time */
    tp = prof_start(c);
    memset(c->xo, 0, (size_t)nb * dim * sizeof *c->xo);
    for (uint32_t r = 0; r < rows; r++) {
        float *xo = c->xo + (size_t)c->moe_idx[r] * dim;
        const float *o = c->moe_o + (size_t)r * dim, wi = c->moe_idxw[r];
        for (uint32_t d = 0; d < dim; d++)
            xo[d] += wi * o[d];
    }
    prof_end(c, RVL_PROF_MOE_ROUTE, tp);
    if (!B->moe_shared)
        return;
    const rvl_weight *gu[2] = {&L->sh_gate, &L->sh_up};
    float *gu_out[2] = {c->hb, c->hb2};
    const size_t gu_stride[2] = {fs, fs};
    mm_shared(c, RVL_PROF_MM_MOE_SHARED, c->xb, xb_stride, nb, 2, gu, gu_out, gu_stride);
    tp = prof_start(c);
    rvl_ops_glu_rows(c->pool, RVL_ACT_SILU, c->hb, c->hb2, fs, nb);
    prof_end(c, RVL_PROF_ACT, tp);
    mm_run(c, RVL_PROF_MM_MOE_SHARED, c->moe_o, dim, &L->sh_down, c->hb, fs, nb);
    tp = prof_start(c);
    const float *g = B->moe_shared_gate ? c->sh_router + (size_t)l * dim : NULL;
    for (uint32_t t = 0; t < nb; t++) {
        const float *x = c->xb + (size_t)t * xb_stride;
        float z = 0;
        for (uint32_t d = 0; g && d < dim; d++)
            z += g[d] * x[d];
        const float s = g ? 1.0f / (1.0f + expf(-z)) : 1.0f;
        float *xo = c->xo + (size_t)t * dim;
        const float *o = c->moe_o + (size_t)t * dim;
        for (uint32_t d = 0; d < dim; d++)
            xo[d] += s * o[d];
    }
    prof_end(c, RVL_PROF_MOE_ROUTE, tp);
}

/* Each sequence's keys and values into its cache, then attention of its
 * rows over its pages (q rows q_dim apart, k and v rows kv_dim apart, the
 * output into xb). One sequence: its attention runs on the pool. Several
 * (rvl_batch): one pool job whose threads take whole sequences, each
 * attending on its own thread (pool NULL), since the many small jobs of a
 * step of single tokens would cost more than they split. */
typedef struct {
    rvl_forward *c;
    uint32_t l;
    const float *k, *v;
    size_t q_dim, kv_dim, xb_stride;
    atomic_uint next;
} seg_job;

static void mla_expanded(rvl_forward *c, uint32_t l, const fw_seg *g);

/* pool NULL: on a thread of the pool's job (the caller times the job) */
static void attend_seg(rvl_forward *c, const seg_job *j, const fw_seg *g, rvl_pool *pool)
{
    const bool timed = pool && c->prof;
    uint64_t t = timed ? prof_now() : 0;
    rvl_kvcache_write(g->kv, j->l, g->pos0, g->n, j->k + (size_t)g->row0 * j->kv_dim, j->kv_dim,
                      j->v + (size_t)g->row0 * j->kv_dim, j->kv_dim);
    if (timed)
        prof_end(c, RVL_PROF_KV_WRITE, t), t = prof_now();
    if (c->mla_exp && c->m->hp.block.mla && g->n > 1)
        mla_expanded(c, j->l, g);
    else
        rvl_kvcache_attend(g->kv, pool, j->l, c->q + (size_t)g->row0 * j->q_dim, j->q_dim,
                           g->pos0, g->n, c->xb + (size_t)g->row0 * j->xb_stride, j->xb_stride);
    if (timed)
        prof_end(c, g->n > 1 ? RVL_PROF_ATTN_PREFILL : RVL_PROF_ATTN_DECODE, t);
}

static void attend_segs_part(void *arg, int ith, int nth)
{
    seg_job *j = arg;
    (void)ith;
    (void)nth;
    for (;;) {
        const unsigned i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= j->c->n_segs)
            break;
        attend_seg(j->c, j, &j->c->segs[i], NULL);
    }
}

static void attend_segments(rvl_forward *c, uint32_t l, const float *k, const float *v,
                            size_t q_dim, size_t kv_dim, size_t xb_stride)
{
    seg_job j = {.c = c, .l = l, .k = k, .v = v, .q_dim = q_dim, .kv_dim = kv_dim,
                 .xb_stride = xb_stride};
    atomic_init(&j.next, 0);
    if (c->n_segs == 1 || c->mla_exp) { /* the expanded form's scratch is one */
        for (uint32_t i = 0; i < c->n_segs; i++)
            attend_seg(c, &j, &c->segs[i], c->pool);
        return;
    }
    const uint64_t t = prof_start(c);
    rvl_pool_run(c->pool, attend_segs_part, &j);
    bool one_each = true; /* a step of single tokens: decoding */
    for (uint32_t i = 0; i < c->n_segs; i++)
        one_each &= c->segs[i].n == 1;
    prof_end(c, one_each ? RVL_PROF_ATTN_DECODE : RVL_PROF_ATTN_PREFILL, t);
}

/* Grouped-query attention of layer l on the nb normed rows of xb, into
 * xo: Q/K/V projections (LoRA adapters on each), qkv_pre's and qkv_rope's steps, the
 * keys and values into the cache, attention over its pages, the output
 * projection (with its bias: attn_out_bias). */
static void gqa_attention(rvl_forward *c, uint32_t l, uint32_t nb, uint32_t pos0,
                          size_t xb_stride, bool own_rope)
{
    const rvl_hparams *hp = &c->m->hp;
    const rvl_layer *L = &c->m->layers[l];
    const uint32_t dim = hp->n_embd;
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim;
    const size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    const rvl_weight *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *qkv_out[3] = {c->q, c->k, c->v};
    const size_t qkv_stride[3] = {q_dim, kv_dim, kv_dim};
    mm_shared(c, RVL_PROF_MM_QKV, c->xb, xb_stride, nb, 3, qkv, qkv_out, qkv_stride);
    LORA(c, l, RVL_LORA_Q, c->xb, xb_stride, nb, c->q, q_dim);
    LORA(c, l, RVL_LORA_K, c->xb, xb_stride, nb, c->k, kv_dim);
    LORA(c, l, RVL_LORA_V, c->xb, xb_stride, nb, c->v, kv_dim);
    if (hp->block.qkv_bias || hp->block.qk_norm) {
        const uint64_t t0 = prof_start(c);
        for (uint32_t t = 0; t < nb; t++)
            qkv_pre(c, l, c->q + (size_t)t * q_dim, c->k + (size_t)t * kv_dim,
                    c->v + (size_t)t * kv_dim);
        if (hp->block.qk_norm) /* else biases alone: RVL_PROF_OTHER's */
            prof_end(c, RVL_PROF_NORM, t0);
    }
    const uint64_t t0 = prof_start(c);
    for (uint32_t t = 0; t < nb; t++)
        qkv_rope(c, c->q + (size_t)t * q_dim, c->k + (size_t)t * kv_dim, c->row_pos[t],
                 own_rope);
    prof_end(c, RVL_PROF_ROPE, t0);
    TRACE("Qcur", l, c->q, q_dim, q_dim);
    TRACE("Kcur", l, c->k, kv_dim, kv_dim);
    TRACE("Vcur", l, c->v, kv_dim, kv_dim);
    /* keys after RoPE into each sequence's cache, then attention over its pages */
    attend_segments(c, l, c->k, c->v, q_dim, kv_dim, xb_stride);
    TRACE("kqv_out", l, c->xb, xb_stride, q_dim);
    mm_run(c, RVL_PROF_MM_ATTN_OUT, c->xo, dim, &L->wo, c->xb, xb_stride, nb);
    LORA(c, l, RVL_LORA_O, c->xb, xb_stride, nb, c->xo, dim);
    if (hp->block.attn_out_bias)
        add_bias(c->xo, dim, c->attn_ob + (size_t)l * dim, dim, nb);
}

/* MLA's expanded form (RUVLLM_MLA=expanded, prompt batches; the
 * reference the absorbed form is checked against, as transformers and
 * llama.cpp's non-absorbed graph compute it): every cached latent c_t is
 * expanded per head into a key [k_b_h^T c_t; k_pe_t] and a value v_b_h c_t,
 * and each query [q_nope; RoPE(q_pe)] attends over them; the heads' values
 * into mla_v. Plain loops over dequantized k_b/v_b: n_ctx x n_head x
 * (k_dim + v_dim) x kv_rank per chunk. */
static void mla_expanded(rvl_forward *c, uint32_t l, const fw_seg *g)
{
    const uint32_t nb = g->n, pos0 = g->pos0;
    const rvl_hparams *hp = &c->m->hp;
    const rvl_layer *L = &c->m->layers[l];
    const uint32_t nh = hp->n_head, hd = hp->head_dim, R = hp->mla_kv_rank;
    const uint32_t rd = hp->rope_dim, kd = hp->mla_k_dim, nope = kd - rd, vd = hp->mla_v_dim;
    const uint32_t n = pos0 + nb;
    const size_t q_dim = (size_t)nh * hd, qk = (size_t)nh * kd;
    float *lat = c->mla_lat, *kn = c->mla_kn, *vv = c->mla_vv, *p = c->mla_p;

    for (uint32_t pg = 0; pg * RVL_KVQ_PAGE < n; pg++) /* the cached rows, decoded */
        rvl_kvcache_read_page(g->kv, l, 0, pg, 0, lat + (size_t)pg * RVL_KVQ_PAGE * hd);
    for (uint32_t h = 0; h < nh; h++) {
        for (uint32_t r = 0; r < R; r++) /* k_b_h: kv_rank rows of nope */
            L->k_b[h].kf->dequantize((const char *)L->k_b[h].data + r * L->k_b[h].row_bytes,
                                     c->mla_kbf + (size_t)r * nope, nope);
        for (uint32_t j = 0; j < vd; j++) /* v_b_h: v_dim rows of kv_rank */
            L->v_b[h].kf->dequantize((const char *)L->v_b[h].data + j * L->v_b[h].row_bytes,
                                     c->mla_vbf + (size_t)j * R, R);
        for (uint32_t t = 0; t < n; t++) {
            const float *ct = lat + (size_t)t * hd;
            float *k = kn + (size_t)t * nope, *v = vv + (size_t)t * vd;
            for (uint32_t j = 0; j < nope; j++)
                k[j] = 0;
            for (uint32_t r = 0; r < R; r++)
                for (uint32_t j = 0; j < nope; j++)
                    k[j] += ct[r] * c->mla_kbf[(size_t)r * nope + j];
            for (uint32_t j = 0; j < vd; j++) {
                float d = 0;
                for (uint32_t r = 0; r < R; r++)
                    d += c->mla_vbf[(size_t)j * R + r] * ct[r];
                v[j] = d;
            }
        }
        for (uint32_t i = 0; i < nb; i++) {
            const size_t row = (size_t)g->row0 + i;
            const float *qn = c->mla_q + row * qk + (size_t)h * kd;
            const float *qp = c->q + row * q_dim + (size_t)h * hd + R; /* after RoPE */
            const uint32_t m = pos0 + i + 1; /* causal */
            float mx = -INFINITY;
            for (uint32_t t = 0; t < m; t++) {
                float s = 0;
                for (uint32_t j = 0; j < nope; j++)
                    s += qn[j] * kn[(size_t)t * nope + j];
                for (uint32_t j = 0; j < rd; j++)
                    s += qp[j] * lat[(size_t)t * hd + R + j];
                p[t] = s * c->kq_scale;
                mx = p[t] > mx ? p[t] : mx;
            }
            double sum = 0;
            for (uint32_t t = 0; t < m; t++)
                sum += p[t] = expf(p[t] - mx);
            float *o = c->mla_v + row * nh * vd + (size_t)h * vd;
            for (uint32_t j = 0; j < vd; j++)
                o[j] = 0;
            for (uint32_t t = 0; t < m; t++)
                for (uint32_t j = 0; j < vd; j++)
                    o[j] += (float)(p[t] / sum) * vv[(size_t)t * vd + j];
        }
    }
}

/* Multi-head latent attention (DeepSeek-V2/V3, block.mla) of layer l on
 * the nb normed rows of xb, into xo, in the absorbed form for prompts
 * and decode alike: per token the cache holds one row of head_dim =
 * kv_rank + rope_dim, the normalized latent c and the shared key k_pe
 * after RoPE, and its values are that same row (kvcache.h v_is_k). A
 * head's query [q_nope; q_pe] becomes [k_b_h q_nope; RoPE(q_pe)], so that
 * its score against a row is q_nope . (k_b_h^T c) + q_pe . k_pe, the
 * expanded form's; the first kv_rank floats of its output, sum_t p_t c_t,
 * are mapped back by v_b_h (and the rest, sum_t p_t k_pe_t, dropped)
 * before the output projection. */
static void mla_attention(rvl_forward *c, uint32_t l, uint32_t nb, size_t xb_stride)
{
    const rvl_hparams *hp = &c->m->hp;
    const rvl_layer *L = &c->m->layers[l];
    const uint32_t nh = hp->n_head, hd = hp->head_dim, R = hp->mla_kv_rank;
    const uint32_t rd = hp->rope_dim, kd = hp->mla_k_dim, nope = kd - rd, vd = hp->mla_v_dim;
    const size_t q_dim = (size_t)nh * hd, qk = (size_t)nh * kd, vo = (size_t)nh * vd;
    const size_t half = rd / 2;
    const float *norms = c->mla_norm + (size_t)l * (hp->mla_q_rank + R);

    /* queries: through the low-rank bottleneck and its norm, or attn_q */
    if (hp->mla_q_rank) {
        mm_run(c, RVL_PROF_MM_QKV, c->mla_qa, hp->mla_q_rank, &L->wq_a, c->xb, xb_stride, nb);
        const uint64_t t0 = prof_start(c);
        rvl_ops_norm_rows(c->pool, c->mla_qa, hp->mla_q_rank, c->mla_qa, hp->mla_q_rank, norms,
                          hp->mla_q_rank, nb, hp->rms_eps);
        prof_end(c, RVL_PROF_NORM, t0);
        mm_run(c, RVL_PROF_MM_QKV, c->mla_q, qk, &L->wq_b, c->mla_qa, hp->mla_q_rank, nb);
    } else {
        mm_run(c, RVL_PROF_MM_QKV, c->mla_q, qk, &L->wq, c->xb, xb_stride, nb);
    }
    /* the latent and the shared RoPE key: the cache's rows, in c->k */
    mm_run(c, RVL_PROF_MM_QKV, c->k, hd, &L->wkv_a, c->xb, xb_stride, nb);
    uint64_t t0 = prof_start(c);
    for (uint32_t t = 0; t < nb; t++) {
        float *k = c->k + (size_t)t * hd;
        const float *cs = c->rope_cos + (size_t)c->row_pos[t] * half;
        const float *sn = c->rope_sin + (size_t)c->row_pos[t] * half;
        rmsnorm_f32_ref(k, k, norms + hp->mla_q_rank, R, hp->rms_eps);
        rope_f32_ref(k + R, 1, hd, rd, cs, sn, hp->rope_type == RVL_ROPE_NEOX);
    }
    prof_end(c, RVL_PROF_ROPE, t0); /* the latent's norm with its key's RoPE */
    /* each head's query absorbed: k_b_h q_nope into the first kv_rank dims */
    for (uint32_t h = 0; h < nh; h++)
        mm_run(c, RVL_PROF_MM_QKV, c->q + (size_t)h * hd, q_dim, &L->k_b[h],
               c->mla_q + (size_t)h * kd, qk, nb);
    t0 = prof_start(c);
    for (uint32_t t = 0; t < nb; t++) {
        float *q = c->q + (size_t)t * q_dim;
        const float *cs = c->rope_cos + (size_t)c->row_pos[t] * half;
        const float *sn = c->rope_sin + (size_t)c->row_pos[t] * half;
        for (uint32_t h = 0; h < nh; h++)
            memcpy(q + (size_t)h * hd + R, c->mla_q + (size_t)t * qk + (size_t)h * kd + nope,
                   rd * sizeof *q);
        rope_f32_ref(q + R, nh, hd, rd, cs, sn, hp->rope_type == RVL_ROPE_NEOX);
    }
    prof_end(c, RVL_PROF_ROPE, t0);
    attend_segments(c, l, c->k, c->k, q_dim, hd, xb_stride);
    /* each head's latent output through v_b_h, over every row at once (or
     * the rows of the sequences the expanded form did not run) */
    for (uint32_t i = 0; i < (c->mla_exp ? c->n_segs : 1); i++) {
        const fw_seg *g = &c->segs[i];
        const uint32_t r0 = c->mla_exp ? g->row0 : 0, n = c->mla_exp ? g->n : nb;
        if (c->mla_exp && g->n > 1)
            continue;
        for (uint32_t h = 0; h < nh; h++)
            mm_run(c, RVL_PROF_MM_ATTN_OUT, c->mla_v + (size_t)r0 * vo + (size_t)h * vd, vo,
                   &L->v_b[h], c->xb + (size_t)r0 * xb_stride + (size_t)h * hd, xb_stride, n);
    }
    mm_run(c, RVL_PROF_MM_ATTN_OUT, c->xo, hp->n_embd, &L->wo, c->mla_v, vo, nb);
}

/* ====================================================================
 * One chunk of nb tokens through the model. `logits`: where the logits
 * of every token go (vocab floats apart), or NULL for only the last
 * token's into c->logits (want_last).
 * ==================================================================== */

static bool forward_chunk(rvl_forward *c, const int32_t *tokens, uint32_t nb, uint32_t pos0,
                          float *logits, bool want_last)
{
    const rvl_model *m = c->m;
    const rvl_hparams *hp = &m->hp;
    const rvl_block *B = &hp->block;
    const uint32_t dim = hp->n_embd, hd = hp->head_dim;
    const uint32_t q_dim = hp->n_head * hd, ff = hp->n_ff;
    const size_t xb_stride = dim > q_dim ? dim : q_dim;

    /* embedding rows, whatever their format (times embd_scale) */
    uint64_t t0 = prof_start(c);
    for (uint32_t t = 0; t < nb; t++)
        m->tok_embd.kf->dequantize((const char *)m->tok_embd.data +
                                       (uint64_t)tokens[t] * m->tok_embd.row_bytes,
                                   c->x + (size_t)t * dim, dim);
    if (B->embd_scale)
        for (size_t i = 0; i < (size_t)nb * dim; i++)
            c->x[i] *= B->embd_scale;
    prof_end(c, RVL_PROF_EMBED, t0);

    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const rvl_layer *L = &m->layers[l];
        /* a windowed layer's RoPE (swa_rope_base), where it has its own */
        const bool own_rope = c->swa_cos && rvl_family_layer_kind(B, l) == RVL_LAYER_WINDOW;

        /* attention block: pre-attention norm (norm_pre_attn) */
        t0 = prof_start(c);
        rvl_ops_norm_rows(c->pool, c->xb, xb_stride, c->x, dim,
                          c->norm_w + (size_t)(2 * l) * dim, dim, nb, hp->rms_eps);
        prof_end(c, RVL_PROF_NORM, t0);
        TRACE("attn_norm", l, c->xb, xb_stride, dim);
        if (B->mla)
            mla_attention(c, l, nb, xb_stride);
        else
            gqa_attention(c, l, nb, pos0, xb_stride, own_rope);
        TRACE("attn_out", l, c->xo, dim, dim);
        if (B->norm_post_attn) {
            t0 = prof_start(c);
            rvl_ops_norm_rows(c->pool, c->xo, dim, c->xo, dim, c->post_w + (size_t)(2 * l) * dim,
                              dim, nb, hp->rms_eps);
            prof_end(c, RVL_PROF_NORM, t0);
            TRACE("attn_post_norm", l, c->xo, dim, dim);
        }
        for (size_t i = 0; i < (size_t)nb * dim; i++)
            c->x[i] += c->xo[i];
        TRACE("ffn_inp", l, c->x, dim, dim);

        /* gated feed-forward block: pre-FFN norm (norm_pre_ffn), SiLU or GELU (act) */
        t0 = prof_start(c);
        rvl_ops_norm_rows(c->pool, c->xb, xb_stride, c->x, dim,
                          c->norm_w + (size_t)(2 * l + 1) * dim, dim, nb, hp->rms_eps);
        prof_end(c, RVL_PROF_NORM, t0);
        TRACE("ffn_norm", l, c->xb, xb_stride, dim);
        if (B->moe && l >= B->moe_dense_lead) {
            moe_ffn(c, l, nb, xb_stride);
            TRACE("ffn_moe_out", l, c->xo, dim, dim);
        } else {
            const rvl_weight *gu[2] = {&L->w_gate, &L->w_up};
            float *gu_out[2] = {c->hb, c->hb2};
            const size_t gu_stride[2] = {ff, ff};
            mm_shared(c, RVL_PROF_MM_FFN_GATE_UP, c->xb, xb_stride, nb, 2, gu, gu_out, gu_stride);
            LORA(c, l, RVL_LORA_GATE, c->xb, xb_stride, nb, c->hb, ff);
            LORA(c, l, RVL_LORA_UP, c->xb, xb_stride, nb, c->hb2, ff);
            TRACE("ffn_gate", l, c->hb, ff, ff);
            TRACE("ffn_up", l, c->hb2, ff, ff);
            t0 = prof_start(c);
            rvl_ops_glu_rows(c->pool, B->act, c->hb, c->hb2, ff, nb);
            prof_end(c, RVL_PROF_ACT, t0);
            TRACE(B->act == RVL_ACT_SILU ? "ffn_swiglu" : "ffn_geglu", l, c->hb, ff, ff);
            mm_run(c, RVL_PROF_MM_FFN_DOWN, c->xo, dim, &L->w_down, c->hb, ff, nb);
            LORA(c, l, RVL_LORA_DOWN, c->hb, ff, nb, c->xo, dim);
            TRACE("ffn_out", l, c->xo, dim, dim);
        }
        if (B->norm_post_ffn) {
            t0 = prof_start(c);
            rvl_ops_norm_rows(c->pool, c->xo, dim, c->xo, dim,
                              c->post_w + (size_t)(2 * l + 1) * dim, dim, nb, hp->rms_eps);
            prof_end(c, RVL_PROF_NORM, t0);
            TRACE("ffn_post_norm", l, c->xo, dim, dim);
        }
        for (size_t i = 0; i < (size_t)nb * dim; i++)
            c->x[i] += c->xo[i];
        TRACE("l_out", l, c->x, dim, dim);
    }

    /* a residual stream that overflowed (an absurd adapter scale) would
     * come out of the quantized matmuls as plausible-looking constant
     * logits: refuse it here, where it is still visible (nb x dim floats) */
    float nf = 0;
    for (size_t i = 0; i < (size_t)nb * dim; i++)
        nf += c->x[i] * 0.0f;   /* NaN once any value is NaN or infinite */
    if (isnan(nf))
        return false;

    const float *onorm = c->norm_w + (size_t)(2 * hp->n_layer) * dim;
    if (logits) {
        t0 = prof_start(c);
        rvl_ops_norm_rows(c->pool, c->xb, xb_stride, c->x, dim, onorm, dim, nb, hp->rms_eps);
        prof_end(c, RVL_PROF_NORM, t0);
        TRACE("result_norm", -1, c->xb, xb_stride, dim);
        mm_run(c, RVL_PROF_MM_OUTPUT, logits, hp->n_vocab, &m->output, c->xb, xb_stride, nb);
        if (B->final_softcap)
            softcap_f32_ref(logits, (int64_t)nb * hp->n_vocab, B->final_softcap);
    } else if (want_last) {
        /* each sequence's last row that wants its logits, in one matmul */
        uint32_t k = 0;
        t0 = prof_start(c);
        for (uint32_t i = 0; i < c->n_segs; i++)
            if (c->segs[i].logits)
                rmsnorm_f32_ref(c->xb + (size_t)k++ * xb_stride,
                                c->x + (size_t)(c->segs[i].row0 + c->segs[i].n - 1) * dim, onorm,
                                dim, hp->rms_eps);
        prof_end(c, RVL_PROF_NORM, t0);
        if (c->trace && k)
            c->trace(c->trace_ud, "result_norm", -1, pos0 + nb - 1, 1, c->xb, dim, dim);
        float *out = k == 1 ? NULL : c->seg_logits;
        for (uint32_t i = 0; k == 1 && i < c->n_segs; i++)
            if (c->segs[i].logits)
                out = c->segs[i].logits;
        if (k)
            mm_run(c, RVL_PROF_MM_OUTPUT, out, hp->n_vocab, &m->output, c->xb, xb_stride, k);
        if (k && B->final_softcap)
            softcap_f32_ref(out, (int64_t)k * hp->n_vocab, B->final_softcap);
        for (uint32_t i = 0, j = 0; k > 1 && i < c->n_segs; i++)
            if (c->segs[i].logits)
                memcpy(c->segs[i].logits, out + (size_t)j++ * hp->n_vocab,
                       hp->n_vocab * sizeof *out);
    }
    return true;
}

/* The chunk's rows as one sequence: nb rows at positions pos0.. over kv. */
static void one_segment(rvl_forward *c, rvl_kvcache *kv, uint32_t pos0, uint32_t nb,
                        float *logits)
{
    c->segs[0] = (fw_seg){kv, pos0, 0, nb, logits};
    c->n_segs = 1;
    for (uint32_t t = 0; t < nb; t++)
        c->row_pos[t] = pos0 + t;
}

/* ====================================================================
 * Session: rvl_decode's chunks (the context, lib/engine/ctx.c, has
 * checked the tokens)
 * ==================================================================== */

/* the table's handle is this file's session */
static rvl_forward *fw(rvl_backend *b) { return (rvl_forward *)b; }
static const rvl_forward *cfw(const rvl_backend *b) { return (const rvl_forward *)b; }

static int decode_chunks(rvl_forward *c, const int32_t *tokens, uint32_t n, const float **logits)
{
    const rvl_hparams *hp = &c->m->hp;

    for (uint32_t i = 0; i < n; i += UBATCH) {
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        uint32_t nb = n - i < UBATCH ? n - i : UBATCH;
        rvl_kvcache_begin(c->kv, nb);
        one_segment(c, c->kv, c->pos, nb, i + nb == n && !c->all_logits ? c->logits : NULL);
        const bool finite = forward_chunk(c, tokens + i, nb, c->pos,
                                          c->all_logits ? c->logits + (size_t)i * hp->n_vocab
                                                        : NULL, i + nb == n);
        rvl_kvcache_set_ids(c->kv, c->pos, tokens + i, nb); /* names full pages for reuse */
        const uint64_t t0 = prof_start(c);
        rvl_kvcache_commit(c->kv, nb); /* ages pages past a tier boundary */
        prof_end(c, RVL_PROF_KV_WRITE, t0);
        c->pos += nb;
        if (!finite)
            return rvl_seterr(RVL_ERANGE, "the model's activations are not finite (NaN or "
                              "infinity) at position %u: its arithmetic overflowed (an adapter "
                              "scale or a RoPE setting too large?)", c->pos - nb);
    }
    if (logits)
        *logits = c->logits;
    return 0;
}

static int cpu_decode(rvl_backend *b, const int32_t *tokens, uint32_t n, const float **logits)
{
    rvl_forward *c = fw(b);
    if (!c->prof)
        return decode_chunks(c, tokens, n, logits);
    const uint64_t t0 = prof_now(), ops0 = prof_sum(c->prof);
    const int rc = decode_chunks(c, tokens, n, logits);
    prof_rest(c, t0, ops0);
    return rc;
}

/* ====================================================================
 * Open and close
 * ==================================================================== */

/* A vector weight (norm, bias) as ne0 floats. */
static void dequant_vec(const rvl_weight *w, float *dst)
{
    w->kf->dequantize(w->data, dst, (int64_t)w->ne0);
}

/* accepts NULL */
static void forward_free(rvl_forward *c)
{
    if (!c)
        return;
    rvl_pool_close(c->pool);
    rvl_kvcache_close(c->kv);
    for (uint32_t i = 0; c->seq_kv && i < c->n_seq; i++)
        rvl_kvcache_close(c->seq_kv[i]);
    rvl_kvstore_close(c->seq_store);
    free(c->seq_kv);
    free(c->seq_pos);
    free(c->it_tok);
    free(c->it_n);
    free(c->seq_logits);
    free(c->seg_logits);
    free(c->seq_tok);
    free(c->kv_win);
    free(c->rope_cos);
    free(c->rope_sin);
    free(c->swa_cos);
    free(c->swa_sin);
    free(c->x);
    free(c->xb);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->hb);
    free(c->hb2);
    free(c->xo);
    free(c->logits);
    free(c->norm_w);
    free(c->post_w);
    free(c->bias);
    free(c->qk_norm);
    free(c->moe_p);
    free(c->moe_sel);
    free(c->moe_w);
    free(c->moe_x);
    free(c->moe_h);
    free(c->moe_h2);
    free(c->moe_act);
    free(c->moe_act2);
    free(c->moe_actd);
    free(c->moe_cnt);
    free(c->moe_first);
    free(c->moe_grp);
    free(c->moe_scratch);
    free(c->moe_o);
    free(c->moe_idx);
    free(c->moe_idxw);
    free(c->sh_router);
    free(c->moe_s);
    free(c->moe_rb);
    free(c->moe_sb);
    free(c->moe_eb);
    free(c->attn_ob);
    free(c->mla_qa);
    free(c->mla_q);
    free(c->mla_v);
    free(c->mla_norm);
    free(c->mla_lat);
    free(c->mla_kn);
    free(c->mla_vv);
    free(c->mla_p);
    free(c->mla_kbf);
    free(c->mla_vbf);
    free(c->mm.act);
    free(c);
}

/* p: the context's parameters, n_ctx and n_batch resolved */
static int cpu_open(rvl_backend **out, const rvl_model *m, const rvl_ctx_params *p)
{
    const rvl_hparams *hp = &m->hp;
    rvl_forward *c;
    int rc;

    *out = NULL;
    c = calloc(1, sizeof *c);
    if (!c)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    c->m = m;
    c->n_ctx = p->n_ctx;
    c->all_logits = p->all_logits;
    c->n_batch = p->n_batch;
    c->prof = p->profile;
    if ((rc = rvl_pool_open(&c->pool, (int)p->n_threads)) < 0) {
        free(c);
        return rc;
    }
    const int nth = rvl_pool_size(c->pool);
    c->kv_type_k = c->kv_type_v = p->kv_type;
    if (p->kv_split) {
        c->kv_type_k = p->kv_type_k;
        c->kv_type_v = p->kv_type_v;
    }
    /* the cache's tier formats (kvcache.h) */
    rvl_kvcache_params kp = {.n_layer = hp->n_layer, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
                         .head_dim = hp->head_dim, .n_ctx = c->n_ctx, .q_f16 = 1};
    const rvl_kv_type cold = p->kv_cold == RVL_KV_Q4 ? RVL_KV_Q4 : RVL_KV_TQ4;
    if (p->kv_cold && p->kv_cold != RVL_KV_Q4 && p->kv_cold != RVL_KV_TQ4) {
        forward_free(c);
        return rvl_seterr(RVL_EINVAL, "the cold KV tier is q4 or tq4, not %s",
                          rvl_kv_type_name(p->kv_cold) ? rvl_kv_type_name(p->kv_cold) : "unknown");
    }
    const int tk = rvl_kvcache_type_formats(c->kv_type_k, cold, kp.fmt_k);
    const int tv = rvl_kvcache_type_formats(c->kv_type_v, cold, kp.fmt_v);
    if (tk < 0 || tv < 0) {
        int kt = tk < 0 ? (int)c->kv_type_k : (int)c->kv_type_v;
        forward_free(c);
        return rvl_seterr(RVL_EINVAL, "unknown KV cache type %d", kt);
    }
    if (hp->block.mla && (tk || tv) && !p->kv_cold) {
        /* MLA's latent cache has no 4-bit tier (its values are its keys):
         * tiered is f16, then q8 for the warm and the cold tiers */
        kp.fmt_k[2] = kp.fmt_k[1];
        kp.fmt_v[2] = kp.fmt_v[1];
    }
    if (kp.fmt_k[0] == RVL_KVF_F32 || kp.fmt_v[0] == RVL_KVF_F32) /* one hot-tier type */
        kp.fmt_k[0] = kp.fmt_v[0] = RVL_KVF_F32;
    if (tk || tv) {
        kp.hot = p->kv_hot ? p->kv_hot : 256;
        kp.warm = p->kv_warm ? p->kv_warm : 2048;
    } else if (kp.fmt_k[1] != kp.fmt_k[0] || kp.fmt_v[1] != kp.fmt_v[0]) {
        kp.hot = 0; /* a fixed quantized format: all but the page being filled */
        kp.warm = RVL_KVC_UNBOUNDED;
    } else {
        kp.hot = kp.warm = RVL_KVC_UNBOUNDED;
    }
    /* attention sinks (kvcache.h): a quantized cache keeps its first page in f16 */
    kp.sink = kp.hot == RVL_KVC_UNBOUNDED ? 0 : RVL_KVQ_PAGE;
    rvl_hparams rh; /* with the context's RoPE overrides */
    if ((rc = rvl_rope_hparams(hp, p, &rh)) < 0) {
        forward_free(c);
        return rc;
    }

    const size_t dim = hp->n_embd, hd = hp->head_dim;
    size_t ff = hp->n_ff; /* the widest FFN */
    if (hp->block.moe) {
        ff = hp->n_ff_exp > ff ? hp->n_ff_exp : ff;
        if (hp->block.moe_shared && hp->n_ff_shexp > ff)
            ff = hp->n_ff_shexp;
    }
    const size_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    const size_t half = hp->rope_dim / 2;
    size_t xb = dim > q_dim ? dim : q_dim;
    size_t maxn = dim > ff ? dim : ff;
    if (q_dim > maxn)
        maxn = q_dim;
    /* activation rows: at most 4 bytes per element (f32) plus a row header */
    c->mm.act_stride = (maxn * 4 + 64 + 63) & ~(size_t)63;

    c->rope_cos = malloc((size_t)c->n_ctx * half * sizeof(float));
    c->rope_sin = malloc((size_t)c->n_ctx * half * sizeof(float));
    c->x = calloc(UBATCH * dim, sizeof(float));
    c->xb = calloc(UBATCH * xb, sizeof(float));
    c->q = calloc(UBATCH * q_dim, sizeof(float));
    c->k = calloc(UBATCH * kv_dim, sizeof(float));
    c->v = calloc(UBATCH * kv_dim, sizeof(float));
    c->hb = calloc(UBATCH * ff, sizeof(float));
    c->hb2 = calloc(UBATCH * ff, sizeof(float));
    const bool moe = hp->block.moe;
    if (moe) {
        const size_t ne = hp->n_expert, nu = hp->n_expert_used;
        c->moe_p = calloc(UBATCH * ne, sizeof(float));
        c->moe_sel = calloc(UBATCH * nu, sizeof(int32_t));
        c->moe_w = calloc(UBATCH * nu, sizeof(float));
        c->moe_x = calloc(UBATCH * nu * dim, sizeof(float));
        c->moe_o = calloc(UBATCH * nu * dim, sizeof(float));
        c->moe_h = calloc(UBATCH * nu * hp->n_ff_exp, sizeof(float));
        c->moe_h2 = calloc(UBATCH * nu * hp->n_ff_exp, sizeof(float));
        c->moe_cnt = calloc(ne, sizeof(uint32_t));
        c->moe_first = calloc(ne, sizeof(uint32_t));
        c->moe_grp = calloc(2 * RVL_MOE_GROUP, sizeof *c->moe_grp);
        c->moe_scratch = malloc(rvl_matmul_grouped_scratch(2 * RVL_MOE_GROUP));
        c->moe_idx = calloc(UBATCH * nu, sizeof(uint32_t));
        c->moe_idxw = calloc(UBATCH * nu, sizeof(float));
        if (hp->block.moe_shared_gate)
            c->sh_router = calloc((size_t)hp->n_layer * dim, sizeof(float));
        c->moe_s = calloc(ne, sizeof(float));
        if (hp->block.moe_bias) {
            c->moe_rb = calloc((size_t)hp->n_layer * ne, sizeof(float));
            c->moe_eb = calloc((size_t)hp->n_layer * ne * (2 * hp->n_ff_exp + dim), sizeof(float));
        }
        if (hp->block.moe_sel_bias)
            c->moe_sb = calloc((size_t)hp->n_layer * ne, sizeof(float));
        if (!c->moe_s || (hp->block.moe_bias && (!c->moe_rb || !c->moe_eb)) ||
            (hp->block.moe_sel_bias && !c->moe_sb)) {
            forward_free(c);
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        }
    }
    if (hp->block.attn_out_bias && !(c->attn_ob = calloc((size_t)hp->n_layer * dim, sizeof(float)))) {
        forward_free(c);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    if (hp->block.mla) {
        c->mla_qa = calloc(UBATCH * (size_t)(hp->mla_q_rank ? hp->mla_q_rank : 1), sizeof(float));
        c->mla_q = calloc(UBATCH * (size_t)hp->n_head * hp->mla_k_dim, sizeof(float));
        c->mla_v = calloc(UBATCH * (size_t)hp->n_head * hp->mla_v_dim, sizeof(float));
        c->mla_norm = calloc((size_t)hp->n_layer * (hp->mla_q_rank + hp->mla_kv_rank),
                             sizeof(float));
        const char *mode = getenv("RUVLLM_MLA");
        c->mla_exp = mode && strcmp(mode, "expanded") == 0;
        if (c->mla_exp) {
            const size_t nc = c->n_ctx + RVL_KVQ_PAGE, R = hp->mla_kv_rank;
            const size_t nope = hp->mla_k_dim - hp->rope_dim;
            c->mla_lat = malloc(nc * hp->head_dim * sizeof(float));
            c->mla_kn = malloc(nc * nope * sizeof(float));
            c->mla_vv = malloc(nc * hp->mla_v_dim * sizeof(float));
            c->mla_p = malloc(nc * sizeof(float));
            c->mla_kbf = malloc(R * nope * sizeof(float));
            c->mla_vbf = malloc(R * hp->mla_v_dim * sizeof(float));
        }
        if (!c->mla_qa || !c->mla_q || !c->mla_v || !c->mla_norm ||
            (c->mla_exp && (!c->mla_lat || !c->mla_kn || !c->mla_vv || !c->mla_p ||
                            !c->mla_kbf || !c->mla_vbf))) {
            forward_free(c);
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        }
    }
    c->xo = calloc(UBATCH * dim, sizeof(float));
    c->logits = calloc((size_t)c->n_batch * hp->n_vocab, sizeof(float));
    c->norm_w = calloc((2 * (size_t)hp->n_layer + 1) * dim, sizeof(float));
    const bool post = hp->block.norm_post_attn || hp->block.norm_post_ffn;
    if (post)
        c->post_w = calloc(2 * (size_t)hp->n_layer * dim, sizeof(float));
    /* windowed layers on their own RoPE base, without the file's scaling */
    const bool swa_rope = hp->block.swa_window && hp->block.swa_rope_base;
    if (swa_rope) {
        c->swa_cos = malloc((size_t)c->n_ctx * half * sizeof(float));
        c->swa_sin = malloc((size_t)c->n_ctx * half * sizeof(float));
    }
    if (hp->block.qkv_bias)
        c->bias = calloc((size_t)hp->n_layer * (q_dim + 2 * kv_dim), sizeof(float));
    if (hp->block.qk_norm)
        c->qk_norm = calloc((size_t)hp->n_layer * 2 * hd, sizeof(float));
    c->mm.pool = c->pool;
    c->mm.act = malloc(UBATCH * c->mm.act_stride);
    if (moe) {
        const size_t ab = UBATCH * (size_t)hp->n_expert_used * c->mm.act_stride;
        c->moe_act = malloc(ab);
        c->moe_act2 = malloc(ab);
        c->moe_actd = malloc(ab);
    }
    if (!c->rope_cos || !c->rope_sin || !c->x ||
        !c->xb || !c->q || !c->k || !c->v || !c->hb || !c->hb2 || !c->xo || !c->logits ||
        !c->norm_w || (post && !c->post_w) || (swa_rope && (!c->swa_cos || !c->swa_sin)) ||
        (hp->block.qkv_bias && !c->bias) ||
        (hp->block.qk_norm && !c->qk_norm) || !c->mm.act ||
        (moe && (!c->moe_p || !c->moe_sel || !c->moe_w || !c->moe_x || !c->moe_o ||
                 !c->moe_idx || !c->moe_idxw || (hp->block.moe_shared_gate && !c->sh_router) ||
                 !c->moe_h || !c->moe_h2 || !c->moe_cnt || !c->moe_first || !c->moe_grp ||
                 !c->moe_scratch || !c->moe_act || !c->moe_act2 || !c->moe_actd))) {
        uint32_t n = c->n_ctx;
        forward_free(c);
        return rvl_seterr(RVL_ENOMEM, "out of memory for a context of %u tokens", n);
    }

    /* RoPE tables once per context; the RoPE mscale goes into the scale.
     * LongRoPE's divisors: the long ones for a context past the original. */
    float attn_mul;
    const rvl_weight *div = m->rope_freqs.present ? &m->rope_freqs
                            : !m->rope_long.present ? NULL
                            : c->n_ctx > hp->rope_orig_ctx ? &m->rope_long : &m->rope_short;
    rvl_rope_tables(&rh, div ? div->data : NULL, c->n_ctx, c->rope_cos, c->rope_sin, &attn_mul);
    if (swa_rope) {
        rvl_hparams sh = rh;
        float unused;
        sh.rope_base = hp->block.swa_rope_base;
        sh.rope_scaling = RVL_ROPE_SCALING_NONE;
        sh.yarn_ext_factor = 0;
        rvl_rope_tables(&sh, NULL, c->n_ctx, c->swa_cos, c->swa_sin, &unused);
    }
    const float q_scale = hp->block.q_scale ? hp->block.q_scale : 1.0f / sqrtf((float)hp->head_dim);
    c->rot_mscale = 1.0f;
    if (hp->rope_dim < hp->head_dim && attn_mul != 1.0f) {
        c->rot_mscale = sqrtf(attn_mul);
        attn_mul = 1.0f;
    }
    c->kq_scale = attn_mul * q_scale;
    if (hp->block.mla) {
        /* DeepSeek's YaRN: the rotation unscaled, the softmax scale
         * mscale^2 / sqrt(k_dim) with mscale = attn_factor (1 + 0.1
         * mscale_all_dim ln factor), the file's yarn_log_multiplier being
         * 0.1 mscale_all_dim (llama.cpp's converter; transformers'
         * softmax_scale) */
        float ms = hp->rope_attn_factor;
        if (rh.rope_scaling == RVL_ROPE_SCALING_YARN && rh.rope_factor > 1)
            ms *= 1.0f + hp->yarn_log_mul * logf(rh.rope_factor);
        c->rot_mscale = 1.0f;
        c->kq_scale = ms * ms / sqrtf((float)hp->mla_k_dim);
        kp.v_is_k = true;
        kp.rope_off = hp->mla_kv_rank;
    }
    kp.scale = c->kq_scale;
    kp.softcap = hp->block.attn_softcap;
    /* the windowed layers' windows (rvl_family_layer_kind) */
    uint32_t *win = NULL;
    if (hp->block.swa_window) {
        win = calloc(hp->n_layer, sizeof *win);
        if (!win) {
            forward_free(c);
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        }
        for (uint32_t l = 0; l < hp->n_layer; l++)
            if (rvl_family_layer_kind(&hp->block, l) == RVL_LAYER_WINDOW)
                win[l] = hp->block.swa_window;
        kp.window = win;
    }
    /* gpt-oss's sinks: one logit per layer and head */
    float *sinks = NULL;
    if (hp->block.attn_sinks) {
        sinks = calloc((size_t)hp->n_layer * hp->n_head, sizeof *sinks);
        if (!sinks) {
            free(win);
            forward_free(c);
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        }
        for (uint32_t l = 0; l < hp->n_layer; l++)
            dequant_vec(&m->layers[l].sinks, sinks + (size_t)l * hp->n_head);
        kp.sinks = sinks;
    }
    rc = rvl_kvcache_open(&c->kv, &kp, nth);
    c->kv_win = win; /* the cache copied it; rvl_batch's caches are opened with it too */
    free(sinks);
    if (rc < 0) {
        forward_free(c);
        return rc;
    }

    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const rvl_layer *L = &m->layers[l];
        dequant_vec(&L->attn_norm, c->norm_w + (size_t)(2 * l) * dim);
        dequant_vec(&L->ffn_norm, c->norm_w + (size_t)(2 * l + 1) * dim);
        if (c->bias) {
            float *b = c->bias + (size_t)l * (q_dim + 2 * kv_dim);
            dequant_vec(&L->bq, b);
            dequant_vec(&L->bk, b + q_dim);
            dequant_vec(&L->bv, b + q_dim + kv_dim);
        }
        if (c->qk_norm) {
            dequant_vec(&L->q_norm, c->qk_norm + (size_t)l * 2 * hd);
            dequant_vec(&L->k_norm, c->qk_norm + (size_t)l * 2 * hd + hd);
        }
        if (hp->block.norm_post_attn)
            dequant_vec(&L->post_attn_norm, c->post_w + (size_t)(2 * l) * dim);
        if (hp->block.norm_post_ffn)
            dequant_vec(&L->post_ffn_norm, c->post_w + (size_t)(2 * l + 1) * dim);
        if (c->attn_ob)
            dequant_vec(&L->bo, c->attn_ob + (size_t)l * dim);
        if (c->mla_norm) {
            float *g = c->mla_norm + (size_t)l * (hp->mla_q_rank + hp->mla_kv_rank);
            if (hp->mla_q_rank)
                dequant_vec(&L->q_a_norm, g);
            dequant_vec(&L->kv_a_norm, g + hp->mla_q_rank);
        }
        if (!L->router.present)
            continue; /* a dense layer */
        const size_t ne = hp->n_expert, eb = 2 * (size_t)hp->n_ff_exp + dim;
        if (c->moe_rb)
            dequant_vec(&L->router_b, c->moe_rb + (size_t)l * ne);
        if (c->moe_sb)
            dequant_vec(&L->sel_bias, c->moe_sb + (size_t)l * ne);
        for (size_t e = 0; c->moe_eb && e < ne; e++)
            for (int k = 0; k < 3; k++) { /* row e of each bias matrix */
                const rvl_weight *w = &L->exps_b[k];
                w->kf->dequantize((const char *)w->data + e * w->row_bytes,
                                  c->moe_eb + ((size_t)l * ne + e) * eb +
                                      (size_t)k * hp->n_ff_exp,
                                  (int64_t)w->ne0);
            }
    }
    for (uint32_t l = 0; c->sh_router && l < hp->n_layer; l++)
        if (m->layers[l].sh_router.present)
            dequant_vec(&m->layers[l].sh_router, c->sh_router + (size_t)l * dim);
    dequant_vec(&m->output_norm, c->norm_w + (size_t)(2 * hp->n_layer) * dim);
    *out = (rvl_backend *)c;
    return 0;
}

static void cpu_close(rvl_backend *b) { forward_free(fw(b)); }

/* ====================================================================
 * The cache: position, truncation, reuse, shift, random fills
 * ==================================================================== */

static uint32_t cpu_pos(const rvl_backend *b) { return cfw(b)->pos; }

static void cpu_reset(rvl_backend *b)
{
    rvl_forward *c = fw(b);
    c->pos = 0;
    rvl_kvcache_reset(c->kv);
}

static int cpu_truncate(rvl_backend *b, uint32_t pos)
{
    rvl_forward *c = fw(b);
    int rc = rvl_kvcache_truncate(c->kv, pos);
    if (rc == 0)
        c->pos = pos;
    return rc;
}

/* what the cache holds or held in recently dropped pages (kvcache.h) */
static uint32_t cpu_reuse(rvl_backend *b, const int32_t *ids, uint32_t n_max)
{
    rvl_forward *c = fw(b);
    c->pos = rvl_kvcache_reuse(c->kv, ids, n_max);
    return c->pos;
}

static int cpu_shift(rvl_backend *b, uint32_t keep, uint32_t n_discard)
{
    rvl_forward *c = fw(b);
    const rvl_hparams *hp = &c->m->hp;
    /* the angles of a distance of n_discard positions (row 0 when no key
     * moves: everything after keep is dropped); the windowed layers' own
     * where they have them */
    const size_t half = hp->rope_dim / 2;
    const size_t row = n_discard < c->n_ctx ? n_discard : 0;
    int rc = rvl_kvcache_shift(c->kv, keep, n_discard, c->rope_cos + row * half,
                           c->rope_sin + row * half, c->swa_cos ? c->swa_cos + row * half : NULL,
                           c->swa_sin ? c->swa_sin + row * half : NULL, hp->rope_dim,
                           hp->rope_type == RVL_ROPE_NEOX);
    if (rc == 0)
        c->pos -= n_discard;
    return rc;
}

static double cpu_kv_token_bytes(const rvl_backend *b, int tier)
{
    return rvl_kvcache_tier_token_bytes(cfw(b)->kv, tier);
}

static int cpu_fill_random(rvl_backend *b, uint32_t n, uint64_t seed)
{
    rvl_forward *c = fw(b);
    const rvl_hparams *hp = &c->m->hp;
    const uint32_t kv_dim = hp->n_head_kv * hp->head_dim;
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (uint32_t i = 0; i < n; i += UBATCH) {
        const uint32_t nb = n - i < UBATCH ? n - i : UBATCH;
        rvl_kvcache_begin(c->kv, nb);
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            for (size_t e = 0; e < (size_t)nb * kv_dim; e++) {
                /* Box-Muller on two splitmix64 draws */
                uint64_t a = (s += 0x9e3779b97f4a7c15ull), b = (s += 0x9e3779b97f4a7c15ull);
                a = (a ^ (a >> 30)) * 0xbf58476d1ce4e5b9ull;
                a = (a ^ (a >> 27)) * 0x94d049bb133111ebull;
                b = (b ^ (b >> 30)) * 0xbf58476d1ce4e5b9ull;
                b = (b ^ (b >> 27)) * 0x94d049bb133111ebull;
                const double u = ((a ^ (a >> 31)) >> 11) * 0x1.0p-53 + 0x1.0p-54;
                const double v = ((b ^ (b >> 31)) >> 11) * 0x1.0p-53;
                const double r = sqrt(-2 * log(u));
                c->k[e] = (float)(r * cos(6.283185307179586 * v));
                c->v[e] = (float)(r * sin(6.283185307179586 * v));
            }
            rvl_kvcache_write(c->kv, l, c->pos, nb, c->k, kv_dim, c->v, kv_dim);
        }
        rvl_kvcache_commit(c->kv, nb);
        c->pos += nb;
    }
    return 0;
}

/* ====================================================================
 * Many sequences (lib/engine/batch.c): caches beside the session's own,
 * and steps whose chunks hold rows of several of them
 * ==================================================================== */

int rvl_forward_seqs_open(rvl_backend *b, uint32_t n_seq, uint32_t budget_pages)
{
    rvl_forward *c = fw(b);
    rvl_kvcache_params kp = *rvl_kvcache_params_of(c->kv); /* its sinks copied, */
    kp.window = c->kv_win;                                  /* not its windows */
    const size_t nv = c->m->hp.n_vocab;
    if (c->seq_kv)
        return rvl_seterr(RVL_EINVAL, "the session's sequences are open already");
    c->seq_kv = calloc(n_seq, sizeof *c->seq_kv);
    c->seq_pos = calloc(n_seq, sizeof *c->seq_pos);
    c->it_tok = calloc(n_seq, sizeof *c->it_tok);
    c->it_n = calloc(n_seq, sizeof *c->it_n);
    c->seq_logits = malloc(n_seq * nv * sizeof(float));
    c->seg_logits = malloc(UBATCH * nv * sizeof(float));
    c->seq_tok = malloc(UBATCH * sizeof *c->seq_tok);
    if (!c->seq_kv || !c->seq_pos || !c->it_tok || !c->it_n || !c->seq_logits || !c->seg_logits ||
        !c->seq_tok)
        return rvl_seterr(RVL_ENOMEM, "out of memory for %u sequences", n_seq);
    c->n_seq = n_seq;
    int rc = rvl_kvstore_open(&c->seq_store, &kp, n_seq, budget_pages);
    for (uint32_t i = 0; rc == 0 && i < n_seq; i++)
        rc = rvl_kvcache_open_on(&c->seq_kv[i], c->seq_store, rvl_pool_size(c->pool));
    return rc;
}

void rvl_forward_seq_reset(rvl_backend *b, uint32_t seq)
{
    rvl_forward *c = fw(b);
    rvl_kvcache_reset(c->seq_kv[seq]);
    c->seq_pos[seq] = 0;
}

uint32_t rvl_forward_seq_pos(const rvl_backend *b, uint32_t seq) { return cfw(b)->seq_pos[seq]; }

void rvl_forward_seq_kv_usage(const rvl_backend *b, uint32_t seq, rvl_kv_usage *u)
{
    const rvl_forward *c = cfw(b);
    rvl_kvcache_usage(c->seq_kv[seq], c->seq_pos[seq], u);
}

void rvl_forward_seqs_kv(const rvl_backend *b, rvl_batch_kv *u)
{
    rvl_kvstore_usage(cfw(b)->seq_store, u);
}

uint32_t rvl_forward_seq_kv_need(rvl_backend *b, uint32_t seq, const int32_t *ids, uint32_t n_ids,
                                 uint32_t n)
{
    return rvl_kvcache_need(fw(b)->seq_kv[seq], ids, n_ids, n);
}

uint32_t rvl_forward_seq_share(rvl_backend *b, uint32_t seq, const int32_t *ids, uint32_t n)
{
    rvl_forward *c = fw(b);
    const uint32_t k = rvl_kvcache_share(c->seq_kv[seq], ids, n);
    c->seq_pos[seq] += k;
    return k;
}

/* The items' tokens in chunks of at most UBATCH rows; each item's last row
 * gives its logits. An item's rows are cut only where rvl_decode cuts the
 * same tokens, every UBATCH from the item's first (and at its end): a chunk
 * without room for an item's rows up to its next cut closes and they start
 * the next one (rvl_sched feeds a long prompt in pieces that start at
 * multiples of UBATCH positions, so they are cut as the whole prompt). The commits then fall where they fall for
 * the sequence alone, and so does what they decide on a cache whose pages
 * age or whose keys are centred (kvcache.c: which pages are quantized,
 * the centre) - the logits it gets alone. The caller (batch.c) has checked the items, and undoes
 * them all on an error. An item of an empty sequence first maps the pages
 * of its tokens the store holds (rvl_kvcache_share); then the step runs
 * only when the store has every page it may take (rvl_kvcache_need). */
static int seqs_decode(rvl_forward *c, uint32_t n_items, const uint32_t *seq,
                       const int32_t *const *tokens, const uint32_t *n, const float **logits)
{
    rvl_backend *b = (rvl_backend *)c;
    const size_t nv = c->m->hp.n_vocab;
    uint64_t need = 0;
    for (uint32_t i = 0; i < n_items; i++) {
        const uint32_t s = seq[i], k = rvl_forward_seq_share(b, s, tokens[i], n[i]);
        c->it_tok[i] = tokens[i] + k;
        c->it_n[i] = n[i] - k;
        need += rvl_kvcache_need(c->seq_kv[s], NULL, 0, c->seq_pos[s] + c->it_n[i]);
    }
    rvl_batch_kv room;
    rvl_kvstore_usage(c->seq_store, &room);
    if (need > room.pages_free)
        return rvl_seterr(RVL_EBUSY, "the KV cache is full: this step needs %llu pages of %d "
                          "positions, %u of %u are free", (unsigned long long)need, RVL_KVQ_PAGE,
                          room.pages_free, room.pages);
    tokens = c->it_tok;
    n = c->it_n;
    uint32_t item = 0, done = 0; /* the next token: item's done-th */
    while (item < n_items) {
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        uint32_t nb = 0;
        c->n_segs = 0;
        while (item < n_items && nb < UBATCH) {
            const uint32_t s = seq[item], to_cut = UBATCH - done % UBATCH,
                           take = n[item] - done < to_cut ? n[item] - done : to_cut;
            if (take > UBATCH - nb)
                break; /* nb > 0: take <= UBATCH */
            const bool last = done + take == n[item];
            c->seg_seq[c->n_segs] = s;
            c->segs[c->n_segs++] = (fw_seg){c->seq_kv[s], c->seq_pos[s], nb, take,
                                            last ? c->seq_logits + (size_t)item * nv : NULL};
            for (uint32_t t = 0; t < take; t++) {
                c->seq_tok[nb + t] = tokens[item][done + t];
                c->row_pos[nb + t] = c->seq_pos[s] + t;
            }
            rvl_kvcache_begin(c->seq_kv[s], take);
            nb += take;
            done += take;
            if (last) {
                item++;
                done = 0;
            }
        }
        const bool finite = forward_chunk(c, c->seq_tok, nb, c->segs[0].pos0, NULL, true);
        for (uint32_t i = 0; i < c->n_segs; i++) {
            const fw_seg *g = &c->segs[i];
            rvl_kvcache_set_ids(g->kv, g->pos0, c->seq_tok + g->row0, g->n);
            const uint64_t t0 = prof_start(c);
            rvl_kvcache_commit(g->kv, g->n);
            prof_end(c, RVL_PROF_KV_WRITE, t0);
            c->seq_pos[c->seg_seq[i]] += g->n;
        }
        if (!finite)
            return rvl_seterr(RVL_ERANGE, "the model's activations are not finite (NaN or "
                              "infinity) in a batch of %u sequences", n_items);
    }
    for (uint32_t i = 0; i < n_items; i++)
        logits[i] = c->seq_logits + (size_t)i * nv;
    return 0;
}

int rvl_forward_seqs_decode(rvl_backend *b, uint32_t n_items, const uint32_t *seq,
                            const int32_t *const *tokens, const uint32_t *n, const float **logits)
{
    rvl_forward *c = fw(b);
    if (!c->prof)
        return seqs_decode(c, n_items, seq, tokens, n, logits);
    const uint64_t t0 = prof_now(), ops0 = prof_sum(c->prof);
    const int rc = seqs_decode(c, n_items, seq, tokens, n, logits);
    prof_rest(c, t0, ops0);
    return rc;
}

int rvl_forward_seq_truncate(rvl_backend *b, uint32_t seq, uint32_t pos)
{
    rvl_forward *c = fw(b);
    int rc = rvl_kvcache_truncate(c->seq_kv[seq], pos);
    if (rc == 0)
        c->seq_pos[seq] = pos;
    return rc;
}

/* ====================================================================
 * LoRA, trace, the operation table
 * ==================================================================== */

static int cpu_set_lora(rvl_backend *b, const rvl_lora *l)
{
    rvl_forward *c = fw(b);
    if (l != c->lora)
        rvl_kvcache_forget(c->kv); /* keys and values computed without these adapters */
    c->lora = l;
    return 0;
}

static void cpu_set_trace(rvl_backend *b, rvl_trace_fn fn, void *ud)
{
    rvl_forward *c = fw(b);
    c->trace = fn;
    c->trace_ud = ud;
}

static const char *cpu_device_name(const rvl_backend *b)
{
    (void)b;
    return "cpu";
}

struct rvl_kvcache *rvl_forward_kvcache(rvl_backend *b) { return fw(b)->kv; }
void rvl_forward_set_pos(rvl_backend *b, uint32_t pos) { fw(b)->pos = pos; }

const rvl_backend_ops rvl_forward_ops = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .decode = cpu_decode,
    .pos = cpu_pos,
    .reset = cpu_reset,
    .truncate = cpu_truncate,
    .device_name = cpu_device_name,
    .reuse = cpu_reuse,
    .shift = cpu_shift,
    .set_lora = cpu_set_lora,
    .fill_random = cpu_fill_random,
    .kv_token_bytes = cpu_kv_token_bytes,
    .set_trace = cpu_set_trace,
};
