/*
 * chat_slash.c - the in-chat /commands of `ruvllm chat`: ours (/reset,
 * /system, /save, /load, /undo, /retry, /stats, /set, /show, /help,
 * /exit) and ollama's names for them (/bye, /clear, /?, /set system,
 * /set parameter NAME VALUE, /set verbose, /set quiet, /show info).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat.h"

/* ====================================================================
 * /NAME [ARG], handled by slash_NAME (cmd_NAME is for the CLI's
 * commands)
 * ==================================================================== */

typedef struct {
    const char *name, *args, *help;
    slash_status (*fn)(chat_state *st, const char *arg);
} slash_cmd;

static slash_status slash_help(chat_state *st, const char *arg);

static slash_status slash_reset(chat_state *st, const char *arg)
{
    (void)arg;
    chat_conv_clear(st, true);
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
    if (chat_conv_set_system(st, arg) < 0) {
        cli_err(st->cmd, "out of memory");
        return SLASH_FATAL;
    }
    chat_cache_trim(st);
    fprintf(st->info, "(system message set)\n");
    return SLASH_OK;
}

static slash_status slash_save(chat_state *st, const char *arg)
{
    if (!*arg) {
        chat_fail(st, "/save needs a file name");
        return SLASH_OK;
    }
    if (chat_session_save(st, arg) < 0)
        chat_fail(st, "/save: %s", rvl_errmsg());
    else
        fprintf(st->info, "(saved %zu message%s and %u cached token%s to %s)\n", st->n_conv,
                chat_plural(st->n_conv, "", "s"), chat_cache_n(st),
                chat_plural(chat_cache_n(st), "", "s"), arg);
    return SLASH_OK;
}

static slash_status slash_load(chat_state *st, const char *arg)
{
    if (!*arg) {
        chat_fail(st, "/load needs a file name");
        return SLASH_OK;
    }
    if (chat_session_load(st, arg) < 0)
        /* ollama's /load MODEL switches models: not this one */
        chat_fail(st, "/load: %s%s", rvl_errmsg(),
                  access(arg, F_OK) < 0 ? " (/load takes a session file saved with /save; another "
                                          "model needs a new chat: ruvllm chat -m MODEL)"
                                        : "");
    else
        fprintf(st->info, "(loaded %zu message%s and %u cached token%s from %s)\n", st->n_conv,
                chat_plural(st->n_conv, "", "s"), chat_cache_n(st),
                chat_plural(chat_cache_n(st), "", "s"), arg);
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
        chat_fail(st, "/undo: nothing to undo");
        return SLASH_OK;
    }
    size_t k = st->n_conv - (end - 1);
    while (st->n_conv >= end)
        chat_conv_remove(st, st->n_conv - 1);
    chat_cache_trim(st);
    st->retry_salt = 0;
    fprintf(st->info, "(removed the last exchange: %zu message%s)\n", k, k == 1 ? "" : "s");
    return SLASH_OK;
}

static slash_status slash_retry(chat_state *st, const char *arg)
{
    (void)arg;
    if (!st->n_conv || strcmp(st->conv[st->n_conv - 1].role, "assistant") != 0 || st->n_conv < 2 ||
        strcmp(st->conv[st->n_conv - 2].role, "user") != 0) {
        chat_fail(st, "/retry: no reply to regenerate");
        return SLASH_OK;
    }
    chat_conv_remove(st, st->n_conv - 1);
    st->retry_salt++;
    return chat_reply(st, st->conv[st->n_conv - 1].content) < 0 ? SLASH_FATAL : SLASH_OK;
}

