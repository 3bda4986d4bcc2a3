/*
 * run.c - ruvllm run: one-shot generation for shell pipelines.
 *
 * Only the generated text goes to stdout, streamed and flushed token by
 * token; everything else goes to stderr. The prompt comes from the
 * arguments, -f FILE, or stdin (no arguments, or "-").
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "gen.h"
#include "run_batch.h"

static const char *opt_model, *opt_file, *opt_prompt, *opt_sampling_seed, *opt_system, *opt_chat_template,
                  *opt_prompt_cache, *opt_rope_scaling, *opt_backend, *opt_reasoning,
                  *opt_effort;
static cli_kv_opts opt_kv;
static bool opt_shift, opt_ignore_eos, opt_show_reasoning;
static long long opt_keep = 0;
static double opt_rope_scale = 0, opt_rope_base = 0, opt_expert_budget = 0;
static long long opt_yarn_orig = 0;
static long long opt_n = -1, opt_ctx = 0, opt_threads = 0;
static cli_sample_opts opt_sample = CLI_SAMPLE_DEFAULTS;
static bool opt_chat, opt_raw, opt_echo, opt_special, opt_no_bos, opt_tokenize, opt_json, opt_verbose, opt_stats;
static opt_list opt_stop, opt_lora;
static const char *opt_batch;
static long long opt_parallel = 0;   /* 0: not given (4) */
static bool opt_unordered;

static rvl_opt opts[] = {
    OPT_MODEL(opt_model),
    {OPT_STRING, 'p', "prompt", "TEXT", "the prompt (the same as giving it as arguments)", NULL, &opt_prompt, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 'f', "file", "FILE", "read the prompt from FILE ('-': standard input); with a prompt argument, FILE is the material it applies to (see the description)", NULL, &opt_file, 0, 0, NULL, COMPL_FILE},
    {OPT_INT, 'n', "max-tokens", "N", "generate at most N tokens (-1: until end of generation or a full context)", "-1", &opt_n, -1, 1e9, NULL, COMPL_NONE},
    {OPT_INT, 'c', "ctx-size", "N", "context size in tokens (0: min(4096, the model's))", "0", &opt_ctx, 0, 1048576, NULL, COMPL_NONE},
    {OPT_INT, 't', "threads", "N", "threads (0: one per CPU)", "0", &opt_threads, 0, 256, NULL, COMPL_NONE},
    OPT_BACKEND(opt_backend),
    OPT_SAMPLE(opt_sample),
    {OPT_STRING, 's', "seed", "N", "random seed for reproducible sampling (default: random)", NULL, &opt_sampling_seed, 0, 0, NULL, COMPL_NONE},
    {OPT_LIST, 0, "stop", "STR", "stop when STR is generated (repeatable; STR is not printed)", NULL, &opt_stop, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "ignore-eos", NULL, "never end at an end-of-generation token (its probability becomes 0; as llama.cpp's --ignore-eos)", NULL, &opt_ignore_eos, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "chat", NULL, "wrap the prompt as one user turn in the model's chat template, with the generation prompt", NULL, &opt_chat, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "raw", NULL, "complete the prompt as raw text, the default, without the note run prints on a terminal for a model that has a chat template", NULL, &opt_raw, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "system", "TEXT", "with --chat: a system message before the user turn", NULL, &opt_system, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "chat-template", "NAME|FILE", "with --chat: a built-in template (chatml, qwen3, llama2, llama3, mistral-v1, gemma, phi3, zephyr, ...) or a Jinja template file instead of the model's", NULL, &opt_chat_template, 0, 0, NULL, COMPL_FILE},
    OPT_REASONING(opt_reasoning),
    OPT_REASONING_EFFORT(opt_effort),
    {OPT_FLAG, 0, "show-reasoning", NULL, "with --chat: print a thinking model's reasoning (<think>...</think>) as it comes instead of leaving it out", NULL, &opt_show_reasoning, 0, 0, NULL, COMPL_NONE},
    OPT_KV(opt_kv),
    OPT_EXPERT_BUDGET(opt_expert_budget),
    OPT_CONTEXT_SHIFT(opt_shift, opt_keep),
    OPT_LORA(opt_lora),
    {OPT_CHOICE, 0, "rope-scaling", "TYPE", "override the model's RoPE scaling (NTK-aware: the base raised by factor^(d/(d-2)))", NULL, &opt_rope_scaling, 0, 0, "none|linear|yarn|ntk", COMPL_NONE},
    {OPT_FLOAT, 0, "rope-scale", "F", "override the RoPE scaling factor (context extension)", "0", &opt_rope_scale, 0, 1e6, NULL, COMPL_NONE},
    {OPT_FLOAT, 0, "rope-freq-base", "B", "override the RoPE frequency base", "0", &opt_rope_base, 0, 1e12, NULL, COMPL_NONE},
    {OPT_INT, 0, "yarn-orig-ctx", "N", "override YaRN's original context length", "0", &opt_yarn_orig, 0, 1 << 24, NULL, COMPL_NONE},
    {OPT_STRING, 0, "prompt-cache", "FILE", "reuse the KV cache of the longest prompt prefix saved in FILE (a session file) and save this prompt's cache there", NULL, &opt_prompt_cache, 0, 0, NULL, COMPL_FILE},
    {OPT_FLAG, 'e', "echo", NULL, "print the prompt before the generated text", NULL, &opt_echo, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "special", NULL, "parse special tokens (e.g. <|im_start|>) in the prompt and print them in the output", NULL, &opt_special, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "no-bos", NULL, "do not add the beginning-of-sequence token", NULL, &opt_no_bos, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "tokenize", NULL, "print the prompt's token ids on one line and exit (works on vocab-only files)", NULL, &opt_tokenize, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 'j', "json", NULL, "print one JSON object: text, token ids, finish reason, timings", NULL, &opt_json, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "batch", "FILE", "run every line of FILE ('-': standard input) as a prompt, or a JSON object with its own options; print one JSON object a line (see below)", NULL, &opt_batch, 0, 0, NULL, COMPL_FILE},
    OPT_PARALLEL(opt_parallel),
    {OPT_FLAG, 0, "unordered", NULL, "with --batch: print each result as it finishes instead of in input order", NULL, &opt_unordered, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "stats", NULL, "print load time, speeds, time to first token and prompt tokens reused to stderr", NULL, &opt_stats, 0, 0, NULL, COMPL_NONE},
    {OPT_FLAG, 'v', "verbose", NULL, "print model and context details to stderr (implies --stats)", NULL, &opt_verbose, 0, 0, NULL, COMPL_NONE},
    OPT_END
};

