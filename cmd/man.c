/*
 * man.c - the man pages (roff), generated from the command list and the
 * option tables: ruvllm(1) from commands.def, ruvllm-CMD(1) from each
 * command's descriptor. man/ holds this output ('make man' regenerates it;
 * tests/cli/t0002-docs.sh checks it is current, t0220-man-lint.sh that
 * mandoc finds nothing to warn about).
 *
 * What reaches roff: text lines are escaped (\ - and a leading . or ')
 * and filled text is wrapped at 80 bytes; an option's tag (names and
 * argument) and an example's command are one text line each, in \f font
 * escapes rather than .B/.I macros, so that their quotes stay quotes.
 */
#include <stdarg.h>
#include <string.h>

#include "cli.h"

/* The date in the pages' .TH line: when their text last changed in
 * substance (mandoc and man-db want a date; a build date would make the
 * generated pages differ from one build to the next). */
#define MAN_DATE "2026-11-27"

#define MAN_WIDTH 80

typedef struct {
    FILE *out;
    size_t col;   /* bytes on the current output line */
} roff;

/* One character as roff text: `bol` when it starts an output line. */
static void put_esc(roff *r, char c, bool bol)
{
    if (c == '\\')
        fputs("\\e", r->out), r->col += 2;
    else if (c == '-')
        fputs("\\-", r->out), r->col += 2;
    else if (bol && (c == '.' || c == '\''))
        fputs("\\&", r->out), fputc(c, r->out), r->col += 3;
    else
        fputc(c, r->out), r->col++;
}

static size_t esc_len(const char *s, size_t n)
{
    size_t l = 0;
    for (size_t i = 0; i < n; i++)
        l += s[i] == '\\' || s[i] == '-' ? 2 : 1;
    return l;
}

/* Escaped text on the current line, unwrapped (tags, no-fill blocks). */
static void r_raw(roff *r, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put_esc(r, s[i], r->col == 0);
}

static void r_str(roff *r, const char *s) { r_raw(r, s, strlen(s)); }

/* Roff as given (requests, font escapes). */
static void r_put(roff *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void r_put(roff *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vfprintf(r->out, fmt, ap);
    va_end(ap);
    if (n > 0)
        r->col += (size_t)n;
    const char *nl = strrchr(fmt, '\n');
    if (nl && nl[1] == 0)
        r->col = 0;
}

static void r_endl(roff *r)
{
    if (r->col)
        fputc('\n', r->out);
    r->col = 0;
}

/* A request on a line of its own. */
static void r_req(roff *r, const char *req)
{
    r_endl(r);
    fputs(req, r->out);
    fputc('\n', r->out);
}

/* Filled text: escaped, broken at spaces so that lines stay within
 * MAN_WIDTH bytes (a word longer than that gets a line of its own). */
static void r_fill(roff *r, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && s[i] == ' ')
            i++;
        size_t w = i;
        while (w < n && s[w] != ' ')
            w++;
        if (w == i)
            break;
        size_t len = esc_len(s + i, w - i);
        if (r->col && r->col + 1 + len > MAN_WIDTH)
            r_endl(r);
        else if (r->col)
            fputc(' ', r->out), r->col++;
        r_raw(r, s + i, w - i);
        i = w;
    }
}

static void r_fills(roff *r, const char *s) { r_fill(r, s, strlen(s)); }

/* One word of roff as given (font escapes), placed as r_fill places words. */
static void r_word(roff *r, const char *w)
{
    size_t len = strlen(w);
    if (r->col && r->col + 1 + len > MAN_WIDTH)
        r_endl(r);
    else if (r->col)
        fputc(' ', r->out), r->col++;
    fputs(w, r->out);
    r->col += len;
}

/* Hand-written roff (a command's man_extra): text lines longer than
 * MAN_WIDTH are broken at a space outside no-fill blocks; requests and
 * no-fill lines pass as they are. */
