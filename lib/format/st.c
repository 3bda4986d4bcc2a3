/*
 * st.c - reader for safetensors files and for sharded Hugging Face
 * models (model.safetensors.index.json).
 *
 * File layout (huggingface/safetensors):
 *
 *   u64 LE   N         header length: <= file size - 8 and <= 100 MB
 *   N bytes  JSON      {"__metadata__": {"k": "v", ...},
 *                       "name": {"dtype": "F32", "shape": [2, 3],
 *                                "data_offsets": [begin, end]}, ...}
 *                      (writers pad it with trailing spaces)
 *   rest     data      offsets are relative to its first byte
 *
 * Like the reference implementation we require the tensors to tile the
 * data section exactly: no overlap, no hole, nothing after the last one.
 *
 * The header is hostile text. Before cJSON sees it, a lexical pass
 * (lex_json) checks UTF-8, refuses control characters and "\u0000" (cJSON
 * would silently cut a string there), bounds the nesting depth, allows only
 * integers no larger than 2^53 (cJSON keeps numbers as doubles: anything
 * larger would lose precision) and records the byte offset of every
 * top-level key so that errors can point at a tensor's entry.
 *
 * Memory: the header is copied once (cJSON needs a terminating NUL) and
 * parsed into a cJSON tree of at most ~32 bytes per header byte in the
 * worst case ("[0,0,0,...]" inside an ignored field); the header is at
 * most 100 MB and never larger than the file. cJSON limits nesting to
 * CJSON_NESTING_LIMIT (1000) levels itself; the lexer stops at 16 first.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "format/format_int.h"

typedef unsigned long long ull;

#define ST_MAX_DEPTH 16          /* a valid header nests 3 deep */
#define ST_MAX_INT (1ull << 53)  /* exact in a double */
#define NM 120                   /* longest name quoted in a message */

/* ======================================================================
 * Element types
 * ====================================================================== */

static const struct st_dtype {
    const char *name;
    uint32_t type;
    uint32_t size;
} dtypes[] = {
    { "F64", RVL_TYPE_F64, 8 },  { "F32", RVL_TYPE_F32, 4 },
    { "F16", RVL_TYPE_F16, 2 },  { "BF16", RVL_TYPE_BF16, 2 },
    { "I64", RVL_TYPE_I64, 8 },  { "I32", RVL_TYPE_I32, 4 },
    { "I16", RVL_TYPE_I16, 2 },  { "I8", RVL_TYPE_I8, 1 },
    { "U8", RVL_TYPE_U8, 1 },    { "BOOL", RVL_TYPE_BOOL, 1 },
};

