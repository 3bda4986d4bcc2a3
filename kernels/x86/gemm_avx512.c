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
 * as w + 128, Q4_0 as the stored nibble q (level q - 8), Q5_0 as the
 * 5-bit q (level q - 16), IQ4_NL as kvalues[q] + 128 (a vpshufb table);
 * the offset times the activation's 4-value sums, computed once per token
 * block, starts the accumulation (exact integers, the same lanes as
 * vec_dot's). Q4_1 and Q5_1 levels are unsigned.
 *
 * Q4_0 and IQ4_NL fold their lanes differently (fold2, the N partition:
 * elements 4j..4j+3 with 16+4j..16+4j+3) so that their one-token path,
 * rows1_n, gets the same lanes with no fold at all: it puts four rows'
 * nibbles in one zmm. Decode is memory-bound and that path is the one
 * that must keep up with the memory bus.
 *
 * Q4_K, Q5_K and Q6_K (tile_k4, tile_q6): the same tile, token layout and
 * reduction, one 256-value block at a time: per 32-value group, unsigned
 * levels times activations with vpmaddubsw, times the integer scales with
 * vpdpwssd; the min / -32 offset terms from the activation's bsums.
 *
 * IQ4_XS (tile_xs): tile_k4's layout; levels through a vpshufb table of
 * their magnitudes with the signs moved onto the activations (vpmaddubsw
 * needs one unsigned operand), times the group's 6-bit scale - 32.
 *
 * Q2_K and Q3_K (tile_q23): tile_q6's 32-value chunks of two groups of
 * 16, the 2-bit levels (Q3_K: + 4 from hmask) times the group's scale;
 * Q2_K's mins and Q3_K's -4 offset from the activation's bsums, as in
 * int_dots.h's vec_dot.
 *
 * One token (decode): rows1*, below, with the tile's lanes and float
 * operations and rows in the place of tokens.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>

RVL_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")

#include "x86/common.h"

enum { G_Q4_0, G_Q4_1, G_Q8_0, G_Q4_K, G_Q6_K, G_Q5_0, G_Q5_1, G_Q5_K, G_IQ4_NL, G_IQ4_XS, G_Q2_K,
       G_Q3_K };

/* The 32-value formats: block and activation geometry, and the offset of
 * the signed levels (weights go through vpdpbusd as unsigned levels;
 * offset x the activation's 4-value sums starts the accumulation). */
#define HAS_M(kind) ((kind) == G_Q4_1 || (kind) == G_Q5_1)   /* x = d*q + m */
#define IS_Q5(kind) ((kind) == G_Q5_0 || (kind) == G_Q5_1)
/* Q4_0 and IQ4_NL (16 nibble bytes after an f16 d): their lanes use the
 * N partition (see fold2), the others fold()'s */
#define IS_N(kind) ((kind) == G_Q4_0 || (kind) == G_IQ4_NL)
static inline size_t wsz32(int kind)
{
    return IS_N(kind) ? sizeof(block_q4_0) : kind == G_Q4_1 ? sizeof(block_q4_1)
           : kind == G_Q5_0 ? sizeof(block_q5_0) : kind == G_Q5_1 ? sizeof(block_q5_1)
                            : sizeof(block_q8_0);
}
static inline size_t qs_off(int kind)  /* the nibbles (Q8_0: the quants) */
{
    return kind == G_Q4_1 ? 4 : kind == G_Q5_0 ? 6 : kind == G_Q5_1 ? 8 : 2;
}
static inline char level_off(int kind)
{
    return kind == G_Q8_0 || kind == G_IQ4_NL ? (char)0x80
           : kind == G_Q4_0                   ? 8
           : kind == G_Q5_0                   ? 16
                                              : 0;
}

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

AI __m512i ld512(const void *p)
{
    return _mm512_loadu_si512(p);
}

/* IQ4_NL's levels + 128 (all in 1..241) in every 128-bit lane, for
 * vpshufb on nibbles: unsigned, like Q8_0's w + 128 */
AI __m512i iq4nl_lut(void)
{
    return _mm512_broadcast_i32x4(_mm_xor_si128(ld128(rvl_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
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
    const __m512i v = _mm512_broadcast_i32x4(ld128(blk + qs_off(kind)));
    /* 128-bit lanes 1 and 3: the high nibbles (elements 16..31) */
    const __m512i lv = _mm512_and_si512(_mm512_mask_srli_epi16(v, (__mmask32)0xFF00FF00u, v, 4),
                                        _mm512_set1_epi8(0x0F));
    if (kind == G_IQ4_NL)
        return _mm512_shuffle_epi8(iq4nl_lut(), lv);
    if (!IS_Q5(kind))
        return lv;
    /* Q5: bit j of qh is element j's bit 4, in both halves */
    const uint64_t qh = (uint32_t)ld32(blk + (kind == G_Q5_0 ? 2 : 4));
    return _mm512_mask_add_epi8(lv, _cvtu64_mask64(qh | qh << 32), lv, _mm512_set1_epi8(16));
}

/* Two token pairs' block products (a: tokens u, u+1; b: tokens v, v+1;
 * 8 int32 lanes per token) folded into 4 lanes per token: in each 128-bit
 * lane, [a0+a2, a1+a3, b0+b2, b1+b3]. Exact integer sums, each within one
 * token's lanes; halves the float work. */
AI __m512i fold(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

/* The N partition (Q4_0, IQ4_NL): the same two token pairs' products
 * summed across the two 128-bit lanes of each token's half instead, so
 * 128-bit lane k holds token k (u, u+1, v, v+1) and its lane j the
 * elements 4j..4j+3 and 16+4j..16+4j+3 of the block: the lanes that the
 * one-token path (rows1_n) gets with no fold at all. */
AI __m512i fold2(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x88), _mm512_shuffle_i64x2(a, b, 0xDD));
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
 * (k & 1) * 2 + {0, 1}, at offset (k >> 1) * 2 within them; with the N
 * partition, in 128-bit lane k. */
AI void store_acc(int NR, int NQ, __m512 acc[4][2], int tn, float *y, size_t y_stride, bool n_part)
{
    _Pragma("GCC unroll 4")
    for (int r = 0; r < NR; r++)
        _Pragma("GCC unroll 4")
        for (int q = 0; q < NQ; q++) {
            float l[16];
            _mm512_storeu_ps(l, acc[r][q]);
            for (int k = 0; k < 4 && 4 * q + k < tn; k++) {
                if (n_part) {
                    y[(size_t)(4 * q + k) * y_stride + r] =
                        (l[4 * k] + l[4 * k + 1]) + (l[4 * k + 2] + l[4 * k + 3]);
                    continue;
                }
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
    const size_t wsz = wsz32(kind);
    const size_t asz = HAS_M(kind) ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t aoff = HAS_M(kind) ? 4 : 2;
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
            if (HAS_M(kind)) {
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
                if (HAS_M(kind)) {
                    start[h] = zero;
                } else {
                    const __m512i off = _mm512_set1_epi8(level_off(kind));
                    start[h] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, a[h]));
                }
            }
            /* the 4 tokens' scales in fold()'s lane order: token k in the
             * lanes that hold its sums (see the final reduction); Q8_1's
             * a.s in one lane per token only: the block's m * s term */
            __m512 dq, sq = _mm512_setzero_ps();
            if (HAS_M(kind)) {
                const __m512 ds = _mm512_castps256_ps512(_mm256_cvtph_ps(
                    _mm_setr_epi32(ld32(b[0]), ld32(b[1]), ld32(b[2]), ld32(b[3]))));
                dq = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 4, 4, 0, 0, 4, 4, 2, 2, 6, 6, 2, 2, 6, 6), ds);
                sq = _mm512_maskz_permutexvar_ps((__mmask16)0x0505,
                                                 _mm512_setr_epi32(1, 0, 5, 0, 0, 0, 0, 0, 3, 0, 7, 0, 0, 0, 0, 0), ds);
            } else {
                const __m512 d = _mm512_castps128_ps512(_mm_cvtph_ps(
                    _mm_setr_epi16((short)ld16(b[0]), (short)ld16(b[1]), (short)ld16(b[2]),
                                   (short)ld16(b[3]), 0, 0, 0, 0)));
                dq = _mm512_permutexvar_ps(
                    IS_N(kind) ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
                               : _mm512_setr_epi32(0, 0, 2, 2, 0, 0, 2, 2, 1, 1, 3, 3, 1, 1, 3, 3),
                    d);
            }
            _Pragma("GCC unroll 4")
            for (int r = 0; r < NR; r++) {
                const __m512i p0 = _mm512_dpbusd_epi32(start[0], lv[r], a[0]);
                const __m512i p1 = _mm512_dpbusd_epi32(start[1], lv[r], a[1]);
                const __m512i is = IS_N(kind) ? fold2(p0, p1) : fold(p0, p1);
                acc[r][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dw[r], dq),
                                            acc[r][q]);
                if (HAS_M(kind))
                    acc[r][q] = _mm512_fmadd_ps(mw[r], sq, acc[r][q]);
            }
        }
    }
    store_acc(NR, NQ, acc, tn, y, y_stride, IS_N(kind));
}

