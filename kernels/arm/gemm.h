/*
 * gemm.h - tiled GEMM (formats.h, gemm slot) for the NEON variants,
 * written once and compiled twice like int_dots.h: neon.c includes it
 * after int_dots.h with the widening-multiply dot16, dotprod.c with sdot.
 * The includer defines RVL_ISA_SFX and has included arm/common.h
 * (contraction off).
 *
 * Formats: the 32-value blocks Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL (and
 * RVL_I4S_G32, Q4_0's layout) against Q8_0/Q8_1, and the super-blocks
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS against Q8_K; every one is a kind
 * (GA_*) of the same tile, a compile-time constant in each entry point.
 *
 * A tile is up to 4 weight rows times up to 8 tokens, block by block:
 * each row's block is unpacked once (nibbles and high bits -> levels,
 * scales; int_dots.h's unpacking, int8 vectors) for all the tokens, and
 * each token's activation block is loaded once for the 4 rows. Per
 * (row, token) the integers are the exact block sums of int_dots.h's
 * vec_dot, and the float operations are ref's, in ref's order, on a
 * float32x4 whose lane k is row k (a lane never mixes two rows' or
 * tokens' values; mul, add and sub one rounding at a time, as the scalar
 * code does). So every result is vec_dot's and ref's, bit for bit,
 * whatever the tile shape: stronger than formats.h asks.
 *
 * One token (decode) is the same code with one token per tile: the rows
 * share the activation loads, and the float work is done for 4 rows at
 * once. Prefetch: callers walk the rows of a matrix in groups of 4, so
 * each row prefetches its block of the row 4 further on.
 */

#define RVL_GCAT_(a, b) a##_##b
#define RVL_GCAT(a, b) RVL_GCAT_(a, b)
#define GN(name) RVL_GCAT(name, RVL_ISA_SFX)

enum {
    GA_Q4_0, GA_Q4_1, GA_Q5_0, GA_Q5_1, GA_Q8_0, GA_IQ4_NL, /* blocks of 32, Q8_0/Q8_1 */
    GA_Q2_K, GA_Q3_K, GA_Q4_K, GA_Q5_K, GA_Q6_K, GA_IQ4_XS, /* of 256 (ga_is_k), Q8_K */
};

#define GA_AI static inline __attribute__((always_inline))

GA_AI float ga_f16at(const uint8_t *p)
{
    rvl_f16 h;
    memcpy(&h, p, 2);
    return f16s(h);
}

