/*
 * neon.c - arm64 ASIMD kernels: the integer dot products of every
 * quantized weight format (int_dots.h, with widening multiplies), the
 * F32/F16/BF16 dot products, the activation quantizers and the
 * dequantizers used on hot paths.
 *
 * Quantizers and dequantizers give ref's bits exactly (arm.h): the same
 * float operations one at a time (common.h turns contraction off; FMA
 * only where a dot product asks for it), Q8_0/Q8_1 rounding half away
 * from zero like roundf (fcvtas), Q8_K half to even like rvl_nearest_int
 * (fcvtns), f16 through fcvt with round-to-nearest-even (Linux leaves
 * FPCR at its default: RN, no flush to zero, NaNs propagated).
 */
#include "arm/arm.h"

#ifdef RVL_HAVE_NEON

#include "arm/common.h"

/* ======================================================================
 * Integer dot products
 * ====================================================================== */

/* acc + the 16 products x*y: int8*int8 fits int16 exactly (16384 at
 * most), pairwise-added into the int32 lanes. */
static inline int32x4_t dot16(int32x4_t acc, int8x16_t x, int8x16_t y)
{
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(x), vget_low_s8(y)));
    return vpadalq_s16(acc, vmull_high_s8(x, y));
}

#define RVL_ISA_SFX neon
#include "arm/int_dots.h"
#include "arm/gemm.h"
#undef RVL_ISA_SFX

/* ======================================================================
 * F32, F16, BF16 dot products: float lanes, four accumulators
 * ====================================================================== */

static inline float32x4_t ld_f32x4(const uint8_t *p)
{
    return vreinterpretq_f32_u8(vld1q_u8(p));
}

static inline float32x4_t ld_f16x4(const uint8_t *p)
{
    return vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p)));
}

static inline float32x4_t ld_bf16x4(const uint8_t *p)
{
    return vreinterpretq_f32_u32(vshll_n_u16(vreinterpret_u16_u8(vld1_u8(p)), 16));
}

static inline float sc_f32(const uint8_t *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

static inline float sc_f16(const uint8_t *p)
{
    rvl_f16 h;
    memcpy(&h, p, 2);
    return f16s(h);
}

static inline float sc_bf16(const uint8_t *p)
{
    rvl_bf16 h;
    memcpy(&h, p, 2);
    return rvl_bf16_to_f32(h);
}

#define PLAIN_DOT(name, esize, LOAD, SCALAR)                                       \
    float name(int64_t n, const void *vw, const void *va)                          \
    {                                                                              \
        const uint8_t *w = vw, *a = va;                                            \
        float32x4_t acc[4] = { vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0),     \
                               vdupq_n_f32(0) };                                   \
        int64_t i = 0;                                                             \
        for (; i + 16 <= n; i += 16) {                                             \
            prefetch_block(w + (esize) * i, 16 * (esize));                         \
            for (int k = 0; k < 4; k++)                                            \
                acc[k] = vfmaq_f32(acc[k], LOAD(w + (esize) * (i + 4 * k)),        \
                                   LOAD(a + (esize) * (i + 4 * k)));               \
        }                                                                          \
        for (; i + 4 <= n; i += 4)                                                 \
            acc[0] = vfmaq_f32(acc[0], LOAD(w + (esize) * i), LOAD(a + (esize) * i)); \
        float s = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]))); \
        for (; i < n; i++)                                                         \
            s += SCALAR(w + (esize) * i) * SCALAR(a + (esize) * i);                \
        return s;                                                                  \
    }

PLAIN_DOT(vec_dot_f32_f32_neon, 4, ld_f32x4, sc_f32)
PLAIN_DOT(vec_dot_f16_f16_neon, 2, ld_f16x4, sc_f16)
PLAIN_DOT(vec_dot_bf16_bf16_neon, 2, ld_bf16x4, sc_bf16)
#undef PLAIN_DOT

/* ======================================================================
 * Activation quantizers (bit-identical to ref)
 * ====================================================================== */

/* 16 int32 (4 vectors, element order) to 16 int8 with saturation (the
 * values are in -127..127 for finite input, so it never saturates). */
static inline int8x16_t narrow16(const int32x4_t q[4])
{
    const int16x8_t a = vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]));
    const int16x8_t b = vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]));
    return vcombine_s8(vqmovn_s16(a), vqmovn_s16(b));
}

