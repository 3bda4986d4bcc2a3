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

#endif
