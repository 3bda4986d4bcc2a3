/*
 * test_gen.c - the generation loop's stop strings (cmd/gen.c, shared by
 * run and chat): a stop string whose bytes come from two tokens ends the
 * reply, and no part of it is ever printed, not even the part the first
 * token brought before the second one showed that it was a stop; a text
 * that only begins like a stop string is held back and then printed whole.
 *
 * The tokens come from the tiny random-weight model of tests/data/tiny/
 * decoding greedily (its end of text masked), so they are fixed; the stop
 * strings are cut from that run's own text where the text of one token
 * ends and the next one's begins, so the test does not depend on which
 * tokens they are.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the loop under test is part of the CLI, not of libruvllm.a */
#include "../cmd/gen.c"

#define TINY "tests/data/tiny/llama.gguf"
enum { N_GEN = 32 };

typedef struct {
    rvl_model *m;
    rvl_ctx *c;
    rvl_sampler *smp;
    const rvl_tokenizer *tok;
} engine;

/* What emit received: every byte, and how much had arrived after each call
 * (emit is called with text only, at most once per token). */
typedef struct {
    rvl_buf all;
    size_t calls;
    size_t end[N_GEN + 1];
} sink;

static int record(void *ud, const char *s, size_t n)
{
    sink *k = ud;
    if (rvl_buf_add(&k->all, s, n) < 0)
        return RVL_ENOMEM;
    if (k->calls <= N_GEN)
        k->end[k->calls] = k->all.n;
    k->calls++;
    return 0;
}

static int setup(void **state)
{
    engine *e = calloc(1, sizeof *e);
    if (!e || rvl_model_open(&e->m, TINY) < 0)
        return -1;
    rvl_ctx_params cp = {.n_ctx = 128, .n_threads = 1};
    rvl_sampler_params sp;
    rvl_sampler_defaults(&sp);
    sp.temp = 0;   /* greedy: the same tokens every run */
    if (rvl_ctx_open(&e->c, e->m, &cp) < 0 ||
        rvl_sampler_open(&e->smp, &sp, rvl_model_hparams(e->m)->n_vocab) < 0)
        return -1;
    e->tok = rvl_model_tokenizer(e->m);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    engine *e = *state;
    rvl_sampler_close(e->smp);
    rvl_ctx_close(e->c);
    rvl_model_close(e->m);
    free(e);
    return 0;
}

/* One reply to a fixed prompt from an empty cache, with these stop strings. */
static void reply(engine *e, const char *const *stops, sink *k, gen_result *r)
{
    static const char prompt[] = "Once upon a time";
    int32_t *ids = NULL;
    size_t n = 0;
    const float *logits;
    rvl_ctx_reset(e->c);
    rvl_sampler_reset(e->smp);
    assert_int_equal(rvl_tok_encode_alloc(e->tok, prompt, strlen(prompt), true, false, &ids, &n), 0);
    assert_int_equal(rvl_decode(e->c, ids, (uint32_t)n, &logits), 0);
    for (size_t i = 0; i < n; i++)
        rvl_sampler_accept(e->smp, ids[i]);
    free(ids);
    *k = (sink){0};
    gen_params p = {.ctx = e->c, .smp = e->smp, .tok = e->tok, .stop_strs = stops,
                    .max_tokens = N_GEN, .ignore_eos = true, .emit = record, .ud = k};
    assert_int_equal(gen_reply(&p, logits, r), 0);
}

/* The free run (no stop strings): its text arrives in one call per token. */
static void run_free(engine *e, sink *k, gen_result *r)
{
    reply(e, NULL, k, r);
    assert_int_equal(r->finish, GEN_LENGTH);
    assert_int_equal(r->n_ids, N_GEN);
    assert_true(k->calls >= 3 && k->calls <= N_GEN + 1);
    assert_int_equal(k->all.n, r->text.n);
    assert_memory_equal(k->all.p, r->text.p, r->text.n);
}

/* Where two tokens' texts meet with an ASCII byte on either side (not part
 * of a multi-byte character) and those two bytes occur nowhere earlier:
 * the stop string made of them first appears across that boundary.
 * Returns the offset of the boundary. */
static size_t pick_boundary(const sink *k, char stop[3])
{
    const unsigned char *t = (const unsigned char *)k->all.p;
    for (size_t c = 1; c < k->calls && c <= N_GEN; c++) {
        size_t b = k->end[c - 1];
        if (t[b - 1] >= 0x80 || t[b] >= 0x80 || !t[b - 1] || !t[b])
            continue;
        stop[0] = (char)t[b - 1];
        stop[1] = (char)t[b];
        stop[2] = 0;
        if (memmem(t, k->all.n, stop, 2) == t + b - 1)
            return b;
    }
    fail_msg("no token boundary with a stop string that first occurs there");
    return 0;
}

static void test_gen_stop_string_split_across_two_tokens_is_never_printed(void **state)
{
    engine *e = *state;
    sink fk;
    gen_result f;
    run_free(e, &fk, &f);
    char stop[3];
    const size_t before = pick_boundary(&fk, stop) - 1;   /* text ahead of the stop string */

    const char *stops[] = {stop, NULL};
    sink k;
    gen_result r;
    reply(e, stops, &k, &r);
    assert_int_equal(r.finish, GEN_STOP);
    /* the same tokens up to the one that completed the stop string, none after */
    assert_true(r.n_ids < N_GEN);
    assert_memory_equal(r.ids, f.ids, r.n_ids * sizeof *r.ids);
    /* printed: exactly the text before the stop string; the byte the first
     * token brought (the stop's first half) was held back, then dropped */
    assert_int_equal(k.all.n, before);
    assert_memory_equal(k.all.p, f.text.p, before);
    assert_int_equal(r.text.n, before);
    rvl_buf_free(&k.all);
    gen_result_free(&r);
    rvl_buf_free(&fk.all);
    gen_result_free(&f);
}

static void test_gen_text_that_only_begins_a_stop_string_is_printed_whole(void **state)
{
    engine *e = *state;
    sink fk;
    gen_result f;
    run_free(e, &fk, &f);
    char stop[3];
    pick_boundary(&fk, stop);
    /* the first byte of the same stop string, then one the text never has */
    char almost[3] = {stop[0], 0, 0};
    for (int ch = 1; ch < 0x80 && !almost[1]; ch++) {
        almost[1] = (char)ch;
        if (memmem(f.text.p, f.text.n, almost, 2))
            almost[1] = 0;
    }
    assert_true(almost[1] != 0);
    const char *stops[] = {almost, NULL};
    sink k;
    gen_result r;
    reply(e, stops, &k, &r);
    assert_int_equal(r.finish, GEN_LENGTH);
    assert_int_equal(r.n_ids, N_GEN);
    assert_int_equal(k.all.n, f.text.n);
    assert_memory_equal(k.all.p, f.text.p, f.text.n);
    rvl_buf_free(&k.all);
    gen_result_free(&r);
    rvl_buf_free(&fk.all);
    gen_result_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gen_stop_string_split_across_two_tokens_is_never_printed),
        cmocka_unit_test(test_gen_text_that_only_begins_a_stop_string_is_printed_whole),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
