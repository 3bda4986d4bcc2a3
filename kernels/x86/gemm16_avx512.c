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
 * A block's levels are unpacked once for up to 16 tokens.
 *
 * Every (row, token) result is the same chain of float operations
 * (block order, FMA) whatever the number of tokens and how they are
 * tiled; the integer parts are exact, so splitting them into two chains
 * (decode, for latency) changes nothing. Decode (nt = 1) therefore gives
 * the bits of prompt processing.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>
#include <string.h>

RVL_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")

#include "x86/common.h"

enum { K_Q4_0, K_IQ4_NL, K_Q5_0, K_Q8_0 };

#define AI static inline __attribute__((always_inline))

AI size_t bsz(int kind)
{
    return kind == K_Q8_0 ? sizeof(block_q8_0) : kind == K_Q5_0 ? sizeof(block_q5_0)
                                                                : sizeof(block_q4_0);
}

/* log2 of the offset of the unsigned levels: Q4_0 q (level q - 8), Q5_0
 * q (q - 16), IQ4_NL kvalues[q] + 128, Q8_0 q + 128 */
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

AI float ldf(const uint8_t *p)
{
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* The 8 vectors of unsigned levels of one packed block (16 rows). */
AI void levels(int kind, const uint8_t *blk, __m512i lv[8])
{
    const uint8_t *q = blk + 32 + (kind == K_Q5_0 ? 64 : 0);
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
        if (kind == K_IQ4_NL) {
            const __m512i lut = _mm512_broadcast_i32x4(
                _mm_xor_si128(ld128(rvl_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
            lo = _mm512_shuffle_epi8(lut, lo);
            hi = _mm512_shuffle_epi8(lut, hi);
        }
        if (kind == K_Q5_0) {
            /* element e's bit 4 is bit e of the row's qh: elements 4c..4c+3
             * are bits 4(c&1)..+3 of qh byte c>>1, 16+4c.. of byte 2+(c>>1);
             * that byte copied to the lane's 4 bytes, byte k tests its bit */
            const __m512i qh = ld512(blk + 32);
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
    /* one token: two integer chains per block (exact sums), for latency */
    const bool split = G * T < 4;
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
            const __m512 dw = _mm512_cvtph_ps(ld256(blk));
            _Pragma("GCC unroll 16")
            for (int t = 0; t < T; t++) {
                const uint8_t *ab = ap[t] + (size_t)i * sizeof(block_q8_0) + 2;
                const int32_t s = ld32(ap[t] + soff + 4 * (size_t)i);
                __m512i ia = _mm512_set1_epi32(s * -(1 << sh));
                __m512i ib = _mm512_setzero_si512();
                _Pragma("GCC unroll 8")
                for (int v = 0; v < 8; v++) {
                    const __m512i a = _mm512_set1_epi32(ld32(ab + a_off(kind, v)));
                    if (split && (v & 1))
                        ib = _mm512_dpbusd_epi32(ib, lv[v], a);
                    else
                        ia = _mm512_dpbusd_epi32(ia, lv[v], a);
                }
                if (split)
                    ia = _mm512_add_epi32(ia, ib);
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

AI void gemm16(int kind, int64_t n, const void *w, int64_t ng, const void *act, size_t act_stride,
               int nt, float *y, size_t y_stride)
{
    const int64_t nb = n / 32;
    const size_t gsz = (size_t)nb * 16 * bsz(kind);
    const size_t soff = rvl_act_sums_offset(n);
    const uint8_t *a = act;
    if (nt == 1) {
        const uint8_t *ap[1] = {a};
        int64_t g = 0;
        for (; g + 2 <= ng; g += 2)
            tile(kind, 2, 1, nb, (const uint8_t *)w + (size_t)g * gsz, gsz, ap, soff, y + 16 * g, 0);
        if (g < ng)
            tile(kind, 1, 1, nb, (const uint8_t *)w + (size_t)g * gsz, gsz, ap, soff, y + 16 * g, 0);
        return;
    }
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *wg = (const uint8_t *)w + (size_t)g * gsz;
        for (int t0 = 0; t0 < nt;) {
            const uint8_t *ap[16];
            const int rem = nt - t0;
            const int T = rem >= 16 ? 16 : rem >= 8 ? 8 : rem >= 4 ? 4 : rem >= 2 ? 2 : 1;
            for (int t = 0; t < T; t++)
                ap[t] = a + (size_t)(t0 + t) * act_stride;
            float *yt = y + (size_t)t0 * y_stride + 16 * g;
            switch (T) {
            case 16: tile(kind, 1, 16, nb, wg, gsz, ap, soff, yt, y_stride); break;
            case 8: tile(kind, 1, 8, nb, wg, gsz, ap, soff, yt, y_stride); break;
            case 4: tile(kind, 1, 4, nb, wg, gsz, ap, soff, yt, y_stride); break;
            case 2: tile(kind, 1, 2, nb, wg, gsz, ap, soff, yt, y_stride); break;
            default: tile(kind, 1, 1, nb, wg, gsz, ap, soff, yt, y_stride); break;
            }
            t0 += T;
        }
    }
}

void gemm16_q4_0_q8_0_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                 size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm16(K_Q4_0, n, w, ng, act, act_stride, nt, y, y_stride);
}

void gemm16_iq4_nl_q8_0_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                   size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm16(K_IQ4_NL, n, w, ng, act, act_stride, nt, y, y_stride);
}

void gemm16_q5_0_q8_0_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                 size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm16(K_Q5_0, n, w, ng, act, act_stride, nt, y, y_stride);
}

void gemm16_q8_0_q8_0_avx512vnni(int64_t n, const void *w, int64_t ng, const void *act,
                                 size_t act_stride, int nt, float *y, size_t y_stride)
{
    gemm16(K_Q8_0, n, w, ng, act, act_stride, nt, y, y_stride);
}

RVL_X86_TARGET_END

#endif
