/*
 * bench.c - ruvllm bench: kernel speed against the machine's own roofline,
 * model prompt/generation speed (llama-bench style), and perplexity with
 * KL divergence (llama-perplexity style).
 *
 * This file chooses what to measure and prints it; every timing loop,
 * bandwidth and peak measurement, kernel call and perplexity computation
 * is in lib/tools/bench.c and lib/tools/ppl.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pcre2.h>

#include "cli.h"
#include "ruvllm_tools.h"

/* Integer options keep -1 ("not given") so that a subcommand can refuse
 * options that are not its own; the help shows the effective default.
 * bench model takes lists as llama-bench does: -m, -t, -p, -n, -d and the
 * KV types are repeatable and comma-separated (opt_list, split by
 * split_list); kernels and ppl take one value of each (one_value). */
static cli_kv_opts opt_kv;
static opt_list opt_models, opt_threads_l, opt_p_l, opt_n_l, opt_depth_l, opt_kv_l, opt_kvk_l,
    opt_kvv_l;
static const char *opt_output, *opt_filter, *opt_isa, *opt_synth, *opt_type, *opt_file,
    *opt_kl_base, *opt_kl;
static long long opt_reps = -1, opt_m = -1, opt_mem = -1, opt_ctx = -1, opt_chunks = -1;
static bool opt_json, opt_huge, opt_profile;
static double opt_expert_budget = 0;

static rvl_opt opts[] = {
    {OPT_LIST, 'm', "model", "FILE", "model file (default: $RUVLLM_MODEL, then the cached default model); model: repeatable or comma-separated, rows for each", NULL, &opt_models, 0, 0, NULL, COMPL_FILE},
    {OPT_LIST, 't', "threads", "N", "threads (0: one per CPU); model: a comma-separated list", "0", &opt_threads_l, 0, 0, NULL, COMPL_NONE},
    {OPT_INT, 'r', "repetitions", "N", "kernels, model: timed repetitions after one warm-up", "5", &opt_reps, 1, 255, NULL, COMPL_NONE},
    {OPT_CHOICE, 'o', "output", "FORMAT", "output format", "md", &opt_output, 0, 0, "md|csv|json", COMPL_NONE},
    {OPT_FLAG, 'j', "json", NULL, "print JSON (the same as -o json)", NULL, &opt_json, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "filter", "REGEX", "kernels: only rows whose 'op type isa shape source' label matches (case-insensitive)", NULL, &opt_filter, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "isa", "LIST", "kernels: kernel variants side by side, a column each: comma-separated ref, avx2, avx512, neon, or 'all' (default: the selected one)", NULL, &opt_isa, 0, 0, NULL, COMPL_NONE},
    {OPT_INT, 0, "tokens", "M", "kernels: activation rows of the GEMM rows", "64", &opt_m, 1, 4096, NULL, COMPL_NONE},
    {OPT_INT, 0, "mem-size", "MIB", "kernels: working set the weights cycle through, of which each bandwidth array is half (0: twice the last-level cache, within 256..1024 MiB)", "0", &opt_mem, 0, 1 << 20, NULL, COMPL_NONE},
    {OPT_FLAG, 0, "huge-pages", NULL, "kernels: 2 MiB pages (MADV_HUGEPAGE) for the bandwidth arrays and the weights, as recent kernels map a model file's page cache (default: the pages malloc gives)", NULL, &opt_huge, 0, 0, NULL, COMPL_NONE},
    {OPT_LIST, 'p', "n-prompt", "N", "model: prompt tokens of the pp test, a comma-separated list (0: none)", "512", &opt_p_l, 0, 0, NULL, COMPL_NONE},
    {OPT_LIST, 'n', "n-gen", "N", "model: generated tokens of the tg test, a comma-separated list (0: none)", "128", &opt_n_l, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "synthetic", "SHAPE", "model: random weights of a named shape instead of -m (llama-7b, llama-1b, smollm2-135m, ...)", NULL, &opt_synth, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 0, "type", "TYPE", "model: weight format of the synthetic model (Q4_0, Q8_0, Q4_K, F16, ...)", "Q4_0", &opt_type, 0, 0, NULL, COMPL_NONE},
    {OPT_STRING, 'f', "file", "FILE", "ppl: the text to score", NULL, &opt_file, 0, 0, NULL, COMPL_FILE},
    {OPT_INT, 'c', "ctx-size", "N", "ppl: window size in tokens (with --kl: the base file's)", "512", &opt_ctx, 4, 1 << 20, NULL, COMPL_NONE},
    {OPT_INT, 0, "chunks", "N", "ppl: score at most N windows (0: all)", "0", &opt_chunks, 0, 1 << 30, NULL, COMPL_NONE},
    {OPT_STRING, 0, "kl-base", "FILE", "ppl: save every scored position's log-probabilities to FILE", NULL, &opt_kl_base, 0, 0, NULL, COMPL_FILE},
    {OPT_STRING, 0, "kl", "FILE", "ppl: compare with a --kl-base FILE: KL divergence and top-token agreement", NULL, &opt_kl, 0, 0, NULL, COMPL_FILE},
    {OPT_FLAG, 0, "profile", NULL, "model: time each kind of op of each test (the matmuls by weight, attention, KV cache writes, norms, RoPE, activation ...): a table per test after the results, a \"profile\" object per JSON row (not with -o csv)", NULL, &opt_profile, 0, 0, NULL, COMPL_NONE},
    {OPT_LIST, 'd', "depth", "N", "model: context depth: the cache holds N positions (random keys and values) before each pp/tg test; a comma-separated list", "0", &opt_depth_l, 0, 0, NULL, COMPL_NONE},
    {OPT_LIST, 0, "kv-type", "TYPE", "KV cache format: f16 (as llama.cpp), f32 (exact), q8, q4 (KIVI), tq4, tq3 (TurboQuant), tiered (f16, then q8, then --kv-cold); model: a comma-separated list", "f16", &opt_kv_l, 0, 0, NULL, COMPL_NONE},
    {OPT_LIST, 0, "kv-type-k", "TYPE", "KV cache format of the keys only (default: --kv-type); model: a list, each with each --kv-type-v", NULL, &opt_kvk_l, 0, 0, NULL, COMPL_NONE},
    {OPT_LIST, 0, "kv-type-v", "TYPE", "KV cache format of the values only (default: --kv-type); model: a list", NULL, &opt_kvv_l, 0, 0, NULL, COMPL_NONE},
    {OPT_INT, 0, "kv-hot", "N", "tiered: the newest N tokens stay in f16 (whole pages of 32)", "256", &opt_kv.hot, 1, 1 << 20, NULL, COMPL_NONE},
    {OPT_INT, 0, "kv-warm", "N", "tiered: the next N tokens are kept in q8, older ones in --kv-cold", "2048", &opt_kv.warm, 1, 1 << 20, NULL, COMPL_NONE},
    {OPT_CHOICE, 0, "kv-cold", "TYPE", "tiered: format of the oldest tokens (default tq4; q8 for a latent (MLA) cache, which takes no 4-bit format)", NULL, &opt_kv.cold, 0, 0, "q4|tq4", COMPL_NONE},
    OPT_EXPERT_BUDGET(opt_expert_budget),
    OPT_END
};

/* ====================================================================
 * Lists: every occurrence of a list option, each split at commas
 * ==================================================================== */

typedef struct {
    char **v;
    int n;
} slist;

static void slist_free(slist *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    *l = (slist){0};
}

/* The values of option --name, or def alone when it was not given (def
 * NULL: an empty list). Empty items ("1,,2") are usage errors. */
static slist split_list(const char *name, const opt_list *o, const char *def)
{
    slist l = {0};
    const char *only_def[] = {def};
    const char **items = o->n ? o->items : only_def;
    int n_items = o->n ? o->n : def ? 1 : 0;
    for (int i = 0; i < n_items; i++) {
        for (const char *p = items[i];;) {
            size_t len = strcspn(p, ",");
            if (len == 0)
                cli_usage("bench", "--%s: an empty item in '%s'", name, items[i]);
            char **nv = realloc(l.v, (size_t)(l.n + 1) * sizeof *nv);
            char *item = strndup(p, len);
            if (!nv || !item) {
                cli_err("bench", "out of memory");
                exit(EXIT_RUNTIME);
            }
            l.v = nv;
            l.v[l.n++] = item;
            if (!p[len])
                break;
            p += len + 1;
        }
    }
    return l;
}

/* Integers in [min, max]: as split_list, each checked. owned: free(). */
static long long *int_list(const char *name, const opt_list *o, const char *def, long long min,
                           long long max, int *n)
{
    slist l = split_list(name, o, def);
    long long *v = malloc((size_t)(l.n ? l.n : 1) * sizeof *v);
    if (!v) {
        cli_err("bench", "out of memory");
        exit(EXIT_RUNTIME);
    }
    for (int i = 0; i < l.n; i++) {
        char *end;
        errno = 0;
        v[i] = strtoll(l.v[i], &end, 10);
        if (*end || errno || end == l.v[i])
            cli_usage("bench", "--%s: '%s' is not an integer", name, l.v[i]);
        if (v[i] < min || v[i] > max)
            cli_usage("bench", "--%s: %lld is out of range [%lld, %lld]", name, v[i], min, max);
    }
    *n = l.n;
    slist_free(&l);
    return v;
}

/* KV formats: as split_list, each one the library knows. */
static slist kv_list(const char *name, const opt_list *o)
{
    slist l = split_list(name, o, NULL);
    char nm[32];
    snprintf(nm, sizeof nm, "--%s", name);
    for (int i = 0; i < l.n; i++) {
        const char *ours = cli_kv_name("bench", nm, l.v[i]);
        if (ours != l.v[i]) {
            char *c = strdup(ours);
            if (!c) {
                cli_err("bench", "out of memory");
                exit(EXIT_RUNTIME);
            }
            free(l.v[i]);
            l.v[i] = c;
        }
    }
    return l;
}

/* kernels and ppl take one value of a list option: it, or NULL. */
static const char *one_value(const char *sub, const char *name, const opt_list *o)
{
    if (o->n > 1 || (o->n == 1 && strchr(o->items[0], ',')))
        cli_usage("bench", "--%s: 'bench %s' takes one value (lists are for 'bench model')", name,
                  sub);
    return o->n ? o->items[0] : NULL;
}

/* One integer of a list option (kernels, ppl), def when not given. */
static long long one_int(const char *sub, const char *name, const opt_list *o, long long def,
                         long long min, long long max)
{
    if (!one_value(sub, name, o))
        return def;
    int n;
    long long *v = int_list(name, o, NULL, min, max, &n), x = v[0];
    free(v);
    return x;
}

