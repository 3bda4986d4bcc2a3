/*
 * int_dots.h - the integer dot products of the quantized formats with
 * their activation formats, written once and compiled twice: neon.c
 * includes it with a widening-multiply primitive, dotprod.c with sdot.
 * The includer defines
 *
 *   RVL_ISA_SFX                              the name suffix (neon, dotprod)
 *   int32x4_t dot16(int32x4_t acc, int8x16_t x, int8x16_t y)
 *                     acc plus the 16 products x_j * y_j, spread over the
 *                     4 lanes in any way (only lane totals are used)
 *
 * and has included arm/common.h (contraction off). Both primitives are
 * exact for any int8 x and y, so weight levels may be anything their
 * format allows and Q8_0's -128 needs no special case.
 *
 * Structure shared by every kernel: the exact integer sum of a block (or
 * of a K-quant super-block, each group times its integer scale) is
 * reduced to one int, then ref's float operations follow in ref's order
 * (kernels/ref/dot_ref.c): the result is ref's, bit for bit. The float
 * work is one or two multiplies and one add per block, off the critical
 * path of the integer work; the integer sums fit int32 for every level
 * and scale the formats can hold (worst: Q6_K and IQ4_XS, under 2^28).
 */

#define RVL_CAT_(a, b) a##_##b
#define RVL_CAT(a, b) RVL_CAT_(a, b)
#define KN(name) RVL_CAT(name, RVL_ISA_SFX)

/* sum over 32 of x * a: x as two vectors (elements 0-15, 16-31) */
static inline int dot32(int8x16_t x0, int8x16_t x1, const int8_t *a)
{
    return vaddvq_s32(dot16(dot16(vdupq_n_s32(0), x0, ld_s8(a)), x1, ld_s8(a + 16)));
}

/* 16 products summed in lanes (for groups scaled one by one) */
static inline int32x4_t dot16z(int8x16_t x, const int8_t *a)
{
    return dot16(vdupq_n_s32(0), x, ld_s8(a));
}

/* ======================================================================
 * 32-value blocks against Q8_0 / Q8_1
 * ====================================================================== */

float KN(vec_dot_q4_0_q8_0)(int64_t n, const void *vw, const void *va)
{
    const block_q4_0 *w = vw;
    const block_q8_0 *a = va;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        prefetch_ahead(&w[i]);
        const uint8x16_t b = vld1q_u8(w[i].qs);
        const int8x16_t lo = vsubq_s8(as_s8(vandq_u8(b, m4)), eight);
        const int8x16_t hi = vsubq_s8(as_s8(vshrq_n_u8(b, 4)), eight);
        sum += (float)dot32(lo, hi, a[i].qs) * (f16s(w[i].d) * f16s(a[i].d));
    }
    return sum;
}

float KN(vec_dot_q4_1_q8_1)(int64_t n, const void *vw, const void *va)
{
    const block_q4_1 *w = vw;
    const block_q8_1 *a = va;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        prefetch_ahead(&w[i]);
        const uint8x16_t b = vld1q_u8(w[i].qs);
        const int isum = dot32(as_s8(vandq_u8(b, m4)), as_s8(vshrq_n_u8(b, 4)), a[i].qs);
        sum += (float)isum * (f16s(w[i].d) * f16s(a[i].d)) + f16s(w[i].m) * f16s(a[i].s);
    }
    return sum;
}

/* Q5: the nibble plus bit j of qh as bit 4; Q5_0 stores q - 16, which
 * is nibble | 0xF0 as int8 when the bit is clear. */
float KN(vec_dot_q5_0_q8_0)(int64_t n, const void *vw, const void *va)
{
    const block_q5_0 *w = vw;
    const block_q8_0 *a = va;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), high = vdupq_n_u8(0xF0);
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        prefetch_ahead(&w[i]);
        const uint8x16_t b = vld1q_u8(w[i].qs);
        const int8x16_t lo = as_s8(vorrq_u8(vandq_u8(b, m4), vbicq_u8(high, bits16_mask(w[i].qh))));
        const int8x16_t hi =
            as_s8(vorrq_u8(vshrq_n_u8(b, 4), vbicq_u8(high, bits16_mask(w[i].qh + 2))));
        sum += (float)dot32(lo, hi, a[i].qs) * (f16s(w[i].d) * f16s(a[i].d));
    }
    return sum;
}

