/*
 * test_kernels_simd.c - every kernel variant against the scalar reference,
 * and the run-time dispatch (kernels/dispatch.c).
 *
 * For every ISA this machine can run (all of them, not only the one
 * selected) and every format of the type table:
 *
 *  - quantize and dequantize give ref's bytes exactly (the one exception,
 *    F16 signaling NaNs, is in dispatch.h): random rows of several
 *    distributions (f16-subnormal scales, huge values, zeros, one-hot
 *    rows, exact rounding ties, the largest magnitude with both signs),
 *    rows of random block bytes, f16/bf16 special values, lengths with
 *    tails past the vector width, n = 1 for plain types, odd addresses,
 *    and no byte written outside the row;
 *  - vec_dot agrees with ref within the bound of dispatch.h,
 *    |simd - ref| <= (chain + 16) * 2^-22 * S, chain = n/32 for block
 *    formats (ref adds one float per block) and n/8 for plain types (ref
 *    sums in double; the bound covers the variant's float lanes), S the
 *    sum of |w_i * a_i| with the scale and min parts of formats with a min
 *    counted separately; on rows quantized by ref, on rows of random block
 *    bytes (every level, Q8_0's -128) and with sparse activations, from
 *    one block to 11008 values, at odd addresses;
 *  - gemm (the tiled kernels) gives each (row, token) within the same
 *    bound of ref's vec_dot, for 1..6 rows and 1..32 tokens at odd
 *    addresses and strides, the same bits whatever the tile (one token,
 *    the GEMV path decode takes, included), and writes nothing outside
 *    it; ref has no gemm; avx2 and avx512 have the tiles the kernel issue
 *    asks for;
 *  - the variant tables override what the kernel issue lists.
 *
 * Dispatch: RUVLLM_ISA selects the variant (checked in a fresh process,
 * since the choice is made once), the default is the best runnable one,
 * concurrent first calls agree, and rvl_cpu_isa_check() refuses unknown
 * names and variants this CPU cannot run, agreeing with lib/base/cpu.c's
 * independent CPUID probe.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dispatch.h"
#include "formats.h"
#include "ruvllm.h"

/* xmalloc (kernel_testdata.h) fails the test when out of memory */
#define KT_CHECK_ALLOC(p) assert_non_null(p)
#include "kernel_testdata.h"

static const char *self_exe;

/* ======================================================================
 * Helpers
 * ====================================================================== */

/* The variants to compare with ref: every runnable ISA but ref. */
static int variants(int out[RVL_ISA_COUNT])
{
    int k = 0;
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++)
        if (isa != RVL_ISA_REF && rvl_dispatch_isa_runnable(isa))
            out[k++] = isa;
    return k;
}

/* ======================================================================
 * Quantize and dequantize: ref's bytes exactly
 * ====================================================================== */

/* Quantize x (n floats) with fx and ref into buffers at byte offset
 * `off`; the results must match, and the bytes around the row must keep
 * their canary. */
static void check_quantize(const rvl_kformat *fx, const rvl_kformat *fr, const char *isa,
                           const float *x, int64_t n, int off, const char *what)
{
    const size_t rb = rowb(fr, n);
    uint8_t *ref = xmalloc(rb), *buf = xmalloc(rb + off + 16);
    fr->quantize(x, ref, n, NULL);
    memset(buf, 0xA5, rb + off + 16);
    fx->quantize(x, buf + off, n, NULL);
    if (memcmp(buf + off, ref, rb)) {
        size_t k = 0;
        while (buf[off + k] == ref[k])
            k++;
        fail_msg("%s quantize %s, n=%lld, %s data: byte %zu is %02x, ref %02x", fr->name, isa,
                 (long long)n, what, k, buf[off + k], ref[k]);
    }
    for (size_t k = 0; k < (size_t)off; k++)
        assert_int_equal(buf[k], 0xA5);
    for (size_t k = 0; k < 16; k++)
        if (buf[off + rb + k] != 0xA5)
            fail_msg("%s quantize %s, n=%lld: wrote past the row", fr->name, isa, (long long)n);
    free(ref);
    free(buf);
}

static void test_every_variant_quantizes_like_ref(void **state)
{
    (void)state;
    int vs[RVL_ISA_COUNT], nv = variants(vs), checked = 0;
    const rvl_kformat *f;
    for (int v = 0; v < nv; v++) {
        const char *isa = rvl_dispatch_isa_name(vs[v]);
        for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
            const rvl_kformat *fr = rvl_kformat_get_isa(f->type, RVL_ISA_REF);
            const rvl_kformat *fx = rvl_kformat_get_isa(f->type, vs[v]);
            if (!fr->quantize || fx->quantize == fr->quantize)
                continue;
            checked++;
            int64_t ns[32];
            const int nn = lengths(fr, fr->block_size, ns);
            for (int k = 0; k < nn; k++) {
                const int64_t n = ns[k];
                /* floats at a 4-byte but not 32-byte aligned address */
                float *buf = xmalloc((size_t)(n + 1) * sizeof(float)), *x = buf + 1;
                for (int d = 0; d < D_COUNT; d++) {
                    fill(x, n, (dist)d);
                    check_quantize(fx, fr, isa, x, n, k % 3, dist_name[d]);
                }
                free(buf);
            }
        }
    }
    if (nv)
        assert_true(checked > 0);
}

/* Values every f16/bf16 conversion must get right: signed zeros,
 * infinities, NaNs, the largest f16, the overflow threshold, subnormals
 * and the f16 underflow threshold, and bf16 rounding ties. */
