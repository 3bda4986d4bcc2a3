/*
 * kvq_avx512.c - the KV page readers (kvq.h) on AVX-512 F/BW/VL.
 *
 * One pass over a page serves all nq query heads of a GQA group: each row's
 * codes are decoded once, 32 coordinates at a time, to two registers of
 * floats (dec32), which then meet every head's query (scores) or weight
 * (accum). Decoding per format:
 *   TQ4  16 code bytes widened to dwords: vpermps looks up the low nibble
 *        (it reads only an index's low 4 bits; the 16 centroids are one
 *        register), and the high nibble after a shift: coordinates come
 *        out as evens and odds.
 *   TQ3  12 code bytes: one 16-byte load broadcast per 128-bit lane, a
 *        byte shuffle gives each lane the 3 bytes of its group, a variable
 *        shift its code; the 8 centroids are stored twice, so the shifted-
 *        in bit of the next code does not matter.
 *   Q4   nibbles as TQ4 but converted to float: keys take q scaled by the
 *        per-channel d (prepared once per page and head, in the even/odd
 *        order) plus q . m; values the per-token {d, m} per group.
 *   Q8   bytes widened and converted, times the group's scale.
 * Scores: a row's sum stays a vector until 16 rows are done; one transpose-
 * and-add tree (hsum16) then yields their 16 sums in one register.
 * Rows of head_dim not a multiple of 32 (and F16 pages) take the one-head
 * readers. Same products as ref, summed in another order.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "f16.h"
#include "kvq.h"

RVL_X86_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512bw,avx512vl")

#define AI static inline __attribute__((always_inline))

/* an f16 scale or norm: one vcvtph2ps (f16.h's portable one is ~10 ops) */
static inline float h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}
#define MQ 4 /* query heads per pass over a page */

enum { D_TQ4, D_TQ3, D_Q4, D_Q8 };

/* ---------------------------------------------------------------- one head */

/* F16 pages: s = q . k, acc += p v */
static void scores_f16(int hd, const void *page, int j0, int j1, const float *q, float *s)
{
    for (int j = j0; j <= j1; j++) {
        const uint16_t *r = (const uint16_t *)page + (size_t)j * hd;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int i = 0;
        for (; i + 32 <= hd; i += 32) {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r + i))), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r + i + 16))), a1);
        }
        for (; i + 16 <= hd; i += 16)
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r + i))), a0);
        float a = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        for (; i < hd; i++)
            a = fmaf(q[i], h2f(r[i]), a);
        s[j] = a;
    }
}

static void accum_f16(int hd, const void *page, int j0, int j1, const float *p, float *acc)
{
    int i = 0;
    for (; i + 16 <= hd; i += 16) {
        __m512 x = _mm512_loadu_ps(acc + i);
        for (int j = j0; j <= j1; j++)
            x = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)page + (size_t)j * hd + i))), x);
        _mm512_storeu_ps(acc + i, x);
    }
    for (int j = j0; i < hd && j <= j1; j++)
        for (int t = i; t < hd; t++)
            acc[t] = fmaf(p[j], h2f(((const uint16_t *)page)[(size_t)j * hd + t]), acc[t]);
}

/* ------------------------------------------------------- decoding, 32 lanes */

/* the dword lanes' bytes of a TQ3 block of 32 codes (12 bytes): lane k of
 * half u holds bytes 3 (2u + k / 8) .. + 2 of the block (k / 8 within the
 * 128-bit lane's 4 dwords: lanes 4b .. 4b + 3 are coordinates 16u + 4b ..) */
static const int8_t tq3_ctl[2][64] = {
#define L3(g) 3 * (g), 3 * (g) + 1, 3 * (g) + 2, -1
#define B3(g) L3(g), L3(g), L3(g), L3(g)
    { B3(0), B3(0), B3(1), B3(1) },
    { B3(2), B3(2), B3(3), B3(3) },
#undef B3
#undef L3
};

/* coordinates 16 u .. 16 u + 15 (TQ3, Q8: natural order) or the evens and
 * odds of 32 (TQ4, Q4) of the block at b of row r, in x0, x1 */
AI void dec32(const int K, const uint8_t *r, int b, __m512 tab, __m512i c30, __m512i c31,
              __m512 *x0, __m512 *x1)
{
    if (K == D_TQ4 || K == D_Q4) {
        const __m512i w = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(r + b / 2)));
        if (K == D_TQ4) {
            *x0 = _mm512_permutexvar_ps(w, tab);
            *x1 = _mm512_permutexvar_ps(_mm512_srli_epi32(w, 4), tab);
        } else {
            *x0 = _mm512_cvtepi32_ps(_mm512_and_si512(w, _mm512_set1_epi32(15)));
            *x1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(w, 4));
        }
    } else if (K == D_TQ3) {
        const __m512i sh = _mm512_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21, 0, 3, 6, 9, 12, 15, 18, 21);
        const __m512i w = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(r + b / 8 * 3)));
        *x0 = _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_shuffle_epi8(w, c30), sh), tab);
        *x1 = _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_shuffle_epi8(w, c31), sh), tab);
    } else {
        const int8_t *c = (const int8_t *)r + b;
        *x0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)c)));
        *x1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(c + 16))));
    }
}

