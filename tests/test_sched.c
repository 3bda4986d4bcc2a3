/*
 * test_sched.c - the scheduler (lib/engine/sched.c): requests run together
 * give what each gives alone.
 *
 * The reference is a plain generation on one rvl_ctx: the prompt decoded
 * at once, then cmd/gen.c's loop (sample, end tokens, stop strings held
 * back, streaming detokenizer, max_tokens, a full context). Requests with
 * different prompts, lengths, max_tokens, temperatures and seeds go
 * through the scheduler with 1, 3 and 8 sequences in flight and small or
 * default step budgets (long prompts fed over several steps while others
 * decode): every text must be byte-identical to its reference, with the
 * same finish reason and token count. On tiny random-weight models
 * (tests/data/tiny) and the default model (skipped when absent). Then the
 * queue's bound (RVL_EBUSY), cancelling (rvl_sched_cancel mid-reply, a
 * negative on_text, a queued request), stop strings, a KV budget that
 * holds requests in the queue until their pages fit (prompts sharing
 * their first pages), and two threads submitting while a third runs the
 * steps.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruvllm.h"

#define DATA_DIR "tests/data/tiny"
#define MAX_REQ 16

/* ====================================================================
 * A request and what came of it
 * ==================================================================== */

typedef struct {
    int32_t prompt[256];
    uint32_t n_prompt;
    int32_t max_tokens;
    rvl_sampler_params sp;
    const char *stops[3];
    bool ignore_eos;
} spec;

typedef struct {
    rvl_buf text;
    const char *finish;
    uint32_t n_gen, n_prompt;
    int n_done;                 /* on_done calls */
    /* cancelling from on_text */
    rvl_sched *s;
    int64_t id;
    size_t cancel_after;        /* bytes (0: never) */
    bool cancel_by_return;      /* a negative return instead of rvl_sched_cancel */
    pthread_mutex_t *mu;        /* for the threaded test */
    pthread_cond_t *cv;
    int *n_finished;
} outcome;

static void outcome_free(outcome *o)
{
    rvl_buf_free(&o->text);
    *o = (outcome){0};
}

/* ====================================================================
 * The reference: alone on a context, gen_reply's loop
 * ==================================================================== */

static bool is_eog(const rvl_tokenizer *t, int32_t id) { return rvl_tok_is_eog(t, id); }

static void emit_ref(outcome *o, const char *s, size_t n)
{
    assert_int_equal(rvl_buf_add(&o->text, s, n), 0);
}

static void ref_generate(rvl_ctx *c, const spec *q, outcome *o)
{
    const rvl_model *m = rvl_ctx_model(c);
    const rvl_tokenizer *tok = rvl_model_tokenizer(m);
    const uint32_t nv = rvl_model_hparams(m)->n_vocab, n_ctx = rvl_ctx_n_ctx(c);
    rvl_ctx_reset(c);
    *o = (outcome){0};
    o->n_prompt = q->n_prompt;
    rvl_sampler *smp = NULL;
    assert_int_equal(rvl_sampler_open(&smp, &q->sp, nv), 0);
    for (uint32_t i = 0; i < q->n_prompt; i++)
        rvl_sampler_accept(smp, q->prompt[i]);
    const float *logits;
    assert_int_equal(rvl_decode(c, q->prompt, q->n_prompt, &logits), 0);
    float *masked = malloc(nv * sizeof *masked);
    char piece[256];
    rvl_buf pend = {0};
    rvl_detok dt;
    rvl_detok_init(&dt, tok, false);
    o->finish = "length";
    for (;;) {
        if (q->max_tokens >= 0 && o->n_gen >= (uint32_t)q->max_tokens)
            break;
        memcpy(masked, logits, nv * sizeof *masked);
        for (uint32_t i = 0; q->ignore_eos && i < nv; i++)
            if (is_eog(tok, (int32_t)i))
                masked[i] = -INFINITY;
        int32_t id = rvl_sampler_sample(smp, masked);
        rvl_sampler_accept(smp, id);
        o->n_gen++;
        if (is_eog(tok, id)) {
            o->finish = "stop";
            break;
        }
        size_t pn = 0;
        assert_int_equal(rvl_detok_push(&dt, id, piece, sizeof piece, &pn), 0);
        assert_int_equal(rvl_buf_add(&pend, piece, pn), 0);
        long at = rvl_stop_find(q->stops, pend.p, pend.n);
        if (at >= 0) {
            emit_ref(o, pend.p, (size_t)at);
            pend.n = 0;
            o->finish = "stop";
            break;
        }
        size_t out = pend.n - rvl_stop_holdback(q->stops, pend.p, pend.n);
        emit_ref(o, pend.p, out);
        memmove(pend.p, pend.p + out, pend.n - out);
        pend.n -= out;
        if (rvl_ctx_pos(c) >= n_ctx)
            break;
        assert_int_equal(rvl_decode(c, &id, 1, &logits), 0);
    }
    if (strcmp(o->finish, "stop") != 0 || pend.n) {
        size_t pn = 0;
        assert_int_equal(rvl_detok_flush(&dt, piece, sizeof piece, &pn), 0);
        assert_int_equal(rvl_buf_add(&pend, piece, pn), 0);
        emit_ref(o, pend.p, pend.n);
    }
    assert_int_equal(rvl_buf_add(&o->text, "", 0), 0);
    rvl_buf_free(&pend);
    free(masked);
    rvl_sampler_close(smp);
}

