// rvl_msl_common.h - device functions shared by the .metal files that
// read or write the KV cache and apply RoPE (attn.metal, kv.metal, rope.metal).
// Metal Shading Language only: include it after <metal_stdlib>.
//
//   RoPE     rotation of pairs by lib/engine/rope.c's cos/sin tables;
//   rotation kernels/kvq.h's TurboQuant rotation x -> H D x (D the fixed
//            +-1 diagonal of rvl_kvq_sign, H the orthonormal Walsh-Hadamard
//            matrix) on rows held in threadgroup memory, with the same
//            float operations as rvl_kvq_rotate / rvl_kvq_unrotate;
//   KV pages the row addressing of kernels/attn.h and the page layouts of
//            kernels/kvq.h (F16, Q8, TQ4) plus attn.h's f32 rows.
#ifndef RVL_MSL_COMMON_H
#define RVL_MSL_COMMON_H

#ifndef __METAL_VERSION__
#error "rvl_msl_common.h is Metal Shading Language"
#endif

#include "rvl_metal_args.h"

// ---------------------------------------------------------------------
// RoPE
// ---------------------------------------------------------------------

// The element indices of pair i: (2i, 2i + 1) or, NeoX, (i, i + rope_dim/2).
static inline void rope_pair(int mode, int rope_dim, int i, thread int &ia, thread int &ib)
{
    if (mode == RVL_MTL_ROPE_NEOX) {
        ia = i;
        ib = i + rope_dim / 2;
    } else {
        ia = 2 * i;
        ib = 2 * i + 1;
    }
}

// Pairs [0, rope_dim/2) of the rows of v (nrows rows of stride floats) at
// positions pos0 + row / rows_per_pos, split over the nt threads: the
// rotation of lib/engine/forward.c's rope(): x0 c - x1 s, x0 s + x1 c.
static inline void rope_rows_tg(threadgroup float *v, int stride, int nrows, int rows_per_pos,
                                int pos0, int mode, int rope_dim, device const float *cos_t,
                                device const float *sin_t, ushort tid, ushort nt)
{
    const int half_ = rope_dim / 2;
    for (int idx = tid; idx < nrows * half_; idx += nt) {
        const int r = idx / half_, i = idx % half_;
        const ulong pos = ulong(pos0 + r / rows_per_pos);
        const float c = cos_t[pos * half_ + i], s = sin_t[pos * half_ + i];
        int ia, ib;
        rope_pair(mode, rope_dim, i, ia, ib);
        threadgroup float *x = v + r * stride;
        const float x0 = x[ia], x1 = x[ib];
        x[ia] = x0 * c - x1 * s;
        x[ib] = x0 * s + x1 * c;
    }
}

// ---------------------------------------------------------------------
// TurboQuant rotation (kernels/kvq.h)
// ---------------------------------------------------------------------

