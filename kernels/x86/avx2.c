/*
 * avx2.c - AVX2 + FMA + F16C kernels: the integer dot products of every
 * quantized weight format (int_dots.h), F32/F16/BF16 dot products, the
 * activation quantizers and the dequantizers used on hot paths.
 *
 * Quantizers and dequantizers give ref's bits exactly (dispatch.h): the
 * same float operations one at a time (no contraction into FMA in this
 * file, explicit _mm256_fmadd_ps only in the dot products), Q8_0/Q8_1
 * rounding half away from zero like roundf, Q8_K half to even like
 * rvl_nearest_int (vcvtps2dq in the default rounding mode), f16 through
 * vcvtps2ph with round-to-nearest-even.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>

RVL_X86_TARGET_BEGIN("avx2,fma,f16c")
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "x86/common.h"

/* ======================================================================
 * Integer dot products
 * ====================================================================== */

static inline __m256i dot_u8s8(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

static inline __m256i acc_madd16(__m256i acc, __m256i p, __m256i c)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, c));
}

#define RVL_ISA_SFX avx2
#include "x86/int_dots.h"
#undef RVL_ISA_SFX

/* ======================================================================
 * F32, F16, BF16 dot products: float lanes, four accumulators
 * ====================================================================== */

static inline __m256 ld_f16x8(const uint8_t *p)
{
    return _mm256_cvtph_ps(ld128(p));
}

static inline __m256 ld_bf16x8(const uint8_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128(p)), 16));
}

#define PLAIN_DOT(name, esize, LOAD, SCALAR)                                       \
    float name(int64_t n, const void *vw, const void *va)                          \
    {                                                                              \
        const uint8_t *w = vw, *a = va;                                            \
        __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(),                \
                          _mm256_setzero_ps(), _mm256_setzero_ps() };              \
        int64_t i = 0;                                                             \
        for (; i + 32 <= n; i += 32) {                                             \
            prefetch_block(w + (esize) * i, 32 * (esize));                         \
            for (int k = 0; k < 4; k++)                                            \
                acc[k] = _mm256_fmadd_ps(LOAD(w + (esize) * (i + 8 * k)),          \
                                         LOAD(a + (esize) * (i + 8 * k)), acc[k]); \
        }                                                                          \
        for (; i + 8 <= n; i += 8)                                                 \
            acc[0] = _mm256_fmadd_ps(LOAD(w + (esize) * i), LOAD(a + (esize) * i), acc[0]); \
        float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),             \
                                        _mm256_add_ps(acc[2], acc[3])));           \
        for (; i < n; i++)                                                         \
            s += SCALAR(w + (esize) * i) * SCALAR(a + (esize) * i);                \
        return s;                                                                  \
    }

static inline __m256 ld_f32x8(const uint8_t *p)
{
    return _mm256_loadu_ps((const float *)p);
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

PLAIN_DOT(vec_dot_f32_f32_avx2, 4, ld_f32x8, sc_f32)
PLAIN_DOT(vec_dot_f16_f16_avx2, 2, ld_f16x8, sc_f16)
PLAIN_DOT(vec_dot_bf16_bf16_avx2, 2, ld_bf16x8, sc_bf16)
#undef PLAIN_DOT

/* ======================================================================
 * Activation quantizers (bit-identical to ref)
 * ====================================================================== */

static inline __m256 abs_ps(__m256 x)
{
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
}

/* roundf: to nearest, half away from zero. Exact: v - trunc(v) is a float
 * without rounding, and trunc(v) +- 1 too (|v| < 2^24 where it matters). */
static inline __m256i round_away_epi32(__m256 v)
{
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = abs_ps(_mm256_sub_ps(v, t));
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
    const __m256 adj = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one);
    return _mm256_cvttps_epi32(_mm256_add_ps(t, adj));
}

/* 32 int32 (4 vectors, element order) to 32 int8 with saturation. */
static inline __m256i pack_i8(__m256i i0, __m256i i1, __m256i i2, __m256i i3)
{
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One Q8_0/Q8_1 block: qs, d; returns sum(qs). */
static inline int q8_block(const float *x, int8_t *qs, float *d_out)
{
    __m256 v[4];
    __m256 mx = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        mx = _mm256_max_ps(abs_ps(v[k]), mx);
    }
    const float amax = hmax_ps(mx);
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++)
        q[k] = round_away_epi32(_mm256_mul_ps(v[k], idv));
    _mm256_storeu_si256((__m256i *)qs, pack_i8(q[0], q[1], q[2], q[3]));
    *d_out = d;
    return hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
}

