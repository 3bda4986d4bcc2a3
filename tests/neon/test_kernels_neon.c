/*
 * test_kernels_neon.c - the arm64 NEON kernels (kernels/arm/) against the
 * scalar reference, and the aarch64 half of the dispatch (HWCAP probe).
 *
 * Built from kernels/ alone (no lib/, no cmocka: kernels/ depends on libc
 * only), statically, by the Makefile's NEON section; on x86 hosts it runs
 * under qemu-aarch64, once on a CPU model with dotprod and once on one
 * without (tests/cli/t0040-neon-qemu.sh). Prints TAP.
 *
 * Kernel sets compared with ref: the neon table as dispatch.c built it
 * for this CPU, and, when the CPU has dotprod (so the table holds the
 * sdot kernels), the same table with neon.c's widening-multiply integer
 * dots put back, so one run on a dotprod CPU covers both.
 *
 *  - quantize and dequantize give ref's bytes exactly (F16 signaling NaNs
 *    excepted, as on x86): random rows of several distributions
 *    (f16-subnormal scales, huge values, zeros, one-hot rows, exact
 *    rounding ties, the largest magnitude with both signs), rows of random
 *    block bytes, f16/bf16 special values, every tail length for plain
 *    types, odd addresses, and no byte written outside the row;
 *  - vec_dot of every quantized format returns ref's bits exactly (arm.h),
 *    on rows quantized by ref, rows of random block bytes (every level,
 *    Q8_0's -128), activation rows of random bytes (-128 included) and
 *    sparse activations, from one block to 11008 values, at odd
 *    addresses; F32/F16/BF16 agree within dispatch.h's bound
 *    (n/8 + 16) * 2^-22 * sum |w_i a_i|;
 *  - gemm (the tiled kernels, for the same formats as the integer
 *    vec_dots: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, RVL_I4S_G32, Q2_K to
 *    Q6_K, IQ4_XS) gives every (row, token) ref's vec_dot bits, for 1..6
 *    rows and 1..20 tokens at odd addresses and strides (one token:
 *    decode), on quantized and random block bytes, and writes nothing
 *    outside the tile;
 *  - the probe agrees with getauxval(AT_HWCAP), the neon table overrides
 *    what the kernel issue lists, with the sdot dots exactly when HWCAP
 *    has ASIMDDP, and keeps ref's geometry.
 *
 *   test_kernels_neon                TAP
 *   test_kernels_neon --report-isa   "selected best" (for RUVLLM_ISA checks)
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "formats.h"

#if defined(__aarch64__)
#include "arm/arm.h"
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1ul << 20)
#endif
#endif

#if defined(__aarch64__) && defined(RVL_HAVE_NEON)

/* ======================================================================
 * A tiny TAP harness
 * ====================================================================== */

static int ntests, nfailed, cur_failures;
static long ncompared; /* kernel calls compared with ref */

/* Record a failure of the current test; the first few are printed as
 * TAP diagnostics. */
static void failf(const char *fmt, ...)
{
    if (cur_failures++ < 8) {
        va_list ap;
        va_start(ap, fmt);
        fputs("# ", stdout);
        vprintf(fmt, ap);
        fputc('\n', stdout);
        va_end(ap);
    }
}

#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond))                                                               \
            failf("%s:%d: %s", __FILE__, __LINE__, #cond);                         \
    } while (0)

static void run(const char *name, void (*fn)(void))
{
    cur_failures = 0;
    fn();
    ntests++;
    if (cur_failures) {
        nfailed++;
        printf("not ok %d - %s (%d failures)\n", ntests, name, cur_failures);
    } else {
        printf("ok %d - %s\n", ntests, name);
    }
    fflush(stdout);
}

/* the test data: rng, fill(), random_blocks(), lengths(); xmalloc bails
 * out of the TAP run when out of memory */
#include "kernel_testdata.h"

