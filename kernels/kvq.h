/*
 * kvq.h - page codecs of the quantized KV cache: the storage formats of one
 * page (RVL_KVQ_PAGE = 32 positions) of one kv head, and the attention-side
 * primitives that read them (scores of q against the keys of a page; p . V
 * over the values of a page). Keys and values may use different formats.
 *
 * Formats (hd = head_dim; "codes" are the per-token payload, stored first
 * as [32][row bytes], followed by the page's side data):
 *
 *   F16   [32][hd] f16.                                  2 hd B/token
 *   Q8    int8 codes [32][hd], then f16 scales [32][ng], ng = ceil(hd/32):
 *         per token, groups of 32 channels (the last one may be shorter),
 *         symmetric: d = amax / 127, code = round(x / d).    hd + 2 ng B/token
 *   Q4    4-bit codes, two channels per byte (channel 2i in the low nibble,
 *         2i + 1 in the high one), [32][ceil(hd/2)], asymmetric x ~ m + d c,
 *         c in 0..15, d = (max - min) / 15, m = min (KIVI):
 *           keys:   per CHANNEL over the page's positions: then f16 d[hd],
 *                   f16 m[hd]; keys of real models have a few channels of
 *                   large magnitude, and per-channel groups give each its
 *                   own range.                  ceil(hd/2) + hd/8 B/token
 *           values: per token, groups of 32 channels: then f16 {d, m}
 *                   [32][ng].                   ceil(hd/2) + 4 ng B/token
 *         A per-channel key page takes its ranges from the rows encoded
 *         together (rvl_kvq_encode_page with n rows): the cache keeps the
 *         page being filled in f16/f32 (KIVI's residual) and encodes it
 *         once it is full (or re-encodes it from the full-precision rows).
 *   TQ4   TurboQuant: x -> u = H D x / |x| (D a fixed random +-1 diagonal,
 *   TQ3   H the orthonormal Walsh-Hadamard matrix, so u is a unit vector
 *         whose coordinates, times sqrt(hd), are close to N(0, 1)); each
 *         coordinate u_i sqrt(hd) is replaced by the nearest centroid of
 *         the Lloyd-Max quantizer of N(0, 1) with 16 (TQ4) or 8 (TQ3)
 *         levels (rvl_kvq_codebook; tests/ref/gen_lloyd_max.py). Codes
 *         [32][hd/2] (TQ4: nibbles as Q4) or [32][3 hd/8] (TQ3: eight
 *         3-bit codes per 3 bytes, little-endian, coordinate 8i + j at bit
 *         3j of bytes 3i..3i+2), then f16 g[32] with
 *             g = |x| / |c|,   c = (centroid of code_i)_i
 *         Reconstruction renormalizes the code vector to the norm of x:
 *             x^ = D H (g c) = |x| D H (c / |c|)
 *         (|c| is folded into g at encode time, so reading a key costs a
 *         codebook lookup and an FMA per coordinate.) head_dim must be a
 *         power of two, 8 .. RVL_KVQ_MAX_HEAD_DIM.
 *                                   TQ4 hd/2 + 2, TQ3 3 hd/8 + 2 B/token
 *
 * For hd = 64: F16 128, Q8 68, Q4 keys 40, Q4 values 40, TQ4 34, TQ3 26
 * bytes per token per head (F16 / TQ4 = 3.76; hd = 128: 256 / 66 = 3.88).
 *
 * The rotation D is the same for every layer and head: sign i is bit 0 of
 * splitmix64(0x9e3779b97f4a7c15 * (i + 1)) (+1 when set), so one rotation
 * of q serves every layer. (A per-layer seed would change nothing in the
 * formats; a global one keeps the primitives stateless.)
 *
 * Attention with TQ keys: rotate each query head once per step,
 * q' = H D q (rvl_kvq_rotate), then s_t = q . x^_t = g_t sum_i q'_i c_i
 * (rotation is orthogonal). With TQ values: accumulate
 * acc' = sum_t p_t g_t c_t in the rotated domain, then rotate the output
 * back once per head per step, out = D H acc' (rvl_kvq_unrotate; linear,
 * so it commutes with the softmax's rescaling and the final 1 / l).
 * Q8/Q4/F16 pages take and give unrotated vectors.
 *
 * Encoding is ref only (once per token); the page readers come per ISA
 * (rvl_kvq_get_isa). SIMD readers agree with ref to float rounding: they
 * sum the same products in another order (tests/test_kvq.c).
 */
#ifndef RVL_KVQ_H
#define RVL_KVQ_H

#include <stddef.h>
#include <stdint.h>

enum {
    RVL_KVQ_F16 = 0,
    RVL_KVQ_Q8 = 1,
    RVL_KVQ_Q4 = 2,
    RVL_KVQ_TQ4 = 3,
    RVL_KVQ_TQ3 = 4,
    RVL_KVQ_COUNT
};

enum {
    RVL_KVQ_KEY = 0,
    RVL_KVQ_VALUE = 1,
};

#define RVL_KVQ_PAGE 32          /* positions per page */
#define RVL_KVQ_GROUP 32         /* channels per Q8 / Q4-value group */
#define RVL_KVQ_MAX_HEAD_DIM 1024

/* "f16", "q8", "q4", "tq4", "tq3"; NULL out of range. */
const char *rvl_kvq_name(int fmt);
/* The format of a name, or -1. */
int rvl_kvq_parse(const char *name);

/* NULL when (fmt, kind, head_dim) is a format the codecs handle, else what
 * is wrong (static string, e.g. "tq4 needs a power-of-two head_dim (8 ..
 * 1024), got 80"). Everything below assumes a checked triple. */
