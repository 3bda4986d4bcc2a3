/*
 * test_kvcache.c - the paged, tiered KV cache (lib/engine/kvcache.c): attention
 * over pages of every storage format, alone and mixed (tiered, keys and
 * values in different formats), against double-precision attention; pages
 * re-encoded as they age; truncation into a quantized page; context shift;
 * refused formats.
 *
 * Two references per attention output:
 *   - "cache": softmax(q K^T * scale) V in double over the rows the cache
 *     holds, decoded (rvl_kvcache_read_page): checks the attention machinery
 *     (page walk, online softmax across formats, split-K reduce, TQ
 *     rotation of q and of the output). Tolerance 2e-5 of max |v|, f32
 *     rounding over at most a few hundred keys;
 *   - "exact": the same over the original f32 keys and values: the
 *     storage error of each format, with the tolerance the issue's
 *     formats allow (per format below, relative to the RMS of the exact
 *     output; keys have two outlier channels of 8x, as real models do).
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kvcache.h"
#include "kvcache_testlib.h"

#define NL 2
#define NH 4
#define NKV 2
#define HD 64
#define NCTX 320
#define KVD (NKV * HD)
#define QD (NH * HD)

static uint64_t rng = 0x1234567;

static double gauss(void) { return kvt_gauss(&rng); }


/* the original keys, values, queries: (layer, pos, dim) */
static float K[NL][NCTX][KVD], V[NL][NCTX][KVD], Q[NCTX][QD];

static void make_data(void)
{
    for (int l = 0; l < NL; l++)
        for (int p = 0; p < NCTX; p++)
            for (int i = 0; i < KVD; i++) {
                const int ch = i % HD;
                K[l][p][i] = (float)(gauss() * (ch == 3 || ch == 17 ? 8.0 : 1.0) + (ch == 5 ? 2 : 0));
                V[l][p][i] = (float)gauss();
            }
    for (int p = 0; p < NCTX; p++)
        for (int i = 0; i < QD; i++)
            Q[p][i] = (float)gauss();
}

static rvl_kvcache_params geometry(void)
{
    return (rvl_kvcache_params){.n_layer = NL, .n_head = NH, .n_head_kv = NKV, .head_dim = HD,
                            .n_ctx = NCTX, .scale = 1.0f / 8.0f, .q_f16 = 0};
}

static void set_fmt(rvl_kvcache_params *p, const int k[3], const int v[3], uint32_t hot, uint32_t warm)
{
    memcpy(p->fmt_k, k, sizeof p->fmt_k);
    memcpy(p->fmt_v, v, sizeof p->fmt_v);
    p->hot = hot;
    p->warm = warm;
}



typedef struct {
    double cache_err;    /* max |out - cache ref| / max |v| */
    double exact_err;    /* RMS(out - exact ref) / RMS(exact ref) */
} errs;

static errs run_cache_w(rvl_kvcache *kc, rvl_pool *pool, int n, const int *batches, int nbatches,
                        const uint32_t *win);

/* Feeds positions rvl_kvcache_n .. n - 1 in batches of the sizes given (cycled), and
 * after each batch compares every query's attention with both references. */
static errs run_cache(rvl_kvcache *kc, rvl_pool *pool, int n, const int *batches, int nbatches)
{
    return run_cache_w(kc, pool, n, batches, nbatches, NULL);
}

/* The same with a sliding window per layer (win[l], 0: none; NULL: no
 * windows): the references see only the keys qp - W < t <= qp. */
static errs run_cache_w(rvl_kvcache *kc, rvl_pool *pool, int n, const int *batches, int nbatches,
                        const uint32_t *win)
{
    static float out[32][QD], ck[NCTX * KVD], cv[NCTX * KVD];
    double e2 = 0, r2 = 0, cmax = 0;
    int pos = (int)rvl_kvcache_n(kc), bi = 0;
    while (pos < n) {
        int nb = batches[bi++ % nbatches];
        nb = nb > n - pos ? n - pos : nb;
        rvl_kvcache_begin(kc, (uint32_t)nb);
        for (int l = 0; l < NL; l++)
            rvl_kvcache_write(kc, (uint32_t)l, (uint32_t)pos, (uint32_t)nb, K[l][pos], KVD, V[l][pos], KVD);
        for (int l = 0; l < NL; l++) {
            rvl_kvcache_attend(kc, pool, (uint32_t)l, Q[pos], QD, (uint32_t)pos, (uint32_t)nb, out[0], QD);
            kvt_cache_rows(kc, (uint32_t)l, 0, (uint32_t)(pos + nb), NKV, HD, ck);
            kvt_cache_rows(kc, (uint32_t)l, 1, (uint32_t)(pos + nb), NKV, HD, cv);
            for (int t = 0; t < nb; t++)
                for (int h = 0; h < NH; h++) {
                    const int kh = h / (NH / NKV), qp = pos + t;
                    const int w = win ? (int)win[l] : 0;
                    int lo = w && qp + 1 > w ? qp + 1 - w : 0;
                    /* a ring that lost keys in a context shift: what it holds */
                    const int lo_ring = (int)rvl_kvcache_first_page(kc, (uint32_t)l) * 32;
                    lo = lo < lo_ring ? lo_ring : lo;
                    double rc[HD], rx[HD];
                    kvt_ref_attn(Q[qp] + h * HD, ck + (size_t)lo * KVD + kh * HD,
                                 cv + (size_t)lo * KVD + kh * HD, KVD, qp + 1 - lo, HD, 1.0 / 8,
                                 -INFINITY, rc);
                    kvt_ref_attn(Q[qp] + h * HD, K[l][lo] + kh * HD, V[l][lo] + kh * HD, KVD,
                                 qp + 1 - lo, HD, 1.0 / 8, -INFINITY, rx);
                    for (int e = 0; e < HD; e++) {
                        const double o = out[t][h * HD + e];
                        cmax = fmax(cmax, fabs(o - rc[e]));
                        e2 += (o - rx[e]) * (o - rx[e]);
                        r2 += rx[e] * rx[e];
                    }
                }
        }
        rvl_kvcache_commit(kc, (uint32_t)nb);
        pos += nb;
    }
    assert_int_equal(rvl_kvcache_n(kc), n);
    /* |v| of N(0,1) data is below ~5 */
    return (errs){cmax / 5.0, sqrt(e2 / r2)};
}

#define U RVL_KVC_UNBOUNDED
enum { F16 = RVL_KVQ_F16, Q8 = RVL_KVQ_Q8, Q4 = RVL_KVQ_Q4, TQ4 = RVL_KVQ_TQ4, TQ3 = RVL_KVQ_TQ3,
       F32 = RVL_KVF_F32 };

