/*
 * st_writer.c - safetensors writer (one file), atomic through rvl_afile.
 *
 * Output: u64 LE header length N; N bytes of JSON ({"__metadata__": {...}
 * first when there is metadata, then the tensors in the order they were
 * added, with contiguous data_offsets}) padded with spaces to a multiple of
 * 8 bytes, as the reference writer does, so the data section starts
 * 8-aligned; then the tensor data in the same order. Data is written as
 * given (the format is little-endian; so are the hosts we build for).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "format/format_int.h"
#include "ruvllm_tools.h"

typedef unsigned long long ull;

#define CHUNK (64u << 20)   /* data is written in pieces so Ctrl-C is noticed */

struct st_wtensor {
    char *name;
    const char *dtype;
    uint32_t n_dims;
    uint64_t shape[RVL_MAX_DIMS];   /* safetensors order: outermost first */
    uint64_t nbytes;
    const void *data;               /* borrowed */
};

struct rvl_st_writer {
    rvl_afile *f;
    char *path;
    char **meta;                    /* key, value, key, value, ... */
    size_t n_meta, cap_meta;
    struct st_wtensor *t;
    size_t n_t, cap_t;
    uint64_t data_size;
};

int rvl_st_writer_open(rvl_st_writer **out, const char *path)
{
    rvl_st_writer *w;
    int rc;

    *out = NULL;
    if (!path)
        return rvl_seterr(RVL_EINVAL, "safetensors writer: no path");
    if (!(w = calloc(1, sizeof *w)) || !(w->path = strdup(path))) {
        free(w);
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", path);
    }
    if ((rc = rvl_afile_open(&w->f, path)) < 0) {
        free(w->path);
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

static void writer_free(rvl_st_writer *w)
{
    for (size_t i = 0; i < w->n_meta * 2; i++)
        free(w->meta[i]);
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->meta);
    free(w->t);
    free(w->path);
    free(w);
}

void rvl_st_writer_abort(rvl_st_writer *w)
{
    if (!w)
        return;
    rvl_afile_abort(w->f);
    writer_free(w);
}

/* The reader refuses what JSON cannot carry faithfully through cJSON. */
static bool valid_text(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            p++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) {
            len = 2; cp = c & 0x1f; min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3; cp = c & 0x0f; min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4; cp = c & 0x07; min = 0x10000;
        } else {
            return false;
        }
        for (size_t k = 1; k < len; k++) {
            if ((p[k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (p[k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        p += len;
    }
    return true;
}

int rvl_st_writer_meta(rvl_st_writer *w, const char *key, const char *value)
{
    if (!key || !value)
        return rvl_seterr(RVL_EINVAL, "%s: metadata key or value is NULL", w->path);
    if (!valid_text(key) || !valid_text(value))
        return rvl_seterr(RVL_EINVAL, "%s: metadata '%.120s' is not valid UTF-8", w->path, key);
    for (size_t i = 0; i < w->n_meta; i++)
        if (!strcmp(w->meta[2 * i], key))
            return rvl_seterr(RVL_EINVAL, "%s: metadata key '%.120s' set twice", w->path, key);
    if (w->n_meta == w->cap_meta) {
        size_t cap = w->cap_meta ? w->cap_meta * 2 : 8;
        char **m = realloc(w->meta, cap * 2 * sizeof *m);
        if (!m)
            return rvl_seterr(RVL_ENOMEM, "%s: out of memory", w->path);
        w->meta = m;
        w->cap_meta = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", w->path);
    }
    w->meta[2 * w->n_meta] = k;
    w->meta[2 * w->n_meta + 1] = v;
    w->n_meta++;
    return 0;
}

int rvl_st_writer_add(rvl_st_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                      const uint64_t *shape, const void *data)
{
    struct st_wtensor t = { 0 };
    uint32_t esize;
    uint64_t n = 1;

    if (!name)
        return rvl_seterr(RVL_EINVAL, "%s: tensor name is NULL", w->path);
    if (!strcmp(name, "__metadata__") || !valid_text(name))
        return rvl_seterr(RVL_EINVAL, "%s: invalid tensor name '%.120s'", w->path, name);
    if (!(t.dtype = rvl_st_dtype_name(type, &esize))) {
        const rvl_type_info *ti = rvl_type_get(type);
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: tensor '%.120s': type %s cannot be stored in "
                          "safetensors", w->path, name, ti ? ti->name : "(unknown)");
    }
    if (n_dims > RVL_MAX_DIMS)
        return rvl_seterr(RVL_EINVAL, "%s: tensor '%.120s': %u dimensions (at most %d)",
                          w->path, name, n_dims, RVL_MAX_DIMS);
    if (n_dims && !shape)
        return rvl_seterr(RVL_EINVAL, "%s: tensor '%.120s': no shape", w->path, name);
    for (uint32_t d = 0; d < n_dims; d++) {
        /* the reader (ours, through cJSON doubles) stops at 2^53 */
        if (shape[d] > (1ull << 53) || rvl_mul_ovf(n, shape[d], &n))
            return rvl_seterr(RVL_ERANGE, "%s: tensor '%.120s': shape too large", w->path, name);
        t.shape[d] = shape[d];
    }
    if (rvl_mul_ovf(n, esize, &t.nbytes) || rvl_add_ovf(w->data_size, t.nbytes, &n) ||
        n > (1ull << 53))
        return rvl_seterr(RVL_ERANGE, "%s: tensor '%.120s': data too large", w->path, name);
    if (t.nbytes && !data)
        return rvl_seterr(RVL_EINVAL, "%s: tensor '%.120s': no data", w->path, name);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return rvl_seterr(RVL_EINVAL, "%s: tensor '%.120s' added twice", w->path, name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        struct st_wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt)
            return rvl_seterr(RVL_ENOMEM, "%s: out of memory", w->path);
        w->t = nt;
        w->cap_t = cap;
    }
    if (!(t.name = strdup(name)))
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", w->path);
    t.n_dims = n_dims;
    t.data = data;
    w->t[w->n_t++] = t;
    w->data_size = n;
    return 0;
}

/* Append "[a, b, ...]" of n values to a raw JSON item (exact integers:
 * cJSON would print numbers past 2^31 through "%g"). */
static cJSON *raw_ints(const uint64_t *v, uint32_t n)
{
    char buf[RVL_MAX_DIMS * 22 + 4];
    size_t k = 0;
    buf[k++] = '[';
    for (uint32_t i = 0; i < n; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%llu", i ? "," : "", (ull)v[i]);
    buf[k++] = ']';
    buf[k] = 0;
    return cJSON_CreateRaw(buf);
}

/* The header JSON, NUL-terminated. owned: cJSON_free. */
static char *build_header(const rvl_st_writer *w)
{
    cJSON *root = cJSON_CreateObject(), *o;
    char *s = NULL;
    uint64_t off = 0;

    if (!root)
        return NULL;
    if (w->n_meta) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        if (!m)
            goto out;
        for (size_t i = 0; i < w->n_meta; i++)
            if (!cJSON_AddStringToObject(m, w->meta[2 * i], w->meta[2 * i + 1]))
                goto out;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const struct st_wtensor *t = &w->t[i];
        uint64_t offs[2] = { off, off + t->nbytes };
        cJSON *shape, *doffs;
        if (!(o = cJSON_AddObjectToObject(root, t->name)) ||
            !cJSON_AddStringToObject(o, "dtype", t->dtype))
            goto out;
        if (!(shape = raw_ints(t->shape, t->n_dims)))
            goto out;
        cJSON_AddItemToObject(o, "shape", shape);
        if (!(doffs = raw_ints(offs, 2)))
            goto out;
        cJSON_AddItemToObject(o, "data_offsets", doffs);
        off += t->nbytes;
    }
    s = cJSON_PrintUnformatted(root);
out:
    cJSON_Delete(root);
    return s;
}

int rvl_st_writer_finish(rvl_st_writer *w)
{
    static const char spaces[8] = "        ";
    unsigned char len[8];
    int rc = 0;

    char *json = build_header(w);
    if (!json) {
        rc = rvl_seterr(RVL_ENOMEM, "%s: out of memory", w->path);
        goto fail;
    }
    uint64_t n = strlen(json);
    uint64_t pad = (8 - n % 8) % 8;
    if (n + pad > RVL_ST_MAX_HEADER) {
        cJSON_free(json);
        rc = rvl_seterr(RVL_ERANGE, "%s: header of %llu bytes exceeds the limit of %llu",
                        w->path, (ull)(n + pad), (ull)RVL_ST_MAX_HEADER);
        goto fail;
    }
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((n + pad) >> (8 * i));
    if ((rc = rvl_afile_write(w->f, len, 8)) < 0 ||
        (rc = rvl_afile_write(w->f, json, (size_t)n)) < 0 ||
        (rc = rvl_afile_write(w->f, spaces, (size_t)pad)) < 0) {
        cJSON_free(json);
        goto fail;
    }
    cJSON_free(json);

    for (size_t i = 0; i < w->n_t; i++) {
        const unsigned char *p = w->t[i].data;
        uint64_t left = w->t[i].nbytes;
        while (left > 0) {
            size_t k = left < CHUNK ? (size_t)left : CHUNK;
            if (rvl_interrupted()) {
                rc = rvl_seterr(RVL_EINTR, "%s: interrupted", w->path);
                goto fail;
            }
            if ((rc = rvl_afile_write(w->f, p, k)) < 0)
                goto fail;
            p += k;
            left -= k;
        }
    }
    rc = rvl_afile_commit(w->f);   /* frees the afile, also on failure */
    w->f = NULL;
    writer_free(w);
    return rc;
fail:
    rvl_st_writer_abort(w);
    return rc;
}
