/*
 * kvcache_testlib.h - what the KV cache tests share (test_kvcache.c,
 * test_kvcache_mla.c, test_kvcache_sinks.c): a seeded normal generator, the
 * reference attention in double, and a layer's rows as the cache holds them.
 */
#ifndef KVCACHE_TESTLIB_H
#define KVCACHE_TESTLIB_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "engine/kvcache.h"

/* N(0, 1) by Box-Muller on two splitmix64 draws of *rng */
static inline double kvt_gauss(uint64_t *rng)
{
    uint64_t a = (*rng += 0x9e3779b97f4a7c15ull), b = (*rng += 0x9e3779b97f4a7c15ull);
    a = (a ^ (a >> 30)) * 0xbf58476d1ce4e5b9ull, a ^= a >> 27;
    b = (b ^ (b >> 30)) * 0xbf58476d1ce4e5b9ull, b ^= b >> 27;
    double u = ((a >> 11) + 0.5) * 0x1.0p-53, v = (b >> 11) * 0x1.0p-53;
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* One query head's attention in double over n rows (keys and values
 * stride floats apart, hd of each): softmax(scale q.k) v, with a sink
 * logit in the denominator (-INFINITY: none). */
static inline void kvt_ref_attn(const float *q, const float *keys, const float *vals,
                                size_t stride, int n, int hd, double scale, double sink,
                                double *out)
{
    double *s = malloc((size_t)n * sizeof *s), mx = sink, sum;
    for (int t = 0; t < n; t++) {
        double d = 0;
        for (int e = 0; e < hd; e++)
            d += (double)q[e] * keys[(size_t)t * stride + e];
        s[t] = d * scale;
        mx = s[t] > mx ? s[t] : mx;
    }
    sum = exp(sink - mx); /* 0 without a sink */
    for (int t = 0; t < n; t++)
        sum += s[t] = exp(s[t] - mx);
    for (int e = 0; e < hd; e++) {
        double a = 0;
        for (int t = 0; t < n; t++)
            a += s[t] * vals[(size_t)t * stride + e];
        out[e] = a / sum;
    }
    free(s);
}

/* Positions 0 .. n - 1 of one layer and kind as the cache holds them, into
 * dst (pos, n_kv * hd); a windowed layer's from its first page on. */
static inline void kvt_cache_rows(rvl_kvcache *kc, uint32_t l, int kind, uint32_t n,
                                  uint32_t n_kv, uint32_t hd, float *dst)
{
    static float page[32 * RVL_ATTN_MAX_HEAD_DIM];
    for (uint32_t pg = rvl_kvcache_first_page(kc, l); pg * 32 < n; pg++)
        for (uint32_t h = 0; h < n_kv; h++) {
            rvl_kvcache_read_page(kc, l, kind, pg, h, page);
            for (uint32_t j = 0; j < 32 && pg * 32 + j < n; j++)
                memcpy(dst + (size_t)(pg * 32 + j) * n_kv * hd + h * hd, page + (size_t)j * hd,
                       hd * sizeof(float));
        }
}

#endif
