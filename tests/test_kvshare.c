/*
 * test_kvshare.c - one KV store shared by an rvl_batch's sequences
 * (lib/engine/kvcache.c "The store", "Sharing"; lib/engine/batch.c).
 *
 * Through the public API, on tiny models of tests/data/tiny: three
 * sequences whose prompts start with the same three pages (96 tokens) get
 * logits memcmp-equal to the same sequences decoded alone, prompt and then
 * token by token, on every KV format (llama), MLA's latent cache
 * (deepseek2, q8: no key centering), a windowed model with sink logits
 * (gpt-oss, tiered) and Gemma 3's five windowed layers in six; the store
 * holds the common pages once (pages used and shared counted). With
 * centred keys (q8, q4, tq4, tq3) the later sequences take the centre the
 * first fixed from the same 64 keys, as they would have alone; tiered with
 * a short hot tier shares tier-0 pages that then age during the test,
 * each sequence centring and re-encoding its own copy. Resetting a
 * sequence and prompting it again leaves the others' logits as they were.
 * Through the cache's own API (engine/kvcache.h): truncating into,
 * aging, shifting and resetting one cache leave the other's rows bit for
 * bit. A full store refuses a step with RVL_EBUSY
 * naming it, no sequence advanced, and takes it once a sequence is reset.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruvllm.h"
#include "kvcache_testlib.h"

#define DATA_DIR "tests/data/tiny"
#define N_SEQ 3
#define PREFIX 96      /* three pages */
#define N_STEPS 48     /* tokens decoded one at a time after the prompts */

/* Sequence s's prompt: PREFIX common ids, then its own; plen[s] tokens. */
static const uint32_t plen[N_SEQ] = {100, 110, 97};
static int32_t prompt[N_SEQ][128];

static void make_prompts(uint32_t nv)
{
    uint64_t r = 12345;
    for (uint32_t t = 0; t < PREFIX; t++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        for (int s = 0; s < N_SEQ; s++)
            prompt[s][t] = (int32_t)((r >> 33) % nv);
    }
    for (int s = 0; s < N_SEQ; s++)
        for (uint32_t t = PREFIX; t < plen[s]; t++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            prompt[s][t] = (int32_t)((r >> 33) % nv);
        }
}

static int32_t next_tok(int s, int k, uint32_t nv) { return (int32_t)((7 * k + 13 * s + 5) % nv); }

/* One batch step of sequence s's tokens beside the alone context's. */
static void step_one(rvl_batch *b, rvl_ctx *alone, uint32_t s, const int32_t *tk, uint32_t n,
                     uint32_t nv, const char *what)
{
    const float *lb, *la;
    if (rvl_batch_decode(b, 1, &s, &tk, &n, &lb) < 0)
        fail_msg("%s: sequence %u: %s", what, s, rvl_errmsg());
    assert_int_equal(rvl_decode(alone, tk, n, &la), 0);
    if (memcmp(lb, la, nv * sizeof *la) != 0)
        fail_msg("%s: sequence %u (%u tokens at %u): logits differ from alone", what, s, n,
                 rvl_ctx_pos(alone) - n);
}