/* The KV options as run and chat take them, for kernels and ppl. */
static void one_kv(const char *sub)
{
    opt_kv.type = one_value(sub, "kv-type", &opt_kv_l);
    opt_kv.type_k = one_value(sub, "kv-type-k", &opt_kvk_l);
    opt_kv.type_v = one_value(sub, "kv-type-v", &opt_kvv_l);
    slist a = kv_list("kv-type", &opt_kv_l), b = kv_list("kv-type-k", &opt_kvk_l),
          c = kv_list("kv-type-v", &opt_kvv_l);
    slist_free(&a);
    slist_free(&b);
    slist_free(&c);
}

/* llama-bench's spellings (the shared ones: opt.c). */
static const cli_alias aliases[] = {
    {"-fa|--flash-attn", ALIAS_ACCEPT, NULL, 1, NULL,
     "ruvllm's attention is always the fused (flash) kernel: -fa changes nothing"},
    {"--n-depth", ALIAS_OPTION, "depth", 0, NULL, NULL},
    {"-pg", ALIAS_REFUSE, NULL, 1, NULL,
     "bench model times the prompt (-p N) and the generation (-n N) apart: give those"},
    ALIAS_END
};

enum { OUT_MD, OUT_CSV, OUT_JSON };

static int out_format(void)
{
    if (opt_json) {
        if (opt_output && strcmp(opt_output, "json") != 0)
            cli_usage("bench", "--json and -o %s disagree", opt_output);
        return OUT_JSON;
    }
    if (!opt_output || strcmp(opt_output, "md") == 0)
        return OUT_MD;
    return strcmp(opt_output, "csv") == 0 ? OUT_CSV : OUT_JSON;
}

/* Refuse options of the other subcommands. */
static void only(const char *sub, const char *allowed)
{
    const struct {
        const char *name;
        bool given;
    } given[] = {
        {"model", opt_models.n > 0}, {"repetitions", opt_reps >= 0}, {"filter", opt_filter != NULL},
        {"isa", opt_isa != NULL}, {"tokens", opt_m >= 0}, {"mem-size", opt_mem >= 0},
        {"n-prompt", opt_p_l.n > 0}, {"n-gen", opt_n_l.n > 0}, {"synthetic", opt_synth != NULL},
        {"type", opt_type != NULL}, {"file", opt_file != NULL}, {"ctx-size", opt_ctx >= 0},
        {"chunks", opt_chunks >= 0}, {"kl-base", opt_kl_base != NULL}, {"kl", opt_kl != NULL},
        {"depth", opt_depth_l.n > 0}, {"huge-pages", opt_huge},
        {"expert-budget", opt_expert_budget > 0}, {"profile", opt_profile},
    };
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++) {
        if (!given[i].given)
            continue;
        char pat[40];
        snprintf(pat, sizeof pat, " %s ", given[i].name);
        if (!strstr(allowed, pat))
            cli_usage("bench", "option '--%s' does not apply to 'bench %s'", given[i].name, sub);
    }
}

static int n_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void human_bytes(char *buf, size_t cap, double b)
{
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, cap, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else
        snprintf(buf, cap, "%.2f MiB", b / (1024.0 * 1024));
}

/* ====================================================================
 * bench kernels
 * ==================================================================== */

static const char *const default_formats[] = {
    "F16", "BF16", "F32", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K",
    "Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS", "MXFP4", NULL,
};

/* Llama-7B's matrix shapes: rows x row length (outputs x inputs). */
static const struct {
    uint64_t n, k;
} llama7b_shapes[] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};

typedef struct {
    rvl_bench_kcase c;
    char label[160];          /* "op type isa shape [tensor]": what --filter sees */
    char type_name[16], shape[48], source[64];
} kcase;

typedef struct {
    kcase *v;
    size_t n, cap;
} kcases;