/* Q4_K x Q8_K: NR rows times NQ quads of tokens, as tile() (same token
 * layout, fold() and final reduction). Per block and (row, token): the
 * 8 groups' u8 x s8 pair sums (vpmaddubsw: 2 * 15 * 127, no saturation)
 * times the group's 6-bit scale (vpdpwssd) in 8 int32 lanes, and the
 * mins times the activation's bsums (vpmaddwd) in 8 more, exactly the
 * integers of int_dots.h's vec_dot; then d and dmin times the token's d,
 * with FMA. Groups outermost within a block: each group's levels are
 * unpacked once per row for the 8 tokens. */
AI void tile_k4(int kind, int NR, int NQ, int64_t nb, const uint8_t *w, size_t w_stride,
                const uint8_t *const ap[8], int tn, float *y, size_t y_stride)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(16);
    const size_t wsz = kind == G_Q5_K ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const size_t qo = kind == G_Q5_K ? 48 : 16;
    __m512 acc[4][2];
    zero_acc(NR, NQ, acc);
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *wb[4];
        int32_t scs[4][8];
        __m512i mn[4];
        __m512 dw[4], mw[4];
        _Pragma("GCC unroll 4")
        for (int r = 0; r < NR; r++) {
            wb[r] = w + r * w_stride + (size_t)i * wsz;
            prefetch_ahead(wb[r]);
            prefetch_ahead(wb[r] + 64);
            prefetch_ahead(wb[r] + 128);
            if (kind == G_Q5_K)
                prefetch_ahead(wb[r] + wsz - 1);
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
                    __m512i lv = _mm512_broadcast_i64x4(ld256(wb[r] + qo + 32 * (j >> 1)));
                    if (j & 1)
                        lv = _mm512_srli_epi16(lv, 4);
                    lv = _mm512_and_si512(lv, m4);
                    if (kind == G_Q5_K) /* bit j of qh[l]: bit 4 of level l */
                        lv = _mm512_mask_add_epi8(
                            lv, _mm512_test_epi8_mask(_mm512_broadcast_i64x4(ld256(wb[r] + 16)),
                                                      _mm512_set1_epi8((char)(1 << j))),
                            lv, b4);
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
    store_acc(NR, NQ, acc, tn, y, y_stride, false);
}

/* tile_q6 and tile_q23: the 8 tokens at ap[0..3]'s block i against the
 * NR rows' levels lv (group pair c: 32 bytes) and int16 scale pairs sv:
 * is[r][h] the exact scaled sums of row r with tokens 2h, 2h+1 (fold's
 * lanes), *bs0, *bs1 the tokens' bsums (pairs 0-1, 2-3) for the level
 * offset or min terms; returns the tokens' d in fold's token lanes. */
AI __m512 q8k_tokens(int NR, const uint8_t *const *ap, int64_t i, const __m256i lv[4][8],
                     const __m512i sv[4][8], __m512i is[4][2], __m512i *bs0, __m512i *bs1)
{
    const uint8_t *const b[4] = { ap[0] + (size_t)i * sizeof(block_q8_K),
                                  ap[1] + (size_t)i * sizeof(block_q8_K),
                                  ap[2] + (size_t)i * sizeof(block_q8_K),
                                  ap[3] + (size_t)i * sizeof(block_q8_K) };
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
    *bs0 = ld_pair(b[0] + 260, b[1] + 260);
    *bs1 = ld_pair(b[2] + 260, b[3] + 260);
    float ad[4];
    for (int k = 0; k < 4; k++)
        memcpy(&ad[k], b[k], 4);
    return _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 0, 2, 2, 0, 0, 2, 2, 1, 1, 3, 3, 1, 1, 3, 3),
        _mm512_castps128_ps512(_mm_loadu_ps(ad)));
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
            __m512i is[4][2], bs0, bs1;
            const __m512 dq = q8k_tokens(NR, ap + 4 * q, i, lv, sv, is, &bs0, &bs1);
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
    store_acc(NR, NQ, acc, tn, y, y_stride, false);
}

/* IQ4_XS x Q8_K, as tile_k4() (same token layout, fold() and final
 * reduction): per 32-value group, the levels' magnitudes (a vpshufb
 * table) times the activations with the levels' signs (vpmaddubsw:
 * 2 * 127 * 127, no saturation, as int_dots.h's vec_dot), times the
 * group's scale - 32 (vpdpwssd); then d times the token's d. */
AI __m512i iq4xs_abs_lut(void)
{
    return _mm512_broadcast_i32x4(_mm_abs_epi8(ld128(rvl_kvalues_iq4nl)));
}

/* The 8 scales - 32 of 4 IQ4_XS blocks as int16, block k's in 128-bit
 * lane k, from each block's first 8 bytes (d, scales_h, scales_l): in
 * int16 lane ib, scales_l's word ib / 4 >> 4 (ib % 4) gives the low 4
 * bits and scales_h >> 2 ib the high 2. */
AI __m512i iq4xs_scales4(const uint8_t *const wb[4])
{
    uint64_t h[4];
    for (int k = 0; k < 4; k++)
        memcpy(&h[k], wb[k], 8);
    const __m512i z = _mm512_permutexvar_epi64(
        _mm512_setr_epi64(0, 0, 1, 1, 2, 2, 3, 3),
        _mm512_castsi256_si512(_mm256_setr_epi64x((long long)h[0], (long long)h[1],
                                                  (long long)h[2], (long long)h[3])));
    const __m512i xl = _mm512_shuffle_epi8(
        z, _mm512_broadcast_i32x4(_mm_setr_epi8(4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7)));
    const __m512i xh = _mm512_shuffle_epi8(z, _mm512_set1_epi16(0x0302));
    const __m512i lo = _mm512_srlv_epi16(
        xl, _mm512_broadcast_i32x4(_mm_setr_epi16(0, 4, 8, 12, 0, 4, 8, 12)));
    const __m512i hi = _mm512_slli_epi16(
        _mm512_srlv_epi16(xh, _mm512_broadcast_i32x4(_mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14))), 4);
    /* bits 0-3 from lo, 4-5 from hi */
    const __m512i ls = _mm512_and_si512(_mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi16(0x0F), 0xE4),
                                        _mm512_set1_epi16(0x3F));
    return _mm512_sub_epi16(ls, _mm512_set1_epi16(32));
}

/* Group ib's nibbles (element order) in every 256-bit half, from its 16
 * bytes broadcast (lanes 1 and 3: the high nibbles, elements 16..31). */
AI __m512i xs_nibbles(__m512i v)
{
    return _mm512_and_si512(_mm512_mask_srli_epi16(v, (__mmask32)0xFF00FF00u, v, 4),
                            _mm512_set1_epi8(0x0F));
}

AI void tile_xs(int NR, int NQ, int64_t nb, const uint8_t *w, size_t w_stride,
                const uint8_t *const ap[8], int tn, float *y, size_t y_stride)
{
    const __m512i lut = iq4xs_abs_lut(), zero = _mm512_setzero_si512();
    __m512 acc[4][2];
    zero_acc(NR, NQ, acc);
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *wb[4];
        __m512i sc16[4];
        __m512 dw[4];
        _Pragma("GCC unroll 4")
        for (int r = 0; r < NR; r++) {
            wb[r] = w + r * w_stride + (size_t)i * sizeof(block_iq4_xs);
            prefetch_ahead(wb[r]);
            prefetch_ahead(wb[r] + 64);
            prefetch_ahead(wb[r] + 128);
            dw[r] = _mm512_set1_ps(f16at(wb[r]));
        }
        {
            const uint8_t *const w4[4] = { wb[0], wb[NR > 1 ? 1 : 0], wb[NR > 2 ? 2 : 0],
                                           wb[NR > 3 ? 3 : 0] };
            const __m512i s4 = iq4xs_scales4(w4);
            sc16[0] = _mm512_shuffle_i64x2(s4, s4, 0x00);
            sc16[1] = _mm512_shuffle_i64x2(s4, s4, 0x55);
            sc16[2] = _mm512_shuffle_i64x2(s4, s4, 0xAA);
            sc16[3] = _mm512_shuffle_i64x2(s4, s4, 0xFF);
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
            for (int ib = 0; ib < 8; ib++) {
                const __m512i a0 = ld_pair(b[0] + 4 + 32 * ib, b[1] + 4 + 32 * ib);
                const __m512i a1 = ld_pair(b[2] + 4 + 32 * ib, b[3] + 4 + 32 * ib);
                const __m512i sel = _mm512_set1_epi16((short)(0x0100 * (2 * ib + 1) + 2 * ib));
                _Pragma("GCC unroll 4")
                for (int r = 0; r < NR; r++) {
                    const __m512i nib = xs_nibbles(_mm512_broadcast_i32x4(ld128(wb[r] + 8 + 16 * ib)));
                    const __m512i mag = _mm512_shuffle_epi8(lut, nib);
                    const __mmask64 neg = _mm512_testn_epi8_mask(nib, _mm512_set1_epi8(8));
                    const __m512i s = _mm512_shuffle_epi8(sc16[r], sel);
                    is[r][0] = _mm512_dpwssd_epi32(
                        is[r][0], _mm512_maddubs_epi16(mag, _mm512_mask_sub_epi8(a0, neg, zero, a0)), s);
                    is[r][1] = _mm512_dpwssd_epi32(
                        is[r][1], _mm512_maddubs_epi16(mag, _mm512_mask_sub_epi8(a1, neg, zero, a1)), s);
                }
            }
            float ad[4];
            for (int k = 0; k < 4; k++)
                memcpy(&ad[k], b[k], 4);
            const __m512 dq = _mm512_permutexvar_ps(
                _mm512_setr_epi32(0, 0, 2, 2, 0, 0, 2, 2, 1, 1, 3, 3, 1, 1, 3, 3),
                _mm512_castps128_ps512(_mm_loadu_ps(ad)));
            _Pragma("GCC unroll 4")
            for (int r = 0; r < NR; r++)
                acc[r][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(fold(is[r][0], is[r][1])),
                                            _mm512_mul_ps(dw[r], dq), acc[r][q]);
        }
    }
    store_acc(NR, NQ, acc, tn, y, y_stride, false);
}

