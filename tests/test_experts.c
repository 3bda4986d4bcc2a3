/*
 * test_experts.c - streamed experts give the resident logits bit for bit
 * (lib/engine/experts.c).
 *
 * On the tiny MoE models of tests/data/tiny (mixtral: 8 experts, top-2;
 * qwen3moe: 32, top-2; qwen2moe: 64, top-2 and a shared expert; 2 layers
 * each; deepseek3: a dense layer, then 8 experts, top-2 of the best groups,
 * and a shared one; gpt-oss: 4 with biases; f32), a model opened with the smallest budget the library takes
 * (two slots per expert a token uses: the layer's own and as many read
 * ahead) decodes the 64 tokens of tokens.txt in one call, in calls of 5
 * and one at a time, with 1, 2 and 4 pool threads, and the logits must be
 * memcmp-equal to the same decode on a resident model: the slots hold the
 * file's own bytes, so any difference is a wrong offset, a slot reused
 * under a GEMM or a stale table entry. The counters must show that the
 * cache was really used (hits and misses both > 0, every lookup counted,
 * bytes_read = (misses + read-ahead) x one expert's bytes). Several
 * contexts on their own threads share one streamed model (2 and 4 of
 * them over 4 slots: pins and waits); a caller holding several experts
 * at once gets the mapping's bytes when the slots run out, never a
 * deadlock. A budget below the minimum (named in the error) and a
 * malformed $RUVLLM_EXPERT_BUDGET are refused at open.
 *
 * Run from the repository root (make check does).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruvllm.h"
#include "engine/experts.h" /* the store's own calls: a pin held across other lookups */

#define DATA_DIR "tests/data/tiny"
#include "tiny_testlib.h"
enum { MAX_TOKENS = 256 };

static const char *const models[] = {"mixtral", "qwen3moe", "qwen2moe", "deepseek3", "gpt-oss"};


/* budget 0: the default (every expert resident, for these models) */
static rvl_model *open_budget(const char *name, uint64_t budget)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.gguf", DATA_DIR, name);
    rvl_model *m = NULL;
    const rvl_model_params p = {.expert_budget = budget};
    if (rvl_model_open_params(&m, path, &p) < 0)
        fail_msg("%s: %s", path, rvl_errmsg());
    return m;
}

static rvl_model *open_model(const char *name) { return open_budget(name, 0); }

static uint64_t min_budget(const char *name)
{
    rvl_model *m = open_model(name);
    rvl_expert_stats st;
    rvl_model_expert_stats(m, &st);
    assert_true(st.resident);
    assert_true(st.min_budget > 0 && st.min_budget < st.total_bytes);
    rvl_model_close(m);
    return st.min_budget;
}

/* A model whose experts are streamed through the smallest budget. */
static rvl_model *open_min(const char *name)
{
    rvl_model *m = open_budget(name, min_budget(name));
    rvl_expert_stats st;
    rvl_model_expert_stats(m, &st);
    assert_false(st.resident);
    assert_int_equal(st.slots, 2 * rvl_model_hparams(m)->n_expert_used);
    return m;
}


static void expect_same(const char *what, const float *a, const float *b, int n_tok, uint32_t nv)
{
    for (int t = 0; t < n_tok; t++)
        if (memcmp(a + (size_t)t * nv, b + (size_t)t * nv, nv * sizeof *a) != 0)
            fail_msg("%s: the logits of position %d differ from the resident model's", what, t);
}

/* The counters after `tokens` tokens: every byte read is a whole expert,
 * misses were counted, and (`hits`: one token at a time, when
 * consecutive tokens share experts; prompt chunks over 2 * top-k slots
 * may evict each other all along) hits too. */
