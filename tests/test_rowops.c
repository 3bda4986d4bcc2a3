/*
 * test_rowops.c - the forward pass's row steps and matmul:
 *
 *  - kernels/rowops.h's scalar RMSNorm, RoPE (both pairings, partial
 *    rotation), SwiGLU and softmax against the same formulas in double,
 *    within a few float roundings;
 *  - lib/engine/ops.h's pool wrappers give the bits of the kernel row by
 *    row, whatever the thread count;
 *  - lib/engine/matmul.h gives the same bits for every thread count, for
 *    a token alone or in a batch, row-major or packed, and each output is
 *    the dot product of its own weight row and token (checked against a
 *    double-precision dot of the dequantized row, within the activation
 *    quantization's error).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/matmul.h"
#include "engine/ops.h"
#include "dispatch.h"
#include "formats.h"
#include "rowops.h"

/* ======================================================================
 * Helpers
 * ====================================================================== */

static uint64_t rng = 0x12345678;

/* uniform in [-1, 1) */
static float unif(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 23) - 1.0);
}

static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = unif() * scale;
}

/* |got - want| <= ulps * 2^-24 * mag (mag: the size of the terms that
 * were rounded) */
static void assert_close(float got, double want, double mag, double ulps)
{
    const double tol = ulps * ldexp(1.0, -24) * mag + 1e-37;
    if (!(fabs((double)got - want) <= tol))
        fail_msg("got %.9g, want %.9g (tolerance %.3g)", (double)got, want, tol);
}

static rvl_pool *pool_of(int n)
{
    rvl_pool *p = NULL;
    assert_int_equal(rvl_pool_open(&p, n), 0);
    return p;
}

/* ======================================================================
 * kernels/rowops.h against double precision
 * ====================================================================== */

static void test_rmsnorm_matches_double(void **state)
{
    (void)state;
    static const int ns[] = {1, 7, 64, 576, 4096};
    for (size_t c = 0; c < sizeof ns / sizeof *ns; c++) {
        const int n = ns[c];
        float *x = malloc(n * sizeof *x), *w = malloc(n * sizeof *w), *y = malloc(n * sizeof *y);
        fill(x, n, 3.0f);
        fill(w, n, 2.0f);
        const float eps = 1e-5f;
        rmsnorm_f32_ref(y, x, w, n, eps);
        double ss = 0;
        for (int i = 0; i < n; i++)
            ss += (double)x[i] * x[i];
        const double scale = 1.0 / sqrt(ss / n + eps);
        for (int i = 0; i < n; i++)
            assert_close(y[i], x[i] * scale * w[i], fabs(x[i] * scale * w[i]), 8);
        /* in place: the same bits */
        rmsnorm_f32_ref(x, x, w, n, eps);
        assert_memory_equal(x, y, n * sizeof *y);
        free(x);
        free(w);
        free(y);
    }
}

static void check_rope(int n_heads, int hd, int rope_dim, bool neox)
{
    const int half = rope_dim / 2, n = n_heads * hd;
    float *x = malloc(n * sizeof *x), *x0 = malloc(n * sizeof *x0);
    float *cs = malloc(half * sizeof *cs), *sn = malloc(half * sizeof *sn);
    double *th = malloc(half * sizeof *th);
    fill(x, n, 2.0f);
    memcpy(x0, x, n * sizeof *x);
    for (int i = 0; i < half; i++) {
        th[i] = 17.0 * pow(10000.0, -2.0 * i / rope_dim); /* position 17 */
        cs[i] = (float)cos(th[i]);
        sn[i] = (float)sin(th[i]);
    }
    rope_f32_ref(x, n_heads, hd, rope_dim, cs, sn, neox);
    for (int h = 0; h < n_heads; h++) {
        const float *in = x0 + h * hd, *out = x + h * hd;
        for (int i = 0; i < half; i++) {
            const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            /* the rotation by the float cos/sin the kernel was given */
            const double c = cs[i], s = sn[i];
            const double mag = fabs(in[a]) + fabs(in[b]); /* |cos|, |sin| <= 1 */
            assert_close(out[a], in[a] * c - in[b] * s, mag, 4);
            assert_close(out[b], in[a] * s + in[b] * c, mag, 4);
        }
        /* past rope_dim: untouched */
        assert_memory_equal(out + rope_dim, in + rope_dim, (hd - rope_dim) * sizeof *x);
    }
    free(x);
    free(x0);
    free(cs);
    free(sn);
    free(th);
}

