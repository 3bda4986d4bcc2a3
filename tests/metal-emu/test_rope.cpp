// metal-emu-uses: metal/rope.metal
/*
 * test_rope - metal/rope.metal against lib/engine/forward.c's rope() (the same
 * float operations, mt_rope_head) on the same cos/sin tables.
 *
 * Tolerance: |y - ref| <= 2^-22 * (|x0| + |x1|) per element of a pair: the
 * two products and the sum may be contracted into FMAs on the GPU (a
 * rounding or two of the operands' magnitude). Elements past rope_dim are
 * copied exactly.
 * Shapes: normal and NeoX pairs, no rotation, partial rotary (rope_dim <
 * head_dim), head_dim 64 / 80 / 128 / 256 (more pairs than threads),
 * positions out of order, padded token strides, in place.
 */
#include "mtl_testutil.h"

static void rope_case(int mode, int head_dim, int rope_dim, int n_head, int n_tok, bool in_place)
{
    const int n_pos = 300;
    std::vector<float> cs, sn;
    mt_rope_tables(n_pos, rope_dim, 10000.0f, cs, sn);
    const size_t xs = (size_t)n_head * head_dim + 8, ys = in_place ? xs : xs + 4;
    std::vector<float> x((size_t)n_tok * xs);
    for (auto &v : x)
        v = mt_gauss();
    std::vector<int32_t> pos((size_t)n_tok);
    for (auto &p : pos)
        p = (int32_t)(mt_u64() % n_pos);

    rvl_mtl_rope_args a = {};
    a.x_stride = xs;
    a.y_stride = ys;
    a.n_tok = n_tok;
    a.n_head = n_head;
    a.head_dim = head_dim;
    a.rope_dim = rope_dim;
    a.mode = mode;
    emu::Buffer bx(x.data(), x.size() * 4, "x"), by((size_t)n_tok * ys * 4, "y");
    emu::Buffer bc(cs.data(), cs.size() * 4, "cos"), bs(sn.data(), sn.size() * 4, "sin");
    emu::Buffer bp(pos.data(), pos.size() * 4, "pos");
    emu::Encoder e("rvl_rope_f32");
    e.set_value(0, a);
    e.set_buffer(1, bx);
    e.set_buffer(2, in_place ? bx : by);
    e.set_buffer(3, bc);
    e.set_buffer(4, bs);
    e.set_buffer(5, bp);
    assert_int_equal(mt_dispatch(e, rvl_mtl_rope_dispatch(&a)), 0);

    const float *y = (in_place ? bx : by).data<float>();
    mt_worst worst("rope");
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < n_head; h++) {
            const float *src = &x[t * xs + (size_t)h * head_dim];
            std::vector<float> ref(src, src + head_dim);
            const size_t o = (size_t)pos[(size_t)t] * (rope_dim / 2);
            mt_rope_head(ref.data(), mode, rope_dim, &cs[o], &sn[o]);
            for (int d = 0; d < head_dim; d++) {
                const int half = rope_dim / 2;
                int a0 = d, a1 = d;
                if (d < rope_dim) {
                    if (mode == RVL_MTL_ROPE_NEOX) {
                        a0 = d < half ? d : d - half;
                        a1 = a0 + half;
                    } else {
                        a0 = d & ~1;
                        a1 = a0 + 1;
                    }
                }
                const double mag = fabs(src[a0]) + (a1 != a0 ? fabs(src[a1]) : 0);
                const double tol = d < rope_dim && mode != RVL_MTL_ROPE_NONE ? ldexp(mag, -22) : 0;
                const float got = y[t * ys + (size_t)h * head_dim + d];
                if (!worst.check(fabs(got - ref[(size_t)d]), tol)) {
                    fprintf(stderr, "rope mode %d hd %d rd %d tok %d head %d [%d]: %.9g vs %.9g\n", mode,
                            head_dim, rope_dim, t, h, d, got, ref[(size_t)d]);
                    fail();
                }
            }
        }
}

static void test_rope_matches_forward_c(void **state)
{
    (void)state;
    for (int mode : { RVL_MTL_ROPE_NORM, RVL_MTL_ROPE_NEOX, RVL_MTL_ROPE_NONE }) {
        rope_case(mode, 64, 64, 3, 5, false);
        rope_case(mode, 80, 80, 2, 3, false);
        rope_case(mode, 128, 128, 4, 2, true);
        rope_case(mode, 256, 256, 1, 3, false);   /* more pairs than threads */
        rope_case(mode, 128, 32, 2, 4, false);    /* partial rotary */
        rope_case(mode, 64, 48, 5, 1, true);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_matches_forward_c),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
