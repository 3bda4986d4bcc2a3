/*
 * gguf.c - GGUF reader (versions 2 and 3) and the rvl_kv accessors.
 *
 * Layout (little-endian):
 *   "GGUF" u32 version  u64 n_tensors  u64 n_kv
 *   n_kv x      { string key; u32 vtype; value }
 *   n_tensors x { string name; u32 n_dims; u64 ne[n_dims]; u32 type; u64 offset }
 *   zero padding to general.alignment (default 32)
 *   tensor data; each offset is relative to the start of this section
 * where string = u64 length + bytes (no terminator) and an array value is
 * u32 element vtype + u64 count + elements.
 *
 * The image is hostile until checked: every count, length, dimension, type
 * id and offset is validated with overflow-safe arithmetic before it is used
 * to read or allocate. Allocations are bounded by the bytes each item
 * consumed in the file, so a small file cannot ask for a large allocation.
 * Strings and tensor data are borrowed views into the caller's mapping.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/format_int.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

#define GGUF_MAGIC_LEN 4
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4            /* GGML_MAX_DIMS */
/* Smallest possible encodings, used to reject absurd counts up front. */
#define KV_MIN_BYTES 13            /* key length 8 + vtype 4 + a u8 value */
#define TI_MIN_BYTES 32            /* name length 8 + n_dims 4 + ne 8 + type 4 + offset 8 */

/* ======================================================================
 * Value types
 * ====================================================================== */

static const char *const vtype_names[RVL_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
    "array", "u64", "i64", "f64",
};
static const uint8_t vtype_sizes[RVL_GGUF_VTYPE_COUNT] = {
    1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8,
};

const char *rvl_gguf_vtype_name(uint32_t vtype)
{
    return vtype < RVL_GGUF_VTYPE_COUNT ? vtype_names[vtype] : "unknown";
}

size_t rvl_gguf_vtype_size(uint32_t vtype)
{
    return vtype < RVL_GGUF_VTYPE_COUNT ? vtype_sizes[vtype] : 0;
}

/* ======================================================================
 * Reading cursor
 * ====================================================================== */

typedef struct {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *name;      /* file name for messages */
    /* pool of every string view (STRING scalars and array elements);
     * kvs refer to it by index until parsing ends, as it may move */
    rvl_str *pool;
    uint64_t n_pool, cap_pool;
    /* per kv: its first string in the pool; then per tensor: the byte
     * offset of its info (for messages) */
    uint64_t *scratch;
    uint64_t cap_scratch;
} cursor;

static uint64_t left(const cursor *c) { return c->size - c->pos; }

static int need(cursor *c, uint64_t n, const char *what)
{
    if (n > left(c))
        return rvl_seterr(RVL_EFORMAT,
                          "%s: truncated: %s at byte %" PRIu64 " needs %" PRIu64
                          " bytes but the file ends at %" PRIu64,
                          c->name, what, c->pos, n, c->size);
    return 0;
}

static uint32_t get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static int rd_u32(cursor *c, uint32_t *v, const char *what)
{
    int rc = need(c, 4, what);
    if (rc) return rc;
    *v = get_u32(c->base + c->pos);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what)
{
    int rc = need(c, 8, what);
    if (rc) return rc;
    *v = get_u64(c->base + c->pos);
    c->pos += 8;
    return 0;
}

/* A gguf string: u64 length, then that many bytes. */
static int rd_str(cursor *c, rvl_str *s, const char *what)
{
    uint64_t at = c->pos, len;
    int rc = rd_u64(c, &len, what);
    if (rc) return rc;
    if (len > left(c))
        return rvl_seterr(RVL_EFORMAT,
                          "%s: %s length %" PRIu64 " at byte %" PRIu64
                          " exceeds the %" PRIu64 " bytes left in the file",
                          c->name, what, len, at, left(c));
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return 0;
}

/* Printable form of a key or tensor name for messages: ASCII only,
 * truncated. */