/* One Q8_0/Q8_1 block: qs, d; returns sum(qs). ref: d = amax / 127,
 * id = 1/d (0 for d = 0), q = roundf(x * id). */
static inline int q8_block(const float *x, int8_t *qs, float *d_out)
{
    float32x4_t v[8];
    float32x4_t mx = vdupq_n_f32(0);
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        mx = vmaxq_f32(mx, vabsq_f32(v[k]));
    }
    const float amax = vmaxvq_f32(mx);
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int h = 0; h < 2; h++) {
        int32x4_t q[4];
        for (int k = 0; k < 4; k++)
            q[k] = vcvtaq_s32_f32(vmulq_n_f32(v[4 * h + k], id));
        const int8x16_t b = narrow16(q);
        vst1q_s8(qs + 16 * h, b);
        sum += vaddlvq_s8(b);
    }
    *d_out = d;
    return sum;
}

void quantize_q8_0_neon(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        q8_block(x + 32 * i, y[i].qs, &d);
        y[i].d = f16_of(d);
    }
}

void quantize_q8_1_neon(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        const int sum = q8_block(x + 32 * i, y[i].qs, &d);
        y[i].d = f16_of(d);
        y[i].s = f16_of((float)sum * d);
    }
}

void quantize_q8_K_neon(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / RVL_QK_K; i++, x += RVL_QK_K) {
        float32x4_t mx = vdupq_n_f32(0);
        for (int k = 0; k < 64; k++)
            mx = vmaxq_f32(mx, vabsq_f32(vld1q_f32(x + 4 * k)));
        const float amax = vmaxvq_f32(mx);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the first element of largest magnitude gives the sign (ref) */
        int first = 0;
        for (int k = 0; k < 64; k++)
            if (vmaxvq_u32(vceqq_f32(vabsq_f32(vld1q_f32(x + 4 * k)), vdupq_n_f32(amax)))) {
                first = 4 * k;
                while (!(__builtin_fabsf(x[first]) == amax))
                    first++;
                break;
            }
        const float iscale = -127.f / x[first];
        for (int g = 0; g < 16; g++) {
            int32x4_t q[4];
            for (int k = 0; k < 4; k++)
                q[k] = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * g + 4 * k), iscale));
            const int8x16_t b = narrow16(q);
            vst1q_s8(y[i].qs + 16 * g, b);
            y[i].bsums[g] = vaddlvq_s8(b);
        }
        y[i].d = 1 / iscale;
    }
}

void quantize_f16_neon(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    uint8_t *y = vy;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1_u8(y + 2 * i, vreinterpret_u8_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; i++) {
        const rvl_f16 h = f16_of(x[i]);
        memcpy(y + 2 * i, &h, 2);
    }
}

void quantize_bf16_neon(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    uint8_t *y = vy;
    const uint32x4_t abs_mask = vdupq_n_u32(0x7fffffff), inf = vdupq_n_u32(0x7f800000);
    const uint32x4_t half = vdupq_n_u32(0x7fff), one = vdupq_n_u32(1), quiet = vdupq_n_u32(64);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const uint32x4_t b = vreinterpretq_u32_f32(vld1q_f32(x + i));
        /* round to nearest even on bit 16; NaN: truncate and set the quiet bit */
        const uint32x4_t lsb = vandq_u32(vshrq_n_u32(b, 16), one);
        const uint32x4_t rn = vshrq_n_u32(vaddq_u32(b, vaddq_u32(half, lsb)), 16);
        const uint32x4_t qn = vorrq_u32(vshrq_n_u32(b, 16), quiet);
        const uint32x4_t nan = vcgtq_u32(vandq_u32(b, abs_mask), inf);
        vst1_u8(y + 2 * i, vreinterpret_u8_u16(vmovn_u32(vbslq_u32(nan, qn, rn))));
    }
    for (; i < n; i++) {
        const rvl_bf16 h = rvl_f32_to_bf16(x[i]);
        memcpy(y + 2 * i, &h, 2);
    }
}

/* ======================================================================
 * Dequantizers (bit-identical to ref)
 * ====================================================================== */

