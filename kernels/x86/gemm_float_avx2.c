/*
 * gemm_float_avx2.c - the tiled GEMM of gemm_float_avx512.c (formats.h,
 * gemm slot) for F32, F16 and BF16 on AVX2 + FMA + F16C: the same design
 * with 8-lane ymm and 16 registers.
 *
 * Lanes: (row r, token t) is one ymm accumulator whose lane j gets, with
 * one FMA each and in increasing k, w[8c + j] * a[8c + j] for the
 * 8-element chunks c (the last zero-padded), then hsum_ps's fixed tree
 * (common.h): the same bits on every path (tile, one token, any nr, nt
 * or offset).
 *
 * Prompt processing: k-blocks of KB = 256 elements of the 8 rows
 * converted once to f32 into a stack scratch (F32 rows in place), times
 * chunks of up to TC = 32 tokens in tiles of 4 rows x 3 tokens: 12
 * accumulators, the activation chunk of each token loaded and converted
 * once for the 4 rows (in a register), the weights FMA memory operands
 * from the scratch (16 registers leave no room for 4 weights and 3
 * tokens: 4 x 3 + 4 + 1 = 17). Accumulators wait in a stack array
 * between k-blocks (exact). Tails (no 16-bit masked loads in AVX2): F32
 * with vmaskmovps, F16/BF16 through a zeroed 16-byte copy.
 *
 * One token: 8 rows at a time (8 accumulators), each row's chunk
 * converted on the fly, the activation's once; prefetch of the row one
 * call (8 rows) further on, into L2.
 *
 * bench kernels -t 2 -r 10 (RUVLLM_ISA=avx2), 11008x4096: see the commit
 * message.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>

RVL_X86_TARGET_BEGIN("avx2,fma,f16c")

#include "x86/common.h"

#define AI static inline __attribute__((always_inline))

enum { F_F32, F_F16, F_BF16 };

#define KB 256 /* k-block: elements of the rows converted at once */
#define TC 32  /* token chunk: accumulators kept between k-blocks */
#define GR 8   /* rows per group (RVL_GEMM_ROWS) */
#define TT 3   /* tokens per tile */

AI size_t esz(int kind)
{
    return kind == F_F32 ? 4 : 2;
}