/* Q2_K and Q3_K x Q8_K, as tile_q6() (16 groups of 16, same token layout,
 * fold() and final reduction): each 32-value chunk c = 4h + k holds the
 * 2-bit fields 2k of qs[32h..32h+31] (Q3_K: plus 4 where bit c of
 * hmask[l] is set, the level + 4 in 0..7), unpacked once per row and
 * block; vpmaddubsw (2 * 7 * 127, no saturation) times the group's scale
 * (vpdpwssd). Q2_K: the 4-bit mins times the bsums, times dmin, a second
 * FMA as in vec_dot; Q3_K: the -4 offset is 4 times the signed 6-bit
 * scales times the bsums (vec_dot's integers). */
#define Q23_QS(kind) ((kind) == G_Q2_K ? 16 : 32)   /* offset of qs[64] */

/* The 16 signed 6-bit scales of a Q3_K block (rvl_q3_K_scales) as int8:
 * scale j's low 4 bits are nibble (j / 8) of byte j % 8, its high 2 bits
 * bits 2 (j / 4) of byte 8 + j % 4. */
AI __m128i q3_scales(const uint8_t *s)
{
    const __m128i v = _mm_loadl_epi64((const __m128i *)s);
    const __m128i lo = _mm_and_si128(_mm_unpacklo_epi64(v, _mm_srli_epi16(v, 4)), _mm_set1_epi8(0x0F));
    /* byte 8 + j % 4 >> 2 (j / 4), j = 0..15, as one 32-bit word per j / 4 */
    const __m128i hi = _mm_srlv_epi32(_mm_set1_epi32(ld32(s + 8)), _mm_setr_epi32(0, 2, 4, 6));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(_mm_and_si128(hi, _mm_set1_epi8(3)), 4)),
                        _mm_set1_epi8(32));
}

/* Row block wb's 16 scales (Q2_K: the low nibbles, 0..15; Q3_K: -32..31)
 * as int8, and Q2_K's mins (the high nibbles) in *mins. */
AI __m128i q23_scales(int kind, const uint8_t *wb, __m128i *mins)
{
    if (kind == G_Q3_K)
        return q3_scales(wb + 96);
    const __m128i s8 = ld128(wb);
    *mins = _mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0x0F));
    return _mm_and_si128(s8, _mm_set1_epi8(0x0F));
}

/* 16 int8 scales as int32 g = scale g in both int16 halves (vpdpwssd). */
AI __m512i scale_pairs(__m128i s8)
{
    const __m512i s32 = _mm512_cvtepi8_epi32(s8);
    return _mm512_or_si512(_mm512_and_si512(s32, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(s32, 16));
}

/* Chunk c's levels from q, the 32 qs bytes of its half already shifted
 * right by 2 (c % 4); Q3_K: + 4 where bit c of hm (the hmask, the same
 * bytes) is set. One 256-bit row (tiles) or two rows (rows1). */
AI __m256i q23_levels256(int kind, __m256i q, __m256i hm, int c)
{
    const __m256i l = _mm256_and_si256(q, _mm256_set1_epi8(3));
    if (kind == G_Q2_K)
        return l;
    return _mm256_mask_add_epi8(l, _mm256_test_epi8_mask(hm, _mm256_set1_epi8((char)(1 << c))), l,
                                _mm256_set1_epi8(4));
}

AI __m512i q23_levels512(int kind, __m512i q, __m512i hm, int c)
{
    const __m512i l = _mm512_and_si512(q, _mm512_set1_epi8(3));
    if (kind == G_Q2_K)
        return l;
    return _mm512_mask_add_epi8(l, _mm512_test_epi8_mask(hm, _mm512_set1_epi8((char)(1 << c))), l,
                                _mm512_set1_epi8(4));
}

AI void tile_q23(int kind, int NR, int NQ, int64_t nb, const uint8_t *w, size_t w_stride,
                 const uint8_t *const ap[8], int tn, float *y, size_t y_stride)
{
    const size_t wsz = kind == G_Q2_K ? sizeof(block_q2_K) : sizeof(block_q3_K);
    __m512 acc[4][2];
    zero_acc(NR, NQ, acc);
    for (int64_t i = 0; i < nb; i++) {
        __m256i lv[4][8];
        __m512i sv[4][8], bw[4];
        __m512 dw[4], mw[4];
        _Pragma("GCC unroll 4")
        for (int r = 0; r < NR; r++) {
            const uint8_t *wb = w + r * w_stride + (size_t)i * wsz;
            prefetch_ahead(wb);
            prefetch_ahead(wb + 64);
            const __m256i hm = ld256(wb);   /* Q3_K's hmask */
            for (int h = 0; h < 2; h++) {
                __m256i q = ld256(wb + Q23_QS(kind) + 32 * h);
                for (int k = 0; k < 4; k++, q = _mm256_srli_epi16(q, 2))
                    lv[r][4 * h + k] = q23_levels256(kind, q, hm, 4 * h + k);
            }
            __m128i mins = _mm_setzero_si128();
            const __m128i s8 = q23_scales(kind, wb, &mins);
            /* the bsums' factor: Q2_K's mins, Q3_K's scales */
            bw[r] = _mm512_broadcast_i64x4(kind == G_Q2_K ? _mm256_cvtepu8_epi16(mins)
                                                          : _mm256_cvtepi8_epi16(s8));
            const __m512i sp = scale_pairs(s8);
            for (int c = 0; c < 8; c++) {
                const int g = 2 * c, g1 = 2 * c + 1;
                sv[r][c] = _mm512_permutexvar_epi32(
                    _mm512_setr_epi32(g, g, g, g, g1, g1, g1, g1, g, g, g, g, g1, g1, g1, g1), sp);
            }
            if (kind == G_Q2_K) {
                dw[r] = _mm512_set1_ps(f16at(wb + 80));
                mw[r] = _mm512_set1_ps(f16at(wb + 82));
            } else {
                dw[r] = _mm512_set1_ps(f16at(wb + 108));
                mw[r] = dw[r];
            }
        }
        _Pragma("GCC unroll 4")
        for (int q = 0; q < NQ; q++) {
            __m512i is[4][2], bs0, bs1;
            const __m512 dq = q8k_tokens(NR, ap + 4 * q, i, lv, sv, is, &bs0, &bs1);
            _Pragma("GCC unroll 4")
            for (int r = 0; r < NR; r++) {
                const __m512i o0 = _mm512_madd_epi16(bw[r], bs0), o1 = _mm512_madd_epi16(bw[r], bs1);
                if (kind == G_Q2_K) {
                    acc[r][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(fold(is[r][0], is[r][1])),
                                                _mm512_mul_ps(dw[r], dq), acc[r][q]);
                    acc[r][q] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(fold(o0, o1)),
                                                 _mm512_mul_ps(mw[r], dq), acc[r][q]);
                } else {
                    const __m512i i0 = _mm512_sub_epi32(is[r][0], _mm512_slli_epi32(o0, 2));
                    const __m512i i1 = _mm512_sub_epi32(is[r][1], _mm512_slli_epi32(o1, 2));
                    acc[r][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(fold(i0, i1)),
                                                _mm512_mul_ps(dw[r], dq), acc[r][q]);
                }
            }
        }
    }
    store_acc(NR, NQ, acc, tn, y, y_stride, false);
}

