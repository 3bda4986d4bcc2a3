/*
 * sched.c - the scheduler (ruvllm.h "The scheduler"): continuous batching
 * of requests over an rvl_batch.
 *
 * Requests wait in a FIFO queue (at most n_queue) and are admitted into a
 * free sequence of the batch (n_parallel of them) at the start of a step.
 * A step is ONE rvl_batch_decode: the next token of every request that is
 * generating, then prompt chunks of those still reading their prompt, in
 * the order they were admitted, filling what is left of n_step_tokens (a
 * piece that does not end its prompt ends at a multiple of RVL_UBATCH
 * positions, as rvl_decode cuts a prompt; at least to the next one, so a
 * prompt always advances). A long prompt is thus fed over several steps
 * while the others keep decoding.
 *
 * Each request samples with its own sampler (its parameters and seed; the
 * prompt accepted first, as cmd/gen.c does), so its tokens are those it
 * gets alone: the batch gives each sequence the logits it gets alone. The
 * reply is produced as cmd/gen.c's gen_reply produces it, step for step:
 * an end-of-generation token or a stop token ends it unseen; text goes
 * through the streaming detokenizer (complete UTF-8) and is held back while
 * a stop string may begin in it (rvl_stop_*); max_tokens and a full context
 * end it "length". A finished request's sequence is reset at once and
 * given to the next in the queue.
 *
 * Room: the batch's sequences keep their pages in one KV store of a
 * budget (rvl_sched_params.kv_tokens). The request at the queue's head is
 * admitted only when the store has the pages it may take (its prompt and
 * max_tokens, less the prompt's pages other sequences hold, which it maps
 * instead of computing: rvl_batch_seq_share) besides those the running
 * ones may still take (rvl_batch_seq_kv_need: upper bounds), so a step is
 * never refused for want of pages; it waits otherwise (the queue is FIFO),
 * and one that could not fit even alone ends "error" at once.
 *
 * Threads: submit, cancel, stop and stats take the mutex; the thread in
 * rvl_sched_run owns the batch, the samplers and the replies' state, and
 * takes the mutex once per step (cancellations, admission, idle wait) and
 * once per finished request. Callbacks run on that thread without the
 * mutex held, so they may submit or cancel.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ruvllm.h"

#define TPS_WINDOW 10   /* seconds of gen_tps */

typedef struct req req;
struct req {
    req *next;                     /* in the queue */
    int64_t id;
    bool cancel;                   /* asked (under the mutex) */
    /* the request, copied at submit */
    int32_t *prompt;               /* (n_prompt) */
    uint32_t n_prompt;
    int32_t max_tokens;            /* < 0: no limit */
    rvl_sampler_params sp;
    char **stops, **stop_tokens;   /* NULL-terminated, or NULL */
    bool ignore_eos, special;
    int (*on_text)(void *ud, const char *text, size_t n);
    void (*on_done)(void *ud, const rvl_sched_result *r);
    void *ud;
    double t_submit, t_admit, t_first;   /* ms, monotonic; t_first 0 before the first token */
    /* running: only the thread in rvl_sched_run touches these */
    uint32_t seq;
    uint32_t n_final;              /* the most positions it may reach */
    uint32_t n_fed;                /* prompt tokens in the cache */
    uint32_t n_gen;                /* tokens sampled */
    int32_t last;                  /* the sampled token the next step feeds */
    rvl_sampler *smp;
    rvl_detok dt;
    rvl_buf pend;                  /* text held back (a stop string may begin in it) */
};

struct rvl_sched {
    const rvl_model *m;
    const rvl_tokenizer *tok;
    rvl_batch *b;
    uint32_t n_parallel, n_queue, n_step, n_ctx, n_vocab;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    req *q_head, *q_tail;
    uint32_t n_queued;
    req **run;                     /* (n_parallel) running requests, in admission order */
    uint32_t n_running;
    int64_t next_id;
    bool stop;
    rvl_sched_stats st;            /* counters; running, queued, gen_tps, kv filled on get */
    char why[200];                 /* why the requests on admit's *failed list failed */
    int why_rc;                    /* and its RVL_E*: RVL_EINVAL (will never fit), RVL_ENOMEM */
    uint64_t tps_count[TPS_WINDOW];
    int64_t tps_sec[TPS_WINDOW];   /* the second each count is of */
    double t_open;

