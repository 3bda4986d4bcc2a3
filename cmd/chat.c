/*
 * chat.c - ruvllm chat: chat with a model in the terminal or from a script.
 *
 * On a terminal: a readline prompt (history, editing, multi-line input),
 * replies streamed as they are generated, Ctrl-C stops a reply, in-chat
 * /commands. With standard input not a terminal: each line (or NUL-
 * separated record with -0) is one user message, each reply is printed
 * followed by a blank line (or one JSON object per turn with --json).
 *
 * Each turn renders the whole conversation with the chat template,
 * tokenizes it, and decodes only the tokens past the longest common
 * prefix with what the cache already holds (the cache is truncated to
 * that prefix first). So templates that re-render earlier turns
 * differently stay correct, and /undo, /retry and /system need no
 * special cache handling.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat_input.h"
#include "cli.h"
#include "gen.h"

/* ====================================================================
 * Options. Sampling options start as sentinels (NAN, LLONG_MIN) so that
 * what the command line set is known: a loaded session's settings apply
 * to the others only.
 * ==================================================================== */

static const char *opt_model, *opt_system, *opt_session, *opt_chat_template, *opt_render,
                  *opt_seed, *opt_backend;
static cli_kv_opts opt_kv;
static bool opt_shift;
static long long opt_keep = 0;
static long long opt_ctx = 0, opt_threads = 0;
static long long opt_n = LLONG_MIN, opt_top_k = LLONG_MIN, opt_last_n = LLONG_MIN;
static double opt_temp = NAN, opt_top_p = NAN, opt_min_p = NAN, opt_rep = NAN, opt_freq = NAN,
              opt_pres = NAN;
static bool opt_null, opt_json;

static opt_list opt_lora;

static rvl_opt opts[] = {
    OPT_MODEL(opt_model),
    {OPT_STRING, 0, "system", "TEXT", "a system message at the start of the conversation", NULL, &opt_system, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "session", "FILE", "continue the conversation saved in FILE (when it exists) and save it there after each turn", NULL, &opt_session, 0, 0, NULL, COMPL_FILE},
    {OPT_STRING, 0, "chat-template", "NAME|FILE", "a built-in template (chatml, llama2, llama3, mistral-v1, gemma, phi3, zephyr, ...) or a Jinja template file instead of the model's", NULL, &opt_chat_template, 0, 0, NULL, COMPL_FILE},
    {OPT_STRING, 0, "render", "CONV", "print the prompt the template makes of the conversation in CONV (a JSON array of {role, content}) and exit", NULL, &opt_render, 0, 0, NULL, COMPL_FILE},
    {OPT_INT, 'n', "max-tokens", "N", "generate at most N tokens per reply (-1: until the end of the turn)", "-1", &opt_n, -1, 1e9, NULL, COMPL_NONE},
    {OPT_INT, 'c', "ctx-size", "N", "context size in tokens (0: min(4096, the model's))", "0", &opt_ctx, 0, 1048576, NULL, COMPL_NONE},
    {OPT_INT, 't', "threads", "N", "threads (0: one per CPU)", "0", &opt_threads, 0, 256, NULL, COMPL_NONE},
    OPT_BACKEND(opt_backend),
    OPT_SAMPLING(opt_temp, opt_top_k, opt_top_p, opt_min_p, opt_rep, opt_last_n, opt_freq, opt_pres),
    {OPT_STRING, 's', "seed", "N", "random seed: the same seed gives the same replies (default: random)", NULL, &opt_seed, 0, 0, NULL, COMPL_NONE},
    OPT_KV(opt_kv),
    OPT_CONTEXT_SHIFT(opt_shift, opt_keep),
    OPT_LORA(opt_lora),
    {OPT_FLAG, '0', "null", NULL, "with standard input not a terminal: messages are separated by NUL bytes, not newlines", NULL, &opt_null, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 'j', "json", NULL, "print one JSON object per turn instead of streaming the reply", NULL, &opt_json, 0, 0, NULL, COMPL_NONE},
    OPT_END
};

/* The settings /set changes and sessions keep, by option name. */
typedef struct {
    const char *name;
    double *f;          /* OPT_FLOAT */
    long long *i;       /* OPT_INT */
    double def;
    bool given;         /* on the command line */
} setting;

static setting settings[] = {
    {"temp", &opt_temp, NULL, 0.8, false},
    {"top-k", NULL, &opt_top_k, 40, false},
    {"top-p", &opt_top_p, NULL, 0.95, false},
    {"min-p", &opt_min_p, NULL, 0.05, false},
    {"repeat-penalty", &opt_rep, NULL, 1.0, false},
    {"repeat-last-n", NULL, &opt_last_n, 64, false},
    {"frequency-penalty", &opt_freq, NULL, 0, false},
    {"presence-penalty", &opt_pres, NULL, 0, false},
    {"max-tokens", NULL, &opt_n, -1, false},
};
#define N_SETTINGS (sizeof settings / sizeof settings[0])

static uint64_t seed_base;
static bool seed_given;
static bool dirty;          /* changed since the session file was written */

static const rvl_opt *find_opt(const char *name)
{
    for (const rvl_opt *o = opts; o->lng; o++)
        if (strcmp(o->lng, name) == 0)
            return o;
    return NULL;
}

static int parse_seed(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (!*s || *end || errno || s[0] == '-' || s[0] == '+' || s[0] == ' ')
        return -1;
    *v = x;
    return 0;
}

/* Check VALUE for setting NAME against the option table; 0 and set it, or
 * -1 with a message in err. */
static int setting_set(const char *name, const char *value, char *err, size_t cap)
{
    if (strcmp(name, "seed") == 0) {
        uint64_t v;
        if (parse_seed(value, &v) < 0) {
            snprintf(err, cap, "seed: '%s' is not a non-negative integer", value);
            return -1;
        }
        seed_base = v;
        dirty = true;
        return 0;
    }
    for (size_t i = 0; i < N_SETTINGS; i++) {
        if (strcmp(settings[i].name, name) != 0)
            continue;
        const rvl_opt *o = find_opt(name);
        char *end;
        errno = 0;
        if (settings[i].f) {
            double v = strtod(value, &end);
            if (!*value || *end || errno || !isfinite(v)) {
                snprintf(err, cap, "%s: '%s' is not a number", name, value);
                return -1;
            }
            if (v < o->min || v > o->max) {
                snprintf(err, cap, "%s: %g is out of range [%g, %g]", name, v, o->min, o->max);
                return -1;
            }
            *settings[i].f = v;
        } else {
            long long v = strtoll(value, &end, 10);
            if (!*value || *end || errno) {
                snprintf(err, cap, "%s: '%s' is not an integer", name, value);
                return -1;
            }
            if ((double)v < o->min || (double)v > o->max) {
                snprintf(err, cap, "%s: %lld is out of range [%.0f, %.0f]", name, v, o->min, o->max);
                return -1;
            }
            *settings[i].i = v;
        }
        dirty = true;
        return 0;
    }
    const char *cands[N_SETTINGS + 2];
    size_t n = 0;
    for (size_t i = 0; i < N_SETTINGS; i++)
        cands[n++] = settings[i].name;
    cands[n++] = "seed";
    cands[n] = NULL;
    const char *s = cli_suggest(name, cands);
    if (s)
        snprintf(err, cap, "unknown setting '%s'; did you mean '%s'?", name, s);
    else
        snprintf(err, cap, "unknown setting '%s' (/set lists them)", name);
    return -1;
}

