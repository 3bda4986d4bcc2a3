/*
 * completion.c - bash, zsh and fish completions, generated from the command
 * list and the option tables. The files in completions/ are this output;
 * tests/cli/t0002-docs.sh checks they are current ('make completions'
 * regenerates them) and that they complete.
 *
 * What completes where:
 *   ruvllm <TAB>                the commands (and help, --help, --version)
 *   ruvllm help <TAB>           the commands
 *   an option's argument        its choices (OPT_CHOICE), files or directories;
 *                               -m/--model: files and the model store's names
 *                               (`ruvllm list --names`, nothing when it fails);
 *                               --chat-template: the built-in templates and files;
 *                               llama.cpp's -ctk/-ctv: the KV cache types
 *   a positional                by the command's synopsis: a word "a|b|c" is a
 *                               choice (bench kernels|model|ppl), TYPE a weight
 *                               type (the quantization mixes), NAME a model
 *                               in the store (rm NAME...), anything else
 *                               the command's pos_compl (files, directories)
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ruvllm_tools.h"

/* Help text safe inside shell single quotes and zsh [...] descriptions. */
static void put_safe(FILE *out, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '\'': fputc('`', out); break;
        case '[': fputc('(', out); break;
        case ']': fputc(')', out); break;
        case ':': fputs(" -", out); break;
        case '\\': fputc('/', out); break;
        default: fputc(*s, out);
        }
    }
}

static void put_ident(FILE *out, const char *name)
{
    for (; *name; name++)
        fputc(*name == '-' ? '_' : *name, out);
}

/* ======================================================================
 * What to complete
 * ====================================================================== */

typedef enum {
    W_NONE,      /* nothing (a number, free text) */
    W_FILE,
    W_DIR,
    W_WORDS,     /* the words in `words` */
    W_MODEL,     /* files and the store's model names */
    W_TEMPLATE,  /* the built-in chat templates and files */
    W_NAMES,     /* the store's model names alone */
} wkind;

typedef struct {
    wkind kind;
    char words[2048];  /* W_WORDS: space-separated */
} wspec;

static void words_add(wspec *w, const char *word)
{
    size_t l = strlen(w->words);
    snprintf(w->words + l, sizeof w->words - l, "%s%s", l ? " " : "", word);
}

static void words_choices(wspec *w, const char *choices)
{
    w->kind = W_WORDS;
    w->words[0] = 0;
    snprintf(w->words, sizeof w->words, "%s", choices);
    for (char *p = w->words; *p; p++)
        if (*p == '|')
            *p = ' ';
}

/* the weight types `quantize IN OUT TYPE` takes: the library's mixes */
static void words_types(wspec *w)
{
    w->kind = W_WORDS;
    w->words[0] = 0;
    for (size_t i = 0; rvl_qmix_at(i); i++)
        words_add(w, rvl_qmix_at(i)->name);
}

/* the built-in chat templates, by the library's names */
static const char *template_names(void)
{
    static char buf[1024];
    if (!buf[0])
        for (int f = 1; f < RVL_CHAT_FAMILY_COUNT; f++) {
            size_t l = strlen(buf);
            snprintf(buf + l, sizeof buf - l, "%s%s", l ? " " : "", rvl_chat_family_name((rvl_chat_family)f));
        }
    return buf;
}

static wspec opt_words(const rvl_opt *o)
{
    wspec w = {W_NONE, ""};
    if (o->kind == OPT_FLAG)
        return w;
    if (!strcmp(o->lng, "model"))
        w.kind = W_MODEL;
    else if (!strcmp(o->lng, "chat-template"))
        w.kind = W_TEMPLATE;
    else if (o->kind == OPT_CHOICE)
        words_choices(&w, o->choices);
    else if (o->compl == COMPL_FILE)
        w.kind = W_FILE;
    else if (o->compl == COMPL_DIR)
        w.kind = W_DIR;
    return w;
}

static wkind pos_kind(const rvl_cmd *c)
{
    return c->pos_compl == COMPL_FILE ? W_FILE : c->pos_compl == COMPL_DIR ? W_DIR : W_NONE;
}

/* llama.cpp's spellings of the KV cache types (llama-cli -ctk/-ctv), for
 * a command that has our --kv-type-k/--kv-type-v: `alias` completes as
 * `ours` does. Emitted only when the table does not name them itself. */
static const struct { const char *alias, *ours; } KV_ALIASES[] = {
    {"-ctk", "kv-type-k"}, {"--cache-type-k", "kv-type-k"},
    {"-ctv", "kv-type-v"}, {"--cache-type-v", "kv-type-v"},
};

