/*
 * test_attn.c - the attention kernels (kernels/attn.h): every variant this
 * machine runs (ref, avx2, avx512) against a double-precision
 * softmax(scale * QK^T) V with the same mask, window and soft-cap, within
 * the bound of tests/attn_testlib.h, on random caches whose pages are
 * shuffled and surrounded by NaN (a stray read shows):
 *
 *  - decode: head dims 64, 128, 80, 96, 256 and odd ones (68, 5); GQA
 *    ratios 1, 4, 8 and MQA; n_kv = 1, 31, 32, 33, 100, 1000; pages of 32,
 *    16 and 48 tokens; f32 and f16 caches; 1 to 8 chunks (split-K) all
 *    within the bound, each count giving the same bits on every run and
 *    whatever order the chunks and kv heads run in; nothing written
 *    outside the partials;
 *  - prefill: nq = 1, 7, 32, 64 after 0 or 45 cached positions: every
 *    token within the bound and, per variant, the same bits as decode
 *    with one chunk for that token (so causal masking is decode run token
 *    by token), whatever the split into token ranges;
 *  - attention-sink logits (gpt-oss: one per query head in the softmax's
 *    denominator, -inf and dominating ones included) in decode (1 and 3
 *    chunks) and prefill, with windows, soft-capping, GQA and MQA;
 *  - sliding windows (1, 7, 32, 50), soft-capping (Gemma 2's 50, and 5 on
 *    large scores so both branches of tanh run), q rounded to f16, large
 *    scores (spiky softmax), a query that sees no key (zeros);
 *  - the dispatch serves the variant dispatch.h selects, and the check
 *    refuses what the kernels cannot do.
 *
 * ATTN_VERBOSE=1 prints the worst error / bound ratio per variant and
 * cache type.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#define ATTN_CHECK(c) assert_true(c)
#include "attn_testlib.h"
#include "dispatch.h"

static const int chunks_1_3[] = { 1, 3 };

static void test_decode_matches_double_softmax(void **state)
{
    (void)state;
    static const int hds[] = { 64, 128, 80, 96, 256, 68, 5 };
    static const int heads[][2] = { { 4, 4 }, { 8, 2 }, { 16, 2 }, { 8, 1 } };
    static const int nkvs[] = { 1, 31, 32, 33, 100, 1000 };
    for (int type = 0; type < 2; type++)
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
            for (size_t b = 0; b < sizeof heads / sizeof *heads; b++)
                for (size_t k = 0; k < sizeof nkvs / sizeof *nkvs; k++) {
                    if (hds[a] == 256 && nkvs[k] == 1000 && heads[b][0] > 8)
                        continue; /* time */
                    const at_shape s = { hds[a], heads[b][0], heads[b][1], nkvs[k], 32, type,
                                         0, 0, 0 };
                    at_check_decode(&s, 1.0f, nkvs[k] - 1, chunks_1_3, 2);
                }
}

static void test_decode_pages_of_other_sizes(void **state)
{
    (void)state;
    static const int pts[] = { 16, 48, 1, 100 };
    for (int type = 0; type < 2; type++)
        for (size_t i = 0; i < sizeof pts / sizeof *pts; i++) {
            const at_shape s = { 64, 8, 2, 333, pts[i], type, 0, 0, 0 };
            at_check_decode(&s, 1.0f, 332, chunks_1_3, 2);
        }
}

