// metal-emu-uses: tests/metal-emu/probe.metal tests/metal-emu/bad/missing_barrier.metal tests/metal-emu/bad/divergent.metal tests/metal-emu/bad/oob.metal
/*
 * test_emu - the Metal emulator itself: that it runs correct kernels
 * correctly (the stand-in metal_stdlib's types and math, every SIMD-group
 * function against a scalar model, thread attributes, threadgroup storage,
 * atomics, shuffled order) and that it CATCHES broken ones
 * (the kernels in tests/metal-emu/bad/): a missing barrier gives a wrong result, a
 * divergent barrier or SIMD-group function fails the dispatch with a
 * message, an out-of-bounds access kills the program with a report (ASan's
 * in `make asan`, the guard-page handler's otherwise), limits are enforced.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
extern "C" {
#include <cmocka.h> /* has no extern "C" of its own */
}

#include <string>
#include <vector>

#include "emu.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif

static bool has(const char *hay, const char *needle) { return strstr(hay, needle) != nullptr; }

static void expect_error(int rc, const char *needle)
{
    if (rc != -1 || !has(emu::last_error(), needle)) {
        fprintf(stderr, "wanted an error with '%s', got rc %d: %s\n", needle, rc, emu::last_error());
        fail();
    }
}

static void expect_ok(int rc)
{
    if (rc != 0) fprintf(stderr, "dispatch failed: %s\n", emu::last_error());
    assert_int_equal(rc, 0);
}

/* ===================================================================
 * Correct kernels run correctly
 * =================================================================== */

static void test_stdlib_vectors_swizzles_and_math(void **state)
{
    (void)state;
    emu::Buffer out(32 * 4, "out");
    float p3[6] = {1, 2, 3, 4, 5, 6};
    emu::Buffer bp(p3, sizeof p3, "packed");
    emu::Encoder e("probe_vectors");
    e.set_buffer(0, out);
    e.set_buffer(1, bp);
    expect_ok(e.dispatch_threads({1}, {1}));
    const float want[32] = {4, 3, 1, 12, 24, 2, 6, 2, 1.5f, 0.5f, 6, 10, 34, 7, 61, 5, 3.5f, 3, 1, 127,
                            654, 7, 1, 8, 2, 4, -14, 65504, 0.5f, -2, 1, 12};
    const float *o = out.data<float>();
    for (int i = 0; i < 32; i++) {
        if (o[i] != want[i]) fprintf(stderr, "probe_vectors out[%d] = %g, want %g\n", i, o[i], want[i]);
        assert_true(o[i] == want[i]);
    }
}

/* The scalar model of probe_simd's 24 rows for one SIMD-group of m lanes. */
static void simd_model(const float *v, unsigned m, unsigned lane, float *row)
{
    auto at = [&](long src) { return src >= 0 && src < (long)m ? v[src] : v[lane]; };
    float sum = 0, mx = -INFINITY, mn = INFINITY, incl = 0, excl = 0;
    int isum = 0, imax = -1 << 30;
    uint32_t band = ~0u, bor = 0, bxor = 0, ballot = 0;
    bool all = true, any = false;
    for (unsigned i = 0; i < m; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], 4);
        sum += v[i];
        mx = fmaxf(mx, v[i]);
        mn = fminf(mn, v[i]);
        if (i <= lane) incl += v[i];
        if (i < lane) excl += v[i];
        isum += (int)(v[i] * 4);
        imax = imax > (int)(v[i] * 4) ? imax : (int)(v[i] * 4);
        band &= bits;
        bor |= bits;
        bxor ^= bits;
        if (v[i] > 0) ballot |= 1u << i;
        all = all && v[i] > -100;
        any = any || v[i] > 0.9f;
    }
    int k = 0;
    row[k++] = sum;
    row[k++] = mx;
    row[k++] = mn;
    row[k++] = incl;
    row[k++] = excl;
    row[k++] = at((lane * 7) % 32);
    row[k++] = at((long)lane + 3);
    row[k++] = at((long)lane - 5);
    row[k++] = at(lane ^ 6);
    row[k++] = at(9);
    row[k++] = v[0];
    row[k++] = (float)(ballot & 0xffff);
    row[k++] = (float)(ballot >> 16);
    row[k++] = all;
    row[k++] = any;
    row[k++] = (float)isum;
    row[k++] = (float)imax;
    row[k++] = (float)(band >> 16);
    row[k++] = (float)(bor >> 16);
    row[k++] = (float)(bxor & 0xffff);
    row[k++] = lane == 0;
    row[k++] = 2 * sum;
    row[k++] = at((long)lane + 1);
    row[k++] = 32;
}

