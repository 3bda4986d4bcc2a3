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
 *
 * Formats: Q4_0 (and RVL_I4S_G32, its layout), Q4_1, Q5_0, Q5_1, Q8_0 and
 * IQ4_NL (its levels through a vpshufb table, widened like Q8_0's)
 * (tile, rows1); Q5_K too (tile_kq, rows1_kq);
 * Q4_K and Q6_K (tile_kq, rows1_kq), what Q4_K_M files are made of;
 * Q2_K, Q3_K and IQ4_XS (tile_kq, rows1_kq). One token (decode) goes to
 * rows1*, with rows in the lanes instead of tokens.
 *
 * Measured (bench kernels -t 2, 64 tokens, 2 cores shared with other
 * work): the tiles take Q2_K from 45.5 to 24.6 ms at 4096x4096 and 123
 * to 67 ms at 11008x4096, Q3_K 55 -> 25 and 147 -> 68, IQ4_XS 61 -> 28
 * and 154 -> 72, against vec_dot per (row, token). One token stays at
 * vec_dot's 55-63% of the paired read (IQ4_XS 63-65% -> 64-69%);
 * prefetching 8 rows ahead into L2 measured the same, 2 KiB ahead in
 * the row (as vec_dot) 33-42%.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>

RVL_X86_TARGET_BEGIN("avx2,fma,f16c")

#include "x86/common.h"

enum { G_Q4_0, G_Q4_1, G_Q8_0, G_Q4_K, G_Q6_K, G_Q5_0, G_Q5_1, G_Q5_K, G_IQ4_NL,
       G_Q2_K, G_Q3_K, G_IQ4_XS };

#define HAS_M(kind) ((kind) == G_Q4_1 || (kind) == G_Q5_1)   /* x = d*q + m */
#define IS_KQ(kind)                                                                \
    ((kind) == G_Q4_K || (kind) == G_Q5_K || (kind) == G_Q6_K || (kind) == G_Q2_K || \
     (kind) == G_Q3_K || (kind) == G_IQ4_XS)
/* K-quants with mins (x = d*sc*q - dmin*m), subtracted in float */
#define HAS_MIN(kind) ((kind) == G_Q4_K || (kind) == G_Q5_K || (kind) == G_Q2_K)
/* 8-bit levels (Q8_0; IQ4_NL's -127..113): vpmaddubsw pairs up to
 * 2 * 128 * 127, widened to int32 at once */
#define WIDE(kind) ((kind) == G_Q8_0 || (kind) == G_IQ4_NL)
static inline size_t wsz32(int kind)
{
    return kind == G_Q4_0 || kind == G_IQ4_NL ? sizeof(block_q4_0)
           : kind == G_Q4_1                   ? sizeof(block_q4_1)
           : kind == G_Q5_0 ? sizeof(block_q5_0) : kind == G_Q5_1 ? sizeof(block_q5_1)
                            : sizeof(block_q8_0);
}

/* The 32 levels of a 32-value block in element order: signed (Q4_0:
 * q - 8, Q5_0: q - 16, Q8_0, IQ4_NL: kvalues[q]) or unsigned (Q4_1,
 * Q5_1: q). */
static inline __m256i levels32(int kind, const uint8_t *wb)
{
    switch (kind) {
    case G_Q8_0:
        return ld256(wb + 2);
    case G_Q4_0:
        return _mm256_sub_epi8(nibbles32(wb + 2), _mm256_set1_epi8(8));
    case G_Q4_1:
        return nibbles32(wb + 4);
    case G_IQ4_NL:
        return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(ld128(rvl_kvalues_iq4nl)),
                                   nibbles32(wb + 2));
    case G_Q5_0: /* bit clear: q - 16 = nibble | 0xF0 as int8 */
        return _mm256_or_si256(nibbles32(wb + 6),
                               _mm256_andnot_si256(bits32_mask(wb + 2), _mm256_set1_epi8((char)0xF0)));
    default: /* G_Q5_1 */
        return _mm256_or_si256(nibbles32(wb + 8),
                               _mm256_and_si256(bits32_mask(wb + 4), _mm256_set1_epi8(0x10)));
    }
}

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

