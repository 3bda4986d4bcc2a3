/*
 * test_tiny_hf.c - the forward pass gives Hugging Face transformers'
 * logits on tiny random-weight models of the variants no shipped model
 * covers: Llama (untied and tied output), Qwen2 (Q/K/V biases, NeoX
 * RoPE), Llama with linear, YaRN and Llama-3.1 RoPE scaling, Qwen3
 * (per-head Q/K RMSNorm before RoPE, head_dim 32 from
 * attention.key_length), Gemma 2 (soft-caps, alternating 8-position
 * windows, post-norms, GeGLU, embedding scale), Gemma 3 (five windowed
 * layers on their own RoPE base, a global one with linear scaling,
 * QK-norm), Phi-3 (fused tensors, LongRoPE long and short, partial
 * rotary), Ministral 3 (YaRN with yarn_log_multiplier, attention
 * temperature) and Mistral with a window (imported by `quantize`, since
 * llama.cpp's converter drops the window). Windowed models are also run
 * on a context twice the sequence, one token at a time (the ring).
 *
 * tests/ref/gen_tiny_hf.py built each model with transformers (hidden 64,
 * 2 layers, 4 query heads over 2 KV heads of 16 (qwen3: 32), intermediate 128,
 * vocabulary 272, f32 weights, seeded), wrote it as GGUF the way
 * llama.cpp's converter would (tests/data/tiny/<name>.gguf) and stored
 * transformers' logits for every position of one 64-token sequence
 * (<name>.logits: little-endian f32, 64 x 272; the ids in tokens.txt).
 *
 * The criterion, per position t (row of logits):
 *     max_i |ours[t][i] - ref[t][i]| <= 1e-4 * max_i |ref[t][i]|
 * i.e. every logit within 1e-4 of the row's largest magnitude (the issue
 * asks for 1e-3; this is ten times stricter). Both sides compute in f32
 * from the same f32 weights, so they agree to 1-3e-6 when the model is
 * computed right (llama.cpp too); the generator shows that each feature got
 * wrong (no scaling, a wrong RoPE layout, YaRN's attention factor left
 * out, biases dropped, a different theta) moves the logits by 0.4 or more
 * in this metric (tests/data/tiny/manifest.tsv).
 *
 * That criterion is checked with an f32 KV cache (RVL_KV_F32), so that
 * the whole computation is f32, through several decode paths: the whole
 * sequence in one call (two internal chunks of 32), in calls of 5 tokens,
 * and one token at a time; the latter two must also agree with the
 * one-call logits to 1e-5 in the same metric (only summation order may
 * differ). The default f16 cache, which rounds K, V, q and the attention
 * weights to f16 as llama.cpp's CPU path does, is held to 1e-2 (it
 * measures about 2e-3 here, against 0.4 and more for a real mistake).
 *
 * Run from the repository root (make check does). No Python needed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "ruvllm.h"
#include "ruvllm_tools.h"

#define DATA_DIR "tests/data/tiny"
#include "tiny_testlib.h"
#define REF_TOL 1e-4      /* against transformers, f32 KV cache */
#define PATH_TOL 1e-5     /* between decode paths of ruvllm */
#define F16_TOL 1e-2      /* f16 KV cache against transformers */
#define Q8_TOL 5e-2       /* q8 KV cache of a windowed model against transformers */

enum { MAX_TOKENS = 256 };

/* ====================================================================
 * Goldens
 * ==================================================================== */

/* n_tok x n_vocab little-endian f32; the file's size must be exactly that. */
static float *read_logits(const char *name, int n_tok, uint32_t n_vocab)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.logits", DATA_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("%s: cannot open", path);
    const size_t n = (size_t)n_tok * n_vocab;
    float *x = malloc(n * sizeof *x + 1);
    assert_non_null(x);
    size_t got = fread(x, 1, n * sizeof *x + 1, f);
    fclose(f);
    if (got != n * sizeof *x)
        fail_msg("%s: %zu bytes, expected %zu (%d tokens x %u logits)", path, got, n * sizeof *x,
                 n_tok, n_vocab);
    /* the file is little-endian; so is every machine this runs on today */
    const uint16_t one = 1;
    assert_int_equal(*(const unsigned char *)&one, 1);
    return x;
}