static void simd_case(uint32_t n, uint32_t tg)
{
    const int rows = 24;
    std::vector<float> in(n);
    for (uint32_t i = 0; i < n; i++) in[i] = (float)((int)((i * 7919u + n) % 81u) - 40) / 4; /* exact sums */
    emu::Buffer bi(in.data(), n * 4, "in"), bo((size_t)rows * n * 4, "out");
    emu::Encoder e("probe_simd");
    e.set_buffer(0, bi);
    e.set_buffer(1, bo);
    e.set_value(2, n);
    expect_ok(e.dispatch_threads({n}, {tg}));
    const float *o = bo.data<float>();
    for (uint32_t g0 = 0; g0 < n; g0 += tg) {
        uint32_t gn = n - g0 < tg ? n - g0 : tg; /* the threadgroup's size */
        for (uint32_t s0 = 0; s0 < gn; s0 += 32) {
            unsigned m = gn - s0 < 32 ? gn - s0 : 32;
            for (unsigned lane = 0; lane < m; lane++) {
                float want[24];
                simd_model(&in[g0 + s0], m, lane, want);
                for (int r = 0; r < rows; r++) {
                    float got = o[(size_t)r * n + g0 + s0 + lane];
                    if (got != want[r]) {
                        fprintf(stderr, "probe_simd n=%u tg=%u thread %u row %d: got %g want %g\n", n, tg,
                                g0 + s0 + lane, r, got, want[r]);
                        fail();
                    }
                }
            }
        }
    }
}

static void test_simd_functions_match_scalar_model(void **state)
{
    (void)state;
    simd_case(64, 64);
    simd_case(200, 80); /* SIMD-groups of 32, 32, 16 and a partial threadgroup (40: 32 + 8) */
    simd_case(7, 7);    /* one short SIMD-group */
    simd_case(1024, 1024);
}

static void test_thread_attributes_with_partial_threadgroups(void **state)
{
    (void)state;
    const uint32_t G[3] = {37, 5, 3}, T[3] = {8, 4, 2};
    const size_t nt = (size_t)G[0] * G[1] * G[2];
    emu::Buffer out(nt * 12 * 4, "attrs");
    uint32_t grid[4] = {G[0], G[1], G[2], 0};
    emu::Encoder e("probe_attrs");
    e.set_buffer(0, out);
    e.set_bytes(1, grid, sizeof grid); /* uint3 is 16 bytes */
    expect_ok(e.dispatch_threads({G[0], G[1], G[2]}, {T[0], T[1], T[2]}));
    const uint32_t *o = out.data<uint32_t>();
    for (uint32_t z = 0; z < G[2]; z++)
        for (uint32_t y = 0; y < G[1]; y++)
            for (uint32_t x = 0; x < G[0]; x++) {
                const uint32_t *r = o + 12 * ((z * G[1] + y) * G[0] + x);
                uint32_t p[3] = {x, y, z}, gp[3], lp[3], a[3];
                for (int d = 0; d < 3; d++) {
                    gp[d] = p[d] / T[d];
                    lp[d] = p[d] % T[d];
                    a[d] = G[d] - gp[d] * T[d] < T[d] ? G[d] - gp[d] * T[d] : T[d];
                }
                uint32_t lin = lp[0] + a[0] * (lp[1] + a[1] * lp[2]), nth = a[0] * a[1] * a[2];
                uint32_t want[12] = {x, y, z, lp[0] + 100 * lp[1] + 10000 * lp[2], gp[0] + 100 * gp[1] + 10000 * gp[2],
                                     a[0] + 100 * a[1] + 10000 * a[2], 5 + 100 * 2, lin, lin / 32, lin % 32,
                                     (nth + 31) / 32, 0xC0FFEE};
                for (int i = 0; i < 12; i++) {
                    if (r[i] != want[i])
                        fprintf(stderr, "thread (%u,%u,%u) attr %d: got %u want %u\n", x, y, z, i, r[i], want[i]);
                    assert_int_equal(r[i], want[i]);
                }
            }
}

