/*
 * run_batch.c - ruvllm run --batch FILE|-: one prompt per line through the
 * scheduler (lib/ruvllm.h "The scheduler"), JSON Lines out.
 *
 * A line is a prompt, or (starting with '{') a JSON object with the
 * prompt or a conversation and per-line options (OpenAI's and llama.cpp
 * server's names). This thread reads the input as it comes (never all of
 * it first), renders and tokenizes each line and submits it; a second
 * thread runs the scheduler's steps, whose callbacks collect each reply
 * and hand the finished line to the output: at once with --unordered,
 * else in input order, holding at most WINDOW finished lines that wait for
 * an earlier one (the reader pauses beyond that: bounded memory).
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "run_batch.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ====================================================================
 * State
 * ==================================================================== */

typedef struct batch batch;

/* One submitted line, until its output line is made. */
typedef struct {
    batch *B;
    uint64_t seq;                  /* its place in the output order */
    long line;
    char *id;                      /* the id as JSON text */
    rvl_buf text;
    bool split;                    /* a thinking model's reasoning told apart */
    rvl_think think0;              /* the splitter as the prompt left it */
} job;

struct batch {
    const char *cmd;
    const run_batch_opts *o;
    rvl_model *m;
    const rvl_tokenizer *tok;
    rvl_chat *chat;                /* opened with --chat, or at the first "messages" */
    bool chat_tried;
    rvl_sched *s;
    uint64_t seed_base;            /* without --seed: line n samples with seed_base + n */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    uint64_t n_lines;              /* output lines promised (submitted or failed) */
    uint64_t n_out;                /* made (written, or waiting in the window) */
    uint64_t next_write;           /* in order: the next line to write */
    char **window;                 /* (WINDOW) finished lines waiting for an earlier one */
    bool quit;                     /* stdout failed, or interrupted */
    int write_errno;
    uint64_t n_failed, prompt_tokens, gen_tokens;
    bool progress;                 /* stderr is a terminal */
    double t0;
};

#define WINDOW 1024

/* Wait on B->cv (B->mu held) at most 100 ms: the waits poll the quit and
 * Ctrl-C flags, which no one signals. */
static void wait_a_while(batch *B)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&B->cv, &B->mu, &ts);
}

/* ====================================================================
 * Output: JSON lines, in order or as they finish
 * ==================================================================== */

static void write_line(batch *B, char *line)
{
    if (!B->quit) {
        size_t n = strlen(line);
        if (fwrite(line, 1, n, stdout) != n || fflush(stdout) != 0) {
            B->quit = true;
            B->write_errno = errno;
        }
    }
    free(line);
}

/* Line seq's output is made (NULL: out of memory, counted as failed). */
static void deliver(batch *B, uint64_t seq, char *line, bool failed)
{
    pthread_mutex_lock(&B->mu);
    B->n_out++;
    if (failed)
        B->n_failed++;
    if (!line) {
        B->quit = true;
        B->write_errno = ENOMEM;
    } else if (B->o->unordered) {
        write_line(B, line);
    } else {
        B->window[seq % WINDOW] = line;
        while (B->window[B->next_write % WINDOW]) {
            const uint64_t k = B->next_write++ % WINDOW;
            write_line(B, B->window[k]);
            B->window[k] = NULL;
        }
    }
    if (B->progress) {
        rvl_sched_stats st;
        rvl_sched_stats_get(B->s, &st);
        fprintf(stderr, "\rruvllm %s: %llu done, %llu failed, %u running, %.1f tokens/s   ",
                B->cmd, (unsigned long long)B->n_out, (unsigned long long)B->n_failed,
                st.running, st.gen_tps);
    }
    pthread_cond_broadcast(&B->cv);
    pthread_mutex_unlock(&B->mu);
}

/* A JSON line made with rvl_jw: open, fill, close. */
static FILE *line_open(char **buf, size_t *n) { return open_memstream(buf, n); }

/* *buf is open_memstream's: set by fclose */
static char *line_close(FILE *f, char **buf)
{
    fputc('\n', f);
    if (fclose(f) != 0) {
        free(*buf);
        return NULL;
    }
    return *buf;
}

