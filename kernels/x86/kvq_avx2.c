/*
 * kvq_avx2.c - the KV page readers (kvq.h) on AVX2 + FMA + F16C, for the
 * hot formats: TQ4 and TQ3 (codes expanded to 8 lanes by variable shifts,
 * centroids looked up with vpermps) and Q8 (int8 widened, per-group scale
 * folded into the lane accumulators) and F16 (vcvtph2ps). Q4 pages use
 * ref's readers.
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

void rvl_kvq_scores_avx2(int fmt, int hd, const void *page, int j0, int j1, const float *q,
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
        rvl_kvq_scores_ref(fmt, hd, page, j0, j1, q, s);
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

void rvl_kvq_accum_avx2(int fmt, int hd, const void *page, int j0, int j1, const float *p,
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
        rvl_kvq_accum_ref(fmt, hd, page, j0, j1, p, acc);
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

RVL_X86_TARGET_END

#endif
