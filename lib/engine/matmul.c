/*
 * matmul.c - weight matrices times activation rows on the pool (matmul.h):
 * y[t][r] = dot(W row r, act[t]) for every row r and the nb tokens t of a
 * chunk; threads split the rows, and each row is multiplied with all nb
 * activation rows while it is in L1.
 */
#include <stdatomic.h>

#include "engine/matmul.h"

/* One weight of a job and the activation rows it multiplies: its rows
 * are chunks first..first + its count - 1 of the job's shared counter. */
typedef struct {
    const rvl_weight *w;
    float *y;
    size_t y_stride;              /* floats between output rows */
    uint64_t chunk;               /* rows per chunk (whole tiles) */
    uint64_t first;               /* index of this part's first chunk */
    const unsigned char *act;     /* nb rows in the weight's vec_dot_type */
    size_t act_stride;            /* bytes between activation rows */
    uint32_t nb;
} matmul_part;

typedef struct {
    matmul_part few[RVL_MATMUL_PARTS];
    const matmul_part *part;      /* few, or the caller's (rvl_matmul_grouped) */
    int n_parts;
    uint64_t n_chunks;
    atomic_uint_fast64_t next;    /* next chunk to take */
} matmul_job;

/* The part chunk ci belongs to: the last whose first chunk is <= ci. */
static const matmul_part *part_of(const matmul_job *j, uint64_t ci)
{
    int lo = 0, hi = j->n_parts - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (j->part[mid].first <= ci)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &j->part[lo];
}

/* Threads take chunks of contiguous rows from a shared counter, so a
 * thread that was preempted (a busy machine) does not hold everyone up.
 * Each row's result is computed the same way whoever takes it: the
 * output does not depend on the thread count. */
static void matmul_rows(void *arg, int ith, int nth)
{
    matmul_job *j = arg;
    (void)ith;
    (void)nth;
    for (;;) {
        uint64_t ci = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (ci >= j->n_chunks)
            break;
        const matmul_part *pt = part_of(j, ci);
        const rvl_weight *w = pt->w;
        const unsigned char *act = pt->act;
        const size_t act_stride = pt->act_stride;
        const uint32_t nb = pt->nb;
        const int64_t n = (int64_t)w->ne0;
        const uint64_t rows = w->ne1;
        const char *base = w->data;
        uint64_t r0 = (ci - pt->first) * pt->chunk;
        uint64_t r1 = r0 + pt->chunk < rows ? r0 + pt->chunk : rows;
        /* the tiled kernel for every batch, one token included (its
         * one-token path shares activation loads across 4 rows and
         * prefetches ahead) */
        const rvl_gemm_fn gemm = w->kf->gemm;
        if (w->packed && r0 < w->packed_rows) {
            /* the 16-row layout (formats.h gemm16): one kernel for any nb;
             * chunks are whole groups */
            const uint64_t pr1 = r1 < w->packed_rows ? r1 : w->packed_rows;
            w->kf->gemm16(n, (const char *)w->packed + r0 * w->row_bytes,
                          (int64_t)((pr1 - r0) / RVL_PACK16_ROWS), act, act_stride, (int)nb,
                          pt->y + r0, pt->y_stride);
            r0 = pr1;
        }
        if (gemm) {
            /* tiles of RVL_GEMM_ROWS rows x all nb tokens; each result is
             * the same whatever the grouping (formats.h) */
            for (uint64_t r = r0; r < r1; r += RVL_GEMM_ROWS) {
                const int nr = (int)(r1 - r < RVL_GEMM_ROWS ? r1 - r : RVL_GEMM_ROWS);
                gemm(n, base + r * w->row_bytes, w->row_bytes, nr, act, act_stride, (int)nb,
                     pt->y + r, pt->y_stride);
            }
            continue;
        }
        const rvl_vec_dot_fn dot = w->kf->vec_dot;
        for (uint64_t r = r0; r < r1; r++) {
            const char *row = base + r * w->row_bytes;
            for (uint32_t t = 0; t < nb; t++)
                pt->y[t * pt->y_stride + r] = dot(n, row, act + t * act_stride);
        }
    }
}

typedef struct {
    const rvl_kformat *af;
    const float *x;
    size_t x_stride;
    unsigned char *out;
    size_t out_stride;
    int64_t n;
    uint32_t nb;
} quant_job;

static void quant_rows(void *arg, int ith, int nth)
{
    const quant_job *j = arg;
    for (uint32_t t = (uint32_t)ith; t < j->nb; t += (uint32_t)nth) {
        /* Q8_0: with the block sums and scales the 16-row kernels read
         * (formats.h gemm16; act_stride has room for them) */
        if (j->af->quantize_act) {
            j->af->quantize_act(j->x + t * j->x_stride, j->out + t * j->out_stride, j->n, NULL);
            continue;
        }
        j->af->quantize(j->x + t * j->x_stride, j->out + t * j->out_stride, j->n, NULL);
        if (j->af->type == RVL_K_Q8_0)
            rvl_act_sums(j->out + t * j->out_stride, j->n);
    }
}

