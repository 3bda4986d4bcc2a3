/*
 * gemm_float_avx512.c - tiled GEMM (formats.h, gemm slot) for the plain
 * float weight formats F32, F16 and BF16 on AVX-512 (F/BW/VL), each with
 * activations of its own format (their vec_dot_type).
 *
 * Lanes (the bit-identity contract): the result of (row r, token t) is
 * one zmm accumulator whose lane j gets, with one FMA each and in
 * increasing k, w[16c + j] * a[16c + j] for the 16-element chunks c of
 * the row (the last chunk zero-padded by masked loads: +0 * +0), then
 * the 16 lanes summed by hsum16() in one fixed tree (the tile's
 * hsum16x8 sums 8 at once with the same pairs). Nothing else ever
 * touches that accumulator (it may be stored and reloaded between
 * k-blocks, which is exact), so every path (tile, one token, any nr, nt,
 * row or token offset) gives the same bits. Against ref's vec_dot (a
 * double sum) that is an f32 chain of n/16 products per lane plus 4
 * levels, inside the bound of dispatch.h (see the test's comment).
 *
 * Prompt processing (nt > 1), per call of RVL_GEMM_ROWS = 8 rows: the
 * rows go in k-blocks of KB = 256 elements. A k-block of the 8 rows is
 * converted once to f32 into an aligned stack scratch (8 KiB; F32 rows
 * are used in place) and multiplied with a chunk of up to TC = 32 tokens
 * in register tiles of 4 rows x 6 tokens: 24 zmm accumulators, per 16
 * elements 4 weight loads from the scratch and 6 activation loads
 * converted in the loop (vcvtph2ps, or a shift for BF16) for 24 FMAs.
 * The accumulators of the chunk wait in a stack array (32 x 8 zmm, 16
 * KiB) between k-blocks. A weight element is converted once per 32
 * tokens, an activation element twice per call (once per 4-row half).
 * Measured alternatives (one core, F16, 4096 x 64 tokens x 64 rows, L2
 * resident; L1 loops alone reach ~165 GFLOP/s of the ~200 peak with
 * f32 operands, ~130 with an F16 conversion per 4 FMAs, and the 8 x 2
 * tile only ~115 as it needs 18 loads per 16 FMAs):
 *   8 rows x 2 tokens, activations converted in the loop     ~85 GFLOP/s
 *   4 x 6, activations converted per call into a scratch     ~90
 *     (a 512-bit store per 16 values: store-bound)
 *   4 x 6, activations converted in the loop (this file)    ~113
 *   KB 256..1024 and TC 12..48: within 10% of each other; KB 256 with
 *   TC 32 keeps scratch + accumulators at 24 KiB of the 48 KiB L1, and
 *   32 is forward.c's batch (UBATCH).
 * vdpbf16ps for BF16 (no conversion, 32 products per instruction) was
 * slower on this machine: a 4 x 6 loop of it alone gives ~100
 * GFLOP/s-equivalent against ~160 for FMA on f32, so BF16 converts.
 * Streaming the weights from memory (bench: a ring larger than the LLC)
 * costs another ~15% that prefetch hints (T0/T1/T2, 8 to 32 rows ahead,
 * or none) did not change.
 *
 * One token (decode, memory-bound): 8 rows at a time, each converted on
 * the fly, the activation chunk converted once for the 8 rows (the tile's
 * lanes and order); each row prefetches the same offset of the row one
 * call (8 rows) further on into L2, as gemm_avx512.c does.
 *
 * bench kernels -t 2 -r 10, 11008x4096: see the commit message.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>

RVL_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl")

#include "x86/common.h"

#define AI static inline __attribute__((always_inline))

enum { F_F32, F_F16, F_BF16 };

#ifndef KB
#define KB 256 /* k-block: elements of the rows converted at once */
#endif
#ifndef TC
#define TC 32  /* token chunk: accumulators kept between k-blocks */
#endif
#define GR 8   /* rows per group (RVL_GEMM_ROWS) */

AI size_t esz(int kind)
{
    return kind == F_F32 ? 4 : 2;
}

