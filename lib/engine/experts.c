/*
 * experts.c - the expert store: every expert resident in the mapping, or
 * a budget of slots that experts are read into on demand (experts.h).
 *
 * Streaming. A slot holds one expert's gate, up and down matrices, each
 * the file's bytes (read with pread() from the file's own descriptor at
 * the tensor's offset, never through the mapping, so the experts' pages
 * do not become part of the process), each 64-byte aligned. A table maps
 * (layer, expert) to its slot. The forward pass pins a slot while its
 * GEMMs read it (pins, under one mutex: contexts on other threads share
 * the model); an unpinned slot is evicted least recently used first (LRU
 * measured against LFU with aging on synthetic routing traces:
 * tests/ref/expert_cache_sim.py). A thread that holds a pin never waits
 * for a slot (it could wait for itself): it gets the mapping's views.
 * The budget is fixed at open, before the weights are packed or
 * prefaulted, so streamed experts are never faulted in through the map.
 *
 * Prefetch. After layer l's router, rvl_experts_routed hands the prefetch
 * thread the last token's FFN input; the thread applies layer l+1's
 * router to it (the residual stream changes little from one layer to the
 * next, so the next router's top-k on this input is a good guess) and
 * reads those experts while layer l computes. A prefetch never evicts
 * what the current layer chose or what was used since its router ran.
 * RUVLLM_EXPERT_PREFETCH=0 turns it off, =repeat predicts instead the
 * experts layer l+1 chose for the previous token (for measurements).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/experts.h"

enum { SLOT_FREE, SLOT_LOADING, SLOT_READY };
enum { PF_NONE, PF_ROUTER, PF_REPEAT };

typedef struct {
    int32_t key;                /* layer * n_expert + expert, or -1 */
    uint32_t pins;              /* GEMMs reading it */
    uint8_t state;              /* SLOT_* */
    bool by_prefetch;           /* read ahead and not used yet */
    uint64_t stamp;             /* last use, for LRU */
    rvl_weight w[3];            /* gate, up, down: views of the slot's bytes */
} slot;

struct rvl_experts {
    const rvl_model *m;
    uint32_t n_layer, ne, nu, dim;
    uint32_t first;             /* the first layer with experts */
    uint32_t n_moe;             /* layers with experts */
    uint64_t total;             /* bytes of every expert */
    uint64_t exp_bytes;         /* the largest expert's three matrices */
    uint64_t slot_bytes;        /* the same, each matrix 64-byte aligned */
    uint64_t budget;
    bool resident;
    _Atomic uint64_t tokens;
    const char *base;           /* the mapping's byte 0 (file offsets) */
    /* streaming */
    int fd;
    uint32_t n_slots;
    char *pool;                 /* (n_slots, slot_bytes) */
    slot *slots;
    int32_t *table;             /* (n_layer * ne) -> slot, or -1 */
    uint64_t clock;             /* LRU time */
    uint64_t protect;           /* stamps >= this: not for the prefetch to evict */
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* a slot became ready or unpinned */
    /* prefetch */
    int pf_mode;
    bool th_on, quit, pf_pending;
    pthread_t th;
    pthread_cond_t pf_cv;
    uint32_t pf_layer;
    uint64_t pf_gen;
    float *pf_x;                /* (dim) the request's input row */
    float *pf_xw, *pf_row;      /* (dim) x 2: the thread's copy, a router row */
    int32_t *pf_pick;           /* (nu) */
    int32_t *last_sel;          /* (n_layer, nu) the previous token's choice */
    /* statistics */
    uint64_t hits, misses, prefetched, prefetch_hits, bytes_read, read_errors, overflows;
};

/* Slots the calling thread has pinned (in any store): a thread holding one
 * never waits for another, which could be its own. */
static _Thread_local uint32_t held;

static uint64_t align64(uint64_t n) { return (n + 63) & ~(uint64_t)63; }

static const rvl_weight *src_views(const rvl_experts *x, uint32_t l, uint32_t e)
{
    return x->m->layers[l].exps + 3 * (size_t)e;
}

static bool has_experts(const rvl_model *m, uint32_t l)
{
    return m->layers[l].exps && m->layers[l].exps[0].present;
}