static void test_rope_rotates_the_pairs_of_each_pairing(void **state)
{
    (void)state;
    check_rope(4, 64, 64, false);
    check_rope(4, 64, 64, true);
    check_rope(3, 128, 32, false); /* partial rotation */
    check_rope(3, 128, 32, true);
    check_rope(1, 2, 2, false);
}

static void test_rope_pairings_differ(void **state)
{
    (void)state;
    /* a rotation of pair (0, 1) only moves x[0], x[1] in NORM; x[0],
     * x[half] in NEOX */
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8];
    memcpy(b, a, sizeof a);
    const float cs[4] = {0, 1, 1, 1}, sn[4] = {1, 0, 0, 0}; /* pair 0 by 90 degrees */
    rope_f32_ref(a, 1, 8, 8, cs, sn, false);
    rope_f32_ref(b, 1, 8, 8, cs, sn, true);
    const float norm[8] = {-2, 1, 3, 4, 5, 6, 7, 8}, neox[8] = {-5, 2, 3, 4, 1, 6, 7, 8};
    assert_memory_equal(a, norm, sizeof a);
    assert_memory_equal(b, neox, sizeof b);
}

static void test_swiglu_matches_double(void **state)
{
    (void)state;
    const int n = 1000;
    float g[1000], u[1000], g0[1000];
    fill(g, n, 12.0f);
    fill(u, n, 3.0f);
    g[0] = 0;
    g[1] = -88.0f; /* exp(88) near the float limit: silu -> -0 */
    g[2] = 88.0f;
    memcpy(g0, g, sizeof g);
    swiglu_f32_ref(g, u, n);
    for (int i = 0; i < n; i++) {
        const double want = g0[i] / (1.0 + exp(-(double)g0[i])) * u[i];
        assert_close(g[i], want, fabs(want), 8);
    }
}

/* Every variant of rowops.h's dispatched steps that runs here: RMSNorm
 * and SwiGLU against double precision, their special values, and SwiGLU
 * element-wise the same wherever a slice starts (the pool splits it). */
static void test_rowops_variants_match_double(void **state)
{
    (void)state;
    int checked = 0;
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++) {
        const rvl_rowops_kernels *k = rvl_rowops_get_isa(isa);
        if (!k)
            continue;
        checked++;
        static const int ns[] = {1, 7, 16, 17, 64, 576, 4099};
        for (size_t c = 0; c < sizeof ns / sizeof *ns; c++) {
            const int n = ns[c];
            float *x = malloc(n * sizeof *x), *w = malloc(n * sizeof *w), *y = malloc(n * sizeof *y);
            fill(x, n, 3.0f);
            fill(w, n, 2.0f);
            k->rmsnorm(y, x, w, n, 1e-5f);
            double ss = 0;
            for (int i = 0; i < n; i++)
                ss += (double)x[i] * x[i];
            const double scale = 1.0 / sqrt(ss / n + 1e-5);
            for (int i = 0; i < n; i++)
                assert_close(y[i], x[i] * scale * w[i], fabs(x[i] * scale * w[i]), 8);
            free(x);
            free(w);
            free(y);
        }
        enum { N = 1003 };
        float g[N], u[N], g0[N], parts[N];
        fill(g, N, 12.0f);
        fill(u, N, 3.0f);
        g[0] = 0;
        g[1] = -88.0f;
        g[2] = 88.0f;
        g[3] = -104.0f; /* exp(104) overflows: silu -> -0 */
        g[4] = 120.0f;  /* exp(-120) underflows: silu -> x */
        g[5] = -1e-30f;
        memcpy(g0, g, sizeof g);
        k->swiglu(g, u, N);
        for (int i = 0; i < N; i++) {
            const double want = g0[i] / (1.0 + exp(-(double)g0[i])) * u[i];
            assert_close(g[i], want, fabs(want), 8);
        }
        assert_true(g[3] == 0 && signbit(g[3]) != signbit(u[3]));
        /* slices at every start modulo the vector width: the same bits */
        for (int cut = 1; cut < 40; cut += 3) {
            memcpy(parts, g0, sizeof g0);
            k->swiglu(parts, u, cut);
            k->swiglu(parts + cut, u + cut, N - cut);
            if (memcmp(parts, g, sizeof g))
                fail_msg("%s swiglu: slices cut at %d give other bits", k->name, cut);
        }
    }
    assert_true(checked >= 1);
    assert_non_null(rvl_rowops_get());
}