/* ======================================================================
 * The kernel sets under test
 * ====================================================================== */

typedef struct {
    uint32_t type;
    rvl_vec_dot_fn neon, dotprod;
} int_dot;

#define ID(T, fn) { RVL_K_##T, fn##_neon, fn##_dotprod }
static const int_dot int_dots[] = {
    ID(Q4_0, vec_dot_q4_0_q8_0), ID(Q4_1, vec_dot_q4_1_q8_1), ID(Q5_0, vec_dot_q5_0_q8_0),
    ID(Q5_1, vec_dot_q5_1_q8_1), ID(Q8_0, vec_dot_q8_0_q8_0), ID(IQ4_NL, vec_dot_iq4_nl_q8_0),
    ID(MXFP4, vec_dot_mxfp4_q8_0),
    ID(RVL_I4S_G32, vec_dot_q4_0_q8_0), ID(Q2_K, vec_dot_q2_K_q8_K), ID(Q3_K, vec_dot_q3_K_q8_K),
    ID(Q4_K, vec_dot_q4_K_q8_K), ID(Q5_K, vec_dot_q5_K_q8_K), ID(Q6_K, vec_dot_q6_K_q8_K),
    ID(IQ4_XS, vec_dot_iq4_xs_q8_K),
};
#undef ID
#define N_INT_DOTS (sizeof int_dots / sizeof int_dots[0])

typedef struct {
    uint32_t type;
    rvl_gemm_fn neon, dotprod;
} int_gemm;

#define IG(T, fn) { RVL_K_##T, fn##_neon, fn##_dotprod }
static const int_gemm int_gemms[] = {
    IG(Q4_0, gemm_q4_0_q8_0), IG(RVL_I4S_G32, gemm_q4_0_q8_0), IG(Q4_1, gemm_q4_1_q8_1),
    IG(Q8_0, gemm_q8_0_q8_0), IG(Q4_K, gemm_q4_K_q8_K), IG(Q6_K, gemm_q6_K_q8_K),
    IG(Q5_0, gemm_q5_0_q8_0), IG(Q5_1, gemm_q5_1_q8_1), IG(Q5_K, gemm_q5_K_q8_K),
    IG(IQ4_NL, gemm_iq4_nl_q8_0), IG(IQ4_XS, gemm_iq4_xs_q8_K), IG(Q2_K, gemm_q2_K_q8_K),
    IG(Q3_K, gemm_q3_K_q8_K),
};
#undef IG
#define N_INT_GEMMS (sizeof int_gemms / sizeof int_gemms[0])

static bool has_dotprod(void)
{
    return rvl_dispatch_cpu() & RVL_KCPU_DOTPROD;
}

/* neon's table with neon.c's integer dots (no sdot) */
static rvl_kformat nodp_table[RVL_KFORMAT_SLOTS];

static const rvl_kformat *get_neon(uint32_t type)
{
    return rvl_kformat_get_isa(type, RVL_ISA_NEON);
}

static const rvl_kformat *get_nodp(uint32_t type)
{
    const int s = rvl_kformat_slot(type);
    return s >= 0 && nodp_table[s].name ? &nodp_table[s] : NULL;
}

typedef struct {
    const char *name;
    const rvl_kformat *(*get)(uint32_t type);
} kset;

static kset ksets[2];
static int nksets;

static void setup_ksets(void)
{
    ksets[nksets++] = (kset){ has_dotprod() ? "neon+dotprod" : "neon", get_neon };
    if (!has_dotprod())
        return;
    const rvl_kformat *f;
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++)
        nodp_table[rvl_kformat_slot(f->type)] = *get_neon(f->type);
    for (size_t i = 0; i < N_INT_DOTS; i++)
        nodp_table[rvl_kformat_slot(int_dots[i].type)].vec_dot = int_dots[i].neon;
    for (size_t i = 0; i < N_INT_GEMMS; i++)
        nodp_table[rvl_kformat_slot(int_gemms[i].type)].gemm = int_gemms[i].neon;
    ksets[nksets++] = (kset){ "neon (no dotprod)", get_nodp };
}

