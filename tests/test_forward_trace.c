/*
 * test_forward_trace.c - rvl_ctx_set_trace: the forward pass reports each
 * named step (llama.cpp's cb_eval names) with the values it computed, in
 * order, without changing them. On the tiny llama model (tests/data/tiny,
 * 2 layers, dim 64, 4 heads over 2 KV heads of 16, ff 128).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ruvllm.h"

#define TINY "tests/data/tiny/llama.gguf"
#define MAX_REC 256

typedef struct {
    char name[16];
    int layer;
    uint32_t pos0, nb, n;
    float *x;                   /* nb rows of n, contiguous */
} rec;

typedef struct {
    rec r[MAX_REC];
    int n;
} recs;

static void record(void *ud, const char *name, int layer, uint32_t pos0, uint32_t nb,
                   const float *x, size_t stride, uint32_t n)
{
    recs *rs = ud;
    assert_true(rs->n < MAX_REC);
    rec *r = &rs->r[rs->n++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->layer = layer;
    r->pos0 = pos0;
    r->nb = nb;
    r->n = n;
    r->x = malloc(sizeof(float) * nb * n);
    assert_non_null(r->x);
    for (uint32_t t = 0; t < nb; t++)
        memcpy(r->x + (size_t)t * n, x + t * stride, sizeof(float) * n);
}

static void recs_free(recs *rs)
{
    for (int i = 0; i < rs->n; i++)
        free(rs->r[i].x);
    rs->n = 0;
}

static const rec *find(const recs *rs, const char *name, int layer)
{
    for (int i = 0; i < rs->n; i++)
        if (rs->r[i].layer == layer && strcmp(rs->r[i].name, name) == 0)
            return &rs->r[i];
    fail_msg("no %s of layer %d", name, layer);
    return NULL;
}

static const char *const STEPS[] = {"attn_norm", "Qcur", "Kcur", "Vcur", "kqv_out",
                                    "attn_out", "ffn_inp", "ffn_norm", "ffn_gate", "ffn_up",
                                    "ffn_swiglu", "ffn_out", "l_out"};
#define N_STEPS (sizeof STEPS / sizeof STEPS[0])

static const int32_t IDS[5] = {1, 17, 42, 99, 200};

static void open_tiny(rvl_model **m, rvl_ctx **c)
{
    assert_int_equal(rvl_model_open(m, TINY), 0);
    rvl_ctx_params cp = {.n_ctx = 64, .n_threads = 1};
    assert_int_equal(rvl_ctx_open(c, *m, &cp), 0);
}

static void test_trace_reports_every_step_in_order(void **state)
{
    (void)state;
    rvl_model *m;
    rvl_ctx *c;
    open_tiny(&m, &c);
    const rvl_hparams *hp = rvl_model_hparams(m);
    const uint32_t q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    static recs rs;
    rvl_ctx_set_trace(c, record, &rs);
    const float *lg;
    assert_int_equal(rvl_decode(c, IDS, 5, &lg), 0);
    assert_int_equal(rs.n, (int)(hp->n_layer * N_STEPS + 1));
    for (uint32_t l = 0; l < hp->n_layer; l++)
        for (size_t s = 0; s < N_STEPS; s++) {
            const rec *r = &rs.r[l * N_STEPS + s];
            assert_string_equal(r->name, STEPS[s]);
            assert_int_equal(r->layer, (int)l);
            assert_int_equal(r->pos0, 0);
            assert_int_equal(r->nb, 5);
            const char *nm = r->name;
            const uint32_t want = !strcmp(nm, "Qcur") || !strcmp(nm, "kqv_out") ? q_dim
                                  : !strcmp(nm, "Kcur") || !strcmp(nm, "Vcur") ? kv_dim
                                  : !strncmp(nm, "ffn_", 4) && strcmp(nm, "ffn_inp") &&
                                            strcmp(nm, "ffn_norm") && strcmp(nm, "ffn_out")
                                      ? hp->n_ff
                                      : hp->n_embd;
            assert_int_equal(r->n, want);
        }
    const rec *last = &rs.r[rs.n - 1];
    assert_string_equal(last->name, "result_norm");
    assert_int_equal(last->layer, -1);
    /* one decode step: position 5, one row */
    recs_free(&rs);
    const int32_t next = 7;
    assert_int_equal(rvl_decode(c, &next, 1, &lg), 0);
    assert_int_equal(rs.n, (int)(hp->n_layer * N_STEPS + 1));
    for (int i = 0; i < rs.n; i++) {
        assert_int_equal(rs.r[i].pos0, 5);
        assert_int_equal(rs.r[i].nb, 1);
    }
    recs_free(&rs);
    rvl_ctx_close(c);
    rvl_model_close(m);
}

/* The reported rows are the forward pass's own: the residual adds hold
 * bit for bit, SwiGLU is silu(gate) * up, and the next layer's norm input
 * is this layer's output. */
static void test_trace_values_are_the_residual_stream(void **state)
{
    (void)state;
    rvl_model *m;
    rvl_ctx *c;
    open_tiny(&m, &c);
    const rvl_hparams *hp = rvl_model_hparams(m);
    static recs rs;
    rvl_ctx_set_trace(c, record, &rs);
    const float *lg;
    assert_int_equal(rvl_decode(c, IDS, 5, &lg), 0);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const rec *inp = find(&rs, "ffn_inp", (int)l), *ao = find(&rs, "attn_out", (int)l);
        const rec *fo = find(&rs, "ffn_out", (int)l), *lo = find(&rs, "l_out", (int)l);
        const rec *g = find(&rs, "ffn_gate", (int)l), *u = find(&rs, "ffn_up", (int)l);
        const rec *sw = find(&rs, "ffn_swiglu", (int)l);
        for (size_t i = 0; i < (size_t)5 * hp->n_embd; i++) {
            assert_true(lo->x[i] == inp->x[i] + fo->x[i]);
            if (l > 0)
                assert_true(inp->x[i] == find(&rs, "l_out", (int)l - 1)->x[i] + ao->x[i]);
        }
        for (size_t i = 0; i < (size_t)5 * hp->n_ff; i++) {
            const float want = g->x[i] / (1.0f + expf(-g->x[i])) * u->x[i];
            assert_true(fabsf(sw->x[i] - want) <= 1e-6f * (1.0f + fabsf(want)));
        }
    }
    recs_free(&rs);
    rvl_ctx_close(c);
    rvl_model_close(m);
}

