/*
 * chat.h - what `ruvllm chat`'s two files share: the chat's state, and
 * the operations of cmd/chat.c (the conversation, the engine, sessions)
 * that the in-chat /commands of cmd/chat_slash.c call.
 */
#ifndef RVL_CHAT_H
#define RVL_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "gen.h"
#include "ruvllm_tools.h"

#define CHAT_N_SETTINGS 9        /* chat.c's table of settings (checked there) */

/* What /set changes and sessions keep, besides the seed. */
typedef struct {
    cli_sample_opts sample;
    long long max_tokens;       /* -1: until the end of the turn */
} chat_settings;


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
    double total_ms;            /* the whole turn, from the message to the reply's end */
    double load_ms;             /* of it: opening the model (the first turn only) */
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
    bool given[CHAT_N_SETTINGS];     /* on the command line: a session does not change them */
    uint64_t seed;              /* each reply's seed derives from it and the turn's number */
    bool seed_given;
    char **stops;               /* /set parameter stop: stop strings besides the template's */
    size_t n_stops;
    bool verbose;               /* --verbose, /set verbose: timings after each reply */
    const cli_kv_opts *kv;      /* the KV options, for /stats and /show */
    double load_ms;             /* opening the model and its context: the first reply's
                                   "load duration", 0 afterwards (as ollama's) */
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

typedef enum { SLASH_OK, SLASH_EXIT, SLASH_FATAL } slash_status;

/* ---- cmd/chat.c ---- */

const char *chat_plural(size_t n, const char *one, const char *many);   /* by n == 1 */
/* An error in a message or a command: reported; a script exits 1 at the
 * end; the conversation goes on. */
void chat_fail(chat_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The settings: name i (< CHAT_N_SETTINGS); set NAME (or "seed") to VALUE,
 * checked as the option's value is (0, or -1 with a message in err);
 * list them all. */
const char *chat_setting_name(size_t i);
int chat_setting_set(chat_state *st, const char *name, const char *value, char *err, size_t cap);
void chat_settings_print(chat_state *st, FILE *out);
void chat_stops_clear(chat_state *st);   /* /set parameter stop's strings, freed */

/* The conversation: remove message `at`; clear it (keeping a leading
 * system message); count a role's messages; replace, add or (text NULL)
 * remove the system message. */
void chat_conv_remove(chat_state *st, size_t at);
void chat_conv_clear(chat_state *st, bool keep_system);
size_t chat_conv_count(chat_state *st, const char *role);
int chat_conv_set_system(chat_state *st, const char *text);

/* The cache: positions held; bytes per token (the coldest tier's); drop
 * what it holds past the conversation as it renders now. */
uint32_t chat_cache_n(chat_state *st);
size_t chat_kv_bytes_per_token(chat_state *st);
void chat_cache_trim(chat_state *st);

/* Reply to the conversation, which ends with the user message user_msg:
 * 0 (also after Ctrl-C), or -1 on a fatal error. */
int chat_reply(chat_state *st, const char *user_msg);

/* Session files: the conversation, the settings and the cache. */
int chat_session_save(chat_state *st, const char *path);
int chat_session_load(chat_state *st, const char *path);

/* ---- cmd/chat_slash.c ---- */

/* Run a line starting with '/'. */
slash_status chat_slash_run(chat_state *st, const char *line);
/* The commands' names without '/', NULL-terminated, for completion. */
const char *const *chat_slash_names(void);

#endif