static void expect_counted(const char *what, const rvl_model *m, uint64_t tokens, bool hits)
{
    rvl_expert_stats st;
    rvl_model_expert_stats(m, &st);
    print_message("%-28s %llu hits, %llu misses, %llu read ahead (%llu used), %llu bytes\n", what,
                  (unsigned long long)st.hits, (unsigned long long)st.misses,
                  (unsigned long long)st.prefetched, (unsigned long long)st.prefetch_hits,
                  (unsigned long long)st.bytes_read);
    assert_true(!hits || st.hits > 0);
    assert_true(st.misses > 0);
    assert_int_equal(st.read_errors, 0);
    assert_int_equal(st.bytes_read, (st.misses + st.prefetched) * st.expert_bytes);
    assert_true(st.prefetch_hits <= st.prefetched);
    assert_int_equal(st.tokens, tokens);
}

/* ====================================================================
 * One context: every decode path, 1, 2 and 4 threads
 * ==================================================================== */

static void check_model(const char *name, bool prefetch)
{
    static int32_t ids[MAX_TOKENS];
    const int n_tok = tiny_read_tokens(ids, MAX_TOKENS);
    assert_true(n_tok >= 48);
    if (prefetch)
        unsetenv("RUVLLM_EXPERT_PREFETCH");
    else
        setenv("RUVLLM_EXPERT_PREFETCH", "0", 1);
    rvl_model *res = open_model(name);
    const uint32_t nv = rvl_model_hparams(res)->n_vocab;
    const size_t n = (size_t)n_tok * nv;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    static const int steps[] = {0, 5, 1};
    static const uint32_t threads[] = {1, 2, 4};
    for (size_t s = 0; s < 3; s++)
        for (size_t th = 0; th < 3; th++) {
            rvl_model *str = open_min(name);
            tiny_decode(res, ids, n_tok, steps[s], threads[th], RVL_KV_F32, a);
            tiny_decode(str, ids, n_tok, steps[s], threads[th], RVL_KV_F32, b);
            char what[96];
            snprintf(what, sizeof what, "%s%s, calls of %d, %u threads", name,
                     prefetch ? "" : " (no read-ahead)", steps[s] ? steps[s] : n_tok,
                     threads[th]);
            expect_same(what, b, a, n_tok, nv);
            expect_counted(what, str, (uint64_t)n_tok, steps[s] == 1);
            rvl_expert_stats st;
            rvl_model_expert_stats(str, &st);
            if (!prefetch)
                assert_int_equal(st.prefetched, 0);
            rvl_model_close(str);
        }
    rvl_expert_stats st;
    rvl_model_expert_stats(res, &st); /* resident: nothing read, nothing cached */
    assert_true(st.resident);
    assert_int_equal(st.bytes_read, 0);
    assert_int_equal(st.slots, 0);
    free(a);
    free(b);
    rvl_model_close(res);
    unsetenv("RUVLLM_EXPERT_PREFETCH");
}

static void test_streamed_logits_equal_resident(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        check_model(models[i], true);
}

static void test_streamed_without_prefetch_equal_resident(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        check_model(models[i], false);
}

/* ====================================================================
 * Several contexts on their own threads sharing one streamed model
 * ==================================================================== */

typedef struct {
    const rvl_model *m;
    const int32_t *ids;
    int n_tok, step;
    float *out;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    tiny_decode(j->m, j->ids, j->n_tok, j->step, 1, RVL_KV_F32, j->out);
    return NULL;
}

static void test_contexts_share_a_streamed_model(void **state)
{
    (void)state;
    static int32_t ids[MAX_TOKENS];
    const int n_tok = tiny_read_tokens(ids, MAX_TOKENS);
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        rvl_model *res = open_model(models[mi]);
        const uint32_t nv = rvl_model_hparams(res)->n_vocab;
        const size_t n = (size_t)n_tok * nv;
        float *want[2] = {malloc(n * sizeof(float)), malloc(n * sizeof(float))};
        assert_non_null(want[0]);
        assert_non_null(want[1]);
        tiny_decode(res, ids, n_tok, 1, 1, RVL_KV_F32, want[0]); /* one token at a time */
        tiny_decode(res, ids, n_tok, 7, 1, RVL_KV_F32, want[1]); /* chunks of 7 */
        for (int nth = 2; nth <= 4; nth += 2) {
            rvl_model *str = open_min(models[mi]);
            pthread_t th[4];
            job jobs[4];
            for (int t = 0; t < nth; t++) {
                jobs[t] = (job){str, ids, n_tok, t % 2 ? 7 : 1, malloc(n * sizeof(float))};
                assert_non_null(jobs[t].out);
                assert_int_equal(pthread_create(&th[t], NULL, run_job, &jobs[t]), 0);
            }
            for (int t = 0; t < nth; t++)
                pthread_join(th[t], NULL);
            char what[96];
            for (int t = 0; t < nth; t++) {
                snprintf(what, sizeof what, "%s, context %d of %d threads", models[mi], t, nth);
                expect_same(what, jobs[t].out, want[t % 2], n_tok, nv);
                free(jobs[t].out);
            }
            snprintf(what, sizeof what, "%s, %d contexts", models[mi], nth);
            expect_counted(what, str, (uint64_t)n_tok * (uint64_t)nth, true);
            rvl_model_close(str);
        }
        free(want[0]);
        free(want[1]);
        rvl_model_close(res);
    }
}