    /* the run thread's step buffers (n_parallel items) */
    bool *seq_used;                /* (n_parallel) */
    uint32_t *it_seq, *it_n;
    const int32_t **it_tok;
    const float **it_logits;
    req **it_req;
    float *masked;                 /* (n_vocab) logits with the end tokens at -inf */
    int32_t *eog;                  /* the vocabulary's end-of-generation tokens */
    size_t n_eog;
    char *piece;                   /* (pcap) one detokenizer push */
    size_t pcap;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ====================================================================
 * Requests: copies made at submit, freed after on_done
 * ==================================================================== */

static void free_strs(char **v)
{
    for (char **p = v; p && *p; p++)
        free(*p);
    free(v);
}

/* A NULL-terminated copy of v (NULL: none). 0 or RVL_ENOMEM. */
static int copy_strs(const char *const *v, char ***out)
{
    *out = NULL;
    if (!v)
        return 0;
    size_t n = 0;
    while (v[n])
        n++;
    char **c = calloc(n + 1, sizeof *c);
    if (!c)
        return RVL_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (!(c[i] = strdup(v[i]))) {
            free_strs(c);
            return RVL_ENOMEM;
        }
    *out = c;
    return 0;
}

static void req_free(req *r)
{
    if (!r)
        return;
    free(r->prompt);
    free_strs(r->stops);
    free_strs(r->stop_tokens);
    rvl_sampler_close(r->smp);
    rvl_buf_free(&r->pend);
    free(r);
}

/* on_done, then the request is gone. The caller has taken it out of the
 * queue or the running list. */
static void req_done(rvl_sched *s, req *r, const char *finish, int error, const char *msg)
{
    const double t = now_ms();
    rvl_sched_result res = {
        .finish_reason = finish, .n_prompt = r->n_prompt, .n_gen = r->n_gen,
        .t_queue_ms = (r->t_admit ? r->t_admit : t) - r->t_submit,
        .t_first_ms = r->t_first ? r->t_first - r->t_submit : 0,
        .t_total_ms = t - r->t_submit, .error = error, .errmsg = msg,
    };
    if (r->on_done)
        r->on_done(r->ud, &res);
    pthread_mutex_lock(&s->mu);
    if (!strcmp(finish, "cancelled"))
        s->st.cancelled++;
    else
        s->st.completed++;
    pthread_mutex_unlock(&s->mu);
    req_free(r);
}

/* ====================================================================
 * Open, close
 * ==================================================================== */

int rvl_sched_open(rvl_sched **out, const rvl_model *m, const rvl_sched_params *p)
{
    *out = NULL;
    if (!m || !p)
        return rvl_seterr(RVL_EINVAL, "rvl_sched_open: no model or parameters");
    const uint32_t np = p->n_parallel ? p->n_parallel : 4;
    if (np > 256)
        return rvl_seterr(RVL_EINVAL, "at most 256 sequences in parallel, not %u", np);
    rvl_sched *s = calloc(1, sizeof *s);
    if (!s)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    s->m = m;
    s->tok = rvl_model_tokenizer(m);
    s->n_parallel = np;
    s->n_queue = p->n_queue ? p->n_queue : 256;
    s->n_step = p->n_step_tokens ? p->n_step_tokens : RVL_UBATCH;
    s->n_vocab = rvl_model_hparams(m)->n_vocab;
    s->next_id = 1;
    s->t_open = now_ms();
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int rc = rvl_batch_open_kv(&s->b, m, &p->ctx, np, p->kv_tokens);
    if (rc < 0) {
        rvl_sched_close(s);
        return rc;
    }
    s->n_ctx = rvl_batch_n_ctx(s->b);
    const int32_t nt = rvl_tok_n_vocab(s->tok);
    s->pcap = rvl_detok_bound(s->tok);
    if (!(s->run = calloc(np, sizeof *s->run)) || !(s->seq_used = calloc(np, sizeof *s->seq_used)) ||
        !(s->it_seq = calloc(np, sizeof *s->it_seq)) || !(s->it_n = calloc(np, sizeof *s->it_n)) ||
        !(s->it_tok = calloc(np, sizeof *s->it_tok)) ||
        !(s->it_logits = calloc(np, sizeof *s->it_logits)) ||
        !(s->it_req = calloc(np, sizeof *s->it_req)) ||
        !(s->masked = malloc((size_t)s->n_vocab * sizeof *s->masked)) ||
        !(s->eog = malloc(((size_t)(nt > 0 ? nt : 0) + 1) * sizeof *s->eog)) ||
        !(s->piece = malloc(s->pcap))) {
        rvl_sched_close(s);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    for (int32_t i = 0; i < nt && (uint32_t)i < s->n_vocab; i++)
        if (rvl_tok_is_eog(s->tok, i))
            s->eog[s->n_eog++] = i;
    *out = s;
    return 0;
}

void rvl_sched_close(rvl_sched *s)
{
    if (!s)
        return;
    /* what is left ends "cancelled" on this thread (nothing runs now) */
    for (uint32_t i = 0; s->run && i < s->n_running; i++)
        req_done(s, s->run[i], "cancelled", 0, NULL);
    s->n_running = 0;
    while (s->q_head) {
        req *r = s->q_head;
        s->q_head = r->next;
        req_done(s, r, "cancelled", 0, NULL);
    }
    rvl_batch_close(s->b);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->run);
    free(s->seq_used);
    free(s->it_seq);
    free(s->it_n);
    free(s->it_tok);
    free(s->it_logits);
    free(s->it_req);
    free(s->masked);
    free(s->eog);
    free(s->piece);
    free(s);
}

/* ====================================================================
 * Submit, cancel, stop, stats: any thread
 * ==================================================================== */

int64_t rvl_sched_submit(rvl_sched *s, const rvl_sched_request *rq)
{
    if (!rq || !rq->prompt || rq->n_prompt == 0) {
        pthread_mutex_lock(&s->mu);
        s->st.rejected++;
        pthread_mutex_unlock(&s->mu);
        return rvl_seterr(RVL_EINVAL, "the prompt is empty");
    }
    if (rq->n_prompt >= s->n_ctx) {
        pthread_mutex_lock(&s->mu);
        s->st.rejected++;
        pthread_mutex_unlock(&s->mu);
        return rvl_seterr(RVL_EINVAL, "the prompt has %u tokens, which leaves no room in a "
                          "context of %u", rq->n_prompt, s->n_ctx);
    }
    for (uint32_t i = 0; i < rq->n_prompt; i++)
        if (rq->prompt[i] < 0 || (uint32_t)rq->prompt[i] >= s->n_vocab) {
            pthread_mutex_lock(&s->mu);
            s->st.rejected++;
            pthread_mutex_unlock(&s->mu);
            return rvl_seterr(RVL_EINVAL, "prompt token %u: id %d is not in the vocabulary of "
                              "%u", i, rq->prompt[i], s->n_vocab);
        }
    req *r = calloc(1, sizeof *r);
    if (!r || !(r->prompt = malloc((size_t)rq->n_prompt * sizeof *r->prompt)) ||
        copy_strs(rq->stops, &r->stops) < 0 || copy_strs(rq->stop_tokens, &r->stop_tokens) < 0) {
        req_free(r);
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    memcpy(r->prompt, rq->prompt, (size_t)rq->n_prompt * sizeof *r->prompt);
    r->n_prompt = rq->n_prompt;
    r->max_tokens = rq->max_tokens;
    r->sp = rq->sampling;
    r->ignore_eos = rq->ignore_eos;
    r->special = rq->special;
    r->on_text = rq->on_text;
    r->on_done = rq->on_done;
    r->ud = rq->ud;
    r->t_submit = now_ms();

    pthread_mutex_lock(&s->mu);
    if (s->n_queued >= s->n_queue) {
        s->st.rejected++;
        pthread_mutex_unlock(&s->mu);
        req_free(r);
        return rvl_seterr(RVL_EBUSY, "the queue is full (%u requests waiting)", s->n_queue);
    }
    r->id = s->next_id++;
    if (s->q_tail)
        s->q_tail->next = r;
    else
        s->q_head = r;
    s->q_tail = r;
    s->n_queued++;
    s->st.submitted++;
    const int64_t id = r->id;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return id;
}

int rvl_sched_cancel(rvl_sched *s, int64_t id)
{
    int rc = rvl_seterr(RVL_ENOTFOUND, "no request %lld queued or running", (long long)id);
    pthread_mutex_lock(&s->mu);
    for (req *r = s->q_head; r; r = r->next)
        if (r->id == id) {
            r->cancel = true;
            rc = 0;
        }
    for (uint32_t i = 0; i < s->n_running; i++)
        if (s->run[i]->id == id) {
            s->run[i]->cancel = true;
            rc = 0;
        }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void rvl_sched_stop(rvl_sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Count n generated tokens in this second's bucket (under mu). */
static void tps_add(rvl_sched *s, double t, uint64_t n)
{
    const int64_t sec = (int64_t)(t / 1e3);
    const int k = (int)(sec % TPS_WINDOW);
    if (s->tps_sec[k] != sec) {
        s->tps_sec[k] = sec;
        s->tps_count[k] = 0;
    }
    s->tps_count[k] += n;
}

void rvl_sched_stats_get(rvl_sched *s, rvl_sched_stats *st)
{
    const double t = now_ms();
    const int64_t sec = (int64_t)(t / 1e3);
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    st->running = s->n_running;
    st->queued = s->n_queued;
    uint64_t n = 0;
    for (int k = 0; k < TPS_WINDOW; k++)
        if (s->tps_sec[k] > sec - TPS_WINDOW && s->tps_sec[k] <= sec)
            n += s->tps_count[k];
    /* the window: the last 10 s, or since open when that is shorter */
    double span = (t - s->t_open) / 1e3;
    span = span > TPS_WINDOW ? TPS_WINDOW : span < 1e-3 ? 1e-3 : span;
    st->gen_tps = (double)n / span;
    pthread_mutex_unlock(&s->mu);
}

/* ====================================================================
 * Replies: one sampled token at a time, as cmd/gen.c's gen_reply
 * ==================================================================== */

static const char *const FIN_STOP = "stop", *const FIN_LENGTH = "length",
                         *const FIN_CANCELLED = "cancelled", *const FIN_ERROR = "error";

/* How one token's turn ended: NULL (go on), or a finish reason with *rc
 * the error of FIN_ERROR. */
typedef struct {
    const char *finish;
    int rc;
} turn;

static int emit(req *r, const char *t, size_t n)
{
    if (!n || !r->on_text)
        return 0;
    return r->on_text(r->ud, t, n) < 0 ? -1 : 0;
}

static bool is_stop_token(const rvl_sched *s, const req *r, int32_t id)
{
    if (rvl_tok_is_eog(s->tok, id))
        return true;
    size_t len = 0;
    const char *txt = rvl_tok_text(s->tok, id, &len);
    for (char **st = r->stop_tokens; txt && st && *st; st++)
        if (strlen(*st) == len && memcmp(*st, txt, len) == 0)
            return true;
    return false;
}

static turn fail(int rc) { return (turn){FIN_ERROR, rc}; }

/* The request's next token from its logits: sampled, checked against the
 * end tokens and stop strings, its text streamed. */
static turn next_token(rvl_sched *s, req *r, const float *logits)
{
    if (r->max_tokens >= 0 && r->n_gen >= (uint32_t)r->max_tokens)
        return (turn){FIN_LENGTH, 0};
    if (r->ignore_eos) {
        memcpy(s->masked, logits, (size_t)s->n_vocab * sizeof *s->masked);
        for (size_t i = 0; i < s->n_eog; i++)
            s->masked[s->eog[i]] = -INFINITY;
    }
    const int32_t id = rvl_sampler_sample(r->smp, r->ignore_eos ? s->masked : logits);
    if (!isfinite(logits[id]))   /* as gen_reply: broken arithmetic, no answer */
        return fail(rvl_seterr(RVL_ERANGE, "the model's logits are not finite (%s): its "
                               "arithmetic overflowed", isnan(logits[id]) ? "NaN" : "infinity"));
    if (r->n_gen == 0)
        r->t_first = now_ms();
    rvl_sampler_accept(r->smp, id);
    r->n_gen++;
    if (is_stop_token(s, r, id))
        return (turn){FIN_STOP, 0};
    size_t pn = 0;
    int rc = rvl_detok_push(&r->dt, id, s->piece, s->pcap, &pn);
    if (rc < 0 || (rc = rvl_buf_add(&r->pend, s->piece, pn)) < 0)
        return fail(rc);
    const char *const *stops = (const char *const *)r->stops;
    const long at = rvl_stop_find(stops, r->pend.p, r->pend.n);
    if (at >= 0) {
        r->pend.n = 0;
        if (emit(r, r->pend.p, (size_t)at) < 0)
            return (turn){FIN_CANCELLED, 0};
        return (turn){FIN_STOP, 0};
    }
    const size_t out = r->pend.n - rvl_stop_holdback(stops, r->pend.p, r->pend.n);
    if (emit(r, r->pend.p, out) < 0)
        return (turn){FIN_CANCELLED, 0};
    memmove(r->pend.p, r->pend.p + out, r->pend.n - out);
    r->pend.n -= out;
    /* the last token it may have: ends now, not after a step that would
     * decode it for nothing */
    if (rvl_batch_seq_pos(s->b, r->seq) >= s->n_ctx ||
        (r->max_tokens >= 0 && r->n_gen >= (uint32_t)r->max_tokens))
        return (turn){FIN_LENGTH, 0};
    r->last = id;
    return (turn){NULL, 0};
}

/* A running request ends: what is held back goes out (as gen_reply: not
 * after a stop string, nor after an end token with nothing held back),
 * its sequence is reset and freed, on_done. */
static void finish(rvl_sched *s, req *r, turn t)
{
    if ((t.finish == FIN_LENGTH || t.finish == FIN_STOP) && (t.finish != FIN_STOP || r->pend.n)) {
        size_t pn = 0;
        int rc = rvl_detok_flush(&r->dt, s->piece, s->pcap, &pn);
        if (rc == 0)
            rc = rvl_buf_add(&r->pend, s->piece, pn);
        if (rc < 0)
            t = fail(rc);
        else if (emit(r, r->pend.p, r->pend.n) < 0)
            t.finish = FIN_CANCELLED;
    }
    rvl_batch_seq_reset(s->b, r->seq);
    pthread_mutex_lock(&s->mu);
    s->seq_used[r->seq] = false;
    for (uint32_t i = 0; i < s->n_running; i++)
        if (s->run[i] == r) {
            memmove(s->run + i, s->run + i + 1, (s->n_running - i - 1) * sizeof *s->run);
            s->n_running--;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    req_done(s, r, t.finish, t.rc, t.rc ? rvl_errmsg() : NULL);
}

/* ====================================================================
 * The steps
 * ==================================================================== */

/* Under mu: cancelled queued requests onto *gone; free sequences given to
 * the requests at the queue's head, each with its sampler (one that cannot
 * have it goes onto *failed). */
static void admit(rvl_sched *s, req **gone, req **failed)
{
    for (req **pp = &s->q_head; *pp;) {
        req *r = *pp;
        if (r->cancel) {
            *pp = r->next;
            if (s->q_tail == r)
                s->q_tail = NULL;
            s->n_queued--;
            r->next = *gone;
            *gone = r;
        } else {
            pp = &r->next;
        }
    }
    if (!s->q_head)
        s->q_tail = NULL;
    else
        for (req *r = s->q_head; r; r = r->next)
            s->q_tail = r;
    while (s->q_head && s->n_running < s->n_parallel) {
        req *r = s->q_head;
        uint32_t q = 0;
        while (s->seq_used[q])
            q++;
        /* room for it and for what the running ones may still take */
        const uint64_t left = r->max_tokens < 0 ? s->n_ctx : (uint64_t)r->max_tokens;
        r->n_final = r->n_prompt + left < s->n_ctx ? (uint32_t)(r->n_prompt + left) : s->n_ctx;
        uint64_t need = rvl_batch_seq_kv_need(s->b, q, r->prompt, r->n_prompt, r->n_final);
        for (uint32_t i = 0; i < s->n_running; i++)
            need += rvl_batch_seq_kv_need(s->b, s->run[i]->seq, NULL, 0, s->run[i]->n_final);
        rvl_batch_kv room;
        rvl_batch_kv_get(s->b, &room);
        if (need > room.pages_free && s->n_running)
            break; /* it waits for the running ones to end */
        s->q_head = r->next;
        if (!s->q_head)
            s->q_tail = NULL;
        s->n_queued--;
        r->next = NULL;
        if (need > room.pages_free) { /* nothing runs: it will never fit */
            snprintf(s->why, sizeof s->why, "the prompt and max_tokens need %llu KV pages of "
                     "%d positions, the budget holds %u", (unsigned long long)need,
                     RVL_KV_PAGE, room.pages);
            s->why_rc = RVL_EINVAL;
            r->next = *failed;
            *failed = r;
            continue;
        }
        if (rvl_sampler_open(&r->smp, &r->sp, s->n_vocab) < 0) {
            snprintf(s->why, sizeof s->why, "out of memory");
            s->why_rc = RVL_ENOMEM;
            r->next = *failed;
            *failed = r;
            continue;
        }
        for (uint32_t i = 0; i < r->n_prompt; i++)
            rvl_sampler_accept(r->smp, r->prompt[i]);
        rvl_detok_init(&r->dt, s->tok, r->special);
        s->seq_used[q] = true;
        r->seq = q;
        r->n_fed = rvl_batch_seq_share(s->b, q, r->prompt, r->n_prompt);
        s->st.prompt_reused += r->n_fed;
        r->t_admit = now_ms();
        s->run[s->n_running++] = r;
    }
}

/* What the running sequences' caches hold, into the stats (s->mu held;
 * the run thread's, which owns the batch). */
static void note_kv(rvl_sched *s)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < s->n_running; i++)
        n += rvl_batch_seq_pos(s->b, s->run[i]->seq);
    memset(&s->st.kv, 0, sizeof s->st.kv);
    s->st.kv.n = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    rvl_batch_kv_get(s->b, &s->st.kv_store);
    s->st.kv.bytes = s->st.kv_store.bytes; /* a page sequences share counted once */
}

int rvl_sched_run(rvl_sched *s, bool wait_idle)
{
    uint64_t n_prompt = 0, n_gen = 0;   /* tokens of the last step, counted at the next lock */
    for (;;) {
        if (rvl_interrupted())
            return rvl_seterr(RVL_EINTR, "interrupted");
        req *gone = NULL, *failed = NULL;
        uint32_t n_run = 0;
        bool stop = false, idle = false;
        pthread_mutex_lock(&s->mu);
        s->st.prompt_tokens += n_prompt;
        s->st.gen_tokens += n_gen;
        if (n_gen)
            tps_add(s, now_ms(), n_gen);
        n_prompt = n_gen = 0;
        note_kv(s); /* after the last step's finishes: current while idle too */
        for (;;) {
            admit(s, &gone, &failed);
            if (s->stop || gone || failed || s->n_running)
                break;
            if (wait_idle && !s->q_head) {
                idle = true;
                break;
            }
            pthread_cond_wait(&s->cv, &s->mu);
        }
        if (s->stop) {
            s->stop = false;
            stop = true;
        }
        /* the running list is only changed on this thread: a copy needs no lock */
        n_run = s->n_running;
        memcpy(s->it_req, s->run, n_run * sizeof *s->run);
        bool cancelled[256];
        for (uint32_t i = 0; i < n_run; i++)
            cancelled[i] = s->it_req[i]->cancel;
        pthread_mutex_unlock(&s->mu);

        while (gone) {
            req *r = gone;
            gone = r->next;
            req_done(s, r, FIN_CANCELLED, 0, NULL);
        }
        while (failed) {
            req *r = failed;
            failed = r->next;
            req_done(s, r, FIN_ERROR, s->why_rc, s->why);
        }
        req *run[256];
        uint32_t n_live = 0;
        for (uint32_t i = 0; i < n_run; i++) {
            if (cancelled[i])
                finish(s, s->it_req[i], (turn){FIN_CANCELLED, 0});
            else
                run[n_live++] = s->it_req[i];
        }
        if (stop || idle)
            return 0;
        if (!n_live)
            continue;

        /* the step: every generating request's next token, then prompt
         * chunks in admission order within what is left of n_step */
        uint32_t ni = 0, n_dec = 0;
        for (uint32_t i = 0; i < n_live; i++) {
            req *r = run[i];
            if (r->n_fed < r->n_prompt)
                continue;
            s->it_req[ni] = r;
            s->it_seq[ni] = r->seq;
            s->it_tok[ni] = &r->last;
            s->it_n[ni++] = 1;
            n_dec++;
        }
        uint32_t left = s->n_step > n_dec ? s->n_step - n_dec : 1;
        for (uint32_t i = 0; i < n_live && left; i++) {
            req *r = run[i];
            if (r->n_fed >= r->n_prompt)
                continue;
            uint32_t c = r->n_prompt - r->n_fed < left ? r->n_prompt - r->n_fed : left;
            if (r->n_fed + c < r->n_prompt) {
                /* a piece short of the prompt's end ends where rvl_decode would cut
                 * the prompt alone (a multiple of RVL_UBATCH positions: the logits
                 * it gets alone, forward.c rvl_forward_seqs_decode), up to
                 * RVL_UBATCH - 1 tokens past n_step rather than none */
                const uint32_t end = (r->n_fed + c) / RVL_UBATCH * RVL_UBATCH;
                c = end > r->n_fed ? end - r->n_fed : RVL_UBATCH - r->n_fed % RVL_UBATCH;
                if (r->n_fed + c > r->n_prompt)
                    c = r->n_prompt - r->n_fed;
            }
            s->it_req[ni] = r;
            s->it_seq[ni] = r->seq;
            s->it_tok[ni] = r->prompt + r->n_fed;
            s->it_n[ni++] = c;
            left -= c < left ? c : left;
        }
        int rc = rvl_batch_decode(s->b, ni, s->it_seq, s->it_tok, s->it_n, s->it_logits);
        if (rc == RVL_EINTR)
            return rc;
        if (rc < 0) {   /* nothing advanced: the step's requests end with the error */
            for (uint32_t i = 0; i < ni; i++)
                finish(s, s->it_req[i], fail(rc));
            continue;
        }
        s->st.steps++;
        for (uint32_t i = 0; i < ni; i++) {
            req *r = s->it_req[i];
            if (r->n_fed < r->n_prompt) {
                r->n_fed += s->it_n[i];
                n_prompt += s->it_n[i];
                if (r->n_fed < r->n_prompt)
                    continue;   /* more of its prompt next step */
            }
            const uint32_t g0 = r->n_gen;
            turn t = next_token(s, r, s->it_logits[i]);
            n_gen += r->n_gen - g0;
            if (t.finish)
                finish(s, r, t);
        }
    }
}
