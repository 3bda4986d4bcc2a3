/*
 * session.c - session files: a context's KV cache, the token ids it holds
 * and an opaque JSON blob, saved and restored.
 *
 * Layout (little-endian; version 1):
 *
 *   off  size  field
 *   0    8     magic "RVLSESS\0"
 *   8    4     version (1)
 *   12   4     byte-order mark 0x01020304 (reads 0x04030201 on a
 *              big-endian writer's file: refused)
 *   16   8     model fingerprint (xxh3-64 of the architecture, the
 *              hyper-parameters and every tensor's name, type, shape and
 *              bytes; lib/model.c)
 *   24   4     n_layer
 *   28   4     kv_dim (n_head_kv * head_dim)
 *   32   4     key element type   (0 f16, 1 f32: rvl_kv_type)
 *   36   4     value element type (as keys, until the KV issue's formats)
 *   40   4     page size in positions (32)
 *   44   4     n_tokens (positions in the cache)
 *   48   8     xxh3-64 of bytes 0..47
 *   56   ...   blocks, in this order: TOKENS (n_tokens i32), EXTRA (the
 *              JSON text, possibly empty), then for each layer and each
 *              page of up to 32 positions one KV block (the page's key
 *              rows, then its value rows). Each block:
 *                0  4  kind (1 tokens, 2 extra, 3 kv)
 *                4  4  layer (kv) or 0
 *                8  4  page index (kv) or 0
 *                12 4  raw size in bytes
 *                16 4  stored size in bytes (zstd frame)
 *                20 8  xxh3-64 of the stored bytes
 *                28 .. stored bytes
 *   end  8     xxh3-64 of every byte before it
 *
 * Every size is checked against what the header implies before anything
 * is allocated or decompressed, so a hostile file cannot make the reader
 * allocate more than the context it is loaded into already holds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "model.h"

#define SESS_MAGIC "RVLSESS"
#define SESS_VERSION 1u
#define SESS_BOM 0x01020304u
#define SESS_PAGE 32u
#define HDR 56u
#define BLK 28u

enum { BLK_TOKENS = 1, BLK_EXTRA = 2, BLK_KV = 3 };

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ====================================================================
 * Writing
 * ==================================================================== */

typedef struct {
    rvl_afile *f;
    XXH3_state_t *all;
    void *zbuf;
    size_t zcap;
} writer;

static int wr(writer *w, const void *p, size_t n)
{
    XXH3_64bits_update(w->all, p, n);
    return rvl_afile_write(w->f, p, n);
}

static int wr_block(writer *w, uint32_t kind, uint32_t layer, uint32_t page, const void *raw,
                    size_t n)
{
    size_t bound = ZSTD_compressBound(n);
    if (bound > w->zcap) {
        void *nb = realloc(w->zbuf, bound);
        if (!nb)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        w->zbuf = nb;
        w->zcap = bound;
    }
    size_t z = ZSTD_compress(w->zbuf, w->zcap, raw, n, 3);
    if (ZSTD_isError(z))
        return rvl_seterr(RVL_EIO, "zstd: %s", ZSTD_getErrorName(z));
    if (n > UINT32_MAX || z > UINT32_MAX)
        return rvl_seterr(RVL_ERANGE, "session block of %zu bytes is too large", n);
    unsigned char h[BLK];
    put32(h, kind);
    put32(h + 4, layer);
    put32(h + 8, page);
    put32(h + 12, (uint32_t)n);
    put32(h + 16, (uint32_t)z);
    put64(h + 20, XXH3_64bits(w->zbuf, z));
    int rc;
    if ((rc = wr(w, h, sizeof h)) < 0 || (rc = wr(w, w->zbuf, z)) < 0)
        return rc;
    return 0;
}

