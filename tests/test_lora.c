/*
 * test_lora.c - LoRA adapters: lora-merge against peft's merge_and_unload
 * (goldens from tests/ref/gen_lora_goldens.py in tests/data/lora/), the
 * GGUF LoRA form merging like the PEFT form, run-time adapters giving the
 * merged model's logits, and broken adapters refused with the name of
 * what is wrong.
 *
 * Needs the default model (make model); skipped without it.
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

#include "formats.h"
#include "ruvllm.h"
#include "ruvllm_tools.h"

#define DATA "tests/data/lora"

static char g_model[4096], g_tmp[4096], g_f32[4200];

static bool have_model(void)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && *xdg)
        snprintf(g_model, sizeof g_model, "%s/ruvllm/models/%s", xdg, RVL_DEFAULT_MODEL_FILE);
    else
        snprintf(g_model, sizeof g_model, "%s/.cache/ruvllm/models/%s",
                 getenv("HOME") ? getenv("HOME") : ".", RVL_DEFAULT_MODEL_FILE);
    return access(g_model, R_OK) == 0;
}

static void tmp_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", g_tmp, name);
}

/* Row r of tensor t as floats. */
static void row_f32(const rvl_tensor_info *t, uint64_t r, float *dst)
{
    const rvl_kformat *kf = rvl_kformat_get(t->type);
    assert_non_null(kf);
    uint64_t rb = rvl_kformat_row_bytes(kf, t->ne[0]);
    kf->dequantize((const char *)t->data + r * rb, dst, (int64_t)t->ne[0]);
}

/* Every "<case>.<name>.proj" golden: W' p over all rows within 1e-3 of
 * sum |w| |p|, and the sampled rows element by element within 1e-3
 * relative (plus 1e-6 absolute). Returns the tensors checked. */
static int check_goldens(const char *merged, const char *cs)
{
    rvl_file *g = NULL, *m = NULL;
    assert_int_equal(rvl_file_open(&g, DATA "/goldens.gguf"), 0);
    assert_int_equal(rvl_file_open(&m, merged), 0);
    char pre[8];
    snprintf(pre, sizeof pre, "%s.", cs);
    int n = 0;
    float *w = malloc(4096 * sizeof *w);
    assert_non_null(w);
    for (uint64_t i = 0; i < rvl_file_n_tensors(g); i++) {
        const rvl_tensor_info *gt = rvl_file_tensor(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)gt->name.len, gt->name.ptr);
        size_t nl = strlen(name);
        if (strncmp(name, pre, strlen(pre)) || nl < 5 || strcmp(name + nl - 5, ".proj"))
            continue;
        char tn[96];
        snprintf(tn, sizeof tn, "%.*s", (int)(nl - 5 - strlen(pre)), name + strlen(pre));
        const rvl_tensor_info *t = rvl_file_find_tensor(m, tn);
        assert_non_null(t);
        char pn[32];
        snprintf(pn, sizeof pn, "probe.%llu", (unsigned long long)t->ne[0]);
        const rvl_tensor_info *pt = rvl_file_find_tensor(g, pn);
        assert_non_null(pt);
        const float *p = pt->data, *want = gt->data;
        assert_int_equal(gt->n_elements, t->ne[1]);
        for (uint64_t r = 0; r < t->ne[1]; r++) {
            row_f32(t, r, w);
            double s = 0, sa = 0;
            for (uint64_t k = 0; k < t->ne[0]; k++) {
                s += (double)w[k] * p[k];
                sa += fabs((double)w[k] * p[k]);
            }
            if (fabs(s - want[r]) > 1e-3 * sa + 1e-6)
                fail_msg("%s row %llu: W'p %.9g, peft %.9g", tn, (unsigned long long)r, s, want[r]);
        }
        char rn[128];
        snprintf(rn, sizeof rn, "%s%s.rows", pre, tn);
        const rvl_tensor_info *rt = rvl_file_find_tensor(g, rn);
        if (rt) {
            const uint64_t rows[3] = {0, t->ne[1] / 2, t->ne[1] - 1};
            for (int j = 0; j < 3; j++) {
                row_f32(t, rows[j], w);
                const float *e = (const float *)rt->data + j * t->ne[0];
                for (uint64_t k = 0; k < t->ne[0]; k++)
                    if (fabsf(w[k] - e[k]) > 1e-3f * fabsf(e[k]) + 1e-6f)
                        fail_msg("%s [%llu][%llu]: %.9g, peft %.9g", tn,
                                 (unsigned long long)rows[j], (unsigned long long)k, w[k], e[k]);
            }
        }
        n++;
    }
    free(w);
    rvl_file_close(m);
    rvl_file_close(g);
    return n;
}

