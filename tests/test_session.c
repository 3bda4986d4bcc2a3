/*
 * test_session.c - session files (lib/session.c): saving a context's cache
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

#include "ruvllm.h"

#define LLAMA "tests/data/tiny/llama.gguf"
#define QWEN2 "tests/data/tiny/qwen2.gguf"
#define N 40

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
    rvl_ctx_params p = {.n_ctx = n_ctx, .n_threads = 1, .kv_type = kt};
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
    rvl_kv_type kts[] = {RVL_KV_F16, RVL_KV_F32};
    for (int ki = 0; ki < 2; ki++) {
        rvl_model *m = open_model(LLAMA);
        const uint32_t V = rvl_model_hparams(m)->n_vocab;
        const float *lg;
        /* uninterrupted: 33 tokens (one full page and one more), then the rest */
        rvl_ctx *a = open_ctx(m, 64, kts[ki]);
        assert_int_equal(rvl_decode(a, seq, 33, &lg), 0);
        assert_int_equal(rvl_session_save(a, tpath("s.rvls"), seq, 33, "{\"k\":\"v\"}"), 0);
        float *want = malloc(V * sizeof *want);
        assert_int_equal(rvl_decode(a, seq + 33, N - 33, &lg), 0);
        memcpy(want, lg, V * sizeof *want);

        /* a new context, restored, then the same tokens */
        rvl_ctx *b = open_ctx(m, 64, kts[ki]);
        int32_t *ids = NULL;
        size_t n = 0;
        char *extra = NULL;
        assert_int_equal(rvl_session_load(b, tpath("s.rvls"), &ids, &n, &extra), 0);
        assert_int_equal(n, 33);
        assert_int_equal(rvl_ctx_pos(b), 33);
        assert_memory_equal(ids, seq, 33 * sizeof *ids);
        assert_string_equal(extra, "{\"k\":\"v\"}");
        assert_int_equal(rvl_decode(b, seq + 33, N - 33, &lg), 0);
        assert_memory_equal(lg, want, V * sizeof *want); /* bit for bit */

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
    rvl_ctx *c = open_ctx(m, 64, RVL_KV_F16);
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
    size_t flips[] = {20, 50, 70, n / 3, n - 20, n - 3};
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
    t[8] = 2;
    spill(tpath("ver.rvls"), t, n);
    expect_refused(c, tpath("ver.rvls"), RVL_EFORMAT, "version 2");
    memcpy(t, b, n);
    t[12] = 1, t[13] = 2, t[14] = 3, t[15] = 4;
    spill(tpath("bom.rvls"), t, n);
    expect_refused(c, tpath("bom.rvls"), RVL_EFORMAT, "endianness");
    /* a missing file */
    expect_refused(c, tpath("none.rvls"), RVL_ENOTFOUND, "none.rvls");

    /* another context: a different element type, a context too small */
    rvl_ctx *c32 = open_ctx(m, 64, RVL_KV_F32);
    expect_refused(c32, tpath("good.rvls"), RVL_EFORMAT, "--kv-type f16");
    rvl_ctx *small = open_ctx(m, 16, RVL_KV_F16);
    expect_refused(small, tpath("good.rvls"), RVL_EFORMAT, "larger -c");
    rvl_ctx_close(c32);
    rvl_ctx_close(small);

    /* another model, even one of the same shape (llama-tied differs only in weights) */
    const char *others[] = {QWEN2, "tests/data/tiny/llama-linear.gguf"};
    for (int i = 0; i < 2; i++) {
        rvl_model *o = open_model(others[i]);
        rvl_ctx *oc = open_ctx(o, 64, RVL_KV_F16);
        expect_refused(oc, tpath("good.rvls"), RVL_EFORMAT, "another model");
        rvl_ctx_close(oc);
        rvl_model_close(o);
    }
    free(b);
    free(t);
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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_restore_continues_exactly),
        cmocka_unit_test(test_session_save_checks_ids_and_leaves_no_temp),
        cmocka_unit_test(test_session_bad_files_are_refused),
        cmocka_unit_test(test_ctx_truncate_rewinds),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
