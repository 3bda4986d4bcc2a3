/*
 * gemm16_avx512.c - prompt processing and decode on the 16-row layout of
 * Q4_0, IQ4_NL, Q5_0 and Q8_0 (formats.h gemm16, kernels/ref/pack16.c),
 * AVX-512 VNNI.
 *
 * A 64-byte piece of a packed block holds 4 quant bytes of each of 16
 * rows (one int32 lane per row). Its levels, made unsigned (Q4_0 and Q5_0
 * as stored, IQ4_NL through a table + 128, Q8_0 + 128), go through
 * vpdpbusd with the token's 4 matching activation bytes broadcast to
 * every lane: 8 instructions give the block's 16 integer dot products,
 * each whole in its lane, started at -offset * sum(activation block) (the
 * sums that follow the activation row: rvl_act_sums), so each lane holds
 * exactly sum((level - offset) * a). Then per block and token one convert
 * and one FMA with d_w * d_a for the 16 rows: no shuffle, no reduction.
 * A block's levels are unpacked once for up to 16 tokens (K-quants 8);
 * decode takes four groups of 16 rows at a time (K-quants one).
 * The K-quants (tile_k4, tile_q6, tile_xs) do the same per group of 32
 * or 16 values, times the integer scales, with the mins or offsets from
 * the Q8_K block sums.
 *
 * Every (row, token) result is the same chain of float operations
 * (block order, FMA) whatever the number of tokens and how they are
 * tiled; the integer parts are exact, so splitting them into two chains
 * (for latency) changes nothing. Decode (nt = 1) therefore gives the
 * bits of prompt processing.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>
#include <string.h>

RVL_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")

#include "x86/common.h"


/* the 32-value formats, then the K-quants (K_IS_K) */
enum { K_Q4_0, K_IQ4_NL, K_Q5_0, K_Q8_0, K_Q4_1, K_Q5_1, K_MXFP4, K_Q4_K, K_Q5_K, K_Q6_K, K_IQ4_XS };

/* Q4_1, Q5_1: x = d * q + m, with Q8_1 activations (d, s = d * sum) */
#define HAS_M(kind) ((kind) == K_Q4_1 || (kind) == K_Q5_1)
#define IS_Q5(kind) ((kind) == K_Q5_0 || (kind) == K_Q5_1)

#define AI static inline __attribute__((always_inline))

AI size_t bsz(int kind)
{
    return kind == K_Q8_0   ? sizeof(block_q8_0)
           : kind == K_Q5_0 ? sizeof(block_q5_0)
           : kind == K_Q4_1 ? sizeof(block_q4_1)
           : kind == K_Q5_1 ? sizeof(block_q5_1)
           : kind == K_MXFP4 ? sizeof(block_mxfp4)
           : kind == K_Q4_K ? sizeof(block_q4_K)
           : kind == K_Q5_K ? sizeof(block_q5_K)
           : kind == K_Q6_K ? sizeof(block_q6_K)
           : kind == K_IQ4_XS ? sizeof(block_iq4_xs)
                            : sizeof(block_q4_0);
}

/* log2 of the offset of the unsigned levels: Q4_0 q (level q - 8), Q5_0
 * q (q - 16), IQ4_NL and MXFP4 their table + 128, Q8_0 q + 128 (Q4_1,
 * Q5_1: none) */
AI int off_shift(int kind)
{
    return kind == K_Q4_0 ? 3 : kind == K_Q5_0 ? 4 : 7;
}

/* The activation bytes level vector v multiplies: nibble formats, v = 2c
 * the low nibbles of piece c (elements 4c..4c+3), v = 2c + 1 its high
 * ones (16 + 4c..); Q8_0, piece v. */
AI size_t a_off(int kind, int v)
{
    return kind == K_Q8_0 ? (size_t)4 * v : (size_t)((v & 1) * 16 + 4 * (v >> 1));
}

/* One block of B bytes two blocks ahead (the K-quants' blocks of 16 rows
 * are 2-3 KiB: prefetch_block's fixed distance would be less than one) */
