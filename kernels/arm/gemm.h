/*
 * gemm.h - tiled GEMM (formats.h, gemm slot) for the NEON variants,
 * written once and compiled twice like int_dots.h: neon.c includes it
 * after int_dots.h with the widening-multiply dot16, dotprod.c with sdot.
 * The includer defines RVL_ISA_SFX and has included arm/common.h
 * (contraction off).
 *
 * A tile is up to 4 weight rows times up to 8 tokens, block by block:
 * each row's block is unpacked once (nibbles -> levels, scales) for all
 * the tokens, and each token's activation block is loaded once for the 4
 * rows. Per (row, token) the integers are the exact block sums of
 * int_dots.h's vec_dot, and the float operations are ref's, in ref's
 * order, on a float32x4 whose lane k is row k (a lane never mixes two
 * rows' or tokens' values; mul, add and sub one rounding at a time, as
 * the scalar code does). So every result is vec_dot's and ref's, bit for
 * bit, whatever the tile shape: stronger than formats.h asks.
 *
 * One token (decode) is the same code with one token per tile: the rows
 * share the activation loads, and the float work is done for 4 rows at
 * once. Prefetch: callers walk the rows of a matrix in groups of 4, so
 * each row prefetches its block of the row 4 further on.
 */

#define RVL_GCAT_(a, b) a##_##b
#define RVL_GCAT(a, b) RVL_GCAT_(a, b)
#define GN(name) RVL_GCAT(name, RVL_ISA_SFX)

enum { GA_Q4_0, GA_Q4_1, GA_Q8_0, GA_Q4_K, GA_Q6_K };

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

/* The exact integer sums of one (row, token) block: *isum, and Q4_K's min
 * sum in *summs. lv: the row's unpacked levels (Q4_0, Q4_1, Q8_0: 2
 * vectors; Q4_K: 16, group g in 2g, 2g+1; Q6_K: 16, group g of 16);
 * sc, mn: Q4_K's scales and mins; Q6_K's scales in sc6. */
GA_AI void ga_block_dot(int kind, const int8x16_t *lv, const uint8_t *sc, const uint8_t *mn,
                        const int8_t *sc6, const uint8_t *ab, int *isum, int *summs)
{
    if (kind == GA_Q4_0 || kind == GA_Q8_0) {
        *isum = dot32(lv[0], lv[1], (const int8_t *)ab + 2);
    } else if (kind == GA_Q4_1) {
        *isum = dot32(lv[0], lv[1], (const int8_t *)ab + 4);
    } else if (kind == GA_Q4_K) {
        const int8_t *q8 = (const int8_t *)ab + 4;
        int32x4_t acc = vdupq_n_s32(0);
        for (int g = 0; g < 8; g++)
            acc = vmlaq_n_s32(acc, dot16(dot16z(lv[2 * g], q8 + 32 * g), lv[2 * g + 1],
                                         ld_s8(q8 + 32 * g + 16)),
                              sc[g]);
        *isum = vaddvq_s32(acc);
        /* min g pairs with bsums 2g and 2g+1 */
        const int16x8_t bs = vpaddq_s16(ld_s16(ab + 260), ld_s16(ab + 276));
        const int16x8_t m16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
        int32x4_t s = vmull_s16(vget_low_s16(m16), vget_low_s16(bs));
        s = vmlal_high_s16(s, m16, bs);
        *summs = vaddvq_s32(s);
    } else {
        const int8_t *q8 = (const int8_t *)ab + 4;
        int32x4_t acc = vdupq_n_s32(0);
        for (int g = 0; g < 16; g++)
            acc = vmlaq_n_s32(acc, dot16z(lv[g], q8 + 16 * g), sc6[g]);
        *isum = vaddvq_s32(acc);
    }
}

/* rows wr[0..3] (past the real rows, wr repeats the last one: rn says how
 * many are real) times the tn tokens at act, act_stride bytes apart. */