static void settings_init(void)
{
    for (size_t i = 0; i < N_SETTINGS; i++) {
        setting *s = &settings[i];
        s->given = s->f ? !isnan(*s->f) : *s->i != LLONG_MIN;
        if (!s->given) {
            if (s->f)
                *s->f = s->def;
            else
                *s->i = (long long)s->def;
        }
    }
}

static void settings_print(FILE *out)
{
    for (size_t i = 0; i < N_SETTINGS; i++) {
        if (settings[i].f)
            fprintf(out, "  %-18s %g\n", settings[i].name, *settings[i].f);
        else
            fprintf(out, "  %-18s %lld\n", settings[i].name, *settings[i].i);
    }
    fprintf(out, "  %-18s %llu\n", "seed", (unsigned long long)seed_base);
}

/* ====================================================================
 * Output: replies on stdout; notices, warnings and errors on stderr.
 * Colors only on a terminal and never with NO_COLOR.
 * ==================================================================== */

static const char *CMD = "chat";
static bool interactive;    /* standard input is a terminal */
static bool color_out, color_err;
static FILE *info;          /* /command output: stdout on a terminal, else stderr */
static bool had_error;      /* a script's message or command failed: exit 1 */

#define C_NOTE "\033[2m"
#define C_WARN "\033[33m"
#define C_OFF "\033[0m"

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs(color_err ? C_NOTE : "", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(color_err ? C_OFF "\n" : "\n", stderr);
}

static void hint(const char *msg)
{
    note("%s", msg);
}

static void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warn(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%sruvllm %s: ", color_err ? C_WARN : "", CMD);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(color_err ? C_OFF "\n" : "\n", stderr);
}

/* An error in a message or a command: reported, and a script exits 1 at
 * the end; the conversation goes on. */
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "ruvllm %s: ", CMD);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    had_error = true;
}

static bool out_failed;

static int out_write(const char *s, size_t n)
{
    if (out_failed)
        return -1;
    if (n && (fwrite(s, 1, n, stdout) != n || fflush(stdout) != 0)) {
        if (errno != EPIPE)
            cli_err(CMD, "writing to standard output failed: %s", strerror(errno));
        out_failed = true;
        return -1;
    }
    return 0;
}

static int emit_stream(void *ud, const char *s, size_t n)
{
    (void)ud;
    return out_write(s, n) < 0 ? rvl_seterr(RVL_EIO, "standard output") : 0;
}

/* ====================================================================
 * The conversation
 * ==================================================================== */

typedef struct {
    char *role, *content;
    bool interrupted;     /* a reply stopped by Ctrl-C */
} msg_t;

static msg_t *conv;
static size_t n_conv, cap_conv;

static int conv_insert(size_t at, const char *role, const char *content, size_t len, bool intr)
{
    if (n_conv == cap_conv) {
        size_t nc = cap_conv ? 2 * cap_conv : 16;
        msg_t *nm = realloc(conv, nc * sizeof *nm);
        if (!nm)
            return -1;
        conv = nm;
        cap_conv = nc;
    }
    char *r = strdup(role), *c = malloc(len + 1);
    if (!r || !c) {
        free(r);
        free(c);
        return -1;
    }
    memcpy(c, content, len);
    c[len] = 0;
    memmove(conv + at + 1, conv + at, (n_conv - at) * sizeof *conv);
    conv[at] = (msg_t){r, c, intr};
    n_conv++;
    dirty = true;
    return 0;
}

static int conv_push(const char *role, const char *content, size_t len, bool intr)
{
    return conv_insert(n_conv, role, content, len, intr);
}

static void conv_remove(size_t at)
{
    free(conv[at].role);
    free(conv[at].content);
    memmove(conv + at, conv + at + 1, (n_conv - at - 1) * sizeof *conv);
    n_conv--;
    dirty = true;
}

static void conv_clear(bool keep_system)
{
    size_t keep = keep_system && n_conv && strcmp(conv[0].role, "system") == 0 ? 1 : 0;
    while (n_conv > keep)
        conv_remove(n_conv - 1);
}

static size_t conv_count(const char *role)
{
    size_t k = 0;
    for (size_t i = 0; i < n_conv; i++)
        k += strcmp(conv[i].role, role) == 0;
    return k;
}

/* Replace, add or (text NULL) remove the leading system message. */
static int conv_set_system(const char *text)
{
    bool has = n_conv && strcmp(conv[0].role, "system") == 0;
    if (has)
        conv_remove(0);
    return text ? conv_insert(0, "system", text, strlen(text), false) : 0;
}

/* ====================================================================
 * The engine: model, context, template, and the token ids in the cache.
 * ==================================================================== */

static rvl_model *model;
static rvl_ctx *ctx;
static rvl_lora *lora;
static rvl_chat *tmpl;
static const rvl_tokenizer *tok;
static char model_path[4096];
static uint32_t n_ctx;
static int32_t *cached;         /* ids in the cache: cached[0 .. rvl_ctx_pos) */
static bool add_bos;            /* add BOS when the template did not write it */
static bool ctx_warned;         /* the 90% warning was given */
static uint64_t retry_salt;     /* /retry draws another reply */

static struct {
    size_t turns, prompt_tokens, gen_tokens;
    size_t prompt_all, prompt_reused; /* prompt tokens of every turn; of them reused */
    double prompt_ms, gen_ms;
} total;
static struct {
    bool valid;
    size_t n_prompt, n_reused, n_gen;
    double prompt_ms, first_ms, gen_ms;
    size_t n_decoded;
    gen_finish finish;
} last;

static uint32_t cache_n(void) { return ctx ? rvl_ctx_pos(ctx) : 0; }

/* Of the coldest tier the formats use (the steady state of a long
 * context; the newest page and tiered's hot tokens take more). */
static size_t kv_bytes_per_token(void)
{
    return (size_t)(rvl_ctx_kv_token_bytes(ctx, 2) + 0.5);
}

static rvl_chat_msg *conv_view(void)
{
    rvl_chat_msg *m = malloc((n_conv + 1) * sizeof *m);
    if (m)
        for (size_t i = 0; i < n_conv; i++)
            m[i] = (rvl_chat_msg){conv[i].role, conv[i].content};
    return m;
}