static const rvl_kformat *ref_of(uint32_t type)
{
    return rvl_kformat_get_isa(type, RVL_ISA_REF);
}

/* ======================================================================
 * Dispatch
 * ====================================================================== */

static void test_probe_agrees_with_hwcap(void)
{
    const unsigned long hw = getauxval(AT_HWCAP);
    CHECK(rvl_dispatch_cpu() & RVL_KCPU_NEON);
    CHECK(!!(rvl_dispatch_cpu() & RVL_KCPU_DOTPROD) == !!(hw & HWCAP_ASIMDDP));
    CHECK(!(rvl_dispatch_cpu() & (RVL_KCPU_AVX2 | RVL_KCPU_AVX512 | RVL_KCPU_VNNI | RVL_KCPU_BF16)));
    CHECK(rvl_dispatch_isa_runnable(RVL_ISA_REF));
    CHECK(rvl_dispatch_isa_runnable(RVL_ISA_NEON));
    CHECK(!rvl_dispatch_isa_runnable(RVL_ISA_AVX2));
    CHECK(!rvl_dispatch_isa_runnable(RVL_ISA_AVX512));
    CHECK(rvl_kformat_get_isa(RVL_K_Q4_0, RVL_ISA_AVX2) == NULL);
    printf("# cpu: neon%s\n", has_dotprod() ? " dotprod" : "");
}

/* RUVLLM_ISA=ref|neon selects that table; unset or unusable: neon */
static void test_selects_neon_unless_told_otherwise(void)
{
    const char *env = getenv("RUVLLM_ISA");
    const int want_env = env ? rvl_dispatch_isa_parse(env) : -1;
    const int want = want_env >= 0 && rvl_dispatch_isa_runnable(want_env) ? want_env : RVL_ISA_NEON;
    CHECK(rvl_dispatch_isa() == want);
    const rvl_kformat *f;
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
        CHECK(rvl_kformat_get(f->type) == f);
        CHECK(rvl_kformat_get_isa(f->type, want) == f);
    }
}

/* The kernel issue's list, and sdot exactly when HWCAP has it. */
static void test_neon_overrides_the_listed_kernels(void)
{
    static const uint32_t dots[] = {
        RVL_K_Q4_0, RVL_K_Q4_1, RVL_K_Q5_0, RVL_K_Q5_1, RVL_K_Q8_0, RVL_K_Q2_K, RVL_K_Q3_K,
        RVL_K_Q4_K, RVL_K_Q5_K, RVL_K_Q6_K, RVL_K_IQ4_NL, RVL_K_IQ4_XS, RVL_K_MXFP4, RVL_K_F16,
        RVL_K_F32, RVL_K_BF16, RVL_K_RVL_I4S_G32,
    };
    static const uint32_t quants[] = { RVL_K_Q8_0, RVL_K_Q8_1, RVL_K_Q8_K, RVL_K_F16, RVL_K_BF16 };
    static const uint32_t dequants[] = { RVL_K_F16, RVL_K_BF16, RVL_K_Q8_0, RVL_K_Q4_0,
                                         RVL_K_Q4_1, RVL_K_Q4_K, RVL_K_Q6_K };
    for (size_t i = 0; i < sizeof dots / sizeof dots[0]; i++)
        if (get_neon(dots[i])->vec_dot == ref_of(dots[i])->vec_dot)
            failf("%s: vec_dot is ref's", ref_of(dots[i])->name);
    for (size_t i = 0; i < sizeof quants / sizeof quants[0]; i++)
        if (get_neon(quants[i])->quantize == ref_of(quants[i])->quantize)
            failf("%s: quantize is ref's", ref_of(quants[i])->name);
    for (size_t i = 0; i < sizeof dequants / sizeof dequants[0]; i++)
        if (get_neon(dequants[i])->dequantize == ref_of(dequants[i])->dequantize)
            failf("%s: dequantize is ref's", ref_of(dequants[i])->name);
    for (size_t i = 0; i < N_INT_DOTS; i++) {
        const rvl_vec_dot_fn want = has_dotprod() ? int_dots[i].dotprod : int_dots[i].neon;
        if (get_neon(int_dots[i].type)->vec_dot != want)
            failf("%s: vec_dot is not the %s kernel", ref_of(int_dots[i].type)->name,
                  has_dotprod() ? "sdot" : "neon");
    }
}