/* ====================================================================
 * A pinned expert stays in its slot
 * ==================================================================== */

/* Expert 0 of the first layer with experts pinned, every other expert of
 * every layer looked up (and released) through the 2 * top-k slots: the
 * pinned slot must still
 * hold expert 0's bytes, the file's, and the store must not have given it
 * to another expert; released, it may go. Deterministic (no read-ahead),
 * unlike the shared-model test above, which races for the same fault. */
static void test_pinned_expert_is_not_evicted(void **state)
{
    (void)state;
    setenv("RUVLLM_EXPERT_PREFETCH", "0", 1);
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        rvl_model *m = open_min(models[mi]);
        const rvl_hparams *hp = rvl_model_hparams(m);
        uint32_t l0 = 0, n_moe = 0; /* leading dense layers have none */
        while (!m->layers[l0].exps)
            l0++;
        const rvl_weight *file = m->layers[l0].exps; /* expert 0's views of the mapping */
        const rvl_weight *w = rvl_experts_acquire(m->xs, l0, 0);
        assert_ptr_not_equal(w[0].data, file[0].data); /* a slot, not the mapping */
        for (uint32_t l = l0; l < hp->n_layer; l++)
            for (uint32_t e = 0; m->layers[l].exps && e < hp->n_expert; e++) {
                n_moe += e == 0;
                if (l == l0 && e == 0)
                    continue;
                const rvl_weight *o = rvl_experts_acquire(m->xs, l, e);
                assert_ptr_not_equal(o, w);
                rvl_experts_release(m->xs, o);
            }
        for (int k = 0; k < 3; k++)
            assert_memory_equal(w[k].data, file[k].data, w[k].ne1 * w[k].row_bytes);
        rvl_experts_release(m->xs, w);
        rvl_expert_stats st;
        rvl_model_expert_stats(m, &st);
        assert_int_equal(st.misses, (uint64_t)n_moe * hp->n_expert);
        rvl_model_close(m);
    }
    unsetenv("RUVLLM_EXPERT_PREFETCH");
}

/* A caller holding every slot (experts taken in groups, as a forward pass
 * may) and asking for one more gets the mapping's views of the same bytes
 * at once, counted, instead of waiting for itself; released, they go. */
static void test_holding_every_slot_overflows_to_the_mapping(void **state)
{
    (void)state;
    setenv("RUVLLM_EXPERT_PREFETCH", "0", 1);
    rvl_model *m = open_min("qwen3moe"); /* 2 layers of experts */
    const uint32_t n = 2 * rvl_model_hparams(m)->n_expert_used;
    const rvl_weight *w[16];
    assert_true(n + 1 <= 16);
    for (uint32_t e = 0; e <= n; e++)
        w[e] = rvl_experts_acquire(m->xs, 1, e);
    const rvl_weight *file = m->layers[1].exps + 3 * (size_t)n;
    assert_ptr_equal(w[n], file); /* the last one: the mapping's */
    for (uint32_t e = 0; e < n; e++) {
        assert_ptr_not_equal(w[e], m->layers[1].exps + 3 * (size_t)e);
        for (int k = 0; k < 3; k++)
            assert_memory_equal(w[e][k].data, m->layers[1].exps[3 * (size_t)e + k].data,
                                w[e][k].ne1 * w[e][k].row_bytes);
    }
    rvl_expert_stats st;
    rvl_model_expert_stats(m, &st);
    assert_int_equal(st.overflows, 1);
    assert_int_equal(st.misses, n);
    for (uint32_t e = 0; e <= n; e++)
        rvl_experts_release(m->xs, w[e]);
    /* every slot free again: a new expert gets one */
    const rvl_weight *o = rvl_experts_acquire(m->xs, 0, 0);
    assert_ptr_not_equal(o, m->layers[0].exps);
    rvl_experts_release(m->xs, o);
    rvl_model_close(m);
    unsetenv("RUVLLM_EXPERT_PREFETCH");
}