static void r_verbatim(roff *r, const char *s)
{
    bool nofill = false;
    r_endl(r);
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t l = nl ? (size_t)(nl - s) : strlen(s);
        if (l >= 3 && s[0] == '.' && (!strncmp(s, ".nf", 3) || !strncmp(s, ".EX", 3)))
            nofill = true;
        else if (l >= 3 && s[0] == '.' && (!strncmp(s, ".fi", 3) || !strncmp(s, ".EE", 3)))
            nofill = false;
        size_t start = 0;
        if (!nofill && s[0] != '.' && s[0] != '\'') {
            /* break at the last unescaped space that keeps a piece within width */
            while (l - start > MAN_WIDTH) {
                size_t cut = 0;
                for (size_t k = start + 1; k < start + MAN_WIDTH && k < l; k++)
                    if (s[k] == ' ' && s[k - 1] != '\\' && s[k + 1] != ' ' && s[k + 1] != '.' &&
                        s[k + 1] != '\'')
                        cut = k;
                if (!cut)
                    break;
                fwrite(s + start, 1, cut - start, r->out);
                fputc('\n', r->out);
                start = cut + 1;
            }
        }
        fwrite(s + start, 1, l - start, r->out);
        fputc('\n', r->out);
        s += l + (nl ? 1 : 0);
    }
    r->col = 0;
}

/* Paragraphs separated by blank lines; lines starting with two spaces are
 * shown verbatim (no fill, indented). */
static void r_paragraphs(roff *r, const char *s)
{
    bool in_pre = false;
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t l = nl ? (size_t)(nl - s) : strlen(s);
        bool pre = l >= 2 && s[0] == ' ' && s[1] == ' ';
        if (in_pre && !pre) {
            r_req(r, ".fi");
            r_req(r, ".RE");
            in_pre = false;
        }
        if (l == 0) {
            r_req(r, ".PP");
        } else if (pre) {
            if (!in_pre) {
                r_req(r, ".RS 4");
                r_req(r, ".nf");
                in_pre = true;
            }
            r_raw(r, s + 2, l - 2);
            r_endl(r);
        } else {
            r_fill(r, s, l);
        }
        s += l + (nl ? 1 : 0);
    }
    if (in_pre) {
        r_req(r, ".fi");
        r_req(r, ".RE");
    }
    r_endl(r);
}

/* "\fB\-m\fR, \fB\-\-model\fR \fIFILE\fR": the tag of an option, one line. */
static void r_opt_tag(roff *r, const rvl_opt *o)
{
    r_endl(r);
    if (o->shrt)
        r_put(r, "\\fB\\-%c\\fR, ", o->shrt);
    r_put(r, "\\fB\\-\\-");
    r_str(r, o->lng);
    r_put(r, "\\fR");
    if (o->kind != OPT_FLAG) {
        r_put(r, " \\fI");
        r_str(r, o->argname ? o->argname : "VALUE");
        r_put(r, "\\fR");
    }
    r_endl(r);
}

static void r_opt_body(roff *r, const rvl_opt *o)
{
    char buf[512];
    size_t hl = strlen(o->help);
    snprintf(buf, sizeof buf, "%s%s", o->help, hl && !strchr(".!?", o->help[hl - 1]) ? "." : "");
    r_fills(r, buf);
    if (o->kind == OPT_CHOICE) {
        r_fills(r, "One of:");
        snprintf(buf, sizeof buf, "%s", o->choices);
        for (char *p = buf; *p; p++)
            if (*p == '|')
                *p = ' ';
        for (char *w = strtok(buf, " "), *next; w; w = next) {
            next = strtok(NULL, " ");
            if (r->col + 1 + esc_len(w, strlen(w)) + 7 > MAN_WIDTH)
                r_endl(r);
            else
                r_put(r, " ");
            r_put(r, "\\fB");
            r_str(r, w);
            r_put(r, "\\fR%s", next ? "," : ".");
        }
    }
    if (o->def) {
        snprintf(buf, sizeof buf, "Default: %s.", o->def);
        r_fills(r, buf);
    }
    r_endl(r);
}

static void r_examples(roff *r, const char *p)
{
    r_req(r, ".SH EXAMPLES");
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        const char *tab = memchr(p, '\t', l);
        size_t cl = tab ? (size_t)(tab - p) : l;
        r_req(r, ".TP");
        r_put(r, "\\fB");
        r_raw(r, p, cl);
        r_put(r, "\\fR");
        r_endl(r);
        if (tab) {
            r_fill(r, tab + 1, l - cl - 1);
            r_endl(r);
        }
        p += l + (nl ? 1 : 0);
    }
}