/* Weight formats keep ref's quantizers and every entry ref's geometry. */
static void test_neon_table_keeps_ref_geometry(void)
{
    const rvl_kformat *f;
    size_t count = 0;
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++, count++) {
        const rvl_kformat *fr = rvl_kformat_ref(f->type);
        for (int s = 0; s < nksets; s++) {
            const rvl_kformat *fx = ksets[s].get(f->type);
            CHECK(fx != NULL);
            if (!fx)
                continue;
            CHECK(!strcmp(fx->name, fr->name));
            CHECK(fx->block_size == fr->block_size && fx->type_size == fr->type_size);
            CHECK(fx->row_header == fr->row_header && fx->vec_dot_type == fr->vec_dot_type);
            CHECK((fx->quantize != NULL) == (fr->quantize != NULL));
            CHECK((fx->dequantize != NULL) == (fr->dequantize != NULL));
            CHECK((fx->vec_dot != NULL) == (fr->vec_dot != NULL));
            /* the vectorized quantizers: activations, F16, BF16 */
            if (!(fr->flags & RVL_KF_ACT) && fr->type != RVL_K_Q8_0 && fr->type != RVL_K_F16 &&
                fr->type != RVL_K_BF16 && fx->quantize != fr->quantize)
                failf("%s: the quantizer is not ref's", fr->name);
        }
    }
    CHECK(count > 40);
    CHECK(rvl_kformat_get_isa(4, RVL_ISA_NEON) == NULL); /* removed ggml id */
}

/* ======================================================================
 * Quantize and dequantize: ref's bytes exactly
 * ====================================================================== */

static void check_quantize(const rvl_kformat *fx, const rvl_kformat *fr, const char *set,
                           const float *x, int64_t n, int off, const char *what)
{
    const size_t rb = rowb(fr, n);
    uint8_t *ref = xmalloc(rb), *buf = xmalloc(rb + off + 16);
    ncompared++;
    fr->quantize(x, ref, n, NULL);
    memset(buf, 0xA5, rb + off + 16);
    fx->quantize(x, buf + off, n, NULL);
    if (memcmp(buf + off, ref, rb)) {
        size_t k = 0;
        while (buf[off + k] == ref[k])
            k++;
        failf("%s quantize %s, n=%lld, %s data: byte %zu is %02x, ref %02x", fr->name, set,
              (long long)n, what, k, buf[off + k], ref[k]);
    }
    for (size_t k = 0; k < (size_t)off; k++)
        if (buf[k] != 0xA5)
            failf("%s quantize %s, n=%lld: wrote before the row", fr->name, set, (long long)n);
    for (size_t k = 0; k < 16; k++)
        if (buf[off + rb + k] != 0xA5)
            failf("%s quantize %s, n=%lld: wrote past the row", fr->name, set, (long long)n);
    free(ref);
    free(buf);
}