#define SHOWN_MAX 64
static const char *shown(char buf[SHOWN_MAX + 4], rvl_str s)
{
    uint64_t n = s.len < SHOWN_MAX ? s.len : SHOWN_MAX;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        buf[i] = (ch >= 0x20 && ch < 0x7f && ch != '\'') ? (char)ch : '?';
    }
    if (s.len > SHOWN_MAX) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

/* Make room for `more` entries in the string pool. The caller has already
 * checked that each of them will consume at least 8 bytes of the file. */
static int pool_reserve(cursor *c, uint64_t more)
{
    uint64_t want;
    if (rvl_add_ovf(c->n_pool, more, &want))
        return rvl_seterr(RVL_ENOMEM, "%s: too many strings", c->name);
    if (want <= c->cap_pool)
        return 0;
    uint64_t cap = c->cap_pool ? c->cap_pool : 64;
    while (cap < want)
        cap = cap > UINT64_MAX / 2 ? want : cap * 2;
    uint64_t bytes;
    if (rvl_mul_ovf(cap, sizeof(rvl_str), &bytes) || bytes > SIZE_MAX)
        return rvl_seterr(RVL_ENOMEM, "%s: too many strings", c->name);
    rvl_str *p = realloc(c->pool, (size_t)bytes);
    if (!p)
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory for %" PRIu64 " strings",
                          c->name, want);
    c->pool = p;
    c->cap_pool = cap;
    return 0;
}

/* Make room for item `i` in *arr (and in c->scratch). Arrays grow with the
 * items actually parsed, so memory follows the bytes the file really holds,
 * not the counts it claims; `max` is the claimed count. */
static int grow(cursor *c, void **arr, uint64_t *cap, uint64_t i, uint64_t max, size_t sz)
{
    if (i < *cap && i < c->cap_scratch)
        return 0;
    uint64_t n = *cap ? *cap * 2 : 16;
    if (n > max)
        n = max;               /* max <= size / 13: n * sz cannot overflow */
    if (i >= *cap) {
        void *p = realloc(*arr, (size_t)(n * sz));
        if (!p)
            return rvl_seterr(RVL_ENOMEM, "%s: out of memory", c->name);
        memset((char *)p + *cap * sz, 0, (size_t)((n - *cap) * sz));
        *arr = p;
        *cap = n;
    }
    if (i >= c->cap_scratch) {
        uint64_t *p = realloc(c->scratch, (size_t)(n * sizeof *p));
        if (!p)
            return rvl_seterr(RVL_ENOMEM, "%s: out of memory", c->name);
        c->scratch = p;
        c->cap_scratch = n;
    }
    return 0;
}

/* ======================================================================
 * Metadata
 * ====================================================================== */

/* Parse the value of `kv` (type already read). Sets kv->data, kv->n,
 * kv->arr_type; string views go to the pool starting at *first_str. */