AI __m256 cvt8(int kind, __m128i h)
{
    if (kind == F_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 8 elements at p as f32 */
AI __m256 ld_cvt(int kind, const uint8_t *p)
{
    if (kind == F_F32)
        return _mm256_loadu_ps((const float *)p);
    return cvt8(kind, _mm_loadu_si128((const __m128i *)p));
}

/* the first `left` (1..7) elements at p, the other lanes 0; reads no
 * byte past them */
AI __m256 ld_cvt_tail(int kind, const uint8_t *p, int left)
{
    if (kind == F_F32) {
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(left),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        return _mm256_maskload_ps((const float *)p, m);
    }
    uint16_t tmp[8] = { 0 };
    memcpy(tmp, p, (size_t)left * 2);
    return cvt8(kind, _mm_loadu_si128((const __m128i *)tmp));
}

/* ---------------------------------------------------------------------
 * One token: rows wr[0..7] (past the rn real ones, repeats of the last)
 * ------------------------------------------------------------------- */
AI void rows1(int kind, int64_t n, const uint8_t *const wr[GR], size_t ahead, const uint8_t *a,
              int rn, float *y)
{
    const size_t es = esz(kind);
    const int per = (int)(64 / es); /* elements per cache line of a row */
    __m256 s[GR];
    for (int r = 0; r < GR; r++)
        s[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + per <= n; i += per) {
        _Pragma("GCC unroll 8")
        for (int r = 0; r < GR; r++)
            _mm_prefetch((const char *)wr[r] + es * i + ahead, _MM_HINT_T1);
        _Pragma("GCC unroll 4")
        for (int c = 0; c < per; c += 8) {
            const __m256 x = ld_cvt(kind, a + es * (i + c));
            _Pragma("GCC unroll 8")
            for (int r = 0; r < GR; r++)
                s[r] = _mm256_fmadd_ps(ld_cvt(kind, wr[r] + es * (i + c)), x, s[r]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 x = ld_cvt(kind, a + es * i);
        for (int r = 0; r < GR; r++)
            s[r] = _mm256_fmadd_ps(ld_cvt(kind, wr[r] + es * i), x, s[r]);
    }
    if (i < n) {
        const int left = (int)(n - i);
        const __m256 x = ld_cvt_tail(kind, a + es * i, left);
        for (int r = 0; r < GR; r++)
            s[r] = _mm256_fmadd_ps(ld_cvt_tail(kind, wr[r] + es * i, left), x, s[r]);
    }
    for (int r = 0; r < rn; r++)
        y[r] = hsum_ps(s[r]);
}

/* ---------------------------------------------------------------------
 * Tile: 4 rows of f32 (w, ws bytes apart) times T tokens (a, as bytes
 * apart, in `kind`): nf whole chunks, then `left` (0..7) elements, into
 * acc[t][ro + r] (from zero when `first`)
 * ------------------------------------------------------------------- */
AI void micro_t(int kind, int T, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,
                int64_t nf, int left, __m256 (*acc)[GR], int ro, int first)
{
    const size_t es = esz(kind);
    __m256 s[4][TT];
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
        _Pragma("GCC unroll 3") for (int t = 0; t < T; t++)
            s[r][t] = first ? _mm256_setzero_ps() : acc[t][ro + r];
    for (int64_t c = 0; c < nf; c++) {
        _Pragma("GCC unroll 3") for (int t = 0; t < T; t++) {
            const __m256 x = ld_cvt(kind, a + t * as + es * 8 * c);
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
                s[r][t] = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)(w + r * ws + 32 * c)),
                                          x, s[r][t]);
        }
    }
    if (left) {
        __m256 wv[4];
        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
            wv[r] = ld_cvt_tail(F_F32, w + r * ws + 32 * nf, left);
        _Pragma("GCC unroll 3") for (int t = 0; t < T; t++) {
            const __m256 x = ld_cvt_tail(kind, a + t * as + es * 8 * nf, left);
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
                s[r][t] = _mm256_fmadd_ps(wv[r], x, s[r][t]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
        _Pragma("GCC unroll 3") for (int t = 0; t < T; t++)
            acc[t][ro + r] = s[r][t];
}

/* one function per token count: a register allocation of their own */
#define MICRO(K, T)                                                                       \
    static __attribute__((noinline)) void micro_##K##_##T(                                \
        const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t nf, int left,   \
        __m256 (*acc)[GR], int ro, int first)                                             \
    {                                                                                     \
        micro_t(K, T, w, ws, a, as, nf, left, acc, ro, first);                            \
    }
#define MICROS(K) MICRO(K, 1) MICRO(K, 2) MICRO(K, 3)
MICROS(F_F32) MICROS(F_F16) MICROS(F_BF16)
#undef MICROS
#undef MICRO

/* kb elements at p (row of `kind`) -> f32 at d, zero-padded to whole
 * 8-element chunks */
AI void to_f32(int kind, const uint8_t *p, int64_t kb, float *d)
{
    const size_t es = esz(kind);
    int64_t c = 0;
    for (; c + 8 <= kb; c += 8)
        _mm256_store_ps(d + c, ld_cvt(kind, p + es * c));
    if (c < kb)
        _mm256_store_ps(d + c, ld_cvt_tail(kind, p + es * c, (int)(kb - c)));
}

typedef void (*micro_fn)(const uint8_t *, size_t, const uint8_t *, size_t, int64_t, int,
                         __m256 (*)[GR], int, int);

AI void tile(int kind, int64_t n, const uint8_t *const wr[GR], size_t w_stride, size_t ahead,
             const uint8_t *act, size_t as, int nt, int rn, float *y, size_t ys)
{
#define MK(K) { micro_##K##_1, micro_##K##_2, micro_##K##_3 }
    static const micro_fn micros[3][TT] = { MK(F_F32), MK(F_F16), MK(F_BF16) };
#undef MK
    const micro_fn *mf = micros[kind];
    const size_t es = esz(kind);
    _Alignas(32) float wb[GR][KB];
    __m256 acc[TC][GR];
    const int nrow = rn > 4 ? GR : 4; /* rows computed: 1 or 2 halves */
    /* F32 rows are used in place, unless some of the rows computed are
     * repeats (past the real ones) */
    const bool direct = kind == F_F32 && rn == nrow;
    for (int t0 = 0; t0 < nt; t0 += TC) {
        const int tn = nt - t0 < TC ? nt - t0 : TC;
        for (int64_t k0 = 0; k0 < n; k0 += KB) {
            const int64_t kb = n - k0 < KB ? n - k0 : KB;
            for (int r = 0; r < nrow; r++) {
                const uint8_t *p = wr[r] + es * k0;
                if (t0 == 0)
                    for (size_t o = 0; o < es * (size_t)kb; o += 64)
                        _mm_prefetch((const char *)p + o + ahead, _MM_HINT_T1);
                if (!direct)
                    to_f32(kind, p, kb, wb[r]);
            }
            const uint8_t *w = direct ? wr[0] + 4 * k0 : (const uint8_t *)wb[0];
            const size_t wst = direct ? w_stride : KB * sizeof(float);
            const uint8_t *a = act + (size_t)t0 * as + es * k0;
            for (int tg = 0; tg < tn; tg += TT) {
                const int T = tn - tg < TT ? tn - tg : TT;
                for (int ro = 0; ro < nrow; ro += 4)
                    mf[T - 1](w + (size_t)ro * wst, wst, a + (size_t)tg * as, as, kb / 8,
                              (int)(kb % 8), acc + tg, ro, k0 == 0);
            }
        }
        for (int t = 0; t < tn; t++)
            for (int r = 0; r < rn; r++)
                y[(size_t)(t0 + t) * ys + r] = hsum_ps(acc[t][r]);
    }
}

#define FLOAT_ISA avx2
#include "x86/gemm_float_entry.h"
#undef FLOAT_ISA

RVL_X86_TARGET_END

#endif