static slash_status slash_stats(chat_state *st, const char *arg)
{
    (void)arg;
    FILE *out = st->info;
    const chat_last_turn *last = &st->last;
    const chat_totals *total = &st->total;
    uint32_t pos = chat_cache_n(st), n_ctx = st->n_ctx;
    size_t per = chat_kv_bytes_per_token(st);
    size_t n_ex = chat_conv_count(st, "assistant");
    fprintf(out, "messages   %zu (%zu exchange%s)\n", st->n_conv, n_ex, chat_plural(n_ex, "", "s"));
    fprintf(out, "context    %u of %u tokens used (%.1f%%)\n", pos, n_ctx, 100.0 * pos / n_ctx);
    fprintf(out, "KV cache   %.2f MiB used of %.2f MiB (%s, %zu bytes per token)\n",
            (double)pos * per / 1048576.0, (double)n_ctx * per / 1048576.0,
            cli_kv_describe(st->kv), per);
    fprintf(out, "backend    %s (device %s)\n", rvl_ctx_backend(st->ctx), rvl_ctx_device(st->ctx));
    cli_expert_stats(out, "experts    ", st->model);
    if (last->valid) {
        size_t np = last->n_prompt - last->n_reused;
        fprintf(out, "last turn  prompt %zu token%s (%zu reused from the cache, %zu decoded in "
                     "%.1f ms, %.1f tok/s), first token %.1f ms, reply %zu token%s in %.1f ms "
                     "(%.1f tok/s), finish: %s\n",
                last->n_prompt, chat_plural(last->n_prompt, "", "s"), last->n_reused, np,
                last->prompt_ms,
                last->prompt_ms > 0 ? np * 1e3 / last->prompt_ms : 0, last->first_ms, last->n_gen,
                chat_plural(last->n_gen, "", "s"), last->gen_ms,
                last->gen_ms > 0 && last->n_decoded ? last->n_decoded * 1e3 / last->gen_ms : 0,
                gen_finish_name(last->finish));
    }
    fprintf(out, "session    %zu turn%s, %zu prompt token%s decoded (%.1f tok/s), %zu token%s "
                 "generated (%.1f tok/s)\n",
            total->turns, chat_plural(total->turns, "", "s"), total->prompt_tokens,
            chat_plural(total->prompt_tokens, "", "s"),
            total->prompt_ms > 0 ? total->prompt_tokens * 1e3 / total->prompt_ms : 0,
            total->gen_tokens, chat_plural(total->gen_tokens, "", "s"),
            total->gen_ms > 0 ? total->gen_tokens * 1e3 / total->gen_ms : 0);
    fprintf(out, "prompt tokens reused: %zu of %zu\n", total->prompt_reused, total->prompt_all);
    return SLASH_OK;
}

/* ollama's /set parameter names for ours (ollama's Modelfile PARAMETERs). */
static const struct {
    const char *ollama, *ours;
} ollama_params[] = {
    {"temperature", "temp"}, {"top_k", "top-k"}, {"top_p", "top-p"}, {"min_p", "min-p"},
    {"repeat_penalty", "repeat-penalty"}, {"repeat_last_n", "repeat-last-n"},
    {"frequency_penalty", "frequency-penalty"}, {"presence_penalty", "presence-penalty"},
    {"num_predict", "max-tokens"}, {"seed", "seed"},
};
#define N_OLLAMA_PARAMS (sizeof ollama_params / sizeof ollama_params[0])

/* /set parameter stop A B ...: the stop strings, split at blanks as
 * ollama splits them; none: no stop strings besides the template's. */
static slash_status set_stops(chat_state *st, const char *arg)
{
    chat_stops_clear(st);
    for (const char *p = arg + strspn(arg, " \t"); *p; p += strspn(p, " \t")) {
        size_t len = strcspn(p, " \t");
        char **ns = realloc(st->stops, (st->n_stops + 2) * sizeof *ns);
        char *one = strndup(p, len);
        if (!ns || !one) {
            free(one);
            if (ns)
                st->stops = ns;
            cli_err(st->cmd, "out of memory");
            return SLASH_FATAL;
        }
        st->stops = ns;
        st->stops[st->n_stops++] = one;
        st->stops[st->n_stops] = NULL;
        p += len;
    }
    if (st->n_stops)
        fprintf(st->info, "(stop: %zu string%s besides the template's)\n", st->n_stops,
                chat_plural(st->n_stops, "", "s"));
    else
        fprintf(st->info, "(stop: only the template's end of turn)\n");
    return SLASH_OK;
}