static void test_plain_quantizers_round_special_values_like_ref(void **state)
{
    (void)state;
    static const uint32_t bits[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
        0x7fbfffff, 0x477fe000, 0x477fefff, 0x477ff000, 0x47800000, 0x33800000, 0x33000000,
        0x33000001, 0x38800000, 0x387fe000, 0x387ff000, 0x3f808000, 0x3f818000, 0x3f817fff,
        0x00000001, 0x80400000, 0x7f7fffff, 0x3effffff, 0xc0490fdb, 0x3f800001,
    };
    enum { N = sizeof bits / sizeof bits[0] };
    float x[N];
    for (int i = 0; i < N; i++)
        memcpy(&x[i], &bits[i], 4);
    int vs[RVL_ISA_COUNT], nv = variants(vs);
    for (int v = 0; v < nv; v++) {
        const uint32_t types[] = { RVL_K_F16, RVL_K_BF16, RVL_K_F32 };
        for (size_t t = 0; t < 3; t++) {
            const rvl_kformat *fr = rvl_kformat_get_isa(types[t], RVL_ISA_REF);
            const rvl_kformat *fx = rvl_kformat_get_isa(types[t], vs[v]);
            /* all at once (vector body) and one at a time (scalar tail) */
            check_quantize(fx, fr, rvl_dispatch_isa_name(vs[v]), x, N, 1, "special");
            for (int i = 0; i < N; i++)
                check_quantize(fx, fr, rvl_dispatch_isa_name(vs[v]), x + i, 1, 0, "special");
        }
    }
}

static void check_dequantize(const rvl_kformat *fx, const rvl_kformat *fr, const char *isa,
                             const uint8_t *w, int64_t n, const char *what)
{
    float *ref = xmalloc((size_t)n * sizeof(float));
    float *y = xmalloc((size_t)(n + 4) * sizeof(float));
    fr->dequantize(w, ref, n);
    for (int k = 0; k < 4; k++)
        y[n + k] = -7.25f;
    fx->dequantize(w, y, n);
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&y[i], &ref[i], sizeof(float)))
            fail_msg("%s dequantize %s, n=%lld, %s: y[%lld] = %a, ref %a", fr->name, isa,
                     (long long)n, what, (long long)i, y[i], ref[i]);
    for (int k = 0; k < 4; k++)
        assert_true(y[n + k] == -7.25f);
    free(ref);
    free(y);
}

static void test_every_variant_dequantizes_like_ref(void **state)
{
    (void)state;
    int vs[RVL_ISA_COUNT], nv = variants(vs), checked = 0;
    const rvl_kformat *f;
    for (int v = 0; v < nv; v++) {
        const char *isa = rvl_dispatch_isa_name(vs[v]);
        for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
            const rvl_kformat *fr = rvl_kformat_get_isa(f->type, RVL_ISA_REF);
            const rvl_kformat *fx = rvl_kformat_get_isa(f->type, vs[v]);
            if (!fr->dequantize || fx->dequantize == fr->dequantize)
                continue;
            checked++;
            const scale_fields *sf = fields_of(f->type);
            int64_t ns[32];
            const int nn = lengths(fr, fr->block_size, ns);
            for (int k = 0; k < nn; k++) {
                const int64_t n = ns[k];
                const size_t rb = rowb(fr, n);
                uint8_t *buf = xmalloc(rb + 1), *w = buf + (k & 1);
                float *x = xmalloc((size_t)n * sizeof(float));
                fill(x, n, D_HEAVY);
                fr->quantize(x, w, n, NULL);
                check_dequantize(fx, fr, isa, w, n, "quantized row");
                if (sf) {
                    random_blocks(fr, w, n);
                    check_dequantize(fx, fr, isa, w, n, "random blocks");
                } else {
                    /* plain types: every bit pattern but F16 NaNs
                     * (vcvtph2ps quiets signaling ones, ref and numpy
                     * keep them signaling: dispatch.h) */
                    for (size_t b = 0; b < rb; b++)
                        w[b] = (uint8_t)rng_u64();
                    if (fr->type == RVL_K_F16)
                        for (size_t b = 1; b < rb; b += 2)
                            if ((w[b] & 0x7c) == 0x7c)
                                w[b] &= 0xfb;
                    check_dequantize(fx, fr, isa, w, n, "random bits");
                }
                free(buf);
                free(x);
            }
        }
    }
    if (nv)
        assert_true(checked > 0);
}

/* ======================================================================
 * Dot products: ref within the documented bound
 * ====================================================================== */

/* sum over i of |w_i * a_i| as ref sums the terms: for formats with a
 * min, the scale part (min zeroed) and the min part (scale zeroed) of w
 * count separately. */
static double magnitude(const rvl_kformat *fr, const rvl_kformat *ar, const uint8_t *w,
                        const uint8_t *act, int64_t n)
{
    const scale_fields *sf = fields_of(fr->type);
    const size_t rb = rowb(fr, n);
    float *wd = xmalloc((size_t)n * sizeof(float)), *ad = xmalloc((size_t)n * sizeof(float));
    uint8_t *tmp = xmalloc(rb);
    ar->dequantize(act, ad, n);
    double s = 0;
    for (int part = 0; part < (sf && sf->min_off >= 0 ? 2 : 1); part++) {
        memcpy(tmp, w, rb);
        if (sf && sf->min_off >= 0)
            for (size_t b = 0; b < rb / fr->type_size; b++)
                put_f16(tmp + b * fr->type_size + (part ? sf->d_off : sf->min_off), 0.0f);
        fr->dequantize(tmp, wd, n);
        for (int64_t i = 0; i < n; i++)
            s += fabs((double)wd[i] * ad[i]);
    }
    free(wd);
    free(ad);
    free(tmp);
    return s;
}

static double worst_ratio; /* largest |diff| / bound seen, for the report */

static void check_dot(const rvl_kformat *fx, const rvl_kformat *fr, const char *isa,
                      const uint8_t *w, const uint8_t *act, int64_t n, const char *what)
{
    const rvl_kformat *ar = rvl_kformat_get_isa(fr->vec_dot_type, RVL_ISA_REF);
    const double ref = fr->vec_dot(n, w, act);
    const double got = fx->vec_dot(n, w, act);
    const double chain = fr->block_size == 1 ? (double)n / 8 : (double)n / 32;
    const double bound = (chain + 16) * ldexp(1.0, -22) * magnitude(fr, ar, w, act, n) + 1e-37;
    const double diff = fabs(got - ref);
    if (diff / bound > worst_ratio)
        worst_ratio = diff / bound;
    if (!(diff <= bound))
        fail_msg("%s . %s vec_dot %s, n=%lld, %s: %.9g, ref %.9g (|diff| %.3g > %.3g)", fr->name,
                 ar->name, isa, (long long)n, what, got, ref, diff, bound);
}

