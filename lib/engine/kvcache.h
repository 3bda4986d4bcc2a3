/*
 * kvcache.h - the paged, tiered KV cache of one sequence (internal to lib/).
 *
 * Positions are grouped in pages of RVL_KVQ_PAGE (32). Layers with the
 * same sliding window (or none: the global layers) form a group that
 * shares one page table: logical page p (positions 32p .. 32p + 31) has a
 * tier and a slot in that tier's pool of the group; each layer has its
 * own pool region per tier and kind (keys, values). A slot holds the page
 * of every kv head, head after head, each in the tier's storage format of
 * that kind (kernels/kvq.h's page layouts; f32: 32 rows of head_dim
 * floats). A windowed group is a ring holding only the pages its window
 * still needs (kvcache.c, "Sliding windows"). The slots are a store's
 * (rvl_kvstore below): the cache's own, or one its sequence shares with
 * an rvl_batch's others (kvcache.c, "The store", "Sharing").
 *
 * Tiers, by the age of a full page (how many positions its newest one is
 * behind the newest token):
 *   0  hot:  f16 (or f32) for keys and values; age < hot, and always the
 *            page being filled (full precision until it is full: KIVI's
 *            residual, which per-channel q4 keys need);
 *   1  warm: age < hot + warm;
 *   2  cold: older.
 * Attention sinks: the pages holding positions 0 .. sink - 1 (forward.c:
 * the first page, 32 positions, for every quantized cache) stay in tier 0
 * whatever their age. Models put a large share of every head's attention
 * on the first tokens (StreamingLLM's "attention sinks"), so their
 * quantization error weighs on every later token. SmolLM2-135M, wikitext-2,
 * ctx 2048, perplexity against f16 without -> with the sink, 8 windows:
 * tiered 256/512/tq4 +0.63% -> +0.28%, tq4 +1.54% -> +1.65%, q8 +0.11% ->
 * +0.15% (4 windows: +0.74% -> +0.11%, +1.36% -> +1.17%, +0.22% ->
 * -0.20%); measured before key centering. It pays where the first page
 * would be the only 4-bit one (tiered); for fixed formats it is within the
 * noise: tq4's loss is its keys' (tq4 keys + f16 values +1.36%, f16 keys +
 * tq4 values +0.21%) at the Lloyd-Max floor (relative MSE 0.0083-0.0090
 * per key, vs 0.0095 for N(0, 1) input). Key centering (kvcache.c) then
 * took the keys' share down: q8 +0.09%, tq4 +1.43%, tq4 keys + f16 values
 * +1.15% (8 windows; README "KV cache formats").
 * They cost one f16 page per layer (SmolLM2-135M: 720 KiB) and are the one
 * exception to "tiers only get colder with age" below: attention reads a
 * sink page that is not next to the hot tier with the kvq.h F16 reader.
 * A fixed f16/f32 cache has an unbounded hot tier; a fixed quantized
 * format X is (f16, X, X) with hot 0 and an unbounded warm tier. Pages
 * are re-encoded as they age (decoded to floats, encoded in the next
 * tier's format): the cold tier is encoded from the warm tier's
 * reconstruction (q8: 8-bit error, ~0.4% of a group's range, well below
 * the 4-bit step it then gets). Tiers only get colder with age, so the
 * full-precision pages are always the newest ones: attention runs the
 * attn.h kernels over them and kvq.h's page readers over the older ones,
 * with one online softmax (split-K partials merged by the reduce step).
 *
 * Keys are cached after RoPE: attention then needs no rotation per step
 * and the kernels are position-agnostic; the price is that a context
 * shift must re-rotate the kept keys (rvl_kvcache_shift), which happens
 * rarely. A key head's rotated dims are rope_off .. rope_off + rope_dim
 * (0 for every family but MLA's).
 *
 * MLA's latent cache (v_is_k; DeepSeek-V2/V3, absorbed multi-head latent
 * attention): one kv head per token, K = [c ; k_pe] (c the normalized
 * latent, kv_lora_rank dims; k_pe the shared RoPE key; rope_off =
 * kv_lora_rank), and the values are those same rows: each output head is
 * sum_t p_t k_t, of which the forward pass keeps the first kv_lora_rank
 * dims. The cache then holds key pages only: the value side of every
 * attention path (the attn.h kernels over tier-0 pages, kvq.h's accum over
 * quantized ones) is given the key pages, so only formats whose key and
 * value pages are laid out alike are taken (f32, f16, q8, tiered with q8
 * as its coldest tier; q4 keys are per channel and TQ pages are rotated:
 * refused at open naming MLA's latent cache). Writing ignores v, aging
 * re-encodes each key slot once, rvl_kvcache_usage and
 * rvl_kvcache_tier_token_bytes count the key pages alone (half the bytes
 * of the same cache with values), session files hold only them (version
 * 5, session_fmt.h), and keys are never centred: values read from centred
 * keys would be k - mu.
 *
 * Sink logits (gpt-oss; not the sink pages above): a learned logit per
 * layer and query head that takes its share of the softmax and brings no
 * value, out = sum_t e^(s_t - M) v_t / (e^(sink - M) + sum_t e^(s_t - M)),
 * used as given (not scaled, not soft-capped), on windowed layers too. The
 * attn.h kernels apply it where a result is normalized (prefill's end, the
 * decode reduce, which also merges the quantized pages' partials). Key
 * centering is off with sink logits and with soft-capping: it shifts each
 * query's scores by q.mu, which only a plain softmax ignores.
 */
