/*
 * fuzz_session.c - libFuzzer harness for the session-file reader
 * (rvl_session_load_mem) against a real tiny model
 * (tests/data/tiny/llama.gguf, opened once; run from the repository root).
 * A successful load must give ids inside the vocabulary and a position
 * equal to their count, and the restored cache must run (one more token
 * decodes); every failure must leave the context empty.
 * Corpus: tests/fuzz/corpus/session/ (tests/fuzz/make_session_corpus.c:
 * version-2 files of 0 .. 100 tokens with f16, f32, q8, tiered and
 * tq4-keys/q4-values caches, damaged variants, and a version-1 file).
 */
#include <stdint.h>
#include <stdlib.h>

#include "engine/model.h"

#define NCTX 5
static rvl_model *model;
static rvl_ctx *ctxs[NCTX];

/* the contexts the corpus files were made for (make_session_corpus.c) */
static const rvl_ctx_params params[NCTX] = {
    {.n_ctx = 128, .n_threads = 1, .kv_type = RVL_KV_F16},
    {.n_ctx = 128, .n_threads = 1, .kv_type = RVL_KV_F32},
    {.n_ctx = 128, .n_threads = 1, .kv_type = RVL_KV_Q8},
    {.n_ctx = 128, .n_threads = 1, .kv_type = RVL_KV_TIERED, .kv_hot = 16, .kv_warm = 32},
    {.n_ctx = 128, .n_threads = 1, .kv_split = true, .kv_type_k = RVL_KV_TQ4,
     .kv_type_v = RVL_KV_Q4},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!model) {
        if (rvl_model_open(&model, "tests/data/tiny/llama.gguf") < 0)
            abort();
        for (int i = 0; i < NCTX; i++)
            if (rvl_ctx_open(&ctxs[i], model, &params[i]) < 0)
                abort();
    }
    for (int i = 0; i < NCTX; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        char *extra = NULL;
        int rc = rvl_session_load_mem(ctxs[i], "fuzz", data, size, &ids, &n, &extra);
        if (rc == 0) {
            if (rvl_ctx_pos(ctxs[i]) != n || !extra)
                abort();
            for (size_t j = 0; j < n; j++)
                if (ids[j] < 0 || (uint32_t)ids[j] >= rvl_model_hparams(model)->n_vocab)
                    abort();
            const int32_t next = 1;
            const float *lg;
            if (n < rvl_ctx_n_ctx(ctxs[i]) && rvl_decode(ctxs[i], &next, 1, &lg) < 0)
                abort();
            rvl_ctx_reset(ctxs[i]);
        } else if (rvl_ctx_pos(ctxs[i]) != 0 || ids || extra || n) {
            abort();
        }
        free(ids);
        free(extra);
    }
    return 0;
}
