/*
 * kvcache.c - the paged, tiered KV cache and attention over it (contract
 * and tier rules in kvcache.h).
 *
 * Memory: per layer group (the layers of one sliding window, or the
 * global ones), tier t and kind (keys, values) one pool of the group's
 * layers * cap[t] slots, allocated at open; cap[0] covers the hot tier plus
 * the page being filled and the next one (a batch crosses at most one page
 * boundary), cap[1] the warm tier, cap[2] every page; a window's caps are
 * at most its ring. One free-slot stack per group and tier. The pools,
 * free slots and reference counts are the cache's store's (section "The
 * store"): its own, or one shared by an rvl_batch's caches (n_seq times
 * these slots, the global layers' capped by the budget).
 * Nothing is allocated after open except by rvl_kvcache_shift.
 *
 * MLA's latent cache (v_is_k) allocates no value pools: a group's value
 * pool pointers are its key pools (sb, pb alike, the formats being equal),
 * so the attention paths read values unchanged; whatever moves or counts
 * pages loops over kc->nkind kinds (slot_bytes).
 *
 * Attention of a query token at position qp over one layer:
 *   pages [lo / 32, f0) are quantized (tiers 1, 2: any mix of formats;
 *   lo the first key the query sees: 0, or qp + 1 - W with a window W),
 *   pages [f0, qp / 32] are tier 0 (f16/f32). The tier-0 region runs through
 *   attn.h's kernels (decode_chunk; or prefill when f0 = 0, the whole
 *   context in tier 0), restricted to keys >= 32 f0 through their window
 *   mask; the quantized region through kvq.h's page readers with an
 *   online softmax per chunk of pages. Both produce split-K partials
 *   {m, l, acc} merged by rvl_attn_decode_reduce. TQ keys are scored with
 *   q rotated once per head and step; TQ values accumulate in the rotated
 *   domain and each chunk's sum is rotated back once.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <xxhash.h>

#include "attn.h"
#include "f16.h"
#include "formats.h"
#include "engine/kvcache.h"

#define PG RVL_KVQ_PAGE
_Static_assert(RVL_KVQ_PAGE == RVL_KV_PAGE, "ruvllm.h's KV page is kvq.h's");
#define MAXC 16                  /* most chunks per region and token */

#define MAXG 4                   /* most layer groups: the global layers and 3 windows */
#define KVS_CENTRES 8            /* key centres a shared store remembers */

typedef struct {
    uint64_t hash, used;         /* used: 0 for a free entry, else its last tick */
    uint8_t tier[MAXG];          /* the page's tier in each group */
    int32_t ids[RVL_KVQ_PAGE];
} kvc_lru;

/* What a slot of a shared store holds, for the index (section "The
 * store" below): a full page with known ids, its chained hash, and the key
 * centre its keys were stored with (tag 0: not centred). */
typedef struct {
    uint64_t hash, tag;
    int32_t ids[RVL_KVQ_PAGE];
    bool on;                     /* indexed: findable by (hash, tier, tag) */
} kvs_entry;

/* A layer group's slots in a store: per tier and kind a pool of (n_layer,
 * cap, sb) bytes, the free slots, each slot's reference count and (a
 * shared store) its index entry. */
typedef struct {
    uint32_t cap[3];
    unsigned char *pool[2][3];
    int32_t *freel[3];           /* (cap) free slots: a stack (private), a FIFO ring from head
                                  * (shared: the least recently freed is reused first) */
    uint32_t nfree[3], head[3];
    uint32_t *ref[3];            /* (cap) caches holding each slot */
    kvs_entry *ix[3];            /* (cap) shared stores: what each slot holds, else NULL */
    uint32_t n_layer;
} kvs_group;

struct rvl_kvstore {
    rvl_kvcache_params p;        /* window and sinks: the store's copies below */
    uint32_t *window;            /* (n_layer) */
    float *sinks;                /* (n_layer, n_head) or NULL */
    bool shared;                 /* false: the one cache's own (rvl_kvcache_open) */
    uint32_t n_grp, users;       /* users: caches open on it */
    uint32_t budget;             /* pages of group 0 the caches may hold together (room) */
    size_t slot_bytes[3];        /* one layer's slot in tier t, keys and values */
    kvs_group grp[MAXG];
    uint64_t reused;             /* pages mapped by rvl_kvcache_share */
    /* key centres the caches fixed (section "Sharing"): by the ids they
     * were computed from, the most recent KVS_CENTRES */
    struct {
        uint64_t ids_hash, used; /* xxh3 of ids[0 .. c); used 0: empty */
        uint32_t c;
        float *mu;               /* (n_layer, n_head_kv, head_dim) */
    } centre[KVS_CENTRES];
    uint64_t tick;
};

/* The layers that share one window (0: the global layers): one page
 * table, one pool per tier and kind, one free-slot stack per tier. A
 * windowed group is a ring: it holds at most `ring` pages, the newest.
 * The pools and free slots are the store's (kvs_group). */
typedef struct {
    uint32_t window;             /* 0: global */
    uint32_t n_layer, *layer;    /* its layers, ascending */
    uint32_t sink;               /* kvcache.h's sink for the global group, 0 for a window */
    uint32_t ring;               /* windowed: the most pages held; 0: every page */
    uint32_t cap[3];             /* slots per layer and tier (the store's) */
    unsigned char *pool[2][3];   /* (n_layer, cap, sb): the store's */
    kvs_group *s;                /* the store's group */
    uint8_t *tier;               /* (max_pages) tier of each logical page */
    int32_t *slot;               /* (max_pages) its slot in that tier */
    int32_t *pt0;                /* (max_pages) tier-0 slot, for the kernels */
    uint32_t first;              /* pages first .. n_pages - 1 have a slot; older ones were freed */
    uint32_t loaded;             /* session loading: pages first .. loaded - 1 given a slot */
} kvc_group;

struct rvl_kvcache {
    rvl_kvcache_params p;
    rvl_kvstore *st;             /* where the slots are: its own (private), or shared */
    uint64_t mu_hash;            /* xxh3 of the key centre, when KC_SET (page_tag) */
    uint32_t centred_at;         /* positions below it were centred in place (center_keys) */
    bool noshare;                /* pages of unknown making (session loading): not indexed */
    uint32_t kv_dim, max_pages;
    int nkind;                   /* kinds with pages of their own: 2, or 1 (v_is_k: the value
                                  * side's pool, slot and page sizes are the keys') */
    float *sinks;                /* (n_layer, n_head) sink logits, or NULL */
    int maxtier;                 /* coldest tier in use */
    size_t pb[2][3];             /* bytes of one head's page, [kind][tier] */
    size_t sb[2][3];             /* bytes of a slot: n_head_kv pages */
    kvc_group grp[MAXG];
    uint32_t n_grp;
    uint8_t *lgrp;               /* (n_layer) group of each layer */
    uint8_t *lswa;               /* (n_layer) 1: the layer has a window, even one of n_ctx or
                                  * more (its keys rotate on the windowed layers' RoPE) */
    uint32_t *lidx;              /* (n_layer) its index in the group */
    uint32_t n, n_pages;         /* committed positions; logical pages begun */
    bool tq_k, tq_v;             /* some tier holds TQ keys / values */
    /* key centering (the section "Key centering" below) */
    int kc_state;                /* KC_OFF, KC_PENDING (no centre yet), KC_SET */
    float *kmean;                /* (n_layer, n_head_kv, hd) the centre, when KC_SET */
    /* prefix reuse (the section "Prefix reuse" below) */
    int32_t *ids;                /* (n_ctx) token ids of positions 0 .. ids_n - 1 */
    uint32_t ids_n, hashed;      /* known ids; pages 0 .. hashed - 1 have a hash */
    uint64_t *hash;              /* (max_pages) chained hash of each full page */
    kvc_lru *lru;                /* (lru_cap) pages dropped by a truncate or reset */
    uint32_t lru_cap;
    size_t lru_bytes;            /* bytes of one entry's data: every layer, K and V */
    unsigned char *lru_data;     /* (lru_cap, lru_bytes) */
    uint64_t tick;
    /* attention */
    const rvl_attn_kernels *ak;
    const rvl_kvq_kernels *qk;
    rvl_attn_params ap;          /* the tier-0 region; k, v, page table per layer */
    int nth;
    size_t ws_bytes;
    unsigned char *ws;           /* (nth, ws_bytes) */
    float *partials;             /* (2 * RVL_KVC_MAX_BATCH or 2 MAXC, n_head, hd + 2) */
    float *qrot;                 /* (RVL_KVC_MAX_BATCH, q_dim) */
    float *tmp;                  /* (PG, hd) */
    const rvl_kformat *f16f;
};

enum { KC_OFF, KC_PENDING, KC_SET };

static bool is_tq(int f) { return f == RVL_KVQ_TQ4 || f == RVL_KVQ_TQ3; }
static uint32_t cdiv(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }

/* ====================================================================
 * Formats
 * ==================================================================== */

static const char *const type_names[] = {"f16", "f32", "q8", "q4", "tq4", "tq3", "tiered"};

int rvl_kv_type_parse(const char *name)
{
    for (int i = 0; name && i < (int)(sizeof type_names / sizeof *type_names); i++)
        if (!strcmp(name, type_names[i]))
            return i;
    return -1;
}

const char *rvl_kv_type_name(rvl_kv_type t)
{
    return (unsigned)t < sizeof type_names / sizeof *type_names ? type_names[t] : NULL;
}

const char *rvl_kvcache_fmt_name(int fmt)
{
    return fmt == RVL_KVF_F32 ? "f32" : rvl_kvq_name(fmt);
}

int rvl_kvcache_type_formats(rvl_kv_type t, rvl_kv_type cold, int fmt[3])
{
    static const int q[] = {[RVL_KV_Q8] = RVL_KVQ_Q8, [RVL_KV_Q4] = RVL_KVQ_Q4,
                            [RVL_KV_TQ4] = RVL_KVQ_TQ4, [RVL_KV_TQ3] = RVL_KVQ_TQ3};
    switch (t) {
    case RVL_KV_F16:
    case RVL_KV_F32:
        fmt[0] = fmt[1] = fmt[2] = t == RVL_KV_F16 ? RVL_KVQ_F16 : RVL_KVF_F32;
        return 0;
    case RVL_KV_Q8:
    case RVL_KV_Q4:
    case RVL_KV_TQ4:
    case RVL_KV_TQ3:
        fmt[0] = RVL_KVQ_F16;
        fmt[1] = fmt[2] = q[t];
        return 0;
    case RVL_KV_TIERED:
        fmt[0] = RVL_KVQ_F16;
        fmt[1] = RVL_KVQ_Q8;
        fmt[2] = cold == RVL_KV_Q4 ? RVL_KVQ_Q4 : RVL_KVQ_TQ4;
        return 1;
    default:
        return -1;
    }
}

static size_t fmt_page_bytes(int fmt, int kind, int hd)
{
    return fmt == RVL_KVF_F32 ? (size_t)PG * hd * 4 : rvl_kvq_page_bytes(fmt, kind, hd);
}

static void decode_page(int fmt, int kind, int hd, const void *page, int n, float *x)
{
    if (fmt == RVL_KVF_F32)
        memcpy(x, page, (size_t)n * hd * sizeof(float));
    else
        rvl_kvq_decode_page(fmt, kind, hd, page, n, x, (size_t)hd);
}

static void encode_page(int fmt, int kind, int hd, const float *x, int n, void *page)
{
    if (fmt == RVL_KVF_F32) {
        memcpy(page, x, (size_t)n * hd * sizeof(float));
        memset((float *)page + (size_t)n * hd, 0, (size_t)(PG - n) * hd * sizeof(float));
    } else {
        rvl_kvq_encode_page(fmt, kind, hd, x, (size_t)hd, n, page);
    }
}

/* ====================================================================
 * Slots and pages
 * ==================================================================== */

/* A free slot of tier t (reference count 1, out of the index), -1 when
 * none is left. */
static int32_t slot_alloc(kvc_group *g, int t)
{
    kvs_group *s = g->s;
    if (s->nfree[t] == 0)
        return -1;
    int32_t x;
    if (s->ix[t]) {
        x = s->freel[t][s->head[t]];
        s->head[t] = (s->head[t] + 1) % s->cap[t];
        s->nfree[t]--;
        s->ix[t][x].on = false;
    } else {
        x = s->freel[t][--s->nfree[t]];
    }
    s->ref[t][x] = 1;
    return x;
}

/* A reference to slot x of tier t dropped: free when it was the last (a
 * shared store keeps it findable in its index until it is reused). */
static void slot_free(kvc_group *g, int t, int32_t x)
{
    kvs_group *s = g->s;
    if (--s->ref[t][x])
        return;
    if (s->ix[t])
        s->freel[t][(s->head[t] + s->nfree[t]) % s->cap[t]] = x;
    else
        s->freel[t][s->nfree[t]] = x;
    s->nfree[t]++;
}

/* Another reference to slot x of tier t (found in the index): out of the
 * free ring if it was free. */
static void slot_take(kvc_group *g, int t, int32_t x)
{
    kvs_group *s = g->s;
    if (s->ref[t][x]++)
        return;
    const uint32_t c = s->cap[t];
    uint32_t i = 0;
    while (i < s->nfree[t] && s->freel[t][(s->head[t] + i) % c] != x)
        i++;
    for (; i + 1 < s->nfree[t]; i++)
        s->freel[t][(s->head[t] + i) % c] = s->freel[t][(s->head[t] + i + 1) % c];
    s->nfree[t]--;
}

static bool slot_shared(const kvc_group *g, int t, int32_t x) { return g->s->ref[t][x] > 1; }

