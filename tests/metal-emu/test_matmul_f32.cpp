// metal-emu-uses: metal/matmul_f32.metal
/*
 * test_matmul_f32 - metal/matmul_f32.metal's GEMV over f32 and f16 weights
 * (rvl_mul_mv_f32_f32, rvl_mul_mv_f16_f32) against a double-precision dot
 * of the same values (f16 weights widened exactly, as kernels/f16.h does).
 *
 * Shapes: k = 1 .. 300 (not multiples of 32: idle lanes, tails), n_rows
 * not a multiple of the 8 rows a threadgroup computes, 1..5 tokens, padded
 * row and token strides. Tolerance per output: (k/32 + 32) 2^-24 sum|w x|
 * (f32 partial sums over k/32 terms per lane, then a 32-lane tree).
 * Three schedules (seeds) per shape.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <setjmp.h>
extern "C" {
#include <cmocka.h> /* has no extern "C" of its own */
#include "f16.h"
}

#include <vector>

#include "emu.h"
#include "../../metal/rvl_metal_args.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float frand(float amp)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return amp * (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

static void run_case(bool f16, int k, int n_rows, int n_tok, uint64_t seed)
{
    const size_t es = f16 ? 2 : 4;
    const size_t row_bytes = ((size_t)k * es + 7) / 8 * 8 + 8; /* padded rows */
    const size_t xs = (size_t)k + 3, ys = (size_t)n_rows + 5;  /* padded strides */
    std::vector<unsigned char> w(row_bytes * n_rows);
    std::vector<float> wf((size_t)k * n_rows), x(xs * n_tok);
    for (int r = 0; r < n_rows; r++)
        for (int i = 0; i < k; i++) {
            float v = frand(1.0f);
            if (f16) {
                rvl_f16 h = rvl_f32_to_f16(v);
                memcpy(&w[r * row_bytes + (size_t)i * 2], &h, 2);
                v = rvl_f16_to_f32(h);
            } else {
                memcpy(&w[r * row_bytes + (size_t)i * 4], &v, 4);
            }
            wf[(size_t)r * k + i] = v;
        }
    for (auto &v : x)
        v = frand(2.0f);

    emu::Buffer bw(w.data(), w.size(), "w"), bx(x.data(), x.size() * 4, "x");
    emu::Buffer by(ys * n_tok * 4, "y");
    rvl_mtl_matmul_args a = {};
    a.w_row_bytes = row_bytes;
    a.x_stride = xs;
    a.y_stride = ys;
    a.k = k;
    a.n_rows = n_rows;
    a.n_tok = n_tok;
    const rvl_mtl_dispatch d = rvl_mtl_mv_dispatch(&a);
    emu::set_seed(seed);
    emu::Encoder e(f16 ? "rvl_mul_mv_f16_f32" : "rvl_mul_mv_f32_f32");
    e.set_value(0, a);
    e.set_buffer(1, bw);
    e.set_buffer(2, bx);
    e.set_buffer(3, by);
    int rc = e.dispatch_threadgroups({d.grid[0], d.grid[1], d.grid[2]},
                                     {d.threads[0], d.threads[1], d.threads[2]});
    if (rc != 0)
        fail_msg("%s", emu::last_error());
    const float *y = by.data<float>();
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < n_rows; r++) {
            double s = 0, sa = 0;
            for (int i = 0; i < k; i++) {
                const double p = (double)wf[(size_t)r * k + i] * x[(size_t)t * xs + i];
                s += p;
                sa += fabs(p);
            }
            const double got = y[(size_t)t * ys + r];
            const double tol = (k / 32 + 32) * 0x1p-24 * sa;
            if (!(fabs(got - s) <= tol))
                fail_msg("%s k %d rows %d tok %d: y[%d][%d] = %.9g, expected %.9g (tol %.3g)",
                         f16 ? "f16" : "f32", k, n_rows, n_tok, t, r, got, s, tol);
        }
}

static void test_shapes(void **state)
{
    (void)state;
    static const int ks[] = {1, 5, 31, 32, 33, 64, 100, 300};
    static const int rows[] = {1, 7, 8, 9, 37};
    for (int f = 0; f < 2; f++)
        for (int k : ks)
            for (int nr : rows)
                for (int nt = 1; nt <= 5; nt += 2)
                    for (uint64_t seed = 1; seed <= 3; seed++)
                        run_case(f == 1, k, nr, nt, seed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_shapes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
