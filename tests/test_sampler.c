/*
 * test_sampler.c - choosing the next token (lib/engine/sampler.c).
 *
 * Greedy and truncation are checked exactly; the random draw is checked
 * statistically against the softmax with a chi-square statistic. Seeds
 * are fixed, so every run draws the same numbers and the statistical
 * tests are deterministic: the thresholds are the chi-square quantiles
 * for p = 1e-5, far from what a correct sampler gives, far below what a
 * wrong distribution (e.g. a missing temperature) gives.
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

#include "ruvllm.h"

/* ======================================================================
 * Helpers
 * ====================================================================== */

/* Parameters with every stage off: plain softmax at temperature 1. */
static rvl_sampler_params plain(uint64_t seed)
{
    rvl_sampler_params p;
    rvl_sampler_defaults(&p);
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.freq_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    p.repeat_last_n = 64;
    p.seed = seed;
    return p;
}

static rvl_sampler_params greedy(void)
{
    rvl_sampler_params p = plain(0);
    p.temp = 0.0f;
    return p;
}

static rvl_sampler *open_s(const rvl_sampler_params *p, uint32_t n_vocab)
{
    rvl_sampler *s = NULL;
    int rc = rvl_sampler_open(&s, p, n_vocab);
    if (rc < 0)
        fail_msg("rvl_sampler_open: %d %s", rc, rvl_errmsg());
    assert_non_null(s);
    return s;
}

/* Draw `n` tokens into counts[n_vocab]. */
static void draw(rvl_sampler *s, const float *logits, uint32_t n_vocab, int n, int *counts)
{
    memset(counts, 0, n_vocab * sizeof *counts);
    for (int i = 0; i < n; i++) {
        int32_t id = rvl_sampler_sample(s, logits);
        assert_true(id >= 0 && (uint32_t)id < n_vocab);
        counts[id]++;
    }
}

/* Chi-square statistic of counts against the distribution softmax(w/temp)
 * restricted to `keep` (NULL: all); tokens outside must never be drawn. */
static double chi2(const int *counts, const float *logits, uint32_t nv, double temp,
                   const bool *keep, int n, int *df)
{
    double mx = -INFINITY, z = 0, x2 = 0;
    for (uint32_t i = 0; i < nv; i++)
        if (!keep || keep[i])
            mx = fmax(mx, logits[i]);
    for (uint32_t i = 0; i < nv; i++)
        if (!keep || keep[i])
            z += exp((logits[i] - mx) / temp);
    *df = -1;
    for (uint32_t i = 0; i < nv; i++) {
        if (keep && !keep[i]) {
            if (counts[i])
                fail_msg("token %u was drawn %d times but should be excluded", i, counts[i]);
            continue;
        }
        double e = n * exp((logits[i] - mx) / temp) / z;
        x2 += (counts[i] - e) * (counts[i] - e) / e;
        (*df)++;
    }
    return x2;
}

/* chi-square quantiles for p = 1e-5 (upper tail), by degrees of freedom */
static double chi2_limit(int df)
{
    static const double q[] = {0, 19.51, 23.03, 25.90, 28.47, 30.86, 33.11, 35.26, 37.33};
    assert_true(df >= 1 && df <= 8);
    return q[df];
}

/* ======================================================================
 * Greedy
 * ====================================================================== */

static void test_sampler_greedy_picks_argmax(void **state)
{
    (void)state;
    rvl_sampler_params p = greedy();
    rvl_sampler *s = open_s(&p, 6);
    const float a[6] = {0.1f, -3, 2.5f, 2.4f, -INFINITY, 0};
    assert_int_equal(rvl_sampler_sample(s, a), 2);
    const float b[6] = {-5, -4, -3, -2, -1, -0.5f};
    assert_int_equal(rvl_sampler_sample(s, b), 5);
    const float c[6] = {7, 1, 1, 1, 1, 1};
    assert_int_equal(rvl_sampler_sample(s, c), 0);
    rvl_sampler_close(s);
}