static void test_geglu_tanh_and_softcap_match_double(void **state)
{
    (void)state;
    const int n = 1000;
    float g[1000], u[1000], g0[1000];
    fill(g, n, 12.0f);
    fill(u, n, 3.0f);
    g[0] = 0;
    g[1] = -30.0f; /* tanh saturates: gelu -> -0 */
    g[2] = 30.0f;  /* gelu -> x */
    memcpy(g0, g, sizeof g);
    geglu_tanh_f32_ref(g, u, n);
    for (int i = 0; i < n; i++) {
        const double x = g0[i];
        const double want =
            0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
        /* relative to |x u|: for large negative x, tanh's float rounding
         * to -1 leaves 0 where the exact value is a tiny negative */
        assert_close(g[i], want, fabs(x * u[i]), 8);
    }
    /* the exact GELU (erf) differs by up to ~1e-3: the test tells them apart */
    assert_true(fabs(0.5 * 1.5 * (1 + erf(1.5 / sqrt(2))) - 0.5 * 1.5 *
                     (1 + tanh(sqrt(2 / M_PI) * (1.5 + 0.044715 * 3.375)))) > 1e-4);

    memcpy(g, g0, sizeof g);
    softcap_f32_ref(g, n, 5.0f);
    for (int i = 0; i < n; i++) {
        const double want = 5.0 * tanh(g0[i] / 5.0);
        assert_close(g[i], want, fabs(want), 8);
        assert_true(fabsf(g[i]) <= 5.0f);
    }
}

static void test_softmax_matches_double(void **state)
{
    (void)state;
    static const int ns[] = {1, 5, 32000};
    for (size_t c = 0; c < sizeof ns / sizeof *ns; c++) {
        const int n = ns[c];
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        fill(x, n, 20.0f);
        softmax_f32_ref(y, x, n);
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++)
            mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < n; i++)
            sum += exp((double)x[i] - mx);
        double total = 0;
        for (int i = 0; i < n; i++) {
            /* x - max rounded to float moves exp's argument by up to
             * |x - max| 2^-24 */
            const double want = exp((double)x[i] - mx) / sum;
            assert_close(y[i], want, want, 8 + fabs((double)x[i] - mx));
            total += y[i];
        }
        assert_true(fabs(total - 1.0) < 1e-5);
        softmax_f32_ref(x, x, n); /* in place */
        assert_memory_equal(x, y, n * sizeof *y);
        free(x);
        free(y);
    }
}

/* ======================================================================
 * lib/engine/ops.h: the kernels' bits, whatever the threads
 * ====================================================================== */

static void test_ops_rows_are_the_kernels_on_any_pool(void **state)
{
    (void)state;
    enum { N = 96, NB = 7, XS = 100, YS = 104 };
    float x[NB * XS], w[N], want[NB * YS], got[NB * YS];
    float g[NB * N], u[NB * N], gw[NB * N];
    fill(x, NB * XS, 4.0f);
    fill(w, N, 1.5f);
    fill(g, NB * N, 6.0f);
    fill(u, NB * N, 2.0f);
    memset(want, 0, sizeof want);
    for (int t = 0; t < NB; t++)
        rvl_rowops_get()->rmsnorm(want + t * YS, x + t * XS, w, N, 1e-6f);
    memcpy(gw, g, sizeof g);
    rvl_rowops_get()->swiglu(gw, u, NB * N);
    float ge[NB * N];
    memcpy(ge, g, sizeof g);
    geglu_tanh_f32_ref(ge, u, NB * N);
    for (int nth = 1; nth <= 3; nth++) {
        rvl_pool *p = pool_of(nth);
        for (int nb = 1; nb <= NB; nb += NB - 1) {
            memset(got, 0, sizeof got);
            rvl_ops_norm_rows(p, got, YS, x, XS, w, N, nb, 1e-6f);
            assert_memory_equal(got, want, (size_t)nb * YS * sizeof *got);
            float gg[NB * N];
            memcpy(gg, g, sizeof g);
            rvl_ops_glu_rows(p, RVL_ACT_SILU, gg, u, N, nb);
            assert_memory_equal(gg, gw, (size_t)nb * N * sizeof *gg);
            assert_memory_equal(gg + nb * N, g + nb * N, (size_t)(NB - nb) * N * sizeof *gg);
            memcpy(gg, g, sizeof g);
            rvl_ops_glu_rows(p, RVL_ACT_GELU_TANH, gg, u, N, nb);
            assert_memory_equal(gg, ge, (size_t)nb * N * sizeof *gg);
        }
        rvl_pool_close(p);
    }
}