static void test_kvcache_attention_matches_reference_for_every_format(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int k[3], v[3];
        uint32_t hot, warm;
        double tol;          /* exact_err bound */
    } cases[] = {
        {"f32", {F32, F32, F32}, {F32, F32, F32}, U, U, 1e-6},
        {"f16", {F16, F16, F16}, {F16, F16, F16}, U, U, 2e-3},
        {"q8", {F16, Q8, Q8}, {F16, Q8, Q8}, 0, U, 3e-2},
        {"q4", {F16, Q4, Q4}, {F16, Q4, Q4}, 0, U, 0.15},
        {"tq4", {F16, TQ4, TQ4}, {F16, TQ4, TQ4}, 0, U, 0.2},
        {"tq3", {F16, TQ3, TQ3}, {F16, TQ3, TQ3}, 0, U, 0.35},
        {"tiered 32/64/tq4", {F16, Q8, TQ4}, {F16, Q8, TQ4}, 32, 64, 0.15},
        {"tiered 32/64/q4", {F16, Q8, Q4}, {F16, Q8, Q4}, 32, 64, 0.15},
        {"keys q8, values tq4", {F16, Q8, Q8}, {F16, TQ4, TQ4}, 0, U, 0.15},
        {"keys tq3, values q4", {F16, TQ3, TQ3}, {F16, Q4, Q4}, 0, U, 0.35},
        {"keys tiered, values f16", {F16, Q8, TQ4}, {F16, F16, F16}, 32, 64, 0.15},
        {"keys f32, values q8", {F32, F32, F32}, {F32, Q8, Q8}, 0, U, 3e-2},
    };
    static const int batches[] = {31, 1, 1, 1, 32, 7, 1, 1, 25};
    rvl_pool *pool;
    assert_int_equal(rvl_pool_open(&pool, 2), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rvl_kvcache_params p = geometry();
        set_fmt(&p, cases[i].k, cases[i].v, cases[i].hot, cases[i].warm);
        rvl_kvcache *kc;
        if (rvl_kvcache_open(&kc, &p, 2) != 0)
            fail_msg("%s: %s", cases[i].name, rvl_errmsg());
        errs e = run_cache(kc, pool, 300, batches, 9);
        print_message("%-24s vs cache content %.2e, vs exact f32 %.2e (bound %.1e)\n", cases[i].name,
                      e.cache_err, e.exact_err, cases[i].tol);
        if (e.cache_err > 2e-5 || e.exact_err > cases[i].tol)
            fail_msg("%s: errors %.3g %.3g", cases[i].name, e.cache_err, e.exact_err);
        rvl_kvcache_close(kc);
    }
    rvl_pool_close(pool);
}

static void test_kvcache_pages_age_through_tiers(void **state)
{
    (void)state;
    rvl_kvcache_params p = geometry();
    set_fmt(&p, (int[]){F16, Q8, TQ4}, (int[]){F16, Q8, Q4}, 32, 64);
    rvl_kvcache *kc;
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), 0);
    float before[32 * HD], after[32 * HD];
    for (uint32_t n = 1; n <= 300; n++) {
        const uint32_t pos = n - 1;
        rvl_kvcache_begin(kc, 1);
        for (int l = 0; l < NL; l++)
            rvl_kvcache_write(kc, (uint32_t)l, pos, 1, K[l][pos], KVD, V[l][pos], KVD);
        /* page 1 just before it leaves tier 0 (n = 96: age 32 at commit) */
        if (n == 96)
            rvl_kvcache_read_page(kc, 1, 0, 1, 1, before);
        rvl_kvcache_commit(kc, 1);
        for (uint32_t pg = 0; pg < rvl_kvcache_n_pages(kc); pg++) {
            int want = 0;
            if ((pg + 1) * 32 <= n) {
                const uint32_t age = n - (pg + 1) * 32;
                want = age < 32 ? 0 : age < 96 ? 1 : 2;
            }
            if (rvl_kvcache_page_tier(kc, 0, pg) != want)
                fail_msg("after %u positions page %u is in tier %d, expected %d", n, pg,
                         rvl_kvcache_page_tier(kc, 0, pg), want);
        }
        if (n == 96) {
            /* re-encoded as q8: the keys come back within q8's step */
            rvl_kvcache_read_page(kc, 1, 0, 1, 1, after);
            double mx = 0;
            for (int i = 0; i < 32 * HD; i++)
                mx = fmax(mx, fabs(after[i] - before[i]) / (fabs(before[i]) + 1));
            assert_true(mx > 0);       /* it did change format */
            assert_true(mx < 0.12);    /* (centred keys) amax/127 per group of 32: ~0.2 on 8x channels */
        }
    }
    /* bytes per token of each tier's formats: f16 256, q8 136, tq4 + q4 74, per head pair */
    assert_true(fabs(rvl_kvcache_tier_token_bytes(kc, 0) - NL * NKV * (128 + 128)) < 1e-9);
    assert_true(fabs(rvl_kvcache_tier_token_bytes(kc, 1) - NL * NKV * (68 + 68)) < 1e-9);
    assert_true(fabs(rvl_kvcache_tier_token_bytes(kc, 2) - NL * NKV * (34 + 40)) < 1e-9);
    rvl_kvcache_close(kc);
}

static void fill(rvl_kvcache *kc, uint32_t n)
{
    for (uint32_t pos = rvl_kvcache_n(kc); pos < n; pos++) {
        rvl_kvcache_begin(kc, 1);
        for (int l = 0; l < NL; l++)
            rvl_kvcache_write(kc, (uint32_t)l, pos, 1, K[l][pos], KVD, V[l][pos], KVD);
        rvl_kvcache_commit(kc, 1);
    }
}

static void test_kvcache_truncate_into_quantized_page_decodes_it(void **state)
{
    (void)state;
    rvl_kvcache_params p = geometry();
    set_fmt(&p, (int[]){F16, Q4, Q4}, (int[]){F16, TQ4, TQ4}, 0, U);
    rvl_kvcache *kc;
    assert_int_equal(rvl_kvcache_open(&kc, &p, 2), 0);
    fill(kc, 100);
    assert_int_equal(rvl_kvcache_page_tier(kc, 0, 2), 1);
    float q4rows[32 * HD], rows[32 * HD];
    rvl_kvcache_read_page(kc, 1, 0, 2, 0, q4rows);
    assert_int_equal(rvl_kvcache_truncate(kc, 101), RVL_ERANGE);
    assert_int_equal(rvl_kvcache_truncate(kc, 70), 0);
    assert_int_equal(rvl_kvcache_n(kc), 70);
    assert_int_equal(rvl_kvcache_n_pages(kc), 3);
    assert_int_equal(rvl_kvcache_page_tier(kc, 0, 2), 0); /* the page being filled: full precision */
    rvl_kvcache_read_page(kc, 1, 0, 2, 0, rows);
    for (int i = 0; i < 6 * HD; i++) /* its rows: the q4 reconstruction, rounded to f16 */
        assert_true(fabsf(rows[i] - q4rows[i]) <= 1e-3f * (fabsf(q4rows[i]) + 1));
    /* and it goes on: new positions, attention still matches its content */
    static const int one[] = {1, 3};
    rvl_pool *pool;
    assert_int_equal(rvl_pool_open(&pool, 2), 0);
    rvl_kvcache_reset(kc);
    fill(kc, 70);
    assert_int_equal(rvl_kvcache_truncate(kc, 45), 0);
    errs e = run_cache(kc, pool, 120, one, 2);
    print_message("after truncating into a q4/tq4 page: vs cache content %.2e, vs exact %.2e\n",
                  e.cache_err, e.exact_err);
    assert_true(e.cache_err < 2e-5);
    assert_true(e.exact_err < 0.15);
    rvl_pool_close(pool);
    rvl_kvcache_close(kc);
}