/* ====================================================================
 * Through the scheduler
 * ==================================================================== */

/* test_kv_budget watches the scheduler from on_text: the most requests
 * running at once, and whether one waited for room (queued while a
 * sequence was free). */
static rvl_sched *watch;
static uint32_t watch_par, watch_max_run;
static bool watch_waited;

static int on_text(void *ud, const char *t, size_t n)
{
    outcome *o = ud;
    if (watch) {
        rvl_sched_stats st;
        rvl_sched_stats_get(watch, &st);
        watch_max_run = st.running > watch_max_run ? st.running : watch_max_run;
        watch_waited |= st.queued > 0 && st.running < watch_par;
    }
    assert_int_equal(rvl_buf_add(&o->text, t, n), 0);
    if (o->cancel_after && o->text.n >= o->cancel_after) {
        if (o->cancel_by_return)
            return -1;
        assert_int_equal(rvl_sched_cancel(o->s, o->id), 0);
        o->cancel_after = 0;
    }
    return 0;
}

static void on_done(void *ud, const rvl_sched_result *r)
{
    outcome *o = ud;
    if (o->mu)
        pthread_mutex_lock(o->mu);
    o->finish = r->finish_reason;
    o->n_gen = r->n_gen;
    o->n_prompt = r->n_prompt;
    o->n_done++;
    assert_int_equal(rvl_buf_add(&o->text, "", 0), 0);
    if (o->mu) {
        (*o->n_finished)++;
        pthread_cond_broadcast(o->cv);
        pthread_mutex_unlock(o->mu);
    }
}

static rvl_sched_request make_request(const spec *q, outcome *o)
{
    return (rvl_sched_request){
        .prompt = q->prompt, .n_prompt = q->n_prompt, .max_tokens = q->max_tokens,
        .sampling = q->sp, .stops = q->stops[0] ? q->stops : NULL,
        .ignore_eos = q->ignore_eos, .on_text = on_text, .on_done = on_done, .ud = o,
    };
}

static void expect_same(const char *what, const spec *q, int i, const outcome *got,
                        const outcome *want)
{
    if (got->n_done != 1 || strcmp(got->finish, want->finish) != 0 ||
        got->n_gen != want->n_gen || got->text.n != want->text.n ||
        memcmp(got->text.p, want->text.p, want->text.n) != 0)
        fail_msg("%s: request %d (prompt %u, max %d, temp %.2f, seed %llu): got %d done, %s, "
                 "%u tokens, \"%.*s\"; alone: %s, %u tokens, \"%.*s\"", what, i, q->n_prompt,
                 q->max_tokens, q->sp.temp, (unsigned long long)q->sp.seed, got->n_done,
                 got->finish, got->n_gen, (int)got->text.n, got->text.p, want->finish,
                 want->n_gen, (int)want->text.n, want->text.p);
}

