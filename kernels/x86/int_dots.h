/*
 * int_dots.h - the integer dot products of the quantized formats with
 * their activation formats, written once and compiled twice: avx2.c
 * includes it with the AVX2 primitives, avx512.c with the AVX-512 VNNI
 * ones (vpdpbusd / vpdpwssd on 256-bit vectors). The includer defines
 *
 *   RVL_ISA_SFX                 the name suffix (avx2, avx512vnni)
 *   __m256i dot_u8s8(u, s)      8 x int32: sums of 4 products u8*s8
 *   __m256i acc_madd16(acc, p, c)  acc + pairwise sums of int16 p*c
 *
 * and has switched its target on. Structure shared by every kernel: the
 * exact integer sum of a block (or a K-quant group, times its integer
 * scale) lands in 8 int32 lanes; the lanes are converted to float and
 * accumulated with FMA times the block's float scale, and summed at the
 * end. ref does the same integer sums but adds one float per block in
 * order, so the results differ by float rounding only (dispatch.h).
 *
 * Activation quants are in -127..127 (what the quantizers produce), weight
 * quants anything their format allows: vpmaddubsw's int16 pair sums stay
 * within 2 * 128 * 127 < 32767 (Q8_0's -128 becomes 128 after the sign
 * trick for signed weights; unsigned K-quant levels are at most 63), so
 * they never saturate.
 */

#define RVL_CAT_(a, b) a##_##b
#define RVL_CAT(a, b) RVL_CAT_(a, b)
#define KN(name) RVL_CAT(name, RVL_ISA_SFX)

/* Sum of products of two signed int8 vectors, as 8 x int32: move x's
 * sign onto y so vpmaddubsw (unsigned x signed) applies. */
static inline __m256i dot_s8s8(__m256i x, __m256i y)
{
    return dot_u8s8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

static inline __m256 fma_i32(__m256i isum, float d, __m256 acc)
{
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d), acc);
}

/* The two f16 fields at p (d and m, or d and s) as floats in lanes 0, 1
 * (converted straight from memory: the 8 bytes read are within every
 * block this is used on, the 18 bytes of Q4_0 the shortest). */
static inline __m128 f16x2(const void *p)
{
    return _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)p));
}

/* acc + isum * (lane 0 of d) */
static inline __m256 fma_i32x(__m256i isum, __m128 d, __m256 acc)
{
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_broadcastss_ps(d), acc);
}

/* The product of the leading f16 scales of a weight and an activation
 * block, in lane 0 (both blocks are at least 4 bytes long). */
#define DD(wb, ab) _mm_mul_ss(f16x2(&(wb)), f16x2(&(ab)))

/* Two accumulators, blocks in pairs: BLK(i, acc) returns acc plus block
 * i's term. One prefetch per pair of weight blocks w[] (a pair is 36 to
 * 68 bytes) keeps the weight stream ahead. */
#define LOOP2(nb, BLK)                                                             \
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                 \
    int64_t i = 0;                                                                 \
    for (; i + 1 < (nb); i += 2) {                                                 \
        prefetch_ahead(&w[i]);                                                     \
        acc0 = BLK(i, acc0);                                                       \
        acc1 = BLK(i + 1, acc1);                                                   \
    }                                                                              \
    if (i < (nb))                                                                  \
        acc0 = BLK(i, acc0);

/* ======================================================================
 * 32-value blocks against Q8_0 / Q8_1
 * ====================================================================== */