static void test_sampler_greedy_ties_go_to_lowest_id(void **state)
{
    (void)state;
    rvl_sampler_params p = greedy();
    rvl_sampler *s = open_s(&p, 5);
    const float a[5] = {1, 3, 2, 3, 3};
    assert_int_equal(rvl_sampler_sample(s, a), 1);
    const float b[5] = {0, 0, 0, 0, 0};
    assert_int_equal(rvl_sampler_sample(s, b), 0);
    rvl_sampler_close(s);
}

static void test_sampler_negative_temperature_is_greedy(void **state)
{
    (void)state;
    /* ruvllm.h: "temp <= 0 is greedy" (as llama.cpp) */
    rvl_sampler_params p = plain(1);
    p.temp = -1.0f;
    rvl_sampler *s = NULL;
    int rc = rvl_sampler_open(&s, &p, 4);
    if (rc < 0)
        fail_msg("temp -1 refused (%s); ruvllm.h says temp <= 0 is greedy", rvl_errmsg());
    const float a[4] = {0, 1.5f, 1.4f, 1.5f};
    for (int i = 0; i < 100; i++)
        assert_int_equal(rvl_sampler_sample(s, a), 1);
    rvl_sampler_close(s);
}

static void test_sampler_top_k_1_equals_greedy(void **state)
{
    (void)state;
    enum { NV = 1000 };
    float *l = malloc(NV * sizeof *l);
    assert_non_null(l);
    rvl_sampler_params pg = greedy(), pk = plain(42);
    pk.top_k = 1;
    pk.temp = 5.0f;
    rvl_sampler *g = open_s(&pg, NV), *k = open_s(&pk, NV);
    uint64_t st = 7;
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < NV; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            l[i] = (float)((st >> 40) % 1000) / 100.0f; /* many ties */
        }
        int32_t want = rvl_sampler_sample(g, l);
        assert_int_equal(rvl_sampler_sample(k, l), want);
    }
    rvl_sampler_close(g);
    rvl_sampler_close(k);
    free(l);
}

/* ======================================================================
 * Reproducibility
 * ====================================================================== */

static void test_sampler_fixed_seed_reproduces_a_sequence(void **state)
{
    (void)state;
    enum { NV = 50, N = 500 };
    float l[NV];
    int32_t a[N], b[N], c[N];
    for (int i = 0; i < NV; i++)
        l[i] = (float)((i * 37) % 11) / 4.0f;
    rvl_sampler_params p;
    rvl_sampler_defaults(&p);
    p.seed = 1234;
    p.top_k = 0; /* all 50 in play */
    p.min_p = 0;
    p.top_p = 1;
    rvl_sampler *s1 = open_s(&p, NV), *s2 = open_s(&p, NV);
    for (int i = 0; i < N; i++) {
        a[i] = rvl_sampler_sample(s1, l);
        b[i] = rvl_sampler_sample(s2, l);
    }
    assert_memory_equal(a, b, sizeof a);
    /* reset rewinds the generator */
    rvl_sampler_reset(s1);
    for (int i = 0; i < N; i++)
        c[i] = rvl_sampler_sample(s1, l);
    assert_memory_equal(a, c, sizeof a);
    rvl_sampler_close(s1);
    rvl_sampler_close(s2);
}

static void test_sampler_different_seeds_differ(void **state)
{
    (void)state;
    enum { NV = 16, N = 64 };
    float l[NV] = {0};
    int32_t a[N], b[N];
    rvl_sampler_params p1 = plain(1), p2 = plain(2);
    rvl_sampler *s1 = open_s(&p1, NV), *s2 = open_s(&p2, NV);
    for (int i = 0; i < N; i++) {
        a[i] = rvl_sampler_sample(s1, l);
        b[i] = rvl_sampler_sample(s2, l);
    }
    int same = 0;
    for (int i = 0; i < N; i++)
        same += a[i] == b[i];
    /* uniform over 16: about 4 of 64 agree by chance */
    assert_true(same < 20);
    /* and a sequence is not constant */
    int distinct = 0;
    for (int v = 0; v < NV; v++)
        for (int i = 0; i < N; i++)
            if (a[i] == v) {
                distinct++;
                break;
            }
    assert_true(distinct >= 10);
    rvl_sampler_close(s1);
    rvl_sampler_close(s2);
}

/* ======================================================================
 * The distribution
 * ====================================================================== */