/* ====================================================================
 * Comparison
 * ==================================================================== */

/* Row t's error: max |a - ref| / max |ref|. */
static double row_err(const float *a, const float *ref, uint32_t n)
{
    double mx = 0, md = 0;
    for (uint32_t i = 0; i < n; i++) {
        double r = fabs((double)ref[i]), d = fabs((double)a[i] - (double)ref[i]);
        if (r > mx)
            mx = r;
        if (d > md || isnan(d))
            md = isnan(d) ? INFINITY : d;
    }
    return mx > 0 ? md / mx : md;
}

/* Compares n_tok rows; returns the largest row error. When any row is
 * above tol, prints every row's error (the pattern over positions tells
 * a RoPE error, which grows with the position, from others). */
static double compare(const char *what, const float *ours, const float *ref, int n_tok,
                      uint32_t n_vocab, double tol)
{
    double worst = 0;
    int at = 0, nbad = 0;
    for (int t = 0; t < n_tok; t++) {
        double e = row_err(ours + (size_t)t * n_vocab, ref + (size_t)t * n_vocab, n_vocab);
        if (e > worst || isnan(e)) {
            worst = isnan(e) ? INFINITY : e;
            at = t;
        }
        nbad += !(e <= tol);
    }
    if (nbad) {
        print_error("%s: %d of %d positions above %.0e; largest %.3e at position %d; "
                    "per position:\n", what, nbad, n_tok, tol, worst, at);
        for (int t = 0; t < n_tok; t++)
            print_error("%s%8.1e%s", t % 8 ? "" : "  ", row_err(ours + (size_t)t * n_vocab,
                        ref + (size_t)t * n_vocab, n_vocab), t % 8 == 7 || t + 1 == n_tok ? "\n" : "");
    }
    return worst;
}

/* ====================================================================
 * The check, per model
 * ==================================================================== */

typedef struct {
    const char *name;
    const char *arch;
    bool tied, bias;
    rvl_rope_type rope_type;
    bool qk_norm;
    uint32_t head_dim;       /* 0: 16 */
    uint32_t n_layer;        /* 0: 2 */
    const char *gguf;        /* 0: <name>.gguf; else the model file (a path) */
    int n_tok;               /* 0: all of tokens.txt; else its first n_tok */
    uint32_t rope_dim;       /* 0: head_dim */
    uint32_t n_ff;           /* 0: 128 */
    uint32_t n_expert;       /* 0: a dense FFN */
    uint32_t n_head_kv;      /* 0: 2 */
} variant;