/* llama-cli's spellings that mean something else for run than for the
 * other commands (the shared ones are in opt.c). */
static const cli_alias aliases[] = {
    {"-st|--single-turn", ALIAS_OPTION, "chat", 0, NULL, NULL},
    {"-no-cnv|--no-conversation", ALIAS_OPTION, "raw", 0, NULL, NULL},
    {"--display-prompt", ALIAS_OPTION, "echo", 0, NULL, NULL},
    {"-i|--interactive|-if|--interactive-first|-cnv|--conversation", ALIAS_REFUSE, NULL, 0, NULL,
     "run answers once: for a conversation use 'ruvllm chat' (the same -m, --system and sampling "
     "options), for one reply in the model's chat template add --chat"},
    ALIAS_END
};

/* ====================================================================
 * Small helpers
 * ==================================================================== */

/* Is there material on standard input for a prompt given as an
 * argument? As ollama run: whenever it is not a terminal, but a pipe, a
 * file or a socket (not /dev/null or another character device, which a
 * script's `run "..."` often inherits). */
static bool stdin_has_material(void)
{
    struct stat st;
    return !isatty(STDIN_FILENO) && fstat(STDIN_FILENO, &st) == 0 &&
           (S_ISFIFO(st.st_mode) || S_ISREG(st.st_mode) || S_ISSOCK(st.st_mode));
}

/* Read a prompt source (a file, or "-": stdin) up to RUVLLM_MAX_INPUT,
 * less one trailing newline (as llama.cpp reads -f: a file's last line
 * ends in one that is not part of the prompt). 0, or the exit status
 * after printing the error. */
static int read_source(const char *cmd, const char *src, rvl_buf *out)
{
    if (!strcmp(src, "-") && isatty(STDIN_FILENO))
        fprintf(stderr, "ruvllm %s: reading the prompt from standard input (end with Ctrl-D)\n", cmd);
    char *text;
    size_t n;
    int rc = rvl_input_read(src, rvl_input_limit(), &text, &n);
    if (rc < 0)
        return rc == RVL_EINTR ? EXIT_INTERRUPTED : cli_fail(cmd, rc);
    if (n && text[n - 1] == '\n')
        n--;
    rc = rvl_buf_add(out, text, n);
    free(text);
    return rc < 0 ? cli_fail(cmd, rvl_seterr(RVL_ENOMEM, "out of memory")) : 0;
}

/* The prompt. An instruction (-p TEXT, or the arguments joined by
 * spaces) and material (-f FILE, or standard input when it is a pipe or a
 * file) make one prompt together: the material, a blank line, the
 * instruction (ollama run puts standard input first too, joined with a
 * space). Either alone is the prompt; with neither, standard input is
 * read (also from a terminal). */
static int get_prompt(const char *cmd, int argc, char **argv, rvl_buf *prompt)
{
    bool dash = argc == 1 && strcmp(argv[0], "-") == 0;   /* "run -": stdin */
    if (opt_prompt && argc > 0)
        cli_usage(cmd, "give the prompt once: with -p or as arguments");
    if (dash && opt_file)
        cli_usage(cmd, "give the prompt as '-' (standard input) or with -f, not both");
    bool instruction = opt_prompt || (argc > 0 && !dash);
    const char *material = opt_file ? opt_file
                           : !instruction || dash || stdin_has_material() ? "-" : NULL;
    int st;
    if (material && (st = read_source(cmd, material, prompt)) != 0)
        return st;
    if (instruction) {
        if (prompt->n && rvl_buf_add(prompt, "\n\n", 2) < 0)
            return cli_fail(cmd, rvl_seterr(RVL_ENOMEM, "out of memory"));
        if (opt_prompt && rvl_buf_add(prompt, opt_prompt, strlen(opt_prompt)) < 0)
            return cli_fail(cmd, rvl_seterr(RVL_ENOMEM, "out of memory"));
        for (int i = 0; !opt_prompt && i < argc; i++)
            if ((i && rvl_buf_add(prompt, " ", 1) < 0) || rvl_buf_add(prompt, argv[i], strlen(argv[i])) < 0)
                return cli_fail(cmd, rvl_seterr(RVL_ENOMEM, "out of memory"));
    }
    if (rvl_buf_add(prompt, "", 0) < 0)
        return cli_fail(cmd, rvl_seterr(RVL_ENOMEM, "out of memory"));
    return 0;
}

static int tokenize_all(const rvl_tokenizer *t, const rvl_buf *prompt, int32_t **ids, size_t *n)
{
    return rvl_tok_encode_alloc(t, prompt->p ? prompt->p : "", prompt->n, !opt_no_bos, opt_special,
                              ids, n);
}

static int out_write(const char *s, size_t n)
{
    if (opt_json || n == 0)
        return 0;
    if (fwrite(s, 1, n, stdout) != n || fflush(stdout) != 0)
        return -1;
    return 0;
}

