/*
 * chat.c - ruvllm chat: chat with a model in the terminal or from a script.
 *
 * On a terminal: a readline prompt (history, editing, multi-line input),
 * replies streamed as they are generated, Ctrl-C stops a reply, in-chat
 * /commands (cmd/chat_slash.c; cmd/chat.h is what the two share; reading
 * the input is cmd/chat_input.c). With standard input not a terminal: each line (or NUL-
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

#include "chat.h"
#include "chat_input.h"

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
static bool opt_null, opt_json, opt_verbose;

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
    {OPT_FLAG, 0, "verbose", NULL, "after each reply, print its timings on standard error, as ollama run --verbose does (/set verbose, /set quiet)", NULL, &opt_verbose, 0, 0, NULL, COMPL_NONE},
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
_Static_assert(N_SETTINGS == CHAT_N_SETTINGS, "chat.h's CHAT_N_SETTINGS counts settings[]");

const char *chat_setting_name(size_t i)
{
    return settings[i].name;
}

/* "1 exchange", "2 exchanges" */
const char *chat_plural(size_t n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

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
int chat_setting_set(chat_state *st, const char *name, const char *value, char *err, size_t cap)
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

void chat_settings_print(chat_state *st, FILE *out)
{
    for (size_t i = 0; i < N_SETTINGS; i++) {
        if (setting_is_float(i))
            fprintf(out, "  %-18s %g\n", settings[i].name, *setting_f(&st->set, i));
        else
            fprintf(out, "  %-18s %lld\n", settings[i].name, *setting_i(&st->set, i));
    }
    fprintf(out, "  %-18s %llu\n", "seed", (unsigned long long)st->seed);
    if (st->n_stops) {
        fprintf(out, "  %-18s", "stop");
        for (size_t i = 0; i < st->n_stops; i++)
            fprintf(out, " \"%s\"", st->stops[i]);
        fputc('\n', out);
    }
    fprintf(out, "  %-18s %s\n", "verbose", st->verbose ? "on" : "off");
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
void chat_fail(chat_state *st, const char *fmt, ...)
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

void chat_conv_remove(chat_state *st, size_t at)
{
    free(st->conv[at].role);
    free(st->conv[at].content);
    memmove(st->conv + at, st->conv + at + 1, (st->n_conv - at - 1) * sizeof *st->conv);
    st->n_conv--;
    st->dirty = true;
}

void chat_conv_clear(chat_state *st, bool keep_system)
{
    size_t keep = keep_system && st->n_conv && strcmp(st->conv[0].role, "system") == 0 ? 1 : 0;
    while (st->n_conv > keep)
        chat_conv_remove(st, st->n_conv - 1);
}

size_t chat_conv_count(chat_state *st, const char *role)
{
    size_t k = 0;
    for (size_t i = 0; i < st->n_conv; i++)
        k += strcmp(st->conv[i].role, role) == 0;
    return k;
}

/* Replace, add or (text NULL) remove the leading system message. */
int chat_conv_set_system(chat_state *st, const char *text)
{
    bool has = st->n_conv && strcmp(st->conv[0].role, "system") == 0;
    if (has)
        chat_conv_remove(st, 0);
    return text ? conv_insert(st, 0, "system", text, strlen(text), false) : 0;
}

/* ====================================================================
 * The engine: rendering the conversation, the cache, the turn
 * ==================================================================== */

uint32_t chat_cache_n(chat_state *st) { return st->ctx ? rvl_ctx_pos(st->ctx) : 0; }

/* Of the coldest tier the formats use (the steady state of a long
 * context; the newest page and tiered's hot tokens take more). */
size_t chat_kv_bytes_per_token(chat_state *st)
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
void chat_cache_trim(chat_state *st)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (!st->n_conv) {
        rvl_ctx_reset(st->ctx);
        return;
    }
    if (render_ids(st, false, &ids, &n) < 0)
        return;
    size_t k = common_prefix(st->cached, chat_cache_n(st), ids, n);
    if (k < chat_cache_n(st))
        rvl_ctx_truncate(st->ctx, (uint32_t)k);
    free(ids);
}

static void ctx_check_warning(chat_state *st)
{
    uint32_t pos = chat_cache_n(st), at = st->n_ctx - st->n_ctx / 10;
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
    rvl_jw_u64(&w, chat_cache_n(st));
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
            chat_fail(st, "%s", rvl_errmsg());
            chat_conv_remove(st, st->n_conv - 1);
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
                chat_fail(st, "the message needs %zu tokens with the template: more than the context "
                     "holds (%u; see -c)", na, st->n_ctx);
                free(ids);
                chat_conv_remove(st, st->n_conv - 1);
                return -1;
            }
        }
        if (first + 1 >= st->n_conv) {
            if (n < st->n_ctx)
                break;   /* no room to spare, but it fits */
            chat_fail(st, "the message needs %zu tokens with the template: more than the context "
                 "holds (%u; see -c)", n, st->n_ctx);
            free(ids);
            chat_conv_remove(st, st->n_conv - 1);
            return -1;
        }
        /* one exchange: a user message and the replies after it */
        chat_conv_remove(st, first);
        dropped++;
        while (first + 1 < st->n_conv && strcmp(st->conv[first].role, "user") != 0) {
            chat_conv_remove(st, first);
            dropped++;
        }
        free(ids);
        ids = NULL;
    }
    if (n == 0) {
        chat_fail(st, "the template renders the conversation as nothing");
        free(ids);
        chat_conv_remove(st, st->n_conv - 1);
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
    uint64_t n_turn = chat_conv_count(st, "assistant") + 1;
    cli_sample_params(&st->set.sample,
                      mix64(st->seed ^ mix64(n_turn) ^ mix64(st->retry_salt << 32)), &sp);
    rvl_sampler *smp = NULL;
    int rc = rvl_sampler_open(&smp, &sp, rvl_model_hparams(st->model)->n_vocab);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        rvl_sampler_accept(smp, ids[i]);

    const char *const *stops = rvl_chat_stops(st->tmpl);
    /* with /set parameter stop: the template's and those */
    size_t n_tmpl = 0;
    while (stops && stops[n_tmpl])
        n_tmpl++;
    const char **all = NULL;
    if (st->n_stops) {
        all = malloc((n_tmpl + st->n_stops + 1) * sizeof *all);
        if (!all) {
            rvl_sampler_close(smp);
            return rvl_seterr(RVL_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < n_tmpl; i++)
            all[i] = stops[i];
        for (size_t i = 0; i < st->n_stops; i++)
            all[n_tmpl + i] = st->stops[i];
        all[n_tmpl + st->n_stops] = NULL;
    }
    gen_params gp = {
        .ctx = st->ctx, .smp = smp, .tok = st->tok, .stop_tokens = stops,
        .stop_strs = all ? all : stops,
        .max_tokens = st->set.max_tokens < 0 ? SIZE_MAX : (size_t)st->set.max_tokens,
        .special = false,   /* harmony's markers render anyway: user-defined (tok.c) */
        .emit = opt_json ? NULL : emit_stream, .ud = st,
        .context_shift = opt_shift,
        .shift_keep = opt_keep < 0 ? (uint32_t)n : (uint32_t)opt_keep,
    };
    st->think = st->think0;
    rc = gen_reply(&gp, logits, r);
    free(all);
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

/* ollama's durations: "1.234s", "45.6ms" */
static void fmt_duration(char *buf, size_t cap, double ms)
{
    if (ms >= 1000)
        snprintf(buf, cap, "%.3fs", ms / 1e3);
    else
        snprintf(buf, cap, "%.3fms", ms);
}

/* --verbose, /set verbose: the last turn's timings on stderr, with the
 * fields and names of ollama run --verbose; prompt eval counts the tokens
 * decoded (not those reused from the cache, which its own line gives). */
static void verbose_timings(chat_state *st)
{
    const chat_last_turn *t = &st->last;
    size_t np = t->n_prompt - t->n_reused;
    char total[32], load[32], pd[32], ed[32];
    fmt_duration(total, sizeof total, t->total_ms);
    fmt_duration(load, sizeof load, t->load_ms);
    fmt_duration(pd, sizeof pd, t->prompt_ms);
    fmt_duration(ed, sizeof ed, t->gen_ms);
    fflush(stdout);
    fputs(st->color_err ? C_NOTE : "", stderr);
    fprintf(stderr, "total duration:       %s\n", total);
    fprintf(stderr, "load duration:        %s\n", load);
    fprintf(stderr, "prompt eval count:    %zu token%s\n", np, chat_plural(np, "", "s"));
    fprintf(stderr, "prompt eval duration: %s\n", pd);
    fprintf(stderr, "prompt eval rate:     %.2f tokens/s\n",
            t->prompt_ms > 0 ? (double)np * 1e3 / t->prompt_ms : 0);
    fprintf(stderr, "prompt cache:         %zu token%s reused\n", t->n_reused,
            chat_plural(t->n_reused, "", "s"));
    fprintf(stderr, "eval count:           %zu token%s\n", t->n_gen,
            chat_plural(t->n_gen, "", "s"));
    fprintf(stderr, "eval duration:        %s\n", ed);
    fprintf(stderr, "eval rate:            %.2f tokens/s",
            t->gen_ms > 0 && t->n_decoded ? (double)t->n_decoded * 1e3 / t->gen_ms : 0);
    fputs(st->color_err ? C_OFF "\n" : "\n", stderr);
    if (st->interactive)
        fputc('\n', stderr);
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
        chat_conv_remove(st, st->n_conv - 1);   /* nothing of the reply yet: not sent */
    } else if (reply_content(st, r, &content) < 0 ||
               conv_push(st, "assistant", content.p ? content.p : "", content.n, intr) < 0) {
        rvl_buf_free(&content);
        cli_err(st->cmd, "out of memory");
        return -1;
    }
    rvl_buf_free(&content);
    /* a reply cut by -n says so: it would look finished */
    char cut[64] = "";
    if (r->finish == GEN_LENGTH)
        snprintf(cut, sizeof cut, "[stopped at -n %lld token%s]", st->set.max_tokens,
                 chat_plural((size_t)st->set.max_tokens, "", "s"));
    if (opt_json) {
        json_turn(st, user, r);
    } else {
        bool nl = r->text.n && r->text.p[r->text.n - 1] == '\n';
        const char *mark = intr ? "[interrupted]" : cut;
        if (*mark && st->interactive) {
            char mk[96];
            snprintf(mk, sizeof mk, "%s%s%s%s\n", nl ? "" : " ", st->color_out ? C_NOTE : "", mark,
                     st->color_out ? C_OFF : "");
            out_write(st, mk, strlen(mk));
        } else if (!nl) {
            out_write(st, "\n", 1);
        }
        out_write(st, "\n", 1);
        if (*cut && !st->interactive)
            note(st, "%s", cut);   /* stdout keeps the reply alone */
    }
    if (intr && !st->interactive)
        warn(st, "interrupted: the reply stops here");
    if (r->finish == GEN_CONTEXT) {
        st->ctx_warned = true;   /* this says more than the 90% warning */
        warn(st, "the context is full (%u tokens): the reply stops here; the next turn drops the "
             "oldest messages (/reset starts over, -c sets a larger context)", st->n_ctx);
    }
    ctx_check_warning(st);
    if (st->verbose)
        verbose_timings(st);
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
    chat_last_turn turn = {.load_ms = st->load_ms};
    const double t0 = gen_now_ms();
    const float *logits = NULL;
    if (render_fitting(st, &ids, &turn.n_prompt) < 0)
        return 0;
    int rc = decode_prompt(st, ids, &turn, &logits);
    if (rc == RVL_EINTR || (rc == 0 && rvl_interrupted())) {
        /* the cache keeps the chunks that completed; the message is not sent */
        free(ids);
        chat_conv_remove(st, st->n_conv - 1);
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
    st->last.total_ms = gen_now_ms() - t0 + st->load_ms;
    st->load_ms = 0;   /* the model is loaded: the next turns' load duration is 0 */
    rc = finish_reply(st, user, &r);
    gen_result_free(&r);
    return rc;
}

/* reply_turn with a copy of the message: the conversation may drop it. */
int chat_reply(chat_state *st, const char *user_msg)
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

int chat_session_save(chat_state *st, const char *path)
{
    char *extra = session_json(st);
    if (!extra)
        return rvl_seterr(RVL_ENOMEM, "out of memory");
    int rc = rvl_session_save(st->ctx, path, st->cached, chat_cache_n(st), extra);
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
        if (chat_setting_set(st, s->string, val, err, sizeof err) < 0) {
            st->set = saved;
            st->seed = saved_seed;
            rc = rvl_seterr(RVL_EFORMAT, "%s: settings: %s", path, err);
            goto out;
        }
    }
    chat_conv_clear(st, false);
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

int chat_session_load(chat_state *st, const char *path)
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
        if (opt_system && chat_conv_set_system(st, opt_system) < 0)
            rc = rvl_seterr(RVL_ENOMEM, "out of memory");
    }
    if (rc < 0)
        rvl_ctx_reset(st->ctx);   /* the cache may not match the conversation any more */
    free(ids);
    free(extra);
    return rc;
}

