/*
 * opt.c - the option table: parsing, --help, suggestions (man pages:
 * man.c).
 *
 * One table per command (see cli.h) is the single source for parsing,
 * `--help`, the man page OPTIONS section and the shell completions.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ====================================================================
 * Errors
 * ==================================================================== */

void cli_err(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "ruvllm%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

_Noreturn void cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "ruvllm%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fprintf(stderr, "try 'ruvllm %s%s--help' for more information\n", cmd ? cmd : "",
            cmd ? " " : "");
    exit(EXIT_USAGE);
}

int cli_exit_code(int rc)
{
    return rc == RVL_EINTR ? EXIT_INTERRUPTED : EXIT_RUNTIME;
}

int cli_fail(const char *cmd, int rc)
{
    const char *m = rvl_errmsg();
    cli_err(cmd, "%s", *m ? m : rvl_strerror(rc));
    return cli_exit_code(rc);
}

/* ====================================================================
 * Suggestions: optimal string alignment distance (Damerau-Levenshtein
 * with adjacent transpositions), as git's "did you mean".
 * ==================================================================== */

static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return 1000;
    int d[65][65];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v)
                v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    }
    return d[la][lb];
}

const char *cli_suggest(const char *word, const char *const *cands)
{
    const char *best = NULL;
    int bestd = 1000;
    size_t wl = strlen(word);

    for (int i = 0; cands[i]; i++) {
        int d = edit_distance(word, cands[i]);
        /* a unique prefix is as good as a small typo */
        if (wl >= 2 && strncmp(cands[i], word, wl) == 0 && d > 1)
            d = 1;
        if (d < bestd) {
            bestd = d;
            best = cands[i];
        }
    }
    int limit = wl <= 3 ? 1 : wl <= 6 ? 2 : 3;
    return bestd <= limit ? best : NULL;
}

/* ====================================================================
 * Parsing
 * ==================================================================== */

static const rvl_opt *find_long(const rvl_cmd *cmd, const char *name, size_t len)
{
    for (const rvl_opt *o = cmd->opts; o->lng; o++)
        if (strlen(o->lng) == len && strncmp(o->lng, name, len) == 0)
            return o;
    return NULL;
}

static const rvl_opt *find_short(const rvl_cmd *cmd, char c)
{
    for (const rvl_opt *o = cmd->opts; o->lng; o++)
        if (o->shrt && o->shrt == c)
            return o;
    return NULL;
}

static void unknown_long(const rvl_cmd *cmd, const char *name, size_t len)
{
    const char *cands[128];
    char word[128];
    char spelled[130];
    int n = 0;

    snprintf(word, sizeof word, "%.*s", (int)(len < 100 ? len : 100), name);
    for (const rvl_opt *o = cmd->opts; o->lng && n < 127; o++)
        cands[n++] = o->lng;
    cands[n] = NULL;
    const char *s = cli_suggest(word, cands);
    snprintf(spelled, sizeof spelled, "--%s", word);
    if (s)
        cli_usage(cmd->name, "unknown option '%s'; did you mean '--%s'?", spelled, s);
    cli_usage(cmd->name, "unknown option '%s'", spelled);
}

static void opt_name(const rvl_opt *o, char *buf, size_t cap)
{
    snprintf(buf, cap, "--%s", o->lng);
}

static void set_value(const rvl_cmd *cmd, const rvl_opt *o, const char *arg)
{
    char nm[64];
    opt_name(o, nm, sizeof nm);

    switch (o->kind) {
    case OPT_FLAG:
        *(bool *)o->value = true;
        break;
    case OPT_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(arg, &end, 10);
        if (!*arg || *end || errno)
            cli_usage(cmd->name, "%s: '%s' is not an integer", nm, arg);
        if ((double)v < o->min || (double)v > o->max)
            cli_usage(cmd->name, "%s: %lld is out of range [%.0f, %.0f]", nm, v, o->min, o->max);
        *(long long *)o->value = v;
        break;
    }
    case OPT_FLOAT: {
        char *end;
        errno = 0;
        double v = strtod(arg, &end);
        if (!*arg || *end || errno || !isfinite(v))
            cli_usage(cmd->name, "%s: '%s' is not a number", nm, arg);
        if (v < o->min || v > o->max)
            cli_usage(cmd->name, "%s: %g is out of range [%g, %g]", nm, v, o->min, o->max);
        *(double *)o->value = v;
        break;
    }
    case OPT_STRING:
        *(const char **)o->value = arg;
        break;
    case OPT_CHOICE: {
        const char *p = o->choices;
        size_t al = strlen(arg);
        while (p && *p) {
            const char *bar = strchr(p, '|');
            size_t l = bar ? (size_t)(bar - p) : strlen(p);
            if (l == al && strncmp(p, arg, l) == 0) {
                *(const char **)o->value = arg;
                return;
            }
            p = bar ? bar + 1 : NULL;
        }
        cli_usage(cmd->name, "%s: '%s' is not one of %s", nm, arg, o->choices);
    }
    case OPT_LIST: {
        opt_list *l = o->value;
        if (l->n == l->cap) {
            int nc = l->cap ? l->cap * 2 : 8;
            const char **ni = realloc(l->items, sizeof *ni * (size_t)nc);
            if (!ni) {
                cli_err(cmd->name, "out of memory");
                exit(EXIT_RUNTIME);
            }
            l->items = ni;
            l->cap = nc;
        }
        l->items[l->n++] = arg;
        break;
    }
    }
}

