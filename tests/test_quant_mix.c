/*
 * test_quant_mix.c - the per-tensor type rules of the quantization mixes
 * (lib/convert/qmix.c) against llama.cpp, and their options.
 *
 * tests/ref/quantize/mix-<model>.tsv hold, for synthetic llama models
 * (GQA with a separate output; tied embeddings with ffn rows that are not
 * whole K-quant blocks; GQA with an importance matrix), the type
 * llama.cpp's llama_model_quantize gave every tensor for every mix
 * (tests/ref/gen_quantize_goldens.py). rvl_qmix_plan must give the same.
 * Then the pipeline on a small model written here: importance weights
 * reach the quantizer as in_sum2 / count, bad imatrix files and
 * requantizing are refused, dequant gives the kernels' floats, Ctrl-C and
 * failures leave nothing at OUT. Run from the repository root.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <unistd.h>

#include "formats.h"
#include "ruvllm.h"
#include "ruvllm_tools.h"

#define REF_DIR "tests/ref/quantize"
#define MAX_T 1024
#define NONE UINT32_MAX

typedef struct {
    char arch[32];
    uint32_t n_layer, n_head, n_head_kv, n_expert;
    bool imatrix;
    size_t n;
    char names[MAX_T][64];
    rvl_qmix_tensor t[MAX_T];
} model;

static uint32_t type_id(const char *name)
{
    int t = rvl_type_from_name(name);
    assert_true(t >= 0);
    return (uint32_t)t;
}

static rvl_qmix_params params_of(const model *m, const rvl_qmix *mix)
{
    rvl_qmix_params p = {0};
    p.mix = mix;
    p.arch = m->arch;
    p.n_layer = m->n_layer;
    p.n_head = m->n_head;
    p.n_head_kv = m->n_head_kv;
    p.n_expert = m->n_expert;
    p.has_imatrix = m->imatrix;
    p.output_type = p.embd_type = NONE;
    return p;
}

/* Check every "M MIX types..." line of a golden file; returns mixes checked. */
static int check_golden(const char *file)
{
    char path[256], line[16384];
    snprintf(path, sizeof path, "%s/%s", REF_DIR, file);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static model m;
    memset(&m, 0, sizeof m);
    int checked = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        unsigned v;
        if (sscanf(line, "# arch %31s", m.arch) == 1) continue;
        if (sscanf(line, "# n_layer %u", &v) == 1) { m.n_layer = v; continue; }
        if (sscanf(line, "# n_head %u", &v) == 1) { m.n_head = v; continue; }
        if (sscanf(line, "# n_head_kv %u", &v) == 1) { m.n_head_kv = v; continue; }
        if (sscanf(line, "# n_expert %u", &v) == 1) { m.n_expert = v; continue; }
        if (sscanf(line, "# imatrix %u", &v) == 1) { m.imatrix = v != 0; continue; }
        if (line[0] == 'T') {
            char name[64], type[16];
            unsigned nd;
            unsigned long long ne0, ne1, ne2;
            assert_int_equal(sscanf(line, "T\t%63s\t%15s\t%u\t%llu\t%llu\t%llu", name, type, &nd,
                                    &ne0, &ne1, &ne2), 6);
            assert_true(m.n < MAX_T);
            strcpy(m.names[m.n], name);
            m.t[m.n] = (rvl_qmix_tensor){m.names[m.n], type_id(type), nd, {ne0, ne1, ne2, 1}};
            m.n++;
            continue;
        }
        if (line[0] != 'M')
            continue;
        char *save, *tok = strtok_r(line + 2, "\t", &save);
        const rvl_qmix *mix = rvl_qmix_find(tok);
        assert_non_null(mix);
        rvl_qmix_params p = params_of(&m, mix);
        uint32_t got[MAX_T];
        assert_int_equal(rvl_qmix_plan(&p, m.t, m.n, got, NULL), 0);
        char *types = strtok_r(NULL, "\t", &save);
        size_t i = 0;
        for (char *s2, *ty = strtok_r(types, " ", &s2); ty; ty = strtok_r(NULL, " ", &s2), i++) {
            assert_true(i < m.n);
            if (got[i] != type_id(ty))
                fail_msg("%s %s: %s gets %s, llama.cpp gives %s", file, mix->name, m.names[i],
                         rvl_type_get(got[i])->name, ty);
        }
        assert_int_equal(i, m.n);
        checked++;
    }
    fclose(f);
    return checked;
}