static void test_quantizers_give_ref_bytes(void)
{
    int checked = 0;
    const rvl_kformat *f;
    for (int s = 0; s < nksets; s++) {
        for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
            const rvl_kformat *fr = ref_of(f->type), *fx = ksets[s].get(f->type);
            if (!fr->quantize || fx->quantize == fr->quantize)
                continue;
            checked++;
            int64_t ns[32];
            const int nn = lengths(fr, fr->block_size, ns);
            for (int k = 0; k < nn; k++) {
                const int64_t n = ns[k];
                /* floats at a 4-byte but not 16-byte aligned address */
                float *buf = xmalloc((size_t)(n + 1) * sizeof(float)), *x = buf + 1;
                for (int d = 0; d < D_COUNT; d++) {
                    fill(x, n, (dist)d);
                    check_quantize(fx, fr, ksets[s].name, x, n, k % 3, dist_name[d]);
                }
                free(buf);
            }
        }
    }
    CHECK(checked >= 5);
}

/* Values every f16/bf16 conversion must get right: signed zeros,
 * infinities, NaNs (quiet, signaling, payloads), the largest f16, the
 * overflow threshold, subnormals and the underflow threshold, bf16 ties. */
static void test_plain_quantizers_round_special_values_like_ref(void)
{
    static const uint32_t bits[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
        0x7fbfffff, 0x477fe000, 0x477fefff, 0x477ff000, 0x47800000, 0x33800000, 0x33000000,
        0x33000001, 0x38800000, 0x387fe000, 0x387ff000, 0x3f808000, 0x3f818000, 0x3f817fff,
        0x00000001, 0x80400000, 0x7f7fffff, 0x3effffff, 0xc0490fdb, 0x3f800001, 0xff8fffff,
    };
    enum { N = sizeof bits / sizeof bits[0] };
    float x[N];
    for (int i = 0; i < N; i++)
        memcpy(&x[i], &bits[i], 4);
    const uint32_t types[] = { RVL_K_F16, RVL_K_BF16, RVL_K_F32 };
    for (int s = 0; s < nksets; s++)
        for (size_t t = 0; t < 3; t++) {
            const rvl_kformat *fr = ref_of(types[t]), *fx = ksets[s].get(types[t]);
            /* all at once (vector body) and one at a time (scalar tail) */
            check_quantize(fx, fr, ksets[s].name, x, N, 1, "special");
            for (int i = 0; i < N; i++)
                check_quantize(fx, fr, ksets[s].name, x + i, 1, 0, "special");
        }
}

static void check_dequantize(const rvl_kformat *fx, const rvl_kformat *fr, const char *set,
                             const uint8_t *w, int64_t n, const char *what)
{
    float *ref = xmalloc((size_t)n * sizeof(float));
    float *y = xmalloc((size_t)(n + 4) * sizeof(float));
    ncompared++;
    fr->dequantize(w, ref, n);
    for (int k = 0; k < 4; k++)
        y[n + k] = -7.25f;
    fx->dequantize(w, y, n);
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&y[i], &ref[i], sizeof(float))) {
            failf("%s dequantize %s, n=%lld, %s: y[%lld] = %a, ref %a", fr->name, set,
                  (long long)n, what, (long long)i, y[i], ref[i]);
            break;
        }
    for (int k = 0; k < 4; k++)
        if (y[n + k] != -7.25f)
            failf("%s dequantize %s, n=%lld: wrote past the row", fr->name, set, (long long)n);
    free(ref);
    free(y);
}

