/*
 * dot_ref.c - scalar dot products of a weight row with an activation row
 * in the weight format's vec_dot_type (formats.h):
 *
 *   F32 . F32, F16 . F16, BF16 . BF16 (and F16/BF16 . F32)   double sum
 *   Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4    . Q8_0
 *   Q4_1, Q5_1                         . Q8_1 (uses its s = d*sum(q))
 *   Q2_K .. Q6_K, IQ4_XS               . Q8_K (Q2_K/Q4_K/Q5_K mins via bsums)
 *   RVL_* and MLX_* project formats    . Q8_0
 *
 * Quantized products are exact integer sums within each block or group,
 * scaled and accumulated in float, the structure the SIMD variants share
 * (so they can be compared with a tight tolerance). The reference for the
 * reference is a double loop over dequantized rows (tests/test_formats.c).
 */
#include "ref.h"

#define QK 256

/* ======================================================================
 * Plain types
 * ====================================================================== */

float vec_dot_f32_f32_ref(int64_t n, const void *w, const void *a)
{
    const uint8_t *pw = w, *pa = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)rvl_ld_f32(pw + 4 * i) * rvl_ld_f32(pa + 4 * i);
    return (float)sum;
}

float vec_dot_f16_f16_ref(int64_t n, const void *w, const void *a)
{
    const uint8_t *pw = w, *pa = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)rvl_f16_to_f32(rvl_ld_u16(pw + 2 * i)) *
               rvl_f16_to_f32(rvl_ld_u16(pa + 2 * i));
    return (float)sum;
}

float vec_dot_bf16_bf16_ref(int64_t n, const void *w, const void *a)
{
    const uint8_t *pw = w, *pa = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)rvl_bf16_to_f32(rvl_ld_u16(pw + 2 * i)) *
               rvl_bf16_to_f32(rvl_ld_u16(pa + 2 * i));
    return (float)sum;
}

float vec_dot_f16_f32_ref(int64_t n, const void *w, const void *a)
{
    const uint8_t *pw = w, *pa = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)rvl_f16_to_f32(rvl_ld_u16(pw + 2 * i)) * rvl_ld_f32(pa + 4 * i);
    return (float)sum;
}

float vec_dot_bf16_f32_ref(int64_t n, const void *w, const void *a)
{
    const uint8_t *pw = w, *pa = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)rvl_bf16_to_f32(rvl_ld_u16(pw + 2 * i)) * rvl_ld_f32(pa + 4 * i);
    return (float)sum;
}

/* ======================================================================
 * 32-value formats against Q8_0 / Q8_1
 * ====================================================================== */

/* sum over 32 of q[j] * a[j] */
static inline int idot32(const int *q, const int8_t *a)
{
    int s = 0;
    for (int j = 0; j < 32; j++)
        s += q[j] * a[j];
    return s;
}

float vec_dot_q4_0_q8_0_ref(int64_t n, const void *vw, const void *va)
{
    const block_q4_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        for (int j = 0; j < 16; j++) {
            q[j] = (w[i].qs[j] & 0xF) - 8;
            q[j + 16] = (w[i].qs[j] >> 4) - 8;
        }
        sum += (float)idot32(q, a[i].qs) * (rvl_f16_to_f32(w[i].d) * rvl_f16_to_f32(a[i].d));
    }
    return sum;
}

float vec_dot_q4_1_q8_1_ref(int64_t n, const void *vw, const void *va)
{
    const block_q4_1 *w = vw;
    const block_q8_1 *a = va;
    float sum = 0;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        for (int j = 0; j < 16; j++) {
            q[j] = w[i].qs[j] & 0xF;
            q[j + 16] = w[i].qs[j] >> 4;
        }
        sum += (float)idot32(q, a[i].qs) * (rvl_f16_to_f32(w[i].d) * rvl_f16_to_f32(a[i].d)) +
               rvl_f16_to_f32(w[i].m) * rvl_f16_to_f32(a[i].s);
    }
    return sum;
}

static void unpack_q5(const uint8_t *qs, const uint8_t *qhb, int *q)
{
    const uint32_t qh = rvl_ld_u32(qhb);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
    }
}