static void test_every_variant_dot_product_matches_ref(void **state)
{
    (void)state;
    int vs[RVL_ISA_COUNT], nv = variants(vs), checked = 0;
    const rvl_kformat *f;
    for (int v = 0; v < nv; v++) {
        const char *isa = rvl_dispatch_isa_name(vs[v]);
        for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
            const rvl_kformat *fr = rvl_kformat_get_isa(f->type, RVL_ISA_REF);
            const rvl_kformat *fx = rvl_kformat_get_isa(f->type, vs[v]);
            if (!fr->vec_dot || fx->vec_dot == fr->vec_dot)
                continue;
            checked++;
            const rvl_kformat *ar = rvl_kformat_get_isa(fr->vec_dot_type, RVL_ISA_REF);
            const scale_fields *sf = fields_of(f->type);
            int64_t ns[32];
            const int nn = lengths(fr, lcm64(fr->block_size, ar->block_size), ns);
            for (int k = 0; k < nn; k++) {
                const int64_t n = ns[k];
                /* exact-size buffers (ASan sees any over-read); odd
                 * addresses for the block data on every other length */
                const int wo = k & 1, ao = 3 * (k & 1);
                const size_t wb = rowb(fr, n), ab = rowb(ar, n);
                uint8_t *wbuf = xmalloc(wb + wo), *abuf = xmalloc(ab + ao);
                uint8_t *w = wbuf + wo, *act = abuf + ao;
                float *x = xmalloc((size_t)n * sizeof(float)), *a = xmalloc((size_t)n * sizeof(float));
                fill(x, n, D_WEIGHTS);
                fill(a, n, D_HEAVY);
                fr->quantize(x, w, n, NULL);
                ar->quantize(a, act, n, NULL);
                check_dot(fx, fr, isa, w, act, n, "quantized rows");
                if (sf) {
                    random_blocks(fr, w, n);
                    check_dot(fx, fr, isa, w, act, n, "random blocks");
                }
                fill(a, n, D_SPARSE);
                ar->quantize(a, act, n, NULL);
                check_dot(fx, fr, isa, w, act, n, "sparse activations");
                free(wbuf);
                free(abuf);
                free(x);
                free(a);
            }
        }
    }
    if (nv)
        assert_true(checked > 0);
    if (getenv("RVL_KERNELS_REPORT"))
        printf("largest |simd - ref| / bound: %.3g\n", worst_ratio);
}

/* ======================================================================
 * Tiled GEMM (formats.h gemm slot): every (row, token) result within the
 * vec_dot bound of ref's vec_dot, and the same bits whatever the tile
 * (so matmul output does not depend on how threads group rows)
 * ====================================================================== */

#define GEMM_ROWS 10  /* more than RVL_GEMM_ROWS: the kernel loops groups */
#define GEMM_TOKENS 32

static void check_gemm_format(const rvl_kformat *fx, const rvl_kformat *fr, const char *isa,
                              int64_t n, int odd, bool random)
{
    const rvl_kformat *ar = rvl_kformat_get_isa(fr->vec_dot_type, RVL_ISA_REF);
    const size_t rb = rowb(fr, n), ab = rowb(ar, n);
    /* odd strides and offsets: rows at any byte address; exact-size
     * buffers so ASan sees any read past the last row */
    const size_t ws = rb + (size_t)odd, as = ab + 3 * (size_t)odd;
    const size_t wo = (size_t)odd, ao = 5 * (size_t)odd;
    uint8_t *wbuf = xmalloc(wo + (GEMM_ROWS - 1) * ws + rb);
    uint8_t *abuf = xmalloc(ao + (GEMM_TOKENS - 1) * as + ab);
    uint8_t *w = wbuf + wo, *act = abuf + ao;
    float *x = xmalloc((size_t)n * sizeof(float));
    for (int r = 0; r < GEMM_ROWS; r++) {
        fill(x, n, D_WEIGHTS);
        fr->quantize(x, w + r * ws, n, NULL);
        if (random && fields_of(fr->type))
            random_blocks(fr, w + r * ws, n);
    }
    for (int t = 0; t < GEMM_TOKENS; t++) {
        fill(x, n, t % 5 == 4 ? D_SPARSE : D_HEAVY);
        ar->quantize(x, act + t * as, n, NULL);
    }
    /* the whole tile once: each result against ref's vec_dot */
    float full[GEMM_TOKENS][GEMM_ROWS];
    fx->gemm(n, w, ws, GEMM_ROWS, act, as, GEMM_TOKENS, &full[0][0], GEMM_ROWS);
    /* vec_dot's bound (dispatch.h): for block formats ref adds one float
     * per block (chain n/32); F32/F16/BF16 are compared with ref's double
     * sum (chain n/8), as check_dot does. The float tiles sum n/16
     * products per f32 lane (FMA, one rounding each, or vdpbf16ps: n/32
     * steps of two roundings) and then 16 lanes in 4 levels, each
     * rounding at most 2^-24 of a partial sum no larger than S: |tile -
     * exact| <= (n/16 + 4) * 2^-24 * S to first order, well inside
     * (n/8 + 16) * 2^-22 * S; ref's double sum adds a negligible 2^-53 n S.
     * Products of floats are exact in double (magnitude), so S is exact. */
    const double chain = fr->block_size == 1 ? (double)n / 8 : (double)n / 32;
    for (int t = 0; t < GEMM_TOKENS; t++)
        for (int r = 0; r < GEMM_ROWS; r++) {
            const double ref = fr->vec_dot(n, w + r * ws, act + t * as);
            const double bound = (chain + 16) * ldexp(1.0, -22) *
                                     magnitude(fr, ar, w + r * ws, act + t * as, n) + 1e-37;
            const double diff = fabs((double)full[t][r] - ref);
            if (!(diff <= bound))
                fail_msg("%s gemm %s, n=%lld, row %d token %d: %.9g, ref %.9g (|diff| %.3g > %.3g)",
                         fr->name, isa, (long long)n, r, t, full[t][r], ref, diff, bound);
        }
    /* every smaller tile, at every row and token offset it fits: the same
     * bits, and nothing written outside it */
    enum { YS = GEMM_ROWS + 3 };
    float y[GEMM_TOKENS + 1][YS];
    for (int nr = 1; nr <= GEMM_ROWS; nr++)
        for (int nt = 1; nt <= GEMM_TOKENS; nt++) {
            const int r0 = (nr + nt) % (GEMM_ROWS - nr + 1), t0 = (nr * nt) % (GEMM_TOKENS - nt + 1);
            memset(y, 0x7f, sizeof y);
            fx->gemm(n, w + r0 * ws, ws, nr, act + t0 * as, as, nt, &y[0][1], YS);
            for (int t = 0; t <= GEMM_TOKENS; t++)
                for (int r = 0; r < YS; r++) {
                    const bool in = t < nt && r >= 1 && r <= nr;
                    uint32_t got;
                    memcpy(&got, &y[t][r], 4);
                    if (in && memcmp(&y[t][r], &full[t0 + t][r0 + r - 1], 4))
                        fail_msg("%s gemm %s, n=%lld, nr=%d nt=%d: row %d token %d %.9g, "
                                 "full tile %.9g", fr->name, isa, (long long)n, nr, nt, r0 + r - 1,
                                 t0 + t, y[t][r], full[t0 + t][r0 + r - 1]);
                    if (!in && got != 0x7f7f7f7fu)
                        fail_msg("%s gemm %s, nr=%d nt=%d wrote y[%d][%d] outside the tile",
                                 fr->name, isa, nr, nt, t, r - 1);
                }
        }
    free(wbuf);
    free(abuf);
    free(x);
}

