/*
 * rvl_metal_backend.c - the Metal backend (ruvllm.h's rvl_backend_ops, the
 * "Backends" section: all it uses of libruvllm) for Llama-family models,
 * in pure C over metal/rvl_mtl_device.h:
 * the same file runs on Apple GPUs (rvl_mtl_device.m, make METAL=1) and
 * on Linux in the Metal emulator (tests/metal-emu/device_emu.cpp,
 * test_backend.cpp). Argument structs and dispatch sizes come from
 * rvl_metal_args.h, the header the shaders share.
 *
 * Per chunk of up to RVL_UBATCH tokens (llama2.c-style, as lib/engine/forward.c):
 * embedding rows (dequantized on the host into shared memory) -> per layer:
 * RMSNorm, Q/K/V matmuls (+ biases), RoPE of q, K (RoPE fused) and V
 * appended to the paged cache, flash-attention decode + reduce (one token)
 * or tiled prefill, output matmul, residual add; RMSNorm, gate/up matmuls,
 * SwiGLU, down matmul, residual add -> final RMSNorm -> output logits.
 * Everything is encoded into one command buffer per chunk and waited for
 * once, when the logits are read.
 *
 * Differences from the CPU (lib/engine/forward.c), all within rounding: matmuls
 * dequantize the weights and keep the activations f32 (the CPU quantizes
 * activations to Q8 for quantized formats: metal/README.md), the
 * reductions sum in f32 (the CPU's RMSNorm sums in double), attention
 * splits keys into other blocks. KV caches: f16 (default; q rounded to
 * f16 as on the CPU) or f32, pages of 32 positions in device memory.
 * Not supported here (clear errors at open): quantized / tiered KV types,
 * LoRA, weights in formats without a Metal kernel.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruvllm.h"
#include "rvl_metal_args.h"
#include "rvl_mtl_device.h"

#define PAGE 32           /* KV positions per page */
#define MAX_CHUNKS 8      /* decode's split-K */
#define MV_MAX_TOK 4      /* GEMV up to this many tokens, GEMM above */

struct rvl_bw {
    rvl_mtl_buffer *buf;
    rvl_mtl_pipeline *mv, *mm;   /* mm NULL: GEMV for every batch */
    uint64_t row_bytes;
    int32_t k, n_rows;
};

typedef struct {
    rvl_bw w[RVL_WEIGHT_OUTPUT]; /* Q K V O GATE UP DOWN */
    rvl_mtl_buffer *kc, *vc;     /* (n_pages, n_head_kv, PAGE, head_dim) f16 / f32 */
} mtl_layer;

struct rvl_backend {
    const rvl_model *m;
    const rvl_hparams *hp;       /* the model's */
    rvl_weight_view tok_embd;    /* rows dequantized on the host (op_embed) */
    rvl_mtl_device *dev;
    rvl_mtl_encoder *enc;        /* the open command buffer, or NULL */
    int err;                     /* first error since the last sync */
    uint32_t n_ctx, pos, n_batch;
    bool all_logits;
    int kv_fmt;                  /* RVL_MTL_KV_F16 or _F32 */
    uint64_t kv_head_stride, kv_page_stride;  /* bytes */
    float kq_scale;
    struct {
        rvl_mtl_pipeline *norm, *rope, *add, *swiglu, *kv, *dec, *red, *pf;
    } pl;
    mtl_layer *layers;           /* owned: n_layer */
    rvl_bw output;
    rvl_mtl_buffer *norm_w;      /* (2 n_layer + 1, dim): attn, ffn per layer, output */
    rvl_mtl_buffer *bias;        /* (n_layer, q_dim + 2 kv_dim) or NULL */
    rvl_mtl_buffer *rope_cos, *rope_sin;  /* (n_ctx, rope_dim/2) */
    rvl_mtl_buffer *positions;   /* int32 0 .. n_ctx-1 (RoPE's pos[t] at offset 4 pos0) */
    rvl_mtl_buffer *page_table;  /* int32 identity: logical page p is physical page p */
    rvl_mtl_buffer *x, *xb, *q, *k, *v, *hb, *hb2, *xo, *logits_dev, *partials;
    float *logits;               /* host: (vocab) or (n_batch, vocab) */
};

/* ====================================================================
 * Errors and the command stream
 * ==================================================================== */

/* Keeps the first error (its message is in rvl_errmsg() already). */
static void keep_err(rvl_backend *b, int rc)
{
    if (rc < 0 && !b->err)
        b->err = rc;
}

/* The open encoder, begun on first use. */
static rvl_mtl_encoder *enc(rvl_backend *b)
{
    if (!b->enc)
        b->enc = rvl_mtl_encoder_begin(b->dev);
    return b->enc;
}