/* Every request through a scheduler of n_par sequences and a step budget
 * of n_step tokens, against want[]. */
static void run_all(const rvl_model *m, const rvl_ctx_params *cp, const spec *q, int n,
                    const outcome *want, uint32_t n_par, uint32_t n_step, const char *name)
{
    rvl_sched_params sp = {.ctx = *cp, .n_parallel = n_par, .n_step_tokens = n_step};
    rvl_sched *s = NULL;
    if (rvl_sched_open(&s, m, &sp) < 0)
        fail_msg("rvl_sched_open: %s", rvl_errmsg());
    outcome got[MAX_REQ] = {0};
    for (int i = 0; i < n; i++) {
        rvl_sched_request r = make_request(&q[i], &got[i]);
        int64_t id = rvl_sched_submit(s, &r);
        if (id <= 0)
            fail_msg("submit %d: %s", i, rvl_errmsg());
    }
    assert_int_equal(rvl_sched_run(s, true), 0);
    rvl_sched_stats st;
    rvl_sched_stats_get(s, &st);
    assert_int_equal(st.submitted, (uint64_t)n);
    assert_int_equal(st.completed, (uint64_t)n);
    assert_int_equal(st.running + st.queued, 0);
    char what[128];
    snprintf(what, sizeof what, "%s, %u in parallel, steps of %u", name, n_par, n_step);
    uint64_t pt = 0, gt = 0;
    for (int i = 0; i < n; i++) {
        expect_same(what, &q[i], i, &got[i], &want[i]);
        pt += q[i].n_prompt;
        gt += want[i].n_gen;
    }
    assert_int_equal(st.prompt_tokens + st.prompt_reused, pt);
    assert_int_equal(st.gen_tokens, gt);
    rvl_sched_close(s);
    for (int i = 0; i < n; i++) {
        assert_int_equal(got[i].n_done, 1);   /* close calls nothing more */
        outcome_free(&got[i]);
    }
}

/* Alone, then through the scheduler: every pairing of 1, 3, 8 sequences
 * with steps of 7, RVL_UBATCH and 100 tokens (a step then holds prompt
 * pieces longer than a chunk beside other sequences' tokens; all: only
 * every other pairing). */
static void check_equal_alone(const rvl_model *m, const rvl_ctx_params *cp, const spec *q, int n,
                              const char *name, bool all)
{
    outcome want[MAX_REQ];
    for (int i = 0; i < n; i++) { /* each in a new context, as `ruvllm run` would */
        rvl_ctx *c = NULL;
        assert_int_equal(rvl_ctx_open(&c, m, cp), 0);
        ref_generate(c, &q[i], &want[i]);
        rvl_ctx_close(c);
    }
    size_t text = 0;   /* the replies say something */
    for (int i = 0; i < n; i++)
        text += want[i].text.n;
    assert_true(text > (size_t)n);
    static const uint32_t pars[] = {1, 3, 8}, steps[] = {0, 7, 100};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++)
            if (all || (a + b) % 2 == 1)
                run_all(m, cp, q, n, want, pars[a], steps[b], name);
    for (int i = 0; i < n; i++)
        outcome_free(&want[i]);
}

/* ====================================================================
 * Tiny models: prompts cut from tokens.txt
 * ==================================================================== */

static int32_t all_tokens[256];
static int n_all;

static void load_tokens(void)
{
    FILE *f = fopen(DATA_DIR "/tokens.txt", "r");
    assert_non_null(f);
    long v;
    n_all = 0;
    while (n_all < 256 && fscanf(f, "%ld", &v) == 1)
        all_tokens[n_all++] = (int32_t)v;
    fclose(f);
    assert_true(n_all >= 48);
}

/* Ten requests: prompts of 1 to 45 tokens, max_tokens 0 to unlimited
 * (some reach the end of a 64-token context), greedy and sampled. */
