// metal-emu-uses: metal/elementwise.metal
/*
 * test_elementwise - metal/elementwise.metal in the emulator against scalar
 * C++ loops with the CPU's float operations: kernels/ref has no element-wise
 * kernels, so the oracle is lib/engine/forward.c's SwiGLU expression
 * (g / (1 + expf(-g)) * u), its SiLU part, and the tanh form of GELU.
 *
 * Shapes: n = 1 .. 4099 around the float4 and threadgroup boundaries, so the
 * scalar tail runs; buffers bound at 16-byte offsets; y aliasing an input.
 * Tolerance: add/mul/scale exact (one rounding, same as the CPU); the
 * activations 2^-21 (|e| + |x|) (libm's expf/tanhf on both sides here;
 * Apple's fast math is not modelled).
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
}

#include <vector>

#include "emu.h"

static const uint32_t sizes[] = {1, 3, 4, 5, 7, 31, 32, 33, 255, 256, 257, 1023, 1025, 4099};

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(float amp) /* uniform in (-amp, amp) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return amp * (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

enum op { ADD, MUL, SWIGLU, SILU, GELU, SCALE };
static const char *kname[] = {"rvl_add_f32", "rvl_mul_f32", "rvl_swiglu_f32",
                              "rvl_silu_f32", "rvl_gelu_f32", "rvl_scale_f32"};

static float model(op o, float a, float b, float s)
{
    switch (o) {
    case ADD: return a + b;
    case MUL: return a * b;
    case SWIGLU: return a / (1.0f + expf(-a)) * b;
    case SILU: return a / (1.0f + expf(-a));
    case GELU: return 0.5f * a * (1.0f + tanhf(0.7978845608028654f * (a + 0.044715f * a * a * a)));
    case SCALE: return a * s;
    }
    return 0;
}

/* One case: inputs at byte offset `off` (a multiple of 16) into their
 * buffers; in_place writes y over a. */
static void run_case(op o, uint32_t n, size_t off, bool in_place, uint32_t tg)
{
    const bool binary = o == ADD || o == MUL || o == SWIGLU;
    const float s = 0.37f;
    std::vector<float> a(n), b(n);
    for (uint32_t i = 0; i < n; i++) {
        a[i] = frand(o == GELU || o == SILU || o == SWIGLU ? 12.0f : 3.0f);
        b[i] = frand(3.0f);
    }
    emu::Buffer ba(off + n * 4, "a"), bb(off + n * 4, "b"), by(off + n * 4, "y");
    memcpy((char *)ba.contents() + off, a.data(), n * 4);
    memcpy((char *)bb.contents() + off, b.data(), n * 4);
    emu::Buffer &out = in_place ? ba : by;

    emu::Encoder e(kname[o]);
    uint32_t idx = 0;
    e.set_buffer(idx++, ba, off);
    if (binary) e.set_buffer(idx++, bb, off);
    e.set_buffer(idx++, out, off);
    e.set_value(idx++, n);
    if (o == SCALE) e.set_value(idx++, s);
    int rc = e.dispatch_threads({(n + 3) / 4}, {tg});
    if (rc != 0) fprintf(stderr, "%s n=%u: %s\n", kname[o], n, emu::last_error());
    assert_int_equal(rc, 0);

    const float *y = (const float *)((const char *)out.contents() + off);
    for (uint32_t i = 0; i < n; i++) {
        float want = model(o, a[i], b[i], s);
        double tol = o <= MUL || o == SCALE ? 0 : ldexp(1.0, -21) * (fabs(want) + fabs(a[i]));
        if (!(fabs((double)y[i] - want) <= tol)) {
            fprintf(stderr, "%s n=%u off=%zu tg=%u [%u]: x=%.9g got %.9g want %.9g\n", kname[o], n, off, tg, i,
                    a[i], y[i], want);
            fail();
        }
    }
    /* nothing written before the offset */
    for (size_t i = 0; i < off; i++)
        assert_int_equal(((const unsigned char *)out.contents())[i], in_place ? 0xff : 0xff);
}

static void test_elementwise_ops_match_cpu_on_awkward_sizes(void **state)
{
    (void)state;
    for (int o = ADD; o <= SCALE; o++)
        for (uint32_t n : sizes) run_case((op)o, n, 0, false, 64);
}

static void test_elementwise_ops_with_offsets_in_place_and_odd_threadgroups(void **state)
{
    (void)state;
    for (int o = ADD; o <= SCALE; o++) {
        run_case((op)o, 1025, 32, false, 96);
        run_case((op)o, 257, 16, true, 33);
        run_case((op)o, 6, 48, true, 1);
    }
}

static void test_elementwise_under_other_seeds(void **state)
{
    (void)state;
    for (uint64_t s : {7ull, 99ull}) {
        emu::set_seed(s);
        run_case(SWIGLU, 4099, 0, true, 256);
        run_case(GELU, 1025, 16, false, 128);
    }
    emu::set_seed(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise_ops_match_cpu_on_awkward_sizes),
        cmocka_unit_test(test_elementwise_ops_with_offsets_in_place_and_odd_threadgroups),
        cmocka_unit_test(test_elementwise_under_other_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