float KN(vec_dot_q5_1_q8_1)(int64_t n, const void *vw, const void *va)
{
    const block_q5_1 *w = vw;
    const block_q8_1 *a = va;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), b4 = vdupq_n_u8(0x10);
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        prefetch_ahead(&w[i]);
        const uint8x16_t b = vld1q_u8(w[i].qs);
        const int8x16_t lo = as_s8(vorrq_u8(vandq_u8(b, m4), vandq_u8(bits16_mask(w[i].qh), b4)));
        const int8x16_t hi = as_s8(vorrq_u8(vshrq_n_u8(b, 4), vandq_u8(bits16_mask(w[i].qh + 2), b4)));
        sum += (float)dot32(lo, hi, a[i].qs) * (f16s(w[i].d) * f16s(a[i].d)) +
               f16s(w[i].m) * f16s(a[i].s);
    }
    return sum;
}

float KN(vec_dot_q8_0_q8_0)(int64_t n, const void *vw, const void *va)
{
    const block_q8_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        prefetch_ahead(&w[i]);
        const int isum = dot32(ld_s8(w[i].qs), ld_s8(w[i].qs + 16), a[i].qs);
        sum += (float)isum * (f16s(w[i].d) * f16s(a[i].d));
    }
    return sum;
}

float KN(vec_dot_iq4_nl_q8_0)(int64_t n, const void *vw, const void *va)
{
    const block_iq4_nl *w = vw;
    const block_q8_0 *a = va;
    const int8x16_t lv = ld_s8(rvl_kvalues_iq4nl);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        prefetch_ahead(&w[i]);
        const uint8x16_t b = vld1q_u8(w[i].qs);
        const int isum = dot32(vqtbl1q_s8(lv, vandq_u8(b, m4)), vqtbl1q_s8(lv, vshrq_n_u8(b, 4)),
                               a[i].qs);
        sum += (float)isum * (f16s(w[i].d) * f16s(a[i].d));
    }
    return sum;
}

/* MXFP4: IQ4_NL's table lookup on the doubled E2M1 levels, the weight
 * scale from the E8M0 byte (rvl_e8m0_half), in ref's order. */
float KN(vec_dot_mxfp4_q8_0)(int64_t n, const void *vw, const void *va)
{
    const block_mxfp4 *w = vw;
    const block_q8_0 *a = va;
    const int8x16_t lv = ld_s8(rvl_kvalues_mxfp4);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float sum = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        prefetch_ahead(&w[i]);
        const uint8x16_t b = vld1q_u8(w[i].qs);
        const int isum = dot32(vqtbl1q_s8(lv, vandq_u8(b, m4)), vqtbl1q_s8(lv, vshrq_n_u8(b, 4)),
                               a[i].qs);
        sum += (float)isum * (rvl_e8m0_half(w[i].e) * f16s(a[i].d));
    }
    return sum;
}

/* ======================================================================
 * K-quants and IQ4_XS against Q8_K (super-blocks of 256). Group g of 16
 * (or 32) levels pairs with a.qs[16g ..]; each group's lane sums are
 * multiplied by its integer scale in int32 lanes.
 * ====================================================================== */

#define QK RVL_QK_K

/* sum_j m_j * bsums_j over 16 groups: m16 as two int16x8 (groups 0-7,
 * 8-15) */
static inline int dot_bsums16(int16x8_t m0, int16x8_t m1, const void *bsums)
{
    const int16x8_t b0 = ld_s16(bsums), b1 = ld_s16((const uint8_t *)bsums + 16);
    int32x4_t s = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
    s = vmlal_high_s16(s, m0, b0);
    s = vmlal_s16(s, vget_low_s16(m1), vget_low_s16(b1));
    s = vmlal_high_s16(s, m1, b1);
    return vaddvq_s32(s);
}