static int merge(const char *base, const char *type, const char *out, size_t n, ...)
{
    const char *specs[4];
    va_list ap;
    va_start(ap, n);
    for (size_t i = 0; i < n; i++)
        specs[i] = va_arg(ap, const char *);
    va_end(ap);
    rvl_lora_merge_params p = {.type = type, .n_threads = 2};
    return rvl_lora_merge(base, specs, n, out, &p, NULL);
}

/* ---------------------------------------------------------------- merge */

static void test_lora_merge_f32_matches_peft(void **st)
{
    (void)st;
    char out[4200];
    tmp_path(out, sizeof out, "a32.gguf");
    rvl_lora_merge_report r;
    const char *spec = DATA "/smol-r8";
    rvl_lora_merge_params p = {.type = "F32", .n_threads = 2};
    assert_int_equal(rvl_lora_merge(g_model, &spec, 1, out, &p, &r), 0);
    assert_int_equal(r.n_merged, 28);
    assert_int_equal(r.n_adapters, 1);
    assert_int_equal(r.adapters[0].rank_max, 8);
    assert_true(r.adapters[0].alpha == 16);
    rvl_lora_merge_report_free(&r);
    /* 28 updated tensors and one untouched (blk.5.attn_q) */
    assert_int_equal(check_goldens(out, "a"), 29);
    unlink(out);
}

static void test_lora_merge_f16_matches_peft(void **st)
{
    (void)st;
    char out[4200];
    tmp_path(out, sizeof out, "a16.gguf");
    assert_int_equal(merge(g_model, "F16", out, 1, DATA "/smol-r8"), 0);
    assert_int_equal(check_goldens(out, "a"), 29);
    unlink(out);
}

static void test_lora_merge_sums_adapters_with_rslora(void **st)
{
    (void)st;
    char out[4200];
    tmp_path(out, sizeof out, "b32.gguf");
    /* smol-r8 + 0.5 * smol-rs4 (rsLoRA: alpha/sqrt(r)); layer 1 gets both */
    assert_int_equal(merge(g_model, "F32", out, 2, DATA "/smol-r8", DATA "/smol-rs4:0.5"), 0);
    assert_int_equal(check_goldens(out, "b"), 35);
    unlink(out);
}

static void test_lora_gguf_form_merges_like_peft_form(void **st)
{
    (void)st;
    char a[4200], b[4200];
    tmp_path(a, sizeof a, "peft.gguf");
    tmp_path(b, sizeof b, "gguf.gguf");
    /* own types: the Q4_1 tensors requantized after the merge */
    assert_int_equal(merge(g_model, NULL, a, 1, DATA "/smol-r8"), 0);
    assert_int_equal(merge(g_model, NULL, b, 1, DATA "/smol-r8.gguf"), 0);
    rvl_file *fa = NULL, *fb = NULL, *fm = NULL;
    assert_int_equal(rvl_file_open(&fa, a), 0);
    assert_int_equal(rvl_file_open(&fb, b), 0);
    assert_int_equal(rvl_file_open(&fm, g_model), 0);
    assert_int_equal(rvl_file_size(fa), rvl_file_size(fb));
    assert_int_equal(rvl_file_n_tensors(fa), rvl_file_n_tensors(fm));
    int changed = 0;
    for (uint64_t i = 0; i < rvl_file_n_tensors(fa); i++) {
        const rvl_tensor_info *x = rvl_file_tensor(fa, i), *y = rvl_file_tensor(fb, i),
                              *z = rvl_file_tensor(fm, i);
        assert_int_equal(x->type, z->type);   /* every tensor keeps its type */
        assert_int_equal(x->nbytes, y->nbytes);
        assert_memory_equal(x->data, y->data, x->nbytes);
        changed += memcmp(x->data, z->data, x->nbytes) != 0;
    }
    assert_int_equal(changed, 28);
    /* metadata copied: same count as the base */
    assert_int_equal(rvl_file_n_kv(fa), rvl_file_n_kv(fm));
    rvl_file_close(fa);
    rvl_file_close(fb);
    rvl_file_close(fm);
    unlink(a);
    unlink(b);
}

