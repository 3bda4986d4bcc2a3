// metal-emu-uses: metal/matmul.metal metal/matmul_f32.metal metal/norm.metal metal/rope.metal metal/attn.metal metal/kv.metal metal/elementwise.metal
/*
 * test_backend - the Metal backend's forward pass (metal/rvl_metal_backend.c
 * through ruvllm.h's rvl_backend_ops), run in the emulator on the shipped
 * kernels (tests/metal-emu/device_emu.cpp implements the device API),
 * against the CPU forward (rvl_decode) on the same model, and against
 * Hugging Face transformers' logits (tests/data/tiny, see test_tiny_hf.c).
 *
 * Each case decodes the first 40 tokens of tokens.txt as one prompt (two
 * chunks: 32 and 8 tokens, so GEMM and prefill attention) and then 4 tokens
 * one at a time (GEMV, flash decode + reduce), keeping every position's
 * logits, on both backends. Per position t, with err = max_i |a[t][i] -
 * ref[t][i]| / max_i |ref[t][i]| (test_tiny_hf.c's metric):
 *
 *   f32 weights, f32 KV   vs CPU      <= 2e-5   (f32 sums in other orders)
 *                         vs HF        <= 1e-4   (test_tiny_hf's criterion)
 *   f32 weights, f16 KV   vs CPU      <= 1e-3   (both round K, V, q to f16)
 *   Q8_0 / Q4_0 weights (the project's quantizer, every tensor), with
 *     f32 KV  vs CPU on the model dequantized to F32    <= 2e-5
 *     f16 KV  vs CPU on the quantized model             <= 0.1  (the CPU
 *             rounds activations to Q8_0, the GPU keeps them f32:
 *             metal/README.md "Matmul"; measured 0.04 on these random
 *             tiny models), and no further from transformers' f32
 *             logits than that CPU run (x 1.05)
 *
 * Refusals: a weight format without a Metal kernel (Q5_0) names the tensor
 * and the format; a quantized KV type is refused.
 *
 * Through rvl_ctx (rvl_ctx_params.backend = "metal", what `ruvllm run
 * --backend metal` does; the program registers rvl_metal_backend_ops,
 * which this libruvllm does not link): greedy generation of N_GREEDY
 * tokens after a 40-token prompt gives the CPU context's token ids, every
 * step's logits within the tolerances above; truncate + continue and
 * reset + regenerate give the same tokens again; rvl_ctx_reuse keeps the
 * common prefix; what only the CPU's cache does (quantized / tiered / split
 * KV types, LoRA, context shift, session files, random fills) is refused
 * with RVL_EUNSUPPORTED and a message naming the feature and "metal".
 * The default model (SmolLM2-135M Q4_1, requantized to Q8_0: Q4_1 has no
 * Metal kernel), 16 greedy tokens the same way, when it is present
 * (skipped otherwise, and under ASan: ~25 s of CPU time plain). Under ASan
 * only llama's ctx case runs (SKIP_SANITIZED).
 *
 * METAL_TEST_VERBOSE=1 prints the worst error of every case.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

extern "C" {
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
}

#include "ruvllm.h"
#include "ruvllm_tools.h"

#define DATA_DIR "tests/data/tiny"

enum { N_PROMPT = 40, N_GEN = 4, N_TOK = N_PROMPT + N_GEN, N_CTX = 64 };

static bool verbose() { return getenv("METAL_TEST_VERBOSE") != nullptr; }

static std::vector<int32_t> read_tokens()
{
    FILE *f = fopen(DATA_DIR "/tokens.txt", "r");
    if (!f)
        fail_msg("%s/tokens.txt: cannot open (run from the repository root)", DATA_DIR);
    std::vector<int32_t> ids;
    long v;
    while (fscanf(f, "%ld", &v) == 1)
        ids.push_back((int32_t)v);
    fclose(f);
    assert_true(ids.size() >= N_TOK);
    ids.resize(N_TOK);
    return ids;
}

static std::vector<float> read_golden(const char *name, uint32_t n_vocab)
{
    std::string path = std::string(DATA_DIR "/") + name + ".logits";
    FILE *f = fopen(path.c_str(), "rb");
    if (!f)
        fail_msg("%s: cannot open", path.c_str());
    std::vector<float> x((size_t)N_TOK * n_vocab);
    size_t got = fread(x.data(), sizeof(float), x.size(), f);
    fclose(f);
    assert_int_equal(got, x.size());
    return x;
}

/* every position's logits: a prompt of N_PROMPT in one call, then N_GEN
 * single tokens */
