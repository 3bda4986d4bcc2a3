/*
 * rowops.h - the per-row steps of the forward pass around its matmuls and
 * attention: RMSNorm, RoPE, SwiGLU, softmax. Plain scalar reference
 * kernels (kernels/ref/rowops_ref.c), called by lib/engine's forward pass
 * (on its thread pool: lib/engine/ops.c) and measured by `ruvllm bench
 * kernels`.
 *
 * As every kernel: no allocation, no I/O, no argument checks; float
 * arrays need their natural alignment. Each call's result depends only on
 * its inputs (never on which thread runs it), so splitting rows or slices
 * over threads gives the same bits as one thread.
 */
#ifndef RVL_ROWOPS_H
#define RVL_ROWOPS_H

#include <stdbool.h>
#include <stdint.h>

/* y = x / sqrt(mean(x^2) + eps) * w over n elements, the squares summed
 * in double (as ggml does). y may be x. */
void rmsnorm_f32_ref(float *y, const float *x, const float *w, int64_t n, float eps);

/* RoPE in place: n_heads heads of head_dim floats, contiguous, each of
 * whose first rope_dim elements (rope_dim even, <= head_dim) are rotated
 * pair by pair, pair i by the angle whose cos and sin are cs[i] and sn[i]
 * (rope_dim/2 each: one position's row of the RoPE tables). The pairs are
 * (2i, 2i+1) (NORM, Llama) or, with neox, (i, i + rope_dim/2) (NEOX,
 * Qwen2 and others):
 *     x[a] = x[a] cs[i] - x[b] sn[i],   x[b] = x[a] sn[i] + x[b] cs[i] */
void rope_f32_ref(float *x, int64_t n_heads, int64_t head_dim, int64_t rope_dim, const float *cs,
                  const float *sn, bool neox);

/* SwiGLU in place over n elements: g = silu(g) * u = g / (1 + e^-g) * u. */
void swiglu_f32_ref(float *g, const float *u, int64_t n);

/* GeGLU with GELU's tanh approximation (Gemma), in place over n elements:
 * g = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * u. */
void geglu_tanh_f32_ref(float *g, const float *u, int64_t n);

/* gpt-oss's clamped SwiGLU, in place over n elements: with x = min(g, 7)
 * and y = clamp(u, -7, 7), g = x sigmoid(1.702 x) (y + 1). */
void swiglu_oai_f32_ref(float *g, const float *u, int64_t n);

/* Soft-capping in place (Gemma's attention and final logits): x = cap *
 * tanh(x / cap), cap > 0. */
void softcap_f32_ref(float *x, int64_t n, float cap);

/* y = softmax(x) over n elements: exp(x - max) / sum, the sum in double.
 * y may be x. */
void softmax_f32_ref(float *y, const float *x, int64_t n);

/* The variants per ISA of the two row steps a prompt spends measurable
 * time in (RMSNorm, SwiGLU: 9% of a SmolLM2 prompt on the scalar code),
 * chosen as the matmul kernels are (dispatch.h, RUVLLM_ISA). Each is
 * element-wise the same whatever slice of a row it is given (SwiGLU is
 * split over threads by elements), so the pool's split changes no bit;
 * against ref: RMSNorm's double sum in another order, SwiGLU's exp within
 * 2 ulp (tests/test_rowops.c). */
typedef struct {
    const char *name;
    void (*rmsnorm)(float *y, const float *x, const float *w, int64_t n, float eps);
    void (*swiglu)(float *g, const float *u, int64_t n);
} rvl_rowops_kernels;
/* The selected ISA's (ref where it has none); per ISA, NULL when that one
 * does not run here. */
const rvl_rowops_kernels *rvl_rowops_get(void);
const rvl_rowops_kernels *rvl_rowops_get_isa(int isa);

void rmsnorm_f32_avx512(float *y, const float *x, const float *w, int64_t n, float eps);
void swiglu_f32_avx512(float *g, const float *u, int64_t n);

#endif