static int tiny_specs(spec *q, uint32_t nv)
{
    static const uint32_t len[] = {5, 45, 1, 17, 33, 9, 40, 2, 23, 12};
    static const int32_t max[] = {12, 30, 7, -1, 0, 25, -1, 18, 5, 40};
    static const float temp[] = {0, 0.8f, 1.2f, 0, 0.7f, 1.0f, 0.9f, 0, 1.5f, 0.6f};
    const int n = 10;
    for (int i = 0; i < n; i++) {
        q[i] = (spec){.n_prompt = len[i], .max_tokens = max[i], .ignore_eos = i % 4 == 1};
        for (uint32_t t = 0; t < len[i]; t++)
            q[i].prompt[t] = all_tokens[(11 * i + t) % n_all] % (int32_t)nv;
        rvl_sampler_defaults(&q[i].sp);
        q[i].sp.temp = temp[i];
        q[i].sp.seed = 1000 + 17 * (uint64_t)i;
        if (i == 5)
            q[i].sp.repeat_penalty = 1.3f;
    }
    return n;
}

static void check_tiny(const char *name, rvl_kv_type kv)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.gguf", DATA_DIR, name);
    rvl_model *m = NULL;
    if (rvl_model_open(&m, path) < 0)
        fail_msg("%s: %s", path, rvl_errmsg());
    load_tokens();
    spec q[MAX_REQ];
    const int n = tiny_specs(q, rvl_model_hparams(m)->n_vocab);
    rvl_ctx_params cp = {.n_ctx = 64, .n_threads = 2, .kv_type = kv};
    check_equal_alone(m, &cp, q, n, name, true);
    rvl_model_close(m);
}

/* Prompts of several pages on centred quantized keys (q4): a sequence's
 * pages are quantized and its key centre fixed at the commits of its
 * prompt's chunks, so the scheduler's pieces (steps of 7 tokens: pieces
 * that do not end at a page) and the batch's chunks (an item beside
 * others) must cut the prompt where rvl_decode cuts it alone, and a
 * sequence used again must fix its own centre. */
static void test_tiny_llama_long_q4(void **state)
{
    (void)state;
    rvl_model *m = NULL;
    if (rvl_model_open(&m, DATA_DIR "/llama.gguf") < 0)
        fail_msg("llama.gguf: %s", rvl_errmsg());
    load_tokens();
    const uint32_t nv = rvl_model_hparams(m)->n_vocab;
    static const uint32_t len[] = {70, 130, 97, 1, 64, 111};
    spec q[MAX_REQ];
    const int n = 6;
    for (int i = 0; i < n; i++) {
        q[i] = (spec){.n_prompt = len[i], .max_tokens = 24, .ignore_eos = true};
        for (uint32_t t = 0; t < len[i]; t++)
            q[i].prompt[t] = all_tokens[(29 * i + 3 * t) % n_all] % (int32_t)nv;
        rvl_sampler_defaults(&q[i].sp);
        q[i].sp.temp = 0;
    }
    rvl_ctx_params cp = {.n_ctx = 192, .n_threads = 2, .kv_type = RVL_KV_Q4};
    check_equal_alone(m, &cp, q, n, "llama, long prompts, q4 KV", true);
    rvl_model_close(m);
}

/* A request ends with its last token: no step decodes it for nothing
 * (max_tokens 1: the prompt's step alone; 3: two more). */
static void test_no_wasted_step(void **state)
{
    (void)state;
    rvl_model *m = NULL;
    if (rvl_model_open(&m, DATA_DIR "/llama.gguf") < 0)
        fail_msg("llama.gguf: %s", rvl_errmsg());
    load_tokens();
    static const int32_t max[] = {1, 3};
    for (int k = 0; k < 2; k++) {
        spec q = {.n_prompt = 5, .max_tokens = max[k], .ignore_eos = true};
        memcpy(q.prompt, all_tokens, 5 * sizeof *q.prompt);
        rvl_sampler_defaults(&q.sp);
        q.sp.temp = 0;
        rvl_sched_params sp = {.ctx = {.n_ctx = 64, .n_threads = 1}, .n_parallel = 1};
        rvl_sched *s = NULL;
        assert_int_equal(rvl_sched_open(&s, m, &sp), 0);
        outcome got = {0};
        rvl_sched_request r = make_request(&q, &got);
        assert_true(rvl_sched_submit(s, &r) > 0);
        assert_int_equal(rvl_sched_run(s, true), 0);
        rvl_sched_stats st;
        rvl_sched_stats_get(s, &st);
        assert_int_equal(got.n_gen, (uint32_t)max[k]);
        assert_string_equal(got.finish, "length");
        assert_int_equal(st.steps, (uint64_t)max[k]);
        rvl_sched_close(s);
        outcome_free(&got);
    }
    rvl_model_close(m);
}

