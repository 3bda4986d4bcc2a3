/*
 * kvq_avx2.c - the KV page readers (kvq.h) on AVX2 + FMA + F16C.
 *
 * With head_dim a multiple of 32, TQ4/TQ3/Q8/Q4 pages are read once for up
 * to 3 query heads of a GQA group (rvl_kvq_scores_avx2 / _accum_avx2, the
 * second half of the file; the layout of kvq_avx512.c on 8 lanes): each
 * row's 32-coordinate blocks are decoded once (TQ4: two 8-entry vpermps
 * and a blend per 8 codes, evens then odds; TQ3: vpermps reads only an
 * index's low 3 bits; Q4: nibbles converted, keys against q d plus q . m;
 * Q8: widened, times the group's scale) and meet every head; a score stays
 * a vector until 8 rows are done, then one transpose-and-add tree gives
 * their sums. Other shapes take the one-head readers of the first half
 * (F16 by vcvtph2ps; Q4 there is ref's).
 * Same products as ref, summed in another order: float rounding only.
 */
#include "x86/x86.h"

#ifdef RVL_HAVE_X86

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "f16.h"
#include "kvq.h"

RVL_X86_TARGET_BEGIN("avx2,fma,f16c")

static inline float hsum8(__m256 x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline uint32_t ld32(const uint8_t *p)
{
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}

/* 8 codes of coordinates i .. i + 7 of a row, one per lane */
static inline __m256i codes4(const uint8_t *r, int i)
{
    const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)ld32(r + i / 2)), sh),
                            _mm256_set1_epi32(15));
}

/* (reads 4 bytes for 3: the byte after a row's codes is still in the page,
 * the next row's codes or the norms) */
static inline __m256i codes3(const uint8_t *r, int i)
{
    const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)ld32(r + i / 8 * 3)), sh),
                            _mm256_set1_epi32(7));
}

/* the centroid of each 4-bit code: two 8-entry vpermps, chosen by bit 3 */
static inline __m256 look16(__m256 lo, __m256 hi, __m256i c)
{
    const __m256 a = _mm256_permutevar8x32_ps(lo, c), b = _mm256_permutevar8x32_ps(hi, c);
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)));
}

static inline __m256 q8_8(const int8_t *c)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)c)));
}

/* F16 pages: s = q . k, acc += p v, widened W lanes at a time */
static void scores_f16(int hd, const void *page, int j0, int j1, const float *q, float *s)
{
    for (int j = j0; j <= j1; j++) {
        const uint16_t *r = (const uint16_t *)page + (size_t)j * hd;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int i = 0;
        for (; i + 16 <= hd; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + i))), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + i + 8))), a1);
        }
        for (; i + 8 <= hd; i += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + i))), a0);
        float a = hsum8(_mm256_add_ps(a0, a1));
        for (; i < hd; i++)
            a = fmaf(q[i], rvl_f16_to_f32(r[i]), a);
        s[j] = a;
    }
}

static void accum_f16(int hd, const void *page, int j0, int j1, const float *p, float *acc)
{
    int i = 0;
    for (; i + 8 <= hd; i += 8) {
        __m256 x = _mm256_loadu_ps(acc + i);
        for (int j = j0; j <= j1; j++)
            x = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)page + (size_t)j * hd + i))), x);
        _mm256_storeu_ps(acc + i, x);
    }
    for (int j = j0; i < hd && j <= j1; j++)
        for (int t = i; t < hd; t++)
            acc[t] = fmaf(p[j], rvl_f16_to_f32(((const uint16_t *)page)[(size_t)j * hd + t]), acc[t]);
}

