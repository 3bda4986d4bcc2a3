/*
 * session.c - session files: a context's paged KV cache (every page in its
 * own storage format), the token ids it holds and an opaque JSON blob,
 * saved and restored.
 *
 * Layout (little-endian; version 3). Version 1 files (the contiguous
 * f16/f32 cache) are refused: "session format version 1 is no longer
 * supported, re-create the file". Version 2 is version 3 without key
 * centering (offset 76 is 0): still read.
 *
 *   off  size  field
 *   0    8     magic "RVLSESS\0"
 *   8    4     version (3; 2 is read too)
 *   12   4     byte-order mark 0x01020304 (reads 0x04030201 on a
 *              big-endian writer's file: refused)
 *   16   8     model fingerprint (xxh3-64 of the architecture, the
 *              hyper-parameters and every tensor's name, type, shape and
 *              bytes; lib/engine/model.c)
 *   24   4     n_layer
 *   28   4     n_head_kv
 *   32   4     head_dim
 *   36   4     page size in positions (32)
 *   40   4     n_tokens (positions in the cache)
 *   44   4     key format of tier 0 (hot), 48: tier 1 (warm), 52: tier 2 (cold)
 *   56   4     value format of tier 0, 60: tier 1, 64: tier 2
 *              formats: 0 f16, 1 q8, 2 q4, 3 tq4, 4 tq3 (kernels/kvq.h's
 *              numbering and page layouts), 5 f32 (rows of head_dim
 *              floats, as f16 pages with 4-byte elements). Tier 0 is
 *              f16 or f32 for keys and values alike.
 *   68   4     hot tokens:  full pages whose newest position is fewer than
 *              this many positions behind the newest token stay in tier 0
 *   72   4     warm tokens: ... fewer than hot + warm behind: tier 1; older
 *              pages: tier 2. 0xffffffff: unbounded. A fixed f16/f32 cache
 *              is (f16|f32 x3, hot unbounded); a fixed quantized format X
 *              is (f16, X, X, hot 0, warm unbounded): only the page being
 *              filled is full precision; tiered is (f16, q8, cold, 256,
 *              2048) by default.
 *   76   4     flags: bit 0 set: the keys are stored centred (kvcache.c
 *              "Key centering") and a CENTER block follows EXTRA; other
 *              bits 0 (version 2: the whole field 0)
 *   80   8     xxh3-64 of bytes 0..79
 *   88   ...   blocks, in this order: TOKENS (n_tokens i32), EXTRA (the
 *              JSON text, possibly empty), with flag bit 0 a CENTER block
 *              (n_layer x n_head_kv x head_dim f32: the centre every
 *              stored key had subtracted), then for each layer l, for
 *              each logical page p (positions 32p .. 32p + 31, the last
 *              one possibly partial) one KV block. Each block:
 *                0  4  kind (1 tokens, 2 extra, 3 kv, 4 center)
 *                4  4  layer (kv) or 0
 *                8  4  page index (kv) or 0
 *                12 1  kv: key format of the page (as above), else 0
 *                13 1  kv: value format of the page, else 0
 *                14 1  kv: tier of the page (0, 1, 2), else 0
 *                15 1  kv: positions used in the page (1 .. 32), else 0
 *                16 4  raw size in bytes
 *                20 4  stored size in bytes (zstd frame)
 *                24 8  xxh3-64 of the stored bytes
 *                32 .. stored bytes
 *              A KV block's raw bytes are n_head_kv key pages then
 *              n_head_kv value pages, each exactly as the cache holds it
 *              (rvl_kvq_page_bytes(format, kind, head_dim) bytes; f32:
 *              32 * head_dim * 4); unused rows of a partial page are zero.
 *              Rules the reader enforces: the page formats are the tier's
 *              formats from the header; a partial page is tier 0; a newer
 *              page is never in a higher (colder) tier than an older one,
 *              except after the attention-sink pages (kvcache.h: page 0
 *              of a quantized cache stays in tier 0); every
 *              layer's page p has the same tier.
 *   end  8     xxh3-64 of every byte before it
 *
 * Every size is checked against what the header implies before anything
 * is allocated or decompressed, so a hostile file cannot make the reader
 * allocate more than the context it is loaded into already holds.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/file.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "engine/kvcache.h"
#include "engine/model.h"

#define SESS_MAGIC "RVLSESS"
#define SESS_VERSION 3u
#define SESS_BOM 0x01020304u
#define SESS_PAGE 32u
#define HDR 88u
#define BLK 32u

enum { BLK_TOKENS = 1, BLK_EXTRA = 2, BLK_KV = 3, BLK_CENTER = 4 };
#define SESS_F_CENTER 1u

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

/* The header fields that describe the cache (offsets 24..79). */
static void put_geometry(unsigned char *h, const rvl_kvcache_params *kp)
{
    put32(h + 24, kp->n_layer);
    put32(h + 28, kp->n_head_kv);
    put32(h + 32, kp->head_dim);
    put32(h + 36, SESS_PAGE);
    for (int t = 0; t < 3; t++) {
        put32(h + 44 + 4 * t, (uint32_t)kp->fmt_k[t]);
        put32(h + 56 + 4 * t, (uint32_t)kp->fmt_v[t]);
    }
    put32(h + 68, kp->hot);
    put32(h + 72, kp->warm);
    put32(h + 76, 0);
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

/* info: bytes 12..15 of the block header (kv: formats, tier, rows). */
static int wr_block(writer *w, uint32_t kind, uint32_t layer, uint32_t page,
                    const unsigned char info[4], const void *raw, size_t n)
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
    memcpy(h + 12, info, 4);
    put32(h + 16, (uint32_t)n);
    put32(h + 20, (uint32_t)z);
    put64(h + 24, XXH3_64bits(w->zbuf, z));
    int rc;
    if ((rc = wr(w, h, sizeof h)) < 0 || (rc = wr(w, w->zbuf, z)) < 0)
        return rc;
    return 0;
}

