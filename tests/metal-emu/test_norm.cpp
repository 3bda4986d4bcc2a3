// metal-emu-uses: metal/norm.metal
/*
 * test_norm - metal/norm.metal's RMSNorm and softmax against
 * double-precision loops of lib/engine/forward.c's rmsnorm and the CPU softmax
 * (lib/tools/bench.c's softmax_row): no kernels/ref function exists for them.
 *
 * Tolerances, per element, relative to the exact value e:
 *   RMSNorm  |y - e| <= (n / 256 + 16) * 2^-23 * |e|: the sum of squares
 *            runs n / 256 terms per thread then two 5- and 3-level trees
 *            in f32 (the CPU sums in double), then sqrt, a division and
 *            two products, a few roundings each;
 *   softmax  |y - e| <= (n / 256 + 24) * 2^-23 * e: the same reduction for
 *            the sum, plus exp within a few ulp (libm here; Apple's fast
 *            exp is not modelled, see metal/README.md).
 * Shapes: n around the simdgroup (31, 32, 33) and threadgroup (255, 256,
 * 257) sizes, 1, long rows; padded row strides; in place (y = x).
 */
#include "mtl_testutil.h"

static const int sizes[] = { 1, 7, 31, 32, 33, 255, 256, 257, 1000, 4096 };

static void rms_case(int n, int rows, bool in_place)
{
    const size_t xs = (size_t)n + 2, ys = in_place ? xs : (size_t)n + 7;
    std::vector<float> x((size_t)rows * xs), w = mt_gauss_vec((size_t)n);
    for (size_t i = 0; i < x.size(); i++)
        x[i] = mt_gauss() * (float)(1 + i % 5);
    rvl_mtl_norm_args a = {};
    a.x_stride = xs;
    a.y_stride = ys;
    a.n = n;
    a.eps = 1e-5f;
    emu::Buffer bx(x.data(), x.size() * 4, "x"), bw(w.data(), w.size() * 4, "w");
    emu::Buffer by((size_t)rows * ys * 4, "y");
    emu::Encoder e("rvl_rms_norm_f32");
    e.set_value(0, a);
    e.set_buffer(1, bx);
    e.set_buffer(2, bw);
    e.set_buffer(3, in_place ? bx : by);
    assert_int_equal(mt_dispatch(e, rvl_mtl_norm_dispatch((uint32_t)rows)), 0);
    const float *y = (in_place ? bx : by).data<float>();
    mt_worst worst("rms_norm");
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < n; i++)
            ss += (double)x[r * xs + i] * x[r * xs + i];
        const double s = 1.0 / sqrt(ss / n + 1e-5f);
        for (int i = 0; i < n; i++) {
            const double ex = x[r * xs + i] * s * w[(size_t)i];
            const double tol = (n / 256.0 + 16) * ldexp(1, -23) * fabs(ex);
            if (!worst.check(fabs(y[r * ys + i] - ex), tol)) {
                fprintf(stderr, "rms_norm n=%d row %d [%d]: %.9g vs %.9g\n", n, r, i, y[r * ys + i], ex);
                fail();
            }
        }
    }
}

static void softmax_case(int n, int rows, float scale, bool in_place)
{
    const size_t xs = (size_t)n + 1, ys = in_place ? xs : (size_t)n + 4;
    std::vector<float> x((size_t)rows * xs);
    for (auto &v : x)
        v = mt_gauss() * 4;
    rvl_mtl_norm_args a = {};
    a.x_stride = xs;
    a.y_stride = ys;
    a.n = n;
    a.scale = scale;
    emu::Buffer bx(x.data(), x.size() * 4, "x"), by((size_t)rows * ys * 4, "y");
    emu::Encoder e("rvl_soft_max_f32");
    e.set_value(0, a);
    e.set_buffer(1, bx);
    e.set_buffer(2, in_place ? bx : by);
    assert_int_equal(mt_dispatch(e, rvl_mtl_norm_dispatch((uint32_t)rows)), 0);
    const float *y = (in_place ? bx : by).data<float>();
    mt_worst worst("softmax");
    for (int r = 0; r < rows; r++) {
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++)
            mx = fmax(mx, (double)scale * x[r * xs + i]);
        for (int i = 0; i < n; i++)
            sum += exp((double)scale * x[r * xs + i] - mx);
        for (int i = 0; i < n; i++) {
            const double ex = exp((double)scale * x[r * xs + i] - mx) / sum;
            const double tol = (n / 256.0 + 24) * ldexp(1, -23) * ex;
            if (!worst.check(fabs(y[r * ys + i] - ex), tol)) {
                fprintf(stderr, "softmax n=%d row %d [%d]: %.9g vs %.9g\n", n, r, i, y[r * ys + i], ex);
                fail();
            }
        }
    }
}

static void test_rms_norm_matches_double(void **state)
{
    (void)state;
    for (int n : sizes) {
        rms_case(n, 3, false);
        rms_case(n, 2, true);
    }
}

static void test_softmax_matches_double(void **state)
{
    (void)state;
    for (int n : sizes) {
        softmax_case(n, 3, 1.0f, false);
        softmax_case(n, 2, 0.125f, true);
    }
    softmax_case(32000, 1, 1.0f, false);   /* a vocabulary row */
}

static void test_norms_under_other_thread_orders(void **state)
{
    (void)state;
    for (uint64_t seed : { 5ull, 1234ull }) {
        emu::set_seed(seed);
        rms_case(257, 2, false);
        softmax_case(257, 2, 1.0f, false);
    }
    emu::set_seed(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_norm_matches_double),
        cmocka_unit_test(test_softmax_matches_double),
        cmocka_unit_test(test_norms_under_other_thread_orders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
