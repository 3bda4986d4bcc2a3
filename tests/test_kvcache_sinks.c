/*
 * test_kvcache_sinks.c - attention-sink logits (gpt-oss; kvcache.h
 * rvl_kvcache_params.sinks) through every attention path of the cache:
 * decode over tier-0 pages (split-K reduce), prompt batches over tier-0
 * pages (the flash prefill kernels), and the mixed quantized / tier-0
 * path, on every KV format, with and without a sliding window (gpt-oss
 * alternates 128-token windows with global layers). The reference is a
 * double-precision softmax with the sink as one more column that has no
 * value,
 *     out_h = sum_t e^(s_t - M) v_t / (e^(sink_h - M) + sum_t e^(s_t - M)),
 * over the rows the cache holds (decoded), the logit used as given.
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
#define NH 8
#define NKV 2
#define HD 64
#define NCTX 320
#define KVD (NKV * HD)
#define QD (NH * HD)
#define U RVL_KVC_UNBOUNDED
enum { F16 = RVL_KVQ_F16, Q8 = RVL_KVQ_Q8, Q4 = RVL_KVQ_Q4, TQ4 = RVL_KVQ_TQ4, TQ3 = RVL_KVQ_TQ3,
       F32 = RVL_KVF_F32 };

static uint64_t rng = 0xabcdef12;

static double gauss(void) { return kvt_gauss(&rng); }


static float K[NL][NCTX][KVD], V[NL][NCTX][KVD], Q[NCTX][QD];
/* (layer, head): head 0 none (-inf), head 1 dominating, the others around
 * the scores' size (2 * scale * q.k is about N(0, 2)) */
static float SINK[NL * NH];

static void make_data(void)
{
    for (int l = 0; l < NL; l++)
        for (int p = 0; p < NCTX; p++)
            for (int i = 0; i < KVD; i++) {
                K[l][p][i] = (float)(gauss() + (i % HD == 5 ? 2 : 0));
                V[l][p][i] = (float)gauss();
            }
    for (int p = 0; p < NCTX; p++)
        for (int i = 0; i < QD; i++)
            Q[p][i] = (float)(2 * gauss());
    for (int i = 0; i < NL * NH; i++)
        SINK[i] = i % NH == 0 ? -INFINITY : i % NH == 1 ? 12.0f : (float)(1.5 * gauss() + 1);
}



/* Feeds positions 0 .. n - 1 in batches of the sizes given (cycled) and
 * returns the largest |out - ref| / max |v| over every query, head and
 * layer; win[l]: layer l's window (0: none). */
static double run(rvl_kvcache *kc, rvl_pool *pool, int n, const int *batches, int nbatches,
                  const uint32_t *win)
{
    static float out[32][QD], ck[NCTX * KVD], cv[NCTX * KVD];
    double err = 0;
    int pos = 0, bi = 0;
    while (pos < n) {
        int nb = batches[bi++ % nbatches];
        nb = nb > n - pos ? n - pos : nb;
        rvl_kvcache_begin(kc, (uint32_t)nb);
        for (int l = 0; l < NL; l++)
            rvl_kvcache_write(kc, (uint32_t)l, (uint32_t)pos, (uint32_t)nb, K[l][pos], KVD,
                              V[l][pos], KVD);
        for (int l = 0; l < NL; l++) {
            rvl_kvcache_attend(kc, pool, (uint32_t)l, Q[pos], QD, (uint32_t)pos, (uint32_t)nb,
                               out[0], QD);
            kvt_cache_rows(kc, (uint32_t)l, 0, (uint32_t)(pos + nb), NKV, HD, ck);
            kvt_cache_rows(kc, (uint32_t)l, 1, (uint32_t)(pos + nb), NKV, HD, cv);
            for (int t = 0; t < nb; t++)
                for (int h = 0; h < NH; h++) {
                    const int kh = h / (NH / NKV), qp = pos + t, w = (int)win[l];
                    const int lo = w && qp + 1 > w ? qp + 1 - w : 0;
                    double r[HD];
                    kvt_ref_attn(Q[qp] + h * HD, ck + (size_t)lo * KVD + kh * HD,
                                 cv + (size_t)lo * KVD + kh * HD, KVD, qp + 1 - lo, HD, 1.0 / 8,
                                 SINK[l * NH + h], r);
                    for (int e = 0; e < HD; e++)
                        err = fmax(err, fabs(out[t][h * HD + e] - r[e]));
                }
        }
        rvl_kvcache_commit(kc, (uint32_t)nb);
        pos += nb;
    }
    return err / 5.0; /* |v| of N(0, 1) data is below ~5 */
}

