/*
 * ops.c - RMSNorm and the gated activations (SwiGLU, GeGLU) over a batch of rows on the pool (ops.h);
 * the arithmetic is kernels/rowops.h's.
 */
#include "engine/ops.h"
#include "rowops.h"

/* Rows split over the threads: row t by thread t % nth. */
typedef struct {
    float *y;
    size_t y_stride;
    const float *x;
    size_t x_stride;
    const float *w;
    uint32_t n, nb;
    float eps;
    const rvl_rowops_kernels *k;
} norm_job;

static void norm_part(void *arg, int ith, int nth)
{
    const norm_job *j = arg;
    for (uint32_t t = (uint32_t)ith; t < j->nb; t += (uint32_t)nth)
        j->k->rmsnorm(j->y + t * j->y_stride, j->x + t * j->x_stride, j->w, j->n, j->eps);
}

void rvl_ops_norm_rows(rvl_pool *pool, float *y, size_t y_stride, const float *x, size_t x_stride,
                       const float *w, uint32_t n, uint32_t nb, float eps)
{
    norm_job j = {y, y_stride, x, x_stride, w, n, nb, eps, rvl_rowops_get()};
    if (nb > 1)
        rvl_pool_run(pool, norm_part, &j);
    else
        norm_part(&j, 0, 1);
}

/* The elements split into one contiguous slice per thread. */
typedef struct {
    float *g;
    const float *u;
    size_t n;
    rvl_act act;
} swiglu_job;

static void swiglu_part(void *arg, int ith, int nth)
{
    const swiglu_job *j = arg;
    const size_t per = (j->n + (size_t)nth - 1) / (size_t)nth;
    const size_t i0 = (size_t)ith * per, i1 = i0 + per < j->n ? i0 + per : j->n;
    if (i0 >= i1)
        return;
    if (j->act == RVL_ACT_GELU_TANH)
        geglu_tanh_f32_ref(j->g + i0, j->u + i0, (int64_t)(i1 - i0));
    else if (j->act == RVL_ACT_SWIGLU_OAI)
        swiglu_oai_f32_ref(j->g + i0, j->u + i0, (int64_t)(i1 - i0));
    else
        rvl_rowops_get()->swiglu(j->g + i0, j->u + i0, (int64_t)(i1 - i0));
}

void rvl_ops_glu_rows(rvl_pool *pool, rvl_act act, float *g, const float *u, uint32_t n,
                      uint32_t nb)
{
    swiglu_job j = {g, u, (size_t)nb * n, act};
    if (nb > 1)
        rvl_pool_run(pool, swiglu_part, &j);
    else
        swiglu_part(&j, 0, 1);
}
