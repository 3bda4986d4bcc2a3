/*
 * forward.c - the forward pass of Llama-family models, llama2.c-style: one
 * readable loop over layers, architecture differences as flags.
 *
 * Per token: embedding row -> for each layer: RMSNorm, Q/K/V projections
 * (+ biases), RoPE, grouped-query attention over the KV cache, output
 * projection, residual; RMSNorm, SwiGLU FFN, residual -> final RMSNorm ->
 * output projection. Every buffer is allocated in rvl_ctx_open; rvl_decode
 * never allocates. Matmuls run on the context's thread pool, split by rows.
 *
 * The KV cache here is contiguous f32, per layer [n_ctx][n_head_kv*hd];
 * the KV issue replaces it with the paged, tiered cache.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

struct rvl_ctx {
    const rvl_model *m;
    rvl_pool *pool;
    uint32_t n_ctx;
    uint32_t pos;                 /* tokens in the cache */
    float *k_cache, *v_cache;     /* (layer, n_ctx, kv_dim) */
    float *rope_cos, *rope_sin;   /* (n_ctx, rope_dim/2) */
    float *x;                     /* (dim) residual stream */
    float *xb;                    /* (max(dim, q_dim)) normed input / attention output */
    float *q;                     /* (q_dim) */
    float *k, *v;                 /* (kv_dim) */
    float *att;                   /* (n_head, n_ctx) scores */
    float *hb, *hb2;              /* (ff) */
    float *xo;                    /* (dim) matmul output */
    float *logits;                /* (vocab) */
    float *norm_w;                /* dequantized norm weights: (2*n_layer+1, dim) */
    float *bias;                  /* dequantized biases: (n_layer, q_dim + 2*kv_dim) or NULL */
    void *actq;                   /* activation quantized for vec_dot */
    size_t actq_cap;
};

/* ====================================================================
 * Matmul on the pool: y[r] = dot(W row r, x) for r in [0, rows)
 * ==================================================================== */

typedef struct {
    const rvl_weight *w;
    const void *act;              /* x in w's vec_dot_type */
    float *y;
} matmul_job;

static void matmul_rows(void *arg, int ith, int nth)
{
    const matmul_job *j = arg;
    const rvl_weight *w = j->w;
    uint64_t rows = w->ne1;
    uint64_t per = (rows + (uint64_t)nth - 1) / (uint64_t)nth;
    uint64_t r0 = per * (uint64_t)ith, r1 = r0 + per < rows ? r0 + per : rows;
    const char *base = w->data;
    for (uint64_t r = r0; r < r1; r++)
        j->y[r] = w->kf->vec_dot((int64_t)w->ne0, base + r * w->row_bytes, j->act);
}

/* Quantize x (n = w->ne0 floats) into w's activation format. */
static const void *prepare_act(rvl_ctx *c, const rvl_weight *w, const float *x)
{
    const rvl_kformat *af = rvl_kformat_get(w->kf->vec_dot_type);
    if (af->type == RVL_K_F32)
        return x;
    af->quantize(x, c->actq, (int64_t)w->ne0, NULL);
    return c->actq;
}

static void matmul_act(rvl_ctx *c, float *y, const rvl_weight *w, const void *act)
{
    matmul_job j = {w, act, y};
    rvl_pool_run(c->pool, matmul_rows, &j);
}