static int flush(rvl_backend *b)
{
    if (b->enc) {
        rvl_mtl_encoder *e = b->enc;
        b->enc = NULL;
        keep_err(b, rvl_mtl_encoder_commit_wait(e));
    }
    int rc = b->err;
    b->err = 0;
    return rc;
}

static void dispatch(rvl_backend *b, rvl_mtl_encoder *e, rvl_mtl_dispatch d)
{
    (void)b;
    rvl_mtl_enc_dispatch(e, d.grid, d.threads);
}

static void bind(rvl_mtl_encoder *e, uint32_t i, rvl_bt t)
{
    rvl_mtl_enc_set_buffer(e, i, (rvl_mtl_buffer *)t.buf, t.off);
}

static rvl_bt T(rvl_mtl_buffer *buf, size_t off_floats)
{
    return (rvl_bt){buf, off_floats * sizeof(float)};
}

/* Elementwise kernels take ceil(n / 4) threads (4 elements each). */
static rvl_mtl_dispatch elem_dispatch(size_t n)
{
    rvl_mtl_dispatch d = {{rvl_mtl_div_up(rvl_mtl_div_up(n, 4), 64), 1, 1}, {64, 1, 1}};
    return d;
}

/* ====================================================================
 * Ops (ruvllm.h rvl_backend_ops)
 * ==================================================================== */

static const rvl_bw *op_weight(rvl_backend *b, uint32_t layer, rvl_weight_role role)
{
    if (role == RVL_WEIGHT_OUTPUT)
        return &b->output;
    return &b->layers[layer].w[role];
}

static rvl_bt op_vec(rvl_backend *b, uint32_t layer, rvl_weight_role role)
{
    const rvl_hparams *hp = b->hp;
    const size_t dim = hp->n_embd, q_dim = (size_t)hp->n_head * hp->head_dim,
                 kv_dim = (size_t)hp->n_head_kv * hp->head_dim, nb = q_dim + 2 * kv_dim;
    switch (role) {
    case RVL_WEIGHT_ATTN_NORM: return T(b->norm_w, 2 * layer * dim);
    case RVL_WEIGHT_FFN_NORM: return T(b->norm_w, (2 * layer + 1) * dim);
    case RVL_WEIGHT_OUTPUT_NORM: return T(b->norm_w, 2 * (size_t)hp->n_layer * dim);
    case RVL_WEIGHT_BQ: return b->bias ? T(b->bias, layer * nb) : (rvl_bt){0};
    case RVL_WEIGHT_BK: return b->bias ? T(b->bias, layer * nb + q_dim) : (rvl_bt){0};
    case RVL_WEIGHT_BV: return b->bias ? T(b->bias, layer * nb + q_dim + kv_dim) : (rvl_bt){0};
    default: break;
    }
    return (rvl_bt){0};
}

/* On the host, into shared memory: waits for the queued work first. */
static void op_embed(rvl_backend *b, const int32_t *tokens, uint32_t nb, rvl_bt x, size_t x_stride)
{
    if (b->enc) {
        rvl_mtl_encoder *en = b->enc;
        b->enc = NULL;
        keep_err(b, rvl_mtl_encoder_commit_wait(en));
    }
    if (b->err)
        return;
    float *dst = (float *)((char *)rvl_mtl_buffer_contents((rvl_mtl_buffer *)x.buf) + x.off);
    for (uint32_t t = 0; t < nb; t++)
        keep_err(b, rvl_model_weight_rows(&b->tok_embd, (uint64_t)tokens[t], 1,
                                          dst + (size_t)t * x_stride));
}

static void op_rmsnorm(rvl_backend *b, rvl_bt x, size_t x_stride, rvl_bt w, rvl_bt y,
                       size_t y_stride, uint32_t n, uint32_t nb, float eps)
{
    rvl_mtl_norm_args a = {.x_stride = x_stride, .y_stride = y_stride, .n = (int32_t)n, .eps = eps};
    rvl_mtl_encoder *e = enc(b);
    rvl_mtl_enc_set_pipeline(e, b->pl.norm);
    rvl_mtl_enc_set_bytes(e, 0, &a, sizeof a);
    bind(e, 1, x);
    bind(e, 2, w);
    bind(e, 3, y);
    dispatch(b, e, rvl_mtl_norm_dispatch(nb));
}

static void op_matmul(rvl_backend *b, const rvl_bw *w, rvl_bt x, size_t x_stride, rvl_bt y,
                      size_t y_stride, uint32_t nb)
{
    rvl_mtl_matmul_args a = {.w_row_bytes = w->row_bytes, .x_stride = x_stride,
                             .y_stride = y_stride, .k = w->k, .n_rows = w->n_rows,
                             .n_tok = (int32_t)nb};
    const bool mm = w->mm && nb > MV_MAX_TOK;
    rvl_mtl_encoder *e = enc(b);
    rvl_mtl_enc_set_pipeline(e, mm ? w->mm : w->mv);
    rvl_mtl_enc_set_bytes(e, 0, &a, sizeof a);
    rvl_mtl_enc_set_buffer(e, 1, w->buf, 0);
    bind(e, 2, x);
    bind(e, 3, y);
    dispatch(b, e, mm ? rvl_mtl_mm_dispatch(&a) : rvl_mtl_mv_dispatch(&a));
}