AI int ld32s(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
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
    const size_t wsz = wsz32(kind);
    const size_t asz = HAS_M(kind) ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t aoff = HAS_M(kind) ? 4 : 2;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < NR; r++)
        acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const size_t ao = (size_t)i * asz;
        /* the 8 tokens' scales (and Q8_1's s), lane k = token k */
        const __m256 da = f16x8(ap, ao);
        const __m256 sa = HAS_M(kind) ? f16x8(ap, ao + 2) : _mm256_setzero_ps();
        _Pragma("GCC unroll 4")
        for (int r = 0; r < NR; r++) {
            const uint8_t *wb = w + r * w_stride + (size_t)i * wsz;
            if (kind == G_Q8_0 || (i & 1) == 0)
                prefetch_ahead(wb);
            /* the weight levels: signed (Q4_0: q - 8, Q5_0: q - 16, Q8_0)
             * go through vpmaddubsw as |w| times a with w's sign,
             * unsigned (Q4_1, Q5_1) straight */
            const __m256i lv = levels32(kind, wb);
            const __m256i uw = HAS_M(kind) ? lv : _mm256_sign_epi8(lv, lv);
            __m256i p[8];
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8; k++) {
                __m256i a = ld256(ap[k] + ao + aoff);
                if (!HAS_M(kind))
                    a = _mm256_sign_epi8(a, lv);
                p[k] = _mm256_maddubs_epi16(uw, a);
                if (WIDE(kind)) /* pair sums up to 2 * 128 * 127 */
                    p[k] = _mm256_madd_epi16(p[k], ones);
            }
            const __m256i is = WIDE(kind) ? sum8(p) : sum8_16(p);
            if (HAS_M(kind)) {
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

/* ======================================================================
 * One token (GEMV, decode): up to 4 rows against one activation row.
 *
 * A tile for a single token would compute 8 copies of it. Here the rows
 * take the place of the tokens: each row's exact block sum lands in float
 * lane k = row k of an xmm (a vphaddw/vphaddd tree over the 4 rows), and
 * the float operations per (row, block) are the tile's: the same product
 * of the two scales, the same FMA into the same running sum. A one-token
 * call gives the bits of any other tile (the test compares them).
 *
 * Prefetch: callers walk the rows of a matrix in groups of 4 (forward.c,
 * bench), so each row prefetches its block of the row 4 further on: one
 * group ahead, as far ahead as the group takes to compute.
 * ====================================================================== */

/* The f16 at offset off of the 4 rows' blocks, lane k = row k. */
AI __m128 f16_rows(const uint8_t *const wb[4], size_t off)
{
    const uint64_t h = (uint64_t)(uint16_t)ld16s(wb[0] + off) |
                       (uint64_t)(uint16_t)ld16s(wb[1] + off) << 16 |
                       (uint64_t)(uint16_t)ld16s(wb[2] + off) << 32 |
                       (uint64_t)(uint16_t)ld16s(wb[3] + off) << 48;
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h));
}

/* 4 rows' 16 int16 values each summed into int32 lane k = row k: two
 * levels of int16 pair adds, then int32. The values are vpmaddubsw pairs
 * of levels and activations (|a| <= 127): Q4_0's less a pair of 8 x
 * activations, at most 2 * 15 * 127 + 2 * 8 * 127 = 5842; Q4_1's 3810;
 * Q5_0's (signed, -16..15) 4064; Q5_1's 7874: four of them stay under
 * 32767. */
AI __m128i rsum4_16(const __m256i p[4])
{
    const __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(p[0], p[1]), _mm256_hadd_epi16(p[2], p[3]));
    const __m256i s = _mm256_madd_epi16(h, _mm256_set1_epi16(1));
    return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