static void test_sampler_frequencies_match_softmax(void **state)
{
    (void)state;
    enum { NV = 6, N = 60000 };
    const float l[NV] = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f};
    int counts[NV], df;
    rvl_sampler_params p = plain(99);
    rvl_sampler *s = open_s(&p, NV);
    draw(s, l, NV, N, counts);
    double x2 = chi2(counts, l, NV, 1.0, NULL, N, &df);
    print_message("temp 1: chi2 %.2f (df %d, limit %.2f)\n", x2, df, chi2_limit(df));
    assert_true(x2 < chi2_limit(df));
    /* a temperature of 0.5 would be rejected */
    assert_true(chi2(counts, l, NV, 0.5, NULL, N, &df) > 1000);
    rvl_sampler_close(s);
}

static void test_sampler_temperature_sharpens_and_flattens(void **state)
{
    (void)state;
    enum { NV = 5, N = 50000 };
    const float l[NV] = {0.3f, -0.2f, 0.9f, 0.0f, -0.7f};
    const float temps[] = {0.5f, 2.0f};
    int counts[NV], df;
    for (size_t t = 0; t < 2; t++) {
        rvl_sampler_params p = plain(5 + t);
        p.temp = temps[t];
        rvl_sampler *s = open_s(&p, NV);
        draw(s, l, NV, N, counts);
        double x2 = chi2(counts, l, NV, temps[t], NULL, N, &df);
        print_message("temp %.1f: chi2 %.2f (df %d)\n", (double)temps[t], x2, df);
        assert_true(x2 < chi2_limit(df));
        assert_true(chi2(counts, l, NV, 1.0, NULL, N, &df) > 200);
        rvl_sampler_close(s);
    }
}

static void test_sampler_top_k_keeps_the_k_best(void **state)
{
    (void)state;
    enum { NV = 8, N = 40000 };
    const float l[NV] = {0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 0.9f, -2.0f, 0.2f};
    const bool keep[NV] = {false, true, false, false, true, true, false, false};
    int counts[NV], df;
    rvl_sampler_params p = plain(11);
    p.top_k = 3;
    rvl_sampler *s = open_s(&p, NV);
    draw(s, l, NV, N, counts);
    double x2 = chi2(counts, l, NV, 1.0, keep, N, &df);
    assert_true(x2 < chi2_limit(df));
    rvl_sampler_close(s);

    /* top_k larger than the vocabulary, or <= 0: off */
    const int32_t ks[] = {NV, NV + 100, 0, -3};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        p = plain(12 + i);
        p.top_k = ks[i];
        s = open_s(&p, NV);
        draw(s, l, NV, N, counts);
        x2 = chi2(counts, l, NV, 1.0, NULL, N, &df);
        assert_true(x2 < chi2_limit(df));
        rvl_sampler_close(s);
    }
}

/* The heap that selects the top k from a large vocabulary, ties broken
 * towards the lower id. */
static void test_sampler_top_k_on_a_large_vocabulary(void **state)
{
    (void)state;
    enum { NV = 50000, K = 40, N = 4000 };
    float *l = malloc(NV * sizeof *l);
    int *counts = malloc(NV * sizeof *counts);
    bool *keep = calloc(NV, sizeof *keep);
    assert_non_null(l);
    assert_non_null(counts);
    assert_non_null(keep);
    /* logits -1..-100 everywhere, 0..3.9 on 40 scattered ids */
    for (int i = 0; i < NV; i++)
        l[i] = -1.0f - (float)(i % 100);
    for (int j = 0; j < K; j++) {
        int id = (j * 7919 + 13) % NV;
        l[id] = (float)j / 10.0f;
        keep[id] = true;
    }
    rvl_sampler_params p = plain(21);
    p.top_k = K;
    p.temp = 3.0f; /* flatten so that every kept id is drawn */
    rvl_sampler *s = open_s(&p, NV);
    draw(s, l, NV, N, counts);
    for (int i = 0; i < NV; i++)
        if (!keep[i] && counts[i])
            fail_msg("id %d (logit %g) is outside the top %d but was drawn", i, (double)l[i], K);
    rvl_sampler_close(s);

    /* all equal: the k lowest ids */
    for (int i = 0; i < NV; i++)
        l[i] = 0.5f;
    p.top_k = 5;
    s = open_s(&p, NV);
    draw(s, l, NV, N, counts);
    for (int i = 0; i < NV; i++)
        if (i >= 5 && counts[i])
            fail_msg("tie-break: id %d drawn with top_k 5 over equal logits", i);
    for (int i = 0; i < 5; i++)
        assert_true(counts[i] > N / 5 / 2);
    rvl_sampler_close(s);
    free(l);
    free(counts);
    free(keep);
}