static void test_qmix_matches_llamacpp_gqa_model(void **state)
{
    (void)state;
    assert_true(check_golden("mix-gqa.tsv") >= 19);
}

static void test_qmix_matches_llamacpp_with_imatrix(void **state)
{
    (void)state;
    assert_true(check_golden("mix-gqa-imatrix.tsv") >= 20);   /* + Q2_K_S */
}

static void test_qmix_matches_llamacpp_tied_model_and_fallbacks(void **state)
{
    (void)state;
    assert_true(check_golden("mix-tied.tsv") >= 19);
}

/* ---------------------------------------------------------------- hand-made cases */

/* A llama model of n_layer layers, width 4096, GQA 8 (attn_v rows of 1024). */
static size_t make_llama(rvl_qmix_tensor *t, char (*names)[64], uint32_t n_layer, bool tied,
                         uint32_t ffn_down_ne0)
{
    size_t n = 0;
#define ADD(nm, nd, a, b) do { snprintf(names[n], 64, "%s", nm); \
        t[n] = (rvl_qmix_tensor){names[n], nd == 1 ? RVL_TYPE_F32 : RVL_TYPE_F16, nd, {a, b, 1, 1}}; n++; } while (0)
    ADD("token_embd.weight", 2, 4096, 32000);
    ADD("output_norm.weight", 1, 4096, 1);
    if (!tied)
        ADD("output.weight", 2, 4096, 32000);
    for (uint32_t l = 0; l < n_layer; l++) {
        char b[64];
#define L(s, nd, a, bb) do { snprintf(b, sizeof b, "blk.%u." s, l); ADD(b, nd, a, bb); } while (0)
        L("attn_norm.weight", 1, 4096, 1);
        L("attn_q.weight", 2, 4096, 4096);
        L("attn_k.weight", 2, 4096, 1024);
        L("attn_v.weight", 2, 4096, 1024);
        L("attn_output.weight", 2, 4096, 4096);
        L("ffn_norm.weight", 1, 4096, 1);
        L("ffn_gate.weight", 2, 4096, 14336);
        L("ffn_up.weight", 2, 4096, 14336);
        L("ffn_down.weight", 2, ffn_down_ne0, 4096);
#undef L
    }
#undef ADD
    return n;
}

static uint32_t type_of(const rvl_qmix_tensor *t, const uint32_t *types, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return types[i];
    fail_msg("no tensor %s", name);
    return NONE;
}

static model mm;   /* large: not on the stack */

static void plan_llama(const char *mix, uint32_t n_layer, bool tied, uint32_t ffn_ne0,
                       rvl_qmix_params *p, uint32_t *types, size_t *n, size_t *nfb)
{
    strcpy(mm.arch, "llama");
    *n = make_llama(mm.t, mm.names, n_layer, tied, ffn_ne0);
    mm.n_layer = n_layer;
    mm.n_head = 32;
    mm.n_head_kv = 8;
    rvl_qmix_params q = params_of(&mm, rvl_qmix_find(mix));
    if (p) {
        q.pure = p->pure;
        q.leave_output = p->leave_output;
        q.overrides = p->overrides;
        q.n_overrides = p->n_overrides;
        q.output_type = p->output_type ? p->output_type : NONE;
        q.n_expert = p->n_expert;
        q.is_70b = p->is_70b;
    }
    assert_int_equal(rvl_qmix_plan(&q, mm.t, *n, types, nfb), 0);
}