static bool blank(const char *s)
{
    return s[strspn(s, " \t\r\n")] == 0;
}

/* /set parameter stop's strings, freed. */
void chat_stops_clear(chat_state *st)
{
    for (size_t i = 0; i < st->n_stops; i++)
        free(st->stops[i]);
    free(st->stops);
    st->stops = NULL;
    st->n_stops = 0;
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
    const double t0 = gen_now_ms();
    if ((rc = cli_model_open(&st->model, st->model_path, opt_expert_budget, (int)opt_threads)) < 0)
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
    st->load_ms = gen_now_ms() - t0;
    st->add_bos = rvl_tok_add_bos(st->tok) && rvl_tok_bos(st->tok) >= 0;
    st->cached = malloc(((size_t)st->n_ctx + 1) * sizeof *st->cached);
    if (!st->cached || (opt_system && chat_conv_set_system(st, opt_system) < 0)) {
        cli_err(st->cmd, "out of memory");
        return EXIT_RUNTIME;
    }
    /* one conversation per session file: a second chat on it would save
     * over this one's turns */
    if (opt_session && (rc = rvl_session_lock(opt_session, &st->session_lock)) < 0)
        return cli_fail(st->cmd, rc);
    if (opt_session && access(opt_session, F_OK) == 0) {
        if (chat_session_load(st, opt_session) < 0)
            return cli_fail(st->cmd, RVL_EFORMAT);
        if (st->interactive)
            note(st, "session %s: %zu message%s, %u token%s in the cache", opt_session, st->n_conv,
                 chat_plural(st->n_conv, "", "s"), chat_cache_n(st),
                 chat_plural(chat_cache_n(st), "", "s"));
    }
    st->dirty = false;
    return 0;
}