/* The same from 8 int32 lanes per row. */
AI __m128i rsum4_32(const __m256i p[4])
{
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* Rows wr[0..3] (past the real rows, wr repeats the last one: rn says
 * how many are real) times the activation row a. */
AI void rows1(int kind, int64_t nb, const uint8_t *const wr[4], size_t ahead, const uint8_t *a,
              int rn, float *y)
{
    const size_t wsz = wsz32(kind);
    const size_t asz = HAS_M(kind) ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t aoff = HAS_M(kind) ? 4 : 2, qoff = kind == G_Q4_1 ? 4 : 2;
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
    const __m256i shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ab = a + (size_t)i * asz;
        const uint8_t *wb[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++) {
            wb[k] = wr[k] + (size_t)i * wsz;
            if (kind == G_Q8_0 || (i & 1) == 0)
                _mm_prefetch((const char *)wb[k] + ahead, _MM_HINT_T0);
        }
        const __m256i av = ld256(ab + aoff);
        /* Q4_0: levels q - 8 as the stored nibble q, less 8 x activation */
        const __m256i off8 = kind == G_Q4_0 ? _mm256_maddubs_epi16(_mm256_set1_epi8(8), av)
                                            : _mm256_setzero_si256();
        __m256i p[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++) {
            if (WIDE(kind)) {
                const __m256i lv = kind == G_Q8_0 ? ld256(wb[k] + 2) : levels32(kind, wb[k]);
                p[k] = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(_mm256_sign_epi8(lv, lv), _mm256_sign_epi8(av, lv)), ones);
            } else if (kind == G_Q5_0) {
                /* signed levels -16..15: pairs of at most 2 * 16 * 127 */
                const __m256i lv = levels32(kind, wb[k]);
                p[k] = _mm256_maddubs_epi16(_mm256_sign_epi8(lv, lv), _mm256_sign_epi8(av, lv));
            } else if (kind == G_Q5_1) {
                /* unsigned levels 0..31: pairs of at most 2 * 31 * 127 */
                p[k] = _mm256_maddubs_epi16(levels32(kind, wb[k]), av);
            } else {
                /* the 32 nibbles in element order: byte j's low nibble in
                 * the low half, its high nibble in the high half */
                const __m256i v = _mm256_broadcastsi128_si256(ld128(wb[k] + qoff));
                const __m256i nib = _mm256_and_si256(_mm256_srlv_epi32(v, shift), m4);
                p[k] = _mm256_sub_epi16(_mm256_maddubs_epi16(nib, av), off8);
            }
        }
        const __m128 is = _mm_cvtepi32_ps(WIDE(kind) ? rsum4_32(p) : rsum4_16(p));
        if (HAS_M(kind)) {
            /* d, m of each row; d, s of the activation */
            const __m256 dm = _mm256_cvtph_ps(_mm_setr_epi32(ld32s(wb[0]), ld32s(wb[1]),
                                                             ld32s(wb[2]), ld32s(wb[3])));
            const __m128 lo = _mm256_castps256_ps128(dm), hi = _mm256_extractf128_ps(dm, 1);
            const __m128 ds = _mm_cvtph_ps(_mm_cvtsi32_si128(ld32s(ab)));
            acc = _mm_fmadd_ps(is, _mm_mul_ps(_mm_shuffle_ps(lo, hi, 0x88), _mm_broadcastss_ps(ds)),
                               acc);
            acc = _mm_fmadd_ps(_mm_shuffle_ps(lo, hi, 0xDD),
                               _mm_broadcastss_ps(_mm_movehdup_ps(ds)), acc);
        } else {
            acc = _mm_fmadd_ps(is, _mm_mul_ps(f16_rows(wb, 0), _mm_set1_ps(f16at(ab))), acc);
        }
    }
    float l[4];
    _mm_storeu_ps(l, acc);
    for (int k = 0; k < rn; k++)
        y[k] = l[k];
}