/* The conversation as the template renders it, as token ids. owned. */
static int render_msgs(const rvl_chat_msg *m, size_t n_m, bool gen_prompt, int32_t **ids,
                       size_t *n)
{
    char *text = NULL, *w = NULL;
    int rc = rvl_chat_format(tmpl, m, n_m, gen_prompt, &text, &w);
    if (w) {
        static bool told;   /* a fallback would say the same every turn */
        if (!told)
            warn("%s", w);
        told = true;
        free(w);
    }
    if (rc < 0)
        return rc;
    size_t len = strlen(text);
    bool bos = add_bos;
    if (bos) {
        size_t bl = 0;
        const char *bt = rvl_tok_text(tok, rvl_tok_bos(tok), &bl);
        if (bt && bl && len >= bl && memcmp(text, bt, bl) == 0)
            bos = false;
    }
    /* add_special adds BOS (and EOS when the model asks for it, which
     * chat must not): prepend BOS by hand */
    int32_t *body = NULL;
    size_t nb = 0;
    rc = rvl_tok_encode_alloc(tok, text, len, false, true, &body, &nb);
    free(text);
    if (rc < 0)
        return rc;
    if (bos) {
        int32_t *all = malloc((nb + 1) * sizeof *all);
        if (!all) {
            free(body);
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        }
        all[0] = rvl_tok_bos(tok);
        memcpy(all + 1, body, nb * sizeof *body);
        free(body);
        body = all;
        nb++;
    }
    *ids = body;
    *n = nb;
    return 0;
}

static int render_ids(bool gen_prompt, int32_t **ids, size_t *n)
{
    rvl_chat_msg *m = conv_view();
    if (!m)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    int rc = render_msgs(m, n_conv, gen_prompt, ids, n);
    free(m);
    return rc;
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

/* Drop what the cache holds past the conversation as it renders now
 * (after /undo, /reset, /system): the next turn then decodes only what
 * is new, and /stats tells the truth. */
static void cache_trim(void)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (!n_conv) {
        rvl_ctx_reset(ctx);
        return;
    }
    if (render_ids(false, &ids, &n) < 0)
        return;
    size_t k = common_prefix(cached, cache_n(), ids, n);
    if (k < cache_n())
        rvl_ctx_truncate(ctx, (uint32_t)k);
    free(ids);
}

static void ctx_check_warning(void)
{
    uint32_t pos = cache_n(), at = n_ctx - n_ctx / 10;
    if (pos < at) {
        ctx_warned = false;
    } else if (!ctx_warned) {
        ctx_warned = true;
        warn("the context is %u%% full (%u of %u tokens): from the next turn on the oldest "
             "messages are dropped to make room; /reset starts over, -c sets a larger context",
             (unsigned)((uint64_t)pos * 100 / n_ctx), pos, n_ctx);
    }
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void json_turn(const char *user, const gen_result *r, size_t n_prompt, size_t n_reused,
                      double prompt_ms)
{
    rvl_jw w;
    rvl_jw_init(&w, stdout, false);
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "user");
    rvl_jw_str(&w, user);
    rvl_jw_key(&w, "reply");
    rvl_jw_strn(&w, r->text.p ? r->text.p : "", r->text.n);
    rvl_jw_key(&w, "finish_reason");
    rvl_jw_str(&w, gen_finish_name(r->finish));
    rvl_jw_key(&w, "tokens");
    rvl_jw_arr(&w);
    for (size_t i = 0; i < r->n_ids; i++)
        rvl_jw_i64(&w, r->ids[i]);
    rvl_jw_arr_end(&w);
    rvl_jw_key(&w, "prompt_tokens");
    rvl_jw_u64(&w, n_prompt);
    rvl_jw_key(&w, "cached_tokens");
    rvl_jw_u64(&w, n_reused);
    rvl_jw_key(&w, "context_used");
    rvl_jw_u64(&w, cache_n());
    rvl_jw_key(&w, "context_size");
    rvl_jw_u64(&w, n_ctx);
    rvl_jw_key(&w, "timings");
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "prompt_ms");
    rvl_jw_f64(&w, prompt_ms);
    rvl_jw_key(&w, "prompt_tokens_per_s");
    rvl_jw_f64(&w, prompt_ms > 0 ? (double)(n_prompt - n_reused) * 1e3 / prompt_ms : 0);
    rvl_jw_key(&w, "first_token_ms");
    rvl_jw_f64(&w, prompt_ms + r->first_ms);
    rvl_jw_key(&w, "generation_ms");
    rvl_jw_f64(&w, r->gen_ms);
    rvl_jw_key(&w, "generation_tokens_per_s");
    rvl_jw_f64(&w, r->gen_ms > 0 && r->n_decoded ? (double)r->n_decoded * 1e3 / r->gen_ms : 0);
    rvl_jw_obj_end(&w);
    rvl_jw_obj_end(&w);
    fputc('\n', stdout);
    if (fflush(stdout) != 0 && !out_failed) {
        if (errno != EPIPE)
            cli_err(CMD, "writing to standard output failed: %s", strerror(errno));
        out_failed = true;
    }
}

/* Render the conversation (ending with a user message), make room in the
 * context if needed, decode what the cache lacks and generate the reply,
 * which joins the conversation. `user` is that message, for --json.
 * Returns 0 (also after Ctrl-C: see the conversation), or -1 on a fatal
 * error (writing the output failed, a decode error). */