/* Part of the format, but no rvl_type holds them (yet). */
static const char *const dtypes_unsupported[] = {
    "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",
    "U16", "U32", "U64", "C64",
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

const char *rvl_st_dtype_name(uint32_t type, uint32_t *elem_size)
{
    for (size_t i = 0; i < ARRAY_LEN(dtypes); i++) {
        if (dtypes[i].type == type) {
            if (elem_size)
                *elem_size = dtypes[i].size;
            return dtypes[i].name;
        }
    }
    return NULL;
}

/* ======================================================================
 * Ownership
 * ====================================================================== */

/* Everything an rvl_st owns besides its tensor and kv arrays. */
struct st_own {
    char *arena;        /* tensor names, metadata keys and values (NUL-ended) */
    rvl_str *strs;      /* metadata values, one per kv */
    rvl_map *maps;      /* files mapped by rvl_st_open */
    uint32_t n_maps;
    rvl_st **parts;     /* parsed shards of an index */
    uint32_t n_parts;
    char **paths;       /* n_paths shard paths */
    uint32_t n_paths;
};

void rvl_st_free(rvl_st *st)
{
    if (!st)
        return;
    struct st_own *own = st->owned;
    if (own) {
        for (uint32_t i = 0; i < own->n_parts; i++)
            rvl_st_free(own->parts[i]);
        for (uint32_t i = 0; i < own->n_maps; i++)
            rvl_map_unmap(&own->maps[i]);
        for (uint32_t i = 0; i < own->n_paths; i++)
            free(own->paths[i]);
        free(own->parts);
        free(own->maps);
        free(own->paths);
        free(own->strs);
        free(own->arena);
        free(own);
    }
    free(st->tensors);
    free(st->kv);
    free(st);
}

static rvl_st *st_new(void)
{
    rvl_st *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->owned = calloc(1, sizeof(struct st_own));
    if (!st->owned) {
        free(st);
        return NULL;
    }
    return st;
}

static int oom(const char *file)
{
    return rvl_seterr(RVL_ENOMEM, "%s: out of memory", file);
}

static uint64_t rd_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* ======================================================================
 * Lexical pre-check of hostile JSON
 * ====================================================================== */

struct lex {
    const char *file;
    uint64_t at;          /* file offset of the text's first byte */
    bool ints_only;       /* safetensors headers: numbers are integers */
    uint64_t *keys;       /* text offsets of the root object's keys */
    size_t n_keys, cap_keys;
};

/* Length of the valid UTF-8 sequence at p (n bytes left); 0 if invalid. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    uint32_t c = p[0], cp, min;
    size_t len;

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2; cp = c & 0x1f; min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3; cp = c & 0x0f; min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4; cp = c & 0x07; min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t k = 1; k < len; k++) {
        if ((p[k] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

static int lex_push_key(struct lex *lx, size_t i)
{
    if (lx->n_keys == lx->cap_keys) {
        size_t cap = lx->cap_keys ? lx->cap_keys * 2 : 64;
        uint64_t *k = realloc(lx->keys, cap * sizeof *k);
        if (!k)
            return oom(lx->file);
        lx->keys = k;
        lx->cap_keys = cap;
    }
    lx->keys[lx->n_keys++] = i;
    return 0;
}

static int lex_number(struct lex *lx, const unsigned char *t, size_t i, size_t j)
{
    size_t k = i + (t[i] == '-');
    int len = (int)(j - i < 40 ? j - i : 40);
    uint64_t v = 0;

    if (!lx->ints_only)
        return 0;
    if (k == j || (t[k] == '0' && j - k > 1))
        return rvl_seterr(RVL_EFORMAT, "%s: malformed number '%.*s' in header at byte %llu",
                          lx->file, len, (const char *)t + i, (ull)(lx->at + i));
    for (size_t m = k; m < j; m++) {
        if (t[m] < '0' || t[m] > '9')
            return rvl_seterr(RVL_EFORMAT,
                              "%s: number '%.*s' in header is not an integer at byte %llu",
                              lx->file, len, (const char *)t + i, (ull)(lx->at + i));
        v = v * 10 + (uint64_t)(t[m] - '0');
        if (v > ST_MAX_INT)
            return rvl_seterr(RVL_EFORMAT,
                              "%s: integer '%.*s' in header is too large (limit 2^53) at byte %llu",
                              lx->file, len, (const char *)t + i, (ull)(lx->at + i));
    }
    return 0;
}

/* Check what cJSON does not (see the top of the file). Structural errors
 * are left to cJSON, which reports where it stopped. */
static int lex_json(struct lex *lx, const unsigned char *t, size_t n)
{
    size_t i = 0;
    int depth = 0, rc;
    bool expect_key = false;

    while (i < n) {
        unsigned c = t[i];
        if (c == '"') {
            if (depth == 1 && expect_key && (rc = lex_push_key(lx, i)) < 0)
                return rc;
            expect_key = false;
            for (i++;;) {
                if (i >= n)
                    return 0;           /* unterminated: cJSON reports it */
                c = t[i];
                if (c == '"') {
                    i++;
                    break;
                }
                if (c == '\\') {
                    if (n - i >= 6 && t[i + 1] == 'u' && memcmp(t + i + 2, "0000", 4) == 0)
                        return rvl_seterr(RVL_EFORMAT,
                                          "%s: \\u0000 in a header string at byte %llu",
                                          lx->file, (ull)(lx->at + i));
                    i += 2;
                    continue;
                }
                if (c < 0x20)
                    return rvl_seterr(RVL_EFORMAT,
                                      "%s: control character 0x%02x in a header string at byte %llu",
                                      lx->file, c, (ull)(lx->at + i));
                if (c >= 0x80) {
                    size_t k = utf8_seq(t + i, n - i);
                    if (!k)
                        return rvl_seterr(RVL_EFORMAT, "%s: invalid UTF-8 in header at byte %llu",
                                          lx->file, (ull)(lx->at + i));
                    i += k;
                    continue;
                }
                i++;
            }
            continue;
        }
        switch (c) {
        case '{':
        case '[':
            if (++depth > ST_MAX_DEPTH)
                return rvl_seterr(RVL_EFORMAT,
                                  "%s: header nests deeper than %d levels at byte %llu",
                                  lx->file, ST_MAX_DEPTH, (ull)(lx->at + i));
            expect_key = c == '{' && depth == 1;
            break;
        case '}':
        case ']':
            if (depth > 0)
                depth--;
            expect_key = false;
            break;
        case ',':
            expect_key = depth == 1;
            break;
        case ' ': case '\t': case '\n': case '\r':
            break;
        case '-': case '0': case '1': case '2': case '3': case '4':
        case '5': case '6': case '7': case '8': case '9': {
            size_t j = i + 1;
            while (j < n && ((t[j] >= '0' && t[j] <= '9') || t[j] == '.' || t[j] == 'e' ||
                             t[j] == 'E' || t[j] == '+' || t[j] == '-'))
                j++;
            if ((rc = lex_number(lx, t, i, j)) < 0)
                return rc;
            expect_key = false;
            i = j;
            continue;
        }
        default:
            if (c < 0x20)
                return rvl_seterr(RVL_EFORMAT, "%s: control character 0x%02x in header at byte %llu",
                                  lx->file, c, (ull)(lx->at + i));
            expect_key = false;
            break;
        }
        i++;
    }
    return 0;
}

/* Parse n bytes of hostile JSON at t (a NUL-terminated copy). On failure
 * the message names the file and the byte offset (text offset + at). */
static int parse_json(cJSON **out, struct lex *lx, const char *t, size_t n)
{
    const char *end = NULL;
    int rc;

    *out = NULL;
    if ((rc = lex_json(lx, (const unsigned char *)t, n)) < 0)
        return rc;
    cJSON *root = cJSON_ParseWithLengthOpts(t, n, &end, 0);
    if (!root) {
        uint64_t off = end && end >= t && end <= t + n ? (uint64_t)(end - t) : 0;
        return rvl_seterr(RVL_EFORMAT, "%s: invalid JSON at byte %llu", lx->file,
                          (ull)(lx->at + off));
    }
    for (const char *p = end; p && p < t + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return rvl_seterr(RVL_EFORMAT, "%s: unexpected data after the JSON object at byte %llu",
                              lx->file, (ull)(lx->at + (uint64_t)(p - t)));
        }
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return rvl_seterr(RVL_EFORMAT, "%s: JSON is not an object at byte %llu", lx->file,
                          (ull)lx->at);
    }
    *out = root;
    return 0;
}