/* ======================================================================
 * One token (GEMV, decode): up to 4 rows against one activation row.
 *
 * The tiles above for a single token would compute 4 copies of it. These
 * put rows where the tiles put tokens instead: a zmm holds the same block
 * of two rows (low 256 bits: row k, high: row k+1) against the activation
 * block broadcast to both halves, and row k sits in the lanes where tile()
 * keeps token k. Every (row, token) lane then receives the same exact
 * integers and the same float operations in the same order as in a tile
 * (products of two scales are commutative, and the min / m*s terms land
 * in the same lanes), so a one-token call gives the bits of any other
 * tile: the test compares them.
 *
 * Prefetch: callers walk the rows of a matrix in order, RVL_GEMM_ROWS (8)
 * at a time (forward.c, bench), so each row prefetches its block of the
 * row one pass further on (see gemm()): as far ahead as the pass takes
 * to compute.
 * ====================================================================== */

/* Row k's level/scale vector pairs: rows k and k+1 in the two halves. */
AI __m512i pair256(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* The f16 at byte offset off of the 4 rows' blocks, in tile()'s token
 * lane order (row k where token k is). */
AI __m512 f16_rows(const uint8_t *const wb[4], size_t off)
{
    /* packed in a general register: no vector shuffles for the gather */
    const uint64_t h = (uint64_t)ld16(wb[0] + off) | (uint64_t)ld16(wb[1] + off) << 16 |
                       (uint64_t)ld16(wb[2] + off) << 32 | (uint64_t)ld16(wb[3] + off) << 48;
    const __m512 d = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)h)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 2, 2, 0, 0, 2, 2, 1, 1, 3, 3, 1, 1, 3, 3), d);
}

/* Q4_1's d and m of the 4 rows' blocks, as f16_rows(wb, off) and (wb,
 * off + 2) (Q2_K's d and dmin at off = 80). */
AI void f16_rows_dm(const uint8_t *const wb[4], size_t off, __m512 *d, __m512 *m)
{
    const uint64_t lo = (uint64_t)(uint32_t)ld32(wb[0] + off) | (uint64_t)(uint32_t)ld32(wb[1] + off) << 32;
    const uint64_t hi = (uint64_t)(uint32_t)ld32(wb[2] + off) | (uint64_t)(uint32_t)ld32(wb[3] + off) << 32;
    const __m512 dm = _mm512_castps256_ps512(
        _mm256_cvtph_ps(_mm_set_epi64x((long long)hi, (long long)lo)));
    *d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 4, 4, 0, 0, 4, 4, 2, 2, 6, 6, 2, 2, 6, 6), dm);
    *m = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 5, 5, 1, 1, 5, 5, 3, 3, 7, 7, 3, 3, 7, 7), dm);
}

AI void store_rows(__m512 acc, int rn, float *y)
{
    float l[16];
    _mm512_storeu_ps(l, acc);
    for (int k = 0; k < rn; k++) {
        const int o = (k & 1) * 8 + (k >> 1) * 2;
        y[k] = (l[o] + l[o + 1]) + (l[o + 4] + l[o + 5]);
    }
}

/* The 4 rows' integer block sums against the activation block at ab (in
 * tile()'s lanes, folded), as floats. */
AI __m512 rows1_block(int kind, const uint8_t *const wb[4], const uint8_t *ab)
{
    const __m512i zero = _mm512_setzero_si512(), m4 = _mm512_set1_epi8(0x0F);
    const __m512i av = _mm512_broadcast_i64x4(ld256(ab + (HAS_M(kind) ? 4 : 2)));
    __m512i start = zero;
    if (!HAS_M(kind))
        start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(level_off(kind)), av));
    __m512i t[2];
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        __m512i lv;
        if (kind == G_Q8_0) {
            lv = _mm512_xor_si512(pair256(ld256(wb[2 * h] + 2), ld256(wb[2 * h + 1] + 2)),
                                  _mm512_set1_epi8((char)0x80));
        } else {
            const size_t qo = qs_off(kind);
            lv = _mm512_broadcast_i32x4(ld128(wb[2 * h] + qo));
            lv = _mm512_mask_broadcast_i32x4(lv, (__mmask16)0xFF00, ld128(wb[2 * h + 1] + qo));
            lv = _mm512_and_si512(_mm512_mask_srli_epi16(lv, (__mmask32)0xFF00FF00u, lv, 4), m4);
            if (IS_Q5(kind)) {
                const size_t ho = kind == G_Q5_0 ? 2 : 4;
                const uint64_t qh = (uint32_t)ld32(wb[2 * h] + ho) |
                                    (uint64_t)(uint32_t)ld32(wb[2 * h + 1] + ho) << 32;
                lv = _mm512_mask_add_epi8(lv, _cvtu64_mask64(qh), lv, _mm512_set1_epi8(16));
            }
        }
        t[h] = _mm512_dpbusd_epi32(start, lv, av);
    }
    return _mm512_cvtepi32_ps(fold(t[0], t[1]));
}

/* The d (f16 at offset 0) of the 4 rows' blocks, packed in 64 bits. */
AI uint64_t d_rows(const uint8_t *const wb[4])
{
    return (uint64_t)ld16(wb[0]) | (uint64_t)ld16(wb[1]) << 16 | (uint64_t)ld16(wb[2]) << 32 |
           (uint64_t)ld16(wb[3]) << 48;
}

/* Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: rows wr[0..3] (past the real rows, wr
 * repeats the last one: rn says how many are real) times the activation
 * row a. */
AI void rows1(int kind, int64_t nb, const uint8_t *const wr[4], size_t ahead, const uint8_t *a,
              int rn, float *y)
{
    const size_t wsz = wsz32(kind);
    const size_t asz = HAS_M(kind) ? sizeof(block_q8_1) : sizeof(block_q8_0);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    if (!HAS_M(kind))
        /* two blocks per pass: their 8 row scales and 2 activation scales
         * converted at once (the same floats, fewer conversions) */
        for (; i + 1 < nb; i += 2) {
            const uint8_t *ab = a + (size_t)i * asz;
            const uint8_t *wb[4], *wb1[4];
            _Pragma("GCC unroll 4")
            for (int k = 0; k < 4; k++) {
                wb[k] = wr[k] + (size_t)i * wsz;
                wb1[k] = wb[k] + wsz;
                /* one prefetch per 34 to 44 bytes */
                _mm_prefetch((const char *)wb[k] + ahead, _MM_HINT_T0);
                if (kind == G_Q8_0)
                    _mm_prefetch((const char *)wb1[k] + ahead, _MM_HINT_T0);
            }
            const uint64_t ha = (uint64_t)ld16(ab) | (uint64_t)ld16(ab + asz) << 16;
            /* lanes 0-3: d of block i's rows, 4-7: block i+1's, 8, 9: a.d */
            const __m512 dd = _mm512_cvtph_ps(_mm256_setr_epi64x((long long)d_rows(wb),
                                                                 (long long)d_rows(wb1),
                                                                 (long long)ha, 0));
            const __m512i tok = _mm512_setr_epi32(0, 0, 2, 2, 0, 0, 2, 2, 1, 1, 3, 3, 1, 1, 3, 3);
            const __m512 s0 = _mm512_mul_ps(_mm512_permutexvar_ps(tok, dd),
                                            _mm512_permutexvar_ps(_mm512_set1_epi32(8), dd));
            const __m512 s1 = _mm512_mul_ps(
                _mm512_permutexvar_ps(_mm512_add_epi32(tok, _mm512_set1_epi32(4)), dd),
                _mm512_permutexvar_ps(_mm512_set1_epi32(9), dd));
            acc = _mm512_fmadd_ps(rows1_block(kind, wb, ab), s0, acc);
            acc = _mm512_fmadd_ps(rows1_block(kind, wb1, ab + asz), s1, acc);
        }
    for (; i < nb; i++) {
        const uint8_t *ab = a + (size_t)i * asz;
        const uint8_t *wb[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++) {
            wb[k] = wr[k] + (size_t)i * wsz;
            /* every other block: one prefetch per 36 to 48 bytes */
            if (kind == G_Q8_0 || (i & 1) == 0)
                _mm_prefetch((const char *)wb[k] + ahead, _MM_HINT_T0);
        }
        const __m512 is = rows1_block(kind, wb, ab);
        if (HAS_M(kind)) {
            const __m128 ds = _mm_cvtph_ps(_mm_cvtsi32_si128(ld32(ab)));      /* d, s */
            const __m512 da = _mm512_broadcastss_ps(ds);
            const __m512 sa = _mm512_maskz_broadcastss_ps((__mmask16)0x0505, _mm_movehdup_ps(ds));
            __m512 dw, mw;
            f16_rows_dm(wb, 0, &dw, &mw);
            acc = _mm512_fmadd_ps(is, _mm512_mul_ps(dw, da), acc);
            acc = _mm512_fmadd_ps(mw, sa, acc);
        } else {
            acc = _mm512_fmadd_ps(is, _mm512_mul_ps(f16_rows(wb, 0), _mm512_set1_ps(f16at(ab))), acc);
        }
    }
    store_rows(acc, rn, y);
}