float KN(vec_dot_q4_0_q8_0)(int64_t n, const void *vw, const void *va)
{
    const block_q4_0 *w = vw;
    const block_q8_0 *a = va;
    const __m256i eight = _mm256_set1_epi8(8);
#define BLK(i, acc)                                                                \
    fma_i32x(dot_s8s8(_mm256_sub_epi8(nibbles32(w[i].qs), eight), ld256(a[i].qs)), \
            DD(w[i], a[i]), acc)
    LOOP2(n / 32, BLK)
#undef BLK
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

float KN(vec_dot_q4_1_q8_1)(int64_t n, const void *vw, const void *va)
{
    const block_q4_1 *w = vw;
    const block_q8_1 *a = va;
    __m128 summ = _mm_setzero_ps();
    /* lane 0: d*a.d scales the block's integer sum; lane 1: m*a.s */
    __m128 dm;
#define BLK(i, acc)                                                                \
    (dm = _mm_mul_ps(f16x2(&w[i]), f16x2(&a[i])), summ = _mm_add_ps(summ, dm),     \
     fma_i32x(dot_u8s8(nibbles32(w[i].qs), ld256(a[i].qs)), dm, acc))
    LOOP2(n / 32, BLK)
#undef BLK
    return hsum_ps(_mm256_add_ps(acc0, acc1)) + _mm_cvtss_f32(_mm_movehdup_ps(summ));
}

/* Q5: the nibble plus bit j of qh as bit 4; Q5_0 stores q - 16. */
float KN(vec_dot_q5_0_q8_0)(int64_t n, const void *vw, const void *va)
{
    const block_q5_0 *w = vw;
    const block_q8_0 *a = va;
    const __m256i high = _mm256_set1_epi8((char)0xF0);
    /* bit clear: q - 16 = nibble | 0xF0 as int8 */
#define BLK(i, acc)                                                                \
    fma_i32x(dot_s8s8(_mm256_or_si256(nibbles32(w[i].qs),                           \
                                     _mm256_andnot_si256(bits32_mask(w[i].qh), high)), \
                     ld256(a[i].qs)),                                              \
            DD(w[i], a[i]), acc)
    LOOP2(n / 32, BLK)
#undef BLK
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

float KN(vec_dot_q5_1_q8_1)(int64_t n, const void *vw, const void *va)
{
    const block_q5_1 *w = vw;
    const block_q8_1 *a = va;
    const __m256i b4 = _mm256_set1_epi8(0x10);
    __m128 summ = _mm_setzero_ps(), dm;
#define BLK(i, acc)                                                                \
    (dm = _mm_mul_ps(f16x2(&w[i]), f16x2(&a[i])), summ = _mm_add_ps(summ, dm),     \
     fma_i32x(dot_u8s8(_mm256_or_si256(nibbles32(w[i].qs),                         \
                                       _mm256_and_si256(bits32_mask(w[i].qh), b4)), \
                       ld256(a[i].qs)),                                            \
              dm, acc))
    LOOP2(n / 32, BLK)
#undef BLK
    return hsum_ps(_mm256_add_ps(acc0, acc1)) + _mm_cvtss_f32(_mm_movehdup_ps(summ));
}

float KN(vec_dot_q8_0_q8_0)(int64_t n, const void *vw, const void *va)
{
    const block_q8_0 *w = vw;
    const block_q8_0 *a = va;
#define BLK(i, acc)                                                                \
    fma_i32x(dot_s8s8(ld256(w[i].qs), ld256(a[i].qs)), DD(w[i], a[i]), acc)
    LOOP2(n / 32, BLK)
#undef BLK
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* The 16 IQ4 levels in both 128-bit lanes, for vpshufb lookups. */
static inline __m256i iq4_levels(void)
{
    const __m128i t = ld128(rvl_kvalues_iq4nl);
    return _mm256_set_m128i(t, t);
}

float KN(vec_dot_iq4_nl_q8_0)(int64_t n, const void *vw, const void *va)
{
    const block_iq4_nl *w = vw;
    const block_q8_0 *a = va;
    const __m256i lv = iq4_levels();
#define BLK(i, acc)                                                                \
    fma_i32x(dot_s8s8(_mm256_shuffle_epi8(lv, nibbles32(w[i].qs)), ld256(a[i].qs)), \
            DD(w[i], a[i]), acc)
    LOOP2(n / 32, BLK)
#undef BLK
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* MXFP4: the doubled E2M1 levels by vpshufb, as IQ4_NL; the weight
 * scale is the E8M0 byte (rvl_e8m0_half) instead of an f16. */
float KN(vec_dot_mxfp4_q8_0)(int64_t n, const void *vw, const void *va)
{
    const block_mxfp4 *w = vw;
    const block_q8_0 *a = va;
    const __m128i t = ld128(rvl_kvalues_mxfp4);
    const __m256i lv = _mm256_set_m128i(t, t);
#define BLK(i, acc)                                                                \
    fma_i32x(dot_s8s8(_mm256_shuffle_epi8(lv, nibbles32(w[i].qs)), ld256(a[i].qs)), \
            _mm_mul_ss(_mm_set_ss(rvl_e8m0_half(w[i].e)), f16x2(&a[i])), acc)
    LOOP2(n / 32, BLK)
#undef BLK
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

#undef LOOP2

/* ======================================================================
 * K-quants and IQ4_XS against Q8_K (super-blocks of 256)
 *
 * Unsigned levels go straight into vpmaddubsw; the offset of the signed
 * ones (Q3_K: -4, Q6_K: -32) comes back through the activation's group
 * sums: sum_j sc_j * sum (q - o) a = sum_j sc_j * sum q a - o * sum_j
 * sc_j * bsums_j.
 * ====================================================================== */

#define QK RVL_QK_K

/* Q2_K, Q3_K, Q6_K: 16 groups of 16 with int16 scales sc16 (16 lanes);
 * p[k] (k = 0..7) holds the maddubs pair sums of groups 2k and 2k+1 in
 * its low and high 128 bits. */
static inline __m256i scale_groups16(const __m256i p[8], __m256i sc16)
{
    __m256i lo, hi;
    dup16_lanes(sc16, &lo, &hi);
    __m256i isum = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++)
        isum = acc_madd16(isum, p[k], pick2(lo, 2 * k, 2 * k + 1));
    for (int k = 0; k < 4; k++)
        isum = acc_madd16(isum, p[4 + k], pick2(hi, 2 * k, 2 * k + 1));
    return isum;
}

float KN(vec_dot_q2_K_q8_K)(int64_t n, const void *vw, const void *va)
{
    const block_q2_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        prefetch_block(&w[i], sizeof w[i]);
        const __m128i s8 = ld128(w[i].scales);
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s8, _mm256_castsi256_si128(m4)));
        const __m256i mn16 = _mm256_cvtepu8_epi16(
            _mm_and_si128(_mm_srli_epi16(s8, 4), _mm256_castsi256_si128(m4)));
        const __m256i summs = _mm256_madd_epi16(mn16, ld256(a[i].bsums));
        __m256i p[8];
        for (int h = 0; h < 2; h++) {
            __m256i q = ld256(w[i].qs + 32 * h);
            for (int k = 0; k < 4; k++, q = _mm256_srli_epi16(q, 2))
                p[4 * h + k] = _mm256_maddubs_epi16(_mm256_and_si256(q, m3),
                                                    ld256(a[i].qs + 128 * h + 32 * k));
        }
        const float dall = a[i].d * f16s(w[i].d), dmin = a[i].d * f16s(w[i].dmin);
        acc = fma_i32(scale_groups16(p, sc16), dall, acc);
        acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(summs), _mm256_set1_ps(dmin), acc);
    }
    return hsum_ps(acc);
}

