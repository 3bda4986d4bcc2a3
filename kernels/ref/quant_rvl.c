/*
 * quant_rvl.c - ruvllm's project formats (ids from 1024; docs/formats.md):
 * INT4 group-wise symmetric (RVL_I4S_G*) and asymmetric with a zero point
 * (RVL_I4A_G*), INT8 per row (RVL_I8_ROW) and per group (RVL_I8_G*), and
 * MLX's affine 4- and 8-bit group-64 formats (MLX_A4_G64, MLX_A8_G64).
 *
 * Quantizers round to nearest against the scales as stored (f16 scales are
 * rounded first, then the levels chosen for them). With importance weights
 * the INT4 formats use the same least-squares searches as llama.cpp's
 * Q4_0/Q4_1 (rvl_fit_signed, rvl_fit_affine3); the INT8 and MLX formats
 * ignore them (8 bits, or an import format).
 */
#include "ref.h"

/* ======================================================================
 * Shared group helpers (G = 32, 64 or 128)
 * ====================================================================== */

/* 4-bit element e of a group of G stored "split": byte e % (G/2), low
 * nibble for the first half of the group, high nibble for the second. */
static inline int nib_split(const uint8_t *qs, int G, int e)
{
    const int h = G / 2;
    return e < h ? qs[e] & 0xF : qs[e - h] >> 4;
}

static void pack_split(uint8_t *qs, int G, const uint8_t *L)
{
    for (int j = 0; j < G / 2; j++)
        qs[j] = (uint8_t)(L[j] | (L[j + G / 2] << 4));
}

static float row_sigma2(const float *x, int64_t n)
{
    float s = 0;
    for (int64_t j = 0; j < n; j++)
        s += x[j] * x[j];
    return s / n;
}

/* ======================================================================
 * RVL_I4S_G*: x = d * (q - 8)
 * ====================================================================== */

static void i4s_quantize(const float *x, uint8_t *y, int64_t n, const float *qw, int G)
{
    const size_t bsz = 2 + (size_t)G / 2;
    const float sigma2 = qw ? row_sigma2(x, n) : 0;
    uint8_t L[128];
    float w[128];
    for (int64_t i = 0; i < n / G; i++, x += G, y += bsz) {
        float d;
        if (qw) {
            for (int j = 0; j < G; j++)
                w[j] = qw[G * i + j] * sqrtf(sigma2 + x[j] * x[j]);
            d = rvl_fit_signed(G, 8, x, w, (int8_t *)L);
        } else {
            float amax = 0;
            for (int j = 0; j < G; j++)
                amax = RVL_MAX(amax, fabsf(x[j]));
            d = amax / 7;
        }
        const rvl_f16 dh = rvl_f32_to_f16(d);
        const float dr = rvl_f16_to_f32(dh);
        const float id = dr ? 1.0f / dr : 0.0f;
        for (int j = 0; j < G; j++)
            L[j] = (uint8_t)(RVL_MAX(-8, RVL_MIN(7, rvl_nearest_int(x[j] * id))) + 8);
        memcpy(y, &dh, 2);
        pack_split(y + 2, G, L);
    }
}

static void i4s_dequantize(const uint8_t *x, float *y, int64_t n, int G)
{
    const size_t bsz = 2 + (size_t)G / 2;
    for (int64_t i = 0; i < n / G; i++, x += bsz, y += G) {
        const float d = rvl_f16_to_f32(rvl_ld_u16(x));
        for (int e = 0; e < G; e++)
            y[e] = d * (float)(nib_split(x + 2, G, e) - 8);
    }
}

/* ======================================================================
 * RVL_I4A_G*: x = d * (q - z), range widened to include 0 so z in [0, 15]
 * ====================================================================== */