/* gen_reply's sink: stdout, flushed; a failed write (SIGPIPE ignored:
 * EPIPE) stops generation and is reported by the caller. A thinking
 * model's reasoning is left out unless --show-reasoning (filter). */
typedef struct {
    bool pipe_failed;
    bool filter;
    rvl_think think;
} run_sink;

static int answer_out(void *ud, rvl_think_part part, const char *s, size_t n)
{
    (void)ud;
    if (part != RVL_THINK_ANSWER)
        return 0;
    return out_write(s, n) < 0 ? RVL_EIO : 0;
}

static int emit_stdout(void *ud, const char *s, size_t n)
{
    run_sink *k = ud;
    int rc = k->filter ? rvl_think_push(&k->think, s, n, answer_out, k)
                       : out_write(s, n) < 0 ? RVL_EIO : 0;
    if (rc == RVL_EIO)
        k->pipe_failed = true;
    return rc;
}

/* --json with a thinking model: the reply's answer and its reasoning
 * (without the tags), apart. */
typedef struct {
    rvl_buf answer, reasoning;
} reply_parts;

static int parts_out(void *ud, rvl_think_part part, const char *s, size_t n)
{
    reply_parts *p = ud;
    if (part == RVL_THINK_TAG)
        return 0;
    return rvl_buf_add(part == RVL_THINK_ANSWER ? &p->answer : &p->reasoning, s, n) < 0
               ? RVL_ENOMEM : 0;
}

/* ====================================================================
 * --chat: the prompt as one user turn (after an optional system message)
 * rendered with the model's chat template and the generation prompt.
 * The rendered text is tokenized with special tokens parsed, as llama.cpp
 * does; BOS is added only when the tokenizer asks for it and the template
 * did not already write it. The template's end-of-turn strings stop
 * generation.
 * ==================================================================== */

/* *chat: the template (owned: rvl_chat_close, also on failure), whose
 * end-of-turn strings stop generation. */
static int chat_wrap(const char *cmd, const rvl_file *f, const rvl_tokenizer *t, rvl_buf *prompt,
                     rvl_chat **chat)
{
    char *warn = NULL, *out = NULL;
    int rc = rvl_chat_open_model(chat, f, t, opt_chat_template, &warn);
    if (warn) {
        cli_err(cmd, "%s", warn);
        free(warn);
        warn = NULL;
    }
    if (rc < 0)
        return rc;
    rvl_chat_set_thinking(*chat, cli_reasoning(opt_reasoning));
    if (opt_effort && (rc = rvl_chat_set_reasoning_effort(*chat, opt_effort)) < 0)
        return rc;
    rvl_chat_msg msgs[2];
    size_t n = 0;
    if (opt_system)
        msgs[n++] = (rvl_chat_msg){"system", opt_system};
    msgs[n++] = (rvl_chat_msg){"user", prompt->p ? prompt->p : ""};
    rc = rvl_chat_format(*chat, msgs, n, true, &out, &warn);
    if (warn) {
        cli_err(cmd, "%s", warn);
        free(warn);
    }
    if (rc < 0)
        return rc;
    prompt->n = 0;
    rc = rvl_buf_add(prompt, out, strlen(out)) < 0 ? rvl_seterr(RVL_ENOMEM, "out of memory") : 0;
    free(out);
    opt_special = true;
    if (!opt_no_bos && rvl_tok_add_bos(t) && rvl_tok_bos(t) >= 0) {
        size_t bl = 0;
        const char *bt = rvl_tok_text(t, rvl_tok_bos(t), &bl);
        if (bt && bl && prompt->n >= bl && memcmp(prompt->p, bt, bl) == 0)
            opt_no_bos = true;
    }
    return rc;
}

/* ====================================================================
 * --tokenize: needs only the vocabulary
 * ==================================================================== */

static int do_tokenize(const char *cmd, const char *path, rvl_buf *prompt)
{
    rvl_file *f = NULL;
    rvl_tokenizer *t = NULL;
    rvl_chat *chat = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc;

    if ((rc = rvl_file_open(&f, path)) < 0 || (rc = rvl_tok_open(&t, f)) < 0 ||
        (opt_chat && (rc = chat_wrap(cmd, f, t, prompt, &chat)) < 0) ||
        (rc = tokenize_all(t, prompt, &ids, &n)) < 0) {
        int st = cli_fail(cmd, rc);
        free(ids);
        rvl_chat_close(chat);
        rvl_tok_close(t);
        rvl_file_close(f);
        return st;
    }
    if (opt_json) {
        rvl_jw w;
        rvl_jw_init(&w, stdout, false);
        rvl_jw_obj(&w);
        rvl_jw_key(&w, "tokens");
        rvl_jw_arr(&w);
        for (size_t i = 0; i < n; i++)
            rvl_jw_i64(&w, ids[i]);
        rvl_jw_arr_end(&w);
        rvl_jw_obj_end(&w);
        putchar('\n');
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? " " : "", ids[i]);
        putchar('\n');
    }
    free(ids);
    rvl_chat_close(chat);
    rvl_tok_close(t);
    rvl_file_close(f);
    return fflush(stdout) == 0 ? 0 : EXIT_RUNTIME;
}

/* ====================================================================
 * Generation
 * ==================================================================== */

/* --seed, or a seed from the clock and the process id. */
static uint64_t sampling_seed(const char *cmd)
{
    if (opt_sampling_seed) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(opt_sampling_seed, &end, 10);
        if (!*opt_sampling_seed || *end || errno || opt_sampling_seed[0] == '-')
            cli_usage(cmd, "--seed: '%s' is not a non-negative integer", opt_sampling_seed);
        return v;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
}