static std::vector<float> run(const rvl_backend_ops *ops, const rvl_model *m,
                              rvl_kv_type kv, const std::vector<int32_t> &ids)
{
    const uint32_t nv = rvl_model_hparams(m)->n_vocab;
    rvl_ctx_params cp;
    memset(&cp, 0, sizeof cp);
    cp.n_ctx = N_CTX;
    cp.n_threads = 1;
    cp.all_logits = true;
    cp.n_batch = N_PROMPT;
    cp.kv_type = kv;
    rvl_backend *b;
    int rc = ops->open(&b, m, &cp);
    if (rc < 0)
        fail_msg("%s open: %s", ops->name, rvl_errmsg());
    std::vector<float> out((size_t)N_TOK * nv);
    const float *lg;
    rc = ops->decode(b, ids.data(), N_PROMPT, &lg);
    if (rc < 0)
        fail_msg("%s prompt: %s", ops->name, rvl_errmsg());
    memcpy(out.data(), lg, (size_t)N_PROMPT * nv * sizeof(float));
    for (int t = N_PROMPT; t < N_TOK; t++) {
        rc = ops->decode(b, &ids[(size_t)t], 1, &lg);
        if (rc < 0)
            fail_msg("%s token %d: %s", ops->name, t, rvl_errmsg());
        memcpy(&out[(size_t)t * nv], lg, nv * sizeof(float));
    }
    assert_int_equal(ops->pos(b), N_TOK);
    ops->close(b);
    return out;
}

/* the worst row error (test_tiny_hf.c's metric); prints the rows when
 * above tol */
static double compare(const char *what, const std::vector<float> &a, const std::vector<float> &ref,
                      uint32_t nv, double tol)
{
    double worst = 0;
    std::vector<double> err(N_TOK);
    for (int t = 0; t < N_TOK; t++) {
        double mx = 0, md = 0;
        for (uint32_t i = 0; i < nv; i++) {
            const double r = fabs((double)ref[(size_t)t * nv + i]);
            const double d = fabs((double)a[(size_t)t * nv + i] - (double)ref[(size_t)t * nv + i]);
            mx = r > mx ? r : mx;
            md = d > md || isnan(d) ? (isnan(d) ? INFINITY : d) : md;
        }
        err[t] = mx > 0 ? md / mx : md;
        worst = err[t] > worst || isnan(err[t]) ? err[t] : worst;
    }
    if (verbose())
        print_message("%-40s worst %.2e (tolerance %.0e)\n", what, worst, tol);
    if (!(worst <= tol)) {
        print_error("%s: worst row error %.3e above %.0e; per position:\n", what, worst, tol);
        for (int t = 0; t < N_TOK; t++)
            print_error("%s%8.1e%s", t % 8 ? "" : "  ", err[t], t % 8 == 7 || t + 1 == N_TOK ? "\n" : "");
    }
    return worst;
}

static rvl_model *open_model(const std::string &path)
{
    rvl_model *m;
    if (rvl_model_open(&m, path.c_str()) < 0)
        fail_msg("%s: %s", path.c_str(), rvl_errmsg());
    return m;
}

/* f32 weights: the f32 and f16 caches against the CPU, f32 against HF */
static void check_f32_model(const char *name)
{
    const rvl_backend_ops *cpu = rvl_backend_find("cpu");
    assert_non_null(cpu);
    const std::vector<int32_t> ids = read_tokens();
    rvl_model *m = open_model(std::string(DATA_DIR "/") + name + ".gguf");
    const uint32_t nv = rvl_model_hparams(m)->n_vocab;
    const std::vector<float> golden = read_golden(name, nv);
    std::string w = std::string(name) + " f32 kv";

    std::vector<float> g = run(&rvl_metal_backend_ops, m, RVL_KV_F32, ids);
    std::vector<float> c = run(cpu, m, RVL_KV_F32, ids);
    assert_true(compare((w + ": metal vs cpu").c_str(), g, c, nv, 2e-5) <= 2e-5);
    assert_true(compare((w + ": metal vs transformers").c_str(), g, golden, nv, 1e-4) <= 1e-4);

    w = std::string(name) + " f16 kv";
    g = run(&rvl_metal_backend_ops, m, RVL_KV_F16, ids);
    c = run(cpu, m, RVL_KV_F16, ids);
    assert_true(compare((w + ": metal vs cpu").c_str(), g, c, nv, 1e-3) <= 1e-3);
    rvl_model_close(m);
}

static void test_llama(void **state) { (void)state; check_f32_model("llama"); }
static void test_llama_tied(void **state) { (void)state; check_f32_model("llama-tied"); }
static void test_qwen2(void **state) { (void)state; check_f32_model("qwen2"); }
static void test_llama3(void **state) { (void)state; check_f32_model("llama3"); }
static void test_llama_yarn(void **state) { (void)state; check_f32_model("llama-yarn"); }
static void test_llama_linear(void **state) { (void)state; check_f32_model("llama-linear"); }

/* llama.gguf quantized with the project's quantizer (every tensor in
 * `mix`, pure) into a temporary file; returns its path */