void dequantize_f16_neon(const void *vx, float *y, int64_t n)
{
    const uint8_t *x = vx;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, ld_f16x4(x + 2 * i));
    for (; i < n; i++)
        y[i] = sc_f16(x + 2 * i);
}

void dequantize_bf16_neon(const void *vx, float *y, int64_t n)
{
    const uint8_t *x = vx;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, ld_bf16x4(x + 2 * i));
    for (; i < n; i++)
        y[i] = sc_bf16(x + 2 * i);
}

/* y[0..15] = d * q, plus m when m is not NULL (never "+ 0": that would
 * turn ref's -0.0 into +0.0) */
static inline void store16(float *y, int8x16_t q, float d, const float *m)
{
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    const int32x4_t part[4] = { vmovl_s16(vget_low_s16(lo)), vmovl_high_s16(lo),
                                vmovl_s16(vget_low_s16(hi)), vmovl_high_s16(hi) };
    for (int k = 0; k < 4; k++) {
        float32x4_t v = vmulq_n_f32(vcvtq_f32_s32(part[k]), d);
        if (m)
            v = vaddq_f32(v, vdupq_n_f32(*m));
        vst1q_f32(y + 4 * k, v);
    }
}

void dequantize_q8_0_neon(const void *vx, float *y, int64_t n)
{
    const block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = f16s(x[i].d);
        store16(y, ld_s8(x[i].qs), d, NULL);
        store16(y + 16, ld_s8(x[i].qs + 16), d, NULL);
    }
}

void dequantize_q4_0_neon(const void *vx, float *y, int64_t n)
{
    const block_q4_0 *x = vx;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = f16s(x[i].d);
        const uint8x16_t b = vld1q_u8(x[i].qs);
        store16(y, vsubq_s8(as_s8(vandq_u8(b, m4)), eight), d, NULL);
        store16(y + 16, vsubq_s8(as_s8(vshrq_n_u8(b, 4)), eight), d, NULL);
    }
}

void dequantize_q4_1_neon(const void *vx, float *y, int64_t n)
{
    const block_q4_1 *x = vx;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = f16s(x[i].d), m = f16s(x[i].m);
        const uint8x16_t b = vld1q_u8(x[i].qs);
        store16(y, as_s8(vandq_u8(b, m4)), d, &m);
        store16(y + 16, as_s8(vshrq_n_u8(b, 4)), d, &m);
    }
}

void dequantize_q4_K_neon(const void *vx, float *y, int64_t n)
{
    const block_q4_K *x = vx;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int64_t i = 0; i < n / RVL_QK_K; i++) {
        uint8_t sc[8], mn[8];
        k4_scales_mins(x[i].scales, sc, mn);
        const float d = f16s(x[i].d), dmin = f16s(x[i].dmin);
        for (int c = 0; c < 4; c++, y += 64) {
            const uint8x16_t b0 = vld1q_u8(x[i].qs + 32 * c), b1 = vld1q_u8(x[i].qs + 32 * c + 16);
            /* x = (d * sc) * q - dmin * m, as x + (-(dmin * m)) */
            const float d1 = d * (float)sc[2 * c], m1 = -(dmin * (float)mn[2 * c]);
            const float d2 = d * (float)sc[2 * c + 1], m2 = -(dmin * (float)mn[2 * c + 1]);
            store16(y, as_s8(vandq_u8(b0, m4)), d1, &m1);
            store16(y + 16, as_s8(vandq_u8(b1, m4)), d1, &m1);
            store16(y + 32, as_s8(vshrq_n_u8(b0, 4)), d2, &m2);
            store16(y + 48, as_s8(vshrq_n_u8(b1, 4)), d2, &m2);
        }
    }
}

void dequantize_q6_K_neon(const void *vx, float *y, int64_t n)
{
    const block_q6_K *x = vx;
    for (int64_t i = 0; i < n / RVL_QK_K; i++) {
        const float d = f16s(x[i].d);
        for (int h = 0; h < 2; h++, y += 128) {
            int8x16_t lv[8];
            q6_K_half(x[i].ql + 64 * h, x[i].qh + 32 * h, lv);
            /* group g of the half has scale scales[8h + g]: x = (d * sc) * q */
            for (int g = 0; g < 8; g++)
                store16(y + 16 * g, lv[g], d * (float)x[i].scales[8 * h + g], NULL);
        }
    }
}

#endif