static void test_qmix_names_and_aliases(void **state)
{
    (void)state;
    const rvl_qmix *m = rvl_qmix_find("q4_k_m");
    assert_non_null(m);
    assert_string_equal(m->name, "Q4_K_M");
    assert_int_equal(m->ftype, 15);
    assert_int_equal(m->type, RVL_TYPE_Q4_K);
    assert_int_equal(rvl_qmix_find("Q4_K")->ftype, 15);     /* alias */
    assert_int_equal(rvl_qmix_find("Q5_K")->ftype, 17);
    assert_int_equal(rvl_qmix_find("Q3_K")->ftype, 12);
    assert_int_equal(rvl_qmix_find("Q8_0")->ftype, 7);
    assert_int_equal(rvl_qmix_find("BF16")->ftype, 32);
    assert_int_equal(rvl_qmix_find("RVL_I4S_G64")->ftype, UINT32_MAX);
    assert_false(rvl_qmix_find("RVL_I4S_G64")->llama_rules);
    assert_null(rvl_qmix_find("Q4_K_X"));
    assert_null(rvl_qmix_find("IQ2_XXS"));   /* no quantizer yet */
    size_t n = 0;
    while (rvl_qmix_at(n))
        n++;
    assert_true(n >= 30);
}

static void test_qmix_q4_k_m_rules_on_a_wide_model(void **state)
{
    (void)state;
    static uint32_t ty[MAX_T];
    size_t n, nfb;
    plan_llama("Q4_K_M", 32, false, 14336, NULL, ty, &n, &nfb);
    assert_int_equal(nfb, 0);
    assert_int_equal(type_of(mm.t, ty, n, "output.weight"), RVL_TYPE_Q6_K);
    assert_int_equal(type_of(mm.t, ty, n, "token_embd.weight"), RVL_TYPE_Q4_K);
    assert_int_equal(type_of(mm.t, ty, n, "output_norm.weight"), RVL_TYPE_F32);
    assert_int_equal(type_of(mm.t, ty, n, "blk.0.attn_norm.weight"), RVL_TYPE_F32);
    /* use_more_bits(i, 32): i < 4, i >= 28, (i - 4) % 3 == 2 */
    static const int more[32] = {1, 1, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1,
                                 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1};
    for (int l = 0; l < 32; l++) {
        char b[64];
        uint32_t want = more[l] ? RVL_TYPE_Q6_K : RVL_TYPE_Q4_K;
        snprintf(b, sizeof b, "blk.%d.attn_v.weight", l);
        assert_int_equal(type_of(mm.t, ty, n, b), want);
        snprintf(b, sizeof b, "blk.%d.ffn_down.weight", l);
        assert_int_equal(type_of(mm.t, ty, n, b), want);
        snprintf(b, sizeof b, "blk.%d.attn_q.weight", l);
        assert_int_equal(type_of(mm.t, ty, n, b), RVL_TYPE_Q4_K);
    }
}

static void test_qmix_tied_embedding_takes_the_output_rule(void **state)
{
    (void)state;
    static uint32_t ty[MAX_T];
    size_t n;
    plan_llama("Q4_0", 4, true, 14336, NULL, ty, &n, NULL);
    assert_int_equal(type_of(mm.t, ty, n, "token_embd.weight"), RVL_TYPE_Q6_K);
    plan_llama("Q8_0", 4, true, 14336, NULL, ty, &n, NULL);
    assert_int_equal(type_of(mm.t, ty, n, "token_embd.weight"), RVL_TYPE_Q8_0);
    plan_llama("Q4_0", 4, false, 14336, NULL, ty, &n, NULL);
    assert_int_equal(type_of(mm.t, ty, n, "token_embd.weight"), RVL_TYPE_Q4_0);
    assert_int_equal(type_of(mm.t, ty, n, "output.weight"), RVL_TYPE_Q6_K);
}