int rvl_session_save(rvl_ctx *c, const char *path, const int32_t *ids, size_t n_ids,
                     const char *extra_json)
{
    const rvl_model *m = rvl_ctx_model(c);
    const rvl_hparams *hp = &m->hp;
    const uint32_t n = rvl_ctx_pos(c);
    const size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim, es = rvl_ctx_kv_esize(c);
    writer w = {0};
    unsigned char *page = NULL;
    int rc;

    if (n_ids != n)
        return rvl_seterr(RVL_EINVAL, "%s: %zu token ids given for a cache of %u tokens", path,
                          n_ids, n);
    if ((rc = rvl_afile_open(&w.f, path)) < 0)
        return rc;
    w.all = XXH3_createState();
    page = malloc(2 * SESS_PAGE * kv_dim * es);
    if (!w.all || !page) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    XXH3_64bits_reset(w.all);

    unsigned char h[HDR] = {0};
    memcpy(h, SESS_MAGIC, 8);
    put32(h + 8, SESS_VERSION);
    put32(h + 12, SESS_BOM);
    put64(h + 16, rvl_model_fingerprint(m));
    put32(h + 24, hp->n_layer);
    put32(h + 28, (uint32_t)kv_dim);
    put32(h + 32, (uint32_t)rvl_ctx_kv_type(c));
    put32(h + 36, (uint32_t)rvl_ctx_kv_type(c));
    put32(h + 40, SESS_PAGE);
    put32(h + 44, n);
    put64(h + 48, XXH3_64bits(h, 48));
    if ((rc = wr(&w, h, sizeof h)) < 0)
        goto fail;

    /* token ids as little-endian i32 */
    unsigned char *tb = malloc((size_t)n * 4 + 1);
    if (!tb) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < n; i++)
        put32(tb + 4 * (size_t)i, (uint32_t)ids[i]);
    rc = wr_block(&w, BLK_TOKENS, 0, 0, tb, (size_t)n * 4);
    free(tb);
    if (rc < 0)
        goto fail;
    if ((rc = wr_block(&w, BLK_EXTRA, 0, 0, extra_json ? extra_json : "",
                       extra_json ? strlen(extra_json) : 0)) < 0)
        goto fail;

    for (uint32_t l = 0; l < hp->n_layer; l++) {
        void *k, *v;
        rvl_ctx_kv_layer(c, l, &k, &v);
        for (uint32_t p0 = 0, pg = 0; p0 < n; p0 += SESS_PAGE, pg++) {
            uint32_t np = n - p0 < SESS_PAGE ? n - p0 : SESS_PAGE;
            size_t rb = (size_t)np * kv_dim * es;
            memcpy(page, (char *)k + (size_t)p0 * kv_dim * es, rb);
            memcpy(page + rb, (char *)v + (size_t)p0 * kv_dim * es, rb);
            if ((rc = wr_block(&w, BLK_KV, l, pg, page, 2 * rb)) < 0)
                goto fail;
        }
        if (rvl_interrupted()) {
            rc = rvl_seterr(RVL_EINTR, "interrupted");
            goto fail;
        }
    }
    unsigned char t[8];
    put64(t, XXH3_64bits_digest(w.all));
    if ((rc = rvl_afile_write(w.f, t, 8)) < 0)
        goto fail;
    rc = rvl_afile_commit(w.f);
    w.f = NULL;
fail:
    rvl_afile_abort(w.f);
    XXH3_freeState(w.all);
    free(w.zbuf);
    free(page);
    return rc < 0 ? rc : 0;
}

/* ====================================================================
 * Reading
 * ==================================================================== */

typedef struct {
    const char *path;
    const unsigned char *b;
    size_t size, off;
    void *raw;                    /* decompression buffer */
    size_t raw_cap, raw_len;      /* raw_len: the last block's size */
} reader;

/* The next block: checks its header against what is expected, verifies
 * its hash and decompresses it into r->raw. */
