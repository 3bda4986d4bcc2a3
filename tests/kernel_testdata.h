/*
 * kernel_testdata.h - test data for the kernel tests: a seeded random
 * generator, rows of several distributions, rows of random block bytes
 * with small finite scales, and the row lengths to try.
 *
 * Shared by tests/test_kernels_simd.c (cmocka) and
 * tests/neon/test_kernels_neon.c (TAP, built from kernels/ alone), so it
 * depends on kernels/formats.h and libc only. Everything is static: each
 * test program has its own copy and its own generator state, and the
 * sequence of random numbers is fixed by the order of the calls.
 *
 * xmalloc checks its result with KT_CHECK_ALLOC(p), which the includer may
 * define first (cmocka: assert_non_null); by default a failed allocation
 * prints a TAP "Bail out!" and exits.
 */
#ifndef RVL_TESTS_KERNEL_TESTDATA_H
#define RVL_TESTS_KERNEL_TESTDATA_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"

#ifndef KT_CHECK_ALLOC
#define KT_CHECK_ALLOC(p)                                                          \
    do {                                                                           \
        if (!(p)) {                                                                \
            printf("Bail out! out of memory\n");                                   \
            exit(1);                                                               \
        }                                                                          \
    } while (0)
#endif

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    KT_CHECK_ALLOC(p);
    return p;
}

/* ======================================================================
 * Random numbers (splitmix64, fixed seed)
 * ====================================================================== */

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unif(void) /* (0, 1) */
{
    return ((double)(rng_u64() >> 11) + 0.5) / 9007199254740992.0;
}

static float rng_normal(void)
{
    return (float)(sqrt(-2 * log(rng_unif())) * cos(6.283185307179586 * rng_unif()));
}

/* ======================================================================
 * Row geometry
 * ====================================================================== */

static int64_t lcm64(int64_t a, int64_t b)
{
    int64_t x = a, y = b;
    while (y) {
        const int64_t t = x % y;
        x = y;
        y = t;
    }
    return a / x * b;
}

static size_t rowb(const rvl_kformat *f, int64_t n)
{
    return (size_t)rvl_kformat_row_bytes(f, (uint64_t)n);
}

/* Lengths to try: every tail for plain types, block counts otherwise
 * (step: a multiple of the block sizes involved). */
static int lengths(const rvl_kformat *f, int64_t step, int64_t out[32])
{
    int k = 0;
    if (f->block_size == 1) {
        static const int64_t plain[] = { 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47,
                                         63, 64, 65, 100, 127, 129, 257, 4096, 4097, 11008 };
        for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
            out[k++] = plain[i];
        return k;
    }
    static const int64_t blocks[] = { 1, 2, 3, 5, 7, 9, 16, 33 };
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
        out[k++] = blocks[i] * step;
    if (4096 % step == 0)
        out[k++] = 4096;
    if (11008 % step == 0)
        out[k++] = 11008;
    return k;
}

/* ======================================================================
 * Rows of floats
 * ====================================================================== */

typedef enum {
    D_NORMAL, D_WEIGHTS, D_HEAVY, D_TINY, D_HUGE, D_SPARSE, D_ONEHOT, D_ZERO,
    D_CONST, D_TIES, D_MAXTIE, D_COUNT
} dist;
static const char *const dist_name[D_COUNT] = {
    "normal", "weights", "heavy", "tiny", "huge", "sparse", "one-hot", "zero", "constant", "ties",
    "+-max",
};

/* Rounding ties for the activation quantizers: with a block maximum of
 * 127 the Q8_0/Q8_1 scale is exactly 1 and with a first maximum of -127
 * the Q8_K inverse scale is exactly 1, so k + 0.5 lands on a tie.
 * "+-max": the largest magnitude appears with both signs in every block;
 * Q8_K takes the sign of the first. */
