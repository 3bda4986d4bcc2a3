/*
 * cli.h - what every command file shares: the typed option table, the
 * command descriptor, and error/exit helpers.
 *
 * Exit codes: 0 success, 1 runtime error, 2 usage error, 130 interrupted.
 */
#ifndef RVL_CLI_H
#define RVL_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ruvllm.h"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

typedef enum {
    OPT_FLAG,    /* bool, no argument */
    OPT_INT,     /* long long within [min, max] */
    OPT_FLOAT,   /* double within [min, max] */
    OPT_STRING,  /* const char * */
    OPT_CHOICE,  /* const char *, one of `choices` ("a|b|c") */
    OPT_LIST,    /* repeatable string: appended to an opt_list */
} opt_kind;

/* How a shell should complete an option's argument or a positional. */
typedef enum { COMPL_NONE, COMPL_FILE, COMPL_DIR } compl_kind;

typedef struct {
    const char **items;
    int n, cap;
} opt_list;

typedef struct {
    opt_kind kind;
    char shrt;             /* 0: long only */
    const char *lng;       /* without the dashes */
    const char *argname;   /* NULL for flags */
    const char *help;      /* one line */
    const char *def;       /* default shown in --help/man; NULL: none */
    void *value;           /* bool*, long long*, double*, const char**, opt_list* */
    double min, max;       /* for INT and FLOAT */
    const char *choices;   /* for CHOICE */
    compl_kind compl;
} rvl_opt;

/* Another tool's spelling of an option (llama.cpp's, llama-server's,
 * llama-bench's, ollama's): what it means here. Looked up as a whole word
 * ("-ngl", "--n-gpu-layers", "-p") after the command's own options and
 * before one-dash words are read as bundles of short options ("-vq",
 * "-n5"): the command's table first, then cli_aliases_common (opt.c). */
typedef enum {
    ALIAS_OPTION,  /* our option `to`, with its value when it takes one */
    ALIAS_JOIN,    /* our option `to`, given the next two values as "A:B" (--lora-scaled F S) */
    ALIAS_ACCEPT,  /* what ruvllm always does: accepted and its values skipped; `say` (if
                      any) is a note on stderr */
    ALIAS_REFUSE,  /* not here: exit 2 with `say`, one sentence saying what to do instead */
} cli_alias_kind;

typedef struct {
    const char *names;     /* every spelling, dashes included: "-sys|--system-prompt" */
    cli_alias_kind kind;
    const char *to;        /* OPTION, JOIN: our long option (the entry is skipped by a
                              command without it) */
    int nval;              /* ACCEPT, REFUSE: values that follow (-1: one optional value,
                              taken when it is one of `when`) */
    const char *when;      /* ACCEPT, REFUSE: NULL, or "a|b": with nval 1 the entry holds
                              only for these values; with nval -1 the values taken.
                              OPTION: the argument's name in --help (NULL: our option's) */
    const char *say;
} cli_alias;
#define ALIAS_END {NULL, 0, NULL, 0, NULL, NULL}
/* The spellings every command understands when it has the option they
 * mean, and those no command has (opt.c). */
extern const cli_alias cli_aliases_common[];

struct rvl_cmd;
/* For each spelling that names one of cmd's options (the command's table,
 * then the shared one): fn(ud, "-sys, --system-prompt", "TEXT",
 * "--system TEXT"); the argument is "" for a flag. --help lists them;
 * cmd/man.c writes them as the man page's OTHER SPELLINGS section. */
typedef void (*cli_alias_fn)(void *ud, const char *names, const char *arg, const char *ours);
void cli_alias_each(const struct rvl_cmd *cmd, cli_alias_fn fn, void *ud);

typedef struct rvl_cmd {
    const char *name;         /* from commands.def, set at start-up */
    const char *summary;      /* from commands.def */
    const char *synopsis;     /* after "ruvllm NAME ": e.g. "[options] FILE..." */
    const char *description;  /* paragraphs separated by blank lines */
    const char *man_extra;    /* extra man sections in roff, or NULL */
    const char *examples;     /* lines "command\tcomment", or NULL */
    rvl_opt *opts;            /* terminated by an entry with lng == NULL */
    const cli_alias *aliases; /* other tools' spellings (ALIAS_END-terminated), or NULL */
    compl_kind pos_compl;     /* what positionals are */
    int min_pos, max_pos;     /* max_pos < 0: unlimited */
    int (*main)(struct rvl_cmd *cmd, int argc, char **argv);
} rvl_cmd;