// Sign i of D: bit 0 of splitmix64(0x9e3779b97f4a7c15 * (i + 1)).
static inline float kvq_sign(int i)
{
    ulong z = 0x9e3779b97f4a7c15ul * ulong(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ul;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebul;
    z ^= z >> 31;
    return (z & 1) ? 1.0f : -1.0f;
}

// In place, the rows of x (nrows rows of stride floats, n a power of two):
// x <- H x, the butterflies of rvl_kvq_fwht stage by stage, then the
// 1/sqrt(n) scale. Every thread of the threadgroup must call it (it holds
// threadgroup barriers); the rows must be complete (barrier) before.
static inline void fwht_rows_tg(threadgroup float *x, int stride, int nrows, int n, ushort tid,
                                ushort nt)
{
    const int hn = n / 2;
    for (int h = 1; h < n; h *= 2) {
        for (int idx = tid; idx < nrows * hn; idx += nt) {
            const int r = idx / hn, p = idx % hn;
            const int j = (p / h) * 2 * h + p % h;
            threadgroup float *v = x + r * stride;
            const float a = v[j], b = v[j + h];
            v[j] = a + b;
            v[j + h] = a - b;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const float s = 1.0f / sqrt(float(n));
    for (int idx = tid; idx < nrows * n; idx += nt)
        x[(idx / n) * stride + idx % n] *= s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

// x <- D x on the rows (no barrier inside: call between barriers).
static inline void signs_rows_tg(threadgroup float *x, int stride, int nrows, int n, ushort tid,
                                 ushort nt)
{
    for (int idx = tid; idx < nrows * n; idx += nt)
        x[(idx / n) * stride + idx % n] *= kvq_sign(idx % n);
}

// The Lloyd-Max codebook of N(0, 1) with 16 levels (rvl_kvq_codebook(16)).
constexpr constant static float kvq_cb16[16] = {
    -2.732589570995f, -2.069017226531f, -1.618046386022f, -1.256231197347f,
    -0.942340456487f, -0.656759118532f, -0.388048299490f, -0.128395029851f,
    0.128395029851f,  0.388048299490f,  0.656759118532f,  0.942340456487f,
    1.256231197347f,  1.618046386022f,  2.069017226531f,  2.732589570995f,
};

// ---------------------------------------------------------------------
// KV pages
// ---------------------------------------------------------------------

static inline bool kv_is_tq(int fmt)
{
    return fmt == RVL_MTL_KV_TQ4;
}

// Bytes of one row's codes (kernels/kvq.h's rvl_kvq_row_bytes; f32 rows).
static inline int kv_row_bytes(int fmt, int hd)
{
    switch (fmt) {
    case RVL_MTL_KV_F32: return 4 * hd;
    case RVL_MTL_KV_Q8: return hd;
    case RVL_MTL_KV_TQ4: return hd / 2;
    default: return 2 * hd;   // F16
    }
}

// One row of the cache: its page (for the side data) and its codes.
struct kv_row {
    device const uchar *page;
    device const uchar *codes;
    int j;                    // row in the page
};

static inline kv_row kv_locate(device const uchar *base, device const int *page_table,
                               ulong page_stride, ulong head_stride, int page_tokens, int fmt,
                               int hd, int kh, int t)
{
    const int pg = t / page_tokens;
    kv_row r;
    r.j = t - pg * page_tokens;
    r.page = base + ulong(page_table[pg]) * page_stride + ulong(kh) * head_stride;
    r.codes = r.page + ulong(r.j) * ulong(kv_row_bytes(fmt, hd));
    return r;
}

static inline device const half *kv_side(int fmt, int hd, device const uchar *page)
{
    return (device const half *)(page + RVL_MTL_KV_PAGE * kv_row_bytes(fmt, hd));
}

// Element d of a row as the attention sees it: F16 / F32 / Q8 the value,
// TQ4 the rotated-domain value g * c_d.
static inline float kv_elem(int fmt, int hd, kv_row r, int d)
{
    switch (fmt) {
    case RVL_MTL_KV_F32: return ((device const float *)r.codes)[d];
    case RVL_MTL_KV_Q8:
        return float(kv_side(fmt, hd, r.page)[r.j * ((hd + 31) / 32) + d / 32]) *
               float(((device const char *)r.codes)[d]);
    case RVL_MTL_KV_TQ4:
        return float(kv_side(fmt, hd, r.page)[r.j]) * kvq_cb16[(r.codes[d >> 1] >> ((d & 1) * 4)) & 15];
    default: return float(((device const half *)r.codes)[d]);
    }
}

// q . row over hd elements (q in threadgroup memory, rotated for TQ4):
// per-group / per-row scales applied once, as kernels/ref's page readers.
static inline float kv_dot(int fmt, int hd, kv_row r, threadgroup const float *q)
{
    float a = 0.0f;
    switch (fmt) {
    case RVL_MTL_KV_F32: {
        device const float *k = (device const float *)r.codes;
        for (int d = 0; d < hd; d++)
            a += q[d] * k[d];
        break;
    }
    case RVL_MTL_KV_Q8: {
        device const char *k = (device const char *)r.codes;
        const int ng = (hd + 31) / 32;
        device const half *sd = kv_side(fmt, hd, r.page) + r.j * ng;
        for (int g = 0; g < ng; g++) {
            const int e = min(hd, 32 * g + 32);
            float t = 0.0f;
            for (int d = 32 * g; d < e; d++)
                t += q[d] * float(k[d]);
            a += float(sd[g]) * t;
        }
        break;
    }
    case RVL_MTL_KV_TQ4: {
        for (int d = 0; d < hd; d += 2) {
            const uchar b = r.codes[d >> 1];
            a += q[d] * kvq_cb16[b & 15] + q[d + 1] * kvq_cb16[b >> 4];
        }
        a *= float(kv_side(fmt, hd, r.page)[r.j]);
        break;
    }
    default: {
        device const half *k = (device const half *)r.codes;
        for (int d = 0; d < hd; d++)
            a += q[d] * float(k[d]);
        break;
    }
    }
    return a;
}

#endif