static void test_tiny_llama(void **state) { (void)state; check_tiny("llama", RVL_KV_F16); }
static void test_tiny_qwen3(void **state) { (void)state; check_tiny("qwen3", RVL_KV_Q8); }
static void test_tiny_gpt_oss(void **state) { (void)state; check_tiny("gpt-oss", RVL_KV_TIERED); }

/* ====================================================================
 * The default model: real prompts, real replies
 * ==================================================================== */

static rvl_model *default_model(void)
{
    char path[4096];
    rvl_model *m = NULL;
    if (rvl_model_path(NULL, path, sizeof path) < 0 || rvl_model_open(&m, path) < 0)
        return NULL;
    return m;
}

static void encode(const rvl_model *m, const char *text, spec *q)
{
    size_t n = 0;
    assert_int_equal(rvl_tok_encode(rvl_model_tokenizer(m), text, strlen(text), true, false,
                                    q->prompt, 256, &n), 0);
    q->n_prompt = (uint32_t)n;
}

static const char *const prompts[] = {
    "The capital of France is",
    "Here is a short poem about the sea:\n",
    "def fibonacci(n):",
    "Q: What is 17 times 3?\nA:",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old "
    "woodcutter and his three daughters. The youngest",
    "1, 2, 3, 4,",
    "Hello",
};

static int real_specs(const rvl_model *m, spec *q)
{
    const int n = (int)(sizeof prompts / sizeof *prompts);
    static const int32_t max[] = {24, 40, 32, 16, 48, 20, -1};
    static const float temp[] = {0, 0.8f, 0, 0.7f, 1.0f, 0, 0.9f};
    for (int i = 0; i < n; i++) {
        q[i] = (spec){.max_tokens = max[i]};
        encode(m, prompts[i], &q[i]);
        rvl_sampler_defaults(&q[i].sp);
        q[i].sp.temp = temp[i];
        q[i].sp.seed = 42 + (uint64_t)i;
    }
    return n;
}

static void test_default_model(void **state)
{
    (void)state;
    rvl_model *m = default_model();
    if (!m)
        skip();
    spec q[MAX_REQ];
    const int n = real_specs(m, q);
    rvl_ctx_params cp = {.n_ctx = 128, .n_threads = 2};
    check_equal_alone(m, &cp, q, n, "default model", false);
    rvl_model_close(m);
}

/* A stop string cut from the greedy reply: the reply ends before it
 * ("stop"), as alone; a stop string the reply never writes changes
 * nothing. */
static void test_stop_strings(void **state)
{
    (void)state;
    rvl_model *m = default_model();
    if (!m)
        skip();
    rvl_ctx_params cp = {.n_ctx = 128, .n_threads = 2};
    rvl_ctx *c = NULL;
    assert_int_equal(rvl_ctx_open(&c, m, &cp), 0);
    spec q[3];
    for (int i = 0; i < 3; i++) {
        q[i] = (spec){.max_tokens = 40};
        encode(m, prompts[i == 2 ? 2 : 1], &q[i]);
        rvl_sampler_defaults(&q[i].sp);
        q[i].sp.temp = 0;
    }
    outcome plain;
    ref_generate(c, &q[0], &plain);
    assert_true(plain.text.n > 12);
    /* 10 bytes from the middle of the reply: over several tokens, so the
     * text is held back while the stop string may still begin in it */
    static char cut[16];
    assert_true(plain.text.n > 30);
    memcpy(cut, plain.text.p + plain.text.n / 2, 10);
    cut[10] = 0;
    const size_t at = (size_t)(strstr(plain.text.p, cut) - plain.text.p);
    q[0].stops[0] = "\x01never";
    q[0].stops[1] = cut;
    q[1].stops[0] = "zzzzqqqq";   /* never written: the whole reply */
    q[2].stops[0] = "\n";
    outcome want[3];
    for (int i = 0; i < 3; i++)
        ref_generate(c, &q[i], &want[i]);
    rvl_ctx_close(c);
    assert_string_equal(want[0].finish, "stop");
    assert_int_equal(want[0].text.n, at);
    assert_memory_equal(want[0].text.p, plain.text.p, at);
    assert_int_equal(want[1].text.n, plain.text.n);
    run_all(m, &cp, q, 3, want, 3, 0, "stop strings");
    for (int i = 0; i < 3; i++)
        outcome_free(&want[i]);
    outcome_free(&plain);
    rvl_model_close(m);
}