static void matmul(rvl_ctx *c, float *y, const rvl_weight *w, const float *x)
{
    matmul_act(c, y, w, prepare_act(c, w, x));
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

static void rope(const rvl_ctx *c, float *v, uint32_t n_heads, uint32_t pos)
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

/* ====================================================================
 * Attention for one token at position `pos`, heads split over threads.
 * ==================================================================== */

typedef struct {
    rvl_ctx *c;
    uint32_t layer, pos;
} attn_job;

static void attention_heads(void *arg, int ith, int nth)
{
    const attn_job *j = arg;
    rvl_ctx *c = j->c;
    const rvl_hparams *hp = &c->m->hp;
    const uint32_t hd = hp->head_dim, kv_dim = hp->n_head_kv * hd;
    const uint32_t group = hp->n_head / hp->n_head_kv;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *kc = c->k_cache + (size_t)j->layer * c->n_ctx * kv_dim;
    const float *vc = c->v_cache + (size_t)j->layer * c->n_ctx * kv_dim;

    for (uint32_t h = (uint32_t)ith; h < hp->n_head; h += (uint32_t)nth) {
        const float *q = c->q + (size_t)h * hd;
        float *att = c->att + (size_t)h * c->n_ctx;
        const uint32_t kvh = h / group;
        float mx = -INFINITY;
        for (uint32_t t = 0; t <= j->pos; t++) {
            const float *k = kc + (size_t)t * kv_dim + (size_t)kvh * hd;
            float s = 0;
            for (uint32_t i = 0; i < hd; i++)
                s += q[i] * k[i];
            s *= scale;
            att[t] = s;
            if (s > mx)
                mx = s;
        }
        double sum = 0;
        for (uint32_t t = 0; t <= j->pos; t++) {
            att[t] = expf(att[t] - mx);
            sum += att[t];
        }
        float inv = (float)(1.0 / sum);
        float *out = c->xb + (size_t)h * hd;
        memset(out, 0, hd * sizeof *out);
        for (uint32_t t = 0; t <= j->pos; t++) {
            const float *v = vc + (size_t)t * kv_dim + (size_t)kvh * hd;
            float a = att[t] * inv;
            for (uint32_t i = 0; i < hd; i++)
                out[i] += a * v[i];
        }
    }
}

/* ====================================================================
 * One token through the model
 * ==================================================================== */

static void forward_token(rvl_ctx *c, int32_t token, uint32_t pos, bool want_logits)
{
    const rvl_model *m = c->m;
    const rvl_hparams *hp = &m->hp;
    const uint32_t dim = hp->n_embd, hd = hp->head_dim;
    const uint32_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd, ff = hp->n_ff;

    /* embedding row, whatever its format */
    m->tok_embd.kf->dequantize((const char *)m->tok_embd.data + (uint64_t)token * m->tok_embd.row_bytes,
                               c->x, dim);

    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const rvl_layer *L = &m->layers[l];
        float *kc = c->k_cache + ((size_t)l * c->n_ctx + pos) * kv_dim;
        float *vc = c->v_cache + ((size_t)l * c->n_ctx + pos) * kv_dim;

        /* attention block */
        rmsnorm(c->xb, c->x, c->norm_w + (size_t)(2 * l) * dim, dim, hp->rms_eps);
        const void *act = prepare_act(c, &L->wq, c->xb);
        matmul_act(c, c->q, &L->wq, act);
        if (L->wk.kf->vec_dot_type != L->wq.kf->vec_dot_type)
            act = prepare_act(c, &L->wk, c->xb);
        matmul_act(c, c->k, &L->wk, act);
        if (L->wv.kf->vec_dot_type != L->wk.kf->vec_dot_type)
            act = prepare_act(c, &L->wv, c->xb);
        matmul_act(c, c->v, &L->wv, act);
        if (c->bias) {
            const float *b = c->bias + (size_t)l * (q_dim + 2 * kv_dim);
            for (uint32_t i = 0; i < q_dim; i++)
                c->q[i] += b[i];
            for (uint32_t i = 0; i < kv_dim; i++) {
                c->k[i] += b[q_dim + i];
                c->v[i] += b[q_dim + kv_dim + i];
            }
        }
        rope(c, c->q, hp->n_head, pos);
        rope(c, c->k, hp->n_head_kv, pos);
        memcpy(kc, c->k, kv_dim * sizeof *kc);
        memcpy(vc, c->v, kv_dim * sizeof *vc);

        attn_job aj = {c, l, pos};
        rvl_pool_run(c->pool, attention_heads, &aj);
        matmul(c, c->xo, &L->wo, c->xb);
        for (uint32_t i = 0; i < dim; i++)
            c->x[i] += c->xo[i];

        /* SwiGLU feed-forward block */
        rmsnorm(c->xb, c->x, c->norm_w + (size_t)(2 * l + 1) * dim, dim, hp->rms_eps);
        act = prepare_act(c, &L->w_gate, c->xb);
        matmul_act(c, c->hb, &L->w_gate, act);
        if (L->w_up.kf->vec_dot_type != L->w_gate.kf->vec_dot_type)
            act = prepare_act(c, &L->w_up, c->xb);
        matmul_act(c, c->hb2, &L->w_up, act);
        for (uint32_t i = 0; i < ff; i++) {
            float g = c->hb[i];
            c->hb[i] = g / (1.0f + expf(-g)) * c->hb2[i];
        }
        matmul(c, c->xo, &L->w_down, c->hb);
        for (uint32_t i = 0; i < dim; i++)
            c->x[i] += c->xo[i];
    }

    if (!want_logits)
        return;
    rmsnorm(c->xb, c->x, c->norm_w + (size_t)(2 * hp->n_layer) * dim, dim, hp->rms_eps);
    matmul(c, c->logits, &m->output, c->xb);
}

int rvl_decode(rvl_ctx *c, const int32_t *tokens, uint32_t n, const float **logits)
{
    const rvl_hparams *hp = &c->m->hp;

    if (n == 0)
        return rvl_seterr(RVL_EINVAL, "no tokens to decode");
    if (n > c->n_ctx - c->pos)
        return rvl_seterr(RVL_ERANGE, "context full: %u tokens in the cache, %u more do not fit "
                          "in a context of %u", c->pos, n, c->n_ctx);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= hp->n_vocab)
            return rvl_seterr(RVL_EINVAL, "token id %d is outside the vocabulary (%u)", tokens[i],
                              hp->n_vocab);
    for (uint32_t i = 0; i < n; i++) {
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        forward_token(c, tokens[i], c->pos, i + 1 == n);
        c->pos++;
    }
    if (logits)
        *logits = c->logits;
    return 0;
}

