/*
 * attn.h - attention over the paged KV cache: flash-style kernels with an
 * online softmax (no n x n score matrix anywhere), for decode (one query
 * token, split-K over pages with a reduce step) and prefill (tiles of
 * query tokens against blocks of keys, causal).
 *
 * What one call computes, for query head h (kv head h / (n_head /
 * n_head_kv): grouped-query attention; n_head_kv = 1 is multi-query) at
 * position qp, over the keys t of the cache that pass the mask:
 *
 *     s_t   = scale * (q . k_t)                      (f32 dot products)
 *     s_t   = softcap * tanh(s_t / softcap)          (when softcap > 0)
 *     mask  : t <= qp, and t > qp - window when window > 0 (the query
 *             sees itself and the window - 1 keys before it: llama.cpp's
 *             standard sliding window of n_swa = window)
 *     out   = sum_t exp(s_t - M) v_t / (sum_t exp(s_t - M) + exp(sink_h - M))
 *             M = max(max_t s_t, sink_h)
 *
 * sink_h is the attention-sink logit of query head h (gpt-oss: a learned
 * logit per head that takes its share of the softmax and brings no value;
 * transformers' GptOss appends it as a column of the scores, softmaxes
 * and drops it); without sinks (p->sinks NULL) that term is absent. The
 * logit is used as given: not scaled, not soft-capped.
 * A query with no unmasked key gets out = 0 (with or without a sink).
 *
 * The cache. Key (value) position t of kv head kh lives in logical page
 * t / page_tokens, row t % page_tokens; the page's physical index is
 * page_table[t / page_tokens], and the row is head_dim elements at
 *
 *     k + page_table[t / page_tokens] * page_stride + kh * head_stride
 *       + (t % page_tokens) * head_dim * esize
 *
 * (the same with v): the rows of one page and one kv head are contiguous.
 * Elements are f16 (RVL_ATTN_F16, the cache format of today) or f32
 * (RVL_ATTN_F32, exact). Physical pages may be in any order.
 *
 * Numerics (every variant; tests/test_attn.c, tests/neon/test_attn_neon.c):
 *   - everything is computed in f32: f16 keys and values are widened
 *     exactly; q is used as given, or first rounded to f16 when q_f16 is
 *     set (llama.cpp's CPU paths, flash and not, dot an f16 q with f16
 *     keys: q_f16 = 1 reproduces that rounding exactly);
 *   - the probabilities are NOT rounded to f16 before they weight the
 *     values. llama.cpp's non-flash path rounds them (relative 2^-11 per
 *     weight); a flash kernel cannot reproduce that since its weights are
 *     rescaled as the running max changes, and f32 is the more accurate
 *     choice: the difference from llama.cpp is at most ~2^-11 of the
 *     output's magnitude, far below Q4 weight noise;
 *   - every variant agrees with a double-precision softmax(s) V computed
 *     on the same inputs (f16 K/V and, with q_f16, q as the kernel sees
 *     them) within, per output element,
 *         |out - exact| <= (2^-20 + n * 2^-26 + (A + softcap) * 2^-21) * S
 *     S = sum_t p_t |v_t| (p the exact probabilities), n the number of
 *     unmasked keys, A = max_t scale * sum_d |q_d k_td|: about 1e-5
 *     relative for n = 1000 and unit-variance data (tests/attn_testlib.h
 *     says why; the tests observe at most a quarter of it);
 *   - a row of prefill gives the same bits as decode with one chunk for
 *     the same query (same variant): key blocks are aligned to 32-key
 *     boundaries of the pages whatever the query range, so both paths do
 *     the same float operations per query;
 *   - decode's result depends on the chunk count only through float
 *     rounding (the log-sum-exp merge), and for a given count is the same
 *     on every run and whatever thread ran which chunk.
 *
 * Threading (the kernels never allocate, lock or spawn):
 *   decode:  choose C chunks (1 when n_head_kv >= threads and the
 *            context is short; e.g. C = ceil(2 * threads / n_head_kv)
 *            capped by the page count otherwise); the work items are the
 *            pairs (chunk c, kv head kh), each one
 *                decode_chunk(p, q, qp, n_kv, c, C, kh, kh + 1, part, ws)
 *            with ws private to the thread; after a barrier,
 *                rvl_attn_decode_reduce(p, C, part, h0, h1, out)
 *            over any split of the query heads [0, n_head).
 *   prefill: work items are (kv head range, query token range) pairs,
 *                prefill(p, q + t0 * q_stride, q_stride, p0 + t0, t1 - t0,
 *                        kh0, kh1, out + t0 * out_stride, out_stride, ws)
 *            (later tokens see more keys: interleave token ranges, or
 *            split kv heads first); ws private to the thread.
 */
#ifndef RVL_ATTN_H
#define RVL_ATTN_H

#include <stddef.h>
#include <stdint.h>

enum {
    RVL_ATTN_F32 = 0,
    RVL_ATTN_F16 = 1,
};

/* Keys per block: the unit of the online softmax and of K/V reuse. Blocks
 * never straddle a page and start at multiples of it inside a page. */