/* ====================================================================
 * Queue, cancel, threads (the tiny llama)
 * ==================================================================== */

static rvl_model *tiny_llama(spec *q, int *n)
{
    rvl_model *m = NULL;
    assert_int_equal(rvl_model_open(&m, DATA_DIR "/llama.gguf"), 0);
    load_tokens();
    *n = tiny_specs(q, rvl_model_hparams(m)->n_vocab);
    return m;
}

/* n_queue waiting at most: one more is RVL_EBUSY; a bad prompt is
 * RVL_EINVAL; close ends the queued ones "cancelled", once each. */
static void test_queue_full(void **state)
{
    (void)state;
    spec q[MAX_REQ];
    int n;
    rvl_model *m = tiny_llama(q, &n);
    rvl_sched_params sp = {.ctx = {.n_ctx = 64, .n_threads = 1}, .n_parallel = 2, .n_queue = 3};
    rvl_sched *s = NULL;
    assert_int_equal(rvl_sched_open(&s, m, &sp), 0);
    outcome o[5] = {0};
    for (int i = 0; i < 3; i++) {
        rvl_sched_request r = make_request(&q[i], &o[i]);
        assert_int_equal(rvl_sched_submit(s, &r), i + 1);
    }
    rvl_sched_request r = make_request(&q[3], &o[3]);
    assert_int_equal(rvl_sched_submit(s, &r), RVL_EBUSY);
    r.n_prompt = 64;   /* fills the context: no room for a reply */
    assert_int_equal(rvl_sched_submit(s, &r), RVL_EINVAL);
    r.n_prompt = 0;
    assert_int_equal(rvl_sched_submit(s, &r), RVL_EINVAL);
    rvl_sched_stats st;
    rvl_sched_stats_get(s, &st);
    assert_int_equal(st.queued, 3);
    assert_int_equal(st.rejected, 3);
    assert_int_equal(rvl_sched_cancel(s, 99), RVL_ENOTFOUND);
    rvl_sched_close(s);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(o[i].n_done, 1);
        assert_string_equal(o[i].finish, "cancelled");
        outcome_free(&o[i]);
    }
    assert_int_equal(o[3].n_done, 0);
    rvl_model_close(m);
}

/* A KV budget of 4 pages (128 positions) for 4 sequences of a 128-token
 * context: requests whose prompts share their first 64 tokens (2 pages)
 * and take 3 pages each (70 + 20 tokens) are admitted while their pages
 * fit (the later ones map the common pages: 1 page of their own), wait in
 * the queue otherwise, and all end with the replies they get alone; the
 * store is empty at the end. A request that could never fit ends "error"
 * saying so. */
