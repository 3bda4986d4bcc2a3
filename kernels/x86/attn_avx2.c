/*
 * attn_avx2.c - the attention kernels (attn.h) on AVX2 + FMA + F16C:
 * 8-lane float vectors, f16 keys and values widened by vcvtph2ps. The
 * body is kernels/attn_simd.h; this file supplies the vector primitives.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "attn.h"
#include "f16.h"

RVL_X86_TARGET_BEGIN("avx2,fma,f16c")

typedef __m256 VF;
#define W 8

static inline VF v_zero(void) { return _mm256_setzero_ps(); }
static inline VF v_set1(float x) { return _mm256_set1_ps(x); }
static inline VF v_ld(const float *p) { return _mm256_loadu_ps(p); }
static inline VF v_ldh(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline void v_st(float *p, VF x) { _mm256_storeu_ps(p, x); }
static inline VF v_fma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
static inline VF v_mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
static inline VF v_add(VF a, VF b) { return _mm256_add_ps(a, b); }
static inline VF v_sub(VF a, VF b) { return _mm256_sub_ps(a, b); }
static inline VF v_div(VF a, VF b) { return _mm256_div_ps(a, b); }
static inline VF v_max(VF a, VF b) { return _mm256_max_ps(a, b); }
static inline VF v_abs(VF a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline VF v_sel_lt(VF a, VF b, VF x, VF y)
{
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
static inline VF v_copysign(VF mag, VF sign)
{
    const VF sm = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_and_ps(sign, sm), _mm256_andnot_ps(sm, mag));
}
static inline VF v_round(VF x)
{
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline VF v_exp2i(VF n)
{
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
static inline float v_hsum(VF x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float v_hmax(VF x)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* (a0+a1)+(a2+a3) + (a4+a5)+(a6+a7) for each of the four */
static inline void v_hsum4(VF a, VF b, VF c, VF d, float out[4])
{
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
}

#define ATTN_ISA avx2
#include "attn_simd.h"

RVL_X86_TARGET_END

#endif