/* ======================================================================
 * K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS against Q8_K
 * (256-value blocks): the same tile shape and float accumulation (one
 * lane per token, or per row for one token), with the integers of a
 * block per (row, token) computed chunk by chunk (32 values): unsigned
 * levels times activations with vpmaddubsw, times the group's integer
 * scale with vpmaddwd, 8 int32 lanes. The mins of Q2_K, Q4_K and Q5_K
 * times the activation's bsums go in 8 more (subtracted in float with
 * dmin, as ref); the offsets of Q3_K (-4) and Q6_K (-32) as offset x
 * scales x bsums (in the integers). IQ4_XS's signed code-book levels
 * take the sign trick of IQ4_NL (|level| <= 127: pairs up to 2 * 127 *
 * 127). Each row's block is unpacked once (kq_prep) for all the tokens.
 * ====================================================================== */

typedef struct {
    __m256i lv[8];   /* unsigned levels of the 8 32-value chunks (IQ4_XS: |level|) */
    __m256i sc[8];   /* their int16 scales, one per vpmaddubsw pair */
    __m256i sg[8];   /* IQ4_XS: the signed levels, whose signs go onto the activations */
    __m256i mn;      /* Q4_K/Q5_K: min j as int16 2j and 2j+1; Q2_K: the 16 mins;
                        Q3_K, Q6_K: the 16 scales (times bsums for the offset) */
} kq_block;

static inline size_t kq_size(int kind)
{
    return kind == G_Q4_K   ? sizeof(block_q4_K)
           : kind == G_Q5_K ? sizeof(block_q5_K)
           : kind == G_Q6_K ? sizeof(block_q6_K)
           : kind == G_Q2_K ? sizeof(block_q2_K)
           : kind == G_Q3_K ? sizeof(block_q3_K) : sizeof(block_iq4_xs);
}

/* offset of the f16 d (dmin follows it) */
static inline size_t kq_doff(int kind)
{
    return kind == G_Q6_K   ? offsetof(block_q6_K, d)
           : kind == G_Q2_K ? offsetof(block_q2_K, d)
           : kind == G_Q3_K ? offsetof(block_q3_K, d) : 0;
}

/* Formats with 16 groups of 16 (Q2_K, Q3_K, Q6_K): chunk c holds groups
 * 2c (bytes 0-15) and 2c+1 (bytes 16-31); its scales are 2c in the low
 * 128 bits and 2c+1 in the high, picked by vpshufb from the 16 int16
 * scales s16 (0-7, or 8-15, in both halves). */
AI void kq_scales16(__m256i s16, __m256i sc[8])
{
    const __m256i s_lo = _mm256_permute4x64_epi64(s16, 0x44);
    const __m256i s_hi = _mm256_permute4x64_epi64(s16, 0xEE);
    _Pragma("GCC unroll 8")
    for (int c = 0; c < 8; c++) {
        const int g = 2 * (c & 3);
        const char l = (char)(2 * g), h = (char)(2 * g + 2);
        const __m256i pick = _mm256_setr_epi8(l, l + 1, l, l + 1, l, l + 1, l, l + 1, l, l + 1,
                                              l, l + 1, l, l + 1, l, l + 1, h, h + 1, h, h + 1,
                                              h, h + 1, h, h + 1, h, h + 1, h, h + 1, h, h + 1,
                                              h, h + 1);
        sc[c] = _mm256_shuffle_epi8(c < 4 ? s_lo : s_hi, pick);
    }
}

/* The 16 signed 6-bit scales of a Q3_K block (ref.h's rvl_q3_K_scales)
 * as int8: low 4 bits of scale j < 8 in byte j's low nibble, of j >= 8
 * in byte j - 8's high nibble; the 2 high bits of j in byte 8 + j % 4 at
 * bit 2 * (j / 4); stored + 32. */