static void chat_close(chat_state *st)
{
    chat_stops_clear(st);
    rvl_session_unlock(st->session_lock);
    chat_conv_clear(st, false);
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
            res = chat_slash_run(st, msg);
        } else {
            const char *text = msg[0] == '/' ? msg + 1 : msg;
            if (conv_push(st, "user", text, strlen(text), false) < 0) {
                cli_err(st->cmd, "out of memory");
                res = SLASH_FATAL;
            } else if (chat_reply(st, text) < 0) {
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
            if (chat_session_save(st, opt_session) < 0)
                chat_fail(st, "--session: %s", rvl_errmsg());
            st->dirty = false;   /* saved, or the failure said once (the next turn retries) */
        }
        if (res == SLASH_EXIT)
            return 0;
        if (!st->interactive && (stopped || rvl_interrupted()))
            return EXIT_INTERRUPTED;
    }
}

/* `chat "Hello"` (ollama run MODEL "Hello" answers once and exits) or
 * `chat model.gguf` (ollama run MODEL): say what to type instead. A
 * message is not taken as the chat's first one: ollama's users would
 * expect one answer and the end, others the chat to go on; run --chat is
 * the one answer, and either guess would surprise the other half. */
static _Noreturn void misplaced(const char *cmd, int argc, char **argv)
{
    const char *a = argv[0];
    size_t len = strlen(a);
    bool file = access(a, F_OK) == 0, model = file || (len > 5 && strcmp(a + len - 5, ".gguf") == 0);
    if (argc == 1 && model)
        cli_usage(cmd, "'%s' looks like a model: give it with -m (ruvllm chat -m '%s')", a, a);
    /* the words as one message, quoted for the shell as ollama joins them */
    rvl_buf q = {0};
    for (int i = 0; i < argc; i++) {
        if (i)
            rvl_buf_add(&q, " ", 1);
        for (const char *p = argv[i]; *p; p++)
            if (*p == '\'')
                rvl_buf_add(&q, "'\\''", 4);
            else
                rvl_buf_add(&q, p, 1);
    }
    rvl_buf_add(&q, "", 1);
    /* one word may be a model's name (ollama run NAME) */
    char model_hint[256] = "";
    if (argc == 1 && !a[strcspn(a, " \t\n")])
        snprintf(model_hint, sizeof model_hint, "; to chat with the model %s: ruvllm chat -m %s", a, a);
    cli_usage(cmd, "unexpected argument '%s': chat reads messages at its prompt (or one per line "
              "from standard input); for one answer, as ollama run MODEL \"...\" gives: ruvllm "
              "run --chat '%s'%s", a, q.p ? q.p : "", model_hint);
}