static void binary(rvl_backend *b, rvl_mtl_pipeline *p, rvl_bt y, rvl_bt a, size_t n)
{
    const uint32_t n32 = (uint32_t)n;
    rvl_mtl_encoder *e = enc(b);
    rvl_mtl_enc_set_pipeline(e, p);
    bind(e, 0, y);
    bind(e, 1, a);
    bind(e, 2, y);
    rvl_mtl_enc_set_bytes(e, 3, &n32, sizeof n32);
    dispatch(b, e, elem_dispatch(n));
}

static void op_add(rvl_backend *b, rvl_bt y, rvl_bt a, size_t n) { binary(b, b->pl.add, y, a, n); }
static void op_swiglu(rvl_backend *b, rvl_bt g, rvl_bt u, size_t n) { binary(b, b->pl.swiglu, g, u, n); }

static void op_add_row(rvl_backend *b, rvl_bt y, size_t y_stride, rvl_bt v, uint32_t n, uint32_t nb)
{
    for (uint32_t t = 0; t < nb; t++)
        binary(b, b->pl.add, (rvl_bt){y.buf, y.off + (size_t)t * y_stride * sizeof(float)}, v, n);
}

static int rope_mode(const rvl_hparams *hp)
{
    return hp->rope_type == RVL_ROPE_NEOX ? RVL_MTL_ROPE_NEOX : RVL_MTL_ROPE_NORM;
}

static void op_rope(rvl_backend *b, rvl_bt x, size_t x_stride, uint32_t n_head, uint32_t pos0,
                    uint32_t nb)
{
    const rvl_hparams *hp = b->hp;
    rvl_mtl_rope_args a = {.x_stride = x_stride, .y_stride = x_stride, .n_tok = (int32_t)nb,
                           .n_head = (int32_t)n_head, .head_dim = (int32_t)hp->head_dim,
                           .rope_dim = (int32_t)hp->rope_dim, .mode = rope_mode(hp)};
    rvl_mtl_encoder *e = enc(b);
    rvl_mtl_enc_set_pipeline(e, b->pl.rope);
    rvl_mtl_enc_set_bytes(e, 0, &a, sizeof a);
    bind(e, 1, x);
    bind(e, 2, x);
    rvl_mtl_enc_set_buffer(e, 3, b->rope_cos, 0);
    rvl_mtl_enc_set_buffer(e, 4, b->rope_sin, 0);
    rvl_mtl_enc_set_buffer(e, 5, b->positions, (size_t)pos0 * sizeof(int32_t));
    dispatch(b, e, rvl_mtl_rope_dispatch(&a));
}

static void op_kv_append(rvl_backend *b, uint32_t layer, rvl_bt k, rvl_bt v, size_t stride,
                         uint32_t pos0, uint32_t nb)
{
    const rvl_hparams *hp = b->hp;
    rvl_mtl_kv_append_args a = {.page_stride = b->kv_page_stride, .head_stride = b->kv_head_stride,
                                .x_stride = stride, .head_dim = (int32_t)hp->head_dim,
                                .n_head_kv = (int32_t)hp->n_head_kv, .n_tok = (int32_t)nb,
                                .fmt = b->kv_fmt, .page_tokens = PAGE, .p0 = (int32_t)pos0,
                                .rope_mode = rope_mode(hp), .rope_dim = (int32_t)hp->rope_dim};
    rvl_mtl_encoder *e = enc(b);
    rvl_mtl_enc_set_pipeline(e, b->pl.kv);
    rvl_mtl_enc_set_bytes(e, 0, &a, sizeof a);
    bind(e, 1, k);
    rvl_mtl_enc_set_buffer(e, 2, b->layers[layer].kc, 0);
    rvl_mtl_enc_set_buffer(e, 3, b->page_table, 0);
    rvl_mtl_enc_set_buffer(e, 4, b->rope_cos, 0);
    rvl_mtl_enc_set_buffer(e, 5, b->rope_sin, 0);
    dispatch(b, e, rvl_mtl_kv_append_dispatch(&a));
    a.rope_mode = RVL_MTL_ROPE_NONE; /* values are not rotated */
    rvl_mtl_enc_set_bytes(e, 0, &a, sizeof a);
    bind(e, 1, v);
    rvl_mtl_enc_set_buffer(e, 2, b->layers[layer].vc, 0);
    dispatch(b, e, rvl_mtl_kv_append_dispatch(&a));
}