static void check_share(const char *model, rvl_kv_type kv, uint32_t hot, uint32_t warm)
{
    char path[256], what[128];
    snprintf(path, sizeof path, "%s/%s.gguf", DATA_DIR, model);
    snprintf(what, sizeof what, "%s, %s KV", model, rvl_kv_type_name(kv));
    rvl_model *m = NULL;
    if (rvl_model_open(&m, path) < 0)
        fail_msg("%s: %s", path, rvl_errmsg());
    const uint32_t nv = rvl_model_hparams(m)->n_vocab;
    make_prompts(nv);
    rvl_ctx_params cp = {.n_ctx = 192, .n_threads = 2, .kv_type = kv, .kv_hot = hot,
                         .kv_warm = warm};
    rvl_batch *b = NULL;
    if (rvl_batch_open(&b, m, &cp, N_SEQ) < 0)
        fail_msg("%s: rvl_batch_open: %s", what, rvl_errmsg());
    rvl_ctx *alone[N_SEQ];
    for (int s = 0; s < N_SEQ; s++)
        if (rvl_ctx_open(&alone[s], m, &cp) < 0)
            fail_msg("rvl_ctx_open: %s", rvl_errmsg());

    /* sequence 0 computes its prompt; 1 and 2 then map its first pages */
    for (uint32_t s = 0; s < N_SEQ; s++)
        step_one(b, alone[s], s, prompt[s], plen[s], nv, what);
    rvl_batch_kv u;
    rvl_batch_kv_get(b, &u);
    uint32_t own = 0; /* the pages of the global layers the sequences hold, each its own */
    for (int s = 0; s < N_SEQ; s++)
        own += (plen[s] + 31) / 32;
    /* the three prefix pages once: 0's four, then one page of each other's */
    assert_int_equal(u.reused_tokens, 2 * PREFIX);
    assert_int_equal(u.pages_shared, PREFIX / 32);
    assert_int_equal(u.pages_used, own - 2 * PREFIX / 32);
    assert_int_equal(u.pages_free, u.pages - u.pages_used);
    assert_true(u.bytes > 0);

    /* then token by token, all three in each step */
    for (int k = 0; k < N_STEPS; k++) {
        uint32_t seq[N_SEQ], n[N_SEQ];
        int32_t tok[N_SEQ];
        const int32_t *tk[N_SEQ];
        const float *lg[N_SEQ];
        for (int s = 0; s < N_SEQ; s++) {
            seq[s] = (uint32_t)s;
            tok[s] = next_tok(s, k, nv);
            tk[s] = &tok[s];
            n[s] = 1;
        }
        if (rvl_batch_decode(b, N_SEQ, seq, tk, n, lg) < 0)
            fail_msg("%s: step %d: %s", what, k, rvl_errmsg());
        for (int s = 0; s < N_SEQ; s++) {
            const float *la;
            assert_int_equal(rvl_decode(alone[s], tk[s], 1, &la), 0);
            if (memcmp(lg[s], la, nv * sizeof *la) != 0)
                fail_msg("%s: step %d, sequence %d: logits differ from alone", what, k, s);
        }
        if (k == N_STEPS / 2) { /* sequence 0 ends: the others go on unchanged */
            assert_int_equal(rvl_batch_seq_reset(b, 0), 0);
            /* a reset sequence is a new one (its own key centre): as a new context */
            rvl_ctx_close(alone[0]);
            if (rvl_ctx_open(&alone[0], m, &cp) < 0)
                fail_msg("rvl_ctx_open: %s", rvl_errmsg());
            step_one(b, alone[0], 0, prompt[0], plen[0], nv, what); /* and shares again */
        }
    }
    for (int s = 0; s < N_SEQ; s++)
        rvl_ctx_close(alone[s]);
    /* every sequence reset: nothing held, every page free */
    for (uint32_t s = 0; s < N_SEQ; s++)
        assert_int_equal(rvl_batch_seq_reset(b, s), 0);
    rvl_batch_kv_get(b, &u);
    assert_int_equal(u.pages_used, 0);
    assert_int_equal(u.pages_free, u.pages);
    assert_int_equal(u.bytes, 0);
    rvl_batch_close(b);
    rvl_model_close(m);
}

#define SHARE_TEST(name, model, kv, hot, warm)                                           \
    static void name(void **state)                                                       \
    {                                                                                    \
        (void)state;                                                                     \
        check_share(model, kv, hot, warm);                                               \
    }
SHARE_TEST(test_llama_f16, "llama", RVL_KV_F16, 0, 0)
SHARE_TEST(test_llama_f32, "llama", RVL_KV_F32, 0, 0)
/* centred keys: the centre of the first 64 keys, fixed by sequence 0 and
 * taken by the others with its pages */
SHARE_TEST(test_llama_q8, "llama", RVL_KV_Q8, 0, 0)
SHARE_TEST(test_llama_q4, "llama", RVL_KV_Q4, 0, 0)
SHARE_TEST(test_llama_tq4, "llama", RVL_KV_TQ4, 0, 0)
SHARE_TEST(test_llama_tq3, "llama", RVL_KV_TQ3, 0, 0)
/* tiered, 64 hot and 32 warm: the prefix pages are shared in tier 0, then
 * age during the steps: each sequence centres its keys and re-encodes its
 * own copies (copy-on-write) */