static int kc_add(kcases *cs, rvl_bench_op op, uint32_t type, const char *isa, uint64_t n, uint64_t k,
                  uint32_t m, const char *source)
{
    if (cs->n == cs->cap) {
        size_t nc = cs->cap ? cs->cap * 2 : 64;
        kcase *nv = realloc(cs->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        cs->v = nv;
        cs->cap = nc;
    }
    kcase *x = &cs->v[cs->n++];
    memset(x, 0, sizeof *x);
    x->c.op = op;
    x->c.type = type;
    x->c.isa = isa;
    x->c.n = n;
    x->c.k = k;
    x->c.m = m;
    x->c.reps = (int)(opt_reps > 0 ? opt_reps : 5);
    const rvl_type_info *ti = rvl_type_get(type);
    bool ew = op == RVL_BENCH_RMSNORM || op == RVL_BENCH_ROPE || op == RVL_BENCH_SOFTMAX;
    snprintf(x->type_name, sizeof x->type_name, "%s", ew ? "F32" : ti ? ti->name : "?");
    if (op == RVL_BENCH_GEMM)
        snprintf(x->shape, sizeof x->shape, "%llux%llu m%u", (unsigned long long)n, (unsigned long long)k, m);
    else
        snprintf(x->shape, sizeof x->shape, "%llux%llu", (unsigned long long)n, (unsigned long long)k);
    snprintf(x->source, sizeof x->source, "%s", source);
    snprintf(x->label, sizeof x->label, "%s %s %s %s %s", rvl_bench_op_name(op), x->type_name,
             ew ? "ref" : isa, x->shape, source);
    return 0;
}

/* The distinct matrices of a model file: (type, rows, row length), named
 * by their tensor name without the "blk.N." prefix. */
static int model_cases(kcases *cs, const char *path, const char *const *isas, int n_isa, uint32_t m)
{
    rvl_file *f = NULL;
    int rc = rvl_file_open(&f, path);
    if (rc < 0)
        return rc;
    struct {
        uint32_t type;
        uint64_t n, k;
        char name[64];
    } seen[256];
    int n_seen = 0;
    for (uint64_t i = 0; i < rvl_file_n_tensors(f) && n_seen < 256; i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        if (t->n_dims != 2 || !rvl_type_get(t->type))
            continue;
        const char *nm = t->name.ptr;
        size_t len = t->name.len;
        if (len > 4 && memcmp(nm, "blk.", 4) == 0) {
            const char *dot = memchr(nm + 4, '.', len - 4);
            if (dot) {
                len -= (size_t)(dot + 1 - nm);
                nm = dot + 1;
            }
        }
        if (len > 7 && memcmp(nm + len - 7, ".weight", 7) == 0)
            len -= 7;
        int at = -1;
        for (int s = 0; s < n_seen; s++)
            if (seen[s].type == t->type && seen[s].n == t->ne[1] && seen[s].k == t->ne[0])
                at = s;
        if (at < 0) {
            at = n_seen++;
            seen[at].type = t->type;
            seen[at].n = t->ne[1];
            seen[at].k = t->ne[0];
            seen[at].name[0] = 0;
        }
        /* several tensors of one shape and type: "attn_q/attn_output" */
        char *dst = seen[at].name;
        size_t used = strlen(dst);
        bool have = false;
        for (const char *q = dst; *q;) {
            size_t l = strcspn(q, "/");
            have |= l == len && memcmp(q, nm, len) == 0;
            q += l + (q[l] == '/');
        }
        if (!have && used + len + 2 < sizeof seen[at].name)
            snprintf(dst + used, sizeof seen[at].name - used, "%s%.*s", used ? "/" : "", (int)len, nm);
    }
    rvl_file_close(f);
    for (int s = 0; s < n_seen; s++)
        for (int op = 0; op < 2; op++)
            for (int i = 0; i < n_isa; i++)
                if (kc_add(cs, op ? RVL_BENCH_GEMM : RVL_BENCH_GEMV, seen[s].type, isas[i], seen[s].n,
                           seen[s].k, op ? m : 1, seen[s].name) < 0)
                    return rvl_seterr(RVL_ENOMEM, "out of memory");
    return 0;
}

#define MAX_COLS 5

typedef struct {
    int fmt;
    rvl_jw jw;
    double bw_gbs;
    const char *isa_names[8];
    double peak[8];
    double peak_i8[8];            /* int8 GOP/s per variant (0: not measured) */
    int n_peak;
    /* markdown with several variants: one row per (op, type, shape,
     * source), one GB/s or GFLOP/s column per variant */
    bool side;
    const char *cols[MAX_COLS];
    int n_cols;
    const kcase *grp;         /* the row being gathered (NULL: none) */
    double val[MAX_COLS];     /* its values per column (0: not measured) */
    double frac[MAX_COLS];    /* and their roofline fractions */
    int threads;
    const char *machine;       /* the source column of the machine rows */
} kout;

static double peak_of(const kout *o, const char *isa)
{
    for (int i = 0; i < o->n_peak; i++)
        if (strcmp(o->isa_names[i], isa) == 0)
            return o->peak[i];
    return 0;
}

/* The roofline of a GEMM row: the int8 dot peak for the integer formats
 * where the variant has one (*i8), else the f32 FMA peak. */
static double gemm_peak(const kout *o, const kcase *k, const char *isa, bool *i8)
{
    const bool flt = !strcmp(k->type_name, "F32") || !strcmp(k->type_name, "F16") ||
                     !strcmp(k->type_name, "BF16");
    for (int i = 0; i < o->n_peak; i++)
        if (strcmp(o->isa_names[i], isa) == 0) {
            *i8 = !flt && o->peak_i8[i] > 0;
            return *i8 ? o->peak_i8[i] : o->peak[i];
        }
    *i8 = false;
    return 0;
}

static void md_sep(void)
{
    printf("| %-10s | %-7s | %-6s | %-18s | %-14s | %7s | %10s | %9s | %9s | %-10s | %9s |\n", "op", "type", "isa",
           "shape", "source", "threads", "ms", "GB/s", "GFLOP/s", "roofline", "read GB/s");
    printf("| ---------- | ------- | ------ | ------------------ | -------------- | ------: | ---------: | --------: | --------: | ---------- | --------: |\n");
}

/* --- side by side (markdown, several variants) ---------------------- */

static void side_header(const kout *o)
{
    printf("| %-10s | %-7s | %-18s | %-14s | %7s | %-7s |", "op", "type", "shape", "source", "threads", "unit");
    for (int c = 0; c < o->n_cols; c++)
        printf(" %9s |", o->cols[c]);
    printf(" %-16s |\n", "best roofline");
    printf("| ---------- | ------- | ------------------ | -------------- | ------: | ------- |");
    for (int c = 0; c < o->n_cols; c++)
        printf(" --------: |");
    printf(" ---------------- |\n");
}

/* One side-by-side row: val[c] per column (0: not measured, "-"), the
 * values with `prec` decimals, and the last column as given. */
static void side_row(const kout *o, const char *op, const char *type, const char *shape, const char *source,
                     const char *unit, const double *val, int prec, const char *last)
{
    printf("| %-10s | %-7s | %-18s | %-14s | %7d | %-7s |", op, type, shape, source, o->threads, unit);
    for (int c = 0; c < o->n_cols; c++) {
        if (val[c] > 0)
            printf(" %9.*f |", prec, val[c]);
        else
            printf(" %9s |", "-");
    }
    printf(" %-16s |\n", last);
    fflush(stdout);
}

static int side_col(const kout *o, const char *isa)
{
    for (int c = 0; c < o->n_cols; c++)
        if (strcmp(o->cols[c], isa) == 0)
            return c;
    return -1;
}

/* Print the gathered row, if any: the best variant is the fastest one. */
static void side_flush(kout *o)
{
    const kcase *k = o->grp;
    if (!k)
        return;
    const bool vs_peak = k->c.op == RVL_BENCH_GEMM;
    int best = -1;
    for (int c = 0; c < o->n_cols; c++)
        if (o->val[c] > 0 && (best < 0 || o->val[c] > o->val[best]))
            best = c;
    char last[48] = "";
    bool i8 = false;
    if (best >= 0 && vs_peak)
        (void)gemm_peak(o, k, o->cols[best], &i8);
    if (best >= 0 && o->frac[best] > 0)
        snprintf(last, sizeof last, "%s %.0f%% %s", o->cols[best], o->frac[best] * 100,
                 vs_peak ? (i8 ? "peak i8" : "peak") : "bw");
    else if (best >= 0)
        snprintf(last, sizeof last, "%s", o->cols[best]);
    side_row(o, rvl_bench_op_name(k->c.op), k->type_name, k->shape, k->source, vs_peak ? "GFLOP/s" : "GB/s",
             o->val, vs_peak ? 1 : 2, last);
    o->grp = NULL;
}

static bool same_row(const kcase *a, const kcase *b)
{
    return a->c.op == b->c.op && strcmp(a->type_name, b->type_name) == 0 && strcmp(a->shape, b->shape) == 0 &&
           strcmp(a->source, b->source) == 0;
}

/* One measurement into its row's column; a new row prints the last. */
static void side_add(kout *o, const kcase *k, const char *isa, double value, double frac)
{
    if (o->grp && !same_row(o->grp, k))
        side_flush(o);
    if (!o->grp) {
        o->grp = k;
        memset(o->val, 0, sizeof o->val);
        memset(o->frac, 0, sizeof o->frac);
    }
    int c = side_col(o, isa);
    if (c >= 0) {
        o->val[c] = value;
        o->frac[c] = frac;
    }
}

/* One machine row: bandwidth or peak. */
static void print_machine_row(kout *o, const char *op, const char *type, const char *isa, const char *shape,
                              int threads, double gbs, double gflops)
{
    if (o->fmt == OUT_MD && o->side) {
        /* the bandwidth is every variant's roofline: in every column */
        double val[MAX_COLS] = {0};
        for (int c = 0; c < o->n_cols; c++)
            val[c] = gbs;
        side_row(o, op, type, shape, o->machine, "GB/s", val, 2, "");
        return;
    }
    if (o->fmt == OUT_MD) {
        char g[32] = "", f[32] = "";
        if (gbs > 0)
            snprintf(g, sizeof g, "%.2f", gbs);
        if (gflops > 0)
            snprintf(f, sizeof f, "%.1f", gflops);
        printf("| %-10s | %-7s | %-6s | %-18s | %-14s | %7d | %10s | %9s | %9s | %-10s | %9s |\n", op, type, isa,
               shape, o->machine, threads, "", g, f, "", "");
    } else if (o->fmt == OUT_CSV) {
        printf("%s,%s,%s,%s,%s,%d,,%.4f,%.4f,,,\n", op, type, isa, shape, o->machine, threads, gbs, gflops);
    }
    fflush(stdout);
}

static void print_kernel_row(kout *o, const kcase *k, const rvl_bench_kresult *r, int threads)
{
    const double t = r->median_s;
    const double gbs = t > 0 ? r->bytes / t / 1e9 : 0;
    const double gflops = t > 0 && r->flops > 0 ? r->flops / t / 1e9 : 0;
    /* GEMM is compute-bound: against the FMA peak; the rest: memory,
     * the read bandwidth measured alternately with the kernel's own
     * repetitions where bench has it (GEMV, dequantize), else the best
     * of the STREAM numbers measured at the start */
    const bool vs_peak = k->c.op == RVL_BENCH_GEMM;
    bool i8 = false;
    const double peak = vs_peak ? gemm_peak(o, k, r->impl, &i8) : 0;
    const double frac_stream = o->bw_gbs > 0 ? gbs / o->bw_gbs : 0;
    const bool interleaved = !vs_peak && r->read_gbs > 0;
    const double frac = vs_peak ? (peak > 0 ? gflops / peak : 0) : interleaved ? gbs / r->read_gbs : frac_stream;
    const char *op = rvl_bench_op_name(k->c.op);

    if (o->fmt == OUT_MD && o->side) {
        side_add(o, k, r->impl, vs_peak ? gflops : gbs, frac);
    } else if (o->fmt == OUT_MD) {
        char f[32] = "", roof[32] = "", rd[32] = "";
        if (gflops > 0)
            snprintf(f, sizeof f, "%.1f", gflops);
        if (frac > 0)
            snprintf(roof, sizeof roof, "%.0f%% %s", frac * 100, vs_peak ? (i8 ? "peak i8" : "peak") : "bw");
        if (interleaved)
            snprintf(rd, sizeof rd, "%.2f", r->read_gbs);
        printf("| %-10s | %-7s | %-6s | %-18s | %-14s | %7d | %10.3f | %9.2f | %9s | %-10s | %9s |\n", op,
               k->type_name, r->impl, k->shape, k->source, threads, t * 1e3, gbs, f, roof, rd);
    } else if (o->fmt == OUT_CSV) {
        printf("%s,%s,%s,%s,%s,%d,%.6f,%.4f,%.4f,%.4f,%s,%.4f\n", op, k->type_name, r->impl, k->shape,
               k->source, threads, t * 1e3, gbs, gflops, frac,
               vs_peak ? (i8 ? "peak_int8" : "peak") : "bw", r->read_gbs);
    } else {
        rvl_jw *w = &o->jw;
        rvl_jw_obj(w);
        rvl_jw_key(w, "op"); rvl_jw_str(w, op);
        rvl_jw_key(w, "type"); rvl_jw_str(w, k->type_name);
        rvl_jw_key(w, "isa"); rvl_jw_str(w, r->impl);
        rvl_jw_key(w, "n"); rvl_jw_u64(w, k->c.n);
        rvl_jw_key(w, "k"); rvl_jw_u64(w, k->c.k);
        rvl_jw_key(w, "m"); rvl_jw_u64(w, k->c.op == RVL_BENCH_GEMM ? k->c.m : 1);
        rvl_jw_key(w, "source"); rvl_jw_str(w, k->source);
        rvl_jw_key(w, "threads"); rvl_jw_i64(w, threads);
        rvl_jw_key(w, "reps"); rvl_jw_i64(w, k->c.reps);
        rvl_jw_key(w, "median_ms"); rvl_jw_f64(w, t * 1e3);
        rvl_jw_key(w, "min_ms"); rvl_jw_f64(w, r->min_s * 1e3);
        rvl_jw_key(w, "max_ms"); rvl_jw_f64(w, r->max_s * 1e3);
        rvl_jw_key(w, "bytes"); rvl_jw_f64(w, r->bytes);
        rvl_jw_key(w, "flops"); rvl_jw_f64(w, r->flops);
        rvl_jw_key(w, "gbs"); rvl_jw_f64(w, gbs);
        rvl_jw_key(w, "gflops"); rvl_jw_f64(w, gflops);
        rvl_jw_key(w, "roofline"); rvl_jw_str(w, vs_peak ? (i8 ? "peak_int8" : "peak") : "bw");
        rvl_jw_key(w, "roofline_fraction"); rvl_jw_f64(w, frac);
        /* where the bandwidth roofline came from: "read" interleaved with
         * the repetitions, or "stream" (memory.bw_gbs); "peak" for GEMM */
        rvl_jw_key(w, "roofline_source");
        rvl_jw_str(w, vs_peak ? (i8 ? "peak_int8" : "peak") : interleaved ? "read" : "stream");
        rvl_jw_key(w, "read_gbs"); rvl_jw_f64(w, r->read_gbs);
        rvl_jw_key(w, "read_min_gbs"); rvl_jw_f64(w, r->read_min_gbs);
        rvl_jw_key(w, "read_max_gbs"); rvl_jw_f64(w, r->read_max_gbs);
        rvl_jw_key(w, "roofline_fraction_stream"); rvl_jw_f64(w, vs_peak ? 0 : frac_stream);
        /* the weights in the 16-row packed layout (formats.h gemm16), as
         * the forward pass holds this format on this variant */
        rvl_jw_key(w, "packed"); rvl_jw_bool(w, r->packed);
        rvl_jw_obj_end(w);
    }
    fflush(stdout);
}

static int parse_isas(const char *name, const char **isas, int *n_isa)
{
    static const char *const all[] = {"ref", "avx2", "avx512", "neon"};
    *n_isa = 0;
    if (!opt_isa) {
        isas[(*n_isa)++] = rvl_cpu_isa_selected();
        return 0;
    }
    if (strcmp(opt_isa, "all") == 0) {
        for (size_t i = 0; i < 4; i++)
            if (rvl_cpu_isa_check(all[i]) == 0)
                isas[(*n_isa)++] = all[i];
        return 0;
    }
    const char *p = opt_isa;
    while (*p) {
        size_t l = strcspn(p, ",");
        const char *hit = NULL;
        for (size_t i = 0; i < 4; i++)
            if (strlen(all[i]) == l && strncmp(all[i], p, l) == 0)
                hit = all[i];
        if (!hit)
            cli_usage(name, "--isa: unknown instruction set '%.*s' (ref, avx2, avx512, neon, all)", (int)l, p);
        if (rvl_cpu_isa_check(hit) < 0) {
            cli_err(name, "--isa: %s is not available on this CPU or not compiled in", hit);
            return -1;
        }
        bool dup = false;
        for (int i = 0; i < *n_isa; i++)
            dup |= strcmp(isas[i], hit) == 0;
        if (!dup && *n_isa < 4)
            isas[(*n_isa)++] = hit;
        p += l + (p[l] == ',');
    }
    if (*n_isa == 0)
        cli_usage(name, "--isa: empty list");
    return 0;
}

static void progress(const char *name, size_t i, size_t n, const char *label)
{
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "\r\033[Kruvllm %s: [%zu/%zu] %s", name, i + 1, n, label);
}

static void progress_done(void)
{
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "\r\033[K");
}

/* Every default format at Llama-7B's shapes on each variant: GEMV, GEMM
 * of m columns, quantize, dequantize (the variants of one row side by
 * side). 0, or -1 when out of memory. */
