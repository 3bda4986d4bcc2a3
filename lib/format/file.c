/*
 * file.c - rvl_file: one interface over GGUF and safetensors models.
 *
 * The format is detected from content, not from the file name: "GGUF"
 * magic, else a safetensors header (u64 length then '{'), else a JSON index
 * or a directory holding model.safetensors(.index.json).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "format/format_int.h"

struct rvl_file {
    rvl_file_format fmt;
    char *path;
    rvl_map map;          /* GGUF only; safetensors maps its own shards */
    rvl_gguf *gguf;
    rvl_st *st;
    uint64_t n_kv;
    const rvl_kv *kv;
    uint64_t n_tensors;
    const rvl_tensor_info *tensors;
};

static int open_gguf(rvl_file *f)
{
    int rc = rvl_map_file(&f->map, f->path);
    if (rc < 0)
        return rc;
    rc = rvl_gguf_parse(&f->gguf, f->map.base, f->map.size, f->path);
    if (rc < 0)
        return rc;
    f->fmt = RVL_FMT_GGUF;
    f->n_kv = f->gguf->n_kv;
    f->kv = f->gguf->kv;
    f->n_tensors = f->gguf->n_tensors;
    f->tensors = f->gguf->tensors;
    return 0;
}

static int open_st(rvl_file *f)
{
    int rc = rvl_st_open(&f->st, f->path);
    if (rc < 0)
        return rc;
    f->fmt = RVL_FMT_SAFETENSORS;
    f->n_kv = f->st->n_kv;
    f->kv = f->st->kv;
    f->n_tensors = f->st->n_tensors;
    f->tensors = f->st->tensors;
    return 0;
}

int rvl_file_open(rvl_file **out, const char *path)
{
    struct stat sb;
    rvl_file *f;
    int rc;

    *out = NULL;
    if (stat(path, &sb) < 0)
        return rvl_seterr(errno == ENOENT ? RVL_ENOTFOUND : RVL_EIO,
                          "%s: %s", path, strerror(errno));
    f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", path);
    }
    if (S_ISDIR(sb.st_mode)) {
        rc = open_st(f);
    } else {
        unsigned char head[9] = {0};
        int fd;
        if ((rc = rvl_input_open(path, &fd, NULL)) < 0)   /* refuses a FIFO at once */
            goto out;
        ssize_t got = read(fd, head, sizeof head);
        close(fd);
        size_t n = got > 0 ? (size_t)got : 0;
        if (n >= 4 && memcmp(head, "GGUF", 4) == 0)
            rc = open_gguf(f);
        else if (n >= 1 && (head[0] == '{' || (n == 9 && head[8] == '{')))
            rc = open_st(f);
        else
            rc = rvl_seterr(RVL_EFORMAT,
                            "%s: not a GGUF or safetensors file (unrecognized magic at byte 0)",
                            path);
    }
out:
    if (rc < 0) {
        rvl_file_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

void rvl_file_close(rvl_file *f)
{
    if (!f)
        return;
    rvl_gguf_free(f->gguf);
    rvl_st_free(f->st);
    rvl_map_unmap(&f->map);
    free(f->path);
    free(f);
}

rvl_file_format rvl_file_fmt(const rvl_file *f) { return f->fmt; }
const char *rvl_file_path(const rvl_file *f) { return f->path; }
uint64_t rvl_file_size(const rvl_file *f)
{
    return f->fmt == RVL_FMT_GGUF ? f->map.size : f->st->total_size;
}
uint32_t rvl_file_version(const rvl_file *f) { return f->gguf ? f->gguf->version : 0; }
uint64_t rvl_file_alignment(const rvl_file *f) { return f->gguf ? f->gguf->alignment : 0; }
uint64_t rvl_file_data_offset(const rvl_file *f) { return f->gguf ? f->gguf->data_offset : 0; }
uint64_t rvl_file_n_kv(const rvl_file *f) { return f->n_kv; }
uint64_t rvl_file_n_tensors(const rvl_file *f) { return f->n_tensors; }

const rvl_kv *rvl_file_kv(const rvl_file *f, uint64_t i)
{
    return i < f->n_kv ? &f->kv[i] : NULL;
}

const rvl_tensor_info *rvl_file_tensor(const rvl_file *f, uint64_t i)
{
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const rvl_kv *rvl_file_find_kv(const rvl_file *f, const char *key)
{
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (rvl_str_eq(f->kv[i].key, key))
            return &f->kv[i];
    return NULL;
}

const rvl_tensor_info *rvl_file_find_tensor(const rvl_file *f, const char *name)
{
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (rvl_str_eq(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

/* The parts of a GGUF file's mapping to populate now, as llama.cpp's
 * MAP_POPULATE does, so the first forward pass does not take ~25 000
 * minor faults per 100 MB of weights (time to first token): the mapping
 * but for the skipped [start, end) address ranges (sorted; weights read
 * once for packing, rows read one at a time, model.c), in whole pages, cut
 * into pieces of at most `piece` bytes that threads can populate side by
 * side. Writes at most cap of them into out; returns how many there are.
 * Kernels without MADV_POPULATE_READ (Linux < 5.14) fault lazily: none. */
size_t rvl_file_prefault_ranges(const rvl_file *f, const void *const (*skip)[2], size_t n_skip,
                                size_t piece, const void *(*out)[2], size_t cap)
{
    size_t n = 0;
#ifdef MADV_POPULATE_READ
    if (f->fmt != RVL_FMT_GGUF || !f->map.base || !f->map.size)
        return 0;
    const uintptr_t pg = 4096, end = (uintptr_t)f->map.base + (uintptr_t)f->map.size;
    piece = piece < pg ? pg : piece & ~(pg - 1);
    uintptr_t at = (uintptr_t)f->map.base;
    for (size_t i = 0; i <= n_skip; i++) {
        const uintptr_t stop = i < n_skip ? ((uintptr_t)skip[i][0] + pg - 1) & ~(pg - 1) : end;
        for (uintptr_t a = at; a < stop; a += piece, n++)
            if (n < cap) {
                out[n][0] = (const void *)a;
                out[n][1] = (const void *)(stop - a > piece ? a + piece : stop);
            }
        if (i < n_skip) {
            const uintptr_t next = (uintptr_t)skip[i][1] & ~(pg - 1);
            at = next > at ? next : at;
        }
    }
#else
    (void)f;
    (void)skip;
    (void)n_skip;
    (void)piece;
    (void)out;
    (void)cap;
#endif
    return n;
}