static void test_trace_leaves_logits_unchanged_and_can_be_removed(void **state)
{
    (void)state;
    rvl_model *m;
    rvl_ctx *c;
    open_tiny(&m, &c);
    const uint32_t nv = rvl_model_hparams(m)->n_vocab;
    const float *lg;
    assert_int_equal(rvl_decode(c, IDS, 5, &lg), 0);
    float *plain = malloc(sizeof(float) * nv);
    assert_non_null(plain);
    memcpy(plain, lg, sizeof(float) * nv);

    static recs rs;
    rvl_ctx_reset(c);
    rvl_ctx_set_trace(c, record, &rs);
    assert_int_equal(rvl_decode(c, IDS, 5, &lg), 0);
    assert_true(rs.n > 0);
    assert_memory_equal(lg, plain, sizeof(float) * nv);

    recs_free(&rs);
    rvl_ctx_set_trace(c, NULL, NULL);
    rvl_ctx_reset(c);
    assert_int_equal(rvl_decode(c, IDS, 5, &lg), 0);
    assert_int_equal(rs.n, 0);
    assert_memory_equal(lg, plain, sizeof(float) * nv);
    free(plain);
    rvl_ctx_close(c);
    rvl_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace_reports_every_step_in_order),
        cmocka_unit_test(test_trace_values_are_the_residual_stream),
        cmocka_unit_test(test_trace_leaves_logits_unchanged_and_can_be_removed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
