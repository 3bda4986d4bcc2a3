/*
 * batch.c - many sequences at once (ruvllm.h "Many sequences at once").
 *
 * First form: one context per sequence, each step's items decoded one
 * after the other. It gives each sequence exactly what it gets alone and
 * fixes the interface the scheduler (sched.c) drives; the forward pass
 * over all of a step's tokens as one batch replaces its inside.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"

struct rvl_batch {
    const rvl_model *m;
    uint32_t n_seq, n_ctx;
    rvl_ctx **seq;                /* (n_seq) */
    uint32_t *old_pos;            /* (n_seq) positions before a step, to undo it */
};

int rvl_batch_open(rvl_batch **out, const rvl_model *m, const rvl_ctx_params *cp, uint32_t n_seq)
{
    *out = NULL;
    if (!m || !cp || n_seq < 1 || n_seq > 256)
        return rvl_seterr(RVL_EINVAL, "rvl_batch_open: 1 to 256 sequences, not %u", n_seq);
    rvl_batch *b = calloc(1, sizeof *b);
    if (!b || !(b->seq = calloc(n_seq, sizeof *b->seq)) ||
        !(b->old_pos = calloc(n_seq, sizeof *b->old_pos))) {
        if (b)
            free(b->seq);
        free(b);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    b->m = m;
    b->n_seq = n_seq;
    rvl_ctx_params p = *cp;
    p.all_logits = false;
    p.n_batch = 0;
    for (uint32_t i = 0; i < n_seq; i++) {
        int rc = rvl_ctx_open(&b->seq[i], m, &p);
        if (rc < 0) {
            rvl_batch_close(b);
            return rc;
        }
    }
    b->n_ctx = rvl_ctx_n_ctx(b->seq[0]);
    *out = b;
    return 0;
}

void rvl_batch_close(rvl_batch *b)
{
    if (!b)
        return;
    for (uint32_t i = 0; i < b->n_seq; i++)
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
    rvl_ctx_reset(b->seq[seq]);
    return 0;
}

uint32_t rvl_batch_seq_pos(const rvl_batch *b, uint32_t seq)
{
    return seq < b->n_seq ? rvl_ctx_pos(b->seq[seq]) : 0;
}

int rvl_batch_decode(rvl_batch *b, uint32_t n_items, const uint32_t *seq,
                     const int32_t *const *tokens, const uint32_t *n, const float **logits)
{
    /* every item checked before any sequence moves */
    for (uint32_t i = 0; i < n_items; i++) {
        if (seq[i] >= b->n_seq || n[i] < 1 || !tokens[i])
            return rvl_seterr(RVL_EINVAL, "batch item %u: no sequence %u or no tokens", i, seq[i]);
        for (uint32_t j = 0; j < i; j++)
            if (seq[j] == seq[i])
                return rvl_seterr(RVL_EINVAL, "sequence %u twice in one step", seq[i]);
        const uint32_t pos = rvl_ctx_pos(b->seq[seq[i]]);
        if (n[i] > b->n_ctx - pos)
            return rvl_seterr(RVL_ERANGE, "sequence %u: %u tokens at position %u overflow its "
                              "context of %u", seq[i], n[i], pos, b->n_ctx);
        b->old_pos[i] = pos;
    }
    for (uint32_t i = 0; i < n_items; i++) {
        int rc = rvl_decode(b->seq[seq[i]], tokens[i], n[i], &logits[i]);
        if (rc < 0) { /* undo the step: no sequence has advanced */
            for (uint32_t j = 0; j <= i; j++)
                if (rvl_ctx_truncate(b->seq[seq[j]], b->old_pos[j]) < 0)
                    rvl_ctx_reset(b->seq[seq[j]]);
            return rc;
        }
    }
    return 0;
}