/* "id": the line's id, kept as JSON text (a string, or a number as given) */
static void put_id(rvl_jw *w, const char *id)
{
    rvl_jw_key(w, "id");
    cJSON *v = cJSON_Parse(id);
    if (cJSON_IsString(v))
        rvl_jw_str(w, v->valuestring);
    else if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
             fabs(v->valuedouble) < 9007199254740992.0)
        rvl_jw_i64(w, (int64_t)v->valuedouble);
    else if (cJSON_IsNumber(v))
        rvl_jw_f64(w, v->valuedouble);
    else
        rvl_jw_null(w);
    cJSON_Delete(v);
}

static void error_line(batch *B, uint64_t seq, const char *id, long line, const char *msg)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = line_open(&buf, &n);
    if (!f) {
        deliver(B, seq, NULL, true);
        return;
    }
    rvl_jw w;
    rvl_jw_init(&w, f, false);
    rvl_jw_obj(&w);
    put_id(&w, id);
    rvl_jw_key(&w, "line");
    rvl_jw_i64(&w, line);
    rvl_jw_key(&w, "error");
    rvl_jw_str(&w, msg);
    rvl_jw_obj_end(&w);
    deliver(B, seq, line_close(f, &buf), true);
}

/* ====================================================================
 * The scheduler's callbacks (its thread)
 * ==================================================================== */

static int on_text(void *ud, const char *t, size_t n)
{
    job *j = ud;
    if (__atomic_load_n(&j->B->quit, __ATOMIC_RELAXED))   /* stdout failed: stop */
        return -1;
    return rvl_buf_add(&j->text, t, n) < 0 ? -1 : 0;
}

typedef struct {
    rvl_buf answer, reasoning;
} parts;

static int parts_out(void *ud, rvl_think_part part, const char *s, size_t n)
{
    parts *p = ud;
    if (part == RVL_THINK_TAG)
        return 0;
    return rvl_buf_add(part == RVL_THINK_ANSWER ? &p->answer : &p->reasoning, s, n) < 0
               ? RVL_ENOMEM : 0;
}

static void job_free(job *j)
{
    free(j->id);
    rvl_buf_free(&j->text);
    free(j);
}

static void on_done(void *ud, const rvl_sched_result *r)
{
    job *j = ud;
    batch *B = j->B;
    if (!strcmp(r->finish_reason, "cancelled")) {   /* only when quitting: no output */
        job_free(j);
        return;
    }
    if (r->error) {
        error_line(B, j->seq, j->id, j->line, r->errmsg ? r->errmsg : "generation failed");
        job_free(j);
        return;
    }
    parts p = {0};
    bool ok = true;
    if (j->split) {
        rvl_think th = j->think0;
        ok = rvl_think_push(&th, j->text.p ? j->text.p : "", j->text.n, parts_out, &p) == 0 &&
             rvl_think_flush(&th, parts_out, &p) == 0;
    }
    char *buf = NULL;
    size_t n = 0;
    FILE *f = ok ? line_open(&buf, &n) : NULL;
    if (f) {
        rvl_jw w;
        rvl_jw_init(&w, f, false);
        rvl_jw_obj(&w);
        put_id(&w, j->id);
        const rvl_buf *text = j->split ? &p.answer : &j->text;
        rvl_jw_key(&w, "text");
        rvl_jw_strn(&w, text->p ? text->p : "", text->n);
        if (j->split) {
            rvl_jw_key(&w, "reasoning");
            rvl_jw_strn(&w, p.reasoning.p ? p.reasoning.p : "", p.reasoning.n);
        }
        rvl_jw_key(&w, "finish_reason");
        rvl_jw_str(&w, r->finish_reason);
        rvl_jw_key(&w, "prompt_tokens");
        rvl_jw_u64(&w, r->n_prompt);
        rvl_jw_key(&w, "completion_tokens");
        rvl_jw_u64(&w, r->n_gen);
        rvl_jw_obj_end(&w);
    }
    pthread_mutex_lock(&B->mu);
    B->prompt_tokens += r->n_prompt;
    B->gen_tokens += r->n_gen;
    pthread_mutex_unlock(&B->mu);
    deliver(B, j->seq, f ? line_close(f, &buf) : NULL, false);
    rvl_buf_free(&p.answer);
    rvl_buf_free(&p.reasoning);
    job_free(j);
}

static void *runner(void *arg)
{
    return (void *)(intptr_t)rvl_sched_run(arg, false);
}

/* ====================================================================
 * Input: lines read as they come (poll: a quit is seen while waiting)
 * ==================================================================== */

