/*
 * gguf_writer.c - GGUF writer (version 3) on top of rvl_afile.
 *
 * Metadata is serialized into memory as it is added; begin_data writes the
 * header, the metadata, the tensor infos and the padding, then tensor data
 * streams to the temporary file. finish pads the end, fsyncs and renames:
 * nothing appears at the destination before that, and any failure removes
 * the temporary.
 *
 * The output matches gguf-py's GGUFWriter byte for byte for the same keys
 * and tensors added in the same order: general.alignment is written only
 * when set (where it was set, like add_custom_alignment), tensors are laid
 * out in add order at offsets padded to the alignment, and the file ends
 * padded to the alignment.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format_int.h"
#include "ruvllm_tools.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF writer assumes a little-endian host"
#endif

#define GGUF_VERSION_OUT 3
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGML_MAX_NAME 64       /* llama.cpp refuses names of 64 bytes or more */

/* ======================================================================
 * Small helpers: serialized images (rvl_buf), string hash set
 * ====================================================================== */

/* Append to an image (the metadata, the header); the errors name the
 * writer. */
static int buf_put(rvl_buf *b, const void *src, size_t n)
{
    if (rvl_buf_add(b, src, n) == 0)
        return 0;
    if (n >= SIZE_MAX - b->n)
        return rvl_seterr(RVL_ENOMEM, "gguf writer: metadata too large");
    return rvl_seterr(RVL_ENOMEM, "gguf writer: out of memory for metadata");
}

static int buf_u32(rvl_buf *b, uint32_t v) { return buf_put(b, &v, 4); }
static int buf_u64(rvl_buf *b, uint64_t v) { return buf_put(b, &v, 8); }
static int buf_str(rvl_buf *b, const char *s, uint64_t n)
{
    int rc = buf_u64(b, n);
    if (rc) return rc;
    if (n > SIZE_MAX)
        return rvl_seterr(RVL_ENOMEM, "gguf writer: string too large");
    return buf_put(b, s, (size_t)n);
}

/* Open-addressing set of strings; entries are indices resolved by `get`. */
typedef struct {
    uint64_t *slot;        /* index + 1; 0 = empty */
    uint64_t cap, n;
} hset;
typedef rvl_str (*hset_get)(const void *ctx, uint64_t idx);

static uint64_t hash_str(rvl_str s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < s.len; i++)
        h = (h ^ (unsigned char)s.ptr[i]) * 0x100000001b3ull;
    return h;
}

static bool str_same(rvl_str a, rvl_str b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, (size_t)a.len) == 0);
}

/* Index of `s` in the set, or -1. */
static int64_t hset_find(const hset *h, rvl_str s, hset_get get, const void *ctx)
{
    if (!h->cap)
        return -1;
    for (uint64_t i = hash_str(s) & (h->cap - 1);; i = (i + 1) & (h->cap - 1)) {
        if (!h->slot[i])
            return -1;
        if (str_same(get(ctx, h->slot[i] - 1), s))
            return (int64_t)(h->slot[i] - 1);
    }
}

static int hset_add(hset *h, uint64_t idx, hset_get get, const void *ctx)
{
    if ((h->n + 1) * 2 > h->cap) {
        uint64_t cap = h->cap ? h->cap * 2 : 64;
        uint64_t *s = calloc(cap, sizeof *s);
        if (!s)
            return rvl_seterr(RVL_ENOMEM, "gguf writer: out of memory");
        for (uint64_t j = 0; j < h->cap; j++) {
            if (!h->slot[j]) continue;
            uint64_t i = hash_str(get(ctx, h->slot[j] - 1)) & (cap - 1);
            while (s[i]) i = (i + 1) & (cap - 1);
            s[i] = h->slot[j];
        }
        free(h->slot);
        h->slot = s;
        h->cap = cap;
    }
    uint64_t i = hash_str(get(ctx, idx)) & (h->cap - 1);
    while (h->slot[i]) i = (i + 1) & (h->cap - 1);
    h->slot[i] = idx + 1;
    h->n++;
    return 0;
}

/* ======================================================================
 * Writer state
 * ====================================================================== */

typedef struct {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    const void *data;      /* borrowed; NULL: streamed by tensor_data */
    uint64_t nbytes;
    uint64_t offset;       /* relative to the data section */
} wtensor;

enum { ST_META, ST_DATA };

