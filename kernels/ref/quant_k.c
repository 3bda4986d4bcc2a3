/*
 * quant_k.c - ggml's K-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (weights) and
 * Q8_K (their activation format). Super-blocks of 256 values.
 *
 * Quantizers follow llama.cpp: without importance weights the "_ref"
 * algorithms (per-group error-minimizing fits, then the group scales
 * quantized against the super-block maximum); with them the "_impl" ones
 * (importance-weighted fits, super-block scales fitted by rvl_fit_positive).
 * Either way the values are then re-quantized against the scales as stored
 * (f16 super-block scale times the packed group scale). The bytes match
 * llama.cpp's quantize_q*_K() with and without an imatrix.
 *
 * Dequantizers agree bit for bit with gguf-py.
 */
#include "ref.h"

#define QK 256

/* 2-bit levels L[0..255] into qs[64]: per half of 128, byte l holds
 * elements l, l+32, l+64, l+96 at bits 0, 2, 4, 6. Q3_K uses the same. */
static void pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < QK; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) |
                                      (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

static float sum_sq(const float *x, int n)
{
    float s = 0;
    for (int j = 0; j < n; j++)
        s += x[j] * x[j];
    return s;
}

/* ======================================================================
 * Q2_K: x = d*sc*q - dmin*m per group of 16, q in 0..3, sc and m 4-bit
 * ====================================================================== */

void quantize_q2_K_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    block_q2_K *y = vy;
    uint8_t L[QK], Laux[16], Ls[16], Lm[16];
    float w[16], mins[16], scales[16], sw[16];

    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        const float *qwb = qw ? qw + QK * i : NULL;
        float dm, mm;
        if (!qwb) {
            float max_scale = 0, max_min = 0;
            for (int j = 0; j < 16; j++) {
                for (int l = 0; l < 16; l++)
                    w[l] = fabsf(x[16 * j + l]);
                scales[j] = rvl_fit_affine2(16, 3, x + 16 * j, w, L + 16 * j, &mins[j],
                                            Laux, -0.5f, 0.1f, 15, 1);
                max_scale = RVL_MAX(max_scale, scales[j]);
                max_min = RVL_MAX(max_min, mins[j]);
            }
            if (max_scale > 0) {
                float iscale = 15.f / max_scale;
                for (int j = 0; j < 16; j++)
                    y[i].scales[j] = (uint8_t)rvl_nearest_int(iscale * scales[j]);
                y[i].d = rvl_f32_to_f16(max_scale / 15.f);
            } else {
                memset(y[i].scales, 0, 16);
                y[i].d = rvl_f32_to_f16(0.f);
            }
            if (max_min > 0) {
                float iscale = 15.f / max_min;
                for (int j = 0; j < 16; j++)
                    y[i].scales[j] |= (uint8_t)(rvl_nearest_int(iscale * mins[j]) << 4);
                y[i].dmin = rvl_f32_to_f16(max_min / 15.f);
            } else {
                y[i].dmin = rvl_f32_to_f16(0.f);
            }
        } else {
            float sigma2 = sum_sq(x, QK) / QK;
            for (int j = 0; j < 16; j++) {
                sw[j] = 0;
                for (int l = 0; l < 16; l++) {
                    w[l] = qwb[16 * j + l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
                    sw[j] += w[l];
                }
                scales[j] = rvl_fit_affine3(16, 3, x + 16 * j, w, L + 16 * j, &mins[j],
                                            Laux, -0.9f, 0.05f, 36, 0);
            }
            dm = rvl_fit_positive(16, 15, scales, Ls, sw);
            mm = rvl_fit_positive(16, 15, mins, Lm, sw);
            y[i].d = rvl_f32_to_f16(dm);
            y[i].dmin = rvl_f32_to_f16(mm);
            for (int j = 0; j < 16; j++)
                y[i].scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
        }
        /* re-quantize against the scales as stored */
        dm = rvl_f16_to_f32(y[i].d);
        mm = rvl_f16_to_f32(y[i].dmin);
        for (int j = 0; j < 16; j++) {
            const float d = dm * (y[i].scales[j] & 0xF);
            if (!d)
                continue;
            const float m = mm * (y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) {
                int q = rvl_nearest_int((x[16 * j + l] + m) / d);
                L[16 * j + l] = (uint8_t)RVL_MAX(0, RVL_MIN(3, q));
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

void dequantize_q2_K_ref(const void *vx, float *y, int64_t n)
{
    const block_q2_K *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        const float dmin = rvl_f16_to_f32(x[i].dmin);
        for (int e = 0; e < QK; e++) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            const uint8_t sc = x[i].scales[e / 16];
            const float dl = d * (float)(sc & 0xF);
            const float ml = dmin * (float)(sc >> 4);
            const int q = (x[i].qs[32 * h + l] >> (2 * k)) & 3;
            *y++ = dl * (float)q - ml;
        }
    }
}

/* ======================================================================
 * Q3_K: x = d*(sc-32)*(q-4) per group of 16, q in 0..7, sc 6-bit
 * ====================================================================== */

static void pack_q3_K(block_q3_K *b, const int8_t *ls /* 0..63 */)
{
    memset(b->scales, 0, 12);
    for (int j = 0; j < 16; j++) {
        int l = ls[j];
        if (j < 8)
            b->scales[j] = (uint8_t)(l & 0xF);
        else
            b->scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
        b->scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
    }
}

void quantize_q3_K_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    block_q3_K *y = vy;
    int8_t L[QK], Ls[16];
    float scales[16], w[16], sw[16];

    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        if (!qw) {
            float max_scale = 0, amax = 0;
            for (int j = 0; j < 16; j++) {
                scales[j] = rvl_fit_signed_iter(16, 4, x + 16 * j, L + 16 * j);
                if (fabsf(scales[j]) > amax) {
                    amax = fabsf(scales[j]);
                    max_scale = scales[j];
                }
            }
            if (max_scale) {
                float iscale = -32.f / max_scale;
                for (int j = 0; j < 16; j++) {
                    int8_t l = (int8_t)rvl_nearest_int(iscale * scales[j]);
                    Ls[j] = (int8_t)(RVL_MAX(-32, RVL_MIN(31, l)) + 32);
                }
                pack_q3_K(&y[i], Ls);
                y[i].d = rvl_f32_to_f16(1 / iscale);
            } else {
                memset(y[i].scales, 0, 12);
                y[i].d = rvl_f32_to_f16(0.f);
            }
        } else {
            const float *qwb = qw + QK * i;
            float sigma2 = 2 * sum_sq(x, QK) / QK;
            for (int j = 0; j < 16; j++) {
                float sumw = 0;
                for (int l = 0; l < 16; l++) {
                    w[l] = qwb[16 * j + l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
                    sumw += w[l];
                }
                sw[j] = sumw;
                scales[j] = rvl_fit_signed(16, 4, x + 16 * j, w, L + 16 * j);
            }
            float d_block = rvl_fit_signed(16, 32, scales, sw, Ls);
            pack_q3_K(&y[i], Ls);
            y[i].d = rvl_f32_to_f16(d_block);
        }

        int8_t sc[16];
        rvl_q3_K_scales(y[i].scales, sc);
        const float d_all = rvl_f16_to_f32(y[i].d);
        for (int j = 0; j < 16; j++) {
            const float d = d_all * sc[j];
            if (!d)
                continue;
            for (int l = 0; l < 16; l++) {
                int q = rvl_nearest_int(x[16 * j + l] / d);
                L[16 * j + l] = (int8_t)(RVL_MAX(-4, RVL_MIN(3, q)) + 4);
            }
        }

        /* bit 2 of element j goes to hmask[j % 32], bit j / 32 */
        memset(y[i].hmask, 0, 32);
        for (int j = 0; j < QK; j++) {
            if (L[j] > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1 << (j / 32));
                L[j] -= 4;
            }
        }
        pack_2bit((const uint8_t *)L, y[i].qs);
    }
}

