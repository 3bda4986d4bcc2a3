/*
 * test_formats.c - weight and activation formats: the type-traits table,
 * f16/bf16 conversion, reference quantize/dequantize/dot kernels.
 *
 *  - bit for bit against gguf-py (goldens in tests/data/quant/, made by
 *    tests/ref/gen_quant_goldens.py): quantize Q4_0 Q4_1 Q5_0 Q5_1 Q8_0
 *    F16 BF16, dequantize every type gguf-py knows, f32->f16 rounding;
 *  - bit for bit against llama.cpp's C quantizers (tests/ref/
 *    gen_quant_llama_goldens.py, via the xllamacpp wheel): K-quants, IQ4, Q8_1,
 *    Q8_K, and the imatrix searches;
 *  - quantize -> dequantize error bounds for every quantizable format,
 *    one block and multi-block rows, with and without importance weights;
 *  - the error-minimizing quantizers (K-quants, IQ4) beat a plain
 *    round-to-nearest encoder of the same format;
 *  - every dot product against a double-precision loop over the
 *    dequantized rows;
 *  - odd (unaligned) pointers, and no writes past the row.
 *
 * Run from the repository root (tests/run.sh does). Set
 * RVL_FORMATS_REPORT=1 to print the measured errors.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "ruvllm.h"
#include "ruvllm_tools.h"

#define DATA "tests/data/quant/"

static bool report;

/* ======================================================================
 * Helpers
 * ====================================================================== */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

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

typedef enum { DIST_NORMAL, DIST_WEIGHTS, DIST_HEAVY, DIST_POSITIVE, DIST_COUNT } dist;
static const char *const dist_name[DIST_COUNT] = { "normal", "weights", "heavy", "positive" };