/* Slot s of tier t, kind, for the li-th layer of group g. */
static unsigned char *slot_ptr(const rvl_kvcache *kc, const kvc_group *g, int kind, int t,
                               uint32_t li, int32_t s)
{
    return g->pool[kind][t] + ((size_t)li * g->cap[t] + (size_t)s) * kc->sb[kind][t];
}

/* Bytes a page of one layer holds in tier t: keys and values, or (v_is_k)
 * the keys that are both. */
static size_t slot_bytes(const rvl_kvcache *kc, int t)
{
    return kc->sb[0][t] + (kc->nkind == 2 ? kc->sb[1][t] : 0);
}

static kvc_group *group_of(rvl_kvcache *kc, uint32_t layer) { return &kc->grp[kc->lgrp[layer]]; }
static const kvc_group *cgroup_of(const rvl_kvcache *kc, uint32_t layer)
{
    return &kc->grp[kc->lgrp[layer]];
}

/* Layer l's logical page pg, in the tier the page has. */
static unsigned char *page_ptr(const rvl_kvcache *kc, uint32_t l, int kind, uint32_t pg)
{
    const kvc_group *g = cgroup_of(kc, l);
    return slot_ptr(kc, g, kind, g->tier[pg], kc->lidx[l], g->slot[pg]);
}

/* Page pg gets a slot in tier t of group g. */
static void page_set(kvc_group *g, uint32_t pg, int t, int32_t s)
{
    g->tier[pg] = (uint8_t)t;
    g->slot[pg] = s;
    if (t == 0)
        g->pt0[pg] = s;
}

/* Every page of the cache given back: a private store's slots all free
 * again (slot 0 first), a shared store's references dropped. */
static void free_all(rvl_kvcache *kc)
{
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        kvc_group *g = &kc->grp[gi];
        kvs_group *s = g->s;
        if (!kc->st->shared) {
            for (int t = 0; t < 3; t++) {
                s->nfree[t] = s->cap[t];
                for (uint32_t i = 0; i < s->cap[t]; i++) {
                    s->freel[t][i] = (int32_t)(s->cap[t] - 1 - i); /* slot 0 first */
                    s->ref[t][i] = 0;
                }
            }
        } else { /* session loading may have given slots to pages past n_pages */
            const uint32_t end = g->loaded > kc->n_pages ? g->loaded : kc->n_pages;
            for (uint32_t pg = g->first; pg < end; pg++)
                slot_free(g, g->tier[pg], g->slot[pg]);
        }
        g->first = g->loaded = 0;
    }
    kc->n = kc->n_pages = 0;
    kc->ids_n = kc->hashed = 0;
    kc->centred_at = 0;
}

/* ---- the index of a shared store (section "The store") ---- */

/* How page pg and the pages before it were made, as far as their bytes
 * depend on it: 0, keys not centred; else the centre's hash and how many
 * of the positions up to the page's end had their keys centred in place
 * (decoded from f16, the centre subtracted, encoded again: other bits than
 * keys written centred) -- the earlier pages count since the page's rows
 * were computed attending to them. Pages of two caches with the same ids
 * and tag hold the same bytes (computed in the same chunks). */
static uint64_t page_tag(const rvl_kvcache *kc, uint32_t pg)
{
    if (kc->kc_state != KC_SET)
        return 0;
    const uint64_t end = ((uint64_t)pg + 1) * PG;
    const uint64_t j = kc->centred_at < end ? kc->centred_at : end;
    return (kc->mu_hash + j * 0x9e3779b97f4a7c15ull) | 1;
}

static void ix_put(rvl_kvcache *kc, kvc_group *g, uint32_t pg)
{
    kvs_entry *e = g->s->ix[g->tier[pg]];
    if (!e || pg >= kc->hashed || kc->noshare)
        return;
    e += g->slot[pg];
    e->hash = kc->hash[pg];
    e->tag = page_tag(kc, pg);
    memcpy(e->ids, kc->ids + (size_t)pg * PG, sizeof e->ids);
    e->on = true;
}

static void ix_drop(kvc_group *g, int t, int32_t x)
{
    if (g->s->ix[t])
        g->s->ix[t][x].on = false;
}

/* A slot of tier t holding the page with hash h and these ids, its keys
 * stored with the centre `tag`: -1 when none. */
static int32_t ix_find(const kvs_group *s, int t, uint64_t h, uint64_t tag, const int32_t *ids)
{
    const kvs_entry *e = s->ix[t];
    for (uint32_t x = 0; e && x < s->cap[t]; x++)
        if (e[x].on && e[x].hash == h && e[x].tag == tag && !memcmp(e[x].ids, ids, sizeof e[x].ids))
            return (int32_t)x;
    return -1;
}

static void hash_pages(rvl_kvcache *kc);
static void age_pages(rvl_kvcache *kc);
static void center_rows(const rvl_kvcache *kc, uint32_t l, uint32_t h, float *rows, int n, float sign);
static void center_keys(rvl_kvcache *kc);
static void ring_make_room(kvc_group *g, uint32_t pages);
static const kvc_group *window_gone(const rvl_kvcache *kc, uint32_t n);
static void lru_evict(rvl_kvcache *kc, uint32_t n);

/* The tier a full page of group g belongs in when the cache holds n
 * positions. */
static int want_tier(const rvl_kvcache *kc, const kvc_group *g, uint32_t page, uint32_t n)
{
    if ((uint64_t)page * PG < g->sink)
        return 0; /* an attention sink */
    const uint64_t age = (uint64_t)n - (uint64_t)(page + 1) * PG;
    if (kc->p.hot == RVL_KVC_UNBOUNDED || age < kc->p.hot)
        return 0;
    if (kc->p.warm == RVL_KVC_UNBOUNDED || age < (uint64_t)kc->p.hot + kc->p.warm)
        return 1;
    return 2;
}

/* Moves page `page` of group g (rows 0 .. rows - 1 meaningful) to tier
 * `to` in every layer of the group: decoded to floats, encoded in the new
 * format (copied when the format is the same) into a new slot; the old
 * slot loses this cache's reference, its content untouched (so this is
 * also the copy of copy-on-write). find: a shared store's slot already
 * holding the page in tier `to` with this cache's key centre is taken
 * instead (an aging page another sequence re-encoded first). */
static void move_page(rvl_kvcache *kc, kvc_group *g, uint32_t page, int to, int rows, bool find)
{
    const int from = g->tier[page], hd = (int)kc->p.head_dim;
    const int32_t os = g->slot[page];
    if (find && g->s->ix[to] && page < kc->hashed && rows == PG) {
        const int32_t f =
            ix_find(g->s, to, kc->hash[page], page_tag(kc, page), kc->ids + (size_t)page * PG);
        if (f >= 0) {
            slot_take(g, to, f);
            slot_free(g, from, os);
            page_set(g, page, to, f);
            return;
        }
    }
    const int32_t ns = slot_alloc(g, to);
    const int *fmts[2] = {kc->p.fmt_k, kc->p.fmt_v};
    for (uint32_t li = 0; li < g->n_layer; li++)
        for (int kind = 0; kind < kc->nkind; kind++) { /* v_is_k: each slot once */
            const int ff = fmts[kind][from], tf = fmts[kind][to];
            for (uint32_t h = 0; h < kc->p.n_head_kv; h++) {
                const unsigned char *src = slot_ptr(kc, g, kind, from, li, os) + h * kc->pb[kind][from];
                unsigned char *dst = slot_ptr(kc, g, kind, to, li, ns) + h * kc->pb[kind][to];
                if (ff == tf && rows == PG) {
                    memcpy(dst, src, kc->pb[kind][to]);
                    continue;
                }
                decode_page(ff, kind, hd, src, rows, kc->tmp);
                encode_page(tf, kind, hd, kc->tmp, rows, dst);
            }
        }
    slot_free(g, from, os);
    page_set(g, page, to, ns);
    if (rows == PG)
        ix_put(kc, g, page);
}

/* Copy-on-write: page `page` of group g gets a slot of its own (same
 * tier, same bytes) when another cache holds its slot, before this cache
 * changes it; else it leaves the index (its content is about to change). */
static void page_own(rvl_kvcache *kc, kvc_group *g, uint32_t page)
{
    const int t = g->tier[page];
    if (slot_shared(g, t, g->slot[page]))
        move_page(kc, g, page, t, PG, false);
    ix_drop(g, t, g->slot[page]);
}

/* ====================================================================
 * Open / close
 * ==================================================================== */

/* Whether keys may be stored centred ("Key centering"): not when values
 * are read from the key pages (v_is_k: they would be k - mu), nor when the
 * softmax is not invariant to a shift of a query's scores (a sink logit
 * is compared with the scores as they are; a soft-cap bends them by their
 * size). */
static bool center_ok(const rvl_kvcache_params *p)
{
    return !p->v_is_k && !p->sinks && !(p->softcap > 0);
}

/* The layer groups (kvc_group) of p's windows: the global layers first. */
static int make_groups(rvl_kvcache *kc, const rvl_kvcache_params *p)
{
    kc->lgrp = malloc(p->n_layer);
    kc->lswa = malloc(p->n_layer);
    kc->lidx = malloc((size_t)p->n_layer * sizeof *kc->lidx);
    if (!kc->lgrp || !kc->lswa || !kc->lidx)
        return RVL_ENOMEM;
    kc->n_grp = 1; /* the global group, perhaps empty */
    for (uint32_t l = 0; l < p->n_layer; l++) {
        uint32_t w = p->window ? p->window[l] : 0;
        kc->lswa[l] = w != 0;
        if (w >= p->n_ctx)
            w = 0; /* a window no query can reach past: global */
        uint32_t gi = 0;
        while (gi < kc->n_grp && kc->grp[gi].window != w)
            gi++;
        if (gi == kc->n_grp) {
            if (gi == MAXG)
                return rvl_seterr(RVL_EUNSUPPORTED, "KV cache: more than %d different sliding "
                                  "windows (layer %u has %u)", MAXG - 1, l, w);
            kc->grp[kc->n_grp++].window = w;
        }
        kc->lgrp[l] = (uint8_t)gi;
        kc->lidx[l] = kc->grp[gi].n_layer++;
    }
    if (kc->grp[0].n_layer == 0) { /* every layer has a window: no global group */
        memmove(kc->grp, kc->grp + 1, (kc->n_grp - 1) * sizeof *kc->grp);
        memset(&kc->grp[--kc->n_grp], 0, sizeof *kc->grp);
        for (uint32_t l = 0; l < p->n_layer; l++)
            kc->lgrp[l]--;
    }
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        kvc_group *g = &kc->grp[gi];
        g->layer = malloc((g->n_layer ? g->n_layer : 1) * sizeof *g->layer);
        if (!g->layer)
            return RVL_ENOMEM;
    }
    for (uint32_t l = 0; l < p->n_layer; l++)
        kc->grp[kc->lgrp[l]].layer[kc->lidx[l]] = l;
    return 0;
}

static int check_params(const rvl_kvcache_params *p)
{
    const int hd = (int)p->head_dim;
    if (!p->n_layer || !p->n_head_kv || !p->n_head || p->n_head % p->n_head_kv || !p->n_ctx)
        return rvl_seterr(RVL_EINVAL, "KV cache: bad geometry (%u heads, %u kv heads)", p->n_head,
                          p->n_head_kv);
    if (hd < 1 || hd > RVL_ATTN_MAX_HEAD_DIM)
        return rvl_seterr(RVL_EUNSUPPORTED, "KV cache: head_dim %d is out of range (1 .. %d)", hd,
                          RVL_ATTN_MAX_HEAD_DIM);
    if (p->fmt_k[0] != p->fmt_v[0] || (p->fmt_k[0] != RVL_KVQ_F16 && p->fmt_k[0] != RVL_KVF_F32))
        return rvl_seterr(RVL_EINVAL, "KV cache: the hot tier must be f16 or f32 for keys and values");
    if (p->v_is_k) /* the value side reads key pages: formats whose two layouts are one */
        for (int t = 0; t < 3; t++) {
            const int f = p->fmt_k[t];
            if (p->fmt_v[t] != f)
                return rvl_seterr(RVL_EINVAL, "KV cache: MLA's latent cache (the values are the "
                                  "keys) needs the same formats for keys and values, tier %d has "
                                  "%s and %s", t, rvl_kvcache_fmt_name(f),
                                  rvl_kvcache_fmt_name(p->fmt_v[t]));
            if (f != RVL_KVF_F32 && f != RVL_KVQ_F16 && f != RVL_KVQ_Q8)
                return rvl_seterr(RVL_EINVAL, "KV cache: MLA's latent cache (the values are the "
                                  "keys) takes f32, f16, q8, or tiered with q8 as its coldest "
                                  "tier, not %s", rvl_kvcache_fmt_name(f));
        }
    for (int kind = 0; kind < 2; kind++)
        for (int t = 0; t < 3; t++) {
            const int f = kind ? p->fmt_v[t] : p->fmt_k[t];
            if (f == RVL_KVF_F32)
                continue;
            const char *why = rvl_kvq_check(f, kind, hd);
            if (why)
                return rvl_seterr(RVL_EINVAL, "KV cache %s: %s", kind ? "values" : "keys", why);
        }
    if (p->rope_off >= (uint32_t)hd)
        return rvl_seterr(RVL_EINVAL, "KV cache: the rotated dims start at %u, past head_dim %d",
                          p->rope_off, hd);
    for (size_t i = 0; p->sinks && i < (size_t)p->n_layer * p->n_head; i++)
        if (isnan(p->sinks[i]) || p->sinks[i] == INFINITY)
            return rvl_seterr(RVL_EINVAL, "KV cache: the attention-sink logit of layer %zu, head "
                              "%zu is %f", i / p->n_head, i % p->n_head, p->sinks[i]);
    return 0;
}