void dequantize_q3_K_ref(const void *vx, float *y, int64_t n)
{
    const block_q3_K *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d_all = rvl_f16_to_f32(x[i].d);
        int8_t sc[16];
        rvl_q3_K_scales(x[i].scales, sc);
        for (int e = 0; e < QK; e++) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            const float dl = d_all * (float)sc[e / 16];
            int q = (x[i].qs[32 * h + l] >> (2 * k)) & 3;
            if (!(x[i].hmask[l] & (1 << (4 * h + k))))
                q -= 4;
            *y++ = dl * (float)q;
        }
    }
}

/* ======================================================================
 * Q4_K / Q5_K: x = d*sc*q - dmin*m per group of 32, sc and m 6-bit
 * ====================================================================== */

static void pack_k4_scales(uint8_t *s, const uint8_t *ls, const uint8_t *lm)
{
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Fit the 8 groups of a Q4_K/Q5_K super-block (nmax 15 or 31), store
 * scales, d, dmin, and leave the final levels in L. */
static void fit_k4(const float *x, const float *qwb, int nmax, rvl_f16 *dh, rvl_f16 *dminh,
                   uint8_t *sbytes, uint8_t *L)
{
    uint8_t Laux[32], Ls[8], Lm[8];
    float w[32], mins[8], scales[8], sw[8];

    if (!qwb) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            float av_x = sqrtf(sum_sq(x + 32 * j, 32) / 32);
            for (int l = 0; l < 32; l++)
                w[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = nmax == 15
                ? rvl_fit_affine2(32, 15, x + 32 * j, w, L + 32 * j, &mins[j], Laux,
                                  -1.f, 0.1f, 20, 0)
                : rvl_fit_affine2(32, 31, x + 32 * j, w, L + 32 * j, &mins[j], Laux,
                                  -0.5f, 0.1f, 15, 0);
            max_scale = RVL_MAX(max_scale, scales[j]);
            max_min = RVL_MAX(max_min, mins[j]);
        }
        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < 8; j++) {
            Ls[j] = RVL_MIN(63, (uint8_t)rvl_nearest_int(inv_scale * scales[j]));
            Lm[j] = RVL_MIN(63, (uint8_t)rvl_nearest_int(inv_min * mins[j]));
        }
        *dh = rvl_f32_to_f16(max_scale / 63.f);
        *dminh = rvl_f32_to_f16(max_min / 63.f);
    } else {
        float sigma2 = 2 * sum_sq(x, QK) / QK;
        for (int j = 0; j < 8; j++) {
            float sumw = 0;
            for (int l = 0; l < 32; l++) {
                w[l] = qwb[32 * j + l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
                sumw += w[l];
            }
            sw[j] = sumw;
            scales[j] = rvl_fit_affine3(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux,
                                        -0.9f, 0.05f, 36, 0);
        }
        float d_block = rvl_fit_positive(8, 63, scales, Ls, sw);
        float m_block = rvl_fit_positive(8, 63, mins, Lm, sw);
        for (int j = 0; j < 8; j++) {
            Ls[j] = RVL_MIN(63, Ls[j]);
            Lm[j] = RVL_MIN(63, Lm[j]);
        }
        *dh = rvl_f32_to_f16(d_block);
        *dminh = rvl_f32_to_f16(m_block);
    }
    memset(sbytes, 0, RVL_K_SCALE_SIZE);
    pack_k4_scales(sbytes, Ls, Lm);

    const float d_all = rvl_f16_to_f32(*dh), dmin_all = rvl_f16_to_f32(*dminh);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        rvl_k4_scale_min(j, sbytes, &sc, &m);
        const float d = d_all * sc;
        if (!d)
            continue;
        const float dm = dmin_all * m;
        for (int l = 0; l < 32; l++) {
            int q = rvl_nearest_int((x[32 * j + l] + dm) / d);
            L[32 * j + l] = (uint8_t)RVL_MAX(0, RVL_MIN(nmax, q));
        }
    }
}