static void r_th(roff *r, const char *title)
{
    r_put(r, ".TH ");
    for (const char *p = title; *p; p++)
        r_put(r, "%s", *p == '-' ? "\\-" : (char[2]){(char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p), 0});
    r_put(r, " 1 \"%s\" \"ruvllm %s\" \"ruvllm manual\"\n", MAN_DATE, RVL_VERSION);
}

static void r_exit_status(roff *r)
{
    r_req(r, ".SH EXIT STATUS");
    r_fills(r, "0 on success, 1 on a runtime error, 2 on a usage error, 130 when interrupted "
               "(Ctrl-C, SIGTERM, SIGHUP).");
    r_endl(r);
}

/* name, description: the ENVIRONMENT section of every command's page */
static const char *const ENVIRONMENT[][2] = {
    {"RUVLLM_MODEL", "Model used when -m is not given."},
    {"XDG_CACHE_HOME", "The default model lives in ${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/."},
    {"RUVLLM_ISA", "Force a kernel instruction set (ref, avx2, avx512, neon)."},
    {"RUVLLM_REPACK", "0: keep Q4_0, IQ4_NL, Q5_0, Q8_0, Q4_K and Q6_K weights in the file's "
                      "row-major layout instead of the 16-row packed layout (results differ by "
                      "float rounding only; for comparisons)."},
    {"RUVLLM_EXPERT_BUDGET", "The memory for a mixture of experts' weights in MiB when "
                             "--expert-budget is not given (default: MemAvailable less the rest of "
                             "the model, a 4096-token f16 KV cache and a margin of 10%, at least "
                             "512 MiB). Experts beyond it are read from the file as needed, with "
                             "the same results."},
    {"RUVLLM_EXPERT_PREFETCH", "Streamed experts: how the next layer's experts are read ahead: "
                               "router (default: the next layer's router on this layer's input), "
                               "repeat (those it chose for the previous token) or 0 (none)."},
    {"RUVLLM_MAX_INPUT", "The most bytes a prompt or text input is read to (an optional K, M or G "
                         "suffix; default 256M)."},
    {"NO_COLOR", "Disable colors."},
};

/* OTHER SPELLINGS: llama.cpp's names the command accepts (cmd/opt.c). */
typedef struct {
    roff *r;
    bool any;
} alias_page;

static void r_alias(void *ud, const char *names, const char *arg, const char *ours)
{
    alias_page *a = ud;
    roff *r = a->r;
    if (!a->any) {
        r_req(r, ".SH OTHER SPELLINGS");
        r_fills(r, "llama.cpp's spellings of these options are accepted too; its options ruvllm "
                   "does not have are refused with a sentence saying what to do instead "
                   "(docs/llama-cpp-options.md lists both).");
        a->any = true;
    }
    r_req(r, ".TP");
    r_put(r, "\\fB");
    r_str(r, names);
    r_put(r, "\\fR");
    if (arg[0]) {
        r_put(r, " \\fI");
        r_str(r, arg);
        r_put(r, "\\fR");
    }
    r_endl(r);
    r_put(r, "The same as \\fB");
    r_str(r, ours);
    r_put(r, "\\fR.");
    r_endl(r);
}

static void r_aliases(roff *r, const rvl_cmd *cmd)
{
    alias_page a = {r, false};
    cli_alias_each(cmd, r_alias, &a);
}

