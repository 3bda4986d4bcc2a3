/*
 * kv_inspect.c - session files read for inspection (`ruvllm kv-inspect`):
 * a reader of the layout in lib/engine/session_fmt.h (versions 1 to 3)
 * that, unlike rvl_session_load, needs no model and does not stop at the
 * first problem.
 *
 * Opening maps the file, reads the header, then walks the blocks one by
 * one: each block's header is checked against the file's end (a block
 * that runs past it ends the walk: truncated), its stored bytes against
 * their xxh3-64, its identity (kind, layer, page) against the order the
 * layout prescribes, its raw size and page formats against the header,
 * and blocks with a good checksum are decompressed once to check the zstd
 * frame. What is wrong becomes a problem message with the byte offset;
 * the header's and the whole file's checksums are verified as well.
 * Page data is decompressed again on demand (rvl_kv_inspect_page), so memory
 * stays at one block whatever the file's size.
 *
 * Bounds that keep a hostile file from making us allocate or work much:
 * kv_dim <= 65536 and n_layer <= 65536 (a kv block is then at most 16
 * MiB), a raw block of at most 64 MiB, and per-page tables only when the
 * file is large enough to hold the blocks the header promises.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include <cjson/cJSON.h>

#include "engine/session_fmt.h"
#include "f16.h"
#include "format/format_int.h"
#include "kvq.h"
#include "ruvllm_tools.h"

#define MAX_KV_DIM 65536u
#define MAX_LAYERS 65536u
#define MAX_RAW RVL_SESS_MAX_EXTRA  /* the largest block (kv blocks: 16 MiB at most) */
#define MAX_PROBLEMS 1000
#define MAX_EXPAND 256u             /* raw / stored bytes of a block at most */

struct rvl_kv_inspect {
    rvl_kv_inspect_info info;
    char *path;
    rvl_map map;                 /* when opened from a path */
    const unsigned char *b;
    size_t size;
    rvl_kv_inspect_blockinfo *blocks;
    size_t n_blocks, cap_blocks;
    char **problems;
    size_t n_problems, cap_problems, dropped_problems;
    uint32_t n_pages;            /* ceil(n_tokens / 32) */
    long *index;                 /* [n_layer][n_pages] block index or -1; NULL: none */
    int32_t *tokens;
    char *extra;
    char *model_name, *model_path;   /* from the model block */
    float *centre;
    void *raw;                   /* decompression scratch */
    size_t raw_cap;
};

/* The public numbering is the file's (session_fmt.h). */
_Static_assert((int)RVL_KVI_BLK_TOKENS == RVL_SESS_TOKENS && (int)RVL_KVI_BLK_EXTRA == RVL_SESS_EXTRA &&
               (int)RVL_KVI_BLK_KV == RVL_SESS_KV && (int)RVL_KVI_BLK_CENTER == RVL_SESS_CENTER,
               "kv-inspect's block kinds are the file's");
_Static_assert((int)RVL_KVI_F16 == RVL_KVQ_F16 && (int)RVL_KVI_Q8 == RVL_KVQ_Q8 &&
               (int)RVL_KVI_Q4 == RVL_KVQ_Q4 && (int)RVL_KVI_TQ4 == RVL_KVQ_TQ4 &&
               (int)RVL_KVI_TQ3 == RVL_KVQ_TQ3 && (int)RVL_KVI_F32 == RVL_KVQ_COUNT,
               "kv-inspect's page formats are the file's");

const char *rvl_kv_inspect_fmt_name(int fmt)
{
    static const char *const names[] = {"f16", "q8", "q4", "tq4", "tq3", "f32"};
    return fmt >= 0 && fmt < RVL_KVI_NFMT ? names[fmt] : "?";
}

/* Bytes of one page (32 positions) of one head's keys or values. */
static uint64_t page_bytes(int fmt, int kind, uint32_t hd)
{
    if (fmt == RVL_KVI_F32)
        return (uint64_t)RVL_SESS_PAGE * hd * 4;
    return rvl_kvq_page_bytes(fmt, kind, (int)hd);
}

/* NULL when pages of (fmt, kind) can be decoded with this head size. */
static const char *fmt_check(int fmt, int kind, uint32_t hd)
{
    if (fmt < 0 || fmt >= RVL_KVI_NFMT)
        return "unknown format";
    if (fmt == RVL_KVI_F32)
        return NULL;
    if (hd > RVL_KVQ_MAX_HEAD_DIM)
        return "head_dim above 1024";
    return rvl_kvq_check(fmt, kind, (int)hd);
}

__attribute__((format(printf, 2, 3))) static void problem(rvl_kv_inspect *f, const char *fmt, ...)
{
    if (f->n_problems >= MAX_PROBLEMS) {
        f->dropped_problems++;
        return;
    }
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (f->n_problems == f->cap_problems) {
        size_t nc = f->cap_problems ? 2 * f->cap_problems : 16;
        char **np = realloc(f->problems, nc * sizeof *np);
        if (!np) {
            f->dropped_problems++;
            return;
        }
        f->problems = np;
        f->cap_problems = nc;
    }
    char *s = strdup(buf);
    if (!s) {
        f->dropped_problems++;
        return;
    }
    f->problems[f->n_problems++] = s;
}

/* "the kv block at offset 123 (layer 3, page 0)" */
static void block_name(const rvl_kv_inspect_blockinfo *bl, char *buf, size_t cap)
{
    switch (bl->kind) {
    case RVL_KVI_BLK_TOKENS:
        snprintf(buf, cap, "the tokens block at offset %llu", (unsigned long long)bl->offset);
        break;
    case RVL_KVI_BLK_EXTRA:
        snprintf(buf, cap, "the extra block at offset %llu", (unsigned long long)bl->offset);
        break;
    case RVL_KVI_BLK_CENTER:
        snprintf(buf, cap, "the center block at offset %llu", (unsigned long long)bl->offset);
        break;
    case RVL_KVI_BLK_MODEL:
        snprintf(buf, cap, "the model block at offset %llu", (unsigned long long)bl->offset);
        break;
    case RVL_KVI_BLK_KV:
        snprintf(buf, cap, "the kv block at offset %llu (layer %u, page %u)",
                 (unsigned long long)bl->offset, bl->layer, bl->page);
        break;
    default:
        snprintf(buf, cap, "the block at offset %llu (kind %u)", (unsigned long long)bl->offset,
                 bl->kind);
    }
}

/* Decompress block bl into f->raw; 0 or RVL_EFORMAT/RVL_ENOMEM. */
static int inflate(rvl_kv_inspect *f, const rvl_kv_inspect_blockinfo *bl)
{
    size_t raw = bl->raw_bytes;
    if (raw > MAX_RAW)
        return RVL_EFORMAT;
    if (raw + 1 > f->raw_cap) {
        void *nb = realloc(f->raw, raw + 1);
        if (!nb)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        f->raw = nb;
        f->raw_cap = raw + 1;
    }
    const unsigned char *data = f->b + bl->offset + f->info.block_header_bytes;
    size_t got = ZSTD_decompress(f->raw, raw, data, bl->stored_bytes);
    if (ZSTD_isError(got) || got != raw)
        return RVL_EFORMAT;
    return 0;
}