/* The cache's layout from p (no memory for pages yet): groups, page
 * bytes, tiers, and each group's slots per layer and tier for one cache. */
static int layout(rvl_kvcache *kc, const rvl_kvcache_params *p)
{
    const int hd = (int)p->head_dim;
    kc->p = *p;
    kc->p.window = NULL; /* not the caller's array: the groups hold the windows */
    kc->p.sinks = NULL;  /* nor these: kc->sinks */
    kc->nkind = p->v_is_k ? 1 : 2;
    kc->kv_dim = p->n_head_kv * p->head_dim;
    kc->max_pages = cdiv(p->n_ctx, PG);
    kc->maxtier = p->hot == RVL_KVC_UNBOUNDED ? 0 : p->warm == RVL_KVC_UNBOUNDED ? 1 : 2;
    const uint32_t mp = kc->max_pages;
    int rc = make_groups(kc, p);
    if (rc < 0)
        return rc == RVL_ENOMEM ? rvl_seterr(RVL_ENOMEM, "out of memory") : rc;
    for (int t = 0; t < 3; t++)
        for (int kind = 0; kind < 2; kind++) {
            const int f = kind ? p->fmt_v[t] : p->fmt_k[t];
            kc->pb[kind][t] = fmt_page_bytes(f, kind, hd);
            kc->sb[kind][t] = kc->pb[kind][t] * p->n_head_kv;
            if (t > 0 && t <= kc->maxtier) {
                kc->tq_k |= kind == 0 && is_tq(f);
                kc->tq_v |= kind == 1 && is_tq(f);
                if (kind == 0 && f != RVL_KVQ_F16 && f != RVL_KVF_F32 && center_ok(p))
                    kc->kc_state = KC_PENDING;
            }
        }
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        kvc_group *g = &kc->grp[gi];
        g->sink = g->window ? 0 : p->sink; /* a window hides the first tokens anyway */
        uint32_t cap[3];
        cap[0] = p->hot == RVL_KVC_UNBOUNDED ? mp : cdiv(p->hot, PG) + 3 + cdiv(g->sink, PG);
        cap[1] = kc->maxtier < 1 ? 0
                 : p->warm == RVL_KVC_UNBOUNDED ? mp : cdiv((uint64_t)p->hot + p->warm, PG) + 3;
        cap[2] = kc->maxtier == 2 ? mp : 0;
        /* a ring: the window, the batch being added, partial pages at both ends */
        g->ring = g->window ? cdiv((uint64_t)g->window + RVL_KVC_MAX_BATCH, PG) + 2 : 0;
        if (g->ring > mp)
            g->ring = mp;
        for (int t = 0; t < 3; t++) {
            if (g->ring && cap[t] > g->ring)
                cap[t] = g->ring;
            g->cap[t] = cap[t] < mp ? cap[t] : mp;
        }
    }
    return 0;
}

/* ====================================================================
 * The store
 *
 * The slots of a cache live in a store (rvl_kvstore): per layer group,
 * tier and kind a pool, per group and tier the free slots and each slot's
 * reference count. rvl_kvcache_open makes a private store, exactly the
 * pools it had alone (slots reused last-freed first). A shared store
 * (rvl_kvstore_open) serves the n_seq caches of an rvl_batch: pools of
 * n_seq caches' slots, those of the global layers capped at the budget
 * (plus 2 per cache: a page moving to a tier is given its new slot before
 * it frees the old one); and an index of what each slot holds (the
 * chained hash, ids and key centre of a full page with known ids), so
 * that a sequence maps the pages another computed (rvl_kvcache_share) and
 * an aging page takes the colder slot another sequence encoded already.
 * A freed slot stays findable until it is reused, least recently freed
 * first: a prefix cache in the free memory, as vLLM's. Rule: a cache
 * writes only to a slot no other cache holds: the page being filled is
 * never indexed (only full hashed pages are) and every path that changes
 * a page in place (truncate to the middle of a page, key centering) or
 * rewrites it (context shift, session loading, aging) copies it first or
 * writes a new slot (move_page, page_own). Keys stored centred are
 * shared only between caches with the same centre (the tag: xxh3 of the
 * centre; 0 uncentred).
 * ==================================================================== */

static void store_free(rvl_kvstore *st)
{
    if (!st)
        return;
    for (uint32_t gi = 0; gi < MAXG; gi++) {
        kvs_group *s = &st->grp[gi];
        for (int t = 0; t < 3; t++) {
            free(s->pool[0][t]);
            if (s->pool[1][t] != s->pool[0][t]) /* v_is_k: one pool */
                free(s->pool[1][t]);
            free(s->freel[t]);
            free(s->ref[t]);
            free(s->ix[t]);
        }
    }
    for (int i = 0; i < KVS_CENTRES; i++)
        free(st->centre[i].mu);
    free(st->window);
    free(st->sinks);
    free(st);
}
/* A pool's memory, zeroed as calloc's, on 2 MiB pages where the kernel
 * gives them (transparent huge pages in "madvise" mode): decode at depth
 * reads every page of a layer's cache for each token, a few KiB per page
 * and head, and on 4 KiB pages nearly every one of those reads was a TLB
 * miss (perf: the key and value loads of the attention tiles). Pages are
 * still touched only as slots are used. */
static void *pool_calloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    if (p && size && n > huge / size) {
        const uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
        const uintptr_t e = ((uintptr_t)p + n * size) & ~(huge - 1);
        if (e > a)
            (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
    }
#endif
    return p;
}


/* A store for n_seq caches laid out as kc, the global group capped at
 * budget pages (shared); NULL when out of memory. */
static rvl_kvstore *store_new(const rvl_kvcache *kc, uint32_t n_seq, uint32_t budget, bool shared)
{
    rvl_kvstore *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->shared = shared;
    st->n_grp = kc->n_grp;
    bool ok = true;
    for (int t = 0; t < 3; t++)
        st->slot_bytes[t] = slot_bytes(kc, t);
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        const kvc_group *g = &kc->grp[gi];
        kvs_group *s = &st->grp[gi];
        s->n_layer = g->n_layer;
        for (int t = 0; t < 3; t++) {
            uint64_t cap = (uint64_t)g->cap[t] * n_seq;
            if (shared && gi == 0 && !g->window && cap > (uint64_t)budget + 2 * n_seq)
                cap = (uint64_t)budget + 2 * n_seq;
            if (cap > INT32_MAX)
                return store_free(st), NULL;
            s->cap[t] = (uint32_t)cap;
            for (int kind = 0; kind < kc->nkind; kind++)
                if (s->cap[t] && g->n_layer) {
                    s->pool[kind][t] = pool_calloc((size_t)g->n_layer * s->cap[t], kc->sb[kind][t]);
                    ok &= s->pool[kind][t] != NULL;
                }
            if (kc->nkind == 1) /* v_is_k: the value side reads the key pages */
                s->pool[1][t] = s->pool[0][t];
            s->freel[t] = malloc(((size_t)s->cap[t] + 1) * sizeof(int32_t));
            s->ref[t] = calloc((size_t)s->cap[t] + 1, sizeof(uint32_t));
            ok &= s->freel[t] && s->ref[t];
            if (shared && t <= kc->maxtier) {
                s->ix[t] = calloc((size_t)s->cap[t] + 1, sizeof(kvs_entry));
                ok &= s->ix[t] != NULL;
            }
            s->nfree[t] = s->cap[t]; /* shared: a FIFO from slot 0 (private: free_all's stack) */
            for (uint32_t i = 0; ok && i < s->cap[t]; i++)
                s->freel[t][i] = (int32_t)i;
        }
    }
    st->budget = budget;
    for (int i = 0; shared && kc->kc_state != KC_OFF && i < KVS_CENTRES; i++)
        ok &= (st->centre[i].mu = malloc((size_t)kc->p.n_layer * kc->kv_dim * sizeof(float))) !=
              NULL;
    if (!ok) {
        store_free(st);
        return NULL;
    }
    return st;
}

/* The pools of the store st (private or shared) given to kc's groups. */
static void store_attach(rvl_kvcache *kc, rvl_kvstore *st)
{
    kc->st = st;
    st->users++;
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        kvc_group *g = &kc->grp[gi];
        g->s = &st->grp[gi];
        for (int t = 0; t < 3; t++) {
            g->cap[t] = g->s->cap[t];
            g->pool[0][t] = g->s->pool[0][t];
            g->pool[1][t] = g->s->pool[1][t];
        }
    }
}

static int cache_open(rvl_kvcache **out, const rvl_kvcache_params *p, int n_threads,
                      rvl_kvstore *shared)
{
    *out = NULL;
    const int hd = (int)p->head_dim;
    int rc = check_params(p);
    if (rc < 0)
        return rc;
    rvl_kvcache *kc = calloc(1, sizeof *kc);
    if (!kc)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    if ((rc = layout(kc, p)) < 0) {
        rvl_kvcache_close(kc);
        return rc;
    }
    const uint32_t mp = kc->max_pages;
    rvl_kvstore *st = shared ? shared : store_new(kc, 1, 0, false);
    if (!st) {
        rvl_kvcache_close(kc);
        return rvl_seterr(RVL_ENOMEM, "out of memory for a KV cache of %u tokens", p->n_ctx);
    }
    store_attach(kc, st);
    bool ok = true;
    size_t pool_bytes = 0;
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        kvc_group *g = &kc->grp[gi];
        for (int t = 0; t <= kc->maxtier; t++)
            pool_bytes += (size_t)g->n_layer * g->cap[t] * slot_bytes(kc, t);
        g->tier = calloc(mp, 1);
        g->slot = calloc(mp, sizeof(int32_t));
        g->pt0 = calloc(mp, sizeof(int32_t));
        ok &= g->tier && g->slot && g->pt0;
    }
    kc->ak = rvl_attn_get();
    kc->qk = rvl_kvq_get();
    const bool f32 = p->fmt_k[0] == RVL_KVF_F32;
    const kvc_group *g0 = &kc->grp[kc->lgrp[0]];
    kc->ap = (rvl_attn_params){
        .head_dim = hd, .n_head = (int)p->n_head, .n_head_kv = (int)p->n_head_kv,
        .scale = p->scale, .softcap = p->softcap, .window = 0, .q_f16 = p->q_f16 && !f32,
        .kv_type = f32 ? RVL_ATTN_F32 : RVL_ATTN_F16, .page_tokens = PG,
        .k = g0->pool[0][0], .v = g0->pool[1][0], .page_stride = kc->sb[0][0],
        .head_stride = kc->pb[0][0], .page_table = g0->pt0};
    const char *why = ok ? rvl_attn_check(&kc->ap) : NULL;
    if (why) {
        rvl_kvcache_close(kc);
        return rvl_seterr(RVL_EINVAL, "KV cache: %s", why);
    }
    kc->nth = n_threads > 0 ? n_threads : 1;
    const size_t g = p->n_head / p->n_head_kv;
    size_t gen = (2 * rvl_attn_pad16(g * PG) + 2 * rvl_attn_pad16(g) + 2 * rvl_attn_pad16(g * hd)) *
                 sizeof(float);
    size_t ker = rvl_attn_ws_size(&kc->ap);
    kc->ws_bytes = ((gen > ker ? gen : ker) + 63) & ~(size_t)63;
    if (ok && posix_memalign((void **)&kc->ws, 64, (size_t)kc->nth * kc->ws_bytes) != 0)
        kc->ws = NULL;
    const size_t nparts = 2 * (RVL_KVC_MAX_BATCH > MAXC ? RVL_KVC_MAX_BATCH : MAXC);
    kc->partials = malloc(nparts * p->n_head * ((size_t)hd + 2) * sizeof(float));
    kc->qrot = malloc((size_t)RVL_KVC_MAX_BATCH * p->n_head * hd * sizeof(float));
    kc->tmp = malloc((size_t)PG * hd * sizeof(float));
    if (kc->kc_state != KC_OFF) {
        kc->kmean = calloc((size_t)p->n_layer * kc->kv_dim, sizeof(float));
        ok &= kc->kmean != NULL;
    }
    kc->ids = malloc((size_t)p->n_ctx * sizeof(int32_t));
    kc->hash = malloc((size_t)mp * sizeof(uint64_t));
    /* the LRU of dropped pages: at most RVL_KVC_LRU_PAGES pages and an
     * eighth of the cache's bytes */
    for (int t = 0; t <= kc->maxtier; t++) {
        const size_t b = (size_t)p->n_layer * slot_bytes(kc, t);
        kc->lru_bytes = b > kc->lru_bytes ? b : kc->lru_bytes;
    }
    /* (a shared store's caches have none: its index is their prefix cache) */
    const size_t lru_max = shared ? 0 : pool_bytes / 8 / kc->lru_bytes;
    kc->lru_cap = lru_max < RVL_KVC_LRU_PAGES ? (uint32_t)lru_max : RVL_KVC_LRU_PAGES;
    if (kc->lru_cap) {
        kc->lru = calloc(kc->lru_cap, sizeof *kc->lru);
        kc->lru_data = malloc(kc->lru_cap * kc->lru_bytes);
    }
    kc->f16f = rvl_kformat_get(RVL_K_F16);
    if (p->sinks) {
        const size_t ns = (size_t)p->n_layer * p->n_head;
        kc->sinks = malloc(ns * sizeof *kc->sinks);
        ok &= kc->sinks != NULL;
        if (kc->sinks)
            memcpy(kc->sinks, p->sinks, ns * sizeof *kc->sinks);
        kc->p.sinks = kc->sinks;
    }
    if (!ok || !kc->ws || !kc->partials || !kc->qrot || !kc->tmp || !kc->ids || !kc->hash ||
        (kc->lru_cap && (!kc->lru || !kc->lru_data))) {
        rvl_kvcache_close(kc);
        return rvl_seterr(RVL_ENOMEM, "out of memory for a KV cache of %u tokens", p->n_ctx);
    }
    free_all(kc);
    *out = kc;
    return 0;
}