/* The 16 signed 6-bit scales of a Q3_K block (rvl_q3_K_scales) as int8. */
static inline __m128i q3_K_scales(const uint8_t *s)
{
    uint32_t u[3];
    memcpy(u, s, 12);
    const uint32_t lo4 = 0x0f0f0f0f, hi2 = 0x03030303;
    const uint32_t s0 = (u[0] & lo4) | ((u[2] & hi2) << 4);
    const uint32_t s1 = (u[1] & lo4) | (((u[2] >> 2) & hi2) << 4);
    const uint32_t s2 = ((u[0] >> 4) & lo4) | (((u[2] >> 4) & hi2) << 4);
    const uint32_t s3 = ((u[1] >> 4) & lo4) | (((u[2] >> 6) & hi2) << 4);
    return _mm_sub_epi8(_mm_setr_epi32((int)s0, (int)s1, (int)s2, (int)s3), _mm_set1_epi8(32));
}

float KN(vec_dot_q3_K_q8_K)(int64_t n, const void *vw, const void *va)
{
    const block_q3_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        prefetch_block(&w[i], sizeof w[i]);
        const __m256i sc16 = _mm256_cvtepi8_epi16(q3_K_scales(w[i].scales));
        __m256i hm = ld256(w[i].hmask);
        __m256i p[8];
        for (int h = 0; h < 2; h++) {
            __m256i q = ld256(w[i].qs + 32 * h);
            for (int k = 0; k < 4; k++) {
                /* level + 4 in 0..7: the hmask bit set means no -4 */
                const __m256i u = _mm256_or_si256(
                    _mm256_and_si256(q, m3), _mm256_slli_epi16(_mm256_and_si256(hm, m1), 2));
                p[4 * h + k] = _mm256_maddubs_epi16(u, ld256(a[i].qs + 128 * h + 32 * k));
                q = _mm256_srli_epi16(q, 2);
                hm = _mm256_srli_epi16(hm, 1);
            }
        }
        __m256i isum = scale_groups16(p, sc16);
        isum = _mm256_sub_epi32(
            isum, _mm256_slli_epi32(_mm256_madd_epi16(sc16, ld256(a[i].bsums)), 2));
        acc = fma_i32(isum, a[i].d * f16s(w[i].d), acc);
    }
    return hsum_ps(acc);
}