AI void prefetch_far(const uint8_t *blk, size_t B)
{
    for (size_t o = 0; o < B; o += 64)
        _mm_prefetch((const char *)blk + 2 * B + o, _MM_HINT_T0);
}

AI __m512i ld512(const void *p)
{
    return _mm512_loadu_si512(p);
}

AI int32_t ld32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

AI float f16at(const uint8_t *p)
{
    rvl_f16 h;
    memcpy(&h, p, sizeof h);
    return f16s(h);
}

AI float ldf(const uint8_t *p)
{
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* The 16 rows' MXFP4 scales rvl_e8m0_half(e) from their 16 exponent
 * bytes: 2^(e-128), as float bits (e - 1) << 23, or the subnormals
 * 0x00200000 << e for e = 0, 1. */
AI __m512 e8m0_half16(const uint8_t *e)
{
    const __m512i v = _mm512_cvtepu8_epi32(ld128(e));
    const __m512i nrm = _mm512_slli_epi32(_mm512_sub_epi32(v, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), v);
    const __mmask16 small = _mm512_cmplt_epu32_mask(v, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, nrm, sub));
}

/* The 8 vectors of unsigned levels of one packed block (16 rows). */
AI void levels(int kind, const uint8_t *blk, __m512i lv[8])
{
    const uint8_t *hq = blk + (HAS_M(kind) ? 64 : kind == K_MXFP4 ? 16 : 32); /* Q5: the qh */
    const uint8_t *q = hq + (IS_Q5(kind) ? 64 : 0);
    if (kind == K_Q8_0) {
        _Pragma("GCC unroll 8")
        for (int c = 0; c < 8; c++)
            lv[c] = _mm512_xor_si512(ld512(q + 64 * c), _mm512_set1_epi8((char)0x80));
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    _Pragma("GCC unroll 4")
    for (int c = 0; c < 4; c++) {
        const __m512i v = ld512(q + 64 * c);
        __m512i lo = _mm512_and_si512(v, m4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (kind == K_IQ4_NL || kind == K_MXFP4) {
            const __m512i lut = _mm512_broadcast_i32x4(_mm_xor_si128(
                ld128(kind == K_MXFP4 ? rvl_kvalues_mxfp4 : rvl_kvalues_iq4nl),
                _mm_set1_epi8((char)0x80)));
            lo = _mm512_shuffle_epi8(lut, lo);
            hi = _mm512_shuffle_epi8(lut, hi);
        }
        if (IS_Q5(kind)) {
            /* element e's bit 4 is bit e of the row's qh: elements 4c..4c+3
             * are bits 4(c&1)..+3 of qh byte c>>1, 16+4c.. of byte 2+(c>>1);
             * that byte copied to the lane's 4 bytes, byte k tests its bit */
            const __m512i qh = ld512(hq);
            const __m512i base = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0);
            const __m512i bits = _mm512_set1_epi32((int)(0x08040201u << (4 * (c & 1))));
            const __m512i b16 = _mm512_set1_epi8(16);
            const __m512i bl = _mm512_shuffle_epi8(
                qh, _mm512_add_epi8(base, _mm512_set1_epi8((char)(c >> 1))));
            const __m512i bh = _mm512_shuffle_epi8(
                qh, _mm512_add_epi8(base, _mm512_set1_epi8((char)(2 + (c >> 1)))));
            lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(bl, bits), lo, b16);
            hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(bh, bits), hi, b16);
        }
        lv[2 * c] = lo;
        lv[2 * c + 1] = hi;
    }
}

/* G consecutive groups (gsz bytes apart) times T tokens ap[0..T-1]: nb
 * blocks, results to y[t * y_stride + 16g + r]. soff: the offset of the
 * block sums in an activation row (rvl_act_sums_offset), the scales
 * follow them. */