static void fill(float *x, int64_t n, dist d)
{
    for (int64_t i = 0; i < n; i++) {
        switch (d) {
        case DIST_NORMAL: x[i] = rng_normal(); break;
        case DIST_WEIGHTS: x[i] = 0.02f * rng_normal(); break;
        case DIST_HEAVY: x[i] = rng_normal() * expf(rng_normal()); break;
        default: x[i] = (float)rng_unif(); break;
        }
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static void *slurp(const char *name, size_t *len)
{
    char path[256];
    snprintf(path, sizeof path, DATA "%s", name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s (run from the repository root)", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    assert_true(sz >= 0);
    void *p = xmalloc((size_t)sz);
    assert_int_equal(fread(p, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *len = (size_t)sz;
    return p;
}

static const rvl_kformat *fmt(uint32_t type)
{
    const rvl_kformat *f = rvl_kformat_get(type);
    assert_non_null(f);
    return f;
}

static size_t rowb(const rvl_kformat *f, int64_t n)
{
    return (size_t)rvl_kformat_row_bytes(f, (uint64_t)n);
}

/* relative RMS error sqrt(sum (x-y)^2 / sum x^2) */
static double rel_rmse(const float *x, const float *y, int64_t n)
{
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        s += (double)x[i] * x[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

/* Quantize then dequantize a row through the table's kernels. */
static void roundtrip(const rvl_kformat *f, const float *x, float *y, int64_t n, const float *qw)
{
    uint8_t *q = xmalloc(rowb(f, n));
    f->quantize(x, q, n, qw);
    f->dequantize(q, y, n);
    free(q);
}

static int64_t lcm64(int64_t a, int64_t b)
{
    int64_t x = a, y = b;
    while (y) {
        int64_t t = x % y;
        x = y;
        y = t;
    }
    return a / x * b;
}

/* ======================================================================
 * The table
 * ====================================================================== */

static void test_block_structs_have_llama_cpp_sizes(void **state)
{
    (void)state;
    assert_int_equal(sizeof(block_q4_0), 18);
    assert_int_equal(sizeof(block_q4_1), 20);
    assert_int_equal(sizeof(block_q5_0), 22);
    assert_int_equal(sizeof(block_q5_1), 24);
    assert_int_equal(sizeof(block_q8_0), 34);
    assert_int_equal(sizeof(block_q8_1), 36);
    assert_int_equal(sizeof(block_q2_K), 84);
    assert_int_equal(sizeof(block_q3_K), 110);
    assert_int_equal(sizeof(block_q4_K), 144);
    assert_int_equal(sizeof(block_q5_K), 176);
    assert_int_equal(sizeof(block_q6_K), 210);
    assert_int_equal(sizeof(block_q8_K), 292);
    assert_int_equal(sizeof(block_iq4_nl), 18);
    assert_int_equal(sizeof(block_iq4_xs), 136);
    assert_int_equal(sizeof(block_iq2_xxs), 66);
    assert_int_equal(sizeof(block_iq2_xs), 74);
    assert_int_equal(sizeof(block_iq2_s), 82);
    assert_int_equal(sizeof(block_iq3_xxs), 98);
    assert_int_equal(sizeof(block_iq3_s), 110);
    assert_int_equal(sizeof(block_iq1_s), 50);
    assert_int_equal(sizeof(block_iq1_m), 56);
    assert_int_equal(sizeof(block_tq1_0), 54);
    assert_int_equal(sizeof(block_tq2_0), 66);
    assert_int_equal(sizeof(block_mxfp4), 17);
    assert_int_equal(sizeof(block_nvfp4), 36);
    assert_int_equal(sizeof(block_q1_0), 18);
    assert_int_equal(sizeof(block_rvl_i4s_g128), 66);
    assert_int_equal(sizeof(block_rvl_i4a_g128), 68);
    assert_int_equal(sizeof(block_rvl_i8_g128), 130);
    assert_int_equal(sizeof(block_mlx_a4_g64), 40);
    assert_int_equal(sizeof(block_mlx_a8_g64), 72);
}

static void test_table_agrees_with_public_type_api(void **state)
{
    (void)state;
    const rvl_kformat *f;
    size_t count = 0;
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++, count++) {
        const rvl_type_info *ti = rvl_type_get(f->type);
        assert_non_null(ti);
        assert_string_equal(ti->name, f->name);
        assert_int_equal(ti->block_size, f->block_size);
        assert_int_equal(ti->type_size, f->type_size);
        assert_int_equal(ti->quantized, (f->flags & RVL_KF_QUANTIZED) != 0);
        assert_ptr_equal(rvl_kformat_get(f->type), f);
        assert_int_equal(rvl_type_from_name(f->name), (int)f->type);
        uint64_t b = 0;
        assert_int_equal(rvl_type_row_bytes(f->type, 4 * (uint64_t)f->block_size, &b), 0);
        assert_int_equal(b, f->row_header + 4ull * f->type_size);
        /* a weight format's activation format exists and can be produced */
        if (f->vec_dot) {
            const rvl_kformat *a = fmt(f->vec_dot_type);
            assert_non_null(a->quantize);
            assert_non_null(a->dequantize);
            assert_non_null(f->quantize);
            assert_non_null(f->dequantize);
        }
        if (f->flags & RVL_KF_PROJECT)
            assert_true(f->type >= RVL_TYPE_RVL_FIRST && f->type < RVL_TYPE_RVL_END);
    }
    assert_int_equal(count, 36 + 11);
    /* removed ggml ids have no entry */
    assert_null(rvl_kformat_get(4));
    assert_null(rvl_type_get(31));
    assert_null(rvl_kformat_get(RVL_TYPE_RVL_END));
    assert_int_equal(rvl_type_from_name("q4_k"), RVL_TYPE_Q4_K);
    assert_int_equal(rvl_type_from_name("mlx_a4_g64"), RVL_TYPE_MLX_A4_G64);
    assert_int_equal(rvl_type_from_name("Q4_2"), -1);

    /* the project ids in ruvllm.h name the formats docs/formats.md describes */
    static const struct { uint32_t id; const char *name; uint32_t bs, ts; } proj[] = {
        { RVL_TYPE_RVL_I4S_G32, "RVL_I4S_G32", 32, 18 },
        { RVL_TYPE_RVL_I4S_G64, "RVL_I4S_G64", 64, 34 },
        { RVL_TYPE_RVL_I4S_G128, "RVL_I4S_G128", 128, 66 },
        { RVL_TYPE_RVL_I4A_G32, "RVL_I4A_G32", 32, 20 },
        { RVL_TYPE_RVL_I4A_G64, "RVL_I4A_G64", 64, 36 },
        { RVL_TYPE_RVL_I4A_G128, "RVL_I4A_G128", 128, 68 },
        { RVL_TYPE_RVL_I8_ROW, "RVL_I8_ROW", 32, 32 },
        { RVL_TYPE_RVL_I8_G64, "RVL_I8_G64", 64, 66 },
        { RVL_TYPE_RVL_I8_G128, "RVL_I8_G128", 128, 130 },
        { RVL_TYPE_MLX_A4_G64, "MLX_A4_G64", 64, 40 },
        { RVL_TYPE_MLX_A8_G64, "MLX_A8_G64", 64, 72 },
    };
    for (size_t i = 0; i < sizeof proj / sizeof proj[0]; i++) {
        const rvl_type_info *ti = rvl_type_get(proj[i].id);
        assert_non_null(ti);
        assert_string_equal(ti->name, proj[i].name);
        assert_int_equal(ti->block_size, proj[i].bs);
        assert_int_equal(ti->type_size, proj[i].ts);
        assert_true(fmt(proj[i].id)->flags & RVL_KF_PROJECT);
    }
}

static void test_llama_cpp_pairs_weights_with_activation_formats(void **state)
{
    (void)state;
    static const uint32_t pairs[][2] = {
        { RVL_TYPE_F32, RVL_TYPE_F32 },     { RVL_TYPE_F16, RVL_TYPE_F16 },
        { RVL_TYPE_BF16, RVL_TYPE_BF16 },   { RVL_TYPE_Q4_0, RVL_TYPE_Q8_0 },
        { RVL_TYPE_Q4_1, RVL_TYPE_Q8_1 },   { RVL_TYPE_Q5_0, RVL_TYPE_Q8_0 },
        { RVL_TYPE_Q5_1, RVL_TYPE_Q8_1 },   { RVL_TYPE_Q8_0, RVL_TYPE_Q8_0 },
        { RVL_TYPE_Q2_K, RVL_TYPE_Q8_K },   { RVL_TYPE_Q3_K, RVL_TYPE_Q8_K },
        { RVL_TYPE_Q4_K, RVL_TYPE_Q8_K },   { RVL_TYPE_Q5_K, RVL_TYPE_Q8_K },
        { RVL_TYPE_Q6_K, RVL_TYPE_Q8_K },   { RVL_TYPE_IQ4_NL, RVL_TYPE_Q8_0 },
        { RVL_TYPE_IQ4_XS, RVL_TYPE_Q8_K }, { RVL_TYPE_MXFP4, RVL_TYPE_Q8_0 },
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        assert_int_equal(fmt(pairs[i][0])->vec_dot_type, pairs[i][1]);
}

static void test_i8_row_counts_its_row_header(void **state)
{
    (void)state;
    uint64_t b = 0;
    assert_int_equal(rvl_type_row_bytes(RVL_TYPE_RVL_I8_ROW, 64, &b), 0);
    assert_int_equal(b, 4 + 64);
    assert_int_equal(rvl_type_row_bytes(RVL_TYPE_RVL_I8_ROW, 48, &b), RVL_EFORMAT);
    assert_int_equal(rvl_type_row_bytes(RVL_TYPE_F32, UINT64_MAX / 2, &b), RVL_ERANGE);
}

/* ======================================================================
 * f16 / bf16
 * ====================================================================== */

static void test_f16_rounding_matches_numpy(void **state)
{
    (void)state;
    size_t n32, n16;
    float *x = slurp("f16_cases.f32", &n32);
    uint16_t *h = slurp("f16_cases.f16", &n16);
    assert_int_equal(n32 / 4, n16 / 2);
    for (size_t i = 0; i < n16 / 2; i++)
        if (rvl_f32_to_f16(x[i]) != h[i])
            fail_msg("f16(%.9g = 0x%08x) = 0x%04x, numpy 0x%04x", x[i], rvl_f32_bits(x[i]),
                     rvl_f32_to_f16(x[i]), h[i]);
    free(x);
    free(h);
}

static void test_f16_roundtrips_every_half_exactly(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rvl_f16_to_f32((rvl_f16)h);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            assert_true(isnan(f));
            assert_true((rvl_f32_to_f16(f) & 0x7e00) == 0x7e00);   /* quiet NaN */
            continue;
        }
        if (rvl_f32_to_f16(f) != h)
            fail_msg("half 0x%04x -> %.9g -> 0x%04x", h, f, rvl_f32_to_f16(f));
        /* the value is exact: compare with ldexp arithmetic */
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
        assert_true((double)f == ((h & 0x8000) ? -v : v));
    }
}

static void test_bf16_rounds_to_nearest_even_and_quiets_nan(void **state)
{
    (void)state;
    assert_int_equal(rvl_f32_to_bf16(rvl_bits_f32(0x3f808000)), 0x3f80); /* tie, even */
    assert_int_equal(rvl_f32_to_bf16(rvl_bits_f32(0x3f818000)), 0x3f82); /* tie, up */
    assert_int_equal(rvl_f32_to_bf16(rvl_bits_f32(0x3f808001)), 0x3f81);
    assert_int_equal(rvl_f32_to_bf16(rvl_bits_f32(0x7f800001)), 0x7fc0);
    assert_int_equal(rvl_f32_to_bf16(rvl_bits_f32(0x7f7fffff)), 0x7f80); /* to inf */
    assert_true(rvl_bf16_to_f32(0x3f80) == 1.0f);
}

/* ======================================================================
 * gguf-py goldens
 * ====================================================================== */

static void test_quantize_matches_gguf_py_bit_for_bit(void **state)
{
    (void)state;
    static const uint32_t types[] = { RVL_TYPE_Q4_0, RVL_TYPE_Q4_1, RVL_TYPE_Q5_0,
                                       RVL_TYPE_Q5_1, RVL_TYPE_Q8_0, RVL_TYPE_F16,
                                       RVL_TYPE_BF16 };
    size_t nin;
    float *x = slurp("quant_input.f32", &nin);
    const int64_t n = (int64_t)(nin / 4);
    assert_true(n > 0 && n % 256 == 0);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const rvl_kformat *f = fmt(types[t]);
        char name[64];
        snprintf(name, sizeof name, "quant_%s.bin", f->name);
        size_t ngold;
        uint8_t *gold = slurp(name, &ngold);
        assert_int_equal(ngold, rowb(f, n));
        uint8_t *q = xmalloc(ngold);
        f->quantize(x, q, n, NULL);
        for (size_t i = 0; i < ngold; i++)
            if (q[i] != gold[i])
                fail_msg("%s: byte %zu (block %zu, value %zu) is 0x%02x, gguf-py 0x%02x",
                         f->name, i, i / f->type_size, i / f->type_size * f->block_size,
                         q[i], gold[i]);
        free(q);
        free(gold);
    }
    free(x);
}

static void test_dequantize_matches_gguf_py_bit_for_bit(void **state)
{
    (void)state;
    static const uint32_t types[] = {
        RVL_TYPE_F16, RVL_TYPE_BF16, RVL_TYPE_Q4_0, RVL_TYPE_Q4_1, RVL_TYPE_Q5_0,
        RVL_TYPE_Q5_1, RVL_TYPE_Q8_0, RVL_TYPE_Q2_K, RVL_TYPE_Q3_K, RVL_TYPE_Q4_K,
        RVL_TYPE_Q5_K, RVL_TYPE_Q6_K, RVL_TYPE_IQ2_XXS, RVL_TYPE_IQ2_XS, RVL_TYPE_IQ2_S,
        RVL_TYPE_IQ3_XXS, RVL_TYPE_IQ3_S, RVL_TYPE_IQ1_S, RVL_TYPE_IQ1_M, RVL_TYPE_IQ4_NL,
        RVL_TYPE_IQ4_XS, RVL_TYPE_TQ1_0, RVL_TYPE_TQ2_0, RVL_TYPE_MXFP4, RVL_TYPE_NVFP4,
    };
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const rvl_kformat *f = fmt(types[t]);
        char name[64];
        size_t nb, ny;
        snprintf(name, sizeof name, "dequant_%s.bin", f->name);
        uint8_t *blocks = slurp(name, &nb);
        snprintf(name, sizeof name, "dequant_%s.f32", f->name);
        uint32_t *gold = slurp(name, &ny);
        const int64_t n = (int64_t)(nb / f->type_size * f->block_size);
        assert_int_equal(ny, (size_t)n * 4);
        uint32_t *y = xmalloc(ny);
        f->dequantize(blocks, (float *)y, n);
        for (int64_t i = 0; i < n; i++)
            if (y[i] != gold[i])
                fail_msg("%s: value %lld (block %lld) is %.9g (0x%08x), gguf-py %.9g (0x%08x)",
                         f->name, (long long)i, (long long)(i / f->block_size),
                         rvl_bits_f32(y[i]), y[i], rvl_bits_f32(gold[i]), gold[i]);
        free(y);
        free(gold);
        free(blocks);
    }
}

/* llama.cpp's own quantizers (tests/ref/gen_quant_llama_goldens.py, through
 * xllamacpp): K-quants, IQ4 and the importance-weighted legacy searches,
 * rows of 256 with and without an imatrix; Q8_1 and Q8_K activations. */
static void test_quantize_matches_llama_cpp_bit_for_bit(void **state)
{
    (void)state;
    static const uint32_t types[] = {
        RVL_TYPE_Q4_0, RVL_TYPE_Q4_1, RVL_TYPE_Q5_0, RVL_TYPE_Q5_1, RVL_TYPE_Q2_K,
        RVL_TYPE_Q3_K, RVL_TYPE_Q4_K, RVL_TYPE_Q5_K, RVL_TYPE_Q6_K, RVL_TYPE_IQ4_NL,
        RVL_TYPE_IQ4_XS, RVL_TYPE_Q8_1, RVL_TYPE_Q8_K,
    };
    size_t nin, nw;
    float *x = slurp("quant_input.f32", &nin);
    float *imat = slurp("llama_imatrix.f32", &nw);
    const int64_t per_row = 256, nrow = (int64_t)(nin / 4) / per_row;
    assert_int_equal(nw, per_row * 4);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const rvl_kformat *f = fmt(types[t]);
        const bool act = (f->flags & RVL_KF_ACT) != 0;
        for (int weighted = 0; weighted < (act ? 1 : 2); weighted++) {
            char name[64];
            snprintf(name, sizeof name, "llama_%s%s.bin", f->name, weighted ? "_imat" : "");
            size_t ngold;
            uint8_t *gold = slurp(name, &ngold);
            const size_t rb = rowb(f, per_row);
            assert_int_equal(ngold, rb * (size_t)nrow);
            uint8_t *q = xmalloc(rb);
            for (int64_t r = 0; r < nrow; r++) {
                f->quantize(x + r * per_row, q, per_row, weighted ? imat : NULL);
                for (size_t i = 0; i < rb; i++)
                    if (q[i] != gold[r * rb + i])
                        fail_msg("%s%s: row %lld byte %zu (block %zu) is 0x%02x, llama.cpp "
                                 "0x%02x", f->name, weighted ? " with imatrix" : "",
                                 (long long)r, i, i / f->type_size, q[i], gold[r * rb + i]);
            }
            free(q);
            free(gold);
        }
    }
    free(x);
    free(imat);
}

/* MXFP4 against llama.cpp's C code (tests/ref/gen_mxfp4_goldens.py, through
 * llama-cpp-python's ggml): quantize_row_mxfp4_ref's bytes for every row,
 * hard blocks included (exponents where log2f rounds up, level midpoints,
 * amax below 2^-125 where ggml's exponent wraps, subnormals, huge values,
 * an infinity, NaNs); dequantize_row_mxfp4's floats; and ggml's CPU
 * vec_dot with Q8_0 activations, which ours must match within the float
 * rounding bound of dispatch.h (ggml's kernel is SIMD: different order). */
static void test_mxfp4_matches_llama_cpp(void **state)
{
    (void)state;
    const rvl_kformat *f = fmt(RVL_TYPE_MXFP4), *af = fmt(RVL_TYPE_Q8_0);
    size_t nin, nq, ny, na, nd;
    float *x = slurp("mxfp4_input.f32", &nin);
    uint8_t *gold = slurp("mxfp4_quant.bin", &nq);
    uint32_t *ygold = slurp("mxfp4_dequant.f32", &ny);
    uint8_t *act = slurp("mxfp4_dot_act.bin", &na);
    float *dots = slurp("mxfp4_dot.f32", &nd);
    const int64_t per_row = 256, nrow = (int64_t)(nin / 4) / per_row;
    const size_t rb = rowb(f, per_row), ab = rowb(af, per_row);
    assert_true(nrow > 75);
    assert_int_equal(nq, rb * (size_t)nrow);
    assert_int_equal(ny, nin);
    assert_int_equal(na, ab * (size_t)nrow);
    assert_int_equal(nd, (size_t)nrow * 4);
    uint8_t *q = xmalloc(nq);
    f->quantize(x, q, per_row * nrow, NULL);
    for (size_t i = 0; i < nq; i++)
        if (q[i] != gold[i])
            fail_msg("MXFP4: byte %zu (block %zu, row %zu) is 0x%02x, llama.cpp 0x%02x", i,
                     i / 17, i / rb, q[i], gold[i]);
    uint32_t *y = xmalloc(ny);
    f->dequantize(gold, (float *)y, per_row * nrow);
    for (size_t i = 0; i < ny / 4; i++)
        if (y[i] != ygold[i])
            fail_msg("MXFP4: value %zu is 0x%08x, llama.cpp 0x%08x", i, y[i], ygold[i]);
    float wd[256], ad[256];
    int compared = 0;
    for (int64_t r = 0; r < nrow; r++) {
        const float got = f->vec_dot(per_row, gold + r * rb, act + r * ab);
        if (!isfinite(dots[r]))
            continue;
        f->dequantize(gold + r * rb, wd, per_row);
        af->dequantize(act + r * ab, ad, per_row);
        double mag = 0;
        for (int j = 0; j < per_row; j++)
            mag += fabs((double)wd[j] * ad[j]);
        const double bound = (per_row / 32 + 16) * ldexp(1.0, -22) * mag + 1e-37;
        if (!(fabs((double)got - dots[r]) <= bound))
            fail_msg("MXFP4 . Q8_0 row %lld: %.9g, llama.cpp %.9g (bound %.3g)", (long long)r,
                     got, dots[r], bound);
        compared++;
    }
    assert_true(compared >= 75);
    free(q);
    free(y);
    free(x);
    free(gold);
    free(ygold);
    free(act);
    free(dots);
}

/* The levels and the E8M0 scale as the OCP MX spec defines them: E2M1
 * codes 0-7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6 and 8-15 their negatives; the
 * scale byte e is 2^(e-127), 0 and 1 giving subnormal half-scales. */
static void test_mxfp4_levels_and_scale_follow_the_mx_spec(void **state)
{
    (void)state;
    static const float e2m1[8] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6 };
    for (int k = 0; k < 16; k++)
        assert_true(rvl_kvalues_mxfp4[k] == (k < 8 ? 2 : -2) * e2m1[k & 7]);
    for (int e = 0; e < 256; e++)
        assert_true(rvl_e8m0_half((uint8_t)e) == ldexpf(1.0f, e - 128));
    /* one block: amax 3 is in [2, 4), so e = 1 - 2 + 127: the scale
     * 2^(e-127) = 0.5 puts amax at 6, the largest E2M1 value */
    float x[32] = { 3.0f, -0.5f, 1.4f, 0.2f, 0.1f }, y[32];
    block_mxfp4 b;
    quantize_mxfp4_ref(x, &b, 32, NULL);
    assert_int_equal(b.e, 126);
    dequantize_mxfp4_ref(&b, y, 32);
    assert_true(y[0] == 3.0f && y[1] == -0.5f && y[2] == 1.5f && y[3] == 0.25f && y[4] == 0.0f);
    assert_int_equal(b.qs[0], 7);               /* 3 = 0.5 * 6 (code 7); x[16] = 0 */
    assert_int_equal(b.qs[1], 10);              /* -0.5 = 0.5 * -1 (code 8 + 2) */
    assert_int_equal(b.qs[2], 5);               /* 1.4 -> 1.5 = 0.5 * 3 */
    assert_int_equal(b.qs[4], 0);               /* 0.1 -> 0, not 0.25: code 0, not -0 */
}

static void test_rvl_i4s_g32_reads_as_q4_0(void **state)
{
    (void)state;
    float x[256], a[256], b[256];
    fill(x, 256, DIST_NORMAL);
    uint8_t q[8 * 18];
    quantize_rvl_i4s_g32_ref(x, q, 256, NULL);
    dequantize_rvl_i4s_g32_ref(q, a, 256);
    dequantize_q4_0_ref(q, b, 256);
    assert_memory_equal(a, b, sizeof a);
}

static void test_mlx_blocks_keep_mlx_nibble_order(void **state)
{
    (void)state;
    block_mlx_a4_g64 b4;
    float scale = 0.5f, bias = -1.0f, y[64];
    memcpy(&b4.scale, &scale, 4);
    memcpy(&b4.bias, &bias, 4);
    /* MLX's uint32 word 0 = 0x76543210: elements 0..7 are 0,1,...,7 */
    const uint32_t w0 = 0x76543210u, w1 = 0xfedcba98u;
    memset(b4.qs, 0, sizeof b4.qs);
    memcpy(b4.qs, &w0, 4);
    memcpy(b4.qs + 4, &w1, 4);
    dequantize_mlx_a4_g64_ref(&b4, y, 64);
    for (int e = 0; e < 16; e++)
        assert_true(y[e] == 0.5f * e - 1.0f);
    for (int e = 16; e < 64; e++)
        assert_true(y[e] == -1.0f);

    block_mlx_a8_g64 b8;
    memcpy(&b8.scale, &scale, 4);
    memcpy(&b8.bias, &bias, 4);
    for (int e = 0; e < 64; e++)
        b8.qs[e] = (uint8_t)(4 * e);
    dequantize_mlx_a8_g64_ref(&b8, y, 64);
    for (int e = 0; e < 64; e++)
        assert_true(y[e] == 0.5f * (float)(4 * e) - 1.0f);
}

/* ======================================================================
 * Round-trip error bounds
 * ====================================================================== */

/* Upper bounds on the relative RMS error of quantize -> dequantize, per
 * distribution (normal, weights, heavy-tailed, positive): the measured
 * values on 8192-value rows plus 30% (RVL_FORMATS_REPORT=1 prints them).
 * The heavy-tailed rows (normal * exp(normal)) are hard on any format with
 * one scale for many values (RVL_I8_ROW). */
static const struct {
    uint32_t type;
    double bound[DIST_COUNT];
} bounds[] = {
    { RVL_TYPE_F32, { 0, 0, 0, 0 } },
    { RVL_TYPE_F16, { 0.00028, 0.00028, 0.00028, 0.00024 } },
    { RVL_TYPE_BF16, { 0.0022, 0.0022, 0.0022, 0.0020 } },
    { RVL_TYPE_Q4_0, { 0.12, 0.12, 0.17, 0.078 } },
    { RVL_TYPE_Q4_1, { 0.11, 0.100, 0.15, 0.040 } },
    { RVL_TYPE_Q5_0, { 0.057, 0.057, 0.093, 0.039 } },
    { RVL_TYPE_Q5_1, { 0.050, 0.050, 0.071, 0.020 } },
    { RVL_TYPE_Q8_0, { 0.0070, 0.0069, 0.013, 0.0050 } },
    { RVL_TYPE_Q8_1, { 0.0069, 0.0070, 0.013, 0.0049 } },
    { RVL_TYPE_Q2_K, { 0.39, 0.38, 0.51, 0.18 } },
    { RVL_TYPE_Q3_K, { 0.20, 0.20, 0.24, 0.15 } },
    { RVL_TYPE_Q4_K, { 0.094, 0.093, 0.14, 0.039 } },
    { RVL_TYPE_Q5_K, { 0.047, 0.047, 0.069, 0.019 } },
    { RVL_TYPE_Q6_K, { 0.024, 0.023, 0.038, 0.017 } },
    { RVL_TYPE_Q8_K, { 0.0091, 0.0092, 0.028, 0.0052 } },
    { RVL_TYPE_IQ4_NL, { 0.100, 0.11, 0.14, 0.079 } },
    { RVL_TYPE_IQ4_XS, { 0.11, 0.100, 0.15, 0.079 } },
    { RVL_TYPE_MXFP4, { 0.15, 0.15, 0.20, 0.19 } },
    { RVL_TYPE_Q1_0, { 0.78, 0.79, 1.2, 0.65 } },
    { RVL_TYPE_RVL_I4S_G32, { 0.13, 0.13, 0.20, 0.090 } },
    { RVL_TYPE_RVL_I4S_G64, { 0.15, 0.15, 0.25, 0.092 } },
    { RVL_TYPE_RVL_I4S_G128, { 0.16, 0.16, 0.30, 0.094 } },
    { RVL_TYPE_RVL_I4A_G32, { 0.11, 0.11, 0.15, 0.042 } },
    { RVL_TYPE_RVL_I4A_G64, { 0.12, 0.12, 0.19, 0.043 } },
    { RVL_TYPE_RVL_I4A_G128, { 0.13, 0.14, 0.27, 0.043 } },
    { RVL_TYPE_RVL_I8_ROW, { 0.013, 0.012, 0.085, 0.0051 } },
    { RVL_TYPE_RVL_I8_G64, { 0.0078, 0.0077, 0.017, 0.0050 } },
    { RVL_TYPE_RVL_I8_G128, { 0.0087, 0.0084, 0.023, 0.0051 } },
    { RVL_TYPE_MLX_A4_G64, { 0.12, 0.12, 0.20, 0.042 } },
    { RVL_TYPE_MLX_A8_G64, { 0.0069, 0.0070, 0.012, 0.0025 } },
};

static void test_roundtrip_error_within_bounds_for_every_format(void **state)
{
    (void)state;
    const int64_t n_multi = 8192;
    float *x = xmalloc(n_multi * sizeof(float)), *y = xmalloc(n_multi * sizeof(float));
    size_t checked = 0;
    for (size_t t = 0; t < sizeof bounds / sizeof bounds[0]; t++) {
        const rvl_kformat *f = fmt(bounds[t].type);
        assert_non_null(f->quantize);
        for (int d = 0; d < DIST_COUNT; d++) {
            /* one block, then a long multi-block row */
            const int64_t sizes[2] = { f->block_size == 1 ? 64 : f->block_size, n_multi };
            for (int s = 0; s < 2; s++) {
                const int64_t n = sizes[s];
                fill(x, n, (dist)d);
                roundtrip(f, x, y, n, NULL);
                double e = rel_rmse(x, y, n);
                if (report && s == 1)
                    printf("  %-13s %-9s rel rmse %.5f (bound %.4f)\n", f->name,
                           dist_name[d], e, bounds[t].bound[d]);
                /* a single block is noisier: allow 50% more */
                double bound = bounds[t].bound[d] * (s == 0 ? 1.5 : 1.0);
                if (!(e <= bound) && !report)
                    fail_msg("%s, %s data, n=%lld: relative RMSE %.5f > %.5f", f->name,
                             dist_name[d], (long long)n, e, bound);
            }
        }
        checked++;
    }
    /* every format with a quantizer has a bound above */
    const rvl_kformat *f;
    size_t with_quantizer = 0;
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++)
        with_quantizer += f->quantize != NULL;
    assert_int_equal(with_quantizer, checked);
    free(x);
    free(y);
}