static void test_sampler_top_p_keeps_the_smallest_sufficient_set(void **state)
{
    (void)state;
    enum { NV = 5, N = 20000 };
    /* probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 */
    const float l[NV] = {logf(0.125f), logf(0.5f), logf(0.0625f), logf(0.25f), logf(0.0625f)};
    int counts[NV], df;

    /* 0.7: {1 (0.5), 3 (0.25)} reach 0.75 */
    const bool keep2[NV] = {false, true, false, true, false};
    rvl_sampler_params p = plain(31);
    p.top_p = 0.7f;
    rvl_sampler *s = open_s(&p, NV);
    draw(s, l, NV, N, counts);
    assert_true(chi2(counts, l, NV, 1.0, keep2, N, &df) < chi2_limit(df));
    rvl_sampler_close(s);

    /* 0.4: the best alone */
    p.top_p = 0.4f;
    s = open_s(&p, NV);
    draw(s, l, NV, N, counts);
    assert_int_equal(counts[1], N);
    rvl_sampler_close(s);

    /* 0.8: three tokens (0.875) */
    const bool keep3[NV] = {true, true, false, true, false};
    p.top_p = 0.8f;
    s = open_s(&p, NV);
    draw(s, l, NV, N, counts);
    assert_true(chi2(counts, l, NV, 1.0, keep3, N, &df) < chi2_limit(df));
    rvl_sampler_close(s);

    /* top-p looks at the distribution before temperature (llama.cpp's
     * order): a high temperature does not let more tokens in */
    p.top_p = 0.7f;
    p.temp = 10.0f;
    s = open_s(&p, NV);
    draw(s, l, NV, N, counts);
    assert_int_equal(counts[0] + counts[2] + counts[4], 0);
    rvl_sampler_close(s);
}

static void test_sampler_min_p_excludes_unlikely_tokens(void **state)
{
    (void)state;
    enum { NV = 6, N = 10000 };
    /* relative to the best: 1, 0.5, 0.2, 0.09, 0.05, 0.001 */
    const float l[NV] = {0, logf(0.5f), logf(0.2f), logf(0.09f), logf(0.05f), logf(0.001f)};
    int counts[NV], df;
    rvl_sampler_params p = plain(41);
    p.min_p = 0.1f;
    p.temp = 3.0f; /* flat after truncation: excluded ones would show */
    rvl_sampler *s = open_s(&p, NV);
    draw(s, l, NV, N, counts);
    const bool keep[NV] = {true, true, true, false, false, false};
    /* 10k draws and never a token under the threshold */
    assert_int_equal(counts[3] + counts[4] + counts[5], 0);
    assert_true(chi2(counts, l, NV, 3.0, keep, N, &df) < chi2_limit(df));
    rvl_sampler_close(s);

    /* min_p 1: only the best (and its equals) */
    p.min_p = 1.0f;
    s = open_s(&p, NV);
    draw(s, l, NV, N, counts);
    assert_int_equal(counts[0], N);
    rvl_sampler_close(s);
}

static void test_sampler_chain_of_top_k_top_p_min_p(void **state)
{
    (void)state;
    enum { NV = 10, N = 20000 };
    const float l[NV] = {3.0f, 2.9f, 2.8f, 2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 2.95f, 2.85f};
    int counts[NV];
    rvl_sampler_params p;
    rvl_sampler_defaults(&p);
    p.seed = 51;
    p.top_k = 4;     /* 0, 8, 1, 9 */
    p.top_p = 0.99f; /* all four */
    p.min_p = 0.05f;
    rvl_sampler *s = open_s(&p, NV);
    draw(s, l, NV, N, counts);
    for (int i = 0; i < NV; i++)
        if (i != 0 && i != 8 && i != 1 && i != 9)
            assert_int_equal(counts[i], 0);
    for (int i = 0; i < NV; i++)
        if (i == 0 || i == 8 || i == 1 || i == 9)
            assert_true(counts[i] > N / 10);
    rvl_sampler_close(s);
}