static void test_every_gemm_matches_ref_dot_for_every_tile(void **state)
{
    (void)state;
    int vs[RVL_ISA_COUNT], nv = variants(vs), checked = 0;
    const rvl_kformat *f;
    static const int64_t lens[] = { 32, 64, 96, 576 };
    static const int64_t klens[] = { 256, 512, 768, 2304 }; /* K-quants: 256-value blocks */
    /* F32/F16/BF16: tails of every size class (a masked chunk alone, a
     * 32-value pass + a chunk + a tail, a whole 256-value k-block + a
     * tail, several k-blocks) */
    static const int64_t plens[] = { 7, 61, 300, 576 };
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
        const rvl_kformat *fr = rvl_kformat_get_isa(f->type, RVL_ISA_REF);
        assert_null(fr->gemm); /* ref has none: lib/ loops over vec_dot */
    }
    for (int v = 0; v < nv; v++) {
        const char *isa = rvl_dispatch_isa_name(vs[v]);
        for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
            const rvl_kformat *fx = rvl_kformat_get_isa(f->type, vs[v]);
            if (!fx->gemm)
                continue;
            const rvl_kformat *fr = rvl_kformat_get_isa(f->type, RVL_ISA_REF);
            assert_int_equal(fx->vec_dot_type, fr->vec_dot_type);
            assert_true(fr->block_size == 1 || fr->block_size == 32 || fr->block_size == 256);
            const int64_t *ls = fr->block_size == 256 ? klens : fr->block_size == 1 ? plens : lens;
            checked++;
            for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
                check_gemm_format(fx, fr, isa, ls[k], (int)(k & 1), false);
                check_gemm_format(fx, fr, isa, ls[k], (int)(~k & 1), true);
            }
        }
    }
    /* the avx512 table has them where the CPU has VNNI */
    if (rvl_dispatch_isa_runnable(RVL_ISA_AVX512) && (rvl_dispatch_cpu() & RVL_KCPU_VNNI)) {
        static const uint32_t tiled[] = { RVL_K_Q4_0, RVL_K_Q4_1, RVL_K_Q8_0, RVL_K_RVL_I4S_G32,
                                          RVL_K_Q4_K, RVL_K_Q6_K, RVL_K_Q5_0, RVL_K_Q5_1,
                                          RVL_K_Q5_K, RVL_K_IQ4_NL, RVL_K_IQ4_XS, RVL_K_Q2_K,
                                          RVL_K_Q3_K };
        for (size_t k = 0; k < sizeof tiled / sizeof tiled[0]; k++)
            assert_non_null(rvl_kformat_get_isa(tiled[k], RVL_ISA_AVX512)->gemm);
        assert_true(checked > 0);
    }
    /* and the plain float formats, on both */
    static const uint32_t plain[] = { RVL_K_F32, RVL_K_F16, RVL_K_BF16 };
    for (size_t k = 0; k < sizeof plain / sizeof plain[0]; k++) {
        if (rvl_dispatch_isa_runnable(RVL_ISA_AVX2))
            assert_non_null(rvl_kformat_get_isa(plain[k], RVL_ISA_AVX2)->gemm);
        if (rvl_dispatch_isa_runnable(RVL_ISA_AVX512))
            assert_non_null(rvl_kformat_get_isa(plain[k], RVL_ISA_AVX512)->gemm);
    }
    /* the avx2 table has them for what real models use (Q4_K_M files:
     * Q4_K and Q6_K; Q2_K and Q3_K files, IQ4_XS), and so does avx512
     * without VNNI, which inherits them (and Q2_K, Q3_K with VNNI) */
    if (rvl_dispatch_isa_runnable(RVL_ISA_AVX2)) {
        static const uint32_t tiled2[] = { RVL_K_Q4_0, RVL_K_Q4_1, RVL_K_Q8_0, RVL_K_RVL_I4S_G32,
                                           RVL_K_Q4_K, RVL_K_Q6_K, RVL_K_Q5_0, RVL_K_Q5_1,
                                           RVL_K_Q5_K, RVL_K_IQ4_NL, RVL_K_Q2_K, RVL_K_Q3_K,
                                           RVL_K_IQ4_XS };
        for (size_t k = 0; k < sizeof tiled2 / sizeof tiled2[0]; k++)
            assert_non_null(rvl_kformat_get_isa(tiled2[k], RVL_ISA_AVX2)->gemm);
        assert_true(checked > 0);
    }
}