static int reply_turn(const char *user)
{
    int32_t *ids = NULL;
    size_t n = 0, dropped = 0;
    int rc;

    /* the prompt, with room left for a reply: drop the oldest exchanges
     * (never a leading system message, never the new message) */
    size_t reserve = opt_n > 0 ? (size_t)opt_n : n_ctx / 8;
    if (reserve > n_ctx / 2)
        reserve = n_ctx / 2;
    size_t first = n_conv && strcmp(conv[0].role, "system") == 0 ? 1 : 0;
    for (;;) {
        if ((rc = render_ids(true, &ids, &n)) < 0) {
            fail("%s", rvl_errmsg());
            conv_remove(n_conv - 1);
            return 0;
        }
        if (n + reserve <= n_ctx)
            break;
        if (!dropped) {
            /* the new message alone (after the system message) must fit:
             * otherwise nothing is dropped for it */
            rvl_chat_msg alone[2];
            size_t k = 0, na = 0;
            int32_t *ida = NULL;
            if (first)
                alone[k++] = (rvl_chat_msg){conv[0].role, conv[0].content};
            alone[k++] = (rvl_chat_msg){conv[n_conv - 1].role, conv[n_conv - 1].content};
            rc = render_msgs(alone, k, true, &ida, &na);
            free(ida);
            if (rc == 0 && na >= n_ctx) {
                fail("the message needs %zu tokens with the template: more than the context "
                     "holds (%u; see -c)", na, n_ctx);
                free(ids);
                conv_remove(n_conv - 1);
                return 0;
            }
        }
        if (first + 1 >= n_conv) {
            if (n < n_ctx)
                break;   /* no room to spare, but it fits */
            fail("the message needs %zu tokens with the template: more than the context "
                 "holds (%u; see -c)", n, n_ctx);
            free(ids);
            conv_remove(n_conv - 1);
            return 0;
        }
        /* one exchange: a user message and the replies after it */
        conv_remove(first);
        dropped++;
        while (first + 1 < n_conv && strcmp(conv[first].role, "user") != 0) {
            conv_remove(first);
            dropped++;
        }
        free(ids);
        ids = NULL;
    }
    if (n == 0) {
        fail("the template renders the conversation as nothing");
        conv_remove(n_conv - 1);
        return 0;
    }
    if (dropped)
        warn("context: dropped the %zu oldest message%s to make room (-c sets a larger context)",
             dropped, dropped == 1 ? "" : "s");

    /* decode only what the cache lacks (at least one token: the logits):
     * its longest prefix in common, or pages of it dropped recently (a
     * system prompt after /clear; lib/engine/kvcache.c's prefix reuse) */
    size_t reuse = rvl_ctx_reuse(ctx, ids, (uint32_t)n);
    memcpy(cached, ids, n * sizeof *ids);
    total.prompt_all += n;
    total.prompt_reused += reuse;
    const float *logits = NULL;
    double t0 = gen_now_ms();
    rc = rvl_decode(ctx, ids + reuse, (uint32_t)(n - reuse), &logits);
    double prompt_ms = gen_now_ms() - t0;
    total.prompt_tokens += rvl_ctx_pos(ctx) > reuse ? rvl_ctx_pos(ctx) - reuse : 0;
    total.prompt_ms += prompt_ms;
    if (rc == RVL_EINTR || (rc == 0 && rvl_interrupted())) {
        /* the cache keeps the chunks that completed; the message is not sent */
        free(ids);
        conv_remove(n_conv - 1);
        if (interactive)
            note("[interrupted]");
        else
            warn("interrupted before the reply began");
        return 0;
    }
    if (rc < 0) {
        free(ids);
        cli_fail(CMD, rc);
        return -1;
    }

    /* the reply: its own seed per turn, so that a restored session
     * continues as the uninterrupted run would */
    rvl_sampler_params sp;
    rvl_sampler_defaults(&sp);
    sp.temp = (float)opt_temp;
    sp.top_k = (int32_t)opt_top_k;
    sp.top_p = (float)opt_top_p;
    sp.min_p = (float)opt_min_p;
    sp.repeat_penalty = (float)opt_rep;
    sp.repeat_last_n = (int32_t)opt_last_n;
    sp.freq_penalty = (float)opt_freq;
    sp.presence_penalty = (float)opt_pres;
    sp.seed = mix64(seed_base ^ mix64(conv_count("assistant") + 1) ^ mix64(retry_salt << 32));
    rvl_sampler *smp = NULL;
    if ((rc = rvl_sampler_open(&smp, &sp, rvl_model_hparams(model)->n_vocab)) < 0) {
        free(ids);
        cli_fail(CMD, rc);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        rvl_sampler_accept(smp, ids[i]);

    const char *const *stops = rvl_chat_stops(tmpl);
    gen_params gp = {
        .ctx = ctx, .smp = smp, .tok = tok, .stop_tokens = stops, .stop_strs = stops,
        .max_tokens = opt_n < 0 ? SIZE_MAX : (size_t)opt_n, .special = false,
        .emit = opt_json ? NULL : emit_stream,
        .context_shift = opt_shift,
        .shift_keep = opt_keep < 0 ? (uint32_t)n : (uint32_t)opt_keep,
    };
    gen_result r;
    rc = gen_reply(&gp, logits, &r);
    rvl_sampler_close(smp);
    uint32_t pos = rvl_ctx_pos(ctx);
    if (r.n_shifted)
        rvl_ctx_reset(ctx); /* shifted: the next turn renders the conversation afresh */
    else if (pos > n)
        memcpy(cached + n, r.ids, (pos - n) * sizeof *cached);
    dirty = true;
    total.turns++;
    total.gen_tokens += r.n_ids;
    total.gen_ms += r.gen_ms;
    last.valid = true;
    last.n_prompt = n;
    last.n_reused = reuse;
    last.n_gen = r.n_ids;
    last.n_decoded = r.n_decoded;
    last.prompt_ms = prompt_ms;
    last.first_ms = prompt_ms + r.first_ms;
    last.gen_ms = r.gen_ms;
    last.finish = r.finish;
    free(ids);
    if (rc < 0) {
        if (!out_failed)
            cli_fail(CMD, rc);
        gen_result_free(&r);
        return -1;
    }

    bool intr = r.finish == GEN_INTERRUPTED;
    if (intr && r.text.n == 0 && r.n_ids == 0) {
        conv_remove(n_conv - 1);   /* nothing of the reply yet: not sent */
    } else if (conv_push("assistant", r.text.p, r.text.n, intr) < 0) {
        gen_result_free(&r);
        cli_err(CMD, "out of memory");
        return -1;
    }
    if (opt_json) {
        json_turn(user, &r, n, reuse, prompt_ms);
    } else {
        bool nl = r.text.n && r.text.p[r.text.n - 1] == '\n';
        if (intr && interactive) {
            const char *mk = color_out ? " " C_NOTE "[interrupted]" C_OFF "\n" : " [interrupted]\n";
            out_write(mk + nl, strlen(mk + nl));
        } else if (!nl) {
            out_write("\n", 1);
        }
        out_write("\n", 1);
    }
    if (intr && !interactive)
        warn("interrupted: the reply stops here");
    if (r.finish == GEN_CONTEXT) {
        ctx_warned = true;   /* this says more than the 90% warning */
        warn("the context is full (%u tokens): the reply stops here; the next turn drops the "
             "oldest messages (/reset starts over, -c sets a larger context)", n_ctx);
    }
    gen_result_free(&r);
    ctx_check_warning();
    return out_failed ? -1 : 0;
}

/* reply_turn with a copy of the message: the conversation may drop it. */
static int reply(const char *user_msg)
{
    char *user = strdup(user_msg);
    if (!user) {
        cli_err(CMD, "out of memory");
        return -1;
    }
    int rc = reply_turn(user);
    free(user);
    return rc;
}

/* ====================================================================
 * Sessions: the cache and its ids (lib/engine/session.c) with the conversation
 * and the sampling settings as the extra JSON:
 *   {"format": "ruvllm-chat", "version": 1,
 *    "messages": [{"role", "content", "interrupted"?}...],
 *    "settings": {"temp": 0.8, ..., "seed": "123"}}
 * ==================================================================== */

static char *session_json(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    rvl_jw w;
    rvl_jw_init(&w, f, false);
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "format");
    rvl_jw_str(&w, "ruvllm-chat");
    rvl_jw_key(&w, "version");
    rvl_jw_u64(&w, 1);
    rvl_jw_key(&w, "messages");
    rvl_jw_arr(&w);
    for (size_t i = 0; i < n_conv; i++) {
        rvl_jw_obj(&w);
        rvl_jw_key(&w, "role");
        rvl_jw_str(&w, conv[i].role);
        rvl_jw_key(&w, "content");
        rvl_jw_str(&w, conv[i].content);
        if (conv[i].interrupted) {
            rvl_jw_key(&w, "interrupted");
            rvl_jw_bool(&w, true);
        }
        rvl_jw_obj_end(&w);
    }
    rvl_jw_arr_end(&w);
    rvl_jw_key(&w, "settings");
    rvl_jw_obj(&w);
    for (size_t i = 0; i < N_SETTINGS; i++) {
        rvl_jw_key(&w, settings[i].name);
        if (settings[i].f)
            rvl_jw_f64(&w, *settings[i].f);
        else
            rvl_jw_i64(&w, *settings[i].i);
    }
    char sb[32];
    snprintf(sb, sizeof sb, "%llu", (unsigned long long)seed_base);
    rvl_jw_key(&w, "seed");
    rvl_jw_str(&w, sb);
    rvl_jw_obj_end(&w);
    rvl_jw_obj_end(&w);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static int session_save(const char *path)
{
    char *extra = session_json();
    if (!extra)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    int rc = rvl_session_save(ctx, path, cached, cache_n(), extra);
    free(extra);
    return rc;
}

/* The extra JSON of a session into the conversation and (for settings
 * not given on the command line) the settings. On error nothing changes. */
static int session_apply(const char *path, const char *extra)
{
    cJSON *j = extra ? cJSON_Parse(extra) : NULL;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(j, "settings");
    int rc = 0;
    if (!j || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "ruvllm-chat") != 0 ||
        !cJSON_IsArray(msgs)) {
        rc = rvl_seterr(RVL_EFORMAT, "%s: not a chat session (no conversation in it)", path);
        goto out;
    }
    size_t i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsString(r) || !cJSON_IsString(c)) {
            rc = rvl_seterr(RVL_EFORMAT, "%s: message %zu has no role or content", path, i);
            goto out;
        }
    }
    /* settings are checked as /set checks them, then applied */
    char err[256];
    double saved_f[N_SETTINGS];
    long long saved_i[N_SETTINGS];
    uint64_t saved_seed = seed_base;
    for (size_t k = 0; k < N_SETTINGS; k++) {
        saved_f[k] = settings[k].f ? *settings[k].f : 0;
        saved_i[k] = settings[k].i ? *settings[k].i : 0;
    }
    for (const cJSON *s = set ? set->child : NULL; s; s = s->next) {
        char val[64];
        if (!s->string)
            continue;
        if (strcmp(s->string, "seed") == 0 && seed_given)
            continue;
        bool skip = false;
        for (size_t k = 0; k < N_SETTINGS; k++)
            if (strcmp(settings[k].name, s->string) == 0 && settings[k].given)
                skip = true;
        if (skip)
            continue;
        if (cJSON_IsString(s))
            snprintf(val, sizeof val, "%s", s->valuestring);
        else if (cJSON_IsNumber(s))
            snprintf(val, sizeof val, "%.17g", s->valuedouble);
        else
            snprintf(val, sizeof val, "?");
        if (setting_set(s->string, val, err, sizeof err) < 0) {
            for (size_t k = 0; k < N_SETTINGS; k++) {
                if (settings[k].f)
                    *settings[k].f = saved_f[k];
                else
                    *settings[k].i = saved_i[k];
            }
            seed_base = saved_seed;
            rc = rvl_seterr(RVL_EFORMAT, "%s: settings: %s", path, err);
            goto out;
        }
    }
    conv_clear(false);
    for (const cJSON *m = msgs->child; m; m = m->next) {
        const char *c = cJSON_GetObjectItemCaseSensitive(m, "content")->valuestring;
        if (conv_push(cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring, c, strlen(c),
                      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "interrupted"))) < 0) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            goto out;
        }
    }