/* Q4_0, IQ4_NL: one block of the 4 rows at a time, row k's 16 nibble
 * bytes in 128-bit lane k, its low nibbles (elements 0-15) and high
 * nibbles (16-31) against the activation's two halves broadcast to every
 * lane: one vpdpbusd each, and lane 4k + j holds row k's elements
 * 4j..4j+3 and 16+4j..16+4j+3, the N partition of tile() (fold2) with no
 * fold, no shuffle of the products and one conversion per 4 rows. The
 * scales come four blocks at a time: the rows' from one 64-byte load per
 * row (vpermw), the activation's from one f16 conversion (scalar gathers
 * of f16 scales were a third of the time). Two groups of 4 rows go
 * together (G = 2): they share the activation's loads, its offset term
 * (two vpdpbusd of the four per block) and its scales, 11% less time per
 * row on one core with the weights in L2. */
AI __m512i rows_n_qs(const uint8_t *const wb[4])
{
    __m512i v = _mm512_castsi128_si512(ld128(wb[0] + 2));
    v = _mm512_inserti32x4(v, ld128(wb[1] + 2), 1);
    v = _mm512_inserti32x4(v, ld128(wb[2] + 2), 2);
    return _mm512_inserti32x4(v, ld128(wb[3] + 2), 3);
}

/* The activation block at ab's two halves broadcast to every 128-bit
 * lane, and tile()'s start (minus the level offset times the
 * activations): shared by every group of 4 rows. */
typedef struct {
    __m512i lo, hi, st;
} n_act;

AI n_act rows_n_act(int kind, const uint8_t *ab)
{
    const __m512i zero = _mm512_setzero_si512(), off = _mm512_set1_epi8(level_off(kind));
    n_act r;
    r.lo = _mm512_broadcast_i32x4(ld128(ab + 2));
    r.hi = _mm512_broadcast_i32x4(ld128(ab + 18));
    r.st = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, off, r.lo), off, r.hi));
    return r;
}

/* The 4 rows' exact block sums (lane 4k + j: row k, part j) against the
 * activation block of na, as floats. */
AI __m512 rows_n_block_v(int kind, __m512i v, const n_act *na, __m512i lut)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if (kind == G_IQ4_NL) {
        lo = _mm512_shuffle_epi8(lut, lo);
        hi = _mm512_shuffle_epi8(lut, hi);
    }
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(na->st, lo, na->lo), hi, na->hi));
}

AI __m512 rows_n_block(int kind, const uint8_t *const wb[4], const n_act *na, __m512i lut)
{
    return rows_n_block_v(kind, rows_n_qs(wb), na, lut);
}

/* G groups of 4 rows (wr[4g + k]; past the real rows, wr repeats the
 * last one: rn says how many are real) against the activation row a: the
 * groups share the activation loads, the offset term and the activation
 * scales, and each group's lanes get the operations of G = 1. */
AI void rows1_n(int kind, int G, int64_t nb, const uint8_t *const wr[8], size_t ahead,
                const uint8_t *a, int rn, float *y)
{
    const size_t wsz = sizeof(block_q4_0), asz = sizeof(block_q8_0);
    const __m512i lut = kind == G_IQ4_NL ? iq4nl_lut() : _mm512_setzero_si512();
    /* word 4e + k <- row k's d of block e: word 9e of a 64-byte load */
    const __m512i d9 = _mm512_setr_epi32(0, 0, 9 | 9 << 16, 9 | 9 << 16, 18 | 18 << 16, 18 | 18 << 16,
                                         27 | 27 << 16, 27 | 27 << 16, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i row = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        const uint8_t *ab = a + (size_t)i * asz;
        const uint8_t *wb[2][4][4];
        _Pragma("GCC unroll 2")
        for (int g = 0; g < G; g++)
            _Pragma("GCC unroll 4")
            for (int k = 0; k < 4; k++) {
                wb[g][0][k] = wr[4 * g + k] + (size_t)i * wsz;
                _mm_prefetch((const char *)wb[g][0][k] + ahead, _MM_HINT_T1);
                _mm_prefetch((const char *)wb[g][0][k] + ahead + 36, _MM_HINT_T1);
                _Pragma("GCC unroll 4")
                for (int e = 1; e < 4; e++)
                    wb[g][e][k] = wb[g][0][k] + e * wsz;
            }
        const uint64_t ha = (uint64_t)ld16(ab) | (uint64_t)ld16(ab + asz) << 16 |
                            (uint64_t)ld16(ab + 2 * asz) << 32 | (uint64_t)ld16(ab + 3 * asz) << 48;
        const __m512 da = _mm512_permutexvar_ps(
            row, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)ha))));
        /* lane 4e + k: row k's d of block i + e times the block's a.d */
        __m512 dd[2];
        _Pragma("GCC unroll 2")
        for (int g = 0; g < G; g++) {
            __m512i dw = _mm512_maskz_permutexvar_epi16(0x1111u, d9, ld512(wb[g][0][0]));
            dw = _mm512_mask_permutexvar_epi16(dw, 0x2222u, d9, ld512(wb[g][0][1]));
            dw = _mm512_mask_permutexvar_epi16(dw, 0x4444u, d9, ld512(wb[g][0][2]));
            dw = _mm512_mask_permutexvar_epi16(dw, 0x8888u, d9, ld512(wb[g][0][3]));
            dd[g] = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(dw)), da);
        }
        _Pragma("GCC unroll 4")
        for (int e = 0; e < 4; e++) {
            const n_act na = rows_n_act(kind, ab + e * asz);
            const __m512i re = _mm512_add_epi32(row, _mm512_set1_epi32(4 * e));
            _Pragma("GCC unroll 2")
            for (int g = 0; g < G; g++)
                acc[g] = _mm512_fmadd_ps(rows_n_block(kind, wb[g][e], &na, lut),
                                         _mm512_permutexvar_ps(re, dd[g]), acc[g]);
        }
    }
    for (; i < nb; i++) {
        const uint8_t *ab = a + (size_t)i * asz;
        const n_act na = rows_n_act(kind, ab);
        _Pragma("GCC unroll 2")
        for (int g = 0; g < G; g++) {
            const uint8_t *wb[4];
            _Pragma("GCC unroll 4")
            for (int k = 0; k < 4; k++)
                wb[k] = wr[4 * g + k] + (size_t)i * wsz;
            const __m512 dd = _mm512_cvtph_ps(_mm256_setr_epi64x((long long)d_rows(wb),
                                                                 (long long)ld16(ab), 0, 0));
            const __m512 s = _mm512_mul_ps(_mm512_permutexvar_ps(row, dd),
                                           _mm512_permutexvar_ps(_mm512_set1_epi32(4), dd));
            acc[g] = _mm512_fmadd_ps(rows_n_block(kind, wb, &na, lut), s, acc[g]);
        }
    }
    _Pragma("GCC unroll 2")
    for (int g = 0; g < G; g++) {
        float l[16];
        _mm512_storeu_ps(l, acc[g]);
        for (int k = 0; k < 4 && 4 * g + k < rn; k++)
            y[4 * g + k] = (l[4 * k] + l[4 * k + 1]) + (l[4 * k + 2] + l[4 * k + 3]);
    }
}

/* Q4_K, Q5_K: as tile_k4() with rows for tokens. The 4 rows' d, dmin
 * and 6-bit scales and mins (the first 16 bytes of a block) are decoded
 * together, row k in 128-bit lane k, and the per-group scale vectors are
 * byte shuffles of that (a scalar decode per row was half the time). */

/* Row k's block header in 128-bit lane k: dwords [d|dmin, u0, u1, u2]. */
AI __m512i k4_heads(const uint8_t *const wb[4])
{
    __m512i v = _mm512_castsi128_si512(ld128(wb[0]));
    v = _mm512_inserti32x4(v, ld128(wb[1]), 1);
    v = _mm512_inserti32x4(v, ld128(wb[2]), 2);
    return _mm512_inserti32x4(v, ld128(wb[3]), 3);
}

/* The 6-bit scales and mins of k4_heads' lanes as bytes: in each lane,
 * scales 0-7 in bytes 0-7, mins 0-7 in bytes 8-15 (llama.cpp's
 * get_scale_min_k4 for all 8 groups). */
AI __m512i k4_scales(__m512i h)
{
    /* [u0, u2, u1, u2 >> 4]: the low 6 bits of scales/mins 0-3, the low 4
     * of 4-7 */
    const __m512i a = _mm512_srlv_epi32(_mm512_shuffle_epi32(h, (_MM_PERM_ENUM)0xED),
                                        _mm512_setr4_epi32(0, 0, 0, 4));
    /* [u0, u0 >> 2, u1, u1 >> 2]: the top 2 bits of scales/mins 4-7 */
    const __m512i b = _mm512_srlv_epi32(_mm512_shuffle_epi32(h, (_MM_PERM_ENUM)0xA5),
                                        _mm512_setr4_epi32(0, 2, 0, 2));
    const __m512i lo = _mm512_and_si512(a, _mm512_setr4_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f,
                                                              0x0f0f0f0f));
    /* lo | (b & [0, 0x30.., 0, 0x30..]) */
    return _mm512_ternarylogic_epi32(lo, b, _mm512_setr4_epi32(0, 0x30303030, 0, 0x30303030), 0xF8);
}