static void test_zero_and_constant_rows_roundtrip_cleanly(void **state)
{
    (void)state;
    const rvl_kformat *f;
    float x[512], y[512];
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
        if (!f->quantize)
            continue;
        const int64_t n = lcm64(256, f->block_size);
        for (int c = 0; c < 3; c++) {
            const float v = c == 0 ? 0.0f : c == 1 ? 0.75f : -3.0f;
            for (int64_t j = 0; j < n; j++)
                x[j] = v;
            roundtrip(f, x, y, n, NULL);
            for (int64_t j = 0; j < n; j++) {
                if (!isfinite(y[j]) || fabsf(y[j] - v) > 0.02f * fabsf(v) + 1e-6f)
                    fail_msg("%s: constant %g -> y[%lld] = %g", f->name, v, (long long)j, y[j]);
                if (v == 0.0f && f->type != RVL_TYPE_Q1_0)   /* Q1_0 stores signs only */
                    assert_true(y[j] == 0.0f);
            }
        }
    }
}

/* ======================================================================
 * The searches beat round-to-nearest
 * ====================================================================== */

static float f16r(float v) { return rvl_f16_to_f32(rvl_f32_to_f16(v)); }
static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }
static float rnd(float v) { return nearbyintf(v); }

static int iq4_nearest(float v)
{
    int best = 0;
    for (int k = 1; k < 16; k++)
        if (fabsf(rvl_kvalues_iq4nl[k] - v) < fabsf(rvl_kvalues_iq4nl[best] - v))
            best = k;
    return best;
}