out:
    cJSON_Delete(j);
    return rc;
}

static int session_load(const char *path)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char *extra = NULL;
    int rc = rvl_session_load(ctx, path, &ids, &n, &extra);
    if (rc == 0 && n > n_ctx)
        rc = rvl_seterr(RVL_EFORMAT, "%s: %zu tokens in a context of %u", path, n, n_ctx);
    if (rc == 0 && (rc = session_apply(path, extra)) == 0) {
        memcpy(cached, ids, n * sizeof *ids);
        retry_salt = 0;
        if (opt_system && conv_set_system(opt_system) < 0)
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    if (rc < 0)
        rvl_ctx_reset(ctx);   /* the cache may not match the conversation any more */
    free(ids);
    free(extra);
    return rc;
}

/* ====================================================================
 * In-chat commands
 * ==================================================================== */

typedef enum { CMD_OK, CMD_EXIT, CMD_FATAL } cmd_status;

typedef struct {
    const char *name, *args, *help;
    cmd_status (*fn)(const char *arg);
} chat_cmd;

static cmd_status cmd_help(const char *arg);

static cmd_status cmd_reset(const char *arg)
{
    (void)arg;
    conv_clear(true);
    rvl_ctx_reset(ctx);
    retry_salt = 0;
    ctx_warned = false;
    fprintf(info, "(a new conversation%s)\n",
            n_conv ? "; the system message stays" : "");
    return CMD_OK;
}

static cmd_status cmd_system(const char *arg)
{
    if (!*arg) {
        bool has = n_conv && strcmp(conv[0].role, "system") == 0;
        fprintf(info, has ? "system: %s\n" : "(no system message: the template's default applies)\n",
                has ? conv[0].content : "");
        return CMD_OK;
    }
    if (conv_set_system(arg) < 0) {
        cli_err(CMD, "out of memory");
        return CMD_FATAL;
    }
    cache_trim();
    fprintf(info, "(system message set)\n");
    return CMD_OK;
}

static cmd_status cmd_save(const char *arg)
{
    if (!*arg) {
        fail("/save needs a file name");
        return CMD_OK;
    }
    if (session_save(arg) < 0)
        fail("/save: %s", rvl_errmsg());
    else
        fprintf(info, "(saved %zu messages and %u cached tokens to %s)\n", n_conv, cache_n(), arg);
    return CMD_OK;
}

static cmd_status cmd_load(const char *arg)
{
    if (!*arg) {
        fail("/load needs a file name");
        return CMD_OK;
    }
    if (session_load(arg) < 0)
        fail("/load: %s", rvl_errmsg());
    else
        fprintf(info, "(loaded %zu messages and %u cached tokens from %s)\n", n_conv, cache_n(), arg);
    ctx_warned = false;
    return CMD_OK;
}

static cmd_status cmd_undo(const char *arg)
{
    (void)arg;
    size_t end = n_conv;
    while (end && strcmp(conv[end - 1].role, "user") != 0 && strcmp(conv[end - 1].role, "system") != 0)
        end--;
    if (!end || strcmp(conv[end - 1].role, "user") != 0) {
        fail("/undo: nothing to undo");
        return CMD_OK;
    }
    size_t k = n_conv - (end - 1);
    while (n_conv >= end)
        conv_remove(n_conv - 1);
    cache_trim();
    retry_salt = 0;
    fprintf(info, "(removed the last exchange: %zu message%s)\n", k, k == 1 ? "" : "s");
    return CMD_OK;
}