static const rvl_opt *find_opt(const rvl_cmd *c, const char *lng)
{
    for (const rvl_opt *o = c->opts; o->lng; o++)
        if (!strcmp(o->lng, lng))
            return o;
    return NULL;
}

/* the alias's option when the command has ours and not the alias */
static const rvl_opt *kv_alias(const rvl_cmd *c, size_t i)
{
    const char *a = KV_ALIASES[i].alias;
    if (a[1] == '-' && find_opt(c, a + 2))
        return NULL;
    if (a[1] != '-' && find_opt(c, a + 1))
        return NULL;
    return find_opt(c, KV_ALIASES[i].ours);
}
#define N_KV_ALIASES (sizeof KV_ALIASES / sizeof KV_ALIASES[0])

/* The positional slots of a synopsis ("kernels|model|ppl [options]",
 * "[options] IN OUT TYPE", "FILE [-m MODEL] ..."): what is not in
 * brackets, not "options", not an option or its argument. */
#define MAX_SLOTS 8
typedef struct {
    wspec slot[MAX_SLOTS];
    int n;
    bool repeat;  /* the last slot takes every further positional */
} slots;

static void synopsis_slots(const rvl_cmd *c, slots *s)
{
    char buf[512];
    int depth = 0;
    bool skip_arg = false;
    s->n = 0;
    s->repeat = false;
    snprintf(buf, sizeof buf, "%s", c->synopsis ? c->synopsis : "");
    for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) {
        bool bracketed = depth > 0 || t[0] == '[';
        for (const char *p = t; *p; p++)
            depth += *p == '[' ? 1 : *p == ']' ? -1 : 0;
        if (bracketed || !strcmp(t, "options"))
            continue;
        if (t[0] == '-') {
            skip_arg = true;
            continue;
        }
        if (skip_arg) {
            skip_arg = false;
            continue;
        }
        if (s->n == MAX_SLOTS)
            break;
        wspec *w = &s->slot[s->n++];
        size_t l = strlen(t);
        s->repeat = l > 3 && !strcmp(t + l - 3, "...");
        if (s->repeat)
            t[l - 3] = 0;
        if (strchr(t, '|'))
            words_choices(w, t);
        else if (!strcmp(t, "TYPE"))
            words_types(w);
        else if (!strcmp(t, "NAME"))
            w->kind = W_NAMES, w->words[0] = 0;
        else
            w->kind = pos_kind(c), w->words[0] = 0;
    }
}

/* ======================================================================
 * bash
 * ====================================================================== */

static void bash_action(FILE *out, const wspec *w)
{
    switch (w->kind) {
    case W_NONE: break;
    case W_FILE: fprintf(out, "COMPREPLY=($(compgen -f -- \"$cur\"))"); break;
    case W_DIR: fprintf(out, "COMPREPLY=($(compgen -d -- \"$cur\"))"); break;
    case W_WORDS: fprintf(out, "COMPREPLY=($(compgen -W \"%s\" -- \"$cur\"))", w->words); break;
    case W_MODEL: fprintf(out, "_ruvllm_models"); break;
    case W_TEMPLATE: fprintf(out, "_ruvllm_templates"); break;
    case W_NAMES: fprintf(out, "_ruvllm_names"); break;
    }
    if (w->kind != W_NONE)
        fprintf(out, "; ");
}