static void test_kvcache_shift_rotates_kept_keys(void **state)
{
    (void)state;
    /* rotating by -d the keys of positions p gives the keys rotated at p - d:
     * with keys R(p) x written, after the shift position i holds R(i) x */
    rvl_kvcache_params p = geometry();
    set_fmt(&p, (int[]){F32, F32, F32}, (int[]){F32, F32, F32}, U, U);
    rvl_kvcache *kc;
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), 0);
    const int n = 80, keep = 5, drop = 30;
    static float x[NCTX][KVD];
    for (int t = 0; t < n; t++)
        for (int i = 0; i < KVD; i++)
            x[t][i] = (float)gauss();
    /* NORM layout, angle theta_i * pos with theta_i = 10000^(-2i/HD) */
    float cs[HD / 2], sn[HD / 2];
    for (int pos = 0; pos < n; pos++) {
        float k[KVD];
        for (int h = 0; h < NKV; h++)
            for (int i = 0; i < HD / 2; i++) {
                const double a = pos * pow(10000.0, -2.0 * i / HD);
                const float x0 = x[pos][h * HD + 2 * i], x1 = x[pos][h * HD + 2 * i + 1];
                k[h * HD + 2 * i] = (float)(x0 * cos(a) - x1 * sin(a));
                k[h * HD + 2 * i + 1] = (float)(x0 * sin(a) + x1 * cos(a));
            }
        rvl_kvcache_begin(kc, 1);
        for (int l = 0; l < NL; l++)
            rvl_kvcache_write(kc, (uint32_t)l, (uint32_t)pos, 1, k, KVD, V[l][pos], KVD);
        rvl_kvcache_commit(kc, 1);
    }
    for (int i = 0; i < HD / 2; i++) {
        const double a = drop * pow(10000.0, -2.0 * i / HD);
        cs[i] = (float)cos(a);
        sn[i] = (float)sin(a);
    }
    assert_int_equal(rvl_kvcache_shift(kc, keep, drop + 100, cs, sn, NULL, NULL, HD, false), RVL_ERANGE);
    assert_int_equal(rvl_kvcache_shift(kc, keep, drop, cs, sn, NULL, NULL, HD, false), 0);
    assert_int_equal(rvl_kvcache_n(kc), n - drop);
    static float ck[NCTX * KVD], cv[NCTX * KVD];
    kvt_cache_rows(kc, 1, 0, (uint32_t)(n - drop), NKV, HD, ck);
    kvt_cache_rows(kc, 1, 1, (uint32_t)(n - drop), NKV, HD, cv);
    double mx = 0;
    for (int i = 0; i < n - drop; i++) {
        const int src = i < keep ? i : i + drop;
        assert_memory_equal(cv + (size_t)i * KVD, V[1][src], KVD * sizeof(float));
        for (int h = 0; h < NKV; h++)
            for (int j = 0; j < HD / 2; j++) {
                const double a = i * pow(10000.0, -2.0 * j / HD);
                const double x0 = x[src][h * HD + 2 * j], x1 = x[src][h * HD + 2 * j + 1];
                mx = fmax(mx, fabs(ck[(size_t)i * KVD + h * HD + 2 * j] - (x0 * cos(a) - x1 * sin(a))));
                mx = fmax(mx, fabs(ck[(size_t)i * KVD + h * HD + 2 * j + 1] - (x0 * sin(a) + x1 * cos(a))));
            }
    }
    print_message("shifted keys vs keys rotated at their new positions: %.2e\n", mx);
    assert_true(mx < 1e-4);
    rvl_kvcache_close(kc);
}

static void test_kvcache_refuses_bad_formats(void **state)
{
    (void)state;
    rvl_kvcache *kc = (rvl_kvcache *)1;
    rvl_kvcache_params p = geometry();
    p.head_dim = 80;
    set_fmt(&p, (int[]){F16, TQ4, TQ4}, (int[]){F16, Q8, Q8}, 0, U);
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), RVL_EINVAL);
    assert_null(kc);
    assert_non_null(strstr(rvl_errmsg(), "tq4 needs a power-of-two head_dim"));
    assert_non_null(strstr(rvl_errmsg(), "got 80"));
    assert_non_null(strstr(rvl_errmsg(), "keys"));
    set_fmt(&p, (int[]){F16, Q8, Q8}, (int[]){F16, TQ3, TQ3}, 0, U);
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "values: tq3 needs a power-of-two head_dim"));
    /* q4 and q8 take any head_dim */
    set_fmt(&p, (int[]){F16, Q4, Q4}, (int[]){F16, Q8, Q8}, 0, U);
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), 0);
    rvl_kvcache_close(kc);
    p = geometry();
    set_fmt(&p, (int[]){Q8, Q8, Q8}, (int[]){Q8, Q8, Q8}, U, U);
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "hot tier must be f16 or f32"));
    set_fmt(&p, (int[]){F16, 9, 9}, (int[]){F16, Q8, Q8}, 0, U);
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), RVL_EINVAL);
    /* the names the options use */
    assert_int_equal(rvl_kv_type_parse("tiered"), RVL_KV_TIERED);
    assert_int_equal(rvl_kv_type_parse("tq3"), RVL_KV_TQ3);
    assert_int_equal(rvl_kv_type_parse("q5"), -1);
    assert_string_equal(rvl_kv_type_name(RVL_KV_Q4), "q4");
}

/* An attention sink: with sink = 32 the first page stays f16 (tier 0) in a
 * tq4 cache while every later full page is tq4, and attention over that
 * mix (a tier-0 page before quantized ones) matches the reference over
 * what the cache holds. */
static void test_kvcache_sink_page_stays_f16(void **state)
{
    (void)state;
    rvl_pool *pool = NULL;
    assert_int_equal(rvl_pool_open(&pool, 2), 0);
    rvl_kvcache_params p = geometry();
    set_fmt(&p, (int[]){F16, TQ4, TQ4}, (int[]){F16, TQ4, TQ4}, 0, U);
    p.sink = 32;
    rvl_kvcache *kc;
    assert_int_equal(rvl_kvcache_open(&kc, &p, 2), 0);
    const errs e = run_cache(kc, pool, 200, (const int[]){1, 7, 32}, 3);
    assert_true(e.cache_err < 1e-4);
    assert_int_equal(rvl_kvcache_page_tier(kc, 0, 0), 0);
    for (uint32_t pg = 1; pg < 200 / 32; pg++)
        assert_int_equal(rvl_kvcache_page_tier(kc, 0, pg), 1);
    /* the sink page holds the keys and values at f16 precision */
    float page[32 * HD];
    for (int kind = 0; kind < 2; kind++)
        for (uint32_t h = 0; h < NKV; h++) {
            rvl_kvcache_read_page(kc, 1, kind, 0, h, page);
            for (int j = 0; j < 32; j++)
                for (int d = 0; d < HD; d++) {
                    const float x = (kind ? V : K)[1][j][h * HD + d];
                    /* keys are stored centred: f16 of k - mu, |mu| < ~3 here */
                    assert_true(fabsf(page[j * HD + d] - x) <= 1e-3f * fabsf(x) +
                                (kind ? 1e-6f : 3e-3f));
                }
        }
    /* truncating into the sink and refilling keeps it f16 */
    assert_int_equal(rvl_kvcache_truncate(kc, 20), 0);
    fill(kc, 150);
    assert_int_equal(rvl_kvcache_page_tier(kc, 0, 0), 0);
    assert_int_equal(rvl_kvcache_page_tier(kc, 0, 1), 1);
    rvl_kvcache_close(kc);
    rvl_pool_close(pool);
}

/* Key centering: keys that share a large common vector c (|c| five times
 * the spread around it) are stored as k - mu with mu the mean of positions
 * 1 .. 63 (fixed when the first key page is quantized), so tq4 spends its
 * levels on the spread: the keys come back within tq4's relative error of
 * the spread (about 0.1), not of |k| (which would be ~0.5 of the spread).
 * The centre is reported, survives a reset, and f16 caches have none. */
