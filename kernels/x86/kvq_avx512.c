/*
 * kvq_avx512.c - the KV page readers (kvq.h) on AVX-512 F/BW/VL, for the
 * hot formats: TQ4 (16 codes to 16 lanes by one permute and variable
 * shifts; the 16 centroids are one register, looked up with vpermps),
 * TQ3 (two 24-bit words per 16 lanes), Q8 and F16. Q4 pages use ref's
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

/* 16 codes of coordinates i .. i + 15 of a row, one per lane */
static inline __m512i codes4(const uint8_t *r, int i)
{
    const __m512i sel = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const __m512i w = _mm512_permutexvar_epi32(
        sel, _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(r + i / 2))));
    return _mm512_and_si512(_mm512_srlv_epi32(w, sh), _mm512_set1_epi32(15));
}

/* (reads 8 bytes for 6: the bytes after a row's codes are still in the
 * page, the next row's codes or the 64 bytes of norms) */
static inline __m512i codes3(const uint8_t *r, int i)
{
    const __m512i sh = _mm512_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21, 0, 3, 6, 9, 12, 15, 18, 21);
    uint64_t v;
    memcpy(&v, r + i / 8 * 3, 8);
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32((int)(uint32_t)v)),
                                         _mm256_set1_epi32((int)(uint32_t)(v >> 24)), 1);
    return _mm512_and_si512(_mm512_srlv_epi32(w, sh), _mm512_set1_epi32(7));
}

static inline __m512 q8_16(const int8_t *c)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)c)));
}

/* F16 pages: s = q . k, acc += p v, widened W lanes at a time */
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
            a = fmaf(q[i], rvl_f16_to_f32(r[i]), a);
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
            acc[t] = fmaf(p[j], rvl_f16_to_f32(((const uint16_t *)page)[(size_t)j * hd + t]), acc[t]);
}

void rvl_kvq_scores_avx512(int fmt, int hd, const void *page, int j0, int j1, const float *q,
                           float *s)
{
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    if ((fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_TQ3) && hd >= 16) {
        const int t4 = fmt == RVL_KVQ_TQ4;
        const float *cb = rvl_kvq_codebook(t4 ? 16 : 8);
        const __m512 tab = t4 ? _mm512_loadu_ps(cb)
                              : _mm512_castps256_ps512(_mm256_loadu_ps(cb));
        for (int j = j0; j <= j1; j++) {
            const uint8_t *r = (const uint8_t *)page + (size_t)j * rb;
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
            int i = 0;
            for (; i + 32 <= hd; i += 32) {
                const __m512i c0 = t4 ? codes4(r, i) : codes3(r, i);
                const __m512i c1 = t4 ? codes4(r, i + 16) : codes3(r, i + 16);
                a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_permutexvar_ps(c0, tab), a0);
                a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), _mm512_permutexvar_ps(c1, tab),
                                     a1);
            }
            if (i < hd) { /* hd = 16 */
                const __m512i c0 = t4 ? codes4(r, i) : codes3(r, i);
                a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_permutexvar_ps(c0, tab), a0);
            }
            s[j] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) * rvl_f16_to_f32(sd[j]);
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
        __m512 acc = _mm512_setzero_ps();
        for (int g = 0; g < nf; g++) {
            const int b = g * RVL_KVQ_GROUP;
            const __m512 t = _mm512_fmadd_ps(_mm512_loadu_ps(q + b + 16), q8_16(r + b + 16),
                                             _mm512_mul_ps(_mm512_loadu_ps(q + b), q8_16(r + b)));
            acc = _mm512_fmadd_ps(_mm512_set1_ps(rvl_f16_to_f32(d[g])), t, acc);
        }
        float a = _mm512_reduce_add_ps(acc);
        if (nf < ng) {
            float t = 0;
            for (int i = nf * RVL_KVQ_GROUP; i < hd; i++)
                t = fmaf(q[i], (float)r[i], t);
            a = fmaf(rvl_f16_to_f32(d[nf]), t, a);
        }
        s[j] = a;
    }
}

void rvl_kvq_accum_avx512(int fmt, int hd, const void *page, int j0, int j1, const float *p,
                          float *acc)
{
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const size_t rb = rvl_kvq_row_bytes(fmt, hd);
    const char *pg = (const char *)page;
    if ((fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_TQ3) && hd >= 16) {
        const int t4 = fmt == RVL_KVQ_TQ4;
        const float *cb = rvl_kvq_codebook(t4 ? 16 : 8);
        const __m512 tab = t4 ? _mm512_loadu_ps(cb)
                              : _mm512_castps256_ps512(_mm256_loadu_ps(cb));
        float wg[RVL_KVQ_PAGE];
        for (int j = j0; j <= j1; j++)
            wg[j] = p[j] * rvl_f16_to_f32(sd[j]);
        int i = 0;
        for (; i + 32 <= hd; i += 32) {
            __m512 x0 = _mm512_loadu_ps(acc + i), x1 = _mm512_loadu_ps(acc + i + 16);
            for (int j = j0; j <= j1; j++) {
                const uint8_t *r = (const uint8_t *)pg + (size_t)j * rb;
                const __m512 w = _mm512_set1_ps(wg[j]);
                const __m512i c0 = t4 ? codes4(r, i) : codes3(r, i);
                const __m512i c1 = t4 ? codes4(r, i + 16) : codes3(r, i + 16);
                x0 = _mm512_fmadd_ps(w, _mm512_permutexvar_ps(c0, tab), x0);
                x1 = _mm512_fmadd_ps(w, _mm512_permutexvar_ps(c1, tab), x1);
            }
            _mm512_storeu_ps(acc + i, x0);
            _mm512_storeu_ps(acc + i + 16, x1);
        }
        if (i < hd) {
            __m512 x0 = _mm512_loadu_ps(acc + i);
            for (int j = j0; j <= j1; j++) {
                const uint8_t *r = (const uint8_t *)pg + (size_t)j * rb;
                const __m512i c0 = t4 ? codes4(r, i) : codes3(r, i);
                x0 = _mm512_fmadd_ps(_mm512_set1_ps(wg[j]), _mm512_permutexvar_ps(c0, tab), x0);
            }
            _mm512_storeu_ps(acc + i, x0);
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
        __m512 x0 = _mm512_loadu_ps(acc + b), x1 = _mm512_loadu_ps(acc + b + 16);
        for (int j = j0; j <= j1; j++) {
            const int8_t *r = (const int8_t *)(pg + (size_t)j * rb) + b;
            const __m512 w = _mm512_set1_ps(p[j] * rvl_f16_to_f32(sd[(size_t)j * ng + g]));
            x0 = _mm512_fmadd_ps(w, q8_16(r), x0);
            x1 = _mm512_fmadd_ps(w, q8_16(r + 16), x1);
        }
        _mm512_storeu_ps(acc + b, x0);
        _mm512_storeu_ps(acc + b + 16, x1);
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
