/*
 * attn_dispatch.c - the attention variants per ISA (attn.h), chosen by
 * dispatch.h's rvl_dispatch_isa() (so RUVLLM_ISA applies), and the parts
 * every variant shares: parameter check, workspace sizes, the split-K
 * reduce, and single-threaded decode.
 */
#include <math.h>
#include <string.h>

#include "attn.h"
#include "dispatch.h"

static const rvl_attn_kernels variants[RVL_ISA_COUNT] = {
    [RVL_ISA_REF] = { "ref", rvl_attn_decode_chunk_ref, rvl_attn_prefill_ref },
#if defined(__x86_64__) || defined(__i386__)
    [RVL_ISA_AVX2] = { "avx2", rvl_attn_decode_chunk_avx2, rvl_attn_prefill_avx2 },
    [RVL_ISA_AVX512] = { "avx512", rvl_attn_decode_chunk_avx512, rvl_attn_prefill_avx512 },
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
    [RVL_ISA_NEON] = { "neon", rvl_attn_decode_chunk_neon, rvl_attn_prefill_neon },
#endif
};

const rvl_attn_kernels *rvl_attn_get_isa(int isa)
{
    if (isa < 0 || isa >= RVL_ISA_COUNT || !variants[isa].name || !rvl_dispatch_isa_runnable(isa))
        return NULL;
    return &variants[isa];
}

const rvl_attn_kernels *rvl_attn_get(void)
{
    const rvl_attn_kernels *k = rvl_attn_get_isa(rvl_dispatch_isa());
    return k ? k : &variants[RVL_ISA_REF];
}

const char *rvl_attn_check(const rvl_attn_params *p)
{
    if (p->head_dim < 1 || p->head_dim > RVL_ATTN_MAX_HEAD_DIM)
        return "head_dim out of range";
    if (p->n_head_kv < 1 || p->n_head < 1 || p->n_head > 4096 || p->n_head % p->n_head_kv)
        return "n_head is not a multiple of n_head_kv";
    if (!(p->scale > 0) || !isfinite(p->scale))
        return "scale is not a positive number";
    if (!(p->softcap >= 0) || !isfinite(p->softcap))
        return "softcap is negative or not a number";
    if (p->window < 0)
        return "negative window";
    if (p->kv_type != RVL_ATTN_F16 && p->kv_type != RVL_ATTN_F32)
        return "unknown kv_type";
    if (p->page_tokens < 1)
        return "page_tokens < 1";
    const size_t es = p->kv_type == RVL_ATTN_F16 ? 2 : 4;
    if (p->head_stride / es / (size_t)p->head_dim < (size_t)p->page_tokens)
        return "head_stride smaller than a page of one head";
    if (!p->k || !p->v || !p->page_table)
        return "no cache";
    for (int h = 0; p->sinks && h < p->n_head; h++)
        if (isnan(p->sinks[h]) || p->sinks[h] == INFINITY)
            return "an attention-sink logit is NaN or +inf";
    return NULL;
}

size_t rvl_attn_ws_size(const rvl_attn_params *p)
{
    const size_t r = (size_t)rvl_attn_tile_rows(p), hd = (size_t)p->head_dim;
    return (2 * rvl_attn_pad16(r * hd) + rvl_attn_pad16(r * RVL_ATTN_BLOCK) +
            2 * rvl_attn_pad16(r)) * sizeof(float);
}

size_t rvl_attn_partials_size(const rvl_attn_params *p, int n_chunks)
{
    return (size_t)n_chunks * (size_t)p->n_head * ((size_t)p->head_dim + 2);
}

float rvl_attn_norm(const rvl_attn_params *p, int h, float m, float l, float *inv)
{
    if (!p->sinks) {
        *inv = l > 0 ? 1.0f / l : 0.0f;
        return 1.0f;
    }
    if (m == -INFINITY) { /* no key: acc is 0 */
        *inv = 0.0f;
        return 0.0f;
    }
    const float sk = p->sinks[h], mx = m > sk ? m : sk;
    const float a = expf(m - mx), la = l * a, e = expf(sk - mx);
    *inv = 1.0f / (la + e);
    return a;
}

void rvl_attn_decode_reduce(const rvl_attn_params *p, int n_chunks, const float *partials, int h0,
                            int h1, float *out)
{
    const size_t hd = (size_t)p->head_dim, ps = hd + 2;
    for (int h = h0; h < h1; h++) {
        float *o = out + (size_t)h * hd;
        float mx = -INFINITY;
        for (int c = 0; c < n_chunks; c++) {
            const float m = partials[((size_t)c * p->n_head + h) * ps];
            if (m > mx)
                mx = m;
        }
        memset(o, 0, hd * sizeof *o);
        if (mx == -INFINITY)
            continue; /* no key at all */
        float l = 0;
        for (int c = 0; c < n_chunks; c++) {
            const float *pc = partials + ((size_t)c * p->n_head + h) * ps;
            if (pc[0] == -INFINITY)
                continue;
            const float wgt = expf(pc[0] - mx);
            l += pc[1] * wgt;
            for (size_t d = 0; d < hd; d++)
                o[d] += pc[2 + d] * wgt;
        }
        if (p->sinks) { /* the merged {mx, l, o}, normalized as prefill does */
            float inv;
            const float a = rvl_attn_norm(p, h, mx, l, &inv);
            for (size_t d = 0; d < hd; d++)
                o[d] = o[d] * a * inv;
            continue;
        }
        const float inv = l > 0 ? 1.0f / l : 0.0f;
        for (size_t d = 0; d < hd; d++)
            o[d] *= inv;
    }
}

void rvl_attn_decode(const rvl_attn_kernels *kk, const rvl_attn_params *p, const float *q,
                     int q_pos, int n_kv, int n_chunks, float *partials, float *out, void *ws)
{
    for (int c = 0; c < n_chunks; c++)
        kk->decode_chunk(p, q, q_pos, n_kv, c, n_chunks, 0, p->n_head_kv, partials, ws);
    rvl_attn_decode_reduce(p, n_chunks, partials, 0, p->n_head, out);
}