#ifndef RVL_KVCACHE_H
#define RVL_KVCACHE_H

#include "kvq.h"
#include "engine/model.h"

#define RVL_KVF_F32 RVL_KVQ_COUNT   /* 5: exact rows of floats */
#define RVL_KVC_UNBOUNDED UINT32_MAX
#define RVL_KVC_MAX_BATCH 32        /* most query tokens per attend call */
#define RVL_KVC_LRU_PAGES 64        /* most dropped pages kept for reuse */

typedef struct rvl_kvcache rvl_kvcache;
typedef struct rvl_kvstore rvl_kvstore;

typedef struct {
    uint32_t n_layer, n_head, n_head_kv, head_dim, n_ctx;
    int fmt_k[3], fmt_v[3];        /* per tier; tier 0: RVL_KVQ_F16 or RVL_KVF_F32 */
    uint32_t hot, warm;            /* tokens, or RVL_KVC_UNBOUNDED */
    uint32_t sink;                 /* the pages of positions 0 .. sink - 1 stay in tier 0 */
    const uint32_t *window;        /* (n_layer) sliding window of each layer (0: none), or
                                    * NULL; copied at open. At most 3 different windows */
    float scale, softcap;          /* attention */
    int q_f16;                     /* round q to f16 against f16 pages (llama.cpp) */
    bool v_is_k;        /* MLA's latent cache: the values are the key rows themselves (no value
                         * pages; attention's value side reads the key pages, so each output head
                         * is sum_t p_t k_t). fmt_v must equal fmt_k; f32, f16, q8 tiers only;
                         * no key centering ("MLA's latent cache" above) */
    uint32_t rope_off;  /* where a key head's rotated dims start (context shift): 0, or MLA's
                         * kv_lora_rank */
    const float *sinks; /* (n_layer, n_head) sink logits, or NULL: none; copied at open. Each
                         * query head's softmax gets e^sink in its denominator (gpt-oss; attn.h):
                         * finite, or -inf for none */
} rvl_kvcache_params;

/* The tier formats of a fixed or tiered rvl_kv_type, per kind: fills
 * fmt[3] and says whether the type is tiered. -1: unknown type. */
int rvl_kvcache_type_formats(rvl_kv_type t, rvl_kv_type cold, int fmt[3]);
/* "f16", "q8", ..., "f32" for a page format. */
const char *rvl_kvcache_fmt_name(int fmt);

/* owned: close with rvl_kvcache_close. Checks the formats against head_dim
 * (RVL_EINVAL with the reason) and allocates every pool and workspace;
 * n_threads: the pool the attention will run on. */
int rvl_kvcache_open(rvl_kvcache **out, const rvl_kvcache_params *p, int n_threads);
void rvl_kvcache_close(rvl_kvcache *kc);
const rvl_kvcache_params *rvl_kvcache_params_of(const rvl_kvcache *kc);

/*
 * The store (kvcache.c, "The store"): the pools, free slots and reference
 * counts a cache takes its page slots from. rvl_kvcache_open gives a cache
 * a private one (the memory it always had). A shared store holds the slots
 * of n_seq caches of p's geometry (rvl_batch's sequences): those of the
 * global layers up to budget_pages pages of 32 positions (0, or more than
 * n_seq * ceil(n_ctx / 32): that), the windowed layers' rings in full; and
 * an index of the full pages with known ids its slots hold, by chained
 * hash, tier and key centre, so that caches share pages (copy-on-write: a
 * cache never writes to a slot another one holds). owned: close after its
 * caches with rvl_kvstore_close. rvl_kvcache_open_on: a cache of the
 * store's geometry whose slots are the store's.
 */
int rvl_kvstore_open(rvl_kvstore **out, const rvl_kvcache_params *p, uint32_t n_seq,
                     uint32_t budget_pages);
