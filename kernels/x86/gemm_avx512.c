/*
 * gemm_avx512.c - register-tiled GEMM micro-kernels (formats.h, gemm slot)
 * with AVX-512 VNNI, for prompt processing: a tile of up to 4 weight rows
 * times 8 tokens is computed block by block, so each weight block is
 * unpacked (nibbles -> levels, f16 scales -> float) once and multiplied
 * with the blocks of 8 activation rows, and each activation block is
 * loaded once for the 4 rows.
 *
 * Layout: a zmm holds the same 32-value block of two tokens (low 256
 * bits: token t, high: token t+1); the weight block is broadcast to both
 * halves, so one vpdpbusd gives 8 int32 lanes of each token. Two such
 * products (4 tokens) are folded into one zmm of 4 lanes per token
 * (exact integer adds), then per (row, token) the float math is that of
 * int_dots.h's vec_dot: the block's integer lanes, converted, times
 * (weight d * activation d), accumulated with FMA; summed at the end.
 * Only the order of the float additions differs from vec_dot, within the
 * bound of dispatch.h.
 *
 * Each (row, token) result is computed by the same operations whatever
 * the tile shape (its lanes never mix with another token's or row's): the
 * output does not depend on how callers group rows and tokens.
 *
 * Signed weight levels go through vpdpbusd (u8 x s8) with an offset: Q8_0
 * as w + 128, Q4_0 as the stored nibble q (level q - 8); the offset times
 * the activation's 4-value sums, computed once per token block, starts
 * the accumulation (exact integers, the same lanes as vec_dot's).
 *
 * Q4_K and Q6_K (tile_k4, tile_q6): the same tile, token layout and
 * reduction, one 256-value block at a time: per 32-value group, unsigned
 * levels times activations with vpmaddubsw, times the integer scales with
 * vpdpwssd; the min / -32 offset terms from the activation's bsums.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>

RVL_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")

#include "x86/common.h"

enum { G_Q4_0, G_Q4_1, G_Q8_0, G_Q4_K, G_Q6_K };

#define AI static inline __attribute__((always_inline))

AI float f16at(const uint8_t *p)
{
    rvl_f16 h;
    memcpy(&h, p, sizeof h);
    return f16s(h);
}

static inline int ld32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint16_t ld16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Block i of two tokens' rows: the 32 quants of each, low and high half. */
AI __m512i ld_pair(const uint8_t *p0, const uint8_t *p1)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(ld256(p0)), ld256(p1), 1);
}

/* The weight block's unsigned levels in element order, in both halves. */
AI __m512i w_levels(int kind, const uint8_t *blk)
{
    if (kind == G_Q8_0)
        return _mm512_xor_si512(_mm512_broadcast_i64x4(ld256(blk + 2)),
                                _mm512_set1_epi8((char)0x80));
    const __m512i v = _mm512_broadcast_i32x4(ld128(blk + (kind == G_Q4_1 ? 4 : 2)));
    /* 128-bit lanes 1 and 3: the high nibbles (elements 16..31) */
    return _mm512_and_si512(_mm512_mask_srli_epi16(v, (__mmask32)0xFF00FF00u, v, 4),
                            _mm512_set1_epi8(0x0F));
}

/* Two token pairs' block products (a: tokens u, u+1; b: tokens v, v+1;
 * 8 int32 lanes per token) folded into 4 lanes per token: in each 128-bit
 * lane, [a0+a2, a1+a3, b0+b2, b1+b3]. Exact integer sums, each within one
 * token's lanes; halves the float work. */
