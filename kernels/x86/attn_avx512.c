/*
 * attn_avx512.c - the attention kernels (attn.h) on AVX-512 F/BW/VL:
 * 16-lane float vectors, f16 keys and values widened by vcvtph2ps. The
 * body is kernels/attn_simd.h; this file supplies the vector primitives.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "attn.h"
#include "f16.h"

RVL_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl")

typedef __m512 VF;
#define W 16

static inline VF v_zero(void) { return _mm512_setzero_ps(); }
static inline VF v_set1(float x) { return _mm512_set1_ps(x); }
static inline VF v_ld(const float *p) { return _mm512_loadu_ps(p); }
static inline VF v_ldh(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline void v_st(float *p, VF x) { _mm512_storeu_ps(p, x); }
static inline VF v_fma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
static inline VF v_mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
static inline VF v_add(VF a, VF b) { return _mm512_add_ps(a, b); }
static inline VF v_sub(VF a, VF b) { return _mm512_sub_ps(a, b); }
static inline VF v_div(VF a, VF b) { return _mm512_div_ps(a, b); }
static inline VF v_max(VF a, VF b) { return _mm512_max_ps(a, b); }
static inline VF v_abs(VF a) { return _mm512_abs_ps(a); }
static inline VF v_sel_lt(VF a, VF b, VF x, VF y)
{
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x);
}
static inline VF v_copysign(VF mag, VF sign)
{
    const __m512i sm = _mm512_set1_epi32((int)0x80000000u);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(sign), sm),
                                               _mm512_andnot_si512(sm, _mm512_castps_si512(mag))));
}
static inline VF v_round(VF x)
{
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline VF v_exp2i(VF n)
{
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
static inline __m256 half_sum(VF x)
{
    return _mm256_add_ps(_mm512_castps512_ps256(x),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}
static inline float v_hsum(VF x)
{
    const __m256 h = half_sum(x);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float v_hmax(VF x)
{
    const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(x),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* halves added, then avx2's tree: the same order for each of the four */
static inline void v_hsum4(VF a, VF b, VF c, VF d, float out[4])
{
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(half_sum(a), half_sum(b)),
                                    _mm256_hadd_ps(half_sum(c), half_sum(d)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
}

#define ATTN_ISA avx512
#include "attn_simd.h"

RVL_X86_TARGET_END

#endif