void rvl_kvstore_close(rvl_kvstore *st);
int rvl_kvcache_open_on(rvl_kvcache **out, rvl_kvstore *st, int n_threads);
/* What the store holds (ruvllm.h's rvl_batch_kv): pages of the global
 * layers against the budget, bytes of every slot in use counted once. */
void rvl_kvstore_usage(const rvl_kvstore *st, rvl_batch_kv *u);
/* An empty cache on a shared store maps the longest run of full pages of
 * ids[0 .. n) that the store holds (verified by ids, in the tier each
 * page's age gives at that length, with the cache's key centre; a ring
 * only what it would hold), leaving at least ids[n - 1] to compute:
 * returns the positions mapped (a multiple of 32; 0 for a private store,
 * a cache that is not empty, or no match); rvl_kvcache_n is that. */
uint32_t rvl_kvcache_share(rvl_kvcache *kc, const int32_t *ids, uint32_t n);
/* Pages of the store's global layers kc would still take to hold n
 * positions (0 for a private store, or no global layers): new pages,
 * less those of ids[0 .. n_ids) it could map now (empty cache, formats
 * that never re-encode a page), plus, where pages age or keys get
 * centred, every shared page it holds (it may get its own copy). An upper
 * bound: a step whose caches need no more than the store's free pages
 * cannot run out of slots. */
uint32_t rvl_kvcache_need(rvl_kvcache *kc, const int32_t *ids, uint32_t n_ids, uint32_t n);

uint32_t rvl_kvcache_n(const rvl_kvcache *kc);            /* committed positions */
void rvl_kvcache_reset(rvl_kvcache *kc);
/* Keep the first n positions (n <= rvl_kvcache_n). A quantized page that
 * becomes the page being filled is decoded back to tier 0. */
int rvl_kvcache_truncate(rvl_kvcache *kc, uint32_t n);

/* Before a batch: pages for positions n .. n + nb - 1 (tier 0). */
void rvl_kvcache_begin(rvl_kvcache *kc, uint32_t nb);
/* Keys and values of positions pos .. pos + nb - 1 of one layer (inside
 * the batch begun): row t at k + t * k_stride, kv_dim floats. */
void rvl_kvcache_write(rvl_kvcache *kc, uint32_t layer, uint32_t pos, uint32_t nb, const float *k,
                   size_t k_stride, const float *v, size_t v_stride);
/* Attention of nb (<= RVL_KVC_MAX_BATCH) query tokens at positions
 * pos .. pos + nb - 1 over layer `layer` (causal; their own keys written):
 * q row t at q + t * q_stride (n_head * head_dim floats), output row at
 * out + t * out_stride. Runs on the pool. */
void rvl_kvcache_attend(rvl_kvcache *kc, rvl_pool *pool, uint32_t layer, const float *q,
                    size_t q_stride, uint32_t pos, uint32_t nb, float *out, size_t out_stride);
/* After every layer wrote the batch: the cache holds n + nb positions and
 * pages that aged past a tier boundary are re-encoded. */
void rvl_kvcache_commit(rvl_kvcache *kc, uint32_t nb);

/*
 * Prefix reuse (kvcache.c, "Prefix reuse"). rvl_kvcache_set_ids: the token
 * ids of positions pos .. pos + n - 1 (called before the commit of the
 * batch that holds them; ids after a gap of unknown ones are ignored):
 * full pages with known ids get a chained hash (xxh3-64 of the parent
 * page's hash and the page's 32 ids). Truncates and resets keep the full
 * hashed pages they drop in a small LRU (at most RVL_KVC_LRU_PAGES pages
 * and an eighth of the cache's bytes). rvl_kvcache_reuse: keeps the longest prefix of ids[0 .. n) the
 * cache holds (live pages by hash, the last one by tokens), truncates the
 * rest and continues with whole pages from the LRU; returns that prefix's
 * length, the new rvl_kvcache_n. rvl_kvcache_page_hash: page's hash, 0 if none.
 * rvl_kvcache_forget: nothing is reusable any more (the ids, hashes and LRU
 * are dropped; the cache keeps its positions): the model changed (LoRA).
 */
void rvl_kvcache_set_ids(rvl_kvcache *kc, uint32_t pos, const int32_t *ids, uint32_t n);
uint32_t rvl_kvcache_reuse(rvl_kvcache *kc, const int32_t *ids, uint32_t n);
uint64_t rvl_kvcache_page_hash(const rvl_kvcache *kc, uint32_t page);
void rvl_kvcache_forget(rvl_kvcache *kc);
/* Sliding windows (kvcache.c, "Sliding windows"): a layer's window (0:
 * none; a window of n_ctx or more is none) and the first page it holds:
 * a windowed layer's ring freed the pages before it. A truncate that
 * would need freed keys is refused (RVL_ERANGE; to 0 is a reset);
 * rvl_kvcache_reuse then keeps nothing. */