static void test_qmix_rows_not_whole_blocks_fall_back(void **state)
{
    (void)state;
    static uint32_t ty[MAX_T];
    size_t n, nfb;
    /* ffn_down rows of 11008 = 43 x 256: ok; 11008 + 32 is not */
    plan_llama("Q4_K_S", 8, false, 11040, NULL, ty, &n, &nfb);
    assert_int_equal(nfb, 8);
    assert_int_equal(type_of(mm.t, ty, n, "blk.0.ffn_down.weight"), RVL_TYPE_Q5_1);  /* Q5_K wanted */
    assert_int_equal(type_of(mm.t, ty, n, "blk.5.ffn_down.weight"), RVL_TYPE_Q5_0);  /* Q4_K */
    plan_llama("Q6_K", 2, false, 11040, NULL, ty, &n, &nfb);
    assert_int_equal(type_of(mm.t, ty, n, "blk.1.ffn_down.weight"), RVL_TYPE_Q8_0);
    plan_llama("Q4_0", 2, false, 11010, NULL, ty, &n, &nfb);                       /* not /32 */
    assert_int_equal(type_of(mm.t, ty, n, "blk.1.ffn_down.weight"), RVL_TYPE_F16);
    assert_int_equal(nfb, 2);
    plan_llama("RVL_I4S_G128", 2, false, 11040, NULL, ty, &n, &nfb);               /* ours */
    assert_int_equal(type_of(mm.t, ty, n, "blk.1.ffn_down.weight"), RVL_TYPE_Q8_0);
    assert_int_equal(type_of(mm.t, ty, n, "blk.1.ffn_up.weight"), RVL_TYPE_RVL_I4S_G128);
    assert_int_equal(type_of(mm.t, ty, n, "output.weight"), RVL_TYPE_RVL_I4S_G128);
}

static void test_qmix_pure_and_leave_output(void **state)
{
    (void)state;
    static uint32_t ty[MAX_T];
    size_t n;
    rvl_qmix_params p = {0};
    p.pure = true;
    plan_llama("Q4_K_M", 8, false, 14336, &p, ty, &n, NULL);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ty[i], mm.t[i].n_dims == 1 ? RVL_TYPE_F32 : RVL_TYPE_Q4_K);
    p.pure = false;
    p.leave_output = true;
    plan_llama("Q4_K_M", 8, false, 14336, &p, ty, &n, NULL);
    assert_int_equal(type_of(mm.t, ty, n, "output.weight"), RVL_TYPE_F16);
    p.leave_output = false;
    p.output_type = RVL_TYPE_Q8_0;
    plan_llama("Q4_K_M", 8, false, 14336, &p, ty, &n, NULL);
    assert_int_equal(type_of(mm.t, ty, n, "output.weight"), RVL_TYPE_Q8_0);
}

static void test_qmix_overrides_first_match_wins(void **state)
{
    (void)state;
    static uint32_t ty[MAX_T];
    size_t n;
    const char *ov[] = {"blk\\.[01]\\.attn_(q|k)=q8_0", "attn_q=Q5_1"};
    rvl_qmix_params p = {0};
    p.overrides = ov;
    p.n_overrides = 2;
    plan_llama("Q4_K_M", 4, false, 14336, &p, ty, &n, NULL);
    assert_int_equal(type_of(mm.t, ty, n, "blk.0.attn_q.weight"), RVL_TYPE_Q8_0);
    assert_int_equal(type_of(mm.t, ty, n, "blk.1.attn_k.weight"), RVL_TYPE_Q8_0);
    assert_int_equal(type_of(mm.t, ty, n, "blk.2.attn_q.weight"), RVL_TYPE_Q5_1);
    assert_int_equal(type_of(mm.t, ty, n, "blk.2.attn_k.weight"), RVL_TYPE_Q4_K);
    assert_int_equal(type_of(mm.t, ty, n, "blk.0.attn_norm.weight"), RVL_TYPE_F32);
}