GA_AI float ga_f32at(const uint8_t *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* super-blocks of 256 against Q8_K */
GA_AI int ga_is_k(int kind)
{
    return kind >= GA_Q2_K;
}

/* against Q8_1, whose s pairs with the block's m */
GA_AI int ga_has_m(int kind)
{
    return kind == GA_Q4_1 || kind == GA_Q5_1;
}

/* K-quants with mins (their sum against bsums is subtracted) */
GA_AI int ga_has_min(int kind)
{
    return kind == GA_Q2_K || kind == GA_Q4_K || kind == GA_Q5_K;
}

/* bytes of one weight block */
GA_AI size_t ga_wsize(int kind)
{
    switch (kind) {
    case GA_Q4_0: return sizeof(block_q4_0);
    case GA_Q4_1: return sizeof(block_q4_1);
    case GA_Q5_0: return sizeof(block_q5_0);
    case GA_Q5_1: return sizeof(block_q5_1);
    case GA_Q8_0: return sizeof(block_q8_0);
    case GA_IQ4_NL: return sizeof(block_iq4_nl);
    case GA_Q2_K: return sizeof(block_q2_K);
    case GA_Q3_K: return sizeof(block_q3_K);
    case GA_Q4_K: return sizeof(block_q4_K);
    case GA_Q5_K: return sizeof(block_q5_K);
    case GA_Q6_K: return sizeof(block_q6_K);
    default: return sizeof(block_iq4_xs);
    }
}

/* The exact integer sums of one (row, token) block: *isum, and the min
 * sum of Q2_K, Q4_K, Q5_K in *summs. lv: the row's unpacked levels
 * (32-value formats: 2 vectors; Q4_K, Q5_K, IQ4_XS: 16, group g of 32 in
 * 2g, 2g+1; Q2_K, Q3_K, Q6_K: 16, group g of 16 in g); sc, mn: Q4_K's and
 * Q5_K's 8 scales and mins, Q2_K's 16 mins (0-7 in mn, 8-15 in sc: 8
 * bytes each keep Q4_K's stack layout); the signed scales of Q2_K, Q3_K,
 * Q6_K (16) and IQ4_XS (8, minus 32) in sc6. */
GA_AI void ga_block_dot(int kind, const int8x16_t *lv, const uint8_t *sc, const uint8_t *mn,
                        const int8_t *sc6, const uint8_t *ab, int *isum, int *summs)
{
    if (!ga_is_k(kind)) {
        *isum = dot32(lv[0], lv[1], (const int8_t *)ab + (ga_has_m(kind) ? 4 : 2));
    } else if (kind == GA_Q4_K || kind == GA_Q5_K || kind == GA_IQ4_XS) {
        const int8_t *q8 = (const int8_t *)ab + 4;
        int32x4_t acc = vdupq_n_s32(0);
        for (int g = 0; g < 8; g++)
            acc = vmlaq_n_s32(acc, dot16(dot16z(lv[2 * g], q8 + 32 * g), lv[2 * g + 1],
                                         ld_s8(q8 + 32 * g + 16)),
                              kind == GA_IQ4_XS ? sc6[g] : sc[g]);
        *isum = vaddvq_s32(acc);
        if (kind != GA_IQ4_XS) {
            /* min g pairs with bsums 2g and 2g+1 */
            const int16x8_t bs = vpaddq_s16(ld_s16(ab + 260), ld_s16(ab + 276));
            const int16x8_t m16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
            int32x4_t s = vmull_s16(vget_low_s16(m16), vget_low_s16(bs));
            s = vmlal_high_s16(s, m16, bs);
            *summs = vaddvq_s32(s);
        }
    } else {
        const int8_t *q8 = (const int8_t *)ab + 4;
        int32x4_t acc = vdupq_n_s32(0);
        for (int g = 0; g < 16; g++)
            acc = vmlaq_n_s32(acc, dot16z(lv[g], q8 + 16 * g), sc6[g]);
        *isum = vaddvq_s32(acc);
        if (kind == GA_Q2_K)
            *summs = dot_bsums16(vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn))),
                                 vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sc))), ab + 260);
    }
}

/* One row's block wb unpacked for ga_block_dot: levels lv, scales, and
 * the block's float scale *dw (and m or dmin in *mw). */
