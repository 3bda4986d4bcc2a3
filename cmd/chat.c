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
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat_input.h"
#include "cli.h"
#include "gen.h"

/* ====================================================================
 * Options: set by cli_parse, read-only afterwards (what changes during
 * the chat lives in chat_state). The sampling options and --max-tokens
 * start as sentinels (NAN, LLONG_MIN) so that what the command line set
 * is known: a loaded session's settings apply to the others only.
 * ==================================================================== */

static const char *opt_model, *opt_system, *opt_session, *opt_chat_template, *opt_render,
                  *opt_seed, *opt_backend, *opt_reasoning,
                  *opt_effort;
static cli_kv_opts opt_kv;
static bool opt_shift;
static long long opt_keep = 0;
static long long opt_ctx = 0, opt_threads = 0;
static double opt_expert_budget = 0;
static long long opt_n = LLONG_MIN;
static cli_sample_opts opt_sample = {
    .temp = NAN, .top_k = LLONG_MIN, .top_p = NAN, .min_p = NAN, .repeat_penalty = NAN,
    .repeat_last_n = LLONG_MIN, .freq_penalty = NAN, .presence_penalty = NAN,
};
static bool opt_null, opt_json;

static opt_list opt_lora;

static rvl_opt opts[] = {
    OPT_MODEL(opt_model),
    {OPT_STRING, 0, "system", "TEXT", "a system message at the start of the conversation", NULL, &opt_system, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "session", "FILE", "continue the conversation saved in FILE (when it exists) and save it there after each turn", NULL, &opt_session, 0, 0, NULL, COMPL_FILE},
    {OPT_STRING, 0, "chat-template", "NAME|FILE", "a built-in template (chatml, qwen3, llama2, llama3, mistral-v1, gemma, phi3, zephyr, ...) or a Jinja template file instead of the model's", NULL, &opt_chat_template, 0, 0, NULL, COMPL_FILE},
    OPT_REASONING(opt_reasoning),
    OPT_REASONING_EFFORT(opt_effort),
    {OPT_STRING, 0, "render", "CONV", "print the prompt the template makes of the conversation in CONV (a JSON array of {role, content}) and exit", NULL, &opt_render, 0, 0, NULL, COMPL_FILE},
    {OPT_INT, 'n', "max-tokens", "N", "generate at most N tokens per reply (-1: until the end of the turn)", "-1", &opt_n, -1, 1e9, NULL, COMPL_NONE},
    {OPT_INT, 'c', "ctx-size", "N", "context size in tokens (0: min(4096, the model's))", "0", &opt_ctx, 0, 1048576, NULL, COMPL_NONE},
    {OPT_INT, 't', "threads", "N", "threads (0: one per CPU)", "0", &opt_threads, 0, 256, NULL, COMPL_NONE},
    OPT_BACKEND(opt_backend),
    OPT_SAMPLE(opt_sample),
    {OPT_STRING, 's', "seed", "N", "random seed: the same seed gives the same replies (default: random)", NULL, &opt_seed, 0, 0, NULL, COMPL_NONE},
    OPT_KV(opt_kv),
    OPT_EXPERT_BUDGET(opt_expert_budget),
    OPT_CONTEXT_SHIFT(opt_shift, opt_keep),
    OPT_LORA(opt_lora),
    {OPT_FLAG, '0', "null", NULL, "with standard input not a terminal: messages are separated by NUL bytes, not newlines", NULL, &opt_null, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 'j', "json", NULL, "print one JSON object per turn instead of streaming the reply", NULL, &opt_json, 0, 0, NULL, COMPL_NONE},
    OPT_END
};

/* llama-cli's spellings for a conversation (the shared ones: opt.c). */
static const cli_alias aliases[] = {
    {"-cnv|--conversation|-i|--interactive|-if|--interactive-first", ALIAS_ACCEPT, NULL, 0, NULL, NULL},
    {"-st|--single-turn", ALIAS_REFUSE, NULL, 0, NULL, "for one reply use 'ruvllm run --chat PROMPT'"},
    {"-no-cnv|--no-conversation", ALIAS_REFUSE, NULL, 0, NULL,
     "to complete a prompt as raw text use 'ruvllm run PROMPT'"},
    {"-p|--prompt", ALIAS_REFUSE, NULL, 1, NULL,
     "chat reads its messages from the terminal or standard input (echo 'TEXT' | ruvllm chat); "
     "for one reply use 'ruvllm run --chat TEXT', for a system message --system TEXT"},
    ALIAS_END
};

/* ====================================================================
 * The chat's state
 * ==================================================================== */

/* What /set changes and sessions keep, besides the seed. */
typedef struct {
    cli_sample_opts sample;
    long long max_tokens;       /* -1: until the end of the turn */
} chat_settings;

/* The settings by option name (the option table says the kind and the
 * range: OPT_FLOAT is a double, OPT_INT a long long). */
static const struct {
    const char *name;
    size_t off;                 /* in chat_settings */
} settings[] = {
    {"temp", offsetof(chat_settings, sample.temp)},
    {"top-k", offsetof(chat_settings, sample.top_k)},
    {"top-p", offsetof(chat_settings, sample.top_p)},
    {"min-p", offsetof(chat_settings, sample.min_p)},
    {"repeat-penalty", offsetof(chat_settings, sample.repeat_penalty)},
    {"repeat-last-n", offsetof(chat_settings, sample.repeat_last_n)},
    {"frequency-penalty", offsetof(chat_settings, sample.freq_penalty)},
    {"presence-penalty", offsetof(chat_settings, sample.presence_penalty)},
    {"max-tokens", offsetof(chat_settings, max_tokens)},
};
#define N_SETTINGS (sizeof settings / sizeof settings[0])

typedef struct {
    char *role, *content;
    bool interrupted;     /* a reply stopped by Ctrl-C */
} msg_t;

/* For /stats: every turn's, and the last one's. */
typedef struct {
    size_t turns, prompt_tokens, gen_tokens;
    size_t prompt_all, prompt_reused; /* prompt tokens of every turn; of them reused */
    double prompt_ms, gen_ms;
} chat_totals;
typedef struct {
    bool valid;
    size_t n_prompt, n_reused, n_gen;
    double prompt_ms, first_ms, gen_ms;
    size_t n_decoded;
    gen_finish finish;
} chat_last_turn;