static void test_kvcache_centres_quantized_keys(void **state)
{
    (void)state;
    static float kk[NL][200][KVD], vv[NL][200][KVD];
    float c[KVD];
    for (int i = 0; i < KVD; i++)
        c[i] = (float)(5.0 * (i % 3 ? 1 : -1));
    for (int l = 0; l < NL; l++)
        for (int p = 0; p < 200; p++)
            for (int i = 0; i < KVD; i++) {
                kk[l][p][i] = c[i] + (float)gauss();
                vv[l][p][i] = (float)gauss();
            }
    rvl_kvcache_params p = geometry();
    set_fmt(&p, (int[]){F16, TQ4, TQ4}, (int[]){F16, TQ4, TQ4}, 0, U);
    p.sink = 32;
    rvl_kvcache *kc;
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), 0);
    for (uint32_t pos = 0; pos < 200; pos++) {
        rvl_kvcache_begin(kc, 1);
        for (int l = 0; l < NL; l++)
            rvl_kvcache_write(kc, (uint32_t)l, pos, 1, kk[l][pos], KVD, vv[l][pos], KVD);
        rvl_kvcache_commit(kc, 1);
        if (pos < 63)
            assert_null(rvl_kvcache_key_center(kc)); /* nothing quantized yet */
    }
    const float *mu = rvl_kvcache_key_center(kc);
    assert_non_null(mu);
    for (int l = 0; l < NL; l++)
        for (int i = 0; i < KVD; i++)
            assert_true(fabsf(mu[l * KVD + i] - c[i]) < 0.7f); /* 63 samples: sd 0.13 */
    float page[32 * HD];
    for (int l = 0; l < NL; l++)
        for (uint32_t h = 0; h < NKV; h++) {
            double e2 = 0, s2 = 0;
            for (uint32_t pg = 2; pg < 6; pg++) {
                assert_int_equal(rvl_kvcache_page_tier(kc, 0, pg), 1);
                rvl_kvcache_read_page(kc, (uint32_t)l, 0, pg, h, page);
                for (int j = 0; j < 32; j++)
                    for (int d = 0; d < HD; d++) {
                        const double x = kk[l][pg * 32 + j][h * HD + d];
                        e2 += (page[j * HD + d] - x) * (page[j * HD + d] - x);
                        s2 += (x - c[h * HD + d]) * (x - c[h * HD + d]);
                    }
            }
            assert_true(sqrt(e2 / s2) < 0.15);
        }
    float mu0[NL * KVD];
    memcpy(mu0, mu, sizeof mu0);
    rvl_kvcache_reset(kc);
    assert_non_null(rvl_kvcache_key_center(kc));
    assert_memory_equal(rvl_kvcache_key_center(kc), mu0, sizeof mu0);
    rvl_kvcache_close(kc);
    set_fmt(&p, (int[]){F16, F16, F16}, (int[]){F16, F16, F16}, U, U);
    p.sink = 0;
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), 0);
    for (uint32_t pos = 0; pos < 100; pos++) {
        rvl_kvcache_begin(kc, 1);
        for (int l = 0; l < NL; l++)
            rvl_kvcache_write(kc, (uint32_t)l, pos, 1, kk[l][pos], KVD, vv[l][pos], KVD);
        rvl_kvcache_commit(kc, 1);
    }
    assert_null(rvl_kvcache_key_center(kc));
    rvl_kvcache_close(kc);
}

/* The bytes the cache's pages hold now, every layer (K + V, every head). */
static uint64_t held_bytes(const rvl_kvcache *kc)
{
    uint64_t b = 0;
    for (uint32_t l = 0; l < NL; l++)
        for (uint32_t pg = rvl_kvcache_first_page(kc, l); pg < rvl_kvcache_n_pages(kc); pg++) {
            const int t = rvl_kvcache_page_tier(kc, l, pg);
            b += NKV * (rvl_kvcache_page_bytes(kc, 0, t) + rvl_kvcache_page_bytes(kc, 1, t));
        }
    return b;
}

enum { W = 40, RING = (W + 32 + 31) / 32 + 2 };   /* RING: 5 pages */

/* Sliding windows on every format: layer 0 with a window of W = 40, layer
 * 1 global (Gemma's mix), then both windowed: each query's attention
 * equals the reference over only its last W keys (itself included) on
 * the windowed layer, over every key on the global one, both over what
 * the cache holds (the machinery: the mask on quantized pages too) and
 * over the exact keys (the formats' error). The windowed layer keeps a
 * ring of at most 5 pages (the window, a batch, partial pages) of the 10
 * that 300 positions take, while the global layer keeps every page; the
 * bytes held are what rvl_kvcache_usage says. */
static void test_kvcache_sliding_windows_on_every_format(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int k[3], v[3];
        uint32_t hot, warm;
        double tol;
    } cases[] = {
        {"f32", {F32, F32, F32}, {F32, F32, F32}, U, U, 1e-6},
        {"f16", {F16, F16, F16}, {F16, F16, F16}, U, U, 2e-3},
        {"q8", {F16, Q8, Q8}, {F16, Q8, Q8}, 0, U, 3e-2},
        {"q4", {F16, Q4, Q4}, {F16, Q4, Q4}, 0, U, 0.15},
        {"tq4", {F16, TQ4, TQ4}, {F16, TQ4, TQ4}, 0, U, 0.2},
        {"tq3", {F16, TQ3, TQ3}, {F16, TQ3, TQ3}, 0, U, 0.35},
        {"tiered 16/32/tq4", {F16, Q8, TQ4}, {F16, Q8, TQ4}, 16, 32, 0.2},
        {"keys q8, values tq4", {F16, Q8, Q8}, {F16, TQ4, TQ4}, 0, U, 0.15},
        {"keys f32, values q4", {F32, F32, F32}, {F32, Q4, Q4}, 0, U, 0.15},
    };
    static const uint32_t layouts[2][NL] = {{W, 0}, {W, W}};
    static const int batches[] = {1, 5, 32, 3, 1, 1, 7, 32, 1};
    rvl_pool *pool;
    assert_int_equal(rvl_pool_open(&pool, 2), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int lay = 0; lay < 2; lay++) {
            rvl_kvcache_params p = geometry();
            set_fmt(&p, cases[i].k, cases[i].v, cases[i].hot, cases[i].warm);
            p.sink = cases[i].hot == U ? 0 : 32;
            p.window = layouts[lay];
            rvl_kvcache *kc;
            if (rvl_kvcache_open(&kc, &p, 2) != 0)
                fail_msg("%s: %s", cases[i].name, rvl_errmsg());
            assert_int_equal(rvl_kvcache_window(kc, 0), W);
            assert_int_equal(rvl_kvcache_window(kc, 1), layouts[lay][1]);
            errs e = run_cache_w(kc, pool, 300, batches, 9, layouts[lay]);
            print_message("window %d on %-6s %-22s vs cache content %.2e, vs exact f32 %.2e\n", W,
                          lay ? "both" : "layer 0", cases[i].name, e.cache_err, e.exact_err);
            if (e.cache_err > 2e-5 || e.exact_err > cases[i].tol)
                fail_msg("%s: errors %.3g %.3g", cases[i].name, e.cache_err, e.exact_err);
            /* the ring: the windowed layer holds at most RING pages, the global one all */
            const uint32_t np = rvl_kvcache_n_pages(kc);
            assert_int_equal(np, 10);
            assert_int_equal(rvl_kvcache_first_page(kc, 0), np - RING);
            assert_int_equal(rvl_kvcache_first_page(kc, 1), lay ? np - RING : 0);
            rvl_kv_usage u;
            rvl_kvcache_usage(kc, 300, &u);
            assert_int_equal(u.bytes, held_bytes(kc));
            assert_int_equal(u.n_windowed, lay ? 2 : 1);
            assert_int_equal(u.n_global, lay ? 0 : 1);
            assert_int_equal(u.window, W);
            assert_true(u.bytes_untrimmed > u.bytes);
            rvl_kvcache_close(kc);
        }
    rvl_pool_close(pool);
}

/* Truncating a windowed cache (q8 keys and values, layer 0 windowed):
 * back by up to 66 positions after any batch stays valid (the ring's
 * slack) and attention goes on matching the reference; past what the
 * ring holds it is refused; prefix reuse keeps a match the ring still
 * serves, and nothing when it would need freed keys. */