SHARE_TEST(test_llama_tiered, "llama", RVL_KV_TIERED, 64, 32)
/* MLA's latent cache: no key centering, q8 pages shared as they are */
SHARE_TEST(test_deepseek2_q8, "deepseek2", RVL_KV_Q8, 0, 0)
SHARE_TEST(test_deepseek2_f16, "deepseek2", RVL_KV_F16, 0, 0)
/* sink logits (no centering) and a window of 8 (rings of 4 pages) */
SHARE_TEST(test_gpt_oss_tiered, "gpt-oss", RVL_KV_TIERED, 64, 32)
SHARE_TEST(test_gemma3_f16, "gemma3", RVL_KV_F16, 0, 0)
SHARE_TEST(test_gemma3_q8, "gemma3", RVL_KV_Q8, 0, 0)

/* ====================================================================
 * Copy-on-write, through the cache's API on random rows
 * ==================================================================== */

#define NL 2
#define NH 4
#define NKV 2
#define HD 64
#define KVD (NKV * HD)

static void write_rows(rvl_kvcache *kc, uint32_t nb, uint64_t *rng, const int32_t *ids)
{
    static float k[64 * KVD], v[64 * KVD];
    const uint32_t pos = rvl_kvcache_n(kc);
    for (size_t i = 0; i < (size_t)nb * KVD; i++) {
        k[i] = (float)kvt_gauss(rng) + 0.5f; /* a common component, for the centre */
        v[i] = (float)kvt_gauss(rng);
    }
    rvl_kvcache_begin(kc, nb);
    for (uint32_t l = 0; l < NL; l++)
        rvl_kvcache_write(kc, l, pos, nb, k, KVD, v, KVD);
    rvl_kvcache_set_ids(kc, pos, ids + pos, nb);
    rvl_kvcache_commit(kc, nb);
}

/* The rows of positions 0 .. n - 1 of every layer and kind, as decoded. */
static float *snapshot(rvl_kvcache *kc, uint32_t n)
{
    float *d = calloc((size_t)NL * 2 * n * KVD, sizeof *d);
    for (uint32_t l = 0; l < NL; l++)
        for (int kind = 0; kind < 2; kind++)
            kvt_cache_rows(kc, l, kind, n, NKV, HD, d + ((size_t)l * 2 + kind) * n * KVD);
    return d;
}

static void expect_rows(rvl_kvcache *kc, uint32_t n, const float *want, const char *what)
{
    float *got = snapshot(kc, n);
    if (memcmp(got, want, (size_t)NL * 2 * n * KVD * sizeof *got) != 0)
        fail_msg("%s: the other cache's rows changed", what);
    free(got);
}

static void check_cow(const int fmt[3], uint32_t hot, uint32_t warm, const char *name)
{
    rvl_kvcache_params p = {.n_layer = NL, .n_head = NH, .n_head_kv = NKV, .head_dim = HD,
                            .n_ctx = 256, .hot = hot, .warm = warm, .scale = 0.125f};
    memcpy(p.fmt_k, fmt, sizeof p.fmt_k);
    memcpy(p.fmt_v, fmt, sizeof p.fmt_v);
    rvl_kvstore *st = NULL;
    assert_int_equal(rvl_kvstore_open(&st, &p, 2, 0), 0);
    rvl_kvcache *a = NULL, *b = NULL;
    assert_int_equal(rvl_kvcache_open_on(&a, st, 1), 0);
    assert_int_equal(rvl_kvcache_open_on(&b, st, 1), 0);
    int32_t ids[256];
    for (int i = 0; i < 256; i++)
        ids[i] = 3 * i + 1;
    uint64_t rng = 7;
    write_rows(a, 32, &rng, ids);
    write_rows(a, 32, &rng, ids);
    write_rows(a, 8, &rng, ids);
    /* b maps a's two full pages, leaving the last token of its 65 */
    assert_int_equal(rvl_kvcache_share(b, ids, 65), 64);
    assert_int_equal(rvl_kvcache_n(b), 64);
    float *want = snapshot(b, 64), *a_rows = snapshot(a, 64);
    assert_memory_equal(want, a_rows, (size_t)NL * 2 * 64 * KVD * sizeof *want);
    rvl_batch_kv u;
    rvl_kvstore_usage(st, &u);
    assert_int_equal(u.pages_shared, 2);
    assert_int_equal(u.pages_used, 3);

    /* a truncates into a shared page and writes other rows there */
    assert_int_equal(rvl_kvcache_truncate(a, 40), 0);
    write_rows(a, 30, &rng, ids);
    expect_rows(b, 64, want, name);
    /* a goes on until its pages age (and, quantized, its keys get centred) */
    for (int i = 0; i < 4; i++)
        write_rows(a, 32, &rng, ids);
    expect_rows(b, 64, want, name);
    /* b writes on: its pages age and centre on its own */
    write_rows(b, 32, &rng, ids);
    write_rows(b, 32, &rng, ids);
    float *b_now = snapshot(b, 64);
    free(want);
    want = b_now;
    /* a context shift of a */
    const uint32_t half = HD / 2;
    float cs[HD / 2], sn[HD / 2];
    for (uint32_t i = 0; i < half; i++)
        cs[i] = 1, sn[i] = 0;
    assert_int_equal(rvl_kvcache_shift(a, 4, 16, cs, sn, NULL, NULL, HD, false), 0);
    expect_rows(b, 64, want, name);
    /* and a reset */
    rvl_kvcache_reset(a);
    expect_rows(b, 64, want, name);
    rvl_kvcache_reset(b);
    rvl_kvstore_usage(st, &u);
    assert_int_equal(u.pages_used, 0);
    assert_int_equal(u.pages_shared, 0);
    free(want);
    free(a_rows);
    rvl_kvcache_close(a);
    rvl_kvcache_close(b);
    rvl_kvstore_close(st);
}

