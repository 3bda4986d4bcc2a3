/*
 * fuzz_session.c - libFuzzer harness for the session-file reader
 * (rvl_session_load_mem) against a real tiny model
 * (tests/data/tiny/llama.gguf, opened once; run from the repository root).
 * A successful load must give ids inside the vocabulary and a position
 * equal to their count; every failure must leave the context empty.
 * Corpus: tests/fuzz/corpus/session/ (valid files of 0, 5, 33 and 40
 * tokens, f16 and f32, and damaged variants).
 */
#include <stdint.h>
#include <stdlib.h>

#include "model.h"

static rvl_model *model;
static rvl_ctx *ctx16, *ctx32;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!model) {
        if (rvl_model_open(&model, "tests/data/tiny/llama.gguf") < 0)
            abort();
        rvl_ctx_params p = {.n_ctx = 64, .n_threads = 1};
        if (rvl_ctx_open(&ctx16, model, &p) < 0)
            abort();
        p.kv_type = RVL_KV_F32;
        if (rvl_ctx_open(&ctx32, model, &p) < 0)
            abort();
    }
    rvl_ctx *cs[2] = {ctx16, ctx32};
    for (int i = 0; i < 2; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        char *extra = NULL;
        int rc = rvl_session_load_mem(cs[i], "fuzz", data, size, &ids, &n, &extra);
        if (rc == 0) {
            if (rvl_ctx_pos(cs[i]) != n || !extra)
                abort();
            for (size_t j = 0; j < n; j++)
                if (ids[j] < 0 || (uint32_t)ids[j] >= rvl_model_hparams(model)->n_vocab)
                    abort();
        } else if (rvl_ctx_pos(cs[i]) != 0 || ids || extra || n) {
            abort();
        }
        free(ids);
        free(extra);
    }
    return 0;
}