static int format_cases(kcases *cs, const char *const *isas, int n_isa, uint32_t m)
{
    bool oom = false;
    const size_t ns = sizeof llama7b_shapes / sizeof llama7b_shapes[0];
    for (int f = 0; default_formats[f]; f++) {
        int type = rvl_type_from_name(default_formats[f]);
        if (type < 0)
            continue;
        for (size_t s = 0; s < ns; s++)
            for (int i = 0; i < n_isa; i++)
                oom |= kc_add(cs, RVL_BENCH_GEMV, (uint32_t)type, isas[i], llama7b_shapes[s].n,
                              llama7b_shapes[s].k, 1, "llama-7b") < 0;
        for (size_t s = 0; s < ns; s++)
            for (int i = 0; i < n_isa; i++)
                oom |= kc_add(cs, RVL_BENCH_GEMM, (uint32_t)type, isas[i], llama7b_shapes[s].n,
                              llama7b_shapes[s].k, m, "llama-7b") < 0;
        for (int i = 0; i < n_isa; i++)
            oom |= kc_add(cs, RVL_BENCH_QUANTIZE, (uint32_t)type, isas[i], 256, 4096, 1, "-") < 0;
        for (int i = 0; i < n_isa; i++)
            oom |= kc_add(cs, RVL_BENCH_DEQUANTIZE, (uint32_t)type, isas[i], 1024, 4096, 1, "-") < 0;
    }
    return oom ? -1 : 0;
}

/* The table's start (JSON: up to the results array) and the machine's
 * rows: memory bandwidth and peak FLOP/s, the roofline every kernel row
 * is measured against. */
static void print_machine(kout *o, const rvl_bench *b, const rvl_bench_membw *bw)
{
    const int threads = o->threads;
    char arr[48];
    human_bytes(arr, sizeof arr, (double)bw->array_bytes);
    if (o->side) {
        side_header(o);
    } else if (o->fmt == OUT_MD) {
        md_sep();
    } else if (o->fmt == OUT_CSV) {
        printf("op,type,isa,shape,source,threads,median_ms,gbs,gflops,roofline_fraction,roofline,read_gbs\n");
    } else {
        rvl_jw *w = &o->jw;
        rvl_jw_init(w, stdout, true);
        rvl_jw_obj(w);
        rvl_jw_key(w, "threads"); rvl_jw_i64(w, threads);
        rvl_jw_key(w, "isa_selected"); rvl_jw_str(w, rvl_cpu_isa_selected());
        rvl_jw_key(w, "llc_bytes"); rvl_jw_u64(w, rvl_bench_llc_bytes());
        rvl_jw_key(w, "working_set_bytes"); rvl_jw_u64(w, rvl_bench_ws_bytes(b));
        rvl_jw_key(w, "memory");
        rvl_jw_obj(w);
        rvl_jw_key(w, "array_bytes"); rvl_jw_u64(w, bw->array_bytes);
        rvl_jw_key(w, "copy_gbs"); rvl_jw_f64(w, bw->copy_gbs);
        rvl_jw_key(w, "triad_gbs"); rvl_jw_f64(w, bw->triad_gbs);
        rvl_jw_key(w, "read_gbs"); rvl_jw_f64(w, bw->read_gbs);
        rvl_jw_key(w, "bw_gbs"); rvl_jw_f64(w, o->bw_gbs);
        rvl_jw_key(w, "huge_pages"); rvl_jw_bool(w, opt_huge);
        rvl_jw_key(w, "huge_bytes"); rvl_jw_u64(w, bw->huge_bytes);
        rvl_jw_obj_end(w);
        rvl_jw_key(w, "peak_gflops");
        rvl_jw_obj(w);
        for (int i = 0; i < o->n_peak; i++) {
            rvl_jw_key(w, o->isa_names[i]);
            rvl_jw_f64(w, o->peak[i]);
        }
        rvl_jw_obj_end(w);
        rvl_jw_key(w, "peak_int8_gops");
        rvl_jw_obj(w);
        for (int i = 0; i < o->n_peak; i++)
            if (o->peak_i8[i] > 0) {
                rvl_jw_key(w, o->isa_names[i]);
                rvl_jw_f64(w, o->peak_i8[i]);
            }
        rvl_jw_obj_end(w);
        rvl_jw_key(w, "results");
        rvl_jw_arr(w);
    }
    print_machine_row(o, "copy", "f64", "-", arr, threads, bw->copy_gbs, 0);
    print_machine_row(o, "triad", "f64", "-", arr, threads, bw->triad_gbs, 0);
    print_machine_row(o, "read", "u64", "-", arr, threads, bw->read_gbs, 0);
    if (o->side && o->n_peak) {
        double val[MAX_COLS] = {0};
        for (int c = 0; c < o->n_cols; c++)
            val[c] = peak_of(o, o->cols[c]);
        side_row(o, "peak", "f32 fma", "registers", o->machine, "GFLOP/s", val, 1, "");
        bool any = false;
        for (int c = 0; c < o->n_cols; c++) {
            val[c] = 0;
            for (int i = 0; i < o->n_peak; i++)
                if (!strcmp(o->isa_names[i], o->cols[c]))
                    val[c] = o->peak_i8[i];
            any |= val[c] > 0;
        }
        if (any)
            side_row(o, "peak", "int8 dp", "registers", o->machine, "GOP/s", val, 1, "");
    } else {
        for (int i = 0; i < o->n_peak; i++)
            print_machine_row(o, "peak", "f32 fma", o->isa_names[i], "registers", threads, 0, o->peak[i]);
        for (int i = 0; i < o->n_peak; i++)
            if (o->peak_i8[i] > 0)
                print_machine_row(o, "peak", "int8 dp", o->isa_names[i], "registers", threads, 0,
                                  o->peak_i8[i]);
    }
}

static int bench_kernels(const char *name)
{
    const char *isas[4];
    int n_isa, status = 0, rc;
    kcases cs = {0};
    pcre2_code *re = NULL;
    pcre2_match_data *md = NULL;
    rvl_bench *b = NULL;
    kout o;
    memset(&o, 0, sizeof o);
    o.fmt = out_format();

    only("kernels", " model repetitions filter isa tokens mem-size huge-pages ");
    const char *model = one_value("kernels", "model", &opt_models);
    const long long threads_opt = one_int("kernels", "threads", &opt_threads_l, 0, 0, 256);
    if (parse_isas(name, isas, &n_isa) < 0)
        return EXIT_RUNTIME;
    if (opt_filter) {
        int err;
        PCRE2_SIZE off;
        re = pcre2_compile((PCRE2_SPTR)opt_filter, PCRE2_ZERO_TERMINATED, PCRE2_CASELESS | PCRE2_UTF, &err, &off,
                           NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(err, msg, sizeof msg);
            cli_usage(name, "--filter: '%s' is not a valid regular expression: %s at offset %zu", opt_filter,
                      (const char *)msg, (size_t)off);
        }
        md = pcre2_match_data_create_from_pattern(re, NULL);
    }
    const uint32_t m = (uint32_t)(opt_m > 0 ? opt_m : 64);

    /* the cases: every default format at Llama-7B's shapes, the model's
     * own matrices with -m, then the elementwise operations */
    bool oom = format_cases(&cs, isas, n_isa, m) < 0;
    if (model) {
        if ((rc = model_cases(&cs, model, isas, n_isa, m)) < 0) {
            status = cli_fail(name, rc);
            goto out;
        }
    }
    oom |= kc_add(&cs, RVL_BENCH_RMSNORM, RVL_TYPE_F32, "ref", 512, 4096, 1, "-") < 0;
    oom |= kc_add(&cs, RVL_BENCH_ROPE, RVL_TYPE_F32, "ref", 512, 4096, 1, "-") < 0;
    oom |= kc_add(&cs, RVL_BENCH_SOFTMAX, RVL_TYPE_F32, "ref", 32, 4096, 1, "-") < 0;
    if (oom) {
        cli_err(name, "out of memory");
        status = EXIT_RUNTIME;
        goto out;
    }
    size_t n_sel = 0;
    bool any_gemm = false;
    for (size_t i = 0; i < cs.n; i++) {
        bool keep = !re || pcre2_match(re, (PCRE2_SPTR)cs.v[i].label, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL) >= 0;
        if (keep) {
            any_gemm |= cs.v[i].c.op == RVL_BENCH_GEMM;
            cs.v[n_sel++] = cs.v[i];
        }
    }
    cs.n = n_sel;
    if (n_sel == 0) {
        cli_err(name, "--filter '%s' matches no benchmark", opt_filter);
        status = EXIT_RUNTIME;
        goto out;
    }
    /* several variants in markdown: side by side, a column each (the
     * elementwise operations only have ref, which gets a column too) */
    o.side = o.fmt == OUT_MD && (n_isa > 1 || strcmp(opt_isa ? opt_isa : "", "all") == 0);
    if (o.side) {
        for (int i = 0; i < n_isa; i++)
            o.cols[o.n_cols++] = isas[i];
        for (size_t i = 0; i < cs.n; i++)
            if (side_col(&o, cs.v[i].c.isa) < 0 && o.n_cols < MAX_COLS) {
                memmove(o.cols + 1, o.cols, (size_t)o.n_cols * sizeof o.cols[0]);
                o.cols[0] = cs.v[i].c.isa;
                o.n_cols++;
            }
    }

    uint64_t ws = opt_mem > 0 ? (uint64_t)opt_mem << 20 : 0;
    if ((rc = rvl_bench_open(&b, (int)threads_opt, ws)) < 0) {
        status = cli_fail(name, rc);
        goto out;
    }
    rvl_bench_set_huge_pages(b, opt_huge);
    const int threads = rvl_bench_n_threads(b);
    const int reps = (int)(opt_reps > 0 ? opt_reps : 5);

    /* the machine first: the roofline every row is measured against */
    rvl_bench_membw bw;
    progress(name, 0, 1, "memory bandwidth");
    if ((rc = rvl_bench_mem(b, reps < 3 ? reps : 3, &bw)) < 0) {
        progress_done();
        status = cli_fail(name, rc);
        goto out;
    }
    /* with --huge-pages, the rows say whether the kernel gave them */
    o.machine = !opt_huge ? "machine" : bw.huge_bytes ? "machine 2M" : "machine 4K?";
    o.bw_gbs = bw.copy_gbs > bw.triad_gbs ? bw.copy_gbs : bw.triad_gbs;
    if (bw.read_gbs > o.bw_gbs)
        o.bw_gbs = bw.read_gbs;
    if (any_gemm)
        for (int i = 0; i < n_isa; i++) {
            progress(name, 0, 1, "peak FLOP/s");
            if ((rc = rvl_bench_peak(b, isas[i], &o.peak[o.n_peak])) < 0 ||
                (rc = rvl_bench_peak_int8(b, isas[i], &o.peak_i8[o.n_peak])) < 0) {
                progress_done();
                status = cli_fail(name, rc);
                goto out;
            }
            o.isa_names[o.n_peak++] = isas[i];
        }
    progress_done();

    o.threads = threads;
    print_machine(&o, b, &bw);

    for (size_t i = 0; i < cs.n; i++) {
        rvl_bench_kresult r;
        progress(name, i, cs.n, cs.v[i].label);
        rc = rvl_bench_kernel(b, &cs.v[i].c, &r);
        progress_done();
        if (rc == RVL_EUNSUPPORTED || rc == RVL_EINVAL) {
            /* a model tensor this kernel set cannot run: say so, go on */
            cli_err(name, "%s: skipped: %s", cs.v[i].label, rvl_errmsg());
            continue;
        }
        if (rc < 0) {
            status = cli_fail(name, rc);
            break;
        }
        print_kernel_row(&o, &cs.v[i], &r, threads);
    }
    side_flush(&o);
    if (o.fmt == OUT_JSON) {
        rvl_jw_arr_end(&o.jw);
        rvl_jw_obj_end(&o.jw); /* pretty: ends the line */
    }
    if (fflush(stdout) != 0 && !status) {
        cli_err(name, "writing to standard output failed: %s", strerror(errno));
        status = EXIT_RUNTIME;
    }
out:
    rvl_bench_close(b);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    free(cs.v);
    return status;
}