static int parse_value(cursor *c, rvl_kv *kv, uint64_t *first_str)
{
    char kb[SHOWN_MAX + 4];
    uint64_t at = c->pos;
    int rc;

    *first_str = c->n_pool;
    kv->n = 1;
    if (kv->type >= RVL_GGUF_VTYPE_COUNT)
        return rvl_seterr(RVL_EFORMAT, "%s: key '%s' at byte %" PRIu64
                          " has unknown value type %" PRIu32,
                          c->name, shown(kb, kv->key), kv->offset, kv->type);

    if (kv->type == RVL_GGUF_STRING) {
        rvl_str s;
        if ((rc = rd_str(c, &s, "string value")) || (rc = pool_reserve(c, 1)))
            return rc;
        c->pool[c->n_pool++] = s;
        kv->data = s.ptr;
        return 0;
    }

    if (kv->type != RVL_GGUF_ARRAY) {
        size_t sz = vtype_sizes[kv->type];
        if ((rc = need(c, sz, "metadata value")))
            return rc;
        kv->data = c->base + c->pos;
        if (kv->type == RVL_GGUF_BOOL && c->base[c->pos] > 1)
            return rvl_seterr(RVL_EFORMAT, "%s: key '%s': bool value %u at byte %"
                              PRIu64 " is neither 0 nor 1",
                              c->name, shown(kb, kv->key), c->base[c->pos], c->pos);
        c->pos += sz;
        return 0;
    }

    /* array: u32 element type, u64 count, elements */
    uint64_t count;
    if ((rc = rd_u32(c, &kv->arr_type, "array element type")))
        return rc;
    if (kv->arr_type == RVL_GGUF_ARRAY)
        return rvl_seterr(RVL_EFORMAT, "%s: key '%s': nested arrays are not supported"
                          " (array of arrays at byte %" PRIu64 ")",
                          c->name, shown(kb, kv->key), at);
    if (kv->arr_type >= RVL_GGUF_VTYPE_COUNT)
        return rvl_seterr(RVL_EFORMAT, "%s: key '%s': unknown array element type %"
                          PRIu32 " at byte %" PRIu64,
                          c->name, shown(kb, kv->key), kv->arr_type, at);
    uint64_t count_at = c->pos;
    if ((rc = rd_u64(c, &count, "array length")))
        return rc;
    kv->n = count;
    kv->data = c->base + c->pos;

    if (kv->arr_type == RVL_GGUF_STRING) {
        if (count > left(c) / 8)
            return rvl_seterr(RVL_EFORMAT, "%s: key '%s': string array length %" PRIu64
                              " at byte %" PRIu64 " cannot fit in the %" PRIu64
                              " bytes left in the file",
                              c->name, shown(kb, kv->key), count, count_at, left(c));
        if ((rc = pool_reserve(c, count)))
            return rc;
        for (uint64_t i = 0; i < count; i++) {
            if ((rc = rd_str(c, &c->pool[c->n_pool], "string array element")))
                return rc;
            c->n_pool++;
        }
        return 0;
    }

    uint64_t esz = vtype_sizes[kv->arr_type], bytes;
    if (rvl_mul_ovf(count, esz, &bytes) || bytes > left(c))
        return rvl_seterr(RVL_EFORMAT, "%s: key '%s': array of %" PRIu64 " %s at byte %"
                          PRIu64 " cannot fit in the %" PRIu64 " bytes left in the file",
                          c->name, shown(kb, kv->key), count,
                          vtype_names[kv->arr_type], count_at, left(c));
    if (kv->arr_type == RVL_GGUF_BOOL) {
        const uint8_t *p = c->base + c->pos;
        for (uint64_t i = 0; i < count; i++)
            if (p[i] > 1)
                return rvl_seterr(RVL_EFORMAT, "%s: key '%s': bool array element %"
                                  PRIu64 " is %u at byte %" PRIu64 ", not 0 or 1",
                                  c->name, shown(kb, kv->key), i, p[i], c->pos + i);
    }
    c->pos += bytes;
    return 0;
}

static int cmp_str(rvl_str a, rvl_str b)
{
    uint64_t n = a.len < b.len ? a.len : b.len;
    int r = n ? memcmp(a.ptr, b.ptr, (size_t)n) : 0;
    if (r) return r;
    return (a.len > b.len) - (a.len < b.len);
}

static int cmp_kv_key(const void *a, const void *b)
{
    const rvl_kv *x = *(const rvl_kv *const *)a, *y = *(const rvl_kv *const *)b;
    int r = cmp_str(x->key, y->key);
    return r ? r : (x->offset > y->offset) - (x->offset < y->offset);
}

static int cmp_ti_name(const void *a, const void *b)
{
    const rvl_tensor_info *x = *(const rvl_tensor_info *const *)a;
    const rvl_tensor_info *y = *(const rvl_tensor_info *const *)b;
    int r = cmp_str(x->name, y->name);
    return r ? r : (x > y) - (x < y);
}