static void test_cow_f16(void **state)
{
    (void)state;
    const int f[3] = {RVL_KVQ_F16, RVL_KVQ_F16, RVL_KVQ_F16};
    check_cow(f, RVL_KVC_UNBOUNDED, RVL_KVC_UNBOUNDED, "f16");
}

static void test_cow_tiered(void **state)
{
    (void)state;
    const int f[3] = {RVL_KVQ_F16, RVL_KVQ_Q8, RVL_KVQ_TQ4};
    check_cow(f, 64, 32, "tiered");
}

/* A windowed layer's ring (window 40: 5 pages) frees its old pages and the
 * store reuses their slots, least recently freed first: a cache whose
 * prompt would need pages the rings no longer hold maps nothing, though
 * the global layer holds them all; one whose ring pages are still
 * findable (freed last, not yet reused) maps them, bit for bit. */
static void test_window_ring_shares_what_it_still_holds(void **state)
{
    (void)state;
    const uint32_t window[NL] = {0, 40};
    const int f[3] = {RVL_KVQ_F16, RVL_KVQ_F16, RVL_KVQ_F16};
    rvl_kvcache_params p = {.n_layer = NL, .n_head = NH, .n_head_kv = NKV, .head_dim = HD,
                            .n_ctx = 1024, .hot = RVL_KVC_UNBOUNDED, .warm = RVL_KVC_UNBOUNDED,
                            .scale = 0.125f, .window = window};
    memcpy(p.fmt_k, f, sizeof f);
    memcpy(p.fmt_v, f, sizeof f);
    rvl_kvstore *st = NULL;
    assert_int_equal(rvl_kvstore_open(&st, &p, 2, 0), 0);
    rvl_kvcache *a = NULL, *b = NULL;
    assert_int_equal(rvl_kvcache_open_on(&a, st, 1), 0);
    assert_int_equal(rvl_kvcache_open_on(&b, st, 1), 0);
    static int32_t ids[1024];
    for (int i = 0; i < 1024; i++)
        ids[i] = 5 * i + 2;
    uint64_t rng = 11;
    const size_t rows = (size_t)20 * 32 * KVD;
    float *ring = calloc(2 * rows, sizeof *ring), *rb = calloc(rows, sizeof *rb);
    for (int i = 0; i < 24; i++) {
        write_rows(a, 32, &rng, ids);
        for (int kind = 0; i == 19 && kind < 2; kind++) /* what the ring holds at 20 pages */
            kvt_cache_rows(a, 1, kind, 20 * 32, NKV, HD, ring + kind * rows);
    }
    assert_int_equal(rvl_kvcache_first_page(a, 1), 19);
    /* pages 3 .. 7 of the ring were freed long ago and their slots reused */
    assert_int_equal(rvl_kvcache_share(b, ids, 8 * 32 + 1), 0);
    /* pages 15 .. 19: freed last, still findable (19 still held) */
    assert_int_equal(rvl_kvcache_share(b, ids, 20 * 32 + 1), 20 * 32);
    assert_int_equal(rvl_kvcache_first_page(b, 1), 15);
    for (int kind = 0; kind < 2; kind++) { /* b's ring: the slots a freed, as a wrote them */
        kvt_cache_rows(b, 1, kind, 20 * 32, NKV, HD, rb);
        assert_memory_equal(rb + (size_t)15 * 32 * KVD, ring + kind * rows + (size_t)15 * 32 * KVD,
                            (size_t)5 * 32 * KVD * sizeof *rb);
    }
    free(ring);
    free(rb);
    rvl_kvcache_close(a);
    rvl_kvcache_close(b);
    rvl_kvstore_close(st);
}