typedef struct {
    int fd;
    char *buf;
    size_t n, cap, start;          /* buf[start..n) not yet returned */
    bool eof;
    size_t limit;                  /* longest line */
} reader;

/* 1 and *line (NUL-terminated, without its newline; valid until the next
 * call) *len; 0 at the end; RVL_E* on a read error, RVL_EINTR on quit,
 * RVL_ERANGE for a line over the limit (skipped). */
static int read_line(reader *rd, batch *B, char **line, size_t *len)
{
    for (;;) {
        char *nl = rd->n > rd->start ? memchr(rd->buf + rd->start, '\n', rd->n - rd->start)
                                     : NULL; /* (buf is NULL before the first read) */
        if (nl || (rd->eof && rd->n > rd->start)) {
            char *p = rd->buf + rd->start;
            size_t l = nl ? (size_t)(nl - p) : rd->n - rd->start;
            rd->start += l + (nl ? 1 : 0);
            p[l] = 0;
            *line = p;
            *len = l;
            return 1;
        }
        if (rd->eof)
            return 0;
        if (rd->n - rd->start > rd->limit)
            return rvl_seterr(RVL_ERANGE, "a line is longer than %zu bytes (RUVLLM_MAX_INPUT)",
                              rd->limit);
        if (rd->start) {
            memmove(rd->buf, rd->buf + rd->start, rd->n - rd->start);
            rd->n -= rd->start;
            rd->start = 0;
        }
        if (rd->cap - rd->n < 65536 + 1) {
            size_t nc = rd->cap ? 2 * rd->cap : 131072;
            char *nb = realloc(rd->buf, nc);
            if (!nb)
                return rvl_seterr(RVL_ENOMEM, "out of memory");
            rd->buf = nb;
            rd->cap = nc;
        }
        struct pollfd pf = {.fd = rd->fd, .events = POLLIN};
        int pr = poll(&pf, 1, 100);
        pthread_mutex_lock(&B->mu);
        const bool quit = B->quit;
        pthread_mutex_unlock(&B->mu);
        if (quit || rvl_interrupted())
            return RVL_EINTR;
        if (pr < 0 && errno != EINTR)
            return rvl_seterr(RVL_EIO, "reading the input: %s", strerror(errno));
        if (pr <= 0)
            continue;
        ssize_t got = read(rd->fd, rd->buf + rd->n, rd->cap - rd->n - 1);
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return rvl_seterr(RVL_EIO, "reading the input: %s", strerror(errno));
        }
        if (got == 0)
            rd->eof = true;
        rd->n += (size_t)got;
    }
}

/* ====================================================================
 * A line: its fields, its prompt
 * ==================================================================== */

/* What a line asks for. */
typedef struct {
    char *id;                      /* JSON text */
    const char *prompt;            /* borrowed from the line or its JSON */
    const cJSON *messages;
    rvl_sampler_params sp;
    int32_t max_tokens;
    const char **stops;            /* NULL-terminated (owned array, borrowed strings) */
    bool own_stops;
} line_req;

static const char *const fields[] = {"id", "prompt", "messages", "max_tokens", "temperature",
                                     "top_p", "top_k", "min_p", "seed", "stop", NULL};

static bool is_int(const cJSON *v, double lo, double hi)
{
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= lo &&
           v->valuedouble <= hi;
}