static std::vector<float> tg_sum_run(const char *kernel, uint64_t seed)
{
    const int groups = 5;
    std::vector<float> in(64 * groups);
    for (size_t i = 0; i < in.size(); i++) in[i] = (float)(i % 13) - 6;
    emu::Buffer bi(in.data(), in.size() * 4, "in"), bo(groups * 4, "out");
    emu::set_seed(seed);
    emu::Encoder e(kernel);
    e.set_buffer(0, bi);
    e.set_buffer(1, bo);
    expect_ok(e.dispatch_threadgroups({groups}, {64}));
    emu::set_seed(1);
    return std::vector<float>(bo.data<float>(), bo.data<float>() + groups);
}

static std::vector<float> tg_sum_want()
{
    std::vector<float> w(5, 0);
    for (size_t i = 0; i < 64 * 5; i++) w[i / 64] += (float)(i % 13) - 6;
    return w;
}

static void test_barrier_reduction_is_right_in_every_order(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 6; seed++) assert_true(tg_sum_run("probe_tg_sum", seed) == tg_sum_want());
    assert_true(emu::last_stats().barriers == 5 * 7); /* 7 barriers per group */
}

static void test_order_is_shuffled_and_reproducible(void **state)
{
    (void)state;
    const uint32_t groups = 4, tg = 64, n = groups * tg;
    auto run = [&](uint64_t seed, std::vector<uint32_t> &first, std::vector<uint32_t> &second) {
        emu::Buffer ticket(4, "ticket"), bf(n * 4, "first"), bs(n * 4, "second"), bc(groups * 4, "count");
        *ticket.data<uint32_t>() = 0;
        emu::set_seed(seed);
        emu::Encoder e("probe_order");
        e.set_buffer(0, ticket);
        e.set_buffer(1, bf);
        e.set_buffer(2, bs);
        e.set_buffer(3, bc);
        expect_ok(e.dispatch_threadgroups({groups}, {tg}));
        emu::set_seed(1);
        for (uint32_t g = 0; g < groups; g++) assert_int_equal(bc.data<uint32_t>()[g], tg); /* tg atomics */
        first.assign(bf.data<uint32_t>(), bf.data<uint32_t>() + n);
        second.assign(bs.data<uint32_t>(), bs.data<uint32_t>() + n);
    };
    std::vector<uint32_t> f1, s1, f1b, s1b, f2, s2;
    run(1, f1, s1);
    run(1, f1b, s1b);
    run(2, f2, s2);
    assert_true(f1 == f1b && s1 == s1b); /* same seed, same order */
    assert_true(f1 != f2);               /* another seed, another order */
    /* within a group: not in thread order, and different after the barrier */
    bool in_order = true, same_after = true, groups_in_order = true;
    for (uint32_t i = 1; i < tg; i++) in_order = in_order && f1[i] > f1[i - 1];
    for (uint32_t i = 0; i < tg; i++) same_after = same_after && s1[i] - s1[0] == f1[i] - f1[0];
    for (uint32_t g = 1; g < groups; g++) groups_in_order = groups_in_order && f1[g * tg] > f1[(g - 1) * tg];
    assert_false(in_order);
    assert_false(same_after);
    assert_false(groups_in_order);
}

static void test_threadgroup_memory_starts_poisoned(void **state)
{
    (void)state;
    emu::Buffer out(32 * 4, "out");
    emu::Encoder e("probe_poison");
    e.set_buffer(0, out);
    e.set_threadgroup_memory(0, 16 * 4);
    expect_ok(e.dispatch_threadgroups({1}, {16}));
    for (int i = 0; i < 32; i++) assert_int_equal(out.data<uint32_t>()[i], 0xffffffffu);
    /* and a device buffer nobody wrote reads as poison too */
    emu::Buffer fresh(8, "fresh");
    assert_true(isnan(fresh.data<float>()[0]) && isnan(fresh.data<float>()[1]));
}

/* ===================================================================
 * Broken kernels are caught
 * =================================================================== */

static void test_missing_barrier_gives_wrong_results(void **state)
{
    (void)state;
    const std::vector<float> want = tg_sum_want();
    for (uint64_t seed = 1; seed <= 4; seed++) {
        std::vector<float> got = tg_sum_run("bad_tg_sum_no_barrier", seed);
        assert_false(got == want);
    }
}

/* Each threadgroup runs "ahead" (a released SIMD-group goes on at once: this
 * bug always shows) or interleaved (it shows sometimes), chosen by the seed:
 * with 4 groups per dispatch every seed here shows it. */