/* Every command's table ends with this: -h/--help is common to all. */
#define OPT_END {OPT_FLAG, 'h', "help", NULL, "show this help and exit", NULL, NULL, 0, 0, NULL, COMPL_NONE}, \
                {0, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, COMPL_NONE}

/* Parse argv[1..] by cmd->opts; positionals are compacted into argv and
 * their count returned in *npos (argv[0..npos-1]). On a usage error this
 * prints the message and exits 2; on --help prints help and exits 0. */
void cli_parse(rvl_cmd *cmd, int argc, char **argv, int *npos);

void cli_print_help(const rvl_cmd *cmd, FILE *out);
void cli_print_man(const rvl_cmd *cmd, FILE *out);

/* "ruvllm CMD: message" on stderr. */
void cli_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the message and exits 2 (adds "try 'ruvllm CMD --help'"). */
_Noreturn void cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Map an RVL_E* code to an exit status (RVL_EINTR -> 130, else 1). */
int cli_exit_code(int rc);
/* Print rvl_errmsg() for a failed lib call and return the exit status. */
int cli_fail(const char *cmd, int rc);

/* The closest of `cands` (NULL-terminated) to `word`, or NULL. */
const char *cli_suggest(const char *word, const char *const *cands);

/* All commands, from commands.def. */
extern rvl_cmd *const cli_commands[];
extern const int cli_n_commands;
rvl_cmd *cli_find(const char *name);

#define CMD(name, ident, summary) extern rvl_cmd cmd_##ident##_desc;
#include "commands.def"
#undef CMD

/* Shared options for commands that take a model. */
#define OPT_MODEL(var) {OPT_STRING, 'm', "model", "FILE", \
    "model file (default: $RUVLLM_MODEL, then the cached default model)", NULL, &(var), 0, 0, NULL, COMPL_FILE}

/* The sampling options run and chat share (names, ranges and defaults as
 * llama.cpp's), in this order: --temp, --top-k, --top-p, --min-p,
 * --repeat-penalty, --repeat-last-n, --frequency-penalty,
 * --presence-penalty. Each field is named as rvl_sampler_params's.
 * CLI_SAMPLE_DEFAULTS are the defaults --help shows (keep the two in
 * step); cli_sample_params makes a sampler's parameters of the options
 * and a seed. */
typedef struct {
    double temp, top_p, min_p, repeat_penalty, freq_penalty, presence_penalty;
    long long top_k, repeat_last_n;
} cli_sample_opts;
#define CLI_SAMPLE_DEFAULTS {.temp = 0.8, .top_k = 40, .top_p = 0.95, .min_p = 0.05, \
    .repeat_penalty = 1.0, .repeat_last_n = 64, .freq_penalty = 0, .presence_penalty = 0}
#define OPT_SAMPLE(so) \
    {OPT_FLOAT, 0, "temp", "T", "sampling temperature (0: greedy)", "0.8", &(so).temp, 0, 100, NULL, COMPL_NONE}, \
    {OPT_INT, 0, "top-k", "K", "keep the K most likely tokens (0: off)", "40", &(so).top_k, 0, 1e9, NULL, COMPL_NONE}, \
    {OPT_FLOAT, 0, "top-p", "P", "keep the smallest set with probability >= P (1: off)", "0.95", &(so).top_p, 1e-9, 1, NULL, COMPL_NONE}, \
    {OPT_FLOAT, 0, "min-p", "P", "drop tokens less likely than P times the top one (0: off)", "0.05", &(so).min_p, 0, 1, NULL, COMPL_NONE}, \
    {OPT_FLOAT, 0, "repeat-penalty", "X", "penalize repeated tokens (1: off)", "1.0", &(so).repeat_penalty, 1e-6, 100, NULL, COMPL_NONE}, \
    {OPT_INT, 0, "repeat-last-n", "N", "window of tokens the penalties look at", "64", &(so).repeat_last_n, 0, 1e6, NULL, COMPL_NONE}, \
    {OPT_FLOAT, 0, "frequency-penalty", "X", "subtract X times a token's count in the window", "0", &(so).freq_penalty, -100, 100, NULL, COMPL_NONE}, \
    {OPT_FLOAT, 0, "presence-penalty", "X", "subtract X from tokens present in the window", "0", &(so).presence_penalty, -100, 100, NULL, COMPL_NONE}