/* The 8 6-bit scales and mins of a Q4_K/Q5_K block (rvl_k4_scale_min):
 * scales in the low 64 bits, mins in the high 64 bits. */
static inline __m128i k4_scales_mins(const uint8_t *s)
{
    uint32_t u[3];
    memcpy(u, s, 12);
    const uint32_t sc_lo = u[0] & 0x3f3f3f3f, mn_lo = u[1] & 0x3f3f3f3f;
    const uint32_t sc_hi = (u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030);
    const uint32_t mn_hi = ((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030);
    return _mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)mn_lo, (int)mn_hi);
}

/* Shared tail of Q4_K and Q5_K: q[c] (c = 0..7) are the 8 groups of 32
 * levels; returns acc + d*a.d*sum(sc*q.a) - dmin*a.d*sum(m*bsums). */
static inline __m256 dot_k4(const __m256i q[8], __m128i scm, rvl_f16 d, rvl_f16 dmin,
                            const block_q8_K *a, __m256 acc)
{
    /* scale j repeated in 32-bit lane j (as two int16) */
    const __m128i sc = _mm_cvtepu8_epi16(scm);
    const __m256i scd = _mm256_set_m128i(_mm_unpackhi_epi16(sc, sc), _mm_unpacklo_epi16(sc, sc));
    /* min j twice in a row: pairs with bsums 2j, 2j+1 */
    const __m128i mn = _mm_unpackhi_epi64(scm, scm);
    const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
    const __m256i summs = _mm256_madd_epi16(mn16, ld256(a->bsums));
    __m256i isum = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++)
        isum = acc_madd16(isum, _mm256_maddubs_epi16(q[j], ld256(a->qs + 32 * j)),
                          _mm256_permutevar8x32_epi32(scd, _mm256_set1_epi32(j)));
    acc = fma_i32(isum, a->d * f16s(d), acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(summs), _mm256_set1_ps(a->d * f16s(dmin)), acc);
}