/* 32 floats as evens and odds, and back */
static inline void split(const float *a, __m512 *e, __m512 *o)
{
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 lo = _mm512_loadu_ps(a), hi = _mm512_loadu_ps(a + 16);
    *e = _mm512_permutex2var_ps(lo, ie, hi);
    *o = _mm512_permutex2var_ps(lo, io, hi);
}

static inline void merge(__m512 e, __m512 o, float *a)
{
    const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ih = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    _mm512_storeu_ps(a, _mm512_permutex2var_ps(e, il, o));
    _mm512_storeu_ps(a + 16, _mm512_permutex2var_ps(e, ih, o));
}

/* ------------------------------------------------------------------ scores */

/* Lane r: the sum of the lanes of v[t(r)], t(r) = 4 (r % 4) + r / 4 (the
 * tree below leaves input i's sum in lane 4 (i % 4) + i / 4). */
static inline int tpos(int r)
{
    return (r & 16) | (r & 3) << 2 | (r & 15) >> 2;
}

static inline __m512 hsum16(const __m512 *v)
{
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; i++)
        a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
    for (int i = 0; i < 4; i++)
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xee));
    return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xdd));
}

/* per head, per row (at tpos), the lane sums of q_h . k_j */
typedef struct {
    __m512 v[MQ][RVL_KVQ_PAGE];
} rowsums;

/* The rows j0 .. j1 of NQ heads: q (Q4 keys: q d, TQ4 / Q4: in evens and
 * odds per 32) against the decoded rows, into t. */
AI void scores_rows(const int K, const int NQ, int hd, const uint8_t *pg, size_t rb,
                    const uint16_t *sd, int j0, int j1, const float *q, size_t qs, __m512 tab,
                    rowsums *t)
{
    const int ng = hd / RVL_KVQ_GROUP;
    const __m512i c30 = _mm512_loadu_si512(tq3_ctl[0]), c31 = _mm512_loadu_si512(tq3_ctl[1]);
    for (int j = j0; j <= j1; j++) {
        const uint8_t *r = pg + (size_t)j * rb;
        __m512 a[MQ];
        for (int h = 0; h < NQ; h++)
            a[h] = _mm512_setzero_ps();
        for (int b = 0; b < hd; b += 32) {
            __m512 x0, x1;
            dec32(K, r, b, tab, c30, c31, &x0, &x1);
            if (K == D_Q8) {
                const __m512 d = _mm512_set1_ps(h2f(sd[(size_t)j * ng + b / 32]));
                x0 = _mm512_mul_ps(x0, d);
                x1 = _mm512_mul_ps(x1, d);
            }
            for (int h = 0; h < NQ; h++) {
                a[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * qs + b), x0, a[h]);
                a[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * qs + b + 16), x1, a[h]);
            }
        }
        for (int h = 0; h < NQ; h++)
            t->v[h][tpos(j)] = a[h];
    }
}

/* s[h * 32 + j] = sum of t's row j of head h, times g_j (TQ) plus base_h
 * (Q4), for j in [j0, j1] */
static void scores_finish(rowsums *t, int nq, int j0, int j1, const uint16_t *g,
                          const float *base, float *s)
{
    for (int h = 0; h < nq; h++)
        for (int j = j0 & 16; j < ((j1 | 15) + 1); j++)
            if (j < j0 || j > j1)
                t->v[h][tpos(j)] = _mm512_setzero_ps();
    for (int u = j0 >> 4; u <= j1 >> 4; u++) {
        const int lo = j0 > 16 * u ? j0 - 16 * u : 0, hi = j1 < 16 * u + 15 ? j1 - 16 * u : 15;
        const __mmask16 k = (__mmask16)((0xffffu >> (15 - hi)) & (0xffffu << lo));
        const __m512 gv = g ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 16 * u)))
                            : _mm512_set1_ps(1);
        for (int h = 0; h < nq; h++) {
            __m512 x = _mm512_mul_ps(hsum16(t->v[h] + 16 * u), gv);
            if (base)
                x = _mm512_add_ps(x, _mm512_set1_ps(base[h]));
            _mm512_mask_storeu_ps(s + h * RVL_KVQ_PAGE + 16 * u, k, x);
        }
    }
}