/* ====================================================================
 * bench model
 * ==================================================================== */

static void synth_progress(void *ud, uint64_t done, uint64_t total)
{
    int *last = ud;
    int pct = total ? (int)(done * 100 / total) : 100;
    if (pct == *last)
        return;
    *last = pct;
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "\r\033[Kruvllm bench: writing the synthetic model: %d%%", pct);
}

typedef struct {
    char model[96];           /* "llama 135M Q4_K_M", as llama-bench labels a model */
    char file[4096];          /* its path ("" for a synthetic model) */
    uint64_t size, params;
    char backend[32];
} model_desc;

static void describe_model(const rvl_model *m, const char *synth, const char *type_name, model_desc *d)
{
    const rvl_file *f = rvl_model_file(m);
    const rvl_hparams *hp = rvl_model_hparams(m);
    d->size = d->params = 0;
    for (uint64_t i = 0; i < rvl_file_n_tensors(f); i++) {
        const rvl_tensor_info *t = rvl_file_tensor(f, i);
        d->size += t->nbytes;
        d->params += t->n_elements;
    }
    char plabel[32], ftype[32];
    if (d->params >= 1000000000ull)
        snprintf(plabel, sizeof plabel, "%.1fB", (double)d->params / 1e9);
    else
        snprintf(plabel, sizeof plabel, "%.0fM", (double)d->params / 1e6);
    if (synth)
        snprintf(d->model, sizeof d->model, "%s %s (synthetic)", synth, type_name);
    else
        snprintf(d->model, sizeof d->model, "%s %s %s", hp->arch, plabel,
                 rvl_bench_file_type(f, ftype, sizeof ftype));
    snprintf(d->backend, sizeof d->backend, "CPU %s", rvl_cpu_isa_selected());
}

/* What bench model measures: every combination of its lists, in
 * llama-bench's order of loops (model outermost, each model loaded once;
 * then the K and V formats, threads, depth; the pp tests, then the tg
 * tests), one row each. */
typedef struct {
    const char *name;            /* the command's, for messages */
    int fmt, reps;
    slist models;                /* -m; empty: --synthetic or the default model */
    long long *threads, *np, *ng, *depth;
    int n_threads, n_np, n_ng, n_depth;
    char **kv_k, **kv_v;         /* the KV pairs; NULL: the default (f16) */
    int n_kv;
    bool kv_split;               /* K and V formats given apart (-ctk/-ctv) */
    bool show_kv;                /* KV formats given: a column each in the table */
    uint32_t n_ctx;              /* enough for the longest test at the deepest depth */
    struct prof_log *prof;       /* --profile: each test's, or NULL */
} model_plan;

/* --profile: each test's op times (rvl_profile, summed over its
 * repetitions), kept for the tables after the results (md) */
typedef struct {
    char label[256];             /* "pp512, llama 135M Q4_0, 2 threads" */
    uint32_t n;                  /* tokens per repetition */
    int reps;
    double wall_s;               /* the repetitions' time, summed */
    rvl_profile p;
} prof_test;
typedef struct prof_log {
    rvl_profile cur;             /* the context's accumulator */
    prof_test *t;
    int n, cap;
} prof_log;