/* Plain round-to-nearest encoder of a super-block into the same format,
 * evaluated in floats: group scales from min/max, group scales quantized
 * against the block maximum, levels rounded. */
static void rtn_kquant(uint32_t type, const float *x, float *y)
{
    float sc[16], mn[16];
    if (type == RVL_TYPE_Q2_K || type == RVL_TYPE_Q4_K || type == RVL_TYPE_Q5_K) {
        const int g = type == RVL_TYPE_Q2_K ? 16 : 32, ng = 256 / g;
        const int nmax = type == RVL_TYPE_Q2_K ? 3 : type == RVL_TYPE_Q4_K ? 15 : 31;
        const float smax = type == RVL_TYPE_Q2_K ? 15 : 63;
        float ms = 0, mm = 0;
        for (int j = 0; j < ng; j++) {
            float lo = 0, hi = x[g * j];
            for (int l = 0; l < g; l++) {
                lo = fminf(lo, x[g * j + l]);
                hi = fmaxf(hi, x[g * j + l]);
            }
            sc[j] = (hi - lo) / nmax;
            mn[j] = -lo;
            ms = fmaxf(ms, sc[j]);
            mm = fmaxf(mm, mn[j]);
        }
        const float d = f16r(ms / smax), dm = f16r(mm / smax);
        for (int j = 0; j < ng; j++) {
            const float dl = d * (d ? clampf(rnd(sc[j] / d), 0, smax) : 0);
            const float ml = dm * (dm ? clampf(rnd(mn[j] / dm), 0, smax) : 0);
            for (int l = 0; l < g; l++) {
                float q = dl ? clampf(rnd((x[g * j + l] + ml) / dl), 0, nmax) : 0;
                y[g * j + l] = dl * q - ml;
            }
        }
        return;
    }
    /* symmetric: Q3_K (16 x 16, 3-bit, 6-bit scales), Q6_K (16 x 16, 6-bit,
     * 8-bit scales), IQ4_XS (8 x 32, IQ4 levels, 6-bit scales) */
    const int g = type == RVL_TYPE_IQ4_XS ? 32 : 16, ng = 256 / g;
    const float lmax = type == RVL_TYPE_Q3_K ? 4 : type == RVL_TYPE_Q6_K ? 32 : 127;
    const float smax = type == RVL_TYPE_Q6_K ? 127 : 31;
    float ms = 0;
    for (int j = 0; j < ng; j++) {
        float a = 0;
        for (int l = 0; l < g; l++)
            a = fmaxf(a, fabsf(x[g * j + l]));
        sc[j] = a / lmax;
        ms = fmaxf(ms, sc[j]);
    }
    const float d = f16r(ms / smax);
    for (int j = 0; j < ng; j++) {
        const float dl = d * (d ? clampf(rnd(sc[j] / d), -smax - 1, smax) : 0);
        for (int l = 0; l < g; l++) {
            const float v = x[g * j + l];
            if (!dl)
                y[g * j + l] = 0;
            else if (type == RVL_TYPE_IQ4_XS)
                y[g * j + l] = dl * rvl_kvalues_iq4nl[iq4_nearest(v / dl)];
            else
                y[g * j + l] = dl * clampf(rnd(v / dl), -lmax, lmax - 1);
        }
    }
}