static void test_simdgroup_barrier_does_not_order_other_simdgroups(void **state)
{
    (void)state;
    int wrong = 0;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        float in[256];
        for (int i = 0; i < 256; i++) in[i] = (float)(i % 64);
        emu::Buffer bi(in, sizeof in, "in"), bo(sizeof in, "out");
        emu::set_seed(seed);
        emu::Encoder e("bad_simdgroup_barrier_instead");
        e.set_buffer(0, bi);
        e.set_buffer(1, bo);
        expect_ok(e.dispatch_threadgroups({4}, {64}));
        for (int i = 0; i < 256; i++)
            if (bo.data<float>()[i] != 63 - i % 64) {
                wrong++;
                break;
            }
    }
    emu::set_seed(1);
    assert_int_equal(wrong, 4);
}

static void test_divergent_barrier_is_reported(void **state)
{
    (void)state;
    emu::Buffer out(64 * 4, "out");
    {
        emu::Encoder e("bad_barrier_in_branch");
        e.set_buffer(0, out);
        expect_error(e.dispatch_threadgroups({1}, {64}), "divergent threadgroup_barrier");
        assert_true(has(emu::last_error(), "bad_barrier_in_branch"));
        assert_true(has(emu::last_error(), "has returned"));
    }
    {
        emu::Encoder e("bad_barrier_two_sites");
        e.set_buffer(0, out);
        expect_error(e.dispatch_threadgroups({1}, {64}), "divergent threadgroup_barrier");
        assert_true(has(emu::last_error(), "divergent.metal:20") && has(emu::last_error(), "divergent.metal:22"));
    }
}

static void test_divergent_simd_functions_are_reported(void **state)
{
    (void)state;
    emu::Buffer out(64 * 4, "out"), in(64 * 4, "in");
    memset(in.contents(), 0, 64 * 4);
    {
        emu::Encoder e("bad_simd_sum_in_branch");
        e.set_buffer(0, out);
        expect_error(e.dispatch_threadgroups({1}, {64}), "divergent simd_sum");
        assert_true(has(emu::last_error(), "16 of 32 lanes"));
    }
    {
        emu::Encoder e("bad_simd_sum_after_return");
        e.set_buffer(0, in);
        e.set_buffer(1, out);
        e.set_value(2, (uint32_t)64);
        expect_ok(e.dispatch_threadgroups({1}, {64})); /* every lane in range: fine */
        e.set_value(2, (uint32_t)40);
        expect_error(e.dispatch_threadgroups({1}, {64}), "divergent simd_sum");
        assert_true(has(emu::last_error(), "has returned"));
    }
    {
        emu::Encoder e("bad_simd_mixed");
        e.set_buffer(0, out);
        expect_error(e.dispatch_threadgroups({1}, {32}), "divergent simd_");
        assert_true(has(emu::last_error(), "simd_max") && has(emu::last_error(), "simd_sum"));
    }
}

/* Runs a dispatch in a child; the child must die with a report. */
static void expect_caught(const char *what, void (*body)())
{
    emu::child_result r = emu::run_in_child([&] {
        body();
        fprintf(stderr, "%s: not caught: %s\n", what, emu::last_error());
    });
    bool reported = has(r.err.c_str(), "out-of-bounds") || has(r.err.c_str(), "heap-buffer-overflow") ||
                    has(r.err.c_str(), "out of bounds for type"); /* UBSan sees fixed-size arrays */
    if (getenv("METAL_TEST_VERBOSE")) fprintf(stderr, "# %s: %s", what, r.err.c_str());
    if (r.exited_zero || !reported) {
        fprintf(stderr, "%s: child %s, stderr:\n%s\n", what, r.exited_zero ? "exited 0" : "failed", r.err.c_str());
        fail();
    }
}

static void exit_if_failed(int rc)
{
    if (rc != 0) {
        fprintf(stderr, "%s\n", emu::last_error());
        _exit(3);
    }
}

static void test_out_of_bounds_device_read_is_caught(void **state)
{
    (void)state;
    expect_caught("read past the end", [] {
        emu::Buffer x(64 * 4, "x"), y(64 * 4, "y");
        memset(x.contents(), 0, 64 * 4);
        emu::Encoder e("bad_read_past_end");
        e.set_buffer(0, x);
        e.set_buffer(1, y);
        exit_if_failed(e.dispatch_threads({64}, {32}));
    });
}