AI void tile(int kind, int G, int T, int64_t nb, const uint8_t *w, size_t gsz,
             const uint8_t *const *ap, size_t soff, float *y, size_t y_stride)
{
    const size_t B = 16 * bsz(kind);
    const int sh = off_shift(kind);
    __m512 acc[4][16];
    _Pragma("GCC unroll 4")
    for (int g = 0; g < G; g++)
        _Pragma("GCC unroll 16")
        for (int t = 0; t < T; t++)
            acc[g][t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        _Pragma("GCC unroll 4")
        for (int g = 0; g < G; g++) {
            const uint8_t *blk = w + (size_t)g * gsz + (size_t)i * B;
            if (T == 1)
                prefetch_block(blk, B);
            __m512i lv[8];
            levels(kind, blk, lv);
            const __m512 dw = kind == K_MXFP4 ? e8m0_half16(blk) : _mm512_cvtph_ps(ld256(blk));
            const __m512 mw = HAS_M(kind) ? _mm512_cvtph_ps(ld256(blk + 32)) : dw;
            _Pragma("GCC unroll 16")
            for (int t = 0; t < T; t++) {
                const size_t asz = HAS_M(kind) ? sizeof(block_q8_1) : sizeof(block_q8_0);
                const uint8_t *ab = ap[t] + (size_t)i * asz + (HAS_M(kind) ? 4 : 2);
                __m512i ia = _mm512_setzero_si512();
                if (!HAS_M(kind))
                    ia = _mm512_set1_epi32(ld32(ap[t] + soff + 4 * (size_t)i) * -(1 << sh));
                /* two integer chains (exact sums): half the latency */
                __m512i ib = _mm512_setzero_si512();
                _Pragma("GCC unroll 8")
                for (int v = 0; v < 8; v++) {
                    const __m512i a = _mm512_set1_epi32(ld32(ab + a_off(kind, v)));
                    if (v & 1)
                        ib = _mm512_dpbusd_epi32(ib, lv[v], a);
                    else
                        ia = _mm512_dpbusd_epi32(ia, lv[v], a);
                }
                ia = _mm512_add_epi32(ia, ib);
                if (HAS_M(kind)) { /* d_a and s_a in the Q8_1 block */
                    const uint8_t *a1 = ap[t] + (size_t)i * asz;
                    const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(f16at(a1)));
                    acc[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), d, acc[g][t]);
                    acc[g][t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(f16at(a1 + 2)), acc[g][t]);
                    continue;
                }
                const float da = ldf(ap[t] + soff + 4 * ((size_t)nb + (size_t)i));
                const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(da));
                acc[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), d, acc[g][t]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int g = 0; g < G; g++)
        _Pragma("GCC unroll 16")
        for (int t = 0; t < T; t++)
            _mm512_storeu_ps(y + (size_t)t * y_stride + 16 * g, acc[g][t]);
}

/* ---- Q4_K x Q8_K ------------------------------------------------------
 * Per block of 256 and (row, token), exactly the integers of the
 * reference's vec_dot: S1 = sum over the 8 groups j of sc_j * (the
 * group's 32 level x activation products), S2 = sum of m_j * (the group's
 * activation sum, from the Q8_K bsums); then, in block order,
 * acc = fma(S1, d * d_a, acc) and acc = fnmadd(S2, dmin * d_a, acc).
 * A group's 8 vpdpbusd hold each row's sum in its lane; one vpmulld by
 * the row's scale; the mins go through vpdpwssd as int16 pairs. */

/* Row r's scale and min of group j (0..7) in lane r, from the 3 pieces
 * of scale bytes (rvl_k4_scale_min: j < 4, bytes j and j + 4 & 63; then
 * the low/high nibble of byte j + 4 and the top 2 bits of j - 4 / j). */
AI void k4_scales(const __m512i p[3], __m512i sc[8], __m512i mn[8])
{
    const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3);
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++) {
        const __m512i b0 = _mm512_srli_epi32(p[0], 8 * j), b1 = _mm512_srli_epi32(p[1], 8 * j);
        const __m512i b2 = _mm512_srli_epi32(p[2], 8 * j);
        sc[j] = _mm512_and_si512(b0, m6);
        mn[j] = _mm512_and_si512(b1, m6);
        sc[j + 4] = _mm512_or_si512(_mm512_and_si512(b2, m4),
                                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(b0, 6), m2), 4));
        mn[j + 4] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(b2, 4), m4),
                                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(b1, 6), m2), 4));
    }
}

