/*
 * backend.h - the engine's backend operation table: what a compute
 * backend (Metal today; CUDA later) implements so that a session can run
 * on it. Portable C; not installed.
 *
 * Two levels:
 *   - session: open a model with the context parameters, decode tokens
 *     (prefill n > 1, decode n = 1: rvl_decode's contract), position,
 *     reset, truncate, close;
 *   - ops: the coarse operations a Llama-family forward pass is made of,
 *     on the backend's own tensors (rvl_bt: a device buffer and a byte
 *     offset; f32 rows `stride` floats apart) and weights (rvl_bw, by
 *     layer and role). metal/rvl_metal_backend.c's forward calls only
 *     these, so it can move here when a second backend arrives.
 *
 * Ops are queued, in order, on the session's current command stream and
 * run at the latest by `sync`; errors are kept and returned by `sync` (or
 * decode), so the forward pass reads top to bottom without checks.
 *
 * The CPU forward (lib/engine/forward.c, rvl_decode) is the "cpu" backend's
 * session level; it has no op level (NULL entries).
 */
#ifndef RVL_BACKEND_H
#define RVL_BACKEND_H

#include "ruvllm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rvl_backend rvl_backend;   /* one session on a backend */
typedef struct rvl_bw rvl_bw;             /* a weight on the device */

/* A tensor on the device: the backend's buffer and a byte offset. */
typedef struct {
    void *buf;
    size_t off;
} rvl_bt;

/* Weight roles of rvl_backend_ops.weight. */
typedef enum {
    RVL_BW_Q, RVL_BW_K, RVL_BW_V, RVL_BW_O,
    RVL_BW_GATE, RVL_BW_UP, RVL_BW_DOWN,
    RVL_BW_OUTPUT,                        /* (vocab, dim); layer ignored */
    RVL_BW_N
} rvl_bw_role;

/* Vectors of rvl_backend_ops.vec (f32 on the device). */
typedef enum {
    RVL_BV_ATTN_NORM, RVL_BV_FFN_NORM,    /* (dim) */
    RVL_BV_BQ, RVL_BV_BK, RVL_BV_BV,      /* biases, or rvl_bt{NULL} when absent */
    RVL_BV_OUTPUT_NORM,                   /* (dim); layer ignored */
} rvl_bv_role;

typedef struct rvl_backend_ops {
    const char *name;                     /* "cpu", "metal" */

    /* --- session --- */
    /* owned: close with close (NULL accepted). m is borrowed and must
     * outlive the session. */
    int (*open)(rvl_backend **out, const rvl_model *m, const rvl_ctx_params *p);
    void (*close)(rvl_backend *b);
    /* rvl_decode's contract: *logits (borrowed, valid until the next call)
     * are the last token's, or every token's with p->all_logits. */
    int (*decode)(rvl_backend *b, const int32_t *tokens, uint32_t n, const float **logits);
    uint32_t (*pos)(const rvl_backend *b);
    void (*reset)(rvl_backend *b);
    int (*truncate)(rvl_backend *b, uint32_t pos);
    /* "Apple M2 Pro", "metal-emu", "cpu" (borrowed) */
    const char *(*device_name)(const rvl_backend *b);

    /* --- ops (NULL for the cpu backend) --- */
    const rvl_bw *(*weight)(rvl_backend *b, uint32_t layer, rvl_bw_role role);
    rvl_bt (*vec)(rvl_backend *b, uint32_t layer, rvl_bv_role role);
    /* x[t] = embedding row of tokens[t], t < nb */
    void (*embed)(rvl_backend *b, const int32_t *tokens, uint32_t nb, rvl_bt x, size_t x_stride);
    /* y[t] = rmsnorm(x[t]) * w, rows of n */
    void (*rmsnorm)(rvl_backend *b, rvl_bt x, size_t x_stride, rvl_bt w, rvl_bt y,
                    size_t y_stride, uint32_t n, uint32_t nb, float eps);
    /* y[t] = W x[t] */
    void (*matmul)(rvl_backend *b, const rvl_bw *w, rvl_bt x, size_t x_stride, rvl_bt y,
                   size_t y_stride, uint32_t nb);
    /* y[t][i] += v[i], i < n (a bias) */
    void (*add_row)(rvl_backend *b, rvl_bt y, size_t y_stride, rvl_bt v, uint32_t n, uint32_t nb);
    /* y[i] += a[i], i < n; g[i] = silu(g[i]) * u[i], i < n */
    void (*add)(rvl_backend *b, rvl_bt y, rvl_bt a, size_t n);
    void (*swiglu)(rvl_backend *b, rvl_bt g, rvl_bt u, size_t n);
    /* RoPE, in place, of n_head heads of nb tokens at positions pos0.. */
    void (*rope)(rvl_backend *b, rvl_bt x, size_t x_stride, uint32_t n_head, uint32_t pos0,
                 uint32_t nb);
    /* K (rotated by RoPE here) and V rows of nb tokens into the cache of
     * `layer` at positions pos0.. */
    void (*kv_append)(rvl_backend *b, uint32_t layer, rvl_bt k, rvl_bt v, size_t stride,
                      uint32_t pos0, uint32_t nb);
    /* causal attention of nb query tokens at pos0.. over the cache
     * (positions 0 .. pos0 + nb - 1): out[t] (n_head * head_dim) */
    void (*attend)(rvl_backend *b, uint32_t layer, rvl_bt q, size_t q_stride, uint32_t pos0,
                   uint32_t nb, rvl_bt out, size_t out_stride);
    /* waits for everything queued; copies n floats of x to dst when dst */
    int (*sync)(rvl_backend *b, rvl_bt x, float *dst, size_t n);
} rvl_backend_ops;

/* The backend called `name` ("cpu", "metal"), or NULL with the reason in
 * rvl_errmsg() (unknown name; "metal" in a build without Metal). */
const rvl_backend_ops *rvl_backend_find(const char *name);
/* The same, returning 0 or the error's code: RVL_EUNSUPPORTED for "metal"
 * in a build without it, RVL_EINVAL for an unknown name (*out NULL). */
int rvl_backend_get(const char *name, const rvl_backend_ops **out);
/* Whether this build has the named backend (no error set). */
int rvl_backend_available(const char *name);
/* Make a backend that a program links itself findable by its name (then
 * rvl_ctx_open with rvl_ctx_params.backend = that name runs on it): the
 * emulator's test registers rvl_metal_backend_ops, which libruvllm links
 * only in make METAL=1 builds. Call before opening contexts (not thread-
 * safe); registering a name again replaces it. RVL_EINVAL for "cpu" or a
 * table without the session level, RVL_ERANGE past 4 backends. */
int rvl_backend_register(const rvl_backend_ops *ops);

/* The Metal backend (metal/rvl_metal_backend.c): linked into ruvllm only
 * by `make METAL=1` on macOS, and into the emulator's test. */
extern const rvl_backend_ops rvl_metal_backend_ops;

#ifdef __cplusplus
}
#endif

#endif