/* A context past the model's training length (and past what its own
 * RoPE scaling reaches) degrades the output: say once what scaling would
 * reach it. */
static void warn_context(const char *cmd, const rvl_hparams *hp, uint32_t n_ctx)
{
    const double factor = opt_rope_scale > 0 ? opt_rope_scale
                          : hp->rope_scaling != RVL_ROPE_SCALING_NONE ? hp->rope_factor : 1.0;
    const bool scaled = (opt_rope_scaling && strcmp(opt_rope_scaling, "none") != 0) ||
                        (!opt_rope_scaling && hp->rope_scaling != RVL_ROPE_SCALING_NONE);
    const uint32_t train = hp->n_ctx_train;
    if (!train || n_ctx <= train || hp->has_longrope ||
        (scaled && (double)n_ctx <= (double)hp->rope_orig_ctx * factor))
        return;
    const double need = ceil((double)n_ctx / train * 100.0) / 100.0;
    cli_err(cmd, "warning: a context of %u tokens is longer than the %u this model was trained "
            "with; past %u the output degrades unless RoPE is scaled by %g: add --rope-scaling "
            "yarn --rope-scale %g (or linear, or ntk)", n_ctx, train, train, need, need);
}

/* Usage errors no single option shows (exits 2). */
static void check_options(const char *cmd)
{
    for (int i = 0; i < opt_stop.n; i++)
        if (!opt_stop.items[i][0])
            cli_usage(cmd, "--stop: the stop string is empty");
    if (opt_chat && opt_raw)
        cli_usage(cmd, "--chat and --raw disagree: a chat turn, or raw text?");
    if (!opt_chat &&
        (opt_system || opt_chat_template || opt_reasoning || opt_effort || opt_show_reasoning))
        cli_usage(cmd, "%s needs --chat", opt_system ? "--system" : opt_chat_template ? "--chat-template"
                  : opt_reasoning ? "--reasoning" : opt_effort ? "--reasoning-effort"
                  : "--show-reasoning");
    if (opt_lora.n && opt_prompt_cache)
        cli_usage(cmd, "--prompt-cache cannot be combined with --lora (a session file does not "
                  "record the adapters its cache was computed with)");
}

/* --batch: what run's options say every line does by default. */
static int batch_main(const char *cmd, int argc, uint64_t seed)
{
    const char *clash = argc ? "a prompt argument" : opt_prompt ? "-p" : opt_file ? "-f"
                        : opt_prompt_cache ? "--prompt-cache" : opt_echo ? "--echo" : opt_tokenize ? "--tokenize" : opt_json ? "--json"
                        : opt_shift ? "--context-shift" : opt_lora.n ? "--lora" : NULL;
    if (clash)
        cli_usage(cmd, "--batch cannot be combined with %s%s", clash,
                  opt_json ? " (it prints JSON Lines already)" : "");
    char path[4096];
    int rc = rvl_model_path(opt_model, path, sizeof path);
    if (rc < 0)
        return cli_fail(cmd, rc);
    const char **stops = calloc((size_t)opt_stop.n + 1, sizeof *stops);
    if (!stops)
        return cli_fail(cmd, rvl_seterr(RVL_ENOMEM, "out of memory"));
    for (int i = 0; i < opt_stop.n; i++)
        stops[i] = opt_stop.items[i];
    run_batch_opts bo = {
        .src = opt_batch, .model_path = path, .expert_budget = opt_expert_budget,
        .cp = {.n_ctx = (uint32_t)opt_ctx, .n_threads = (uint32_t)opt_threads,
               .rope_scaling = opt_rope_scaling, .rope_factor = (float)opt_rope_scale,
               .rope_base = (float)opt_rope_base, .rope_orig_ctx = (uint32_t)opt_yarn_orig,
               .backend = opt_backend},
        .seed_given = opt_sampling_seed != NULL, .max_tokens = opt_n, .stops = stops,
        .ignore_eos = opt_ignore_eos, .chat = opt_chat, .special = opt_special,
        .no_bos = opt_no_bos, .show_reasoning = opt_show_reasoning,
        .stats = opt_stats || opt_verbose, .verbose = opt_verbose, .unordered = opt_unordered,
        .system = opt_system, .chat_template = opt_chat_template, .reasoning = opt_reasoning,
        .effort = opt_effort, .parallel = opt_parallel ? (uint32_t)opt_parallel : 4,
    };
    cli_kv_params(&opt_kv, &bo.cp);
    cli_sample_params(&opt_sample, seed, &bo.sp);
    int status = run_batch(cmd, &bo);
    free(stops);
    free(opt_stop.items);
    free(opt_lora.items);
    return status;
}

/* The model's context with the --lora adapters, and the sampler: 0, or
 * the exit status after printing the error. What was opened is the
 * caller's to close, also on failure. */
static int open_engine(const char *cmd, const rvl_model *m, uint64_t seed, rvl_ctx **c,
                       rvl_lora **lora, rvl_sampler **s)
{
    rvl_ctx_params cp = {.n_ctx = (uint32_t)opt_ctx, .n_threads = (uint32_t)opt_threads,
                         .rope_scaling = opt_rope_scaling, .rope_factor = (float)opt_rope_scale,
                         .rope_base = (float)opt_rope_base, .rope_orig_ctx = (uint32_t)opt_yarn_orig,
                         .backend = opt_backend};
    cli_kv_params(&opt_kv, &cp);
    int rc, status;
    if ((rc = rvl_ctx_open(c, m, &cp)) < 0)
        return cli_fail(cmd, rc);
    /* what only the CPU's cache does, refused before any work */
    if ((rc = cli_backend_refuse(*c, opt_prompt_cache ? "--prompt-cache" : NULL)) < 0 ||
        (rc = cli_backend_refuse(*c, opt_shift ? "--context-shift" : NULL)) < 0)
        return cli_fail(cmd, rc);
    if ((status = cli_lora_attach(cmd, &opt_lora, m, *c, lora)) != 0)
        return status;
    rvl_sampler_params sp;
    cli_sample_params(&opt_sample, seed, &sp);
    if ((rc = rvl_sampler_open(s, &sp, rvl_model_hparams(m)->n_vocab)) < 0)
        return cli_fail(cmd, rc);
    return 0;
}