float vec_dot_q5_0_q8_0_ref(int64_t n, const void *vw, const void *va)
{
    const block_q5_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        unpack_q5(w[i].qs, w[i].qh, q);
        for (int j = 0; j < 32; j++)
            q[j] -= 16;
        sum += (float)idot32(q, a[i].qs) * (rvl_f16_to_f32(w[i].d) * rvl_f16_to_f32(a[i].d));
    }
    return sum;
}

float vec_dot_q5_1_q8_1_ref(int64_t n, const void *vw, const void *va)
{
    const block_q5_1 *w = vw;
    const block_q8_1 *a = va;
    float sum = 0;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        unpack_q5(w[i].qs, w[i].qh, q);
        sum += (float)idot32(q, a[i].qs) * (rvl_f16_to_f32(w[i].d) * rvl_f16_to_f32(a[i].d)) +
               rvl_f16_to_f32(w[i].m) * rvl_f16_to_f32(a[i].s);
    }
    return sum;
}

float vec_dot_q8_0_q8_0_ref(int64_t n, const void *vw, const void *va)
{
    const block_q8_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        for (int j = 0; j < 32; j++)
            q[j] = w[i].qs[j];
        sum += (float)idot32(q, a[i].qs) * (rvl_f16_to_f32(w[i].d) * rvl_f16_to_f32(a[i].d));
    }
    return sum;
}

float vec_dot_iq4_nl_q8_0_ref(int64_t n, const void *vw, const void *va)
{
    const block_iq4_nl *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        for (int j = 0; j < 16; j++) {
            q[j] = rvl_kvalues_iq4nl[w[i].qs[j] & 0xF];
            q[j + 16] = rvl_kvalues_iq4nl[w[i].qs[j] >> 4];
        }
        sum += (float)idot32(q, a[i].qs) * (rvl_f16_to_f32(w[i].d) * rvl_f16_to_f32(a[i].d));
    }
    return sum;
}

/* llama.cpp's ggml_vec_dot_mxfp4_q8_0: the doubled E2M1 levels as
 * integers, the block scale 2^(e-128) times the activation's d. */
float vec_dot_mxfp4_q8_0_ref(int64_t n, const void *vw, const void *va)
{
    const block_mxfp4 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        for (int j = 0; j < 16; j++) {
            q[j] = rvl_kvalues_mxfp4[w[i].qs[j] & 0xF];
            q[j + 16] = rvl_kvalues_mxfp4[w[i].qs[j] >> 4];
        }
        sum += (float)idot32(q, a[i].qs) * (rvl_e8m0_half(w[i].e) * rvl_f16_to_f32(a[i].d));
    }
    return sum;
}

/* ======================================================================
 * K-quants and IQ4_XS against Q8_K: unpack the integer levels of a
 * super-block (same element order as the dequantizers), then integer
 * sums per group.
 * ====================================================================== */

static int idot(const int *q, const int8_t *a, int len)
{
    int s = 0;
    for (int j = 0; j < len; j++)
        s += q[j] * a[j];
    return s;
}

float vec_dot_q2_K_q8_K_ref(int64_t n, const void *vw, const void *va)
{
    const block_q2_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    int q[QK];
    for (int64_t i = 0; i < n / QK; i++) {
        for (int e = 0; e < QK; e++)
            q[e] = (w[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        int isum = 0, summs = 0;
        for (int j = 0; j < 16; j++) {
            isum += (w[i].scales[j] & 0xF) * idot(q + 16 * j, a[i].qs + 16 * j, 16);
            summs += (w[i].scales[j] >> 4) * a[i].bsums[j];
        }
        const float dall = a[i].d * rvl_f16_to_f32(w[i].d);
        const float dmin = a[i].d * rvl_f16_to_f32(w[i].dmin);
        sum += dall * (float)isum - dmin * (float)summs;
    }
    return sum;
}

float vec_dot_q3_K_q8_K_ref(int64_t n, const void *vw, const void *va)
{
    const block_q3_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    int q[QK];
    int8_t sc[16];
    for (int64_t i = 0; i < n / QK; i++) {
        for (int e = 0; e < QK; e++) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            q[e] = (w[i].qs[32 * h + l] >> (2 * k)) & 3;
            if (!(w[i].hmask[l] & (1 << (4 * h + k))))
                q[e] -= 4;
        }
        rvl_q3_K_scales(w[i].scales, sc);
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += sc[j] * idot(q + 16 * j, a[i].qs + 16 * j, 16);
        sum += a[i].d * rvl_f16_to_f32(w[i].d) * (float)isum;
    }
    return sum;
}

/* Q4_K and Q5_K: 8 groups of 32 with 6-bit scales and mins */
static float dot_k4(const int *q, const uint8_t *scales, rvl_f16 d, rvl_f16 dmin,
                    const block_q8_K *a)
{
    int isum = 0, summs = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        rvl_k4_scale_min(j, scales, &sc, &m);
        isum += sc * idot(q + 32 * j, a->qs + 32 * j, 32);
        summs += m * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    }
    return a->d * rvl_f16_to_f32(d) * (float)isum - a->d * rvl_f16_to_f32(dmin) * (float)summs;
}