int rvl_kvcache_open(rvl_kvcache **out, const rvl_kvcache_params *p, int n_threads)
{
    return cache_open(out, p, n_threads, NULL);
}

int rvl_kvcache_open_on(rvl_kvcache **out, rvl_kvstore *st, int n_threads)
{
    return cache_open(out, &st->p, n_threads, st);
}

int rvl_kvstore_open(rvl_kvstore **out, const rvl_kvcache_params *p, uint32_t n_seq,
                     uint32_t budget_pages)
{
    *out = NULL;
    int rc = check_params(p);
    if (rc < 0)
        return rc;
    rvl_kvcache *kc = calloc(1, sizeof *kc); /* its layout only */
    if (!kc)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    if ((rc = layout(kc, p)) < 0) {
        rvl_kvcache_close(kc);
        return rc;
    }
    const uint32_t all = kc->grp[0].window ? kc->grp[0].cap[0] * n_seq : kc->max_pages * n_seq;
    if (!budget_pages || budget_pages > all)
        budget_pages = all;
    rvl_kvstore *st = store_new(kc, n_seq, budget_pages, true);
    const size_t nl = p->n_layer, ns = nl * p->n_head;
    if (st && (!(st->window = calloc(nl, sizeof *st->window)) ||
               (p->sinks && !(st->sinks = malloc(ns * sizeof *st->sinks))))) {
        store_free(st);
        st = NULL;
    }
    if (!st) {
        rvl_kvcache_close(kc);
        return rvl_seterr(RVL_ENOMEM, "out of memory for a KV store of %u pages", budget_pages);
    }
    if (p->window)
        memcpy(st->window, p->window, nl * sizeof *st->window);
    if (p->sinks)
        memcpy(st->sinks, p->sinks, ns * sizeof *st->sinks);
    st->p = *p;
    st->p.window = st->window;
    st->p.sinks = st->sinks;
    rvl_kvcache_close(kc);
    *out = st;
    return 0;
}

void rvl_kvstore_close(rvl_kvstore *st)
{
    store_free(st);
}

void rvl_kvcache_close(rvl_kvcache *kc)
{
    if (!kc)
        return;
    if (kc->st && kc->st->shared) {
        free_all(kc); /* its references */
        kc->st->users--;
    } else {
        store_free(kc->st);
    }
    for (uint32_t gi = 0; gi < MAXG; gi++) {
        kvc_group *g = &kc->grp[gi];
        free(g->layer);
        free(g->tier);
        free(g->slot);
        free(g->pt0);
    }
    free(kc->lgrp);
    free(kc->lswa);
    free(kc->lidx);
    free(kc->ws);
    free(kc->partials);
    free(kc->qrot);
    free(kc->tmp);
    free(kc->kmean);
    free(kc->ids);
    free(kc->hash);
    free(kc->lru);
    free(kc->lru_data);
    free(kc->sinks);
    free(kc);
}

const rvl_kvcache_params *rvl_kvcache_params_of(const rvl_kvcache *kc) { return &kc->p; }
uint32_t rvl_kvcache_n(const rvl_kvcache *kc) { return kc->n; }
uint32_t rvl_kvcache_n_pages(const rvl_kvcache *kc) { return cdiv(kc->n, PG); }
int rvl_kvcache_page_tier(const rvl_kvcache *kc, uint32_t layer, uint32_t page)
{
    return cgroup_of(kc, layer)->tier[page];
}
size_t rvl_kvcache_page_bytes(const rvl_kvcache *kc, int kind, int tier) { return kc->pb[kind][tier]; }
uint32_t rvl_kvcache_window(const rvl_kvcache *kc, uint32_t layer) { return cgroup_of(kc, layer)->window; }
uint32_t rvl_kvcache_first_page(const rvl_kvcache *kc, uint32_t layer)
{
    return cgroup_of(kc, layer)->first;
}

void rvl_kvcache_reset(rvl_kvcache *kc)
{
    lru_evict(kc, 0);
    free_all(kc);
    kc->noshare = false;
    /* a sequence of a shared store starts again as a new cache: it fixes its
     * own key centre (the store's index tags each page with the centre it was
     * stored with, and remembers centres to hand over) - the logits it gets in
     * a cache of its own. A private cache keeps its centre ("Key centering":
     * its LRU pages keep their meaning). */
    if (kc->st->shared && kc->kc_state == KC_SET)
        kc->kc_state = KC_PENDING;
}

void *rvl_kvcache_page_data(rvl_kvcache *kc, uint32_t layer, int kind, uint32_t page)
{
    return page_ptr(kc, layer, kind, page);
}

double rvl_kvcache_tier_token_bytes(const rvl_kvcache *kc, int tier)
{
    return (double)kc->p.n_layer * (double)slot_bytes(kc, tier) / PG;
}

/* Bytes the layers of group g hold at n positions: a ring its newest
 * `ring` pages (what rvl_kvcache_begin leaves, whatever the batches),
 * every page otherwise (trim false: also a ring's, with the global
 * layers' sink), each in the tier its age gives. */
static uint64_t group_bytes(const rvl_kvcache *kc, const kvc_group *g, uint32_t n, bool trim)
{
    kvc_group as = *g;
    if (!trim)
        as.sink = kc->p.sink;
    const uint32_t np = cdiv(n, PG);
    const uint32_t first = trim && g->ring && np > g->ring ? np - g->ring : 0;
    uint64_t b = 0;
    for (uint32_t pg = first; pg < np; pg++) {
        const int t = (uint64_t)(pg + 1) * PG <= n ? want_tier(kc, &as, pg, n) : 0;
        b += slot_bytes(kc, t);
    }
    return b * g->n_layer;
}

void rvl_kvcache_usage(const rvl_kvcache *kc, uint32_t n, rvl_kv_usage *u)
{
    *u = (rvl_kv_usage){.n = n < kc->p.n_ctx ? n : kc->p.n_ctx};
    uint64_t gb = 0, wb = 0;
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        const kvc_group *g = &kc->grp[gi];
        const uint64_t b = group_bytes(kc, g, u->n, true);
        u->bytes += b;
        u->bytes_untrimmed += group_bytes(kc, g, u->n, false);
        if (g->window) {
            u->n_windowed += g->n_layer;
            u->window = g->window > u->window ? g->window : u->window;
            wb += b;
        } else {
            u->n_global += g->n_layer;
            gb += b;
        }
    }
    u->global_layer_bytes = u->n_global ? (double)gb / u->n_global : 0;
    u->windowed_layer_bytes = u->n_windowed ? (double)wb / u->n_windowed : 0;
}

void rvl_kvcache_read_page(rvl_kvcache *kc, uint32_t layer, int kind, uint32_t page, uint32_t head,
                       float *rows)
{
    const kvc_group *g = cgroup_of(kc, layer);
    const int t = g->tier[page];
    const int f = kind ? kc->p.fmt_v[t] : kc->p.fmt_k[t];
    const unsigned char *src = page_ptr(kc, layer, kind, page) + head * kc->pb[kind][t];
    decode_page(f, kind, (int)kc->p.head_dim, src, PG, rows);
    if (kind == 0 && kc->kc_state == KC_SET)
        center_rows(kc, layer, head, rows, PG, 1.0f);
}

/* ====================================================================
 * Writing, aging, truncation
 * ==================================================================== */

void rvl_kvcache_begin(rvl_kvcache *kc, uint32_t nb)
{
    const uint32_t last = (kc->n + nb - 1) / PG;
    if (last < kc->n_pages)
        return;
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        kvc_group *g = &kc->grp[gi];
        ring_make_room(g, last + 1);
        for (uint32_t pg = kc->n_pages; pg <= last; pg++)
            page_set(g, pg, 0, slot_alloc(g, 0)); /* cap[0] covers it (see the top) */
    }
    kc->n_pages = last + 1;
}

void rvl_kvcache_write(rvl_kvcache *kc, uint32_t layer, uint32_t pos, uint32_t nb, const float *k,
                   size_t k_stride, const float *v, size_t v_stride)
{
    const uint32_t hd = kc->p.head_dim;
    const bool f32 = kc->p.fmt_k[0] == RVL_KVF_F32;
    const size_t es = f32 ? 4 : 2;
    for (uint32_t t = 0; t < nb; t++) {
        const uint32_t P = pos + t, pg = P / PG, j = P % PG;
        for (int kind = 0; kind < kc->nkind; kind++) { /* v_is_k: v unused */
            const float *src = kind ? v + t * v_stride : k + t * k_stride;
            unsigned char *base = page_ptr(kc, layer, kind, pg) + (size_t)j * hd * es;
            for (uint32_t h = 0; h < kc->p.n_head_kv; h++) {
                unsigned char *dst = base + h * kc->pb[kind][0];
                const float *row = src + (size_t)h * hd;
                float c[RVL_ATTN_MAX_HEAD_DIM];
                if (kind == 0 && kc->kc_state == KC_SET) {
                    const float *mu = kc->kmean + ((size_t)layer * kc->p.n_head_kv + h) * hd;
                    for (uint32_t i = 0; i < hd; i++)
                        c[i] = row[i] - mu[i];
                    row = c;
                }
                if (f32)
                    memcpy(dst, row, hd * sizeof(float));
                else
                    kc->f16f->quantize(row, dst, hd, NULL);
            }
        }
    }
}

void rvl_kvcache_commit(rvl_kvcache *kc, uint32_t nb)
{
    kc->n += nb;
    hash_pages(kc);
    age_pages(kc);
}

/* ====================================================================
 * Key centering
 *
 * Softmax does not change when the same number is added to every score
 * of a query, so keys may be stored as k - mu for any fixed mu per layer
 * and kv head: q.(k - mu) = q.k - q.mu. Keys of real models share a large
 * common component (SmolLM2-135M, wikitext-2: about 69% of a key's energy
 * is the mean over positions), which costs a per-vector quantizer its
 * precision without carrying information; stored centred, the quantized
 * formats spend their levels on what differs between positions (TQ keys
 * are rotated and normalized after centering: their norm is the centred
 * key's). Caches with quantized keys fix mu just before the first key
 * page is quantized: the mean of positions 1 .. n - 1 (position 0, the
 * sink, is an outlier) of every layer and kv head; the f16/f32 pages
 * written so far (and their copies in the LRU) are centred in place, and
 * later rows are centred as they are written. mu then never changes for
 * the life of the cache (resets included: LRU pages keep their meaning);
 * session files carry it. Measured (SmolLM2-135M, wikitext-2, ctx 2048,
 * 8 windows, perplexity against f16, before -> after): q8 +0.15% ->
 * +0.09%, tq4 +1.61% -> +1.43%, tq3 +7.29% -> +4.82%, tiered 256/2048/tq4
 * +0.02% -> -0.05%, tiered 256/512/tq4 +0.42% -> +0.49% (README "KV cache
 * formats"). Simulated on the same keys (tests/ref/kv_centering.py), the
 * attention KL of tq4 keys halves (0.030 -> 0.016) with a centre from 256
 * positions, 0.019 from 64: an earlier, longer prefix estimates it better.
 * Centering is off (center_ok) where that invariance does not hold or the
 * keys are read as values: a sink logit is compared with the scores as
 * they are, a soft-cap bends them by their size, and MLA's latent cache
 * (v_is_k) reads its values from the key pages.
 * ==================================================================== */

/* Subtracts (sign -1) or adds (+1) mu of layer l, kv head h, from n rows. */
static void center_rows(const rvl_kvcache *kc, uint32_t l, uint32_t h, float *rows, int n, float sign)
{
    const uint32_t hd = kc->p.head_dim;
    const float *mu = kc->kmean + ((size_t)l * kc->p.n_head_kv + h) * hd;
    for (int j = 0; j < n; j++)
        for (uint32_t i = 0; i < hd; i++)
            rows[(size_t)j * hd + i] += sign * mu[i];
}

/* The tag of the keys this cache stores (section "The store"). */
static void set_tag(rvl_kvcache *kc)
{
    kc->mu_hash = XXH3_64bits(kc->kmean, (size_t)kc->p.n_layer * kc->kv_dim * sizeof(float));
}

/* A shared store remembers the centre of the keys of ids[0 .. n): a cache
 * that maps those pages (rvl_kvcache_share) takes it where it would have
 * fixed its own from the same keys. */
static void centre_put(rvl_kvcache *kc)
{
    rvl_kvstore *st = kc->st;
    if (!st->shared || !st->centre[0].mu || kc->noshare || kc->ids_n < kc->n)
        return;
    const uint64_t h = XXH3_64bits(kc->ids, (size_t)kc->n * sizeof *kc->ids);
    int e = 0; /* the same centre's entry, else an empty or the least recently used one */
    for (int i = 0; i < KVS_CENTRES; i++) {
        if (st->centre[i].used && st->centre[i].ids_hash == h && st->centre[i].c == kc->n) {
            e = i;
            break;
        }
        if (st->centre[i].used < st->centre[e].used)
            e = i;
    }
    st->centre[e].ids_hash = h;
    st->centre[e].c = kc->n;
    st->centre[e].used = ++st->tick;
    memcpy(st->centre[e].mu, kc->kmean, (size_t)kc->p.n_layer * kc->kv_dim * sizeof(float));
}

static const float *centre_get(rvl_kvstore *st, const int32_t *ids, uint32_t c)
{
    const uint64_t h = XXH3_64bits(ids, (size_t)c * sizeof *ids);
    for (int i = 0; st->centre[0].mu && i < KVS_CENTRES; i++)
        if (st->centre[i].used && st->centre[i].ids_hash == h && st->centre[i].c == c) {
            st->centre[i].used = ++st->tick;
            return st->centre[i].mu;
        }
    return NULL;
}

