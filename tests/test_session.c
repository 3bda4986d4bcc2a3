/*
 * test_session.c - session files (lib/engine/session.c): saving a context's cache
 * and restoring it gives the same continuation as never having stopped,
 * and every kind of bad file is refused with a message that says why,
 * leaving the context empty. Uses the tiny real GGUF models of
 * tests/data/tiny/ (tests/ref/gen_tiny_hf.py).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "ruvllm.h"

#define LLAMA "tests/data/tiny/llama.gguf"
#define QWEN2 "tests/data/tiny/qwen2.gguf"
#define GEMMA2 "tests/data/tiny/gemma2.gguf"   /* window 8 on every other layer */
#define GEMMA3 "tests/data/tiny/gemma3.gguf"   /* 5 of 6 layers windowed (8), own RoPE base */
#define N 100

static char dir[64];

static const char *tpath(const char *name)
{
    static char buf[4][256];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "%s/%s", dir, name);
    return buf[i];
}

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/rvl-session-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int32_t seq[N];

static void make_seq(void)
{
    for (int i = 0; i < N; i++)
        seq[i] = (int32_t)((i * 37 + 11) % 250);
}

static rvl_model *open_model(const char *path)
{
    rvl_model *m = NULL;
    if (rvl_model_open(&m, path) < 0)
        fail_msg("%s: %s", path, rvl_errmsg());
    return m;
}

static rvl_ctx *open_ctx(const rvl_model *m, uint32_t n_ctx, rvl_kv_type kt)
{
    rvl_ctx *c = NULL;
    /* tiered: small tiers, so that 70 tokens use all three */
    rvl_ctx_params p = {.n_ctx = n_ctx, .n_threads = 1, .kv_type = kt, .kv_hot = 16, .kv_warm = 32};
    assert_int_equal(rvl_ctx_open(&c, m, &p), 0);
    return c;
}