static void test_decode_split_counts_agree(void **state)
{
    (void)state;
    static const int all[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    static const int nkvs[] = { 33, 100, 1000 };
    for (int type = 0; type < 2; type++)
        for (size_t k = 0; k < sizeof nkvs / sizeof *nkvs; k++) {
            const at_shape s = { 128, 8, 2, nkvs[k], 32, type, 0, 0, 0 };
            at_check_decode(&s, 1.0f, nkvs[k] - 1, all, 8);
            const at_shape mqa = { 64, 8, 1, nkvs[k], 32, type, 0, 0, 0 };
            at_check_decode(&mqa, 2.0f, nkvs[k] - 1, all, 8);
        }
}

static void test_decode_with_large_scores(void **state)
{
    (void)state;
    for (int type = 0; type < 2; type++) {
        const at_shape s = { 128, 8, 2, 500, 32, type, 0, 0, 0 };
        at_check_decode(&s, 8.0f, 499, chunks_1_3, 2); /* scores ~ N(0, 64) */
        const at_shape t = { 64, 4, 4, 200, 32, type, 0, 0, 0 };
        at_check_decode(&t, 0.01f, 199, chunks_1_3, 2); /* nearly uniform */
    }
}

static void test_decode_sliding_window(void **state)
{
    (void)state;
    static const int windows[] = { 1, 7, 32, 50 };
    static const int c14[] = { 1, 4 };
    for (int type = 0; type < 2; type++)
        for (size_t i = 0; i < sizeof windows / sizeof *windows; i++) {
            const at_shape s = { 80, 8, 2, 150, 32, type, 0, windows[i], 0 };
            at_check_decode(&s, 1.0f, 149, c14, 2);
            at_check_decode(&s, 1.0f, 70, c14, 2); /* the query is not the last key */
        }
}

static void test_decode_softcap(void **state)
{
    (void)state;
    for (int type = 0; type < 2; type++) {
        const at_shape gemma = { 256, 8, 4, 100, 32, type, 50.0f, 0, 0 };
        at_check_decode(&gemma, 1.0f, 99, chunks_1_3, 2);
        at_check_decode(&gemma, 8.0f, 99, chunks_1_3, 2);
        const at_shape tight = { 64, 4, 1, 300, 32, type, 5.0f, 16, 0 };
        at_check_decode(&tight, 4.0f, 299, chunks_1_3, 2);
    }
}

static void test_decode_q_rounded_to_f16(void **state)
{
    (void)state;
    for (int type = 0; type < 2; type++) {
        const at_shape s = { 64, 8, 2, 77, 32, type, 0, 0, 1 };
        at_check_decode(&s, 3.0f, 76, chunks_1_3, 2);
    }
}

static void test_query_without_visible_keys_gives_zeros(void **state)
{
    (void)state;
    /* keys 0..39, the query at 60 with a window of 5 sees only 56..60 */
    const at_shape s = { 64, 4, 2, 40, 32, RVL_ATTN_F16, 0, 5, 0 };
    static const int c13[] = { 1, 3, 8 };
    at_check_decode(&s, 1.0f, 60, c13, 3);
    /* and an empty cache */
    const at_shape e = { 64, 4, 2, 0, 32, RVL_ATTN_F32, 0, 0, 0 };
    at_check_decode(&e, 1.0f, 0, c13, 3);
}

static void test_decode_order_of_work_items_does_not_matter(void **state)
{
    (void)state;
    const at_shape s = { 96, 16, 2, 257, 32, RVL_ATTN_F16, 0, 0, 0 };
    at_cache c;
    at_cache_init(&c, &s);
    const size_t n = (size_t)s.n_head * s.head_dim;
    float *q = at_rand_vec(n, 1.0f), *a = at_guarded(n), *b = at_guarded(n);
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++) {
        const rvl_attn_kernels *kk = rvl_attn_get_isa(isa);
        if (!kk)
            continue;
        /* at_decode: chunks backwards, one kv head per call; here all kv
         * heads per call, chunks forwards (rvl_attn_decode) */
        at_decode(kk, &c, q, 256, 257, 5, a);
        const size_t np = rvl_attn_partials_size(&c.p, 5);
        float *part = at_alloc(np * sizeof *part);
        void *ws = at_alloc(rvl_attn_ws_size(&c.p));
        rvl_attn_decode(kk, &c.p, q, 256, 257, 5, part, b, ws);
        assert_memory_equal(a, b, n * sizeof *a);
        free(part);
        free(ws);
    }
    free(q);
    free(a);
    free(b);
    at_cache_free(&c);
}