static int rd_block(reader *r, uint32_t kind, uint32_t layer, uint32_t page, size_t want_raw,
                    bool exact)
{
    static const char *const names[] = {"", "tokens", "extra", "kv"};
    const size_t at = r->off;
    if (r->size - 8 - r->off < BLK)
        return rvl_seterr(RVL_EFORMAT, "%s: truncated: the %s block at offset %zu is missing",
                          r->path, names[kind], at);
    const unsigned char *h = r->b + r->off;
    uint32_t k = get32(h), l = get32(h + 4), pg = get32(h + 8), raw = get32(h + 12),
             z = get32(h + 16);
    if (k != kind || l != layer || pg != page)
        return rvl_seterr(RVL_EFORMAT, "%s: block at offset %zu is kind %u layer %u page %u, "
                          "expected the %s block (layer %u, page %u)", r->path, at, k, l, pg,
                          names[kind], layer, page);
    if (exact ? raw != want_raw : raw > want_raw)
        return rvl_seterr(RVL_EFORMAT, "%s: %s block at offset %zu holds %u bytes, expected %s%zu",
                          r->path, names[kind], at, raw, exact ? "" : "at most ", want_raw);
    if (z > r->size - 8 - r->off - BLK)
        return rvl_seterr(RVL_EFORMAT, "%s: truncated: the %s block at offset %zu needs %u bytes "
                          "past the end of the file", r->path, names[kind], at, z);
    const unsigned char *data = h + BLK;
    if (XXH3_64bits(data, z) != get64(h + 20))
        return rvl_seterr(RVL_EFORMAT, "%s: checksum mismatch in the %s block at offset %zu "
                          "(layer %u, page %u): the file is corrupted", r->path, names[kind], at,
                          layer, page);
    if (raw + 1 > r->raw_cap) {
        void *nb = realloc(r->raw, raw + 1);
        if (!nb)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        r->raw = nb;
        r->raw_cap = raw + 1;
    }
    size_t got = ZSTD_decompress(r->raw, raw, data, z);
    if (ZSTD_isError(got) || got != raw)
        return rvl_seterr(RVL_EFORMAT, "%s: the %s block at offset %zu does not decompress to its "
                          "%u bytes%s%s", r->path, names[kind], at, raw,
                          ZSTD_isError(got) ? ": " : "", ZSTD_isError(got) ? ZSTD_getErrorName(got) : "");
    r->off += BLK + z;
    r->raw_len = raw;
    return 0;
}

int rvl_session_load(rvl_ctx *c, const char *path, int32_t **ids_out, size_t *n_ids,
                     char **extra_json)
{
    rvl_map map = {0};
    int rc;
    *ids_out = NULL;
    *n_ids = 0;
    if (extra_json)
        *extra_json = NULL;
    rvl_ctx_reset(c);
    if ((rc = rvl_map_file(&map, path)) < 0)
        return rc;
    rc = rvl_session_load_mem(c, path, map.base, map.size, ids_out, n_ids, extra_json);
    rvl_map_unmap(&map);
    return rc;
}

