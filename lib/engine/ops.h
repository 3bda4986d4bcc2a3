/*
 * ops.h - kernels/rowops.h's per-row steps over a batch of rows on the
 * thread pool, as the forward pass runs them. One row (or one slice) is
 * computed the same way whichever thread takes it: the results do not
 * depend on the thread count.
 */
#ifndef RVL_OPS_H
#define RVL_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "ruvllm.h"

/* RMSNorm (rmsnorm_f32_ref) of the nb rows of n floats of x (x_stride
 * floats apart) into y (y_stride apart), all with the weights w; the rows
 * are split over the threads when nb > 1. */
void rvl_ops_norm_rows(rvl_pool *pool, float *y, size_t y_stride, const float *x, size_t x_stride,
                       const float *w, uint32_t n, uint32_t nb, float eps);

/* The gated activation `act` over nb contiguous rows of n floats: g <-
 * silu(g) * u (SwiGLU, swiglu_f32_ref) or gelu_tanh(g) * u (GeGLU,
 * geglu_tanh_f32_ref), in contiguous slices per thread when nb > 1. */
void rvl_ops_glu_rows(rvl_pool *pool, rvl_act act, float *g, const float *u, uint32_t n,
                      uint32_t nb);

#endif
