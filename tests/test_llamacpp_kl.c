/*
 * test_llamacpp_kl.c - next-token distributions on real models are as
 * close to llama.cpp's as llama.cpp's own are to each other.
 *
 * tests/ref/kl_base_llamacpp.py --top K --variants ran llama.cpp
 * (llama-cpp-python) over WikiText-2 text the way `ruvllm bench ppl` cuts
 * it (the whole text tokenized once, consecutive windows of n_ctx tokens,
 * BOS over each window's first token when the model adds one, positions
 * n_ctx/2 .. n_ctx-2 scored) and committed, per scored position, the top
 * K tokens with their log-probabilities and the log-probability of the
 * rest (the .topk file: a Gemma row of 262144 floats is 1 MiB), and in the
 * .txt beside it llama.cpp's perplexity and how far llama.cpp moves from
 * itself with flash attention on and with flash attention and a q8_0 KV
 * cache (the variants): mean KL over the top K and the tail as one
 * outcome, the share of positions whose top token stays the same.
 *
 * Here the same windows go through rvl_decode (all logits, f16 KV, two
 * threads) and, over every scored position:
 *   - the text tokenizes to the golden's ids;
 *   - mean KL(llama.cpp || ruvllm), measured the same way, is at most the
 *     larger of the variants' (within llama.cpp's self-variation);
 *   - the share of positions where ruvllm's top token is llama.cpp's is at
 *     least the smaller of the variants';
 *   - the perplexity is llama.cpp's within 0.5%, or within the largest
 *     relative difference of the variants' perplexities from llama.cpp's
 *     if that is larger (on SmolLM2's 252 positions flash attention alone
 *     moves llama.cpp's by 1.1%; on Gemma's 2044 by 0.04%).
 * Under the sanitizers only the first window runs, against the variants'
 * figures for that window.
 *
 * SETS: Gemma 3 270M Q4_K_M (tests/ref/gemma3/kl-c1024.*: 4 windows of
 * 1024 tokens, so the scored half lies past its 512-token sliding window)
 * and, checking this comparison on a model ruvllm already runs, the
 * default SmolLM2 (tests/ref/llamacpp/kl-c128.*). A set whose model file
 * is not in the cache (make model) is skipped.
 *
 * Run from the repository root (make check does). No Python needed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "ruvllm.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

typedef struct {
    const char *name;
    const char *model;      /* file name in the model cache */
    const char *golden;     /* .topk; the .txt has the same stem */
    int text_lines;         /* the first lines of WikiText-2's test text */
} kl_set;