/* ======================================================================
 * The 16-row layout (formats.h gemm16): pack16 and unpack16 are each
 * other's inverse, the layout is the documented one, every result is
 * within the vec_dot bound of ref, and the same bits whatever the tokens
 * it comes with: one token (decode) gives prompt processing's bits
 * ====================================================================== */

static void check_gemm16(const rvl_kformat *fx, const char *isa, int64_t n, int odd)
{
    /* 37 tokens: tiles of 16, 16, 4, 1; 5 groups: decode takes 4, then 1 */
    enum { NG = 5, ROWS = 16 * NG, NT = 37 };
    const rvl_kformat *fr = rvl_kformat_get_isa(fx->type, RVL_ISA_REF);
    const rvl_kformat *ar = rvl_kformat_get_isa(fr->vec_dot_type, RVL_ISA_REF);
    /* Q8_0 activations carry their block sums and scales (rvl_act_sums) */
    const bool sums = ar->type == RVL_K_Q8_0;
    assert_true(sums || ar->type == RVL_K_Q8_K || ar->type == RVL_K_Q8_1);
    const size_t rb = rowb(fr, n), gb = 16 * rb;
    const size_t ws = rb + (size_t)odd,
                 as = (sums ? rvl_act_sums_row_bytes(n) : rowb(ar, n)) + 4 * (size_t)odd;
    uint8_t *rows = xmalloc(ROWS * ws), *back = xmalloc(ROWS * ws);
    uint8_t *pbuf = xmalloc(NG * gb + (size_t)odd), *pk = pbuf + odd; /* exact size: ASan */
    uint8_t *act = xmalloc(NT * as);
    float *x = xmalloc((size_t)n * sizeof(float));
    for (int r = 0; r < ROWS; r++) {
        fill(x, n, D_WEIGHTS);
        fr->quantize(x, rows + r * ws, n, NULL);
        if (r % 3 == 2 && fields_of(fr->type))
            random_blocks(fr, rows + r * ws, n);
    }
    for (int t = 0; t < NT; t++) {
        fill(x, n, t % 5 == 4 ? D_SPARSE : D_HEAVY);
        ar->quantize(x, act + t * as, n, NULL);
        if (sums)
            rvl_act_sums(act + t * as, n);
    }
    for (int g = 0; g < NG; g++)
        fx->pack16(n, rows + (size_t)g * 16 * ws, ws, pk + (size_t)g * gb);
    /* the layout: block i's 16 scales (Q4_K: d, then dmin), Q5_0's 16 qh,
     * then 4-byte pieces of the rest (Q4_K: its scales, then qs), row r's
     * at 4r of each 64-byte piece */
    const bool k4 = fr->type == RVL_K_Q4_K || fr->type == RVL_K_Q5_K, q6 = fr->type == RVL_K_Q6_K;
    const bool hm = fr->type == RVL_K_Q4_1 || fr->type == RVL_K_Q5_1; /* d, m */
    const size_t hb = fr->type == RVL_K_Q5_0 || fr->type == RVL_K_Q5_1 ? 4 : 0;
    const size_t qb = fr->type_size - 2 - hb - 2 * (k4 || hm);
    for (int64_t i = 0; i < n / fr->block_size; i++)
        for (int r = 0; r < 16; r++) {
            const uint8_t *b = pk + (size_t)i * 16 * fr->type_size;
            const uint8_t *src = rows + r * ws + (size_t)i * fr->type_size;
            if (k4) {
                assert_memory_equal(b + 2 * r, src, 2);
                assert_memory_equal(b + 32 + 2 * r, src + 2, 2);
                for (size_t c = 0; c < qb / 4; c++)
                    assert_memory_equal(b + 64 + 64 * c + 4 * r, src + 4 + 4 * c, 4);
                continue;
            }
            if (fr->type == RVL_K_MXFP4) { /* e, then the nibbles in pieces */
                assert_int_equal(b[r], src[0]);
                for (size_t c = 0; c < 4; c++)
                    assert_memory_equal(b + 16 + 64 * c + 4 * r, src + 1 + 4 * c, 4);
                continue;
            }
            if (fr->type == RVL_K_IQ4_XS) { /* d, scales_h, scales_l, qs in pieces */
                assert_memory_equal(b + 2 * r, src, 2);
                assert_memory_equal(b + 32 + 2 * r, src + 2, 2);
                assert_memory_equal(b + 64 + 4 * r, src + 4, 4);
                for (size_t c = 0; c < 32; c++)
                    assert_memory_equal(b + 128 + 64 * c + 4 * r, src + 8 + 4 * c, 4);
                continue;
            }
            if (q6) { /* d; then the scales, ql and qh in 4-byte pieces */
                assert_memory_equal(b + 2 * r, src + 208, 2);
                for (size_t c = 0; c < 4 + 32 + 16; c++)
                    assert_memory_equal(b + 32 + 64 * c + 4 * r, src + (c < 4 ? 192 + 4 * c : 4 * (c - 4)), 4);
                continue;
            }
            assert_memory_equal(b + 2 * r, src, 2);
            if (hm)
                assert_memory_equal(b + 32 + 2 * r, src + 2, 2);
            const size_t h0 = hm ? 64 : 32, s0 = hm ? 4 : 2;
            if (hb)
                assert_memory_equal(b + h0 + 4 * r, src + s0, 4);
            for (size_t c = 0; c < qb / 4; c++)
                assert_memory_equal(b + h0 + 16 * hb + 64 * c + 4 * r, src + s0 + hb + 4 * c, 4);
        }
    memset(back, 0x5A, ROWS * ws);
    for (int g = 0; g < NG; g++)
        fx->unpack16(n, pk + (size_t)g * gb, back + (size_t)g * 16 * ws, ws);
    for (int r = 0; r < ROWS; r++)
        if (memcmp(back + r * ws, rows + r * ws, rb))
            fail_msg("%s unpack16(pack16) n=%lld: row %d differs", fr->name, (long long)n, r);
    /* all groups, all tokens: within the bound of ref's vec_dot (one FMA
     * per block, as a gemm tile) */
    static float full[NT][ROWS];
    fx->gemm16(n, pk, NG, act, as, NT, &full[0][0], ROWS);
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < ROWS; r++) {
            const double ref = fr->vec_dot(n, rows + r * ws, act + t * as);
            const double bound = ((double)n / fr->block_size + 16) * ldexp(1.0, -22) *
                                     magnitude(fr, ar, rows + r * ws, act + t * as, n) + 1e-37;
            if (!(fabs((double)full[t][r] - ref) <= bound))
                fail_msg("%s gemm16 %s, n=%lld, row %d token %d: %.9g, ref %.9g", fr->name, isa,
                         (long long)n, r, t, full[t][r], ref);
        }
    /* fewer groups and tokens, at every offset: the same bits, nothing
     * written outside (nt = 1 is decode) */
    enum { YS = ROWS + 3 };
    static float y[NT + 1][YS];
    static const int nts[] = { 1, 2, 3, 5, 8, 15, 16, 17, 31, 33 };
    for (int ng = 1; ng <= NG; ng++)
        for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) {
            const int nt = nts[k], g0 = (ng + nt) % (NG - ng + 1), t0 = (ng * nt) % (NT - nt + 1);
            memset(y, 0x7f, sizeof y);
            fx->gemm16(n, pk + (size_t)g0 * gb, ng, act + t0 * as, as, nt, &y[0][1], YS);
            for (int t = 0; t <= NT; t++)
                for (int r = 0; r < YS; r++) {
                    const bool in = t < nt && r >= 1 && r <= 16 * ng;
                    uint32_t got;
                    memcpy(&got, &y[t][r], 4);
                    if (in && memcmp(&y[t][r], &full[t0 + t][16 * g0 + r - 1], 4))
                        fail_msg("%s gemm16 %s, n=%lld, ng=%d nt=%d: row %d token %d %.9g, "
                                 "all at once %.9g", fr->name, isa, (long long)n, ng, nt,
                                 16 * g0 + r - 1, t0 + t, y[t][r], full[t0 + t][16 * g0 + r - 1]);
                    if (!in && got != 0x7f7f7f7fu)
                        fail_msg("%s gemm16 %s, ng=%d nt=%d wrote y[%d][%d] outside", fr->name,
                                 isa, ng, nt, t, r - 1);
                }
        }
    free(rows);
    free(back);
    free(pbuf);
    free(act);
    free(x);
}

