/*
 * session_fmt.h - the session-file format, said once: its layout, the
 * constants that encode it, its limits and the error texts every reader
 * gives. Private to lib/: written and read by lib/engine/session.c
 * (rvl_session_save/load), read by lib/tools/kv_inspect.c (`ruvllm
 * kv-inspect`, which also knows version 1).
 *
 * Layout (little-endian; version 5). Version 1 files (the contiguous
 * f16/f32 cache) are refused by rvl_session_load: "session format version
 * 1 is no longer supported, re-create the file". Version 3 is version 4
 * where every layer's blocks start at page 0, and is what the writer puts
 * in the header when that holds (no sliding window freed a page), so
 * that older readers take the file; version 2 is version 3 without key
 * centering (offset 76 is 0). Both are still read. Version 5 is version
 * 4 with flag bit 1 (the values are the keys: MLA's latent cache) and is
 * written only for such a cache, so that a reader that does not know it
 * refuses the file by its version; versions 3 and 4 never have the bit.
 * Flag bit 2 (versions 3 to 5) says a MODEL block comes first, before the
 * TOKENS block: the JSON text {"name": ..., "path": ...} of the model the
 * file was made with (its store name, lib/engine/store.c, and its absolute
 * path), so that a file refused for another model says which model made
 * it. Every file is written with it now; a reader that does not know the
 * bit refuses the file by it ("unknown flags"), as it would by a version,
 * while the version keeps saying the page layout (3 whole, 4 trimmed
 * windows, 5 MLA) and stays the lowest that describes the file. Files
 * without the bit are still read (without a model name).
 * kv-inspect reads versions 1 to 3 (and refuses 4 and 5 by their version).
 *
 *   off  size  field
 *   0    8     magic "RVLSESS\0"
 *   8    4     version (5 or 4, or 3: see above; 2 is read too)
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
 *              "Key centering") and a CENTER block follows EXTRA; bit 1
 *              set (version 5 only): the values are the keys (kvcache.h
 *              v_is_k, MLA's latent cache): the value formats at 56..64
 *              equal the key formats and a KV block holds no value
 *              pages; bit 2 set (versions 3 to 5): a MODEL block comes
 *              first; other bits 0 (version 2: the whole field 0)
 *   80   8     xxh3-64 of bytes 0..79
 *   88   ...   blocks, in this order: with flag bit 2 a MODEL block (JSON
 *              text, at most 64 KiB), TOKENS (n_tokens i32), EXTRA (the
 *              JSON text, possibly empty), with flag bit 0 a CENTER block
 *              (n_layer x n_head_kv x head_dim f32: the centre every
 *              stored key had subtracted), then for each layer l, for
 *              each logical page p it holds (positions 32p .. 32p + 31,
 *              the last one possibly partial) one KV block: a global
 *              layer holds pages 0 .. ceil(n_tokens / 32) - 1, a layer
 *              with a sliding window (version 4) the pages its ring
 *              kept, from its first one (the page of the first KV
 *              block of the layer says which; every layer of the same
 *              window starts at the same page; after a context shift it
 *              may lack keys the next query's window would see, and
 *              attention sees what it holds: kvcache.c "Sliding
 *              windows", "Context shift"). Each block:
 *                0  4  kind (1 tokens, 2 extra, 3 kv, 4 center, 5 model)
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
 *              n_head_kv value pages (with flag bit 1: the key pages
 *              only, byte 13 the key format), each exactly as the cache holds it
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
 * Version 1 (read only by kv-inspect): a 56-byte header with n_layer at
 * 24, kv_dim at 28, the key and value element types at 32 and 36 (0 f16,
 * 1 f32), the page size at 40, n_tokens at 44 and the header's xxh3-64 at
 * 48; 28-byte block headers (kind, layer, page, raw size, stored size,
 * hash: no format/tier/rows bytes) and kv blocks of the page's used rows
 * of kv_dim elements, keys then values.
 */
#ifndef RVL_SESSION_FMT_H
#define RVL_SESSION_FMT_H

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- constants */
#define RVL_SESS_MAGIC "RVLSESS"           /* with its NUL: 8 bytes */
#define RVL_SESS_MAGIC_BYTES 8u
#define RVL_SESS_VERSION 5u                /* written with v_is_k; else 4 (3 when nothing is
                                            * trimmed); 2 .. 4 are read too */
#define RVL_SESS_BOM 0x01020304u
#define RVL_SESS_PAGE 32u                  /* positions per page */
#define RVL_SESS_TIERS 3                   /* hot, warm, cold */
#define RVL_SESS_F_CENTER 1u               /* flags: keys stored centred */
#define RVL_SESS_F_V_IS_K 2u               /* flags (version 5): the values are the keys */
#define RVL_SESS_F_MODEL 4u                /* flags (versions 3+): a MODEL block comes first */
#define RVL_SESS_MAX_EXTRA ((uint64_t)64 << 20)  /* bytes of the JSON blob */
#define RVL_SESS_MAX_MODEL ((uint64_t)64 << 10)  /* bytes of the MODEL block's JSON */

