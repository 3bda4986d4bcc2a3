/*
 * quant_legacy.c - plain element types (F32, F16, BF16) and ggml's 32-value
 * block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1) plus Q1_0.
 *
 * Without importance weights the quantizers are llama.cpp's round-to-nearest
 * reference ones, and agree bit for bit with gguf-py's numpy quantizers
 * (tests/ref/gen_quant_goldens.py): one IEEE float operation at a time, in
 * the same order, truncation where numpy truncates, f16 rounding to nearest
 * even. With importance weights (qw != NULL) they run llama.cpp's weighted
 * scale searches (quantize_row_q4_0_impl and friends).
 */
#include "ref.h"

/* ======================================================================
 * F32, F16, BF16
 * ====================================================================== */

void quantize_f32_ref(const float *x, void *y, int64_t n, const float *qw)
{
    (void)qw;
    memcpy(y, x, (size_t)n * sizeof(float));
}

void dequantize_f32_ref(const void *x, float *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

void quantize_f16_ref(const float *x, void *y, int64_t n, const float *qw)
{
    (void)qw;
    uint8_t *out = y;
    for (int64_t i = 0; i < n; i++) {
        rvl_f16 h = rvl_f32_to_f16(x[i]);
        memcpy(out + 2 * i, &h, 2);
    }
}

void dequantize_f16_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *in = x;
    for (int64_t i = 0; i < n; i++)
        y[i] = rvl_f16_to_f32(rvl_ld_u16(in + 2 * i));
}

void quantize_bf16_ref(const float *x, void *y, int64_t n, const float *qw)
{
    (void)qw;
    uint8_t *out = y;
    for (int64_t i = 0; i < n; i++) {
        rvl_bf16 h = rvl_f32_to_bf16(x[i]);
        memcpy(out + 2 * i, &h, 2);
    }
}

void dequantize_bf16_ref(const void *x, float *y, int64_t n)
{
    const uint8_t *in = x;
    for (int64_t i = 0; i < n; i++)
        y[i] = rvl_bf16_to_f32(rvl_ld_u16(in + 2 * i));
}

/* ======================================================================
 * Shared pieces
 * ====================================================================== */

/* Signed maximum by magnitude; the first one wins a tie (numpy argmax). */
static float signed_absmax(const float *x, int n)
{
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx)
{
    float lo = x[0], hi = x[0];
    for (int j = 1; j < n; j++) {
        if (x[j] < lo)
            lo = x[j];
        if (x[j] > hi)
            hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* Importance weights of llama.cpp's legacy-format search: qw scaled by the
 * value's magnitude against the row's mean square. */
static float row_sigma2(const float *x, int64_t n)
{
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; j++)
        sum_x2 += x[j] * x[j];
    return sum_x2 / n;
}

static void legacy_weights(const float *xb, const float *qw, float sigma2, float *w)
{
    for (int j = 0; j < 32; j++)
        w[j] = qw[j] * sqrtf(sigma2 + xb[j] * xb[j]);
}

/* Pack 32 levels (0..31) into Q5's 16 nibble bytes and 32 high bits. */
static void pack_q5(const uint8_t *L, uint8_t qs[16], uint8_t qh[4])
{
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
        h |= (uint32_t)((L[j] >> 4) & 1) << j;
        h |= (uint32_t)((L[j + 16] >> 4) & 1) << (j + 16);
    }
    memcpy(qh, &h, 4);
}

/* ======================================================================
 * Q4_0: x = d * (q - 8)
 * ====================================================================== */