/* The fields of a JSON line into *q. NULL, or what is wrong (err, cap). */
static const char *parse_fields(const cJSON *j, line_req *q, char *err, size_t cap)
{
    for (const cJSON *v = j->child; v; v = v->next) {
        const char *k = v->string;
        if (!strcmp(k, "id")) {
            if (!cJSON_IsString(v) && !cJSON_IsNumber(v))
                return "id: expected a string or a number";
            char *t = cJSON_PrintUnformatted(v);
            if (!t)
                return "out of memory";
            free(q->id);
            q->id = t;
        }
    }
    for (const cJSON *v = j->child; v; v = v->next) {
        const char *k = v->string;
        if (cJSON_IsNull(v) && strcmp(k, "prompt") && strcmp(k, "messages"))
            continue;   /* null: the default, as OpenAI's API takes it */
        if (!strcmp(k, "id")) {
            continue;
        } else if (!strcmp(k, "prompt")) {
            if (!cJSON_IsString(v))
                return "prompt: expected a string";
            if (!*v->valuestring)
                return "prompt: empty";
            q->prompt = v->valuestring;
        } else if (!strcmp(k, "messages")) {
            if (!cJSON_IsArray(v) || !v->child)
                return "messages: expected a non-empty array of {\"role\", \"content\"}";
            int i = 0;
            for (const cJSON *mm = v->child; mm; mm = mm->next, i++) {
                const cJSON *r = cJSON_GetObjectItemCaseSensitive(mm, "role");
                const cJSON *c = cJSON_GetObjectItemCaseSensitive(mm, "content");
                if (!cJSON_IsObject(mm) || !cJSON_IsString(r) || !cJSON_IsString(c)) {
                    snprintf(err, cap, "messages[%d]: expected {\"role\": string, \"content\": "
                             "string}", i);
                    return err;
                }
            }
            q->messages = v;
        } else if (!strcmp(k, "max_tokens")) {
            if (!is_int(v, -1, 1e9))
                return "max_tokens: expected an integer from -1 (no limit) to 1e9";
            q->max_tokens = (int32_t)v->valuedouble;
        } else if (!strcmp(k, "temperature")) {
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 100)
                return "temperature: expected a number from 0 (greedy) to 100";
            q->sp.temp = (float)v->valuedouble;
        } else if (!strcmp(k, "top_p")) {
            if (!cJSON_IsNumber(v) || v->valuedouble <= 0 || v->valuedouble > 1)
                return "top_p: expected a number above 0, at most 1";
            q->sp.top_p = (float)v->valuedouble;
        } else if (!strcmp(k, "top_k")) {
            if (!is_int(v, 0, 1e9))
                return "top_k: expected a non-negative integer (0: off)";
            q->sp.top_k = (int32_t)v->valuedouble;
        } else if (!strcmp(k, "min_p")) {
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1)
                return "min_p: expected a number from 0 to 1";
            q->sp.min_p = (float)v->valuedouble;
        } else if (!strcmp(k, "seed")) {
            if (!is_int(v, 0, 9007199254740992.0))
                return "seed: expected a non-negative integer";
            q->sp.seed = (uint64_t)v->valuedouble;
        } else if (!strcmp(k, "stop")) {
            size_t n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? (size_t)cJSON_GetArraySize(v) : 0;
            if (!cJSON_IsString(v) && !cJSON_IsArray(v))
                return "stop: expected a string or an array of strings";
            const char **st = calloc(n + 1, sizeof *st);
            if (!st)
                return "out of memory";
            if (q->own_stops)
                free(q->stops);
            q->stops = st;
            q->own_stops = true;
            if (cJSON_IsString(v)) {
                st[0] = v->valuestring;
            } else {
                size_t i = 0;
                for (const cJSON *e = v->child; e; e = e->next)
                    if (!cJSON_IsString(e))
                        return "stop: expected a string or an array of strings";
                    else
                        st[i++] = e->valuestring;
            }
            for (size_t i = 0; i < n; i++)
                if (!*st[i])
                    return "stop: a stop string is empty";
        } else {
            const char *near = cli_suggest(k, fields);
            snprintf(err, cap, "unknown field '%s'%s%s%s", k, near ? " (did you mean '" : "",
                     near ? near : "", near ? "'?)" : "");
            return err;
        }
    }
    if (q->prompt && q->messages)
        return "give prompt or messages, not both";
    if (!q->prompt && !q->messages)
        return "no prompt or messages";
    return NULL;
}

/* The chat template, opened once (warnings on stderr). */
static int chat_get(batch *B, rvl_chat **out)
{
    if (!B->chat_tried) {
        B->chat_tried = true;
        char *warn = NULL;
        int rc = rvl_chat_open_model(&B->chat, rvl_model_file(B->m), B->tok,
                                     B->o->chat_template, &warn);
        if (warn) {
            cli_err(B->cmd, "%s", warn);
            free(warn);
        }
        if (rc < 0) {
            rvl_chat_close(B->chat);
            B->chat = NULL;
            return rc;
        }
        rvl_chat_set_thinking(B->chat, cli_reasoning(B->o->reasoning));
        if (B->o->effort && (rc = rvl_chat_set_reasoning_effort(B->chat, B->o->effort)) < 0) {
            rvl_chat_close(B->chat);
            B->chat = NULL;
            return rc;
        }
    }
    *out = B->chat;
    return B->chat ? 0 : rvl_seterr(RVL_EINVAL, "the model's chat template could not be opened");
}

