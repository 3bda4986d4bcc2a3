/*
 * forward.c - the forward pass of Llama-family models, llama2.c-style: one
 * readable loop over layers, architecture differences as flags.
 *
 * Per token: embedding row -> for each layer: RMSNorm, Q/K/V projections
 * (+ biases), RoPE, grouped-query attention over the KV cache, output
 * projection, residual; RMSNorm, SwiGLU FFN, residual -> final RMSNorm ->
 * output projection. Every buffer is allocated when the session opens;
 * decode never allocates. Matmuls run on the session's thread pool, split
 * by rows.
 *
 * The KV cache is lib/engine/kvcache.c's paged, tiered cache (keys cached after
 * RoPE); attention runs over its pages: kernels/attn.h's flash kernels
 * over the f16/f32 pages (q rounded to f16 against f16 keys as llama.cpp
 * does; the probabilities stay f32, as in llama.cpp's flash-attention
 * path) and kernels/kvq.h's page readers over the quantized ones.
 *
 * This is the "cpu" backend (ruvllm.h "Backends", lib/engine/backend.h):
 * rvl_forward_ops at the end of the file. The context (lib/engine/ctx.c)
 * checks every input before calling it.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "dispatch.h"
#include "f16.h"
#include "engine/kvcache.h"
#include "engine/lora_int.h"
#include "engine/model.h"

/* Tokens processed together (RVL_UBATCH): each weight row is read once
 * per chunk and multiplied with every token's activations while it is in
 * cache. */
#define UBATCH RVL_UBATCH

/* A session of the CPU backend: the table's rvl_backend handle (ruvllm.h)
 * is one of these (fw()). */
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
    float kq_scale;               /* 1/sqrt(head_dim), times YaRN's mscale^2 */
    float *x;                     /* (UBATCH, dim) residual stream */
    float *xb;                    /* (UBATCH, max(dim, q_dim)) normed input / attention out */
    float *q;                     /* (UBATCH, q_dim) */
    float *k, *v;                 /* (UBATCH, kv_dim) */
    float *hb, *hb2;              /* (UBATCH, ff) */
    float *xo;                    /* (UBATCH, dim) matmul output */
    float *logits;                /* (vocab) or (n_batch, vocab) with all_logits */
    float *norm_w;                /* dequantized norm weights: (2*n_layer+1, dim) */
    float *bias;                  /* dequantized biases: (n_layer, q_dim + 2*kv_dim) or NULL */
    unsigned char *actq;          /* (UBATCH, act_stride) activations for vec_dot */
    unsigned char *unpack;        /* per thread: one group of packed rows, row-major */
    size_t unpack_stride;         /* bytes per thread (m->packed_max_group, aligned) */
    size_t act_stride;
    const rvl_lora *lora;         /* run-time LoRA adapters (borrowed), or NULL */
    rvl_trace_fn trace;           /* rvl_ctx_set_trace: per-step hook, or NULL */
    void *trace_ud;
};

/* The trace hook after a named step of forward_chunk: nb rows of n floats,
 * stride floats apart (rvl_ctx_set_trace). */
#define TRACE(name, l, p, stride, n)                                                      \
    do {                                                                                 \
        if (c->trace)                                                                    \
            c->trace(c->trace_ud, name, (int)(l), pos0, nb, p, stride, n);               \
    } while (0)

/* ====================================================================
 * Matmul on the pool: y[t][r] = dot(W row r, act[t]) for every row r and
 * the nb tokens t of a chunk; threads split the rows, and each row is
 * multiplied with all nb activation rows while it is in L1.
 * ==================================================================== */

/* Up to 3 weights that read the same activations (Q/K/V, gate/up) run as
 * one job: one fork/join instead of three. */
#define MM_PARTS 3
typedef struct {
    const rvl_weight *w;
    float *y;
    size_t y_stride;              /* floats between output rows */
    uint64_t chunk;               /* rows per chunk (whole tiles) */
    uint64_t first;               /* index of this part's first chunk */
} matmul_part;

typedef struct {
    matmul_part part[MM_PARTS];
    int n_parts;
    unsigned char *unpack;        /* rvl_forward.unpack */
    size_t unpack_stride;
    const unsigned char *act;     /* nb rows in the weights' vec_dot_type */
    size_t act_stride;            /* bytes between activation rows */
    uint32_t nb;
    uint64_t n_chunks;
    atomic_uint_fast64_t next;    /* next chunk to take */
} matmul_job;