static int cmp_ti_offset(const void *a, const void *b)
{
    const rvl_tensor_info *x = *(const rvl_tensor_info *const *)a;
    const rvl_tensor_info *y = *(const rvl_tensor_info *const *)b;
    if (x->offset != y->offset) return (x->offset > y->offset) - (x->offset < y->offset);
    return (x > y) - (x < y);
}

/* ======================================================================
 * Parse
 * ====================================================================== */

static int parse_header(cursor *c, rvl_gguf *g)
{
    static const uint8_t magic[GGUF_MAGIC_LEN] = { 'G', 'G', 'U', 'F' };
    int rc;

    if (c->size < GGUF_MAGIC_LEN || memcmp(c->base, magic, GGUF_MAGIC_LEN) != 0)
        return rvl_seterr(RVL_EFORMAT, "%s: not a GGUF file (bad magic at byte 0)",
                          c->name);
    c->pos = GGUF_MAGIC_LEN;
    if ((rc = rd_u32(c, &g->version, "version")))
        return rc;
    uint32_t v = g->version, sw = __builtin_bswap32(v);
    if (sw >= 1 && sw <= 3) {
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: big-endian GGUF file (version %" PRIu32
                          " byte-swapped at byte 4) is not supported",
                          c->name, sw);
    }
    if (v == 1)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: GGUF version 1 (32-bit counts) at "
                          "byte 4 is not supported; convert the file with a newer "
                          "llama.cpp", c->name);
    if (v != 2 && v != 3)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: unsupported GGUF version %" PRIu32
                          " at byte 4 (supported: 2, 3)", c->name, v);
    if ((rc = rd_u64(c, &g->n_tensors, "tensor count")) ||
        (rc = rd_u64(c, &g->n_kv, "metadata count")))
        return rc;

    uint64_t kv_min, ti_min, total;
    if (rvl_mul_ovf(g->n_kv, KV_MIN_BYTES, &kv_min) ||
        rvl_mul_ovf(g->n_tensors, TI_MIN_BYTES, &ti_min) ||
        rvl_add_ovf(kv_min, ti_min, &total) || total > left(c))
        return rvl_seterr(RVL_EFORMAT, "%s: %" PRIu64 " metadata pairs and %" PRIu64
                          " tensors (counts at byte 8) cannot fit in the %" PRIu64
                          " bytes left in the file",
                          c->name, g->n_kv, g->n_tensors, left(c));
    return 0;
}

static int parse_kvs(cursor *c, rvl_gguf *g)
{
    uint64_t cap = 0;
    int rc;

    for (uint64_t i = 0; i < g->n_kv; i++) {
        if ((rc = grow(c, (void **)&g->kv, &cap, i, g->n_kv, sizeof *g->kv)))
            return rc;
        rvl_kv *kv = &g->kv[i];
        kv->offset = c->pos;
        if ((rc = rd_str(c, &kv->key, "metadata key")) ||
            (rc = rd_u32(c, &kv->type, "metadata value type")) ||
            (rc = parse_value(c, kv, &c->scratch[i])))
            return rc;

        if (rvl_str_eq(kv->key, "general.alignment")) {
            uint32_t a;
            if (kv->type != RVL_GGUF_U32)
                return rvl_seterr(RVL_EFORMAT, "%s: key 'general.alignment' at byte %"
                                  PRIu64 " has type %s, expected u32",
                                  c->name, kv->offset, rvl_gguf_vtype_name(kv->type));
            memcpy(&a, kv->data, 4);
            if (a == 0 || (a & (a - 1)) != 0)
                return rvl_seterr(RVL_EFORMAT, "%s: general.alignment %" PRIu32
                                  " at byte %" PRIu64 " is not a non-zero power of two",
                                  c->name, a, kv->offset);
            g->alignment = a;
        }
    }
    return 0;
}

