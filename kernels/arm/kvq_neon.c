/*
 * kvq_neon.c - the KV page readers (kvq.h) on arm64 ASIMD. With head_dim a
 * multiple of 32, TQ4/TQ3/Q8/Q4 pages are read once for all the query
 * heads of a call (rvl_kvq_scores_neon / rvl_kvq_accum_neon below: a row
 * decoded to floats once, centroids by a 64-byte tbl, then fused
 * multiply-adds per head); other shapes take the one-head readers (TQ and
 * Q8: centroids gathered per lane; F16, Q4: ref's). Same products as ref,
 * summed in another order: float rounding only.
 */
#if defined(__aarch64__) && defined(__ARM_NEON)

#include <arm_neon.h>
#include <math.h>

#include "f16.h"
#include "kvq.h"

/* the centroids of coordinates i .. i + 3 */
static inline float32x4_t cents(const float *cb, const uint8_t *r, int i, int t4)
{
    int c[4];
    for (int u = 0; u < 4; u++) {
        const int k = i + u;
        if (t4) {
            c[u] = (r[k >> 1] >> ((k & 1) * 4)) & 15;
        } else {
            const uint8_t *b = r + (k >> 3) * 3;
            const uint32_t w = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
            c[u] = (int)(w >> ((k & 7) * 3)) & 7;
        }
    }
    const float v[4] = { cb[c[0]], cb[c[1]], cb[c[2]], cb[c[3]] };
    return vld1q_f32(v);
}

/* (loads 8 codes for 4: the bytes after a row are still in the page) */
static inline float32x4_t q8_4(const int8_t *c)
{
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(vld1_s8(c)))));
}

static void scores1(int fmt, int hd, const void *page, int j0, int j1, const float *q,
                         float *s)
{
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    if (fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_TQ3) {
        const int t4 = fmt == RVL_KVQ_TQ4;
        const float *cb = rvl_kvq_codebook(t4 ? 16 : 8);
        for (int j = j0; j <= j1; j++) {
            const uint8_t *r = (const uint8_t *)page + (size_t)j * rb;
            float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
            for (int i = 0; i < hd; i += 8) {
                a0 = vfmaq_f32(a0, vld1q_f32(q + i), cents(cb, r, i, t4));
                a1 = vfmaq_f32(a1, vld1q_f32(q + i + 4), cents(cb, r, i + 4, t4));
            }
            s[j] = vaddvq_f32(vaddq_f32(a0, a1)) * rvl_f16_to_f32(sd[j]);
        }
        return;
    }
    if (fmt != RVL_KVQ_Q8) {
        rvl_kvq_scores_ref(fmt, hd, page, j0, j1, q, 1, s);
        return;
    }
    const int ng = rvl_kvq_groups(hd), nf = hd / RVL_KVQ_GROUP;
    for (int j = j0; j <= j1; j++) {
        const int8_t *r = (const int8_t *)page + (size_t)j * rb;
        const uint16_t *d = sd + (size_t)j * ng;
        float32x4_t acc = vdupq_n_f32(0);
        for (int g = 0; g < nf; g++) {
            const int b = g * RVL_KVQ_GROUP;
            float32x4_t t = vdupq_n_f32(0);
            for (int i = b; i < b + RVL_KVQ_GROUP; i += 4)
                t = vfmaq_f32(t, vld1q_f32(q + i), q8_4(r + i));
            acc = vfmaq_n_f32(acc, t, rvl_f16_to_f32(d[g]));
        }
        float a = vaddvq_f32(acc);
        if (nf < ng) {
            float t = 0;
            for (int i = nf * RVL_KVQ_GROUP; i < hd; i++)
                t = fmaf(q[i], (float)r[i], t);
            a = fmaf(rvl_f16_to_f32(d[nf]), t, a);
        }
        s[j] = a;
    }
}

static void accum1(int fmt, int hd, const void *page, int j0, int j1, const float *p,
                        float *acc)
{
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    const char *pg = (const char *)page;
    if (fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_TQ3) {
        const int t4 = fmt == RVL_KVQ_TQ4;
        const float *cb = rvl_kvq_codebook(t4 ? 16 : 8);
        for (int j = j0; j <= j1; j++) {
            const uint8_t *r = (const uint8_t *)pg + (size_t)j * rb;
            const float w = p[j] * rvl_f16_to_f32(sd[j]);
            for (int i = 0; i < hd; i += 4)
                vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), cents(cb, r, i, t4), w));
        }
        return;
    }
    if (fmt != RVL_KVQ_Q8) {
        rvl_kvq_accum_ref(fmt, hd, page, j0, j1, p, 1, acc);
        return;
    }
    const int ng = rvl_kvq_groups(hd);
    for (int j = j0; j <= j1; j++) {
        const int8_t *r = (const int8_t *)(pg + (size_t)j * rb);
        int i = 0;
        for (; i + 4 <= hd && (i % RVL_KVQ_GROUP) + 4 <= RVL_KVQ_GROUP; i += 4) {
            const float w = p[j] * rvl_f16_to_f32(sd[(size_t)j * ng + i / RVL_KVQ_GROUP]);
            vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), q8_4(r + i), w));
        }
        for (; i < hd; i++)
            acc[i] = fmaf(p[j] * rvl_f16_to_f32(sd[(size_t)j * ng + i / RVL_KVQ_GROUP]),
                          (float)r[i], acc[i]);
    }
}