static void test_qmix_rejects_bad_overrides(void **state)
{
    (void)state;
    static uint32_t ty[MAX_T];
    size_t n = make_llama(mm.t, mm.names, 2, false, 14336);
    rvl_qmix_params p = params_of(&mm, rvl_qmix_find("Q4_0"));
    const char *bad[][1] = {{"attn_q"}, {"attn_q=Q9_9"}, {"attn_(q=q8_0"}, {"=q8_0"}, {"x=Q8_K"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p.overrides = bad[i];
        p.n_overrides = 1;
        assert_int_equal(rvl_qmix_plan(&p, mm.t, n, ty, NULL), RVL_EINVAL);
        assert_non_null(strstr(rvl_errmsg(), "--tensor-type"));
    }
}

static void test_qmix_70b_and_moe_attn_v(void **state)
{
    (void)state;
    static uint32_t ty[MAX_T];
    size_t n;
    rvl_qmix_params p = {0};
    p.is_70b = true;
    plan_llama("Q3_K_S", 80, false, 28672, &p, ty, &n, NULL);
    assert_int_equal(type_of(mm.t, ty, n, "blk.40.attn_v.weight"), RVL_TYPE_Q5_K);
    assert_int_equal(type_of(mm.t, ty, n, "blk.40.attn_q.weight"), RVL_TYPE_Q3_K);
    p.is_70b = false;
    p.n_expert = 8;
    plan_llama("Q4_K_M", 4, false, 14336, &p, ty, &n, NULL);
    assert_int_equal(type_of(mm.t, ty, n, "blk.1.attn_v.weight"), RVL_TYPE_Q8_0);
    assert_int_equal(type_of(mm.t, ty, n, "blk.1.attn_k.weight"), RVL_TYPE_Q8_0);
    assert_int_equal(type_of(mm.t, ty, n, "blk.1.attn_output.weight"), RVL_TYPE_Q5_K);
}

static void test_qmix_float_mixes_touch_only_matrices(void **state)
{
    (void)state;
    static uint32_t ty[MAX_T];
    size_t n;
    plan_llama("BF16", 2, false, 14336, NULL, ty, &n, NULL);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ty[i], mm.t[i].n_dims == 1 ? RVL_TYPE_F32 : RVL_TYPE_BF16);
}

static void test_qmix_needs_imatrix(void **state)
{
    (void)state;
    const rvl_qmix *s = rvl_qmix_find("Q2_K_S"), *k = rvl_qmix_find("Q2_K");
    assert_true(rvl_qmix_needs_imatrix(s, "blk.0.attn_q.weight", RVL_TYPE_Q2_K));
    assert_false(rvl_qmix_needs_imatrix(s, "blk.0.attn_q.weight", RVL_TYPE_Q4_K));
    assert_false(rvl_qmix_needs_imatrix(s, "token_embd.weight", RVL_TYPE_Q2_K));
    assert_false(rvl_qmix_needs_imatrix(s, "output.weight", RVL_TYPE_Q2_K));
    assert_false(rvl_qmix_needs_imatrix(k, "blk.0.attn_q.weight", RVL_TYPE_Q2_K));
    assert_true(rvl_qmix_needs_imatrix(k, "blk.0.attn_q.weight", RVL_TYPE_IQ2_XXS));
}


/* ---------------------------------------------------------------- the pipeline */

#define NE 64      /* row length */
#define NR 8       /* rows per matrix */

static char dir[] = "/tmp/ruvllm-test-qmix.XXXXXX";
static float wq[NR * NE], wd[NR * NE], emb[NR * NE], norm[NE];

static void path(char *buf, const char *name) { snprintf(buf, 512, "%s/%s", dir, name); }

static bool exists(const char *name)
{
    char p[512];
    path(p, name);
    return access(p, F_OK) == 0;
}

/* A one-layer llama GGUF: token_embd and two matrices in `type` (F32 or
 * Q8_0), an F32 norm. */
static void write_model(const char *name, uint32_t type)
{
    char p[512];
    rvl_gguf_writer *w;
    uint64_t ne2[2] = {NE, NR}, ne1[1] = {NE};
    static char qbuf[3][NR * NE * 4];
    const float *src[3] = {emb, wq, wd};
    const char *names[3] = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight"};
    path(p, name);
    assert_int_equal(rvl_gguf_writer_open(&w, p), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "general.architecture", "llama"), 0);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "llama.block_count", 1), 0);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "llama.attention.head_count", 4), 0);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "general.file_type", 0), 0);
    for (int i = 0; i < 3; i++) {
        const void *data = src[i];
        if (type != RVL_TYPE_F32) {
            const rvl_kformat *kf = rvl_kformat_get(type);
            for (int r = 0; r < NR; r++)
                kf->quantize(src[i] + r * NE, qbuf[i] + r * rvl_kformat_row_bytes(kf, NE), NE, NULL);
            data = qbuf[i];
        }
        assert_int_equal(rvl_gguf_writer_add_tensor(w, names[i], type, 2, ne2, data), 0);
    }
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", RVL_TYPE_F32, 1, ne1, norm), 0);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);
}