static void bash_cmd(FILE *out, const rvl_cmd *c)
{
    fprintf(out, "    %s)\n        case $prev in\n", c->name);
    for (const rvl_opt *o = c->opts; o->lng; o++) {
        if (o->kind == OPT_FLAG)
            continue;
        wspec w = opt_words(o);
        fprintf(out, "            ");
        if (o->shrt)
            fprintf(out, "-%c|", o->shrt);
        fprintf(out, "--%s) ", o->lng);
        bash_action(out, &w);
        fprintf(out, "return ;;\n");
    }
    for (size_t i = 0; i < N_KV_ALIASES; i++) {
        const rvl_opt *o = kv_alias(c, i);
        if (!o)
            continue;
        wspec w = opt_words(o);
        fprintf(out, "            %s) ", KV_ALIASES[i].alias);
        bash_action(out, &w);
        fprintf(out, "return ;;\n");
    }
    fprintf(out, "        esac\n        if [[ $cur == -* ]]; then\n"
                 "            COMPREPLY=($(compgen -W \"");
    for (const rvl_opt *o = c->opts; o->lng; o++) {
        if (o->shrt)
            fprintf(out, "-%c ", o->shrt);
        fprintf(out, "--%s ", o->lng);
    }
    fprintf(out, "\" -- \"$cur\"))\n            return\n        fi\n");

    slots s;
    synopsis_slots(c, &s);
    wspec rest = {pos_kind(c), ""};
    fprintf(out, "        case $(_ruvllm_npos $cmdi");
    for (const rvl_opt *o = c->opts; o->lng; o++)
        if (o->kind != OPT_FLAG) {
            if (o->shrt)
                fprintf(out, " -%c", o->shrt);
            fprintf(out, " --%s", o->lng);
        }
    for (size_t i = 0; i < N_KV_ALIASES; i++)
        if (kv_alias(c, i))
            fprintf(out, " %s", KV_ALIASES[i].alias);
    fprintf(out, ") in\n");
    for (int k = 0; k < s.n; k++) {
        fprintf(out, "            %d%s) ", k, k == s.n - 1 && s.repeat ? "|*" : "");
        bash_action(out, &s.slot[k]);
        fprintf(out, ";;\n");
    }
    if (!(s.n && s.repeat)) {
        fprintf(out, "            *) ");
        bash_action(out, s.n ? &(wspec){W_NONE, ""} : &rest);
        fprintf(out, ";;\n");
    }
    fprintf(out, "        esac\n        ;;\n");
}

static void bash(FILE *out)
{
    fprintf(out, "# bash completion for ruvllm. Generated by 'ruvllm __completion bash'; do not edit.\n\n");
    fprintf(out, "# the model store's names, when this ruvllm has a store\n"
                 "_ruvllm_models() {\n"
                 "    COMPREPLY=($(compgen -f -- \"$cur\") $(compgen -W \"$(ruvllm list --names 2>/dev/null)\" -- \"$cur\"))\n"
                 "}\n\n"
                 "_ruvllm_names() {\n"
                 "    COMPREPLY=($(compgen -W \"$(ruvllm list --names 2>/dev/null)\" -- \"$cur\"))\n"
                 "}\n\n"
                 "_ruvllm_templates() {\n"
                 "    COMPREPLY=($(compgen -W \"%s\" -- \"$cur\") $(compgen -f -- \"$cur\"))\n"
                 "}\n\n", template_names());
    fprintf(out, "# _ruvllm_npos FIRST OPTION...: how many positionals the words from FIRST to\n"
                 "# the cursor hold, skipping the options and the values of those named\n"
                 "_ruvllm_npos() {\n"
                 "    local i=$1 n=0 w takes\n"
                 "    shift\n"
                 "    takes=\" $* \"\n"
                 "    for ((; i < COMP_CWORD; i++)); do\n"
                 "        w=${COMP_WORDS[i]}\n"
                 "        case $w in\n"
                 "            --*=*) ;;\n"
                 "            -*) [[ $takes == *\" $w \"* ]] && ((i++)) ;;\n"
                 "            *) ((n++)) ;;\n"
                 "        esac\n"
                 "    done\n"
                 "    echo $n\n"
                 "}\n\n");
    fprintf(out, "_ruvllm() {\n"
                 "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
                 "    local base=${COMP_WORDS[0]##*/} cmd= cmdi=1 i\n"
                 "    if [[ $base == ruvllm-* ]]; then\n"
                 "        cmd=${base#ruvllm-}\n"
                 "    else\n"
                 "        for ((i = 1; i < COMP_CWORD; i++)); do\n"
                 "            case ${COMP_WORDS[i]} in -*) ;; *) cmd=${COMP_WORDS[i]}; cmdi=$((i + 1)); break ;; esac\n"
                 "        done\n"
                 "    fi\n"
                 "    local cmds=\"");
    for (int i = 0; i < cli_n_commands; i++)
        fprintf(out, "%s ", cli_commands[i]->name);
    fprintf(out, "help\"\n"
                 "    if [[ -z $cmd ]]; then\n"
                 "        COMPREPLY=($(compgen -W \"$cmds --help --version\" -- \"$cur\"))\n"
                 "        return\n"
                 "    fi\n"
                 "    case $cmd in\n"
                 "    help)\n"
                 "        [[ $(_ruvllm_npos $cmdi) == 0 ]] && COMPREPLY=($(compgen -W \"$cmds\" -- \"$cur\"))\n"
                 "        ;;\n");
    for (int i = 0; i < cli_n_commands; i++)
        bash_cmd(out, cli_commands[i]);
    fprintf(out, "    esac\n}\ncomplete -o filenames -o bashdefault -F _ruvllm ruvllm");
    for (int i = 0; i < cli_n_commands; i++)
        fprintf(out, " ruvllm-%s", cli_commands[i]->name);
    fprintf(out, "\n");
}

