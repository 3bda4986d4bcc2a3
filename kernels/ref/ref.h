/*
 * ref.h - helpers shared by the scalar reference kernels (kernels/ref/).
 *
 * Include first in every file of kernels/ref/: it turns off floating-point
 * contraction for the file. The reference kernels must give the same bits
 * as gguf-py's numpy code (one rounding per operation, in source order);
 * a fused multiply-add, which compilers may form from a*b+c when the target
 * has FMA (-march=native), would round once instead of twice.
 */
#ifndef RVL_KERNELS_REF_H
#define RVL_KERNELS_REF_H

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats.h"

#define RVL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define RVL_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Round to nearest, ties to even (what llama.cpp's nearest_int does in the
 * default rounding mode), for |f| < 2^22: adding 1.5*2^23 leaves the
 * rounded integer in the low mantissa bits. Larger magnitudes (and NaN,
 * which only pathological blocks produce) saturate instead of wrapping so
 * the callers' clamps still hold. */
static inline int rvl_nearest_int(float f)
{
    if (!(fabsf(f) <= 4194303.0f))
        return f > 0 ? 4194303 : f < 0 ? -4194303 : 0;
    float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline float rvl_ld_f32(const void *p)
{
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}

static inline uint16_t rvl_ld_u16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint32_t rvl_ld_u32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* 6-bit scale and min j (0..7) of Q4_K/Q5_K's 12-byte scales field:
 * bytes 0-3 hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7;
 * bytes 4-7 the same for the mins; bytes 8-11 the low nibbles of scale
 * (low) and min (high) 4-7. */
static inline void rvl_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* The 16 signed 6-bit scales of a Q3_K block, minus the 32 offset:
 * bytes 0-7 hold the low nibbles (scale j in byte j%8, high nibble when
 * j >= 8), bytes 8-11 the top 2 bits (scale j at byte 8 + j%4, bits
 * 2*(j/4)). */
static inline void rvl_q3_K_scales(const uint8_t *s, int8_t out[16])
{
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
        int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* ----------------------------------------------------------------------
 * The error-minimizing scale searches of llama.cpp's K-quants (search.c).
 * Each fits the n values x with levels L and returns the scale.
 * ---------------------------------------------------------------------- */

/* Signed levels L in [0, 2*nmax) meaning l - nmax; weighted least-squares
 * scale over 19 candidate inverse scales around -nmax/max. Weights: w, or
 * x^2 when w is NULL. */
float rvl_fit_signed(int n, int nmax, const float *x, const float *w, int8_t *L);
/* Signed levels with the iterative per-element refinement used by Q3_K
 * without importance weights (weights x^2). */
float rvl_fit_signed_iter(int n, int nmax, const float *x, int8_t *L);
/* Unsigned levels L in [0, nmax] with an offset: x ~ scale*L - *neg_min.
 * Grid search over nstep+1 inverse scales from (rmin + nmax)/(max-min) in
 * steps of rdelta; error is weighted |diff| (use_mad) or diff^2. Laux is
 * scratch of n bytes. w may be NULL (weights x^2) only with qkx3. */
float rvl_fit_affine2(int n, int nmax, const float *x, const float *w, uint8_t *L,
                      float *neg_min, uint8_t *Laux, float rmin, float rdelta,
                      int nstep, int use_mad);
float rvl_fit_affine3(int n, int nmax, const float *x, const float *w, uint8_t *L,
                      float *neg_min, uint8_t *Laux, float rmin, float rdelta,
                      int nstep, int use_mad);
/* Non-negative values (super-block scales) to levels 0..nmax under
 * weights w, with a scale search and iterative refinement. */
float rvl_fit_positive(int n, int nmax, const float *x, uint8_t *L, const float *w);

#endif
