/*
 * ctx.c - the context (ruvllm.h "Models and inference"): a facade over one
 * session of a backend (ruvllm.h "Backends"; "cpu" is lib/engine/forward.c).
 * Every public call checks its input here, once, and then calls the
 * session through the backend's operation table; what a backend does not
 * have (a NULL optional entry) is refused with RVL_EUNSUPPORTED naming the
 * feature and the backend, or done here (prefix reuse over the token ids
 * the context decoded).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/kvcache.h"
#include "engine/lora_int.h"
#include "engine/model.h"

struct rvl_ctx {
    const rvl_model *m;
    uint32_t n_vocab;
    uint32_t n_ctx;
    bool all_logits;
    uint32_t n_batch;             /* most tokens per call with all_logits (1 without) */
    const rvl_backend_ops *ops;   /* the backend */
    rvl_backend *session;         /* owned: its state (ops->close) */
    int32_t *ids;                 /* (n_ctx) the token ids in the session's cache, for
                                     rvl_ctx_reuse when ops->reuse is NULL; else NULL */
};

static int unsupported(const rvl_ctx *c, const char *what)
{
    return rvl_seterr(RVL_EUNSUPPORTED, "%s not supported by the %s backend (cpu only)", what,
                      c->ops->name);
}

/* ====================================================================
 * Open and close
 * ==================================================================== */

