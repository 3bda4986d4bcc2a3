/*
 * serve.c - ruvllm serve: an OpenAI-compatible HTTP server.
 *
 * libmicrohttpd runs the HTTP side, one thread per connection (bounded by
 * --max-connections): a connection's thread parses and checks its
 * request, renders the chat template, tokenizes, and submits the prompt to
 * the scheduler (rvl_sched), whose one thread runs every sequence's steps
 * together and calls back with the reply's text. A job is what the two
 * threads share: its text so far and its end, under a mutex, with a
 * reference for each side that still holds it. A non-streamed answer waits
 * for the end; a streamed one is a server-sent-event body whose reader
 * blocks until the next text. Both watch the client's socket while they
 * wait, so a client that goes away cancels its request (rvl_sched_cancel)
 * and frees its sequence.
 *
 * Lock order: the scheduler's own locks, then a job's; a connection thread
 * never calls the scheduler while holding a job's mutex.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "cli.h"
#include "gen.h"
#include "serve.h"

static const char *opt_model, *opt_host = "127.0.0.1", *opt_api_key, *opt_alias,
                  *opt_chat_template, *opt_reasoning;
static long long opt_port = 8080, opt_parallel = 4, opt_queue = 64, opt_ctx = 0, opt_threads = 0,
                 opt_max_body = 1 << 20, opt_timeout = 600, opt_max_conn = 256,
                 opt_max_time = 0, opt_batch = 512, opt_kv_budget = 0;
static double opt_expert_budget = 0;
static cli_kv_opts opt_kv;
static cli_sample_opts opt_sample = CLI_SAMPLE_DEFAULTS;

static rvl_opt opts[] = {
    OPT_MODEL(opt_model),
    {OPT_STRING, 0, "host", "ADDR", "address to listen on (0.0.0.0 or :: for every interface)", "127.0.0.1", &opt_host, 0, 0, NULL, COMPL_NONE},
    {OPT_INT, 0, "port", "N", "TCP port to listen on (0: any free port, printed at start)", "8080", &opt_port, 0, 65535, NULL, COMPL_NONE},
    {OPT_STRING, 0, "api-key", "KEY", "require \"Authorization: Bearer KEY\" on every endpoint but /health (default: $RUVLLM_API_KEY; none: no key)", NULL, &opt_api_key, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "alias", "NAME", "the model's name in answers and /v1/models (default: the file name)", NULL, &opt_alias, 0, 0, NULL, COMPL_NONE},
    {OPT_INT, 0, "parallel", "N", "sequences generated at once", "4", &opt_parallel, 1, 256, NULL, COMPL_NONE},
    {OPT_INT, 0, "queue", "N", "requests waiting for a sequence at most; beyond, 429", "64", &opt_queue, 1, 1 << 20, NULL, COMPL_NONE},
    {OPT_INT, 'c', "ctx-size", "N", "context size of each sequence in tokens (0: min(4096, the model's))", "0", &opt_ctx, 0, 1048576, NULL, COMPL_NONE},
    {OPT_INT, 't', "threads", "N", "threads (0: one per CPU)", "0", &opt_threads, 0, 256, NULL, COMPL_NONE},
    {OPT_INT, 0, "max-body", "BYTES", "largest request body; larger ones get 413", "1048576", &opt_max_body, 1024, 1 << 30, NULL, COMPL_NONE},
    {OPT_INT, 0, "timeout", "S", "close a connection idle this long (nothing received or sent)", "600", &opt_timeout, 1, 86400, NULL, COMPL_NONE},
    {OPT_INT, 0, "max-connections", "N", "open connections at most (each has a thread)", "256", &opt_max_conn, 4, 65536, NULL, COMPL_NONE},
    {OPT_INT, 0, "max-request-time", "S", "end a generation this long after its request arrived, with finish_reason \"length\" and the text so far (0: no limit)", "0", &opt_max_time, 0, 86400 * 365, NULL, COMPL_NONE},
    {OPT_INT, 0, "kv-budget", "N", "KV cache positions over all the sequences (0: --parallel times --ctx-size); a request waits until its prompt and max_tokens fit, less the pages it shares with others", "0", &opt_kv_budget, 0, 1LL << 32, NULL, COMPL_NONE},
    {OPT_INT, 'b', "batch-size", "N", "tokens per step at most: the running sequences' next tokens, then chunks of the new prompts (llama-server's -b)", "512", &opt_batch, 1, 1 << 20, NULL, COMPL_NONE},
    OPT_SAMPLE(opt_sample),
    {OPT_STRING, 0, "chat-template", "NAME|FILE", "a built-in template (chatml, llama3, ...) or a Jinja template file instead of the model's", NULL, &opt_chat_template, 0, 0, NULL, COMPL_FILE},
    OPT_REASONING(opt_reasoning),
    OPT_KV(opt_kv),
    OPT_EXPERT_BUDGET(opt_expert_budget),
    OPT_END
};

/* llama-server's spellings (the shared ones: opt.c). */
static const cli_alias aliases[] = {
    {"-cb|--cont-batching|--metrics|--no-webui|--no-ui", ALIAS_ACCEPT, NULL, 0, NULL, NULL},
    {"-nocb|--no-cont-batching", ALIAS_REFUSE, NULL, 0, NULL,
     "serve always batches its sequences continuously: drop it"},
    {"--api-key-file", ALIAS_REFUSE, NULL, 1, NULL,
     "give --api-key \"$(cat FILE)\", or set RUVLLM_API_KEY"},
    {"--ssl-key-file|--ssl-cert-file", ALIAS_REFUSE, NULL, 1, NULL,
     "serve speaks plain HTTP: put a TLS proxy (caddy, nginx) in front of it"},
    ALIAS_END
};

/* ====================================================================
 * The server's state
 * ==================================================================== */

/* /metrics' request counters: endpoint by status. */
static const char *const endpoints[] = {"/v1/chat/completions", "/v1/completions", "/v1/models",
                                        "/health", "/metrics", "other"};
