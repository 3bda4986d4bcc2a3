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

/* "a|b|c" holds word (len bytes)? */
static bool in_bars(const char *bars, const char *word, size_t len)
{
    for (const char *p = bars; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == len && strncmp(p, word, l) == 0)
            return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

static void unknown_long(const rvl_cmd *cmd, const char *name, size_t len)
{
    const char *cands[160];
    char word[128];
    char spelled[130];
    int n = 0;

    snprintf(word, sizeof word, "%.*s", (int)(len < 100 ? len : 100), name);
    for (const rvl_opt *o = cmd->opts; o->lng && n < 159; o++)
        cands[n++] = o->lng;
    cands[n] = NULL;
    const char *s = cli_suggest(word, cands);
    snprintf(spelled, sizeof spelled, "--%s", word);
    if (s)
        cli_usage(cmd->name, "unknown option '%s'; did you mean '--%s'?", spelled, s);
    cli_usage(cmd->name, "unknown option '%s'", spelled);
}

/* The value of an OPT_CHOICE given in another tool's spelling of the same
 * thing: llama.cpp's cache types (q8_0 is our q8). */
static const struct {
    const char *from, *to;
} choice_synonyms[] = {
    {"q8_0", "q8"},
    {"q4_0", "q4"},
};

/* Cache types llama.cpp has and we do not: what to use instead (the
 * options whose choices are CLI_KV_TYPES). */
static const struct {
    const char *names, *say;
} kv_refused[] = {
    {"bf16", "the same size as f16, which is what to use (or f32, exact)"},
    {"q4_1|q5_0|q5_1|iq4_nl", "use q4 (4-bit with a scale and a minimum per group, as q4_1), "
                              "q8, or TurboQuant's tq4 and tq3"},
};

const char *cli_kv_name(const char *cmd, const char *nm, const char *arg)
{
    const size_t al = strlen(arg);
    if (rvl_kv_type_parse(arg) >= 0)
        return arg;
    for (size_t i = 0; i < sizeof choice_synonyms / sizeof choice_synonyms[0]; i++)
        if (strcmp(arg, choice_synonyms[i].from) == 0)
            return choice_synonyms[i].to;
    for (size_t i = 0; i < sizeof kv_refused / sizeof kv_refused[0]; i++)
        if (in_bars(kv_refused[i].names, arg, al))
            cli_usage(cmd, "%s: %s is not a KV cache format of ruvllm: %s", nm, arg,
                      kv_refused[i].say);
    cli_usage(cmd, "%s: '%s' is not one of %s", nm, arg, CLI_KV_TYPES);
}

static void set_value(const rvl_cmd *cmd, const rvl_opt *o, const char *nm, const char *arg)
{
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
        const size_t al = strlen(arg);
        if (in_bars(o->choices, arg, al)) {
            *(const char **)o->value = arg;
            return;
        }
        for (size_t i = 0; i < sizeof choice_synonyms / sizeof choice_synonyms[0]; i++)
            if (strcmp(arg, choice_synonyms[i].from) == 0 &&
                in_bars(o->choices, choice_synonyms[i].to, strlen(choice_synonyms[i].to))) {
                *(const char **)o->value = choice_synonyms[i].to;
                return;
            }
        if (strcmp(o->choices, CLI_KV_TYPES) == 0)
            cli_kv_name(cmd->name, nm, arg); /* says what to use instead */
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

/* ====================================================================
 * Other tools' spellings (cli_alias)
 * ==================================================================== */

#define NO_GPU "there are no layers to offload or devices to split over: ruvllm runs the whole " \
    "model on the CPU, or on an Apple GPU with --backend metal (run, chat); drop it"
#define SAMPLERS "ruvllm samples with --temp, --top-k, --top-p, --min-p and the repetition " \
    "penalties (--repeat-penalty, --frequency-penalty, --presence-penalty); drop it"
#define HF "download the model with 'ruvllm pull REPO[:QUANT]' once, then give -m NAME"
#define THREADS "ruvllm does not pin its threads: run it under taskset (taskset -c 0-3 ruvllm ...) " \
    "and give -t"
#define MOE "a mixture of experts' weights are on the CPU already; to keep fewer of them in " \
    "memory, give --expert-budget MIB (run, chat, bench)"
#define BATCH "ruvllm chooses its own batch sizes for the prompt (they change the speed, " \
    "never the result): drop it"

const cli_alias cli_aliases_common[] = {
    /* the same option under llama.cpp's name */
    {"-sys|--system-prompt", ALIAS_OPTION, "system", 0, NULL, NULL},
    {"-r|--reverse-prompt", ALIAS_OPTION, "stop", 0, NULL, NULL},
    {"--n-predict|--predict", ALIAS_OPTION, "max-tokens", 0, NULL, NULL},
    {"--temperature", ALIAS_OPTION, "temp", 0, NULL, NULL},
    {"-ctk|--cache-type-k", ALIAS_OPTION, "kv-type-k", 0, NULL, NULL},
    {"-ctv|--cache-type-v", ALIAS_OPTION, "kv-type-v", 0, NULL, NULL},
    {"--chat-template-file", ALIAS_OPTION, "chat-template", 0, "FILE", NULL},
    {"--lora-scaled", ALIAS_JOIN, "lora", 0, NULL, NULL},
    {"-sp", ALIAS_OPTION, "special", 0, NULL, NULL},
    {"-np", ALIAS_OPTION, "parallel", 0, NULL, NULL},
    {"-a", ALIAS_OPTION, "alias", 0, NULL, NULL},
    {"-v|--log-verbose", ALIAS_OPTION, "verbose", 0, NULL, NULL},
    /* what ruvllm always does */
    {"--jinja", ALIAS_ACCEPT, NULL, 0, NULL, NULL},
    {"-fa|--flash-attn", ALIAS_ACCEPT, NULL, 1, "off|0|false|disabled",
     "ruvllm's attention is always the fused (flash) kernel; -fa off changes nothing"},
    {"-fa|--flash-attn", ALIAS_ACCEPT, NULL, -1, "on|auto|1|true|enabled", NULL},
    {"-ngl|--n-gpu-layers|--gpu-layers", ALIAS_ACCEPT, NULL, 1, "0", NULL},
    {"--no-context-shift", ALIAS_ACCEPT, NULL, 0, NULL, NULL},
    {"--no-display-prompt", ALIAS_ACCEPT, NULL, 0, NULL, NULL},
    {"--no-warmup", ALIAS_ACCEPT, NULL, 0, NULL, NULL},
    /* not here */
    {"-ngl|--n-gpu-layers|--gpu-layers", ALIAS_REFUSE, NULL, 1, NULL, NO_GPU},
    {"-sm|--split-mode|-ts|--tensor-split|-mg|--main-gpu|-dev|--device|-ot|--override-tensor",
     ALIAS_REFUSE, NULL, 1, NULL, NO_GPU},
    {"-nkvo|--no-kv-offload|-kvo|--kv-offload|-nopo|--no-op-offload", ALIAS_REFUSE, NULL, 0, NULL,
     NO_GPU},
    {"-cmoe|--cpu-moe", ALIAS_REFUSE, NULL, 0, NULL, MOE},
    {"-ncmoe|--n-cpu-moe", ALIAS_REFUSE, NULL, 1, NULL, MOE},
    {"-ngld|--n-gpu-layers-draft|--gpu-layers-draft|-md|--model-draft|--draft|--draft-max|"
     "--draft-n|--draft-min|-devd|--device-draft", ALIAS_REFUSE, NULL, 1, NULL,
     "ruvllm has no speculative decoding with a draft model: drop it"},
    {"-hf|-hfr|--hf-repo|-hff|--hf-file|-mu|--model-url", ALIAS_REFUSE, NULL, 1, NULL, HF},
    {"-hft|--hf-token", ALIAS_REFUSE, NULL, 1, NULL,
     "ruvllm pull downloads public models without a token: drop it"},
    {"--mlock", ALIAS_REFUSE, NULL, 0, NULL,
     "ruvllm maps the model file and leaves its pages to the kernel (no locking): drop --mlock"},
    {"--no-mmap|--mmap", ALIAS_REFUSE, NULL, 0, NULL,
     "ruvllm always maps the model file (pages shared and read on demand): drop it"},
    {"-lm|--load-mode", ALIAS_REFUSE, NULL, 1, NULL,
     "ruvllm always maps the model file (pages shared and read on demand): drop it"},
    {"--numa", ALIAS_REFUSE, NULL, 1, NULL,
     "ruvllm places no memory by NUMA node: run it under numactl "
     "(numactl --interleave=all ruvllm ...)"},
    {"-b|--batch-size|-ub|--ubatch-size", ALIAS_REFUSE, NULL, 1, NULL, BATCH},
    {"-tb|--threads-batch", ALIAS_REFUSE, NULL, 1, NULL,
     "ruvllm uses the -t threads for the prompt and the generation alike: drop -tb"},
    {"-C|--cpu-mask|-Cr|--cpu-range|--cpu-strict|--prio|--poll", ALIAS_REFUSE, NULL, 1, NULL,
     THREADS},
    {"--mirostat|--mirostat-lr|--mirostat-ent|--typical|--typical-p|--top-nsigma|--xtc-probability|"
     "--xtc-threshold|--dry-multiplier|--dry-base|--dry-allowed-length|--dry-penalty-last-n|"
     "--dynatemp-range|--dynatemp-exp|--samplers|--sampling-seq|-l|--logit-bias",
     ALIAS_REFUSE, NULL, 1, NULL, SAMPLERS},
    {"--grammar|--grammar-file|-j|--json-schema|--json-schema-file", ALIAS_REFUSE, NULL, 1, NULL,
     "ruvllm has no constrained decoding (grammars, JSON schemas): drop it"},
    {"-mm|--mmproj|-mmu|--mmproj-url|--image|--audio", ALIAS_REFUSE, NULL, 1, NULL,
     "ruvllm runs text models only (no images or audio)"},
    {"--embedding|--embeddings|--rerank|--reranking", ALIAS_REFUSE, NULL, 0, NULL,
     "ruvllm generates text only (no embeddings or reranking)"},
    {"-sysf|--system-prompt-file", ALIAS_REFUSE, NULL, 1, NULL,
     "give the file's text with --system \"$(cat FILE)\""},
    {"--rope-freq-scale", ALIAS_REFUSE, NULL, 1, NULL,
     "give the context extension factor instead: --rope-scale 1/F (--rope-freq-scale 0.25 is "
     "--rope-scale 4)"},
    {"--no-jinja", ALIAS_REFUSE, NULL, 0, NULL,
     "ruvllm renders the model's Jinja template; for a built-in format instead give "
     "--chat-template NAME (chatml, llama3, ...)"},
    {"--prompt-cache-all|--prompt-cache-ro", ALIAS_REFUSE, NULL, 0, NULL,
     "ruvllm's --prompt-cache FILE keeps the prompt's cache and saves it back: drop it"},
    {"-dt|--defrag-thold", ALIAS_REFUSE, NULL, 1, NULL,
     "ruvllm's KV cache never needs defragmenting: drop it"},
    {"-i|--interactive|-if|--interactive-first|-cnv|--conversation", ALIAS_REFUSE, NULL, 0, NULL,
     "for a conversation use 'ruvllm chat' (the same -m, --system and sampling options)"},
    ALIAS_END
};

/* The first entry of `tab` spelled `word` whose values hold (next: the
 * value that follows, or NULL), and which this command can take. *spelled:
 * an OPTION entry spelled so, whose option the command lacks. */
static const cli_alias *alias_in(const rvl_cmd *cmd, const cli_alias *tab, const char *word,
                                 size_t wl, const char *next, const cli_alias **spelled)
{
    for (const cli_alias *al = tab; al && al->names; al++) {
        if (!in_bars(al->names, word, wl))
            continue;
        if (al->kind == ALIAS_OPTION || al->kind == ALIAS_JOIN) {
            if (!find_long(cmd, al->to, strlen(al->to))) {
                if (!*spelled)
                    *spelled = al;
                continue;
            }
        } else if (al->when && al->nval == 1 && (!next || !in_bars(al->when, next, strlen(next)))) {
            continue;
        }
        return al;
    }
    return NULL;
}

/* Strings made by ALIAS_JOIN: they live as long as the options. */
static char *joined[16];
static int n_joined;

/* Apply argv[*i] (`word`, its "=VALUE" part eq or NULL) as other tools'
 * spelling; false when it is none. */
static bool apply_alias(const rvl_cmd *cmd, const char *word, size_t wl, const char *eq, int argc,
                        char **argv, int *i)
{
    char w[64];
    snprintf(w, sizeof w, "%.*s", (int)(wl < 60 ? wl : 60), word);
    const char *next = eq ? eq : *i + 1 < argc ? argv[*i + 1] : NULL;
    const cli_alias *spelled = NULL;
    const cli_alias *al = alias_in(cmd, cmd->aliases, w, wl, next, &spelled);
    if (!al)
        al = alias_in(cmd, cli_aliases_common, w, wl, next, &spelled);
    if (!al) {
        if (spelled)
            cli_usage(cmd->name, "unknown option '%s' (llama.cpp's spelling of --%s, which "
                      "ruvllm %s does not have)", w, spelled->to, cmd->name);
        return false;
    }
    switch (al->kind) {
    case ALIAS_OPTION: {
        const rvl_opt *o = find_long(cmd, al->to, strlen(al->to));
        if (o->kind == OPT_FLAG) {
            if (eq)
                cli_usage(cmd->name, "option '%s' takes no value", w);
            set_value(cmd, o, w, NULL);
            return true;
        }
        if (!eq && *i + 1 >= argc)
            cli_usage(cmd->name, "option '%s' needs a value (%s)", w, o->argname);
        set_value(cmd, o, w, eq ? eq : argv[++*i]);
        return true;
    }
    case ALIAS_JOIN: {
        if (eq || *i + 2 >= argc)
            cli_usage(cmd->name, "option '%s' needs two values", w);
        const char *a = argv[*i + 1], *b = argv[*i + 2];
        char *j = n_joined < 16 ? malloc(strlen(a) + strlen(b) + 2) : NULL;
        if (!j)
            cli_usage(cmd->name, "%s: too many", w);
        sprintf(j, "%s:%s", a, b);
        joined[n_joined++] = j;
        *i += 2;
        set_value(cmd, find_long(cmd, al->to, strlen(al->to)), w, j);
        return true;
    }
    case ALIAS_ACCEPT:
        if (al->nval < 0) {
            if (eq && !in_bars(al->when, eq, strlen(eq)))
                cli_usage(cmd->name, "%s: '%s' is not one of %s", w, eq, al->when);
            if (!eq && next && in_bars(al->when, next, strlen(next)))
                ++*i;
        } else if (al->nval > 0 && !eq) {
            if (*i + al->nval >= argc)
                cli_usage(cmd->name, "option '%s' needs a value", w);
            *i += al->nval;
        }
        if (al->say)
            cli_err(cmd->name, "note: %s: %s", w, al->say);
        return true;
    case ALIAS_REFUSE:
        cli_usage(cmd->name, "%s: %s", w, al->say);
    }
    return false;
}

/* A word of one dash and several letters is read as short options
 * ("-vq", "-n5") only when it reads as such: every letter an option, and
 * a number for a numeric option's inline value ("-ngl" is not "-n gl"). */
static bool bundle_ok(const rvl_cmd *cmd, const char *a)
{
    for (const char *p = a + 1; *p; p++) {
        const rvl_opt *o = find_short(cmd, *p);
        if (!o)
            return false;
        if (o->kind == OPT_FLAG)
            continue;
        if (!p[1] || (o->kind != OPT_INT && o->kind != OPT_FLOAT))
            return true;
        char *end;
        errno = 0;
        (void)strtod(p + 1, &end);
        return !*end && !errno;
    }
    return true;
}

static void help_exit(rvl_cmd *cmd)
{
    cli_print_help(cmd, stdout);
    exit(0);
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
            if (!o) {
                if (apply_alias(cmd, a, len + 2, eq ? eq + 1 : NULL, argc, argv, &i))
                    continue;
                unknown_long(cmd, name, len);
            }
            if (strcmp(o->lng, "help") == 0)
                help_exit(cmd);
            char nm[80];
            snprintf(nm, sizeof nm, "--%s", o->lng);
            if (o->kind == OPT_FLAG) {
                if (eq)
                    cli_usage(cmd->name, "option '--%s' takes no value", o->lng);
                set_value(cmd, o, nm, NULL);
                continue;
            }
            const char *arg = eq ? eq + 1 : NULL;
            if (!arg) {
                if (i + 1 >= argc)
                    cli_usage(cmd->name, "option '--%s' needs a value (%s)", o->lng, o->argname);
                arg = argv[++i];
            }
            set_value(cmd, o, nm, arg);
            continue;
        }
        /* one dash: our short option, another tool's spelling as a whole
         * word ("-ngl", "-p"), or short options bundled: -vq, -n5, -n 5 */
        const size_t wl = strlen(a);
        if ((wl > 2 || !find_short(cmd, a[1])) && apply_alias(cmd, a, wl, NULL, argc, argv, &i))
            continue;
        if (wl > 2 && !bundle_ok(cmd, a))
            cli_usage(cmd->name, "unknown option '%s'", a);
        for (const char *p = a + 1; *p; p++) {
            const rvl_opt *o = find_short(cmd, *p);
            if (!o) {
                if (*p == '-')
                    cli_usage(cmd->name, "unknown option '%s'", a);
                cli_usage(cmd->name, "unknown option '-%c'", *p);
            }
            if (o->shrt == 'h' && strcmp(o->lng, "help") == 0)
                help_exit(cmd);
            char nm[80];
            snprintf(nm, sizeof nm, "--%s", o->lng);
            if (o->kind == OPT_FLAG) {
                set_value(cmd, o, nm, NULL);
                continue;
            }
            const char *arg = p[1] ? p + 1 : NULL;
            if (!arg) {
                if (i + 1 >= argc)
                    cli_usage(cmd->name, "option '-%c' needs a value (%s)", *p, o->argname);
                arg = argv[++i];
            }
            set_value(cmd, o, nm, arg);
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

/* ====================================================================
 * Other tools' spellings in --help and the man page
 * ==================================================================== */

void cli_alias_each(const rvl_cmd *cmd, cli_alias_fn fn, void *ud)
{
    const cli_alias *tabs[2] = {cmd->aliases, cli_aliases_common};
    for (int t = 0; t < 2; t++) {
        for (const cli_alias *al = tabs[t]; al && al->names; al++) {
            if (al->kind != ALIAS_OPTION && al->kind != ALIAS_JOIN)
                continue;
            const rvl_opt *o = find_long(cmd, al->to, strlen(al->to));
            if (!o)
                continue;
            char names[96], arg[48] = "", ours[96];
            size_t k = 0;
            for (const char *p = al->names; *p && k + 3 < sizeof names; p++) {
                if (*p == '|') {
                    names[k++] = ',';
                    names[k++] = ' ';
                } else {
                    names[k++] = *p;
                }
            }
            names[k] = 0;
            if (al->kind == ALIAS_JOIN)
                snprintf(arg, sizeof arg, "FILE SCALE");
            else if (o->kind != OPT_FLAG)
                snprintf(arg, sizeof arg, "%s", al->when ? al->when : o->argname ? o->argname : "VALUE");
            if (al->kind == ALIAS_JOIN)
                snprintf(ours, sizeof ours, "--%s FILE:SCALE", o->lng);
            else
                snprintf(ours, sizeof ours, "--%s%s%s", o->lng, arg[0] ? " " : "", arg);
            fn(ud, names, arg, ours);
        }
    }
}

typedef struct {
    FILE *out;
    bool any;
} alias_out;

static void help_alias(void *ud, const char *names, const char *arg, const char *ours)
{
    alias_out *a = ud;
    char label[160];
    if (!a->any)
        fputs("\nllama.cpp's spellings, also accepted:\n", a->out);
    a->any = true;
    snprintf(label, sizeof label, "%s%s%s", names, arg[0] ? " " : "", arg);
    fprintf(a->out, "  %-28s = %s\n", label, ours);
}

/* roff for the words of a spelling: dashes as \- (no other special
 * characters occur in them) */
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
    alias_out ao = {out, false};
    cli_alias_each(cmd, help_alias, &ao);
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

int cli_model_open(rvl_model **m, const char *path, double expert_budget_mib, int threads)
{
    const rvl_model_params p = {.expert_budget = (uint64_t)(expert_budget_mib * 1048576.0),
                                .n_threads = threads > 0 ? (uint32_t)threads : 0};
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