void cli_sample_params(const cli_sample_opts *so, uint64_t seed, rvl_sampler_params *sp);

/* The KV cache options run, chat and bench share (lib/engine/kvcache.h), in
 * this order: --kv-type, --kv-type-k, --kv-type-v, --kv-hot, --kv-warm,
 * --kv-cold. cli_kv_params puts them into a context's parameters;
 * cli_kv_type turns one --kv-type value into an rvl_kv_type (NULL: f16). */
typedef struct {
    const char *type, *type_k, *type_v, *cold;
    long long hot, warm;                  /* 0: the library's default */
} cli_kv_opts;
#define CLI_KV_TYPES "f16|f32|q8|q4|tq4|tq3|tiered"
#define OPT_KV(kv) \
    {OPT_CHOICE, 0, "kv-type", "TYPE", "KV cache format: f16 (as llama.cpp), f32 (exact), q8, q4 (KIVI), tq4, tq3 (TurboQuant), tiered (f16, then q8, then --kv-cold)", "f16", &(kv).type, 0, 0, CLI_KV_TYPES, COMPL_NONE}, \
    {OPT_CHOICE, 0, "kv-type-k", "TYPE", "KV cache format of the keys only (default: --kv-type)", NULL, &(kv).type_k, 0, 0, CLI_KV_TYPES, COMPL_NONE}, \
    {OPT_CHOICE, 0, "kv-type-v", "TYPE", "KV cache format of the values only (default: --kv-type)", NULL, &(kv).type_v, 0, 0, CLI_KV_TYPES, COMPL_NONE}, \
    {OPT_INT, 0, "kv-hot", "N", "tiered: the newest N tokens stay in f16 (whole pages of 32)", "256", &(kv).hot, 1, 1 << 20, NULL, COMPL_NONE}, \
    {OPT_INT, 0, "kv-warm", "N", "tiered: the next N tokens are kept in q8, older ones in --kv-cold", "2048", &(kv).warm, 1, 1 << 20, NULL, COMPL_NONE}, \
    {OPT_CHOICE, 0, "kv-cold", "TYPE", "tiered: format of the oldest tokens (default tq4; q8 for a latent (MLA) cache, which takes no 4-bit format)", NULL, &(kv).cold, 0, 0, "q4|tq4", COMPL_NONE}
rvl_kv_type cli_kv_type(const char *choice);
/* One KV format as the user gave it (ours, or llama.cpp's name: q8_0 is q8):
 * our name, or a usage error saying what to use instead (exits 2). */
const char *cli_kv_name(const char *cmd, const char *nm, const char *arg);
void cli_kv_params(const cli_kv_opts *kv, rvl_ctx_params *cp);
/* "f16", "q8/f16", "tiered (256 f16, 2048 q8, tq4)": what a context's
 * options chose, for logs. Static buffer. */
const char *cli_kv_describe(const cli_kv_opts *kv);

/* --backend NAME (run and chat): rvl_ctx_params.backend (lib/ruvllm.h, Backends).
 * cli_backend_refuse: RVL_EUNSUPPORTED naming `option` when it is given
 * (non-NULL) and c runs on another backend than the CPU, whose cache only
 * it needs (session files, context shift); else 0. */
#define OPT_BACKEND(name) \
    {OPT_CHOICE, 0, "backend", "NAME", "compute backend: cpu, or metal (Apple GPUs; builds made with make METAL=1 on macOS)", "cpu", &(name), 0, 0, "cpu|metal", COMPL_NONE}