static void i4a_quantize(const float *x, uint8_t *y, int64_t n, const float *qw, int G)
{
    const size_t bsz = 4 + (size_t)G / 2;
    const float sigma2 = qw ? row_sigma2(x, n) : 0;
    uint8_t L[128], Laux[128];
    float w[128];
    for (int64_t i = 0; i < n / G; i++, x += G, y += bsz) {
        float d, lo;
        if (qw) {
            float neg_min;
            for (int j = 0; j < G; j++)
                w[j] = qw[G * i + j] * sqrtf(sigma2 + x[j] * x[j]);
            d = rvl_fit_affine3(G, 15, x, w, L, &neg_min, Laux, -0.9f, 0.05f, 36, 0);
            lo = -neg_min;
        } else {
            float hi = 0;
            lo = 0;
            for (int j = 0; j < G; j++) {
                lo = RVL_MIN(lo, x[j]);
                hi = RVL_MAX(hi, x[j]);
            }
            d = (hi - lo) / 15;
        }
        const rvl_f16 dh = rvl_f32_to_f16(d);
        const float dr = rvl_f16_to_f32(dh);
        rvl_f16 zh = 0;
        if (dr > 0) {
            zh = rvl_f32_to_f16(RVL_MIN(15.0f, -lo / dr));
            const float zr = rvl_f16_to_f32(zh);
            const float id = 1.0f / dr;
            for (int j = 0; j < G; j++)
                L[j] = (uint8_t)RVL_MAX(0, RVL_MIN(15, rvl_nearest_int(x[j] * id + zr)));
        } else {
            memset(L, 0, (size_t)G);
        }
        memcpy(y, &dh, 2);
        memcpy(y + 2, &zh, 2);
        pack_split(y + 4, G, L);
    }
}

static void i4a_dequantize(const uint8_t *x, float *y, int64_t n, int G)
{
    const size_t bsz = 4 + (size_t)G / 2;
    for (int64_t i = 0; i < n / G; i++, x += bsz, y += G) {
        const float d = rvl_f16_to_f32(rvl_ld_u16(x));
        const float z = rvl_f16_to_f32(rvl_ld_u16(x + 2));
        for (int e = 0; e < G; e++)
            y[e] = d * ((float)nib_split(x + 4, G, e) - z);
    }
}

/* ======================================================================
 * RVL_I8_G*: x = d * q (Q8_0 with a longer group)
 * ====================================================================== */

static void i8g_quantize(const float *x, uint8_t *y, int64_t n, int G)
{
    const size_t bsz = 2 + (size_t)G;
    for (int64_t i = 0; i < n / G; i++, x += G, y += bsz) {
        float amax = 0;
        for (int j = 0; j < G; j++)
            amax = RVL_MAX(amax, fabsf(x[j]));
        const rvl_f16 dh = rvl_f32_to_f16(amax / 127);
        const float dr = rvl_f16_to_f32(dh);
        const float id = dr ? 1.0f / dr : 0.0f;
        memcpy(y, &dh, 2);
        for (int j = 0; j < G; j++)
            y[2 + j] = (uint8_t)(int8_t)RVL_MAX(-127, RVL_MIN(127, rvl_nearest_int(x[j] * id)));
    }
}

static void i8g_dequantize(const uint8_t *x, float *y, int64_t n, int G)
{
    const size_t bsz = 2 + (size_t)G;
    for (int64_t i = 0; i < n / G; i++, x += bsz, y += G) {
        const float d = rvl_f16_to_f32(rvl_ld_u16(x));
        for (int j = 0; j < G; j++)
            y[j] = d * (float)(int8_t)x[2 + j];
    }
}

/* ======================================================================
 * MLX affine, group 64: x = scale * q + bias
 * ====================================================================== */

/* MLX packs 32 / bits values per little-endian uint32: 4-bit element e is
 * nibble e % 2 of byte e / 2; 8-bit element e is byte e. */
static inline int mlx_q(const uint8_t *qs, int bits, int e)
{
    return bits == 8 ? qs[e] : (qs[e / 2] >> (4 * (e % 2))) & 0xF;
}