int rvl_ctx_open(rvl_ctx **out, const rvl_model *m, const rvl_ctx_params *p)
{
    const rvl_hparams *hp = rvl_model_hparams(m);
    int rc;

    *out = NULL;
    rvl_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    c->m = m;
    c->n_vocab = hp->n_vocab;
    c->n_ctx = p && p->n_ctx ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (c->n_ctx > (1u << 20)) {
        uint32_t n = c->n_ctx;
        free(c);
        return rvl_seterr(RVL_ERANGE, "context size %u is too large (at most 1048576)", n);
    }
    c->all_logits = p && p->all_logits;
    c->n_batch = c->all_logits ? (p->n_batch && p->n_batch < c->n_ctx ? p->n_batch : c->n_ctx) : 1;
    if ((rc = rvl_backend_get(p && p->backend ? p->backend : "cpu", &c->ops)) < 0) {
        free(c);
        return rc;
    }
    if (!c->ops->reuse && !(c->ids = malloc((size_t)c->n_ctx * sizeof *c->ids))) {
        uint32_t n = c->n_ctx;
        free(c);
        return rvl_seterr(RVL_ENOMEM, "out of memory for a context of %u tokens", n);
    }
    /* the session gets the context's resolved sizes: both agree on them */
    rvl_ctx_params bp = p ? *p : (rvl_ctx_params){0};
    bp.n_ctx = c->n_ctx;
    bp.n_batch = c->n_batch;
    if ((rc = c->ops->open(&c->session, m, &bp)) < 0) {
        free(c->ids);
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void rvl_ctx_close(rvl_ctx *c)
{
    if (!c)
        return;
    c->ops->close(c->session);
    free(c->ids);
    free(c);
}

/* ====================================================================
 * Decoding
 * ==================================================================== */

int rvl_decode(rvl_ctx *c, const int32_t *tokens, uint32_t n, const float **logits)
{
    const uint32_t pos = c->ops->pos(c->session);
    if (n == 0)
        return rvl_seterr(RVL_EINVAL, "no tokens to decode");
    if (n > c->n_ctx - pos)
        return rvl_seterr(RVL_ERANGE, "context full: %u tokens in the cache, %u more do not fit "
                          "in a context of %u", pos, n, c->n_ctx);
    if (c->all_logits && n > c->n_batch)
        return rvl_seterr(RVL_EINVAL, "%u tokens in one call exceed the context's batch of %u",
                          n, c->n_batch);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= c->n_vocab)
            return rvl_seterr(RVL_EINVAL, "token id %d is outside the vocabulary (%u)", tokens[i],
                              c->n_vocab);
    /* ids first: the session's position says how many of them it kept */
    if (c->ids)
        memcpy(c->ids + pos, tokens, (size_t)n * sizeof *tokens);
    return c->ops->decode(c->session, tokens, n, logits);
}

/* ====================================================================
 * The cache: position, truncation, reuse, shift
 * ==================================================================== */

uint32_t rvl_ctx_n_ctx(const rvl_ctx *c) { return c->n_ctx; }
const rvl_model *rvl_ctx_model(const rvl_ctx *c) { return c->m; }
uint32_t rvl_ctx_pos(const rvl_ctx *c) { return c->ops->pos(c->session); }
void rvl_ctx_reset(rvl_ctx *c) { c->ops->reset(c->session); }

int rvl_ctx_truncate(rvl_ctx *c, uint32_t pos)
{
    const uint32_t n = c->ops->pos(c->session);
    if (pos > n)
        return rvl_seterr(RVL_ERANGE, "cannot truncate the cache to %u tokens: it holds %u", pos,
                          n);
    return c->ops->truncate(c->session, pos);
}

uint32_t rvl_ctx_reuse(rvl_ctx *c, const int32_t *ids, uint32_t n)
{
    const uint32_t max = n ? n - 1 : 0; /* one token left to decode for logits */
    if (c->ops->reuse)
        return c->ops->reuse(c->session, ids, max);
    /* the longest common prefix of the cache and ids: no LRU of dropped
     * pages here, only what the cache still holds */
    const uint32_t pos = c->ops->pos(c->session);
    uint32_t k = 0;
    while (k < pos && k < max && c->ids[k] == ids[k])
        k++;
    if (k < pos && c->ops->truncate(c->session, k) < 0)
        return c->ops->pos(c->session);
    return k;
}

int rvl_ctx_shift(rvl_ctx *c, uint32_t keep, uint32_t n_discard)
{
    if (!c->ops->shift)
        return unsupported(c, "context shift is");
    const uint32_t pos = c->ops->pos(c->session);
    if (keep > pos || n_discard > pos - keep)
        return rvl_seterr(RVL_ERANGE, "context shift: cannot keep %u and drop %u of %u tokens",
                          keep, n_discard, pos);
    return c->ops->shift(c->session, keep, n_discard);
}

double rvl_ctx_kv_token_bytes(const rvl_ctx *c, int tier)
{
    if (tier < 0 || tier > 2 || !c->ops->kv_token_bytes)
        return 0;
    return c->ops->kv_token_bytes(c->session, tier);
}

int rvl_ctx_kv_usage(const rvl_ctx *c, uint32_t n, rvl_kv_usage *u)
{
    *u = (rvl_kv_usage){0};
    if (c->ops != &rvl_forward_ops)
        return unsupported(c, "reporting the KV cache's bytes per layer kind is");
    rvl_kvcache_usage(rvl_forward_kvcache(c->session), n, u);
    return 0;
}

int rvl_ctx_fill_random(rvl_ctx *c, uint32_t n, uint64_t seed)
{
    if (!c->ops->fill_random)
        return unsupported(c, "filling the KV cache with random values is");
    const uint32_t pos = c->ops->pos(c->session);
    if (n > c->n_ctx - pos)
        return rvl_seterr(RVL_ERANGE, "%u more positions do not fit in a context of %u holding %u",
                          n, c->n_ctx, pos);
    return c->ops->fill_random(c->session, n, seed);
}

/* ====================================================================
 * Backend, LoRA, trace
 * ==================================================================== */

const char *rvl_ctx_backend(const rvl_ctx *c) { return c->ops->name; }
const char *rvl_ctx_device(const rvl_ctx *c) { return c->ops->device_name(c->session); }

int rvl_ctx_set_lora(rvl_ctx *c, const rvl_lora *l)
{
    if (l && rvl_lora_model(l) != c->m)
        return rvl_seterr(RVL_EINVAL, "the LoRA adapters were loaded for another model");
    if (!c->ops->set_lora)
        return l ? unsupported(c, "LoRA adapters are") : 0;
    return c->ops->set_lora(c->session, l);
}

void rvl_ctx_set_trace(rvl_ctx *c, rvl_trace_fn fn, void *ud)
{
    if (c->ops->set_trace)
        c->ops->set_trace(c->session, fn, ud);
}

/* ====================================================================
 * Session files (lib/engine/session.c): the CPU's paged cache, which the
 * file format describes; another backend's cache is its own.
 * ==================================================================== */

rvl_backend *rvl_ctx_cpu_session(rvl_ctx *c)
{
    return c->ops == &rvl_forward_ops ? c->session : NULL;
}

struct rvl_kvcache *rvl_ctx_kvc(rvl_ctx *c)
{
    return c->ops == &rvl_forward_ops ? rvl_forward_kvcache(c->session) : NULL;
}

void rvl_ctx_set_pos(rvl_ctx *c, uint32_t pos)
{
    if (c->ops == &rvl_forward_ops)
        rvl_forward_set_pos(c->session, pos <= c->n_ctx ? pos : c->n_ctx);
}