float KN(vec_dot_q4_K_q8_K)(int64_t n, const void *vw, const void *va)
{
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        prefetch_block(&w[i], sizeof w[i]);
        __m256i q[8];
        for (int c = 0; c < 4; c++) {
            const __m256i b = ld256(w[i].qs + 32 * c);
            q[2 * c] = _mm256_and_si256(b, m4);
            q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
        }
        acc = dot_k4(q, k4_scales_mins(w[i].scales), w[i].d, w[i].dmin, &a[i], acc);
    }
    return hsum_ps(acc);
}

float KN(vec_dot_q5_K_q8_K)(int64_t n, const void *vw, const void *va)
{
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        prefetch_block(&w[i], sizeof w[i]);
        __m256i hb = ld256(w[i].qh), q[8];
        for (int c = 0; c < 4; c++) {
            const __m256i b = ld256(w[i].qs + 32 * c);
            /* qh bit 2c -> bit 4 of the low-nibble level, bit 2c+1 of the high */
            q[2 * c] = _mm256_or_si256(_mm256_and_si256(b, m4),
                                       _mm256_and_si256(_mm256_slli_epi16(hb, 4), b4));
            q[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4),
                                           _mm256_and_si256(_mm256_slli_epi16(hb, 3), b4));
            hb = _mm256_srli_epi16(hb, 2);
        }
        acc = dot_k4(q, k4_scales_mins(w[i].scales), w[i].d, w[i].dmin, &a[i], acc);
    }
    return hsum_ps(acc);
}

float KN(vec_dot_q6_K_q8_K)(int64_t n, const void *vw, const void *va)
{
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        prefetch_block(&w[i], sizeof w[i]);
        const __m256i sc16 = _mm256_cvtepi8_epi16(ld128(w[i].scales));
        __m256i p[8];
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = ld256(w[i].ql + 64 * h), l1 = ld256(w[i].ql + 64 * h + 32);
            const __m256i hq = ld256(w[i].qh + 32 * h);
            /* levels + 32 in 0..63: low 4 bits from ql, 2 high bits from qh */
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4),
                                _mm256_and_si256(_mm256_slli_epi16(hq, 4), m30)),
                _mm256_or_si256(_mm256_and_si256(l1, m4),
                                _mm256_and_si256(_mm256_slli_epi16(hq, 2), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                _mm256_and_si256(hq, m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(hq, 2), m30)),
            };
            for (int k = 0; k < 4; k++)
                p[4 * h + k] = _mm256_maddubs_epi16(q[k], ld256(a[i].qs + 128 * h + 32 * k));
        }
        __m256i isum = scale_groups16(p, sc16);
        isum = _mm256_sub_epi32(
            isum, _mm256_slli_epi32(_mm256_madd_epi16(sc16, ld256(a[i].bsums)), 5));
        acc = fma_i32(isum, a[i].d * f16s(w[i].d), acc);
    }
    return hsum_ps(acc);
}

float KN(vec_dot_iq4_xs_q8_K)(int64_t n, const void *vw, const void *va)
{
    const block_iq4_xs *w = vw;
    const block_q8_K *a = va;
    const __m256i lv = iq4_levels();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        prefetch_block(&w[i], sizeof w[i]);
        const uint16_t sh = w[i].scales_h;
        __m256i isum = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((w[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                           (((sh >> (2 * ib)) & 3) << 4);
            const __m256i v = _mm256_shuffle_epi8(lv, nibbles32(w[i].qs + 16 * ib));
            const __m256i y = ld256(a[i].qs + 32 * ib);
            const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v));
            isum = acc_madd16(isum, p, _mm256_set1_epi16((short)(ls - 32)));
        }
        acc = fma_i32(isum, a[i].d * f16s(w[i].d), acc);
    }
    return hsum_ps(acc);
}

#undef QK
#undef KN
#undef RVL_CAT
#undef RVL_CAT_
