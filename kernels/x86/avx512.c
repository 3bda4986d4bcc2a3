/*
 * avx512.c - AVX-512 kernels. Two groups, each with its own target so
 * that dispatch.c can install one without the other:
 *
 *   _avx512vnni  the integer dot products of int_dots.h with vpdpbusd
 *                (u8 x s8 -> int32, no int16 saturation step) and
 *                vpdpwssd (int16 pairs times the group scales, accumulated)
 *                on 256-bit vectors: a 32-value block is one ymm, so wider
 *                vectors would only add shuffles. Needs F, BW, VL, VNNI.
 *   _avx512      F32/F16/BF16 dot products on 512-bit vectors (F, BW, VL);
 *   _avx512bf16  BF16 . BF16 with vdpbf16ps (+ BF16).
 *
 * The activation quantizers and dequantizers of avx2.c are already
 * bound by memory; the avx512 table keeps them.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>

/* ======================================================================
 * Integer dot products with VNNI
 * ====================================================================== */

RVL_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")

#include "x86/common.h"

static inline __m256i dot_u8s8(__m256i u, __m256i s)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

static inline __m256i acc_madd16(__m256i acc, __m256i p, __m256i c)
{
    return _mm256_dpwssd_epi32(acc, p, c);
}

#define RVL_ISA_SFX avx512vnni
#include "x86/int_dots.h"
#undef RVL_ISA_SFX

RVL_X86_TARGET_END

/* ======================================================================
 * F32, F16, BF16 dot products on zmm
 * ====================================================================== */

RVL_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl")

static inline float hsum512(__m512 v)
{
    return _mm512_reduce_add_ps(v);
}

static inline __m512 ld16_f32(const uint8_t *p)
{
    return _mm512_loadu_ps(p);
}

static inline __m512 ld16_f16(const uint8_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static inline __m512 ld16_bf16(const uint8_t *p)
{
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* Tails use masked loads: lanes past n read as zero and touch no memory. */
static inline __m512 ld16m_f32(const uint8_t *p, __mmask16 m)
{
    return _mm512_maskz_loadu_ps(m, p);
}

static inline __m512 ld16m_f16(const uint8_t *p, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

static inline __m512 ld16m_bf16(const uint8_t *p, __mmask16 m)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

#define PLAIN_DOT512(name, esize, LOAD, LOADM)                                     \
    float name(int64_t n, const void *vw, const void *va)                          \
    {                                                                              \
        const uint8_t *w = vw, *a = va;                                            \
        __m512 acc[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(),                \
                          _mm512_setzero_ps(), _mm512_setzero_ps() };              \
        int64_t i = 0;                                                             \
        for (; i + 64 <= n; i += 64) {                                             \
            for (int k = 0; k < (esize); k++)                                      \
                _mm_prefetch((const char *)w + (esize) * i + 64 * k + RVL_PREFETCH_AHEAD, \
                             _MM_HINT_T0);                                         \
            for (int k = 0; k < 4; k++)                                            \
                acc[k] = _mm512_fmadd_ps(LOAD(w + (esize) * (i + 16 * k)),         \
                                         LOAD(a + (esize) * (i + 16 * k)), acc[k]); \
        }                                                                          \
        for (; i + 16 <= n; i += 16)                                               \
            acc[0] = _mm512_fmadd_ps(LOAD(w + (esize) * i), LOAD(a + (esize) * i), acc[0]); \
        if (i < n) {                                                               \
            const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                  \
            acc[1] = _mm512_fmadd_ps(LOADM(w + (esize) * i, m), LOADM(a + (esize) * i, m), acc[1]); \
        }                                                                          \
        return hsum512(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]),                \
                                     _mm512_add_ps(acc[2], acc[3])));              \
    }

PLAIN_DOT512(vec_dot_f32_f32_avx512, 4, ld16_f32, ld16m_f32)
PLAIN_DOT512(vec_dot_f16_f16_avx512, 2, ld16_f16, ld16m_f16)
PLAIN_DOT512(vec_dot_bf16_bf16_avx512, 2, ld16_bf16, ld16m_bf16)
#undef PLAIN_DOT512

RVL_X86_TARGET_END

/* ======================================================================
 * BF16 . BF16 with vdpbf16ps: pairs of bf16 products summed into f32
 * lanes. The products are exact in f32; the instruction flushes bf16
 * denormal inputs to zero (no model weight is that small).
 * ====================================================================== */

RVL_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16")

float vec_dot_bf16_bf16_avx512bf16(int64_t n, const void *vw, const void *va)
{
    const uint8_t *w = vw, *a = va;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        _mm_prefetch((const char *)w + 2 * i + RVL_PREFETCH_AHEAD, _MM_HINT_T0);
        _mm_prefetch((const char *)w + 2 * i + 64 + RVL_PREFETCH_AHEAD, _MM_HINT_T0);
        acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(w + 2 * i),
                                (__m512bh)_mm512_loadu_si512(a + 2 * i));
        acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_loadu_si512(w + 2 * i + 64),
                                (__m512bh)_mm512_loadu_si512(a + 2 * i + 64));
    }
    for (; i < n; i += 32) {
        const int64_t left = n - i;
        const __mmask32 m = left >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << left) - 1);
        acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_maskz_loadu_epi16(m, w + 2 * i),
                                (__m512bh)_mm512_maskz_loadu_epi16(m, a + 2 * i));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

RVL_X86_TARGET_END

#endif