GA_AI void ga_unpack(int kind, const uint8_t *wb, int8x16_t lv[16], uint8_t sc[8],
                     uint8_t mn[8], int8_t sc6[16], float *dw, float *mw)
{
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(3), m1 = vdupq_n_u8(1);
    if (kind == GA_Q4_0 || kind == GA_Q4_1) {
        const uint8x16_t b = vld1q_u8(wb + (kind == GA_Q4_1 ? 4 : 2));
        lv[0] = as_s8(vandq_u8(b, m4));
        lv[1] = as_s8(vshrq_n_u8(b, 4));
        if (kind == GA_Q4_0) {
            lv[0] = vsubq_s8(lv[0], vdupq_n_s8(8));
            lv[1] = vsubq_s8(lv[1], vdupq_n_s8(8));
        }
        *dw = ga_f16at(wb);
        *mw = kind == GA_Q4_1 ? ga_f16at(wb + 2) : 0.0f;
    } else if (kind == GA_Q5_0) {
        /* q - 16: the nibble | 0xF0 where bit 4 (qh) is clear */
        const uint8x16_t b = vld1q_u8(wb + 6), high = vdupq_n_u8(0xF0);
        lv[0] = as_s8(vorrq_u8(vandq_u8(b, m4), vbicq_u8(high, bits16_mask(wb + 2))));
        lv[1] = as_s8(vorrq_u8(vshrq_n_u8(b, 4), vbicq_u8(high, bits16_mask(wb + 4))));
        *dw = ga_f16at(wb);
        *mw = 0.0f;
    } else if (kind == GA_Q5_1) {
        const uint8x16_t b = vld1q_u8(wb + 8), b4 = vdupq_n_u8(0x10);
        lv[0] = as_s8(vorrq_u8(vandq_u8(b, m4), vandq_u8(bits16_mask(wb + 4), b4)));
        lv[1] = as_s8(vorrq_u8(vshrq_n_u8(b, 4), vandq_u8(bits16_mask(wb + 6), b4)));
        *dw = ga_f16at(wb);
        *mw = ga_f16at(wb + 2);
    } else if (kind == GA_Q8_0) {
        lv[0] = ld_s8(wb + 2);
        lv[1] = ld_s8(wb + 18);
        *dw = ga_f16at(wb);
        *mw = 0.0f;
    } else if (kind == GA_IQ4_NL || kind == GA_IQ4_XS) {
        /* IQ4_XS: 8 IQ4_NL-like groups of 32 sharing d, qs[16g ..] */
        const int8x16_t kv = ld_s8(rvl_kvalues_iq4nl);
        const int ng = kind == GA_IQ4_NL ? 1 : 8;
        const uint8_t *qs = wb + (kind == GA_IQ4_NL ? 2 : 8);
        for (int g = 0; g < ng; g++) {
            const uint8x16_t b = vld1q_u8(qs + 16 * g);
            lv[2 * g] = vqtbl1q_s8(kv, vandq_u8(b, m4));
            lv[2 * g + 1] = vqtbl1q_s8(kv, vshrq_n_u8(b, 4));
        }
        if (kind == GA_IQ4_XS) {
            const unsigned sh = (unsigned)wb[2] | (unsigned)wb[3] << 8;
            for (int g = 0; g < 8; g++)
                sc6[g] = (int8_t)((((wb[4 + g / 2] >> (4 * (g % 2))) & 0xF) |
                                   (int)(((sh >> (2 * g)) & 3) << 4)) - 32);
        }
        *dw = ga_f16at(wb);
        *mw = 0.0f;
    } else if (kind == GA_Q2_K || kind == GA_Q3_K) {
        /* element 128h + 32k + l is bits 2k of qs[32h + l]: group 8h + 2k
         * for l < 16, 8h + 2k + 1 above; Q3_K: bit 4h + k of hmask[l] set
         * = no -4 offset */
        const uint8_t *qs = wb + (kind == GA_Q2_K ? 16 : 32);
        uint8x16_t hm0 = vld1q_u8(wb), hm1 = vld1q_u8(wb + 16);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q0 = vld1q_u8(qs + 32 * h), q1 = vld1q_u8(qs + 32 * h + 16);
            for (int k = 0; k < 4; k++) {
                const int g = 8 * h + 2 * k;
                if (kind == GA_Q2_K) {
                    lv[g] = as_s8(vandq_u8(q0, m3));
                    lv[g + 1] = as_s8(vandq_u8(q1, m3));
                } else {
                    lv[g] = vsubq_s8(
                        as_s8(vorrq_u8(vandq_u8(q0, m3), vshlq_n_u8(vandq_u8(hm0, m1), 2))),
                        vdupq_n_s8(4));
                    lv[g + 1] = vsubq_s8(
                        as_s8(vorrq_u8(vandq_u8(q1, m3), vshlq_n_u8(vandq_u8(hm1, m1), 2))),
                        vdupq_n_s8(4));
                    hm0 = vshrq_n_u8(hm0, 1);
                    hm1 = vshrq_n_u8(hm1, 1);
                }
                q0 = vshrq_n_u8(q0, 2);
                q1 = vshrq_n_u8(q1, 2);
            }
        }
        if (kind == GA_Q2_K) {
            const uint8x16_t s = vld1q_u8(wb);
            vst1q_s8(sc6, as_s8(vandq_u8(s, m4)));
            const uint8x16_t mins = vshrq_n_u8(s, 4);
            vst1_u8(mn, vget_low_u8(mins));
            vst1_u8(sc, vget_high_u8(mins));
            *dw = ga_f16at(wb + 80);
            *mw = ga_f16at(wb + 82);
        } else {
            q3_K_scales(wb + 96, sc6);
            *dw = ga_f16at(wb + 108);
            *mw = 0.0f;
        }
    } else if (kind == GA_Q4_K || kind == GA_Q5_K) {
        /* qs[32c + l]: low nibble is element 64c + l, high 64c + 32 + l;
         * Q5_K: bit 2c of qh[l] is bit 4 of element 64c + l, bit 2c + 1
         * of element 64c + 32 + l */
        const uint8_t *qs = wb + (kind == GA_Q4_K ? 16 : 48);
        uint8x16_t h0 = vld1q_u8(wb + 16), h1 = vld1q_u8(wb + 32);
        for (int c = 0; c < 4; c++) {
            const uint8x16_t b0 = vld1q_u8(qs + 32 * c), b1 = vld1q_u8(qs + 32 * c + 16);
            if (kind == GA_Q4_K) {
                lv[4 * c] = as_s8(vandq_u8(b0, m4));
                lv[4 * c + 1] = as_s8(vandq_u8(b1, m4));
                lv[4 * c + 2] = as_s8(vshrq_n_u8(b0, 4));
                lv[4 * c + 3] = as_s8(vshrq_n_u8(b1, 4));
            } else {
                const uint8x16_t m2 = vdupq_n_u8(2);
                lv[4 * c] = as_s8(vorrq_u8(vandq_u8(b0, m4), vshlq_n_u8(vandq_u8(h0, m1), 4)));
                lv[4 * c + 1] = as_s8(vorrq_u8(vandq_u8(b1, m4), vshlq_n_u8(vandq_u8(h1, m1), 4)));
                lv[4 * c + 2] = as_s8(vorrq_u8(vshrq_n_u8(b0, 4), vshlq_n_u8(vandq_u8(h0, m2), 3)));
                lv[4 * c + 3] = as_s8(vorrq_u8(vshrq_n_u8(b1, 4), vshlq_n_u8(vandq_u8(h1, m2), 3)));
                h0 = vshrq_n_u8(h0, 2);
                h1 = vshrq_n_u8(h1, 2);
            }
        }
        k4_scales_mins(wb + 4, sc, mn);
        *dw = ga_f16at(wb);
        *mw = ga_f16at(wb + 2);
    } else {
        q6_K_half(wb, wb + 128, lv);
        q6_K_half(wb + 64, wb + 160, lv + 8);
        memcpy(sc6, wb + 192, 16);
        *dw = ga_f16at(wb + 208);
        *mw = 0.0f;
    }
}