struct key_ref {
    const char *key;
    size_t idx;
};

static int cmp_key_ref(const void *a, const void *b)
{
    const struct key_ref *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

/* Find a key that occurs twice in obj (cJSON keeps duplicates). Returns
 * 0 and sets *dup (and *dup_idx, the later member's index) if one exists;
 * RVL_ENOMEM on allocation failure. */
static int find_dup_key(const cJSON *obj, const char **dup, size_t *dup_idx)
{
    size_t n = 0, i = 0;
    const cJSON *c;

    *dup = NULL;
    cJSON_ArrayForEach(c, obj)
        n++;
    if (n < 2)
        return 0;
    if (n <= 8) {
        const cJSON *a, *b;
        i = 0;
        for (a = obj->child; a; a = a->next, i++)
            for (b = obj->child; b != a; b = b->next)
                if (strcmp(a->string, b->string) == 0) {
                    *dup = a->string;
                    *dup_idx = i;
                    return 0;
                }
        return 0;
    }
    struct key_ref *refs = malloc(n * sizeof *refs);
    if (!refs)
        return RVL_ENOMEM;
    cJSON_ArrayForEach(c, obj) {
        refs[i].key = c->string;
        refs[i].idx = i;
        i++;
    }
    qsort(refs, n, sizeof *refs, cmp_key_ref);
    for (i = 1; i < n; i++)
        if (strcmp(refs[i - 1].key, refs[i].key) == 0) {
            *dup = refs[i].key;
            *dup_idx = refs[i].idx;
            break;
        }
    free(refs);
    return 0;
}

/* ======================================================================
 * One safetensors image
 * ====================================================================== */

/* A JSON number that is an integer in [0, 2^53]. */
static bool json_u64(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0) || d > (double)ST_MAX_INT)
        return false;
    *out = (uint64_t)d;
    return (double)*out == d;
}