void quantize_q4_0_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    block_q4_0 *y = vy;
    const int64_t nb = n / 32;
    if (qw) {
        float sigma2 = row_sigma2(x, n), w[32];
        int8_t L[32];
        for (int64_t i = 0; i < nb; i++) {
            legacy_weights(x + 32 * i, qw + 32 * i, sigma2, w);
            float d = rvl_fit_signed(32, 8, x + 32 * i, w, L);
            y[i].d = rvl_f32_to_f16(d);
            for (int j = 0; j < 16; j++)
                y[i].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
        }
        return;
    }
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + 32 * i;
        const float d = signed_absmax(xb, 32) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = rvl_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            /* x*id is in [-8, 8]: +8.5 and truncation round to 0..16 */
            int q0 = RVL_MIN(15, (int)(xb[j] * id + 8.5f));
            int q1 = RVL_MIN(15, (int)(xb[j + 16] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void dequantize_q4_0_ref(const void *vx, float *y, int64_t n)
{
    const block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rvl_f16_to_f32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((x[i].qs[j] & 0x0F) - 8);
            y[j + 16] = d * (float)((x[i].qs[j] >> 4) - 8);
        }
    }
}

/* ======================================================================
 * Q4_1: x = d * q + m
 * ====================================================================== */

void quantize_q4_1_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    block_q4_1 *y = vy;
    const int64_t nb = n / 32;
    if (qw) {
        float sigma2 = row_sigma2(x, n), w[32], neg_min;
        uint8_t L[32], Laux[32];
        for (int64_t i = 0; i < nb; i++) {
            legacy_weights(x + 32 * i, qw + 32 * i, sigma2, w);
            float d = rvl_fit_affine3(32, 15, x + 32 * i, w, L, &neg_min, Laux,
                                      -0.9f, 0.05f, 36, 0);
            y[i].d = rvl_f32_to_f16(d);
            y[i].m = rvl_f32_to_f16(-neg_min);
            for (int j = 0; j < 16; j++)
                y[i].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
        }
        return;
    }
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + 32 * i;
        float min, max;
        min_max(xb, 32, &min, &max);
        const float d = (max - min) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = rvl_f32_to_f16(d);
        y[i].m = rvl_f32_to_f16(min);
        for (int j = 0; j < 16; j++) {
            int q0 = RVL_MIN(15, (int)((xb[j] - min) * id + 0.5f));
            int q1 = RVL_MIN(15, (int)((xb[j + 16] - min) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void dequantize_q4_1_ref(const void *vx, float *y, int64_t n)
{
    const block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rvl_f16_to_f32(x[i].d);
        const float m = rvl_f16_to_f32(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)(x[i].qs[j] & 0x0F) + m;
            y[j + 16] = d * (float)(x[i].qs[j] >> 4) + m;
        }
    }
}

/* ======================================================================
 * Q5_0: x = d * (q - 16)
 * ====================================================================== */

void quantize_q5_0_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    block_q5_0 *y = vy;
    const int64_t nb = n / 32;
    uint8_t L[32];
    if (qw) {
        float sigma2 = row_sigma2(x, n), w[32];
        for (int64_t i = 0; i < nb; i++) {
            legacy_weights(x + 32 * i, qw + 32 * i, sigma2, w);
            float d = rvl_fit_signed(32, 16, x + 32 * i, w, (int8_t *)L);
            y[i].d = rvl_f32_to_f16(d);
            pack_q5(L, y[i].qs, y[i].qh);
        }
        return;
    }
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + 32 * i;
        const float d = signed_absmax(xb, 32) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = rvl_f32_to_f16(d);
        for (int j = 0; j < 32; j++)
            L[j] = (uint8_t)RVL_MIN(31, (int)(xb[j] * id + 16.5f));
        pack_q5(L, y[i].qs, y[i].qh);
    }
}

void dequantize_q5_0_ref(const void *vx, float *y, int64_t n)
{
    const block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rvl_f16_to_f32(x[i].d);
        const uint32_t qh = rvl_ld_u32(x[i].qh);
        for (int j = 0; j < 16; j++) {
            int q0 = (x[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
            int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)(q0 - 16);
            y[j + 16] = d * (float)(q1 - 16);
        }
    }
}

/* ======================================================================
 * Q5_1: x = d * q + m
 * ====================================================================== */