static void check_variant(const variant *v)
{
    static int32_t ids[MAX_TOKENS];
    int n_tok = tiny_read_tokens(ids, MAX_TOKENS);
    assert_true(n_tok >= 48 && n_tok < MAX_TOKENS);
    if (v->n_tok)
        n_tok = v->n_tok;

    char path[512];
    if (v->gguf)
        snprintf(path, sizeof path, "%s", v->gguf);
    else
        snprintf(path, sizeof path, "%s/%s.gguf", DATA_DIR, v->name);
    rvl_model *m = NULL;
    if (rvl_model_open(&m, path) < 0)
        fail_msg("%s: %s", path, rvl_errmsg());
    const rvl_hparams *hp = rvl_model_hparams(m);
    assert_string_equal(hp->arch, v->arch);
    assert_int_equal(hp->n_layer, v->n_layer ? v->n_layer : 2);
    assert_int_equal(hp->n_embd, 64);
    assert_int_equal(hp->n_head, 4);
    assert_int_equal(hp->n_head_kv, v->n_head_kv ? v->n_head_kv : 2);
    assert_int_equal(hp->head_dim, v->head_dim ? v->head_dim : 16);
    assert_int_equal(hp->rope_dim, v->rope_dim ? v->rope_dim : hp->head_dim);
    assert_int_equal(hp->block.qk_norm, v->qk_norm);
    assert_int_equal(hp->n_ff, v->n_ff ? v->n_ff : 128);
    assert_int_equal(hp->n_expert, v->n_expert);
    assert_int_equal(hp->rope_type, v->rope_type);
    assert_int_equal(hp->tied_output, v->tied);
    assert_int_equal(hp->block.qkv_bias, v->bias);
    const uint32_t nv = hp->n_vocab;
    assert_int_equal(nv, 272);

    float *ref = read_logits(v->name, n_tok, nv);
    const size_t n = (size_t)n_tok * nv;
    float *batch = malloc(n * sizeof *batch), *other = malloc(n * sizeof *other);
    assert_non_null(batch);
    assert_non_null(other);
    char what[128];

    tiny_decode(m, ids, n_tok, 0, 2, RVL_KV_F32, batch);
    snprintf(what, sizeof what, "%s: one call vs transformers", v->name);
    const double e_ref = compare(what, batch, ref, n_tok, nv, REF_TOL);

    static const int steps[] = {5, 1};
    double e_path = 0, e_path_ref = 0;
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        tiny_decode(m, ids, n_tok, steps[s], 1, RVL_KV_F32, other);
        snprintf(what, sizeof what, "%s: calls of %d vs one call", v->name, steps[s]);
        double e = compare(what, other, batch, n_tok, nv, PATH_TOL);
        e_path = e > e_path ? e : e_path;
        snprintf(what, sizeof what, "%s: calls of %d vs transformers", v->name, steps[s]);
        e = compare(what, other, ref, n_tok, nv, REF_TOL);
        e_path_ref = e > e_path_ref ? e : e_path_ref;
    }
    /* latent attention: prompts in the expanded form (per-head keys and
     * values from the cached latents) agree with the absorbed form */
    double e_exp = 0;
    if (hp->block.mla) {
        setenv("RUVLLM_MLA", "expanded", 1);
        for (int s = 0; s < 2; s++) {
            tiny_decode(m, ids, n_tok, s ? 5 : 0, 2, RVL_KV_F32, other);
            snprintf(what, sizeof what, "%s: expanded MLA in calls of %d vs absorbed", v->name,
                     s ? 5 : n_tok);
            double e = compare(what, other, batch, n_tok, nv, PATH_TOL);
            e_exp = e > e_exp ? e : e_exp;
            snprintf(what, sizeof what, "%s: expanded MLA vs transformers", v->name);
            e = compare(what, other, ref, n_tok, nv, REF_TOL);
            e_path_ref = e > e_path_ref ? e : e_path_ref;
        }
        unsetenv("RUVLLM_MLA");
        print_message("%-13s expanded vs absorbed latent attention: %.2e\n", v->name, e_exp);
    }
    /* a windowed model on a context twice as long: the ring (kvcache.c)
     * holds only the window while the positions go on */
    if (hp->block.swa_window) {
        rvl_ctx_params cp = {.n_ctx = 2 * (uint32_t)n_tok, .n_threads = 1, .kv_type = RVL_KV_F32};
        rvl_ctx *c = NULL;
        if (rvl_ctx_open(&c, m, &cp) < 0)
            fail_msg("rvl_ctx_open: %s", rvl_errmsg());
        for (int i = 0; i < n_tok; i++) {
            const float *lg = NULL;
            if (rvl_decode(c, ids + i, 1, &lg) < 0)
                fail_msg("rvl_decode at position %d: %s", i, rvl_errmsg());
            memcpy(other + (size_t)i * nv, lg, nv * sizeof *other);
        }
        rvl_ctx_close(c);
        if (!hp->has_longrope) { /* LongRoPE's factors follow the context size */
            snprintf(what, sizeof what, "%s: context of %d vs transformers", v->name, 2 * n_tok);
            const double e = compare(what, other, ref, n_tok, nv, REF_TOL);
            e_path_ref = e > e_path_ref ? e : e_path_ref;
        }
    }
    /* a windowed model on a q8 cache: its rings hold q8 pages (its windowed
     * layers keep no f16 sink page, so unlike the other variants' 64
     * tokens they are quantized: 4e-4 (gemma3) to 3.4e-2 (gemma2, whose
     * attention scores reach 20 before the cap), against 0.3 and more
     * for a wrong window) */
    double e_q8 = 0;
    if (hp->block.swa_window) {
        tiny_decode(m, ids, n_tok, 7, 2, RVL_KV_Q8, other);
        snprintf(what, sizeof what, "%s: q8 KV cache in calls of 7 vs transformers", v->name);
        e_q8 = compare(what, other, ref, n_tok, nv, Q8_TOL);
        print_message("%-13s windowed, q8 KV cache: max row error %.2e\n", v->name, e_q8);
    }
    /* the default cache (f16, rounded as llama.cpp's CPU path rounds) */
    tiny_decode(m, ids, n_tok, 0, 2, RVL_KV_F16, other);
    snprintf(what, sizeof what, "%s: f16 KV cache vs transformers", v->name);
    const double e_f16 = compare(what, other, ref, n_tok, nv, F16_TOL);
    print_message("%-13s max row error vs transformers %.2e (one call), %.2e (calls of 5 "
                  "and 1), %.2e (f16 KV cache); between decode paths %.2e\n", v->name, e_ref,
                  e_path_ref, e_f16, e_path);

    free(ref);
    free(batch);
    free(other);
    rvl_model_close(m);
    assert_true(e_ref <= REF_TOL);
    assert_true(e_path_ref <= REF_TOL);
    assert_true(e_path <= PATH_TOL);
    assert_true(e_exp <= PATH_TOL);
    assert_true(e_f16 <= F16_TOL);
    assert_true(e_q8 <= Q8_TOL);
}

