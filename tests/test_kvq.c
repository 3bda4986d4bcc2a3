/*
 * test_kvq.c - the KV-cache page codecs (kernels/kvq.h):
 *
 *  - the tq codebooks are the Lloyd-Max quantizers of N(0, 1): symmetric,
 *    every centroid the conditional mean of its cell (cells bounded by the
 *    midpoints) to 1e-6, and their distortion the stated MSE;
 *  - the fast Walsh-Hadamard transform equals the product with the
 *    Hadamard matrix, and rotate/unrotate are inverse isometries;
 *  - sizes: bytes per token per head of every format;
 *  - tq formats refuse head sizes that are not powers of two, by name;
 *  - encode -> decode error: q8 and q4 within their rounding bound per
 *    element, and a relative MSE near the uniform-rounding prediction
 *    sum d^2 / 12; tq4 / tq3 near the Lloyd-Max distortion (Gaussian data
 *    and keys with outlier channels); on outlier keys KIVI's per-channel
 *    q4 beats per-token q4 by a wide margin;
 *  - page readers: scores and p . V, computed in the rotated domain for tq
 *    pages, equal the same sums over the decoded rows (to float rounding);
 *    every SIMD variant this machine runs equals ref within a float
 *    rounding bound; encoding row by row gives the page encoding's bytes.
 *
 * KVQ_VERBOSE=1 prints the measured errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "f16.h"
#include "kvq.h"
#include "ruvllm_tools.h"

static int verbose;

/* ======================================================================
 * Random data (splitmix64, fixed seed)
 * ====================================================================== */

static uint64_t rng = 0x243F6A8885A308D3ull;

static uint64_t r64(void)
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double runif(void)
{
    return ((double)(r64() >> 11) + 0.5) * 0x1p-53;
}

static float rnorm(void)
{
    return (float)(sqrt(-2 * log(runif())) * cos(6.283185307179586 * runif()));
}

/* n rows of hd: N(0, 1) coordinates; with outliers, channels 3, 17, 40
 * (mod hd) are scaled by 15 and shifted by 8 in every row (as keys of real
 * models: a few channels of large magnitude, of consistent sign) */
static void fill(float *x, int n, int hd, int outliers)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < hd; i++) {
            float v = rnorm();
            if (outliers && (i == 3 % hd || i == 17 % hd || i == 40 % hd)) /* is_outlier */
                v = 15 * v + 8;
            x[(size_t)j * hd + i] = v;
        }
}

static const int kinds[2] = { RVL_KVQ_KEY, RVL_KVQ_VALUE };

/* ======================================================================
 * Codebooks
 * ====================================================================== */

static double pdf(double x)
{
    return isinf(x) ? 0 : exp(-0.5 * x * x) / sqrt(2 * M_PI);
}

static double cdf(double x)
{
    return 0.5 * erfc(-x / sqrt(2));
}

static void test_codebooks_are_lloyd_max_for_the_normal(void **state)
{
    (void)state;
    static const int levels[2] = { 8, 16 };
    for (int t = 0; t < 2; t++) {
        const int L = levels[t];
        const float *c = rvl_kvq_codebook(L);
        assert_non_null(c);
        double b[17];
        b[0] = -INFINITY;
        b[L] = INFINITY;
        for (int i = 0; i < L; i++) {
            assert_true(c[i] == -c[L - 1 - i]); /* symmetric */
            if (i)
                assert_true(c[i] > c[i - 1]);
            if (i + 1 < L)
                b[i + 1] = 0.5 * ((double)c[i] + c[i + 1]); /* the nearest-centroid cells */
        }
        double mse = 0;
        for (int i = 0; i < L; i++) {
            /* the centroid condition: c_i = E[X | b_i < X < b_i+1] */
            const double p = cdf(b[i + 1]) - cdf(b[i]), m1 = pdf(b[i]) - pdf(b[i + 1]);
            assert_true(fabs(m1 / p - c[i]) < 1e-6);
            const double m2 = p + (isinf(b[i]) ? 0 : b[i] * pdf(b[i])) -
                              (isinf(b[i + 1]) ? 0 : b[i + 1] * pdf(b[i + 1]));
            mse += m2 - 2 * c[i] * m1 + (double)c[i] * c[i] * p;
        }
        /* the distortion the error tests below build on */
        assert_true(fabs(mse - rvl_kvq_codebook_mse(L)) < 1e-6);
        if (verbose)
            printf("# %d levels: mse %.9f\n", L, mse);
    }
    assert_null(rvl_kvq_codebook(4));
}

/* ======================================================================
 * Rotation
 * ====================================================================== */

