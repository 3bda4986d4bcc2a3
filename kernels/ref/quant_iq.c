/*
 * quant_iq.c - ggml's non-linear and lattice formats: IQ4_NL, IQ4_XS and
 * MXFP4 (quantize + dequantize), and dequantize-only IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0, NVFP4 (files made by
 * llama.cpp load here; we do not produce them).
 *
 * The IQ4 quantizer is llama.cpp's quantize_row_iq4_nl_impl search (with
 * ntry = 7, what llama-quantize uses with and without an imatrix); the
 * MXFP4 quantizer is llama.cpp's quantize_row_mxfp4_ref (no imatrix use,
 * as in llama.cpp), the same bytes.
 * Dequantizers agree bit for bit with gguf-py (one documented exception:
 * see dequantize_iq1_m_ref).
 */
#include "iq_grids.h"
#include "ref.h"

#define QK 256

const int8_t rvl_kvalues_iq4nl[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* ======================================================================
 * IQ4_NL / IQ4_XS
 * ====================================================================== */

/* Index of the level nearest to x (a tie goes to the larger level):
 * binary search on the midpoints, compared doubled to stay exact. */
static inline int iq4_index(float x)
{
    const int8_t *v = rvl_kvalues_iq4nl;
    const float x2 = x + x;
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        int j = idx + step;
        if (x2 >= (float)(v[j - 1] + v[j]))
            idx = j;
    }
    return idx;
}

/* Best scale for one group of 32 under weights w, searching 15 inverse
 * scales around the extreme value's level; levels are left in Lb from
 * the first pass (callers re-derive them from the stored scale). */