static cmd_status cmd_retry(const char *arg)
{
    (void)arg;
    if (!n_conv || strcmp(conv[n_conv - 1].role, "assistant") != 0 || n_conv < 2 ||
        strcmp(conv[n_conv - 2].role, "user") != 0) {
        fail("/retry: no reply to regenerate");
        return CMD_OK;
    }
    conv_remove(n_conv - 1);
    retry_salt++;
    return reply(conv[n_conv - 1].content) < 0 ? CMD_FATAL : CMD_OK;
}

static cmd_status cmd_stats(const char *arg)
{
    (void)arg;
    uint32_t pos = cache_n();
    size_t per = kv_bytes_per_token();
    fprintf(info, "messages   %zu (%zu exchanges)\n", n_conv, conv_count("assistant"));
    fprintf(info, "context    %u of %u tokens used (%.1f%%)\n", pos, n_ctx, 100.0 * pos / n_ctx);
    fprintf(info, "KV cache   %.2f MiB used of %.2f MiB (%s, %zu bytes per token)\n",
            (double)pos * per / 1048576.0, (double)n_ctx * per / 1048576.0,
            cli_kv_describe(&opt_kv), per);
    fprintf(info, "backend    %s (device %s)\n", rvl_ctx_backend(ctx), rvl_ctx_device(ctx));
    if (last.valid) {
        size_t np = last.n_prompt - last.n_reused;
        fprintf(info, "last turn  prompt %zu tokens (%zu reused from the cache, %zu decoded in "
                      "%.1f ms, %.1f tok/s), first token %.1f ms, reply %zu tokens in %.1f ms "
                      "(%.1f tok/s), finish: %s\n",
                last.n_prompt, last.n_reused, np, last.prompt_ms,
                last.prompt_ms > 0 ? np * 1e3 / last.prompt_ms : 0, last.first_ms, last.n_gen,
                last.gen_ms, last.gen_ms > 0 && last.n_decoded ? last.n_decoded * 1e3 / last.gen_ms : 0,
                gen_finish_name(last.finish));
    }
    fprintf(info, "session    %zu turns, %zu prompt tokens decoded (%.1f tok/s), %zu tokens "
                  "generated (%.1f tok/s)\n",
            total.turns, total.prompt_tokens,
            total.prompt_ms > 0 ? total.prompt_tokens * 1e3 / total.prompt_ms : 0, total.gen_tokens,
            total.gen_ms > 0 ? total.gen_tokens * 1e3 / total.gen_ms : 0);
    fprintf(info, "prompt tokens reused: %zu of %zu\n", total.prompt_reused, total.prompt_all);
    return CMD_OK;
}

static cmd_status cmd_set(const char *arg)
{
    if (!*arg) {
        settings_print(info);
        return CMD_OK;
    }
    char name[64];
    size_t nl = strcspn(arg, " \t");
    const char *val = arg + nl;
    val += strspn(val, " \t");
    snprintf(name, sizeof name, "%.*s", (int)(nl < 63 ? nl : 63), arg);
    char err[256];
    if (!*val) {
        /* name alone: its value, or the unknown-name message */
        if (setting_set(name, "", err, sizeof err) < 0 && strstr(err, "unknown")) {
            fail("/set: %s", err);
            return CMD_OK;
        }
        fail("/set: %s needs a value", name);
        return CMD_OK;
    }
    if (setting_set(name, val, err, sizeof err) < 0)
        fail("/set: %s", err);
    else
        fprintf(info, "(%s = %s)\n", name, val);
    return CMD_OK;
}

static cmd_status cmd_exit(const char *arg)
{
    (void)arg;
    return CMD_EXIT;
}

static const chat_cmd commands[] = {
    {"help", "", "show the commands", cmd_help},
    {"reset", "", "start a new conversation (the system message stays)", cmd_reset},
    {"system", "[TEXT]", "set the system message (without TEXT: show it)", cmd_system},
    {"save", "FILE", "save the conversation with its cache to FILE", cmd_save},
    {"load", "FILE", "continue the conversation saved in FILE", cmd_load},
    {"undo", "", "drop the last exchange (your message and the reply)", cmd_undo},
    {"retry", "", "generate the last reply again", cmd_retry},
    {"stats", "", "tokens, context used, speeds, KV cache memory", cmd_stats},
    {"set", "[NAME VALUE]", "change a sampling setting (without arguments: list them)", cmd_set},
    {"exit", "", "leave (also Ctrl-D)", cmd_exit},
    {"quit", "", "leave", cmd_exit},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static cmd_status cmd_help(const char *arg)
{
    (void)arg;
    for (size_t i = 0; i < N_COMMANDS; i++) {
        char lab[64];
        snprintf(lab, sizeof lab, "/%s %s", commands[i].name, commands[i].args);
        fprintf(info, "  %-20s %s\n", lab, commands[i].help);
    }
    fprintf(info, "  %-20s %s\n", "//TEXT", "send a message that starts with '/'");
    fprintf(info, "Settings for /set:");
    for (size_t i = 0; i < N_SETTINGS; i++)
        fprintf(info, " %s,", settings[i].name);
    fprintf(info, " seed.\n");
    if (interactive)
        fprintf(info, "Multi-line messages: end a line with \\ to continue it, or write the "
                      "message between lines of \"\"\".\nCtrl-C stops a reply; Ctrl-D leaves.\n");
    return CMD_OK;
}

/* A line starting with '/': run it. */
static cmd_status run_command(const char *line)
{
    const char *p = line + 1;
    size_t nl = strcspn(p, " \t\n");
    const char *arg = p + nl;
    arg += strspn(arg, " \t\n");
    /* trailing blanks are not part of an argument */
    char *a = strdup(arg);
    if (!a) {
        cli_err(CMD, "out of memory");
        return CMD_FATAL;
    }
    size_t al = strlen(a);
    while (al && (a[al - 1] == ' ' || a[al - 1] == '\t' || a[al - 1] == '\n' || a[al - 1] == '\r'))
        a[--al] = 0;
    cmd_status st = CMD_OK;
    const chat_cmd *c = NULL;
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strlen(commands[i].name) == nl && strncmp(commands[i].name, p, nl) == 0)
            c = &commands[i];
    if (c) {
        st = c->fn(a);
    } else {
        char word[64];
        const char *cands[N_COMMANDS + 1];
        for (size_t i = 0; i < N_COMMANDS; i++)
            cands[i] = commands[i].name;
        cands[N_COMMANDS] = NULL;
        snprintf(word, sizeof word, "%.*s", (int)(nl < 63 ? nl : 63), p);
        const char *s = cli_suggest(word, cands);
        if (s)
            fail("unknown command '/%s'; did you mean '/%s'? (/help lists the commands)", word, s);
        else
            fail("unknown command '/%s' (/help lists the commands; //TEXT sends a message "
                 "that starts with '/')", word);
    }
    free(a);
    fflush(info);
    return st;
}