static int parse_tensor_infos(cursor *c, rvl_gguf *g)
{
    char nb[SHOWN_MAX + 4];
    uint64_t cap = 0;
    int rc;

    if (g->n_tensors > left(c) / TI_MIN_BYTES)
        return rvl_seterr(RVL_EFORMAT, "%s: %" PRIu64 " tensor infos cannot fit in the %"
                          PRIu64 " bytes left after the metadata (byte %" PRIu64 ")",
                          c->name, g->n_tensors, left(c), c->pos);

    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if ((rc = grow(c, (void **)&g->tensors, &cap, i, g->n_tensors, sizeof *g->tensors)))
            return rc;
        rvl_tensor_info *t = &g->tensors[i];
        uint64_t at = c->pos, ne_at;
        c->scratch[i] = at;
        if ((rc = rd_str(c, &t->name, "tensor name")) ||
            (rc = rd_u32(c, &t->n_dims, "tensor dimension count")))
            return rc;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
            return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' at byte %" PRIu64 " has %"
                              PRIu32 " dimensions (must be 1 to %d)",
                              c->name, shown(nb, t->name), at, t->n_dims, GGUF_MAX_DIMS);
        ne_at = c->pos;
        if ((rc = need(c, 8ull * t->n_dims, "tensor dimensions")))
            return rc;
        for (uint32_t d = 0; d < RVL_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            t->ne[d] = get_u64(c->base + c->pos);
            c->pos += 8;
            if (t->ne[d] > INT64_MAX)
                return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' dimension %" PRIu32
                                  " is %" PRIu64 " (negative as int64) at byte %" PRIu64,
                                  c->name, shown(nb, t->name), d, t->ne[d],
                                  ne_at + 8 * (uint64_t)d);
        }
        uint64_t type_at = c->pos;
        if ((rc = rd_u32(c, &t->type, "tensor type")) ||
            (rc = rd_u64(c, &t->offset, "tensor data offset")))
            return rc;

        /* safetensors-only element types (U8, BOOL) have no GGUF id */
        const rvl_type_info *ti = (t->type >= RVL_TYPE_GGML_COUNT &&
                                   t->type < RVL_TYPE_RVL_FIRST) ? NULL
                                  : rvl_type_get(t->type);
        if (!ti || ti->block_size == 0 || ti->type_size == 0)
            return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' has unknown or removed type id %"
                              PRIu32 " at byte %" PRIu64,
                              c->name, shown(nb, t->name), t->type, type_at);

        uint64_t nel = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (rvl_mul_ovf(nel, t->ne[d], &nel) || nel > INT64_MAX)
                return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' at byte %" PRIu64
                                  ": element count overflows (dimension %" PRIu32 ")",
                                  c->name, shown(nb, t->name), at, d);
        if (t->ne[0] % ti->block_size != 0)
            return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' at byte %" PRIu64
                              ": row of %" PRIu64 " elements is not a whole number of %s"
                              " blocks of %" PRIu32,
                              c->name, shown(nb, t->name), at, t->ne[0], ti->name,
                              ti->block_size);
        t->n_elements = nel;
        /* rows x row bytes: some project formats carry a per-row header */
        uint64_t row_b = 0;
        if (rvl_type_row_bytes(t->type, t->ne[0], &row_b) < 0 ||
            rvl_mul_ovf(t->ne[0] ? nel / t->ne[0] : 0, row_b, &t->nbytes))
            return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' at byte %" PRIu64
                              ": size in bytes overflows",
                              c->name, shown(nb, t->name), at);
        t->shard = 0;
    }
    return 0;
}

/* Offsets become absolute; every region must be aligned, inside the file
 * and disjoint from the others. */
