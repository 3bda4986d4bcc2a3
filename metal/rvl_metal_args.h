/*
 * rvl_metal_args.h - the argument structs of the Metal kernels and the
 * dispatch sizes that go with them, shared by the shaders (the .metal files),
 * the macOS host backend and the Linux emulator's tests (tests/metal-emu).
 *
 * Portable: plain C (C11), Objective-C and the Metal Shading Language. The
 * structs hold only fixed-size fields ordered 8-byte first, so their layout
 * is the same in every language (checked by the static asserts at the end).
 * A kernel takes its struct by value in `constant` memory at [[buffer(0)]];
 * the other buffers follow in the order each kernel's comment gives.
 *
 * Dispatch: each kernel family has a C-only helper rvl_mtl_*_dispatch()
 * that returns the threadgroup count (grid, in threadgroups, as
 * dispatchThreadgroups: takes it) and the threads per threadgroup. The
 * kernels assume exactly those threadgroup sizes.
 */
#ifndef RVL_METAL_ARGS_H
#define RVL_METAL_ARGS_H

#ifndef __METAL_VERSION__
#include <stddef.h>
#include <stdint.h>
#endif

/* ======================================================================
 * Shared constants
 * ====================================================================== */

#define RVL_MTL_SIMD 32            /* lanes per simdgroup (Apple GPUs) */

/* Matmul (metal/matmul.metal). GEMV: a threadgroup of MV_NSG simdgroups,
 * each computing MV_NR consecutive weight rows for one token; GEMM: a
 * threadgroup of MM_THREADS threads computing a tile of MM_TR weight rows
 * times MM_TT tokens, MM_TK elements of the inner dimension at a time. */
#define RVL_MTL_MV_NSG 2
#define RVL_MTL_MV_NR 4
#define RVL_MTL_MM_THREADS 128
#define RVL_MTL_MM_TR 32
#define RVL_MTL_MM_TT 32
#define RVL_MTL_MM_TK 32

/* RMSNorm, softmax (metal/norm.metal): one threadgroup per row. */
#define RVL_MTL_NORM_THREADS 256

/* RoPE (metal/rope.metal): one threadgroup per (head, token). */
#define RVL_MTL_ROPE_THREADS 64

/* Attention (metal/attn.metal). */
#define RVL_MTL_ATTN_MAX_HD 256    /* largest head_dim of the attention kernels */
#define RVL_MTL_DEC_NSG 4          /* decode: simdgroups per threadgroup */
#define RVL_MTL_DEC_BLOCK 32       /* decode: keys per online-softmax step */
#define RVL_MTL_PF_THREADS 128     /* prefill: threads per threadgroup */
#define RVL_MTL_PF_ROWS 8          /* prefill: (token, head) rows per tile */
#define RVL_MTL_PF_KEYS 16         /* prefill: keys per block (PF_ROWS * PF_KEYS = PF_THREADS) */
#define RVL_MTL_RED_THREADS 32     /* reduce: one simdgroup per query head */

/* KV append (metal/kv.metal): one simdgroup per (token, kv head). */
#define RVL_MTL_KV_THREADS 32
#define RVL_MTL_KV_MAX_HD 1024
#define RVL_MTL_KV_PAGE 32         /* positions per quantized page (RVL_KVQ_PAGE) */

/* RoPE modes (rope and the fused RoPE of attention / KV append). */
enum {
    RVL_MTL_ROPE_NONE = 0,   /* no rotation */
    RVL_MTL_ROPE_NORM = 1,   /* pairs (2i, 2i + 1): Llama */
    RVL_MTL_ROPE_NEOX = 2,   /* pairs (i, i + rope_dim / 2): NeoX, Qwen, Gemma */
};

/* KV page formats: kernels/kvq.h's ids (F16 0, Q8 1, Q4 2, TQ4 3, TQ3 4),
 * plus attn.h's f32 cache rows (RVL_ATTN_F32), which have no kvq id. */
enum {
    RVL_MTL_KV_F16 = 0,
    RVL_MTL_KV_Q8 = 1,
    RVL_MTL_KV_Q4 = 2,       /* not implemented by the Metal kernels yet */
    RVL_MTL_KV_TQ4 = 3,
    RVL_MTL_KV_TQ3 = 4,      /* not implemented by the Metal kernels yet */
    RVL_MTL_KV_F32 = 5,
};

/* ======================================================================
 * Argument structs
 * ====================================================================== */