static const kl_set SETS[] = {
    {"gemma3", "gemma-3-270m-q4_k_m.gguf", "tests/ref/gemma3/kl-c1024", 80},
    {"smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "tests/ref/llamacpp/kl-c128", 40},
};

#define PPL_TOL 0.005
#define HEADER 36

/* llama.cpp's figures from the .txt: the base's perplexity and each
 * variant's, over all windows (window 0) or one */
typedef struct {
    double base_ppl;
    double kl_max_variant;   /* the larger mean KL of the variants */
    double top_min_variant;  /* the smaller same-top share */
    double ppl_tol;          /* PPL_TOL, or the variants' own relative PPL spread if larger */
    int variants;
} bar;

static int read_bar(const char *path, int window, bar *b)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024];
    memset(b, 0, sizeof *b);
    b->top_min_variant = 1;
    double ppl_v[8];
    int nv = 0;
    while (fgets(line, sizeof line, f)) {
        char name[64];
        int w = 0;
        double kl, top, ppl;
        if (line[0] == '#')
            continue;
        if (window == 0 && sscanf(line, "base ppl %lf", &ppl) == 1) {
            b->base_ppl = ppl;
        } else if (window > 0 && sscanf(line, "base window %d ppl %lf", &w, &ppl) == 2) {
            if (w == window)
                b->base_ppl = ppl;
        } else if (sscanf(line, "%63s window %d kl_mean %lf same_top %lf ppl %lf", name, &w, &kl, &top, &ppl) == 5
                   || (w = 0, sscanf(line, "%63s kl_mean %lf kl_max %*f same_top %lf ppl %lf", name, &kl, &top,
                                     &ppl) == 4)) {
            if (strcmp(name, "base") == 0 || w != window)
                continue;
            if (nv < 8)
                ppl_v[nv++] = ppl;
            if (kl > b->kl_max_variant)
                b->kl_max_variant = kl;
            if (top < b->top_min_variant)
                b->top_min_variant = top;
            b->variants++;
        }
    }
    fclose(f);
    b->ppl_tol = PPL_TOL;
    for (int i = 0; i < nv && b->base_ppl > 0; i++)
        if (fabs(ppl_v[i] / b->base_ppl - 1) > b->ppl_tol)
            b->ppl_tol = fabs(ppl_v[i] / b->base_ppl - 1);
    return b->base_ppl > 0 && b->variants >= 2 ? 0 : -1;
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float rdf(const unsigned char *p)
{
    uint32_t u = rd32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void run_set(const kl_set *s)
{
    char model[4096], path[4096];
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && *xdg)
        snprintf(model, sizeof model, "%s/ruvllm/models/%s", xdg, s->model);
    else
        snprintf(model, sizeof model, "%s/.cache/ruvllm/models/%s", getenv("HOME") ? getenv("HOME") : ".",
                 s->model);
    FILE *probe = fopen(model, "rb");
    if (!probe) {
        print_message("%s: no model at %s (make model)\n", s->name, model);
        skip();
    }
    fclose(probe);

    /* the golden */
    snprintf(path, sizeof path, "%s.topk", s->golden);
    size_t glen;
    unsigned char *g = (unsigned char *)test_slurp(path, &glen);
    if (!g)
        fail_msg("%s: cannot read (run from the repository root)", path);
    assert_true(glen >= HEADER + 8 && memcmp(g, "RVLTOPK", 8) == 0);
    assert_int_equal(rd32(g + 8), 1);
    const uint32_t n_vocab = rd32(g + 12), n_ctx = rd32(g + 16), first = rd32(g + 20),
                   n_windows = rd32(g + 24), k = rd32(g + 28);
    const int32_t bos = (int32_t)rd32(g + 32);
    const uint32_t rows = n_ctx - 1 - first;
    const size_t row_bytes = 4 + 8 * (size_t)k;
    const size_t want = HEADER + 4 * (size_t)n_windows * n_ctx + row_bytes * rows * n_windows + 8;
    assert_int_equal(glen, want);
    uint64_t sum = 0;
    memcpy(&sum, g + glen - 8, 8);
    assert_true(XXH3_64bits(g, glen - 8) == sum);
    const unsigned char *gtok = g + HEADER, *grow = gtok + 4 * (size_t)n_windows * n_ctx;

#ifdef SANITIZED
    const uint32_t windows = 1;
#else
    const uint32_t windows = n_windows;
#endif
    bar b = {0};
    snprintf(path, sizeof path, "%s.txt", s->golden);
    if (read_bar(path, windows == n_windows ? 0 : 1, &b) < 0)
        fail_msg("%s: no base perplexity or fewer than two variants", path);

    /* the text: the first text_lines lines of WikiText-2's test text */
    const char *shared = getenv("RVL_SHARED_DATA");
    snprintf(path, sizeof path, "%s/text/wikitext-2-test.txt", shared && *shared ? shared : "tests/data/shared");
    size_t tlen;
    char *text = test_slurp(path, &tlen);
    if (!text)
        fail_msg("%s: cannot read", path);
    size_t cut = 0;
    for (int l = 0; l < s->text_lines && cut < tlen; cut++)
        if (text[cut] == '\n')
            l++;

    rvl_model *m = NULL;
    rvl_ctx *c = NULL;
    if (rvl_model_open(&m, model) < 0)
        fail_msg("%s: %s", model, rvl_errmsg());
    assert_int_equal(rvl_model_hparams(m)->n_vocab, n_vocab);
    const rvl_tokenizer *tok = rvl_model_tokenizer(m);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    assert_int_equal(rvl_tok_encode_alloc(tok, text, cut, true, false, &ids, &n_ids), 0);
    assert_true(n_ids >= (size_t)n_windows * n_ctx);
    const int32_t our_bos = rvl_tok_add_bos(tok) ? rvl_tok_bos(tok) : -1;
    assert_int_equal(our_bos, bos);
    size_t differ = 0;
    for (size_t i = 0; i < (size_t)n_windows * n_ctx; i++)
        differ += ids[i] != (int32_t)rd32(gtok + 4 * i);
    if (differ)
        fail_msg("%s: %zu of the text's first %u token ids differ from llama.cpp's", s->name, differ,
                 n_windows * n_ctx);

    rvl_ctx_params cp = {.n_ctx = n_ctx, .n_threads = 2, .all_logits = true, .n_batch = n_ctx};
    if (rvl_ctx_open(&c, m, &cp) < 0)
        fail_msg("%s: %s", model, rvl_errmsg());

    double kl_sum = 0, kl_max = 0, nll = 0;
    size_t same = 0, scored = 0;
    double *lp = malloc(sizeof *lp * n_vocab);
    unsigned char *in_top = calloc(n_vocab, 1);
    assert_true(lp && in_top);
    for (uint32_t w = 0; w < windows; w++) {
        int32_t *win = ids + (size_t)w * n_ctx;
        if (bos >= 0)
            win[0] = bos;
        const float *logits;
        rvl_ctx_reset(c);
        if (rvl_decode(c, win, n_ctx, &logits) < 0)
            fail_msg("%s: window %u: %s", s->name, w + 1, rvl_errmsg());
        for (uint32_t j = first; j < n_ctx - 1; j++) {
            const float *x = logits + (size_t)j * n_vocab;
            double mx = -INFINITY, se = 0;
            uint32_t arg = 0;
            for (uint32_t v = 0; v < n_vocab; v++)
                if (x[v] > mx) {
                    mx = x[v];
                    arg = v;
                }
            for (uint32_t v = 0; v < n_vocab; v++)
                se += exp((double)x[v] - mx);
            const double lse = mx + log(se);
            for (uint32_t v = 0; v < n_vocab; v++)
                lp[v] = (double)x[v] - lse;
            nll -= lp[win[j + 1]];

            /* KL over the top k and the tail, as kl_base_llamacpp.py's kl_topk */
            const unsigned char *r = grow + ((size_t)w * rows + (j - first)) * row_bytes;
            const double tail = rdf(r);
            double kl = 0;
            for (uint32_t i = 0; i < k; i++) {
                const uint32_t id = rd32(r + 4 + 4 * i);
                assert_true(id < n_vocab);
                const double pl = rdf(r + 4 + 4 * k + 4 * i);
                kl += exp(pl) * (pl - lp[id]);
                in_top[id] = 1;
            }
            double q_tail = 0;
            for (uint32_t v = 0; v < n_vocab; v++)
                if (!in_top[v])
                    q_tail += exp(lp[v]);
            for (uint32_t i = 0; i < k; i++)
                in_top[rd32(r + 4 + 4 * i)] = 0;
            kl += exp(tail) * (tail - log(q_tail > 1e-300 ? q_tail : 1e-300));
            if (kl < 0)
                kl = 0;
            kl_sum += kl;
            if (kl > kl_max)
                kl_max = kl;
            same += arg == rd32(r + 4);
            scored++;
        }
    }
    free(lp);
    free(in_top);
    const double kl_mean = kl_sum / (double)scored, top = (double)same / (double)scored,
                 ppl = exp(nll / (double)scored), rel = fabs(ppl / b.base_ppl - 1);
    print_message("%s: %zu positions in %u window(s) of %u: mean KL from llama.cpp %.6f (max %.4f; "
                  "llama.cpp against itself up to %.6f), same top token %.4f (llama.cpp against itself "
                  "from %.4f), PPL %.4f (llama.cpp %.4f, %.2e relative, at most %.2e)\n",
                  s->name, scored, windows, n_ctx, kl_mean, kl_max, b.kl_max_variant, top, b.top_min_variant,
                  ppl, b.base_ppl, rel, b.ppl_tol);
    rvl_ctx_close(c);
    rvl_model_close(m);
    free(ids);
    free(text);
    free(g);
    assert_true(kl_mean <= b.kl_max_variant);
    assert_true(top >= b.top_min_variant);
    assert_true(rel <= b.ppl_tol);
}

static void test_gemma3_within_llamacpps_self_variation(void **state)
{
    (void)state;
    run_set(&SETS[0]);
}

static void test_smollm2_within_llamacpps_self_variation(void **state)
{
    (void)state;
    run_set(&SETS[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma3_within_llamacpps_self_variation),
        cmocka_unit_test(test_smollm2_within_llamacpps_self_variation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