/* An imatrix GGUF with an entry for blk.0.ffn_down.weight of ne0 values. */
static void write_imatrix(const char *name, uint64_t ne0, float count, const float *sum2)
{
    char p[512];
    rvl_gguf_writer *w;
    uint64_t ne[2] = {ne0, 1}, nc[2] = {1, 1};
    path(p, name);
    assert_int_equal(rvl_gguf_writer_open(&w, p), 0);
    assert_int_equal(rvl_gguf_writer_kv_str(w, "general.type", "imatrix"), 0);
    assert_int_equal(rvl_gguf_writer_kv_u32(w, "imatrix.chunk_count", 3), 0);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "blk.0.ffn_down.weight.in_sum2", RVL_TYPE_F32, 2, ne, sum2), 0);
    assert_int_equal(rvl_gguf_writer_add_tensor(w, "blk.0.ffn_down.weight.counts", RVL_TYPE_F32, 2, nc, &count), 0);
    assert_int_equal(rvl_gguf_writer_finish(w), 0);
}

static int setup_dir(void **state)
{
    (void)state;
    if (!mkdtemp(dir))
        return -1;
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < NR * NE; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        float u = (float)((x >> 11) * (1.0 / 9007199254740992.0)) - 0.5f;
        wq[i] = u;
        wd[i] = u * u * u * 8;          /* heavy-tailed: importance matters */
        emb[i] = -u;
    }
    for (int i = 0; i < NE; i++)
        norm[i] = 1.0f + (float)i / NE;
    write_model("f32.gguf", RVL_TYPE_F32);
    write_model("q8.gguf", RVL_TYPE_Q8_0);
    return 0;
}

static int teardown_dir(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const void *tensor_data(const rvl_file *f, const char *name, uint32_t *type)
{
    const rvl_tensor_info *t = rvl_file_find_tensor(f, name);
    assert_non_null(t);
    *type = t->type;
    return t->data;
}

static rvl_quantize_params qparams(const char *mix)
{
    rvl_quantize_params p = {0};
    p.mix = mix;
    p.n_threads = 2;
    p.output_type = p.embd_type = UINT32_MAX;
    return p;
}

static void test_quantize_weights_rows_by_imatrix_sums_over_counts(void **state)
{
    (void)state;
    char in[512], out[512], im[512], out0[512];
    float sum2[NE], qw[NE];
    for (int i = 0; i < NE; i++) {
        sum2[i] = (float)((i * 37) % 11 + 1);
        qw[i] = sum2[i] / 4.0f;
    }
    write_imatrix("im.gguf", NE, 4.0f, sum2);
    path(in, "f32.gguf");
    path(out, "q4.gguf");
    path(out0, "q4-plain.gguf");
    path(im, "im.gguf");
    rvl_quantize_params p = qparams("Q4_0");
    p.pure = true;
    p.imatrix = im;
    rvl_quantize_report r;
    assert_int_equal(rvl_quantize_gguf(in, out, &p, &r), 0);
    assert_int_equal(r.n_tensors, 4);
    assert_int_equal(r.n_no_imatrix, 2);        /* token_embd and attn_q have no entry */
    rvl_quantize_report_free(&r);
    p.imatrix = NULL;
    assert_int_equal(rvl_quantize_gguf(in, out0, &p, NULL), 0);

    rvl_file *f, *f0;
    uint32_t ty;
    assert_int_equal(rvl_file_open(&f, out), 0);
    assert_int_equal(rvl_file_open(&f0, out0), 0);
    const rvl_kformat *kf = rvl_kformat_get(RVL_TYPE_Q4_0);
    size_t rb = (size_t)rvl_kformat_row_bytes(kf, NE);
    static char want[NR * 64], plain[NR * 64];
    for (int rr = 0; rr < NR; rr++) {
        kf->quantize(wd + rr * NE, want + rr * rb, NE, qw);
        kf->quantize(wd + rr * NE, plain + rr * rb, NE, NULL);
    }
    const void *got = tensor_data(f, "blk.0.ffn_down.weight", &ty);
    assert_int_equal(ty, RVL_TYPE_Q4_0);
    assert_memory_equal(got, want, NR * rb);
    assert_memory_not_equal(want, plain, NR * rb);   /* the weights changed something */
    assert_memory_equal(tensor_data(f0, "blk.0.ffn_down.weight", &ty), plain, NR * rb);
    /* tensors without an entry are quantized without weights in both */
    assert_memory_equal(tensor_data(f, "blk.0.attn_q.weight", &ty),
                        tensor_data(f0, "blk.0.attn_q.weight", &ty), NR * rb);
    const rvl_kv *kv = rvl_file_find_kv(f, "quantize.imatrix.chunks_count");
    assert_non_null(kv);
    rvl_file_close(f);
    rvl_file_close(f0);
}

static void test_quantize_refuses_bad_imatrix_files(void **state)
{
    (void)state;
    char in[512], out[512], im[512];
    float sum2[NE * 2] = {0};
    path(in, "f32.gguf");
    path(out, "bad.gguf");
    path(im, "im-bad.gguf");
    rvl_quantize_params p = qparams("Q4_0");
    p.imatrix = im;
    write_imatrix("im-bad.gguf", NE * 2, 1.0f, sum2);      /* wrong row length */
    assert_int_equal(rvl_quantize_gguf(in, out, &p, NULL), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "blk.0.ffn_down.weight"));
    p.imatrix = in;                                        /* a model, not an imatrix */
    assert_int_equal(rvl_quantize_gguf(in, out, &p, NULL), RVL_EFORMAT);
    assert_non_null(strstr(rvl_errmsg(), "no imatrix entries"));
    float inf = INFINITY;
    write_imatrix("im-bad.gguf", 1, 1.0f, &inf);
    p.imatrix = im;
    assert_int_equal(rvl_quantize_gguf(in, out, &p, NULL), RVL_EFORMAT);
    assert_false(exists("bad.gguf"));
}