#define BY_NQ(n, call)                                                                       \
    switch (n) {                                                                             \
    case 1: call(1); break;                                                                  \
    case 2: call(2); break;                                                                  \
    case 3: call(3); break;                                                                  \
    default: call(4); break;                                                                 \
    }

AI void scores_fmt(const int K, int fmt, int hd, const void *page, int j0, int j1, const float *q,
                       int nq, float *s)
{
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    const uint8_t *pg = page;
    float cb[16];
    if (K == D_TQ4)
        memcpy(cb, rvl_kvq_codebook(16), sizeof cb);
    else if (K == D_TQ3)
        for (int i = 0; i < 16; i++)
            cb[i] = rvl_kvq_codebook(8)[i & 7];
    const __m512 tab = K == D_TQ4 || K == D_TQ3 ? _mm512_loadu_ps(cb) : _mm512_setzero_ps();
    rowsums t;
    float qp[MQ * RVL_KVQ_MAX_HEAD_DIM], base[MQ];
    for (int h0 = 0; h0 < nq; h0 += MQ) {
        const int n = nq - h0 < MQ ? nq - h0 : MQ;
        const float *qh = q + (size_t)h0 * hd;
        size_t qs = (size_t)hd;
        if (K == D_TQ4 || K == D_Q4) { /* evens and odds per 32; Q4: times d */
            for (int h = 0; h < n; h++) {
                __m512 bs = _mm512_setzero_ps();
                for (int b = 0; b < hd; b += 32) {
                    __m512 e, o;
                    split(qh + (size_t)h * hd + b, &e, &o);
                    if (K == D_Q4) {
                        __m512 de, dd, me, mo;
                        float f[32];
                        for (int i = 0; i < 32; i++)
                            f[i] = h2f(sd[b + i]);
                        split(f, &de, &dd);
                        for (int i = 0; i < 32; i++)
                            f[i] = h2f(sd[hd + b + i]);
                        split(f, &me, &mo);
                        bs = _mm512_fmadd_ps(e, me, _mm512_fmadd_ps(o, mo, bs));
                        e = _mm512_mul_ps(e, de);
                        o = _mm512_mul_ps(o, dd);
                    }
                    _mm512_storeu_ps(qp + (size_t)h * hd + b, e);
                    _mm512_storeu_ps(qp + (size_t)h * hd + b + 16, o);
                }
                base[h] = _mm512_reduce_add_ps(bs);
            }
            qh = qp;
        }
#define SC(N) scores_rows(K, N, hd, pg, rb, sd, j0, j1, qh, qs, tab, &t)
        BY_NQ(n, SC)
#undef SC
        scores_finish(&t, n, j0, j1, K == D_TQ4 || K == D_TQ3 ? sd : NULL,
                      K == D_Q4 ? base : NULL, s + (size_t)h0 * RVL_KVQ_PAGE);
    }
}

void rvl_kvq_scores_avx512(int fmt, int hd, const void *page, int j0, int j1, const float *q,
                           int nq, float *s)
{
    if (hd % 32 == 0) {
        switch (fmt) {
        case RVL_KVQ_TQ4: scores_fmt(D_TQ4, fmt, hd, page, j0, j1, q, nq, s); return;
        case RVL_KVQ_TQ3: scores_fmt(D_TQ3, fmt, hd, page, j0, j1, q, nq, s); return;
        case RVL_KVQ_Q4: scores_fmt(D_Q4, fmt, hd, page, j0, j1, q, nq, s); return;
        case RVL_KVQ_Q8: scores_fmt(D_Q8, fmt, hd, page, j0, j1, q, nq, s); return;
        default: break;
        }
    }
    for (int h = 0; h < nq; h++) {
        if (fmt == RVL_KVQ_F16)
            scores_f16(hd, page, j0, j1, q + (size_t)h * hd, s + h * RVL_KVQ_PAGE);
        else
            rvl_kvq_scores_ref(fmt, hd, page, j0, j1, q + (size_t)h * hd, 1,
                               s + h * RVL_KVQ_PAGE);
    }
}

/* ------------------------------------------------------------------- accum */

/* acc_h += sum_j w_hj v_j over the rows j0 .. j1, NQ heads; w = p g (TQ);
 * Q8 / Q4: p, times the row's group scale here (Q4: plus m, summed apart
 * and added once per group) */
