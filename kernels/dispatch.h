/*
 * dispatch.h - kernel variants per instruction set, chosen once at start-up.
 *
 * Each ISA has a full copy of the type-traits table (formats.h) whose
 * kernel pointers are that ISA's: ref is kernels/ref/ alone; avx2 is ref
 * with the kernels/x86/ AVX2+FMA+F16C kernels on top; avx512 is avx2 with
 * the AVX-512 (F/BW/VL) kernels on top, plus the VNNI and BF16 ones when
 * the CPU has those extensions; neon is ref with the kernels/arm/ ASIMD
 * kernels on top, whose integer dots use sdot when the CPU has dotprod
 * (and return ref's bits: arm.h). A slot an ISA does not implement keeps
 * the kernel of the ISA below it, so every table is complete.
 *
 * rvl_kformat_get()/rvl_kformat_at() (formats.h) return the selected ISA's
 * entries: RUVLLM_ISA=ref|avx2|avx512|neon when set, names a variant this
 * binary has and this CPU runs; otherwise the best runnable one. (Asking for
 * a variant the CPU lacks is refused by the CLI through rvl_cpu_isa_check()
 * before any kernel runs; the library itself just ignores the request.)
 * The choice is made once, thread-safely, on first use.
 *
 * Numerical contract of the variants, checked by tests/test_kernels_simd.c
 * (and, for neon under qemu, tests/neon/test_kernels_neon.c):
 *   - quantize gives ref's bytes exactly: the Q8_0/Q8_1/Q8_K activation
 *     quantizers for finite input (rounding like ref: Q8_0/Q8_1 half away
 *     from zero, Q8_K half to even), F16/BF16 for every input;
 *   - dequantize gives ref's floats exactly, except that F16 signaling
 *     NaNs come out quiet (vcvtph2ps);
 *   - vec_dot sums the same exact integer block products as ref but
 *     accumulates the float terms in vector lanes (with FMA), so it differs
 *     from ref by float rounding only:
 *         |simd - ref| <= (chain + 16) * 2^-22 * S
 *     with chain = n/32 for block formats (ref adds one float per block)
 *     and n/8 for F32/F16/BF16 (ref sums in double), and S the sum over
 *     the elements of |w_i * a_i|, the scale and min parts of formats
 *     with a min (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) counted separately.
 *     Through the Q8 rounding of the next layer's activations these
 *     last-bit differences can grow into visibly different logits: greedy
 *     decoding may pick another token where two are nearly tied.
 * The integer kernels assume activation quants in -127..127, which is all
 * the Q8_0/Q8_1/Q8_K quantizers produce (int8 products then fit the 16-bit
 * lanes of vpmaddubsw without saturating); weight quants may be anything.
 */
#ifndef RVL_DISPATCH_H
#define RVL_DISPATCH_H

#include <stdbool.h>

#include "formats.h"

/* Kernel instruction sets, worst to best within an architecture. */
enum {
    RVL_ISA_REF = 0,
    RVL_ISA_AVX2 = 1,     /* AVX2 + FMA + F16C */
    RVL_ISA_AVX512 = 2,   /* AVX-512 F/BW/VL (+ VNNI, BF16 where present) */
    RVL_ISA_NEON = 3,     /* arm64 ASIMD (+ dotprod where present) */
    RVL_ISA_COUNT
};

/* "ref", "avx2", "avx512", "neon"; NULL for an id out of range. */
const char *rvl_dispatch_isa_name(int isa);
/* The id of an ISA name, or -1 for an unknown name. */
int rvl_dispatch_isa_parse(const char *name);
/* true when this binary has the variant and this CPU (and OS) can run it. */
bool rvl_dispatch_isa_runnable(int isa);
/* The ISA whose kernels rvl_kformat_get() returns (see above). */
int rvl_dispatch_isa(void);

/* The entry of `type` in a given ISA's table, for tests and bench.
 * borrowed: static. NULL for an unknown type or an ISA that is not
 * runnable here. */
const rvl_kformat *rvl_kformat_get_isa(uint32_t type, int isa);

/* The CPU's features, from the one probe (dispatch.c: CPUID and XGETBV on
 * x86, HWCAP on Linux arm64, sysctl on Apple's), each vector extension
 * only when the OS saves its registers; lib/base/cpu.c reports them as
 * rvl_cpu(). */
enum {
    RVL_CPUF_SSE3 = 1 << 0,
    RVL_CPUF_SSSE3 = 1 << 1,
    RVL_CPUF_AVX = 1 << 2,         /* and the OS saves ymm */
    RVL_CPUF_AVX2 = 1 << 3,        /* needs AVX */
    RVL_CPUF_FMA = 1 << 4,         /* needs AVX */
    RVL_CPUF_F16C = 1 << 5,        /* needs AVX */
    RVL_CPUF_AVX512F = 1 << 6,     /* and the OS saves zmm and the opmasks */
    RVL_CPUF_AVX512BW = 1 << 7,    /* this and the next three need AVX512F */
    RVL_CPUF_AVX512VL = 1 << 8,
    RVL_CPUF_AVX512VNNI = 1 << 9,
    RVL_CPUF_AVX512BF16 = 1 << 10,
    RVL_CPUF_NEON = 1 << 11,       /* ASIMD with FP */
    RVL_CPUF_DOTPROD = 1 << 12,    /* needs NEON */
};
/* RVL_CPUF_* bits of this machine. */
unsigned rvl_dispatch_features(void);

/* The groups of those features the kernel variants need. */
enum {
    RVL_KCPU_AVX2 = 1 << 0,      /* AVX, AVX2, FMA, F16C */
    RVL_KCPU_AVX512 = 1 << 1,    /* AVX2's and AVX-512 F, BW, VL */
    RVL_KCPU_VNNI = 1 << 2,      /* AVX512's and AVX512_VNNI */
    RVL_KCPU_BF16 = 1 << 3,      /* AVX512's and AVX512_BF16 */
    RVL_KCPU_NEON = 1 << 4,
    RVL_KCPU_DOTPROD = 1 << 5,
};
/* RVL_KCPU_* bits of this machine. */
unsigned rvl_dispatch_cpu(void);

#endif
