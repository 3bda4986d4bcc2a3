/*
 * dispatch.c - one type-traits table per kernel ISA, the CPU probe, and
 * the choice of the ISA that rvl_kformat_get() serves (dispatch.h).
 *
 * This is the one place that maps ISAs to kernels: the override lists
 * below. A table is built by copying the table of the ISA it extends
 * (ref for avx2 and neon, avx2 for avx512) and applying the list's
 * entries whose CPU needs are met; everything happens once, under
 * pthread_once, before any entry is handed out, and the tables are
 * read-only afterwards.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "arm/arm.h"
#include "dispatch.h"
#include "x86/x86.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
/* older kernel headers */
#ifndef HWCAP_FP
#define HWCAP_FP (1ul << 0)
#endif
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1ul << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1ul << 20)
#endif
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

/* ======================================================================
 * The override lists
 * ====================================================================== */

typedef struct {
    uint32_t type;
    unsigned need;               /* RVL_KCPU_* beyond the ISA's own */
    rvl_quantize_fn quantize;    /* NULL: keep the inherited kernel */
    rvl_dequantize_fn dequantize;
    rvl_vec_dot_fn vec_dot;
} kover;

/* The integer dot products every SIMD variant implements (x86.h, arm.h). */
#define DOTS(isa, need)                                                            \
    { RVL_K_Q4_0, need, NULL, NULL, vec_dot_q4_0_q8_0_##isa },                      \
    { RVL_K_Q4_1, need, NULL, NULL, vec_dot_q4_1_q8_1_##isa },                      \
    { RVL_K_Q5_0, need, NULL, NULL, vec_dot_q5_0_q8_0_##isa },                      \
    { RVL_K_Q5_1, need, NULL, NULL, vec_dot_q5_1_q8_1_##isa },                      \
    { RVL_K_Q8_0, need, NULL, NULL, vec_dot_q8_0_q8_0_##isa },                      \
    { RVL_K_IQ4_NL, need, NULL, NULL, vec_dot_iq4_nl_q8_0_##isa },                  \
    { RVL_K_MXFP4, need, NULL, NULL, vec_dot_mxfp4_q8_0_##isa },                    \
    /* RVL_I4S_G32 is Q4_0's layout, and pairs with Q8_0 the same way */           \
    { RVL_K_RVL_I4S_G32, need, NULL, NULL, vec_dot_q4_0_q8_0_##isa },               \
    { RVL_K_Q2_K, need, NULL, NULL, vec_dot_q2_K_q8_K_##isa },                      \
    { RVL_K_Q3_K, need, NULL, NULL, vec_dot_q3_K_q8_K_##isa },                      \
    { RVL_K_Q4_K, need, NULL, NULL, vec_dot_q4_K_q8_K_##isa },                      \
    { RVL_K_Q5_K, need, NULL, NULL, vec_dot_q5_K_q8_K_##isa },                      \
    { RVL_K_Q6_K, need, NULL, NULL, vec_dot_q6_K_q8_K_##isa },                      \
    { RVL_K_IQ4_XS, need, NULL, NULL, vec_dot_iq4_xs_q8_K_##isa }

/* Tiled GEMM kernels (formats.h gemm slot), per ISA, applied after the
 * ISA's overrides (a table inherits its base's gemm slots). */
typedef struct {
    uint32_t type;
    unsigned need;
    rvl_gemm_fn gemm;
} kgemm;

#ifdef RVL_HAVE_X86
static const kover avx2_kernels[] = {
    DOTS(avx2, 0),
    { RVL_K_F32, 0, NULL, NULL, vec_dot_f32_f32_avx2 },
    { RVL_K_F16, 0, quantize_f16_avx2, dequantize_f16_avx2, vec_dot_f16_f16_avx2 },
    { RVL_K_BF16, 0, quantize_bf16_avx2, dequantize_bf16_avx2, vec_dot_bf16_bf16_avx2 },
    { RVL_K_Q8_0, 0, quantize_q8_0_avx2, dequantize_q8_0_avx2, NULL },
    { RVL_K_Q8_1, 0, quantize_q8_1_avx2, NULL, NULL },
    { RVL_K_Q8_K, 0, quantize_q8_K_avx2, NULL, NULL },
    { RVL_K_Q4_0, 0, NULL, dequantize_q4_0_avx2, NULL },
    { RVL_K_Q4_1, 0, NULL, dequantize_q4_1_avx2, NULL },
    { RVL_K_Q4_K, 0, NULL, dequantize_q4_K_avx2, NULL },
    { RVL_K_Q6_K, 0, NULL, dequantize_q6_K_avx2, NULL },
};

/* On top of avx2. Without VNNI the integer dots stay avx2's (vpmaddubsw
 * on ymm is what a 512-bit version would do too, minus the shuffles). */
static const kover avx512_kernels[] = {
    DOTS(avx512vnni, RVL_KCPU_VNNI),
    { RVL_K_F32, 0, NULL, NULL, vec_dot_f32_f32_avx512 },
    { RVL_K_F16, 0, NULL, NULL, vec_dot_f16_f16_avx512 },
    { RVL_K_BF16, 0, NULL, NULL, vec_dot_bf16_bf16_avx512 },
    { RVL_K_BF16, RVL_KCPU_BF16, NULL, NULL, vec_dot_bf16_bf16_avx512bf16 },
};

/* avx2's tiles are inherited by avx512, whose own (VNNI) replace them
 * where the CPU has VNNI. */
static const kgemm avx2_gemms[] = {
    { RVL_K_Q4_0, 0, gemm_q4_0_q8_0_avx2 },
    { RVL_K_RVL_I4S_G32, 0, gemm_q4_0_q8_0_avx2 },
    { RVL_K_Q4_1, 0, gemm_q4_1_q8_1_avx2 },
    { RVL_K_Q8_0, 0, gemm_q8_0_q8_0_avx2 },
    { RVL_K_Q4_K, 0, gemm_q4_K_q8_K_avx2 },
    { RVL_K_Q6_K, 0, gemm_q6_K_q8_K_avx2 },
    { RVL_K_Q5_0, 0, gemm_q5_0_q8_0_avx2 },
    { RVL_K_Q5_1, 0, gemm_q5_1_q8_1_avx2 },
    { RVL_K_Q5_K, 0, gemm_q5_K_q8_K_avx2 },
    { RVL_K_IQ4_NL, 0, gemm_iq4_nl_q8_0_avx2 },
    { RVL_K_Q2_K, 0, gemm_q2_K_q8_K_avx2 },
    { RVL_K_Q3_K, 0, gemm_q3_K_q8_K_avx2 },
    { RVL_K_IQ4_XS, 0, gemm_iq4_xs_q8_K_avx2 },
    /* plain float formats (gemm_float_avx2.c) */
    { RVL_K_F32, 0, gemm_f32_f32_avx2 },
    { RVL_K_F16, 0, gemm_f16_f16_avx2 },
    { RVL_K_BF16, 0, gemm_bf16_bf16_avx2 },
};

/* The 16-row layout (formats.h gemm16): one kernel for prompts and
 * decode, per ISA. */
typedef struct {
    uint32_t type;
    unsigned need;
    rvl_gemm16_fn gemm16;
    rvl_pack_fn pack16;
    rvl_unpack_fn unpack16;
} kpack16;

static const kpack16 avx512_packs16[] = {
    { RVL_K_Q4_0, RVL_KCPU_VNNI, gemm16_q4_0_q8_0_avx512vnni, pack16_q4_0, unpack16_q4_0 },
    { RVL_K_RVL_I4S_G32, RVL_KCPU_VNNI, gemm16_q4_0_q8_0_avx512vnni, pack16_q4_0, unpack16_q4_0 },
    { RVL_K_IQ4_NL, RVL_KCPU_VNNI, gemm16_iq4_nl_q8_0_avx512vnni, pack16_q4_0, unpack16_q4_0 },
    { RVL_K_Q5_0, RVL_KCPU_VNNI, gemm16_q5_0_q8_0_avx512vnni, pack16_q5_0, unpack16_q5_0 },
    { RVL_K_Q8_0, RVL_KCPU_VNNI, gemm16_q8_0_q8_0_avx512vnni, pack16_q8_0, unpack16_q8_0 },
    { RVL_K_MXFP4, RVL_KCPU_VNNI, gemm16_mxfp4_q8_0_avx512vnni, pack16_mxfp4, unpack16_mxfp4 },
    { RVL_K_Q4_1, RVL_KCPU_VNNI, gemm16_q4_1_q8_1_avx512vnni, pack16_q4_1, unpack16_q4_1 },
    { RVL_K_Q5_1, RVL_KCPU_VNNI, gemm16_q5_1_q8_1_avx512vnni, pack16_q5_1, unpack16_q5_1 },
    { RVL_K_Q4_K, RVL_KCPU_VNNI, gemm16_q4_K_q8_K_avx512vnni, pack16_q4_K, unpack16_q4_K },
    { RVL_K_Q5_K, RVL_KCPU_VNNI, gemm16_q5_K_q8_K_avx512vnni, pack16_q5_K, unpack16_q5_K },
    { RVL_K_Q6_K, RVL_KCPU_VNNI, gemm16_q6_K_q8_K_avx512vnni, pack16_q6_K, unpack16_q6_K },
    { RVL_K_IQ4_XS, RVL_KCPU_VNNI, gemm16_iq4_xs_q8_K_avx512vnni, pack16_iq4_xs, unpack16_iq4_xs },
};

static const kgemm avx512_gemms[] = {
    { RVL_K_Q4_0, RVL_KCPU_VNNI, gemm_q4_0_q8_0_avx512vnni },
    { RVL_K_RVL_I4S_G32, RVL_KCPU_VNNI, gemm_q4_0_q8_0_avx512vnni },
    { RVL_K_Q4_1, RVL_KCPU_VNNI, gemm_q4_1_q8_1_avx512vnni },
    { RVL_K_Q8_0, RVL_KCPU_VNNI, gemm_q8_0_q8_0_avx512vnni },
    { RVL_K_Q4_K, RVL_KCPU_VNNI, gemm_q4_K_q8_K_avx512vnni },
    { RVL_K_Q6_K, RVL_KCPU_VNNI, gemm_q6_K_q8_K_avx512vnni },
    { RVL_K_Q5_0, RVL_KCPU_VNNI, gemm_q5_0_q8_0_avx512vnni },
    { RVL_K_Q5_1, RVL_KCPU_VNNI, gemm_q5_1_q8_1_avx512vnni },
    { RVL_K_Q5_K, RVL_KCPU_VNNI, gemm_q5_K_q8_K_avx512vnni },
    { RVL_K_IQ4_NL, RVL_KCPU_VNNI, gemm_iq4_nl_q8_0_avx512vnni },
    { RVL_K_IQ4_XS, RVL_KCPU_VNNI, gemm_iq4_xs_q8_K_avx512vnni },
    { RVL_K_Q2_K, RVL_KCPU_VNNI, gemm_q2_K_q8_K_avx512vnni },
    { RVL_K_Q3_K, RVL_KCPU_VNNI, gemm_q3_K_q8_K_avx512vnni },
    /* plain float formats (gemm_float_avx512.c) */
    { RVL_K_F32, 0, gemm_f32_f32_avx512 },
    { RVL_K_F16, 0, gemm_f16_f16_avx512 },
    { RVL_K_BF16, 0, gemm_bf16_bf16_avx512 },
};
#endif

#ifdef RVL_HAVE_NEON
/* On top of ref; with dotprod (sdot), the integer dots are those of
 * dotprod.c instead of neon.c's widening multiplies. */
static const kover neon_kernels[] = {
    DOTS(neon, 0),
    DOTS(dotprod, RVL_KCPU_DOTPROD),
    { RVL_K_F32, 0, NULL, NULL, vec_dot_f32_f32_neon },
    { RVL_K_F16, 0, quantize_f16_neon, dequantize_f16_neon, vec_dot_f16_f16_neon },
    { RVL_K_BF16, 0, quantize_bf16_neon, dequantize_bf16_neon, vec_dot_bf16_bf16_neon },
    { RVL_K_Q8_0, 0, quantize_q8_0_neon, dequantize_q8_0_neon, NULL },
    { RVL_K_Q8_1, 0, quantize_q8_1_neon, NULL, NULL },
    { RVL_K_Q8_K, 0, quantize_q8_K_neon, NULL, NULL },
    { RVL_K_Q4_0, 0, NULL, dequantize_q4_0_neon, NULL },
    { RVL_K_Q4_1, 0, NULL, dequantize_q4_1_neon, NULL },
    { RVL_K_Q4_K, 0, NULL, dequantize_q4_K_neon, NULL },
    { RVL_K_Q6_K, 0, NULL, dequantize_q6_K_neon, NULL },
};

/* with dotprod, the sdot builds of the same tiles */
#define ARM_GEMMS(isa, need)                                                       \
    { RVL_K_Q4_0, need, gemm_q4_0_q8_0_##isa },                                    \
    { RVL_K_RVL_I4S_G32, need, gemm_q4_0_q8_0_##isa },                             \
    { RVL_K_Q4_1, need, gemm_q4_1_q8_1_##isa },                                    \
    { RVL_K_Q8_0, need, gemm_q8_0_q8_0_##isa },                                    \
    { RVL_K_Q4_K, need, gemm_q4_K_q8_K_##isa },                                    \
    { RVL_K_Q6_K, need, gemm_q6_K_q8_K_##isa },                                    \
    { RVL_K_Q5_0, need, gemm_q5_0_q8_0_##isa },                                    \
    { RVL_K_Q5_1, need, gemm_q5_1_q8_1_##isa },                                    \
    { RVL_K_Q5_K, need, gemm_q5_K_q8_K_##isa },                                    \
    { RVL_K_IQ4_NL, need, gemm_iq4_nl_q8_0_##isa },                                \
    { RVL_K_IQ4_XS, need, gemm_iq4_xs_q8_K_##isa },                                \
    { RVL_K_Q2_K, need, gemm_q2_K_q8_K_##isa },                                    \
    { RVL_K_Q3_K, need, gemm_q3_K_q8_K_##isa }
static const kgemm neon_gemms[] = {
    ARM_GEMMS(neon, 0),
    ARM_GEMMS(dotprod, RVL_KCPU_DOTPROD),
};
#undef ARM_GEMMS
#endif
#undef DOTS

/* What each ISA needs, extends, and overrides. */
static const struct {
    const char *name;
    unsigned need;               /* RVL_KCPU_* the ISA cannot run without */
    int base;                    /* ISA whose table it starts from; -1: formats.c */
    const kover *list;
    size_t n;
} isa_info[RVL_ISA_COUNT] = {
    [RVL_ISA_REF] = { "ref", 0, -1, NULL, 0 },
#ifdef RVL_HAVE_X86
    [RVL_ISA_AVX2] = { "avx2", RVL_KCPU_AVX2, RVL_ISA_REF, avx2_kernels,
                       sizeof avx2_kernels / sizeof avx2_kernels[0] },
    [RVL_ISA_AVX512] = { "avx512", RVL_KCPU_AVX2 | RVL_KCPU_AVX512, RVL_ISA_AVX2,
                         avx512_kernels, sizeof avx512_kernels / sizeof avx512_kernels[0] },
#else
    [RVL_ISA_AVX2] = { "avx2", 0, -1, NULL, 0 },
    [RVL_ISA_AVX512] = { "avx512", 0, -1, NULL, 0 },
#endif
#ifdef RVL_HAVE_NEON
    [RVL_ISA_NEON] = { "neon", RVL_KCPU_NEON, RVL_ISA_REF, neon_kernels,
                       sizeof neon_kernels / sizeof neon_kernels[0] },
#else
    [RVL_ISA_NEON] = { "neon", 0, -1, NULL, 0 },
#endif
};

/* A variant exists in this binary when it has kernels of its own. */
static bool isa_compiled(int isa)
{
    return isa == RVL_ISA_REF || isa_info[isa].list != NULL;
}

/* ======================================================================
 * CPU probe
 * ====================================================================== */

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

/* RVL_CPUF_* of this machine: what CPUID (or HWCAP, sysctl) says the
 * core has, each vector extension only when the OS saves its registers
 * (XCR0: ymm for AVX and what builds on it, zmm and the opmasks for
 * AVX-512). */
static unsigned probe(void)
{
    unsigned f = 0;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    const bool osxsave = c & (1u << 27);
    const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    const bool ymm_os = (xcr0 & 0x6) == 0x6;          /* SSE + AVX state */
    const bool zmm_os = (xcr0 & 0xe6) == 0xe6;        /* + opmask, ZMM_Hi256, Hi16_ZMM */
    const bool avx = (c & (1u << 28)) && ymm_os;
    if (c & (1u << 0))
        f |= RVL_CPUF_SSE3;
    if (c & (1u << 9))
        f |= RVL_CPUF_SSSE3;
    if (avx) {
        f |= RVL_CPUF_AVX;
        if (c & (1u << 12))
            f |= RVL_CPUF_FMA;
        if (c & (1u << 29))
            f |= RVL_CPUF_F16C;
    }
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return f;
    if (avx && (b & (1u << 5)))
        f |= RVL_CPUF_AVX2;
    if (zmm_os && (b & (1u << 16))) {
        f |= RVL_CPUF_AVX512F;
        if (b & (1u << 30))
            f |= RVL_CPUF_AVX512BW;
        if (b & (1u << 31))
            f |= RVL_CPUF_AVX512VL;
        if (c & (1u << 11))
            f |= RVL_CPUF_AVX512VNNI;
        if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)))
            f |= RVL_CPUF_AVX512BF16;
    }
#elif defined(__aarch64__) && defined(__linux__)
    /* ASIMD needs the FP unit too (f16 conversions); sdot is optional
     * until ARMv8.4 */
    const unsigned long hw = getauxval(AT_HWCAP);
    if ((hw & HWCAP_FP) && (hw & HWCAP_ASIMD)) {
        f |= RVL_CPUF_NEON;
        if (hw & HWCAP_ASIMDDP)
            f |= RVL_CPUF_DOTPROD;
    }
#elif defined(__aarch64__) && defined(__APPLE__)
    f |= RVL_CPUF_NEON;                               /* every Apple core */
    int dp = 0;
    size_t len = sizeof dp;
    if (!sysctlbyname("hw.optional.arm.FEAT_DotProd", &dp, &len, NULL, 0) && dp)
        f |= RVL_CPUF_DOTPROD;
#elif defined(__aarch64__)
    f |= RVL_CPUF_NEON;                               /* no way to ask: ARMv8.0 */
#endif
    return f;
}

static bool has(unsigned features, unsigned want)
{
    return (features & want) == want;
}

/* The RVL_KCPU_* groups the kernel variants need, from RVL_CPUF_*. */
static unsigned caps_of(unsigned f)
{
    unsigned caps = 0;
    if (has(f, RVL_CPUF_AVX | RVL_CPUF_AVX2 | RVL_CPUF_FMA | RVL_CPUF_F16C)) {
        caps |= RVL_KCPU_AVX2;
        if (has(f, RVL_CPUF_AVX512F | RVL_CPUF_AVX512BW | RVL_CPUF_AVX512VL)) {
            caps |= RVL_KCPU_AVX512;
            if (f & RVL_CPUF_AVX512VNNI)
                caps |= RVL_KCPU_VNNI;
            if (f & RVL_CPUF_AVX512BF16)
                caps |= RVL_KCPU_BF16;
        }
    }
    if (f & RVL_CPUF_NEON) {
        caps |= RVL_KCPU_NEON;
        if (f & RVL_CPUF_DOTPROD)
            caps |= RVL_KCPU_DOTPROD;
    }
    return caps;
}

/* ======================================================================
 * The tables, built once
 * ====================================================================== */

static rvl_kformat tables[RVL_ISA_COUNT][RVL_KFORMAT_SLOTS];
static unsigned cpu_features, cpu_caps;
static int selected;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static bool runnable(int isa)
{
    return isa_compiled(isa) && (isa_info[isa].need & ~cpu_caps) == 0;
}

static void build(int isa)
{
    rvl_kformat *t = tables[isa];
    const int base = isa_info[isa].base;
    if (base < 0) {
        /* the reference table, type range by type range */
        static const uint32_t ranges[][2] = {
            { 0, RVL_K_GGML_COUNT },
            { RVL_K_U8, RVL_K_BOOL + 1 },
            { RVL_K_RVL_FIRST, RVL_K_RVL_END },
        };
        for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++)
            for (uint32_t ty = ranges[r][0]; ty < ranges[r][1]; ty++) {
                const rvl_kformat *f = rvl_kformat_ref(ty);
                if (f)
                    t[rvl_kformat_slot(ty)] = *f;
            }
    } else {
        memcpy(t, tables[base], sizeof tables[base]);
    }
    for (size_t i = 0; i < isa_info[isa].n; i++) {
        const kover *o = &isa_info[isa].list[i];
        if (o->need & ~cpu_caps)
            continue;
        rvl_kformat *f = &t[rvl_kformat_slot(o->type)];
        if (o->quantize)
            f->quantize = o->quantize;
        if (o->dequantize)
            f->dequantize = o->dequantize;
        if (o->vec_dot)
            f->vec_dot = o->vec_dot;
    }
#ifdef RVL_HAVE_X86
    if (isa == RVL_ISA_AVX2) /* avx512 inherits it */
        t[rvl_kformat_slot(RVL_K_Q8_0)].quantize_act = quantize_q8_0_act_avx2;
    if (isa == RVL_ISA_AVX2)
        for (size_t i = 0; i < sizeof avx2_gemms / sizeof avx2_gemms[0]; i++)
            if (!(avx2_gemms[i].need & ~cpu_caps))
                t[rvl_kformat_slot(avx2_gemms[i].type)].gemm = avx2_gemms[i].gemm;
    if (isa == RVL_ISA_AVX512)
        for (size_t i = 0; i < sizeof avx512_gemms / sizeof avx512_gemms[0]; i++)
            if (!(avx512_gemms[i].need & ~cpu_caps))
                t[rvl_kformat_slot(avx512_gemms[i].type)].gemm = avx512_gemms[i].gemm;
    if (isa == RVL_ISA_AVX512)
        for (size_t i = 0; i < sizeof avx512_packs16 / sizeof avx512_packs16[0]; i++)
            if (!(avx512_packs16[i].need & ~cpu_caps)) {
                rvl_kformat *f = &t[rvl_kformat_slot(avx512_packs16[i].type)];
                f->gemm16 = avx512_packs16[i].gemm16;
                f->pack16 = avx512_packs16[i].pack16;
                f->unpack16 = avx512_packs16[i].unpack16;
            }
#endif
#ifdef RVL_HAVE_NEON
    if (isa == RVL_ISA_NEON)
        for (size_t i = 0; i < sizeof neon_gemms / sizeof neon_gemms[0]; i++)
            if (!(neon_gemms[i].need & ~cpu_caps))
                t[rvl_kformat_slot(neon_gemms[i].type)].gemm = neon_gemms[i].gemm;
#endif
}

static void init(void)
{
    cpu_features = probe();
    cpu_caps = caps_of(cpu_features);
    /* bases come first in id order (ref < avx2 < avx512) */
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++)
        if (isa == RVL_ISA_REF || runnable(isa))
            build(isa);
    selected = RVL_ISA_REF;
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++)
        if (runnable(isa))
            selected = isa;
    const char *env = getenv("RUVLLM_ISA");
    if (env && *env) {
        const int want = rvl_dispatch_isa_parse(env);
        if (want >= 0 && runnable(want))
            selected = want;
    }
}

static inline void ready(void)
{
    pthread_once(&once, init);
}

/* ======================================================================
 * API
 * ====================================================================== */

const char *rvl_dispatch_isa_name(int isa)
{
    return isa >= 0 && isa < RVL_ISA_COUNT ? isa_info[isa].name : NULL;
}

int rvl_dispatch_isa_parse(const char *name)
{
    for (int isa = 0; name && isa < RVL_ISA_COUNT; isa++)
        if (!strcmp(name, isa_info[isa].name))
            return isa;
    return -1;
}

bool rvl_dispatch_isa_runnable(int isa)
{
    ready();
    return isa >= 0 && isa < RVL_ISA_COUNT && runnable(isa);
}

int rvl_dispatch_isa(void)
{
    ready();
    return selected;
}

unsigned rvl_dispatch_cpu(void)
{
    ready();
    return cpu_caps;
}

unsigned rvl_dispatch_features(void)
{
    ready();
    return cpu_features;
}

const rvl_kformat *rvl_kformat_get_isa(uint32_t type, int isa)
{
    if (!rvl_dispatch_isa_runnable(isa))
        return NULL;
    const int s = rvl_kformat_slot(type);
    return s >= 0 && tables[isa][s].name ? &tables[isa][s] : NULL;
}

const rvl_kformat *rvl_kformat_get(uint32_t type)
{
    ready();
    const int s = rvl_kformat_slot(type);
    return s >= 0 && tables[selected][s].name ? &tables[selected][s] : NULL;
}

const rvl_kformat *rvl_kformat_at(size_t i)
{
    ready();
    for (int s = 0; s < RVL_KFORMAT_SLOTS; s++)
        if (tables[selected][s].name && i-- == 0)
            return &tables[selected][s];
    return NULL;
}