static void test_fwht_equals_hadamard_matrix_product(void **state)
{
    (void)state;
    static const int ns[] = { 1, 2, 8, 64, 128, 256, 1024 };
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++) {
        const int n = ns[a];
        float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
        double x2 = 0;
        for (int i = 0; i < n; i++) {
            x[i] = y[i] = rnorm();
            x2 += (double)x[i] * x[i];
        }
        rvl_kvq_fwht(y, n);
        double err = 0;
        for (int i = 0; i < n; i++) {
            double s = 0; /* H_ij = (-1)^popcount(i & j) / sqrt(n) */
            for (int j = 0; j < n; j++)
                s += (__builtin_popcount((unsigned)(i & j)) & 1 ? -1.0 : 1.0) * x[j];
            s /= sqrt(n);
            err = fmax(err, fabs(s - y[i]));
        }
        assert_true(err <= 1e-6 * sqrt(x2) * (1 + log2(n)));
        /* D: +-1, not all equal; rotate then unrotate gives x back, and
         * keeps the norm */
        memcpy(y, x, (size_t)n * sizeof *x);
        rvl_kvq_rotate(y, n);
        double y2 = 0;
        for (int i = 0; i < n; i++)
            y2 += (double)y[i] * y[i];
        assert_true(fabs(y2 - x2) <= 1e-5 * x2);
        rvl_kvq_unrotate(y, n);
        for (int i = 0; i < n; i++)
            assert_true(fabsf(y[i] - x[i]) <= 1e-5f * (float)sqrt(x2));
        free(x);
        free(y);
    }
    int plus = 0;
    for (int i = 0; i < 1024; i++) {
        assert_true(fabsf(rvl_kvq_sign(i)) == 1.0f);
        plus += rvl_kvq_sign(i) > 0;
    }
    assert_in_range(plus, 512 - 64, 512 + 64);
}

/* ======================================================================
 * Formats, sizes, checks
 * ====================================================================== */

static void test_bytes_per_token_per_format(void **state)
{
    (void)state;
    const int K = RVL_KVQ_KEY, V = RVL_KVQ_VALUE;
    assert_true(rvl_kvq_token_bytes(RVL_KVQ_F16, K, 64) == 128);
    assert_true(rvl_kvq_token_bytes(RVL_KVQ_Q8, K, 64) == 68);
    assert_true(rvl_kvq_token_bytes(RVL_KVQ_Q4, K, 64) == 40);   /* 32 + 4 * 64 / 32 */
    assert_true(rvl_kvq_token_bytes(RVL_KVQ_Q4, V, 64) == 40);   /* 32 + 2 groups * 4 */
    assert_true(rvl_kvq_token_bytes(RVL_KVQ_TQ4, K, 64) == 34);
    assert_true(rvl_kvq_token_bytes(RVL_KVQ_TQ3, V, 64) == 26);
    assert_true(rvl_kvq_token_bytes(RVL_KVQ_TQ4, K, 128) == 66);
    assert_true(rvl_kvq_token_bytes(RVL_KVQ_Q8, V, 80) == 86);   /* groups 32, 32, 16 */
    assert_true(rvl_kvq_token_bytes(RVL_KVQ_F16, V, 128) / rvl_kvq_token_bytes(RVL_KVQ_TQ4, V, 128) >
                3.8);
    if (verbose)
        for (int hd = 64; hd <= 128; hd *= 2)
            for (int f = 0; f < RVL_KVQ_COUNT; f++)
                printf("# hd %d %-4s key %.2f value %.2f B/token\n", hd, rvl_kvq_name(f),
                       rvl_kvq_token_bytes(f, K, hd), rvl_kvq_token_bytes(f, V, hd));
    for (int f = 0; f < RVL_KVQ_COUNT; f++)
        assert_int_equal(rvl_kvq_parse(rvl_kvq_name(f)), f);
    assert_int_equal(rvl_kvq_parse("q5"), -1);
    assert_null(rvl_kvq_name(RVL_KVQ_COUNT));
}

static void test_tq_rejects_head_dims_that_are_not_powers_of_two(void **state)
{
    (void)state;
    const char *e = rvl_kvq_check(RVL_KVQ_TQ4, RVL_KVQ_KEY, 80);
    assert_non_null(e);
    assert_non_null(strstr(e, "tq4"));
    assert_non_null(strstr(e, "power-of-two"));
    assert_non_null(strstr(e, "80"));
    e = rvl_kvq_check(RVL_KVQ_TQ3, RVL_KVQ_VALUE, 96);
    assert_non_null(e);
    assert_non_null(strstr(e, "tq3"));
    assert_non_null(rvl_kvq_check(RVL_KVQ_TQ4, RVL_KVQ_KEY, 4)); /* too short for tq3 packing */
    assert_null(rvl_kvq_check(RVL_KVQ_TQ4, RVL_KVQ_KEY, 64));
    assert_null(rvl_kvq_check(RVL_KVQ_TQ3, RVL_KVQ_VALUE, 1024));
    for (int f = 0; f < 3; f++) { /* f16, q8, q4 take any head size */
        assert_null(rvl_kvq_check(f, RVL_KVQ_KEY, 80));
        assert_null(rvl_kvq_check(f, RVL_KVQ_VALUE, 5));
    }
    for (int f = 0; f < RVL_KVQ_COUNT; f++) {
        assert_non_null(rvl_kvq_check(f, RVL_KVQ_KEY, 0));
        assert_non_null(rvl_kvq_check(f, RVL_KVQ_KEY, 2048));
        assert_non_null(rvl_kvq_check(f, 2, 64));
    }
    assert_non_null(rvl_kvq_check(RVL_KVQ_COUNT, RVL_KVQ_KEY, 64));
}