/* ------------------------------------------------- several heads per page */

/* A row is decoded once to floats (TQ: the centroids; Q8: the codes times
 * their group's scale for keys, the codes for values; Q4: the codes), then
 * meets each query head. Centroids come from a 64-byte table lookup (tbl
 * of four registers): code c selects bytes 4c .. 4c + 3. */

/* 16 centroids of the codes in cc */
static inline void look16(uint8x16x4_t tab, uint8x16_t cc, float *x)
{
    static const uint8_t dup[4][16] = {
        { 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3 },
        { 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7 },
        { 8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11 },
        { 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15 },
    };
    static const uint8_t off[16] = { 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3 };
    const uint8x16_t o = vld1q_u8(off);
    for (int k = 0; k < 4; k++) {
        const uint8x16_t idx = vorrq_u8(vshlq_n_u8(vqtbl1q_u8(cc, vld1q_u8(dup[k])), 2), o);
        vst1q_f32(x + 4 * k, vreinterpretq_f32_u8(vqtbl4q_u8(tab, idx)));
    }
}

/* the codes of 32 coordinates from b of row r, one per byte */
static inline void codes32(int fmt, const uint8_t *r, int b, uint8x16_t *c0, uint8x16_t *c1)
{
    if (fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_Q4) {
        const uint8x16_t w = vld1q_u8(r + b / 2);
        const uint8x16_t lo = vandq_u8(w, vdupq_n_u8(15)), hi = vshrq_n_u8(w, 4);
        *c0 = vzip1q_u8(lo, hi);
        *c1 = vzip2q_u8(lo, hi);
    } else { /* TQ3: 4 groups of 8 codes in 3 bytes */
        uint8_t c[32];
        const uint8_t *g = r + b / 8 * 3;
        for (int u = 0; u < 4; u++) {
            const uint32_t w = (uint32_t)g[3 * u] | (uint32_t)g[3 * u + 1] << 8 |
                               (uint32_t)g[3 * u + 2] << 16;
            for (int k = 0; k < 8; k++)
                c[8 * u + k] = (uint8_t)(w >> (3 * k) & 7);
        }
        *c0 = vld1q_u8(c);
        *c1 = vld1q_u8(c + 16);
    }
}

static inline void u8_to_f32(uint8x16_t c, float *x)
{
    const uint16x8_t l = vmovl_u8(vget_low_u8(c)), h = vmovl_u8(vget_high_u8(c));
    vst1q_f32(x, vcvtq_f32_u32(vmovl_u16(vget_low_u16(l))));
    vst1q_f32(x + 4, vcvtq_f32_u32(vmovl_u16(vget_high_u16(l))));
    vst1q_f32(x + 8, vcvtq_f32_u32(vmovl_u16(vget_low_u16(h))));
    vst1q_f32(x + 12, vcvtq_f32_u32(vmovl_u16(vget_high_u16(h))));
}

/* row j as floats (see above; Q8 keys scaled when scale) */
static void decode_row(int fmt, int hd, const uint8_t *page, size_t rb, const uint16_t *sd,
                       uint8x16x4_t tab, int j, int scale, float *x)
{
    const uint8_t *r = page + (size_t)j * rb;
    for (int b = 0; b < hd; b += 32) {
        if (fmt == RVL_KVQ_Q8) {
            const float32x4_t d = vdupq_n_f32(
                scale ? rvl_f16_to_f32(sd[(size_t)j * (hd / RVL_KVQ_GROUP) + b / 32]) : 1.0f);
            for (int i = b; i < b + 32; i += 4)
                vst1q_f32(x + i, vmulq_f32(q8_4((const int8_t *)r + i), d));
            continue;
        }
        uint8x16_t c0, c1;
        codes32(fmt, r, b, &c0, &c1);
        if (fmt == RVL_KVQ_Q4) {
            u8_to_f32(c0, x + b);
            u8_to_f32(c1, x + b + 16);
        } else {
            look16(tab, c0, x + b);
            look16(tab, c1, x + b + 16);
        }
    }
}