/* ---------------------------------------------------------------- run time */

static void logits_of(const char *path, const char *const *specs, size_t n, uint32_t n_vocab_cap,
                      float *out, uint32_t *n_vocab)
{
    rvl_model *m = NULL;
    rvl_ctx *c = NULL;
    rvl_lora *l = NULL;
    assert_int_equal(rvl_model_open(&m, path), 0);
    rvl_ctx_params cp = {.n_ctx = 64, .n_threads = 2, .kv_type = RVL_KV_F32};
    assert_int_equal(rvl_ctx_open(&c, m, &cp), 0);
    if (n) {
        assert_int_equal(rvl_lora_open(&l, m), 0);
        for (size_t i = 0; i < n; i++) {
            char p[4096];
            float s;
            assert_int_equal(rvl_lora_parse_spec(specs[i], p, sizeof p, &s), 0);
            assert_int_equal(rvl_lora_add(l, p, s), 0);
        }
        assert_int_equal(rvl_lora_n_adapters(l), n);
        assert_int_equal(rvl_ctx_set_lora(c, l), 0);
    }
    *n_vocab = rvl_model_hparams(m)->n_vocab;
    assert_true(*n_vocab <= n_vocab_cap);
    /* a prompt (the batched path), then two single tokens (decode) */
    const int32_t prompt[] = {504, 3575, 282, 4649, 314, 7042, 30, 198, 9};
    const float *lg;
    assert_int_equal(rvl_decode(c, prompt, 9, &lg), 0);
    memcpy(out, lg, *n_vocab * sizeof *out);
    for (int i = 0; i < 2; i++) {
        int32_t t = 2000 + i;
        assert_int_equal(rvl_decode(c, &t, 1, &lg), 0);
    }
    memcpy(out + *n_vocab, lg, *n_vocab * sizeof *out);
    rvl_ctx_close(c);
    rvl_lora_close(l);
    rvl_model_close(m);
}

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_lora_runtime_logits_match_merged(void **st)
{
    (void)st;
    char merged[4200];
    tmp_path(merged, sizeof merged, "rt32.gguf");
    const char *specs[] = {DATA "/smol-r8", DATA "/smol-rs4:0.5"};
    assert_int_equal(merge(g_f32, "F32", merged, 2, specs[0], specs[1]), 0);
    enum { CAP = 1 << 16 };
    float *base = malloc(2 * CAP * sizeof *base), *rt = malloc(2 * CAP * sizeof *rt),
          *mg = malloc(2 * CAP * sizeof *mg);
    assert_non_null(base);
    assert_non_null(rt);
    assert_non_null(mg);
    uint32_t nv;
    logits_of(g_f32, NULL, 0, CAP, base, &nv);
    logits_of(g_f32, specs, 2, CAP, rt, &nv);
    logits_of(merged, NULL, 0, CAP, mg, &nv);
    double scale = max_abs(mg, 2 * nv);
    double d_rt = max_diff(rt, mg, 2 * nv), d_base = max_diff(base, mg, 2 * nv);
    print_message("max |logit| %.3f; run time vs merged %.3g; base vs merged %.3g\n", scale,
                  d_rt, d_base);
    assert_true(d_base > 0.05 * scale);   /* the adapters matter ... */
    assert_true(d_rt < 1e-4 * scale);     /* ... and run time equals the merge */
    free(base);
    free(rt);
    free(mg);
    unlink(merged);
}