void quantize_q8_0_avx2(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        q8_block(x + 32 * i, y[i].qs, &d);
        y[i].d = _cvtss_sh(d, 0);
    }
}

/* A Q8_0 activation row and its block sums and scales (formats.h
 * rvl_act_sums): the same bytes as quantize_q8_0 then rvl_act_sums. */
void quantize_q8_0_act_avx2(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    block_q8_0 *y = vy;
    unsigned char *tail = (unsigned char *)vy + rvl_act_sums_offset(n);
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        const int32_t sum = q8_block(x + 32 * i, y[i].qs, &d);
        y[i].d = _cvtss_sh(d, 0);
        const float dd = _cvtsh_ss(y[i].d);
        memcpy(tail + 4 * i, &sum, 4);
        memcpy(tail + 4 * (n / 32) + 4 * i, &dd, 4);
    }
}

void quantize_q8_1_avx2(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        const int sum = q8_block(x + 32 * i, y[i].qs, &d);
        y[i].d = _cvtss_sh(d, 0);
        y[i].s = _cvtss_sh((float)sum * d, 0);
    }
}

void quantize_q8_K_avx2(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / RVL_QK_K; i++, x += RVL_QK_K) {
        __m256 mx = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++)
            mx = _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + 8 * k)), mx);
        const float amax = hmax_ps(mx);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the first element of largest magnitude keeps its sign (ref) */
        int first = 0;
        for (int k = 0; k < 32; k++) {
            const int m = _mm256_movemask_ps(_mm256_cmp_ps(
                abs_ps(_mm256_loadu_ps(x + 8 * k)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (m) {
                first = 8 * k + __builtin_ctz((unsigned)m);
                break;
            }
        }
        const float iscale = -127.f / x[first];
        const __m256 is = _mm256_set1_ps(iscale);
        for (int c = 0; c < 8; c++) {
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * c + 8 * k), is));
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * c), pack_i8(q[0], q[1], q[2], q[3]));
            /* sums of elements 0-15 and 16-31 */
            __m256i t = _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            t = _mm256_hadd_epi32(t, t);
            const __m128i r = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
            y[i].bsums[2 * c] = (int16_t)_mm_cvtsi128_si32(r);
            y[i].bsums[2 * c + 1] = (int16_t)_mm_extract_epi32(r, 1);
        }
        y[i].d = 1 / iscale;
    }
}

void quantize_f16_avx2(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    uint8_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + 2 * i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), 0));
    for (; i < n; i++) {
        const rvl_f16 h = _cvtss_sh(x[i], 0);
        memcpy(y + 2 * i, &h, 2);
    }
}

void quantize_bf16_avx2(const float *x, void *vy, int64_t n, const float *qw)
{
    (void)qw;
    uint8_t *y = vy;
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int k = 0; k < 2; k++) {
            const __m256i b = _mm256_castps_si256(_mm256_loadu_ps(x + i + 8 * k));
            /* round to nearest even on bit 16; NaN: truncate and set the quiet bit */
            const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), one);
            const __m256i rn = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(half, lsb)), 16);
            const __m256i qn = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(64));
            const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs_mask), inf);
            r[k] = _mm256_blendv_epi8(rn, qn, nan);
        }
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8);
        _mm256_storeu_si256((__m256i *)(y + 2 * i), p);
    }
    for (; i < n; i++) {
        const rvl_bf16 h = rvl_f32_to_bf16(x[i]);
        memcpy(y + 2 * i, &h, 2);
    }
}

/* ======================================================================
 * Dequantizers (bit-identical to ref)
 * ====================================================================== */

void dequantize_f16_avx2(const void *vx, float *y, int64_t n)
{
    const uint8_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, ld_f16x8(x + 2 * i));
    for (; i < n; i++)
        y[i] = sc_f16(x + 2 * i);
}