static void rtn_iq4_nl(const float *x, float *y)
{
    float a = 0;
    for (int l = 0; l < 32; l++)
        a = fmaxf(a, fabsf(x[l]));
    const float d = f16r(a / 127);
    for (int l = 0; l < 32; l++)
        y[l] = d ? d * rvl_kvalues_iq4nl[iq4_nearest(x[l] / d)] : 0;
}

static void test_kquant_and_iq4_searches_beat_round_to_nearest(void **state)
{
    (void)state;
    static const uint32_t types[] = { RVL_TYPE_Q2_K, RVL_TYPE_Q3_K, RVL_TYPE_Q4_K,
                                      RVL_TYPE_Q5_K, RVL_TYPE_Q6_K, RVL_TYPE_IQ4_NL,
                                      RVL_TYPE_IQ4_XS };
    const int64_t n = 64 * 256;
    float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float));
    float *b = xmalloc(n * sizeof(float));
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const rvl_kformat *f = fmt(types[t]);
        for (int d = 0; d < DIST_COUNT; d++) {
            fill(x, n, (dist)d);
            roundtrip(f, x, y, n, NULL);
            for (int64_t i = 0; i < n; i += 256) {
                if (types[t] == RVL_TYPE_IQ4_NL)
                    for (int k = 0; k < 8; k++)
                        rtn_iq4_nl(x + i + 32 * k, b + i + 32 * k);
                else
                    rtn_kquant(types[t], x + i, b + i);
            }
            double ours = rel_rmse(x, y, n), rtn = rel_rmse(x, b, n);
            if (report)
                printf("  %-7s %-9s search %.5f  round-to-nearest %.5f\n", f->name,
                       dist_name[d], ours, rtn);
            if (!(ours <= rtn))
                fail_msg("%s, %s data: search RMSE %.5f worse than round-to-nearest %.5f",
                         f->name, dist_name[d], ours, rtn);
        }
    }
    free(x);
    free(y);
    free(b);
}