/* ======================================================================
 * Encode -> decode error
 * ====================================================================== */

/* relative MSE sum |x - x^|^2 / sum |x|^2 of n rows through a page */
static double roundtrip(int fmt, int kind, int hd, const float *x, int n, float *y)
{
    void *page = malloc(rvl_kvq_page_bytes(fmt, kind, hd));
    rvl_kvq_encode_page(fmt, kind, hd, x, (size_t)hd, n, page);
    rvl_kvq_decode_page(fmt, kind, hd, page, n, y, (size_t)hd);
    free(page);
    double e = 0, s = 0;
    for (size_t i = 0; i < (size_t)n * hd; i++) {
        e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        s += (double)x[i] * x[i];
    }
    return e / s;
}

/*
 * q8 and q4: per element |x - x^| <= d/2 (d the f16 scale of its group),
 * plus for q4 what the f16 rounding of the minimum and scale can push a
 * clamped code off: 2^-10 (|m| + 15 d). And the relative MSE is close to
 * uniform rounding's prediction sum d^2 / 12 per element (0.7 .. 1.2 of
 * it: the extremes of each group quantize exactly, so somewhat less).
 * Returns the relative MSE.
 */
static double check_affine(int fmt, int kind, int hd, const float *x, int n)
{
    float *y = malloc((size_t)n * hd * sizeof *y);
    const double rel = roundtrip(fmt, kind, hd, x, n, y);
    void *page = malloc(rvl_kvq_page_bytes(fmt, kind, hd));
    rvl_kvq_encode_page(fmt, kind, hd, x, (size_t)hd, n, page);
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const int ng = rvl_kvq_groups(hd);
    double pred = 0, s = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < hd; i++) {
            float d, m = 0;
            if (fmt == RVL_KVQ_Q8) {
                d = rvl_f16_to_f32(sd[j * ng + i / 32]);
            } else if (kind == RVL_KVQ_KEY) {
                d = rvl_f16_to_f32(sd[i]);
                m = rvl_f16_to_f32(sd[hd + i]);
            } else {
                d = rvl_f16_to_f32(sd[(j * ng + i / 32) * 2]);
                m = rvl_f16_to_f32(sd[(j * ng + i / 32) * 2 + 1]);
            }
            const float xi = x[(size_t)j * hd + i], yi = y[(size_t)j * hd + i];
            const float bound = 0.5f * d * (1 + 1e-6f) + 0x1p-10f * (fabsf(m) + 15 * d) * (fmt == RVL_KVQ_Q4) +
                                1e-6f * fabsf(xi);
            if (!(fabsf(xi - yi) <= bound))
                fail_msg("%s kind %d hd %d row %d ch %d: |%g - %g| > %g", rvl_kvq_name(fmt), kind,
                         hd, j, i, xi, yi, bound);
            pred += (double)d * d / 12;
            s += (double)xi * xi;
        }
    pred /= s;
    if (verbose)
        printf("# %-3s %s hd %3d: rel mse %.3g, uniform-rounding prediction %.3g\n",
               rvl_kvq_name(fmt), kind ? "value" : "key  ", hd, rel, pred);
    if (!(rel >= (hd < 32 ? 0.45 : 0.75) * pred && rel <= 1.2 * pred))
        fail_msg("%s kind %d hd %d: rel mse %g, prediction %g", rvl_kvq_name(fmt), kind, hd, rel,
                 pred);
    free(page);
    free(y);
    return rel;
}

/*
 * tq: u = H D x / |x| has coordinates that, times sqrt(hd), are close to
 * N(0, 1) whatever x (the random signs spread any channel over all
 * coordinates), so the codes carry the Lloyd-Max distortion D per
 * coordinate: E|u sqrt(hd) - c|^2 = D hd, with the error orthogonal to c
 * (centroid condition), so |c|^2 = (1 - D) hd. Renormalizing c to |x|
 * then leaves the relative error 2 - 2 cos(u, c) = 2 - 2 sqrt(1 - D)
 * = D + D^2 / 4 + ... : 0.00952 (tq4), 0.0349 (tq3). At finite hd the
 * coordinates have slightly lighter tails than N(0, 1); the test accepts
 * 0.85 .. 1.1 of the theory.
 */