struct rvl_gguf_writer {
    rvl_afile *af;
    char *path;
    int state;
    int err;               /* sticky: an I/O failure poisons the writer */
    char errmsg[512];      /* ... and its message, repeated by later calls */
    uint32_t alignment;
    size_t align_val;      /* offset in meta of general.alignment's value, or 0 */

    rvl_buf meta;          /* serialized kv pairs */
    uint64_t n_kv;
    size_t *key_at;        /* offset in meta of each key (u64 len + bytes) */
    size_t cap_key;
    hset keys;

    wtensor *t;
    uint64_t n_t, cap_t;
    hset names;

    uint64_t data_start;   /* absolute offset of the data section */
    uint64_t next;         /* first tensor whose data is not fully written */
    uint64_t written;      /* bytes of tensor `next` already written */
};

static rvl_str key_get(const void *ctx, uint64_t idx)
{
    const rvl_gguf_writer *w = ctx;
    const uint8_t *p = (const uint8_t *)w->meta.p + w->key_at[idx];
    uint64_t len;
    memcpy(&len, p, 8);
    return (rvl_str){ (const char *)p + 8, len };
}

static rvl_str name_get(const void *ctx, uint64_t idx)
{
    const rvl_gguf_writer *w = ctx;
    return (rvl_str){ w->t[idx].name, strlen(w->t[idx].name) };
}

/* Fail once, for good: the temporary is removed by finish/abort. */
static int poison(rvl_gguf_writer *w, int rc)
{
    if (!w->err) {
        w->err = rc;
        snprintf(w->errmsg, sizeof w->errmsg, "%s", rvl_errmsg());
    }
    return rc;
}

static int sticky(const rvl_gguf_writer *w)
{
    return rvl_seterr(w->err, "%s", w->errmsg);
}