/*
 * Matmul: y[t][r] = sum_i W[r][i] * x[t][i], t < n_tok, r < n_rows,
 * i < k; W in a block format, x and y f32.
 * Buffers: 0 args, 1 W (row r at r * w_row_bytes), 2 x, 3 y.
 */
typedef struct {
    uint64_t w_row_bytes;    /* bytes between weight rows */
    uint64_t x_stride;       /* floats between the tokens of x */
    uint64_t y_stride;       /* floats between the tokens of y */
    int32_t k;               /* inner dimension: a multiple of the format's block */
    int32_t n_rows;          /* weight rows = outputs per token */
    int32_t n_tok;           /* tokens (1: decode) */
    int32_t pad_;
} rvl_mtl_matmul_args;

/*
 * RMSNorm: y = x / sqrt(mean(x^2) + eps) * w, per row of n.
 * Softmax: y = softmax(scale * x), per row of n (eps unused).
 * Buffers: 0 args, 1 x, 2 w (RMSNorm only), 2|3 y.
 */
typedef struct {
    uint64_t x_stride;       /* floats between rows of x */
    uint64_t y_stride;       /* floats between rows of y */
    int32_t n;               /* elements per row */
    float eps;               /* RMSNorm */
    float scale;             /* softmax */
    int32_t pad_;
} rvl_mtl_norm_args;

/*
 * RoPE of n_tok tokens of n_head heads, head h of token t at
 * x + t * x_stride + h * head_dim: the first rope_dim elements rotated by
 * the angles of position pos[t], the rest copied. cos/sin tables as
 * lib/engine/rope.c builds them: cos_t[p * rope_dim/2 + i] for pair i.
 * Buffers: 0 args, 1 x, 2 y (may be x), 3 cos_t, 4 sin_t, 5 pos (int32).
 */
typedef struct {
    uint64_t x_stride, y_stride;  /* floats between tokens */
    int32_t n_tok, n_head;
    int32_t head_dim, rope_dim;   /* rope_dim even, <= head_dim */
    int32_t mode;                 /* RVL_MTL_ROPE_* */
    int32_t pad_;
} rvl_mtl_rope_args;

/*
 * Attention over the paged KV cache (kernels/attn.h's semantics). Key
 * position t of kv head kh is row t % page_tokens of the page
 *     k + page_table[t / page_tokens] * k_page_stride + kh * k_head_stride
 * (the same with v): for F16 / F32 the rows are head_dim elements, for the
 * quantized formats the page is kernels/kvq.h's page of 32 positions
 * (codes, then side data) and page_tokens must be 32.
 *
 * Decode (rvl_attn_decode_f32): one query token at q_pos over keys
 * [0, n_kv), split into n_chunks runs of pages (attn.h's
 * rvl_attn_chunk_range); threadgroup (c, kh) writes the partials of chunk
 * c for the query heads of kv head kh as attn.h lays them out:
 *     partials + (c * n_head + h) * (head_dim + 2) = { m, l, acc[head_dim] }
 * with acc in the rotated domain when v_fmt is TQ4. Buffers: 0 args,
 * 1 q, 2 k, 3 v, 4 page_table, 5 partials.
 * Reduce (rvl_attn_reduce_f32): merges the partials per query head into
 * out + h * head_dim (unrotating TQ4 values). Buffers: 0 args,
 * 1 partials, 2 out.
 * Prefill (rvl_attn_prefill_f32): n_q tokens at positions p0 .. p0+n_q-1,
 * causal, token i's queries at q + i * q_stride, output at
 * out + i * out_stride; with rope_mode, q is first rotated by RoPE at its
 * position (tables as for rope). Buffers: 0 args, 1 q, 2 k, 3 v,
 * 4 page_table, 5 out, 6 cos_t, 7 sin_t.
 */
typedef struct {
    uint64_t k_page_stride, k_head_stride;  /* bytes */
    uint64_t v_page_stride, v_head_stride;  /* bytes */
    uint64_t q_stride, out_stride;          /* floats, prefill */
    int32_t head_dim;        /* 1 .. RVL_MTL_ATTN_MAX_HD (power of two for TQ4) */
    int32_t n_head, n_head_kv;
    float scale, softcap;    /* softcap 0: off */
    int32_t window;          /* 0: off; else keys t > pos - window */
    int32_t q_f16;           /* round q to f16 (after RoPE) before the dots */
    int32_t k_fmt, v_fmt;    /* RVL_MTL_KV_* */
    int32_t page_tokens;
    int32_t q_pos, n_kv, n_chunks;          /* decode */
    int32_t p0, n_q;                        /* prefill */
    int32_t rope_mode, rope_dim;            /* prefill's fused RoPE of q */
    int32_t pad_;
} rvl_mtl_attn_args;