/* ======================================================================
 * lib/engine/matmul.h
 * ====================================================================== */

enum { MM_K = 256, MM_ROWS = 203, MM_NB = 5 };

/* y (MM_NB, MM_ROWS) = w x on a pool of nth threads, the batch at once or
 * token by token */
static void mm_run(const rvl_weight *w, const float *x, int nth, bool one_by_one, float *y)
{
    rvl_matmul mm = {.pool = pool_of(nth)};
    mm.act_stride = (MM_K * 4 + 64 + 63) & ~(size_t)63;
    mm.act = malloc(MM_NB * mm.act_stride);
    assert_non_null(mm.act);
    if (one_by_one)
        for (int t = 0; t < MM_NB; t++)
            rvl_matmul_run(&mm, y + t * MM_ROWS, MM_ROWS, w, x + t * MM_K, MM_K, 1);
    else
        rvl_matmul_run(&mm, y, MM_ROWS, w, x, MM_K, MM_NB);
    free(mm.act);
    rvl_pool_close(mm.pool);
}

static void check_matmul(uint32_t type)
{
    const rvl_kformat *kf = rvl_kformat_get(type);
    assert_non_null(kf);
    const size_t rb = rvl_kformat_row_bytes(kf, MM_K);
    float *wf = malloc((size_t)MM_ROWS * MM_K * sizeof *wf), x[MM_NB * MM_K];
    char *data = malloc(MM_ROWS * rb), *packed = malloc(MM_ROWS * rb);
    float *deq = malloc(MM_K * sizeof *deq);
    float want[MM_NB * MM_ROWS], got[MM_NB * MM_ROWS];
    fill(wf, (size_t)MM_ROWS * MM_K, 0.1f);
    fill(x, MM_NB * MM_K, 1.0f);
    for (int r = 0; r < MM_ROWS; r++)
        kf->quantize(wf + (size_t)r * MM_K, data + r * rb, MM_K, NULL);
    rvl_weight w = {.present = true, .type = type, .kf = kf, .ne0 = MM_K, .ne1 = MM_ROWS,
                    .row_bytes = rb, .data = data};

    mm_run(&w, x, 1, false, want);
    /* each output is its row's dot with its token */
    for (int t = 0; t < MM_NB; t++)
        for (int r = 0; r < MM_ROWS; r++) {
            kf->dequantize(data + r * rb, deq, MM_K);
            double d = 0, mag = 0;
            for (int i = 0; i < MM_K; i++) {
                d += (double)deq[i] * x[t * MM_K + i];
                mag += fabs((double)deq[i] * x[t * MM_K + i]);
            }
            if (!(fabs(want[t * MM_ROWS + r] - d) <= 0.02 * mag))
                fail_msg("%s: row %d token %d: %g, want %g", kf->name, r, t,
                         (double)want[t * MM_ROWS + r], d);
        }
    for (int nth = 1; nth <= 3; nth++)
        for (int one = 0; one < 2; one++) {
            mm_run(&w, x, nth, one, got);
            assert_memory_equal(got, want, sizeof got);
        }
    if (kf->pack16) {
        /* the 16-row layout (formats.h gemm16): its own order of float
         * additions, so not row-major's bits, but the same bits whatever
         * the threads and whether tokens come one by one (decode) or
         * together (a prompt); the tail rows stay row-major */
        const uint64_t prow = MM_ROWS / RVL_PACK16_ROWS * RVL_PACK16_ROWS;
        memcpy(packed, data, MM_ROWS * rb);
        for (uint64_t r = 0; r < prow; r += RVL_PACK16_ROWS)
            kf->pack16(MM_K, data + r * rb, rb, packed + r * rb);
        rvl_weight wp = w;
        wp.packed = packed;
        wp.packed_rows = prow;
        float first[MM_NB * MM_ROWS];
        mm_run(&wp, x, 1, false, first);
        for (int t = 0; t < MM_NB; t++)
            for (int r = 0; r < MM_ROWS; r++) {
                const float a = first[t * MM_ROWS + r], b = want[t * MM_ROWS + r];
                if (!(fabsf(a - b) <= 1e-4f * (fabsf(b) + 1.0f)))
                    fail_msg("%s packed16: row %d token %d: %g, row-major %g", kf->name, r, t,
                             (double)a, (double)b);
                if ((uint64_t)r >= prow)
                    assert_memory_equal(&a, &b, sizeof a);
            }
        for (int nth = 1; nth <= 3; nth++)
            for (int one = 0; one < 2; one++) {
                mm_run(&wp, x, nth, one, got);
                assert_memory_equal(got, first, sizeof got);
            }
    }
    free(wf);
    free(data);
    free(packed);
    free(deq);
}

