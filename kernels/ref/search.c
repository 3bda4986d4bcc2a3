/*
 * search.c - the scale searches behind llama.cpp's K-quant and legacy
 * importance-weighted quantizers (ggml-quants.c: make_qx_quants,
 * make_q3_quants, make_qkx2_quants, make_qkx3_quants, make_qp_quants).
 *
 * Same mathematics and the same order of float operations as llama.cpp, so
 * that a model quantized here matches one quantized by llama-quantize; the
 * code is ours. All of them fit one small group (16 or 32 values, or the 8
 * or 16 sub-block scales of a super-block).
 */
#include "ref.h"

#define GROUP_MAX_EPS 1e-15f

/* ======================================================================
 * Signed levels, symmetric: x ~ scale * (L - nmax)
 * ====================================================================== */

static inline int clamp_signed(int l, int nmax)
{
    return RVL_MAX(-nmax, RVL_MIN(nmax - 1, l));
}

float rvl_fit_signed(int n, int nmax, const float *x, const float *w, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }

    /* start: round to nearest with the extreme value on the -nmax level */
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clamp_signed(rvl_nearest_int(iscale * x[i]), nmax);
        L[i] = (int8_t)(l + nmax);
        float wi = w ? w[i] : x[i] * x[i];
        sumlx += wi * x[i] * l;
        suml2 += wi * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;

    /* try 18 nearby inverse scales; keep the best least-squares fit */
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp_signed(rvl_nearest_int(iscale * x[i]), nmax);
            float wi = w ? w[i] : x[i] * x[i];
            sumlx += wi * x[i] * l;
            suml2 += wi * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clamp_signed(rvl_nearest_int(iscale * x[i]), nmax));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

float rvl_fit_signed_iter(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clamp_signed(rvl_nearest_int(iscale * x[i]), nmax);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    /* coordinate descent: move one level at a time to its least-squares
     * optimum given the others, while the fit improves */
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = clamp_signed(rvl_nearest_int(x[i] * sl2 / slx), nmax);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ======================================================================
 * Unsigned levels with an offset: x ~ scale * L + min (min <= 0)
 * ====================================================================== */

/* The two variants differ in the default weights (qkx3: x^2 when w is
 * NULL), the degenerate-range test, and qkx3's guard against the running
 * min sitting at or beyond max during the search. */
static float fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L,
                        float *neg_min, uint8_t *Laux, float rmin, float rdelta,
                        int nstep, int use_mad, int v3)
{
#define W(i) (w ? w[i] : x[i] * x[i])
    float min = x[0], max = x[0];
    float sum_w = W(0);
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float wi = W(i);
        sum_w += wi;
        sum_x += wi * x[i];
    }
    if (min > 0)
        min = 0;
    if (v3 ? max <= min : max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = rvl_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)RVL_MAX(0, RVL_MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += W(i) * diff;
    }
    if (nstep < 1) {
        *neg_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l;
            if (v3) {
                float v = iscale * (x[i] - min);
                l = v > 0 ? rvl_nearest_int(RVL_MIN(v, (float)nmax)) : 0;
            } else {
                l = RVL_MAX(0, RVL_MIN(nmax, rvl_nearest_int(iscale * (x[i] - min))));
            }
            Laux[i] = (uint8_t)l;
            float wi = W(i);
            sum_l += wi * l;
            sum_l2 += wi * l * l;
            sum_xl += wi * l * x[i];
        }
        /* weighted least squares for scale and min given these levels */
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += W(i) * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
#undef W
}

float rvl_fit_affine2(int n, int nmax, const float *x, const float *w, uint8_t *L,
                      float *neg_min, uint8_t *Laux, float rmin, float rdelta,
                      int nstep, int use_mad)
{
    return fit_affine(n, nmax, x, w, L, neg_min, Laux, rmin, rdelta, nstep, use_mad, 0);
}

float rvl_fit_affine3(int n, int nmax, const float *x, const float *w, uint8_t *L,
                      float *neg_min, uint8_t *Laux, float rmin, float rdelta,
                      int nstep, int use_mad)
{
    return fit_affine(n, nmax, x, w, L, neg_min, Laux, rmin, rdelta, nstep, use_mad, 1);
}

/* ======================================================================
 * Non-negative values to levels 0..nmax (super-block scales and mins)
 * ====================================================================== */

float rvl_fit_positive(int n, int nmax, const float *x, uint8_t *L, const float *w)
{
    float max = 0;
    for (int i = 0; i < n; i++)
        max = RVL_MAX(max, x[i]);
    if (max < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++)
        L[i] = (uint8_t)rvl_nearest_int(iscale * x[i]);
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * L[i];
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0)
            continue;
        float iscale_is = (0.1f * is + nmax) / max;
        float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = RVL_MIN(nmax, rvl_nearest_int(iscale_is * x[i]));
            float diff = x[i] - scale_is * l;
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = RVL_MIN(nmax, rvl_nearest_int(iscale * x[i]));
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * l;
        suml2 += w[i] * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * L[i];
            float sl2 = suml2 - w[i] * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = RVL_MIN(nmax, rvl_nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    slx += w[i] * x[i] * new_l;
                    sl2 += w[i] * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}
