// metal-emu-uses: metal/matmul.metal
/*
 * test_matmul - metal/matmul.metal's GEMV (rvl_mul_mv_*) and GEMM
 * (rvl_mul_mm_*) kernels for every format they have, against kernels/ref.
 *
 * Weights: random rows quantized by the format's reference quantizer. The
 * oracle is the double-precision product of the reference dequantization
 * (dequantize_<fmt>_ref) with the f32 activations, which is what the
 * kernels compute in f32. Tolerance per output, S = sum_i |w_i x_i|:
 *
 *     |y - exact| <= (k / 16 + 32) * 2^-24 * S
 *
 * (16-term partial sums per lane, then a chain of k/512 per lane and a
 * 5-level simd_sum for GEMV, a chain of k for GEMM: k * 2^-24 would be
 * the worst case of a plain chain; k/16 + 32 covers GEMV's worst case
 * and GEMM's in practice, since random-sign errors grow as sqrt(k).)
 *
 * Shapes: k of one block, of several blocks with a tail for the lanes,
 * and long rows; row counts that leave the last simdgroup / tile partial;
 * 1, 3, 33 and 40 tokens; padded strides for W, x and y, whose padding the
 * kernels must not write (it stays poisoned).
 */
#include "mtl_testutil.h"

struct fmt_case {
    uint32_t type;
    int qk;
};

static const fmt_case fmts[] = {
    { RVL_K_Q4_0, 32 },         { RVL_K_Q8_0, 32 },         { RVL_K_Q4_K, 256 },
    { RVL_K_Q6_K, 256 },        { RVL_K_RVL_I4S_G32, 32 },  { RVL_K_RVL_I4S_G64, 64 },
    { RVL_K_RVL_I4S_G128, 128 }, { RVL_K_RVL_I4A_G32, 32 }, { RVL_K_RVL_I4A_G64, 64 },
    { RVL_K_RVL_I4A_G128, 128 }, { RVL_K_MLX_A4_G64, 64 },
};

/* One product: n_rows x k weights of `type`, n_tok tokens; gemm selects
 * the kernel. Returns through cmocka assertions. */
static void run_case(uint32_t type, int k, int n_rows, int n_tok, bool gemm, const char *what)
{
    const rvl_kformat *kf = rvl_kformat_ref(type);
    assert_non_null(kf);
    const char *suffix = rvl_mtl_matmul_suffix(type);
    assert_non_null(suffix);
    const size_t rb = (size_t)rvl_kformat_row_bytes(kf, (uint64_t)k);
    const size_t w_row_bytes = rb + 4 * (size_t)(n_rows % 3); /* padded rows sometimes */
    const size_t x_stride = (size_t)k + 3, y_stride = (size_t)n_rows + 5;

    /* weights: quantized random rows; the float rows the kernel should see */
    std::vector<uint8_t> w((size_t)n_rows * w_row_bytes, 0xAB);
    std::vector<float> wf((size_t)n_rows * k);
    for (int r = 0; r < n_rows; r++) {
        std::vector<float> src = mt_gauss_vec((size_t)k, 0.5f + (float)(r % 4));
        kf->quantize(src.data(), w.data() + (size_t)r * w_row_bytes, k, NULL);
        kf->dequantize(w.data() + (size_t)r * w_row_bytes, wf.data() + (size_t)r * k, k);
    }
    std::vector<float> x((size_t)n_tok * x_stride);
    for (auto &v : x)
        v = mt_gauss();

    emu::Buffer bw(w.data(), w.size(), "w"), bx(x.data(), x.size() * 4, "x");
    emu::Buffer by((size_t)n_tok * y_stride * 4, "y");
    rvl_mtl_matmul_args a = {};
    a.w_row_bytes = w_row_bytes;
    a.x_stride = x_stride;
    a.y_stride = y_stride;
    a.k = k;
    a.n_rows = n_rows;
    a.n_tok = n_tok;
    char name[64];
    snprintf(name, sizeof name, "rvl_mul_%s_%s_f32", gemm ? "mm" : "mv", suffix);
    emu::Encoder e(name);
    e.set_value(0, a);
    e.set_buffer(1, bw);
    e.set_buffer(2, bx);
    e.set_buffer(3, by);
    assert_int_equal(mt_dispatch(e, gemm ? rvl_mtl_mm_dispatch(&a) : rvl_mtl_mv_dispatch(&a)), 0);

    mt_worst worst(what);
    const float *y = by.data<float>();
    for (int t = 0; t < n_tok; t++) {
        for (int r = 0; r < n_rows; r++) {
            double ex = 0, S = 0;
            for (int i = 0; i < k; i++) {
                const double p = (double)wf[(size_t)r * k + i] * x[(size_t)t * x_stride + i];
                ex += p;
                S += fabs(p);
            }
            const double got = y[(size_t)t * y_stride + r];
            const double tol = (k / 16.0 + 32) * ldexp(1, -24) * S;
            if (!worst.check(fabs(got - ex), tol)) {
                fprintf(stderr, "%s: %s k=%d rows=%d tok=%d: y[%d][%d] = %.9g, exact %.9g (tol %.3g)\n",
                        name, kf->name, k, n_rows, n_tok, t, r, got, ex, tol);
                fail();
            }
        }
        /* the padding of y stays poisoned (0xFF bytes) */
        for (size_t r = (size_t)n_rows; r < y_stride && t + 1 < n_tok; r++) {
            uint32_t bits;
            memcpy(&bits, &y[(size_t)t * y_stride + r], 4);
            assert_int_equal(bits, 0xFFFFFFFFu);
        }
    }
}