static void fmt_shape(char *buf, size_t cap, const rvl_tensor_info *t)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < t->n_dims && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%llu", d ? ", " : "",
                              (ull)t->ne[t->n_dims - 1 - d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

struct entry_ctx {
    const char *file;
    uint64_t at;           /* file offset of the entry's key */
    uint64_t data_start;   /* file offset of the data section */
    uint64_t data_size;
};

/* Fill t from one header entry {"dtype", "shape", "data_offsets"}; checks
 * everything about the entry alone (not overlap with others). */
static int parse_entry(const struct entry_ctx *cx, const cJSON *e, const char *name,
                       rvl_tensor_info *t)
{
    const char *f = cx->file;
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL, *c;
    const struct st_dtype *dt = NULL;
    uint64_t begin, end, v;
    char sbuf[200];

#define EFMT(code, fmt, ...) \
    rvl_seterr(code, "%s: tensor '%.*s': " fmt " at byte %llu", f, NM, name, __VA_ARGS__, \
               (ull)cx->at)

    if (!cJSON_IsObject(e))
        return EFMT(RVL_EFORMAT, "%s", "entry is not an object");
    cJSON_ArrayForEach(c, e) {
        const cJSON **slot = !strcmp(c->string, "dtype") ? &dtype
                           : !strcmp(c->string, "shape") ? &shape
                           : !strcmp(c->string, "data_offsets") ? &offs : NULL;
        if (!slot)
            continue;           /* unknown fields are ignored, as by the reference */
        if (*slot)
            return EFMT(RVL_EFORMAT, "duplicate field \"%s\"", c->string);
        *slot = c;
    }
    if (!dtype)
        return EFMT(RVL_EFORMAT, "%s", "missing \"dtype\"");
    if (!shape)
        return EFMT(RVL_EFORMAT, "%s", "missing \"shape\"");
    if (!offs)
        return EFMT(RVL_EFORMAT, "%s", "missing \"data_offsets\"");

    if (!cJSON_IsString(dtype))
        return EFMT(RVL_EFORMAT, "%s", "\"dtype\" is not a string");
    for (size_t i = 0; i < ARRAY_LEN(dtypes); i++)
        if (!strcmp(dtype->valuestring, dtypes[i].name))
            dt = &dtypes[i];
    if (!dt) {
        for (size_t i = 0; i < ARRAY_LEN(dtypes_unsupported); i++)
            if (!strcmp(dtype->valuestring, dtypes_unsupported[i]))
                return EFMT(RVL_EUNSUPPORTED, "unsupported dtype %s", dtype->valuestring);
        return EFMT(RVL_EFORMAT, "unknown dtype '%.40s'", dtype->valuestring);
    }
    t->type = dt->type;

    if (!cJSON_IsArray(shape))
        return EFMT(RVL_EFORMAT, "%s", "\"shape\" is not an array");
    int nd = cJSON_GetArraySize(shape);
    if (nd > RVL_MAX_DIMS)
        return EFMT(RVL_EUNSUPPORTED, "%d dimensions (at most %d supported)", nd, RVL_MAX_DIMS);
    t->n_dims = (uint32_t)nd;
    for (int d = 0; d < RVL_MAX_DIMS; d++)
        t->ne[d] = 1;
    t->n_elements = 1;
    int d = 0;
    bool ovf = false;
    cJSON_ArrayForEach(c, shape) {
        if (!json_u64(c, &v))
            return EFMT(RVL_EFORMAT, "shape[%d] is not a non-negative integer", d);
        t->ne[nd - 1 - d] = v;          /* stored innermost first */
        ovf |= rvl_mul_ovf(t->n_elements, v, &t->n_elements);
        d++;
    }
    fmt_shape(sbuf, sizeof sbuf, t);
    if (ovf || rvl_mul_ovf(t->n_elements, dt->size, &t->nbytes))
        return EFMT(RVL_EFORMAT, "size of shape %s overflows", sbuf);

    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !json_u64(offs->child, &begin) || !json_u64(offs->child->next, &end))
        return EFMT(RVL_EFORMAT, "%s", "\"data_offsets\" is not a pair of non-negative integers");
    if (end < begin)
        return EFMT(RVL_EFORMAT, "data_offsets [%llu, %llu] end before they begin",
                    (ull)begin, (ull)end);
    if (end - begin != t->nbytes)
        return EFMT(RVL_EFORMAT, "data_offsets [%llu, %llu] hold %llu bytes but %s %s needs %llu",
                    (ull)begin, (ull)end, (ull)(end - begin), dt->name, sbuf, (ull)t->nbytes);
#undef EFMT
    if (end > cx->data_size)
        return rvl_seterr(RVL_EFORMAT,
                          "%s: tensor '%.*s': data_offsets [%llu, %llu] exceed the data section "
                          "(%llu bytes) at byte %llu",
                          f, NM, name, (ull)begin, (ull)end, (ull)cx->data_size,
                          (ull)(cx->data_start + begin));
    t->offset = cx->data_start + begin;   /* <= file size: no overflow */
    return 0;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const rvl_tensor_info *x = a, *y = b;
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name.ptr, y->name.ptr);
}

static char *arena_put(char **p, const char *s, rvl_str *out)
{
    size_t n = strlen(s);
    char *d = *p;
    memcpy(d, s, n + 1);
    *p += n + 1;
    out->ptr = d;
    out->len = n;
    return d;
}