/* bytes of a file, and writing them back (possibly altered) */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    assert_int_equal(fread(b, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static void spill(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void test_session_restore_continues_exactly(void **state)
{
    (void)state;
    /* every storage format, and tiered (f16, q8 and tq4 pages at once) */
    rvl_kv_type kts[] = {RVL_KV_F16, RVL_KV_F32, RVL_KV_Q8, RVL_KV_Q4, RVL_KV_TQ4, RVL_KV_TQ3,
                         RVL_KV_TIERED};
    for (int ki = 0; ki < 7; ki++) {
        rvl_model *m = open_model(LLAMA);
        const uint32_t V = rvl_model_hparams(m)->n_vocab;
        const float *lg;
        /* uninterrupted: 70 tokens (two full pages and some), then the rest
         * one at a time (pages age and change format on the way) */
        rvl_ctx *a = open_ctx(m, 128, kts[ki]);
        assert_int_equal(rvl_decode(a, seq, 70, &lg), 0);
        assert_int_equal(rvl_session_save(a, tpath("s.rvls"), seq, 70, "{\"k\":\"v\"}"), 0);
        float *want = malloc(V * sizeof *want);
        for (int i = 70; i < N; i++)
            assert_int_equal(rvl_decode(a, seq + i, 1, &lg), 0);
        memcpy(want, lg, V * sizeof *want);

        /* a new context, restored, then the same tokens */
        rvl_ctx *b = open_ctx(m, 128, kts[ki]);
        int32_t *ids = NULL;
        size_t n = 0;
        char *extra = NULL;
        assert_int_equal(rvl_session_load(b, tpath("s.rvls"), &ids, &n, &extra), 0);
        assert_int_equal(n, 70);
        assert_int_equal(rvl_ctx_pos(b), 70);
        assert_memory_equal(ids, seq, 70 * sizeof *ids);
        assert_string_equal(extra, "{\"k\":\"v\"}");
        for (int i = 70; i < N; i++)
            assert_int_equal(rvl_decode(b, seq + i, 1, &lg), 0);
        if (memcmp(lg, want, V * sizeof *want) != 0) /* bit for bit */
            fail_msg("%s: the restored context continues differently", rvl_kv_type_name(kts[ki]));

        /* an empty cache and no extra also round-trip */
        rvl_ctx_reset(b);
        assert_int_equal(rvl_session_save(b, tpath("e.rvls"), NULL, 0, NULL), 0);
        free(ids);
        free(extra);
        assert_int_equal(rvl_session_load(b, tpath("e.rvls"), &ids, &n, &extra), 0);
        assert_int_equal(n, 0);
        assert_string_equal(extra, "");
        free(ids);
        free(extra);
        free(want);
        rvl_ctx_close(a);
        rvl_ctx_close(b);
        rvl_model_close(m);
    }
}

/* Sliding-window models (tests/data/tiny/gemma2.gguf, gemma3.gguf: a
 * window of 8): after 300 tokens the windowed layers' rings freed their
 * old pages, so the file is version 4 (each windowed layer saves only its
 * ring, from its first page on) and smaller than one of every page; the
 * restored context continues bit for bit as the saved one, on f16 and q8
 * (rings holding quantized pages) and f32; and a prompt that extends the
 * saved one keeps what the file holds (rvl_ctx_reuse after the load). */
static void test_session_windowed_rings_restore_exactly(void **state)
{
    (void)state;
    const char *models[] = {GEMMA2, GEMMA3};
    rvl_kv_type kts[] = {RVL_KV_F16, RVL_KV_Q8, RVL_KV_F32};
    enum { NW = 300, NT = 340, NCTX = 512 };
    int32_t s[NT];
    for (int i = 0; i < NT; i++)
        s[i] = (int32_t)((i * 37 + 11) % 250);
    for (int mi = 0; mi < 2; mi++)
        for (int ki = 0; ki < 3; ki++) {
            rvl_model *m = open_model(models[mi]);
            const uint32_t V = rvl_model_hparams(m)->n_vocab;
            const float *lg;
            rvl_ctx *a = open_ctx(m, NCTX, kts[ki]);
            assert_int_equal(rvl_decode(a, s, NW, &lg), 0);
            rvl_kv_usage u;
            assert_int_equal(rvl_ctx_kv_usage(a, NW, &u), 0);
            assert_true(u.n_windowed > 0);
            assert_true(u.bytes < u.bytes_untrimmed); /* the rings freed pages */
            assert_int_equal(rvl_session_save(a, tpath("w.rvls"), s, NW, NULL), 0);
            size_t fn;
            unsigned char *fb = slurp(tpath("w.rvls"), &fn);
            assert_int_equal(fb[8], 4); /* trimmed rings: version 4 */
            free(fb);
            float *want = malloc(V * sizeof *want);
            for (int i = NW; i < NT; i++)
                assert_int_equal(rvl_decode(a, s + i, 1, &lg), 0);
            memcpy(want, lg, V * sizeof *want);

            rvl_ctx *b = open_ctx(m, NCTX, kts[ki]);
            int32_t *ids = NULL;
            size_t n = 0;
            char *extra = NULL;
            if (rvl_session_load(b, tpath("w.rvls"), &ids, &n, &extra) != 0)
                fail_msg("%s %s: %s", models[mi], rvl_kv_type_name(kts[ki]), rvl_errmsg());
            assert_int_equal(n, NW);
            assert_int_equal(rvl_ctx_pos(b), NW);
            for (int i = NW; i < NT; i++)
                assert_int_equal(rvl_decode(b, s + i, 1, &lg), 0);
            if (memcmp(lg, want, V * sizeof *want) != 0)
                fail_msg("%s %s: the restored windowed context continues differently", models[mi],
                         rvl_kv_type_name(kts[ki]));
            /* loaded again: the prompt extended by 40 tokens keeps all 300 */
            free(ids);
            free(extra);
            assert_int_equal(rvl_session_load(b, tpath("w.rvls"), &ids, &n, &extra), 0);
            assert_int_equal(rvl_ctx_reuse(b, s, NT), NW);
            assert_int_equal(rvl_decode(b, s + NW, NT - NW, &lg), 0);
            if (kts[ki] == RVL_KV_F32) { /* the same bytes: the same logits as the batch path */
                rvl_ctx *c = open_ctx(m, NCTX, kts[ki]);
                const float *lc;
                assert_int_equal(rvl_decode(c, s, NW, &lc), 0);
                assert_int_equal(rvl_decode(c, s + NW, NT - NW, &lc), 0);
                assert_memory_equal(lg, lc, V * sizeof *lg);
                rvl_ctx_close(c);
            }
            free(ids);
            free(extra);
            free(want);
            rvl_ctx_close(a);
            rvl_ctx_close(b);
            rvl_model_close(m);
        }
}

static void test_session_save_checks_ids_and_leaves_no_temp(void **state)
{
    (void)state;
    rvl_model *m = open_model(LLAMA);
    rvl_ctx *c = open_ctx(m, 64, RVL_KV_F16);
    const float *lg;
    assert_int_equal(rvl_decode(c, seq, 5, &lg), 0);
    assert_int_equal(rvl_session_save(c, tpath("x.rvls"), seq, 4, NULL), RVL_EINVAL);
    assert_int_equal(access(tpath("x.rvls"), F_OK), -1);
    assert_int_equal(rvl_session_save(c, tpath("nodir/x.rvls"), seq, 5, NULL) < 0, 1);
    rvl_ctx_close(c);
    rvl_model_close(m);
}

/* load must fail with `code` and a message containing `want`, and leave
 * the context empty */
static void expect_refused(rvl_ctx *c, const char *path, int code, const char *want)
{
    int32_t *ids = (int32_t *)1;
    size_t n = 99;
    char *extra = (char *)1;
    const float *lg;
    assert_int_equal(rvl_decode(c, seq, 3, &lg), 0); /* something to lose */
    int rc = rvl_session_load(c, path, &ids, &n, &extra);
    if (rc != code || !strstr(rvl_errmsg(), want))
        fail_msg("%s: expected %d '%s', got %d '%s'", path, code, want, rc, rvl_errmsg());
    assert_null(ids);
    assert_null(extra);
    assert_int_equal(n, 0);
    assert_int_equal(rvl_ctx_pos(c), 0);
}

static void test_session_bad_files_are_refused(void **state)
{
    (void)state;
    rvl_model *m = open_model(LLAMA);
    rvl_ctx *c = open_ctx(m, 128, RVL_KV_F16);
    const float *lg;
    assert_int_equal(rvl_decode(c, seq, N, &lg), 0);
    assert_int_equal(rvl_session_save(c, tpath("good.rvls"), seq, N, "{}"), 0);
    size_t n;
    unsigned char *b = slurp(tpath("good.rvls"), &n);
    unsigned char *t = malloc(n);

    /* truncated anywhere: header, blocks, trailer */
    size_t cuts[] = {0, 7, 30, 60, n / 2, n - 9, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        spill(tpath("cut.rvls"), b, cuts[i]);
        expect_refused(c, tpath("cut.rvls"), RVL_EFORMAT, cuts[i] < 8 ? "not a ruvllm session" : "trunc");
    }
    /* one flipped bit anywhere is caught (header, token block, a KV page, trailer) */
    size_t flips[] = {20, 50, 70, 100, n / 3, n - 20, n - 3};
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        memcpy(t, b, n);
        t[flips[i]] ^= 0x10;
        spill(tpath("flip.rvls"), t, n);
        expect_refused(c, tpath("flip.rvls"), RVL_EFORMAT, "checksum");
    }
    /* other magic, other version (with a valid checksum: it is the version that is refused) */
    memcpy(t, b, n);
    memcpy(t, "GGUF\3\0\0\0", 8);
    spill(tpath("magic.rvls"), t, n);
    expect_refused(c, tpath("magic.rvls"), RVL_EFORMAT, "not a ruvllm session");
    memcpy(t, b, n);
    t[8] = 6;
    spill(tpath("ver.rvls"), t, n);
    expect_refused(c, tpath("ver.rvls"), RVL_EFORMAT, "version 6");
    memcpy(t, b, n);
    t[8] = 1;
    spill(tpath("v1.rvls"), t, n);
    expect_refused(c, tpath("v1.rvls"), RVL_EFORMAT,
                   "session format version 1 is no longer supported, re-create the file");
    memcpy(t, b, n);
    t[12] = 1, t[13] = 2, t[14] = 3, t[15] = 4;
    spill(tpath("bom.rvls"), t, n);
    expect_refused(c, tpath("bom.rvls"), RVL_EFORMAT, "endianness");
    /* a page whose tier does not match its formats (checksums made valid:
     * the rule is what is refused) */
    {
        rvl_ctx *tc = open_ctx(m, 128, RVL_KV_TIERED);
        assert_int_equal(rvl_decode(tc, seq, N, &lg), 0);
        assert_int_equal(rvl_session_save(tc, tpath("tier.rvls"), seq, N, NULL), 0);
        size_t tn;
        unsigned char *tb = slurp(tpath("tier.rvls"), &tn);
        size_t at = 88; /* header; then the model, tokens, extra and center blocks */
#define SKIP_BLOCK() (at += 32 + (size_t)(tb[at + 20] | tb[at + 21] << 8 | tb[at + 22] << 16 | \
                                          tb[at + 23] << 24))
        /* quantized keys: stored centred, the flag at 76 and the centre after the extra block;
         * flag bit 2: the model block comes first */
        assert_int_equal(tb[76], 1 | 4);
        assert_int_equal(tb[at], 5);
        SKIP_BLOCK();
        SKIP_BLOCK();
        SKIP_BLOCK();
        assert_int_equal(tb[at], 4);
        assert_int_equal(tb[at + 16] | tb[at + 17] << 8 | tb[at + 18] << 16,
                         4 * rvl_model_hparams(m)->n_layer * rvl_model_hparams(m)->n_head_kv *
                         rvl_model_hparams(m)->head_dim);
        SKIP_BLOCK();
        SKIP_BLOCK(); /* page 0 (the attention sink: f16, tier 0) */
#undef SKIP_BLOCK
        assert_int_equal(tb[at], 3);      /* layer 0, page 1: q8 keys and values, tier 1 */
        assert_int_equal(tb[at + 8], 1);
        assert_int_equal(tb[at + 14], 1);
        tb[at + 14] = 2;
        uint64_t h = XXH3_64bits(tb, tn - 8);
        for (int i = 0; i < 8; i++)
            tb[tn - 8 + i] = (unsigned char)(h >> (8 * i));
        spill(tpath("tier.rvls"), tb, tn);
        expect_refused(tc, tpath("tier.rvls"), RVL_EFORMAT, "holds q8/q8 pages, tier 2 is tq4/tq4");
        /* version 2 had no flags: a centred file that says version 2 is refused */
        tb[at + 14] = 1;
        tb[8] = 2;
        h = XXH3_64bits(tb, 80);
        for (int i = 0; i < 8; i++)
            tb[80 + i] = (unsigned char)(h >> (8 * i));
        h = XXH3_64bits(tb, tn - 8);
        for (int i = 0; i < 8; i++)
            tb[tn - 8 + i] = (unsigned char)(h >> (8 * i));
        spill(tpath("v2flags.rvls"), tb, tn);
        expect_refused(tc, tpath("v2flags.rvls"), RVL_EFORMAT, "unknown flags 0x00000005 at offset 76");
        free(tb);
        rvl_ctx_close(tc);
    }
    /* a missing file */
    expect_refused(c, tpath("none.rvls"), RVL_ENOTFOUND, "none.rvls");

    /* another context: other formats, a context too small */
    rvl_ctx *c32 = open_ctx(m, 128, RVL_KV_F32);
    expect_refused(c32, tpath("good.rvls"), RVL_EFORMAT, "(keys f16, values f16) differ from this "
                   "context's (keys f32, values f32): use the --kv-type options");
    rvl_ctx *tq = open_ctx(m, 128, RVL_KV_TIERED);
    expect_refused(tq, tpath("good.rvls"), RVL_EFORMAT, "context's (keys tiered (hot 16, warm 32, "
                   "cold tq4)");
    rvl_ctx *small = open_ctx(m, 16, RVL_KV_F16);
    expect_refused(small, tpath("good.rvls"), RVL_EFORMAT, "larger -c");
    rvl_ctx_close(c32);
    rvl_ctx_close(tq);
    rvl_ctx_close(small);

    /* another model, even one of the same shape (llama-tied differs only in weights): the
     * refusal names the model that made the file, by its store name and path */
    const char *others[] = {QWEN2, "tests/data/tiny/llama-linear.gguf"};
    char *abs = realpath(LLAMA, NULL), made_by[4200];
    assert_non_null(abs);
    snprintf(made_by, sizeof made_by, "made for another model, llama (%s)", abs);
    free(abs);
    for (int i = 0; i < 2; i++) {
        rvl_model *o = open_model(others[i]);
        rvl_ctx *oc = open_ctx(o, 128, RVL_KV_F16);
        expect_refused(oc, tpath("good.rvls"), RVL_EFORMAT, made_by);
        rvl_ctx_close(oc);
        rvl_model_close(o);
    }
    free(b);
    free(t);
    rvl_ctx_close(c);
    rvl_model_close(m);
}