void dequantize_bf16_avx2(const void *vx, float *y, int64_t n)
{
    const uint8_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, ld_bf16x8(x + 2 * i));
    for (; i < n; i++)
        y[i] = sc_bf16(x + 2 * i);
}

/* y[0..31] = d * q (+ m when add_m): 32 int8 levels in element order */
static inline void store32(float *y, __m256i q8, __m256 d, const __m256 *m)
{
    const __m128i lo = _mm256_castsi256_si128(q8), hi = _mm256_extracti128_si256(q8, 1);
    const __m128i part[4] = { lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi) };
    for (int k = 0; k < 4; k++) {
        __m256 v = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[k])));
        if (m)
            v = _mm256_add_ps(v, *m);
        _mm256_storeu_ps(y + 8 * k, v);
    }
}

void dequantize_q8_0_avx2(const void *vx, float *y, int64_t n)
{
    const block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++)
        store32(y + 32 * i, ld256(x[i].qs), _mm256_set1_ps(f16s(x[i].d)), NULL);
}

void dequantize_q4_0_avx2(const void *vx, float *y, int64_t n)
{
    const block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++)
        store32(y + 32 * i, _mm256_sub_epi8(nibbles32(x[i].qs), _mm256_set1_epi8(8)),
                _mm256_set1_ps(f16s(x[i].d)), NULL);
}

void dequantize_q4_1_avx2(const void *vx, float *y, int64_t n)
{
    const block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 m = _mm256_set1_ps(f16s(x[i].m));
        store32(y + 32 * i, nibbles32(x[i].qs), _mm256_set1_ps(f16s(x[i].d)), &m);
    }
}

void dequantize_q4_K_avx2(const void *vx, float *y, int64_t n)
{
    const block_q4_K *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / RVL_QK_K; i++, y += RVL_QK_K) {
        uint8_t scm[16];
        _mm_storeu_si128((__m128i *)scm, k4_scales_mins(x[i].scales));
        const float d = f16s(x[i].d), dmin = f16s(x[i].dmin);
        for (int c = 0; c < 4; c++) {
            const __m256i b = ld256(x[i].qs + 32 * c);
            for (int s = 0; s < 2; s++) {
                const int j = 2 * c + s;
                const __m256i q = _mm256_and_si256(s ? _mm256_srli_epi16(b, 4) : b, m4);
                /* x = (d * sc) * q - dmin * m */
                const __m256 neg = _mm256_set1_ps(-(dmin * (float)scm[8 + j]));
                store32(y + 32 * j, q, _mm256_set1_ps(d * (float)scm[j]), &neg);
            }
        }
    }
}

void dequantize_q6_K_avx2(const void *vx, float *y, int64_t n)
{
    const block_q6_K *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i off = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / RVL_QK_K; i++) {
        const float d = f16s(x[i].d);
        for (int h = 0; h < 2; h++, y += 128) {
            const __m256i l0 = ld256(x[i].ql + 64 * h), l1 = ld256(x[i].ql + 64 * h + 32);
            const __m256i hq = ld256(x[i].qh + 32 * h);
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4),
                                _mm256_and_si256(_mm256_slli_epi16(hq, 4), m30)),
                _mm256_or_si256(_mm256_and_si256(l1, m4),
                                _mm256_and_si256(_mm256_slli_epi16(hq, 2), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                _mm256_and_si256(hq, m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(hq, 2), m30)),
            };
            const int8_t *sc = x[i].scales + 8 * h;
            for (int k = 0; k < 4; k++) {
                /* element l + 32k of the half has scale sc[2k + l/16] */
                const __m256i v = _mm256_sub_epi8(q[k], off);
                const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
                const __m128i part[4] = { lo, _mm_unpackhi_epi64(lo, lo), hi,
                                          _mm_unpackhi_epi64(hi, hi) };
                for (int p = 0; p < 4; p++) {
                    const __m256 ds = _mm256_set1_ps(d * (float)sc[2 * k + p / 2]);
                    _mm256_storeu_ps(y + 32 * k + 8 * p,
                                     _mm256_mul_ps(ds, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[p]))));
                }
            }
        }
    }
}

RVL_X86_TARGET_END

#endif