float vec_dot_q4_K_q8_K_ref(int64_t n, const void *vw, const void *va)
{
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    int q[QK];
    for (int64_t i = 0; i < n / QK; i++) {
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                q[64 * c + l] = w[i].qs[32 * c + l] & 0xF;
                q[64 * c + 32 + l] = w[i].qs[32 * c + l] >> 4;
            }
        sum += dot_k4(q, w[i].scales, w[i].d, w[i].dmin, &a[i]);
    }
    return sum;
}

float vec_dot_q5_K_q8_K_ref(int64_t n, const void *vw, const void *va)
{
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    int q[QK];
    for (int64_t i = 0; i < n / QK; i++) {
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const uint8_t ql = w[i].qs[32 * c + l], qh = w[i].qh[l];
                q[64 * c + l] = (ql & 0xF) | (((qh >> (2 * c)) & 1) << 4);
                q[64 * c + 32 + l] = (ql >> 4) | (((qh >> (2 * c + 1)) & 1) << 4);
            }
        sum += dot_k4(q, w[i].scales, w[i].d, w[i].dmin, &a[i]);
    }
    return sum;
}

float vec_dot_q6_K_q8_K_ref(int64_t n, const void *vw, const void *va)
{
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    int q[QK];
    for (int64_t i = 0; i < n / QK; i++) {
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[i].ql + 64 * h, *qh = w[i].qh + 32 * h;
            int *qq = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                qq[l] = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                qq[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                qq[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                qq[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            }
        }
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += w[i].scales[j] * idot(q + 16 * j, a[i].qs + 16 * j, 16);
        sum += a[i].d * rvl_f16_to_f32(w[i].d) * (float)isum;
    }
    return sum;
}

float vec_dot_iq4_xs_q8_K_ref(int64_t n, const void *vw, const void *va)
{
    const block_iq4_xs *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    int q[32];
    for (int64_t i = 0; i < n / QK; i++) {
        const uint16_t sh = w[i].scales_h;
        int isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((w[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) |
                           (((sh >> (2 * ib)) & 3) << 4);
            for (int j = 0; j < 16; j++) {
                q[j] = rvl_kvalues_iq4nl[w[i].qs[16 * ib + j] & 0xF];
                q[j + 16] = rvl_kvalues_iq4nl[w[i].qs[16 * ib + j] >> 4];
            }
            isum += (ls - 32) * idot32(q, a[i].qs + 32 * ib);
        }
        sum += a[i].d * rvl_f16_to_f32(w[i].d) * (float)isum;
    }
    return sum;
}

/* ======================================================================
 * Project formats against Q8_0: a group of G covers G/32 Q8_0 blocks.
 * ====================================================================== */

/* 4-bit "split" layout (quant_rvl.c): element e of G in byte e % (G/2),
 * low nibble for the first half. */
static void unpack_split(const uint8_t *qs, int G, int *q)
{
    for (int j = 0; j < G / 2; j++) {
        q[j] = qs[j] & 0xF;
        q[j + G / 2] = qs[j] >> 4;
    }
}

static int isum8(const int8_t *a)
{
    int s = 0;
    for (int j = 0; j < 32; j++)
        s += a[j];
    return s;
}

static float dot_i4s(int64_t n, const uint8_t *w, const block_q8_0 *a, int G)
{
    const size_t bsz = 2 + (size_t)G / 2;
    float sum = 0;
    int q[128];
    for (int64_t i = 0; i < n / G; i++, w += bsz) {
        const float d = rvl_f16_to_f32(rvl_ld_u16(w));
        unpack_split(w + 2, G, q);
        for (int e = 0; e < G; e++)
            q[e] -= 8;
        for (int c = 0; c < G / 32; c++, a++)
            sum += (float)idot32(q + 32 * c, a->qs) * (d * rvl_f16_to_f32(a->d));
    }
    return sum;
}

static float dot_i4a(int64_t n, const uint8_t *w, const block_q8_0 *a, int G)
{
    const size_t bsz = 4 + (size_t)G / 2;
    float sum = 0;
    int q[128];
    for (int64_t i = 0; i < n / G; i++, w += bsz) {
        const float d = rvl_f16_to_f32(rvl_ld_u16(w));
        const float z = rvl_f16_to_f32(rvl_ld_u16(w + 2));
        unpack_split(w + 4, G, q);
        for (int c = 0; c < G / 32; c++, a++)
            sum += (d * rvl_f16_to_f32(a->d)) *
                   ((float)idot32(q + 32 * c, a->qs) - z * (float)isum8(a->qs));
    }
    return sum;
}

static float dot_i8g(int64_t n, const uint8_t *w, const block_q8_0 *a, int G)
{
    const size_t bsz = 2 + (size_t)G;
    float sum = 0;
    int q[32];
    for (int64_t i = 0; i < n / G; i++, w += bsz) {
        const float d = rvl_f16_to_f32(rvl_ld_u16(w));
        for (int c = 0; c < G / 32; c++, a++) {
            for (int j = 0; j < 32; j++)
                q[j] = (int8_t)w[2 + 32 * c + j];
            sum += (float)idot32(q, a->qs) * (d * rvl_f16_to_f32(a->d));
        }
    }
    return sum;
}

static float dot_mlx(int64_t n, const uint8_t *w, const block_q8_0 *a, int bits)
{
    const size_t bsz = 8 + (size_t)(64 * bits / 8);
    float sum = 0;
    int q[64];
    for (int64_t i = 0; i < n / 64; i++, w += bsz) {
        const float scale = rvl_ld_f32(w), bias = rvl_ld_f32(w + 4);
        for (int e = 0; e < 64; e++)
            q[e] = bits == 8 ? w[8 + e] : (w[8 + e / 2] >> (4 * (e % 2))) & 0xF;
        for (int c = 0; c < 2; c++, a++)
            sum += rvl_f16_to_f32(a->d) *
                   (scale * (float)idot32(q + 32 * c, a->qs) + bias * (float)isum8(a->qs));
    }
    return sum;
}

#define DOT_ENTRY(fmt, fn, G)                                                      \
    float vec_dot_##fmt##_q8_0_ref(int64_t n, const void *w, const void *a)        \
    {                                                                              \
        return fn(n, w, a, G);                                                     \
    }
DOT_ENTRY(rvl_i4s_g32, dot_i4s, 32)
DOT_ENTRY(rvl_i4s_g64, dot_i4s, 64)
DOT_ENTRY(rvl_i4s_g128, dot_i4s, 128)
DOT_ENTRY(rvl_i4a_g32, dot_i4a, 32)
DOT_ENTRY(rvl_i4a_g64, dot_i4a, 64)
DOT_ENTRY(rvl_i4a_g128, dot_i4a, 128)
DOT_ENTRY(rvl_i8_g64, dot_i8g, 64)
DOT_ENTRY(rvl_i8_g128, dot_i8g, 128)
DOT_ENTRY(mlx_a4_g64, dot_mlx, 4)
DOT_ENTRY(mlx_a8_g64, dot_mlx, 8)

float vec_dot_rvl_i8_row_q8_0_ref(int64_t n, const void *vw, const void *va)
{
    const uint8_t *w = vw;
    const block_q8_0 *a = va;
    const float scale = rvl_ld_f32(w);
    float sum = 0;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        for (int j = 0; j < 32; j++)
            q[j] = (int8_t)w[RVL_I8_ROW_HEADER + 32 * i + j];
        sum += (float)idot32(q, a[i].qs) * rvl_f16_to_f32(a[i].d);
    }
    return sum * scale;
}