/* A file without the model block (flag bit 2), as ruvllm wrote them before it
 * named the model, still loads; refused by another model, it says "another
 * model" without a name. */
static void test_session_without_model_block_still_loads(void **state)
{
    (void)state;
    rvl_model *m = open_model(LLAMA);
    rvl_ctx *c = open_ctx(m, 128, RVL_KV_F16);
    const float *lg;
    assert_int_equal(rvl_decode(c, seq, N, &lg), 0);
    assert_int_equal(rvl_session_save(c, tpath("named.rvls"), seq, N, "{\"k\": 1}"), 0);
    size_t n;
    unsigned char *b = slurp(tpath("named.rvls"), &n);
    assert_int_equal(b[8], 3);
    assert_int_equal(b[76], 4);                 /* flag bit 2 */
    assert_int_equal(b[88], 5);                 /* the model block first */
    const size_t z = 32 + (size_t)(b[88 + 20] | b[88 + 21] << 8 | b[88 + 22] << 16);
    /* the file without it: the flag cleared, the block cut, the checksums redone */
    unsigned char *o = malloc(n - z);
    assert_non_null(o);
    memcpy(o, b, 88);
    memcpy(o + 88, b + 88 + z, n - 88 - z);
    o[76] = 0;
    uint64_t h = XXH3_64bits(o, 80);
    for (int i = 0; i < 8; i++)
        o[80 + i] = (unsigned char)(h >> (8 * i));
    h = XXH3_64bits(o, n - z - 8);
    for (int i = 0; i < 8; i++)
        o[n - z - 8 + i] = (unsigned char)(h >> (8 * i));
    spill(tpath("old.rvls"), o, n - z);
    rvl_ctx_reset(c);
    int32_t *ids = NULL;
    size_t ni = 0;
    char *extra = NULL;
    assert_int_equal(rvl_session_load(c, tpath("old.rvls"), &ids, &ni, &extra), 0);
    assert_int_equal(ni, N);
    assert_memory_equal(ids, seq, N * sizeof *ids);
    assert_string_equal(extra, "{\"k\": 1}");
    free(ids);
    free(extra);
    rvl_model *q = open_model(QWEN2);
    rvl_ctx *qc = open_ctx(q, 128, RVL_KV_F16);
    expect_refused(qc, tpath("old.rvls"), RVL_EFORMAT, "made for another model (fingerprint");
    rvl_ctx_close(qc);
    rvl_model_close(q);
    free(o);
    free(b);
    rvl_ctx_close(c);
    rvl_model_close(m);
}