static long long max_of(const long long *v, int n)
{
    long long m = 0;
    for (int i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* The KV pairs: --kv-type's list with K = V, or (when -ctk or -ctv is
 * given) every K format with every V format, as llama-bench crosses
 * -ctk and -ctv. */
static void plan_kv(model_plan *pl)
{
    slist t = kv_list("kv-type", &opt_kv_l), k = kv_list("kv-type-k", &opt_kvk_l),
          v = kv_list("kv-type-v", &opt_kvv_l);
    pl->kv_split = k.n || v.n;
    pl->show_kv = t.n || pl->kv_split;
    slist *ks = k.n ? &k : &t, *vs = v.n ? &v : &t;
    int nk = pl->kv_split ? (ks->n ? ks->n : 1) : (t.n ? t.n : 1);
    int nv = pl->kv_split ? (vs->n ? vs->n : 1) : 1;
    pl->kv_k = calloc((size_t)(nk * nv), sizeof *pl->kv_k);
    pl->kv_v = calloc((size_t)(nk * nv), sizeof *pl->kv_v);
    if (!pl->kv_k || !pl->kv_v) {
        cli_err(pl->name, "out of memory");
        exit(EXIT_RUNTIME);
    }
    for (int a = 0; a < nk; a++)
        for (int b = 0; b < nv; b++) {
            const char *kn = pl->kv_split ? (ks->n ? ks->v[a] : NULL) : (t.n ? t.v[a] : NULL);
            const char *vn = pl->kv_split ? (vs->n ? vs->v[b] : NULL) : kn;
            pl->kv_k[pl->n_kv] = kn ? strdup(kn) : NULL;
            pl->kv_v[pl->n_kv] = vn ? strdup(vn) : NULL;
            pl->n_kv++;
        }
    slist_free(&t);
    slist_free(&k);
    slist_free(&v);
}

static void plan_free(model_plan *pl)
{
    slist_free(&pl->models);
    free(pl->threads);
    free(pl->np);
    free(pl->ng);
    free(pl->depth);
    for (int i = 0; i < pl->n_kv; i++) {
        free(pl->kv_k[i]);
        free(pl->kv_v[i]);
    }
    free(pl->kv_k);
    free(pl->kv_v);
}

static void model_header(const model_plan *pl, rvl_jw *w)
{
    if (pl->fmt == OUT_MD) {
        printf("| %-34s | %10s | %10s | %-10s | %7s |", "model", "size", "params", "backend",
               "threads");
        if (pl->show_kv)
            printf(" %-6s | %-6s |", "type_k", "type_v");
        printf(" %10s | %20s |\n", "test", "t/s");
        printf("| ---------------------------------- | ---------: | ---------: | ---------- | ------: |");
        if (pl->show_kv)
            printf(" ------ | ------ |");
        printf(" ---------: | -------------------: |\n");
    } else if (pl->fmt == OUT_CSV) {
        printf("model,model_size,model_n_params,backend,n_threads,test,n_prompt,n_gen,reps,avg_ts,"
               "stddev_ts,avg_ms,n_depth,type_k,type_v\n");
    } else {
        rvl_jw_init(w, stdout, true);
        rvl_jw_arr(w);
    }
}

/* One test's row. */
typedef struct {
    const model_desc *d;
    int threads;
    const char *type_k, *type_v;
    uint32_t n_prompt, n_gen, depth;
    const char *test;            /* "pp512", "tg128@d512" */
} model_row;

static const char *const prof_names[RVL_PROF_COUNT] = {
#define PROF_NAME(id, label, what) label,
    RVL_PROF_KINDS(PROF_NAME)
#undef PROF_NAME
};

/* One kind of a test's profile: ms per repetition, its share of the
 * test's wall time (%), microseconds per token, calls per repetition. */
typedef struct {
    double ms, share, us_tok;
    uint64_t calls;
} prof_cell;

static prof_cell prof_at(const prof_test *t, int k)
{
    const double ns = (double)t->p.ns[k];
    return (prof_cell){
        .ms = ns / t->reps / 1e6,
        .share = t->wall_s > 0 ? ns / (t->wall_s * 1e9) * 100 : 0,
        .us_tok = ns / ((double)t->reps * t->n) / 1e3,
        .calls = t->p.calls[k] / (uint64_t)t->reps,
    };
}

/* "profile": {kind: {ms, share, us_per_token, calls}} for the kinds that ran */
static void prof_json(rvl_jw *w, const prof_test *t)
{
    rvl_jw_key(w, "profile");
    rvl_jw_obj(w);
    for (int k = 0; k < RVL_PROF_COUNT; k++) {
        if (!t->p.calls[k])
            continue;
        const prof_cell c = prof_at(t, k);
        rvl_jw_key(w, prof_names[k]);
        rvl_jw_obj(w);
        rvl_jw_key(w, "ms"); rvl_jw_f64(w, c.ms);
        rvl_jw_key(w, "share"); rvl_jw_f64(w, c.share / 100);
        rvl_jw_key(w, "us_per_token"); rvl_jw_f64(w, c.us_tok);
        rvl_jw_key(w, "calls"); rvl_jw_u64(w, c.calls);
        rvl_jw_obj_end(w);
    }
    rvl_jw_obj_end(w);
}

/* The table of one test's profile (md), after the results. */
static void prof_table(const prof_test *t)
{
    printf("\nprofile %s: %.2f ms per run of %u tokens (%d run%s)\n\n", t->label,
           t->wall_s / t->reps * 1e3, t->n, t->reps, t->reps == 1 ? "" : "s");
    printf("| %-14s | %10s | %6s | %10s | %8s |\n", "op", "ms", "share", "us/token", "calls");
    printf("| -------------- | ---------: | -----: | ---------: | -------: |\n");
    prof_cell sum = {0};
    for (int k = 0; k < RVL_PROF_COUNT; k++) {
        if (!t->p.calls[k])
            continue;
        const prof_cell c = prof_at(t, k);
        printf("| %-14s | %10.3f | %5.1f%% | %10.2f | %8llu |\n", prof_names[k], c.ms, c.share,
               c.us_tok, (unsigned long long)c.calls);
        sum.ms += c.ms;
        sum.share += c.share;
        sum.us_tok += c.us_tok;
    }
    printf("| %-14s | %10.3f | %5.1f%% | %10.2f | %8s |\n", "total", sum.ms, sum.share, sum.us_tok,
           "");
}

static void model_print_row(const model_plan *pl, rvl_jw *w, const model_row *r, const double *ts,
                            const double *ms)
{
    rvl_bench_stat st, sm;
    rvl_bench_stats(ts, pl->reps, &st);
    rvl_bench_stats(ms, pl->reps, &sm);
    const model_desc *d = r->d;
    if (pl->fmt == OUT_MD) {
        char size[32], params[32], v[48];
        human_bytes(size, sizeof size, (double)d->size);
        if (d->params >= 1000000000ull)
            snprintf(params, sizeof params, "%.2f B", (double)d->params / 1e9);
        else
            snprintf(params, sizeof params, "%.2f M", (double)d->params / 1e6);
        snprintf(v, sizeof v, "%.2f ± %.2f", st.mean, st.sd);
        printf("| %-34s | %10s | %10s | %-10s | %7d |", d->model, size, params, d->backend,
               r->threads);
        if (pl->show_kv)
            printf(" %-6s | %-6s |", r->type_k, r->type_v);
        printf(" %10s | %21s |\n", r->test, v);   /* ± is two bytes, one column */
    } else if (pl->fmt == OUT_CSV) {
        printf("\"%s\",%llu,%llu,%s,%d,%s,%u,%u,%d,%.4f,%.4f,%.4f,%u,%s,%s\n", d->model,
               (unsigned long long)d->size, (unsigned long long)d->params, d->backend, r->threads,
               r->test, r->n_prompt, r->n_gen, pl->reps, st.mean, st.sd, sm.mean, r->depth,
               r->type_k, r->type_v);
    } else {
        rvl_jw_obj(w);
        rvl_jw_key(w, "model"); rvl_jw_str(w, d->model);
        rvl_jw_key(w, "model_file"); rvl_jw_str(w, d->file[0] ? d->file : NULL);
        rvl_jw_key(w, "model_size"); rvl_jw_u64(w, d->size);
        rvl_jw_key(w, "model_n_params"); rvl_jw_u64(w, d->params);
        rvl_jw_key(w, "backend"); rvl_jw_str(w, "CPU");
        rvl_jw_key(w, "isa"); rvl_jw_str(w, rvl_cpu_isa_selected());
        rvl_jw_key(w, "n_threads"); rvl_jw_i64(w, r->threads);
        rvl_jw_key(w, "type_k"); rvl_jw_str(w, r->type_k);
        rvl_jw_key(w, "type_v"); rvl_jw_str(w, r->type_v);
        rvl_jw_key(w, "test"); rvl_jw_str(w, r->test);
        rvl_jw_key(w, "n_prompt"); rvl_jw_u64(w, r->n_prompt);
        rvl_jw_key(w, "n_gen"); rvl_jw_u64(w, r->n_gen);
        rvl_jw_key(w, "n_depth"); rvl_jw_u64(w, r->depth);
        rvl_jw_key(w, "reps"); rvl_jw_i64(w, pl->reps);
        rvl_jw_key(w, "avg_ts"); rvl_jw_f64(w, st.mean);
        rvl_jw_key(w, "stddev_ts"); rvl_jw_f64(w, st.sd);
        rvl_jw_key(w, "avg_ms"); rvl_jw_f64(w, sm.mean);
        rvl_jw_key(w, "samples_ts");
        rvl_jw_arr(w);
        for (int i = 0; i < pl->reps; i++)
            rvl_jw_f64(w, ts[i]);
        rvl_jw_arr_end(w);
        if (pl->prof)
            prof_json(w, &pl->prof->t[pl->prof->n - 1]);
        rvl_jw_obj_end(w);
    }
    fflush(stdout);
}

/* --profile: the test just timed (n tokens a repetition, ms each) into
 * the log. -1 when out of memory. */
static int prof_keep(const model_plan *pl, const model_row *r, uint32_t n, const double *ms)
{
    prof_log *g = pl->prof;
    if (g->n == g->cap) {
        const int cap = g->cap ? 2 * g->cap : 16;
        prof_test *t = realloc(g->t, (size_t)cap * sizeof *t);
        if (!t)
            return -1;
        g->t = t;
        g->cap = cap;
    }
    prof_test *t = &g->t[g->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->label, sizeof t->label, "%s, %s, %d thread%s", r->test, r->d->model, r->threads,
             r->threads == 1 ? "" : "s");
    if (pl->show_kv)
        snprintf(t->label + strlen(t->label), sizeof t->label - strlen(t->label), ", %s/%s",
                 r->type_k, r->type_v);
    t->n = n;
    t->reps = pl->reps;
    for (int i = 0; i < pl->reps; i++)
        t->wall_s += ms[i] / 1e3;
    t->p = g->cur;
    return 0;
}

/* One test (n tokens, prompt: in one batch, else one at a time) timed
 * pl->reps times and printed. 0, or the exit status after the error. */
static int model_test(const model_plan *pl, rvl_jw *w, rvl_ctx *c, uint32_t n_vocab, model_row *r,
                      bool prompt, uint32_t n)
{
    double ts[256], ms[256];
    char tname[48];
    if (r->depth)
        snprintf(tname, sizeof tname, "%s%u@d%u", prompt ? "pp" : "tg", n, r->depth);
    else
        snprintf(tname, sizeof tname, "%s%u", prompt ? "pp" : "tg", n);
    r->test = tname;
    r->n_prompt = prompt ? n : 0;
    r->n_gen = prompt ? 0 : n;
    if (pl->prof)
        memset(&pl->prof->cur, 0, sizeof pl->prof->cur);
    for (int i = 0; i < pl->reps; i++) {
        double sec;
        if (isatty(STDERR_FILENO))
            fprintf(stderr, "\r\033[Kruvllm %s: %s [%d/%d]", pl->name, tname, i + 1, pl->reps);
        int rc = rvl_bench_decode_at(c, n_vocab, r->depth, n, prompt ? n : 1, 100 + (uint64_t)i,
                                     &sec);
        if (rc < 0) {
            progress_done();
            return cli_fail(pl->name, rc);
        }
        ts[i] = sec > 0 ? n / sec : 0;
        ms[i] = sec * 1e3;
    }
    progress_done();
    if (pl->prof && prof_keep(pl, r, n, ms) < 0) {
        cli_err(pl->name, "out of memory");
        return EXIT_RUNTIME;
    }
    model_print_row(pl, w, r, ts, ms);
    return 0;
}

/* The rows of one model: a context per KV pair and thread count, warmed
 * up, then every depth's tests. 0, or the exit status after the error. */
static int model_rows(const model_plan *pl, rvl_jw *w, rvl_model *m, const model_desc *d)
{
    const uint32_t n_vocab = rvl_model_hparams(m)->n_vocab;
    for (int k = 0; k < pl->n_kv; k++) {
        for (int t = 0; t < pl->n_threads; t++) {
            cli_kv_opts kv = opt_kv;
            kv.type = pl->kv_split ? NULL : pl->kv_k[k];
            kv.type_k = pl->kv_split ? pl->kv_k[k] : NULL;
            kv.type_v = pl->kv_split ? pl->kv_v[k] : NULL;
            rvl_ctx_params cp = {.n_ctx = pl->n_ctx, .n_threads = (uint32_t)pl->threads[t],
                                 .profile = pl->prof ? &pl->prof->cur : NULL};
            cli_kv_params(&kv, &cp);
            rvl_ctx *c = NULL;
            int rc = rvl_ctx_open(&c, m, &cp);
            /* warm-up: fault the weights in, wake the pool */
            double tw;
            if (rc == 0 && pl->n_np)
                rc = rvl_bench_decode(c, n_vocab, (uint32_t)(max_of(pl->np, pl->n_np) < 32 ? max_of(pl->np, pl->n_np) : 32), 0, 1, &tw);
            if (rc == 0 && pl->n_ng)
                rc = rvl_bench_decode(c, n_vocab, 1, 1, 2, &tw);
            if (rc < 0) {
                rvl_ctx_close(c);
                return cli_fail(pl->name, rc);
            }
            model_row r = {
                .d = d, .threads = pl->threads[t] > 0 ? (int)pl->threads[t] : n_cpus(),
                .type_k = rvl_kv_type_name(cp.kv_type_k), .type_v = rvl_kv_type_name(cp.kv_type_v),
            };
            int status = 0;
            for (int di = 0; di < pl->n_depth && !status; di++) {
                r.depth = (uint32_t)pl->depth[di];
                for (int i = 0; i < pl->n_np && !status; i++)
                    status = model_test(pl, w, c, n_vocab, &r, true, (uint32_t)pl->np[i]);
                for (int i = 0; i < pl->n_ng && !status; i++)
                    status = model_test(pl, w, c, n_vocab, &r, false, (uint32_t)pl->ng[i]);
            }
            rvl_ctx_close(c);
            if (status)
                return status;
        }
    }
    return 0;
}

/* --synthetic SHAPE: its description, checked (usage errors exit). */
static const rvl_bench_shape *synth_shape(const char *name, int *type)
{
    const rvl_bench_shape *shape = rvl_bench_shape_find(opt_synth);
    if (!shape) {
        const char *cands[32];
        char list[512] = "";
        size_t k = 0;
        for (const rvl_bench_shape *s; k < 31 && (s = rvl_bench_shape_at(k)); k++) {
            cands[k] = s->name;
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", s->name);
        }
        cands[k] = NULL;
        const char *sug = cli_suggest(opt_synth, cands);
        if (sug)
            cli_usage(name, "--synthetic: unknown shape '%s'; did you mean '%s'?", opt_synth, sug);
        cli_usage(name, "--synthetic: unknown shape '%s' (%s)", opt_synth, list);
    }
    *type = RVL_TYPE_Q4_0;
    if (opt_type && (*type = rvl_type_from_name(opt_type)) < 0)
        cli_usage(name, "--type: unknown type '%s'", opt_type);
    return shape;
}

/* Open model i of the plan (-m's, the default one, or a synthetic
 * model) and describe it. 0, or the exit status after the error. */
static int model_load(const model_plan *pl, int i, rvl_model **m, model_desc *d)
{
    int rc;
    memset(d, 0, sizeof *d);
    if (opt_synth) {
        int type;
        const rvl_bench_shape *shape = synth_shape(pl->name, &type);
        const char *tmp = getenv("TMPDIR");
        char sz[32];
        human_bytes(sz, sizeof sz, (double)rvl_bench_synth_size(shape, (uint32_t)type));
        fprintf(stderr, "ruvllm %s: writing a synthetic %s %s model (%s) in %s\n", pl->name,
                shape->name, rvl_type_get((uint32_t)type)->name, sz, tmp && *tmp ? tmp : "/tmp");
        int last = -1;
        rc = rvl_bench_synth_open(m, shape, (uint32_t)type, tmp, synth_progress, &last);
        progress_done();
        if (rc < 0)
            return cli_fail(pl->name, rc);
        describe_model(*m, shape->name, rvl_type_get((uint32_t)type)->name, d);
        return 0;
    }
    if ((rc = rvl_model_path(pl->models.n ? pl->models.v[i] : NULL, d->file, sizeof d->file)) < 0 ||
        (rc = cli_model_open(m, d->file, opt_expert_budget, 0)) < 0)
        return cli_fail(pl->name, rc);
    describe_model(*m, NULL, NULL, d);
    return 0;
}

static int bench_model(const char *name)
{
    model_plan pl = {.name = name, .fmt = out_format(), .reps = (int)(opt_reps > 0 ? opt_reps : 5)};
    int status = 0;

    only("model", " model repetitions n-prompt n-gen synthetic type depth expert-budget profile ");
    if (opt_profile && pl.fmt == OUT_CSV)
        cli_usage(name, "--profile prints a table per test (-o md) or a \"profile\" object per "
                  "row (-o json), not CSV");
    if (opt_synth && opt_models.n)
        cli_usage(name, "give -m MODEL or --synthetic SHAPE, not both");
    if (opt_type && !opt_synth)
        cli_usage(name, "--type applies to --synthetic models");
    if (opt_synth) {
        int type;
        synth_shape(name, &type);   /* usage errors before anything is measured */
    }
    pl.models = split_list("model", &opt_models, NULL);
    pl.threads = int_list("threads", &opt_threads_l, "0", 0, 256, &pl.n_threads);
    pl.np = int_list("n-prompt", &opt_p_l, "512", 0, 1 << 20, &pl.n_np);
    pl.ng = int_list("n-gen", &opt_n_l, "128", 0, 1 << 20, &pl.n_ng);
    pl.depth = int_list("depth", &opt_depth_l, "0", 0, 1 << 20, &pl.n_depth);
    /* 0 in -p or -n: no such test */
    int k = 0;
    for (int i = 0; i < pl.n_np; i++)
        if (pl.np[i])
            pl.np[k++] = pl.np[i];
    pl.n_np = k;
    k = 0;
    for (int i = 0; i < pl.n_ng; i++)
        if (pl.ng[i])
            pl.ng[k++] = pl.ng[i];
    pl.n_ng = k;
    if (!pl.n_np && !pl.n_ng)
        cli_usage(name, "-p 0 and -n 0 leave nothing to measure");
    plan_kv(&pl);
    long long longest = max_of(pl.np, pl.n_np) > max_of(pl.ng, pl.n_ng) ? max_of(pl.np, pl.n_np)
                                                                         : max_of(pl.ng, pl.n_ng);
    pl.n_ctx = (uint32_t)(longest + max_of(pl.depth, pl.n_depth));

    /* every model file is there before the first row (each is loaded
     * only when its turn comes) */
    for (int i = 0; i < pl.models.n; i++) {
        char path[4096];
        int rc = rvl_model_path(pl.models.v[i], path, sizeof path);
        if (rc < 0 || access(path, R_OK) < 0) {
            if (rc < 0) {
                status = cli_fail(name, rc);
            } else {
                cli_err(name, "%s: %s", path, strerror(errno));
                status = EXIT_RUNTIME;
            }
            plan_free(&pl);
            return status;
        }
    }

    prof_log plog = {0};
    if (opt_profile)
        pl.prof = &plog;
    rvl_jw w;
    model_header(&pl, &w);
    fflush(stdout);
    const int n_models = pl.models.n ? pl.models.n : 1;
    for (int i = 0; i < n_models && !status; i++) {
        rvl_model *m = NULL;
        model_desc d;
        if ((status = model_load(&pl, i, &m, &d)) == 0) {
            status = model_rows(&pl, &w, m, &d);
            cli_expert_stats(stderr, "ruvllm bench: experts (all tests and warm-ups): ", m);
        }
        rvl_model_close(m);
    }
    if (pl.fmt == OUT_JSON)
        rvl_jw_arr_end(&w); /* pretty: ends the line */
    else
        for (int i = 0; i < plog.n; i++)
            prof_table(&plog.t[i]);
    free(plog.t);
    if (fflush(stdout) != 0) {
        cli_err(name, "writing to standard output failed: %s", strerror(errno));
        status = EXIT_RUNTIME;
    }
    plan_free(&pl);
    return status;
}

/* ====================================================================
 * bench ppl
 * ==================================================================== */

/* The text: a file, a FIFO or "-", up to RUVLLM_MAX_INPUT (rvl_input_read). */
static int read_file(const char *name, const char *path, char **buf, size_t *len)
{
    int rc = rvl_input_read(path, rvl_input_limit(), buf, len);
    if (rc < 0) {
        cli_fail(name, rc);
        return -1;
    }
    return 0;
}

static int bench_ppl(const char *name)
{
    rvl_model *m = NULL;
    rvl_ppl *p = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n_text = 0, n_ids = 0;
    int status = 0, rc, fmt = out_format();
    char path[4096];

    only("ppl", " model file ctx-size chunks kl-base kl expert-budget ");
    const char *model = one_value("ppl", "model", &opt_models);
    const long long threads_opt = one_int("ppl", "threads", &opt_threads_l, 0, 0, 256);
    one_kv("ppl");
    if (fmt == OUT_CSV)
        cli_usage(name, "bench ppl prints text or JSON, not csv");
    if (!opt_file && !opt_kl)
        cli_usage(name, "bench ppl needs the text: -f FILE (or --kl FILE, which holds it)");
    if (opt_kl && opt_kl_base && strcmp(opt_kl, opt_kl_base) == 0)
        cli_usage(name, "--kl and --kl-base name the same file");

    if ((rc = rvl_model_path(model, path, sizeof path)) < 0 ||
        (rc = cli_model_open(&m, path, opt_expert_budget, 0)) < 0) {
        status = cli_fail(name, rc);
        goto out;
    }
    if (opt_file) {
        if (read_file(name, opt_file, &text, &n_text) < 0) {
            status = EXIT_RUNTIME;
            goto out;
        }
        if ((rc = rvl_tok_encode_alloc(rvl_model_tokenizer(m), text ? text : "", n_text, true, false, &ids,
                                     &n_ids)) < 0) {
            status = cli_fail(name, rc);
            goto out;
        }
    }
    rvl_ppl_params pp = {
        .n_ctx = (uint32_t)(opt_ctx > 0 ? opt_ctx : 0),
        .n_threads = (uint32_t)threads_opt,
        .n_windows = (uint32_t)(opt_chunks > 0 ? opt_chunks : 0),
        .save_path = opt_kl_base,
        .base_path = opt_kl,
    };
    rvl_ctx_params kvp = {0};
    cli_kv_params(&opt_kv, &kvp);
    pp.kv = &kvp;
    if ((rc = rvl_ppl_open(&p, m, &pp, ids, n_ids)) < 0) {
        status = cli_fail(name, rc);
        goto out;
    }
    const uint32_t nw = rvl_ppl_n_windows(p), nc = rvl_ppl_n_ctx(p);
    fprintf(stderr, "ruvllm %s: %s%zu tokens; %u windows of %u, each scored on its last %u (%s)\n", name,
            opt_file ? "" : "base file: ", opt_file ? n_ids : (size_t)nw * nc, nw, nc, nc - 1 - nc / 2,
            rvl_ppl_batched(p) ? "batched" : "token by token");
    double t0 = rvl_bench_now();
    rvl_ppl_stats st;
    for (uint32_t i = 0; i < nw; i++) {
        if ((rc = rvl_ppl_window(p)) < 0) {
            if (isatty(STDERR_FILENO))
                fputc('\n', stderr);
            status = cli_fail(name, rc);
            goto out;
        }
        rvl_ppl_get_stats(p, &st);
        double el = rvl_bench_now() - t0;
        char kl[48] = "";
        if (st.has_base)
            snprintf(kl, sizeof kl, ", KL %.6f", st.kl_mean);
        fprintf(stderr, "%s[%u/%u] PPL %.4f%s (%.1f s/window, %.0f s left)%s",
                isatty(STDERR_FILENO) ? "\r\033[K" : "", i + 1, nw, st.ppl, kl, el / (i + 1),
                el / (i + 1) * (nw - i - 1),
                isatty(STDERR_FILENO) ? "" : "\n");
    }
    if (isatty(STDERR_FILENO))
        fputc('\n', stderr);
    if ((rc = rvl_ppl_finish(p)) < 0) {
        status = cli_fail(name, rc);
        goto out;
    }
    rvl_ppl_get_stats(p, &st);
    if (fmt == OUT_JSON) {
        rvl_jw w;
        rvl_jw_init(&w, stdout, true);
        rvl_jw_obj(&w);
        rvl_jw_key(&w, "model"); rvl_jw_str(&w, path);
        rvl_jw_key(&w, "n_ctx"); rvl_jw_u64(&w, nc);
        rvl_jw_key(&w, "windows"); rvl_jw_u64(&w, st.n_windows);
        rvl_jw_key(&w, "tokens_scored"); rvl_jw_u64(&w, st.count);
        rvl_jw_key(&w, "ppl"); rvl_jw_f64(&w, st.ppl);
        rvl_jw_key(&w, "ppl_err"); rvl_jw_f64(&w, st.ppl_err);
        if (st.has_base) {
            rvl_jw_key(&w, "base_ppl"); rvl_jw_f64(&w, st.base_ppl);
            rvl_jw_key(&w, "base_ppl_err"); rvl_jw_f64(&w, st.base_ppl_err);
            rvl_jw_key(&w, "kl_mean"); rvl_jw_f64(&w, st.kl_mean);
            rvl_jw_key(&w, "kl_err"); rvl_jw_f64(&w, st.kl_err);
            rvl_jw_key(&w, "kl_max"); rvl_jw_f64(&w, st.kl_max);
            rvl_jw_key(&w, "same_top"); rvl_jw_f64(&w, st.same_top);
            rvl_jw_key(&w, "same_top_err"); rvl_jw_f64(&w, st.same_top_err);
        }
        rvl_jw_obj_end(&w); /* pretty: ends the line */
    } else {
        printf("PPL = %.4f +/- %.5f (%llu tokens in %u windows of %u)\n", st.ppl, st.ppl_err,
               (unsigned long long)st.count, st.n_windows, nc);
        if (st.has_base) {
            printf("base PPL = %.4f +/- %.5f\n", st.base_ppl, st.base_ppl_err);
            printf("KL divergence: mean %.6f +/- %.6f, max %.6f\n", st.kl_mean, st.kl_err, st.kl_max);
            printf("same top token: %.3f +/- %.3f %%\n", st.same_top * 100, st.same_top_err * 100);
        }
    }
    if (opt_kl_base)
        fprintf(stderr, "ruvllm %s: saved the log-probabilities to %s\n", name, opt_kl_base);
    if (fflush(stdout) != 0) {
        cli_err(name, "writing to standard output failed: %s", strerror(errno));
        status = EXIT_RUNTIME;
    }
out:
    rvl_ppl_close(p);
    rvl_model_close(m);
    free(ids);
    free(text);
    return status;
}

/* ====================================================================
 * Dispatch
 * ==================================================================== */

static int bench_main(rvl_cmd *cmd, int argc, char **argv)
{
    static const char *const subs[] = {"kernels", "model", "ppl", NULL};
    const char *name = cmd->name;

    if (argc == 0)
        cli_usage(name, "missing subcommand: kernels, model or ppl");
    if (argc > 1)
        cli_usage(name, "unexpected argument '%s'", argv[1]);
    if (strcmp(argv[0], "kernels") == 0)
        return bench_kernels(name);
    if (strcmp(argv[0], "model") == 0)
        return bench_model(name);
    if (strcmp(argv[0], "ppl") == 0)
        return bench_ppl(name);
    const char *s = cli_suggest(argv[0], subs);
    if (s)
        cli_usage(name, "'%s' is not a bench subcommand; did you mean '%s'?", argv[0], s);
    cli_usage(name, "'%s' is not a bench subcommand (kernels, model, ppl)", argv[0]);
}

rvl_cmd cmd_bench_desc = {
    .synopsis = "kernels|model|ppl [options]",
    .description =
        "Measure this machine. Timings are medians or means over -r repetitions after one "
        "warm-up; nothing here is a test with a pass mark.\n"
        "\n"
        "bench kernels times GEMV (one token) and GEMM (--tokens rows of activations reusing each "
        "weight row, as prompt processing does, through the variant's tiled kernel where it has one, "
        "as the forward pass does) on every common weight format at Llama-7B's "
        "shapes (4096x4096, 11008x4096, 4096x11008) and, with -m, at the model's own matrix "
        "shapes; quantize and dequantize throughput; and RMSNorm, RoPE and softmax (scalar "
        "reference loops, shown as isa 'ref', until kernels/ has variants of them). Each row "
        "gives the median time, GB/s (bytes of weights, activations and outputs per "
        "operation), GFLOP/s (2*m*n*k for matrix products) and the roofline: GEMM against the "
        "peak FLOP/s of its ISA, everything else against the memory bandwidth. The machine "
        "is measured first, on the same threads, and printed as the copy, triad and read rows: "
        "STREAM-style copy, triad and a read-only sum over arrays of half the working set "
        "(--mem-size; by default twice the last-level cache, so the cache cannot serve them), "
        "and the peak, the best rate of twelve independent FMA chains that never leave the "
        "registers (for ref, what the compiler makes of scalar C); with AVX-512 VNNI also the "
        "int8 peak (int8 dp, GOP/s: twelve vpdpbusd chains, two operations per multiply-add), "
        "the roofline of the quantized formats' GEMM rows (marked peak i8). GEMV and dequantize are "
        "not compared with those start-up numbers, which drift on a shared machine: each of "
        "their timed repetitions is paired with a read-only pass over as many bytes of the "
        "working set, as cold as the weights were, on the same threads in the same chunks "
        "(after the kernel in even repetitions, before it in odd ones), and their roofline "
        "fraction is the median kernel GB/s over the median of those reads (the last column, "
        "read GB/s); the other operations are compared with the best of copy, triad and read. "
        "Without an int8 peak, the quantized formats' GEMMs are compared with the FP32 FMA "
        "peak, a guide rather than a bound. Weights are cycled "
        "through the working set so that every GEMV reads its matrix from memory; activations "
        "are quantized to the format's activation type before timing. --isa compares kernel "
        "variants side by side: with several (or 'all'), the table has one row per operation, "
        "format and shape, one GB/s column (GFLOP/s for GEMM and the peak) per variant, and "
        "the roofline fraction of the fastest; csv and json keep one record per measurement, "
        "with its isa. --filter selects rows by their 'op type isa shape source' "
        "label, e.g. --filter 'gemv (Q4_0|Q4_K|Q8_0) .* 11008x4096' for the decode GEMV that "
        "bounds generation speed.\n"
        "\n"
        "bench model measures prompt processing (pp: -p random tokens in one batch) and "
        "generation (tg: -n tokens one at a time), each from an empty cache, as llama-bench "
        "does, and prints tokens per second as mean +/- standard deviation over the "
        "repetitions. As llama-bench, -m, -t, -p, -n, -d, --kv-type, --kv-type-k and "
        "--kv-type-v take comma-separated lists and may be repeated (-m a.gguf -m b.gguf is the "
        "same as -m a.gguf,b.gguf); every combination is measured, one row each, in llama-bench's "
        "order: for each model (loaded once), each K and V format (--kv-type's list keeps K and "
        "V alike; --kv-type-k and --kv-type-v lists are crossed), each thread count and each "
        "depth, the pp tests and then the tg tests. The type_k and type_v columns appear when a "
        "KV format is given; csv and json always carry n_depth, type_k and type_v. A model is "
        "labelled by its architecture, parameters and file type: general.file_type by "
        "llama-quantize's name (Q4_K_M, not the Q5_0 most of a small model's tensors fall back "
        "to), else the type of most of its weights. --synthetic SHAPE writes a llama GGUF of that shape with random weights "
        "in --type (rows quantized by the format's own quantizer, tiled) to $TMPDIR, opens it "
        "and removes its name at once, so 7B-class speed can be measured without a download "
        "(a 7B Q4_0 file needs about 3.6 GiB of free space while it is being written). "
        "Shapes: llama-7b, llama-13b, llama-1b, llama-3b, llama-8b, tinyllama-1.1b, "
        "smollm2-135m, smollm2-360m, smollm2-1.7b.\n"
        "\n"
        "bench model --profile also times each kind of op of the forward pass during each "
        "test, as ggml's per-op timings do: the wall time of every op call (the thread pool "
        "runs an op on all its threads and returns when it is done, so that is the op's time). "
        "After the results table, a table per test gives for each kind that ran the "
        "milliseconds per run, its share of the test's time, microseconds per token and calls "
        "per run. The kinds: the matmuls by what they multiply (mm_qkv the Q/K/V projections, "
        "mm_attn_out the attention output, mm_ffn_gate_up, mm_ffn_down, mm_output the logits; "
        "mm_moe_experts, mm_moe_shared and moe_route, the router with the gathering and summing "
        "of the experts' rows, in a mixture of experts, with moe_load the experts' weights "
        "taken, read from the file when they are streamed), act_quant (the activation rows "
        "quantized for the matmuls), attn_prefill and attn_decode (attention over the KV cache "
        "for several tokens or one), kv_write (keys and values into the cache, quantized for "
        "the quantized formats, and pages re-encoded as they age), norm (RMSNorm, QK-norm), "
        "rope, act (SwiGLU or GELU), embed, lora, and other: what no op covers (residual adds, "
        "biases, the cache's bookkeeping), so that the shares add up to the test's time less "
        "the benchmark's own loop. With -o json each row gets a \"profile\" object: kind -> "
        "{ms, share (a fraction of the test's time), us_per_token, calls}; csv has no room for "
        "it. The tokens per second of a --profile run are measured with the timers on: about 23 "
        "clock reads per layer for each decoded token or prompt chunk of 32 (some 40 ns each on "
        "a recent x86 server: under 0.5% of SmolLM2-135M's decode, less for larger models); "
        "without --profile no clock is read.\n"
        "\n"
        "bench ppl computes perplexity the way llama-perplexity does: the text (-f) is "
        "tokenized with the model's BOS, cut into consecutive windows of -c tokens, the first "
        "token of every window replaced by BOS when the model adds one, and each window "
        "scored on its second half (the logits of positions c/2 .. c-2 predicting the next "
        "token), so every scored token has at least c/2 tokens of context. The final line is "
        "PPL = exp(mean NLL) with the error estimate PPL * sqrt(var(NLL) / (N-1)). Progress "
        "goes to standard error. --kl-base FILE saves the log-probabilities of every scored "
        "position (see LOGITS FILE); a later run with --kl FILE, on another quantization of "
        "the same model, scores the same tokens and adds the base PPL, the mean KL "
        "divergence KL(base || model) with its standard error and maximum, and the fraction "
        "of positions whose most likely token agrees, like llama-perplexity's "
        "--kl-divergence.",
    .man_extra =
        ".SH LOGITS FILE\n"
        "The file written by \\-\\-kl\\-base is little\\-endian:\n"
        ".RS 4\n.nf\n"
        "offset  size  field\n"
        "0       8     magic \"RVLLOGP\\e0\"\n"
        "8       4     version, 1\n"
        "12      4     n_vocab\n"
        "16      4     n_ctx, the window\n"
        "20      4     first scored position, n_ctx/2\n"
        "24      4     n_windows\n"
        "28      4     BOS id written over each window's first token, or \\-1\n"
        "32      4*T   the text's token ids, T = n_windows * n_ctx\n"
        "\\&..      4*V   per window, per scored position (n_ctx \\- 1 \\- first of them):\n"
        "              the V = n_vocab log\\-probabilities (log\\-softmax, f32)\n"
        "end\\-8   8     XXH3\\-64 of every byte before it\n"
        ".fi\n.RE\n"
        ".PP\n"
        "Log\\-probabilities are stored as f32, not f16 logits: comparing a model with itself "
        "gives a KL divergence of exactly 0, and a quantized model's divergence is not "
        "drowned in storage rounding. The price is size: 4 * n_vocab bytes per scored "
        "position, about 50 MB per 512\\-token window for a 49152\\-token vocabulary. The "
        "file is written to a temporary name and renamed into place only when every window "
        "is done. A file whose size, header, checksum or token ids do not fit is refused.\n",
    .examples = "ruvllm bench kernels\tevery format at Llama-7B shapes, on all cores\n"
                "ruvllm bench kernels -t 2 --filter 'gemv (Q4_0|Q4_K|Q8_0) .*11008x4096'\tthe decode GEMV\n"
                "ruvllm bench kernels --isa all --filter 'gemm Q4_K'\tkernel variants side by side\n"
                "ruvllm bench model -p 512 -n 128 -r 5\tllama-bench's pp512 and tg128\n"
                "ruvllm bench model -m q4_0.gguf,q4_k_m.gguf -t 1,2 -p 128,512 -n 0\tllama-bench's lists: 8 rows\n"
                "ruvllm bench model --synthetic llama-7b --type Q4_0 -r 2\t7B speed without a download\n"
                "ruvllm bench model -p 512 -d 4096 -n 64 --profile\twhere the time goes, op by op, deep in the context\n"
                "ruvllm bench ppl -f wiki.test.raw -c 512\tperplexity\n"
                "ruvllm bench ppl -m f16.gguf -f wiki.test.raw --kl-base f16.logp\tsave the reference\n"
                "ruvllm bench ppl -m q4.gguf --kl f16.logp\tKL divergence against it",
    .opts = opts,
    .aliases = aliases,
    .pos_compl = COMPL_NONE,
    .min_pos = 0,
    .max_pos = -1,
    .main = bench_main,
};