/* ======================================================================
 * zsh
 * ====================================================================== */

static void zsh_action(FILE *out, const wspec *w)
{
    switch (w->kind) {
    case W_NONE: fputs(" ", out); break;
    case W_FILE: fputs("_files", out); break;
    case W_DIR: fputs("_files -/", out); break;
    case W_WORDS: fprintf(out, "(%s)", w->words); break;
    case W_MODEL: fputs("_ruvllm_models", out); break;
    case W_TEMPLATE: fputs("_ruvllm_templates", out); break;
    case W_NAMES: fputs("_ruvllm_names", out); break;
    }
}

static void zsh_opt(FILE *out, const rvl_opt *o, const char *alias)
{
    bool rep = o->kind == OPT_LIST, flag = o->kind == OPT_FLAG;
    fprintf(out, "        ");
    if (alias)
        fprintf(out, "'%s%s[", alias, flag ? "" : "+");
    else if (o->shrt)
        fprintf(out, "'%s(-%c --%s)'{-%c%s,--%s%s}'[", rep ? "*" : "", o->shrt, o->lng, o->shrt,
                flag ? "" : "+", o->lng, flag ? "" : "=");
    else
        fprintf(out, "'%s--%s%s[", rep ? "*" : "", o->lng, flag ? "" : "=");
    put_safe(out, o->help);
    fprintf(out, "]");
    if (!flag) {
        wspec w = opt_words(o);
        fprintf(out, ":");
        put_safe(out, o->argname ? o->argname : "VALUE");
        fprintf(out, ":");
        zsh_action(out, &w);
    }
    fprintf(out, "' \\\n");
}

static void zsh_cmd(FILE *out, const rvl_cmd *c)
{
    fprintf(out, "_ruvllm_");
    put_ident(out, c->name);
    fprintf(out, "() {\n    _arguments -s -S \\\n");
    for (const rvl_opt *o = c->opts; o->lng; o++)
        zsh_opt(out, o, NULL);
    for (size_t i = 0; i < N_KV_ALIASES; i++) {
        const rvl_opt *o = kv_alias(c, i);
        if (o)
            zsh_opt(out, o, KV_ALIASES[i].alias);
    }
    slots s;
    synopsis_slots(c, &s);
    for (int k = 0; k < s.n; k++) {
        if (k == s.n - 1 && s.repeat)
            fprintf(out, "        '*:argument:");
        else
            fprintf(out, "        '%d:argument:", k + 1);
        zsh_action(out, &s.slot[k]);
        fprintf(out, "'%s\n", k == s.n - 1 ? "" : " \\");
    }
    if (!s.n) {
        wspec rest = {pos_kind(c), ""};
        fprintf(out, "        '*:argument:");
        zsh_action(out, &rest);
        fprintf(out, "'\n");
    }
    fprintf(out, "}\n\n");
}

static void zsh(FILE *out)
{
    fprintf(out, "#compdef ruvllm");
    for (int i = 0; i < cli_n_commands; i++)
        fprintf(out, " ruvllm-%s", cli_commands[i]->name);
    fprintf(out, "\n# zsh completion for ruvllm. Generated by 'ruvllm __completion zsh'; do not edit.\n\n");
    fprintf(out, "# model files, and the model store's names when this ruvllm has a store\n"
                 "_ruvllm_models() {\n"
                 "    local -a names\n"
                 "    names=(${(f)\"$(_call_program models ruvllm list --names 2>/dev/null)\"})\n"
                 "    _alternative 'files:model file:_files' 'models:model name:compadd -a names'\n"
                 "}\n\n"
                 "_ruvllm_names() {\n"
                 "    local -a names\n"
                 "    names=(${(f)\"$(_call_program models ruvllm list --names 2>/dev/null)\"})\n"
                 "    compadd -a names\n"
                 "}\n\n"
                 "_ruvllm_templates() {\n"
                 "    _alternative 'templates:built-in template:(%s)' 'files:template file:_files'\n"
                 "}\n\n", template_names());
    for (int i = 0; i < cli_n_commands; i++)
        zsh_cmd(out, cli_commands[i]);
    fprintf(out, "_ruvllm() {\n"
                 "    local base=${words[1]:t}\n"
                 "    if [[ $base == ruvllm-* ]]; then\n"
                 "        _ruvllm_${${base#ruvllm-}//-/_}\n"
                 "        return\n"
                 "    fi\n"
                 "    local -a cmds\n"
                 "    cmds=(\n");
    for (int i = 0; i < cli_n_commands; i++) {
        fprintf(out, "        '%s:", cli_commands[i]->name);
        put_safe(out, cli_commands[i]->summary);
        fprintf(out, "'\n");
    }
    fprintf(out, "        'help:show the help of a command'\n    )\n"
                 "    if (( CURRENT == 2 )); then\n"
                 "        _describe -t commands 'ruvllm command' cmds\n"
                 "        return\n"
                 "    fi\n"
                 "    shift words\n"
                 "    (( CURRENT-- ))\n"
                 "    if [[ $words[1] == help ]]; then\n"
                 "        (( CURRENT == 2 )) && _describe -t commands 'ruvllm command' cmds\n"
                 "        return\n"
                 "    fi\n"
                 "    local c=${words[1]//-/_}\n"
                 "    (( $+functions[_ruvllm_$c] )) && _ruvllm_$c\n"
                 "}\n\n_ruvllm \"$@\"\n");
}

