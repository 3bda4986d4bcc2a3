/*
 * lora_int.h - LoRA internals shared by lib/engine/lora.c (loading, the run-time
 * hook), lib/convert/lora_merge.c and lib/engine/forward.c; not installed.
 */
#ifndef RVL_LORA_INT_H
#define RVL_LORA_INT_H

#include "format/format_int.h"

/* The weights the forward pass can hook, per layer. */
typedef enum {
    RVL_LORA_Q, RVL_LORA_K, RVL_LORA_V, RVL_LORA_O,
    RVL_LORA_GATE, RVL_LORA_UP, RVL_LORA_DOWN,
    RVL_LORA_N_KINDS
} rvl_lora_kind;

/* Largest rank applied at run time (the per-token A x lives on the stack). */
#define RVL_LORA_MAX_RANK 1024

/* One low-rank update of one base tensor: delta = bt^T a, that is
 * delta[o][i] = sum_k bt[k][o] * a[k][i], the adapter's scale folded in. */
typedef struct {
    char name[64];          /* the base tensor's GGUF name */
    uint32_t r;
    uint64_t n_in, n_out;   /* the base tensor's ne[0], ne[1] */
    float *a;               /* (r, n_in) */
    float *bt;              /* (r, n_out): B transposed, times the scale */
    int layer, kind;        /* run-time slot; -1 when the forward pass has none */
} rvl_lora_pair;

typedef struct {
    rvl_lora_info info;
    char *path;             /* owned */
    rvl_lora_pair *pairs;   /* owned: n_pairs */
    size_t n_pairs;
} rvl_lora_adapter;

struct rvl_lora {
    const rvl_model *m;     /* NULL for a merge */
    const rvl_file *base;   /* borrowed */
    char arch[32];
    uint32_t n_layer, n_head, n_head_kv;
    rvl_lora_adapter *ad;   /* owned: n */
    size_t n;
    /* run time: the pairs of each (layer, kind), n_layer * RVL_LORA_N_KINDS lists */
    const rvl_lora_pair ***slot;
    uint32_t *slot_n;
};

/* A set of adapters checked against a GGUF base file (borrowed). */
int rvl_lora_open_file(rvl_lora **out, const rvl_file *base);

/* y[t] += sum over the set's pairs of (layer, kind): bt^T (a x[t]) for the
 * nb rows of x (x_stride floats apart) and y (y_stride). Tokens are split
 * over the pool when nb > 1. */
void rvl_lora_apply(const rvl_lora *l, rvl_pool *pool, uint32_t layer, rvl_lora_kind kind,
                    const float *x, size_t x_stride, uint32_t nb, float *y, size_t y_stride);
/* Does the set change this (layer, kind)? */
static inline bool rvl_lora_has(const rvl_lora *l, uint32_t layer, rvl_lora_kind kind)
{
    return l && l->slot_n && layer < l->n_layer && l->slot_n[layer * RVL_LORA_N_KINDS + kind] > 0;
}
/* The set's model (rvl_ctx_set_lora checks it). */
static inline const rvl_model *rvl_lora_model(const rvl_lora *l) { return l->m; }

#endif
