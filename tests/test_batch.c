/*
 * test_batch.c - many sequences decoded together (lib/engine/batch.c) get
 * the logits each gets alone.
 *
 * On tiny models of tests/data/tiny (llama; mixtral's experts, whose GEMM
 * groups mix the sequences' rows; deepseek3's latent cache; gpt-oss's
 * window and sinks), three sequences are fed steps that mix a prompt chunk
 * of one with single tokens of the others, sequences starting late and
 * one reset and reused; every logit row must be memcmp-equal to the same
 * sequence decoded alone on its own context, in the same chunks.
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

#define DATA_DIR "tests/data/tiny"
#define N_SEQ 3
#define N_TOK 40

static int32_t tokens[N_SEQ][N_TOK];

/* Sequence s's tokens: tokens.txt from offset 7 s, wrapping. */
static void load_tokens(uint32_t n_vocab)
{
    FILE *f = fopen(DATA_DIR "/tokens.txt", "r");
    assert_non_null(f);
    int32_t all[256];
    int n = 0;
    long v;
    while (n < 256 && fscanf(f, "%ld", &v) == 1)
        all[n++] = (int32_t)v;
    fclose(f);
    assert_true(n >= 48);
    for (int s = 0; s < N_SEQ; s++)
        for (int t = 0; t < N_TOK; t++)
            tokens[s][t] = all[(7 * s + t) % n] % (int32_t)n_vocab;
}

/* The schedule: step k gives sequence s a chunk of chunk(s, k) tokens
 * (0: it sits this step out). Sequence 0 starts with a prompt of 9, 1
 * joins at step 2 with 13, 2 at step 4 with 30 (the step then spans two
 * chunks of RVL_UBATCH rows); then one or two tokens each. */
static uint32_t chunk(int s, int k, uint32_t done)
{
    static const int start[N_SEQ] = {0, 2, 4}, first[N_SEQ] = {9, 13, 30};
    if (k < start[s] || done >= N_TOK)
        return 0;
    const uint32_t want = k == start[s] ? (uint32_t)first[s] : (k % 3 == s ? 2u : 1u);
    return done + want > N_TOK ? N_TOK - done : want;
}

static void check_model(const char *name, rvl_kv_type kv)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.gguf", DATA_DIR, name);
    rvl_model *m = NULL;
    if (rvl_model_open(&m, path) < 0)
        fail_msg("%s: %s", path, rvl_errmsg());
    const uint32_t nv = rvl_model_hparams(m)->n_vocab;
    load_tokens(nv);
    rvl_ctx_params cp = {.n_ctx = 64, .n_threads = 2, .kv_type = kv};
    rvl_batch *b = NULL;
    if (rvl_batch_open(&b, m, &cp, N_SEQ) < 0)
        fail_msg("rvl_batch_open: %s", rvl_errmsg());
    rvl_ctx *alone[N_SEQ];
    for (int s = 0; s < N_SEQ; s++)
        if (rvl_ctx_open(&alone[s], m, &cp) < 0)
            fail_msg("rvl_ctx_open: %s", rvl_errmsg());

    uint32_t done[N_SEQ] = {0};
    int rounds = 0;
    for (int k = 0; rounds < 2; k++) {
        uint32_t seq[N_SEQ], n[N_SEQ], ni = 0;
        const int32_t *tk[N_SEQ];
        for (int s = 0; s < N_SEQ; s++) {
            const uint32_t c = chunk(s, k, done[s]);
            if (!c)
                continue;
            seq[ni] = (uint32_t)s;
            tk[ni] = tokens[s] + done[s];
            n[ni++] = c;
        }
        if (!ni) { /* all done: reset sequence 1 and run it again alone in the batch */
            if (++rounds == 2)
                break;
            assert_int_equal(rvl_batch_seq_reset(b, 1), 0);
            rvl_ctx_reset(alone[1]);
            done[1] = 0;
            for (uint32_t t = 0; t < N_TOK; t += 4) {
                const uint32_t c = N_TOK - t < 4 ? N_TOK - t : 4;
                const int32_t *p = tokens[1] + t;
                const float *lb, *la;
                assert_int_equal(rvl_batch_decode(b, 1, (const uint32_t[]){1}, &p, &c, &lb), 0);
                assert_int_equal(rvl_decode(alone[1], p, c, &la), 0);
                assert_memory_equal(lb, la, nv * sizeof *lb);
            }
            done[1] = N_TOK;
            continue;
        }
        const float *lg[N_SEQ];
        if (rvl_batch_decode(b, ni, seq, tk, n, lg) < 0)
            fail_msg("%s step %d: %s", name, k, rvl_errmsg());
        for (uint32_t i = 0; i < ni; i++) {
            const float *la;
            assert_int_equal(rvl_decode(alone[seq[i]], tk[i], n[i], &la), 0);
            if (memcmp(lg[i], la, nv * sizeof *la) != 0)
                fail_msg("%s: step %d, sequence %u (%u tokens at %u): logits differ from alone",
                         name, k, seq[i], n[i], done[seq[i]]);
            done[seq[i]] += n[i];
            assert_int_equal(rvl_batch_seq_pos(b, seq[i]), done[seq[i]]);
        }
    }
    for (int s = 0; s < N_SEQ; s++)
        rvl_ctx_close(alone[s]);
    rvl_batch_close(b);
    rvl_model_close(m);
}