#define RVL_ATTN_BLOCK 32

/* Largest head_dim the kernels accept. */
#define RVL_ATTN_MAX_HEAD_DIM 1024

typedef struct {
    /* shape */
    int head_dim;            /* 1 .. RVL_ATTN_MAX_HEAD_DIM */
    int n_head, n_head_kv;   /* n_head % n_head_kv == 0 */
    float scale;             /* usually 1/sqrt(head_dim) (YaRN: times mscale^2) */
    float softcap;           /* 0: off; else s = softcap * tanh(s / softcap) */
    int window;              /* 0: off; else keys t > qp - window only */
    int q_f16;               /* round q to f16 before the dot products */
    /* the cache (one layer of one sequence) */
    int kv_type;             /* RVL_ATTN_F16 or RVL_ATTN_F32 */
    int page_tokens;         /* positions per page (default 32) */
    const void *k, *v;       /* physical page 0 of the keys / values */
    size_t page_stride;      /* bytes between physical pages (K and V) */
    size_t head_stride;      /* bytes between kv heads inside a page,
                                >= page_tokens * head_dim * esize */
    const int32_t *page_table; /* logical page -> physical page (>= 0) */
    const float *sinks;      /* (n_head) attention-sink logits, or NULL: none. Finite
                                or -inf (none for that head); applied where a result
                                is normalized: prefill's end, the decode reduce */
} rvl_attn_params;
/* tests/metal-emu/mtl_testutil.h mirrors this layout for C++ (88 bytes on
 * LP64, which its static_assert checks): change both together. */

/*
 * Decode, chunk `chunk` of `n_chunks` (0 <= chunk < n_chunks), for the kv
 * heads [kvh0, kvh1) and so the query heads [kvh0 * g, kvh1 * g), g =
 * n_head / n_head_kv. The keys are positions [0, n_kv) under the mask of
 * the query at position q_pos (normally q_pos = n_kv - 1); the logical
 * pages holding unmasked keys are divided into n_chunks runs of
 * consecutive pages, as equal as can be (chunks beyond the page count are
 * empty). q: n_head * head_dim floats, head h at h * head_dim.
 * Writes, for each of those query heads h, the partial result of chunk c:
 *     partials + (c * n_head + h) * (head_dim + 2) = { m, l, acc[head_dim] }
 * m the largest score in the chunk (-inf when it has none), l = sum
 * exp(s - m), acc = sum exp(s - m) v. ws: rvl_attn_ws_size(p) bytes,
 * 64-byte aligned, private to the caller.
 */
typedef void (*rvl_attn_decode_chunk_fn)(const rvl_attn_params *p, const float *q, int q_pos,
                                         int n_kv, int chunk, int n_chunks, int kvh0, int kvh1,
                                         float *partials, void *ws);

/*
 * Prefill: nq query tokens at positions p0 .. p0 + nq - 1 (causal; the
 * cache holds their keys and values, positions 0 .. p0 + nq - 1), for the
 * kv heads [kvh0, kvh1). Token i's queries are q + i * q_stride (floats),
 * head h at + h * head_dim; its output goes to out + i * out_stride, head
 * h at + h * head_dim. Tiles of up to 32 / g tokens (at least 1) times the
 * g query heads of a kv head share each key/value block. ws as above.
 */
typedef void (*rvl_attn_prefill_fn)(const rvl_attn_params *p, const float *q, size_t q_stride,
                                    int p0, int nq, int kvh0, int kvh1, float *out,
                                    size_t out_stride, void *ws);

typedef struct {
    const char *name;        /* "ref", "avx2", "avx512", "neon" */
    rvl_attn_decode_chunk_fn decode_chunk;
    rvl_attn_prefill_fn prefill;
} rvl_attn_kernels;

/* The variant of the ISA dispatch.h selects (RUVLLM_ISA included).
 * borrowed: static. */
const rvl_attn_kernels *rvl_attn_get(void);

/* The variant of one ISA (RVL_ISA_*), for tests and bench; NULL when this
 * binary lacks it or this CPU cannot run it. borrowed: static. */
const rvl_attn_kernels *rvl_attn_get_isa(int isa);

/* NULL when p describes something the kernels handle, else what is wrong
 * (static string). The kernels assume a checked p; call once per shape. */
const char *rvl_attn_check(const rvl_attn_params *p);

/* Bytes of workspace one decode_chunk or prefill call needs. */
size_t rvl_attn_ws_size(const rvl_attn_params *p);

/* Floats of the partials buffer for n_chunks chunks. */
size_t rvl_attn_partials_size(const rvl_attn_params *p, int n_chunks);

/*
 * The reduce step of decode: merges the n_chunks partials of each query
 * head h in [h0, h1), in chunk order, into out + h * head_dim:
 *     M = max_c m_c,  out = sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) l_c
 * (0 when every chunk is empty). One implementation for every variant.
 */
void rvl_attn_decode_reduce(const rvl_attn_params *p, int n_chunks, const float *partials, int h0,
                            int h1, float *out);