static void check_format(const fmt_case &f, bool gemm)
{
    const int qk = f.qk;
    /* k: one block; blocks with a lane tail; a long row */
    const int ks[] = { qk, qk * (qk >= 256 ? 3 : 11), qk >= 256 ? 2048 : 1536 };
    const int rows_mv[] = { 1, 7, 9, 33 };
    const int rows_mm[] = { 1, 31, 45 };
    const int toks_mv[] = { 1, 3 };
    const int toks_mm[] = { 1, 33, 40 };
    char what[96];
    for (int k : ks) {
        if (gemm) {
            for (int r : rows_mm)
                for (int t : toks_mm) {
                    if (k > 1024 && r * t > 400)
                        continue;   /* keep the run short; long rows once per format */
                    snprintf(what, sizeof what, "gemm %s", rvl_kformat_ref(f.type)->name);
                    run_case(f.type, k, r, t, true, what);
                }
        } else {
            for (int r : rows_mv)
                for (int t : toks_mv) {
                    snprintf(what, sizeof what, "gemv %s", rvl_kformat_ref(f.type)->name);
                    run_case(f.type, k, r, t, false, what);
                }
        }
    }
}

static void test_gemv_matches_dequantized_product(void **state)
{
    (void)state;
    for (const fmt_case &f : fmts)
        check_format(f, false);
}

static void test_gemm_matches_dequantized_product(void **state)
{
    (void)state;
    for (const fmt_case &f : fmts)
        check_format(f, true);
}

/* GEMV and GEMM of the same product agree (decode and prompt processing
 * see the same weights), under two thread orders. */
static void test_gemv_gemm_agree_across_seeds(void **state)
{
    (void)state;
    for (uint64_t seed : { 3ull, 77ull }) {
        emu::set_seed(seed);
        run_case(RVL_K_Q4_0, 320, 13, 1, false, "gemv q4_0 seeded");
        run_case(RVL_K_Q4_0, 320, 13, 5, true, "gemm q4_0 seeded");
        run_case(RVL_K_Q6_K, 512, 5, 3, true, "gemm q6_K seeded");
    }
    emu::set_seed(1);
}

/* The suffix table names exactly the kernels linked in. */
static void test_every_suffix_has_both_kernels(void **state)
{
    (void)state;
    const std::string names = emu::kernel_names();
    for (const fmt_case &f : fmts) {
        const char *s = rvl_mtl_matmul_suffix(f.type);
        assert_non_null(s);
        for (const char *kind : { "mv", "mm" }) {
            char name[64];
            snprintf(name, sizeof name, " rvl_mul_%s_%s_f32 ", kind, s);
            assert_true(names.find(name) != std::string::npos);
        }
    }
    assert_null(rvl_mtl_matmul_suffix(RVL_K_Q5_K));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_suffix_has_both_kernels),
        cmocka_unit_test(test_gemv_matches_dequantized_product),
        cmocka_unit_test(test_gemm_matches_dequantized_product),
        cmocka_unit_test(test_gemv_gemm_agree_across_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