static void test_quantize_requantizes_only_when_allowed(void **state)
{
    (void)state;
    char in[512], out[512];
    path(in, "q8.gguf");
    path(out, "rq.gguf");
    rvl_quantize_params p = qparams("Q4_0");
    assert_int_equal(rvl_quantize_gguf(in, out, &p, NULL), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "is already Q8_0"));
    assert_false(exists("rq.gguf"));
    p.allow_requantize = true;
    assert_int_equal(rvl_quantize_gguf(in, out, &p, NULL), 0);
    assert_true(exists("rq.gguf"));
    /* Q8_0 to Q8_0: copied, not requantized */
    p = qparams("Q8_0");
    rvl_quantize_report r;
    assert_int_equal(rvl_quantize_gguf(in, out, &p, &r), 0);
    assert_int_equal(r.bytes_in, r.bytes_out);
    rvl_quantize_report_free(&r);
}

static void test_quantize_refuses_output_over_input_and_unknown_mix(void **state)
{
    (void)state;
    char in[512];
    path(in, "f32.gguf");
    rvl_quantize_params p = qparams("Q4_0");
    assert_int_equal(rvl_quantize_gguf(in, in, &p, NULL), RVL_EINVAL);
    p.mix = "Q4_Z";
    assert_int_equal(rvl_quantize_gguf(in, "/nonexistent/x.gguf", &p, NULL), RVL_EINVAL);
    assert_non_null(strstr(rvl_errmsg(), "Q4_Z"));
    rvl_dequant_params d = {RVL_TYPE_F16, NULL, NULL};
    assert_int_equal(rvl_dequant_gguf(in, in, &d), RVL_EINVAL);
}