static void scores1(int fmt, int hd, const void *page, int j0, int j1, const float *q,
                         float *s)
{
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    if ((fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_TQ3) && hd >= 16) {
        const float *cb = rvl_kvq_codebook(fmt == RVL_KVQ_TQ4 ? 16 : 8);
        const __m256 lo = _mm256_loadu_ps(cb), hi = _mm256_loadu_ps(cb + 8 * (fmt == RVL_KVQ_TQ4));
        for (int j = j0; j <= j1; j++) {
            const uint8_t *r = (const uint8_t *)page + (size_t)j * rb;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            if (fmt == RVL_KVQ_TQ4)
                for (int i = 0; i < hd; i += 16) {
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), look16(lo, hi, codes4(r, i)), a0);
                    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8),
                                         look16(lo, hi, codes4(r, i + 8)), a1);
                }
            else
                for (int i = 0; i < hd; i += 16) {
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i),
                                         _mm256_permutevar8x32_ps(lo, codes3(r, i)), a0);
                    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8),
                                         _mm256_permutevar8x32_ps(lo, codes3(r, i + 8)), a1);
                }
            s[j] = hsum8(_mm256_add_ps(a0, a1)) * rvl_f16_to_f32(sd[j]);
        }
        return;
    }
    if (fmt == RVL_KVQ_F16) {
        scores_f16(hd, page, j0, j1, q, s);
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
        __m256 acc = _mm256_setzero_ps();
        for (int g = 0; g < nf; g++) {
            const int b = g * RVL_KVQ_GROUP;
            __m256 t0 = _mm256_mul_ps(_mm256_loadu_ps(q + b), q8_8(r + b));
            __m256 t1 = _mm256_mul_ps(_mm256_loadu_ps(q + b + 8), q8_8(r + b + 8));
            t0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + b + 16), q8_8(r + b + 16), t0);
            t1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + b + 24), q8_8(r + b + 24), t1);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(rvl_f16_to_f32(d[g])), _mm256_add_ps(t0, t1), acc);
        }
        float a = hsum8(acc);
        if (nf < ng) { /* a short last group */
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
    if ((fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_TQ3) && hd >= 16) {
        const int t4 = fmt == RVL_KVQ_TQ4;
        const float *cb = rvl_kvq_codebook(t4 ? 16 : 8);
        const __m256 lo = _mm256_loadu_ps(cb), hi = _mm256_loadu_ps(cb + 8 * t4);
        float wg[RVL_KVQ_PAGE];
        for (int j = j0; j <= j1; j++)
            wg[j] = p[j] * rvl_f16_to_f32(sd[j]);
        for (int i = 0; i < hd; i += 16) {
            __m256 x0 = _mm256_loadu_ps(acc + i), x1 = _mm256_loadu_ps(acc + i + 8);
            for (int j = j0; j <= j1; j++) {
                const uint8_t *r = (const uint8_t *)pg + (size_t)j * rb;
                const __m256 w = _mm256_set1_ps(wg[j]);
                const __m256 c0 = t4 ? look16(lo, hi, codes4(r, i))
                                     : _mm256_permutevar8x32_ps(lo, codes3(r, i));
                const __m256 c1 = t4 ? look16(lo, hi, codes4(r, i + 8))
                                     : _mm256_permutevar8x32_ps(lo, codes3(r, i + 8));
                x0 = _mm256_fmadd_ps(w, c0, x0);
                x1 = _mm256_fmadd_ps(w, c1, x1);
            }
            _mm256_storeu_ps(acc + i, x0);
            _mm256_storeu_ps(acc + i + 8, x1);
        }
        return;
    }
    if (fmt == RVL_KVQ_F16) {
        accum_f16(hd, page, j0, j1, p, acc);
        return;
    }
    if (fmt != RVL_KVQ_Q8) {
        rvl_kvq_accum_ref(fmt, hd, page, j0, j1, p, 1, acc);
        return;
    }
    const int ng = rvl_kvq_groups(hd), nf = hd / RVL_KVQ_GROUP;
    for (int g = 0; g < nf; g++) {
        const int b = g * RVL_KVQ_GROUP;
        __m256 x[4];
        for (int u = 0; u < 4; u++)
            x[u] = _mm256_loadu_ps(acc + b + 8 * u);
        for (int j = j0; j <= j1; j++) {
            const int8_t *r = (const int8_t *)(pg + (size_t)j * rb) + b;
            const __m256 w = _mm256_set1_ps(p[j] * rvl_f16_to_f32(sd[(size_t)j * ng + g]));
            for (int u = 0; u < 4; u++)
                x[u] = _mm256_fmadd_ps(w, q8_8(r + 8 * u), x[u]);
        }
        for (int u = 0; u < 4; u++)
            _mm256_storeu_ps(acc + b + 8 * u, x[u]);
    }
    for (int j = j0; nf < ng && j <= j1; j++) {
        const int8_t *r = (const int8_t *)(pg + (size_t)j * rb);
        const float w = p[j] * rvl_f16_to_f32(sd[(size_t)j * ng + nf]);
        for (int i = nf * RVL_KVQ_GROUP; i < hd; i++)
            acc[i] = fmaf(w, (float)r[i], acc[i]);
    }
}