/*
 * KV append: rows x + t * x_stride + kh * head_dim (t < n_tok, kh <
 * n_head_kv), optionally rotated by RoPE at position p0 + t, encoded into
 * row (p0 + t) % page_tokens of logical page (p0 + t) / page_tokens of
 * kv head kh, exactly as rvl_kvq_encode_row does (F16, Q8, TQ4) or as
 * plain f32 rows (F32). Buffers: 0 args, 1 x, 2 cache base, 3 page_table,
 * 4 cos_t, 5 sin_t.
 */
typedef struct {
    uint64_t page_stride, head_stride;  /* bytes */
    uint64_t x_stride;                  /* floats between tokens */
    int32_t head_dim, n_head_kv, n_tok;
    int32_t fmt;                        /* RVL_MTL_KV_F16, Q8, TQ4, F32 */
    int32_t page_tokens;                /* 32 for Q8 / TQ4 */
    int32_t p0;
    int32_t rope_mode, rope_dim;
} rvl_mtl_kv_append_args;

#ifdef __METAL_VERSION__
static_assert(sizeof(rvl_mtl_matmul_args) == 40, "layout");
static_assert(sizeof(rvl_mtl_norm_args) == 32, "layout");
static_assert(sizeof(rvl_mtl_rope_args) == 40, "layout");
static_assert(sizeof(rvl_mtl_attn_args) == 120, "layout");
static_assert(sizeof(rvl_mtl_kv_append_args) == 56, "layout");
#else
_Static_assert(sizeof(rvl_mtl_matmul_args) == 40, "layout");
_Static_assert(sizeof(rvl_mtl_norm_args) == 32, "layout");
_Static_assert(sizeof(rvl_mtl_rope_args) == 40, "layout");
_Static_assert(sizeof(rvl_mtl_attn_args) == 120, "layout");
_Static_assert(sizeof(rvl_mtl_kv_append_args) == 56, "layout");
#endif

/* ======================================================================
 * Helpers both sides use
 * ====================================================================== */

/* Chunk c of n of decode's key range [lo, hi]: keys [*c0, *c1], *c0 > *c1
 * when empty. The same split as kernels/attn.h's rvl_attn_chunk_range
 * (runs of whole pages); a test checks the two agree. */
#ifdef __METAL_VERSION__
static inline void rvl_mtl_chunk_range(int pt, int lo, int hi, int c, int n, thread int *c0,
                                       thread int *c1)
#else
static inline void rvl_mtl_chunk_range(int pt, int lo, int hi, int c, int n, int *c0, int *c1)
#endif
{
    if (lo > hi) {
        *c0 = 1;
        *c1 = 0;
        return;
    }
    const int pl = lo / pt, np = hi / pt - pl + 1;
    const int a = pl + (int)((int64_t)np * c / n), b = pl + (int)((int64_t)np * (c + 1) / n);
    const int s = a * pt, e = b * pt - 1;
    *c0 = s > lo ? s : lo;
    *c1 = e < hi ? e : hi;
}

/* ======================================================================
 * Dispatch sizes (host side)
 * ====================================================================== */
#ifndef __METAL_VERSION__

typedef struct {
    uint32_t grid[3];        /* threadgroups per grid */
    uint32_t threads[3];     /* threads per threadgroup */
} rvl_mtl_dispatch;

static inline uint32_t rvl_mtl_div_up(uint64_t a, uint64_t b)
{
    return (uint32_t)((a + b - 1) / b);
}

/* The matmul kernel name suffix of a weight format (rvl_type id), or NULL
 * when the Metal kernels lack it: "rvl_mul_mv_<s>_f32" (GEMV) and
 * "rvl_mul_mm_<s>_f32" (GEMM). */
static inline const char *rvl_mtl_matmul_suffix(uint32_t type)
{
    switch (type) {
    case 2: return "q4_0";
    case 8: return "q8_0";
    case 12: return "q4_K";
    case 14: return "q6_K";
    case 1024: return "rvl_i4s_g32";
    case 1025: return "rvl_i4s_g64";
    case 1026: return "rvl_i4s_g128";
    case 1027: return "rvl_i4a_g32";
    case 1028: return "rvl_i4a_g64";
    case 1029: return "rvl_i4a_g128";
    case 1033: return "mlx_a4_g64";
    default: return 0;
    }
}