/* A batch is quantized on the pool (row t is the same whoever does it). */
void rvl_matmul_prepare_act(const rvl_matmul *mm, const rvl_weight *w, const float *x,
                            size_t x_stride, uint32_t nb, const unsigned char **act,
                            size_t *act_stride)
{
    const rvl_kformat *af = rvl_kformat_get(w->kf->vec_dot_type);
    if (af->type == RVL_K_F32) {
        *act = (const unsigned char *)x;
        *act_stride = x_stride * sizeof(float);
        return;
    }
    quant_job qj = {af, x, x_stride, mm->act, mm->act_stride, (int64_t)w->ne0, nb};
    if (nb > 1)
        rvl_pool_run(mm->pool, quant_rows, &qj);
    else
        quant_rows(&qj, 0, 1);
    *act = mm->act;
    *act_stride = mm->act_stride;
}

/* About 8 chunks per thread and weight: fine enough to balance, coarse
 * enough that the counter is not contended and rows stream in order. */
uint64_t rvl_matmul_chunk_rows(uint64_t rows, int n_threads)
{
    uint64_t chunk = rows / ((uint64_t)n_threads * 8);
    chunk = chunk < 16 ? 16 : chunk;
    /* whole tiles and whole groups of either packed layout */
    return (chunk + RVL_PACK16_ROWS - 1) / RVL_PACK16_ROWS * RVL_PACK16_ROWS;
}

void rvl_matmul_act(const rvl_matmul *mm, int n, const rvl_weight *const *ws, float *const *ys,
                    const size_t *y_strides, const unsigned char *act, size_t act_stride,
                    uint32_t nb)
{
    matmul_job j = {.n_parts = n};
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t chunk = rvl_matmul_chunk_rows(ws[i]->ne1, rvl_pool_size(mm->pool));
        j.few[i] = (matmul_part){ws[i], ys[i], y_strides[i], chunk, total, act, act_stride, nb};
        total += (ws[i]->ne1 + chunk - 1) / chunk;
    }
    j.part = j.few;
    j.n_chunks = total;
    atomic_init(&j.next, 0);
    rvl_pool_run(mm->pool, matmul_rows, &j);
}

void rvl_matmul_grouped(const rvl_matmul *mm, int n, const rvl_matmul_group *g, void *scratch)
{
    matmul_part *part = scratch;
    matmul_job j = {.part = part, .n_parts = n};
    uint64_t total = 0;
    /* chunks of about 8 per thread over the whole job: many small
     * matrices (experts of a few tokens each) share one pool run */
    uint64_t rows = 0;
    for (int i = 0; i < n; i++)
        rows += g[i].w->ne1;
    const int nth = rvl_pool_size(mm->pool);
    for (int i = 0; i < n; i++) {
        uint64_t chunk = rvl_matmul_chunk_rows(rows, nth);
        if (chunk > g[i].w->ne1)
            chunk = (g[i].w->ne1 + RVL_PACK16_ROWS - 1) / RVL_PACK16_ROWS * RVL_PACK16_ROWS;
        part[i] = (matmul_part){g[i].w, g[i].y, g[i].y_stride, chunk, total, g[i].act,
                                g[i].act_stride, g[i].nb};
        total += (g[i].w->ne1 + chunk - 1) / chunk;
    }
    if (n == 0)
        return;
    j.n_chunks = total;
    atomic_init(&j.next, 0);
    rvl_pool_run(mm->pool, matmul_rows, &j);
}

size_t rvl_matmul_grouped_scratch(int n) { return (size_t)n * sizeof(matmul_part); }

void rvl_matmul_run(const rvl_matmul *mm, float *y, size_t y_stride, const rvl_weight *w,
                    const float *x, size_t x_stride, uint32_t nb)
{
    const unsigned char *act;
    size_t as;
    rvl_matmul_prepare_act(mm, w, x, x_stride, nb, &act, &as);
    rvl_matmul_act(mm, 1, &w, &y, &y_stride, act, as, nb);
}

void rvl_matmul_shared(const rvl_matmul *mm, const float *x, size_t x_stride, uint32_t nb, int n,
                       const rvl_weight *const *ws, float *const *ys, const size_t *y_strides)
{
    for (int i = 0; i < n;) {
        int k = i + 1;
        while (k < n && k - i < RVL_MATMUL_PARTS &&
               ws[k]->kf->vec_dot_type == ws[i]->kf->vec_dot_type)
            k++;
        const unsigned char *act;
        size_t as;
        rvl_matmul_prepare_act(mm, ws[i], x, x_stride, nb, &act, &as);
        rvl_matmul_act(mm, k - i, ws + i, ys + i, y_strides + i, act, as, nb);
        i = k;
    }
}
