/*
 * rowops_avx512.c - RMSNorm and SwiGLU with AVX-512 F (rowops.h).
 *
 * RMSNorm sums the squares in double as the reference does (8 lanes, then
 * across them), then the same float operations per element. SwiGLU's exp
 * is e^x = 2^k e^r: k = round(x log2 e), r = x - k ln 2 in two steps
 * (Cody-Waite), e^r by its degree-6 Taylor polynomial on |r| <= ln2 / 2
 * (truncation below 2^-23 relative), 2^k by vscalefps, which also gives
 * 0 and +inf past the float range as expf does. The tail of a slice goes
 * through the same instructions under a mask: an element's result does
 * not depend on where a slice starts.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>
#include <math.h>

#include "rowops.h"

RVL_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl")

void rmsnorm_f32_avx512(float *y, const float *x, const float *w, int64_t n, float eps)
{
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m512 q = _mm512_mul_ps(v, v); /* x * x in float, as ref */
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(q)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(q), 1))));
    }
    double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    for (; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    const __m512 sc = _mm512_set1_ps(scale);
    for (i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i), g = _mm512_maskz_loadu_ps(m, w + i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_mul_ps(v, sc), g));
    }
}

/* e^x for every lane (see the top) */
static inline __m512 exp_ps(__m512 x)
{
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    /* past the range: k saturates scalef to 0 or inf; NaN stays NaN */
    return _mm512_scalef_ps(p, k);
}

void swiglu_f32_avx512(float *g, const float *u, int64_t n)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, g + i), b = _mm512_maskz_loadu_ps(m, u + i);
        const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), v));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_div_ps(v, _mm512_add_ps(one, e)), b));
    }
}

RVL_X86_TARGET_END

#endif