static double check_tq(int fmt, int kind, int hd, const float *x, int n)
{
    float *y = malloc((size_t)n * hd * sizeof *y);
    const double rel = roundtrip(fmt, kind, hd, x, n, y);
    const double D = rvl_kvq_codebook_mse(fmt == RVL_KVQ_TQ4 ? 16 : 8);
    const double theory = 2 - 2 * sqrt(1 - D);
    if (verbose)
        printf("# %-3s %s hd %3d: rel mse %.5f, theory %.5f (%.3f)\n", rvl_kvq_name(fmt),
               kind ? "value" : "key  ", hd, rel, theory, rel / theory);
    assert_true(rel >= 0.85 * theory && rel <= 1.1 * theory);
    /* norms are kept: |x^| = |x| to f16 rounding */
    for (int j = 0; j < n; j++) {
        double a = 0, b = 0;
        for (int i = 0; i < hd; i++) {
            a += (double)x[(size_t)j * hd + i] * x[(size_t)j * hd + i];
            b += (double)y[(size_t)j * hd + i] * y[(size_t)j * hd + i];
        }
        assert_true(fabs(sqrt(b) / sqrt(a) - 1) < 0x1p-10);
    }
    free(y);
    return rel;
}

static void test_roundtrip_error_on_gaussian_data(void **state)
{
    (void)state;
    static const int hds[] = { 64, 128, 80, 256, 5 };
    enum { N = 32 * 64 };
    float *x = malloc((size_t)N * 256 * sizeof *x);
    for (size_t a = 0; a < sizeof hds / sizeof *hds; a++) {
        const int hd = hds[a];
        for (int k = 0; k < 2; k++) {
            double q8 = 0, q4 = 0;
            for (int p = 0; p < 8; p++) { /* pages */
                fill(x, 32, hd, 0);
                q8 += check_affine(RVL_KVQ_Q8, kinds[k], hd, x, 32) / 8;
                q4 += check_affine(RVL_KVQ_Q4, kinds[k], hd, x, 32) / 8;
            }
            /* 32 samples of N(0, 1) have an absolute maximum near 2.4 and
             * a range near 4.1: int8 with d = 2.4 / 127 gives d^2 / 12 =
             * 3e-5, 4 bits with d = 4.1 / 15 give 6.2e-3 (per token or per
             * channel alike: both groups are 32 samples) */
            assert_true(q8 < 4.5e-5);
            assert_true(q4 < 8e-3);
        }
    }
    /* tq over many vectors (the distortion is an average) */
    static const int tq_hds[] = { 64, 128, 256 };
    for (size_t a = 0; a < 3; a++) {
        const int hd = tq_hds[a], n = N * 64 / hd;
        fill(x, n, hd, 0);
        for (int k = 0; k < 2; k++) {
            check_tq(RVL_KVQ_TQ4, kinds[k], hd, x, n < 32 ? n : 32);
            /* a whole batch through pages of 32 */
            float *y = malloc((size_t)n * hd * sizeof *y);
            double e = 0, s = 0;
            for (int fmt = RVL_KVQ_TQ4; fmt <= RVL_KVQ_TQ3; fmt++) {
                e = s = 0;
                for (int p = 0; p < n; p += 32) {
                    const float *xp = x + (size_t)p * hd;
                    const double r = roundtrip(fmt, kinds[k], hd, xp, 32, y);
                    double sp = 0;
                    for (int i = 0; i < 32 * hd; i++)
                        sp += (double)xp[i] * xp[i];
                    e += r * sp;
                    s += sp;
                }
                const double D = rvl_kvq_codebook_mse(fmt == RVL_KVQ_TQ4 ? 16 : 8);
                const double theory = 2 - 2 * sqrt(1 - D);
                if (verbose)
                    printf("# %s hd %d over %d vectors: rel mse %.5f, theory %.5f\n",
                           rvl_kvq_name(fmt), hd, n, e / s, theory);
                assert_true(e / s >= 0.9 * theory && e / s <= 1.05 * theory);
            }
            free(y);
        }
    }
    free(x);
}

static int is_outlier(int hd, int i)
{
    return i == 3 % hd || i == 17 % hd || i == 40 % hd;
}

/* relative MSE of a page of 32 rows over the ordinary channels only */
static double ordinary_error(int fmt, int kind, int hd, const float *x, float *y)
{
    roundtrip(fmt, kind, hd, x, 32, y);
    double e = 0, s = 0;
    for (int j = 0; j < 32; j++)
        for (int i = 0; i < hd; i++)
            if (!is_outlier(hd, i)) {
                const double d = (double)x[j * hd + i] - y[j * hd + i];
                e += d * d;
                s += (double)x[j * hd + i] * x[j * hd + i];
            }
    return e / s;
}