/* The normalization of one finished online softmax {m, l, acc} of query
 * head h: out = (acc * a) * inv with a = e^(m - M), inv = 1 / (l a +
 * e^(sink_h - M)), M = max(m, sink_h) (without sinks: a = 1, inv = 1 / l;
 * a row without keys, m = -inf: 0, 0). One compiled body for the reduce
 * and every variant's prefill, so that prefill and one-chunk decode give
 * the same bits. */
float rvl_attn_norm(const rvl_attn_params *p, int h, float m, float l, float *inv);

/* Decode on one thread: decode_chunk for every chunk and kv head, then the
 * reduce. partials: rvl_attn_partials_size(p, n_chunks) floats. */
void rvl_attn_decode(const rvl_attn_kernels *kk, const rvl_attn_params *p, const float *q,
                     int q_pos, int n_kv, int n_chunks, float *partials, float *out, void *ws);

/* ---- for the variants (kernels/ref, x86, arm) ---- */

/* The keys [*lo, *hi] (inclusive) a query at position q_pos sees among
 * [0, n_kv); *lo > *hi when none. */
static inline void rvl_attn_key_range(const rvl_attn_params *p, int q_pos, int n_kv, int *lo,
                                      int *hi)
{
    int h = q_pos < n_kv - 1 ? q_pos : n_kv - 1;
    int l = 0;
    if (p->window > 0 && q_pos - p->window + 1 > 0)
        l = q_pos - p->window + 1;
    *lo = l;
    *hi = h;
}

/* Chunk c of n of decode's key range [lo, hi]: keys [*c0, *c1]. */
static inline void rvl_attn_chunk_range(const rvl_attn_params *p, int lo, int hi, int c, int n,
                                        int *c0, int *c1)
{
    const int pt = p->page_tokens;
    if (lo > hi) {
        *c0 = 1;
        *c1 = 0;
        return;
    }
    const int pl = lo / pt, np = hi / pt - pl + 1;
    const int a = pl + (int)((int64_t)np * c / n), b = pl + (int)((int64_t)np * (c + 1) / n);
    int s = a * pt, e = b * pt - 1;
    *c0 = s > lo ? s : lo;
    *c1 = e < hi ? e : hi;
}

/* Query tokens per prefill tile: RVL_ATTN_BLOCK rows of (token, head). */
static inline int rvl_attn_tile_tokens(const rvl_attn_params *p)
{
    const int g = p->n_head / p->n_head_kv;
    return g >= RVL_ATTN_BLOCK ? 1 : RVL_ATTN_BLOCK / g;
}

/* The row of key (kind 0) or value (1) position t of kv head kh. */
static inline const void *rvl_attn_row(const rvl_attn_params *p, int kind, int kh, int t)
{
    const size_t es = p->kv_type == RVL_ATTN_F16 ? 2 : 4;
    const char *base = (const char *)(kind ? p->v : p->k);
    const int pg = t / p->page_tokens;
    return base + (size_t)p->page_table[pg] * p->page_stride + (size_t)kh * p->head_stride +
           (size_t)(t - pg * p->page_tokens) * (size_t)p->head_dim * es;
}

/* Rows of a tile: (token, query head) pairs sharing each key block. */
static inline int rvl_attn_tile_rows(const rvl_attn_params *p)
{
    return rvl_attn_tile_tokens(p) * (p->n_head / p->n_head_kv);
}

/* The workspace of one call, carved from ws (64-byte aligned pieces):
 * q rows (as the dots see them), scores of one block per row, and the
 * running max, sum and accumulator of each row. */
typedef struct {
    float *q;     /* [rows][head_dim] */
    float *s;     /* [rows][RVL_ATTN_BLOCK] */
    float *m, *l; /* [rows] */
    float *acc;   /* [rows][head_dim] */
} rvl_attn_ws;

static inline size_t rvl_attn_pad16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

static inline rvl_attn_ws rvl_attn_ws_split(const rvl_attn_params *p, void *ws)
{
    const size_t r = (size_t)rvl_attn_tile_rows(p), hd = (size_t)p->head_dim;
    rvl_attn_ws w;
    w.q = (float *)ws;
    w.s = w.q + rvl_attn_pad16(r * hd);
    w.m = w.s + rvl_attn_pad16(r * RVL_ATTN_BLOCK);
    w.l = w.m + rvl_attn_pad16(r);
    w.acc = w.l + rvl_attn_pad16(r);
    return w;
}

#define RVL_ATTN_DECL(isa)                                                                  \
    void rvl_attn_decode_chunk_##isa(const rvl_attn_params *p, const float *q, int q_pos,     \
                                     int n_kv, int chunk, int n_chunks, int kvh0, int kvh1,   \
                                     float *partials, void *ws);                              \
    void rvl_attn_prefill_##isa(const rvl_attn_params *p, const float *q, size_t q_stride,    \
                                int p0, int nq, int kvh0, int kvh1, float *out,               \
                                size_t out_stride, void *ws);

RVL_ATTN_DECL(ref)
RVL_ATTN_DECL(avx2)
RVL_ATTN_DECL(avx512)
RVL_ATTN_DECL(neon)

#endif