/* Centres the keys of one tier-0 slot of layer l in place. */
static void center_slot(rvl_kvcache *kc, uint32_t l, unsigned char *slot)
{
    const int hd = (int)kc->p.head_dim, f = kc->p.fmt_k[0];
    for (uint32_t h = 0; h < kc->p.n_head_kv; h++) {
        unsigned char *pgp = slot + h * kc->pb[0][0];
        decode_page(f, 0, hd, pgp, PG, kc->tmp);
        center_rows(kc, l, h, kc->tmp, PG, -1.0f);
        if (f == RVL_KVF_F32)
            memcpy(pgp, kc->tmp, (size_t)PG * hd * sizeof(float));
        else
            kc->f16f->quantize(kc->tmp, pgp, (int64_t)PG * hd, NULL);
    }
}

static void center_keys(rvl_kvcache *kc)
{
    const uint32_t hd = kc->p.head_dim, nkv = kc->p.n_head_kv, n = kc->n;
    for (uint32_t l = 0; l < kc->p.n_layer; l++)
        for (uint32_t h = 0; h < nkv; h++) {
            double acc[RVL_ATTN_MAX_HEAD_DIM] = {0};
            uint32_t cnt = 0;
            for (uint32_t pg = cgroup_of(kc, l)->first; pg * PG < n; pg++) {
                rvl_kvcache_read_page(kc, l, 0, pg, h, kc->tmp); /* all tier 0 still */
                for (uint32_t j = pg ? 0 : 1; j < PG && pg * PG + j < n; j++, cnt++)
                    for (uint32_t i = 0; i < hd; i++)
                        acc[i] += kc->tmp[(size_t)j * hd + i];
            }
            float *mu = kc->kmean + ((size_t)l * nkv + h) * hd;
            for (uint32_t i = 0; i < hd; i++)
                mu[i] = cnt ? (float)(acc[i] / cnt) : 0.0f;
        }
    kc->kc_state = KC_SET;
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        kvc_group *g = &kc->grp[gi];
        for (uint32_t pg = g->first; pg < kc->n_pages; pg++) {
            page_own(kc, g, pg); /* another sequence's keys stay as they are */
            for (uint32_t li = 0; li < g->n_layer; li++)
                center_slot(kc, g->layer[li], slot_ptr(kc, g, 0, 0, li, g->slot[pg]));
        }
    }
    kc->centred_at = kc->n;
    set_tag(kc);
    centre_put(kc);
    for (uint32_t gi = 0; gi < kc->n_grp; gi++)
        for (uint32_t pg = kc->grp[gi].first; pg < kc->n_pages; pg++)
            ix_put(kc, &kc->grp[gi], pg); /* findable again, with the centre */
    /* the LRU's pages (all tier 0: nothing was quantized before) */
    for (uint32_t i = 0; i < kc->lru_cap; i++) {
        bool hot = kc->lru[i].used;
        for (uint32_t gi = 0; gi < kc->n_grp; gi++)
            hot &= kc->lru[i].tier[gi] == 0;
        if (!hot)
            continue;
        unsigned char *d = kc->lru_data + (size_t)i * kc->lru_bytes;
        for (uint32_t l = 0; l < kc->p.n_layer; l++) {
            center_slot(kc, l, d);
            d += slot_bytes(kc, 0);
        }
    }
}

const float *rvl_kvcache_key_center(const rvl_kvcache *kc)
{
    return kc->kc_state == KC_SET ? kc->kmean : NULL;
}

int rvl_kvcache_load_center(rvl_kvcache *kc, const float *mu)
{
    if (kc->kc_state == KC_OFF) {
        if (mu)
            return rvl_seterr(RVL_EFORMAT, "keys stored centred, but this cache's keys are f16/f32");
        return 0;
    }
    const size_t n = (size_t)kc->p.n_layer * kc->kv_dim;
    const bool same = mu ? kc->kc_state == KC_SET && !memcmp(mu, kc->kmean, n * sizeof *mu)
                         : kc->kc_state == KC_PENDING;
    if (!same) /* the LRU's pages were stored with another centre */
        for (uint32_t i = 0; i < kc->lru_cap; i++)
            kc->lru[i].used = 0;
    if (mu)
        memcpy(kc->kmean, mu, n * sizeof *mu);
    else
        memset(kc->kmean, 0, n * sizeof *mu);
    kc->kc_state = mu ? KC_SET : KC_PENDING;
    set_tag(kc);
    kc->noshare = true; /* how the pages to load were made is not known */
    return 0;
}

/* Pages that aged past a tier boundary to their tier. */
static void age_pages(rvl_kvcache *kc)
{
    if (kc->maxtier == 0 || kc->n < PG)
        return;
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        kvc_group *g = &kc->grp[gi];
        for (int64_t pg = (int64_t)(kc->n / PG) - 1; pg >= (int64_t)g->first; pg--) {
            const int cur = g->tier[pg];
            if (cur >= kc->maxtier)
                break; /* older pages are at least as cold */
            const int want = want_tier(kc, g, (uint32_t)pg, kc->n);
            if (want > cur && kc->kc_state == KC_PENDING)
                center_keys(kc); /* before the first quantized key page */
            if (want > cur)
                move_page(kc, g, (uint32_t)pg, want, PG, true);
        }
    }
}

int rvl_kvcache_truncate(rvl_kvcache *kc, uint32_t n)
{
    if (n > kc->n)
        return rvl_seterr(RVL_ERANGE, "cannot truncate the cache to %u tokens: it holds %u", n,
                          kc->n);
    if (n == 0) {
        rvl_kvcache_reset(kc);
        return 0;
    }
    const kvc_group *gone = window_gone(kc, n);
    if (gone)
        return rvl_seterr(RVL_ERANGE, "cannot truncate the cache to %u tokens: layers with a "
                          "sliding window of %u hold positions from %u on, the next one needs "
                          "%u", n, gone->window, gone->first * PG, n + 1 - gone->window);
    const uint32_t keep_pages = cdiv(n, PG);
    lru_evict(kc, n);
    if (kc->centred_at > n)
        kc->centred_at = n; /* the rows after n will be written centred */
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        kvc_group *g = &kc->grp[gi];
        for (uint32_t pg = keep_pages > g->first ? keep_pages : g->first; pg < kc->n_pages; pg++)
            slot_free(g, g->tier[pg], g->slot[pg]);
    }
    kc->n_pages = keep_pages;
    kc->n = n;
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) { /* the page being filled is full precision, */
        kvc_group *g = &kc->grp[gi];
        if (n % PG && g->tier[n / PG] != 0)
            move_page(kc, g, n / PG, 0, (int)(n % PG), false);
        else if (n % PG)
            page_own(kc, g, n / PG); /* and this cache's alone: it will be written */
    }
    return 0;
}

/* ====================================================================
 * Session loading
 * ==================================================================== */

int rvl_kvcache_load_page(rvl_kvcache *kc, uint32_t layer, uint32_t page, int tier)
{
    kvc_group *g = group_of(kc, layer);
    if (tier < 0 || tier > kc->maxtier)
        return rvl_seterr(RVL_EFORMAT, "layer %u: page %u is in tier %d, which this cache does not "
                          "use", layer, page, tier);
    if (kc->lidx[layer] > 0) { /* the group's first layer gave the page its slot */
        if (page < g->first || page >= g->loaded)
            return rvl_seterr(RVL_EFORMAT, "layer %u holds page %u, the other layers of its "
                              "window (%u) pages %u .. %u", layer, page, g->window, g->first,
                              g->loaded - 1);
        if (g->tier[page] != tier)
            return rvl_seterr(RVL_EFORMAT, "layer %u has page %u in tier %d, layer %u in tier %d",
                              layer, page, tier, g->layer[0], g->tier[page]);
        return 0;
    }
    if (g->loaded == 0) { /* the layer's first page */
        if (page && !g->window)
            return rvl_seterr(RVL_EFORMAT, "layer %u has no sliding window, but its pages start "
                              "at %u, not 0", layer, page);
        g->first = g->loaded = page;
    }
    if (page != g->loaded || page >= kc->max_pages)
        return rvl_seterr(RVL_EFORMAT, "layer %u: page %u out of order or past the context",
                          layer, page);
    if (page > g->first && tier > g->tier[page - 1] && (uint64_t)(page - 1) * PG >= g->sink)
        return rvl_seterr(RVL_EFORMAT, "layer %u: page %u is in tier %d, colder than the older "
                          "page %u (tier %d)", layer, page, tier, page - 1, g->tier[page - 1]);
    if (g->ring && page - g->first >= g->ring)
        return rvl_seterr(RVL_EFORMAT, "layer %u holds more pages than its sliding window of %u "
                          "keeps (%u): saved without trimming the window", layer, g->window,
                          g->ring);
    const int32_t s = slot_alloc(g, tier);
    if (s < 0)
        return rvl_seterr(RVL_EFORMAT, "layer %u: page %u: more pages in tier %d than this "
                          "context holds (%u)", layer, page, tier, g->cap[tier]);
    page_set(g, page, tier, s);
    g->loaded = page + 1;
    return 0;
}

int rvl_kvcache_load_done(rvl_kvcache *kc, uint32_t n)
{
    const uint32_t np = cdiv(n, PG);
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        const kvc_group *g = &kc->grp[gi];
        if (!g->n_layer)
            continue;
        if (g->loaded != np)
            return rvl_seterr(RVL_EFORMAT, "layer %u holds pages up to %u for %u positions",
                              g->layer[0], g->loaded, n);
        if (n % PG && g->tier[n / PG] != 0)
            return rvl_seterr(RVL_EFORMAT, "the partial page %u is not in tier 0", n / PG);
        /* pages quantized without a centre: the centre is 0 from now on */
        for (uint32_t pg = g->first; kc->kc_state == KC_PENDING && pg < np; pg++)
            if (g->tier[pg] != 0) {
                kc->kc_state = KC_SET;
                set_tag(kc);
            }
        /* a page may be colder than its age says (a truncated cache), never
         * warmer: that bounds every tier's population, so aging always finds
         * a slot */
        for (uint32_t pg = g->first; pg < n / PG; pg++)
            if (g->tier[pg] < want_tier(kc, g, pg, n))
                return rvl_seterr(RVL_EFORMAT, "page %u is in tier %d, its age puts it in tier %d",
                                  pg, g->tier[pg], want_tier(kc, g, pg, n));
    }
    for (uint32_t gi = 0; gi < kc->n_grp; gi++)
        kc->grp[gi].loaded = 0; /* every page given a slot is below n_pages now */
    kc->n_pages = np;
    kc->n = n;
    /* a ring may lack keys the next query's window would see (a context
     * shift dropped them): attention sees what it holds, as the saved
     * cache did */
    return 0;
}

/* ====================================================================
 * Prefix reuse
 *
 * A full page whose token ids are known (rvl_kvcache_set_ids) is named by a
 * chained hash: xxh3-64 of its parent's hash (0 for page 0) as 8
 * little-endian bytes followed by its 32 ids as little-endian int32, so
 * equal hashes mean equal prefixes. Full hashed pages that a truncate or
 * a reset drops go to a small LRU allocated at open: at most
 * RVL_KVC_LRU_PAGES (64) entries and an eighth of the cache's bytes (f16
 * SmolLM2-135M, 4096 tokens: 16 pages, 11.3 MiB; memory the kernel maps
 * only once pages are dropped), each a page of every layer, keys and values,
 * in the format of the tier it had, with its ids (checked on a hit, so a
 * hash collision cannot serve wrong keys). rvl_kvcache_reuse matches a prompt
 * against the live pages by hash, the rest of the live cache by tokens,
 * then continues page by page from the LRU. Dropped pages enter newest
 * first, so the oldest ones (a system prompt) are the last replaced.
 * ==================================================================== */

static uint64_t page_hash(uint64_t parent, const int32_t *ids)
{
    unsigned char b[8 + 4 * PG];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(parent >> (8 * i));
    for (int j = 0; j < PG; j++)
        for (int i = 0; i < 4; i++)
            b[8 + 4 * j + i] = (unsigned char)((uint32_t)ids[j] >> (8 * i));
    return XXH3_64bits(b, sizeof b);
}

static void hash_pages(rvl_kvcache *kc)
{
    const uint32_t known = kc->ids_n < kc->n ? kc->ids_n : kc->n;
    while ((kc->hashed + 1) * PG <= known) {
        const uint32_t pg = kc->hashed++;
        kc->hash[pg] = page_hash(pg ? kc->hash[pg - 1] : 0, kc->ids + (size_t)pg * PG);
        for (uint32_t gi = 0; kc->st->shared && gi < kc->n_grp; gi++)
            if (kc->grp[gi].n_layer && pg >= kc->grp[gi].first) /* a shared store's index */
                ix_put(kc, &kc->grp[gi], pg);
    }
}

void rvl_kvcache_set_ids(rvl_kvcache *kc, uint32_t pos, const int32_t *ids, uint32_t n)
{
    if (pos > kc->ids_n || n > kc->p.n_ctx - pos)
        return; /* after a gap of unknown ids: stays unknown */
    memcpy(kc->ids + pos, ids, (size_t)n * sizeof *ids);
    kc->ids_n = pos + n;
    if (kc->hashed > pos / PG)
        kc->hashed = pos / PG;
    hash_pages(kc);
}

void rvl_kvcache_forget(rvl_kvcache *kc)
{
    kc->ids_n = kc->hashed = 0;
    for (uint32_t i = 0; i < kc->lru_cap; i++)
        kc->lru[i].used = 0;
}