float KN(vec_dot_q2_K_q8_K)(int64_t n, const void *vw, const void *va)
{
    const block_q2_K *w = vw;
    const block_q8_K *a = va;
    const uint8x16_t m3 = vdupq_n_u8(3);
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        prefetch_block(&w[i], sizeof w[i]);
        const uint8_t *sc = w[i].scales;
        const int8_t *q8 = a[i].qs;
        /* element 128h + 32k + l is bits 2k of qs[32h + l]: group 8h + 2k
         * for l < 16, 8h + 2k + 1 above */
        int32x4_t acc = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q0 = vld1q_u8(w[i].qs + 32 * h), q1 = vld1q_u8(w[i].qs + 32 * h + 16);
            for (int k = 0; k < 4; k++) {
                const int g = 8 * h + 2 * k;
                acc = vmlaq_n_s32(acc, dot16z(as_s8(vandq_u8(q0, m3)), q8 + 16 * g), sc[g] & 0xF);
                acc = vmlaq_n_s32(acc, dot16z(as_s8(vandq_u8(q1, m3)), q8 + 16 * g + 16),
                                  sc[g + 1] & 0xF);
                q0 = vshrq_n_u8(q0, 2);
                q1 = vshrq_n_u8(q1, 2);
            }
        }
        const int isum = vaddvq_s32(acc);
        const uint8x16_t mn = vshrq_n_u8(vld1q_u8(sc), 4);
        const int summs = dot_bsums16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mn))),
                                      vreinterpretq_s16_u16(vmovl_high_u8(mn)), a[i].bsums);
        const float dall = a[i].d * f16s(w[i].d);
        const float dmin = a[i].d * f16s(w[i].dmin);
        sum += dall * (float)isum - dmin * (float)summs;
    }
    return sum;
}

float KN(vec_dot_q3_K_q8_K)(int64_t n, const void *vw, const void *va)
{
    const block_q3_K *w = vw;
    const block_q8_K *a = va;
    const uint8x16_t m3 = vdupq_n_u8(3), m1 = vdupq_n_u8(1);
    const int8x16_t four = vdupq_n_s8(4);
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        prefetch_block(&w[i], sizeof w[i]);
        int8_t sc[16];
        q3_K_scales(w[i].scales, sc);
        const int8_t *q8 = a[i].qs;
        /* as Q2_K, plus bit 4h + k of hmask[l] set = no -4 offset */
        uint8x16_t hm0 = vld1q_u8(w[i].hmask), hm1 = vld1q_u8(w[i].hmask + 16);
        int32x4_t acc = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q0 = vld1q_u8(w[i].qs + 32 * h), q1 = vld1q_u8(w[i].qs + 32 * h + 16);
            for (int k = 0; k < 4; k++) {
                const int g = 8 * h + 2 * k;
                const int8x16_t l0 = vsubq_s8(
                    as_s8(vorrq_u8(vandq_u8(q0, m3), vshlq_n_u8(vandq_u8(hm0, m1), 2))), four);
                const int8x16_t l1 = vsubq_s8(
                    as_s8(vorrq_u8(vandq_u8(q1, m3), vshlq_n_u8(vandq_u8(hm1, m1), 2))), four);
                acc = vmlaq_n_s32(acc, dot16z(l0, q8 + 16 * g), sc[g]);
                acc = vmlaq_n_s32(acc, dot16z(l1, q8 + 16 * g + 16), sc[g + 1]);
                q0 = vshrq_n_u8(q0, 2);
                q1 = vshrq_n_u8(q1, 2);
                hm0 = vshrq_n_u8(hm0, 1);
                hm1 = vshrq_n_u8(hm1, 1);
            }
        }
        sum += a[i].d * f16s(w[i].d) * (float)vaddvq_s32(acc);
    }
    return sum;
}

/* Shared tail of Q4_K and Q5_K: lv[c] (c = 0..7, two vectors each) are
 * the 8 groups of 32 levels; ref's dot_k4 in ref's order. */
static inline float dot_k4(const int8x16_t lv[16], const uint8_t *scales, rvl_f16 d,
                           rvl_f16 dmin, const block_q8_K *a)
{
    uint8_t sc[8], mn[8];
    k4_scales_mins(scales, sc, mn);
    int32x4_t acc = vdupq_n_s32(0);
    for (int g = 0; g < 8; g++)
        acc = vmlaq_n_s32(acc,
                          dot16(dot16z(lv[2 * g], a->qs + 32 * g), lv[2 * g + 1],
                                ld_s8(a->qs + 32 * g + 16)),
                          sc[g]);
    const int isum = vaddvq_s32(acc);
    /* min g pairs with bsums 2g and 2g+1 */
    const int16x8_t bs = vpaddq_s16(ld_s16(a->bsums), ld_s16(a->bsums + 8));
    const int16x8_t m16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
    int32x4_t s = vmull_s16(vget_low_s16(m16), vget_low_s16(bs));
    s = vmlal_high_s16(s, m16, bs);
    const int summs = vaddvq_s32(s);
    return a->d * f16s(d) * (float)isum - a->d * f16s(dmin) * (float)summs;
}