/* ====================================================================
 * Header
 * ==================================================================== */

static bool valid_fmt(uint32_t v)
{
    return v < RVL_KVI_NFMT;
}

/* Reads the header fields and decides whether the geometry is usable. */
static void read_header(rvl_kv_inspect *f)
{
    rvl_kv_inspect_info *in = &f->info;
    const unsigned char *b = f->b;
    in->fingerprint = rvl_session_get64(b + RVL_SESS_H_FINGERPRINT);
    in->n_layer = rvl_session_get32(b + RVL_SESS_H_N_LAYER);
    in->hot = UINT32_MAX;
    in->warm = UINT32_MAX;
    bool ok = true;
    if (in->version == 1) {
        in->kv_dim = rvl_session_get32(b + RVL_SESS_V1_KV_DIM);
        uint32_t tk = rvl_session_get32(b + RVL_SESS_V1_TYPE_K), tv = rvl_session_get32(b + RVL_SESS_V1_TYPE_V);
        in->page_size = rvl_session_get32(b + RVL_SESS_V1_PAGE);
        in->n_tokens = rvl_session_get32(b + RVL_SESS_V1_N_TOKENS);
        /* v1 element types are rvl_kv_type: 0 f16, 1 f32 */
        int kf = tk == 0 ? RVL_KVI_F16 : tk == 1 ? RVL_KVI_F32 : -1;
        int vf = tv == 0 ? RVL_KVI_F16 : tv == 1 ? RVL_KVI_F32 : -1;
        for (int t = 0; t < 3; t++) {
            in->k_fmt[t] = kf;
            in->v_fmt[t] = vf;
        }
        if (kf < 0 || vf < 0) {
            problem(f, "header: element types %u/%u at offset 32 are not f16 (0) or f32 (1)", tk, tv);
            ok = false;
        }
    } else {
        in->n_head_kv = rvl_session_get32(b + RVL_SESS_H_N_HEAD_KV);
        in->head_dim = rvl_session_get32(b + RVL_SESS_H_HEAD_DIM);
        in->page_size = rvl_session_get32(b + RVL_SESS_H_PAGE);
        in->n_tokens = rvl_session_get32(b + RVL_SESS_H_N_TOKENS);
        for (int t = 0; t < RVL_SESS_TIERS; t++) {
            uint32_t k = rvl_session_get32(b + RVL_SESS_H_FMT_K + 4 * t),
                     v = rvl_session_get32(b + RVL_SESS_H_FMT_V + 4 * t);
            in->k_fmt[t] = valid_fmt(k) ? (int)k : -1;
            in->v_fmt[t] = valid_fmt(v) ? (int)v : -1;
            if (!valid_fmt(k) || !valid_fmt(v)) {
                problem(f, "header: tier %d formats %u/%u at offset %d are not known formats", t,
                        k, v, RVL_SESS_H_FMT_K + 4 * t);
                ok = false;
            }
        }
        in->hot = rvl_session_get32(b + RVL_SESS_H_HOT);
        in->warm = rvl_session_get32(b + RVL_SESS_H_WARM);
        uint64_t kd = (uint64_t)in->n_head_kv * in->head_dim;
        if (in->n_head_kv == 0 || in->head_dim == 0 || kd > MAX_KV_DIM) {
            problem(f, "header: %u kv heads of %u at offset 28 are not a usable geometry",
                    in->n_head_kv, in->head_dim);
            ok = false;
        } else {
            in->kv_dim = (uint32_t)kd;
            for (int t = 0; t < 3 && ok; t++) {
                const char *why = fmt_check(in->k_fmt[t], RVL_KVQ_KEY, in->head_dim);
                if (!why)
                    why = fmt_check(in->v_fmt[t], RVL_KVQ_VALUE, in->head_dim);
                if (why) {
                    problem(f, "header: tier %d formats %s/%s: %s", t,
                            rvl_kv_inspect_fmt_name(in->k_fmt[t]), rvl_kv_inspect_fmt_name(in->v_fmt[t]), why);
                    ok = false;
                }
            }
            if (ok && ((in->k_fmt[0] != RVL_KVI_F16 && in->k_fmt[0] != RVL_KVI_F32) ||
                       (in->v_fmt[0] != RVL_KVI_F16 && in->v_fmt[0] != RVL_KVI_F32)))
                problem(f, "header: tier 0 formats %s/%s are not full precision (f16 or f32)",
                        rvl_kv_inspect_fmt_name(in->k_fmt[0]), rvl_kv_inspect_fmt_name(in->v_fmt[0]));
        }
        const uint32_t flags = rvl_session_get32(b + RVL_SESS_H_FLAGS);
        if (flags & ~(in->version == 2 ? 0u : RVL_SESS_F_CENTER | RVL_SESS_F_MODEL))
            problem(f, "header: " RVL_SESS_E_FLAGS, flags);
        in->key_centre = in->version >= 3 && (flags & RVL_SESS_F_CENTER);
        in->has_model = in->version >= 3 && (flags & RVL_SESS_F_MODEL);
    }
    if (in->kv_dim == 0 || in->kv_dim > MAX_KV_DIM) {
        if (in->version == 1)
            problem(f, "header: kv_dim %u at offset 28 is out of range (1 .. %u)", in->kv_dim,
                    MAX_KV_DIM);
        ok = false;
    }
    if (in->n_layer == 0 || in->n_layer > MAX_LAYERS) {
        problem(f, "header: %u layers at offset 24 is out of range (1 .. %u)", in->n_layer,
                MAX_LAYERS);
        ok = false;
    }
    if (in->page_size != RVL_SESS_PAGE) {
        problem(f, "header: page size %u is not %u", in->page_size, RVL_SESS_PAGE);
        ok = false;
    }
    in->geometry_ok = ok;
    f->n_pages = (uint32_t)(((uint64_t)in->n_tokens + RVL_SESS_PAGE - 1) / RVL_SESS_PAGE);
    in->n_blocks_expected = 2 + in->key_centre + in->has_model + (uint64_t)in->n_layer * f->n_pages;
}

/* ====================================================================
 * The block walk
 * ==================================================================== */

static int push_block(rvl_kv_inspect *f, const rvl_kv_inspect_blockinfo *bl)
{
    if (f->n_blocks == f->cap_blocks) {
        size_t nc = f->cap_blocks ? 2 * f->cap_blocks : 64;
        rvl_kv_inspect_blockinfo *nb = realloc(f->blocks, nc * sizeof *nb);
        if (!nb)
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        f->blocks = nb;
        f->cap_blocks = nc;
    }
    f->blocks[f->n_blocks++] = *bl;
    return 0;
}