/* q5: Q5_K, whose 8 pieces of qh follow the scales: bit 2k of a qh byte
 * is bit 4 of its element in group 2k, bit 2k + 1 in group 2k + 1 */
AI void tile_k4(int q5, int T, int64_t nb, const uint8_t *w, const uint8_t *const *ap, float *y,
                size_t y_stride)
{
    const size_t B = 16 * (q5 ? sizeof(block_q5_K) : sizeof(block_q4_K)), A = sizeof(block_q8_K);
    const size_t qo = q5 ? 256 + 512 : 256;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[16];
    _Pragma("GCC unroll 16")
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        {
            const uint8_t *blk = w + (size_t)i * B;
            if (T == 1)
                prefetch_far(blk, B);
            const __m512i p[3] = {ld512(blk + 64), ld512(blk + 128), ld512(blk + 192)};
            __m512i sc[8], mn[8];
            k4_scales(p, sc, mn);
            /* the mins as int16 pairs (m_2i, m_2i+1) */
            __m512i mp[4];
            _Pragma("GCC unroll 4")
            for (int k = 0; k < 4; k++)
                mp[k] = _mm512_or_si512(mn[2 * k], _mm512_slli_epi32(mn[2 * k + 1], 16));
            __m512i s1[16];
            _Pragma("GCC unroll 16")
            for (int t = 0; t < T; t++)
                s1[t] = _mm512_setzero_si512();
            /* group pair k: the low nibbles of qs[32k..32k+31] are group
             * 2k (elements 64k..64k+31), the high ones group 2k + 1 */
            _Pragma("GCC unroll 4")
            for (int k = 0; k < 4; k++) {
                __m512i lo[8], hi[8];
                _Pragma("GCC unroll 8")
                for (int c = 0; c < 8; c++) {
                    const __m512i v = ld512(blk + qo + 64 * (8 * k + c));
                    lo[c] = _mm512_and_si512(v, m4);
                    hi[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                    if (q5) { /* bits 2k, 2k + 1 moved to bit 4 */
                        const __m512i h = ld512(blk + 256 + 64 * c), b4 = _mm512_set1_epi8(0x10);
                        const __m512i hl = 4 - 2 * k >= 0 ? _mm512_slli_epi16(h, 4 - 2 * k)
                                                          : _mm512_srli_epi16(h, 2 * k - 4);
                        const __m512i hh = 3 - 2 * k >= 0 ? _mm512_slli_epi16(h, 3 - 2 * k)
                                                          : _mm512_srli_epi16(h, 2 * k - 3);
                        lo[c] = _mm512_ternarylogic_epi32(lo[c], hl, b4, 0xF8);
                        hi[c] = _mm512_ternarylogic_epi32(hi[c], hh, b4, 0xF8);
                    }
                }
                const __m512i sl = k == 0 ? sc[0] : k == 1 ? sc[2] : k == 2 ? sc[4] : sc[6];
                const __m512i sh = k == 0 ? sc[1] : k == 1 ? sc[3] : k == 2 ? sc[5] : sc[7];
                _Pragma("GCC unroll 16")
                for (int t = 0; t < T; t++) {
                    const uint8_t *q = ap[t] + (size_t)i * A + 4 + 64 * (size_t)k;
                    __m512i ia = _mm512_setzero_si512(), ib = _mm512_setzero_si512();
                    _Pragma("GCC unroll 8")
                    for (int c = 0; c < 8; c++) {
                        ia = _mm512_dpbusd_epi32(ia, lo[c], _mm512_set1_epi32(ld32(q + 4 * c)));
                        ib = _mm512_dpbusd_epi32(ib, hi[c], _mm512_set1_epi32(ld32(q + 32 + 4 * c)));
                    }
                    s1[t] = _mm512_add_epi32(s1[t], _mm512_add_epi32(_mm512_mullo_epi32(ia, sl),
                                                                     _mm512_mullo_epi32(ib, sh)));
                }
            }
            const __m512 dw = _mm512_cvtph_ps(ld256(blk)), dmw = _mm512_cvtph_ps(ld256(blk + 32));
            _Pragma("GCC unroll 16")
            for (int t = 0; t < T; t++) {
                const uint8_t *ab = ap[t] + (size_t)i * A;
                const uint8_t *bs = ab + 4 + 256; /* bsums: int16 x 16 */
                __m512i s2 = _mm512_setzero_si512();
                _Pragma("GCC unroll 4")
                for (int k = 0; k < 4; k++) {
                    int16_t b[4];
                    memcpy(b, bs + 8 * k, 8);
                    const uint32_t pr = (uint16_t)(int16_t)(b[0] + b[1]) |
                                        (uint32_t)(uint16_t)(int16_t)(b[2] + b[3]) << 16;
                    s2 = _mm512_dpwssd_epi32(s2, mp[k], _mm512_set1_epi32((int)pr));
                }
                const __m512 da = _mm512_set1_ps(ldf(ab));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1[t]), _mm512_mul_ps(dw, da), acc[t]);
                acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(s2), _mm512_mul_ps(dmw, da), acc[t]);
            }
        }
    }
    _Pragma("GCC unroll 16")
    for (int t = 0; t < T; t++)
        _mm512_storeu_ps(y + (size_t)t * y_stride, acc[t]);
}