void cli_parse(rvl_cmd *cmd, int argc, char **argv, int *npos)
{
    int np = 0;
    bool only_pos = false;

    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == 0) {
            argv[np++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        if (a[1] == '-') {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            const rvl_opt *o = find_long(cmd, name, len);
            if (!o)
                unknown_long(cmd, name, len);
            if (strcmp(o->lng, "help") == 0) {
                cli_print_help(cmd, stdout);
                exit(0);
            }
            if (o->kind == OPT_FLAG) {
                if (eq)
                    cli_usage(cmd->name, "option '--%s' takes no value", o->lng);
                set_value(cmd, o, NULL);
                continue;
            }
            const char *arg = eq ? eq + 1 : NULL;
            if (!arg) {
                if (i + 1 >= argc)
                    cli_usage(cmd->name, "option '--%s' needs a value (%s)", o->lng, o->argname);
                arg = argv[++i];
            }
            set_value(cmd, o, arg);
            continue;
        }
        /* one or more short options: -vq, -n5, -n 5 */
        for (const char *p = a + 1; *p; p++) {
            const rvl_opt *o = find_short(cmd, *p);
            if (!o) {
                if (*p == '-')
                    cli_usage(cmd->name, "unknown option '%s'", a);
                cli_usage(cmd->name, "unknown option '-%c'", *p);
            }
            if (o->shrt == 'h' && strcmp(o->lng, "help") == 0) {
                cli_print_help(cmd, stdout);
                exit(0);
            }
            if (o->kind == OPT_FLAG) {
                set_value(cmd, o, NULL);
                continue;
            }
            const char *arg = p[1] ? p + 1 : NULL;
            if (!arg) {
                if (i + 1 >= argc)
                    cli_usage(cmd->name, "option '-%c' needs a value (%s)", *p, o->argname);
                arg = argv[++i];
            }
            set_value(cmd, o, arg);
            break;
        }
    }
    if (np < cmd->min_pos)
        cli_usage(cmd->name, "missing argument: usage: ruvllm %s %s", cmd->name, cmd->synopsis);
    if (cmd->max_pos >= 0 && np > cmd->max_pos)
        cli_usage(cmd->name, "unexpected argument '%s'", argv[cmd->max_pos]);
    argv[np] = NULL;
    *npos = np;
}

/* ====================================================================
 * --help
 * ==================================================================== */

static void opt_label(const rvl_opt *o, char *buf, size_t cap)
{
    char arg[64] = "";
    if (o->kind != OPT_FLAG)
        snprintf(arg, sizeof arg, " %s", o->argname ? o->argname : "VALUE");
    if (o->shrt)
        snprintf(buf, cap, "-%c, --%s%s", o->shrt, o->lng, arg);
    else
        snprintf(buf, cap, "    --%s%s", o->lng, arg);
}

void cli_print_help(const rvl_cmd *cmd, FILE *out)
{
    char label[128];

    fprintf(out, "usage: ruvllm %s %s\n\n%s\n", cmd->name, cmd->synopsis, cmd->summary);
    fprintf(out, "\noptions:\n");
    for (const rvl_opt *o = cmd->opts; o->lng; o++) {
        opt_label(o, label, sizeof label);
        fprintf(out, "  %-28s %s", label, o->help);
        if (o->kind == OPT_CHOICE)
            fprintf(out, " (%s)", o->choices);
        if (o->def)
            fprintf(out, " [default: %s]", o->def);
        fputc('\n', out);
    }
    if (cmd->examples) {
        fprintf(out, "\nexamples:\n");
        const char *p = cmd->examples;
        while (*p) {
            const char *nl = strchr(p, '\n');
            size_t l = nl ? (size_t)(nl - p) : strlen(p);
            const char *tab = memchr(p, '\t', l);
            size_t cl = tab ? (size_t)(tab - p) : l;
            fprintf(out, "  %.*s\n", (int)cl, p);
            p += l + (nl ? 1 : 0);
        }
    }
    fprintf(out, "\nSee 'man ruvllm-%s' for details.\n", cmd->name);
}

rvl_kv_type cli_kv_type(const char *choice)
{
    int t = rvl_kv_type_parse(choice);
    return t < 0 ? RVL_KV_F16 : (rvl_kv_type)t;
}