/* 16 elements at p as f32 (all lanes, or the lanes of m; the others 0) */
AI __m512 ld_cvt(int kind, const uint8_t *p)
{
    if (kind == F_F32)
        return _mm512_loadu_ps(p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (kind == F_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI __m512 ld_cvt_m(int kind, const uint8_t *p, __mmask16 m)
{
    if (kind == F_F32)
        return _mm512_maskz_loadu_ps(m, p);
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (kind == F_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The one horizontal sum every path uses: lanes j + 8, then j + 4, j + 2,
 * j + 1 (a fixed tree). */
AI float hsum16(__m512 v)
{
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return hsum_ps(_mm256_add_ps(lo, hi));
}

/* hsum16 of 8 accumulators at once, into out[0..rn-1]: at each level the
 * same pairs of lanes (and the same operand order) as hsum16, so the
 * same bits, with a quarter of the shuffles. */
AI void hsum16x8(const __m512 *v, int rn, float *out)
{
    __m512 u[4], w[2];
    for (int i = 0; i < 4; i++) /* lanes j + 8: 256-bit halves */
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 2; i++) /* j + 4: 128-bit lane k of w[i] is v[4i + k]'s */
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* j + 2: in 128-bit lane k, v[k]'s two values then v[4 + k]'s */
    const __m512 x = _mm512_add_ps(
        _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(w[0]), _mm512_castps_pd(w[1]))),
        _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(w[0]), _mm512_castps_pd(w[1]))));
    /* j + 1: lane 4k is v[k]'s sum, 4k + 1 v[4 + k]'s */
    const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(x, x, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(x, x, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 r = _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0), z);
    _mm256_mask_storeu_ps(out, (__mmask8)((1u << rn) - 1), _mm512_castps512_ps256(r));
}

AI __mmask16 tail16(int64_t left)
{
    return (__mmask16)((1u << left) - 1);
}

/* ---------------------------------------------------------------------
 * One token: rows wr[0..7] (past the rn real ones, repeats of the last)
 * ------------------------------------------------------------------- */
AI void rows1(int kind, int64_t n, const uint8_t *const wr[GR], size_t ahead, const uint8_t *a,
              int rn, float *y)
{
    const size_t es = esz(kind);
    const int per = (int)(64 / es); /* elements per cache line of a row */
    __m512 s[GR];
    for (int r = 0; r < GR; r++)
        s[r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + per <= n; i += per) {
        _Pragma("GCC unroll 8")
        for (int r = 0; r < GR; r++)
            _mm_prefetch((const char *)wr[r] + es * i + ahead, _MM_HINT_T1);
        for (int c = 0; c < per; c += 16) {
            const __m512 x = ld_cvt(kind, a + es * (i + c));
            _Pragma("GCC unroll 8")
            for (int r = 0; r < GR; r++)
                s[r] = _mm512_fmadd_ps(ld_cvt(kind, wr[r] + es * (i + c)), x, s[r]);
        }
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
        const __m512 x = ld_cvt_m(kind, a + es * i, m);
        for (int r = 0; r < GR; r++)
            s[r] = _mm512_fmadd_ps(ld_cvt_m(kind, wr[r] + es * i, m), x, s[r]);
    }
    for (int r = 0; r < rn; r++)
        y[r] = hsum16(s[r]);
}

/* ---------------------------------------------------------------------
 * Tile: 4 rows of f32 (w, ws bytes apart) times T tokens' f32 (a, as
 * bytes apart): nf whole 16-element chunks, then one chunk of the lanes
 * of tm (tm = 0: none), into acc[t][ro + r] (from zero when `first`).
 * Rows and tokens are the scratch k-blocks (64-byte aligned, KB floats
 * apart), or for F32 the rows and activations themselves.
 * ------------------------------------------------------------------- */
