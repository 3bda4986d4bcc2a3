/*
 * batch.c - many sequences at once (ruvllm.h "Many sequences at once").
 *
 * On the CPU backend one context holds the pool and the forward pass's
 * buffers, and n_seq caches beside its own (forward.c
 * rvl_forward_seqs_*) on one shared store of pages (kvcache.h "The
 * store": the budget, full pages with known ids shared between sequences,
 * copy-on-write): a step's items become chunks of at most RVL_UBATCH
 * rows mixing the sequences, each weight row read once per chunk for all
 * of them, attention per sequence over its own page table. On another backend
 * (metal), a context per sequence, the items one after the other: the
 * same results, without the shared reads.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/model.h"

struct rvl_batch {
    const rvl_model *m;
    uint32_t n_seq, n_ctx, n_vocab;
    rvl_ctx *ctx;                 /* the CPU engine's context, or NULL */
    rvl_backend *cpu;             /* its session */
    rvl_ctx **seq;                /* else: (n_seq) a context per sequence */
    uint32_t *old_pos;            /* (n_seq) positions before a step, to undo it */
};

static uint32_t seq_pos(const rvl_batch *b, uint32_t s)
{
    return b->cpu ? rvl_forward_seq_pos(b->cpu, s) : rvl_ctx_pos(b->seq[s]);
}

int rvl_batch_open(rvl_batch **out, const rvl_model *m, const rvl_ctx_params *cp, uint32_t n_seq)
{
    return rvl_batch_open_kv(out, m, cp, n_seq, 0);
}

int rvl_batch_open_kv(rvl_batch **out, const rvl_model *m, const rvl_ctx_params *cp,
                      uint32_t n_seq, uint32_t kv_tokens)
{
    *out = NULL;
    if (!m || !cp || n_seq < 1 || n_seq > 256)
        return rvl_seterr(RVL_EINVAL, "rvl_batch_open: 1 to 256 sequences, not %u", n_seq);
    rvl_batch *b = calloc(1, sizeof *b);
    if (!b || !(b->old_pos = calloc(n_seq, sizeof *b->old_pos))) {
        free(b);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    b->m = m;
    b->n_seq = n_seq;
    b->n_vocab = rvl_model_hparams(m)->n_vocab;
    rvl_ctx_params p = *cp;
    p.all_logits = false;
    p.n_batch = 0;
    int rc = rvl_ctx_open(&b->ctx, m, &p);
    if (rc < 0)
        goto fail;
    b->n_ctx = rvl_ctx_n_ctx(b->ctx);
    b->cpu = rvl_ctx_cpu_session(b->ctx);
    if (b->cpu) {
        const uint32_t pages = kv_tokens / RVL_KV_PAGE + (kv_tokens % RVL_KV_PAGE != 0);
        if ((rc = rvl_forward_seqs_open(b->cpu, n_seq, pages)) < 0)
            goto fail;
        *out = b;
        return 0;
    }
    /* another backend: a context per sequence */
    if (!(b->seq = calloc(n_seq, sizeof *b->seq))) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto fail;
    }
    b->seq[0] = b->ctx;
    b->ctx = NULL;
    for (uint32_t i = 1; i < n_seq; i++)
        if ((rc = rvl_ctx_open(&b->seq[i], m, &p)) < 0)
            goto fail;
    *out = b;
    return 0;
fail:
    rvl_batch_close(b);
    return rc;
}

void rvl_batch_close(rvl_batch *b)
{
    if (!b)
        return;
    rvl_ctx_close(b->ctx);
    for (uint32_t i = 0; b->seq && i < b->n_seq; i++)
        rvl_ctx_close(b->seq[i]);
    free(b->seq);
    free(b->old_pos);
    free(b);
}

uint32_t rvl_batch_n_seq(const rvl_batch *b) { return b->n_seq; }
uint32_t rvl_batch_n_ctx(const rvl_batch *b) { return b->n_ctx; }

int rvl_batch_seq_reset(rvl_batch *b, uint32_t seq)
{
    if (seq >= b->n_seq)
        return rvl_seterr(RVL_EINVAL, "no sequence %u (of %u)", seq, b->n_seq);
    if (b->cpu)
        rvl_forward_seq_reset(b->cpu, seq);
    else
        rvl_ctx_reset(b->seq[seq]);
    return 0;
}