/* ====================================================================
 * Tests
 * ==================================================================== */

static void test_llama_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "llama", .arch = "llama", .rope_type = RVL_ROPE_NORM});
}

static void test_llama_tied_output_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "llama-tied", .arch = "llama", .tied = true,
                             .rope_type = RVL_ROPE_NORM});
}

static void test_qwen2_biases_and_neox_rope_match_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "qwen2", .arch = "qwen2", .bias = true,
                             .rope_type = RVL_ROPE_NEOX});
}

static void test_llama_linear_rope_scaling_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "llama-linear", .arch = "llama", .rope_type = RVL_ROPE_NORM});
}

static void test_llama_yarn_rope_scaling_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "llama-yarn", .arch = "llama", .rope_type = RVL_ROPE_NORM});
}

static void test_llama31_rope_freqs_match_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "llama3", .arch = "llama", .rope_type = RVL_ROPE_NORM});
}

static void test_qwen3_qk_norm_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "qwen3", .arch = "qwen3", .rope_type = RVL_ROPE_NEOX,
                             .qk_norm = true, .head_dim = 32});
    check_variant(&(variant){.name = "qwen3-hf", .arch = "qwen3", .rope_type = RVL_ROPE_NEOX,
                             .qk_norm = true, .head_dim = 32});
}

/* Gemma 2: soft-capped attention and logits, every other layer windowed
 * (8 positions, a test of 64), post-norms, GeGLU, embeddings times
 * sqrt(n_embd), tied output; llama.cpp's converter wrote the file. */
static void test_gemma2_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "gemma2", .arch = "gemma2", .tied = true,
                             .rope_type = RVL_ROPE_NEOX});
}

/* Gemma 3: five windowed layers on RoPE base 10000, a global one on 1e6
 * with linear scaling 8, QK-norm, post-norms. */
static void test_gemma3_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "gemma3", .arch = "gemma3", .tied = true,
                             .rope_type = RVL_ROPE_NEOX, .qk_norm = true, .n_layer = 6});
}

/* Phi-3: fused QKV and gate+up, LongRoPE past its original context of 32
 * (long factors), and within it (a 32-token context: short factors). */
static void test_phi3_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "phi3", .arch = "phi3", .rope_type = RVL_ROPE_NEOX});
    check_variant(&(variant){.name = "phi3-short", .arch = "phi3", .rope_type = RVL_ROPE_NEOX,
                             .gguf = DATA_DIR "/phi3.gguf", .n_tok = 32});
}

