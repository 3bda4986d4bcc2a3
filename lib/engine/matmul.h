/*
 * matmul.h - weight matrices times activation rows on a thread pool: the
 * matmuls of the forward pass (lib/engine/forward.c) and what `ruvllm
 * bench kernels` measures as GEMV/GEMM (lib/tools/bench.c).
 *
 *     y[t * y_stride + r] = dot(W row r, x row t)   r < w->ne1, t < nb
 *
 * The activation rows are first brought into the weight's vec_dot_type
 * (quantized, or used as they are when that is F32); the pool's threads
 * then take chunks of contiguous rows, each row multiplied with all nb
 * activation rows while it is in L1, through the format's tiled kernel
 * when it has one (one token included), its 16-row packed layout where
 * the weight has one (formats.h gemm16), otherwise vec_dot per
 * (row, token). Each result is computed the same way whichever thread
 * takes its row and however rows are grouped: the output depends neither
 * on the thread count nor on the batch it came in.
 */
#ifndef RVL_MATMUL_H
#define RVL_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

/* What the matmuls run with, all borrowed from the owner (rvl_ctx,
 * bench): the pool and the activations' scratch buffer. */
typedef struct {
    rvl_pool *pool;
    unsigned char *act;           /* activation rows in a vec_dot_type: as many rows
                                     as the largest nb, act_stride bytes apart */
    size_t act_stride;            /* >= the largest activation row, in bytes (a Q8_0
                                     row with its sums: rvl_act_sums_row_bytes) */
} rvl_matmul;

/* Up to this many weights that read the same activations (Q/K/V,
 * gate/up) run as one pool job. */
#define RVL_MATMUL_PARTS 3

/* y = W x for the nb rows of x (x_stride floats apart). */
void rvl_matmul_run(const rvl_matmul *mm, float *y, size_t y_stride, const rvl_weight *w,
                    const float *x, size_t x_stride, uint32_t nb);

/* ys[i] = ws[i] x for n weights that read the same input: one
 * quantization of it and one pool job per run of up to RVL_MATMUL_PARTS
 * weights whose activation formats agree. */
void rvl_matmul_shared(const rvl_matmul *mm, const float *x, size_t x_stride, uint32_t nb, int n,
                       const rvl_weight *const *ws, float *const *ys, const size_t *y_strides);

/* The two halves of rvl_matmul_run, for a caller that times the second
 * alone. rvl_matmul_prepare_act: the nb rows of x in w's vec_dot_type,
 * into mm->act (a batch quantized on the pool), or x itself when that is
 * F32; *act and *act_stride (bytes) say where. */
void rvl_matmul_prepare_act(const rvl_matmul *mm, const rvl_weight *w, const float *x,
                            size_t x_stride, uint32_t nb, const unsigned char **act,
                            size_t *act_stride);
/* ys[i] = ws[i] act for n <= RVL_MATMUL_PARTS weights of one
 * vec_dot_type, as one pool job. */
void rvl_matmul_act(const rvl_matmul *mm, int n, const rvl_weight *const *ws, float *const *ys,
                    const size_t *y_strides, const unsigned char *act, size_t act_stride,
                    uint32_t nb);

/* Many weights, each with its own activation rows, as one pool job (the
 * experts of a mixture, each over the tokens that chose it): g[i].y =
 * g[i].w g[i].act. The results are the same bits as rvl_matmul_act's for
 * each weight alone. scratch: rvl_matmul_grouped_scratch(n) bytes. */
typedef struct {
    const rvl_weight *w;
    float *y;
    size_t y_stride;
    const unsigned char *act;     /* nb rows in w's vec_dot_type */
    size_t act_stride;
    uint32_t nb;
} rvl_matmul_group;
void rvl_matmul_grouped(const rvl_matmul *mm, int n, const rvl_matmul_group *g, void *scratch);
size_t rvl_matmul_grouped_scratch(int n);

/* Rows per chunk the threads take of a weight of `rows` rows on a pool
 * of n_threads (whole tiles and whole 16-row packed groups). */
uint64_t rvl_matmul_chunk_rows(uint64_t rows, int n_threads);

#endif