static void test_kvcache_window_truncate_and_reuse(void **state)
{
    (void)state;
    static const uint32_t win[NL] = {W, 0};
    rvl_pool *pool;
    assert_int_equal(rvl_pool_open(&pool, 2), 0);
    rvl_kvcache_params p = geometry();
    set_fmt(&p, (int[]){F16, Q8, Q8}, (int[]){F16, Q8, Q8}, 0, U);
    p.window = win;
    rvl_kvcache *kc;
    assert_int_equal(rvl_kvcache_open(&kc, &p, 2), 0);
    int32_t ids[NCTX];
    for (int i = 0; i < NCTX; i++)
        ids[i] = i * 7 + 1;
    /* after every batch size, a truncate back by 66 is valid */
    for (int nb = 1; nb <= 32; nb += 31)
        for (uint32_t n0 = 100; n0 < 140; n0++) {
            rvl_kvcache_reset(kc);
            fill(kc, n0);
            rvl_kvcache_begin(kc, (uint32_t)nb);
            for (int l = 0; l < NL; l++)
                rvl_kvcache_write(kc, (uint32_t)l, n0, (uint32_t)nb, K[l][n0], KVD, V[l][n0], KVD);
            rvl_kvcache_commit(kc, (uint32_t)nb);
            if (rvl_kvcache_truncate(kc, n0 + (uint32_t)nb - 66) != 0)
                fail_msg("truncate %u -> %u: %s", n0 + nb, n0 + nb - 66, rvl_errmsg());
        }
    rvl_kvcache_reset(kc);
    for (uint32_t pos = 0; pos < 300; pos++) {
        rvl_kvcache_begin(kc, 1);
        for (int l = 0; l < NL; l++)
            rvl_kvcache_write(kc, (uint32_t)l, pos, 1, K[l][pos], KVD, V[l][pos], KVD);
        rvl_kvcache_set_ids(kc, pos, ids + pos, 1);
        rvl_kvcache_commit(kc, 1);
    }
    assert_true(rvl_kvcache_first_page(kc, 0) > 0);
    /* far back: the ring freed the keys position 150's window needs */
    assert_int_equal(rvl_kvcache_truncate(kc, 150), RVL_ERANGE);
    assert_non_null(strstr(rvl_errmsg(), "sliding window of 40"));
    assert_int_equal(rvl_kvcache_n(kc), 300);
    /* reuse: the same prompt again (kept but the last), then one that
     * leaves the ring's reach */
    assert_int_equal(rvl_kvcache_reuse(kc, ids, 299), 299);
    assert_int_equal(rvl_kvcache_n(kc), 299);
    int32_t other[NCTX];
    memcpy(other, ids, sizeof other);
    other[260] = -5;
    assert_int_equal(rvl_kvcache_reuse(kc, other, 290), 260);
    other[150] = -5;
    assert_int_equal(rvl_kvcache_reuse(kc, other, 290), 0);
    assert_int_equal(rvl_kvcache_n(kc), 0);
    /* and on from a truncate: attention still matches */
    static const int one[] = {1, 9};
    fill(kc, 200);
    assert_int_equal(rvl_kvcache_truncate(kc, 170), 0);
    errs e = run_cache_w(kc, pool, 260, one, 2, win);
    print_message("window after a truncate (q8): vs cache content %.2e, vs exact %.2e\n",
                  e.cache_err, e.exact_err);
    assert_true(e.cache_err < 2e-5);
    assert_true(e.exact_err < 3e-2);
    rvl_kvcache_close(kc);
    rvl_pool_close(pool);
}

/* The RoPE angle tables of a distance d (NORM layout, rope_dim HD) on base b */
static void angles(double b, int d, float *cs, float *sn)
{
    for (int i = 0; i < HD / 2; i++) {
        const double a = d * pow(b, -2.0 * i / HD);
        cs[i] = (float)cos(a);
        sn[i] = (float)sin(a);
    }
}

/* keys of layer l at position pos: K[l][pos] rotated by pos on base b */
static void rope_key(int l, int pos, double b, float *k)
{
    for (int h = 0; h < NKV; h++)
        for (int i = 0; i < HD / 2; i++) {
            const double a = pos * pow(b, -2.0 * i / HD);
            const float x0 = K[l][pos][h * HD + 2 * i], x1 = K[l][pos][h * HD + 2 * i + 1];
            k[h * HD + 2 * i] = (float)(x0 * cos(a) - x1 * sin(a));
            k[h * HD + 2 * i + 1] = (float)(x0 * sin(a) + x1 * cos(a));
        }
}

/* max |key the cache holds at i - K[l][src(i)] rotated by i on base b|,
 * over positions lo .. n - 1 (src: i before keep, i + drop after) */
static double shifted_key_err(rvl_kvcache *kc, int l, int lo, int n, int keep, int drop, double b)
{
    static float ck[NCTX * KVD], cv[NCTX * KVD];
    kvt_cache_rows(kc, (uint32_t)l, 0, (uint32_t)n, NKV, HD, ck);
    kvt_cache_rows(kc, (uint32_t)l, 1, (uint32_t)n, NKV, HD, cv);
    double mx = 0;
    for (int i = lo; i < n; i++) {
        const int src = i < keep ? i : i + drop;
        float k[KVD];
        rope_key(l, src, b, k);          /* rotated at src... */
        float want[KVD];
        for (int h = 0; h < NKV; h++)    /* ...and the same x at i */
            for (int j = 0; j < HD / 2; j++) {
                const double a = i * pow(b, -2.0 * j / HD);
                const float x0 = K[l][src][h * HD + 2 * j], x1 = K[l][src][h * HD + 2 * j + 1];
                want[h * HD + 2 * j] = (float)(x0 * cos(a) - x1 * sin(a));
                want[h * HD + 2 * j + 1] = (float)(x0 * sin(a) + x1 * cos(a));
            }
        (void)k;
        for (int e = 0; e < KVD; e++) {
            mx = fmax(mx, fabs(ck[(size_t)i * KVD + e] - want[e]));
            mx = fmax(mx, fabs(cv[(size_t)i * KVD + e] - V[l][src][e]));
        }
    }
    return mx;
}

/* Context shift of a windowed cache (Gemma's mix: layer 0 with a window of
 * W = 40 whose keys rotate on base 10000, layer 1 global on base 1e6):
 * after 300 positions (the ring holds 160 .. 299), keep 5 and drop 100.
 * The global layer holds every kept position, the windowed one its ring's
 * kept part (60 .. 199) in at most its 5 pages (64 .. 199), each key rotated as if written at its new
 * position on its own layer's base (rotating layer 0 by the global
 * angles is shown to be wrong), values moved; attention then goes on
 * matching the reference over what the cache holds, on f32, f16 and q8.
 * A shift that leaves the ring without keys its window needs (keep 20,
 * drop 250: the window of position 50 starts at 11, the ring kept 20 ..
 * 49) keeps whole pages (32 .. 49) and attention sees those. */