AI __m128i q3_K_scales8(const uint8_t *s)
{
    uint32_t u[3];
    memcpy(u, s, 12);
    const uint32_t lo4 = 0x0f0f0f0f, hi2 = 0x03030303;
    const __m128i v = _mm_setr_epi32((int)((u[0] & lo4) | (u[2] & hi2) << 4),
                                     (int)((u[1] & lo4) | (u[2] >> 2 & hi2) << 4),
                                     (int)((u[0] >> 4 & lo4) | (u[2] >> 4 & hi2) << 4),
                                     (int)((u[1] >> 4 & lo4) | (u[2] >> 6 & hi2) << 4));
    return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

AI void kq_prep(int kind, const uint8_t *wb, kq_block *b)
{
    if (kind == G_Q4_K || kind == G_Q5_K) {
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        uint32_t u[3];
        memcpy(u, wb + 4, 12);
        const uint32_t sc_lo = u[0] & 0x3f3f3f3f, mn_lo = u[1] & 0x3f3f3f3f;
        const uint32_t sc_hi = (u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030);
        const uint32_t mn_hi = ((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030);
        /* the 8 scales in every 64 bits; group j's as int16 by vpshufb */
        const __m256i sv = _mm256_set1_epi64x((long long)((uint64_t)sc_lo | (uint64_t)sc_hi << 32));
        const size_t qo = kind == G_Q5_K ? 48 : 16;
        __m256i hb = kind == G_Q5_K ? ld256(wb + 16) : _mm256_setzero_si256();
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) {
            const __m256i q = ld256(wb + qo + 32 * (j >> 1));
            b->lv[j] = _mm256_and_si256((j & 1) ? _mm256_srli_epi16(q, 4) : q, m4);
            if (kind == G_Q5_K) { /* bit j of qh[l]: bit 4 of level l */
                b->lv[j] = _mm256_or_si256(
                    b->lv[j], _mm256_and_si256(_mm256_slli_epi16(hb, 4), _mm256_set1_epi8(0x10)));
                hb = _mm256_srli_epi16(hb, 1);
            }
            b->sc[j] = _mm256_shuffle_epi8(sv, _mm256_set1_epi16((short)(0x8000 | j)));
        }
        const __m128i m8 = _mm_setr_epi32((int)mn_lo, (int)mn_hi, 0, 0);
        b->mn = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    } else if (kind == G_Q6_K) {
        const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
        const __m128i s8 = ld128(wb + 192);
        b->mn = _mm256_cvtepi8_epi16(s8);
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = ld256(wb + 64 * h), l1 = ld256(wb + 64 * h + 32);
            const __m256i hq = ld256(wb + 128 + 32 * h);
            /* levels + 32 in 0..63: low 4 bits from ql, 2 high bits from qh */
            b->lv[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                           _mm256_and_si256(_mm256_slli_epi16(hq, 4), m30));
            b->lv[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                               _mm256_and_si256(_mm256_slli_epi16(hq, 2), m30));
            b->lv[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                               _mm256_and_si256(hq, m30));
            b->lv[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                               _mm256_and_si256(_mm256_srli_epi16(hq, 2), m30));
        }
        kq_scales16(b->mn, b->sc);
    } else if (kind == G_Q2_K || kind == G_Q3_K) {
        /* chunk c = 4h + k: bits 2k, 2k+1 of qs[32h + l] (element 128h +
         * 32k + l); Q3_K: level + 4 in 0..7, bit c of hmask[l] set means
         * no -4 (bit 2 of the level) */
        const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
        const size_t qo = kind == G_Q2_K ? offsetof(block_q2_K, qs) : offsetof(block_q3_K, qs);
        const __m256i hm = kind == G_Q3_K ? ld256(wb) : _mm256_setzero_si256();
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            const __m256i q = ld256(wb + qo + 32 * h);
            _Pragma("GCC unroll 4")
            for (int k = 0; k < 4; k++) {
                const int c = 4 * h + k;
                b->lv[c] = _mm256_and_si256(k ? _mm256_srli_epi16(q, 2 * k) : q, m3);
                if (kind == G_Q3_K) /* 16-bit shifts by <= 5: bit c stays in its byte */
                    b->lv[c] = _mm256_or_si256(
                        b->lv[c],
                        _mm256_and_si256(c < 2    ? _mm256_slli_epi16(hm, 2 - c)
                                         : c == 2 ? hm : _mm256_srli_epi16(hm, c - 2), m4));
            }
        }
        if (kind == G_Q2_K) { /* scale in the low nibble, min in the high */
            const __m128i s8 = ld128(wb), n4 = _mm_set1_epi8(0x0F);
            b->mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), n4));
            kq_scales16(_mm256_cvtepu8_epi16(_mm_and_si128(s8, n4)), b->sc);
        } else {
            b->mn = _mm256_cvtepi8_epi16(q3_K_scales8(wb + offsetof(block_q3_K, scales)));
            kq_scales16(b->mn, b->sc);
        }
    } else { /* G_IQ4_XS: 8 groups of 32, 6-bit scales stored + 32 */
        const __m256i kv = _mm256_broadcastsi128_si256(ld128(rvl_kvalues_iq4nl));
        const unsigned sh = (uint16_t)ld16s(wb + offsetof(block_iq4_xs, scales_h));
        const uint8_t *sl = wb + offsetof(block_iq4_xs, scales_l);
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) {
            const int ls = ((sl[j / 2] >> (4 * (j % 2))) & 0xF) | ((sh >> (2 * j)) & 3) << 4;
            b->sg[j] = _mm256_shuffle_epi8(kv, nibbles32(wb + offsetof(block_iq4_xs, qs) + 16 * j));
            b->lv[j] = _mm256_abs_epi8(b->sg[j]);
            b->sc[j] = _mm256_set1_epi16((short)(ls - 32));
        }
        b->mn = _mm256_setzero_si256();
    }
}