static std::string quantized(const char *name, const char *mix)
{
    char dir[] = "/tmp/rvl-metal-backend-XXXXXX";
    assert_non_null(mkdtemp(dir));
    std::string out = std::string(dir) + "/" + name + "-" + mix + ".gguf";
    rvl_quantize_params qp;
    memset(&qp, 0, sizeof qp);
    qp.mix = mix;
    qp.n_threads = 1;
    qp.pure = true;
    qp.output_type = UINT32_MAX;
    qp.embd_type = UINT32_MAX;
    std::string in = std::string(DATA_DIR "/") + name + ".gguf";
    if (rvl_quantize_gguf(in.c_str(), out.c_str(), &qp, nullptr) < 0)
        fail_msg("quantize %s to %s: %s", in.c_str(), mix, rvl_errmsg());
    return out;
}

static void remove_quantized(const std::string &path)
{
    unlink(path.c_str());
    rmdir(path.substr(0, path.rfind('/')).c_str());
}

/* Quantized weights. The GPU computes sum_i dequantize(W)[r][i] x[i] in
 * f32, so with an f32 cache it must agree with the CPU on the same model
 * dequantized to F32 (rvl_dequant_gguf: the same dequantize kernels) as
 * tightly as the f32 models do. Against the CPU on the quantized model
 * (which rounds the activations to Q8_0 first) only loosely, and it must
 * be no further from transformers' f32 logits than that CPU run is. */
static void check_quantized(const char *mix, double tol_cpu_q)
{
    const std::vector<int32_t> ids = read_tokens();
    const std::string path = quantized("llama", mix);
    const std::string dq = path.substr(0, path.size() - 5) + "-f32.gguf";
    rvl_dequant_params dp;
    memset(&dp, 0, sizeof dp);
    dp.type = RVL_TYPE_F32;
    if (rvl_dequant_gguf(path.c_str(), dq.c_str(), &dp) < 0)
        fail_msg("dequantize %s: %s", path.c_str(), rvl_errmsg());
    rvl_model *m = open_model(path), *mf = open_model(dq);
    const uint32_t nv = rvl_model_hparams(m)->n_vocab;
    const std::vector<float> golden = read_golden("llama", nv);
    const rvl_backend_ops *cpu = rvl_backend_find("cpu");

    std::string w = std::string("llama ") + mix;
    std::vector<float> g = run(&rvl_metal_backend_ops, m, RVL_KV_F32, ids);
    std::vector<float> c = run(cpu, mf, RVL_KV_F32, ids);
    const double e_exact = compare((w + " f32 kv: metal vs cpu on F32 of it").c_str(), g, c, nv, 2e-5);
    g = run(&rvl_metal_backend_ops, m, RVL_KV_F16, ids);
    c = run(cpu, m, RVL_KV_F16, ids);
    const double e_q = compare((w + " f16 kv: metal vs cpu").c_str(), g, c, nv, tol_cpu_q);
    const double e_g = compare((w + " f16 kv: metal vs transformers").c_str(), g, golden, nv, 1);
    const double e_c = compare((w + " f16 kv: cpu vs transformers").c_str(), c, golden, nv, 1);
    rvl_model_close(m);
    rvl_model_close(mf);
    unlink(dq.c_str());
    remove_quantized(path);
    assert_true(e_exact <= 2e-5);
    assert_true(e_q <= tol_cpu_q);
    assert_true(e_g <= e_c * 1.05);
}

static void test_q8_0(void **state) { (void)state; check_quantized("Q8_0", 0.1); }
static void test_q4_0(void **state) { (void)state; check_quantized("Q4_0", 0.1); }

/* a format with no Metal kernel: open fails naming tensor and format */
static void test_refuses_format(void **state)
{
    (void)state;
    const std::string path = quantized("llama", "Q5_0");
    rvl_model *m = open_model(path);
    rvl_ctx_params cp; /* as rvl_ctx_open resolves them */
    memset(&cp, 0, sizeof cp);
    cp.n_ctx = N_CTX;
    cp.n_batch = 1;
    rvl_backend *b = nullptr;
    int rc = rvl_metal_backend_ops.open(&b, m, &cp);
    std::string msg = rvl_errmsg();
    rvl_model_close(m);
    remove_quantized(path);
    assert_int_equal(rc, RVL_EUNSUPPORTED);
    assert_null(b);
    if (msg.find("blk.0.attn_q.weight") == std::string::npos || msg.find("Q5_0") == std::string::npos)
        fail_msg("message does not name the tensor and format: %s", msg.c_str());
}

/* a block-recipe feature the Metal forward pass lacks: RVL_EUNSUPPORTED
 * naming it: Qwen3's QK-norm, and, as no file can ask for them yet (the
 * loader refuses what the CPU lacks too), features set by editing the
 * recipe of an open model. */