static void test_dequantizers_give_ref_floats(void)
{
    int checked = 0;
    const rvl_kformat *f;
    for (int s = 0; s < nksets; s++) {
        for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
            const rvl_kformat *fr = ref_of(f->type), *fx = ksets[s].get(f->type);
            if (!fr->dequantize || fx->dequantize == fr->dequantize)
                continue;
            checked++;
            int64_t ns[32];
            const int nn = lengths(fr, fr->block_size, ns);
            for (int k = 0; k < nn; k++) {
                const int64_t n = ns[k];
                const size_t rb = rowb(fr, n);
                uint8_t *buf = xmalloc(rb + 1), *w = buf + (k & 1);
                float *x = xmalloc((size_t)n * sizeof(float));
                fill(x, n, D_HEAVY);
                fr->quantize(x, w, n, NULL);
                check_dequantize(fx, fr, ksets[s].name, w, n, "quantized row");
                if (fr->block_size > 1) {
                    random_blocks(fr, w, n);
                    check_dequantize(fx, fr, ksets[s].name, w, n, "random blocks");
                } else {
                    /* every bit pattern but F16 NaNs (fcvt quiets signaling
                     * ones; ref and numpy keep them: dispatch.h) */
                    for (size_t b = 0; b < rb; b++)
                        w[b] = (uint8_t)rng_u64();
                    if (fr->type == RVL_K_F16)
                        for (size_t b = 1; b < rb; b += 2)
                            if ((w[b] & 0x7c) == 0x7c)
                                w[b] &= 0xfb;
                    check_dequantize(fx, fr, ksets[s].name, w, n, "random bits");
                }
                free(buf);
                free(x);
            }
        }
    }
    CHECK(checked >= 7);
}

/* ======================================================================
 * Dot products
 * ====================================================================== */

static double worst_ratio; /* largest |diff| / bound of the plain dots */

/* Quantized formats: ref's bits. Plain types: within dispatch.h's bound. */
static void check_dot(const rvl_kformat *fx, const rvl_kformat *fr, const char *set,
                      const uint8_t *w, const uint8_t *act, int64_t n, const char *what)
{
    const rvl_kformat *ar = ref_of(fr->vec_dot_type);
    const float ref = fr->vec_dot(n, w, act);
    const float got = fx->vec_dot(n, w, act);
    ncompared++;
    if (fr->block_size > 1) {
        if (memcmp(&got, &ref, sizeof got))
            failf("%s . %s vec_dot %s, n=%lld, %s: %a, ref %a (not bit-exact)", fr->name,
                  ar->name, set, (long long)n, what, got, ref);
        return;
    }
    float *wd = xmalloc((size_t)n * sizeof(float)), *ad = xmalloc((size_t)n * sizeof(float));
    fr->dequantize(w, wd, n);
    ar->dequantize(act, ad, n);
    double mag = 0;
    for (int64_t i = 0; i < n; i++)
        mag += fabs((double)wd[i] * ad[i]);
    free(wd);
    free(ad);
    const double bound = ((double)n / 8 + 16) * ldexp(1.0, -22) * mag + 1e-37;
    const double diff = fabs((double)got - ref);
    if (diff / bound > worst_ratio)
        worst_ratio = diff / bound;
    if (!(diff <= bound))
        failf("%s . %s vec_dot %s, n=%lld, %s: %.9g, ref %.9g (|diff| %.3g > %.3g)", fr->name,
              ar->name, set, (long long)n, what, got, ref, diff, bound);
}

static void check_dot_all(uint32_t type, const uint8_t *w, const uint8_t *act, int64_t n,
                          const char *what)
{
    const rvl_kformat *fr = ref_of(type);
    for (int s = 0; s < nksets; s++)
        check_dot(ksets[s].get(type), fr, ksets[s].name, w, act, n, what);
}