float KN(vec_dot_q4_K_q8_K)(int64_t n, const void *vw, const void *va)
{
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        prefetch_block(&w[i], sizeof w[i]);
        /* qs[32c + l]: low nibble is element 64c + l, high 64c + 32 + l */
        int8x16_t lv[16];
        for (int c = 0; c < 4; c++) {
            const uint8x16_t b0 = vld1q_u8(w[i].qs + 32 * c), b1 = vld1q_u8(w[i].qs + 32 * c + 16);
            lv[4 * c] = as_s8(vandq_u8(b0, m4));
            lv[4 * c + 1] = as_s8(vandq_u8(b1, m4));
            lv[4 * c + 2] = as_s8(vshrq_n_u8(b0, 4));
            lv[4 * c + 3] = as_s8(vshrq_n_u8(b1, 4));
        }
        sum += dot_k4(lv, w[i].scales, w[i].d, w[i].dmin, &a[i]);
    }
    return sum;
}

float KN(vec_dot_q5_K_q8_K)(int64_t n, const void *vw, const void *va)
{
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m1 = vdupq_n_u8(1), m2 = vdupq_n_u8(2);
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        prefetch_block(&w[i], sizeof w[i]);
        /* as Q4_K, plus bit 2c of qh[l] as bit 4 of element 64c + l and
         * bit 2c + 1 of element 64c + 32 + l */
        uint8x16_t h0 = vld1q_u8(w[i].qh), h1 = vld1q_u8(w[i].qh + 16);
        int8x16_t lv[16];
        for (int c = 0; c < 4; c++) {
            const uint8x16_t b0 = vld1q_u8(w[i].qs + 32 * c), b1 = vld1q_u8(w[i].qs + 32 * c + 16);
            lv[4 * c] = as_s8(vorrq_u8(vandq_u8(b0, m4), vshlq_n_u8(vandq_u8(h0, m1), 4)));
            lv[4 * c + 1] = as_s8(vorrq_u8(vandq_u8(b1, m4), vshlq_n_u8(vandq_u8(h1, m1), 4)));
            lv[4 * c + 2] = as_s8(vorrq_u8(vshrq_n_u8(b0, 4), vshlq_n_u8(vandq_u8(h0, m2), 3)));
            lv[4 * c + 3] = as_s8(vorrq_u8(vshrq_n_u8(b1, 4), vshlq_n_u8(vandq_u8(h1, m2), 3)));
            h0 = vshrq_n_u8(h0, 2);
            h1 = vshrq_n_u8(h1, 2);
        }
        sum += dot_k4(lv, w[i].scales, w[i].d, w[i].dmin, &a[i]);
    }
    return sum;
}

float KN(vec_dot_q6_K_q8_K)(int64_t n, const void *vw, const void *va)
{
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        prefetch_block(&w[i], sizeof w[i]);
        int32x4_t acc = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            int8x16_t lv[8];
            q6_K_half(w[i].ql + 64 * h, w[i].qh + 32 * h, lv);
            for (int g = 0; g < 8; g++)
                acc = vmlaq_n_s32(acc, dot16z(lv[g], a[i].qs + 128 * h + 16 * g),
                                  w[i].scales[8 * h + g]);
        }
        sum += a[i].d * f16s(w[i].d) * (float)vaddvq_s32(acc);
    }
    return sum;
}

float KN(vec_dot_iq4_xs_q8_K)(int64_t n, const void *vw, const void *va)
{
    const block_iq4_xs *w = vw;
    const block_q8_K *a = va;
    const int8x16_t lv = ld_s8(rvl_kvalues_iq4nl);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        prefetch_block(&w[i], sizeof w[i]);
        const unsigned sh = w[i].scales_h;
        int32x4_t acc = vdupq_n_s32(0);
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((w[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                           (int)(((sh >> (2 * ib)) & 3) << 4);
            const uint8x16_t b = vld1q_u8(w[i].qs + 16 * ib);
            const int32x4_t p = dot16(dot16z(vqtbl1q_s8(lv, vandq_u8(b, m4)), a[i].qs + 32 * ib),
                                      vqtbl1q_s8(lv, vshrq_n_u8(b, 4)), ld_s8(a[i].qs + 32 * ib + 16));
            acc = vmlaq_n_s32(acc, p, ls - 32);
        }
        sum += a[i].d * f16s(w[i].d) * (float)vaddvq_s32(acc);
    }
    return sum;
}

#undef QK
#undef KN
#undef RVL_CAT
#undef RVL_CAT_