static void test_outlier_channels_per_channel_keys_and_rotation(void **state)
{
    (void)state;
    static const int hds[] = { 64, 128 };
    float *x = malloc((size_t)32 * 128 * sizeof *x);
    for (int a = 0; a < 2; a++) {
        const int hd = hds[a];
        double kivi = 0, per_token = 0, tq4 = 0, tq3 = 0, q8 = 0, kivi_n = 0, per_token_n = 0;
        for (int p = 0; p < 16; p++) {
            fill(x, 32, hd, 1);
            kivi += check_affine(RVL_KVQ_Q4, RVL_KVQ_KEY, hd, x, 32) / 16;
            per_token += check_affine(RVL_KVQ_Q4, RVL_KVQ_VALUE, hd, x, 32) / 16;
            q8 += check_affine(RVL_KVQ_Q8, RVL_KVQ_KEY, hd, x, 32) / 16;
            float y[32 * 128];
            kivi_n += ordinary_error(RVL_KVQ_Q4, RVL_KVQ_KEY, hd, x, y) / 16;
            per_token_n += ordinary_error(RVL_KVQ_Q4, RVL_KVQ_VALUE, hd, x, y) / 16;
            tq4 += roundtrip(RVL_KVQ_TQ4, RVL_KVQ_KEY, hd, x, 32, y) / 16;
            tq3 += roundtrip(RVL_KVQ_TQ3, RVL_KVQ_KEY, hd, x, 32, y) / 16;
        }
        if (verbose)
            printf("# outliers hd %d: rel mse q4 per-channel %.5f (ordinary channels %.5f), "
                   "q4 per-token %.5f (%.5f), q8 %.2g, tq4 %.5f, tq3 %.5f\n",
                   hd, kivi, kivi_n, per_token, per_token_n, q8, tq4, tq3);
        /* per-channel ranges give the outlier channels their own scale:
         * the ordinary channels keep Gaussian-sized steps (6.2e-3 as on
         * Gaussian data), where a per-token group holding an outlier
         * channel (8 + 15 z) has a range of ~15 and a step of ~1 on them
         * (observed: 0.18 of their variance, 30 times worse) */
        assert_true(kivi_n < 8e-3);
        assert_true(kivi_n * 10 < per_token_n);
        /* the rotation spreads the outliers over every coordinate: tq's
         * error stays at the Lloyd-Max distortion (or below: the shared
         * outlier pattern makes the coordinates less heavy-tailed) */
        const double t4 = 2 - 2 * sqrt(1 - rvl_kvq_codebook_mse(16));
        const double t3 = 2 - 2 * sqrt(1 - rvl_kvq_codebook_mse(8));
        assert_true(tq4 <= 1.1 * t4);
        assert_true(tq3 <= 1.1 * t3);
    }
    free(x);
}

static void test_row_encoding_equals_page_encoding(void **state)
{
    (void)state;
    static const int hds[] = { 64, 80, 128 };
    float x[32 * 128];
    for (size_t a = 0; a < 3; a++) {
        const int hd = hds[a];
        fill(x, 32, hd, 0);
        for (int f = 0; f < RVL_KVQ_COUNT; f++)
            for (int k = 0; k < 2; k++) {
                if (rvl_kvq_check(f, kinds[k], hd))
                    continue;
                const size_t pb = rvl_kvq_page_bytes(f, kinds[k], hd);
                uint8_t *p1 = malloc(pb), *p2 = malloc(pb);
                rvl_kvq_encode_page(f, kinds[k], hd, x, (size_t)hd, 20, p1);
                if (f == RVL_KVQ_Q4 && kinds[k] == RVL_KVQ_KEY) {
                    /* per channel: a row re-encoded with the page's ranges
                     * gets the same codes */
                    memcpy(p2, p1, pb);
                    rvl_kvq_encode_row(f, kinds[k], hd, x + 7 * hd, 7, p2);
                } else {
                    memset(p2, 0, pb);
                    for (int j = 19; j >= 0; j--)
                        rvl_kvq_encode_row(f, kinds[k], hd, x + (size_t)j * hd, j, p2);
                }
                assert_memory_equal(p1, p2, pb);
                /* rows not encoded decode to zero */
                float y[32 * 128];
                rvl_kvq_decode_page(f, kinds[k], hd, p1, 32, y, (size_t)hd);
                for (int i = 20 * hd; i < 32 * hd; i++)
                    assert_true(y[i] == 0 || (f == RVL_KVQ_Q4 && kinds[k] == RVL_KVQ_KEY));
                free(p1);
                free(p2);
            }
        /* a zero vector survives tq */
        float z[128] = { 0 }, y[128];
        uint8_t page[32 * 64 + 64];
        rvl_kvq_encode_page(RVL_KVQ_TQ4, RVL_KVQ_KEY, hd < 128 ? 64 : 128, z, 0, 1, page);
        rvl_kvq_decode_page(RVL_KVQ_TQ4, RVL_KVQ_KEY, hd < 128 ? 64 : 128, page, 1, y, 0);
        for (int i = 0; i < (hd < 128 ? 64 : 128); i++)
            assert_true(y[i] == 0);
    }
}

/* ======================================================================
 * Page readers
 * ====================================================================== */

/* The magnitude of the terms an element of a decoded row is summed from:
 * |x^| for f16, q8, tq; |m| + |d c| for q4 (x^ = m + d c, which may cancel). */
static double term_mag(int fmt, int kind, int hd, const void *page, int j, int i, float xhat)
{
    if (fmt != RVL_KVQ_Q4)
        return fabs(xhat);
    const uint16_t *sd = rvl_kvq_side(fmt, hd, page);
    const int ng = rvl_kvq_groups(hd);
    const uint16_t *g = kind == RVL_KVQ_KEY ? NULL : sd + ((size_t)j * ng + i / 32) * 2;
    const float m = rvl_f16_to_f32(g ? g[1] : sd[hd + i]); /* |d c| <= |x^| + |m| */
    return 2 * fabs(m) + fabs(xhat);
}