static void test_dot_products_match_ref(void)
{
    int checked = 0;
    const rvl_kformat *f;
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
        const rvl_kformat *fr = ref_of(f->type);
        if (!fr->vec_dot || get_neon(f->type)->vec_dot == fr->vec_dot)
            continue;
        checked++;
        const rvl_kformat *ar = ref_of(fr->vec_dot_type);
        int64_t ns[32];
        const int nn = lengths(fr, lcm64(fr->block_size, ar->block_size), ns);
        for (int k = 0; k < nn; k++) {
            const int64_t n = ns[k];
            /* exact-size buffers; odd addresses on every other length */
            const int wo = k & 1, ao = 3 * (k & 1);
            const size_t wb = rowb(fr, n), ab = rowb(ar, n);
            uint8_t *wbuf = xmalloc(wb + wo), *abuf = xmalloc(ab + ao);
            uint8_t *w = wbuf + wo, *act = abuf + ao;
            float *x = xmalloc((size_t)n * sizeof(float)), *a = xmalloc((size_t)n * sizeof(float));
            fill(x, n, D_WEIGHTS);
            fill(a, n, D_HEAVY);
            fr->quantize(x, w, n, NULL);
            ar->quantize(a, act, n, NULL);
            check_dot_all(f->type, w, act, n, "quantized rows");
            if (fr->block_size > 1) {
                random_blocks(fr, w, n);
                check_dot_all(f->type, w, act, n, "random blocks");
                random_blocks(ar, act, n);
                check_dot_all(f->type, w, act, n, "random activation bytes");
            }
            fill(a, n, D_SPARSE);
            ar->quantize(a, act, n, NULL);
            check_dot_all(f->type, w, act, n, "sparse activations");
            free(wbuf);
            free(abuf);
            free(x);
            free(a);
        }
    }
    CHECK(checked >= 16);
    printf("# plain dots: largest |neon - ref| / bound %.3g\n", worst_ratio);
}

/* ======================================================================
 * Tiled GEMM: every (row, token) is ref's vec_dot, bit for bit (arm.h),
 * for every tile shape, at odd addresses and strides, and nothing is
 * written outside the tile
 * ====================================================================== */

#define GEMM_ROWS 6   /* more than RVL_GEMM_ROWS: the kernel loops groups */
#define GEMM_TOKENS 20

static void check_gemm(const rvl_kformat *fx, const rvl_kformat *fr, const char *set, int64_t n,
                       int odd, bool random)
{
    const rvl_kformat *ar = ref_of(fr->vec_dot_type);
    const size_t rb = rowb(fr, n), ab = rowb(ar, n);
    const size_t ws = rb + (size_t)odd, as = ab + 3 * (size_t)odd;
    const size_t wo = (size_t)odd, ao = 5 * (size_t)odd;
    uint8_t *wbuf = xmalloc(wo + (GEMM_ROWS - 1) * ws + rb);
    uint8_t *abuf = xmalloc(ao + (GEMM_TOKENS - 1) * as + ab);
    uint8_t *w = wbuf + wo, *act = abuf + ao;
    float *x = xmalloc((size_t)n * sizeof(float));
    for (int r = 0; r < GEMM_ROWS; r++) {
        fill(x, n, D_WEIGHTS);
        fr->quantize(x, w + r * ws, n, NULL);
        if (random)
            random_blocks(fr, w + r * ws, n);
    }
    for (int t = 0; t < GEMM_TOKENS; t++) {
        fill(x, n, t % 5 == 4 ? D_SPARSE : D_HEAVY);
        ar->quantize(x, act + t * as, n, NULL);
        if (random && t % 3 == 1)
            random_blocks(ar, act + t * as, n);
    }
    float ref[GEMM_TOKENS][GEMM_ROWS];
    for (int t = 0; t < GEMM_TOKENS; t++)
        for (int r = 0; r < GEMM_ROWS; r++)
            ref[t][r] = fr->vec_dot(n, w + r * ws, act + t * as);
    static const int nts[] = { 1, 2, 3, 7, 8, 9, 16, 17, GEMM_TOKENS };
    enum { YS = GEMM_ROWS + 3 };
    float y[GEMM_TOKENS + 1][YS];
    for (int nr = 1; nr <= GEMM_ROWS; nr++)
        for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) {
            const int nt = nts[k];
            const int r0 = (nr + nt) % (GEMM_ROWS - nr + 1), t0 = (nr * nt) % (GEMM_TOKENS - nt + 1);
            memset(y, 0x7f, sizeof y);
            fx->gemm(n, w + r0 * ws, ws, nr, act + t0 * as, as, nt, &y[0][1], YS);
            ncompared++;
            for (int t = 0; t <= GEMM_TOKENS; t++)
                for (int r = 0; r < YS; r++) {
                    const bool in = t < nt && r >= 1 && r <= nr;
                    uint32_t got;
                    memcpy(&got, &y[t][r], 4);
                    if (in && memcmp(&y[t][r], &ref[t0 + t][r0 + r - 1], 4))
                        failf("%s gemm %s, n=%lld, nr=%d nt=%d: row %d token %d %a, ref %a "
                              "(not bit-exact)", fr->name, set, (long long)n, nr, nt,
                              r0 + r - 1, t0 + t, y[t][r], ref[t0 + t][r0 + r - 1]);
                    if (!in && got != 0x7f7f7f7fu)
                        failf("%s gemm %s, nr=%d nt=%d wrote y[%d][%d] outside the tile",
                              fr->name, set, nr, nt, t, r - 1);
                }
        }
    free(wbuf);
    free(abuf);
    free(x);
}