static uint64_t mat_bytes(const rvl_weight *w) { return w->ne1 * w->row_bytes; }

static uint64_t expert_bytes(const rvl_experts *x, uint32_t l)
{
    const rvl_weight *w = src_views(x, l, 0);
    return mat_bytes(&w[0]) + mat_bytes(&w[1]) + mat_bytes(&w[2]);
}

/* ====================================================================
 * Reading an expert
 * ==================================================================== */

static int pread_full(int fd, void *dst, uint64_t n, uint64_t off)
{
    char *p = dst;
    while (n) {
        const size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        const ssize_t got = pread(fd, p, chunk, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        p += got;
        off += (uint64_t)got;
        n -= (uint64_t)got;
    }
    return 0;
}

/* Expert e of layer l into slot s: its three matrices from the file, the
 * views pointing at them. Called without the lock (s is LOADING). */
static int read_expert(rvl_experts *x, uint32_t l, uint32_t e, slot *s)
{
    const rvl_weight *src = src_views(x, l, e);
    char *dst = x->pool + (size_t)(s - x->slots) * x->slot_bytes;
    for (int k = 0; k < 3; k++) {
        const uint64_t off = (uint64_t)((const char *)src[k].data - x->base);
        if (pread_full(x->fd, dst, mat_bytes(&src[k]), off) < 0)
            return -1;
        s->w[k] = src[k];
        s->w[k].data = dst;
        s->w[k].packed = NULL;
        s->w[k].packed_rows = 0;
        dst += align64(mat_bytes(&src[k]));
    }
    return 0;
}

/* An unpinned, loaded (or free) slot, least recently used first; with
 * `below`, only one last used before that stamp. -1: none. */
static int32_t victim(const rvl_experts *x, uint64_t below)
{
    int32_t best = -1;
    for (uint32_t i = 0; i < x->n_slots; i++) {
        const slot *s = &x->slots[i];
        if (s->pins || s->state == SLOT_LOADING)
            continue;
        if (s->state == SLOT_FREE)
            return (int32_t)i;
        if (s->stamp < below && (best < 0 || s->stamp < x->slots[best].stamp))
            best = (int32_t)i;
    }
    return best;
}

/* Give slot v to key: it leaves the table under its old key. Locked. */
static slot *claim(rvl_experts *x, int32_t v, int32_t key, uint32_t pins)
{
    slot *s = &x->slots[v];
    if (s->key >= 0)
        x->table[s->key] = -1;
    s->key = key;
    s->state = SLOT_LOADING;
    s->pins = pins;
    s->by_prefetch = pins == 0;
    s->stamp = ++x->clock;
    x->table[key] = v;
    return s;
}

/* After read_expert: ready, or (rc < 0) free again. Locked. */
static void loaded(rvl_experts *x, slot *s, uint32_t l, int rc)
{
    if (rc < 0) {
        x->table[s->key] = -1;
        s->key = -1;
        s->state = SLOT_FREE;
        s->pins = 0;
        x->read_errors++;
    } else {
        s->state = SLOT_READY;
        x->bytes_read += expert_bytes(x, l);
    }
    pthread_cond_broadcast(&x->cv);
}

/* ====================================================================
 * The forward pass's side
 * ==================================================================== */

const rvl_weight *rvl_experts_acquire(rvl_experts *x, uint32_t l, uint32_t e)
{
    const rvl_weight *src = src_views(x, l, e);
    if (x->resident)
        return src;
    const int32_t key = (int32_t)(l * x->ne + e);
    pthread_mutex_lock(&x->mu);
    slot *s;
    for (;;) {
        const int32_t i = x->table[key];
        if (i >= 0) {
            s = &x->slots[i];
            if (s->state == SLOT_LOADING) { /* a prefetch or another context reads it */
                pthread_cond_wait(&x->cv, &x->mu);
                continue;
            }
            s->pins++;
            s->stamp = ++x->clock;
            x->hits++;
            x->prefetch_hits += s->by_prefetch;
            s->by_prefetch = false;
            pthread_mutex_unlock(&x->mu);
            held++;
            return s->w;
        }
        const int32_t v = victim(x, UINT64_MAX);
        if (v >= 0) {
            s = claim(x, v, key, 1);
            x->misses++;
            break;
        }
        if (held) { /* every slot pinned, some by us: the mapping's bytes */
            x->overflows++;
            pthread_mutex_unlock(&x->mu);
            return src;
        }
        pthread_cond_wait(&x->cv, &x->mu); /* pinned by others, or loading */
    }
    pthread_mutex_unlock(&x->mu);
    const int rc = read_expert(x, l, e, s);
    pthread_mutex_lock(&x->mu);
    loaded(x, s, l, rc);
    pthread_mutex_unlock(&x->mu);
    /* a failed read: the same bytes through the mapping (counted in
     * read_errors), rather than wrong logits or none */
    if (rc < 0)
        return src;
    held++;
    return s->w;
}

/* madvise(MADV_DONTNEED) the whole pages within [a, b) of the mapping:
 * the page tables drop them (the page cache may keep them). */
static void drop_range(const void *a, const void *b)
{
    const uintptr_t pg = 4096;
    const uintptr_t lo = ((uintptr_t)a + pg - 1) & ~(pg - 1), hi = (uintptr_t)b & ~(pg - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void rvl_experts_release(rvl_experts *x, const rvl_weight *w)
{
    if (x->resident || !x->slots)
        return;
    const char *p = (const char *)w, *b = (const char *)x->slots;
    if (p < b || p >= b + (size_t)x->n_slots * sizeof *x->slots) {
        for (int k = 0; k < 3; k++) /* the mapping's views (an overflow, a failed read) */
            drop_range(w[k].data, (const char *)w[k].data + mat_bytes(&w[k]));
        return;
    }
    slot *s = &x->slots[(size_t)(p - b) / sizeof *x->slots];
    held -= held > 0;
    pthread_mutex_lock(&x->mu);
    if (s->pins && --s->pins == 0)
        pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

void rvl_experts_routed(rvl_experts *x, uint32_t l, const int32_t *sel, uint32_t nb,
                        const float *xin, size_t stride)
{
    if (l == x->first)
        atomic_fetch_add_explicit(&x->tokens, nb, memory_order_relaxed);
    if (x->resident || nb == 0)
        return;
    const uint32_t nu = x->nu;
    pthread_mutex_lock(&x->mu);
    /* what this layer chose is the most recent: the prefetch keeps off it */
    x->protect = x->clock + 1;
    for (size_t i = 0; i < (size_t)nb * nu; i++) {
        if (sel[i] < 0 || (uint32_t)sel[i] >= x->ne)
            continue;
        const int32_t s = x->table[l * x->ne + (uint32_t)sel[i]];
        if (s >= 0)
            x->slots[s].stamp = ++x->clock;
    }
    int32_t *prev = x->last_sel + (size_t)l * nu;
    const bool next = l + 1 < x->n_layer && has_experts(x->m, l + 1);
    if (x->pf_mode == PF_ROUTER && next)
        memcpy(x->pf_x, xin + (size_t)(nb - 1) * stride, x->dim * sizeof *x->pf_x);
    memcpy(prev, sel + (size_t)(nb - 1) * nu, nu * sizeof *prev);
    if (x->pf_mode != PF_NONE && next) {
        x->pf_layer = l + 1;
        x->pf_pending = true;
        x->pf_gen++;
        pthread_cond_signal(&x->pf_cv);
    }
    pthread_mutex_unlock(&x->mu);
}

/* ====================================================================
 * Prefetch thread
 * ==================================================================== */

/* Layer l's n_expert_used most likely experts for the row pf_xw: its
 * router's logits, top-k (a guess: exact rounding does not matter). */
static void predict_router(rvl_experts *x, uint32_t l)
{
    const rvl_weight *r = &x->m->layers[l].router;
    float best[64];
    const uint32_t k = x->nu < 64 ? x->nu : 64;
    for (uint32_t j = 0; j < x->nu; j++)
        x->pf_pick[j] = -1;
    for (uint32_t e = 0; e < x->ne && r->present; e++) {
        r->kf->dequantize((const char *)r->data + (size_t)e * r->row_bytes, x->pf_row,
                          (int64_t)x->dim);
        float z = 0;
        for (uint32_t d = 0; d < x->dim; d++)
            z += x->pf_row[d] * x->pf_xw[d];
        uint32_t j = k; /* insertion into the sorted top k */
        while (j > 0 && (x->pf_pick[j - 1] < 0 || z > best[j - 1])) {
            if (j < k) {
                best[j] = best[j - 1];
                x->pf_pick[j] = x->pf_pick[j - 1];
            }
            j--;
        }
        if (j < k) {
            best[j] = z;
            x->pf_pick[j] = (int32_t)e;
        }
    }
}

static void *prefetch_main(void *arg)
{
    rvl_experts *x = arg;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (!x->pf_pending && !x->quit)
            pthread_cond_wait(&x->pf_cv, &x->mu);
        if (x->quit)
            break;
        x->pf_pending = false;
        const uint32_t l = x->pf_layer;
        const uint64_t gen = x->pf_gen;
        if (x->pf_mode == PF_ROUTER) {
            memcpy(x->pf_xw, x->pf_x, x->dim * sizeof *x->pf_xw);
            pthread_mutex_unlock(&x->mu);
            predict_router(x, l);
            pthread_mutex_lock(&x->mu);
        } else {
            memcpy(x->pf_pick, x->last_sel + (size_t)l * x->nu, x->nu * sizeof *x->pf_pick);
        }
        for (uint32_t j = 0; j < x->nu && x->pf_gen == gen && !x->quit; j++) {
            const int32_t e = x->pf_pick[j];
            if (e < 0 || (uint32_t)e >= x->ne)
                continue;
            const int32_t key = (int32_t)(l * x->ne + (uint32_t)e);
            if (x->table[key] >= 0)
                continue;
            const int32_t v = victim(x, x->protect);
            if (v < 0)
                break;
            slot *s = claim(x, v, key, 0);
            pthread_mutex_unlock(&x->mu);
            const int rc = read_expert(x, l, (uint32_t)e, s);
            pthread_mutex_lock(&x->mu);
            x->prefetched += rc == 0;
            loaded(x, s, l, rc);
        }
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

/* ====================================================================
 * Modes
 * ==================================================================== */

void rvl_experts_drop_pages(const rvl_experts *x)
{
    const void *r[3 * 1024][2];
    const size_t n = rvl_experts_ranges(x, r, sizeof r / sizeof r[0]);
    for (size_t i = 0; i < n; i++)
        drop_range(r[i][0], r[i][1]);
}

bool rvl_experts_streamed(const rvl_experts *x) { return x && !x->resident; }

size_t rvl_experts_ranges(const rvl_experts *x, const void *(*out)[2], size_t cap)
{
    size_t n = 0;
    if (!x || x->resident)
        return 0;
    for (uint32_t l = 0; l < x->n_layer; l++) {
        if (!has_experts(x->m, l))
            continue;
        for (int k = 0; k < 3 && n < cap; k++) {
            const rvl_weight *first = src_views(x, l, 0) + k;
            const rvl_weight *last = src_views(x, l, x->ne - 1) + k;
            out[n][0] = first->data;
            out[n][1] = (const char *)last->data + mat_bytes(last);
            n++;
        }
    }
    return n;
}

static void stop_streaming(rvl_experts *x)
{
    if (x->th_on) {
        pthread_mutex_lock(&x->mu);
        x->quit = true;
        pthread_cond_broadcast(&x->pf_cv);
        pthread_mutex_unlock(&x->mu);
        pthread_join(x->th, NULL);
        x->th_on = false;
        x->quit = false;
    }
    if (x->fd >= 0)
        close(x->fd);
    x->fd = -1;
    free(x->pool);
    free(x->slots);
    free(x->table);
    x->pool = NULL;
    x->slots = NULL;
    x->table = NULL;
    x->n_slots = 0;
}

static int start_streaming(rvl_experts *x, uint64_t budget)
{
    const char *path = rvl_file_path(x->m->file);
    const uint64_t n_exp = (uint64_t)x->n_moe * x->ne;
    uint64_t n = budget / x->slot_bytes;
    x->n_slots = (uint32_t)(n < n_exp ? n : n_exp);
    x->slots = calloc(x->n_slots, sizeof *x->slots);
    x->table = malloc((size_t)x->n_layer * x->ne * sizeof *x->table);
    if (!x->slots || !x->table ||
        posix_memalign((void **)&x->pool, 4096, (size_t)x->n_slots * x->slot_bytes))
        return rvl_seterr(RVL_ENOMEM, "%s: out of memory for %u expert slots (%llu MiB)", path,
                          x->n_slots,
                          (unsigned long long)(((uint64_t)x->n_slots * x->slot_bytes) >> 20));
    for (size_t i = 0; i < (size_t)x->n_layer * x->ne; i++)
        x->table[i] = -1;
    for (uint32_t i = 0; i < x->n_slots; i++)
        x->slots[i].key = -1;
    uint64_t size = 0;
    int rc = rvl_input_open(path, &x->fd, &size);
    if (rc < 0)
        return rc;
    if (size != rvl_file_size(x->m->file))
        return rvl_seterr(RVL_EIO, "%s: the file changed size since it was opened (%llu bytes, "
                          "now %llu): its experts cannot be streamed", path,
                          (unsigned long long)rvl_file_size(x->m->file), (unsigned long long)size);
#ifdef POSIX_FADV_RANDOM
    (void)posix_fadvise(x->fd, 0, 0, POSIX_FADV_RANDOM); /* each read is one whole matrix */
#endif
    if (x->pf_mode != PF_NONE && x->n_moe > 1) {
        if (pthread_create(&x->th, NULL, prefetch_main, x) != 0)
            return rvl_seterr(RVL_ENOMEM, "cannot start the expert prefetch thread");
        x->th_on = true;
    }
    return 0;
}

/* The budget in bytes: resident, or the slots, the descriptor and the
 * prefetch thread for streaming. */
static int set_budget(rvl_experts *x, uint64_t bytes)
{
    const char *path = rvl_file_path(x->m->file);
    const uint64_t min = 2ull * x->nu * x->slot_bytes, mib = 1ull << 20;
    if (bytes < min) /* MiB with two decimals, the minimum rounded up */
        return rvl_seterr(RVL_EINVAL, "%s: an expert budget of %.2f MiB is below this model's "
                          "minimum of %.2f MiB (%u experts of %.2f MiB: the %u a token uses in a "
                          "layer and as many read ahead)", path, (double)bytes / (double)mib,
                          (double)((min * 100 + mib - 1) / mib) / 100.0, 2 * x->nu,
                          (double)x->slot_bytes / (double)mib, x->nu);
    x->budget = bytes;
    x->resident = bytes >= x->total;
    if (x->resident)
        return 0;
    int rc = start_streaming(x, bytes);
    if (rc < 0) {
        stop_streaming(x);
        x->resident = true;
        return rc;
    }
    rvl_experts_drop_pages(x); /* none yet, unless the file was mapped before */
    return 0;
}

/* ====================================================================
 * Default budget: $RUVLLM_EXPERT_BUDGET (MiB), else MemAvailable less the
 * rest of the model, a default context's f16 KV cache and a margin of
 * max(10%, 512 MiB). Unknown (no /proc/meminfo): every expert resident.
 * ==================================================================== */

static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return (uint64_t)kb << 10;
}

static int default_budget(const rvl_experts *x, uint64_t *out)
{
    const char *env = getenv("RUVLLM_EXPERT_BUDGET");
    const uint64_t mib = 1ull << 20;
    if (env && *env) {
        char *end;
        errno = 0;
        const unsigned long long v = strtoull(env, &end, 10);
        if (*end || errno || env[0] == '-' || v < 1 || v > (1ull << 40))
            return rvl_seterr(RVL_EINVAL, "RUVLLM_EXPERT_BUDGET: '%.40s' is not a number of MiB "
                              "(1 to %llu)", env, 1ull << 40);
        *out = v * mib;
        return 0;
    }
    const rvl_hparams *hp = &x->m->hp;
    const uint64_t avail = mem_available();
    const uint64_t ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    const uint64_t rest = rvl_file_size(x->m->file) - x->total;
    const uint64_t kv = (uint64_t)hp->n_layer * 2 * hp->n_head_kv * hp->head_dim * 2 * ctx;
    const uint64_t margin = avail / 10 > 512 * mib ? avail / 10 : 512 * mib;
    const uint64_t need = rest + kv + margin, min = 2ull * x->nu * x->slot_bytes;
    if (avail == 0)
        *out = x->total;
    else
        *out = avail > need + min ? avail - need : min;
    return 0;
}

/* ====================================================================
 * Open, close, statistics
 * ==================================================================== */

int rvl_experts_open(rvl_experts **out, const rvl_model *m, uint64_t budget)
{
    const rvl_hparams *hp = &m->hp;
    *out = NULL;
    if (!hp->block.moe)
        return 0;
    rvl_experts *x = calloc(1, sizeof *x);
    if (!x)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    pthread_cond_init(&x->pf_cv, NULL);
    x->m = m;
    x->fd = -1;
    x->n_layer = hp->n_layer;
    x->ne = hp->n_expert;
    x->nu = hp->n_expert_used;
    x->dim = hp->n_embd;
    x->first = UINT32_MAX;
    x->resident = true;
    const rvl_tensor_info *t0 = rvl_file_tensor(m->file, 0);
    x->base = (const char *)t0->data - t0->offset;
    for (uint32_t l = 0; l < x->n_layer; l++) {
        if (!has_experts(m, l))
            continue;
        x->first = x->first < l ? x->first : l;
        x->n_moe++;
        const rvl_weight *w = src_views(x, l, 0);
        const uint64_t sb = align64(mat_bytes(&w[0])) + align64(mat_bytes(&w[1])) +
                            align64(mat_bytes(&w[2]));
        x->total += expert_bytes(x, l) * x->ne;
        x->exp_bytes = expert_bytes(x, l) > x->exp_bytes ? expert_bytes(x, l) : x->exp_bytes;
        x->slot_bytes = sb > x->slot_bytes ? sb : x->slot_bytes;
    }
    const char *pf = getenv("RUVLLM_EXPERT_PREFETCH");
    x->pf_mode = !pf || !*pf || strcmp(pf, "router") == 0 || strcmp(pf, "1") == 0 ? PF_ROUTER
                 : strcmp(pf, "repeat") == 0                                       ? PF_REPEAT
                                                                                    : PF_NONE;
    x->pf_x = calloc(x->dim, sizeof *x->pf_x);
    x->pf_xw = calloc(x->dim, sizeof *x->pf_xw);
    x->pf_row = calloc(x->dim, sizeof *x->pf_row);
    x->pf_pick = calloc(x->nu, sizeof *x->pf_pick);
    x->last_sel = malloc((size_t)x->n_layer * x->nu * sizeof *x->last_sel);
    if (!x->pf_x || !x->pf_xw || !x->pf_row || !x->pf_pick || !x->last_sel) {
        rvl_experts_close(x);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < (size_t)x->n_layer * x->nu; i++)
        x->last_sel[i] = -1;
    x->budget = x->total;
    int rc = budget ? 0 : default_budget(x, &budget);
    if (rc == 0)
        rc = set_budget(x, budget);
    if (rc < 0) {
        rvl_experts_close(x);
        return rc;
    }
    *out = x;
    return 0;
}

void rvl_experts_close(rvl_experts *x)
{
    if (!x)
        return;
    stop_streaming(x);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->cv);
    pthread_cond_destroy(&x->pf_cv);
    free(x->pf_x);
    free(x->pf_xw);
    free(x->pf_row);
    free(x->pf_pick);
    free(x->last_sel);
    free(x);
}

void rvl_experts_stats(const rvl_experts *cx, rvl_expert_stats *st)
{
    memset(st, 0, sizeof *st);
    st->resident = true;
    if (!cx)
        return;
    rvl_experts *x = (rvl_experts *)cx; /* the lock only */
    pthread_mutex_lock(&x->mu);
    *st = (rvl_expert_stats){
        .resident = x->resident, .budget = x->budget, .expert_bytes = x->exp_bytes,
        .total_bytes = x->total, .min_budget = 2ull * x->nu * x->slot_bytes,
        .slots = x->n_slots, .hits = x->hits, .misses = x->misses, .prefetched = x->prefetched,
        .prefetch_hits = x->prefetch_hits, .bytes_read = x->bytes_read,
        .read_errors = x->read_errors, .overflows = x->overflows,
        .tokens = atomic_load(&x->tokens)};
    pthread_mutex_unlock(&x->mu);
}