void cli_print_man(const rvl_cmd *cmd, FILE *out)
{
    roff r = {out, 0};
    char title[64];
    snprintf(title, sizeof title, "ruvllm-%s", cmd->name);

    r_put(&r, ".\\\" Generated by 'ruvllm __man %s' from the option table in cmd/;\n", cmd->name);
    r_put(&r, ".\\\" edit the source, then run 'make man'.\n");
    r_th(&r, title);
    r_req(&r, ".SH NAME");
    r_str(&r, title);
    r_put(&r, " \\- ");
    r_str(&r, cmd->summary);
    r_endl(&r);
    r_req(&r, ".SH SYNOPSIS");
    r_put(&r, "\\fBruvllm ");
    r_str(&r, cmd->name);
    r_put(&r, "\\fR");
    r_fills(&r, cmd->synopsis);
    r_endl(&r);
    r_req(&r, ".SH DESCRIPTION");
    r_paragraphs(&r, cmd->description);
    r_req(&r, ".SH OPTIONS");
    for (const rvl_opt *o = cmd->opts; o->lng; o++) {
        r_req(&r, ".TP");
        r_opt_tag(&r, o);
        r_opt_body(&r, o);
    }
    if (cmd->examples)
        r_examples(&r, cmd->examples);
    r_aliases(&r, cmd);
    if (cmd->man_extra)
        r_verbatim(&r, cmd->man_extra);
    r_exit_status(&r);
    r_req(&r, ".SH ENVIRONMENT");
    for (size_t i = 0; i < sizeof ENVIRONMENT / sizeof ENVIRONMENT[0]; i++) {
        r_req(&r, ".TP");
        r_put(&r, "\\fB");
        r_str(&r, ENVIRONMENT[i][0]);
        r_put(&r, "\\fR");
        r_endl(&r);
        r_fills(&r, ENVIRONMENT[i][1]);
        r_endl(&r);
    }
    r_req(&r, ".SH SEE ALSO");
    r_put(&r, ".BR ruvllm (1)\n");
}

void cli_print_main_man(FILE *out)
{
    roff r = {out, 0};
    r_put(&r, ".\\\" Generated by 'ruvllm __man' from cmd/commands.def; run 'make man'.\n");
    r_th(&r, "ruvllm");
    r_req(&r, ".SH NAME");
    r_put(&r, "ruvllm \\- local LLM inference tools\n");
    r_req(&r, ".SH SYNOPSIS");
    r_put(&r, "\\fBruvllm\\fR \\fICOMMAND\\fR [options] [args]\n.br\n"
              "\\fBruvllm\\-\\fICOMMAND\\fR [options] [args]\n.br\n"
              "\\fBruvllm \\-\\-help\\fR | \\fB\\-\\-version\\fR\n");
    r_req(&r, ".SH DESCRIPTION");
    r_fills(&r, "ruvllm runs large language models on the CPU from GGUF and Hugging Face "
                "safetensors files. It is one binary with several commands; each command can "
                "also be called through a link named");
    r_put(&r, " \\fBruvllm\\-\\fICOMMAND\\fR.");
    r_req(&r, ".PP");
    r_fills(&r, "Standard output carries only the product (generated text, JSON, tables); logs, "
                "progress and statistics go to standard error.");
    r_req(&r, ".SH COMMANDS");
    for (int i = 0; i < cli_n_commands; i++) {
        r_req(&r, ".TP");
        r_put(&r, ".BR ruvllm\\-%s (1)\n", cli_commands[i]->name);
        r_fills(&r, cli_commands[i]->summary);
        r_endl(&r);
    }
    r_req(&r, ".SH OPTIONS");
    r_req(&r, ".TP");
    r_put(&r, "\\fB\\-h\\fR, \\fB\\-\\-help\\fR\n");
    r_fills(&r, "List the commands.");
    r_req(&r, ".TP");
    r_put(&r, "\\fB\\-V\\fR, \\fB\\-\\-version\\fR\n");
    r_fills(&r, "Show the version, git revision, compiler, libraries, the compute backends this "
                "build has, the CPU's features and the kernel instruction set selected at run "
                "time.");
    r_req(&r, ".SH MODELS");
    r_fills(&r, "Commands that need a model take");
    r_word(&r, "\\fB\\-m\\fR");
    r_word(&r, "\\fIFILE\\fR;");
    r_fills(&r, "without it they use");
    r_word(&r, "\\fBRUVLLM_MODEL\\fR,");
    r_fills(&r, "then the default model");
    r_endl(&r);
    r_put(&r, "\\fI${XDG_CACHE_HOME:\\-$HOME/.cache}/ruvllm/models/");
    r_str(&r, RVL_DEFAULT_MODEL_FILE);
    r_put(&r, "\\fR.");
    r_endl(&r);
    r_exit_status(&r);
    r_req(&r, ".SH SEE ALSO");
    for (int i = 0; i < cli_n_commands; i++)
        r_put(&r, ".BR ruvllm\\-%s (1)%s\n", cli_commands[i]->name, i + 1 < cli_n_commands ? "," : "");
}