enum { EP_CHAT, EP_COMPL, EP_MODELS, EP_HEALTH, EP_METRICS, EP_OTHER, N_EP };
static const int statuses[] = {200, 400, 401, 404, 405, 413, 429, 431, 500, 503};
enum { N_STATUS = sizeof statuses / sizeof statuses[0] + 1 };   /* + "other" */

typedef struct {
    const rvl_model *model;
    const rvl_tokenizer *tok;
    rvl_chat *chat;
    pthread_mutex_t chat_mu;       /* rendering is not promised to be reentrant */
    uint32_t n_ctx;
    const char *name;              /* the model's id in answers */
    int64_t started;
    rvl_sampler_params sampling;   /* the defaults (--temp ...) */
    const char *api_key;           /* NULL: none */
    size_t max_body;
    double max_time_ms;            /* --max-request-time; 0: none */

    pthread_mutex_t sched_mu;      /* sched is NULL once closed */
    rvl_sched *sched;
    volatile bool stopping;

    pthread_mutex_t stat_mu;
    pthread_cond_t stat_cv;        /* n_jobs went down */
    uint64_t requests[N_EP][N_STATUS];
    uint64_t seq;                  /* request ids */
    uint32_t n_jobs;               /* generation requests not yet finished with their client */
} server;

/* One generation shared by its connection and the scheduler. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                      /* connection, scheduler, streamed response */
    server *srv;
    int64_t id;                    /* the scheduler's */
    int fd;                        /* the client's socket */
    api_meta meta;
    bool stream, include_usage;
    rvl_buf text;                  /* not yet sent (stream), or all of it */
    bool split;                    /* a thinking model's reply: reasoning apart */
    rvl_think think;               /* with split: tells reasoning from answer */
    rvl_buf reasoning;             /* as text, for reasoning_content */
    bool done, abandoned;
    /* time limits: --max-request-time (deadline, ms on now_ms's clock) and
     * the request's t_max_predict_ms (from the first text, ending at a
     * newline); a request past one is cancelled and ends "length" */
    double deadline, t_first;
    int64_t predict_ms;
    bool timed_out;
    char finish[16];
    uint32_t n_prompt, n_gen;
    int error;
    char errmsg[256];
    /* the event stream */
    rvl_buf out;                   /* formatted, not yet handed to MHD */
    size_t out_off;
    bool sent_role, sent_final;
} job;

/* One HTTP request (MHD's per-request context). */
typedef struct {
    double t0;
    int ep, status;
    char method[16], path[128];
    rvl_buf body;
    bool too_big, answered;
    bool counted;                  /* in n_jobs */
    job *job;
} conn_req;

static double now_ms(void) { return gen_now_ms(); }

static void job_unref(job *j)
{
    pthread_mutex_lock(&j->mu);
    const bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last)
        return;
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    rvl_buf_free(&j->text);
    rvl_buf_free(&j->reasoning);
    rvl_buf_free(&j->out);
    free(j);
}

/* Cancel a job its client left: the scheduler frees its sequence at the
 * next step. Called without j->mu held. */
static void job_abandon(job *j)
{
    pthread_mutex_lock(&j->mu);
    const bool was = j->abandoned || j->done;
    j->abandoned = true;
    pthread_mutex_unlock(&j->mu);
    if (was)
        return;
    server *s = j->srv;
    pthread_mutex_lock(&s->sched_mu);
    if (s->sched)
        rvl_sched_cancel(s->sched, j->id);
    pthread_mutex_unlock(&s->sched_mu);
}

/* rvl_think's sink: the answer to text, the reasoning apart, tags dropped */
static int job_part(void *ud, rvl_think_part part, const char *s, size_t n)
{
    job *j = ud;
    if (part == RVL_THINK_TAG)
        return 0;
    return rvl_buf_add(part == RVL_THINK_ANSWER ? &j->text : &j->reasoning, s, n);
}