static void test_matmul_bits_do_not_depend_on_threads_batch_or_layout(void **state)
{
    (void)state;
    static const uint32_t types[] = {RVL_K_Q4_0, RVL_K_Q8_0, RVL_K_Q4_K, RVL_K_Q6_K, RVL_K_F16,
                                     RVL_K_F32, RVL_K_IQ4_NL, RVL_K_Q5_0};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        check_matmul(types[i]);
}

static void test_matmul_shared_is_each_weight_alone(void **state)
{
    (void)state;
    /* three weights of two activation formats: one job for the Q8_0
     * pair, another for the Q4_K one, each the bits of rvl_matmul_run */
    const uint32_t types[3] = {RVL_K_Q8_0, RVL_K_Q4_0, RVL_K_Q4_K};
    rvl_weight ws[3];
    char *data[3];
    float x[MM_NB * MM_K], *ys[3], *want[3];
    size_t strides[3] = {MM_ROWS, MM_ROWS, MM_ROWS};
    fill(x, MM_NB * MM_K, 1.0f);
    rvl_matmul mm = {.pool = pool_of(2)};
    mm.act_stride = (MM_K * 4 + 64 + 63) & ~(size_t)63;
    mm.act = malloc(MM_NB * mm.act_stride);
    for (int i = 0; i < 3; i++) {
        const rvl_kformat *kf = rvl_kformat_get(types[i]);
        const size_t rb = rvl_kformat_row_bytes(kf, MM_K);
        float wf[MM_K];
        data[i] = malloc(MM_ROWS * rb);
        for (int r = 0; r < MM_ROWS; r++) {
            fill(wf, MM_K, 0.1f);
            kf->quantize(wf, data[i] + r * rb, MM_K, NULL);
        }
        ws[i] = (rvl_weight){.present = true, .type = types[i], .kf = kf, .ne0 = MM_K,
                             .ne1 = MM_ROWS, .row_bytes = rb, .data = data[i]};
        ys[i] = malloc(MM_NB * MM_ROWS * sizeof(float));
        want[i] = malloc(MM_NB * MM_ROWS * sizeof(float));
        rvl_matmul_run(&mm, want[i], MM_ROWS, &ws[i], x, MM_K, MM_NB);
    }
    const rvl_weight *wp[3] = {&ws[0], &ws[1], &ws[2]};
    rvl_matmul_shared(&mm, x, MM_K, MM_NB, 3, wp, ys, strides);
    for (int i = 0; i < 3; i++) {
        assert_memory_equal(ys[i], want[i], MM_NB * MM_ROWS * sizeof(float));
        free(data[i]);
        free(ys[i]);
        free(want[i]);
    }
    free(mm.act);
    rvl_pool_close(mm.pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_matches_double),
        cmocka_unit_test(test_rope_rotates_the_pairs_of_each_pairing),
        cmocka_unit_test(test_rope_pairings_differ),
        cmocka_unit_test(test_swiglu_matches_double),
        cmocka_unit_test(test_rowops_variants_match_double),
        cmocka_unit_test(test_geglu_tanh_and_softcap_match_double),
        cmocka_unit_test(test_softmax_matches_double),
        cmocka_unit_test(test_ops_rows_are_the_kernels_on_any_pool),
        cmocka_unit_test(test_matmul_bits_do_not_depend_on_threads_batch_or_layout),
        cmocka_unit_test(test_matmul_shared_is_each_weight_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