/* With the header parsed: build st. */
static int build(rvl_st *st, const cJSON *root, const struct lex *lx, const char *file,
                 const unsigned char *base, uint64_t size, uint64_t hlen, uint32_t shard)
{
    struct st_own *own = st->owned;
    const cJSON *c, *meta = NULL;
    uint64_t meta_at = 8, n_t = 0, n_meta = 0;
    size_t arena_len = 0, n_child = 0, i;
    const char *dup;
    int rc;

    cJSON_ArrayForEach(c, root)
        n_child++;
    /* key offsets line up with cJSON's members when the lexer saw them all */
    const uint64_t *kpos = lx->n_keys == n_child ? lx->keys : NULL;
#define AT(i) ((ull)(kpos ? 8 + kpos[i] : 8))

    if (find_dup_key(root, &dup, &i) < 0)
        return oom(file);
    if (dup)
        return rvl_seterr(RVL_EFORMAT, "%s: duplicate key '%.*s' in header at byte %llu",
                          file, NM, dup, AT(i));
    i = 0;
    cJSON_ArrayForEach(c, root) {
        if (!strcmp(c->string, "__metadata__")) {
            meta = c;
            meta_at = AT(i);
        } else {
            n_t++;
            arena_len += strlen(c->string) + 1;
        }
        i++;
    }
    if (meta) {
        const cJSON *m;
        if (!cJSON_IsObject(meta))
            return rvl_seterr(RVL_EFORMAT, "%s: __metadata__ is not an object at byte %llu",
                              file, (ull)meta_at);
        if (find_dup_key(meta, &dup, &i) < 0)
            return oom(file);
        if (dup)
            return rvl_seterr(RVL_EFORMAT,
                              "%s: duplicate key '%.*s' in __metadata__ at byte %llu",
                              file, NM, dup, (ull)meta_at);
        cJSON_ArrayForEach(m, meta) {
            if (!cJSON_IsString(m))
                return rvl_seterr(RVL_EFORMAT,
                                  "%s: __metadata__ value of '%.*s' is not a string at byte %llu",
                                  file, NM, m->string, (ull)meta_at);
            n_meta++;
            arena_len += strlen(m->string) + strlen(m->valuestring) + 2;
        }
    }

    st->tensors = calloc(n_t ? n_t : 1, sizeof *st->tensors);
    st->kv = calloc(n_meta ? n_meta : 1, sizeof *st->kv);
    own->strs = calloc(n_meta ? n_meta : 1, sizeof *own->strs);
    own->arena = malloc(arena_len ? arena_len : 1);
    if (!st->tensors || !st->kv || !own->strs || !own->arena)
        return oom(file);
    char *ap = own->arena;

    if (meta) {
        const cJSON *m;
        uint64_t k = 0;
        cJSON_ArrayForEach(m, meta) {
            rvl_kv *kv = &st->kv[k];
            arena_put(&ap, m->string, &kv->key);
            kv->data = arena_put(&ap, m->valuestring, &own->strs[k]);
            kv->type = RVL_GGUF_STRING;
            kv->n = 1;
            kv->strs = &own->strs[k];
            kv->offset = meta_at;
            k++;
        }
        st->n_kv = n_meta;
    }

    struct entry_ctx cx = { file, 8, 8 + hlen, size - 8 - hlen };
    uint64_t k = 0;
    i = 0;
    cJSON_ArrayForEach(c, root) {
        if (c != meta) {
            rvl_tensor_info *t = &st->tensors[k];
            cx.at = AT(i);
            if ((rc = parse_entry(&cx, c, c->string, t)) < 0)
                return rc;
            arena_put(&ap, c->string, &t->name);
            t->data = base + t->offset;
            t->shard = shard;
            k++;
        }
        i++;
    }
    st->n_tensors = n_t;
#undef AT

    /* the tensors must tile the data section */
    qsort(st->tensors, n_t, sizeof *st->tensors, cmp_by_offset);
    uint64_t pos = cx.data_start;
    for (k = 0; k < n_t; k++) {
        const rvl_tensor_info *t = &st->tensors[k];
        uint64_t b = t->offset - cx.data_start;
        if (t->offset < pos) {
            const rvl_tensor_info *p = &st->tensors[k - 1];
            uint64_t pb = p->offset - cx.data_start;
            return rvl_seterr(RVL_EFORMAT,
                              "%s: tensor '%.*s': data_offsets [%llu, %llu] overlap tensor "
                              "'%.*s' [%llu, %llu] at byte %llu",
                              file, NM, t->name.ptr, (ull)b, (ull)(b + t->nbytes), NM,
                              p->name.ptr, (ull)pb, (ull)(pb + p->nbytes), (ull)t->offset);
        }
        if (t->offset > pos)
            return rvl_seterr(RVL_EFORMAT,
                              "%s: %llu unused bytes before tensor '%.*s' (data_offsets "
                              "[%llu, %llu]) at byte %llu",
                              file, (ull)(t->offset - pos), NM, t->name.ptr, (ull)b,
                              (ull)(b + t->nbytes), (ull)pos);
        pos = t->offset + t->nbytes;
    }
    if (pos != size)
        return rvl_seterr(RVL_EFORMAT,
                          "%s: %llu bytes after the last tensor are not part of any tensor "
                          "at byte %llu", file, (ull)(size - pos), (ull)pos);
    st->n_shards = 1;
    st->total_size = size;
    return 0;
}