/* Threads take chunks of contiguous rows from a shared counter, so a
 * thread that was preempted (a busy machine) does not hold everyone up.
 * Each row's result is computed the same way whoever takes it: the
 * output does not depend on the thread count. */
static void matmul_rows(void *arg, int ith, int nth)
{
    matmul_job *j = arg;
    (void)nth;
    for (;;) {
        uint64_t ci = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (ci >= j->n_chunks)
            break;
        int pi = 0;
        while (pi + 1 < j->n_parts && ci >= j->part[pi + 1].first)
            pi++;
        const matmul_part *pt = &j->part[pi];
        const rvl_weight *w = pt->w;
        const int64_t n = (int64_t)w->ne0;
        const uint64_t rows = w->ne1;
        const char *base = w->data;
        uint64_t r0 = (ci - pt->first) * pt->chunk;
        uint64_t r1 = r0 + pt->chunk < rows ? r0 + pt->chunk : rows;
        /* the tiled kernel for every batch, one token included (its
         * one-token path shares activation loads across 4 rows and
         * prefetches ahead) */
        const rvl_gemm_fn gemm = w->kf->gemm;
        if (w->packed && r0 < w->packed_rows) {
            /* packed groups (chunks are whole groups): one token reads
             * them as they are; a batch unpacks each group into this
             * thread's buffer for the tiles (8 rows of copying per 8 rows
             * x nb tokens of arithmetic) */
            const uint64_t pr1 = r1 < w->packed_rows ? r1 : w->packed_rows;
            const char *pk = (const char *)w->packed;
            if (j->nb == 1) {
                w->kf->gemv8(n, pk + r0 * w->row_bytes, (int64_t)((pr1 - r0) / RVL_GEMM_ROWS),
                             j->act, pt->y + r0);
            } else {
                unsigned char *u = j->unpack + (size_t)ith * j->unpack_stride;
                for (uint64_t r = r0; r < pr1; r += RVL_GEMM_ROWS) {
                    w->kf->unpack8(n, pk + r * w->row_bytes, u, w->row_bytes);
                    gemm(n, u, w->row_bytes, RVL_GEMM_ROWS, j->act, j->act_stride, (int)j->nb,
                         pt->y + r, pt->y_stride);
                }
            }
            r0 = pr1;
        }
        if (gemm) {
            /* tiles of RVL_GEMM_ROWS rows x all nb tokens; each result is
             * the same whatever the grouping (formats.h) */
            for (uint64_t r = r0; r < r1; r += RVL_GEMM_ROWS) {
                const int nr = (int)(r1 - r < RVL_GEMM_ROWS ? r1 - r : RVL_GEMM_ROWS);
                gemm(n, base + r * w->row_bytes, w->row_bytes, nr, j->act, j->act_stride,
                     (int)j->nb, pt->y + r, pt->y_stride);
            }
            continue;
        }
        const rvl_vec_dot_fn dot = w->kf->vec_dot;
        for (uint64_t r = r0; r < r1; r++) {
            const char *row = base + r * w->row_bytes;
            for (uint32_t t = 0; t < j->nb; t++)
                pt->y[t * pt->y_stride + r] = dot(n, row, j->act + t * j->act_stride);
        }
    }
}

typedef struct {
    const rvl_kformat *af;
    const float *x;
    size_t x_stride;
    unsigned char *out;
    size_t out_stride;
    int64_t n;
    uint32_t nb;
} quant_job;

static void quant_rows(void *arg, int ith, int nth)
{
    const quant_job *j = arg;
    for (uint32_t t = (uint32_t)ith; t < j->nb; t += (uint32_t)nth)
        j->af->quantize(j->x + t * j->x_stride, j->out + t * j->out_stride, j->n, NULL);
}

/* The nb rows of x (x_stride floats apart) in w's activation format; a
 * batch is quantized on the pool (row t is the same whoever does it). */
static void prepare_act(rvl_forward *c, const rvl_weight *w, const float *x, size_t x_stride,
                        uint32_t nb, const unsigned char **act, size_t *stride)
{
    const rvl_kformat *af = rvl_kformat_get(w->kf->vec_dot_type);
    if (af->type == RVL_K_F32) {
        *act = (const unsigned char *)x;
        *stride = x_stride * sizeof(float);
        return;
    }
    quant_job qj = {af, x, x_stride, c->actq, c->act_stride, (int64_t)w->ne0, nb};
    if (nb > 1)
        rvl_pool_run(c->pool, quant_rows, &qj);
    else
        quant_rows(&qj, 0, 1);
    *act = c->actq;
    *stride = c->act_stride;
}