/* Phi-4-mini's partial rotary factor: RoPE over 12 of 16 dimensions. */
static void test_phi3_partial_rotary_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "phi3-partial", .arch = "phi3", .rope_type = RVL_ROPE_NEOX,
                             .rope_dim = 12});
    check_variant(&(variant){.name = "phi3-partial-short", .arch = "phi3",
                             .rope_type = RVL_ROPE_NEOX, .gguf = DATA_DIR "/phi3-partial.gguf",
                             .n_tok = 32, .rope_dim = 12});
}

/* Ministral 3 (mistral3): YaRN with yarn_log_multiplier and Llama 4's
 * attention temperature past the original context of 32. */
static void test_ministral3_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "ministral3", .arch = "mistral3", .rope_type = RVL_ROPE_NORM});
}

/* Mistral with a window of 8: llama.cpp's converter drops the window
 * (tests/data/tiny/mistral.gguf has none, and llama.cpp attends to the
 * whole context); our import keeps it as llama.attention.sliding_window,
 * and that file gives transformers' logits. */
static void test_mistral_window_from_our_import_matches_transformers(void **state)
{
    (void)state;
    char dir[] = "/tmp/rvl-tiny-XXXXXX", out[64];
    assert_non_null(mkdtemp(dir));
    snprintf(out, sizeof out, "%s/mistral.gguf", dir);
    rvl_quantize_params qp = {.mix = "F32", .n_threads = 1, .output_type = UINT32_MAX,
                              .embd_type = UINT32_MAX};
    if (rvl_quantize_gguf(DATA_DIR "/hf/mistral", out, &qp, NULL) < 0)
        fail_msg("import of %s/hf/mistral: %s", DATA_DIR, rvl_errmsg());
    rvl_model *m = NULL;
    assert_int_equal(rvl_model_open(&m, out), 0);
    assert_int_equal(rvl_model_hparams(m)->block.swa_window, 8);
    rvl_model_close(m);
    check_variant(&(variant){.name = "mistral", .arch = "llama", .rope_type = RVL_ROPE_NORM,
                             .gguf = out});
    unlink(out);
    rmdir(dir);
}

/* Mixtral (llama with experts): 4 experts of width 32, the router's top 2
 * renormalized. */
static void test_mixtral_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "mixtral", .arch = "llama", .rope_type = RVL_ROPE_NORM,
                             .n_ff = 32, .n_expert = 4});
}

/* Qwen3-MoE: 8 experts of width 32, top 2 renormalized, Qwen3's QK-norm.
 * (qwen3moe-nonorm's config turns renormalization off, which the GGUF
 * cannot say: llama.cpp renormalizes every qwen3moe, and so do we.) */
static void test_qwen3moe_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "qwen3moe", .arch = "qwen3moe", .rope_type = RVL_ROPE_NEOX,
                             .qk_norm = true, .head_dim = 32, .n_expert = 8});
}

/* Qwen2-MoE: 4 experts, top 2 not renormalized, a shared expert of 96
 * behind its sigmoid gate, Q/K/V biases. */
static void test_qwen2moe_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "qwen2moe", .arch = "qwen2moe", .bias = true,
                             .rope_type = RVL_ROPE_NEOX, .n_expert = 4});
}

/* DeepSeek-V2 (deepseek2): multi-head latent attention (queries through a
 * rank-48 bottleneck, a latent of 32 and a RoPE key of 8 per token: the
 * cache's one head of 40), YaRN with DeepSeek's mscale in the softmax
 * scale, a leading dense layer, then 8 experts, top 2 not renormalized,
 * scaled by 2, and a shared expert. */
static void test_deepseek2_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "deepseek2", .arch = "deepseek2", .rope_type = RVL_ROPE_NORM,
                             .n_layer = 3, .n_head_kv = 1, .head_dim = 40, .rope_dim = 8,
                             .n_expert = 8});
}

/* DeepSeek-V2-Lite: one attn_q instead of the bottleneck. */
static void test_deepseek2_lite_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "deepseek2-lite", .arch = "deepseek2",
                             .rope_type = RVL_ROPE_NORM, .n_layer = 3, .n_head_kv = 1,
                             .head_dim = 40, .rope_dim = 8, .n_expert = 8});
}

/* DeepSeek-V3's router: sigmoid scores, the selection bias, the best 2 of
 * 4 groups, renormalized, scaled by 2.5. */