static void test_lora_set_refuses_another_models_adapters(void **st)
{
    (void)st;
    rvl_model *a = NULL, *b = NULL;
    rvl_ctx *c = NULL;
    rvl_lora *l = NULL;
    assert_int_equal(rvl_model_open(&a, g_model), 0);
    assert_int_equal(rvl_model_open(&b, g_model), 0);
    assert_int_equal(rvl_ctx_open(&c, a, &(rvl_ctx_params){.n_ctx = 16, .n_threads = 1}), 0);
    assert_int_equal(rvl_lora_open(&l, b), 0);
    assert_int_equal(rvl_lora_add(l, DATA "/smol-r8.gguf", 1.0f), 0);
    assert_int_equal(rvl_ctx_set_lora(c, l), RVL_EINVAL);
    assert_int_equal(rvl_ctx_set_lora(c, NULL), 0);
    rvl_ctx_close(c);
    rvl_lora_close(l);
    rvl_model_close(a);
    rvl_model_close(b);
}

/* ---------------------------------------------------------------- errors */

static void expect_refused(const char *adapter, int code, const char *what)
{
    char out[4200];
    tmp_path(out, sizeof out, "bad.gguf");
    int rc = merge(g_model, NULL, out, 1, adapter);
    if (rc != code || !strstr(rvl_errmsg(), what))
        fail_msg("%s: rc %d, wanted %d; message '%s' lacks '%s'", adapter, rc, code, rvl_errmsg(), what);
    assert_int_equal(access(out, F_OK), -1);   /* nothing left at OUT */
}

static void test_lora_rejects_dora(void **st)
{
    (void)st;
    expect_refused(DATA "/bad-dora", RVL_EUNSUPPORTED, "DoRA");
}

static void test_lora_rejects_wrong_shape_naming_the_tensor(void **st)
{
    (void)st;
    expect_refused(DATA "/bad-shape", RVL_EFORMAT,
                   "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight (8 x 500)");
    expect_refused(DATA "/bad-shape", RVL_EFORMAT, "blk.0.attn_q.weight (576 x 576)");
}

static void test_lora_rejects_unknown_target_naming_the_tensor(void **st)
{
    (void)st;
    expect_refused(DATA "/bad-target", RVL_EUNSUPPORTED,
                   "tensor base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight");
}

static void test_lora_rejects_modules_to_save(void **st)
{
    (void)st;
    expect_refused(DATA "/bad-save", RVL_EUNSUPPORTED, "modules_to_save");
}

static void test_lora_rejects_truncated_adapter(void **st)
{
    (void)st;
    expect_refused(DATA "/bad-trunc", RVL_EFORMAT, "adapter_model.safetensors");
}

static void test_lora_rejects_a_model_as_adapter(void **st)
{
    (void)st;
    expect_refused(g_model, RVL_EFORMAT, "not a LoRA adapter");
    expect_refused(DATA "/no-such-adapter", RVL_EIO, "no-such-adapter");
}

static void test_lora_rejects_gguf_adapter_of_another_arch(void **st)
{
    (void)st;
    char ad[4200];
    tmp_path(ad, sizeof ad, "qwen-lora.gguf");
    rvl_gguf_writer *w = NULL;
    assert_int_equal(rvl_gguf_writer_open(&w, ad), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "general.architecture", "qwen2"), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "general.type", "adapter"), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "adapter.type", "lora"), 0);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);
    expect_refused(ad, RVL_EINVAL, "an adapter for 'qwen2', the base is 'llama'");
    unlink(ad);
}

static void test_lora_runtime_refuses_non_layer_targets(void **st)
{
    (void)st;
    /* a GGUF LoRA on token_embd: mergeable in principle, not hookable */
    char ad[4200];
    tmp_path(ad, sizeof ad, "embd-lora.gguf");
    rvl_gguf_writer *w = NULL;
    static float a[2 * 576], b[2 * 49152];
    assert_int_equal(rvl_gguf_writer_open(&w, ad), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "general.architecture", "llama"), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "general.type", "adapter"), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "adapter.type", "lora"), 0);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "token_embd.weight.lora_a", RVL_TYPE_F32, 2,
                                                (uint64_t[]){576, 2}, a), 0);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "token_embd.weight.lora_b", RVL_TYPE_F32, 2,
                                                (uint64_t[]){2, 49152}, b), 0);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);
    rvl_model *m = NULL;
    rvl_lora *l = NULL;
    assert_int_equal(rvl_model_open(&m, g_model), 0);
    assert_int_equal(rvl_lora_open(&l, m), 0);
    assert_int_equal(rvl_lora_add(l, ad, 1.0f), RVL_EUNSUPPORTED);
    assert_non_null(strstr(rvl_errmsg(), "token_embd.weight"));
    assert_int_equal(rvl_lora_n_adapters(l), 0);
    rvl_lora_close(l);
    rvl_model_close(m);
    unlink(ad);
}