static void test_gemm16_decode_gives_prompt_bits(void **state)
{
    (void)state;
    int vs[RVL_ISA_COUNT], nv = variants(vs), checked = 0;
    const rvl_kformat *f;
    static const int64_t lens[] = { 32, 64, 96, 160, 576, 4096 + 96 };
    static const int64_t klens[] = { 256, 512, 768, 2304, 4096 };
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
        const rvl_kformat *fr = rvl_kformat_get_isa(f->type, RVL_ISA_REF);
        assert_null(fr->gemm16); /* no packed layout on ref: lib/ keeps rows */
    }
    for (int v = 0; v < nv; v++) {
        const char *isa = rvl_dispatch_isa_name(vs[v]);
        /* a Q8_0 activation row with its tail in one pass: the bytes of
         * the quantizer then rvl_act_sums */
        const rvl_kformat *aq = rvl_kformat_get_isa(RVL_K_Q8_0, vs[v]);
        for (size_t k = 0; aq->quantize_act && k < sizeof lens / sizeof lens[0]; k++) {
            const int64_t n = lens[k];
            const size_t rb = rvl_act_sums_row_bytes(n);
            float *x = xmalloc((size_t)n * sizeof(float));
            uint8_t *a1 = xmalloc(rb), *a2 = xmalloc(rb);
            fill(x, n, D_HEAVY);
            memset(a1, 0x5A, rb); /* the padding before the sums: equal */
            memset(a2, 0x5A, rb);
            aq->quantize_act(x, a1, n, NULL);
            aq->quantize(x, a2, n, NULL);
            rvl_act_sums(a2, n);
            if (memcmp(a1, a2, rb))
                fail_msg("%s quantize_act n=%lld differs from quantize + rvl_act_sums", isa,
                         (long long)n);
            free(x);
            free(a1);
            free(a2);
        }
        for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
            const rvl_kformat *fx = rvl_kformat_get_isa(f->type, vs[v]);
            if (!fx->gemm16)
                continue;
            assert_non_null(fx->pack16);
            assert_non_null(fx->unpack16);
            checked++;
            if (fx->block_size == 256) {
                for (size_t k = 0; k < sizeof klens / sizeof klens[0]; k++)
                    check_gemm16(fx, isa, klens[k], (int)(k & 1));
                continue;
            }
            assert_int_equal(fx->block_size, 32);
            for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
                check_gemm16(fx, isa, lens[k], (int)(k & 1));
        }
    }
    if (rvl_dispatch_isa_runnable(RVL_ISA_AVX512) && (rvl_dispatch_cpu() & RVL_KCPU_VNNI)) {
        static const uint32_t types[] = { RVL_K_Q4_0, RVL_K_IQ4_NL, RVL_K_Q5_0, RVL_K_Q8_0,
                                          RVL_K_RVL_I4S_G32, RVL_K_Q4_K, RVL_K_Q6_K,
                                          RVL_K_Q4_1, RVL_K_Q5_1, RVL_K_Q5_K, RVL_K_IQ4_XS,
                                          RVL_K_MXFP4 };
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
            assert_non_null(rvl_kformat_get_isa(types[k], RVL_ISA_AVX512)->gemm16);
        assert_true(checked >= 12);
    }
}

