/*
 * kvq_neon.c - the KV page readers (kvq.h) on arm64 ASIMD: TQ4/TQ3 and Q8
 * pages. The centroids are gathered from the codebook by a table lookup
 * per lane (codes unpacked four at a time), then fused multiply-adds on
 * four float lanes. F16 and Q4 pages use ref's readers. Same products as
 * ref, summed in another order: float rounding only.
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

void rvl_kvq_scores_neon(int fmt, int hd, const void *page, int j0, int j1, const float *q,
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
        rvl_kvq_scores_ref(fmt, hd, page, j0, j1, q, s);
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

void rvl_kvq_accum_neon(int fmt, int hd, const void *page, int j0, int j1, const float *p,
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
        rvl_kvq_accum_ref(fmt, hd, page, j0, j1, p, acc);
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

#endif
