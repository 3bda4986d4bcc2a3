/*
 * fuzz_kv_inspect.c - libFuzzer harness for the session-file inspector
 * (lib/tools/kv_inspect.c): rvl_kv_inspect_open_mem, then everything kv-inspect does
 * with an opened file (every page decoded, per-head statistics, the diff
 * of the file with itself). No model needed. Invariants checked: an
 * intact file has only good blocks and every page of it decodes; a file
 * diffed with itself has all its tokens in common and no divergence.
 * Corpus: tests/fuzz/corpus/kv_inspect/ (valid version 1 and 2 files of
 * the tiny llama model in several page formats, and damaged copies).
 */
#include <stdint.h>
#include <stdlib.h>

#include "ruvllm.h"
#include "ruvllm_tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rvl_kv_inspect *f;
    if (rvl_kv_inspect_open_mem(&f, "fuzz", data, size) < 0)
        return 0;
    const rvl_kv_inspect_info *in = rvl_kv_inspect_info_get(f);
    bool intact = rvl_kv_inspect_intact(f);
    if (intact && rvl_kv_inspect_n_blocks(f) != in->n_blocks_expected)
        abort();
    /* pages hold page_size (32) rows of kv_dim (<= 65536) floats when the
     * geometry is usable; nothing is decoded otherwise */
    size_t rows = in->geometry_ok ? (size_t)in->page_size * in->kv_dim : 0;
    float *k = malloc(rows * sizeof *k + 1);
    float *v = malloc(rows * sizeof *v + 1);
    if (!k || !v)
        abort();
    for (size_t i = 0; i < rvl_kv_inspect_n_blocks(f); i++) {
        const rvl_kv_inspect_blockinfo *bl = rvl_kv_inspect_block(f, i);
        if (intact && bl->status != RVL_KVI_OK)
            abort();
        uint32_t n;
        if (bl->kind != RVL_KVI_BLK_KV || !in->geometry_ok)
            continue;
        int rc = rvl_kv_inspect_page(f, i, k, v, &n);
        if ((rc == 0 && (n < 1 || n > 32)) || (intact && rc != 0))
            abort();
    }
    free(k);
    free(v);

    /* version 1 files do not record the head size: the tiny model's */
    rvl_kv_inspect_stats_params p = {.n_head_kv = in->kv_dim == 32 ? 2 : 1,
                              .head_dim = in->kv_dim == 32 ? 16 : in->kv_dim};
    rvl_kv_inspect_head *heads;
    size_t nh;
    if (rvl_kv_inspect_stats(f, &p, &heads, &nh) == 0)
        rvl_kv_inspect_stats_free(heads, nh);

    rvl_kv_inspect_diffres d;
    if (rvl_kv_inspect_diff(f, f, &d) == 0) {
        if (d.common != in->n_tokens || d.first_diff != -1)
            abort();
        rvl_kv_inspect_diff_free(&d);
    }
    rvl_kv_inspect_close(f);
    return 0;
}