static float iq4_fit_group(const float *xb, const float *w, uint8_t *Lb, int ntry)
{
    const int8_t *v = rvl_kvalues_iq4nl;
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        if (fabsf(xb[j]) > amax) {
            amax = fabsf(xb[j]);
            max = xb[j];
        }
    }
    if (amax < 1e-15f) {
        memset(Lb, 0, 32);
        return 0.0f;
    }
    float d = ntry > 0 ? -max / v[0] : max / v[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        int l = iq4_index(id * xb[j]);
        Lb[j] = (uint8_t)l;
        float q = v[l];
        sumqx += w[j] * q * xb[j];
        sumq2 += w[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; itry++) {
        id = (itry + v[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = v[iq4_index(id * xb[j])];
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* One IQ4 super-block of `super` values (32: IQ4_NL, 256: IQ4_XS). */
static void iq4_quantize_super(int super, const float *x, const float *qw, rvl_f16 *dh,
                               uint16_t *scales_h, uint8_t *scales_l, uint8_t *qs)
{
    const int ntry = 7;
    uint8_t L[QK];
    float w[32], scales[QK / 32];
    const int nb = super / 32;

    float sigma2 = 0;
    for (int j = 0; j < super; j++)
        sigma2 += x[j] * x[j];
    sigma2 *= 2.f / super;

    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < nb; ib++) {
        const float *xb = x + 32 * ib;
        for (int j = 0; j < 32; j++)
            w[j] = qw ? qw[32 * ib + j] * sqrtf(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
        scales[ib] = iq4_fit_group(xb, w, L + 32 * ib, ntry);
        if (fabsf(scales[ib]) > amax_scale) {
            amax_scale = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }

    if (nb > 1) {
        /* IQ4_XS: 6-bit signed group scales against an f16 super scale */
        *scales_h = 0;
        float d = -max_scale / 32;
        *dh = rvl_f32_to_f16(d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < nb; ib++) {
            int l = RVL_MAX(-32, RVL_MIN(31, rvl_nearest_int(id * scales[ib])));
            float dl = d * l;
            float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++)
                L[32 * ib + j] = (uint8_t)iq4_index(idl * x[32 * ib + j]);
            l += 32;
            if (ib % 2 == 0)
                scales_l[ib / 2] = (uint8_t)(l & 0xf);
            else
                scales_l[ib / 2] |= (uint8_t)((l & 0xf) << 4);
            *scales_h |= (uint16_t)((l >> 4) << (2 * ib));
        }
    } else {
        *dh = rvl_f32_to_f16(scales[0]);
        float id = scales[0] ? 1 / scales[0] : 0;
        for (int j = 0; j < 32; j++)
            L[j] = (uint8_t)iq4_index(id * x[j]);
    }

    for (int i = 0; i < nb; i++)
        for (int j = 0; j < 16; j++)
            qs[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

void quantize_iq4_nl_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    block_iq4_nl *y = vy;
    uint16_t unused_h;
    for (int64_t i = 0; i < n / 32; i++) {
        rvl_f16 d;
        iq4_quantize_super(32, x + 32 * i, qw ? qw + 32 * i : NULL, &d, &unused_h, NULL,
                           y[i].qs);
        y[i].d = d;
    }
}

void dequantize_iq4_nl_ref(const void *vx, float *y, int64_t n)
{
    const block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rvl_f16_to_f32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)rvl_kvalues_iq4nl[x[i].qs[j] & 0xf];
            y[j + 16] = d * (float)rvl_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void quantize_iq4_xs_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    block_iq4_xs *y = vy;
    for (int64_t i = 0; i < n / QK; i++) {
        rvl_f16 d;
        uint16_t sh;
        iq4_quantize_super(QK, x + QK * i, qw ? qw + QK * i : NULL, &d, &sh,
                           y[i].scales_l, y[i].qs);
        y[i].d = d;
        y[i].scales_h = sh;
    }
}

void dequantize_iq4_xs_ref(const void *vx, float *y, int64_t n)
{
    const block_iq4_xs *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        const uint16_t sh = x[i].scales_h;
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) |
                           (((sh >> (2 * ib)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            const uint8_t *qs = x[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)rvl_kvalues_iq4nl[qs[j] & 0xf];
                y[j + 16] = dl * (float)rvl_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* ======================================================================
 * Lattice formats (dequantize only)
 * ====================================================================== */

/* IQ2/IQ3 sign bytes: 7 stored bits, the 8th makes the parity even. */
static inline uint8_t iq_signs(uint32_t seven)
{
    seven &= 127;
    return (uint8_t)(seven | ((uint32_t)(__builtin_popcount(seven) & 1) << 7));
}

static inline float sgn(uint8_t signs, int j)
{
    return signs & (1u << j) ? -1.f : 1.f;
}

static const float iq2_map[3] = { 8, 25, 43 };
static const float iq3xxs_map[8] = { 4, 12, 20, 28, 36, 44, 52, 62 };
static const float iq3s_map[8] = { 1, 3, 5, 7, 9, 11, 13, 15 };
static const float iq1_map[3] = { -1, 0, 1 };
#define IQ1S_DELTA 0.125f

/* Eight values db * grid * sign from a 2-bit IQ2 grid entry. */
static inline void iq2_eight(float *y, float db, uint16_t g, uint8_t signs)
{
    for (int j = 0; j < 8; j++)
        y[j] = db * iq2_map[(g >> (2 * j)) & 3] * sgn(signs, j);
}

void dequantize_iq2_xxs_ref(const void *vx, float *y, int64_t n)
{
    const block_iq2_xxs *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            /* 4 grid indices (bytes), then 4 x 7 sign bits and a 4-bit scale */
            const uint8_t *q8 = (const uint8_t *)x[i].qs + 8 * ib;
            const uint32_t aux = rvl_ld_u32(q8 + 4);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8)
                iq2_eight(y, db, rvl_iq2xxs_grid[q8[l]], iq_signs(aux >> (7 * l)));
        }
    }
}

void dequantize_iq2_xs_ref(const void *vx, float *y, int64_t n)
{
    const block_iq2_xs *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float db[2] = {
                d * (0.5f + (float)(x[i].scales[ib] & 0xf)) * 0.25f,
                d * (0.5f + (float)(x[i].scales[ib] >> 4)) * 0.25f,
            };
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t q = x[i].qs[4 * ib + l];
                iq2_eight(y, db[l / 2], rvl_iq2xs_grid[q & 511], iq_signs(q >> 9));
            }
        }
    }
}

void dequantize_iq2_s_ref(const void *vx, float *y, int64_t n)
{
    const block_iq2_s *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs, *signs = x[i].qs + QK / 8;
        for (int ib = 0; ib < 8; ib++) {
            const float db[2] = {
                d * (0.5f + (float)(x[i].scales[ib] & 0xf)) * 0.25f,
                d * (0.5f + (float)(x[i].scales[ib] >> 4)) * 0.25f,
            };
            for (int l = 0; l < 4; l++, y += 8) {
                const int idx = qs[4 * ib + l] | ((x[i].qh[ib] << (8 - 2 * l)) & 0x300);
                iq2_eight(y, db[l / 2], rvl_iq2s_grid[idx], signs[4 * ib + l]);
            }
        }
    }
}

