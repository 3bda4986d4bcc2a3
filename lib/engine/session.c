/*
 * session.c - session files: a context's paged KV cache (every page in its
 * own storage format), the token ids it holds and an opaque JSON blob,
 * saved and restored. The layout, its constants and the error texts it
 * shares with `ruvllm kv-inspect` are in session_fmt.h.
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

#include <cjson/cJSON.h>

#include "engine/kvcache.h"
#include "engine/model.h"
#include "engine/session_fmt.h"

/* The header fields that describe the cache (n_layer .. flags). */
static void put_geometry(unsigned char *h, const rvl_kvcache_params *kp)
{
    rvl_session_put32(h + RVL_SESS_H_N_LAYER, kp->n_layer);
    rvl_session_put32(h + RVL_SESS_H_N_HEAD_KV, kp->n_head_kv);
    rvl_session_put32(h + RVL_SESS_H_HEAD_DIM, kp->head_dim);
    rvl_session_put32(h + RVL_SESS_H_PAGE, RVL_SESS_PAGE);
    for (int t = 0; t < RVL_SESS_TIERS; t++) {
        rvl_session_put32(h + RVL_SESS_H_FMT_K + 4 * t, (uint32_t)kp->fmt_k[t]);
        rvl_session_put32(h + RVL_SESS_H_FMT_V + 4 * t, (uint32_t)kp->fmt_v[t]);
    }
    rvl_session_put32(h + RVL_SESS_H_HOT, kp->hot);
    rvl_session_put32(h + RVL_SESS_H_WARM, kp->warm);
    rvl_session_put32(h + RVL_SESS_H_FLAGS, 0);
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

/* info: the block header's info bytes (kv: formats, tier, rows). */
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
    unsigned char h[RVL_SESS_BLK];
    rvl_session_put32(h + RVL_SESS_B_KIND, kind);
    rvl_session_put32(h + RVL_SESS_B_LAYER, layer);
    rvl_session_put32(h + RVL_SESS_B_PAGE, page);
    memcpy(h + RVL_SESS_B_INFO, info, 4);
    rvl_session_put32(h + RVL_SESS_B_RAW, (uint32_t)n);
    rvl_session_put32(h + RVL_SESS_B_STORED, (uint32_t)z);
    rvl_session_put64(h + RVL_SESS_B_HASH, XXH3_64bits(w->zbuf, z));
    int rc;
    if ((rc = wr(w, h, sizeof h)) < 0 || (rc = wr(w, w->zbuf, z)) < 0)
        return rc;
    return 0;
}

int rvl_session_save(rvl_ctx *c, const char *path, const int32_t *ids, size_t n_ids,
                     const char *extra_json)
{
    rvl_kvcache *kc = rvl_ctx_kvc(c);
    if (!kc) /* another backend holds the cache */
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: session files are not supported by the %s "
                          "backend (cpu only)", path, rvl_ctx_backend(c));
    if (n_ids != rvl_ctx_pos(c))
        return rvl_seterr(RVL_EINVAL, "%s: %zu token ids given for a cache of %u tokens", path,
                          n_ids, rvl_ctx_pos(c));
    /* the model's store name and absolute path, for the MODEL block */
    const rvl_model *m = rvl_ctx_model(c);
    const char *mpath = m->file ? rvl_file_path(m->file) : NULL;
    char name[1024] = "", *abs = mpath ? realpath(mpath, NULL) : NULL;
    if (mpath && rvl_store_name_of(mpath, name, sizeof name) < 0)
        name[0] = 0;
    cJSON *j = cJSON_CreateObject();
    char *model_json = NULL;
    if (j && cJSON_AddStringToObject(j, "name", name) &&
        cJSON_AddStringToObject(j, "path", abs ? abs : mpath ? mpath : ""))
        model_json = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    free(abs);
    if (!model_json)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    int rc = rvl_session_save_kvc_model(kc, rvl_model_fingerprint(m), path, ids, n_ids,
                                        extra_json, model_json);
    free(model_json);
    return rc;
}