/* One (row, token) block: 8 int32 lanes of the scaled level sums (Q3_K,
 * Q6_K: less the offset), and the min sums of Q2_K, Q4_K, Q5_K in *mins. */
AI __m256i kq_dot(int kind, const kq_block *b, const uint8_t *ab, __m256i *mins)
{
    __m256i is = _mm256_setzero_si256();
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; j++) {
        __m256i a = ld256(ab + 4 + 32 * j);
        if (kind == G_IQ4_XS)
            a = _mm256_sign_epi8(a, b->sg[j]);
        is = _mm256_add_epi32(is, _mm256_madd_epi16(_mm256_maddubs_epi16(b->lv[j], a), b->sc[j]));
    }
    if (kind == G_IQ4_XS)
        return is;
    const __m256i bs = _mm256_madd_epi16(b->mn, ld256(ab + 260));
    if (HAS_MIN(kind))
        *mins = bs;
    else
        is = _mm256_sub_epi32(is, _mm256_slli_epi32(bs, kind == G_Q6_K ? 5 : 2));
    return is;
}

/* every cache line of a block at p (Q2_K 84, Q3_K 110, Q4_K 144, IQ4_XS
 * 136, Q5_K 176, Q6_K 210 bytes) */
AI void kq_prefetch(int kind, const uint8_t *p)
{
    _mm_prefetch((const char *)p, _MM_HINT_T0);
    _mm_prefetch((const char *)p + 64, _MM_HINT_T0);
    if (kq_size(kind) > 128)
        _mm_prefetch((const char *)p + 128, _MM_HINT_T0);
    if (kind != G_Q4_K)
        _mm_prefetch((const char *)p + kq_size(kind) - 1, _MM_HINT_T0);
}

/* NR rows times the 8 tokens ap[0..7] (past the real tokens, ap repeats
 * the last one: tn says how many are real). */
