/*
 * dequant.c - GGUF to float GGUF (`ruvllm dequant`).
 *
 * Each tensor streams through the writer in chunks of whole rows:
 * dequantize kernel -> f32 scratch -> F16/BF16 quantizer (or the f32 as
 * is). Tensors already in the destination type are copied byte for byte,
 * so F16 -> F16 and F32 norms stay exact.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/convert_int.h"
#include "formats.h"

/* The type a tensor gets: 1-D float tensors stay F32 (llama.cpp keeps
 * norms and biases in F32), others go to `to`; types without a
 * dequantizer (integers, F64) are kept. */
static uint32_t dequant_type(const rvl_tensor_info *t, uint32_t to)
{
    const rvl_kformat *kf = rvl_kformat_get(t->type);
    if (!kf || !kf->dequantize)
        return t->type;
    return t->n_dims <= 1 ? RVL_TYPE_F32 : to;
}

static int convert_tensor(rvl_gguf_writer *w, uint64_t idx, const rvl_tensor_info *t,
                          uint32_t to, float *f32, void *obuf)
{
    const char *src = t->data;
    uint32_t from = t->type;
    if (from == to)
        return rvl_gguf_writer_tensor_data(w, idx, src, t->nbytes);

    const rvl_kformat *kin = rvl_kformat_get(from), *kout = rvl_kformat_get(to);
    uint64_t row = t->ne[0], n_rows = row ? t->n_elements / row : 0;
    uint64_t in_row = rvl_kformat_row_bytes(kin, row), out_row = rvl_kformat_row_bytes(kout, row);
    uint64_t chunk = rvl_convert_chunk_rows(row, n_rows);
    for (uint64_t r = 0; r < n_rows; r += chunk) {
        uint64_t m = n_rows - r < chunk ? n_rows - r : chunk;
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        for (uint64_t k = 0; k < m; k++) {
            float *x = f32 + k * row;
            kin->dequantize(src + (r + k) * in_row, x, (int64_t)row);
            if (to != RVL_TYPE_F32)
                kout->quantize(x, (char *)obuf + k * out_row, (int64_t)row, NULL);
        }
        const void *out = to == RVL_TYPE_F32 ? (const void *)f32 : obuf;
        int rc = rvl_gguf_writer_tensor_data(w, idx, out, m * out_row);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int rvl_dequant_gguf(const char *in, const char *out, const rvl_dequant_params *p)
{
    rvl_file *f = NULL;
    rvl_gguf_writer *w = NULL;
    float *f32 = NULL;
    void *obuf = NULL;
    int rc;

    if (p->type != RVL_TYPE_F32 && p->type != RVL_TYPE_F16 && p->type != RVL_TYPE_BF16)
        return rvl_seterr(RVL_EINVAL, "dequant: the output type must be F32, F16 or BF16");
    if ((rc = rvl_convert_check_paths(in, out)) < 0)
        return rc;
    if ((rc = rvl_convert_open_input(in, out, &f)) < 0)
        return rc;

    /* scratch: the largest chunk of any tensor */
    uint64_t n = rvl_file_n_tensors(f), max_elems = 0, total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        const rvl_kformat *kf = rvl_kformat_get(t->type);
        if (dequant_type(t, p->type) != t->type && (!kf || !kf->dequantize)) {
            rc = rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor %.*s: no dequantizer for %s", in,
                            (int)t->name.len, t->name.ptr, kf ? kf->name : "?");
            goto fail;
        }
        uint64_t row = t->ne[0], n_rows = row ? t->n_elements / row : 0;
        uint64_t e = rvl_convert_chunk_rows(row, n_rows) * row;
        if (e > max_elems)
            max_elems = e;
        total += t->nbytes;
    }
    if (max_elems > SIZE_MAX / 4) {
        rc = rvl_seterr(RVL_ERANGE, "%s: rows too long", in);
        goto fail;
    }
    f32 = malloc((size_t)(max_elems ? max_elems : 1) * 4);
    obuf = malloc((size_t)(max_elems ? max_elems : 1) * 2);
    if (!f32 || !obuf) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }

    static const char *const drop[] = {"ruvllm.file_type", NULL};
    if ((rc = rvl_gguf_writer_open(&w, out)) < 0 ||
        (rc = rvl_convert_write_kvs(w, f, rvl_convert_float_ftype(p->type), 0, drop)) < 0)
        goto fail;
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len > 255 ? 255 : t->name.len), t->name.ptr);
        if ((rc = rvl_gguf_writer_add_tensor(w, name, dequant_type(t, p->type), t->n_dims, t->ne,
                                             NULL)) < 0)
            goto fail;
    }
    if ((rc = rvl_gguf_writer_begin_data(w)) < 0)
        goto fail;
    uint64_t done = 0;
    for (uint64_t i = 0; i < n; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len > 255 ? 255 : t->name.len), t->name.ptr);
        if (p->progress)
            p->progress(p->ud, &(rvl_convert_progress){i, n, name, t->type, dequant_type(t, p->type),
                                                        t->n_dims, t->ne, done, total});
        if ((rc = convert_tensor(w, i, t, dequant_type(t, p->type), f32, obuf)) < 0) {
            if (rc != RVL_EINTR)
                rvl_preerr(rc, "%s: tensor %s", out, name);
            goto fail;
        }
        done += t->nbytes;
    }
    if (p->progress)
        p->progress(p->ud, &(rvl_convert_progress){n, n, "", 0, 0, 0, NULL, total, total});
    rc = rvl_gguf_writer_finish(w);
    w = NULL;
    if (rc < 0)
        goto fail;
    free(f32);
    free(obuf);
    rvl_file_close(f);
    return 0;
fail:
    rvl_gguf_writer_abort(w);
    free(f32);
    free(obuf);
    rvl_file_close(f);
    return rc;
}