static void test_importance_weights_reduce_weighted_error(void **state)
{
    (void)state;
    static const uint32_t types[] = {
        RVL_TYPE_Q4_0, RVL_TYPE_Q4_1, RVL_TYPE_Q5_0, RVL_TYPE_Q5_1, RVL_TYPE_Q2_K,
        RVL_TYPE_Q3_K, RVL_TYPE_Q4_K, RVL_TYPE_Q5_K, RVL_TYPE_Q6_K, RVL_TYPE_IQ4_NL,
        RVL_TYPE_IQ4_XS, RVL_TYPE_RVL_I4S_G32, RVL_TYPE_RVL_I4S_G128, RVL_TYPE_RVL_I4A_G32,
        RVL_TYPE_RVL_I4A_G128,
    };
    const int64_t n = 1024, rows = 48;
    float *x = xmalloc(n * sizeof(float)), *qw = xmalloc(n * sizeof(float));
    float *y0 = xmalloc(n * sizeof(float)), *y1 = xmalloc(n * sizeof(float));
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const rvl_kformat *f = fmt(types[t]);
        double e_plain = 0, e_weighted = 0, e_unw = 0, s = 0;
        for (int r = 0; r < rows; r++) {
            fill(x, n, DIST_WEIGHTS);
            for (int64_t i = 0; i < n; i++)     /* an imatrix: a few columns matter a lot */
                qw[i] = expf(2.0f * rng_normal());
            roundtrip(f, x, y0, n, NULL);
            roundtrip(f, x, y1, n, qw);
            for (int64_t i = 0; i < n; i++) {
                e_plain += qw[i] * ((double)x[i] - y0[i]) * ((double)x[i] - y0[i]);
                e_weighted += qw[i] * ((double)x[i] - y1[i]) * ((double)x[i] - y1[i]);
                e_unw += ((double)x[i] - y1[i]) * ((double)x[i] - y1[i]);
                s += (double)x[i] * x[i];
            }
        }
        if (report)
            printf("  %-13s weighted error: plain %.4g, with weights %.4g (-%.0f%%)\n", f->name,
                   e_plain, e_weighted, 100 * (1 - e_weighted / e_plain));
        if (!(e_weighted < e_plain))
            fail_msg("%s: importance weights did not reduce the weighted error (%g vs %g)",
                     f->name, e_weighted, e_plain);
        /* and the unweighted error stays sane */
        if (!(sqrt(e_unw / s) < 0.5))
            fail_msg("%s: relative RMSE with weights %g", f->name, sqrt(e_unw / s));
    }
    free(x);
    free(qw);
    free(y0);
    free(y1);
}