void quantize_q4_K_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    block_q4_K *y = vy;
    uint8_t L[QK];
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        rvl_f16 d, dmin;
        fit_k4(x, qw ? qw + QK * i : NULL, 15, &d, &dmin, y[i].scales, L);
        y[i].d = d;
        y[i].dmin = dmin;
        /* 64 values per 32 bytes: low nibble first 32, high nibble next 32 */
        for (int j = 0; j < QK; j += 64)
            for (int l = 0; l < 32; l++)
                y[i].qs[j / 2 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

void dequantize_q4_K_ref(const void *vx, float *y, int64_t n)
{
    const block_q4_K *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        const float dmin = rvl_f16_to_f32(x[i].dmin);
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = x[i].qs + 32 * c;
            uint8_t sc, m;
            rvl_k4_scale_min(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            rvl_k4_scale_min(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void quantize_q5_K_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    block_q5_K *y = vy;
    uint8_t L[QK];
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        rvl_f16 d, dmin;
        fit_k4(x, qw ? qw + QK * i : NULL, 31, &d, &dmin, y[i].scales, L);
        y[i].d = d;
        y[i].dmin = dmin;
        /* low 4 bits as Q4_K; bit 4 of element 64c+l in qh[l] bit 2c,
         * of element 64c+32+l in qh[l] bit 2c+1 */
        memset(y[i].qh, 0, 32);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * c + l], l2 = L[64 * c + l + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    y[i].qh[l] |= (uint8_t)(1 << (2 * c));
                }
                if (l2 > 15) {
                    l2 -= 16;
                    y[i].qh[l] |= (uint8_t)(2 << (2 * c));
                }
                y[i].qs[32 * c + l] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

void dequantize_q5_K_ref(const void *vx, float *y, int64_t n)
{
    const block_q5_K *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        const float dmin = rvl_f16_to_f32(x[i].dmin);
        for (int c = 0; c < 4; c++) {
            const uint8_t *ql = x[i].qs + 32 * c, *qh = x[i].qh;
            const uint8_t u1 = (uint8_t)(1 << (2 * c)), u2 = (uint8_t)(2 << (2 * c));
            uint8_t sc, m;
            rvl_k4_scale_min(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            rvl_k4_scale_min(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* ======================================================================
 * Q6_K: x = d*sc*(q-32) per group of 16, q in 0..63, sc int8
 * ====================================================================== */

void quantize_q6_K_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    block_q6_K *y = vy;
    int8_t L[QK];
    float scales[16];

    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            /* with importance weights llama.cpp passes them unmodified */
            const float *w = qw ? qw + QK * i + 16 * ib : NULL;
            scales[ib] = rvl_fit_signed(16, 32, x + 16 * ib, w, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < 1e-15f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = rvl_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < 16; ib++)
            y[i].scales[ib] = (int8_t)RVL_MIN(127, rvl_nearest_int(iscale * scales[ib]));

        const float d_all = rvl_f16_to_f32(y[i].d);
        for (int j = 0; j < 16; j++) {
            const float d = d_all * y[i].scales[j];
            if (!d)
                continue;
            for (int l = 0; l < 16; l++) {
                int q = rvl_nearest_int(x[16 * j + l] / d);
                L[16 * j + l] = (int8_t)(RVL_MAX(-32, RVL_MIN(31, q)) + 32);
            }
        }

        /* per half of 128: ql[l] = e(l) | e(l+64) << 4, ql[l+32] = e(l+32) |
         * e(l+96) << 4; qh[l] holds bits 4-5 of e(l), e(l+32), e(l+64),
         * e(l+96) at bits 0, 2, 4, 6 */
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t *e = (const uint8_t *)L + j + l;
                ql[l] = (uint8_t)((e[0] & 0xF) | ((e[64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((e[32] & 0xF) | ((e[96] & 0xF) << 4));
                qh[l] = (uint8_t)((e[0] >> 4) | ((e[32] >> 4) << 2) |
                                  ((e[64] >> 4) << 4) | ((e[96] >> 4) << 6));
            }
        }
    }
}

void dequantize_q6_K_ref(const void *vx, float *y, int64_t n)
{
    const block_q6_K *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is + 0] * (float)q1;
                y[l + 32] = d * sc[is + 2] * (float)q2;
                y[l + 64] = d * sc[is + 4] * (float)q3;
                y[l + 96] = d * sc[is + 6] * (float)q4;
            }
            y += 128;
        }
    }
}

/* ======================================================================
 * Q8_K: x = d*q, q in -127..127 (f32 d), with sums of each 16 quants
 * ====================================================================== */

void quantize_q8_K_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* -127 (not -128) keeps every product of two quants in int16 range
         * for the SIMD kernels, as in llama.cpp */
        const float iscale = -127.f / max;
        for (int j = 0; j < QK; j++)
            y[i].qs[j] = (int8_t)RVL_MIN(127, rvl_nearest_int(iscale * x[j]));
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void dequantize_q8_K_ref(const void *vx, float *y, int64_t n)
{
    const block_q8_K *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = x[i].d;
        for (int j = 0; j < QK; j++)
            *y++ = d * (float)x[i].qs[j];
    }
}