AI __m512i fold(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

/* Every tile keeps NR x NQ accumulators, two tokens per 256-bit half. */
AI void zero_acc(int NR, int NQ, __m512 acc[4][2])
{
    _Pragma("GCC unroll 4")
    for (int r = 0; r < NR; r++)
        _Pragma("GCC unroll 4")
        for (int q = 0; q < NQ; q++)
            acc[r][q] = _mm512_setzero_ps();
}

/* Reduce and store a tile: token 4q + k sits in lanes of 128-bit lanes
 * (k & 1) * 2 + {0, 1}, at offset (k >> 1) * 2 within them. */
AI void store_acc(int NR, int NQ, __m512 acc[4][2], int tn, float *y, size_t y_stride)
{
    _Pragma("GCC unroll 4")
    for (int r = 0; r < NR; r++)
        _Pragma("GCC unroll 4")
        for (int q = 0; q < NQ; q++) {
            float l[16];
            _mm512_storeu_ps(l, acc[r][q]);
            for (int k = 0; k < 4 && 4 * q + k < tn; k++) {
                const int o = (k & 1) * 8 + (k >> 1) * 2;
                y[(size_t)(4 * q + k) * y_stride + r] = (l[o] + l[o + 1]) + (l[o + 4] + l[o + 5]);
            }
        }
}

/* NR rows (w_stride bytes apart) times NQ quads of tokens ap[4q..4q+3]
 * (past the real tokens, ap repeats the last one: tn says how many are
 * real). */
AI void tile(int kind, int NR, int NQ, int64_t nb, const uint8_t *w, size_t w_stride,
             const uint8_t *const ap[8], int tn, float *y, size_t y_stride)
{
    const size_t wsz = kind == G_Q4_0 ? sizeof(block_q4_0)
                       : kind == G_Q4_1 ? sizeof(block_q4_1) : sizeof(block_q8_0);
    const size_t asz = kind == G_Q4_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t aoff = kind == G_Q4_1 ? 4 : 2;
    const __m512i zero = _mm512_setzero_si512();
    /* the row and quad loops must be unrolled (GCC's -O2 does not on its
     * own) for acc[][] and the per-block arrays to live in registers:
     * twice the speed */
    __m512 acc[4][2];
    zero_acc(NR, NQ, acc);
    for (int64_t i = 0; i < nb; i++) {
        __m512i lv[4];
        __m512 dw[4], mw[4];
        _Pragma("GCC unroll 4")
        for (int r = 0; r < NR; r++) {
            const uint8_t *wb = w + r * w_stride + (size_t)i * wsz;
            if (kind == G_Q8_0 || (i & 1) == 0)
                prefetch_ahead(wb);
            lv[r] = w_levels(kind, wb);
            if (kind == G_Q4_1) {
                const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(ld32(wb)));
                dw[r] = _mm512_broadcastss_ps(dm);
                mw[r] = _mm512_broadcastss_ps(_mm_movehdup_ps(dm));
            } else {
                dw[r] = _mm512_set1_ps(f16at(wb));
            }
        }
        _Pragma("GCC unroll 4")
        for (int q = 0; q < NQ; q++) {
            const uint8_t *const b[4] = { ap[4 * q] + (size_t)i * asz, ap[4 * q + 1] + (size_t)i * asz,
                                          ap[4 * q + 2] + (size_t)i * asz,
                                          ap[4 * q + 3] + (size_t)i * asz };
            __m512i a[2], start[2];
            _Pragma("GCC unroll 4")
            for (int h = 0; h < 2; h++) {
                a[h] = ld_pair(b[2 * h] + aoff, b[2 * h + 1] + aoff);
                if (kind == G_Q4_1) {
                    start[h] = zero;
                } else {
                    const __m512i off = _mm512_set1_epi8(kind == G_Q8_0 ? (char)0x80 : 8);
                    start[h] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, a[h]));
                }
            }
            /* the 4 tokens' scales in fold()'s lane order: token k in the
             * lanes that hold its sums (see the final reduction); Q8_1's
             * a.s in one lane per token only: the block's m * s term */
            __m512 dq, sq = _mm512_setzero_ps();
            if (kind == G_Q4_1) {
                const __m512 ds = _mm512_castps256_ps512(_mm256_cvtph_ps(
                    _mm_setr_epi32(ld32(b[0]), ld32(b[1]), ld32(b[2]), ld32(b[3]))));
                dq = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 4, 4, 0, 0, 4, 4, 2, 2, 6, 6, 2, 2, 6, 6), ds);
                sq = _mm512_maskz_permutexvar_ps((__mmask16)0x0505,
                                                 _mm512_setr_epi32(1, 0, 5, 0, 0, 0, 0, 0, 3, 0, 7, 0, 0, 0, 0, 0), ds);
            } else {
                const __m512 d = _mm512_castps128_ps512(_mm_cvtph_ps(
                    _mm_setr_epi16((short)ld16(b[0]), (short)ld16(b[1]), (short)ld16(b[2]),
                                   (short)ld16(b[3]), 0, 0, 0, 0)));
                dq = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 2, 2, 0, 0, 2, 2, 1, 1, 3, 3, 1, 1, 3, 3), d);
            }
            _Pragma("GCC unroll 4")
            for (int r = 0; r < NR; r++) {
                const __m512i is = fold(_mm512_dpbusd_epi32(start[0], lv[r], a[0]),
                                        _mm512_dpbusd_epi32(start[1], lv[r], a[1]));
                acc[r][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dw[r], dq),
                                            acc[r][q]);
                if (kind == G_Q4_1)
                    acc[r][q] = _mm512_fmadd_ps(mw[r], sq, acc[r][q]);
            }
        }
    }
    store_acc(NR, NQ, acc, tn, y, y_stride);
}