static void test_ctx_truncate_rewinds(void **state)
{
    (void)state;
    rvl_model *m = open_model(LLAMA);
    const uint32_t V = rvl_model_hparams(m)->n_vocab;
    rvl_ctx *c = open_ctx(m, 64, RVL_KV_F16);
    const float *lg;
    assert_int_equal(rvl_decode(c, seq, 20, &lg), 0);
    float *want = malloc(V * sizeof *want);
    memcpy(want, lg, V * sizeof *want);
    assert_int_equal(rvl_decode(c, seq + 20, 5, &lg), 0);
    assert_int_equal(rvl_ctx_truncate(c, 30), RVL_ERANGE);
    assert_int_equal(rvl_ctx_pos(c), 25);
    assert_int_equal(rvl_ctx_truncate(c, 19), 0);
    assert_int_equal(rvl_ctx_pos(c), 19);
    assert_int_equal(rvl_decode(c, seq + 19, 1, &lg), 0);
    assert_memory_equal(lg, want, V * sizeof *want);
    free(want);
    rvl_ctx_close(c);
    rvl_model_close(m);
}

int main(void)
{
    make_seq();
    /* model names: a file outside the store is named by its file name */
    setenv("RUVLLM_MODELS", "/nonexistent/ruvllm-test-store", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_restore_continues_exactly),
        cmocka_unit_test(test_session_windowed_rings_restore_exactly),
        cmocka_unit_test(test_session_save_checks_ids_and_leaves_no_temp),
        cmocka_unit_test(test_session_bad_files_are_refused),
        cmocka_unit_test(test_session_without_model_block_still_loads),
        cmocka_unit_test(test_ctx_truncate_rewinds),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