static void test_out_of_bounds_device_writes_are_caught(void **state)
{
    (void)state;
    expect_caught("float4 write past the end", [] {
        emu::Buffer y(4 * 16, "y");
        emu::Encoder e("bad_write_past_end");
        e.set_buffer(0, y);
        exit_if_failed(e.dispatch_threads({4}, {4}));
    });
    /* a size that is not a multiple of 16: the write lands next to the data */
    expect_caught("write past the end, unaligned size", [] {
        emu::Buffer y(4 * 16 + 8, "y");
        emu::Encoder e("bad_write_past_end");
        e.set_buffer(0, y);
        exit_if_failed(e.dispatch_threads({4}, {4}));
    });
}

static void test_read_before_start_is_caught_or_poisoned(void **state)
{
    (void)state;
#ifdef ASAN
    expect_caught("read before the start", [] {
        emu::Buffer x(64 * 4, "x"), y(64 * 4, "y");
        memset(x.contents(), 0, 64 * 4);
        emu::Encoder e("bad_read_before_start");
        e.set_buffer(0, x);
        e.set_buffer(1, y);
        exit_if_failed(e.dispatch_threads({64}, {32}));
    });
#else
    /* without ASan only the end has a guard page: the read sees poison */
    emu::Buffer x(64 * 4, "x"), y(64 * 4, "y");
    memset(x.contents(), 0, 64 * 4);
    emu::Encoder e("bad_read_before_start");
    e.set_buffer(0, x);
    e.set_buffer(1, y);
    expect_ok(e.dispatch_threads({64}, {32}));
    assert_true(isnan(y.data<float>()[0]));
    assert_true(y.data<float>()[1] == 0);
#endif
}

static void test_threadgroup_overflow_is_caught(void **state)
{
    (void)state;
    expect_caught("threadgroup array overflow", [] {
        emu::Buffer y(32 * 4, "y");
        emu::Encoder e("bad_threadgroup_overflow");
        e.set_buffer(0, y);
        exit_if_failed(e.dispatch_threadgroups({1}, {32}));
    });
}

static void test_limits_and_bindings_are_checked(void **state)
{
    (void)state;
    emu::Buffer out(4096 * 4, "out");
    {
        emu::Encoder e("probe_max64");
        e.set_buffer(0, out);
        expect_ok(e.dispatch_threadgroups({2}, {64}));
        expect_error(e.dispatch_threadgroups({1}, {128}), "max_total_threads_per_threadgroup(64)");
        expect_error(e.dispatch_threadgroups({1}, {1025}), "1025 threads per threadgroup");
    }
    {
        emu::Encoder e("probe_big_tg");
        e.set_buffer(0, out);
        expect_ok(e.dispatch_threadgroups({1}, {32}));
        e.set_threadgroup_memory(1, 9000);
        expect_error(e.dispatch_threadgroups({1}, {32}), "exceeds 32 KiB");
    }
    {
        emu::Encoder e("probe_tg_sum");
        e.set_buffer(1, out);
        expect_error(e.dispatch_threadgroups({1}, {64}), "'in' [[buffer(0)]] is not bound");
    }
    {
        emu::Encoder e("probe_attrs");
        e.set_buffer(0, out);
        e.set_value(1, (uint32_t)1);
        expect_error(e.dispatch_threadgroups({1}, {1}), "reads 16 bytes, 4 are bound");
    }
    {
        emu::Encoder e("probe_poison");
        e.set_buffer(0, out);
        expect_error(e.dispatch_threadgroups({1}, {16}), "[[threadgroup(0)]] has no set_threadgroup_memory");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stdlib_vectors_swizzles_and_math),
        cmocka_unit_test(test_simd_functions_match_scalar_model),
        cmocka_unit_test(test_thread_attributes_with_partial_threadgroups),
        cmocka_unit_test(test_barrier_reduction_is_right_in_every_order),
        cmocka_unit_test(test_order_is_shuffled_and_reproducible),
        cmocka_unit_test(test_threadgroup_memory_starts_poisoned),
        cmocka_unit_test(test_missing_barrier_gives_wrong_results),
        cmocka_unit_test(test_simdgroup_barrier_does_not_order_other_simdgroups),
        cmocka_unit_test(test_divergent_barrier_is_reported),
        cmocka_unit_test(test_divergent_simd_functions_are_reported),
        cmocka_unit_test(test_out_of_bounds_device_read_is_caught),
        cmocka_unit_test(test_out_of_bounds_device_writes_are_caught),
        cmocka_unit_test(test_read_before_start_is_caught_or_poisoned),
        cmocka_unit_test(test_threadgroup_overflow_is_caught),
        cmocka_unit_test(test_limits_and_bindings_are_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