/* Header fields (versions 2 and 3); the tier formats are 4 bytes apart. */
enum {
    RVL_SESS_H_VERSION = 8,
    RVL_SESS_H_BOM = 12,
    RVL_SESS_H_FINGERPRINT = 16,
    RVL_SESS_H_N_LAYER = 24,
    RVL_SESS_H_N_HEAD_KV = 28,
    RVL_SESS_H_HEAD_DIM = 32,
    RVL_SESS_H_PAGE = 36,
    RVL_SESS_H_N_TOKENS = 40,
    RVL_SESS_H_FMT_K = 44,                 /* + 4 * tier */
    RVL_SESS_H_FMT_V = 56,                 /* + 4 * tier */
    RVL_SESS_H_HOT = 68,
    RVL_SESS_H_WARM = 72,
    RVL_SESS_H_FLAGS = 76,
    RVL_SESS_H_HASH = 80,                  /* of the bytes before it */
    RVL_SESS_HDR = 88,                     /* header bytes */
};

/* Version 1's header fields that differ (kv-inspect). */
enum {
    RVL_SESS_V1_KV_DIM = 28,
    RVL_SESS_V1_TYPE_K = 32,               /* 0 f16, 1 f32 */
    RVL_SESS_V1_TYPE_V = 36,
    RVL_SESS_V1_PAGE = 40,
    RVL_SESS_V1_N_TOKENS = 44,
    RVL_SESS_V1_HASH = 48,
    RVL_SESS_V1_HDR = 56,
    RVL_SESS_V1_BLK = 28,                  /* block header bytes */
};

/* Block header fields; version 1's block header lacks the four info bytes,
 * so its sizes and hash sit at BLK - 16, BLK - 12 and BLK - 8 alike. */
enum {
    RVL_SESS_B_KIND = 0,
    RVL_SESS_B_LAYER = 4,
    RVL_SESS_B_PAGE = 8,
    RVL_SESS_B_INFO = 12,                  /* kv: key format, value format, tier, rows */
    RVL_SESS_B_RAW = 16,
    RVL_SESS_B_STORED = 20,
    RVL_SESS_B_HASH = 24,
    RVL_SESS_BLK = 32,                     /* block header bytes */
};

/* Block kinds, in file order (ruvllm_tools.h's RVL_KVI_BLK_* say the same). */
enum { RVL_SESS_TOKENS = 1, RVL_SESS_EXTRA = 2, RVL_SESS_KV = 3, RVL_SESS_CENTER = 4,
       RVL_SESS_MODEL = 5 /* with flag bit 2: first */ };

/* ---------------------------------------------------------------- error texts
 * What both readers say, each after "PATH: " (rvl_seterr) or "header: "
 * (a kv-inspect problem). */
#define RVL_SESS_E_MAGIC "not a ruvllm session file (bad magic at offset 0)"
#define RVL_SESS_E_SHORT "truncated: %zu bytes, shorter than a session header"
#define RVL_SESS_E_BOM "byte-order mark at offset 12 is 0x%08x: written on a machine of the " \
                       "other endianness"
#define RVL_SESS_E_FLAGS "unknown flags 0x%08x at offset 76"

/* ---------------------------------------------------------------- the cache's side
 * rvl_session_save / rvl_session_load_mem (ruvllm.h, engine/model.h) on a
 * paged KV cache itself (lib/engine/kvcache.h), for them and the tests:
 * fingerprint the model's (rvl_model_fingerprint), n_vocab bounds the
 * token ids. Saving: ids are the n_ids = rvl_kvcache_n(kc) positions'.
 * Loading empties the cache first and leaves it empty on failure. */
struct rvl_kvcache;
int rvl_session_save_kvc(struct rvl_kvcache *kc, uint64_t fingerprint, const char *path,
                         const int32_t *ids, size_t n_ids, const char *extra_json);
/* ... with the MODEL block's JSON text (flag bit 2); rvl_session_save_kvc
 * (model_json NULL) writes neither, as before version 3 knew the bit. */
int rvl_session_save_kvc_model(struct rvl_kvcache *kc, uint64_t fingerprint, const char *path,
                               const int32_t *ids, size_t n_ids, const char *extra_json,
                               const char *model_json);
int rvl_session_load_kvc(struct rvl_kvcache *kc, uint64_t fingerprint, uint32_t n_vocab,
                         const char *path, const void *buf, size_t size, int32_t **ids,
                         size_t *n_ids, char **extra_json);

/* ---------------------------------------------------------------- fields */
static inline uint32_t rvl_session_get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t rvl_session_get64(const unsigned char *p)
{
    return (uint64_t)rvl_session_get32(p) | (uint64_t)rvl_session_get32(p + 4) << 32;
}

static inline void rvl_session_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline void rvl_session_put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

#endif