uint32_t rvl_kvcache_window(const rvl_kvcache *kc, uint32_t layer);
uint32_t rvl_kvcache_first_page(const rvl_kvcache *kc, uint32_t layer);
/* What the cache holds at n positions (ruvllm.h's rvl_ctx_kv_usage):
 * computed from the formats, tiers and rings, not from the cache's
 * content (cheap: a loop over n / 32 pages per group). */
void rvl_kvcache_usage(const rvl_kvcache *kc, uint32_t n, rvl_kv_usage *u);

/*
 * Context shift: drop positions [keep, keep + n_discard), move the later
 * ones down by n_discard and rotate their keys back by n_discard
 * positions: cos_d/sin_d are the RoPE angles of a distance of n_discard
 * (rope_dim / 2 pairs; neox: pairs (i, i + half), else (2i, 2i + 1));
 * cos_w/sin_w the same for the layers opened with a window (even one of
 * n_ctx or more), NULL: the same angles. A windowed layer's ring keeps
 * what it held, moved and rotated (kvcache.c "Context shift"). Quantized
 * pages are decoded, rotated and re-encoded. Allocates a temporary
 * (2 * n * kv_dim floats): RVL_ENOMEM if that fails.
 */
int rvl_kvcache_shift(rvl_kvcache *kc, uint32_t keep, uint32_t n_discard, const float *cos_d,
                  const float *sin_d, const float *cos_w, const float *sin_w, uint32_t rope_dim,
                  bool neox);

/* ---- page access, for session files and tests ---- */

/* Logical pages in use: ceil(n / 32); a windowed layer holds pages
 * rvl_kvcache_first_page .. of them. */
uint32_t rvl_kvcache_n_pages(const rvl_kvcache *kc);
int rvl_kvcache_page_tier(const rvl_kvcache *kc, uint32_t layer, uint32_t page);
/* Bytes of one head's page of a kind (0 keys, 1 values) in a tier. */
size_t rvl_kvcache_page_bytes(const rvl_kvcache *kc, int kind, int tier);
/* The slot of logical page `page` of one layer and kind: n_head_kv pages
 * of rvl_kvcache_page_bytes each. borrowed: valid until the cache changes. */
void *rvl_kvcache_page_data(rvl_kvcache *kc, uint32_t layer, int kind, uint32_t page);
/* Session loading, into an emptied cache: layer after layer, each page
 * the layer holds in order (rvl_kvcache_load_page: from 0 for a global
 * layer, from its ring's first page for a windowed one; the first layer
 * of a window gives the pages their slots in the tier named, the others
 * must name the same pages and tiers; tiers must not increase with
 * age... see session.c), then rvl_kvcache_load_done(n): every layer's
 * pages reach n, and every ring holds the keys the next query needs.
 * RVL_EFORMAT when a tier or ring has no slot left or an order is broken. */
int rvl_kvcache_load_page(rvl_kvcache *kc, uint32_t layer, uint32_t page, int tier);
int rvl_kvcache_load_done(rvl_kvcache *kc, uint32_t n);
/* The floats row j (0..31) of page `page`, layer, kind, kv head stands
 * for (decoded; TQ unrotated). */
void rvl_kvcache_read_page(rvl_kvcache *kc, uint32_t layer, int kind, uint32_t page, uint32_t head,
                       float *rows /* [32][head_dim] */);
/* Key centering (kvcache.c, "Key centering"): the centre subtracted from
 * every stored key, (n_layer, n_head_kv, head_dim) floats, or NULL while
 * there is none (an f16/f32 cache, or no key page quantized yet). Pages
 * hold k - centre; rvl_kvcache_read_page adds it back. */
const float *rvl_kvcache_key_center(const rvl_kvcache *kc);
/* Session loading (after the cache was emptied, before
 * rvl_kvcache_load_done): the pages were saved with this centre, or without
 * one (NULL). RVL_EFORMAT when the cache's key formats are not quantized
 * but a centre is given. A change of centre empties the LRU. */
int rvl_kvcache_load_center(rvl_kvcache *kc, const float *mu);
/* KV bytes per token of the steady state of the formats of each tier
 * (tier 0 counts f16/f32), summed over layers and kv heads, K + V. */
double rvl_kvcache_tier_token_bytes(const rvl_kvcache *kc, int tier);

#endif