/* n weights (at most MM_PARTS) times the same nb activation rows, as one
 * pool job. */
static void matmul_act_n(rvl_forward *c, int n, const rvl_weight *const *ws, float *const *ys,
                         const size_t *y_strides, const unsigned char *act, size_t act_stride,
                         uint32_t nb)
{
    matmul_job j = {.n_parts = n, .act = act, .act_stride = act_stride, .nb = nb,
                    .unpack = c->unpack, .unpack_stride = c->unpack_stride};
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        /* about 8 chunks per thread and weight: fine enough to balance,
         * coarse enough that the counter is not contended and rows stream
         * in order */
        uint64_t chunk = ws[i]->ne1 / ((uint64_t)rvl_pool_size(c->pool) * 8);
        chunk = chunk < 16 ? 16 : chunk;
        chunk = (chunk + RVL_GEMM_ROWS - 1) / RVL_GEMM_ROWS * RVL_GEMM_ROWS; /* whole tiles */
        j.part[i] = (matmul_part){ws[i], ys[i], y_strides[i], chunk, total};
        total += (ws[i]->ne1 + chunk - 1) / chunk;
    }
    j.n_chunks = total;
    atomic_init(&j.next, 0);
    rvl_pool_run(c->pool, matmul_rows, &j);
}

static void matmul(rvl_forward *c, float *y, size_t y_stride, const rvl_weight *w, const float *x,
                   size_t x_stride, uint32_t nb)
{
    const unsigned char *act;
    size_t as;
    prepare_act(c, w, x, x_stride, nb, &act, &as);
    matmul_act_n(c, 1, &w, &y, &y_stride, act, as, nb);
}

/* Several weights that read the same input (Q/K/V, gate/up) share one
 * quantization of it and one pool job when their activation formats
 * agree. */
static void matmul_shared(rvl_forward *c, const float *x, size_t x_stride, uint32_t nb, int n,
                          const rvl_weight *const *ws, float *const *ys, const size_t *y_strides)
{
    for (int i = 0; i < n;) {
        int k = i + 1;
        while (k < n && k - i < MM_PARTS && ws[k]->kf->vec_dot_type == ws[i]->kf->vec_dot_type)
            k++;
        const unsigned char *act;
        size_t as;
        prepare_act(c, ws[i], x, x_stride, nb, &act, &as);
        matmul_act_n(c, k - i, ws + i, ys + i, y_strides + i, act, as, nb);
        i = k;
    }
}

/* ====================================================================
 * Elementwise pieces (the kernel issue moves these into kernels/)
 * ==================================================================== */