/* Decode the prompt into c; *logits: its last row. With --prompt-cache,
 * restore the saved cache, keep its longest prefix in common with this
 * prompt (at least one token is decoded, for its logits), decode only
 * the rest (*n_reused: the tokens kept) and save this prompt's cache. */
static int decode_prompt(const char *cmd, rvl_ctx *c, const int32_t *ids, size_t n_prompt,
                         const float **logits, size_t *n_reused)
{
    *n_reused = 0;
    if (opt_prompt_cache && access(opt_prompt_cache, F_OK) == 0) {
        int32_t *cids = NULL;
        size_t n_c = 0;
        if (rvl_session_load(c, opt_prompt_cache, &cids, &n_c, NULL) < 0) {
            cli_err(cmd, "not using the prompt cache: %s", rvl_errmsg());
        } else {
            *n_reused = rvl_ctx_reuse(c, ids, (uint32_t)n_prompt);
        }
        free(cids);
    }
    int rc = rvl_decode(c, ids + *n_reused, (uint32_t)(n_prompt - *n_reused), logits);
    if (rc == 0 && opt_prompt_cache) {
        int src = rvl_session_save(c, opt_prompt_cache, ids, n_prompt, NULL);
        if (src < 0)
            cli_err(cmd, "could not save the prompt cache: %s", rvl_errmsg());
    }
    return rc;
}

/* What --json and --stats report besides the generation's own numbers. */
typedef struct {
    const int32_t *ids;        /* the prompt */
    size_t n_prompt, n_reused; /* its tokens; of them, kept from --prompt-cache */
    double load_ms, prompt_ms; /* opening the model, context and sampler; decoding the prompt */
    const char *finish;        /* stop, length, context or interrupted */
} run_report;

/* --json: one object on stdout; parts (NULL: none) is a thinking model's
 * reply apart. 0, or -1 when writing failed. */
static int print_json(const rvl_ctx *c, const run_report *rp, const gen_result *res,
                      const reply_parts *parts)
{
    const double t_first = rp->prompt_ms + res->first_ms, t_gen = res->gen_ms;
    rvl_jw w;
    rvl_jw_init(&w, stdout, false);
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "text");
    if (parts) {
        rvl_jw_strn(&w, parts->answer.p ? parts->answer.p : "", parts->answer.n);
        rvl_jw_key(&w, "reasoning");
        rvl_jw_strn(&w, parts->reasoning.p ? parts->reasoning.p : "", parts->reasoning.n);
    } else {
        rvl_jw_strn(&w, res->text.p ? res->text.p : "", res->text.n);
    }
    rvl_jw_key(&w, "prompt_tokens");
    rvl_jw_arr(&w);
    for (size_t i = 0; i < rp->n_prompt; i++)
        rvl_jw_i64(&w, rp->ids[i]);
    rvl_jw_arr_end(&w);
    rvl_jw_key(&w, "tokens");
    rvl_jw_arr(&w);
    for (size_t i = 0; i < res->n_ids; i++)
        rvl_jw_i64(&w, res->ids[i]);
    rvl_jw_arr_end(&w);
    rvl_jw_key(&w, "finish_reason");
    rvl_jw_str(&w, rp->finish);
    rvl_jw_key(&w, "backend");
    rvl_jw_str(&w, rvl_ctx_backend(c));
    rvl_jw_key(&w, "device");
    rvl_jw_str(&w, rvl_ctx_device(c));
    rvl_jw_key(&w, "timings");
    rvl_jw_obj(&w);
    rvl_jw_key(&w, "load_ms");
    rvl_jw_f64(&w, rp->load_ms);
    rvl_jw_key(&w, "prompt_tokens_reused");
    rvl_jw_i64(&w, (int64_t)rp->n_reused);
    rvl_jw_key(&w, "prompt_ms");
    rvl_jw_f64(&w, rp->prompt_ms);
    rvl_jw_key(&w, "prompt_tokens_per_s");
    rvl_jw_f64(&w, rp->prompt_ms > 0 ? (double)rp->n_prompt * 1e3 / rp->prompt_ms : 0);
    rvl_jw_key(&w, "first_token_ms");
    rvl_jw_f64(&w, t_first);
    rvl_jw_key(&w, "generation_ms");
    rvl_jw_f64(&w, t_gen);
    rvl_jw_key(&w, "generation_tokens_per_s");
    rvl_jw_f64(&w, t_gen > 0 && res->n_decoded ? (double)res->n_decoded * 1e3 / t_gen : 0);
    rvl_jw_obj_end(&w);
    rvl_jw_obj_end(&w);
    putchar('\n');
    return fflush(stdout) == 0 ? 0 : -1;
}