/* ======================================================================
 * Penalties
 * ====================================================================== */

/* Greedy choice between token 0 (logit a, penalized) and token 1
 * (logit b, never seen): pins the penalized value between candidates. */
static int32_t duel(const rvl_sampler_params *p, float a, float b, int n_accept)
{
    rvl_sampler *s = open_s(p, 4);
    const float l[4] = {a, b, -100, -100};
    for (int i = 0; i < n_accept; i++)
        rvl_sampler_accept(s, 0);
    int32_t id = rvl_sampler_sample(s, l);
    rvl_sampler_close(s);
    return id;
}

static void test_sampler_repeat_penalty_divides_positive_multiplies_negative(void **state)
{
    (void)state;
    rvl_sampler_params p = greedy();
    p.repeat_penalty = 2.0f;
    /* positive: 2.0 -> 1.0 */
    assert_int_equal(duel(&p, 2.0f, 1.01f, 1), 1);
    assert_int_equal(duel(&p, 2.0f, 0.99f, 1), 0);
    /* negative: -1.0 -> -2.0 (dividing would give -0.5) */
    assert_int_equal(duel(&p, -1.0f, -1.99f, 1), 1);
    assert_int_equal(duel(&p, -1.0f, -2.01f, 1), 0);
    /* applied once, however often the token was seen */
    assert_int_equal(duel(&p, 2.0f, 0.99f, 5), 0);
    /* unseen: untouched */
    assert_int_equal(duel(&p, 2.0f, 1.99f, 0), 0);
    /* penalty < 1 rewards */
    p.repeat_penalty = 0.5f;
    assert_int_equal(duel(&p, 1.0f, 1.99f, 1), 0);
    assert_int_equal(duel(&p, 1.0f, 2.01f, 1), 1);
}

static void test_sampler_repeat_penalty_forgets_tokens_that_left_the_window(void **state)
{
    (void)state;
    rvl_sampler_params p = greedy();
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 3;
    const float l[4] = {2.0f, 1.5f, -100, -100};
    rvl_sampler *s = open_s(&p, 4);

    rvl_sampler_accept(s, 0);
    assert_int_equal(rvl_sampler_sample(s, l), 1);     /* 0 is penalized: 1.0 < 1.5 */
    rvl_sampler_accept(s, 2);
    rvl_sampler_accept(s, 3);
    assert_int_equal(rvl_sampler_sample(s, l), 1);     /* window {0, 2, 3} */
    rvl_sampler_accept(s, 2);
    assert_int_equal(rvl_sampler_sample(s, l), 0);     /* window {2, 3, 2}: 0 left */
    rvl_sampler_accept(s, 1);
    rvl_sampler_accept(s, 0);
    assert_int_equal(rvl_sampler_sample(s, l), 0);     /* {2, 1, 0}: 2.0/2 = 1.0 vs 0.75 */

    /* reset forgets the history */
    rvl_sampler_reset(s);
    assert_int_equal(rvl_sampler_sample(s, l), 0);
    rvl_sampler_accept(s, 0);
    assert_int_equal(rvl_sampler_sample(s, l), 1);
    rvl_sampler_close(s);

    /* repeat_last_n 0: no penalties at all */
    p.repeat_last_n = 0;
    assert_int_equal(duel(&p, 2.0f, 1.5f, 3), 0);
}