int cli_backend_refuse(const rvl_ctx *c, const char *option);

/* --expert-budget MIB (run, chat, bench model, bench ppl): the memory for a
 * mixture of experts' weights; the experts beyond it stay in the file and
 * are read as needed (rvl_model_params.expert_budget). The variable is 0
 * when not given: the library's default (available memory or
 * $RUVLLM_EXPERT_BUDGET). cli_model_open opens the model with it (the
 * library's error when it is below the model's minimum), loading on
 * `threads` threads (the command's -t; 0: one per CPU).
 * cli_expert_stats: the experts' line of --stats after `lead` (nothing
 * for a dense model). */
#define OPT_EXPERT_BUDGET(var) {OPT_FLOAT, 0, "expert-budget", "MIB", \
    "memory for a mixture of experts' weights, in MiB; experts beyond it are read from the file as needed, with the same results (default: from the memory available, or $RUVLLM_EXPERT_BUDGET)", \
    NULL, &(var), 1.0 / 1024, 1073741824.0, NULL, COMPL_NONE}
int cli_model_open(rvl_model **m, const char *path, double expert_budget_mib, int threads);
void cli_expert_stats(FILE *out, const char *lead, const rvl_model *m);

/* --context-shift and --keep N (run and chat). */
#define OPT_CONTEXT_SHIFT(shift, keep) \
    {OPT_FLAG, 0, "context-shift", NULL, "when the context fills, drop the oldest half of the tokens after the first --keep and continue (instead of stopping)", NULL, &(shift), 0, 0, NULL, COMPL_NONE}, \
    {OPT_INT, 0, "keep", "N", "with --context-shift: the first N tokens are never dropped (-1: the whole prompt)", "0", &(keep), -1, 1 << 20, NULL, COMPL_NONE}

/* --reasoning on|off (run and chat): whether a thinking model (Qwen3)
 * reasons before it answers, passed to the chat template as
 * enable_thinking (llama.cpp: --reasoning-budget -1|0). Not given: the
 * template's own default. cli_reasoning gives rvl_chat_set_thinking's
 * argument: -1 (not given), 0 (off) or 1 (on). */
#define OPT_REASONING(var) {OPT_CHOICE, 0, "reasoning", "on|off", \
    "thinking models (Qwen3): reason before answering (the chat template's enable_thinking; default: the template's, on for Qwen3)", \
    NULL, &(var), 0, 0, "on|off", COMPL_NONE}
int cli_reasoning(const char *choice);
/* --reasoning-effort low|medium|high (run and chat): gpt-oss's
 * reasoning_effort for its chat template (llama.cpp: --chat-template-kwargs
 * '{"reasoning_effort": ...}'). Not given: the template's default. */
#define OPT_REASONING_EFFORT(var) {OPT_CHOICE, 0, "reasoning-effort", "low|medium|high", \
    "gpt-oss: how long it reasons (the chat template's reasoning_effort; default: the template's, medium)", \
    NULL, &(var), 0, 0, "low|medium|high", COMPL_NONE}

/* --parallel N (run --batch): sequences decoded together by the
 * scheduler (rvl_sched_params.n_parallel; llama.cpp's -np/--parallel). */
#define OPT_PARALLEL(var) {OPT_INT, 0, "parallel", "N", \
    "sequences decoded together (each with its own KV cache of -c tokens; llama.cpp's --parallel)", \
    "4", &(var), 1, 256, NULL, COMPL_NONE}

/* --lora FILE[:SCALE], repeatable (cmd/cli_lora.c). */
#define OPT_LORA(var) {OPT_LIST, 0, "lora", "FILE[:SCALE]", \
    "apply a LoRA adapter (PEFT directory or GGUF LoRA file) at run time, times SCALE (default 1; repeatable)", \
    NULL, &(var), 0, 0, NULL, COMPL_FILE}
/* Load the --lora adapters for m and attach them to c (*out: the set, to
 * close after c; NULL without --lora). 0, or the exit status after
 * printing the error. */
int cli_lora_attach(const char *cmd, const opt_list *specs, const rvl_model *m, rvl_ctx *c,
                    rvl_lora **out);

#endif
