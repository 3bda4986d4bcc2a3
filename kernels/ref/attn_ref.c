/*
 * attn_ref.c - the scalar attention kernels (attn.h), the oracle the SIMD
 * variants are tested against next to the double-precision softmax.
 *
 * One code path for decode and prefill: a tile of rows (query token,
 * query head of one kv head) walks the key blocks of its range (32 keys,
 * aligned inside pages) with an online softmax per row: scores of the
 * block, new running max, rescale of the running sum and accumulator,
 * then the block's exp(s - max) weights the values. Plain float loops,
 * expf and tanhf.
 */
#include <math.h>
#include <string.h>

#include "attn.h"
#include "f16.h"

static float ld(const rvl_attn_params *p, const void *row, int d)
{
    return p->kv_type == RVL_ATTN_F16 ? rvl_f16_to_f32(((const rvl_f16 *)row)[d])
                                      : ((const float *)row)[d];
}

/* The last key of the block that starts at key t (see attn.h). */
static int block_end(const rvl_attn_params *p, int t)
{
    const int pt = p->page_tokens, pg = t / pt;
    const int o = t - pg * pt;
    int e = pg * pt + (o / RVL_ATTN_BLOCK + 1) * RVL_ATTN_BLOCK;
    if (e > (pg + 1) * pt)
        e = (pg + 1) * pt;
    return e - 1;
}

/* Rows r of the tile read q from w->q + r * hd, see keys [lo[r], hi[r]]
 * and keep their state in w->m/l/acc. */
static void tile(const rvl_attn_params *p, int kh, int nrows, const int *lo, const int *hi,
                 const rvl_attn_ws *w)
{
    const int hd = p->head_dim;
    int tmin = lo[0], tmax = hi[0];
    for (int r = 1; r < nrows; r++) {
        if (lo[r] < tmin)
            tmin = lo[r];
        if (hi[r] > tmax)
            tmax = hi[r];
    }
    for (int b0 = tmin; b0 <= tmax;) {
        int be = block_end(p, b0);
        if (be > tmax)
            be = tmax;
        for (int r = 0; r < nrows; r++) {
            const int a = lo[r] > b0 ? lo[r] : b0, e = hi[r] < be ? hi[r] : be;
            if (a > e)
                continue;
            const float *q = w->q + (size_t)r * hd;
            float *s = w->s + (size_t)r * RVL_ATTN_BLOCK;
            float mb = -INFINITY;
            for (int t = a; t <= e; t++) {
                const void *k = rvl_attn_row(p, 0, kh, t);
                float dot = 0;
                for (int d = 0; d < hd; d++)
                    dot += q[d] * ld(p, k, d);
                float x = dot * p->scale;
                if (p->softcap > 0)
                    x = p->softcap * tanhf(x / p->softcap);
                s[t - a] = x;
                if (x > mb)
                    mb = x;
            }
            const float m = w->m[r] > mb ? w->m[r] : mb;
            const float alpha = expf(w->m[r] - m); /* 0 on the first block */
            float *acc = w->acc + (size_t)r * hd;
            float l = w->l[r] * alpha;
            for (int d = 0; d < hd; d++)
                acc[d] *= alpha;
            for (int t = a; t <= e; t++) {
                const float pr = expf(s[t - a] - m);
                const void *v = rvl_attn_row(p, 1, kh, t);
                l += pr;
                for (int d = 0; d < hd; d++)
                    acc[d] += pr * ld(p, v, d);
            }
            w->m[r] = m;
            w->l[r] = l;
        }
        b0 = be + 1;
    }
}

static void load_q(const rvl_attn_params *p, const float *q, float *dst)
{
    for (int d = 0; d < p->head_dim; d++)
        dst[d] = p->q_f16 ? rvl_f16_to_f32(rvl_f32_to_f16(q[d])) : q[d];
}

static void reset(const rvl_attn_params *p, const rvl_attn_ws *w, int nrows)
{
    for (int r = 0; r < nrows; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0;
    }
    memset(w->acc, 0, (size_t)nrows * (size_t)p->head_dim * sizeof(float));
}

void rvl_attn_decode_chunk_ref(const rvl_attn_params *p, const float *q, int q_pos, int n_kv,
                               int chunk, int n_chunks, int kvh0, int kvh1, float *partials,
                               void *ws)
{
    const int hd = p->head_dim, g = p->n_head / p->n_head_kv;
    const rvl_attn_ws w = rvl_attn_ws_split(p, ws);
    int lo, hi, c0, c1;
    rvl_attn_key_range(p, q_pos, n_kv, &lo, &hi);
    rvl_attn_chunk_range(p, lo, hi, chunk, n_chunks, &c0, &c1);
    int los[g], his[g];
    for (int r = 0; r < g; r++) {
        los[r] = c0;
        his[r] = c1;
    }
    for (int kh = kvh0; kh < kvh1; kh++) {
        for (int r = 0; r < g; r++)
            load_q(p, q + (size_t)(kh * g + r) * hd, w.q + (size_t)r * hd);
        reset(p, &w, g);
        if (c0 <= c1)
            tile(p, kh, g, los, his, &w);
        for (int r = 0; r < g; r++) {
            float *o = partials + ((size_t)chunk * p->n_head + (size_t)(kh * g + r)) * (hd + 2);
            o[0] = w.m[r];
            o[1] = w.l[r];
            memcpy(o + 2, w.acc + (size_t)r * hd, (size_t)hd * sizeof(float));
        }
    }
}

void rvl_attn_prefill_ref(const rvl_attn_params *p, const float *q, size_t q_stride, int p0,
                          int nq, int kvh0, int kvh1, float *out, size_t out_stride, void *ws)
{
    const int hd = p->head_dim, g = p->n_head / p->n_head_kv, tt = rvl_attn_tile_tokens(p);
    const rvl_attn_ws w = rvl_attn_ws_split(p, ws);
    int los[tt * g], his[tt * g];
    for (int kh = kvh0; kh < kvh1; kh++)
        for (int i0 = 0; i0 < nq; i0 += tt) {
            const int nt = nq - i0 < tt ? nq - i0 : tt, nrows = nt * g;
            for (int i = 0; i < nt; i++)
                for (int r = 0; r < g; r++) {
                    const int row = i * g + r, pos = p0 + i0 + i;
                    load_q(p, q + (size_t)(i0 + i) * q_stride + (size_t)(kh * g + r) * hd,
                           w.q + (size_t)row * hd);
                    rvl_attn_key_range(p, pos, pos + 1, &los[row], &his[row]);
                }
            reset(p, &w, nrows);
            tile(p, kh, nrows, los, his, &w);
            for (int i = 0; i < nt; i++)
                for (int r = 0; r < g; r++) {
                    const int row = i * g + r;
                    float *o = out + (size_t)(i0 + i) * out_stride + (size_t)(kh * g + r) * hd;
                    float inv;
                    const float a = rvl_attn_norm(p, kh * g + r, w.m[row], w.l[row], &inv);
                    if (p->sinks)
                        for (int d = 0; d < hd; d++)
                            o[d] = w.acc[(size_t)row * hd + d] * a * inv;
                    else
                        for (int d = 0; d < hd; d++)
                            o[d] = w.acc[(size_t)row * hd + d] * inv;
                }
        }
}
