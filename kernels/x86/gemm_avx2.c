/*
 * gemm_avx2.c - register-tiled GEMM micro-kernels (formats.h, gemm slot)
 * with AVX2, for prompt processing on CPUs without AVX-512 VNNI: a tile
 * of up to 4 weight rows times 8 tokens is computed block by block, so
 * each weight block is unpacked (nibbles -> levels, f16 scales -> float)
 * once for the 8 tokens, and the 8 activation blocks' scales are
 * converted once for the 4 rows.
 *
 * Per (row, token, block) the integer products are those of int_dots.h's
 * vec_dot (vpmaddubsw with the sign trick for signed levels, vpmaddwd
 * into 8 int32 lanes); the 8 tokens' lanes are then summed exactly into
 * one int32 lane per token (a vphaddw/vphaddd tree), converted, and
 * accumulated with FMA times (weight d * activation d), one float lane
 * per token.
 * Only the order of the float additions differs from vec_dot (fewer of
 * them: one per block, like ref), within the bound of dispatch.h.
 *
 * Each (row, token) result is computed by the same operations whatever
 * the tile shape (a lane never mixes two tokens' or rows' values): the
 * output does not depend on how callers group rows and tokens. Past the
 * real tokens, a tile repeats the last one and drops its results.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>

RVL_X86_TARGET_BEGIN("avx2,fma,f16c")

#include "x86/common.h"

enum { G_Q4_0, G_Q4_1, G_Q8_0 };

#define AI static inline __attribute__((always_inline))

AI float f16at(const uint8_t *p)
{
    rvl_f16 h;
    memcpy(&h, p, sizeof h);
    return f16s(h);
}

AI short ld16s(const uint8_t *p)
{
    int16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* The f16 at offset off of each of the 8 tokens' rows, lane k = token k. */
AI __m256 f16x8(const uint8_t *const ap[8], size_t off)
{
    return _mm256_cvtph_ps(_mm_setr_epi16(ld16s(ap[0] + off), ld16s(ap[1] + off),
                                          ld16s(ap[2] + off), ld16s(ap[3] + off),
                                          ld16s(ap[4] + off), ld16s(ap[5] + off),
                                          ld16s(ap[6] + off), ld16s(ap[7] + off)));
}

/* Eight 32-bit integer vectors (8 lanes each, one per token) summed into
 * one vector whose lane k is the total of p[k]: exact integer adds. */
AI __m256i sum8(const __m256i p[8])
{
    const __m256i x = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]),
                                        _mm256_hadd_epi32(p[2], p[3]));
    const __m256i y = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]),
                                        _mm256_hadd_epi32(p[6], p[7]));
    /* x: tokens 0-3 low halves | tokens 0-3 high halves; y: tokens 4-7 */
    return _mm256_add_epi32(_mm256_permute2x128_si256(x, y, 0x20),
                            _mm256_permute2x128_si256(x, y, 0x31));
}

/* The same from the vpmaddubsw products m[k] (16 int16 pair sums of
 * token k) of Q4 levels (|level| <= 15): two levels of int16 pair adds
 * first (8 products of at most 15 * 127: no overflow), then int32. */
AI __m256i sum8_16(const __m256i m[8])
{
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i x = _mm256_madd_epi16(_mm256_hadd_epi16(_mm256_hadd_epi16(m[0], m[1]),
                                                          _mm256_hadd_epi16(m[2], m[3])), ones);
    const __m256i y = _mm256_madd_epi16(_mm256_hadd_epi16(_mm256_hadd_epi16(m[4], m[5]),
                                                          _mm256_hadd_epi16(m[6], m[7])), ones);
    return _mm256_add_epi32(_mm256_permute2x128_si256(x, y, 0x20),
                            _mm256_permute2x128_si256(x, y, 0x31));
}

/* NR rows (w_stride bytes apart) times the 8 tokens ap[0..7] (past the
 * real tokens, ap repeats the last one: tn says how many are real). */