static void test_sinks_on_every_format_decode_and_prompt_windowed_or_not(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int k[3], v[3];
        uint32_t hot, warm;
    } cases[] = {
        {"f32", {F32, F32, F32}, {F32, F32, F32}, U, U},
        {"f16", {F16, F16, F16}, {F16, F16, F16}, U, U},
        {"q8", {F16, Q8, Q8}, {F16, Q8, Q8}, 0, U},
        {"q4", {F16, Q4, Q4}, {F16, Q4, Q4}, 0, U},
        {"tq4", {F16, TQ4, TQ4}, {F16, TQ4, TQ4}, 0, U},
        {"tq3", {F16, TQ3, TQ3}, {F16, TQ3, TQ3}, 0, U},
        {"tiered 32/64/tq4", {F16, Q8, TQ4}, {F16, Q8, TQ4}, 32, 64},
        {"tiered 32/64/q4", {F16, Q8, Q4}, {F16, Q8, Q4}, 32, 64},
    };
    static const uint32_t none[NL] = {0, 0}, windowed[NL] = {40, 0}; /* layer 0: a window */
    static const int prompt[] = {32, 7, 19, 32, 1, 25}, decode[] = {1};
    make_data();
    rvl_pool *pool = NULL;
    assert_int_equal(rvl_pool_open(&pool, 2), 0);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int w = 0; w < 2; w++)
            for (int b = 0; b < 2; b++) {
                rvl_kvcache_params p = {.n_layer = NL, .n_head = NH, .n_head_kv = NKV,
                                        .head_dim = HD, .n_ctx = NCTX, .scale = 1.0f / 8.0f,
                                        .hot = cases[i].hot, .warm = cases[i].warm,
                                        .sink = cases[i].hot == U ? 0 : 32,
                                        .window = w ? windowed : NULL, .sinks = SINK};
                memcpy(p.fmt_k, cases[i].k, sizeof p.fmt_k);
                memcpy(p.fmt_v, cases[i].v, sizeof p.fmt_v);
                rvl_kvcache *kc = NULL;
                assert_int_equal(rvl_kvcache_open(&kc, &p, 2), 0);
                const int n = b ? 150 : 240;
                const double e = run(kc, pool, n, b ? decode : prompt, b ? 1 : 6,
                                     w ? windowed : none);
                if (!(e < 2e-5))
                    fail_msg("%s, %s, %s: error / max|v| %g", cases[i].name,
                             w ? "window 40 on layer 0" : "no window", b ? "decode" : "prompt", e);
                if (cases[i].hot != U)
                    assert_null(rvl_kvcache_key_center(kc)); /* not with sinks */
                rvl_kvcache_close(kc);
            }
    rvl_pool_close(pool);
}

static void test_sink_logits_are_copied_at_open_and_checked(void **state)
{
    (void)state;
    float sinks[NL * NH];
    for (int i = 0; i < NL * NH; i++)
        sinks[i] = 30.0f; /* every head's weight goes to the sink: outputs near 0 */
    rvl_kvcache_params p = {.n_layer = NL, .n_head = NH, .n_head_kv = NKV, .head_dim = HD,
                            .n_ctx = NCTX, .scale = 1.0f / 8.0f, .hot = U, .warm = U,
                            .fmt_k = {F32, F32, F32}, .fmt_v = {F32, F32, F32}, .sinks = sinks};
    rvl_kvcache *kc = NULL;
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), 0);
    sinks[0] = NAN; /* the caller's array may go */
    make_data();
    static float out[QD];
    rvl_kvcache_begin(kc, 1);
    for (uint32_t l = 0; l < NL; l++)
        rvl_kvcache_write(kc, l, 0, 1, K[l][0], KVD, V[l][0], KVD);
    rvl_kvcache_attend(kc, NULL, 0, Q[0], QD, 0, 1, out, QD);
    for (int i = 0; i < QD; i++)
        assert_true(fabsf(out[i]) < 1e-6f);
    rvl_kvcache_close(kc);
    p.sinks = sinks;
    kc = (rvl_kvcache *)1;
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), RVL_EINVAL);
    assert_null(kc);
    assert_non_null(strstr(rvl_errmsg(), "attention-sink logit"));
    sinks[0] = INFINITY;
    assert_int_equal(rvl_kvcache_open(&kc, &p, 1), RVL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sinks_on_every_format_decode_and_prompt_windowed_or_not),
        cmocka_unit_test(test_sink_logits_are_copied_at_open_and_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