/* What block number i should be: kind, layer, page. */
static void expected(const rvl_kv_inspect *f, uint64_t i, uint32_t *kind, uint32_t *layer, uint32_t *page)
{
    *layer = *page = 0;
    if (f->info.has_model && i == 0) {
        *kind = RVL_KVI_BLK_MODEL;
        return;
    }
    i -= f->info.has_model;
    if (i == 0) {
        *kind = RVL_KVI_BLK_TOKENS;
    } else if (i == 1) {
        *kind = RVL_KVI_BLK_EXTRA;
    } else if (i == 2 && f->info.key_centre) {
        *kind = RVL_KVI_BLK_CENTER;
    } else if (f->n_pages && i - 2 - f->info.key_centre < (uint64_t)f->info.n_layer * f->n_pages) {
        i -= 2 + f->info.key_centre;
        *kind = RVL_KVI_BLK_KV;
        *layer = (uint32_t)(i / f->n_pages);
        *page = (uint32_t)(i % f->n_pages);
    } else {
        *kind = 0;   /* nothing more expected */
    }
}

/* The size and format checks of a kv block (v1: implied by the header;
 * v2: the block's own formats, which must be its tier's). Returns false
 * with a problem recorded. */
static bool check_kv(rvl_kv_inspect *f, rvl_kv_inspect_blockinfo *bl, const unsigned char *h, const char *name)
{
    const rvl_kv_inspect_info *in = &f->info;
    uint32_t want_pos = bl->page + 1 < f->n_pages || in->n_tokens % RVL_SESS_PAGE == 0
                            ? RVL_SESS_PAGE : in->n_tokens % RVL_SESS_PAGE;
    if (in->version == 1) {
        bl->tier = 0;
        bl->k_fmt = in->k_fmt[0];
        bl->v_fmt = in->v_fmt[0];
        bl->n_pos = want_pos;
        if (!in->geometry_ok)
            return false;
        uint64_t per = (uint64_t)want_pos * in->kv_dim;
        bl->k_bytes = per * (bl->k_fmt == RVL_KVI_F32 ? 4 : 2);
        bl->v_bytes = per * (bl->v_fmt == RVL_KVI_F32 ? 4 : 2);
        bl->f16_bytes = per * 2 * 2;
    } else {
        const unsigned char *info = h + RVL_SESS_B_INFO;
        bl->k_fmt = info[0];
        bl->v_fmt = info[1];
        bl->tier = info[2];
        bl->n_pos = info[3];
        if (!in->geometry_ok)
            return false;
        if (bl->n_pos != want_pos) {
            problem(f, "%s: %u positions used, expected %u", name, bl->n_pos, want_pos);
            return false;
        }
        if (bl->tier > 2) {
            problem(f, "%s: tier %u is not 0, 1 or 2", name, bl->tier);
            return false;
        }
        if (bl->k_fmt != in->k_fmt[bl->tier] || bl->v_fmt != in->v_fmt[bl->tier]) {
            problem(f, "%s: formats %s/%s are not tier %u's %s/%s from the header", name,
                    rvl_kv_inspect_fmt_name(bl->k_fmt), rvl_kv_inspect_fmt_name(bl->v_fmt), bl->tier,
                    rvl_kv_inspect_fmt_name(in->k_fmt[bl->tier]), rvl_kv_inspect_fmt_name(in->v_fmt[bl->tier]));
            return false;
        }
        if (bl->n_pos < RVL_SESS_PAGE && bl->tier != 0) {
            problem(f, "%s: a partial page in tier %u (the page being filled is tier 0)", name,
                    bl->tier);
            return false;
        }
        bl->k_bytes = page_bytes(bl->k_fmt, RVL_KVQ_KEY, in->head_dim) * in->n_head_kv;
        bl->v_bytes = page_bytes(bl->v_fmt, RVL_KVQ_VALUE, in->head_dim) * in->n_head_kv;
        bl->f16_bytes = (uint64_t)RVL_SESS_PAGE * in->kv_dim * 2 * 2;
    }
    if (bl->raw_bytes != bl->k_bytes + bl->v_bytes) {
        problem(f, "%s: holds %u raw bytes, expected %llu", name, bl->raw_bytes,
                (unsigned long long)(bl->k_bytes + bl->v_bytes));
        return false;
    }
    return true;
}

/* The per-page tables (f->index, and *tiers: layer 0's tier of each page
 * for the version 2 rules), only when the file can hold the blocks the
 * header promises; *tiers stays NULL otherwise. */
static int page_tables(rvl_kv_inspect *f, uint8_t **tiers)
{
    const rvl_kv_inspect_info *in = &f->info;
    const size_t hb = in->block_header_bytes;
    const uint64_t n_kv = in->n_blocks_expected - 2 - in->key_centre - in->has_model;
    *tiers = NULL;
    if (in->geometry_ok && n_kv && n_kv <= f->size / hb) {
        f->index = malloc(n_kv * sizeof *f->index);
        *tiers = calloc(f->n_pages, 1);
        if (!f->index || !*tiers) {
            free(*tiers);
            *tiers = NULL;
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        }
        for (uint64_t i = 0; i < n_kv; i++)
            f->index[i] = -1;
    } else if (n_kv > f->size / hb) {
        problem(f, "header: %u layers of %u pages need %llu blocks, more than the %zu-byte file "
                "can hold", in->n_layer, f->n_pages, (unsigned long long)in->n_blocks_expected,
                f->size);
    }
    return 0;
}

/* The fields of the block header at h (version 1 lacks the info bytes: in
 * both versions the sizes and the hash end the header). */
static void read_block_header(const rvl_kv_inspect *f, const unsigned char *h,
                              rvl_kv_inspect_blockinfo *bl)
{
    const size_t hb = f->info.block_header_bytes;
    bl->kind = rvl_session_get32(h + RVL_SESS_B_KIND);
    bl->layer = rvl_session_get32(h + RVL_SESS_B_LAYER);
    bl->page = rvl_session_get32(h + RVL_SESS_B_PAGE);
    bl->raw_bytes = rvl_session_get32(h + hb - (RVL_SESS_BLK - RVL_SESS_B_RAW));
    bl->stored_bytes = rvl_session_get32(h + hb - (RVL_SESS_BLK - RVL_SESS_B_STORED));
    bl->hash_stored = rvl_session_get64(h + hb - (RVL_SESS_BLK - RVL_SESS_B_HASH));
}

/* Whether block number i is the one the layout puts there; false with
 * the block marked misplaced and a problem recorded. */
static bool check_place(rvl_kv_inspect *f, uint64_t i, rvl_kv_inspect_blockinfo *bl, const char *name)
{
    uint32_t ek, el, ep;
    expected(f, i, &ek, &el, &ep);
    if (bl->kind == ek && bl->layer == el && bl->page == ep)
        return true;
    bl->status = RVL_KVI_MISPLACED;
    if (ek == 0)
        problem(f, "%s: unexpected: the header's %llu blocks are already complete", name,
                (unsigned long long)f->info.n_blocks_expected);
    else
        problem(f, "%s: misplaced: the layout puts the %s block%s here", name,
                ek == RVL_KVI_BLK_TOKENS ? "tokens" : ek == RVL_KVI_BLK_EXTRA ? "extra"
                : ek == RVL_KVI_BLK_CENTER ? "center" : ek == RVL_KVI_BLK_MODEL ? "model" : "kv",
                ek == RVL_KVI_BLK_KV ? " of another layer or page" : "");
    return false;
}