/* /set parameter NAME VALUE: ollama's names (or ours). */
static slash_status set_parameter(chat_state *st, const char *arg)
{
    char name[64], err[256];
    size_t nl = strcspn(arg, " \t");
    const char *val = arg + nl;
    val += strspn(val, " \t");
    snprintf(name, sizeof name, "%.*s", (int)(nl < 63 ? nl : 63), arg);
    if (!*name) {
        fprintf(st->info, "Parameters for /set parameter NAME VALUE (ollama's name, ours):\n");
        for (size_t i = 0; i < N_OLLAMA_PARAMS; i++)
            fprintf(st->info, "  %-18s %s\n", ollama_params[i].ollama, ollama_params[i].ours);
        fprintf(st->info, "  %-18s %s\n", "stop", "stop strings (several: separated by blanks)");
        return SLASH_OK;
    }
    if (strcmp(name, "stop") == 0)
        return set_stops(st, val);
    if (strcmp(name, "num_ctx") == 0) {
        chat_fail(st, "/set parameter num_ctx: the context (%u tokens) is allocated when the chat "
             "starts; to continue this chat in a larger one: /save FILE, then ruvllm chat -c N "
             "--session FILE", st->n_ctx);
        return SLASH_OK;
    }
    if (strcmp(name, "num_thread") == 0) {
        chat_fail(st, "/set parameter num_thread: the threads start with the chat; start it with "
                  "-t N");
        return SLASH_OK;
    }
    const char *ours = NULL;
    for (size_t i = 0; i < N_OLLAMA_PARAMS; i++)
        if (strcmp(ollama_params[i].ollama, name) == 0 || strcmp(ollama_params[i].ours, name) == 0)
            ours = ollama_params[i].ours;
    if (!ours) {
        const char *cands[N_OLLAMA_PARAMS + 3];
        size_t n = 0;
        for (size_t i = 0; i < N_OLLAMA_PARAMS; i++)
            cands[n++] = ollama_params[i].ollama;
        cands[n++] = "stop";
        cands[n++] = "num_ctx";
        cands[n] = NULL;
        const char *sug = cli_suggest(name, cands);
        if (sug)
            chat_fail(st, "/set parameter: unknown parameter '%s'; did you mean '%s'?", name, sug);
        else
            chat_fail(st, "/set parameter: unknown parameter '%s' (/set parameter lists them)",
                      name);
        return SLASH_OK;
    }
    if (!*val) {
        chat_fail(st, "/set parameter %s needs a value", name);
        return SLASH_OK;
    }
    if (chat_setting_set(st, ours, val, err, sizeof err) < 0)
        chat_fail(st, "/set parameter: %s", err);
    else if (strcmp(ours, name) != 0)
        fprintf(st->info, "(%s = %s, as %s)\n", name, val, ours);
    else
        fprintf(st->info, "(%s = %s)\n", name, val);
    return SLASH_OK;
}

/* ollama's /set options that have no counterpart here, and what to do. */
static const struct {
    const char *name, *instead;
} ollama_unsupported[] = {
    {"history", "the history is always kept"},
    {"nohistory", "the history is always kept (HISTFILE-like control: none)"},
    {"wordwrap", "replies are printed as the model writes them"},
    {"nowordwrap", "replies are printed as the model writes them"},
    {"format", "ruvllm chat --json prints one JSON object per turn"},
    {"noformat", "ruvllm chat --json prints one JSON object per turn"},
    {"think", "start the chat with --reasoning on"},
    {"nothink", "start the chat with --reasoning off"},
};

static slash_status slash_set(chat_state *st, const char *arg)
{
    if (!*arg) {
        chat_settings_print(st, st->info);
        return SLASH_OK;
    }
    char name[64];
    size_t nl = strcspn(arg, " \t");
    const char *val = arg + nl;
    val += strspn(val, " \t");
    snprintf(name, sizeof name, "%.*s", (int)(nl < 63 ? nl : 63), arg);
    char err[256];
    /* ollama's forms */
    if (strcmp(name, "system") == 0)
        return slash_system(st, val);
    if (strcmp(name, "parameter") == 0)
        return set_parameter(st, val);
    if (strcmp(name, "verbose") == 0 || strcmp(name, "quiet") == 0) {
        if (*val) {
            chat_fail(st, "/set %s takes no value", name);
            return SLASH_OK;
        }
        st->verbose = name[0] == 'v';
        fprintf(st->info, st->verbose ? "(verbose: timings after each reply)\n"
                                      : "(quiet: no timings after the replies)\n");
        return SLASH_OK;
    }
    for (size_t i = 0; i < sizeof ollama_unsupported / sizeof ollama_unsupported[0]; i++)
        if (strcmp(name, ollama_unsupported[i].name) == 0) {
            chat_fail(st, "/set %s: not in ruvllm chat (%s)", name, ollama_unsupported[i].instead);
            return SLASH_OK;
        }
    if (!*val) {
        /* name alone: its value, or the unknown-name message */
        if (chat_setting_set(st, name, "", err, sizeof err) < 0 && strstr(err, "unknown")) {
            chat_fail(st, "/set: %s", err);
            return SLASH_OK;
        }
        chat_fail(st, "/set: %s needs a value", name);
        return SLASH_OK;
    }
    if (chat_setting_set(st, name, val, err, sizeof err) < 0)
        chat_fail(st, "/set: %s", err);
    else
        fprintf(st->info, "(%s = %s)\n", name, val);
    return SLASH_OK;
}

/* /show info: what ollama's shows (architecture, parameters, context
 * length, embedding length, quantization), from what `ruvllm info` and
 * `bench model` compute, and this chat's context. */