/* The 4 rows' blocks k4_block reads. */
typedef struct {
    const uint8_t *wb[4];
} k4_src;

AI __m512i k4_ld_qs(int kind, const k4_src *s, int c, int h)
{
    const size_t qo0 = kind == G_Q5_K ? 48 : 16;
    return pair256(ld256(s->wb[2 * h] + qo0 + 32 * c), ld256(s->wb[2 * h + 1] + qo0 + 32 * c));
}

/* One block of 4 rows (from s) against the activation block ab, added to
 * acc (tile()'s token lanes, see store_rows). */
AI __m512 k4_block(int kind, const k4_src *src, const uint8_t *ab, __m512 acc)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(16);
    /* d, dmin of row k: f16 2k, 2k+1 after the compress below; in
     * tile()'s token lanes */
    const __m512i dsel = _mm512_setr_epi32(0, 0, 4, 4, 0, 0, 4, 4, 2, 2, 6, 6, 2, 2, 6, 6);
    const __m512i hd = k4_heads(src->wb);
    const __m512i sm8 = k4_scales(hd);
    /* rows 2h, 2h, 2h+1, 2h+1 in the 128-bit lanes: the pairs' halves */
    const __m512i r01 = _mm512_shuffle_i64x2(sm8, sm8, 0x50);
    const __m512i r23 = _mm512_shuffle_i64x2(sm8, sm8, 0xFA);
    __m512i hb[2] = { _mm512_setzero_si512(), _mm512_setzero_si512() };
    if (kind == G_Q5_K) /* bit j of qh[l]: bit 4 of level l of group j */
        for (int h = 0; h < 2; h++)
            hb[h] = pair256(ld256(src->wb[2 * h] + 16), ld256(src->wb[2 * h + 1] + 16));
    __m512i is[2] = { _mm512_setzero_si512(), _mm512_setzero_si512() };
    /* 32 bytes of qs per row hold groups 2c (low nibbles) and 2c+1 */
    _Pragma("GCC unroll 4")
    for (int c = 0; c < 4; c++) {
        __m512i q[2];
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++)
            q[h] = k4_ld_qs(kind, src, c, h);
        _Pragma("GCC unroll 2")
        for (int e = 0; e < 2; e++) {
            const int j = 2 * c + e;
            const __m512i av = _mm512_broadcast_i64x4(ld256(ab + 4 + 32 * j));
            /* scale j of the pair's rows as two int16 in every int32 */
            const __m512i sel = _mm512_set1_epi16((short)(0x8000 | j));
            _Pragma("GCC unroll 2")
            for (int h = 0; h < 2; h++) {
                __m512i lv = _mm512_and_si512(e ? _mm512_srli_epi16(q[h], 4) : q[h], m4);
                if (kind == G_Q5_K)
                    lv = _mm512_mask_add_epi8(
                        lv, _mm512_test_epi8_mask(hb[h], _mm512_set1_epi8((char)(1 << j))), lv,
                        b4);
                const __m512i s = _mm512_shuffle_epi8(h ? r23 : r01, sel);
                is[h] = _mm512_dpwssd_epi32(is[h], _mm512_maddubs_epi16(lv, av), s);
            }
        }
    }
    /* min j of the pair's rows as int16 2j and 2j+1 */
    const __m512i msel = _mm512_set_epi8(
        -128, 15, -128, 15, -128, 14, -128, 14, -128, 13, -128, 13, -128, 12, -128, 12,
        -128, 11, -128, 11, -128, 10, -128, 10, -128, 9, -128, 9, -128, 8, -128, 8,
        -128, 15, -128, 15, -128, 14, -128, 14, -128, 13, -128, 13, -128, 12, -128, 12,
        -128, 11, -128, 11, -128, 10, -128, 10, -128, 9, -128, 9, -128, 8, -128, 8);
    const __m512i bs = _mm512_broadcast_i64x4(ld256(ab + 260));
    const __m512i sm = fold(_mm512_madd_epi16(_mm512_shuffle_epi8(r01, msel), bs),
                            _mm512_madd_epi16(_mm512_shuffle_epi8(r23, msel), bs));
    /* [d0, dmin0, d1, dmin1, ...] */
    const __m512 dm = _mm512_cvtph_ps(_mm512_castsi512_si256(
        _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12), hd)));
    float adf;
    memcpy(&adf, ab, 4);
    const __m512 da = _mm512_set1_ps(adf);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(fold(is[0], is[1])),
                          _mm512_mul_ps(_mm512_permutexvar_ps(dsel, dm), da), acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(sm),
                            _mm512_mul_ps(_mm512_permutexvar_ps(
                                              _mm512_add_epi32(dsel, _mm512_set1_epi32(1)), dm),
                                          da),
                            acc);
}

AI void rows1_k4(int kind, int64_t nb, const uint8_t *const wr[4], size_t ahead,
                 const uint8_t *a, int rn, float *y)
{
    const size_t wsz = kind == G_Q5_K ? sizeof(block_q5_K) : sizeof(block_q4_K);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ab = a + (size_t)i * sizeof(block_q8_K);
        k4_src src;
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++) {
            src.wb[k] = wr[k] + (size_t)i * wsz;
            _mm_prefetch((const char *)src.wb[k] + ahead, _MM_HINT_T1);
            _mm_prefetch((const char *)src.wb[k] + ahead + 64, _MM_HINT_T1);
            _mm_prefetch((const char *)src.wb[k] + ahead + 128, _MM_HINT_T1);
            if (kind == G_Q5_K)
                _mm_prefetch((const char *)src.wb[k] + ahead + wsz - 1, _MM_HINT_T1);
        }
        acc = k4_block(kind, &src, ab, acc);
    }
    store_rows(acc, rn, y);
}

/* IQ4_XS: as tile_xs() with rows for tokens. */
AI void rows1_xs(int64_t nb, const uint8_t *const wr[4], size_t ahead, const uint8_t *a, int rn,
                 float *y)
{
    const __m512i lut = iq4xs_abs_lut(), zero = _mm512_setzero_si512();
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ab = a + (size_t)i * sizeof(block_q8_K);
        const uint8_t *wb[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++) {
            wb[k] = wr[k] + (size_t)i * sizeof(block_iq4_xs);
            _mm_prefetch((const char *)wb[k] + ahead, _MM_HINT_T0);
            _mm_prefetch((const char *)wb[k] + ahead + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)wb[k] + ahead + 128, _MM_HINT_T0);
        }
        /* scales - 32 of rows 2h (low 256 bits) and 2h+1, 8 int16 a lane */
        const __m512i s4 = iq4xs_scales4(wb);
        const __m512i sc[2] = { _mm512_shuffle_i64x2(s4, s4, 0x50), _mm512_shuffle_i64x2(s4, s4, 0xFA) };
        __m512i is[2] = { _mm512_setzero_si512(), _mm512_setzero_si512() };
        _Pragma("GCC unroll 8")
        for (int ib = 0; ib < 8; ib++) {
            const __m512i av = _mm512_broadcast_i64x4(ld256(ab + 4 + 32 * ib));
            const __m512i sel = _mm512_set1_epi16((short)(0x0100 * (2 * ib + 1) + 2 * ib));
            _Pragma("GCC unroll 2")
            for (int h = 0; h < 2; h++) {
                __m512i v = _mm512_broadcast_i32x4(ld128(wb[2 * h] + 8 + 16 * ib));
                v = _mm512_mask_broadcast_i32x4(v, (__mmask16)0xFF00, ld128(wb[2 * h + 1] + 8 + 16 * ib));
                const __m512i nib = xs_nibbles(v);
                const __m512i mag = _mm512_shuffle_epi8(lut, nib);
                const __mmask64 neg = _mm512_testn_epi8_mask(nib, _mm512_set1_epi8(8));
                is[h] = _mm512_dpwssd_epi32(
                    is[h], _mm512_maddubs_epi16(mag, _mm512_mask_sub_epi8(av, neg, zero, av)),
                    _mm512_shuffle_epi8(sc[h], sel));
            }
        }
        float adf;
        memcpy(&adf, ab, 4);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(fold(is[0], is[1])),
                              _mm512_mul_ps(f16_rows(wb, 0), _mm512_set1_ps(adf)), acc);
    }
    store_rows(acc, rn, y);
}