int rvl_session_save_kvc(rvl_kvcache *kc, uint64_t fingerprint, const char *path,
                         const int32_t *ids, size_t n_ids, const char *extra_json)
{
    return rvl_session_save_kvc_model(kc, fingerprint, path, ids, n_ids, extra_json, NULL);
}

int rvl_session_save_kvc_model(rvl_kvcache *kc, uint64_t fingerprint, const char *path,
                               const int32_t *ids, size_t n_ids, const char *extra_json,
                               const char *model_json)
{
    const rvl_kvcache_params *kp = rvl_kvcache_params_of(kc);
    const uint32_t n = rvl_kvcache_n(kc), nkv = kp->n_head_kv, nkind = kp->v_is_k ? 1 : 2;
    static const unsigned char none[4] = {0};
    writer w = {0};
    unsigned char *page = NULL;
    int rc;

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

    unsigned char h[RVL_SESS_HDR] = {0};
    memcpy(h, RVL_SESS_MAGIC, RVL_SESS_MAGIC_BYTES);
    /* the lowest version that describes the file (older readers take it):
     * 5 with v_is_k, 3 when every layer holds every page, else 4 */
    bool trimmed = false;
    for (uint32_t l = 0; l < kp->n_layer; l++)
        trimmed |= rvl_kvcache_first_page(kc, l) > 0;
    rvl_session_put32(h + RVL_SESS_H_VERSION, kp->v_is_k ? RVL_SESS_VERSION : trimmed ? 4 : 3);
    if (model_json && strlen(model_json) > RVL_SESS_MAX_MODEL) {
        rc = rvl_seterr(RVL_EINVAL, "%s: the model's name and path are over %llu bytes", path,
                        (unsigned long long)RVL_SESS_MAX_MODEL);
        goto fail;
    }
    rvl_session_put32(h + RVL_SESS_H_BOM, RVL_SESS_BOM);
    rvl_session_put64(h + RVL_SESS_H_FINGERPRINT, fingerprint);
    put_geometry(h, kp);
    rvl_session_put32(h + RVL_SESS_H_N_TOKENS, n);
    const float *mu = rvl_kvcache_key_center(kc);
    rvl_session_put32(h + RVL_SESS_H_FLAGS, (mu ? RVL_SESS_F_CENTER : 0) |
                                               (kp->v_is_k ? RVL_SESS_F_V_IS_K : 0) |
                                               (model_json ? RVL_SESS_F_MODEL : 0));
    rvl_session_put64(h + RVL_SESS_H_HASH, XXH3_64bits(h, RVL_SESS_H_HASH));
    if ((rc = wr(&w, h, sizeof h)) < 0)
        goto fail;

    if (model_json &&
        (rc = wr_block(&w, RVL_SESS_MODEL, 0, 0, none, model_json, strlen(model_json))) < 0)
        goto fail;
    /* token ids as little-endian i32 */
    unsigned char *tb = malloc((size_t)n * 4 + 1);
    if (!tb) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < n; i++)
        rvl_session_put32(tb + 4 * (size_t)i, (uint32_t)ids[i]);
    rc = wr_block(&w, RVL_SESS_TOKENS, 0, 0, none, tb, (size_t)n * 4);
    free(tb);
    if (rc < 0)
        goto fail;
    if ((rc = wr_block(&w, RVL_SESS_EXTRA, 0, 0, none, extra_json ? extra_json : "",
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
            rvl_session_put32(cb + 4 * i, u);
        }
        rc = wr_block(&w, RVL_SESS_CENTER, 0, 0, none, cb, nm * 4);
        free(cb);
        if (rc < 0)
            goto fail;
    }

    const uint32_t np = rvl_kvcache_n_pages(kc);
    for (uint32_t l = 0; l < kp->n_layer; l++) {
        for (uint32_t pg = rvl_kvcache_first_page(kc, l); pg < np; pg++) { /* a ring: its pages */
            const int t = rvl_kvcache_page_tier(kc, l, pg);
            const uint32_t rows = n - pg * RVL_SESS_PAGE < RVL_SESS_PAGE ? n - pg * RVL_SESS_PAGE : RVL_SESS_PAGE;
            const size_t kb = nkv * rvl_kvcache_page_bytes(kc, 0, t);
            const size_t vb = kp->v_is_k ? 0 : nkv * rvl_kvcache_page_bytes(kc, 1, t);
            memcpy(page, rvl_kvcache_page_data(kc, l, 0, pg), kb);
            if (vb)
                memcpy(page + kb, rvl_kvcache_page_data(kc, l, 1, pg), vb);
            if (rows < RVL_SESS_PAGE) { /* tier 0: zero the rows past the end */
                const size_t es = kp->fmt_k[0] == RVL_KVF_F32 ? 4 : 2;
                const size_t used = (size_t)rows * kp->head_dim * es;
                const size_t hb = rvl_kvcache_page_bytes(kc, 0, 0);
                for (uint32_t i = 0; i < nkind * nkv; i++)
                    memset(page + i * hb + used, 0, hb - used);
            }
            const unsigned char info[4] = {(unsigned char)kp->fmt_k[t], (unsigned char)kp->fmt_v[t],
                                           (unsigned char)t, (unsigned char)rows};
            if ((rc = wr_block(&w, RVL_SESS_KV, l, pg, info, page, kb + vb)) < 0)
                goto fail;
        }
        if (rvl_interrupted()) {
            rc = rvl_seterr(RVL_EINTR, "interrupted");
            goto fail;
        }
    }
    unsigned char t[8];
    rvl_session_put64(t, XXH3_64bits_digest(w.all));
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
    unsigned char info[4];        /* the last block's info bytes */
} reader;