static int place_tensors(cursor *c, rvl_gguf *g, const uint64_t *info_pos)
{
    char nb[SHOWN_MAX + 4], nb2[SHOWN_MAX + 4];
    int rc = 0;

    for (uint64_t i = 0; i < g->n_tensors; i++) {
        rvl_tensor_info *t = &g->tensors[i];
        uint64_t rel = t->offset, abs, end;
        if (rel % g->alignment != 0)
            return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' data offset %" PRIu64
                              " is not a multiple of the alignment %" PRIu64
                              " (tensor info at byte %" PRIu64 ")",
                              c->name, shown(nb, t->name), rel, g->alignment, info_pos[i]);
        if (rvl_add_ovf(g->data_offset, rel, &abs) || rvl_add_ovf(abs, t->nbytes, &end) ||
            end > c->size)
            return rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' data [offset %" PRIu64 ", %"
                              PRIu64 " bytes] extends past end of file (size %" PRIu64
                              ") at byte %" PRIu64,
                              c->name, shown(nb, t->name), rel, t->nbytes, c->size,
                              info_pos[i]);
        t->offset = abs;
        t->data = c->base + abs;
    }

    if (g->n_tensors < 2)
        return 0;
    const rvl_tensor_info **v = malloc(g->n_tensors * sizeof *v);
    if (!v)
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", c->name);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        v[i] = &g->tensors[i];

    qsort(v, g->n_tensors, sizeof *v, cmp_ti_name);
    for (uint64_t i = 1; i < g->n_tensors; i++)
        if (cmp_str(v[i - 1]->name, v[i]->name) == 0) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: duplicate tensor name '%s' (tensor infos at"
                            " bytes %" PRIu64 " and %" PRIu64 ")",
                            c->name, shown(nb, v[i]->name),
                            info_pos[v[i - 1] - g->tensors], info_pos[v[i] - g->tensors]);
            goto out;
        }

    qsort(v, g->n_tensors, sizeof *v, cmp_ti_offset);
    const rvl_tensor_info *last = NULL;   /* non-empty region reaching furthest */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const rvl_tensor_info *t = v[i];
        if (t->nbytes == 0)
            continue;
        if (last && t->offset < last->offset + last->nbytes) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: tensor '%s' data [offset %" PRIu64 ", %"
                            PRIu64 " bytes] overlaps tensor '%s' [offset %" PRIu64 ", %"
                            PRIu64 " bytes] (tensor info at byte %" PRIu64 ")",
                            c->name, shown(nb, t->name), t->offset - g->data_offset,
                            t->nbytes, shown(nb2, last->name),
                            last->offset - g->data_offset, last->nbytes,
                            info_pos[t - g->tensors]);
            goto out;
        }
        if (!last || t->offset + t->nbytes > last->offset + last->nbytes)
            last = t;
    }
out:
    free(v);
    return rc;
}

static int check_dup_keys(cursor *c, rvl_gguf *g)
{
    char kb[SHOWN_MAX + 4];
    int rc = 0;
    if (g->n_kv < 2)
        return 0;
    const rvl_kv **v = malloc(g->n_kv * sizeof *v);
    if (!v)
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", c->name);
    for (uint64_t i = 0; i < g->n_kv; i++)
        v[i] = &g->kv[i];
    qsort(v, g->n_kv, sizeof *v, cmp_kv_key);
    for (uint64_t i = 1; i < g->n_kv; i++)
        if (cmp_str(v[i - 1]->key, v[i]->key) == 0) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: duplicate key '%s' at bytes %" PRIu64
                            " and %" PRIu64, c->name, shown(kb, v[i]->key),
                            v[i - 1]->offset, v[i]->offset);
            break;
        }
    free(v);
    return rc;
}

int rvl_gguf_parse(rvl_gguf **out, const void *base, uint64_t size, const char *name)
{
    cursor c = { .base = base, .size = size, .name = name ? name : "<memory>" };
    int rc;

    if (!out || (!base && size))
        return rvl_seterr(RVL_EINVAL, "rvl_gguf_parse: invalid arguments");
    *out = NULL;
    rvl_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory", c.name);
    g->alignment = GGUF_DEFAULT_ALIGNMENT;

    if ((rc = parse_header(&c, g)))
        goto fail;

    if ((rc = parse_kvs(&c, g)))
        goto fail;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        rvl_kv *kv = &g->kv[i];
        if (kv->type == RVL_GGUF_STRING ||
            (kv->type == RVL_GGUF_ARRAY && kv->arr_type == RVL_GGUF_STRING))
            kv->strs = c.pool ? c.pool + c.scratch[i] : NULL;   /* NULL: n == 0 */
    }
    g->owned = c.pool;
    c.pool = NULL;
    if ((rc = check_dup_keys(&c, g)))
        goto fail;

    if ((rc = parse_tensor_infos(&c, g)))
        goto fail;
    uint64_t a = g->alignment, pad = (a - c.pos % a) % a;
    if (rvl_add_ovf(c.pos, pad, &g->data_offset)) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: data section offset overflows", c.name);
        goto fail;
    }
    if ((rc = place_tensors(&c, g, c.scratch)))
        goto fail;

    free(c.scratch);
    *out = g;
    return 0;