int rvl_st_parse(rvl_st **out, const void *base, uint64_t size, const char *name,
                 uint32_t shard)
{
    const unsigned char *b = base;
    const char *file = name ? name : "safetensors";
    struct lex lx = { file, 8, true, NULL, 0, 0 };
    cJSON *root = NULL;
    char *text = NULL;
    rvl_st *st = NULL;
    uint64_t hlen;
    int rc;

    *out = NULL;
    if (size < 8)
        return rvl_seterr(RVL_EFORMAT,
                          "%s: file is %llu bytes, too short for the header length at byte 0",
                          file, (ull)size);
    hlen = rd_le64(b);
    if (hlen > size - 8)
        return rvl_seterr(RVL_EFORMAT, "%s: header length %llu exceeds file size %llu at byte 0",
                          file, (ull)hlen, (ull)size);
    if (hlen > RVL_ST_MAX_HEADER)
        return rvl_seterr(RVL_EFORMAT,
                          "%s: header length %llu exceeds the limit of %llu bytes at byte 0",
                          file, (ull)hlen, (ull)RVL_ST_MAX_HEADER);
    if (hlen == 0 || b[8] != '{')
        return rvl_seterr(RVL_EFORMAT, "%s: header does not start with '{' at byte 8", file);

    /* cJSON wants NUL-terminated text; hlen <= file size bounds the copy */
    text = malloc((size_t)hlen + 1);
    if (!text)
        return oom(file);
    memcpy(text, b + 8, (size_t)hlen);
    text[hlen] = 0;
    if ((rc = parse_json(&root, &lx, text, (size_t)hlen)) < 0)
        goto out;
    if (!(st = st_new())) {
        rc = oom(file);
        goto out;
    }
    rc = build(st, root, &lx, file, b, size, hlen, shard);
out:
    cJSON_Delete(root);
    free(text);
    free(lx.keys);
    if (rc < 0) {
        rvl_st_free(st);
        return rc;
    }
    *out = st;
    return 0;
}

/* ======================================================================
 * Files, directories and sharded models
 * ====================================================================== */

static int set_paths(rvl_st *st, char **paths, uint32_t n)
{
    struct st_own *own = st->owned;
    own->paths = paths;
    own->n_paths = n;
    st->shard_paths = (const char *const *)paths;
    return 0;
}

/* A single .safetensors file already mapped: st takes the map. */
static int open_single(rvl_st **out, const char *path, rvl_map *m)
{
    rvl_st *st;
    int rc = rvl_st_parse(&st, m->base, m->size, path, 0);
    if (rc < 0)
        return rc;
    struct st_own *own = st->owned;
    char **paths = malloc(sizeof *paths);
    own->maps = malloc(sizeof *own->maps);
    if (!paths || !own->maps || !(paths[0] = strdup(path))) {
        free(paths);
        rvl_st_free(st);
        return oom(path);
    }
    own->maps[0] = *m;
    own->n_maps = 1;
    m->base = NULL;
    m->size = 0;
    set_paths(st, paths, 1);
    *out = st;
    return 0;
}

struct wm_ent {
    const char *tensor;
    const char *file;
    uint32_t shard;
};

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_ent_tensor(const void *a, const void *b)
{
    return strcmp(((const struct wm_ent *)a)->tensor, ((const struct wm_ent *)b)->tensor);
}

static int cmp_tensor_ptr_name(const void *a, const void *b)
{
    const rvl_tensor_info *x = *(const rvl_tensor_info *const *)a;
    const rvl_tensor_info *y = *(const rvl_tensor_info *const *)b;
    int c = strcmp(x->name.ptr, y->name.ptr);
    return c ? c : (x->shard > y->shard) - (x->shard < y->shard);
}

struct kv_ref {
    const rvl_kv *kv;
    uint64_t order;
};