static void op_attend(rvl_backend *b, uint32_t layer, rvl_bt q, size_t q_stride, uint32_t pos0,
                      uint32_t nb, rvl_bt out, size_t out_stride)
{
    const rvl_hparams *hp = b->hp;
    const mtl_layer *L = &b->layers[layer];
    rvl_mtl_attn_args a = {
        .k_page_stride = b->kv_page_stride, .k_head_stride = b->kv_head_stride,
        .v_page_stride = b->kv_page_stride, .v_head_stride = b->kv_head_stride,
        .q_stride = q_stride, .out_stride = out_stride, .head_dim = (int32_t)hp->head_dim,
        .n_head = (int32_t)hp->n_head, .n_head_kv = (int32_t)hp->n_head_kv,
        .scale = b->kq_scale, .q_f16 = b->kv_fmt == RVL_MTL_KV_F16, .k_fmt = b->kv_fmt,
        .v_fmt = b->kv_fmt, .page_tokens = PAGE, .rope_mode = RVL_MTL_ROPE_NONE,
        .rope_dim = (int32_t)hp->rope_dim};
    rvl_mtl_encoder *e = enc(b);
    rvl_mtl_enc_set_buffer(e, 2, L->kc, 0);
    rvl_mtl_enc_set_buffer(e, 3, L->vc, 0);
    rvl_mtl_enc_set_buffer(e, 4, b->page_table, 0);
    if (nb == 1) {
        /* flash decode: split-K over runs of pages, then the reduce */
        const int n_kv = (int)pos0 + 1, pages = (n_kv + PAGE - 1) / PAGE;
        a.q_pos = (int32_t)pos0;
        a.n_kv = n_kv;
        a.n_chunks = pages < MAX_CHUNKS ? pages : MAX_CHUNKS;
        rvl_mtl_enc_set_pipeline(e, b->pl.dec);
        rvl_mtl_enc_set_bytes(e, 0, &a, sizeof a);
        bind(e, 1, q);
        rvl_mtl_enc_set_buffer(e, 5, b->partials, 0);
        dispatch(b, e, rvl_mtl_decode_dispatch(&a));
        rvl_mtl_enc_set_pipeline(e, b->pl.red);
        rvl_mtl_enc_set_buffer(e, 1, b->partials, 0);
        bind(e, 2, out);
        dispatch(b, e, rvl_mtl_reduce_dispatch(&a));
    } else {
        /* prefill: causal over positions 0 .. pos0 + nb - 1 (q already rotated) */
        a.p0 = (int32_t)pos0;
        a.n_q = (int32_t)nb;
        rvl_mtl_enc_set_pipeline(e, b->pl.pf);
        rvl_mtl_enc_set_bytes(e, 0, &a, sizeof a);
        bind(e, 1, q);
        bind(e, 5, out);
        rvl_mtl_enc_set_buffer(e, 6, b->rope_cos, 0);
        rvl_mtl_enc_set_buffer(e, 7, b->rope_sin, 0);
        dispatch(b, e, rvl_mtl_prefill_dispatch(&a));
    }
}

static int op_sync(rvl_backend *b, rvl_bt x, float *dst, size_t n)
{
    int rc = flush(b);
    if (rc == 0 && dst)
        rc = rvl_mtl_buffer_download((rvl_mtl_buffer *)x.buf, x.off, dst, n * sizeof(float));
    return rc;
}

/* ====================================================================
 * The forward pass: only the table's ops and the hyper-parameters
 * ==================================================================== */

/* nb tokens at positions pos0..; logits (vocab floats apart) of every
 * token when `all`, else of the last one, into b->logits_dev. */