static void test_refuses_block_feature(void **state)
{
    (void)state;
    rvl_model *m = open_model(DATA_DIR "/llama.gguf");
    rvl_hparams *hp = const_cast<rvl_hparams *>(rvl_model_hparams(m));
    rvl_ctx_params cp;
    memset(&cp, 0, sizeof cp);
    cp.n_ctx = 64;
    cp.n_batch = 1;
    cp.kv_type = RVL_KV_F32;
    const rvl_block orig = hp->block;
    static const char *const want[] = {"qk_norm", "final_softcap", "act gelu_tanh"};
    for (int i = 0; i < 3; i++) {
        hp->block = orig;
        if (i == 0)
            hp->block.qk_norm = true;
        else if (i == 1)
            hp->block.final_softcap = 30;
        else
            hp->block.act = RVL_ACT_GELU_TANH;
        rvl_backend *b = nullptr;
        assert_int_equal(rvl_metal_backend_ops.open(&b, m, &cp), RVL_EUNSUPPORTED);
        const std::string msg = rvl_errmsg();
        if (msg.find(want[i]) == std::string::npos || msg.find("metal") == std::string::npos)
            fail_msg("message does not name '%s' and metal: %s", want[i], msg.c_str());
    }
    hp->block = orig;
    rvl_model_close(m);

    /* the families the CPU runs and Metal does not yet, each refused
     * naming its first missing feature and the architecture */
    static const struct { const char *file, *feature, *arch; } fams[] = {
        {DATA_DIR "/qwen3.gguf", "qk_norm", "qwen3"},
        {DATA_DIR "/gemma2.gguf", "norm_post_attn", "gemma2"},
        {DATA_DIR "/gemma3.gguf", "norm_post_attn", "gemma3"},
        {DATA_DIR "/phi3.gguf", "LongRoPE", "phi3"},
        {DATA_DIR "/ministral3.gguf", "attn_temp_scale", "mistral3"},
    };
    for (const auto &f : fams) {
        m = open_model(f.file);
        rvl_backend *b = nullptr;
        assert_int_equal(rvl_metal_backend_ops.open(&b, m, &cp), RVL_EUNSUPPORTED);
        const std::string msg = rvl_errmsg();
        if (msg.find(f.feature) == std::string::npos || msg.find(f.arch) == std::string::npos)
            fail_msg("%s: message does not name %s and %s: %s", f.file, f.feature, f.arch,
                     msg.c_str());
        rvl_model_close(m);
    }
}

/* quantized KV caches are the CPU's; unknown backends are refused */
static void test_refuses_kv_and_names(void **state)
{
    (void)state;
    rvl_model *m = open_model(DATA_DIR "/llama.gguf");
    rvl_ctx_params cp;
    memset(&cp, 0, sizeof cp);
    cp.kv_type = RVL_KV_Q8;
    rvl_backend *b = nullptr;
    assert_int_equal(rvl_metal_backend_ops.open(&b, m, &cp), RVL_EUNSUPPORTED);
    assert_non_null(strstr(rvl_errmsg(), "q8"));
    rvl_model_close(m);
    assert_null(rvl_backend_find("cuda"));
    assert_non_null(strstr(rvl_errmsg(), "unknown backend"));
    /* this program links the Metal backend, but libruvllm's registry was
     * built without it (Linux): the message a user sees */
    if (!rvl_backend_available("metal")) {
        assert_null(rvl_backend_find("metal"));
        assert_non_null(strstr(rvl_errmsg(), "this build has no Metal backend"));
    }
}

/* ====================================================================
 * rvl_ctx on the Metal backend
 * ==================================================================== */

enum { N_GREEDY = 20 };

/* Under ASan the emulator is ~20x slower: the ctx cases of the other
 * models (the same delegation; their forward passes are checked above)
 * and the default model are skipped there. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#if !defined(SANITIZED) && defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#endif
#ifdef SANITIZED
#define SKIP_SANITIZED() do { print_message("skipped under the sanitizers\n"); skip(); } while (0)
#else
#define SKIP_SANITIZED() do { } while (0)
#endif

static void ensure_registered() { assert_int_equal(rvl_backend_register(&rvl_metal_backend_ops), 0); }

static bool has(const char *needle)
{
    if (strstr(rvl_errmsg(), needle))
        return true;
    print_error("message '%s' lacks '%s'\n", rvl_errmsg(), needle);
    return false;
}

static rvl_ctx *open_ctx(const rvl_model *m, const char *backend, rvl_kv_type kv, uint32_t n_ctx)
{
    rvl_ctx_params cp;
    memset(&cp, 0, sizeof cp);
    cp.n_ctx = n_ctx;
    cp.n_threads = 1;
    cp.kv_type = kv;
    cp.backend = backend;
    rvl_ctx *c = nullptr;
    if (rvl_ctx_open(&c, m, &cp) < 0)
        fail_msg("open %s: %s", backend ? backend : "cpu", rvl_errmsg());
    assert_string_equal(rvl_ctx_backend(c), backend ? backend : "cpu");
    return c;
}

static int32_t argmax(const float *x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (int32_t)best;
}

/* Greedy generation as gen.c does it: decode `first` (the prompt, or the
 * token after a truncation) at the context's position, then sample the
 * argmax and decode it, n times; the n sampled ids and the n logit rows
 * they were sampled from. */