/* Whether a placed block's raw size (and a kv block's formats) are what
 * the header implies, and its zstd frame could plausibly expand to it;
 * false with the block marked bad and a problem recorded. h: its header. */
static bool check_size(rvl_kv_inspect *f, rvl_kv_inspect_blockinfo *bl, const unsigned char *h,
                       const char *name)
{
    const rvl_kv_inspect_info *in = &f->info;
    bool sized = true;
    if (bl->kind == RVL_KVI_BLK_TOKENS && (uint64_t)bl->raw_bytes != (uint64_t)in->n_tokens * 4) {
        problem(f, "%s: holds %u bytes, expected %llu (%u tokens)", name, bl->raw_bytes,
                (unsigned long long)in->n_tokens * 4, in->n_tokens);
        sized = false;
    } else if (bl->kind == RVL_KVI_BLK_EXTRA && bl->raw_bytes > MAX_RAW) {
        problem(f, "%s: %u bytes of JSON, more than 64 MiB", name, bl->raw_bytes);
        sized = false;
    } else if (bl->kind == RVL_KVI_BLK_MODEL && bl->raw_bytes > RVL_SESS_MAX_MODEL) {
        problem(f, "%s: %u bytes of JSON, more than 64 KiB", name, bl->raw_bytes);
        sized = false;
    } else if (bl->kind == RVL_KVI_BLK_CENTER &&
               (!in->geometry_ok ||
                (uint64_t)bl->raw_bytes != (uint64_t)in->n_layer * in->kv_dim * 4)) {
        problem(f, "%s: holds %u bytes, expected %llu (%u layers of %u floats)", name,
                bl->raw_bytes, (unsigned long long)in->n_layer * in->kv_dim * 4, in->n_layer,
                in->kv_dim);
        sized = false;
    } else if (bl->kind == RVL_KVI_BLK_KV) {
        sized = check_kv(f, bl, h, name);
    }
    /* zstd can expand a few bytes into megabytes; real pages (even a
     * mostly empty partial page) never compress this well */
    if (sized && (uint64_t)bl->raw_bytes > (uint64_t)bl->stored_bytes * MAX_EXPAND + 65536) {
        problem(f, "%s: %u stored bytes claim %u raw bytes, more than any page compresses to",
                name, bl->stored_bytes, bl->raw_bytes);
        sized = false;
    }
    if (!sized)
        bl->status = RVL_KVI_BAD_DATA;
    return sized;
}

/* The token ids, from the tokens block in f->raw. */
static int keep_tokens(rvl_kv_inspect *f)
{
    const uint32_t n = f->info.n_tokens;
    f->tokens = malloc(((size_t)n + 1) * sizeof *f->tokens);
    if (!f->tokens)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    for (uint32_t t = 0; t < n; t++)
        f->tokens[t] = (int32_t)rvl_session_get32((const unsigned char *)f->raw + 4 * (size_t)t);
    return 0;
}

/* The model's name and path, from the model block bl in f->raw (JSON:
 * {"name", "path"}); a block that does not say them is a problem. */
static int keep_model(rvl_kv_inspect *f, const rvl_kv_inspect_blockinfo *bl, const char *name)
{
    char *text = malloc((size_t)bl->raw_bytes + 1);
    if (!text)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    memcpy(text, f->raw, bl->raw_bytes);
    text[bl->raw_bytes] = 0;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "path");
    if (!cJSON_IsObject(j))
        problem(f, "%s: not a JSON object", name);
    if (cJSON_IsString(n) && n->valuestring[0] && !(f->model_name = strdup(n->valuestring)))
        goto oom;
    if (cJSON_IsString(p) && p->valuestring[0] && !(f->model_path = strdup(p->valuestring)))
        goto oom;
    cJSON_Delete(j);
    return 0;
oom:
    cJSON_Delete(j);
    return rvl_seterr(RVL_ENOMEM, "out of memory");
}

/* The JSON text, from the extra block bl in f->raw. */
static int keep_extra(rvl_kv_inspect *f, const rvl_kv_inspect_blockinfo *bl)
{
    f->extra = malloc((size_t)bl->raw_bytes + 1);
    if (!f->extra)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    memcpy(f->extra, f->raw, bl->raw_bytes);
    f->extra[bl->raw_bytes] = 0;
    f->info.extra_len = bl->raw_bytes;
    return 0;
}

/* The key centre, from the center block bl in f->raw; a non-finite
 * element marks the block bad and leaves no centre. */
static int keep_centre(rvl_kv_inspect *f, rvl_kv_inspect_blockinfo *bl, const char *name)
{
    const size_t nm = (size_t)f->info.n_layer * f->info.kv_dim;
    f->centre = malloc(nm * sizeof *f->centre);
    if (!f->centre)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    for (size_t c = 0; c < nm && f->centre; c++) {
        f->centre[c] = rvl_bits_f32(rvl_session_get32((const unsigned char *)f->raw + 4 * c));
        if (!isfinite(f->centre[c])) {
            bl->status = RVL_KVI_BAD_DATA;
            problem(f, "%s: element %zu is not finite", name, c);
            free(f->centre);
            f->centre = NULL;
        }
    }
    f->info.centre = f->centre;
    return 0;
}

/* The version 2 tier rules: every layer's page p in the same tier; a
 * newer page never colder than an older one, but for page 0 in tier 0
 * (the attention sink of a quantized cache, kvcache.h). tiers: layer 0's
 * tier of each page, filled as layer 0 goes by. */
static void check_tier(rvl_kv_inspect *f, const rvl_kv_inspect_blockinfo *bl, uint8_t *tiers,
                       const char *name)
{
    if (bl->layer == 0) {
        tiers[bl->page] = (uint8_t)bl->tier;
        if (bl->page > 0 && bl->tier > tiers[bl->page - 1] && !(bl->page == 1 && tiers[0] == 0))
            problem(f, "%s: tier %u is colder than the older page %u's tier %u", name, bl->tier,
                    bl->page - 1, tiers[bl->page - 1]);
    } else if (bl->tier != tiers[bl->page]) {
        problem(f, "%s: tier %u, but layer 0's page %u is tier %u", name, bl->tier, bl->page,
                tiers[bl->page]);
    }
}

/* A placed, well-sized block with a good checksum: its zstd frame checked
 * by decompressing it, then the first tokens, extra and center blocks
 * kept, a kv block's tier checked (tiers: page_tables). 0, or RVL_ENOMEM. */
