/*
 * fuzz_gguf.c - libFuzzer harness for the GGUF reader (rvl_gguf_parse).
 *
 * On success it touches everything the parse handed out: every key, every
 * scalar through the typed accessors, every array element and string byte,
 * and the first and last byte of every tensor's data, so that a view
 * pointing outside the input shows up under ASan. Corpus:
 * tests/fuzz/corpus/gguf/ (scripts/make-gguf-corpus.py).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/format_int.h"

static volatile uint64_t sink;

static void touch(const void *p, uint64_t n)
{
    const unsigned char *c = p;
    uint64_t h = 0;
    for (uint64_t i = 0; i < n; i++)
        h = h * 31 + c[i];
    sink += h;
}

static void walk_kv(const rvl_kv *kv)
{
    uint64_t u;
    int64_t i;
    double d;
    rvl_str s;

    touch(kv->key.ptr, kv->key.len);
    sink += (uint64_t)rvl_kv_get_u64(kv, &u) + (uint64_t)rvl_kv_get_i64(kv, &i);
    sink += (uint64_t)rvl_kv_get_f64(kv, &d);
    if (rvl_kv_get_str(kv, &s) == 0)
        touch(s.ptr, s.len);
    sink += strlen(rvl_gguf_vtype_name(kv->type)) + rvl_gguf_vtype_size(kv->arr_type);
    if (kv->type == RVL_GGUF_STRING)
        touch(kv->data, kv->strs[0].len);
    if (kv->type != RVL_GGUF_ARRAY)
        return;
    if (kv->arr_type == RVL_GGUF_STRING) {
        for (uint64_t j = 0; j < kv->n; j++)
            touch(kv->strs[j].ptr, kv->strs[j].len);
        return;
    }
    touch(kv->data, kv->n * rvl_gguf_vtype_size(kv->arr_type));
    for (uint64_t j = 0; j < kv->n; j++) {
        d = rvl_kv_arr_f64(kv, j);
        sink += (uint64_t)rvl_kv_arr_i64(kv, j) + (d == d);
    }
    sink += (uint64_t)rvl_kv_arr_i64(kv, kv->n);   /* out of range: 0 */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so that reading one byte too far is caught. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);

    rvl_gguf *g;
    if (rvl_gguf_parse(&g, buf, size, "fuzz.gguf") == 0) {
        for (uint64_t i = 0; i < g->n_kv; i++)
            walk_kv(&g->kv[i]);
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const rvl_tensor_info *t = &g->tensors[i];
            const unsigned char *p = t->data;
            touch(t->name.ptr, t->name.len);
            if (t->offset > size || t->nbytes > size - t->offset ||
                p != buf + t->offset || t->offset < g->data_offset)
                abort();   /* a view the parser should have refused */
            if (t->nbytes) {
                touch(p, 1);
                touch(p + t->nbytes - 1, 1);
            }
        }
        rvl_gguf_free(g);
    } else {
        sink += strlen(rvl_errmsg());
    }
    free(buf);
    return 0;
}
