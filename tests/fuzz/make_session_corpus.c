/*
 * make_session_corpus.c - writes the seed corpus of fuzz_session.c into
 * tests/fuzz/corpus/session/: valid version-2 session files of the tiny
 * llama model with 0, 5, 33, 70 and 100 tokens for the caches of
 * fuzz_session.c (f16, f32, q8, tiered 16/32/tq4, tq4 keys + q4 values)
 * and damaged copies (truncated, one flipped bit; v1-f16-33 is a file of
 * the former version 1, kept). Not built by make; run from the repo root:
 *
 *   cc -Ilib -Ikernels tests/fuzz/make_session_corpus.c build/libruvllm.a \
 *      $(pkg-config --libs libzstd libxxhash libpcre2-8 libutf8proc libcjson) -lm -pthread \
 *      -o /tmp/mksc && /tmp/mksc
 */
#include <stdio.h>
#include <stdlib.h>

#include "ruvllm.h"

static void damage(const char *src, const char *dst, long cut, long flip)
{
    FILE *f = fopen(src, "rb");
    if (!f)
        exit(1);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
        exit(1);
    fclose(f);
    if (flip >= 0 && flip < n)
        b[flip] ^= 0x04;
    f = fopen(dst, "wb");
    if (!f || fwrite(b, 1, (size_t)(cut >= 0 && cut < n ? cut : n), f) == 0)
        exit(1);
    fclose(f);
    free(b);
}

int main(void)
{
    rvl_model *m;
    if (rvl_model_open(&m, "tests/data/tiny/llama.gguf") < 0)
        return 1;
    int32_t ids[100];
    for (int i = 0; i < 100; i++)
        ids[i] = (i * 37 + 11) % 250;
    const int counts[] = {0, 5, 33, 70, 100};
    static const struct {
        const char *name;
        rvl_ctx_params p;
    } kinds[] = {
        {"f16", {.n_ctx = 128, .n_threads = 1, .kv_type = RVL_KV_F16}},
        {"f32", {.n_ctx = 128, .n_threads = 1, .kv_type = RVL_KV_F32}},
        {"q8", {.n_ctx = 128, .n_threads = 1, .kv_type = RVL_KV_Q8}},
        {"tiered", {.n_ctx = 128, .n_threads = 1, .kv_type = RVL_KV_TIERED, .kv_hot = 16, .kv_warm = 32}},
        {"tq4-q4", {.n_ctx = 128, .n_threads = 1, .kv_split = true, .kv_type_k = RVL_KV_TQ4,
                    .kv_type_v = RVL_KV_Q4}},
    };
    char path[256];
    for (int kt = 0; kt < 5; kt++)
        for (int i = 0; i < 5; i++) {
            if ((kt == 1 || kt == 4) && (i == 0 || i == 3))
                continue; /* enough of those */
            rvl_ctx *c;
            const float *lg;
            if (rvl_ctx_open(&c, m, &kinds[kt].p) < 0 ||
                (counts[i] && rvl_decode(c, ids, (uint32_t)counts[i], &lg) < 0))
                return 1;
            snprintf(path, sizeof path, "tests/fuzz/corpus/session/valid-%s-%d", kinds[kt].name, counts[i]);
            if (rvl_session_save(c, path, ids, (size_t)counts[i], i & 1 ? "{\"messages\":[]}" : NULL) < 0)
                return 1;
            rvl_ctx_close(c);
        }
    damage("tests/fuzz/corpus/session/valid-f16-33", "tests/fuzz/corpus/session/cut-header", 40, -1);
    damage("tests/fuzz/corpus/session/valid-f16-33", "tests/fuzz/corpus/session/cut-middle", 900, -1);
    damage("tests/fuzz/corpus/session/valid-f16-5", "tests/fuzz/corpus/session/flip-tokens", -1, 100);
    damage("tests/fuzz/corpus/session/valid-f32-5", "tests/fuzz/corpus/session/flip-count", -1, 40);
    damage("tests/fuzz/corpus/session/valid-tiered-100", "tests/fuzz/corpus/session/flip-tier", -1, 400);
    damage("tests/fuzz/corpus/session/valid-q8-70", "tests/fuzz/corpus/session/cut-q8", 3000, -1);
    rvl_model_close(m);
    return 0;
}