static int read_block(rvl_kv_inspect *f, rvl_kv_inspect_blockinfo *bl, uint8_t *tiers,
                      const char *name)
{
    int rc = inflate(f, bl);
    if (rc == RVL_ENOMEM)
        return rc;
    if (rc < 0) {
        bl->status = RVL_KVI_BAD_DATA;
        problem(f, "%s: the zstd frame does not decompress to its %u bytes", name, bl->raw_bytes);
        return 0;
    }
    switch (bl->kind) {
    case RVL_KVI_BLK_TOKENS:
        return f->tokens ? 0 : keep_tokens(f);
    case RVL_KVI_BLK_EXTRA:
        return f->extra ? 0 : keep_extra(f, bl);
    case RVL_KVI_BLK_CENTER:
        return f->centre ? 0 : keep_centre(f, bl, name);
    case RVL_KVI_BLK_MODEL:
        return f->model_name || f->model_path ? 0 : keep_model(f, bl, name);
    case RVL_KVI_BLK_KV:
        if (f->info.version >= 2 && tiers)
            check_tier(f, bl, tiers, name);
        return 0;
    }
    return 0;
}

/* What the header promises and the walk did not find. */
static void report_missing(rvl_kv_inspect *f)
{
    const rvl_kv_inspect_info *in = &f->info;
    if (f->n_blocks >= in->n_blocks_expected)
        return;
    uint32_t ek, el, ep;
    expected(f, f->n_blocks, &ek, &el, &ep);
    if (ek == RVL_KVI_BLK_KV)
        problem(f, "missing: %llu of the %llu blocks the header promises, from layer %u page %u on",
                (unsigned long long)(in->n_blocks_expected - f->n_blocks),
                (unsigned long long)in->n_blocks_expected, el, ep);
    else
        problem(f, "missing: %llu of the %llu blocks the header promises, from the %s block on",
                (unsigned long long)(in->n_blocks_expected - f->n_blocks),
                (unsigned long long)in->n_blocks_expected,
                ek == RVL_KVI_BLK_TOKENS ? "tokens" : ek == RVL_KVI_BLK_MODEL ? "model" : "extra");
}

/* Every block from the header to the file checksum, each recorded with
 * its status (f->blocks) and its problems: a block header that does not
 * fit or names an unknown kind ends the walk, as does a block running
 * past the end; a misplaced or corrupted block is recorded and skipped. */
static int walk(rvl_kv_inspect *f)
{
    const size_t hb = f->info.block_header_bytes, end = f->size - 8;
    size_t off = f->info.header_bytes;
    uint8_t *tiers;
    int rc = page_tables(f, &tiers);
    if (rc < 0)
        return rc;

    for (uint64_t i = 0; off < end; i++) {
        rvl_kv_inspect_blockinfo bl = {.offset = off};
        char name[160];
        if (end - off < hb) {
            problem(f, "truncated: %zu bytes at offset %zu are too few for a block header", end - off,
                    off);
            break;
        }
        const unsigned char *h = f->b + off;
        read_block_header(f, h, &bl);
        block_name(&bl, name, sizeof name);
        if (bl.kind < RVL_KVI_BLK_TOKENS || bl.kind > RVL_KVI_BLK_MODEL) {
            problem(f, "%s: unknown block kind %u: the rest of the file (%zu bytes) is not read",
                    name, bl.kind, end - off);
            break;
        }
        if (bl.stored_bytes > end - off - hb) {
            bl.status = RVL_KVI_TRUNCATED;
            problem(f, "%s: truncated: its %u stored bytes run %llu bytes past the end of the "
                    "data (offset %zu)", name, bl.stored_bytes,
                    (unsigned long long)(bl.stored_bytes - (end - off - hb)), end);
            rc = push_block(f, &bl);
            break;
        }
        off += hb + bl.stored_bytes;
        bl.hash_computed = XXH3_64bits(h + hb, bl.stored_bytes);

        const bool placed = check_place(f, i, &bl, name);
        if (bl.hash_computed != bl.hash_stored) {
            bl.status = RVL_KVI_BAD_CHECKSUM;
            problem(f, "%s: checksum mismatch (stored %016llx, computed %016llx)", name,
                    (unsigned long long)bl.hash_stored, (unsigned long long)bl.hash_computed);
        } else if (placed && check_size(f, &bl, h, name)) {
            if ((rc = read_block(f, &bl, tiers, name)) < 0)
                break;
            if (bl.status == RVL_KVI_OK && bl.kind == RVL_KVI_BLK_KV && f->index)
                f->index[(uint64_t)bl.layer * f->n_pages + bl.page] = (long)f->n_blocks;
        }
        if ((rc = push_block(f, &bl)) < 0)
            break;
    }
    free(tiers);
    if (rc < 0)
        return rc;
    report_missing(f);
    return 0;
}

/* ====================================================================
 * Open / close / accessors
 * ==================================================================== */

static int open_buf(rvl_kv_inspect *f)
{
    rvl_kv_inspect_info *in = &f->info;
    const unsigned char *b = f->b;
    in->path = f->path;
    in->file_size = f->size;
    const bool magic = f->size >= RVL_SESS_MAGIC_BYTES &&
                       memcmp(b, RVL_SESS_MAGIC, RVL_SESS_MAGIC_BYTES) == 0;
    if (f->size < 16 || !magic) {
        if (magic)
            return rvl_seterr(RVL_EFORMAT, "%s: " RVL_SESS_E_SHORT, f->path, f->size);
        return rvl_seterr(RVL_EFORMAT, "%s: " RVL_SESS_E_MAGIC, f->path);
    }
    const uint32_t bom = rvl_session_get32(b + RVL_SESS_H_BOM);
    if (bom != RVL_SESS_BOM)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: " RVL_SESS_E_BOM, f->path, bom);
    in->version = rvl_session_get32(b + RVL_SESS_H_VERSION);
    if (in->version < 1 || in->version > 3)
        return rvl_seterr(RVL_EUNSUPPORTED, "%s: session version %u at offset 8 is not one this "
                          "inspector knows (1, 2, 3)%s", f->path, in->version,
                          in->version == 5 ? ": version 5 holds MLA's latent cache (key pages "
                                             "that are also the values)" : "");
    in->header_bytes = in->version == 1 ? RVL_SESS_V1_HDR : RVL_SESS_HDR;
    in->block_header_bytes = in->version == 1 ? RVL_SESS_V1_BLK : RVL_SESS_BLK;
    if (f->size < (size_t)in->header_bytes + 8)
        return rvl_seterr(RVL_EFORMAT, "%s: truncated: %zu bytes, shorter than a version %u header "
                          "(%u bytes) and the file checksum", f->path, f->size, in->version,
                          in->header_bytes);
    const uint32_t hh = in->version == 1 ? RVL_SESS_V1_HASH : RVL_SESS_H_HASH;
    in->header_hash_stored = rvl_session_get64(b + hh);
    in->header_hash_computed = XXH3_64bits(b, hh);
    in->header_ok = in->header_hash_stored == in->header_hash_computed;
    if (!in->header_ok)
        problem(f, "header: checksum mismatch at offset %u (stored %016llx, computed %016llx): "
                "its fields may be wrong", hh, (unsigned long long)in->header_hash_stored,
                (unsigned long long)in->header_hash_computed);
    in->file_hash_stored = rvl_session_get64(b + f->size - 8);
    in->file_hash_computed = XXH3_64bits(b, f->size - 8);
    in->file_ok = in->file_hash_stored == in->file_hash_computed;
    read_header(f);
    int rc = walk(f);
    if (rc < 0)
        return rc;
    if (!in->file_ok)
        problem(f, "file checksum mismatch at offset %zu (stored %016llx, computed %016llx): the "
                "file is truncated or corrupted", f->size - 8,
                (unsigned long long)in->file_hash_stored, (unsigned long long)in->file_hash_computed);
    if (f->dropped_problems)
        problem(f, "%zu more problems not listed", f->dropped_problems);
    in->tokens = f->tokens;
    in->extra = f->extra;
    in->model_name = f->model_name;
    in->model_path = f->model_path;
    return 0;
}