/* ---- IQ4_XS x Q8_K ----------------------------------------------------
 * Per block of 256 and (row, token), the reference's integers: S = sum
 * over the 8 groups of 32 of (ls - 32) * (the levels kvalues[q] x
 * activation), the levels through vpdpbusd as kvalues[q] + 128 (IQ4_NL's
 * table), so S = sum sc * dp - 128 * sum sc * asum (asum from the Q8_K
 * bsums, through vpdpwssd as int16 pairs); acc = fma(S, d * d_a, acc). */
AI void tile_xs(int T, int64_t nb, const uint8_t *w, const uint8_t *const *ap, float *y,
                size_t y_stride)
{
    const size_t B = 16 * sizeof(block_iq4_xs), A = sizeof(block_q8_K);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i lut = _mm512_broadcast_i32x4(
        _mm_xor_si128(ld128(rvl_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    __m512 acc[16];
    _Pragma("GCC unroll 16")
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = w + (size_t)i * B;
        if (T == 1)
            prefetch_far(blk, B);
        /* the 8 scales - 32 of the 16 rows, and as int16 pairs */
        const __m512i shv = _mm512_cvtepu16_epi32(ld256(blk + 32)), slv = ld512(blk + 64);
        __m512i sc[8], sp[4];
        _Pragma("GCC unroll 8")
        for (int ib = 0; ib < 8; ib++) {
            const __m512i l = _mm512_and_si512(_mm512_srli_epi32(slv, 8 * (ib >> 1) + 4 * (ib & 1)),
                                               _mm512_set1_epi32(15));
            const __m512i h = _mm512_and_si512(_mm512_srli_epi32(shv, 2 * ib), _mm512_set1_epi32(3));
            sc[ib] = _mm512_sub_epi32(_mm512_or_si512(l, _mm512_slli_epi32(h, 4)),
                                      _mm512_set1_epi32(32));
        }
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++)
            sp[k] = _mm512_or_si512(_mm512_and_si512(sc[2 * k], _mm512_set1_epi32(0xFFFF)),
                                    _mm512_slli_epi32(sc[2 * k + 1], 16));
        __m512i s1[16];
        _Pragma("GCC unroll 16")
        for (int t = 0; t < T; t++)
            s1[t] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8")
        for (int ib = 0; ib < 8; ib++) {
            __m512i lv[8];
            _Pragma("GCC unroll 4")
            for (int c = 0; c < 4; c++) {
                const __m512i v = ld512(blk + 128 + 64 * (4 * ib + c));
                lv[2 * c] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
                lv[2 * c + 1] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
            }
            _Pragma("GCC unroll 16")
            for (int t = 0; t < T; t++) {
                const uint8_t *q = ap[t] + (size_t)i * A + 4 + 32 * (size_t)ib;
                __m512i ia = _mm512_setzero_si512(), ib2 = _mm512_setzero_si512();
                _Pragma("GCC unroll 4")
                for (int c = 0; c < 4; c++) {
                    ia = _mm512_dpbusd_epi32(ia, lv[2 * c], _mm512_set1_epi32(ld32(q + 4 * c)));
                    ib2 = _mm512_dpbusd_epi32(ib2, lv[2 * c + 1],
                                              _mm512_set1_epi32(ld32(q + 16 + 4 * c)));
                }
                s1[t] = _mm512_add_epi32(s1[t], _mm512_mullo_epi32(_mm512_add_epi32(ia, ib2), sc[ib]));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(ld256(blk));
        _Pragma("GCC unroll 16")
        for (int t = 0; t < T; t++) {
            const uint8_t *ab = ap[t] + (size_t)i * A;
            __m512i s2 = _mm512_setzero_si512();
            _Pragma("GCC unroll 4")
            for (int k = 0; k < 4; k++) {
                int16_t b[4];
                memcpy(b, ab + 4 + 256 + 8 * k, 8);
                const uint32_t pr = (uint16_t)(int16_t)(b[0] + b[1]) |
                                    (uint32_t)(uint16_t)(int16_t)(b[2] + b[3]) << 16;
                s2 = _mm512_dpwssd_epi32(s2, sp[k], _mm512_set1_epi32((int)pr));
            }
            const __m512i tot = _mm512_sub_epi32(s1[t], _mm512_slli_epi32(s2, 7));
            const __m512 da = _mm512_set1_ps(ldf(ab));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(dw, da), acc[t]);
        }
    }
    _Pragma("GCC unroll 16")
    for (int t = 0; t < T; t++)
        _mm512_storeu_ps(y + (size_t)t * y_stride, acc[t]);
}

/* ---- Q6_K x Q8_K ------------------------------------------------------
 * Per block of 256 and (row, token), the reference's integers: S = sum
 * over the 16 groups s of 16 values of sc_s * (levels 0..63 x activation)
 * - 32 * sum of sc_s * bsum_s; then acc = fma(S, d * d_a, acc). Half h,
 * qh piece j (bytes 4j..4j+3 of qh + 32h, elements l = 4j..4j+3) holds
 * the high bits of 4 level vectors: ql piece 16h + j's low nibbles
 * (elements 128h + l, qh bits 0-1), ql piece 16h + 8 + j's low ones
 * (+ 32, bits 2-3), the first's high ones (+ 64, bits 4-5), the second's
 * (+ 96, bits 6-7); vector m of j belongs to group 8h + 2m + j / 4. */
/* Scale k (0..15) of the 16 rows, sign-extended, from the 4 pieces of
 * scale bytes; and scales 2k, 2k + 1 as an int16 pair. */
AI __m512i q6_scale(const __m512i pc[4], int k)
{
    return _mm512_srai_epi32(_mm512_slli_epi32(pc[k >> 2], 24 - 8 * (k & 3)), 24);
}

AI __m512i q6_pair(const __m512i pc[4], int k)
{
    return _mm512_or_si512(_mm512_and_si512(q6_scale(pc, 2 * k), _mm512_set1_epi32(0xFFFF)),
                           _mm512_slli_epi32(q6_scale(pc, 2 * k + 1), 16));
}

AI void tile_q6(int T, int64_t nb, const uint8_t *w, const uint8_t *const *ap, float *y,
                size_t y_stride)
{
    const size_t B = 16 * sizeof(block_q6_K), A = sizeof(block_q8_K);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512 acc[16];
    _Pragma("GCC unroll 16")
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        {
            const uint8_t *blk = w + (size_t)i * B;
            if (T == 1)
                prefetch_far(blk, B);
            /* the 16 signed scales, lane r = row r's, and as int16 pairs:
             * for one or two tokens made where they are used (kept, they
             * would not fit in the registers beside the levels) */
            const bool lazy = T <= 2;
            __m512i sc[16], sp[8], pc[4];
            _Pragma("GCC unroll 4")
            for (int p = 0; p < 4; p++)
                pc[p] = ld512(blk + 32 + 64 * p);
            _Pragma("GCC unroll 16")
            for (int k = 0; k < 16 && !lazy; k++)
                sc[k] = q6_scale(pc, k);
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8 && !lazy; k++)
                sp[k] = q6_pair(pc, k);
            __m512i s1[16];
            _Pragma("GCC unroll 16")
            for (int t = 0; t < T; t++)
                s1[t] = _mm512_setzero_si512();
            _Pragma("GCC unroll 4")
            for (int hj = 0; hj < 4; hj++) {
                const int h = hj >> 1, jj = hj & 1;
                __m512i lv[4][4]; /* [m][j - 4jj] */
                _Pragma("GCC unroll 4")
                for (int j = 0; j < 4; j++) {
                    const int jg = 4 * jj + j;
                    const __m512i qh = ld512(blk + 32 + 64 * (4 + 32 + 8 * h + jg));
                    const __m512i a0 = ld512(blk + 32 + 64 * (4 + 16 * h + jg));
                    const __m512i a1 = ld512(blk + 32 + 64 * (4 + 16 * h + 8 + jg));
                    lv[0][j] = _mm512_or_si512(_mm512_and_si512(a0, m4),
                                               _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30));
                    lv[1][j] = _mm512_or_si512(_mm512_and_si512(a1, m4),
                                               _mm512_and_si512(_mm512_slli_epi16(qh, 2), m30));
                    lv[2][j] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a0, 4), m4),
                                               _mm512_and_si512(qh, m30));
                    lv[3][j] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a1, 4), m4),
                                               _mm512_and_si512(_mm512_srli_epi16(qh, 2), m30));
                }
                _Pragma("GCC unroll 16")
                for (int t = 0; t < T; t++) {
                    const uint8_t *q = ap[t] + (size_t)i * A + 4 + 128 * (size_t)h + 16 * (size_t)jj;
                    _Pragma("GCC unroll 4")
                    for (int m = 0; m < 4; m++) {
                        __m512i is = _mm512_setzero_si512();
                        _Pragma("GCC unroll 4")
                        for (int j = 0; j < 4; j++)
                            is = _mm512_dpbusd_epi32(is, lv[m][j],
                                                     _mm512_set1_epi32(ld32(q + 32 * m + 4 * j)));
                        const int s = 8 * h + 2 * m + jj;
                        s1[t] = _mm512_add_epi32(
                            s1[t], _mm512_mullo_epi32(is, lazy ? q6_scale(pc, s) : sc[s]));
                    }
                }
            }
            const __m512 dw = _mm512_cvtph_ps(ld256(blk));
            _Pragma("GCC unroll 16")
            for (int t = 0; t < T; t++) {
                const uint8_t *ab = ap[t] + (size_t)i * A;
                __m512i s2 = _mm512_setzero_si512();
                _Pragma("GCC unroll 8")
                for (int k = 0; k < 8; k++) /* bsums 2k, 2k+1 as one int16 pair */
                    s2 = _mm512_dpwssd_epi32(s2, lazy ? q6_pair(pc, k) : sp[k],
                                             _mm512_set1_epi32(ld32(ab + 4 + 256 + 4 * k)));
                const __m512i tot = _mm512_sub_epi32(s1[t], _mm512_slli_epi32(s2, 5));
                const __m512 da = _mm512_set1_ps(ldf(ab));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(dw, da), acc[t]);
            }
        }
    }
    _Pragma("GCC unroll 16")
    for (int t = 0; t < T; t++)
        _mm512_storeu_ps(y + (size_t)t * y_stride, acc[t]);
}