static void test_q8_K_block_sums_match_quants(void **state)
{
    (void)state;
    float x[512];
    block_q8_K q[2];
    fill(x, 512, DIST_HEAVY);
    quantize_q8_K_ref(x, q, 512, NULL);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) {
                s += q[b].qs[16 * j + l];
                assert_true(q[b].qs[16 * j + l] >= -127);
            }
            assert_int_equal(q[b].bsums[j], s);
        }
}

/* ======================================================================
 * Dot products against a double-precision loop
 * ====================================================================== */

static void check_dot(const rvl_kformat *f, int64_t n, int odd)
{
    const rvl_kformat *af = fmt(f->vec_dot_type);
    float *x = xmalloc(n * sizeof(float)), *a = xmalloc(n * sizeof(float));
    float *xd = xmalloc(n * sizeof(float)), *ad = xmalloc(n * sizeof(float));
    const size_t wb = rowb(f, n), ab = rowb(af, n);
    uint8_t *wbuf = xmalloc(wb + 8), *abuf = xmalloc(ab + 8);
    uint8_t *w = wbuf + odd, *act = abuf + 2 * odd;

    fill(x, n, DIST_WEIGHTS);
    fill(a, n, DIST_HEAVY);
    f->quantize(x, w, n, NULL);
    af->quantize(a, act, n, NULL);
    f->dequantize(w, xd, n);
    af->dequantize(act, ad, n);

    double ref = 0, mag = 0, extra = 0;
    for (int64_t i = 0; i < n; i++) {
        ref += (double)xd[i] * ad[i];
        mag += fabs((double)xd[i] * ad[i]);
    }
    /* Q8_1 carries s = d*sum(q) rounded to f16: the dot product uses it */
    if (f->vec_dot_type == RVL_TYPE_Q8_1) {
        const block_q8_1 *qa = (const block_q8_1 *)act;
        for (int64_t b = 0; b < n / 32; b++) {
            uint16_t mh;
            memcpy(&mh, w + b * f->type_size + 2, 2);
            extra += fabs(rvl_f16_to_f32(mh) * rvl_f16_to_f32(qa[b].s)) * 1e-3;
        }
    }
    const float dot = f->vec_dot(n, w, act);
    const double tol = 2e-6 * mag + extra + 1e-30;
    if (report && !odd)
        printf("  %-13s . %-5s n=%-5lld dot %.7g ref %.7g |err|/sum|w*a| %.2g\n", f->name,
               af->name, (long long)n, dot, ref, fabs(dot - ref) / (mag + 1e-30));
    if (!(fabs(dot - ref) <= tol))
        fail_msg("%s . %s, n=%lld: dot %.9g, double loop %.9g (|diff| %.3g > %.3g)", f->name,
                 af->name, (long long)n, dot, ref, fabs(dot - ref), tol);
    free(x);
    free(a);
    free(xd);
    free(ad);
    free(wbuf);
    free(abuf);
}