typedef struct {
    const char *cmd;            /* the command's name, for messages */

    /* output: replies on stdout; notices, warnings and errors on stderr */
    bool interactive;           /* standard input is a terminal */
    bool color_out, color_err;  /* colors: only on a terminal and never with NO_COLOR */
    FILE *info;                 /* /command output: stdout on a terminal, else stderr */
    bool had_error;             /* a script's message or command failed: exit 1 */
    bool out_failed;            /* writing standard output failed: stop */
    bool template_warned;       /* the template's warning was given (it would repeat each turn) */
    rvl_think think;            /* a thinking model's reply: reasoning shown dimmed */
    rvl_think think0;           /* the splitter as the last rendered prompt left it (it may
                                   have opened <think> or a harmony message itself) */

    /* the settings */
    chat_settings set;
    bool given[N_SETTINGS];     /* on the command line: a session does not change them */
    uint64_t seed;              /* each reply's seed derives from it and the turn's number */
    bool seed_given;
    bool dirty;                 /* changed since the session file was written */
    int session_lock;           /* rvl_session_lock of --session, or -1 */

    /* the conversation */
    msg_t *conv;
    size_t n_conv, cap_conv;

    /* the engine: model, context, template, and the token ids in the cache */
    char model_path[4096];
    rvl_model *model;
    rvl_ctx *ctx;
    rvl_lora *lora;
    rvl_chat *tmpl;
    const rvl_tokenizer *tok;   /* the model's */
    uint32_t n_ctx;
    int32_t *cached;            /* ids in the cache: cached[0 .. rvl_ctx_pos) */
    bool add_bos;               /* add BOS when the template did not write it */
    bool ctx_warned;            /* the 90% warning was given */
    uint64_t retry_salt;        /* /retry draws another reply */

    chat_totals total;
    chat_last_turn last;
} chat_state;

/* ====================================================================
 * Settings
 * ==================================================================== */

static const rvl_opt *find_opt(const char *name)
{
    for (const rvl_opt *o = opts; o->lng; o++)
        if (strcmp(o->lng, name) == 0)
            return o;
    return NULL;
}

static bool setting_is_float(size_t i)
{
    return find_opt(settings[i].name)->kind == OPT_FLOAT;
}

static double *setting_f(chat_settings *s, size_t i)
{
    return (double *)((char *)s + settings[i].off);
}