/* ------------------------------------------------- several heads per page */

#define AI static inline __attribute__((always_inline))

/* an f16 scale or norm: one vcvtph2ps (f16.h's portable one is ~10 ops) */
static inline float h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}
#define MQ 3 /* query heads per pass over a page (accumulators fill the 16 ymm) */

enum { D_TQ4, D_TQ3, D_Q4, D_Q8 };

/* 32 coordinates of the block at b of row r in x[0..3]: TQ4 / Q4 the
 * evens then the odds (x[0]: 0, 2, .. 14; x[1]: 16, .. 30; x[2], x[3] the
 * odds), TQ3 / Q8 in order */
AI void dec32(const int K, const uint8_t *r, int b, __m256 lo, __m256 hi, __m256 *x)
{
    if (K == D_TQ4 || K == D_Q4) {
        const __m256i w0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r + b / 2)));
        const __m256i w1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r + b / 2 + 8)));
        if (K == D_TQ4) {
            x[0] = look16(lo, hi, w0);
            x[1] = look16(lo, hi, w1);
            x[2] = look16(lo, hi, _mm256_srli_epi32(w0, 4));
            x[3] = look16(lo, hi, _mm256_srli_epi32(w1, 4));
        } else {
            const __m256i m = _mm256_set1_epi32(15);
            x[0] = _mm256_cvtepi32_ps(_mm256_and_si256(w0, m));
            x[1] = _mm256_cvtepi32_ps(_mm256_and_si256(w1, m));
            x[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(w0, 4));
            x[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(w1, 4));
        }
    } else if (K == D_TQ3) {
        /* vpermps reads an index's low 3 bits: no mask needed */
        const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
        for (int u = 0; u < 4; u++)
            x[u] = _mm256_permutevar8x32_ps(
                lo, _mm256_srlv_epi32(_mm256_set1_epi32((int)ld32(r + b / 8 * 3 + 3 * u)), sh));
    } else {
        for (int u = 0; u < 4; u++)
            x[u] = q8_8((const int8_t *)r + b + 8 * u);
    }
}

/* 32 floats as evens and odds, and back */
static inline void split(const float *a, float *e)
{
    for (int i = 0; i < 16; i++) {
        e[i] = a[2 * i];
        e[16 + i] = a[2 * i + 1];
    }
}

/* the row at 8 u + i of a page is kept at tpos: hsum8 of 8 such leaves
 * row i's sum in lane i */
static inline int tpos(int r)
{
    return (r & 24) | (r & 3) << 1 | (r >> 2 & 1);
}