fail:
    free(c.scratch);
    free(c.pool);
    rvl_gguf_free(g);
    return rc;
}

void rvl_gguf_free(rvl_gguf *g)
{
    if (!g)
        return;
    free(g->kv);
    free(g->tensors);
    free(g->owned);
    free(g);
}

/* ======================================================================
 * Typed accessors
 * ====================================================================== */

static void show_key(char buf[SHOWN_MAX + 4], const rvl_kv *kv)
{
    shown(buf, kv->key);
}

/* Integer value of element i of a scalar or array of integer vtype `t`
 * at p. Returns false if `t` is not an integer type (bool counts). */
static bool load_int(uint32_t t, const uint8_t *p, bool *neg, uint64_t *mag, int64_t *sv)
{
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
    uint64_t u64; int64_t i64;
    switch (t) {
    case RVL_GGUF_BOOL:
    case RVL_GGUF_U8:  memcpy(&u8, p, 1);  u64 = u8;  goto unsig;
    case RVL_GGUF_U16: memcpy(&u16, p, 2); u64 = u16; goto unsig;
    case RVL_GGUF_U32: memcpy(&u32, p, 4); u64 = u32; goto unsig;
    case RVL_GGUF_U64: memcpy(&u64, p, 8);            goto unsig;
    case RVL_GGUF_I8:  memcpy(&i8, p, 1);  i64 = i8;  goto sig;
    case RVL_GGUF_I16: memcpy(&i16, p, 2); i64 = i16; goto sig;
    case RVL_GGUF_I32: memcpy(&i32, p, 4); i64 = i32; goto sig;
    case RVL_GGUF_I64: memcpy(&i64, p, 8);            goto sig;
    default: return false;
    }
unsig:
    *neg = false; *mag = u64; *sv = u64 > INT64_MAX ? INT64_MAX : (int64_t)u64;
    return true;
sig:
    *neg = i64 < 0; *mag = i64 < 0 ? 0 : (uint64_t)i64; *sv = i64;
    return true;
}

static bool load_f64(uint32_t t, const uint8_t *p, double *v)
{
    float f; double d; bool neg; uint64_t mag; int64_t sv;
    if (t == RVL_GGUF_F32) { memcpy(&f, p, 4); *v = f; return true; }
    if (t == RVL_GGUF_F64) { memcpy(&d, p, 8); *v = d; return true; }
    if (t == RVL_GGUF_BOOL || !load_int(t, p, &neg, &mag, &sv)) return false;
    *v = neg ? (double)sv : (double)mag;
    return true;
}

static int scalar_check(const rvl_kv *kv)
{
    if (!kv)
        return rvl_seterr(RVL_ENOTFOUND, "metadata key not found");
    return 0;
}

int rvl_kv_get_u64(const rvl_kv *kv, uint64_t *v)
{
    char kb[SHOWN_MAX + 4];
    bool neg; uint64_t mag; int64_t sv;
    int rc = scalar_check(kv);
    if (rc) return rc;
    if (kv->type == RVL_GGUF_ARRAY || !load_int(kv->type, kv->data, &neg, &mag, &sv))
        return (show_key(kb, kv), rvl_seterr(RVL_EFORMAT, "key '%s' has type %s, expected"
                " an unsigned integer", kb, rvl_gguf_vtype_name(kv->type)));
    if (neg)
        return (show_key(kb, kv), rvl_seterr(RVL_EFORMAT, "key '%s' is negative (%" PRId64
                "), expected an unsigned integer", kb, sv));
    *v = mag;
    return 0;
}