static long long *setting_i(chat_settings *s, size_t i)
{
    return (long long *)((char *)s + settings[i].off);
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
static int setting_set(chat_state *st, const char *name, const char *value, char *err, size_t cap)
{
    if (strcmp(name, "seed") == 0) {
        uint64_t v;
        if (parse_seed(value, &v) < 0) {
            snprintf(err, cap, "seed: '%s' is not a non-negative integer", value);
            return -1;
        }
        st->seed = v;
        st->dirty = true;
        return 0;
    }
    for (size_t i = 0; i < N_SETTINGS; i++) {
        if (strcmp(settings[i].name, name) != 0)
            continue;
        const rvl_opt *o = find_opt(name);
        char *end;
        errno = 0;
        if (setting_is_float(i)) {
            double v = strtod(value, &end);
            if (!*value || *end || errno || !isfinite(v)) {
                snprintf(err, cap, "%s: '%s' is not a number", name, value);
                return -1;
            }
            if (v < o->min || v > o->max) {
                snprintf(err, cap, "%s: %g is out of range [%g, %g]", name, v, o->min, o->max);
                return -1;
            }
            *setting_f(&st->set, i) = v;
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
            *setting_i(&st->set, i) = v;
        }
        st->dirty = true;
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

/* The settings from the options; those not given take the defaults. */
static void settings_init(chat_state *st)
{
    chat_settings def = {.sample = CLI_SAMPLE_DEFAULTS, .max_tokens = -1};
    st->set = (chat_settings){.sample = opt_sample, .max_tokens = opt_n};
    for (size_t i = 0; i < N_SETTINGS; i++) {
        if (setting_is_float(i)) {
            st->given[i] = !isnan(*setting_f(&st->set, i));
            if (!st->given[i])
                *setting_f(&st->set, i) = *setting_f(&def, i);
        } else {
            st->given[i] = *setting_i(&st->set, i) != LLONG_MIN;
            if (!st->given[i])
                *setting_i(&st->set, i) = *setting_i(&def, i);
        }
    }
}

static void settings_print(chat_state *st, FILE *out)
{
    for (size_t i = 0; i < N_SETTINGS; i++) {
        if (setting_is_float(i))
            fprintf(out, "  %-18s %g\n", settings[i].name, *setting_f(&st->set, i));
        else
            fprintf(out, "  %-18s %lld\n", settings[i].name, *setting_i(&st->set, i));
    }
    fprintf(out, "  %-18s %llu\n", "seed", (unsigned long long)st->seed);
}

/* ====================================================================
 * Output
 * ==================================================================== */

#define C_NOTE "\033[2m"
#define C_WARN "\033[33m"
#define C_OFF "\033[0m"

static void note(chat_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(chat_state *st, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs(st->color_err ? C_NOTE : "", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(st->color_err ? C_OFF "\n" : "\n", stderr);
}

/* chat_input's hint: ud is the chat_state. */
static void hint(void *ud, const char *msg)
{
    note(ud, "%s", msg);
}

static void warn(chat_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(chat_state *st, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%sruvllm %s: ", st->color_err ? C_WARN : "", st->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(st->color_err ? C_OFF "\n" : "\n", stderr);
}

/* An error in a message or a command: reported, and a script exits 1 at
 * the end; the conversation goes on. */
static void fail(chat_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(chat_state *st, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "ruvllm %s: ", st->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    st->had_error = true;
}

static int out_write(chat_state *st, const char *s, size_t n)
{
    if (st->out_failed)
        return -1;
    if (n && (fwrite(s, 1, n, stdout) != n || fflush(stdout) != 0)) {
        if (errno != EPIPE)
            cli_err(st->cmd, "writing to standard output failed: %s", strerror(errno));
        st->out_failed = true;
        return -1;
    }
    return 0;
}

/* A thinking model's reasoning and its tags: dimmed (SGR 2) on a
 * terminal, as they are otherwise. */
static int think_out(void *ud, rvl_think_part part, const char *s, size_t n)
{
    chat_state *st = ud;
    bool dim = part != RVL_THINK_ANSWER && st->color_out;
    if ((dim && out_write(st, C_NOTE, strlen(C_NOTE)) < 0) || out_write(st, s, n) < 0 ||
        (dim && out_write(st, C_OFF, strlen(C_OFF)) < 0))
        return rvl_seterr(RVL_EIO, "standard output");
    return 0;
}

static int emit_stream(void *ud, const char *s, size_t n)
{
    chat_state *st = ud;
    if (rvl_chat_has_reasoning(st->tmpl))
        return rvl_think_push(&st->think, s, n, think_out, st);
    return out_write(ud, s, n) < 0 ? rvl_seterr(RVL_EIO, "standard output") : 0;
}

/* ====================================================================
 * The conversation
 * ==================================================================== */

static int conv_insert(chat_state *st, size_t at, const char *role, const char *content, size_t len,
                       bool intr)
{
    if (st->n_conv == st->cap_conv) {
        size_t nc = st->cap_conv ? 2 * st->cap_conv : 16;
        msg_t *nm = realloc(st->conv, nc * sizeof *nm);
        if (!nm)
            return -1;
        st->conv = nm;
        st->cap_conv = nc;
    }
    char *r = strdup(role), *c = malloc(len + 1);
    if (!r || !c) {
        free(r);
        free(c);
        return -1;
    }
    memcpy(c, content, len);
    c[len] = 0;
    memmove(st->conv + at + 1, st->conv + at, (st->n_conv - at) * sizeof *st->conv);
    st->conv[at] = (msg_t){r, c, intr};
    st->n_conv++;
    st->dirty = true;
    return 0;
}

static int conv_push(chat_state *st, const char *role, const char *content, size_t len, bool intr)
{
    return conv_insert(st, st->n_conv, role, content, len, intr);
}

static void conv_remove(chat_state *st, size_t at)
{
    free(st->conv[at].role);
    free(st->conv[at].content);
    memmove(st->conv + at, st->conv + at + 1, (st->n_conv - at - 1) * sizeof *st->conv);
    st->n_conv--;
    st->dirty = true;
}

static void conv_clear(chat_state *st, bool keep_system)
{
    size_t keep = keep_system && st->n_conv && strcmp(st->conv[0].role, "system") == 0 ? 1 : 0;
    while (st->n_conv > keep)
        conv_remove(st, st->n_conv - 1);
}

static size_t conv_count(chat_state *st, const char *role)
{
    size_t k = 0;
    for (size_t i = 0; i < st->n_conv; i++)
        k += strcmp(st->conv[i].role, role) == 0;
    return k;
}

/* Replace, add or (text NULL) remove the leading system message. */
static int conv_set_system(chat_state *st, const char *text)
{
    bool has = st->n_conv && strcmp(st->conv[0].role, "system") == 0;
    if (has)
        conv_remove(st, 0);
    return text ? conv_insert(st, 0, "system", text, strlen(text), false) : 0;
}

/* ====================================================================
 * The engine: rendering the conversation, the cache, the turn
 * ==================================================================== */

static uint32_t cache_n(chat_state *st) { return st->ctx ? rvl_ctx_pos(st->ctx) : 0; }

/* Of the coldest tier the formats use (the steady state of a long
 * context; the newest page and tiered's hot tokens take more). */
static size_t kv_bytes_per_token(chat_state *st)
{
    return (size_t)(rvl_ctx_kv_token_bytes(st->ctx, 2) + 0.5);
}

static rvl_chat_msg *conv_view(chat_state *st)
{
    rvl_chat_msg *m = malloc((st->n_conv + 1) * sizeof *m);
    if (m)
        for (size_t i = 0; i < st->n_conv; i++)
            m[i] = (rvl_chat_msg){st->conv[i].role, st->conv[i].content};
    return m;
}

/* The conversation as the template renders it, as token ids. owned. */
static int render_msgs(chat_state *st, const rvl_chat_msg *m, size_t n_m, bool gen_prompt,
                       int32_t **ids, size_t *n)
{
    char *text = NULL, *w = NULL;
    int rc = rvl_chat_format(st->tmpl, m, n_m, gen_prompt, &text, &w);
    if (w) {
        if (!st->template_warned)
            warn(st, "%s", w);
        st->template_warned = true;
        free(w);
    }
    if (rc < 0)
        return rc;
    size_t len = strlen(text);
    rvl_think_init_prompt(&st->think0, rvl_chat_think_format(st->tmpl), text, len);
    bool bos = st->add_bos;
    if (bos) {
        size_t bl = 0;
        const char *bt = rvl_tok_text(st->tok, rvl_tok_bos(st->tok), &bl);
        if (bt && bl && len >= bl && memcmp(text, bt, bl) == 0)
            bos = false;
    }
    /* add_special adds BOS (and EOS when the model asks for it, which
     * chat must not): prepend BOS by hand */
    int32_t *body = NULL;
    size_t nb = 0;
    rc = rvl_tok_encode_alloc(st->tok, text, len, false, true, &body, &nb);
    free(text);
    if (rc < 0)
        return rc;
    if (bos) {
        int32_t *all = malloc((nb + 1) * sizeof *all);
        if (!all) {
            free(body);
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        }
        all[0] = rvl_tok_bos(st->tok);
        memcpy(all + 1, body, nb * sizeof *body);
        free(body);
        body = all;
        nb++;
    }
    *ids = body;
    *n = nb;
    return 0;
}

static int render_ids(chat_state *st, bool gen_prompt, int32_t **ids, size_t *n)
{
    rvl_chat_msg *m = conv_view(st);
    if (!m)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    int rc = render_msgs(st, m, st->n_conv, gen_prompt, ids, n);
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
static void cache_trim(chat_state *st)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (!st->n_conv) {
        rvl_ctx_reset(st->ctx);
        return;
    }
    if (render_ids(st, false, &ids, &n) < 0)
        return;
    size_t k = common_prefix(st->cached, cache_n(st), ids, n);
    if (k < cache_n(st))
        rvl_ctx_truncate(st->ctx, (uint32_t)k);
    free(ids);
}

static void ctx_check_warning(chat_state *st)
{
    uint32_t pos = cache_n(st), at = st->n_ctx - st->n_ctx / 10;
    if (pos < at) {
        st->ctx_warned = false;
    } else if (!st->ctx_warned) {
        st->ctx_warned = true;
        warn(st, "the context is %u%% full (%u of %u tokens): from the next turn on the oldest "
             "messages are dropped to make room; /reset starts over, -c sets a larger context",
             (unsigned)((uint64_t)pos * 100 / st->n_ctx), pos, st->n_ctx);
    }
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* --json: the turn's object (its numbers are st->last's). */
static void json_turn(chat_state *st, const char *user, const gen_result *r)
{
    const chat_last_turn *t = &st->last;
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
    rvl_jw_u64(&w, t->n_prompt);
    rvl_jw_key(&w, "cached_tokens");
    rvl_jw_u64(&w, t->n_reused);
    rvl_jw_key(&w, "context_used");
    rvl_jw_u64(&w, cache_n(st));
    rvl_jw_key(&w, "context_size");
    rvl_jw_u64(&w, st->n_ctx);
    rvl_jw_key(&w, "timings");
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "prompt_ms");
    rvl_jw_f64(&w, t->prompt_ms);
    rvl_jw_key(&w, "prompt_tokens_per_s");
    rvl_jw_f64(&w, t->prompt_ms > 0 ? (double)(t->n_prompt - t->n_reused) * 1e3 / t->prompt_ms : 0);
    rvl_jw_key(&w, "first_token_ms");
    rvl_jw_f64(&w, t->first_ms);
    rvl_jw_key(&w, "generation_ms");
    rvl_jw_f64(&w, r->gen_ms);
    rvl_jw_key(&w, "generation_tokens_per_s");
    rvl_jw_f64(&w, r->gen_ms > 0 && r->n_decoded ? (double)r->n_decoded * 1e3 / r->gen_ms : 0);
    rvl_jw_obj_end(&w);
    rvl_jw_obj_end(&w);
    fputc('\n', stdout);
    if (fflush(stdout) != 0 && !st->out_failed) {
        if (errno != EPIPE)
            cli_err(st->cmd, "writing to standard output failed: %s", strerror(errno));
        st->out_failed = true;
    }
}

/* The conversation, ending with the new user message, as the prompt's
 * token ids with room left for a reply: the oldest exchanges are dropped
 * as needed (never a leading system message, never the new message).
 * 0 and *ids (owned), or -1 when the message cannot be sent: reported,
 * and taken out of the conversation. */
static int render_fitting(chat_state *st, int32_t **ids_out, size_t *n_out)
{
    int32_t *ids = NULL;
    size_t n = 0, dropped = 0;
    size_t reserve = st->set.max_tokens > 0 ? (size_t)st->set.max_tokens : st->n_ctx / 8;
    if (reserve > st->n_ctx / 2)
        reserve = st->n_ctx / 2;
    size_t first = st->n_conv && strcmp(st->conv[0].role, "system") == 0 ? 1 : 0;
    for (;;) {
        if (render_ids(st, true, &ids, &n) < 0) {
            fail(st, "%s", rvl_errmsg());
            conv_remove(st, st->n_conv - 1);
            return -1;
        }
        if (n + reserve <= st->n_ctx)
            break;
        if (!dropped) {
            /* the new message alone (after the system message) must fit:
             * otherwise nothing is dropped for it */
            const msg_t *msg = &st->conv[st->n_conv - 1];
            rvl_chat_msg alone[2];
            size_t k = 0, na = 0;
            int32_t *ida = NULL;
            if (first)
                alone[k++] = (rvl_chat_msg){st->conv[0].role, st->conv[0].content};
            alone[k++] = (rvl_chat_msg){msg->role, msg->content};
            int rc = render_msgs(st, alone, k, true, &ida, &na);
            free(ida);
            if (rc == 0 && na >= st->n_ctx) {
                fail(st, "the message needs %zu tokens with the template: more than the context "
                     "holds (%u; see -c)", na, st->n_ctx);
                free(ids);
                conv_remove(st, st->n_conv - 1);
                return -1;
            }
        }
        if (first + 1 >= st->n_conv) {
            if (n < st->n_ctx)
                break;   /* no room to spare, but it fits */
            fail(st, "the message needs %zu tokens with the template: more than the context "
                 "holds (%u; see -c)", n, st->n_ctx);
            free(ids);
            conv_remove(st, st->n_conv - 1);
            return -1;
        }
        /* one exchange: a user message and the replies after it */
        conv_remove(st, first);
        dropped++;
        while (first + 1 < st->n_conv && strcmp(st->conv[first].role, "user") != 0) {
            conv_remove(st, first);
            dropped++;
        }
        free(ids);
        ids = NULL;
    }
    if (n == 0) {
        fail(st, "the template renders the conversation as nothing");
        free(ids);
        conv_remove(st, st->n_conv - 1);
        return -1;
    }
    if (dropped)
        warn(st, "context: dropped the %zu oldest message%s to make room (-c sets a larger "
             "context)", dropped, dropped == 1 ? "" : "s");
    *ids_out = ids;
    *n_out = n;
    return 0;
}

/* Decode only what the cache lacks of the prompt ids[0 .. turn->n_prompt)
 * (at least one token: the logits): its longest prefix in common, or
 * pages of it dropped recently (a system prompt after /clear;
 * lib/engine/kvcache.c's prefix reuse). Sets turn's n_reused and
 * prompt_ms. */
static int decode_prompt(chat_state *st, const int32_t *ids, chat_last_turn *turn,
                         const float **logits)
{
    size_t n = turn->n_prompt, reuse = rvl_ctx_reuse(st->ctx, ids, (uint32_t)n);
    memcpy(st->cached, ids, n * sizeof *ids);
    st->total.prompt_all += n;
    st->total.prompt_reused += reuse;
    double t0 = gen_now_ms();
    int rc = rvl_decode(st->ctx, ids + reuse, (uint32_t)(n - reuse), logits);
    turn->n_reused = reuse;
    turn->prompt_ms = gen_now_ms() - t0;
    uint32_t pos = rvl_ctx_pos(st->ctx);
    st->total.prompt_tokens += pos > reuse ? pos - reuse : 0;
    st->total.prompt_ms += turn->prompt_ms;
    return rc;
}

/* Generate the reply to the decoded prompt ids[0 .. turn->n_prompt) into
 * *r (to free with gen_result_free, also on failure): streamed unless
 * --json, with its own seed per turn, so that a restored session
 * continues as the uninterrupted run would. The cache's ids are kept for
 * the next turn, the turn's numbers (completing *turn) for /stats. */
static int generate_reply(chat_state *st, const int32_t *ids, const float *logits,
                          chat_last_turn *turn, gen_result *r)
{
    size_t n = turn->n_prompt;
    *r = (gen_result){0};
    rvl_sampler_params sp;
    uint64_t n_turn = conv_count(st, "assistant") + 1;
    cli_sample_params(&st->set.sample,
                      mix64(st->seed ^ mix64(n_turn) ^ mix64(st->retry_salt << 32)), &sp);
    rvl_sampler *smp = NULL;
    int rc = rvl_sampler_open(&smp, &sp, rvl_model_hparams(st->model)->n_vocab);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        rvl_sampler_accept(smp, ids[i]);

    const char *const *stops = rvl_chat_stops(st->tmpl);
    gen_params gp = {
        .ctx = st->ctx, .smp = smp, .tok = st->tok, .stop_tokens = stops, .stop_strs = stops,
        .max_tokens = st->set.max_tokens < 0 ? SIZE_MAX : (size_t)st->set.max_tokens,
        .special = false,   /* harmony's markers render anyway: user-defined (tok.c) */
        .emit = opt_json ? NULL : emit_stream, .ud = st,
        .context_shift = opt_shift,
        .shift_keep = opt_keep < 0 ? (uint32_t)n : (uint32_t)opt_keep,
    };
    st->think = st->think0;
    rc = gen_reply(&gp, logits, r);
    if (rc == 0 && !opt_json && rvl_chat_has_reasoning(st->tmpl))
        rc = rvl_think_flush(&st->think, think_out, st);
    rvl_sampler_close(smp);
    uint32_t pos = rvl_ctx_pos(st->ctx);
    if (r->n_shifted)
        rvl_ctx_reset(st->ctx); /* shifted: the next turn renders the conversation afresh */
    else if (pos > n)
        memcpy(st->cached + n, r->ids, (pos - n) * sizeof *st->cached);
    st->dirty = true;
    st->total.turns++;
    st->total.gen_tokens += r->n_ids;
    st->total.gen_ms += r->gen_ms;
    turn->valid = true;
    turn->n_gen = r->n_ids;
    turn->n_decoded = r->n_decoded;
    turn->first_ms = turn->prompt_ms + r->first_ms;
    turn->gen_ms = r->gen_ms;
    turn->finish = r->finish;
    st->last = *turn;
    return rc;
}

static int keep_answer(void *ud, rvl_think_part part, const char *s, size_t n)
{
    return part == RVL_THINK_ANSWER && rvl_buf_add(ud, s, n) < 0 ? RVL_ENOMEM : 0;
}

/* What of the reply joins the conversation: all of it, but of a harmony
 * reply (gpt-oss) only the answer: its template refuses channel tags in a
 * message's content and leaves earlier turns' analysis out itself. */
static int reply_content(chat_state *st, const gen_result *r, rvl_buf *b)
{
    if (rvl_chat_think_format(st->tmpl) != RVL_THINK_HARMONY)
        return rvl_buf_add(b, r->text.p ? r->text.p : "", r->text.n) < 0 ? -1 : 0;
    rvl_think th = st->think0;
    if (rvl_think_push(&th, r->text.p ? r->text.p : "", r->text.n, keep_answer, b) < 0 ||
        rvl_think_flush(&th, keep_answer, b) < 0)
        return -1;
    return 0;
}

/* The reply joins the conversation and ends its output (a blank line, or
 * the turn's JSON object); a reply cut short says so. 0, or -1 when out
 * of memory or writing the output failed. */
static int finish_reply(chat_state *st, const char *user, const gen_result *r)
{
    bool intr = r->finish == GEN_INTERRUPTED;
    rvl_buf content = {0};
    if (intr && r->text.n == 0 && r->n_ids == 0) {
        conv_remove(st, st->n_conv - 1);   /* nothing of the reply yet: not sent */
    } else if (reply_content(st, r, &content) < 0 ||
               conv_push(st, "assistant", content.p ? content.p : "", content.n, intr) < 0) {
        rvl_buf_free(&content);
        cli_err(st->cmd, "out of memory");
        return -1;
    }
    rvl_buf_free(&content);
    if (opt_json) {
        json_turn(st, user, r);
    } else {
        bool nl = r->text.n && r->text.p[r->text.n - 1] == '\n';
        if (intr && st->interactive) {
            const char *mk = st->color_out ? " " C_NOTE "[interrupted]" C_OFF "\n"
                                           : " [interrupted]\n";
            out_write(st, mk + nl, strlen(mk + nl));
        } else if (!nl) {
            out_write(st, "\n", 1);
        }
        out_write(st, "\n", 1);
    }
    if (intr && !st->interactive)
        warn(st, "interrupted: the reply stops here");
    if (r->finish == GEN_CONTEXT) {
        st->ctx_warned = true;   /* this says more than the 90% warning */
        warn(st, "the context is full (%u tokens): the reply stops here; the next turn drops the "
             "oldest messages (/reset starts over, -c sets a larger context)", st->n_ctx);
    }
    ctx_check_warning(st);
    return st->out_failed ? -1 : 0;
}

/* Render the conversation (ending with a user message), make room in the
 * context if needed, decode what the cache lacks and generate the reply,
 * which joins the conversation. `user` is that message, for --json.
 * Returns 0 (also after Ctrl-C: see the conversation), or -1 on a fatal
 * error (writing the output failed, a decode error). */
static int reply_turn(chat_state *st, const char *user)
{
    int32_t *ids = NULL;
    chat_last_turn turn = {0};
    const float *logits = NULL;
    if (render_fitting(st, &ids, &turn.n_prompt) < 0)
        return 0;
    int rc = decode_prompt(st, ids, &turn, &logits);
    if (rc == RVL_EINTR || (rc == 0 && rvl_interrupted())) {
        /* the cache keeps the chunks that completed; the message is not sent */
        free(ids);
        conv_remove(st, st->n_conv - 1);
        if (st->interactive)
            note(st, "[interrupted]");
        else
            warn(st, "interrupted before the reply began");
        return 0;
    }
    if (rc < 0) {
        free(ids);
        cli_fail(st->cmd, rc);
        return -1;
    }

    gen_result r;
    rc = generate_reply(st, ids, logits, &turn, &r);
    free(ids);
    if (rc < 0) {
        if (!st->out_failed)
            cli_fail(st->cmd, rc);
        gen_result_free(&r);
        return -1;
    }
    rc = finish_reply(st, user, &r);
    gen_result_free(&r);
    return rc;
}

/* reply_turn with a copy of the message: the conversation may drop it. */
static int reply(chat_state *st, const char *user_msg)
{
    char *user = strdup(user_msg);
    if (!user) {
        cli_err(st->cmd, "out of memory");
        return -1;
    }
    int rc = reply_turn(st, user);
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

static char *session_json(chat_state *st)
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
    for (size_t i = 0; i < st->n_conv; i++) {
        rvl_jw_obj(&w);
        rvl_jw_key(&w, "role");
        rvl_jw_str(&w, st->conv[i].role);
        rvl_jw_key(&w, "content");
        rvl_jw_str(&w, st->conv[i].content);
        if (st->conv[i].interrupted) {
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
        if (setting_is_float(i))
            rvl_jw_f64(&w, *setting_f(&st->set, i));
        else
            rvl_jw_i64(&w, *setting_i(&st->set, i));
    }
    char sb[32];
    snprintf(sb, sizeof sb, "%llu", (unsigned long long)st->seed);
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

static int session_save(chat_state *st, const char *path)
{
    char *extra = session_json(st);
    if (!extra)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    int rc = rvl_session_save(st->ctx, path, st->cached, cache_n(st), extra);
    free(extra);
    return rc;
}

/* The extra JSON of a session into the conversation and (for settings
 * not given on the command line) the settings. On error nothing changes. */
static int session_apply(chat_state *st, const char *path, const char *extra)
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
    const chat_settings saved = st->set;
    const uint64_t saved_seed = st->seed;
    for (const cJSON *s = set ? set->child : NULL; s; s = s->next) {
        char val[64];
        if (!s->string)
            continue;
        if (strcmp(s->string, "seed") == 0 && st->seed_given)
            continue;
        bool skip = false;
        for (size_t k = 0; k < N_SETTINGS; k++)
            if (strcmp(settings[k].name, s->string) == 0 && st->given[k])
                skip = true;
        if (skip)
            continue;
        if (cJSON_IsString(s))
            snprintf(val, sizeof val, "%s", s->valuestring);
        else if (cJSON_IsNumber(s))
            snprintf(val, sizeof val, "%.17g", s->valuedouble);
        else
            snprintf(val, sizeof val, "?");
        if (setting_set(st, s->string, val, err, sizeof err) < 0) {
            st->set = saved;
            st->seed = saved_seed;
            rc = rvl_seterr(RVL_EFORMAT, "%s: settings: %s", path, err);
            goto out;
        }
    }
    conv_clear(st, false);
    for (const cJSON *m = msgs->child; m; m = m->next) {
        const char *c = cJSON_GetObjectItemCaseSensitive(m, "content")->valuestring;
        if (conv_push(st, cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring, c, strlen(c),
                      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "interrupted"))) < 0) {
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
            goto out;
        }
    }
out:
    cJSON_Delete(j);
    return rc;
}

static int session_load(chat_state *st, const char *path)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char *extra = NULL;
    int rc = rvl_session_load(st->ctx, path, &ids, &n, &extra);
    if (rc == 0 && n > st->n_ctx)
        rc = rvl_seterr(RVL_EFORMAT, "%s: %zu tokens in a context of %u", path, n, st->n_ctx);
    if (rc == 0 && (rc = session_apply(st, path, extra)) == 0) {
        memcpy(st->cached, ids, n * sizeof *ids);
        st->retry_salt = 0;
        if (opt_system && conv_set_system(st, opt_system) < 0)
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    if (rc < 0)
        rvl_ctx_reset(st->ctx);   /* the cache may not match the conversation any more */
    free(ids);
    free(extra);
    return rc;
}

/* ====================================================================
 * In-chat commands: /NAME [ARG], handled by slash_NAME (cmd_NAME is
 * for the CLI's commands)
 * ==================================================================== */

typedef enum { SLASH_OK, SLASH_EXIT, SLASH_FATAL } slash_status;

typedef struct {
    const char *name, *args, *help;
    slash_status (*fn)(chat_state *st, const char *arg);
} slash_cmd;

static slash_status slash_help(chat_state *st, const char *arg);

static slash_status slash_reset(chat_state *st, const char *arg)
{
    (void)arg;
    conv_clear(st, true);
    rvl_ctx_reset(st->ctx);
    st->retry_salt = 0;
    st->ctx_warned = false;
    fprintf(st->info, "(a new conversation%s)\n",
            st->n_conv ? "; the system message stays" : "");
    return SLASH_OK;
}

static slash_status slash_system(chat_state *st, const char *arg)
{
    if (!*arg) {
        bool has = st->n_conv && strcmp(st->conv[0].role, "system") == 0;
        fprintf(st->info,
                has ? "system: %s\n" : "(no system message: the template's default applies)\n",
                has ? st->conv[0].content : "");
        return SLASH_OK;
    }
    if (conv_set_system(st, arg) < 0) {
        cli_err(st->cmd, "out of memory");
        return SLASH_FATAL;
    }
    cache_trim(st);
    fprintf(st->info, "(system message set)\n");
    return SLASH_OK;
}

static slash_status slash_save(chat_state *st, const char *arg)
{
    if (!*arg) {
        fail(st, "/save needs a file name");
        return SLASH_OK;
    }
    if (session_save(st, arg) < 0)
        fail(st, "/save: %s", rvl_errmsg());
    else
        fprintf(st->info, "(saved %zu messages and %u cached tokens to %s)\n", st->n_conv,
                cache_n(st), arg);
    return SLASH_OK;
}

static slash_status slash_load(chat_state *st, const char *arg)
{
    if (!*arg) {
        fail(st, "/load needs a file name");
        return SLASH_OK;
    }
    if (session_load(st, arg) < 0)
        fail(st, "/load: %s", rvl_errmsg());
    else
        fprintf(st->info, "(loaded %zu messages and %u cached tokens from %s)\n", st->n_conv,
                cache_n(st), arg);
    st->ctx_warned = false;
    return SLASH_OK;
}

static slash_status slash_undo(chat_state *st, const char *arg)
{
    (void)arg;
    size_t end = st->n_conv;
    while (end && strcmp(st->conv[end - 1].role, "user") != 0 &&
           strcmp(st->conv[end - 1].role, "system") != 0)
        end--;
    if (!end || strcmp(st->conv[end - 1].role, "user") != 0) {
        fail(st, "/undo: nothing to undo");
        return SLASH_OK;
    }
    size_t k = st->n_conv - (end - 1);
    while (st->n_conv >= end)
        conv_remove(st, st->n_conv - 1);
    cache_trim(st);
    st->retry_salt = 0;
    fprintf(st->info, "(removed the last exchange: %zu message%s)\n", k, k == 1 ? "" : "s");
    return SLASH_OK;
}

static slash_status slash_retry(chat_state *st, const char *arg)
{
    (void)arg;
    if (!st->n_conv || strcmp(st->conv[st->n_conv - 1].role, "assistant") != 0 || st->n_conv < 2 ||
        strcmp(st->conv[st->n_conv - 2].role, "user") != 0) {
        fail(st, "/retry: no reply to regenerate");
        return SLASH_OK;
    }
    conv_remove(st, st->n_conv - 1);
    st->retry_salt++;
    return reply(st, st->conv[st->n_conv - 1].content) < 0 ? SLASH_FATAL : SLASH_OK;
}

static slash_status slash_stats(chat_state *st, const char *arg)
{
    (void)arg;
    FILE *out = st->info;
    const chat_last_turn *last = &st->last;
    const chat_totals *total = &st->total;
    uint32_t pos = cache_n(st), n_ctx = st->n_ctx;
    size_t per = kv_bytes_per_token(st);
    fprintf(out, "messages   %zu (%zu exchanges)\n", st->n_conv, conv_count(st, "assistant"));
    fprintf(out, "context    %u of %u tokens used (%.1f%%)\n", pos, n_ctx, 100.0 * pos / n_ctx);
    fprintf(out, "KV cache   %.2f MiB used of %.2f MiB (%s, %zu bytes per token)\n",
            (double)pos * per / 1048576.0, (double)n_ctx * per / 1048576.0,
            cli_kv_describe(&opt_kv), per);
    fprintf(out, "backend    %s (device %s)\n", rvl_ctx_backend(st->ctx), rvl_ctx_device(st->ctx));
    cli_expert_stats(out, "experts    ", st->model);
    if (last->valid) {
        size_t np = last->n_prompt - last->n_reused;
        fprintf(out, "last turn  prompt %zu tokens (%zu reused from the cache, %zu decoded in "
                     "%.1f ms, %.1f tok/s), first token %.1f ms, reply %zu tokens in %.1f ms "
                     "(%.1f tok/s), finish: %s\n",
                last->n_prompt, last->n_reused, np, last->prompt_ms,
                last->prompt_ms > 0 ? np * 1e3 / last->prompt_ms : 0, last->first_ms, last->n_gen,
                last->gen_ms,
                last->gen_ms > 0 && last->n_decoded ? last->n_decoded * 1e3 / last->gen_ms : 0,
                gen_finish_name(last->finish));
    }
    fprintf(out, "session    %zu turns, %zu prompt tokens decoded (%.1f tok/s), %zu tokens "
                 "generated (%.1f tok/s)\n",
            total->turns, total->prompt_tokens,
            total->prompt_ms > 0 ? total->prompt_tokens * 1e3 / total->prompt_ms : 0,
            total->gen_tokens, total->gen_ms > 0 ? total->gen_tokens * 1e3 / total->gen_ms : 0);
    fprintf(out, "prompt tokens reused: %zu of %zu\n", total->prompt_reused, total->prompt_all);
    return SLASH_OK;
}

static slash_status slash_set(chat_state *st, const char *arg)
{
    if (!*arg) {
        settings_print(st, st->info);
        return SLASH_OK;
    }
    char name[64];
    size_t nl = strcspn(arg, " \t");
    const char *val = arg + nl;
    val += strspn(val, " \t");
    snprintf(name, sizeof name, "%.*s", (int)(nl < 63 ? nl : 63), arg);
    char err[256];
    if (!*val) {
        /* name alone: its value, or the unknown-name message */
        if (setting_set(st, name, "", err, sizeof err) < 0 && strstr(err, "unknown")) {
            fail(st, "/set: %s", err);
            return SLASH_OK;
        }
        fail(st, "/set: %s needs a value", name);
        return SLASH_OK;
    }
    if (setting_set(st, name, val, err, sizeof err) < 0)
        fail(st, "/set: %s", err);
    else
        fprintf(st->info, "(%s = %s)\n", name, val);
    return SLASH_OK;
}

static slash_status slash_exit(chat_state *st, const char *arg)
{
    (void)st;
    (void)arg;
    return SLASH_EXIT;
}

static const slash_cmd commands[] = {
    {"help", "", "show the commands", slash_help},
    {"reset", "", "start a new conversation (the system message stays)", slash_reset},
    {"system", "[TEXT]", "set the system message (without TEXT: show it)", slash_system},
    {"save", "FILE", "save the conversation with its cache to FILE", slash_save},
    {"load", "FILE", "continue the conversation saved in FILE", slash_load},
    {"undo", "", "drop the last exchange (your message and the reply)", slash_undo},
    {"retry", "", "generate the last reply again", slash_retry},
    {"stats", "", "tokens, context used, speeds, KV cache memory", slash_stats},
    {"set", "[NAME VALUE]", "change a sampling setting (without arguments: list them)", slash_set},
    {"exit", "", "leave (also Ctrl-D)", slash_exit},
    {"quit", "", "leave", slash_exit},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static slash_status slash_help(chat_state *st, const char *arg)
{
    (void)arg;
    for (size_t i = 0; i < N_COMMANDS; i++) {
        char lab[64];
        snprintf(lab, sizeof lab, "/%s %s", commands[i].name, commands[i].args);
        fprintf(st->info, "  %-20s %s\n", lab, commands[i].help);
    }
    fprintf(st->info, "  %-20s %s\n", "//TEXT", "send a message that starts with '/'");
    fprintf(st->info, "Settings for /set:");
    for (size_t i = 0; i < N_SETTINGS; i++)
        fprintf(st->info, " %s,", settings[i].name);
    fprintf(st->info, " seed.\n");
    if (st->interactive)
        fprintf(st->info, "Multi-line messages: end a line with \\ to continue it, or write the "
                      "message between lines of \"\"\".\nCtrl-C stops a reply; Ctrl-D leaves.\n");
    return SLASH_OK;
}

/* A line starting with '/': run it. */
static slash_status slash_run(chat_state *st, const char *line)
{
    const char *p = line + 1;
    size_t nl = strcspn(p, " \t\n");
    const char *arg = p + nl;
    arg += strspn(arg, " \t\n");
    /* trailing blanks are not part of an argument */
    char *a = strdup(arg);
    if (!a) {
        cli_err(st->cmd, "out of memory");
        return SLASH_FATAL;
    }
    size_t al = strlen(a);
    while (al && (a[al - 1] == ' ' || a[al - 1] == '\t' || a[al - 1] == '\n' || a[al - 1] == '\r'))
        a[--al] = 0;
    slash_status res = SLASH_OK;
    const slash_cmd *c = NULL;
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strlen(commands[i].name) == nl && strncmp(commands[i].name, p, nl) == 0)
            c = &commands[i];
    if (c) {
        res = c->fn(st, a);
    } else {
        char word[64];
        const char *cands[N_COMMANDS + 1];
        for (size_t i = 0; i < N_COMMANDS; i++)
            cands[i] = commands[i].name;
        cands[N_COMMANDS] = NULL;
        snprintf(word, sizeof word, "%.*s", (int)(nl < 63 ? nl : 63), p);
        const char *s = cli_suggest(word, cands);
        if (s)
            fail(st, "unknown command '/%s'; did you mean '/%s'? (/help lists the commands)", word,
                 s);
        else
            fail(st, "unknown command '/%s' (/help lists the commands; //TEXT sends a message "
                 "that starts with '/')", word);
    }
    free(a);
    fflush(st->info);
    return res;
}

static bool blank(const char *s)
{
    return s[strspn(s, " \t\r\n")] == 0;
}

/* ====================================================================
 * --render: the prompt for a conversation, needing only the vocabulary
 * ==================================================================== */

static int do_render(chat_state *st)
{
    rvl_file *f = NULL;
    rvl_tokenizer *t = NULL;
    rvl_chat *c = NULL;
    rvl_chat_msg *msgs = NULL, *all = NULL;
    size_t n = 0;
    char *out = NULL, *w = NULL;
    int rc;
    if ((rc = rvl_chat_conv_load(opt_render, &msgs, &n)) < 0 ||
        (rc = rvl_file_open(&f, st->model_path)) < 0 || (rc = rvl_tok_open(&t, f)) < 0)
        goto out;
    rc = rvl_chat_open_model(&c, f, t, opt_chat_template, &w);
    if (w) {
        cli_err(st->cmd, "%s", w);
        free(w);
        w = NULL;
    }
    if (rc < 0)
        goto out;
    rvl_chat_set_thinking(c, cli_reasoning(opt_reasoning));
    if (opt_effort)
        (void)rvl_chat_set_reasoning_effort(c, opt_effort); /* a checked choice */
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
        cli_err(st->cmd, "%s", w);
        free(w);
    }
    if (rc == 0 && (fwrite(out, 1, strlen(out), stdout) != strlen(out) || fflush(stdout) != 0)) {
        cli_err(st->cmd, "writing to standard output failed: %s", strerror(errno));
        rc = 1;
    }
out:;
    int status = rc < 0 ? cli_fail(st->cmd, rc) : rc;
    free(out);
    free(all);
    free(msgs);
    rvl_chat_close(c);
    rvl_tok_close(t);
    rvl_file_close(f);
    return status;
}

/* ====================================================================
 * main
 * ==================================================================== */

/* The model, its context with the --lora adapters, the template, the
 * system message and the --session: 0, or the exit status after printing
 * the error. chat_close frees what was opened, also on failure. */
static int chat_open(chat_state *st)
{
    int status = 0, rc;
    char *w = NULL;
    if ((rc = cli_model_open(&st->model, st->model_path, opt_expert_budget)) < 0)
        return cli_fail(st->cmd, rc);
    st->tok = rvl_model_tokenizer(st->model);
    if (rvl_tok_warning(st->tok))
        warn(st, "%s: %s", st->model_path, rvl_tok_warning(st->tok));
    rvl_ctx_params cp = {.n_ctx = (uint32_t)opt_ctx, .n_threads = (uint32_t)opt_threads,
                         .backend = opt_backend};
    cli_kv_params(&opt_kv, &cp);
    if ((rc = rvl_ctx_open(&st->ctx, st->model, &cp)) == 0 &&
        (status = cli_lora_attach(st->cmd, &opt_lora, st->model, st->ctx, &st->lora)) != 0)
        return status;
    if (rc == 0 && ((rc = cli_backend_refuse(st->ctx, opt_session ? "--session" : NULL)) < 0 ||
                    (rc = cli_backend_refuse(st->ctx, opt_shift ? "--context-shift" : NULL)) < 0))
        return cli_fail(st->cmd, rc);
    if (rc < 0 ||
        (rc = rvl_chat_open_model(&st->tmpl, rvl_model_file(st->model), st->tok, opt_chat_template,
                                  &w)) < 0) {
        if (w) {
            cli_err(st->cmd, "%s", w);
            free(w);
        }
        return cli_fail(st->cmd, rc);
    }
    if (w) {
        warn(st, "%s", w);
        free(w);
    }
    rvl_chat_set_thinking(st->tmpl, cli_reasoning(opt_reasoning));
    if (opt_effort)
        (void)rvl_chat_set_reasoning_effort(st->tmpl, opt_effort); /* a checked choice */
    st->n_ctx = rvl_ctx_n_ctx(st->ctx);
    st->add_bos = rvl_tok_add_bos(st->tok) && rvl_tok_bos(st->tok) >= 0;
    st->cached = malloc(((size_t)st->n_ctx + 1) * sizeof *st->cached);
    if (!st->cached || (opt_system && conv_set_system(st, opt_system) < 0)) {
        cli_err(st->cmd, "out of memory");
        return EXIT_RUNTIME;
    }
    /* one conversation per session file: a second chat on it would save
     * over this one's turns */
    if (opt_session && (rc = rvl_session_lock(opt_session, &st->session_lock)) < 0)
        return cli_fail(st->cmd, rc);
    if (opt_session && access(opt_session, F_OK) == 0) {
        if (session_load(st, opt_session) < 0)
            return cli_fail(st->cmd, RVL_EFORMAT);
        if (st->interactive)
            note(st, "session %s: %zu messages, %u tokens in the cache", opt_session, st->n_conv,
                 cache_n(st));
    }
    st->dirty = false;
    return 0;
}

static void chat_close(chat_state *st)
{
    rvl_session_unlock(st->session_lock);
    conv_clear(st, false);
    free(st->conv);
    free(st->cached);
    rvl_chat_close(st->tmpl);
    rvl_ctx_close(st->ctx);
    rvl_lora_close(st->lora);
    rvl_model_close(st->model);
}

/* Messages and /commands until the end of input, /exit, a fatal error or
 * (from a script) Ctrl-C; the session saved after each. The exit status. */
static int chat_loop(chat_state *st)
{
    for (;;) {
        char *msg = NULL;
        if (st->interactive)
            rvl_interrupt_clear();
        int r = st->interactive ? chat_input_message(&msg)
                                : chat_input_record(stdin, opt_null, &msg);
        if (r == 0)
            return rvl_interrupted() ? EXIT_INTERRUPTED : 0;   /* SIGTERM at the prompt */
        if (r < 0) {
            if (st->interactive)
                continue;
            return rvl_interrupted() ? EXIT_INTERRUPTED : EXIT_RUNTIME;
        }
        slash_status res = SLASH_OK;
        if (blank(msg)) {
            /* nothing to send */
        } else if (msg[0] == '/' && msg[1] != '/') {
            res = slash_run(st, msg);
        } else {
            const char *text = msg[0] == '/' ? msg + 1 : msg;
            if (conv_push(st, "user", text, strlen(text), false) < 0) {
                cli_err(st->cmd, "out of memory");
                res = SLASH_FATAL;
            } else if (reply(st, text) < 0) {
                res = SLASH_FATAL;
            }
        }
        free(msg);
        if (res == SLASH_FATAL)
            return EXIT_RUNTIME;
        /* a Ctrl-C (or SIGTERM, SIGHUP) that stopped the turn does not stop
         * the save: nothing is lost (a second one while saving quits at
         * once, the previous file intact) */
        const bool stopped = rvl_interrupted();
        if (opt_session && st->dirty) {
            rvl_interrupt_clear();
            if (session_save(st, opt_session) < 0)
                fail(st, "--session: %s", rvl_errmsg());
            st->dirty = false;   /* saved, or the failure said once (the next turn retries) */
        }
        if (res == SLASH_EXIT)
            return 0;
        if (!st->interactive && (stopped || rvl_interrupted()))
            return EXIT_INTERRUPTED;
    }
}

static int chat_main(rvl_cmd *cmd, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    chat_state state = {.cmd = cmd->name, .session_lock = -1}, *st = &state;
    int status, rc;
    const char *nc = getenv("NO_COLOR");
    bool no_color = nc && *nc;
    st->interactive = isatty(STDIN_FILENO);
    st->color_out = !no_color && isatty(STDOUT_FILENO);
    st->color_err = !no_color && isatty(STDERR_FILENO);
    st->info = st->interactive ? stdout : stderr;

    settings_init(st);
    if (opt_seed) {
        if (parse_seed(opt_seed, &st->seed) < 0)
            cli_usage(st->cmd, "--seed: '%s' is not a non-negative integer", opt_seed);
        st->seed_given = true;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        st->seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
    }
    if (opt_render && opt_session)
        cli_usage(st->cmd, "--render prints a prompt and exits: it takes no --session");
    if (opt_lora.n && opt_session)
        cli_usage(st->cmd, "--session cannot be combined with --lora (a session file does not "
                  "record the adapters its cache was computed with)");
    if ((rc = rvl_model_path(opt_model, st->model_path, sizeof st->model_path)) < 0)
        return cli_fail(st->cmd, rc);
    if (opt_render)
        return do_render(st);

    /* borrowed by chat_input until chat_input_close */
    const char *cmd_names[N_COMMANDS + 1] = {0}, *set_names[N_SETTINGS + 2] = {0};
    if ((status = chat_open(st)) != 0)
        goto out;
    if (st->interactive) {
        const char *base = strrchr(st->model_path, '/');
        note(st, "ruvllm chat: %s, %s, context %u tokens. /help for commands, Ctrl-D or /exit to "
             "leave.", base ? base + 1 : st->model_path, rvl_chat_describe(st->tmpl), st->n_ctx);
        for (size_t i = 0; i < N_COMMANDS; i++)
            cmd_names[i] = commands[i].name;
        for (size_t i = 0; i < N_SETTINGS; i++)
            set_names[i] = settings[i].name;
        set_names[N_SETTINGS] = "seed";
        chat_input_open(&(chat_input_cfg){.color = st->color_out, .commands = cmd_names,
                                          .settings = set_names, .hint = hint, .ud = st});
    }
    status = chat_loop(st);
    if (opt_session && st->dirty && st->ctx && session_save(st, opt_session) < 0) {
        cli_err(st->cmd, "--session: %s", rvl_errmsg());
        status = EXIT_RUNTIME;
    }
    if (status == 0 && st->had_error && !st->interactive)
        status = EXIT_RUNTIME;
    if (st->interactive)
        chat_input_close();
out:
    chat_close(st);
    free(opt_lora.items);
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
    .aliases = aliases,
    .pos_compl = COMPL_NONE,
    .min_pos = 0,
    .max_pos = 0,
    .main = chat_main,
};