static inline __m256 hsum8x8(const __m256 *v)
{
    __m256 a[4], b[2];
    for (int i = 0; i < 4; i++)
        a[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
    for (int i = 0; i < 2; i++)
        b[i] = _mm256_add_ps(_mm256_shuffle_ps(a[2 * i], a[2 * i + 1], 0x44),
                             _mm256_shuffle_ps(a[2 * i], a[2 * i + 1], 0xee));
    return _mm256_add_ps(_mm256_shuffle_ps(b[0], b[1], 0x88), _mm256_shuffle_ps(b[0], b[1], 0xdd));
}

typedef struct {
    __m256 v[MQ][RVL_KVQ_PAGE];
} rowsums;

AI void scores_rows(const int K, const int NQ, int hd, const uint8_t *pg, size_t rb,
                    const uint16_t *sd, int j0, int j1, const float *q, __m256 lo, __m256 hi,
                    rowsums *t)
{
    const int ng = hd / RVL_KVQ_GROUP;
    for (int j = j0; j <= j1; j++) {
        const uint8_t *r = pg + (size_t)j * rb;
        __m256 a[MQ];
        for (int h = 0; h < NQ; h++)
            a[h] = _mm256_setzero_ps();
        for (int b = 0; b < hd; b += 32) {
            __m256 x[4];
            dec32(K, r, b, lo, hi, x);
            if (K == D_Q8) {
                const __m256 d = _mm256_set1_ps(h2f(sd[(size_t)j * ng + b / 32]));
                for (int u = 0; u < 4; u++)
                    x[u] = _mm256_mul_ps(x[u], d);
            }
            for (int h = 0; h < NQ; h++)
                for (int u = 0; u < 4; u++)
                    a[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)h * hd + b + 8 * u), x[u],
                                           a[h]);
        }
        for (int h = 0; h < NQ; h++)
            t->v[h][tpos(j)] = a[h];
    }
}

static void scores_finish(rowsums *t, int nq, int j0, int j1, const uint16_t *g,
                          const float *base, float *s)
{
    for (int u = j0 >> 3; u <= j1 >> 3; u++) {
        for (int h = 0; h < nq; h++)
            for (int j = 8 * u; j < 8 * u + 8; j++)
                if (j < j0 || j > j1)
                    t->v[h][tpos(j)] = _mm256_setzero_ps();
        const __m256 gv = g ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 8 * u)))
                            : _mm256_set1_ps(1);
        for (int h = 0; h < nq; h++) {
            __m256 x = _mm256_mul_ps(hsum8x8(t->v[h] + 8 * u), gv);
            if (base)
                x = _mm256_add_ps(x, _mm256_set1_ps(base[h]));
            float o[8];
            _mm256_storeu_ps(o, x);
            for (int j = 8 * u; j < 8 * u + 8; j++)
                if (j >= j0 && j <= j1)
                    s[h * RVL_KVQ_PAGE + j] = o[j - 8 * u];
        }
    }
}

#define BY_NQ(n, call)                                                                       \
    switch (n) {                                                                             \
    case 1: call(1); break;                                                                  \
    case 2: call(2); break;                                                                  \
    default: call(3); break;                                                                 \
    }

static void tables(int K, __m256 *lo, __m256 *hi)
{
    const float *cb = rvl_kvq_codebook(K == D_TQ4 ? 16 : 8);
    *lo = K == D_TQ4 || K == D_TQ3 ? _mm256_loadu_ps(cb) : _mm256_setzero_ps();
    *hi = K == D_TQ4 ? _mm256_loadu_ps(cb + 8) : _mm256_setzero_ps();
}

AI void scores_fmt(const int K, int fmt, int hd, const void *page, int j0, int j1, const float *q,
                       int nq, float *s)
{
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    __m256 lo, hi;
    tables(K, &lo, &hi);
    rowsums t;
    float qp[MQ * RVL_KVQ_MAX_HEAD_DIM], base[MQ];
    for (int h0 = 0; h0 < nq; h0 += MQ) {
        const int n = nq - h0 < MQ ? nq - h0 : MQ;
        const float *qh = q + (size_t)h0 * hd;
        if (K == D_TQ4 || K == D_Q4) { /* evens and odds per 32; Q4: times d */
            for (int h = 0; h < n; h++) {
                float *o = qp + (size_t)h * hd;
                for (int b = 0; b < hd; b += 32)
                    split(qh + (size_t)h * hd + b, o + b);
                if (K == D_Q4) {
                    float bs = 0, d[32], m[32];
                    for (int b = 0; b < hd; b += 32) {
                        float dn[32], mn[32];
                        for (int i = 0; i < 32; i++) {
                            dn[i] = h2f(sd[b + i]);
                            mn[i] = h2f(sd[hd + b + i]);
                        }
                        split(dn, d);
                        split(mn, m);
                        for (int i = 0; i < 32; i++) {
                            bs = fmaf(o[b + i], m[i], bs);
                            o[b + i] *= d[i];
                        }
                    }
                    base[h] = bs;
                }
            }
            qh = qp;
        }
#define SC(N) scores_rows(K, N, hd, page, rb, sd, j0, j1, qh, lo, hi, &t)
        BY_NQ(n, SC)
#undef SC
        scores_finish(&t, n, j0, j1, K == D_TQ4 || K == D_TQ3 ? sd : NULL,
                      K == D_Q4 ? base : NULL, s + (size_t)h0 * RVL_KVQ_PAGE);
    }
}

