/*
 * experts.h - the expert store of a mixture-of-experts model (experts.c);
 * private to lib/engine (model.c creates it, forward.c takes experts
 * from it).
 *
 * Resident: every expert is its view into the mapped file (model.c
 * get_experts), as for a dense weight. Streaming (a budget below the
 * experts' size): a cache of slots, each one expert's three matrices as
 * the file lays them out, read with pread() on a miss; the forward pass
 * pins an expert while its GEMMs read it, and after each router a
 * prefetch thread reads the next layer's likely experts. The bytes are
 * the file's either way: the logits are the same bit for bit.
 */
#ifndef RVL_EXPERTS_H
#define RVL_EXPERTS_H

#include "engine/model.h"

typedef struct rvl_experts rvl_experts;

/* The store of model m, whose expert views (m->layers[l].exps) are
 * loaded, within `budget` bytes: >= the experts' size keeps them
 * resident; below the minimum (2 * n_expert_used slots) RVL_EINVAL
 * naming the minimum in MiB; 0: $RUVLLM_EXPERT_BUDGET (MiB) or the
 * default from available memory (experts.c "Default budget"). Call it
 * before the weights are packed or prefaulted: streamed experts must be
 * neither (rvl_experts_ranges). *out NULL for a dense model. owned:
 * rvl_experts_close. */
int rvl_experts_open(rvl_experts **out, const rvl_model *m, uint64_t budget);
void rvl_experts_close(rvl_experts *x);
/* Whether the experts are streamed (then never pack or prefault them). */
bool rvl_experts_streamed(const rvl_experts *x);

/* Expert e of layer l: its gate, up and down weights (three in a row),
 * pinned until rvl_experts_release(x, w) with the pointer returned. Safe
 * from several threads (contexts sharing the model). When every slot is
 * pinned it waits for one if the calling thread holds no pin; if it
 * holds one (a caller taking several experts at once) it gives the
 * mapping's views instead, never waiting on itself (counted in
 * overflows; their pages are dropped at release). A failed read gives
 * the mapping's views too (read_errors). The bytes are the same. */
const rvl_weight *rvl_experts_acquire(rvl_experts *x, uint32_t l, uint32_t e);
void rvl_experts_release(rvl_experts *x, const rvl_weight *w);

/* Layer l's router chose sel (nb tokens, n_expert_used each) for the nb
 * rows of x (stride floats apart, the layer's FFN input): counts the
 * tokens, keeps the chosen experts from eviction by the prefetch, and
 * asks the prefetch thread for layer l+1's likely experts. */
void rvl_experts_routed(rvl_experts *x, uint32_t l, const int32_t *sel, uint32_t nb,
                        const float *xin, size_t stride);

/* Statistics (ruvllm.h rvl_expert_stats); x NULL: a dense model. */
void rvl_experts_stats(const rvl_experts *x, rvl_expert_stats *st);

/* File ranges [start, end) of the streamed experts' bytes in the mapping,
 * at most cap (3 per layer): to leave out of a prefault; 0 when resident. */
size_t rvl_experts_ranges(const rvl_experts *x, const void *(*out)[2], size_t cap);
/* Drop the streamed experts' pages from the mapping again after a pass
 * over every weight (the fingerprint); nothing when resident. */
void rvl_experts_drop_pages(const rvl_experts *x);

#endif