typedef struct {
    int fmt, hd;
    void *kpage, *vpage;
    float *k, *v;      /* decoded rows [32][hd] */
} page_case;

static void make_case(page_case *c, int fmt, int hd, int outliers)
{
    c->fmt = fmt;
    c->hd = hd;
    float *x = malloc((size_t)32 * hd * sizeof *x);
    c->k = malloc((size_t)32 * hd * sizeof *x);
    c->v = malloc((size_t)32 * hd * sizeof *x);
    c->kpage = malloc(rvl_kvq_page_bytes(fmt, RVL_KVQ_KEY, hd));
    c->vpage = malloc(rvl_kvq_page_bytes(fmt, RVL_KVQ_VALUE, hd));
    fill(x, 32, hd, outliers);
    rvl_kvq_encode_page(fmt, RVL_KVQ_KEY, hd, x, (size_t)hd, 32, c->kpage);
    rvl_kvq_decode_page(fmt, RVL_KVQ_KEY, hd, c->kpage, 32, c->k, (size_t)hd);
    fill(x, 32, hd, 0);
    rvl_kvq_encode_page(fmt, RVL_KVQ_VALUE, hd, x, (size_t)hd, 32, c->vpage);
    rvl_kvq_decode_page(fmt, RVL_KVQ_VALUE, hd, c->vpage, 32, c->v, (size_t)hd);
    free(x);
}

static void free_case(page_case *c)
{
    free(c->kpage);
    free(c->vpage);
    free(c->k);
    free(c->v);
}

static int is_tq(int fmt)
{
    return fmt == RVL_KVQ_TQ4 || fmt == RVL_KVQ_TQ3;
}

/*
 * Scores of q against the page and p . V, by the readers of kk (q rotated
 * and the output rotated back for tq), against double-precision sums over
 * the decoded rows. Per score, float rounding of an hd-term dot product
 * (with the rotations, two more O(log hd) passes): within
 * 2^-16 sum_i |q_i k_i| (+ |q| |k| 2^-16 for tq, whose rotated terms do
 * not share the decoded terms' magnitudes); the same for each output
 * element with sum_j |p_j v_ji| (+ 2^-16 sum_j p_j |v_j|).
 */
static void check_readers(const rvl_kvq_kernels *kk, const page_case *c, int j0, int j1,
                          double *worst)
{
    const int hd = c->hd;
    float q[1024], qr[1024], s[32], p[32], acc[1024];
    for (int i = 0; i < hd; i++)
        q[i] = qr[i] = rnorm();
    if (is_tq(c->fmt))
        rvl_kvq_rotate(qr, hd);
    for (int j = 0; j < 32; j++) {
        s[j] = NAN;
        p[j] = j >= j0 && j <= j1 ? (float)runif() : NAN;
    }
    kk->scores(c->fmt, hd, c->kpage, j0, j1, qr, 1, s);
    double q2 = 0;
    for (int i = 0; i < hd; i++)
        q2 += (double)q[i] * q[i];
    for (int j = 0; j < 32; j++) {
        if (j < j0 || j > j1) {
            assert_true(isnan(s[j])); /* rows outside [j0, j1] untouched */
            continue;
        }
        double e = 0, a = 0, k2 = 0;
        for (int i = 0; i < hd; i++) {
            const double t = (double)q[i] * c->k[j * hd + i];
            e += t;
            a += fabs(q[i]) * term_mag(c->fmt, RVL_KVQ_KEY, hd, c->kpage, j, i, c->k[j * hd + i]);
            k2 += (double)c->k[j * hd + i] * c->k[j * hd + i];
        }
        const double tol = 0x1p-16 * (a + (is_tq(c->fmt) ? sqrt(q2 * k2) : 0)) + 1e-30;
        const double r = fabs(s[j] - e) / tol;
        *worst = r > *worst ? r : *worst;
        if (!(r <= 1))
            fail_msg("%s scores %s hd %d row %d: %.9g vs %.9g (tol %.3g)", kk->name,
                     rvl_kvq_name(c->fmt), hd, j, s[j], e, tol);
    }
    for (int i = 0; i < hd; i++)
        acc[i] = 0;
    kk->accum(c->fmt, hd, c->vpage, j0, j1, p, 1, acc);
    if (is_tq(c->fmt))
        rvl_kvq_unrotate(acc, hd);
    double pv = 0;
    for (int j = j0; j <= j1; j++) {
        double v2 = 0;
        for (int i = 0; i < hd; i++)
            v2 += (double)c->v[j * hd + i] * c->v[j * hd + i];
        pv += p[j] * sqrt(v2);
    }
    for (int i = 0; i < hd; i++) {
        double e = 0, a = 0;
        for (int j = j0; j <= j1; j++) {
            e += (double)p[j] * c->v[j * hd + i];
            a += p[j] * term_mag(c->fmt, RVL_KVQ_VALUE, hd, c->vpage, j, i, c->v[j * hd + i]);
        }
        const double tol = 0x1p-16 * (a + (is_tq(c->fmt) ? pv : 0)) + 1e-30;
        const double r = fabs(acc[i] - e) / tol;
        *worst = r > *worst ? r : *worst;
        if (!(r <= 1))
            fail_msg("%s accum %s hd %d ch %d: %.9g vs %.9g (tol %.3g)", kk->name,
                     rvl_kvq_name(c->fmt), hd, i, acc[i], e, tol);
    }
}