const char *rvl_kvq_check(int fmt, int kind, int head_dim);

/* Bytes of one page (RVL_KVQ_PAGE positions) of one kv head. */
size_t rvl_kvq_page_bytes(int fmt, int kind, int head_dim);
/* Bytes per token per head, side data included: page_bytes / 32. */
double rvl_kvq_token_bytes(int fmt, int kind, int head_dim);

/*
 * Encodes rows 0 .. n - 1 (1 <= n <= 32) of a page: row j is head_dim
 * floats at x + j * x_stride. Rows n .. 31 are left as zero codes with a
 * zero scale or norm (they decode to 0). Finite input expected; scales and
 * norms saturate at the f16 maximum.
 */
void rvl_kvq_encode_page(int fmt, int kind, int head_dim, const float *x, size_t x_stride,
                         int n, void *page);
/* Row j of a page, the other rows untouched: the cache appends a token.
 * Q4 keys are per channel: the row is quantized (clamped) with the ranges
 * the page got from rvl_kvq_encode_page; to encode a page of Q4 keys as
 * KIVI does, collect its rows in full precision and encode the page. */
void rvl_kvq_encode_row(int fmt, int kind, int head_dim, const float *x, int j, void *page);
/* Rows 0 .. n - 1 back as floats (unrotated: what the page stands for). */
void rvl_kvq_decode_page(int fmt, int kind, int head_dim, const void *page, int n, float *x,
                         size_t x_stride);

/* The Lloyd-Max centroids of N(0, 1), ascending, symmetric (c[L-1-i] =
 * -c[i]); levels = 16 (TQ4) or 8 (TQ3). borrowed: static. */
const float *rvl_kvq_codebook(int levels);
/* Its mean squared error for N(0, 1) input (0.009501008 / 0.034547761). */
double rvl_kvq_codebook_mse(int levels);

/* Sign i of D, +1 or -1. */
float rvl_kvq_sign(int i);
/* In place, x of a power-of-two length n: x <- H x, H the orthonormal
 * Walsh-Hadamard matrix (Sylvester order, entries +-1/sqrt(n)); H is
 * symmetric and its own inverse. O(n log n). */
void rvl_kvq_fwht(float *x, int n);
/* x <- H D x (q before scoring TQ keys) and x <- D H x (the rotated-domain
 * output of TQ values back). */
void rvl_kvq_rotate(float *x, int n);
void rvl_kvq_unrotate(float *x, int n);

/*
 * Page readers, rows j0 .. j1 (0 <= j0 <= j1 < 32) of one page, for the nq
 * >= 1 query heads that share its kv head (GQA), so that a page's codes are
 * decoded once per step and used nq times:
 *   scores: s[h * 32 + j] = q_h . k^_j for j in [j0, j1], q_h = q + h * head_dim
 *           (unscaled; q rotated for TQ pages; other entries untouched);
 *   accum:  acc_h[d] += sum_j p[h * 32 + j] v^_j[d], acc_h = acc + h * head_dim
 *           (rotated domain for TQ pages).
 */
typedef void (*rvl_kvq_scores_fn)(int fmt, int head_dim, const void *page, int j0, int j1,
                                  const float *q, int nq, float *s);
typedef void (*rvl_kvq_accum_fn)(int fmt, int head_dim, const void *page, int j0, int j1,
                                 const float *p, int nq, float *acc);

typedef struct {
    const char *name;           /* "ref", "avx2", "avx512", "neon" */
    rvl_kvq_scores_fn scores;   /* keys: kind RVL_KVQ_KEY */
    rvl_kvq_accum_fn accum;     /* values: kind RVL_KVQ_VALUE */
} rvl_kvq_kernels;

/* The readers of one ISA (dispatch.h's RVL_ISA_*); NULL when this binary
 * lacks it or this CPU cannot run it. rvl_kvq_get: the selected ISA's.
 * borrowed: static. */
const rvl_kvq_kernels *rvl_kvq_get_isa(int isa);
const rvl_kvq_kernels *rvl_kvq_get(void);

/* ---- layout helpers, shared by the variants ---- */

static inline int rvl_kvq_groups(int hd)
{
    return (hd + RVL_KVQ_GROUP - 1) / RVL_KVQ_GROUP;
}

/* Code bytes of one row. */
static inline size_t rvl_kvq_row_bytes(int fmt, int hd)
{
    switch (fmt) {
    case RVL_KVQ_F16: return (size_t)hd * 2;
    case RVL_KVQ_Q8: return (size_t)hd;
    case RVL_KVQ_Q4: return (size_t)(hd + 1) / 2;
    case RVL_KVQ_TQ4: return (size_t)hd / 2;
    case RVL_KVQ_TQ3: return (size_t)hd * 3 / 8;
    default: return 0;
    }
}

/* The side data after the codes (f16 scales / norms). */
static inline const uint16_t *rvl_kvq_side(int fmt, int hd, const void *page)
{
    return (const uint16_t *)((const char *)page + RVL_KVQ_PAGE * rvl_kvq_row_bytes(fmt, hd));
}

#define RVL_KVQ_DECL(isa)                                                                    \
    void rvl_kvq_scores_##isa(int fmt, int head_dim, const void *page, int j0, int j1,       \
                              const float *q, int nq, float *s);                             \
    void rvl_kvq_accum_##isa(int fmt, int head_dim, const void *page, int j0, int j1,        \
                             const float *p, int nq, float *acc);

RVL_KVQ_DECL(ref)
RVL_KVQ_DECL(avx2)
RVL_KVQ_DECL(avx512)
RVL_KVQ_DECL(neon)

#endif