/* The kernel issue's list: on every variant that runs here, these slots
 * are not ref's. */
static void test_variants_override_the_listed_kernels(void **state)
{
    (void)state;
    static const uint32_t dots[] = {
        RVL_K_Q4_0, RVL_K_Q4_1, RVL_K_Q5_0, RVL_K_Q5_1, RVL_K_Q8_0, RVL_K_Q2_K, RVL_K_Q3_K,
        RVL_K_Q4_K, RVL_K_Q5_K, RVL_K_Q6_K, RVL_K_IQ4_NL, RVL_K_IQ4_XS, RVL_K_MXFP4, RVL_K_F16,
        RVL_K_F32, RVL_K_BF16,
    };
    static const uint32_t quants[] = { RVL_K_Q8_0, RVL_K_Q8_1, RVL_K_Q8_K, RVL_K_F16, RVL_K_BF16 };
    static const uint32_t dequants[] = { RVL_K_F16, RVL_K_BF16, RVL_K_Q8_0, RVL_K_Q4_0,
                                         RVL_K_Q4_1, RVL_K_Q4_K, RVL_K_Q6_K };
    int vs[RVL_ISA_COUNT], nv = variants(vs);
    for (int v = 0; v < nv; v++) {
        if (vs[v] != RVL_ISA_AVX2 && vs[v] != RVL_ISA_AVX512 && vs[v] != RVL_ISA_NEON)
            continue;
        for (size_t i = 0; i < sizeof dots / sizeof dots[0]; i++)
            assert_ptr_not_equal(rvl_kformat_get_isa(dots[i], vs[v])->vec_dot,
                                 rvl_kformat_get_isa(dots[i], RVL_ISA_REF)->vec_dot);
        for (size_t i = 0; i < sizeof quants / sizeof quants[0]; i++)
            assert_ptr_not_equal(rvl_kformat_get_isa(quants[i], vs[v])->quantize,
                                 rvl_kformat_get_isa(quants[i], RVL_ISA_REF)->quantize);
        for (size_t i = 0; i < sizeof dequants / sizeof dequants[0]; i++)
            assert_ptr_not_equal(rvl_kformat_get_isa(dequants[i], vs[v])->dequantize,
                                 rvl_kformat_get_isa(dequants[i], RVL_ISA_REF)->dequantize);
        /* with VNNI, avx512 has integer dots of its own */
        if (vs[v] == RVL_ISA_AVX512 && (rvl_dispatch_cpu() & RVL_KCPU_VNNI))
            assert_ptr_not_equal(rvl_kformat_get_isa(RVL_K_Q4_1, RVL_ISA_AVX512)->vec_dot,
                                 rvl_kformat_get_isa(RVL_K_Q4_1, RVL_ISA_AVX2)->vec_dot);
    }
}

/* Weight formats keep ref's quantizers (the searches are not vectorized)
 * and every variant table has the same formats and geometry as ref. */
static void test_variant_tables_keep_ref_geometry(void **state)
{
    (void)state;
    const rvl_kformat *f;
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++) {
        if (!rvl_dispatch_isa_runnable(isa))
            continue;
        size_t count = 0;
        for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++, count++) {
            const rvl_kformat *fx = rvl_kformat_get_isa(f->type, isa);
            const rvl_kformat *fr = rvl_kformat_ref(f->type);
            assert_non_null(fx);
            assert_string_equal(fx->name, fr->name);
            assert_int_equal(fx->block_size, fr->block_size);
            assert_int_equal(fx->type_size, fr->type_size);
            assert_int_equal(fx->row_header, fr->row_header);
            assert_int_equal(fx->vec_dot_type, fr->vec_dot_type);
            assert_int_equal(fx->quantize != NULL, fr->quantize != NULL);
            assert_int_equal(fx->dequantize != NULL, fr->dequantize != NULL);
            assert_int_equal(fx->vec_dot != NULL, fr->vec_dot != NULL);
        }
        assert_true(count > 40);
        assert_null(rvl_kformat_get_isa(4, isa)); /* removed ggml id */
    }
}

/* ======================================================================
 * Dispatch
 * ====================================================================== */

/* Child mode: report the selected ISA and the best runnable one (the
 * child may see another CPU than the parent, e.g. under valgrind, which
 * runs only the parent) after racing four threads through the first use
 * of the tables. Exit 0, or 1 if they disagree. */
static void *first_use(void *arg)
{
    *(const rvl_kformat **)arg = rvl_kformat_get(RVL_K_Q4_1);
    return NULL;
}

static int child_report_isa(void)
{
    pthread_t th[4];
    const rvl_kformat *got[4];
    for (int i = 0; i < 4; i++)
        if (pthread_create(&th[i], NULL, first_use, &got[i]))
            return 2;
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    const int isa = rvl_dispatch_isa();
    for (int i = 0; i < 4; i++)
        if (got[i] != rvl_kformat_get_isa(RVL_K_Q4_1, isa) || got[i] != rvl_kformat_get(RVL_K_Q4_1))
            return 1;
    int best = RVL_ISA_REF;
    for (int k = 0; k < RVL_ISA_COUNT; k++)
        if (rvl_dispatch_isa_runnable(k))
            best = k;
    printf("%s %s\n", rvl_dispatch_isa_name(isa), rvl_dispatch_isa_name(best));
    return 0;
}

/* Run this program in child mode with RUVLLM_ISA set to `env` (NULL:
 * unset); "selected best" goes to out. */