static void test_kvcache_shift_windowed(void **state)
{
    (void)state;
    static const uint32_t win[NL] = {W, 0};
    static const int batches[] = {1, 7, 32, 1};
    const double bw = 10000, bg = 1e6;
    static const struct {
        const char *name;
        int k[3], v[3];
        uint32_t hot;
        double tol;
    } cases[] = {{"f32", {F32, F32, F32}, {F32, F32, F32}, U, 1e-4},
                 {"f16", {F16, F16, F16}, {F16, F16, F16}, U, 3e-2},
                 {"q8", {F16, Q8, Q8}, {F16, Q8, Q8}, 0, 0.3}};
    rvl_pool *pool;
    assert_int_equal(rvl_pool_open(&pool, 2), 0);
    float cw[HD / 2], sw[HD / 2], cg[HD / 2], sg[HD / 2];
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int variant = 0; variant < 3; variant++) {
            /* 0: the right tables; 1: layer 0 rotated by the global angles;
             * 2: a shift that costs the ring keys */
            const int keep = variant == 2 ? 20 : 5, drop = variant == 2 ? 250 : 100;
            rvl_kvcache_params p = geometry();
            set_fmt(&p, cases[ci].k, cases[ci].v, cases[ci].hot, U);
            p.window = win;
            rvl_kvcache *kc;
            assert_int_equal(rvl_kvcache_open(&kc, &p, 2), 0);
            for (int pos = 0; pos < 300; pos++) {
                float k[NL][KVD];
                rope_key(0, pos, bw, k[0]);
                rope_key(1, pos, bg, k[1]);
                rvl_kvcache_begin(kc, 1);
                for (int l = 0; l < NL; l++)
                    rvl_kvcache_write(kc, (uint32_t)l, (uint32_t)pos, 1, k[l], KVD, V[l][pos], KVD);
                rvl_kvcache_commit(kc, 1);
            }
            assert_int_equal(rvl_kvcache_first_page(kc, 0), 5);
            angles(bw, drop, cw, sw);
            angles(bg, drop, cg, sg);
            assert_int_equal(rvl_kvcache_shift(kc, (uint32_t)keep, (uint32_t)drop, cg, sg,
                                               variant == 1 ? NULL : cw, variant == 1 ? NULL : sw,
                                               HD, false), 0);
            const int nn = 300 - drop;
            assert_int_equal(rvl_kvcache_n(kc), nn);
            assert_int_equal(rvl_kvcache_first_page(kc, 1), 0);
            const int lo0 = variant == 2 ? 32 : 64;
            assert_int_equal(rvl_kvcache_first_page(kc, 0), lo0 / 32);
            const double e0 = shifted_key_err(kc, 0, lo0, nn, keep, drop, bw);
            const double e1 = shifted_key_err(kc, 1, 0, nn, keep, drop, bg);
            print_message("%-4s keep %d drop %d%s: windowed layer %.2e, global layer %.2e\n",
                          cases[ci].name, keep, drop, variant == 1 ? " (global angles)" : "", e0, e1);
            assert_true(e1 < cases[ci].tol);
            if (variant == 1)
                assert_true(e0 > 1.0); /* the windowed layer needs its own angles */
            else
                assert_true(e0 < cases[ci].tol);
            /* decoding goes on: attention over what the cache holds */
            errs e = run_cache_w(kc, pool, nn + 60, batches, 4, win);
            print_message("     then attention vs cache content %.2e\n", e.cache_err);
            assert_true(e.cache_err < 2e-5);
            rvl_kvcache_close(kc);
        }
    rvl_pool_close(pool);
}

/* KV bytes of a Gemma-3-270M-like geometry (18 layers, 1 kv head of 256,
 * every 6th layer global, the others with a window of 512) at 8192
 * positions, through rvl_kvcache_usage: a windowed layer holds its ring
 * of ceil((512 + 32) / 32) + 2 = 19 pages, a global one all 256. */
static void test_kvcache_usage_gemma3_geometry(void **state)
{
    (void)state;
    enum { L = 18, N = 8192 };
    uint32_t win[L];
    for (int l = 0; l < L; l++)
        win[l] = (l + 1) % 6 ? 512 : 0;
    static const struct {
        const char *name;
        int k[3], v[3];
        uint32_t hot;
        double tok;          /* K + V bytes per position per layer */
    } cases[] = {
        {"f16", {F16, F16, F16}, {F16, F16, F16}, U, 1024},
        {"q8", {F16, Q8, Q8}, {F16, Q8, Q8}, 0, 2 * (256 + 16)},
        {"tq4", {F16, TQ4, TQ4}, {F16, TQ4, TQ4}, 0, 2 * (128 + 2)},
    };
    for (int i = 0; i < 3; i++) {
        rvl_kvcache_params p = {.n_layer = L, .n_head = 4, .n_head_kv = 1, .head_dim = 256,
                                .n_ctx = N, .scale = 1.0f / 16, .window = win,
                                .sink = cases[i].hot == U ? 0 : 32};
        set_fmt(&p, cases[i].k, cases[i].v, cases[i].hot, U);
        rvl_kvcache *kc;
        assert_int_equal(rvl_kvcache_open(&kc, &p, 1), 0);
        rvl_kv_usage u;
        rvl_kvcache_usage(kc, N, &u);
        assert_int_equal(u.n_global, 3);
        assert_int_equal(u.n_windowed, 15);
        /* a windowed layer: 19 pages, the partial-page rule aside all in the
         * steady format; a global one: 256 pages (quantized: the sink and
         * the page being filled are f16) */
        const double f16p = 32 * 1024.0, qp = 32 * cases[i].tok;
        const double want_w = cases[i].hot == U ? 19 * f16p : 19 * qp;
        const double want_g = cases[i].hot == U ? 256 * f16p : 255 * qp + f16p;
        print_message("%-4s at %d: global layer %.1f B/token, windowed %.1f B/token; all layers "
                      "%.1f B/token (%.2f MiB), untrimmed %.1f B/token (%.2f MiB)\n",
                      cases[i].name, N, u.global_layer_bytes / N, u.windowed_layer_bytes / N,
                      (double)u.bytes / N, u.bytes / 1048576.0, (double)u.bytes_untrimmed / N,
                      u.bytes_untrimmed / 1048576.0);
        assert_true(fabs(u.windowed_layer_bytes - want_w) < 1e-6);
        assert_true(fabs(u.global_layer_bytes - want_g) < 1e-6);
        assert_int_equal(u.bytes, (uint64_t)(3 * want_g + 15 * want_w));
        /* untrimmed: every layer as a global one */
        assert_int_equal(u.bytes_untrimmed, (uint64_t)(18 * want_g));
        rvl_kvcache_close(kc);
    }
}

/* ---- with a model: context shift, ctx-level options ---- */

#define LLAMA "tests/data/tiny/llama.gguf"

/* After a shift, the first layer's cache (the only one whose inputs do not
 * depend on the dropped tokens: deeper layers keep what they computed
 * with them in view, as in llama.cpp) equals that of a fresh context fed
 * the kept tokens at their new positions; and decoding goes on. */
static void test_context_shift_matches_fresh_context(void **state)
{
    (void)state;
    rvl_model *m = NULL;
    if (rvl_model_open(&m, LLAMA) < 0)
        fail_msg("%s: %s", LLAMA, rvl_errmsg());
    const rvl_hparams *hp = rvl_model_hparams(m);
    const uint32_t hd = hp->head_dim, nkv = hp->n_head_kv;
    int32_t seq[60], kept[60];
    for (int i = 0; i < 60; i++)
        seq[i] = (int32_t)((i * 53 + 7) % 250);
    const struct {
        rvl_kv_type t;
        double tol;   /* max |difference| / max |element| */
    } cases[] = {{RVL_KV_F32, 1e-5}, {RVL_KV_Q8, 5e-2}, {RVL_KV_TQ4, 0.3}};
    for (int ci = 0; ci < 3; ci++) {
        rvl_ctx_params cp = {.n_ctx = 64, .n_threads = 2, .kv_type = cases[ci].t};
        rvl_ctx *a, *b;
        assert_int_equal(rvl_ctx_open(&a, m, &cp), 0);
        assert_int_equal(rvl_ctx_open(&b, m, &cp), 0);
        const float *la, *lb;
        /* 50 tokens, then keep 4, drop 23: 27 left */
        assert_int_equal(rvl_decode(a, seq, 50, &la), 0);
        assert_int_equal(rvl_ctx_shift(a, 4, 47), RVL_ERANGE);
        assert_int_equal(rvl_ctx_pos(a), 50);
        assert_int_equal(rvl_ctx_shift(a, 4, 23), 0);
        assert_int_equal(rvl_ctx_pos(a), 27);
        int nk = 0;
        for (int i = 0; i < 50; i++)
            if (i < 4 || i >= 27)
                kept[nk++] = seq[i];
        assert_int_equal(rvl_decode(b, kept, (uint32_t)nk, &lb), 0);
        double mx = 0, ref = 0;
        float pa[32 * 1024], pb[32 * 1024];
        for (int kind = 0; kind < 2; kind++)
            for (uint32_t pg = 0; pg * 32 < (uint32_t)nk; pg++)
                for (uint32_t h = 0; h < nkv; h++) {
                    rvl_kvcache_read_page(rvl_ctx_kvc(a), 0, kind, pg, h, pa);
                    rvl_kvcache_read_page(rvl_ctx_kvc(b), 0, kind, pg, h, pb);
                    for (uint32_t j = 0; j < 32 && pg * 32 + j < (uint32_t)nk; j++)
                        for (uint32_t e = 0; e < hd; e++) {
                            mx = fmax(mx, fabs(pa[j * hd + e] - pb[j * hd + e]));
                            ref = fmax(ref, fabs(pb[j * hd + e]));
                        }
                }
        print_message("%s: layer 0 after the shift vs a fresh context: %.2e of max |element|\n",
                      rvl_kv_type_name(cases[ci].t), mx / ref);
        assert_true(mx / ref < cases[ci].tol);
        /* and it goes on */
        assert_int_equal(rvl_decode(a, seq + 50, 1, &la), 0);
        assert_int_equal(rvl_ctx_pos(a), 28);
        for (uint32_t i = 0; i < hp->n_vocab; i++)
            assert_true(isfinite(la[i]));
        rvl_ctx_close(a);
        rvl_ctx_close(b);
    }
    rvl_model_close(m);
}