/* The request of line q: rendered (a conversation, or --chat's one user
 * turn, as run --chat renders it) and tokenized into *ids. 0, or an
 * RVL_E* code with the message in rvl_errmsg(). */
static int make_request(batch *B, line_req *q, job *j, int32_t **ids, size_t *n_ids,
                        rvl_sched_request *rq)
{
    const run_batch_opts *o = B->o;
    bool special = o->special, no_bos = o->no_bos;
    char *rendered = NULL;
    rvl_chat *chat = NULL;
    int rc = 0;
    if (q->messages || o->chat) {
        if ((rc = chat_get(B, &chat)) < 0)
            return rc;
        rvl_chat_msg one[2], *msgs = one;
        size_t n = 0;
        if (q->messages) {
            n = (size_t)cJSON_GetArraySize(q->messages);
            if (!(msgs = calloc(n, sizeof *msgs)))
                return rvl_seterr(RVL_ENOMEM, "out of memory");
            n = 0;
            for (const cJSON *mm = q->messages->child; mm; mm = mm->next)
                msgs[n++] = (rvl_chat_msg){
                    cJSON_GetObjectItemCaseSensitive(mm, "role")->valuestring,
                    cJSON_GetObjectItemCaseSensitive(mm, "content")->valuestring};
        } else {
            if (o->system)
                one[n++] = (rvl_chat_msg){"system", o->system};
            one[n++] = (rvl_chat_msg){"user", q->prompt};
        }
        char *warn = NULL;
        rc = rvl_chat_format(chat, msgs, n, true, &rendered, &warn);
        if (msgs != one)
            free(msgs);
        if (warn) {
            cli_err(B->cmd, "line %ld: %s", j->line, warn);
            free(warn);
        }
        if (rc < 0)
            return rc;
        special = true;
        if (!no_bos && rvl_tok_add_bos(B->tok) && rvl_tok_bos(B->tok) >= 0) {
            size_t bl = 0;
            const char *bt = rvl_tok_text(B->tok, rvl_tok_bos(B->tok), &bl);
            if (bt && bl && strlen(rendered) >= bl && memcmp(rendered, bt, bl) == 0)
                no_bos = true;
        }
        if (rvl_chat_has_reasoning(chat) && !o->show_reasoning) {
            j->split = true;
            rvl_think_init_prompt(&j->think0, rvl_chat_think_format(chat), rendered,
                                  strlen(rendered));
        }
    }
    const char *text = rendered ? rendered : q->prompt;
    rc = rvl_tok_encode_alloc(B->tok, text, strlen(text), !no_bos, special, ids, n_ids);
    free(rendered);
    if (rc < 0)
        return rc;
    if (*n_ids == 0)
        return rvl_seterr(RVL_EINVAL, "the prompt is empty (and the model adds no BOS token)");
    *rq = (rvl_sched_request){
        .prompt = *ids, .n_prompt = (uint32_t)*n_ids, .max_tokens = q->max_tokens,
        .sampling = q->sp, .stops = q->stops, .ignore_eos = o->ignore_eos, .special = special,
        .stop_tokens = chat ? rvl_chat_stops(chat) : NULL, .on_text = on_text,
        .on_done = on_done, .ud = j,
    };
    return 0;
}

/* Submit, waiting while the queue is full. The id, or an RVL_E* code. */
static int64_t submit_wait(batch *B, const rvl_sched_request *rq)
{
    for (;;) {
        pthread_mutex_lock(&B->mu);
        const uint64_t seen = B->n_out;
        pthread_mutex_unlock(&B->mu);
        int64_t id = rvl_sched_submit(B->s, rq);
        if (id != RVL_EBUSY)
            return id;
        pthread_mutex_lock(&B->mu);
        while (B->n_out == seen && !B->quit && !rvl_interrupted())
            wait_a_while(B);
        const bool quit = B->quit || rvl_interrupted();
        pthread_mutex_unlock(&B->mu);
        if (quit)
            return RVL_EINTR;
    }
}