int rvl_session_load_mem(rvl_ctx *c, const char *path, const void *buf, size_t size,
                         int32_t **ids_out, size_t *n_ids, char **extra_json)
{
    const rvl_model *m = rvl_ctx_model(c);
    const rvl_hparams *hp = &m->hp;
    const size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim, es = rvl_ctx_kv_esize(c);
    reader r = {.path = path, .b = buf, .size = size};
    int32_t *ids = NULL;
    char *extra = NULL;
    int rc;

    *ids_out = NULL;
    *n_ids = 0;
    if (extra_json)
        *extra_json = NULL;
    rvl_ctx_reset(c);
#define BAD(...) do { rc = rvl_seterr(RVL_EFORMAT, __VA_ARGS__); goto fail; } while (0)
    if (r.size < HDR + 8 || memcmp(r.b, SESS_MAGIC, 8) != 0) {
        if (r.size >= 8 && memcmp(r.b, SESS_MAGIC, 8) == 0)
            BAD("%s: truncated: %zu bytes, shorter than a session header", path, r.size);
        BAD("%s: not a ruvllm session file (bad magic at offset 0)", path);
    }
    if (get32(r.b + 12) != SESS_BOM)
        BAD("%s: byte-order mark at offset 12 is 0x%08x: written on a machine of the other "
            "endianness", path, get32(r.b + 12));
    if (get32(r.b + 8) != SESS_VERSION)
        BAD("%s: session version %u at offset 8 is not supported (this is %u)", path,
            get32(r.b + 8), SESS_VERSION);
    if (XXH3_64bits(r.b, 48) != get64(r.b + 48))
        BAD("%s: header checksum mismatch at offset 48: the file is corrupted", path);
    if (XXH3_64bits(r.b, r.size - 8) != get64(r.b + r.size - 8))
        BAD("%s: file checksum mismatch (offset %zu): the file is truncated or corrupted", path,
            r.size - 8);
    if (get64(r.b + 16) != rvl_model_fingerprint(m))
        BAD("%s: made with another model (fingerprint %016llx, this model's is %016llx)", path,
            (unsigned long long)get64(r.b + 16), (unsigned long long)rvl_model_fingerprint(m));
    uint32_t nl = get32(r.b + 24), kd = get32(r.b + 28), tk = get32(r.b + 32),
             tv = get32(r.b + 36), ps = get32(r.b + 40), n = get32(r.b + 44);
    if (nl != hp->n_layer || kd != kv_dim || ps != SESS_PAGE)
        BAD("%s: cache geometry (%u layers, %u wide, pages of %u) does not match this model's "
            "(%u, %zu, %u)", path, nl, kd, ps, hp->n_layer, kv_dim, SESS_PAGE);
    if (tk != tv || tk != (uint32_t)rvl_ctx_kv_type(c))
        BAD("%s: cache element types %s/%s differ from this context's %s (use --kv-type %s)", path,
            tk == RVL_KV_F16 ? "f16" : tk == RVL_KV_F32 ? "f32" : "unknown",
            tv == RVL_KV_F16 ? "f16" : tv == RVL_KV_F32 ? "f32" : "unknown",
            rvl_ctx_kv_type(c) == RVL_KV_F16 ? "f16" : "f32",
            tk == RVL_KV_F32 ? "f32" : "f16");
    if (n > rvl_ctx_n_ctx(c))
        BAD("%s: holds %u tokens, more than this context's %u (use a larger -c)", path, n,
            rvl_ctx_n_ctx(c));
#undef BAD
    r.off = HDR;
    if ((rc = rd_block(&r, BLK_TOKENS, 0, 0, (size_t)n * 4, true)) < 0)
        goto fail;
    ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < n; i++) {
        ids[i] = (int32_t)get32((const unsigned char *)r.raw + 4 * (size_t)i);
        if (ids[i] < 0 || (uint32_t)ids[i] >= hp->n_vocab) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: token %u is id %d, outside the vocabulary (%u)", path,
                            i, ids[i], hp->n_vocab);
            goto fail;
        }
    }
    /* the JSON blob: at most 64 MiB */
    if ((rc = rd_block(&r, BLK_EXTRA, 0, 0, (size_t)64 << 20, false)) < 0)
        goto fail;
    extra = malloc(r.raw_len + 1);
    if (!extra) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    memcpy(extra, r.raw, r.raw_len);
    extra[r.raw_len] = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        void *k, *v;
        rvl_ctx_kv_layer(c, l, &k, &v);
        for (uint32_t p0 = 0, pg = 0; p0 < n; p0 += SESS_PAGE, pg++) {
            uint32_t np = n - p0 < SESS_PAGE ? n - p0 : SESS_PAGE;
            size_t rb = (size_t)np * kv_dim * es;
            if ((rc = rd_block(&r, BLK_KV, l, pg, 2 * rb, true)) < 0)
                goto fail;
            memcpy((char *)k + (size_t)p0 * kv_dim * es, r.raw, rb);
            memcpy((char *)v + (size_t)p0 * kv_dim * es, (char *)r.raw + rb, rb);
        }
    }
    if (r.off != r.size - 8) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: %zu unexpected bytes after the last block at offset %zu",
                        path, r.size - 8 - r.off, r.off);
        goto fail;
    }
    rvl_ctx_set_pos(c, n);
    *ids_out = ids;
    *n_ids = n;
    if (extra_json)
        *extra_json = extra;
    else
        free(extra);
    free(r.raw);
    return 0;
fail:
    rvl_ctx_reset(c);
    free(ids);
    free(extra);
    free(r.raw);
    return rc;
}
