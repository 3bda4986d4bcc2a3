/*
 * backend.h - the backend inside libruvllm: the CPU forward pass
 * (lib/engine/forward.c), an ordinary entry of the registry
 * (lib/engine/backend.c) behind ruvllm.h's rvl_backend_ops like any other,
 * and what only the context (lib/engine/ctx.c) reaches in it for session
 * files. Not installed.
 */
#ifndef RVL_BACKEND_H
#define RVL_BACKEND_H

#include "ruvllm.h"

struct rvl_kvcache;

/* The "cpu" backend. */
extern const rvl_backend_ops rvl_forward_ops;
/* The block recipe features its forward pass implements (rvl_family_missing):
 * the loader refuses a model asking for another. */
extern const rvl_block rvl_forward_block;

/* For session files (rvl_ctx_kvc, rvl_ctx_set_pos): a CPU session's paged
 * KV cache (lib/engine/kvcache.h; borrowed, valid while b is open), and
 * its position after the cache was loaded from outside (pos <= n_ctx). */
struct rvl_kvcache *rvl_forward_kvcache(rvl_backend *b);
void rvl_forward_set_pos(rvl_backend *b, uint32_t pos);

/* Many sequences (lib/engine/batch.c) on a CPU session: n_seq caches like
 * the session's own (its formats and context) on one shared store of
 * budget_pages pages (kvcache.h "The store"; 0: n_seq contexts' worth),
 * decoded together; the caller checks the items (rvl_batch_decode's
 * contract). */
int rvl_forward_seqs_open(rvl_backend *b, uint32_t n_seq, uint32_t budget_pages);
int rvl_forward_seqs_decode(rvl_backend *b, uint32_t n_items, const uint32_t *seq,
                            const int32_t *const *tokens, const uint32_t *n, const float **logits);
void rvl_forward_seq_reset(rvl_backend *b, uint32_t seq);
uint32_t rvl_forward_seq_pos(const rvl_backend *b, uint32_t seq);
void rvl_forward_seq_kv_usage(const rvl_backend *b, uint32_t seq, rvl_kv_usage *u);
int rvl_forward_seq_truncate(rvl_backend *b, uint32_t seq, uint32_t pos);
void rvl_forward_seqs_kv(const rvl_backend *b, rvl_batch_kv *u);
uint32_t rvl_forward_seq_kv_need(rvl_backend *b, uint32_t seq, const int32_t *ids, uint32_t n_ids,
                                 uint32_t n);
uint32_t rvl_forward_seq_share(rvl_backend *b, uint32_t seq, const int32_t *ids, uint32_t n);

#endif