AI void micro_t(int kind, int T, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,
                int64_t nf, __mmask16 tm, __m512 (*acc)[GR], int ro, int first)
{
    const size_t es = esz(kind);
    __m512 s[4][6];
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
        _Pragma("GCC unroll 6") for (int t = 0; t < T; t++)
            s[r][t] = first ? _mm512_setzero_ps() : acc[t][ro + r];
    for (int64_t c = 0; c < nf; c++) {
        __m512 wv[4];
        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
            wv[r] = _mm512_loadu_ps(w + r * ws + 64 * c);
        _Pragma("GCC unroll 6") for (int t = 0; t < T; t++) {
            const __m512 x = ld_cvt(kind, a + t * as + es * 16 * c);
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
                s[r][t] = _mm512_fmadd_ps(wv[r], x, s[r][t]);
        }
    }
    if (tm) {
        __m512 wv[4];
        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
            wv[r] = _mm512_maskz_loadu_ps(tm, w + r * ws + 64 * nf);
        _Pragma("GCC unroll 6") for (int t = 0; t < T; t++) {
            const __m512 x = ld_cvt_m(kind, a + t * as + es * 16 * nf, tm);
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
                s[r][t] = _mm512_fmadd_ps(wv[r], x, s[r][t]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
        _Pragma("GCC unroll 6") for (int t = 0; t < T; t++)
            acc[t][ro + r] = s[r][t];
}

/* one function per token count: a register allocation of their own
 * (inlined into tile(), GCC spilled weights of the 6-token loop) */
#define MICRO(K, T)                                                                       \
    static __attribute__((noinline)) void micro_##K##_##T(                                \
        const uint8_t *w, size_t ws, const uint8_t *a, size_t as, int64_t nf, __mmask16 tm, \
        __m512 (*acc)[GR], int ro, int first)                                             \
    {                                                                                     \
        micro_t(K, T, w, ws, a, as, nf, tm, acc, ro, first);                              \
    }
#define MICROS(K) MICRO(K, 1) MICRO(K, 2) MICRO(K, 3) MICRO(K, 4) MICRO(K, 5) MICRO(K, 6)
MICROS(F_F32) MICROS(F_F16) MICROS(F_BF16)
#undef MICROS
#undef MICRO

/* kb elements at p (row of `kind`) -> f32 at d, zero-padded to whole
 * 16-element chunks */
AI void to_f32(int kind, const uint8_t *p, int64_t kb, float *d)
{
    const size_t es = esz(kind);
    int64_t c = 0;
    for (; c + 16 <= kb; c += 16)
        _mm512_store_ps(d + c, ld_cvt(kind, p + es * c));
    if (c < kb)
        _mm512_store_ps(d + c, ld_cvt_m(kind, p + es * c, tail16(kb - c)));
}

typedef void (*micro_fn)(const uint8_t *, size_t, const uint8_t *, size_t, int64_t, __mmask16,
                         __m512 (*)[GR], int, int);

AI void tile(int kind, int64_t n, const uint8_t *const wr[GR], size_t w_stride, size_t ahead,
             const uint8_t *act, size_t as, int nt, int rn, float *y, size_t ys)
{
#define MK(K) { micro_##K##_1, micro_##K##_2, micro_##K##_3, micro_##K##_4, micro_##K##_5, micro_##K##_6 }
    static const micro_fn micros[3][6] = { MK(F_F32), MK(F_F16), MK(F_BF16) };
#undef MK
    const micro_fn *mf = micros[kind];
    const size_t es = esz(kind);
    _Alignas(64) float wb[GR][KB];
    __m512 acc[TC][GR];
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
            const int64_t nf = kb / 16;
            const __mmask16 tm = kb % 16 ? tail16(kb % 16) : 0;
            for (int tg = 0; tg < tn; tg += 6) {
                const int T = tn - tg < 6 ? tn - tg : 6;
                for (int ro = 0; ro < nrow; ro += 4)
                    mf[T - 1](w + (size_t)ro * wst, wst, a + (size_t)tg * as, as, nf, tm, acc + tg,
                              ro, k0 == 0);
            }
        }
        for (int t = 0; t < tn; t++)
            hsum16x8(acc[t], rn, y + (size_t)(t0 + t) * ys);
    }
}

#define FLOAT_ISA avx512
#include "x86/gemm_float_entry.h"
#undef FLOAT_ISA

RVL_X86_TARGET_END

#endif