AI void tile_kq(int kind, int NR, int64_t nb, const uint8_t *w, size_t w_stride,
                const uint8_t *const ap[8], int tn, float *y, size_t y_stride)
{
    const size_t wsz = kq_size(kind), doff = kq_doff(kind);
    __m256 acc[4];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < NR; r++)
        acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const size_t ao = (size_t)i * sizeof(block_q8_K);
        float adf[8];
        for (int k = 0; k < 8; k++)
            memcpy(&adf[k], ap[k] + ao, 4);
        const __m256 da = _mm256_loadu_ps(adf);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < NR; r++) {
            const uint8_t *wb = w + r * w_stride + (size_t)i * wsz;
            kq_prefetch(kind, wb + RVL_PREFETCH_AHEAD);
            kq_block b;
            kq_prep(kind, wb, &b);
            __m256i p[8], m[8];
            for (int k = 0; k < 8; k++)
                p[k] = kq_dot(kind, &b, ap[k] + ao, &m[k]);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum8(p)),
                                     _mm256_mul_ps(_mm256_set1_ps(f16at(wb + doff)), da), acc[r]);
            if (HAS_MIN(kind))
                acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(sum8(m)),
                                          _mm256_mul_ps(_mm256_set1_ps(f16at(wb + doff + 2)), da),
                                          acc[r]);
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

/* One token: rows wr[0..3] (rn real) in the lanes, as rows1(). */
AI void rows1_kq(int kind, int64_t nb, const uint8_t *const wr[4], size_t ahead, const uint8_t *a,
                 int rn, float *y)
{
    const size_t wsz = kq_size(kind), doff = kq_doff(kind);
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ab = a + (size_t)i * sizeof(block_q8_K);
        const uint8_t *wb[4];
        __m256i p[4], m[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++) {
            wb[k] = wr[k] + (size_t)i * wsz;
            kq_prefetch(kind, wb[k] + ahead);
            kq_block b;
            kq_prep(kind, wb[k], &b);
            p[k] = kq_dot(kind, &b, ab, &m[k]);
        }
        float adf;
        memcpy(&adf, ab, 4);
        const __m128 da = _mm_set1_ps(adf);
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(rsum4_32(p)), _mm_mul_ps(f16_rows(wb, doff), da), acc);
        if (HAS_MIN(kind))
            acc = _mm_fnmadd_ps(_mm_cvtepi32_ps(rsum4_32(m)), _mm_mul_ps(f16_rows(wb, doff + 2), da),
                                acc);
    }
    float l[4];
    _mm_storeu_ps(l, acc);
    for (int k = 0; k < rn; k++)
        y[k] = l[k];
}

#define T(R)                                                                       \
    case R:                                                                        \
        if (IS_KQ(kind))                                                           \
            tile_kq(kind, R, nb, wr, w_stride, ap, tn, yt, y_stride);              \
        else                                                                       \
            tile(kind, R, nb, wr, w_stride, ap, tn, yt, y_stride);                 \
        break;

AI void gemm(int kind, int64_t n, const void *vw, size_t w_stride, int nr, const void *vact,
             size_t act_stride, int nt, float *y, size_t y_stride)
{
    const int64_t nb = n / (IS_KQ(kind) ? 256 : 32);
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
            if (tn == 1) {
                const uint8_t *wr4[4];
                for (int k = 0; k < 4; k++)
                    wr4[k] = wr + (size_t)(k < rn ? k : rn - 1) * w_stride;
                if (IS_KQ(kind))
                    rows1_kq(kind, nb, wr4, 4 * w_stride, ap[0], rn, yt);
                else
                    rows1(kind, nb, wr4, 4 * w_stride, ap[0], rn, yt);
                continue;
            }
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

void gemm_q4_K_q8_K_avx2(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                         size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm(G_Q4_K, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q6_K_q8_K_avx2(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                         size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm(G_Q6_K, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q5_0_q8_0_avx2(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                         size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm(G_Q5_0, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q5_1_q8_1_avx2(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                         size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm(G_Q5_1, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_iq4_nl_q8_0_avx2(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                           size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm(G_IQ4_NL, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q5_K_q8_K_avx2(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                         size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm(G_Q5_K, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q2_K_q8_K_avx2(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                         size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm(G_Q2_K, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_q3_K_q8_K_avx2(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                         size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm(G_Q3_K, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

void gemm_iq4_xs_q8_K_avx2(int64_t n, const void *w, size_t w_stride, int nr, const void *act,
                           size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm(G_IQ4_XS, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);
}

RVL_X86_TARGET_END

#endif