static void run_child(const char *env, char *out, size_t cap)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], STDOUT_FILENO);
        close(fd[0]);
        close(fd[1]);
        if (env)
            setenv("RUVLLM_ISA", env, 1);
        else
            unsetenv("RUVLLM_ISA");
        execl(self_exe, self_exe, "--report-isa", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < cap && (r = read(fd[0], out + len, cap - 1 - len)) > 0)
        len += (size_t)r;
    out[len] = '\0';
    close(fd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child with RUVLLM_ISA=%s failed (status %d)", env ? env : "(unset)", status);
    char *nl = strchr(out, '\n');
    if (nl)
        *nl = '\0';
}

static void test_ruvllm_isa_selects_every_runnable_variant(void **state)
{
    (void)state;
    char got[64], want[64];
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++) {
        if (!rvl_dispatch_isa_runnable(isa))
            continue;
        run_child(rvl_dispatch_isa_name(isa), got, sizeof got);
        snprintf(want, sizeof want, "%s ", rvl_dispatch_isa_name(isa));
        if (strncmp(got, want, strlen(want)))
            fail_msg("RUVLLM_ISA=%s: the child reports \"%s\"", rvl_dispatch_isa_name(isa), got);
    }
}

/* "selected best" with selected == best */
static void assert_selects_best(const char *report, const char *env)
{
    char sel[32], best[32];
    assert_int_equal(sscanf(report, "%31s %31s", sel, best), 2);
    if (strcmp(sel, best))
        fail_msg("RUVLLM_ISA=%s: selected %s, the best runnable is %s", env ? env : "(unset)", sel,
                 best);
}

static void test_default_is_the_best_runnable_variant(void **state)
{
    (void)state;
    char got[64];
    run_child(NULL, got, sizeof got);
    assert_selects_best(got, NULL);
    /* an unusable request leaves the library on the default (the CLI
     * refuses it first through rvl_cpu_isa_check) */
    run_child("bogus", got, sizeof got);
    assert_selects_best(got, "bogus");
#if defined(__x86_64__) || defined(__i386__)
    run_child("neon", got, sizeof got);
    assert_selects_best(got, "neon");
#endif
}

static void test_isa_check_refuses_unknown_and_unrunnable_variants(void **state)
{
    (void)state;
    assert_int_equal(rvl_cpu_isa_check("ref"), 0);
    assert_int_equal(rvl_cpu_isa_check("bogus"), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "RUVLLM_ISA=bogus"));
    assert_int_equal(rvl_cpu_isa_check(""), RVL_EINVAL);
    assert_int_equal(rvl_cpu_isa_check("AVX2"), RVL_EINVAL);
#if defined(__x86_64__) || defined(__i386__)
    assert_int_equal(rvl_cpu_isa_check("neon"), RVL_EUNSUPPORTED);
    assert_non_null(strstr(rvl_errmsg(), "not available"));
    /* agrees with the features lib/base/cpu.c reports from the same probe */
    const rvl_cpu_features *c = rvl_cpu();
    const bool avx2 = c->avx2 && c->fma && c->f16c;
    const bool avx512 = avx2 && c->avx512f && c->avx512bw && c->avx512vl;
    assert_int_equal(rvl_cpu_isa_check("avx2"), avx2 ? 0 : RVL_EUNSUPPORTED);
    assert_int_equal(rvl_cpu_isa_check("avx512"), avx512 ? 0 : RVL_EUNSUPPORTED);
    assert_int_equal(!!(rvl_dispatch_cpu() & RVL_KCPU_VNNI), avx512 && c->avx512vnni);
    assert_int_equal(!!(rvl_dispatch_cpu() & RVL_KCPU_BF16), avx512 && c->avx512bf16);
#elif defined(__aarch64__)
    assert_int_equal(rvl_cpu_isa_check("avx2"), RVL_EUNSUPPORTED);
    assert_int_equal(rvl_cpu_isa_check("avx512"), RVL_EUNSUPPORTED);
    /* agrees with the features lib/base/cpu.c reports from the same probe */
    assert_int_equal(rvl_cpu_isa_check("neon"), rvl_cpu()->neon ? 0 : RVL_EUNSUPPORTED);
    assert_int_equal(!!(rvl_dispatch_cpu() & RVL_KCPU_DOTPROD), !!rvl_cpu()->dotprod);
#endif
    assert_string_equal(rvl_cpu_isa_selected(), rvl_dispatch_isa_name(rvl_dispatch_isa()));
    assert_int_equal(rvl_dispatch_isa_parse("avx512"), RVL_ISA_AVX512);
    assert_int_equal(rvl_dispatch_isa_parse(NULL), -1);
    assert_null(rvl_dispatch_isa_name(RVL_ISA_COUNT));
    assert_false(rvl_dispatch_isa_runnable(-1));
}

static void test_kformat_get_serves_the_selected_variant(void **state)
{
    (void)state;
    const int isa = rvl_dispatch_isa();
    const rvl_kformat *f;
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
        assert_ptr_equal(rvl_kformat_get(f->type), f);
        assert_ptr_equal(rvl_kformat_get_isa(f->type, isa), f);
    }
}

int main(int argc, char **argv)
{
    self_exe = argv[0];
    if (argc > 1 && !strcmp(argv[1], "--report-isa"))
        return child_report_isa();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ruvllm_isa_selects_every_runnable_variant),
        cmocka_unit_test(test_default_is_the_best_runnable_variant),
        cmocka_unit_test(test_isa_check_refuses_unknown_and_unrunnable_variants),
        cmocka_unit_test(test_kformat_get_serves_the_selected_variant),
        cmocka_unit_test(test_variant_tables_keep_ref_geometry),
        cmocka_unit_test(test_variants_override_the_listed_kernels),
        cmocka_unit_test(test_every_variant_quantizes_like_ref),
        cmocka_unit_test(test_plain_quantizers_round_special_values_like_ref),
        cmocka_unit_test(test_every_variant_dequantizes_like_ref),
        cmocka_unit_test(test_every_variant_dot_product_matches_ref),
        cmocka_unit_test(test_every_gemm_matches_ref_dot_for_every_tile),
        cmocka_unit_test(test_gemm16_decode_gives_prompt_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