GA_AI void ga_tile(int kind, int64_t nb, const uint8_t *const wr[4], size_t ahead,
                   const uint8_t *act, size_t act_stride, int tn, int rn, float *y,
                   size_t y_stride)
{
    const size_t wsz = kind == GA_Q4_0   ? sizeof(block_q4_0)
                       : kind == GA_Q4_1 ? sizeof(block_q4_1)
                       : kind == GA_Q8_0 ? sizeof(block_q8_0)
                       : kind == GA_Q4_K ? sizeof(block_q4_K)
                                         : sizeof(block_q6_K);
    const size_t asz = kind == GA_Q4_1                     ? sizeof(block_q8_1)
                       : kind == GA_Q4_0 || kind == GA_Q8_0 ? sizeof(block_q8_0)
                                                            : sizeof(block_q8_K);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
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
            if (kind == GA_Q4_0 || kind == GA_Q4_1) {
                const uint8x16_t b = vld1q_u8(wb + (kind == GA_Q4_1 ? 4 : 2));
                lv[r][0] = as_s8(vandq_u8(b, m4));
                lv[r][1] = as_s8(vshrq_n_u8(b, 4));
                if (kind == GA_Q4_0) {
                    lv[r][0] = vsubq_s8(lv[r][0], eight);
                    lv[r][1] = vsubq_s8(lv[r][1], eight);
                }
                dw[r] = ga_f16at(wb);
                mw[r] = kind == GA_Q4_1 ? ga_f16at(wb + 2) : 0.0f;
            } else if (kind == GA_Q8_0) {
                lv[r][0] = ld_s8(wb + 2);
                lv[r][1] = ld_s8(wb + 18);
                dw[r] = ga_f16at(wb);
            } else if (kind == GA_Q4_K) {
                /* qs[32c + l]: low nibble is element 64c + l, high 64c + 32 + l */
                for (int c = 0; c < 4; c++) {
                    const uint8x16_t b0 = vld1q_u8(wb + 16 + 32 * c);
                    const uint8x16_t b1 = vld1q_u8(wb + 16 + 32 * c + 16);
                    lv[r][4 * c] = as_s8(vandq_u8(b0, m4));
                    lv[r][4 * c + 1] = as_s8(vandq_u8(b1, m4));
                    lv[r][4 * c + 2] = as_s8(vshrq_n_u8(b0, 4));
                    lv[r][4 * c + 3] = as_s8(vshrq_n_u8(b1, 4));
                }
                k4_scales_mins(wb + 4, sc[r], mn[r]);
                dw[r] = ga_f16at(wb);
                mw[r] = ga_f16at(wb + 2);
            } else {
                q6_K_half(wb, wb + 128, lv[r]);
                q6_K_half(wb + 64, wb + 160, lv[r] + 8);
                memcpy(sc6[r], wb + 192, 16);
                dw[r] = ga_f16at(wb + 208);
            }
        }
        const float32x4_t dw4 = vld1q_f32(dw), mw4 = vld1q_f32(mw);
        for (int t = 0; t < tn; t++) {
            const uint8_t *ab = act + (size_t)t * act_stride + (size_t)i * asz;
            int is[4], sm[4] = { 0, 0, 0, 0 };
            for (int r = 0; r < 4; r++)
                ga_block_dot(kind, lv[r], sc[r], mn[r], sc6[r], ab, &is[r], &sm[r]);
            const float32x4_t fi = vcvtq_f32_s32(vld1q_s32(is));
            float32x4_t term;
            if (kind == GA_Q4_0 || kind == GA_Q8_0) {
                /* ref: sum += (float)isum * (d * a.d) */
                term = vmulq_f32(fi, vmulq_n_f32(dw4, ga_f16at(ab)));
            } else if (kind == GA_Q4_1) {
                /* ref: sum += (float)isum * (d * a.d) + m * a.s */
                term = vaddq_f32(vmulq_f32(fi, vmulq_n_f32(dw4, ga_f16at(ab))),
                                 vmulq_n_f32(mw4, ga_f16at(ab + 2)));
            } else if (kind == GA_Q4_K) {
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
    const int64_t nb = n / (kind == GA_Q4_K || kind == GA_Q6_K ? 256 : 32);
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

#undef GA_DEF
#undef GA_AI
#undef GN
#undef RVL_GCAT
#undef RVL_GCAT_