static int cmp_kv_key(const void *a, const void *b)
{
    const struct kv_ref *x = a, *y = b;
    int c = strcmp(x->kv->key.ptr, y->kv->key.ptr);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

static int cmp_kv_order(const void *a, const void *b)
{
    const struct kv_ref *x = a, *y = b;
    return (x->order > y->order) - (x->order < y->order);
}

static bool plain_file_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

/* Cross-check weight_map (ents sorted by tensor) against the parsed shards,
 * then merge their tensors and metadata into st. */
static int merge_shards(rvl_st *st, const char *index, struct wm_ent *ents, size_t n_ents,
                        const char *const *files)
{
    struct st_own *own = st->owned;
    uint64_t n_t = 0, n_kv = 0, k = 0;
    int rc = 0;

    for (uint32_t s = 0; s < own->n_parts; s++) {
        n_t += own->parts[s]->n_tensors;
        n_kv += own->parts[s]->n_kv;
    }
    const rvl_tensor_info **byname = malloc((n_t ? n_t : 1) * sizeof *byname);
    struct kv_ref *kvs = malloc((n_kv ? n_kv : 1) * sizeof *kvs);
    st->tensors = malloc((n_t ? n_t : 1) * sizeof *st->tensors);
    if (!byname || !kvs || !st->tensors) {
        rc = oom(index);
        goto out;
    }
    for (uint32_t s = 0; s < own->n_parts; s++)
        for (uint64_t j = 0; j < own->parts[s]->n_tensors; j++)
            byname[k++] = &own->parts[s]->tensors[j];
    qsort(byname, n_t, sizeof *byname, cmp_tensor_ptr_name);

    size_t i = 0;
    uint64_t j = 0;
    while (i < n_ents || j < n_t) {
        const rvl_tensor_info *t = j < n_t ? byname[j] : NULL;
        if (t && j + 1 < n_t && !strcmp(t->name.ptr, byname[j + 1]->name.ptr)) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: tensor '%.*s' is in both %s and %s", index, NM,
                            t->name.ptr, files[t->shard], files[byname[j + 1]->shard]);
            goto out;
        }
        int c = i >= n_ents ? 1 : !t ? -1 : strcmp(ents[i].tensor, t->name.ptr);
        if (c < 0) {
            rc = rvl_seterr(RVL_EFORMAT,
                            "%s: tensor '%.*s' is listed in weight_map for %s but not found there",
                            index, NM, ents[i].tensor, ents[i].file);
            goto out;
        }
        if (c > 0) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: tensor '%.*s' in %s is not listed in weight_map",
                            index, NM, t->name.ptr, files[t->shard]);
            goto out;
        }
        if (ents[i].shard != t->shard) {
            rc = rvl_seterr(RVL_EFORMAT,
                            "%s: tensor '%.*s' is listed in weight_map for %s but is in %s",
                            index, NM, ents[i].tensor, ents[i].file, files[t->shard]);
            goto out;
        }
        i++;
        j++;
    }

    /* tensors: shard by shard, each already in data-offset order */
    k = 0;
    for (uint32_t s = 0; s < own->n_parts; s++) {
        memcpy(st->tensors + k, own->parts[s]->tensors,
               own->parts[s]->n_tensors * sizeof *st->tensors);
        k += own->parts[s]->n_tensors;
    }
    st->n_tensors = n_t;

    /* metadata: union over the shards, first occurrence of a key wins */
    k = 0;
    for (uint32_t s = 0; s < own->n_parts; s++)
        for (uint64_t m = 0; m < own->parts[s]->n_kv; m++, k++) {
            kvs[k].kv = &own->parts[s]->kv[m];
            kvs[k].order = k;
        }
    qsort(kvs, n_kv, sizeof *kvs, cmp_kv_key);
    uint64_t u = 0;
    for (k = 0; k < n_kv; k++)
        if (u == 0 || strcmp(kvs[u - 1].kv->key.ptr, kvs[k].kv->key.ptr))
            kvs[u++] = kvs[k];
    qsort(kvs, u, sizeof *kvs, cmp_kv_order);
    st->kv = malloc((u ? u : 1) * sizeof *st->kv);
    if (!st->kv) {
        rc = oom(index);
        goto out;
    }
    for (k = 0; k < u; k++)
        st->kv[k] = *kvs[k].kv;
    st->n_kv = u;
out:
    free(byname);
    free(kvs);
    return rc;
}