static void test_kv_budget(void **state)
{
    (void)state;
    rvl_model *m = NULL;
    assert_int_equal(rvl_model_open(&m, DATA_DIR "/llama.gguf"), 0);
    load_tokens();
    const int32_t nv = (int32_t)rvl_model_hparams(m)->n_vocab;
    enum { N = 6 };
    spec q[N];
    for (int i = 0; i < N; i++) {
        q[i] = (spec){.n_prompt = 70, .max_tokens = 20, .ignore_eos = true};
        for (uint32_t t = 0; t < 70; t++)
            q[i].prompt[t] = (t < 64 ? all_tokens[t] : all_tokens[(5 * i + t) % n_all] + i) % nv;
        rvl_sampler_defaults(&q[i].sp);
        q[i].sp.temp = i % 2 ? 0.8f : 0;
        q[i].sp.seed = 77 + (uint64_t)i;
    }
    rvl_ctx_params cp = {.n_ctx = 128, .n_threads = 2};
    rvl_ctx *c = NULL;
    assert_int_equal(rvl_ctx_open(&c, m, &cp), 0);
    outcome want[N], got[N] = {0};
    for (int i = 0; i < N; i++)
        ref_generate(c, &q[i], &want[i]);
    rvl_ctx_close(c);

    rvl_sched_params sp = {.ctx = cp, .n_parallel = 4, .kv_tokens = 128};
    rvl_sched *s = NULL;
    assert_int_equal(rvl_sched_open(&s, m, &sp), 0);
    for (int i = 0; i < N; i++) {
        rvl_sched_request r = make_request(&q[i], &got[i]);
        assert_true(rvl_sched_submit(s, &r) > 0);
    }
    watch = s;
    watch_par = sp.n_parallel;
    watch_max_run = 0;
    watch_waited = false;
    assert_int_equal(rvl_sched_run(s, true), 0);
    watch = NULL;
    for (int i = 0; i < N; i++)
        expect_same("a KV budget of 4 pages", &q[i], i, &got[i], &want[i]);
    assert_true(watch_waited);          /* room, not sequences, held them back */
    assert_int_equal(watch_max_run, 2); /* one of 3 pages and one of 1 own page */
    rvl_sched_stats st;
    rvl_sched_stats_get(s, &st);
    assert_int_equal(st.completed, N);
    assert_true(st.prompt_reused >= 64);
    assert_int_equal(st.prompt_tokens + st.prompt_reused, 70 * N);
    assert_int_equal(st.kv_store.pages, 4);
    assert_int_equal(st.kv_store.pages_used, 0); /* every page freed as its request ended */
    assert_int_equal(st.kv.bytes, 0);

    /* 70 + 40 positions need 4 pages: never with 2 pages of the common
     * prefix held by nobody (a budget of 3) */
    rvl_sched_close(s);
    sp.kv_tokens = 96;
    assert_int_equal(rvl_sched_open(&s, m, &sp), 0);
    outcome big = {0};
    q[0].max_tokens = 40;
    rvl_sched_request r = make_request(&q[0], &big);
    assert_true(rvl_sched_submit(s, &r) > 0);
    assert_int_equal(rvl_sched_run(s, true), 0);
    assert_int_equal(big.n_done, 1);
    assert_string_equal(big.finish, "error");
    rvl_sched_close(s);
    outcome_free(&big);
    for (int i = 0; i < N; i++) {
        outcome_free(&want[i]);
        outcome_free(&got[i]);
    }
    rvl_model_close(m);
}

/* Cancelled mid-reply (rvl_sched_cancel from on_text; a negative on_text)
 * and while queued: "cancelled", once; the others are untouched. */