/* rows wr[0..3] (past the real rows, wr repeats the last one: rn says how
 * many are real) times the tn tokens at act, act_stride bytes apart. */
GA_AI void ga_tile(int kind, int64_t nb, const uint8_t *const wr[4], size_t ahead,
                   const uint8_t *act, size_t act_stride, int tn, int rn, float *y,
                   size_t y_stride)
{
    const size_t wsz = ga_wsize(kind);
    const size_t asz = ga_is_k(kind)    ? sizeof(block_q8_K)
                       : ga_has_m(kind) ? sizeof(block_q8_1)
                                        : sizeof(block_q8_0);
    float32x4_t acc[8];
    for (int t = 0; t < tn; t++)
        acc[t] = vdupq_n_f32(0);
    for (int64_t i = 0; i < nb; i++) {
        int8x16_t lv[4][16];
        uint8_t sc[4][8], mn[4][8];
        int8_t sc6[4][16];
        float dw[4], mw[4];
        for (int r = 0; r < 4; r++) {
            const uint8_t *wb = wr[r] + (size_t)i * wsz;
            for (size_t o = 0; o < wsz; o += 64)
                __builtin_prefetch(wb + ahead + o);
            ga_unpack(kind, wb, lv[r], sc[r], mn[r], sc6[r], &dw[r], &mw[r]);
        }
        const float32x4_t dw4 = vld1q_f32(dw), mw4 = vld1q_f32(mw);
        for (int t = 0; t < tn; t++) {
            const uint8_t *ab = act + (size_t)t * act_stride + (size_t)i * asz;
            int is[4], sm[4] = { 0, 0, 0, 0 };
            for (int r = 0; r < 4; r++)
                ga_block_dot(kind, lv[r], sc[r], mn[r], sc6[r], ab, &is[r], &sm[r]);
            const float32x4_t fi = vcvtq_f32_s32(vld1q_s32(is));
            float32x4_t term;
            if (!ga_is_k(kind) && !ga_has_m(kind)) {
                /* ref: sum += (float)isum * (d * a.d) */
                term = vmulq_f32(fi, vmulq_n_f32(dw4, ga_f16at(ab)));
            } else if (ga_has_m(kind)) {
                /* ref: sum += (float)isum * (d * a.d) + m * a.s */
                term = vaddq_f32(vmulq_f32(fi, vmulq_n_f32(dw4, ga_f16at(ab))),
                                 vmulq_n_f32(mw4, ga_f16at(ab + 2)));
            } else if (ga_has_min(kind)) {
                /* ref: a.d * d * isum - a.d * dmin * summs */
                const float ad = ga_f32at(ab);
                term = vsubq_f32(vmulq_f32(vmulq_n_f32(dw4, ad), fi),
                                 vmulq_f32(vmulq_n_f32(mw4, ad), vcvtq_f32_s32(vld1q_s32(sm))));
            } else {
                /* ref: a.d * d * isum */
                term = vmulq_f32(vmulq_n_f32(dw4, ga_f32at(ab)), fi);
            }
            acc[t] = vaddq_f32(acc[t], term);
        }
    }
    for (int t = 0; t < tn; t++) {
        float l[4];
        vst1q_f32(l, acc[t]);
        for (int r = 0; r < rn; r++)
            y[(size_t)t * y_stride + r] = l[r];
    }
}