/* Q6_K: as tile_q6() with rows for tokens. */
AI void rows1_q6(int64_t nb, const uint8_t *const wr[4], size_t ahead, const uint8_t *a, int rn,
                 float *y)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ab = a + (size_t)i * sizeof(block_q8_K);
        const uint8_t *wb[4];
        __m256i sc16[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++) {
            wb[k] = wr[k] + (size_t)i * sizeof(block_q6_K);
            _mm_prefetch((const char *)wb[k] + ahead, _MM_HINT_T0);
            _mm_prefetch((const char *)wb[k] + ahead + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)wb[k] + ahead + 128, _MM_HINT_T0);
            _mm_prefetch((const char *)wb[k] + ahead + 192, _MM_HINT_T0);
            const __m128i s8 = ld128(wb[k] + 192);
            sc16[k] = _mm256_cvtepi8_epi16(s8);
        }
        __m512i is[2] = { _mm512_setzero_si512(), _mm512_setzero_si512() };
        /* scale g as two int16 in int32 g, rows k and k+1 in the halves */
        __m512i spair[2][2];
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            const __m512i s32a = _mm512_cvtepi16_epi32(sc16[2 * h]);
            const __m512i s32b = _mm512_cvtepi16_epi32(sc16[2 * h + 1]);
            const __m512i ma = _mm512_set1_epi32(0xFFFF);
            spair[h][0] = _mm512_or_si512(_mm512_and_si512(s32a, ma), _mm512_slli_epi32(s32a, 16));
            spair[h][1] = _mm512_or_si512(_mm512_and_si512(s32b, ma), _mm512_slli_epi32(s32b, 16));
        }
        _Pragma("GCC unroll 2")
        for (int hh = 0; hh < 2; hh++) {
            __m256i lv[4][4];
            _Pragma("GCC unroll 4")
            for (int k = 0; k < 4; k++) {
                const __m256i l0 = ld256(wb[k] + 64 * hh), l1 = ld256(wb[k] + 64 * hh + 32);
                const __m256i hq = ld256(wb[k] + 128 + 32 * hh);
                lv[k][0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                           _mm256_and_si256(_mm256_slli_epi16(hq, 4), m30));
                lv[k][1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                           _mm256_and_si256(_mm256_slli_epi16(hq, 2), m30));
                lv[k][2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                           _mm256_and_si256(hq, m30));
                lv[k][3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi16(hq, 2), m30));
            }
            _Pragma("GCC unroll 4")
            for (int cc = 0; cc < 4; cc++) {
                const int c = 4 * hh + cc, g = 2 * c, g1 = 2 * c + 1;
                const __m512i av = _mm512_broadcast_i64x4(ld256(ab + 4 + 32 * c));
                const __m512i sel = _mm512_setr_epi32(g, g, g, g, g1, g1, g1, g1, 16 + g, 16 + g,
                                                      16 + g, 16 + g, 16 + g1, 16 + g1, 16 + g1,
                                                      16 + g1);
                _Pragma("GCC unroll 2")
                for (int h = 0; h < 2; h++) {
                    const __m512i s = _mm512_permutex2var_epi32(spair[h][0], sel, spair[h][1]);
                    const __m512i l = pair256(lv[2 * h][cc], lv[2 * h + 1][cc]);
                    is[h] = _mm512_dpwssd_epi32(is[h], _mm512_maddubs_epi16(l, av), s);
                }
            }
        }
        const __m512i bs = _mm512_broadcast_i64x4(ld256(ab + 260));
        const __m512i i0 = _mm512_sub_epi32(
            is[0], _mm512_slli_epi32(_mm512_madd_epi16(pair256(sc16[0], sc16[1]), bs), 5));
        const __m512i i1 = _mm512_sub_epi32(
            is[1], _mm512_slli_epi32(_mm512_madd_epi16(pair256(sc16[2], sc16[3]), bs), 5));
        float adf;
        memcpy(&adf, ab, 4);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(fold(i0, i1)),
                              _mm512_mul_ps(f16_rows(wb, 208), _mm512_set1_ps(adf)), acc);
    }
    store_rows(acc, rn, y);
}

/* Q2_K, Q3_K: as tile_q23() with rows for tokens; rows 2h and 2h+1 of a
 * pair unpack their chunks together in one zmm. The 4 rows' scales are
 * decoded together, row k in 128-bit lane k (the 16 bytes of Q2_K's
 * scales; of Q3_K from byte 94: the last 2 qs bytes, scales and d, all
 * within the block), and each chunk's scale vector is one vpermw of
 * them (a scalar decode per row was 6% of Q3_K's time). Blocks are 84
 * and 110 bytes: two prefetches per row and block reach every line.
 *
 * These rows cost as much per value as Q4_K's (one thread, weights in
 * cache: 78-82 ns per row of 4096 against Q4_K's 72-76) for half or
 * two thirds of the bytes, so they reach 66-72% of the paired read on
 * 2 threads where Q4_K reaches 84%. The per-chunk work is 5 vector
 * uops per 64 values (shift, and, vpmaddubsw, vpdpwssd, the scale's
 * vpermw; Q3_K 2 more for the hmask bit); a vpdpwssd chain split in two
 * and shift-free fields (4^k times the level in a separate sum) were
 * each 2-8% slower. */
AI __m512i ld_rows4(const uint8_t *const wb[4], size_t off)
{
    __m512i v = _mm512_castsi128_si512(ld128(wb[0] + off));
    v = _mm512_inserti32x4(v, ld128(wb[1] + off), 1);
    v = _mm512_inserti32x4(v, ld128(wb[2] + off), 2);
    return _mm512_inserti32x4(v, ld128(wb[3] + off), 3);
}

/* q3_scales() of the 4 rows at once: v's 128-bit lane k holds bytes
 * 94..109 of row k's block (scales[] from byte 2). */
AI __m512i q3_scales4(__m512i v)
{
    const __m512i x = _mm512_bsrli_epi128(v, 2);
    const __m512i lo = _mm512_and_si512(_mm512_unpacklo_epi64(x, _mm512_srli_epi16(x, 4)),
                                        _mm512_set1_epi8(0x0F));
    const __m512i hi = _mm512_srlv_epi32(_mm512_shuffle_epi32(x, (_MM_PERM_ENUM)0xAA),
                                         _mm512_setr4_epi32(0, 2, 4, 6));
    return _mm512_sub_epi8(
        _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(hi, _mm512_set1_epi8(3)), 4)),
        _mm512_set1_epi8(32));
}

AI void rows1_q23(int kind, int64_t nb, const uint8_t *const wr[4], size_t ahead,
                  const uint8_t *a, int rn, float *y)
{
    const size_t wsz = kind == G_Q2_K ? sizeof(block_q2_K) : sizeof(block_q3_K);
    const __m512i dsel = _mm512_setr_epi32(0, 0, 2, 2, 0, 0, 2, 2, 1, 1, 3, 3, 1, 1, 3, 3);
    /* int16 lanes of chunk c's scales (+ 2c): group 2c of the low row in
     * int32 0-3, 2c + 1 in 4-7, the high row's (int16 16..31) in 8-15 */
    const __m512i sbase = _mm512_setr_epi32(0, 0, 0, 0, 0x10001, 0x10001, 0x10001, 0x10001,
                                            0x100010, 0x100010, 0x100010, 0x100010, 0x110011,
                                            0x110011, 0x110011, 0x110011);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ab = a + (size_t)i * sizeof(block_q8_K);
        const uint8_t *wb[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++) {
            wb[k] = wr[k] + (size_t)i * wsz;
            _mm_prefetch((const char *)wb[k] + ahead, _MM_HINT_T1);
            _mm_prefetch((const char *)wb[k] + ahead + 64, _MM_HINT_T1);
        }
        /* row k's 16 scales as int8 in lane k, the bsums' factors (Q2_K's
         * mins, Q3_K's scales) in bw8; as int16 per pair of rows in sc[],
         * bw[] (row 2h in the low 256 bits) */
        const __m512i v = ld_rows4(wb, kind == G_Q2_K ? 0 : 94);
        __m512i sc[2], bw[2];
        __m512 dw, mw;
        if (kind == G_Q2_K) {
            const __m512i m4 = _mm512_set1_epi8(0x0F);
            const __m512i sc8 = _mm512_and_si512(v, m4);
            const __m512i bw8 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            sc[0] = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(sc8));
            sc[1] = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(sc8, 1));
            bw[0] = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(bw8));
            bw[1] = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(bw8, 1));
            f16_rows_dm(wb, 80, &dw, &mw);
        } else {
            const __m512i sc8 = q3_scales4(v);
            bw[0] = sc[0] = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(sc8));
            bw[1] = sc[1] = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(sc8, 1));
            /* d: int16 7 of each lane */
            const __m512i dh = _mm512_permutexvar_epi16(_mm512_set1_epi64(0x001f0017000f0007), v);
            dw = mw = _mm512_permutexvar_ps(dsel, _mm512_cvtph_ps(_mm512_castsi512_si256(dh)));
        }
        __m512i hm[2] = { _mm512_setzero_si512(), _mm512_setzero_si512() };
        if (kind == G_Q3_K)
            for (int h = 0; h < 2; h++)
                hm[h] = pair256(ld256(wb[2 * h]), ld256(wb[2 * h + 1]));
        __m512i is[2] = { _mm512_setzero_si512(), _mm512_setzero_si512() };
        _Pragma("GCC unroll 2")
        for (int hh = 0; hh < 2; hh++) {
            __m512i q[2];
            _Pragma("GCC unroll 2")
            for (int h = 0; h < 2; h++)
                q[h] = pair256(ld256(wb[2 * h] + Q23_QS(kind) + 32 * hh),
                               ld256(wb[2 * h + 1] + Q23_QS(kind) + 32 * hh));
            _Pragma("GCC unroll 4")
            for (int k = 0; k < 4; k++) {
                const int c = 4 * hh + k;
                const __m512i av = _mm512_broadcast_i64x4(ld256(ab + 4 + 32 * c));
                const __m512i sel = _mm512_add_epi16(sbase, _mm512_set1_epi16((short)(2 * c)));
                _Pragma("GCC unroll 2")
                for (int h = 0; h < 2; h++) {
                    const __m512i s = _mm512_permutexvar_epi16(sel, sc[h]);
                    const __m512i l = q23_levels512(kind, q[h], hm[h], c);
                    is[h] = _mm512_dpwssd_epi32(is[h], _mm512_maddubs_epi16(l, av), s);
                    q[h] = _mm512_srli_epi16(q[h], 2);
                }
            }
        }
        const __m512i bs = _mm512_broadcast_i64x4(ld256(ab + 260));
        const __m512i o0 = _mm512_madd_epi16(bw[0], bs), o1 = _mm512_madd_epi16(bw[1], bs);
        float adf;
        memcpy(&adf, ab, 4);
        const __m512 da = _mm512_set1_ps(adf);
        if (kind == G_Q2_K) {
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(fold(is[0], is[1])), _mm512_mul_ps(dw, da), acc);
            acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(fold(o0, o1)), _mm512_mul_ps(mw, da), acc);
        } else {
            const __m512i i0 = _mm512_sub_epi32(is[0], _mm512_slli_epi32(o0, 2));
            const __m512i i1 = _mm512_sub_epi32(is[1], _mm512_slli_epi32(o1, 2));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(fold(i0, i1)), _mm512_mul_ps(dw, da), acc);
        }
    }
    store_rows(acc, rn, y);
}

