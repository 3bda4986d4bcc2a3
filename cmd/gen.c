/*
 * gen.c - one reply's generation loop (see gen.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gen.h"

double gen_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

const char *gen_finish_name(gen_finish f)
{
    switch (f) {
    case GEN_STOP: return "stop";
    case GEN_LENGTH: return "length";
    case GEN_CONTEXT: return "context";
    case GEN_INTERRUPTED: return "interrupted";
    }
    return "?";
}

void gen_result_free(gen_result *r)
{
    rvl_buf_free(&r->text);
    free(r->ids);
    r->ids = NULL;
    r->n_ids = 0;
}

static bool is_stop_token(const gen_params *p, int32_t id)
{
    if (rvl_tok_is_eog(p->tok, id))
        return true;
    size_t len = 0;
    const char *txt = rvl_tok_text(p->tok, id, &len);
    for (const char *const *st = p->stop_tokens; txt && st && *st; st++)
        if (strlen(*st) == len && memcmp(*st, txt, len) == 0)
            return true;
    return false;
}

/* Emit n bytes: to the caller and into the result's text. */
static int emit(const gen_params *p, gen_result *r, const char *s, size_t n)
{
    if (!n)
        return 0;
    int rc = rvl_buf_add(&r->text, s, n);
    if (rc < 0)
        return rc;
    return p->emit ? p->emit(p->ud, s, n) : 0;
}

int gen_reply(const gen_params *p, const float *logits, gen_result *r)
{
    *r = (gen_result){0};
    const uint32_t n_ctx = rvl_ctx_n_ctx(p->ctx);
    size_t pcap = rvl_detok_bound(p->tok), cap_ids = 64;
    char *piece = malloc(pcap);
    r->ids = malloc(cap_ids * sizeof *r->ids);
    rvl_buf pend = {0};
    int rc = 0;
    if (!piece || !r->ids) {
        free(piece);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    /* --ignore-eos: the logits with every end-of-generation token at -inf */
    float *masked = NULL;
    int32_t *eog = NULL;
    size_t n_eog = 0;
    const uint32_t n_vocab = rvl_model_hparams(rvl_ctx_model(p->ctx))->n_vocab;
    if (p->ignore_eos) {
        const int32_t nt = rvl_tok_n_vocab(p->tok);
        masked = malloc((size_t)n_vocab * sizeof *masked);
        eog = malloc(((size_t)(nt > 0 ? nt : 0) + 1) * sizeof *eog);
        if (!masked || !eog) {
            free(masked);
            free(eog);
            free(piece);
            free(r->ids);
            r->ids = NULL;
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        }
        for (int32_t i = 0; i < nt && (uint32_t)i < n_vocab; i++)
            if (rvl_tok_is_eog(p->tok, i))
                eog[n_eog++] = i;
    }
    rvl_detok dt;
    rvl_detok_init(&dt, p->tok, p->special);
    double t0 = gen_now_ms();
    r->finish = GEN_LENGTH;

    for (;;) {
        if (rvl_interrupted()) {
            r->finish = GEN_INTERRUPTED;
            break;
        }
        if (r->n_ids >= p->max_tokens) {
            r->finish = GEN_LENGTH;
            break;
        }
        if (masked) {
            memcpy(masked, logits, (size_t)n_vocab * sizeof *masked);
            for (size_t i = 0; i < n_eog; i++)
                masked[eog[i]] = -INFINITY;
        }
        int32_t id = rvl_sampler_sample(p->smp, masked ? masked : logits);
        /* the sampler never picks a NaN while a number is left, so a
         * non-finite choice means broken arithmetic (an absurd LoRA scale,
         * an overflow: NaN everywhere, or +inf): no answer, stop and say so
         * (one check per token, not a scan of the vocabulary) */
        if (!isfinite(logits[id])) {
            rc = rvl_seterr(RVL_ERANGE, "the model's logits are not finite (%s): its arithmetic "
                            "overflowed (an adapter scale or a RoPE setting too large?)",
                            isnan(logits[id]) ? "NaN" : "infinity");
            break;
        }
        if (r->n_ids == 0)
            r->first_ms = gen_now_ms() - t0;
        rvl_sampler_accept(p->smp, id);
        if (r->n_ids == cap_ids) {
            int32_t *ni = realloc(r->ids, 2 * cap_ids * sizeof *ni);
            if (!ni) {
                rc = rvl_seterr(RVL_ENOMEM, "out of memory");
                break;
            }
            r->ids = ni;
            cap_ids *= 2;
        }
        r->ids[r->n_ids++] = id;
        if (is_stop_token(p, id)) {
            r->finish = GEN_STOP;
            break;
        }
        size_t pn = 0;
        if ((rc = rvl_detok_push(&dt, id, piece, pcap, &pn)) < 0)
            break;
        if ((rc = rvl_buf_add(&pend, piece, pn)) < 0)
            break;
        long at = rvl_stop_find(p->stop_strs, pend.p, pend.n);
        if (at >= 0) {
            rc = emit(p, r, pend.p, (size_t)at);
            pend.n = 0;
            r->finish = GEN_STOP;
            break;
        }
        size_t out = pend.n - rvl_stop_holdback(p->stop_strs, pend.p, pend.n);
        if ((rc = emit(p, r, pend.p, out)) < 0)
            break;
        memmove(pend.p, pend.p + out, pend.n - out);
        pend.n -= out;
        if (rvl_ctx_pos(p->ctx) >= n_ctx) {
            const uint32_t pos = rvl_ctx_pos(p->ctx);
            const uint32_t keep = p->shift_keep < pos ? p->shift_keep : pos;
            const uint32_t drop = (pos - keep) / 2;
            if (!p->context_shift || drop == 0) {
                r->finish = GEN_CONTEXT;
                break;
            }
            if ((rc = rvl_ctx_shift(p->ctx, keep, drop)) < 0)
                break;
            r->n_shifted += drop;
        }
        rc = rvl_decode(p->ctx, &id, 1, &logits);
        if (rc == RVL_EINTR) {
            rc = 0;
            r->finish = GEN_INTERRUPTED;
            break;
        }
        if (rc < 0)
            break;
        r->n_decoded++;
    }
    /* what is still held back: a partial stop string, a partial character */
    if (rc == 0 && (r->finish != GEN_STOP || pend.n)) {
        size_t pn = 0;
        if (rvl_detok_flush(&dt, piece, pcap, &pn) == 0)
            rc = rvl_buf_add(&pend, piece, pn);
        if (rc == 0)
            rc = emit(p, r, pend.p, pend.n);
    }
    r->gen_ms = gen_now_ms() - t0;
    if (!r->text.p && rvl_buf_add(&r->text, "", 0) < 0 && rc == 0)   /* text is a string */
        rc = RVL_ENOMEM;
    free(piece);
    free(masked);
    free(eog);
    rvl_buf_free(&pend);
    return rc;
}