GA_AI void ga_gemm(int kind, int64_t n, const void *vw, size_t w_stride, int nr, const void *vact,
                   size_t act_stride, int nt, float *y, size_t y_stride)
{
    const int64_t nb = n / (ga_is_k(kind) ? 256 : 32);
    const uint8_t *w = vw, *act = vact;
    for (int r0 = 0; r0 < nr; r0 += 4) {
        const int rn = nr - r0 < 4 ? nr - r0 : 4;
        const uint8_t *wr[4];
        for (int k = 0; k < 4; k++)
            wr[k] = w + (size_t)(r0 + (k < rn ? k : rn - 1)) * w_stride;
        for (int t0 = 0; t0 < nt; t0 += 8) {
            const int tn = nt - t0 < 8 ? nt - t0 : 8;
            ga_tile(kind, nb, wr, 4 * w_stride, act + (size_t)t0 * act_stride, act_stride, tn, rn,
                    y + (size_t)t0 * y_stride + r0, y_stride);
        }
    }
}

#define GA_DEF(name, kind)                                                         \
    void GN(name)(int64_t n, const void *w, size_t w_stride, int nr, const void *act, \
                  size_t act_stride, int nt, float *y, size_t y_stride)            \
    {                                                                              \
        ga_gemm(kind, n, w, w_stride, nr, act, act_stride, nt, y, y_stride);       \
    }

GA_DEF(gemm_q4_0_q8_0, GA_Q4_0)
GA_DEF(gemm_q4_1_q8_1, GA_Q4_1)
GA_DEF(gemm_q8_0_q8_0, GA_Q8_0)
GA_DEF(gemm_q4_K_q8_K, GA_Q4_K)
GA_DEF(gemm_q6_K_q8_K, GA_Q6_K)
GA_DEF(gemm_q5_0_q8_0, GA_Q5_0)
GA_DEF(gemm_q5_1_q8_1, GA_Q5_1)
GA_DEF(gemm_q5_K_q8_K, GA_Q5_K)
GA_DEF(gemm_iq4_nl_q8_0, GA_IQ4_NL)
GA_DEF(gemm_iq4_xs_q8_K, GA_IQ4_XS)
GA_DEF(gemm_q2_K_q8_K, GA_Q2_K)
GA_DEF(gemm_q3_K_q8_K, GA_Q3_K)

#undef GA_DEF
#undef GA_AI
#undef GN
#undef RVL_GCAT
#undef RVL_GCAT_