static uint8x16x4_t table(int fmt)
{
    float cb[16] = { 0 };
    if (fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_TQ3) {
        const int n = fmt == RVL_KVQ_TQ4 ? 16 : 8;
        for (int i = 0; i < 16; i++)
            cb[i] = rvl_kvq_codebook(n)[i % n];
    }
    uint8x16x4_t t;
    t.val[0] = vreinterpretq_u8_f32(vld1q_f32(cb));
    t.val[1] = vreinterpretq_u8_f32(vld1q_f32(cb + 4));
    t.val[2] = vreinterpretq_u8_f32(vld1q_f32(cb + 8));
    t.val[3] = vreinterpretq_u8_f32(vld1q_f32(cb + 12));
    return t;
}

static int fast(int fmt, int hd)
{
    return hd % 32 == 0 && (fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_TQ3 || fmt == RVL_KVQ_Q8 ||
                            fmt == RVL_KVQ_Q4);
}

void rvl_kvq_scores_neon(int fmt, int hd, const void *page, int j0, int j1, const float *q, int nq,
                         float *s)
{
    if (!fast(fmt, hd)) {
        for (int h = 0; h < nq; h++)
            scores1(fmt, hd, page, j0, j1, q + (size_t)h * hd, s + (size_t)h * RVL_KVQ_PAGE);
        return;
    }
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    const uint8x16x4_t tab = table(fmt);
    const int tq = fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_TQ3;
    float x[RVL_KVQ_MAX_HEAD_DIM];
    for (int h0 = 0; h0 < nq; h0 += 4) {
        const int n = nq - h0 < 4 ? nq - h0 : 4;
        const float *qh = q + (size_t)h0 * hd;
        float base[4] = { 0 };
        if (fmt == RVL_KVQ_Q4) /* q . (m + d c) = q . m + (q d) . c */
            for (int h = 0; h < n; h++) {
                float32x4_t bs = vdupq_n_f32(0);
                for (int i = 0; i < hd; i += 4) {
                    float m[4];
                    for (int k = 0; k < 4; k++)
                        m[k] = rvl_f16_to_f32(sd[hd + i + k]);
                    bs = vfmaq_f32(bs, vld1q_f32(qh + (size_t)h * hd + i), vld1q_f32(m));
                }
                base[h] = vaddvq_f32(bs);
            }
        for (int j = j0; j <= j1; j++) {
            decode_row(fmt, hd, page, rb, sd, tab, j, 1, x);
            if (fmt == RVL_KVQ_Q4)
                for (int i = 0; i < hd; i++)
                    x[i] *= rvl_f16_to_f32(sd[i]);
            for (int h = 0; h < n; h++) {
                const float *qq = qh + (size_t)h * hd;
                float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
                for (int i = 0; i < hd; i += 8) {
                    a0 = vfmaq_f32(a0, vld1q_f32(qq + i), vld1q_f32(x + i));
                    a1 = vfmaq_f32(a1, vld1q_f32(qq + i + 4), vld1q_f32(x + i + 4));
                }
                float a = vaddvq_f32(vaddq_f32(a0, a1));
                if (tq)
                    a *= rvl_f16_to_f32(sd[j]);
                s[(size_t)(h0 + h) * RVL_KVQ_PAGE + j] = a + base[h];
            }
        }
    }
}

void rvl_kvq_accum_neon(int fmt, int hd, const void *page, int j0, int j1, const float *p, int nq,
                        float *acc)
{
    if (!fast(fmt, hd)) {
        for (int h = 0; h < nq; h++)
            accum1(fmt, hd, page, j0, j1, p + (size_t)h * RVL_KVQ_PAGE, acc + (size_t)h * hd);
        return;
    }
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    const uint8x16x4_t tab = table(fmt);
    const int ng = hd / RVL_KVQ_GROUP;
    float x[RVL_KVQ_MAX_HEAD_DIM];
    for (int j = j0; j <= j1; j++) {
        decode_row(fmt, hd, page, rb, sd, tab, j, 0, x);
        for (int h = 0; h < nq; h++) {
            const float ph = p[(size_t)h * RVL_KVQ_PAGE + j];
            float *a = acc + (size_t)h * hd;
            for (int b = 0; b < hd; b += 32) {
                float w = ph, m = 0;
                if (fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_TQ3) {
                    w = ph * rvl_f16_to_f32(sd[j]);
                } else if (fmt == RVL_KVQ_Q8) {
                    w = ph * rvl_f16_to_f32(sd[(size_t)j * ng + b / 32]);
                } else {
                    w = ph * rvl_f16_to_f32(sd[((size_t)j * ng + b / 32) * 2]);
                    m = ph * rvl_f16_to_f32(sd[((size_t)j * ng + b / 32) * 2 + 1]);
                }
                const float32x4_t mv = vdupq_n_f32(m);
                for (int i = b; i < b + 32; i += 4) {
                    float32x4_t t = vld1q_f32(a + i);
                    if (fmt == RVL_KVQ_Q4)
                        t = vaddq_f32(t, mv);
                    vst1q_f32(a + i, vfmaq_n_f32(t, vld1q_f32(x + i), w));
                }
            }
        }
    }
}

#endif