/* ---- the driver -------------------------------------------------------- */

#define K_IS_K(kind) ((kind) >= K_Q4_K)

AI void tile_any(int kind, int G, int T, int64_t nb, const uint8_t *w, size_t gsz,
                 const uint8_t *const *ap, size_t soff, float *y, size_t y_stride)
{
    /* the K-quants take one group at a time (see drive) */
    if (kind == K_Q4_K || kind == K_Q5_K)
        tile_k4(kind == K_Q5_K, T, nb, w, ap, y, y_stride);
    else if (kind == K_Q6_K)
        tile_q6(T, nb, w, ap, y, y_stride);
    else if (kind == K_IQ4_XS)
        tile_xs(T, nb, w, ap, y, y_stride); /* G = 1 */
    else
        tile(kind, G, T, nb, w, gsz, ap, soff, y, y_stride);
}

/* ng groups times nt tokens: decode (nt = 1) four groups at a time for
 * the 32-value formats (more loads in flight: SmolLM2 Q4_0 decodes 4%
 * faster than with two; the K-quants' unpacking fills the registers with
 * one);
 * prompts in tiles of up to 16 (K-quants 8) tokens per group */
AI void drive(int kind, int64_t n, const void *w, int64_t ng, const void *act, size_t act_stride,
              int nt, float *y, size_t y_stride)
{
    const int64_t nb = n / (K_IS_K(kind) ? 256 : 32);
    const size_t gsz = (size_t)nb * 16 * bsz(kind);
    const size_t soff = rvl_act_sums_offset(n);
    const uint8_t *a = act, *wg = w;
    if (nt == 1) {
        const uint8_t *ap[1] = {a};
        int64_t g = 0;
        for (; !K_IS_K(kind) && g + 4 <= ng; g += 4)
            tile_any(kind, 4, 1, nb, wg + (size_t)g * gsz, gsz, ap, soff, y + 16 * g, 0);
        for (; !K_IS_K(kind) && g + 2 <= ng; g += 2)
            tile_any(kind, 2, 1, nb, wg + (size_t)g * gsz, gsz, ap, soff, y + 16 * g, 0);
        for (; g < ng; g++)
            tile_any(kind, 1, 1, nb, wg + (size_t)g * gsz, gsz, ap, soff, y + 16 * g, 0);
        return;
    }
    for (int64_t g = 0; g < ng; g++)
        for (int t0 = 0; t0 < nt;) {
            const uint8_t *ap[16];
            const int rem = nt - t0;
            const int T = rem >= 16 && !K_IS_K(kind) ? 16 : rem >= 8 ? 8 : rem >= 4 ? 4
                          : rem >= 2 ? 2 : 1;
            for (int t = 0; t < T; t++)
                ap[t] = a + (size_t)(t0 + t) * act_stride;
            const uint8_t *wt = wg + (size_t)g * gsz;
            float *yt = y + (size_t)t0 * y_stride + 16 * g;
            switch (T) {
            case 16: tile_any(kind, 1, 16, nb, wt, gsz, ap, soff, yt, y_stride); break;
            case 8: tile_any(kind, 1, 8, nb, wt, gsz, ap, soff, yt, y_stride); break;
            case 4: tile_any(kind, 1, 4, nb, wt, gsz, ap, soff, yt, y_stride); break;
            case 2: tile_any(kind, 1, 2, nb, wt, gsz, ap, soff, yt, y_stride); break;
            default: tile_any(kind, 1, 1, nb, wt, gsz, ap, soff, yt, y_stride); break;
            }
            t0 += T;
        }
}

#define GEMM16(name, kind)                                                                   \
    void gemm16_##name##_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,   \
                                    size_t act_stride, int nt, float *y, size_t y_stride)    \
    {                                                                                        \
        drive(kind, n, w, ng, act, act_stride, nt, y, y_stride);                             \
    }

GEMM16(q4_0_q8_0, K_Q4_0)
GEMM16(iq4_nl_q8_0, K_IQ4_NL)
GEMM16(q5_0_q8_0, K_Q5_0)
GEMM16(q8_0_q8_0, K_Q8_0)
GEMM16(mxfp4_q8_0, K_MXFP4)
GEMM16(q4_1_q8_1, K_Q4_1)
GEMM16(q5_1_q8_1, K_Q5_1)
GEMM16(q4_K_q8_K, K_Q4_K)
GEMM16(q5_K_q8_K, K_Q5_K)
GEMM16(q6_K_q8_K, K_Q6_K)
GEMM16(iq4_xs_q8_K, K_IQ4_XS)

RVL_X86_TARGET_END

#endif