/* ====================================================================
 * Refusals
 * ==================================================================== */

static void test_budget_below_minimum_is_refused(void **state)
{
    (void)state;
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        const uint64_t min = min_budget(models[mi]);
        char path[256];
        snprintf(path, sizeof path, "%s/%s.gguf", DATA_DIR, models[mi]);
        rvl_model *m = NULL;
        const rvl_model_params low = {.expert_budget = min - 1};
        assert_int_equal(rvl_model_open_params(&m, path, &low), RVL_EINVAL);
        assert_null(m);
        assert_non_null(strstr(rvl_errmsg(), "below this model's minimum of 0.10 MiB"));
        assert_non_null(strstr(rvl_errmsg(), path));
        /* a budget of every expert: resident, as by default */
        rvl_expert_stats st;
        rvl_model_expert_stats(m = open_model(models[mi]), &st);
        rvl_model_close(m);
        rvl_model_expert_stats(m = open_budget(models[mi], st.total_bytes), &st);
        assert_true(st.resident);
        assert_int_equal(st.slots, 0);
        rvl_model_close(m);
        rvl_model_expert_stats(m = open_budget(models[mi], st.total_bytes - 1), &st);
        assert_false(st.resident);
        rvl_model_close(m);
    }
}

static void test_env_budget(void **state)
{
    (void)state;
    static const char *const bad[] = {"abc", "-1", "0", "12x", "99999999999999999999999"};
    rvl_model *m = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("RUVLLM_EXPERT_BUDGET", bad[i], 1);
        assert_int_equal(rvl_model_open(&m, DATA_DIR "/mixtral.gguf"), RVL_EINVAL);
        assert_null(m);
        assert_non_null(strstr(rvl_errmsg(), "RUVLLM_EXPERT_BUDGET"));
    }
    /* a whole MiB holds every expert of the tiny model: resident */
    setenv("RUVLLM_EXPERT_BUDGET", "1", 1);
    assert_int_equal(rvl_model_open(&m, DATA_DIR "/mixtral.gguf"), 0);
    rvl_expert_stats st;
    rvl_model_expert_stats(m, &st);
    assert_true(st.resident);
    assert_int_equal(st.budget, 1 << 20);
    rvl_model_close(m);
    unsetenv("RUVLLM_EXPERT_BUDGET");
    /* a dense model has nothing to budget */
    const rvl_model_params one = {.expert_budget = 1};
    assert_int_equal(rvl_model_open_params(&m, DATA_DIR "/llama.gguf", &one), 0);
    rvl_model_expert_stats(m, &st);
    assert_true(st.resident);
    assert_int_equal(st.total_bytes, 0);
    rvl_model_close(m);
}

int main(void)
{
    unsetenv("RUVLLM_EXPERT_BUDGET");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_streamed_logits_equal_resident),
        cmocka_unit_test(test_streamed_without_prefetch_equal_resident),
        cmocka_unit_test(test_contexts_share_a_streamed_model),
        cmocka_unit_test(test_pinned_expert_is_not_evicted),
        cmocka_unit_test(test_holding_every_slot_overflows_to_the_mapping),
        cmocka_unit_test(test_budget_below_minimum_is_refused),
        cmocka_unit_test(test_env_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