static void test_deepseek3_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "deepseek3", .arch = "deepseek2", .rope_type = RVL_ROPE_NORM,
                             .n_layer = 3, .n_head_kv = 1, .head_dim = 40, .rope_dim = 8,
                             .n_expert = 8});
}

/* gpt-oss: sinks, the window of 8 on layer 0, biases everywhere, the
 * top-2-then-softmax router over 4 experts, the clamped SwiGLU, YaRN with
 * the unrounded ramp. */
static void test_gpt_oss_matches_transformers(void **state)
{
    (void)state;
    check_variant(&(variant){.name = "gpt-oss", .arch = "gpt-oss", .rope_type = RVL_ROPE_NEOX,
                             .bias = true, .n_ff = 32, .n_expert = 4});
}

/* The metadata the loader must have read for the scaled variants. */
static void test_scaled_variants_load_their_rope_scaling_metadata(void **state)
{
    (void)state;
    rvl_model *m = NULL;
    if (rvl_model_open(&m, DATA_DIR "/llama-linear.gguf") < 0)
        fail_msg("llama-linear.gguf: %s", rvl_errmsg());
    assert_int_equal(rvl_model_hparams(m)->rope_scaling, RVL_ROPE_SCALING_LINEAR);
    assert_true(rvl_model_hparams(m)->rope_factor == 4.0f);
    rvl_model_close(m);

    if (rvl_model_open(&m, DATA_DIR "/llama-yarn.gguf") < 0)
        fail_msg("llama-yarn.gguf: %s", rvl_errmsg());
    assert_int_equal(rvl_model_hparams(m)->rope_scaling, RVL_ROPE_SCALING_YARN);
    assert_true(rvl_model_hparams(m)->rope_factor == 4.0f);
    assert_int_equal(rvl_model_hparams(m)->rope_orig_ctx, 32);
    /* not in the file (the converter omits the defaults): 32 and 1 */
    assert_true(rvl_model_hparams(m)->yarn_beta_fast == 32.0f);
    assert_true(rvl_model_hparams(m)->yarn_beta_slow == 1.0f);
    assert_false(rvl_model_hparams(m)->has_rope_freqs);
    rvl_model_close(m);

    /* Llama 3.1: the rope_freqs.weight tensor and no scaling keys */
    if (rvl_model_open(&m, DATA_DIR "/llama3.gguf") < 0)
        fail_msg("llama3.gguf: %s", rvl_errmsg());
    assert_int_equal(rvl_model_hparams(m)->rope_scaling, RVL_ROPE_SCALING_NONE);
    assert_true(rvl_model_hparams(m)->has_rope_freqs);
    rvl_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_matches_transformers),
        cmocka_unit_test(test_llama_tied_output_matches_transformers),
        cmocka_unit_test(test_qwen2_biases_and_neox_rope_match_transformers),
        cmocka_unit_test(test_llama_linear_rope_scaling_matches_transformers),
        cmocka_unit_test(test_llama_yarn_rope_scaling_matches_transformers),
        cmocka_unit_test(test_llama31_rope_freqs_match_transformers),
        cmocka_unit_test(test_qwen3_qk_norm_matches_transformers),
        cmocka_unit_test(test_gemma2_matches_transformers),
        cmocka_unit_test(test_gemma3_matches_transformers),
        cmocka_unit_test(test_phi3_matches_transformers),
        cmocka_unit_test(test_phi3_partial_rotary_matches_transformers),
        cmocka_unit_test(test_ministral3_matches_transformers),
        cmocka_unit_test(test_mistral_window_from_our_import_matches_transformers),
        cmocka_unit_test(test_mixtral_matches_transformers),
        cmocka_unit_test(test_qwen3moe_matches_transformers),
        cmocka_unit_test(test_qwen2moe_matches_transformers),
        cmocka_unit_test(test_deepseek2_matches_transformers),
        cmocka_unit_test(test_deepseek2_lite_matches_transformers),
        cmocka_unit_test(test_deepseek3_matches_transformers),
        cmocka_unit_test(test_gpt_oss_matches_transformers),
        cmocka_unit_test(test_scaled_variants_load_their_rope_scaling_metadata),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