/* The same on the tiny sliding-window models (tests/data/tiny/gemma2.gguf:
 * layer 0 windowed, 1 global; gemma3.gguf: layers 0-4 windowed on their
 * own RoPE base 10000, layer 5 global on 1e6 with linear scaling; window
 * 8), context 256 so that the rings (4 pages) free pages: 200 tokens,
 * keep 4, drop 100. Every layer's keys and values at the positions whose
 * inputs do not depend on the dropped tokens (the first 4, and those at
 * least 7 positions per windowed layer below past the cut: a windowed
 * layer passes on only its last 8 positions) equal a fresh context's fed
 * the kept tokens, to the tolerances above; so each layer was rotated on
 * its own base (gemma3's windowed layers rotated with the global angles
 * are off by O(1)). Then decoding goes on past the context twice more. */
static void test_context_shift_windowed_models(void **state)
{
    (void)state;
    const char *models[] = {"tests/data/tiny/gemma2.gguf", "tests/data/tiny/gemma3.gguf"};
    enum { NTOK = 200, KEEP = 4, DROP = 100, NK = NTOK - DROP };
    int32_t seq[NTOK + 300], kept[NK];
    for (int i = 0; i < NTOK + 300; i++)
        seq[i] = (int32_t)((i * 53 + 7) % 250);
    for (int i = 0, nk = 0; i < NTOK; i++)
        if (i < KEEP || i >= KEEP + DROP)
            kept[nk++] = seq[i];
    const struct {
        rvl_kv_type t;
        double tol;
    } cases[] = {{RVL_KV_F32, 1e-5}, {RVL_KV_F16, 2e-3}, {RVL_KV_Q8, 5e-2}, {RVL_KV_TQ4, 0.3}};
    for (int mi = 0; mi < 2; mi++) {
        rvl_model *m = NULL;
        if (rvl_model_open(&m, models[mi]) < 0)
            fail_msg("%s: %s", models[mi], rvl_errmsg());
        const rvl_hparams *hp = rvl_model_hparams(m);
        const uint32_t hd = hp->head_dim, nkv = hp->n_head_kv;
        for (int ci = 0; ci < 4; ci++) {
            rvl_ctx_params cp = {.n_ctx = 256, .n_threads = 2, .kv_type = cases[ci].t};
            rvl_ctx *a, *b;
            assert_int_equal(rvl_ctx_open(&a, m, &cp), 0);
            assert_int_equal(rvl_ctx_open(&b, m, &cp), 0);
            const float *la, *lb;
            assert_int_equal(rvl_decode(a, seq, NTOK, &la), 0);
            assert_true(rvl_kvcache_first_page(rvl_ctx_kvc(a), 0) > 0); /* the ring freed pages */
            assert_int_equal(rvl_ctx_shift(a, KEEP, DROP), 0);
            assert_int_equal(rvl_ctx_pos(a), NK);
            assert_int_equal(rvl_decode(b, kept, NK, &lb), 0);
            double worst = 0, worst_w = 0;
            uint32_t from = KEEP; /* positions from here on do not depend on the dropped ones */
            for (uint32_t l = 0; l < hp->n_layer && from < NK; l++) {
                const uint32_t w = rvl_kvcache_window(rvl_ctx_kvc(a), l);
                double mx = 0, ref = 0;
                float pa[32 * 256], pb[32 * 256];
                for (int kind = 0; kind < 2; kind++)
                    for (uint32_t pg = rvl_kvcache_first_page(rvl_ctx_kvc(a), l); pg * 32 < NK; pg++)
                        for (uint32_t h = 0; h < nkv; h++) {
                            rvl_kvcache_read_page(rvl_ctx_kvc(a), l, kind, pg, h, pa);
                            rvl_kvcache_read_page(rvl_ctx_kvc(b), l, kind, pg, h, pb);
                            for (uint32_t j = 0; j < 32 && pg * 32 + j < NK; j++) {
                                const uint32_t i = pg * 32 + j;
                                if (!(i >= from || (i < KEEP && !w)))
                                    continue;
                                for (uint32_t e = 0; e < hd; e++) {
                                    mx = fmax(mx, fabs(pa[j * hd + e] - pb[j * hd + e]));
                                    ref = fmax(ref, fabs(pb[j * hd + e]));
                                }
                            }
                        }
                worst = fmax(worst, mx / ref);
                if (w)
                    worst_w = fmax(worst_w, mx / ref);
                from = w ? from + w - 1 : NK; /* a global layer sees the dropped tokens' traces */
            }
            print_message("%s %s: after the shift vs a fresh context: %.2e of max |element| "
                          "(windowed layers %.2e)\n", models[mi] + 16, rvl_kv_type_name(cases[ci].t),
                          worst, worst_w);
            assert_true(worst_w > 0 || cases[ci].t == RVL_KV_F32); /* they were compared */
            assert_true(worst < cases[ci].tol);
            /* and it goes on, shifting again as the context fills */
            uint32_t next = NTOK;
            for (int k = 0; k < 2; k++) {
                const uint32_t room = 256 - rvl_ctx_pos(a);
                assert_int_equal(rvl_decode(a, seq + next, room, &la), 0);
                next += room;
                assert_int_equal(rvl_ctx_shift(a, KEEP, 128), 0);
            }
            assert_int_equal(rvl_decode(a, seq + next, 1, &la), 0);
            for (uint32_t i = 0; i < hp->n_vocab; i++)
                assert_true(isfinite(la[i]));
            rvl_ctx_close(a);
            rvl_ctx_close(b);
        }
        rvl_model_close(m);
    }
}

/* Prefix reuse through the library, as chat does it: feed A + B, reset
 * (a /clear), then A + C: A's two full pages come back from the LRU of
 * dropped pages (no recomputation) and C's logits equal a fresh context's
 * that decoded A then C (f32 cache: the same bytes, so exactly equal).
 * Then the live path: A + C + D reuses A + C by page hash and tokens. */