static void test_gemm_gives_ref_dot_bits_for_every_tile(void)
{
    static const int64_t lens[] = { 32, 96, 576 };
    static const int64_t klens[] = { 256, 768, 2304 };
    for (size_t i = 0; i < N_INT_GEMMS; i++) {
        const rvl_kformat *fr = ref_of(int_gemms[i].type);
        const int64_t *ls = fr->block_size == 256 ? klens : lens;
        for (int s = 0; s < nksets; s++) {
            const rvl_kformat *fx = ksets[s].get(fr->type);
            CHECK(fx->gemm != NULL);
            if (!fx->gemm)
                continue;
            for (size_t k = 0; k < 3; k++) {
                check_gemm(fx, fr, ksets[s].name, ls[k], (int)(k & 1), false);
                check_gemm(fx, fr, ksets[s].name, ls[k], (int)(~k & 1), true);
            }
        }
    }
    /* the neon table has them, as sdot builds iff the CPU has dotprod */
    for (size_t i = 0; i < N_INT_GEMMS; i++)
        CHECK(get_neon(int_gemms[i].type)->gemm ==
              (has_dotprod() ? int_gemms[i].dotprod : int_gemms[i].neon));
    CHECK(ref_of(RVL_K_Q4_0)->gemm == NULL);
}

static int report_isa(void)
{
    int best = RVL_ISA_REF;
    for (int k = 0; k < RVL_ISA_COUNT; k++)
        if (rvl_dispatch_isa_runnable(k))
            best = k;
    printf("%s %s\n", rvl_dispatch_isa_name(rvl_dispatch_isa()), rvl_dispatch_isa_name(best));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--report-isa"))
        return report_isa();
    setup_ksets();
    for (int s = 0; s < nksets; s++)
        printf("# kernel set: %s\n", ksets[s].name);
    run("probe agrees with HWCAP", test_probe_agrees_with_hwcap);
    run("selects neon unless RUVLLM_ISA says otherwise", test_selects_neon_unless_told_otherwise);
    run("neon overrides the listed kernels (sdot iff ASIMDDP)", test_neon_overrides_the_listed_kernels);
    run("neon table keeps ref geometry", test_neon_table_keeps_ref_geometry);
    run("quantizers give ref bytes", test_quantizers_give_ref_bytes);
    run("f16/bf16 quantizers round special values like ref",
        test_plain_quantizers_round_special_values_like_ref);
    run("dequantizers give ref floats", test_dequantizers_give_ref_floats);
    run("dot products match ref (quantized: bit-exact)", test_dot_products_match_ref);
    run("gemm gives ref's dot bits for every tile", test_gemm_gives_ref_dot_bits_for_every_tile);
    printf("# %ld kernel calls compared with ref\n", ncompared);
    if (nfailed)
        printf("# %d of %d failed\n", nfailed, ntests);
    printf("1..%d\n", ntests);
    return nfailed ? 1 : 0;
}

#else /* not an arm64 NEON build */

int main(void)
{
    printf("1..0 # SKIP not an aarch64 NEON build\n");
    return 0;
}

#endif