/* ======================================================================
 * fish
 * ====================================================================== */

static void fish_action(FILE *out, const wspec *w)
{
    switch (w->kind) {
    case W_NONE: fputs(" -x", out); break;
    case W_FILE: case W_DIR: fputs(" -r -F", out); break;
    case W_WORDS: fprintf(out, " -x -a '%s'", w->words); break;
    case W_MODEL: fputs(" -r -F -a '(__ruvllm_models)'", out); break;
    case W_TEMPLATE: fprintf(out, " -r -F -a '%s'", template_names()); break;
    case W_NAMES: fputs(" -x -a '(__ruvllm_models)'", out); break;
    }
}

static void fish_opts(FILE *out, const rvl_cmd *c, const char *prog, const char *cond)
{
    for (const rvl_opt *o = c->opts; o->lng; o++) {
        fprintf(out, "complete -c %s", prog);
        if (cond)
            fprintf(out, " -n '__fish_seen_subcommand_from %s'", cond);
        if (o->shrt)
            fprintf(out, " -s %c", o->shrt);
        fprintf(out, " -l %s", o->lng);
        if (o->kind != OPT_FLAG) {
            wspec w = opt_words(o);
            fish_action(out, &w);
        }
        fprintf(out, " -d '");
        put_safe(out, o->help);
        fprintf(out, "'\n");
    }
    for (size_t i = 0; i < N_KV_ALIASES; i++) {
        const rvl_opt *o = kv_alias(c, i);
        if (!o)
            continue;
        const char *a = KV_ALIASES[i].alias;
        wspec w = opt_words(o);
        fprintf(out, "complete -c %s", prog);
        if (cond)
            fprintf(out, " -n '__fish_seen_subcommand_from %s'", cond);
        fprintf(out, a[1] == '-' ? " -l %s" : " -o %s", a[1] == '-' ? a + 2 : a + 1);
        fish_action(out, &w);
        fprintf(out, " -d 'llama.cpp spelling of --%s'\n", o->lng);
    }
}

/* The positional slots of c, for `prog` (ruvllm or a ruvllm-CMD link). */
static void fish_slots(FILE *out, const rvl_cmd *c, const char *prog)
{
    slots s;
    synopsis_slots(c, &s);
    if (!s.n) {
        if (c->pos_compl != COMPL_NONE)
            fprintf(out, "complete -c %s -n '__ruvllm_pos %s 0+' -F\n", prog, c->name);
        return;
    }
    for (int k = 0; k < s.n; k++) {
        const wspec *w = &s.slot[k];
        if (w->kind == W_NONE)
            continue;
        fprintf(out, "complete -c %s -n '__ruvllm_pos %s %d%s'", prog, c->name, k,
                k == s.n - 1 && s.repeat ? "+" : "");
        if (w->kind == W_WORDS)
            fprintf(out, " -a '%s'", w->words);
        else if (w->kind == W_NAMES || w->kind == W_MODEL)
            fprintf(out, " -a '(__ruvllm_models)'%s", w->kind == W_MODEL ? " -F" : "");
        else
            fprintf(out, " -F");
        fprintf(out, "\n");
    }
}