/* One input line: an output line promised, then submitted or failed. */
static void do_line(batch *B, char *text, size_t len, long line)
{
    const run_batch_opts *o = B->o;
    if (len && text[len - 1] == '\r')
        text[--len] = 0;
    size_t lead = strspn(text, " \t");
    if (lead == len)
        return;   /* a blank line: no prompt, no output */
    line_req q = {.sp = o->sp, .max_tokens = o->max_tokens < 0 ? -1 : (int32_t)o->max_tokens,
                  .stops = (const char **)o->stops};
    if (!o->seed_given)
        q.sp.seed = B->seed_base + (uint64_t)line;
    char err[256];
    const char *bad = NULL;
    cJSON *js = NULL;
    pthread_mutex_lock(&B->mu);
    const uint64_t seq = B->n_lines++;
    /* in order: at most WINDOW lines between the oldest unwritten one and this */
    while (!o->unordered && seq - B->next_write >= WINDOW && !B->quit && !rvl_interrupted())
        wait_a_while(B);
    pthread_mutex_unlock(&B->mu);
    char idbuf[32];
    snprintf(idbuf, sizeof idbuf, "%ld", line);
    if (text[lead] == '{') {
        js = cJSON_ParseWithOpts(text, NULL, true);   /* nothing after the object */
        if (!js) {
            const char *at = cJSON_GetErrorPtr();
            snprintf(err, sizeof err, "invalid JSON at byte %ld",
                     at && at >= text && at <= text + len ? (long)(at - text) + 1 : 0L);
            bad = err;
        } else if (!cJSON_IsObject(js)) {
            bad = "expected a JSON object";
        } else {
            bad = parse_fields(js, &q, err, sizeof err);
        }
    } else {
        q.prompt = text;
    }
    job *j = NULL;
    bool quit = false;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (!bad) {
        rvl_sched_request rq;
        if (!(j = calloc(1, sizeof *j)) || !(j->id = q.id ? strdup(q.id) : strdup(idbuf))) {
            bad = "out of memory";
        } else {
            j->B = B;
            j->seq = seq;
            j->line = line;
            int rc = make_request(B, &q, j, &ids, &n_ids, &rq);
            if (rc == 0) {
                int64_t id = submit_wait(B, &rq);
                if (id > 0)
                    j = NULL;   /* the scheduler's now: on_done frees it */
                else if (id != RVL_EINTR)
                    rc = (int)id;
                else
                    quit = true;   /* interrupted, or stdout failed: no line */
            }
            if (rc < 0) {
                snprintf(err, sizeof err, "%s", rvl_errmsg());
                bad = err;
            }
        }
    }
    if (bad && !quit)
        error_line(B, seq, q.id ? q.id : idbuf, line, bad);
    if (j)
        job_free(j);
    free(ids);
    free(q.id);
    if (q.own_stops)
        free(q.stops);
    cJSON_Delete(js);
}

/* ====================================================================
 * The command
 * ==================================================================== */