static int chat_main(rvl_cmd *cmd, int argc, char **argv)
{
    chat_state state = {.cmd = cmd->name, .session_lock = -1}, *st = &state;
    int status, rc;
    const char *nc = getenv("NO_COLOR");
    bool no_color = nc && *nc;
    st->interactive = isatty(STDIN_FILENO);
    st->color_out = !no_color && isatty(STDOUT_FILENO);
    st->color_err = !no_color && isatty(STDERR_FILENO);
    st->info = st->interactive ? stdout : stderr;
    st->kv = &opt_kv;

    if (argc > 0)
        misplaced(st->cmd, argc, argv);
    settings_init(st);
    st->verbose = opt_verbose;
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
    static const char *const set_words[] = {"system", "parameter", "verbose", "quiet"};
    enum { N_SET_WORDS = sizeof set_words / sizeof set_words[0] };
    const char *set_names[N_SETTINGS + N_SET_WORDS + 2] = {0};
    if ((status = chat_open(st)) != 0)
        goto out;
    if (st->interactive) {
        const char *base = strrchr(st->model_path, '/');
        note(st, "ruvllm chat: %s, %s, context %u tokens. /help for commands, Ctrl-D or /exit to "
             "leave.", base ? base + 1 : st->model_path, rvl_chat_describe(st->tmpl), st->n_ctx);
        for (size_t i = 0; i < N_SETTINGS; i++)
            set_names[i] = settings[i].name;
        set_names[N_SETTINGS] = "seed";
        for (size_t i = 0; i < N_SET_WORDS; i++)
            set_names[N_SETTINGS + 1 + i] = set_words[i];
        chat_input_open(&(chat_input_cfg){.color = st->color_out, .commands = chat_slash_names(),
                                          .settings = set_names, .hint = hint, .ud = st});
    }
    status = chat_loop(st);
    if (opt_session && st->dirty && st->ctx && chat_session_save(st, opt_session) < 0) {
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
        "written between two lines of \"\"\"; such a message is one entry of the history (the "
        "Up arrow recalls all its lines). The reply is streamed as it is generated; one that "
        "stops at the -n limit ends with [stopped at -n N tokens] (on standard error from a "
        "script). Ctrl-C "
        "during a reply stops it and returns to the prompt (what was generated stays in the "
        "conversation, marked as interrupted; a second Ctrl-C before the reply stops quits); "
        "Ctrl-C at the prompt clears the line; Ctrl-D or /exit leaves.\n"
        "\n"
        "Lines starting with / are commands: /help, /reset, /system TEXT, /save FILE, /load "
        "FILE, /undo, /retry, /stats, /set NAME VALUE, /show, /exit (see CHAT COMMANDS). //TEXT "
        "sends a message that starts with /. ollama's commands work too: /bye, /clear, /?, "
        "/set system TEXT, /set parameter NAME VALUE with ollama's names (temperature, top_k, "
        "top_p, min_p, seed, num_predict, repeat_penalty, repeat_last_n, stop), /set verbose, "
        "/set quiet and /show info.\n"
        "\n"
        "--verbose (or /set verbose) prints the timings of each reply on standard error, with "
        "the fields of ollama run --verbose: total duration, load duration (the model's, in "
        "the first reply), prompt eval count, duration and rate (the tokens decoded; those "
        "reused from the cache are on their own line), eval count, duration and rate.\n"
        "\n"
        "chat takes no message arguments: it says to use ruvllm run --chat \"MESSAGE\" for one "
        "answer (what ollama run MODEL \"MESSAGE\" does), and -m for a model.\n"
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
        ".TP\n.BI \"/set system \" TEXT\nAs /system TEXT (ollama's form).\n"
        ".TP\n.BI \"/set parameter \" \"NAME VALUE\"\nollama's names for the settings: temperature, "
        "top_k, top_p, min_p, repeat_penalty, repeat_last_n, frequency_penalty, presence_penalty, "
        "num_predict (max\\-tokens), seed; stop sets stop strings besides the template's (several "
        "separated by blanks; none: only the template's). num_ctx and num_thread cannot change "
        "during a chat: start it with \\-c or \\-t (a conversation saved with /save continues "
        "with \\-\\-session). Without arguments, list them.\n"
        ".TP\n.BR \"/set verbose\" \", \" \"/set quiet\"\nTimings after each reply, or none (as "
        "\\-\\-verbose).\n"
        ".TP\n.BI /show \" \" [WHAT]\n\\fBinfo\\fR (the default): the model's architecture, "
        "parameters, context length, embedding length and quantization (its file type), and "
        "this chat's context, template and KV cache; \\fBparameters\\fR: the settings; "
        "\\fBsystem\\fR, \\fBtemplate\\fR, \\fBlicense\\fR.\n"
        ".TP\n.BR /clear\nAs /reset (ollama's name).\n"
        ".TP\n.BR /?\nAs /help.\n"
        ".TP\n.BR /exit \", \" /quit \", \" /bye\nLeave (as Ctrl\\-D does).\n"
        ".SH FILES\n"
        ".TP\n.I ${XDG_STATE_HOME:\\-$HOME/.local/state}/ruvllm/history\n"
        "The prompt's history (mode 0600), written only when standard input is a terminal.\n",
    .examples = "ruvllm chat\tchat with the default model\n"
                "ruvllm chat --system \"Answer in one sentence.\" --session notes.rvls\tkeep the conversation across runs\n"
                "printf 'Hi!\\nWhat is 2+2?\\n' | ruvllm chat --temp 0\ttwo messages from a script\n"
                "ruvllm chat --render conv.json\tthe prompt the template makes of a conversation\n"
                "ruvllm chat --verbose -n 256\ttimings after each reply, replies of at most 256 tokens",
    .opts = opts,
    .aliases = aliases,
    .pos_compl = COMPL_NONE,
    .min_pos = 0,
    .max_pos = -1,   /* chat_main says what to type instead */
    .main = chat_main,
};