static void test_sampler_frequency_and_presence_penalties(void **state)
{
    (void)state;
    rvl_sampler_params p = greedy();
    /* frequency: subtract count * 0.3 */
    p.freq_penalty = 0.3f;
    assert_int_equal(duel(&p, 1.0f, 0.41f, 2), 1); /* 1.0 - 0.6 = 0.4 */
    assert_int_equal(duel(&p, 1.0f, 0.39f, 2), 0);
    assert_int_equal(duel(&p, 1.0f, 0.11f, 3), 1); /* 1.0 - 0.9 = 0.1 */
    assert_int_equal(duel(&p, 1.0f, 0.09f, 3), 0);
    /* presence: subtract 0.5 once */
    p.freq_penalty = 0;
    p.presence_penalty = 0.5f;
    assert_int_equal(duel(&p, 1.0f, 0.51f, 1), 1);
    assert_int_equal(duel(&p, 1.0f, 0.49f, 4), 0);
    /* both, after the repetition penalty (llama.cpp's order):
     * 3.0 / 2 - 2 * 0.25 - 0.5 = 0.5 */
    p.repeat_penalty = 2.0f;
    p.freq_penalty = 0.25f;
    p.presence_penalty = 0.5f;
    assert_int_equal(duel(&p, 3.0f, 0.51f, 2), 1);
    assert_int_equal(duel(&p, 3.0f, 0.49f, 2), 0);
    /* negative penalties reward */
    p.repeat_penalty = 1.0f;
    p.freq_penalty = -1.0f;
    p.presence_penalty = 0;
    assert_int_equal(duel(&p, 1.0f, 1.9f, 1), 0);
}

static void test_sampler_accept_ignores_invalid_ids(void **state)
{
    (void)state;
    rvl_sampler_params p = greedy();
    p.repeat_penalty = 2.0f;
    rvl_sampler *s = open_s(&p, 4);
    rvl_sampler_accept(s, -1);
    rvl_sampler_accept(s, 4);
    rvl_sampler_accept(s, INT32_MAX);
    rvl_sampler_accept(s, INT32_MIN);
    const float l[4] = {2.0f, 1.5f, 0, 0};
    assert_int_equal(rvl_sampler_sample(s, l), 0);
    rvl_sampler_close(s);
}

/* ======================================================================
 * Bad logits and edge cases
 * ====================================================================== */

static void test_sampler_never_chooses_nan(void **state)
{
    (void)state;
    enum { NV = 6, N = 10000 };
    const float l[NV] = {NAN, 0.5f, -NAN, 0.0f, NAN, -0.5f};
    int counts[NV];

    rvl_sampler_params g = greedy();
    rvl_sampler *s = open_s(&g, NV);
    assert_int_equal(rvl_sampler_sample(s, l), 1);
    const float first_nan[3] = {NAN, -50, -60};
    rvl_sampler_close(s);
    s = open_s(&g, 3);
    assert_int_equal(rvl_sampler_sample(s, first_nan), 1);
    rvl_sampler_close(s);

    const float temps[] = {1.0f, 100.0f};
    for (size_t t = 0; t < 2; t++) {
        rvl_sampler_params p = plain(61 + t);
        p.temp = temps[t];
        s = open_s(&p, NV);
        draw(s, l, NV, N, counts);
        assert_int_equal(counts[0] + counts[2] + counts[4], 0);
        assert_true(counts[1] > 0 && counts[3] > 0 && counts[5] > 0);
        rvl_sampler_close(s);
    }
    /* with the default chain too */
    rvl_sampler_params d;
    rvl_sampler_defaults(&d);
    s = open_s(&d, NV);
    draw(s, l, NV, N, counts);
    assert_int_equal(counts[0] + counts[2] + counts[4], 0);
    rvl_sampler_close(s);

    /* a NaN penalized by the repetition penalty is still never chosen */
    rvl_sampler_params pp = plain(63);
    pp.repeat_penalty = 1.5f;
    pp.freq_penalty = 0.1f;
    s = open_s(&pp, NV);
    rvl_sampler_accept(s, 0);
    rvl_sampler_accept(s, 2);
    draw(s, l, NV, N, counts);
    assert_int_equal(counts[0] + counts[2] + counts[4], 0);
    rvl_sampler_close(s);
}

/* All logits unusable: no crash, some valid id. */
static void test_sampler_all_nan_gives_a_valid_id(void **state)
{
    (void)state;
    const float l[4] = {NAN, NAN, NAN, NAN};
    rvl_sampler_params p;
    rvl_sampler_defaults(&p);
    rvl_sampler *s = open_s(&p, 4);
    for (int i = 0; i < 10; i++) {
        int32_t id = rvl_sampler_sample(s, l);
        assert_true(id >= 0 && id < 4);
    }
    rvl_sampler_close(s);
    p = greedy();
    s = open_s(&p, 4);
    int32_t id = rvl_sampler_sample(s, l);
    assert_true(id >= 0 && id < 4);
    rvl_sampler_close(s);
}