struct greedy_run {
    std::vector<int32_t> ids;
    std::vector<float> logits;
};

static greedy_run greedy(rvl_ctx *c, const int32_t *first, uint32_t n_first, int n, uint32_t nv)
{
    greedy_run r;
    const float *lg;
    if (rvl_decode(c, first, n_first, &lg) < 0)
        fail_msg("%s: decode %u tokens: %s", rvl_ctx_backend(c), n_first, rvl_errmsg());
    for (int i = 0; i < n; i++) {
        r.logits.insert(r.logits.end(), lg, lg + nv);
        int32_t id = argmax(lg, nv);
        r.ids.push_back(id);
        if (i + 1 < n && rvl_decode(c, &id, 1, &lg) < 0)
            fail_msg("%s: decode generated token %d: %s", rvl_ctx_backend(c), i, rvl_errmsg());
    }
    return r;
}

/* worst row error of n rows (compare()'s metric) */
static double row_err(const std::vector<float> &a, const std::vector<float> &ref, uint32_t nv)
{
    double worst = 0;
    for (size_t t = 0; t < ref.size() / nv; t++) {
        double mx = 0, md = 0;
        for (uint32_t i = 0; i < nv; i++) {
            const double r = fabs((double)ref[t * nv + i]);
            const double d = fabs((double)a[t * nv + i] - (double)ref[t * nv + i]);
            mx = r > mx ? r : mx;
            md = d > md || isnan(d) ? (isnan(d) ? INFINITY : d) : md;
        }
        const double e = mx > 0 ? md / mx : md;
        worst = e > worst || isnan(e) ? e : worst;
    }
    return worst;
}

static void print_ids(const char *what, const std::vector<int32_t> &ids)
{
    print_error("%s:", what);
    for (int32_t id : ids)
        print_error(" %d", id);
    print_error("\n");
}

/* the prompt ids, greedy tokens on the CPU context and on the Metal one;
 * then truncate + continue, reset + regenerate and reuse on the Metal one */