static bool blank(const char *s)
{
    return s[strspn(s, " \t\r\n")] == 0;
}

/* ====================================================================
 * --render: the prompt for a conversation, needing only the vocabulary
 * ==================================================================== */

static int do_render(void)
{
    rvl_file *f = NULL;
    rvl_tokenizer *t = NULL;
    rvl_chat *c = NULL;
    rvl_chat_msg *msgs = NULL, *all = NULL;
    size_t n = 0;
    char *out = NULL, *w = NULL;
    int rc;
    if ((rc = rvl_chat_conv_load(opt_render, &msgs, &n)) < 0 ||
        (rc = rvl_file_open(&f, model_path)) < 0 || (rc = rvl_tok_open(&t, f)) < 0)
        goto out;
    rc = rvl_chat_open_model(&c, f, t, opt_chat_template, &w);
    if (w) {
        cli_err(CMD, "%s", w);
        free(w);
        w = NULL;
    }
    if (rc < 0)
        goto out;
    /* --system comes first unless the conversation has its own */
    bool sys = opt_system && !(n && strcmp(msgs[0].role, "system") == 0);
    all = malloc((n + 1) * sizeof *all);
    if (!all) {
        rc = rvl_seterr(RVL_ENOMEM, "out of memory");
        goto out;
    }
    if (sys)
        all[0] = (rvl_chat_msg){"system", opt_system};
    memcpy(all + sys, msgs, n * sizeof *msgs);
    /* the generation prompt follows anything but a reply */
    bool gp = !n || strcmp(msgs[n - 1].role, "assistant") != 0;
    rc = rvl_chat_format(c, all, n + sys, gp, &out, &w);
    if (w) {
        cli_err(CMD, "%s", w);
        free(w);
    }
    if (rc == 0 && (fwrite(out, 1, strlen(out), stdout) != strlen(out) || fflush(stdout) != 0)) {
        cli_err(CMD, "writing to standard output failed: %s", strerror(errno));
        rc = 1;
    }
out:;
    int st = rc < 0 ? cli_fail(CMD, rc) : rc;
    free(out);
    free(all);
    free(msgs);
    rvl_chat_close(c);
    rvl_tok_close(t);
    rvl_file_close(f);
    return st;
}

/* ====================================================================
 * main
 * ==================================================================== */

static int chat_main(rvl_cmd *cmd, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    CMD = cmd->name;
    int status = 0, rc;
    char *w = NULL;
    const char *nc = getenv("NO_COLOR");
    bool no_color = nc && *nc;
    interactive = isatty(STDIN_FILENO);
    color_out = !no_color && isatty(STDOUT_FILENO);
    color_err = !no_color && isatty(STDERR_FILENO);
    info = interactive ? stdout : stderr;

    settings_init();
    if (opt_seed) {
        if (parse_seed(opt_seed, &seed_base) < 0)
            cli_usage(CMD, "--seed: '%s' is not a non-negative integer", opt_seed);
        seed_given = true;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed_base = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
    }
    if (opt_render && opt_session)
        cli_usage(CMD, "--render prints a prompt and exits: it takes no --session");
    if (opt_lora.n && opt_session)
        cli_usage(CMD, "--session cannot be combined with --lora (a session file does not record "
                  "the adapters its cache was computed with)");
    if ((rc = rvl_model_path(opt_model, model_path, sizeof model_path)) < 0)
        return cli_fail(CMD, rc);
    if (opt_render)
        return do_render();

    if ((rc = rvl_model_open(&model, model_path)) < 0)
        return cli_fail(CMD, rc);
    tok = rvl_model_tokenizer(model);
    rvl_ctx_params cp = {.n_ctx = (uint32_t)opt_ctx, .n_threads = (uint32_t)opt_threads,
                         .backend = opt_backend};
    cli_kv_params(&opt_kv, &cp);
    if ((rc = rvl_ctx_open(&ctx, model, &cp)) == 0 &&
        (status = cli_lora_attach(CMD, &opt_lora, model, ctx, &lora)) != 0)
        goto out;
    if (rc == 0 && ((rc = cli_backend_refuse(ctx, opt_session ? "--session" : NULL)) < 0 ||
                    (rc = cli_backend_refuse(ctx, opt_shift ? "--context-shift" : NULL)) < 0)) {
        status = cli_fail(CMD, rc);
        goto out;
    }
    if (rc < 0 ||
        (rc = rvl_chat_open_model(&tmpl, rvl_model_file(model), tok, opt_chat_template, &w)) < 0) {
        if (w) {
            cli_err(CMD, "%s", w);
            free(w);
        }
        status = cli_fail(CMD, rc);
        goto out;
    }
    if (w) {
        warn("%s", w);
        free(w);
    }
    n_ctx = rvl_ctx_n_ctx(ctx);
    add_bos = rvl_tok_add_bos(tok) && rvl_tok_bos(tok) >= 0;
    cached = malloc(((size_t)n_ctx + 1) * sizeof *cached);
    if (!cached) {
        cli_err(CMD, "out of memory");
        status = EXIT_RUNTIME;
        goto out;
    }
    if (opt_system && conv_set_system(opt_system) < 0) {
        cli_err(CMD, "out of memory");
        status = EXIT_RUNTIME;
        goto out;
    }
    if (opt_session && access(opt_session, F_OK) == 0) {
        if (session_load(opt_session) < 0) {
            status = cli_fail(CMD, RVL_EFORMAT);
            goto out;
        }
        if (interactive)
            note("session %s: %zu messages, %u tokens in the cache", opt_session, n_conv,
                 cache_n());
    }
    dirty = false;
    if (interactive) {
        const char *base = strrchr(model_path, '/');
        note("ruvllm chat: %s, %s, context %u tokens. /help for commands, Ctrl-D or /exit to leave.",
             base ? base + 1 : model_path, rvl_chat_describe(tmpl), n_ctx);
        static const char *cmd_names[N_COMMANDS + 1], *set_names[N_SETTINGS + 2];
        for (size_t i = 0; i < N_COMMANDS; i++)
            cmd_names[i] = commands[i].name;
        for (size_t i = 0; i < N_SETTINGS; i++)
            set_names[i] = settings[i].name;
        set_names[N_SETTINGS] = "seed";
        chat_input_open(&(chat_input_cfg){.color = color_out, .commands = cmd_names,
                                          .settings = set_names, .hint = hint});
    }

    for (;;) {
        char *msg = NULL;
        if (interactive)
            rvl_interrupt_clear();
        int r = interactive ? chat_input_message(&msg) : chat_input_record(stdin, opt_null, &msg);
        if (r == 0) {
            if (rvl_interrupted())   /* SIGTERM at the prompt */
                status = EXIT_INTERRUPTED;
            break;
        }
        if (r < 0) {
            if (interactive)
                continue;
            status = rvl_interrupted() ? EXIT_INTERRUPTED : EXIT_RUNTIME;
            break;
        }
        cmd_status st = CMD_OK;
        if (blank(msg)) {
            /* nothing to send */
        } else if (msg[0] == '/' && msg[1] != '/') {
            st = run_command(msg);
        } else {
            const char *text = msg[0] == '/' ? msg + 1 : msg;
            if (conv_push("user", text, strlen(text), false) < 0) {
                cli_err(CMD, "out of memory");
                st = CMD_FATAL;
            } else if (reply(text) < 0) {
                st = CMD_FATAL;
            }
        }
        free(msg);
        if (st == CMD_FATAL) {
            status = EXIT_RUNTIME;
            break;
        }
        if (opt_session && dirty) {
            if (session_save(opt_session) < 0)
                fail("--session: %s", rvl_errmsg());
            else
                dirty = false;
        }
        if (st == CMD_EXIT)
            break;
        if (!interactive && rvl_interrupted()) {
            status = EXIT_INTERRUPTED;
            break;
        }
    }
    if (opt_session && dirty && ctx && session_save(opt_session) < 0) {
        cli_err(CMD, "--session: %s", rvl_errmsg());
        status = EXIT_RUNTIME;
    }
    if (status == 0 && had_error && !interactive)
        status = EXIT_RUNTIME;
out:
    if (interactive)
        chat_input_close();
    conv_clear(false);
    free(conv);
    free(cached);
    rvl_chat_close(tmpl);
    rvl_ctx_close(ctx);
    rvl_lora_close(lora);
    free(opt_lora.items);
    rvl_model_close(model);
    return status;
}