static void fish(FILE *out)
{
    fprintf(out, "# fish completion for ruvllm. Generated by 'ruvllm __completion fish'; do not edit.\n");
    fprintf(out, "\n# the model store's names, when this ruvllm has a store\n"
                 "function __ruvllm_models\n"
                 "    ruvllm list --names 2>/dev/null\n"
                 "end\n"
                 "\n# __ruvllm_pos CMD K...: true when the positionals after CMD before the cursor\n"
                 "# number one of K (N+: N or more); the values of CMD's options that take one\n"
                 "# ($__ruvllm_takes_CMD) are not positionals\n"
                 "function __ruvllm_pos\n"
                 "    set -l cmd $argv[1]\n"
                 "    set -l toks (commandline -opc)\n"
                 "    set -l takes\n"
                 "    set -l var __ruvllm_takes_(string replace -a -- - _ $cmd)\n"
                 "    set -q $var; and set takes $$var\n"
                 "    set -l n -1\n"
                 "    if test (string replace -r '.*/' '' -- $toks[1]) = ruvllm-$cmd\n"
                 "        set n 0\n"
                 "    end\n"
                 "    set -l skip 0\n"
                 "    for t in $toks[2..-1]\n"
                 "        if test $skip = 1\n"
                 "            set skip 0\n"
                 "        else if test $n = -1\n"
                 "            string match -q -- '-*' $t; or begin; test $t = $cmd; and set n 0; or return 1; end\n"
                 "        else if string match -q -- '--*=*' $t\n"
                 "        else if string match -q -- '-*' $t\n"
                 "            contains -- $t $takes; and set skip 1\n"
                 "        else\n"
                 "            set n (math $n + 1)\n"
                 "        end\n"
                 "    end\n"
                 "    test $n = -1; and return 1\n"
                 "    for k in $argv[2..-1]\n"
                 "        if string match -q -- '*+' $k\n"
                 "            test $n -ge (string trim -r -c + -- $k); and return 0\n"
                 "        else\n"
                 "            test $n = $k; and return 0\n"
                 "        end\n"
                 "    end\n"
                 "    return 1\n"
                 "end\n\n");
    fprintf(out, "complete -c ruvllm -f\n");
    fprintf(out, "complete -c ruvllm -n __fish_use_subcommand -l help -d 'show help'\n");
    fprintf(out, "complete -c ruvllm -n __fish_use_subcommand -l version -d 'show version'\n");
    fprintf(out, "complete -c ruvllm -n __fish_use_subcommand -a help -d 'show the help of a command'\n");
    for (int i = 0; i < cli_n_commands; i++) {
        const rvl_cmd *c = cli_commands[i];
        fprintf(out, "complete -c ruvllm -n __fish_use_subcommand -a %s -d '", c->name);
        put_safe(out, c->summary);
        fprintf(out, "'\n");
    }
    fprintf(out, "complete -c ruvllm -n '__ruvllm_pos help 0' -a '");
    for (int i = 0; i < cli_n_commands; i++)
        fprintf(out, "%s%s", i ? " " : "", cli_commands[i]->name);
    fprintf(out, "'\n");
    for (int i = 0; i < cli_n_commands; i++) {
        const rvl_cmd *c = cli_commands[i];
        char prog[64];
        fprintf(out, "\n# %s\nset -g __ruvllm_takes_", c->name);
        put_ident(out, c->name);
        for (const rvl_opt *o = c->opts; o->lng; o++)
            if (o->kind != OPT_FLAG) {
                if (o->shrt)
                    fprintf(out, " -%c", o->shrt);
                fprintf(out, " --%s", o->lng);
            }
        for (size_t k = 0; k < N_KV_ALIASES; k++)
            if (kv_alias(c, k))
                fprintf(out, " %s", KV_ALIASES[k].alias);
        fprintf(out, "\n");
        fish_opts(out, c, "ruvllm", c->name);
        fish_slots(out, c, "ruvllm");
        snprintf(prog, sizeof prog, "ruvllm-%s", c->name);
        fprintf(out, "complete -c %s -f\n", prog);
        fish_opts(out, c, prog, NULL);
        fish_slots(out, c, prog);
    }
}

int cli_print_completion(const char *shell, FILE *out)
{
    if (!strcmp(shell, "bash"))
        bash(out);
    else if (!strcmp(shell, "zsh"))
        zsh(out);
    else if (!strcmp(shell, "fish"))
        fish(out);
    else {
        cli_err(NULL, "__completion: unknown shell '%s' (bash, zsh, fish)", shell);
        return EXIT_USAGE;
    }
    return 0;
}