static void test_every_dot_product_matches_a_double_loop(void **state)
{
    (void)state;
    const rvl_kformat *f;
    size_t n_dots = 0;
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
        if (!f->vec_dot)
            continue;
        const int64_t step = lcm64(f->block_size, fmt(f->vec_dot_type)->block_size);
        check_dot(f, step, 0);        /* one block */
        check_dot(f, 4096, 0);        /* a real row */
        check_dot(f, 4096, 1);        /* odd addresses */
        n_dots++;
    }
    assert_int_equal(n_dots, 16 + 11);
}

static void test_plain_dot_products_with_f32_activations(void **state)
{
    (void)state;
    const int64_t n = 1000;
    float x[1000], a[1000];
    uint16_t h[1000], bh[1000];
    fill(x, n, DIST_NORMAL);
    fill(a, n, DIST_NORMAL);
    quantize_f16_ref(x, h, n, NULL);
    quantize_bf16_ref(x, bh, n, NULL);
    double r16 = 0, rb16 = 0;
    for (int64_t i = 0; i < n; i++) {
        r16 += (double)rvl_f16_to_f32(h[i]) * a[i];
        rb16 += (double)rvl_bf16_to_f32(bh[i]) * a[i];
    }
    assert_true(fabs(vec_dot_f16_f32_ref(n, h, a) - r16) <= 1e-6 * fabs(r16) + 1e-6);
    assert_true(fabs(vec_dot_bf16_f32_ref(n, bh, a) - rb16) <= 1e-6 * fabs(rb16) + 1e-6);
}

/* ======================================================================
 * Alignment and buffer bounds
 * ====================================================================== */

static void test_kernels_accept_odd_pointers_and_stay_in_their_row(void **state)
{
    (void)state;
    const rvl_kformat *f;
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
        if (!f->quantize)
            continue;
        const int64_t n = lcm64(512, f->block_size);
        const size_t rb = rowb(f, n);
        float *x = xmalloc(n * sizeof(float)), *y = xmalloc((n + 8) * sizeof(float));
        float *y2 = xmalloc(n * sizeof(float)), *qw = xmalloc(n * sizeof(float));
        uint8_t *ref = xmalloc(rb), *buf = xmalloc(rb + 64);
        fill(x, n, DIST_NORMAL);
        for (int64_t j = 0; j < n; j++)
            qw[j] = (float)rng_unif();
        for (int pass = 0; pass < 2; pass++) {
            const float *w = pass ? qw : NULL;
            f->quantize(x, ref, n, w);
            f->dequantize(ref, y2, n);
            for (int off = 1; off < 8; off += 2) {
                memset(buf, 0xA5, rb + 64);
                f->quantize(x, buf + off, n, w);
                if (memcmp(buf + off, ref, rb))
                    fail_msg("%s: quantize at offset %d differs from aligned", f->name, off);
                for (size_t k = 0; k < rb + 64; k++)
                    if ((k < (size_t)off || k >= off + rb) && buf[k] != 0xA5)
                        fail_msg("%s: quantize wrote byte %zd outside its row", f->name,
                                 (ptrdiff_t)k - off);
                for (int k = 0; k < 8; k++)
                    y[n + k] = -7.25f;
                f->dequantize(buf + off, y, n);
                assert_memory_equal(y, y2, n * sizeof(float));
                for (int k = 0; k < 8; k++)
                    assert_true(y[n + k] == -7.25f);
            }
        }
        free(x);
        free(y);
        free(y2);
        free(qw);
        free(ref);
        free(buf);
    }
}

static void test_kernels_handle_hard_inputs_without_nan(void **state)
{
    (void)state;
    /* tiny (f16-subnormal scales), huge, sparse and one-hot rows */
    const rvl_kformat *f;
    float x[512], y[512];
    for (size_t i = 0; (f = rvl_kformat_at(i)) != NULL; i++) {
        if (!f->quantize || f->type == RVL_TYPE_F16)
            continue;
        for (int c = 0; c < 4; c++) {
            for (int j = 0; j < 512; j++) {
                switch (c) {
                case 0: x[j] = 1e-7f * rng_normal(); break;
                case 1: x[j] = 2e3f * rng_normal(); break;   /* f16 scales: keep below 65504 */
                case 2: x[j] = j % 97 == 0 ? rng_normal() : 0.0f; break;
                default: x[j] = j == 300 ? 5.0f : 0.0f; break;
                }
            }
            roundtrip(f, x, y, 512, NULL);
            for (int j = 0; j < 512; j++)
                if (!isfinite(y[j]))
                    fail_msg("%s: case %d gives y[%d] = %g", f->name, c, j, y[j]);
        }
    }
}

int main(void)
{
    report = getenv("RVL_FORMATS_REPORT") != NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_structs_have_llama_cpp_sizes),
        cmocka_unit_test(test_table_agrees_with_public_type_api),
        cmocka_unit_test(test_llama_cpp_pairs_weights_with_activation_formats),
        cmocka_unit_test(test_i8_row_counts_its_row_header),
        cmocka_unit_test(test_f16_rounding_matches_numpy),
        cmocka_unit_test(test_f16_roundtrips_every_half_exactly),
        cmocka_unit_test(test_bf16_rounds_to_nearest_even_and_quiets_nan),
        cmocka_unit_test(test_quantize_matches_gguf_py_bit_for_bit),
        cmocka_unit_test(test_dequantize_matches_gguf_py_bit_for_bit),
        cmocka_unit_test(test_quantize_matches_llama_cpp_bit_for_bit),
        cmocka_unit_test(test_mxfp4_matches_llama_cpp),
        cmocka_unit_test(test_mxfp4_levels_and_scale_follow_the_mx_spec),
        cmocka_unit_test(test_rvl_i4s_g32_reads_as_q4_0),
        cmocka_unit_test(test_mlx_blocks_keep_mlx_nibble_order),
        cmocka_unit_test(test_roundtrip_error_within_bounds_for_every_format),
        cmocka_unit_test(test_zero_and_constant_rows_roundtrip_cleanly),
        cmocka_unit_test(test_kquant_and_iq4_searches_beat_round_to_nearest),
        cmocka_unit_test(test_importance_weights_reduce_weighted_error),
        cmocka_unit_test(test_q8_K_block_sums_match_quants),
        cmocka_unit_test(test_every_dot_product_matches_a_double_loop),
        cmocka_unit_test(test_plain_dot_products_with_f32_activations),
        cmocka_unit_test(test_kernels_accept_odd_pointers_and_stay_in_their_row),
        cmocka_unit_test(test_kernels_handle_hard_inputs_without_nan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