void cli_kv_params(const cli_kv_opts *kv, rvl_ctx_params *cp)
{
    cp->kv_type = cli_kv_type(kv->type);
    cp->kv_split = kv->type_k || kv->type_v;
    cp->kv_type_k = kv->type_k ? cli_kv_type(kv->type_k) : cp->kv_type;
    cp->kv_type_v = kv->type_v ? cli_kv_type(kv->type_v) : cp->kv_type;
    cp->kv_hot = (uint32_t)kv->hot;
    cp->kv_warm = (uint32_t)kv->warm;
    cp->kv_cold = !kv->cold ? 0 : strcmp(kv->cold, "q4") == 0 ? RVL_KV_Q4 : RVL_KV_TQ4;
}

void cli_sample_params(const cli_sample_opts *so, uint64_t seed, rvl_sampler_params *sp)
{
    rvl_sampler_defaults(sp);
    sp->seed = seed;
    sp->temp = (float)so->temp;
    sp->top_k = (int32_t)so->top_k;
    sp->top_p = (float)so->top_p;
    sp->min_p = (float)so->min_p;
    sp->repeat_penalty = (float)so->repeat_penalty;
    sp->repeat_last_n = (int32_t)so->repeat_last_n;
    sp->freq_penalty = (float)so->freq_penalty;
    sp->presence_penalty = (float)so->presence_penalty;
}

int cli_backend_refuse(const rvl_ctx *c, const char *option)
{
    if (!option || strcmp(rvl_ctx_backend(c), "cpu") == 0)
        return 0;
    return rvl_seterr(RVL_EUNSUPPORTED, "%s is not supported by the %s backend (cpu only)", option,
                      rvl_ctx_backend(c));
}

int cli_model_open(rvl_model **m, const char *path, double expert_budget_mib)
{
    const rvl_model_params p = {.expert_budget = (uint64_t)(expert_budget_mib * 1048576.0)};
    return rvl_model_open_params(m, path, &p);
}

/* "1.50 GiB", "12.3 MiB", "96.0 KiB" */
static const char *size_str(char *buf, size_t cap, double b)
{
    if (b >= 1024.0 * 1048576)
        snprintf(buf, cap, "%.2f GiB", b / (1024.0 * 1048576));
    else if (b >= 1048576)
        snprintf(buf, cap, "%.2f MiB", b / 1048576);
    else
        snprintf(buf, cap, "%.1f KiB", b / 1024);
    return buf;
}

void cli_expert_stats(FILE *out, const char *lead, const rvl_model *m)
{
    rvl_expert_stats st;
    char a[24], b[24], c[24], d[24], e[24];
    if (!rvl_model_hparams(m)->block.moe)
        return;
    rvl_model_expert_stats(m, &st);
    if (st.resident) {
        fprintf(out, "%sresident, %s\n", lead, size_str(a, sizeof a, (double)st.total_bytes));
        return;
    }
    const uint64_t look = st.hits + st.misses;
    fprintf(out, "%sstreamed, budget %s of %s (%u slots of %s) | hit rate %.1f%% (%llu hits, "
            "%llu misses; %llu read ahead, %llu of them used) | read %s, %s per token\n", lead,
            size_str(a, sizeof a, (double)st.budget), size_str(b, sizeof b, (double)st.total_bytes),
            st.slots, size_str(c, sizeof c, (double)st.expert_bytes),
            look ? 100.0 * (double)st.hits / (double)look : 0.0, (unsigned long long)st.hits,
            (unsigned long long)st.misses, (unsigned long long)st.prefetched,
            (unsigned long long)st.prefetch_hits, size_str(d, sizeof d, (double)st.bytes_read),
            size_str(e, sizeof e, st.tokens ? (double)st.bytes_read / (double)st.tokens : 0.0));
    if (st.read_errors)
        fprintf(out, "%s%llu reads failed (the mapping's bytes used instead)\n", lead,
                (unsigned long long)st.read_errors);
}

const char *cli_kv_describe(const cli_kv_opts *kv)
{
    static char buf[160];
    rvl_ctx_params cp = {0};
    cli_kv_params(kv, &cp);
    char part[2][72];
    const rvl_kv_type t[2] = {cp.kv_type_k, cp.kv_type_v};
    for (int i = 0; i < 2; i++) {
        if (t[i] == RVL_KV_TIERED)
            snprintf(part[i], sizeof part[i], "tiered (%u f16, %u q8, %s)",
                     cp.kv_hot ? cp.kv_hot : 256, cp.kv_warm ? cp.kv_warm : 2048,
                     cp.kv_cold == RVL_KV_Q4 ? "q4" : "tq4");
        else
            snprintf(part[i], sizeof part[i], "%s", rvl_kv_type_name(t[i]));
    }
    if (strcmp(part[0], part[1]) == 0)
        snprintf(buf, sizeof buf, "%s", part[0]);
    else
        snprintf(buf, sizeof buf, "keys %s, values %s", part[0], part[1]);
    return buf;
}

int cli_reasoning(const char *choice)
{
    return !choice ? -1 : strcmp(choice, "on") == 0;
}