static void forward_chunk(rvl_backend *b, const rvl_backend_ops *o, const int32_t *tokens,
                          uint32_t nb, uint32_t pos0, bool all)
{
    const rvl_hparams *hp = b->hp;
    const uint32_t dim = hp->n_embd, hd = hp->head_dim, ff = hp->n_ff;
    const uint32_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    const size_t xbs = dim > q_dim ? dim : q_dim;
    const rvl_bt x = T(b->x, 0), xb = T(b->xb, 0), q = T(b->q, 0), k = T(b->k, 0),
                 v = T(b->v, 0), hb = T(b->hb, 0), hb2 = T(b->hb2, 0), xo = T(b->xo, 0);

    o->embed(b, tokens, nb, x, dim);                                   // (nb, dim)
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        /* attention block */
        o->rmsnorm(b, x, dim, o->vec(b, l, RVL_WEIGHT_ATTN_NORM), xb, xbs, dim, nb, hp->rms_eps);
        o->matmul(b, o->weight(b, l, RVL_WEIGHT_Q), xb, xbs, q, q_dim, nb);   // (nb, q_dim)
        o->matmul(b, o->weight(b, l, RVL_WEIGHT_K), xb, xbs, k, kv_dim, nb);  // (nb, kv_dim)
        o->matmul(b, o->weight(b, l, RVL_WEIGHT_V), xb, xbs, v, kv_dim, nb);  // (nb, kv_dim)
        if (hp->block.qkv_bias) {
            o->add_row(b, q, q_dim, o->vec(b, l, RVL_WEIGHT_BQ), q_dim, nb);
            o->add_row(b, k, kv_dim, o->vec(b, l, RVL_WEIGHT_BK), kv_dim, nb);
            o->add_row(b, v, kv_dim, o->vec(b, l, RVL_WEIGHT_BV), kv_dim, nb);
        }
        o->rope(b, q, q_dim, hp->n_head, pos0, nb);
        o->kv_append(b, l, k, v, kv_dim, pos0, nb);                    // keys rotated there
        o->attend(b, l, q, q_dim, pos0, nb, xb, xbs);                  // (nb, q_dim) in xb
        o->matmul(b, o->weight(b, l, RVL_WEIGHT_O), xb, xbs, xo, dim, nb);
        o->add(b, x, xo, (size_t)nb * dim);

        /* SwiGLU feed-forward block */
        o->rmsnorm(b, x, dim, o->vec(b, l, RVL_WEIGHT_FFN_NORM), xb, xbs, dim, nb, hp->rms_eps);
        o->matmul(b, o->weight(b, l, RVL_WEIGHT_GATE), xb, xbs, hb, ff, nb);  // (nb, ff)
        o->matmul(b, o->weight(b, l, RVL_WEIGHT_UP), xb, xbs, hb2, ff, nb);   // (nb, ff)
        o->swiglu(b, hb, hb2, (size_t)nb * ff);
        o->matmul(b, o->weight(b, l, RVL_WEIGHT_DOWN), hb, ff, xo, dim, nb);
        o->add(b, x, xo, (size_t)nb * dim);
    }

    const rvl_bt onorm = o->vec(b, 0, RVL_WEIGHT_OUTPUT_NORM), logits = T(b->logits_dev, 0);
    if (all) {
        o->rmsnorm(b, x, dim, onorm, xb, xbs, dim, nb, hp->rms_eps);
        o->matmul(b, o->weight(b, 0, RVL_WEIGHT_OUTPUT), xb, xbs, logits, hp->n_vocab, nb);
    } else {
        o->rmsnorm(b, T(b->x, (size_t)(nb - 1) * dim), dim, onorm, xb, xbs, dim, 1, hp->rms_eps);
        o->matmul(b, o->weight(b, 0, RVL_WEIGHT_OUTPUT), xb, xbs, logits, hp->n_vocab, 1);
    }
}

/* ====================================================================
 * Session
 * ==================================================================== */

/* the context (lib/engine/ctx.c) has checked the tokens */
static int mtl_decode(rvl_backend *b, const int32_t *tokens, uint32_t n, const float **logits)
{
    const rvl_hparams *hp = b->hp;
    for (uint32_t i = 0; i < n; i += RVL_UBATCH) {
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        const uint32_t nb = n - i < RVL_UBATCH ? n - i : RVL_UBATCH;
        forward_chunk(b, &rvl_metal_backend_ops, tokens + i, nb, b->pos, b->all_logits);
        float *dst = b->all_logits ? b->logits + (size_t)i * hp->n_vocab : b->logits;
        const size_t rows = b->all_logits ? nb : 1;
        int rc = op_sync(b, T(b->logits_dev, 0), dst, rows * hp->n_vocab);
        if (rc < 0)
            return rc;
        b->pos += nb;
    }
    if (logits)
        *logits = b->logits;
    return 0;
}

static uint32_t mtl_pos(const rvl_backend *b) { return b->pos; }
static void mtl_reset(rvl_backend *b) { b->pos = 0; }
/* pos <= b->pos (checked by the context) */
static int mtl_truncate(rvl_backend *b, uint32_t pos)
{
    b->pos = pos; /* later appends overwrite the rows past pos */
    return 0;
}
/* f16 or f32 rows of keys and values, every tier alike */
static double mtl_kv_token_bytes(const rvl_backend *b, int tier)
{
    (void)tier;
    return 2.0 * b->hp->n_layer * b->hp->n_head_kv * b->hp->head_dim *
           (b->kv_fmt == RVL_MTL_KV_F32 ? 4 : 2);
}
static const char *mtl_device_name(const rvl_backend *b) { return rvl_mtl_device_name(b->dev); }