static void mlx_quantize(const float *x, uint8_t *y, int64_t n, int bits)
{
    const int G = 64, qmax = (1 << bits) - 1;
    const size_t bsz = 8 + (size_t)(G * bits / 8);
    for (int64_t i = 0; i < n / G; i++, x += G, y += bsz) {
        float lo = x[0], hi = x[0];
        for (int j = 1; j < G; j++) {
            lo = RVL_MIN(lo, x[j]);
            hi = RVL_MAX(hi, x[j]);
        }
        const float scale = (hi - lo) / qmax;
        const float id = scale ? 1.0f / scale : 0.0f;
        memcpy(y, &scale, 4);
        memcpy(y + 4, &lo, 4);
        uint8_t *qs = y + 8;
        if (bits == 4)
            memset(qs, 0, (size_t)G / 2);
        for (int j = 0; j < G; j++) {
            int q = RVL_MAX(0, RVL_MIN(qmax, rvl_nearest_int((x[j] - lo) * id)));
            if (bits == 8)
                qs[j] = (uint8_t)q;
            else
                qs[j / 2] |= (uint8_t)(q << (4 * (j % 2)));
        }
    }
}

static void mlx_dequantize(const uint8_t *x, float *y, int64_t n, int bits)
{
    const int G = 64;
    const size_t bsz = 8 + (size_t)(G * bits / 8);
    for (int64_t i = 0; i < n / G; i++, x += bsz, y += G) {
        const float scale = rvl_ld_f32(x), bias = rvl_ld_f32(x + 4);
        for (int j = 0; j < G; j++)
            y[j] = scale * (float)mlx_q(x + 8, bits, j) + bias;
    }
}

/* ======================================================================
 * Entry points
 * ====================================================================== */

#define I4_ENTRY(kind, G)                                                          \
    void quantize_rvl_##kind##_g##G##_ref(const float *x, void *y, int64_t n,      \
                                          const float *qw)                         \
    {                                                                              \
        kind##_quantize(x, y, n, qw, G);                                           \
    }                                                                              \
    void dequantize_rvl_##kind##_g##G##_ref(const void *x, float *y, int64_t n)    \
    {                                                                              \
        kind##_dequantize(x, y, n, G);                                             \
    }
I4_ENTRY(i4s, 32)
I4_ENTRY(i4s, 64)
I4_ENTRY(i4s, 128)
I4_ENTRY(i4a, 32)
I4_ENTRY(i4a, 64)
I4_ENTRY(i4a, 128)

#define I8G_ENTRY(G)                                                               \
    void quantize_rvl_i8_g##G##_ref(const float *x, void *y, int64_t n,            \
                                    const float *qw)                               \
    {                                                                              \
        (void)qw;                                                                  \
        i8g_quantize(x, y, n, G);                                                  \
    }                                                                              \
    void dequantize_rvl_i8_g##G##_ref(const void *x, float *y, int64_t n)          \
    {                                                                              \
        i8g_dequantize(x, y, n, G);                                                \
    }
I8G_ENTRY(64)
I8G_ENTRY(128)

void quantize_rvl_i8_row_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    uint8_t *y = vy;
    float amax = 0;
    for (int64_t j = 0; j < n; j++)
        amax = RVL_MAX(amax, fabsf(x[j]));
    const float scale = amax / 127;
    const float id = scale ? 1.0f / scale : 0.0f;
    memcpy(y, &scale, 4);
    for (int64_t j = 0; j < n; j++)
        y[RVL_I8_ROW_HEADER + j] =
            (uint8_t)(int8_t)RVL_MAX(-127, RVL_MIN(127, rvl_nearest_int(x[j] * id)));
}

void dequantize_rvl_i8_row_ref(const void *vx, float *y, int64_t n)
{
    const uint8_t *x = vx;
    const float scale = rvl_ld_f32(x);
    for (int64_t j = 0; j < n; j++)
        y[j] = scale * (float)(int8_t)x[RVL_I8_ROW_HEADER + j];
}

void quantize_mlx_a4_g64_ref(const float *x, void *y, int64_t n, const float *qw)
{
    (void)qw;
    mlx_quantize(x, y, n, 4);
}

void dequantize_mlx_a4_g64_ref(const void *x, float *y, int64_t n)
{
    mlx_dequantize(x, y, n, 4);
}

void quantize_mlx_a8_g64_ref(const float *x, void *y, int64_t n, const float *qw)
{
    (void)qw;
    mlx_quantize(x, y, n, 8);
}

void dequantize_mlx_a8_g64_ref(const void *x, float *y, int64_t n)
{
    mlx_dequantize(x, y, n, 8);
}