static void check_ctx_generation(const rvl_model *m, const std::vector<int32_t> &prompt,
                                 rvl_kv_type kv, double tol, const char *what)
{
    const uint32_t nv = rvl_model_hparams(m)->n_vocab, np = (uint32_t)prompt.size();
    const uint32_t n_ctx = np + N_GREEDY + 4;
    ensure_registered();
    rvl_ctx *cc = open_ctx(m, nullptr, kv, n_ctx), *gc = open_ctx(m, "metal", kv, n_ctx);
    assert_int_equal(rvl_ctx_n_ctx(gc), n_ctx);

    const greedy_run cr = greedy(cc, prompt.data(), np, N_GREEDY, nv);
    const greedy_run gr = greedy(gc, prompt.data(), np, N_GREEDY, nv);
    const double e = row_err(gr.logits, cr.logits, nv);
    if (verbose())
        print_message("%-40s %d greedy tokens equal: %s, worst logits %.2e (tolerance %.0e)\n", what,
                      N_GREEDY, gr.ids == cr.ids ? "yes" : "no", e, tol);
    if (gr.ids != cr.ids) {
        print_ids("cpu  ", cr.ids);
        print_ids("metal", gr.ids);
    }
    assert_true(gr.ids == cr.ids);
    assert_true(e <= tol);
    assert_int_equal(rvl_ctx_pos(gc), np + N_GREEDY - 1);
    assert_int_equal(rvl_ctx_pos(cc), rvl_ctx_pos(gc));

    /* truncate to the prompt + 8 generated tokens, decode the 9th again and
     * continue: the same tail */
    const uint32_t keep = np + 8;
    assert_int_equal(rvl_ctx_truncate(gc, keep), 0);
    assert_int_equal(rvl_ctx_pos(gc), keep);
    const greedy_run tr = greedy(gc, &gr.ids[8], 1, N_GREEDY - 9, nv);
    assert_true(std::vector<int32_t>(gr.ids.begin() + 9, gr.ids.end()) == tr.ids);
    assert_true(row_err(tr.logits, std::vector<float>(gr.logits.begin() + 9 * (size_t)nv,
                                                      gr.logits.end()), nv) <= tol);
    assert_int_equal(rvl_ctx_truncate(gc, rvl_ctx_pos(gc) + 1), RVL_ERANGE);

    /* prefix reuse: the cache holds prompt + ids[0 .. N_GREEDY - 2]; a
     * sequence that leaves it after the prompt's 30th token keeps 30 */
    std::vector<int32_t> seq(prompt);
    seq.insert(seq.end(), gr.ids.begin(), gr.ids.end());
    assert_int_equal(rvl_ctx_reuse(gc, seq.data(), (uint32_t)seq.size()), np + N_GREEDY - 1);
    std::vector<int32_t> other(seq.begin(), seq.begin() + 40);
    other[30] = other[30] == 1 ? 2 : 1;
    assert_int_equal(rvl_ctx_reuse(gc, other.data(), (uint32_t)other.size()), 30);
    assert_int_equal(rvl_ctx_pos(gc), 30);

    /* reset and regenerate: the same tokens */
    rvl_ctx_reset(gc);
    assert_int_equal(rvl_ctx_pos(gc), 0);
    const greedy_run rr = greedy(gc, prompt.data(), np, N_GREEDY, nv);
    assert_true(rr.ids == gr.ids);
    assert_true(row_err(rr.logits, gr.logits, nv) <= tol);

    /* the context is full at n_ctx, as on the CPU */
    const int32_t more[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const float *lg;
    assert_int_equal(rvl_decode(gc, more, 8, &lg), RVL_ERANGE);
    assert_int_equal(rvl_decode(cc, more, 8, &lg), RVL_ERANGE);
    rvl_ctx_close(gc);
    rvl_ctx_close(cc);
}

static void ctx_model(const char *name, rvl_kv_type kv, double tol)
{
    std::vector<int32_t> ids = read_tokens();
    ids.resize(N_PROMPT);
    rvl_model *m = open_model(std::string(DATA_DIR "/") + name + ".gguf");
    std::string what = std::string("ctx ") + name + (kv == RVL_KV_F32 ? " f32 kv" : " f16 kv");
    check_ctx_generation(m, ids, kv, tol, what.c_str());
    rvl_model_close(m);
}

static void test_ctx_llama_greedy(void **state)
{
    (void)state;
    ctx_model("llama", RVL_KV_F32, 2e-5);
    ctx_model("llama", RVL_KV_F16, 1e-3);
}
static void test_ctx_qwen2_greedy(void **state)
{
    (void)state;
    SKIP_SANITIZED();
    ctx_model("qwen2", RVL_KV_F32, 2e-5);
}
static void test_ctx_llama3_greedy(void **state)
{
    (void)state;
    SKIP_SANITIZED();
    ctx_model("llama3", RVL_KV_F32, 2e-5);
}
static void test_ctx_yarn_greedy(void **state)
{
    (void)state;
    SKIP_SANITIZED();
    ctx_model("llama-yarn", RVL_KV_F32, 2e-5);
}

/* Before registration the lookup gives the message a user of a build
 * without Metal sees; after it, rvl_ctx_open finds the backend. */
static void test_ctx_metal_needs_registration(void **state)
{
    (void)state;
    rvl_model *m = open_model(DATA_DIR "/llama.gguf");
    rvl_ctx_params cp;
    memset(&cp, 0, sizeof cp);
    cp.n_ctx = 64;
    cp.backend = "metal";
    rvl_ctx *c = nullptr;
    if (!rvl_backend_available("metal")) {
        assert_int_equal(rvl_ctx_open(&c, m, &cp), RVL_EUNSUPPORTED);
        assert_null(c);
        assert_true(has("this build has no Metal backend"));
    }
    cp.backend = "cuda";
    assert_int_equal(rvl_ctx_open(&c, m, &cp), RVL_EINVAL);
    assert_true(has("unknown backend 'cuda'"));
    rvl_backend_ops fake = rvl_metal_backend_ops;
    fake.name = "cpu";
    assert_int_equal(rvl_backend_register(&fake), RVL_EINVAL);
    ensure_registered();
    ensure_registered(); /* again: replaces itself */
    assert_true(rvl_backend_available("metal"));
    assert_ptr_equal(rvl_backend_find("metal"), &rvl_metal_backend_ops);
    cp.backend = "metal";
    assert_int_equal(rvl_ctx_open(&c, m, &cp), 0);
    assert_string_equal(rvl_ctx_backend(c), "metal");
    assert_string_equal(rvl_ctx_device(c), "metal-emu");
    rvl_ctx_close(c);
    /* "cpu" by name is today's path */
    cp.backend = "cpu";
    assert_int_equal(rvl_ctx_open(&c, m, &cp), 0);
    assert_string_equal(rvl_ctx_backend(c), "cpu");
    assert_string_equal(rvl_ctx_device(c), "cpu");
    rvl_ctx_close(c);
    rvl_model_close(m);
}

/* what only the CPU's KV cache does: RVL_EUNSUPPORTED naming it and metal */
static void test_ctx_metal_refusals(void **state)
{
    (void)state;
    ensure_registered();
    rvl_model *m = open_model(DATA_DIR "/llama.gguf");
    const rvl_hparams *hp = rvl_model_hparams(m);
    rvl_ctx_params cp;
    rvl_ctx *c = nullptr;
    static const rvl_kv_type bad[] = {RVL_KV_Q8, RVL_KV_Q4, RVL_KV_TQ4, RVL_KV_TQ3, RVL_KV_TIERED};
    for (rvl_kv_type t : bad) {
        memset(&cp, 0, sizeof cp);
        cp.backend = "metal";
        cp.kv_type = t;
        assert_int_equal(rvl_ctx_open(&c, m, &cp), RVL_EUNSUPPORTED);
        assert_null(c);
        char want[96];
        snprintf(want, sizeof want, "KV cache type %s is not supported by the metal backend (f16, f32)",
                 rvl_kv_type_name(t));
        assert_true(has(want));
    }
    memset(&cp, 0, sizeof cp);
    cp.backend = "metal";
    cp.kv_split = true;
    cp.kv_type_k = RVL_KV_F16;
    cp.kv_type_v = RVL_KV_F32;
    assert_int_equal(rvl_ctx_open(&c, m, &cp), RVL_EUNSUPPORTED);
    assert_true(has("not supported by the metal backend"));
    cp.kv_type_v = RVL_KV_F16; /* split, but one type: fine */
    assert_int_equal(rvl_ctx_open(&c, m, &cp), 0);
    rvl_ctx_close(c);
    cp.kv_split = false;
    cp.rope_scaling = "bogus";
    assert_int_equal(rvl_ctx_open(&c, m, &cp), RVL_EINVAL);
    assert_true(has("invalid RoPE override"));

    memset(&cp, 0, sizeof cp);
    cp.backend = "metal";
    cp.n_ctx = 64;
    assert_int_equal(rvl_ctx_open(&c, m, &cp), 0);
    /* f16 rows: 2 bytes x head_dim x kv heads x (K, V) x layers */
    const double per = 2.0 * 2 * hp->head_dim * hp->n_head_kv * hp->n_layer;
    assert_true(rvl_ctx_kv_token_bytes(c, 0) == per && rvl_ctx_kv_token_bytes(c, 2) == per);
    const int32_t ids[4] = {1, 2, 3, 4};
    const float *lg;
    assert_int_equal(rvl_decode(c, ids, 4, &lg), 0);

    rvl_lora *l = nullptr;
    assert_int_equal(rvl_lora_open(&l, m), 0);
    assert_int_equal(rvl_ctx_set_lora(c, l), RVL_EUNSUPPORTED);
    assert_true(has("LoRA adapters are not supported by the metal backend"));
    assert_int_equal(rvl_ctx_set_lora(c, nullptr), 0);
    rvl_lora_close(l);

    assert_int_equal(rvl_ctx_shift(c, 1, 2), RVL_EUNSUPPORTED);
    assert_true(has("context shift is not supported by the metal backend"));
    assert_int_equal(rvl_ctx_fill_random(c, 4, 1), RVL_EUNSUPPORTED);
    assert_true(has("not supported by the metal backend"));
    assert_int_equal(rvl_ctx_pos(c), 4);

    char dir[] = "/tmp/rvl-metal-ctx-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const std::string path = std::string(dir) + "/s.session";
    assert_int_equal(rvl_session_save(c, path.c_str(), ids, 4, nullptr), RVL_EUNSUPPORTED);
    assert_true(has("session files are not supported by the metal backend"));
    assert_int_equal(access(path.c_str(), F_OK), -1);
    /* a real session file (from a CPU context) is not loaded either */
    rvl_ctx *cc = open_ctx(m, nullptr, RVL_KV_F16, 64);
    assert_int_equal(rvl_decode(cc, ids, 4, &lg), 0);
    assert_int_equal(rvl_session_save(cc, path.c_str(), ids, 4, nullptr), 0);
    rvl_ctx_close(cc);
    int32_t *got = (int32_t *)1;
    size_t n_got = 7;
    assert_int_equal(rvl_session_load(c, path.c_str(), &got, &n_got, nullptr), RVL_EUNSUPPORTED);
    assert_true(has("session files are not supported by the metal backend"));
    assert_null(got);
    assert_int_equal(n_got, 0);
    assert_int_equal(rvl_ctx_pos(c), 0); /* left empty, as on any failed load */
    unlink(path.c_str());
    rmdir(dir);
    rvl_ctx_close(c);
    rvl_model_close(m);
}

/* The default model, requantized to Q8_0 (Q4_1 has no Metal kernel): the
 * same greedy tokens as the CPU context on the same file. Skipped when the
 * model is not there. */
static void test_ctx_default_model(void **state)
{
    (void)state;
    const char *home = getenv("HOME");
    std::string src = std::string(home ? home : "/root") +
                      "/.cache/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(src.c_str(), R_OK) != 0) {
        print_message("skipped: %s not found\n", src.c_str());
        skip();
    }
    /* ~25 s of CPU time plain, far more under the sanitizers: the same
     * code runs there on the tiny models */
    SKIP_SANITIZED();
    char dir[] = "/tmp/rvl-metal-smol-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const std::string out = std::string(dir) + "/smol-q8_0.gguf";
    rvl_quantize_params qp;
    memset(&qp, 0, sizeof qp);
    qp.mix = "Q8_0";
    qp.n_threads = 2;
    qp.pure = true;
    qp.allow_requantize = true;
    qp.output_type = UINT32_MAX;
    qp.embd_type = UINT32_MAX;
    if (rvl_quantize_gguf(src.c_str(), out.c_str(), &qp, nullptr) < 0) {
        const std::string msg = rvl_errmsg();
        unlink(out.c_str());
        rmdir(dir);
        fail_msg("quantize %s to Q8_0: %s", src.c_str(), msg.c_str());
    }
    rvl_model *m = open_model(out);
    /* "The capital of France is" and a little more, as SmolLM2's ids */
    rvl_tokenizer *tk = rvl_model_tokenizer(m);
    static const char text[] = "The capital of France is Paris. The capital of Germany is";
    int32_t *ids = nullptr;
    size_t n = 0;
    assert_int_equal(rvl_tok_encode_alloc(tk, text, strlen(text), true, false, &ids, &n), 0);
    std::vector<int32_t> prompt(ids, ids + n);
    free(ids);
    ensure_registered();
    const uint32_t nv = rvl_model_hparams(m)->n_vocab, n_ctx = (uint32_t)n + 20;
    rvl_ctx *cc = open_ctx(m, nullptr, RVL_KV_F16, n_ctx), *gc = open_ctx(m, "metal", RVL_KV_F16, n_ctx);
    const greedy_run cr = greedy(cc, prompt.data(), (uint32_t)n, 16, nv);
    const greedy_run gr = greedy(gc, prompt.data(), (uint32_t)n, 16, nv);
    /* the same tokens, or the first difference at a close call of the
     * CPU's (its kernels sum in other orders than the shaders, whose
     * semantics are kernels/ref's: the 16-row layout, the SIMD SwiGLU;
     * a margin below 0.5, t0030's tolerance for llama.cpp, for the same
     * reason: Q8 activations turn last bits into quantization steps); the
     * logits compared while the histories are the same */
    size_t k = 0;
    while (k < cr.ids.size() && gr.ids[k] == cr.ids[k])
        k++;
    const size_t rows = k < cr.ids.size() ? k + 1 : k;
    const std::vector<float> gl(gr.logits.begin(), gr.logits.begin() + rows * nv);
    const std::vector<float> cl(cr.logits.begin(), cr.logits.begin() + rows * nv);
    const double e = row_err(gl, cl, nv);
    double margin = 0;
    if (k < cr.ids.size()) {
        const float *l = &cr.logits[k * nv];
        margin = fabs((double)l[cr.ids[k]] - (double)l[gr.ids[k]]);
    }
    if (verbose())
        print_message("%-40s %zu of 16 greedy tokens equal, worst logits %.2e\n",
                      "ctx SmolLM2 Q8_0 f16 kv", k, e);
    if (gr.ids != cr.ids) {
        print_ids("cpu  ", cr.ids);
        print_ids("metal", gr.ids);
        print_message("first difference at token %zu, the CPU's margin there %.3g\n", k, margin);
    }
    rvl_ctx_close(gc);
    rvl_ctx_close(cc);
    rvl_model_close(m);
    unlink(out.c_str());
    rmdir(dir);
    assert_true(k >= 12);
    assert_true(k == cr.ids.size() || margin < 0.5);
    assert_true(e <= 0.1); /* the CPU rounds activations to Q8_0 (see above) */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ctx_metal_needs_registration),
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_llama_tied),
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_llama_yarn),
        cmocka_unit_test(test_llama_linear),
        cmocka_unit_test(test_q8_0),
        cmocka_unit_test(test_q4_0),
        cmocka_unit_test(test_refuses_format),
        cmocka_unit_test(test_refuses_kv_and_names),
        cmocka_unit_test(test_refuses_block_feature),
        cmocka_unit_test(test_ctx_llama_greedy),
        cmocka_unit_test(test_ctx_qwen2_greedy),
        cmocka_unit_test(test_ctx_llama3_greedy),
        cmocka_unit_test(test_ctx_yarn_greedy),
        cmocka_unit_test(test_ctx_metal_refusals),
        cmocka_unit_test(test_ctx_default_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