/* A model.safetensors.index.json already mapped (the caller unmaps it). */
static int open_index(rvl_st **out, const char *path, const rvl_map *m)
{
    struct lex lx = { path, 0, false, NULL, 0, 0 };
    struct wm_ent *ents = NULL;
    const char **files = NULL;
    char **paths = NULL;
    char *text = NULL, *dir = NULL;
    cJSON *root = NULL;
    rvl_st *st = NULL;
    size_t n_ents = 0, n_files = 0, i;
    const cJSON *wm, *c;
    const char *dup;
    int rc;

    *out = NULL;
    if (m->size > RVL_ST_MAX_HEADER)
        return rvl_seterr(RVL_EFORMAT, "%s: index is %llu bytes, over the limit of %llu",
                          path, (ull)m->size, (ull)RVL_ST_MAX_HEADER);
    if (!(text = malloc((size_t)m->size + 1)))
        return oom(path);
    memcpy(text, m->base, (size_t)m->size);
    text[m->size] = 0;
    if ((rc = parse_json(&root, &lx, text, (size_t)m->size)) < 0)
        goto out;
    if (find_dup_key(root, &dup, &i) < 0) {
        rc = oom(path);
        goto out;
    }
    if (dup) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: duplicate key '%.*s'", path, NM, dup);
        goto out;
    }
    wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: no \"weight_map\" object", path);
        goto out;
    }
    if (find_dup_key(wm, &dup, &i) < 0) {
        rc = oom(path);
        goto out;
    }
    if (dup) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: tensor '%.*s' appears twice in weight_map", path, NM,
                        dup);
        goto out;
    }
    cJSON_ArrayForEach(c, wm)
        n_ents++;
    if (n_ents == 0) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: weight_map is empty", path);
        goto out;
    }
    ents = malloc(n_ents * sizeof *ents);
    files = malloc(n_ents * sizeof *files);
    if (!ents || !files) {
        rc = oom(path);
        goto out;
    }
    i = 0;
    cJSON_ArrayForEach(c, wm) {
        if (!cJSON_IsString(c)) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: weight_map value for tensor '%.*s' is not a string",
                            path, NM, c->string);
            goto out;
        }
        if (!plain_file_name(c->valuestring)) {
            rc = rvl_seterr(RVL_EFORMAT,
                            "%s: shard '%.*s' of tensor '%.*s' is not a plain file name",
                            path, NM, c->valuestring, NM, c->string);
            goto out;
        }
        ents[i].tensor = c->string;
        ents[i].file = c->valuestring;
        files[i] = c->valuestring;
        i++;
    }
    qsort(files, n_ents, sizeof *files, cmp_str_ptr);
    for (i = 0; i < n_ents; i++)
        if (n_files == 0 || strcmp(files[n_files - 1], files[i]))
            files[n_files++] = files[i];
    if (n_files > UINT32_MAX) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: too many shards", path);
        goto out;
    }
    for (i = 0; i < n_ents; i++) {
        const char **f = bsearch(&ents[i].file, files, n_files, sizeof *files, cmp_str_ptr);
        ents[i].shard = (uint32_t)(f - files);
    }
    qsort(ents, n_ents, sizeof *ents, cmp_ent_tensor);

    /* shard files live next to the index */
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    if (!(st = st_new()) || !(dir = malloc(dlen + 1))) {
        rc = oom(path);
        goto out;
    }
    memcpy(dir, path, dlen);
    dir[dlen] = 0;
    struct st_own *own = st->owned;
    paths = calloc(n_files, sizeof *paths);
    own->parts = calloc(n_files, sizeof *own->parts);
    own->maps = calloc(n_files, sizeof *own->maps);
    if (!paths || !own->parts || !own->maps) {
        free(paths);
        rc = oom(path);
        goto out;
    }
    set_paths(st, paths, (uint32_t)n_files);
    for (i = 0; i < n_files; i++) {
        size_t fl = strlen(files[i]);
        if (!(paths[i] = malloc(dlen + fl + 1))) {
            rc = oom(path);
            goto out;
        }
        memcpy(paths[i], dir, dlen);
        memcpy(paths[i] + dlen, files[i], fl + 1);
    }
    for (i = 0; i < n_files; i++) {
        if ((rc = rvl_map_file(&own->maps[i], paths[i])) < 0) {
            rvl_preerr(rc, "%s: shard %s", path, files[i]);
            goto out;
        }
        own->n_maps++;
        if ((rc = rvl_st_parse(&own->parts[i], own->maps[i].base, own->maps[i].size, paths[i],
                               (uint32_t)i)) < 0)
            goto out;
        own->n_parts++;
        st->total_size += own->maps[i].size;   /* sum of mapped sizes: no overflow */
    }
    st->n_shards = (uint32_t)n_files;
    /* weight_map's shard names are still needed for messages: keep them
     * in sorted order matching paths[] */
    rc = merge_shards(st, path, ents, n_ents, files);
out:
    cJSON_Delete(root);
    free(text);
    free(lx.keys);
    free(ents);
    free(files);
    free(dir);
    if (rc < 0) {
        rvl_st_free(st);
        return rc;
    }
    *out = st;
    return 0;
}

static bool is_regular(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* A file: an index when named *.json, or when it starts with '{' but its
 * ninth byte is not the '{' of a safetensors header. */
static int open_file(rvl_st **out, const char *path)
{
    rvl_map m;
    int rc = rvl_map_file(&m, path);
    if (rc < 0)
        return rc;
    const unsigned char *b = m.base;
    bool index = ends_with(path, ".json") ||
                 (m.size > 0 && b[0] == '{' && !(m.size >= 9 && b[8] == '{'));
    if (index)
        rc = open_index(out, path, &m);
    else
        rc = open_single(out, path, &m);
    rvl_map_unmap(&m);   /* no-op when open_single took it */
    return rc;
}

int rvl_st_open(rvl_st **out, const char *path)
{
    struct stat sb;
    char *p;
    int rc;

    *out = NULL;
    if (stat(path, &sb) < 0)
        return rvl_seterr(errno == ENOENT ? RVL_ENOTFOUND : RVL_EIO, "%s: %s", path,
                          strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return open_file(out, path);

    /* a Hugging Face model directory: as transformers, prefer the single file */
    static const char *const names[] = { "model.safetensors", "model.safetensors.index.json" };
    size_t n = strlen(path);
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        if (!(p = malloc(n + strlen(names[i]) + 2)))
            return oom(path);
        sprintf(p, "%s%s%s", path, n && path[n - 1] == '/' ? "" : "/", names[i]);
        if (is_regular(p)) {
            rc = open_file(out, p);
            free(p);
            return rc;
        }
        free(p);
    }
    return rvl_seterr(RVL_ENOTFOUND,
                      "%s: no model.safetensors or model.safetensors.index.json in this directory",
                      path);
}