AI void tile(int kind, int NR, int64_t nb, const uint8_t *w, size_t w_stride,
             const uint8_t *const ap[8], int tn, float *y, size_t y_stride)
{
    const size_t wsz = kind == G_Q4_0 ? sizeof(block_q4_0)
                       : kind == G_Q4_1 ? sizeof(block_q4_1) : sizeof(block_q8_0);
    const size_t asz = kind == G_Q4_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t aoff = kind == G_Q4_1 ? 4 : 2;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < NR; r++)
        acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const size_t ao = (size_t)i * asz;
        /* the 8 tokens' scales (and Q8_1's s), lane k = token k */
        const __m256 da = f16x8(ap, ao);
        const __m256 sa = kind == G_Q4_1 ? f16x8(ap, ao + 2) : _mm256_setzero_ps();
        _Pragma("GCC unroll 4")
        for (int r = 0; r < NR; r++) {
            const uint8_t *wb = w + r * w_stride + (size_t)i * wsz;
            if (kind == G_Q8_0 || (i & 1) == 0)
                prefetch_ahead(wb);
            /* the weight levels: signed (Q4_0: q - 8, Q8_0) go through
             * vpmaddubsw as |w| times a with w's sign, unsigned (Q4_1)
             * straight */
            __m256i lv, uw;
            if (kind == G_Q8_0)
                lv = ld256(wb + 2);
            else if (kind == G_Q4_0)
                lv = _mm256_sub_epi8(nibbles32(wb + 2), _mm256_set1_epi8(8));
            else
                lv = nibbles32(wb + 4);
            uw = kind == G_Q4_1 ? lv : _mm256_sign_epi8(lv, lv);
            __m256i p[8];
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8; k++) {
                __m256i a = ld256(ap[k] + ao + aoff);
                if (kind != G_Q4_1)
                    a = _mm256_sign_epi8(a, lv);
                p[k] = _mm256_maddubs_epi16(uw, a);
                if (kind == G_Q8_0) /* pair sums up to 2 * 128 * 127 */
                    p[k] = _mm256_madd_epi16(p[k], ones);
            }
            const __m256i is = kind == G_Q8_0 ? sum8(p) : sum8_16(p);
            if (kind == G_Q4_1) {
                int32_t dmbits;
                memcpy(&dmbits, wb, 4);
                const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(dmbits)); /* d, m */
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is),
                                         _mm256_mul_ps(_mm256_broadcastss_ps(dm), da), acc[r]);
                acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dm)), sa, acc[r]);
            } else {
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is),
                                         _mm256_mul_ps(_mm256_set1_ps(f16at(wb)), da), acc[r]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < NR; r++) {
        float l[8];
        _mm256_storeu_ps(l, acc[r]);
        for (int k = 0; k < tn; k++)
            y[(size_t)k * y_stride + r] = l[k];
    }
}

#define T(R)                                                                       \
    case R:                                                                        \
        tile(kind, R, nb, wr, w_stride, ap, tn, yt, y_stride);                     \
        break;

AI void gemm(int kind, int64_t n, const void *vw, size_t w_stride, int nr, const void *vact,
             size_t act_stride, int nt, float *y, size_t y_stride)
{
    const int64_t nb = n / 32;
    const uint8_t *w = vw, *act = vact;
    for (int r0 = 0; r0 < nr; r0 += 4) {
        const int rn = nr - r0 < 4 ? nr - r0 : 4;
        const uint8_t *wr = w + (size_t)r0 * w_stride;
        for (int t0 = 0; t0 < nt; t0 += 8) {
            const int tn = nt - t0 < 8 ? nt - t0 : 8;
            const uint8_t *ap[8];
            for (int k = 0; k < 8; k++)
                ap[k] = act + (size_t)(t0 + (k < tn ? k : tn - 1)) * act_stride;
            float *yt = y + (size_t)t0 * y_stride + r0;
            switch (rn) {
                T(1) T(2) T(3) T(4)
            }
        }
    }
}
#undef T

void gemm_q4_0_q8_0_avx2(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                         size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm(G_Q4_0, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q4_1_q8_1_avx2(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                         size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm(G_Q4_1, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q8_0_q8_0_avx2(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                         size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm(G_Q8_0, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

RVL_X86_TARGET_END

#endif