uint32_t rvl_batch_seq_pos(const rvl_batch *b, uint32_t seq)
{
    return seq < b->n_seq ? seq_pos(b, seq) : 0;
}

int rvl_batch_seq_kv_usage(const rvl_batch *b, uint32_t seq, rvl_kv_usage *u)
{
    if (seq >= b->n_seq)
        return rvl_seterr(RVL_EINVAL, "no sequence %u (of %u)", seq, b->n_seq);
    if (b->cpu) {
        rvl_forward_seq_kv_usage(b->cpu, seq, u);
        return 0;
    }
    memset(u, 0, sizeof *u);
    const uint32_t n = rvl_ctx_pos(b->seq[seq]);
    return n ? rvl_ctx_kv_usage(b->seq[seq], n, u) : 0;
}

void rvl_batch_kv_get(const rvl_batch *b, rvl_batch_kv *u)
{
    if (b->cpu) {
        rvl_forward_seqs_kv(b->cpu, u);
        return;
    }
    memset(u, 0, sizeof *u);
    for (uint32_t s = 0; s < b->n_seq; s++) {
        rvl_kv_usage k;
        if (rvl_batch_seq_kv_usage(b, s, &k) == 0)
            u->bytes += k.bytes;
    }
}

uint32_t rvl_batch_seq_kv_need(rvl_batch *b, uint32_t seq, const int32_t *ids, uint32_t n_ids,
                               uint32_t n)
{
    return b->cpu && seq < b->n_seq ? rvl_forward_seq_kv_need(b->cpu, seq, ids, n_ids, n) : 0;
}

uint32_t rvl_batch_seq_share(rvl_batch *b, uint32_t seq, const int32_t *ids, uint32_t n)
{
    if (!b->cpu || seq >= b->n_seq || !ids)
        return 0;
    return rvl_forward_seq_share(b->cpu, seq, ids, n < b->n_ctx ? n : b->n_ctx);
}

/* After a failed step: every item's sequence back where it was. */
static void undo(rvl_batch *b, uint32_t n_items, const uint32_t *seq)
{
    for (uint32_t i = 0; i < n_items; i++) {
        const uint32_t s = seq[i];
        const int rc = b->cpu ? rvl_forward_seq_truncate(b->cpu, s, b->old_pos[i])
                              : rvl_ctx_truncate(b->seq[s], b->old_pos[i]);
        if (rc < 0)
            rvl_batch_seq_reset(b, s);
    }
}

int rvl_batch_decode(rvl_batch *b, uint32_t n_items, const uint32_t *seq,
                     const int32_t *const *tokens, const uint32_t *n, const float **logits)
{
    /* every item checked before any sequence moves */
    if (n_items < 1 || n_items > b->n_seq)
        return rvl_seterr(RVL_EINVAL, "a step of %u items (1 .. %u)", n_items, b->n_seq);
    for (uint32_t i = 0; i < n_items; i++) {
        if (seq[i] >= b->n_seq || n[i] < 1 || !tokens[i])
            return rvl_seterr(RVL_EINVAL, "batch item %u: no sequence %u or no tokens", i, seq[i]);
        for (uint32_t j = 0; j < i; j++)
            if (seq[j] == seq[i])
                return rvl_seterr(RVL_EINVAL, "sequence %u twice in one step", seq[i]);
        const uint32_t pos = seq_pos(b, seq[i]);
        if (n[i] > b->n_ctx - pos)
            return rvl_seterr(RVL_ERANGE, "sequence %u: %u tokens at position %u overflow its "
                              "context of %u", seq[i], n[i], pos, b->n_ctx);
        for (uint32_t t = 0; t < n[i]; t++)
            if (tokens[i][t] < 0 || (uint32_t)tokens[i][t] >= b->n_vocab)
                return rvl_seterr(RVL_EINVAL, "sequence %u: token id %d is outside the "
                                  "vocabulary (%u)", seq[i], tokens[i][t], b->n_vocab);
        b->old_pos[i] = pos;
    }
    int rc = 0;
    if (b->cpu) {
        rc = rvl_forward_seqs_decode(b->cpu, n_items, seq, tokens, n, logits);
    } else {
        for (uint32_t i = 0; i < n_items && rc == 0; i++)
            rc = rvl_decode(b->seq[seq[i]], tokens[i], n[i], &logits[i]);
    }
    if (rc < 0)
        undo(b, n_items, seq);
    return rc;
}