static void mtl_close(rvl_backend *b)
{
    if (!b)
        return;
    if (b->enc)
        rvl_mtl_encoder_commit_wait(b->enc);
    if (b->layers) {
        for (uint32_t l = 0; l < b->hp->n_layer; l++) {
            for (int r = 0; r < RVL_WEIGHT_OUTPUT; r++)
                rvl_mtl_buffer_free(b->layers[l].w[r].buf);
            rvl_mtl_buffer_free(b->layers[l].kc);
            rvl_mtl_buffer_free(b->layers[l].vc);
        }
        free(b->layers);
    }
    rvl_mtl_buffer_free(b->output.buf);
    rvl_mtl_buffer *bufs[] = {b->norm_w, b->bias, b->rope_cos, b->rope_sin, b->positions,
                              b->page_table, b->x, b->xb, b->q, b->k, b->v, b->hb, b->hb2,
                              b->xo, b->logits_dev, b->partials};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        rvl_mtl_buffer_free(bufs[i]);
    free(b->logits);
    rvl_mtl_device_close(b->dev);
    free(b);
}

static const char *const role_names[RVL_WEIGHT_OUTPUT + 1] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "output"};

/* A weight onto the device, with its matmul pipelines; RVL_EUNSUPPORTED
 * naming the tensor when no Metal kernel multiplies its format. */
static int load_weight(rvl_backend *b, rvl_bw *dst, uint32_t layer, rvl_weight_role role)
{
    char tname[64], name[64];
    rvl_weight_view wv;
    const rvl_weight_view *w = &wv;
    int rc = rvl_model_weight(b->m, layer, role, &wv);
    if (rc < 0)
        return rc;
    if (role == RVL_WEIGHT_OUTPUT)
        snprintf(tname, sizeof tname, "%s.weight", b->hp->tied_output ? "token_embd" : "output");
    else
        snprintf(tname, sizeof tname, "blk.%u.%s.weight", layer, role_names[role]);
    const char *sfx = w->type == RVL_TYPE_F32   ? "f32"
                      : w->type == RVL_TYPE_F16 ? "f16"
                                                : rvl_mtl_matmul_suffix(w->type);
    if (!sfx) {
        const rvl_type_info *ti = rvl_type_get(w->type);
        return rvl_seterr(RVL_EUNSUPPORTED, "tensor %s: format %s has no Metal matmul kernel "
                          "(formats with one: F32 F16 Q4_0 Q8_0 Q4_K Q6_K RVL_I4S/I4A MLX_A4_G64)",
                          tname, ti ? ti->name : "unknown");
    }
    snprintf(name, sizeof name, "rvl_mul_mv_%s_f32", sfx);
    if ((rc = rvl_mtl_pipeline_get(b->dev, name, &dst->mv)) < 0)
        return rc;
    dst->mm = NULL;
    if (w->type != RVL_TYPE_F32 && w->type != RVL_TYPE_F16) {
        snprintf(name, sizeof name, "rvl_mul_mm_%s_f32", sfx);
        if ((rc = rvl_mtl_pipeline_get(b->dev, name, &dst->mm)) < 0)
            return rc;
    }
    dst->row_bytes = w->row_bytes;
    dst->k = (int32_t)w->ne0;
    dst->n_rows = (int32_t)w->ne1;
    return rvl_mtl_buffer_new(b->dev, w->row_bytes * w->ne1, w->data, tname, &dst->buf);
}

static int new_buf(rvl_backend *b, rvl_mtl_buffer **out, size_t bytes, const char *label)
{
    return rvl_mtl_buffer_new(b->dev, bytes, NULL, label, out);
}

/* A vector weight (norm, bias) dequantized into dst. */
static int load_vec(const rvl_model *m, uint32_t layer, rvl_weight_role role, float *dst)
{
    rvl_weight_view w;
    int rc = rvl_model_weight(m, layer, role, &w);
    return rc < 0 ? rc : rvl_model_weight_rows(&w, 0, 1, dst);
}

/* The block recipe features forward_chunk implements (rvl_family_missing):
 * the llama block, with Q/K/V biases when the recipe has them. */
static const rvl_block mtl_block = {
    .norm_pre_attn = true, .norm_pre_ffn = true, .qkv_bias = true, .act = RVL_ACT_SILU,
};