/* The scheduler's callbacks (its thread). */
static int job_on_text(void *ud, const char *text, size_t n)
{
    job *j = ud;
    const double t = now_ms();
    pthread_mutex_lock(&j->mu);
    int rc = j->abandoned ? -1
             : (j->split ? rvl_think_push(&j->think, text, n, job_part, j)
                         : rvl_buf_add(&j->text, text, n)) < 0 ? -1 : 0;
    if (!j->t_first)
        j->t_first = t;
    /* this text goes out; the tokens after it are not generated */
    if (rc == 0 && ((j->deadline && t >= j->deadline) ||
                    (j->predict_ms && t - j->t_first >= (double)j->predict_ms && memchr(text, '\n', n)))) {
        j->timed_out = true;
        rc = -1;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return rc;
}

static void job_on_done(void *ud, const rvl_sched_result *r)
{
    job *j = ud;
    pthread_mutex_lock(&j->mu);
    snprintf(j->finish, sizeof j->finish, "%s", r->finish_reason ? r->finish_reason : "error");
    if (j->timed_out && !strcmp(j->finish, "cancelled"))   /* a time limit, not the client */
        snprintf(j->finish, sizeof j->finish, "length");
    j->n_prompt = r->n_prompt;
    j->n_gen = r->n_gen;
    j->error = r->error;
    if (j->split)
        rvl_think_flush(&j->think, job_part, j);
    snprintf(j->errmsg, sizeof j->errmsg, "%s", r->errmsg ? r->errmsg : "");
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
}

/* Has the client closed its end (or reset the connection)? */
static bool client_gone(int fd)
{
    if (fd < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Wait on j->cv (j->mu held) for at most ms, and not past the deadline
 * (once past it, the cancellation is on its way: the usual wait). */
static void job_wait(job *j, int ms)
{
    if (j->deadline && !j->timed_out) {
        const double left = j->deadline - now_ms();
        ms = left < 1 ? 1 : left < ms ? (int)left + 1 : ms;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* A job past its deadline that has no text to stop it (queued, or in its
 * prompt) is cancelled here: it ends "length" (job_on_done). Called with
 * j->mu held, which it drops while it calls the scheduler (lock order). */
static void job_check_deadline(job *j)
{
    if (!j->deadline || j->done || j->timed_out || j->abandoned || now_ms() < j->deadline)
        return;
    j->timed_out = true;
    pthread_mutex_unlock(&j->mu);
    server *s = j->srv;
    pthread_mutex_lock(&s->sched_mu);
    if (s->sched)
        rvl_sched_cancel(s->sched, j->id);
    pthread_mutex_unlock(&s->sched_mu);
    pthread_mutex_lock(&j->mu);
}

/* ====================================================================
 * Answers
 * ==================================================================== */
/* Why a job that did not finish "stop" or "length" failed, as an OpenAI
 * error: the server shutting down (503), a request that cannot fit the KV
 * budget (400 context_length_exceeded, as OpenAI says of a prompt too long
 * for the model), or the engine's failure (500). */
static void job_error(const job *j, api_error *e)
{
    if (!strcmp(j->finish, "cancelled"))
        api_error_set(e, 503, "server_error", NULL, NULL, "the server is shutting down");
    else if (j->error == RVL_EINVAL)
        api_error_set(e, 400, "invalid_request_error", "context_length_exceeded", NULL, "%s",
                      j->errmsg[0] ? j->errmsg : "the request does not fit the KV cache");
    else
        api_error_set(e, 500, "server_error", NULL, NULL, "%s",
                      j->errmsg[0] ? j->errmsg : "generation failed");
}


typedef void (*body_fn)(FILE *f, const void *arg);

/* A body written by fn into a string (owned), or NULL when out of memory. */
static char *body_of(body_fn fn, const void *arg, size_t *n)
{
    char *p = NULL;
    FILE *f = open_memstream(&p, n);
    if (!f)
        return NULL;
    fn(f, arg);
    if (fclose(f) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

static enum MHD_Result queue(struct MHD_Connection *c, conn_req *q, int status,
                             const char *type, char *body, size_t n)
{
    struct MHD_Response *r = body ? MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE)
                                  : NULL;
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 429)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    q->status = status;
    q->answered = true;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static void error_body(FILE *f, const void *e) { api_write_error(f, e); }

static enum MHD_Result reply_error(struct MHD_Connection *c, conn_req *q, const api_error *e)
{
    size_t n = 0;
    char *b = body_of(error_body, e, &n);
    return queue(c, q, e->status, "application/json", b, n);
}

static enum MHD_Result reply_err(struct MHD_Connection *c, conn_req *q, int status,
                                 const char *type, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static enum MHD_Result reply_err(struct MHD_Connection *c, conn_req *q, int status,
                                 const char *type, const char *code, const char *fmt, ...)
{
    api_error e;
    api_error_set(&e, status, type, code, NULL, "%s", "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return reply_error(c, q, &e);
}

static enum MHD_Result reply_text(struct MHD_Connection *c, conn_req *q, int status,
                                  const char *type, const char *text, size_t n)
{
    char *b = malloc(n + 1);
    if (b)
        memcpy(b, text, n);
    return queue(c, q, status, type, b, n);
}

/* ====================================================================
 * /metrics, in Prometheus' text format
 * ==================================================================== */

static int status_index(int status)
{
    for (int i = 0; i < N_STATUS - 1; i++)
        if (statuses[i] == status)
            return i;
    return N_STATUS - 1;
}

static void count_request(server *s, int ep, int status)
{
    pthread_mutex_lock(&s->stat_mu);
    s->requests[ep][status_index(status)]++;
    pthread_mutex_unlock(&s->stat_mu);
}

static void metrics_body(FILE *f, const void *arg)
{
    server *s = (server *)arg;
    rvl_sched_stats st = {0};
    pthread_mutex_lock(&s->sched_mu);
    if (s->sched)
        rvl_sched_stats_get(s->sched, &st);
    pthread_mutex_unlock(&s->sched_mu);
    fprintf(f, "# HELP ruvllm_requests_total HTTP requests answered, by endpoint and status.\n"
               "# TYPE ruvllm_requests_total counter\n");
    pthread_mutex_lock(&s->stat_mu);
    for (int e = 0; e < N_EP; e++)
        for (int i = 0; i < N_STATUS; i++)
            if (s->requests[e][i]) {
                char code[8];
                if (i < N_STATUS - 1)
                    snprintf(code, sizeof code, "%d", statuses[i]);
                else
                    snprintf(code, sizeof code, "other");
                fprintf(f, "ruvllm_requests_total{endpoint=\"%s\",status=\"%s\"} %llu\n",
                        endpoints[e], code, (unsigned long long)s->requests[e][i]);
            }
    pthread_mutex_unlock(&s->stat_mu);
    fprintf(f, "# HELP ruvllm_prompt_tokens_total Prompt tokens submitted to the scheduler.\n"
               "# TYPE ruvllm_prompt_tokens_total counter\n"
               "ruvllm_prompt_tokens_total %llu\n"
               "# HELP ruvllm_generated_tokens_total Tokens generated.\n"
               "# TYPE ruvllm_generated_tokens_total counter\n"
               "ruvllm_generated_tokens_total %llu\n"
               "# HELP ruvllm_sched_requests_total Generation requests by how they ended.\n"
               "# TYPE ruvllm_sched_requests_total counter\n"
               "ruvllm_sched_requests_total{state=\"submitted\"} %llu\n"
               "ruvllm_sched_requests_total{state=\"completed\"} %llu\n"
               "ruvllm_sched_requests_total{state=\"cancelled\"} %llu\n"
               "ruvllm_sched_requests_total{state=\"rejected\"} %llu\n"
               "# HELP ruvllm_queue_depth Requests waiting for a sequence.\n"
               "# TYPE ruvllm_queue_depth gauge\n"
               "ruvllm_queue_depth %u\n"
               "# HELP ruvllm_running_sequences Sequences being generated.\n"
               "# TYPE ruvllm_running_sequences gauge\n"
               "ruvllm_running_sequences %u\n"
               "# HELP ruvllm_generated_tokens_per_second Generated tokens per second over the last 10 s.\n"
               "# TYPE ruvllm_generated_tokens_per_second gauge\n"
               "ruvllm_generated_tokens_per_second %.3f\n"
               "# HELP ruvllm_kv_cache_tokens Positions the running sequences' KV caches hold.\n"
               "# TYPE ruvllm_kv_cache_tokens gauge\n"
               "ruvllm_kv_cache_tokens %u\n"
               "# HELP ruvllm_kv_cache_bytes KV cache bytes the running sequences hold.\n"
               "# TYPE ruvllm_kv_cache_bytes gauge\n"
               "ruvllm_kv_cache_bytes %llu\n"
               "# HELP ruvllm_kv_cache_pages KV cache pages of 32 positions: the budget, held "
               "(a page sequences share counted once), shared by several sequences.\n"
               "# TYPE ruvllm_kv_cache_pages gauge\n"
               "ruvllm_kv_cache_pages{state=\"budget\"} %u\n"
               "ruvllm_kv_cache_pages{state=\"used\"} %u\n"
               "ruvllm_kv_cache_pages{state=\"shared\"} %u\n"
               "# HELP ruvllm_prompt_tokens_reused_total Prompt tokens taken from pages other "
               "requests computed (a common prefix) instead of computed.\n"
               "# TYPE ruvllm_prompt_tokens_reused_total counter\n"
               "ruvllm_prompt_tokens_reused_total %llu\n"
               "# HELP ruvllm_decode_steps_total Forward steps run (each over every running "
               "sequence).\n"
               "# TYPE ruvllm_decode_steps_total counter\n"
               "ruvllm_decode_steps_total %llu\n",
            (unsigned long long)st.prompt_tokens, (unsigned long long)st.gen_tokens,
            (unsigned long long)st.submitted, (unsigned long long)st.completed,
            (unsigned long long)st.cancelled, (unsigned long long)st.rejected, st.queued,
            st.running, st.gen_tps, st.kv.n, (unsigned long long)st.kv.bytes,
            st.kv_store.pages, st.kv_store.pages_used, st.kv_store.pages_shared,
            (unsigned long long)st.prompt_reused, (unsigned long long)st.steps);
}

/* ====================================================================
 * Generation
 * ==================================================================== */

/* The prompt's tokens: a chat rendered by the model's template (tokenized
 * with special tokens, BOS added unless the template wrote it: as `run
 * --chat`), or the completion's text (BOS as the model asks) or ids. */
static int build_prompt(server *s, const api_request *r, int32_t **ids, size_t *n,
                        rvl_think *think, bool *split, api_error *e)
{
    int rc;
    if (r->kind == API_CHAT) {
        char *text = NULL, *warn = NULL;
        pthread_mutex_lock(&s->chat_mu);
        rc = rvl_chat_format(s->chat, r->msgs, r->n_msgs, true, &text, &warn);
        pthread_mutex_unlock(&s->chat_mu);
        free(warn);
        if (rc < 0) {
            api_error_set(e, 400, "invalid_request_error", NULL, "messages",
                          "the chat template failed on these messages: %s", rvl_errmsg());
            return -1;
        }
        bool bos = rvl_tok_add_bos(s->tok) && rvl_tok_bos(s->tok) >= 0;
        if (bos) {
            size_t bl = 0;
            const char *bt = rvl_tok_text(s->tok, rvl_tok_bos(s->tok), &bl);
            if (bt && bl && strncmp(text, bt, bl) == 0)
                bos = false;
        }
        size_t len = strlen(text);
        rc = rvl_tok_encode_alloc(s->tok, text, len, bos, true, ids, n);
        if ((*split = rvl_chat_has_reasoning(s->chat)))
            rvl_think_init_prompt(think, rvl_chat_think_format(s->chat), text, len);
        free(text);
    } else if (r->prompt) {
        rc = rvl_tok_encode_alloc(s->tok, r->prompt, strlen(r->prompt), true, false, ids, n);
    } else {
        const uint32_t n_vocab = rvl_model_hparams(s->model)->n_vocab;
        for (size_t i = 0; i < r->n_ids; i++)
            if ((uint32_t)r->ids[i] >= n_vocab) {
                api_error_set(e, 400, "invalid_request_error", NULL, "prompt",
                              "token id %d is not in the vocabulary (%u tokens)", r->ids[i], n_vocab);
                return -1;
            }
        rc = (*ids = malloc(r->n_ids * sizeof **ids)) ? 0 : rvl_seterr(RVL_ENOMEM, "out of memory");
        if (rc == 0) {
            memcpy(*ids, r->ids, r->n_ids * sizeof **ids);
            *n = r->n_ids;
        }
    }
    if (rc < 0) {
        api_error_set(e, 500, "server_error", NULL, NULL, "%s", rvl_errmsg());
        return -1;
    }
    if (*n == 0) {
        api_error_set(e, 400, "invalid_request_error", NULL, r->kind == API_CHAT ? "messages" : "prompt",
                      "the prompt is empty");
        return -1;
    }
    if (*n >= s->n_ctx) {
        api_error_set(e, 400, "invalid_request_error", "context_length_exceeded",
                      r->kind == API_CHAT ? "messages" : "prompt",
                      "the prompt has %zu tokens, which leaves no room in a context of %u "
                      "tokens (serve -c)", *n, s->n_ctx);
        return -1;
    }
    return 0;
}

static uint64_t fresh_seed(server *s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&s->stat_mu);
    uint64_t k = ++s->seq;
    pthread_mutex_unlock(&s->stat_mu);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (k * 0x9e3779b97f4a7c15ull) ^
                 (uint64_t)getpid();
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}

/* --- the event stream --- */

typedef struct {
    const job *j;
    const char *text;
    size_t n;
    const char *finish;
    bool role, usage, reasoning;
} chunk_arg;

static void chunk_body(FILE *f, const void *arg)
{
    const chunk_arg *a = arg;
    fputs("data: ", f);
    if (a->usage)
        api_write_usage_chunk(f, &a->j->meta, a->j->n_prompt, a->j->n_gen);
    else
        api_write_chunk(f, &a->j->meta, a->role, a->text, a->n, a->reasoning, a->finish);
    fputs("\n\n", f);
}

static void event(job *j, const chunk_arg *a)
{
    size_t n = 0;
    char *b = body_of(chunk_body, a, &n);
    if (b)
        rvl_buf_add(&j->out, b, n);
    free(b);
}

static void stream_error_body(FILE *f, const void *arg)
{
    fputs("data: ", f);
    api_write_error(f, arg);
    fputs("\n\n", f);
}

/* The end of a stream: the last chunk with finish_reason (and usage), then
 * [DONE]; or, for a request the server ended (shutdown, error), an error
 * event, as OpenAI sends one mid-stream. j->mu held. */
static void stream_end(job *j)
{
    if (!strcmp(j->finish, "stop") || !strcmp(j->finish, "length")) {
        event(j, &(chunk_arg){.j = j, .finish = j->finish});
        if (j->include_usage)
            event(j, &(chunk_arg){.j = j, .usage = true});
        rvl_buf_adds(&j->out, "data: [DONE]\n\n");
    } else {
        api_error e;
        job_error(j, &e);
        size_t n = 0;
        char *b = body_of(stream_error_body, &e, &n);
        if (b)
            rvl_buf_add(&j->out, b, n);
        free(b);
    }
    j->sent_final = true;
}

/* MHD's reader for a streamed answer (the connection's thread): blocks
 * until there is something to send. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    job *j = cls;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->out.n > j->out_off) {
            size_t n = j->out.n - j->out_off < max ? j->out.n - j->out_off : max;
            memcpy(buf, j->out.p + j->out_off, n);
            j->out_off += n;
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)n;
        }
        j->out.n = j->out_off = 0;
        if (j->sent_final || j->abandoned) {
            const bool ok = !j->abandoned;
            pthread_mutex_unlock(&j->mu);
            return ok ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (j->meta.kind == API_CHAT && !j->sent_role) {
            event(j, &(chunk_arg){.j = j, .role = true});
            j->sent_role = true;
            continue;
        }
        if (j->reasoning.n) {
            event(j, &(chunk_arg){.j = j, .text = j->reasoning.p, .n = j->reasoning.n,
                                  .reasoning = true});
            j->reasoning.n = 0;
            continue;
        }
        if (j->text.n) {
            event(j, &(chunk_arg){.j = j, .text = j->text.p, .n = j->text.n});
            j->text.n = 0;
            continue;
        }
        if (j->done) {
            stream_end(j);
            continue;
        }
        if (j->out.oom) {   /* nothing sensible can follow */
            pthread_mutex_unlock(&j->mu);
            job_abandon(j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        job_wait(j, 200);
        if (!j->done && client_gone(j->fd)) {
            pthread_mutex_unlock(&j->mu);
            job_abandon(j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        job_check_deadline(j);
    }
}

static void stream_free(void *cls) { job_unref(cls); }

/* --- the non-streamed answer --- */

typedef struct {
    const job *j;
} result_arg;

static void result_body(FILE *f, const void *arg)
{
    const job *j = ((const result_arg *)arg)->j;
    api_write_result(f, &j->meta, j->text.p ? j->text.p : "", j->text.n,
                     j->split ? (j->reasoning.p ? j->reasoning.p : "") : NULL, j->reasoning.n,
                     j->finish, j->n_prompt,
                     j->n_gen);
}

static enum MHD_Result answer_whole(struct MHD_Connection *c, conn_req *q, job *j)
{
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        job_wait(j, 200);
        if (!j->done && client_gone(j->fd)) {
            pthread_mutex_unlock(&j->mu);
            job_abandon(j);
            return MHD_NO;   /* nobody to answer: close */
        }
        job_check_deadline(j);
    }
    pthread_mutex_unlock(&j->mu);
    /* done: the scheduler no longer writes to j */
    if (strcmp(j->finish, "stop") && strcmp(j->finish, "length")) {
        api_error e;
        job_error(j, &e);
        return reply_error(c, q, &e);
    }
    size_t n = 0;
    char *b = body_of(result_body, &(result_arg){j}, &n);
    return queue(c, q, 200, "application/json", b, n);
}

static enum MHD_Result generate(server *s, struct MHD_Connection *c, conn_req *q, api_kind kind)
{
    api_request r;
    api_error e;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    rvl_think think;
    bool split = false;
    if (api_parse(kind, q->body.p ? q->body.p : "", q->body.n, &s->sampling, fresh_seed(s), &r,
                  &e) < 0 ||
        build_prompt(s, &r, &ids, &n_ids, &think, &split, &e) < 0) {
        api_request_free(&r);
        free(ids);
        return reply_error(c, q, &e);
    }
    job *j = calloc(1, sizeof *j);
    if (!j) {
        free(ids);
        api_request_free(&r);
        return reply_err(c, q, 500, "server_error", NULL, "out of memory");
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->srv = s;
    j->refs = 2;   /* this connection and the scheduler */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    j->stream = r.stream;
    j->split = split;
    if (split)
        j->think = think;
    j->include_usage = r.include_usage;
    j->deadline = s->max_time_ms ? q->t0 + s->max_time_ms : 0;
    j->predict_ms = r.t_max_predict_ms;
    j->meta.kind = kind;
    j->meta.created = (int64_t)time(NULL);
    j->meta.model = s->name;
    snprintf(j->meta.id, sizeof j->meta.id, "%s%016llx", kind == API_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)fresh_seed(s));
    q->job = j;

    rvl_sched_request sr = {
        .prompt = ids, .n_prompt = (uint32_t)n_ids, .max_tokens = r.max_tokens,
        .sampling = r.sampling, .stops = r.stops, .ignore_eos = r.ignore_eos,
        /* as run --chat: control tokens shown, the template's end-of-turn
         * markers end the reply */
        .special = kind == API_CHAT,
        .stop_tokens = kind == API_CHAT ? rvl_chat_stops(s->chat) : NULL,
        .on_text = job_on_text, .on_done = job_on_done, .ud = j,
    };
    int64_t id = RVL_EINVAL;
    pthread_mutex_lock(&s->sched_mu);
    if (s->sched)
        id = rvl_sched_submit(s->sched, &sr);
    pthread_mutex_unlock(&s->sched_mu);
    const bool stream = r.stream;
    free(ids);
    api_request_free(&r);
    if (id < 0) {
        j->refs--;   /* the scheduler never took it */
        if (!s->sched || s->stopping)
            return reply_err(c, q, 503, "server_error", NULL, "the server is shutting down");
        if (id == RVL_EBUSY)
            return reply_err(c, q, 429, "requests", "rate_limit_exceeded",
                             "the server is busy: %lld requests are waiting (serve --queue); try "
                             "again later", opt_queue);
        if (id == RVL_EINVAL)
            return reply_err(c, q, 400, "invalid_request_error", "context_length_exceeded",
                             "%s", rvl_errmsg());
        return reply_err(c, q, 500, "server_error", NULL, "%s", rvl_errmsg());
    }
    j->id = id;
    pthread_mutex_lock(&s->stat_mu);
    s->n_jobs++;
    q->counted = true;
    pthread_mutex_unlock(&s->stat_mu);
    if (!stream)
        return answer_whole(c, q, j);

    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read,
                                                                  j, stream_free);
    if (!resp) {
        job_abandon(j);
        return MHD_NO;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++;   /* the response's, dropped by stream_free */
    pthread_mutex_unlock(&j->mu);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    q->status = 200;
    q->answered = true;
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ====================================================================
 * Routing
 * ==================================================================== */

static int endpoint_of(const char *url)
{
    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions"))
        return EP_CHAT;
    if (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions"))
        return EP_COMPL;
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models"))
        return EP_MODELS;
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health"))
        return EP_HEALTH;
    if (!strcmp(url, "/metrics"))
        return EP_METRICS;
    return EP_OTHER;
}

/* "Authorization: Bearer KEY", compared in constant time. */
static bool authorized(const server *s, struct MHD_Connection *c)
{
    if (!s->api_key)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    const size_t n = strlen(h), k = strlen(s->api_key);
    unsigned char diff = n != k;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(h[i] ^ s->api_key[i % (k ? k : 1)]);
    return diff == 0;
}

static void models_body(FILE *f, const void *arg)
{
    const server *s = arg;
    api_write_models(f, s->name, s->started);
}

static enum MHD_Result route(server *s, struct MHD_Connection *c, conn_req *q)
{
    const bool get = !strcmp(q->method, "GET"), post = !strcmp(q->method, "POST");
    switch (q->ep) {
    case EP_HEALTH:
        if (get)
            return reply_text(c, q, 200, "application/json", "{\"status\":\"ok\"}", 15);
        break;
    case EP_MODELS:
        if (get) {
            size_t n = 0;
            char *b = body_of(models_body, s, &n);
            return queue(c, q, 200, "application/json", b, n);
        }
        break;
    case EP_METRICS:
        if (get) {
            size_t n = 0;
            char *b = body_of(metrics_body, s, &n);
            return queue(c, q, 200, "text/plain; version=0.0.4", b, n);
        }
        break;
    case EP_CHAT:
    case EP_COMPL:
        if (post)
            return generate(s, c, q, q->ep == EP_CHAT ? API_CHAT : API_COMPLETIONS);
        break;
    default:
        return reply_err(c, q, 404, "invalid_request_error", "not_found", "no endpoint %s %s",
                         q->method, q->path);
    }
    return reply_err(c, q, 405, "invalid_request_error", "method_not_allowed",
                     "%s takes %s, not %s", q->path,
                     q->ep == EP_CHAT || q->ep == EP_COMPL ? "POST" : "GET", q->method);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **ctx)
{
    (void)version;
    server *s = cls;
    conn_req *q = *ctx;
    if (!q) {   /* the headers are in; the body is not */
        if (!(q = calloc(1, sizeof *q)))
            return MHD_NO;
        *ctx = q;
        q->t0 = now_ms();
        q->ep = endpoint_of(url);
        snprintf(q->method, sizeof q->method, "%s", method);
        snprintf(q->path, sizeof q->path, "%s", url);
        if (s->stopping)
            return reply_err(c, q, 503, "server_error", NULL, "the server is shutting down");
        if (q->ep != EP_HEALTH && !authorized(s, c))
            return reply_err(c, q, 401, "authentication_error", "invalid_api_key",
                             "a valid API key is required (Authorization: Bearer KEY)");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->max_body)
            return reply_err(c, q, 413, "invalid_request_error", "request_too_large",
                             "the body has %s bytes, more than the %zu the server takes "
                             "(serve --max-body)", cl, s->max_body);
        return MHD_YES;
    }
    if (q->answered) {   /* answered early: the rest of the body is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (q->body.n + *upload_size > s->max_body)
            q->too_big = true;
        else if (rvl_buf_add(&q->body, upload, *upload_size) < 0)
            return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (q->too_big)
        return reply_err(c, q, 413, "invalid_request_error", "request_too_large",
                         "the body is larger than the %zu bytes the server takes (serve --max-body)",
                         s->max_body);
    return route(s, c, q);
}

/* After each request: the log line, the counters, and a job its client
 * left behind cancelled. */
static void on_completed(void *cls, struct MHD_Connection *c, void **ctx,
                         enum MHD_RequestTerminationCode why)
{
    (void)c;
    server *s = cls;
    conn_req *q = *ctx;
    if (!q)
        return;
    *ctx = NULL;
    uint32_t np = 0, ng = 0;
    const char *how = why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (client gone)";
    if (q->job) {
        job *j = q->job;
        pthread_mutex_lock(&j->mu);
        const bool done = j->done;
        np = j->n_prompt;
        ng = j->n_gen;
        pthread_mutex_unlock(&j->mu);
        if (!done || why != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
            job_abandon(j);
            if (!done)
                how = " (client gone: cancelled)";
        }
        job_unref(j);
    }
    const int status = q->status ? q->status : 500;
    count_request(s, q->ep, status);
    if (q->counted) {
        pthread_mutex_lock(&s->stat_mu);
        s->n_jobs--;
        pthread_cond_broadcast(&s->stat_cv);
        pthread_mutex_unlock(&s->stat_mu);
    }
    if (q->job)
        fprintf(stderr, "ruvllm serve: %s %s %d %u+%u tokens %.0f ms%s\n", q->method, q->path,
                status, np, ng, now_ms() - q->t0, how);
    else
        fprintf(stderr, "ruvllm serve: %s %s %d %.0f ms%s\n", q->method, q->path, status,
                now_ms() - q->t0, how);
    rvl_buf_free(&q->body);
    free(q);
}

/* MHD's own messages (malformed requests it answers itself) */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = 0;
    fprintf(stderr, "ruvllm serve: http: %s\n", msg);
}

/* ====================================================================
 * Start and stop
 * ==================================================================== */

static void *sched_thread(void *arg)
{
    static int rc;
    rc = rvl_sched_run(arg, false);
    return &rc;
}

/* The listening address: a numeric address or a host name (the first
 * address it resolves to). */
static int resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, bool *v6)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE}, *res = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0)
        return rvl_seterr(RVL_EINVAL, "--host %s: %s", host, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return 0;
}

/* The model's name: --alias, or the file name without .gguf. */
static void model_name(const char *path, char *out, size_t cap)
{
    if (opt_alias) {
        snprintf(out, cap, "%s", opt_alias);
        return;
    }
    const char *b = strrchr(path, '/');
    snprintf(out, cap, "%s", b ? b + 1 : path);
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf"))
        out[n - 5] = 0;
}

static int serve_main(rvl_cmd *cmd, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    const char *name = cmd->name;
    char path[4096], mname[4096];
    rvl_model *m = NULL;
    server s = {.api_key = opt_api_key, .max_body = (size_t)opt_max_body,
                .max_time_ms = 1e3 * (double)opt_max_time};
    struct MHD_Daemon *d = NULL;
    pthread_t th;
    bool th_started = false;
    int status = 0, rc;

    if (!s.api_key && getenv("RUVLLM_API_KEY") && getenv("RUVLLM_API_KEY")[0])
        s.api_key = getenv("RUVLLM_API_KEY");
    if (s.api_key && !s.api_key[0])
        cli_usage(name, "--api-key: the key is empty");
    struct sockaddr_storage addr;
    bool v6 = false;
    if ((rc = resolve(opt_host, (uint16_t)opt_port, &addr, &v6)) < 0)
        cli_usage(name, "%s", rvl_errmsg());
    pthread_mutex_init(&s.chat_mu, NULL);
    pthread_mutex_init(&s.sched_mu, NULL);
    pthread_mutex_init(&s.stat_mu, NULL);
    pthread_cond_init(&s.stat_cv, NULL);
    rvl_interrupt_install();

    if ((rc = rvl_model_path(opt_model, path, sizeof path)) < 0 ||
        (rc = cli_model_open(&m, path, opt_expert_budget, (int)opt_threads)) < 0) {
        status = cli_fail(name, rc);
        goto out;
    }
    model_name(path, mname, sizeof mname);
    s.model = m;
    s.name = mname;
    s.tok = rvl_model_tokenizer(m);
    s.started = (int64_t)time(NULL);
    char *warn = NULL;
    rc = rvl_chat_open_model(&s.chat, rvl_model_file(m), s.tok, opt_chat_template, &warn);
    if (warn) {
        cli_err(name, "%s", warn);
        free(warn);
    }
    if (rc < 0) {
        status = cli_fail(name, rc);
        goto out;
    }
    rvl_chat_set_thinking(s.chat, cli_reasoning(opt_reasoning));
    cli_sample_params(&opt_sample, 0, &s.sampling);

    rvl_sched_params sp = {.ctx = {.n_ctx = (uint32_t)opt_ctx, .n_threads = (uint32_t)opt_threads},
                           .n_parallel = (uint32_t)opt_parallel, .n_queue = (uint32_t)opt_queue,
                           .n_step_tokens = (uint32_t)opt_batch,
                           .kv_tokens = opt_kv_budget > UINT32_MAX ? UINT32_MAX
                                                                   : (uint32_t)opt_kv_budget};
    cli_kv_params(&opt_kv, &sp.ctx);
    if ((rc = rvl_sched_open(&s.sched, m, &sp)) < 0) {
        status = cli_fail(name, rc);
        goto out;
    }
    {   /* the context each sequence gets, as rvl_ctx_open resolves it */
        const uint32_t train = rvl_model_hparams(m)->n_ctx_train;
        s.n_ctx = opt_ctx ? (uint32_t)opt_ctx : train < 4096 ? train : 4096;
    }
    if (pthread_create(&th, NULL, sched_thread, s.sched) != 0) {
        cli_err(name, "cannot start the scheduler's thread");
        status = EXIT_RUNTIME;
        goto out;
    }
    th_started = true;

    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                             MHD_USE_ITC | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0),
                         (uint16_t)opt_port, NULL, NULL, on_request, &s,
                         MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                         MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)opt_timeout,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)opt_max_conn,
                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, &s,
                         MHD_OPTION_END);
    if (!d) {
        cli_err(name, "cannot listen on %s port %lld: %s", opt_host, opt_port,
                errno ? strerror(errno) : "libmicrohttpd failed to start");
        status = EXIT_RUNTIME;
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "ruvllm serve: %s (%s), %lld sequences of %u tokens, queue %lld%s\n",
            path, rvl_model_hparams(m)->arch, opt_parallel, s.n_ctx, opt_queue,
            s.api_key ? ", API key required" : "");
    fprintf(stderr, "ruvllm serve: listening on http://%s%s%s:%u\n", v6 ? "[" : "", opt_host,
            v6 ? "]" : "", di ? di->port : (unsigned)opt_port);

    while (!rvl_interrupted()) {
        if (pthread_tryjoin_np(th, NULL) == 0) {   /* the scheduler failed */
            th_started = false;
            if (rvl_interrupted())
                break;
            cli_err(name, "the scheduler stopped: %s", rvl_errmsg());
            status = EXIT_RUNTIME;
            break;
        }
        poll(NULL, 0, 100);
    }
    if (status == 0)
        fprintf(stderr, "ruvllm serve: stopping: no new requests; cancelling those in flight\n");

out:
    /* stop accepting; cancel what is queued or running (their clients get
     * an error answer); then close the connections */
    s.stopping = true;
    if (d) {
        MHD_socket ls = MHD_quiesce_daemon(d);
        if (ls != MHD_INVALID_SOCKET)
            close(ls);
    }
    if (s.sched)
        rvl_sched_stop(s.sched);
    if (th_started)
        pthread_join(th, NULL);
    pthread_mutex_lock(&s.sched_mu);
    rvl_sched_close(s.sched);
    s.sched = NULL;
    pthread_mutex_unlock(&s.sched_mu);
    /* the ended requests' answers (a 503, a stream's error event) reach
     * their clients before the connections close: up to 5 s */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    pthread_mutex_lock(&s.stat_mu);
    while (s.n_jobs && pthread_cond_timedwait(&s.stat_cv, &s.stat_mu, &until) == 0)
        ;
    pthread_mutex_unlock(&s.stat_mu);
    if (d)
        MHD_stop_daemon(d);
    rvl_chat_close(s.chat);
    rvl_model_close(m);
    pthread_mutex_destroy(&s.chat_mu);
    pthread_mutex_destroy(&s.sched_mu);
    pthread_mutex_destroy(&s.stat_mu);
    pthread_cond_destroy(&s.stat_cv);
    return status;
}

rvl_cmd cmd_serve_desc = {
    .synopsis = "[-m MODEL] [--host ADDR] [--port N] [options]",
    .description =
        "Serve the model over HTTP with the OpenAI API, for the clients and tools that speak it: "
        "POST /v1/chat/completions and /v1/completions (\"stream\": true answers with "
        "server-sent events, data: {...} chunks and a last data: [DONE]), GET /v1/models, "
        "GET /health and GET /metrics (Prometheus text: requests by endpoint and status, "
        "prompt and generated tokens, queue depth, running sequences, tokens per second, KV "
        "cache bytes). The paths without /v1 are served too.\n"
        "\n"
        "Requests are generated together: up to --parallel sequences at once, each step of the "
        "model taking the next token of every running one (continuous batching), and up to "
        "--queue more wait; beyond, the answer is 429 with Retry-After. A client that "
        "disconnects cancels its request and frees its sequence.\n"
        "\n"
        "Chat requests are rendered by the model's chat template (as run --chat), with its "
        "end-of-turn strings as stops; a thinking model's reasoning (<think>...</think>, gpt-oss's "
        "analysis channel) is answered apart, in message.reasoning_content (delta.reasoning_content "
        "when streamed), as llama-server does. The fields taken are those of OpenAI: messages (string "
        "content or text parts), prompt (a string or token ids), stream, stream_options."
        "include_usage, max_tokens or max_completion_tokens, temperature, top_p, seed, stop, "
        "frequency_penalty, presence_penalty, n (1 only); and, as llama-server, top_k, min_p, "
        "repeat_penalty and ignore_eos. Fields not given take this command's sampling options. "
        "\"model\" may name anything: the loaded model answers, under its --alias. Answers "
        "carry id, object, created, model, choices with finish_reason (stop or length) and "
        "usage. Bad JSON, a field of the wrong type or range, empty messages: 400 with an "
        "OpenAI error object {\"error\": {\"message\", \"type\", \"param\", \"code\"}}; a body "
        "larger than --max-body: 413.\n"
        "\n"
        "Limits: a request's headers may take 64 KiB (beyond, 431) and its body --max-body; a "
        "connection on which nothing is received or sent for --timeout seconds is closed (as "
        "llama-server's --timeout; a running generation keeps its connection busy); with "
        "--max-request-time S a generation still running S seconds after its request arrived "
        "ends there, with finish_reason \"length\" and the text so far (a request still waiting "
        "for a sequence gets an empty one). A request may carry llama-server's "
        "t_max_predict_ms: once that many milliseconds have passed since its first token, its "
        "generation ends at the next newline, also with \"length\". Each step of the model takes "
        "the next token of every running sequence and fills the rest of --batch-size tokens "
        "with chunks of the prompts newly admitted: a larger size lets a new prompt in with "
        "fewer steps, and makes the running sequences wait longer for that step.\n"
        "\n"
        "The server listens on 127.0.0.1 unless --host says otherwise. With --api-key (or "
        "RUVLLM_API_KEY) every endpoint but /health needs the header \"Authorization: Bearer "
        "KEY\"; without it the answer is 401. One line per request goes to standard error: "
        "method, path, status, prompt+generated tokens, milliseconds.\n"
        "\n"
        "SIGINT or SIGTERM stops the server: it stops accepting connections, ends the requests "
        "in flight (a stream gets an error event, a waiting client a 503), and exits 0.",
    .examples = "ruvllm serve --port 8080\tserve the default model on localhost:8080\n"
                "curl -s localhost:8080/v1/chat/completions -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}'\tchat with it\n"
                "RUVLLM_API_KEY=secret ruvllm serve --host 0.0.0.0 --parallel 8\tserve the network, with a key",
    .opts = opts,
    .aliases = aliases,
    .pos_compl = COMPL_NONE,
    .min_pos = 0,
    .max_pos = 0,
    .main = serve_main,
};