static void test_cancel(void **state)
{
    (void)state;
    spec q[MAX_REQ];
    int n;
    rvl_model *m = tiny_llama(q, &n);
    rvl_ctx_params cp = {.n_ctx = 64, .n_threads = 1};
    rvl_ctx *c = NULL;
    assert_int_equal(rvl_ctx_open(&c, m, &cp), 0);
    for (int i = 0; i < 4; i++) {
        q[i].max_tokens = 30;
        q[i].ignore_eos = true;
    }
    outcome want[4];
    for (int i = 0; i < 4; i++)
        ref_generate(c, &q[i], &want[i]);
    rvl_ctx_close(c);
    rvl_sched_params sp = {.ctx = cp, .n_parallel = 2};
    rvl_sched *s = NULL;
    assert_int_equal(rvl_sched_open(&s, m, &sp), 0);
    outcome o[4] = {0};
    int64_t id[4];
    for (int i = 0; i < 4; i++) {
        o[i].s = s;
        rvl_sched_request r = make_request(&q[i], &o[i]);
        id[i] = o[i].id = rvl_sched_submit(s, &r);
        assert_true(id[i] > 0);
    }
    o[0].cancel_after = 5;
    o[1].cancel_after = 3;
    o[1].cancel_by_return = true;
    assert_int_equal(rvl_sched_cancel(s, id[3]), 0);   /* still queued */
    assert_int_equal(rvl_sched_run(s, true), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(o[i].n_done, 1);
    assert_string_equal(o[0].finish, "cancelled");
    assert_true(o[0].n_gen < want[0].n_gen);
    assert_true(o[0].text.n >= 5);
    assert_memory_equal(o[0].text.p, want[0].text.p, o[0].text.n);
    assert_string_equal(o[1].finish, "cancelled");
    assert_true(o[1].n_gen < want[1].n_gen);
    expect_same("cancel", &q[2], 2, &o[2], &want[2]);
    assert_string_equal(o[3].finish, "cancelled");
    assert_int_equal(o[3].n_gen, 0);
    rvl_sched_stats st;
    rvl_sched_stats_get(s, &st);
    assert_int_equal(st.cancelled, 3);
    assert_int_equal(st.completed, 1);
    assert_int_equal(rvl_sched_cancel(s, id[2]), RVL_ENOTFOUND);   /* gone */
    rvl_sched_close(s);
    for (int i = 0; i < 4; i++) {
        outcome_free(&o[i]);
        outcome_free(&want[i]);
    }
    rvl_model_close(m);
}

/* Two threads submit (retrying on RVL_EBUSY: a queue of 2) while a third
 * runs the steps; each reply is its alone one. */
typedef struct {
    rvl_sched *s;
    const spec *q;
    outcome *o;
    int first, n;
} submitter;

static void *submit_thread(void *arg)
{
    submitter *t = arg;
    for (int i = t->first; i < t->first + t->n; i++) {
        rvl_sched_request r = make_request(&t->q[i], &t->o[i]);
        int64_t id;
        while ((id = rvl_sched_submit(t->s, &r)) == RVL_EBUSY) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        if (id <= 0)
            return (void *)1;
    }
    return NULL;
}

static void *run_thread(void *arg)
{
    return (void *)(intptr_t)rvl_sched_run(arg, false);
}

static void test_threads(void **state)
{
    (void)state;
    spec q[MAX_REQ];
    int n;
    rvl_model *m = tiny_llama(q, &n);
    rvl_ctx_params cp = {.n_ctx = 64, .n_threads = 1};
    rvl_ctx *c = NULL;
    assert_int_equal(rvl_ctx_open(&c, m, &cp), 0);
    outcome want[MAX_REQ];
    for (int i = 0; i < n; i++)
        ref_generate(c, &q[i], &want[i]);
    rvl_ctx_close(c);
    rvl_sched_params sp = {.ctx = cp, .n_parallel = 3, .n_queue = 2, .n_step_tokens = 9};
    rvl_sched *s = NULL;
    assert_int_equal(rvl_sched_open(&s, m, &sp), 0);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    int n_finished = 0;
    outcome o[MAX_REQ] = {0};
    for (int i = 0; i < n; i++) {
        o[i].mu = &mu;
        o[i].cv = &cv;
        o[i].n_finished = &n_finished;
    }
    pthread_t runner, sub[2];
    assert_int_equal(pthread_create(&runner, NULL, run_thread, s), 0);
    submitter t[2] = {{s, q, o, 0, n / 2}, {s, q, o, n / 2, n - n / 2}};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&sub[i], NULL, submit_thread, &t[i]), 0);
    for (int i = 0; i < 2; i++) {
        void *rv;
        pthread_join(sub[i], &rv);
        assert_null(rv);
    }
    pthread_mutex_lock(&mu);
    while (n_finished < n)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    rvl_sched_stop(s);
    void *rv;
    pthread_join(runner, &rv);
    assert_int_equal((intptr_t)rv, 0);
    for (int i = 0; i < n; i++) {
        expect_same("2 threads", &q[i], i, &o[i], &want[i]);
        outcome_free(&o[i]);
        outcome_free(&want[i]);
    }
    rvl_sched_close(s);
    rvl_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_llama),
        cmocka_unit_test(test_tiny_llama_long_q4),
        cmocka_unit_test(test_no_wasted_step),
        cmocka_unit_test(test_tiny_qwen3),
        cmocka_unit_test(test_tiny_gpt_oss),
        cmocka_unit_test(test_default_model),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_queue_full),
        cmocka_unit_test(test_kv_budget),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