int run_batch(const char *cmd, const run_batch_opts *o)
{
    batch B = {.cmd = cmd, .o = o, .t0 = now_ms()};
    reader rd = {.fd = -1, .limit = rvl_input_limit()};
    pthread_t th;
    bool started = false;
    int status = 0, rc;
    pthread_mutex_init(&B.mu, NULL);
    pthread_cond_init(&B.cv, NULL);
    if (!(B.window = calloc(WINDOW, sizeof *B.window))) {
        status = cli_fail(cmd, rvl_seterr(RVL_ENOMEM, "out of memory"));
        goto out;
    }
    if (!strcmp(o->src, "-")) {
        rd.fd = STDIN_FILENO;
        if (isatty(STDIN_FILENO))
            cli_err(cmd, "reading prompts from standard input, one a line (end with Ctrl-D)");
    } else {   /* a file, or a FIFO or device that streams the prompts */
        struct stat st;
        if ((rd.fd = open(o->src, O_RDONLY | O_CLOEXEC)) < 0 || fstat(rd.fd, &st) < 0) {
            cli_err(cmd, "%s: %s", o->src, strerror(errno));
            status = EXIT_RUNTIME;
            goto out;
        }
        if (S_ISDIR(st.st_mode)) {
            cli_err(cmd, "%s: is a directory, not a file of prompts", o->src);
            status = EXIT_RUNTIME;
            goto out;
        }
    }
    if ((rc = cli_model_open(&B.m, o->model_path, o->expert_budget, (int)o->cp.n_threads)) < 0) {
        status = cli_fail(cmd, rc);
        goto out;
    }
    B.tok = rvl_model_tokenizer(B.m);
    if (rvl_tok_warning(B.tok))
        cli_err(cmd, "warning: %s: %s", o->model_path, rvl_tok_warning(B.tok));
    rvl_chat *chat;
    if (o->chat && (rc = chat_get(&B, &chat)) < 0) {
        status = cli_fail(cmd, rc);
        goto out;
    }
    /* a step takes every running sequence's next token, then prompt chunks
     * up to 512 tokens in all (serve's --batch-size default): with the
     * scheduler's own 32, 32 or more running sequences leave one prompt
     * token a step, and a line that follows a finished one starts late */
    rvl_sched_params sp = {.ctx = o->cp, .n_parallel = o->parallel, .n_queue = 2 * o->parallel,
                           .n_step_tokens = 512};
    if ((rc = rvl_sched_open(&B.s, B.m, &sp)) < 0) {
        status = cli_fail(cmd, rc);
        goto out;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    B.seed_base = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
    B.progress = isatty(STDERR_FILENO);
    if (o->verbose)
        cli_err(cmd, "%s: %u sequences in parallel, prompts from %s%s", o->model_path,
                o->parallel, strcmp(o->src, "-") ? o->src : "standard input",
                o->unordered ? ", written as they finish" : "");
    const double t_start = now_ms();
    if (pthread_create(&th, NULL, runner, B.s) != 0) {
        status = cli_fail(cmd, rvl_seterr(RVL_ENOMEM, "cannot start a thread"));
        goto out;
    }
    started = true;

    char *line = NULL;
    size_t len = 0;
    long line_no = 0;
    while ((rc = read_line(&rd, &B, &line, &len)) == 1)
        do_line(&B, line, len, ++line_no);
    if (rc == RVL_ERANGE) {
        cli_err(cmd, "line %ld: %s", line_no + 1, rvl_errmsg());
        status = EXIT_RUNTIME;
    } else if (rc < 0 && rc != RVL_EINTR) {
        status = cli_fail(cmd, rc);
    }
    /* every promised line made, or a quit */
    pthread_mutex_lock(&B.mu);
    while (B.n_out < B.n_lines && !B.quit && !rvl_interrupted())
        wait_a_while(&B);
    pthread_mutex_unlock(&B.mu);
    rvl_sched_stop(B.s);
    void *rv;
    pthread_join(th, &rv);
    started = false;
    const double t_gen = now_ms() - t_start;
    if (B.progress)
        fputc('\n', stderr);
    if (B.quit && B.write_errno) {
        if (B.write_errno != EPIPE)
            cli_err(cmd, "writing to standard output failed: %s", strerror(B.write_errno));
        status = EXIT_RUNTIME;
    } else if (rvl_interrupted() || (intptr_t)rv == RVL_EINTR) {
        status = EXIT_INTERRUPTED;
    } else if ((intptr_t)rv < 0) {
        status = cli_fail(cmd, (int)(intptr_t)rv);
    } else if (B.n_failed && !status) {
        status = EXIT_RUNTIME;
    }
    if (o->stats)
        fprintf(stderr, "ruvllm %s: batch: %llu prompts (%llu failed), %u in parallel: %llu prompt "
                "tokens, %llu generated in %.1f ms: %.1f generated tokens/s, %.1f tokens/s in all\n",
                cmd, (unsigned long long)B.n_lines, (unsigned long long)B.n_failed, o->parallel,
                (unsigned long long)B.prompt_tokens, (unsigned long long)B.gen_tokens, t_gen,
                t_gen > 0 ? (double)B.gen_tokens * 1e3 / t_gen : 0,
                t_gen > 0 ? (double)(B.gen_tokens + B.prompt_tokens) * 1e3 / t_gen : 0);
out:
    if (started) {   /* not reached: the join above */
        rvl_sched_stop(B.s);
        pthread_join(th, NULL);
    }
    B.quit = true;   /* what close cancels writes nothing */
    rvl_sched_close(B.s);
    for (size_t i = 0; B.window && i < WINDOW; i++)
        free(B.window[i]);
    free(B.window);
    rvl_chat_close(B.chat);
    rvl_model_close(B.m);
    if (rd.fd > STDIN_FILENO)
        close(rd.fd);
    free(rd.buf);
    pthread_mutex_destroy(&B.mu);
    pthread_cond_destroy(&B.cv);
    return status;
}