/* Q4_K x Q8_K: NR rows times NQ quads of tokens, as tile() (same token
 * layout, fold() and final reduction). Per block and (row, token): the
 * 8 groups' u8 x s8 pair sums (vpmaddubsw: 2 * 15 * 127, no saturation)
 * times the group's 6-bit scale (vpdpwssd) in 8 int32 lanes, and the
 * mins times the activation's bsums (vpmaddwd) in 8 more, exactly the
 * integers of int_dots.h's vec_dot; then d and dmin times the token's d,
 * with FMA. Groups outermost within a block: each group's levels are
 * unpacked once per row for the 8 tokens. */
AI void tile_k4(int NR, int NQ, int64_t nb, const uint8_t *w, size_t w_stride,
                const uint8_t *const ap[8], int tn, float *y, size_t y_stride)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[4][2];
    zero_acc(NR, NQ, acc);
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *wb[4];
        int32_t scs[4][8];
        __m512i mn[4];
        __m512 dw[4], mw[4];
        _Pragma("GCC unroll 4")
        for (int r = 0; r < NR; r++) {
            wb[r] = w + r * w_stride + (size_t)i * sizeof(block_q4_K);
            prefetch_ahead(wb[r]);
            prefetch_ahead(wb[r] + 64);
            prefetch_ahead(wb[r] + 128);
            const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(ld32(wb[r])));
            dw[r] = _mm512_broadcastss_ps(dm);
            mw[r] = _mm512_broadcastss_ps(_mm_movehdup_ps(dm));
            uint32_t u[3];
            memcpy(u, wb[r] + 4, 12);
            const uint32_t sc_lo = u[0] & 0x3f3f3f3f, mn_lo = u[1] & 0x3f3f3f3f;
            const uint32_t sc_hi = (u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030);
            const uint32_t mn_hi = ((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030);
            /* scale j as two int16 in int32 j; min j as int16 2j and 2j+1 */
            const __m128i sc = _mm_cvtepu8_epi16(_mm_setr_epi32((int)sc_lo, (int)sc_hi, 0, 0));
            _mm_storeu_si128((__m128i *)&scs[r][0], _mm_unpacklo_epi16(sc, sc));
            _mm_storeu_si128((__m128i *)&scs[r][4], _mm_unpackhi_epi16(sc, sc));
            const __m128i m8 = _mm_setr_epi32((int)mn_lo, (int)mn_hi, 0, 0);
            mn[r] = _mm512_broadcast_i64x4(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8)));
        }
        _Pragma("GCC unroll 4")
        for (int q = 0; q < NQ; q++) {
            const uint8_t *const b[4] = { ap[4 * q] + (size_t)i * sizeof(block_q8_K),
                                          ap[4 * q + 1] + (size_t)i * sizeof(block_q8_K),
                                          ap[4 * q + 2] + (size_t)i * sizeof(block_q8_K),
                                          ap[4 * q + 3] + (size_t)i * sizeof(block_q8_K) };
            __m512i is[4][2];
            _Pragma("GCC unroll 4")
            for (int r = 0; r < NR; r++)
                is[r][0] = is[r][1] = _mm512_setzero_si512();
            for (int j = 0; j < 8; j++) {
                const __m512i a0 = ld_pair(b[0] + 4 + 32 * j, b[1] + 4 + 32 * j);
                const __m512i a1 = ld_pair(b[2] + 4 + 32 * j, b[3] + 4 + 32 * j);
                _Pragma("GCC unroll 4")
                for (int r = 0; r < NR; r++) {
                    __m512i lv = _mm512_broadcast_i64x4(ld256(wb[r] + 16 + 32 * (j >> 1)));
                    if (j & 1)
                        lv = _mm512_srli_epi16(lv, 4);
                    lv = _mm512_and_si512(lv, m4);
                    const __m512i s = _mm512_set1_epi32(scs[r][j]);
                    is[r][0] = _mm512_dpwssd_epi32(is[r][0], _mm512_maddubs_epi16(lv, a0), s);
                    is[r][1] = _mm512_dpwssd_epi32(is[r][1], _mm512_maddubs_epi16(lv, a1), s);
                }
            }
            const __m512i bs0 = ld_pair(b[0] + 260, b[1] + 260);
            const __m512i bs1 = ld_pair(b[2] + 260, b[3] + 260);
            float ad[4];
            for (int k = 0; k < 4; k++)
                memcpy(&ad[k], b[k], 4);
            const __m512 dq = _mm512_permutexvar_ps(
                _mm512_setr_epi32(0, 0, 2, 2, 0, 0, 2, 2, 1, 1, 3, 3, 1, 1, 3, 3),
                _mm512_castps128_ps512(_mm_loadu_ps(ad)));
            _Pragma("GCC unroll 4")
            for (int r = 0; r < NR; r++) {
                const __m512i sm = fold(_mm512_madd_epi16(mn[r], bs0), _mm512_madd_epi16(mn[r], bs1));
                acc[r][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(fold(is[r][0], is[r][1])),
                                            _mm512_mul_ps(dw[r], dq), acc[r][q]);
                acc[r][q] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(sm), _mm512_mul_ps(mw[r], dq),
                                             acc[r][q]);
            }
        }
    }
    store_acc(NR, NQ, acc, tn, y, y_stride);
}