/* The next block: checks its header against what is expected, verifies
 * its hash and decompresses it into r->raw. */
static int rd_block(reader *r, uint32_t kind, uint32_t layer, uint32_t page, size_t want_raw,
                    bool exact)
{
    static const char *const names[] = {"", "tokens", "extra", "kv", "center", "model"};
    const size_t at = r->off;
    if (r->size - 8 - r->off < RVL_SESS_BLK)
        return rvl_seterr(RVL_EFORMAT, "%s: truncated: the %s block at offset %zu is missing",
                          r->path, names[kind], at);
    const unsigned char *h = r->b + r->off;
    const uint32_t k = rvl_session_get32(h + RVL_SESS_B_KIND), l = rvl_session_get32(h + RVL_SESS_B_LAYER),
                   pg = rvl_session_get32(h + RVL_SESS_B_PAGE), raw = rvl_session_get32(h + RVL_SESS_B_RAW),
                   z = rvl_session_get32(h + RVL_SESS_B_STORED);
    if (k != kind || l != layer || pg != page)
        return rvl_seterr(RVL_EFORMAT, "%s: block at offset %zu is kind %u layer %u page %u, "
                          "expected the %s block (layer %u, page %u)", r->path, at, k, l, pg,
                          names[kind], layer, page);
    if (exact ? raw != want_raw : raw > want_raw)
        return rvl_seterr(RVL_EFORMAT, "%s: %s block at offset %zu holds %u bytes, expected %s%zu",
                          r->path, names[kind], at, raw, exact ? "" : "at most ", want_raw);
    if (z > r->size - 8 - r->off - RVL_SESS_BLK)
        return rvl_seterr(RVL_EFORMAT, "%s: truncated: the %s block at offset %zu needs %u bytes "
                          "past the end of the file", r->path, names[kind], at, z);
    const unsigned char *data = h + RVL_SESS_BLK;
    if (XXH3_64bits(data, z) != rvl_session_get64(h + RVL_SESS_B_HASH))
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
    memcpy(r->info, h + RVL_SESS_B_INFO, 4);
    r->off += RVL_SESS_BLK + z;
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
    const unsigned char *fmt = h + (kind ? RVL_SESS_H_FMT_V : RVL_SESS_H_FMT_K);
    const uint32_t f0 = rvl_session_get32(fmt), f1 = rvl_session_get32(fmt + 4),
                   f2 = rvl_session_get32(fmt + 8), hot = rvl_session_get32(h + RVL_SESS_H_HOT),
                   warm = rvl_session_get32(h + RVL_SESS_H_WARM);
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
    rvl_kvcache *kc = rvl_ctx_kvc(c);
    if (!kc) { /* another backend holds the cache */
        *ids_out = NULL;
        *n_ids = 0;
        if (extra_json)
            *extra_json = NULL;
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: session files are not supported by the %s "
                          "backend (cpu only)", path, rvl_ctx_backend(c));
    }
    rvl_ctx_reset(c);
    const int rc = rvl_session_load_kvc(kc, rvl_model_fingerprint(m), m->hp.n_vocab, path, buf,
                                        size, ids_out, n_ids, extra_json);
    if (rc < 0)
        rvl_ctx_reset(c);
    else
        rvl_ctx_set_pos(c, (uint32_t)*n_ids);
    return rc;
}