static void test_prefill_is_decode_token_by_token(void **state)
{
    (void)state;
    static const int nqs[] = { 1, 7, 32, 64 };
    static const int p0s[] = { 0, 45 };
    static const int heads[][2] = { { 4, 4 }, { 8, 2 }, { 16, 2 }, { 8, 1 } };
    static const int hds[] = { 64, 80 };
    for (int type = 0; type < 2; type++)
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
            for (size_t b = 0; b < sizeof heads / sizeof *heads; b++)
                for (size_t i = 0; i < sizeof nqs / sizeof *nqs; i++)
                    for (size_t j = 0; j < sizeof p0s / sizeof *p0s; j++) {
                        const at_shape s = { hds[a], heads[b][0], heads[b][1], 0, 32, type,
                                             0, 0, 0 };
                        at_check_prefill(&s, p0s[j], nqs[i], 1.0f);
                    }
}

static void test_prefill_window_softcap_and_odd_dims(void **state)
{
    (void)state;
    for (int type = 0; type < 2; type++) {
        const at_shape win = { 128, 8, 2, 0, 32, type, 0, 7, 0 };
        at_check_prefill(&win, 30, 64, 1.0f);
        const at_shape win2 = { 64, 4, 4, 0, 16, type, 0, 40, 0 };
        at_check_prefill(&win2, 100, 33, 1.0f);
        const at_shape cap = { 256, 8, 4, 0, 32, type, 50.0f, 0, 1 };
        at_check_prefill(&cap, 10, 20, 4.0f);
        const at_shape odd = { 68, 6, 3, 0, 32, type, 0, 0, 0 };
        at_check_prefill(&odd, 3, 40, 1.0f);
        const at_shape big = { 96, 64, 1, 0, 32, type, 0, 0, 0 }; /* MQA: tiles of 1 token */
        at_check_prefill(&big, 5, 9, 1.0f);
    }
}

static void test_sinks_match_double_softmax(void **state)
{
    (void)state;
    static const int heads[][2] = { { 4, 4 }, { 8, 2 }, { 8, 1 }, { 64, 8 } };
    static const float amps[] = { 1.0f, 4.0f };
    for (int type = 0; type < 2; type++)
        for (size_t b = 0; b < sizeof heads / sizeof *heads; b++)
            for (size_t a = 0; a < sizeof amps / sizeof *amps; a++) {
                at_sink_amp = amps[a];
                const at_shape s = { 64, heads[b][0], heads[b][1], 100, 32, type, 0, 0, 0 };
                at_check_decode(&s, 1.0f, 99, chunks_1_3, 2);
                const at_shape one = { 80, heads[b][0], heads[b][1], 1, 32, type, 0, 0, 0 };
                at_check_decode(&one, 1.0f, 0, chunks_1_3, 2);
                const at_shape win = { 64, heads[b][0], heads[b][1], 300, 32, type, 0, 50, 0 };
                at_check_decode(&win, 2.0f, 299, chunks_1_3, 2);
                const at_shape cap = { 96, heads[b][0], heads[b][1], 70, 16, type, 30.0f, 0, 1 };
                at_check_decode(&cap, 4.0f, 69, chunks_1_3, 2);
                const at_shape none = { 64, heads[b][0], heads[b][1], 40, 32, type, 0, 5, 0 };
                at_check_decode(&none, 1.0f, 60, chunks_1_3, 2); /* no key in view: zeros */
                const at_shape pre = { 64, heads[b][0], heads[b][1], 0, 32, type, 0, 0, 0 };
                at_check_prefill(&pre, 45, 33, 1.0f);
                const at_shape pwin = { 80, heads[b][0], heads[b][1], 0, 32, type, 0, 20, 0 };
                at_check_prefill(&pwin, 30, 40, 1.0f);
            }
    at_sink_amp = 0;
}