static void test_readers_equal_sums_over_decoded_rows(void **state)
{
    (void)state;
    static const int hds[] = { 8, 16, 32, 64, 128, 256, 1024, 80, 96, 5, 33 };
    static const int ranges[][2] = { { 0, 31 }, { 0, 0 }, { 5, 20 }, { 31, 31 }, { 1, 30 } };
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++) {
        const rvl_kvq_kernels *kk = rvl_kvq_get_isa(isa);
        if (!kk)
            continue;
        double worst[RVL_KVQ_COUNT] = { 0 };
        for (int f = 0; f < RVL_KVQ_COUNT; f++)
            for (size_t a = 0; a < sizeof hds / sizeof *hds; a++) {
                if (rvl_kvq_check(f, RVL_KVQ_KEY, hds[a]))
                    continue;
                for (int o = 0; o < 2; o++) {
                    page_case c;
                    make_case(&c, f, hds[a], o);
                    for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++)
                        check_readers(kk, &c, ranges[r][0], ranges[r][1], &worst[f]);
                    free_case(&c);
                }
            }
        if (verbose)
            for (int f = 0; f < RVL_KVQ_COUNT; f++)
                printf("# %s %s: worst error / tolerance %.3f\n", kk->name, rvl_kvq_name(f),
                       worst[f]);
    }
}

/*
 * Every SIMD variant against ref, same inputs: the same products summed
 * in another order, so within 2^-18 of the sum of the magnitudes of the
 * terms (hd terms per score, 32 per accumulated element; hd <= 1024).
 */
static void test_simd_readers_equal_ref(void **state)
{
    (void)state;
    static const int hds[] = { 16, 32, 64, 128, 256, 80, 96, 200 };
    const rvl_kvq_kernels *ref = rvl_kvq_get_isa(RVL_ISA_REF);
    assert_non_null(ref);
    assert_non_null(rvl_kvq_get());
    int ran = 0;
    for (int isa = 1; isa < RVL_ISA_COUNT; isa++) {
        const rvl_kvq_kernels *kk = rvl_kvq_get_isa(isa);
        if (!kk)
            continue;
        ran++;
        double worst = 0;
        for (int f = 0; f < RVL_KVQ_COUNT; f++)
            for (size_t a = 0; a < sizeof hds / sizeof *hds; a++) {
                const int hd = hds[a];
                if (rvl_kvq_check(f, RVL_KVQ_KEY, hd))
                    continue;
                page_case c;
                make_case(&c, f, hd, 1);
                float q[256], s1[32], s2[32], p[32], a1[256], a2[256];
                for (int i = 0; i < hd; i++)
                    q[i] = rnorm();
                for (int j = 0; j < 32; j++)
                    p[j] = (float)runif();
                for (int j0 = 0; j0 < 32; j0 += 7)
                    for (int j1 = j0; j1 < 32; j1 += 5) {
                        ref->scores(f, hd, c.kpage, j0, j1, q, 1, s1);
                        kk->scores(f, hd, c.kpage, j0, j1, q, 1, s2);
                        for (int j = j0; j <= j1; j++) {
                            /* the terms: q_i times the centroid / code, scaled */
                            double m = 0;
                            for (int i = 0; i < hd; i++)
                                m += fabs((double)q[i]) *
                                     term_mag(f, RVL_KVQ_KEY, hd, c.kpage, j, i, c.k[j * hd + i]);
                            if (is_tq(f)) { /* rotated-domain terms: bound by |q| |k| */
                                double q2 = 0, k2 = 0;
                                for (int i = 0; i < hd; i++) {
                                    q2 += (double)q[i] * q[i];
                                    k2 += (double)c.k[j * hd + i] * c.k[j * hd + i];
                                }
                                m = sqrt(hd * q2 * k2);
                            }
                            const double r = fabs((double)s1[j] - s2[j]) / (0x1p-18 * m + 1e-30);
                            worst = r > worst ? r : worst;
                            if (!(r <= 1))
                                fail_msg("%s %s hd %d score %d: %.9g vs ref %.9g", kk->name,
                                         rvl_kvq_name(f), hd, j, s2[j], s1[j]);
                        }
                        for (int i = 0; i < hd; i++)
                            a1[i] = a2[i] = 0.25f * (float)i;
                        ref->accum(f, hd, c.vpage, j0, j1, p, 1, a1);
                        kk->accum(f, hd, c.vpage, j0, j1, p, 1, a2);
                        for (int i = 0; i < hd; i++) {
                            double m = 0.25 * i;
                            for (int j = j0; j <= j1; j++) {
                                double v = term_mag(f, RVL_KVQ_VALUE, hd, c.vpage, j, i,
                                                    c.v[j * hd + i]);
                                if (is_tq(f)) { /* rotated: |v_j| bounds each coordinate */
                                    double v2 = 0;
                                    for (int t = 0; t < hd; t++)
                                        v2 += (double)c.v[j * hd + t] * c.v[j * hd + t];
                                    v = sqrt(v2);
                                }
                                m += p[j] * v;
                            }
                            const double r = fabs((double)a1[i] - a2[i]) / (0x1p-18 * m + 1e-30);
                            worst = r > worst ? r : worst;
                            if (!(r <= 1))
                                fail_msg("%s %s hd %d acc %d: %.9g vs ref %.9g", kk->name,
                                         rvl_kvq_name(f), hd, i, a2[i], a1[i]);
                        }
                    }
                free_case(&c);
            }
        if (verbose)
            printf("# %s vs ref: worst difference / bound %.3f\n", kk->name, worst);
    }
    if (verbose && !ran)
        printf("# no SIMD variant runs here\n");
}