/* A token at +inf has all the probability (the softmax limit); an
 * overflowed logit must not hand the draw to the least likely token. */
static void test_sampler_infinite_logit_wins(void **state)
{
    (void)state;
    const float l[5] = {0.0f, 1.0f, INFINITY, -1.0f, -INFINITY};
    rvl_sampler_params p = plain(71);
    rvl_sampler *s = open_s(&p, 5);
    int32_t got[100];
    for (int i = 0; i < 100; i++)
        got[i] = rvl_sampler_sample(s, l);
    rvl_sampler_close(s);
    for (int i = 0; i < 100; i++)
        assert_int_equal(got[i], 2);
    p = greedy();
    s = open_s(&p, 5);
    got[0] = rvl_sampler_sample(s, l);
    rvl_sampler_close(s);
    assert_int_equal(got[0], 2);
}

static void test_sampler_one_token_vocabulary(void **state)
{
    (void)state;
    const float l[1] = {-3.0f};
    rvl_sampler_params ps[3];
    rvl_sampler_defaults(&ps[0]);
    ps[1] = greedy();
    ps[2] = plain(81);
    ps[2].repeat_penalty = 1.3f;
    ps[2].top_k = 1;
    ps[2].top_p = 0.1f;
    ps[2].min_p = 0.9f;
    for (int i = 0; i < 3; i++) {
        rvl_sampler *s = open_s(&ps[i], 1);
        for (int j = 0; j < 20; j++) {
            assert_int_equal(rvl_sampler_sample(s, l), 0);
            rvl_sampler_accept(s, 0);
        }
        rvl_sampler_reset(s);
        assert_int_equal(rvl_sampler_sample(s, l), 0);
        rvl_sampler_close(s);
    }
}

static void test_sampler_logits_are_not_modified(void **state)
{
    (void)state;
    float l[6] = {1, 2, 3, NAN, -INFINITY, 0.5f}, copy[6];
    memcpy(copy, l, sizeof l);
    rvl_sampler_params p;
    rvl_sampler_defaults(&p);
    p.repeat_penalty = 1.5f;
    p.freq_penalty = 0.2f;
    rvl_sampler *s = open_s(&p, 6);
    rvl_sampler_accept(s, 2);
    for (int i = 0; i < 50; i++)
        rvl_sampler_sample(s, l);
    assert_memory_equal(l, copy, sizeof l);
    rvl_sampler_close(s);
}

/* ======================================================================
 * Parameters
 * ====================================================================== */

static void test_sampler_defaults_are_llama_cpp_like(void **state)
{
    (void)state;
    rvl_sampler_params p;
    memset(&p, 0xAB, sizeof p);
    rvl_sampler_defaults(&p);
    assert_true(p.temp == 0.8f);
    assert_int_equal(p.top_k, 40);
    assert_true(p.top_p == 0.95f);
    assert_true(p.min_p == 0.05f);
    assert_true(p.repeat_penalty == 1.0f);
    assert_true(p.freq_penalty == 0.0f);
    assert_true(p.presence_penalty == 0.0f);
    assert_int_equal(p.repeat_last_n, 64);
    rvl_sampler *s = open_s(&p, 10);
    rvl_sampler_close(s);
    rvl_sampler_close(NULL);
}