/* Q6_K x Q8_K, as tile_k4(): the levels + 32 (0..63) of each row's block
 * are unpacked once into lv[][] and each 32-value chunk (two groups of
 * 16) gets its two 8-bit scales from sv[][]; the -32 offset is the
 * scales times the bsums, times 32 (vec_dot's integers). */
AI void tile_q6(int NR, int NQ, int64_t nb, const uint8_t *w, size_t w_stride,
                const uint8_t *const ap[8], int tn, float *y, size_t y_stride)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m512 acc[4][2];
    zero_acc(NR, NQ, acc);
    for (int64_t i = 0; i < nb; i++) {
        __m256i lv[4][8];
        __m512i sv[4][8], sc16[4];
        __m512 dw[4];
        _Pragma("GCC unroll 4")
        for (int r = 0; r < NR; r++) {
            const uint8_t *wb = w + r * w_stride + (size_t)i * sizeof(block_q6_K);
            prefetch_ahead(wb);
            prefetch_ahead(wb + 64);
            prefetch_ahead(wb + 128);
            prefetch_ahead(wb + 192);
            dw[r] = _mm512_set1_ps(f16at(wb + 208));
            for (int h = 0; h < 2; h++) {
                const __m256i l0 = ld256(wb + 64 * h), l1 = ld256(wb + 64 * h + 32);
                const __m256i hq = ld256(wb + 128 + 32 * h);
                lv[r][4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                               _mm256_and_si256(_mm256_slli_epi16(hq, 4), m30));
                lv[r][4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                                   _mm256_and_si256(_mm256_slli_epi16(hq, 2), m30));
                lv[r][4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                                   _mm256_and_si256(hq, m30));
                lv[r][4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                                   _mm256_and_si256(_mm256_srli_epi16(hq, 2), m30));
            }
            const __m128i s8 = ld128(wb + 192);
            sc16[r] = _mm512_broadcast_i64x4(_mm256_cvtepi8_epi16(s8));
            /* scale g as two int16 in int32 g */
            const __m512i s32 = _mm512_cvtepi8_epi32(s8);
            const __m512i sp = _mm512_or_si512(_mm512_and_si512(s32, _mm512_set1_epi32(0xFFFF)),
                                               _mm512_slli_epi32(s32, 16));
            for (int c = 0; c < 8; c++) {
                const int g = 2 * c, g1 = 2 * c + 1;
                sv[r][c] = _mm512_permutexvar_epi32(
                    _mm512_setr_epi32(g, g, g, g, g1, g1, g1, g1, g, g, g, g, g1, g1, g1, g1), sp);
            }
        }
        _Pragma("GCC unroll 4")
        for (int q = 0; q < NQ; q++) {
            const uint8_t *const b[4] = { ap[4 * q] + (size_t)i * sizeof(block_q8_K),
                                          ap[4 * q + 1] + (size_t)i * sizeof(block_q8_K),
                                          ap[4 * q + 2] + (size_t)i * sizeof(block_q8_K),
                                          ap[4 * q + 3] + (size_t)i * sizeof(block_q8_K) };
            __m512i is[4][2];
            _Pragma("GCC unroll 4")
            for (int r = 0; r < NR; r++)
                is[r][0] = is[r][1] = _mm512_setzero_si512();
            for (int c = 0; c < 8; c++) {
                const __m512i a0 = ld_pair(b[0] + 4 + 32 * c, b[1] + 4 + 32 * c);
                const __m512i a1 = ld_pair(b[2] + 4 + 32 * c, b[3] + 4 + 32 * c);
                _Pragma("GCC unroll 4")
                for (int r = 0; r < NR; r++) {
                    const __m512i l = _mm512_broadcast_i64x4(lv[r][c]);
                    is[r][0] = _mm512_dpwssd_epi32(is[r][0], _mm512_maddubs_epi16(l, a0), sv[r][c]);
                    is[r][1] = _mm512_dpwssd_epi32(is[r][1], _mm512_maddubs_epi16(l, a1), sv[r][c]);
                }
            }
            const __m512i bs0 = ld_pair(b[0] + 260, b[1] + 260);
            const __m512i bs1 = ld_pair(b[2] + 260, b[3] + 260);
            float ad[4];
            for (int k = 0; k < 4; k++)
                memcpy(&ad[k], b[k], 4);
            const __m512 dq = _mm512_permutexvar_ps(
                _mm512_setr_epi32(0, 0, 2, 2, 0, 0, 2, 2, 1, 1, 3, 3, 1, 1, 3, 3),
                _mm512_castps128_ps512(_mm_loadu_ps(ad)));
            _Pragma("GCC unroll 4")
            for (int r = 0; r < NR; r++) {
                const __m512i i0 = _mm512_sub_epi32(
                    is[r][0], _mm512_slli_epi32(_mm512_madd_epi16(sc16[r], bs0), 5));
                const __m512i i1 = _mm512_sub_epi32(
                    is[r][1], _mm512_slli_epi32(_mm512_madd_epi16(sc16[r], bs1), 5));
                acc[r][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(fold(i0, i1)),
                                            _mm512_mul_ps(dw[r], dq), acc[r][q]);
            }
        }
    }
    store_acc(NR, NQ, acc, tn, y, y_stride);
}