/* One token, up to 4 rows, every format but Q4_0 and IQ4_NL. */
AI void rows1_4(int kind, int64_t nb, const uint8_t *const wr[4], size_t ahead, const uint8_t *a,
                int rn, float *y)
{
    if (kind == G_Q4_K || kind == G_Q5_K)
        rows1_k4(kind, nb, wr, ahead, a, rn, y);
    else if (kind == G_Q6_K)
        rows1_q6(nb, wr, ahead, a, rn, y);
    else if (kind == G_IQ4_XS)
        rows1_xs(nb, wr, ahead, a, rn, y);
    else if (kind == G_Q2_K || kind == G_Q3_K)
        rows1_q23(kind, nb, wr, ahead, a, rn, y);
    else
        rows1(kind, nb, wr, ahead, a, rn, y);
}

#define T(R, P)                                                                    \
    case (R - 1) * 2 + P - 1:                                                      \
        if (kind == G_Q4_K || kind == G_Q5_K)                                      \
            tile_k4(kind, R, P, nb, wr, w_stride, ap, tn, yt, y_stride);           \
        else if (kind == G_Q6_K)                                                   \
            tile_q6(R, P, nb, wr, w_stride, ap, tn, yt, y_stride);                 \
        else if (kind == G_IQ4_XS)                                                 \
            tile_xs(R, P, nb, wr, w_stride, ap, tn, yt, y_stride);                 \
        else if (kind == G_Q2_K || kind == G_Q3_K)                                 \
            tile_q23(kind, R, P, nb, wr, w_stride, ap, tn, yt, y_stride);          \
        else                                                                       \
            tile(kind, R, P, nb, wr, w_stride, ap, tn, yt, y_stride);              \
        break;

AI void gemm(int kind, int64_t n, const void *vw, size_t w_stride, int nr, const void *vact,
             size_t act_stride, int nt, float *y, size_t y_stride)
{
    const int64_t nb =
        n / (kind == G_Q4_K || kind == G_Q5_K || kind == G_Q6_K || kind == G_IQ4_XS ||
                     kind == G_Q2_K || kind == G_Q3_K
                 ? 256
                 : 32);
    const uint8_t *w = vw, *act = vact;
    if (nt == 1) {
        /* one token: groups of RVL_GEMM_ROWS (8) rows; Q4_0 and IQ4_NL
         * take them in one pass (rows1_n with G = 2), the others in two
         * passes of 4. Each row prefetches the row a pass further on
         * (callers walk the rows in order): 8 rows on for rows1_n and
         * the Q4_K/Q5_K rows, into L2 (hint T1), 4 for the others into
         * L1, as before the 8-row groups. Measured at 11008x4096 on 2
         * threads, fraction of the paired read: Q4_0 78-80% with T0 at 8
         * rows, 83% with T1 (T1 at 16 rows 80%, at 32 76%; NTA 37-43%;
         * no prefetch 50%); Q4_K 80-81% with T0 at 4 rows, 84-86% with T1
         * at 8; Q8_0, Q4_1, Q5_0, Q5_1, Q6_K and IQ4_XS gain nothing.
         * Q2_K and Q3_K take Q4_K's: 66-71% of the paired read alike
         * with T1 at 8, 16 or 32 rows and T0 at 4 or 8 (their rows are
         * compute-bound, see rows1_q23) */
        const bool far = IS_N(kind) || kind == G_Q4_K || kind == G_Q5_K || kind == G_Q2_K ||
                         kind == G_Q3_K;
        const size_t ahead = (size_t)(far ? RVL_GEMM_ROWS : 4) * w_stride;
        for (int r0 = 0; r0 < nr; r0 += 8) {
            const int rn = nr - r0 < 8 ? nr - r0 : 8;
            const uint8_t *wr = w + (size_t)r0 * w_stride, *wr8[8];
            for (int k = 0; k < 8; k++)
                wr8[k] = wr + (size_t)(k < rn ? k : rn - 1) * w_stride;
            float *yt = y + r0;
            if (IS_N(kind)) {
                if (rn > 4)
                    rows1_n(kind, 2, nb, wr8, ahead, act, rn, yt);
                else
                    rows1_n(kind, 1, nb, wr8, ahead, act, rn, yt);
                continue;
            }
            rows1_4(kind, nb, wr8, ahead, act, rn < 4 ? rn : 4, yt);
            if (rn > 4)
                rows1_4(kind, nb, wr8 + 4, ahead, act, rn - 4, yt + 4);
        }
        return;
    }
    for (int r0 = 0; r0 < nr; r0 += 4) {
        const int rn = nr - r0 < 4 ? nr - r0 : 4;
        const uint8_t *wr = w + (size_t)r0 * w_stride;
        for (int t0 = 0; t0 < nt; t0 += 8) {
            const int tn = nt - t0 < 8 ? nt - t0 : 8;
            const uint8_t *ap[8];
            for (int k = 0; k < 8; k++)
                ap[k] = act + (size_t)(t0 + (k < tn ? k : tn - 1)) * act_stride;
            float *yt = y + (size_t)t0 * y_stride + r0;
            if (tn == 1) { /* the last of 8k + 1 tokens */
                const uint8_t *wr8[8];
                for (int k = 0; k < 8; k++)
                    wr8[k] = wr + (size_t)(k < rn ? k : rn - 1) * w_stride;
                const size_t ahead = 4 * w_stride;
                if (IS_N(kind))
                    rows1_n(kind, 1, nb, wr8, ahead, ap[0], rn, yt);
                else
                    rows1_4(kind, nb, wr8, ahead, ap[0], rn, yt);
                continue;
            }
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

void gemm_q5_0_q8_0_avx512vnni(int64_t n, const void *w, size_t w_stride, int nr,
                               const void *act, size_t act_stride, int nt, float *y,
                               size_t y_stride)
{
    gemm(G_Q5_0, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q5_1_q8_1_avx512vnni(int64_t n, const void *w, size_t w_stride, int nr,
                               const void *act, size_t act_stride, int nt, float *y,
                               size_t y_stride)
{
    gemm(G_Q5_1, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_iq4_nl_q8_0_avx512vnni(int64_t n, const void *w, size_t w_stride, int nr,
                                 const void *act, size_t act_stride, int nt, float *y,
                                 size_t y_stride)
{
    gemm(G_IQ4_NL, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q5_K_q8_K_avx512vnni(int64_t n, const void *w, size_t w_stride, int nr,
                               const void *act, size_t act_stride, int nt, float *y,
                               size_t y_stride)
{
    gemm(G_Q5_K, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_iq4_xs_q8_K_avx512vnni(int64_t n, const void *w, size_t w_stride, int nr,
                                 const void *act, size_t act_stride, int nt, float *y,
                                 size_t y_stride)
{
    gemm(G_IQ4_XS, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q2_K_q8_K_avx512vnni(int64_t n, const void *w, size_t w_stride, int nr,
                               const void *act, size_t act_stride, int nt, float *y,
                               size_t y_stride)
{
    gemm(G_Q2_K, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q3_K_q8_K_avx512vnni(int64_t n, const void *w, size_t w_stride, int nr,
                               const void *act, size_t act_stride, int nt, float *y,
                               size_t y_stride)
{
    gemm(G_Q3_K, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

RVL_X86_TARGET_END

#endif