uint64_t rvl_kvcache_page_hash(const rvl_kvcache *kc, uint32_t page)
{
    return page < kc->hashed ? kc->hash[page] : 0;
}

/* Page `page`'s slot of every layer to (or from) an LRU entry's data. */
static void page_copy(rvl_kvcache *kc, uint32_t page, unsigned char *data, bool to_cache)
{
    for (uint32_t l = 0; l < kc->p.n_layer; l++)
        for (int kind = 0; kind < kc->nkind; kind++) {
            unsigned char *sp = page_ptr(kc, l, kind, page);
            const size_t b = kc->sb[kind][cgroup_of(kc, l)->tier[page]];
            if (to_cache)
                memcpy(sp, data, b);
            else
                memcpy(data, sp, b);
            data += b;
        }
}

static kvc_lru *lru_find(rvl_kvcache *kc, uint64_t h, const int32_t *ids)
{
    for (uint32_t i = 0; i < kc->lru_cap; i++)
        if (kc->lru[i].used && kc->lru[i].hash == h &&
            !memcmp(kc->lru[i].ids, ids, sizeof kc->lru[i].ids))
            return &kc->lru[i];
    return NULL;
}

/* Before positions n .. are dropped: their full hashed pages that every
 * layer still holds into the LRU; ids and hashes cut to n. */
static void lru_evict(rvl_kvcache *kc, uint32_t n)
{
    uint32_t lo = n / PG;
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) /* a ring's freed pages: no data */
        lo = kc->grp[gi].n_layer && kc->grp[gi].first > lo ? kc->grp[gi].first : lo;
    for (uint32_t pg = kc->hashed; kc->lru_cap && pg-- > lo;) {
        kvc_lru *e = lru_find(kc, kc->hash[pg], kc->ids + (size_t)pg * PG);
        if (!e) { /* a free entry, else the least recently used */
            e = &kc->lru[0];
            for (uint32_t i = 1; i < kc->lru_cap && e->used; i++)
                if (kc->lru[i].used < e->used)
                    e = &kc->lru[i];
        }
        e->hash = kc->hash[pg];
        e->used = ++kc->tick;
        for (uint32_t gi = 0; gi < kc->n_grp; gi++)
            e->tier[gi] = kc->grp[gi].tier[pg];
        memcpy(e->ids, kc->ids + (size_t)pg * PG, sizeof e->ids);
        page_copy(kc, pg, kc->lru_data + (size_t)(e - kc->lru) * kc->lru_bytes, false);
    }
    if (kc->ids_n > n)
        kc->ids_n = n;
    if (kc->hashed > n / PG)
        kc->hashed = n / PG;
}

/* Whether group g can give the page `page` (the next one) a slot in tier
 * t, once a ring made room for it: the colder-with-age rule holds and
 * the tier has a free slot. */
static bool group_can_take(const kvc_group *g, uint32_t page, int t)
{
    if (!g->n_layer)
        return true;
    if (page > g->first && t > g->tier[page - 1] && (uint64_t)(page - 1) * PG >= g->sink)
        return false;
    if (g->s->nfree[t] > 0)
        return true;
    /* a full ring frees its oldest page first */
    return g->ring && page + 1 - g->first > g->ring && g->tier[g->first] == t;
}

/* The next page (the cache ends on a page boundary, every page hashed)
 * from the LRU entry for ids (PG of them) with hash h: false when there is
 * none, or it would break "tiers only get colder with age", or a tier has
 * no free slot. */
static bool lru_restore(rvl_kvcache *kc, const int32_t *ids, uint64_t h)
{
    const uint32_t pg = kc->n_pages;
    kvc_lru *e = lru_find(kc, h, ids);
    if (!e || pg >= kc->max_pages)
        return false;
    for (uint32_t gi = 0; gi < kc->n_grp; gi++)
        if (!group_can_take(&kc->grp[gi], pg, e->tier[gi]))
            return false;
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        kvc_group *g = &kc->grp[gi];
        ring_make_room(g, pg + 1);
        page_set(g, pg, e->tier[gi], slot_alloc(g, e->tier[gi]));
    }
    kc->n_pages = pg + 1;
    page_copy(kc, pg, kc->lru_data + (size_t)(e - kc->lru) * kc->lru_bytes, true);
    memcpy(kc->ids + (size_t)pg * PG, ids, PG * sizeof *ids);
    kc->hash[pg] = h;
    kc->n = kc->ids_n = (pg + 1) * PG;
    kc->hashed = pg + 1;
    e->used = 0; /* live again: a later drop puts it back */
    age_pages(kc);
    return true;
}

uint32_t rvl_kvcache_reuse(rvl_kvcache *kc, const int32_t *ids, uint32_t n)
{
    if (n > kc->p.n_ctx)
        n = kc->p.n_ctx;
    uint32_t k = 0;
    /* whole live pages by hash, then the rest of the live cache by tokens */
    for (uint32_t pg = 0; pg < kc->hashed && (pg + 1) * PG <= n; pg++) {
        if (page_hash(pg ? kc->hash[pg - 1] : 0, ids + (size_t)pg * PG) != kc->hash[pg])
            break;
        k = (pg + 1) * PG;
    }
    const uint32_t known = kc->ids_n < kc->n ? kc->ids_n : kc->n;
    while (k < n && k < known && kc->ids[k] == ids[k])
        k++;
    if (window_gone(kc, k))
        k = 0; /* a ring freed keys the window of position k needs: so would any shorter prefix */
    /* a match that ends inside a page the LRU holds whole: from its start */
    const uint32_t b = k - k % PG;
    if (k % PG && b + PG <= n && kc->hashed >= b / PG && !window_gone(kc, b) &&
        lru_find(kc, page_hash(b ? kc->hash[b / PG - 1] : 0, ids + b), ids + b))
        k = b;
    if (k < kc->n)
        rvl_kvcache_truncate(kc, k); /* cannot fail: k <= n, the windows hold what it needs */
    /* then whole pages dropped earlier */
    while (k % PG == 0 && k == kc->n && kc->hashed == k / PG && k + PG <= n &&
           lru_restore(kc, ids + k, page_hash(k ? kc->hash[k / PG - 1] : 0, ids + k)))
        k += PG;
    return k;
}

/* ====================================================================
 * Sharing (a shared store's caches; section "The store")
 *
 * An empty cache maps the pages of its prompt that the store holds, as if
 * it had computed them in one chunk and committed them: each page in the
 * tier its age then gives, with the cache's key centre (a cache whose
 * keys are not centred yet maps only pages that stay in tier 0: alone, it
 * would fix its centre from these keys before quantizing them); a
 * windowed group only the pages its ring would hold. The run stops at the
 * first page a group lacks, and leaves at least the last token to compute
 * (its logits).
 * ==================================================================== */

/* Whether kc (empty) can map the np pages whose hashes are kc->hash[0 ..
 * np), ids theirs: every group finds each page it would hold. */
static bool share_fits(const rvl_kvcache *kc, const int32_t *ids, uint32_t np)
{
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        const kvc_group *g = &kc->grp[gi];
        const uint32_t first = g->ring && np > g->ring ? np - g->ring : 0; /* what a ring holds */
        for (uint32_t pg = first; g->n_layer && pg < np; pg++) {
            const int t = want_tier(kc, g, pg, np * PG);
            if (t > 0 && kc->kc_state == KC_PENDING)
                return false;
            if (ix_find(g->s, t, kc->hash[pg], page_tag(kc, pg), ids + (size_t)pg * PG) < 0)
                return false;
        }
    }
    return true;
}

/* Whether a commit at n positions quantizes a page of kc (then, keys not
 * centred yet, it fixes their centre first). */
static bool quantizes_at(const rvl_kvcache *kc, uint32_t n)
{
    for (uint32_t gi = 0; gi < kc->n_grp; gi++)
        for (uint32_t pg = 0; kc->grp[gi].n_layer && (pg + 1) * PG <= n; pg++)
            if (want_tier(kc, &kc->grp[gi], pg, n) > 0)
                return true;
    return false;
}

/* share_fits for kc with the key centre mu fixed at c (mu NULL: as it is). */
static bool share_fits_with(rvl_kvcache *kc, const int32_t *ids, uint32_t np, const float *mu,
                            uint32_t c)
{
    if (!mu)
        return share_fits(kc, ids, np);
    const int state = kc->kc_state;
    const uint64_t mh = kc->mu_hash;
    kc->kc_state = KC_SET;
    kc->mu_hash = XXH3_64bits(mu, (size_t)kc->p.n_layer * kc->kv_dim * sizeof(float));
    kc->centred_at = c;
    const bool ok = share_fits(kc, ids, np);
    kc->kc_state = state;
    kc->mu_hash = mh;
    kc->centred_at = 0;
    return ok;
}

/* The pages of ids[0 .. n) kc could map (their hashes into kc->hash), and
 * the key centre it then takes (*mu, fixed at *c; NULL: none). Alone, a
 * cache whose keys are not centred yet fixes their centre at the first
 * commit (of its prompt's chunks of 32) that quantizes a page, from the
 * keys before it: when the mapped pages cover that commit, it takes the
 * centre another cache fixed from the same ids at the same length. */
static uint32_t share_pages(rvl_kvcache *kc, const int32_t *ids, uint32_t n, const float **mu,
                            uint32_t *c)
{
    *mu = NULL;
    *c = 0;
    if (!kc->st->shared || kc->n || kc->n_pages || !ids)
        return 0;
    const kvc_group *g0 = &kc->grp[0];
    uint32_t np = 0;
    while ((np + 1) * PG < n && np < kc->max_pages) {
        const int32_t *pid = ids + (size_t)np * PG;
        kc->hash[np] = page_hash(np ? kc->hash[np - 1] : 0, pid);
        bool held = g0->window != 0; /* the global layers hold every page: the run ends at */
        for (int t = 0; t <= kc->maxtier && !held; t++) /* the first they lack */
            for (uint32_t x = 0; x < g0->s->cap[t] && !held; x++) {
                const kvs_entry *e = &g0->s->ix[t][x];
                held = e->on && e->hash == kc->hash[np] && !memcmp(e->ids, pid, sizeof e->ids);
            }
        if (!held)
            break;
        np++;
    }
    if (kc->kc_state == KC_PENDING)
        for (uint32_t e = 1; e <= np && !*c; e++)
            if (quantizes_at(kc, e * PG))
                *c = e * PG;
    const float *m = *c ? centre_get(kc->st, ids, *c) : NULL;
    while (np && !share_fits_with(kc, ids, np, m && *c <= np * PG ? m : NULL, *c))
        np--;
    *mu = m && *c <= np * PG ? m : NULL;
    return np;
}

uint32_t rvl_kvcache_share(rvl_kvcache *kc, const int32_t *ids, uint32_t n)
{
    const float *mu;
    uint32_t c;
    const uint32_t np = share_pages(kc, ids, n, &mu, &c);
    if (!np)
        return 0;
    if (mu) { /* the centre it would have fixed from these keys */
        memcpy(kc->kmean, mu, (size_t)kc->p.n_layer * kc->kv_dim * sizeof(float));
        kc->kc_state = KC_SET;
        set_tag(kc);
        kc->centred_at = c;
    }
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        kvc_group *g = &kc->grp[gi];
        g->first = g->ring && np > g->ring ? np - g->ring : 0;
        for (uint32_t pg = g->first; g->n_layer && pg < np; pg++) {
            const int t = want_tier(kc, g, pg, np * PG);
            const int32_t x =
                ix_find(g->s, t, kc->hash[pg], page_tag(kc, pg), ids + (size_t)pg * PG);
            slot_take(g, t, x);
            page_set(g, pg, t, x);
        }
    }
    memcpy(kc->ids, ids, (size_t)np * PG * sizeof *ids);
    kc->n = kc->ids_n = np * PG;
    kc->n_pages = kc->hashed = np;
    kc->st->reused += np;
    return np * PG;
}

uint32_t rvl_kvcache_need(rvl_kvcache *kc, const int32_t *ids, uint32_t n_ids, uint32_t n)
{
    const kvc_group *g = &kc->grp[0];
    if (g->window || !kc->st->shared)
        return 0; /* rings: bounded per cache; a private store: room for n_ctx */
    const uint32_t want = cdiv(n < kc->p.n_ctx ? n : kc->p.n_ctx, PG);
    uint32_t need = want > kc->n_pages ? want - kc->n_pages : 0;
    if (kc->maxtier == 0) { /* pages never re-encoded: a shared page stays shared */
        const float *mu;
        uint32_t c;
        const uint32_t sp = share_pages(kc, ids, n_ids, &mu, &c);
        need = need > sp ? need - sp : 0;
    } else { /* aging or centering may give this cache its own copy of a shared page */
        for (uint32_t pg = g->first; pg < kc->n_pages; pg++)
            need += slot_shared(g, g->tier[pg], g->slot[pg]);
    }
    return need;
}

void rvl_kvstore_usage(const rvl_kvstore *st, rvl_batch_kv *u)
{
    memset(u, 0, sizeof *u);
    for (uint32_t gi = 0; gi < st->n_grp; gi++) {
        const kvs_group *s = &st->grp[gi];
        for (int t = 0; t < 3; t++) {
            const uint32_t used = s->cap[t] - s->nfree[t];
            u->bytes += (uint64_t)used * s->n_layer * st->slot_bytes[t];
            if (gi)
                continue;
            u->pages_used += used;
            for (uint32_t x = 0; x < s->cap[t]; x++)
                u->pages_shared += s->ref[t][x] > 1;
        }
    }
    u->pages = st->budget;
    u->pages_free = u->pages_used < st->budget ? st->budget - u->pages_used : 0;
    u->reused_tokens = st->reused * PG;
}