static int kvi_new(rvl_kv_inspect **out, const char *path)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    (*out)->path = strdup(path ? path : "(buffer)");
    if (!(*out)->path) {
        free(*out);
        *out = NULL;
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    return 0;
}

int rvl_kv_inspect_open_mem(rvl_kv_inspect **out, const char *path, const void *buf, size_t size)
{
    rvl_kv_inspect *f;
    int rc = kvi_new(&f, path);
    *out = NULL;
    if (rc < 0)
        return rc;
    f->b = buf;
    f->size = size;
    if ((rc = open_buf(f)) < 0) {
        rvl_kv_inspect_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int rvl_kv_inspect_open(rvl_kv_inspect **out, const char *path)
{
    rvl_kv_inspect *f;
    int rc = kvi_new(&f, path);
    *out = NULL;
    if (rc < 0)
        return rc;
    if ((rc = rvl_map_file(&f->map, path)) < 0) {
        rvl_kv_inspect_close(f);
        return rc;
    }
    f->b = f->map.base;
    f->size = f->map.size;
    if ((rc = open_buf(f)) < 0) {
        rvl_kv_inspect_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

void rvl_kv_inspect_close(rvl_kv_inspect *f)
{
    if (!f)
        return;
    if (f->map.base)
        rvl_map_unmap(&f->map);
    for (size_t i = 0; i < f->n_problems; i++)
        free(f->problems[i]);
    free(f->problems);
    free(f->blocks);
    free(f->index);
    free(f->tokens);
    free(f->extra);
    free(f->model_name);
    free(f->model_path);
    free(f->centre);
    free(f->raw);
    free(f->path);
    free(f);
}

const rvl_kv_inspect_info *rvl_kv_inspect_info_get(const rvl_kv_inspect *f)
{
    return &f->info;
}

size_t rvl_kv_inspect_n_blocks(const rvl_kv_inspect *f)
{
    return f->n_blocks;
}

const rvl_kv_inspect_blockinfo *rvl_kv_inspect_block(const rvl_kv_inspect *f, size_t i)
{
    return i < f->n_blocks ? &f->blocks[i] : NULL;
}

size_t rvl_kv_inspect_n_problems(const rvl_kv_inspect *f)
{
    return f->n_problems;
}

const char *rvl_kv_inspect_problem(const rvl_kv_inspect *f, size_t i)
{
    return i < f->n_problems ? f->problems[i] : NULL;
}

bool rvl_kv_inspect_intact(const rvl_kv_inspect *f)
{
    return f->n_problems == 0 && f->info.header_ok && f->info.file_ok;
}

long rvl_kv_inspect_find_page(const rvl_kv_inspect *f, uint32_t layer, uint32_t page)
{
    if (f->index) {
        if (layer >= f->info.n_layer || page >= f->n_pages)
            return -1;
        return f->index[(uint64_t)layer * f->n_pages + page];
    }
    for (size_t i = 0; i < f->n_blocks; i++)
        if (f->blocks[i].kind == RVL_KVI_BLK_KV && f->blocks[i].layer == layer &&
            f->blocks[i].page == page && f->blocks[i].status == RVL_KVI_OK)
            return (long)i;
    return -1;
}

/* ====================================================================
 * Page data
 * ==================================================================== */

/* One part (keys or values) of a raw kv block into rows of kv_dim floats. */
static void decode_part(const rvl_kv_inspect *f, const unsigned char *src, int fmt, int kind, uint32_t np,
                        float *dst)
{
    const rvl_kv_inspect_info *in = &f->info;
    const size_t kd = in->kv_dim;
    if (in->version == 1) {   /* rows of kv_dim elements, np of them */
        for (size_t i = 0; i < np * kd; i++) {
            if (fmt == RVL_KVI_F32) {
                uint32_t u = rvl_session_get32(src + 4 * i);
                dst[i] = rvl_bits_f32(u);
            } else {
                dst[i] = rvl_f16_to_f32((rvl_f16)(src[2 * i] | src[2 * i + 1] << 8));
            }
        }
        return;
    }
    const uint32_t hd = in->head_dim;
    const uint64_t pb = page_bytes(fmt, kind, hd);
    for (uint32_t h = 0; h < in->n_head_kv; h++) {
        const unsigned char *pg = src + h * pb;
        if (fmt == RVL_KVI_F32) {
            for (uint32_t t = 0; t < np; t++)
                for (uint32_t c = 0; c < hd; c++)
                    dst[t * kd + h * hd + c] = rvl_bits_f32(rvl_session_get32(pg + 4 * ((size_t)t * hd + c)));
        } else {
            rvl_kvq_decode_page(fmt, kind, (int)hd, pg, (int)np, dst + (size_t)h * hd, kd);
        }
    }
}

int rvl_kv_inspect_page(rvl_kv_inspect *f, size_t i, float *k, float *v, uint32_t *n_pos)
{
    *n_pos = 0;
    if (i >= f->n_blocks || f->blocks[i].kind != RVL_KVI_BLK_KV)
        return rvl_seterr(RVL_EINVAL, "%s: block %zu is not a kv block", f->path, i);
    const rvl_kv_inspect_blockinfo *bl = &f->blocks[i];
    char name[160];
    block_name(bl, name, sizeof name);
    if (bl->status != RVL_KVI_OK || !f->info.geometry_ok)
        return rvl_seterr(RVL_EFORMAT, "%s: %s is damaged", f->path, name);
    int rc = inflate(f, bl);
    if (rc < 0)
        return rc == RVL_ENOMEM ? rc : rvl_seterr(RVL_EFORMAT, "%s: %s does not decompress", f->path, name);
    const unsigned char *raw = f->raw;
    decode_part(f, raw, bl->k_fmt, RVL_KVQ_KEY, bl->n_pos, k);
    if (f->info.key_centre && !f->centre)
        return rvl_seterr(RVL_EFORMAT, "%s: %s: the keys are stored centred and the center "
                          "block is damaged", f->path, name);
    for (uint32_t t = 0; f->centre && t < bl->n_pos; t++)
        for (uint32_t c = 0; c < f->info.kv_dim; c++)
            k[(size_t)t * f->info.kv_dim + c] += f->centre[(size_t)bl->layer * f->info.kv_dim + c];
    decode_part(f, raw + bl->k_bytes, bl->v_fmt, RVL_KVQ_VALUE, bl->n_pos, v);
    *n_pos = bl->n_pos;
    return 0;
}

/* ====================================================================
 * Per-head statistics
 * ==================================================================== */

typedef struct {
    double s[5];      /* count, sum x, x^2, x^3, x^4 */
} moments;

static void mom_add(moments *m, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v = x[i], v2 = v * v;
        m->s[0] += 1;
        m->s[1] += v;
        m->s[2] += v2;
        m->s[3] += v2 * v;
        m->s[4] += v2 * v2;
    }
}

/* Pearson's kurtosis m4 / m2^2 from the power sums; NaN when undefined. */
static double mom_kurtosis(const moments *m)
{
    if (m->s[0] < 2)
        return NAN;
    double n = m->s[0], mu = m->s[1] / n, e2 = m->s[2] / n, e3 = m->s[3] / n, e4 = m->s[4] / n;
    double m2 = e2 - mu * mu;
    double m4 = e4 - 4 * mu * e3 + 6 * mu * mu * e2 - 3 * mu * mu * mu * mu;
    if (!(m2 > 0))
        return NAN;
    return m4 / (m2 * m2);
}

typedef struct {
    float *chan_absmax;           /* [hd] */
    moments raw, rot;
    double err[RVL_KVI_NFMT], ref;
} head_acc;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static bool pow2(uint32_t n)
{
    return n && !(n & (n - 1));
}

void rvl_kv_inspect_stats_free(rvl_kv_inspect_head *heads, size_t n)
{
    if (!heads)
        return;
    for (size_t i = 0; i < n; i++)
        free(heads[i].outliers);
    free(heads);
}

int rvl_kv_inspect_stats(rvl_kv_inspect *f, const rvl_kv_inspect_stats_params *p, rvl_kv_inspect_head **heads_out,
                  size_t *n_out)
{
    const rvl_kv_inspect_info *in = &f->info;
    *heads_out = NULL;
    *n_out = 0;
    if (!in->geometry_ok)
        return rvl_seterr(RVL_EFORMAT, "%s: the header's geometry is unusable", f->path);
    uint32_t nh = in->n_head_kv, hd = in->head_dim;
    if (in->version == 1) {
        if (!p || !p->n_head_kv || !p->head_dim)
            return rvl_seterr(RVL_EINVAL, "%s: version 1 files do not record the head size: give "
                              "the model", f->path);
        if ((uint64_t)p->n_head_kv * p->head_dim != in->kv_dim)
            return rvl_seterr(RVL_EINVAL, "%s: %u heads of %u do not make the file's kv_dim %u",
                              f->path, p->n_head_kv, p->head_dim, in->kv_dim);
        nh = p->n_head_kv;
        hd = p->head_dim;
    }
    const double factor = p && p->outlier_factor > 0 ? p->outlier_factor : 4.0;
    const size_t kd = in->kv_dim, n_heads = (size_t)in->n_layer * nh * 2;
    /* the accumulators must not outgrow the data: at most 64 MiB or the
     * raw bytes of the intact pages (a header can claim 65536 layers) */
    uint64_t raw_ok = 0, need = (uint64_t)n_heads * (sizeof(rvl_kv_inspect_head) + sizeof(head_acc) + 4 * hd);
    for (size_t i = 0; i < f->n_blocks; i++)
        if (f->blocks[i].kind == RVL_KVI_BLK_KV && f->blocks[i].status == RVL_KVI_OK)
            raw_ok += f->blocks[i].raw_bytes;
    if (need > ((uint64_t)64 << 20) && need > raw_ok)
        return rvl_seterr(RVL_EFORMAT, "%s: %u layers of %u heads claimed by the header, but the "
                          "file holds only %llu bytes of pages", f->path, in->n_layer, nh,
                          (unsigned long long)raw_ok);
    const bool rot_ok = pow2(hd) && hd <= RVL_KVQ_MAX_HEAD_DIM;
    int rc = 0;

    rvl_kv_inspect_head *heads = calloc(n_heads, sizeof *heads);
    head_acc *acc = calloc(n_heads, sizeof *acc);
    float *chan = calloc(n_heads * hd, sizeof *chan);
    float *kb = malloc(RVL_SESS_PAGE * kd * sizeof *kb), *vb = malloc(RVL_SESS_PAGE * kd * sizeof *vb);
    float *x = malloc(RVL_SESS_PAGE * (size_t)hd * sizeof *x), *y = malloc(RVL_SESS_PAGE * (size_t)hd * sizeof *y);
    void *enc = NULL;
    size_t enc_cap = 0;
    for (int fm = 0; fm < RVL_KVQ_COUNT; fm++)
        for (int kind = 0; kind < 2; kind++)
            if (!fmt_check(fm, kind, hd) && page_bytes(fm, kind, hd) > enc_cap)
                enc_cap = page_bytes(fm, kind, hd);
    enc = malloc(enc_cap ? enc_cap : 1);
    if (!heads || !acc || !chan || !kb || !vb || !x || !y || !enc) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n_heads; i++) {
        acc[i].chan_absmax = chan + i * hd;
        heads[i].layer = (uint32_t)(i / (2 * nh));
        heads[i].head = (uint32_t)(i / 2 % nh);
        heads[i].kind = (uint32_t)(i % 2);
    }

    for (size_t bi = 0; bi < f->n_blocks; bi++) {
        const rvl_kv_inspect_blockinfo *bl = &f->blocks[bi];
        uint32_t np;
        if (bl->kind != RVL_KVI_BLK_KV || bl->status != RVL_KVI_OK || bl->layer >= in->n_layer)
            continue;
        if ((rc = rvl_kv_inspect_page(f, bi, kb, vb, &np)) < 0) {
            if (rc == RVL_ENOMEM)
                goto out;
            rc = 0;
            continue;
        }
        for (int kind = 0; kind < 2; kind++) {
            const float *src = kind ? vb : kb;
            int pfmt = kind ? bl->v_fmt : bl->k_fmt;
            bool exact = pfmt == RVL_KVI_F16 || pfmt == RVL_KVI_F32;
            for (uint32_t h = 0; h < nh; h++) {
                size_t hi = ((size_t)bl->layer * nh + h) * 2 + (size_t)kind;
                head_acc *a = &acc[hi];
                rvl_kv_inspect_head *st = &heads[hi];
                for (uint32_t t = 0; t < np; t++)
                    memcpy(x + (size_t)t * hd, src + t * kd + (size_t)h * hd, hd * sizeof *x);
                st->n_pos += np;
                st->n_pos_fmt[pfmt] += np;
                for (uint32_t t = 0; t < np; t++)
                    for (uint32_t c = 0; c < hd; c++) {
                        float v = fabsf(x[(size_t)t * hd + c]);
                        if (v > a->chan_absmax[c])
                            a->chan_absmax[c] = v;
                    }
                mom_add(&a->raw, x, (size_t)np * hd);
                if (rot_ok) {
                    memcpy(y, x, (size_t)np * hd * sizeof *y);
                    for (uint32_t t = 0; t < np; t++)
                        rvl_kvq_rotate(y + (size_t)t * hd, (int)hd);
                    mom_add(&a->rot, y, (size_t)np * hd);
                }
                bool finite = true;
                for (size_t i = 0; i < (size_t)np * hd && finite; i++)
                    finite = isfinite(x[i]);
                if (!exact || !finite)   /* the encoders expect finite input */
                    continue;
                /* what each page format would do to these rows */
                st->n_pos_exact += np;
                for (size_t i = 0; i < (size_t)np * hd; i++)
                    a->ref += (double)x[i] * x[i];
                for (int fm = 0; fm < RVL_KVQ_COUNT; fm++) {
                    if (fmt_check(fm, kind, hd))
                        continue;
                    rvl_kvq_encode_page(fm, kind, (int)hd, x, hd, (int)np, enc);
                    rvl_kvq_decode_page(fm, kind, (int)hd, enc, (int)np, y, hd);
                    double e = 0;
                    for (size_t i = 0; i < (size_t)np * hd; i++) {
                        double d = (double)x[i] - y[i];
                        e += d * d;
                    }
                    a->err[fm] += e;
                }
            }
        }
        if (rvl_interrupted()) {
            rc = rvl_seterr(RVL_EINTR, "interrupted");
            goto out;
        }
    }

    for (size_t i = 0; i < n_heads; i++) {
        head_acc *a = &acc[i];
        rvl_kv_inspect_head *st = &heads[i];
        st->kurtosis = mom_kurtosis(&a->raw);
        st->kurtosis_rotated = rot_ok ? mom_kurtosis(&a->rot) : NAN;
        for (int fm = 0; fm < RVL_KVI_NFMT; fm++)
            st->rel_mse[fm] = NAN;
        if (st->n_pos_exact && a->ref > 0)
            for (int fm = 0; fm < RVL_KVQ_COUNT; fm++)
                if (!fmt_check(fm, (int)st->kind, hd))
                    st->rel_mse[fm] = a->err[fm] / a->ref;
        if (!st->n_pos)
            continue;
        for (uint32_t c = 0; c < hd; c++)
            if (a->chan_absmax[c] > st->absmax) {
                st->absmax = a->chan_absmax[c];
                st->absmax_channel = c;
            }
        memcpy(x, a->chan_absmax, hd * sizeof *x);
        qsort(x, hd, sizeof *x, cmp_float);
        st->median_channel_absmax = hd % 2 ? x[hd / 2] : 0.5f * (x[hd / 2 - 1] + x[hd / 2]);
        double lim = factor * st->median_channel_absmax;
        for (uint32_t c = 0; c < hd; c++)
            if (a->chan_absmax[c] > lim)
                st->n_outliers++;
        if (st->n_outliers) {
            st->outliers = malloc(st->n_outliers * sizeof *st->outliers);
            if (!st->outliers) {
                st->n_outliers = 0;
                rc = rvl_seterr(RVL_ENOMEM, "out of memory");
                goto out;
            }
            for (uint32_t c = 0, j = 0; c < hd; c++)
                if (a->chan_absmax[c] > lim)
                    st->outliers[j++] = c;
        }
    }
out:
    free(acc);
    free(chan);
    free(kb);
    free(vb);
    free(x);
    free(y);
    free(enc);
    if (rc < 0) {
        rvl_kv_inspect_stats_free(heads, n_heads);
        return rc;
    }
    *heads_out = heads;
    *n_out = n_heads;
    return 0;
}

/* ====================================================================
 * Diff
 * ==================================================================== */

void rvl_kv_inspect_diff_free(rvl_kv_inspect_diffres *d)
{
    if (!d)
        return;
    free(d->k_maxdiff);
    free(d->v_maxdiff);
    d->k_maxdiff = d->v_maxdiff = NULL;
}

int rvl_kv_inspect_diff(rvl_kv_inspect *a, rvl_kv_inspect *b, rvl_kv_inspect_diffres *d)
{
    const rvl_kv_inspect_info *ia = &a->info, *ib = &b->info;
    memset(d, 0, sizeof *d);
    d->n_tokens_a = ia->n_tokens;
    d->n_tokens_b = ib->n_tokens;
    d->same_model = ia->fingerprint == ib->fingerprint;
    d->first_diff = -1;
    if (!ia->tokens || !ib->tokens)
        return rvl_seterr(RVL_EFORMAT, "%s: the token ids are damaged", ia->tokens ? ib->path : ia->path);
    uint32_t n = ia->n_tokens < ib->n_tokens ? ia->n_tokens : ib->n_tokens, c = 0;
    while (c < n && ia->tokens[c] == ib->tokens[c])
        c++;
    d->common = c;
    if (c < ia->n_tokens || c < ib->n_tokens)
        d->first_diff = c;
    d->same_geometry = ia->geometry_ok && ib->geometry_ok && ia->n_layer == ib->n_layer &&
                       ia->kv_dim == ib->kv_dim;
    if (!d->same_geometry)
        return 0;
    const size_t kd = ia->kv_dim;
    int rc = 0;
    d->n_layer = ia->n_layer;
    d->k_maxdiff = calloc(d->n_layer, sizeof *d->k_maxdiff);
    d->v_maxdiff = calloc(d->n_layer, sizeof *d->v_maxdiff);
    float *ka = malloc(RVL_SESS_PAGE * kd * sizeof *ka), *va = malloc(RVL_SESS_PAGE * kd * sizeof *va);
    float *kb = malloc(RVL_SESS_PAGE * kd * sizeof *kb), *vb = malloc(RVL_SESS_PAGE * kd * sizeof *vb);
    if (!d->k_maxdiff || !d->v_maxdiff || !ka || !va || !kb || !vb) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }
    for (uint32_t l = 0; l < d->n_layer; l++) {
        float mk = 0, mv = 0;
        for (uint32_t p0 = 0, pg = 0; p0 < c; p0 += RVL_SESS_PAGE, pg++) {
            long ba = rvl_kv_inspect_find_page(a, l, pg), bb = rvl_kv_inspect_find_page(b, l, pg);
            uint32_t na, nb;
            if (ba < 0 || bb < 0 || rvl_kv_inspect_page(a, (size_t)ba, ka, va, &na) < 0 ||
                rvl_kv_inspect_page(b, (size_t)bb, kb, vb, &nb) < 0) {
                mk = mv = NAN;
                break;
            }
            uint32_t rows = c - p0 < RVL_SESS_PAGE ? c - p0 : RVL_SESS_PAGE;
            if (rows > na || rows > nb) {
                mk = mv = NAN;
                break;
            }
            for (size_t i = 0; i < rows * kd; i++) {
                float dk = fabsf(ka[i] - kb[i]), dv = fabsf(va[i] - vb[i]);
                if (isnan(dk) || dk > mk)
                    mk = dk;   /* a NaN stays: dk > NaN is false */
                if (isnan(dv) || dv > mv)
                    mv = dv;
            }
        }
        d->k_maxdiff[l] = mk;
        d->v_maxdiff[l] = mv;
    }
out:
    free(ka);
    free(va);
    free(kb);
    free(vb);
    if (rc < 0)
        rvl_kv_inspect_diff_free(d);
    return rc;
}