rvl_cmd cmd_chat_desc = {
    .synopsis = "[-m MODEL] [--system TEXT] [--session FILE] [options]",
    .description =
        "Chat with a model, in the terminal or from a script. Each message and reply goes "
        "through the model's own chat template (or --chat-template), and generation stops at "
        "the template's end of turn.\n"
        "\n"
        "On a terminal, messages are typed at a readline prompt (>>>) with the usual editing "
        "keys and a history kept in ${XDG_STATE_HOME:-$HOME/.local/state}/ruvllm/history. A "
        "line ending with a backslash continues on the next line; a message can also be "
        "written between two lines of \"\"\". The reply is streamed as it is generated. Ctrl-C "
        "during a reply stops it and returns to the prompt (what was generated stays in the "
        "conversation, marked as interrupted; a second Ctrl-C before the reply stops quits); "
        "Ctrl-C at the prompt clears the line; Ctrl-D or /exit leaves.\n"
        "\n"
        "Lines starting with / are commands: /help, /reset, /system TEXT, /save FILE, /load "
        "FILE, /undo, /retry, /stats, /set NAME VALUE, /exit (see CHAT COMMANDS). //TEXT "
        "sends a message that starts with /.\n"
        "\n"
        "--backend metal runs the model on an Apple GPU (builds made with make METAL=1 on "
        "macOS; other builds refuse it); there --session, /save, /load, --context-shift, "
        "--lora and the quantized --kv-type values are refused.\n"
        "\n"
        "When standard input is not a terminal, each line (each NUL-terminated record with "
        "-0) is one user message or command and each reply is printed followed by a blank "
        "line; command output and messages go to standard error. With --json one JSON object "
        "is printed per turn instead, with the keys user, reply, finish_reason (stop, length, "
        "context, interrupted), tokens, prompt_tokens, cached_tokens, context_used, "
        "context_size and timings. The exit status is 1 when a message or command failed, "
        "130 after Ctrl-C.\n"
        "\n"
        "Each turn renders the whole conversation and decodes only the tokens the cache does "
        "not hold yet, so earlier turns are not processed again. At 90% of the context a "
        "warning is printed; when a new message does not fit with room for a reply, the "
        "oldest exchanges (never the system message) are dropped, with a message; a reply "
        "that fills the context stops there, with a message.\n"
        "\n"
        "--session FILE continues the conversation saved in FILE, when it exists, and saves "
        "it there after each turn: the messages, the sampling settings and the KV cache, so "
        "nothing is processed again. Each reply is sampled with a seed derived from --seed "
        "and the turn's number, so a conversation continued from a session gives the same "
        "replies as one that was never interrupted.\n"
        "\n"
        "--render CONV prints the prompt the template makes of the conversation in the JSON "
        "file CONV, followed by the generation prompt unless the last message is the "
        "assistant's, and exits; it needs only the model's vocabulary.",
    .man_extra =
        ".SH CHAT COMMANDS\n"
        ".TP\n.B /help\nList the commands.\n"
        ".TP\n.B /reset\nStart a new conversation; the system message stays.\n"
        ".TP\n.BI /system \" TEXT\"\nSet the system message; without TEXT, show it.\n"
        ".TP\n.BI /save \" FILE\"\nSave the conversation, the settings and the KV cache to FILE "
        "(a session file; see \\fBruvllm\\-kv\\-inspect\\fR(1)).\n"
        ".TP\n.BI /load \" FILE\"\nContinue the conversation saved in FILE.\n"
        ".TP\n.B /undo\nDrop the last exchange: the last message and its reply.\n"
        ".TP\n.B /retry\nGenerate the last reply again (with another seed).\n"
        ".TP\n.B /stats\nMessages, context used, KV cache memory, the last turn's prompt and "
        "generation speeds and time to first token, and totals (with the prompt tokens reused from "
        "the cache: kept, or restored from pages a /clear or reset dropped).\n"
        ".TP\n.BI /set \" NAME VALUE\"\nChange a sampling setting: temp, top\\-k, top\\-p, "
        "min\\-p, repeat\\-penalty, repeat\\-last\\-n, frequency\\-penalty, presence\\-penalty, "
        "max\\-tokens, seed; values are checked as the options' are. Without arguments, list "
        "the settings.\n"
        ".TP\n.BR /exit \", \" /quit\nLeave (as Ctrl\\-D does).\n"
        ".SH FILES\n"
        ".TP\n.I ${XDG_STATE_HOME:\\-$HOME/.local/state}/ruvllm/history\n"
        "The prompt's history (mode 0600), written only when standard input is a terminal.\n",
    .examples = "ruvllm chat\tchat with the default model\n"
                "ruvllm chat --system \"Answer in one sentence.\" --session notes.rvls\tkeep the conversation across runs\n"
                "printf 'Hi!\\nWhat is 2+2?\\n' | ruvllm chat --temp 0\ttwo messages from a script\n"
                "ruvllm chat --render conv.json\tthe prompt the template makes of a conversation",
    .opts = opts,
    .pos_compl = COMPL_NONE,
    .min_pos = 0,
    .max_pos = 0,
    .main = chat_main,
};