static void test_dispatch_serves_the_selected_isa(void **state)
{
    (void)state;
    const rvl_attn_kernels *sel = rvl_attn_get();
    assert_non_null(sel);
    assert_string_equal(sel->name, rvl_dispatch_isa_name(rvl_dispatch_isa()));
    for (int isa = 0; isa < RVL_ISA_COUNT; isa++) {
        const rvl_attn_kernels *kk = rvl_attn_get_isa(isa);
        if (isa == RVL_ISA_NEON || !rvl_dispatch_isa_runnable(isa)) {
            assert_null(kk);
            continue;
        }
        assert_non_null(kk);
        assert_string_equal(kk->name, rvl_dispatch_isa_name(isa));
        assert_non_null(kk->decode_chunk);
        assert_non_null(kk->prefill);
    }
    assert_null(rvl_attn_get_isa(-1));
    assert_null(rvl_attn_get_isa(RVL_ISA_COUNT));
}

static void test_check_refuses_what_the_kernels_cannot_do(void **state)
{
    (void)state;
    static const int32_t table[1] = { 0 };
    static const float page[64 * 32];
    const rvl_attn_params good = { .head_dim = 64, .n_head = 8, .n_head_kv = 2, .scale = 0.125f,
                                   .kv_type = RVL_ATTN_F32, .page_tokens = 32, .k = page,
                                   .v = page, .page_stride = sizeof page,
                                   .head_stride = sizeof page, .page_table = table };
    assert_null(rvl_attn_check(&good));
    rvl_attn_params p = good;
    p.n_head_kv = 3;
    assert_non_null(rvl_attn_check(&p));
    p = good, p.head_dim = 0;
    assert_non_null(rvl_attn_check(&p));
    p = good, p.head_dim = RVL_ATTN_MAX_HEAD_DIM + 1;
    assert_non_null(rvl_attn_check(&p));
    p = good, p.scale = NAN;
    assert_non_null(rvl_attn_check(&p));
    p = good, p.softcap = -1;
    assert_non_null(rvl_attn_check(&p));
    p = good, p.window = -1;
    assert_non_null(rvl_attn_check(&p));
    p = good, p.kv_type = 7;
    assert_non_null(rvl_attn_check(&p));
    p = good, p.page_tokens = 0;
    assert_non_null(rvl_attn_check(&p));
    p = good, p.head_stride = 32 * 64 * 4 - 4;
    assert_non_null(rvl_attn_check(&p));
    p = good, p.page_table = NULL;
    assert_non_null(rvl_attn_check(&p));
    float sinks[8] = { 0, 1, -INFINITY, 3, 4, 5, 6, -7 };
    p = good, p.sinks = sinks;
    assert_null(rvl_attn_check(&p));
    sinks[5] = NAN;
    assert_non_null(rvl_attn_check(&p));
    sinks[5] = INFINITY;
    assert_non_null(rvl_attn_check(&p));
}

static int report(void **state)
{
    (void)state;
    if (getenv("ATTN_VERBOSE"))
        for (int isa = 0; isa < RVL_ISA_COUNT; isa++)
            for (int t = 0; t < 2; t++)
                if (at_worst[isa][t] > 0)
                    fprintf(stderr, "# %s %s: worst error / bound %.3g\n",
                            rvl_dispatch_isa_name(isa), t ? "f16" : "f32", at_worst[isa][t]);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch_serves_the_selected_isa),
        cmocka_unit_test(test_check_refuses_what_the_kernels_cannot_do),
        cmocka_unit_test(test_decode_matches_double_softmax),
        cmocka_unit_test(test_decode_pages_of_other_sizes),
        cmocka_unit_test(test_decode_split_counts_agree),
        cmocka_unit_test(test_decode_with_large_scores),
        cmocka_unit_test(test_decode_sliding_window),
        cmocka_unit_test(test_decode_softcap),
        cmocka_unit_test(test_decode_q_rounded_to_f16),
        cmocka_unit_test(test_query_without_visible_keys_gives_zeros),
        cmocka_unit_test(test_decode_order_of_work_items_does_not_matter),
        cmocka_unit_test(test_prefill_is_decode_token_by_token),
        cmocka_unit_test(test_prefill_window_softcap_and_odd_dims),
        cmocka_unit_test(test_sinks_match_double_softmax),
    };
    return cmocka_run_group_tests(tests, NULL, report);
}
