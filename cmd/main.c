/*
 * main.c - the ruvllm multi-call binary: dispatch by argv[0] (ruvllm-CMD
 * links) or by the first argument, global help and version, and the hidden
 * generators for man pages and shell completions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <readline/readline.h>
#include <utf8proc.h>
#include <xxhash.h>
#include <zstd.h>

#include "cli.h"

#ifndef RVL_GIT_REV
#define RVL_GIT_REV "unknown"
#endif

#define CMD(name, ident, summary) &cmd_##ident##_desc,
rvl_cmd *const cli_commands[] = {
#include "commands.def"
};
#undef CMD
const int cli_n_commands = (int)(sizeof cli_commands / sizeof cli_commands[0]);

/* Names and summaries are said once, in commands.def. */
static void init_commands(void)
{
    static const char *const names[] = {
#define CMD(name, ident, summary) name,
#include "commands.def"
#undef CMD
    };
    static const char *const summaries[] = {
#define CMD(name, ident, summary) summary,
#include "commands.def"
#undef CMD
    };
    for (int i = 0; i < cli_n_commands; i++) {
        cli_commands[i]->name = names[i];
        cli_commands[i]->summary = summaries[i];
    }
}

rvl_cmd *cli_find(const char *name)
{
    for (int i = 0; i < cli_n_commands; i++)
        if (strcmp(cli_commands[i]->name, name) == 0)
            return cli_commands[i];
    return NULL;
}

/* completion.c */
int cli_print_completion(const char *shell, FILE *out);
void cli_print_main_man(FILE *out);

static void print_main_help(FILE *out)
{
    fprintf(out, "usage: ruvllm COMMAND [options] [args]\n"
                 "       ruvllm-COMMAND [options] [args]\n\n"
                 "Local LLM inference tools.\n\ncommands:\n");
    for (int i = 0; i < cli_n_commands; i++)
        fprintf(out, "  %-12s %s\n", cli_commands[i]->name, cli_commands[i]->summary);
    fprintf(out, "\n  help CMD     show the help of a command\n"
                 "  --version    show version, build and CPU information\n\n"
                 "Run 'ruvllm COMMAND --help' for a command's options, 'man ruvllm' for more.\n");
}

static void print_version(void)
{
    const rvl_cpu_features *c = rvl_cpu();
    printf("ruvllm %s (git %s)\n", RVL_VERSION, RVL_GIT_REV);
#if defined(__clang__)
    printf("compiler: clang %s\n", __clang_version__);
#elif defined(__GNUC__)
    printf("compiler: gcc %s\n", __VERSION__);
#else
    printf("compiler: unknown\n");
#endif
    char pcre[32] = "";
    pcre2_config(PCRE2_CONFIG_VERSION, pcre);
    printf("libraries: zstd %s, xxhash %u.%u.%u, pcre2 %s, utf8proc %s, cjson %s, readline %s\n",
           ZSTD_versionString(), XXH_versionNumber() / 10000, XXH_versionNumber() / 100 % 100,
           XXH_versionNumber() % 100, pcre, utf8proc_version(), cJSON_Version(), rl_library_version);
    printf("features:");
#ifdef RVL_METAL
    printf(" metal");
#else
    printf(" -metal");
#endif
#ifdef RVL_CUDA
    printf(" cuda");
#else
    printf(" -cuda");
#endif
#ifdef __SANITIZE_ADDRESS__
    printf(" asan");
#endif
    printf("\n");
    printf("cpu:");
    if (c->avx) printf(" avx");
    if (c->avx2) printf(" avx2");
    if (c->fma) printf(" fma");
    if (c->f16c) printf(" f16c");
    if (c->avx512f) printf(" avx512f");
    if (c->avx512bw) printf(" avx512bw");
    if (c->avx512vl) printf(" avx512vl");
    if (c->avx512vnni) printf(" avx512vnni");
    if (c->avx512bf16) printf(" avx512bf16");
    if (c->neon) printf(" neon");
    if (c->dotprod) printf(" dotprod");
    printf("\nisa: %s (kernel variant selected at run time; RUVLLM_ISA overrides)\n",
           rvl_isa_selected());
}

static const char *const *command_names(void)
{
    static const char *names[64];
    int n = 0;
    for (int i = 0; i < cli_n_commands && n < 60; i++)
        names[n++] = cli_commands[i]->name;
    names[n++] = "help";
    names[n] = NULL;
    return names;
}

static int run_command(rvl_cmd *cmd, int argc, char **argv)
{
    int npos = 0;
    const char *isa = getenv("RUVLLM_ISA");
    if (isa && *isa && rvl_isa_check(isa) < 0) {
        cli_err(cmd->name, "%s", rvl_errmsg());
        return EXIT_USAGE;
    }
    cli_parse(cmd, argc, argv, &npos);
    rvl_interrupt_install();
    if (cmd->issue)
        return cli_not_implemented(cmd, npos, argv);
    return cmd->main(cmd, npos, argv);
}

static int unknown_command(const char *name)
{
    const char *s = cli_suggest(name, command_names());
    if (s)
        cli_err(NULL, "'%s' is not a command; did you mean '%s'?", name, s);
    else
        cli_err(NULL, "'%s' is not a command", name);
    fprintf(stderr, "try 'ruvllm --help' for the list of commands\n");
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    init_commands();
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];

    /* busybox-style: ruvllm-info ... */
    if (strncmp(base, "ruvllm-", 7) == 0) {
        rvl_cmd *cmd = cli_find(base + 7);
        if (!cmd)
            return unknown_command(base + 7);
        return run_command(cmd, argc, argv);
    }

    if (argc < 2) {
        print_main_help(stderr);
        return EXIT_USAGE;
    }
    const char *a = argv[1];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
        print_main_help(stdout);
        return 0;
    }
    if (!strcmp(a, "-V") || !strcmp(a, "--version") || !strcmp(a, "version")) {
        print_version();
        return 0;
    }
    if (!strcmp(a, "help")) {
        if (argc < 3) {
            print_main_help(stdout);
            return 0;
        }
        rvl_cmd *cmd = cli_find(argv[2]);
        if (!cmd)
            return unknown_command(argv[2]);
        cli_print_help(cmd, stdout);
        return 0;
    }
    /* hidden generators: man pages and completions come from the tables */
    if (!strcmp(a, "__man")) {
        if (argc < 3) {
            cli_print_main_man(stdout);
            return 0;
        }
        rvl_cmd *cmd = cli_find(argv[2]);
        if (!cmd)
            return unknown_command(argv[2]);
        cli_print_man(cmd, stdout);
        return 0;
    }
    if (!strcmp(a, "__completion"))
        return cli_print_completion(argc > 2 ? argv[2] : "", stdout);
    if (!strcmp(a, "__commands")) {
        for (int i = 0; i < cli_n_commands; i++)
            printf("%s\n", cli_commands[i]->name);
        return 0;
    }
    if (a[0] == '-') {
        static const char *const globals[] = {"help", "version", NULL};
        const char *s = a[1] == '-' ? cli_suggest(a + 2, globals) : NULL;
        if (s)
            cli_err(NULL, "unknown option '%s'; did you mean '--%s'?", a, s);
        else
            cli_err(NULL, "unknown option '%s'", a);
        fprintf(stderr, "try 'ruvllm --help' for more information\n");
        return EXIT_USAGE;
    }
    rvl_cmd *cmd = cli_find(a);
    if (!cmd)
        return unknown_command(a);
    return run_command(cmd, argc - 1, argv + 1);
}