void dequantize_iq3_xxs_ref(const void *vx, float *y, int64_t n)
{
    const block_iq3_xxs *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs, *sas = x[i].qs + QK / 4;
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t aux = rvl_ld_u32(sas + 4 * ib);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint8_t s = iq_signs(aux >> (7 * l));
                const uint16_t g1 = rvl_iq3xxs_grid[qs[8 * ib + 2 * l]];
                const uint16_t g2 = rvl_iq3xxs_grid[qs[8 * ib + 2 * l + 1]];
                for (int j = 0; j < 4; j++) {
                    y[j] = db * iq3xxs_map[(g1 >> (4 * j)) & 7] * sgn(s, j);
                    y[j + 4] = db * iq3xxs_map[(g2 >> (4 * j)) & 7] * sgn(s, j + 4);
                }
            }
        }
    }
}

void dequantize_iq3_s_ref(const void *vx, float *y, int64_t n)
{
    const block_iq3_s *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t sc = x[i].scales[ib / 2];
            const float db = d * (float)(1 + 2 * (ib % 2 ? sc >> 4 : sc & 0xf));
            const uint8_t *qs = x[i].qs + 8 * ib, *signs = x[i].signs + 4 * ib;
            const uint8_t qh = x[i].qh[ib];
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t g1 = rvl_iq3s_grid[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)];
                const uint16_t g2 = rvl_iq3s_grid[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)];
                for (int j = 0; j < 4; j++) {
                    y[j] = db * iq3s_map[(g1 >> (4 * j)) & 7] * sgn(signs[l], j);
                    y[j + 4] = db * iq3s_map[(g2 >> (4 * j)) & 7] * sgn(signs[l], j + 4);
                }
            }
        }
    }
}

static inline void iq1_eight(float *y, float dl, uint16_t g, float delta)
{
    for (int j = 0; j < 8; j++)
        y[j] = dl * (iq1_map[(g >> (2 * j)) & 3] + delta);
}

void dequantize_iq1_s_ref(const void *vx, float *y, int64_t n)
{
    const block_iq1_s *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t qh = x[i].qh[ib];
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -IQ1S_DELTA : IQ1S_DELTA;
            for (int l = 0; l < 4; l++, y += 8) {
                const int idx = x[i].qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
                iq1_eight(y, dl, rvl_iq1s_grid[idx], delta);
            }
        }
    }
}

/* IQ1_M follows llama.cpp: bit 3 of each qh nibble selects -delta. (gguf-py
 * 0.19's numpy version always uses -delta because of an operator-precedence
 * slip, `qh & 0x08 == 0`; the goldens only use blocks where both agree.) */
void dequantize_iq1_m_ref(const void *vx, float *y, int64_t n)
{
    const block_iq1_m *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        uint16_t sc[4];
        memcpy(sc, x[i].scales, 8);
        /* the f16 super scale is spread over the top nibbles of sc[0..3] */
        const rvl_f16 dh = (rvl_f16)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                     ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        const float d = rvl_f16_to_f32(dh);
        const uint8_t *qs = x[i].qs, *qh = x[i].qh;
        for (int ib = 0; ib < 8; ib++, qs += 4, qh += 2) {
            const int s = 6 * (ib % 2);
            const float dl1 = d * (float)(2 * ((sc[ib / 2] >> s) & 7) + 1);
            const float dl2 = d * (float)(2 * ((sc[ib / 2] >> (s + 3)) & 7) + 1);
            for (int l = 0; l < 4; l++, y += 8) {
                const uint8_t h = qh[l / 2] >> (4 * (l % 2));
                const int idx = qs[l] | ((h & 7) << 8);
                const float delta = h & 0x08 ? -IQ1S_DELTA : IQ1S_DELTA;
                iq1_eight(y, l < 2 ? dl1 : dl2, rvl_iq1s_grid[idx], delta);
            }
        }
    }
}

/* ======================================================================
 * Ternary formats (BitNet b1.58 / TriLM)
 * ====================================================================== */

/* TQ1_0: 5 trits per byte as a fixed-point fraction of 3^5; trit n of a
 * byte is the top trit of (byte * 3^n) mod 256. */
static inline int tq1_trit(uint8_t b, int n)
{
    static const uint8_t pow3[5] = { 1, 3, 9, 27, 81 };
    uint8_t q = (uint8_t)(b * pow3[n]);
    return ((uint16_t)q * 3) >> 8;
}