/* y = x / sqrt(mean(x^2) + eps) * w, summing in double like ggml. */
static void rmsnorm(float *y, const float *x, const float *w, uint32_t n, float eps)
{
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    float scale = 1.0f / sqrtf((float)(sum / n) + eps);
    for (uint32_t i = 0; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

static void rope(const rvl_forward *c, float *v, uint32_t n_heads, uint32_t pos)
{
    const rvl_hparams *hp = &c->m->hp;
    const uint32_t half = hp->rope_dim / 2;
    const float *cs = c->rope_cos + (size_t)pos * half;
    const float *sn = c->rope_sin + (size_t)pos * half;
    for (uint32_t h = 0; h < n_heads; h++) {
        float *x = v + (size_t)h * hp->head_dim;
        for (uint32_t i = 0; i < half; i++) {
            uint32_t a = hp->rope_type == RVL_ROPE_NEOX ? i : 2 * i;
            uint32_t b = hp->rope_type == RVL_ROPE_NEOX ? i + half : 2 * i + 1;
            float x0 = x[a], x1 = x[b];
            x[a] = x0 * cs[i] - x1 * sn[i];
            x[b] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

/* RMSNorm of nb rows (tokens split over the threads; each row is summed
 * in the same order whoever does it). */
typedef struct {
    float *y;
    size_t y_stride;
    const float *x;
    size_t x_stride;
    const float *w;
    uint32_t n, nb;
    float eps;
} norm_job;

static void norm_rows_part(void *arg, int ith, int nth)
{
    const norm_job *j = arg;
    for (uint32_t t = (uint32_t)ith; t < j->nb; t += (uint32_t)nth)
        rmsnorm(j->y + t * j->y_stride, j->x + t * j->x_stride, j->w, j->n, j->eps);
}

static void norm_rows(rvl_forward *c, float *y, size_t y_stride, const float *x, size_t x_stride,
                      const float *w, uint32_t n, uint32_t nb, float eps)
{
    norm_job j = {y, y_stride, x, x_stride, w, n, nb, eps};
    if (nb > 1)
        rvl_pool_run(c->pool, norm_rows_part, &j);
    else
        norm_rows_part(&j, 0, 1);
}

/* SwiGLU, g <- silu(g) * u, over contiguous slices per thread. */
typedef struct {
    float *g;
    const float *u;
    size_t n;
} swiglu_job;

static void swiglu_part(void *arg, int ith, int nth)
{
    const swiglu_job *j = arg;
    size_t per = (j->n + (size_t)nth - 1) / (size_t)nth;
    size_t i0 = (size_t)ith * per, i1 = i0 + per < j->n ? i0 + per : j->n;
    for (size_t i = i0; i < i1; i++) {
        float g = j->g[i];
        j->g[i] = g / (1.0f + expf(-g)) * j->u[i];
    }
}

/* ====================================================================
 * One chunk of nb tokens through the model. `logits`: where the logits
 * of every token go (vocab floats apart), or NULL for only the last
 * token's into c->logits (want_last).
 * ==================================================================== */

static void forward_chunk(rvl_forward *c, const int32_t *tokens, uint32_t nb, uint32_t pos0,
                          float *logits, bool want_last)
{
    const rvl_model *m = c->m;
    const rvl_hparams *hp = &m->hp;
    const uint32_t dim = hp->n_embd, hd = hp->head_dim;
    const uint32_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd, ff = hp->n_ff;
    const size_t xb_stride = dim > q_dim ? dim : q_dim;

    /* embedding rows, whatever their format */
    for (uint32_t t = 0; t < nb; t++)
        m->tok_embd.kf->dequantize((const char *)m->tok_embd.data +
                                       (uint64_t)tokens[t] * m->tok_embd.row_bytes,
                                   c->x + (size_t)t * dim, dim);

    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const rvl_layer *L = &m->layers[l];

        /* attention block */
        norm_rows(c, c->xb, xb_stride, c->x, dim, c->norm_w + (size_t)(2 * l) * dim, dim, nb,
                  hp->rms_eps);
        TRACE("attn_norm", l, c->xb, xb_stride, dim);
        const rvl_weight *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *qkv_out[3] = {c->q, c->k, c->v};
        const size_t qkv_stride[3] = {q_dim, kv_dim, kv_dim};
        matmul_shared(c, c->xb, xb_stride, nb, 3, qkv, qkv_out, qkv_stride);
        rvl_lora_apply(c->lora, c->pool, l, RVL_LORA_Q, c->xb, xb_stride, nb, c->q, q_dim);
        rvl_lora_apply(c->lora, c->pool, l, RVL_LORA_K, c->xb, xb_stride, nb, c->k, kv_dim);
        rvl_lora_apply(c->lora, c->pool, l, RVL_LORA_V, c->xb, xb_stride, nb, c->v, kv_dim);
        for (uint32_t t = 0; t < nb; t++) {
            float *q = c->q + (size_t)t * q_dim, *k = c->k + (size_t)t * kv_dim,
                  *v = c->v + (size_t)t * kv_dim;
            if (c->bias) {
                const float *b = c->bias + (size_t)l * (q_dim + 2 * kv_dim);
                for (uint32_t i = 0; i < q_dim; i++)
                    q[i] += b[i];
                for (uint32_t i = 0; i < kv_dim; i++) {
                    k[i] += b[q_dim + i];
                    v[i] += b[q_dim + kv_dim + i];
                }
            }
            rope(c, q, hp->n_head, pos0 + t);
            rope(c, k, hp->n_head_kv, pos0 + t);
        }
        TRACE("Qcur", l, c->q, q_dim, q_dim);
        TRACE("Kcur", l, c->k, kv_dim, kv_dim);
        TRACE("Vcur", l, c->v, kv_dim, kv_dim);
        /* keys after RoPE into the cache, then attention over its pages */
        rvl_kvcache_write(c->kv, l, pos0, nb, c->k, kv_dim, c->v, kv_dim);
        rvl_kvcache_attend(c->kv, c->pool, l, c->q, q_dim, pos0, nb, c->xb, xb_stride);
        TRACE("kqv_out", l, c->xb, xb_stride, q_dim);
        matmul(c, c->xo, dim, &L->wo, c->xb, xb_stride, nb);
        rvl_lora_apply(c->lora, c->pool, l, RVL_LORA_O, c->xb, xb_stride, nb, c->xo, dim);
        TRACE("attn_out", l, c->xo, dim, dim);
        for (size_t i = 0; i < (size_t)nb * dim; i++)
            c->x[i] += c->xo[i];
        TRACE("ffn_inp", l, c->x, dim, dim);

        /* SwiGLU feed-forward block */
        norm_rows(c, c->xb, xb_stride, c->x, dim, c->norm_w + (size_t)(2 * l + 1) * dim, dim, nb,
                  hp->rms_eps);
        TRACE("ffn_norm", l, c->xb, xb_stride, dim);
        const rvl_weight *gu[2] = {&L->w_gate, &L->w_up};
        float *gu_out[2] = {c->hb, c->hb2};
        const size_t gu_stride[2] = {ff, ff};
        matmul_shared(c, c->xb, xb_stride, nb, 2, gu, gu_out, gu_stride);
        rvl_lora_apply(c->lora, c->pool, l, RVL_LORA_GATE, c->xb, xb_stride, nb, c->hb, ff);
        rvl_lora_apply(c->lora, c->pool, l, RVL_LORA_UP, c->xb, xb_stride, nb, c->hb2, ff);
        TRACE("ffn_gate", l, c->hb, ff, ff);
        TRACE("ffn_up", l, c->hb2, ff, ff);
        swiglu_job sj = {c->hb, c->hb2, (size_t)nb * ff};
        if (nb > 1)
            rvl_pool_run(c->pool, swiglu_part, &sj);
        else
            swiglu_part(&sj, 0, 1);
        TRACE("ffn_swiglu", l, c->hb, ff, ff);
        matmul(c, c->xo, dim, &L->w_down, c->hb, ff, nb);
        rvl_lora_apply(c->lora, c->pool, l, RVL_LORA_DOWN, c->hb, ff, nb, c->xo, dim);
        TRACE("ffn_out", l, c->xo, dim, dim);
        for (size_t i = 0; i < (size_t)nb * dim; i++)
            c->x[i] += c->xo[i];
        TRACE("l_out", l, c->x, dim, dim);
    }

    const float *onorm = c->norm_w + (size_t)(2 * hp->n_layer) * dim;
    if (logits) {
        norm_rows(c, c->xb, xb_stride, c->x, dim, onorm, dim, nb, hp->rms_eps);
        TRACE("result_norm", -1, c->xb, xb_stride, dim);
        matmul(c, logits, hp->n_vocab, &m->output, c->xb, xb_stride, nb);
    } else if (want_last) {
        rmsnorm(c->xb, c->x + (size_t)(nb - 1) * dim, onorm, dim, hp->rms_eps);
        if (c->trace)
            c->trace(c->trace_ud, "result_norm", -1, pos0 + nb - 1, 1, c->xb, dim, dim);
        matmul(c, c->logits, hp->n_vocab, &m->output, c->xb, xb_stride, 1);
    }
}

/* ====================================================================
 * Session: rvl_decode's chunks (the context, lib/engine/ctx.c, has
 * checked the tokens)
 * ==================================================================== */

/* the table's handle is this file's session */
static rvl_forward *fw(rvl_backend *b) { return (rvl_forward *)b; }
static const rvl_forward *cfw(const rvl_backend *b) { return (const rvl_forward *)b; }

static int cpu_decode(rvl_backend *b, const int32_t *tokens, uint32_t n, const float **logits)
{
    rvl_forward *c = fw(b);
    const rvl_hparams *hp = &c->m->hp;

    for (uint32_t i = 0; i < n; i += UBATCH) {
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        uint32_t nb = n - i < UBATCH ? n - i : UBATCH;
        rvl_kvcache_begin(c->kv, nb);
        forward_chunk(c, tokens + i, nb, c->pos,
                      c->all_logits ? c->logits + (size_t)i * hp->n_vocab : NULL, i + nb == n);
        rvl_kvcache_set_ids(c->kv, c->pos, tokens + i, nb); /* names full pages for reuse */
        rvl_kvcache_commit(c->kv, nb); /* ages pages past a tier boundary */
        c->pos += nb;
    }
    if (logits)
        *logits = c->logits;
    return 0;
}

/* ====================================================================
 * Open and close
 * ==================================================================== */

static int dequant_vec(const rvl_weight *w, float *dst)
{
    w->kf->dequantize(w->data, dst, (int64_t)w->ne0);
    return 0;
}

/* accepts NULL */
static void forward_free(rvl_forward *c)
{
    if (!c)
        return;
    rvl_pool_close(c->pool);
    rvl_kvcache_close(c->kv);
    free(c->rope_cos);
    free(c->rope_sin);
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
    free(c->bias);
    free(c->actq);
    free(c->unpack);
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

    const size_t dim = hp->n_embd, hd = hp->head_dim, ff = hp->n_ff;
    const size_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    const size_t half = hp->rope_dim / 2;
    size_t xb = dim > q_dim ? dim : q_dim;
    size_t maxn = dim > ff ? dim : ff;
    if (q_dim > maxn)
        maxn = q_dim;
    /* activation rows: at most 4 bytes per element (f32) plus a row header */
    c->act_stride = (maxn * 4 + 64 + 63) & ~(size_t)63;

    c->rope_cos = malloc((size_t)c->n_ctx * half * sizeof(float));
    c->rope_sin = malloc((size_t)c->n_ctx * half * sizeof(float));
    c->x = calloc(UBATCH * dim, sizeof(float));
    c->xb = calloc(UBATCH * xb, sizeof(float));
    c->q = calloc(UBATCH * q_dim, sizeof(float));
    c->k = calloc(UBATCH * kv_dim, sizeof(float));
    c->v = calloc(UBATCH * kv_dim, sizeof(float));
    c->hb = calloc(UBATCH * ff, sizeof(float));
    c->hb2 = calloc(UBATCH * ff, sizeof(float));
    c->xo = calloc(UBATCH * dim, sizeof(float));
    c->logits = calloc((size_t)c->n_batch * hp->n_vocab, sizeof(float));
    c->norm_w = calloc((2 * (size_t)hp->n_layer + 1) * dim, sizeof(float));
    if (hp->has_qkv_bias)
        c->bias = calloc((size_t)hp->n_layer * (q_dim + 2 * kv_dim), sizeof(float));
    c->actq = malloc(UBATCH * c->act_stride);
    if (m->packed_max_group) {
        c->unpack_stride = (size_t)(m->packed_max_group + 63) / 64 * 64;
        c->unpack = aligned_alloc(64, c->unpack_stride * (size_t)rvl_pool_size(c->pool));
    }
    if ((m->packed_max_group && !c->unpack) || !c->rope_cos || !c->rope_sin || !c->x || !c->xb || !c->q ||
        !c->k || !c->v || !c->hb || !c->hb2 || !c->xo || !c->logits || !c->norm_w ||
        (hp->has_qkv_bias && !c->bias) || !c->actq) {
        uint32_t n = c->n_ctx;
        forward_free(c);
        return rvl_seterr(RVL_ENOMEM, "out of memory for a context of %u tokens", n);
    }

    /* RoPE tables once per context; YaRN's mscale goes into the scale */
    float attn_mul;
    rvl_rope_tables(&rh, m->rope_freqs.present ? m->rope_freqs.data : NULL, c->n_ctx, c->rope_cos,
                    c->rope_sin, &attn_mul);
    c->kq_scale = attn_mul / sqrtf((float)hp->head_dim);
    kp.scale = c->kq_scale;
    if ((rc = rvl_kvcache_open(&c->kv, &kp, nth)) < 0) {
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
    }
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
     * moves: everything after keep is dropped) */
    const size_t half = hp->rope_dim / 2;
    const size_t row = n_discard < c->n_ctx ? n_discard : 0;
    int rc = rvl_kvcache_shift(c->kv, keep, n_discard, c->rope_cos + row * half,
                           c->rope_sin + row * half, hp->rope_dim, hp->rope_type == RVL_ROPE_NEOX);
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