#define T(R, P)                                                                    \
    case (R - 1) * 2 + P - 1:                                                      \
        if (kind == G_Q4_K)                                                        \
            tile_k4(R, P, nb, wr, w_stride, ap, tn, yt, y_stride);                 \
        else if (kind == G_Q6_K)                                                   \
            tile_q6(R, P, nb, wr, w_stride, ap, tn, yt, y_stride);                 \
        else                                                                       \
            tile(kind, R, P, nb, wr, w_stride, ap, tn, yt, y_stride);              \
        break;

AI void gemm(int kind, int64_t n, const void *vw, size_t w_stride, int nr, const void *vact,
             size_t act_stride, int nt, float *y, size_t y_stride)
{
    const int64_t nb = n / (kind == G_Q4_K || kind == G_Q6_K ? 256 : 32);
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
            switch ((rn - 1) * 2 + (tn + 3) / 4 - 1) {
                T(1, 1) T(1, 2) T(2, 1) T(2, 2) T(3, 1) T(3, 2) T(4, 1) T(4, 2)
            }
        }
    }
}
#undef T

void gemm_q4_0_q8_0_avx512vnni(int64_t n, const void *w, size_t w_stride, int nr,
                               const void *act, size_t act_stride, int nt, float *y,
                               size_t y_stride)
{
    gemm(G_Q4_0, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q4_1_q8_1_avx512vnni(int64_t n, const void *w, size_t w_stride, int nr,
                               const void *act, size_t act_stride, int nt, float *y,
                               size_t y_stride)
{
    gemm(G_Q4_1, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q8_0_q8_0_avx512vnni(int64_t n, const void *w, size_t w_stride, int nr,
                               const void *act, size_t act_stride, int nt, float *y,
                               size_t y_stride)
{
    gemm(G_Q8_0, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q4_K_q8_K_avx512vnni(int64_t n, const void *w, size_t w_stride, int nr,
                               const void *act, size_t act_stride, int nt, float *y,
                               size_t y_stride)
{
    gemm(G_Q4_K, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q6_K_q8_K_avx512vnni(int64_t n, const void *w, size_t w_stride, int nr,
                               const void *act, size_t act_stride, int nt, float *y,
                               size_t y_stride)
{
    gemm(G_Q6_K, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

RVL_X86_TARGET_END

#endif