/* GEMV (any n_tok, but meant for n_tok = 1..4): grid (row groups, tokens). */
static inline rvl_mtl_dispatch rvl_mtl_mv_dispatch(const rvl_mtl_matmul_args *a)
{
    rvl_mtl_dispatch d = { { rvl_mtl_div_up((uint64_t)a->n_rows, RVL_MTL_MV_NSG * RVL_MTL_MV_NR),
                             (uint32_t)a->n_tok, 1 },
                           { RVL_MTL_MV_NSG * RVL_MTL_SIMD, 1, 1 } };
    return d;
}

/* GEMM: grid (row tiles, token tiles). */
static inline rvl_mtl_dispatch rvl_mtl_mm_dispatch(const rvl_mtl_matmul_args *a)
{
    rvl_mtl_dispatch d = { { rvl_mtl_div_up((uint64_t)a->n_rows, RVL_MTL_MM_TR),
                             rvl_mtl_div_up((uint64_t)a->n_tok, RVL_MTL_MM_TT), 1 },
                           { RVL_MTL_MM_THREADS, 1, 1 } };
    return d;
}

/* RMSNorm / softmax over n_rows rows. */
static inline rvl_mtl_dispatch rvl_mtl_norm_dispatch(uint32_t n_rows)
{
    rvl_mtl_dispatch d = { { n_rows, 1, 1 }, { RVL_MTL_NORM_THREADS, 1, 1 } };
    return d;
}

static inline rvl_mtl_dispatch rvl_mtl_rope_dispatch(const rvl_mtl_rope_args *a)
{
    rvl_mtl_dispatch d = { { (uint32_t)a->n_head, (uint32_t)a->n_tok, 1 },
                           { RVL_MTL_ROPE_THREADS, 1, 1 } };
    return d;
}

/* Decode: grid (n_chunks, n_head_kv); then the reduce: grid (n_head). */
static inline rvl_mtl_dispatch rvl_mtl_decode_dispatch(const rvl_mtl_attn_args *a)
{
    rvl_mtl_dispatch d = { { (uint32_t)a->n_chunks, (uint32_t)a->n_head_kv, 1 },
                           { RVL_MTL_DEC_NSG * RVL_MTL_SIMD, 1, 1 } };
    return d;
}

static inline rvl_mtl_dispatch rvl_mtl_reduce_dispatch(const rvl_mtl_attn_args *a)
{
    rvl_mtl_dispatch d = { { (uint32_t)a->n_head, 1, 1 }, { RVL_MTL_RED_THREADS, 1, 1 } };
    return d;
}

/* Floats of decode's partials buffer. */
static inline size_t rvl_mtl_partials_floats(const rvl_mtl_attn_args *a)
{
    return (size_t)a->n_chunks * (size_t)a->n_head * (size_t)(a->head_dim + 2);
}

/* Prefill: a tile is RVL_MTL_PF_ROWS (token, head) rows: gh = min(g, 8)
 * heads of one kv head times 8 / gh tokens; grid (token tiles,
 * n_head_kv * ceil(g / gh)). */
static inline int rvl_mtl_prefill_heads(const rvl_mtl_attn_args *a)
{
    const int g = a->n_head / a->n_head_kv;
    return g < RVL_MTL_PF_ROWS ? g : RVL_MTL_PF_ROWS;
}

static inline rvl_mtl_dispatch rvl_mtl_prefill_dispatch(const rvl_mtl_attn_args *a)
{
    const int g = a->n_head / a->n_head_kv, gh = rvl_mtl_prefill_heads(a);
    const int tt = RVL_MTL_PF_ROWS / gh;
    rvl_mtl_dispatch d = { { rvl_mtl_div_up((uint64_t)a->n_q, (uint64_t)tt),
                             (uint32_t)(a->n_head_kv * ((g + gh - 1) / gh)), 1 },
                           { RVL_MTL_PF_THREADS, 1, 1 } };
    return d;
}

static inline rvl_mtl_dispatch rvl_mtl_kv_append_dispatch(const rvl_mtl_kv_append_args *a)
{
    rvl_mtl_dispatch d = { { (uint32_t)a->n_tok, (uint32_t)a->n_head_kv, 1 },
                           { RVL_MTL_KV_THREADS, 1, 1 } };
    return d;
}

#endif /* !__METAL_VERSION__ */

#endif