int rvl_session_load_kvc(rvl_kvcache *kc, uint64_t fingerprint, uint32_t n_vocab,
                         const char *path, const void *buf, size_t size, int32_t **ids_out,
                         size_t *n_ids, char **extra_json)
{
    const rvl_kvcache_params *kp = rvl_kvcache_params_of(kc);
    reader r = {.path = path, .b = buf, .size = size};
    int32_t *ids = NULL;
    char *extra = NULL;
    int rc;

    *ids_out = NULL;
    *n_ids = 0;
    if (extra_json)
        *extra_json = NULL;
    rvl_kvcache_reset(kc);
#define BAD(...) do { rc = rvl_seterr(RVL_EFORMAT, __VA_ARGS__); goto fail; } while (0)
    const bool magic = r.size >= RVL_SESS_MAGIC_BYTES &&
                       memcmp(r.b, RVL_SESS_MAGIC, RVL_SESS_MAGIC_BYTES) == 0;
    if (r.size < 16 || !magic) {
        if (magic)
            BAD("%s: " RVL_SESS_E_SHORT, path, r.size);
        BAD("%s: " RVL_SESS_E_MAGIC, path);
    }
    const uint32_t bom = rvl_session_get32(r.b + RVL_SESS_H_BOM);
    if (bom != RVL_SESS_BOM)
        BAD("%s: " RVL_SESS_E_BOM, path, bom);
    const uint32_t version = rvl_session_get32(r.b + RVL_SESS_H_VERSION);
    if (version == 1)
        BAD("%s: session format version 1 is no longer supported, re-create the file", path);
    if (version > RVL_SESS_VERSION || version < 2)
        BAD("%s: session version %u at offset 8 is not supported (this is %u)", path, version,
            RVL_SESS_VERSION);
    if (r.size < RVL_SESS_HDR + 8)
        BAD("%s: " RVL_SESS_E_SHORT, path, r.size);
    if (XXH3_64bits(r.b, RVL_SESS_H_HASH) != rvl_session_get64(r.b + RVL_SESS_H_HASH))
        BAD("%s: header checksum mismatch at offset 80: the file is corrupted", path);
    if (XXH3_64bits(r.b, r.size - 8) != rvl_session_get64(r.b + r.size - 8))
        BAD("%s: file checksum mismatch (offset %zu): the file is truncated or corrupted", path,
            r.size - 8);
    r.off = RVL_SESS_HDR;
    const uint32_t flags = rvl_session_get32(r.b + RVL_SESS_H_FLAGS);
    char made_by[2200] = "another model";
    if (version >= 3 && (flags & RVL_SESS_F_MODEL)) {   /* who made it, said when refusing it */
        if ((rc = rd_block(&r, RVL_SESS_MODEL, 0, 0, RVL_SESS_MAX_MODEL, false)) < 0)
            goto fail;
        ((char *)r.raw)[r.raw_len] = 0;
        cJSON *j = cJSON_Parse(r.raw);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, "name");
        const cJSON *mp = cJSON_GetObjectItemCaseSensitive(j, "path");
        if (cJSON_IsString(nm) && nm->valuestring[0])
            snprintf(made_by, sizeof made_by, "another model, %.1000s (%.1000s)", nm->valuestring,
                     cJSON_IsString(mp) && mp->valuestring[0] ? mp->valuestring : "path unknown");
        cJSON_Delete(j);
    }
    const uint64_t fp = rvl_session_get64(r.b + RVL_SESS_H_FINGERPRINT);
    if (fp != fingerprint)
        BAD("%s: made for %s (fingerprint %016llx, this model's is %016llx)", path,
            made_by, (unsigned long long)fp, (unsigned long long)fingerprint);
    const uint32_t nl = rvl_session_get32(r.b + RVL_SESS_H_N_LAYER),
                   nkv = rvl_session_get32(r.b + RVL_SESS_H_N_HEAD_KV),
                   hd = rvl_session_get32(r.b + RVL_SESS_H_HEAD_DIM),
                   ps = rvl_session_get32(r.b + RVL_SESS_H_PAGE),
                   n = rvl_session_get32(r.b + RVL_SESS_H_N_TOKENS);
    /* the cache's geometry (MLA's latent cache is one kv head of its own size) */
    if (nl != kp->n_layer || nkv != kp->n_head_kv || hd != kp->head_dim || ps != RVL_SESS_PAGE)
        BAD("%s: cache geometry (%u layers, %u kv heads of %u, pages of %u) does not match this "
            "model's (%u, %u, %u, %u)", path, nl, nkv, hd, ps, kp->n_layer, kp->n_head_kv,
            kp->head_dim, RVL_SESS_PAGE);
    {
        unsigned char mine[RVL_SESS_HDR] = {0};
        put_geometry(mine, kp);
        const uint32_t known = version == 2 ? 0u
                               : version < 5 ? RVL_SESS_F_CENTER | RVL_SESS_F_MODEL
                                             : RVL_SESS_F_CENTER | RVL_SESS_F_V_IS_K |
                                                   RVL_SESS_F_MODEL;
        if (flags & ~known)
            BAD("%s: " RVL_SESS_E_FLAGS, path, flags);
        if (!(flags & RVL_SESS_F_V_IS_K) != !kp->v_is_k)
            BAD("%s: %s, this context's %s", path,
                kp->v_is_k ? "the file's cache keeps values apart from the keys"
                           : "the file holds MLA's latent cache (the values are the keys, flag "
                             "bit 1 at offset 76)",
                kp->v_is_k ? "is MLA's latent cache (the values are the keys)"
                           : "keeps values apart from the keys");
        /* the tier formats, hot and warm */
        if (memcmp(mine + RVL_SESS_H_FMT_K, r.b + RVL_SESS_H_FMT_K,
                   RVL_SESS_H_FLAGS - RVL_SESS_H_FMT_K) != 0) {
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
    if (n > kp->n_ctx)
        BAD("%s: holds %u tokens, more than this context's %u (use a larger -c)", path, n,
            kp->n_ctx);
    if ((rc = rd_block(&r, RVL_SESS_TOKENS, 0, 0, (size_t)n * 4, true)) < 0)
        goto fail;
    ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < n; i++) {
        ids[i] = (int32_t)rvl_session_get32((const unsigned char *)r.raw + 4 * (size_t)i);
        if (ids[i] < 0 || (uint32_t)ids[i] >= n_vocab)
            BAD("%s: token %u is id %d, outside the vocabulary (%u)", path, i, ids[i], n_vocab);
    }
    /* the JSON blob */
    if ((rc = rd_block(&r, RVL_SESS_EXTRA, 0, 0, RVL_SESS_MAX_EXTRA, false)) < 0)
        goto fail;
    extra = malloc(r.raw_len + 1);
    if (!extra) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    memcpy(extra, r.raw, r.raw_len);
    extra[r.raw_len] = 0;
    if (flags & RVL_SESS_F_CENTER) {
        const size_t nm = (size_t)nl * nkv * hd;
        if ((rc = rd_block(&r, RVL_SESS_CENTER, 0, 0, nm * 4, true)) < 0)
            goto fail;
        float *mu = r.raw; /* aligned: malloc'd; decoded in place */
        for (size_t i = 0; i < nm; i++) {
            const uint32_t u = rvl_session_get32((const unsigned char *)r.raw + 4 * i);
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
    const uint32_t np = (n + RVL_SESS_PAGE - 1) / RVL_SESS_PAGE;
    for (uint32_t l = 0; l < nl; l++) {
        /* the layer's first page: 0, or (version 4) where its window's ring starts */
        uint32_t first = 0;
        if (np) {
            if (r.size - 8 - r.off < RVL_SESS_BLK)
                BAD("%s: truncated: the kv block at offset %zu is missing", path, r.off);
            first = rvl_session_get32(r.b + r.off + RVL_SESS_B_PAGE);
            if (first >= np || (first && version < 4))
                BAD("%s: kv block at offset %zu: layer %u starts at page %u of %u%s", path, r.off,
                    l, first, np, first < np ? " (a trimmed window needs version 4)" : "");
            if (first && !rvl_kvcache_window(kc, l))
                BAD("%s: kv block at offset %zu: layer %u holds pages from %u on, but has no "
                    "sliding window in this context", path, r.off, l, first);
        }
        for (uint32_t pg = first; pg < np; pg++) {
            const size_t at = r.off;
            /* the page's tier first (its size depends on it) */
            if (r.size - 8 - r.off < RVL_SESS_BLK)
                BAD("%s: truncated: the kv block at offset %zu is missing", path, at);
            const unsigned char *bh = r.b + r.off;
            const unsigned char *info = bh + RVL_SESS_B_INFO;   /* k fmt, v fmt, tier, rows */
            const uint32_t t = info[2], rows = info[3];
            const uint32_t want_rows = n - pg * RVL_SESS_PAGE < RVL_SESS_PAGE ? n - pg * RVL_SESS_PAGE : RVL_SESS_PAGE;
            if (t > 2)
                BAD("%s: kv block at offset %zu (layer %u, page %u) is in tier %u (0..2)", path, at,
                    l, pg, t);
            if (info[0] != (unsigned)kp->fmt_k[t] || info[1] != (unsigned)kp->fmt_v[t])
                BAD("%s: kv block at offset %zu (layer %u, page %u) holds %s pages, tier %u is %s",
                    path, at, l, pg, tier_name(info[0], info[1]), t,
                    tier_name((uint32_t)kp->fmt_k[t], (uint32_t)kp->fmt_v[t]));
            if (rows != want_rows)
                BAD("%s: kv block at offset %zu (layer %u, page %u) says %u positions, expected %u",
                    path, at, l, pg, rows, want_rows);
            if (rvl_kvcache_load_page(kc, l, pg, (int)t) < 0) {
                char why[200];
                snprintf(why, sizeof why, "%s", rvl_errmsg());
                BAD("%s: kv block at offset %zu: %s", path, at, why);
            }
            const size_t kb = (size_t)nkv * rvl_kvcache_page_bytes(kc, 0, (int)t);
            const size_t vb = kp->v_is_k ? 0 : (size_t)nkv * rvl_kvcache_page_bytes(kc, 1, (int)t);
            if ((rc = rd_block(&r, RVL_SESS_KV, l, pg, kb + vb, true)) < 0)
                goto fail;
            memcpy(rvl_kvcache_page_data(kc, l, 0, pg), r.raw, kb);
            if (vb)
                memcpy(rvl_kvcache_page_data(kc, l, 1, pg), (char *)r.raw + kb, vb);
        }
        if (np && first != rvl_kvcache_first_page(kc, l))
            BAD("%s: layer %u holds pages from %u on, the other layers of its window from %u", path,
                l, first, rvl_kvcache_first_page(kc, l));
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
    *ids_out = ids;
    *n_ids = n;
    if (extra_json)
        *extra_json = extra;
    else
        free(extra);
    free(r.raw);
    return 0;
fail:
    rvl_kvcache_reset(kc);
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