/* ====================================================================
 * Context
 * ==================================================================== */

static int dequant_vec(const rvl_weight *w, float *dst)
{
    w->kf->dequantize(w->data, dst, (int64_t)w->ne0);
    return 0;
}

int rvl_ctx_open(rvl_ctx **out, const rvl_model *m, const rvl_ctx_params *p)
{
    const rvl_hparams *hp = &m->hp;
    rvl_ctx *c;
    int rc;

    *out = NULL;
    if (p && p->all_logits)
        return rvl_seterr(RVL_EUNSUPPORTED, "logits of every token are not implemented yet");
    c = calloc(1, sizeof *c);
    if (!c)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    c->m = m;
    c->n_ctx = p && p->n_ctx ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (c->n_ctx > (1u << 20)) {
        uint32_t n = c->n_ctx;
        free(c);
        return rvl_seterr(RVL_ERANGE, "context size %u is too large (at most 1048576)", n);
    }
    if ((rc = rvl_pool_open(&c->pool, p ? (int)p->n_threads : 0)) < 0) {
        free(c);
        return rc;
    }

    const size_t dim = hp->n_embd, hd = hp->head_dim, ff = hp->n_ff;
    const size_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    const size_t half = hp->rope_dim / 2;
    size_t kv_elems = (size_t)hp->n_layer * c->n_ctx * kv_dim;
    size_t xb = dim > q_dim ? dim : q_dim;

    c->k_cache = calloc(kv_elems, sizeof(float));
    c->v_cache = calloc(kv_elems, sizeof(float));
    c->rope_cos = malloc((size_t)c->n_ctx * half * sizeof(float));
    c->rope_sin = malloc((size_t)c->n_ctx * half * sizeof(float));
    c->x = calloc(dim, sizeof(float));
    c->xb = calloc(xb, sizeof(float));
    c->q = calloc(q_dim, sizeof(float));
    c->k = calloc(kv_dim, sizeof(float));
    c->v = calloc(kv_dim, sizeof(float));
    c->att = calloc((size_t)hp->n_head * c->n_ctx, sizeof(float));
    c->hb = calloc(ff, sizeof(float));
    c->hb2 = calloc(ff, sizeof(float));
    c->xo = calloc(dim, sizeof(float));
    c->logits = calloc(hp->n_vocab, sizeof(float));
    c->norm_w = calloc((2 * (size_t)hp->n_layer + 1) * dim, sizeof(float));
    if (hp->has_qkv_bias)
        c->bias = calloc((size_t)hp->n_layer * (q_dim + 2 * kv_dim), sizeof(float));
    /* activation buffer: the largest row of any activation format in use */
    size_t maxn = dim > ff ? dim : ff;
    if (q_dim > maxn)
        maxn = q_dim;
    c->actq_cap = maxn * 4 + 1024;
    c->actq = malloc(c->actq_cap);
    if (!c->k_cache || !c->v_cache || !c->rope_cos || !c->rope_sin || !c->x || !c->xb || !c->q ||
        !c->k || !c->v || !c->att || !c->hb || !c->hb2 || !c->xo || !c->logits || !c->norm_w ||
        (hp->has_qkv_bias && !c->bias) || !c->actq) {
        rvl_ctx_close(c);
        return rvl_seterr(RVL_ENOMEM, "out of memory for a context of %u tokens", c->n_ctx);
    }

    /* RoPE tables: theta_i = pos * base^(-2i/rope_dim), / factor for
     * linear scaling; computed by repeated multiplication as ggml does so
     * the angles match llama.cpp's to the last bit. */
    const float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->rope_dim);
    const float pos_scale = hp->rope_scaling == RVL_ROPE_SCALING_LINEAR ? 1.0f / hp->rope_factor : 1.0f;
    for (uint32_t pos = 0; pos < c->n_ctx; pos++) {
        float theta = (float)pos * pos_scale;
        for (size_t i = 0; i < half; i++) {
            c->rope_cos[pos * half + i] = cosf(theta);
            c->rope_sin[pos * half + i] = sinf(theta);
            theta *= theta_scale;
        }
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
    *out = c;
    return 0;
}

void rvl_ctx_close(rvl_ctx *c)
{
    if (!c)
        return;
    rvl_pool_close(c->pool);
    free(c->k_cache);
    free(c->v_cache);
    free(c->rope_cos);
    free(c->rope_sin);
    free(c->x);
    free(c->xb);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->att);
    free(c->hb);
    free(c->hb2);
    free(c->xo);
    free(c->logits);
    free(c->norm_w);
    free(c->bias);
    free(c->actq);
    free(c);
}

uint32_t rvl_ctx_n_ctx(const rvl_ctx *c) { return c->n_ctx; }
uint32_t rvl_ctx_pos(const rvl_ctx *c) { return c->pos; }
void rvl_ctx_reset(rvl_ctx *c) { c->pos = 0; }