static void show_info(chat_state *st)
{
    FILE *out = st->info;
    const rvl_file *f = rvl_model_file(st->model);
    const rvl_hparams *hp = rvl_model_hparams(st->model);
    rvl_model_summary sum;
    rvl_convert_summary(f, &sum);
    char params[32], ftype[64];
    if (sum.params >= 1000000000ull)
        snprintf(params, sizeof params, "%.1fB", (double)sum.params / 1e9);
    else
        snprintf(params, sizeof params, "%.2fM", (double)sum.params / 1e6);
    fprintf(out, "  Model\n");
    fprintf(out, "    %-20s %s\n", "architecture", hp->arch);
    fprintf(out, "    %-20s %s\n", "parameters", params);
    if (sum.n_expert) {
        fprintf(out, "    %-20s %u, %u used a token\n", "experts", sum.n_expert, sum.n_expert_used);
        fprintf(out, "    %-20s %.2fB\n", "active parameters", (double)sum.active_params / 1e9);
    }
    fprintf(out, "    %-20s %u\n", "context length", hp->n_ctx_train);
    fprintf(out, "    %-20s %u\n", "embedding length", hp->n_embd);
    fprintf(out, "    %-20s %s\n", "quantization", rvl_bench_file_type(f, ftype, sizeof ftype));
    fprintf(out, "\n  This chat\n");
    const char *base = strrchr(st->model_path, '/');
    fprintf(out, "    %-20s %s\n", "file", base ? base + 1 : st->model_path);
    fprintf(out, "    %-20s %u tokens (-c)\n", "context size", st->n_ctx);
    fprintf(out, "    %-20s %s\n", "template", rvl_chat_describe(st->tmpl));
    fprintf(out, "    %-20s %s\n", "KV cache", cli_kv_describe(st->kv));
}

static slash_status slash_show(chat_state *st, const char *arg)
{
    if (!*arg || strcmp(arg, "info") == 0) {
        show_info(st);
    } else if (strcmp(arg, "parameters") == 0) {
        chat_settings_print(st, st->info);
    } else if (strcmp(arg, "system") == 0) {
        return slash_system(st, "");
    } else if (strcmp(arg, "template") == 0) {
        fprintf(st->info, "%s\n", rvl_chat_describe(st->tmpl));
    } else if (strcmp(arg, "license") == 0) {
        const rvl_kv *kv = rvl_file_find_kv(rvl_model_file(st->model), "general.license");
        rvl_str lic;
        if (kv && rvl_kv_get_str(kv, &lic) == 0)
            fprintf(st->info, "%.*s\n", (int)lic.len, lic.ptr);
        else
            fprintf(st->info, "(the model file names no license: general.license)\n");
    } else if (strcmp(arg, "modelfile") == 0) {
        chat_fail(st, "/show modelfile: ruvllm has no Modelfiles (/show info, /show parameters, "
             "/show system, /show template)");
    } else {
        chat_fail(st, "/show: unknown '%s' (info, parameters, system, template, license)", arg);
    }
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
    {"show", "[WHAT]", "info (the model, the default), parameters, system, template, license", slash_show},
    {"exit", "", "leave (also Ctrl-D)", slash_exit},
    {"quit", "", "leave", slash_exit},
    /* ollama's names */
    {"bye", "", "leave (ollama's /bye)", slash_exit},
    {"clear", "", "start a new conversation (ollama's /clear; as /reset)", slash_reset},
    {"?", "", "show the commands (ollama's /?)", slash_help},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

const char *const *chat_slash_names(void)
{
    static const char *names[N_COMMANDS + 1];
    for (size_t i = 0; i < N_COMMANDS; i++)
        names[i] = commands[i].name;
    return names;
}

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
    for (size_t i = 0; i < CHAT_N_SETTINGS; i++)
        fprintf(st->info, " %s,", chat_setting_name(i));
    fprintf(st->info, " seed.\n");
    fprintf(st->info, "As ollama: /set parameter NAME VALUE (temperature, top_k, top_p, min_p, seed, "
                      "num_predict, repeat_penalty, repeat_last_n, stop ...), /set system TEXT, "
                      "/set verbose, /set quiet.\n");
    if (st->interactive)
        fprintf(st->info, "Multi-line messages: end a line with \\ to continue it, or write the "
                      "message between lines of \"\"\".\nCtrl-C stops a reply; Ctrl-D leaves.\n");
    return SLASH_OK;
}

/* A line starting with '/': run it. */
slash_status chat_slash_run(chat_state *st, const char *line)
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
            chat_fail(st, "unknown command '/%s'; did you mean '/%s'? (/help lists the commands)", word,
                 s);
        else
            chat_fail(st, "unknown command '/%s' (/help lists the commands; //TEXT sends a message "
                 "that starts with '/')", word);
    }
    free(a);
    fflush(st->info);
    return res;
}