/* Do descriptors a and b write to the same file (2>&1)? */
static bool same_file(int a, int b)
{
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* --stats: timings and speeds on stderr. */
static void print_stats(const rvl_ctx *c, const run_report *rp, const gen_result *res)
{
    const double t_first = rp->prompt_ms + res->first_ms, t_gen = res->gen_ms;
    fprintf(stderr,
            "ruvllm run: load %.1f ms | prompt %zu tokens in %.1f ms (%.1f tok/s) | "
            "first token %.1f ms | generated %zu tokens in %.1f ms (%.1f tok/s) | finish: %s\n",
            rp->load_ms, rp->n_prompt, rp->prompt_ms,
            rp->prompt_ms > 0 ? (double)(rp->n_prompt - rp->n_reused) * 1e3 / rp->prompt_ms : 0,
            t_first, res->n_ids, t_gen,
            t_gen > 0 && res->n_decoded ? (double)res->n_decoded * 1e3 / t_gen : 0, rp->finish);
    if (opt_prompt_cache)
        fprintf(stderr, "ruvllm run: prompt tokens reused: %zu of %zu\n", rp->n_reused, rp->n_prompt);
    fprintf(stderr, "ruvllm run: backend %s, device %s\n", rvl_ctx_backend(c), rvl_ctx_device(c));
    rvl_kv_usage u;
    const uint32_t n = rvl_ctx_pos(c);
    if (n && rvl_ctx_kv_usage(c, n, &u) == 0) {
        fprintf(stderr, "ruvllm run: KV cache at %u tokens: %.2f MiB", n,
                (double)u.bytes / (1 << 20));
        if (u.n_windowed)
            fprintf(stderr, " (%u global layers %.0f B/token, %u windowed layers of %u %.0f "
                    "B/token; %.2f MiB without the windows' rings)", u.n_global,
                    u.global_layer_bytes / n, u.n_windowed, u.window, u.windowed_layer_bytes / n,
                    (double)u.bytes_untrimmed / (1 << 20));
        const rvl_hparams *hp = rvl_model_hparams(rvl_ctx_model(c));
        if (hp->block.mla) /* its rows against per-head keys and values */
            fprintf(stderr, " (latent attention: %.0f B/token; a per-head cache in the same "
                    "format would hold %.2f MiB)", (double)u.bytes / n,
                    (double)u.bytes * hp->n_head * (hp->mla_k_dim + hp->mla_v_dim) /
                        hp->head_dim / (1 << 20));
        fputc('\n', stderr);
    }
}

static int run_main(rvl_cmd *cmd, int argc, char **argv)
{
    const char *name = cmd->name;
    char path[4096];
    rvl_buf prompt = {0};
    const char **stops = NULL;
    gen_result res = {0};
    rvl_model *m = NULL;
    rvl_ctx *c = NULL;
    rvl_lora *lora = NULL;
    rvl_sampler *s = NULL;
    rvl_chat *chat = NULL;
    int32_t *ids = NULL;
    run_report rp = {.finish = "length"};
    run_sink sink = {0};
    reply_parts parts = {0};
    bool reasons = false;       /* the reply may begin with <think>...</think> */
    rvl_think think0 = {0};     /* the splitter as the prompt left it */
    int status = 0, rc;

    if (opt_verbose)
        opt_stats = true;
    check_options(name);
    uint64_t seed = sampling_seed(name);
    if (opt_batch)
        return batch_main(name, argc, seed);
    if (opt_parallel || opt_unordered)
        cli_usage(name, "%s needs --batch", opt_parallel ? "--parallel" : "--unordered");
    if ((status = get_prompt(name, argc, argv, &prompt)) != 0)
        goto out;
    if (opt_prompt_cache) {   /* before any work: a device or FIFO is never replaced */
        char resolved[4096];
        if ((rc = rvl_afile_check_dest(opt_prompt_cache, resolved, sizeof resolved)) < 0) {
            status = cli_fail(name, rc);
            goto out;
        }
    }
    if ((rc = rvl_model_path(opt_model, path, sizeof path)) < 0) {
        status = cli_fail(name, rc);
        goto out;
    }
    if (opt_tokenize) {
        status = do_tokenize(name, path, &prompt);
        goto out;
    }
    double t0 = gen_now_ms();
    if ((rc = cli_model_open(&m, path, opt_expert_budget, (int)opt_threads)) < 0) {
        status = cli_fail(name, rc);
        goto out;
    }
    if (rvl_tok_warning(rvl_model_tokenizer(m)))
        cli_err(name, "warning: %s: %s", path, rvl_tok_warning(rvl_model_tokenizer(m)));
    if ((status = open_engine(name, m, seed, &c, &lora, &s)) != 0)
        goto out;
    rp.load_ms = gen_now_ms() - t0;

    const rvl_hparams *hp = rvl_model_hparams(m);
    const rvl_tokenizer *tok = rvl_model_tokenizer(m);
    warn_context(name, hp, rvl_ctx_n_ctx(c));
    /* raw completion is what run does; on a terminal, with a model made to
     * chat, say so once (the same command line in a script must not
     * change meaning, so chat is not made the default here) */
    if (!opt_chat && !opt_raw && !opt_json && !opt_tokenize && isatty(STDIN_FILENO) &&
        isatty(STDOUT_FILENO) && rvl_file_find_kv(rvl_model_file(m), "tokenizer.chat_template"))
        cli_err(name, "note: completing the prompt as raw text; this model has a chat template: "
                "add --chat for its reply as an assistant, or use 'ruvllm chat' for a "
                "conversation (--raw: no note)");
    if (opt_chat && (rc = chat_wrap(name, rvl_model_file(m), tok, &prompt, &chat)) < 0) {
        status = cli_fail(name, rc);
        goto out;
    }
    if (chat && rvl_chat_has_reasoning(chat)) {
        reasons = true;
        sink.filter = !opt_show_reasoning;
        rvl_think_init_prompt(&sink.think, rvl_chat_think_format(chat), prompt.p, prompt.n);
        think0 = sink.think;
    }
    if ((rc = tokenize_all(tok, &prompt, &ids, &rp.n_prompt)) < 0) {
        status = cli_fail(name, rc);
        goto out;
    }
    rp.ids = ids;
    uint32_t n_ctx = rvl_ctx_n_ctx(c);
    if (rp.n_prompt == 0) {
        cli_err(name, "the prompt is empty (and the model adds no BOS token)");
        status = EXIT_RUNTIME;
        goto out;
    }
    if (rp.n_prompt >= n_ctx) {
        cli_err(name, "the prompt has %zu tokens, which leaves no room in a context of %u (see -c)",
                rp.n_prompt, n_ctx);
        status = EXIT_RUNTIME;
        goto out;
    }
    /* a shift drops half of what follows the kept tokens: keep room for it
     * (llama.cpp clamps n_keep to n_ctx - 4; saying so beats a "context
     * full, use --context-shift" when it was given) */
    const size_t keep = opt_keep < 0 ? rp.n_prompt : (size_t)opt_keep;
    if (opt_shift && keep + 4 > n_ctx) {
        cli_err(name, "--keep %zu%s leaves nothing for --context-shift to drop in a context of "
                "%u tokens (keep at most %u, or use a larger -c)", keep,
                opt_keep < 0 ? " (the whole prompt)" : "", n_ctx, n_ctx - 4);
        status = EXIT_USAGE;
        goto out;
    }
    if (opt_verbose)
        fprintf(stderr, "ruvllm run: %s: %s, %u layers, dim %u, %u heads (%u kv), vocab %u; "
                        "context %u, prompt %zu tokens, seed %llu; backend %s (%s)\n",
                path, hp->arch, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->n_vocab,
                n_ctx, rp.n_prompt, (unsigned long long)seed, rvl_ctx_backend(c), rvl_ctx_device(c));
    if (opt_echo && out_write(prompt.p, prompt.n) < 0)
        goto pipe_err;

    stops = calloc((size_t)opt_stop.n + 1, sizeof *stops);
    if (!stops) {
        cli_err(name, "out of memory");
        status = EXIT_RUNTIME;
        goto out;
    }
    for (int i = 0; i < opt_stop.n; i++)
        stops[i] = opt_stop.items[i];
    for (size_t i = 0; i < rp.n_prompt; i++)
        rvl_sampler_accept(s, ids[i]);

    const float *logits;
    double t1 = gen_now_ms();
    rc = decode_prompt(name, c, ids, rp.n_prompt, &logits, &rp.n_reused);
    rp.prompt_ms = gen_now_ms() - t1;
    if (rc == 0) {
        gen_params gp = {
            .ctx = c, .smp = s, .tok = tok, .stop_tokens = chat ? rvl_chat_stops(chat) : NULL,
            .stop_strs = stops, .max_tokens = opt_n < 0 ? SIZE_MAX : (size_t)opt_n,
            .special = opt_special, .ignore_eos = opt_ignore_eos, .emit = emit_stdout,
            .ud = &sink,
            .context_shift = opt_shift,
            .shift_keep = opt_keep < 0 ? (uint32_t)rp.n_prompt : (uint32_t)opt_keep,
        };
        rc = gen_reply(&gp, logits, &res);
        if (rc == 0 && sink.filter)   /* a reply cut inside its reasoning */
            rc = rvl_think_flush(&sink.think, answer_out, &sink);
        if (rc == RVL_EIO)
            sink.pipe_failed = true;
        rp.finish = gen_finish_name(res.finish);
        if (res.finish == GEN_CONTEXT)
            cli_err(name, "context full (%u tokens): stopping; use -c for a larger context or "
                    "--context-shift", n_ctx);
        if (res.n_shifted && opt_verbose)
            fprintf(stderr, "ruvllm run: context shifts dropped %zu tokens\n", res.n_shifted);
    }
    if (sink.pipe_failed)
        goto pipe_err;
    if (rc == RVL_EINTR || rvl_interrupted()) {
        rp.finish = "interrupted";
        rc = 0;
        status = EXIT_INTERRUPTED;
    }
    if (rc < 0) {
        status = cli_fail(name, rc);
        goto out;
    }

    if (opt_json) {
        if (reasons) {
            rvl_think th = think0;
            if (rvl_think_push(&th, res.text.p ? res.text.p : "", res.text.n, parts_out, &parts) < 0 ||
                rvl_think_flush(&th, parts_out, &parts) < 0) {
                cli_err(name, "out of memory");
                status = EXIT_RUNTIME;
                goto out;
            }
        }
        if (print_json(c, &rp, &res, reasons ? &parts : NULL) < 0)
            goto pipe_err;
    } else if (!res.text.n || res.text.p[res.text.n - 1] != '\n') {
        /* end the line on a terminal so the shell prompt starts cleanly */
        if (isatty(STDOUT_FILENO))
            out_write("\n", 1);
        /* --stats on lines of their own where they meet the text (2>&1,
         * or a terminal behind a pipe) */
        else if (opt_stats && (res.text.n || (opt_echo && prompt.n)) &&
                 (isatty(STDERR_FILENO) || same_file(STDOUT_FILENO, STDERR_FILENO)))
            fputc('\n', stderr);
    }
    if (opt_stats) {
        print_stats(c, &rp, &res);
        cli_expert_stats(stderr, "ruvllm run: experts: ", m);
    }
    goto out;

pipe_err:
    if (errno != EPIPE)
        cli_err(name, "writing to standard output failed: %s", strerror(errno));
    status = EXIT_RUNTIME;
out:
    free(prompt.p);
    rvl_buf_free(&parts.answer);
    rvl_buf_free(&parts.reasoning);
    gen_result_free(&res);
    free(stops);
    free(ids);
    rvl_sampler_close(s);
    rvl_ctx_close(c);
    rvl_lora_close(lora);
    free(opt_lora.items);
    rvl_model_close(m);
    free(opt_stop.items);
    rvl_chat_close(chat);
    return status;
}

rvl_cmd cmd_run_desc = {
    .synopsis = "[-m MODEL] [options] [PROMPT...]",
    .description =
        "Generate a continuation of PROMPT and print only the generated text on standard "
        "output, streamed and flushed token by token, so that ruvllm run fits in a shell "
        "pipeline. The prompt is the arguments joined by spaces (or -p TEXT), the contents of "
        "-f FILE, or standard input when there are no arguments or the only argument is '-'. One "
        "trailing newline of a file or of standard input is dropped (as llama.cpp reads -f), so "
        "printf 'question?\\n' | ruvllm run --chat asks what ruvllm run --chat 'question?' asks.\n"
        "\n"
        "A prompt argument and material to apply it to go together: when standard input is a "
        "pipe or a file (not a terminal or /dev/null), or with -f FILE, the prompt is that text, "
        "a blank line, then the arguments, as ollama run puts standard input before its prompt "
        "argument (it joins them with a space):\n"
        "\n"
        "  git diff | ruvllm run --chat 'Write a commit message for this change.'\n"
        "\n"
        "To keep a script's run 'PROMPT' from reading a standard input that is a pipe, give it "
        "< /dev/null.\n"
        "\n"
        "run completes the prompt as raw text. With a model that has a chat template (an "
        "instruction-tuned model), --chat asks for the assistant's reply instead, and ruvllm chat "
        "holds a conversation; on a terminal, without --chat or --raw, run says so once on "
        "standard error. Chat is not made the default there so that a command line tried at the "
        "terminal does the same in a script.\n"
        "\n"
        "A context (-c) longer than the one the model was trained with is accepted with a "
        "warning that says which RoPE scaling would reach it (--rope-scaling yarn --rope-scale "
        "F, F = the context over the training length).\n"
        "\n"
        "Generation stops at the model's end-of-generation tokens, at a --stop string, after "
        "--max-tokens tokens, or when the context is full (with a message on standard error). "
        "Ctrl-C stops generation; what was generated so far has been printed, and the exit "
        "status is 130.\n"
        "\n"
        "Sampling defaults are llama.cpp's: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05. "
        "--temp 0 is greedy decoding; --seed makes sampling reproducible.\n"
        "\n"
        "With --json nothing is streamed; one JSON object is printed at the end with the keys "
        "text, prompt_tokens, tokens, finish_reason (stop, length, context, interrupted), "
        "backend and device (cpu, or metal and the GPU's name) and timings; with a thinking "
        "model's template, text is the answer and reasoning what the model wrote between "
        "<think> and </think>.\n"
        "\n"
        "Thinking models (Qwen3; templates that write <think>...</think>): with --chat the reply's "
        "reasoning is left out of standard output, and only the answer is printed; "
        "--show-reasoning prints the reply as it comes, tags included. --reasoning off asks the "
        "template not to think (Qwen3's enable_thinking=false: an empty think block closes the "
        "prompt); --reasoning on asks it to; without the option the template's default holds. "
        "A reply cut by --max-tokens before </think> has an empty answer.\n"
        "\n"
        "With --batch FILE ('-': standard input) every line of FILE is a prompt of its own, and "
        "one JSON object a line is printed for each: id, text, finish_reason (stop: the end of "
        "generation or a stop string; length: max_tokens or a full context), prompt_tokens and "
        "completion_tokens (counts), and reasoning with a thinking model's template, as --json "
        "has it. A line that starts with '{' is a JSON object with \"prompt\" (a string) or "
        "\"messages\" (an array of {\"role\", \"content\"}, rendered with the model's chat "
        "template as --chat renders its turn), and optionally \"max_tokens\", \"temperature\", "
        "\"top_p\", \"top_k\", \"min_p\", \"seed\", \"stop\" (a string or an array; it "
        "replaces --stop) and \"id\" (a string or a number; default: the line number); the "
        "other options (-n, --temp, --seed, --stop, --chat, --system, -c, the KV options, -t) are "
        "every line's defaults. Without --seed each line samples with a random seed of its own. "
        "Blank lines are skipped. Up to --parallel lines (default 4) are decoded together, each in "
        "a sequence of its own with a context of -c tokens, with the same results as one by one; "
        "the others wait. Results come in input order (at most 1024 finished results wait for an "
        "earlier one; reading pauses beyond that) or, with --unordered, as they finish. A line "
        "that cannot run (invalid JSON, an unknown or mistyped field, an empty prompt, a prompt "
        "that fills the context) gets {\"id\", \"line\", \"error\"} and the others go on; the "
        "exit status is then 1. The input is read as it comes, so a pipe may feed it. Progress "
        "goes to standard error when it is a terminal; --stats prints the batch's totals and "
        "speed.\n"
        "\n"
        "--backend metal runs the model on an Apple GPU (builds made with make METAL=1 on "
        "macOS; other builds refuse it). Its KV cache is f16 or f32; --lora, --prompt-cache, "
        "--context-shift and the quantized --kv-type values are refused there.",
    .examples = "ruvllm run -n 32 \"The capital of France is\"\tcontinue a prompt\n"
                "echo 'def fib(n):' | ruvllm run --temp 0 -n 64\tgreedy, prompt from stdin\n"
                "ruvllm run --chat -f notes.txt 'Summarize these notes.'\tan instruction about a file, "
                "as the model's chat turn\n"
                "ruvllm run --tokenize \"Hello world\"\tprint the prompt's token ids\n"
                "ruvllm run --batch prompts.txt --parallel 8 --temp 0 -n 64\tmany prompts at once, "
                "JSON Lines out",
    .opts = opts,
    .aliases = aliases,
    .pos_compl = COMPL_NONE,
    .min_pos = 0,
    .max_pos = -1,
    .main = run_main,
};
