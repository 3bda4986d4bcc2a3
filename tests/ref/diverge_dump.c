/*
 * diverge_dump.c - the ruvllm side of tests/ref/diverge_q4km.py (built by
 * that script against build/libruvllm.a; not part of `make`).
 *
 *   diverge_dump MODEL IDS OUT N_PROMPT N_GEN [TRACE]
 *
 * IDS holds token ids (whitespace-separated). The first N_PROMPT are
 * decoded as one batch, as `ruvllm run` does; then N_GEN steps, one token
 * per rvl_decode: the next id of IDS while there is one (teacher forcing),
 * else the argmax (greedy, the first of equal maxima like llama.cpp's).
 * OUT receives the N_GEN logit rows the steps chose from (float32, n_vocab
 * each), OUT.ids the whole sequence. TRACE, when given, receives every
 * step of the forward pass (rvl_ctx_set_trace): per token row a record of
 * name (16 bytes, NUL-padded), layer, position and count (int32 each),
 * then count float32. Context: 512 tokens, 2 threads, f16 KV cache (the
 * defaults of `ruvllm run`).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ruvllm.h"

#define MAX_IDS 512

static void trace_row(void *ud, const char *name, int layer, uint32_t pos0, uint32_t nb,
                      const float *x, size_t stride, uint32_t n)
{
    FILE *f = ud;
    for (uint32_t t = 0; t < nb; t++) {
        char nm[16] = {0};
        strncpy(nm, name, sizeof nm - 1);
        const int32_t h[3] = {layer, (int32_t)(pos0 + t), (int32_t)n};
        fwrite(nm, 1, sizeof nm, f);
        fwrite(h, sizeof h[0], 3, f);
        fwrite(x + t * stride, sizeof(float), n, f);
    }
}

static int fail(const char *what)
{
    fprintf(stderr, "diverge_dump: %s: %s\n", what, rvl_errmsg());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 6 || argc > 7) {
        fprintf(stderr, "usage: diverge_dump MODEL IDS OUT N_PROMPT N_GEN [TRACE]\n");
        return 2;
    }
    static int32_t ids[MAX_IDS];
    int n_ids = 0;
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    while (n_ids < MAX_IDS && fscanf(f, "%d", &ids[n_ids]) == 1)
        n_ids++;
    fclose(f);
    const int n_prompt = atoi(argv[4]), n_gen = atoi(argv[5]);
    if (n_prompt < 1 || n_prompt > n_ids || n_gen < 1 || n_prompt + n_gen > MAX_IDS) {
        fprintf(stderr, "diverge_dump: bad N_PROMPT/N_GEN for %d ids\n", n_ids);
        return 2;
    }

    rvl_model *m = NULL;
    rvl_ctx *c = NULL;
    if (rvl_model_open(&m, argv[1]) < 0)
        return fail(argv[1]);
    rvl_ctx_params cp = {.n_ctx = MAX_IDS, .n_threads = 2, .kv_type = RVL_KV_F16};
    if (rvl_ctx_open(&c, m, &cp) < 0)
        return fail("context");
    FILE *tf = NULL;
    if (argc == 7) {
        if (!(tf = fopen(argv[6], "wb"))) {
            perror(argv[6]);
            return 1;
        }
        rvl_ctx_set_trace(c, trace_row, tf);
    }
    const uint32_t nv = rvl_model_hparams(m)->n_vocab;
    FILE *o = fopen(argv[3], "wb");
    if (!o) {
        perror(argv[3]);
        return 1;
    }
    const float *lg;
    if (rvl_decode(c, ids, (uint32_t)n_prompt, &lg) < 0)
        return fail("prompt");
    int n_seq = n_prompt;
    for (int s = 0; s < n_gen; s++) {
        fwrite(lg, sizeof(float), nv, o);
        int32_t best = 0;
        for (uint32_t i = 1; i < nv; i++)
            if (lg[i] > lg[best])
                best = (int32_t)i;
        const int32_t next = n_seq < n_ids ? ids[n_seq] : best;
        ids[n_seq++] = next;
        if (s + 1 < n_gen && rvl_decode(c, &next, 1, &lg) < 0)
            return fail("decode");
    }
    fclose(o);
    if (tf)
        fclose(tf);
    char path[4096];
    snprintf(path, sizeof path, "%s.ids", argv[3]);
    if (!(o = fopen(path, "w"))) {
        perror(path);
        return 1;
    }
    for (int i = 0; i < n_seq; i++)
        fprintf(o, "%d%c", ids[i], i + 1 < n_seq ? ' ' : '\n');
    fclose(o);
    rvl_ctx_close(c);
    rvl_model_close(m);
    return 0;
}