int rvl_gguf_writer_open(rvl_gguf_writer **out, const char *path)
{
    int rc;
    if (!out || !path || !*path)
        return rvl_seterr(RVL_EINVAL, "gguf writer: no output path");
    *out = NULL;
    rvl_gguf_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", path);
    }
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    if ((rc = rvl_afile_open(&w->af, path))) {
        free(w->path);
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

static void writer_free(rvl_gguf_writer *w)
{
    for (uint64_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->names.slot);
    free(w->keys.slot);
    free(w->key_at);
    free(w->meta.p);
    free(w->path);
    free(w);
}

void rvl_gguf_writer_abort(rvl_gguf_writer *w)
{
    if (!w)
        return;
    rvl_afile_abort(w->af);
    writer_free(w);
}

static int check_meta_state(rvl_gguf_writer *w, const char *what)
{
    if (!w)
        return rvl_seterr(RVL_EINVAL, "gguf writer: %s: no writer", what);
    if (w->err)
        return sticky(w);
    if (w->state != ST_META)
        return rvl_seterr(RVL_EINVAL, "%s: %s after begin_data", w->path, what);
    return 0;
}

/* ======================================================================
 * Metadata
 * ====================================================================== */

static bool power_of_two(uint64_t a) { return a && !(a & (a - 1)); }

/* Append one kv pair. `data` holds the scalar or the numeric array
 * elements; `strs` the strings of a STRING scalar (1) or array (n). */
static int add_kv(rvl_gguf_writer *w, const char *key, size_t klen, uint32_t type,
                  uint32_t arr_type, const void *data, const rvl_str *strs, uint64_t n)
{
    int rc = check_meta_state(w, "metadata");
    if (rc) return rc;
    if (!key)
        return rvl_seterr(RVL_EINVAL, "%s: metadata key is NULL", w->path);
    rvl_str k = { key, klen };
    int ks = (int)(klen > 200 ? 200 : klen);     /* key length shown in messages */
    if (klen == 0)
        return rvl_seterr(RVL_EINVAL, "%s: empty metadata key", w->path);
    bool is_align = str_same(k, (rvl_str){ "general.alignment", 17 });

    uint32_t vt = type == RVL_GGUF_ARRAY ? arr_type : type;
    if (type >= RVL_GGUF_VTYPE_COUNT || vt >= RVL_GGUF_VTYPE_COUNT)
        return rvl_seterr(RVL_EINVAL, "%s: key '%.*s': unknown value type %" PRIu32,
                          w->path, ks, key, vt);
    if (type == RVL_GGUF_ARRAY && arr_type == RVL_GGUF_ARRAY)
        return rvl_seterr(RVL_EINVAL, "%s: key '%.*s': nested arrays are not supported",
                          w->path, ks, key);
    uint64_t count = type == RVL_GGUF_ARRAY ? n : 1;
    size_t esz = rvl_gguf_vtype_size(vt);
    uint64_t bytes = 0;
    if (vt == RVL_GGUF_STRING) {
        if (count && !strs)
            return rvl_seterr(RVL_EINVAL, "%s: key '%.*s': no strings given", w->path,
                              ks, key);
        for (uint64_t i = 0; i < count; i++)
            if (strs[i].len && !strs[i].ptr)
                return rvl_seterr(RVL_EINVAL, "%s: key '%.*s': string %" PRIu64 " is NULL",
                                  w->path, ks, key, i);
    } else {
        if (rvl_mul_ovf(count, esz, &bytes) || bytes > SIZE_MAX)
            return rvl_seterr(RVL_ERANGE, "%s: key '%.*s': array of %" PRIu64
                              " elements is too large", w->path,
                              ks, key, count);
        if (bytes && !data)
            return rvl_seterr(RVL_EINVAL, "%s: key '%.*s': no data given", w->path,
                              ks, key);
        if (vt == RVL_GGUF_BOOL)
            for (uint64_t i = 0; i < count; i++)
                if (((const uint8_t *)data)[i] > 1)
                    return rvl_seterr(RVL_EINVAL, "%s: key '%.*s': bool value %u is "
                                      "neither 0 nor 1", w->path,
                                      ks, key,
                                      ((const uint8_t *)data)[i]);
    }

    if (is_align) {
        uint32_t a;
        if (type != RVL_GGUF_U32)
            return rvl_seterr(RVL_EINVAL, "%s: general.alignment must be u32, not %s",
                              w->path, rvl_gguf_vtype_name(type));
        memcpy(&a, data, 4);
        if (!power_of_two(a))
            return rvl_seterr(RVL_EINVAL, "%s: general.alignment %" PRIu32
                              " is not a non-zero power of two", w->path, a);
        if (w->align_val) {          /* set again: update in place (gguf-py does) */
            memcpy(w->meta.p + w->align_val, &a, 4);
            w->alignment = a;
            return 0;
        }
    } else if (hset_find(&w->keys, k, key_get, w) >= 0) {
        return rvl_seterr(RVL_EINVAL, "%s: duplicate metadata key '%.*s'", w->path,
                          ks, key);
    }

    if (w->n_kv == w->cap_key) {
        size_t cap = w->cap_key ? w->cap_key * 2 : 32;
        size_t *p = realloc(w->key_at, cap * sizeof *p);
        if (!p)
            return rvl_seterr(RVL_ENOMEM, "%s: out of memory", w->path);
        w->key_at = p;
        w->cap_key = cap;
    }

    size_t start = w->meta.n;
    rc = buf_str(&w->meta, key, klen);
    if (!rc) rc = buf_u32(&w->meta, type);
    if (!rc && type == RVL_GGUF_ARRAY) {
        rc = buf_u32(&w->meta, arr_type);
        if (!rc) rc = buf_u64(&w->meta, n);
    }
    size_t val_at = w->meta.n;
    if (!rc && vt == RVL_GGUF_STRING) {
        for (uint64_t i = 0; !rc && i < count; i++)
            rc = buf_str(&w->meta, strs[i].ptr, strs[i].len);
    } else if (!rc) {
        rc = buf_put(&w->meta, data, (size_t)bytes);
    }
    if (!rc) {
        w->key_at[w->n_kv] = start;
        rc = hset_add(&w->keys, w->n_kv, key_get, w);
    }
    if (rc) {
        w->meta.n = start;         /* roll back the partial pair */
        w->meta.oom = false;
        return rc;
    }
    w->n_kv++;
    if (is_align) {
        w->align_val = val_at;
        memcpy(&w->alignment, data, 4);
    }
    return 0;
}

static int kv_scalar(rvl_gguf_writer *w, const char *key, uint32_t type, const void *v)
{
    return add_kv(w, key, key ? strlen(key) : 0, type, 0, v, NULL, 1);
}

int rvl_gguf_writer_set_alignment(rvl_gguf_writer *w, uint32_t align)
{
    int rc = check_meta_state(w, "set_alignment");
    if (rc) return rc;
    if (!power_of_two(align))
        return rvl_seterr(RVL_EINVAL, "%s: alignment %" PRIu32
                          " is not a non-zero power of two", w->path, align);
    return kv_scalar(w, "general.alignment", RVL_GGUF_U32, &align);
}

int rvl_gguf_writer_kv_u32(rvl_gguf_writer *w, const char *key, uint32_t v)
{
    return kv_scalar(w, key, RVL_GGUF_U32, &v);
}

int rvl_gguf_writer_kv_i32(rvl_gguf_writer *w, const char *key, int32_t v)
{
    return kv_scalar(w, key, RVL_GGUF_I32, &v);
}

int rvl_gguf_writer_kv_u64(rvl_gguf_writer *w, const char *key, uint64_t v)
{
    return kv_scalar(w, key, RVL_GGUF_U64, &v);
}

int rvl_gguf_writer_kv_f32(rvl_gguf_writer *w, const char *key, float v)
{
    return kv_scalar(w, key, RVL_GGUF_F32, &v);
}

int rvl_gguf_writer_kv_bool(rvl_gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return kv_scalar(w, key, RVL_GGUF_BOOL, &b);
}

int rvl_gguf_writer_kv_str(rvl_gguf_writer *w, const char *key, const char *v)
{
    if (!v)
        return rvl_seterr(RVL_EINVAL, "gguf writer: key '%s': NULL string",
                          key ? key : "(null)");
    rvl_str s = { v, strlen(v) };
    return add_kv(w, key, key ? strlen(key) : 0, RVL_GGUF_STRING, 0, s.ptr, &s, 1);
}

int rvl_gguf_writer_kv_arr(rvl_gguf_writer *w, const char *key, uint32_t arr_type,
                           const void *data, uint64_t n)
{
    if (arr_type == RVL_GGUF_STRING)
        return rvl_seterr(RVL_EINVAL, "gguf writer: key '%s': use kv_str_arr for strings",
                          key ? key : "(null)");
    return add_kv(w, key, key ? strlen(key) : 0, RVL_GGUF_ARRAY, arr_type, data, NULL, n);
}

int rvl_gguf_writer_kv_str_arr(rvl_gguf_writer *w, const char *key,
                               const rvl_str *strs, uint64_t n)
{
    return add_kv(w, key, key ? strlen(key) : 0, RVL_GGUF_ARRAY, RVL_GGUF_STRING,
                  NULL, strs, n);
}

int rvl_gguf_writer_kv_copy(rvl_gguf_writer *w, const rvl_kv *kv)
{
    if (!kv)
        return rvl_seterr(RVL_EINVAL, "gguf writer: kv_copy: no pair");
    if (kv->key.len > SIZE_MAX || (kv->key.len && !kv->key.ptr))
        return rvl_seterr(RVL_EINVAL, "gguf writer: kv_copy: bad key");
    if (kv->type == RVL_GGUF_STRING && !kv->strs)
        return rvl_seterr(RVL_EINVAL, "gguf writer: kv_copy: string without its view");
    return add_kv(w, kv->key.ptr, (size_t)kv->key.len, kv->type, kv->arr_type,
                  kv->data, kv->strs, kv->n);
}

/* ======================================================================
 * Tensors
 * ====================================================================== */

int rvl_gguf_writer_add_tensor(rvl_gguf_writer *w, const char *name, uint32_t type,
                               uint32_t n_dims, const uint64_t *ne, const void *data)
{
    int rc = check_meta_state(w, "add_tensor");
    if (rc) return rc;
    if (!name || !*name)
        return rvl_seterr(RVL_EINVAL, "%s: tensor without a name", w->path);
    size_t nlen = strlen(name);
    if (nlen >= GGML_MAX_NAME)
        return rvl_seterr(RVL_EINVAL, "%s: tensor name '%.80s' is %zu bytes long "
                          "(llama.cpp allows at most %d)", w->path, name, nlen,
                          GGML_MAX_NAME - 1);
    if (hset_find(&w->names, (rvl_str){ name, nlen }, name_get, w) >= 0)
        return rvl_seterr(RVL_EINVAL, "%s: duplicate tensor name '%s'", w->path, name);
    const rvl_type_info *ti = (type >= RVL_TYPE_GGML_COUNT && type < RVL_TYPE_RVL_FIRST)
                              ? NULL : rvl_type_get(type);
    if (!ti || !ti->block_size || !ti->type_size)
        return rvl_seterr(RVL_EINVAL, "%s: tensor '%s': type id %" PRIu32
                          " cannot be stored in GGUF", w->path, name, type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || !ne)
        return rvl_seterr(RVL_EINVAL, "%s: tensor '%s': %" PRIu32 " dimensions (must be"
                          " 1 to %d)", w->path, name, n_dims, GGUF_MAX_DIMS);
    uint64_t nel = 1, nbytes;
    for (uint32_t d = 0; d < n_dims; d++)
        if (ne[d] > INT64_MAX || rvl_mul_ovf(nel, ne[d], &nel) || nel > INT64_MAX)
            return rvl_seterr(RVL_ERANGE, "%s: tensor '%s': element count overflows",
                              w->path, name);
    if (ne[0] % ti->block_size)
        return rvl_seterr(RVL_EINVAL, "%s: tensor '%s': row of %" PRIu64 " elements is "
                          "not a whole number of %s blocks of %" PRIu32, w->path, name,
                          ne[0], ti->name, ti->block_size);
    uint64_t row_b = 0;
    if (rvl_type_row_bytes(type, ne[0], &row_b) < 0 ||
        rvl_mul_ovf(ne[0] ? nel / ne[0] : 0, row_b, &nbytes))
        return rvl_seterr(RVL_ERANGE, "%s: tensor '%s': size overflows", w->path, name);

    if (w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *p = realloc(w->t, cap * sizeof *p);
        if (!p)
            return rvl_seterr(RVL_ENOMEM, "%s: out of memory", w->path);
        w->t = p;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", w->path);
    t->type = type;
    t->n_dims = n_dims;
    memcpy(t->ne, ne, n_dims * sizeof *ne);
    t->data = data;
    t->nbytes = nbytes;
    if ((rc = hset_add(&w->names, w->n_t, name_get, w))) {
        free(t->name);
        return rc;
    }
    w->n_t++;
    return 0;
}

/* ======================================================================
 * Data
 * ====================================================================== */

static int wr(rvl_gguf_writer *w, const void *p, uint64_t n)
{
    while (n) {
        size_t k = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : (size_t)n;
        int rc = rvl_afile_write(w->af, p, k);
        if (rc)
            return poison(w, rc);
        p = (const uint8_t *)p + k;
        n -= k;
    }
    return 0;
}

/* Pad up to the start of tensor `next` (the file offset is at the end of
 * the previous tensor). */
static int seek_tensor(rvl_gguf_writer *w)
{
    int rc = rvl_afile_pad(w->af, w->alignment);
    if (rc)
        return poison(w, rc);
    if (rvl_afile_tell(w->af) != w->data_start + w->t[w->next].offset)
        return poison(w, rvl_seterr(RVL_EIO, "%s: internal error: tensor '%s' at byte %"
                                    PRIu64 ", expected %" PRIu64, w->path,
                                    w->t[w->next].name, rvl_afile_tell(w->af),
                                    w->data_start + w->t[w->next].offset));
    return 0;
}

/* Write every tensor from `next` on whose data we hold, up to the first
 * one the caller must stream. */
static int flush_ready(rvl_gguf_writer *w)
{
    int rc;
    while (w->next < w->n_t && w->written == 0 &&
           (w->t[w->next].data || w->t[w->next].nbytes == 0)) {
        if (rvl_interrupted())
            return poison(w, rvl_seterr(RVL_EINTR, "%s: interrupted", w->path));
        wtensor *t = &w->t[w->next];
        if ((rc = seek_tensor(w)) || (rc = wr(w, t->data, t->nbytes)))
            return rc;
        w->next++;
    }
    return 0;
}

int rvl_gguf_writer_begin_data(rvl_gguf_writer *w)
{
    int rc = check_meta_state(w, "begin_data");
    if (rc) return rc;

    rvl_buf h = { 0 };
    static const char magic[4] = { 'G', 'G', 'U', 'F' };
    uint64_t off = 0;
    rc = buf_put(&h, magic, 4);
    if (!rc) rc = buf_u32(&h, GGUF_VERSION_OUT);
    if (!rc) rc = buf_u64(&h, w->n_t);
    if (!rc) rc = buf_u64(&h, w->n_kv);
    for (uint64_t i = 0; !rc && i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        uint64_t padded;
        t->offset = off;
        if (rvl_add_ovf(t->nbytes, w->alignment - 1, &padded) ||
            rvl_add_ovf(off, padded / w->alignment * w->alignment, &off)) {
            rc = rvl_seterr(RVL_ERANGE, "%s: tensor data exceeds 2^64 bytes", w->path);
            break;
        }
        rc = buf_str(&h, t->name, strlen(t->name));
        if (!rc) rc = buf_u32(&h, t->n_dims);
        if (!rc) rc = buf_put(&h, t->ne, 8u * t->n_dims);
        if (!rc) rc = buf_u32(&h, t->type);
        if (!rc) rc = buf_u64(&h, t->offset);
    }
    if (!rc) rc = wr(w, h.p, 24);
    if (!rc) rc = wr(w, w->meta.p, w->meta.n);
    if (!rc) rc = wr(w, h.p + 24, h.n - 24);
    free(h.p);
    if (!rc && (rc = rvl_afile_pad(w->af, w->alignment)))
        poison(w, rc);
    if (rc)
        return poison(w, rc);
    w->data_start = rvl_afile_tell(w->af);
    w->state = ST_DATA;
    return flush_ready(w);
}

int rvl_gguf_writer_tensor_data(rvl_gguf_writer *w, uint64_t i, const void *buf, uint64_t n)
{
    int rc;
    if (!w)
        return rvl_seterr(RVL_EINVAL, "gguf writer: tensor_data: no writer");
    if (w->err)
        return sticky(w);
    if (w->state != ST_DATA)
        return rvl_seterr(RVL_EINVAL, "%s: tensor_data before begin_data", w->path);
    if (i >= w->n_t)
        return rvl_seterr(RVL_EINVAL, "%s: tensor_data: no tensor %" PRIu64 " (%" PRIu64
                          " tensors)", w->path, i, w->n_t);
    wtensor *t = &w->t[i];
    if (i != w->next)
        return rvl_seterr(RVL_EINVAL, "%s: tensor_data for tensor %" PRIu64 " ('%s'), but"
                          " %s", w->path, i, t->name,
                          i < w->next ? "its data is already written"
                                      : "tensors must be supplied in index order");
    if (t->data)
        return rvl_seterr(RVL_EINVAL, "%s: tensor_data for tensor '%s', which was added "
                          "with its data", w->path, t->name);
    if (n > t->nbytes - w->written)
        return rvl_seterr(RVL_EINVAL, "%s: tensor '%s': %" PRIu64 " bytes supplied but only %"
                          PRIu64 " of its %" PRIu64 " bytes remain", w->path, t->name,
                          n, t->nbytes - w->written, t->nbytes);
    if (n && !buf)
        return rvl_seterr(RVL_EINVAL, "%s: tensor '%s': NULL buffer", w->path, t->name);
    if (w->written == 0 && n && (rc = seek_tensor(w)))
        return rc;
    if ((rc = wr(w, buf, n)))
        return rc;
    w->written += n;
    if (w->written == t->nbytes) {
        w->written = 0;
        w->next++;
        return flush_ready(w);
    }
    return 0;
}

int rvl_gguf_writer_finish(rvl_gguf_writer *w)
{
    int rc = 0;
    if (!w)
        return rvl_seterr(RVL_EINVAL, "gguf writer: finish: no writer");
    if (w->err)
        rc = sticky(w);
    if (!rc && w->state == ST_META)
        rc = rvl_gguf_writer_begin_data(w);
    if (!rc && w->next < w->n_t) {
        wtensor *t = &w->t[w->next];
        rc = rvl_seterr(RVL_EINVAL, "%s: tensor %" PRIu64 " ('%s') is incomplete: %" PRIu64
                        " of %" PRIu64 " bytes supplied", w->path, w->next, t->name,
                        w->written, t->nbytes);
    }
    if (!rc && (rc = rvl_afile_pad(w->af, w->alignment)) == 0) {
        rc = rvl_afile_commit(w->af);   /* frees af, also on failure */
        w->af = NULL;
    }
    if (rc)
        rvl_afile_abort(w->af);
    writer_free(w);
    return rc;
}