static void test_lora_parse_spec(void **st)
{
    (void)st;
    char p[64];
    float s;
    assert_int_equal(rvl_lora_parse_spec("dir/a:0.5", p, sizeof p, &s), 0);
    assert_string_equal(p, "dir/a");
    assert_true(s == 0.5f);
    assert_int_equal(rvl_lora_parse_spec("a.gguf", p, sizeof p, &s), 0);
    assert_string_equal(p, "a.gguf");
    assert_true(s == 1.0f);
    assert_int_equal(rvl_lora_parse_spec("c:/x:y", p, sizeof p, &s), 0);   /* not a number */
    assert_string_equal(p, "c:/x:y");
    assert_true(s == 1.0f);
    assert_int_equal(rvl_lora_parse_spec("a:-2", p, sizeof p, &s), 0);
    assert_true(s == -2.0f);
    assert_int_equal(rvl_lora_parse_spec(":1", p, sizeof p, &s), RVL_EINVAL);
    /* a scale that reads as a number but is not a usable one is refused,
     * naming it (it used to become part of the path: "no such adapter") */
    static const char *const bad[] = {"a:nan", "a:inf", "a:-inf", "a:1e999", "a:1e30", "a:-1001"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(rvl_lora_parse_spec(bad[i], p, sizeof p, &s), RVL_EINVAL);
        assert_non_null(strstr(rvl_errmsg(), "is not a finite number within"));
    }
    assert_int_equal(rvl_lora_parse_spec("a:1000", p, sizeof p, &s), 0);
}

static int setup(void **st)
{
    (void)st;
    snprintf(g_tmp, sizeof g_tmp, "%s/ruvllm-lora.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_tmp))
        return -1;
    tmp_path(g_f32, sizeof g_f32, "base-f32.gguf");
    rvl_dequant_params dp = {.type = RVL_TYPE_F32};
    return rvl_dequant_gguf(g_model, g_f32, &dp) == 0 ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    unlink(g_f32);
    rmdir(g_tmp);
    return 0;
}

int main(void)
{
    const struct CMUnitTest unit[] = {
        cmocka_unit_test(test_lora_parse_spec),
    };
    int rc = cmocka_run_group_tests_name("lora_spec", unit, NULL, NULL);
    if (!have_model()) {
        /* 77: tests/run.sh counts a skip, not a pass */
        printf("# SKIP no model at %s (make model)\n", g_model);
        return rc ? rc : 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lora_merge_f32_matches_peft),
        cmocka_unit_test(test_lora_merge_f16_matches_peft),
        cmocka_unit_test(test_lora_merge_sums_adapters_with_rslora),
        cmocka_unit_test(test_lora_gguf_form_merges_like_peft_form),
        cmocka_unit_test(test_lora_runtime_logits_match_merged),
        cmocka_unit_test(test_lora_set_refuses_another_models_adapters),
        cmocka_unit_test(test_lora_rejects_dora),
        cmocka_unit_test(test_lora_rejects_wrong_shape_naming_the_tensor),
        cmocka_unit_test(test_lora_rejects_unknown_target_naming_the_tensor),
        cmocka_unit_test(test_lora_rejects_modules_to_save),
        cmocka_unit_test(test_lora_rejects_truncated_adapter),
        cmocka_unit_test(test_lora_rejects_a_model_as_adapter),
        cmocka_unit_test(test_lora_rejects_gguf_adapter_of_another_arch),
        cmocka_unit_test(test_lora_runtime_refuses_non_layer_targets),
    };
    return rc | cmocka_run_group_tests_name("lora", tests, setup, teardown);
}