static void test_prefix_reuse_after_reset_matches_fresh(void **state)
{
    (void)state;
    rvl_model *m = NULL;
    if (rvl_model_open(&m, LLAMA) < 0)
        fail_msg("%s: %s", LLAMA, rvl_errmsg());
    const uint32_t nv = rvl_model_hparams(m)->n_vocab;
    enum { NA = 64, NB = 20, NC = 10, ND = 5 };
    int32_t a_b[NA + NB], a_c_d[NA + NC + ND];
    for (int i = 0; i < NA + NB; i++)
        a_b[i] = (int32_t)((i * 53 + 7) % 250 % nv);
    memcpy(a_c_d, a_b, NA * sizeof *a_b);
    for (int i = NA; i < NA + NC + ND; i++)
        a_c_d[i] = (int32_t)((i * 31 + 3) % 240 % nv);
    rvl_ctx_params cp = {.n_ctx = 512, .n_threads = 2, .kv_type = RVL_KV_F32};
    rvl_ctx *x, *y;
    assert_int_equal(rvl_ctx_open(&x, m, &cp), 0);
    assert_int_equal(rvl_ctx_open(&y, m, &cp), 0);
    const float *lx, *ly;
    assert_int_equal(rvl_decode(x, a_b, NA, &lx), 0);
    assert_int_equal(rvl_decode(x, a_b + NA, NB, &lx), 0);
    assert_true(rvl_kvcache_page_hash(rvl_ctx_kvc(x), 1) != 0);
    assert_int_equal(rvl_kvcache_page_hash(rvl_ctx_kvc(x), 2), 0); /* partial: no hash */
    rvl_ctx_reset(x);
    assert_int_equal(rvl_ctx_pos(x), 0);
    assert_int_equal(rvl_ctx_reuse(x, a_c_d, NA + NC), NA);   /* both pages of A */
    assert_int_equal(rvl_ctx_pos(x), NA);
    assert_int_equal(rvl_decode(x, a_c_d + NA, NC, &lx), 0);
    assert_int_equal(rvl_decode(y, a_c_d, NA, &ly), 0);
    assert_int_equal(rvl_decode(y, a_c_d + NA, NC, &ly), 0);
    const uint32_t nvo = rvl_model_hparams(m)->n_vocab;
    double mx = 0;
    for (uint32_t i = 0; i < nvo; i++)
        mx = fmax(mx, fabs((double)lx[i] - ly[i]));
    print_message("logits after reusing A vs a fresh context: %.3g\n", mx);
    assert_true(mx <= 1e-6);
    /* live: A + C by hash and tokens, at most n - 1 */
    assert_int_equal(rvl_ctx_reuse(x, a_c_d, NA + NC + ND), NA + NC);
    assert_int_equal(rvl_ctx_reuse(x, a_c_d, NA + NC), NA + NC - 1);
    /* a different first page: nothing */
    int32_t other[40];
    for (int i = 0; i < 40; i++)
        other[i] = (int32_t)((i * 17 + 1) % 200 % nv);
    assert_int_equal(rvl_ctx_reuse(x, other, 40), 0);
    /* and A again after that: from the LRU */
    assert_int_equal(rvl_ctx_reuse(x, a_c_d, NA + 1), NA);
    rvl_ctx_close(x);
    rvl_ctx_close(y);
    /* a tiered cache (hot 16, warm 32): A's pages come back in the tiers
     * they left in (the sink in f16, page 1 in q8), so C's logits are
     * close to a fresh context's, not equal (2048 positions: the LRU,
     * an eighth of the cache's bytes, has room for both pages) */
    cp = (rvl_ctx_params){.n_ctx = 2048, .n_threads = 2, .kv_type = RVL_KV_TIERED, .kv_hot = 16,
                          .kv_warm = 32};
    assert_int_equal(rvl_ctx_open(&x, m, &cp), 0);
    assert_int_equal(rvl_ctx_open(&y, m, &cp), 0);
    assert_int_equal(rvl_decode(x, a_b, NA + NB, &lx), 0);
    assert_int_equal(rvl_kvcache_page_tier(rvl_ctx_kvc(x), 0, 1), 1);
    assert_int_equal(rvl_ctx_truncate(x, 10), 0);
    assert_int_equal(rvl_ctx_reuse(x, a_c_d, NA + NC), NA);
    assert_int_equal(rvl_kvcache_page_tier(rvl_ctx_kvc(x), 0, 0), 0);
    assert_int_equal(rvl_kvcache_page_tier(rvl_ctx_kvc(x), 0, 1), 1);
    assert_int_equal(rvl_decode(x, a_c_d + NA, NC, &lx), 0);
    assert_int_equal(rvl_decode(y, a_c_d, NA + NC, &ly), 0);
    double mt = 0, ref = 0;
    for (uint32_t i = 0; i < nvo; i++) {
        mt = fmax(mt, fabs((double)lx[i] - ly[i]));
        ref = fmax(ref, fabs((double)ly[i]));
    }
    print_message("tiered: logits after reusing A vs a fresh context: %.3g of %.3g\n", mt, ref);
    assert_true(mt <= 0.05 * ref);
    rvl_ctx_close(x);
    rvl_ctx_close(y);
    rvl_model_close(m);
}

static void test_ctx_open_checks_kv_options(void **state)
{
    (void)state;
    rvl_model *m = NULL;
    if (rvl_model_open(&m, LLAMA) < 0)
        fail_msg("%s: %s", LLAMA, rvl_errmsg());
    rvl_ctx *c = NULL;
    rvl_ctx_params cp = {.n_ctx = 64, .n_threads = 1, .kv_type = RVL_KV_TIERED, .kv_cold = RVL_KV_Q8};
    assert_int_equal(rvl_ctx_open(&c, m, &cp), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "cold KV tier is q4 or tq4"));
    cp = (rvl_ctx_params){.n_ctx = 64, .n_threads = 1, .kv_split = true,
                          .kv_type_k = RVL_KV_TQ3, .kv_type_v = (rvl_kv_type)9};
    assert_int_equal(rvl_ctx_open(&c, m, &cp), RVL_EINVAL);
    /* tiered keys and q4 values: tier 0 f16, then q8/q4, then tq4/q4 */
    cp = (rvl_ctx_params){.n_ctx = 64, .n_threads = 1, .kv_split = true,
                          .kv_type_k = RVL_KV_TIERED, .kv_type_v = RVL_KV_Q4};
    assert_int_equal(rvl_ctx_open(&c, m, &cp), 0);
    const rvl_hparams *hp = rvl_model_hparams(m);
    const double per = (double)hp->n_layer * hp->n_head_kv;
    const int hd = (int)hp->head_dim;
    assert_true(fabs(rvl_ctx_kv_token_bytes(c, 0) - per * 4 * hd) < 1e-9);
    assert_true(fabs(rvl_ctx_kv_token_bytes(c, 2) - per * (rvl_kvq_token_bytes(RVL_KVQ_TQ4, 0, hd) +
                                                            rvl_kvq_token_bytes(RVL_KVQ_Q4, 1, hd))) < 1e-9);
    rvl_ctx_close(c);
    rvl_model_close(m);
}

int main(void)
{
    make_data();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvcache_attention_matches_reference_for_every_format),
        cmocka_unit_test(test_kvcache_pages_age_through_tiers),
        cmocka_unit_test(test_kvcache_truncate_into_quantized_page_decodes_it),
        cmocka_unit_test(test_kvcache_shift_rotates_kept_keys),
        cmocka_unit_test(test_kvcache_refuses_bad_formats),
        cmocka_unit_test(test_kvcache_sink_page_stays_f16),
        cmocka_unit_test(test_kvcache_centres_quantized_keys),
        cmocka_unit_test(test_kvcache_sliding_windows_on_every_format),
        cmocka_unit_test(test_kvcache_window_truncate_and_reuse),
        cmocka_unit_test(test_kvcache_shift_windowed),
        cmocka_unit_test(test_kvcache_usage_gemma3_geometry),
        cmocka_unit_test(test_context_shift_matches_fresh_context),
        cmocka_unit_test(test_context_shift_windowed_models),
        cmocka_unit_test(test_ctx_open_checks_kv_options),
        cmocka_unit_test(test_prefix_reuse_after_reset_matches_fresh),
    };
    return cmocka_run_group_tests_name("paged KV cache", tests, NULL, NULL);
}