void rvl_kvq_scores_avx2(int fmt, int hd, const void *page, int j0, int j1, const float *q, int nq,
                         float *s)
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
    for (int h = 0; h < nq; h++)
        scores1(fmt, hd, page, j0, j1, q + (size_t)h * hd, s + (size_t)h * RVL_KVQ_PAGE);
}

AI void accum_rows(const int K, const int NQ, int hd, const uint8_t *pg, size_t rb,
                   const uint16_t *sd, int j0, int j1, const float *w, __m256 lo, __m256 hi,
                   float *acc)
{
    const int ng = hd / RVL_KVQ_GROUP;
    const int eo = K == D_TQ4 || K == D_Q4;
    for (int b = 0; b < hd; b += 32) {
        __m256 x[MQ][4];
        float bias[MQ] = { 0 };
        for (int h = 0; h < NQ; h++) {
            float e[32];
            const float *a = acc + (size_t)h * hd + b;
            if (eo) {
                split(a, e);
                a = e;
            }
            for (int u = 0; u < 4; u++)
                x[h][u] = _mm256_loadu_ps(a + 8 * u);
        }
        for (int j = j0; j <= j1; j++) {
            __m256 y[4];
            dec32(K, pg + (size_t)j * rb, b, lo, hi, y);
            float d = 1, m = 0;
            if (K == D_Q8) {
                d = h2f(sd[(size_t)j * ng + b / 32]);
            } else if (K == D_Q4) {
                d = h2f(sd[((size_t)j * ng + b / 32) * 2]);
                m = h2f(sd[((size_t)j * ng + b / 32) * 2 + 1]);
            }
            for (int h = 0; h < NQ; h++) {
                const float wh = w[h * RVL_KVQ_PAGE + j];
                const __m256 wv = _mm256_set1_ps(K == D_Q8 || K == D_Q4 ? wh * d : wh);
                for (int u = 0; u < 4; u++)
                    x[h][u] = _mm256_fmadd_ps(wv, y[u], x[h][u]);
                if (K == D_Q4)
                    bias[h] = fmaf(wh, m, bias[h]);
            }
        }
        for (int h = 0; h < NQ; h++) {
            float e[32];
            for (int u = 0; u < 4; u++)
                _mm256_storeu_ps(e + 8 * u, K == D_Q4 ? _mm256_add_ps(x[h][u], _mm256_set1_ps(bias[h])) : x[h][u]);
            float *a = acc + (size_t)h * hd + b;
            if (eo)
                for (int i = 0; i < 16; i++) {
                    a[2 * i] = e[i];
                    a[2 * i + 1] = e[16 + i];
                }
            else
                memcpy(a, e, sizeof e);
        }
    }
}

AI void accum_fmt(const int K, int fmt, int hd, const void *page, int j0, int j1, const float *p,
                      int nq, float *acc)
{
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    __m256 lo, hi;
    tables(K, &lo, &hi);
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
#define AC(N) accum_rows(K, N, hd, page, rb, sd, j0, j1, ph, lo, hi, ah)
        BY_NQ(n, AC)
#undef AC
    }
}

void rvl_kvq_accum_avx2(int fmt, int hd, const void *page, int j0, int j1, const float *p, int nq,
                        float *acc)
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
    for (int h = 0; h < nq; h++)
        accum1(fmt, hd, page, j0, j1, p + (size_t)h * RVL_KVQ_PAGE, acc + (size_t)h * hd);
}

RVL_X86_TARGET_END

#endif