static void fill(float *x, int64_t n, dist d)
{
    for (int64_t i = 0; i < n; i++) {
        switch (d) {
        case D_NORMAL: x[i] = rng_normal(); break;
        case D_WEIGHTS: x[i] = 0.02f * rng_normal(); break;
        case D_HEAVY: x[i] = rng_normal() * expf(rng_normal()); break;
        case D_TINY: x[i] = 1e-7f * rng_normal(); break;
        case D_HUGE: x[i] = 2e3f * rng_normal(); break;
        case D_SPARSE: x[i] = i % 97 == 3 ? rng_normal() : 0.0f; break;
        case D_ONEHOT: x[i] = i == n / 2 ? -5.0f : 0.0f; break;
        case D_ZERO: x[i] = 0.0f; break;
        case D_CONST: x[i] = 0.75f; break;
        case D_MAXTIE:
            x[i] = i % 32 == 3 ? 4.0f
                 : i % 32 == 6 || i % 32 == 20 ? -4.0f
                                               : fmaxf(-3.0f, fminf(3.0f, rng_normal()));
            break;
        default:
            x[i] = i % 32 == 0 ? -127.0f
                               : (float)((int)(rng_u64() % 253) - 126) + (rng_u64() & 1 ? 0.5f : 0.0f);
            break;
        }
    }
}

/* ======================================================================
 * Rows of random block bytes
 * ====================================================================== */

static void put_f16(uint8_t *p, float v)
{
    const rvl_f16 h = rvl_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* Where the f16 scale (d) and min (dmin / m / s) of a block live, for the
 * formats whose kernels the variants implement: random block bytes get
 * small finite values there (a NaN scale would only test NaN payloads),
 * and the x86 dot tolerance counts the scale and min parts of each term
 * separately. */
typedef struct {
    uint32_t type;
    int d_off, min_off; /* byte offsets in the block; -1: none */
} scale_fields;

static const scale_fields fields[] = {
    { RVL_K_Q4_0, offsetof(block_q4_0, d), -1 },
    { RVL_K_Q4_1, offsetof(block_q4_1, d), offsetof(block_q4_1, m) },
    { RVL_K_Q5_0, offsetof(block_q5_0, d), -1 },
    { RVL_K_Q5_1, offsetof(block_q5_1, d), offsetof(block_q5_1, m) },
    { RVL_K_Q8_0, offsetof(block_q8_0, d), -1 },
    { RVL_K_Q2_K, offsetof(block_q2_K, d), offsetof(block_q2_K, dmin) },
    { RVL_K_Q3_K, offsetof(block_q3_K, d), -1 },
    { RVL_K_Q4_K, offsetof(block_q4_K, d), offsetof(block_q4_K, dmin) },
    { RVL_K_Q5_K, offsetof(block_q5_K, d), offsetof(block_q5_K, dmin) },
    { RVL_K_Q6_K, offsetof(block_q6_K, d), -1 },
    { RVL_K_IQ4_NL, offsetof(block_iq4_nl, d), -1 },
    { RVL_K_IQ4_XS, offsetof(block_iq4_xs, d), -1 },
    { RVL_K_RVL_I4S_G32, offsetof(block_rvl_i4s_g32, d), -1 },
    { RVL_K_Q8_1, offsetof(block_q8_1, d), offsetof(block_q8_1, s) },
    { RVL_K_MXFP4, offsetof(block_mxfp4, e), -1 },   /* an E8M0 byte, not f16 */
};

/* The scale fields of a block format; NULL for the plain types and Q8_K. */
static const scale_fields *fields_of(uint32_t type)
{
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (fields[i].type == type)
            return &fields[i];
    return NULL;
}

/* A row of n values of block format f (a format of fields[] or Q8_K) of
 * random block bytes with small finite scales. Q8_K (f32 d) keeps its
 * bsums consistent with its quants, as the kernels assume. */
static void random_blocks(const rvl_kformat *f, uint8_t *w, int64_t n)
{
    const size_t nb = (size_t)(n / f->block_size);
    for (size_t k = 0; k < rowb(f, n); k++)
        w[k] = (uint8_t)rng_u64();
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = w + b * f->type_size;
        if (f->type == RVL_K_Q8_K) {
            block_q8_K q;
            memcpy(&q, blk, sizeof q);
            q.d = 0.01f * rng_normal();
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int l = 0; l < 16; l++)
                    s += q.qs[16 * g + l];
                q.bsums[g] = (int16_t)s;
            }
            memcpy(blk, &q, sizeof q);
            continue;
        }
        const scale_fields *sf = fields_of(f->type);
        if (f->type == RVL_K_MXFP4) {
            blk[sf->d_off] = (uint8_t)(118 + rng_u64() % 16); /* 2^-9 .. 2^6 */
            continue;
        }
        put_f16(blk + sf->d_off, 0.01f * rng_normal());
        if (sf->min_off >= 0)
            put_f16(blk + sf->min_off, 0.01f * rng_normal());
    }
}

#endif