AI void accum_rows(const int K, const int NQ, int hd, const uint8_t *pg, size_t rb,
                   const uint16_t *sd, int j0, int j1, const float *w, __m512 tab, float *acc)
{
    const int ng = hd / RVL_KVQ_GROUP;
    const __m512i c30 = _mm512_loadu_si512(tq3_ctl[0]), c31 = _mm512_loadu_si512(tq3_ctl[1]);
    for (int b = 0; b < hd; b += 32) {
        __m512 x0[MQ], x1[MQ];
        float bias[MQ] = { 0 };
        for (int h = 0; h < NQ; h++) {
            if (K == D_TQ4 || K == D_Q4) {
                split(acc + (size_t)h * hd + b, &x0[h], &x1[h]);
            } else {
                x0[h] = _mm512_loadu_ps(acc + (size_t)h * hd + b);
                x1[h] = _mm512_loadu_ps(acc + (size_t)h * hd + b + 16);
            }
        }
        for (int j = j0; j <= j1; j++) {
            const uint8_t *r = pg + (size_t)j * rb;
            __m512 y0, y1;
            dec32(K, r, b, tab, c30, c31, &y0, &y1);
            float d = 1, m = 0;
            if (K == D_Q8) {
                d = h2f(sd[(size_t)j * ng + b / 32]);
            } else if (K == D_Q4) {
                d = h2f(sd[((size_t)j * ng + b / 32) * 2]);
                m = h2f(sd[((size_t)j * ng + b / 32) * 2 + 1]);
            }
            for (int h = 0; h < NQ; h++) {
                const float wh = w[h * RVL_KVQ_PAGE + j];
                const __m512 wv = _mm512_set1_ps(K == D_Q8 || K == D_Q4 ? wh * d : wh);
                x0[h] = _mm512_fmadd_ps(wv, y0, x0[h]);
                x1[h] = _mm512_fmadd_ps(wv, y1, x1[h]);
                if (K == D_Q4)
                    bias[h] = fmaf(wh, m, bias[h]);
            }
        }
        for (int h = 0; h < NQ; h++) {
            if (K == D_Q4) {
                const __m512 bv = _mm512_set1_ps(bias[h]);
                x0[h] = _mm512_add_ps(x0[h], bv);
                x1[h] = _mm512_add_ps(x1[h], bv);
            }
            if (K == D_TQ4 || K == D_Q4) {
                merge(x0[h], x1[h], acc + (size_t)h * hd + b);
            } else {
                _mm512_storeu_ps(acc + (size_t)h * hd + b, x0[h]);
                _mm512_storeu_ps(acc + (size_t)h * hd + b + 16, x1[h]);
            }
        }
    }
}

AI void accum_fmt(const int K, int fmt, int hd, const void *page, int j0, int j1, const float *p,
                      int nq, float *acc)
{
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    const uint8_t *pg = page;
    float cb[16];
    if (K == D_TQ4)
        memcpy(cb, rvl_kvq_codebook(16), sizeof cb);
    else if (K == D_TQ3)
        for (int i = 0; i < 16; i++)
            cb[i] = rvl_kvq_codebook(8)[i & 7];
    const __m512 tab = K == D_TQ4 || K == D_TQ3 ? _mm512_loadu_ps(cb) : _mm512_setzero_ps();
    float w[MQ * RVL_KVQ_PAGE];
    for (int h0 = 0; h0 < nq; h0 += MQ) {
        const int n = nq - h0 < MQ ? nq - h0 : MQ;
        const float *ph = p + (size_t)h0 * RVL_KVQ_PAGE;
        if (K == D_TQ4 || K == D_TQ3) {
            for (int h = 0; h < n; h++)
                for (int j = j0; j <= j1; j++)
                    w[h * RVL_KVQ_PAGE + j] = ph[h * RVL_KVQ_PAGE + j] * h2f(sd[j]);
            ph = w;
        }
        float *ah = acc + (size_t)h0 * hd;
#define AC(N) accum_rows(K, N, hd, pg, rb, sd, j0, j1, ph, tab, ah)
        BY_NQ(n, AC)
#undef AC
    }
}

void rvl_kvq_accum_avx512(int fmt, int hd, const void *page, int j0, int j1, const float *p,
                          int nq, float *acc)
{
    if (hd % 32 == 0) {
        switch (fmt) {
        case RVL_KVQ_TQ4: accum_fmt(D_TQ4, fmt, hd, page, j0, j1, p, nq, acc); return;
        case RVL_KVQ_TQ3: accum_fmt(D_TQ3, fmt, hd, page, j0, j1, p, nq, acc); return;
        case RVL_KVQ_Q4: accum_fmt(D_Q4, fmt, hd, page, j0, j1, p, nq, acc); return;
        case RVL_KVQ_Q8: accum_fmt(D_Q8, fmt, hd, page, j0, j1, p, nq, acc); return;
        default: break;
        }
    }
    for (int h = 0; h < nq; h++) {
        if (fmt == RVL_KVQ_F16)
            accum_f16(hd, page, j0, j1, p + h * RVL_KVQ_PAGE, acc + (size_t)h * hd);
        else
            rvl_kvq_accum_ref(fmt, hd, page, j0, j1, p + h * RVL_KVQ_PAGE, 1,
                              acc + (size_t)h * hd);
    }
}

RVL_X86_TARGET_END

#endif