/* ====================================================================
 * Sliding windows
 *
 * A layer with window W attends to the keys t > qp - W only: attn.h's
 * mask on tier-0 pages, quant_chunk's on quantized ones (the rows of the
 * first page before qp - W + 1 score -inf; older pages are not read).
 * Layers are grouped by window (kvc_group: the global layers, then one
 * group per window; Gemma 2 and 3 have two groups, Mistral one), each
 * with its own page table, pools and tiers. A windowed group is a ring:
 * it holds at most ring = ceil((W + RVL_KVC_MAX_BATCH) / 32) + 2 pages
 * (the window, a batch being added, partial pages at both ends), and
 * rvl_kvcache_begin frees its oldest pages only when a new one would
 * exceed that. So its memory is bounded by the window while the global
 * layers keep the whole context, and its slack keeps at least the last
 * W + 66 positions after any batch: a truncate back by up to 66
 * positions (a retried reply's end, the same prompt again) stays valid.
 * Positions still count up to n_ctx (page table, RoPE).
 *
 * A windowed layer's pages age through the tiers like a global layer's
 * (a q8 cache holds its window in q8; a window shorter than `hot` stays
 * f16), without sinks: the window hides the first tokens anyway.
 *
 * Truncating to n is valid while every ring still holds the keys the
 * query at n sees, from n + 1 - W on (window_gone); a shorter prefix
 * needs older keys still, so prefix reuse keeps the match or nothing.
 * A context shift ("Context shift" below) may leave a ring without keys
 * its window would see; attention then sees the keys from the ring's
 * first page on.
 * ==================================================================== */

/* The group (its first, if several) whose ring lacks keys the query at
 * position n, seeing positions n + 1 - W .., needs: they were freed. */
static const kvc_group *window_gone(const rvl_kvcache *kc, uint32_t n)
{
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        const kvc_group *g = &kc->grp[gi];
        if (g->n_layer && g->first && (uint64_t)n + 1 < (uint64_t)g->first * PG + g->window)
            return g;
    }
    return NULL;
}

/* A ring about to hold pages .. pages - 1: its oldest ones freed so that
 * it holds at most `ring`. */
static void ring_make_room(kvc_group *g, uint32_t pages)
{
    while (g->ring && pages - g->first > g->ring) {
        slot_free(g, g->tier[g->first], g->slot[g->first]);
        g->first++;
    }
}

/* ====================================================================
 * Context shift
 *
 * llama.cpp's: positions [keep, keep + n_discard) are dropped, the later
 * ones move down by n_discard and their keys are rotated back by as
 * much (the layers of a window by the windowed layers' angles: Gemma 3's
 * rotate on their own base). Per group: a global group holds every
 * position and is re-laid out whole; a windowed group holds [a, n) (a
 * its ring's first page), which becomes [lo, n - n_discard) with the
 * same rows, re-rotated; its pages start at lo's page (rows before lo
 * zero, never seen: the window starts at lo or later). When the kept
 * part of the ring does not reach back to where the next query's
 * window starts (the first keep positions were freed, and the shift
 * leaves fewer than W positions after them), the ring keeps whole pages
 * of what it held and attention sees those, fewer than W keys, until
 * the window moves past the gap (llama.cpp's SWA cache loses the same
 * keys). Each page goes straight into the tier its new age gives.
 * ==================================================================== */

/* Rotates dims off .. off + rope_dim of each of the n_heads heads of x. */
static void rotate_back(float *x, uint32_t n_heads, uint32_t hd, uint32_t off, const float *cs,
                        const float *sn, uint32_t rope_dim, bool neox)
{
    const uint32_t half = rope_dim / 2;
    for (uint32_t h = 0; h < n_heads; h++) {
        float *r = x + (size_t)h * hd + off;
        for (uint32_t i = 0; i < half; i++) {
            const uint32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            const float x0 = r[a], x1 = r[b];
            r[a] = x0 * cs[i] + x1 * sn[i];
            r[b] = -x0 * sn[i] + x1 * cs[i];
        }
    }
}

/* A layer's old pages [first, np_old) as floats, rows (kind, position,
 * kv_dim); positions before the first page are left as they are. */
static void layer_rows(rvl_kvcache *kc, uint32_t l, const uint8_t *ot, const int32_t *os,
                       uint32_t first, uint32_t np_old, float *rows)
{
    const uint32_t hd = kc->p.head_dim, kvd = kc->kv_dim;
    const kvc_group *g = cgroup_of(kc, l);
    const int *fmts[2] = {kc->p.fmt_k, kc->p.fmt_v};
    for (int kind = 0; kind < kc->nkind; kind++) {
        float *dst = rows + (size_t)kind * np_old * PG * kvd;
        for (uint32_t pg = first; pg < np_old; pg++)
            for (uint32_t h = 0; h < kc->p.n_head_kv; h++) {
                const int t = ot[pg];
                const unsigned char *src = slot_ptr(kc, g, kind, t, kc->lidx[l], os[pg]) +
                                           h * kc->pb[kind][t];
                decode_page(fmts[kind][t], kind, (int)hd, src, PG, kc->tmp);
                if (kind == 0 && kc->kc_state == KC_SET) /* rotate the key, not k - mu */
                    center_rows(kc, l, h, kc->tmp, PG, 1.0f);
                for (uint32_t j = 0; j < PG; j++)
                    memcpy(dst + ((size_t)pg * PG + j) * kvd + (size_t)h * hd,
                           kc->tmp + (size_t)j * hd, hd * sizeof(float));
            }
    }
}

int rvl_kvcache_shift(rvl_kvcache *kc, uint32_t keep, uint32_t n_discard, const float *cos_d,
                  const float *sin_d, const float *cos_w, const float *sin_w, uint32_t rope_dim,
                  bool neox)
{
    const uint32_t n = kc->n, hd = kc->p.head_dim, nkv = kc->p.n_head_kv, kvd = kc->kv_dim;
    if (keep > n || n_discard > n - keep)
        return rvl_seterr(RVL_ERANGE, "context shift: keeping %u and dropping %u of %u positions",
                          keep, n_discard, n);
    if (n_discard == 0)
        return 0;
    if ((uint64_t)kc->p.rope_off + rope_dim > hd)
        return rvl_seterr(RVL_EINVAL, "context shift: %u rotated dims from %u do not fit a key "
                          "head of %u", rope_dim, kc->p.rope_off, hd);
    if (!cos_w || !sin_w) {
        cos_w = cos_d;
        sin_w = sin_d;
    }
    if (kc->kc_state == KC_PENDING)
        center_keys(kc); /* pages may go straight to a quantized tier below */
    const uint32_t nn = n - n_discard, np_old = kc->n_pages, np_new = cdiv(nn, PG);
    const size_t npo = np_old ? np_old : 1;
    float *rows = malloc((size_t)2 * npo * PG * kvd * sizeof(float));
    uint8_t *ot = malloc((size_t)kc->n_grp * npo);
    int32_t *os = malloc((size_t)kc->n_grp * npo * sizeof(int32_t));
    if (!rows || !ot || !os) {
        free(rows);
        free(ot);
        free(os);
        return rvl_seterr(RVL_ENOMEM, "out of memory for a context shift");
    }
    uint32_t ofirst[MAXG], lo[MAXG];
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        const kvc_group *g = &kc->grp[gi];
        memcpy(ot + gi * npo, g->tier, np_old);
        memcpy(os + gi * npo, g->slot, np_old * sizeof(int32_t));
        ofirst[gi] = g->first;
    }
    /* the new page tables: each page straight into the tier of its age */
    free_all(kc);
    for (uint32_t gi = 0; gi < kc->n_grp; gi++) {
        kvc_group *g = &kc->grp[gi];
        /* the group held [a, n): the kept ones are [lo, nn) now */
        const uint32_t a = ofirst[gi] * PG;
        lo[gi] = a < keep ? a : (a > keep + n_discard ? a : keep + n_discard) - n_discard;
        /* what the next query's window needs: from need on */
        const uint32_t need = g->window && nn + 1 > g->window ? nn + 1 - g->window : 0;
        /* a ring that lost keys the window needs holds whole pages of kept
         * keys only: attention then sees what is left (llama.cpp's SWA
         * cache does the same) */
        g->first = lo[gi] <= need ? lo[gi] / PG : cdiv(lo[gi], PG);
        if (g->ring && np_new > g->first + g->ring)
            g->first = np_new - g->ring;
        if (g->first > lo[gi] / PG)
            lo[gi] = g->first * PG;
        for (uint32_t pg = g->first; pg < np_new; pg++) {
            const int t = (pg + 1) * PG <= nn ? want_tier(kc, g, pg, nn) : 0;
            page_set(g, pg, t, slot_alloc(g, t));
        }
    }
    kc->n_pages = np_new;
    const int *fmts[2] = {kc->p.fmt_k, kc->p.fmt_v};
    for (uint32_t l = 0; l < kc->p.n_layer; l++) {
        const uint32_t gi = kc->lgrp[l];
        kvc_group *g = &kc->grp[gi];
        const float *cs = kc->lswa[l] ? cos_w : cos_d, *sn = kc->lswa[l] ? sin_w : sin_d;
        layer_rows(kc, l, ot + gi * npo, os + gi * npo, ofirst[gi], np_old, rows);
        /* drop the discarded rows, rotate the moved keys back, zero what
         * the group no longer holds */
        for (int kind = 0; kind < kc->nkind; kind++) {
            float *r = rows + (size_t)kind * np_old * PG * kvd;
            memmove(r + (size_t)keep * kvd, r + (size_t)(keep + n_discard) * kvd,
                    (size_t)(n - keep - n_discard) * kvd * sizeof(float));
            if (kind == 0)
                for (uint32_t i = keep > lo[gi] ? keep : lo[gi]; i < nn; i++)
                    rotate_back(r + (size_t)i * kvd, nkv, hd, kc->p.rope_off, cs, sn, rope_dim,
                                neox);
            memset(r + (size_t)g->first * PG * kvd, 0,
                   (size_t)(lo[gi] - g->first * PG) * kvd * sizeof(float));
        }
        /* and encode the new pages */
        for (uint32_t pg = g->first; pg < np_new; pg++) {
            const int t = g->tier[pg];
            const int nr = nn - pg * PG < PG ? (int)(nn - pg * PG) : PG;
            for (int kind = 0; kind < kc->nkind; kind++)
                for (uint32_t h = 0; h < nkv; h++) {
                    const float *r = rows + (size_t)kind * np_old * PG * kvd;
                    for (int j = 0; j < nr; j++)
                        memcpy(kc->tmp + (size_t)j * hd, r + ((size_t)pg * PG + j) * kvd + h * hd,
                               hd * sizeof(float));
                    if (kind == 0 && kc->kc_state == KC_SET)
                        center_rows(kc, l, h, kc->tmp, nr, -1.0f);
                    unsigned char *dst = slot_ptr(kc, g, kind, t, kc->lidx[l], g->slot[pg]) +
                                         h * kc->pb[kind][t];
                    if (fmts[kind][t] == RVL_KVQ_F16 && t == 0) {
                        memset(dst, 0, kc->pb[kind][t]);
                        kc->f16f->quantize(kc->tmp, dst, (int64_t)nr * hd, NULL);
                    } else {
                        encode_page(fmts[kind][t], kind, (int)hd, kc->tmp, nr, dst);
                    }
                }
        }
    }
    kc->n = nn;
    free(rows);
    free(ot);
    free(os);
    return 0;
}

/* ====================================================================
 * Attention
 * ==================================================================== */

typedef struct {
    rvl_kvcache *kc;
    const kvc_group *g;          /* the layer's group */
    uint32_t layer, li, pos, nb; /* li: the layer's index in g */
    uint32_t window;             /* the layer's, 0: none */
    const float *q, *qr;         /* qr: q rotated (TQ keys) */
    size_t q_stride;
    float *out;
    size_t out_stride;
    rvl_attn_params ap;          /* this layer's tier-0 region */
    int mode;                    /* 0 decode (all tier 0), 1 prefill (all tier 0), 2 mixed */
    uint32_t f0;                 /* first tier-0 page */
    int cq, cf;                  /* chunks of the quantized and the tier-0 region */
    uint64_t n_items;
    atomic_uint_fast64_t next;
} attend_job;

/* x[i] <- e^(x[i] - m) over n floats (x[i] <= m; -inf gives 0): the attn
 * kernels' v_exp (kernels/attn_simd.h: Taylor to r^7 after n ln2
 * reduction, about 2 ulp), written for the compiler to vectorize: one
 * exp per key is most of a quantized page's cost otherwise. */
#if defined(__x86_64__) && defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#elif defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("tree-vectorize")))
#endif
static void exp_shift(float *restrict x, int n, float m)
{
    for (int i = 0; i < n; i++) {
        const float v = x[i] - m;
        const float xc = v > -87.3f ? v : -87.3f;
        const float k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round */
        float r = xc - k * 0.693145751953125f;
        r = r - k * 1.42860682030941723e-06f;
        float y = 1.0f / 5040;
        y = y * r + 1.0f / 720;
        y = y * r + 1.0f / 120;
        y = y * r + 1.0f / 24;
        y = y * r + 1.0f / 6;
        y = y * r + 0.5f;
        y = y * r + 1.0f;
        y = y * r + 1.0f;
        const int32_t e = ((int32_t)k + 127) << 23;
        float sc;
        memcpy(&sc, &e, sizeof sc);
        x[i] = v > -87.3f ? y * sc : 0.0f;
    }
}

/* The quantized pages [pa, pb) of kv head kh for one query token that
 * sees the keys from position lo on (its window; pages before lo's are not
 * in [pa, pb)): the partial {m, l, acc} of each of its g query heads. */
