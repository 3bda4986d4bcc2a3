/*
 * convert.c - what dequant and quantize share: the same-file check
 * and the row-chunked tensor conversion loop.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "convert/convert_int.h"
#include "formats.h"

int rvl_convert_check_paths(const char *in, const char *out)
{
    struct stat a, b;
    if (stat(out, &b) < 0)
        return 0;                        /* nothing there yet */
    if (S_ISDIR(b.st_mode))
        return rvl_seterr(RVL_EINVAL, "%s: is a directory", out);
    if (stat(in, &a) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return rvl_seterr(RVL_EINVAL, "%s: output is the input file; write to another path", out);
    return 0;
}

uint32_t rvl_convert_float_ftype(uint32_t type)
{
    switch (type) {
    case RVL_TYPE_F16: return RVL_FTYPE_MOSTLY_F16;
    case RVL_TYPE_BF16: return RVL_FTYPE_MOSTLY_BF16;
    default: return RVL_FTYPE_ALL_F32;
    }
}

uint64_t rvl_convert_chunk_rows(uint64_t row_elems, uint64_t n_rows)
{
    uint64_t rows = CONVERT_CHUNK_ELEMS / (row_elems ? row_elems : 1);
    if (rows == 0)
        rows = 1;
    return rows < n_rows ? rows : n_rows;
}

int rvl_convert_write_kvs(rvl_gguf_writer *w, const rvl_file *f, uint32_t ftype, uint32_t qver,
                          const char *const *drop)
{
    bool have_ftype = false, have_qver = false;
    int rc;
    for (uint64_t i = 0; i < rvl_file_n_kv(f); i++) {
        const rvl_kv *kv = rvl_file_kv(f, i);
        bool skip = false;
        for (size_t j = 0; drop && drop[j]; j++)
            if (rvl_str_eq(kv->key, drop[j]))
                skip = true;
        if (skip)
            continue;
        if (rvl_str_eq(kv->key, "general.file_type")) {
            have_ftype = true;
            if (ftype == RVL_FTYPE_NONE)
                continue;
            rc = rvl_gguf_writer_kv_u32(w, "general.file_type", ftype);
        } else if (qver && rvl_str_eq(kv->key, "general.quantization_version")) {
            have_qver = true;
            rc = rvl_gguf_writer_kv_u32(w, "general.quantization_version", qver);
        } else {
            rc = rvl_gguf_writer_kv_copy(w, kv);
        }
        if (rc < 0)
            return rc;
    }
    if (!have_qver && qver && (rc = rvl_gguf_writer_kv_u32(w, "general.quantization_version", qver)) < 0)
        return rc;
    if (!have_ftype && ftype != RVL_FTYPE_NONE)
        return rvl_gguf_writer_kv_u32(w, "general.file_type", ftype);
    return 0;
}