/*
 * The readers of several query heads (one GQA group: a page decoded once
 * for all of them) give each head exactly what a call for that head alone
 * gives, and leave the rows outside [j0, j1] untouched; nq up to 6 covers
 * the variants' passes of several heads and a partial last pass.
 */
static void test_readers_of_several_heads_equal_one_head_at_a_time(void **state)
{
    (void)state;
    static const int hds[] = { 16, 32, 64, 128, 256, 80 };
    static const int ranges[][2] = { { 0, 31 }, { 3, 3 }, { 5, 20 }, { 16, 31 }, { 1, 17 } };
    enum { NQ = 6 };
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++) {
        const rvl_kvq_kernels *kk = rvl_kvq_get_isa(isa);
        if (!kk)
            continue;
        for (int f = 0; f < RVL_KVQ_COUNT; f++)
            for (size_t a = 0; a < sizeof hds / sizeof *hds; a++) {
                const int hd = hds[a];
                if (rvl_kvq_check(f, RVL_KVQ_KEY, hd))
                    continue;
                page_case c;
                make_case(&c, f, hd, 1);
                static float q[NQ * 256], p[NQ * 32], s1[NQ * 32], s2[NQ * 32];
                static float a1[NQ * 256], a2[NQ * 256];
                for (int i = 0; i < NQ * hd; i++)
                    q[i] = rnorm();
                for (int i = 0; i < NQ * 32; i++)
                    p[i] = (float)runif();
                for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++)
                    for (int nq = 1; nq <= NQ; nq++) {
                        const int j0 = ranges[r][0], j1 = ranges[r][1];
                        for (int i = 0; i < NQ * 32; i++)
                            s1[i] = s2[i] = NAN;
                        for (int i = 0; i < NQ * hd; i++)
                            a1[i] = a2[i] = 0.125f * (float)(i % 37);
                        kk->scores(f, hd, c.kpage, j0, j1, q, nq, s1);
                        kk->accum(f, hd, c.vpage, j0, j1, p, nq, a1);
                        for (int h = 0; h < nq; h++) {
                            kk->scores(f, hd, c.kpage, j0, j1, q + h * hd, 1, s2 + h * 32);
                            kk->accum(f, hd, c.vpage, j0, j1, p + h * 32, 1, a2 + h * hd);
                        }
                        for (int i = 0; i < NQ * 32; i++) {
                            const int h = i / 32, j = i % 32;
                            if (h >= nq || j < j0 || j > j1) {
                                assert_true(isnan(s1[i]));
                                continue;
                            }
                            if (!(s1[i] == s2[i]))
                                fail_msg("%s %s hd %d nq %d head %d score %d: %.9g vs %.9g",
                                         kk->name, rvl_kvq_name(f), hd, nq, h, j, s1[i], s2[i]);
                        }
                        for (int i = 0; i < NQ * hd; i++)
                            if (!(a1[i] == a2[i]))
                                fail_msg("%s %s hd %d nq %d acc %d: %.9g vs %.9g", kk->name,
                                         rvl_kvq_name(f), hd, nq, i, a1[i], a2[i]);
                    }
                free_case(&c);
            }
    }
}

int main(void)
{
    verbose = getenv("KVQ_VERBOSE") && *getenv("KVQ_VERBOSE") == '1';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codebooks_are_lloyd_max_for_the_normal),
        cmocka_unit_test(test_fwht_equals_hadamard_matrix_product),
        cmocka_unit_test(test_bytes_per_token_per_format),
        cmocka_unit_test(test_tq_rejects_head_dims_that_are_not_powers_of_two),
        cmocka_unit_test(test_roundtrip_error_on_gaussian_data),
        cmocka_unit_test(test_outlier_channels_per_channel_keys_and_rotation),
        cmocka_unit_test(test_row_encoding_equals_page_encoding),
        cmocka_unit_test(test_readers_equal_sums_over_decoded_rows),
        cmocka_unit_test(test_simd_readers_equal_ref),
        cmocka_unit_test(test_readers_of_several_heads_equal_one_head_at_a_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