void dequantize_tq1_0_ref(const void *vx, float *y, int64_t n)
{
    const block_tq1_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        for (int t = 0; t < 5; t++)              /* qs[0..31]: 160 values */
            for (int m = 0; m < 32; m++)
                *y++ = (float)(tq1_trit(x[i].qs[m], t) - 1) * d;
        for (int t = 0; t < 5; t++)              /* qs[32..47]: 80 values */
            for (int m = 0; m < 16; m++)
                *y++ = (float)(tq1_trit(x[i].qs[32 + m], t) - 1) * d;
        for (int t = 0; t < 4; t++)              /* qh[0..3]: 16 values */
            for (int m = 0; m < 4; m++)
                *y++ = (float)(tq1_trit(x[i].qh[m], t) - 1) * d;
    }
}

void dequantize_tq2_0_ref(const void *vx, float *y, int64_t n)
{
    const block_tq2_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = rvl_f16_to_f32(x[i].d);
        for (int j = 0; j < 64; j += 32)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++)
                    *y++ = (float)(((x[i].qs[j + m] >> (2 * l)) & 3) - 1) * d;
    }
}

/* ======================================================================
 * Microscaling FP4 (E2M1 values, doubled to integers)
 * ====================================================================== */

const int8_t rvl_kvalues_mxfp4[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };
#define kvalues_fp4 rvl_kvalues_mxfp4

/* The code of the value nearest to x among d * levels: the first of the
 * 16 with the smallest |d*level - x| (so 0, not -0, and on a tie the
 * code listed first; a NaN x gets 0), llama.cpp's best_index_mxfp4. */
static inline int mxfp4_index(float x, float d)
{
    int best = 0;
    float best_err = fabsf((float)kvalues_fp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf((float)kvalues_fp4[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

/* The block exponent of llama.cpp's quantize_row_mxfp4_ref: e =
 * floor(log2f(amax)) - 2 + 127, so that amax / 2^(e-127) is in [4, 8)
 * and the largest level (6) covers it up to rounding; 0 for an all-zero
 * block. Computed like ggml, with libm's log2f, whose float result
 * (rounded up to the next integer for amax just below a power of two)
 * decides the exponent. ggml converts the float to uint8_t directly,
 * undefined in C outside 0..255; on x86 (cvttss2si, then the low byte)
 * it wraps modulo 256 for amax < 2^-125 and gives 0 for an infinite
 * amax, which this reproduces with defined conversions. */
static inline uint8_t mxfp4_exponent(float amax)
{
    if (!(amax > 0.0f))
        return 0;
    const float l = floorf(log2f(amax)) - 2 + 127;
    if (!(fabsf(l) < 2147483648.0f))
        return 0;
    return (uint8_t)(uint32_t)(int32_t)l;
}

void quantize_mxfp4_ref(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    block_mxfp4 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j]))
                amax = fabsf(x[j]);
        const uint8_t e = mxfp4_exponent(amax);
        const float d = rvl_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(mxfp4_index(x[j], d) | mxfp4_index(x[j + 16], d) << 4);
    }
}

void dequantize_mxfp4_ref(const void *vx, float *y, int64_t n)
{
    const block_mxfp4 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rvl_e8m0_half(x[i].e);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)kvalues_fp4[x[i].qs[j] & 0xf];
            y[j + 16] = d * (float)kvalues_fp4[x[i].qs[j] >> 4];
        }
    }
}

/* Unsigned E4M3 (bias 7) sub-block scale, halved; 0x7f (NaN) reads as 0.
 * The sign bit is ignored, as in gguf-py. */
static inline float ue4m3_half(uint8_t u)
{
    const int exp = (u >> 3) & 0xf, man = u & 7;
    if (u == 0 || u == 0x7f)
        return 0.0f;
    const float v = exp == 0 ? ldexpf((float)man, -9) : ldexpf(1.0f + man / 8.0f, exp - 7);
    return v * 0.5f;
}

void dequantize_nvfp4_ref(const void *vx, float *y, int64_t n)
{
    const block_nvfp4 *x = vx;
    for (int64_t i = 0; i < n / 64; i++) {
        for (int s = 0; s < 4; s++, y += 16) {
            const float d = ue4m3_half(x[i].d[s]);
            const uint8_t *qs = x[i].qs + 8 * s;
            for (int j = 0; j < 8; j++) {
                y[j] = d * (float)kvalues_fp4[qs[j] & 0xf];
                y[j + 8] = d * (float)kvalues_fp4[qs[j] >> 4];
            }
        }
    }
}
