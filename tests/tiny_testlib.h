/*
 * tiny_testlib.h - what the tests on tests/data/tiny's reference models
 * share (test_tiny_hf.c, test_experts.c): their token sequence and every
 * position's logits through rvl_decode in calls of a given size. Include
 * after cmocka.h, with DATA_DIR defined.
 */
#ifndef TINY_TESTLIB_H
#define TINY_TESTLIB_H

#include <stdio.h>
#include <string.h>

#include "ruvllm.h"

/* tokens.txt's ids, at most cap */
static int tiny_read_tokens(int32_t *ids, int cap)
{
    FILE *f = fopen(DATA_DIR "/tokens.txt", "r");
    if (!f)
        fail_msg("%s/tokens.txt: cannot open (run from the repository root)", DATA_DIR);
    int n = 0;
    long v;
    while (n < cap && fscanf(f, "%ld", &v) == 1)
        ids[n++] = (int32_t)v;
    fclose(f);
    return n;
}

/* The sequence through rvl_decode in calls of `step` tokens (0: all at
 * once) on a context of the sequence's length (LongRoPE picks its factors
 * by it) with a KV cache of type kv and n_threads, every position's logits
 * into out (n_tok x n_vocab). */
static void tiny_decode(const rvl_model *m, const int32_t *ids, int n_tok, int step,
                        uint32_t n_threads, rvl_kv_type kv, float *out)
{
    const uint32_t n_vocab = rvl_model_hparams(m)->n_vocab;
    const uint32_t chunk = step ? (uint32_t)step : (uint32_t)n_tok;
    rvl_ctx_params cp = {.n_ctx = (uint32_t)n_tok, .n_threads = n_threads,
                         .all_logits = chunk > 1, .n_batch = chunk, .kv_type = kv};
    rvl_ctx *c = NULL;
    if (rvl_ctx_open(&c, m, &cp) < 0)
        fail_msg("rvl_ctx_open: %s", rvl_errmsg());
    for (int i = 0; i < n_tok; i += (int)chunk) {
        const uint32_t n = (uint32_t)(n_tok - i) < chunk ? (uint32_t)(n_tok - i) : chunk;
        const float *lg = NULL;
        if (rvl_decode(c, ids + i, n, &lg) < 0)
            fail_msg("rvl_decode at position %d: %s", i, rvl_errmsg());
        assert_non_null(lg);
        /* with all_logits every token's row; without, the last token's */
        memcpy(out + (size_t)i * n_vocab, lg, (size_t)n * n_vocab * sizeof *out);
    }
    assert_int_equal(rvl_ctx_pos(c), n_tok);
    rvl_ctx_close(c);
}

#endif