static void test_dequant_gives_the_kernels_floats(void **state)
{
    (void)state;
    char in[512], out[512];
    path(in, "q8.gguf");
    path(out, "deq.gguf");
    rvl_dequant_params d = {RVL_TYPE_F32, NULL, NULL};
    assert_int_equal(rvl_dequant_gguf(in, out, &d), 0);
    rvl_file *fi, *fo;
    uint32_t ti, to;
    assert_int_equal(rvl_file_open(&fi, in), 0);
    assert_int_equal(rvl_file_open(&fo, out), 0);
    const void *q = tensor_data(fi, "blk.0.attn_q.weight", &ti);
    const void *x = tensor_data(fo, "blk.0.attn_q.weight", &to);
    assert_int_equal(to, RVL_TYPE_F32);
    static float want[NR * NE];
    const rvl_kformat *kf = rvl_kformat_get(RVL_TYPE_Q8_0);
    for (int r = 0; r < NR; r++)
        kf->dequantize((const char *)q + r * rvl_kformat_row_bytes(kf, NE), want + r * NE, NE);
    assert_memory_equal(x, want, sizeof want);
    assert_memory_equal(tensor_data(fo, "blk.0.attn_norm.weight", &to), norm, sizeof norm);
    uint64_t ft;
    assert_int_equal(rvl_kv_get_u64(rvl_file_find_kv(fo, "general.file_type"), &ft), 0);
    assert_int_equal(ft, 0);
    rvl_file_close(fi);
    rvl_file_close(fo);
}

static void test_interrupted_conversions_leave_nothing(void **state)
{
    (void)state;
    char in[512], out[512];
    path(in, "f32.gguf");
    path(out, "int.gguf");
    rvl_interrupt_install();
    raise(SIGINT);                      /* the first signal only sets the flag */
    assert_true(rvl_interrupted());
    rvl_quantize_params p = qparams("Q4_0");
    assert_int_equal(rvl_quantize_gguf(in, out, &p, NULL), RVL_EINTR);
    rvl_dequant_params d = {RVL_TYPE_F16, NULL, NULL};
    assert_int_equal(rvl_dequant_gguf(in, out, &d), RVL_EINTR);
    rvl_interrupt_clear();
    assert_false(exists("int.gguf"));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q tmp", dir);
    assert_int_not_equal(system(cmd), 0);   /* no temporaries either */
}

static void test_dry_run_writes_nothing_and_reports_sizes(void **state)
{
    (void)state;
    char in[512];
    path(in, "f32.gguf");
    rvl_quantize_params p = qparams("Q8_0");
    p.dry_run = true;
    rvl_quantize_report r;
    assert_int_equal(rvl_quantize_gguf(in, NULL, &p, &r), 0);
    assert_int_equal(r.n_tensors, 4);
    assert_int_equal(r.bytes_out, 3 * NR * (NE / 32) * 34 + NE * 4);
    assert_int_equal(r.file_bytes, 0);
    rvl_quantize_report_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qmix_matches_llamacpp_gqa_model),
        cmocka_unit_test(test_qmix_matches_llamacpp_with_imatrix),
        cmocka_unit_test(test_qmix_matches_llamacpp_tied_model_and_fallbacks),
        cmocka_unit_test(test_qmix_names_and_aliases),
        cmocka_unit_test(test_qmix_q4_k_m_rules_on_a_wide_model),
        cmocka_unit_test(test_qmix_tied_embedding_takes_the_output_rule),
        cmocka_unit_test(test_qmix_rows_not_whole_blocks_fall_back),
        cmocka_unit_test(test_qmix_pure_and_leave_output),
        cmocka_unit_test(test_qmix_overrides_first_match_wins),
        cmocka_unit_test(test_qmix_rejects_bad_overrides),
        cmocka_unit_test(test_qmix_70b_and_moe_attn_v),
        cmocka_unit_test(test_qmix_float_mixes_touch_only_matrices),
        cmocka_unit_test(test_qmix_needs_imatrix),
    };
    const struct CMUnitTest pipeline[] = {
        cmocka_unit_test(test_quantize_weights_rows_by_imatrix_sums_over_counts),
        cmocka_unit_test(test_quantize_refuses_bad_imatrix_files),
        cmocka_unit_test(test_quantize_requantizes_only_when_allowed),
        cmocka_unit_test(test_quantize_refuses_output_over_input_and_unknown_mix),
        cmocka_unit_test(test_dequant_gives_the_kernels_floats),
        cmocka_unit_test(test_interrupted_conversions_leave_nothing),
        cmocka_unit_test(test_dry_run_writes_nothing_and_reports_sizes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    return rc | cmocka_run_group_tests(pipeline, setup_dir, teardown_dir);
}