/* p: the context's parameters, n_ctx and n_batch resolved */
static int mtl_open(rvl_backend **out, const rvl_model *m, const rvl_ctx_params *p)
{
    const rvl_hparams *hp = rvl_model_hparams(m);
    const size_t dim = hp->n_embd, hd = hp->head_dim, ff = hp->n_ff;
    const size_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    int rc;

    *out = NULL;
    if (p->kv_split && p->kv_type_k != p->kv_type_v)
        return rvl_seterr(RVL_EUNSUPPORTED, "different KV cache types for keys and values are not "
                          "supported by the metal backend (one of f16, f32 for both)");
    const rvl_kv_type kvt = p->kv_split ? p->kv_type_k : p->kv_type;
    if (kvt != RVL_KV_F16 && kvt != RVL_KV_F32)
        return rvl_seterr(RVL_EUNSUPPORTED, "KV cache type %s is not supported by the metal "
                          "backend (f16, f32)",
                          rvl_kv_type_name(kvt) ? rvl_kv_type_name(kvt) : "unknown");
    if (hd > RVL_MTL_ATTN_MAX_HD || hp->rope_dim > hd || hp->rope_dim % 2)
        return rvl_seterr(RVL_EUNSUPPORTED, "head_dim %zu / rope_dim %u: the Metal kernels take "
                          "head_dim <= %d and an even rope_dim <= head_dim", hd, hp->rope_dim,
                          RVL_MTL_ATTN_MAX_HD);
    if (dim % 4 || ff % 4 || hd % 4)
        return rvl_seterr(RVL_EUNSUPPORTED, "the Metal backend needs n_embd, n_ff and head_dim "
                          "multiples of 4 (%zu, %zu, %zu)", dim, ff, hd);
    if (hp->n_head % hp->n_head_kv)
        return rvl_seterr(RVL_EFORMAT, "%u query heads are not a multiple of %u KV heads",
                          hp->n_head, hp->n_head_kv);
    if (hp->has_longrope)
        return rvl_seterr(RVL_EUNSUPPORTED, "architecture '%s': LongRoPE (rope_factors_long/short) "
                          "is not implemented by the metal backend", hp->arch);
    const char *miss = rvl_family_missing(&hp->block, &mtl_block);
    if (miss)
        return rvl_seterr(RVL_EUNSUPPORTED, "architecture '%s': the block feature '%s' is not "
                          "implemented by the metal backend", hp->arch, miss);

    rvl_backend *b = calloc(1, sizeof *b);
    if (!b)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    b->m = m;
    b->hp = hp;
    b->n_ctx = p->n_ctx;
    b->all_logits = p->all_logits;
    b->n_batch = p->n_batch;
    b->kv_fmt = kvt == RVL_KV_F32 ? RVL_MTL_KV_F32 : RVL_MTL_KV_F16;
    b->kv_head_stride = (uint64_t)PAGE * hd * (kvt == RVL_KV_F32 ? 4 : 2);
    b->kv_page_stride = b->kv_head_stride * hp->n_head_kv;
    const uint32_t n_pages = (b->n_ctx + PAGE - 1) / PAGE;

    rvl_hparams rh;
    if ((rc = rvl_rope_hparams(hp, p, &rh)) < 0 ||
        (rc = rvl_model_weight(m, 0, RVL_WEIGHT_TOK_EMBD, &b->tok_embd)) < 0 ||
        (rc = rvl_mtl_device_open(&b->dev, NULL)) < 0)
        goto fail;

    static const struct { size_t off; const char *name; } pipes[] = {
        {offsetof(rvl_backend, pl.norm), "rvl_rms_norm_f32"},
        {offsetof(rvl_backend, pl.rope), "rvl_rope_f32"},
        {offsetof(rvl_backend, pl.add), "rvl_add_f32"},
        {offsetof(rvl_backend, pl.swiglu), "rvl_swiglu_f32"},
        {offsetof(rvl_backend, pl.kv), "rvl_kv_append_f32"},
        {offsetof(rvl_backend, pl.dec), "rvl_attn_decode_f32"},
        {offsetof(rvl_backend, pl.red), "rvl_attn_reduce_f32"},
        {offsetof(rvl_backend, pl.pf), "rvl_attn_prefill_f32"},
    };
    for (size_t i = 0; i < sizeof pipes / sizeof pipes[0]; i++)
        if ((rc = rvl_mtl_pipeline_get(b->dev, pipes[i].name,
                                       (rvl_mtl_pipeline **)((char *)b + pipes[i].off))) < 0)
            goto fail;

    /* weights, as they are in the file (one buffer per tensor) */
    b->layers = calloc(hp->n_layer, sizeof *b->layers);
    if (!b->layers) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        for (int r = 0; r < RVL_WEIGHT_OUTPUT; r++)
            if ((rc = load_weight(b, &b->layers[l].w[r], l, (rvl_weight_role)r)) < 0)
                goto fail;
        if ((rc = new_buf(b, &b->layers[l].kc, n_pages * b->kv_page_stride, "k cache")) < 0 ||
            (rc = new_buf(b, &b->layers[l].vc, n_pages * b->kv_page_stride, "v cache")) < 0)
            goto fail;
    }
    if ((rc = load_weight(b, &b->output, 0, RVL_WEIGHT_OUTPUT)) < 0)
        goto fail;

    /* norms and biases dequantized to f32; RoPE tables; positions; pages */
    const size_t half = hp->rope_dim / 2, nbias = q_dim + 2 * kv_dim;
    const size_t xbs = dim > q_dim ? dim : q_dim;
    if ((rc = new_buf(b, &b->norm_w, (2 * hp->n_layer + 1) * dim * 4, "norm weights")) < 0 ||
        (hp->block.qkv_bias &&
         (rc = new_buf(b, &b->bias, hp->n_layer * nbias * 4, "qkv biases")) < 0) ||
        (rc = new_buf(b, &b->rope_cos, b->n_ctx * half * 4 + 4, "rope cos")) < 0 ||
        (rc = new_buf(b, &b->rope_sin, b->n_ctx * half * 4 + 4, "rope sin")) < 0 ||
        (rc = new_buf(b, &b->positions, (size_t)b->n_ctx * 4, "positions")) < 0 ||
        (rc = new_buf(b, &b->page_table, (size_t)n_pages * 4, "page table")) < 0 ||
        (rc = new_buf(b, &b->x, RVL_UBATCH * dim * 4, "x")) < 0 ||
        (rc = new_buf(b, &b->xb, RVL_UBATCH * xbs * 4, "xb")) < 0 ||
        (rc = new_buf(b, &b->q, RVL_UBATCH * q_dim * 4, "q")) < 0 ||
        (rc = new_buf(b, &b->k, RVL_UBATCH * kv_dim * 4, "k")) < 0 ||
        (rc = new_buf(b, &b->v, RVL_UBATCH * kv_dim * 4, "v")) < 0 ||
        (rc = new_buf(b, &b->hb, RVL_UBATCH * ff * 4, "hb")) < 0 ||
        (rc = new_buf(b, &b->hb2, RVL_UBATCH * ff * 4, "hb2")) < 0 ||
        (rc = new_buf(b, &b->xo, RVL_UBATCH * dim * 4, "xo")) < 0 ||
        (rc = new_buf(b, &b->logits_dev, (size_t)RVL_UBATCH * hp->n_vocab * 4, "logits")) < 0 ||
        (rc = new_buf(b, &b->partials, (size_t)MAX_CHUNKS * hp->n_head * (hd + 2) * 4,
                      "attention partials")) < 0)
        goto fail;
    b->logits = calloc((size_t)b->n_batch * hp->n_vocab, sizeof(float));
    if (!b->logits) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory for the logits");
        goto fail;
    }
    float *nw = rvl_mtl_buffer_contents(b->norm_w);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        if ((rc = load_vec(m, l, RVL_WEIGHT_ATTN_NORM, nw + 2 * l * dim)) < 0 ||
            (rc = load_vec(m, l, RVL_WEIGHT_FFN_NORM, nw + (2 * l + 1) * dim)) < 0)
            goto fail;
        if (b->bias) {
            float *bb = (float *)rvl_mtl_buffer_contents(b->bias) + l * nbias;
            if ((rc = load_vec(m, l, RVL_WEIGHT_BQ, bb)) < 0 ||
                (rc = load_vec(m, l, RVL_WEIGHT_BK, bb + q_dim)) < 0 ||
                (rc = load_vec(m, l, RVL_WEIGHT_BV, bb + q_dim + kv_dim)) < 0)
                goto fail;
        }
    }
    if ((rc = load_vec(m, 0, RVL_WEIGHT_OUTPUT_NORM, nw + 2 * hp->n_layer * dim)) < 0)
        goto fail;
    rvl_weight_view freqs = {0};
    if (hp->has_rope_freqs && (rc = rvl_model_weight(m, 0, RVL_WEIGHT_ROPE_FREQS, &freqs)) < 0)
        goto fail;
    float attn_mul;
    rvl_rope_tables(&rh, freqs.data, b->n_ctx, rvl_mtl_buffer_contents(b->rope_cos),
                    rvl_mtl_buffer_contents(b->rope_sin), &attn_mul);
    b->kq_scale = attn_mul / sqrtf((float)hd);
    int32_t *pos = rvl_mtl_buffer_contents(b->positions), *pt = rvl_mtl_buffer_contents(b->page_table);
    for (uint32_t i = 0; i < b->n_ctx; i++)
        pos[i] = (int32_t)i;
    for (uint32_t i = 0; i < n_pages; i++)
        pt[i] = (int32_t)i;
    *out = b;
    return 0;

fail:
    mtl_close(b);
    return rc;
}

const rvl_backend_ops rvl_metal_backend_ops = {
    .name = "metal",
    .open = mtl_open,
    .close = mtl_close,
    .decode = mtl_decode,
    .pos = mtl_pos,
    .reset = mtl_reset,
    .truncate = mtl_truncate,
    .device_name = mtl_device_name,
    .kv_token_bytes = mtl_kv_token_bytes,
    .weight = op_weight,
    .vec = op_vec,
    .embed = op_embed,
    .rmsnorm = op_rmsnorm,
    .matmul = op_matmul,
    .add_row = op_add_row,
    .add = op_add,
    .swiglu = op_swiglu,
    .rope = op_rope,
    .kv_append = op_kv_append,
    .attend = op_attend,
    .sync = op_sync,
};