void quantize_q5_1_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    block_q5_1 *y = vy;
    const int64_t nb = n / 32;
    uint8_t L[32];
    if (qw) {
        float sigma2 = row_sigma2(x, n), w[32], neg_min;
        uint8_t Laux[32];
        for (int64_t i = 0; i < nb; i++) {
            legacy_weights(x + 32 * i, qw + 32 * i, sigma2, w);
            float d = rvl_fit_affine3(32, 31, x + 32 * i, w, L, &neg_min, Laux,
                                      -0.9f, 0.05f, 36, 0);
            y[i].d = rvl_f32_to_f16(d);
            y[i].m = rvl_f32_to_f16(-neg_min);
            pack_q5(L, y[i].qs, y[i].qh);
        }
        return;
    }
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + 32 * i;
        float min, max;
        min_max(xb, 32, &min, &max);
        const float d = (max - min) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = rvl_f32_to_f16(d);
        y[i].m = rvl_f32_to_f16(min);
        for (int j = 0; j < 32; j++)
            L[j] = (uint8_t)RVL_MIN(31, (int)((xb[j] - min) * id + 0.5f));
        pack_q5(L, y[i].qs, y[i].qh);
    }
}

void dequantize_q5_1_ref(const void *vx, float *y, int64_t n)
{
    const block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rvl_f16_to_f32(x[i].d);
        const float m = rvl_f16_to_f32(x[i].m);
        const uint32_t qh = rvl_ld_u32(x[i].qh);
        for (int j = 0; j < 16; j++) {
            int q0 = (x[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
            int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)q0 + m;
            y[j + 16] = d * (float)q1 + m;
        }
    }
}

/* ======================================================================
 * Q8_0: x = d * q. Also the activation format of Q4_0, Q5_0, Q8_0, IQ4_NL
 * and the project formats.
 * ====================================================================== */

void quantize_q8_0_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;                 /* llama.cpp has no weighted Q8_0 search either */
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *xb = x + 32 * i;
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = RVL_MAX(amax, fabsf(xb[j]));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = rvl_f32_to_f16(d);
        for (int j = 0; j < 32; j++)
            y[i].qs[j] = (int8_t)roundf(xb[j] * id);
    }
}

void dequantize_q8_0_ref(const void *vx, float *y, int64_t n)
{
    const block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rvl_f16_to_f32(x[i].d);
        for (int j = 0; j < 32; j++)
            y[j] = (float)x[i].qs[j] * d;
    }
}

/* ======================================================================
 * Q8_1: Q8_0 plus s = d * sum(q): activation format of Q4_1 and Q5_1.
 * ====================================================================== */

void quantize_q8_1_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *xb = x + 32 * i;
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = RVL_MAX(amax, fabsf(xb[j]));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            y[i].qs[j] = (int8_t)roundf(xb[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = rvl_f32_to_f16(d);
        y[i].s = rvl_f32_to_f16((float)sum * d);
    }
}

void dequantize_q8_1_ref(const void *vx, float *y, int64_t n)
{
    const block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rvl_f16_to_f32(x[i].d);
        for (int j = 0; j < 32; j++)
            y[j] = (float)x[i].qs[j] * d;
    }
}

/* ======================================================================
 * Q1_0: 128 signs and one magnitude, x = bit ? d : -d
 * ====================================================================== */

void quantize_q1_0_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    block_q1_0 *y = vy;
    for (int64_t i = 0; i < n / 128; i++) {
        const float *xb = x + 128 * i;
        float sum_abs = 0;
        for (int j = 0; j < 128; j++)
            sum_abs += fabsf(xb[j]);
        y[i].d = rvl_f32_to_f16(sum_abs / 128);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < 128; j++)
            if (xb[j] >= 0.0f)
                y[i].qs[j / 8] |= (uint8_t)(1 << (j % 8));
    }
}

void dequantize_q1_0_ref(const void *vx, float *y, int64_t n)
{
    const block_q1_0 *x = vx;
    for (int64_t i = 0; i < n / 128; i++, y += 128) {
        const float d = rvl_f16_to_f32(x[i].d);
        for (int j = 0; j < 128; j++)
            y[j] = (x[i].qs[j / 8] >> (j % 8)) & 1 ? d : -d;
    }
}