static void test_llama(void **state) { (void)state; check_model("llama", RVL_KV_F16); }
static void test_mixtral(void **state) { (void)state; check_model("mixtral", RVL_KV_F32); }
static void test_deepseek3(void **state) { (void)state; check_model("deepseek3", RVL_KV_Q8); }
static void test_gpt_oss(void **state) { (void)state; check_model("gpt-oss", RVL_KV_TIERED); }

/* Bad steps are refused before any sequence moves. */
static void test_bad_steps(void **state)
{
    (void)state;
    rvl_model *m = NULL;
    assert_int_equal(rvl_model_open(&m, DATA_DIR "/llama.gguf"), 0);
    rvl_ctx_params cp = {.n_ctx = 8, .n_threads = 1};
    rvl_batch *b = NULL;
    assert_int_equal(rvl_batch_open(&b, m, &cp, 0), RVL_EINVAL);
    assert_int_equal(rvl_batch_open(&b, m, &cp, 2), 0);
    const int32_t t[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const int32_t *tp[2] = {t, t};
    const float *lg[2];
    assert_int_equal(rvl_batch_decode(b, 2, (const uint32_t[]){0, 0}, tp,
                                      (const uint32_t[]){1, 1}, lg), RVL_EINVAL);
    assert_int_equal(rvl_batch_decode(b, 1, (const uint32_t[]){2}, tp, (const uint32_t[]){1}, lg),
                     RVL_EINVAL);
    assert_int_equal(rvl_batch_decode(b, 2, (const uint32_t[]){0, 1}, tp,
                                      (const uint32_t[]){2, 9}, lg), RVL_ERANGE);
    assert_int_equal(rvl_batch_seq_pos(b, 0), 0);
    assert_int_equal(rvl_batch_decode(b, 2, (const uint32_t[]){0, 1}, tp,
                                      (const uint32_t[]){2, 8}, lg), 0);
    assert_int_equal(rvl_batch_seq_pos(b, 1), 8);
    /* what each sequence's cache holds: its own positions, none after a reset */
    rvl_kv_usage u0, u1;
    assert_int_equal(rvl_batch_seq_kv_usage(b, 0, &u0), 0);
    assert_int_equal(rvl_batch_seq_kv_usage(b, 1, &u1), 0);
    assert_int_equal(u0.n, 2);
    assert_int_equal(u1.n, 8);
    assert_true(u0.bytes > 0 && u1.bytes >= u0.bytes);
    assert_int_equal(rvl_batch_seq_reset(b, 1), 0);
    assert_int_equal(rvl_batch_seq_kv_usage(b, 1, &u1), 0);
    assert_int_equal(u1.n, 0);
    assert_int_equal(rvl_batch_seq_kv_usage(b, 2, &u1), RVL_EINVAL);
    rvl_batch_close(b);
    rvl_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_mixtral),
        cmocka_unit_test(test_deepseek3),
        cmocka_unit_test(test_gpt_oss),
        cmocka_unit_test(test_bad_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
