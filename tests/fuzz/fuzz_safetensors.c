/*
 * fuzz_safetensors.c - libFuzzer harness for the safetensors reader
 * (rvl_st_parse).
 *
 * On success it checks and touches everything the parse handed out: every
 * metadata key and value, every tensor name, the first and last byte of
 * every tensor's data; it aborts on a view the parser should have refused
 * (outside the input, inside the header, overlapping its neighbour, a size
 * that disagrees with the shape). Corpus: tests/fuzz/corpus/safetensors/
 * (scripts/make-st-corpus.py).
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

static void check_tensor(const rvl_tensor_info *t, const uint8_t *buf, size_t size,
                         uint64_t data_start)
{
    uint32_t esize = 0;
    uint64_t n = 1;
    const unsigned char *p = t->data;

    touch(t->name.ptr, t->name.len);
    if (strlen(t->name.ptr) != t->name.len)   /* names are NUL-terminated copies */
        abort();
    if (!rvl_st_dtype_name(t->type, &esize) || t->n_dims > RVL_MAX_DIMS)
        abort();
    bool zero = false;
    for (uint32_t d = 0; d < RVL_MAX_DIMS; d++) {
        if (d >= t->n_dims && t->ne[d] != 1)
            abort();
        zero |= t->ne[d] == 0;
    }
    /* with a zero dim the other dims may multiply past 2^64 (as in the
     * reference, only when the zero comes first in safetensors order) */
    for (uint32_t d = 0; d < RVL_MAX_DIMS && !zero; d++)
        if (__builtin_mul_overflow(n, t->ne[d], &n))
            abort();
    if (zero)
        n = 0;
    if (n != t->n_elements || n * esize != t->nbytes)
        abort();
    if (t->offset < data_start || t->offset > size || t->nbytes > size - t->offset ||
        p != buf + t->offset)
        abort();
    if (t->nbytes) {
        touch(p, 1);
        touch(p + t->nbytes - 1, 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so that reading one byte too far is caught. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);

    rvl_st *st;
    if (rvl_st_parse(&st, buf, size, "fuzz.safetensors", 0) == 0) {
        uint64_t hlen = 0, end;
        for (int i = 7; i >= 0; i--)
            hlen = hlen << 8 | buf[i];
        end = 8 + hlen;
        for (uint64_t i = 0; i < st->n_kv; i++) {
            const rvl_kv *kv = &st->kv[i];
            if (kv->type != RVL_GGUF_STRING || kv->n != 1 || kv->strs[0].ptr != kv->data)
                abort();
            touch(kv->key.ptr, kv->key.len);
            touch(kv->strs[0].ptr, kv->strs[0].len);
        }
        for (uint64_t i = 0; i < st->n_tensors; i++) {
            const rvl_tensor_info *t = &st->tensors[i];
            check_tensor(t, buf, size, 8 + hlen);
            if (t->offset != end)      /* sorted, contiguous, no holes */
                abort();
            end = t->offset + t->nbytes;
        }
        if (end != size)
            abort();
        rvl_st_free(st);
    } else {
        sink += strlen(rvl_errmsg());
    }
    free(buf);
    return 0;
}