static void quant_chunk(const attend_job *j, const float *q, const float *qr, uint32_t pa,
                        uint32_t pb, uint32_t lo, int kh, float *part, void *ws)
{
    const rvl_kvcache *kc = j->kc;
    const kvc_group *gr = j->g;
    const int hd = (int)kc->p.head_dim, nh = (int)kc->p.n_head;
    const int g = nh / (int)kc->p.n_head_kv;
    const float scale = kc->p.scale, cap = kc->p.softcap;
    /* s, pr: (g, PG) scores and weights of one page; acc, accr: (g, hd) */
    float *s = ws, *pr = s + rvl_attn_pad16((size_t)g * PG),
          *m = pr + rvl_attn_pad16((size_t)g * PG), *l = m + rvl_attn_pad16((size_t)g), *acc = l + rvl_attn_pad16((size_t)g),
          *accr = acc + rvl_attn_pad16((size_t)g * hd);
    for (int i = 0; i < g; i++) {
        m[i] = -INFINITY;
        l[i] = 0;
    }
    memset(acc, 0, (size_t)g * hd * sizeof(float));
    if (kc->tq_v)
        memset(accr, 0, (size_t)g * hd * sizeof(float));
    for (uint32_t pg = pa; pg < pb; pg++) {
        const int t = gr->tier[pg];
        const int kf = kc->p.fmt_k[t], vf = kc->p.fmt_v[t];
        const unsigned char *kp = slot_ptr(kc, gr, 0, t, j->li, gr->slot[pg]) + kh * kc->pb[0][t];
        const unsigned char *vp = slot_ptr(kc, gr, 1, t, j->li, gr->slot[pg]) + kh * kc->pb[1][t];
        /* rows before lo are outside the window */
        const int r0 = (uint64_t)pg * PG < lo ? (int)(lo - pg * PG) : 0;
        if (pg + 1 < pb) { /* pages of a head are slots apart: fetch the next one early */
            const int tn = gr->tier[pg + 1];
            const unsigned char *kn =
                slot_ptr(kc, gr, 0, tn, j->li, gr->slot[pg + 1]) + kh * kc->pb[0][tn];
            const unsigned char *vn =
                slot_ptr(kc, gr, 1, tn, j->li, gr->slot[pg + 1]) + kh * kc->pb[1][tn];
            for (size_t o = 0; o < kc->pb[0][tn]; o += 64)
                __builtin_prefetch(kn + o);
            for (size_t o = 0; o < kc->pb[1][tn]; o += 64)
                __builtin_prefetch(vn + o);
        }
        /* the page's keys against the g query heads at once: one decode */
        const float *qg = (is_tq(kf) ? qr : q) + (size_t)kh * g * hd;
        if (kf == RVL_KVF_F32) {
            for (int i = 0; i < g; i++)
                for (int r = 0; r < PG; r++) {
                    const float *kr = (const float *)kp + (size_t)r * hd;
                    float d = 0;
                    for (int e = 0; e < hd; e++)
                        d += qg[(size_t)i * hd + e] * kr[e];
                    s[i * PG + r] = d;
                }
        } else {
            kc->qk->scores(kf, hd, kp, 0, PG - 1, qg, g, s);
        }
        for (int i = 0; i < g; i++) {
            float *si = s + i * PG, *pi = pr + i * PG;
            /* 8 running maxima and sums, for the compiler to vectorize */
            float mk[8], sk[8];
            for (int r = 0; r < PG; r++)
                si[r] *= scale;
            if (cap > 0)
                for (int r = 0; r < PG; r++)
                    si[r] = cap * tanhf(si[r] / cap);
            for (int r = 0; r < r0; r++)
                si[r] = -INFINITY;
            for (int k = 0; k < 8; k++)
                mk[k] = si[k];
            for (int r = 8; r < PG; r += 8)
                for (int k = 0; k < 8; k++)
                    mk[k] = si[r + k] > mk[k] ? si[r + k] : mk[k];
            float mx = mk[0];
            for (int k = 1; k < 8; k++)
                mx = mk[k] > mx ? mk[k] : mx;
            float *a = acc + (size_t)i * hd, *ar = accr + (size_t)i * hd;
            if (mx > m[i]) {
                const float corr = expf(m[i] - mx); /* 0 when m was -inf */
                l[i] *= corr;
                for (int e = 0; e < hd; e++)
                    a[e] *= corr;
                if (kc->tq_v)
                    for (int e = 0; e < hd; e++)
                        ar[e] *= corr;
                m[i] = mx;
            }
            memcpy(pi, si, PG * sizeof *pi);
            exp_shift(pi, PG, m[i]);
            for (int k = 0; k < 8; k++)
                sk[k] = pi[k];
            for (int r = 8; r < PG; r += 8)
                for (int k = 0; k < 8; k++)
                    sk[k] += pi[r + k];
            float sum = 0;
            for (int k = 0; k < 8; k++)
                sum += sk[k];
            l[i] += sum;
            if (vf == RVL_KVF_F32)
                for (int r = 0; r < PG; r++) {
                    const float *vr = (const float *)vp + (size_t)r * hd;
                    for (int e = 0; e < hd; e++)
                        a[e] += pi[r] * vr[e];
                }
        }
        /* p . V for the g heads at once */
        if (vf != RVL_KVF_F32)
            kc->qk->accum(vf, hd, vp, 0, PG - 1, pr, g, is_tq(vf) ? accr : acc);
    }
    for (int i = 0; i < g; i++) {
        float *o = part + (size_t)(kh * g + i) * (hd + 2);
        float *a = acc + (size_t)i * hd;
        if (kc->tq_v) {
            float *ar = accr + (size_t)i * hd;
            rvl_kvq_unrotate(ar, hd);
            for (int e = 0; e < hd; e++)
                a[e] += ar[e];
        }
        o[0] = m[i];
        o[1] = l[i];
        memcpy(o + 2, a, (size_t)hd * sizeof(float));
    }
}

static void attend_items(void *arg, int ith, int nth)
{
    attend_job *j = arg;
    rvl_kvcache *kc = j->kc;
    const int nkv = (int)kc->p.n_head_kv, nh = (int)kc->p.n_head, hd = (int)kc->p.head_dim;
    const size_t ps = (size_t)nh * (hd + 2); /* floats of one chunk's partials */
    void *ws = kc->ws + (size_t)ith * kc->ws_bytes;
    (void)nth;
    for (;;) {
        const uint64_t it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->n_items)
            break;
        if (j->mode == 0) {
            const int c = (int)(it / nkv), kh = (int)(it % nkv);
            kc->ak->decode_chunk(&j->ap, j->q, (int)j->pos, (int)j->pos + 1, c, j->cf, kh, kh + 1,
                                 kc->partials, ws);
        } else if (j->mode == 1) {
            const int tt = rvl_attn_tile_tokens(&j->ap);
            const int nt_tiles = (int)((j->nb + tt - 1) / tt);
            const int tile = nt_tiles - 1 - (int)(it / nkv), kh = (int)(it % nkv); /* longest first */
            const int t0 = tile * tt, n = (int)j->nb - t0 < tt ? (int)j->nb - t0 : tt;
            kc->ak->prefill(&j->ap, j->q + (size_t)t0 * j->q_stride, j->q_stride,
                            (int)j->pos + t0, n, kh, kh + 1, j->out + (size_t)t0 * j->out_stride,
                            j->out_stride, ws);
        } else {
            const int per = (j->cq + j->cf) * nkv;
            const uint32_t t = (uint32_t)(it / per);
            const int r = (int)(it % per), c = r / nkv, kh = r % nkv;
            const int qp = (int)(j->pos + t);
            float *pt = kc->partials + (size_t)t * (j->cq + j->cf) * ps;
            const float *q = j->q + (size_t)t * j->q_stride;
            /* the token's first key: its window's, or the ring's first page */
            uint32_t lo = j->window && (uint32_t)qp + 1 > j->window ? (uint32_t)qp + 1 - j->window : 0;
            if (lo < j->g->first * PG) /* a ring that lost keys after a context shift */
                lo = j->g->first * PG;
            if (c < j->cq) {
                /* the quantized pages [lo's page, f0), in cq runs */
                const uint32_t q0 = lo / PG < j->f0 ? lo / PG : j->f0, nq = j->f0 - q0;
                const uint32_t pa = q0 + (uint32_t)((uint64_t)nq * c / j->cq);
                const uint32_t pb = q0 + (uint32_t)((uint64_t)nq * (c + 1) / j->cq);
                quant_chunk(j, q, j->qr + (size_t)t * nh * hd, pa, pb, lo, kh, pt + (size_t)c * ps,
                            ws);
            } else {
                rvl_attn_params ap = j->ap;
                ap.window = qp - (int)(j->f0 * PG) + 1; /* keys from page f0 on */
                if (j->window && (int)j->window < ap.window)
                    ap.window = (int)j->window;
                kc->ak->decode_chunk(&ap, q, qp, qp + 1, c - j->cq, j->cf, kh, kh + 1,
                                     pt + (size_t)j->cq * ps, ws);
            }
        }
    }
}

static int chunks_for(const rvl_kvcache *kc, uint32_t pages)
{
    int c = (int)cdiv((uint64_t)4 * kc->nth, kc->p.n_head_kv);
    if (pages < 4)
        c = 1; /* short: the reduce would cost more than the balance gains */
    if (c > MAXC)
        c = MAXC;
    if ((uint32_t)c > pages)
        c = (int)pages;
    return c < 1 ? 1 : c;
}

/* The quantized region: chunks of whole pages, about 8 items (chunks x kv
 * heads) per thread, so that a few kv heads (3 in SmolLM2) still split
 * evenly over the threads; its items are handed out first, the tier-0
 * region's fill the gaps. */
static int quant_chunks_for(const rvl_kvcache *kc, uint32_t pages)
{
    int c = (int)cdiv((uint64_t)8 * kc->nth, kc->p.n_head_kv);
    if (pages < 4 || kc->nth == 1)
        c = 1;
    if (c > MAXC)
        c = MAXC;
    if ((uint32_t)c > pages)
        c = (int)pages;
    return c < 1 ? 1 : c;
}

void rvl_kvcache_attend(rvl_kvcache *kc, rvl_pool *pool, uint32_t layer, const float *q,
                    size_t q_stride, uint32_t pos, uint32_t nb, float *out, size_t out_stride)
{
    const uint32_t nkv = kc->p.n_head_kv, nh = kc->p.n_head, hd = kc->p.head_dim;
    const kvc_group *g = cgroup_of(kc, layer);
    const uint32_t li = kc->lidx[layer];
    attend_job j = {.kc = kc, .g = g, .layer = layer, .li = li, .window = g->window, .pos = pos,
                    .nb = nb, .q = q, .q_stride = q_stride, .out = out, .out_stride = out_stride,
                    .ap = kc->ap};
    j.ap.window = (int)g->window;
    j.ap.sinks = kc->sinks ? kc->sinks + (size_t)layer * nh : NULL;
    j.ap.k = g->pool[0][0] + (size_t)li * g->cap[0] * kc->sb[0][0];
    j.ap.v = g->pool[1][0] + (size_t)li * g->cap[0] * kc->sb[1][0];
    j.ap.page_table = g->pt0;
    /* the first tier-0 page: tiers only get colder with age */
    uint32_t f0 = (pos + nb - 1) / PG;
    while (f0 > g->first && g->tier[f0 - 1] == 0)
        f0--;
    j.f0 = f0;
    const uint32_t last = (pos + nb - 1) / PG;
    /* the first page the first token sees; clip: its window reaches keys
     * the ring no longer holds (a context shift dropped them, kvcache.c
     * "Context shift"), so each token sees the keys from the ring's first
     * page on, through mode 2's per-token windows */
    const uint32_t ws = g->window && pos + 1 > g->window ? pos + 1 - g->window : 0;
    const bool clip = ws < g->first * PG;
    const uint32_t p0 = clip ? g->first : ws / PG;
    if (f0 <= p0 && !clip) { /* every key seen is in tier 0 */
        j.mode = nb == 1 ? 0 : 1;
        j.cf = chunks_for(kc, last - p0 + 1);
        if (j.mode == 0)
            j.n_items = (uint64_t)j.cf * nkv;
        else
            j.n_items = (uint64_t)cdiv(nb, (uint32_t)rvl_attn_tile_tokens(&j.ap)) * nkv;
    } else {
        j.mode = 2;
        j.cq = f0 <= p0 ? 0 : nb == 1 ? quant_chunks_for(kc, f0 - p0) : 1;
        j.cf = nb == 1 ? chunks_for(kc, last - f0 + 1) : 1;
        j.n_items = (uint64_t)nb * (j.cq + j.cf) * nkv;
        if (kc->tq_k) {
            for (uint32_t t = 0; t < nb; t++)
                for (uint32_t h = 0; h < nh; h++) {
                    float *d = kc->qrot + ((size_t)t * nh + h) * hd;
                    memcpy(d, q + t * q_stride + (size_t)h * hd, hd * sizeof(float));
                    rvl_kvq_rotate(d, (int)hd);
                }
        }
        j.qr = kc->qrot;
    }
    atomic_init(&j.next, 0);
    if (j.n_items > 1 && pool && rvl_pool_size(pool) <= kc->nth) /* a workspace per thread */
        rvl_pool_run(pool, attend_items, &j);
    else
        attend_items(&j, 0, 1);
    if (j.mode == 0) {
        rvl_attn_decode_reduce(&j.ap, j.cf, kc->partials, 0, (int)nh, out);
    } else if (j.mode == 2) {
        const size_t ps = (size_t)nh * (hd + 2) * (size_t)(j.cq + j.cf);
        for (uint32_t t = 0; t < nb; t++)
            rvl_attn_decode_reduce(&j.ap, j.cq + j.cf, kc->partials + t * ps, 0, (int)nh,
                                   out + t * out_stride);
    }
}