/* ====================================================================
 * Room
 * ==================================================================== */

/* A budget of three pages: one sequence of two pages fits, a second one
 * of two pages is refused (RVL_EBUSY naming the full cache, no sequence
 * advanced) until the first is reset. */
static void test_full_store_refuses_step(void **state)
{
    (void)state;
    rvl_model *m = NULL;
    assert_int_equal(rvl_model_open(&m, DATA_DIR "/llama.gguf"), 0);
    const uint32_t nv = rvl_model_hparams(m)->n_vocab;
    make_prompts(nv);
    rvl_ctx_params cp = {.n_ctx = 128, .n_threads = 1};
    rvl_batch *b = NULL;
    assert_int_equal(rvl_batch_open_kv(&b, m, &cp, 2, 96), 0);
    rvl_batch_kv u;
    rvl_batch_kv_get(b, &u);
    assert_int_equal(u.pages, 3);
    const int32_t *t0 = prompt[0], *t1 = prompt[1] + 1; /* no common first page */
    const uint32_t n64 = 64;
    const float *lg[2];
    assert_int_equal(rvl_batch_seq_kv_need(b, 1, t1, 64, 64), 2);
    assert_int_equal(rvl_batch_decode(b, 1, (const uint32_t[]){0}, &t0, &n64, lg), 0);
    rvl_batch_kv_get(b, &u);
    assert_int_equal(u.pages_used, 2);
    assert_int_equal(u.pages_free, 1);
    assert_int_equal(rvl_batch_decode(b, 1, (const uint32_t[]){1}, &t1, &n64, lg), RVL_EBUSY);
    assert_non_null(strstr(rvl_errmsg(), "KV cache is full"));
    assert_int_equal(rvl_batch_seq_pos(b, 0), 64);
    assert_int_equal(rvl_batch_seq_pos(b, 1), 0);
    /* two items of which one fits: neither advances */
    const int32_t *tk[2] = {t0 + 64, t1};
    assert_int_equal(rvl_batch_decode(b, 2, (const uint32_t[]){0, 1}, tk,
                                      (const uint32_t[]){1, 64}, lg), RVL_EBUSY);
    assert_int_equal(rvl_batch_seq_pos(b, 0), 64);
    assert_int_equal(rvl_batch_seq_pos(b, 1), 0);
    /* the same prompt shares both pages: it needs one page of its own */
    assert_int_equal(rvl_batch_seq_kv_need(b, 1, prompt[0], 65, 65), 1);
    assert_int_equal(rvl_batch_seq_reset(b, 0), 0);
    assert_int_equal(rvl_batch_decode(b, 1, (const uint32_t[]){1}, &t1, &n64, lg), 0);
    assert_int_equal(rvl_batch_seq_pos(b, 1), 64);
    rvl_batch_close(b);
    rvl_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_f16),
        cmocka_unit_test(test_llama_f32),
        cmocka_unit_test(test_llama_q8),
        cmocka_unit_test(test_llama_q4),
        cmocka_unit_test(test_llama_tq4),
        cmocka_unit_test(test_llama_tq3),
        cmocka_unit_test(test_llama_tiered),
        cmocka_unit_test(test_deepseek2_q8),
        cmocka_unit_test(test_deepseek2_f16),
        cmocka_unit_test(test_gpt_oss_tiered),
        cmocka_unit_test(test_gemma3_f16),
        cmocka_unit_test(test_gemma3_q8),
        cmocka_unit_test(test_cow_f16),
        cmocka_unit_test(test_cow_tiered),
        cmocka_unit_test(test_window_ring_shares_what_it_still_holds),
        cmocka_unit_test(test_full_store_refuses_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
