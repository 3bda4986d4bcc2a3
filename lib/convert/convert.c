/*
 * convert.c - what dequant and quantize share: the same-file check
 * and the row-chunked tensor conversion loop; and the parameter summary
 * of a model file (experts, active parameters, MLA's cache) `info` shows.
 */
#include <errno.h>
#include <stdio.h>
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

/* ======================================================================
 * The parameter summary
 * ====================================================================== */
static uint32_t arch_u32(const rvl_file *f, const char *arch, const char *suffix)
{
    char key[128];
    uint64_t v = 0;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const rvl_kv *kv = rvl_file_find_kv(f, key);
    if (!kv || kv->type == RVL_GGUF_ARRAY || rvl_kv_get_u64(kv, &v) < 0 || v > UINT32_MAX)
        return 0;
    return (uint32_t)v;
}

static bool name_has(const rvl_tensor_info *t, const char *part)
{
    size_t n = strlen(part);
    for (uint64_t i = 0; i + n <= t->name.len; i++)
        if (!memcmp(t->name.ptr + i, part, n))
            return true;
    return false;
}

int rvl_convert_summary(const rvl_file *f, rvl_model_summary *s)
{
    memset(s, 0, sizeof *s);
    char arch[64] = "";
    rvl_str a;
    const rvl_kv *akv = rvl_file_find_kv(f, "general.architecture");
    if (akv && rvl_kv_get_str(akv, &a) == 0)
        snprintf(arch, sizeof arch, "%.*s", (int)(a.len < 63 ? a.len : 63), a.ptr);
    uint64_t nt = rvl_file_n_tensors(f);
    for (uint64_t i = 0; i < nt; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        s->params += t->n_elements;
        if (name_has(t, "_exps."))
            s->expert_params += t->n_elements;
        else if (name_has(t, "_shexp."))
            s->shared_params += t->n_elements;
    }
    if (arch[0]) {
        s->n_expert = arch_u32(f, arch, "expert_count");
        s->n_expert_used = arch_u32(f, arch, "expert_used_count");
    }
    if (s->n_expert && s->n_expert_used <= s->n_expert) {
        s->n_expert_shared = arch_u32(f, arch, "expert_shared_count");
        if (!s->n_expert_shared && s->shared_params)
            s->n_expert_shared = 1;
        s->n_dense_lead = arch_u32(f, arch, "leading_dense_block_count");
        /* (the expert parameters are at most 2^64 / 2^10: no overflow) */
        s->active_params = s->params - s->expert_params +
                           s->expert_params / s->n_expert * s->n_expert_used +
                           s->expert_params % s->n_expert * s->n_expert_used / s->n_expert;
    } else {
        s->n_expert = s->n_expert_used = 0;
        s->expert_params = s->shared_params = 0;
        s->active_params = s->params;
    }
    s->kv_lora_rank = arch[0] ? arch_u32(f, arch, "attention.kv_lora_rank") : 0;
    if (s->kv_lora_rank) {
        s->mla = true;
        s->n_layer = arch_u32(f, arch, "block_count");
        s->n_head = arch_u32(f, arch, "attention.head_count");
        s->q_lora_rank = arch_u32(f, arch, "attention.q_lora_rank");
        s->rope_dim = arch_u32(f, arch, "rope.dimension_count");
        s->key_length_mla = arch_u32(f, arch, "attention.key_length_mla");
        s->value_length_mla = arch_u32(f, arch, "attention.value_length_mla");
        s->kv_bytes_latent = 2ull * s->n_layer * ((uint64_t)s->kv_lora_rank + s->rope_dim);
        s->kv_bytes_per_head = 2ull * s->n_layer * s->n_head *
                               ((uint64_t)s->key_length_mla + s->value_length_mla);
    }
    return 0;
}