static void test_sampler_open_rejects_invalid_parameters(void **state)
{
    (void)state;
    static const char *const cases[] = {
        "temp nan", "temp +inf", "top_p 0", "top_p -0.5", "top_p 1.01", "top_p nan",
        "min_p -0.01", "min_p 1.5", "min_p nan", "repeat_penalty 0", "repeat_penalty -1",
        "repeat_penalty nan", "repeat_penalty inf", "repeat_last_n -1", "freq_penalty nan",
        "presence_penalty nan", "freq_penalty inf",
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rvl_sampler_params p;
        rvl_sampler_defaults(&p);
        switch (i) {
        case 0: p.temp = NAN; break;
        case 1: p.temp = INFINITY; break;
        case 2: p.top_p = 0; break;
        case 3: p.top_p = -0.5f; break;
        case 4: p.top_p = 1.01f; break;
        case 5: p.top_p = NAN; break;
        case 6: p.min_p = -0.01f; break;
        case 7: p.min_p = 1.5f; break;
        case 8: p.min_p = NAN; break;
        case 9: p.repeat_penalty = 0; break;
        case 10: p.repeat_penalty = -1; break;
        case 11: p.repeat_penalty = NAN; break;
        case 12: p.repeat_penalty = INFINITY; break;
        case 13: p.repeat_last_n = -1; break;
        case 14: p.freq_penalty = NAN; break;
        case 15: p.presence_penalty = NAN; break;
        case 16: p.freq_penalty = INFINITY; break;
        }
        rvl_sampler *s = (rvl_sampler *)1;
        int rc = rvl_sampler_open(&s, &p, 10);
        if (rc != RVL_EINVAL) {
            if (rc == 0)
                rvl_sampler_close(s);
            print_error("%s: expected RVL_EINVAL, got %d\n", cases[i], rc);
            failures++;
            continue;
        }
        assert_null(s);
        assert_true(strlen(rvl_errmsg()) > 0);
    }
    assert_int_equal(failures, 0);
    rvl_sampler_params p;
    rvl_sampler_defaults(&p);
    rvl_sampler *s = (rvl_sampler *)1;
    assert_int_equal(rvl_sampler_open(&s, &p, 0), RVL_EINVAL);
    assert_null(s);

    /* the edges that are valid */
    p.temp = 0;
    p.top_p = 1;
    p.min_p = 1;
    p.repeat_last_n = 0;
    p.top_k = INT32_MAX;
    s = open_s(&p, 10);
    rvl_sampler_close(s);
    p.min_p = 0;
    p.top_k = INT32_MIN;
    p.repeat_penalty = 100;
    p.repeat_last_n = 100000;
    s = open_s(&p, 10);
    rvl_sampler_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampler_greedy_picks_argmax),
        cmocka_unit_test(test_sampler_greedy_ties_go_to_lowest_id),
        cmocka_unit_test(test_sampler_negative_temperature_is_greedy),
        cmocka_unit_test(test_sampler_top_k_1_equals_greedy),
        cmocka_unit_test(test_sampler_fixed_seed_reproduces_a_sequence),
        cmocka_unit_test(test_sampler_different_seeds_differ),
        cmocka_unit_test(test_sampler_frequencies_match_softmax),
        cmocka_unit_test(test_sampler_temperature_sharpens_and_flattens),
        cmocka_unit_test(test_sampler_top_k_keeps_the_k_best),
        cmocka_unit_test(test_sampler_top_k_on_a_large_vocabulary),
        cmocka_unit_test(test_sampler_top_p_keeps_the_smallest_sufficient_set),
        cmocka_unit_test(test_sampler_min_p_excludes_unlikely_tokens),
        cmocka_unit_test(test_sampler_chain_of_top_k_top_p_min_p),
        cmocka_unit_test(test_sampler_repeat_penalty_divides_positive_multiplies_negative),
        cmocka_unit_test(test_sampler_repeat_penalty_forgets_tokens_that_left_the_window),
        cmocka_unit_test(test_sampler_frequency_and_presence_penalties),
        cmocka_unit_test(test_sampler_accept_ignores_invalid_ids),
        cmocka_unit_test(test_sampler_never_chooses_nan),
        cmocka_unit_test(test_sampler_all_nan_gives_a_valid_id),
        cmocka_unit_test(test_sampler_infinite_logit_wins),
        cmocka_unit_test(test_sampler_one_token_vocabulary),
        cmocka_unit_test(test_sampler_logits_are_not_modified),
        cmocka_unit_test(test_sampler_defaults_are_llama_cpp_like),
        cmocka_unit_test(test_sampler_open_rejects_invalid_parameters),
    };
    return cmocka_run_group_tests_name("sampler", tests, NULL, NULL);
}