int rvl_session_save(rvl_ctx *c, const char *path, const int32_t *ids, size_t n_ids,
                     const char *extra_json)
{
    const rvl_model *m = rvl_ctx_model(c);
    rvl_kvcache *kc = rvl_ctx_kvc(c);
    if (!kc) /* another backend holds the cache */
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: session files are not supported by the %s "
                          "backend (cpu only)", path, rvl_ctx_backend(c));
    const rvl_kvcache_params *kp = rvl_kvcache_params_of(kc);
    const uint32_t n = rvl_ctx_pos(c), nkv = kp->n_head_kv;
    static const unsigned char none[4] = {0};
    writer w = {0};
    unsigned char *page = NULL;
    int rc;

    if (rvl_kvcache_n_dropped(kc))
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: the sliding window dropped the cache's first %u "
                          "pages; a session file holds every page", path, rvl_kvcache_n_dropped(kc));
    if (n_ids != n)
        return rvl_seterr(RVL_EINVAL, "%s: %zu token ids given for a cache of %u tokens", path,
                          n_ids, n);
    if ((rc = rvl_afile_open(&w.f, path)) < 0)
        return rc;
    rvl_afile_set_private(w.f);   /* a conversation: 0600 when new */
    w.all = XXH3_createState();
    size_t maxpb = 0;
    for (int kind = 0; kind < 2; kind++)
        for (int t = 0; t < 3; t++)
            if (rvl_kvcache_page_bytes(kc, kind, t) > maxpb)
                maxpb = rvl_kvcache_page_bytes(kc, kind, t);
    page = malloc(2 * nkv * maxpb);
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
    put_geometry(h, kp);
    put32(h + 40, n);
    const float *mu = rvl_kvcache_key_center(kc);
    put32(h + 76, mu ? SESS_F_CENTER : 0);
    put64(h + 80, XXH3_64bits(h, 80));
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
    rc = wr_block(&w, BLK_TOKENS, 0, 0, none, tb, (size_t)n * 4);
    free(tb);
    if (rc < 0)
        goto fail;
    if ((rc = wr_block(&w, BLK_EXTRA, 0, 0, none, extra_json ? extra_json : "",
                       extra_json ? strlen(extra_json) : 0)) < 0)
        goto fail;
    if (mu) { /* the centre, as little-endian f32 */
        const size_t nm = (size_t)kp->n_layer * nkv * kp->head_dim;
        unsigned char *cb = malloc(nm * 4);
        if (!cb) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < nm; i++) {
            uint32_t u;
            memcpy(&u, mu + i, 4);
            put32(cb + 4 * i, u);
        }
        rc = wr_block(&w, BLK_CENTER, 0, 0, none, cb, nm * 4);
        free(cb);
        if (rc < 0)
            goto fail;
    }

    const uint32_t np = rvl_kvcache_n_pages(kc);
    for (uint32_t l = 0; l < kp->n_layer; l++) {
        for (uint32_t pg = 0; pg < np; pg++) {
            const int t = rvl_kvcache_page_tier(kc, pg);
            const uint32_t rows = n - pg * SESS_PAGE < SESS_PAGE ? n - pg * SESS_PAGE : SESS_PAGE;
            const size_t kb = nkv * rvl_kvcache_page_bytes(kc, 0, t), vb = nkv * rvl_kvcache_page_bytes(kc, 1, t);
            memcpy(page, rvl_kvcache_page_data(kc, l, 0, pg), kb);
            memcpy(page + kb, rvl_kvcache_page_data(kc, l, 1, pg), vb);
            if (rows < SESS_PAGE) { /* tier 0: zero the rows past the end */
                const size_t es = kp->fmt_k[0] == RVL_KVF_F32 ? 4 : 2;
                const size_t used = (size_t)rows * kp->head_dim * es;
                const size_t hb = rvl_kvcache_page_bytes(kc, 0, 0);
                for (uint32_t i = 0; i < 2 * nkv; i++)
                    memset(page + i * hb + used, 0, hb - used);
            }
            const unsigned char info[4] = {(unsigned char)kp->fmt_k[t], (unsigned char)kp->fmt_v[t],
                                           (unsigned char)t, (unsigned char)rows};
            if ((rc = wr_block(&w, BLK_KV, l, pg, info, page, kb + vb)) < 0)
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
    unsigned char info[4];        /* the last block's bytes 12..15 */
} reader;

/* The next block: checks its header against what is expected, verifies
 * its hash and decompresses it into r->raw. */
static int rd_block(reader *r, uint32_t kind, uint32_t layer, uint32_t page, size_t want_raw,
                    bool exact)
{
    static const char *const names[] = {"", "tokens", "extra", "kv", "center"};
    const size_t at = r->off;
    if (r->size - 8 - r->off < BLK)
        return rvl_seterr(RVL_EFORMAT, "%s: truncated: the %s block at offset %zu is missing",
                          r->path, names[kind], at);
    const unsigned char *h = r->b + r->off;
    uint32_t k = get32(h), l = get32(h + 4), pg = get32(h + 8), raw = get32(h + 16),
             z = get32(h + 20);
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
    if (XXH3_64bits(data, z) != get64(h + 24))
        return rvl_seterr(RVL_EFORMAT, "%s: checksum mismatch in the %s block at offset %zu "
                          "(layer %u, page %u): the file is corrupted", r->path, names[kind], at,
                          layer, page);
    if ((size_t)raw + 1 > r->raw_cap) {
        void *nb = realloc(r->raw, (size_t)raw + 1);
        if (!nb)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        r->raw = nb;
        r->raw_cap = (size_t)raw + 1;
    }
    size_t got = ZSTD_decompress(r->raw, raw, data, z);
    if (ZSTD_isError(got) || got != raw)
        return rvl_seterr(RVL_EFORMAT, "%s: the %s block at offset %zu does not decompress to its "
                          "%u bytes%s%s", r->path, names[kind], at, raw,
                          ZSTD_isError(got) ? ": " : "", ZSTD_isError(got) ? ZSTD_getErrorName(got) : "");
    memcpy(r->info, h + 12, 4);
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

static const char *tier_name(uint32_t fk, uint32_t fv)
{
    static _Thread_local char buf[2][32]; /* two in one message */
    static _Thread_local int i;
    const char *k = rvl_kvcache_fmt_name((int)fk), *v = rvl_kvcache_fmt_name((int)fv);
    i ^= 1;
    snprintf(buf[i], sizeof buf[i], "%s/%s", k ? k : "?", v ? v : "?");
    return buf[i];
}

/* "f16", "q8", "tiered (256/2048/tq4)" ...: a kind's formats as the
 * --kv-type options say them. */
static void kind_desc(char *buf, size_t cap, const unsigned char *h, int kind)
{
    const uint32_t f0 = get32(h + 44 + 12 * kind), f1 = get32(h + 48 + 12 * kind),
                   f2 = get32(h + 52 + 12 * kind), hot = get32(h + 68), warm = get32(h + 72);
    const char *n1 = rvl_kvcache_fmt_name((int)f1), *n2 = rvl_kvcache_fmt_name((int)f2);
    if (!n1 || !n2 || f0 > RVL_KVF_F32)
        snprintf(buf, cap, "unknown");
    else if (f1 == f2 || warm == RVL_KVC_UNBOUNDED)
        snprintf(buf, cap, "%s", n1);
    else
        snprintf(buf, cap, "tiered (hot %u, warm %u, cold %s)", hot, warm, n2);
}

int rvl_session_load_mem(rvl_ctx *c, const char *path, const void *buf, size_t size,
                         int32_t **ids_out, size_t *n_ids, char **extra_json)
{
    const rvl_model *m = rvl_ctx_model(c);
    const rvl_hparams *hp = &m->hp;
    rvl_kvcache *kc = rvl_ctx_kvc(c);
    if (!kc) { /* another backend holds the cache */
        *ids_out = NULL;
        *n_ids = 0;
        if (extra_json)
            *extra_json = NULL;
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: session files are not supported by the %s "
                          "backend (cpu only)", path, rvl_ctx_backend(c));
    }
    const rvl_kvcache_params *kp = rvl_kvcache_params_of(kc);
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
    if (r.size < 16 || memcmp(r.b, SESS_MAGIC, 8) != 0) {
        if (r.size >= 8 && memcmp(r.b, SESS_MAGIC, 8) == 0)
            BAD("%s: truncated: %zu bytes, shorter than a session header", path, r.size);
        BAD("%s: not a ruvllm session file (bad magic at offset 0)", path);
    }
    if (get32(r.b + 12) != SESS_BOM)
        BAD("%s: byte-order mark at offset 12 is 0x%08x: written on a machine of the other "
            "endianness", path, get32(r.b + 12));
    if (get32(r.b + 8) == 1)
        BAD("%s: session format version 1 is no longer supported, re-create the file", path);
    const uint32_t version = get32(r.b + 8);
    if (version != SESS_VERSION && version != 2)
        BAD("%s: session version %u at offset 8 is not supported (this is %u)", path, version,
            SESS_VERSION);
    if (r.size < HDR + 8)
        BAD("%s: truncated: %zu bytes, shorter than a session header", path, r.size);
    if (XXH3_64bits(r.b, 80) != get64(r.b + 80))
        BAD("%s: header checksum mismatch at offset 80: the file is corrupted", path);
    if (XXH3_64bits(r.b, r.size - 8) != get64(r.b + r.size - 8))
        BAD("%s: file checksum mismatch (offset %zu): the file is truncated or corrupted", path,
            r.size - 8);
    if (get64(r.b + 16) != rvl_model_fingerprint(m))
        BAD("%s: made with another model (fingerprint %016llx, this model's is %016llx)", path,
            (unsigned long long)get64(r.b + 16), (unsigned long long)rvl_model_fingerprint(m));
    const uint32_t nl = get32(r.b + 24), nkv = get32(r.b + 28), hd = get32(r.b + 32),
                   ps = get32(r.b + 36), n = get32(r.b + 40);
    if (nl != hp->n_layer || nkv != hp->n_head_kv || hd != hp->head_dim || ps != SESS_PAGE)
        BAD("%s: cache geometry (%u layers, %u kv heads of %u, pages of %u) does not match this "
            "model's (%u, %u, %u, %u)", path, nl, nkv, hd, ps, hp->n_layer, hp->n_head_kv,
            hp->head_dim, SESS_PAGE);
    {
        unsigned char mine[HDR] = {0};
        put_geometry(mine, kp);
        const uint32_t flags = get32(r.b + 76);
        if (flags & ~(version == 2 ? 0u : SESS_F_CENTER))
            BAD("%s: unknown flags 0x%08x at offset 76", path, flags);
        if (memcmp(mine + 44, r.b + 44, 32) != 0) {
            char fk[64], fv[64], ck[64], cv[64];
            kind_desc(fk, sizeof fk, r.b, 0);
            kind_desc(fv, sizeof fv, r.b, 1);
            kind_desc(ck, sizeof ck, mine, 0);
            kind_desc(cv, sizeof cv, mine, 1);
            BAD("%s: KV cache formats at offset 44 (keys %s, values %s) differ from this "
                "context's (keys %s, values %s): use the --kv-type options it was made with",
                path, fk, fv, ck, cv);
        }
    }
    if (n > rvl_ctx_n_ctx(c))
        BAD("%s: holds %u tokens, more than this context's %u (use a larger -c)", path, n,
            rvl_ctx_n_ctx(c));
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
        if (ids[i] < 0 || (uint32_t)ids[i] >= hp->n_vocab)
            BAD("%s: token %u is id %d, outside the vocabulary (%u)", path, i, ids[i], hp->n_vocab);
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
    if (get32(r.b + 76) & SESS_F_CENTER) {
        const size_t nm = (size_t)hp->n_layer * nkv * hd;
        if ((rc = rd_block(&r, BLK_CENTER, 0, 0, nm * 4, true)) < 0)
            goto fail;
        float *mu = r.raw; /* aligned: malloc'd; decoded in place */
        for (size_t i = 0; i < nm; i++) {
            const uint32_t u = get32((const unsigned char *)r.raw + 4 * i);
            memcpy(mu + i, &u, 4);
            if (!isfinite(mu[i]))
                BAD("%s: the key centre holds a non-finite value (element %zu)", path, i);
        }
        rc = rvl_kvcache_load_center(kc, mu);
    } else {
        rc = rvl_kvcache_load_center(kc, NULL);
    }
    if (rc < 0) {
        char why[160];
        snprintf(why, sizeof why, "%s", rvl_errmsg());
        BAD("%s: %s", path, why);
    }
    const uint32_t np = (n + SESS_PAGE - 1) / SESS_PAGE;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        for (uint32_t pg = 0; pg < np; pg++) {
            const size_t at = r.off;
            /* the page's tier first (its size depends on it) */
            if (r.size - 8 - r.off < BLK)
                BAD("%s: truncated: the kv block at offset %zu is missing", path, at);
            const unsigned char *bh = r.b + r.off;
            const uint32_t t = bh[14], rows = bh[15];
            const uint32_t want_rows = n - pg * SESS_PAGE < SESS_PAGE ? n - pg * SESS_PAGE : SESS_PAGE;
            if (t > 2)
                BAD("%s: kv block at offset %zu (layer %u, page %u) is in tier %u (0..2)", path, at,
                    l, pg, t);
            if (bh[12] != (unsigned)kp->fmt_k[t] || bh[13] != (unsigned)kp->fmt_v[t])
                BAD("%s: kv block at offset %zu (layer %u, page %u) holds %s pages, tier %u is %s",
                    path, at, l, pg, tier_name(bh[12], bh[13]), t,
                    tier_name((uint32_t)kp->fmt_k[t], (uint32_t)kp->fmt_v[t]));
            if (rows != want_rows)
                BAD("%s: kv block at offset %zu (layer %u, page %u) says %u positions, expected %u",
                    path, at, l, pg, rows, want_rows);
            if (l == 0) {
                if (rvl_kvcache_load_page(kc, pg, (int)t) < 0) {
                    char why[160];
                    snprintf(why, sizeof why, "%s", rvl_errmsg());
                    BAD("%s: kv block at offset %zu: %s", path, at, why);
                }
            } else if ((uint32_t)rvl_kvcache_page_tier(kc, pg) != t) {
                BAD("%s: kv block at offset %zu: layer %u has page %u in tier %u, layer 0 in tier %d",
                    path, at, l, pg, t, rvl_kvcache_page_tier(kc, pg));
            }
            const size_t kb = (size_t)nkv * rvl_kvcache_page_bytes(kc, 0, (int)t);
            const size_t vb = (size_t)nkv * rvl_kvcache_page_bytes(kc, 1, (int)t);
            if ((rc = rd_block(&r, BLK_KV, l, pg, kb + vb, true)) < 0)
                goto fail;
            memcpy(rvl_kvcache_page_data(kc, l, 0, pg), r.raw, kb);
            memcpy(rvl_kvcache_page_data(kc, l, 1, pg), (char *)r.raw + kb, vb);
        }
    }
    if (r.off != r.size - 8)
        BAD("%s: %zu unexpected bytes after the last block at offset %zu", path, r.size - 8 - r.off,
            r.off);
    if (rvl_kvcache_load_done(kc, n) < 0) {
        char why[160];
        snprintf(why, sizeof why, "%s", rvl_errmsg());
        BAD("%s: %s", path, why);
    }
#undef BAD
    rvl_kvcache_set_ids(kc, 0, ids, (uint32_t)n); /* page hashes, for prefix reuse */
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

/* ======================================================================
 * Locking a session file for one conversation
 * ====================================================================== */
int rvl_session_lock(const char *path, int *lock)
{
    char lp[4096];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dl = slash ? (int)(slash - path + 1) : 0;
    *lock = -1;
    if (snprintf(lp, sizeof lp, "%.*s.%.200s.lock", dl, path, base) >= (int)sizeof lp)
        return rvl_seterr(RVL_EINVAL, "%s: path too long", path);
    int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return rvl_seterr(RVL_EIO, "%s: cannot lock the session (%s): %s", path, lp,
                          strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        char who[32] = "";
        ssize_t n = pread(fd, who, sizeof who - 1, 0);
        who[n > 0 ? n : 0] = 0;
        close(fd);
        if (e == EWOULDBLOCK)
            return rvl_seterr(RVL_EINVAL, "%s: in use by another ruvllm (pid %ld): two "
                              "conversations on one session file would lose turns; use "
                              "another file", path, strtol(who, NULL, 10));
        return rvl_seterr(RVL_EIO, "%s: cannot lock the session: %s", path, strerror(e));
    }
    char pid[32];
    int k = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)k, 0) < 0) {
        /* the pid is only for the message above */
    }
    *lock = fd;
    return 0;
}

void rvl_session_unlock(int lock)
{
    if (lock >= 0)
        close(lock);   /* releases the flock */
}