int rvl_kv_get_i64(const rvl_kv *kv, int64_t *v)
{
    char kb[SHOWN_MAX + 4];
    bool neg; uint64_t mag; int64_t sv;
    int rc = scalar_check(kv);
    if (rc) return rc;
    if (kv->type == RVL_GGUF_ARRAY || !load_int(kv->type, kv->data, &neg, &mag, &sv))
        return (show_key(kb, kv), rvl_seterr(RVL_EFORMAT, "key '%s' has type %s, expected"
                " an integer", kb, rvl_gguf_vtype_name(kv->type)));
    if (!neg && mag > INT64_MAX)
        return (show_key(kb, kv), rvl_seterr(RVL_EFORMAT, "key '%s' value %" PRIu64
                " does not fit in a signed 64-bit integer", kb, mag));
    *v = sv;
    return 0;
}

int rvl_kv_get_f64(const rvl_kv *kv, double *v)
{
    char kb[SHOWN_MAX + 4];
    int rc = scalar_check(kv);
    if (rc) return rc;
    if (kv->type == RVL_GGUF_ARRAY || !load_f64(kv->type, kv->data, v))
        return (show_key(kb, kv), rvl_seterr(RVL_EFORMAT, "key '%s' has type %s, expected"
                " a number", kb, rvl_gguf_vtype_name(kv->type)));
    return 0;
}

int rvl_kv_get_str(const rvl_kv *kv, rvl_str *v)
{
    char kb[SHOWN_MAX + 4];
    int rc = scalar_check(kv);
    if (rc) return rc;
    if (kv->type != RVL_GGUF_STRING || !kv->strs)
        return (show_key(kb, kv), rvl_seterr(RVL_EFORMAT, "key '%s' has type %s, expected"
                " a string", kb, rvl_gguf_vtype_name(kv->type)));
    *v = kv->strs[0];
    return 0;
}

/* Element i of a numeric array (or i == 0 of a numeric scalar). */
static const uint8_t *elem(const rvl_kv *kv, uint64_t i, uint32_t *t)
{
    if (!kv)
        return NULL;
    if (kv->type == RVL_GGUF_ARRAY) {
        size_t sz = rvl_gguf_vtype_size(kv->arr_type);
        if (!sz || i >= kv->n)
            return NULL;
        *t = kv->arr_type;
        return (const uint8_t *)kv->data + i * sz;
    }
    if (i != 0 || !rvl_gguf_vtype_size(kv->type))
        return NULL;
    *t = kv->type;
    return kv->data;
}

double rvl_kv_arr_f64(const rvl_kv *kv, uint64_t i)
{
    uint32_t t;
    double v;
    const uint8_t *p = elem(kv, i, &t);
    if (!p)
        return NAN;
    if (t == RVL_GGUF_BOOL)
        return p[0] ? 1.0 : 0.0;
    return load_f64(t, p, &v) ? v : NAN;
}

int64_t rvl_kv_arr_i64(const rvl_kv *kv, uint64_t i)
{
    uint32_t t;
    bool neg; uint64_t mag; int64_t sv;
    const uint8_t *p = elem(kv, i, &t);
    if (!p)
        return 0;
    if (t == RVL_GGUF_F32 || t == RVL_GGUF_F64) {
        double d;
        load_f64(t, p, &d);
        if (!(d == d)) return 0;
        if (d >= 9223372036854775807.0) return INT64_MAX;
        if (d <= -9223372036854775808.0) return INT64_MIN;
        return (int64_t)d;
    }
    return load_int(t, p, &neg, &mag, &sv) ? sv : 0;
}

bool rvl_str_eq(rvl_str s, const char *c)
{
    if (!c)
        return false;
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}
